//! Growing a grid by a data disk (`Engine::add_disk`, and `Engine::add_disk_live` on an open grid): no other disk
//! touched or spun up, parity valid without recomputation, the new bucket usable, three failures of the grown
//! geometry survived, refusals, and a crash at either side of the commit point.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use common::*;
use permafrost_engine::{AddDisk, DiskSpec, Engine, Error, WriteMode};
use permafrost_grid::{GroupId, Role};

fn file_spec(index: usize, capacity_bytes: u64) -> DiskSpec {
    DiskSpec::File {
        path: PathBuf::from(format!("disks/disk-{index:02}.img")),
        capacity_bytes,
    }
}

fn add(
    dir: &Path,
    spec: DiskSpec,
    hpg: Option<usize>,
    column: Option<usize>,
) -> Result<permafrost_engine::AddedDiskReport, Error> {
    Engine::add_disk(dir, AddDisk { spec, hpg, column })
}

/// Modification time and length of every disk file.
fn disk_files(dir: &Path, disks: usize) -> Vec<(SystemTime, u64)> {
    (0..disks)
        .map(|d| {
            let meta = std::fs::metadata(dir.join(format!("disks/disk-{d:02}.img"))).unwrap();
            (meta.modified().unwrap(), meta.len())
        })
        .collect()
}

fn spin_ups_persisted(engine: &Engine) -> Vec<u64> {
    engine
        .status()
        .unwrap()
        .disks
        .iter()
        .map(|d| d.power.spin_ups)
        .collect()
}

/// A grid with data in a few buckets (every write mode), closed; returns what was written where.
fn filled_grid(dir: &Path) -> Vec<(usize, u64, Vec<u8>)> {
    let engine = create(dir);
    let writes = vec![
        (0, 0, pattern(1, (3 * MIB) as usize), WriteMode::Serialized),
        (1, MIB, pattern(2, (2 * MIB) as usize), WriteMode::Delayed),
        (7, 0, pattern(3, MIB as usize), WriteMode::Direct),
        (31, 4096, pattern(4, MIB as usize), WriteMode::Delayed),
    ];
    for (bucket, offset, data, mode) in &writes {
        write(&engine, *bucket, *offset, data, *mode);
    }
    engine.flush().unwrap();
    engine.close().unwrap();
    writes.into_iter().map(|(b, o, d, _)| (b, o, d)).collect()
}

