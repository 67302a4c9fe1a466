//! Who may use the admin API, the metrics and the dashboard's data: the root user, proven one of three ways.
//!
//! - **AWS Signature V4** (headers or presigned URL), exactly as for S3 requests: checked by s3s before the
//!   request reaches this crate ([`Caller::Signed`]). The `permafrost` CLI signs this way.
//! - **Bearer token**: `Authorization: Bearer TOKEN` with [`api_token`] of the root credentials (HMAC-SHA256
//!   of a fixed label under the secret key): stateless, for Prometheus and scripts; it changes when the
//!   password does.
//! - **Session cookie** for the dashboard: `POST /_permafrost/api/v1/login` with the root access key and secret
//!   key sets `permafrost_session` (random, `HttpOnly`, `SameSite=Strict`, kept in memory for
//!   [`SESSION_TTL`]; a restart logs everyone out). A state-changing request with the cookie must also carry
//!   the header [`CSRF_HEADER`] (a page of another site can send neither it nor the cookie).
//!
//! No credentials at all is `401` (with `WWW-Authenticate: Bearer`); wrong ones are `403`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use http::{HeaderMap, Method, StatusCode};
use parking_lot::Mutex;
use rand::RngCore;
use sha2::Sha256;

use crate::router::ApiError;

/// Name of the dashboard's session cookie.
pub const SESSION_COOKIE: &str = "permafrost_session";
/// A session lasts this long after its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Header a cookie-authenticated `POST`/`PUT`/`DELETE` must carry (any value).
pub const CSRF_HEADER: &str = "x-permafrost-csrf";
/// Sessions kept at most (the oldest is dropped first).
const SESSIONS_MAX: usize = 1024;

/// The bearer token of the admin API for the root credentials: `pf1-` and 64 hex digits.
pub fn api_token(access_key: &str, secret_key: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret_key.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(b"permafrost admin API token v1\n");
    mac.update(access_key.as_bytes());
    format!("pf1-{}", hex(&mac.finalize().into_bytes()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compare without an early exit (the time taken does not tell how much of a guess was right).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How a request proved it is the root user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// AWS Signature V4, checked by s3s.
    Signed,
    /// The bearer token.
    Token,
    /// A dashboard session cookie.
    Session,
}

/// The root credentials and the dashboard's sessions.
pub(crate) struct Auth {
    access_key: String,
    secret_key: String,
    token: String,
    sessions: Mutex<HashMap<String, Instant>>,
}

impl Auth {
    pub(crate) fn new(access_key: &str, secret_key: &str) -> Auth {
        Auth {
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
            token: api_token(access_key, secret_key),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Check a request that s3s did not sign-check: bearer token or session cookie.
    pub(crate) fn check(&self, method: &Method, headers: &HeaderMap) -> Result<Caller, ApiError> {
        if let Some(value) = headers.get(http::header::AUTHORIZATION) {
            let value = value.to_str().unwrap_or("");
            return match value.strip_prefix("Bearer ") {
                Some(token) if same(token.trim().as_bytes(), self.token.as_bytes()) => {
                    Ok(Caller::Token)
                }
                Some(_) => Err(forbidden("the bearer token is not the admin API token")),
                None => Err(forbidden(
                    "Authorization must be `Bearer TOKEN` or an AWS Signature V4",
                )),
            };
        }
        if let Some(session) = cookie(headers, SESSION_COOKIE) {
            if !self.session_valid(&session) {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "Unauthorized",
                    "the session expired or the server restarted: log in again",
                ));
            }
            let safe = matches!(*method, Method::GET | Method::HEAD);
            if !safe && !headers.contains_key(CSRF_HEADER) {
                return Err(forbidden(format!(
                    "a {method} with a session cookie needs the header {CSRF_HEADER}"
                )));
            }
            return Ok(Caller::Session);
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "credentials required: an AWS Signature V4 of the root user, `Authorization: Bearer TOKEN`, \
             or a dashboard session (POST /_permafrost/api/v1/login)",
        ))
    }

    /// Log in with the root credentials; returns the new session's id.
    pub(crate) fn login(&self, access_key: &str, secret_key: &str) -> Result<String, ApiError> {
        let ok = same(access_key.as_bytes(), self.access_key.as_bytes())
            & same(secret_key.as_bytes(), self.secret_key.as_bytes());
        if !ok {
            return Err(forbidden("wrong access key or secret key"));
        }
        let mut id = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut id);
        let id = hex(&id);
        let mut sessions = self.sessions.lock();
        let now = Instant::now();
        sessions.retain(|_, expires| *expires > now);
        if sessions.len() >= SESSIONS_MAX {
            if let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, e)| **e)
                .map(|(k, _)| k.clone())
            {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(id.clone(), now + SESSION_TTL);
        Ok(id)
    }

    /// End the session of a request's cookie (if any).
    pub(crate) fn logout(&self, headers: &HeaderMap) {
        if let Some(session) = cookie(headers, SESSION_COOKIE) {
            self.sessions.lock().remove(&session);
        }
    }

    fn session_valid(&self, id: &str) -> bool {
        self.sessions
            .lock()
            .get(id)
            .is_some_and(|expires| *expires > Instant::now())
    }
}

fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "Forbidden", message)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string())
}

/// Whether a request carries an AWS Signature V4 (header or presigned URL): s3s checks those.
pub fn is_sigv4(headers: &HeaderMap, query: Option<&str>) -> bool {
    let header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS4-HMAC-SHA256"));
    header || query.is_some_and(|q| q.contains("X-Amz-Signature="))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| {
                (
                    http::header::HeaderName::from_static(n),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn the_token_depends_on_both_credentials() {
        let t = api_token("root", "secret");
        assert!(t.starts_with("pf1-") && t.len() == 68);
        assert_eq!(t, api_token("root", "secret"));
        assert_ne!(t, api_token("root", "secret2"));
        assert_ne!(t, api_token("root2", "secret"));
    }

    #[test]
    fn no_credentials_is_401_and_wrong_ones_403() {
        let auth = Auth::new("root", "secret");
        let get = Method::GET;
        assert_eq!(auth.check(&get, &headers(&[])).unwrap_err().status, 401);
        let wrong = headers(&[("authorization", "Bearer pf1-00")]);
        assert_eq!(auth.check(&get, &wrong).unwrap_err().status, 403);
        let basic = headers(&[("authorization", "Basic cm9vdDpzZWNyZXQ=")]);
        assert_eq!(auth.check(&get, &basic).unwrap_err().status, 403);
        let right = format!("Bearer {}", api_token("root", "secret"));
        assert_eq!(
            auth.check(&get, &headers(&[("authorization", &right)])),
            Ok(Caller::Token)
        );
    }

    #[test]
    fn a_session_needs_the_right_login_and_the_csrf_header_to_change_things() {
        let auth = Auth::new("root", "secret");
        assert_eq!(auth.login("root", "nope").unwrap_err().status, 403);
        let id = auth.login("root", "secret").unwrap();
        let with_cookie = headers(&[("cookie", &format!("a=b; {SESSION_COOKIE}={id}"))]);
        assert_eq!(auth.check(&Method::GET, &with_cookie), Ok(Caller::Session));
        assert_eq!(
            auth.check(&Method::POST, &with_cookie).unwrap_err().status,
            403
        );
        let mut with_csrf = with_cookie.clone();
        with_csrf.insert(CSRF_HEADER, HeaderValue::from_static("1"));
        assert_eq!(auth.check(&Method::POST, &with_csrf), Ok(Caller::Session));
        auth.logout(&with_cookie);
        assert_eq!(
            auth.check(&Method::GET, &with_cookie).unwrap_err().status,
            401
        );
    }

    #[test]
    fn signatures_are_recognised_in_headers_and_queries() {
        let signed = headers(&[("authorization", "AWS4-HMAC-SHA256 Credential=x")]);
        assert!(is_sigv4(&signed, None));
        assert!(is_sigv4(&headers(&[]), Some("a=1&X-Amz-Signature=ff")));
        assert!(!is_sigv4(&headers(&[("authorization", "Bearer x")]), None));
    }
}
