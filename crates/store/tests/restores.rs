//! Restore tiers on real files with simulated disk power: a Standard batch spins each disk once, Expedited is not
//! delayed by the window, Bulk waits for its disk to spin, a faster tier upgrades a pending restore, the queue
//! survives a restart, expiries fall on a day boundary, and every restore has its two events.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use permafrost_disk::power::WakeKind;
use permafrost_store::*;

/// Objects of the batch, and the datasets (one per grid bucket) they are spread over.
const OBJECTS: usize = 1000;
const DATASETS: usize = 8;

fn key_of(i: usize) -> String {
    format!("scan-{}/chunk-{i:04}", i % DATASETS)
}

fn body_of(i: usize) -> Vec<u8> {
    key_of(i).into_bytes().repeat(40)
}

fn restore_config(window_ms: u64, bulk_wait_ms: u64) -> StoreConfig {
    let mut config = config();
    config.dataset_prefix_depth = 1;
    config.restore = RestoreConfig {
        standard_window_ms: window_ms,
        bulk_wait_ms_max: bulk_wait_ms.max(window_ms),
        // An hour that is never now during the test: 12 hours from the current one.
        bulk_start_hour_utc: ((now_ms() / 3_600_000 + 12) % 24) as u8,
    };
    config
}

/// A store with `objects` objects of `DATASETS` datasets persisted, evicted, every disk off. Returns the grid
/// bucket of each dataset.
fn archive(dir: &std::path::Path, config: StoreConfig, objects: usize) -> (Store, Vec<u32>) {
    let store = Store::open(dir, config).unwrap();
    store
        .create_bucket("observatory", BucketSettings::default())
        .unwrap();
    for i in 0..objects {
        put(&store, "observatory", &key_of(i), &body_of(i));
    }
    store.persist_now().unwrap();
    let grid_buckets: Vec<u32> = (0..DATASETS)
        .map(|d| {
            store
                .head_object("observatory", &key_of(d))
                .unwrap()
                .grid_bucket
                .unwrap()
        })
        .collect();
    store.evict_cache().unwrap();
    wait_all_off(&store);
    (store, grid_buckets)
}

