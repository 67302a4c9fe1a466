//! GetObject, HeadObject and GetObjectAttributes.
//!
//! GET streams the object from the store (the cache, or the grid: one disk spins up) through a bounded channel
//! (`bridge::download`). Ranges (`bytes=a-b`, `a-`, `-n`) are on the representation returned: decoded bytes
//! normally; for an object uploaded pre-compressed (`zstd`/`lz4`) and a client whose `Accept-Encoding` names
//! that encoding, the stored bytes with `Content-Encoding`. HEAD answers from the catalog only (no disk wakes)
//! and shows the persistence state in [`crate::STATE_HEADER`].
//!
//! `?partNumber=N` reads part `N` of a multipart object as a range (`206`, `x-amz-mp-parts-count`; an object
//! uploaded whole is its own part 1); GetObjectAttributes pages the parts (`x-amz-max-parts`,
//! `x-amz-part-number-marker`). A read that meets a delete marker is refused with `x-amz-delete-marker: true`
//! ([`read_error`]), as AWS documents (docs/archive.md, "Multipart objects").

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use permafrost_store::{ByteRange, Encoding, ObjectInfo, RestoreInfo, Store, StoreError};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::{blocking, download, read_whole};
use crate::common::{
    etag, http_date, metadata, object_headers, stored_expires, stored_header, timestamp,
    DEFAULT_CONTENT_TYPE,
};
use crate::error::s3_error;
use crate::versioning::{bucket_archive, expiration_header, version_header};

/// Bodies up to this size are read whole (and verified) while the GET opens, in the same blocking call: no
/// reader thread or channel, and a verification failure is an error answer instead of a cut body.
pub const SMALL_BODY_BYTES: u64 = crate::bridge::READ_PIECE_BYTES as u64;
use permafrost_disk::power::{WakeContext, WakeReason, WakeWitness};

/// The stored encodings (`zstd`, `lz4`) the client accepts, from `Accept-Encoding` (`q=0` excludes; `*` is
/// not taken as a yes: decoded bytes are always safe).
pub(crate) fn accepted_encodings(headers: &HeaderMap) -> Vec<Encoding> {
    let mut accepted = Vec::new();
    for value in headers.get_all(http::header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            let encoding = match name.as_str() {
                "zstd" => Encoding::Zstd,
                "lz4" => Encoding::Lz4,
                _ => continue,
            };
            if !refused && !accepted.contains(&encoding) {
                accepted.push(encoding);
            }
        }
    }
    accepted
}

fn byte_range(range: Option<Range>) -> Option<ByteRange> {
    range.map(|r| match r {
        Range::Int {
            first,
            last: Some(last),
        } => ByteRange::FromTo(first, last),
        Range::Int { first, last: None } => ByteRange::From(first),
        Range::Suffix { length } => ByteRange::Suffix(length),
    })
}

fn content_encoding(encoding: Encoding) -> Option<String> {
    (encoding != Encoding::Identity).then(|| encoding.as_str().to_owned())
}

/// The part of GET and HEAD answers that describes the version (besides size and body).
pub(crate) struct VersionHeaders {
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub expires: Option<Timestamp>,
    pub version_id: Option<String>,
    pub expiration: Option<String>,
    pub restore: Option<String>,
    pub storage_class: Option<StorageClass>,
    pub lock_mode: Option<ObjectLockMode>,
    pub retain_until: Option<Timestamp>,
    pub legal_hold: Option<ObjectLockLegalHoldStatus>,
    pub checksums: Vec<(String, String)>,
}

/// `x-amz-restore` of a version: `ongoing-request="true"`, or `ongoing-request="false", expiry-date="…"`.
pub(crate) fn restore_header(restore: Option<RestoreInfo>) -> Option<String> {
    let r = restore?;
    Some(match (r.ongoing, r.expiry_ms) {
        (true, _) | (false, None) => "ongoing-request=\"true\"".to_owned(),
        (false, Some(at)) => format!(
            "ongoing-request=\"false\", expiry-date=\"{}\"",
            http_date(at)
        ),
    })
}

