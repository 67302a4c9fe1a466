//! "Persisted" is always true: every version of every object — current, superseded, hidden under a delete
//! marker, locked — every part list with its parts, every copy and every growing object's pieces reach the grid
//! in one persist run, read back byte-exact from the grid alone, and the check of the catalog's claims against
//! the grid finds no false claim, until one is made false on purpose.

mod common;

use std::collections::BTreeMap;
use std::io::Read;

use common::*;
use permafrost_store::*;

/// `(bucket, key, version id)` → the bytes that version holds.
type Expected = BTreeMap<(String, String, String), Vec<u8>>;

fn put_version(store: &Store, expected: &mut Expected, bucket: &str, key: &str, body: Vec<u8>) {
    let info = put(store, bucket, key, &body);
    assert_ne!(info.version_id, NULL_VERSION, "{bucket} is versioned");
    expected.insert((bucket.into(), key.into(), info.version_id), body);
}

fn multipart(store: &Store, expected: &mut Expected, bucket: &str, key: &str, parts: &[Vec<u8>]) {
    let id = store
        .create_multipart(bucket, key, PutOptions::default())
        .unwrap();
    let mut etags = Vec::new();
    for (n, part) in (1u32..).zip(parts) {
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        h.write(part).unwrap();
        etags.push((n, h.finish().unwrap().etag));
    }
    let info = store.complete_multipart(&id, &etags).unwrap();
    expected.insert((bucket.into(), key.into(), info.version_id), parts.concat());
}

fn versioned(store: &Store, bucket: &str, lock: bool) {
    store
        .create_bucket(bucket, BucketSettings::default())
        .unwrap();
    store
        .set_bucket_archive(
            bucket,
            BucketArchive {
                versioning: Versioning::Enabled,
                object_lock: lock,
                default_retention: lock.then_some(DefaultRetention {
                    mode: LockMode::Governance,
                    days: Some(1),
                    years: None,
                }),
                ..Default::default()
            },
        )
        .unwrap();
}

/// What the test stores: in a versioned bucket and in an Object Lock bucket, versions superseded and hidden
/// under delete markers before any persistence runs, large (own extents) and small (packed) and empty ones,
/// multipart objects superseded, copies of noncurrent versions, and a growing object finished and superseded.
fn fill(store: &Store) -> Expected {
    let mut expected = Expected::new();
    for (bucket, lock, seed) in [("versions", false, 0), ("locked", true, 100)] {
        versioned(store, bucket, lock);
        put_version(
            store,
            &mut expected,
            bucket,
            "k",
            data(seed + 1, 300_000, false),
        );
        put_version(store, &mut expected, bucket, "k", data(seed + 2, 700, true));
        put_version(
            store,
            &mut expected,
            bucket,
            "k",
            data(seed + 3, 2 << 20, true),
        );
        put_version(
            store,
            &mut expected,
            bucket,
            "k2",
            data(seed + 4, 1 << 20, false),
        );
        put_version(
            store,
            &mut expected,
            bucket,
            "k2",
            data(seed + 5, 10, false),
        );
        let marker = store.delete_version(bucket, "k2", None, false).unwrap();
        assert!(marker.delete_marker, "{marker:?}");
        put_version(store, &mut expected, bucket, "empty", Vec::new());
        put_version(
            store,
            &mut expected,
            bucket,
            "empty",
            data(seed + 6, 5, false),
        );
        let parts = [
            data(seed + 7, 5 << 20, false),
            data(seed + 8, 100_000, true),
        ];
        multipart(store, &mut expected, bucket, "mp", &parts);
        put_version(
            store,
            &mut expected,
            bucket,
            "mp",
            data(seed + 9, 1000, false),
        );
        let mp = parts.concat();
        let noncurrent = expected
            .iter()
            .find(|((b, k, _), body)| b == bucket && k == "mp" && **body == mp)
            .map(|((_, _, v), _)| v.clone())
            .unwrap();
        // A copy of the superseded multipart version, superseded in turn, then hidden.
        let copy = store
            .copy_version(bucket, "mp", Some(&noncurrent), bucket, "copy", None, None)
            .unwrap();
        expected.insert((bucket.into(), "copy".into(), copy.version_id), mp);
        put_version(
            store,
            &mut expected,
            bucket,
            "copy",
            data(seed + 10, 20, false),
        );
        store.delete_version(bucket, "copy", None, false).unwrap();
    }
    // A growing object, finished and then superseded.
    let growing = store
        .begin_growing("versions", "scan", GrowingOptions::default())
        .unwrap();
    let mut whole = Vec::new();
    for i in 0..2 {
        let body = data(20 + i, 600_000, false);
        let mut piece = growing.piece().unwrap();
        piece.write(&body).unwrap();
        growing.append(piece.seal().unwrap(), Vec::new()).unwrap();
        whole.extend_from_slice(&body);
    }
    // Finishing adds a version: the growing one stays, noncurrent, its list frozen with the same bytes.
    let grown = store.head_object("versions", "scan").unwrap().version_id;
    let finished = growing.finish(Vec::new()).unwrap();
    assert_ne!(grown, finished.version_id);
    expected.insert(("versions".into(), "scan".into(), grown), whole.clone());
    expected.insert(
        ("versions".into(), "scan".into(), finished.version_id),
        whole,
    );
    put_version(
        store,
        &mut expected,
        "versions",
        "scan",
        data(23, 100, false),
    );
    expected
}

