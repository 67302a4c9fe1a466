//! POST Object: HTML form uploads (`multipart/form-data` to `POST /bucket`) with a signed V4 POST policy, the
//! way web pages send files straight to S3.
//!
//! **Who checks what.** s3s reads the form, checks the signature (the policy is the string to sign; its
//! `x-amz-date`, `x-amz-credential` and `x-amz-algorithm` conditions must equal the fields), the expiration,
//! every `eq`/`starts-with` condition (the `bucket` condition against the bucket of the URL), that every field
//! is named by a condition (except `x-amz-signature`, `file`, `policy`, `submit` and `x-ignore-*`), and
//! `content-length-range` (`EntityTooLarge`/`EntityTooSmall`); it holds the file in memory (at most
//! `content-length-range`'s maximum, and never more than [`POST_OBJECT_BYTES_MAX`]) and hands the upload over
//! as a PutObject: form fields become its headers (`Content-Type`, `x-amz-meta-*` as user metadata,
//! `x-amz-storage-class`, `x-amz-acl`, …). Forms signed with Signature V2 (`AWSAccessKeyId`, `signature`) are
//! checked by s3s too.
//! It answers `success_action_redirect` (or `redirect`) with `303` to that URL plus `bucket`, `key` and `etag`,
//! `success_action_status` `200`/`204` with an empty body and `201` with the `PostResponse` XML.
//!
//! This module adds what s3s leaves to the service, or does otherwise than AWS:
//! - **Forms signed long ago**: s3s refuses a V4 form whose `x-amz-date` is more than 15 minutes from the
//!   server's clock (`RequestTimeTooSkewed`, as for signed requests); AWS bounds a form only by its policy's
//!   expiration (a page may show its form for an hour). For such a form [`inspect`] checks the signature itself
//!   (the policy signed with the key derived from the signer's secret and the credential scope, compared in
//!   constant time), hands s3s the form without its `x-amz-signature` part, and `auth` decides the upload for
//!   that signer ([`VerifiedFormSigner`]); s3s still checks the expiration and every condition. A wrong
//!   signature is `403 SignatureDoesNotMatch`.
//! - **Refusals as AWS words them**: before s3s reads the form, [`inspect`] reads the form's fields (up to
//!   the file) and checks the policy's expiration, conditions and fields itself; a refusal is
//!   `403 AccessDenied` "Invalid according to Policy: Policy expired." / "…: Policy Condition failed:
//!   [\"starts-with\", \"$key\", \"uploads/\"]" / "…: Extra input fields: x-amz-meta-x". Whichever of s3s and
//!   this module refuses first, the answer says it in AWS's words (`Refusal`).
//! - **`acl`**: the form field AWS documents for the canned ACL (s3s reads only `x-amz-acl`) is the upload's
//!   canned ACL ([`canned_acl`]), decided and stored as PutObject's `x-amz-acl`.
//! - **`${filename}`** in the `key` field becomes the name of the uploaded file ([`final_key`]); conditions
//!   apply to the field as sent, rights and the object to the final key, and the answer names the final key.
//! - **Rights**: the upload is decided for its signer as a PutObject on the final key (`auth`'s `post_object`
//!   hook: grants, bucket policy by prefix, Block Public Access for a public `acl`): a valid policy signed by a
//!   key without `write` on the bucket uploads nothing.
//! - `Location` and `ETag` headers on every successful answer, and the `PostResponse`'s `Location` as a URL.

use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use s3s::dto::*;
use s3s::stream::ByteStream;
use s3s::{Body, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};

use permafrost_access::Access;

use crate::service::PermafrostS3;

/// Largest file a form upload may carry: s3s holds the file in memory while it checks the form, so this bounds
/// the memory of one upload (`EntityTooLarge` beyond it, as a policy's `content-length-range` maximum does).
/// Larger data goes through PUT or multipart uploads, which stream.
pub const POST_OBJECT_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// s3s's configuration with [`POST_OBJECT_BYTES_MAX`].
pub(crate) fn s3s_config() -> std::sync::Arc<s3s::config::StaticConfigProvider> {
    let mut config = s3s::config::S3Config::default();
    config.post_object_max_file_size = POST_OBJECT_BYTES_MAX;
    std::sync::Arc::new(s3s::config::StaticConfigProvider::new(std::sync::Arc::new(
        config,
    )))
}

/// Most bytes of a form read ahead of its file (s3s's limit on all fields together, and room for the
/// file's part headers). A form with more is left to s3s, which refuses it.
const FIELDS_BYTES_MAX: usize = 20 * 1024 * 1024 + 64 * 1024;

