//! CORS: which web pages of other origins may use a bucket from a browser, as S3 does it.
//!
//! - **Configuration**: PutBucketCors, GetBucketCors (`NoSuchCORSConfiguration` when there is none) and
//!   DeleteBucketCors. A configuration is validated as AWS does (1 to [`RULES_MAX`] rules; `AllowedMethod` only
//!   `GET`, `PUT`, `POST`, `DELETE`, `HEAD`; at most one `*` in an `AllowedOrigin` or an `AllowedHeader`; no
//!   `*` in an `ExposeHeader`) and stored as JSON next to the bucket policy (`permafrost-access`, the catalog's
//!   `bucket_access.cors`); it goes with the bucket.
//! - **Preflight**: `OPTIONS /bucket[/key]` with `Origin` and `Access-Control-Request-Method` (and
//!   `Access-Control-Request-Headers`) needs no signature. The first rule whose origin, method and every
//!   requested header match answers `200` with `Access-Control-Allow-Origin`, `-Allow-Methods` (the rule's),
//!   `-Allow-Headers` (the requested ones), `-Max-Age` and `-Expose-Headers`; no rule: `403 AccessForbidden`.
//! - **Actual requests** (simple or preflighted) with an `Origin` a rule allows for their method get
//!   `Access-Control-Allow-Origin`, `-Allow-Methods`, `-Expose-Headers`, `-Max-Age`, `-Allow-Credentials` and
//!   `Vary: Origin` on their answer, success or error; without a matching rule the answer carries no CORS
//!   header (and the browser withholds it from the page). CORS never refuses a request: signatures and rights
//!   decide as for any other client.
//!
//! The server's own paths (under [`crate::RESERVED_PREFIX`], the dashboard) are not subject to CORS.
//!
//! [`arrive`] and [`depart`] are the two steps `server::handle` takes for every S3 request; [`arrive`] also hands
//! HTML form uploads to `post_object`.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use permafrost_access::Access;
use s3s::dto::*;
use s3s::{Body, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use serde::{Deserialize, Serialize};

use crate::service::PermafrostS3;

/// Most rules in one configuration (AWS's limit).
pub(crate) const RULES_MAX: usize = 100;

/// The methods a rule may allow.
const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// AWS's answer to a preflight no rule allows.
const NOT_ALLOWED: &str = "CORSResponse: This CORS request is not allowed. This is usually because the \
     evaluation of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers \
     are not whitelisted by the resource's CORS spec.";

/// One CORS rule as stored (`bucket_access.cors` is a JSON array of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    pub(crate) origins: Vec<String>,
    pub(crate) methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) expose: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_age_seconds: Option<i32>,
}

fn invalid(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidRequest, message)
}

/// The rules of a PutBucketCors body, validated as AWS validates them.
pub(crate) fn rules_of(config: &CORSConfiguration) -> S3Result<Vec<Rule>> {
    if config.cors_rules.is_empty() {
        return Err(S3Error::with_message(
            S3ErrorCode::MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema: a \
             CORSConfiguration needs at least one CORSRule",
        ));
    }
    if config.cors_rules.len() > RULES_MAX {
        return Err(invalid(format!(
            "The number of CORS rules should not exceed allowed limit of {RULES_MAX} rules (this \
             configuration has {}).",
            config.cors_rules.len()
        )));
    }
    let mut rules = Vec::with_capacity(config.cors_rules.len());
    for rule in &config.cors_rules {
        if rule.allowed_origins.is_empty() || rule.allowed_methods.is_empty() {
            return Err(S3Error::with_message(
                S3ErrorCode::MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema: \
                 every CORSRule needs an AllowedOrigin and an AllowedMethod",
            ));
        }
        for method in &rule.allowed_methods {
            if !METHODS.contains(&method.as_str()) {
                return Err(invalid(format!(
                    "Found unsupported HTTP method in CORS config. Unsupported method is {method}"
                )));
            }
        }
        for origin in &rule.allowed_origins {
            if origin.matches('*').count() > 1 {
                return Err(invalid(format!(
                    "AllowedOrigin \"{origin}\" can not have more than one wildcard."
                )));
            }
        }
        let headers = rule.allowed_headers.clone().unwrap_or_default();
        for header in &headers {
            if header.matches('*').count() > 1 {
                return Err(invalid(format!(
                    "AllowedHeader \"{header}\" can not have more than one wildcard."
                )));
            }
        }
        let expose = rule.expose_headers.clone().unwrap_or_default();
        for header in &expose {
            if header.contains('*') {
                return Err(invalid(format!(
                    "ExposeHeader \"{header}\" contains wildcard. We currently do not support wildcard for \
                     ExposeHeader."
                )));
            }
        }
        if rule.max_age_seconds.is_some_and(|s| s < 0) {
            return Err(invalid("MaxAgeSeconds must not be negative.".to_string()));
        }
        rules.push(Rule {
            id: rule.id.clone(),
            origins: rule.allowed_origins.clone(),
            methods: rule.allowed_methods.clone(),
            headers,
            expose,
            max_age_seconds: rule.max_age_seconds,
        });
    }
    Ok(rules)
}

