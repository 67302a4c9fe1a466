//! Uploads: a [`PutHandle`] streams an object (or a multipart part) into the cache through the upload pipeline
//! (`pipeline.rs`: hashing — BLAKE3, MD5 where needed, the checksums the client announced — compression and the
//! cache write on lanes of their own), reserving cache space as it grows, then verifies, makes the bytes durable
//! and commits.
//!
//! The cache's fsync policy (with `fsync = true`, the default): the pipeline starts writeback every
//! `cache_writeback_bytes` and waits for the window before, so dirty pages stay bounded, and flushes the device
//! while the body arrives (`pipeline.rs`: the flusher), so the final fsync is short; `finish` fsyncs the
//! file, renames it into `contents/` and fsyncs the directory, then commits the catalog (group commit): nothing
//! is acknowledged before it is durable. A crash before the commit leaves a file in `tmp/` or an unknown file in
//! `contents/`, both removed on restart; nothing half-written is ever visible. With `cache_drop_behind` the
//! flusher and `finish` also drop the flushed ranges from the page cache (advice only: durability is unchanged).

use std::fs::File;
use std::sync::Arc;

use base64::Engine as _;
use permafrost_catalog::{
    Compression, ContentId, Encoding, NewContent, ObjectRecord, PartRecord, StoredForm,
    INLINE_CACHE_PATH,
};
use permafrost_format::Algorithm;

use crate::cache::{Cache, CONTENTS_DIR, TMP_DIR};
use crate::checksum::ChecksumAlgorithm;
use crate::pipeline::{drop_cached_pages, Pipeline, PipelineSpec, Stored};
use crate::store::{etag_of, Inner, ObjectInfo, DECODED_LENGTH_META};
use crate::{io_error, Result, StoreError};

/// Cache space is reserved in steps of this many bytes.
const RESERVE_STEP_BYTES: u64 = 4 << 20;

/// Checksums a client announced (`Content-MD5` and `x-amz-checksum-*`), base64 as on the wire. Each one given is
/// verified against the received bytes; a mismatch is `BadDigest`, a malformed value `InvalidDigest`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checksums {
    pub content_md5: Option<String>,
    pub crc32: Option<String>,
    pub crc32c: Option<String>,
    pub sha1: Option<String>,
    pub sha256: Option<String>,
    #[serde(default)]
    pub crc64nvme: Option<String>,
}

impl Checksums {
    /// Every checksum announced, with its algorithm (base64 as on the wire).
    pub fn announced(&self) -> Vec<(ChecksumAlgorithm, &str)> {
        [
            (ChecksumAlgorithm::Md5, &self.content_md5),
            (ChecksumAlgorithm::Crc32, &self.crc32),
            (ChecksumAlgorithm::Crc32c, &self.crc32c),
            (ChecksumAlgorithm::Sha1, &self.sha1),
            (ChecksumAlgorithm::Sha256, &self.sha256),
            (ChecksumAlgorithm::Crc64nvme, &self.crc64nvme),
        ]
        .into_iter()
        .filter_map(|(a, v)| v.as_deref().map(|v| (a, v)))
        .collect()
    }
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
    /// Multipart uploads: the checksum announced at creation (`None`: the default full-object CRC64NVME).
    #[serde(default)]
    pub upload_checksum: Option<crate::UploadChecksum>,
    /// A copy of an object another cluster node holds (issue 13, `copies = k`): keep the origin's ETag (a
    /// multipart `md5-N` one too) and last-modified time instead of computing them, so every copy is the same
    /// object version.
    #[serde(default)]
    pub replica_of: Option<ReplicaOf>,
}

/// The origin's identity of a replicated object version (see [`PutOptions::replica_of`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplicaOf {
    pub etag: String,
    pub last_modified_ms: u64,
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

