//! Object Lock: Put/GetObjectLockConfiguration (enabled, default retention), Put/GetObjectRetention,
//! Put/GetObjectLegalHold. The rules (who may shorten a retention, who may delete) are the catalog's
//! (`ObjectLock::may_set_retention`, `ObjectLock::may_delete`), applied inside the transaction that changes the
//! version; they hold for S3, the CLI, lifecycle and garbage collection alike (docs/archive.md).

use std::sync::Arc;

use permafrost_store::{AttributeChange, LockMode, Retention, Store, StoreError, Versioning};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::{timestamp, timestamp_ms};
use crate::error::s3_error;
use crate::versioning::{bucket_archive, update_archive};

/// The mode of a retention in a request body: `GOVERNANCE` or `COMPLIANCE` (anything else does not follow the
/// schema: `MalformedXML`, as AWS answers).
fn mode(m: Option<&ObjectLockRetentionMode>) -> S3Result<LockMode> {
    let name = m.map(|m| m.as_str()).unwrap_or("");
    name.parse().map_err(crate::error::malformed_xml)
}

pub(crate) async fn put_object_lock_configuration(
    store: &Arc<Store>,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    let input = req.input;
    let config = input.object_lock_configuration.unwrap_or_default();
    if config
        .object_lock_enabled
        .as_ref()
        .is_none_or(|e| e.as_str() != ObjectLockEnabled::ENABLED)
    {
        return Err(crate::error::malformed_xml(
            "ObjectLockEnabled must be Enabled (Object Lock cannot be disabled)",
        ));
    }
    let default_retention = match config.rule.and_then(|r| r.default_retention) {
        None => None,
        Some(d) => {
            if d.days.is_some() == d.years.is_some() {
                return Err(S3Error::with_message(
                    S3ErrorCode::MalformedXML,
                    "a default retention has either Days or Years",
                ));
            }
            let positive = |n: Option<i32>| -> S3Result<Option<u32>> {
                match n {
                    None => Ok(None),
                    Some(n) if n > 0 => Ok(Some(n as u32)),
                    Some(n) => Err(crate::error::invalid_retention_period(format!(
                        "a default retention of {n} days or years: the period must be a positive whole number"
                    ))),
                }
            };
            Some(permafrost_store::DefaultRetention {
                mode: mode(d.mode.as_ref())?,
                days: positive(d.days)?,
                years: positive(d.years)?,
            })
        }
    };
    update_archive(store, &input.bucket, move |a| {
        if !a.object_lock && a.versioning != Versioning::Enabled {
            return Err(StoreError::InvalidBucketState(
                "Object Lock needs versioning enabled on the bucket first".into(),
            ));
        }
        a.object_lock = true;
        a.default_retention = default_retention;
        Ok(())
    })
    .await?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

pub(crate) async fn get_object_lock_configuration(
    store: &Arc<Store>,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let archive = bucket_archive(store, &req.input.bucket).await?;
    if !archive.object_lock {
        return Err(S3Error::with_message(
            S3ErrorCode::ObjectLockConfigurationNotFoundError,
            format!(
                "bucket {} has no Object Lock configuration",
                req.input.bucket
            ),
        ));
    }
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule: archive.default_retention.map(|d| ObjectLockRule {
                default_retention: Some(s3s::dto::DefaultRetention {
                    days: d.days.map(|n| n as i32),
                    years: d.years.map(|n| n as i32),
                    mode: Some(ObjectLockRetentionMode::from(d.mode.as_str().to_owned())),
                }),
            }),
        }),
    }))
}

pub(crate) async fn put_object_retention(
    store: &Arc<Store>,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let input = req.input;
    let retention = match input.retention {
        None => None,
        Some(r) if r.mode.is_none() && r.retain_until_date.is_none() => None,
        Some(r) => {
            let Some(until) = r.retain_until_date else {
                return Err(S3Error::with_message(
                    S3ErrorCode::MalformedXML,
                    "a retention needs a RetainUntilDate",
                ));
            };
            let retain_until_ms = timestamp_ms(&until);
            if retain_until_ms <= permafrost_store::now_ms() {
                return Err(s3_error(StoreError::InvalidArgument(
                    "the retain-until date must be in the future".into(),
                )));
            }
            Some(Retention {
                mode: mode(r.mode.as_ref())?,
                retain_until_ms,
            })
        }
    };
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let store = Arc::clone(store);
    blocking(move || {
        store.change_attributes(
            &input.bucket,
            &input.key,
            input.version_id.as_deref(),
            &AttributeChange::Retention(retention),
            bypass,
        )
    })
    .await?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(crate) async fn get_object_retention(
    store: &Arc<Store>,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let input = req.input;
    let archive = bucket_archive(store, &input.bucket).await?;
    let store = Arc::clone(store);
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let info =
        blocking(move || store.head_version(&bucket, &key, input.version_id.as_deref())).await?;
    let Some(r) = info
        .attributes
        .lock
        .retention
        .filter(|_| archive.object_lock)
    else {
        return Err(S3Error::with_message(
            S3ErrorCode::NoSuchObjectLockConfiguration,
            format!("{}/{} has no retention", info.bucket, info.key),
        ));
    };
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from(r.mode.as_str().to_owned())),
            retain_until_date: Some(timestamp(r.retain_until_ms)),
        }),
    }))
}

pub(crate) async fn put_object_legal_hold(
    store: &Arc<Store>,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let input = req.input;
    let on = match input
        .legal_hold
        .and_then(|h| h.status)
        .as_ref()
        .map(|s| s.as_str())
    {
        Some(ObjectLockLegalHoldStatus::ON) => true,
        Some(ObjectLockLegalHoldStatus::OFF) => false,
        other => {
            return Err(S3Error::with_message(
                S3ErrorCode::MalformedXML,
                format!("legal hold status {other:?}: expected ON or OFF"),
            ))
        }
    };
    let store = Arc::clone(store);
    blocking(move || {
        store.change_attributes(
            &input.bucket,
            &input.key,
            input.version_id.as_deref(),
            &AttributeChange::LegalHold(on),
            false,
        )
    })
    .await?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

pub(crate) async fn get_object_legal_hold(
    store: &Arc<Store>,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let input = req.input;
    let archive = bucket_archive(store, &input.bucket).await?;
    if !archive.object_lock {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            format!("bucket {} has no Object Lock configuration", input.bucket),
        ));
    }
    let store = Arc::clone(store);
    let info = blocking(move || {
        store.head_version(&input.bucket, &input.key, input.version_id.as_deref())
    })
    .await?;
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from_static(
                if info.attributes.lock.legal_hold {
                    ObjectLockLegalHoldStatus::ON
                } else {
                    ObjectLockLegalHoldStatus::OFF
                },
            )),
        }),
    }))
}