#[test]
fn adding_a_data_disk_touches_no_other_disk_and_its_bucket_takes_data() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let written = filled_grid(dir);
    let engine = Engine::open(dir).unwrap();
    let spin_ups_before = spin_ups_persisted(&engine);
    engine.close().unwrap();
    let files_before = disk_files(dir, 48);
    std::thread::sleep(std::time::Duration::from_millis(20)); // a touched file would get a later mtime

    let started = Instant::now();
    let report = add(dir, file_spec(48, DISK_BYTES), None, None).unwrap();
    let elapsed = started.elapsed();
    println!(
        "added disk {} ({}) in {:.1} ms: {report:?}",
        report.disk,
        report.geometry,
        elapsed.as_secs_f64() * 1e3
    );
    assert!(elapsed.as_secs_f64() < 5.0, "add took {elapsed:?}");
    assert_eq!(
        (
            report.disk,
            report.bucket,
            report.hpg,
            report.column,
            report.geometry_version
        ),
        (48, 32, 0, 5, 1),
        "the narrowest place: hPG 0 and its first free column"
    );
    assert_eq!((report.hp, report.vp), (4, 45));
    assert_eq!(
        disk_files(dir, 48),
        files_before,
        "no other disk file was written"
    );

    let engine = Engine::open(dir).unwrap();
    let g = engine.geometry().clone();
    assert_eq!((g.disks(), g.buckets(), g.version()), (49, 33, 1));
    assert_eq!(g.role(48), Role::Data { bucket: 32 });
    let status = engine.status().unwrap();
    assert_eq!(status.geometry_version, 1);
    assert_eq!(status.geometry, "8x6:4+1 +1 disk (hPG 0 col 5)");
    let spin_ups_after = spin_ups_persisted(&engine);
    assert_eq!(
        &spin_ups_after[..48],
        &spin_ups_before[..],
        "no disk spun up for the add"
    );
    assert_eq!(spin_ups_after[48], 0);
    // The never-written disk reads as zeros, so its groups' parity is valid as it was.
    assert_parity_clean(&engine);
    assert_eq!(read(&engine, 32, 0, MIB).unwrap(), vec![0u8; MIB as usize]);
    for (bucket, offset, data) in &written {
        assert_eq!(
            &read(&engine, *bucket, *offset, data.len() as u64).unwrap(),
            data
        );
    }
    // The new bucket takes data in every write mode, and its parity follows.
    let fresh = pattern(9, (3 * MIB) as usize);
    write(
        &engine,
        32,
        0,
        &fresh[..MIB as usize],
        WriteMode::Serialized,
    );
    write(
        &engine,
        32,
        MIB,
        &fresh[MIB as usize..2 * MIB as usize],
        WriteMode::Delayed,
    );
    write(
        &engine,
        32,
        2 * MIB,
        &fresh[2 * MIB as usize..],
        WriteMode::Direct,
    );
    engine.flush().unwrap();
    assert_parity_clean(&engine);
    assert_eq!(read(&engine, 32, 0, fresh.len() as u64).unwrap(), fresh);

    // Three failures of the new geometry: the new disk, its hP and a disk of its column.
    let column_mate = g.group_members(GroupId::Vertical(5))[0];
    for disk in [48, 4, column_mate] {
        engine.fail_disk(disk).unwrap();
    }
    assert_eq!(read(&engine, 32, 0, fresh.len() as u64).unwrap(), fresh);
    for (bucket, offset, data) in &written {
        assert_eq!(
            &read(&engine, *bucket, *offset, data.len() as u64).unwrap(),
            data
        );
    }
    // Replaced and rebuilt, the grown grid is whole again.
    for disk in [48, 4, column_mate] {
        engine.replace_disk(disk, None).unwrap();
    }
    for disk in [48, 4, column_mate] {
        let report = engine.rebuild(disk, &|_, _| {}).unwrap();
        assert!(report.unrecoverable.is_empty(), "{report:?}");
    }
    assert_parity_clean(&engine);
    engine.close().unwrap();
    let engine = Engine::open(dir).unwrap();
    assert_eq!(engine.geometry().disks(), 49);
    assert_eq!(read(&engine, 32, 0, fresh.len() as u64).unwrap(), fresh);
    engine.close().unwrap();
}

#[test]
fn a_disk_larger_than_its_parity_or_smaller_than_the_grid_or_in_a_taken_column_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    create(dir).close().unwrap();
    let error = add(dir, file_spec(48, 2 * DISK_BYTES), Some(0), Some(5))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("than disk 4 (") && error.contains("grid swap-parity"),
        "{error}"
    );
    let error = add(dir, file_spec(48, 2 * DISK_BYTES), None, None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("swap-parity"), "{error}");
    let error = add(dir, file_spec(48, DISK_BYTES / 2), None, None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("too small"), "{error}");
    let error = add(dir, file_spec(48, DISK_BYTES), Some(0), Some(2))
        .unwrap_err()
        .to_string();
    assert!(error.contains("column 2 already holds disk 2"), "{error}");
    let error = add(dir, file_spec(3, DISK_BYTES), None, None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("already disk 3"), "{error}");
    // Nothing of the refused adds stayed behind.
    assert!(!dir.join("disks/disk-48.img").exists());
    let engine = Engine::open(dir).unwrap();
    assert_eq!(engine.geometry().disks(), 48);
    engine.close().unwrap();
}

