//! Conditional requests: `If-Match`, `If-None-Match`, `If-Modified-Since` and `If-Unmodified-Since` on GetObject
//! and HeadObject, `x-amz-copy-source-if-*` on CopyObject and UploadPartCopy, and the conditional writes
//! `If-None-Match: *` and `If-Match` on PutObject and CompleteMultipartUpload.
//!
//! **Reads** follow RFC 7232 §6 as S3 applies it, in this order:
//! 1. `If-Match` present: false → `412 PreconditionFailed`. (True: `If-Unmodified-Since` is not evaluated, so
//!    If-Match true with If-Unmodified-Since false is a `200`.)
//! 2. Otherwise `If-Unmodified-Since` present: modified after the date → `412`.
//! 3. `If-None-Match` present: false (the ETag is listed, or `*`) → `304 Not Modified`. (True:
//!    `If-Modified-Since` is not evaluated; If-None-Match false with If-Modified-Since true is a `304`.)
//! 4. Otherwise `If-Modified-Since` present: not modified after the date → `304`.
//!
//! A `304` carries the version's `ETag` and `Last-Modified` and no body. ETags are compared by value, with or
//! without quotes (and a weak `W/` prefix); a header may list several (`"a", "b"`); `*` matches any version.
//! Dates are compared to the second, as `Last-Modified` is sent. The conditions are evaluated against the
//! version the request names (its current version without `versionId`) from the catalog before the read opens:
//! a refused GET wakes no disk.
//!
//! **Copies** evaluate the `x-amz-copy-source-if-*` headers against the source version in the same order; where
//! a GET would answer `304`, a copy fails with `412 PreconditionFailed` (as S3 does).
//!
//! **Writes** (PutObject, CompleteMultipartUpload, and CopyObject's target) turn the headers into a
//! [`WriteCondition`] that the catalog checks in the write's own transaction (`permafrost-catalog`): of two racing
//! `If-None-Match: *` PUTs exactly one succeeds (in a cluster also through different nodes: the directory checks
//! the condition again when the write is published, `crate::cluster`). `If-None-Match` takes only
//! `*`, and a request takes one of the two headers (`501 NotImplemented` otherwise, as S3 answers).

use std::sync::Arc;

use permafrost_store::{Store, StoreError, WriteCondition};
use s3s::dto::{
    CopyObjectInput, ETagCondition, GetObjectInput, HeadObjectInput, Timestamp, UploadPartCopyInput,
};
use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::bridge::blocking;
use crate::common::{etag, http_date, timestamp_ms};

/// The four conditional headers of a read (or the `x-amz-copy-source-if-*` four of a copy).
#[derive(Debug, Default, Clone)]
pub(crate) struct Preconditions {
    pub if_match: Option<ETagCondition>,
    pub if_none_match: Option<ETagCondition>,
    pub if_modified_since: Option<Timestamp>,
    pub if_unmodified_since: Option<Timestamp>,
}

/// What the preconditions decide for a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Answer as if no condition had been sent.
    Proceed,
    /// `304 Not Modified` (a copy: `412`).
    NotModified,
    /// `412 Precondition Failed`.
    Failed,
}

/// The ETags a condition lists, without quotes or `W/`, `*` kept as `*`. s3s parses `"a", "b"` as one quoted
/// value `a", "b`: it is split again here (an ETag holds no comma or quote).
fn listed(condition: &ETagCondition) -> Vec<String> {
    match condition {
        ETagCondition::Any => vec!["*".to_owned()],
        ETagCondition::ETag(tag) => tag
            .value()
            .split(',')
            .map(bare)
            .filter(|t| !t.is_empty())
            .collect(),
    }
}

/// An ETag as its value alone: no whitespace, `W/` or quotes.
fn bare(tag: &str) -> String {
    let tag = tag.trim();
    let tag = tag.strip_prefix("W/").unwrap_or(tag);
    tag.trim_matches('"').trim().to_owned()
}

/// Whether `condition` names the version's ETag `stored` (or is `*`).
fn names(condition: &ETagCondition, stored: &str) -> bool {
    let stored = bare(stored);
    listed(condition).iter().any(|t| t == "*" || *t == stored)
}

impl Preconditions {
    /// Whether any condition was sent (none: no catalog read is needed).
    pub fn any(&self) -> bool {
        self.if_match.is_some()
            || self.if_none_match.is_some()
            || self.if_modified_since.is_some()
            || self.if_unmodified_since.is_some()
    }

