//! Multipart uploads (S3 semantics). Each part goes through the put pipeline when it arrives (its MD5 is its
//! ETag; it is cut into chunks and compressed with the bucket's algorithm, the chunk index at the end of its
//! file, or kept raw when the bucket does not compress or the upload is pre-compressed). Completing concatenates
//! the parts' stored bytes into one content file (`copy_file_range`, a reflink where the file system can) and
//! joins their chunk indexes; it computes only the content id (BLAKE3 of the received bytes, decoding the
//! chunks): nothing is compressed twice and the object's MD5 is not computed (the ETag is the MD5 of the part
//! MD5s, which is also recorded as the content's MD5). Crash safety is that of a put: the content is written
//! to `tmp/`, made durable, renamed, then committed with the object in one catalog transaction; the parts are
//! removed after the commit.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use md5::Digest as _;
use permafrost_catalog::{
    Compression, ContentId, Encoding, NewContent, ObjectRecord, PartRecord, StoredForm,
    UploadRecord,
};
use permafrost_format::{decode_chunk, Algorithm, ChunkEntry, ChunkIndex};

use crate::cache::{Cache, CONTENTS_DIR, TMP_DIR};
use crate::put::{as_sent_index, Checksums, PutHandle, PutOptions, Target, CHUNKED_PART_SUFFIX};
use crate::store::{
    hex, validate_key, Inner, MultipartUpload, ObjectInfo, PartInfo, Store, DECODED_LENGTH_META,
};
use crate::{io_error, Result, StoreError};

/// Smallest part except the last (S3's rule).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Highest part number.
pub const PART_NUMBER_MAX: u32 = 10_000;

fn unquote(etag: &str) -> &str {
    etag.trim().trim_matches('"')
}

fn upload_options(upload: &UploadRecord) -> Result<PutOptions> {
    serde_json::from_str(&upload.options)
        .map_err(|e| StoreError::Internal(format!("upload {} options: {e}", upload.upload_id)))
}

/// A part's stored bytes: the first `stored_bytes` of its file, in chunks described by `index` for a chunked
/// part (raw bytes otherwise).
struct StoredPart {
    file: File,
    stored_bytes: u64,
    index: Option<ChunkIndex>,
}

fn open_part(inner: &Inner, part: &PartRecord) -> Result<StoredPart> {
    let path = inner.cache.absolute(&part.cache_path);
    let damaged =
        |why: String| StoreError::Internal(format!("part file {}: {why}", path.display()));
    let mut file = File::open(&path)
        .map_err(|e| io_error(format!("cannot open part {}", path.display()), e))?;
    let file_bytes = file
        .metadata()
        .map_err(|e| io_error(format!("cannot read part {}", path.display()), e))?
        .len();
    if !part.cache_path.ends_with(CHUNKED_PART_SUFFIX) {
        if file_bytes != part.size_bytes {
            return Err(damaged(format!(
                "{file_bytes} bytes, the catalog says {}",
                part.size_bytes
            )));
        }
        return Ok(StoredPart {
            file,
            stored_bytes: file_bytes,
            index: None,
        });
    }
    let mut read_at = |offset: u64, len: u64| -> Result<Vec<u8>> {
        let mut out = vec![0u8; len as usize];
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut out))
            .map_err(|e| io_error(format!("cannot read part {}", path.display()), e))?;
        Ok(out)
    };
    if file_bytes < 4 {
        return Err(damaged(format!(
            "{file_bytes} bytes, too short for a chunk index"
        )));
    }
    let index_len = u32::from_le_bytes(read_at(file_bytes - 4, 4)?.try_into().expect("4 bytes"));
    let index_len = u64::from(index_len);
    if index_len + 4 > file_bytes {
        return Err(damaged(format!(
            "a chunk index of {index_len} bytes in {file_bytes}"
        )));
    }
    let blob = read_at(file_bytes - 4 - index_len, index_len)?;
    let (index, used) = ChunkIndex::decode(&blob).map_err(|e| damaged(e.to_string()))?;
    let stored_bytes = file_bytes - 4 - index_len;
    if used as u64 != index_len
        || index.stored_len() != stored_bytes
        || index.logical_len() != part.size_bytes
    {
        return Err(damaged(format!(
            "its chunk index ({} stored, {} logical bytes) does not match the file ({stored_bytes} stored) or the catalog ({} bytes)",
            index.stored_len(),
            index.logical_len(),
            part.size_bytes
        )));
    }
    Ok(StoredPart {
        file,
        stored_bytes,
        index: Some(index),
    })
}

