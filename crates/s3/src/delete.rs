//! DeleteObject and DeleteObjects: catalog only (the content is collected after the grace period once no key
//! references it). Deleting a missing key succeeds, as in S3.

use std::sync::Arc;

use permafrost_store::Store;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::blocking;

/// Most keys one DeleteObjects request may name (S3's limit).
const DELETE_KEYS_MAX: usize = 1000;

pub(crate) async fn delete_object(
    store: &Arc<Store>,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let store = Arc::clone(store);
    blocking(move || store.delete_object(&req.input.bucket, &req.input.key)).await?;
    Ok(S3Response::new(DeleteObjectOutput::default()))
}

pub(crate) async fn delete_objects(
    store: &Arc<Store>,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let input = req.input;
    if input.delete.objects.len() > DELETE_KEYS_MAX {
        return Err(s3s::S3Error::with_message(
            s3s::S3ErrorCode::MalformedXML,
            format!("at most {DELETE_KEYS_MAX} keys per DeleteObjects request"),
        ));
    }
    let quiet = input.delete.quiet.unwrap_or(false);
    let keys: Vec<String> = input.delete.objects.into_iter().map(|o| o.key).collect();
    let store = Arc::clone(store);
    let bucket = input.bucket;
    let (deleted, errors) = blocking(move || {
        store.head_bucket(&bucket)?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for key in keys {
            match store.delete_object(&bucket, &key) {
                Ok(()) => deleted.push(DeletedObject {
                    key: Some(key),
                    ..Default::default()
                }),
                Err(e) => errors.push(Error {
                    code: Some(e.s3_code().to_owned()),
                    key: Some(key),
                    message: Some(e.to_string()),
                    version_id: None,
                }),
            }
        }
        Ok((deleted, errors))
    })
    .await?;
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: (!quiet).then_some(deleted),
        errors: Some(errors),
        ..Default::default()
    }))
}
