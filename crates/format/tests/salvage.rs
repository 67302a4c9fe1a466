//! The scanner and salvage: rebuilding objects from a raw bucket image.

use std::collections::BTreeMap;
use std::io::Cursor;

use permafrost_format::*;
use rand::{RngCore, SeedableRng};

fn manifest(
    key: &str,
    stored_form: StoredForm,
    encoding: Algorithm,
    logical: &[u8],
    stored_len: u64,
    hashed: &[u8],
    t: u64,
) -> Manifest {
    Manifest {
        bucket: "sci".into(),
        key: key.into(),
        user_metadata: BTreeMap::from([("run".to_string(), "7".to_string())]),
        content_type: None,
        content_encoding: encoding,
        stored_form,
        logical_len: logical.len() as u64,
        stored_len,
        blake3: *blake3::hash(hashed).as_bytes(),
        created_unix_ms: t,
        dataset: "sci".into(),
        role: Role::Object,
    }
}

fn garbage(image: &mut Vec<u8>, blocks: usize, seed: u64) {
    let mut g = vec![0u8; blocks * 4096];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut g);
    image.extend(g);
}

struct Image {
    bytes: Vec<u8>,
    expected: BTreeMap<String, Vec<u8>>,
    corrupted_offset: u64,
}

fn build_image() -> Image {
    let mut image = Vec::new();
    let mut expected = BTreeMap::new();
    garbage(&mut image, 3, 1);

    // A chunked content spread over 3 extents.
    let logical: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i / 300).to_le_bytes())
        .collect();
    let (index, stored) = encode_chunks(&logical, Algorithm::Zstd, 16 << 10).unwrap();
    let m = manifest(
        "runs/big.bin",
        StoredForm::Chunked(index),
        Algorithm::None,
        &logical,
        stored.len() as u64,
        &logical,
        1,
    );
    let record = m.encode().unwrap();
    let plan = plan_content_extents(
        record.len(),
        stored.len() as u64,
        (stored.len() as u32 / 2) + 100,
    )
    .unwrap();
    assert_eq!(plan.len(), 3);
    let mut extents = Vec::new();
    for e in &plan {
        let mut payload = if e.extent_id == 0 {
            record.clone()
        } else {
            Vec::new()
        };
        payload.extend_from_slice(&stored[e.stored_offset as usize..][..e.stored_len as usize]);
        extents.push(extent_to_vec(0xB16, 0, e.extent_id, &payload).unwrap());
    }
    // Out of order on disk, with garbage between.
    image.extend(&extents[2]);
    garbage(&mut image, 1, 2);
    image.extend(&extents[0]);
    image.extend(&extents[1]);
    expected.insert("sci/runs/big.bin".to_string(), logical);

    // A pack of small objects, one raw, one as sent (zstd), one with a hostile key.
    let mut pack = PackWriter::new(Vec::new(), 1 << 20).unwrap();
    let small = b"tiny object".to_vec();
    pack.append(
        &manifest(
            "runs/a.txt",
            StoredForm::Raw,
            Algorithm::None,
            &small,
            small.len() as u64,
            &small,
            2,
        ),
        &small[..],
    )
    .unwrap();
    let sent = zstd::bulk::compress(&[42u8; 5000], 3).unwrap();
    let mut m = manifest(
        "runs/b.zst",
        StoredForm::AsSent { frames: None },
        Algorithm::Zstd,
        &[42u8; 5000],
        sent.len() as u64,
        &sent,
        3,
    );
    m.logical_len = 5000;
    pack.append(&m, &sent[..]).unwrap();
    pack.append(
        &manifest(
            "../../escape",
            StoredForm::Raw,
            Algorithm::None,
            b"x",
            1,
            b"x",
            4,
        ),
        &b"x"[..],
    )
    .unwrap();
    // An older version of a.txt, superseded by the newer one above.
    pack.append(
        &manifest(
            "runs/a.txt",
            StoredForm::Raw,
            Algorithm::None,
            b"old",
            3,
            b"old",
            1,
        ),
        &b"old"[..],
    )
    .unwrap();
    let (_, payload) = pack.finish().unwrap();
    image.extend(extent_to_vec(0xFACC, 0, 0, &payload).unwrap());
    expected.insert("sci/runs/a.txt".to_string(), small);
    expected.insert("sci/runs/b.zst".to_string(), sent);
    expected.insert("sci/%2E%2E/%2E%2E/escape".to_string(), b"x".to_vec());

    // A content whose single extent is corrupted: reported, not fatal.
    garbage(&mut image, 2, 3);
    let corrupted_offset = image.len() as u64;
    let lost = b"this object is damaged".to_vec();
    let mut payload = manifest(
        "runs/lost",
        StoredForm::Raw,
        Algorithm::None,
        &lost,
        lost.len() as u64,
        &lost,
        5,
    )
    .encode()
    .unwrap();
    payload.extend(&lost);
    let mut bad = extent_to_vec(0xDEAD, 0, 0, &payload).unwrap();
    bad[100] ^= 1;
    image.extend(bad);
    garbage(&mut image, 1, 4);
    Image {
        bytes: image,
        expected,
        corrupted_offset,
    }
}

