//! Lifecycle: Put/Get/DeleteBucketLifecycleConfiguration. The rules are evaluated against the catalog only
//! (expiry of current versions, noncurrent versions, lone delete markers, incomplete multipart uploads): an
//! expired object disappears from listings and reads at once and no disk wakes for it (docs/archive.md).
//! Transitions are refused: there is one tier of disks, and they sleep anyway.

use std::sync::Arc;

use permafrost_store::{Lifecycle, LifecycleFilter, LifecycleRule as Rule, Store, StoreError};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::common::{timestamp, timestamp_ms};
use crate::error::s3_error;
use crate::versioning::{bucket_archive, update_archive};

/// Most rules one configuration may hold (S3's limit).
const RULES_MAX: usize = 1000;

fn malformed(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::MalformedXML, message)
}

fn days(n: Option<i32>, what: &str, id: &str) -> S3Result<Option<u32>> {
    match n {
        None => Ok(None),
        Some(n) if n > 0 => Ok(Some(n as u32)),
        Some(n) => Err(s3_error(StoreError::InvalidArgument(format!(
            "rule {id:?}: {what} {n} must be a positive number of days"
        )))),
    }
}

fn tags(set: Option<TagSet>) -> Vec<(String, String)> {
    set.unwrap_or_default()
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect()
}

pub(crate) fn rule_from(r: LifecycleRule) -> S3Result<Rule> {
    let id = r.id.clone().unwrap_or_default();
    if id.len() > 255 {
        return Err(s3_error(StoreError::InvalidArgument(
            "a rule ID has at most 255 characters".into(),
        )));
    }
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || r.noncurrent_version_transitions
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        return Err(s3_error(StoreError::InvalidStorageClass(format!(
            "rule {id:?}: transitions are not offered: every object lives on disks that sleep; choose GLACIER \
             per bucket or per upload to refuse reads that would wake one"
        ))));
    }
    let mut filter = LifecycleFilter {
        prefix: r.prefix.clone().unwrap_or_default(),
        ..Default::default()
    };
    if let Some(f) = r.filter {
        if let Some(p) = f.prefix {
            filter.prefix = p;
        }
        if let Some(t) = f.tag {
            filter.tags = tags(Some(vec![t]));
        }
        filter.size_greater_than = f.object_size_greater_than.map(|n| n.max(0) as u64);
        filter.size_less_than = f.object_size_less_than.map(|n| n.max(0) as u64);
        if let Some(and) = f.and {
            if let Some(p) = and.prefix {
                filter.prefix = p;
            }
            filter.tags.extend(tags(and.tags));
            if let Some(n) = and.object_size_greater_than {
                filter.size_greater_than = Some(n.max(0) as u64);
            }
            if let Some(n) = and.object_size_less_than {
                filter.size_less_than = Some(n.max(0) as u64);
            }
        }
    }
    let expiration = r.expiration.unwrap_or_default();
    let noncurrent = r.noncurrent_version_expiration.unwrap_or_default();
    let rule = Rule {
        enabled: r.status.as_str() == ExpirationStatus::ENABLED,
        expiration_days: days(expiration.days, "Expiration Days", &id)?,
        expiration_date_ms: expiration.date.as_ref().map(timestamp_ms),
        expired_object_delete_marker: expiration.expired_object_delete_marker.unwrap_or(false),
        noncurrent_days: days(noncurrent.noncurrent_days, "NoncurrentDays", &id)?,
        newer_noncurrent_versions: noncurrent
            .newer_noncurrent_versions
            .map(|n| n.max(0) as u32),
        abort_incomplete_multipart_days: days(
            r.abort_incomplete_multipart_upload
                .and_then(|a| a.days_after_initiation),
            "DaysAfterInitiation",
            &id,
        )?,
        filter,
        id,
    };
    if rule.expiration_days.is_some() && rule.expiration_date_ms.is_some() {
        return Err(malformed(format!(
            "rule {:?}: Expiration has Days or Date, not both",
            rule.id
        )));
    }
    let acts = rule.expiration_days.is_some()
        || rule.expiration_date_ms.is_some()
        || rule.expired_object_delete_marker
        || rule.noncurrent_days.is_some()
        || rule.abort_incomplete_multipart_days.is_some();
    if !acts {
        return Err(malformed(format!(
            "rule {:?} has no action (Expiration, NoncurrentVersionExpiration or AbortIncompleteMultipartUpload)",
            rule.id
        )));
    }
    Ok(rule)
}