/// The stored rules of a bucket (`None`: no configuration; one this build cannot read allows nothing).
fn stored_rules(access: &Access, bucket: &str) -> Option<Vec<Rule>> {
    let text = access.bucket_cors(bucket)?;
    Some(serde_json::from_str(&text).unwrap_or_default())
}

/// Whether `value` matches `pattern`, which may hold one `*` (any run of characters, also none).
fn wildcard_match(pattern: &str, value: &str, ignore_case: bool) -> bool {
    let (pattern, value) = if ignore_case {
        (pattern.to_ascii_lowercase(), value.to_ascii_lowercase())
    } else {
        (pattern.to_string(), value.to_string())
    };
    match pattern.split_once('*') {
        None => pattern == value,
        Some((head, tail)) => {
            value.len() >= head.len() + tail.len()
                && value.starts_with(head)
                && value.ends_with(tail)
        }
    }
}

impl Rule {
    fn allows_origin(&self, origin: &str) -> bool {
        self.origins
            .iter()
            .any(|o| wildcard_match(o, origin, false))
    }

    fn allows_method(&self, method: &str) -> bool {
        self.methods.iter().any(|m| m == method)
    }

    fn allows_header(&self, header: &str) -> bool {
        self.headers.iter().any(|h| wildcard_match(h, header, true))
    }

    /// What `Access-Control-Allow-Origin` says: `*` for a rule open to every origin, else the origin.
    fn allow_origin<'a>(&self, origin: &'a str) -> &'a str {
        if self.origins.iter().any(|o| o == "*") {
            "*"
        } else {
            origin
        }
    }
}

/// The first rule that allows `origin` to use `method` with every one of `headers` (lower case).
pub(crate) fn matching<'r>(
    rules: &'r [Rule],
    origin: &str,
    method: &str,
    headers: &[String],
) -> Option<&'r Rule> {
    rules.iter().find(|r| {
        r.allows_origin(origin)
            && r.allows_method(method)
            && headers.iter().all(|h| r.allows_header(h))
    })
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

/// The CORS headers of an answer to `origin` that `rule` allowed.
fn allow_headers(rule: &Rule, origin: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let allow_origin = rule.allow_origin(origin);
    insert(&mut headers, "access-control-allow-origin", allow_origin);
    insert(
        &mut headers,
        "access-control-allow-methods",
        &rule.methods.join(", "),
    );
    if !rule.expose.is_empty() {
        insert(
            &mut headers,
            "access-control-expose-headers",
            &rule.expose.join(", "),
        );
    }
    if let Some(seconds) = rule.max_age_seconds {
        insert(&mut headers, "access-control-max-age", &seconds.to_string());
    }
    if allow_origin != "*" {
        insert(&mut headers, "access-control-allow-credentials", "true");
    }
    headers.append(http::header::VARY, HeaderValue::from_static("Origin"));
    headers
}

/// An S3 XML error answer.
pub(crate) fn error_response(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message></Error>",
        escape(code),
        escape(message)
    );
    let mut response = Response::new(Body::from(xml.clone()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(xml.len()));
    response
}

/// The answer to a preflight `OPTIONS` on `bucket`.
fn preflight(access: &Access, bucket: &str, request: &HeaderMap) -> Response<Body> {
    let text = |name: &str| request.get(name).and_then(|v| v.to_str().ok());
    let Some(origin) = text("origin") else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        );
    };
    let Some(method) = text("access-control-request-method") else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Invalid Access-Control-Request-Method: null",
        );
    };
    if !METHODS.contains(&method) {
        return error_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("Invalid Access-Control-Request-Method: {method}"),
        );
    }
    let Some(rules) = stored_rules(access, bucket) else {
        return error_response(
            StatusCode::FORBIDDEN,
            "AccessForbidden",
            "CORSResponse: CORS is not enabled for this bucket.",
        );
    };
    let requested: Vec<String> = text("access-control-request-headers")
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    let Some(rule) = matching(&rules, origin, method, &requested) else {
        return error_response(StatusCode::FORBIDDEN, "AccessForbidden", NOT_ALLOWED);
    };
    let mut response = Response::new(Body::empty());
    let mut headers = allow_headers(rule, origin);
    if !requested.is_empty() {
        insert(
            &mut headers,
            "access-control-allow-headers",
            &requested.join(", "),
        );
    }
    headers.append(
        http::header::VARY,
        HeaderValue::from_static("Access-Control-Request-Headers"),
    );
    headers.append(
        http::header::VARY,
        HeaderValue::from_static("Access-Control-Request-Method"),
    );
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(0));
    *response.headers_mut() = headers;
    response
}