/// Everything HEAD and GET say about a version besides its bytes (catalog only).
pub(crate) async fn version_headers(
    store: &Arc<Store>,
    info: &ObjectInfo,
    checksum_mode: bool,
) -> S3Result<VersionHeaders> {
    let store = Arc::clone(store);
    let info = info.clone();
    blocking(move || version_headers_now(&store, &info, checksum_mode)).await
}

/// [`version_headers`] on the caller's (blocking) thread.
fn version_headers_now(
    store: &Store,
    info: &ObjectInfo,
    checksum_mode: bool,
) -> Result<VersionHeaders, StoreError> {
    let archive = store.bucket_archive(&info.bucket)?;
    let restore = store.restore_info(info)?;
    let lock = info.attributes.lock;
    Ok(VersionHeaders {
        cache_control: stored_header(info, "cache-control"),
        content_disposition: stored_header(info, "content-disposition"),
        content_language: stored_header(info, "content-language"),
        expires: stored_expires(info),
        version_id: version_header(&archive, &info.version_id),
        expiration: expiration_header(&archive, info),
        restore: restore_header(restore),
        // S3 leaves STANDARD out.
        storage_class: (info.attributes.storage_class != permafrost_store::StorageClass::Standard)
            .then(|| StorageClass::from(info.attributes.storage_class.as_str().to_owned())),
        lock_mode: lock
            .retention
            .map(|r| ObjectLockMode::from(r.mode.as_str().to_owned())),
        retain_until: lock.retention.map(|r| timestamp(r.retain_until_ms)),
        legal_hold: archive.object_lock.then(|| {
            ObjectLockLegalHoldStatus::from_static(if lock.legal_hold {
                ObjectLockLegalHoldStatus::ON
            } else {
                ObjectLockLegalHoldStatus::OFF
            })
        }),
        checksums: if checksum_mode {
            info.checksums.clone()
        } else {
            Vec::new()
        },
    })
}

