//! Regression tests for bugs found by review and by the deterministic simulation (`tests/simulation.rs`). Each is
//! named after the promise it checks.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use permafrost_disk::{Disk, FaultHandle, FaultyDisk};
use permafrost_engine::{CrashPoint, Engine, Error, OpenOptions, WriteMode, HEADER_BYTES};

/// Physical bytes of one IDR stripe with the default configuration (SPC 16+1, s = 16): 2 check blocks + 16·17.
const PHYSICAL_STRIPE_BYTES: u64 = (2 + 16 * 17) * 4096;

struct Grid {
    engine: Engine,
    handles: Vec<FaultHandle>,
    raw: Vec<Arc<dyn Disk>>,
}

/// Open with every disk wrapped in a `FaultyDisk`, keeping the raw backends (to zero them behind the engine).
fn open_grid(dir: &std::path::Path) -> Grid {
    type Opened = Option<(FaultHandle, Arc<dyn Disk>)>;
    let slots: Arc<Mutex<Vec<Opened>>> = Arc::new(Mutex::new(vec![None; 48]));
    let s = Arc::clone(&slots);
    let options = OpenOptions {
        wrap_disk: Some(Box::new(move |index, disk: Arc<dyn Disk>| {
            let (faulty, handle) = FaultyDisk::new(Arc::clone(&disk));
            s.lock()[index] = Some((handle, disk));
            Arc::new(faulty) as Arc<dyn Disk>
        })),
        power_profile: None,
    };
    let engine = Engine::open_paused(dir, options).expect("open grid");
    let (handles, raw) = slots
        .lock()
        .iter()
        .map(|s| s.clone().expect("every disk wrapped"))
        .unzip();
    Grid {
        engine,
        handles,
        raw,
    }
}

fn new_grid() -> (tempfile::TempDir, Grid) {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path()).close().unwrap();
    let grid = open_grid(dir.path());
    (dir, grid)
}

/// Run `f` on another thread; fail the test instead of hanging if it takes longer than `secs`.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not finish within {secs} s (deadlock?)"))
}

fn zero_physical_stripes(raw: &dyn Disk, first: u64, count: u64) {
    let zeros = vec![0u8; (count * PHYSICAL_STRIPE_BYTES) as usize];
    raw.write_at(HEADER_BYTES + first * PHYSICAL_STRIPE_BYTES, &zeros)
        .unwrap();
}

