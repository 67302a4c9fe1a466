//! Versioning: GetBucketVersioning, PutBucketVersioning, ListObjectVersions, and the version headers other
//! operations answer (`x-amz-version-id`, `x-amz-expiration`). Versions share content through content
//! addressing (no bytes are copied); all of it is catalog only.

use std::sync::Arc;

use permafrost_store::{BucketArchive, ObjectInfo, Store, StoreError, VersionQuery, Versioning};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::{etag, http_date, owner, timestamp, url_encode};
use crate::error::s3_error;
use crate::list::MAX_KEYS_MAX;

/// A bucket's archive configuration (versioning, Object Lock, lifecycle, tags, storage class).
pub(crate) async fn bucket_archive(store: &Arc<Store>, bucket: &str) -> S3Result<BucketArchive> {
    let store = Arc::clone(store);
    let bucket = bucket.to_owned();
    blocking(move || store.bucket_archive(&bucket)).await
}

/// Change a bucket's archive configuration with `f` (read, modify, write).
pub(crate) async fn update_archive(
    store: &Arc<Store>,
    bucket: &str,
    f: impl FnOnce(&mut BucketArchive) -> Result<(), StoreError> + Send + 'static,
) -> S3Result<()> {
    let store = Arc::clone(store);
    let bucket = bucket.to_owned();
    blocking(move || {
        let mut archive = store.bucket_archive(&bucket)?;
        f(&mut archive)?;
        store.set_bucket_archive(&bucket, archive)
    })
    .await
}

/// `x-amz-version-id`: the version's id once the bucket has (or had) versioning; absent before.
pub(crate) fn version_header(archive: &BucketArchive, version_id: &str) -> Option<String> {
    (archive.versioning != Versioning::Unversioned && !version_id.is_empty())
        .then(|| version_id.to_owned())
}

/// `x-amz-expiration: expiry-date="…", rule-id="…"` when a lifecycle rule expires the version.
pub(crate) fn expiration_header(archive: &BucketArchive, info: &ObjectInfo) -> Option<String> {
    let lifecycle = archive.lifecycle.as_ref()?;
    let (at, rule) = lifecycle.expiry(
        &info.key,
        &info.attributes.tags,
        info.size_bytes,
        info.last_modified_ms,
    )?;
    Some(format!(
        "expiry-date=\"{}\", rule-id=\"{}\"",
        http_date(at),
        rule.replace('"', "")
    ))
}

pub(crate) async fn get_bucket_versioning(
    store: &Arc<Store>,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let archive = bucket_archive(store, &req.input.bucket).await?;
    let status = match archive.versioning {
        Versioning::Unversioned => None,
        Versioning::Enabled => Some(BucketVersioningStatus::from_static(
            BucketVersioningStatus::ENABLED,
        )),
        Versioning::Suspended => Some(BucketVersioningStatus::from_static(
            BucketVersioningStatus::SUSPENDED,
        )),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status,
        ..Default::default()
    }))
}

pub(crate) async fn put_bucket_versioning(
    store: &Arc<Store>,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let input = req.input;
    if input
        .versioning_configuration
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(s3_error(StoreError::InvalidArgument(
            "MFA delete is not supported (there is one root user and no MFA device)".into(),
        )));
    }
    let status = match input
        .versioning_configuration
        .status
        .as_ref()
        .map(|s| s.as_str())
    {
        Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
        other => {
            return Err(crate::error::malformed_xml(format!(
                "versioning status {other:?}: expected Enabled or Suspended"
            )))
        }
    };
    update_archive(store, &input.bucket, move |a| {
        if a.versioning == Versioning::Unversioned && status == Versioning::Suspended {
            // S3 accepts it: a bucket that never had versioning behaves as suspended from now on.
        }
        a.versioning = status;
        Ok(())
    })
    .await?;
    Ok(S3Response::new(PutBucketVersioningOutput {}))
}

pub(crate) async fn list_object_versions(
    store: &Arc<Store>,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let input = req.input;
    let max_keys = match input.max_keys {
        Some(n) if n < 0 => {
            return Err(s3_error(StoreError::InvalidArgument(format!(
                "max-keys {n} must not be negative"
            ))))
        }
        Some(n) => n.min(MAX_KEYS_MAX),
        None => MAX_KEYS_MAX,
    };
    if input.version_id_marker.is_some() && input.key_marker.is_none() {
        return Err(s3_error(StoreError::InvalidArgument(
            "a version-id-marker needs a key-marker".into(),
        )));
    }
    let url = input
        .encoding_type
        .as_ref()
        .is_some_and(|e| e.as_str().eq_ignore_ascii_case(EncodingType::URL));
    let enc = |s: &str| if url { url_encode(s) } else { s.to_owned() };
    let query = VersionQuery {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
        key_marker: input.key_marker.clone(),
        version_id_marker: input.version_id_marker.clone(),
        max_keys: max_keys.max(1) as usize,
    };
    let page = if max_keys == 0 {
        let store = Arc::clone(store);
        let bucket = input.bucket.clone();
        blocking(move || store.head_bucket(&bucket)).await?;
        Default::default()
    } else {
        let store = Arc::clone(store);
        let bucket = input.bucket.clone();
        blocking(move || store.list_object_versions(&bucket, &query)).await?
    };
    let mut versions = Vec::new();
    let mut markers = Vec::new();
    for v in page.versions {
        match v.object {
            Some(o) => versions.push(ObjectVersion {
                key: Some(enc(&v.key)),
                version_id: Some(v.version_id),
                is_latest: Some(v.is_latest),
                last_modified: Some(timestamp(v.last_modified_ms)),
                e_tag: Some(etag(&o.etag)),
                size: i64::try_from(o.size_bytes).ok(),
                owner: Some(owner()),
                storage_class: Some(ObjectVersionStorageClass::from(
                    o.attributes.storage_class.as_str().to_owned(),
                )),
                ..Default::default()
            }),
            None => markers.push(DeleteMarkerEntry {
                key: Some(enc(&v.key)),
                version_id: Some(v.version_id),
                is_latest: Some(v.is_latest),
                last_modified: Some(timestamp(v.last_modified_ms)),
                owner: Some(owner()),
            }),
        }
    }
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: Some(enc(&input.prefix.unwrap_or_default())),
        delimiter: input.delimiter.as_deref().map(enc),
        key_marker: Some(input.key_marker.as_deref().map(enc).unwrap_or_default()),
        version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
        max_keys: Some(max_keys),
        is_truncated: Some(page.is_truncated),
        next_key_marker: page.next_key_marker.as_deref().map(enc),
        next_version_id_marker: page.next_version_id_marker,
        versions: Some(versions),
        delete_markers: Some(markers),
        common_prefixes: Some(
            page.common_prefixes
                .iter()
                .map(|p| CommonPrefix {
                    prefix: Some(enc(p)),
                })
                .collect(),
        ),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}
