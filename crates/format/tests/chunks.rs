//! Chunked compression, ranges, the 12.5 % rule, client-compressed streams.

use std::io::{Cursor, Read, Write};

use permafrost_format::*;
use proptest::prelude::*;
use rand::{Rng, RngCore, SeedableRng};

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Text-like data: compresses well but not trivially.
fn compressible_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let words: [&[u8]; 6] = [
        b"permafrost ",
        b"archive ",
        b"disk ",
        b"parity ",
        b"extent ",
        b"\n",
    ];
    let mut v = Vec::with_capacity(len + 16);
    while v.len() < len {
        v.extend_from_slice(words[rng.gen_range(0..words.len())]);
    }
    v.truncate(len);
    v
}

fn read_range(index: &ChunkIndex, stored: &[u8], offset: u64, len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    decode_range(index, Cursor::new(stored), offset, len)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn algorithms() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::None),
        Just(Algorithm::Zstd),
        Just(Algorithm::Lz4)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_range_of_chunked_data_decodes_to_the_original(
        algorithm in algorithms(),
        compressible in any::<bool>(),
        len in 0usize..40_000,
        seed in any::<u64>(),
        write_sizes in proptest::collection::vec(1usize..9000, 1..8),
        ranges in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..6),
    ) {
        let data = if compressible { compressible_bytes(len, seed) } else { random_bytes(len, seed) };
        let mut encoder = ChunkEncoder::new(Vec::new(), algorithm, 4096).unwrap();
        let mut rest = &data[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = write_sizes[i % write_sizes.len()].min(rest.len());
            encoder.write(&rest[..n]).unwrap();
            rest = &rest[n..];
            i += 1;
        }
        let (index, stored) = encoder.finish().unwrap();
        prop_assert_eq!(index.logical_len(), len as u64);
        prop_assert_eq!(index.stored_len(), stored.len() as u64);
        prop_assert_eq!(index.entries().len(), len.div_ceil(4096));
        let (decoded_index, used) = ChunkIndex::decode(&index.encode()).unwrap();
        prop_assert_eq!(&decoded_index, &index);
        prop_assert_eq!(used, index.encoded_len());
        prop_assert_eq!(read_range(&index, &stored, 0, len as u64), data.clone());
        for (a, b) in ranges {
            let offset = if len == 0 { 0 } else { a % (len as u64 + 1) };
            let n = b % (len as u64 - offset + 1);
            prop_assert_eq!(read_range(&index, &stored, offset, n), &data[offset as usize..(offset + n) as usize]);
            prop_assert_eq!(range_by_chunks(&index, &stored, offset, n), &data[offset as usize..(offset + n) as usize]);
        }
    }
}

/// The range read through [`stored_chunks`]: several chunks' stored bytes read into one buffer, back to back,
/// then each decoded on its own (as a caller that decodes chunks in parallel does).
fn range_by_chunks(index: &ChunkIndex, stored: &[u8], offset: u64, len: u64) -> Vec<u8> {
    let mut chunks = stored_chunks(index, Cursor::new(stored), offset, len).unwrap();
    let mut buf = vec![0xAA; 3];
    let mut out = Vec::new();
    loop {
        let mut run = Vec::new();
        let mut at = 0;
        while run.len() < 3 {
            let peeked = chunks.peek();
            let Some(chunk) = chunks.read_next(&mut buf, at).unwrap() else {
                break;
            };
            assert_eq!(peeked, Some(chunk));
            run.push((at, chunk));
            at += chunk.entry.stored_len as usize;
        }
        if run.is_empty() {
            assert_eq!(chunks.peek(), None);
            return out;
        }
        for (at, chunk) in run {
            let from = out.len();
            out.resize(from + chunk.take, 0);
            chunk
                .decode_into(
                    &buf[at..at + chunk.entry.stored_len as usize],
                    &mut out[from..],
                )
                .unwrap();
        }
    }
}

#[test]
fn ranges_on_chunk_boundaries_decode_exactly() {
    for algorithm in [Algorithm::None, Algorithm::Zstd, Algorithm::Lz4] {
        let data = compressible_bytes(5 * 4096 + 17, 7);
        let (index, stored) = encode_chunks(&data, algorithm, 4096).unwrap();
        for boundary in [4096u64, 8192, 5 * 4096] {
            for (offset, len) in [
                (boundary - 1, 2),
                (boundary, 4096),
                (boundary - 4096, 4096),
                (boundary, 0),
            ] {
                let len = len.min(data.len() as u64 - offset);
                assert_eq!(
                    read_range(&index, &stored, offset, len),
                    &data[offset as usize..(offset + len) as usize],
                    "{algorithm} {offset}+{len}"
                );
            }
        }
    }
}

