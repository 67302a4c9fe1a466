//! A node of a cluster answers a write only after its copies are made (issue 13): a write whose copies cannot
//! be made because the node cannot read its own store back is an error (`503` to the client), never an
//! acknowledgement with one copy. Runs on the test PostgreSQL server (`PERMAFROST_TEST_PG_URL`, started by
//! scripts/test; `PERMAFROST_TEST_NO_PG=1` skips on purpose), one fresh database per test.

use std::sync::Arc;

use permafrost_catalog::cluster::{ClusterDb, DirEntry};
use permafrost_cluster::{ClusterNode, Replication};
use permafrost_store::{BucketSettings, PutOptions, Store};

/// The catalog suite's PostgreSQL helpers (`fresh_database`: a new database on the test server).
#[path = "../../catalog/tests/common/mod.rs"]
mod common;

mod setup;
use setup::config;

#[test]
fn a_write_whose_store_cannot_be_read_back_is_not_acknowledged_with_one_copy() {
    let Some(url) = common::fresh_database("s3copies") else {
        return;
    };
    let db = Arc::new(ClusterDb::connect(&url, 5_000).unwrap());
    let cluster = db.cluster("c").unwrap();
    let a = db
        .join(&cluster, "a", "inst-a", "127.0.0.1:1", 1 << 30, 0)
        .unwrap();
    db.join(&cluster, "b", "inst-b", "127.0.0.1:2", 1 << 30, 0)
        .unwrap();
    let node = ClusterNode {
        db: Arc::clone(&db),
        node_id: a.node_id,
        node_name: "a".into(),
        replication: Replication {
            copies: 2,
            ..Replication::default()
        },
        copying: Default::default(),
        directory_behind: Default::default(),
        receiving: Default::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store
        .create_bucket("bkt", BucketSettings::default())
        .unwrap();
    for key in ["gone", "kept", "broken"] {
        let info = store
            .put_object("bkt", key, PutOptions::default(), b"seven bytes and more")
            .unwrap();
        db.publish_write(
            a.node_id,
            &DirEntry {
                bucket: "bkt".into(),
                key: key.into(),
                size_bytes: info.size_bytes,
                etag: info.etag,
                last_modified_ms: info.last_modified_ms,
                content_type: None,
            },
            2,
        )
        .unwrap();
    }

    // Deleted before its copies: nothing to copy, not an error (the DELETE won the race).
    store.delete_object("bkt", "gone").unwrap();
    assert_eq!(
        node.replicate_blocking(&store, "bkt", "gone", None)
            .unwrap(),
        0
    );
    // Node b runs no relay: one copy, answered and recorded as under-replicated (the catch-up makes the other).
    assert_eq!(
        node.replicate_blocking(&store, "bkt", "kept", None)
            .unwrap(),
        1
    );
    let short = || -> Vec<String> {
        let mut keys: Vec<String> = db
            .under_replicated()
            .unwrap()
            .into_iter()
            .map(|u| u.key)
            .collect();
        keys.sort();
        keys
    };
    // Each write was recorded as short of copies when it was published; "gone" waits for the catch-up to see
    // it deleted, "kept" for a node to copy to.
    assert_eq!(short(), ["broken", "gone", "kept"]);

    // The node's own catalog fails between the local commit and the copies (its objects table gone, as a
    // database that went away fails every statement): the write is an error, not a one-copy acknowledgement.
    rusqlite::Connection::open(dir.path().join("catalog.sqlite"))
        .unwrap()
        .execute_batch("DROP TABLE objects")
        .unwrap();
    let e = node
        .replicate_blocking(&store, "bkt", "broken", None)
        .expect_err("a write whose copies were not made was answered as done")
        .to_string();
    assert!(
        e.contains("bkt/broken") && e.contains("cannot read it back"),
        "{e}"
    );
    // It stays recorded as short of copies: the catch-up makes them once the store can be read again.
    assert!(short().contains(&"broken".to_string()));
}
