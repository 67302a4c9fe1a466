//! The one error type of this crate.

use std::io;

/// Everything that can go wrong while encoding, decoding, scanning or salvaging.
///
/// Bad input (a corrupted extent, a manifest with an unknown version, a range
/// past the end) is an error with a message naming what was wrong; it is never
/// a panic.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// An I/O error of the underlying reader or writer.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// Bytes that do not follow the documented format (bad magic, unknown
    /// version, lengths that do not add up, a failed decompression).
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// Which structure (e.g. "extent header", "manifest", "chunk index").
        what: &'static str,
        /// What exactly was wrong.
        reason: String,
    },
    /// A checksum did not match: the bytes were damaged.
    #[error("{what} checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// Which structure.
        what: &'static str,
        /// The checksum found in the bytes.
        stored: u32,
        /// The checksum computed over the bytes.
        computed: u32,
    },
    /// An extent found by the scanner that cannot be used (bad checksum,
    /// truncated by the end of the image, unreadable).
    #[error("damaged extent at byte {offset_bytes} of the image: {reason}")]
    DamagedExtent {
        /// Where the extent starts in the scanned image.
        offset_bytes: u64,
        /// Its header, when the header itself parsed.
        header: Option<crate::ExtentHeader>,
        /// Why it was rejected.
        reason: String,
    },
    /// A requested logical range lies (partly) outside the content.
    #[error("range {offset}+{len} is outside the content of {logical_len} bytes")]
    InvalidRange {
        /// Requested start.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Logical length of the content.
        logical_len: u64,
    },
    /// A caller-supplied argument out of its documented bounds.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result with [`FormatError`].
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

impl FormatError {
    pub(crate) fn malformed(what: &'static str, reason: impl Into<String>) -> Self {
        FormatError::Malformed {
            what,
            reason: reason.into(),
        }
    }
}

impl From<FormatError> for io::Error {
    fn from(e: FormatError) -> io::Error {
        match e {
            FormatError::Io(e) => e,
            FormatError::InvalidArgument(_) | FormatError::InvalidRange { .. } => {
                io::Error::new(io::ErrorKind::InvalidInput, e)
            }
            other => io::Error::new(io::ErrorKind::InvalidData, other),
        }
    }
}
