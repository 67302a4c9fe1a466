//! Finding extents in a raw grid bucket image and rebuilding objects from them.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::chunk::{decode_range, Algorithm};
use crate::error::{FormatError, Result};
use crate::extent::{
    is_extent_start, parse_extent_header, ExtentHeader, EXTENT_ALIGN_BYTES, EXTENT_HEADER_BYTES,
    EXTENT_OVERHEAD_BYTES, EXTENT_TRAILER_BYTES,
};
use crate::manifest::{Manifest, Role, StoredForm};
use crate::pack::{is_pack_start, PackReader, PACK_HEADER_BYTES};

/// An extent found by [`scan_extents`], checksum verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundExtent {
    /// Where the extent starts in the image (a multiple of 4096).
    pub offset_bytes: u64,
    /// Its header.
    pub header: ExtentHeader,
}

impl FoundExtent {
    /// Where its payload starts in the image.
    pub fn payload_offset(&self) -> u64 {
        self.offset_bytes + crate::EXTENT_HEADER_BYTES as u64
    }
}

/// Iterator returned by [`scan_extents`].
pub struct ExtentScanner<R> {
    reader: BufReader<R>,
    /// Where `reader` is, or None when unknown (after an error).
    reader_pos: Option<u64>,
    len_bytes: u64,
    pos: u64,
    buf: Vec<u8>,
}

/// Walks `len_bytes` of a grid bucket image (the logical space of one data
/// disk) and yields every extent that starts at a 4 KiB boundary and whose
/// checksum holds, in image order. Extents whose magic is found but whose
/// checksum fails, or that run past the end, are yielded as
/// `Err(FormatError::DamagedExtent)` and the scan goes on at the next 4 KiB
/// block; read errors are yielded as `Err(FormatError::Io)` and the scan goes
/// on too. Memory is bounded (a 1 MiB read buffer).
pub fn scan_extents<R: Read + Seek>(reader: R, len_bytes: u64) -> ExtentScanner<R> {
    ExtentScanner {
        reader: BufReader::with_capacity(1 << 20, reader),
        reader_pos: None,
        len_bytes,
        pos: 0,
        buf: vec![0u8; 64 << 10],
    }
}

impl<R: Read + Seek> ExtentScanner<R> {
    /// Image bytes looked at so far.
    pub fn scanned_bytes(&self) -> u64 {
        self.pos.min(self.len_bytes)
    }

    fn seek_to(&mut self, pos: u64) -> std::io::Result<()> {
        match self.reader_pos {
            Some(at) if at == pos => {}
            Some(at) if pos > at && pos - at <= (1 << 20) => {
                self.reader.seek_relative((pos - at) as i64)?
            }
            _ => {
                self.reader_pos = None;
                self.reader.seek(SeekFrom::Start(pos))?;
            }
        }
        self.reader_pos = Some(pos);
        Ok(())
    }

    fn read_exact(&mut self, n: usize) -> std::io::Result<()> {
        let result = self.reader.read_exact(&mut self.buf[..n]);
        match (&result, self.reader_pos) {
            (Ok(()), Some(at)) => self.reader_pos = Some(at + n as u64),
            _ => self.reader_pos = None,
        }
        result
    }

    /// Looks at the block at `self.pos`: Ok(None) when no extent starts there.
    fn try_block(&mut self) -> Result<Option<FoundExtent>> {
        let at = self.pos;
        self.seek_to(at)?;
        self.read_exact(EXTENT_HEADER_BYTES)?;
        if !is_extent_start(&self.buf[..EXTENT_HEADER_BYTES]) {
            return Ok(None);
        }
        let header = parse_extent_header(&self.buf[..EXTENT_HEADER_BYTES])?;
        let damaged = |reason: String| FormatError::DamagedExtent {
            offset_bytes: at,
            header: Some(header),
            reason,
        };
        let end = at + EXTENT_OVERHEAD_BYTES as u64 + header.payload_len as u64;
        if end > self.len_bytes {
            return Err(damaged(format!(
                "its {} payload bytes run past the end of the image ({} bytes)",
                header.payload_len, self.len_bytes
            )));
        }
        let mut crc = crc_fast::crc32_iscsi(&self.buf[..EXTENT_HEADER_BYTES]);
        let mut left = header.payload_len as u64;
        while left > 0 {
            let n = left.min(self.buf.len() as u64) as usize;
            self.read_exact(n)
                .map_err(|e| damaged(format!("payload unreadable: {e}")))?;
            crc = crate::crc32c_append(crc, &self.buf[..n]);
            left -= n as u64;
        }
        self.read_exact(EXTENT_TRAILER_BYTES)
            .map_err(|e| damaged(format!("checksum unreadable: {e}")))?;
        let stored = u32::from_le_bytes(self.buf[..4].try_into().unwrap());
        if stored != crc {
            return Err(damaged(format!(
                "checksum mismatch: stored {stored:#010x}, computed {crc:#010x}"
            )));
        }
        Ok(Some(FoundExtent {
            offset_bytes: at,
            header,
        }))
    }
}

