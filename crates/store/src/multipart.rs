//! Multipart uploads (S3 semantics). Each part goes through the put pipeline when it arrives and becomes a
//! content of its own (hashed, compressed with the bucket's algorithm or kept as sent, durable in the cache,
//! deduplicated like any content; its MD5 is its ETag). Completing writes no byte: the object's content is the
//! *list* of the chosen parts (`StoredForm::Parts`, catalog table `content_parts`), created with the object in
//! one catalog transaction, so completing a 10 GiB upload costs about one catalog commit. Reads, persistence,
//! salvage and GC follow the list (docs/store.md "Part-list contents"). The ETag is the MD5 of the part MD5s
//! with the part count, `"hex-N"`, as S3 clients expect; the content id is the BLAKE3 (derive-key mode) of the
//! part list. The catalog remembers each completion for a week, so that a completion retried after success is
//! answered with the version it created; parts of a completed object are read by number as ranges of it
//! ([`Store::open_version_part`]) and listed with their sizes and checksums ([`Store::version_parts`]).

use std::sync::Arc;

use md5::Digest as _;
use permafrost_catalog::{
    Compression, ContentId, ContentPart, ContentRecord, Encoding, NewPartList, ObjectRecord,
    StoredForm, UploadRecord,
};
use permafrost_format::{part_list_hash, Algorithm, PartRef};

use crate::checksum::ChecksumAlgorithm;
use crate::multipart_checksum::{combine, ChecksumType, UploadChecksum};
use crate::put::{Checksums, PutHandle, PutOptions, Target};
use crate::read::ObjectReader;
use crate::store::{
    hex, validate_key, ByteRange, MultipartUpload, PartInfo, Store, DECODED_LENGTH_META,
};
use crate::{ObjectInfo, Result, StoreError, WriteCondition};

/// Smallest part except the last (S3's rule).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Highest part number.
pub const PART_NUMBER_MAX: u32 = 10_000;

fn unquote(etag: &str) -> &str {
    etag.trim().trim_matches('"')
}

/// Checksums a client sends with CompleteMultipartUpload.
#[derive(Debug, Clone, Default)]
pub struct CompletionChecksums {
    /// `(part number, algorithm, base64)` listed with the parts.
    pub parts: Vec<(u32, ChecksumAlgorithm, String)>,
    /// The whole object's checksum (`x-amz-checksum-*` on the request) and its type (`x-amz-checksum-type`).
    pub object: Option<(ChecksumAlgorithm, String)>,
    pub object_type: Option<ChecksumType>,
}

