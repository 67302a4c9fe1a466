//! Extent format, manifests and packs.

use std::collections::BTreeMap;
use std::io::Cursor;

use permafrost_format::*;
use proptest::prelude::*;

pub fn manifest(key: &str, stored_form: StoredForm, logical_len: u64, stored_len: u64) -> Manifest {
    Manifest {
        bucket: "photos".into(),
        key: key.into(),
        user_metadata: BTreeMap::from([("camera".to_string(), "x100".to_string())]),
        content_type: Some("image/jpeg".into()),
        content_encoding: Algorithm::None,
        stored_form,
        logical_len,
        stored_len,
        blake3: [7; 32],
        created_unix_ms: 1_700_000_000_000,
        dataset: "photos/2024".into(),
        role: Role::Object,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn an_extent_round_trips_and_any_flipped_bit_is_detected(
        object_id in any::<u128>(), replica_id in any::<u8>(), extent_id in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..10_000),
        flip in any::<prop::sample::Index>(), bit in 0u8..8,
    ) {
        let bytes = extent_to_vec(object_id, replica_id, extent_id, &payload).unwrap();
        prop_assert_eq!(bytes.len() as u64, extent_bytes(payload.len() as u32));
        prop_assert_eq!(bytes.len() % 4096, 0);
        let header = verify_extent(&bytes).unwrap();
        prop_assert_eq!(header, ExtentHeader { object_id, replica_id, extent_id, payload_len: payload.len() as u32 });
        prop_assert_eq!(parse_extent_header(&bytes).unwrap(), header);
        prop_assert_eq!(&bytes[EXTENT_HEADER_BYTES..][..payload.len()], &payload[..]);
        let mut streamed = Vec::new();
        prop_assert_eq!(read_extent(Cursor::new(&bytes), &mut streamed).unwrap(), header);
        prop_assert_eq!(streamed, payload.clone());
        // Flip one bit anywhere in header, payload or checksum.
        let mut damaged = bytes.clone();
        let at = flip.index(EXTENT_OVERHEAD_BYTES + payload.len());
        damaged[at] ^= 1 << bit;
        prop_assert!(verify_extent(&damaged).is_err());
        prop_assert!(read_extent(Cursor::new(&damaged), std::io::sink()).is_err());
    }
}

#[test]
fn extent_overhead_is_32_bytes_with_the_version_in_the_magic() {
    assert_eq!(EXTENT_OVERHEAD_BYTES, 32);
    let bytes = extent_to_vec(0x0102, 3, 4, &[0xAB; 4064]).unwrap();
    assert_eq!(bytes.len(), 4096, "4064 + 32 fills one block exactly");
    assert_eq!(&bytes[..5], b"PFXE\x01");
    assert_eq!(bytes[5], 0x02);
    assert_eq!(bytes[6], 0x01);
    assert_eq!(bytes[21], 3);
    assert_eq!(&bytes[22..24], &[4, 0]);
    assert_eq!(&bytes[24..28], &4064u32.to_le_bytes());
    assert_eq!(extent_bytes(4065), 8192);
    assert_eq!(extent_bytes(0), 4096);
    assert_eq!(
        extent_bytes(u32::MAX),
        (u32::MAX as u64 + 32).div_ceil(4096) * 4096
    );
    let mut v2 = bytes.clone();
    v2[4] = 2;
    assert!(matches!(
        parse_extent_header(&v2),
        Err(FormatError::Malformed { .. })
    ));
}