#[test]
fn the_scanner_finds_every_extent_between_garbage_and_reports_the_corrupted_one() {
    let image = build_image();
    let results: Vec<_> =
        scan_extents(Cursor::new(&image.bytes), image.bytes.len() as u64).collect();
    let found: Vec<FoundExtent> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    let ids: Vec<(u128, u16)> = found
        .iter()
        .map(|f| (f.header.object_id, f.header.extent_id))
        .collect();
    assert_eq!(ids, vec![(0xB16, 2), (0xB16, 0), (0xB16, 1), (0xFACC, 0)]);
    for f in &found {
        assert_eq!(f.offset_bytes % 4096, 0);
        verify_extent(&image.bytes[f.offset_bytes as usize..]).unwrap();
    }
    let damaged: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert!(
        matches!(damaged[0], FormatError::DamagedExtent { offset_bytes, .. } if *offset_bytes == image.corrupted_offset)
    );
}

#[test]
fn salvage_rebuilds_every_intact_object_byte_exact() {
    let image = build_image();
    let out = tempfile::tempdir().unwrap();
    let mut calls = 0;
    let report = salvage_objects(
        Cursor::new(&image.bytes),
        image.bytes.len() as u64,
        out.path(),
        &mut |_| calls += 1,
    )
    .unwrap();
    assert!(calls > 0);
    assert_eq!(report.objects_recovered, 4, "{report:?}");
    assert_eq!(report.extents_found, 4);
    assert_eq!(report.damaged_extents.len(), 1);
    assert_eq!(report.superseded_objects, 1);
    assert!(report.incomplete_objects.is_empty(), "{report:?}");
    for (path, bytes) in &image.expected {
        let got = std::fs::read(out.path().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            &got == bytes,
            "{path}: {} bytes, expected {}",
            got.len(),
            bytes.len()
        );
        let sidecar = out.path().join("_sidecars").join(format!("{path}.json"));
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&sidecar).unwrap()).unwrap();
        assert_eq!(meta["bucket"], "sci");
        assert_eq!(meta["blake3"], blake3::hash(bytes).to_hex().to_string());
    }
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.path().join("_sidecars/sci/runs/b.zst.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["stored_form"], "as_sent");
    assert_eq!(meta["content_encoding"], "zstd");
    assert!(!out.path().parent().unwrap().join("escape").exists());
}