/// What [`arrive`] learned of a request for [`depart`]: the CORS headers its answer gets, and how a refused
/// HTML form upload is explained (`post_object`).
#[derive(Default)]
pub(crate) struct Browser {
    cors: Option<HeaderMap>,
    form_upload: Option<crate::post_object::FormUpload>,
}

impl Browser {
    /// The access key an HTML form upload's policy names (its signature is in the body, not in a header).
    pub(crate) fn form_access_key(&self) -> Option<String> {
        self.form_upload
            .as_ref()
            .and_then(|u| u.access_key())
            .map(str::to_string)
    }
}

/// The bucket a path names (`None` for `/` and the server's own paths).
fn bucket_of(path: &str) -> Option<&str> {
    if path.starts_with(crate::RESERVED_PREFIX) {
        return None;
    }
    let bucket = path.trim_start_matches('/').split('/').next()?;
    (!bucket.is_empty()).then_some(bucket)
}

/// The first step of an S3 request: a preflight is answered here (`Err`: the answer); an HTML form upload
/// is looked at (`post_object::inspect`); the CORS headers of the answer are chosen by the `Origin`.
pub(crate) async fn arrive(
    access: &Arc<Access>,
    request: Request<Body>,
) -> Result<(Request<Body>, Browser), Box<Response<Body>>> {
    let path = request.uri().path().to_string();
    let Some(bucket) = bucket_of(&path) else {
        return Ok((request, Browser::default()));
    };
    if request.method() == Method::OPTIONS {
        // Its log line is `server::handle`'s (at debug, as `PreflightRequest`).
        return Err(Box::new(preflight(access, bucket, request.headers())));
    }
    let mut browser = Browser::default();
    if let Some(origin) = request
        .headers()
        .get(http::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(rules) = stored_rules(access, bucket) {
            if let Some(rule) = matching(&rules, origin, request.method().as_str(), &[]) {
                browser.cors = Some(allow_headers(rule, origin));
            }
        }
    }
    let (request, form_upload) = crate::post_object::inspect(access, &path, request).await;
    browser.form_upload = form_upload;
    Ok((request, browser))
}

/// The last step: a refused form upload's error is said as AWS says it, and the CORS headers are added.
pub(crate) fn depart(browser: Browser, response: &mut Response<Body>) {
    if let Some(upload) = browser.form_upload {
        upload.finish(response);
    }
    if let Some(cors) = browser.cors {
        // Inserted, not appended: an answer forwarded from another node of a cluster may carry them already.
        let headers = response.headers_mut();
        for (name, value) in &cors {
            if name != http::header::VARY {
                headers.insert(name.clone(), value.clone());
            } else if !headers.get_all(name).iter().any(|v| v == value) {
                headers.append(name.clone(), value.clone());
            }
        }
    }
}

/// PutBucketCors.
pub(crate) async fn put_bucket_cors(
    s3: &PermafrostS3,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let bucket = req.input.bucket.clone();
    s3.bucket_exists(&bucket).await?;
    let rules = rules_of(&req.input.cors_configuration)?;
    let text = serde_json::to_string(&rules)
        .map_err(|e| crate::error::internal(format!("cannot store the CORS rules: {e}")))?;
    let access = Arc::clone(&s3.access);
    crate::acl::change(move || access.set_bucket_cors(&bucket, Some(&text))).await?;
    Ok(S3Response::new(PutBucketCorsOutput::default()))
}

/// GetBucketCors.
pub(crate) async fn get_bucket_cors(
    s3: &PermafrostS3,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let bucket = &req.input.bucket;
    s3.bucket_exists(bucket).await?;
    let Some(rules) = stored_rules(&s3.access, bucket) else {
        return Err(S3Error::with_message(
            S3ErrorCode::NoSuchCORSConfiguration,
            format!("The CORS configuration does not exist: bucket {bucket} has none"),
        ));
    };
    let non_empty = |v: Vec<String>| (!v.is_empty()).then_some(v);
    let cors_rules = rules
        .into_iter()
        .map(|r| CORSRule {
            allowed_headers: non_empty(r.headers),
            allowed_methods: r.methods,
            allowed_origins: r.origins,
            expose_headers: non_empty(r.expose),
            id: r.id,
            max_age_seconds: r.max_age_seconds,
        })
        .collect();
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(cors_rules),
    }))
}

