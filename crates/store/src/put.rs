//! Uploads: a [`PutHandle`] streams an object (or a multipart part) into the cache, hashing (BLAKE3, MD5 and
//! any checksum the client announced) and compressing on the way, reserving cache space as it grows.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use md5::Digest as _;
use permafrost_catalog::{
    Compression, ContentId, Encoding, NewContent, ObjectRecord, PartRecord, StoredForm,
};
use permafrost_format::{Algorithm, ChunkEncoder};

use crate::cache::{Cache, CONTENTS_DIR, TMP_DIR};
use crate::store::{etag_of, Inner, ObjectInfo, DECODED_LENGTH_META};
use crate::{io_error, Result, StoreError};

/// Cache space is reserved in steps of this many bytes.
const RESERVE_STEP_BYTES: u64 = 4 << 20;
/// Buffer between the encoder and the cache file.
const FILE_BUFFER_BYTES: usize = 256 << 10;

/// Checksums a client announced (`Content-MD5` and `x-amz-checksum-*`), base64 as on the wire. Each one given is
/// verified against the received bytes; a mismatch is `BadDigest`, a malformed value `InvalidDigest`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checksums {
    pub content_md5: Option<String>,
    pub crc32: Option<String>,
    pub crc32c: Option<String>,
    pub sha1: Option<String>,
    pub sha256: Option<String>,
}

/// Options of a put.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PutOptions {
    /// The `Content-Encoding` the client sent. `zstd`/`lz4` data is stored exactly as sent.
    pub content_encoding: Encoding,
    /// Decoded length of pre-compressed data (required with `zstd`/`lz4`; also read from the user metadata
    /// entry `permafrost-decoded-length`).
    pub decoded_length: Option<u64>,
    /// `x-amz-meta-*` pairs, names without the prefix.
    pub user_metadata: Vec<(String, String)>,
    pub content_type: Option<String>,
    pub expected: Checksums,
    /// Headers, tags, storage class and Object Lock of the new version (docs/archive.md).
    #[serde(default)]
    pub attributes: permafrost_catalog::ObjectAttributes,
}

impl PutOptions {
    /// The decoded length of pre-compressed data, from the field or the metadata entry.
    pub(crate) fn decoded_length(&self) -> Result<Option<u64>> {
        if let Some(n) = self.decoded_length {
            return Ok(Some(n));
        }
        match self
            .user_metadata
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(DECODED_LENGTH_META))
        {
            None => Ok(None),
            Some((_, v)) => v.trim().parse().map(Some).map_err(|_| {
                StoreError::InvalidArgument(format!(
                    "x-amz-meta-{DECODED_LENGTH_META}: {v:?} is not a byte count"
                ))
            }),
        }
    }
}