impl<R: Read + Seek> Iterator for ExtentScanner<R> {
    type Item = Result<FoundExtent>;
    fn next(&mut self) -> Option<Self::Item> {
        while self.pos + EXTENT_OVERHEAD_BYTES as u64 <= self.len_bytes {
            match self.try_block() {
                Ok(None) => self.pos += EXTENT_ALIGN_BYTES,
                Ok(Some(found)) => {
                    self.pos += found.header.extent_bytes();
                    return Some(Ok(found));
                }
                Err(e) => {
                    self.pos += EXTENT_ALIGN_BYTES;
                    return Some(Err(e));
                }
            }
        }
        self.pos = self.pos.max(self.len_bytes);
        None
    }
}

/// One extent of a content that does not fit in one extent; see [`plan_content_extents`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentExtent {
    /// Extent id (0 holds the manifest record).
    pub extent_id: u16,
    /// The extent's payload length.
    pub payload_len: u32,
    /// First stored byte of the content in this extent.
    pub stored_offset: u64,
    /// Stored bytes of the content in this extent.
    pub stored_len: u64,
}

/// How a content of `stored_len` bytes whose manifest record has
/// `manifest_record_len` bytes is cut into extents of at most
/// `extent_payload_bytes_max` payload bytes: extent 0 = manifest record + the
/// first stored bytes, then full extents, the last one shorter. Errors when
/// more than 65,536 extents would be needed or the manifest alone does not fit.
pub fn plan_content_extents(
    manifest_record_len: usize,
    stored_len: u64,
    extent_payload_bytes_max: u32,
) -> Result<Vec<ContentExtent>> {
    let max = extent_payload_bytes_max as u64;
    if manifest_record_len as u64 > max {
        return Err(FormatError::InvalidArgument(format!(
            "manifest record of {manifest_record_len} bytes does not fit in an extent payload of {max} bytes"
        )));
    }
    let first = stored_len.min(max - manifest_record_len as u64);
    let rest = stored_len - first;
    let count = if rest == 0 { 1 } else { 1 + rest.div_ceil(max) };
    if count > u16::MAX as u64 + 1 {
        return Err(FormatError::InvalidArgument(format!(
            "{stored_len} stored bytes need {count} extents of {max} payload bytes; at most 65536 are possible"
        )));
    }
    let mut extents = vec![ContentExtent {
        extent_id: 0,
        payload_len: (manifest_record_len as u64 + first) as u32,
        stored_offset: 0,
        stored_len: first,
    }];
    let mut offset = first;
    while offset < stored_len {
        let n = (stored_len - offset).min(max);
        extents.push(ContentExtent {
            extent_id: extents.len() as u16,
            payload_len: n as u32,
            stored_offset: offset,
            stored_len: n,
        });
        offset += n;
    }
    Ok(extents)
}

/// Progress of [`salvage_objects`], reported after each step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SalvageProgress {
    /// Image bytes scanned so far.
    pub scanned_bytes: u64,
    /// Image length.
    pub image_bytes: u64,
    /// Objects written so far.
    pub objects_recovered: u64,
}

/// What [`salvage_objects`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SalvageReport {
    /// Objects written to the output directory, BLAKE3 verified.
    pub objects_recovered: u64,
    /// Logical bytes written (as-sent objects: their stored bytes).
    pub bytes_recovered: u64,
    /// Valid extents found.
    pub extents_found: u64,
    /// Extents found by magic but damaged (offset and reason).
    pub damaged_extents: Vec<String>,
    /// Objects with missing extents, or whose bytes fail BLAKE3 or decoding:
    /// `bucket/key: reason` (or the object id when the manifest is lost).
    pub incomplete_objects: Vec<String>,
    /// Older objects under a key for which a newer one was recovered.
    pub superseded_objects: u64,
}

