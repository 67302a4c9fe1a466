//! Fault injection on file-backed disks (8×6, 4+1, small disks), through the engine's public API.
//!
//! For each write mode: fill every bucket with random data; then for at least 200 random sets of
//! 1, 2 and 3 failed disks — files deleted, zeroed, failing every I/O, or returning EIO on a range —
//! every bucket reads back byte-exact. Every tenth set the failed disks are replaced by fresh
//! disks and rebuilt; `verify_parity` and a full scrub then report zero errors.

#[path = "../src/pattern.rs"]
mod pattern;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use permafrost_disk::{Disk, FaultHandle, FaultyDisk};
use permafrost_engine::{Engine, GridConfig, OpenOptions, WriteMode};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SETS_PER_MODE: usize = 200;
const BYTES_PER_BUCKET: u64 = 512 << 10;
const DISK_BYTES: u64 = 8 << 20;

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
}

fn disk_path(dir: &Path, disk: usize) -> PathBuf {
    dir.join(format!("disks/disk-{disk:02}.img"))
}

fn create_filled_grid(dir: &Path, mode: WriteMode, seed: u64) {
    let mut config = GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), DISK_BYTES);
    config.power = permafrost_disk::power::PowerProfile::for_tests();
    config.write_mode_default = mode;
    let engine = Engine::create(dir, config).unwrap();
    for bucket in 0..engine.buckets() {
        let data = pattern::pattern_bytes(seed, bucket, 0, BYTES_PER_BUCKET as usize);
        let mut promise = engine.write(bucket, 0, BYTES_PER_BUCKET, mode).unwrap();
        promise.append(&data).unwrap();
        promise.commit().unwrap();
    }
    engine.flush().unwrap();
    assert!(
        engine
            .verify_parity(&|_, _| {})
            .unwrap()
            .mismatches
            .is_empty(),
        "parity wrong right after filling"
    );
    engine.close().unwrap();
}

fn read_bucket(engine: &Engine, bucket: usize) -> Vec<u8> {
    let mut got = vec![0u8; BYTES_PER_BUCKET as usize];
    let mut promise = engine
        .read(bucket, 0, BYTES_PER_BUCKET)
        .unwrap_or_else(|e| panic!("open read of bucket {bucket}: {e}"));
    promise
        .read_exact(&mut got)
        .unwrap_or_else(|e| panic!("read of bucket {bucket}: {e}"));
    got
}

fn assert_all_buckets(engine: &Engine, seed: u64, context: &str) {
    for bucket in 0..engine.buckets() {
        let want = pattern::pattern_bytes(seed, bucket, 0, BYTES_PER_BUCKET as usize);
        assert!(
            read_bucket(engine, bucket) == want,
            "{context}: bucket {bucket} differs"
        );
    }
}

