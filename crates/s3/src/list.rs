//! ListObjectsV2 and ListObjects (v1): answered from the catalog alone (no disk wakes).
//!
//! ListObjectsV2 with `x-amz-optional-object-attributes: RestoreStatus` adds each object's `RestoreStatus`
//! (`IsRestoreInProgress`, and `RestoreExpiryDate` once restored), also from the catalog; objects never restored,
//! or whose restored copy expired, have none (as in S3).
//!
//! The continuation token of v2 is the catalog's resume key, base64url-encoded (opaque to clients). With
//! `encoding-type=url` keys, prefixes, delimiter and markers in the answer are percent-encoded.

use std::sync::Arc;

use base64::Engine as _;
use permafrost_store::{ListPage, ListQuery, ObjectRecord, Store};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::{etag, owner, timestamp, url_encode};
use permafrost_cluster::ClusterNode;

/// Most entries (objects + common prefixes) one page holds, as in S3.
pub(crate) const MAX_KEYS_MAX: i32 = 1000;

fn token_encode(key: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes())
}

fn token_decode(token: &str) -> S3Result<String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "the continuation token is not valid",
            )
        })
}

/// `max-keys` clamped to S3's range; `None` when the client asked for 0 (an empty, untruncated answer).
fn page_size(max_keys: Option<i32>) -> S3Result<Option<usize>> {
    match max_keys {
        None => Ok(Some(MAX_KEYS_MAX as usize)),
        Some(n) if n < 0 => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("max-keys {n} must not be negative"),
        )),
        Some(0) => Ok(None),
        Some(n) => Ok(Some(n.min(MAX_KEYS_MAX) as usize)),
    }
}

struct Encoder(bool);

impl Encoder {
    fn new(encoding_type: &Option<EncodingType>) -> Encoder {
        Encoder(
            encoding_type
                .as_ref()
                .is_some_and(|e| e.as_str().eq_ignore_ascii_case(EncodingType::URL)),
        )
    }

    fn apply(&self, s: &str) -> String {
        if self.0 {
            url_encode(s)
        } else {
            s.to_owned()
        }
    }
}

fn object_entry(record: ObjectRecord, with_owner: bool, encoder: &Encoder) -> Object {
    Object {
        key: Some(encoder.apply(&record.key)),
        size: i64::try_from(record.size_bytes).ok(),
        e_tag: Some(etag(&record.etag)),
        last_modified: Some(timestamp(record.last_modified_ms)),
        owner: with_owner.then(owner),
        storage_class: Some(ObjectStorageClass::from(
            record.attributes.storage_class.as_str().to_owned(),
        )),
        ..Default::default()
    }
}

async fn list_page(
    store: &Arc<Store>,
    cluster: Option<&Arc<ClusterNode>>,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    start_after: Option<String>,
    limit: Option<usize>,
) -> S3Result<ListPage> {
    let store = Arc::clone(store);
    let bucket = bucket.to_owned();
    let query = ListQuery {
        prefix: prefix.to_owned(),
        delimiter: delimiter.filter(|d| !d.is_empty()).map(str::to_owned),
        start_after,
        max_keys: limit.unwrap_or(1),
    };
    // In a cluster the directory lists every node's objects (crate::cluster).
    let page = match cluster {
        Some(c) => {
            let db = Arc::clone(&c.db);
            crate::cluster::blocking(move || db.list_objects(&bucket, &query)).await?
        }
        None => blocking(move || store.list_objects(&bucket, &query)).await?,
    };
    if limit.is_none() {
        // max-keys=0: the bucket exists (checked by the query), the answer is empty.
        return Ok(ListPage::default());
    }
    Ok(page)
}

