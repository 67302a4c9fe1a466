//! Disk failures, reconstruction, rebuild and IDR repair.

mod common;

use common::*;
use permafrost_engine::{Engine, WriteMode, HEADER_BYTES};

#[test]
fn failed_data_disk_reads_back_through_reconstruction() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let data = pattern(1, (3 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    let disk = engine.geometry().bucket_disk(0);
    engine.fail_disk(disk).unwrap();
    assert!(engine.is_failed(disk));
    assert_eq!(read(&engine, 0, 0, data.len() as u64).unwrap(), data);
    assert!(
        engine.write(0, 0, 4096, WriteMode::Direct).is_err(),
        "a failed bucket must refuse writes"
    );
    // Writes to the other members of its groups go on; their parity skips nothing it needs.
    let other = pattern(2, MIB as usize);
    write(&engine, 1, 0, &other, WriteMode::Direct);
    assert_eq!(read(&engine, 0, 0, data.len() as u64).unwrap(), data);
    assert_eq!(read(&engine, 1, 0, MIB).unwrap(), other);
}

#[test]
fn three_failed_disks_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let g = engine.geometry().clone();
    let d0 = g.bucket_disk(0);
    let hp = g.parity_targets(d0).hp;
    // Another data disk in d0's column: its vertical group is broken too.
    let column_mate = *g
        .group_members(permafrost_grid::GroupId::Vertical(g.column(d0)))
        .iter()
        .find(|&&d| d != d0 && matches!(g.role(d), permafrost_grid::Role::Data { .. }))
        .unwrap();
    let mate_bucket = g.disk_bucket(column_mate).unwrap();
    let a = pattern(1, (2 * MIB) as usize);
    let b = pattern(2, (2 * MIB) as usize);
    write(&engine, 0, 0, &a, WriteMode::Delayed);
    write(&engine, mate_bucket, MIB, &b, WriteMode::Direct);
    engine.flush().unwrap();
    for disk in [d0, hp, column_mate] {
        engine.fail_disk(disk).unwrap();
    }
    assert_eq!(read(&engine, 0, 0, a.len() as u64).unwrap(), a);
    assert_eq!(read(&engine, mate_bucket, MIB, b.len() as u64).unwrap(), b);
}

#[test]
fn rebuild_onto_a_fresh_disk_leaves_parity_clean() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    engine.pause_background(true);
    let g = engine.geometry().clone();
    let data: Vec<Vec<u8>> = (0..4)
        .map(|b| pattern(b as u64, (2 * MIB + 4096 * b as u64) as usize))
        .collect();
    for (b, d) in data.iter().enumerate() {
        let mode = [
            WriteMode::Delayed,
            WriteMode::Serialized,
            WriteMode::Direct,
            WriteMode::Delayed,
        ][b];
        write(&engine, b, 4096 * b as u64, d, mode);
    }
    engine.flush().unwrap();
    let d0 = g.bucket_disk(0);
    let hp = g.parity_targets(d0).hp;
    for disk in [d0, hp] {
        engine.fail_disk(disk).unwrap();
        // Writes while the parity disk is failed are rebuilt into it too.
        write(&engine, 2, 0, &data[2], WriteMode::Delayed);
        engine.replace_disk(disk, None).unwrap();
        assert!(engine.defect_bytes(disk) > 0);
        let report = engine
            .rebuild(disk, &|done, total| assert!(done <= total))
            .unwrap();
        assert!(report.unrecoverable.is_empty());
        assert_eq!(engine.defect_bytes(disk), 0);
        engine.flush().unwrap();
        assert_parity_clean(&engine);
    }
    for (b, d) in data.iter().enumerate() {
        let offset = if b == 2 { 0 } else { 4096 * b as u64 };
        assert_eq!(&read(&engine, b, offset, d.len() as u64).unwrap(), d);
    }
    engine.pause_background(false);
}

