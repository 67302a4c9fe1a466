//! The API router: `(method, path pattern) → handler`, JSON answers and errors.
//!
//! Patterns are paths below [`crate::API_PREFIX`] whose `{name}` segments match one segment each
//! (`/disks/{disk}/scrub`). Other crates add their endpoints with [`crate::Admin::route`] and a handler written
//! with [`handler`]; a handler gets the [`crate::Admin`] and an [`ApiRequest`] (body already read, at most
//! [`BODY_BYTES_MAX`]) and answers [`ApiResult`]: a response ([`json`], [`json_status`]) or an [`ApiError`]
//! (a clear message with its HTTP status, answered as `{"error": CODE, "message": TEXT}`).

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use s3s::Body;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::Admin;

/// Largest request body an API endpoint accepts.
pub const BODY_BYTES_MAX: usize = 1 << 20;

/// What a handler answers.
pub type ApiResult = Result<Response<Body>, ApiError>;

/// An endpoint: called with the admin and the request.
pub type Handler = Arc<dyn Fn(Admin, ApiRequest) -> BoxFuture<'static, ApiResult> + Send + Sync>;

/// Make a [`Handler`] of an async function.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Admin, ApiRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ApiResult> + Send + 'static,
{
    Arc::new(move |admin, request| Box::pin(f(admin, request)))
}

/// An API request: method, path (below the API prefix), the pattern's parameters, query and body.
#[derive(Debug)]
pub struct ApiRequest {
    /// Who asked: the root user, or an access key on one of [`crate::SCOPED_ENDPOINTS`].
    pub principal: permafrost_access::Principal,
    pub method: Method,
    /// The path below [`crate::API_PREFIX`], starting with `/`.
    pub path: String,
    /// Values of the pattern's `{name}` segments.
    pub params: Vec<(String, String)>,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl ApiRequest {
    /// Refuse (`403 AccessDenied`, naming what was missing) unless the caller may run `operation` on `bucket`.
    pub fn authorize(
        &self,
        admin: &crate::Admin,
        operation: &permafrost_access::Operation,
        bucket: &str,
    ) -> Result<(), ApiError> {
        admin
            .access()
            .authorize(&self.principal, operation, bucket, None)
            .map_err(|d| ApiError::new(http::StatusCode::FORBIDDEN, "AccessDenied", d.message))
    }

    /// The value of the pattern's `{name}` segment (empty if the pattern has none).
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// The value of query parameter `name`, if given.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Query parameter `name` parsed, or `default` when absent; a value that does not parse is a 400 naming it.
    pub fn query_parse<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, ApiError> {
        match self.query(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "query parameter {name}={v:?} is not a valid {}",
                    short_type_name::<T>()
                ))
            }),
        }
    }

    /// The body as JSON of type `T` (an empty body reads as `{}`); a body that does not fit is a 400 saying why.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let body: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &self.body
        };
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("request body: {e}")))
    }
}

fn short_type_name<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}