/// DeleteBucketCors (`204` also when there was none, as S3 answers).
pub(crate) async fn delete_bucket_cors(
    s3: &PermafrostS3,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let bucket = req.input.bucket.clone();
    s3.bucket_exists(&bucket).await?;
    if s3.access.bucket_cors(&bucket).is_some() {
        let access = Arc::clone(&s3.access);
        crate::acl::change(move || access.set_bucket_cors(&bucket, None)).await?;
    }
    Ok(S3Response::new(DeleteBucketCorsOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> Rule {
        Rule {
            id: None,
            origins: origins.iter().map(|s| s.to_string()).collect(),
            methods: methods.iter().map(|s| s.to_string()).collect(),
            headers: headers.iter().map(|s| s.to_string()).collect(),
            expose: vec!["ETag".into()],
            max_age_seconds: Some(600),
        }
    }

    fn config(rules: Vec<CORSRule>) -> CORSConfiguration {
        CORSConfiguration { cors_rules: rules }
    }

    fn dto(origins: &[&str], methods: &[&str]) -> CORSRule {
        CORSRule {
            allowed_headers: None,
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            expose_headers: None,
            id: None,
            max_age_seconds: None,
        }
    }

    #[test]
    fn an_origin_matches_with_at_most_one_wildcard() {
        assert!(wildcard_match(
            "https://*.example.org",
            "https://app.example.org",
            false
        ));
        assert!(!wildcard_match(
            "https://*.example.org",
            "https://example.org",
            false
        ));
        assert!(wildcard_match("*", "http://localhost:8080", false));
        assert!(wildcard_match("x-amz-*", "X-Amz-Date", true));
        assert!(!wildcard_match(
            "http://a.example",
            "http://b.example",
            false
        ));
    }

    #[test]
    fn the_first_rule_allowing_origin_method_and_every_header_answers() {
        let rules = vec![
            rule(&["http://a.example"], &["GET"], &[]),
            rule(
                &["http://a.example"],
                &["GET", "PUT"],
                &["x-amz-*", "content-type"],
            ),
        ];
        let headers = |h: &[&str]| h.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            matching(&rules, "http://a.example", "GET", &[]),
            Some(&rules[0])
        );
        assert_eq!(
            matching(&rules, "http://a.example", "GET", &headers(&["x-amz-date"])),
            Some(&rules[1])
        );
        assert_eq!(
            matching(&rules, "http://a.example", "PUT", &headers(&["x-other"])),
            None
        );
        assert_eq!(matching(&rules, "http://b.example", "GET", &[]), None);
        assert_eq!(matching(&rules, "http://a.example", "DELETE", &[]), None);
    }

    #[test]
    fn configurations_aws_refuses_are_refused() {
        let code = |c: CORSConfiguration| rules_of(&c).unwrap_err().code().clone();
        assert_eq!(code(config(vec![])), S3ErrorCode::MalformedXML);
        assert_eq!(
            code(config(vec![dto(&["*"], &["PATCH"])])),
            S3ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(config(vec![dto(&["http://*.*.example"], &["GET"])])),
            S3ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(config(vec![dto(&["*"], &["GET"]); RULES_MAX + 1])),
            S3ErrorCode::InvalidRequest
        );
        let rules = rules_of(&config(vec![dto(&["https://*.example"], &["GET", "HEAD"])])).unwrap();
        assert_eq!(rules[0].methods, vec!["GET", "HEAD"]);
    }

    #[test]
    fn cors_headers_are_never_doubled() {
        let rule = rule(&["http://a.example"], &["GET"], &[]);
        let mut response = Response::new(Body::empty());
        for _ in 0..2 {
            let browser = Browser {
                cors: Some(allow_headers(&rule, "http://a.example")),
                form_upload: None,
            };
            depart(browser, &mut response);
        }
        let headers = response.headers();
        assert_eq!(
            headers
                .get_all("access-control-allow-origin")
                .iter()
                .count(),
            1
        );
        assert_eq!(headers.get_all(http::header::VARY).iter().count(), 1);
    }

    #[test]
    fn a_preflight_without_a_rule_is_refused_and_one_with_gets_the_rule() {
        let r = rule(&["http://a.example"], &["GET"], &["*"]);
        let headers = allow_headers(&r, "http://a.example");
        assert_eq!(headers["access-control-allow-origin"], "http://a.example");
        assert_eq!(headers["access-control-expose-headers"], "ETag");
        assert_eq!(headers["access-control-max-age"], "600");
        let open = rule(&["*"], &["GET"], &[]);
        assert_eq!(
            allow_headers(&open, "http://x.example")["access-control-allow-origin"],
            "*"
        );
        assert!(bucket_of("/_permafrost/health").is_none());
        assert_eq!(bucket_of("/photos/a/b"), Some("photos"));
        assert_eq!(bucket_of("/"), None);
    }
}
