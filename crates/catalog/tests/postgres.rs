//! What only the PostgreSQL back end has: transactions retried on serialization failures (injected by the
//! server, and from real conflicts between sessions), several catalogs sharing one database, reopening, and a
//! clear error at start when the URL does not lead to a usable PostgreSQL. Needs `PERMAFROST_TEST_PG_URL`
//! (see `common`).

use std::io::{Read, Write};
use std::sync::Arc;

use permafrost_catalog::*;

mod common;
use common::{cid, new_content, object};

/// A catalog on a new schema, and the URL of that schema (for more catalogs on the same database).
fn open_pg(options: PostgresOptions) -> Option<(String, SqlCatalog)> {
    let url = common::pg_schema_url(&common::pg_url()?);
    let c = SqlCatalog::open_postgres(&url, options).unwrap();
    Some((url, c))
}

#[test]
fn injected_serialization_failures_are_retried_and_the_change_lands_once() {
    let Some((_, c)) = open_pg(PostgresOptions::default()) else {
        return;
    };
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    let before = c.retries();
    c.inject_serialization_failures(3);
    let outcome = c.put_object(&object("k", 1), &new_content(1), 5).unwrap();
    assert!(!outcome.deduplicated);
    assert_eq!(
        c.retries() - before,
        3,
        "three failed commits, three retries"
    );
    // The body ran four times; the change is there once.
    let (o, content) = c.get_object("b", "k").unwrap().unwrap();
    assert_eq!(o.content, cid(1));
    assert_eq!(content.refcount, 1);
    assert!(c.check().unwrap().is_empty());
    // A read-only call is retried the same way.
    c.inject_serialization_failures(2);
    assert_eq!(c.list_buckets().unwrap().len(), 1);
    assert_eq!(c.retries() - before, 5);
}

#[test]
fn a_transaction_that_keeps_failing_gives_up_with_a_clear_error_and_changes_nothing() {
    let Some((_, c)) = open_pg(PostgresOptions {
        max_attempts: 3,
        ..Default::default()
    }) else {
        return;
    };
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    c.inject_serialization_failures(3);
    let e = c
        .put_object(&object("k", 1), &new_content(1), 5)
        .unwrap_err();
    let message = e.to_string();
    assert!(
        message.contains("gave up after 3 attempts") && message.contains("40001"),
        "{message}"
    );
    assert!(matches!(e, CatalogError::Database { .. }), "{e:?}");
    assert_eq!(c.retries(), 2);
    assert!(c.get_object("b", "k").unwrap().is_none());
    assert!(c.get_content(&cid(1)).unwrap().is_none());
    // The next call succeeds.
    c.put_object(&object("k", 1), &new_content(1), 5).unwrap();
    assert!(c.get_object("b", "k").unwrap().is_some());
}

