//! XOR parity with no free node for a lost holder's fragment (`ClusterDb::parity_to_copies`, docs/cluster.md
//! "Cross-node XOR parity", "No free node") on the test PostgreSQL server: the object switches to whole copies
//! only once both surviving holders published theirs, its fragments go with a tombstone per holder, it is recorded
//! under-replicated (3 wanted, 2 held); re-encoded later (`publish_parity`), every whole copy of that version is
//! retired with a tombstone for the holders other than the publisher.

mod common;

use common::frags;

use permafrost_catalog::cluster::{
    fragment_key, ClusterDb, DirEntry, FRAGMENTS_BUCKET, PARITY_HOLDER,
};

fn entry() -> DirEntry {
    DirEntry {
        bucket: "p".into(),
        key: "k".into(),
        size_bytes: 11,
        etag: "\"e1\"".into(),
        last_modified_ms: 1000,
        content_type: None,
    }
}

#[test]
fn a_parity_object_switches_to_two_whole_copies_then_back_to_fragments() {
    let Some(url) = common::fresh_database("cxh") else {
        return;
    };
    let db = ClusterDb::connect(&url, 10_000).unwrap();
    let id = db.cluster("c").unwrap();
    let ids: Vec<i64> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| db.join(&id, n, n, "127.0.0.1:1", 0, 0).unwrap().node_id)
        .collect();
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    db.add_bucket("p").unwrap();
    db.set_bucket_parity("p", Some("xor")).unwrap();
    let v1 = entry();
    db.publish(a, &v1).unwrap();
    assert!(db.publish_parity(a, &v1, "{}", &frags([a, b, c])).unwrap());

    // c is lost; a and b are the keepers. Not before both published a whole copy.
    assert!(!db.parity_to_copies(&v1, &[a, b]).unwrap());
    db.publish(a, &v1).unwrap();
    assert!(!db.parity_to_copies(&v1, &[a, b]).unwrap());
    assert!(
        db.parity_object("p", "k").unwrap().is_some(),
        "still parity"
    );
    db.publish(b, &v1).unwrap();
    assert!(db.parity_to_copies(&v1, &[a, b]).unwrap());
    assert!(!db.parity_to_copies(&v1, &[a, b]).unwrap(), "done once");
    assert!(db.parity_object("p", "k").unwrap().is_none());
    let holders: Vec<String> = db
        .holders("p", "k")
        .unwrap()
        .into_iter()
        .map(|(n, _)| n.name)
        .collect();
    assert_eq!(holders, ["a", "b"]);
    for (node, role) in [(a, "a"), (b, "b"), (c, "p")] {
        assert!(db.fragments_on(node).unwrap().is_empty());
        let t = db
            .tombstone(
                node,
                FRAGMENTS_BUCKET,
                &fragment_key("p", "k", "\"e1\"", role),
            )
            .unwrap();
        assert!(t.is_some(), "a tombstone for fragment {role}");
    }
    let short = db.under_replicated().unwrap();
    assert_eq!(short.len(), 1);
    assert_eq!((short[0].wanted, short[0].held), (3, 2));

    // d joins: a re-encodes; both whole copies are retired, b gets a tombstone for its copy.
    assert!(db.publish_parity(a, &v1, "{}", &frags([a, b, d])).unwrap());
    db.record_copies(&v1, 3, 3).unwrap();
    assert!(
        db.holders("p", "k").unwrap().is_empty(),
        "no whole copy left"
    );
    assert!(db.parity_object("p", "k").unwrap().is_some());
    let t = db
        .tombstone(b, "p", "k")
        .unwrap()
        .expect("b drops its copy");
    assert_eq!(t.last_modified_ms, 1000);
    assert!(
        db.tombstone(a, "p", "k").unwrap().is_none(),
        "a drops its own copy itself"
    );
    assert!(db.under_replicated().unwrap().is_empty());
    assert!(db
        .holders("p", "k")
        .unwrap()
        .iter()
        .all(|(n, _)| n.id != PARITY_HOLDER));
}
