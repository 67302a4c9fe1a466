//! # permafrost-disk: the lowest layer — one disk, and its power
//!
//! **Job.** Give every layer above one way to talk to a disk ([`Disk`]) whatever
//! it really is: a sparse file ([`FileDisk`]), a block device ([`BlockDisk`]), or
//! a test wrapper that injects faults ([`FaultyDisk`]; [`LoopDevice`] gives tests a real block device), or RAM ([`MemDisk`], for
//! simulations and unit tests). And model what a disk
//! costs to keep spinning: power states, spin-up delay, idle timeout, watts and
//! counters ([`power`]), with a budget that caps how many disks spin at once.
//! [`PoweredDisk`] is a [`Disk`] that spins its disk up through the budget for
//! every I/O. The model, defaults and their sources are in `docs/power.md`.
//!
//! **Invariants.**
//! - All I/O is in whole blocks of [`BLOCK_BYTES`] at block-aligned offsets;
//!   anything else is rejected with [`DiskError::Misaligned`] (never silently
//!   widened). Callers may pass any buffer; backends that need aligned memory
//!   (O_DIRECT) bounce through an [`AlignedBuf`] when the caller's is not aligned.
//! - A write that returned `Ok` and was followed by a successful [`Disk::sync`]
//!   is durable. A read never returns bytes from outside the requested range.
//! - I/O outside `[0, capacity_bytes)` is an error, never a short read.
//! - The power model is pure bookkeeping over a caller-supplied clock, so the
//!   server (real time) and the simulators (simulated time) share it.
//!
//! **Not here.** Checksums and redundancy (that is `permafrost-idr`), and what the
//! bytes mean (the grid header is written by `permafrost-engine`).

mod aligned;
mod block;
pub mod durable;
mod error;
mod faulty;
mod file;
mod loop_device;
mod mem;
pub mod power;
pub mod smart;

pub use aligned::AlignedBuf;
pub use block::BlockDisk;
pub use error::DiskError;
pub use faulty::{FaultHandle, FaultyDisk};
pub use file::FileDisk;
pub use loop_device::LoopDevice;
pub use mem::MemDisk;
pub use power::PoweredDisk;

/// Size of one I/O block and of one IDR coding block: 4 KiB.
pub const BLOCK_BYTES: usize = 4096;

/// One disk: a fixed-size array of [`BLOCK_BYTES`] blocks.
pub trait Disk: Send + Sync + 'static {
    /// Usable size in bytes (a multiple of [`BLOCK_BYTES`]).
    fn capacity_bytes(&self) -> u64;
    /// Read `buf.len()` bytes at `offset`. Both must be multiples of [`BLOCK_BYTES`].
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError>;
    /// Read several ranges (each as [`Disk::read_at`] would) as one operation of the disk: for ranges close
    /// together, in ascending order, that a caller wants without the bytes between them (an IDR batch's stripes
    /// without their parity). A failed range fails the call; the ranges after it may or may not have been read.
    /// The default reads them one after the other; files and block devices keep two reads in flight.
    fn read_ranges_at(&self, ranges: &mut [(u64, &mut [u8])]) -> Result<(), DiskError> {
        for (offset, buf) in ranges.iter_mut() {
            self.read_at(*offset, buf)?;
        }
        Ok(())
    }
    /// Write `buf` at `offset`. Both must be multiples of [`BLOCK_BYTES`].
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError>;
    /// Make every completed write durable.
    fn sync(&self) -> Result<(), DiskError>;
    /// Human-readable name for messages, e.g. the path.
    fn describe(&self) -> String;
}

/// [`check_io`] for every range of a [`Disk::read_ranges_at`].
pub fn check_ranges(
    disk: &(impl Disk + ?Sized),
    ranges: &[(u64, &mut [u8])],
) -> Result<(), DiskError> {
    ranges
        .iter()
        .try_for_each(|(offset, buf)| check_io(disk, *offset, buf.len()))
}

/// Check the block-alignment invariant shared by all backends.
pub fn check_io(disk: &(impl Disk + ?Sized), offset: u64, len: usize) -> Result<(), DiskError> {
    let block = BLOCK_BYTES as u64;
    if !offset.is_multiple_of(block) || !len.is_multiple_of(BLOCK_BYTES) {
        return Err(DiskError::Misaligned {
            disk: disk.describe(),
            offset,
            len,
        });
    }
    let capacity = disk.capacity_bytes();
    if offset
        .checked_add(len as u64)
        .is_none_or(|end| end > capacity)
    {
        return Err(DiskError::OutOfRange {
            disk: disk.describe(),
            offset,
            len,
            capacity,
        });
    }
    Ok(())
}
