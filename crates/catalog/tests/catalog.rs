//! Behaviour of the SQLite catalog through the `Catalog` trait.

use permafrost_catalog::*;

mod common;
use common::Backend;

fn open(b: Backend) -> (common::Guard, SqliteCatalog) {
    if b == Backend::Postgres {
        return common::open(b);
    }
    let dir = tempfile::tempdir().unwrap();
    let catalog = SqliteCatalog::open(&dir.path().join("catalog.sqlite")).unwrap();
    (common::Guard(Some(dir)), catalog)
}

fn cid(n: u8) -> ContentId {
    ContentId {
        hash: [n; 32],
        encoding: Encoding::Identity,
    }
}

fn new_content(n: u8, path: &str) -> NewContent {
    NewContent {
        id: cid(n),
        logical_bytes: 100,
        stored_bytes: 80,
        stored_form: StoredForm::Chunked,
        chunk_index: vec![1, 2, 3],
        md5: [n; 16],
        cache_path: path.into(),
        inline: None,
    }
}

fn object(bucket: &str, key: &str, n: u8) -> ObjectRecord {
    ObjectRecord {
        bucket: bucket.into(),
        key: key.into(),
        content: cid(n),
        size_bytes: 100,
        etag: format!("\"{n}\""),
        last_modified_ms: 1,
        content_type: Some("text/plain".into()),
        user_metadata: vec![("a".into(), "b".into())],
        checksums: vec![],
        dataset: format!("{bucket}/d"),
        version_id: NULL_VERSION.into(),
        attributes: Default::default(),
        expires_ms: None,
    }
}

fn put(c: &SqliteCatalog, bucket: &str, key: &str, n: u8) -> PutOutcome {
    c.put_object(
        &object(bucket, key, n),
        &new_content(n, &format!("{key}.{n}")),
        10,
    )
    .unwrap()
}

fn buckets_are_created_listed_and_deleted_only_when_empty(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    assert!(matches!(
        c.create_bucket("b", &BucketSettings::default()),
        Err(CatalogError::BucketExists(_))
    ));
    assert_eq!(c.list_buckets().unwrap().len(), 1);
    put(&c, "b", "k", 1);
    assert!(matches!(
        c.delete_bucket("b"),
        Err(CatalogError::BucketNotEmpty(_))
    ));
    assert!(c.delete_object("b", "k", 11).unwrap());
    c.delete_bucket("b").unwrap();
    assert!(c.get_bucket("b").unwrap().is_none());
    assert!(matches!(
        c.delete_bucket("b"),
        Err(CatalogError::NoSuchBucket(_))
    ));
}

