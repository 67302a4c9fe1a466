//! Shared helpers: a store on small file-backed disks with the test power profile.
#![allow(dead_code)]

use std::io::Read;
use std::path::Path;

use permafrost_disk::power::PowerProfile;
use permafrost_policy::WatchdogConfig;
use permafrost_store::*;
use rand::{RngCore, SeedableRng};

/// A configuration for tests: an 8-bucket grid (4x4:2+1) of 64 MiB disks, a 256 MiB cache, small extents, and a
/// watchdog that never fires on its own (tests call `persist_now`).
pub fn config() -> StoreConfig {
    StoreConfig {
        cache_bytes_max: 256 << 20,
        cache_wait_ms_max: 2_000,
        watchdog: WatchdogConfig {
            interval_ms: 50,
            max_age_ms: u64::MAX / 4,
            persist_spinning_after_ms: u64::MAX / 4,
            start_off_disk_above_bytes: u64::MAX / 4,
            persist_spinning_above_bytes: u64::MAX / 4,
            pressure_fill_percent: 100.0,
            persist_under_pressure_above_bytes: u64::MAX / 4,
        },
        pack_threshold_bytes: 256 << 10,
        extent_bytes_max: 4 << 20,
        chunk_bytes: 256 << 10,
        gc_grace_ms: 3_600_000,
        gc_interval_ms: 3_600_000,
        persist_batch_bytes_max: 64 << 20,
        fsync: false,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: 96 << 20,
            spinning_max: 16,
            ..GridSetup::default()
        },
        power_profile: Some(PowerProfile::for_tests()),
        // Tests that count spin-ups or check what is cached read exactly what they read; the prefetch tests
        // turn it on.
        prefetch_bytes_max: 0,
        ..StoreConfig::default()
    }
}

pub fn open(dir: &Path) -> Store {
    Store::open(dir, config()).unwrap()
}

/// Deterministic bytes: `compressible` mixes runs of repeated text with random bytes.
pub fn data(seed: u64, len: usize, compressible: bool) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![0u8; len];
    rng.fill_bytes(&mut out);
    if compressible {
        for (i, b) in out.iter_mut().enumerate() {
            if (i / 512) % 4 != 0 {
                *b = b"permafrost "[i % 11];
            }
        }
    }
    out
}

pub fn get(store: &Store, bucket: &str, key: &str) -> Vec<u8> {
    let (_, mut reader) = store.open_object(bucket, key, None, None).unwrap();
    let mut out = Vec::new();
    reader.read_to_end(&mut out).unwrap();
    out
}

pub fn get_range(store: &Store, bucket: &str, key: &str, range: ByteRange) -> Vec<u8> {
    let (_, mut reader) = store.open_object(bucket, key, Some(range), None).unwrap();
    let mut out = Vec::new();
    reader.read_to_end(&mut out).unwrap();
    out
}

pub fn put(store: &Store, bucket: &str, key: &str, body: &[u8]) -> ObjectInfo {
    store
        .put_object(bucket, key, PutOptions::default(), body)
        .unwrap()
}

/// Spin-ups of all disks so far.
pub fn spin_ups(store: &Store) -> u64 {
    store.engine().power().totals().spin_ups
}

/// Per-disk spin-up counts.
pub fn spin_ups_per_disk(store: &Store) -> Vec<u64> {
    let power = store.engine().power();
    (0..power.n_disks())
        .map(|d| power.stats(d).spin_ups)
        .collect()
}

/// Bytes the store's extents take on the grid, over every grid bucket.
pub fn grid_used_bytes(store: &Store) -> u64 {
    store
        .status()
        .unwrap()
        .used_bytes_per_grid_bucket
        .iter()
        .map(|(_, b)| b)
        .sum()
}

/// Wait until every disk is off (the test profile's idle timeout is short).
pub fn wait_all_off(store: &Store) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.engine().power().spinning_now() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "disks did not spin down"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Where `needle` (at least 64 bytes) starts on the grid, within the first 32 MiB of each grid bucket:
/// `(grid bucket, offset)`.
pub fn find_on_grid(store: &Store, needle: &[u8]) -> (usize, u64) {
    let engine = store.engine();
    let scan = 32 << 20;
    (0..engine.buckets())
        .find_map(|b| {
            let mut bytes = Vec::new();
            engine
                .read(b, 0, scan)
                .unwrap()
                .read_to_end(&mut bytes)
                .unwrap();
            bytes
                .windows(64)
                .position(|w| w == &needle[..64])
                .map(|p| (b, p as u64))
        })
        .expect("the bytes are on some grid bucket")
}

/// XOR `mask` into the grid byte at `at` of `bucket`, through the engine (parity and IDR stay consistent: only the
/// store's own checks can see it).
pub fn flip_on_grid(store: &Store, bucket: usize, at: u64, mask: u8) {
    let engine = store.engine();
    let block = at / 4096 * 4096;
    let mut bytes = Vec::new();
    engine
        .read(bucket, block, 4096)
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    bytes[(at - block) as usize] ^= mask;
    let mut promise = engine
        .write(
            bucket,
            block,
            4096,
            permafrost_engine::WriteMode::Serialized,
        )
        .unwrap();
    promise.append(&bytes).unwrap();
    promise.commit().unwrap();
}