/// Save the files a set of faults will touch (the failed disks and the journal), to restore them after.
struct Snapshot {
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl Snapshot {
    fn take(dir: &Path, disks: &[usize]) -> Snapshot {
        let mut paths: Vec<PathBuf> = disks.iter().map(|&d| disk_path(dir, d)).collect();
        for name in ["journal.sqlite", "journal.sqlite-wal", "journal.sqlite-shm"] {
            paths.push(dir.join(name));
        }
        let files = paths
            .into_iter()
            .filter_map(|p| std::fs::read(&p).ok().map(|bytes| (p, bytes)))
            .collect();
        Snapshot { files }
    }
    fn restore(&self, dir: &Path) {
        for name in ["journal.sqlite-wal", "journal.sqlite-shm"] {
            let _ = std::fs::remove_file(dir.join(name));
        }
        for (path, bytes) in &self.files {
            std::fs::write(path, bytes).unwrap();
        }
    }
}

fn fault_mode(mode: WriteMode, seed: u64) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("grid");
    create_filled_grid(&dir, mode, seed);
    let disks = 48;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let all: Vec<usize> = (0..disks).collect();
    for set in 0..SETS_PER_MODE {
        let count = 1 + set % 3;
        let failed: Vec<usize> = all.choose_multiple(&mut rng, count).copied().collect();
        let faults: Vec<Fault> = failed
            .iter()
            .map(|_| {
                [Fault::Deleted, Fault::Zeroed, Fault::FailAll, Fault::Eio][rng.gen_range(0..4)]
            })
            .collect();
        let context =
            format!("mode {mode}, set {set} (seed {seed:#x}): disks {failed:?} faults {faults:?}");
        let snapshot = Snapshot::take(&dir, &failed);

        // Faults on the files, before the engine opens them.
        for (&disk, fault) in failed.iter().zip(&faults) {
            match fault {
                Fault::Deleted => std::fs::remove_file(disk_path(&dir, disk)).unwrap(),
                Fault::Zeroed => {
                    std::fs::write(disk_path(&dir, disk), vec![0u8; DISK_BYTES as usize]).unwrap()
                }
                Fault::FailAll | Fault::Eio => {}
            }
        }
        // Faults on the I/O path, through FaultyDisk wrappers.
        let handles: Arc<Mutex<Vec<(usize, FaultHandle)>>> = Arc::default();
        let handles_in = Arc::clone(&handles);
        let io_faults: Vec<(usize, Fault)> = failed
            .iter()
            .copied()
            .zip(faults.iter().copied())
            .filter(|(_, f)| matches!(f, Fault::FailAll | Fault::Eio))
            .collect();
        let options = OpenOptions {
            wrap_disk: Some(Box::new(
                move |index: usize, disk: Arc<dyn Disk>| -> Arc<dyn Disk> {
                    let (faulty, handle) = FaultyDisk::new(disk);
                    handles_in.lock().push((index, handle));
                    Arc::new(faulty)
                },
            )),
            ..OpenOptions::default()
        };
        let engine =
            Engine::open_with(&dir, options).unwrap_or_else(|e| panic!("{context}: open: {e}"));
        for (disk, fault) in &io_faults {
            let handles = handles.lock();
            let handle = &handles
                .iter()
                .find(|(i, _)| i == disk)
                .expect("every disk is wrapped")
                .1;
            match fault {
                Fault::FailAll => handle.fail_disk(),
                Fault::Eio => handle.eio_range(
                    permafrost_engine::HEADER_BYTES,
                    DISK_BYTES - permafrost_engine::HEADER_BYTES,
                ),
                _ => unreachable!(),
            }
        }
        assert_all_buckets(&engine, seed, &context);

        if set % 10 == 9 {
            // Replace the failed disks with fresh ones and rebuild; then everything is clean again.
            for handle in handles.lock().iter() {
                handle.1.heal();
                handle.1.clear_eio();
            }
            for &disk in &failed {
                engine.fail_disk(disk).unwrap();
                engine
                    .replace_disk(disk, None)
                    .unwrap_or_else(|e| panic!("{context}: replace {disk}: {e}"));
            }
            for &disk in &failed {
                engine
                    .rebuild(disk, &|_, _| {})
                    .unwrap_or_else(|e| panic!("{context}: rebuild {disk}: {e}"));
            }
            let parity = engine.verify_parity(&|_, _| {}).unwrap();
            assert!(
                parity.mismatches.is_empty(),
                "{context}: verify-parity after rebuild: {:?}",
                parity.mismatches
            );
            for disk in 0..disks {
                let report = engine
                    .scrub(disk, 0, engine.bucket_capacity_bytes())
                    .unwrap();
                assert!(
                    report.unrecoverable.is_empty() && report.blocks_repaired == 0,
                    "{context}: scrub of disk {disk} after rebuild: {report:?}"
                );
            }
            assert_all_buckets(&engine, seed, &format!("{context} after rebuild"));
            engine.close().unwrap();
        } else {
            engine.close().unwrap();
            snapshot.restore(&dir);
        }
    }
    println!("mode {mode}: {SETS_PER_MODE} failure sets of 1–3 disks, every bucket byte-exact");
}

#[test]
fn every_bucket_survives_up_to_three_failed_disks_serialized() {
    fault_mode(WriteMode::Serialized, 0x51);
}

#[test]
fn every_bucket_survives_up_to_three_failed_disks_direct() {
    fault_mode(WriteMode::Direct, 0xd1);
}

#[test]
fn every_bucket_survives_up_to_three_failed_disks_delayed() {
    fault_mode(WriteMode::Delayed, 0xde);
}

/// Flipped bits on a data disk are found and repaired by IDR without spinning up any other disk.
#[test]
fn flipped_bits_are_repaired_by_idr_without_waking_other_disks() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("grid");
    let seed = 0xf1;
    create_filled_grid(&dir, WriteMode::Serialized, seed);
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
    let want = pattern::pattern_bytes(seed, bucket, 0, BYTES_PER_BUCKET as usize);
    assert!(
        read_bucket(&engine, bucket) == want,
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