/// The response header by which [`post_object`] tells [`FormUpload::finish`] the key an upload was stored
/// under (form-urlencoded); removed before the answer leaves.
const FINAL_KEY_HEADER: &str = "x-permafrost-post-key";

/// The name of the form's file (`filename=` of its part), for `${filename}`.
#[derive(Debug, Clone)]
pub(crate) struct FormFileName(pub(crate) String);

/// The form's `acl` field (AWS's name for the canned ACL of a form upload; s3s reads only `x-amz-acl`).
#[derive(Debug, Clone)]
pub(crate) struct FormAcl(pub(crate) String);

/// The canned ACL of a form upload: its `x-amz-acl` field, else its `acl` field.
pub(crate) fn canned_acl(
    given: Option<&ObjectCannedACL>,
    extensions: &http::Extensions,
) -> Option<ObjectCannedACL> {
    given.cloned().or_else(|| {
        extensions
            .get::<FormAcl>()
            .map(|FormAcl(acl)| ObjectCannedACL::from(acl.clone()))
    })
}

/// A form upload this module refuses, with AWS's code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// `AccessDenied` (the policy) or `SignatureDoesNotMatch`; both `403`.
    pub(crate) code: S3ErrorCode,
    pub(crate) message: String,
}

impl Refusal {
    fn policy(what: impl std::fmt::Display) -> Refusal {
        Refusal {
            code: S3ErrorCode::AccessDenied,
            message: format!("Invalid according to Policy: {what}"),
        }
    }

    fn to_error(&self) -> S3Error {
        S3Error::with_message(self.code.clone(), self.message.clone())
    }

    /// Say a refusal of the policy as AWS does when s3s refused first (its `InvalidPolicyDocument` or
    /// `AccessDenied` for a condition, an expired policy or an extra field).
    fn explain(&self, response: &mut Response<Body>) {
        if !response.status().is_client_error() {
            return;
        }
        let refused_policy = response.body().bytes().is_some_and(|b| {
            let text = String::from_utf8_lossy(&b);
            text.contains("<Code>InvalidPolicyDocument</Code>")
                || text.contains("<Code>AccessDenied</Code>")
                || text.contains("<Code>RequestTimeTooSkewed</Code>")
        });
        if refused_policy {
            let answer = crate::cors::error_response(
                StatusCode::FORBIDDEN,
                self.code.as_str(),
                &self.message,
            );
            let (parts, body) = answer.into_parts();
            *response.status_mut() = parts.status;
            for name in [http::header::CONTENT_TYPE, http::header::CONTENT_LENGTH] {
                if let Some(v) = parts.headers.get(&name) {
                    response.headers_mut().insert(name, v.clone());
                }
            }
            *response.body_mut() = body;
        }
    }
}

/// The fields of a form up to its file, and the file's name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Form {
    /// `(name in lower case, value)`, in form order.
    pub(crate) fields: Vec<(String, String)>,
    /// Where each field's part is in the body: from its delimiter to the next one.
    pub(crate) spans: Vec<std::ops::Range<usize>>,
    file_name: Option<String>,
}