fn checksum(h: &VersionHeaders, name: &str) -> Option<String> {
    h.checksums
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

/// `FULL_OBJECT` or `COMPOSITE` (a multipart object's `base64-N` value), when a checksum is returned.
fn checksum_type(h: &VersionHeaders) -> Option<ChecksumType> {
    h.checksums.first().map(|(_, v)| {
        ChecksumType::from_static(permafrost_store::ChecksumType::of_value(v).as_str())
    })
}

fn checksum_mode(mode: &Option<ChecksumMode>) -> bool {
    mode.as_ref()
        .is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

pub(crate) async fn get_object(
    store: &Arc<Store>,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let conditions = crate::conditional::check_get(store, &req.input).await?;
    let accepted = accepted_encodings(&req.headers);
    // Why its disk wakes, if it must: this read (and whether the request waited, for the metrics).
    let wake = WakeContext {
        reason: WakeReason::read(&req.input.bucket, &req.input.key),
        witness: req.extensions.get::<Arc<WakeWitness>>().cloned(),
    };
    let input = req.input;
    let part_number = part_number_of(input.part_number, input.range.is_some())?;
    let range = byte_range(input.range);
    let opener = Arc::clone(store);
    let (bucket, key, version) = (
        input.bucket.clone(),
        input.key.clone(),
        input.version_id.clone(),
    );
    let wants_checksum = checksum_mode(&input.checksum_mode);
    let opening = wake.clone();
    // One blocking call opens the version, reads what its headers need and, for a small body, the body itself.
    let opened = blocking(move || {
        let _wake = opening.enter();
        let (info, mut reader, part) = if let Some(n) = part_number {
            let (info, reader, part) =
                opener.open_version_part(&bucket, &key, version.as_deref(), n, &accepted)?;
            (info, reader, Some(part))
        } else {
            let accept = match accepted.as_slice() {
                [] => None,
                [one] => Some(*one),
                _ => {
                    let encoding = opener
                        .head_version(&bucket, &key, version.as_deref())?
                        .content_encoding;
                    accepted.contains(&encoding).then_some(encoding)
                }
            };
            let (info, reader) =
                opener.open_version(&bucket, &key, version.as_deref(), range, accept)?;
            (info, reader, None)
        };
        // A checksum describes the whole object as uploaded: not a range, not the decoded form of bytes sent
        // pre-compressed (a client that checks it would reject correct bytes).
        let whole_as_uploaded =
            reader.range().is_none() && reader.encoding() == info.content_encoding;
        let h = version_headers_now(&opener, &info, wants_checksum && whole_as_uploaded)?;
        let small = if reader.len() <= SMALL_BODY_BYTES {
            let bytes = read_whole(&mut reader)
                .map_err(|e| StoreError::Internal(format!("reading {bucket}/{key} failed: {e}")))?;
            Some(Bytes::from(bytes))
        } else {
            None
        };
        Ok((info, reader, h, small, part))
    })
    .await;
    let (info, reader, h, small, part) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            return Err(read_error(store, &input.bucket, &input.key, input.version_id, e).await)
        }
    };
    // Again on the version opened, which a write may have replaced since the check (catalog read) above.
    conditions.check_read(&info.etag, info.last_modified_ms)?;
    let content_range = reader.range().map(|(offset, length)| {
        format!(
            "bytes {}-{}/{}",
            offset,
            offset + length - 1,
            reader.total_bytes()
        )
    });
    let output = GetObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: i64::try_from(reader.len()).ok(),
        content_range,
        content_encoding: content_encoding(reader.encoding()),
        content_type: Some(content_type(&info)),
        e_tag: Some(etag(&info.etag)),
        last_modified: Some(timestamp(info.last_modified_ms)),
        metadata: metadata(&info.user_metadata),
        tag_count: (!info.attributes.tags.is_empty()).then_some(info.attributes.tags.len() as i32),
        parts_count: part.and_then(|p| p.parts_count).map(|n| n as i32),
        checksum_crc32: checksum(&h, "crc32"),
        checksum_crc32c: checksum(&h, "crc32c"),
        checksum_sha1: checksum(&h, "sha1"),
        checksum_sha256: checksum(&h, "sha256"),
        checksum_crc64nvme: checksum(&h, "crc64nvme"),
        checksum_type: checksum_type(&h),
        cache_control: h.cache_control,
        content_disposition: h.content_disposition,
        content_language: h.content_language,
        expires: h.expires,
        version_id: h.version_id,
        expiration: h.expiration,
        restore: h.restore,
        storage_class: h.storage_class,
        object_lock_mode: h.lock_mode,
        object_lock_retain_until_date: h.retain_until,
        object_lock_legal_hold_status: h.legal_hold,
        body: Some(match small {
            Some(bytes) => StreamingBlob::from(s3s::Body::from(bytes)),
            None => download(reader, Arc::clone(store), Some(wake)),
        }),
        ..Default::default()
    };
    let mut response = S3Response::new(output);
    response.headers = object_headers(&info);
    Ok(response)
}

fn content_type(info: &ObjectInfo) -> ContentType {
    info.content_type
        .clone()
        .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.into())
}

