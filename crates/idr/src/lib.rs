//! # permafrost-idr: intra-disk redundancy
//!
//! **Job.** Make one disk repair its own latent sector errors and detect its own silent
//! corruption, without waking any other disk (SPEC idea 4; thesis ch. 3 and §4.3.1).
//! [`IdrDisk`] turns a [`Disk`](permafrost_disk::Disk) into a logical byte space whose
//! every 4 KiB block belongs to an *iPG* (intra-disk parity group) of `n` data + `k`
//! parity blocks ([`Codec`]: [`Spc`] 16+1 by default, [`ReedSolomon`] 16+2 as an
//! option). `s` neighbouring iPGs are *scrambled* together into a stripe so that any burst
//! of up to `s` physically adjacent bad blocks hits each iPG at most once, and each stripe
//! carries two copies of a *check block* holding a crc32c per block, so a silently
//! corrupted block is located (and becomes an erasure the code repairs). The layout is
//! written down byte by byte in `docs/idr.md`.
//!
//! **Invariants.**
//! - [`IdrDisk::read`] returns only verified bytes: every block matches its crc in a valid
//!   check block of its stripe, or was rebuilt by the code and matches its crc. Anything else
//!   is [`IdrError::Unrecoverable`], never data. A stripe whose data all match their crcs in
//!   its first check block is read without its parity and second check block; any other
//!   stripe is read whole, and its iPGs are checked against their parity as well.
//!   [`IdrDisk::scrub`] reads and checks everything.
//! - Repairs are written back in place, and only to blocks that were bad.
//! - A never-written stripe (all zeros, check blocks included) reads as zeros.
//! - A stripe-aligned write of whole stripes never reads the disk.
//!
//! **Concurrency.** All methods take `&self`; `IdrDisk` is `Send + Sync` and holds no locks.
//! Calls on *disjoint stripes* may run concurrently. Callers must serialise a write,
//! [`IdrDisk::reencode`] or anything else that writes against any other call touching the
//! same stripe (the engine's range locks do this; lock whole stripes, i.e. round ranges out to
//! [`IdrDisk::stripe_bytes`]). Concurrent reads of one stripe are allowed: a read that
//! repairs writes back exactly the bytes the other reader would write.
//!
//! ```
//! use std::sync::Arc;
//! use permafrost_disk::MemDisk;
//! use permafrost_idr::{IdrConfig, IdrDisk};
//!
//! let disk = Arc::new(MemDisk::new("example", 4 << 20));
//! let idr = IdrDisk::new(disk, 0, IdrConfig::default()).unwrap();
//! let stripe = vec![7u8; idr.stripe_bytes() as usize];
//! idr.write(0, &stripe).unwrap(); // a whole stripe: encoded and written, nothing read
//! let mut back = vec![0u8; 4096];
//! let report = idr.read(4096, &mut back).unwrap(); // verified against the crcs
//! assert_eq!(back, vec![7u8; 4096]);
//! assert_eq!(report.blocks_repaired, 0);
//! ```
//!
//! **Not here.** Redundancy across disks (the grid), and remembering which stripes were
//! ever written (the engine's written map).

// `x % y != 0` rather than `is_multiple_of`: the crate's convention, from when the workspace targeted Rust 1.85.
#![allow(clippy::manual_is_multiple_of)]

mod codec;
mod copy;
mod idr_disk;
mod layout;
pub mod xor;

pub use codec::{Codec, CodecError, ReedSolomon, Spc};
pub use idr_disk::IdrDisk;
pub use layout::LAYOUT_VERSION;
pub use xor::{xor_all_into, xor_into};

use permafrost_disk::DiskError;
use serde::{Deserialize, Serialize};

/// Which erasure code protects each iPG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodecKind {
    /// Single parity check 16+1 (XOR): repairs 1 block per iPG. 94.1 % of blocks hold data.
    #[default]
    Spc16,
    /// Reed–Solomon 16+2: repairs 2 blocks per iPG. 88.9 % of blocks hold data.
    Rs16x2,
}