impl Form {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What reading a form's beginning found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Every field and the file's part headers.
    Complete(Form),
    /// More bytes needed.
    Incomplete,
    /// Not a form this module understands (s3s decides).
    Invalid,
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from > haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The `name` and `filename` of a part's `Content-Disposition: form-data; name="…"; filename="…"`.
fn disposition(headers: &str) -> Option<(String, Option<String>)> {
    let line = headers.lines().find(|l| {
        l.split(':')
            .next()
            .is_some_and(|n| n.trim().eq_ignore_ascii_case("content-disposition"))
    })?;
    let value = line.split_once(':')?.1;
    let mut name = None;
    let mut file_name = None;
    for param in value.split(';').map(str::trim) {
        let Some((k, v)) = param.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"').to_string();
        match k.trim().to_ascii_lowercase().as_str() {
            "name" => name = Some(v),
            "filename" => file_name = Some(v),
            _ => {}
        }
    }
    Some((name?, file_name))
}

/// Read the fields of a `multipart/form-data` body with `boundary` from its first bytes.
pub(crate) fn scan(bytes: &[u8], boundary: &str) -> Scan {
    let delimiter = format!("--{boundary}");
    let Some(mut at) = find(bytes, delimiter.as_bytes(), 0) else {
        return if bytes.len() > delimiter.len() + 2 {
            Scan::Invalid
        } else {
            Scan::Incomplete
        };
    };
    let mut form = Form::default();
    let next_part = format!("\r\n--{boundary}");
    loop {
        let headers_start = at + delimiter.len();
        if bytes.len() < headers_start + 2 {
            return Scan::Incomplete;
        }
        if &bytes[headers_start..headers_start + 2] == b"--" {
            return Scan::Complete(form); // the end, without a file: s3s refuses it
        }
        let Some(headers_end) = find(bytes, b"\r\n\r\n", headers_start) else {
            return Scan::Incomplete;
        };
        let Ok(headers) = std::str::from_utf8(&bytes[headers_start..headers_end]) else {
            return Scan::Invalid;
        };
        let Some((name, file_name)) = disposition(headers) else {
            return Scan::Invalid;
        };
        if name.eq_ignore_ascii_case("file") {
            form.file_name = file_name;
            return Scan::Complete(form);
        }
        let value_start = headers_end + 4;
        let Some(value_end) = find(bytes, next_part.as_bytes(), value_start) else {
            return Scan::Incomplete;
        };
        let Ok(value) = std::str::from_utf8(&bytes[value_start..value_end]) else {
            return Scan::Invalid;
        };
        form.fields
            .push((name.to_ascii_lowercase(), value.to_string()));
        form.spans.push(at..value_end + 2);
        at = value_end + 2;
    }
}

/// Fields a policy need not name (as s3s and AWS).
fn exempt(name: &str) -> bool {
    matches!(
        name,
        "x-amz-signature" | "signature" | "awsaccesskeyid" | "file" | "submit" | "policy"
    ) || name.starts_with("x-ignore-")
}

/// A condition as AWS prints it in a refusal: `["starts-with", "$key", "uploads/"]`.
fn condition_text(op: &str, field: &str, value: &str) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!("[{}, {}, {}]", quote(op), quote(field), quote(value))
}

/// Check a form's policy (expiration, `eq`/`starts-with` conditions, fields not in the policy) as AWS does.
/// `None` when it passes, or when there is no policy or it cannot be read (s3s refuses those).
pub(crate) fn check_policy(form: &Form, bucket: &str, now_ms: u64) -> Option<Refusal> {
    let encoded = form.field("policy")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let policy: serde_json::Value = serde_json::from_slice(&decoded).ok()?;
    let expiration = policy.get("expiration")?.as_str()?;
    let expires = Timestamp::parse(TimestampFormat::DateTime, expiration).ok()?;
    if crate::common::timestamp_ms(&expires) <= now_ms {
        return Some(Refusal::policy("Policy expired."));
    }
    let value_of = |field: &str| -> Option<&str> {
        if field == "bucket" {
            Some(bucket)
        } else {
            form.field(field)
        }
    };
    let mut named: Vec<String> = Vec::new();
    for condition in policy.get("conditions")?.as_array()? {
        let (op, raw_field, expected) = match condition {
            serde_json::Value::Object(map) if map.len() == 1 => {
                let (k, v) = map.iter().next()?;
                ("eq".to_string(), format!("${k}"), v.as_str()?.to_string())
            }
            serde_json::Value::Array(items) if items.len() == 3 => {
                let op = items[0].as_str()?.to_ascii_lowercase();
                if op == "content-length-range" {
                    continue; // the file's size: s3s checks it
                }
                (
                    op,
                    items[1].as_str()?.to_string(),
                    items[2].as_str()?.to_string(),
                )
            }
            _ => return None,
        };
        let field = raw_field
            .strip_prefix('$')
            .unwrap_or(&raw_field)
            .to_ascii_lowercase();
        let actual = value_of(&field).unwrap_or("");
        let holds = match op.as_str() {
            "eq" => actual == expected,
            "starts-with" => actual.starts_with(&expected),
            _ => return None,
        };
        if !holds {
            return Some(Refusal::policy(format!(
                "Policy Condition failed: {}",
                condition_text(&op, &raw_field, &expected)
            )));
        }
        named.push(field);
    }
    let extra: Vec<&str> = form
        .fields
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !exempt(n) && !named.iter().any(|f| f == n))
        .collect();
    if !extra.is_empty() {
        return Some(Refusal::policy(format!(
            "Extra input fields: {}",
            extra.join(", ")
        )));
    }
    None
}

/// How far the `x-amz-date` of a V4 form may be from the server's clock before s3s refuses it
/// (`RequestTimeTooSkewed`, its default for signed requests).
const SKEW_SECS_MAX: i64 = 900;

