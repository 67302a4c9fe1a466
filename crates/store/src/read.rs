//! Reads: an [`ObjectReader`] streams an object's bytes from the cache or, through read promises, from the grid,
//! decoding what needs decoding and verifying what it reads.
//!
//! Verification: every block the grid delivers has been checked by the disk layer against its crc32c (and rebuilt when
//! it did not match, `permafrost_idr`). A read of the whole object (as received) is checked at its end (an
//! [`EndCheck`]): against the object's full-object CRC when it has one (CRC32C, CRC32 or CRC64NVME, computed from the
//! received bytes at upload and stored with the object; a few times cheaper per byte than BLAKE3), else against the
//! content's BLAKE3 (its id). Reads that verify (`prefer_grid`) always use BLAKE3. When that end check covers every
//! byte delivered, the extents are not checked as well (a verifying read still checks their crc32c, to see damage in
//! the bytes a read does not deliver: an extent's header and crc): one check pass per byte instead of two. Otherwise a
//! segment read from its start streams its whole extent (header, payload, crc) and checks the extent's crc32c and the
//! BLAKE3 the catalog recorded. A mismatch ends the stream with an `InvalidData` error before end-of-file, so a caller
//! never sees a clean end after wrong bytes. Memory: one 64 KiB buffer for a cache file (a grid segment is read in
//! place from the engine's chunk buffers) plus the engine's read-ahead of at most two read promises (the next extent's
//! or the next part's opens before the current one ends, so the disk reads on across the boundary) and, for chunked
//! contents, about two chunks; a long read of a persisted chunked content reads on a read-ahead thread and decodes
//! on the decode threads ([`ReadAhead`], a few 1 MiB blocks ahead, several decoding at once), whose errors keep
//! their place in the stream, so all of the above holds
//! unchanged. Opening ahead delivers and checks nothing early: every byte still passes the same checks, in order,
//! before the caller sees it.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::sync::Arc;

use bytes::Bytes;
use permafrost_catalog::{
    ContentId, ContentPart, ContentRecord, ContentSegment, Encoding, ExtentKind, StoredForm,
    INLINE_CACHE_PATH,
};
use permafrost_engine::ReadPromise;
use permafrost_format::{Algorithm, ChunkIndex, EXTENT_HEADER_BYTES, EXTENT_TRAILER_BYTES};

use crate::checksum::{ChecksumAlgorithm, Hasher};
use crate::multipart_checksum::ChecksumType;
use crate::read_ahead::ReadAhead;
use crate::store::{ByteRange, Inner};
use crate::{Result, StoreError};

const BUFFER_BYTES: usize = 64 << 10;
/// Reads of a persisted chunked content at least this long decode on a read-ahead thread ([`ReadAhead`]);
/// shorter ones (a small GET, a mount's page) stay on the caller's thread.
const READ_AHEAD_BYTES_MIN: u64 = 2 << 20;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// What a whole read of an object's bytes as received is checked against at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndCheck {
    /// The content's BLAKE3 (its id).
    Blake3,
    /// The object's full-object CRC over its bytes as uploaded (the digest, big-endian as S3 writes it).
    Crc(ChecksumAlgorithm, Vec<u8>),
    /// Checked by the caller: a part read whole inside a part list that is checked as a whole.
    Outer,
}

impl EndCheck {
    /// The cheapest check an object's verified checksums (`(name, base64)`, as stored with it) allow: a
    /// full-object CRC, else BLAKE3.
    pub(crate) fn for_object(checksums: &[(String, String)]) -> EndCheck {
        // Cheapest first (per byte on this VM's profile: CRC32C and CRC32 about half of CRC64NVME).
        for algorithm in [
            ChecksumAlgorithm::Crc32c,
            ChecksumAlgorithm::Crc32,
            ChecksumAlgorithm::Crc64nvme,
        ] {
            let Some((_, value)) = checksums.iter().find(|(n, _)| n == algorithm.name()) else {
                continue;
            };
            if ChecksumType::of_value(value) != ChecksumType::FullObject {
                continue;
            }
            if let Ok(digest) = algorithm.decode(value) {
                return EndCheck::Crc(algorithm, digest);
            }
        }
        EndCheck::Blake3
    }
}

/// A reader of an object's body (see [`crate::Store::open_object`]).
pub struct ObjectReader {
    body: Box<dyn TakeBlock>,
    encoding: Encoding,
    range: Option<(u64, u64)>,
    total_bytes: u64,
    /// The contents this reader reads (the object's and its parts'), held against the collector.
    _hold: Option<ReadHold>,
}

/// Contents a reader is using, counted in `Inner::reading` until it is dropped: a collection for cache room
/// (`gc::collect_for_room`, which ignores most of the grace period) never removes them under a reader.
pub(crate) struct ReadHold {
    inner: Arc<Inner>,
    ids: Vec<ContentId>,
}

impl ReadHold {
    pub(crate) fn new(inner: &Arc<Inner>, ids: Vec<ContentId>) -> ReadHold {
        let mut reading = inner.reading.lock();
        for id in &ids {
            *reading.entry(*id).or_insert(0) += 1;
        }
        drop(reading);
        ReadHold {
            inner: Arc::clone(inner),
            ids,
        }
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        let mut reading = self.inner.reading.lock();
        for id in &self.ids {
            if let Some(n) = reading.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    reading.remove(id);
                }
            }
        }
    }
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader")
            .field("encoding", &self.encoding)
            .field("range", &self.range)
            .finish()
    }
}