fn put_round_trips_every_field(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket(
        "b",
        &BucketSettings {
            compression: Some(Compression::Lz4),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        c.get_bucket("b").unwrap().unwrap().settings.compression,
        Some(Compression::Lz4)
    );
    let changed = BucketSettings {
        compression: Some(Compression::None),
        placement: Some("round-robin".into()),
        write_mode: None,
        hot_prefixes: vec!["raw/".into()],
    };
    c.set_bucket_settings("b", &changed).unwrap();
    assert_eq!(c.get_bucket("b").unwrap().unwrap().settings, changed);
    assert!(matches!(
        c.set_bucket_settings("nobucket", &changed),
        Err(CatalogError::NoSuchBucket(_))
    ));
    let outcome = put(&c, "b", "dir/ünïcode key", 7);
    assert!(!outcome.deduplicated);
    let (o, content) = c.get_object("b", "dir/ünïcode key").unwrap().unwrap();
    assert_eq!(o, object("b", "dir/ünïcode key", 7));
    assert_eq!(content.refcount, 1);
    assert_eq!(content.state, ContentState::Cached);
    assert_eq!(content.chunk_index, vec![1, 2, 3]);
    assert_eq!(content.cache_path.as_deref(), Some("dir/ünïcode key.7"));
    assert!(matches!(
        c.put_object(&object("nope", "k", 1), &new_content(1, "x"), 1),
        Err(CatalogError::NoSuchBucket(_))
    ));
}

fn identical_content_is_stored_once_and_refcounted(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    assert!(!put(&c, "b", "k0", 5).deduplicated);
    for i in 1..10 {
        let outcome = put(&c, "b", &format!("k{i}"), 5);
        assert!(outcome.deduplicated);
        assert_eq!(
            outcome.work.len(),
            1,
            "the duplicate's cache file is scheduled for deletion"
        );
    }
    assert_eq!(c.get_content(&cid(5)).unwrap().unwrap().refcount, 10);
    for i in 0..9 {
        c.delete_object("b", &format!("k{i}"), 20).unwrap();
    }
    let content = c.get_content(&cid(5)).unwrap().unwrap();
    assert_eq!((content.refcount, content.unreferenced_since_ms), (1, None));
    assert!(c.gc_candidates(u64::MAX, 10).unwrap().is_empty());
    c.delete_object("b", "k9", 30).unwrap();
    assert_eq!(
        c.get_content(&cid(5))
            .unwrap()
            .unwrap()
            .unreferenced_since_ms,
        Some(30)
    );
    assert!(
        c.gc_candidates(29, 10).unwrap().is_empty(),
        "grace period respected"
    );
    assert_eq!(c.gc_candidates(30, 10).unwrap(), vec![cid(5)]);
    assert_eq!(
        c.gc_candidates(u64::MAX, 10).unwrap(),
        vec![cid(5)],
        "no grace at all"
    );
    let gc = c.gc_content(&cid(5)).unwrap();
    assert_eq!(gc.contents_removed, 1);
    assert_eq!(gc.work.len(), 1);
    assert!(c.get_content(&cid(5)).unwrap().is_none());
    assert!(c.check().unwrap().is_empty());
}

fn overwriting_a_key_moves_the_reference(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    put(&c, "b", "k", 1);
    put(&c, "b", "k", 2);
    assert_eq!(c.get_content(&cid(1)).unwrap().unwrap().refcount, 0);
    assert_eq!(c.get_content(&cid(2)).unwrap().unwrap().refcount, 1);
    assert!(c.check().unwrap().is_empty());
}

fn copy_adds_a_reference_and_copy_onto_itself_keeps_the_content(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    c.create_bucket("c", &BucketSettings::default()).unwrap();
    put(&c, "b", "k", 1);
    let copy = c
        .copy_object("b", "k", None, &object("c", "k2", 99), 5)
        .unwrap();
    assert_eq!(copy.content, cid(1));
    assert_eq!(c.get_content(&cid(1)).unwrap().unwrap().refcount, 2);
    c.copy_object("b", "k", None, &object("b", "k", 99), 6)
        .unwrap();
    assert_eq!(c.get_content(&cid(1)).unwrap().unwrap().refcount, 2);
    assert!(matches!(
        c.copy_object("b", "missing", None, &object("c", "x", 1), 7),
        Err(CatalogError::NoSuchKey { .. })
    ));
    assert!(c.check().unwrap().is_empty());
}

fn listing_uses_prefix_delimiter_and_pages(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    for key in ["a/1", "a/2", "b/x/1", "c", "d/1", "e"] {
        put(&c, "b", key, 1);
    }
    let page = c
        .list_objects(
            "b",
            &ListQuery {
                delimiter: Some("/".into()),
                max_keys: 3,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.common_prefixes, vec!["a/", "b/"]);
    assert_eq!(
        page.objects
            .iter()
            .map(|o| o.key.as_str())
            .collect::<Vec<_>>(),
        vec!["c"]
    );
    assert!(page.is_truncated);
    let page = c
        .list_objects(
            "b",
            &ListQuery {
                delimiter: Some("/".into()),
                max_keys: 3,
                start_after: page.next_start_after,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.common_prefixes, vec!["d/"]);
    assert_eq!(
        page.objects
            .iter()
            .map(|o| o.key.as_str())
            .collect::<Vec<_>>(),
        vec!["e"]
    );
    assert!(!page.is_truncated);
    let page = c
        .list_objects(
            "b",
            &ListQuery {
                prefix: "b/".into(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.objects.len(), 1);
    assert!(matches!(
        c.list_objects("zz", &ListQuery::default()),
        Err(CatalogError::NoSuchBucket(_))
    ));
}

fn extents_are_allocated_without_overlap_and_freed_ranges_are_reused(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    put(&c, "b", "k1", 1);
    put(&c, "b", "k2", 2);
    c.place_content(&cid(1), 3).unwrap();
    c.place_content(&cid(2), 3).unwrap();
    let out = c.outstanding().unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].grid_bucket, out[0].stored_bytes, out[0].contents),
        (3, 160, 2)
    );
    let ext = |len| NewExtent {
        length_bytes: len,
        payload_bytes: len - 100,
        object_id: [1; 16],
        extent_no: 0,
        replica_id: (len / 4096) as u8,
        kind: ExtentKind::Content,
    };
    let e1 = c
        .begin_extents(3, 1 << 20, &[ext(8192)], &[cid(1)])
        .unwrap();
    let e2 = c
        .begin_extents(3, 1 << 20, &[ext(4096)], &[cid(2)])
        .unwrap();
    assert_eq!((e1[0].offset, e2[0].offset), (0, 8192));
    assert_eq!(
        c.get_content(&cid(1)).unwrap().unwrap().state,
        ContentState::Persisting
    );
    let unwritten = c.unwritten_extents().unwrap();
    assert_eq!(
        unwritten.iter().map(|e| e.replica_id).collect::<Vec<_>>(),
        [2, 1],
        "replica ids round-trip"
    );
    let seg = |n, e: &ExtentRecord| SegmentRecord {
        content: cid(n),
        seq: 0,
        extent_id: e.extent_id,
        offset_in_payload: 64,
        length_bytes: 80,
    };
    c.finish_extents(
        &[(e1[0].extent_id, [7; 32])],
        &[seg(1, &e1[0])],
        &[cid(1)],
        false,
    )
    .unwrap();
    c.finish_extents(
        &[(e2[0].extent_id, [8; 32])],
        &[seg(2, &e2[0])],
        &[cid(2)],
        true,
    )
    .unwrap();
    assert_eq!(
        c.get_content(&cid(1)).unwrap().unwrap().state,
        ContentState::Persisted
    );
    assert_eq!(
        c.get_content(&cid(2)).unwrap().unwrap().state,
        ContentState::Persisting
    );
    c.mark_persisted(&[cid(2)]).unwrap();
    assert_eq!(
        c.get_content(&cid(2)).unwrap().unwrap().state,
        ContentState::Persisted
    );
    let segs = c.segments(&cid(1)).unwrap();
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].extent.blake3, Some([7; 32]));
    // Free the first extent: its range is reused by a fitting allocation.
    c.delete_object("b", "k1", 50).unwrap();
    let gc = c.gc_content(&cid(1)).unwrap();
    assert_eq!(gc.ranges_freed, vec![(3, 0, 8192)]);
    assert_eq!(c.free_ranges(3).unwrap(), vec![(0, 8192)]);
    let e3 = c.begin_extents(3, 1 << 20, &[ext(4096)], &[]).unwrap();
    assert_eq!(e3[0].offset, 0);
    assert_eq!(c.free_ranges(3).unwrap(), vec![(4096, 4096)]);
    // Freeing the last extent lowers the append pointer and merges with the free neighbour.
    c.abandon_extents(&[e3[0].extent_id], &[]).unwrap();
    assert_eq!(c.free_ranges(3).unwrap(), vec![(0, 8192)]);
    c.delete_object("b", "k2", 60).unwrap();
    c.gc_content(&cid(2)).unwrap();
    assert!(c.free_ranges(3).unwrap().is_empty());
    assert_eq!(c.grid_usage().unwrap()[0].append_offset, 0);
    assert!(matches!(
        c.begin_extents(3, 4096, &[ext(8192)], &[]),
        Err(CatalogError::NoRoom {
            grid_bucket: 3,
            bytes: 8192,
            ..
        })
    ));
    assert!(c.check().unwrap().is_empty());
}