#[test]
fn a_crash_on_either_side_of_the_commit_point_leaves_the_old_or_the_new_geometry() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    create(dir).close().unwrap();
    let saved = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let (toml, journal) = (saved("grid.toml"), saved("journal.sqlite"));

    // Crash after the header, before the journal: the old geometry; the disk is reused by the next add.
    add(dir, file_spec(48, DISK_BYTES), Some(2), Some(7)).unwrap();
    let wal = dir.join("journal.sqlite-wal");
    let _ = std::fs::remove_file(&wal);
    std::fs::write(dir.join("grid.toml"), &toml).unwrap();
    std::fs::write(dir.join("journal.sqlite"), &journal).unwrap();
    let engine = Engine::open(dir).unwrap();
    assert_eq!(engine.geometry().disks(), 48);
    engine.close().unwrap();
    let report = add(dir, file_spec(48, DISK_BYTES), Some(2), Some(7)).unwrap();
    assert_eq!((report.disk, report.geometry_version), (48, 1));

    // Crash after the journal, before grid.toml: the new geometry, grid.toml repaired from the journal.
    std::fs::write(dir.join("grid.toml"), &toml).unwrap();
    let engine = Engine::open(dir).unwrap();
    assert_eq!(engine.geometry().disks(), 49);
    assert_eq!(engine.config().disks.len(), 49);
    assert_eq!(engine.geometry().added()[0].hpg, 2);
    write(
        &engine,
        32,
        0,
        &pattern(5, MIB as usize),
        WriteMode::Serialized,
    );
    assert_parity_clean(&engine);
    engine.close().unwrap();
}

