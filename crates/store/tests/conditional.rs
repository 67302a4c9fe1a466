//! Conditional writes through the store: a put or completion whose `WriteCondition` does not hold fails with
//! `PreconditionFailed` (or `NoSuchKey`) and leaves nothing behind: no object, no cache file, no cache space.

mod common;

use common::*;
use permafrost_store::*;

fn files_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn put_if(store: &Store, key: &str, body: &[u8], condition: WriteCondition) -> Result<ObjectInfo> {
    let mut handle = store.begin_put("cond", key, PutOptions::default())?;
    handle.set_condition(condition);
    for piece in body.chunks(1 << 20) {
        handle.write(piece)?;
    }
    handle.finish()
}

#[test]
fn a_refused_conditional_put_leaves_no_object_file_or_cache_space() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("cond", BucketSettings::default())
        .unwrap();
    let first = put_if(
        &store,
        "k",
        &data(1, 5_000_000, false),
        WriteCondition::Absent,
    )
    .unwrap();
    let used = store.status().unwrap().cache_used_bytes;
    let files = files_in(&dir.path().join("cache/contents"));
    let refused = put_if(
        &store,
        "k",
        &data(2, 5_000_000, false),
        WriteCondition::Absent,
    );
    assert!(
        matches!(&refused, Err(StoreError::PreconditionFailed(m)) if m.contains("cond/k exists")),
        "{refused:?}"
    );
    let wrong = put_if(
        &store,
        "k",
        &data(3, 5_000_000, false),
        WriteCondition::EtagMatches(vec!["\"0000\"".into()]),
    );
    assert!(
        matches!(&wrong, Err(StoreError::PreconditionFailed(_))),
        "{wrong:?}"
    );
    let missing = put_if(
        &store,
        "other",
        &data(4, 100, false),
        WriteCondition::EtagMatches(vec!["*".into()]),
    );
    assert!(
        matches!(&missing, Err(StoreError::NoSuchKey { .. })),
        "{missing:?}"
    );
    assert_eq!(
        store.status().unwrap().cache_used_bytes,
        used,
        "cache space released"
    );
    assert_eq!(files_in(&dir.path().join("cache/contents")), files);
    assert_eq!(files_in(&dir.path().join("cache/tmp")), 0);
    assert_eq!(store.head_object("cond", "k").unwrap().etag, first.etag);
    assert_eq!(get(&store, "cond", "k"), data(1, 5_000_000, false));
    // The right ETag (quoted or not) replaces it.
    let bare = first.etag.trim_matches('"').to_string();
    let second = put_if(
        &store,
        "k",
        &data(5, 1000, false),
        WriteCondition::EtagMatches(vec![bare]),
    )
    .unwrap();
    assert_eq!(store.head_object("cond", "k").unwrap().etag, second.etag);
}

#[test]
fn a_refused_conditional_completion_keeps_the_upload() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("cond", BucketSettings::default())
        .unwrap();
    put(&store, "cond", "k", b"already here");
    let upload = store
        .create_multipart("cond", "k", PutOptions::default())
        .unwrap();
    let mut part = store.upload_part(&upload, 1, Checksums::default()).unwrap();
    part.write(&data(6, 1000, false)).unwrap();
    let part = part.finish().unwrap();
    let parts = vec![(1, part.etag.clone())];
    let refused = store.complete_multipart_if(
        &upload,
        &parts,
        &CompletionChecksums::default(),
        &WriteCondition::Absent,
    );
    assert!(
        matches!(&refused, Err(StoreError::PreconditionFailed(_))),
        "{refused:?}"
    );
    assert_eq!(
        store.list_parts(&upload).unwrap().len(),
        1,
        "the upload is intact"
    );
    assert_eq!(get(&store, "cond", "k"), b"already here");
    let current = store.head_object("cond", "k").unwrap().etag;
    let done = store
        .complete_multipart_if(
            &upload,
            &parts,
            &CompletionChecksums::default(),
            &WriteCondition::EtagMatches(vec![current]),
        )
        .unwrap();
    assert!(done.etag.ends_with("-1\""), "{}", done.etag);
    assert_eq!(get(&store, "cond", "k"), data(6, 1000, false));
}
