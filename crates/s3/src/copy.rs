//! CopyObject: a new reference to the same content (catalog only, no bytes move, no disk wakes).
//! `x-amz-metadata-directive: REPLACE` takes the request's user metadata and content type. Both copies check
//! the `x-amz-copy-source-if-*` headers against the source version (`crate::conditional`; `412` when one fails);
//! CopyObject's `If-None-Match: *` and `If-Match` are conditions on the target key, checked in the copy's
//! catalog transaction.

use std::sync::Arc;

use permafrost_store::{ByteRange, Store};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::{etag, metadata_pairs, timestamp, NewVersion};
use crate::conditional::{write_condition_of_headers, Preconditions};
use crate::versioning::{bucket_archive, expiration_header, version_header};

/// The bucket, key and version a copy reads (`x-amz-copy-source`); access points are not supported.
fn copy_source(source: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(str::to_owned),
        )),
        _ => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "access points are not supported",
        )),
    }
}

pub(crate) async fn copy_object(
    store: &Arc<Store>,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let target_condition = write_condition_of_headers(&req.headers)?;
    let input = req.input;
    let (source_bucket, source_key, source_version) = copy_source(&input.copy_source)?;
    let conditions = Preconditions::of_copy(&input);
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str().eq_ignore_ascii_case(MetadataDirective::REPLACE));
    let replace_tags = input
        .tagging_directive
        .as_ref()
        .is_some_and(|d| d.as_str().eq_ignore_ascii_case(TaggingDirective::REPLACE));
    if !replace
        && source_bucket == input.bucket
        && source_key == input.key
        && source_version.is_none()
    {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the \
             object's metadata.",
        ));
    }
    let metadata = replace.then(|| {
        (
            metadata_pairs(input.metadata),
            input.content_type.map(|m| m.to_string()),
        )
    });
    let archive = bucket_archive(store, &input.bucket).await?;
    // New attributes when the request says anything about them; else the source's (without its lock).
    let says_something = replace
        || replace_tags
        || input.storage_class.is_some()
        || input.object_lock_mode.is_some()
        || input.object_lock_legal_hold_status.is_some();
    let attributes = if says_something {
        let source = {
            let store = Arc::clone(store);
            let (b, k, v) = (
                source_bucket.clone(),
                source_key.clone(),
                source_version.clone(),
            );
            blocking(move || store.head_version(&b, &k, v.as_deref())).await?
        };
        let header = |name: &str| {
            source
                .attributes
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let mut a = NewVersion {
            cache_control: if replace {
                input.cache_control.clone()
            } else {
                header("cache-control")
            },
            content_disposition: if replace {
                input.content_disposition.clone()
            } else {
                header("content-disposition")
            },
            content_language: if replace {
                input.content_language.clone()
            } else {
                header("content-language")
            },
            expires: input.expires.clone(),
            tagging: if replace_tags {
                Some(input.tagging.as_deref().unwrap_or(""))
            } else {
                None
            },
            storage_class: input.storage_class.as_ref().map(|c| c.as_str()),
            lock_mode: input.object_lock_mode.as_ref().map(|m| m.as_str()),
            retain_until: input.object_lock_retain_until_date.clone(),
            legal_hold: input
                .object_lock_legal_hold_status
                .as_ref()
                .map(|h| h.as_str()),
        }
        .attributes(archive.storage_class)?;
        if !replace {
            a.headers = source.attributes.headers.clone();
        }
        if !replace_tags {
            a.tags = source.attributes.tags.clone();
        }
        Some(a)
    } else {
        None
    };
    let store = Arc::clone(store);
    let (bucket, key) = (input.bucket, input.key);
    let source_version_echo = source_version.clone();
    let info = blocking(move || {
        if conditions.any() {
            let source =
                store.head_version(&source_bucket, &source_key, source_version.as_deref())?;
            conditions.check_copy_source(&source.etag, source.last_modified_ms)?;
        }
        store.copy_version_if(
            (&source_bucket, &source_key, source_version.as_deref()),
            (&bucket, &key),
            metadata,
            attributes,
            &target_condition,
        )
    })
    .await?;
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(etag(&info.etag)),
            last_modified: Some(timestamp(info.last_modified_ms)),
            ..Default::default()
        }),
        version_id: version_header(&archive, &info.version_id),
        copy_source_version_id: source_version_echo,
        expiration: expiration_header(&archive, &info),
        ..Default::default()
    }))
}

/// Bytes moved per read and write of an UploadPartCopy.
const PART_COPY_PIECE_BYTES: usize = 1 << 20;

/// `x-amz-copy-source-range: bytes=FIRST-LAST` (both inclusive, both required, as S3 wants).
fn copy_source_range(text: &str) -> S3Result<ByteRange> {
    let bad = || {
        S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("x-amz-copy-source-range {text:?}: expected bytes=FIRST-LAST"),
        )
    };
    let (first, last) = text
        .trim()
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let first: u64 = first.trim().parse().map_err(|_| bad())?;
    let last: u64 = last.trim().parse().map_err(|_| bad())?;
    if last < first {
        return Err(bad());
    }
    Ok(ByteRange::FromTo(first, last))
}

/// UploadPartCopy: a part made of (a range of) another object's bytes. The source is read like a GET (from the
/// cache, or its disk spins up; a GLACIER source must be restored first) and streamed into the part, which is
/// stored and verified like an uploaded one. Memory: one piece of [`PART_COPY_PIECE_BYTES`].
pub(crate) async fn upload_part_copy(
    store: &Arc<Store>,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let input = req.input;
    let (source_bucket, source_key, source_version) = copy_source(&input.copy_source)?;
    let conditions = Preconditions::of_part_copy(&input);
    let range = input
        .copy_source_range
        .as_deref()
        .map(copy_source_range)
        .transpose()?;
    let number = u32::try_from(input.part_number).map_err(|_| {
        S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("part number {} is negative", input.part_number),
        )
    })?;
    let source_archive = bucket_archive(store, &source_bucket).await?;
    let store = Arc::clone(store);
    let upload_id = input.upload_id;
    let version_for_copy = source_version.clone();
    let (source, part) = blocking(move || {
        // From the catalog first, so that a refused copy wakes no disk; then on the version opened.
        if conditions.any() {
            let source =
                store.head_version(&source_bucket, &source_key, version_for_copy.as_deref())?;
            conditions.check_copy_source(&source.etag, source.last_modified_ms)?;
        }
        let (source, mut reader) = store.open_version(
            &source_bucket,
            &source_key,
            version_for_copy.as_deref(),
            range,
            None,
        )?;
        conditions.check_copy_source(&source.etag, source.last_modified_ms)?;
        let mut handle = store.upload_part(&upload_id, number, Default::default())?;
        let mut buffer = vec![0u8; PART_COPY_PIECE_BYTES];
        loop {
            let n = match std::io::Read::read(&mut reader, &mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    handle.abort();
                    return Err(permafrost_store::StoreError::Internal(format!(
                        "reading {source_bucket}/{source_key} for a part copy: {e}"
                    )));
                }
            };
            if let Err(e) = handle.write(&buffer[..n]) {
                handle.abort();
                return Err(e);
            }
        }
        Ok((source, handle.finish()?))
    })
    .await?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(etag(&part.etag)),
            last_modified: Some(timestamp(part.last_modified_ms)),
            ..Default::default()
        }),
        copy_source_version_id: version_header(&source_archive, &source.version_id),
        ..Default::default()
    }))
}