pub(crate) fn rule_to(r: &Rule) -> LifecycleRule {
    let f = &r.filter;
    let single_tag = f.tags.len() == 1
        && f.prefix.is_empty()
        && f.size_greater_than.is_none()
        && f.size_less_than.is_none();
    let tag = |(k, v): &(String, String)| Tag {
        key: Some(k.clone()),
        value: Some(v.clone()),
    };
    let conditions = usize::from(!f.prefix.is_empty())
        + f.tags.len()
        + usize::from(f.size_greater_than.is_some())
        + usize::from(f.size_less_than.is_some());
    let filter = if single_tag {
        LifecycleRuleFilter {
            tag: f.tags.first().map(tag),
            ..Default::default()
        }
    } else if conditions > 1 {
        LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: (!f.prefix.is_empty()).then(|| f.prefix.clone()),
                tags: (!f.tags.is_empty()).then(|| f.tags.iter().map(tag).collect()),
                object_size_greater_than: f.size_greater_than.map(|n| n as i64),
                object_size_less_than: f.size_less_than.map(|n| n as i64),
            }),
            ..Default::default()
        }
    } else {
        LifecycleRuleFilter {
            prefix: Some(f.prefix.clone()),
            object_size_greater_than: f.size_greater_than.map(|n| n as i64),
            object_size_less_than: f.size_less_than.map(|n| n as i64),
            ..Default::default()
        }
    };
    let expiration = (r.expiration_days.is_some()
        || r.expiration_date_ms.is_some()
        || r.expired_object_delete_marker)
        .then(|| LifecycleExpiration {
            days: r.expiration_days.map(|d| d as i32),
            date: r.expiration_date_ms.map(timestamp),
            expired_object_delete_marker: r.expired_object_delete_marker.then_some(true),
        });
    LifecycleRule {
        id: (!r.id.is_empty()).then(|| r.id.clone()),
        status: ExpirationStatus::from_static(if r.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        filter: Some(filter),
        expiration,
        noncurrent_version_expiration: r.noncurrent_days.map(|d| NoncurrentVersionExpiration {
            noncurrent_days: Some(d as i32),
            newer_noncurrent_versions: r.newer_noncurrent_versions.map(|n| n as i32),
        }),
        abort_incomplete_multipart_upload: r.abort_incomplete_multipart_days.map(|d| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(d as i32),
            }
        }),
        noncurrent_version_transitions: None,
        prefix: None,
        transitions: None,
    }
}

pub(crate) async fn put_bucket_lifecycle_configuration(
    store: &Arc<Store>,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let input = req.input;
    let rules = input
        .lifecycle_configuration
        .map(|c| c.rules)
        .unwrap_or_default();
    if rules.is_empty() || rules.len() > RULES_MAX {
        return Err(malformed(format!(
            "a lifecycle configuration has 1 to {RULES_MAX} rules, not {}",
            rules.len()
        )));
    }
    let mut converted = Vec::with_capacity(rules.len());
    for r in rules {
        let rule = rule_from(r)?;
        if !rule.id.is_empty() && converted.iter().any(|c: &Rule| c.id == rule.id) {
            return Err(s3_error(StoreError::InvalidArgument(format!(
                "rule ID {:?} appears twice",
                rule.id
            ))));
        }
        converted.push(rule);
    }
    update_archive(store, &input.bucket, move |a| {
        a.lifecycle = Some(Lifecycle {
            day_ms: 0, // the store sets its configured day length
            rules: converted,
        });
        Ok(())
    })
    .await?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

pub(crate) async fn get_bucket_lifecycle_configuration(
    store: &Arc<Store>,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let archive = bucket_archive(store, &req.input.bucket).await?;
    let Some(lifecycle) = archive.lifecycle else {
        return Err(S3Error::with_message(
            S3ErrorCode::NoSuchLifecycleConfiguration,
            format!("bucket {} has no lifecycle configuration", req.input.bucket),
        ));
    };
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(lifecycle.rules.iter().map(rule_to).collect()),
        ..Default::default()
    }))
}

pub(crate) async fn delete_bucket_lifecycle(
    store: &Arc<Store>,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    update_archive(store, &req.input.bucket, |a| {
        a.lifecycle = None;
        Ok(())
    })
    .await?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput {}))
}
