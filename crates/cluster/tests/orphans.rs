//! Orphan fragments are collected after the grace period (issue 31): a fragment stored in a node's fragments
//! bucket by a placement that never published it is deleted once it has been seen unlisted for the grace
//! period, while a published fragment, one published late (between two passes) and one younger than the grace
//! stay. Runs on the test PostgreSQL server (`PERMAFROST_TEST_PG_URL`, started by scripts/test;
//! `PERMAFROST_TEST_NO_PG=1` skips on purpose), one fresh database per test.

use std::time::Duration;

use permafrost_catalog::cluster::{
    fragment_key, ClusterDb, DirEntry, NewFragment, FRAGMENTS_BUCKET,
};
use permafrost_cluster::orphans::{collected, OrphanCollector};
use permafrost_store::{BucketSettings, ListQuery, PutOptions, Store};

/// The catalog suite's PostgreSQL helpers (`fresh_database`: a new database on the test server).
#[path = "../../catalog/tests/common/mod.rs"]
mod common;

mod setup;
use setup::config;

fn entry(key: &str, etag: &str) -> DirEntry {
    DirEntry {
        bucket: "p".into(),
        key: key.into(),
        size_bytes: 12,
        etag: etag.into(),
        last_modified_ms: 1000,
        content_type: None,
    }
}

/// Publish `e` as parity with fragment `a` on `mine` and the others on `b`, `c`.
fn publish(db: &ClusterDb, mine: i64, others: [i64; 2], e: &DirEntry) {
    db.publish(mine, e).unwrap();
    let frag = |role: &str, node_id: i64| NewFragment {
        role: role.into(),
        node_id,
        blake3: "00".repeat(32),
    };
    assert!(db
        .publish_parity(
            mine,
            e,
            "{}",
            &[frag("a", mine), frag("b", others[0]), frag("p", others[1])]
        )
        .unwrap());
}

fn fragments_held(store: &Store) -> Vec<String> {
    store
        .list_objects(
            FRAGMENTS_BUCKET,
            &ListQuery {
                max_keys: 1000,
                ..ListQuery::default()
            },
        )
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect()
}

#[test]
fn unpublished_fragments_are_collected_after_the_grace_period_and_published_or_young_ones_stay() {
    let Some(url) = common::fresh_database("orphans") else {
        return;
    };
    let db = ClusterDb::connect(&url, 5_000).unwrap();
    let cluster = db.cluster("c").unwrap();
    let ids: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            db.join(&cluster, n, n, "127.0.0.1:1", 1 << 30, 0)
                .unwrap()
                .node_id
        })
        .collect();
    let (me, others) = (ids[0], [ids[1], ids[2]]);
    db.add_bucket("p").unwrap();
    db.set_bucket_parity("p", Some("xor")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    // No fragments bucket yet: nothing to do, not an error.
    let mut collector = OrphanCollector::new(300);
    assert_eq!(collector.pass(&store, &db, me).unwrap().collected, 0);
    store
        .create_bucket(FRAGMENTS_BUCKET, BucketSettings::default())
        .unwrap();
    let put = |key: &str| {
        store
            .put_object(
                FRAGMENTS_BUCKET,
                key,
                PutOptions::default(),
                b"fragment 12b",
            )
            .unwrap();
        key.to_owned()
    };

    // Published: listed for this node.
    let kept = entry("kept", "\"e1\"");
    publish(&db, me, others, &kept);
    let published = put(&fragment_key("p", "kept", "\"e1\"", "a"));
    // A forced partial placement: stored here, never published (a key with slashes).
    let orphan = put(&fragment_key("p", "dir/orphan", "\"e2\"", "a"));
    // Stored before the first pass, published after it (a placement in flight).
    let late = put(&fragment_key("p", "late", "\"e4\"", "a"));

    let first = collector.pass(&store, &db, me).unwrap();
    assert_eq!((first.collected, first.waiting), (0, 2), "{first:?}");
    assert_eq!(
        fragments_held(&store).len(),
        3,
        "nothing deleted within the grace period"
    );

    publish(&db, me, others, &entry("late", "\"e4\""));
    std::thread::sleep(Duration::from_millis(400));
    // Stored after the first pass: younger than the grace period at the second.
    let fresh = put(&fragment_key("p", "fresh", "\"e3\"", "a"));
    let before = collected();

    let second = collector.pass(&store, &db, me).unwrap();
    assert_eq!(
        (second.collected, second.collected_bytes, second.waiting),
        (1, 12, 1),
        "{second:?}"
    );
    let mut held = fragments_held(&store);
    held.sort();
    let mut expected = vec![published.clone(), late.clone(), fresh.clone()];
    expected.sort();
    assert_eq!(held, expected, "only the old orphan {orphan} is gone");
    let after = collected();
    assert!(
        after.0 > before.0 && after.1 >= before.1 + 12,
        "{before:?} {after:?}"
    );

    // Once the fresh one has been unlisted for the grace period too: 0 orphans left.
    std::thread::sleep(Duration::from_millis(400));
    let third = collector.pass(&store, &db, me).unwrap();
    assert_eq!((third.collected, third.waiting), (1, 0), "{third:?}");
    let mut held = fragments_held(&store);
    held.sort();
    let mut expected = vec![published, late];
    expected.sort();
    assert_eq!(held, expected);
    let idle = collector.pass(&store, &db, me).unwrap();
    assert_eq!((idle.collected, idle.waiting), (0, 0), "{idle:?}");
}