    /// The verdict for a version with ETag `stored_etag`, last modified at `last_modified_ms` (RFC 7232 §6 order,
    /// see the module doc).
    pub fn evaluate(&self, stored_etag: &str, last_modified_ms: u64) -> Verdict {
        let modified_s = last_modified_ms / 1000;
        let modified_after = |date: &Timestamp| modified_s > timestamp_ms(date) / 1000;
        match (&self.if_match, &self.if_unmodified_since) {
            (Some(m), _) if !names(m, stored_etag) => return Verdict::Failed,
            (None, Some(date)) if modified_after(date) => return Verdict::Failed,
            _ => {}
        }
        match (&self.if_none_match, &self.if_modified_since) {
            (Some(m), _) if names(m, stored_etag) => Verdict::NotModified,
            (None, Some(date)) if !modified_after(date) => Verdict::NotModified,
            _ => Verdict::Proceed,
        }
    }

    /// [`Preconditions::evaluate`] as a read's answer: `Ok(())` to proceed, else the `304` (with `ETag` and
    /// `Last-Modified`, no body) or `412` error.
    pub fn check_read(&self, stored_etag: &str, last_modified_ms: u64) -> S3Result<()> {
        match self.evaluate(stored_etag, last_modified_ms) {
            Verdict::Proceed => Ok(()),
            Verdict::Failed => Err(precondition_failed(
                "If-Match or If-Unmodified-Since",
                stored_etag,
                last_modified_ms,
            )),
            Verdict::NotModified => {
                let mut e = S3Error::with_message(S3ErrorCode::NotModified, "Not Modified");
                let mut headers = http::HeaderMap::new();
                if let Ok(v) = etag(stored_etag).to_http_header() {
                    headers.insert(http::header::ETAG, v);
                }
                if let Ok(v) = http::HeaderValue::from_str(&http_date(last_modified_ms)) {
                    headers.insert(http::header::LAST_MODIFIED, v);
                }
                e.set_headers(headers);
                Err(e)
            }
        }
    }

    /// [`Preconditions::evaluate`] for the source of a copy (in the store call that copies): `Ok(())`, or
    /// `PreconditionFailed` (412) where a read would be `304` or `412` (S3's rule for `x-amz-copy-source-if-*`).
    pub fn check_copy_source(
        &self,
        stored_etag: &str,
        last_modified_ms: u64,
    ) -> Result<(), StoreError> {
        match self.evaluate(stored_etag, last_modified_ms) {
            Verdict::Proceed => Ok(()),
            Verdict::Failed | Verdict::NotModified => Err(StoreError::PreconditionFailed(refusal(
                "x-amz-copy-source-if-*",
                stored_etag,
                last_modified_ms,
            ))),
        }
    }
}

/// The message of a `412`: which headers, and the version's ETag and date they were compared with.
fn refusal(headers: &str, stored_etag: &str, last_modified_ms: u64) -> String {
    format!(
        "At least one of the pre-conditions you specified did not hold ({headers}; the version has the ETag \
         {stored_etag}, last modified {})",
        http_date(last_modified_ms)
    )
}

fn precondition_failed(headers: &str, stored_etag: &str, last_modified_ms: u64) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::PreconditionFailed,
        refusal(headers, stored_etag, last_modified_ms),
    )
}

/// A read request with conditional headers: GetObject and HeadObject.
pub(crate) trait ConditionalRead {
    /// Bucket, key, version id and the four conditions.
    fn conditions(&self) -> (&str, &str, Option<&str>, Preconditions);
}

impl ConditionalRead for GetObjectInput {
    fn conditions(&self) -> (&str, &str, Option<&str>, Preconditions) {
        let p = Preconditions {
            if_match: self.if_match.clone(),
            if_none_match: self.if_none_match.clone(),
            if_modified_since: self.if_modified_since.clone(),
            if_unmodified_since: self.if_unmodified_since.clone(),
        };
        (&self.bucket, &self.key, self.version_id.as_deref(), p)
    }
}

impl ConditionalRead for HeadObjectInput {
    fn conditions(&self) -> (&str, &str, Option<&str>, Preconditions) {
        let p = Preconditions {
            if_match: self.if_match.clone(),
            if_none_match: self.if_none_match.clone(),
            if_modified_since: self.if_modified_since.clone(),
            if_unmodified_since: self.if_unmodified_since.clone(),
        };
        (&self.bucket, &self.key, self.version_id.as_deref(), p)
    }
}

impl Preconditions {
    /// The `x-amz-copy-source-if-*` headers of a CopyObject.
    pub fn of_copy(input: &CopyObjectInput) -> Preconditions {
        Preconditions {
            if_match: input.copy_source_if_match.clone(),
            if_none_match: input.copy_source_if_none_match.clone(),
            if_modified_since: input.copy_source_if_modified_since.clone(),
            if_unmodified_since: input.copy_source_if_unmodified_since.clone(),
        }
    }

