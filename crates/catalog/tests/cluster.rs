//! The cluster's shared tables (`permafrost_catalog::cluster`) on the test PostgreSQL server: one database per
//! test (the shared tables live in a fixed schema, so tests must not share a database).

mod common;

use permafrost_catalog::cluster::{node_store_url, ClusterDb, DirEntry, Health};
use permafrost_catalog::{CatalogError, ListQuery, WriteCondition};

fn entry(bucket: &str, key: &str, etag: &str, ms: u64) -> DirEntry {
    DirEntry {
        bucket: bucket.into(),
        key: key.into(),
        size_bytes: 10,
        etag: etag.into(),
        last_modified_ms: ms,
        content_type: None,
    }
}

#[test]
fn nodes_join_heartbeat_and_time_out() {
    let Some(url) = common::fresh_database("cl") else {
        return;
    };
    let db = ClusterDb::connect(&url, 400).unwrap();
    let id = db.cluster("c").unwrap();
    // The id is made once; another name is refused.
    assert_eq!(
        ClusterDb::connect(&url, 400).unwrap().cluster("c").unwrap(),
        id
    );
    let e = db.cluster("other").unwrap_err().to_string();
    assert!(e.contains("holds cluster \"c\""), "{e}");
    let a = db.join(&id, "a", "inst-a", "127.0.0.1:1", 100, 5).unwrap();
    let b = db.join(&id, "b", "inst-b", "127.0.0.1:2", 100, 7).unwrap();
    // The same instance joins again (a restart); another instance may not take the name.
    assert_eq!(
        db.join(&id, "a", "inst-a", "127.0.0.1:3", 100, 5).unwrap(),
        a
    );
    let e = db
        .join(&id, "a", "inst-x", "127.0.0.1:4", 0, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("already taken"), "{e}");
    let nodes = db.nodes().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0].address, "127.0.0.1:3");
    assert!(nodes.iter().all(|n| n.health == Health::Up));
    std::thread::sleep(std::time::Duration::from_millis(700));
    db.heartbeat(b.node_id, 200, 9).unwrap();
    let nodes = db.nodes().unwrap();
    assert_eq!(nodes[0].health, Health::Down, "{nodes:?}");
    assert_eq!(nodes[1].health, Health::Up);
    assert_eq!((nodes[1].capacity_bytes, nodes[1].used_bytes), (200, 9));
    // Lost: a heartbeat older than lost_after_ms (the database's clock), here a (> 700 ms), not b.
    let lost = db.lost_nodes(600).unwrap();
    assert_eq!(
        lost.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(lost[0].health, Health::Down);
    assert!(db.lost_nodes(60_000).unwrap().is_empty());
    db.heartbeat(a.node_id, 100, 5).unwrap();
    assert!(db.lost_nodes(600).unwrap().is_empty());
}

