//! The HTTP server: hyper (HTTP/1.1) in front of s3s (with the service's own endpoints under
//! [`crate::RESERVED_PREFIX`] as its custom route, `admin`), and a graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use permafrost_admin::is_sigv4;
use permafrost_admin::{Admin, AdminOptions};
use permafrost_disk::power::WakeWitness;
use permafrost_store::Store;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{Body, HttpError};
use tokio::net::TcpListener;

use crate::admin::{AdminRoute, ReservedNameValidation};
use crate::auth::{Authorizer, Credentials, KeyAuth};
use crate::cluster::FORWARD_CODE;
use crate::service::PermafrostS3;
use permafrost_cluster::ClusterNode;

/// A response header an operation sets when s3s would not send the status it needs (RestoreObject's `202`):
/// [`handle`] applies the status and removes the header.
pub(crate) const STATUS_OVERRIDE_HEADER: &str = "x-permafrost-status-override";

/// How long a shutdown waits for requests in flight before it closes their connections.
pub const DRAIN_TIMEOUT_MS: u64 = 30_000;

/// The S3 service (s3s) over the admin's store, checking signatures and rights against the admin's keys
/// (`permafrost-access`); signed requests to the admin API go to `admin`.
pub fn s3_service(admin: Admin) -> S3Service {
    s3_service_in(admin, None)
}

/// [`s3_service`] of a cluster node (`crate::cluster`), or of a single server when `cluster` is `None`.
pub fn s3_service_in(admin: Admin, cluster: Option<Arc<ClusterNode>>) -> S3Service {
    let store = Arc::clone(admin.store());
    let access = Arc::clone(admin.access());
    let mut builder = S3ServiceBuilder::new(PermafrostS3 {
        store: Arc::clone(&store),
        cluster,
        access: Arc::clone(&access),
    });
    builder.set_auth(KeyAuth::new(Arc::clone(&access)));
    builder.set_access(Authorizer { access });
    builder.set_route(AdminRoute { store, admin });
    builder.set_validation(ReservedNameValidation);
    builder.set_config(crate::post_object::s3s_config());
    builder.build()
}

/// Whether a request announced `Expect: 100-continue`.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
}

/// Whether a request declares no body (`Content-Length: 0`, or neither a length nor a transfer coding).
fn declares_no_body(headers: &HeaderMap) -> bool {
    match headers.get(http::header::CONTENT_LENGTH) {
        Some(v) => v.as_bytes() == b"0",
        None => !headers.contains_key(http::header::TRANSFER_ENCODING),
    }
}

/// One request through s3s.
///
/// Answered with `Connection: close`:
/// - a request with `Expect: 100-continue` and no body (hyper sends no `100 Continue` then). The AWS CLI's
///   bundled botocore (1.4x) keeps the final status line of such an answer on its pooled connection and replays
///   it for the next `Expect` request there (PUT of an empty file, then an UploadPart): it then reads the real
///   status line as a header, finds no `Content-Length` or `ETag`, and waits for the connection to close (a
///   read timeout, then a retry, or a part without ETag). A closed connection resets that state.
/// - a request with a body that failed (`SlowDown`, a bad digest, …): the body may be partly unread (or, with
///   `Expect`, never sent), and the client must not reuse a connection whose state it cannot know.
///
/// A fresh connection costs one TCP handshake.
///
/// Every answer carries `x-amz-request-id` and `x-amz-id-2` ([`RequestIds`]); S3 error bodies carry them as
/// `<RequestId>` and `<HostId>`, and the request's log line names the request id.
async fn handle(
    s3: S3Service,
    admin: Admin,
    cluster: Option<Arc<ClusterNode>>,
    request: Request<Incoming>,
) -> Result<Response<Body>, HttpError> {
    let ids = RequestIds::new(cluster.as_deref().map(|c| c.node_name.as_str()));
    let (method, path, started) = (
        request.method().clone(),
        request.uri().path().to_owned(),
        Instant::now(),
    );
    let mut response = answer(s3, admin, cluster, request, &ids).await?;
    ids.stamp(&mut response);
    if !ids.logged.load(std::sync::atomic::Ordering::Relaxed) {
        // Answered before s3s (a CORS preflight, the admin API with a token): its line at debug.
        let line = RequestLine {
            operation: if method == http::Method::OPTIONS {
                "PreflightRequest"
            } else {
                "AdminAPI"
            },
            path: &path,
            response: &response,
            request_id: &ids.request_id,
            access_key: None,
            signer: "",
            elapsed: started.elapsed(),
        };
        tracing::debug!(target: "permafrost_s3::requests", "{}", line.text());
    }
    Ok(response)
}