#[test]
fn a_range_decodes_only_the_chunks_it_needs() {
    // Damage chunk 0's stored bytes: a range in chunk 2 must still decode.
    let data = compressible_bytes(3 * 4096, 3);
    let (index, mut stored) = encode_chunks(&data, Algorithm::Zstd, 4096).unwrap();
    stored[5] ^= 0xFF;
    assert_eq!(
        read_range(&index, &stored, 2 * 4096 + 10, 100),
        &data[2 * 4096 + 10..2 * 4096 + 110]
    );
    let mut out = Vec::new();
    let err = decode_range(&index, Cursor::new(&stored), 0, 10)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
}

#[test]
fn a_range_past_the_end_is_an_invalid_range_error() {
    let (index, stored) = encode_chunks(&[1u8; 10_000], Algorithm::Lz4, 4096).unwrap();
    assert!(matches!(
        decode_range(&index, Cursor::new(&stored), 9_000, 1_001),
        Err(FormatError::InvalidRange { .. })
    ));
    assert!(matches!(
        decode_range(&index, Cursor::new(&stored), u64::MAX, 2),
        Err(FormatError::InvalidRange { .. })
    ));
}

#[test]
fn random_data_stays_raw_and_zeros_compress() {
    for algorithm in [Algorithm::Zstd, Algorithm::Lz4] {
        let (index, stored) =
            encode_chunks(&random_bytes(3 << 20, 1), algorithm, DEFAULT_CHUNK_BYTES).unwrap();
        assert!(
            index
                .entries()
                .iter()
                .all(|e| e.algorithm == Algorithm::None),
            "{algorithm}"
        );
        assert_eq!(stored.len(), 3 << 20);
        let (index, stored) =
            encode_chunks(&vec![0u8; 3 << 20], algorithm, DEFAULT_CHUNK_BYTES).unwrap();
        assert!(
            index.entries().iter().all(|e| e.algorithm == algorithm),
            "{algorithm}"
        );
        assert!(
            stored.len() < (3 << 20) / 100,
            "{algorithm}: {} stored bytes",
            stored.len()
        );
    }
}

#[test]
fn the_twelve_and_a_half_percent_rule_is_exact() {
    assert!(saves_enough(800, 700)); // saves exactly 12.5 %
    assert!(!saves_enough(800, 701));
    assert!(!saves_enough(800, 800));
    assert!(!saves_enough(800, 900));
    assert!(saves_enough(4096, 1));
    // Half random, half zeros: about 50 % saving, so compressed.
    let mut data = random_bytes(4096, 9);
    data.extend(vec![0u8; 4096]);
    let (index, _) = encode_chunks(&data, Algorithm::Zstd, 8192).unwrap();
    assert_eq!(index.entries()[0].algorithm, Algorithm::Zstd);
    // 95 % random: saves < 12.5 %, so raw.
    let mut data = random_bytes(7800, 10);
    data.extend(vec![0u8; 392]);
    let (index, _) = encode_chunks(&data, Algorithm::Zstd, 8192).unwrap();
    assert_eq!(index.entries()[0].algorithm, Algorithm::None);
}

#[test]
fn algorithm_names_parse_and_print() {
    for a in [Algorithm::None, Algorithm::Zstd, Algorithm::Lz4] {
        assert_eq!(a.to_string().parse::<Algorithm>().unwrap(), a);
        assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{a}\""));
        assert_eq!(Algorithm::from_code(a.code()).unwrap(), a);
    }
    assert_eq!("ZSTD".parse::<Algorithm>().unwrap(), Algorithm::Zstd);
    assert!("gzip".parse::<Algorithm>().is_err());
}

#[test]
fn chunk_bytes_out_of_bounds_is_rejected() {
    assert!(ChunkEncoder::new(Vec::new(), Algorithm::Zstd, 100).is_err());
    assert!(ChunkEncoder::new(Vec::new(), Algorithm::Zstd, CHUNK_BYTES_MAX + 1).is_err());
}