fn restored(store: &Store, key: &str) -> bool {
    let info = store.head_object("observatory", key).unwrap();
    store
        .restore_info(&info)
        .unwrap()
        .is_some_and(|r| !r.ongoing)
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn restore(store: &Store, i: usize, tier: RestoreTier) -> RestoreOutcome {
    store
        .restore_object("observatory", &key_of(i), None, 1, tier)
        .unwrap()
}

#[test]
fn a_standard_batch_of_a_thousand_restores_over_eight_disks_spins_each_disk_once() {
    let dir = tempfile::tempdir().unwrap();
    let window_ms = 3_000;
    let (store, grid_buckets) = archive(dir.path(), restore_config(window_ms, 60_000), OBJECTS);
    assert_eq!(
        grid_buckets.iter().collect::<BTreeSet<_>>().len(),
        DATASETS,
        "the datasets landed on {grid_buckets:?}"
    );
    let power = store.engine().power().clone();
    let geometry = store.engine().geometry();
    let before = spin_ups_per_disk(&store);
    let wake_seq = power.last_wake_seq();
    let started = Instant::now();
    for i in 0..OBJECTS {
        assert_eq!(
            restore(&store, i, RestoreTier::Standard),
            RestoreOutcome::Started
        );
    }
    let requested_in = started.elapsed();
    assert!(
        requested_in < Duration::from_millis(window_ms / 2),
        "asking took {requested_in:?}"
    );
    // Within the window nothing is read.
    std::thread::sleep(Duration::from_millis(window_ms / 3));
    let progress = store.restore_progress().unwrap();
    assert_eq!(progress.pending, OBJECTS as u64, "{progress:?}");
    assert_eq!(spin_ups_per_disk(&store), before);
    assert_eq!(
        progress.waiting_grid_buckets.len(),
        DATASETS,
        "{progress:?}"
    );
    assert!(progress.next_read_ms.is_some());
    wait_until("the batch", Duration::from_secs(60), || {
        store.restore_progress().unwrap().pending == 0
    });
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(window_ms),
        "read before the window closed: {took:?}"
    );
    let after = spin_ups_per_disk(&store);
    let woken: BTreeMap<usize, u64> = (0..after.len())
        .filter(|&d| after[d] > before[d])
        .map(|d| (d, after[d] - before[d]))
        .collect();
    let expected: BTreeMap<usize, u64> = grid_buckets
        .iter()
        .map(|&g| (geometry.bucket_disk(g as usize), 1))
        .collect();
    assert_eq!(woken, expected, "spin-ups per disk");
    eprintln!(
        "{OBJECTS} Standard restores over {DATASETS} disks: spin-ups per disk {woken:?}, done {took:?} after \
         the first request (window {window_ms} ms)"
    );
    // Each spin-up is the restore's, named after the object it was for and how many more it served.
    let wakes = power.wakes_since(wake_seq);
    let first_wake_ms = wakes.iter().map(|w| w.at_unix_ms).min().unwrap_or_default();
    eprintln!(
        "reading the {OBJECTS} objects took {} ms from the first spin-up",
        now_ms().saturating_sub(first_wake_ms)
    );
    assert_eq!(wakes.len(), DATASETS);
    for w in &wakes {
        assert_eq!(w.reason.kind, WakeKind::Restore, "{}", w.reason.describe());
        let text = w.reason.describe();
        assert!(
            text.starts_with("restore of observatory/scan-") && text.ends_with("and 124 more"),
            "{text}"
        );
    }
    // Every copy is in the cache: reading wakes nothing.
    let spun = spin_ups(&store);
    for i in (0..OBJECTS).step_by(37) {
        assert!(restored(&store, &key_of(i)));
        assert_eq!(get(&store, "observatory", &key_of(i)), body_of(i));
    }
    assert_eq!(spin_ups(&store), spun);
    // One Post and one Completed event per restore, with the expiry on a day boundary.
    let events = store.restore_events_since(0);
    let count = |name| events.iter().filter(|e| e.name == name).count();
    assert_eq!(count(RESTORE_POST_EVENT), OBJECTS);
    assert_eq!(count(RESTORE_COMPLETED_EVENT), OBJECTS);
    let day_ms = store.config().lifecycle_day_ms;
    for e in events.iter().filter(|e| e.name == RESTORE_COMPLETED_EVENT) {
        assert_eq!(e.tier, RestoreTier::Standard);
        let expiry = e.expiry_ms.unwrap();
        assert_eq!(expiry % day_ms, 0, "{e:?}");
        assert!(expiry > e.at_ms + day_ms && expiry <= e.at_ms + 2 * day_ms + 1000);
    }
}

#[test]
fn expedited_starts_at_once_and_upgrades_a_waiting_standard_restore() {
    let dir = tempfile::tempdir().unwrap();
    // A window far longer than the test: only the Expedited tier gets anything read.
    let (store, _) = archive(dir.path(), restore_config(600_000, 600_000), 16);
    let started = Instant::now();
    assert_eq!(
        restore(&store, 0, RestoreTier::Expedited),
        RestoreOutcome::Started
    );
    wait_until("the Expedited restore", Duration::from_secs(20), || {
        restored(&store, &key_of(0))
    });
    eprintln!("Expedited restore done in {:?}", started.elapsed());
    // A Standard one waits for its window…
    assert_eq!(
        restore(&store, 1, RestoreTier::Standard),
        RestoreOutcome::Started
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!restored(&store, &key_of(1)));
    // … asking again at the same or a slower tier changes nothing, a faster tier upgrades it.
    assert_eq!(
        restore(&store, 1, RestoreTier::Bulk),
        RestoreOutcome::InProgress
    );
    assert_eq!(
        restore(&store, 1, RestoreTier::Standard),
        RestoreOutcome::InProgress
    );
    assert_eq!(
        restore(&store, 1, RestoreTier::Expedited),
        RestoreOutcome::Upgraded
    );
    wait_until("the upgraded restore", Duration::from_secs(20), || {
        restored(&store, &key_of(1))
    });
    // A restored version asked again keeps its copy longer (200 in S3).
    assert_eq!(
        restore(&store, 1, RestoreTier::Bulk),
        RestoreOutcome::Extended
    );
}