/// [`handle`] under the request's ids.
async fn answer(
    s3: S3Service,
    admin: Admin,
    cluster: Option<Arc<ClusterNode>>,
    request: Request<Incoming>,
    ids: &RequestIds,
) -> Result<Response<Body>, HttpError> {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    // The admin API, metrics and dashboard, unless signed like S3 (then s3s checks the signature and its route
    // hands the request to the admin).
    if Admin::owns_path(&path) && !is_sigv4(request.headers(), request.uri().query()) {
        return Ok(admin.handle(request.map(Body::from), None).await);
    }
    let started = Instant::now();
    let operation = if path == crate::admin::READY_PATH || path == crate::admin::HEALTH_PATH {
        PROBE_OPERATION
    } else if crate::admin::is_admin_path(&path) {
        "AdminAPI"
    } else {
        crate::metrics::operation(&method, request.uri(), request.headers())
    };
    let witness = WakeWitness::new();
    let expects_continue = expects_continue(request.headers());
    let access_key = signing_access_key(&request);
    let no_body = declares_no_body(request.headers());
    let request = match add_admin_payload_hash(request).await {
        Ok(r) => r,
        Err(response) => return Ok(*response),
    };
    // CORS preflights are answered here; form uploads are looked at before s3s reads them (`cors`).
    let (request, browser) = match crate::cors::arrive(admin.access(), request).await {
        Ok(arrived) => arrived,
        Err(answer) => return Ok(*answer),
    };
    let access_key = access_key.or_else(|| browser.form_access_key());
    let mut request = request;
    request.extensions_mut().insert(Arc::clone(&witness));
    // A GET in a cluster may be answered by forwarding the client's own request to the holder (`cluster`).
    let forwardable = match &cluster {
        Some(node) if method == http::Method::GET => Some((
            Arc::clone(node),
            request.uri().clone(),
            request.headers().clone(),
        )),
        _ => None,
    };
    let mut response = s3.call(request).await?;
    if let Some((node, uri, headers)) = forwardable {
        if !response.status().is_success() {
            if let Some((code, address)) = error_code_and_message(response.body()) {
                if code == FORWARD_CODE {
                    response =
                        crate::cluster::forward(&address, &method, &uri, &headers, &node.node_name)
                            .await;
                }
            }
        }
    }
    explain_bare_error(&mut response, access_key.as_deref());
    if let Some(status) = response
        .headers_mut()
        .remove(STATUS_OVERRIDE_HEADER)
        .and_then(|v| v.to_str().ok()?.parse::<u16>().ok())
        .and_then(|v| http::StatusCode::from_u16(v).ok())
    {
        *response.status_mut() = status;
    }
    crate::cors::depart(browser, &mut response);
    let status = response.status();
    // Stamped and logged before the metrics wrap the body (the log names the error code read from it).
    ids.stamp(&mut response);
    let signer = admin.access().signer_name(access_key.as_deref());
    let line = RequestLine {
        operation,
        path: &path,
        response: &response,
        request_id: &ids.request_id,
        access_key: access_key.as_deref(),
        signer: &signer,
        elapsed: started.elapsed(),
    };
    if audited(&method, status) {
        audit(&admin, &method, &line);
    }
    line.log(audited(&method, status));
    ids.logged.store(true, std::sync::atomic::Ordering::Relaxed);
    if !path.starts_with(crate::RESERVED_PREFIX) {
        response = crate::metrics::timed(
            response,
            admin.metrics().clone(),
            operation,
            started,
            witness,
        );
    }
    let body_maybe_unread = !no_body && !status.is_success();
    if (expects_continue && no_body) || body_maybe_unread {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}

/// The access key id a request was signed with (from `Authorization: AWS4-HMAC-SHA256 Credential=KEY/…` or a
/// presigned URL's `X-Amz-Credential=KEY%2F…`).
fn signing_access_key<B>(request: &Request<B>) -> Option<String> {
    let from_header = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("Credential=").nth(1))
        .and_then(|c| c.split('/').next())
        .map(str::to_owned);
    from_header.or_else(|| {
        request.uri().query()?.split('&').find_map(|pair| {
            let value = pair.strip_prefix("X-Amz-Credential=")?;
            let end = value
                .find("%2F")
                .or_else(|| value.find("%2f"))
                .or_else(|| value.find('/'))
                .unwrap_or(value.len());
            Some(value[..end].to_owned())
        })
    })
}

