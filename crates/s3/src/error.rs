//! The one place where store errors become S3 errors.
//!
//! Every [`StoreError`] variant names its S3 code (`StoreError::s3_code`); the HTTP status comes from the S3
//! error table (`s3s`): `NoSuchBucket`/`NoSuchKey`/`NoSuchUpload` 404, `BucketNotEmpty`/`BucketAlreadyOwnedByYou`
//! 409, `BadDigest`/`InvalidDigest`/`InvalidPart`/`InvalidPartOrder`/`EntityTooSmall`/`InvalidArgument` 400,
//! `InvalidRange` 416, `SlowDown` 503, `InternalError` 500.

use permafrost_store::StoreError;
use s3s::{S3Error, S3ErrorCode};

/// The S3 error for a store error, with the store's message.
pub(crate) fn s3_error(error: StoreError) -> S3Error {
    // The catalog's database gone (PostgreSQL stopped, connection lost): 503, the request may be retried.
    if let StoreError::Internal(message) = &error {
        if message.starts_with("catalog database ") {
            return crate::cluster::service_unavailable(message.clone());
        }
    }
    let code =
        S3ErrorCode::from_bytes(error.s3_code().as_bytes()).unwrap_or(S3ErrorCode::InternalError);
    if matches!(error, StoreError::Internal(_)) {
        tracing::error!("internal error: {error}");
    }
    S3Error::with_message(code, error.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_store_error_maps_to_its_s3_code_and_status() {
        let cases = [
            (StoreError::NoSuchBucket("b".into()), "NoSuchBucket", 404),
            (
                StoreError::NoSuchKey {
                    bucket: "b".into(),
                    key: "k".into(),
                },
                "NoSuchKey",
                404,
            ),
            (
                StoreError::BucketNotEmpty("b".into()),
                "BucketNotEmpty",
                409,
            ),
            (
                StoreError::BucketAlreadyOwnedByYou("b".into()),
                "BucketAlreadyOwnedByYou",
                409,
            ),
            (StoreError::BadDigest("x".into()), "BadDigest", 400),
            (StoreError::InvalidDigest("x".into()), "InvalidDigest", 400),
            (StoreError::SlowDown("x".into()), "SlowDown", 503),
            (StoreError::InvalidRange("x".into()), "InvalidRange", 416),
            (StoreError::InvalidPart("x".into()), "InvalidPart", 400),
            (
                StoreError::InvalidPartOrder("x".into()),
                "InvalidPartOrder",
                400,
            ),
            (StoreError::NoSuchUpload("x".into()), "NoSuchUpload", 404),
            (
                StoreError::EntityTooSmall("x".into()),
                "EntityTooSmall",
                400,
            ),
            (
                StoreError::InvalidArgument("x".into()),
                "InvalidArgument",
                400,
            ),
            (StoreError::Internal("x".into()), "InternalError", 500),
        ];
        for (error, code, status) in cases {
            let e = s3_error(error);
            assert_eq!(e.code().as_str(), code);
            assert_eq!(e.status_code().map(|s| s.as_u16()), Some(status), "{code}");
        }
    }
}
