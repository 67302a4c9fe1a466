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
/// Manifest record version written (version 1, without part lists and roles, is still read).
pub const MANIFEST_VERSION: u8 = 2;
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
    /// No stored bytes of its own: the content is the concatenation of other contents (a completed multipart
    /// upload), found by their content ids. With a content encoding the concatenation is the stream as sent.
    Parts(Vec<PartRef>),
}

/// One part of a [`StoredForm::Parts`] content: the part's content id and logical length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// BLAKE3 of the part's bytes as sent.
    pub blake3: [u8; 32],
    /// The part's content encoding (its content id's second half).
    pub encoding: Algorithm,
    /// Decoded bytes of the part.
    pub logical_len: u64,
}

/// What a manifest's content is to salvage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An object of its own (named by bucket and key).
    #[default]
    Object,
    /// Only a part of part-list contents: salvage writes it only through a [`StoredForm::Parts`] manifest that
    /// names it (bucket and key say which upload stored it first).
    Part,
}

/// The id of a part-list content: BLAKE3 in derive-key mode (so it never equals the plain BLAKE3 of any bytes)
/// over each part's `blake3 | encoding code | logical length u64 LE`.
pub fn part_list_hash(parts: &[PartRef]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(PART_LIST_CONTEXT);
    for p in parts {
        hasher.update(&p.blake3);
        hasher.update(&[p.encoding.code()]);
        hasher.update(&p.logical_len.to_le_bytes());
    }
    *hasher.finalize().as_bytes()
}

/// The logical bytes of a part list; `None` when they add up to more than `u64::MAX` (a damaged record).
fn parts_len(parts: &[PartRef]) -> Option<u64> {
    parts
        .iter()
        .try_fold(0u64, |total, p| total.checked_add(p.logical_len))
}

/// BLAKE3 derive-key context of [`part_list_hash`].
pub const PART_LIST_CONTEXT: &str = "permafrost part list v1";

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
    /// An object, or only a part of others.
    pub role: Role,
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
            StoredForm::Parts(_) if self.stored_len != 0 => bad(format!(
                "part-list content with {} stored bytes of its own",
                self.stored_len
            )),
            StoredForm::Parts(parts)
                if self.content_encoding == Algorithm::None
                    && parts_len(parts) != Some(self.logical_len) =>
            {
                bad(match parts_len(parts) {
                    Some(n) => format!(
                        "parts add up to {n} bytes, the manifest says {}",
                        self.logical_len
                    ),
                    None => format!(
                        "parts add up to more than {} bytes, the manifest says {}",
                        u64::MAX,
                        self.logical_len
                    ),
                })
            }
            StoredForm::Parts(parts) if part_list_hash(parts) != self.blake3 => {
                bad("the part list does not hash to the content id".into())
            }
            _ => Ok(()),
        }
    }

    /// The binary record: `magic "PFMN" | version u8 | body_len u32 | body | crc32c(body) u32` (version 2).
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
            StoredForm::Parts(parts) => {
                body.push(4);
                let count = u32::try_from(parts.len()).map_err(|_| {
                    FormatError::InvalidArgument(format!("{} parts in one list", parts.len()))
                })?;
                body.extend_from_slice(&count.to_le_bytes());
                for p in parts {
                    body.extend_from_slice(&p.blake3);
                    body.push(p.encoding.code());
                    body.extend_from_slice(&p.logical_len.to_le_bytes());
                }
            }
        }
        body.extend_from_slice(&self.logical_len.to_le_bytes());
        body.extend_from_slice(&self.stored_len.to_le_bytes());
        body.extend_from_slice(&self.blake3);
        body.extend_from_slice(&self.created_unix_ms.to_le_bytes());
        put_str(&mut body, &self.dataset);
        body.push(match self.role {
            Role::Object => 0,
            Role::Part => 1,
        });
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
        out.extend_from_slice(&crc_fast::crc32_iscsi(&body).to_le_bytes());
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
        Ok((
            decode_body(bytes[4], &record[MANIFEST_PREFIX_BYTES..])?,
            record_len,
        ))
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
        Ok((
            decode_body(prefix[4], &rest)?,
            MANIFEST_PREFIX_BYTES + body_len + 4,
        ))
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
    if !(1..=MANIFEST_VERSION).contains(&prefix[4]) {
        return Err(FormatError::malformed(
            what,
            format!(
                "unknown version {} (this build reads 1 to {MANIFEST_VERSION})",
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

/// Decodes `body | crc32c u32` of a record of `version`.
fn decode_body(version: u8, body_and_crc: &[u8]) -> Result<Manifest> {
    let (body, crc) = body_and_crc.split_at(body_and_crc.len() - 4);
    let stored = u32::from_le_bytes(crc.try_into().unwrap());
    let computed = crc_fast::crc32_iscsi(body);
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
        4 if version >= 2 => {
            let count = c.u32()? as usize;
            // Each part takes 41 bytes: a count beyond the body is refused before allocating.
            if count > (body.len() - c.pos) / 41 {
                return Err(FormatError::malformed(
                    "manifest",
                    format!("{count} parts do not fit in the body"),
                ));
            }
            let mut parts = Vec::with_capacity(count);
            for _ in 0..count {
                let blake3 = c.take(32)?.try_into().unwrap();
                let encoding = Algorithm::from_code(c.u8()?)?;
                let logical_len = c.u64()?;
                parts.push(PartRef {
                    blake3,
                    encoding,
                    logical_len,
                });
            }
            StoredForm::Parts(parts)
        }
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
    let role = if version >= 2 {
        match c.u8()? {
            0 => Role::Object,
            1 => Role::Part,
            other => {
                return Err(FormatError::malformed(
                    "manifest",
                    format!("unknown role {other}"),
                ))
            }
        }
    } else {
        Role::Object
    };
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
        role,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `format_manifest` fuzz target: part lengths that overflow a u64 panicked in `validate`.
    #[test]
    fn a_part_list_whose_lengths_overflow_is_refused_not_a_panic() {
        let parts = vec![
            PartRef {
                blake3: [1; 32],
                encoding: Algorithm::None,
                logical_len: u64::MAX,
            },
            PartRef {
                blake3: [2; 32],
                encoding: Algorithm::None,
                logical_len: 2,
            },
        ];
        let manifest = Manifest {
            bucket: "b".into(),
            key: "k".into(),
            user_metadata: BTreeMap::new(),
            content_type: None,
            content_encoding: Algorithm::None,
            blake3: part_list_hash(&parts),
            stored_form: StoredForm::Parts(parts),
            logical_len: 1,
            stored_len: 0,
            created_unix_ms: 0,
            dataset: "b".into(),
            role: Role::Object,
        };
        let e = manifest.validate().unwrap_err().to_string();
        assert!(e.contains("parts add up to more than"), "{e}");
    }
}