pub(crate) async fn head_object(
    store: &Arc<Store>,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    crate::conditional::check_get(store, &req.input).await?;
    let accepted = accepted_encodings(&req.headers);
    let input = req.input;
    let part_number = part_number_of(input.part_number, input.range.is_some())?;
    let wants_checksum =
        checksum_mode(&input.checksum_mode) && input.range.is_none() && part_number.is_none();
    let headed = {
        let store = Arc::clone(store);
        let (bucket, key, version) = (
            input.bucket.clone(),
            input.key.clone(),
            input.version_id.clone(),
        );
        blocking(move || {
            let (info, part) = match part_number {
                Some(n) => {
                    let (info, part) =
                        store.head_version_part(&bucket, &key, version.as_deref(), n, &accepted)?;
                    (info, Some(part))
                }
                None => (store.head_version(&bucket, &key, version.as_deref())?, None),
            };
            let as_stored = match part {
                Some(p) => p.encoding != Encoding::Identity,
                None => {
                    info.content_encoding != Encoding::Identity
                        && accepted.contains(&info.content_encoding)
                }
            };
            let as_uploaded = info.content_encoding == Encoding::Identity || as_stored;
            let h = version_headers_now(&store, &info, wants_checksum && as_uploaded)?;
            Ok((info, as_stored, h, part))
        })
        .await
    };
    let (info, as_stored, h, part) = match headed {
        Ok(headed) => headed,
        Err(e) => {
            return Err(read_error(store, &input.bucket, &input.key, input.version_id, e).await)
        }
    };
    let output = HeadObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: i64::try_from(match part {
            Some(p) => p.length,
            None if as_stored => info.stored_bytes,
            None => info.size_bytes,
        })
        .ok(),
        content_range: part.filter(|p| p.length > 0).map(|p| {
            format!(
                "bytes {}-{}/{}",
                p.offset,
                p.offset + p.length - 1,
                p.total_bytes
            )
        }),
        parts_count: part.and_then(|p| p.parts_count).map(|n| n as i32),
        content_encoding: if as_stored {
            content_encoding(info.content_encoding)
        } else {
            None
        },
        content_type: Some(content_type(&info)),
        e_tag: Some(etag(&info.etag)),
        last_modified: Some(timestamp(info.last_modified_ms)),
        metadata: metadata(&info.user_metadata),
        checksum_crc32: checksum(&h, "crc32"),
        checksum_crc32c: checksum(&h, "crc32c"),
        checksum_sha1: checksum(&h, "sha1"),
        checksum_sha256: checksum(&h, "sha256"),
        checksum_crc64nvme: checksum(&h, "crc64nvme"),
        checksum_type: checksum_type(&h),
        cache_control: h.cache_control,
        content_disposition: h.content_disposition,
        content_language: h.content_language,
        expires: h.expires,
        version_id: h.version_id,
        expiration: h.expiration,
        restore: h.restore,
        storage_class: h.storage_class,
        object_lock_mode: h.lock_mode,
        object_lock_retain_until_date: h.retain_until,
        object_lock_legal_hold_status: h.legal_hold,
        ..Default::default()
    };
    let mut response = S3Response::new(output);
    response.headers = object_headers(&info);
    // A part (a range of the object) is partial content, on HEAD too (s3s answers HEAD 200 whatever the output).
    if part.is_some_and(|p| p.length > 0) {
        response.headers.insert(
            crate::server::STATUS_OVERRIDE_HEADER,
            http::HeaderValue::from_static("206"),
        );
    }
    Ok(response)
}

/// The part number of a GET or HEAD (`?partNumber=N`), checked: 1 to 10,000 (`InvalidArgument`), never with a
/// `Range` (`InvalidRequest`), as S3 answers.
fn part_number_of(part_number: Option<i32>, with_range: bool) -> S3Result<Option<u32>> {
    let Some(n) = part_number else {
        return Ok(None);
    };
    if with_range {
        return Err(s3_error(StoreError::InvalidRequest(
            "Cannot specify both Range header and partNumber query parameter".into(),
        )));
    }
    match u32::try_from(n) {
        Ok(n) if (1..=permafrost_store::PART_NUMBER_MAX).contains(&n) => Ok(Some(n)),
        _ => Err(s3_error(StoreError::InvalidArgument(format!(
            "Part number must be an integer between 1 and {}, inclusive (got {n})",
            permafrost_store::PART_NUMBER_MAX
        )))),
    }
}

