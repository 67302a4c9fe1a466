//! The store's promises: content addressing, packing, sleep, placement, failures, restart, salvage, bad input.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use md5::Digest as _;
use permafrost_store::*;

fn content_count(store: &Store) -> u64 {
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
fn identical_content_under_ten_keys_is_stored_once_and_freed_after_the_last_delete() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket(
            "dedup",
            BucketSettings {
                compression: Some(Compression::None),
                ..Default::default()
            },
        )
        .unwrap();
    let body = data(1, 10_000_000, false);
    for i in 0..10 {
        put(&store, "dedup", &format!("copy{i}"), &body);
    }
    assert_eq!(content_count(&store), 1);
    assert_eq!(
        store.status().unwrap().cache_used_bytes,
        body.len() as u64,
        "the duplicates' cache files are gone"
    );
    store.persist_now().unwrap();
    let used = grid_used_bytes(&store);
    assert!(
        used >= body.len() as u64 && used < body.len() as u64 + (1 << 20),
        "one copy on the grid: {used} bytes"
    );
    for i in 0..9 {
        store.delete_object("dedup", &format!("copy{i}")).unwrap();
    }
    assert_eq!(
        store.gc_now(true).unwrap(),
        0,
        "the content is still referenced"
    );
    store.evict_cache().unwrap();
    assert_eq!(get(&store, "dedup", "copy9"), body);
    store.delete_object("dedup", "copy9").unwrap();
    assert_eq!(
        store.gc_now(false).unwrap(),
        0,
        "the grace period protects it"
    );
    assert_eq!(store.gc_now(true).unwrap(), 1);
    assert_eq!(grid_used_bytes(&store), 0, "its extents were freed");
    assert_eq!(content_count(&store), 0);
    assert_eq!(store.status().unwrap().cache_used_bytes, 0);
}

fn small_objects_end_up_in_few_pack_extents(count: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("tiny", BucketSettings::default())
        .unwrap();
    let mut sizes = Vec::with_capacity(count);
    let mut total = 0u64;
    for i in 0..count {
        let len = 1024 + (i * 7919) % (63 * 1024);
        let body = data(i as u64, len, true);
        total += len as u64;
        sizes.push(len);
        put(&store, "tiny", &format!("set/{i:05}"), &body);
    }
    store.persist_now().unwrap();
    let status = store.status().unwrap();
    assert_eq!(status.contents_in(ContentState::Persisted), count as u64);
    let packs = status.catalog.pack_extents;
    assert_eq!(
        status.catalog.extents, packs,
        "every small object is packed"
    );
    let stored: u64 = status
        .catalog
        .contents_by_state
        .iter()
        .map(|(_, _, b)| b)
        .sum();
    let bound = stored.div_ceil(store.config().extent_bytes_max - 65536) + 1;
    assert!(packs <= bound, "{count} objects ({total} bytes, {stored} stored) in {packs} packs, expected at most {bound}");
    store.evict_cache().unwrap();
    for i in (0..count).step_by(count / 50) {
        assert_eq!(
            get(&store, "tiny", &format!("set/{i:05}")),
            data(i as u64, sizes[i], true)
        );
    }
}

#[test]
fn two_thousand_small_objects_end_up_in_few_pack_extents() {
    small_objects_end_up_in_few_pack_extents(2_000);
}

#[test]
#[ignore = "long: 10,000 objects"]
fn ten_thousand_small_objects_end_up_in_few_pack_extents() {
    small_objects_end_up_in_few_pack_extents(10_000);
}

