//! CopyObject: a new reference to the same content (catalog only, no bytes move, no disk wakes).
//! `x-amz-metadata-directive: REPLACE` takes the request's user metadata and content type.

use std::sync::Arc;

use permafrost_store::Store;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::{etag, metadata_pairs, timestamp, NewVersion};
use crate::versioning::{bucket_archive, expiration_header, version_header};

pub(crate) async fn copy_object(
    store: &Arc<Store>,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let input = req.input;
    let (source_bucket, source_key, source_version) = match &input.copy_source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => (
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(str::to_owned),
        ),
        _ => {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                "access points are not supported",
            ));
        }
    };
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
        store.copy_version(
            &source_bucket,
            &source_key,
            source_version.as_deref(),
            &bucket,
            &key,
            metadata,
            attributes,
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
