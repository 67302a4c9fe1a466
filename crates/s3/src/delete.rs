//! DeleteObject and DeleteObjects: catalog only (the content is collected after the grace period once no
//! version references it). Without a version id the current version goes (in versioned buckets a delete marker
//! is added instead); with one, that version, if Object Lock allows (`x-amz-bypass-governance-retention`
//! lifts GOVERNANCE retention only). Deleting a missing key succeeds, as in S3. In a cluster, DeleteObjects
//! deletes each key everywhere as DELETE does (`docs/cluster.md` "Copies").

use std::sync::Arc;

use permafrost_store::{DeleteOutcome, Store};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use permafrost_cluster::ClusterNode;

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

/// In a cluster (`cluster`), each key whose current version was deleted is deleted everywhere, as DELETE does
/// (`ClusterNode::delete_everywhere`): every holder's row goes and each other holder gets a tombstone, in one
/// directory transaction per key; a key whose directory update fails is reported as that key's error
/// (`ServiceUnavailable`, and one log line), the others still go; its local delete stands and the next heartbeat
/// removes its row (`ClusterNode::directory_behind`).
/// DeleteObjects; `refused` decides each key (and version) for the signer: a refused one is an `AccessDenied`
/// entry of the answer and is not touched.
pub(crate) async fn delete_objects(
    store: &Arc<Store>,
    cluster: Option<&Arc<ClusterNode>>,
    req: S3Request<DeleteObjectsInput>,
    refused: impl Fn(&str, Option<&str>) -> Option<String> + Send + 'static,
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
    let cluster = cluster.cloned();
    let bucket = input.bucket;
    let (deleted, errors) = blocking(move || {
        store.head_bucket(&bucket)?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        let (mut everywhere, mut tombstones) = (0usize, 0usize);
        for (key, version_id) in keys {
            if let Some(message) = refused(&key, version_id.as_deref()) {
                errors.push(Error {
                    code: Some("AccessDenied".to_owned()),
                    key: Some(key),
                    message: Some(message),
                    version_id,
                });
                continue;
            }
            let outcome = store
                .delete_version(&bucket, &key, version_id.as_deref(), bypass)
                .map_err(|e| (e.s3_code().to_owned(), e.to_string()));
            let outcome = match (&cluster, outcome) {
                (Some(c), Ok(outcome)) if version_id.is_none() => {
                    match c.delete_everywhere_now(&bucket, &key) {
                        Ok(others) => {
                            everywhere += 1;
                            tombstones += others.len();
                            Ok(outcome)
                        }
                        Err(e) => {
                            tracing::error!(
                                "DeleteObjects {bucket}/{key}: deleted on this node, but the cluster directory \
                                 could not be updated (answered 503 for the key; the next heartbeat reconciles): {e}"
                            );
                            Err((
                                "ServiceUnavailable".to_owned(),
                                format!("the cluster catalog database is unavailable: {e}"),
                            ))
                        }
                    }
                }
                (_, outcome) => outcome,
            };
            match outcome {
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
                Err((code, message)) => errors.push(Error {
                    code: Some(code),
                    key: Some(key),
                    message: Some(message),
                    version_id,
                }),
            }
        }
        if cluster.is_some() && everywhere > 0 {
            tracing::info!(
                "cluster: DeleteObjects in {bucket}: {everywhere} key(s) deleted everywhere; {tombstones} tombstone(s) \
                 for copies on other nodes (each deletes its copy)"
            );
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
