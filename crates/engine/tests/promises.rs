//! Write and read promises: round trips in every mode, concurrency, the delta overlay.

mod common;

use common::*;
use permafrost_engine::WriteMode;

#[test]
fn every_write_mode_round_trips_and_keeps_parity() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let modes = [WriteMode::Direct, WriteMode::Serialized, WriteMode::Delayed];
    for (i, &mode) in modes.iter().enumerate() {
        let bucket = i * 5; // different hPGs
        let fresh = pattern(i as u64, (3 * MIB + 8192) as usize);
        write(&engine, bucket, 4096, &fresh, mode);
        assert_eq!(
            read(&engine, bucket, 4096, fresh.len() as u64).unwrap(),
            fresh,
            "{mode} fresh"
        );
        // Overwrite the middle (read-modify-write of written space), unaligned to stripes.
        let over = pattern(100 + i as u64, (MIB + 4096) as usize);
        write(&engine, bucket, MIB / 2, &over, mode);
        let mut expected = vec![0u8; 4096];
        expected.extend_from_slice(&fresh);
        expected[(MIB / 2) as usize..(MIB / 2) as usize + over.len()].copy_from_slice(&over);
        assert_eq!(
            read(&engine, bucket, 0, expected.len() as u64).unwrap(),
            expected,
            "{mode} overwrite"
        );
    }
    engine.flush().unwrap();
    assert_eq!(engine.status().unwrap().pending_delta_bytes, 0);
    assert_parity_clean(&engine);
    // Never-written space reads as zeros.
    assert_eq!(read(&engine, 1, 0, MIB).unwrap(), vec![0u8; MIB as usize]);
    engine.close().unwrap();
    // Everything survives a reopen.
    let engine = permafrost_engine::Engine::open(dir.path()).unwrap();
    assert_eq!(engine.status().unwrap().open_promises, 0);
    assert_parity_clean(&engine);
}

#[test]
fn commit_pads_the_last_block_and_rejects_appends_beyond_the_promise() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let mut promise = engine.write(0, 0, 5000, WriteMode::Serialized).unwrap();
    assert!(promise.append(&[1u8; 6000]).is_err());
    promise.append(&[7u8; 5000]).unwrap();
    promise.commit().unwrap();
    let back = read(&engine, 0, 0, 8192).unwrap();
    assert_eq!(&back[..5000], &[7u8; 5000][..]);
    assert_eq!(&back[5000..], &[0u8; 8192 - 5000][..]);
    assert!(
        engine.write(0, 4095, 10, WriteMode::Direct).is_err(),
        "unaligned offset must be refused"
    );
    assert!(
        engine.write(99, 0, 10, WriteMode::Direct).is_err(),
        "unknown bucket must be refused"
    );
    let beyond = engine.bucket_capacity_bytes();
    assert!(
        engine.write(0, beyond, 4096, WriteMode::Direct).is_err(),
        "range beyond the bucket must be refused"
    );
}