/// s3s answers some refusals with a bare code and no message (a wrong signature, a body that is not XML): the
/// AWS CLI then prints "Unknown". Give them AWS's message; for a wrong signature, say which access key signed
/// and what differed, as S3 does.
fn explain_bare_error(response: &mut Response<Body>, access_key: Option<&str>) {
    let Some((code, message)) = error_code_and_message(response.body()) else {
        return;
    };
    if !message.is_empty() {
        return;
    }
    let message = match code.as_str() {
        "SignatureDoesNotMatch" => format!(
            "The request signature we calculated does not match the signature you provided: the string to \
             sign differed. Check the secret key of access key {} and your signing method.",
            access_key.unwrap_or("(none given)")
        ),
        other => match bare_code_message(other) {
            Some(m) => m.to_owned(),
            None => return,
        },
    };
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{}</Message></Error>",
        xml_escape(&message)
    );
    response
        .headers_mut()
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(xml.len()));
    *response.body_mut() = Body::from(xml);
}

/// AWS's message for an error code s3s may send without one.
fn bare_code_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "MalformedXML" => {
            "The XML you provided was not well-formed or did not validate against our published schema."
        }
        "AccessDenied" => "Access Denied",
        "InvalidAccessKeyId" => "The AWS access key ID you provided does not exist in our records.",
        "MissingContentLength" => "You must provide the Content-Length HTTP header.",
        "IncompleteBody" => {
            "You did not provide the number of bytes specified by the Content-Length HTTP header."
        }
        "MethodNotAllowed" => "The specified method is not allowed against this resource.",
        "KeyTooLongError" => "Your key is too long (at most 1024 bytes).",
        "InvalidBucketName" => "The specified bucket is not valid.",
        "InvalidDigest" => "The Content-MD5 or checksum value that you specified is not valid.",
        "BadDigest" => {
            "The Content-MD5 or checksum value that you specified did not match what the server received."
        }
        _ => return None,
    })
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Largest admin request body hashed on the client's behalf.
const ADMIN_BODY_BYTES_MAX: usize = 1 << 20;