#[test]
fn the_directory_follows_publish_delete_and_reconcile() {
    let Some(url) = common::fresh_database("cl") else {
        return;
    };
    let db = ClusterDb::connect(&url, 10_000).unwrap();
    let id = db.cluster("c").unwrap();
    let a = db.join(&id, "a", "ia", "h:1", 0, 0).unwrap().node_id;
    let b = db.join(&id, "b", "ib", "h:2", 0, 0).unwrap().node_id;
    db.add_bucket("bk").unwrap();
    db.publish(a, &entry("bk", "x/1", "e1", 100)).unwrap();
    db.publish(a, &entry("bk", "x/2", "e2", 100)).unwrap();
    db.publish(b, &entry("bk", "y", "e3", 100)).unwrap();
    // b writes a newer x/1: a's older row goes; a's stale copy cannot come back by publishing.
    db.publish(b, &entry("bk", "x/1", "e4", 200)).unwrap();
    db.publish(a, &entry("bk", "x/1", "e1", 100)).unwrap();
    let holders = db.holders("bk", "x/1").unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].0.name.as_str(), holders[0].1.etag.as_str()),
        ("b", "e4")
    );
    // Listing with a delimiter, from the directory.
    let page = db
        .list_objects(
            "bk",
            &ListQuery {
                prefix: String::new(),
                delimiter: Some("/".into()),
                start_after: None,
                max_keys: 1000,
            },
        )
        .unwrap();
    assert_eq!(page.common_prefixes, vec!["x/".to_string()]);
    assert_eq!(page.objects.len(), 1);
    assert_eq!(page.objects[0].key, "y");
    assert!(matches!(
        db.list_objects("none", &ListQuery::default()),
        Err(CatalogError::NoSuchBucket(_))
    ));
    // A bucket with objects cannot go.
    assert!(matches!(
        db.remove_bucket("bk"),
        Err(CatalogError::BucketNotEmpty(_))
    ));
    // a restarts holding only x/2 and a new z (a crash lost a publish and a delete): reconcile repairs both.
    db.unpublish(b, "bk", "y").unwrap();
    let (published, removed) = db
        .reconcile(
            a,
            &[entry("bk", "x/2", "e2", 100), entry("bk", "z", "e5", 300)],
            2,
        )
        .unwrap();
    assert_eq!((published, removed), (1, 0));
    // The write whose publish was lost still needs its copies (2 by the default given): recorded for the
    // catch-up, with the one holder the reconcile knows of.
    let short: Vec<(String, u32, u32)> = db
        .under_replicated()
        .unwrap()
        .into_iter()
        .map(|u| (u.key, u.wanted, u.held))
        .collect();
    assert_eq!(short, vec![("z".to_string(), 2, 1)]);
    let (published, removed) = db.reconcile(a, &[entry("bk", "z", "e5", 300)], 1).unwrap();
    assert_eq!((published, removed), (0, 1));
    let keys: Vec<String> = db
        .list_objects("bk", &ListQuery::default())
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(keys, ["x/1", "z"]);
    assert!(db.holders("bk", "y").unwrap().is_empty());
}

#[test]
fn node_store_urls_select_the_node_schema() {
    assert_eq!(
        node_store_url("postgresql://u:p@h:5432/db", "n1").unwrap(),
        "postgresql://u:p@h:5432/db?options=-csearch_path%3Dpf_node_n1"
    );
    assert_eq!(
        node_store_url("postgresql://h/db?connect_timeout=5", "n1").unwrap(),
        "postgresql://h/db?connect_timeout=5&options=-csearch_path%3Dpf_node_n1"
    );
    let e = node_store_url("postgresql://u:secret@h/db?options=-cx%3Dy", "n1")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("must not set options=") && !e.contains("secret"),
        "{e}"
    );
}

