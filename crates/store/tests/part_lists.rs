//! A completed multipart upload is the list of its parts: reads, persistence, verify, salvage and garbage
//! collection follow the list, byte-exact.

mod common;

use std::io::Read;

use common::*;
use permafrost_store::*;

/// Compressible, incompressible (not a multiple of the chunk size), a small one that is packed, a short last.
fn parts() -> Vec<Vec<u8>> {
    vec![
        data(11, 5 << 20, true),
        data(12, (5 << 20) + 4097, false),
        data(13, (5 << 20) + 10, true),
        data(14, 100_000, false),
    ]
}

/// Upload `parts` as `bucket/key` (options as given) and complete it; returns the completed object.
fn upload(
    store: &Store,
    bucket: &str,
    key: &str,
    options: PutOptions,
    parts: &[Vec<u8>],
) -> ObjectInfo {
    let id = store.create_multipart(bucket, key, options).unwrap();
    let mut etags = Vec::new();
    for (n, part) in (1u32..).zip(parts) {
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        for piece in part.chunks(1 << 20) {
            h.write(piece).unwrap();
        }
        etags.push((n, h.finish().unwrap().etag));
    }
    store.complete_multipart(&id, &etags).unwrap()
}

fn read_as(
    store: &Store,
    key: &str,
    range: Option<ByteRange>,
    accept: Option<Encoding>,
) -> Vec<u8> {
    let (_, mut reader) = store.open_object("lists", key, range, accept).unwrap();
    let mut out = Vec::new();
    reader.read_to_end(&mut out).unwrap();
    out
}

/// Whole, across every part boundary, inside one part, and the last bytes.
fn check_reads(store: &Store, key: &str, parts: &[Vec<u8>]) {
    let whole = parts.concat();
    assert!(get(store, "lists", key) == whole, "{key}: whole read");
    let mut boundary = 0u64;
    for p in &parts[..parts.len() - 1] {
        boundary += p.len() as u64;
        let range = ByteRange::FromTo(boundary - 4097, boundary + 4096);
        assert!(
            get_range(store, "lists", key, range)
                == whole[boundary as usize - 4097..=boundary as usize + 4096],
            "{key}: range across the boundary at {boundary}"
        );
    }
    let spanning = ByteRange::FromTo(1000, whole.len() as u64 - 1000);
    assert!(get_range(store, "lists", key, spanning) == whole[1000..whole.len() - 999]);
    assert!(get_range(store, "lists", key, ByteRange::FromTo(7, 70_000)) == whole[7..=70_000]);
    assert!(
        get_range(store, "lists", key, ByteRange::Suffix(150_000))
            == whole[whole.len() - 150_000..]
    );
}

#[test]
fn a_part_list_object_reads_byte_exact_from_the_cache_and_from_the_grid() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("lists", BucketSettings::default())
        .unwrap();
    let parts = parts();
    let info = upload(&store, "lists", "runs/a", PutOptions::default(), &parts);
    assert_eq!(
        info.size_bytes,
        parts.iter().map(|p| p.len() as u64).sum::<u64>()
    );
    assert!(info.etag.ends_with("-4\""), "{}", info.etag);
    assert_ne!(info.state, ContentState::Persisted);
    check_reads(&store, "runs/a", &parts);
    store.persist_now().unwrap();
    assert_eq!(
        store.head_object("lists", "runs/a").unwrap().state,
        ContentState::Persisted
    );
    store.evict_cache().unwrap();
    assert_eq!(store.status().unwrap().cache_used_bytes, 0);
    check_reads(&store, "runs/a", &parts);
    let report = store.verify(&mut |_| {}).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.bytes_checked, info.size_bytes);
}

