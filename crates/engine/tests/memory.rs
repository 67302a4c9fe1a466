//! Bounded memory: recovering a 64 MiB chunk while 3 disks are failed allocates a few reconstruction pieces, not
//! several copies of the chunk; a long write promise reuses its chunk buffers instead of allocating fresh ones per
//! chunk (fresh pages cost page faults and clearing: most of a persist step's CPU before). Measured with a counting
//! global allocator (this test binary only; the tests take turns, since they share its counters).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use permafrost_disk::power::PowerProfile;
use permafrost_engine::{Engine, GridConfig, WriteMode};

struct Counting;

static CURRENT_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Allocations of `CHUNK_SIZED` bytes: the 1 MiB chunks of the write test and their buffers, not the disks'
/// 10 MiB I/O buffers (a process-wide pool of their own).
static CHUNK_SIZED_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
const CHUNK_SIZED: std::ops::Range<usize> = (256 << 10)..(4 << 20);
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn count(size: usize) {
    let now = CURRENT_BYTES.fetch_add(size, Ordering::Relaxed) + size;
    PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
    if CHUNK_SIZED.contains(&size) {
        CHUNK_SIZED_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged and returns what
// it returned; the counting beside it only touches atomics and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` (non-zero size) is System's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is System's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from this allocator, that is from System, with this layout (the caller's contract).
        unsafe { System.dealloc(p, layout) };
        CURRENT_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from System with `layout`, and `new_size` is valid for it (the caller's contract).
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            CURRENT_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            count(new_size);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: u64 = 1 << 20;

#[test]
fn recovering_a_64_mib_chunk_with_three_failed_disks_allocates_a_bounded_amount() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

#[test]
fn a_long_write_promise_reuses_its_chunk_buffers() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut config = GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), 72 * MIB);
    config.power = PowerProfile::for_tests();
    config.chunk_bytes_max = MIB;
    let engine = Engine::create(dir.path(), config).unwrap();
    engine.pause_background(true);
    let piece: Vec<u8> = (0..MIB).map(|i| (i * 7 % 251) as u8).collect();
    let chunks: u64 = 48;
    for (mode, in_flight) in [
        (WriteMode::Direct, 2),
        (WriteMode::Serialized, 1),
        (WriteMode::Serialized, 3),
    ] {
        // Bucket 0 from offset 0, written afresh and then rewritten (old content read back, delta computed). A
        // short write first fills the disks' process-wide I/O buffer pool for this concurrency.
        let write = |chunks: u64| {
            engine
                .write(0, 0, chunks * MIB, mode)
                .unwrap()
                .with_chunks_in_flight(in_flight)
        };
        let mut warm_up = write(4);
        for _ in 0..4 {
            warm_up.append(&piece).unwrap();
        }
        warm_up.commit().unwrap();
        let mut promise = write(chunks);
        let before = CHUNK_SIZED_ALLOCATIONS.load(Ordering::SeqCst);
        for _ in 0..chunks {
            promise.append(&piece).unwrap();
        }
        promise.commit().unwrap();
        let allocated = CHUNK_SIZED_ALLOCATIONS.load(Ordering::SeqCst) - before;
        eprintln!(
            "{chunks} chunks of 1 MiB, {mode:?} mode, {in_flight} in flight: {allocated} chunk-sized allocations"
        );
        // A chunk uses its data buffer, the data disk's new content, the delta and a parity buffer per parity
        // update (three at once in direct mode): at most six, reused by every later chunk, so the write's memory
        // does not grow with its length. Before the pool, every chunk allocated all of them afresh (6 per chunk).
        let bound = 6 * (in_flight + 1);
        assert!(
            allocated <= bound,
            "{allocated} chunk-sized allocations for {chunks} chunks: the buffers must be reused (at most {bound})"
        );
    }
    let mut back = Vec::new();
    engine
        .read(0, (chunks - 1) * MIB, MIB)
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, piece, "the last chunk reads back");
}