impl CodecKind {
    /// The id stored in check blocks (and in the engine's disk header).
    pub fn id(self) -> u8 {
        match self {
            CodecKind::Spc16 => 1,
            CodecKind::Rs16x2 => 2,
        }
    }
    /// The kind stored as `id`, if any.
    pub fn from_id(id: u8) -> Option<CodecKind> {
        match id {
            1 => Some(CodecKind::Spc16),
            2 => Some(CodecKind::Rs16x2),
            _ => None,
        }
    }
    /// A codec of this kind.
    pub fn codec(self) -> Box<dyn Codec> {
        match self {
            CodecKind::Spc16 => Box::new(Spc::new(16)),
            CodecKind::Rs16x2 => Box::new(ReedSolomon::default()),
        }
    }
}

/// Configuration of an [`IdrDisk`]; part of the on-disk format (stored in every check block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdrConfig {
    /// The code of each iPG.
    pub codec: CodecKind,
    /// `s`: iPGs scrambled together per stripe = the longest burst of adjacent bad blocks
    /// that costs each iPG at most one block. Default 16 (see docs/idr.md for why).
    pub scramble_groups: usize,
}

impl Default for IdrConfig {
    /// SPC 16+1, s = 16: stripes of 1 MiB logical, 274 physical blocks.
    fn default() -> IdrConfig {
        IdrConfig {
            codec: CodecKind::Spc16,
            scramble_groups: 16,
        }
    }
}

/// What an [`IdrDisk`] operation could not do.
#[derive(Debug, thiserror::Error)]
pub enum IdrError {
    /// The configuration does not fit the disk or the format.
    #[error("{disk}: invalid IDR configuration: {message}")]
    Config { disk: String, message: String },
    /// Offset or length not a multiple of 4096.
    #[error("{disk}: IDR request at logical offset {offset} length {len} is not aligned to 4096-byte blocks")]
    Misaligned { disk: String, offset: u64, len: u64 },
    /// Request beyond the logical capacity.
    #[error("{disk}: IDR request at logical offset {offset} length {len} is outside the logical capacity of {capacity} bytes")]
    OutOfRange {
        disk: String,
        offset: u64,
        len: u64,
        capacity: u64,
    },
    /// These logical ranges `(offset, length)` could not be verified: more bad blocks in an
    /// iPG than the code repairs, or a stripe that holds another stripe's data (a misdirected
    /// write). No byte of them was returned.
    #[error("cannot verify logical ranges {ranges:?} (offset, length): damage beyond what the IDR code repairs")]
    Unrecoverable { ranges: Vec<(u64, u64)> },
    /// The disk itself failed (whole-disk failure, bad request to the disk, or a failed
    /// write-back). A read error of single blocks is not reported here: it is an erasure.
    #[error(transparent)]
    Disk(#[from] DiskError),
}

/// What a successful [`IdrDisk::read`] had to repair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Data and parity blocks rebuilt by the code and rewritten in place.
    pub blocks_repaired: u64,
    /// Check blocks rewritten (damaged, missing, or rebuilt after both were lost).
    pub check_blocks_repaired: u64,
}

/// What an [`IdrDisk::scrub`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Logical bytes verified (the requested range rounded out to whole stripes).
    pub bytes_verified: u64,
    /// Stripes that were never written (all zeros).
    pub stripes_never_written: u64,
    /// Data and parity blocks rebuilt and rewritten.
    pub blocks_repaired: u64,
    /// Check blocks rewritten.
    pub check_blocks_repaired: u64,
    /// Logical ranges `(offset, length)` that could not be verified (the engine must
    /// recover them from the grid). Scrub reports them here instead of failing.
    pub unrecoverable: Vec<(u64, u64)>,
}

/// What an [`IdrDisk::reencode`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReencodeReport {
    /// Stripes re-encoded.
    pub stripes: u64,
    /// Data blocks that could be neither read nor repaired and were set to zeros.
    pub blocks_zeroed: u64,
}
