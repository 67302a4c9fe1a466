//! A test crash point (`Engine::set_crash_point`) stops the engine as a killed process stops: from the moment it
//! fires, nothing more reaches the disks or the journal. The crashed writer lets go of its range locks with its
//! journal row still open, and the engine lives on until it is dropped; a scrub, a recovery, a drain or another
//! writer that ran in that window would act on the write in flight (repair it, record it, reconstruct from it),
//! which no real crash allows. The store simulation relies on this when it requires every range to be
//! repairable after a crash.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use common::*;
use permafrost_engine::{CrashPoint, Engine, Error, OpenOptions, WriteMode};

/// BLAKE3 of every file under `dir` (disks, journal and its WAL, delta files, configuration), by path. The
/// journal's `-shm` index is left out: readers update it, and it is rebuilt on open.
fn contents(dir: &Path) -> BTreeMap<PathBuf, blake3::Hash> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        } else if !path.to_string_lossy().ends_with("-shm") {
            let mut hasher = blake3::Hasher::new();
            let mut file = std::fs::File::open(&path).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = file.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
            out.insert(path, hasher.finalize());
        }
    }
    out
}

#[test]
fn a_crashed_engine_writes_no_disk_and_no_journal_row() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let engine = create(dir);
    engine.pause_background(true);
    let geometry = engine.geometry().clone();
    let len = 2 * MIB;
    // Work the crashed engine would otherwise do: a latent error on bucket 0's disk (a scrub repairs it in
    // place and records the range verified), bucket 1's disk replaced (recovery rewrites it), parity deltas of
    // a delayed write to bucket 2 (a drain applies them).
    let data: Vec<Vec<u8>> = (0..3).map(|b| pattern(10 + b, len as usize)).collect();
    write(&engine, 0, 0, &data[0], WriteMode::Serialized);
    write(&engine, 1, 0, &data[1], WriteMode::Serialized);
    write(&engine, 2, 0, &data[2], WriteMode::Delayed);
    let scrubbed = geometry.bucket_disk(0);
    let replaced = geometry.bucket_disk(1);
    plant_bit_flip(dir, scrubbed, 1);
    engine.fail_disk(replaced).unwrap();
    engine.replace_disk(replaced, None).unwrap();
    assert!(engine.defect_bytes(replaced) > 0);
    assert!(engine.status().unwrap().pending_delta_bytes > 0);

    // A direct write to bucket 3 (beside the ranges above) stops half written.
    engine.set_crash_point(Some(CrashPoint::DataHalfWritten));
    let new = pattern(20, len as usize);
    let mut promise = engine.write(3, 4 * MIB, len, WriteMode::Direct).unwrap();
    let result = promise.append(&new).and_then(|_| promise.commit());
    assert!(
        matches!(
            result,
            Err(Error::SimulatedCrash(CrashPoint::DataHalfWritten))
        ),
        "the write stops at the crash point: {result:?}"
    );
    let at_crash = contents(dir);

    // Everything the crashed engine is still asked to do, and its background threads, write nothing.
    let scrub = engine.scrub(scrubbed, 0, len);
    assert!(scrub.is_err(), "a scrub after the crash: {scrub:?}");
    let recovery = engine.recover_defects();
    assert!(
        recovery.is_err(),
        "a recovery after the crash: {recovery:?}"
    );
    let flush = engine.flush();
    assert!(flush.is_err(), "a drain after the crash: {flush:?}");
    assert!(engine.write(3, 0, len, WriteMode::Direct).is_err());
    // A read over the latent error would repair it in place: refused (a read promise already open stops at its
    // next chunk's lock).
    assert!(
        matches!(engine.read(0, 0, len), Err(Error::Closed)),
        "a read after the crash is refused"
    );
    engine.pause_background(false);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after = contents(dir);
    for (path, hash) in &at_crash {
        assert_eq!(
            after.get(path),
            Some(hash),
            "{} changed after the crash point",
            path.display()
        );
    }
    assert_eq!(
        after.len(),
        at_crash.len(),
        "files appeared after the crash point"
    );
    drop(engine);

    // Reopened, the work is done: the latent error repaired, the replaced disk rebuilt, the deltas applied.
    let engine = Engine::open_paused(dir, OpenOptions::default()).unwrap();
    let scrub = engine.scrub(scrubbed, 0, len).unwrap();
    assert_eq!(scrub.blocks_repaired, 1, "the latent error is still there");
    let report = engine.recover_defects().unwrap();
    assert!(
        report.unrecoverable.is_empty(),
        "{:?}",
        report.unrecoverable
    );
    engine.flush().unwrap();
    for (bucket, data) in data.iter().enumerate() {
        assert!(
            read(&engine, bucket, 0, len).unwrap() == *data,
            "bucket {bucket} differs"
        );
    }
    assert_parity_clean(&engine);
    engine.close().unwrap();
}