/// Rebuilds every object whose extents are intact in a grid bucket image,
/// without the catalog: writes `out_dir/<bucket>/<key>` (logical bytes; as-sent
/// objects keep their stored, compressed bytes) and a JSON sidecar
/// `out_dir/_sidecars/<bucket>/<key>.json` with the metadata. Unsafe key
/// components (`..`, `.`, empty) are escaped. When several objects claim a key,
/// the newest (`created_unix_ms`) wins.
pub fn salvage_objects<R: Read + Seek>(
    image: R,
    image_bytes: u64,
    out_dir: &Path,
    progress: &mut dyn FnMut(&SalvageProgress),
) -> Result<SalvageReport> {
    let mut report = SalvageReport::default();
    let mut state = SalvageProgress {
        image_bytes,
        ..Default::default()
    };
    let mut image = image;

    // 1. Find every intact extent, grouped by object id and extent id.
    let mut objects: BTreeMap<u128, BTreeMap<u16, FoundExtent>> = BTreeMap::new();
    {
        let mut scanner = scan_extents(&mut image, image_bytes);
        while let Some(item) = scanner.next() {
            match item {
                Ok(found) => {
                    report.extents_found += 1;
                    objects
                        .entry(found.header.object_id)
                        .or_default()
                        .entry(found.header.extent_id)
                        .or_insert(found);
                }
                Err(e) => report.damaged_extents.push(e.to_string()),
            }
            state.scanned_bytes = scanner.scanned_bytes();
            progress(&state);
        }
    }

    // 2. Read the manifests: content heads and pack entries.
    let mut candidates: Vec<Candidate> = Vec::new();
    for (object_id, extents) in &objects {
        if let Err(e) = collect_candidates(
            &mut image,
            *object_id,
            extents,
            &mut candidates,
            &mut report,
        ) {
            report
                .incomplete_objects
                .push(format!("object {object_id:032x}: {e}"));
        }
    }

    // 3. The newest object per key wins (a part is written only through the part lists that name it).
    let mut by_content: HashMap<([u8; 32], Algorithm), usize> = HashMap::new();
    for (i, c) in candidates.iter().enumerate() {
        by_content.insert((c.manifest.blake3, c.manifest.content_encoding), i);
    }
    let objects = candidates
        .iter()
        .filter(|c| c.manifest.role == Role::Object)
        .count();
    let mut winners: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, c) in candidates.iter().enumerate() {
        if c.manifest.role != Role::Object {
            continue;
        }
        let k = (c.manifest.bucket.as_str(), c.manifest.key.as_str());
        match winners.get(&k) {
            Some(&j) if candidates[j].manifest.created_unix_ms >= c.manifest.created_unix_ms => {}
            _ => {
                winners.insert(k, i);
            }
        }
    }
    report.superseded_objects = (objects - winners.len()) as u64;
    let mut order: Vec<usize> = winners.into_values().collect();
    order.sort_unstable();

    // 4. Decode, verify and write each winner.
    for i in order {
        let c = &candidates[i];
        match write_object(&mut image, &candidates, &by_content, c, out_dir) {
            Ok(bytes) => {
                report.objects_recovered += 1;
                report.bytes_recovered += bytes;
                state.objects_recovered += 1;
                progress(&state);
            }
            Err(e) => report
                .incomplete_objects
                .push(format!("{}/{}: {e}", c.manifest.bucket, c.manifest.key)),
        }
    }
    Ok(report)
}

/// An object whose manifest was read, and where its stored bytes are in the image.
struct Candidate {
    manifest: Manifest,
    /// (image offset, length) of each piece of the stored bytes, in order.
    segments: Vec<(u64, u64)>,
}