    /// The `x-amz-copy-source-if-*` headers of an UploadPartCopy.
    pub fn of_part_copy(input: &UploadPartCopyInput) -> Preconditions {
        Preconditions {
            if_match: input.copy_source_if_match.clone(),
            if_none_match: input.copy_source_if_none_match.clone(),
            if_modified_since: input.copy_source_if_modified_since.clone(),
            if_unmodified_since: input.copy_source_if_unmodified_since.clone(),
        }
    }
}

/// GetObject and HeadObject: evaluate the request's conditions against the version it reads (catalog only)
/// before anything else; nothing to do (no catalog read) without conditions. A version that cannot be found is
/// left to the read itself to answer (`NoSuchKey`, a delete marker's headers, …). Returns the conditions, for
/// a GET to check them again on the version it opened ([`Preconditions::check_read`]: a write between the two
/// reads is caught before any byte is sent).
pub(crate) async fn check_get(
    store: &Arc<Store>,
    input: &impl ConditionalRead,
) -> S3Result<Preconditions> {
    let (bucket, key, version, conditions) = input.conditions();
    if !conditions.any() {
        return Ok(conditions);
    }
    let store = Arc::clone(store);
    let (bucket, key, version) = (
        bucket.to_owned(),
        key.to_owned(),
        version.map(str::to_owned),
    );
    let found =
        blocking(move || Ok(store.head_version(&bucket, &key, version.as_deref()).ok())).await?;
    if let Some(info) = found {
        conditions.check_read(&info.etag, info.last_modified_ms)?;
    }
    Ok(conditions)
}

/// The [`WriteCondition`] of a PutObject or CompleteMultipartUpload from its `If-Match` and `If-None-Match`.
pub(crate) fn write_condition(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<WriteCondition> {
    match (if_match, if_none_match) {
        (None, None) => Ok(WriteCondition::Always),
        (Some(_), Some(_)) => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "If-Match and If-None-Match cannot be combined on a write: send one of them",
        )),
        (None, Some(ETagCondition::Any)) => Ok(WriteCondition::Absent),
        (None, Some(other)) => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            format!(
                "If-None-Match on a write takes only * (create only if absent), not {}",
                listed(other).join(", ")
            ),
        )),
        (Some(m), None) => Ok(WriteCondition::EtagMatches(listed(m))),
    }
}