fn decode_b64(name: &str, value: &str, len: usize) -> Result<Vec<u8>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .map_err(|_| StoreError::InvalidDigest(format!("{name} {value:?} is not base64")))?;
    if bytes.len() != len {
        return Err(StoreError::InvalidDigest(format!(
            "{name} {value:?} has {} bytes, expected {len}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// The expected values, decoded and length-checked when the put begins.
#[derive(Default)]
struct Expected {
    md5: Option<Vec<u8>>,
    crc32: Option<(Vec<u8>, crc32fast::Hasher)>,
    crc32c: Option<(Vec<u8>, u32)>,
    sha1: Option<(Vec<u8>, sha1::Sha1)>,
    sha256: Option<(Vec<u8>, sha2::Sha256)>,
}

impl Expected {
    fn new(c: &Checksums) -> Result<Expected> {
        Ok(Expected {
            md5: c
                .content_md5
                .as_deref()
                .map(|v| decode_b64("Content-MD5", v, 16))
                .transpose()?,
            crc32: c
                .crc32
                .as_deref()
                .map(|v| decode_b64("x-amz-checksum-crc32", v, 4))
                .transpose()?
                .map(|e| (e, Default::default())),
            crc32c: c
                .crc32c
                .as_deref()
                .map(|v| decode_b64("x-amz-checksum-crc32c", v, 4))
                .transpose()?
                .map(|e| (e, 0)),
            sha1: c
                .sha1
                .as_deref()
                .map(|v| decode_b64("x-amz-checksum-sha1", v, 20))
                .transpose()?
                .map(|e| (e, Default::default())),
            sha256: c
                .sha256
                .as_deref()
                .map(|v| decode_b64("x-amz-checksum-sha256", v, 32))
                .transpose()?
                .map(|e| (e, Default::default())),
        })
    }

    fn update(&mut self, data: &[u8]) {
        if let Some((_, h)) = &mut self.crc32 {
            h.update(data);
        }
        if let Some((_, c)) = &mut self.crc32c {
            *c = crc32c::crc32c_append(*c, data);
        }
        if let Some((_, h)) = &mut self.sha1 {
            h.update(data);
        }
        if let Some((_, h)) = &mut self.sha256 {
            h.update(data);
        }
    }

    /// Verify; returns the verified checksums as `(name, base64)` pairs.
    fn verify(self, md5: &[u8; 16], original: &Checksums) -> Result<Vec<(String, String)>> {
        let mismatch = |name: &str| {
            Err(StoreError::BadDigest(format!(
                "the {name} you specified did not match what was received"
            )))
        };
        if self.md5.as_deref().is_some_and(|e| e != md5) {
            return mismatch("Content-MD5");
        }
        let mut verified = Vec::new();
        if let Some((e, h)) = self.crc32 {
            if e != h.finalize().to_be_bytes() {
                return mismatch("x-amz-checksum-crc32");
            }
            verified.push((
                "crc32".to_string(),
                original.crc32.clone().unwrap_or_default(),
            ));
        }
        if let Some((e, c)) = self.crc32c {
            if e != c.to_be_bytes() {
                return mismatch("x-amz-checksum-crc32c");
            }
            verified.push((
                "crc32c".to_string(),
                original.crc32c.clone().unwrap_or_default(),
            ));
        }
        if let Some((e, h)) = self.sha1 {
            if e[..] != h.finalize()[..] {
                return mismatch("x-amz-checksum-sha1");
            }
            verified.push((
                "sha1".to_string(),
                original.sha1.clone().unwrap_or_default(),
            ));
        }
        if let Some((e, h)) = self.sha256 {
            if e[..] != h.finalize()[..] {
                return mismatch("x-amz-checksum-sha256");
            }
            verified.push((
                "sha256".to_string(),
                original.sha256.clone().unwrap_or_default(),
            ));
        }
        Ok(verified)
    }
}

/// The chunk index of pre-compressed bytes stored as sent in `path` (zstd frames, when they can be indexed;
/// empty otherwise), after checking that the frames decode to the `decoded` bytes announced.
pub(crate) fn as_sent_index(encoding: Encoding, decoded: u64, path: &Path) -> Result<Vec<u8>> {
    if encoding != Encoding::Zstd {
        return Ok(Vec::new());
    }
    let f = File::open(path).map_err(|e| io_error("cannot reread the upload", e))?;
    let Some(index) = permafrost_format::index_zstd_frames(std::io::BufReader::new(f))? else {
        return Ok(Vec::new());
    };
    if index.logical_len() != decoded {
        return Err(StoreError::InvalidArgument(format!(
            "x-amz-meta-{DECODED_LENGTH_META} says {decoded} bytes but the zstd frames decode to {}",
            index.logical_len()
        )));
    }
    Ok(index.encode())
}

/// A file sink counting the bytes written.
struct CountingFile {
    inner: BufWriter<File>,
    written_bytes: u64,
}

impl Write for CountingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written_bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

enum Sink {
    Chunked(ChunkEncoder<CountingFile>),
    Plain(CountingFile),
}

/// What is being uploaded.
pub(crate) enum Target {
    Object {
        bucket: String,
        key: String,
        dataset: String,
        compression: Compression,
    },
    /// A part of a multipart upload: a content of its own (its bytes as received, identity encoding), which the
    /// completed object lists.
    Part {
        upload_id: String,
        part_number: u32,
        bucket: String,
        key: String,
        dataset: String,
        /// Chunks are compressed as they arrive (`None` for pre-compressed uploads: their parts are slices of
        /// the client's stream, stored as sent).
        compression: Compression,
    },
}

/// An upload in progress. [`PutHandle::write`] the body, then [`PutHandle::finish`] (or
/// [`PutHandle::abort`]; dropping the handle aborts).
pub struct PutHandle {
    inner: Arc<Inner>,
    target: Target,
    options: PutOptions,
    expected: Option<Expected>,
    tmp_path: String,
    sink: Option<Sink>,
    blake3: blake3::Hasher,
    md5: md5::Md5,
    received_bytes: u64,
    reserved_bytes: u64,
}

impl PutHandle {
    pub(crate) fn begin(
        inner: Arc<Inner>,
        target: Target,
        options: PutOptions,
        chunk_bytes: u32,
    ) -> Result<PutHandle> {
        let expected = Expected::new(&options.expected)?;
        let decoded_length = options.decoded_length()?;
        if options.content_encoding != Encoding::Identity
            && decoded_length.is_none()
            && matches!(target, Target::Object { .. })
        {
            return Err(StoreError::InvalidArgument(format!(
                "Content-Encoding {} needs the decoded length in x-amz-meta-{DECODED_LENGTH_META}",
                options.content_encoding
            )));
        }
        let tmp_path = Cache::new_path(TMP_DIR);
        let absolute = inner.cache.absolute(&tmp_path);
        let file = File::create(&absolute)
            .map_err(|e| io_error(format!("cannot create {}", absolute.display()), e))?;
        let file = CountingFile {
            inner: BufWriter::with_capacity(FILE_BUFFER_BYTES, file),
            written_bytes: 0,
        };
        let compression = match &target {
            Target::Object { compression, .. }
                if options.content_encoding == Encoding::Identity =>
            {
                *compression
            }
            Target::Part { compression, .. } => *compression,
            Target::Object { .. } => Compression::None,
        };
        let algorithm = match compression {
            Compression::Zstd => Some(Algorithm::Zstd),
            Compression::Lz4 => Some(Algorithm::Lz4),
            Compression::None => None,
        };
        let sink = match algorithm {
            Some(a) => Sink::Chunked(ChunkEncoder::new(file, a, chunk_bytes)?),
            None => Sink::Plain(file),
        };
        Ok(PutHandle {
            inner,
            target,
            options,
            expected: Some(expected),
            tmp_path,
            sink: Some(sink),
            blake3: blake3::Hasher::new(),
            md5: md5::Md5::new(),
            received_bytes: 0,
            reserved_bytes: 0,
        })
    }

    /// Bytes received so far.
    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    /// Take the next piece of the body. Waits up to `cache_wait_ms_max` for cache space, then fails with
    /// `SlowDown` (the upload is then aborted).
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let Some(sink) = self.sink.as_mut() else {
            return Err(StoreError::InvalidArgument(
                "write after the upload failed or finished".into(),
            ));
        };
        let needed = self.received_bytes + data.len() as u64;
        if needed > self.reserved_bytes {
            let step =
                (needed - self.reserved_bytes).div_ceil(RESERVE_STEP_BYTES) * RESERVE_STEP_BYTES;
            if let Err(e) = self.inner.reserve_cache(step) {
                self.discard();
                return Err(e);
            }
            self.reserved_bytes += step;
        }
        self.blake3.update(data);
        self.md5.update(data);
        if let Some(e) = self.expected.as_mut() {
            e.update(data);
        }
        let result = match sink {
            Sink::Chunked(enc) => enc.write(data),
            Sink::Plain(f) => f.write_all(data),
        };
        if let Err(e) = result {
            self.discard();
            return Err(io_error("cannot write to the cache", e));
        }
        self.received_bytes += data.len() as u64;
        Ok(())
    }

    /// Complete the upload: verify the announced checksums, make the bytes durable and the object visible
    /// atomically. For a part, records the part.
    pub fn finish(mut self) -> Result<ObjectInfo> {
        let result = self.finish_inner();
        if result.is_err() {
            self.discard();
        }
        result
    }

    /// Abandon the upload: nothing becomes visible.
    pub fn abort(mut self) {
        self.discard();
    }

    fn discard(&mut self) {
        if self.sink.take().is_some() || self.reserved_bytes > 0 {
            let _ = self.inner.cache.remove(&self.tmp_path);
            self.inner
                .cache
                .release(std::mem::take(&mut self.reserved_bytes));
        }
    }

    fn finish_inner(&mut self) -> Result<ObjectInfo> {
        let sink = self
            .sink
            .take()
            .ok_or_else(|| StoreError::InvalidArgument("finish after the upload failed".into()))?;
        let (chunk_index, mut file) = match sink {
            Sink::Chunked(enc) => {
                let (index, file) = enc
                    .finish()
                    .map_err(|e| io_error("cannot write to the cache", e))?;
                (Some(index), file)
            }
            Sink::Plain(file) => (None, file),
        };
        file.flush()
            .map_err(|e| io_error("cannot write to the cache", e))?;
        let stored_bytes = file.written_bytes;
        let file = file
            .inner
            .into_inner()
            .map_err(|e| io_error("cannot write to the cache", e.into_error()))?;
        let tmp_absolute = self.inner.cache.absolute(&self.tmp_path);
        self.inner.cache.sync_file(&file, &tmp_absolute)?;
        drop(file);
        // Stored bytes never exceed received bytes (raw chunks are stored as received).
        if stored_bytes > self.reserved_bytes {
            self.inner
                .cache
                .force_reserve(stored_bytes - self.reserved_bytes);
            self.reserved_bytes = stored_bytes;
        }
        let md5: [u8; 16] = self.md5.clone().finalize().into();
        let checksums = self
            .expected
            .take()
            .expect("expected checksums present until finish")
            .verify(&md5, &self.options.expected)?;
        let hash: [u8; 32] = *self.blake3.finalize().as_bytes();
        let now = permafrost_catalog::now_ms();

        let (stored_form, index_blob, logical_bytes) =
            match (&self.target, self.options.content_encoding, chunk_index) {
                (_, Encoding::Identity, Some(index)) => {
                    (StoredForm::Chunked, index.encode(), self.received_bytes)
                }
                (_, Encoding::Identity, None) | (Target::Part { .. }, _, None) => {
                    (StoredForm::Raw, Vec::new(), self.received_bytes)
                }
                (Target::Part { .. }, _, Some(_)) => {
                    return Err(StoreError::Internal(
                        "a part of a pre-compressed upload was compressed again".into(),
                    ))
                }
                (Target::Object { .. }, encoding, _) => {
                    let decoded = self.options.decoded_length()?.expect("checked at begin");
                    let index = as_sent_index(encoding, decoded, &tmp_absolute)?;
                    (StoredForm::AsSent, index, decoded)
                }
            };
        // A part's bytes are a content of their own, named as received (identity) whatever the upload's encoding.
        let encoding = match self.target {
            Target::Part { .. } => Encoding::Identity,
            Target::Object { .. } => self.options.content_encoding,
        };
        let id = ContentId { hash, encoding };
        let path = Cache::new_path(CONTENTS_DIR);
        self.inner.cache.rename_durable(&self.tmp_path, &path)?;
        self.inner.cache.release(self.reserved_bytes - stored_bytes);
        self.reserved_bytes = 0;
        let content = NewContent {
            id,
            logical_bytes,
            stored_bytes,
            stored_form,
            chunk_index: index_blob,
            md5,
            cache_path: path.clone(),
        };
        match &self.target {
            Target::Part {
                upload_id,
                part_number,
                bucket,
                key,
                dataset,
                ..
            } => {
                let part = PartRecord {
                    upload_id: upload_id.clone(),
                    part_number: *part_number,
                    size_bytes: self.received_bytes,
                    md5,
                    content: Some(id),
                    cache_path: String::new(),
                    created_ms: now,
                };
                match self.inner.catalog.put_part(&part, &content, dataset) {
                    Ok(outcome) => self.inner.run_work(outcome.work),
                    Err(e) => {
                        let _ = self.inner.cache.remove(&path);
                        self.inner.cache.release(stored_bytes);
                        return Err(e.into());
                    }
                }
                self.inner.wake_persister();
                Ok(ObjectInfo::part(
                    bucket,
                    key,
                    self.received_bytes,
                    etag_of(&md5),
                    now,
                ))
            }
            Target::Object {
                bucket,
                key,
                dataset,
                ..
            } => {
                let object = ObjectRecord {
                    bucket: bucket.clone(),
                    key: key.clone(),
                    content: id,
                    size_bytes: logical_bytes,
                    etag: etag_of(&md5),
                    last_modified_ms: now,
                    content_type: self.options.content_type.clone(),
                    user_metadata: self.options.user_metadata.clone(),
                    checksums,
                    dataset: dataset.clone(),
                    version_id: String::new(),
                    attributes: self.options.attributes.clone(),
                    expires_ms: None,
                };
                self.inner.commit_put(&object, &content)
            }
        }
    }
}

impl Drop for PutHandle {
    fn drop(&mut self) {
        self.discard();
    }
}
