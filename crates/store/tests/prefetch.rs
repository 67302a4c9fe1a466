//! Prefetch and hot data on real files with simulated disk power: a read that wakes its disk prefetches the next
//! objects of its dataset within the bounds, and they are then read without a spin-up; hot prefixes keep their
//! contents through eviction, are read back when made hot, and let go when made cold; the hit counters add up.

mod common;

use std::time::{Duration, Instant};

use common::*;
use permafrost_disk::power::{PowerProfile, WakeKind};
use permafrost_store::*;

const OBJECT_BYTES: usize = 300 << 10;

fn prefetch_config(objects_max: usize, bytes_max: u64) -> StoreConfig {
    let mut config = config();
    config.dataset_prefix_depth = 1;
    config.prefetch_objects_max = objects_max;
    config.prefetch_bytes_max = bytes_max;
    // Long enough that a loaded machine never sees the disk go off between a read and its prefetch.
    config.power_profile = Some(PowerProfile {
        idle_timeout_ms: 1_000,
        ..PowerProfile::for_tests()
    });
    config
}

fn key(run: usize, i: usize) -> String {
    format!("run-{run}/frame-{i:02}")
}

fn body(run: usize, i: usize) -> Vec<u8> {
    data((run * 100 + i) as u64, OBJECT_BYTES, false)
}

/// Two datasets (`run-1/`, `run-2/`) of `n` objects each, persisted, evicted, every disk off.
fn archive(dir: &std::path::Path, config: StoreConfig, n: usize) -> Store {
    let store = Store::open(dir, config).unwrap();
    store
        .create_bucket("lab", BucketSettings::default())
        .unwrap();
    for run in 1..=2 {
        for i in 0..n {
            put(&store, "lab", &key(run, i), &body(run, i));
        }
    }
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    wait_all_off(&store);
    store
}

fn in_cache(store: &Store, key: &str) -> bool {
    store.head_object("lab", key).unwrap().in_cache
}

/// Wait until the prefetch thread has been idle for a moment (its counters stop moving).
fn settle(store: &Store) -> CacheReads {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = store.cache_reads();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = store.cache_reads();
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "prefetch never settled: {now:?}");
        last = now;
    }
}

#[test]
fn a_read_that_wakes_its_disk_prefetches_the_next_objects_of_its_dataset_and_they_need_no_spin_up()
{
    let dir = tempfile::tempdir().unwrap();
    let store = archive(dir.path(), prefetch_config(4, 256 << 20), 10);
    let spin_ups_before = spin_ups(&store);
    assert_eq!(get(&store, "lab", &key(1, 0)), body(1, 0));
    let reads = settle(&store);
    assert_eq!(
        spin_ups(&store) - spin_ups_before,
        1,
        "one spin-up for the read and its prefetch"
    );
    assert_eq!(
        (reads.from_grid, reads.from_cache, reads.prefetches),
        (1, 0, 1)
    );
    // The next four objects of run-1 in key order: the bound of objects, nothing of run-2.
    assert_eq!(reads.prefetched_contents, 4, "{reads:?}");
    for i in 1..10 {
        assert_eq!(in_cache(&store, &key(1, i)), i <= 4, "run-1 object {i}");
    }
    assert!((0..10).all(|i| !in_cache(&store, &key(2, i))));
    let prefetched_bytes: u64 = (1..=4)
        .map(|i| store.head_object("lab", &key(1, i)).unwrap().stored_bytes)
        .sum();
    assert_eq!(reads.prefetched_bytes, prefetched_bytes);

    // Read with every disk off: served from the cache, no spin-up.
    wait_all_off(&store);
    let spin_ups_before = spin_ups(&store);
    for i in 1..=4 {
        assert_eq!(get(&store, "lab", &key(1, i)), body(1, i));
    }
    assert_eq!(
        spin_ups(&store),
        spin_ups_before,
        "prefetched objects woke a disk"
    );
    let reads = settle(&store);
    assert_eq!((reads.from_cache, reads.prefetch_hits), (4, 4), "{reads:?}");
    assert_eq!(reads.hit_ratio, 0.8);

    // The next object is not cached: it wakes the disk once more, and prefetches the four after it.
    assert_eq!(get(&store, "lab", &key(1, 5)), body(1, 5));
    let reads = settle(&store);
    assert_eq!(spin_ups(&store) - spin_ups_before, 1);
    assert_eq!((reads.prefetches, reads.prefetched_contents), (2, 8));
    assert!((6..=9).all(|i| in_cache(&store, &key(1, i))));
    let wakes = store.engine().power().wakes_since(0);
    assert!(
        wakes.iter().all(|w| w.reason.kind != WakeKind::Prefetch),
        "the reads' spin-ups are theirs: {wakes:?}"
    );

    // A read of a cached object, or one whose disk is up, prefetches nothing.
    assert_eq!(get(&store, "lab", &key(1, 9)), body(1, 9));
    assert_eq!(settle(&store).prefetches, 2);
    store.close().unwrap();
}