/// `curl --aws-sigv4` signs without an `x-amz-content-sha256` header (it puts the body's hash only into the
/// canonical request), and s3s wants the header. For the admin endpoints (small bodies), the server adds the
/// hash of the body it received: the signature still covers it (the canonical request's last line), so a
/// changed body still fails. S3 paths are left as they are.
async fn add_admin_payload_hash(
    request: Request<Incoming>,
) -> Result<Request<Body>, Box<Response<Body>>> {
    let signed_v4 = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS4-HMAC-SHA256"));
    if !signed_v4
        || request.headers().contains_key("x-amz-content-sha256")
        || !crate::admin::is_admin_path(request.uri().path())
    {
        return Ok(request.map(Body::from));
    }
    let (mut parts, body) = request.into_parts();
    let limited = http_body_util::Limited::new(body, ADMIN_BODY_BYTES_MAX);
    let bytes = match http_body_util::BodyExt::collect(limited).await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let mut response = Response::new(Body::from(format!(
                "{{\"error\":\"Bad Request\",\"message\":\"cannot read the request body: {e}\"}}\n"
            )));
            *response.status_mut() = http::StatusCode::BAD_REQUEST;
            return Err(Box::new(response));
        }
    };
    let hash: String = <sha2::Sha256 as sha2::Digest>::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Ok(value) = HeaderValue::from_str(&hash) {
        parts.headers.insert("x-amz-content-sha256", value);
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The `<Code>` and `<Message>` of an S3 XML error body (`None` when the body is not one, e.g. the admin
/// API's JSON, or is streamed).
fn error_code_and_message(body: &Body) -> Option<(String, String)> {
    let bytes = body.bytes()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let element = |name: &str| {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&close)?;
        Some(text[start..end].to_owned())
    };
    Some((element("Code")?, element("Message").unwrap_or_default()))
}

/// Whether a request goes to the audit trail: every one that may have changed something (not GET or HEAD),
/// and every refusal (`403`).
fn audited(method: &http::Method, status: http::StatusCode) -> bool {
    !matches!(*method, http::Method::GET | http::Method::HEAD)
        || status == http::StatusCode::FORBIDDEN
}

/// The ids of one request, as S3 gives them: `x-amz-request-id` (16 uppercase hex digits, unique per request)
/// and `x-amz-id-2`, the extended id (base64 of a SHA-256 over the node's name and the request id).
pub(crate) struct RequestIds {
    pub(crate) request_id: String,
    pub(crate) host_id: String,
    /// Whether the request's line was logged ([`RequestLine::log`]).
    logged: std::sync::atomic::AtomicBool,
}

impl RequestIds {
    /// Fresh ids for a request to `node` (a cluster node's name; `None` for a single server).
    pub(crate) fn new(node: Option<&str>) -> RequestIds {
        let request_id = next_request_id();
        let digest = <sha2::Sha256 as sha2::Digest>::digest(
            format!("{}/{request_id}", node.unwrap_or("permafrost")).as_bytes(),
        );
        let host_id = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, digest);
        RequestIds {
            request_id,
            host_id,
            logged: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Put the ids on `response`: both headers, and into an S3 XML error body that has no `<RequestId>` yet
    /// (a body the metrics already wrap is left as it is; its headers still get the ids).
    pub(crate) fn stamp(&self, response: &mut Response<Body>) {
        for (name, value) in [
            ("x-amz-request-id", &self.request_id),
            ("x-amz-id-2", &self.host_id),
        ] {
            if let Ok(value) = HeaderValue::from_str(value) {
                response.headers_mut().insert(name, value);
            }
        }
        if response.status().is_success() {
            return;
        }
        let Some(bytes) = response.body().bytes() else {
            return;
        };
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return;
        };
        let Some(end) = text.rfind("</Error>") else {
            return;
        };
        if text.contains("<RequestId>") {
            return;
        }
        let xml = format!(
            "{}<RequestId>{}</RequestId><HostId>{}</HostId>{}",
            &text[..end],
            self.request_id,
            self.host_id,
            &text[end..]
        );
        response
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, HeaderValue::from(xml.len()));
        *response.body_mut() = Body::from(xml);
    }
}

/// A request id: 16 uppercase hex digits, distinct for every request of the process (a bijective mix of a
/// counter from a per-process seed, so ids do not repeat within 2^64 requests and differ between runs).
fn next_request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        nanos ^ (u64::from(std::process::id()) << 40)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:016X}", splitmix64(seed.wrapping_add(n)))
}

