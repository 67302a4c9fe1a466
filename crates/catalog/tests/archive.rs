//! Versions, delete markers, Object Lock, tags, lifecycle and restores, through the `Catalog` trait (so the same
//! tests can run against every backend).

use permafrost_catalog::*;

mod common;
use common::Backend;

fn open(b: Backend) -> (common::Guard, Box<dyn Catalog>) {
    let (guard, c) = common::open(b);
    (guard, Box::new(c))
}

fn cid(n: u8) -> ContentId {
    ContentId {
        hash: [n; 32],
        encoding: Encoding::Identity,
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
        content_type: None,
        user_metadata: vec![],
        checksums: vec![],
        dataset: format!("{bucket}/d"),
        version_id: String::new(),
        attributes: Default::default(),
        expires_ms: None,
    }
}

fn put_with(c: &dyn Catalog, o: &ObjectRecord, now: u64) -> Result<String> {
    c.put_object(
        o,
        &NewContent {
            id: o.content,
            logical_bytes: 100,
            stored_bytes: 100,
            stored_form: StoredForm::Raw,
            chunk_index: vec![],
            md5: [o.content.hash[0]; 16],
            cache_path: format!("contents/{}", o.content.hash[0]),
            inline: None,
        },
        now,
    )?;
    Ok(c.get_object(&o.bucket, &o.key)?.unwrap().0.version_id)
}

fn put(c: &dyn Catalog, bucket: &str, key: &str, n: u8, now: u64) -> String {
    put_with(c, &object(bucket, key, n), now).unwrap()
}

fn versioned(c: &dyn Catalog, bucket: &str, lock: bool) {
    c.create_bucket(bucket, &BucketSettings::default()).unwrap();
    c.set_bucket_archive(
        bucket,
        &BucketArchive {
            versioning: Versioning::Enabled,
            object_lock: lock,
            ..Default::default()
        },
    )
    .unwrap();
}

fn all_versions(c: &dyn Catalog, bucket: &str) -> Vec<(String, String, bool, bool)> {
    let page = c
        .list_object_versions(bucket, &VersionQuery::default())
        .unwrap();
    page.versions
        .into_iter()
        .map(|v| (v.key, v.version_id, v.is_latest, v.object.is_none()))
        .collect()
}

fn unversioned_buckets_keep_one_null_version_per_key(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    assert_eq!(put(&*c, "b", "k", 1, 10), NULL_VERSION);
    assert_eq!(put(&*c, "b", "k", 2, 11), NULL_VERSION);
    assert_eq!(
        all_versions(&*c, "b"),
        vec![("k".into(), "null".into(), true, false)]
    );
    assert_eq!(c.get_content(&cid(1)).unwrap().unwrap().refcount, 0);
    let out = c.delete_version("b", "k", None, false, 12).unwrap();
    assert_eq!(out, DeleteOutcome::default());
    assert!(c.get_object("b", "k").unwrap().is_none());
    assert!(c.check().unwrap().is_empty());
}

fn versioned_puts_keep_every_version_and_deletes_add_markers(b: Backend) {
    let (_d, c) = open(b);
    versioned(&*c, "b", false);
    let v1 = put(&*c, "b", "k", 1, 10);
    let v2 = put(&*c, "b", "k", 2, 11);
    assert_ne!(v1, v2);
    assert_ne!(v1, NULL_VERSION);
    let marker = c.delete_version("b", "k", None, false, 12).unwrap();
    assert!(marker.delete_marker);
    let m = marker.version_id.clone().unwrap();
    assert!(
        c.get_object("b", "k").unwrap().is_none(),
        "a marker hides the key"
    );
    assert!(c
        .list_objects("b", &ListQuery::default())
        .unwrap()
        .objects
        .is_empty());
    assert_eq!(
        all_versions(&*c, "b"),
        vec![
            ("k".into(), m.clone(), true, true),
            ("k".into(), v2.clone(), false, false),
            ("k".into(), v1.clone(), false, false),
        ]
    );
    // An older version stays readable by id, with its content.
    let (old, content) = c.get_object_version("b", "k", &v1).unwrap().unwrap();
    assert_eq!(old.object.unwrap().content, cid(1));
    assert_eq!(content.unwrap().refcount, 1);
    // Removing the marker brings v2 back as the current version.
    let out = c.delete_version("b", "k", Some(&m), false, 13).unwrap();
    assert!(out.delete_marker);
    assert_eq!(c.get_object("b", "k").unwrap().unwrap().0.version_id, v2);
    // Removing v2 for good makes v1 current; its content lost its last reference.
    c.delete_version("b", "k", Some(&v2), false, 14).unwrap();
    assert_eq!(c.get_object("b", "k").unwrap().unwrap().0.version_id, v1);
    assert_eq!(c.get_content(&cid(2)).unwrap().unwrap().refcount, 0);
    assert!(c.check().unwrap().is_empty());
    assert!(matches!(
        c.delete_bucket("b"),
        Err(CatalogError::BucketNotEmpty(_))
    ));
}