/// The [`WriteCondition`] of a CopyObject's target from its raw `If-Match` and `If-None-Match` headers (s3s 0.14
/// parses them for PutObject and CompleteMultipartUpload only).
pub(crate) fn write_condition_of_headers(headers: &http::HeaderMap) -> S3Result<WriteCondition> {
    let raw = |name: http::header::HeaderName| -> S3Result<Option<ETagCondition>> {
        let Some(value) = headers.get(&name) else {
            return Ok(None);
        };
        let text = value.to_str().map_err(|_| {
            S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                format!("{name}: the value is not ASCII text"),
            )
        })?;
        Ok(Some(match text.trim() {
            "*" => ETagCondition::Any,
            // Split into its ETags, quotes and `W/` removed, by `listed`.
            other => ETagCondition::ETag(s3s::dto::ETag::Strong(other.to_owned())),
        }))
    };
    write_condition(
        raw(http::header::IF_MATCH)?.as_ref(),
        raw(http::header::IF_NONE_MATCH)?.as_ref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::ETag;

    /// 2026-01-01T00:00:00Z in ms.
    const T: u64 = 1_767_225_600_000;

    fn tag(text: &str) -> ETagCondition {
        ETagCondition::parse_http_header(text.as_bytes()).unwrap()
    }

    fn at(ms: u64) -> Timestamp {
        crate::common::timestamp(ms)
    }

    fn given(
        if_match: Option<&str>,
        if_none_match: Option<&str>,
        modified_since: Option<u64>,
        unmodified_since: Option<u64>,
    ) -> Preconditions {
        Preconditions {
            if_match: if_match.map(tag),
            if_none_match: if_none_match.map(tag),
            if_modified_since: modified_since.map(at),
            if_unmodified_since: unmodified_since.map(at),
        }
    }

    const ETAG: &str = "\"0123abcd\"";

    #[test]
    fn each_header_alone() {
        use Verdict::*;
        let v = |p: Preconditions| p.evaluate(ETAG, T + 500);
        assert_eq!(v(given(None, None, None, None)), Proceed);
        assert_eq!(v(given(Some("\"0123abcd\""), None, None, None)), Proceed);
        assert_eq!(v(given(Some("0123abcd"), None, None, None)), Proceed);
        assert_eq!(v(given(Some("*"), None, None, None)), Proceed);
        assert_eq!(v(given(Some("\"other\""), None, None, None)), Failed);
        assert_eq!(
            v(given(None, Some("\"0123abcd\""), None, None)),
            NotModified
        );
        assert_eq!(v(given(None, Some("*"), None, None)), NotModified);
        assert_eq!(v(given(None, Some("other"), None, None)), Proceed);
        // Dates to the second: modified at T (+500 ms) is neither after T nor before it.
        assert_eq!(v(given(None, None, Some(T), None)), NotModified);
        assert_eq!(v(given(None, None, Some(T - 1000), None)), Proceed);
        assert_eq!(v(given(None, None, None, Some(T))), Proceed);
        assert_eq!(v(given(None, None, None, Some(T - 1000))), Failed);
    }

    #[test]
    fn s3_precedence_between_headers() {
        use Verdict::*;
        let v = |p: Preconditions| p.evaluate(ETAG, T);
        // If-Match true and If-Unmodified-Since false: 200.
        assert_eq!(v(given(Some(ETAG), None, None, Some(T - 1000))), Proceed);
        // If-None-Match false and If-Modified-Since true: 304.
        assert_eq!(
            v(given(None, Some(ETAG), Some(T - 1000), None)),
            NotModified
        );
        // If-None-Match true and If-Modified-Since false: 200 (If-Modified-Since is not evaluated).
        assert_eq!(v(given(None, Some("other"), Some(T), None)), Proceed);
        // 412 before 304.
        assert_eq!(v(given(Some("other"), Some(ETAG), None, None)), Failed);
        assert_eq!(v(given(None, Some(ETAG), None, Some(T - 1000))), Failed);
    }

    #[test]
    fn etag_lists_match_any_member() {
        use Verdict::*;
        let v = |p: Preconditions| p.evaluate(ETAG, T);
        assert_eq!(
            v(given(Some("\"x\", \"0123abcd\""), None, None, None)),
            Proceed
        );
        assert_eq!(v(given(Some("\"x\",\"y\""), None, None, None)), Failed);
        assert_eq!(
            v(given(None, Some("W/\"x\", W/\"0123abcd\""), None, None)),
            NotModified
        );
        assert_eq!(
            listed(&ETagCondition::ETag(ETag::Strong("a\", \"b".into()))),
            vec!["a", "b"]
        );
    }

    #[test]
    fn a_not_modified_answer_carries_etag_and_last_modified() {
        let e = given(None, Some("*"), None, None)
            .check_read(ETAG, T)
            .unwrap_err();
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(304));
        let headers = e.headers().unwrap();
        assert_eq!(headers[http::header::ETAG], "\"0123abcd\"");
        assert_eq!(
            headers[http::header::LAST_MODIFIED],
            "Thu, 01 Jan 2026 00:00:00 GMT"
        );
        let e = given(Some("x"), None, None, None)
            .check_read(ETAG, T)
            .unwrap_err();
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(412));
    }

    #[test]
    fn a_copy_source_that_a_read_finds_not_modified_fails_the_copy() {
        let e = given(None, Some(ETAG), None, None)
            .check_copy_source(ETAG, T)
            .unwrap_err();
        assert_eq!(e.s3_code(), "PreconditionFailed");
        assert!(given(Some(ETAG), None, None, Some(T - 1000))
            .check_copy_source(ETAG, T)
            .is_ok());
    }

    #[test]
    fn write_conditions_take_star_or_etags() {
        assert_eq!(write_condition(None, None).unwrap(), WriteCondition::Always);
        assert_eq!(
            write_condition(None, Some(&tag("*"))).unwrap(),
            WriteCondition::Absent
        );
        assert_eq!(
            write_condition(Some(&tag("\"ab\"")), None).unwrap(),
            WriteCondition::EtagMatches(vec!["ab".into()])
        );
        let mut headers = http::HeaderMap::new();
        assert_eq!(
            write_condition_of_headers(&headers).unwrap(),
            WriteCondition::Always
        );
        headers.insert(http::header::IF_MATCH, "\"ab\", cd".parse().unwrap());
        assert_eq!(
            write_condition_of_headers(&headers).unwrap(),
            WriteCondition::EtagMatches(vec!["ab".into(), "cd".into()])
        );
        headers.remove(http::header::IF_MATCH);
        headers.insert(http::header::IF_NONE_MATCH, "*".parse().unwrap());
        assert_eq!(
            write_condition_of_headers(&headers).unwrap(),
            WriteCondition::Absent
        );
        let e = write_condition(None, Some(&tag("\"ab\""))).unwrap_err();
        assert_eq!(e.code().as_str(), "NotImplemented");
        assert!(write_condition(Some(&tag("*")), Some(&tag("*"))).is_err());
    }
}