pub(crate) async fn list_objects_v2(
    store: &Arc<Store>,
    cluster: Option<&Arc<ClusterNode>>,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let input = req.input;
    let limit = page_size(input.max_keys)?;
    let resume = match input.continuation_token.as_deref() {
        Some(token) => Some(token_decode(token)?),
        None => None,
    };
    let start_after = match (resume, input.start_after.clone()) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let prefix = input.prefix.clone().unwrap_or_default();
    let page = list_page(
        store,
        cluster,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        start_after,
        limit,
    )
    .await?;
    let encoder = Encoder::new(&input.encoding_type);
    let with_owner = input.fetch_owner.unwrap_or(false);
    let key_count = page.objects.len() + page.common_prefixes.len();
    let wants_restore_status = input
        .optional_object_attributes
        .as_ref()
        .is_some_and(|list| {
            list.iter()
                .any(|a| a.as_str() == OptionalObjectAttributes::RESTORE_STATUS)
        });
    let restore_status = if wants_restore_status {
        restore_statuses(store, &input.bucket, &page.objects).await?
    } else {
        Vec::new()
    };
    let output = ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(encoder.apply(&prefix)),
        delimiter: input.delimiter.as_deref().map(|d| encoder.apply(d)),
        max_keys: Some(input.max_keys.unwrap_or(MAX_KEYS_MAX)),
        key_count: Some(key_count as i32),
        continuation_token: input.continuation_token,
        start_after: input.start_after.as_deref().map(|s| encoder.apply(s)),
        is_truncated: Some(page.is_truncated),
        next_continuation_token: page
            .next_start_after
            .as_deref()
            .filter(|_| page.is_truncated)
            .map(token_encode),
        common_prefixes: Some(
            page.common_prefixes
                .iter()
                .map(|p| CommonPrefix {
                    prefix: Some(encoder.apply(p)),
                })
                .collect(),
        ),
        contents: Some(
            page.objects
                .into_iter()
                .enumerate()
                .map(|(i, o)| Object {
                    restore_status: restore_status.get(i).cloned().flatten(),
                    ..object_entry(o, with_owner, &encoder)
                })
                .collect(),
        ),
        encoding_type: input.encoding_type,
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

/// The `RestoreStatus` of each listed object (`None`: never restored, or its copy expired).
async fn restore_statuses(
    store: &Arc<Store>,
    bucket: &str,
    objects: &[ObjectRecord],
) -> S3Result<Vec<Option<RestoreStatus>>> {
    let store = Arc::clone(store);
    let bucket = bucket.to_owned();
    let versions: Vec<(String, String)> = objects
        .iter()
        .map(|o| (o.key.clone(), o.version_id.clone()))
        .collect();
    blocking(move || {
        versions
            .iter()
            .map(|(key, version_id)| {
                Ok(store
                    .restore_state(&bucket, key, version_id)?
                    .map(|r| RestoreStatus {
                        is_restore_in_progress: Some(r.ongoing),
                        restore_expiry_date: r.expiry_ms.filter(|_| !r.ongoing).map(timestamp),
                    }))
            })
            .collect()
    })
    .await
}

pub(crate) async fn list_objects(
    store: &Arc<Store>,
    cluster: Option<&Arc<ClusterNode>>,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = req.input;
    let limit = page_size(input.max_keys)?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let marker = input.marker.clone().filter(|m| !m.is_empty());
    let page = list_page(
        store,
        cluster,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        marker,
        limit,
    )
    .await?;
    let encoder = Encoder::new(&input.encoding_type);
    let output = ListObjectsOutput {
        name: Some(input.bucket),
        prefix: Some(encoder.apply(&prefix)),
        delimiter: input.delimiter.as_deref().map(|d| encoder.apply(d)),
        marker: Some(encoder.apply(input.marker.as_deref().unwrap_or(""))),
        max_keys: Some(input.max_keys.unwrap_or(MAX_KEYS_MAX)),
        is_truncated: Some(page.is_truncated),
        // S3 sends NextMarker only with a delimiter; sending it always is allowed and saves clients a guess.
        next_marker: page
            .next_start_after
            .as_deref()
            .filter(|_| page.is_truncated)
            .map(|m| encoder.apply(m)),
        common_prefixes: Some(
            page.common_prefixes
                .iter()
                .map(|p| CommonPrefix {
                    prefix: Some(encoder.apply(p)),
                })
                .collect(),
        ),
        contents: Some(
            page.objects
                .into_iter()
                .map(|o| object_entry(o, true, &encoder))
                .collect(),
        ),
        encoding_type: input.encoding_type,
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_tokens_round_trip_any_key() {
        for key in ["", "a", "photos/2024/ä ü.jpg", "x\u{0}y"] {
            assert_eq!(token_decode(&token_encode(key)).unwrap(), key);
        }
        assert!(token_decode("not base64!").is_err());
    }

    #[test]
    fn max_keys_is_clamped_and_zero_means_empty() {
        assert_eq!(page_size(None).unwrap(), Some(1000));
        assert_eq!(page_size(Some(5000)).unwrap(), Some(1000));
        assert_eq!(page_size(Some(3)).unwrap(), Some(3));
        assert_eq!(page_size(Some(0)).unwrap(), None);
        assert!(page_size(Some(-1)).is_err());
    }
}