#[test]
fn conflicting_transactions_of_several_catalogs_are_retried_and_all_land() {
    let Some((url, first)) = open_pg(PostgresOptions::default()) else {
        return;
    };
    first
        .create_bucket("b", &BucketSettings::default())
        .unwrap();
    // Four catalogs (as four nodes would), each with two threads, all putting keys that share one content:
    // every put changes that content's reference count, so concurrent transactions conflict.
    let catalogs: Vec<Arc<SqlCatalog>> = (0..4)
        .map(|_| Arc::new(SqlCatalog::open_postgres(&url, PostgresOptions::default()).unwrap()))
        .collect();
    const PUTS: usize = 40;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let c = Arc::clone(&catalogs[t % 4]);
            std::thread::spawn(move || {
                for i in 0..PUTS {
                    c.put_object(&object(&format!("t{t}/{i}"), 7), &new_content(7), 5)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let retries: u64 = catalogs.iter().map(|c| c.retries()).sum();
    assert!(
        retries > 0,
        "8 threads changing one row saw no serialization failure"
    );
    drop(catalogs);
    drop(first);
    // Everything acknowledged is there for a catalog opened afterwards.
    let c = SqlCatalog::open_postgres(&url, PostgresOptions::default()).unwrap();
    for t in 0..8 {
        for i in 0..PUTS {
            assert!(c.get_object("b", &format!("t{t}/{i}")).unwrap().is_some());
        }
    }
    assert_eq!(
        c.get_content(&cid(7)).unwrap().unwrap().refcount,
        8 * PUTS as u64
    );
    assert!(c.check().unwrap().is_empty());
    eprintln!("{retries} retries for {} puts", 8 * PUTS);
}

#[test]
fn a_reopened_catalog_keeps_its_rows_and_refuses_a_newer_schema() {
    let Some((url, c)) = open_pg(PostgresOptions::default()) else {
        return;
    };
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    c.put_object(&object("k", 1), &new_content(1), 5).unwrap();
    drop(c);
    let c = SqlCatalog::open_postgres(&url, PostgresOptions::default()).unwrap();
    assert!(c.get_object("b", "k").unwrap().is_some());
    drop(c);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        .unwrap();
    let e = SqlCatalog::open_postgres(&url, PostgresOptions::default())
        .err()
        .expect("a newer schema is refused");
    assert!(e.to_string().contains("schema version 99"), "{e}");
}

/// The error of opening `url`, which must name `shown` and never `secret`.
fn start_error(url: &str, shown: &str, secret: &str) -> String {
    let options = PostgresOptions {
        connect_timeout: std::time::Duration::from_secs(5),
        ..Default::default()
    };
    let e = SqlCatalog::open_postgres(url, options)
        .err()
        .expect("opening fails");
    let message = e.to_string();
    assert!(matches!(e, CatalogError::Unreachable(_)), "{e:?}");
    assert!(message.contains(shown), "{message:?} should name {shown}");
    assert!(!message.contains(secret), "{message:?} shows the password");
    message
}

#[test]
fn an_unusable_url_is_a_clear_error_at_start_without_the_password() {
    let Some(url) = common::pg_url() else {
        return;
    };
    // Nothing listens there.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let m = start_error(
        &format!("postgresql://me:hunter2@127.0.0.1:{closed}/db"),
        &format!("postgresql://me@127.0.0.1:{closed}/db"),
        "hunter2",
    );
    assert!(m.contains("cannot connect"), "{m}");

    // The test server, with a wrong password.
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, hostpart) = rest.split_once('@').unwrap();
    let user = userinfo.split(':').next().unwrap();
    let m = start_error(
        &format!("{scheme}://{user}:wrong-secret@{hostpart}"),
        &format!("{scheme}://{user}@{hostpart}"),
        "wrong-secret",
    );
    assert!(m.contains("refused the login"), "{m}");

    // Something that is not PostgreSQL: it answers the startup message with HTTP.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    start_error(
        &format!("postgresql://me:hunter2@127.0.0.1:{port}/db"),
        &format!("postgresql://me@127.0.0.1:{port}/db"),
        "hunter2",
    );
    server.join().unwrap();

    // Not a URL at all.
    start_error(
        "mysql://me:hunter2@host/db",
        "mysql://me@host/db",
        "hunter2",
    );
}

#[test]
fn a_bucket_access_row_keeps_its_cors_configuration() {
    let Some((url, c)) = open_pg(PostgresOptions::default()) else {
        return;
    };
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    let record = BucketAccessRecord {
        bucket: "b".into(),
        acl: "{}".into(),
        cors: Some(r#"[{"origins":["*"],"methods":["GET"]}]"#.into()),
        ..Default::default()
    };
    c.set_bucket_access(&record).unwrap();
    drop(c);
    let c = SqlCatalog::open_postgres(&url, PostgresOptions::default()).unwrap();
    assert_eq!(c.buckets_access().unwrap(), vec![record.clone()]);
    c.set_bucket_access(&BucketAccessRecord {
        cors: None,
        ..record
    })
    .unwrap();
    assert_eq!(c.buckets_access().unwrap()[0].cors, None);
}