/// SplitMix64's finaliser: a bijection of `u64` that scatters consecutive inputs.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The audit trail of one request: a `request` event with who signed it, the operation, the bucket and key (as
/// in the path), the status, the S3 code and the request id. Its log line is the request's [`RequestLine`].
fn audit(admin: &Admin, method: &http::Method, line: &RequestLine<'_>) {
    let status = line.response.status();
    let code = error_code_and_message(line.response.body())
        .map(|(c, _)| c)
        .unwrap_or_default();
    let (bucket, key) = line
        .path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((line.path.trim_start_matches('/'), ""));
    let outcome = if code.is_empty() {
        status.as_u16().to_string()
    } else {
        format!("{} {code}", status.as_u16())
    };
    let text = format!(
        "{} {} {method} {}: {outcome}",
        line.signer, line.operation, line.path
    );
    admin.events().emit(
        "request",
        text,
        serde_json::json!({
            "key": line.signer,
            "operation": line.operation,
            "method": method.as_str(),
            "bucket": bucket,
            "object": key,
            "status": status.as_u16(),
            "code": code,
            "request_id": line.request_id,
        }),
    );
}

/// Error codes that answer a client's probe for an optional configuration (a bucket without a policy, CORS
/// rules, tags, Object Lock, lifecycle rules, Block Public Access, encryption, …): expected, logged at debug.
const PROBE_NOT_FOUND_CODES: &[&str] = &[
    "NoSuchBucketPolicy",
    "NoSuchCORSConfiguration",
    "NoSuchTagSet",
    "ObjectLockConfigurationNotFoundError",
    "NoSuchObjectLockConfiguration",
    "NoSuchLifecycleConfiguration",
    "NoSuchPublicAccessBlockConfiguration",
    "ServerSideEncryptionConfigurationNotFoundError",
    "NoSuchWebsiteConfiguration",
    "ReplicationConfigurationNotFoundError",
    "OwnershipControlsNotFoundError",
];

/// The operation name of the liveness and readiness probes' requests (`/_permafrost/health`, `/_permafrost/ready`):
/// a load balancer asks every few seconds, so their lines are at debug whatever the answer (a `503` of the
/// readiness probe says what the server's own lines already say: the database is away, or it shuts down).
const PROBE_OPERATION: &str = "HealthProbe";

/// The level of a request's log line: a success at debug (one that changed something at info, the audit
/// trail), an expected "not found" ([`PROBE_NOT_FOUND_CODES`], a `HEAD` of a missing object or bucket) at
/// debug, a load balancer's probe ([`PROBE_OPERATION`]) at debug, another client error (4xx) at info,
/// `NotImplemented` at warn, other server errors at error.
fn line_level(
    operation: &str,
    status: http::StatusCode,
    code: &str,
    audited: bool,
) -> tracing::Level {
    if operation == PROBE_OPERATION {
        return tracing::Level::DEBUG;
    }
    if status.is_success() || status.is_redirection() {
        return if audited {
            tracing::Level::INFO
        } else {
            tracing::Level::DEBUG
        };
    }
    let probe = PROBE_NOT_FOUND_CODES.contains(&code)
        || (status == http::StatusCode::NOT_FOUND
            && matches!(operation, "HeadObject" | "HeadBucket"));
    if probe {
        tracing::Level::DEBUG
    } else if status.is_client_error() {
        tracing::Level::INFO
    } else if code == "NotImplemented" {
        tracing::Level::WARN
    } else {
        tracing::Level::ERROR
    }
}

/// One request as its log line says it.
struct RequestLine<'a> {
    operation: &'a str,
    /// The request's path (never the query: a presigned URL's signature is there).
    path: &'a str,
    response: &'a Response<Body>,
    request_id: &'a str,
    /// The access key id the request was signed with (`None`: unsigned).
    access_key: Option<&'a str>,
    /// The name of that key (`root`, `anonymous`, a key's name, `unknown key ID`).
    signer: &'a str,
    elapsed: Duration,
}

