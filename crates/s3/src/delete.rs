//! DeleteObject and DeleteObjects: catalog only (the content is collected after the grace period once no
//! version references it). Without a version id the current version goes (in versioned buckets a delete marker
//! is added instead); with one, that version, if Object Lock allows (`x-amz-bypass-governance-retention`
//! lifts GOVERNANCE retention only). Deleting a missing key succeeds, as in S3.

use std::sync::Arc;

use permafrost_store::{DeleteOutcome, Store};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::blocking;

/// Most keys one DeleteObjects request may name (S3's limit).
const DELETE_KEYS_MAX: usize = 1000;

/// `x-amz-bypass-governance-retention: true`.
fn bypass(b: Option<bool>) -> bool {
    b.unwrap_or(false)
}

pub(crate) async fn delete_object(
    store: &Arc<Store>,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let store = Arc::clone(store);
    let input = req.input;
    let bypass = bypass(input.bypass_governance_retention);
    let outcome: DeleteOutcome = blocking(move || {
        store.delete_version(
            &input.bucket,
            &input.key,
            input.version_id.as_deref(),
            bypass,
        )
    })
    .await?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: outcome.delete_marker.then_some(true),
        version_id: outcome.version_id,
        ..Default::default()
    }))
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
    let bypass = bypass(input.bypass_governance_retention);
    let keys: Vec<(String, Option<String>)> = input
        .delete
        .objects
        .into_iter()
        .map(|o| (o.key, o.version_id))
        .collect();
    let store = Arc::clone(store);
    let bucket = input.bucket;
    let (deleted, errors) = blocking(move || {
        store.head_bucket(&bucket)?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for (key, version_id) in keys {
            match store.delete_version(&bucket, &key, version_id.as_deref(), bypass) {
                Ok(outcome) => {
                    let marker_created = version_id.is_none() && outcome.delete_marker;
                    deleted.push(DeletedObject {
                        key: Some(key),
                        version_id: if marker_created {
                            None
                        } else {
                            version_id.clone()
                        },
                        delete_marker: outcome.delete_marker.then_some(true),
                        delete_marker_version_id: if marker_created {
                            outcome.version_id
                        } else {
                            None
                        },
                    })
                }
                Err(e) => errors.push(Error {
                    code: Some(e.s3_code().to_owned()),
                    key: Some(key),
                    message: Some(e.to_string()),
                    version_id,
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
