//! Evacuating a data disk: its bytes are copied from the old disk where it reads and reconstructed from the grid
//! where it does not, every object stays byte-exact, the old disk is retired, and a crash mid-way resumes.

mod common;

use std::io::{Seek, SeekFrom, Write};

use common::*;
use permafrost_engine::{
    CrashPoint, Engine, Error, EvacuationState, OpenOptions, WriteMode, HEADER_BYTES,
};
use permafrost_grid::Role;

/// The first data disk and its bucket.
fn data_disk(engine: &Engine) -> (usize, usize) {
    (0..engine.geometry().disks())
        .find_map(|d| match engine.geometry().role(d) {
            Role::Data { bucket } => Some((d, bucket)),
            _ => None,
        })
        .expect("a data disk")
}

fn disk_path(engine: &Engine, dir: &std::path::Path, disk: usize) -> std::path::PathBuf {
    engine.config().disks[disk].resolved_path(dir)
}

/// Fill `bucket` (12 MiB: three recovery chunks) and two other buckets; returns what each holds.
fn fill(engine: &Engine, bucket: usize) -> Vec<(usize, Vec<u8>)> {
    let mut held = Vec::new();
    for (i, b) in [bucket, bucket + 1, bucket + 7].into_iter().enumerate() {
        let data = pattern(40 + i as u64, (12 * MIB) as usize);
        write(engine, b, 0, &data, WriteMode::Serialized);
        held.push((b, data));
    }
    held
}

fn assert_held(engine: &Engine, held: &[(usize, Vec<u8>)]) {
    for (bucket, data) in held {
        let back = read(engine, *bucket, 0, data.len() as u64).unwrap();
        assert!(
            back == *data,
            "bucket {bucket} differs after the evacuation"
        );
    }
}

#[test]
fn evacuation_copies_readable_ranges_reconstructs_the_rest_and_retires_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let (disk, bucket) = data_disk(&engine);
    let held = fill(&engine, bucket);
    engine.flush().unwrap();
    let old_path = disk_path(&engine, dir.path(), disk);
    // Garbage over 512 KiB of the old disk: more than its IDR code repairs, so the grid must supply it.
    {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&old_path)
            .unwrap();
        file.seek(SeekFrom::Start(HEADER_BYTES + 3 * MIB)).unwrap();
        file.write_all(&pattern(99, (MIB / 2) as usize)).unwrap();
        file.sync_all().unwrap();
    }
    let calls = std::sync::Mutex::new(Vec::new());
    let report = engine
        .evacuate(disk, None, &|done, total| {
            calls.lock().unwrap().push((done, total))
        })
        .unwrap();
    assert!(report.retired, "{report:?}");
    assert!(report.recovery.unrecoverable.is_empty(), "{report:?}");
    assert!(
        report.bytes_reconstructed > 0,
        "nothing reconstructed: {report:?}"
    );
    assert!(
        report.bytes_copied >= 10 * MIB
            && report.bytes_copied + report.bytes_reconstructed == 12 * MIB,
        "most bytes must come from the old disk: {report:?}"
    );
    let (done, total) = *calls.lock().unwrap().last().unwrap();
    assert_eq!(done, total);
    assert!(total > 0);

    assert_held(&engine, &held);
    assert_parity_clean(&engine);
    let status = engine.status().unwrap();
    assert_eq!(status.disks[disk].defect_bytes, 0);
    assert!(!status.disks[disk].failed);
    assert_ne!(disk_path(&engine, dir.path(), disk), old_path);
    assert_eq!(status.evacuations.len(), 1);
    let record = &status.evacuations[0];
    assert_eq!(record.disk, disk);
    assert_eq!(record.state, EvacuationState::Retired);
    assert!(record.finished_ms.is_some());
    engine.close().unwrap();

    // The replacement is the disk now: reopened, everything reads, and nothing was left to recover.
    let engine = Engine::open(dir.path()).unwrap();
    assert_held(&engine, &held);
    assert_eq!(engine.defect_bytes(disk), 0);
    // A retired disk's position can be evacuated again (to yet another file).
    let again = engine.evacuate(disk, None, &|_, _| {}).unwrap();
    assert!(again.retired);
    assert_eq!(again.bytes_reconstructed, 0);
    assert_held(&engine, &held);
    assert_eq!(engine.evacuations().unwrap().len(), 2);
    engine.close().unwrap();
}