fn read_version(store: &Store, (bucket, key, version): &(String, String, String)) -> Vec<u8> {
    let (_, mut reader) = store
        .open_version(bucket, key, Some(version), None, None)
        .unwrap_or_else(|e| panic!("{bucket}/{key} version {version}: {e}"));
    let mut out = Vec::new();
    reader
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{bucket}/{key} version {version}: {e}"));
    out
}

/// The versions whose HEAD does not say persisted.
fn not_persisted(store: &Store, expected: &Expected) -> Vec<String> {
    expected
        .keys()
        .filter_map(|(bucket, key, version)| {
            let info = store.head_version(bucket, key, Some(version)).unwrap();
            (info.state != ContentState::Persisted)
                .then(|| format!("{bucket}/{key} version {version}: {:?}", info.state))
        })
        .collect()
}

#[test]
fn every_version_is_persisted_and_reads_back_from_the_grid_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let expected = fill(&store);
    assert!(expected.len() >= 20, "{}", expected.len());
    // Nothing is persisted yet: a wait that covers every version says so at its first.
    assert_eq!(
        store
            .wait_versions_persisted("versions", "", None, std::time::Duration::ZERO)
            .unwrap(),
        (1, false)
    );
    store.persist_now().unwrap();
    assert_eq!(not_persisted(&store, &expected), Vec::<String>::new());
    // Every version, every prefix: the wait covers noncurrent versions too.
    for bucket in ["versions", "locked"] {
        let (versions, persisted) = store
            .wait_versions_persisted(bucket, "", None, std::time::Duration::ZERO)
            .unwrap();
        assert!(persisted, "{bucket}");
        assert_eq!(
            versions as usize,
            expected.keys().filter(|(b, _, _)| b == bucket).count(),
            "{bucket}"
        );
    }
    // One key: its three versions, the current one and both superseded.
    assert_eq!(
        store
            .wait_versions_persisted("versions", "", Some("k"), std::time::Duration::ZERO)
            .unwrap(),
        (3, true)
    );
    let report = store.verify_persisted(&mut |_| {}).unwrap();
    assert_eq!(
        (report.false_claims_total, report.not_persisted_total),
        (0, 0),
        "{report:#?}"
    );
    assert_eq!(report.versions_checked as usize, expected.len());
    assert!(
        report.contents_checked > 0 && report.bytes_checked > 0,
        "{report:?}"
    );

    // Evict, close, wipe the cache, reopen: every version comes from the grid, byte-exact.
    store.evict_cache().unwrap();
    store.close().unwrap();
    let contents = dir.path().join("cache/contents");
    for entry in std::fs::read_dir(&contents).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    let store = open(dir.path());
    for (version, body) in &expected {
        let info = store
            .head_version(&version.0, &version.1, Some(&version.2))
            .unwrap();
        assert!(!info.in_cache, "{version:?} is still cached");
        assert!(
            read_version(&store, version) == *body,
            "{version:?} differs"
        );
    }
    store.close().unwrap();
}

#[test]
fn a_claim_made_false_is_listed_with_its_version_and_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut expected = fill(&store);
    store.persist_now().unwrap();
    let report = store.verify_persisted(&mut |_| {}).unwrap();
    assert_eq!(report.false_claims_total, 0, "{report:#?}");

    // The grid now holds other bytes than the superseded version's first extent (written through the engine, so
    // parity and IDR agree with them: only the claim is false).
    let superseded = ("versions".to_string(), "k".to_string(), {
        let body = data(1, 300_000, false);
        expected
            .iter()
            .find(|(_, b)| **b == body)
            .map(|((_, _, v), _)| v.clone())
            .unwrap()
    });
    let info = store
        .head_version(&superseded.0, &superseded.1, Some(&superseded.2))
        .unwrap();
    let (_, content) = store
        .catalog()
        .get_object_version(&superseded.0, &superseded.1, &superseded.2)
        .unwrap()
        .unwrap();
    let segments = store.catalog().segments(&content.unwrap().id).unwrap();
    let extent = &segments[0].extent;
    let engine = store.engine();
    let at = extent.offset + 4096;
    let mut promise = engine
        .write(extent.grid_bucket as usize, at, 4096, WriteMode::Serialized)
        .unwrap();
    promise.append(&[0u8; 4096]).unwrap();
    promise.commit().unwrap();
    // The cache still holds the right bytes: the check reads the grid only.
    assert!(read_version(&store, &superseded) == expected.remove(&superseded).unwrap());

    let report = store.verify_persisted(&mut |_| {}).unwrap();
    assert_eq!(report.false_claims_total, 1, "{report:#?}");
    let finding = &report.false_claims[0];
    assert_eq!(
        (&finding.bucket, &finding.key, finding.version_id.as_ref()),
        (&superseded.0, &superseded.1, Some(&superseded.2)),
        "{finding:?}"
    );
    assert_eq!(finding.content_id, info.content_id);
    assert!(finding.problem.contains("grid"), "{finding}");
    assert_eq!(report.not_persisted_total, 0, "{report:#?}");
}

#[test]
fn the_watchdog_persists_every_version_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config();
    config.watchdog.max_age_ms = 0;
    let store = Store::open(dir.path(), config).unwrap();
    let expected = fill(&store);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = not_persisted(&store, &expected);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the watchdog left versions unpersisted: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let report = store.verify_persisted(&mut |_| {}).unwrap();
    assert_eq!(
        (report.false_claims_total, report.not_persisted_total),
        (0, 0),
        "{report:#?}"
    );
    store.close().unwrap();
}