/// The completed object's checksum `(name, value)` (none when a part lacks the value: parts of an older build),
/// checked against what the client sent.
fn object_checksum(
    options: &PutOptions,
    stored: &[permafrost_catalog::PartRecord],
    parts: &[(u32, String)],
    sent: &CompletionChecksums,
) -> Result<Vec<(String, String)>> {
    let announced = options.upload_checksum;
    let mut upload = announced.unwrap_or(UploadChecksum::DEFAULT);
    if let Some((algorithm, _)) = &sent.object {
        if announced.is_some() && *algorithm != upload.algorithm {
            return Err(StoreError::InvalidRequest(format!(
                "the upload was created with {} checksums, the completion sent {}",
                upload.algorithm.name().to_ascii_uppercase(),
                algorithm.name().to_ascii_uppercase()
            )));
        }
        // An upload that announced nothing may still be completed with a whole-object CRC its parts carry.
        if announced.is_none() {
            let kind = sent.object_type.unwrap_or(ChecksumType::FullObject);
            upload = UploadChecksum::announced(*algorithm, Some(kind))?;
        }
    }
    if let (Some(kind), Some(a)) = (sent.object_type, announced) {
        if kind != a.kind {
            return Err(StoreError::InvalidRequest(format!(
                "the upload was created with {} checksums, the completion asked for {}",
                a.kind.as_str(),
                kind.as_str()
            )));
        }
    }
    let mut digests = Vec::with_capacity(parts.len());
    for (number, _) in parts {
        let part = stored
            .iter()
            .find(|p| p.part_number == *number)
            .expect("checked by the caller");
        let value = part
            .checksums
            .iter()
            .find(|(n, _)| n == upload.algorithm.name())
            .map(|(_, v)| v.as_str());
        match value {
            Some(v) => digests.push((upload.algorithm.decode(v)?, part.size_bytes)),
            None if announced.is_some() || sent.object.is_some() => {
                return Err(StoreError::InvalidPart(format!(
                    "part {number} has no {} checksum; upload it again",
                    upload.algorithm.name().to_ascii_uppercase()
                )))
            }
            None => return Ok(Vec::new()),
        }
    }
    let value = combine(upload.algorithm, upload.kind, &digests)?;
    if let Some((algorithm, sent_value)) = &sent.object {
        // A composite value may be sent with or without its `-N`.
        let bare = value.split('-').next().unwrap_or_default();
        if sent_value.trim() != value && sent_value.trim() != bare {
            return Err(StoreError::BadDigest(format!(
                "{}: the client sent {}, the parts give {value}",
                algorithm.header(),
                sent_value.trim()
            )));
        }
    }
    Ok(vec![(upload.algorithm.name().to_string(), value)])
}

fn upload_options(upload: &UploadRecord) -> Result<PutOptions> {
    serde_json::from_str(&upload.options)
        .map_err(|e| StoreError::Internal(format!("upload {} options: {e}", upload.upload_id)))
}

/// One part of a multipart object as GetObjectAttributes lists it: its number in the object (1 to the number of
/// parts, in order), its size as uploaded and the checksums it arrived with (empty when the catalog kept none).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CompletedPart {
    pub part_number: u32,
    pub size_bytes: u64,
    pub checksums: Vec<(String, String)>,
}

/// Where part `part_number` of a version lies (S3 `GET`/`HEAD ?partNumber=N`), in the representation a part
/// read returns: the bytes as uploaded (`encoding`, the stored form of a pre-compressed upload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartOfVersion {
    pub part_number: u32,
    /// First byte and length of the part.
    pub offset: u64,
    pub length: u64,
    /// Length of the whole representation.
    pub total_bytes: u64,
    /// Parts of a multipart object; `None` for an object uploaded whole (its one part is all of it).
    pub parts_count: Option<u32>,
    pub encoding: Encoding,
}

/// Part `part_number` of a version with records `content` and `parts`; `accepted`: the stored encodings the
/// client takes (an object uploaded whole is its own part 1, in the representation a plain GET returns).
fn part_of(
    info: &ObjectInfo,
    content: &ContentRecord,
    parts: &[(ContentPart, ContentRecord)],
    part_number: u32,
    accepted: &[Encoding],
) -> Result<PartOfVersion> {
    if !(1..=PART_NUMBER_MAX).contains(&part_number) {
        return Err(StoreError::InvalidArgument(format!(
            "part number {part_number} must be between 1 and {PART_NUMBER_MAX}"
        )));
    }
    let not_satisfiable = |count: usize| {
        StoreError::InvalidPartNumber(format!(
            "{}/{} has {count} part{}, there is no part {part_number}",
            info.bucket,
            info.key,
            if count == 1 { "" } else { "s" }
        ))
    };
    if content.stored_form != StoredForm::Parts {
        if part_number != 1 {
            return Err(not_satisfiable(1));
        }
        let (total_bytes, encoding) = if info.content_encoding != Encoding::Identity
            && accepted.contains(&info.content_encoding)
        {
            (info.stored_bytes, info.content_encoding)
        } else {
            (info.size_bytes, Encoding::Identity)
        };
        return Ok(PartOfVersion {
            part_number,
            offset: 0,
            length: total_bytes,
            total_bytes,
            parts_count: None,
            encoding,
        });
    }
    let (part, _) = parts
        .get(part_number as usize - 1)
        .ok_or_else(|| not_satisfiable(parts.len()))?;
    // A pre-compressed upload's parts are pieces of the stream as sent: a part is read in that form.
    let total_bytes = if content.id.encoding == Encoding::Identity {
        info.size_bytes
    } else {
        parts.iter().map(|(p, _)| p.logical_bytes).sum()
    };
    Ok(PartOfVersion {
        part_number,
        offset: part.logical_offset,
        length: part.logical_bytes,
        total_bytes,
        parts_count: Some(parts.len() as u32),
        encoding: content.id.encoding,
    })
}