#[test]
fn a_precompressed_multipart_upload_is_served_as_sent_and_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("lists", BucketSettings::default())
        .unwrap();
    let raw = data(21, 8 << 20, false);
    let sent = zstd::bulk::compress(&raw, 1).unwrap();
    assert!(
        sent.len() > (5 << 20) + 100,
        "{} compressed bytes",
        sent.len()
    );
    let parts = vec![sent[..5 << 20].to_vec(), sent[5 << 20..].to_vec()];
    let options = PutOptions {
        content_encoding: Encoding::Zstd,
        decoded_length: Some(raw.len() as u64),
        ..Default::default()
    };
    let info = upload(&store, "lists", "sent.zst", options, &parts);
    assert_eq!(info.size_bytes, raw.len() as u64);
    assert_eq!(info.stored_bytes, sent.len() as u64);
    assert_eq!(info.content_encoding, Encoding::Zstd);
    for pass in ["cache", "grid"] {
        assert!(
            read_as(&store, "sent.zst", None, Some(Encoding::Zstd)) == sent,
            "{pass}"
        );
        assert!(read_as(&store, "sent.zst", None, None) == raw, "{pass}");
        let range = ByteRange::FromTo(6 << 20, (7 << 20) - 1); // in the second part
        assert!(
            read_as(&store, "sent.zst", Some(range), None) == raw[6 << 20..7 << 20],
            "{pass}"
        );
        store.persist_now().unwrap();
        store.evict_cache().unwrap();
    }
}

fn contents(store: &Store) -> u64 {
    store
        .status()
        .unwrap()
        .catalog
        .contents_by_state
        .iter()
        .map(|(_, n, _)| n)
        .sum()
}

#[test]
fn deleting_a_part_list_object_frees_the_parts_no_other_list_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("lists", BucketSettings::default())
        .unwrap();
    let shared = data(31, 5 << 20, false);
    let only_a = data(32, 3 << 20, false);
    let only_b = data(33, 2 << 20, true);
    upload(
        &store,
        "lists",
        "a",
        PutOptions::default(),
        &[shared.clone(), only_a.clone()],
    );
    upload(
        &store,
        "lists",
        "b",
        PutOptions::default(),
        &[shared.clone(), only_b.clone()],
    );
    // Three parts (one shared) and two lists.
    assert_eq!(contents(&store), 5);
    store.persist_now().unwrap();
    let used_before = grid_used_bytes(&store);
    store.delete_object("lists", "a").unwrap();
    // The list goes first; its parts wait out their own grace; the shared part stays.
    let mut removed = 0;
    for _ in 0..3 {
        removed += store.gc_now(true).unwrap();
    }
    assert_eq!(removed, 2, "the list of a and the part only a held");
    assert_eq!(contents(&store), 3);
    let freed = used_before - grid_used_bytes(&store);
    assert!(
        (3 << 20..(3 << 20) + (64 << 10)).contains(&freed),
        "{freed} grid bytes freed for a 3 MiB part"
    );
    store.evict_cache().unwrap();
    assert!(get(&store, "lists", "b") == [shared.clone(), only_b].concat());
    store.delete_object("lists", "b").unwrap();
    for _ in 0..3 {
        store.gc_now(true).unwrap();
    }
    assert_eq!(contents(&store), 0);
    assert_eq!(grid_used_bytes(&store), 0);
}

#[test]
fn salvage_rebuilds_a_part_list_object_and_skips_the_parts_of_an_unfinished_upload() {
    let dir = tempfile::tempdir().unwrap();
    let parts = parts();
    let image = {
        let store = open(dir.path());
        store
            .create_bucket("lists", BucketSettings::default())
            .unwrap();
        upload(&store, "lists", "runs/whole", PutOptions::default(), &parts);
        // An upload in progress whose parts are persisted too (they are wanted until it is aborted).
        let pending = store
            .create_multipart("lists", "runs/pending", PutOptions::default())
            .unwrap();
        let mut h = store
            .upload_part(&pending, 1, Checksums::default())
            .unwrap();
        h.write(&data(40, 1 << 20, false)).unwrap();
        h.finish().unwrap();
        store.persist_now().unwrap();
        let grid_bucket = store
            .head_object("lists", "runs/whole")
            .unwrap()
            .grid_bucket
            .unwrap() as usize;
        let through_engine = dir.path().join("salvage-engine");
        let report = store
            .salvage_grid_bucket(grid_bucket, &through_engine, &mut |_| {})
            .unwrap();
        assert_eq!(report.objects_recovered, 1, "{report:?}");
        assert!(report.incomplete_objects.is_empty(), "{report:?}");
        assert!(std::fs::read(through_engine.join("lists/runs/whole")).unwrap() == parts.concat());
        let disk = store.engine().geometry().bucket_disk(grid_bucket);
        dir.path().join(format!("grid/disks/disk-{disk:02}.img"))
    };
    std::fs::remove_file(dir.path().join("catalog.sqlite")).unwrap();
    let out = dir.path().join("salvage-image");
    let report = salvage_disk_image(&image, &out, &mut |_| {}).unwrap();
    assert_eq!(report.objects_recovered, 1, "{report:?}");
    assert!(std::fs::read(out.join("lists/runs/whole")).unwrap() == parts.concat());
    assert!(!out.join("lists/runs/pending").exists());
}