/// An error answer: status, a short code and a message that says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    /// `400 BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }
    /// `404 NotFound`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NotFound", message)
    }
    /// `409 Conflict`.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "Conflict", message)
    }
    /// `500 InternalError` (logged).
    pub fn internal(message: impl Into<String>) -> ApiError {
        let message = message.into();
        tracing::error!("admin API: {message}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }

    /// The error as a JSON response.
    pub fn into_response(self) -> Response<Body> {
        json_status(
            self.status,
            &serde_json::json!({ "error": self.code, "message": self.message }),
        )
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

/// The admin API status of a store error, by variant: not found 404, refused by a rule (Object Lock) 403, a
/// conflict with the state of the bucket or object 409, a malformed or unfit request 400, a range or part number
/// outside the object 416, a condition that does not hold 412, busy or the catalog database gone 503 (retry),
/// anything else 500. The code in the JSON answer is the S3 code of the error (`StoreError::s3_code`).
pub fn store_error_status(e: &permafrost_store::StoreError) -> StatusCode {
    use permafrost_store::StoreError as E;
    match e {
        E::NoSuchBucket(_) | E::NoSuchKey { .. } | E::NoSuchUpload(_) | E::NoSuchVersion(_) => {
            StatusCode::NOT_FOUND
        }
        E::AccessDenied(_) | E::InvalidObjectState(_) => StatusCode::FORBIDDEN,
        E::BucketNotEmpty(_)
        | E::BucketAlreadyOwnedByYou(_)
        | E::InvalidBucketState(_)
        | E::RestoreAlreadyInProgress(_) => StatusCode::CONFLICT,
        E::BadDigest(_)
        | E::InvalidDigest(_)
        | E::InvalidPart(_)
        | E::InvalidPartOrder(_)
        | E::EntityTooSmall(_)
        | E::InvalidArgument(_)
        | E::InvalidRequest(_)
        | E::InvalidStorageClass(_)
        | E::InvalidTag(_) => StatusCode::BAD_REQUEST,
        E::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
        E::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
        E::InvalidRange(_) | E::InvalidPartNumber(_) => StatusCode::RANGE_NOT_SATISFIABLE,
        E::SlowDown(_) | E::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        E::NotPersisted(_) | E::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<permafrost_store::StoreError> for ApiError {
    fn from(e: permafrost_store::StoreError) -> ApiError {
        match store_error_status(&e) {
            StatusCode::INTERNAL_SERVER_ERROR => ApiError::internal(e.to_string()),
            status => ApiError::new(status, e.s3_code(), e.to_string()),
        }
    }
}

impl From<permafrost_catalog::CatalogError> for ApiError {
    fn from(e: permafrost_catalog::CatalogError) -> ApiError {
        use permafrost_catalog::CatalogError as C;
        match e {
            C::NoSuchAccessKey(_) => ApiError::not_found(e.to_string()),
            C::AccessKeyExists(_) => ApiError::conflict(e.to_string()),
            other => permafrost_store::StoreError::from(other).into(),
        }
    }
}

impl From<permafrost_engine::Error> for ApiError {
    fn from(e: permafrost_engine::Error) -> ApiError {
        match e {
            permafrost_engine::Error::InvalidArgument(m) => ApiError::bad_request(m),
            other => ApiError::internal(other.to_string()),
        }
    }
}

/// `200` with `value` as JSON.
pub fn json(value: &impl Serialize) -> ApiResult {
    Ok(json_status(StatusCode::OK, value))
}

/// `status` with `value` as JSON (pretty, one trailing newline).
pub fn json_status(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    let mut text = serde_json::to_vec_pretty(value).unwrap_or_else(|e| {
        format!("{{\"error\":\"InternalError\",\"message\":\"cannot serialize the answer: {e}\"}}")
            .into_bytes()
    });
    text.push(b'\n');
    let mut response = Response::new(Body::from(Bytes::from(text)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    response
}

/// Run blocking work (store, engine, catalog calls) off the async threads.
pub async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("admin task failed: {e}")))?
}

struct Route {
    method: Method,
    segments: Vec<Segment>,
    pattern: String,
    handler: Handler,
}

enum Segment {
    Literal(String),
    Param(String),
}

/// Two patterns of the same shape match the same paths, whatever their parameters are called.
impl PartialEq for Segment {
    fn eq(&self, other: &Segment) -> bool {
        match (self, other) {
            (Segment::Literal(a), Segment::Literal(b)) => a == b,
            (Segment::Param(_), Segment::Param(_)) => true,
            _ => false,
        }
    }
}

/// The routes, in the order they were added (the first match wins).
#[derive(Default)]
pub(crate) struct Router {
    routes: Vec<Route>,
}

/// What the router found for a request.
pub(crate) enum Found {
    Handler(Handler, Vec<(String, String)>),
    /// The path exists with other methods.
    WrongMethod(Vec<Method>),
    Missing,
}

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

impl Router {
    /// Add `method pattern`. Panics if the same method and pattern were added before (a wiring mistake).
    pub(crate) fn add(&mut self, method: Method, pattern: &str, handler: Handler) {
        let parsed: Vec<Segment> = segments(pattern)
            .map(
                |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(name) => Segment::Param(name.to_string()),
                    None => Segment::Literal(s.to_string()),
                },
            )
            .collect();
        assert!(
            !self
                .routes
                .iter()
                .any(|r| r.method == method && r.segments == parsed),
            "admin API route {method} {pattern} added twice"
        );
        self.routes.push(Route {
            method,
            segments: parsed,
            pattern: pattern.to_string(),
            handler,
        });
    }

    pub(crate) fn find(&self, method: &Method, path: &str) -> Found {
        let parts: Vec<&str> = segments(path).collect();
        let mut methods = Vec::new();
        for route in &self.routes {
            let Some(params) = matches(&route.segments, &parts) else {
                continue;
            };
            let head_as_get = *method == Method::HEAD && route.method == Method::GET;
            if route.method == *method || head_as_get {
                return Found::Handler(route.handler.clone(), params);
            }
            methods.push(route.method.clone());
        }
        if methods.is_empty() {
            Found::Missing
        } else {
            Found::WrongMethod(methods)
        }
    }

    /// Every `METHOD pattern`, for the index endpoint.
    pub(crate) fn describe(&self) -> Vec<String> {
        self.routes
            .iter()
            .map(|r| format!("{} {}", r.method, r.pattern))
            .collect()
    }
}

fn matches(pattern: &[Segment], parts: &[&str]) -> Option<Vec<(String, String)>> {
    if pattern.len() != parts.len() {
        return None;
    }
    let mut params = Vec::new();
    for (segment, part) in pattern.iter().zip(parts) {
        match segment {
            Segment::Literal(l) if l == part => {}
            Segment::Literal(_) => return None,
            Segment::Param(name) => params.push((name.clone(), percent_decode(part))),
        }
    }
    Some(params)
}

/// Decode `%XX` escapes (and `+` as a space in queries); invalid escapes stay as they are.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query string as decoded pairs (`+` is a space).
pub(crate) fn parse_query(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&n.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Handler {
        handler(|_, _| async { json(&serde_json::json!({})) })
    }

    #[test]
    fn patterns_match_literal_and_parameter_segments() {
        let mut r = Router::default();
        r.add(Method::GET, "/disks", noop());
        r.add(Method::GET, "/disks/{disk}", noop());
        r.add(Method::POST, "/disks/{disk}/scrub", noop());
        match r.find(&Method::GET, "/disks/7") {
            Found::Handler(_, params) => assert_eq!(params, vec![("disk".into(), "7".into())]),
            _ => panic!("no match"),
        }
        assert!(matches!(
            r.find(&Method::HEAD, "/disks"),
            Found::Handler(..)
        ));
        assert!(matches!(
            r.find(&Method::GET, "/disks/7/scrub"),
            Found::WrongMethod(m) if m == vec![Method::POST]
        ));
        assert!(matches!(r.find(&Method::GET, "/nope"), Found::Missing));
        assert!(matches!(r.find(&Method::GET, "/disks/7/x"), Found::Missing));
    }

    #[test]
    #[should_panic(expected = "added twice")]
    fn a_route_added_twice_is_a_wiring_mistake() {
        let mut r = Router::default();
        r.add(Method::GET, "/a/{x}", noop());
        r.add(Method::GET, "/a/{y}", noop());
    }

    #[test]
    fn queries_and_parameters_are_percent_decoded() {
        assert_eq!(
            parse_query(Some("prefix=a%2Fb+c&timeout_ms=5&flag")),
            vec![
                ("prefix".into(), "a/b c".into()),
                ("timeout_ms".into(), "5".into()),
                ("flag".into(), "".into())
            ]
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("caf%C3%A9"), "café");
    }

    /// Every store error, with the admin status it must map to. Exhaustive: a new variant does not compile until
    /// it has its line here.
    fn expected_status(e: &permafrost_store::StoreError) -> u16 {
        use permafrost_store::StoreError as E;
        match e {
            E::NoSuchBucket(_) | E::NoSuchKey { .. } | E::NoSuchUpload(_) | E::NoSuchVersion(_) => {
                404
            }
            E::AccessDenied(_) | E::InvalidObjectState(_) => 403,
            E::BucketNotEmpty(_)
            | E::BucketAlreadyOwnedByYou(_)
            | E::InvalidBucketState(_)
            | E::RestoreAlreadyInProgress(_) => 409,
            E::BadDigest(_)
            | E::InvalidDigest(_)
            | E::InvalidPart(_)
            | E::InvalidPartOrder(_)
            | E::EntityTooSmall(_)
            | E::InvalidArgument(_)
            | E::InvalidRequest(_)
            | E::InvalidStorageClass(_)
            | E::InvalidTag(_) => 400,
            E::MethodNotAllowed(_) => 405,
            E::PreconditionFailed(_) => 412,
            E::InvalidRange(_) | E::InvalidPartNumber(_) => 416,
            E::SlowDown(_) | E::Unavailable(_) => 503,
            E::NotPersisted(_) | E::Internal(_) => 500,
        }
    }

    #[test]
    fn every_store_error_maps_to_its_admin_status_and_s3_code() {
        use permafrost_store::StoreError as E;
        let m = || "what went wrong".to_owned();
        let errors = vec![
            E::NoSuchBucket(m()),
            E::NoSuchKey {
                bucket: "b".into(),
                key: "k".into(),
            },
            E::BucketNotEmpty(m()),
            E::BucketAlreadyOwnedByYou(m()),
            E::BadDigest(m()),
            E::InvalidDigest(m()),
            E::SlowDown(m()),
            E::InvalidRange(m()),
            E::InvalidPart(m()),
            E::InvalidPartOrder(m()),
            E::NoSuchUpload(m()),
            E::EntityTooSmall(m()),
            E::InvalidArgument(m()),
            E::NoSuchVersion(m()),
            E::AccessDenied(m()),
            E::InvalidBucketState(m()),
            E::InvalidRequest(m()),
            E::InvalidObjectState(m()),
            E::RestoreAlreadyInProgress(m()),
            E::InvalidStorageClass(m()),
            E::MethodNotAllowed(m()),
            E::InvalidTag(m()),
            E::InvalidPartNumber(m()),
            E::PreconditionFailed(m()),
            E::NotPersisted(m()),
            E::Unavailable(m()),
            E::Internal(m()),
        ];
        for e in errors {
            let (status, code, message) = (expected_status(&e), e.s3_code(), e.to_string());
            let api = ApiError::from(e);
            assert_eq!(api.status.as_u16(), status, "{message}");
            let code = if status == 500 { "InternalError" } else { code };
            assert_eq!(api.code, code, "{message}");
            assert_eq!(api.message, message);
        }
    }

    #[test]
    fn catalog_errors_keep_their_kind_in_the_admin_api() {
        use permafrost_catalog::CatalogError as C;
        let status = |e: C| ApiError::from(e).status.as_u16();
        assert_eq!(status(C::NoSuchAccessKey("k".into())), 404);
        assert_eq!(status(C::AccessKeyExists("k".into())), 409);
        assert_eq!(
            status(C::NoSuchVersion {
                bucket: "b".into(),
                key: "k".into(),
                version_id: "v".into()
            }),
            404
        );
        assert_eq!(status(C::Locked("retention until 2030".into())), 403);
        assert_eq!(
            status(C::Unreachable(
                "catalog database postgresql://h/db: cannot connect".into()
            )),
            503
        );
        assert_eq!(status(C::Corrupt("a row".into())), 500);
    }
}
