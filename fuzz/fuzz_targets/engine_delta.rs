//! Parity delta files as the engine reads them back after a crash (`<grid>/deltas/<txn>.delta`). Raw mode:
//! any bytes are refused or accepted without a panic, and an accepted file holds exactly the data it
//! announces. Written mode: a file laid out as the engine writes it (magic, version, txn, offset, length,
//! BLAKE3, crc32c, data) reads back to the same fields, and any one changed byte, or a cut, is refused.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use permafrost_engine::fuzzing::delta_file;

#[derive(Debug, Arbitrary)]
enum Input {
    Raw(Vec<u8>),
    Written {
        txn: u64,
        offset: u64,
        data: Vec<u8>,
        flip_at: u32,
        flip: u8,
        cut: u32,
    },
}

fn written(txn: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(72 + data.len());
    out.extend_from_slice(b"PFDELTA1");
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&txn.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(blake3::hash(data).as_bytes());
    let crc = crc_fast::crc32_iscsi(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(data);
    out
}

fuzz_target!(|input: Input| match input {
    Input::Raw(bytes) => {
        if let Some((_, _, data)) = delta_file(&bytes) {
            assert!(data.len() + 72 <= bytes.len());
        }
    }
    Input::Written {
        txn,
        offset,
        data,
        flip_at,
        flip,
        cut,
    } => {
        let file = written(txn, offset, &data);
        assert_eq!(
            delta_file(&file),
            Some((txn, offset, data.clone())),
            "a written delta reads back"
        );
        let mut damaged = file.clone();
        damaged[flip_at as usize % file.len()] ^= flip | 1;
        assert_eq!(delta_file(&damaged), None, "a changed byte is refused");
        let short = &file[..cut as usize % file.len()];
        assert_eq!(delta_file(short), None, "a cut file is refused");
    }
});