#[test]
fn salvage_reports_a_content_with_a_missing_extent_as_incomplete() {
    let image = build_image();
    // Wipe extent 1 of the big object (the 3rd extent on disk: after extent 2, garbage, extent 0).
    let found: Vec<FoundExtent> = scan_extents(Cursor::new(&image.bytes), image.bytes.len() as u64)
        .filter_map(|r| r.ok())
        .collect();
    let victim = found
        .iter()
        .find(|f| f.header.object_id == 0xB16 && f.header.extent_id == 1)
        .unwrap();
    let mut bytes = image.bytes.clone();
    bytes[victim.offset_bytes as usize..][..4].copy_from_slice(b"XXXX");
    let out = tempfile::tempdir().unwrap();
    let report = salvage_objects(
        Cursor::new(&bytes),
        bytes.len() as u64,
        out.path(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.objects_recovered, 3);
    assert_eq!(report.incomplete_objects.len(), 1, "{report:?}");
    assert!(
        report.incomplete_objects[0].contains("extent 1 is missing"),
        "{report:?}"
    );
    assert!(!out.path().join("sci/runs/big.bin").exists());
}

/// An image holding a part-list object: part 0 chunked in an extent of its own, part 1 raw in a pack (both with
/// role `Part`), the list in the same pack; plus a `Part` content no list names.
fn part_list_image() -> (Vec<u8>, Vec<u8>) {
    let mut image = Vec::new();
    garbage(&mut image, 2, 7);
    let first: Vec<u8> = (0..300_000u32).map(|i| (i / 7) as u8).collect();
    let mut second = vec![0u8; 70_000];
    rand::rngs::StdRng::seed_from_u64(9).fill_bytes(&mut second);
    let part = |m: Manifest| Manifest {
        role: Role::Part,
        ..m
    };
    let (index, stored) = encode_chunks(&first, Algorithm::Zstd, 64 << 10).unwrap();
    let head = part(manifest(
        "runs/joined",
        StoredForm::Chunked(index),
        Algorithm::None,
        &first,
        stored.len() as u64,
        &first,
        1,
    ));
    let mut payload = head.encode().unwrap();
    payload.extend(&stored);
    let object_id = u128::from_le_bytes(blake3::hash(&first).as_bytes()[..16].try_into().unwrap());
    image.extend(extent_to_vec(object_id, 0, 0, &payload).unwrap());
    garbage(&mut image, 1, 8);
    let parts = vec![
        PartRef {
            blake3: *blake3::hash(&first).as_bytes(),
            encoding: Algorithm::None,
            logical_len: first.len() as u64,
        },
        PartRef {
            blake3: *blake3::hash(&second).as_bytes(),
            encoding: Algorithm::None,
            logical_len: second.len() as u64,
        },
    ];
    let mut list = manifest(
        "runs/joined",
        StoredForm::Parts(parts.clone()),
        Algorithm::None,
        &[],
        0,
        &[],
        3,
    );
    list.logical_len = (first.len() + second.len()) as u64;
    list.blake3 = part_list_hash(&parts);
    let mut pack = PackWriter::new(Vec::new(), 1 << 20).unwrap();
    pack.append(
        &part(manifest(
            "runs/joined",
            StoredForm::Raw,
            Algorithm::None,
            &second,
            second.len() as u64,
            &second,
            2,
        )),
        &second[..],
    )
    .unwrap();
    pack.append(&list, &[][..]).unwrap();
    let stray = b"a part of an upload never completed".to_vec();
    pack.append(
        &part(manifest(
            "runs/abandoned",
            StoredForm::Raw,
            Algorithm::None,
            &stray,
            stray.len() as u64,
            &stray,
            4,
        )),
        &stray[..],
    )
    .unwrap();
    let (_, payload) = pack.finish().unwrap();
    image.extend(extent_to_vec(0x9ACC, 0, 0, &payload).unwrap());
    garbage(&mut image, 1, 10);
    (image, [first, second].concat())
}

#[test]
fn salvage_rebuilds_a_part_list_object_from_its_parts_byte_exact() {
    let (image, whole) = part_list_image();
    let out = tempfile::tempdir().unwrap();
    let report = salvage_objects(
        Cursor::new(&image),
        image.len() as u64,
        out.path(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.objects_recovered, 1, "{report:?}");
    assert!(report.incomplete_objects.is_empty(), "{report:?}");
    assert_eq!(report.superseded_objects, 0);
    assert!(std::fs::read(out.path().join("sci/runs/joined")).unwrap() == whole);
    assert!(!out.path().join("sci/runs/abandoned").exists());
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.path().join("_sidecars/sci/runs/joined.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["stored_form"], "parts");
    assert_eq!(meta["chunks"], 2);
}

#[test]
fn salvage_reports_a_part_list_object_with_a_part_missing_and_writes_nothing_for_it() {
    let (mut image, _) = part_list_image();
    // Wipe the extent of part 0 (the first extent after two blocks of garbage).
    image[2 * 4096..][..4].copy_from_slice(b"XXXX");
    let out = tempfile::tempdir().unwrap();
    let report = salvage_objects(
        Cursor::new(&image),
        image.len() as u64,
        out.path(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.objects_recovered, 0, "{report:?}");
    assert_eq!(report.incomplete_objects.len(), 1, "{report:?}");
    assert!(
        report.incomplete_objects[0].contains("part 0"),
        "{report:?}"
    );
    assert!(!out.path().join("sci/runs/joined").exists());
}
