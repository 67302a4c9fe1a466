//! The HTTP server: hyper (HTTP/1.1) in front of s3s (with the service's own endpoints under
//! [`crate::RESERVED_PREFIX`] as its custom route, `admin`), and a graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use permafrost_store::Store;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{Body, HttpError};
use tokio::net::TcpListener;

use crate::admin::{AdminRoute, ReservedNameValidation};
use crate::auth::{Credentials, RootAuth};
use crate::service::PermafrostS3;

/// How long a shutdown waits for requests in flight before it closes their connections.
pub const DRAIN_TIMEOUT_MS: u64 = 30_000;

/// The S3 service (s3s) over `store`, checking signatures against `credentials`.
pub fn s3_service(store: Arc<Store>, credentials: Credentials) -> S3Service {
    let mut builder = S3ServiceBuilder::new(PermafrostS3 {
        store: Arc::clone(&store),
    });
    builder.set_auth(RootAuth::new(credentials));
    builder.set_route(AdminRoute { store });
    builder.set_validation(ReservedNameValidation);
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
async fn handle(s3: S3Service, request: Request<Incoming>) -> Result<Response<Body>, HttpError> {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let expects_continue = expects_continue(request.headers());
    let no_body = declares_no_body(request.headers());
    let mut response = s3.call(request.map(Body::from)).await?;
    let status = response.status();
    let body_maybe_unread = !no_body && !status.is_success();
    if (expects_continue && no_body) || body_maybe_unread {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    // s3s logs server errors itself (target `s3s::service`); client errors are the client's business.
    if status.is_client_error() {
        tracing::debug!("{method} {path}: {status}");
    }
    Ok(response)
}

/// Serve S3 on `listener` until `shutdown` completes; then stop accepting, let requests in flight finish (up to
/// [`DRAIN_TIMEOUT_MS`]) and return. The caller closes the store afterwards.
pub async fn serve(
    listener: TcpListener,
    store: Arc<Store>,
    credentials: Credentials,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let s3 = s3_service(store, credentials);
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
                let s3 = s3.clone();
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    handle(s3.clone(), request)
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