#[test]
fn rebuild_and_background_recovery_never_recover_a_range_twice() {
    // The background recovery runs while `rebuild` does: every defect byte is written back exactly once, and the
    // report accounts for what the background did during the run.
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    engine.pause_background(true);
    let data = pattern(7, (16 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    let disk = engine.geometry().bucket_disk(0);
    for round in 0..4 {
        engine.fail_disk(disk).unwrap();
        engine.replace_disk(disk, None).unwrap();
        let defect_bytes = engine.defect_bytes(disk);
        assert_eq!(defect_bytes, 16 * MIB);
        engine.reset_io_stats();
        engine.pause_background(false);
        // Let the background start on the disk first in some rounds.
        std::thread::sleep(std::time::Duration::from_millis(5 * round));
        let report = engine.rebuild(disk, &|_, _| {}).unwrap();
        assert!(report.unrecoverable.is_empty(), "{report:?}");
        assert_eq!(engine.defect_bytes(disk), 0);
        engine.pause_background(true);
        let written = engine.io_stats()[disk].logical_written_bytes;
        assert_eq!(
            written, defect_bytes,
            "round {round}: {written} bytes written back for {defect_bytes} defect bytes ({report:?})"
        );
        let counted = report.bytes_recovered + report.bytes_recovered_concurrently;
        assert!(counted <= defect_bytes, "round {round}: {report:?}");
        assert_eq!(read(&engine, 0, 0, data.len() as u64).unwrap(), data);
    }
}

#[test]
fn flipped_bits_are_repaired_by_idr_without_spinning_up_any_other_disk() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path()).close().unwrap();
    let (engine, faults) = open_faulty(dir.path());
    let data = pattern(9, (2 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    wait_all_off(&engine);
    let disk = engine.geometry().bucket_disk(0);
    // Corrupt a few blocks inside the first stripe's physical area (one bit each).
    for k in 0..3u64 {
        faults[disk]
            .flip_bit(HEADER_BYTES + 8192 + k * 70 * 4096 + 17, 3)
            .unwrap();
    }
    let before = spin_ups(&engine);
    assert_eq!(read(&engine, 0, 0, data.len() as u64).unwrap(), data);
    let after = spin_ups(&engine);
    assert_eq!(
        spun_up(&before, &after),
        vec![disk],
        "only the bucket's disk may spin up"
    );
    assert_eq!(
        engine.defect_bytes(disk),
        0,
        "IDR repaired it: nothing for the grid to do"
    );
}

#[test]
fn unreadable_range_is_reconstructed_and_written_back() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path()).close().unwrap();
    let (engine, faults) = open_faulty(dir.path());
    let data = pattern(3, (2 * MIB) as usize);
    write(&engine, 0, 0, &data, WriteMode::Serialized);
    let disk = engine.geometry().bucket_disk(0);
    // A burst of EIO covering far more than IDR repairs in one stripe.
    faults[disk].eio_range(HEADER_BYTES, 40 * 4096);
    assert_eq!(read(&engine, 0, 0, data.len() as u64).unwrap(), data);
    faults[disk].clear_eio();
    // The background recovery writes the stripe back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while engine.defect_bytes(disk) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "defect never recovered (disk failed: {})",
            engine.is_failed(disk)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!engine.is_failed(disk));
    assert_eq!(read(&engine, 0, 0, data.len() as u64).unwrap(), data);
    assert_parity_clean(&engine);
}

#[test]
fn a_full_file_system_fails_writes_but_no_disk_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path()).close().unwrap();
    let (engine, faults) = open_faulty(dir.path());
    let kept = pattern(5, (2 * MIB) as usize);
    write(&engine, 0, 0, &kept, WriteMode::Serialized);
    // The file system fills up: every write of every disk fails with ENOSPC, many times over (more than the
    // errors in a row that mark a disk failed), in each write mode.
    faults.iter().for_each(|f| f.set_file_system_full(true));
    let more = pattern(6, (2 * MIB) as usize);
    for attempt in 0..3 {
        for mode in [WriteMode::Serialized, WriteMode::Direct] {
            let mut promise = engine.write(1, 0, more.len() as u64, mode).unwrap();
            let error = promise
                .append(&more)
                .and_then(|()| promise.commit().map(|_| ()))
                .expect_err("a write on a full file system fails");
            assert!(
                error.to_string().contains("No space left on device"),
                "attempt {attempt}, {mode:?}: the error names the cause: {error}"
            );
        }
    }
    let failed: Vec<usize> = (0..engine.geometry().disks())
        .filter(|&d| engine.is_failed(d))
        .collect();
    assert!(
        failed.is_empty(),
        "disks marked failed for a full file system: {failed:?}"
    );
    assert_eq!(read(&engine, 0, 0, kept.len() as u64).unwrap(), kept);
    // Space comes back: the same write succeeds and everything reads back.
    faults.iter().for_each(|f| f.set_file_system_full(false));
    write(&engine, 1, 0, &more, WriteMode::Serialized);
    assert_eq!(read(&engine, 1, 0, more.len() as u64).unwrap(), more);
    assert_eq!(read(&engine, 0, 0, kept.len() as u64).unwrap(), kept);
}

#[test]
fn a_disk_whose_file_is_gone_opens_as_failed_and_the_grid_runs_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let data = pattern(4, MIB as usize);
    write(&engine, 0, 0, &data, WriteMode::Direct);
    engine.close().unwrap();
    std::fs::remove_file(dir.path().join("disks/disk-00.img")).unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    assert!(engine.is_failed(0));
    assert_eq!(read(&engine, 0, 0, MIB).unwrap(), data);
    engine.replace_disk(0, None).unwrap();
    engine.rebuild(0, &|_, _| {}).unwrap();
    assert_parity_clean(&engine);
}

#[test]
fn open_rejects_disks_of_another_grid_or_at_the_wrong_position() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path()).close().unwrap();
    // Swap two disk files: each is at the wrong position.
    let a = dir.path().join("disks/disk-01.img");
    let b = dir.path().join("disks/disk-02.img");
    let tmp = dir.path().join("disks/tmp.img");
    std::fs::rename(&a, &tmp).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&tmp, &b).unwrap();
    let err = Engine::open(dir.path())
        .err()
        .expect("wrong position must fail")
        .to_string();
    assert!(
        err.contains("disk 1") && err.contains("wrong position"),
        "{err}"
    );
    std::fs::rename(&a, &tmp).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&tmp, &b).unwrap();
    // A disk of another grid.
    let other = tempfile::tempdir().unwrap();
    create(other.path()).close().unwrap();
    std::fs::copy(
        other.path().join("disks/disk-05.img"),
        dir.path().join("disks/disk-05.img"),
    )
    .unwrap();
    let err = Engine::open(dir.path())
        .err()
        .expect("foreign disk must fail")
        .to_string();
    assert!(
        err.contains("disk 5") && err.contains("another grid"),
        "{err}"
    );
}