#[test]
fn a_parity_disk_failing_during_its_drain_does_not_deadlock_the_drain() {
    // Cause: marking a disk failed took the disk's drain mutex, which the drain that hit the error already held.
    let (_dir, grid) = new_grid();
    let engine = Arc::new(grid.engine);
    let data = pattern(1, (2 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Delayed);
    let hp = engine
        .geometry()
        .parity_targets(engine.geometry().bucket_disk(0))
        .hp;
    grid.handles[hp].fail_disk();
    let e = Arc::clone(&engine);
    within(30, "flush with a failing parity disk", move || e.flush()).unwrap();
    assert!(
        engine.is_failed(hp),
        "the parity disk's I/O error marks it failed"
    );
    assert_eq!(read(&engine, 0, 0, 2 * MIB).unwrap(), data);
}

#[test]
fn a_stripe_zeroed_in_place_is_reconstructed_not_returned_as_zeros() {
    // Cause: IDR reads a physically never-written stripe as zeros without an error; the engine trusted it.
    let (_dir, grid) = new_grid();
    let engine = &grid.engine;
    let data = pattern(2, (3 * MIB) as usize);
    write(engine, 0, 0, &data, WriteMode::Serialized);
    let disk = engine.geometry().bucket_disk(0);
    zero_physical_stripes(grid.raw[disk].as_ref(), 1, 1);
    assert_eq!(
        read(engine, 0, 0, 3 * MIB).unwrap(),
        data,
        "read repairs from the grid"
    );
    // A scrub finds it too, and the recovery writes it back.
    zero_physical_stripes(grid.raw[disk].as_ref(), 2, 1);
    let report = engine.scrub(disk, 0, 3 * MIB).unwrap();
    assert!(report.unrecoverable.contains(&(2 * MIB, MIB)), "{report:?}");
    assert!(engine.recover_defects().unwrap().unrecoverable.is_empty());
    assert_eq!(engine.defect_bytes(disk), 0);
    assert_parity_clean(engine);
    assert_eq!(read(engine, 0, 0, 3 * MIB).unwrap(), data);
}

#[test]
fn a_blank_disk_swapped_in_under_the_engine_reads_back_the_committed_data() {
    let (_dir, grid) = new_grid();
    let engine = &grid.engine;
    let data = pattern(3, (2 * MIB) as usize);
    write(engine, 1, MIB, &data, WriteMode::Direct);
    let disk = engine.geometry().bucket_disk(1);
    let idr_bytes = DISK_BYTES - HEADER_BYTES;
    grid.raw[disk]
        .write_at(HEADER_BYTES, &vec![0u8; idr_bytes as usize])
        .unwrap();
    assert_eq!(read(engine, 1, MIB, 2 * MIB).unwrap(), data);
    // The parity written for it is blanked too: writes on top still keep the grid consistent.
    let hp = engine.geometry().parity_targets(disk).hp;
    grid.raw[hp]
        .write_at(HEADER_BYTES, &vec![0u8; idr_bytes as usize])
        .unwrap();
    let more = pattern(4, MIB as usize);
    write(engine, 1, 2 * MIB, &more, WriteMode::Serialized);
    assert!(engine.recover_defects().unwrap().unrecoverable.is_empty());
    assert_parity_clean(engine);
    let mut expected = data.clone();
    expected[MIB as usize..].copy_from_slice(&more);
    assert_eq!(read(engine, 1, MIB, 2 * MIB).unwrap(), expected);
}

#[test]
fn a_zeroed_stripe_with_a_flipped_bit_is_not_verified_as_zeros() {
    // Cause: with both check blocks lost, IDR verifies each iPG by parity alone, and all zeros is a valid codeword:
    // a zeroed stripe with one flipped bit read back as zeros (and, with the bit in a check block, was even
    // re-stamped as valid).
    let (_dir, grid) = new_grid();
    let engine = &grid.engine;
    let data = pattern(5, (2 * MIB) as usize);
    write(engine, 2, 0, &data, WriteMode::Serialized);
    let disk = engine.geometry().bucket_disk(2);
    for (stripe, flip_at) in [(0u64, 4096 * 7 + 100), (1, 100)] {
        // Stripe 0: the bit lands in a data or parity block; stripe 1: in the first check block.
        zero_physical_stripes(grid.raw[disk].as_ref(), stripe, 1);
        grid.handles[disk]
            .flip_bit(HEADER_BYTES + stripe * PHYSICAL_STRIPE_BYTES + flip_at, 3)
            .unwrap();
    }
    assert_eq!(read(engine, 2, 0, 2 * MIB).unwrap(), data);
    assert!(engine.recover_defects().unwrap().unrecoverable.is_empty());
    assert_parity_clean(engine);
}

#[test]
fn a_parity_update_next_to_a_defect_range_keeps_the_rest_of_that_parity_current() {
    // Cause: a write whose parity range was partly defect skipped the whole parity update, leaving the
    // non-defect part without the write's delta.
    let (_dir, grid) = new_grid();
    let engine = &grid.engine;
    write(
        engine,
        0,
        0,
        &pattern(6, (2 * MIB) as usize),
        WriteMode::Serialized,
    );
    let disk = engine.geometry().bucket_disk(0);
    let hp = engine.geometry().parity_targets(disk).hp;
    // Damage hP's first stripe and let a scrub record it as defect (recovery is paused).
    zero_physical_stripes(grid.raw[hp].as_ref(), 0, 1);
    engine.scrub(hp, 0, MIB).unwrap();
    assert_eq!(engine.defect_bytes(hp), MIB);
    for mode in [WriteMode::Serialized, WriteMode::Direct] {
        write(engine, 0, 0, &pattern(7, (2 * MIB) as usize), mode);
    }
    assert!(engine.recover_defects().unwrap().unrecoverable.is_empty());
    assert_parity_clean(engine);
}

#[test]
fn a_delayed_writer_never_waits_forever_for_room_in_the_delta_cache() {
    // Cause: with the drain threads paused (test hook) a writer waited for room only the drains could make.
    let (_dir, grid) = new_grid();
    let engine = Arc::new(grid.engine);
    let e = Arc::clone(&engine);
    within(
        60,
        "delayed writes beyond the delta cache bound",
        move || {
            // 16 MiB of pending deltas is the bound of the test configuration.
            for bucket in 0..10 {
                write(
                    &e,
                    bucket,
                    0,
                    &pattern(bucket as u64, (2 * MIB) as usize),
                    WriteMode::Delayed,
                );
            }
        },
    );
    assert!(engine.status().unwrap().pending_delta_bytes <= 16 * MIB);
    engine.flush().unwrap();
    assert_parity_clean(&engine);
}

#[test]
fn direct_crash_replay_never_bakes_a_flipped_bit_into_committed_data() {
    // Cause: replay of an interrupted direct write re-encoded every stripe of its range taking blocks as they
    // read, so a block with a flipped bit (which IDR would have repaired) became the committed content.
    let dir = tempfile::tempdir().unwrap();
    create(dir.path()).close().unwrap();
    let old = pattern(8, (2 * MIB) as usize);
    {
        let grid = open_grid(dir.path());
        let engine = &grid.engine;
        write(engine, 0, 0, &old, WriteMode::Serialized);
        let disk = engine.geometry().bucket_disk(0);
        engine.set_crash_point(Some(CrashPoint::DataStarted));
        let result = engine
            .write(0, 0, MIB + 4096, WriteMode::Direct)
            .unwrap()
            .commit_with(&pattern(9, (MIB + 4096) as usize));
        assert!(
            matches!(result, Err(Error::SimulatedCrash(_))),
            "{result:?}"
        );
        // Bit rot while the process is down: one bit in each of three neighbouring blocks of stripe 1 (in
        // different iPGs, so IDR repairs each).
        for block in 1..4u64 {
            grid.handles[disk]
                .flip_bit(HEADER_BYTES + PHYSICAL_STRIPE_BYTES + block * 4096 + 17, 1)
                .unwrap();
        }
    }
    let engine = Engine::open(dir.path()).unwrap();
    engine.recover_defects().unwrap();
    assert_parity_clean(&engine);
    // The crashed range may hold old or new data; the committed rest of stripe 1 must be exactly the old data.
    let back = read(&engine, 0, MIB + 4096, MIB - 4096).unwrap();
    assert!(
        back == old[(MIB + 4096) as usize..],
        "committed bytes changed by replay"
    );
}

/// Append everything and commit.
trait CommitWith {
    fn commit_with(self, data: &[u8]) -> permafrost_engine::Result<Vec<u64>>;
}

impl CommitWith for permafrost_engine::WritePromise {
    fn commit_with(mut self, data: &[u8]) -> permafrost_engine::Result<Vec<u64>> {
        self.append(data)?;
        self.commit()
    }
}

#[test]
fn a_replaced_parity_disk_is_rebuilt_where_only_pending_deltas_of_its_members_hold_data() {
    // Cause: the ranges a replaced parity disk must hold were taken from its members' written maps only; an hP
    // member with a delayed write's delta not yet drained is unwritten there, so the vhP was left as zeros.
    let (_dir, grid) = new_grid();
    let engine = &grid.engine;
    let data = pattern(10, MIB as usize);
    write(engine, 0, 0, &data, WriteMode::Delayed);
    let vhp = engine
        .geometry()
        .parity_targets(engine.geometry().bucket_disk(0))
        .vhp;
    engine.replace_disk(vhp, None).unwrap();
    assert!(engine
        .rebuild(vhp, &|_, _| {})
        .unwrap()
        .unrecoverable
        .is_empty());
    engine.flush().unwrap();
    assert_parity_clean(engine);
}
