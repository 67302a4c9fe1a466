//! The checksum of a completed multipart upload, made from its parts' checksums without reading a byte
//! (S3's two kinds, `x-amz-checksum-type`):
//! - **full object**: the CRC of the whole object, equal to what a single PUT of the same bytes would get; the
//!   parts' CRCs are combined with their lengths (CRC32, CRC32C and CRC64NVME only);
//! - **composite**: the algorithm applied to the concatenation of the parts' digests, written `base64-N` with
//!   the part count (CRC32, CRC32C, SHA-1, SHA-256).
//!
//! An upload announces its algorithm and type at creation (`x-amz-checksum-algorithm`, `x-amz-checksum-type`); one
//! that announces nothing gets a full-object CRC64NVME, as S3 gives every new object. Every part computes the
//! upload's algorithm in the upload pipeline's hash lane (whether or not the client sent it), and the catalog
//! keeps it with the part (schema 8), so completion only combines stored values.
//! Invariant: a checksum stored with an object is one the server computed from the bytes it stored (or combined
//! from such), never a value taken on the client's word.

use base64::Engine as _;

use crate::checksum::ChecksumAlgorithm;
use crate::{Result, StoreError};

/// How a multipart object's checksum is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChecksumType {
    /// The algorithm over the concatenated part digests, `base64-N`.
    Composite,
    /// The CRC of the whole object.
    FullObject,
}

impl ChecksumType {
    /// S3's name (`COMPOSITE`, `FULL_OBJECT`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumType::Composite => "COMPOSITE",
            ChecksumType::FullObject => "FULL_OBJECT",
        }
    }

    /// S3's name (any case); an unknown name is `InvalidArgument`.
    pub fn parse(name: &str) -> Result<ChecksumType> {
        match name.trim().to_ascii_uppercase().as_str() {
            "COMPOSITE" => Ok(ChecksumType::Composite),
            "FULL_OBJECT" => Ok(ChecksumType::FullObject),
            _ => Err(StoreError::InvalidArgument(format!(
                "x-amz-checksum-type {name:?} is not COMPOSITE or FULL_OBJECT"
            ))),
        }
    }

    /// The type of a stored checksum value: composite values end in `-N`.
    pub fn of_value(value: &str) -> ChecksumType {
        if value.contains('-') {
            ChecksumType::Composite
        } else {
            ChecksumType::FullObject
        }
    }
}

/// The checksum an upload computes for its parts and its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UploadChecksum {
    pub algorithm: ChecksumAlgorithm,
    pub kind: ChecksumType,
    /// Whether the client announced it (`false`: the default CRC64NVME, never required of the client).
    pub announced: bool,
}

impl UploadChecksum {
    /// What an upload that announced nothing computes.
    pub const DEFAULT: UploadChecksum = UploadChecksum {
        algorithm: ChecksumAlgorithm::Crc64nvme,
        kind: ChecksumType::FullObject,
        announced: false,
    };

    /// The checksum an upload announced at creation, checked against S3's rules: CRC64NVME is full-object only,
    /// SHA-1/SHA-256 composite only, MD5 is not a checksum algorithm here. Without a type, CRC64NVME is
    /// full-object and the others composite (S3's defaults).
    pub fn announced(
        algorithm: ChecksumAlgorithm,
        kind: Option<ChecksumType>,
    ) -> Result<UploadChecksum> {
        let kind = kind.unwrap_or(match algorithm {
            ChecksumAlgorithm::Crc64nvme => ChecksumType::FullObject,
            _ => ChecksumType::Composite,
        });
        let allowed = match algorithm {
            ChecksumAlgorithm::Md5 => false,
            ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c => true,
            ChecksumAlgorithm::Crc64nvme => kind == ChecksumType::FullObject,
            ChecksumAlgorithm::Sha1 | ChecksumAlgorithm::Sha256 => kind == ChecksumType::Composite,
        };
        if !allowed {
            return Err(StoreError::InvalidArgument(format!(
                "the {} checksum type is not supported for the {} algorithm",
                kind.as_str(),
                algorithm.name().to_ascii_uppercase()
            )));
        }
        Ok(UploadChecksum {
            algorithm,
            kind,
            announced: true,
        })
    }
}

fn crc_algorithm(algorithm: ChecksumAlgorithm) -> Option<crc_fast::CrcAlgorithm> {
    match algorithm {
        ChecksumAlgorithm::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
        ChecksumAlgorithm::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
        ChecksumAlgorithm::Crc64nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
        _ => None,
    }
}

