//! Checksums of uploaded bytes behind one interface: every algorithm a client can announce (`Content-MD5`,
//! `x-amz-checksum-*` headers and trailers) is a [`ChecksumAlgorithm`] with a streaming [`Hasher`]. The upload
//! pipeline runs whichever are wanted in its hash lanes without knowing which they are; the S3 layer parses
//! headers and trailers into the same enum. Adding an algorithm is one variant here: its name,
//! header, digest length and hasher.

use base64::Engine as _;
use md5::Digest as _;

/// An algorithm a client can announce a checksum in (serialized by its [`ChecksumAlgorithm::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumAlgorithm {
    /// `Content-MD5` (also the ETag of single-part uploads).
    Md5,
    Crc32,
    Crc32c,
    Sha1,
    Sha256,
    /// CRC-64/NVME, what current AWS SDKs send by default.
    Crc64nvme,
}

impl ChecksumAlgorithm {
    /// The `x-amz-checksum-*` algorithms, in the order S3 documents them.
    pub const AMZ: [ChecksumAlgorithm; 5] = [
        ChecksumAlgorithm::Crc32,
        ChecksumAlgorithm::Crc32c,
        ChecksumAlgorithm::Crc64nvme,
        ChecksumAlgorithm::Sha1,
        ChecksumAlgorithm::Sha256,
    ];

    /// Lower-case name (`crc32`, …), as stored with an object's verified checksums.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Md5 => "md5",
            ChecksumAlgorithm::Crc32 => "crc32",
            ChecksumAlgorithm::Crc32c => "crc32c",
            ChecksumAlgorithm::Sha1 => "sha1",
            ChecksumAlgorithm::Sha256 => "sha256",
            ChecksumAlgorithm::Crc64nvme => "crc64nvme",
        }
    }

    /// The HTTP header (or trailer) that carries it.
    pub fn header(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Md5 => "Content-MD5",
            ChecksumAlgorithm::Crc32 => "x-amz-checksum-crc32",
            ChecksumAlgorithm::Crc32c => "x-amz-checksum-crc32c",
            ChecksumAlgorithm::Sha1 => "x-amz-checksum-sha1",
            ChecksumAlgorithm::Sha256 => "x-amz-checksum-sha256",
            ChecksumAlgorithm::Crc64nvme => "x-amz-checksum-crc64nvme",
        }
    }

    /// The algorithm of a name as S3 writes it (`CRC64NVME`, `crc32`, any case), if it is one.
    pub fn from_name(name: &str) -> Option<ChecksumAlgorithm> {
        Self::AMZ
            .into_iter()
            .chain([ChecksumAlgorithm::Md5])
            .find(|a| a.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The algorithm of an `x-amz-checksum-*` header name (any case), if it is one.
    pub fn from_header(name: &str) -> Option<ChecksumAlgorithm> {
        let name = name.trim();
        Self::AMZ
            .into_iter()
            .chain([ChecksumAlgorithm::Md5])
            .find(|a| a.header().eq_ignore_ascii_case(name))
    }

    /// Bytes of a digest.
    pub fn digest_bytes(self) -> usize {
        match self {
            ChecksumAlgorithm::Md5 => 16,
            ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c => 4,
            ChecksumAlgorithm::Sha1 => 20,
            ChecksumAlgorithm::Sha256 => 32,
            ChecksumAlgorithm::Crc64nvme => 8,
        }
    }

    /// A fresh streaming hasher.
    pub fn hasher(self) -> Hasher {
        Hasher(match self {
            ChecksumAlgorithm::Md5 => State::Md5(md5::Md5::new()),
            ChecksumAlgorithm::Crc32 => {
                State::Crc32(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32IsoHdlc))
            }
            ChecksumAlgorithm::Crc32c => {
                State::Crc32(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi))
            }
            ChecksumAlgorithm::Sha1 => State::Sha1(sha1::Sha1::new()),
            ChecksumAlgorithm::Sha256 => State::Sha256(sha2::Sha256::new()),
            ChecksumAlgorithm::Crc64nvme => {
                State::Crc64(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme))
            }
        })
    }

    /// Decode a base64 value as sent on the wire, checking its length; `InvalidDigest` names the header.
    pub fn decode(self, value: &str) -> crate::Result<Vec<u8>> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .map_err(|_| {
                crate::StoreError::InvalidDigest(format!(
                    "{} {value:?} is not base64",
                    self.header()
                ))
            })?;
        if bytes.len() != self.digest_bytes() {
            return Err(crate::StoreError::InvalidDigest(format!(
                "{} {value:?} has {} bytes, expected {}",
                self.header(),
                bytes.len(),
                self.digest_bytes()
            )));
        }
        Ok(bytes)
    }
}

