//! Chunked compression (SPEC idea 11) and client-compressed streams.
//!
//! Server-side compression cuts the logical bytes into independent chunks of
//! `chunk_bytes` (the last one may be shorter), compresses each one on its own
//! and keeps a [`ChunkIndex`], so a ranged read decodes only the chunks it
//! touches. A chunk that saves less than 12.5 % is stored raw (ZFS's rule,
//! `seeds/002` ch. 2.3).

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Result};

/// Default logical size of a chunk: 1 MiB.
pub const DEFAULT_CHUNK_BYTES: u32 = 1 << 20;
/// Largest allowed chunk (logical or stored) and largest zstd frame
/// [`index_zstd_frames`] indexes: 16 MiB. A ranged read holds about two of them.
pub const CHUNK_BYTES_MAX: u32 = 16 << 20;
/// zstd compression level used for server-side chunks. Level 1: on high-entropy text (4 bits per byte, 1 MiB
/// chunks) it compressed at 865 MB/s per core against level 3's 120 MB/s, to a smaller result (0.516 vs 0.528);
/// random data costs the same at either (measured on the development VM; bench/peers.py `TextData`).
pub const ZSTD_LEVEL: i32 = 1;
/// Version byte of the [`ChunkIndex`] encoding.
pub const CHUNK_INDEX_VERSION: u8 = 1;

/// A compression algorithm. Also names a `Content-Encoding`: `None` is
/// `identity`, `Zstd` is a zstd stream, `Lz4` is an LZ4 *frame* stream.
///
/// Text form (serde, `FromStr`, `Display`): `"none"`, `"zstd"`, `"lz4"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Not compressed.
    #[default]
    None,
    /// zstd (level 3 for server chunks).
    Zstd,
    /// LZ4: block format inside server chunks, frame format when sent by clients.
    Lz4,
}

impl Algorithm {
    /// The byte that stands for the algorithm in binary formats: 0 none, 1 zstd, 2 lz4.
    pub fn code(self) -> u8 {
        match self {
            Algorithm::None => 0,
            Algorithm::Zstd => 1,
            Algorithm::Lz4 => 2,
        }
    }

    /// Inverse of [`Algorithm::code`].
    pub fn from_code(code: u8) -> Result<Algorithm> {
        match code {
            0 => Ok(Algorithm::None),
            1 => Ok(Algorithm::Zstd),
            2 => Ok(Algorithm::Lz4),
            other => Err(FormatError::malformed(
                "algorithm",
                format!("unknown code {other}"),
            )),
        }
    }

    /// The name: `"none"`, `"zstd"` or `"lz4"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::None => "none",
            Algorithm::Zstd => "zstd",
            Algorithm::Lz4 => "lz4",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = FormatError;
    /// Accepts `none`, `zstd`, `lz4` (any case); `identity` is taken as `none`.
    fn from_str(s: &str) -> Result<Algorithm> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "identity" => Ok(Algorithm::None),
            "zstd" => Ok(Algorithm::Zstd),
            "lz4" => Ok(Algorithm::Lz4),
            other => Err(FormatError::InvalidArgument(format!(
                "unknown compression algorithm {other:?} (expected zstd, lz4 or none)"
            ))),
        }
    }
}

/// One chunk of a chunked content: where its logical bytes are and where its
/// stored bytes are (offsets relative to the start of the content's logical
/// and stored byte streams).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkEntry {
    /// First logical byte of the chunk.
    pub logical_offset: u64,
    /// Logical (decoded) length, ≥ 1.
    pub logical_len: u64,
    /// First stored byte of the chunk.
    pub stored_offset: u64,
    /// Stored length, ≥ 1.
    pub stored_len: u64,
    /// How the stored bytes decode: `None` means stored raw (`stored_len == logical_len`).
    pub algorithm: Algorithm,
}

/// The chunk index of a content: chunks in order, contiguous in both the
/// logical and the stored stream, starting at 0.
///
/// Invariants (checked by [`ChunkIndex::from_entries`] and
/// [`ChunkIndex::decode`]): entry `i+1` starts where entry `i` ends in both
/// streams; every chunk has logical and stored length in `1..=CHUNK_BYTES_MAX`;
/// a raw chunk has equal logical and stored length.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChunkIndex {
    entries: Vec<ChunkEntry>,
}

