//! Completing a multipart upload copies nothing: a 1 GiB upload writes its bytes to the cache once (measured with
//! the kernel's per-process I/O counters, `/proc/self/io`), and completing it takes about one catalog commit.
//! A test binary of its own, so that no other test's writes are counted.

mod common;

use std::time::Instant;

use common::*;
use permafrost_store::*;
use rand::{RngCore, SeedableRng};

/// `(wchar, write_bytes)` of this process: bytes passed to write calls, bytes dirtied in the page cache.
fn written() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    let field = |name: &str| -> u64 {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (field("wchar:"), field("write_bytes:"))
}

#[test]
fn a_one_gib_multipart_upload_is_written_to_the_cache_once_and_completes_without_a_copy() {
    const PART_BYTES: usize = 16 << 20;
    const PARTS: usize = 64;
    let size = (PART_BYTES * PARTS) as u64;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = StoreConfig {
        cache_bytes_max: 2 << 30,
        ..config()
    };
    let store = Store::open(dir.path(), config).unwrap();
    store
        .create_bucket("big", BucketSettings::default())
        .unwrap();
    let id = store
        .create_multipart("big", "one-gib", PutOptions::default())
        .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut part = vec![0u8; PART_BYTES];
    let mut whole = blake3::Hasher::new();
    let mut etags = Vec::new();
    let before = written();
    for n in 1..=PARTS as u32 {
        rng.fill_bytes(&mut part);
        whole.update(&part);
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        for piece in part.chunks(1 << 20) {
            h.write(piece).unwrap();
        }
        etags.push((n, h.finish().unwrap().etag));
    }
    let uploaded = written();
    let started = Instant::now();
    let info = store.complete_multipart(&id, &etags).unwrap();
    let completion = started.elapsed();
    let after = written();
    let (wchar, dirtied) = (after.0 - before.0, after.1 - before.1);
    println!(
        "1 GiB in {PARTS} parts: {wchar} bytes written ({:.4} x), {dirtied} bytes dirtied ({:.4} x); completion {:.1} ms writing {} bytes",
        wchar as f64 / size as f64,
        dirtied as f64 / size as f64,
        completion.as_secs_f64() * 1e3,
        after.0 - uploaded.0
    );
    assert_eq!(info.size_bytes, size);
    assert!(
        wchar as f64 <= 1.01 * size as f64,
        "{wchar} bytes written for {size}"
    );
    assert!(
        dirtied as f64 <= 1.01 * size as f64,
        "{dirtied} bytes dirtied for {size}"
    );
    assert!(
        after.0 - uploaded.0 < 1 << 20,
        "completion wrote {} bytes",
        after.0 - uploaded.0
    );
    // The object reads back whole and verified (each part against its BLAKE3).
    let (_, mut reader) = store.open_object("big", "one-gib", None, None).unwrap();
    let mut check = blake3::Hasher::new();
    std::io::copy(&mut reader, &mut check).unwrap();
    assert_eq!(check.finalize(), whole.finalize());
}
