//! Multipart uploads: CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload,
//! ListParts, ListMultipartUploads.
//!
//! Parts stream into the cache like a PutObject body, each a content of its own; completion makes the object the
//! list of its parts in one catalog transaction (no byte copied). Checksums: an upload announces an algorithm
//! and a type (`x-amz-checksum-algorithm`, `x-amz-checksum-type`; none = full-object CRC64NVME), every part
//! computes it, UploadPart and ListParts return it, and completion checks what the client lists per part and
//! for the whole object and stores the object's composite or full-object value (the store's
//! `multipart_checksum.rs`). Should completing still take longer than [`COMPLETE_INLINE_MS`], the answer
//! becomes a `200 OK` whose XML body is preceded by whitespace sent every 100 ms until the result (or the error)
//! is known, as S3 does, so clients do not time out. A completion retried after it succeeded (the client timed
//! out before the answer) is answered `200` with the same result while the version it created exists; another
//! part list is `InvalidPart` (the store's `completed_again`, docs/archive.md "Multipart objects").

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use permafrost_store::{
    BucketArchive, ChecksumAlgorithm, CompletionChecksums, ObjectInfo, PutOptions, Store,
    StoreError, UploadChecksum,
};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::{blocking, upload};
use crate::checksum;
use crate::common::{etag, metadata_pairs, owner, timestamp, NewVersion};
use crate::error::{internal, s3_error};
use crate::put::store_encoding;
use crate::versioning::{bucket_archive, expiration_header, version_header};

/// How long CompleteMultipartUpload waits before it switches to a kept-alive answer.
pub(crate) const COMPLETE_INLINE_MS: u64 = 2_000;
/// Most parts one ListParts page holds (S3's limit).
const PARTS_PAGE_MAX: i32 = 1000;
/// Most uploads one ListMultipartUploads page holds (S3's limit).
const UPLOADS_PAGE_MAX: i32 = 1000;

pub(crate) async fn create_multipart_upload(
    store: &Arc<Store>,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let input = req.input;
    let archive = bucket_archive(store, &input.bucket).await?;
    let attributes = NewVersion {
        cache_control: input.cache_control.clone(),
        content_disposition: input.content_disposition.clone(),
        content_language: input.content_language.clone(),
        expires: input.expires.clone(),
        tagging: input.tagging.as_deref(),
        storage_class: input.storage_class.as_ref().map(|c| c.as_str()),
        lock_mode: input.object_lock_mode.as_ref().map(|m| m.as_str()),
        retain_until: input.object_lock_retain_until_date.clone(),
        legal_hold: input
            .object_lock_legal_hold_status
            .as_ref()
            .map(|h| h.as_str()),
    }
    .attributes(archive.storage_class)?;
    let upload_checksum = announced_checksum(&input.checksum_algorithm, &input.checksum_type)?;
    let options = PutOptions {
        content_encoding: store_encoding(input.content_encoding.as_deref()),
        decoded_length: None,
        user_metadata: metadata_pairs(input.metadata),
        content_type: input.content_type.map(|m| m.to_string()),
        expected: Default::default(),
        attributes,
        upload_checksum,
        replica_of: None,
    };
    let store = Arc::clone(store);
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let upload_id = blocking(move || store.create_multipart(&bucket, &key, options)).await?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(upload_id),
        checksum_algorithm: input.checksum_algorithm,
        checksum_type: upload_checksum.map(|c| ChecksumType::from_static(c.kind.as_str())),
        ..Default::default()
    }))
}

/// The checksum an upload announces (`x-amz-checksum-algorithm`, `x-amz-checksum-type`), checked against S3's
/// rules; `None` when it announces none (its object gets the default full-object CRC64NVME).
fn announced_checksum(
    algorithm: &Option<s3s::dto::ChecksumAlgorithm>,
    kind: &Option<ChecksumType>,
) -> S3Result<Option<UploadChecksum>> {
    let kind = kind
        .as_ref()
        .map(|k| permafrost_store::ChecksumType::parse(k.as_str()))
        .transpose()
        .map_err(s3_error)?;
    let Some(algorithm) = algorithm else {
        if kind.is_some() {
            return Err(s3_error(StoreError::InvalidRequest(
                "x-amz-checksum-type needs x-amz-checksum-algorithm".into(),
            )));
        }
        return Ok(None);
    };
    let algorithm = ChecksumAlgorithm::from_name(algorithm.as_str())
        .filter(|a| *a != ChecksumAlgorithm::Md5)
        .ok_or_else(|| {
            s3_error(StoreError::InvalidArgument(format!(
                "x-amz-checksum-algorithm {:?} is not one of CRC32, CRC32C, CRC64NVME, SHA1, SHA256",
                algorithm.as_str()
            )))
        })?;
    UploadChecksum::announced(algorithm, kind)
        .map(Some)
        .map_err(s3_error)
}