fn wait_until_nothing_waits(store: &Store, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let st = store.status().unwrap();
        let waiting: u64 = st
            .catalog
            .contents_by_state
            .iter()
            .filter(|(s, _, _)| *s != ContentState::Persisted)
            .map(|(_, n, _)| n)
            .sum();
        if waiting == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not persisted by the watchdog: {:?}",
            st.catalog.contents_by_state
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_watchdog_persists_contents_without_stored_bytes_of_their_own() {
    // A part list and an empty object take no cache bytes, but they still wait to be persisted: alone (their
    // parts persisted before), they must not be overlooked.
    let dir = tempfile::tempdir().unwrap();
    let mut config = config();
    config.watchdog.max_age_ms = 0;
    let store = Store::open(dir.path(), config).unwrap();
    store
        .create_bucket("lists", BucketSettings::default())
        .unwrap();
    let id = store
        .create_multipart("lists", "whole", PutOptions::default())
        .unwrap();
    let mut etags = Vec::new();
    for (n, part) in (1u32..).zip(&parts()) {
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        h.write(part).unwrap();
        etags.push((n, h.finish().unwrap().etag));
    }
    wait_until_nothing_waits(&store, "the parts");
    store.complete_multipart(&id, &etags).unwrap();
    wait_until_nothing_waits(&store, "the part list");
    put(&store, "lists", "empty", b"");
    wait_until_nothing_waits(&store, "an empty object");
    for key in ["whole", "empty"] {
        assert_eq!(
            store.head_object("lists", key).unwrap().state,
            ContentState::Persisted
        );
    }
}

/// A store whose bucket `lists` stores contents raw, so that a test can find and change their bytes on the grid.
fn open_with_raw_lists(dir: &std::path::Path) -> Store {
    let store = open(dir);
    store
        .create_bucket(
            "lists",
            BucketSettings {
                compression: Some(Compression::None),
                ..Default::default()
            },
        )
        .unwrap();
    store
}

#[test]
fn a_damaged_part_fails_the_whole_read_checked_by_the_objects_crc() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_raw_lists(dir.path());
    let parts = vec![data(31, 5 << 20, false), data(32, (3 << 20) + 7, false)];
    let info = upload(&store, "lists", "dmg", PutOptions::default(), &parts);
    // The whole read is checked against this full-object CRC (not each part's BLAKE3).
    assert!(
        info.checksums
            .iter()
            .any(|(n, v)| n == "crc64nvme" && !v.contains('-')),
        "{:?}",
        info.checksums
    );
    assert!(get(&store, "lists", "dmg") == parts.concat());
    let second = std::fs::read_dir(dir.path().join("cache/contents"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::metadata(p).unwrap().len() == parts[1].len() as u64)
        .expect("the second part's cache file");
    let mut bytes = std::fs::read(&second).unwrap();
    bytes[1 << 20] ^= 4;
    std::fs::write(&second, bytes).unwrap();
    let (_, mut reader) = store.open_object("lists", "dmg", None, None).unwrap();
    let mut out = Vec::new();
    let err = reader.read_to_end(&mut out).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    // Every read after the failure fails too: the stream never ends cleanly.
    assert!(reader.read(&mut [0u8; 16]).is_err());
    // The first part alone is intact; verification (BLAKE3 per content) finds the damaged one.
    assert!(get_range(&store, "lists", "dmg", ByteRange::FromTo(0, (5 << 20) - 1)) == parts[0]);
    let report = store.verify(&mut |_| {}).unwrap();
    assert_eq!(report.errors.len(), 1, "{report:?}");
}

/// A persisted part-list object read from the grid (each part's read promise opened ahead of the reader): byte
/// exact in any read size, a reader dropped in the middle leaves nothing behind, and a byte changed behind the
/// engine in any part's payload (its first or last byte) never gives a clean end: the whole read fails with
/// `InvalidData` (and so do the reads after it). A byte changed in an extent's header or crc, which a whole read
/// does not deliver, leaves the read right (or failing, never wrong) and is reported by the verifier.
#[test]
fn a_persisted_part_list_read_ahead_across_parts_detects_damage_at_every_position() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_raw_lists(dir.path());
    let parts = vec![
        data(41, 5 << 20, false),
        data(42, (5 << 20) + 4097, false),
        data(43, (3 << 20) + 7, false),
    ];
    let whole = parts.concat();
    upload(&store, "lists", "ahead", PutOptions::default(), &parts);
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    check_reads(&store, "ahead", &parts);
    for step in [1usize, 4097, 1 << 20, 9 << 20] {
        let (_, mut reader) = store.open_object("lists", "ahead", None, None).unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; step];
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if step == 1 && out.len() == 70_000 {
                // One byte at a time is slow: read the rest in a different size.
                buf = vec![0u8; 65_537];
            }
        }
        assert!(out == whole, "read in steps of {step}");
    }
    // Dropped in the middle of the first part (the second is open ahead) and of the second.
    for stop_at in [1 << 20, (5 << 20) + 12_345] {
        let (_, mut reader) = store.open_object("lists", "ahead", None, None).unwrap();
        let mut out = vec![0u8; stop_at];
        reader.read_exact(&mut out).unwrap();
        assert!(out == whole[..stop_at]);
        drop(reader);
    }
    assert!(
        get(&store, "lists", "ahead") == whole,
        "read after the drops"
    );

    let header = permafrost_format::EXTENT_HEADER_BYTES as u64;
    for (i, part) in parts.iter().enumerate() {
        let (bucket, at) = find_on_grid(&store, part);
        let len = part.len() as u64;
        for (what, position) in [
            ("header", at - header + 3),
            ("first payload byte", at),
            ("last payload byte", at + len - 1),
            ("crc", at + len),
        ] {
            flip_on_grid(&store, bucket, position, 0x10);
            if matches!(what, "header" | "crc") {
                // Outside the part's payload: a whole read checks only the bytes it delivers (at its end), so it
                // is either right or fails (the position may hold another part's bytes); never a clean end with
                // wrong bytes. The verifier, which checks every extent whole, reports the damage.
                let (_, mut reader) = store.open_object("lists", "ahead", None, None).unwrap();
                let mut out = Vec::new();
                match reader.read_to_end(&mut out) {
                    Ok(_) => assert!(
                        out == whole,
                        "part {i}, {what}: a clean end with wrong bytes"
                    ),
                    Err(e) => assert_eq!(
                        e.kind(),
                        std::io::ErrorKind::InvalidData,
                        "part {i}, {what}: {e}"
                    ),
                }
                let report = store.verify(&mut |_| {}).unwrap();
                assert_eq!(report.errors.len(), 1, "part {i}, {what}: {report:?}");
                flip_on_grid(&store, bucket, position, 0x10);
                continue;
            }
            let (_, mut reader) = store.open_object("lists", "ahead", None, None).unwrap();
            let mut out = Vec::new();
            let err = reader.read_to_end(&mut out).unwrap_err();
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::InvalidData,
                "part {i}, {what}: {err}"
            );
            assert!(out.len() <= whole.len(), "part {i}, {what}");
            assert!(reader.read(&mut [0u8; 16]).is_err(), "part {i}, {what}");
            flip_on_grid(&store, bucket, position, 0x10);
        }
    }
    assert!(get(&store, "lists", "ahead") == whole, "repaired");
    store.close().unwrap();
}
