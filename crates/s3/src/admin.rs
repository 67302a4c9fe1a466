//! The service's own endpoints under [`RESERVED_PREFIX`] (`/_permafrost/`), as an s3s custom route: requests
//! are parsed and their signatures checked by s3s exactly like S3 requests, then answered here in JSON.
//!
//! | request                                   | answer                                          |
//! |-------------------------------------------|-------------------------------------------------|
//! | `GET /_permafrost/health` (no signature)  | `{"status":"ok"}`                               |
//! | `GET /_permafrost/status`                 | the store's [`StatusSummary`]                   |
//! | `POST /_permafrost/persist`               | persist everything waiting: `{"persisted":true}`|
//! | `POST /_permafrost/cache/evict`           | `{"evicted_bytes":N}`                           |
//! | `POST /_permafrost/gc[?ignore_grace=true]`| `{"freed_bytes":N,"contents_removed":M}`        |
//! | `GET /_permafrost/buckets/NAME`           | the bucket's settings, chosen and in effect     |
//! | `PUT /_permafrost/buckets/NAME`           | replace them (JSON body, see below); as GET     |
//!
//! Bucket settings (`PUT` body, every field optional, absent or `null` = the server's default):
//! `{"compression": "zstd"|"lz4"|"none", "placement": "dataset-affinity"|…, "write_mode": "serialized"|…}`.
//! They apply to uploads from then on.
//!
//! Everything but health needs a valid signature of the root user (else the usual S3 `403` XML errors); an
//! unknown path is `404` (signed or not; a wrong signature is still `403`), a known path with another method
//! `405`, both in JSON.
//!
//! s3s checks the bucket name of the path (`_permafrost`) before it asks the route: [`ReservedNameValidation`]
//! lets every name through (s3s would answer a bare `InvalidBucketName` without saying which name), and
//! CreateBucket refuses `_permafrost` and every name outside the AWS rules (`InvalidBucketName`, naming it).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode};
use permafrost_access::Principal;
use permafrost_store::{BucketSettings, Compression, StatusSummary, Store, StoreError};
use s3s::route::S3Route;
use s3s::validation::{AwsNameValidation, NameValidation};
use s3s::{Body, S3Request, S3Response, S3Result};
use serde::Serialize;

/// Paths under this prefix belong to the service itself (`_permafrost` is not a valid bucket name).
pub const RESERVED_PREFIX: &str = "/_permafrost/";
/// The bucket name s3s sees in the paths under [`RESERVED_PREFIX`]; no S3 bucket may have it.
pub(crate) const RESERVED_BUCKET: &str = "_permafrost";
/// `GET` answers `200 {"status":"ok"}` while the server accepts requests (no authentication).
pub const HEALTH_PATH: &str = "/_permafrost/health";
/// `GET` (no authentication): the readiness probe for load balancers. `200 {"status":"ready"}` while this
/// server can serve requests; `503 {"status":"unavailable","reason":…}` while its catalog's database does not
/// answer or once it is shutting down. [`HEALTH_PATH`] stays the liveness probe (the process answers).
pub const READY_PATH: &str = "/_permafrost/ready";
/// `GET`: the store's [`StatusSummary`] (what `permafrost status --json` prints).
pub const STATUS_PATH: &str = "/_permafrost/status";
/// `POST`: persist everything waiting in the cache now, and wait until it is persisted.
pub const PERSIST_PATH: &str = "/_permafrost/persist";
/// `POST`: evict every persisted content from the cache.
pub const EVICT_PATH: &str = "/_permafrost/cache/evict";
/// `POST`, optionally `?ignore_grace=true`: collect unreferenced contents now.
pub const GC_PATH: &str = "/_permafrost/gc";

/// `GET`/`PUT` `BUCKETS_PREFIX` + bucket name: a bucket's settings.
pub const BUCKETS_PREFIX: &str = "/_permafrost/buckets/";

/// Every admin endpoint with a fixed path (the bucket settings are under [`BUCKETS_PREFIX`]).
const ENDPOINTS: [&str; 6] = [
    HEALTH_PATH,
    READY_PATH,
    STATUS_PATH,
    PERSIST_PATH,
    EVICT_PATH,
    GC_PATH,
];

/// Largest settings body accepted.
const SETTINGS_BODY_BYTES_MAX: usize = 64 << 10;

/// The bucket named by a settings path (`None` for other paths).
fn settings_bucket(path: &str) -> Option<&str> {
    path.strip_prefix(BUCKETS_PREFIX)
        .filter(|name| !name.is_empty() && !name.contains('/'))
}