/// A stored checksum value by algorithm name.
fn value_of(checksums: &[(String, String)], name: &str) -> Option<String> {
    checksums
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

fn part_number(n: i32) -> S3Result<u32> {
    u32::try_from(n).map_err(|_| {
        s3_error(StoreError::InvalidArgument(format!(
            "part number {n} is negative"
        )))
    })
}

pub(crate) async fn upload_part(
    store: &Arc<Store>,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let trailer = checksum::trailer_of(&req.headers)?;
    let input = req.input;
    let number = part_number(input.part_number)?;
    let expected = checksum::from_headers(
        input.content_md5,
        input.checksum_crc32,
        input.checksum_crc32c,
        input.checksum_sha1,
        input.checksum_sha256,
        input.checksum_crc64nvme,
    );
    let store = Arc::clone(store);
    let upload_id = input.upload_id;
    let info = upload(
        input.body,
        move || store.upload_part(&upload_id, number, expected),
        trailer,
        req.trailing_headers,
    )
    .await?;
    // The part's checksums: those the client sent (headers or trailer), verified, and the upload's algorithm.
    let c = &info.checksums;
    Ok(S3Response::new(UploadPartOutput {
        e_tag: Some(etag(&info.etag)),
        checksum_crc32: value_of(c, "crc32"),
        checksum_crc32c: value_of(c, "crc32c"),
        checksum_sha1: value_of(c, "sha1"),
        checksum_sha256: value_of(c, "sha256"),
        checksum_crc64nvme: value_of(c, "crc64nvme"),
        ..Default::default()
    }))
}

fn complete_output(info: ObjectInfo, archive: &BucketArchive) -> CompleteMultipartUploadOutput {
    let c = &info.checksums;
    CompleteMultipartUploadOutput {
        checksum_crc32: value_of(c, "crc32"),
        checksum_crc32c: value_of(c, "crc32c"),
        checksum_sha1: value_of(c, "sha1"),
        checksum_sha256: value_of(c, "sha256"),
        checksum_crc64nvme: value_of(c, "crc64nvme"),
        checksum_type: c.first().map(|(_, v)| {
            ChecksumType::from_static(permafrost_store::ChecksumType::of_value(v).as_str())
        }),
        location: Some(format!("/{}/{}", info.bucket, info.key)),
        e_tag: Some(etag(&info.etag)),
        version_id: version_header(archive, &info.version_id),
        expiration: expiration_header(archive, &info),
        bucket: Some(info.bucket),
        key: Some(info.key),
        ..Default::default()
    }
}

pub(crate) async fn complete_multipart_upload(
    store: &Arc<Store>,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let input = req.input;
    // `If-None-Match: *` / `If-Match`: checked in the completion's transaction (crate::conditional).
    let condition =
        crate::conditional::write_condition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
    let mut parts = Vec::new();
    let mut sent = CompletionChecksums {
        object: [
            (ChecksumAlgorithm::Crc32, &input.checksum_crc32),
            (ChecksumAlgorithm::Crc32c, &input.checksum_crc32c),
            (ChecksumAlgorithm::Crc64nvme, &input.checksum_crc64nvme),
            (ChecksumAlgorithm::Sha1, &input.checksum_sha1),
            (ChecksumAlgorithm::Sha256, &input.checksum_sha256),
        ]
        .into_iter()
        .find_map(|(a, v)| v.clone().map(|v| (a, v))),
        object_type: input
            .checksum_type
            .as_ref()
            .map(|k| permafrost_store::ChecksumType::parse(k.as_str()))
            .transpose()
            .map_err(s3_error)?,
        ..Default::default()
    };
    for part in input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default()
    {
        let number = part
            .part_number
            .ok_or_else(|| s3_error(StoreError::InvalidPart("a part has no PartNumber".into())))?;
        let tag = part.e_tag.ok_or_else(|| {
            s3_error(StoreError::InvalidPart(format!(
                "part {number} has no ETag"
            )))
        })?;
        let n = part_number(number)?;
        for (algorithm, value) in [
            (ChecksumAlgorithm::Crc32, part.checksum_crc32),
            (ChecksumAlgorithm::Crc32c, part.checksum_crc32c),
            (ChecksumAlgorithm::Crc64nvme, part.checksum_crc64nvme),
            (ChecksumAlgorithm::Sha1, part.checksum_sha1),
            (ChecksumAlgorithm::Sha256, part.checksum_sha256),
        ] {
            if let Some(value) = value {
                sent.parts.push((n, algorithm, value));
            }
        }
        parts.push((n, tag.value().to_owned()));
    }
    let archive = bucket_archive(store, &input.bucket).await?;
    let store = Arc::clone(store);
    let upload_id = input.upload_id;
    let mut task = tokio::task::spawn_blocking(move || {
        store.complete_multipart_if(&upload_id, &parts, &sent, &condition)
    });
    let joined = move |r: Result<Result<ObjectInfo, StoreError>, tokio::task::JoinError>| match r {
        Ok(Ok(info)) => Ok(complete_output(info, &archive)),
        Ok(Err(e)) => Err(s3_error(e)),
        Err(e) => Err(internal(format!("completing the upload failed: {e}"))),
    };
    tokio::select! {
        r = &mut task => Ok(S3Response::new(joined(r)?)),
        () = tokio::time::sleep(Duration::from_millis(COMPLETE_INLINE_MS)) => {
            let future = async move { joined(task.await) }.boxed();
            Ok(S3Response::new(CompleteMultipartUploadOutput {
                future: Some(future),
                ..Default::default()
            }))
        }
    }
}

pub(crate) async fn abort_multipart_upload(
    store: &Arc<Store>,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let store = Arc::clone(store);
    blocking(move || store.abort_multipart(&req.input.upload_id)).await?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(crate) async fn list_parts(
    store: &Arc<Store>,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    let store = Arc::clone(store);
    let upload_id = input.upload_id.clone();
    let all = blocking(move || store.list_parts(&upload_id)).await?;
    let marker = input.part_number_marker.unwrap_or(0).max(0) as u32;
    let limit = input
        .max_parts
        .unwrap_or(PARTS_PAGE_MAX)
        .clamp(1, PARTS_PAGE_MAX) as usize;
    let mut after: Vec<_> = all.into_iter().filter(|p| p.part_number > marker).collect();
    after.sort_by_key(|p| p.part_number);
    let is_truncated = after.len() > limit;
    after.truncate(limit);
    let next_marker = after.last().map(|p| p.part_number as i32);
    let parts = after
        .into_iter()
        .map(|p| Part {
            part_number: Some(p.part_number as i32),
            size: i64::try_from(p.size_bytes).ok(),
            e_tag: Some(etag(&p.etag)),
            last_modified: Some(timestamp(p.last_modified_ms)),
            checksum_crc32: value_of(&p.checksums, "crc32"),
            checksum_crc32c: value_of(&p.checksums, "crc32c"),
            checksum_sha1: value_of(&p.checksums, "sha1"),
            checksum_sha256: value_of(&p.checksums, "sha256"),
            checksum_crc64nvme: value_of(&p.checksums, "crc64nvme"),
        })
        .collect();
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: next_marker,
        max_parts: Some(limit as i32),
        is_truncated: Some(is_truncated),
        parts: Some(parts),
        initiator: Some(Initiator {
            display_name: owner().display_name,
            id: owner().id,
        }),
        owner: Some(owner()),
        storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
        ..Default::default()
    }))
}

