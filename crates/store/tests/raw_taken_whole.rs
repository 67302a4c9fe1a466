//! A persisted object of incompressible bytes (stored raw) read from the grid as the HTTP body reads it: slices
//! of the engine's verified chunks taken whole (`ObjectReader::take_block`, no copy), mixed with copied reads
//! of odd sizes. The bytes are exact, in order, each once; a byte changed on the grid behind the engine still
//! fails the read at its end check, never a clean end; ranged reads are unchanged.

mod common;

use std::io::Read;

use common::*;
use permafrost_store::*;

/// Read `reader` to its end, alternating between blocks taken whole (at most the next of `takes` bytes) and
/// copied reads (the next of `copies` bytes). The bytes or the first error, and how many blocks were taken.
fn read_mixed(
    reader: &mut ObjectReader,
    takes: &[usize],
    copies: &[usize],
) -> (std::io::Result<Vec<u8>>, usize) {
    let (mut out, mut taken) = (Vec::new(), 0);
    for round in 0.. {
        let max = takes[round % takes.len()];
        match reader.take_block(max) {
            Ok(Some(block)) => {
                assert!(
                    !block.is_empty() && block.len() <= max,
                    "{} bytes taken for at most {max}",
                    block.len()
                );
                taken += 1;
                out.extend_from_slice(&block);
            }
            Ok(None) => {}
            Err(e) => return (Err(e), taken),
        }
        let mut piece = vec![0u8; copies[round % copies.len()]];
        match reader.read(&mut piece) {
            Ok(0) => return (Ok(out), taken),
            Ok(n) => out.extend_from_slice(&piece[..n]),
            Err(e) => return (Err(e), taken),
        }
    }
    unreachable!()
}

#[test]
fn raw_grid_reads_hand_over_verified_chunks_and_keep_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_bucket("raw", BucketSettings::default())
        .unwrap();
    // Four parts of odd lengths (segments end inside engine chunks) and one object put whole.
    let parts: Vec<Vec<u8>> = (0..4u64)
        .map(|i| data(70 + i, (9 << 20) + i as usize * 4099 + 17, false))
        .collect();
    let whole = parts.concat();
    let id = store
        .create_multipart("raw", "parts", PutOptions::default())
        .unwrap();
    let mut etags = Vec::new();
    for (n, part) in (1u32..).zip(&parts) {
        let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
        h.write(part).unwrap();
        etags.push((n, h.finish().unwrap().etag));
    }
    let info = store.complete_multipart(&id, &etags).unwrap();
    let single = data(80, (5 << 20) + 333, false);
    store
        .put_object("raw", "single", PutOptions::default(), &single)
        .unwrap();
    store.persist_now().unwrap();
    assert!(info.stored_bytes >= info.size_bytes, "stored raw: {info:?}");

    let patterns: [(&[usize], &[usize]); 3] = [
        (&[1 << 20], &[256 << 10]),
        (&[usize::MAX], &[1]),
        (&[3001, 1 << 20, 77], &[4096, 12345, 1]),
    ];
    for (key, expected) in [("parts", &whole), ("single", &single)] {
        for (takes, copies) in patterns {
            store.evict_cache().unwrap();
            let (_, mut reader) = store.open_object("raw", key, None, None).unwrap();
            let (bytes, taken) = read_mixed(&mut reader, takes, copies);
            let bytes = bytes.unwrap();
            assert!(
                bytes.len() == expected.len() && bytes == *expected,
                "{key}, takes {takes:?}, copies {copies:?}: {} bytes, {taken} taken",
                bytes.len()
            );
            assert!(
                taken * 4 >= expected.len() >> 20,
                "{key}, takes {takes:?}: only {taken} blocks taken whole"
            );
            assert_eq!(reader.read(&mut [0u8; 8]).unwrap(), 0, "{key}: ended");
        }
    }
    // A range is read as before (by copy), across a part boundary.
    store.evict_cache().unwrap();
    let from = parts[0].len() as u64 - 5000;
    assert!(
        get_range(
            &store,
            "raw",
            "parts",
            ByteRange::FromTo(from, from + 70_000)
        ) == whole[from as usize..from as usize + 70_001]
    );

    // A byte of the third part changed on the grid behind the engine: the read fails with InvalidData (the
    // object's end check; blocks are hashed before they are handed over), whichever way it is read.
    let (bucket, at) = find_on_grid(&store, &parts[2][1 << 20..(1 << 20) + 64]);
    flip_on_grid(&store, bucket, at + 10, 0x20);
    for (takes, copies) in patterns {
        store.evict_cache().unwrap();
        let (_, mut reader) = store.open_object("raw", "parts", None, None).unwrap();
        let (result, taken) = read_mixed(&mut reader, takes, copies);
        let err = result.expect_err("a changed byte never ends cleanly");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidData,
            "takes {takes:?}, {taken} taken: {err}"
        );
        assert!(
            reader.read(&mut [0u8; 16]).is_err(),
            "every later read fails"
        );
    }
    flip_on_grid(&store, bucket, at + 10, 0x20);
    store.evict_cache().unwrap();
    assert!(get(&store, "raw", "parts") == whole, "repaired");
    store.close().unwrap();
}