fn collect_candidates<R: Read + Seek>(
    image: &mut R,
    object_id: u128,
    extents: &BTreeMap<u16, FoundExtent>,
    candidates: &mut Vec<Candidate>,
    report: &mut SalvageReport,
) -> Result<()> {
    let Some(first) = extents.get(&0) else {
        let ids: Vec<u16> = extents.keys().copied().collect();
        return Err(FormatError::malformed(
            "object",
            format!("extent 0 (the manifest) is missing; found extents {ids:?}"),
        ));
    };
    let payload_len = first.header.payload_len as u64;
    image.seek(SeekFrom::Start(first.payload_offset()))?;
    let mut reader = BufReader::with_capacity(1 << 20, image.by_ref().take(payload_len));
    let mut head = [0u8; PACK_HEADER_BYTES];
    let head_len = crate::chunk::read_exact_or_eof(&mut reader, &mut head)?;
    if is_pack_start(&head[..head_len]) {
        let pack = PackReader::new(head.chain(reader), payload_len)?;
        for entry in pack {
            match entry {
                Ok(entry) => candidates.push(Candidate {
                    segments: vec![(
                        first.payload_offset() + entry.stored_offset,
                        entry.manifest.stored_len,
                    )],
                    manifest: entry.manifest,
                }),
                Err(e) => report
                    .incomplete_objects
                    .push(format!("pack {object_id:032x}: {e}")),
            }
        }
        return Ok(());
    }
    let (manifest, record_len) = Manifest::read_from(head[..head_len].chain(reader))?;
    let mut segments = vec![(
        first.payload_offset() + record_len as u64,
        payload_len - record_len as u64,
    )];
    let mut found = payload_len - record_len as u64;
    let mut next_id = 1u16;
    while found < manifest.stored_len {
        let Some(extent) = extents.get(&next_id) else {
            return Err(FormatError::malformed(
                "object",
                format!(
                    "{}/{}: extent {next_id} is missing ({found} of {} stored bytes found)",
                    manifest.bucket, manifest.key, manifest.stored_len
                ),
            ));
        };
        segments.push((extent.payload_offset(), extent.header.payload_len as u64));
        found += extent.header.payload_len as u64;
        next_id = next_id
            .checked_add(1)
            .ok_or_else(|| FormatError::malformed("object", "more than 65536 extents"))?;
    }
    if found != manifest.stored_len {
        return Err(FormatError::malformed(
            "object",
            format!(
                "{}/{}: extents hold {found} stored bytes, the manifest says {}",
                manifest.bucket, manifest.key, manifest.stored_len
            ),
        ));
    }
    candidates.push(Candidate { manifest, segments });
    Ok(())
}

/// The bytes of `c` as the client sent them (decoded for chunked contents, stored bytes otherwise).
fn bytes_as_sent<'a, R: Read + Seek>(
    image: &'a mut R,
    c: &Candidate,
) -> Result<Box<dyn Read + 'a>> {
    let m = &c.manifest;
    let stored = SegmentReader::new(image, &c.segments);
    Ok(match &m.stored_form {
        StoredForm::Raw | StoredForm::AsSent { .. } => Box::new(stored),
        StoredForm::Chunked(index) => Box::new(decode_range(index, stored, 0, m.logical_len)?),
        StoredForm::Parts(_) => {
            return Err(FormatError::malformed(
                "object",
                "a part list names another part list".to_string(),
            ))
        }
    })
}

/// Copy `source` to `file`; returns the bytes copied and their BLAKE3.
fn copy_hashed(source: &mut dyn Read, file: &mut impl Write) -> Result<(u64, blake3::Hash)> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])?;
        total += n as u64;
    }
    Ok((total, hasher.finalize()))
}