impl ChunkIndex {
    /// Builds an index from entries, checking the invariants.
    pub fn from_entries(entries: Vec<ChunkEntry>) -> Result<ChunkIndex> {
        let (mut logical, mut stored) = (0u64, 0u64);
        for (i, e) in entries.iter().enumerate() {
            let bad = |reason: String| {
                Err(FormatError::malformed(
                    "chunk index",
                    format!("chunk {i}: {reason}"),
                ))
            };
            if e.logical_offset != logical || e.stored_offset != stored {
                return bad(format!(
                    "starts at logical {} / stored {}, expected {logical} / {stored}",
                    e.logical_offset, e.stored_offset
                ));
            }
            if !(1..=CHUNK_BYTES_MAX as u64).contains(&e.logical_len)
                || !(1..=CHUNK_BYTES_MAX as u64).contains(&e.stored_len)
            {
                return bad(format!(
                    "logical length {} / stored length {} outside 1..={CHUNK_BYTES_MAX}",
                    e.logical_len, e.stored_len
                ));
            }
            if e.algorithm == Algorithm::None && e.logical_len != e.stored_len {
                return bad(format!(
                    "raw chunk with logical length {} != stored length {}",
                    e.logical_len, e.stored_len
                ));
            }
            logical += e.logical_len;
            stored += e.stored_len;
        }
        Ok(ChunkIndex { entries })
    }

    /// The chunks, in order.
    pub fn entries(&self) -> &[ChunkEntry] {
        &self.entries
    }

    /// Total logical (decoded) bytes.
    pub fn logical_len(&self) -> u64 {
        self.entries
            .last()
            .map_or(0, |e| e.logical_offset + e.logical_len)
    }

    /// Total stored bytes.
    pub fn stored_len(&self) -> u64 {
        self.entries
            .last()
            .map_or(0, |e| e.stored_offset + e.stored_len)
    }

    /// Index of the chunk holding logical byte `offset`, if any.
    pub fn chunk_at(&self, logical_offset: u64) -> Option<usize> {
        let i = self
            .entries
            .partition_point(|e| e.logical_offset + e.logical_len <= logical_offset);
        (i < self.entries.len()).then_some(i)
    }

    /// Bytes of [`ChunkIndex::encode`]: `5 + 9 · chunks`.
    pub fn encoded_len(&self) -> usize {
        5 + 9 * self.entries.len()
    }

    /// Binary form (docs/formats.md, "Chunk index"): `version u8 = 1 | count u32 |
    /// count × (algorithm u8 | logical_len u32 | stored_len u32)`, little endian.
    /// Offsets are not stored: they are the running sums.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// Appends [`ChunkIndex::encode`] to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(CHUNK_INDEX_VERSION);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            out.push(e.algorithm.code());
            out.extend_from_slice(&(e.logical_len as u32).to_le_bytes());
            out.extend_from_slice(&(e.stored_len as u32).to_le_bytes());
        }
    }

    /// Parses an encoded index from the start of `bytes`; returns it and the
    /// number of bytes it used.
    pub fn decode(bytes: &[u8]) -> Result<(ChunkIndex, usize)> {
        let what = "chunk index";
        if bytes.len() < 5 {
            return Err(FormatError::malformed(
                what,
                format!("{} bytes, need at least 5", bytes.len()),
            ));
        }
        if bytes[0] != CHUNK_INDEX_VERSION {
            return Err(FormatError::malformed(
                what,
                format!("unknown version {}", bytes[0]),
            ));
        }
        let count = u32::from_le_bytes(bytes[1..5].try_into().unwrap()) as usize;
        let need = count
            .checked_mul(9)
            .and_then(|n| n.checked_add(5))
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| {
                FormatError::malformed(
                    what,
                    format!("{count} chunks do not fit in {} bytes", bytes.len()),
                )
            })?;
        let mut entries = Vec::with_capacity(count);
        let (mut logical, mut stored) = (0u64, 0u64);
        for rec in bytes[5..need].chunks_exact(9) {
            let algorithm = Algorithm::from_code(rec[0])?;
            let logical_len = u32::from_le_bytes(rec[1..5].try_into().unwrap()) as u64;
            let stored_len = u32::from_le_bytes(rec[5..9].try_into().unwrap()) as u64;
            entries.push(ChunkEntry {
                logical_offset: logical,
                logical_len,
                stored_offset: stored,
                stored_len,
                algorithm,
            });
            logical += logical_len;
            stored += stored_len;
        }
        Ok((ChunkIndex::from_entries(entries)?, need))
    }
}

/// Does a chunk of `logical_len` bytes compressed to `compressed_len` bytes
/// save at least 12.5 %? If not, it is stored raw.
pub fn saves_enough(logical_len: usize, compressed_len: usize) -> bool {
    compressed_len < logical_len && (logical_len - compressed_len) * 8 >= logical_len
}