/// Bucket names as s3s checks them on every request: all pass, so that the admin paths ([`RESERVED_BUCKET`])
/// reach the route and a bad name gets an error that names it. CreateBucket is where names are checked
/// ([`creatable_bucket_name`], `InvalidBucketName` with the name); any other request on a name no bucket can
/// have is `NoSuchBucket`, naming it.
pub(crate) struct ReservedNameValidation;

impl NameValidation for ReservedNameValidation {
    fn validate_bucket_name(&self, _name: &str) -> bool {
        true
    }
}

/// A name a client may give a new bucket (the AWS rules; never [`RESERVED_BUCKET`]).
pub(crate) fn creatable_bucket_name(name: &str) -> bool {
    name != RESERVED_BUCKET && AwsNameValidation::new().validate_bucket_name(name)
}

/// Whether a request path is one of the service's own (`/_permafrost/` followed by something). The bucket
/// paths `/_permafrost` and `/_permafrost/` stay S3's, so CreateBucket of that name is refused as S3 does.
pub(crate) fn is_admin_path(path: &str) -> bool {
    path.len() > RESERVED_PREFIX.len() && path.starts_with(RESERVED_PREFIX)
}

/// The admin endpoints over one store.
pub(crate) struct AdminRoute {
    pub(crate) store: Arc<Store>,
    /// The admin API v1, metrics and dashboard (`permafrost-admin`), for requests signed like S3.
    pub(crate) admin: permafrost_admin::Admin,
}

fn json_response(status: StatusCode, value: &impl Serialize) -> S3Response<Body> {
    // Pretty, as `permafrost status --json` prints it (the remote client prints the server's text as is).
    let mut text = serde_json::to_vec_pretty(value).unwrap_or_else(|e| {
        format!("{{\"error\":\"cannot serialize the answer: {e}\"}}").into_bytes()
    });
    text.push(b'\n');
    let mut response = S3Response::with_status(Body::from(Bytes::from(text)), status);
    response.headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(crate) fn json_error(status: StatusCode, message: impl Into<String>) -> S3Response<Body> {
    json_response(
        status,
        &serde_json::json!({ "error": status.canonical_reason().unwrap_or("error"), "message": message.into() }),
    )
}

/// A store error as JSON, with the HTTP status of its S3 code (`500` for internal errors, logged).
fn store_error(error: StoreError) -> S3Response<Body> {
    let s3 = crate::error::s3_error(error);
    let status = s3
        .status_code()
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(
        status,
        &serde_json::json!({ "error": s3.code().as_str(), "message": s3.message().unwrap_or("") }),
    )
}

/// Run a blocking store call and answer its result as JSON.
pub(crate) async fn run<T, F>(f: F) -> S3Response<Body>
where
    T: Serialize + Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(value)) => json_response(StatusCode::OK, &value),
        Ok(Err(e)) => store_error(e),
        Err(e) => store_error(StoreError::Internal(format!("admin task failed: {e}"))),
    }
}

/// `ignore_grace` of a gc request (`true`/`false`/`1`/`0`, default false); other query parameters (the
/// signature's, in presigned URLs) are ignored.
fn ignore_grace(query: Option<&str>) -> Result<bool, String> {
    let mut value = false;
    for pair in query.unwrap_or("").split('&') {
        let (name, v) = pair.split_once('=').unwrap_or((pair, ""));
        if name == "ignore_grace" {
            value = match v {
                "true" | "1" | "" => true,
                "false" | "0" => false,
                other => return Err(format!("ignore_grace={other}: expected true or false")),
            };
        }
    }
    Ok(value)
}

#[derive(Serialize)]
struct Persisted {
    persisted: bool,
}

#[derive(Serialize)]
struct Evicted {
    evicted_bytes: u64,
}

#[async_trait::async_trait]
impl S3Route for AdminRoute {
    fn is_match(
        &self,
        _method: &Method,
        uri: &http::Uri,
        _headers: &http::HeaderMap,
        _extensions: &mut http::Extensions,
    ) -> bool {
        is_admin_path(uri.path())
    }

