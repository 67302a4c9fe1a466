//! CopyObject: a new reference to the same content (catalog only, no bytes move, no disk wakes).
//! `x-amz-metadata-directive: REPLACE` takes the request's user metadata and content type.

use std::sync::Arc;

use permafrost_store::Store;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::{etag, metadata_pairs, timestamp};

pub(crate) async fn copy_object(
    store: &Arc<Store>,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let input = req.input;
    let (source_bucket, source_key) = match &input.copy_source {
        CopySource::Bucket {
            bucket,
            key,
            version_id: None,
        } => (bucket.to_string(), key.to_string()),
        CopySource::Bucket { .. } => {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                "object versions are not supported",
            ));
        }
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
    if !replace && source_bucket == input.bucket && source_key == input.key {
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
    let store = Arc::clone(store);
    let (bucket, key) = (input.bucket, input.key);
    let info =
        blocking(move || store.copy_object(&source_bucket, &source_key, &bucket, &key, metadata))
            .await?;
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(etag(&info.etag)),
            last_modified: Some(timestamp(info.last_modified_ms)),
            ..Default::default()
        }),
        ..Default::default()
    }))
}