fn a_pack_extent_is_freed_only_when_its_last_entry_dies(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    for n in 1..=3 {
        put(&c, "b", &format!("k{n}"), n);
        c.place_content(&cid(n), 0).unwrap();
    }
    let ids = [cid(1), cid(2), cid(3)];
    let pack = NewExtent {
        length_bytes: 4096,
        payload_bytes: 400,
        object_id: [9; 16],
        extent_no: 0,
        replica_id: 0,
        kind: ExtentKind::Pack,
    };
    let e = c.begin_extents(0, 1 << 20, &[pack], &ids).unwrap();
    let segments: Vec<SegmentRecord> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| SegmentRecord {
            content: *id,
            seq: 0,
            extent_id: e[0].extent_id,
            offset_in_payload: i as u64 * 100,
            length_bytes: 80,
        })
        .collect();
    c.finish_extents(&[(e[0].extent_id, [0; 32])], &segments, &ids, false)
        .unwrap();
    for n in 1..=2u8 {
        c.delete_object("b", &format!("k{n}"), 5).unwrap();
        assert!(c.gc_content(&cid(n)).unwrap().ranges_freed.is_empty());
    }
    c.delete_object("b", "k3", 5).unwrap();
    assert_eq!(
        c.gc_content(&cid(3)).unwrap().ranges_freed,
        vec![(0, 0, 4096)]
    );
    assert_eq!(c.stats().unwrap().extents, 0);
}

/// Bucket `b` with objects `k1`..`k3` (contents 1..3), each persisted in an extent of its own on grid bucket 0.
fn persist_three(c: &SqliteCatalog) {
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    for n in 1..=3 {
        put(c, "b", &format!("k{n}"), n);
        c.place_content(&cid(n), 0).unwrap();
        let e = c
            .begin_extents(
                0,
                1 << 30,
                &[NewExtent {
                    length_bytes: 4096,
                    payload_bytes: 100,
                    object_id: [n; 16],
                    extent_no: 0,
                    replica_id: 0,
                    kind: ExtentKind::Content,
                }],
                &[cid(n)],
            )
            .unwrap();
        c.finish_extents(&[(e[0].extent_id, [0; 32])], &[], &[cid(n)], false)
            .unwrap();
    }
}

