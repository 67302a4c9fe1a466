#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use permafrost_disk::power::{PowerProfile, PowerState};
use permafrost_disk::{Disk, FaultHandle, FaultyDisk};
use permafrost_engine::{Engine, GridConfig, OpenOptions, WriteMode};
use rand::{Rng, SeedableRng};

pub const DISK_BYTES: u64 = 24 << 20;
pub const MIB: u64 = 1 << 20;

pub fn test_config() -> GridConfig {
    let mut config = GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), DISK_BYTES);
    config.power = PowerProfile::for_tests();
    config.chunk_bytes_max = 2 * MIB;
    config.recovery_chunk_bytes_max = 4 * MIB;
    config.delta_cache_bytes_max = 16 * MIB;
    config.scrub_slice_bytes = 2 * MIB;
    config
}

pub fn create(dir: &Path) -> Engine {
    Engine::create(dir, test_config()).expect("create grid")
}

/// Open with every disk wrapped in a FaultyDisk; returns the handles by disk index.
pub fn open_faulty(dir: &Path) -> (Engine, Vec<FaultHandle>) {
    let handles: Arc<Mutex<Vec<Option<FaultHandle>>>> = Arc::new(Mutex::new(vec![None; 48]));
    let h = Arc::clone(&handles);
    let options = OpenOptions {
        wrap_disk: Some(Box::new(move |index, disk: Arc<dyn Disk>| {
            let (faulty, handle) = FaultyDisk::new(disk);
            h.lock()[index] = Some(handle);
            Arc::new(faulty) as Arc<dyn Disk>
        })),
        power_profile: None,
    };
    let engine = Engine::open_with(dir, options).expect("open grid");
    let handles = handles
        .lock()
        .iter()
        .map(|h| h.clone().expect("every disk wrapped"))
        .collect();
    (engine, handles)
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

pub fn write(
    engine: &Engine,
    bucket: usize,
    offset: u64,
    data: &[u8],
    mode: WriteMode,
) -> Vec<u64> {
    let mut promise = engine
        .write(bucket, offset, data.len() as u64, mode)
        .unwrap();
    // Append in uneven pieces to exercise chunking.
    for piece in data.chunks(700_001) {
        promise.append(piece).unwrap();
    }
    promise.commit().unwrap()
}

pub fn read(engine: &Engine, bucket: usize, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    engine
        .read(bucket, offset, len)
        .unwrap()
        .read_to_end(&mut out)?;
    Ok(out)
}

pub fn assert_parity_clean(engine: &Engine) {
    let report = engine.verify_parity(&|_, _| {}).unwrap();
    assert!(
        report.mismatches.is_empty(),
        "parity mismatches: {:?}",
        report.mismatches
    );
    assert_eq!(report.groups_skipped, 0);
}

/// Wait until every disk is Off (idle timeouts passed and no background work holds one).
pub fn wait_all_off(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let all_off = (0..48).all(|d| engine.power().state(d) == PowerState::Off);
        if all_off {
            return;
        }
        assert!(Instant::now() < deadline, "disks did not spin down");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn spin_ups(engine: &Engine) -> Vec<u64> {
    (0..48).map(|d| engine.power().stats(d).spin_ups).collect()
}

/// Disks whose spin-up count changed.
pub fn spun_up(before: &[u64], after: &[u64]) -> Vec<usize> {
    (0..before.len())
        .filter(|&d| after[d] != before[d])
        .collect()
}

/// Physical bytes of one IDR stripe with the default configuration (274 blocks).
pub const PHYSICAL_STRIPE_BYTES: u64 = 274 * 4096;

/// The file of file-backed disk `disk` in the grid directory `dir`.
pub fn disk_path(dir: &Path, disk: usize) -> std::path::PathBuf {
    dir.join(format!("disks/disk-{disk:02}.img"))
}

/// A latent error: flip a bit of block 40 of stripe `stripe` (logical `[stripe MiB, stripe+1 MiB)`) in the disk's
/// file, behind the engine's back (closed, or paused). Returns the file offset and the byte before the flip.
pub fn plant_bit_flip(dir: &Path, disk: usize, stripe: u64) -> (u64, u8) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(disk_path(dir, disk))
        .unwrap();
    let offset = permafrost_engine::HEADER_BYTES + stripe * PHYSICAL_STRIPE_BYTES + 40 * 4096 + 123;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], offset).unwrap();
    file.sync_all().unwrap();
    (offset, byte[0])
}