/// The chunk index of pre-compressed bytes stored as sent, read from `stored` (zstd frames, when they can be indexed;
/// empty otherwise), after checking that the frames decode to the `decoded` bytes announced.
pub(crate) fn as_sent_index(
    encoding: Encoding,
    decoded: u64,
    stored: impl std::io::Read,
) -> Result<Vec<u8>> {
    if encoding != Encoding::Zstd {
        return Ok(Vec::new());
    }
    let Some(index) = permafrost_format::index_zstd_frames(stored)? else {
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
    /// The checksums announced, decoded: verified at `finish`.
    expected: Vec<(ChecksumAlgorithm, Vec<u8>)>,
    /// A checksum the client sends as a trailer after the body (compared at `finish_with_trailer`).
    trailer: Option<ChecksumAlgorithm>,
    /// A checksum computed and stored whether or not the client sent it: CRC64NVME for an object whose client
    /// announced no `x-amz-checksum-*` (S3 gives every object one), the upload's algorithm for a part.
    compute: Option<ChecksumAlgorithm>,
    tmp_path: String,
    pipeline: Option<Pipeline>,
    compression: Compression,
    chunk_bytes: u32,
    received_bytes: u64,
    reserved_bytes: u64,
    /// Failed or finished: no more writes.
    closed: bool,
    /// What the key's current version must be for the object to be committed ([`PutHandle::set_condition`]).
    condition: permafrost_catalog::WriteCondition,
}

impl PutHandle {
    pub(crate) fn begin(
        inner: Arc<Inner>,
        target: Target,
        options: PutOptions,
        chunk_bytes: u32,
    ) -> Result<PutHandle> {
        let expected = options
            .expected
            .announced()
            .into_iter()
            .map(|(a, v)| Ok((a, a.decode(v)?)))
            .collect::<Result<Vec<_>>>()?;
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
        // The file is created only if the body outgrows `inline_bytes_max` (pipeline.rs).
        let tmp_path = Cache::new_path(TMP_DIR);
        let compression = match &target {
            Target::Object { compression, .. }
                if options.content_encoding == Encoding::Identity =>
            {
                *compression
            }
            Target::Part { compression, .. } => *compression,
            Target::Object { .. } => Compression::None,
        };
        let compute = match target {
            Target::Object { .. } if expected.iter().all(|(a, _)| *a == ChecksumAlgorithm::Md5) => {
                Some(ChecksumAlgorithm::Crc64nvme)
            }
            _ => None,
        };
        Ok(PutHandle {
            inner,
            target,
            options,
            expected,
            trailer: None,
            compute,
            tmp_path,
            pipeline: None,
            compression,
            chunk_bytes,
            received_bytes: 0,
            reserved_bytes: 0,
            closed: false,
            condition: Default::default(),
        })
    }

    /// A conditional write (`If-None-Match: *`, `If-Match`): the object is committed only if `condition` holds
    /// for the key's current version when it is (in the commit's transaction); otherwise `finish` fails with
    /// `PreconditionFailed` (or `NoSuchKey`) and leaves nothing behind. Parts ignore it (their upload's
    /// completion takes the condition).
    pub fn set_condition(&mut self, condition: permafrost_catalog::WriteCondition) {
        self.condition = condition;
    }

    /// The client sends a checksum of this algorithm as a trailer after the body: compute it too (call before
    /// the first write), and compare it with the value given to [`PutHandle::finish_with_trailer`].
    pub fn expect_trailer(&mut self, algorithm: ChecksumAlgorithm) -> Result<()> {
        if self.pipeline.is_some() || self.closed {
            return Err(StoreError::Internal(
                "a trailing checksum must be announced before the body".into(),
            ));
        }
        self.trailer = Some(algorithm);
        Ok(())
    }

    /// Compute and store a checksum of this algorithm whether or not the client sends one (call before the
    /// first write); replaces the default.
    pub(crate) fn compute_checksum(&mut self, algorithm: ChecksumAlgorithm) {
        self.compute = Some(algorithm);
    }

    /// Bytes received so far.
    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    fn start_pipeline(&mut self) -> Result<()> {
        let mut checksums: Vec<ChecksumAlgorithm> = self.expected.iter().map(|(a, _)| *a).collect();
        checksums.extend(self.trailer.filter(|t| !checksums.contains(t)));
        checksums.extend(self.compute.filter(|c| !checksums.contains(c)));
        let md5 = match self.target {
            Target::Object { .. } => true,
            Target::Part { .. } => {
                self.inner.config.part_etag_md5 || checksums.contains(&ChecksumAlgorithm::Md5)
            }
        };
        let compression = match self.compression {
            Compression::Zstd => Some(Algorithm::Zstd),
            Compression::Lz4 => Some(Algorithm::Lz4),
            Compression::None => None,
        };
        let config = &self.inner.config;
        let pipeline = Pipeline::new(PipelineSpec {
            path: self.inner.cache.absolute(&self.tmp_path),
            inline_bytes_max: config.inline_bytes_max,
            compression,
            chunk_bytes: self.chunk_bytes as usize,
            md5,
            checksums,
            writeback_bytes: if config.fsync {
                config.cache_writeback_bytes
            } else {
                0
            },
            drop_behind: config.cache_drop_behind,
        })
        .map_err(|e| io_error("cannot start the upload pipeline", e))?;
        self.pipeline = Some(pipeline);
        Ok(())
    }

    /// Take the next piece of the body. Waits up to `cache_wait_ms_max` for cache space, then fails with
    /// `SlowDown` (the upload is then aborted).
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        if self.closed {
            return Err(StoreError::InvalidArgument(
                "write after the upload failed or finished".into(),
            ));
        }
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
        if self.pipeline.is_none() {
            if let Err(e) = self.start_pipeline() {
                self.discard();
                return Err(e);
            }
        }
        let pipeline = self.pipeline.as_mut().expect("started above");
        if let Err(e) = pipeline.push(data) {
            self.discard();
            return Err(io_error("cannot write to the cache", e));
        }
        self.received_bytes += data.len() as u64;
        Ok(())
    }

    /// Complete the upload: verify the announced checksums, make the bytes durable and the object visible
    /// atomically. For a part, records the part.
    pub fn finish(self) -> Result<ObjectInfo> {
        self.finish_with_trailer(None)
    }

    /// [`PutHandle::finish`] for an upload whose checksum came as a trailer ([`PutHandle::expect_trailer`]):
    /// `sent` is the trailer's value (base64); a mismatch is `BadDigest`, a missing value `InvalidDigest`.
    pub fn finish_with_trailer(mut self, sent: Option<&str>) -> Result<ObjectInfo> {
        let result = self.finish_inner(sent);
        if result.is_err() {
            self.discard();
        }
        result
    }

    /// Abandon the upload: nothing becomes visible.
    pub fn abort(mut self) {
        self.discard();
    }

    /// Compare what the lanes computed with what the client announced; returns the verified checksums (other
    /// than MD5) as `(name, base64)` pairs, the trailer's and the computed one ([`PutHandle::compute_checksum`])
    /// included.
    fn verify(
        &self,
        hashed: &crate::pipeline::Hashed,
        trailer_sent: Option<&str>,
    ) -> Result<Vec<(String, String)>> {
        let mismatch = |a: ChecksumAlgorithm| {
            StoreError::BadDigest(format!(
                "the {} you specified did not match what was received",
                a.header()
            ))
        };
        let computed = |a: ChecksumAlgorithm| -> Option<&[u8]> {
            if a == ChecksumAlgorithm::Md5 {
                return hashed.md5.as_ref().map(|m| &m[..]);
            }
            hashed
                .checksums
                .iter()
                .find(|(b, _)| *b == a)
                .map(|(_, d)| &d[..])
        };
        let mut verified = Vec::new();
        for (algorithm, expected) in &self.expected {
            if computed(*algorithm) != Some(&expected[..]) {
                return Err(mismatch(*algorithm));
            }
            if *algorithm != ChecksumAlgorithm::Md5 {
                let sent = self
                    .options
                    .expected
                    .announced()
                    .into_iter()
                    .find(|(a, _)| a == algorithm)
                    .map(|(_, v)| v.trim().to_string())
                    .unwrap_or_default();
                verified.push((algorithm.name().to_string(), sent));
            }
        }
        if let Some(algorithm) = self.trailer {
            let Some(sent) = trailer_sent else {
                return Err(StoreError::InvalidDigest(format!(
                    "the trailing checksum {} was announced but not sent",
                    algorithm.header()
                )));
            };
            let value = algorithm.decode(sent)?;
            let digest = computed(algorithm).unwrap_or_default();
            if digest != &value[..] {
                return Err(StoreError::BadDigest(format!(
                    "{}: the client sent {}, the body has {}",
                    algorithm.header(),
                    sent.trim(),
                    base64::engine::general_purpose::STANDARD.encode(digest)
                )));
            }
            if !verified.iter().any(|(n, _)| n == algorithm.name()) {
                verified.push((algorithm.name().to_string(), sent.trim().to_string()));
            }
        }
        if let Some(algorithm) = self.compute {
            if !verified.iter().any(|(n, _)| n == algorithm.name()) {
                if let Some(digest) = computed(algorithm) {
                    verified.push((
                        algorithm.name().to_string(),
                        base64::engine::general_purpose::STANDARD.encode(digest),
                    ));
                }
            }
        }
        Ok(verified)
    }

    fn discard(&mut self) {
        self.closed = true;
        self.pipeline = None; // stops the lanes
        if self.reserved_bytes > 0 || !self.tmp_path.is_empty() {
            let _ = self.inner.cache.remove(&self.tmp_path);
            self.tmp_path.clear();
            self.inner
                .cache
                .release(std::mem::take(&mut self.reserved_bytes));
        }
    }

    fn finish_inner(&mut self, trailer_sent: Option<&str>) -> Result<ObjectInfo> {
        if self.closed {
            return Err(StoreError::InvalidArgument(
                "finish after the upload failed".into(),
            ));
        }
        self.closed = true;
        if self.pipeline.is_none() {
            self.start_pipeline()?;
        }
        let pipeline = self.pipeline.take().expect("started above");
        let (hashed, written) = pipeline
            .finish()
            .map_err(|e| io_error("cannot write to the cache", e))?;
        let stored_bytes = written.stored_bytes;
        let tmp_absolute = self.inner.cache.absolute(&self.tmp_path);
        let inline = match written.stored {
            Stored::File(file) => {
                self.inner.cache.sync_file(&file, &tmp_absolute)?;
                if self.inner.config.cache_drop_behind {
                    // The last windows, written after the flusher's last flush (advice only: never fails).
                    drop_cached_pages(&file, 0, stored_bytes);
                }
                None
            }
            Stored::Inline(bytes) => Some(bytes),
        };
        // Stored bytes never exceed received bytes (raw chunks are stored as received).
        if stored_bytes > self.reserved_bytes {
            self.inner
                .cache
                .force_reserve(stored_bytes - self.reserved_bytes);
            self.reserved_bytes = stored_bytes;
        }
        let checksums = self.verify(&hashed, trailer_sent)?;
        let hash = hashed.blake3;
        // The ETag's digest: the MD5 where it was computed (always for objects), else BLAKE3's first 16 bytes.
        let md5: [u8; 16] = hashed
            .md5
            .unwrap_or_else(|| hash[..16].try_into().expect("16 bytes"));
        let now = permafrost_catalog::now_ms();
        let (stored_form, index_blob, logical_bytes) =
            match (&self.target, self.options.content_encoding, written.index) {
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
                    let index = match &inline {
                        Some(bytes) => as_sent_index(encoding, decoded, &bytes[..])?,
                        None => {
                            let f = File::open(&tmp_absolute)
                                .map_err(|e| io_error("cannot reread the upload", e))?;
                            as_sent_index(encoding, decoded, std::io::BufReader::new(f))?
                        }
                    };
                    (StoredForm::AsSent, index, decoded)
                }
            };
        // A part's bytes are a content of their own, named as received (identity) whatever the upload's encoding.
        let encoding = match self.target {
            Target::Part { .. } => Encoding::Identity,
            Target::Object { .. } => self.options.content_encoding,
        };
        let id = ContentId { hash, encoding };
        let path = if inline.is_some() {
            INLINE_CACHE_PATH.to_string()
        } else {
            let path = Cache::new_path(CONTENTS_DIR);
            self.inner.cache.rename_durable(&self.tmp_path, &path)?;
            path
        };
        self.tmp_path.clear();
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
            inline,
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
                    checksums: checksums.clone(),
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
                let mut info =
                    ObjectInfo::part(bucket, key, self.received_bytes, etag_of(&md5), now);
                info.checksums = checksums;
                Ok(info)
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
                    etag: self
                        .options
                        .replica_of
                        .as_ref()
                        .map_or_else(|| etag_of(&md5), |r| r.etag.clone()),
                    last_modified_ms: self
                        .options
                        .replica_of
                        .as_ref()
                        .map_or(now, |r| r.last_modified_ms),
                    content_type: self.options.content_type.clone(),
                    user_metadata: self.options.user_metadata.clone(),
                    checksums,
                    dataset: dataset.clone(),
                    version_id: String::new(),
                    attributes: self.options.attributes.clone(),
                    expires_ms: None,
                };
                self.inner.commit_put(&object, &content, &self.condition)
            }
        }
    }
}

impl Drop for PutHandle {
    fn drop(&mut self) {
        self.discard();
    }
}