    /// Health needs no signature, and neither does learning that a path is no endpoint (`404`); the
    /// endpoints need the root user's (a request with a wrong signature never gets here: s3s refuses it),
    /// except the admin API's few endpoints for access keys, which check the key's bucket permission
    /// themselves (`permafrost_admin::SCOPED_ENDPOINTS`).
    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        let path = req.uri.path();
        let endpoint = ENDPOINTS.contains(&path)
            || settings_bucket(path).is_some()
            || permafrost_admin::Admin::owns_path(path);
        let public = path == HEALTH_PATH || path == READY_PATH || !endpoint;
        let principal = self
            .admin
            .access()
            .principal(req.credentials.as_ref().map(|c| c.access_key.as_str()));
        let decision = match &principal {
            Principal::Root => Ok(()),
            _ if public => Ok(()),
            Principal::Key(key) if permafrost_admin::Admin::owns_path(path) => {
                let _ = key; // the admin API decides per endpoint
                Ok(())
            }
            Principal::Key(key) => Err(s3s::s3_error!(
                AccessDenied,
                "access key {} may not use {path}: it is the root user's",
                key.name
            )),
            Principal::Anonymous => Err(s3s::s3_error!(AccessDenied, "Signature is required")),
        };
        req.extensions.insert(principal);
        decision
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        if permafrost_admin::Admin::owns_path(req.uri.path()) {
            // Signed: s3s checked the signature; check_access found its principal.
            let principal = crate::auth::principal_of(&req.extensions);
            let mut request = http::Request::new(req.input);
            *request.method_mut() = req.method;
            *request.uri_mut() = req.uri;
            *request.headers_mut() = req.headers;
            let response = self.admin.handle(request, Some(principal)).await;
            let (parts, body) = response.into_parts();
            let mut r = S3Response::with_status(body, parts.status);
            r.headers = parts.headers;
            return Ok(r);
        }
        if let Some(bucket) = settings_bucket(req.uri.path()) {
            let bucket = bucket.to_owned();
            return Ok(self.bucket_settings(req, bucket).await);
        }
        let path = req.uri.path();
        let method = &req.method;
        let store = Arc::clone(&self.store);
        let allowed = match path {
            HEALTH_PATH | READY_PATH | STATUS_PATH => "GET, HEAD",
            PERSIST_PATH | EVICT_PATH | GC_PATH => "POST",
            _ => {
                return Ok(json_error(
                    StatusCode::NOT_FOUND,
                    format!("no such endpoint: {path}"),
                ))
            }
        };
        let response = match (method, path) {
            (&Method::GET | &Method::HEAD, HEALTH_PATH) => {
                json_response(StatusCode::OK, &serde_json::json!({ "status": "ok" }))
            }
            (&Method::GET | &Method::HEAD, READY_PATH) => readiness(&self.admin, store).await,
            (&Method::GET | &Method::HEAD, STATUS_PATH) => {
                run(move || -> Result<StatusSummary, StoreError> { store.summary() }).await
            }
            (&Method::POST, PERSIST_PATH) => {
                run(move || store.persist_now().map(|()| Persisted { persisted: true })).await
            }
            (&Method::POST, EVICT_PATH) => {
                run(move || {
                    store
                        .evict_cache()
                        .map(|evicted_bytes| Evicted { evicted_bytes })
                })
                .await
            }
            (&Method::POST, GC_PATH) => match ignore_grace(req.uri.query()) {
                Ok(ignore) => run(move || store.collect_garbage(ignore)).await,
                Err(message) => json_error(StatusCode::BAD_REQUEST, message),
            },
            _ => method_not_allowed(method, path, allowed),
        };
        Ok(response)
    }
}

/// The readiness probe's answer ([`READY_PATH`]): `200` while the server can serve, `503` with the reason
/// (shutting down; the catalog's database unreachable) while it cannot.
async fn readiness(admin: &permafrost_admin::Admin, store: Arc<Store>) -> S3Response<Body> {
    let unavailable = |reason: String| {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "status": "unavailable", "reason": reason }),
        )
    };
    if admin.is_draining() {
        return unavailable("shutting down".to_owned());
    }
    match tokio::task::spawn_blocking(move || store.ready()).await {
        Ok(Ok(())) => json_response(StatusCode::OK, &serde_json::json!({ "status": "ready" })),
        Ok(Err(StoreError::Unavailable(message))) => {
            unavailable(format!("catalog database unreachable: {message}"))
        }
        Ok(Err(e)) => unavailable(format!("the catalog does not answer: {e}")),
        Err(e) => unavailable(format!("the readiness check failed: {e}")),
    }
}

pub(crate) fn method_not_allowed(
    method: &Method,
    path: &str,
    allowed: &'static str,
) -> S3Response<Body> {
    let mut r = json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} {path}: use {allowed}"),
    );
    r.headers
        .insert(http::header::ALLOW, HeaderValue::from_static(allowed));
    r
}

