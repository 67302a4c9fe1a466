//! Errors of the disk layer. An I/O error is an expected operating error, not a bug.

use std::io;

/// What went wrong with a disk operation. Every variant names the disk.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{disk}: I/O at offset {offset} length {len} is not aligned to 4096-byte blocks")]
    Misaligned {
        disk: String,
        offset: u64,
        len: usize,
    },
    #[error("{disk}: I/O at offset {offset} length {len} is outside the disk (capacity {capacity} bytes)")]
    OutOfRange {
        disk: String,
        offset: u64,
        len: usize,
        capacity: u64,
    },
    #[error("{disk}: I/O error at offset {offset} length {len}: {source}")]
    Io {
        disk: String,
        offset: u64,
        len: usize,
        #[source]
        source: io::Error,
    },
    #[error("{disk}: disk has failed")]
    Failed { disk: String },
    #[error("{disk}: {message}")]
    Setup { disk: String, message: String },
}

impl DiskError {
    /// True when the disk's *file system* is full (`ENOSPC`, `EDQUOT`): a file-backed disk could not grow. That says
    /// nothing about the health of the disk's media, and it passes once space is freed.
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, DiskError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
    }
}