/// The signer of a V4 form whose signature this module checked itself (its `x-amz-date` is older than s3s
/// accepts); `auth` decides the upload for it.
#[derive(Debug, Clone)]
pub(crate) struct VerifiedFormSigner(pub(crate) String);

/// The current time in seconds since the epoch (a parameter, for tests).
#[derive(Clone, Copy)]
struct OffsetNow(i64);

impl OffsetNow {
    fn now() -> OffsetNow {
        OffsetNow((permafrost_catalog::now_ms() / 1000) as i64)
    }
}

/// What [`signed_long_ago`] found.
#[derive(Debug, PartialEq, Eq)]
enum Stale {
    /// Not a V4 form signed long ago: s3s checks it.
    No,
    /// Signed long ago, and its signature is right: by this access key.
    Verified(String),
    /// Signed long ago, and its signature is wrong.
    BadSignature,
}

/// Seconds since the epoch of an `x-amz-date` (`20260102T030405Z`).
fn amz_date_secs(text: &str) -> Option<i64> {
    if text.len() != 16 || !text.is_ascii() || &text[8..9] != "T" || !text.ends_with('Z') {
        return None;
    }
    let iso = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &text[0..4],
        &text[4..6],
        &text[6..8],
        &text[9..11],
        &text[11..13],
        &text[13..15]
    );
    let t = Timestamp::parse(TimestampFormat::DateTime, &iso).ok()?;
    Some((crate::common::timestamp_ms(&t) / 1000) as i64)
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::Mac as _;
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// AWS Signature V4 of a POST policy: the policy (base64, as sent) signed with the key derived from `secret`,
/// the credential scope's date, region and service.
fn policy_signature(policy: &str, secret: &str, date: &str, region: &str, service: &str) -> String {
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    hmac_sha256(&key, policy.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A V4 form whose `x-amz-date` is further from now than s3s accepts: AWS bounds a form by its policy's
/// expiration only (a page may show an upload form for an hour). Its signature is checked here, as s3s would
/// check it.
fn signed_long_ago(access: &Access, form: &Form, now: OffsetNow) -> Stale {
    let (Some(policy), Some(signature), Some(credential), Some(date)) = (
        form.field("policy"),
        form.field("x-amz-signature"),
        form.field("x-amz-credential"),
        form.field("x-amz-date"),
    ) else {
        return Stale::No;
    };
    if form.field("x-amz-algorithm") != Some("AWS4-HMAC-SHA256")
        || form.field("signature").is_some()
        || form
            .fields
            .iter()
            .filter(|(n, _)| n == "x-amz-signature")
            .count()
            != 1
    {
        return Stale::No;
    }
    let Some(signed_at) = amz_date_secs(date) else {
        return Stale::No;
    };
    if (now.0 - signed_at).abs() <= SKEW_SECS_MAX {
        return Stale::No;
    }
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key, scope_date, region, service, "aws4_request"] = scope.as_slice() else {
        return Stale::BadSignature;
    };
    if *scope_date != &date[..8] || !matches!(*service, "s3") {
        return Stale::BadSignature;
    }
    let Ok((_, secret)) = access.secret_of(access_key) else {
        return Stale::No; // s3s says why the key cannot sign
    };
    let expected = policy_signature(policy, &secret, scope_date, region, service);
    let matches = expected.len() == signature.len()
        && expected
            .bytes()
            .zip(signature.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if matches {
        Stale::Verified((*access_key).to_string())
    } else {
        Stale::BadSignature
    }
}

/// The form's first bytes without its `x-amz-signature` part.
pub(crate) fn without_signature(read: &Bytes, form: &Form) -> Bytes {
    let mut kept = BytesMut::with_capacity(read.len());
    let mut from = 0;
    for ((name, _), span) in form.fields.iter().zip(&form.spans) {
        if name == "x-amz-signature" {
            kept.extend_from_slice(&read[from..span.start]);
            from = span.end;
        }
    }
    kept.extend_from_slice(&read[from..]);
    kept.freeze()
}

/// A body that gives bytes already read, then the rest.
struct Replay {
    read: Option<Bytes>,
    rest: Body,
}

impl Stream for Replay {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(read) = self.read.take() {
            return Poll::Ready(Some(Ok(read)));
        }
        Pin::new(&mut self.rest).poll_next(cx)
    }
}

impl ByteStream for Replay {}

/// Whether a request's body is an HTML form (`multipart/form-data`): a `POST /bucket` with one is a POST Object.
pub(crate) fn is_form(headers: &http::HeaderMap) -> bool {
    boundary_of(headers).is_some()
}

/// The boundary of a `multipart/form-data` content type.
fn form_boundary(request: &Request<Body>) -> Option<String> {
    boundary_of(request.headers())
}

fn boundary_of(headers: &http::HeaderMap) -> Option<String> {
    let content_type = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    let mut params = content_type.split(';');
    if !params
        .next()?
        .trim()
        .eq_ignore_ascii_case("multipart/form-data")
    {
        return None;
    }
    params.find_map(|p| {
        let (name, value) = p.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_string())
    })
}

