//! A client-compressed body (`Content-Encoding: zstd` or `lz4`) as the server decodes it: never a panic, and
//! bounded work (at most 4 MiB of output is read). A zstd stream that `index_zstd_frames` indexes decodes
//! through its index (`decode_range`) to the same bytes as decoding it from the start.
#![no_main]
use std::io::{Cursor, Read};

use libfuzzer_sys::fuzz_target;
use permafrost_format::{
    decode_range, decode_stream, decode_stream_range, index_zstd_frames, Algorithm,
};

const OUT_MAX: u64 = 4 << 20;

fn decoded(algorithm: Algorithm, body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let decoder = decode_stream(algorithm, body).ok()?;
    decoder.take(OUT_MAX + 1).read_to_end(&mut out).ok()?;
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let algorithm = if mode & 1 == 0 {
        Algorithm::Zstd
    } else {
        Algorithm::Lz4
    };
    let whole = decoded(algorithm, body);
    if let Ok(range) = decode_stream_range(algorithm, body, u64::from(mode >> 1), 1000) {
        let mut part = Vec::new();
        let _ = range.take(OUT_MAX).read_to_end(&mut part);
    }
    if algorithm != Algorithm::Zstd {
        return;
    }
    let Ok(Some(index)) = index_zstd_frames(body) else {
        return;
    };
    assert_eq!(
        index.stored_len(),
        body.len() as u64,
        "the frame index covers the stream"
    );
    if index.logical_len() > OUT_MAX {
        return;
    }
    let mut through_index = Vec::new();
    let Ok(reader) = decode_range(&index, Cursor::new(body), 0, index.logical_len()) else {
        return;
    };
    if reader
        .take(OUT_MAX + 1)
        .read_to_end(&mut through_index)
        .is_err()
    {
        return;
    }
    if let Some(whole) = whole {
        assert_eq!(through_index.len() as u64, index.logical_len());
        assert!(
            through_index == whole,
            "indexed decode differs from a decode from the start"
        );
    }
});