/// The body of a settings `PUT`: a misspelt field is an error, not a silently ignored wish.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsBody {
    #[serde(default)]
    compression: Option<Compression>,
    #[serde(default)]
    placement: Option<String>,
    #[serde(default)]
    write_mode: Option<String>,
    /// `STANDARD` or `GLACIER`: the storage class of uploads that name none (docs/archive.md); absent =
    /// unchanged.
    #[serde(default)]
    storage_class: Option<permafrost_store::StorageClass>,
}

impl AdminRoute {
    /// `GET`/`PUT /_permafrost/buckets/NAME`.
    async fn bucket_settings(&self, mut req: S3Request<Body>, bucket: String) -> S3Response<Body> {
        let store = Arc::clone(&self.store);
        match req.method {
            Method::GET | Method::HEAD => run(move || store.bucket_settings(&bucket)).await,
            Method::PUT => {
                let body = match req.input.store_all_limited(SETTINGS_BODY_BYTES_MAX).await {
                    Ok(body) => body,
                    Err(e) => {
                        return json_error(
                            StatusCode::BAD_REQUEST,
                            format!("cannot read the settings body: {e}"),
                        )
                    }
                };
                let (settings, storage_class) = match serde_json::from_slice::<SettingsBody>(&body) {
                    Ok(b) => (
                        BucketSettings {
                            compression: b.compression,
                            placement: b.placement,
                            write_mode: b.write_mode,
                            // Kept as they are: changed through the admin API's `/buckets/{bucket}/hot`.
                            hot_prefixes: Vec::new(),
                        },
                        b.storage_class,
                    ),
                    Err(e) => {
                        return json_error(
                            StatusCode::BAD_REQUEST,
                            format!("bucket settings: {e} (expected {{\"compression\": \"zstd\"|\"lz4\"|\"none\", \"placement\": NAME, \"write_mode\": MODE, \"storage_class\": \"STANDARD\"|\"GLACIER\"}})"),
                        )
                    }
                };
                run(move || {
                    store.set_bucket_settings(&bucket, settings)?;
                    // Absent: unchanged (it lives with versioning and lifecycle, not with these settings).
                    if let Some(class) = storage_class {
                        let mut archive = store.bucket_archive(&bucket)?;
                        archive.storage_class = class;
                        store.set_bucket_archive(&bucket, archive)?;
                    }
                    store.bucket_settings(&bucket)
                })
                .await
            }
            ref method => method_not_allowed(method, req.uri.path(), "GET, HEAD, PUT"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_paths_are_under_the_reserved_prefix_but_not_the_bucket_itself() {
        assert!(is_admin_path("/_permafrost/health"));
        assert!(is_admin_path("/_permafrost/cache/evict"));
        assert!(is_admin_path("/_permafrost/x"));
        assert!(!is_admin_path("/_permafrost"));
        assert!(!is_admin_path("/_permafrost/"));
        assert!(!is_admin_path("/_permafrostx/status"));
        assert!(!is_admin_path("/bucket/_permafrost/health"));
    }

    #[test]
    fn settings_paths_name_one_bucket() {
        assert_eq!(
            settings_bucket("/_permafrost/buckets/photos"),
            Some("photos")
        );
        assert_eq!(settings_bucket("/_permafrost/buckets/"), None);
        assert_eq!(settings_bucket("/_permafrost/buckets/a/b"), None);
        assert_eq!(settings_bucket("/_permafrost/status"), None);
    }

    #[test]
    fn the_reserved_name_passes_validation_but_cannot_be_created() {
        let v = ReservedNameValidation;
        assert!(v.validate_bucket_name("_permafrost"));
        assert!(v.validate_bucket_name("my-bucket"));
        assert!(v.validate_bucket_name("b"), "refused later, with its name");
        assert!(!creatable_bucket_name("_permafrost"));
        assert!(!creatable_bucket_name("_other"));
        assert!(!creatable_bucket_name("Upper"));
        assert!(!creatable_bucket_name("b"));
        assert!(creatable_bucket_name("my-bucket"));
    }

    #[test]
    fn ignore_grace_is_read_from_the_query_among_signature_parameters() {
        assert_eq!(ignore_grace(None), Ok(false));
        assert_eq!(ignore_grace(Some("ignore_grace=true")), Ok(true));
        assert_eq!(
            ignore_grace(Some("X-Amz-Algorithm=AWS4-HMAC-SHA256&ignore_grace=1")),
            Ok(true)
        );
        assert_eq!(ignore_grace(Some("ignore_grace=false")), Ok(false));
        assert!(ignore_grace(Some("ignore_grace=maybe")).is_err());
    }
}