/// Compresses one chunk at a time with one algorithm (a zstd context is kept between chunks).
pub struct ChunkCompressor {
    algorithm: Algorithm,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl ChunkCompressor {
    /// A compressor for `algorithm` (`None` never compresses).
    pub fn new(algorithm: Algorithm) -> Result<ChunkCompressor> {
        let zstd = match algorithm {
            Algorithm::Zstd => Some(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
            _ => None,
        };
        Ok(ChunkCompressor { algorithm, zstd })
    }

    /// The algorithm compressed chunks are stored with.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Compress `logical` into `out` (cleared first). True when that saves at least 12.5 % ([`saves_enough`]):
    /// then `out` holds the chunk to store; otherwise the chunk is to be stored raw.
    pub fn compress(&mut self, logical: &[u8], out: &mut Vec<u8>) -> io::Result<bool> {
        out.clear();
        match self.algorithm {
            Algorithm::None => Ok(false),
            Algorithm::Zstd => {
                out.reserve(zstd::zstd_safe::compress_bound(logical.len()));
                let zstd = self
                    .zstd
                    .as_mut()
                    .expect("zstd compressor exists for Algorithm::Zstd");
                zstd.compress_to_buffer(logical, out)?;
                Ok(saves_enough(logical.len(), out.len()))
            }
            Algorithm::Lz4 => {
                out.resize(lz4_flex::block::get_maximum_output_size(logical.len()), 0);
                let n = lz4_flex::block::compress_into(logical, out)
                    .map_err(|e| io::Error::other(format!("lz4 compression failed: {e}")))?;
                out.truncate(n);
                Ok(saves_enough(logical.len(), n))
            }
        }
    }
}

/// Streaming chunk compressor: takes arbitrary writes, cuts them into chunks of
/// `chunk_bytes` logical bytes, compresses each independently, writes the stored
/// bytes to the sink and returns the [`ChunkIndex`] on [`ChunkEncoder::finish`].
///
/// Memory: one logical chunk buffer plus one compression buffer (≈ 2 chunks).
/// With [`Algorithm::None`] every chunk is stored raw (the index still allows ranges).
pub struct ChunkEncoder<W: Write> {
    sink: W,
    algorithm: Algorithm,
    chunk_bytes: usize,
    pending: Vec<u8>,
    compressed: Vec<u8>,
    compressor: ChunkCompressor,
    entries: Vec<ChunkEntry>,
    logical_len: u64,
    stored_len: u64,
}

impl<W: Write> ChunkEncoder<W> {
    /// A new encoder writing stored bytes to `sink`. `chunk_bytes` must be in
    /// `4096..=CHUNK_BYTES_MAX`.
    pub fn new(sink: W, algorithm: Algorithm, chunk_bytes: u32) -> Result<ChunkEncoder<W>> {
        if !(4096..=CHUNK_BYTES_MAX).contains(&chunk_bytes) {
            return Err(FormatError::InvalidArgument(format!(
                "chunk_bytes {chunk_bytes} outside 4096..={CHUNK_BYTES_MAX}"
            )));
        }
        Ok(ChunkEncoder {
            sink,
            algorithm,
            chunk_bytes: chunk_bytes as usize,
            pending: Vec::with_capacity(chunk_bytes as usize),
            compressed: Vec::new(),
            compressor: ChunkCompressor::new(algorithm)?,
            entries: Vec::new(),
            logical_len: 0,
            stored_len: 0,
        })
    }

    /// Logical bytes taken so far.
    pub fn logical_len(&self) -> u64 {
        self.logical_len
    }

    /// Stored bytes written to the sink so far (complete chunks only).
    pub fn stored_len(&self) -> u64 {
        self.stored_len
    }

    /// Takes `data` (any length); writes every chunk that fills up.
    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let take = (self.chunk_bytes - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            self.logical_len += take as u64;
            if self.pending.len() == self.chunk_bytes {
                self.flush_chunk()?;
            }
        }
        Ok(())
    }

    /// Writes the last (short) chunk, flushes the sink and returns the index
    /// and the sink.
    pub fn finish(mut self) -> io::Result<(ChunkIndex, W)> {
        if !self.pending.is_empty() {
            self.flush_chunk()?;
        }
        self.sink.flush()?;
        let index = ChunkIndex {
            entries: self.entries,
        };
        debug_assert_eq!(index.logical_len(), self.logical_len);
        debug_assert!(ChunkIndex::from_entries(index.entries.clone()).is_ok());
        Ok((index, self.sink))
    }

    fn flush_chunk(&mut self) -> io::Result<()> {
        let logical_len = self.pending.len();
        assert!(logical_len > 0 && logical_len <= self.chunk_bytes);
        let compressed = self
            .compressor
            .compress(&self.pending, &mut self.compressed)?;
        let (algorithm, stored): (Algorithm, &[u8]) = if compressed {
            (self.algorithm, &self.compressed)
        } else {
            (Algorithm::None, &self.pending)
        };
        self.sink.write_all(stored)?;
        self.entries.push(ChunkEntry {
            logical_offset: self.logical_len - logical_len as u64,
            logical_len: logical_len as u64,
            stored_offset: self.stored_len,
            stored_len: stored.len() as u64,
            algorithm,
        });
        self.stored_len += stored.len() as u64;
        self.pending.clear();
        Ok(())
    }
}

impl<W: Write> Write for ChunkEncoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        ChunkEncoder::write(self, buf)?;
        Ok(buf.len())
    }
    /// Does nothing: a partial chunk is only written by [`ChunkEncoder::finish`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Compresses a whole buffer into chunks (convenience over [`ChunkEncoder`]).