/// Writes one object and its sidecar; returns the bytes written. A part-list object is written part by part,
/// each part found among `candidates` by its content id and checked against its BLAKE3.
fn write_object<R: Read + Seek>(
    image: &mut R,
    candidates: &[Candidate],
    by_content: &HashMap<([u8; 32], Algorithm), usize>,
    c: &Candidate,
    out_dir: &Path,
) -> Result<u64> {
    let m = &c.manifest;
    let relative = object_path(&m.bucket, &m.key);
    let path = out_dir.join(&relative);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let tmp = path.with_file_name(format!(
        "{}.salvage-tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let written = (|| -> Result<u64> {
        let mut file = io::BufWriter::new(fs::File::create(&tmp)?);
        let total = match &m.stored_form {
            StoredForm::Parts(parts) => {
                let mut total = 0u64;
                for (n, p) in parts.iter().enumerate() {
                    let Some(&i) = by_content.get(&(p.blake3, p.encoding)) else {
                        return Err(FormatError::malformed(
                            "object",
                            format!(
                                "part {n} (BLAKE3 {}) is not on this disk",
                                blake3::Hash::from(p.blake3)
                            ),
                        ));
                    };
                    let part = &candidates[i];
                    let (len, hash) = copy_hashed(&mut bytes_as_sent(image, part)?, &mut file)?;
                    if hash.as_bytes() != &p.blake3 || part.manifest.logical_len != p.logical_len {
                        return Err(FormatError::malformed(
                            "object",
                            format!("part {n}: {len} bytes with BLAKE3 {hash}, the part list says {} logical bytes with BLAKE3 {}", p.logical_len, blake3::Hash::from(p.blake3)),
                        ));
                    }
                    total += len;
                }
                if m.content_encoding == Algorithm::None && total != m.logical_len {
                    return Err(FormatError::malformed(
                        "object",
                        format!(
                            "parts hold {total} bytes, the manifest says {}",
                            m.logical_len
                        ),
                    ));
                }
                total
            }
            _ => {
                let (total, hash) = copy_hashed(&mut bytes_as_sent(image, c)?, &mut file)?;
                let expected_len = if matches!(m.stored_form, StoredForm::AsSent { .. }) {
                    m.stored_len
                } else {
                    m.logical_len
                };
                if hash.as_bytes() != &m.blake3 || total != expected_len {
                    return Err(FormatError::malformed(
                        "object",
                        format!("{total} bytes with BLAKE3 {hash}, the manifest says {expected_len} bytes with BLAKE3 {}", blake3::Hash::from(m.blake3)),
                    ));
                }
                total
            }
        };
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(total)
    })();
    let total = match written {
        Ok(total) => total,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    fs::rename(&tmp, &path)?;
    let sidecar = out_dir
        .join("_sidecars")
        .join(&relative)
        .with_added_extension("json");
    if let Some(parent) = sidecar.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(&sidecar, sidecar_json(m))?;
    Ok(total)
}

fn sidecar_json(m: &Manifest) -> String {
    let (stored_form, chunks) = match &m.stored_form {
        StoredForm::Raw => ("raw", 0),
        StoredForm::Chunked(index) => ("chunked", index.entries().len()),
        StoredForm::AsSent { frames } => {
            ("as_sent", frames.as_ref().map_or(0, |f| f.entries().len()))
        }
        StoredForm::Parts(parts) => ("parts", parts.len()),
    };
    let note = match (&m.stored_form, m.content_encoding) {
        (StoredForm::AsSent { .. } | StoredForm::Parts(_), Algorithm::Zstd) => {
            "kept as the client sent it: zstd-compressed (Content-Encoding: zstd); decode with `zstd -d`".to_string()
        }
        (StoredForm::AsSent { .. } | StoredForm::Parts(_), Algorithm::Lz4) => {
            "kept as the client sent it: LZ4 frame format (Content-Encoding: lz4); decode with `lz4 -d`".to_string()
        }
        _ => "decoded to the bytes the client sent".to_string(),
    };
    let value = serde_json::json!({
        "bucket": m.bucket,
        "key": m.key,
        "content_type": m.content_type,
        "content_encoding": if m.content_encoding == Algorithm::None { "identity" } else { m.content_encoding.as_str() },
        "user_metadata": m.user_metadata,
        "stored_form": stored_form,
        "chunks": chunks,
        "logical_len": m.logical_len,
        "stored_len": m.stored_len,
        "blake3": blake3::Hash::from(m.blake3).to_hex().to_string(),
        "created_unix_ms": m.created_unix_ms,
        "dataset": m.dataset,
        "note": note,
    });
    serde_json::to_string_pretty(&value).expect("a JSON value serializes")
}

/// `<bucket>/<key>` as a relative path that cannot escape the output
/// directory: `%` becomes `%25`; components that are empty, `.` or `..` are
/// percent-encoded (`%2E%2E`, and `%00` for an empty one).
fn object_path(bucket: &str, key: &str) -> PathBuf {
    let mut path = PathBuf::from(escape_component(bucket));
    for part in key.split('/') {
        path.push(escape_component(part));
    }
    path
}

fn escape_component(part: &str) -> String {
    match part {
        "" => "%00".to_string(),
        "." => "%2E".to_string(),
        ".." => "%2E%2E".to_string(),
        _ => part.replace('%', "%25").replace('\0', "%00"),
    }
}

/// Reads the stored bytes of a content spread over pieces of the image.
struct SegmentReader<'a, R> {
    image: &'a mut R,
    /// (image offset, length, stored offset of the piece).
    segments: Vec<(u64, u64, u64)>,
    stored_len: u64,
    pos: u64,
}

impl<'a, R: Read + Seek> SegmentReader<'a, R> {
    fn new(image: &'a mut R, pieces: &[(u64, u64)]) -> Self {
        let mut segments = Vec::with_capacity(pieces.len());
        let mut stored = 0;
        for &(offset, len) in pieces {
            segments.push((offset, len, stored));
            stored += len;
        }
        SegmentReader {
            image,
            segments,
            stored_len: stored,
            pos: 0,
        }
    }
}

impl<R: Read + Seek> Read for SegmentReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.stored_len || buf.is_empty() {
            return Ok(0);
        }
        let i = self
            .segments
            .partition_point(|&(_, len, start)| start + len <= self.pos);
        let (offset, len, start) = self.segments[i];
        let within = self.pos - start;
        let n = (len - within).min(buf.len() as u64) as usize;
        self.image.seek(SeekFrom::Start(offset + within))?;
        let n = self.image.read(&mut buf[..n])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "image ended inside an extent",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read + Seek> Seek for SegmentReader<'_, R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.stored_len.checked_add_signed(d),
        };
        self.pos = target
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}
