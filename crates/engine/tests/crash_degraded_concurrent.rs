//! A crash with two writes in flight in one stripe of one horizontal parity group, on a grid with one failed disk:
//! a direct write on data disk `a` (its row journaled with start marks on `a`, `hP`, `vP(a)` and `vhP`) and a
//! delayed write on data disk `b` of the same group (its row journaled, its data disk half written), while
//! `vP(b)` is failed. The delayed writer locks only its data disk, so both are in flight at once, and a killed
//! process can stop both there. Replay marks `hP`, `vP(a)` and `vhP` defect (the direct write hole). Marking `b`
//! defect as well (its parity "still describes the old data") would close a cycle: `b` can only be rebuilt from `hP`
//! (its `vP` is failed), `hP` only from `b` or `vhP`, `vhP` only from `hP` or `vP(b)`, and the acknowledged bytes of
//! `b` in that stripe, intact on `b`, would be lost. Replay settles `b` in place instead (docs/engine.md, "Replay"):
//! after the kill, every acknowledged byte of `a` and `b` reads back and parity verifies once `vP(b)` is rebuilt.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use parking_lot::{Condvar, Mutex};
use permafrost_disk::{Disk, DiskError};
use permafrost_engine::{CrashPoint, Engine, OpenOptions, WriteMode};
use permafrost_grid::ParityTargets;

/// Writes to the gated disks wait until the gate opens (a thread stopped between its journal step and its disk
/// writes); the test counts how many are waiting.
#[derive(Default)]
struct Gate {
    gated: Mutex<Vec<usize>>,
    open: Mutex<bool>,
    opened: Condvar,
    waiting: Mutex<Vec<usize>>,
    armed: AtomicBool,
}

struct GatedDisk {
    index: usize,
    inner: Arc<dyn Disk>,
    gate: Arc<Gate>,
}