impl RequestLine<'_> {
    /// The line, `field=value` after the operation, the S3 error message (XML escapes decoded) after a colon:
    /// `GetObject bucket=runs key=2026/scan.bin status=404 code=NoSuchKey request_id=1F0C… access_key=AKIA…
    /// signer=root ms=2: no such key: runs/2026/scan.bin`. Values with spaces, quotes or `=` are quoted; an
    /// empty one is `-`.
    fn text(&self) -> String {
        let (code, message) = self.failure();
        let (bucket, key) = if self.path.starts_with(crate::RESERVED_PREFIX) {
            (String::new(), percent_decode(self.path))
        } else {
            let path = self.path.trim_start_matches('/');
            let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
            (percent_decode(bucket), percent_decode(key))
        };
        let mut line = format!(
            "{} bucket={} key={} status={} code={} request_id={} access_key={} signer={} ms={}",
            self.operation,
            field(&bucket),
            field(&key),
            self.response.status().as_u16(),
            field(&code),
            self.request_id,
            field(self.access_key.unwrap_or("")),
            field(self.signer),
            self.elapsed.as_millis(),
        );
        if !message.is_empty() {
            line.push_str(": ");
            line.push_str(&xml_unescape(&message));
        }
        line
    }

    /// Log the line at [`line_level`]: target `permafrost_s3::audit` for a request that changed something and
    /// succeeded, `permafrost_s3::requests` for the others.
    ///
    /// The line is formatted only when its level is on (a success at debug costs nothing by default).
    fn log(&self, audited: bool) {
        let status = self.response.status();
        let (code, _) = self.failure();
        let level = line_level(self.operation, status, &code, audited);
        let audit_line = audited && (status.is_success() || status.is_redirection());
        match (level, audit_line) {
            (tracing::Level::INFO, true) => {
                tracing::info!(target: "permafrost_s3::audit", "{}", self.text())
            }
            (tracing::Level::DEBUG, _) => {
                tracing::debug!(target: "permafrost_s3::requests", "{}", self.text())
            }
            (tracing::Level::INFO, _) => {
                tracing::info!(target: "permafrost_s3::requests", "{}", self.text())
            }
            (tracing::Level::WARN, _) => {
                tracing::warn!(target: "permafrost_s3::requests", "{}", self.text())
            }
            _ => tracing::error!(target: "permafrost_s3::requests", "{}", self.text()),
        }
    }

    /// The S3 code and message of a failed answer; none for a success (its body may be large, or a stream).
    fn failure(&self) -> (String, String) {
        let status = self.response.status();
        if status.is_success() || status.is_redirection() {
            return Default::default();
        }
        error_code_and_message(self.response.body()).unwrap_or_default()
    }
}

/// A log field's value: as it is, `-` when empty, quoted (Rust string syntax) when it has spaces, quotes, `=`
/// or control characters.
fn field(value: &str) -> std::borrow::Cow<'_, str> {
    if value.is_empty() {
        "-".into()
    } else if value
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '=' | '\\'))
    {
        format!("{value:?}").into()
    } else {
        value.into()
    }
}

/// A path segment percent-decoded (kept as it is when the result is not UTF-8).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

