//! Fault injection on file-backed disks (8×6, 4+1, small disks), through the engine's public API.
//!
//! For each write mode: fill every bucket completely with random data (1 MiB buckets); then for at least 200
//! random sets of 1, 2 and 3 failed disks — files deleted, zeroed, failing every I/O, returning EIO on the whole
//! data area or on random ranges — every bucket reads back byte-exact; the disks are then replaced by fresh ones
//! and rebuilt, and `verify_parity` (no mismatch, no skipped group) and a full scrub of every disk report zero
//! errors. Each set starts from the grid the previous set rebuilt, so a rebuild that left anything wrong is caught
//! by the next set's reads.

#[path = "../src/pattern.rs"]
mod pattern;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use permafrost_disk::{Disk, FaultHandle, FaultyDisk};
use permafrost_engine::{Engine, GridConfig, OpenOptions, WriteMode, HEADER_BYTES};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SETS_PER_MODE: usize = 201;
/// The header and one IDR stripe (274 physical blocks): buckets of 1 MiB, filled completely.
const DISK_BYTES: u64 = HEADER_BYTES + 274 * 4096;
const DISKS: usize = 48;

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The disk's file is gone.
    Deleted,
    /// The disk's file is all zeros (a blank replacement nobody told the engine about).
    Zeroed,
    /// Every I/O fails.
    FailAll,
    /// Reads and writes of the whole data area return EIO.
    Eio,
    /// Reads and writes of a few random ranges of the data area return EIO (latent sector errors).
    EioRanges,
}

const FAULTS: [Fault; 5] = [
    Fault::Deleted,
    Fault::Zeroed,
    Fault::FailAll,
    Fault::Eio,
    Fault::EioRanges,
];

fn disk_path(dir: &Path, disk: usize) -> PathBuf {
    dir.join(format!("disks/disk-{disk:02}.img"))
}

/// Every bucket's expected content (the pattern, generated once).
fn expected_buckets(seed: u64, buckets: usize, capacity: u64) -> Vec<Vec<u8>> {
    (0..buckets)
        .map(|bucket| pattern::pattern_bytes(seed, bucket, 0, capacity as usize))
        .collect()
}

/// A grid whose every bucket is full; returns the buckets' content.
fn create_filled_grid(dir: &Path, mode: WriteMode, seed: u64) -> Vec<Vec<u8>> {
    let mut config = GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), DISK_BYTES);
    // Spin-ups of 1 ms: the power model still runs (budget, spin-up counts) without the 20 ms test delay on every
    // bucket each set reads.
    config.power = permafrost_disk::power::PowerProfile {
        spin_up_ms: 1,
        ..permafrost_disk::power::PowerProfile::for_tests()
    };
    config.write_mode_default = mode;
    let engine = Engine::create(dir, config).unwrap();
    let capacity = engine.bucket_capacity_bytes();
    assert_eq!(capacity, 1 << 20, "the test means 1 MiB buckets");
    let expected = expected_buckets(seed, engine.buckets(), capacity);
    for (bucket, data) in expected.iter().enumerate() {
        let mut promise = engine.write(bucket, 0, capacity, mode).unwrap();
        promise.append(data).unwrap();
        promise.commit().unwrap();
    }
    engine.flush().unwrap();
    let report = engine.verify_parity(&|_, _| {}).unwrap();
    assert!(
        report.mismatches.is_empty() && report.groups_skipped == 0,
        "parity wrong right after filling: {report:?}"
    );
    engine.close().unwrap();
    expected
}