#[test]
fn precompressed_upload_is_stored_as_sent_and_decoded_for_plain_gets() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("hpc", BucketSettings::default())
        .unwrap();
    let plain = data(3, 3 << 20, true);
    // Independent frames of 256 KiB each (a frame index is built), and one single frame (no index).
    let mut framed = Vec::new();
    for piece in plain.chunks(256 << 10) {
        framed.extend(zstd::bulk::compress(piece, 3).unwrap());
    }
    let single = zstd::encode_all(&plain[..], 3).unwrap();
    for (key, sent) in [("framed", &framed), ("single", &single)] {
        let options = PutOptions {
            content_encoding: Encoding::Zstd,
            decoded_length: Some(plain.len() as u64),
            ..Default::default()
        };
        let info = store.put_object("hpc", key, options, sent).unwrap();
        assert_eq!(
            info.stored_bytes,
            sent.len() as u64,
            "stored exactly as sent"
        );
        assert_eq!(info.size_bytes, plain.len() as u64);
    }
    for phase in ["cache", "grid"] {
        for (key, sent) in [("framed", &framed), ("single", &single)] {
            let (_, mut raw) = store
                .open_object("hpc", key, None, Some(Encoding::Zstd))
                .unwrap();
            assert_eq!(raw.encoding(), Encoding::Zstd);
            let mut got = Vec::new();
            raw.read_to_end(&mut got).unwrap();
            assert_eq!(
                &got, sent,
                "{phase} {key}: matching Accept-Encoding gets the stored bytes"
            );
            assert_eq!(
                get(&store, "hpc", key),
                plain,
                "{phase} {key}: plain GET decodes"
            );
            let range = ByteRange::FromTo(1_000_000, 1_300_000);
            assert_eq!(
                get_range(&store, "hpc", key, range),
                plain[1_000_000..=1_300_000].to_vec(),
                "{phase} {key}"
            );
        }
        store.persist_now().unwrap();
        store.evict_cache().unwrap();
    }
}

#[test]
fn reads_survive_three_failed_disks() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("safe", BucketSettings::default())
        .unwrap();
    let mut bodies = HashMap::new();
    for i in 0..12 {
        let body = data(100 + i, 100_000 + (i as usize) * 200_000, i % 2 == 0);
        put(&store, "safe", &format!("ds{}/obj{i}", i % 3), &body);
        bodies.insert(format!("ds{}/obj{i}", i % 3), body);
    }
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    let grid_bucket = store
        .head_object("safe", "ds0/obj0")
        .unwrap()
        .grid_bucket
        .unwrap() as usize;
    let geometry = store.engine().geometry();
    let data_disk = geometry.bucket_disk(grid_bucket);
    let targets = geometry.parity_targets(data_disk);
    for disk in [data_disk, targets.hp, targets.vp] {
        store.engine().fail_disk(disk).unwrap();
    }
    for (key, body) in &bodies {
        assert_eq!(
            &get(&store, "safe", key),
            body,
            "{key} with disks {data_disk}, {}, {} failed",
            targets.hp,
            targets.vp
        );
    }
}

