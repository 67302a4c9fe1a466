//! The back ends the catalog suite runs on: every test function takes a [`Backend`] and `both!` makes one
//! `#[test]` per back end (`sqlite::NAME`, `postgres::NAME`).
//!
//! PostgreSQL tests need a server: `PERMAFROST_TEST_PG_URL` (scripts/test starts a throwaway cluster with
//! scripts/pg-cluster.sh and exports it). Without it they fail, unless `PERMAFROST_TEST_NO_PG=1` says to skip
//! them on purpose. Each test gets its own schema on that server (an empty catalog).
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use permafrost_catalog::{
    ContentId, Encoding, NewContent, ObjectAttributes, ObjectRecord, PostgresOptions, SqlCatalog,
    SqliteOptions, StoredForm,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Keeps what a test's catalog lives in (the SQLite file's directory).
pub struct Guard(pub Option<tempfile::TempDir>);

/// The PostgreSQL server's URL; `None` when the tests are skipped on purpose. Panics when it is missing.
pub fn pg_url() -> Option<String> {
    match std::env::var("PERMAFROST_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("PERMAFROST_TEST_NO_PG").as_deref() == Ok("1") => {
            eprintln!("PERMAFROST_TEST_NO_PG=1: PostgreSQL catalog test skipped");
            None
        }
        _ => panic!(
            "PERMAFROST_TEST_PG_URL is not set: the PostgreSQL catalog tests need a server \
             (`eval \"$(bash scripts/pg-cluster.sh start)\"` starts a throwaway one, scripts/test does it), \
             or set PERMAFROST_TEST_NO_PG=1 to skip them"
        ),
    }
}

/// A name no other test of any run uses: `prefix`, the process id, the clock's nanoseconds and a counter.
fn unique_name(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}{}_{}_{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A new, empty schema on the test server; the URL that selects it.
pub fn pg_schema_url(url: &str) -> String {
    let schema = unique_name("t");
    let mut client = postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL server: {e}"));
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-csearch_path%3D{schema}")
}

/// A new database on the test server, named `prefix…`; its URL (`None`: PostgreSQL skipped on purpose).
pub fn fresh_database(prefix: &str) -> Option<String> {
    let url = pg_url()?;
    let name = unique_name(prefix);
    let mut client = postgres::Client::connect(&url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL server: {e}"));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let base = url.split('?').next().unwrap();
    Some(format!("{}/{name}", base.rsplit_once('/').unwrap().0))
}

/// An empty catalog on `backend` (`None`: PostgreSQL skipped on purpose).
pub fn try_open(backend: Backend) -> Option<(Guard, SqlCatalog)> {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let catalog = SqlCatalog::open_with(
                &dir.path().join("catalog.sqlite"),
                SqliteOptions { durable: false },
            )
            .unwrap();
            Some((Guard(Some(dir)), catalog))
        }
        Backend::Postgres => {
            let url = pg_schema_url(&pg_url()?);
            let catalog = SqlCatalog::open_postgres(&url, PostgresOptions::default()).unwrap();
            assert_eq!(catalog.backend_name(), "postgresql");
            Some((Guard(None), catalog))
        }
    }
}

/// An empty catalog on `backend`; the test body is not reached when PostgreSQL is skipped on purpose.
pub fn open(backend: Backend) -> (Guard, SqlCatalog) {
    try_open(backend).expect("checked by both!")
}

/// One `#[test]` per back end for each test function `fn NAME(b: Backend)`.
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                super::$name(super::common::Backend::Sqlite)
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                if super::common::pg_url().is_some() {
                    super::$name(super::common::Backend::Postgres)
                }
            })*
        }
    };
}

/// The content id of test content `n` (every hash byte `n`).
pub fn cid(n: u8) -> ContentId {
    ContentId {
        hash: [n; 32],
        encoding: Encoding::Identity,
    }
}

/// A 100-byte raw content `n`, cached at `c/n`.
pub fn new_content(n: u8) -> NewContent {
    NewContent {
        id: cid(n),
        logical_bytes: 100,
        stored_bytes: 100,
        stored_form: StoredForm::Raw,
        chunk_index: Vec::new(),
        md5: [n; 16],
        cache_path: format!("c/{n}"),
        inline: None,
    }
}

/// Object `key` in bucket `b` naming content `n`, etag `"en"`.
pub fn object(key: &str, n: u8) -> ObjectRecord {
    ObjectRecord {
        bucket: "b".into(),
        key: key.into(),
        content: cid(n),
        size_bytes: 100,
        etag: format!("\"e{n}\""),
        last_modified_ms: 1,
        content_type: None,
        user_metadata: Vec::new(),
        checksums: Vec::new(),
        dataset: "b".into(),
        version_id: String::new(),
        attributes: ObjectAttributes::default(),
        expires_ms: None,
    }
}

/// The three fragments of an XOR parity object (`a`, `b`, `p`) on the nodes `ids`, with made-up hashes.
pub fn frags(ids: [i64; 3]) -> Vec<permafrost_catalog::cluster::NewFragment> {
    ["a", "b", "p"]
        .iter()
        .zip(ids)
        .map(|(role, node_id)| permafrost_catalog::cluster::NewFragment {
            role: role.to_string(),
            node_id,
            blake3: format!("hash-{role}"),
        })
        .collect()
}