#[test]
fn bulk_waits_until_its_disk_spins_for_another_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = restore_config(600_000, 600_000);
    config.dataset_prefix_depth = 1;
    let (store, grid_buckets) = archive(dir.path(), config, 16);
    let power = store.engine().power().clone();
    let disk = store
        .engine()
        .geometry()
        .bucket_disk(grid_buckets[0] as usize);
    // Objects 0 and 8 are both in dataset scan-0.
    assert_eq!(
        restore(&store, 0, RestoreTier::Bulk),
        RestoreOutcome::Started
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!restored(&store, &key_of(0)));
    let before = power.stats(disk).spin_ups;
    // Other work spins the disk up (a long read, say): the Bulk restore rides along.
    {
        let _other = permafrost_disk::power::WakeReason::read("observatory", &key_of(8)).enter();
        let _spinning = power.acquire(disk);
        wait_until("the Bulk restore", Duration::from_secs(20), || {
            restored(&store, &key_of(0))
        });
    }
    assert_eq!(
        power.stats(disk).spin_ups,
        before + 1,
        "the restore needed no spin-up of its own"
    );
}

#[test]
fn pending_restores_survive_a_restart_and_finish_without_a_new_request() {
    let dir = tempfile::tempdir().unwrap();
    let window_ms = 1500;
    {
        let (store, _) = archive(dir.path(), restore_config(window_ms, 60_000), 64);
        for i in 0..64 {
            restore(&store, i, RestoreTier::Standard);
        }
        assert_eq!(store.restore_progress().unwrap().pending, 64);
    }
    let store = Store::open(dir.path(), restore_config(window_ms, 60_000)).unwrap();
    let before = spin_ups_per_disk(&store);
    wait_until(
        "the restores from before the restart",
        Duration::from_secs(30),
        || store.restore_progress().unwrap().pending == 0,
    );
    assert!((0..64).all(|i| restored(&store, &key_of(i))));
    let after = spin_ups_per_disk(&store);
    assert!(
        (0..after.len()).all(|d| after[d] - before[d] <= 1),
        "{before:?} -> {after:?}"
    );
}

#[test]
fn an_expedited_restore_does_not_wait_behind_a_standard_batch_being_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = restore_config(500, 60_000);
    // Spin-ups of 300 ms: reading eight disks one after the other takes a few seconds.
    let mut profile = permafrost_disk::power::PowerProfile::for_tests();
    profile.spin_up_ms = 300;
    config.power_profile = Some(profile);
    let (store, grid_buckets) = archive(dir.path(), config, 160);
    // The batch: the first 80 objects, ten on each disk.
    for i in 0..80 {
        restore(&store, i, RestoreTier::Standard);
    }
    wait_until("the batch's first disk", Duration::from_secs(20), || {
        store
            .restore_progress()
            .unwrap()
            .reading_grid_bucket
            .is_some()
    });
    // An Expedited restore of an object on the disk the batch would read last.
    let last = *grid_buckets.iter().max().unwrap();
    let dataset = grid_buckets.iter().position(|&g| g == last).unwrap();
    let expedited = 80 + dataset;
    assert_eq!(
        restore(&store, expedited, RestoreTier::Expedited),
        RestoreOutcome::Started
    );
    wait_until("the Expedited restore", Duration::from_secs(20), || {
        restored(&store, &key_of(expedited))
    });
    let pending = store.restore_progress().unwrap().pending;
    assert!(
        pending > 0,
        "the Expedited restore waited for the whole batch"
    );
    wait_until("the batch", Duration::from_secs(30), || {
        store.restore_progress().unwrap().pending == 0
    });
}
