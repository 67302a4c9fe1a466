//! The HTTP server: hyper (HTTP/1.1) in front of s3s, with the service's own endpoints under
//! [`RESERVED_PREFIX`] routed before s3s, and a graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use permafrost_store::Store;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{Body, HttpError};
use tokio::net::TcpListener;

use crate::auth::{Credentials, RootAuth};
use crate::service::PermafrostS3;

/// Paths under this prefix belong to the service itself (`_permafrost` is not a valid bucket name).
pub const RESERVED_PREFIX: &str = "/_permafrost/";
/// `GET` answers `200 {"status":"ok"}` while the server accepts requests (no authentication).
pub const HEALTH_PATH: &str = "/_permafrost/health";

/// How long a shutdown waits for requests in flight before it closes their connections.
pub const DRAIN_TIMEOUT_MS: u64 = 30_000;

/// The S3 service (s3s) over `store`, checking signatures against `credentials`.
pub fn s3_service(store: Arc<Store>, credentials: Credentials) -> S3Service {
    let mut builder = S3ServiceBuilder::new(PermafrostS3 { store });
    builder.set_auth(RootAuth::new(credentials));
    builder.build()
}

fn is_reserved(path: &str) -> bool {
    path == RESERVED_PREFIX.trim_end_matches('/') || path.starts_with(RESERVED_PREFIX)
}

fn json(status: StatusCode, body: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The service's own endpoints.
fn reserved(request: &Request<Incoming>) -> Response<Body> {
    match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, HEALTH_PATH) => {
            json(StatusCode::OK, "{\"status\":\"ok\"}\n")
        }
        _ => json(StatusCode::NOT_FOUND, "{\"error\":\"no such endpoint\"}\n"),
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
                    let s3 = s3.clone();
                    async move {
                        if is_reserved(request.uri().path()) {
                            return Ok::<_, HttpError>(reserved(&request));
                        }
                        s3.call(request.map(Body::from)).await
                    }
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

    #[test]
    fn the_reserved_prefix_is_not_a_bucket_path() {
        assert!(is_reserved("/_permafrost/health"));
        assert!(is_reserved("/_permafrost"));
        assert!(is_reserved("/_permafrost/admin/x"));
        assert!(!is_reserved("/_permafrostx"));
        assert!(!is_reserved("/bucket/_permafrost/health"));
    }
}
