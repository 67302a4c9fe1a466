//! Multipart uploads (S3 semantics): parts live in the cache as raw files; completing concatenates them through
//! the ordinary put pipeline (hashing, compression, content addressing) into one content.

use std::io::Read;
use std::sync::Arc;

use md5::Digest as _;
use permafrost_catalog::UploadRecord;

use crate::put::{Checksums, PutHandle, PutOptions, Target};
use crate::store::{hex, validate_key, MultipartUpload, ObjectInfo, PartInfo, Store};
use crate::{io_error, Result, StoreError};

/// Smallest part except the last (S3's rule).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Highest part number.
pub const PART_NUMBER_MAX: u32 = 10_000;

fn unquote(etag: &str) -> &str {
    etag.trim().trim_matches('"')
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
        let target = Target::Part {
            upload_id: upload_id.to_string(),
            part_number,
            bucket: upload.bucket,
            key: upload.key,
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
        let mut options: PutOptions = serde_json::from_str(&upload.options)
            .map_err(|e| StoreError::Internal(format!("upload {upload_id} options: {e}")))?;
        options.expected = Checksums::default();
        let mut md5_of_md5s = md5::Md5::new();
        for p in &chosen {
            md5_of_md5s.update(p.md5);
        }
        let etag = format!("\"{}-{}\"", hex(&md5_of_md5s.finalize()), chosen.len());
        let inner = self.inner();
        let record = self.head_bucket(&upload.bucket)?;
        let target = Target::Object {
            bucket: upload.bucket.clone(),
            key: upload.key.clone(),
            dataset: inner.dataset_of(&upload.bucket, &upload.key),
            compression: record.settings.compression,
            etag: Some(etag),
        };
        let mut handle = PutHandle::begin(
            Arc::clone(inner),
            target,
            options,
            self.config().chunk_bytes,
        )?;
        handle.preallocate(chosen.iter().map(|p| p.size_bytes).sum());
        let mut buf = vec![0u8; 1 << 20];
        for p in &chosen {
            let path = inner.cache.absolute(&p.cache_path);
            let mut file = std::fs::File::open(&path)
                .map_err(|e| io_error(format!("cannot open part {}", path.display()), e))?;
            loop {
                let n = file
                    .read(&mut buf)
                    .map_err(|e| io_error(format!("cannot read part {}", path.display()), e))?;
                if n == 0 {
                    break;
                }
                handle.write(&buf[..n])?;
            }
        }
        let info = handle.finish()?;
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
