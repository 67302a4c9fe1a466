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
use crate::cluster::{ClusterNode, FORWARD_CODE};
use crate::service::PermafrostS3;

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
async fn handle(
    s3: S3Service,
    admin: Admin,
    cluster: Option<Arc<ClusterNode>>,
    request: Request<Incoming>,
) -> Result<Response<Body>, HttpError> {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    // The admin API, metrics and dashboard, unless signed like S3 (then s3s checks the signature and its route
    // hands the request to the admin).
    if Admin::owns_path(&path) && !is_sigv4(request.headers(), request.uri().query()) {
        return Ok(admin.handle(request.map(Body::from), None).await);
    }
    let started = Instant::now();
    let operation = if crate::admin::is_admin_path(&path) {
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
    explain_signature_mismatch(&mut response, access_key.as_deref());
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
    // Logged before the metrics wrap the body (the log names the error code read from it).
    let signer = admin.access().signer_name(access_key.as_deref());
    if audited(&method, status) {
        audit(&admin, &method, &path, &response, operation, &signer);
    } else if !status.is_success() && !status.is_redirection() {
        log_failure(&method, &path, &response, operation, &signer);
    }
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

/// s3s answers a wrong signature with a bare `SignatureDoesNotMatch` (the AWS CLI then prints "Unknown"): say
/// which access key signed and what differed, as S3 does.
fn explain_signature_mismatch(response: &mut Response<Body>, access_key: Option<&str>) {
    let Some((code, message)) = error_code_and_message(response.body()) else {
        return;
    };
    if code != "SignatureDoesNotMatch" || !message.is_empty() {
        return;
    }
    let message = format!(
        "The request signature we calculated does not match the signature you provided: the string to sign          differed. Check the secret key of access key {} and your signing method.",
        access_key.unwrap_or("(none given)")
    );
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code><Message>{}</Message></Error>",
        xml_escape(&message)
    );
    response
        .headers_mut()
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(xml.len()));
    *response.body_mut() = Body::from(xml);
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

/// The audit trail of one request: a `request` event with who signed it, the operation, the bucket and key (as
/// in the path), the status and the S3 code, and its log line: success at info (target
/// `permafrost_s3::audit`), a failure as [`log_failure`] says it.
fn audit(
    admin: &Admin,
    method: &http::Method,
    path: &str,
    response: &Response<Body>,
    operation: &str,
    signer: &str,
) {
    let status = response.status();
    let code = error_code_and_message(response.body())
        .map(|(c, _)| c)
        .unwrap_or_default();
    let (bucket, key) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path.trim_start_matches('/'), ""));
    let outcome = if code.is_empty() {
        status.as_u16().to_string()
    } else {
        format!("{} {code}", status.as_u16())
    };
    let line = format!("{signer} {operation} {method} {path}: {outcome}");
    if status.is_success() || status.is_redirection() {
        tracing::info!(target: "permafrost_s3::audit", "{line}");
    } else {
        log_failure(method, path, response, operation, signer);
    }
    admin.events().emit(
        "request",
        line,
        serde_json::json!({
            "key": signer,
            "operation": operation,
            "method": method.as_str(),
            "bucket": bucket,
            "object": key,
            "status": status.as_u16(),
            "code": code,
        }),
    );
}

/// One log line per failed request, in words: method, path (never the query: a presigned URL's signature is
/// there), status, S3 code and message, the operation and who signed it. Client errors (4xx) at info,
/// `NotImplemented` at warn, other server errors at error. (s3s's own log lines, Debug dumps of whole
/// responses, are switched off by the binary.)
fn log_failure(
    method: &http::Method,
    path: &str,
    response: &Response<Body>,
    operation: &str,
    signer: &str,
) {
    let status = response.status();
    let (code, message) = error_code_and_message(response.body()).unwrap_or_default();
    let detail = match (code.is_empty(), message.is_empty()) {
        (true, _) => String::new(),
        (false, true) => format!(" {code}"),
        (false, false) => format!(" {code}: {message}"),
    };
    let line = format!(
        "{method} {path}: {}{detail} ({operation}, key {signer})",
        status.as_u16()
    );
    if status.is_client_error() {
        tracing::info!(target: "permafrost_s3::requests", "{line}");
    } else if code == "NotImplemented" {
        tracing::warn!(target: "permafrost_s3::requests", "{line}");
    } else {
        tracing::error!(target: "permafrost_s3::requests", "{line}");
    }
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
    admin.close_streams(); // event streams never end on their own
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
}