#[test]
fn a_short_payload_is_an_error_not_a_short_extent() {
    let header = ExtentHeader {
        object_id: 1,
        replica_id: 0,
        extent_id: 0,
        payload_len: 100,
    };
    let err = write_extent(&header, &[0u8; 99][..], Vec::new()).unwrap_err();
    assert!(
        matches!(err, FormatError::Io(ref e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{err}"
    );
}

#[test]
fn a_truncated_extent_is_rejected() {
    let bytes = extent_to_vec(1, 0, 0, &[1u8; 100]).unwrap();
    assert!(verify_extent(&bytes[..131]).is_err());
    assert!(verify_extent(&bytes[..10]).is_err());
}

fn manifests() -> impl Strategy<Value = Manifest> {
    let strings = "[a-zA-Z0-9/._ -]{0,40}";
    (
        strings,
        strings,
        proptest::collection::btree_map("[a-z-]{1,12}", ".{0,20}", 0..4),
        proptest::option::of("[a-z]+/[a-z]+"),
        0u8..5,
        any::<[u8; 32]>(),
        any::<u64>(),
        proptest::collection::vec(1u32..5000, 0..20),
        any::<bool>(),
    )
        .prop_map(
            |(
                bucket,
                key,
                user_metadata,
                content_type,
                form,
                blake3,
                created_unix_ms,
                lens,
                part,
            )| {
                let data: Vec<u8> = (0..lens.iter().sum::<u32>())
                    .map(|i| (i / 97) as u8)
                    .collect();
                let (index, stored) = encode_chunks(&data, Algorithm::Lz4, 4096).unwrap();
                let (stored_form, encoding, logical_len, stored_len) = match form {
                    0 => (
                        StoredForm::Raw,
                        Algorithm::None,
                        data.len() as u64,
                        data.len() as u64,
                    ),
                    1 => (
                        StoredForm::Chunked(index.clone()),
                        Algorithm::None,
                        index.logical_len(),
                        stored.len() as u64,
                    ),
                    2 => (
                        StoredForm::AsSent { frames: None },
                        Algorithm::Lz4,
                        data.len() as u64 * 3,
                        data.len() as u64,
                    ),
                    3 => (
                        StoredForm::AsSent {
                            frames: Some(index.clone()),
                        },
                        Algorithm::Zstd,
                        index.logical_len(),
                        stored.len() as u64,
                    ),
                    _ => {
                        let parts: Vec<PartRef> = lens
                            .iter()
                            .map(|&n| PartRef {
                                blake3: *blake3::hash(&n.to_le_bytes()).as_bytes(),
                                encoding: Algorithm::None,
                                logical_len: n as u64,
                            })
                            .collect();
                        let total = parts.iter().map(|p| p.logical_len).sum();
                        (StoredForm::Parts(parts), Algorithm::None, total, 0)
                    }
                };
                let blake3 = match &stored_form {
                    StoredForm::Parts(parts) => part_list_hash(parts),
                    _ => blake3,
                };
                Manifest {
                    bucket,
                    key,
                    user_metadata,
                    content_type,
                    content_encoding: encoding,
                    stored_form,
                    logical_len,
                    stored_len,
                    blake3,
                    created_unix_ms,
                    dataset: "d".into(),
                    role: if part { Role::Part } else { Role::Object },
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_manifest_round_trips(m in manifests()) {
        let bytes = m.encode().unwrap();
        let (back, used) = Manifest::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(used, bytes.len());
        let (back, used) = Manifest::read_from(&bytes[..]).unwrap();
        prop_assert_eq!(back, m);
        prop_assert_eq!(used, bytes.len());
    }

    #[test]
    fn a_damaged_manifest_is_rejected(m in manifests(), flip in any::<prop::sample::Index>()) {
        let mut bytes = m.encode().unwrap();
        let at = flip.index(bytes.len());
        bytes[at] ^= 0x20;
        prop_assert!(Manifest::decode(&bytes).is_err());
    }
}

#[test]
fn a_version_1_manifest_still_decodes_as_an_object() {
    let m = manifest("old/key", StoredForm::Raw, 3, 3);
    let v2 = m.encode().unwrap();
    // Version 1 = version 2 without the role byte (the last body byte).
    let body = &v2[MANIFEST_PREFIX_BYTES..v2.len() - 5];
    let mut v1 = b"PFMN\x01".to_vec();
    v1.extend((body.len() as u32).to_le_bytes());
    v1.extend(body);
    v1.extend(crc_fast::crc32_iscsi(body).to_le_bytes());
    let (back, used) = Manifest::decode(&v1).unwrap();
    assert_eq!(back, m);
    assert_eq!(used, v1.len());
    let mut parts_in_v1 = v1.clone();
    parts_in_v1[4] = 3;
    assert!(
        Manifest::decode(&parts_in_v1).is_err(),
        "version 3 is unknown"
    );
}

#[test]
fn a_part_list_that_does_not_hash_to_its_id_or_add_up_is_refused() {
    let parts = vec![PartRef {
        blake3: [7; 32],
        encoding: Algorithm::None,
        logical_len: 10,
    }];
    let mut m = manifest("a", StoredForm::Parts(parts.clone()), 10, 0);
    m.blake3 = part_list_hash(&parts);
    m.encode().unwrap();
    let wrong_hash = Manifest {
        blake3: [7; 32],
        ..m.clone()
    };
    assert!(wrong_hash.encode().is_err());
    let wrong_len = Manifest {
        logical_len: 11,
        ..m.clone()
    };
    assert!(wrong_len.encode().is_err());
    let stored = Manifest { stored_len: 1, ..m };
    assert!(stored.encode().is_err());
    assert_ne!(part_list_hash(&parts), *blake3::hash(&[7; 41]).as_bytes());
}

#[test]
fn inconsistent_manifests_are_refused_when_encoding() {
    let (index, _) = encode_chunks(&[5u8; 10_000], Algorithm::Zstd, 4096).unwrap();
    assert!(manifest("a", StoredForm::Raw, 10, 11).encode().is_err());
    assert!(manifest("a", StoredForm::Chunked(index), 10_000, 3)
        .encode()
        .is_err());
    assert!(
        manifest("a", StoredForm::AsSent { frames: None }, 10, 5)
            .encode()
            .is_err(),
        "as-sent needs an encoding"
    );
}

#[test]
fn the_manifest_layout_matches_the_documentation() {
    let m = Manifest {
        bucket: "b".into(),
        key: "k".into(),
        user_metadata: BTreeMap::new(),
        content_type: None,
        content_encoding: Algorithm::None,
        stored_form: StoredForm::Raw,
        logical_len: 3,
        stored_len: 3,
        blake3: [0; 32],
        created_unix_ms: 5,
        dataset: "".into(),
        role: Role::Object,
    };
    let bytes = m.encode().unwrap();
    let body_len = 4 + 1 + 4 + 1 + 4 + 1 + 1 + 1 + 8 + 8 + 32 + 8 + 4 + 1;
    assert_eq!(&bytes[..5], b"PFMN\x02");
    assert_eq!(&bytes[5..9], &(body_len as u32).to_le_bytes());
    assert_eq!(bytes.len(), MANIFEST_PREFIX_BYTES + body_len + 4);
    assert_eq!(&bytes[9..14], &[1, 0, 0, 0, b'b']);
}

#[test]
fn a_pack_round_trips_and_placements_point_at_the_stored_bytes() {
    let mut writer = PackWriter::new(Vec::new(), 1 << 20).unwrap();
    let mut expected = Vec::new();
    for i in 0..50u64 {
        let stored: Vec<u8> = (0..i * 37).map(|b| (b * i) as u8).collect();
        let m = manifest(
            &format!("k{i}"),
            StoredForm::Raw,
            stored.len() as u64,
            stored.len() as u64,
        );
        let placement = writer.append(&m, &stored[..]).unwrap();
        expected.push((m, stored, placement));
    }
    assert_eq!(writer.entries(), 50);
    let (payload_len, payload) = writer.finish().unwrap();
    assert_eq!(payload_len as usize, payload.len());
    for (_, stored, p) in &expected {
        assert_eq!(
            &payload[p.stored_offset as usize..][..p.stored_len as usize],
            &stored[..]
        );
    }
    let entries: Vec<PackEntry> = PackReader::new(&payload[..], payload.len() as u64)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(entries.len(), 50);
    for (entry, (m, stored, p)) in entries.iter().zip(&expected) {
        assert_eq!(&entry.manifest, m);
        assert_eq!(&entry.stored, stored);
        assert_eq!(entry.stored_offset, p.stored_offset);
        assert_eq!(entry.entry_offset, p.entry_offset);
    }
}

#[test]
fn a_pack_writer_refuses_an_entry_that_does_not_fit() {
    let mut writer = PackWriter::new(Vec::new(), 1000).unwrap();
    let m = manifest("big", StoredForm::Raw, 900, 900);
    assert!(matches!(
        writer.append(&m, &[0u8; 900][..]),
        Err(FormatError::InvalidArgument(_))
    ));
    assert_eq!(
        writer.payload_len(),
        PACK_HEADER_BYTES as u64,
        "nothing written"
    );
    let m = manifest("small", StoredForm::Raw, 10, 10);
    writer.append(&m, &[0u8; 10][..]).unwrap();
}

#[test]
fn a_pack_reader_skips_an_entry_with_a_damaged_manifest() {
    let mut writer = PackWriter::new(Vec::new(), 1 << 20).unwrap();
    let p: Vec<PackEntryPlacement> = (0..3)
        .map(|i| {
            writer
                .append(
                    &manifest(&format!("k{i}"), StoredForm::Raw, 5, 5),
                    &[i as u8; 5][..],
                )
                .unwrap()
        })
        .collect();
    let (_, mut payload) = writer.finish().unwrap();
    payload[p[1].entry_offset as usize + 20] ^= 0xFF;
    let results: Vec<_> = PackReader::new(&payload[..], payload.len() as u64)
        .unwrap()
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[1].is_err() && results[2].is_ok());
    assert_eq!(results[2].as_ref().unwrap().manifest.key, "k2");
}

#[test]
fn content_extent_plans_cover_the_stored_bytes_in_order() {
    let plan = plan_content_extents(100, 2500, 1000).unwrap();
    let lens: Vec<(u16, u32, u64, u64)> = plan
        .iter()
        .map(|e| (e.extent_id, e.payload_len, e.stored_offset, e.stored_len))
        .collect();
    assert_eq!(
        lens,
        vec![(0, 1000, 0, 900), (1, 1000, 900, 1000), (2, 600, 1900, 600)]
    );
    assert_eq!(plan_content_extents(100, 0, 1000).unwrap().len(), 1);
    assert!(plan_content_extents(2000, 10, 1000).is_err());
    assert!(
        plan_content_extents(0, 70_000 * 4096, 4096).is_err(),
        "more than 65536 extents"
    );
}