pub fn encode_chunks(
    data: &[u8],
    algorithm: Algorithm,
    chunk_bytes: u32,
) -> Result<(ChunkIndex, Vec<u8>)> {
    let mut encoder = ChunkEncoder::new(Vec::new(), algorithm, chunk_bytes)?;
    encoder.write(data)?;
    Ok(encoder.finish()?)
}

thread_local! {
    /// One zstd decompression context per thread, reused across chunks.
    static ZSTD_DECOMPRESSOR: std::cell::RefCell<zstd::bulk::Decompressor<'static>> =
        std::cell::RefCell::new(zstd::bulk::Decompressor::new().expect("a zstd decompression context can be created"));
}

/// Decodes one chunk's stored bytes into `out` (cleared first).
pub fn decode_chunk(entry: &ChunkEntry, stored: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let what = "chunk";
    if stored.len() as u64 != entry.stored_len {
        return Err(FormatError::malformed(
            what,
            format!(
                "{} stored bytes, index says {}",
                stored.len(),
                entry.stored_len
            ),
        ));
    }
    out.clear();
    let logical_len = entry.logical_len as usize;
    match entry.algorithm {
        Algorithm::None => out.extend_from_slice(stored),
        Algorithm::Zstd => {
            // Also accepts concatenated and skippable frames (client-sent frames).
            out.reserve_exact(logical_len);
            ZSTD_DECOMPRESSOR
                .with_borrow_mut(|d| d.decompress_to_buffer(stored, out))
                .map_err(|e| {
                    FormatError::malformed(
                        what,
                        format!("zstd chunk at stored offset {}: {e}", entry.stored_offset),
                    )
                })?;
        }
        Algorithm::Lz4 => {
            out.resize(logical_len, 0);
            let n = lz4_flex::block::decompress_into(stored, out).map_err(|e| {
                FormatError::malformed(
                    what,
                    format!("lz4 chunk at stored offset {}: {e}", entry.stored_offset),
                )
            })?;
            out.truncate(n);
        }
    }
    if out.len() != logical_len {
        return Err(FormatError::malformed(
            what,
            format!(
                "chunk at stored offset {} decoded to {} bytes, index says {logical_len}",
                entry.stored_offset,
                out.len()
            ),
        ));
    }
    Ok(())
}

/// [`decode_chunk`] into `out`, which must be exactly the chunk's logical length: no intermediate buffer.
pub fn decode_chunk_into(entry: &ChunkEntry, stored: &[u8], out: &mut [u8]) -> Result<()> {
    let what = "chunk";
    if stored.len() as u64 != entry.stored_len || out.len() as u64 != entry.logical_len {
        return Err(FormatError::malformed(
            what,
            format!(
                "{} stored bytes into {} (index: {} stored, {} logical)",
                stored.len(),
                out.len(),
                entry.stored_len,
                entry.logical_len
            ),
        ));
    }
    let n = match entry.algorithm {
        Algorithm::None => {
            out.copy_from_slice(stored);
            out.len()
        }
        // Also accepts concatenated and skippable frames (client-sent frames).
        Algorithm::Zstd => ZSTD_DECOMPRESSOR
            .with_borrow_mut(|d| d.decompress_to_buffer(stored, out))
            .map_err(|e| {
                FormatError::malformed(
                    what,
                    format!("zstd chunk at stored offset {}: {e}", entry.stored_offset),
                )
            })?,
        Algorithm::Lz4 => lz4_flex::block::decompress_into(stored, out).map_err(|e| {
            FormatError::malformed(
                what,
                format!("lz4 chunk at stored offset {}: {e}", entry.stored_offset),
            )
        })?,
    };
    if n != out.len() {
        return Err(FormatError::malformed(
            what,
            format!(
                "chunk at stored offset {} decoded to {n} bytes, index says {}",
                entry.stored_offset,
                out.len()
            ),
        ));
    }
    Ok(())
}