#[test]
fn corrupted_chunk_index_bytes_are_rejected() {
    let (index, _) = encode_chunks(&compressible_bytes(20_000, 1), Algorithm::Lz4, 4096).unwrap();
    let bytes = index.encode();
    assert!(ChunkIndex::decode(&bytes[..bytes.len() - 1]).is_err());
    let mut bad = bytes.clone();
    bad[0] = 9;
    assert!(ChunkIndex::decode(&bad).is_err());
    let mut bad = bytes.clone();
    bad[5] = 7; // unknown algorithm code
    assert!(ChunkIndex::decode(&bad).is_err());
}

fn zstd_frames(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        out.extend(zstd::bulk::compress(part, 3).unwrap()); // bulk frames declare their size
    }
    out
}

#[test]
fn multi_frame_zstd_is_indexed_and_ranges_decode_only_needed_frames() {
    let parts: Vec<Vec<u8>> = (0..5)
        .map(|i| compressible_bytes(10_000 + i * 1000, i as u64))
        .collect();
    let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    let mut stream = zstd_frames(&refs[..2]);
    // A skippable frame in the middle (as the seekable format writes one).
    stream.extend_from_slice(&0x184D_2A5Eu32.to_le_bytes());
    stream.extend_from_slice(&3u32.to_le_bytes());
    stream.extend_from_slice(b"abc");
    stream.extend(zstd_frames(&refs[2..]));
    let data = parts.concat();
    let index = index_zstd_frames(&stream[..]).unwrap().expect("indexable");
    assert_eq!(index.entries().len(), 5);
    assert_eq!(index.logical_len(), data.len() as u64);
    assert_eq!(index.stored_len(), stream.len() as u64);
    for (offset, len) in [
        (0u64, data.len() as u64),
        (9_990, 30),
        (25_000, 20_000),
        (data.len() as u64 - 1, 1),
    ] {
        assert_eq!(
            read_range(&index, &stream, offset, len),
            &data[offset as usize..(offset + len) as usize]
        );
    }
    // Damage the first frame: a range in the last frame still decodes.
    let mut damaged = stream.clone();
    damaged[20] ^= 0xFF;
    let last = index.entries()[4];
    assert_eq!(
        read_range(&index, &damaged, last.logical_offset, 100),
        &data[last.logical_offset as usize..][..100]
    );
    // And the whole stream decodes with the streaming decoder.
    let mut all = Vec::new();
    decode_stream(Algorithm::Zstd, &stream[..])
        .unwrap()
        .read_to_end(&mut all)
        .unwrap();
    assert_eq!(all, data);
}

#[test]
fn zstd_without_declared_sizes_is_not_indexed_but_streams() {
    let data = compressible_bytes(100_000, 5);
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    encoder.write_all(&data).unwrap();
    let stream = encoder.finish().unwrap();
    assert_eq!(index_zstd_frames(&stream[..]).unwrap(), None);
    assert_eq!(index_zstd_frames(&b"not zstd at all"[..]).unwrap(), None);
    assert_eq!(
        index_zstd_frames(&stream[..stream.len() / 2]).unwrap(),
        None
    );
    let mut part = Vec::new();
    decode_stream_range(Algorithm::Zstd, &stream[..], 50_000, 1234)
        .unwrap()
        .read_to_end(&mut part)
        .unwrap();
    assert_eq!(part, &data[50_000..51_234]);
}

#[test]
fn lz4_frames_as_clients_send_them_round_trip() {
    let data = compressible_bytes(300_000, 6);
    let mut stream = Vec::new();
    for part in [&data[..100_000], &data[100_000..]] {
        let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
        encoder.write_all(part).unwrap();
        stream.extend(encoder.finish().unwrap());
    }
    assert_eq!(&stream[..4], &[0x04, 0x22, 0x4D, 0x18]);
    let mut all = Vec::new();
    decode_stream(Algorithm::Lz4, &stream[..])
        .unwrap()
        .read_to_end(&mut all)
        .unwrap();
    assert!(
        all == data,
        "concatenated lz4 frames decode to the concatenated data ({} of {} bytes)",
        all.len(),
        data.len()
    );
    let mut part = Vec::new();
    decode_stream_range(Algorithm::Lz4, &stream[..], 150_000, 99)
        .unwrap()
        .read_to_end(&mut part)
        .unwrap();
    assert_eq!(part, &data[150_000..150_099]);
    let mut bad = stream.clone();
    bad[0] = 0;
    assert!(decode_stream(Algorithm::Lz4, &bad[..])
        .unwrap()
        .read_to_end(&mut Vec::new())
        .is_err());
}