#[test]
fn a_crash_mid_evacuation_resumes_without_copying_twice() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    engine.pause_background(true);
    let (disk, bucket) = data_disk(&engine);
    let held = fill(&engine, bucket);
    engine.set_crash_point(Some(CrashPoint::EvacuationCopied));
    let err = engine.evacuate(disk, None, &|_, _| {}).unwrap_err();
    assert!(
        matches!(err, Error::SimulatedCrash(CrashPoint::EvacuationCopied)),
        "{err}"
    );
    let records = engine.evacuations().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].state, EvacuationState::Copying);
    let left = engine.defect_bytes(disk);
    assert!(
        left > 0 && left < 12 * MIB,
        "the first chunk is journaled: {left} left"
    );
    drop(engine);

    let engine = Engine::open_paused(dir.path(), OpenOptions::default()).unwrap();
    // Objects read while the evacuation is pending (the defects come from the grid).
    assert_held(&engine, &held);
    // Another target than the recorded one is refused.
    let other = permafrost_engine::DiskSpec::File {
        path: "disks/elsewhere.img".into(),
        capacity_bytes: DISK_BYTES,
    };
    assert!(engine.evacuate(disk, Some(other), &|_, _| {}).is_err());
    let report = engine.evacuate(disk, None, &|_, _| {}).unwrap();
    assert!(report.retired, "{report:?}");
    assert!(report.bytes_copied > 0);
    assert!(
        report.bytes_copied + report.bytes_reconstructed <= left,
        "resumed where the journal left off: {report:?}, {left} left"
    );
    engine.pause_background(false);
    assert_held(&engine, &held);
    assert_parity_clean(&engine);
    let records = engine.evacuations().unwrap();
    assert_eq!(records[0].state, EvacuationState::Retired);
    assert_eq!(engine.defect_bytes(disk), 0);
    engine.close().unwrap();
}

#[test]
fn a_failed_disk_or_a_parity_disk_is_handled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let (disk, bucket) = data_disk(&engine);
    let held = fill(&engine, bucket);
    engine.flush().unwrap();
    // A parity disk is evacuated from the grid (drains may have changed it), still byte-exact.
    let parity = (0..engine.geometry().disks())
        .find(|&d| !matches!(engine.geometry().role(d), Role::Data { .. }))
        .unwrap();
    let report = engine.evacuate(parity, None, &|_, _| {}).unwrap();
    assert!(report.retired);
    assert_eq!(report.bytes_copied, 0);
    assert_parity_clean(&engine);
    // A failed disk cannot be evacuated: it must be replaced and rebuilt.
    engine.fail_disk(disk).unwrap();
    let err = engine.evacuate(disk, None, &|_, _| {}).unwrap_err();
    assert!(err.to_string().contains("replace"), "{err}");
    assert_held(&engine, &held);
    engine.close().unwrap();
}

#[test]
fn a_read_during_the_evacuation_comes_from_the_old_disk_without_spinning_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let (disk, bucket) = data_disk(&engine);
    let held = fill(&engine, bucket);
    // Then zeros a writer wrote: 64 KiB of them inside, and a tail that ends mid-stripe (padded with zeros). Such
    // blocks are copied, not reconstructed: IDR vouches for them.
    let mut tail = pattern(7, (MIB + 5000) as usize);
    tail[4096..4096 + 65536].fill(0);
    write(&engine, bucket, 12 * MIB, &tail, WriteMode::Serialized);
    let mut data = held[0].1.clone();
    data.extend_from_slice(&tail);
    let data = &data;
    engine.flush().unwrap();
    let checked = std::sync::atomic::AtomicBool::new(false);
    let report = engine
        .evacuate(disk, None, &|done, total| {
            // Between two recovery chunks: part copied, part still only on the old disk.
            if done == 0 || done >= total || checked.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            assert!(engine.defect_bytes(disk) > 0, "nothing left to copy");
            // Every other disk spun down, so a reconstruction would have to spin the group up.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while (0..engine.geometry().disks()).any(|d| {
                d != disk && engine.power().state(d) != permafrost_disk::power::PowerState::Off
            }) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "disks did not spin down"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let before = spin_ups(&engine);
            let back = read(&engine, bucket, 0, data.len() as u64).unwrap();
            assert!(
                back == *data,
                "the evacuating disk read back different bytes"
            );
            let spun = spun_up(&before, &spin_ups(&engine));
            assert!(
                spun.iter().all(|&d| d == disk),
                "a read during the evacuation spun {spun:?}, not only disk {disk}"
            );
            checked.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .unwrap();
    assert!(
        checked.into_inner(),
        "the evacuation made no progress call mid-way"
    );
    assert!(report.retired, "{report:?}");
    assert!(
        report.bytes_served_to_readers >= 4 * MIB,
        "the read was not served from the old disk: {report:?}"
    );
    assert_eq!(report.bytes_reconstructed, 0, "{report:?}");
    assert_held(&engine, &held);
    assert_parity_clean(&engine);
    engine.close().unwrap();
}