/// One chunk a logical range touches, as [`StoredChunks`] yields it: the chunk, and which of its logical bytes
/// the range takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeChunk {
    /// The chunk.
    pub entry: ChunkEntry,
    /// Logical bytes of the chunk before the range (non-zero for the first chunk of a range only).
    pub skip: usize,
    /// Logical bytes of the chunk the range takes, from `skip` on (≥ 1).
    pub take: usize,
}

impl RangeChunk {
    /// Whether the range takes the whole chunk.
    pub fn is_whole(&self) -> bool {
        self.skip == 0 && self.take as u64 == self.entry.logical_len
    }

    /// Decodes the chunk's `stored` bytes and writes the bytes the range takes into `out` (exactly
    /// [`RangeChunk::take`] long). A whole chunk decodes straight into `out`; a partial one through a buffer of
    /// its own.
    pub fn decode_into(&self, stored: &[u8], out: &mut [u8]) -> Result<()> {
        if out.len() != self.take {
            return Err(FormatError::malformed(
                "chunk",
                format!(
                    "{} bytes asked of a range that takes {} of the chunk at stored offset {}",
                    out.len(),
                    self.take,
                    self.entry.stored_offset
                ),
            ));
        }
        if self.is_whole() {
            return decode_chunk_into(&self.entry, stored, out);
        }
        let mut chunk = Vec::new();
        decode_chunk(&self.entry, stored, &mut chunk)?;
        out.copy_from_slice(&chunk[self.skip..self.skip + self.take]);
        Ok(())
    }
}

/// The chunks a logical range of a chunked content touches, in order, each with its stored bytes read from
/// `stored`; see [`stored_chunks`]. Decoding is the caller's: [`RangeReader`] decodes them one at a time, a
/// caller with threads to spare may decode several at once ([`RangeChunk::decode_into`]).
pub struct StoredChunks<R> {
    index: ChunkIndex,
    stored: R,
    next_chunk: usize,
    /// Logical bytes of the range not yet yielded.
    remaining: u64,
    /// Bytes of the next chunk before the range (only the first).
    skip: usize,
}

/// The chunks of logical bytes `[logical_offset, logical_offset + len)` of the content whose stored bytes
/// `stored` holds (stored offset 0 = the reader's position 0). A range outside the content is
/// [`FormatError::InvalidRange`].
pub fn stored_chunks<R: Read + Seek>(
    index: &ChunkIndex,
    stored: R,
    logical_offset: u64,
    len: u64,
) -> Result<StoredChunks<R>> {
    let logical_len = index.logical_len();
    if logical_offset
        .checked_add(len)
        .is_none_or(|end| end > logical_len)
    {
        return Err(FormatError::InvalidRange {
            offset: logical_offset,
            len,
            logical_len,
        });
    }
    let (next_chunk, skip) = match index.chunk_at(logical_offset) {
        Some(i) => (
            i,
            (logical_offset - index.entries[i].logical_offset) as usize,
        ),
        None => (index.entries.len(), 0),
    };
    Ok(StoredChunks {
        index: index.clone(),
        stored,
        next_chunk,
        remaining: len,
        skip,
    })
}

impl<R: Read + Seek> StoredChunks<R> {
    /// A reader of the range's logical bytes, decoding the chunks one at a time ([`decode_range`]).
    pub fn decoded(self) -> RangeReader<R> {
        RangeReader {
            chunks: self,
            stored_buf: Vec::new(),
            chunk: Vec::new(),
            chunk_pos: 0,
            chunk_end: 0,
        }
    }

    /// The next chunk of the range, without reading it; `None` after the last.
    pub fn peek(&self) -> Option<RangeChunk> {
        if self.remaining == 0 {
            return None;
        }
        let entry = *self.index.entries.get(self.next_chunk)?;
        let take = (entry.logical_len - self.skip as u64).min(self.remaining) as usize;
        Some(RangeChunk {
            entry,
            skip: self.skip,
            take,
        })
    }

