//! The one place where store errors become S3 errors.
//!
//! [`s3_error`] maps every [`StoreError`] variant to its S3 code (`StoreError::s3_code`, the variant's name) and
//! the status of that code in the S3 error table (`s3s`): `NoSuchBucket`/`NoSuchKey`/`NoSuchUpload`/
//! `NoSuchVersion` 404, `BucketNotEmpty`/`BucketAlreadyOwnedByYou`/`InvalidBucketState`/
//! `RestoreAlreadyInProgress` 409, `AccessDenied` 403, `InvalidObjectState` 403, `MethodNotAllowed` 405,
//! `PreconditionFailed` 412, `InvalidRange`/`InvalidPartNumber` 416, `SlowDown` and `ServiceUnavailable` (the
//! catalog database gone) 503, `InternalError` 500, the rest 400 (`InvalidTag`, `InvalidDigest`, `BadDigest`, …).
//! The decision is by variant, never by message text.

use permafrost_store::StoreError;
use s3s::{S3Error, S3ErrorCode};

/// The S3 error for a store error, with the store's message. Internal errors are logged at error level.
pub(crate) fn s3_error(error: StoreError) -> S3Error {
    match &error {
        // The catalog's database gone (PostgreSQL stopped, connection lost): 503, the request may be retried.
        StoreError::Unavailable(message) => {
            return crate::cluster::service_unavailable(message.clone())
        }
        StoreError::Internal(_) | StoreError::NotPersisted(_) => {
            tracing::error!("internal error: {error}");
        }
        _ => {}
    }
    coded(error.s3_code(), error.to_string())
}

/// An S3 error with `code`: one of the S3 error table (`s3s`), or one `s3s` does not know with AWS's status
/// (`InvalidPartNumber` 416, the others `InvalidRetentionPeriod` and the like 400).
pub(crate) fn coded(code: &str, message: String) -> S3Error {
    let known = S3ErrorCode::from_bytes(code.as_bytes())
        .filter(|c| c.status_code().is_some())
        .unwrap_or_else(|| S3ErrorCode::Custom(code.to_owned().into()));
    let mut e = S3Error::with_message(known, message);
    if e.status_code().is_none() {
        e.set_status_code(match code {
            "InvalidPartNumber" => http::StatusCode::RANGE_NOT_SATISFIABLE,
            _ => http::StatusCode::BAD_REQUEST,
        });
    }
    e
}

/// An internal error (a failed task, a broken channel): logged, reported as `InternalError`.
pub(crate) fn internal(what: impl std::fmt::Display) -> S3Error {
    tracing::error!("internal error: {what}");
    S3Error::with_message(S3ErrorCode::InternalError, what.to_string())
}

/// A request the store would accept but S3 forbids, or that is malformed.
pub(crate) fn invalid_argument(message: impl Into<String>) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, message.into())
}

/// A request body that is not well-formed XML or does not follow the operation's schema (`MalformedXML`, 400).
pub(crate) fn malformed_xml(message: impl Into<String>) -> S3Error {
    S3Error::with_message(S3ErrorCode::MalformedXML, message.into())
}