/// The error of a read (GET, HEAD, GetObjectAttributes) as S3 answers it: one that ran into a delete marker
/// (`404 NoSuchKey`: the newest version is one; `405 MethodNotAllowed`: the version asked for is one) carries
/// `x-amz-delete-marker: true` and the marker's `x-amz-version-id` (405: and its `Last-Modified`).
pub(crate) async fn read_error(
    store: &Arc<Store>,
    bucket: &str,
    key: &str,
    version_id: Option<String>,
    mut e: s3s::S3Error,
) -> s3s::S3Error {
    match e.code() {
        s3s::S3ErrorCode::NoSuchKey | s3s::S3ErrorCode::MethodNotAllowed => {}
        _ => return e,
    }
    let named = version_id.is_some();
    let marker = {
        let store = Arc::clone(store);
        let (bucket, key) = (bucket.to_owned(), key.to_owned());
        blocking(move || store.delete_marker(&bucket, &key, version_id.as_deref())).await
    };
    let Ok(Some((version_id, last_modified_ms))) = marker else {
        return e;
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&version_id) {
        headers.insert("x-amz-version-id", v);
    }
    if named {
        if let Ok(v) = http::HeaderValue::from_str(&http_date(last_modified_ms)) {
            headers.insert(http::header::LAST_MODIFIED, v);
        }
    }
    e.set_headers(headers);
    e
}

/// Most parts one GetObjectAttributes answer lists (S3's default and limit for `x-amz-max-parts`).
const ATTRIBUTE_PARTS_MAX: i32 = 1000;

/// GetObjectAttributes: ETag, size, storage class, the checksum verified at
/// upload, and of a multipart object its parts (`ObjectParts`: their count, and a page of them after
/// `x-amz-part-number-marker` of at most `x-amz-max-parts` with each part's size and checksum, listed when
/// the object has a checksum, as S3 does). Catalog only. Headers: `Last-Modified`, `x-amz-version-id`; a read
/// that meets a delete marker is refused as GET is ([`read_error`]).
pub(crate) async fn get_object_attributes(
    store: &Arc<Store>,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let input = req.input;
    // SDKs send the attributes as one comma-separated header value (s3s keeps each header value whole).
    let wanted = |name: &str| {
        input
            .object_attributes
            .iter()
            .flat_map(|a| a.as_str().split(','))
            .any(|a| a.trim() == name)
    };
    let max_parts = match input.max_parts {
        None => ATTRIBUTE_PARTS_MAX,
        Some(n) if n >= 0 => n.min(ATTRIBUTE_PARTS_MAX),
        Some(n) => {
            return Err(s3_error(StoreError::InvalidArgument(format!(
                "x-amz-max-parts must be between 0 and {ATTRIBUTE_PARTS_MAX} (got {n})"
            ))))
        }
    };
    let marker = match input.part_number_marker {
        None => 0,
        Some(n) => u32::try_from(n).map_err(|_| {
            s3_error(StoreError::InvalidArgument(format!(
                "x-amz-part-number-marker must be a part number (got {n})"
            )))
        })?,
    };
    let found = {
        let store = Arc::clone(store);
        let (bucket, key, version) = (
            input.bucket.clone(),
            input.key.clone(),
            input.version_id.clone(),
        );
        blocking(move || store.version_parts(&bucket, &key, version.as_deref())).await
    };
    let (info, parts) = match found {
        Ok(found) => found,
        Err(e) => {
            return Err(read_error(store, &input.bucket, &input.key, input.version_id, e).await)
        }
    };
    let archive = bucket_archive(store, &info.bucket).await?;
    let h = VersionHeaders {
        checksums: info.checksums.clone(),
        ..version_headers(store, &info, false).await?
    };
    let checksum = Checksum {
        checksum_crc32: checksum(&h, "crc32"),
        checksum_crc32c: checksum(&h, "crc32c"),
        checksum_sha1: checksum(&h, "sha1"),
        checksum_sha256: checksum(&h, "sha256"),
        checksum_crc64nvme: checksum(&h, "crc64nvme"),
        checksum_type: checksum_type(&h),
    };
    let has_checksum = !h.checksums.is_empty();
    let object_parts = (wanted(ObjectAttributes::OBJECT_PARTS) && !parts.is_empty()).then(|| {
        let total = parts.len();
        let after: Vec<_> = parts
            .into_iter()
            .filter(|p| p.part_number > marker)
            .collect();
        let is_truncated = after.len() > max_parts as usize;
        let page: Vec<_> = after.into_iter().take(max_parts as usize).collect();
        let next = page.last().map_or(marker, |p| p.part_number);
        GetObjectAttributesParts {
            total_parts_count: Some(total as i32),
            part_number_marker: Some(marker as i32),
            next_part_number_marker: Some(next as i32),
            max_parts: Some(max_parts),
            is_truncated: Some(is_truncated),
            parts: has_checksum.then(|| {
                page.into_iter()
                    .map(|p| ObjectPart {
                        part_number: Some(p.part_number as i32),
                        size: i64::try_from(p.size_bytes).ok(),
                        checksum_crc32: value_of(&p.checksums, "crc32"),
                        checksum_crc32c: value_of(&p.checksums, "crc32c"),
                        checksum_sha1: value_of(&p.checksums, "sha1"),
                        checksum_sha256: value_of(&p.checksums, "sha256"),
                        checksum_crc64nvme: value_of(&p.checksums, "crc64nvme"),
                    })
                    .collect()
            }),
        }
    });
    Ok(S3Response::new(GetObjectAttributesOutput {
        e_tag: wanted(ObjectAttributes::ETAG).then(|| etag(&info.etag)),
        object_size: wanted(ObjectAttributes::OBJECT_SIZE)
            .then(|| i64::try_from(info.size_bytes).ok())
            .flatten(),
        storage_class: wanted(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from(info.attributes.storage_class.as_str().to_owned())),
        checksum: (wanted(ObjectAttributes::CHECKSUM) && has_checksum).then_some(checksum),
        object_parts,
        last_modified: Some(timestamp(info.last_modified_ms)),
        version_id: version_header(&archive, &info.version_id),
        ..Default::default()
    }))
}