#[test]
fn list_head_delete_and_copy_of_persisted_objects_wake_no_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("cold", BucketSettings::default())
        .unwrap();
    for i in 0..20 {
        put(
            &store,
            "cold",
            &format!("dir{}/k{i}", i % 4),
            &data(i, 50_000, true),
        );
    }
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    wait_all_off(&store);
    let before = spin_ups(&store);
    let page = store
        .list_objects(
            "cold",
            &ListQuery {
                delimiter: Some("/".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.common_prefixes.len(), 4);
    let page = store
        .list_objects(
            "cold",
            &ListQuery {
                prefix: "dir1/".into(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.objects.len(), 5);
    for i in 0..20 {
        let info = store
            .head_object("cold", &format!("dir{}/k{i}", i % 4))
            .unwrap();
        assert_eq!(info.state, ContentState::Persisted);
    }
    store
        .copy_object("cold", "dir0/k0", "cold", "copies/k0", None)
        .unwrap();
    store.delete_object("cold", "dir1/k1").unwrap();
    assert!(matches!(
        store.head_object("cold", "dir1/k1"),
        Err(StoreError::NoSuchKey { .. })
    ));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        spin_ups(&store),
        before,
        "catalog-only operations spun up a disk"
    );
    assert_eq!(get(&store, "cold", "copies/k0"), data(0, 50_000, true));
}

#[test]
fn a_dataset_lands_on_one_grid_bucket_and_reading_it_spins_up_one_data_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("robot", BucketSettings::default())
        .unwrap();
    store
        .create_bucket("other", BucketSettings::default())
        .unwrap();
    for i in 0..30 {
        put(
            &store,
            "robot",
            &format!("run7/cam{i}.bin"),
            &data(i, 20_000 + i as usize * 30_000, false),
        );
        put(
            &store,
            "other",
            &format!("x{i}/f"),
            &data(1000 + i, 10_000, false),
        );
    }
    store.persist_now().unwrap();
    let buckets: BTreeSet<u32> = (0..30)
        .map(|i| {
            store
                .head_object("robot", &format!("run7/cam{i}.bin"))
                .unwrap()
                .grid_bucket
                .unwrap()
        })
        .collect();
    assert_eq!(
        buckets.len(),
        1,
        "dataset robot/run7 spread over {buckets:?}"
    );
    store.evict_cache().unwrap();
    wait_all_off(&store);
    let before = spin_ups_per_disk(&store);
    for i in 0..30 {
        assert_eq!(
            get(&store, "robot", &format!("run7/cam{i}.bin")),
            data(i, 20_000 + i as usize * 30_000, false)
        );
    }
    let after = spin_ups_per_disk(&store);
    let woken: Vec<usize> = (0..before.len())
        .filter(|&d| after[d] > before[d])
        .collect();
    let grid_bucket = *buckets.iter().next().unwrap() as usize;
    assert_eq!(
        woken,
        vec![store.engine().geometry().bucket_disk(grid_bucket)],
        "reading one dataset woke {woken:?}"
    );
}

#[test]
fn restart_requeues_unpersisted_contents_and_drops_partial_uploads() {
    let dir = tempfile::tempdir().unwrap();
    let bodies: Vec<Vec<u8>> = (0..5)
        .map(|i| data(i, 300_000 * (i as usize + 1), true))
        .collect();
    {
        let mut config = config();
        config.fsync = true;
        let store = Store::open(dir.path(), config).unwrap();
        store
            .create_bucket("ingest", BucketSettings::default())
            .unwrap();
        for (i, body) in bodies.iter().enumerate() {
            put(&store, "ingest", &format!("k{i}"), body);
        }
        let mut partial = store
            .begin_put("ingest", "partial", PutOptions::default())
            .unwrap();
        // Beyond the inline size: the upload has a file in tmp/.
        partial.write(&data(99, 300_000, false)).unwrap();
        std::mem::forget(partial); // as if the process died mid-upload
                                   // Drop without close or persist: a crash as far as the store's data is concerned.
    }
    // The upload's writer lane creates the file on a thread of its own: wait for it (a loaded machine may take a
    // while), then restart as after the crash.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(dir.path().join("cache/tmp"))
        .unwrap()
        .next()
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the partial upload left a file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let store = open(dir.path());
    assert_eq!(
        std::fs::read_dir(dir.path().join("cache/tmp"))
            .unwrap()
            .count(),
        0,
        "partial upload removed"
    );
    assert!(matches!(
        store.head_object("ingest", "partial"),
        Err(StoreError::NoSuchKey { .. })
    ));
    for i in 0..bodies.len() {
        let state = store.head_object("ingest", &format!("k{i}")).unwrap().state;
        assert!(
            matches!(state, ContentState::Cached | ContentState::Placed),
            "{state:?}"
        );
    }
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    for (i, body) in bodies.iter().enumerate() {
        assert_eq!(&get(&store, "ingest", &format!("k{i}")), body);
    }
}

#[test]
fn salvage_without_the_catalog_recovers_every_object_of_a_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = HashMap::new();
    let (image, grid_bucket) = {
        let store = open(dir.path());
        store
            .create_bucket("lost", BucketSettings::default())
            .unwrap();
        for i in 0..40 {
            // Large and small (packed) objects of one dataset.
            let len = if i % 5 == 0 {
                1_500_000
            } else {
                3_000 + i * 1000
            };
            let body = data(500 + i as u64, len, i % 2 == 0);
            let key = format!("scan/obj{i}");
            put(&store, "lost", &key, &body);
            expected.insert(key, body);
        }
        store.persist_now().unwrap();
        let grid_bucket = store
            .head_object("lost", "scan/obj0")
            .unwrap()
            .grid_bucket
            .unwrap() as usize;
        let disk = store.engine().geometry().bucket_disk(grid_bucket);
        let through_engine = dir.path().join("salvage-engine");
        let report = store
            .salvage_grid_bucket(grid_bucket, &through_engine, &mut |_| {})
            .unwrap();
        assert_eq!(report.objects_recovered, 40, "{report:?}");
        (
            dir.path().join(format!("grid/disks/disk-{disk:02}.img")),
            grid_bucket,
        )
    };
    let _ = grid_bucket;
    std::fs::remove_file(dir.path().join("catalog.sqlite")).unwrap();
    let out = dir.path().join("salvage-image");
    let report = salvage_disk_image(&image, &out, &mut |_| {}).unwrap();
    assert_eq!(report.objects_recovered, 40, "{report:?}");
    for (key, body) in &expected {
        assert_eq!(
            &std::fs::read(out.join("lost").join(key)).unwrap(),
            body,
            "{key}"
        );
    }
}