#[test]
fn a_prefetch_never_reads_more_bytes_than_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    // Room for two and a half objects.
    let stored = OBJECT_BYTES as u64 + 64;
    let store = archive(dir.path(), prefetch_config(32, stored * 5 / 2), 8);
    assert_eq!(get(&store, "lab", &key(2, 3)), body(2, 3));
    let reads = settle(&store);
    assert_eq!(reads.prefetched_contents, 2, "{reads:?}");
    assert!(reads.prefetched_bytes <= stored * 5 / 2);
    for i in 0..8 {
        assert_eq!(
            in_cache(&store, &key(2, i)),
            i == 4 || i == 5,
            "run-2 object {i}"
        );
    }
    assert!((0..8).all(|i| !in_cache(&store, &key(1, i))));
    store.close().unwrap();

    // 0 turns it off.
    let dir = tempfile::tempdir().unwrap();
    let store = archive(dir.path(), prefetch_config(32, 0), 4);
    assert_eq!(get(&store, "lab", &key(1, 0)), body(1, 0));
    let reads = settle(&store);
    assert_eq!(
        (reads.prefetches, reads.prefetched_contents, reads.from_grid),
        (0, 0, 1)
    );
    store.close().unwrap();
}

#[test]
fn hot_prefixes_keep_their_contents_through_eviction_and_let_go_when_made_cold() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = prefetch_config(32, 0);
    config.power_profile = Some(PowerProfile::for_tests());
    let store = Store::open(dir.path(), config).unwrap();
    store
        .create_bucket("lab", BucketSettings::default())
        .unwrap();
    // Hot before the data arrives: pinned when persisted.
    let change = store
        .set_hot_prefixes("lab", vec!["run-1/".into()])
        .unwrap();
    assert_eq!((change.pinned, change.to_read_contents), (0, 0));
    for run in 1..=2 {
        for i in 0..4 {
            put(&store, "lab", &key(run, i), &body(run, i));
        }
    }
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    assert!(
        (0..4).all(|i| in_cache(&store, &key(1, i))),
        "hot contents were evicted"
    );
    assert!((0..4).all(|i| !in_cache(&store, &key(2, i))));
    assert_eq!(
        store.hot_prefixes("lab").unwrap(),
        vec!["run-1/".to_string()]
    );
    // Other settings change without touching them.
    store
        .set_bucket_settings("lab", BucketSettings::default())
        .unwrap();
    assert_eq!(
        store.hot_prefixes("lab").unwrap(),
        vec!["run-1/".to_string()]
    );

    // Made hot later: pinned at once, read back from the grid by keep_hot, one spin-up attributed to it.
    wait_all_off(&store);
    let change = store
        .set_hot_prefixes("lab", vec!["run-2/".into(), "run-1/".into()])
        .unwrap();
    assert_eq!(
        change.prefixes,
        vec!["run-1/".to_string(), "run-2/".to_string()]
    );
    assert_eq!(change.to_read_contents, 4);
    let seq = store.engine().power().last_wake_seq();
    let spin_ups_before = spin_ups(&store);
    let mut last_progress = (0, 0);
    let report = store
        .keep_hot("lab", &mut |done, total| last_progress = (done, total))
        .unwrap();
    assert_eq!(report.read_contents, 4);
    assert_eq!(last_progress.0, last_progress.1);
    assert_eq!(last_progress.1, report.read_bytes);
    assert_eq!(spin_ups(&store) - spin_ups_before, 1);
    let wakes = store.engine().power().wakes_since(seq);
    assert_eq!(wakes.len(), 1);
    assert_eq!(wakes[0].reason.kind, WakeKind::Prefetch);
    assert_eq!(
        wakes[0].reason.describe(),
        "prefetch of lab/run-2/ (keep hot)"
    );
    store.evict_cache().unwrap();
    assert!((0..4).all(|i| in_cache(&store, &key(1, i)) && in_cache(&store, &key(2, i))));
    let reads = store.cache_reads();
    assert_eq!(
        (reads.hot_read_contents, reads.hot_read_bytes),
        (4, report.read_bytes)
    );

    // Served from the cache with every disk off.
    wait_all_off(&store);
    let spin_ups_before = spin_ups(&store);
    for i in 0..4 {
        assert_eq!(get(&store, "lab", &key(2, i)), body(2, i));
    }
    assert_eq!(spin_ups(&store), spin_ups_before);

    // Made cold: unpinned, and eviction takes them again.
    let change = store
        .set_hot_prefixes("lab", vec!["run-1/".into()])
        .unwrap();
    assert_eq!(change.unpinned, 4);
    store.evict_cache().unwrap();
    assert!((0..4).all(|i| in_cache(&store, &key(1, i)) && !in_cache(&store, &key(2, i))));
    let change = store.set_hot_prefixes("lab", Vec::new()).unwrap();
    assert_eq!(change.unpinned, 4);
    store.evict_cache().unwrap();
    assert!((0..4).all(|i| !in_cache(&store, &key(1, i))));
    assert!(store
        .set_hot_prefixes(
            "lab",
            (0..=HOT_PREFIXES_MAX).map(|i| format!("p{i}/")).collect()
        )
        .is_err());
    store.close().unwrap();
}

