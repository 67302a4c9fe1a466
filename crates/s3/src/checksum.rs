//! Checksums clients send: `Content-MD5` and `x-amz-checksum-*` headers are verified by the store (they are
//! known before the body); a checksum sent as a trailer after an `aws-chunked` body (`x-amz-trailer`) is only
//! known at the end: the store computes it in the upload pipeline and compares it when the upload finishes.
//! The algorithms themselves are the store's (`permafrost_store::ChecksumAlgorithm`), in one place.

use http::HeaderMap;
use permafrost_store::{ChecksumAlgorithm, Checksums};
use s3s::S3Result;

use crate::error::invalid_argument;

/// The checksums of a request's headers, for the store to verify.
pub(crate) fn from_headers(
    content_md5: Option<String>,
    crc32: Option<String>,
    crc32c: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
    crc64nvme: Option<String>,
) -> Checksums {
    Checksums {
        content_md5,
        crc32,
        crc32c,
        sha1,
        sha256,
        crc64nvme,
    }
}

/// The trailing checksum announced in `x-amz-trailer`, if any (the store's algorithm: the upload pipeline computes
/// it with the other hashes). Unknown checksum trailers are `InvalidArgument`, so a checksum is never silently
/// skipped.
pub(crate) fn trailer_of(headers: &HeaderMap) -> S3Result<Option<ChecksumAlgorithm>> {
    let Some(value) = headers.get("x-amz-trailer") else {
        return Ok(None);
    };
    let name = value
        .to_str()
        .map_err(|_| invalid_argument("x-amz-trailer is not ASCII"))?
        .trim()
        .to_ascii_lowercase();
    match ChecksumAlgorithm::from_header(&name) {
        Some(a) if a != ChecksumAlgorithm::Md5 => Ok(Some(a)),
        _ => Err(invalid_argument(format!(
            "x-amz-trailer {name:?} is not supported ({} are)",
            ChecksumAlgorithm::AMZ
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_trailer_is_refused_not_ignored() {
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-trailer", "x-amz-checksum-md7".parse().unwrap());
        assert!(trailer_of(&headers).is_err());
        headers.insert("x-amz-trailer", "Content-MD5".parse().unwrap());
        assert!(trailer_of(&headers).is_err());
        headers.insert("x-amz-trailer", "X-Amz-Checksum-CRC32".parse().unwrap());
        assert_eq!(
            trailer_of(&headers).unwrap(),
            Some(ChecksumAlgorithm::Crc32)
        );
        headers.insert("x-amz-trailer", "x-amz-checksum-crc64nvme".parse().unwrap());
        assert_eq!(
            trailer_of(&headers).unwrap(),
            Some(ChecksumAlgorithm::Crc64nvme)
        );
    }
}