impl ObjectReader {
    /// The encoding of the body: the object's upload encoding when the stored bytes are returned as they are,
    /// else `Identity`.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Bytes the body has.
    pub fn len(&self) -> u64 {
        self.range.map_or(self.total_bytes, |(_, len)| len)
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(offset, length)` of a ranged read within the representation of `total_bytes()` bytes.
    pub fn range(&self) -> Option<(u64, u64)> {
        self.range
    }

    /// Size of the whole representation (decoded size, or stored size when returned as stored).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Open `content` (with `parts`, its parts when it is a part list: [`Inner::parts_of`]) for an object whose
    /// verified checksums are `object_checksums` (they choose the [`EndCheck`] of a whole read). `prefer_grid`:
    /// read persisted contents from the grid even when they are cached, and check whole reads against BLAKE3
    /// (verify).
    pub(crate) fn open(
        inner: &Arc<Inner>,
        content: &ContentRecord,
        parts: Vec<(ContentPart, ContentRecord)>,
        range: Option<ByteRange>,
        accept_encoding: Option<Encoding>,
        prefer_grid: bool,
        object_checksums: &[(String, String)],
    ) -> Result<ObjectReader> {
        let check = if prefer_grid {
            EndCheck::Blake3
        } else {
            EndCheck::for_object(object_checksums)
        };
        Self::open_checked(
            inner,
            content,
            parts,
            range,
            accept_encoding,
            prefer_grid,
            check,
        )
    }

    fn open_checked(
        inner: &Arc<Inner>,
        content: &ContentRecord,
        parts: Vec<(ContentPart, ContentRecord)>,
        range: Option<ByteRange>,
        accept_encoding: Option<Encoding>,
        prefer_grid: bool,
        check: EndCheck,
    ) -> Result<ObjectReader> {
        let ids = std::iter::once(content.id)
            .chain(parts.iter().map(|(_, record)| record.id))
            .collect();
        let hold = ReadHold::new(inner, ids);
        let mut reader = Self::open_unheld(
            inner,
            content,
            parts,
            range,
            accept_encoding,
            prefer_grid,
            check,
        )?;
        reader._hold = Some(hold);
        Ok(reader)
    }

    fn open_unheld(
        inner: &Arc<Inner>,
        content: &ContentRecord,
        parts: Vec<(ContentPart, ContentRecord)>,
        range: Option<ByteRange>,
        accept_encoding: Option<Encoding>,
        prefer_grid: bool,
        check: EndCheck,
    ) -> Result<ObjectReader> {
        if content.stored_form == StoredForm::Parts {
            return Self::open_parts(
                inner,
                content,
                parts,
                range,
                accept_encoding,
                prefer_grid,
                check,
            );
        }
        let as_stored = content.id.encoding != Encoding::Identity
            && accept_encoding == Some(content.id.encoding);
        let total_bytes = if as_stored {
            content.stored_bytes
        } else {
            content.logical_bytes
        };
        let resolved = range.map(|r| r.resolve(total_bytes)).transpose()?;
        let (offset, len) = resolved.unwrap_or((0, total_bytes));
        let whole = offset == 0 && len == total_bytes;
        // The bytes as received are the decoded bytes of identity uploads and the stored bytes of pre-compressed
        // ones: a whole read of them is checked at its end (below: the object's full-object CRC or the content's
        // BLAKE3), which then covers every byte this reader delivers, and the disk layer has checked every block
        // it read against its crc32c (`permafrost_idr`): the extents need no check of their own.
        let as_received = (content.id.encoding == Encoding::Identity) || as_stored;
        let content_checked = whole && as_received;
        // A read that verifies (`prefer_grid`, the verifier's) still checks every extent whole, header and crc
        // included, which a read for a client does not deliver.
        let extents = if !whole {
            ExtentChecks::None
        } else if !content_checked {
            ExtentChecks::Full
        } else if prefer_grid {
            ExtentChecks::Crc
        } else {
            ExtentChecks::None
        };
        let mut source = open_source(inner, content, prefer_grid, extents)?;
        let on_grid = source.on_grid();
        let index = || -> Result<Option<ChunkIndex>> {
            if content.chunk_index.is_empty() {
                return Ok(None);
            }
            Ok(Some(ChunkIndex::decode(&content.chunk_index)?.0))
        };
        let seek = |source: &mut Box<dyn Source>, to: u64| {
            source
                .seek(SeekFrom::Start(to))
                .map(|_| ())
                .map_err(|e| StoreError::Internal(e.to_string()))
        };
        // Each branch starts the source at the first stored byte it needs, up to the last: a grid read's
        // promises begin reading now, while the caller prepares the response.
        let mut body: Box<dyn TakeBlock> = if as_stored || content.stored_form == StoredForm::Raw {
            if whole {
                // Read to the source's own end so the last extent's checks run. A grid source hands out slices
                // of its verified chunks whole ([`Source::take_block`]).
                source.start(content.stored_bytes);
                Box::new(SourceBody(source))
            } else {
                seek(&mut source, offset)?;
                source.start(offset + len);
                copied(source.take(len))
            }
        } else if let Some(index) = index()? {
            if len > 0 {
                if let (Some(first), Some(last)) =
                    (index.chunk_at(offset), index.chunk_at(offset + len - 1))
                {
                    let (first, last) = (&index.entries()[first], &index.entries()[last]);
                    seek(&mut source, first.stored_offset)?;
                    source.start(last.stored_offset + last.stored_len);
                }
            }
            let chunks = permafrost_format::stored_chunks(&index, source, offset, len)?;
            if on_grid && len >= READ_AHEAD_BYTES_MIN {
                // The grid read and its checks on a thread of their own, ahead of the caller, and the decode
                // on the decode threads, several chunks at once.
                match ReadAhead::start(chunks) {
                    Ok(ahead) => Box::new(ahead),
                    Err((e, chunks)) => {
                        tracing::warn!("reading without read-ahead: cannot start a thread: {e}");
                        copied(chunks.decoded())
                    }
                }
            } else {
                copied(chunks.decoded())
            }
        } else {
            let algorithm = match content.id.encoding {
                Encoding::Zstd => Algorithm::Zstd,
                Encoding::Lz4 => Algorithm::Lz4,
                Encoding::Identity => {
                    return Err(StoreError::Internal(format!(
                        "content {} is chunked without a chunk index",
                        content.id
                    )))
                }
            };
            // No frame index: decode from the start and skip (costs a decode of `offset` bytes).
            source.start(content.stored_bytes);
            copied(permafrost_format::decode_stream_range(
                algorithm, source, offset, len,
            )?)
        };
        if content_checked {
            body = end_checked(body, check, content, total_bytes);
        }
        Ok(ObjectReader {
            body,
            encoding: if as_stored {
                content.id.encoding
            } else {
                Encoding::Identity
            },
            range: resolved,
            total_bytes,
            _hold: None,
        })
    }
}

impl ObjectReader {
    /// A part-list content: its parts one after the other, each opened when the read reaches it (a part read
    /// whole is checked against its own BLAKE3, as any content). Pre-compressed uploads: the parts are the stream
    /// as sent, decoded as one stream unless the client accepts the encoding.
    fn open_parts(
        inner: &Arc<Inner>,
        content: &ContentRecord,
        parts: Vec<(ContentPart, ContentRecord)>,
        range: Option<ByteRange>,
        accept_encoding: Option<Encoding>,
        prefer_grid: bool,
        check: EndCheck,
    ) -> Result<ObjectReader> {
        let encoding = content.id.encoding;
        let sent_bytes: u64 = parts.iter().map(|(p, _)| p.logical_bytes).sum();
        if encoding == Encoding::Identity && sent_bytes != content.logical_bytes {
            return Err(StoreError::Internal(format!(
                "part-list content {}: parts of {sent_bytes} bytes for {} logical bytes",
                content.id, content.logical_bytes
            )));
        }
        let as_stored = encoding != Encoding::Identity && accept_encoding == Some(encoding);
        let total_bytes = if as_stored {
            sent_bytes
        } else {
            content.logical_bytes
        };
        let resolved = range.map(|r| r.resolve(total_bytes)).transpose()?;
        let (offset, len) = resolved.unwrap_or((0, total_bytes));
        let body: Box<dyn TakeBlock> = if encoding == Encoding::Identity || as_stored {
            let whole = offset == 0 && len == total_bytes;
            match check {
                // The object's CRC covers the concatenation: the parts need no check of their own.
                EndCheck::Crc(..) if whole => end_checked(
                    Box::new(PartsBody::new(
                        inner,
                        parts,
                        offset,
                        offset + len,
                        prefer_grid,
                        EndCheck::Outer,
                    )),
                    check,
                    content,
                    total_bytes,
                ),
                _ => Box::new(PartsBody::new(
                    inner,
                    parts,
                    offset,
                    offset + len,
                    prefer_grid,
                    EndCheck::Blake3,
                )),
            }
        } else {
            let algorithm = crate::multipart::algorithm_of(encoding);
            let sent = PartsBody::new(inner, parts, 0, sent_bytes, prefer_grid, EndCheck::Blake3);
            copied(permafrost_format::decode_stream_range(
                algorithm, sent, offset, len,
            )?)
        };
        Ok(ObjectReader {
            body,
            encoding: if as_stored {
                encoding
            } else {
                Encoding::Identity
            },
            range: resolved,
            total_bytes,
            _hold: None,
        })
    }
}

impl TakeBlock for PartsBody {
    fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        // Within the current part only: its end, and opening the next part, are `read`'s.
        let Some((reader, _)) = self.current.as_mut() else {
            return Ok(None);
        };
        let block = reader.take_block(max)?;
        if let Some(b) = &block {
            self.pos += b.len() as u64;
            self.open_ahead_when_due();
        }
        Ok(block)
    }
}

/// Bytes `[pos, end)` of the concatenation of parts, reading one part at a time. The part after the one being
/// read is opened when the read comes within [`open_ahead_bytes`] (stored bytes) of the current part's end (at
/// most two parts open): a persisted part's read promise starts its read-ahead then, so the disk reads on across
/// the part boundary instead of waiting until the reader reaches it, and the next part's reads do not take the
/// disk from the current part's while the reader still needs those first.
struct PartsBody {
    inner: Arc<Inner>,
    parts: Vec<(ContentPart, ContentRecord)>,
    pos: u64,
    end: u64,
    /// The open part's reader and the object position where it ends.
    current: Option<(ObjectReader, u64)>,
    /// The next part's reader, opened ahead, with the object positions where it starts and ends.
    next: Option<(ObjectReader, u64, u64)>,
    /// The object position from which the next part is opened ahead; `u64::MAX` once it was (or there is none).
    ahead_at: u64,
    prefer_grid: bool,
    /// The check of a part read whole.
    part_check: EndCheck,
}

impl PartsBody {
    fn new(
        inner: &Arc<Inner>,
        parts: Vec<(ContentPart, ContentRecord)>,
        pos: u64,
        end: u64,
        prefer_grid: bool,
        part_check: EndCheck,
    ) -> PartsBody {
        PartsBody {
            inner: Arc::clone(inner),
            parts,
            pos,
            end,
            current: None,
            next: None,
            ahead_at: u64::MAX,
            prefer_grid,
            part_check,
        }
    }

    /// Open the part holding byte `pos` for `[pos, min(end, part end))`; returns its reader and the object
    /// position where it ends.
    fn open_at(&self, pos: u64) -> io::Result<(ObjectReader, u64)> {
        let i = self
            .parts
            .partition_point(|(p, _)| p.logical_offset + p.logical_bytes <= pos);
        let Some((part, record)) = self.parts.get(i) else {
            return Err(invalid(format!(
                "the parts end before byte {pos} of the object"
            )));
        };
        let from = pos - part.logical_offset;
        let to = self.end.min(part.logical_offset + part.logical_bytes) - part.logical_offset;
        let range =
            (from > 0 || to < part.logical_bytes).then_some(ByteRange::FromTo(from, to - 1));
        let reader = ObjectReader::open_checked(
            &self.inner,
            record,
            Vec::new(),
            range,
            None,
            self.prefer_grid,
            self.part_check.clone(),
        )
        .map_err(|e| io::Error::other(format!("part {} of the object: {e}", part.seq)))?;
        self.inner.touch(record.id);
        Ok((reader, part.logical_offset + to))
    }

    /// Make the part holding `self.pos` current (the one opened ahead when it is that one); the one after it is
    /// opened ahead near its end ([`PartsBody::open_ahead_when_due`]).
    fn open_next(&mut self) -> io::Result<()> {
        let pos = self.pos;
        let current = match self.next.take() {
            Some((reader, start, end)) if start == pos => (reader, end),
            _ => self.open_at(pos)?,
        };
        let part_end = current.1;
        self.current = Some(current);
        self.ahead_at = u64::MAX;
        if part_end < self.end {
            // Within `open_ahead_bytes` of the part's stored bytes before its end, in object positions.
            let i = self
                .parts
                .partition_point(|(p, _)| p.logical_offset + p.logical_bytes <= pos);
            let (part, record) = &self.parts[i];
            let ahead = u128::from(open_ahead_bytes(&self.inner)) * u128::from(part.logical_bytes)
                / u128::from(record.stored_bytes.max(1));
            self.ahead_at = part_end.saturating_sub(u64::try_from(ahead).unwrap_or(u64::MAX));
            self.open_ahead_when_due();
        }
        Ok(())
    }

    /// Open the part after the current one once the read is near the current one's end. A failure is not
    /// reported here: the part is opened again when reached.
    fn open_ahead_when_due(&mut self) {
        if self.pos < self.ahead_at {
            return;
        }
        self.ahead_at = u64::MAX;
        let Some((_, part_end)) = self.current.as_ref() else {
            return;
        };
        let part_end = *part_end;
        self.next = self
            .open_at(part_end)
            .ok()
            .map(|(reader, end)| (reader, part_end, end));
    }
}

/// How far before the end of a read promise's range the next one is opened, in stored bytes: two engine chunks.
/// The promise's read-ahead is then reading its last chunks, so the next promise's first disk read starts about
/// as its last one ends: the disk reads on without a pause, and the next promise does not compete with the
/// chunks the reader needs first.
fn open_ahead_bytes(inner: &Inner) -> u64 {
    2 * inner.engine.config().chunk_bytes_max
}

impl Read for PartsBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some((reader, part_end)) = self.current.as_mut() {
                let n = reader.read(buf)?;
                if n > 0 || buf.is_empty() {
                    self.pos += n as u64;
                    self.open_ahead_when_due();
                    return Ok(n);
                }
                if self.pos != *part_end {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("a part of the object ended early, at byte {}", self.pos),
                    ));
                }
                // The part is done (and checked): the next read opens the next one.
                self.current = None;
            }
            if self.pos >= self.end || buf.is_empty() {
                return Ok(0);
            }
            self.open_next()?;
        }
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.body.read(buf)
    }
}

impl ObjectReader {
    /// The next bytes (at most `max`, never none) without a copy, when the reader holds them in a block it can
    /// give away (a read-ahead's decoded block); `None` when it cannot, and then [`Read::read`] delivers the
    /// same bytes by copy. The two can be mixed: every byte comes exactly once, in order, through the same
    /// checks (an end check has hashed a block before it is handed over, and a mismatch is still the error of
    /// the read that meets the end).
    pub fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        self.body.take_block(max)
    }
}

/// A body reader of an [`ObjectReader`]: [`Read`], plus blocks handed over whole where it has them
/// ([`ObjectReader::take_block`]).
pub(crate) trait TakeBlock: Read + Send {
    /// See [`ObjectReader::take_block`].
    fn take_block(&mut self, _max: usize) -> io::Result<Option<Bytes>> {
        Ok(None)
    }
}

/// A reader that has no blocks to hand over: every byte is copied by `read`.
struct Copied<R>(R);

impl<R: Read> Read for Copied<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read + Send> TakeBlock for Copied<R> {}

impl TakeBlock for Box<dyn TakeBlock> {
    fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        (**self).take_block(max)
    }
}

fn copied(reader: impl Read + Send + 'static) -> Box<dyn TakeBlock> {
    Box::new(Copied(reader))
}

impl TakeBlock for ReadAhead {
    fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        self.take_block(max)
    }
}

/// The stored bytes of a content, from the cache or the grid.
pub(crate) trait Source: Read + Seek + Send {
    /// Whether the bytes come from the grid (read promises), not the cache.
    fn on_grid(&self) -> bool {
        false
    }

    /// Start reading at the current position now, for a read that continues to the stored position `end`
    /// (the grid: open the read promise, and the next segment's when the read goes on into it), instead of at
    /// the first `read`. Nothing is delivered or checked earlier than without it; an error opening ahead is
    /// reported by the `read` that needs the bytes.
    fn start(&mut self, _end: u64) {}

    /// The next stored bytes (at most `max`, never none) without a copy, as [`TakeBlock::take_block`]; `None`
    /// when the source has none to give away here (then `read` delivers them).
    fn take_block(&mut self, _max: usize) -> io::Result<Option<Bytes>> {
        Ok(None)
    }
}

/// A whole source as a body: its blocks handed over where it has them.
struct SourceBody(Box<dyn Source>);

impl Read for SourceBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl TakeBlock for SourceBody {
    fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        self.0.take_block(max)
    }
}

impl Source for io::Cursor<Vec<u8>> {}
impl Source for BufReader<File> {}
impl Source for GridSource {
    fn on_grid(&self) -> bool {
        true
    }

    fn start(&mut self, end: u64) {
        self.end = end.min(self.stored_bytes);
        if self.pos < self.end && !matches!(&self.current, Some((_, at, _)) if *at == self.pos) {
            let _ = self.open_at(self.pos);
        }
    }

    /// Slices of the read promise's verified chunks, up to the end of each segment's output; the end of a
    /// segment (its extent check) and of the content are `read`'s.
    fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        loop {
            if self.pos >= self.stored_bytes || max == 0 {
                return Ok(None);
            }
            self.current_at_pos()?;
            let (stream, at, _) = self.current.as_mut().expect("opened above");
            if let Some(block) = stream.take_block(max)? {
                *at += block.len() as u64;
                self.pos += block.len() as u64;
                self.open_ahead_when_due();
                return Ok(Some(block));
            }
            // The segment's output is delivered: finish its check, then go on in the next one.
            stream.read_to_check(&mut [])?;
            self.current = None;
        }
    }
}

/// Which checks a grid read makes of the extents it streams whole.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ExtentChecks {
    /// None: a ranged read (no extent is read whole), or one whose caller checks every byte it delivers.
    None,
    /// crc32c only: a verifying read whose caller checks the content's BLAKE3 over every byte it delivers.
    Crc,
    /// crc32c and the BLAKE3 the catalog recorded.
    Full,
}

pub(crate) fn open_source(
    inner: &Arc<Inner>,
    content: &ContentRecord,
    prefer_grid: bool,
    checks: ExtentChecks,
) -> Result<Box<dyn Source>> {
    if !prefer_grid || content.state != permafrost_catalog::ContentState::Persisted {
        if content.cache_path.as_deref() == Some(INLINE_CACHE_PATH) {
            // Cached in the catalog; evicted meanwhile when gone: read the grid.
            if let Some(bytes) = inner.catalog.inline_bytes(&content.id)? {
                return Ok(Box::new(io::Cursor::new(bytes)));
            }
        } else if let Some(path) = &content.cache_path {
            match File::open(inner.cache.absolute(path)) {
                Ok(f) => return Ok(Box::new(BufReader::with_capacity(BUFFER_BYTES, f))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {} // evicted meanwhile: read the grid
                Err(e) => {
                    return Err(StoreError::Internal(format!(
                        "cannot open cache file {path}: {e}"
                    )))
                }
            }
        }
    }
    let segments = inner.catalog.segments(&content.id)?;
    let stored: u64 = segments.iter().map(|s| s.segment.length_bytes).sum();
    if segments.is_empty() && content.stored_bytes > 0 || stored != content.stored_bytes {
        return Err(StoreError::Internal(format!(
            "content {} is neither in the cache nor completely on the grid ({stored} of {} stored bytes placed)",
            content.id, content.stored_bytes
        )));
    }
    let mut start = 0;
    let segments = segments
        .into_iter()
        .map(|s| {
            let at = start;
            start += s.segment.length_bytes;
            (at, s)
        })
        .collect();
    Ok(Box::new(GridSource {
        inner: Arc::clone(inner),
        segments,
        stored_bytes: stored,
        end: stored,
        pos: 0,
        current: None,
        next: None,
        ahead_at: u64::MAX,
        checks,
    }))
}

/// Stored bytes of a content on the grid, seekable (a seek to another position opens a new read promise).
///
/// A read that goes on past the segment it is in opens the next segment's read promise when it comes within
/// [`open_ahead_bytes`] of the current one's end (at most two promises): the disk keeps reading across the
/// extent boundary, and the disk never looks idle to the spin-up scrub slice between them (it waits for a
/// disk's readers).
struct GridSource {
    inner: Arc<Inner>,
    /// `(first stored byte, segment)` in order.
    segments: Vec<(u64, ContentSegment)>,
    stored_bytes: u64,
    /// Where the caller's read is expected to stop ([`Source::start`]; the end of the content by default): the
    /// next segment is opened ahead only when the read goes on into it.
    end: u64,
    pos: u64,
    /// The open stream, the stored position it will deliver next and its segment's index.
    current: Option<(SegmentStream, u64, usize)>,
    /// The next segment's stream, opened ahead from its start, and its index.
    next: Option<(SegmentStream, usize)>,
    /// The stored position from which the next segment is opened ahead; `u64::MAX` once it was (or there is
    /// none).
    ahead_at: u64,
    checks: ExtentChecks,
}

impl GridSource {
    /// The stream of segment `i` from stored position `pos` inside it.
    fn open_segment(&self, i: usize, pos: u64) -> io::Result<SegmentStream> {
        let (start, s) = &self.segments[i];
        let within = pos - start;
        let checks = if within == 0 && s.extent.kind == ExtentKind::Content {
            self.checks
        } else {
            ExtentChecks::None
        };
        SegmentStream::open(&self.inner, s, within, checks)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Make sure the current stream is the one delivering `pos` (a stream left behind by a seek finishes its
    /// check first when its output was all delivered).
    fn current_at_pos(&mut self) -> io::Result<()> {
        if !matches!(&self.current, Some((_, at, _)) if *at == self.pos) {
            if let Some((mut old, _, _)) = self.current.take() {
                if old.check.is_some() && old.out_done() {
                    old.read_to_check(&mut [])?;
                }
            }
            self.open_at(self.pos)?;
        }
        Ok(())
    }

    /// Make the stream at `pos` current (the one opened ahead when it starts there); the next segment's is
    /// opened ahead near its end when the read goes on into it ([`GridSource::open_ahead_when_due`]).
    fn open_at(&mut self, pos: u64) -> io::Result<()> {
        let i = self
            .segments
            .partition_point(|(start, s)| start + s.segment.length_bytes <= pos);
        let stream = match self.next.take() {
            Some((stream, j)) if j == i && self.segments[i].0 == pos => stream,
            _ => self.open_segment(i, pos)?,
        };
        self.current = Some((stream, pos, i));
        let (start, s) = &self.segments[i];
        let segment_end = start + s.segment.length_bytes;
        self.ahead_at = if segment_end < self.end && i + 1 < self.segments.len() {
            segment_end.saturating_sub(open_ahead_bytes(&self.inner))
        } else {
            u64::MAX
        };
        self.open_ahead_when_due();
        Ok(())
    }

    /// Open the segment after the current one once the read is near the current one's end. A failure is not
    /// reported here: the segment is opened again when the read reaches it.
    fn open_ahead_when_due(&mut self) {
        if self.pos < self.ahead_at {
            return;
        }
        self.ahead_at = u64::MAX;
        let Some((_, _, i)) = self.current.as_ref() else {
            return;
        };
        let i = *i;
        let (start, s) = &self.segments[i];
        let segment_end = start + s.segment.length_bytes;
        self.next = self
            .open_segment(i + 1, segment_end)
            .ok()
            .map(|stream| (stream, i + 1));
    }
}

impl Read for GridSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos >= self.stored_bytes || buf.is_empty() {
                // Let a verifying stream finish its check before the end.
                if let Some((stream, _, _)) = self.current.as_mut() {
                    let mut nothing = [0u8; 0];
                    stream.read_to_check(&mut nothing)?;
                }
                return Ok(0);
            }
            self.current_at_pos()?;
            let (stream, at, _) = self.current.as_mut().expect("opened above");
            let n = stream.read(buf)?;
            if n == 0 {
                // The segment is done (and checked): the next read opens the next one (opened ahead, usually).
                self.current = None;
                continue;
            }
            *at += n as u64;
            self.pos += n as u64;
            self.open_ahead_when_due();
            return Ok(n);
        }
    }
}

impl Seek for GridSource {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => p as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
            SeekFrom::End(d) => self.stored_bytes as i128 + d as i128,
        };
        if target < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start",
            ));
        }
        self.pos = target as u64;
        Ok(self.pos)
    }
}

/// Checks of a whole extent while it streams.
struct ExtentCheck {
    crc: u32,
    hasher: blake3::Hasher,
    /// Header + payload bytes (what the crc covers).
    crc_end: u64,
    /// + trailer (what the BLAKE3 covers).
    hash_end: u64,
    /// Whether the BLAKE3 is computed and compared (else the crc32c only).
    hash: bool,
    trailer: Vec<u8>,
    expected: Option<[u8; 32]>,
    what: String,
    done: bool,
    /// The mismatch found, repeated by every later read (the stream never ends cleanly after it).
    failed: Option<String>,
}

/// One segment's bytes from one read promise, read in place from the promise's chunk buffers
/// ([`std::io::BufRead`]): the checks run over them there and only the output window is copied, once, into
/// the caller's buffer.
struct SegmentStream {
    promise: ReadPromise,
    /// Bytes consumed from the promise.
    at: u64,
    /// Output window, relative to the promise's start.
    out_start: u64,
    out_end: u64,
    check: Option<ExtentCheck>,
}

impl SegmentStream {
    /// Stream the segment's bytes from `within` on. With `checks` other than `None` (`within` is 0 then): read
    /// the whole extent and verify it.
    fn open(
        inner: &Inner,
        s: &ContentSegment,
        within: u64,
        checks: ExtentChecks,
    ) -> Result<SegmentStream> {
        let header = EXTENT_HEADER_BYTES as u64;
        let e = &s.extent;
        let (promise_start, out_start, needed_end, check) = if checks != ExtentChecks::None {
            let crc_end = header + e.payload_bytes;
            let hash_end = crc_end + EXTENT_TRAILER_BYTES as u64;
            let check = ExtentCheck {
                crc: 0,
                hasher: blake3::Hasher::new(),
                crc_end,
                hash_end,
                hash: checks == ExtentChecks::Full,
                trailer: Vec::with_capacity(4),
                expected: e.blake3,
                what: format!(
                    "extent {} (grid bucket {}, offset {})",
                    e.extent_id, e.grid_bucket, e.offset
                ),
                done: false,
                failed: None,
            };
            (
                e.offset,
                header + s.segment.offset_in_payload,
                hash_end,
                Some(check),
            )
        } else {
            let first = e.offset + header + s.segment.offset_in_payload + within;
            let aligned = first / 4096 * 4096;
            let end = e.offset + header + s.segment.offset_in_payload + s.segment.length_bytes;
            (aligned, first - aligned, end - aligned, None)
        };
        let out_end = if check.is_some() {
            out_start + s.segment.length_bytes
        } else {
            needed_end
        };
        let promise_len = needed_end.div_ceil(4096) * 4096;
        let promise = inner
            .engine
            .read(e.grid_bucket as usize, promise_start, promise_len)?;
        Ok(SegmentStream {
            promise,
            at: 0,
            out_start,
            out_end,
            check,
        })
    }

    fn needed_end(&self) -> u64 {
        self.check
            .as_ref()
            .map_or(self.out_end, |c| c.hash_end.max(self.out_end))
    }

    fn out_done(&self) -> bool {
        self.at >= self.out_end
    }

    /// The next output bytes (at most `max`) as a slice of the promise's verified chunk, fed to the checks like
    /// `read`'s; `None` once the window is delivered (the check at the end is `read`'s).
    fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        use std::io::BufRead;
        if self.at < self.out_start {
            // An empty buffer takes no output: this consumes (and checks) the bytes before the window.
            let delivered = self.read(&mut [])?;
            debug_assert_eq!(delivered, 0);
        }
        if self.at < self.out_start || self.at >= self.out_end || max == 0 {
            return Ok(None);
        }
        let start = self.at;
        let want = max.min((self.out_end - start) as usize);
        let available = self.promise.fill_buf()?;
        if available.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the grid read ended early",
            ));
        }
        let take = want.min(available.len());
        if let Some(c) = self.check.as_mut() {
            Self::check_bytes(c, start, &available[..take]);
        }
        let block = self.promise.take_bytes(take)?;
        self.at += take as u64;
        Ok(Some(block))
    }

    /// Once the output window is delivered: consume the rest of what the check needs (no output) and check.
    fn read_to_check(&mut self, _unused: &mut [u8]) -> io::Result<()> {
        if self.check.is_none() || !self.out_done() {
            return Ok(());
        }
        while self.read(&mut [])? > 0 {}
        Ok(())
    }

    /// Feed the checks with `bytes`, the promise's bytes from `start` on.
    fn check_bytes(check: &mut ExtentCheck, start: u64, bytes: &[u8]) {
        let n = bytes.len() as u64;
        let crc_part = (check.crc_end.saturating_sub(start)).min(n) as usize;
        check.crc = permafrost_format::crc32c_append(check.crc, &bytes[..crc_part]);
        let hash_part = (check.hash_end.saturating_sub(start)).min(n) as usize;
        if check.hash {
            check.hasher.update(&bytes[..hash_part]);
        }
        if hash_part > crc_part {
            check.trailer.extend_from_slice(&bytes[crc_part..hash_part]);
        }
    }

    fn finish_check(&mut self) -> io::Result<()> {
        let Some(c) = self.check.as_mut() else {
            return Ok(());
        };
        if c.done {
            return match &c.failed {
                Some(message) => Err(invalid(message.clone())),
                None => Ok(()),
            };
        }
        c.done = true;
        let failure = match <[u8; 4]>::try_from(&c.trailer[..]).map(u32::from_le_bytes) {
            Err(_) => Some(format!("{}: trailer missing", c.what)),
            Ok(stored) if stored != c.crc => Some(format!(
                "{}: crc32c mismatch (stored {stored:#010x}, computed {:#010x})",
                c.what, c.crc
            )),
            Ok(_)
                if c.hash
                    && c.expected
                        .is_some_and(|e| *c.hasher.finalize().as_bytes() != e) =>
            {
                Some(format!("{}: BLAKE3 differs from the catalog's", c.what))
            }
            Ok(_) => None,
        };
        c.failed = failure.clone();
        match failure {
            Some(message) => Err(invalid(message)),
            None => Ok(()),
        }
    }
}

impl Read for SegmentStream {
    /// Output bytes of the window; an empty `buf` reads nothing while output is left, and after the window runs
    /// the rest of the check (0 = done and checked).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::io::BufRead;
        loop {
            let needed = self.needed_end();
            if self.at >= needed {
                self.finish_check()?;
                return Ok(0);
            }
            let start = self.at;
            let in_window = start >= self.out_start && start < self.out_end;
            if in_window && buf.is_empty() {
                return Ok(0);
            }
            let available = self.promise.fill_buf()?;
            if available.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the grid read ended early",
                ));
            }
            let available = &available[..available.len().min((needed - start) as usize)];
            // Up to the next window edge: bytes before the window or after it (checked only), or output.
            let take = if in_window {
                available
                    .len()
                    .min((self.out_end - start) as usize)
                    .min(buf.len())
            } else if start < self.out_start {
                available.len().min((self.out_start - start) as usize)
            } else {
                available.len()
            };
            let bytes = &available[..take];
            if let Some(c) = self.check.as_mut() {
                Self::check_bytes(c, start, bytes);
            }
            if in_window {
                buf[..take].copy_from_slice(bytes);
            }
            self.promise.consume(take);
            self.at += take as u64;
            if in_window {
                return Ok(take);
            }
        }
    }
}

/// `body` checked at its end by `check` (length and digest), as `content`'s bytes as received.
fn end_checked(
    body: Box<dyn TakeBlock>,
    check: EndCheck,
    content: &ContentRecord,
    total_bytes: u64,
) -> Box<dyn TakeBlock> {
    let digest = match check {
        EndCheck::Outer => return body,
        EndCheck::Blake3 => Digest::Blake3(Box::new(blake3::Hasher::new()), content.id.hash),
        EndCheck::Crc(algorithm, expected) => {
            Digest::Crc(algorithm, Box::new(algorithm.hasher()), expected)
        }
    };
    Box::new(HashCheck {
        inner: body,
        digest: Some(digest),
        expected_bytes: total_bytes,
        seen_bytes: 0,
        what: content.id.to_string(),
    })
}

/// A running digest and the value it must reach.
enum Digest {
    Blake3(Box<blake3::Hasher>, [u8; 32]),
    Crc(ChecksumAlgorithm, Box<Hasher>, Vec<u8>),
}

impl Digest {
    fn update(&mut self, data: &[u8]) {
        match self {
            Digest::Blake3(h, _) => {
                h.update(data);
            }
            Digest::Crc(_, h, _) => h.update(data),
        }
    }

    /// `None` when it matches, else what differed.
    fn mismatch(self) -> Option<String> {
        match self {
            Digest::Blake3(h, expected) => {
                (*h.finalize().as_bytes() != expected).then(|| "BLAKE3 mismatch".to_string())
            }
            Digest::Crc(algorithm, h, expected) => (h.finish() != expected)
                .then(|| format!("{} mismatch with the object's", algorithm.name())),
        }
    }
}

/// Checks the digest and length of a whole body at its end.
struct HashCheck<R> {
    inner: R,
    /// `None` once checked.
    digest: Option<Digest>,
    expected_bytes: u64,
    seen_bytes: u64,
    what: String,
}

impl<R: TakeBlock> TakeBlock for HashCheck<R> {
    fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        // The clean end and its check are `read`'s: a block is only ever bytes before the end.
        let block = self.inner.take_block(max)?;
        if let Some(b) = &block {
            if let Some(d) = self.digest.as_mut() {
                d.update(b);
            }
            self.seen_bytes += b.len() as u64;
        }
        Ok(block)
    }
}

impl<R: Read> Read for HashCheck<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            if let Some(d) = self.digest.as_mut() {
                d.update(&buf[..n]);
            }
            self.seen_bytes += n as u64;
            return Ok(n);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        if self.seen_bytes != self.expected_bytes {
            return Err(invalid(format!(
                "content {}: {} bytes read, {} expected",
                self.what, self.seen_bytes, self.expected_bytes
            )));
        }
        if let Some(d) = self.digest.take() {
            if let Some(what) = d.mismatch() {
                // Every later read repeats the error: the stream never ends cleanly after it.
                self.digest = None;
                self.seen_bytes = u64::MAX;
                return Err(invalid(format!("content {}: {what}", self.what)));
            }
        }
        Ok(0)
    }
}