#[test]
fn a_prefetch_stops_when_the_cache_has_no_room_and_never_evicts_hot_contents() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = prefetch_config(32, 256 << 20);
    config.cache_bytes_max = 16 << 20;
    config.free_bytes_min = 0;
    let store = Store::open(dir.path(), config).unwrap();
    store
        .create_bucket("lab", BucketSettings::default())
        .unwrap();
    store
        .set_hot_prefixes("lab", vec!["run-1/".into()])
        .unwrap();
    // 12 MiB hot (run-1), then run-2's objects of 1 MiB: the cache holds at most four of them beside the hot
    // ones.
    let big = |run: usize, i: usize| data((run * 100 + i) as u64, 1 << 20, false);
    for i in 0..12 {
        put(&store, "lab", &key(1, i), &big(1, i));
    }
    store.persist_now().unwrap();
    for i in 0..8 {
        put(&store, "lab", &key(2, i), &big(2, i));
        store.persist_now().unwrap();
    }
    store.evict_cache().unwrap();
    wait_all_off(&store);
    assert_eq!(get(&store, "lab", &key(2, 0)), big(2, 0));
    let reads = settle(&store);
    assert!(reads.prefetch_no_room >= 1, "{reads:?}");
    assert!((1..=4).contains(&reads.prefetched_contents), "{reads:?}");
    assert!(
        (0..12).all(|i| in_cache(&store, &key(1, i))),
        "a hot content was evicted"
    );
    store.close().unwrap();
}