/// `application/x-www-form-urlencoded` encoding of `text` (as s3s encodes the redirect's parameters).
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A key as a URL path: every byte but unreserved characters and `/` percent-encoded.
fn path_encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'~' | b'-' | b'.' | b'_' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The inverse of [`form_encode`] (`None` for text that is not UTF-8 once decoded).
fn form_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Look at a form upload before s3s does (any other request passes untouched): read its fields (the bytes
/// are given to s3s again unchanged), note the file's name for `${filename}` and check the policy as AWS
/// words its refusals. A refusal is also put in the request's extensions: the upload stores nothing.
pub(crate) async fn inspect(
    access: &Access,
    path: &str,
    request: Request<Body>,
) -> (Request<Body>, Option<FormUpload>) {
    let bucket = path.trim_start_matches('/').trim_end_matches('/');
    if request.method() != Method::POST || bucket.is_empty() || bucket.contains('/') {
        return (request, None);
    }
    let Some(boundary) = form_boundary(&request) else {
        return (request, None);
    };
    let mut upload = FormUpload {
        bucket: bucket.to_string(),
        host: request
            .headers()
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        refusal: None,
        access_key: None,
    };
    let (mut parts, mut body) = request.into_parts();
    let mut read = BytesMut::new();
    let form = loop {
        match scan(&read, &boundary) {
            Scan::Complete(form) => break Some(form),
            Scan::Invalid => break None,
            Scan::Incomplete if read.len() > FIELDS_BYTES_MAX => break None,
            Scan::Incomplete => {}
        }
        match body.next().await {
            Some(Ok(chunk)) => read.extend_from_slice(&chunk),
            // The body ended or failed: s3s finds the same and refuses.
            _ => break None,
        }
    };
    // s3s parses the file part itself and holds the whole file in memory while it checks the policy: hand it
    // the body as one piece (up to the size limit; s3s refuses a larger one) rather than in the network's
    // pieces, so that its parser never meets a delimiter split across two of them (a form upload from
    // Chromium was once refused with `failed to read file stream` on a loaded machine).
    if form.is_some() {
        let whole_max = POST_OBJECT_BYTES_MAX as usize + FIELDS_BYTES_MAX;
        while read.len() <= whole_max {
            match body.next().await {
                Some(Ok(chunk)) => read.extend_from_slice(&chunk),
                // Ended, or failed: s3s meets the same end and answers it.
                _ => break,
            }
        }
    }
    let mut read = read.freeze();
    if let Some(form) = &form {
        match signed_long_ago(access, form, OffsetNow::now()) {
            Stale::No => {}
            Stale::Verified(access_key) => {
                // s3s would refuse it (`RequestTimeTooSkewed`): give it the form without the signature, which
                // was checked here, and the signer with it (`auth`).
                let kept = without_signature(&read, form);
                if let Some(length) = parts.headers.get_mut(http::header::CONTENT_LENGTH) {
                    let old = length.to_str().ok().and_then(|v| v.parse::<usize>().ok());
                    if let Some(old) = old {
                        *length = HeaderValue::from(old.saturating_sub(read.len() - kept.len()));
                    }
                }
                read = kept;
                parts.extensions.insert(VerifiedFormSigner(access_key));
            }
            Stale::BadSignature => {
                upload.refusal = Some(Refusal {
                    code: S3ErrorCode::SignatureDoesNotMatch,
                    message:
                        "The request signature we calculated does not match the signature you \
                              provided. Check your key and signing method."
                            .to_string(),
                });
            }
        }
    }
    let replay = Replay {
        read: Some(read),
        rest: body,
    };
    let body = Body::from(Box::pin(replay) as s3s::stream::DynByteStream);
    let Some(form) = form else {
        return (Request::from_parts(parts, body), Some(upload));
    };
    upload.access_key = form
        .field("x-amz-credential")
        .and_then(|c| c.split('/').next())
        .or_else(|| form.field("awsaccesskeyid")) // a form signed with Signature V2
        .map(str::to_string);
    if let Some(name) = &form.file_name {
        parts.extensions.insert(FormFileName(name.clone()));
    }
    if let Some(acl) = form.field("acl") {
        parts.extensions.insert(FormAcl(acl.to_string()));
    }
    if upload.refusal.is_none() {
        upload.refusal = check_policy(&form, bucket, permafrost_catalog::now_ms());
    }
    if let Some(refusal) = &upload.refusal {
        parts.extensions.insert(refusal.clone());
    }
    (Request::from_parts(parts, body), Some(upload))
}

/// A form upload [`inspect`] saw, for its answer ([`FormUpload::finish`]).
pub(crate) struct FormUpload {
    bucket: String,
    /// The `Host` the client used (the `Location` of the answer).
    host: Option<String>,
    refusal: Option<Refusal>,
    /// The key id of the form's `x-amz-credential` (who signed the policy, for the request's log line).
    access_key: Option<String>,
}

impl FormUpload {
    /// The access key the form's policy says it was signed with (s3s checks that it was).
    pub(crate) fn access_key(&self) -> Option<&str> {
        self.access_key.as_deref()
    }

    /// The answer names the final key; a refusal of the policy is said as AWS says it.
    pub(crate) fn finish(self, response: &mut Response<Body>) {
        finish(&self.bucket, self.host.as_deref(), response);
        if let Some(refusal) = &self.refusal {
            refusal.explain(response);
        }
    }
}

/// The key an upload is stored under: the `key` field with `${filename}` replaced by the file's name.
pub(crate) fn final_key(key: &str, extensions: &http::Extensions) -> S3Result<String> {
    if !key.contains("${filename}") {
        return Ok(key.to_string());
    }
    match extensions.get::<FormFileName>() {
        Some(FormFileName(name)) if !name.is_empty() => Ok(key.replace("${filename}", name)),
        _ => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "the key field names ${filename}, and the form's file part has no filename",
        )),
    }
}

