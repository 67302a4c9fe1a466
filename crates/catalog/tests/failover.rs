//! The catalog on a PostgreSQL primary with a synchronous standby (scripts/pg-standby.sh): one URL naming both
//! servers, the standby never written to, the primary SIGKILLed, the standby promoted, and the same catalog
//! objects (never reopened) writing again on the promoted standby with everything they wrote before. Needs root
//! and Debian's `postgresql` (scripts/setup-deps.sh); skipped with the reason otherwise.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use permafrost_catalog::cluster::{access_url, node_store_url, ClusterDb};
use permafrost_catalog::*;

struct Pair {
    env: HashMap<String, String>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-standby.sh")
}

impl Pair {
    fn start() -> Option<Pair> {
        let root = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&root.stdout).trim() != "0" {
            eprintln!(
                "skipped: the failover test starts PostgreSQL as the postgres user: run as root"
            );
            return None;
        }
        if glob_initdb().is_none() {
            eprintln!("skipped: no PostgreSQL server (/usr/lib/postgresql/*/bin/initdb): run scripts/setup-deps.sh");
            return None;
        }
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg-standby.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
            .collect();
        Some(Pair { env })
    }

    fn get(&self, key: &str) -> &str {
        &self.env[key]
    }

    fn run(&self, args: &[&str]) {
        let out = Command::new("bash")
            .arg(script())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg-standby.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(self.get("PERMAFROST_TEST_PG_DIR"))
            .output();
    }
}

fn glob_initdb() -> Option<PathBuf> {
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin/initdb"))
        .find(|p| p.exists())
}

/// Which server (`port`) a new session of `url` lands on.
fn server_port(url: &str) -> u16 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let port: i32 = client
        .query_one("SELECT inet_server_port()", &[])
        .unwrap()
        .get(0);
    port as u16
}

#[test]
fn the_catalog_follows_a_promoted_standby_without_reopening() {
    let Some(pair) = Pair::start() else { return };
    let url = pair.get("PERMAFROST_TEST_PG_URL").to_owned();
    let kv_url = pair.get("PERMAFROST_TEST_PG_KV_URL").to_owned();
    let primary_port: u16 = pair.get("PERMAFROST_TEST_PG_PRIMARY_PORT").parse().unwrap();
    let standby_port: u16 = pair.get("PERMAFROST_TEST_PG_STANDBY_PORT").parse().unwrap();
    let password = kv_url
        .split("password=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert_eq!(server_port(&url), primary_port);

    // Asking for anything but a writable server is refused, clearly and without the password.
    let any = url.replace(
        "target_session_attrs=read-write",
        "target_session_attrs=any",
    );
    let e = ClusterDb::connect(&any, 3000)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("target_session_attrs must be read-write"), "{e}");
    assert!(!e.contains(password), "{e}");

    // Without target_session_attrs the catalog asks for read-write itself: with the standby listed first it
    // still writes to the primary (the standby would refuse, and is never chosen).
    let standby_first = url
        .replace(
            &format!("127.0.0.1:{primary_port},127.0.0.1:{standby_port}"),
            &format!("127.0.0.1:{standby_port},127.0.0.1:{primary_port}"),
        )
        .replace("?target_session_attrs=read-write", "");
    assert!(!standby_first.contains("target_session_attrs"));
    let cluster = ClusterDb::connect(&standby_first, 3000).unwrap();
    cluster.cluster("failover").unwrap();
    // The node's schema is made by the node at start; here by hand on the primary.
    {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute("CREATE SCHEMA pf_node_n1; CREATE SCHEMA pf_access")
            .unwrap();
    }
    let store = SqlCatalog::open_postgres(
        &node_store_url(&kv_url, "n1").unwrap(),
        PostgresOptions {
            connect_timeout: Duration::from_secs(2),
            ..PostgresOptions::default()
        },
    )
    .unwrap();
    let access = SqlCatalog::open_postgres(&access_url(&url), PostgresOptions::default()).unwrap();
    for i in 0..20 {
        store
            .create_bucket(&format!("before{i}"), &BucketSettings::default())
            .unwrap();
    }
    access
        .create_bucket("access-before", &BucketSettings::default())
        .unwrap();
    let joined = cluster
        .join(
            &cluster.cluster("failover").unwrap(),
            "n1",
            "i1",
            "127.0.0.1:1",
            10,
            0,
        )
        .unwrap();

    // The primary's postmaster SIGKILLed: every call fails, with a hint, and none reaches the standby.
    let pid: i32 = pair.get("PERMAFROST_TEST_PG_PRIMARY_PID").parse().unwrap();
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(Duration::from_millis(500));
    // The first call may meet its idle session's end (57P01: the backend saw its postmaster die); that session
    // is dropped and the next call tries to connect.
    let mut errors = Vec::new();
    for _ in 0..2 {
        errors.push(
            store
                .create_bucket("during", &BucketSettings::default())
                .expect_err("a write with the primary dead and the standby not promoted")
                .to_string(),
        );
    }
    let error = errors.pop().unwrap();
    assert!(
        error.contains("cannot connect")
            && error.contains("no server of the URL accepts writes now"),
        "{error}"
    );
    assert!(cluster.heartbeat(joined.node_id, 10, 0).is_err());
    assert!(
        store.get_bucket("before0").is_err(),
        "a read on the standby"
    );

    // Promoted: the same objects write again, on the standby's port, with everything acknowledged before.
    pair.run(&["promote", pair.get("PERMAFROST_TEST_PG_DIR"), "b"]);
    let promoted = Instant::now();
    let deadline = promoted + Duration::from_secs(30);
    while store
        .create_bucket("after", &BucketSettings::default())
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "no write within 30 s of the promotion"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "first write {} ms after the promotion returned",
        promoted.elapsed().as_millis()
    );
    assert_eq!(server_port(&url), standby_port);
    for i in 0..20 {
        assert!(store.get_bucket(&format!("before{i}")).unwrap().is_some());
    }
    assert!(store.get_bucket("during").unwrap().is_none());
    assert!(access.get_bucket("access-before").unwrap().is_some());
    access
        .create_bucket("access-after", &BucketSettings::default())
        .unwrap();
    cluster.heartbeat(joined.node_id, 10, 0).unwrap();
    assert_eq!(cluster.nodes().unwrap().len(), 1);

    // The old primary back as the synchronous standby of the new one: writes go on, still to b.
    pair.run(&["rejoin", pair.get("PERMAFROST_TEST_PG_DIR"), "a", "b"]);
    store
        .create_bucket("after-rejoin", &BucketSettings::default())
        .unwrap();
    assert_eq!(server_port(&url), standby_port);
}

#[test]
fn store_and_access_urls_select_their_schema_in_both_url_forms() {
    assert_eq!(
        node_store_url(
            "host=a,b port=5432,5433 user=u dbname=d target_session_attrs=read-write",
            "n1"
        )
        .unwrap(),
        "host=a,b port=5432,5433 user=u dbname=d target_session_attrs=read-write \
         options=-csearch_path=pf_node_n1"
    );
    assert_eq!(
        node_store_url("postgresql://u@a:1,b:2/d?target_session_attrs=read-write", "n1").unwrap(),
        "postgresql://u@a:1,b:2/d?target_session_attrs=read-write&options=-csearch_path%3Dpf_node_n1"
    );
    assert_eq!(
        access_url("host=a,b dbname=d"),
        "host=a,b dbname=d options=-csearch_path=pf_access"
    );
}