fn suspended_versioning_replaces_only_the_null_version(b: Backend) {
    let (_d, c) = open(b);
    versioned(&*c, "b", false);
    let v1 = put(&*c, "b", "k", 1, 10);
    c.set_bucket_archive(
        "b",
        &BucketArchive {
            versioning: Versioning::Suspended,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(put(&*c, "b", "k", 2, 11), NULL_VERSION);
    assert_eq!(put(&*c, "b", "k", 3, 12), NULL_VERSION);
    let ids: Vec<String> = all_versions(&*c, "b").into_iter().map(|v| v.1).collect();
    assert_eq!(ids, vec!["null".to_string(), v1]);
    let out = c.delete_version("b", "k", None, false, 13).unwrap();
    assert_eq!(out.version_id.as_deref(), Some(NULL_VERSION));
    assert_eq!(
        all_versions(&*c, "b").len(),
        2,
        "the null object became the null marker"
    );
    assert!(c.check().unwrap().is_empty());
}

fn version_listings_page_through_thousands_of_versions_with_markers(b: Backend) {
    let (_d, c) = open(b);
    versioned(&*c, "b", false);
    let mut expected = Vec::new();
    for k in 0..30u8 {
        let key = format!("k{k:02}");
        let mut ids = Vec::new();
        for n in 0..90u32 {
            ids.push(put(&*c, "b", &key, k, 10 + u64::from(n)));
        }
        ids.reverse();
        expected.extend(ids.into_iter().map(|id| (key.clone(), id)));
    }
    let mut seen = Vec::new();
    let mut query = VersionQuery {
        max_keys: 1000,
        ..Default::default()
    };
    let mut pages = 0;
    loop {
        let page = c.list_object_versions("b", &query).unwrap();
        pages += 1;
        seen.extend(
            page.versions
                .iter()
                .map(|v| (v.key.clone(), v.version_id.clone())),
        );
        if !page.is_truncated {
            break;
        }
        query.key_marker = page.next_key_marker;
        query.version_id_marker = page.next_version_id_marker;
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 2700);
    assert_eq!(seen, expected);
    // A delimiter rolls keys up.
    let page = c
        .list_object_versions(
            "b",
            &VersionQuery {
                delimiter: Some("0".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(page.common_prefixes.contains(&"k0".to_string()));
}

fn object_lock_decides_every_removal(b: Backend) {
    let (_d, c) = open(b);
    versioned(&*c, "b", true);
    let mut o = object("b", "gov", 1);
    o.attributes.lock.retention = Some(Retention {
        mode: LockMode::Governance,
        retain_until_ms: 1000,
    });
    let gov = put_with(&*c, &o, 10).unwrap();
    let mut o = object("b", "comp", 2);
    o.attributes.lock.retention = Some(Retention {
        mode: LockMode::Compliance,
        retain_until_ms: 1000,
    });
    let comp = put_with(&*c, &o, 10).unwrap();
    let mut o = object("b", "hold", 3);
    o.attributes.lock.legal_hold = true;
    let hold = put_with(&*c, &o, 10).unwrap();

    assert!(matches!(
        c.delete_version("b", "gov", Some(&gov), false, 20),
        Err(CatalogError::Locked(_))
    ));
    c.delete_version("b", "gov", Some(&gov), true, 20).unwrap();
    assert!(matches!(
        c.delete_version("b", "comp", Some(&comp), true, 20),
        Err(CatalogError::Locked(_))
    ));
    assert!(matches!(
        c.change_attributes(
            "b",
            "comp",
            None,
            &AttributeChange::Retention(None),
            true,
            20
        ),
        Err(CatalogError::Locked(_))
    ));
    c.delete_version("b", "comp", Some(&comp), false, 1000)
        .unwrap();
    assert!(matches!(
        c.delete_version("b", "hold", Some(&hold), true, u64::MAX / 2),
        Err(CatalogError::Locked(_))
    ));
    // Deleting without a version id only adds a marker: allowed.
    assert!(
        c.delete_version("b", "hold", None, false, 30)
            .unwrap()
            .delete_marker
    );
    c.change_attributes(
        "b",
        "hold",
        Some(&hold),
        &AttributeChange::LegalHold(false),
        false,
        31,
    )
    .unwrap();
    c.delete_version("b", "hold", Some(&hold), false, 32)
        .unwrap();
    // Versioning cannot be suspended, nor the lock removed.
    assert!(matches!(
        c.set_bucket_archive("b", &BucketArchive::default()),
        Err(CatalogError::InvalidBucketState(_))
    ));
    assert!(c.check().unwrap().is_empty());
}

fn default_retention_applies_to_new_versions_and_plain_buckets_refuse_locks(b: Backend) {
    let (_d, c) = open(b);
    versioned(&*c, "b", true);
    c.set_bucket_archive(
        "b",
        &BucketArchive {
            versioning: Versioning::Enabled,
            object_lock: true,
            default_retention: Some(DefaultRetention {
                mode: LockMode::Governance,
                days: Some(1),
                years: None,
            }),
            ..Default::default()
        },
    )
    .unwrap();
    put(&*c, "b", "k", 1, 10);
    let (o, _) = c.get_object("b", "k").unwrap().unwrap();
    assert_eq!(
        o.attributes.lock.retention,
        Some(Retention {
            mode: LockMode::Governance,
            retain_until_ms: 10 + DAY_MS
        })
    );
    c.create_bucket("plain", &BucketSettings::default())
        .unwrap();
    let mut o = object("plain", "k", 2);
    o.attributes.lock.legal_hold = true;
    assert!(matches!(
        put_with(&*c, &o, 10),
        Err(CatalogError::InvalidRequest(_))
    ));
}

fn tags_change_per_version_and_feed_lifecycle_filters(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    put(&*c, "b", "k", 1, 1000);
    c.set_bucket_archive(
        "b",
        &BucketArchive {
            lifecycle: Some(Lifecycle {
                day_ms: 1000,
                rules: vec![LifecycleRule {
                    id: "tmp".into(),
                    enabled: true,
                    filter: LifecycleFilter {
                        tags: vec![("tmp".into(), "yes".into())],
                        ..Default::default()
                    },
                    expiration_days: Some(2),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.get_object("b", "k").unwrap().unwrap().0.expires_ms, None);
    let tags = vec![("tmp".to_string(), "yes".to_string())];
    c.change_attributes(
        "b",
        "k",
        None,
        &AttributeChange::Tags(tags.clone()),
        false,
        1500,
    )
    .unwrap();
    let (v, _) = c
        .get_object_version("b", "k", NULL_VERSION)
        .unwrap()
        .unwrap();
    let o = v.object.unwrap();
    assert_eq!(o.attributes.tags, tags);
    assert_eq!(
        o.expires_ms,
        Some(3000),
        "1 ms + 2 days, rounded up to a day"
    );
    assert!(
        c.get_object("b", "k").unwrap().is_none(),
        "expired: gone for readers at once"
    );
    // Not due yet, then due: it disappears from listings and is removed by the lifecycle pass.
    assert_eq!(c.expire_objects(2999, 100).unwrap(), 0);
    assert_eq!(c.expire_objects(3000, 100).unwrap(), 1);
    assert!(c
        .list_objects("b", &ListQuery::default())
        .unwrap()
        .objects
        .is_empty());
    assert_eq!(c.get_content(&cid(1)).unwrap().unwrap().refcount, 0);
}

fn lifecycle_expires_noncurrent_versions_but_never_locked_ones(b: Backend) {
    let (_d, c) = open(b);
    versioned(&*c, "b", true);
    let mut o = object("b", "k", 1);
    o.attributes.lock.retention = Some(Retention {
        mode: LockMode::Compliance,
        retain_until_ms: 100_000,
    });
    put_with(&*c, &o, 1000).unwrap();
    put(&*c, "b", "k", 2, 1000);
    put(&*c, "b", "k", 3, 1000);
    c.set_bucket_archive(
        "b",
        &BucketArchive {
            versioning: Versioning::Enabled,
            object_lock: true,
            lifecycle: Some(Lifecycle {
                day_ms: 1000,
                rules: vec![LifecycleRule {
                    id: "old".into(),
                    enabled: true,
                    noncurrent_days: Some(1),
                    expired_object_delete_marker: true,
                    ..Default::default()
                }],
            }),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.expire_noncurrent(1500, 100).unwrap(), 0);
    assert_eq!(
        c.expire_noncurrent(2000, 100).unwrap(),
        1,
        "v2 only: v1 is locked"
    );
    assert_eq!(all_versions(&*c, "b").len(), 2);
    assert!(c.check().unwrap().is_empty());
}

fn restores_start_extend_and_pin_the_content(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    let t = now_ms();
    put(&*c, "b", "k", 1, t);
    // Days of 1000 ms: expiries are rounded up to the next whole second.
    let terms = |duration_ms, tier| RestoreTerms {
        duration_ms,
        tier,
        day_ms: 1000,
    };
    let (outcome, record) = c
        .request_restore("b", "k", None, &terms(50_000, RestoreTier::Bulk), t + 100)
        .unwrap();
    assert_eq!(outcome, RestoreOutcome::Started);
    assert_eq!(record.version_id, NULL_VERSION);
    assert_eq!(record.tier, RestoreTier::Bulk);
    // A slower or the same tier changes nothing; a faster one upgrades the pending restore.
    for (tier, outcome) in [
        (RestoreTier::Bulk, RestoreOutcome::InProgress),
        (RestoreTier::Standard, RestoreOutcome::Upgraded),
        (RestoreTier::Bulk, RestoreOutcome::InProgress),
        (RestoreTier::Expedited, RestoreOutcome::Upgraded),
        (RestoreTier::Standard, RestoreOutcome::InProgress),
    ] {
        assert_eq!(
            c.request_restore("b", "k", None, &terms(50_000, tier), t + 101)
                .unwrap()
                .0,
            outcome,
            "{tier}"
        );
    }
    let pending = c.pending_restores(10).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tier, RestoreTier::Expedited);
    assert_eq!(pending[0].requested_ms, t + 100, "an upgrade keeps its age");
    c.finish_restores(&cid(1), t + 200, 1000).unwrap();
    assert!(c.pending_restores(10).unwrap().is_empty());
    let r = c.restore_of("b", "k", NULL_VERSION).unwrap().unwrap();
    let expiry = restore_expiry_ms(t + 200, 50_000, 1000);
    assert_eq!(r.expiry_ms, Some(expiry));
    assert_eq!(expiry % 1000, 0);
    assert!(expiry > t + 50_200 && expiry <= t + 51_200);
    assert_eq!(
        c.request_restore(
            "b",
            "k",
            None,
            &terms(100_000, RestoreTier::Standard),
            t + 300
        )
        .unwrap()
        .0,
        RestoreOutcome::Extended
    );
    let extended = restore_expiry_ms(t + 300, 100_000, 1000);
    assert_eq!(
        c.get_content(&cid(1)).unwrap().unwrap().state,
        ContentState::Cached
    );
    assert_eq!(c.expire_restores(extended - 1).unwrap(), 0);
    assert_eq!(c.expire_restores(extended).unwrap(), 1);
    assert!(c.restore_of("b", "k", NULL_VERSION).unwrap().is_none());
    assert!(!c.recache_content(&cid(1), "contents/other", t).unwrap());
    assert!(matches!(
        c.request_restore("b", "nokey", None, &terms(1, RestoreTier::Standard), 1),
        Err(CatalogError::NoSuchKey { .. })
    ));
    // Many in one transaction: a version that is gone is skipped, the others start.
    put(&*c, "b", "k2", 2, t);
    let answers = c
        .request_restores(
            "b",
            &[
                ("k2".into(), NULL_VERSION.into()),
                ("gone".into(), NULL_VERSION.into()),
            ],
            &terms(1000, RestoreTier::Bulk),
            t + 400,
        )
        .unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0].as_ref().unwrap().0, RestoreOutcome::Started);
    assert!(answers[1].is_none());
    assert_eq!(c.pending_restores(10).unwrap()[0].tier, RestoreTier::Bulk);
}

#[test]
fn a_restore_expires_at_the_start_of_the_day_after_its_days_are_over() {
    // 2026-12-06 10:30 UTC, restored for 2 days: expires 2026-12-09 00:00 UTC.
    let done = 1_796_553_000_000; // 2026-12-06T10:30:00Z
    assert_eq!(
        restore_expiry_ms(done, 2 * DAY_MS, DAY_MS),
        1_796_774_400_000 // 2026-12-09T00:00:00Z
    );
    // Exactly at midnight: the following midnight.
    let midnight = 1_796_515_200_000; // 2026-12-06T00:00:00Z
    assert_eq!(
        restore_expiry_ms(midnight, DAY_MS, DAY_MS),
        midnight + 2 * DAY_MS
    );
}

fn a_bucket_with_only_uploads_in_progress_is_deleted_with_them(b: Backend) {
    let (_d, c) = open(b);
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    c.create_upload(&UploadRecord {
        upload_id: "u".into(),
        bucket: "b".into(),
        key: "k".into(),
        created_ms: 1,
        options: "{}".into(),
    })
    .unwrap();
    c.put_part(
        &PartRecord {
            upload_id: "u".into(),
            part_number: 1,
            size_bytes: 5,
            md5: [0; 16],
            content: Some(cid(9)),
            cache_path: String::new(),
            created_ms: 1,
            checksums: Vec::new(),
        },
        &NewContent {
            id: cid(9),
            logical_bytes: 5,
            stored_bytes: 5,
            stored_form: StoredForm::Raw,
            chunk_index: vec![],
            md5: [0; 16],
            cache_path: "contents/part".into(),
            inline: None,
        },
        "b/d",
    )
    .unwrap();
    c.delete_bucket("b").unwrap();
    assert_eq!(
        c.get_content(&cid(9)).unwrap().unwrap().refcount,
        0,
        "the part's content waits for garbage collection"
    );
    assert!(c.get_upload("u").unwrap().is_none());
    assert!(c.get_bucket("b").unwrap().is_none());
}

/// Whose bytes a content is, as the manifest written to the grid names it.
fn owner_key(c: &dyn Catalog, n: u8) -> Option<(String, String, String)> {
    match c.owner_of(&cid(n)).unwrap()? {
        ContentOwner::Object(o) => Some((o.bucket, o.key, o.version_id)),
        ContentOwner::Part { bucket, key, .. } => Some((bucket, key, "part".into())),
    }
}

fn every_version_owns_its_content_superseded_hidden_or_locked(b: Backend) {
    let (_d, c) = open(b);
    versioned(&*c, "b", false);
    versioned(&*c, "locked", true);
    let v1 = put(&*c, "b", "k", 1, 10);
    put(&*c, "b", "k", 2, 11);
    // Superseded: the noncurrent version names its content (the manifest gets its bucket and key).
    assert_eq!(owner_key(&*c, 1), Some(("b".into(), "k".into(), v1)));
    // Hidden under a delete marker.
    let v3 = put(&*c, "b", "k2", 3, 12);
    assert!(
        c.delete_version("b", "k2", None, false, 13)
            .unwrap()
            .delete_marker
    );
    assert_eq!(owner_key(&*c, 3), Some(("b".into(), "k2".into(), v3)));
    // Locked, then superseded and hidden.
    let locked = put(&*c, "locked", "scan", 4, 14);
    put(&*c, "locked", "scan", 5, 15);
    c.delete_version("locked", "scan", None, false, 16).unwrap();
    assert_eq!(
        owner_key(&*c, 4),
        Some(("locked".into(), "scan".into(), locked))
    );
    // The parts of a part list whose version became noncurrent belong to it.
    c.create_upload(&UploadRecord {
        upload_id: "u1".into(),
        bucket: "b".into(),
        key: "big".into(),
        created_ms: 17,
        options: "{}".into(),
    })
    .unwrap();
    for (number, n) in [(1u32, 6u8), (2, 7)] {
        c.put_part(
            &PartRecord {
                upload_id: "u1".into(),
                part_number: number,
                size_bytes: 10,
                md5: [n; 16],
                content: Some(cid(n)),
                cache_path: String::new(),
                created_ms: 17,
                checksums: vec![],
            },
            &NewContent {
                id: cid(n),
                logical_bytes: 10,
                stored_bytes: 10,
                stored_form: StoredForm::Raw,
                chunk_index: vec![],
                md5: [n; 16],
                cache_path: format!("parts/{n}"),
                inline: None,
            },
            "b/d",
        )
        .unwrap();
    }
    assert_eq!(
        owner_key(&*c, 6),
        Some(("b".into(), "big".into(), "part".into()))
    );
    let list = NewPartList {
        id: cid(8),
        logical_bytes: 20,
        md5: [8; 16],
        parts: [(1u32, 6u8), (2, 7)]
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
            .collect(),
    };
    let list_object = ObjectRecord {
        size_bytes: 20,
        ..object("b", "big", 8)
    };
    c.complete_upload("u1", &list_object, &list, 18).unwrap();
    let list_version = c.get_object("b", "big").unwrap().unwrap().0.version_id;
    put(&*c, "b", "big", 9, 19);
    assert_eq!(
        owner_key(&*c, 8),
        Some(("b".into(), "big".into(), list_version))
    );
    for n in [6, 7] {
        assert_eq!(
            owner_key(&*c, n),
            Some(("b".into(), "big".into(), "part".into()))
        );
    }
    // Everything named is waiting (nothing is persisted here): every version's content, the parts of the
    // noncurrent part list, the current version's content; one row per naming.
    let waiting = |c: &dyn Catalog| -> std::collections::BTreeSet<(u8, String, String)> {
        c.unpersisted_references(1000)
            .unwrap()
            .into_iter()
            .map(|r| {
                assert_eq!(r.content.state, ContentState::Cached);
                (
                    r.content.id.hash[0],
                    r.key,
                    r.version_id.unwrap_or_default(),
                )
            })
            .collect()
    };
    let named = waiting(&*c);
    for (n, key) in [
        (1, "k"),
        (2, "k"),
        (3, "k2"),
        (4, "scan"),
        (5, "scan"),
        (6, "big"),
        (7, "big"),
        (8, "big"),
        (9, "big"),
    ] {
        assert!(
            named.iter().any(|(m, k, _)| *m == n && k == key),
            "content {n} of {key} is not listed: {named:?}"
        );
    }
    // An upload's parts are listed with the upload.
    c.create_upload(&UploadRecord {
        upload_id: "u2".into(),
        bucket: "b".into(),
        key: "next".into(),
        created_ms: 19,
        options: "{}".into(),
    })
    .unwrap();
    c.put_part(
        &PartRecord {
            upload_id: "u2".into(),
            part_number: 1,
            size_bytes: 10,
            md5: [10; 16],
            content: Some(cid(10)),
            cache_path: String::new(),
            created_ms: 19,
            checksums: vec![],
        },
        &NewContent {
            id: cid(10),
            logical_bytes: 10,
            stored_bytes: 10,
            stored_form: StoredForm::Raw,
            chunk_index: vec![],
            md5: [10; 16],
            cache_path: "parts/10".into(),
            inline: None,
        },
        "b/d",
    )
    .unwrap();
    let upload_rows: Vec<_> = c
        .unpersisted_references(1000)
        .unwrap()
        .into_iter()
        .filter(|r| r.content.id == cid(10))
        .map(|r| (r.key, r.version_id, r.upload_id))
        .collect();
    assert_eq!(upload_rows, vec![("next".into(), None, Some("u2".into()))]);
    assert_eq!(c.unpersisted_references(2).unwrap().len(), 2);
    // A version removed for good owns nothing any more; a delete marker never does.
    c.delete_version("b", "k", Some(&owner_version(&*c, 1)), false, 20)
        .unwrap();
    assert_eq!(owner_key(&*c, 1), None);
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn owner_version(c: &dyn Catalog, n: u8) -> String {
    owner_key(c, n).unwrap().2
}

both!(
    unversioned_buckets_keep_one_null_version_per_key,
    versioned_puts_keep_every_version_and_deletes_add_markers,
    suspended_versioning_replaces_only_the_null_version,
    version_listings_page_through_thousands_of_versions_with_markers,
    object_lock_decides_every_removal,
    default_retention_applies_to_new_versions_and_plain_buckets_refuse_locks,
    tags_change_per_version_and_feed_lifecycle_filters,
    lifecycle_expires_noncurrent_versions_but_never_locked_ones,
    restores_start_extend_and_pin_the_content,
    a_bucket_with_only_uploads_in_progress_is_deleted_with_them,
    every_version_owns_its_content_superseded_hidden_or_locked,
);