/// Make the content of a completed upload from its parts and commit `object` (its content, size and time are
/// filled in here). The stored bytes of the parts are concatenated as they are (`copy_file_range`: a reflink
/// where the file system can); only the BLAKE3 of the received bytes is computed, decoding compressed chunks.
fn assemble(
    inner: &Arc<Inner>,
    chosen: &[PartRecord],
    options: &PutOptions,
    mut object: ObjectRecord,
    md5_of_md5s: [u8; 16],
) -> Result<ObjectInfo> {
    let encoding = options.content_encoding;
    let chunked = chosen
        .iter()
        .any(|p| p.cache_path.ends_with(CHUNKED_PART_SUFFIX));
    if encoding != Encoding::Identity && chunked {
        return Err(StoreError::Internal(
            "a pre-compressed upload has a part stored in chunks".into(),
        ));
    }
    let raw_chunk_bytes = u64::from(inner.config.chunk_bytes);
    // Cache space for the content, reserved part by part: the parts already hold it (their files are removed
    // once the object is committed), so it is taken beyond the limit if need be.
    let mut reserved_bytes = 0u64;
    let tmp_path = Cache::new_path(TMP_DIR);
    let result = (|| -> Result<(ContentId, u64, StoredForm, Vec<u8>)> {
        let tmp_absolute = inner.cache.absolute(&tmp_path);
        let mut content = File::create(&tmp_absolute)
            .map_err(|e| io_error(format!("cannot create {}", tmp_absolute.display()), e))?;
        let write_error = |e| io_error(format!("cannot write {}", tmp_absolute.display()), e);
        let mut blake3 = blake3::Hasher::new();
        let mut entries: Vec<ChunkEntry> = Vec::new();
        let (mut logical_bytes, mut stored_offset) = (0u64, 0u64);
        let mut buf = Vec::new();
        let mut decoded = Vec::new();
        // One part file open at a time (an upload may have 10,000 parts).
        for record in chosen {
            let mut part = open_part(inner, record)?;
            inner.cache.force_reserve(part.stored_bytes);
            reserved_bytes += part.stored_bytes;
            part.file
                .seek(SeekFrom::Start(0))
                .map_err(|e| io_error("cannot read a part", e))?;
            let read_error = |e| io_error("cannot read a part", e);
            match &part.index {
                Some(index) => {
                    for e in index.entries() {
                        buf.resize(e.stored_len as usize, 0);
                        part.file.read_exact(&mut buf).map_err(read_error)?;
                        decode_chunk(e, &buf, &mut decoded)?;
                        blake3.update(&decoded);
                        entries.push(ChunkEntry {
                            logical_offset: logical_bytes + e.logical_offset,
                            stored_offset: stored_offset + e.stored_offset,
                            ..*e
                        });
                    }
                }
                None => {
                    let mut offset = 0;
                    buf.resize(raw_chunk_bytes as usize, 0);
                    while offset < part.stored_bytes {
                        let len = (part.stored_bytes - offset).min(raw_chunk_bytes);
                        part.file
                            .read_exact(&mut buf[..len as usize])
                            .map_err(read_error)?;
                        blake3.update(&buf[..len as usize]);
                        if chunked {
                            entries.push(ChunkEntry {
                                logical_offset: logical_bytes + offset,
                                logical_len: len,
                                stored_offset: stored_offset + offset,
                                stored_len: len,
                                algorithm: Algorithm::None,
                            });
                        }
                        offset += len;
                    }
                }
            }
            part.file
                .seek(SeekFrom::Start(0))
                .map_err(|e| io_error("cannot read a part", e))?;
            let copied = std::io::copy(&mut (&part.file).take(part.stored_bytes), &mut content)
                .map_err(write_error)?;
            if copied != part.stored_bytes {
                return Err(StoreError::Internal(format!(
                    "a part shrank while it was assembled ({copied} of {} bytes)",
                    part.stored_bytes
                )));
            }
            logical_bytes += part
                .index
                .as_ref()
                .map_or(part.stored_bytes, |i| i.logical_len());
            stored_offset += part.stored_bytes;
        }
        inner.cache.sync_file(&content, &tmp_absolute)?;
        drop(content);
        let (stored_form, index_blob, logical_bytes) = if encoding != Encoding::Identity {
            let decoded = options.decoded_length()?.ok_or_else(|| {
                StoreError::InvalidArgument(format!(
                    "Content-Encoding {encoding} needs the decoded length in x-amz-meta-{DECODED_LENGTH_META}"
                ))
            })?;
            let index = as_sent_index(encoding, decoded, &tmp_absolute)?;
            (StoredForm::AsSent, index, decoded)
        } else if chunked {
            let index = ChunkIndex::from_entries(entries)?;
            (StoredForm::Chunked, index.encode(), logical_bytes)
        } else {
            (StoredForm::Raw, Vec::new(), logical_bytes)
        };
        let id = ContentId {
            hash: *blake3.finalize().as_bytes(),
            encoding,
        };
        Ok((id, logical_bytes, stored_form, index_blob))
    })();
    let (id, logical_bytes, stored_form, chunk_index) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = inner.cache.remove(&tmp_path);
            inner.cache.release(reserved_bytes);
            return Err(e);
        }
    };
    let stored_bytes = reserved_bytes;
    let path = Cache::new_path(CONTENTS_DIR);
    if let Err(e) = inner.cache.rename_durable(&tmp_path, &path) {
        let _ = inner.cache.remove(&tmp_path);
        inner.cache.release(stored_bytes);
        return Err(e);
    }
    object.content = id;
    object.size_bytes = logical_bytes;
    object.last_modified_ms = permafrost_catalog::now_ms();
    let content = NewContent {
        id,
        logical_bytes,
        stored_bytes,
        stored_form,
        chunk_index,
        // The content's MD5 is that of the part MD5s (the ETag's): the whole object's MD5 is not computed.
        md5: md5_of_md5s,
        cache_path: path,
    };
    inner.commit_put(&object, &content)
}

