//! The archive's own admin endpoints (JSON, routes of the admin API v1 router in `permafrost_admin`; any of its
//! authentications):
//!
//! | request | answer |
//! |---|---|
//! | `GET /_permafrost/api/v1/datasets[?bucket=B&tag=K=V&after=MS&before=MS]` | datasets with size, object count, first/last write, tags, expiry, persistence, grid bucket (catalog only) |
//! | `POST /_permafrost/api/v1/restores` body `{"bucket": B, "prefix": P, "days": N, "tier": T}` | starts a batch restore (`202`), answers its progress; `tier` is `Expedited` (the default: the batch is whole when asked for, so it starts at once), `Standard` or `Bulk` |
//! | `GET /_permafrost/api/v1/restores` | progress of the restores: requested, done, pending, bytes read, grid buckets |
//!
//! A batch restore reads the objects grouped by disk, one spin-up per disk, in on-disk order
//! (`permafrost_store::Store::restore_prefix`, docs/archive.md).

use std::sync::Arc;

use http::{Method, StatusCode};
use permafrost_admin::api::scoped;
use permafrost_admin::{blocking, handler, json, json_status, Admin, ApiError};
use permafrost_store::DatasetFilter;

/// Datasets (`GET`).
pub const DATASETS_PATH: &str = "/_permafrost/api/v1/datasets";
/// Batch restores (`POST` to start, `GET` for progress).
pub const RESTORES_PATH: &str = "/_permafrost/api/v1/restores";

/// Add the archive's endpoints (`/datasets`, `/restores`) to the admin API v1 router.
pub fn add_archive_endpoints(admin: &Admin) {
    admin.route(
        Method::GET,
        "/datasets",
        handler(|admin, req| async move {
            let filter = dataset_filter(&req.query).map_err(ApiError::bad_request)?;
            if !req.principal.is_root() {
                let bucket = filter.bucket.as_deref().ok_or_else(|| {
                    ApiError::bad_request(
                        "an access key lists the datasets of one bucket: give bucket=",
                    )
                })?;
                req.authorize(&admin, scoped("ListDatasets"), bucket)?;
            }
            let store = Arc::clone(admin.store());
            json(&blocking(move || Ok(store.datasets(&filter)?)).await?)
        }),
    );
    admin.route(
        Method::GET,
        "/restores",
        handler(|admin, req| async move {
            if !req.principal.is_root() {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "AccessDenied",
                    format!(
                        "access key {} may start restores but not see every restore (the root user's)",
                        req.principal.name()
                    ),
                ));
            }
            let store = Arc::clone(admin.store());
            json(&blocking(move || Ok(store.restore_progress()?)).await?)
        }),
    );
    admin.route(
        Method::POST,
        "/restores",
        handler(|admin, req| async move {
            let request: RestoreBody = req.json().map_err(|e| {
                ApiError::bad_request(format!(
                    "restore request: {} (expected {{\"bucket\": NAME, \"prefix\": PREFIX, \"days\": N}})",
                    e.message
                ))
            })?;
            req.authorize(&admin, scoped("RestoreDataset"), &request.bucket)?;
            if request.days == 0 {
                return Err(ApiError::bad_request("days must be at least 1"));
            }
            let tier: permafrost_store::RestoreTier = match request.tier.as_deref() {
                None => permafrost_store::RestoreTier::Expedited,
                Some(t) => t.parse().map_err(ApiError::bad_request)?,
            };
            let store = Arc::clone(admin.store());
            let progress = blocking(move || {
                Ok(store.restore_prefix(&request.bucket, &request.prefix, request.days, tier)?)
            })
            .await?;
            Ok(json_status(StatusCode::ACCEPTED, &progress))
        }),
    );
}

/// The dataset filter of decoded query pairs; an unknown parameter or a bad value is an error naming it (the
/// signature's own parameters of a presigned URL are ignored).
fn dataset_filter(query: &[(String, String)]) -> Result<DatasetFilter, String> {
    let mut filter = DatasetFilter::default();
    for (name, value) in query.iter().filter(|(n, _)| !n.starts_with("X-Amz-")) {
        let ms = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}={v}: expected milliseconds since the epoch"))
        };
        match name.as_str() {
            "bucket" => filter.bucket = Some(value.clone()),
            "tag" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or_else(|| format!("tag={value}: expected KEY=VALUE"))?;
                filter.tag = Some((k.to_owned(), v.to_owned()));
            }
            "after" => filter.written_after_ms = Some(ms(value)?),
            "before" => filter.written_before_ms = Some(ms(value)?),
            other => {
                return Err(format!(
                    "unknown parameter {other:?}: expected bucket, tag, after, before"
                ))
            }
        }
    }
    Ok(filter)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    bucket: String,
    #[serde(default)]
    prefix: String,
    #[serde(default = "one_day")]
    days: u32,
    /// `Expedited` (default), `Standard` or `Bulk`.
    #[serde(default)]
    tier: Option<String>,
}

fn one_day() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn dataset_filters_come_from_the_query_and_name_bad_parameters() {
        let f = dataset_filter(&pairs(&[
            ("bucket", "runs"),
            ("tag", "site=effelsberg"),
            ("after", "5"),
            ("X-Amz-Date", "1"),
        ]))
        .unwrap();
        assert_eq!(f.bucket.as_deref(), Some("runs"));
        assert_eq!(f.tag, Some(("site".into(), "effelsberg".into())));
        assert_eq!(f.written_after_ms, Some(5));
        assert!(dataset_filter(&pairs(&[("colour", "red")]))
            .unwrap_err()
            .contains("colour"));
        assert!(dataset_filter(&pairs(&[("after", "yesterday")])).is_err());
        assert!(dataset_filter(&pairs(&[("tag", "novalue")])).is_err());
    }
}