#[test]
fn concurrent_writers_on_one_hpg_keep_parity_correct() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let geometry = engine.geometry().clone();
    // The data disks of hPG 0 and their buckets.
    let buckets: Vec<usize> = (0..engine.buckets())
        .filter(|&b| {
            geometry.parity_targets(geometry.bucket_disk(b)).hp
                == geometry.parity_targets(geometry.bucket_disk(0)).hp
        })
        .collect();
    assert_eq!(buckets.len(), 4);
    let expected: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let handles: Vec<_> = buckets
            .iter()
            .enumerate()
            .map(|(i, &bucket)| {
                let engine = &engine;
                scope.spawn(move || {
                    let mode = [
                        WriteMode::Direct,
                        WriteMode::Serialized,
                        WriteMode::Delayed,
                        WriteMode::Direct,
                    ][i];
                    let mut image = vec![0u8; (4 * MIB) as usize];
                    for round in 0..4u64 {
                        // Overlapping offsets across writers: the same parity ranges are hit concurrently.
                        let offset = (round % 3) * MIB;
                        let data = pattern(1000 * i as u64 + round, (MIB + 4096 * round) as usize);
                        write(engine, bucket, offset, &data, mode);
                        image[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
                    }
                    image
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (&bucket, image) in buckets.iter().zip(&expected) {
        assert_eq!(
            &read(&engine, bucket, 0, image.len() as u64).unwrap(),
            image
        );
    }
    // Parity is correct with deltas still pending (overlay) and after they are drained.
    assert_parity_clean(&engine);
    engine.flush().unwrap();
    assert_parity_clean(&engine);
}

#[test]
fn delta_overlay_gives_correct_reconstruction_before_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    engine.pause_background(true);
    let old = pattern(1, (2 * MIB) as usize);
    write(&engine, 0, 0, &old, WriteMode::Serialized);
    let new = pattern(2, MIB as usize + 4096);
    write(&engine, 0, MIB / 2, &new, WriteMode::Delayed);
    assert!(
        engine.status().unwrap().pending_delta_bytes > 0,
        "the delta must still be pending"
    );
    let mut expected = old.clone();
    expected[(MIB / 2) as usize..(MIB / 2) as usize + new.len()].copy_from_slice(&new);
    // The data disk fails: reading the bucket reconstructs it from parity + pending deltas.
    engine.fail_disk(engine.geometry().bucket_disk(0)).unwrap();
    assert_eq!(
        read(&engine, 0, 0, expected.len() as u64).unwrap(),
        expected
    );
    assert!(
        engine.status().unwrap().pending_delta_bytes > 0,
        "reconstruction must not need the drain"
    );
    engine.pause_background(false);
}

#[test]
fn read_promise_can_be_dropped_midway() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let data = pattern(5, (6 * MIB) as usize);
    write(&engine, 3, 0, &data, WriteMode::Delayed);
    let mut promise = engine.read(3, 0, data.len() as u64).unwrap();
    let mut first = vec![0u8; 100_000];
    std::io::Read::read_exact(&mut promise, &mut first).unwrap();
    assert_eq!(&first[..], &data[..100_000]);
    drop(promise); // must not hang on the read-ahead thread
}

#[test]
fn chunks_written_at_the_same_time_round_trip_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let modes = [WriteMode::Direct, WriteMode::Serialized, WriteMode::Delayed];
    for (i, &mode) in modes.iter().enumerate() {
        let bucket = i * 5; // different hPGs
                            // 7 chunks of 2 MiB and a short first and last one, three in flight at a time.
        let data = pattern(200 + i as u64, (14 * MIB + 12288) as usize);
        let mut promise = engine
            .write(bucket, 8192, data.len() as u64, mode)
            .unwrap()
            .with_chunks_in_flight(3);
        for piece in data.chunks(300_000) {
            promise.append(piece).unwrap();
        }
        let txns = promise.commit().unwrap();
        assert_eq!(txns.len(), 8, "{mode}: one transaction per chunk");
        assert_eq!(
            read(&engine, bucket, 8192, data.len() as u64).unwrap(),
            data,
            "{mode}"
        );
        // A promise dropped with chunks in flight finishes them (no rollback) and leaves nothing open.
        let mut dropped = engine
            .write(bucket, 15 * MIB, 6 * MIB, mode)
            .unwrap()
            .with_chunks_in_flight(3);
        dropped
            .append(&data[..(5 * MIB + MIB / 2) as usize])
            .unwrap();
        drop(dropped);
        assert_eq!(
            read(&engine, bucket, 15 * MIB, 5 * MIB).unwrap(),
            data[..5 * MIB as usize],
            "{mode}: chunks already handed to threads are written"
        );
    }
    engine.flush().unwrap();
    assert_eq!(engine.status().unwrap().open_promises, 0);
    assert_parity_clean(&engine);
    engine.close().unwrap();
    let engine = permafrost_engine::Engine::open(dir.path()).unwrap();
    assert_eq!(engine.status().unwrap().open_promises, 0);
    assert_parity_clean(&engine);
}

#[test]
fn larger_chunks_round_trip_with_fewer_transactions_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let engine = create(dir.path());
    let modes = [WriteMode::Direct, WriteMode::Serialized, WriteMode::Delayed];
    for (i, &mode) in modes.iter().enumerate() {
        let bucket = i * 5; // different hPGs
                            // 14 MiB + 12 KiB from 8 KiB on, in chunks of 3 × 2 MiB (the grid's chunk is 2 MiB; 7 MiB rounds down to
                            // 6 MiB): a short first chunk up to 6 MiB, one to 12 MiB, the rest.
        let data = pattern(300 + i as u64, (14 * MIB + 12288) as usize);
        let mut promise = engine
            .write(bucket, 8192, data.len() as u64, mode)
            .unwrap()
            .with_chunk_bytes(7 * MIB)
            .with_chunks_in_flight(2);
        for piece in data.chunks(300_000) {
            promise.append(piece).unwrap();
        }
        let txns = promise.commit().unwrap();
        assert_eq!(txns.len(), 3, "{mode}: one transaction per 6 MiB chunk");
        assert_eq!(
            read(&engine, bucket, 8192, data.len() as u64).unwrap(),
            data,
            "{mode}"
        );
    }
    engine.flush().unwrap();
    assert_eq!(engine.status().unwrap().open_promises, 0);
    assert_parity_clean(&engine);
}
