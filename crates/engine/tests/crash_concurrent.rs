//! A crash while several data disks of one horizontal parity group are written at the same time (what the store
//! does when it persists the grid buckets of a group together), at every crash point of every write mode: after
//! the replay, `recover_defects` repairs every range, parity verifies, the ranges in flight accept writes again,
//! every write acknowledged before the crash reads back exact, and every 4 KiB block of a write that was not
//! acknowledged holds its old or its new content.
//!
//! A simulated crash (`Engine::set_crash_point`) stops the engine without killing the process: the crashed writer
//! lets go of its range locks with its journal row still open, and from then on no thread of the crashed engine
//! takes a range lock to write (a scrub, a recovery, a drain or another writer is refused with `Closed`, as a
//! killed process does nothing more; `crash_stops_writes.rs` checks that no file changes). So what the replay
//! meets here is what a killed process leaves. Each case also runs with one disk failed while the writes are in
//! flight (replaced and rebuilt after the replay).

mod common;

use std::sync::Barrier;

use common::*;
use permafrost_engine::{CrashPoint, Engine, Error, WriteMode};
use permafrost_grid::GroupId;

/// Where the writes in flight go on every data disk of the group: across stripes, not stripe aligned.
const OFFSET: u64 = MIB / 2;
const LEN: usize = (MIB + 8192) as usize;
/// Acknowledged bytes just before the writes' range, in the same stripe (disks with old data only).
const NEIGHBOR: u64 = 8192;

fn points(mode: WriteMode) -> Vec<CrashPoint> {
    use CrashPoint::*;
    match mode {
        WriteMode::Direct => vec![DataStarted, DataHalfWritten, DataWritten, ParityHalfWritten],
        WriteMode::Serialized => vec![
            DataStarted,
            DataHalfWritten,
            DataWritten,
            DataFinished,
            ParityHalfWritten,
        ],
        WriteMode::Delayed => vec![
            DataStarted,
            DataHalfWritten,
            DataWritten,
            DataFinished,
            DrainHalfWritten,
        ],
    }
}

/// What one data disk of the group holds before the crash, and what is written to it when the engine crashes.
struct Member {
    bucket: usize,
    disk: usize,
    /// Old acknowledged content of `[OFFSET - NEIGHBOR, OFFSET + LEN)`; `None`: never written. All members or
    /// none have old data, so whichever writer the crash stops, both cases are run.
    old: Option<Vec<u8>>,
    new: Vec<u8>,
}