/// A stored checksum value by algorithm name.
fn value_of(checksums: &[(String, String)], name: &str) -> Option<String> {
    checksums
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::ACCEPT_ENCODING, value.parse().unwrap());
        h
    }

    #[test]
    fn accept_encoding_names_zstd_and_lz4_unless_refused() {
        assert_eq!(accepted_encodings(&HeaderMap::new()), vec![]);
        assert_eq!(accepted_encodings(&headers("gzip, deflate")), vec![]);
        assert_eq!(
            accepted_encodings(&headers("gzip, zstd")),
            vec![Encoding::Zstd]
        );
        assert_eq!(
            accepted_encodings(&headers("ZSTD;q=0.5, lz4")),
            vec![Encoding::Zstd, Encoding::Lz4]
        );
        assert_eq!(
            accepted_encodings(&headers("zstd;q=0, lz4")),
            vec![Encoding::Lz4]
        );
        assert_eq!(accepted_encodings(&headers("*")), vec![]);
    }

    #[test]
    fn s3_ranges_become_store_ranges() {
        assert_eq!(
            byte_range(Some(Range::Int {
                first: 2,
                last: Some(5)
            })),
            Some(ByteRange::FromTo(2, 5))
        );
        assert_eq!(
            byte_range(Some(Range::Int {
                first: 2,
                last: None
            })),
            Some(ByteRange::From(2))
        );
        assert_eq!(
            byte_range(Some(Range::Suffix { length: 7 })),
            Some(ByteRange::Suffix(7))
        );
        assert_eq!(byte_range(None), None);
    }
}