/// POST Object, after s3s checked the signature and the policy and `auth` the signer's right to write the
/// final key: stored as a PutObject.
pub(crate) async fn post_object(
    s3: &PermafrostS3,
    mut req: S3Request<PostObjectInput>,
) -> S3Result<S3Response<PostObjectOutput>> {
    if let Some(refusal) = req.extensions.get::<Refusal>() {
        return Err(refusal.to_error());
    }
    let key = final_key(&req.input.key, &req.extensions)?;
    if key.is_empty() {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "the form's key field is empty: an upload needs a key",
        ));
    }
    req.input.key = key.clone();
    req.input.acl = canned_acl(req.input.acl.as_ref(), &req.extensions);
    let answer = s3.put_object(req.map_input(post_into_put)).await?;
    let mut answer = answer.map_output(put_into_post);
    if let Ok(value) = HeaderValue::from_str(&form_encode(&key)) {
        answer.headers.insert(FINAL_KEY_HEADER, value);
    }
    if let Some(etag) = &answer.output.e_tag {
        if let Ok(value) = HeaderValue::from_str(&format!("\"{}\"", etag.value())) {
            answer.headers.insert(http::header::ETAG, value);
        }
    }
    Ok(answer)
}

/// The PutObject a form upload is (s3s's own conversion is private to it).
fn post_into_put(x: PostObjectInput) -> PutObjectInput {
    PutObjectInput {
        acl: x.acl,
        body: x.body,
        bucket: x.bucket,
        bucket_key_enabled: x.bucket_key_enabled,
        cache_control: x.cache_control,
        checksum_algorithm: x.checksum_algorithm,
        checksum_crc32: x.checksum_crc32,
        checksum_crc32c: x.checksum_crc32c,
        checksum_crc64nvme: x.checksum_crc64nvme,
        checksum_sha1: x.checksum_sha1,
        checksum_sha256: x.checksum_sha256,
        content_disposition: x.content_disposition,
        content_encoding: x.content_encoding,
        content_language: x.content_language,
        content_length: x.content_length,
        content_md5: x.content_md5,
        content_type: x.content_type,
        expected_bucket_owner: x.expected_bucket_owner,
        expires: x.expires,
        grant_full_control: x.grant_full_control,
        grant_read: x.grant_read,
        grant_read_acp: x.grant_read_acp,
        grant_write_acp: x.grant_write_acp,
        if_match: x.if_match,
        if_none_match: x.if_none_match,
        key: x.key,
        metadata: x.metadata,
        object_lock_legal_hold_status: x.object_lock_legal_hold_status,
        object_lock_mode: x.object_lock_mode,
        object_lock_retain_until_date: x.object_lock_retain_until_date,
        request_payer: x.request_payer,
        sse_customer_algorithm: x.sse_customer_algorithm,
        sse_customer_key: x.sse_customer_key,
        sse_customer_key_md5: x.sse_customer_key_md5,
        ssekms_encryption_context: x.ssekms_encryption_context,
        ssekms_key_id: x.ssekms_key_id,
        server_side_encryption: x.server_side_encryption,
        storage_class: x.storage_class,
        tagging: x.tagging,
        website_redirect_location: x.website_redirect_location,
        write_offset_bytes: x.write_offset_bytes,
    }
}