#[test]
fn delayed_mode_persists_once_parity_is_drained() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let settings = BucketSettings {
        write_mode: Some("delayed".into()),
        ..Default::default()
    };
    store.create_bucket("later", settings).unwrap();
    let body = data(9, 2 << 20, false);
    put(&store, "later", "k", &body);
    store.persist_now().unwrap();
    assert_eq!(
        store.head_object("later", "k").unwrap().state,
        ContentState::Persisted
    );
    assert_eq!(store.engine().status().unwrap().pending_delta_bytes, 0);
    store.evict_cache().unwrap();
    assert_eq!(get(&store, "later", "k"), body);
}

#[test]
fn multipart_upload_assembles_parts_with_the_s3_etag() {
    let dir = tempfile::tempdir().unwrap();
    // Part ETags are MD5s when configured so (by default only when the client sends Content-MD5).
    let store = Store::open(
        dir.path(),
        StoreConfig {
            part_etag_md5: true,
            ..config()
        },
    )
    .unwrap();
    store
        .create_bucket("multi", BucketSettings::default())
        .unwrap();
    let id = store
        .create_multipart(
            "multi",
            "big",
            PutOptions {
                content_type: Some("application/x-test".into()),
                ..Default::default()
            },
        )
        .unwrap();
    let parts = [
        data(1, 5 << 20, true),
        data(2, 5 << 20, false),
        data(3, 123, true),
    ];
    let mut listed = Vec::new();
    // Upload out of order; part 2 twice (the second replaces the first).
    for n in [3u32, 1, 2, 2] {
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        h.write(&parts[n as usize - 1]).unwrap();
        h.finish().unwrap();
    }
    for p in store.list_parts(&id).unwrap() {
        listed.push((p.part_number, p.etag));
    }
    assert_eq!(listed.len(), 3);
    assert_eq!(store.list_uploads("multi", "", 10).unwrap().len(), 1);
    let info = store.complete_multipart(&id, &listed).unwrap();
    let mut md5s = md5::Md5::new();
    for p in &parts {
        md5s.update(md5::Md5::digest(p));
    }
    let expected_etag = format!(
        "\"{}-3\"",
        md5s.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(info.etag, expected_etag);
    assert_eq!(info.content_type.as_deref(), Some("application/x-test"));
    assert_eq!(get(&store, "multi", "big"), parts.concat());
    assert!(store.list_uploads("multi", "", 10).unwrap().is_empty());
    assert!(matches!(
        store.list_parts(&id),
        Err(StoreError::NoSuchUpload(_))
    ));
}

#[test]
fn a_part_etag_is_its_md5_when_the_client_sends_content_md5_and_else_its_blake3_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("etags", BucketSettings::default())
        .unwrap();
    let id = store
        .create_multipart("etags", "k", PutOptions::default())
        .unwrap();
    let body = data(7, 5 << 20, false);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut h = store.upload_part(&id, 1, Checksums::default()).unwrap();
    h.write(&body).unwrap();
    let fast = h.finish().unwrap().etag;
    assert_eq!(
        fast,
        format!("\"{}\"", hex(&blake3::hash(&body).as_bytes()[..16]))
    );
    let md5 = md5::Md5::digest(&body);
    let announced = Checksums {
        content_md5: Some(base64::engine::general_purpose::STANDARD.encode(md5)),
        ..Default::default()
    };
    let mut h = store.upload_part(&id, 2, announced).unwrap();
    h.write(&body).unwrap();
    assert_eq!(h.finish().unwrap().etag, format!("\"{}\"", hex(&md5)));
    // Either ETag completes the upload.
    let info = store
        .complete_multipart(&id, &[(1, fast), (2, format!("\"{}\"", hex(&md5)))])
        .unwrap();
    assert!(info.etag.ends_with("-2\""), "{}", info.etag);
    assert!(get(&store, "etags", "k") == [body.clone(), body].concat());
}