impl Store {
    /// Start a multipart upload of `bucket/key`; returns the upload id.
    pub fn create_multipart(&self, bucket: &str, key: &str, options: PutOptions) -> Result<String> {
        validate_key(key)?;
        self.head_bucket(bucket)?;
        options.decoded_length()?;
        let upload_id = uuid::Uuid::new_v4().simple().to_string();
        let record = UploadRecord {
            upload_id: upload_id.clone(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            created_ms: permafrost_catalog::now_ms(),
            options: serde_json::to_string(&options).expect("put options serialize"),
        };
        self.inner().catalog.create_upload(&record)?;
        Ok(upload_id)
    }

    fn upload(&self, upload_id: &str) -> Result<UploadRecord> {
        self.inner()
            .catalog
            .get_upload(upload_id)?
            .ok_or_else(|| StoreError::NoSuchUpload(upload_id.to_string()))
    }

    /// Upload part `part_number` (1–10,000) of an upload; write the body to the handle and finish it (its
    /// `ObjectInfo::etag` is the part's ETag). A part uploaded again replaces the earlier one.
    pub fn upload_part(
        &self,
        upload_id: &str,
        part_number: u32,
        expected: Checksums,
    ) -> Result<PutHandle> {
        if !(1..=PART_NUMBER_MAX).contains(&part_number) {
            return Err(StoreError::InvalidArgument(format!(
                "part number {part_number} must be between 1 and {PART_NUMBER_MAX}"
            )));
        }
        let upload = self.upload(upload_id)?;
        let compression = if upload_options(&upload)?.content_encoding == Encoding::Identity {
            self.bucket_settings(&upload.bucket)?.effective.compression
        } else {
            Compression::None
        };
        let target = Target::Part {
            upload_id: upload_id.to_string(),
            part_number,
            bucket: upload.bucket,
            key: upload.key,
            compression,
        };
        let options = PutOptions {
            expected,
            ..Default::default()
        };
        PutHandle::begin(
            Arc::clone(self.inner()),
            target,
            options,
            self.config().chunk_bytes,
        )
    }

    /// Complete an upload from `parts` (`(part number, ETag)` in ascending order): the object becomes visible
    /// with ETag `"hex(md5 of the part MD5s)-N"` and the parts are removed.
    pub fn complete_multipart(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<ObjectInfo> {
        let upload = self.upload(upload_id)?;
        if parts.is_empty() {
            return Err(StoreError::InvalidPart(
                "a multipart upload needs at least one part".into(),
            ));
        }
        if parts.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(StoreError::InvalidPartOrder(
                "parts must be listed in ascending order of part number".into(),
            ));
        }
        let stored = self.inner().catalog.list_parts(upload_id)?;
        let mut chosen = Vec::with_capacity(parts.len());
        for (i, (number, etag)) in parts.iter().enumerate() {
            let part = stored
                .iter()
                .find(|p| p.part_number == *number)
                .ok_or_else(|| {
                    StoreError::InvalidPart(format!("part {number} was not uploaded"))
                })?;
            if unquote(etag) != hex(&part.md5) {
                return Err(StoreError::InvalidPart(format!(
                    "part {number}: ETag {etag} does not match the uploaded part"
                )));
            }
            if i + 1 < parts.len() && part.size_bytes < PART_BYTES_MIN {
                return Err(StoreError::EntityTooSmall(format!(
                    "part {number} has {} bytes; every part but the last needs at least {PART_BYTES_MIN}",
                    part.size_bytes
                )));
            }
            chosen.push(part.clone());
        }
        let options = upload_options(&upload)?;
        let mut md5_of_md5s = md5::Md5::new();
        for p in &chosen {
            md5_of_md5s.update(p.md5);
        }
        let md5_of_md5s: [u8; 16] = md5_of_md5s.finalize().into();
        let inner = self.inner();
        self.head_bucket(&upload.bucket)?;
        let object = ObjectRecord {
            bucket: upload.bucket.clone(),
            key: upload.key.clone(),
            content: ContentId {
                hash: [0; 32],
                encoding: options.content_encoding,
            },
            size_bytes: 0,
            etag: format!("\"{}-{}\"", hex(&md5_of_md5s), chosen.len()),
            last_modified_ms: 0,
            content_type: options.content_type.clone(),
            user_metadata: options.user_metadata.clone(),
            checksums: Vec::new(),
            dataset: inner.dataset_of(&upload.bucket, &upload.key),
        };
        let info = assemble(inner, &chosen, &options, object, md5_of_md5s)?;
        let work = inner.catalog.remove_upload(upload_id)?;
        inner.run_work(work);
        Ok(info)
    }

    /// Abandon an upload and delete its parts.
    pub fn abort_multipart(&self, upload_id: &str) -> Result<()> {
        let work = self.inner().catalog.remove_upload(upload_id)?;
        self.inner().run_work(work);
        Ok(())
    }

    /// The parts of an upload, by part number.
    pub fn list_parts(&self, upload_id: &str) -> Result<Vec<PartInfo>> {
        self.upload(upload_id)?;
        Ok(self
            .inner()
            .catalog
            .list_parts(upload_id)?
            .into_iter()
            .map(|p| PartInfo {
                part_number: p.part_number,
                size_bytes: p.size_bytes,
                etag: format!("\"{}\"", hex(&p.md5)),
                last_modified_ms: p.created_ms,
            })
            .collect())
    }

    /// Uploads in progress in `bucket` under `prefix` (at most `limit`).
    pub fn list_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<MultipartUpload>> {
        self.head_bucket(bucket)?;
        Ok(self
            .inner()
            .catalog
            .list_uploads(bucket, prefix, limit)?
            .into_iter()
            .map(|u| MultipartUpload {
                upload_id: u.upload_id,
                bucket: u.bucket,
                key: u.key,
                created_ms: u.created_ms,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BucketSettings, ByteRange, GridSetup, StoreConfig};

    fn store(dir: &std::path::Path) -> Store {
        let config = StoreConfig {
            cache_bytes_max: 64 << 20,
            fsync: false,
            grid: GridSetup {
                layout: "4x4:2+1".into(),
                disk_capacity_bytes: 32 << 20,
                spinning_max: 16,
                ..GridSetup::default()
            },
            power_profile: Some(permafrost_disk::power::PowerProfile::for_tests()),
            ..StoreConfig::default()
        };
        Store::open(dir, config).unwrap()
    }

    #[test]
    fn a_single_put_deduplicated_with_a_multipart_object_keeps_its_md5_etag() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        store
            .create_bucket("dedup", BucketSettings::default())
            .unwrap();
        let body: Vec<u8> = (0..(6u32 << 20)).map(|i| (i % 251) as u8).collect();
        let (first, second) = body.split_at(PART_BYTES_MIN as usize);
        let id = store
            .create_multipart("dedup", "multi", PutOptions::default())
            .unwrap();
        let mut etags = Vec::new();
        for (n, part) in [(1u32, first), (2, second)] {
            let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
            h.write(part).unwrap();
            etags.push((n, h.finish().unwrap().etag));
        }
        let multi = store.complete_multipart(&id, &etags).unwrap();
        assert!(multi.etag.ends_with("-2\""), "{}", multi.etag);
        let single = store
            .put_object("dedup", "single", PutOptions::default(), &body)
            .unwrap();
        assert_eq!(
            single.etag,
            format!("\"{}\"", hex(&md5::Md5::digest(&body)))
        );
        assert_eq!(
            store.head_object("dedup", "multi").unwrap().etag,
            multi.etag
        );
        assert_eq!(
            store
                .status()
                .unwrap()
                .catalog
                .contents_by_state
                .iter()
                .map(|(_, n, _)| n)
                .sum::<u64>(),
            1
        );
    }

    fn read(store: &Store, bucket: &str, key: &str, range: Option<ByteRange>) -> Vec<u8> {
        let (_, mut reader) = store.open_object(bucket, key, range, None).unwrap();
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        out
    }

    /// Compressible, incompressible (not a multiple of the chunk size) and a short last part.
    fn mixed_parts() -> Vec<Vec<u8>> {
        let text: Vec<u8> = (0..(5 << 20) + 1000)
            .map(|i| b"permafrost "[i % 11])
            .collect();
        let mut noise = vec![0u8; (5 << 20) + 4097];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for b in &mut noise {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        vec![text, noise, b"tail".to_vec()]
    }

    #[test]
    fn compressible_parts_are_stored_compressed_when_they_arrive() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        store
            .create_bucket("squeeze", BucketSettings::default())
            .unwrap();
        let id = store
            .create_multipart("squeeze", "k", PutOptions::default())
            .unwrap();
        let mut h = store.upload_part(&id, 1, Checksums::default()).unwrap();
        h.write(&mixed_parts()[0]).unwrap();
        let info = h.finish().unwrap();
        assert_eq!(info.size_bytes, (5 << 20) + 1000);
        assert_eq!(
            store.list_parts(&id).unwrap()[0].size_bytes,
            (5 << 20) + 1000
        );
        let used = store.status().unwrap().cache_used_bytes;
        assert!(
            used < 1 << 20,
            "a part of repeated text uses {used} bytes of cache"
        );
    }

    #[test]
    fn a_multipart_object_is_the_concatenation_of_its_parts_across_a_restart() {
        for compression in [Compression::Zstd, Compression::Lz4, Compression::None] {
            let dir = tempfile::tempdir().unwrap();
            let parts = mixed_parts();
            let whole = parts.concat();
            let id = {
                let store = store(dir.path());
                let settings = BucketSettings {
                    compression: Some(compression),
                    ..BucketSettings::default()
                };
                store.create_bucket("joined", settings).unwrap();
                let id = store
                    .create_multipart("joined", "k", PutOptions::default())
                    .unwrap();
                for (n, part) in (1u32..).zip(&parts) {
                    let mut h = store.upload_part(&id, n, Checksums::default()).unwrap();
                    h.write(part).unwrap();
                    h.finish().unwrap();
                }
                id
            };
            // Parts survive a restart; completion then assembles them.
            let store = store(dir.path());
            let etags: Vec<_> = store
                .list_parts(&id)
                .unwrap()
                .into_iter()
                .map(|p| (p.part_number, p.etag))
                .collect();
            let info = store.complete_multipart(&id, &etags).unwrap();
            assert_eq!(info.size_bytes, whole.len() as u64);
            assert_eq!(
                info.content_id,
                format!("{}:identity", blake3::hash(&whole).to_hex()),
                "{compression:?}"
            );
            assert_eq!(read(&store, "joined", "k", None), whole, "{compression:?}");
            let boundary = parts[0].len() as u64;
            let range = ByteRange::FromTo(boundary - 10, boundary + 10);
            assert_eq!(
                read(&store, "joined", "k", Some(range)),
                whole[boundary as usize - 10..=boundary as usize + 10]
            );
            // The parts' files are gone: the cache holds the content alone.
            assert_eq!(store.status().unwrap().cache_used_bytes, info.stored_bytes);
            assert_eq!(
                std::fs::read_dir(dir.path().join("cache/parts"))
                    .unwrap()
                    .count(),
                0
            );
            // The same bytes put at once are the same content.
            let single = store
                .put_object("joined", "again", PutOptions::default(), &whole)
                .unwrap();
            assert_eq!(single.content_id, info.content_id);
            store.persist_now().unwrap();
            store.evict_cache().unwrap();
            assert_eq!(read(&store, "joined", "k", None), whole, "{compression:?}");
        }
    }
}