fn be_u64(digest: &[u8]) -> u64 {
    digest.iter().fold(0u64, |v, b| (v << 8) | u64::from(*b))
}

/// The object's checksum value (base64, with `-N` for composite) from its parts' digests and logical lengths,
/// in part order.
pub fn combine(
    algorithm: ChecksumAlgorithm,
    kind: ChecksumType,
    parts: &[(Vec<u8>, u64)],
) -> Result<String> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    match kind {
        ChecksumType::Composite => {
            if algorithm == ChecksumAlgorithm::Md5 || algorithm == ChecksumAlgorithm::Crc64nvme {
                return Err(StoreError::InvalidArgument(format!(
                    "{} has no composite multipart checksum",
                    algorithm.name()
                )));
            }
            let mut h = algorithm.hasher();
            for (digest, _) in parts {
                h.update(digest);
            }
            Ok(format!("{}-{}", b64(&h.finish()), parts.len()))
        }
        ChecksumType::FullObject => {
            let Some(crc) = crc_algorithm(algorithm) else {
                return Err(StoreError::InvalidArgument(format!(
                    "{} has no full-object multipart checksum (CRC32, CRC32C and CRC64NVME have)",
                    algorithm.name()
                )));
            };
            let bytes = algorithm.digest_bytes();
            let mut whole: Option<u64> = None;
            for (digest, len) in parts {
                let v = be_u64(digest);
                whole = Some(match whole {
                    None => v,
                    Some(w) => crc_fast::checksum_combine(crc, w, v, *len),
                });
            }
            let whole = match whole {
                Some(w) => w,
                None => {
                    // No parts: the CRC of zero bytes.
                    return Ok(algorithm.hasher().finish_base64());
                }
            };
            Ok(b64(&whole.to_be_bytes()[8 - bytes..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn digest(a: ChecksumAlgorithm, data: &[u8]) -> Vec<u8> {
        let mut h = a.hasher();
        h.update(data);
        h.finish()
    }

    proptest! {
        #[test]
        fn a_full_object_crc_of_parts_is_the_crc_of_the_whole(
            data in proptest::collection::vec(any::<u8>(), 0..5000),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
            cuts.push(0);
            cuts.push(data.len());
            cuts.sort_unstable();
            for a in [ChecksumAlgorithm::Crc32, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc64nvme] {
                let parts: Vec<(Vec<u8>, u64)> = cuts
                    .windows(2)
                    .map(|w| (digest(a, &data[w[0]..w[1]]), (w[1] - w[0]) as u64))
                    .collect();
                let mut whole = a.hasher();
                whole.update(&data);
                prop_assert_eq!(combine(a, ChecksumType::FullObject, &parts).unwrap(), whole.finish_base64());
            }
        }
    }

    #[test]
    fn a_composite_checksum_is_the_digest_of_the_part_digests_with_the_count() {
        let a = ChecksumAlgorithm::Sha256;
        let p1 = digest(a, b"hello ");
        let p2 = digest(a, b"world");
        let mut h = a.hasher();
        h.update(&p1);
        h.update(&p2);
        let expected = format!("{}-2", h.finish_base64());
        let got = combine(a, ChecksumType::Composite, &[(p1, 6), (p2, 5)]).unwrap();
        assert_eq!(got, expected);
        assert_eq!(ChecksumType::of_value(&got), ChecksumType::Composite);
        assert!(combine(a, ChecksumType::FullObject, &[]).is_err());
        assert!(combine(ChecksumAlgorithm::Crc64nvme, ChecksumType::Composite, &[]).is_err());
    }

    #[test]
    fn announcements_follow_s3s_rules_and_defaults() {
        use ChecksumAlgorithm::*;
        assert_eq!(
            UploadChecksum::announced(Crc64nvme, None).unwrap().kind,
            ChecksumType::FullObject
        );
        assert_eq!(
            UploadChecksum::announced(Crc32, None).unwrap().kind,
            ChecksumType::Composite
        );
        assert!(UploadChecksum::announced(Crc32c, Some(ChecksumType::FullObject)).is_ok());
        assert!(UploadChecksum::announced(Crc64nvme, Some(ChecksumType::Composite)).is_err());
        assert!(UploadChecksum::announced(Sha256, Some(ChecksumType::FullObject)).is_err());
        assert!(UploadChecksum::announced(Md5, None).is_err());
        assert!(ChecksumType::parse("full_object").is_ok());
        assert!(ChecksumType::parse("whole").is_err());
    }
}