#[test]
fn copies_delete_everywhere_leaves_tombstones_and_under_replication_is_recorded() {
    let Some(url) = common::fresh_database("cl") else {
        return;
    };
    let db = ClusterDb::connect(&url, 10_000).unwrap();
    let id = db.cluster("c").unwrap();
    let a = db
        .join(&id, "a", "ia", "127.0.0.1:1", 1, 0)
        .unwrap()
        .node_id;
    let b = db
        .join(&id, "b", "ib", "127.0.0.1:2", 1, 0)
        .unwrap()
        .node_id;
    let c = db
        .join(&id, "c", "ic", "127.0.0.1:3", 1, 0)
        .unwrap()
        .node_id;
    // Relay addresses, published by each node.
    db.set_relay_address(a, "127.0.0.1:11").unwrap();
    db.set_relay_address(b, "127.0.0.1:12").unwrap();
    assert_eq!(
        db.relay_addresses().unwrap(),
        vec![
            ("a".to_string(), "127.0.0.1:11".to_string()),
            ("b".to_string(), "127.0.0.1:12".to_string())
        ]
    );
    // A bucket's own copies; unknown buckets refused.
    db.add_bucket("bk").unwrap();
    assert_eq!(db.bucket_copies("bk").unwrap(), None);
    db.set_bucket_copies("bk", Some(3)).unwrap();
    assert_eq!(db.bucket_copies("bk").unwrap(), Some(3));
    db.set_bucket_copies("bk", None).unwrap();
    assert_eq!(db.bucket_copies("bk").unwrap(), None);
    assert!(matches!(
        db.set_bucket_copies("nope", Some(2)),
        Err(CatalogError::NoSuchBucket(_))
    ));
    // Three holders of one version; the DELETE on a: every row goes, b and c get tombstones.
    let x = entry("bk", "x", "e1", 100);
    for n in [a, b, c] {
        db.publish(n, &x).unwrap();
    }
    db.record_copies(&x, 4, 3).unwrap();
    assert_eq!(db.under_replicated().unwrap().len(), 1);
    let mut others = db.delete_everywhere(a, "bk", "x").unwrap();
    others.sort();
    assert_eq!(others, vec!["b", "c"]);
    assert!(db.holders("bk", "x").unwrap().is_empty());
    assert!(db.under_replicated().unwrap().is_empty());
    assert!(db.tombstones(a).unwrap().is_empty());
    let t = db.tombstone(b, "bk", "x").unwrap().unwrap();
    assert_eq!((t.etag.as_str(), t.last_modified_ms), ("e1", 100));
    // b was down: at its return its reconcile would publish x again; applying the tombstone (clear) drops the
    // row of that version even if it came back meanwhile, and a newer version is kept.
    db.publish(b, &x).unwrap();
    db.clear_tombstone(b, &t).unwrap();
    assert!(db.holders("bk", "x").unwrap().is_empty());
    assert!(db.tombstones(b).unwrap().is_empty());
    let newer = entry("bk", "x", "e2", 200);
    db.publish(c, &newer).unwrap();
    let tc = db.tombstones(c).unwrap().remove(0);
    db.clear_tombstone(c, &tc).unwrap();
    assert_eq!(db.holders("bk", "x").unwrap().len(), 1);
    // Under-replication: recorded when short, replaced by a newer version's full record.
    db.record_copies(&newer, 2, 1).unwrap();
    let u = db.under_replicated().unwrap();
    assert_eq!((u[0].wanted, u[0].held, u[0].etag.as_str()), (2, 1, "e2"));
    db.record_copies(&newer, 2, 2).unwrap();
    assert!(db.under_replicated().unwrap().is_empty());
}

#[test]
fn a_write_is_published_as_under_replicated_until_its_copies_are_recorded() {
    let Some(url) = common::fresh_database("cl") else {
        return;
    };
    let db = ClusterDb::connect(&url, 10_000).unwrap();
    let id = db.cluster("c").unwrap();
    let [a, b] = ["a", "b"].map(|n| {
        db.join(&id, n, &format!("i{n}"), "127.0.0.1:1", 1, 0)
            .unwrap()
            .node_id
    });
    let short = |db: &ClusterDb| -> Vec<(String, String, u32, u32)> {
        db.under_replicated()
            .unwrap()
            .into_iter()
            .map(|u| (u.bucket, u.key, u.wanted, u.held))
            .collect()
    };
    // The cluster default decides for a bucket without its own setting: 1 copy records nothing.
    db.publish_write(a, &entry("one", "k", "e1", 100), 1)
        .unwrap();
    assert!(short(&db).is_empty());
    assert_eq!(db.holders("one", "k").unwrap().len(), 1);
    // Default 2: published and recorded as held once, in one step; the copies' record clears it.
    let x = entry("two", "k", "e1", 100);
    db.publish_write(a, &x, 2).unwrap();
    assert_eq!(short(&db), vec![("two".into(), "k".into(), 2, 1)]);
    db.publish(b, &x).unwrap();
    db.record_copies(&x, 2, 2).unwrap();
    assert!(short(&db).is_empty());
    // The bucket's own setting wins over the default, both ways; a parity bucket keeps no whole copies.
    db.add_bucket("own").unwrap();
    db.set_bucket_copies("own", Some(3)).unwrap();
    db.publish_write(a, &entry("own", "k", "e1", 100), 1)
        .unwrap();
    assert_eq!(short(&db), vec![("own".into(), "k".into(), 3, 1)]);
    db.set_bucket_copies("own", Some(1)).unwrap();
    db.publish_write(a, &entry("own", "k", "e2", 200), 2)
        .unwrap();
    assert!(
        short(&db).is_empty(),
        "a newer version with 1 copy ends the old record"
    );
    db.add_bucket("par").unwrap();
    db.set_bucket_parity("par", Some("xor")).unwrap();
    db.publish_write(a, &entry("par", "k", "e1", 100), 2)
        .unwrap();
    assert!(short(&db).is_empty());
    // A newer version elsewhere: nothing published, nothing recorded.
    db.publish(b, &entry("two", "n", "e9", 900)).unwrap();
    db.publish_write(a, &entry("two", "n", "e1", 100), 2)
        .unwrap();
    assert!(short(&db).is_empty());
    assert_eq!(db.holders("two", "n").unwrap().len(), 1);
}

