//! The dashboard: plain HTML, CSS and JavaScript compiled into the binary (no build step), served at
//! [`crate::UI_PREFIX`]. The files hold no data and need no login; the page logs in with the root
//! credentials (`POST /_permafrost/api/v1/login`) and reads the API and the event stream with its session.

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
use s3s::Body;

use crate::router::ApiError;

/// `(file name, content type, content)`.
const FILES: [(&str, &str, &[u8]); 3] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("ui/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("ui/style.css"),
    ),
];

/// Answer a request below [`crate::UI_PREFIX`].
pub(crate) fn serve(method: &Method, path: &str) -> Response<Body> {
    let rest = &path[crate::UI_PREFIX.len()..];
    if rest.is_empty() {
        // `/_permafrost/ui` → `/_permafrost/ui/`, so that relative links resolve.
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
        r.headers_mut().insert(
            http::header::LOCATION,
            HeaderValue::from_static("/_permafrost/ui/"),
        );
        return r;
    }
    if *method != Method::GET && *method != Method::HEAD {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} {path}: the dashboard's files are read with GET"),
        )
        .into_response();
    }
    let name = match rest.trim_start_matches('/') {
        "" => "index.html",
        other => other,
    };
    let Some((_, content_type, content)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return ApiError::not_found(format!("no such dashboard file: {path}")).into_response();
    };
    let mut r = Response::new(if *method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(Bytes::from_static(content))
    });
    let headers = r.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}