/// The answer of a PutObject as a POST Object's.
fn put_into_post(x: PutObjectOutput) -> PostObjectOutput {
    PostObjectOutput {
        bucket_key_enabled: x.bucket_key_enabled,
        checksum_crc32: x.checksum_crc32,
        checksum_crc32c: x.checksum_crc32c,
        checksum_crc64nvme: x.checksum_crc64nvme,
        checksum_sha1: x.checksum_sha1,
        checksum_sha256: x.checksum_sha256,
        checksum_type: x.checksum_type,
        e_tag: x.e_tag,
        expiration: x.expiration,
        request_charged: x.request_charged,
        sse_customer_algorithm: x.sse_customer_algorithm,
        sse_customer_key_md5: x.sse_customer_key_md5,
        ssekms_encryption_context: x.ssekms_encryption_context,
        ssekms_key_id: x.ssekms_key_id,
        server_side_encryption: x.server_side_encryption,
        size: x.size,
        version_id: x.version_id,
    }
}

/// The answer to a stored form upload names the final key (s3s wrote the `key` field as sent): the
/// `PostResponse` of a `201`, the `key` of a `303`'s URL, and `Location` on `200`/`201`/`204`.
fn finish(bucket: &str, host: Option<&str>, response: &mut Response<Body>) {
    let Some(encoded) = response.headers_mut().remove(FINAL_KEY_HEADER) else {
        return;
    };
    let Some(key) = encoded.to_str().ok().and_then(form_decode) else {
        return;
    };
    let etag = response
        .headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let key_path = path_encode(&key);
    let location = match host {
        Some(host) => format!("http://{host}/{bucket}/{key_path}"),
        None => format!("/{bucket}/{key_path}"),
    };
    match response.status() {
        StatusCode::SEE_OTHER => {
            // s3s appended `bucket`, `key` (as sent) and `etag` to the redirect URL: the last `key` is its.
            let Some(target) = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
            else {
                return;
            };
            let Some((base, query)) = target.split_once('?') else {
                return;
            };
            let mut pairs: Vec<String> = query.split('&').map(str::to_string).collect();
            if let Some(pair) = pairs.iter_mut().rev().find(|p| p.starts_with("key=")) {
                *pair = format!("key={}", form_encode(&key));
            }
            let url = format!("{base}?{}", pairs.join("&"));
            if let Ok(value) = HeaderValue::from_str(&url) {
                response.headers_mut().insert(http::header::LOCATION, value);
            }
        }
        status if status.is_success() => {
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(http::header::LOCATION, value);
            }
            if status == StatusCode::CREATED {
                let escape = |s: &str| {
                    s.replace('&', "&amp;")
                        .replace('<', "&lt;")
                        .replace('>', "&gt;")
                };
                let xml = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<PostResponse><Location>{}</Location>\
                     <Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></PostResponse>",
                    escape(&location),
                    escape(bucket),
                    escape(&key),
                    escape(&etag)
                );
                response
                    .headers_mut()
                    .insert(http::header::CONTENT_LENGTH, HeaderValue::from(xml.len()));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/xml"),
                );
                *response.body_mut() = Body::from(xml);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDARY: &str = "xYzZY";

    fn form(fields: &[(&str, &str)], file: &str) -> Vec<u8> {
        let mut body = String::new();
        for (n, v) in fields {
            body.push_str(&format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{n}\"\r\n\r\n{v}\r\n"
            ));
        }
        body.push_str(&format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file}\"\r\n\
             Content-Type: text/plain\r\n\r\nhello\r\n--{BOUNDARY}--\r\n"
        ));
        body.into_bytes()
    }

    fn policy(conditions: serde_json::Value) -> String {
        let doc =
            serde_json::json!({"expiration": "2099-01-01T00:00:00.000Z", "conditions": conditions});
        base64::engine::general_purpose::STANDARD.encode(doc.to_string())
    }

    #[test]
    fn the_fields_and_the_file_name_are_read_from_the_first_bytes() {
        let body = form(&[("key", "up/${filename}"), ("X-Amz-Meta-A", "1")], "a.txt");
        match scan(&body, BOUNDARY) {
            Scan::Complete(f) => {
                assert_eq!(f.field("key"), Some("up/${filename}"));
                assert_eq!(f.field("x-amz-meta-a"), Some("1"));
                assert_eq!(f.file_name.as_deref(), Some("a.txt"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(scan(&body[..30], BOUNDARY), Scan::Incomplete);
        assert_eq!(scan(&body[..80], BOUNDARY), Scan::Incomplete);
    }

    #[test]
    fn each_policy_refusal_is_worded_as_aws_words_it() {
        let check = |fields: Vec<(String, String)>| {
            check_policy(
                &Form {
                    fields,
                    spans: Vec::new(),
                    file_name: None,
                },
                "b",
                permafrost_catalog::now_ms(),
            )
            .map(|r| r.message)
        };
        let p = policy(serde_json::json!([
            {"bucket": "b"},
            ["starts-with", "$key", "up/"],
            ["content-length-range", 1, 10]
        ]));
        let fields = |key: &str, extra: Option<(&str, &str)>| {
            let mut f = vec![
                ("policy".to_string(), p.clone()),
                ("key".to_string(), key.to_string()),
            ];
            if let Some((n, v)) = extra {
                f.push((n.to_string(), v.to_string()));
            }
            f
        };
        assert_eq!(check(fields("up/a", None)), None);
        assert_eq!(
            check(fields("down/a", None)).as_deref(),
            Some("Invalid according to Policy: Policy Condition failed: [\"starts-with\", \"$key\", \"up/\"]")
        );
        assert_eq!(
            check(fields("up/a", Some(("x-amz-meta-x", "1")))).as_deref(),
            Some("Invalid according to Policy: Extra input fields: x-amz-meta-x")
        );
        assert_eq!(check(fields("up/a", Some(("x-ignore-me", "1")))), None);
        let expired = serde_json::json!({"expiration": "2001-01-01T00:00:00Z", "conditions": []});
        let expired = base64::engine::general_purpose::STANDARD.encode(expired.to_string());
        assert_eq!(
            check(vec![("policy".into(), expired)]).as_deref(),
            Some("Invalid according to Policy: Policy expired.")
        );
    }

    #[test]
    fn a_policy_is_signed_as_aws_signs_a_string() {
        // AWS's GET Object example (Signature V4 documentation): its string to sign and signature.
        let string_to_sign =
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
                              7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972";
        assert_eq!(
            policy_signature(
                string_to_sign,
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "20130524",
                "us-east-1",
                "s3"
            ),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        assert_eq!(amz_date_secs("20130524T000000Z"), Some(1_369_353_600));
        assert_eq!(amz_date_secs("2013-05-24"), None);
    }

    #[test]
    fn the_signature_part_is_cut_out_of_the_form() {
        let body = form(
            &[("key", "a"), ("x-amz-signature", "abc"), ("policy", "p")],
            "f",
        );
        let Scan::Complete(f) = scan(&body, BOUNDARY) else {
            panic!("the form is complete");
        };
        let kept = without_signature(&Bytes::from(body.clone()), &f);
        let Scan::Complete(k) = scan(&kept, BOUNDARY) else {
            panic!("still a form");
        };
        assert_eq!(k.field("x-amz-signature"), None);
        assert_eq!((k.field("key"), k.field("policy")), (Some("a"), Some("p")));
        assert_eq!(k.file_name.as_deref(), Some("f"));
        assert!(kept.ends_with(format!("hello\r\n--{BOUNDARY}--\r\n").as_bytes()));
    }

    #[test]
    fn a_key_survives_form_encoding() {
        for key in ["up/scan 1.tif", "ü/&=%+", ""] {
            assert_eq!(form_decode(&form_encode(key)).as_deref(), Some(key));
        }
        assert_eq!(form_decode("%4"), None);
        assert_eq!(path_encode("up/scan 1+ü.tif"), "up/scan%201%2B%C3%BC.tif");
    }

    #[test]
    fn filename_in_the_key_becomes_the_file_name() {
        let mut ext = http::Extensions::new();
        assert_eq!(final_key("a/b", &ext).unwrap(), "a/b");
        assert!(final_key("up/${filename}", &ext).is_err());
        ext.insert(FormFileName("scan.tif".into()));
        assert_eq!(final_key("up/${filename}", &ext).unwrap(), "up/scan.tif");
    }
}
