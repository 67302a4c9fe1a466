//! Conditional writes (`If-None-Match: *`, `If-Match`): the condition is checked in the write's transaction, on
//! both back ends, so a refused write changes nothing and of two racing creates exactly one wins.

use std::sync::{Arc, Barrier};

use permafrost_catalog::*;

mod common;
use common::{cid, new_content, object, Backend};

fn put_if(c: &SqlCatalog, key: &str, n: u8, condition: WriteCondition) -> Result<PutOutcome> {
    c.put_object_if(&object(key, n), &new_content(n), 10, &condition)
}

fn current_etag(c: &SqlCatalog, key: &str) -> Option<String> {
    c.get_object("b", key).unwrap().map(|(o, _)| o.etag)
}

fn refcount(c: &SqlCatalog, n: u8) -> Option<u64> {
    c.get_content(&cid(n)).unwrap().map(|r| r.refcount)
}

fn bucket(c: &SqlCatalog, versioning: Versioning) {
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    if versioning != Versioning::Unversioned {
        let archive = BucketArchive {
            versioning,
            ..Default::default()
        };
        c.set_bucket_archive("b", &archive).unwrap();
    }
}

fn if_none_match_star_creates_only_an_absent_key(b: Backend) {
    for versioning in [Versioning::Unversioned, Versioning::Enabled] {
        let (_d, c) = common::open(b);
        bucket(&c, versioning);
        put_if(&c, "k", 1, WriteCondition::Absent).unwrap();
        let refused = put_if(&c, "k", 2, WriteCondition::Absent).unwrap_err();
        assert!(
            matches!(&refused, CatalogError::PreconditionFailed(m) if m.contains("b/k exists")),
            "{refused:?}"
        );
        // Nothing of the refused write is left: the object, its content, no new version.
        assert_eq!(current_etag(&c, "k").as_deref(), Some("\"e1\""));
        assert_eq!(refcount(&c, 2), None);
        let versions = c
            .list_object_versions("b", &VersionQuery::default())
            .unwrap()
            .versions;
        assert_eq!(versions.len(), 1, "{versioning:?}: {versions:?}");
        assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
        // Deleted (a delete marker in a versioned bucket): absent again.
        c.delete_version("b", "k", None, false, 20).unwrap();
        put_if(&c, "k", 3, WriteCondition::Absent).unwrap();
        assert_eq!(current_etag(&c, "k").as_deref(), Some("\"e3\""));
    }
}

