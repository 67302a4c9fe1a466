//! Contents placed on a grid bucket whose data disk fails before they are written there are placed again on a
//! healthy bucket: the persist succeeds and every object reads back from the grid.

mod common;

use std::collections::BTreeSet;

use common::*;
use permafrost_store::*;

#[test]
fn contents_placed_on_a_failed_disk_are_persisted_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("vault", BucketSettings::default())
        .unwrap();
    // Small ones (packed) and large ones (extents of their own).
    let sizes = [1usize, 4096, 50_000, 200_000, 3 << 20, 5 << 20];
    let mut bodies = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("ds/obj{i}");
        let body = data(500 + i as u64, len, i % 2 == 0);
        put(&store, "vault", &key, &body);
        bodies.push((key, body));
    }
    // Place every content on grid bucket 3 (the persistence manager may have placed some already: they stay
    // where it put them); nothing is written yet.
    let catalog = store.catalog();
    let mut placed_on = BTreeSet::new();
    for (key, _) in &bodies {
        let (_, content) = catalog.get_object("vault", key).unwrap().unwrap();
        catalog.place_content(&content.id, 3).unwrap();
        let content = catalog.get_content(&content.id).unwrap().unwrap();
        assert_eq!(content.state, ContentState::Placed, "{key}");
        placed_on.insert(content.grid_bucket.unwrap());
    }
    assert!(placed_on.len() <= 2, "placed on {placed_on:?}");
    let geometry = store.engine().geometry();
    for &b in &placed_on {
        store
            .engine()
            .fail_disk(geometry.bucket_disk(b as usize))
            .unwrap();
    }

    store
        .persist_now()
        .expect("a persist with contents placed on a failed disk");

    for (key, _) in &bodies {
        let (_, content) = catalog.get_object("vault", key).unwrap().unwrap();
        assert_eq!(content.state, ContentState::Persisted, "{key}");
        let grid_bucket = content.grid_bucket.unwrap();
        assert!(
            !placed_on.contains(&grid_bucket),
            "{key} persisted on grid bucket {grid_bucket}, whose data disk failed"
        );
        assert!(!store
            .engine()
            .is_failed(geometry.bucket_disk(grid_bucket as usize)));
    }
    assert!(store.catalog_outstanding().unwrap().is_empty());
    store.evict_cache().unwrap();
    for (key, body) in &bodies {
        let (_, content) = catalog.get_object("vault", key).unwrap().unwrap();
        assert!(content.cache_path.is_none(), "{key} still cached");
        assert!(
            get(&store, "vault", key) == *body,
            "{key} reads back changed"
        );
    }
}