fn hot_contents_are_never_evicted_and_restores_neither_unpin_them_nor_lose_their_own_pin(
    b: Backend,
) {
    let (_d, c) = open(b);
    persist_three(&c);
    let candidates = |c: &SqliteCatalog| -> Vec<ContentId> {
        let mut ids: Vec<ContentId> = c
            .eviction_candidates(10)
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(c.pin_hot(&[cid(1), cid(2)], true).unwrap(), 2);
    assert_eq!(c.pin_hot(&[cid(1)], true).unwrap(), 0, "pinned already");
    assert_eq!(candidates(&c), vec![cid(3)]);
    assert!(c.evict_contents(&[cid(1)]).unwrap().is_empty());
    // A restore of a hot content, done and expired, leaves it hot.
    let t = now_ms();
    let terms = RestoreTerms {
        duration_ms: 1000,
        tier: RestoreTier::Expedited,
        day_ms: 1000,
    };
    c.request_restore("b", "k1", None, &terms, t).unwrap();
    c.finish_restores(&cid(1), t, 1000).unwrap();
    assert_eq!(c.expire_restores(t + 10_000).unwrap(), 1);
    assert_eq!(candidates(&c), vec![cid(3)]);
    // Made cold: evictable again, unless a restore still pins it (until its expiry).
    c.request_restore("b", "k2", None, &terms, t).unwrap();
    c.finish_restores(&cid(2), t, 1000).unwrap();
    assert_eq!(c.pin_hot(&[cid(1), cid(2), cid(3)], false).unwrap(), 2);
    assert_eq!(candidates(&c), vec![cid(1), cid(3)]);
    assert_eq!(c.expire_restores(t + 10_000).unwrap(), 1);
    assert_eq!(candidates(&c), vec![cid(1), cid(2), cid(3)]);
}

fn eviction_candidates_are_persisted_contents_in_lru_order(b: Backend) {
    let (_d, c) = open(b);
    persist_three(&c);
    c.touch_contents(&[(cid(1), 1000)]).unwrap();
    let order: Vec<ContentId> = c
        .eviction_candidates(10)
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(order, vec![cid(2), cid(3), cid(1)]);
    // Several reads in one transaction: the latest access decides.
    c.touch_contents(&[(cid(2), 2000), (cid(3), 1500)]).unwrap();
    let order: Vec<ContentId> = c
        .eviction_candidates(10)
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(order, vec![cid(1), cid(3), cid(2)]);
    let mut evicted = c.evict_contents(&[cid(2)]).unwrap();
    assert_eq!(evicted.len(), 1);
    let evicted = evicted.pop().unwrap();
    assert_eq!((evicted.id, evicted.stored_bytes), (cid(2), 80));
    let work = evicted.work.unwrap();
    assert_eq!(
        work.kind,
        WorkKind::DeleteCacheFile {
            path: "k2.2".into()
        }
    );
    assert!(c
        .get_content(&cid(2))
        .unwrap()
        .unwrap()
        .cache_path
        .is_none());
    assert!(
        c.evict_contents(&[cid(2)]).unwrap().is_empty(),
        "no cache file left"
    );
    assert_eq!(c.pending_work().unwrap().len(), 1);
    c.finish_work(&[work.id]).unwrap();
    assert!(c.pending_work().unwrap().is_empty());
}

fn upload(c: &SqliteCatalog, id: &str) -> UploadRecord {
    let upload = UploadRecord {
        upload_id: id.into(),
        bucket: "b".into(),
        key: "big".into(),
        created_ms: 1,
        options: "{}".into(),
    };
    c.create_upload(&upload).unwrap();
    upload
}

/// Upload part `number` of `upload_id` holding content `n` (10 logical bytes).
fn put_part(c: &SqliteCatalog, upload_id: &str, number: u32, n: u8) -> Result<PutOutcome> {
    let part = PartRecord {
        upload_id: upload_id.into(),
        part_number: number,
        size_bytes: 10,
        md5: [n; 16],
        content: Some(cid(n)),
        cache_path: String::new(),
        created_ms: 2,
        checksums: vec![("crc64nvme".into(), format!("part {number} of {upload_id}"))],
    };
    let content = NewContent {
        logical_bytes: 10,
        ..new_content(n, &format!("part.{upload_id}.{number}.{n}"))
    };
    c.put_part(&part, &content, "b/d")
}

fn refcount(c: &SqliteCatalog, n: u8) -> u64 {
    c.get_content(&cid(n)).unwrap().unwrap().refcount
}

fn part_list(parts: &[(u32, u8)]) -> NewPartList {
    let parts: Vec<(u32, ContentPart)> = parts
        .iter()
        .enumerate()
        .map(|(i, &(number, n))| {
            (
                number,
                ContentPart {
                    seq: i as u32,
                    part: cid(n),
                    logical_offset: 10 * i as u64,
                    logical_bytes: 10,
                },
            )
        })
        .collect();
    NewPartList {
        id: ContentId {
            hash: [0xEE; 32],
            encoding: Encoding::Identity,
        },
        logical_bytes: 10 * parts.len() as u64,
        md5: [0xAB; 16],
        parts,
    }
}

fn list_object(list: &NewPartList) -> ObjectRecord {
    ObjectRecord {
        content: list.id,
        size_bytes: list.logical_bytes,
        etag: "\"ab-2\"".into(),
        ..object("b", "big", 0)
    }
}

fn uploaded_parts_are_referenced_contents_and_replacing_or_aborting_drops_the_references(
    b: Backend,
) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    let u = upload(&c, "u1");
    assert!(!put_part(&c, "u1", 1, 1).unwrap().deduplicated);
    assert_eq!(refcount(&c, 1), 1);
    // Part 1 again with other bytes: content 1 loses its reference at once.
    put_part(&c, "u1", 1, 2).unwrap();
    assert_eq!((refcount(&c, 1), refcount(&c, 2)), (0, 1));
    // Part 2 with the bytes of part 1: one content, two references; the new cache file is to be deleted.
    let again = put_part(&c, "u1", 2, 2).unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.work.len(), 1);
    assert_eq!(refcount(&c, 2), 2);
    // The same part with the same bytes again keeps its content referenced throughout.
    put_part(&c, "u1", 2, 2).unwrap();
    assert_eq!(refcount(&c, 2), 2);
    let parts = c.list_parts("u1").unwrap();
    assert_eq!(
        parts
            .iter()
            .map(|p| (p.part_number, p.content))
            .collect::<Vec<_>>(),
        vec![(1, Some(cid(2))), (2, Some(cid(2)))]
    );
    // Each part keeps the checksums it arrived with (schema 8), for the completed object's checksum.
    assert_eq!(
        parts[1].checksums,
        vec![("crc64nvme".to_string(), "part 2 of u1".to_string())]
    );
    assert_eq!(
        c.owner_of(&cid(2)).unwrap(),
        Some(ContentOwner::Part {
            bucket: "b".into(),
            key: "big".into(),
            created_ms: 2
        })
    );
    assert_eq!(c.owner_of(&cid(1)).unwrap(), None);
    assert_eq!(c.list_uploads("b", "bi", 10).unwrap(), vec![u.clone()]);
    assert!(c.list_uploads("b", "x", 10).unwrap().is_empty());
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
    assert!(c.remove_upload("u1").unwrap().is_empty());
    assert_eq!(refcount(&c, 2), 0);
    assert!(matches!(
        c.remove_upload("u1"),
        Err(CatalogError::NoSuchUpload(_))
    ));
    assert!(matches!(
        put_part(&c, "u1", 3, 3),
        Err(CatalogError::NoSuchUpload(_))
    ));
    assert!(c.get_content(&cid(3)).unwrap().is_none());
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn completing_an_upload_makes_its_object_a_list_of_the_chosen_parts_in_one_transaction(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    upload(&c, "u1");
    for (number, n) in [(1, 1), (2, 2), (3, 3)] {
        put_part(&c, "u1", number, n).unwrap();
    }
    // An older object at the key loses its reference.
    put(&c, "b", "big", 9);
    let list = part_list(&[(1, 1), (3, 3)]);
    let outcome = c
        .complete_upload("u1", &list_object(&list), &list, 20)
        .unwrap();
    assert!(!outcome.deduplicated);
    assert!(
        outcome.work.is_empty(),
        "no cache file is written or deleted"
    );
    let (object, content) = c.get_object("b", "big").unwrap().unwrap();
    assert_eq!(object.content, list.id);
    assert_eq!(
        (
            content.stored_form,
            content.stored_bytes,
            content.logical_bytes,
            content.cache_path
        ),
        (StoredForm::Parts, 0, 20, None)
    );
    let parts = c.content_parts(&list.id).unwrap();
    assert_eq!(
        parts
            .iter()
            .map(|(p, r)| (p.seq, p.part, p.logical_offset, r.id))
            .collect::<Vec<_>>(),
        vec![(0, cid(1), 0, cid(1)), (1, cid(3), 10, cid(3))]
    );
    assert!(c.content_parts(&cid(1)).unwrap().is_empty());
    // Chosen parts are referenced by the list, the unchosen one by nothing; the upload is gone.
    assert_eq!(
        (
            refcount(&c, 1),
            refcount(&c, 2),
            refcount(&c, 3),
            refcount(&c, 9)
        ),
        (1, 0, 1, 0)
    );
    assert!(matches!(c.get_upload("u1"), Ok(None)));
    assert!(c.list_parts("u1").unwrap().is_empty());
    assert!(matches!(
        c.owner_of(&cid(3)).unwrap(),
        Some(ContentOwner::Part { ref key, .. }) if key == "big"
    ));
    assert!(
        matches!(c.owner_of(&list.id).unwrap(), Some(ContentOwner::Object(o)) if o.key == "big")
    );
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
    assert!(matches!(
        c.complete_upload("u1", &list_object(&list), &list, 21),
        Err(CatalogError::NoSuchUpload(_))
    ));
    // The same parts completed again under another upload: the same list, referenced twice.
    upload(&c, "u2");
    put_part(&c, "u2", 1, 1).unwrap();
    put_part(&c, "u2", 3, 3).unwrap();
    let copy = ObjectRecord {
        key: "copy".into(),
        ..list_object(&list)
    };
    assert!(
        c.complete_upload("u2", &copy, &list, 22)
            .unwrap()
            .deduplicated
    );
    assert_eq!(c.get_content(&list.id).unwrap().unwrap().refcount, 2);
    assert_eq!((refcount(&c, 1), refcount(&c, 3)), (1, 1));
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn a_completion_naming_a_replaced_part_changes_nothing(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    upload(&c, "u1");
    put_part(&c, "u1", 1, 1).unwrap();
    put_part(&c, "u1", 2, 2).unwrap();
    let list = part_list(&[(1, 1), (2, 2)]);
    put_part(&c, "u1", 2, 4).unwrap(); // replaced after the list was made
    assert!(matches!(
        c.complete_upload("u1", &list_object(&list), &list, 20),
        Err(CatalogError::Corrupt(_))
    ));
    assert!(c.get_object("b", "big").unwrap().is_none());
    assert!(c.get_content(&list.id).unwrap().is_none());
    assert_eq!(c.list_parts("u1").unwrap().len(), 2);
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn a_completion_is_remembered_with_its_parts_checksums_and_forgotten_after_a_week(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    upload(&c, "u1");
    for (number, n) in [(1, 1), (2, 2), (3, 3)] {
        put_part(&c, "u1", number, n).unwrap();
    }
    let list = part_list(&[(1, 1), (3, 3)]);
    c.complete_upload("u1", &list_object(&list), &list, 20)
        .unwrap();
    let done = c.completed_upload("u1").unwrap().expect("remembered");
    assert_eq!(
        (
            done.bucket.as_str(),
            done.key.as_str(),
            done.version_id.as_str(),
            done.content,
            done.part_numbers.clone(),
            done.completed_ms
        ),
        ("b", "big", NULL_VERSION, list.id, vec![1, 3], 20)
    );
    assert!(c.completed_upload("u2").unwrap().is_none());
    // Each part of the list keeps the checksums it arrived with.
    let pair = |v: &str| vec![("crc64nvme".to_string(), v.to_string())];
    assert_eq!(
        c.part_checksums(&list.id).unwrap(),
        vec![pair("part 1 of u1"), pair("part 3 of u1")]
    );
    assert!(c.part_checksums(&cid(1)).unwrap().is_empty());
    // The first completion a week later forgets it.
    upload(&c, "u2");
    put_part(&c, "u2", 1, 4).unwrap();
    let later = NewPartList {
        id: ContentId {
            hash: [0xEF; 32],
            encoding: Encoding::Identity,
        },
        ..part_list(&[(1, 4)])
    };
    let other = ObjectRecord {
        key: "other".into(),
        ..list_object(&later)
    };
    c.complete_upload("u2", &other, &later, 21 + COMPLETED_UPLOADS_KEPT_MS)
        .unwrap();
    assert!(c.completed_upload("u1").unwrap().is_none());
    assert_eq!(
        c.completed_upload("u2").unwrap().map(|d| d.key),
        Some("other".to_string())
    );
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn collecting_a_part_list_releases_its_parts_which_are_collected_after_it(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    upload(&c, "u1");
    put_part(&c, "u1", 1, 1).unwrap();
    put_part(&c, "u1", 2, 2).unwrap();
    let list = part_list(&[(1, 1), (2, 2)]);
    c.complete_upload("u1", &list_object(&list), &list, 20)
        .unwrap();
    assert!(c.delete_object("b", "big", 30).unwrap());
    // Only the list is unreferenced: its parts are still named by it.
    assert_eq!(c.gc_candidates(u64::MAX, 10).unwrap(), vec![list.id]);
    let outcome = c.gc_content(&list.id).unwrap();
    assert_eq!(outcome.contents_removed, 1);
    assert!(outcome.work.is_empty(), "a part list has no cache file");
    assert!(c.content_parts(&list.id).unwrap().is_empty());
    let mut candidates = c.gc_candidates(u64::MAX, 10).unwrap();
    candidates.sort_by_key(|id| id.hash);
    assert_eq!(candidates, vec![cid(1), cid(2)]);
    for id in candidates {
        assert_eq!(
            c.gc_content(&id).unwrap().work.len(),
            1,
            "the part's cache file"
        );
    }
    assert_eq!(
        c.stats()
            .unwrap()
            .contents_by_state
            .iter()
            .map(|s| s.1)
            .sum::<u64>(),
        0
    );
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

#[test]
fn a_schema_2_catalog_is_migrated_and_keeps_its_parts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    {
        let c = SqliteCatalog::open(&path).unwrap();
        c.create_bucket("b", &BucketSettings::default()).unwrap();
        upload(&c, "old");
    }
    {
        // Take the database back to schema 2 (no part lists, parts as files, no mount tables, no archive tables)
        // with one part uploaded then.
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(
            "DROP TABLE fs_directories;
             ALTER TABLE contents DROP COLUMN persisted_ms;
             DROP INDEX objects_expiring;
             ALTER TABLE objects DROP COLUMN version_id;
             ALTER TABLE objects DROP COLUMN version_seq;
             ALTER TABLE objects DROP COLUMN attributes;
             ALTER TABLE objects DROP COLUMN expires_ms;
             ALTER TABLE buckets DROP COLUMN archive;
             ALTER TABLE contents DROP COLUMN pinned_until_ms;
             DROP TABLE object_versions;
             DROP TABLE counters;
             DROP TABLE restores;
             DROP TABLE content_parts;
             DROP TABLE ops_history;
             DROP TABLE webhooks;
             DROP TABLE cache_inline; DROP TABLE access_keys; DROP TABLE access_grants;
             DROP TABLE bucket_access; DROP TABLE object_acls; ALTER TABLE multipart_parts DROP COLUMN checksums;
             DROP TABLE completed_uploads; DROP TABLE smart_readings;
             DROP INDEX multipart_parts_by_content;
             ALTER TABLE multipart_parts DROP COLUMN content;
             INSERT INTO multipart_parts (upload_id, part_number, size_bytes, md5, cache_path, created_ms)
                 VALUES ('old', 1, 10, x'00000000000000000000000000000000', 'parts/legacy', 3);
             UPDATE meta SET value = '2' WHERE key = 'schema_version';",
        )
        .unwrap();
    }
    let c = SqliteCatalog::open(&path).unwrap();
    let parts = c.list_parts("old").unwrap();
    assert_eq!(
        (parts[0].content, parts[0].cache_path.as_str()),
        (None, "parts/legacy")
    );
    assert_eq!(c.cache_files().unwrap(), vec!["parts/legacy".to_string()]);
    // The migrated schema takes new parts, and removing the upload deletes the old part's file.
    put_part(&c, "old", 2, 5).unwrap();
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
    let work = c.remove_upload("old").unwrap();
    assert_eq!(
        work.iter().map(|w| w.kind.clone()).collect::<Vec<_>>(),
        vec![WorkKind::DeleteCacheFile {
            path: "parts/legacy".into()
        }]
    );
    assert_eq!(refcount(&c, 5), 0);
    drop(c);
    let version: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, "13", "migrated to the latest version");
}

fn a_small_content_is_cached_inline_in_the_put_transaction_and_leaves_with_eviction_or_gc(
    b: Backend,
) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    let small = |n: u8| NewContent {
        stored_bytes: 5,
        stored_form: StoredForm::Raw,
        chunk_index: vec![],
        inline: Some(vec![n; 5]),
        ..new_content(n, "unused")
    };
    let outcome = c
        .put_object(&object("b", "tiny", 1), &small(1), 10)
        .unwrap();
    assert!(outcome.work.is_empty());
    let (_, content) = c.get_object("b", "tiny").unwrap().unwrap();
    assert_eq!(content.cache_path.as_deref(), Some(INLINE_CACHE_PATH));
    assert_eq!(c.inline_bytes(&cid(1)).unwrap(), Some(vec![1; 5]));
    assert!(c.cache_files().unwrap().is_empty(), "no cache file to keep");
    assert_eq!(c.stats().unwrap().inline_bytes, 5);
    // The same bytes again: deduplicated, nothing to delete.
    let again = c
        .put_object(&object("b", "tiny2", 1), &small(1), 11)
        .unwrap();
    assert!(again.deduplicated && again.work.is_empty());
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
    // Persisted, then evicted: the inline bytes go at once (no work item).
    c.place_content(&cid(1), 0).unwrap();
    c.begin_extents(
        0,
        1 << 30,
        &[NewExtent {
            length_bytes: 4096,
            payload_bytes: 100,
            object_id: [1; 16],
            extent_no: 0,
            replica_id: 0,
            kind: ExtentKind::Pack,
        }],
        &[cid(1)],
    )
    .unwrap();
    let extent = c.unwritten_extents().unwrap()[0].extent_id;
    c.finish_extents(&[(extent, [0; 32])], &[], &[cid(1)], false)
        .unwrap();
    let evicted = c.evict_contents(&[cid(1)]).unwrap();
    assert_eq!(evicted.len(), 1);
    assert_eq!(
        (evicted[0].stored_bytes, evicted[0].work.is_none()),
        (5, true)
    );
    assert_eq!(c.inline_bytes(&cid(1)).unwrap(), None);
    assert_eq!(c.stats().unwrap().inline_bytes, 0);
    // Another inline content, deleted and collected: its bytes go with it.
    c.put_object(&object("b", "other", 2), &small(2), 12)
        .unwrap();
    c.delete_object("b", "other", 13).unwrap();
    let outcome = c.gc_content(&cid(2)).unwrap();
    assert_eq!((outcome.inline_bytes_freed, outcome.work.len()), (5, 0));
    assert_eq!(c.inline_bytes(&cid(2)).unwrap(), None);
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

#[test]
fn catalog_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    {
        let c = SqliteCatalog::open(&path).unwrap();
        c.create_bucket("b", &BucketSettings::default()).unwrap();
        put(&c, "b", "k", 1);
        c.place_content(&cid(1), 2).unwrap();
    }
    let c = SqliteCatalog::open(&path).unwrap();
    let (_, content) = c.get_object("b", "k").unwrap().unwrap();
    assert_eq!(
        (content.state, content.grid_bucket),
        (ContentState::Placed, Some(2))
    );
    assert_eq!(c.datasets().unwrap()[0].grid_bucket, Some(2));
}

/// Not a pass/fail test: prints durable `put_object` commits per second with 1, 4 and 16 threads, next to the
/// raw rate of 4 KiB append + fdatasync on the same file system (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn measure_put_commits_per_second() {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    let run_for = Duration::from_secs(3);
    let dir = tempfile::tempdir().unwrap();
    {
        let mut file = std::fs::File::create(dir.path().join("append")).unwrap();
        let block = [7u8; 4096];
        let (start, mut syncs) = (Instant::now(), 0u64);
        while start.elapsed() < run_for {
            file.write_all(&block).unwrap();
            file.sync_data().unwrap();
            syncs += 1;
        }
        let per_second = syncs as f64 / start.elapsed().as_secs_f64();
        println!("raw 4 KiB append + fdatasync: {per_second:.0}/s");
    }
    for durable in [true, false] {
        for threads in [1u64, 4, 16] {
            let path = dir.path().join(format!("c-{durable}-{threads}.sqlite"));
            let c = SqliteCatalog::open_with(&path, SqliteOptions { durable }).unwrap();
            c.create_bucket("b", &BucketSettings::default()).unwrap();
            let puts = AtomicU64::new(0);
            let start = Instant::now();
            std::thread::scope(|s| {
                for t in 0..threads {
                    let (c, puts) = (&c, &puts);
                    s.spawn(move || {
                        let mut i = 0u32;
                        while start.elapsed() < run_for {
                            let mut content = new_content(0, &format!("p{t}.{i}"));
                            content.id.hash[..4].copy_from_slice(&i.to_le_bytes());
                            content.id.hash[4..12].copy_from_slice(&t.to_le_bytes());
                            let mut o = object("b", &format!("k{t}.{i}"), 0);
                            o.content = content.id;
                            c.put_object(&o, &content, 1).unwrap();
                            puts.fetch_add(1, Ordering::Relaxed);
                            i += 1;
                        }
                    });
                }
            });
            let per_second = puts.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
            println!("durable={durable} threads={threads}: {per_second:.0} puts/s");
        }
    }
}

