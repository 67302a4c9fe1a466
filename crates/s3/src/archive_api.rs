//! The archive's own admin endpoints (JSON, signed like every admin request; see `admin`):
//!
//! | request | answer |
//! |---|---|
//! | `GET /_permafrost/api/v1/datasets[?bucket=B&tag=K=V&after=MS&before=MS]` | datasets with size, object count, first/last write, tags, expiry, persistence, grid bucket (catalog only) |
//! | `POST /_permafrost/api/v1/restores` body `{"bucket": B, "prefix": P, "days": N}` | starts a batch restore (`202`), answers its progress |
//! | `GET /_permafrost/api/v1/restores` | progress of the restores: requested, done, pending, bytes read, grid buckets |
//!
//! A batch restore reads the objects grouped by disk, one spin-up per disk, in on-disk order
//! (`permafrost_store::Store::restore_prefix`, docs/archive.md).

use std::sync::Arc;

use http::{Method, StatusCode};
use permafrost_store::{DatasetFilter, Store, StoreError};
use s3s::{Body, S3Request, S3Response};

use crate::admin::{json_error, method_not_allowed, run};
use crate::common::form_decode;

/// Datasets (`GET`).
pub const DATASETS_PATH: &str = "/_permafrost/api/v1/datasets";
/// Batch restores (`POST` to start, `GET` for progress).
pub const RESTORES_PATH: &str = "/_permafrost/api/v1/restores";

/// Largest restore request body.
const RESTORE_BODY_BYTES_MAX: usize = 64 << 10;

/// Whether `path` is one of these endpoints.
pub(crate) fn is_archive_endpoint(path: &str) -> bool {
    path == DATASETS_PATH || path == RESTORES_PATH
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("X-Amz-"))
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((form_decode(k)?, form_decode(v)?))
        })
        .collect()
}

/// The dataset filter of a query string; an unknown parameter or a bad value is an error naming it.
fn dataset_filter(query: Option<&str>) -> Result<DatasetFilter, String> {
    let mut filter = DatasetFilter::default();
    for (name, value) in query_pairs(query) {
        let ms = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}={v}: expected milliseconds since the epoch"))
        };
        match name.as_str() {
            "bucket" => filter.bucket = Some(value),
            "tag" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or_else(|| format!("tag={value}: expected KEY=VALUE"))?;
                filter.tag = Some((k.to_owned(), v.to_owned()));
            }
            "after" => filter.written_after_ms = Some(ms(&value)?),
            "before" => filter.written_before_ms = Some(ms(&value)?),
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
}

fn one_day() -> u32 {
    1
}

/// Answer a request to one of these endpoints.
pub(crate) async fn call(store: &Arc<Store>, mut req: S3Request<Body>) -> S3Response<Body> {
    let path = req.uri.path().to_owned();
    let store = Arc::clone(store);
    match (&req.method, path.as_str()) {
        (&Method::GET | &Method::HEAD, DATASETS_PATH) => match dataset_filter(req.uri.query()) {
            Ok(filter) => run(move || store.datasets(&filter)).await,
            Err(m) => json_error(StatusCode::BAD_REQUEST, m),
        },
        (&Method::GET | &Method::HEAD, RESTORES_PATH) => {
            run(move || store.restore_progress()).await
        }
        (&Method::POST, RESTORES_PATH) => {
            let body = match req.input.store_all_limited(RESTORE_BODY_BYTES_MAX).await {
                Ok(b) => b,
                Err(e) => {
                    return json_error(
                        StatusCode::BAD_REQUEST,
                        format!("cannot read the restore request: {e}"),
                    )
                }
            };
            let request: RestoreBody = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => {
                    return json_error(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "restore request: {e} (expected {{\"bucket\": NAME, \"prefix\": PREFIX, \"days\": N}})"
                        ),
                    )
                }
            };
            let mut response = run(move || {
                if request.days == 0 {
                    return Err(StoreError::InvalidArgument(
                        "days must be at least 1".into(),
                    ));
                }
                store.restore_prefix(&request.bucket, &request.prefix, request.days)
            })
            .await;
            if response.status == Some(StatusCode::OK) {
                response.status = Some(StatusCode::ACCEPTED);
            }
            response
        }
        (method, DATASETS_PATH) => method_not_allowed(method, &path, "GET, HEAD"),
        (method, _) => method_not_allowed(method, &path, "GET, HEAD, POST"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_filters_come_from_the_query_and_name_bad_parameters() {
        let f = dataset_filter(Some(
            "bucket=runs&tag=site%3Deffelsberg&after=5&X-Amz-Date=1",
        ))
        .unwrap();
        assert_eq!(f.bucket.as_deref(), Some("runs"));
        assert_eq!(f.tag, Some(("site".into(), "effelsberg".into())));
        assert_eq!(f.written_after_ms, Some(5));
        assert!(dataset_filter(Some("colour=red"))
            .unwrap_err()
            .contains("colour"));
        assert!(dataset_filter(Some("after=yesterday")).is_err());
        assert!(dataset_filter(Some("tag=novalue")).is_err());
    }
}
