//! Cross-node XOR parity in the shared tables (`permafrost_catalog::cluster`, schema version 4) on the test
//! PostgreSQL server: the bucket setting, publishing fragments, the object seen by listing but not as a whole
//! holder, a newer version and a DELETE leaving tombstones, a rebuild moving a fragment.

mod common;

use common::frags;

use permafrost_catalog::cluster::{
    fragment_key, ClusterDb, DirEntry, FRAGMENTS_BUCKET, PARITY_HOLDER,
};
use permafrost_catalog::{CatalogError, ListQuery};

fn entry(key: &str, etag: &str, ms: u64) -> DirEntry {
    DirEntry {
        bucket: "p".into(),
        key: key.into(),
        size_bytes: 11,
        etag: etag.into(),
        last_modified_ms: ms,
        content_type: Some("text/plain".into()),
    }
}

#[test]
fn fragments_are_published_listed_replaced_moved_and_deleted_with_tombstones() {
    let Some(url) = common::fresh_database("cp") else {
        return;
    };
    let db = ClusterDb::connect(&url, 10_000).unwrap();
    let id = db.cluster("c").unwrap();
    let ids: Vec<i64> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| db.join(&id, n, n, "127.0.0.1:1", 0, 0).unwrap().node_id)
        .collect();
    assert!(ids.iter().all(|&i| i != PARITY_HOLDER));

    // The setting: unknown bucket refused; xor clears the bucket's copies; none clears it.
    assert!(matches!(
        db.set_bucket_parity("p", Some("xor")),
        Err(CatalogError::NoSuchBucket(_))
    ));
    db.add_bucket("p").unwrap();
    db.set_bucket_copies("p", Some(3)).unwrap();
    db.set_bucket_parity("p", Some("xor")).unwrap();
    assert_eq!(db.bucket_parity("p").unwrap().as_deref(), Some("xor"));
    assert_eq!(db.bucket_copies("p").unwrap(), None);
    db.set_bucket_parity("p", None).unwrap();
    assert_eq!(db.bucket_parity("p").unwrap(), None);

    // The writer (a) published its whole copy, then the fragments: only the parity row stays.
    let v1 = entry("k", "\"e1\"", 1000);
    db.publish(ids[0], &v1).unwrap();
    assert!(db
        .publish_parity(ids[0], &v1, "{}", &frags([ids[0], ids[1], ids[2]]))
        .unwrap());
    assert!(db.holders("p", "k").unwrap().is_empty(), "no whole holder");
    let listed = db
        .list_objects(
            "p",
            &ListQuery {
                max_keys: 1000,
                ..ListQuery::default()
            },
        )
        .unwrap();
    assert_eq!(listed.objects.len(), 1);
    assert_eq!(listed.objects[0].etag, "\"e1\"");
    let obj = db.parity_object("p", "k").unwrap().unwrap();
    assert_eq!(obj.entry, v1);
    let roles: Vec<(&str, &str)> = obj
        .fragments
        .iter()
        .map(|f| (f.role.as_str(), f.node.name.as_str()))
        .collect();
    assert_eq!(roles, [("a", "a"), ("b", "b"), ("p", "c")]);
    assert_eq!(
        fragment_key("p", "k", "\"e1\"", "a"),
        "p/k/e1/a",
        "the ETag's quotes are left out"
    );
    assert!(
        db.remove_bucket("p").is_err(),
        "the parity object keeps the bucket"
    );

    // A rebuild moves b's fragment to d; b gets a tombstone for it. A second move of the same is refused.
    assert!(db
        .move_fragment(&v1, "b", ids[1], ids[3], "hash-b")
        .unwrap());
    assert!(!db
        .move_fragment(&v1, "b", ids[1], ids[3], "hash-b")
        .unwrap());
    assert_eq!(
        db.fragments_on(ids[3]).unwrap(),
        [("p".into(), "k".into(), "b".into())]
    );
    assert!(db.fragments_on(ids[1]).unwrap().is_empty());
    let t = db.tombstones(ids[1]).unwrap();
    assert_eq!(
        (t[0].bucket.as_str(), t[0].key.as_str()),
        (FRAGMENTS_BUCKET, "p/k/e1/b")
    );

    // A newer version held as fragments replaces the old fragments (tombstones for their holders); an older
    // one arriving late publishes nothing.
    let v2 = entry("k", "\"e2\"", 2000);
    assert!(db
        .publish_parity(ids[1], &v2, "{}", &frags([ids[1], ids[2], ids[3]]))
        .unwrap());
    assert!(!db
        .publish_parity(ids[0], &v1, "{}", &frags([ids[0], ids[1], ids[2]]))
        .unwrap());
    assert_eq!(db.parity_object("p", "k").unwrap().unwrap().entry, v2);
    assert!(db
        .tombstones(ids[0])
        .unwrap()
        .iter()
        .any(|t| t.key == "p/k/e1/a"));

    // A whole copy of a newer version hides the parity object.
    db.publish(ids[0], &entry("k", "\"e3\"", 3000)).unwrap();
    assert!(db.parity_object("p", "k").unwrap().is_none());
    db.publish_parity(
        ids[0],
        &entry("k", "\"e4\"", 4000),
        "{}",
        &frags([ids[0], ids[1], ids[2]]),
    )
    .unwrap();

    // DELETE: the object row and every fragment go; each holder gets a tombstone.
    db.delete_everywhere(ids[3], "p", "k").unwrap();
    let holders = db.delete_parity("p", "k").unwrap();
    assert_eq!(holders, ["a", "b", "c"]);
    assert!(db.parity_object("p", "k").unwrap().is_none());
    assert!(db
        .list_objects(
            "p",
            &ListQuery {
                max_keys: 1000,
                ..ListQuery::default()
            }
        )
        .unwrap()
        .objects
        .is_empty());
    for &n in &ids[..3] {
        assert!(db
            .tombstones(n)
            .unwrap()
            .iter()
            .any(|t| t.key.starts_with("p/k/e4/")));
    }
    assert!(db.tombstones(PARITY_HOLDER).unwrap().is_empty());

    // Rebuild requests.
    db.request_rebuild("b").unwrap();
    db.request_rebuild("b").unwrap();
    assert_eq!(db.rebuild_requests().unwrap(), ["b"]);
    db.clear_rebuild_request("b").unwrap();
    assert!(db.rebuild_requests().unwrap().is_empty());
}