    /// Reads the next chunk's stored bytes into `buf[at..at + stored_len]` (growing `buf` when it is shorter,
    /// never shrinking it) and moves past the chunk; `None` after the last. Stored bytes that end inside the
    /// chunk are an error.
    pub fn read_next(&mut self, buf: &mut Vec<u8>, at: usize) -> Result<Option<RangeChunk>> {
        let got = self.next_with(|stored, entry| {
            let end = at + entry.stored_len as usize;
            if buf.len() < end {
                buf.resize(end, 0);
            }
            read_stored(stored, entry, &mut buf[at..end])
        })?;
        Ok(got.map(|(chunk, ())| chunk))
    }

    /// Moves past the next chunk, its stored bytes read by `read` (given the stored reader at the chunk's first
    /// stored byte, and the chunk); `None` after the last. `read` must consume exactly the chunk's stored bytes
    /// ([`read_stored`] reads them into a buffer).
    pub fn next_with<T>(
        &mut self,
        read: impl FnOnce(&mut R, &ChunkEntry) -> Result<T>,
    ) -> Result<Option<(RangeChunk, T)>> {
        let Some(chunk) = self.peek() else {
            return Ok(None);
        };
        self.stored
            .seek(SeekFrom::Start(chunk.entry.stored_offset))?;
        let got = read(&mut self.stored, &chunk.entry)?;
        self.next_chunk += 1;
        self.skip = 0;
        self.remaining -= chunk.take as u64;
        Ok(Some((chunk, got)))
    }
}

/// Reads the stored bytes of chunk `entry` (the reader at its first stored byte) into `out`, from its
/// `out.len()`-th last byte on: `out` holds the chunk's last `out.len()` stored bytes (all of them when it is
/// `stored_len` long). Stored bytes that end inside the chunk are an error.
pub fn read_stored<R: Read>(stored: &mut R, entry: &ChunkEntry, out: &mut [u8]) -> Result<()> {
    let before = entry.stored_len as usize - out.len();
    let mut n = 0;
    while n < out.len() {
        match stored.read(&mut out[n..]) {
            Ok(0) => {
                return Err(FormatError::malformed(
                    "chunked content",
                    format!(
                        "stored bytes end at {} inside a chunk of {} bytes at stored offset {}",
                        entry.stored_offset + (before + n) as u64,
                        entry.stored_len,
                        entry.stored_offset
                    ),
                ))
            }
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A reader of a logical range of a chunked content; see [`decode_range`].
pub struct RangeReader<R> {
    chunks: StoredChunks<R>,
    stored_buf: Vec<u8>,
    /// The current chunk decoded, and the range of it still to return.
    chunk: Vec<u8>,
    chunk_pos: usize,
    chunk_end: usize,
}

/// Returns a reader of logical bytes `[logical_offset, logical_offset + len)`
/// of the content whose stored bytes `stored` holds (stored offset 0 = the
/// reader's position 0). Only the chunks the range touches are read and decoded,
/// one at a time (memory ≈ two chunks). A range outside the content is
/// [`FormatError::InvalidRange`]; damaged chunks surface as `io::Error`
/// (`InvalidData`) from `read`.
pub fn decode_range<R: Read + Seek>(
    index: &ChunkIndex,
    stored: R,
    logical_offset: u64,
    len: u64,
) -> Result<RangeReader<R>> {
    Ok(stored_chunks(index, stored, logical_offset, len)?.decoded())
}

impl<R: Read + Seek> Read for RangeReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.chunk_pos >= self.chunk_end {
            let Some(chunk) = self.chunks.read_next(&mut self.stored_buf, 0)? else {
                return Ok(0);
            };
            let stored = &self.stored_buf[..chunk.entry.stored_len as usize];
            if chunk.is_whole() && chunk.take <= buf.len() {
                // A whole chunk fits: decoded straight into `buf`, no copy through `chunk`.
                decode_chunk_into(&chunk.entry, stored, &mut buf[..chunk.take])?;
                return Ok(chunk.take);
            }
            decode_chunk(&chunk.entry, stored, &mut self.chunk)?;
            self.chunk_pos = chunk.skip;
            self.chunk_end = chunk.skip + chunk.take;
        }
        let n = buf.len().min(self.chunk_end - self.chunk_pos);
        buf[..n].copy_from_slice(&self.chunk[self.chunk_pos..self.chunk_pos + n]);
        self.chunk_pos += n;
        Ok(n)
    }
}

/// A streaming decoder of a whole client-compressed stream; see [`decode_stream`].
pub struct StreamDecoder<R: Read>(StreamInner<R>);

enum StreamInner<R: Read> {
    None(R),
    Zstd(Box<zstd::stream::read::Decoder<'static, io::BufReader<R>>>),
    Lz4(Box<Lz4Frames<R>>),
}

/// Concatenated LZ4 frames (lz4_flex's decoder stops after one frame).
struct Lz4Frames<R: Read> {
    decoder: Option<lz4_flex::frame::FrameDecoder<io::BufReader<R>>>,
}

impl<R: Read> Read for Lz4Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use io::BufRead;
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let Some(decoder) = self.decoder.as_mut() else {
                return Ok(0);
            };
            let n = decoder
                .read(buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if n > 0 {
                return Ok(n);
            }
            // End of a frame: another one follows unless the input is exhausted.
            let mut inner = self.decoder.take().expect("checked above").into_inner();
            if inner.fill_buf()?.is_empty() {
                return Ok(0);
            }
            self.decoder = Some(lz4_flex::frame::FrameDecoder::new(inner));
        }
    }
}

