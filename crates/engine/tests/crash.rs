//! Replay after a crash at every step of every write mode: the journal finishes or recovers each unfinished
//! txn, parity ends up correct, and the bucket holds the old data, the new data, or (direct mode, whose write
//! hole the thesis accepts) a per-block mix of both — never anything else.

mod common;

use common::*;
use permafrost_engine::{CrashPoint, Engine, Error, WriteMode};

const OFFSET: u64 = MIB / 2;

/// Write `old` (if any), crash a write of `new` at `point`, reopen, recover; return the bucket's bytes.
fn crash_and_replay(
    mode: WriteMode,
    point: CrashPoint,
    with_old: bool,
) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    engine.pause_background(true);
    let len = (MIB + 8192) as usize;
    let old = if with_old {
        pattern(1, len)
    } else {
        vec![0u8; len]
    };
    if with_old {
        write(&engine, 0, OFFSET, &old, WriteMode::Serialized);
    }
    let new = pattern(2, len);
    engine.set_crash_point(Some(point));
    let mut promise = engine.write(0, OFFSET, len as u64, mode).unwrap();
    // The chunk is written inside append() when it fills, else in commit().
    let result = promise
        .append(&new)
        .and_then(|()| promise.commit().map(|_| ()));
    if point == CrashPoint::DrainHalfWritten {
        result.expect("the write itself completes");
        let err = engine.flush().expect_err("the drain must crash");
        assert!(matches!(err, Error::SimulatedCrash(_)), "{err}");
    } else {
        match result {
            Err(Error::SimulatedCrash(p)) => assert_eq!(p, point),
            other => panic!("{mode} {point:?}: expected a simulated crash, got {other:?}"),
        }
    }
    drop(engine);

    let engine = Engine::open(dir.path()).unwrap();
    engine.recover_defects().unwrap();
    engine.flush().unwrap();
    let status = engine.status().unwrap();
    assert_eq!(
        status.open_promises, 0,
        "{mode} {point:?}: replay left promises"
    );
    assert!(
        status.disks.iter().all(|d| d.defect_bytes == 0),
        "{mode} {point:?}: defects left"
    );
    assert_parity_clean(&engine);
    let back = read(&engine, 0, OFFSET, len as u64).unwrap();
    // No delta files are left behind.
    assert_eq!(
        std::fs::read_dir(dir.path().join("deltas"))
            .unwrap()
            .count(),
        0
    );
    (old, new, back)
}

fn assert_blocks_old_or_new(old: &[u8], new: &[u8], back: &[u8], what: &str) {
    for (i, ((o, n), b)) in old
        .chunks(4096)
        .zip(new.chunks(4096))
        .zip(back.chunks(4096))
        .enumerate()
    {
        assert!(
            b == o || b == n,
            "{what}: block {i} is neither old nor new data"
        );
    }
}

#[test]
fn serialized_crash_before_data_finished_restores_old_data() {
    for point in [
        CrashPoint::DataStarted,
        CrashPoint::DataHalfWritten,
        CrashPoint::DataWritten,
    ] {
        let (old, _new, back) = crash_and_replay(WriteMode::Serialized, point, true);
        assert!(back == old, "serialized {point:?}: old data must come back");
    }
}

#[test]
fn serialized_crash_into_fresh_space_reads_zeros() {
    let (old, _new, back) =
        crash_and_replay(WriteMode::Serialized, CrashPoint::DataHalfWritten, false);
    assert!(back == old && old.iter().all(|&b| b == 0));
}

#[test]
fn serialized_crash_after_data_finished_keeps_new_data() {
    for point in [CrashPoint::DataFinished, CrashPoint::ParityHalfWritten] {
        let (_old, new, back) = crash_and_replay(WriteMode::Serialized, point, true);
        assert!(back == new, "serialized {point:?}: new data must stay");
    }
}

#[test]
fn delayed_crash_replays_or_discards_the_delta() {
    let (old, _, back) = crash_and_replay(WriteMode::Delayed, CrashPoint::DataHalfWritten, true);
    assert!(back == old, "delayed, data unfinished: old data");
    for point in [CrashPoint::DataFinished, CrashPoint::DrainHalfWritten] {
        let (_, new, back) = crash_and_replay(WriteMode::Delayed, point, true);
        assert!(back == new, "delayed {point:?}: new data must stay");
    }
}

#[test]
fn direct_crash_leaves_consistent_parity_and_old_or_new_blocks() {
    for point in [
        CrashPoint::DataStarted,
        CrashPoint::DataHalfWritten,
        CrashPoint::ParityHalfWritten,
    ] {
        let (old, new, back) = crash_and_replay(WriteMode::Direct, point, true);
        assert_blocks_old_or_new(&old, &new, &back, &format!("direct {point:?}"));
    }
}