/// A filled grid grown by `grow` data disks after it was filled (`Engine::add_disk`, each where the engine
/// chooses), whose new buckets are then filled too; returns every bucket's content.
fn create_filled_grown_grid(dir: &Path, mode: WriteMode, seed: u64, grow: usize) -> Vec<Vec<u8>> {
    create_filled_grid(dir, mode, seed);
    for i in 0..grow {
        let report = Engine::add_disk(
            dir,
            permafrost_engine::AddDisk {
                spec: permafrost_engine::DiskSpec::File {
                    path: disk_path(Path::new(""), DISKS + i),
                    capacity_bytes: DISK_BYTES,
                },
                hpg: None,
                column: None,
            },
        )
        .unwrap();
        assert_eq!(report.disk, DISKS + i);
    }
    let engine = Engine::open(dir).unwrap();
    let capacity = engine.bucket_capacity_bytes();
    let expected = expected_buckets(seed, engine.buckets(), capacity);
    for (bucket, data) in expected.iter().enumerate().skip(engine.buckets() - grow) {
        let mut promise = engine.write(bucket, 0, capacity, mode).unwrap();
        promise.append(data).unwrap();
        promise.commit().unwrap();
    }
    engine.flush().unwrap();
    let report = engine.verify_parity(&|_, _| {}).unwrap();
    assert!(
        report.mismatches.is_empty() && report.groups_skipped == 0,
        "parity wrong after growing and filling: {report:?}"
    );
    engine.close().unwrap();
    expected
}

fn read_bucket(engine: &Engine, bucket: usize, buf: &mut [u8]) {
    let mut promise = engine
        .read(bucket, 0, buf.len() as u64)
        .unwrap_or_else(|e| panic!("open read of bucket {bucket}: {e}"));
    promise
        .read_exact(buf)
        .unwrap_or_else(|e| panic!("read of bucket {bucket}: {e}"));
}

fn assert_all_buckets(engine: &Engine, expected: &[Vec<u8>], context: &str) {
    let mut got = vec![0u8; engine.bucket_capacity_bytes() as usize];
    for (bucket, want) in expected.iter().enumerate() {
        read_bucket(engine, bucket, &mut got);
        assert!(got == *want, "{context}: bucket {bucket} differs");
    }
}

/// Wall time per phase of a mode's run, printed at the end (what the test spends its time on).
#[derive(Default)]
struct Phases {
    open: Duration,
    read: Duration,
    rebuild: Duration,
    verify: Duration,
    scrub: Duration,
}

fn timed<T>(total: &mut Duration, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    *total += started.elapsed();
    out
}