#[test]
fn bad_input_gets_the_right_error_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("strict", BucketSettings::default())
        .unwrap();
    assert!(matches!(
        store.create_bucket("strict", BucketSettings::default()),
        Err(StoreError::BucketAlreadyOwnedByYou(_))
    ));
    assert!(matches!(
        store.create_bucket("Bad_Name", BucketSettings::default()),
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.create_bucket("_permafrost", BucketSettings::default()),
        Err(StoreError::InvalidArgument(_))
    ));
    let bad_placement = BucketSettings {
        placement: Some("nearest".into()),
        ..Default::default()
    };
    assert!(matches!(
        store.create_bucket("other", bad_placement),
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.head_bucket("missing"),
        Err(StoreError::NoSuchBucket(_))
    ));
    assert!(matches!(
        store.begin_put("missing", "k", PutOptions::default()),
        Err(StoreError::NoSuchBucket(_))
    ));
    assert!(matches!(
        store.head_object("strict", "nope"),
        Err(StoreError::NoSuchKey { .. })
    ));
    assert!(matches!(
        store.open_object("missing", "nope", None, None),
        Err(StoreError::NoSuchBucket(_))
    ));
    assert!(matches!(
        store.begin_put("strict", "", PutOptions::default()),
        Err(StoreError::InvalidArgument(_))
    ));

    let body = b"hello permafrost".to_vec();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let wrong_md5 = PutOptions {
        expected: Checksums {
            content_md5: Some(b64(&md5::Md5::digest(b"something else"))),
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(matches!(
        store.put_object("strict", "k", wrong_md5, &body),
        Err(StoreError::BadDigest(_))
    ));
    let malformed = PutOptions {
        expected: Checksums {
            content_md5: Some("not base64!".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(matches!(
        store.put_object("strict", "k", malformed, &body),
        Err(StoreError::InvalidDigest(_))
    ));
    let wrong_sha = PutOptions {
        expected: Checksums {
            sha256: Some(b64(&[0u8; 32])),
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(matches!(
        store.put_object("strict", "k", wrong_sha, &body),
        Err(StoreError::BadDigest(_))
    ));
    assert!(
        matches!(
            store.head_object("strict", "k"),
            Err(StoreError::NoSuchKey { .. })
        ),
        "nothing stored"
    );
    let right = PutOptions {
        expected: Checksums {
            content_md5: Some(b64(&md5::Md5::digest(&body))),
            crc32c: Some(b64(&crc_fast::crc32_iscsi(&body).to_be_bytes())),
            sha256: Some(b64(&sha2::Sha256::digest(&body))),
            ..Default::default()
        },
        ..Default::default()
    };
    let info = store.put_object("strict", "k", right, &body).unwrap();
    assert_eq!(info.checksums.len(), 2);
    let no_length = PutOptions {
        content_encoding: Encoding::Zstd,
        ..Default::default()
    };
    assert!(matches!(
        store.begin_put("strict", "z", no_length),
        Err(StoreError::InvalidArgument(_))
    ));

    assert!(matches!(
        store.delete_bucket("strict"),
        Err(StoreError::BucketNotEmpty(_))
    ));
    assert!(matches!(
        store.delete_object("missing", "k"),
        Err(StoreError::NoSuchBucket(_))
    ));
    store.delete_object("strict", "never-existed").unwrap();

    // Multipart rules.
    assert!(matches!(
        store.upload_part("no-such-upload", 1, Checksums::default()),
        Err(StoreError::NoSuchUpload(_))
    ));
    let id = store
        .create_multipart("strict", "multi", PutOptions::default())
        .unwrap();
    assert!(matches!(
        store.upload_part(&id, 0, Checksums::default()),
        Err(StoreError::InvalidArgument(_))
    ));
    let mut etags = Vec::new();
    for n in 1..=2u32 {
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        h.write(&[n as u8; 1000]).unwrap();
        etags.push((n, h.finish().unwrap().etag));
    }
    assert!(matches!(
        store.complete_multipart(&id, &etags),
        Err(StoreError::EntityTooSmall(_))
    ));
    let reversed = vec![etags[1].clone(), etags[0].clone()];
    assert!(matches!(
        store.complete_multipart(&id, &reversed),
        Err(StoreError::InvalidPartOrder(_))
    ));
    assert!(matches!(
        store.complete_multipart(&id, &[(1, "\"00\"".into())]),
        Err(StoreError::InvalidPart(_))
    ));
    assert!(matches!(
        store.complete_multipart(&id, &[(7, etags[0].1.clone())]),
        Err(StoreError::InvalidPart(_))
    ));
    store.abort_multipart(&id).unwrap();
    assert!(matches!(
        store.complete_multipart(&id, &etags),
        Err(StoreError::NoSuchUpload(_))
    ));
    assert!(matches!(
        store.head_object("strict", "mp"),
        Err(StoreError::NoSuchKey { .. })
    ));
}

#[test]
fn a_full_cache_slows_writers_down_instead_of_failing_them_silently() {
    // A writer that waits while persistence frees space gets through: the second 12 MiB object only fits
    // in the 16 MiB cache once the first one has been persisted and evicted, which the waiting writer
    // triggers itself (the watchdog of the test configuration never fires on its own).
    let dir = tempfile::tempdir().unwrap();
    let mut waiting = config();
    waiting.cache_bytes_max = 16 << 20;
    waiting.cache_wait_ms_max = 30_000;
    let store = Store::open(dir.path(), waiting).unwrap();
    let settings = || BucketSettings {
        compression: Some(Compression::None),
        ..Default::default()
    };
    store.create_bucket("full", settings()).unwrap();
    put(&store, "full", "first", &data(1, 12 << 20, false));
    put(&store, "full", "second", &data(2, 12 << 20, false));
    assert_ne!(
        store.head_object("full", "first").unwrap().state,
        ContentState::Cached,
        "the writer's wait persisted the first object"
    );
    assert_eq!(get(&store, "full", "first"), data(1, 12 << 20, false));
    assert_eq!(get(&store, "full", "second"), data(2, 12 << 20, false));
    drop(store);

    // A writer whose upload cannot fit even in an empty cache waits the configured time, then fails with
    // SlowDown, and nothing of it is stored.
    let dir = tempfile::tempdir().unwrap();
    let mut impatient = config();
    impatient.cache_bytes_max = 16 << 20;
    impatient.cache_wait_ms_max = 200;
    let store = Store::open(dir.path(), impatient).unwrap();
    store.create_bucket("full", settings()).unwrap();
    let mut h = store
        .begin_put("full", "huge", PutOptions::default())
        .unwrap();
    let started = std::time::Instant::now();
    let result = (0..20).try_for_each(|i| h.write(&data(100 + i, 1 << 20, false)));
    assert!(matches!(result, Err(StoreError::SlowDown(_))), "{result:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "it waited for space first"
    );
    drop(h);
    assert!(matches!(
        store.head_object("full", "huge"),
        Err(StoreError::NoSuchKey { .. })
    ));
    // The space of the failed upload is given back: a normal object fits again.
    put(&store, "full", "after", &data(3, 12 << 20, false));
    assert_eq!(get(&store, "full", "after"), data(3, 12 << 20, false));
}

#[test]
fn small_objects_are_cached_in_the_catalog_with_no_file_and_read_back_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let bodies: Vec<Vec<u8>> = (0..20)
        .map(|i| data(700 + i, 100 + 3000 * i as usize, i % 2 == 0))
        .collect();
    {
        let store = open(dir.path());
        store
            .create_bucket("small", BucketSettings::default())
            .unwrap();
        for (i, body) in bodies.iter().enumerate() {
            put(&store, "small", &format!("s{i}"), body);
        }
        let files = std::fs::read_dir(dir.path().join("cache/contents"))
            .unwrap()
            .count();
        assert_eq!(files, 0, "no cache file for small objects");
        let used = store.status().unwrap().cache_used_bytes;
        assert!(used > 0 && used < 20 * (64 << 10), "{used}");
        for (i, body) in bodies.iter().enumerate() {
            assert_eq!(&get(&store, "small", &format!("s{i}")), body);
        }
    }
    // After a restart the cache accounting includes them, and they read back, persist and evict.
    let store = open(dir.path());
    let expected_used: u64 = (0..bodies.len())
        .map(|i| {
            store
                .head_object("small", &format!("s{i}"))
                .unwrap()
                .stored_bytes
        })
        .sum();
    assert_eq!(store.status().unwrap().cache_used_bytes, expected_used);
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    assert_eq!(store.status().unwrap().cache_used_bytes, 0);
    for (i, body) in bodies.iter().enumerate() {
        assert_eq!(&get(&store, "small", &format!("s{i}")), body);
    }
    let report = store.verify(&mut |_| {}).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
}

#[test]
fn unreferenced_contents_never_hold_the_cache_full_but_a_reader_keeps_its_content() {
    // Deleted objects' contents wait out the grace period (an hour here) for reads in flight; a writer that
    // finds the cache full of them has them collected after the short grace instead of getting SlowDown. A
    // content an open reader holds is not collected under it.
    let dir = tempfile::tempdir().unwrap();
    let mut tight = config();
    tight.cache_bytes_max = 32 << 20;
    tight.cache_wait_ms_max = 20_000;
    let store = Store::open(dir.path(), tight).unwrap();
    let settings = BucketSettings {
        compression: Some(Compression::None),
        ..Default::default()
    };
    store.create_bucket("churn", settings).unwrap();
    let size = 12 << 20;
    put(&store, "churn", "a", &data(1, size, false));
    put(&store, "churn", "b", &data(2, size, false));
    let (_, mut held) = store.open_object("churn", "b", None, None).unwrap();
    store.delete_object("churn", "a").unwrap();
    store.delete_object("churn", "b").unwrap();
    let started = std::time::Instant::now();
    put(&store, "churn", "c", &data(3, size, false));
    assert!(
        started.elapsed() < Duration::from_millis(15_000),
        "the dead content made room within the short grace, not the hour"
    );
    let mut body = Vec::new();
    held.read_to_end(&mut body).unwrap();
    assert!(
        body == data(2, size, false),
        "the held content was not collected under its reader"
    );
    drop(held);
    put(&store, "churn", "d", &data(4, size, false));
    assert_eq!(get(&store, "churn", "c"), data(3, size, false));
    assert_eq!(get(&store, "churn", "d"), data(4, size, false));
    assert_eq!(store.status().unwrap().catalog.objects, 2);
}