#[test]
fn a_lost_node_s_copies_are_retired_and_a_copy_of_a_deleted_version_is_not_published() {
    let Some(url) = common::fresh_database("cl") else {
        return;
    };
    let db = ClusterDb::connect(&url, 200).unwrap();
    let id = db.cluster("c").unwrap();
    let [a, b, c] = ["a", "b", "c"].map(|n| {
        db.join(&id, n, &format!("i{n}"), "127.0.0.1:1", 1, 0)
            .unwrap()
            .node_id
    });
    db.add_bucket("bk").unwrap();
    let x = entry("bk", "x", "e1", 100);
    let only_c = entry("bk", "y", "e2", 100);
    db.publish(a, &x).unwrap();
    db.publish(c, &x).unwrap();
    db.publish(c, &only_c).unwrap();
    // Nobody is lost yet.
    assert!(db.retire_lost(500, 10).unwrap().is_empty());
    // c stops beating; a and b go on.
    std::thread::sleep(std::time::Duration::from_millis(700));
    db.heartbeat(a, 1, 0).unwrap();
    db.heartbeat(b, 1, 0).unwrap();
    let retired = db.retire_lost(500, 10).unwrap();
    assert_eq!(retired.len(), 1, "{retired:?}");
    assert_eq!(
        (retired[0].node.as_str(), retired[0].key.as_str()),
        ("c", "x")
    );
    // x: c's row gone, c's tombstone left, x recorded as short of one copy; y (no other holder) stays on c.
    let held: Vec<String> = db
        .holders("bk", "x")
        .unwrap()
        .into_iter()
        .map(|(n, _)| n.name)
        .collect();
    assert_eq!(held, ["a"]);
    assert_eq!(db.tombstone(c, "bk", "x").unwrap().unwrap().etag, "e1");
    let u = db.under_replicated().unwrap();
    assert_eq!(
        (u.len(), u[0].key.as_str(), u[0].wanted, u[0].held),
        (1, "x", 2, 1)
    );
    assert_eq!(db.holders("bk", "y").unwrap().len(), 1);
    assert!(db.retire_lost(500, 10).unwrap().is_empty(), "done once");
    // A copy arriving at b while a still holds the version: marked before its commit, published, unmarked.
    db.mark_copy(b, &x).unwrap();
    assert!(db.publish_copy(b, &x).unwrap());
    assert!(db.tombstone(b, "bk", "x").unwrap().is_none());
    // A copy of a version no other node holds any more (deleted while on its way): refused, no row.
    let mut others = db.delete_everywhere(a, "bk", "x").unwrap();
    others.sort();
    assert_eq!(others, ["b"]);
    assert!(!db.publish_copy(b, &x).unwrap());
    assert!(db.holders("bk", "x").unwrap().is_empty());
    // A copy whose mark is gone (its node applied it: the copy was deleted): refused although the origin still
    // holds it.
    db.publish(a, &x).unwrap();
    let t = db.tombstone(c, "bk", "x").unwrap().unwrap();
    db.clear_tombstone(c, &t).unwrap();
    assert!(!db.publish_copy(c, &x).unwrap());
    // A copy older than what the directory holds: refused.
    db.publish(a, &entry("bk", "x", "e3", 300)).unwrap();
    assert!(!db.publish_copy(b, &x).unwrap());
    assert_eq!(db.holders("bk", "x").unwrap().len(), 1);
}

