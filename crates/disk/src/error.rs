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
