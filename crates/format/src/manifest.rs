//! The manifest: what salvage needs to rebuild an object without the catalog.
//!
//! A content's first extent payload is `manifest record | stored bytes…`; a
//! pack entry is `entry_len | manifest record | stored bytes`. The record
//! layout is given byte by byte in docs/formats.md ("Manifest record").

use std::collections::BTreeMap;
use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::chunk::{Algorithm, ChunkIndex};
use crate::error::{FormatError, Result};

/// First bytes of a manifest record: `"PFMN"`.
pub const MANIFEST_MAGIC: [u8; 4] = *b"PFMN";
/// Manifest record version.
pub const MANIFEST_VERSION: u8 = 1;
/// Bytes before the body: magic, version, body length.
pub const MANIFEST_PREFIX_BYTES: usize = 9;
/// Largest body accepted: 64 MiB (a 1 TiB content at 1 MiB chunks needs ≈ 9 MiB).
pub const MANIFEST_BODY_BYTES_MAX: u32 = 64 << 20;

/// How a content's bytes are stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredForm {
    /// Stored bytes are the logical bytes.
    Raw,
    /// Compressed by the server in independent chunks.
    Chunked(ChunkIndex),
    /// Stored exactly as the client sent it (pre-compressed with
    /// `Manifest::content_encoding`); `frames` indexes independent zstd
    /// frames when the stream has them ([`crate::index_zstd_frames`]).
    AsSent {
        /// Frame index for ranged decoding, when available.
        frames: Option<ChunkIndex>,
    },
}

/// Everything about a content and the object that first stored it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// S3 bucket name.
    pub bucket: String,
    /// Object key.
    pub key: String,
    /// User metadata (`x-amz-meta-*`, names without the prefix).
    pub user_metadata: BTreeMap<String, String>,
    /// `Content-Type`, if the client sent one.
    pub content_type: Option<String>,
    /// The `Content-Encoding` the client sent: `None` = identity.
    pub content_encoding: Algorithm,
    /// How the bytes are stored.
    pub stored_form: StoredForm,
    /// Decoded bytes of the content.
    pub logical_len: u64,
    /// Stored bytes of the content (what follows the manifest, across extents).
    pub stored_len: u64,
    /// BLAKE3 of the bytes as the client sent them (the content id's hash):
    /// the logical bytes for `Raw`/`Chunked`, the stored bytes for `AsSent`.
    pub blake3: [u8; 32],
    /// When the object was created, Unix milliseconds.
    pub created_unix_ms: u64,
    /// Dataset id (S3 bucket + key prefix).
    pub dataset: String,
}

impl Manifest {
    /// Checks that the lengths and the stored form agree.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(FormatError::malformed("manifest", reason));
        let index_agrees = |index: &ChunkIndex| {
            index.logical_len() == self.logical_len && index.stored_len() == self.stored_len
        };
        match &self.stored_form {
            StoredForm::Raw if self.logical_len != self.stored_len => bad(format!(
                "raw content with logical length {} != stored length {}",
                self.logical_len, self.stored_len
            )),
            StoredForm::Raw if self.content_encoding != Algorithm::None => bad(format!(
                "raw content with content encoding {}",
                self.content_encoding
            )),
            StoredForm::Chunked(index)
            | StoredForm::AsSent {
                frames: Some(index),
            } if !index_agrees(index) => bad(format!(
                "chunk index covers {} logical / {} stored bytes, manifest says {} / {}",
                index.logical_len(),
                index.stored_len(),
                self.logical_len,
                self.stored_len
            )),
            StoredForm::AsSent { .. } if self.content_encoding == Algorithm::None => {
                bad("as-sent content without a content encoding".into())
            }
            _ => Ok(()),
        }
    }

    /// The binary record: `magic "PFMN" | version u8 | body_len u32 | body | crc32c(body) u32`.
    /// Fails if [`Manifest::validate`] fails or a string is longer than 4 GiB.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut body = Vec::with_capacity(256);
        put_str(&mut body, &self.bucket);
        put_str(&mut body, &self.key);
        body.extend_from_slice(&(self.user_metadata.len() as u32).to_le_bytes());
        for (name, value) in &self.user_metadata {
            put_str(&mut body, name);
            put_str(&mut body, value);
        }
        match &self.content_type {
            None => body.push(0),
            Some(t) => {
                body.push(1);
                put_str(&mut body, t);
            }
        }
        body.push(self.content_encoding.code());
        match &self.stored_form {
            StoredForm::Raw => body.push(0),
            StoredForm::Chunked(index) => {
                body.push(1);
                index.encode_into(&mut body);
            }
            StoredForm::AsSent { frames: None } => body.push(2),
            StoredForm::AsSent {
                frames: Some(index),
            } => {
                body.push(3);
                index.encode_into(&mut body);
            }
        }
        body.extend_from_slice(&self.logical_len.to_le_bytes());
        body.extend_from_slice(&self.stored_len.to_le_bytes());
        body.extend_from_slice(&self.blake3);
        body.extend_from_slice(&self.created_unix_ms.to_le_bytes());
        put_str(&mut body, &self.dataset);
        let body_len = u32::try_from(body.len())
            .ok()
            .filter(|&n| n <= MANIFEST_BODY_BYTES_MAX)
            .ok_or_else(|| {
                FormatError::InvalidArgument(format!(
                    "manifest body of {} bytes exceeds {MANIFEST_BODY_BYTES_MAX}",
                    body.len()
                ))
            })?;
        let mut out = Vec::with_capacity(MANIFEST_PREFIX_BYTES + body.len() + 4);
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.push(MANIFEST_VERSION);
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        Ok(out)
    }

    /// Decodes a record from the start of `bytes`; returns the manifest and
    /// the record's length (the stored bytes start there).
    pub fn decode(bytes: &[u8]) -> Result<(Manifest, usize)> {
        let body_len = parse_prefix(bytes.get(..MANIFEST_PREFIX_BYTES).ok_or_else(|| {
            FormatError::malformed(
                "manifest",
                format!(
                    "{} bytes, need at least {MANIFEST_PREFIX_BYTES}",
                    bytes.len()
                ),
            )
        })?)?;
        let record_len = MANIFEST_PREFIX_BYTES + body_len + 4;
        let record = bytes.get(..record_len).ok_or_else(|| {
            FormatError::malformed(
                "manifest",
                format!("record of {record_len} bytes, only {} present", bytes.len()),
            )
        })?;
        Ok((decode_body(&record[MANIFEST_PREFIX_BYTES..])?, record_len))
    }

    /// Reads one record from `reader`; returns the manifest and the record's length.
    pub fn read_from<R: Read>(mut reader: R) -> Result<(Manifest, usize)> {
        let mut prefix = [0u8; MANIFEST_PREFIX_BYTES];
        reader.read_exact(&mut prefix)?;
        let body_len = parse_prefix(&prefix)?;
        let mut rest = Vec::new();
        (&mut reader)
            .take(body_len as u64 + 4)
            .read_to_end(&mut rest)?;
        if rest.len() != body_len + 4 {
            return Err(FormatError::malformed(
                "manifest",
                format!(
                    "record ends after {} of {} body bytes",
                    rest.len(),
                    body_len + 4
                ),
            ));
        }
        Ok((decode_body(&rest)?, MANIFEST_PREFIX_BYTES + body_len + 4))
    }
}

