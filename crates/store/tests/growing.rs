//! Growing objects: readable up to their last durable point while they grow, found again after a restart with
//! exactly the pieces committed, and ordinary immutable objects once finished.

mod common;

use common::*;
use permafrost_store::*;

fn meta(n: u32) -> Vec<(String, String)> {
    vec![("pieces".into(), n.to_string())]
}

fn write_piece(object: &GrowingObject, body: &[u8]) -> SealedPiece {
    let mut piece = object.piece().unwrap();
    for chunk in body.chunks(100_000) {
        piece.write(chunk).unwrap();
    }
    piece.seal().unwrap()
}

#[test]
fn a_growing_object_is_readable_up_to_its_last_durable_point_and_exact_when_finished() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("vlbi", BucketSettings::default())
        .unwrap();
    let options = GrowingOptions {
        user_metadata: meta(0),
        content_type: Some("application/octet-stream".into()),
        compression: Some(Compression::None),
    };
    let object = store
        .begin_growing("vlbi", "r1/ef/no0001.vdif", options.clone())
        .unwrap();
    // Visible and empty at once; a second start on the key is refused.
    assert_eq!(get(&store, "vlbi", "r1/ef/no0001.vdif"), b"");
    let again = store
        .begin_growing("vlbi", "r1/ef/no0001.vdif", options)
        .err()
        .unwrap();
    assert!(again.to_string().contains("exists already"), "{again}");

    let pieces: Vec<Vec<u8>> = (0..4)
        .map(|i| data(i, 1_000_000 + 4099 * i as usize, false))
        .collect();
    let mut whole = Vec::new();
    for (i, body) in pieces.iter().enumerate() {
        let n = i as u32 + 1;
        // Written and sealed but not appended: readers do not see it yet.
        let sealed = write_piece(&object, body);
        assert_eq!(
            store
                .head_object("vlbi", "r1/ef/no0001.vdif")
                .unwrap()
                .size_bytes,
            whole.len() as u64
        );
        let len = object.append(sealed, meta(n)).unwrap();
        whole.extend_from_slice(body);
        assert_eq!(len, whole.len() as u64);
        let info = store.head_object("vlbi", "r1/ef/no0001.vdif").unwrap();
        assert_eq!(info.size_bytes, whole.len() as u64);
        assert!(info.etag.ends_with(&format!("-{n}\"")), "{}", info.etag);
        assert_eq!(info.user_metadata, meta(n));
        assert_eq!(get(&store, "vlbi", "r1/ef/no0001.vdif"), whole);
        // A range across the last two pieces.
        let at = whole.len() as u64 - body.len() as u64;
        if at > 0 {
            let range = ByteRange::FromTo(at - 5, at + 5);
            assert_eq!(
                get_range(&store, "vlbi", "r1/ef/no0001.vdif", range),
                whole[at as usize - 5..=at as usize + 5]
            );
        }
    }
    // The cache drains while it grows: persisted pieces read back from the grid.
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    assert_eq!(get(&store, "vlbi", "r1/ef/no0001.vdif"), whole);

    let info = object
        .finish(vec![("state".into(), "complete".into())])
        .unwrap();
    assert_eq!(info.size_bytes, whole.len() as u64);
    assert!(info.etag.ends_with("-4\""), "{}", info.etag);
    assert!(
        object.piece().is_err(),
        "a finished object takes no more pieces"
    );
    assert_eq!(get(&store, "vlbi", "r1/ef/no0001.vdif"), whole);
    assert!(store.growing_objects().unwrap().is_empty());
    // The growing list is collected; the pieces stay, named by the final list.
    store.collect_garbage(true).unwrap();
    store.persist_now().unwrap();
    store.evict_cache().unwrap();
    assert_eq!(get(&store, "vlbi", "r1/ef/no0001.vdif"), whole);
    assert_eq!(
        store.verify(&mut |_| {}).unwrap().errors,
        Vec::<String>::new()
    );
}

#[test]
fn after_a_restart_a_growing_object_has_exactly_its_appended_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let first = data(1, 700_000, false);
    let second = data(2, 300_000, false);
    {
        let store = open(dir.path());
        store
            .create_bucket("vlbi", BucketSettings::default())
            .unwrap();
        let object = store
            .begin_growing("vlbi", "scan", GrowingOptions::default())
            .unwrap();
        let sealed = write_piece(&object, &first);
        object.append(sealed, meta(1)).unwrap();
        // Sealed, never appended: not acknowledged to the object.
        let _orphan = write_piece(&object, &second);
        // Begun and never sealed.
        let mut open_piece = object.piece().unwrap();
        open_piece.write(&second).unwrap();
        std::mem::forget(open_piece); // as a crash would leave it
        std::mem::forget(store);
    }
    let store = open(dir.path());
    let found = store.growing_objects().unwrap();
    assert_eq!(found.len(), 1);
    let object = &found[0];
    assert_eq!((object.bucket(), object.key()), ("vlbi", "scan"));
    assert_eq!(object.pieces(), 1);
    assert_eq!(object.len_bytes(), first.len() as u64);
    assert_eq!(object.user_metadata(), meta(1));
    assert_eq!(get(&store, "vlbi", "scan"), first);
    let info = object.finish(meta(99)).unwrap();
    assert_eq!(info.size_bytes, first.len() as u64);
    assert_eq!(info.user_metadata, meta(99));
    assert_eq!(get(&store, "vlbi", "scan"), first);
    assert!(store.growing_objects().unwrap().is_empty());
}

#[test]
fn an_empty_growing_object_finishes_as_an_empty_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("vlbi", BucketSettings::default())
        .unwrap();
    let object = store
        .begin_growing("vlbi", "quiet", GrowingOptions::default())
        .unwrap();
    store.persist_now().unwrap();
    let info = object.finish(meta(0)).unwrap();
    assert_eq!(info.size_bytes, 0);
    assert_eq!(get(&store, "vlbi", "quiet"), b"");
    store.persist_now().unwrap();
    assert_eq!(
        store.head_object("vlbi", "quiet").unwrap().state,
        ContentState::Persisted
    );
}
