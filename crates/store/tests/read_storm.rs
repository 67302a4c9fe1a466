//! Persistence keeps up under a read storm (issue 30): with the deadline scheduler a persist pauses between its
//! chunks while reads want its disks, but only within `persist_yield_max_ms` of the time it wrote since, so
//! uploads keep flowing through a bounded cache while readers hammer the very disk being persisted to.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use permafrost_disk::power::{PowerProfile, WakeReason};
use permafrost_policy::{SchedulerConfig, SchedulerStrategy, WatchdogConfig};
use permafrost_store::*;
use rand::{RngCore, SeedableRng};

const MIB: usize = 1 << 20;
const CACHE_BYTES_MAX: u64 = 16 << 20;

fn config() -> StoreConfig {
    StoreConfig {
        cache_bytes_max: CACHE_BYTES_MAX,
        cache_wait_ms_max: 30_000,
        watchdog: WatchdogConfig {
            interval_ms: 20,
            max_age_ms: 50,
            start_off_disk_above_bytes: 1,
            persist_spinning_above_bytes: 1,
            pressure_fill_percent: 50.0,
            persist_under_pressure_above_bytes: 1,
            ..WatchdogConfig::default()
        },
        pack_threshold_bytes: 64 << 10,
        extent_bytes_max: 4 << 20,
        chunk_bytes: 256 << 10,
        gc_grace_ms: 0,
        gc_interval_ms: 200,
        persist_batch_bytes_max: 8 << 20,
        persist_chunk_bytes: 1 << 20,
        fsync: false,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 192 << 20,
            spinning_max: 16,
            ..GridSetup::default()
        },
        power_profile: Some(PowerProfile::for_tests()),
        ..StoreConfig::default()
    }
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![0u8; len];
    rng.fill_bytes(&mut out);
    out
}

#[test]
fn persistence_keeps_up_under_a_read_storm() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), config()).unwrap());
    store.engine().power().set_scheduler(SchedulerConfig {
        strategy: SchedulerStrategy::Deadline,
        max_wait_ms: 2_000,
        persist_yield_max_ms: 300,
    });
    // One dataset (the bucket): what is read and what is persisted share a disk.
    store
        .create_bucket("storm", BucketSettings::default())
        .unwrap();
    let old: Vec<Vec<u8>> = (0..4).map(|i| data(i, 2 * MIB)).collect();
    for (i, body) in old.iter().enumerate() {
        store
            .put_object(
                "storm",
                &format!("old/{i}"),
                PutOptions::default(),
                &body[..],
            )
            .unwrap();
    }
    store.persist_now().unwrap();
    store.evict_cache().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let (store, stop, reads, old) =
                (store.clone(), stop.clone(), reads.clone(), old.clone());
            std::thread::spawn(move || {
                let mut i = r;
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("old/{}", i % old.len());
                    let _reason = WakeReason::read("storm", &key).enter();
                    let (_, mut reader) = store.open_object("storm", &key, None, None).unwrap();
                    let mut got = Vec::new();
                    reader.read_to_end(&mut got).unwrap();
                    assert!(got == old[i % old.len()], "{key} read back wrong");
                    reads.fetch_add(1, Ordering::SeqCst);
                    i += 1;
                }
            })
        })
        .collect();
    let cache_max_seen = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (store, stop, seen) = (store.clone(), stop.clone(), cache_max_seen.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let used = store.status().unwrap().cache_used_bytes;
                seen.fetch_max(used, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    // Three times the cache in uploads, while the readers hammer the disk they are persisted to.
    let start = Instant::now();
    let uploads = 3 * CACHE_BYTES_MAX as usize / MIB;
    for i in 0..uploads {
        store
            .put_object(
                "storm",
                &format!("new/{i}"),
                PutOptions::default(),
                &data(100 + i as u64, MIB)[..],
            )
            .unwrap_or_else(|e| panic!("upload {i} failed under the read storm: {e}"));
    }
    let uploaded_s = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.status().unwrap().contents_in(ContentState::Persisted)
        < (old.len() + uploads) as u64
    {
        assert!(
            Instant::now() < deadline,
            "persistence fell behind the read storm"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let read_during = reads.load(Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    sampler.join().unwrap();
    let seen = cache_max_seen.load(Ordering::SeqCst);
    eprintln!(
        "{uploads} MiB uploaded in {uploaded_s:.2} s through a {} MiB cache while {read_during} reads ran; cache peak {} MiB",
        CACHE_BYTES_MAX >> 20,
        seen >> 20
    );
    assert!(read_during > 0, "the readers ran");
    assert!(
        seen <= CACHE_BYTES_MAX,
        "the cache stayed bounded: {seen} bytes"
    );
    for i in [0, uploads - 1] {
        let (_, mut reader) = store
            .open_object("storm", &format!("new/{i}"), None, None)
            .unwrap();
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert!(got == data(100 + i as u64, MIB));
    }
}