#[test]
fn a_conditional_publish_is_decided_by_the_directory_and_one_of_two_racing_creates_wins() {
    let Some(url) = common::fresh_database("cl") else {
        return;
    };
    let db = ClusterDb::connect(&url, 10_000).unwrap();
    let id = db.cluster("c").unwrap();
    let [a, b] = ["a", "b"].map(|n| {
        db.join(&id, n, &format!("i{n}"), "127.0.0.1:1", 1, 0)
            .unwrap()
            .node_id
    });
    let absent = WriteCondition::Absent;
    let matches =
        |tags: &[&str]| WriteCondition::EtagMatches(tags.iter().map(|t| t.to_string()).collect());
    let etags = |db: &ClusterDb, key: &str| -> Vec<(String, String)> {
        db.holders("b", key)
            .unwrap()
            .into_iter()
            .map(|(n, e)| (n.name, e.etag))
            .collect()
    };
    // If-None-Match: a key another node holds is refused, and nothing changes.
    db.publish_write_if(a, &entry("b", "k", "ea", 100), 1, &absent)
        .unwrap();
    let e = db
        .publish_write_if(b, &entry("b", "k", "eb", 200), 1, &absent)
        .unwrap_err();
    assert!(matches!(e, CatalogError::PreconditionFailed(_)), "{e}");
    assert_eq!(etags(&db, "k"), [("a".into(), "ea".into())]);
    // Published again (a retried completion, or its copy's row): its own version does not count.
    db.publish_write_if(a, &entry("b", "k", "ea", 100), 1, &absent)
        .unwrap();
    db.publish(b, &entry("b", "k", "ea", 100)).unwrap();
    db.publish_write_if(a, &entry("b", "k", "ea", 100), 1, &absent)
        .unwrap();
    // If-Match through another node: the directory's current version decides, with or without quotes.
    let e = db
        .publish_write_if(b, &entry("b", "k", "eb", 200), 1, &matches(&["\"other\""]))
        .unwrap_err();
    assert!(matches!(e, CatalogError::PreconditionFailed(_)), "{e}");
    db.publish_write_if(b, &entry("b", "k", "eb", 200), 1, &matches(&["\"ea\""]))
        .unwrap();
    assert_eq!(etags(&db, "k"), [("b".into(), "eb".into())]);
    // The old ETag no longer matches; a key that exists nowhere is NoSuchKey.
    let e = db
        .publish_write_if(a, &entry("b", "k", "ec", 300), 1, &matches(&["ea"]))
        .unwrap_err();
    assert!(matches!(e, CatalogError::PreconditionFailed(_)), "{e}");
    let e = db
        .publish_write_if(a, &entry("b", "none", "ec", 300), 1, &matches(&["*"]))
        .unwrap_err();
    assert!(matches!(e, CatalogError::NoSuchKey { .. }), "{e}");
    // Deleted everywhere: absent again.
    db.delete_everywhere(b, "b", "k").unwrap();
    db.publish_write_if(a, &entry("b", "k", "ed", 400), 1, &absent)
        .unwrap();
    // A newer version on another node (its clock ahead): the write would never be current, refused.
    db.publish(b, &entry("b", "late", "e1", 900)).unwrap();
    let e = db
        .publish_write_if(a, &entry("b", "late", "e2", 100), 1, &matches(&["e1"]))
        .unwrap_err();
    assert!(matches!(e, CatalogError::PreconditionFailed(_)), "{e}");
    // Two nodes racing to create each key, each through its own connection: exactly one wins every round.
    let dbs = [a, b].map(|n| (n, ClusterDb::connect(&url, 10_000).unwrap()));
    for round in 0..20 {
        let key = format!("race-{round}");
        let barrier = std::sync::Barrier::new(2);
        let won: Vec<bool> = std::thread::scope(|s| {
            let runs: Vec<_> = dbs
                .iter()
                .map(|(n, db)| {
                    let (key, barrier) = (&key, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        let x = entry("b", key, &format!("e{n}"), 1000 + *n as u64);
                        match db.publish_write_if(*n, &x, 1, &WriteCondition::Absent) {
                            Ok(()) => true,
                            Err(CatalogError::PreconditionFailed(_)) => false,
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(
            won.iter().filter(|w| **w).count(),
            1,
            "round {round}: {won:?}"
        );
        assert_eq!(db.holders("b", &key).unwrap().len(), 1, "round {round}");
    }
}
