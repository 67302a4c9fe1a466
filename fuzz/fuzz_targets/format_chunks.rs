//! Chunked compression round trip: any bytes, either codec, any chunk size, any range: `decode_range` gives back
//! exactly the range's bytes; a stored chunk with a byte changed decodes to an error or to bytes of the
//! announced length, never a panic.
#![no_main]
use std::io::{Cursor, Read};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use permafrost_format::{decode_chunk, decode_range, encode_chunks, Algorithm};

#[derive(Debug, Arbitrary)]
struct Input {
    zstd: bool,
    chunk_kib: u8,
    range_start: u16,
    range_len: u16,
    flip_at: u16,
    flip: u8,
    data: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let algorithm = if input.zstd {
        Algorithm::Zstd
    } else {
        Algorithm::Lz4
    };
    let chunk_bytes = (u32::from(input.chunk_kib) % 16 + 4) * 1024;
    let (index, stored) = match encode_chunks(&input.data, algorithm, chunk_bytes) {
        Ok(x) => x,
        Err(e) => panic!("encoding {} bytes failed: {e}", input.data.len()),
    };
    assert_eq!(index.logical_len(), input.data.len() as u64);
    assert_eq!(index.stored_len(), stored.len() as u64);
    let len = input.data.len() as u64;
    let start = if len == 0 {
        0
    } else {
        u64::from(input.range_start) % len
    };
    let n = (u64::from(input.range_len)).min(len - start);
    let mut part = Vec::new();
    decode_range(&index, Cursor::new(&stored), start, n)
        .expect("a range inside the content opens")
        .read_to_end(&mut part)
        .expect("a range of intact chunks decodes");
    assert_eq!(&part[..], &input.data[start as usize..(start + n) as usize]);
    // Damage one stored byte of the chunk it falls in.
    if !stored.is_empty() {
        let mut damaged = stored.clone();
        let at = usize::from(input.flip_at) % damaged.len();
        damaged[at] ^= input.flip | 1;
        let mut offset = 0usize;
        for entry in index.entries() {
            let stored_len = entry.stored_len as usize;
            let mut out = Vec::new();
            if decode_chunk(entry, &damaged[offset..offset + stored_len], &mut out).is_ok() {
                assert_eq!(out.len() as u64, entry.logical_len as u64);
            }
            offset += stored_len;
        }
    }
});
