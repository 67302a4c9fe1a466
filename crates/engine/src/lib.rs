//! # permafrost-engine: the archive engine
//!
//! **Job.** Turn a set of disks into an archive of *buckets* (one bucket = one whole data disk, nothing is
//! striped) protected by the two-dimensional parity grid of `permafrost-grid` and by intra-disk redundancy
//! (`permafrost-idr`), with disks off unless needed (`permafrost-disk::power`). All access goes through
//! forward-only [`WritePromise`]s and [`ReadPromise`]s; every write is tracked in a synchronously written
//! SQLite journal so that a crash at any point leaves the grid recoverable. The design is `docs/engine.md`
//! (thesis §4.3).
//!
//! **Invariants.**
//! - Parity: for every parity group with parity disk `P`, `true(P) = XOR of true(members)`, where a parity disk's
//!   true content is its on-disk content XOR its pending deltas (the delta cache), and a never-written range reads
//!   as zeros (the written map). It holds whenever no lock is held on the range, and after replay.
//! - A read returns the bytes last committed, or an error: never wrong bytes. A disk range that cannot be read or
//!   verified is reconstructed from the grid (smaller intact group first, then a peeling plan). Zeros inside the
//!   written map are trusted only where IDR verified them with their check blocks (a zeroed stripe or a blank disk
//!   is damage, not data).
//! - Memory is bounded: a reconstruction works on at most 4 MiB at a time whatever the recovery chunk.
//! - An acknowledged `commit()` survives a crash: direct and serialized writes have data and parity durable;
//!   delayed writes have data and the parity delta durable.
//! - Locks: a lock set is acquired atomically (no hold-and-wait); power guards are taken only after range locks.
//!
//! **Not here.** Objects, extents, placement and the catalog (the store above), the CLI.

#![forbid(unsafe_code)]

mod ages;
mod buffer_pool;
mod config;
mod delta;
mod disks;
mod engine;
#[doc(hidden)]
pub mod fuzzing;
mod header;
mod journal;
mod locks;
mod promise;
mod rangeset;

pub use config::{
    DiskSpec, EvacuationConfig, GridConfig, WriteMode, CONFIG_FILE, RECOVERY_CHUNK_BYTES_DEFAULT,
};
pub use disks::IoStats;
pub use engine::{
    AddDisk, AddGroup, AddGroupPhase, AddGroupStep, AddedDiskReport, AddedGroupReport, CrashPoint,
    DiskStatus, Engine, Evacuation, EvacuationReport, EvacuationState, GridStatus, OpenOptions,
    OverdueScrubReport, ParityMismatch, ParityReport, ParitySwap, ParitySwapReport, RecoveryReport,
    SwapParity, SwapState, SwapStep, WrapDisk, EVACUATIONS_FILE, PARITY_SWAPS_FILE,
};
pub use header::HEADER_BYTES;
pub use promise::{ReadPromise, WritePromise};

/// Everything that can go wrong in the engine. Every message names the disk, bucket or file concerned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Io(String),
    #[error("disk {disk} ({name}): {message}")]
    Header {
        disk: usize,
        name: String,
        message: String,
    },
    #[error(transparent)]
    Disk(#[from] permafrost_disk::DiskError),
    #[error(transparent)]
    Idr(#[from] permafrost_idr::IdrError),
    #[error("journal: {0}")]
    Journal(#[from] rusqlite::Error),
    #[error("power: {0}")]
    Power(#[from] permafrost_disk::power::PowerError),
    #[error("disk {disk} has failed: {message}")]
    DiskFailed { disk: usize, message: String },
    #[error("disk {disk}: bytes {offset}..{end} cannot be read or reconstructed (failed or damaged disks in every parity group: {stuck:?})")]
    Unrecoverable {
        disk: usize,
        offset: u64,
        end: u64,
        stuck: Vec<usize>,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("the engine is closed")]
    Closed,
    #[error("simulated crash at {0:?} (test hook)")]
    SimulatedCrash(CrashPoint),
}

/// Result of engine operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