/// A streaming checksum of one [`ChecksumAlgorithm`].
#[derive(Clone)]
pub struct Hasher(State);

#[derive(Clone)]
enum State {
    Md5(md5::Md5),
    /// CRC32 or CRC32C.
    Crc32(crc_fast::Digest),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
    Crc64(crc_fast::Digest),
}

impl Hasher {
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.0 {
            State::Md5(h) => h.update(data),
            State::Crc32(h) => h.update(data),
            State::Sha1(h) => h.update(data),
            State::Sha256(h) => h.update(data),
            State::Crc64(h) => h.update(data),
        }
    }

    /// The digest (big-endian for the CRCs, as S3 sends them).
    pub fn finish(self) -> Vec<u8> {
        match self.0 {
            State::Md5(h) => h.finalize().to_vec(),
            State::Crc32(h) => (h.finalize() as u32).to_be_bytes().to_vec(),
            State::Sha1(h) => h.finalize().to_vec(),
            State::Sha256(h) => h.finalize().to_vec(),
            State::Crc64(h) => h.finalize().to_be_bytes().to_vec(),
        }
    }

    /// The digest in base64, as on the wire.
    pub fn finish_base64(self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_gives_the_digest_s3_documents_for_a_known_input() {
        // Reference values for "hello world" (S3 sends the CRCs big-endian, base64).
        let expected = [
            (ChecksumAlgorithm::Md5, "XrY7u+Ae7tCTyyK7j1rNww=="),
            (ChecksumAlgorithm::Crc32, "DUoRhQ=="),
            (ChecksumAlgorithm::Crc32c, "yZRlqg=="),
            (ChecksumAlgorithm::Sha1, "Kq5sNclPz7QV2+lfQIuc6R7oRu0="),
            (
                ChecksumAlgorithm::Sha256,
                "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=",
            ),
        ];
        for (algorithm, b64) in expected {
            let mut h = algorithm.hasher();
            h.update(b"hello ");
            h.update(b"world");
            assert_eq!(h.finish_base64(), b64, "{}", algorithm.name());
            assert_eq!(
                algorithm.decode(b64).unwrap().len(),
                algorithm.digest_bytes()
            );
            assert_eq!(
                ChecksumAlgorithm::from_header(&algorithm.header().to_uppercase()),
                Some(algorithm)
            );
        }
        assert!(ChecksumAlgorithm::Sha1.decode("DUoRhQ==").is_err());
        assert!(ChecksumAlgorithm::from_header("x-amz-checksum-crc64").is_none());
        // CRC-64/NVME's published check value: "123456789" -> 0xAE8B14860A799888.
        let mut h = ChecksumAlgorithm::Crc64nvme.hasher();
        h.update(b"12345");
        h.update(b"6789");
        assert_eq!(h.finish_base64(), "rosUhgp5mIg=");
        assert_eq!(
            ChecksumAlgorithm::Crc64nvme
                .decode("rosUhgp5mIg=")
                .unwrap()
                .len(),
            8
        );
        assert_eq!(
            ChecksumAlgorithm::from_header("X-Amz-Checksum-CRC64NVME"),
            Some(ChecksumAlgorithm::Crc64nvme)
        );
    }
}
