//! A copy received from another node is covered by a tombstone of its version (its mark) from before its local
//! commit until its publish (`permafrost_catalog::cluster::rules`): a copy committed and never published (a
//! crash between the two) is deleted by its node's tombstone pass and never published by its reconcile, so a
//! copy that lands after its key's DELETE was acknowledged cannot bring the object back. Runs on the test
//! PostgreSQL server (`PERMAFROST_TEST_PG_URL`, started by scripts/test; `PERMAFROST_TEST_NO_PG=1` skips on
//! purpose), one fresh database per test.

use std::sync::{Arc, Mutex};

use permafrost_catalog::cluster::{ClusterDb, DirEntry};
use permafrost_cluster::{copy_sink, runtime, ClusterNode, Receiving, Replication};
use permafrost_relay::{Header, Hop, ObjectMeta, Op};
use permafrost_store::{BucketSettings, PutOptions, ReplicaOf, Store, StoreError};

/// The catalog suite's PostgreSQL helpers (`fresh_database`: a new database on the test server).
#[path = "../../catalog/tests/common/mod.rs"]
mod common;

mod setup;
use setup::config;

const BODY: &[u8] = b"the copy's bytes";

fn entry(key: &str, etag: &str, last_modified_ms: u64) -> DirEntry {
    DirEntry {
        bucket: "bkt".into(),
        key: key.into(),
        size_bytes: BODY.len() as u64,
        etag: etag.into(),
        last_modified_ms,
        content_type: None,
    }
}

/// What the copy sink commits before its publish: the copy with the origin's ETag and time.
fn commit_copy(store: &Store, e: &DirEntry) {
    store
        .put_object(
            &e.bucket,
            &e.key,
            PutOptions {
                replica_of: Some(ReplicaOf {
                    etag: e.etag.clone(),
                    last_modified_ms: e.last_modified_ms,
                }),
                ..PutOptions::default()
            },
            BODY,
        )
        .unwrap();
}

fn held(store: &Store, key: &str) -> bool {
    match store.head_object("bkt", key) {
        Ok(_) => true,
        Err(StoreError::NoSuchKey { .. }) => false,
        Err(e) => panic!("{e}"),
    }
}

fn holders(db: &ClusterDb, key: &str) -> Vec<String> {
    db.holders("bkt", key)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n.name)
        .collect()
}