fn sample(at_ms: u64) -> HistorySample {
    HistorySample {
        at_ms,
        read_bytes: at_ms * 10,
        written_bytes: at_ms * 20,
        requests: at_ms,
        spin_ups: at_ms / 100,
        watts: at_ms as f64 / 7.0,
        joules: at_ms as f64 * 1.5,
        disks_spinning: 3,
        cache_used_bytes: 1 << 20,
        cache_dirty_bytes: 1 << 10,
    }
}

fn history_keeps_the_newest_samples_and_returns_them_in_order(b: Backend) {
    let (_dir, c) = open(b);
    let c: &dyn Catalog = &c;
    for at in 1..=10u64 {
        c.history_append(&sample(at * 1000), 4).unwrap();
    }
    let all = c.history_since(0, 100).unwrap();
    assert_eq!(
        all.iter().map(|s| s.at_ms).collect::<Vec<_>>(),
        vec![7000, 8000, 9000, 10000]
    );
    assert_eq!(all[3], sample(10_000));
    // The same instant again replaces the sample.
    let mut again = sample(10_000);
    again.watts = 99.5;
    c.history_append(&again, 4).unwrap();
    assert_eq!(c.history_since(10_000, 10).unwrap(), vec![again]);
    // `limit` keeps the newest.
    assert_eq!(
        c.history_since(0, 2)
            .unwrap()
            .iter()
            .map(|s| s.at_ms)
            .collect::<Vec<_>>(),
        vec![9000, 10000]
    );
    assert!(c.history_since(11_000, 10).unwrap().is_empty());
}