/// `one_failed`: a data disk of another group, in the column of the group's first member, holds acknowledged data
/// over the same range and is failed before the crash (the grid is degraded while the write is in flight); it is
/// replaced and rebuilt after the replay.
fn run(mode: WriteMode, point: CrashPoint, old_data: bool, one_failed: bool) {
    let what = format!("{mode} {point:?} (old data: {old_data}, one disk failed: {one_failed})");
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    engine.pause_background(true);
    let geometry = engine.geometry().clone();
    let group = geometry.group_members(GroupId::Horizontal(0)).to_vec();
    let data_disks = &group[..group.len() - 1];
    assert!(data_disks.len() >= 2, "a group of at least two data disks");
    let mut members: Vec<Member> = data_disks
        .iter()
        .enumerate()
        .map(|(i, &disk)| Member {
            bucket: geometry.disk_bucket(disk).expect("a data disk"),
            disk,
            old: old_data.then(|| pattern(100 + i as u64, NEIGHBOR as usize + LEN)),
            new: pattern(200 + i as u64, LEN),
        })
        .collect();
    let failed = one_failed.then(|| {
        let column = geometry.column(members[0].disk);
        let disk = *geometry
            .group_members(GroupId::Vertical(column))
            .iter()
            .find(|&&d| geometry.disk_bucket(d).is_some() && !data_disks.contains(&d))
            .expect("another data disk in the column");
        let bucket = geometry.disk_bucket(disk).expect("a data disk");
        let data = pattern(400, NEIGHBOR as usize + LEN);
        write(
            &engine,
            bucket,
            OFFSET - NEIGHBOR,
            &data,
            WriteMode::Serialized,
        );
        engine.fail_disk(disk).unwrap();
        (disk, bucket, data)
    });
    for m in &members {
        if let Some(old) = &m.old {
            write(
                &engine,
                m.bucket,
                OFFSET - NEIGHBOR,
                old,
                WriteMode::Serialized,
            );
        }
    }

    // Every member written at the same time; the engine stops at `point` in one of them (or in the drain).
    engine.set_crash_point(Some(point));
    let barrier = Barrier::new(members.len());
    let results: Vec<Result<(), Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = members
            .iter()
            .map(|m| {
                let (engine, barrier) = (&engine, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    let mut promise = engine.write(m.bucket, OFFSET, LEN as u64, mode)?;
                    promise.append(&m.new)?;
                    promise.commit().map(|_| ())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    if point == CrashPoint::DrainHalfWritten {
        for r in &results {
            assert!(r.is_ok(), "{what}: the writes themselves complete: {r:?}");
        }
        let err = engine.flush().expect_err("the drain must crash");
        assert!(matches!(err, Error::SimulatedCrash(_)), "{what}: {err}");
    } else {
        let crashed = results
            .iter()
            .filter(|r| matches!(r, Err(Error::SimulatedCrash(p)) if *p == point))
            .count();
        assert_eq!(crashed, 1, "{what}: one writer crashes: {results:?}");
        for r in &results {
            assert!(
                matches!(
                    r,
                    Ok(()) | Err(Error::SimulatedCrash(_)) | Err(Error::Closed)
                ),
                "{what}: a writer failed otherwise than by the crash: {r:?}"
            );
        }
    }
    let acknowledged: Vec<bool> = results.iter().map(|r| r.is_ok()).collect();
    drop(engine);

    let engine = Engine::open(dir.path()).unwrap();
    let report = engine.recover_defects().unwrap();
    assert!(
        report.unrecoverable.is_empty(),
        "{what}: unrecoverable after the crash: {:?}",
        report.unrecoverable
    );
    if let Some((disk, bucket, data)) = &failed {
        engine.replace_disk(*disk, None).unwrap();
        let report = engine.rebuild(*disk, &|_, _| {}).unwrap();
        assert!(
            report.unrecoverable.is_empty(),
            "{what}: rebuild of disk {disk}: unrecoverable {:?}",
            report.unrecoverable
        );
        let back = read(&engine, *bucket, OFFSET - NEIGHBOR, data.len() as u64).unwrap();
        assert!(back == *data, "{what}: the rebuilt disk {disk} differs");
    }
    engine.flush().unwrap();
    let status = engine.status().unwrap();
    assert_eq!(status.open_promises, 0, "{what}: replay left promises");
    for (disk, d) in status.disks.iter().enumerate() {
        assert_eq!(d.defect_bytes, 0, "{what}: disk {disk} still has defects");
    }
    assert_parity_clean(&engine);
    for (m, &acked) in members.iter().zip(&acknowledged) {
        let back = read(&engine, m.bucket, OFFSET - NEIGHBOR, NEIGHBOR + LEN as u64)
            .unwrap_or_else(|e| panic!("{what}: disk {} cannot be read: {e}", m.disk));
        let old = m
            .old
            .clone()
            .unwrap_or_else(|| vec![0; NEIGHBOR as usize + LEN]);
        let (neighbor, range) = back.split_at(NEIGHBOR as usize);
        assert!(
            neighbor == &old[..NEIGHBOR as usize],
            "{what}: disk {}: the acknowledged bytes next to the write changed",
            m.disk
        );
        if acked {
            assert!(
                range == &m.new[..],
                "{what}: disk {}: an acknowledged write did not read back exact",
                m.disk
            );
        } else {
            for (i, ((b, o), n)) in range
                .chunks(4096)
                .zip(old[NEIGHBOR as usize..].chunks(4096))
                .zip(m.new.chunks(4096))
                .enumerate()
            {
                assert!(
                    b == o || b == n,
                    "{what}: disk {} block {i} of a write in flight is neither old nor new",
                    m.disk
                );
            }
        }
    }

    // The ranges in flight take writes again, in every mode.
    for (i, m) in members.iter_mut().enumerate() {
        m.new = pattern(300 + i as u64, LEN);
        write(&engine, m.bucket, OFFSET, &m.new, mode);
    }
    engine.flush().unwrap();
    for m in &members {
        let back = read(&engine, m.bucket, OFFSET, LEN as u64).unwrap();
        assert!(back == m.new, "{what}: disk {}: rewrite differs", m.disk);
    }
    assert_parity_clean(&engine);
    engine.close().unwrap();
}

#[test]
fn direct_crash_with_a_group_written_at_once_leaves_every_range_recoverable() {
    for point in points(WriteMode::Direct) {
        run(WriteMode::Direct, point, false, false);
        run(WriteMode::Direct, point, true, false);
        run(WriteMode::Direct, point, true, true);
    }
}

#[test]
fn serialized_crash_with_a_group_written_at_once_leaves_every_range_recoverable() {
    for point in points(WriteMode::Serialized) {
        run(WriteMode::Serialized, point, false, false);
        run(WriteMode::Serialized, point, true, false);
        run(WriteMode::Serialized, point, true, true);
    }
}

#[test]
fn delayed_crash_with_a_group_written_at_once_leaves_every_range_recoverable() {
    for point in points(WriteMode::Delayed) {
        run(WriteMode::Delayed, point, false, false);
        run(WriteMode::Delayed, point, true, false);
        run(WriteMode::Delayed, point, true, true);
    }
}