/// A retention or lifecycle period that is not a positive whole number of days or years, or is out of range
/// (`InvalidRetentionPeriod`, 400; `s3s` does not know the code).
pub(crate) fn invalid_retention_period(message: impl Into<String>) -> S3Error {
    coded("InvalidRetentionPeriod", message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The S3 code and status every variant must map to. Exhaustive: a new variant does not compile until it
    /// has its line here (and an instance in [`one_of_each`]).
    fn expected(error: &StoreError) -> (&'static str, u16) {
        match error {
            StoreError::NoSuchBucket(_) => ("NoSuchBucket", 404),
            StoreError::NoSuchKey { .. } => ("NoSuchKey", 404),
            StoreError::BucketNotEmpty(_) => ("BucketNotEmpty", 409),
            StoreError::BucketAlreadyOwnedByYou(_) => ("BucketAlreadyOwnedByYou", 409),
            StoreError::BadDigest(_) => ("BadDigest", 400),
            StoreError::InvalidDigest(_) => ("InvalidDigest", 400),
            StoreError::SlowDown(_) => ("SlowDown", 503),
            StoreError::InvalidRange(_) => ("InvalidRange", 416),
            StoreError::InvalidPart(_) => ("InvalidPart", 400),
            StoreError::InvalidPartOrder(_) => ("InvalidPartOrder", 400),
            StoreError::NoSuchUpload(_) => ("NoSuchUpload", 404),
            StoreError::EntityTooSmall(_) => ("EntityTooSmall", 400),
            StoreError::InvalidArgument(_) => ("InvalidArgument", 400),
            StoreError::NoSuchVersion(_) => ("NoSuchVersion", 404),
            StoreError::AccessDenied(_) => ("AccessDenied", 403),
            StoreError::InvalidBucketState(_) => ("InvalidBucketState", 409),
            StoreError::InvalidRequest(_) => ("InvalidRequest", 400),
            StoreError::InvalidObjectState(_) => ("InvalidObjectState", 403),
            StoreError::RestoreAlreadyInProgress(_) => ("RestoreAlreadyInProgress", 409),
            StoreError::InvalidStorageClass(_) => ("InvalidStorageClass", 400),
            StoreError::MethodNotAllowed(_) => ("MethodNotAllowed", 405),
            StoreError::InvalidTag(_) => ("InvalidTag", 400),
            StoreError::InvalidPartNumber(_) => ("InvalidPartNumber", 416),
            StoreError::PreconditionFailed(_) => ("PreconditionFailed", 412),
            StoreError::NotPersisted(_) => ("InternalError", 500),
            StoreError::Unavailable(_) => ("ServiceUnavailable", 503),
            StoreError::Internal(_) => ("InternalError", 500),
        }
    }

    /// One error of every variant.
    fn one_of_each() -> Vec<StoreError> {
        let m = || "what went wrong".to_owned();
        vec![
            StoreError::NoSuchBucket(m()),
            StoreError::NoSuchKey {
                bucket: "b".into(),
                key: "k".into(),
            },
            StoreError::BucketNotEmpty(m()),
            StoreError::BucketAlreadyOwnedByYou(m()),
            StoreError::BadDigest(m()),
            StoreError::InvalidDigest(m()),
            StoreError::SlowDown(m()),
            StoreError::InvalidRange(m()),
            StoreError::InvalidPart(m()),
            StoreError::InvalidPartOrder(m()),
            StoreError::NoSuchUpload(m()),
            StoreError::EntityTooSmall(m()),
            StoreError::InvalidArgument(m()),
            StoreError::NoSuchVersion(m()),
            StoreError::AccessDenied(m()),
            StoreError::InvalidBucketState(m()),
            StoreError::InvalidRequest(m()),
            StoreError::InvalidObjectState(m()),
            StoreError::RestoreAlreadyInProgress(m()),
            StoreError::InvalidStorageClass(m()),
            StoreError::MethodNotAllowed(m()),
            StoreError::InvalidTag(m()),
            StoreError::InvalidPartNumber(m()),
            StoreError::PreconditionFailed(m()),
            StoreError::NotPersisted(m()),
            StoreError::Unavailable(m()),
            StoreError::Internal(m()),
        ]
    }

    #[test]
    fn every_store_error_maps_to_its_s3_code_and_status() {
        let errors = one_of_each();
        let mut seen = std::collections::HashSet::new();
        for error in errors {
            assert!(
                seen.insert(std::mem::discriminant(&error)),
                "{error:?} is listed twice"
            );
            let (code, status) = expected(&error);
            let message = error.to_string();
            let e = s3_error(error);
            assert_eq!(e.code().as_str(), code, "{message}");
            assert_eq!(e.status_code().map(|s| s.as_u16()), Some(status), "{code}");
            assert_eq!(e.message(), Some(message.as_str()), "{code}");
        }
    }

    #[test]
    fn codes_s3s_does_not_know_are_400_with_their_name() {
        let e = invalid_retention_period("Days must be a positive whole number");
        assert_eq!(e.code().as_str(), "InvalidRetentionPeriod");
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(400));
        assert_eq!(malformed_xml("x").code().as_str(), "MalformedXML");
    }
}