#[test]
fn an_open_grid_grows_while_it_serves_and_its_new_disk_fails_and_recovers() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let written = filled_grid(dir);
    let engine = std::sync::Arc::new(Engine::open(dir).unwrap());
    // Let the disks the open's recovery or scrub touched go off, so a spin-up during the add would show.
    wait_all_off(&engine);
    let before = spin_ups(&engine);

    // A writer and a reader of other buckets run during the add.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let data = pattern(11, MIB as usize);
            let mut rounds = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) || rounds == 0 {
                write(&engine, 2, 0, &data, WriteMode::Delayed);
                assert_eq!(read(&engine, 2, 0, MIB).unwrap(), data);
                rounds += 1;
            }
            rounds
        })
    };
    let busy_disk = engine.geometry().bucket_disk(2);
    let started = Instant::now();
    let report = engine
        .add_disk_live(AddDisk {
            spec: file_spec(48, DISK_BYTES),
            hpg: None,
            column: None,
        })
        .unwrap();
    let elapsed = started.elapsed();
    let after_add = spin_ups(&engine);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(busy.join().unwrap() >= 1);
    println!(
        "open grid grew to {} in {:.1} ms (engine: {} ms)",
        report.geometry,
        elapsed.as_secs_f64() * 1e3,
        report.millis
    );
    assert!(elapsed.as_secs_f64() < 5.0, "add took {elapsed:?}");
    assert_eq!(
        (report.disk, report.bucket, report.hpg, report.column),
        (48, 32, 0, 5)
    );
    // The busy bucket's disk and its parity disks may spin for the writer; no other disk spun up.
    let busy_targets = engine.geometry().parity_targets(busy_disk);
    let allowed = [
        busy_disk,
        busy_targets.hp,
        busy_targets.vp,
        busy_targets.vhp,
    ];
    let spun: Vec<usize> = spun_up(&before, &after_add)
        .into_iter()
        .filter(|d| !allowed.contains(d))
        .collect();
    assert!(spun.is_empty(), "disks spun up during the add: {spun:?}");
    assert_eq!(engine.power().stats(48).spin_ups, 0, "the new disk is off");

    // Every per-disk view follows the grown geometry.
    let g = engine.geometry();
    assert_eq!((g.disks(), g.buckets(), g.version()), (49, 33, 1));
    assert_eq!(engine.buckets(), 33);
    assert_eq!(engine.power().n_disks(), 49);
    assert_eq!(engine.io_stats().len(), 49);
    let status = engine.status().unwrap();
    assert_eq!(status.disks.len(), 49);
    assert_eq!(status.geometry, "8x6:4+1 +1 disk (hPG 0 col 5)");
    assert_eq!(status.disks[48].role, Role::Data { bucket: 32 });
    assert_eq!(engine.config().disks.len(), 49);
    engine.flush().unwrap();
    assert_parity_clean(&engine);

    // The new bucket reads as zeros and takes data in every write mode; its parity follows.
    assert_eq!(read(&engine, 32, 0, MIB).unwrap(), vec![0u8; MIB as usize]);
    let fresh = pattern(12, (3 * MIB) as usize);
    for (i, mode) in [WriteMode::Serialized, WriteMode::Delayed, WriteMode::Direct]
        .into_iter()
        .enumerate()
    {
        let part = &fresh[i * MIB as usize..(i + 1) * MIB as usize];
        write(&engine, 32, i as u64 * MIB, part, mode);
    }
    engine.flush().unwrap();
    assert_parity_clean(&engine);
    assert_eq!(read(&engine, 32, 0, 3 * MIB).unwrap(), fresh);
    for (bucket, offset, data) in &written {
        assert_eq!(
            &read(&engine, *bucket, *offset, data.len() as u64).unwrap(),
            data
        );
    }

    // A second add while open: refused when larger than its parity disk (the grid unchanged), then a fit.
    let error = engine
        .add_disk_live(AddDisk {
            spec: file_spec(49, 2 * DISK_BYTES),
            hpg: Some(1),
            column: None,
        })
        .unwrap_err()
        .to_string();
    assert!(error.contains("swap-parity"), "{error}");
    assert_eq!(engine.geometry().disks(), 49);
    // With every disk off and nothing running, an add spins up no disk at all.
    wait_all_off(&engine);
    let quiet: Vec<u64> = (0..49).map(|d| engine.power().stats(d).spin_ups).collect();
    let second = engine
        .add_disk_live(AddDisk {
            spec: file_spec(49, DISK_BYTES),
            hpg: None,
            column: None,
        })
        .unwrap();
    assert_eq!((second.disk, second.bucket), (49, 33));
    assert_eq!(engine.geometry().disks(), 50);
    let after_quiet: Vec<u64> = (0..50).map(|d| engine.power().stats(d).spin_ups).collect();
    assert_eq!(&after_quiet[..49], &quiet[..], "a disk spun up for the add");
    assert_eq!(after_quiet[49], 0);

    // The new disk fails: its bucket is reconstructed from the grid, then it is replaced and recovered.
    engine.fail_disk(48).unwrap();
    assert_eq!(read(&engine, 32, 0, 3 * MIB).unwrap(), fresh);
    engine.replace_disk(48, None).unwrap();
    let rebuilt = engine.rebuild(48, &|_, _| {}).unwrap();
    assert!(rebuilt.unrecoverable.is_empty(), "{rebuilt:?}");
    assert!(
        rebuilt.bytes_recovered + rebuilt.bytes_recovered_concurrently >= 3 * MIB,
        "the background recovery or the rebuild recovered the new disk's data: {rebuilt:?}"
    );
    assert!(!engine.is_failed(48));
    assert_eq!(engine.defect_bytes(48), 0);
    assert_parity_clean(&engine);
    assert_eq!(read(&engine, 32, 0, 3 * MIB).unwrap(), fresh);

    // Reopened, the grid has both disks and their data.
    let engine = std::sync::Arc::try_unwrap(engine)
        .ok()
        .expect("the only handle");
    engine.close().unwrap();
    let engine = Engine::open(dir).unwrap();
    assert_eq!(engine.geometry().disks(), 50);
    assert_eq!(engine.geometry().version(), 2);
    assert_eq!(read(&engine, 32, 0, 3 * MIB).unwrap(), fresh);
    assert_eq!(read(&engine, 2, 0, MIB).unwrap(), pattern(11, MIB as usize));
    assert_parity_clean(&engine);
    engine.close().unwrap();
}