/// Decodes a stream as a client sends it with `Content-Encoding`:
/// `Zstd` = one or more concatenated zstd frames (skippable frames allowed),
/// `Lz4` = one or more concatenated LZ4 frames (the LZ4 frame format, magic
/// `04 22 4D 18`; not the block format), `None` = passed through.
/// Memory is bounded by the codec windows (zstd ≤ its window, lz4 ≤ 4 MiB blocks).
pub fn decode_stream<R: Read>(algorithm: Algorithm, reader: R) -> Result<StreamDecoder<R>> {
    Ok(StreamDecoder(match algorithm {
        Algorithm::None => StreamInner::None(reader),
        Algorithm::Zstd => StreamInner::Zstd(Box::new(zstd::stream::read::Decoder::new(reader)?)),
        Algorithm::Lz4 => StreamInner::Lz4(Box::new(Lz4Frames {
            decoder: Some(lz4_flex::frame::FrameDecoder::new(
                io::BufReader::with_capacity(64 << 10, reader),
            )),
        })),
    }))
}

impl<R: Read> Read for StreamDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.0 {
            StreamInner::None(r) => r.read(buf),
            StreamInner::Zstd(d) => d.read(buf),
            StreamInner::Lz4(d) => d.read(buf),
        }
    }
}

/// A ranged read of a client-compressed stream without a frame index: decodes
/// from the start, discards `logical_offset` bytes, then returns `len` bytes.
/// Costs a decode of `logical_offset + len` bytes; use [`index_zstd_frames`]
/// when the stream allows it.
pub fn decode_stream_range<R: Read>(
    algorithm: Algorithm,
    reader: R,
    logical_offset: u64,
    len: u64,
) -> Result<io::Take<StreamDecoder<R>>> {
    let mut decoder = decode_stream(algorithm, reader)?;
    let skipped = io::copy(&mut (&mut decoder).take(logical_offset), &mut io::sink())?;
    if skipped < logical_offset {
        return Err(FormatError::InvalidRange {
            offset: logical_offset,
            len,
            logical_len: skipped,
        });
    }
    Ok(decoder.take(len))
}

