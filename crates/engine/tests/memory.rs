//! Bounded memory: recovering a 64 MiB chunk while 3 disks are failed allocates a few reconstruction pieces, not
//! several copies of the chunk. Measured with a counting global allocator (this test binary only).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use permafrost_disk::power::PowerProfile;
use permafrost_engine::{Engine, GridConfig, WriteMode};

struct Counting;

static CURRENT_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT_BYTES.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let now = CURRENT_BYTES.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        CURRENT_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: u64 = 1 << 20;

#[test]
fn recovering_a_64_mib_chunk_with_three_failed_disks_allocates_a_bounded_amount() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), 72 * MIB);
    config.power = PowerProfile::for_tests();
    config.recovery_chunk_bytes_max = 64 * MIB;
    let engine = Engine::create(dir.path(), config).unwrap();
    engine.pause_background(true);
    let data: Vec<u8> = (0..64 * MIB).map(|i| (i * 7 % 251) as u8).collect();
    let mut promise = engine.write(0, 0, 64 * MIB, WriteMode::Serialized).unwrap();
    promise.append(&data).unwrap();
    promise.commit().unwrap();
    drop(data);
    // Bucket 0's disk and both of its parity disks fail: rebuilding the data disk needs a two-step peel plan
    // (hP from its column first, then the data disk from its hPG).
    let disk = engine.geometry().bucket_disk(0);
    let targets = engine.geometry().parity_targets(disk);
    for d in [disk, targets.hp, targets.vp] {
        engine.fail_disk(d).unwrap();
    }
    engine.replace_disk(disk, None).unwrap();
    let baseline = CURRENT_BYTES.load(Ordering::SeqCst);
    PEAK_BYTES.store(baseline, Ordering::SeqCst);
    let report = engine.rebuild(disk, &|_, _| {}).unwrap();
    assert!(report.unrecoverable.is_empty(), "{report:?}");
    assert_eq!(report.bytes_recovered, 64 * MIB);
    let extra_mib = (PEAK_BYTES.load(Ordering::SeqCst) - baseline) as f64 / MIB as f64;
    eprintln!(
        "rebuild of a 64 MiB chunk with 3 failed disks: peak {extra_mib:.1} MiB above baseline"
    );
    // Before the fix: ~5 copies of the 64 MiB chunk (> 300 MiB).
    assert!(
        extra_mib < 96.0,
        "peak {extra_mib:.1} MiB: reconstruction memory must not scale with the recovery chunk"
    );
}