fn if_match_replaces_only_the_named_version(b: Backend) {
    let (_d, c) = common::open(b);
    bucket(&c, Versioning::Unversioned);
    let etags =
        |tags: &[&str]| WriteCondition::EtagMatches(tags.iter().map(|t| t.to_string()).collect());
    // No object: NoSuchKey, as S3 answers.
    assert!(matches!(
        put_if(&c, "k", 1, etags(&["e1"])),
        Err(CatalogError::NoSuchKey { .. })
    ));
    put_if(&c, "k", 1, WriteCondition::Always).unwrap();
    let refused = put_if(&c, "k", 2, etags(&["\"e9\""])).unwrap_err();
    assert!(
        matches!(&refused, CatalogError::PreconditionFailed(m) if m.contains("\"e1\"")),
        "{refused:?}"
    );
    assert_eq!(current_etag(&c, "k").as_deref(), Some("\"e1\""));
    assert_eq!(refcount(&c, 2), None);
    // Quoted or not, in a list, or `*`.
    put_if(&c, "k", 2, etags(&["e1"])).unwrap();
    put_if(&c, "k", 3, etags(&["\"x\"", "\"e2\""])).unwrap();
    put_if(&c, "k", 4, etags(&["*"])).unwrap();
    assert_eq!(current_etag(&c, "k").as_deref(), Some("\"e4\""));
    assert_eq!((refcount(&c, 1), refcount(&c, 4)), (Some(0), Some(1)));
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn upload(c: &SqlCatalog, id: &str, key: &str) {
    c.create_upload(&UploadRecord {
        upload_id: id.into(),
        bucket: "b".into(),
        key: key.into(),
        created_ms: 1,
        options: "{}".into(),
    })
    .unwrap();
}

/// A part list of one part, content `n` (100 bytes).
fn one_part_list(n: u8) -> NewPartList {
    let part = ContentPart {
        seq: 0,
        part: cid(n),
        logical_offset: 0,
        logical_bytes: 100,
    };
    NewPartList {
        id: ContentId {
            hash: [0xEE; 32],
            encoding: Encoding::Identity,
        },
        logical_bytes: 100,
        md5: [0xAB; 16],
        parts: vec![(1, part)],
    }
}

fn put_part(c: &SqlCatalog, upload_id: &str, n: u8) {
    let part = PartRecord {
        upload_id: upload_id.into(),
        part_number: 1,
        size_bytes: 100,
        md5: [n; 16],
        content: Some(cid(n)),
        cache_path: String::new(),
        created_ms: 1,
        checksums: Vec::new(),
    };
    c.put_part(&part, &new_content(n), "b").unwrap();
}

fn a_completion_under_if_none_match_star_is_refused_when_the_key_exists(b: Backend) {
    let (_d, c) = common::open(b);
    bucket(&c, Versioning::Unversioned);
    put_if(&c, "k", 1, WriteCondition::Always).unwrap();
    upload(&c, "u1", "k");
    put_part(&c, "u1", 5);
    let list = one_part_list(5);
    let object = ObjectRecord {
        content: list.id,
        etag: "\"list-1\"".into(),
        ..object("k", 5)
    };
    let refused = c
        .complete_upload_if("u1", &object, &list, 20, &WriteCondition::Absent)
        .unwrap_err();
    assert!(
        matches!(refused, CatalogError::PreconditionFailed(_)),
        "{refused:?}"
    );
    // The upload and its part are as they were; the object too.
    assert_eq!(c.list_parts("u1").unwrap().len(), 1);
    assert_eq!(current_etag(&c, "k").as_deref(), Some("\"e1\""));
    assert!(c.get_content(&list.id).unwrap().is_none());
    // If-Match with the current ETag completes it.
    c.complete_upload_if(
        "u1",
        &object,
        &list,
        21,
        &WriteCondition::EtagMatches(vec!["\"e1\"".into()]),
    )
    .unwrap();
    assert_eq!(current_etag(&c, "k").as_deref(), Some("\"list-1\""));
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

fn a_copy_under_a_condition_checks_the_target_key(b: Backend) {
    let (_d, c) = common::open(b);
    bucket(&c, Versioning::Unversioned);
    put_if(&c, "source", 1, WriteCondition::Always).unwrap();
    let copy = |key: &str, condition: WriteCondition| {
        c.copy_object_if("b", "source", None, &object(key, 0), 20, &condition)
    };
    copy("target", WriteCondition::Absent).unwrap();
    assert!(matches!(
        copy("target", WriteCondition::Absent),
        Err(CatalogError::PreconditionFailed(_))
    ));
    assert!(matches!(
        copy("absent", WriteCondition::EtagMatches(vec!["e1".into()])),
        Err(CatalogError::NoSuchKey { .. })
    ));
    copy("target", WriteCondition::EtagMatches(vec!["e1".into()])).unwrap();
    // The source's content: referenced by the source and the target, once each.
    assert_eq!(refcount(&c, 1), Some(2));
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
}

/// Rounds of two writers (threads) creating the same key under `If-None-Match: *`: exactly one wins each
/// round, and the key holds the winner's version.
fn of_two_racing_creates_exactly_one_wins(b: Backend) {
    for versioning in [Versioning::Unversioned, Versioning::Enabled] {
        race_rounds(b, versioning);
    }
}

fn race_rounds(b: Backend, versioning: Versioning) {
    let (_d, c) = common::open(b);
    bucket(&c, versioning);
    let c = Arc::new(c);
    for round in 0..30u8 {
        let key = format!("lock-{round}");
        let barrier = Arc::new(Barrier::new(2));
        let writers: Vec<_> = [2 * round + 10, 2 * round + 11]
            .into_iter()
            .map(|n| {
                let (c, barrier, key) = (Arc::clone(&c), Arc::clone(&barrier), key.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (n, put_if(&c, &key, n, WriteCondition::Absent))
                })
            })
            .collect();
        let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let winners: Vec<u8> = results
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "{versioning:?} round {round}: {results:?}"
        );
        for (_, r) in &results {
            if let Err(e) = r {
                assert!(
                    matches!(e, CatalogError::PreconditionFailed(_)),
                    "round {round}: {e:?}"
                );
            }
        }
        assert_eq!(
            current_etag(&c, &key),
            Some(format!("\"e{}\"", winners[0])),
            "round {round}"
        );
    }
    assert!(c.check().unwrap().is_empty(), "{:?}", c.check());
    if b == Backend::Postgres {
        eprintln!("{versioning:?}: {} serialization retries", c.retries());
    }
}

#[test]
fn write_conditions_decide_by_the_current_etag() {
    let none = WriteCondition::Absent;
    assert!(none.check("b", "k", None).is_ok());
    assert!(matches!(
        none.check("b", "k", Some("\"a\"")),
        Err(CatalogError::PreconditionFailed(_))
    ));
    let tags = WriteCondition::EtagMatches(vec!["a".into(), "W/\"c\"".into()]);
    assert!(tags.check("b", "k", Some("\"a\"")).is_ok());
    assert!(tags.check("b", "k", Some("\"c\"")).is_ok());
    assert!(matches!(
        tags.check("b", "k", Some("\"b\"")),
        Err(CatalogError::PreconditionFailed(_))
    ));
    assert!(matches!(
        tags.check("b", "k", None),
        Err(CatalogError::NoSuchKey { .. })
    ));
    assert!(WriteCondition::Always.check("b", "k", Some("x")).is_ok());
}

both!(
    if_none_match_star_creates_only_an_absent_key,
    if_match_replaces_only_the_named_version,
    a_completion_under_if_none_match_star_is_refused_when_the_key_exists,
    a_copy_under_a_condition_checks_the_target_key,
    of_two_racing_creates_exactly_one_wins,
);
