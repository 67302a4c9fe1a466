//! Salvage of a grid bucket image without the catalog, as a model check: objects written as the store writes
//! them (own extents split at a fuzzed size, or entries of a pack; raw or chunked), laid out in a fuzzed order
//! between blocks of fuzzed garbage, are every one recovered byte-exact, and nothing else is.
#![no_main]
use std::collections::BTreeMap;
use std::io::Cursor;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use permafrost_format::{
    encode_chunks, extent_to_vec, plan_content_extents, salvage_objects, Algorithm, Manifest,
    PackWriter, Role, StoredForm, EXTENT_MAGIC,
};

#[derive(Debug, Arbitrary)]
struct Object {
    in_pack: bool,
    chunked: bool,
    extent_payload: u16,
    data: Vec<u8>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    objects: Vec<Object>,
    order: Vec<u16>,
    garbage: Vec<u8>,
}

fn manifest(key: &str, form: StoredForm, data: &[u8], stored_len: u64, t: u64) -> Manifest {
    Manifest {
        bucket: "fuzz".into(),
        key: key.into(),
        user_metadata: BTreeMap::new(),
        content_type: None,
        content_encoding: Algorithm::None,
        stored_form: form,
        logical_len: data.len() as u64,
        stored_len,
        blake3: *blake3::hash(data).as_bytes(),
        created_unix_ms: t,
        dataset: "fuzz".into(),
        role: Role::Object,
    }
}

fuzz_target!(|input: Input| {
    let objects = &input.objects[..input.objects.len().min(8)];
    let mut extents: Vec<Vec<u8>> = Vec::new();
    let mut pack = PackWriter::new(Vec::new(), 1 << 20).unwrap();
    let mut expected = BTreeMap::new();
    for (i, o) in objects.iter().enumerate() {
        let key = format!("o{i}");
        let (form, stored) = if o.chunked {
            let (index, stored) = encode_chunks(&o.data, Algorithm::Zstd, 4096).unwrap();
            (StoredForm::Chunked(index), stored)
        } else {
            (StoredForm::Raw, o.data.clone())
        };
        let m = manifest(&key, form, &o.data, stored.len() as u64, i as u64 + 1);
        if o.in_pack {
            pack.append(&m, &stored[..]).unwrap();
        } else {
            let record = m.encode().unwrap();
            let max = record.len() as u32 + 1 + u32::from(o.extent_payload % 8192);
            let Ok(plan) = plan_content_extents(record.len(), stored.len() as u64, max) else {
                continue;
            };
            for e in &plan {
                let mut payload = if e.extent_id == 0 {
                    record.clone()
                } else {
                    Vec::new()
                };
                payload.extend_from_slice(
                    &stored[e.stored_offset as usize..][..e.stored_len as usize],
                );
                extents.push(extent_to_vec(1 + i as u128, 0, e.extent_id, &payload).unwrap());
            }
        }
        expected.insert(key, o.data.clone());
    }
    let (pack_len, pack_bytes) = pack.finish().unwrap();
    if pack_len > 5 {
        extents.push(extent_to_vec(0xFACC, 0, 0, &pack_bytes).unwrap());
    }
    // A fuzzed order, with a block of garbage (that starts no extent) before each extent.
    let mut keyed: Vec<(u16, Vec<u8>)> = extents
        .into_iter()
        .enumerate()
        .map(|(i, e)| (input.order.get(i).copied().unwrap_or(0), e))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    let mut image = Vec::new();
    for (i, (_, extent)) in keyed.iter().enumerate() {
        let from = (i * 4096).min(input.garbage.len());
        let mut block = input.garbage[from..(from + 4096).min(input.garbage.len())].to_vec();
        if !block.is_empty() {
            block.resize(4096, 0);
            if block[..4] == EXTENT_MAGIC {
                block[0] = 0;
            }
            image.extend_from_slice(&block);
        }
        image.extend_from_slice(extent);
    }
    let out = tempfile::tempdir().unwrap();
    let report = salvage_objects(
        Cursor::new(&image),
        image.len() as u64,
        out.path(),
        &mut |_| {},
    )
    .expect("salvage of a readable image finishes");
    assert!(report.damaged_extents.is_empty(), "{report:?}");
    assert!(report.incomplete_objects.is_empty(), "{report:?}");
    assert_eq!(
        report.objects_recovered,
        expected.len() as u64,
        "{report:?}"
    );
    for (key, data) in &expected {
        let got = std::fs::read(out.path().join("fuzz").join(key))
            .expect("a recovered object is written");
        assert!(
            &got == data,
            "{key}: {} bytes recovered, {} written",
            got.len(),
            data.len()
        );
    }
});