fn a_webhook_is_marked_delivered_exactly_once(b: Backend) {
    let (_dir, c) = open(b);
    let c: &dyn Catalog = &c;
    let a = c
        .webhook_add("http://127.0.0.1:1/h", "runs", Some("2026/a.bin"), "", 5)
        .unwrap();
    let b = c
        .webhook_add("http://127.0.0.1:1/h", "runs", None, "2026/", 6)
        .unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(c.webhooks().unwrap(), vec![a.clone(), b.clone()]);
    assert!(c
        .webhook_attempt(a.id, Some("connection refused"), None)
        .unwrap());
    assert!(
        c.webhook_attempt(a.id, None, Some(77)).unwrap(),
        "pending until delivered"
    );
    assert!(
        !c.webhook_attempt(a.id, None, Some(88)).unwrap(),
        "never delivered twice"
    );
    let stored = &c.webhooks().unwrap()[0];
    assert_eq!((stored.delivered_ms, stored.attempts), (Some(77), 2));
    assert_eq!(stored.last_error, None);
    assert!(c.webhook_remove(b.id).unwrap());
    assert!(!c.webhook_remove(b.id).unwrap());
    assert_eq!(c.webhooks().unwrap().len(), 1);
    assert!(!c.webhook_attempt(12345, None, Some(1)).unwrap());
}

