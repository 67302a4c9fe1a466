//! # permafrost-format: the object store's on-disk formats
//!
//! **Job.** Pure encoders and decoders for everything the object store writes
//! to the grid, so that a disk can be read back — even without the catalog:
//!
//! - [chunked compression](ChunkEncoder) (SPEC idea 11): independent chunks of
//!   `chunk_bytes` logical bytes, zstd (level 1, `ZSTD_LEVEL`) or LZ4 (block format), each
//!   stored raw when compression saves less than 12.5 % ([`saves_enough`]);
//!   a [`ChunkIndex`] lets [`decode_range`] decode only the chunks a range needs
//!   ([`stored_chunks`] hands them over undecoded, to callers that decode several at once).
//!   Client-compressed streams (`Content-Encoding: zstd` = zstd frames,
//!   `lz4` = LZ4 *frame* format) decode with [`decode_stream`]; zstd streams
//!   made of independent sized frames get a frame index ([`index_zstd_frames`]).
//! - the [extent format](write_extent) (thesis Fig. 5.4): 28-byte header,
//!   payload, crc32c over header and payload — 32 bytes of overhead — padded to
//!   4 KiB;
//! - the [`Manifest`] record that opens a content's first extent, and
//!   [pack extents](PackWriter) holding many small contents;
//! - the [scanner](scan_extents) and [`salvage_objects`], which rebuild objects
//!   from a raw grid bucket image.
//!
//! Every format is documented byte by byte in `docs/formats.md` and carries a
//! version byte.
//!
//! **Invariants.**
//! - Decoding never trusts input: bad bytes give a [`FormatError`] naming what was
//!   wrong, never a panic and never silently wrong bytes (checksums on extents
//!   and manifests; lengths checked against the index).
//! - Memory is bounded: the chunk encoder and range decoder hold about two chunks
//!   (≤ [`CHUNK_BYTES_MAX`] each); extents and manifests stream.
//! - `decode(encode(x)) == x` for chunk indexes, manifests, extents and packs
//!   (property-tested).
//!
//! ```
//! use permafrost_format::{decode_range, encode_chunks, Algorithm};
//! use std::io::{Cursor, Read};
//! let data = b"hello permafrost ".repeat(10_000);
//! let (index, stored) = encode_chunks(&data, Algorithm::Zstd, 64 << 10)?;
//! assert!(stored.len() < data.len() / 10);
//! let mut part = Vec::new();
//! decode_range(&index, Cursor::new(&stored), 100_000, 17)?.read_to_end(&mut part)?;
//! assert_eq!(part, &data[100_000..100_017]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Not here.** Where extents go (the store and the engine), the catalog, and
//! BLAKE3 hashing of extents for the catalog (the store hashes what it writes).

#![forbid(unsafe_code)]

mod chunk;
mod error;
mod extent;
mod manifest;
mod pack;
mod salvage;

pub use chunk::{
    decode_chunk, decode_range, decode_stream, decode_stream_range, encode_chunks,
    index_zstd_frames, read_stored, saves_enough, stored_chunks, Algorithm, ChunkCompressor,
    ChunkEncoder, ChunkEntry, ChunkIndex, RangeChunk, RangeReader, StoredChunks, StreamDecoder,
    CHUNK_BYTES_MAX, CHUNK_INDEX_VERSION, DEFAULT_CHUNK_BYTES, ZSTD_LEVEL,
};
pub use error::{FormatError, Result};
pub use extent::{
    extent_bytes, extent_to_vec, is_extent_start, parse_extent_header, read_extent, verify_extent,
    write_extent, ExtentHeader, EXTENT_ALIGN_BYTES, EXTENT_HEADER_BYTES, EXTENT_MAGIC,
    EXTENT_OVERHEAD_BYTES, EXTENT_PAYLOAD_BYTES_MAX, EXTENT_TRAILER_BYTES, EXTENT_VERSION,
};
pub use manifest::{
    part_list_hash, Manifest, PartRef, Role, StoredForm, MANIFEST_BODY_BYTES_MAX, MANIFEST_MAGIC,
    MANIFEST_PREFIX_BYTES, MANIFEST_VERSION, PART_LIST_CONTEXT,
};
pub use pack::{
    is_pack_start, PackEntry, PackEntryPlacement, PackReader, PackWriter, PACK_ENTRY_BYTES_MAX,
    PACK_HEADER_BYTES, PACK_MAGIC, PACK_VERSION,
};
pub use salvage::{
    plan_content_extents, salvage_objects, scan_extents, ContentExtent, ExtentScanner, FoundExtent,
    SalvageProgress, SalvageReport,
};

/// The CRC32C (Castagnoli, as in iSCSI) of `data` continued from `crc`, the CRC32C of the bytes before it
/// (`crc32c_append(crc32c(a), b) == crc32c(a ++ b)`; the CRC32C of nothing is 0). The one-shot form is
/// `crc_fast::crc32_iscsi`: the workspace computes every CRC with `crc-fast`, whose folding with carry-less
/// multiplication runs 2–3 times faster here than the `crc32` instruction alone.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    // The register before the final xor (CRC32C's xorout is all ones).
    let mut digest =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

#[cfg(test)]
mod crc_tests {
    use proptest::prelude::*;

    use super::crc32c_append;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc_fast::crc32_iscsi(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c_append(0, b"123456789"), 0xe306_9283);
        assert_eq!(
            crc32c_append(crc_fast::crc32_iscsi(b"1234"), b"56789"),
            0xe306_9283
        );
    }

    proptest! {
        #[test]
        fn crc32c_append_continues_the_crc(a in proptest::collection::vec(any::<u8>(), 0..5000),
                                           b in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(crc32c_append(crc_fast::crc32_iscsi(&a), &b), crc_fast::crc32_iscsi(&whole));
        }
    }
}
