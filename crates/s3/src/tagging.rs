//! Object tagging (Put/Get/DeleteObjectTagging, per version) and bucket tagging (Put/Get/DeleteBucketTagging).
//! Tags are catalog metadata: lifecycle filters and dataset queries use them; changing them wakes no disk.

use std::sync::Arc;

use permafrost_store::{AttributeChange, Store, StoreError};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::error::s3_error;
use crate::versioning::{bucket_archive, update_archive, version_header};

pub(crate) fn pairs(tagging: Tagging) -> S3Result<Vec<(String, String)>> {
    let tags: Vec<(String, String)> = tagging
        .tag_set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect();
    permafrost_store::validate_tags(&tags).map_err(s3_error)?;
    Ok(tags)
}

fn tag_set(tags: &[(String, String)]) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

async fn set_tags(
    store: &Arc<Store>,
    bucket: String,
    key: String,
    version_id: Option<String>,
    tags: Vec<(String, String)>,
) -> S3Result<Option<String>> {
    let archive = bucket_archive(store, &bucket).await?;
    let store = Arc::clone(store);
    let id = blocking(move || {
        store.change_attributes(
            &bucket,
            &key,
            version_id.as_deref(),
            &AttributeChange::Tags(tags),
            false,
        )
    })
    .await?;
    Ok(version_header(&archive, &id))
}

pub(crate) async fn put_object_tagging(
    store: &Arc<Store>,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let input = req.input;
    let tags = pairs(input.tagging)?;
    let version_id = set_tags(store, input.bucket, input.key, input.version_id, tags).await?;
    Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
}

pub(crate) async fn delete_object_tagging(
    store: &Arc<Store>,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let input = req.input;
    let version_id = set_tags(store, input.bucket, input.key, input.version_id, Vec::new()).await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
}

pub(crate) async fn get_object_tagging(
    store: &Arc<Store>,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let input = req.input;
    let archive = bucket_archive(store, &input.bucket).await?;
    let store = Arc::clone(store);
    let info = blocking(move || {
        store.head_version(&input.bucket, &input.key, input.version_id.as_deref())
    })
    .await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: tag_set(&info.attributes.tags),
        version_id: version_header(&archive, &info.version_id),
    }))
}

pub(crate) async fn put_bucket_tagging(
    store: &Arc<Store>,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let input = req.input;
    let tags: Vec<(String, String)> = input
        .tagging
        .tag_set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect();
    if tags.len() > 50 {
        return Err(s3_error(StoreError::InvalidTag(format!(
            "{} tags: a bucket can have at most 50",
            tags.len()
        ))));
    }
    update_archive(store, &input.bucket, move |a| {
        a.tags = tags;
        Ok(())
    })
    .await?;
    Ok(S3Response::new(PutBucketTaggingOutput {}))
}

pub(crate) async fn get_bucket_tagging(
    store: &Arc<Store>,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let archive = bucket_archive(store, &req.input.bucket).await?;
    if archive.tags.is_empty() {
        return Err(S3Error::with_message(
            S3ErrorCode::NoSuchTagSet,
            format!("bucket {} has no tags", req.input.bucket),
        ));
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: tag_set(&archive.tags),
    }))
}

pub(crate) async fn delete_bucket_tagging(
    store: &Arc<Store>,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    update_archive(store, &req.input.bucket, |a| {
        a.tags.clear();
        Ok(())
    })
    .await?;
    Ok(S3Response::new(DeleteBucketTaggingOutput {}))
}