fn growing_list() -> ContentId {
    ContentId {
        hash: [0x6A; 32],
        encoding: Encoding::Identity,
    }
}

fn growing_object(key: &str) -> ObjectRecord {
    ObjectRecord {
        content: growing_list(),
        size_bytes: 0,
        etag: "\"growing-0\"".into(),
        ..object("b", key, 0)
    }
}

fn append(c: &SqliteCatalog, key: &str, number: u32) -> Result<Option<ContentPart>> {
    c.append_growing(
        &GrowingAppend {
            bucket: "b".into(),
            key: key.into(),
            list: growing_list(),
            upload_id: "u1".into(),
            part_number: number,
            etag: format!("\"e{number}\""),
            md5: [number as u8; 16],
            user_metadata: vec![("parts".into(), number.to_string())],
        },
        30 + number as u64,
    )
}

fn a_growing_object_gains_one_part_per_transaction_and_completes_into_an_ordinary_list(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    upload(&c, "u1");
    assert!(c.begin_growing(&growing_object("big"), 20).unwrap());
    let (o, list) = c.get_object("b", "big").unwrap().unwrap();
    assert_eq!(
        (o.size_bytes, list.stored_form, list.logical_bytes),
        (0, StoredForm::Parts, 0)
    );
    assert!(c.content_parts(&growing_list()).unwrap().is_empty());
    // A second start on the same key, or the same list id elsewhere, changes nothing.
    assert!(!c.begin_growing(&growing_object("big"), 21).unwrap());
    assert!(!c.begin_growing(&growing_object("other"), 21).unwrap());
    assert!(c.get_object("b", "other").unwrap().is_none());

    for (number, n) in [(1u32, 1u8), (2, 2), (3, 1)] {
        put_part(&c, "u1", number, n).unwrap();
        let part = append(&c, "big", number).unwrap().unwrap();
        assert_eq!(part.seq, number - 1);
        assert_eq!(part.logical_offset, 10 * (number as u64 - 1));
        let (o, list) = c.get_object("b", "big").unwrap().unwrap();
        assert_eq!(o.size_bytes, 10 * number as u64);
        assert_eq!(list.logical_bytes, o.size_bytes);
        assert_eq!(list.md5, [number as u8; 16]);
        assert_eq!(o.etag, format!("\"e{number}\""));
        assert_eq!(o.user_metadata, vec![("parts".into(), number.to_string())]);
        assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
    }
    // Content 1 is part 1 and part 3: referenced by both upload parts and both list rows.
    assert_eq!(refcount(&c, 1), 4);
    let rows = c.content_parts(&growing_list()).unwrap();
    assert_eq!(
        rows.iter().map(|(p, _)| p.part).collect::<Vec<_>>(),
        vec![cid(1), cid(2), cid(1)]
    );
    // A part that was never uploaded is refused and changes nothing.
    assert!(matches!(
        append(&c, "big", 9),
        Err(CatalogError::NoSuchUpload(_))
    ));
    assert_eq!(c.content_parts(&growing_list()).unwrap().len(), 3);

    // Completion as an ordinary upload: the list's rows become a list of their own, the growing list is released.
    let list = part_list(&[(1, 1), (2, 2), (3, 1)]);
    c.complete_upload("u1", &list_object(&list), &list, 40)
        .unwrap();
    assert_eq!(
        c.get_object("b", "big").unwrap().unwrap().0.content,
        list.id
    );
    assert_eq!(c.gc_candidates(u64::MAX, 10).unwrap(), vec![growing_list()]);
    c.gc_content(&growing_list()).unwrap();
    assert_eq!(refcount(&c, 1), 2);
    assert_eq!(refcount(&c, 2), 1);
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn a_growing_object_deleted_or_replaced_takes_no_more_parts(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    upload(&c, "u1");
    assert!(matches!(
        c.begin_growing(
            &ObjectRecord {
                bucket: "nope".into(),
                ..growing_object("k")
            },
            1
        ),
        Err(CatalogError::NoSuchBucket(_))
    ));
    assert!(c.begin_growing(&growing_object("big"), 20).unwrap());
    put_part(&c, "u1", 1, 1).unwrap();
    put(&c, "b", "big", 7); // an ordinary PUT replaces the growing object
    assert_eq!(append(&c, "big", 1).unwrap(), None);
    assert!(c.delete_object("b", "big", 25).unwrap());
    assert_eq!(append(&c, "big", 1).unwrap(), None);
    assert_eq!(refcount(&c, 1), 1, "only the upload's part row names it");
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

both!(
    buckets_are_created_listed_and_deleted_only_when_empty,
    put_round_trips_every_field,
    identical_content_is_stored_once_and_refcounted,
    overwriting_a_key_moves_the_reference,
    copy_adds_a_reference_and_copy_onto_itself_keeps_the_content,
    listing_uses_prefix_delimiter_and_pages,
    extents_are_allocated_without_overlap_and_freed_ranges_are_reused,
    a_pack_extent_is_freed_only_when_its_last_entry_dies,
    eviction_candidates_are_persisted_contents_in_lru_order,
    hot_contents_are_never_evicted_and_restores_neither_unpin_them_nor_lose_their_own_pin,
    uploaded_parts_are_referenced_contents_and_replacing_or_aborting_drops_the_references,
    completing_an_upload_makes_its_object_a_list_of_the_chosen_parts_in_one_transaction,
    a_completion_is_remembered_with_its_parts_checksums_and_forgotten_after_a_week,
    a_completion_naming_a_replaced_part_changes_nothing,
    collecting_a_part_list_releases_its_parts_which_are_collected_after_it,
    a_small_content_is_cached_inline_in_the_put_transaction_and_leaves_with_eviction_or_gc,
    history_keeps_the_newest_samples_and_returns_them_in_order,
    a_webhook_is_marked_delivered_exactly_once,
    a_growing_object_gains_one_part_per_transaction_and_completes_into_an_ordinary_list,
    a_growing_object_deleted_or_replaced_takes_no_more_parts,
);
