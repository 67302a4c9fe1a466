//! Checksums clients send: `Content-MD5` and `x-amz-checksum-*` headers are verified by the store (they are
//! known before the body); a checksum sent as a trailer after an `aws-chunked` body (`x-amz-trailer`) is only
//! known at the end, so it is computed here while the body streams and compared before the upload is finished.

use base64::Engine as _;
use http::HeaderMap;
use permafrost_store::Checksums;
use s3s::S3Result;
use sha1::Digest as _;

use crate::error::invalid_argument;

/// The checksums of a request's headers, for the store to verify.
pub(crate) fn from_headers(
    content_md5: Option<String>,
    crc32: Option<String>,
    crc32c: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
) -> Checksums {
    Checksums {
        content_md5,
        crc32,
        crc32c,
        sha1,
        sha256,
    }
}

/// A checksum algorithm a client announced for the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TrailerChecksum {
    Crc32,
    Crc32c,
    Sha1,
    Sha256,
    /// CRC-64/NVME, what current AWS SDKs send by default.
    Crc64nvme,
}

impl TrailerChecksum {
    /// The trailer announced in `x-amz-trailer`, if any. Unknown checksum trailers are `InvalidArgument`, so a
    /// checksum is never silently skipped.
    pub(crate) fn from_request(headers: &HeaderMap) -> S3Result<Option<TrailerChecksum>> {
        let Some(value) = headers.get("x-amz-trailer") else {
            return Ok(None);
        };
        let name = value
            .to_str()
            .map_err(|_| invalid_argument("x-amz-trailer is not ASCII"))?
            .trim()
            .to_ascii_lowercase();
        match name.as_str() {
            "x-amz-checksum-crc32" => Ok(Some(TrailerChecksum::Crc32)),
            "x-amz-checksum-crc32c" => Ok(Some(TrailerChecksum::Crc32c)),
            "x-amz-checksum-sha1" => Ok(Some(TrailerChecksum::Sha1)),
            "x-amz-checksum-sha256" => Ok(Some(TrailerChecksum::Sha256)),
            "x-amz-checksum-crc64nvme" => Ok(Some(TrailerChecksum::Crc64nvme)),
            other => Err(invalid_argument(format!(
                "x-amz-trailer {other:?} is not supported (crc32, crc32c, crc64nvme, sha1 and sha256 are)"
            ))),
        }
    }

    pub(crate) fn header_name(self) -> &'static str {
        match self {
            TrailerChecksum::Crc32 => "x-amz-checksum-crc32",
            TrailerChecksum::Crc32c => "x-amz-checksum-crc32c",
            TrailerChecksum::Sha1 => "x-amz-checksum-sha1",
            TrailerChecksum::Sha256 => "x-amz-checksum-sha256",
            TrailerChecksum::Crc64nvme => "x-amz-checksum-crc64nvme",
        }
    }

    pub(crate) fn hasher(self) -> TrailerHasher {
        match self {
            TrailerChecksum::Crc32 => TrailerHasher::Crc32(crc32fast::Hasher::new()),
            TrailerChecksum::Crc32c => TrailerHasher::Crc32c(0),
            TrailerChecksum::Sha1 => TrailerHasher::Sha1(sha1::Sha1::new()),
            TrailerChecksum::Sha256 => TrailerHasher::Sha256(sha2::Sha256::new()),
            TrailerChecksum::Crc64nvme => {
                TrailerHasher::Crc64nvme(<s3s::crypto::Crc64Nvme as s3s::crypto::Checksum>::new())
            }
        }
    }
}

/// Running checksum of a body.
pub(crate) enum TrailerHasher {
    Crc32(crc32fast::Hasher),
    Crc32c(u32),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
    Crc64nvme(s3s::crypto::Crc64Nvme),
}

impl TrailerHasher {
    pub(crate) fn update(&mut self, data: &[u8]) {
        match self {
            TrailerHasher::Crc32(h) => h.update(data),
            TrailerHasher::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
            TrailerHasher::Sha1(h) => h.update(data),
            TrailerHasher::Sha256(h) => h.update(data),
            TrailerHasher::Crc64nvme(h) => s3s::crypto::Checksum::update(h, data),
        }
    }

    /// The checksum, base64 as on the wire.
    pub(crate) fn finish_base64(self) -> String {
        let bytes: Vec<u8> = match self {
            TrailerHasher::Crc32(h) => h.finalize().to_be_bytes().to_vec(),
            TrailerHasher::Crc32c(c) => c.to_be_bytes().to_vec(),
            TrailerHasher::Sha1(h) => h.finalize().to_vec(),
            TrailerHasher::Sha256(h) => h.finalize().to_vec(),
            TrailerHasher::Crc64nvme(h) => s3s::crypto::Checksum::finalize(h).to_vec(),
        };
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_checksums_match_the_published_values_of_hello_world() {
        // Values as the AWS SDKs compute them for "hello world".
        let cases = [
            (TrailerChecksum::Crc32, "DUoRhQ=="),
            (TrailerChecksum::Crc32c, "yZRlqg=="),
            (TrailerChecksum::Sha1, "Kq5sNclPz7QV2+lfQIuc6R7oRu0="),
            (
                TrailerChecksum::Sha256,
                "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=",
            ),
        ];
        for (algorithm, expected) in cases {
            let mut h = algorithm.hasher();
            h.update(b"hello ");
            h.update(b"world");
            assert_eq!(h.finish_base64(), expected, "{algorithm:?}");
        }
        // CRC-64/NVME's published check value: "123456789" -> 0xAE8B14860A799888.
        let mut h = TrailerChecksum::Crc64nvme.hasher();
        h.update(b"12345");
        h.update(b"6789");
        assert_eq!(h.finish_base64(), "rosUhgp5mIg=");
    }

    #[test]
    fn an_unknown_trailer_is_refused_not_ignored() {
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-trailer", "x-amz-checksum-md7".parse().unwrap());
        assert!(TrailerChecksum::from_request(&headers).is_err());
        headers.insert("x-amz-trailer", "X-Amz-Checksum-CRC32".parse().unwrap());
        assert_eq!(
            TrailerChecksum::from_request(&headers).unwrap(),
            Some(TrailerChecksum::Crc32)
        );
    }
}