pub(crate) async fn list_multipart_uploads(
    store: &Arc<Store>,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    let limit = input
        .max_uploads
        .unwrap_or(UPLOADS_PAGE_MAX)
        .clamp(1, UPLOADS_PAGE_MAX) as usize;
    let store = Arc::clone(store);
    let (bucket, prefix) = (
        input.bucket.clone(),
        input.prefix.clone().unwrap_or_default(),
    );
    let key_marker = input.key_marker.clone().unwrap_or_default();
    let upload_id_marker = input.upload_id_marker.clone().unwrap_or_default();
    let mut uploads = blocking(move || store.list_uploads(&bucket, &prefix, usize::MAX)).await?;
    uploads.sort_by(|a, b| {
        (&a.key, a.created_ms, &a.upload_id).cmp(&(&b.key, b.created_ms, &b.upload_id))
    });
    uploads.retain(|u| {
        key_marker.is_empty()
            || u.key > key_marker
            || (u.key == key_marker
                && !upload_id_marker.is_empty()
                && u.upload_id > upload_id_marker)
    });
    let is_truncated = uploads.len() > limit;
    uploads.truncate(limit);
    let next = uploads.last().map(|u| (u.key.clone(), u.upload_id.clone()));
    let list = uploads
        .into_iter()
        .map(|u| MultipartUpload {
            key: Some(u.key),
            upload_id: Some(u.upload_id),
            initiated: Some(timestamp(u.created_ms)),
            initiator: Some(Initiator {
                display_name: owner().display_name,
                id: owner().id,
            }),
            owner: Some(owner()),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            ..Default::default()
        })
        .collect();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        key_marker: input.key_marker,
        upload_id_marker: input.upload_id_marker,
        next_key_marker: next.as_ref().filter(|_| is_truncated).map(|n| n.0.clone()),
        next_upload_id_marker: next.filter(|_| is_truncated).map(|n| n.1),
        max_uploads: Some(limit as i32),
        is_truncated: Some(is_truncated),
        uploads: Some(list),
        ..Default::default()
    }))
}