/// Text of an XML element with its escapes decoded: the five named entities and numeric references (an
/// unknown or malformed one is kept as it is).
fn xml_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let decoded = rest.find(';').and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "quot" => Some('"'),
                "apos" => Some('\''),
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                _ => {
                    let number = entity.strip_prefix('#')?;
                    let value = match number.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => number.parse().ok()?,
                    };
                    char::from_u32(value)
                }
            }?;
            Some((c, end + 1))
        });
        match decoded {
            Some((c, length)) => {
                out.push(c);
                rest = &rest[length..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Serve S3 on `listener` until `shutdown` completes; then stop accepting, let requests in flight finish (up to
/// [`DRAIN_TIMEOUT_MS`]) and return. The caller closes the store afterwards.
pub async fn serve(
    listener: TcpListener,
    store: Arc<Store>,
    credentials: Credentials,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let access = permafrost_access::Access::open(
        store.access_catalog(),
        credentials,
        permafrost_access::AccessSettings::default(),
    )
    .map_err(|e| std::io::Error::other(format!("cannot load the access keys: {e}")))?;
    let admin = Admin::start(store, Arc::new(access), AdminOptions::default());
    let result = serve_admin(listener, admin.clone(), shutdown).await;
    admin.stop();
    result
}

/// [`serve`] with an admin side the caller made (its options, endpoints other crates added). The caller stops
/// it afterwards ([`Admin::stop`]).
pub async fn serve_admin(
    listener: TcpListener,
    admin: Admin,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_node(listener, admin, None, shutdown).await
}

/// [`serve_admin`] for a node of a cluster (`crate::cluster`): `cluster` is its view of the others.
pub async fn serve_node(
    listener: TcpListener,
    admin: Admin,
    cluster: Option<Arc<ClusterNode>>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let s3 = s3_service_in(admin.clone(), cluster.clone());
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(Duration::from_secs(60));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait a little rather than spin.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Small answers go out at once: without it a response written in two pieces (head, body) waits
                // for the client's delayed ACK (~40 ms per small GET; Nagle's algorithm).
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!("connection from {peer}: cannot set TCP_NODELAY: {e}");
                }
                let s3 = s3.clone();
                let admin = admin.clone();
                let cluster = cluster.clone();
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    handle(s3.clone(), admin.clone(), cluster.clone(), request)
                });
                let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!("connection from {peer}: {e}");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    admin.begin_drain(); // readiness answers 503 from now on; event streams never end on their own
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(Duration::from_millis(DRAIN_TIMEOUT_MS)) => {
            tracing::warn!("requests still in flight after {DRAIN_TIMEOUT_MS} ms; closing their connections");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| {
                (
                    http::header::HeaderName::from_static(n),
                    HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn the_code_and_message_of_an_xml_error_are_found() {
        let body = Body::from(
            "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>no such key: a/b</Message></Error>"
                .to_owned(),
        );
        assert_eq!(
            error_code_and_message(&body),
            Some(("NoSuchKey".into(), "no such key: a/b".into()))
        );
        assert_eq!(error_code_and_message(&Body::from("{}".to_owned())), None);
    }

    #[test]
    fn expect_continue_and_an_empty_body_are_recognised() {
        assert!(expects_continue(&headers(&[("expect", "100-Continue")])));
        assert!(!expects_continue(&headers(&[])));
        assert!(declares_no_body(&headers(&[("content-length", "0")])));
        assert!(declares_no_body(&headers(&[])));
        assert!(!declares_no_body(&headers(&[("content-length", "10")])));
        assert!(!declares_no_body(&headers(&[(
            "transfer-encoding",
            "chunked"
        )])));
    }

    #[test]
    fn request_ids_are_16_uppercase_hex_digits_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..10_000)
            .map(|_| RequestIds::new(None).request_id)
            .collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(50) {
            assert_eq!(id.len(), 16, "{id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()),
                "{id}"
            );
        }
    }

    fn error_response(status: u16, xml: &str) -> Response<Body> {
        let mut response = Response::new(Body::from(xml.to_owned()));
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        response
    }

    #[test]
    fn an_error_body_gets_the_request_id_and_host_id_and_every_answer_the_headers() {
        let ids = RequestIds::new(Some("n1"));
        let mut response = error_response(
            404,
            "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>m</Message></Error>",
        );
        ids.stamp(&mut response);
        let body = response.body().bytes().unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(
            text.ends_with(&format!(
                "<RequestId>{}</RequestId><HostId>{}</HostId></Error>",
                ids.request_id, ids.host_id
            )),
            "{text}"
        );
        assert_eq!(
            response.headers()["content-length"],
            text.len().to_string().as_str()
        );
        assert_eq!(
            response.headers()["x-amz-request-id"],
            ids.request_id.as_str()
        );
        assert_eq!(response.headers()["x-amz-id-2"], ids.host_id.as_str());
        // Stamped twice: one RequestId.
        ids.stamp(&mut response);
        let body = response.body().bytes().unwrap();
        assert_eq!(
            std::str::from_utf8(&body)
                .unwrap()
                .matches("<RequestId>")
                .count(),
            1
        );
        let mut ok = Response::new(Body::from("<Error>is the object</Error>".to_owned()));
        ids.stamp(&mut ok);
        assert_eq!(
            ok.body().bytes().unwrap().as_ref(),
            b"<Error>is the object</Error>"
        );
        assert!(ok.headers().contains_key("x-amz-request-id"));
    }

    #[test]
    fn the_log_line_names_operation_bucket_key_status_code_ids_and_an_unescaped_message() {
        let response = error_response(
            403,
            "<Error><Code>AccessDenied</Code><Message>key &quot;w&quot; may not &apos;delete&apos; &amp; &lt;more&gt; &#233;</Message></Error>",
        );
        let line = RequestLine {
            operation: "DeleteObject",
            path: "/photos/2026/my%20cat.jpg",
            response: &response,
            request_id: "0123456789ABCDEF",
            access_key: Some("AKIAEXAMPLE"),
            signer: "w",
            elapsed: Duration::from_millis(3),
        };
        assert_eq!(
            line.text(),
            "DeleteObject bucket=photos key=\"2026/my cat.jpg\" status=403 code=AccessDenied \
             request_id=0123456789ABCDEF access_key=AKIAEXAMPLE signer=w ms=3: \
             key \"w\" may not 'delete' & <more> \u{e9}"
        );
        let ok = Response::new(Body::empty());
        let line = RequestLine {
            operation: "ListBuckets",
            path: "/",
            response: &ok,
            request_id: "0123456789ABCDEF",
            access_key: None,
            signer: "anonymous",
            elapsed: Duration::ZERO,
        };
        assert_eq!(
            line.text(),
            "ListBuckets bucket=- key=- status=200 code=- request_id=0123456789ABCDEF access_key=- \
             signer=anonymous ms=0"
        );
    }

    #[test]
    fn probes_that_find_nothing_and_successes_are_debug_failures_info() {
        use http::StatusCode as S;
        use tracing::Level as L;
        assert_eq!(line_level("GetObject", S::OK, "", false), L::DEBUG);
        assert_eq!(line_level("PutObject", S::OK, "", true), L::INFO);
        assert_eq!(
            line_level("GetBucketPolicy", S::NOT_FOUND, "NoSuchBucketPolicy", false),
            L::DEBUG
        );
        assert_eq!(
            line_level("GetBucketTagging", S::NOT_FOUND, "NoSuchTagSet", false),
            L::DEBUG
        );
        assert_eq!(
            line_level("HeadObject", S::NOT_FOUND, "NoSuchKey", false),
            L::DEBUG
        );
        assert_eq!(
            line_level("GetObject", S::NOT_FOUND, "NoSuchKey", false),
            L::INFO
        );
        assert_eq!(
            line_level("DeleteObject", S::FORBIDDEN, "AccessDenied", true),
            L::INFO
        );
        assert_eq!(
            line_level("Other", S::NOT_IMPLEMENTED, "NotImplemented", false),
            L::WARN
        );
        assert_eq!(
            line_level(
                "GetObject",
                S::INTERNAL_SERVER_ERROR,
                "InternalError",
                false
            ),
            L::ERROR
        );
    }

    #[test]
    fn xml_escapes_are_decoded_and_broken_ones_kept() {
        assert_eq!(xml_unescape("a &amp;&amp; b"), "a && b");
        assert_eq!(xml_unescape("&#x41;&#66;"), "AB");
        assert_eq!(
            xml_unescape("R&D &nope; &#xZZ; end &"),
            "R&D &nope; &#xZZ; end &"
        );
    }
}