const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// Scans a zstd stream (as a client sent it) and, if it is made of independent
/// frames that all declare their content size (each ≤ [`CHUNK_BYTES_MAX`]),
/// returns an index with one chunk per frame (algorithm `Zstd`), so
/// [`decode_range`] decodes only the frames a range needs. Skippable frames are
/// folded into the neighbouring data frame's stored bytes (zstd decodes past
/// them). Returns `Ok(None)` when the stream cannot be indexed (one frame
/// without a declared size, a frame too large, a dictionary frame, not zstd,
/// truncated); then use [`decode_stream_range`]. Reads the stream once, in
/// bounded memory.
pub fn index_zstd_frames<R: Read>(reader: R) -> Result<Option<ChunkIndex>> {
    let mut reader = io::BufReader::with_capacity(64 << 10, reader);
    let mut entries: Vec<ChunkEntry> = Vec::new();
    let (mut logical, mut stored) = (0u64, 0u64);
    // Stored bytes of skippable frames not yet attached to a data frame.
    let mut leading_skippable = 0u64;
    loop {
        let mut magic = [0u8; 4];
        match read_exact_or_eof(&mut reader, &mut magic)? {
            0 => break,
            4 => {}
            _ => return Ok(None),
        }
        let magic = u32::from_le_bytes(magic);
        if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
            let mut size = [0u8; 4];
            if read_exact_or_eof(&mut reader, &mut size)? != 4 {
                return Ok(None);
            }
            let size = u32::from_le_bytes(size) as u64;
            if skip_bytes(&mut reader, size)? != size {
                return Ok(None);
            }
            let frame_len = 8 + size;
            match entries.last_mut() {
                Some(last) if last.stored_len + frame_len <= CHUNK_BYTES_MAX as u64 => {
                    last.stored_len += frame_len
                }
                Some(_) => return Ok(None),
                None => leading_skippable += frame_len,
            }
            stored += frame_len;
            continue;
        }
        if magic != ZSTD_MAGIC {
            return Ok(None);
        }
        let Some((content_len, frame_len)) = zstd_frame_sizes(&mut reader)? else {
            return Ok(None);
        };
        let stored_len = frame_len + std::mem::take(&mut leading_skippable);
        if content_len == 0 {
            // An empty frame: fold it into the previous chunk like a skippable frame.
            match entries.last_mut() {
                Some(last) if last.stored_len + frame_len <= CHUNK_BYTES_MAX as u64 => {
                    last.stored_len += frame_len
                }
                Some(_) => return Ok(None),
                None => leading_skippable += stored_len,
            }
            stored += frame_len;
            continue;
        }
        if content_len > CHUNK_BYTES_MAX as u64 || stored_len > CHUNK_BYTES_MAX as u64 {
            return Ok(None);
        }
        entries.push(ChunkEntry {
            logical_offset: logical,
            logical_len: content_len,
            stored_offset: stored + frame_len - stored_len,
            stored_len,
            algorithm: Algorithm::Zstd,
        });
        logical += content_len;
        stored += frame_len;
    }
    if entries.is_empty() {
        return Ok(None);
    }
    Ok(ChunkIndex::from_entries(entries).ok())
}

/// After the 4 magic bytes: parses one zstd frame, skipping its blocks.
/// Returns (declared content size, frame length including magic), or None when
/// the frame has no declared size, uses a dictionary, or is malformed/truncated.
fn zstd_frame_sizes<R: Read>(reader: &mut R) -> Result<Option<(u64, u64)>> {
    let mut descriptor = [0u8; 1];
    if read_exact_or_eof(reader, &mut descriptor)? != 1 {
        return Ok(None);
    }
    let d = descriptor[0];
    let fcs_flag = d >> 6;
    let single_segment = d & 0x20 != 0;
    let reserved = d & 0x08 != 0;
    let checksum = d & 0x04 != 0;
    let dict_id_bytes = [0usize, 1, 2, 4][(d & 0x03) as usize];
    if reserved || dict_id_bytes != 0 {
        return Ok(None);
    }
    let window_bytes = usize::from(!single_segment);
    let fcs_bytes = match (fcs_flag, single_segment) {
        (0, true) => 1,
        (0, false) => return Ok(None), // content size unknown
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let mut header = [0u8; 9];
    let header = &mut header[..window_bytes + fcs_bytes];
    if read_exact_or_eof(reader, header)? != header.len() {
        return Ok(None);
    }
    let mut fcs = [0u8; 8];
    fcs[..fcs_bytes].copy_from_slice(&header[window_bytes..]);
    let mut content_len = u64::from_le_bytes(fcs);
    if fcs_bytes == 2 {
        content_len += 256;
    }
    let mut frame_len = 4 + 1 + header.len() as u64;
    loop {
        let mut block = [0u8; 3];
        if read_exact_or_eof(reader, &mut block)? != 3 {
            return Ok(None);
        }
        let b = u32::from_le_bytes([block[0], block[1], block[2], 0]);
        let last = b & 1 != 0;
        let block_size = (b >> 3) as u64;
        let body = match (b >> 1) & 3 {
            0 | 2 => block_size, // raw, compressed
            1 => 1,              // RLE
            _ => return Ok(None),
        };
        if skip_bytes(reader, body)? != body {
            return Ok(None);
        }
        frame_len += 3 + body;
        if last {
            break;
        }
    }
    if checksum {
        if skip_bytes(reader, 4)? != 4 {
            return Ok(None);
        }
        frame_len += 4;
    }
    Ok(Some((content_len, frame_len)))
}

/// Reads until `buf` is full or EOF; returns the bytes read.
pub(crate) fn read_exact_or_eof<R: Read + ?Sized>(
    reader: &mut R,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn skip_bytes<R: Read>(reader: &mut R, n: u64) -> io::Result<u64> {
    io::copy(&mut reader.take(n), &mut io::sink())
}
