//! A persisted, compressed part list read from the grid: the part after the one being delivered is opened ahead
//! and starts its own read-ahead (decode) thread, the blocks of finished readers are reused. Every check still
//! holds (a damaged later part fails the whole read, never a clean end), and a reader dropped in the middle
//! stops and joins its decoder threads.
//! One test in its own binary: it counts the process's read-ahead threads.

mod common;

use std::io::Read;

use common::*;
use permafrost_store::*;

/// Threads of this process named as the read-ahead threads are (`pf-readahead`; the engine's read threads are
/// `permafrost-read-N`).
fn read_ahead_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "pf-readahead")
        .count()
}

/// Where the zstd frames (magic `28 b5 2f fd`) start in the first `scan` bytes of grid bucket `bucket`.
fn frames_on_grid(store: &Store, bucket: usize, scan: u64) -> Vec<u64> {
    let mut bytes = Vec::new();
    store
        .engine()
        .read(bucket, 0, scan)
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == [0x28, 0xb5, 0x2f, 0xfd])
        .map(|(i, _)| i as u64)
        .collect()
}

/// Read `reader` to its end as the HTTP body does: decoded blocks taken whole where the reader has them, the
/// rest copied in 256 KiB pieces. The bytes, or the first error, and how many blocks were taken whole.
fn read_taking(reader: &mut ObjectReader) -> (std::io::Result<Vec<u8>>, usize) {
    let (mut out, mut taken) = (Vec::new(), 0);
    let mut piece = vec![0u8; 256 << 10];
    loop {
        match reader.take_block(usize::MAX) {
            Ok(Some(block)) => {
                assert!(!block.is_empty(), "a block taken is never empty");
                taken += 1;
                out.extend_from_slice(&block);
            }
            Ok(None) => match reader.read(&mut piece) {
                Ok(0) => return (Ok(out), taken),
                Ok(n) => out.extend_from_slice(&piece[..n]),
                Err(e) => return (Err(e), taken),
            },
            Err(e) => return (Err(e), taken),
        }
    }
}

#[test]
fn compressed_parts_decode_ahead_on_two_threads_and_keep_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("lists", BucketSettings::default())
        .unwrap();
    let parts: Vec<Vec<u8>> = (0..4u64)
        .map(|i| data(60 + i, (12 << 20) + i as usize * 4099, true))
        .collect();
    let whole = parts.concat();
    let id = store
        .create_multipart("lists", "text", PutOptions::default())
        .unwrap();
    let mut etags = Vec::new();
    for (n, part) in (1u32..).zip(&parts) {
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        h.write(part).unwrap();
        etags.push((n, h.finish().unwrap().etag));
    }
    let info = store.complete_multipart(&id, &etags).unwrap();
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    assert!(
        info.stored_bytes < info.size_bytes / 2,
        "compressed: {info:?}"
    );
    assert!(get(&store, "lists", "text") == whole);
    assert_eq!(read_ahead_threads(), 0, "a finished read leaves no thread");

    // The decoded blocks handed over whole (no copy), mixed with copied reads: the same bytes, in order.
    store.evict_cache().unwrap();
    let (_, mut reader) = store.open_object("lists", "text", None, None).unwrap();
    let (bytes, taken) = read_taking(&mut reader);
    let bytes = bytes.unwrap();
    assert!(
        bytes.len() == whole.len() && bytes == whole,
        "taken whole: {taken} blocks"
    );
    assert!(
        taken >= 40,
        "48 MiB decoded ahead, only {taken} blocks taken whole"
    );
    drop(reader);

    // In the middle of the first part: its decoder and the next part's run at once; a drop joins both.
    store.evict_cache().unwrap(); // (a read may have brought parts back into the cache)
    let (_, mut reader) = store.open_object("lists", "text", None, None).unwrap();
    let mut first = vec![0u8; 1 << 20];
    reader.read_exact(&mut first).unwrap();
    assert!(first == whole[..1 << 20]);
    // (A new thread names itself when it starts: wait for that.)
    let t0 = std::time::Instant::now();
    while read_ahead_threads() < 2 && t0.elapsed().as_secs() < 1 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // At most the current part's and the next part's (the next one's is not there when that part was served
    // from the cache, which a background read can bring it back into).
    let running = read_ahead_threads();
    assert!((1..=2).contains(&running), "{running} read-ahead threads");
    drop(reader);
    assert_eq!(
        read_ahead_threads(),
        0,
        "a dropped reader stops its decoders"
    );

    // A byte of a later part's compressed bytes changed behind the engine: the read never ends cleanly (it
    // fails with InvalidData, at the latest at the object's end check), and every read after it fails too.
    let (bucket, frames) = (0..store.engine().buckets())
        .map(|b| (b, frames_on_grid(&store, b, 32 << 20)))
        .max_by_key(|(_, frames)| frames.len())
        .unwrap();
    assert!(frames.len() >= 8, "{} frames found", frames.len());
    for at in [
        frames[frames.len() / 2] + 100,
        frames[frames.len() - 1] + 100,
    ] {
        flip_on_grid(&store, bucket, at, 0x04);
        let (_, mut reader) = store.open_object("lists", "text", None, None).unwrap();
        let mut out = Vec::new();
        let err = reader.read_to_end(&mut out).unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidData,
            "at {at}: {err}"
        );
        assert!(out.len() <= whole.len(), "at {at}");
        assert!(reader.read(&mut [0u8; 16]).is_err(), "at {at}");
        drop(reader);
        assert_eq!(read_ahead_threads(), 0, "at {at}");
        // The same with blocks taken whole: they are hashed before they are handed over, and the read that
        // meets the end fails.
        store.evict_cache().unwrap();
        let (_, mut reader) = store.open_object("lists", "text", None, None).unwrap();
        let (result, taken) = read_taking(&mut reader);
        let err = result.expect_err("a damaged part never ends cleanly");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidData,
            "at {at}, {taken} taken: {err}"
        );
        drop(reader);
        flip_on_grid(&store, bucket, at, 0x04);
    }
    assert!(get(&store, "lists", "text") == whole, "repaired");
    store.close().unwrap();
}