#[test]
fn a_received_copy_never_published_is_deleted_not_republished() {
    let Some(url) = common::fresh_database("received") else {
        return;
    };
    let db = Arc::new(ClusterDb::connect(&url, 5_000).unwrap());
    let cluster = db.cluster("c").unwrap();
    let a = db
        .join(&cluster, "a", "inst-a", "127.0.0.1:1", 1 << 30, 0)
        .unwrap()
        .node_id;
    let b = db
        .join(&cluster, "b", "inst-b", "127.0.0.1:2", 1 << 30, 0)
        .unwrap()
        .node_id;
    let node = Arc::new(ClusterNode {
        db: Arc::clone(&db),
        node_id: b,
        node_name: "b".into(),
        replication: Replication {
            copies: 2,
            ..Replication::default()
        },
        copying: Default::default(),
        directory_behind: Default::default(),
        receiving: Default::default(),
    });
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), config()).unwrap());
    store
        .create_bucket("bkt", BucketSettings::default())
        .unwrap();
    let sinks = copy_sink(
        Arc::new(Mutex::new(Some(Arc::clone(&store)))),
        Arc::clone(&node),
    );
    let send = |e: &DirEntry| {
        let header = Header {
            version: permafrost_relay::wire::VERSION,
            op: Op::Replicate,
            transfer: format!("t-{}", e.key),
            object_bytes: BODY.len() as u64,
            piece_bytes: 1 << 20,
            hop: Hop {
                name: "b".into(),
                addr: "127.0.0.1:2".into(),
                children: Vec::new(),
            },
            object: Some(ObjectMeta {
                bucket: e.bucket.clone(),
                key: e.key.clone(),
                etag: e.etag.clone(),
                last_modified_ms: e.last_modified_ms,
                ..ObjectMeta::default()
            }),
        };
        let mut sink = sinks(&header)?;
        sink.write_piece(0, BODY)?;
        sink.finish()
    };

    // A copy through the sink while its origin lists the version: published, its mark gone.
    let x = entry("x", "ex", 1_000);
    db.publish_write(a, &x, 2).unwrap();
    send(&x).unwrap();
    assert_eq!(holders(&db, "x"), ["a", "b"]);
    assert!(db.tombstone(b, "bkt", "x").unwrap().is_none());
    assert!(held(&store, "x"));

    // A copy through the sink after its key's DELETE: refused and dropped (as before marks).
    let y = entry("y", "ey", 2_000);
    db.publish_write(a, &y, 2).unwrap();
    db.delete_everywhere(a, "bkt", "y").unwrap();
    runtime::apply_tombstones(&store, &db, b, &node.receiving).unwrap();
    let e = send(&y).expect_err("a copy of a deleted version was acknowledged");
    assert!(e.to_string().contains("was deleted or replaced"), "{e}");
    assert!(!held(&store, "y"));

    // The gap: the DELETE acknowledged and b's tombstone applied and cleared, then the copy lands: marked and
    // committed, and b crashes before its publish. At its restart the mark deletes the copy before the
    // reconcile, and the reconcile publishes nothing of it.
    let z = entry("z", "ez", 3_000);
    db.publish_write(a, &z, 2).unwrap();
    db.delete_everywhere(a, "bkt", "z").unwrap();
    runtime::apply_tombstones(&store, &db, b, &node.receiving).unwrap();
    assert!(db.tombstone(b, "bkt", "z").unwrap().is_none());
    db.mark_copy(b, &z).unwrap();
    commit_copy(&store, &z);
    let (published, _) = runtime::reconcile(&store, &db, b, 2, &Receiving::default()).unwrap();
    assert_eq!(published, 0, "the reconcile published something");
    assert!(holders(&db, "z").is_empty(), "the deleted object came back");
    assert!(!held(&store, "z"), "the copy never published stayed");
    assert!(db.tombstone(b, "bkt", "z").unwrap().is_none());

    // The same crash for a version still current: the copy goes too (its sender counted it as failed), and the
    // directory keeps recording the version as short of copies, for the catch-up.
    let w = entry("w", "ew", 4_000);
    db.publish_write(a, &w, 2).unwrap();
    db.mark_copy(b, &w).unwrap();
    commit_copy(&store, &w);
    runtime::reconcile(&store, &db, b, 2, &Receiving::default()).unwrap();
    assert_eq!(holders(&db, "w"), ["a"]);
    assert!(!held(&store, "w"));
    assert!(db.under_replicated().unwrap().iter().any(|u| u.key == "w"));

    // A reconcile while a copy is arriving (committed, not yet published): neither published by the reconcile
    // nor deleted by its tombstone pass; the copy's own publish then lists it and removes its mark.
    let v = entry("v", "ev", 5_000);
    db.publish_write(a, &v, 2).unwrap();
    let arriving = node.receiving.enter("bkt", "v");
    db.mark_copy(b, &v).unwrap();
    commit_copy(&store, &v);
    runtime::reconcile(&store, &db, b, 2, &node.receiving).unwrap();
    assert_eq!(holders(&db, "v"), ["a"]);
    assert!(
        held(&store, "v"),
        "a tombstone pass deleted a copy on its way"
    );
    assert!(db.publish_copy(b, &v).unwrap());
    drop(arriving);
    assert_eq!(
        runtime::apply_tombstones(&store, &db, b, &node.receiving).unwrap(),
        0
    );
    assert_eq!(holders(&db, "v"), ["a", "b"]);
    assert!(held(&store, "v"));

    // A tombstone pass that listed a copy's mark just before the copy's publish removed it (seen in the
    // end-to-end suite: a copy acknowledged, then deleted 13 ms later with its row, leaving one copy of an
    // acknowledged two-copy write): the published copy stays, and so does its row.
    let u = entry("u", "eu", 6_000);
    db.publish_write(a, &u, 2).unwrap();
    let arriving = node.receiving.enter("bkt", "u");
    db.mark_copy(b, &u).unwrap();
    commit_copy(&store, &u);
    let listed = db.tombstones(b).unwrap();
    assert!(listed.iter().any(|t| t.key == "u"));
    assert!(db.publish_copy(b, &u).unwrap());
    drop(arriving);
    assert_eq!(
        runtime::apply_listed_tombstones(&store, &db, b, &node.receiving, &listed).unwrap(),
        0
    );
    assert!(
        held(&store, "u"),
        "a published copy was deleted by its stale mark"
    );
    assert_eq!(holders(&db, "u"), ["a", "b"]);
}
