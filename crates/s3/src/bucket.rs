//! Bucket operations: ListBuckets, CreateBucket, DeleteBucket, HeadBucket, GetBucketLocation.

use std::sync::Arc;

use permafrost_store::{BucketArchive, BucketSettings, Store, Versioning};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::admin::creatable_bucket_name;
use crate::bridge::blocking;
use crate::common::{owner, timestamp};

pub(crate) async fn list_buckets(
    store: &Arc<Store>,
    _req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let store = Arc::clone(store);
    let records = blocking(move || store.list_buckets()).await?;
    let buckets = records
        .into_iter()
        .map(|b| Bucket {
            name: Some(b.name),
            creation_date: Some(timestamp(b.created_ms)),
            bucket_region: None,
        })
        .collect();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        owner: Some(owner()),
        ..Default::default()
    }))
}

pub(crate) async fn create_bucket(
    store: &Arc<Store>,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    if !creatable_bucket_name(&req.input.bucket) {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidBucketName,
            format!(
                "invalid bucket name {}: a name has 3 to 63 lowercase letters, digits, dots and hyphens, starts \
                 and ends with a letter or digit, is not an IP address (and _permafrost is reserved)",
                req.input.bucket
            ),
        ));
    }
    let object_lock = req.input.object_lock_enabled_for_bucket.unwrap_or(false);
    let store = Arc::clone(store);
    let name = req.input.bucket.clone();
    blocking(move || {
        store.create_bucket(&name, BucketSettings::default())?;
        if object_lock {
            // Object Lock comes with versioning enabled, for good.
            store.set_bucket_archive(
                &name,
                BucketArchive {
                    versioning: Versioning::Enabled,
                    object_lock: true,
                    ..Default::default()
                },
            )?;
        }
        Ok(())
    })
    .await?;
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{}", req.input.bucket)),
    }))
}

pub(crate) async fn delete_bucket(
    store: &Arc<Store>,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let store = Arc::clone(store);
    blocking(move || store.delete_bucket(&req.input.bucket)).await?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}

pub(crate) async fn head_bucket(
    store: &Arc<Store>,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    let store = Arc::clone(store);
    blocking(move || store.head_bucket(&req.input.bucket)).await?;
    Ok(S3Response::new(HeadBucketOutput::default()))
}

pub(crate) async fn get_bucket_location(
    store: &Arc<Store>,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    let store = Arc::clone(store);
    blocking(move || store.head_bucket(&req.input.bucket)).await?;
    // No location constraint: us-east-1, which is what S3 clients assume by default.
    Ok(S3Response::new(GetBucketLocationOutput::default()))
}