/// Whether the part ETags `parts` lists (hex MD5s, quoted or not) make the multipart ETag `etag`
/// (`"hex(md5 of the part MD5s)-N"`).
fn etags_make(parts: &[(u32, String)], etag: &str) -> bool {
    let mut md5_of_md5s = md5::Md5::new();
    for (_, part) in parts {
        let part = unquote(part);
        let digest: Option<Vec<u8>> = (part.len() == 32)
            .then(|| {
                (0..32)
                    .step_by(2)
                    .map(|i| u8::from_str_radix(part.get(i..i + 2)?, 16).ok())
                    .collect()
            })
            .flatten();
        match digest {
            Some(d) => md5_of_md5s.update(d),
            None => return false,
        }
    }
    let md5_of_md5s: [u8; 16] = md5_of_md5s.finalize().into();
    unquote(etag) == format!("{}-{}", hex(&md5_of_md5s), parts.len())
}

/// The format crate's name of a content encoding.
pub(crate) fn algorithm_of(encoding: Encoding) -> Algorithm {
    match encoding {
        Encoding::Identity => Algorithm::None,
        Encoding::Zstd => Algorithm::Zstd,
        Encoding::Lz4 => Algorithm::Lz4,
    }
}

/// The id of the part-list content made of `parts` for an upload with `encoding`.
pub(crate) fn part_list_id(parts: &[ContentPart], encoding: Encoding) -> ContentId {
    let refs: Vec<PartRef> = parts
        .iter()
        .map(|p| PartRef {
            blake3: p.part.hash,
            encoding: algorithm_of(p.part.encoding),
            logical_len: p.logical_bytes,
        })
        .collect();
    ContentId {
        hash: part_list_hash(&refs),
        encoding,
    }
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
        let upload_options = upload_options(&upload)?;
        let upload_checksum = upload_options
            .upload_checksum
            .unwrap_or(UploadChecksum::DEFAULT);
        let compression = if upload_options.content_encoding == Encoding::Identity {
            self.bucket_settings(&upload.bucket)?.effective.compression
        } else {
            Compression::None
        };
        let target = Target::Part {
            upload_id: upload_id.to_string(),
            part_number,
            dataset: self.inner().dataset_for(
                &upload.bucket,
                &upload.key,
                &upload_options.attributes.tags,
            ),
            bucket: upload.bucket,
            key: upload.key,
            compression,
        };
        let options = PutOptions {
            expected,
            ..Default::default()
        };
        let mut handle = PutHandle::begin(
            Arc::clone(self.inner()),
            target,
            options,
            self.config().chunk_bytes,
        )?;
        handle.compute_checksum(upload_checksum.algorithm);
        Ok(handle)
    }

    /// Complete an upload from `parts` (`(part number, ETag)` in ascending order): the object becomes visible
    /// with ETag `"hex(md5 of the part MD5s)-N"`; its content is the list of those parts (no byte is copied) and
    /// the other parts are released. [`Store::complete_multipart_checked`] with nothing to check.
    pub fn complete_multipart(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<ObjectInfo> {
        self.complete_multipart_checked(upload_id, parts, &CompletionChecksums::default())
    }

    /// [`Store::complete_multipart`], checking the checksums the client listed with the parts and sent for the
    /// whole object, and giving the object its multipart checksum (multipart_checksum.rs): a part checksum that
    /// differs from the part's is `InvalidPart`, a whole-object value that differs is `BadDigest` (naming the
    /// right value).
    pub fn complete_multipart_checked(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        sent: &CompletionChecksums,
    ) -> Result<ObjectInfo> {
        self.complete_multipart_if(upload_id, parts, sent, &WriteCondition::Always)
    }

    /// [`Store::complete_multipart_checked`] as a conditional write (`If-None-Match: *`, `If-Match`): the object
    /// becomes visible only if `condition` holds for the key's current version, checked in the completion's
    /// transaction; otherwise `PreconditionFailed` (or `NoSuchKey`) and the upload stays as it was.
    pub fn complete_multipart_if(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        sent: &CompletionChecksums,
        condition: &WriteCondition,
    ) -> Result<ObjectInfo> {
        let Some(upload) = self.inner().catalog.get_upload(upload_id)? else {
            return self.completed_again(upload_id, parts);
        };
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
        let mut md5_of_md5s = md5::Md5::new();
        let mut logical_offset = 0u64;
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
            let content = part.content.ok_or_else(|| {
                StoreError::InvalidPart(format!(
                    "part {number} was uploaded by an older version of permafrost (catalog schema 2) and cannot be completed; upload it again"
                ))
            })?;
            for (listed_number, algorithm, value) in &sent.parts {
                if listed_number != number {
                    continue;
                }
                match part.checksums.iter().find(|(n, _)| n == algorithm.name()) {
                    Some((_, stored)) if stored.trim() == value.trim() => {}
                    Some(_) => {
                        return Err(StoreError::InvalidPart(format!(
                            "part {number}: {} {value} does not match the uploaded part",
                            algorithm.header()
                        )))
                    }
                    None => {
                        return Err(StoreError::InvalidPart(format!(
                            "part {number} was not uploaded with a {} checksum",
                            algorithm.name().to_ascii_uppercase()
                        )))
                    }
                }
            }
            md5_of_md5s.update(part.md5);
            chosen.push((
                *number,
                ContentPart {
                    seq: i as u32,
                    part: content,
                    logical_offset,
                    logical_bytes: part.size_bytes,
                },
            ));
            logical_offset += part.size_bytes;
        }
        let md5_of_md5s: [u8; 16] = md5_of_md5s.finalize().into();
        let options = upload_options(&upload)?;
        let checksums = object_checksum(&options, &stored, parts, sent)?;
        let encoding = options.content_encoding;
        // Pre-compressed uploads: the parts are the stream as sent; the object's size is the decoded length.
        let logical_bytes = if encoding == Encoding::Identity {
            logical_offset
        } else {
            options.decoded_length()?.ok_or_else(|| {
                StoreError::InvalidArgument(format!(
                    "Content-Encoding {encoding} needs the decoded length in x-amz-meta-{DECODED_LENGTH_META}"
                ))
            })?
        };
        let list_parts: Vec<ContentPart> = chosen.iter().map(|(_, p)| *p).collect();
        let list = NewPartList {
            id: part_list_id(&list_parts, encoding),
            logical_bytes,
            md5: md5_of_md5s,
            parts: chosen,
        };
        let inner = self.inner();
        let now = permafrost_catalog::now_ms();
        let object = ObjectRecord {
            bucket: upload.bucket.clone(),
            key: upload.key.clone(),
            content: list.id,
            size_bytes: logical_bytes,
            etag: format!("\"{}-{}\"", hex(&md5_of_md5s), list.parts.len()),
            last_modified_ms: now,
            content_type: options.content_type.clone(),
            user_metadata: options.user_metadata.clone(),
            checksums,
            dataset: inner.dataset_for(&upload.bucket, &upload.key, &options.attributes.tags),
            version_id: String::new(),
            attributes: options.attributes.clone(),
            expires_ms: None,
        };
        let outcome = inner
            .catalog
            .complete_upload_if(upload_id, &object, &list, now, condition)
            .map_err(|e| match e {
                permafrost_catalog::CatalogError::Corrupt(m) => StoreError::InvalidPart(format!(
                    "{m}: a part was uploaded again while the upload was completed"
                )),
                e => e.into(),
            })?;
        inner.run_work(outcome.work);
        inner.wake_persister();
        self.head_object(&upload.bucket, &upload.key)
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
                checksums: p.checksums,
            })
            .collect())
    }

    /// A completion of an upload that completed already (S3 answers a retried CompleteMultipartUpload with the
    /// first result): the version the first completion created, if the catalog remembers the completion
    /// (`COMPLETED_UPLOADS_KEPT_MS`), the version still exists naming the same part list, and `parts` are the
    /// part list the first completion listed (same part numbers; ETags whose MD5s give the object's ETag).
    /// `InvalidPart` for another part list, `NoSuchUpload` otherwise.
    fn completed_again(&self, upload_id: &str, parts: &[(u32, String)]) -> Result<ObjectInfo> {
        let inner = self.inner();
        let no_such_upload = || StoreError::NoSuchUpload(upload_id.to_string());
        let completed = inner
            .catalog
            .completed_upload(upload_id)?
            .ok_or_else(no_such_upload)?;
        let found = inner.catalog.get_object_version(
            &completed.bucket,
            &completed.key,
            &completed.version_id,
        )?;
        let Some((object, content)) = found.and_then(|(version, content)| {
            version
                .object
                .filter(|o| o.content == completed.content)
                .zip(content)
        }) else {
            return Err(StoreError::NoSuchUpload(format!(
                "{upload_id} (it was completed as {}/{} version {}, which is gone since)",
                completed.bucket, completed.key, completed.version_id
            )));
        };
        let numbers: Vec<u32> = parts.iter().map(|(n, _)| *n).collect();
        if numbers != completed.part_numbers || !etags_make(parts, &object.etag) {
            return Err(StoreError::InvalidPart(format!(
                "upload {upload_id} was completed with another part list (parts {:?}, ETag {}); a retried \
                 completion must list the same parts",
                completed.part_numbers, object.etag
            )));
        }
        inner.object_info(&object, &content)
    }

    /// Where part `part_number` of a version lies (catalog only; see [`PartOfVersion`]), with what HEAD says
    /// of the version. `InvalidPartNumber` beyond its last part; `accepted` as for [`Store::open_version_part`].
    pub fn head_version_part(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        part_number: u32,
        accepted: &[Encoding],
    ) -> Result<(ObjectInfo, PartOfVersion)> {
        let (object, content) = self.version_records(bucket, key, version_id)?;
        let parts = self.inner().parts_of(&content)?;
        let info = ObjectInfo::from_records(&object, &content, &parts);
        let part = part_of(&info, &content, &parts, part_number, accepted)?;
        Ok((info, part))
    }

    /// Open part `part_number` of a version for reading (S3 `GET ?partNumber=N`): a range read of the part's
    /// bytes, verified as every range read is. The parts are those of the completed upload, numbered 1 to their
    /// count in order; an object uploaded whole is one part. A pre-compressed multipart object's part is read as
    /// uploaded (its stored encoding), as is a pre-compressed object uploaded whole when the client takes its
    /// encoding (one of `accepted`, the stored encodings the client takes). `InvalidPartNumber` beyond the
    /// last part.
    pub fn open_version_part(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        part_number: u32,
        accepted: &[Encoding],
    ) -> Result<(ObjectInfo, ObjectReader, PartOfVersion)> {
        let (object, content) = self.version_records(bucket, key, version_id)?;
        let parts = self.inner().parts_of(&content)?;
        let info = ObjectInfo::from_records(&object, &content, &parts);
        let part = part_of(&info, &content, &parts, part_number, accepted)?;
        let range = (part.length > 0)
            .then(|| ByteRange::FromTo(part.offset, part.offset + part.length - 1));
        let accept = (part.encoding != Encoding::Identity).then_some(part.encoding);
        let (info, reader) = self.open_records(
            (bucket, key, version_id),
            &object,
            &content,
            parts,
            range,
            accept,
        )?;
        Ok((info, reader, part))
    }

    /// The parts of a version's completed multipart upload (empty for an object uploaded whole), with what HEAD
    /// says of the version (catalog only). A part's checksums are those of the object's checksum algorithm.
    pub fn version_parts(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<(ObjectInfo, Vec<CompletedPart>)> {
        let (object, content) = self.version_records(bucket, key, version_id)?;
        let inner = self.inner();
        let parts = inner.parts_of(&content)?;
        let info = ObjectInfo::from_records(&object, &content, &parts);
        if content.stored_form != StoredForm::Parts {
            return Ok((info, Vec::new()));
        }
        let mut checksums = inner.catalog.part_checksums(&content.id)?;
        checksums.resize(parts.len(), Vec::new());
        let algorithm = object.checksums.first().map(|(name, _)| name.as_str());
        let listed = parts
            .iter()
            .zip(checksums)
            .enumerate()
            .map(|(i, ((part, _), checksums))| CompletedPart {
                part_number: i as u32 + 1,
                size_bytes: part.logical_bytes,
                checksums: checksums
                    .into_iter()
                    .filter(|(name, _)| Some(name.as_str()) == algorithm)
                    .collect(),
            })
            .collect();
        Ok((info, listed))
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
    use permafrost_catalog::ContentState;
    use std::io::Read;

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
    fn a_single_put_of_a_multipart_objects_bytes_keeps_its_md5_etag() {
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
        assert_eq!(read(&store, "dedup", "multi", None), body);
        // A part uploaded again as a single object is the same content.
        let again = store
            .put_object("dedup", "first", PutOptions::default(), first)
            .unwrap();
        assert_eq!(
            again.content_id,
            format!("{}:identity", blake3::hash(first).to_hex())
        );
        // Two parts, their list, the single object: the part re-uploaded is stored once.
        assert_eq!(
            store
                .status()
                .unwrap()
                .catalog
                .contents_by_state
                .iter()
                .map(|(_, n, _)| n)
                .sum::<u64>(),
            4
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
            let part_ids: Vec<ContentPart> = parts
                .iter()
                .scan(0u64, |offset, p| {
                    let part = ContentPart {
                        seq: 0,
                        part: ContentId {
                            hash: *blake3::hash(p).as_bytes(),
                            encoding: Encoding::Identity,
                        },
                        logical_offset: *offset,
                        logical_bytes: p.len() as u64,
                    };
                    *offset += p.len() as u64;
                    Some(part)
                })
                .collect();
            assert_eq!(
                info.content_id,
                part_list_id(&part_ids, Encoding::Identity).to_string(),
                "{compression:?}"
            );
            assert_eq!(read(&store, "joined", "k", None), whole, "{compression:?}");
            let boundary = parts[0].len() as u64;
            let range = ByteRange::FromTo(boundary - 10, boundary + 10);
            assert_eq!(
                read(&store, "joined", "k", Some(range)),
                whole[boundary as usize - 10..=boundary as usize + 10]
            );
            // Nothing was copied: the cache holds the parts' stored bytes and nothing else.
            assert_eq!(store.status().unwrap().cache_used_bytes, info.stored_bytes);
            assert_eq!(
                std::fs::read_dir(dir.path().join("cache/parts"))
                    .unwrap()
                    .count(),
                0
            );
            store.persist_now().unwrap();
            assert_eq!(
                store.head_object("joined", "k").unwrap().state,
                ContentState::Persisted
            );
            store.evict_cache().unwrap();
            assert_eq!(read(&store, "joined", "k", None), whole, "{compression:?}");
        }
    }

    #[test]
    fn a_completed_upload_is_answered_again_and_read_part_by_part() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        store
            .create_bucket("parts", BucketSettings::default())
            .unwrap();
        let bodies = mixed_parts();
        let id = store
            .create_multipart("parts", "k", PutOptions::default())
            .unwrap();
        let mut listed = Vec::new();
        for (n, body) in bodies.iter().enumerate() {
            let mut h = store
                .upload_part(&id, n as u32 + 1, Checksums::default())
                .unwrap();
            h.write(body).unwrap();
            listed.push((n as u32 + 1, h.finish().unwrap().etag));
        }
        let first = store.complete_multipart(&id, &listed).unwrap();
        // Retried: the same version (the persistence manager may have placed it meanwhile, so where its bytes
        // are is not compared); another list, or another ETag, is InvalidPart.
        let again = store.complete_multipart(&id, &listed).unwrap();
        assert_eq!(
            ObjectInfo {
                state: first.state,
                grid_bucket: first.grid_bucket,
                in_cache: first.in_cache,
                ..again
            },
            first
        );
        assert!(matches!(
            store.complete_multipart(&id, &listed[..2]),
            Err(StoreError::InvalidPart(_))
        ));
        let mut wrong = listed.clone();
        wrong[1].1 = format!("\"{}\"", "0".repeat(32));
        assert!(matches!(
            store.complete_multipart(&id, &wrong),
            Err(StoreError::InvalidPart(_))
        ));
        // Parts by number, from the cache and from the grid, each with the object's part count.
        let part = |n: u32| {
            let (_, mut reader, part) =
                store.open_version_part("parts", "k", None, n, &[]).unwrap();
            let mut out = Vec::new();
            reader.read_to_end(&mut out).unwrap();
            assert_eq!(part.parts_count, Some(3));
            assert_eq!(part.length, out.len() as u64);
            out
        };
        for (n, body) in bodies.iter().enumerate() {
            assert_eq!(&part(n as u32 + 1), body);
        }
        store.persist_now().unwrap();
        store.evict_cache().unwrap();
        for (n, body) in bodies.iter().enumerate().rev() {
            assert_eq!(&part(n as u32 + 1), body, "part {} from the grid", n + 1);
        }
        assert!(matches!(
            store.open_version_part("parts", "k", None, 4, &[]),
            Err(StoreError::InvalidPartNumber(_))
        ));
        // Listed with sizes and the checksum of the object's algorithm (CRC64NVME by default).
        let (_, parts) = store.version_parts("parts", "k", None).unwrap();
        assert_eq!(
            parts
                .iter()
                .map(|p| (p.part_number, p.size_bytes))
                .collect::<Vec<_>>(),
            vec![
                (1, bodies[0].len() as u64),
                (2, bodies[1].len() as u64),
                (3, 4)
            ]
        );
        assert!(parts
            .iter()
            .all(|p| p.checksums.len() == 1 && p.checksums[0].0 == "crc64nvme"));
        // An object uploaded whole is its own part 1, and has no parts to list.
        store
            .put_object("parts", "whole", PutOptions::default(), b"whole object")
            .unwrap();
        let (_, mut reader, whole) = store
            .open_version_part("parts", "whole", None, 1, &[])
            .unwrap();
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        assert_eq!(
            (out.as_slice(), whole.parts_count),
            (&b"whole object"[..], None)
        );
        assert!(store
            .version_parts("parts", "whole", None)
            .unwrap()
            .1
            .is_empty());
        // Once its object is deleted, the upload is gone.
        store.delete_object("parts", "k").unwrap();
        assert!(matches!(
            store.complete_multipart(&id, &listed),
            Err(StoreError::NoSuchUpload(_))
        ));
    }
}