/// Checks magic and version; returns the body length.
fn parse_prefix(prefix: &[u8]) -> Result<usize> {
    let what = "manifest";
    if prefix[0..4] != MANIFEST_MAGIC {
        return Err(FormatError::malformed(
            what,
            format!(
                "magic {:02x?}, expected {:02x?}",
                &prefix[0..4],
                MANIFEST_MAGIC
            ),
        ));
    }
    if prefix[4] != MANIFEST_VERSION {
        return Err(FormatError::malformed(
            what,
            format!(
                "unknown version {} (this build reads {MANIFEST_VERSION})",
                prefix[4]
            ),
        ));
    }
    let body_len = u32::from_le_bytes(prefix[5..9].try_into().unwrap());
    if body_len > MANIFEST_BODY_BYTES_MAX {
        return Err(FormatError::malformed(
            what,
            format!("body of {body_len} bytes exceeds {MANIFEST_BODY_BYTES_MAX}"),
        ));
    }
    Ok(body_len as usize)
}

/// Decodes `body | crc32c u32`.
fn decode_body(body_and_crc: &[u8]) -> Result<Manifest> {
    let (body, crc) = body_and_crc.split_at(body_and_crc.len() - 4);
    let stored = u32::from_le_bytes(crc.try_into().unwrap());
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(FormatError::ChecksumMismatch {
            what: "manifest",
            stored,
            computed,
        });
    }
    let mut c = Cursor {
        bytes: body,
        pos: 0,
    };
    let bucket = c.str()?;
    let key = c.str()?;
    let count = c.u32()?;
    let mut user_metadata = BTreeMap::new();
    for _ in 0..count {
        let name = c.str()?;
        let value = c.str()?;
        user_metadata.insert(name, value);
    }
    let content_type = match c.u8()? {
        0 => None,
        1 => Some(c.str()?),
        other => {
            return Err(FormatError::malformed(
                "manifest",
                format!("content type flag {other}"),
            ))
        }
    };
    let content_encoding = Algorithm::from_code(c.u8()?)?;
    let stored_form = match c.u8()? {
        0 => StoredForm::Raw,
        1 => StoredForm::Chunked(c.chunk_index()?),
        2 => StoredForm::AsSent { frames: None },
        3 => StoredForm::AsSent {
            frames: Some(c.chunk_index()?),
        },
        other => {
            return Err(FormatError::malformed(
                "manifest",
                format!("unknown stored form {other}"),
            ))
        }
    };
    let logical_len = c.u64()?;
    let stored_len = c.u64()?;
    let blake3 = c.take(32)?.try_into().unwrap();
    let created_unix_ms = c.u64()?;
    let dataset = c.str()?;
    if c.pos != body.len() {
        return Err(FormatError::malformed(
            "manifest",
            format!("{} bytes left after the last field", body.len() - c.pos),
        ));
    }
    let manifest = Manifest {
        bucket,
        key,
        user_metadata,
        content_type,
        content_encoding,
        stored_form,
        logical_len,
        stored_len,
        blake3,
        created_unix_ms,
        dataset,
    };
    manifest.validate()?;
    Ok(manifest)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                FormatError::malformed(
                    "manifest",
                    format!(
                        "field of {n} bytes at body offset {} runs past the end",
                        self.pos
                    ),
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn str(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        let at = self.pos;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| {
            FormatError::malformed(
                "manifest",
                format!("string at body offset {at} is not UTF-8"),
            )
        })
    }
    fn chunk_index(&mut self) -> Result<ChunkIndex> {
        let (index, used) = ChunkIndex::decode(&self.bytes[self.pos..])?;
        self.pos += used;
        Ok(index)
    }
}