/// Where the grids live: RAM (`/dev/shm`) where there is one with room to spare (a container's default 64 MiB
/// is not enough for two modes at once). The test is about fault handling, not the I/O stack: there the file disks
/// fall back from O_DIRECT to buffered I/O and fsync is free; the engine's logic is the same.
fn temp_dir() -> tempfile::TempDir {
    const SHM_BYTES_MIN: u64 = 1 << 30;
    let shm = Path::new("/dev/shm");
    if available_bytes(shm).is_some_and(|bytes| bytes >= SHM_BYTES_MIN) {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Bytes an unprivileged user can still write on the file system of `path`.
fn available_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain C data; all-zero is a valid value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid NUL-terminated string and `stat` a live, writable statvfs.
    let ok = unsafe { libc::statvfs(path.as_ptr(), &mut stat) } == 0;
    ok.then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// `grow` > 0: the grid is grown by that many data disks before the failure sets (a ragged grid).
fn fault_mode(mode: WriteMode, seed: u64, grow: usize) {
    let temp = temp_dir();
    let dir = temp.path().join("grid");
    let expected = if grow == 0 {
        create_filled_grid(&dir, mode, seed)
    } else {
        create_filled_grown_grid(&dir, mode, seed, grow)
    };
    let disks = DISKS + grow;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let all: Vec<usize> = (0..disks).collect();
    let mut phases = Phases::default();
    // The FaultyDisk handle of each disk, replaced when the engine opens or replaces the disk.
    let handles: Arc<Mutex<Vec<Option<FaultHandle>>>> = Arc::new(Mutex::new(vec![None; disks]));
    for set in 0..SETS_PER_MODE {
        let count = 1 + set % 3;
        let failed: Vec<usize> = all.choose_multiple(&mut rng, count).copied().collect();
        let faults: Vec<Fault> = failed
            .iter()
            .map(|_| FAULTS[rng.gen_range(0..FAULTS.len())])
            .collect();
        let context =
            format!("mode {mode}, set {set} (seed {seed:#x}): disks {failed:?} faults {faults:?}");

        // Faults on the files, before the engine opens them.
        for (&disk, fault) in failed.iter().zip(&faults) {
            match fault {
                Fault::Deleted => std::fs::remove_file(disk_path(&dir, disk)).unwrap(),
                Fault::Zeroed => {
                    std::fs::write(disk_path(&dir, disk), vec![0u8; DISK_BYTES as usize]).unwrap()
                }
                Fault::FailAll | Fault::Eio | Fault::EioRanges => {}
            }
        }
        let handles_in = Arc::clone(&handles);
        let options = OpenOptions {
            wrap_disk: Some(Box::new(
                move |index: usize, disk: Arc<dyn Disk>| -> Arc<dyn Disk> {
                    let (faulty, handle) = FaultyDisk::new(disk);
                    handles_in.lock()[index] = Some(handle);
                    Arc::new(faulty)
                },
            )),
            ..OpenOptions::default()
        };
        let engine = timed(&mut phases.open, || {
            Engine::open_with(&dir, options).unwrap_or_else(|e| panic!("{context}: open: {e}"))
        });
        // Faults on the I/O path, through the FaultyDisk wrappers.
        for (&disk, fault) in failed.iter().zip(&faults) {
            if matches!(fault, Fault::Deleted | Fault::Zeroed) {
                continue; // not opened, or opened as failed: no I/O reaches it
            }
            let handles = handles.lock();
            let handle = handles[disk]
                .as_ref()
                .unwrap_or_else(|| panic!("{context}: disk {disk} was not wrapped"));
            match fault {
                Fault::FailAll => handle.fail_disk(),
                Fault::Eio => handle.eio_range(HEADER_BYTES, DISK_BYTES - HEADER_BYTES),
                Fault::EioRanges => {
                    for _ in 0..rng.gen_range(1..=3) {
                        let block = rng.gen_range(HEADER_BYTES / 4096..DISK_BYTES / 4096);
                        let blocks = rng.gen_range(1..=64).min(DISK_BYTES / 4096 - block);
                        handle.eio_range(block * 4096, blocks * 4096);
                    }
                }
                Fault::Deleted | Fault::Zeroed => {}
            }
        }
        timed(&mut phases.read, || {
            assert_all_buckets(&engine, &expected, &context)
        });

        // Replace the failed disks by fresh ones and rebuild them.
        timed(&mut phases.rebuild, || {
            for &disk in &failed {
                if let Some(handle) = handles.lock()[disk].as_ref() {
                    handle.heal();
                    handle.clear_eio();
                }
                engine.fail_disk(disk).unwrap();
                engine
                    .replace_disk(disk, None)
                    .unwrap_or_else(|e| panic!("{context}: replace {disk}: {e}"));
            }
            for &disk in &failed {
                let report = engine
                    .rebuild(disk, &|_, _| {})
                    .unwrap_or_else(|e| panic!("{context}: rebuild {disk}: {e}"));
                assert!(
                    report.unrecoverable.is_empty(),
                    "{context}: rebuild of {disk} left {:?}",
                    report.unrecoverable
                );
            }
        });
        let parity = timed(&mut phases.verify, || {
            engine.verify_parity(&|_, _| {}).unwrap()
        });
        assert!(
            parity.mismatches.is_empty() && parity.groups_skipped == 0,
            "{context}: verify-parity after rebuild: mismatches {:?}, {} groups skipped",
            parity.mismatches,
            parity.groups_skipped
        );
        timed(&mut phases.scrub, || {
            for disk in 0..disks {
                let report = engine
                    .scrub(disk, 0, engine.bucket_capacity_bytes())
                    .unwrap();
                assert!(
                    report.unrecoverable.is_empty()
                        && report.blocks_repaired == 0
                        && report.check_blocks_repaired == 0
                        && report.bytes_verified == engine.bucket_capacity_bytes(),
                    "{context}: scrub of disk {disk} after rebuild: {report:?}"
                );
            }
        });
        for disk in 0..disks {
            assert!(
                !engine.is_failed(disk) && engine.defect_bytes(disk) == 0,
                "{context}: disk {disk} after the rebuild: failed {}, {} defect bytes",
                engine.is_failed(disk),
                engine.defect_bytes(disk)
            );
        }
        engine.close().unwrap();
    }
    // The grid the last set rebuilt holds every bucket exact.
    let engine = Engine::open(&dir).unwrap();
    assert_all_buckets(
        &engine,
        &expected,
        &format!("mode {mode}, after the last set"),
    );
    engine.close().unwrap();
    println!(
        "mode {mode}, {disks} disks: {SETS_PER_MODE} failure sets of 1–3 disks, every bucket byte-exact; time in open {:.1} s, \
         reads {:.1} s, replace + rebuild {:.1} s, verify-parity {:.1} s, scrub {:.1} s",
        phases.open.as_secs_f64(),
        phases.read.as_secs_f64(),
        phases.rebuild.as_secs_f64(),
        phases.verify.as_secs_f64(),
        phases.scrub.as_secs_f64()
    );
}

#[test]
fn every_bucket_survives_up_to_three_failed_disks_serialized() {
    fault_mode(WriteMode::Serialized, 0x51, 0);
}

#[test]
fn every_bucket_survives_up_to_three_failed_disks_direct() {
    fault_mode(WriteMode::Direct, 0xd1, 0);
}

#[test]
fn every_bucket_survives_up_to_three_failed_disks_delayed() {
    fault_mode(WriteMode::Delayed, 0xde, 0);
}

/// The same probe on the embedded 8x6:4+1 grid grown by one data disk (filled after the add): every failure set
/// of 1–3 disks of the new geometry, the new disk included, reads back byte-exact and rebuilds clean.
#[test]
fn every_bucket_of_a_grown_grid_survives_up_to_three_failed_disks_serialized() {
    fault_mode(WriteMode::Serialized, 0x9a, 1);
}

#[test]
fn every_bucket_of_a_grown_grid_survives_up_to_three_failed_disks_delayed() {
    fault_mode(WriteMode::Delayed, 0x9d, 1);
}

/// Flipped bits on a data disk are found and repaired by IDR without spinning up any other disk.
#[test]
fn flipped_bits_are_repaired_by_idr_without_waking_other_disks() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("grid");
    let seed = 0xf1;
    let expected = create_filled_grid(&dir, WriteMode::Serialized, seed);
    let engine = Engine::open(&dir).unwrap();
    let bucket = 5;
    let disk = engine.geometry().bucket_disk(bucket);
    engine.close().unwrap();
    // Flip one bit in each of a few data blocks of the bucket, in the file itself.
    let path = disk_path(&dir, disk);
    let mut bytes = std::fs::read(&path).unwrap();
    for block in [3u64, 40, 77] {
        let offset = permafrost_engine::HEADER_BYTES + block * 4096 + 123;
        bytes[offset as usize] ^= 0x10;
    }
    std::fs::write(&path, &bytes).unwrap();

    let engine = Engine::open(&dir).unwrap();
    let before: Vec<u64> = (0..48)
        .map(|d| engine.status().unwrap().disks[d].power.spin_ups)
        .collect();
    let mut got = vec![0u8; engine.bucket_capacity_bytes() as usize];
    read_bucket(&engine, bucket, &mut got);
    assert!(
        got == expected[bucket],
        "corrupted bucket did not read back exact"
    );
    let after: Vec<u64> = (0..48)
        .map(|d| engine.status().unwrap().disks[d].power.spin_ups)
        .collect();
    for d in 0..48 {
        if d != disk {
            assert_eq!(
                before[d], after[d],
                "disk {d} was spun up to repair a bit flip on disk {disk}"
            );
        }
    }
    engine.close().unwrap();
    // The repair was written back: the file no longer holds the flipped bits.
    let repaired = std::fs::read(&path).unwrap();
    assert_ne!(
        repaired, bytes,
        "IDR repaired the data but did not write it back"
    );
}