impl Disk for GatedDisk {
    fn capacity_bytes(&self) -> u64 {
        self.inner.capacity_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        if self.gate.armed.load(Ordering::SeqCst) && self.gate.gated.lock().contains(&self.index) {
            self.gate.waiting.lock().push(self.index);
            let mut open = self.gate.open.lock();
            while !*open {
                self.gate.opened.wait(&mut open);
            }
        }
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), DiskError> {
        self.inner.sync()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

fn open_gated(dir: &std::path::Path, gate: &Arc<Gate>) -> Engine {
    let g = Arc::clone(gate);
    let options = OpenOptions {
        wrap_disk: Some(Box::new(move |index, disk: Arc<dyn Disk>| {
            Arc::new(GatedDisk {
                index,
                inner: disk,
                gate: Arc::clone(&g),
            }) as Arc<dyn Disk>
        })),
        power_profile: None,
    };
    Engine::open_paused(dir, options).expect("open grid")
}

/// The two buckets (data disks `a` and `b`) of one horizontal group, and their parity disks.
struct Pair {
    bucket_a: usize,
    bucket_b: usize,
    a: usize,
    b: usize,
    ta: ParityTargets,
    tb: ParityTargets,
}

fn pick(engine: &Engine) -> Pair {
    let geometry = engine.geometry().clone();
    let (bucket_a, bucket_b) = (0..engine.buckets())
        .flat_map(|a| (0..engine.buckets()).map(move |b| (a, b)))
        .find(|&(a, b)| {
            let (ta, tb) = (
                geometry.parity_targets(geometry.bucket_disk(a)),
                geometry.parity_targets(geometry.bucket_disk(b)),
            );
            a != b && ta.hp == tb.hp && ta.vp != tb.vp
        })
        .expect("two data disks in one horizontal group");
    let (a, b) = (
        geometry.bucket_disk(bucket_a),
        geometry.bucket_disk(bucket_b),
    );
    Pair {
        bucket_a,
        bucket_b,
        a,
        b,
        ta: geometry.parity_targets(a),
        tb: geometry.parity_targets(b),
    }
}

/// Up to the crash: acknowledged data in the first half of stripe 0 of `a` and `b`, `vP(b)` failed, a direct
/// write into the second half of `a` journaled and stopped before its disk writes (its writes wait at the gate),
/// a delayed write into the second half of `b` stopped with its data disk half written. Returns the direct
/// writer's thread.
fn up_to_the_crash(
    engine: &Arc<Engine>,
    gate: &Arc<Gate>,
) -> std::thread::JoinHandle<permafrost_engine::Result<Vec<u64>>> {
    let p = pick(engine);
    let half = engine.stripe_bytes() / 2;
    write(
        engine,
        p.bucket_a,
        0,
        &pattern(1, half as usize),
        WriteMode::Direct,
    );
    write(
        engine,
        p.bucket_b,
        0,
        &pattern(2, half as usize),
        WriteMode::Direct,
    );
    engine.fail_disk(p.tb.vp).unwrap();

    *gate.gated.lock() = vec![p.a, p.ta.hp, p.ta.vp, p.ta.vhp];
    gate.armed.store(true, Ordering::SeqCst);
    let writer = {
        let engine = Arc::clone(engine);
        let bucket_a = p.bucket_a;
        std::thread::spawn(move || {
            let data = pattern(3, 64 << 10);
            let mut promise = engine.write(bucket_a, half, data.len() as u64, WriteMode::Direct)?;
            promise.append(&data)?;
            promise.commit()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut waiting = gate.waiting.lock().clone();
        waiting.sort();
        waiting.dedup();
        if waiting.len() == 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the direct write did not reach its disks: {waiting:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    engine.set_crash_point(Some(CrashPoint::DataHalfWritten));
    let data = pattern(4, 64 << 10);
    let result = (|| {
        let mut promise = engine.write(p.bucket_b, half, data.len() as u64, WriteMode::Delayed)?;
        promise.append(&data)?;
        promise.commit()
    })();
    assert!(
        result.is_err(),
        "the delayed write stopped at its crash point"
    );
    engine.set_crash_point(None);
    writer
}

/// After the crash: replay, recovery, the acknowledged bytes, and parity once `vP(b)` is rebuilt.
fn check_after_the_crash(dir: &std::path::Path) {
    let engine = Engine::open_paused(dir, Default::default()).expect("reopen");
    let p = pick(&engine);
    let half = engine.stripe_bytes() / 2;
    let report = engine.recover_defects().unwrap();
    let read_a = read(&engine, p.bucket_a, 0, half);
    let read_b = read(&engine, p.bucket_b, 0, half);
    assert!(
        report.unrecoverable.is_empty(),
        "disks a {} (hP {}, vP {}, vhP {}) and b {} (vP {} failed): unrecoverable {:?}; acknowledged bytes of a \
         {}, of b {}",
        p.a,
        p.ta.hp,
        p.ta.vp,
        p.ta.vhp,
        p.b,
        p.tb.vp,
        report.unrecoverable,
        if read_a.as_ref().ok() == Some(&pattern(1, half as usize)) { "intact" } else { "lost" },
        if read_b.as_ref().ok() == Some(&pattern(2, half as usize)) { "intact" } else { "lost" },
    );
    assert_eq!(read_a.unwrap(), pattern(1, half as usize));
    assert_eq!(read_b.unwrap(), pattern(2, half as usize));
    engine.replace_disk(p.tb.vp, None).unwrap();
    engine.rebuild(p.tb.vp, &|_, _| {}).unwrap();
    assert_parity_clean(&engine);
    assert_eq!(
        read(&engine, p.bucket_b, 0, half).unwrap(),
        pattern(2, half as usize)
    );
}

const CHILD_DIR: &str = "PERMAFROST_TEST_KILLED_GRID_DIR";

/// The same with a real kill: a child process gets there (its direct writer waiting at the gate forever) and is
/// killed with SIGKILL; this process replays and recovers what it left.
#[test]
fn a_process_killed_with_a_direct_and_a_delayed_write_in_one_stripe_of_a_degraded_group_loses_nothing_acknowledged(
) {
    const NAME: &str = "a_process_killed_with_a_direct_and_a_delayed_write_in_one_stripe_of_a_degraded_group_loses_nothing_acknowledged";
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let dir = std::path::PathBuf::from(dir);
        let gate = Arc::new(Gate::default());
        let engine = Arc::new(open_gated(&dir, &gate));
        let _writer = up_to_the_crash(&engine, &gate);
        std::fs::write(dir.join("at-the-crash"), b"").unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(60)); // killed here
        }
    }
    let dir = tempfile::tempdir().unwrap();
    create(dir.path()).close().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir.path())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("at-the-crash").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child process ended before the crash: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "the child process did not reach the crash"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    check_after_the_crash(dir.path());
}
