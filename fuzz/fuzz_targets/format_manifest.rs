//! Manifest records as read from the first extent of a content or from a pack entry. The fuzzed bytes are the
//! record's body: the target gives them a valid prefix and checksum (so decoding reaches the body) or, for
//! the first input byte odd, takes them as they are. Never a panic; a manifest that decodes encodes to a record
//! that decodes to the same manifest, also through `read_from`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_format::{Manifest, MANIFEST_MAGIC, MANIFEST_VERSION};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let record = if mode & 1 == 1 {
        rest.to_vec()
    } else {
        let mut r = Vec::with_capacity(rest.len() + 13);
        r.extend_from_slice(&MANIFEST_MAGIC);
        // Mostly the current version; sometimes the one before or an unknown one.
        r.push(match mode >> 1 {
            0 => MANIFEST_VERSION.wrapping_sub(1),
            1 => mode,
            _ => MANIFEST_VERSION,
        });
        r.extend_from_slice(&(rest.len() as u32).to_le_bytes());
        r.extend_from_slice(rest);
        r.extend_from_slice(&crc_fast::crc32_iscsi(rest).to_le_bytes());
        r
    };
    let decoded = Manifest::decode(&record);
    let streamed = Manifest::read_from(&record[..]);
    assert_eq!(
        decoded.is_ok(),
        streamed.is_ok(),
        "decode and read_from agree"
    );
    let Ok((manifest, used)) = decoded else {
        return;
    };
    assert!(used <= record.len());
    assert_eq!(streamed.unwrap(), (manifest.clone(), used));
    let encoded = manifest.encode().expect("a decoded manifest encodes");
    let (again, again_used) = Manifest::decode(&encoded).expect("an encoded manifest decodes");
    assert_eq!(again_used, encoded.len());
    assert_eq!(again, manifest);
});
