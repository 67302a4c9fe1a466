//! A fault-injecting wrapper for tests: whole-disk failure, EIO ranges, a full file system, real bit rot,
//! counters.

use crate::{check_io, AlignedBuf, Disk, DiskError, BLOCK_BYTES};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Upper bound on the number of distinct EIO ranges, so a runaway test cannot
/// grow the list without limit.
const EIO_RANGES_MAX: usize = 4096;

struct Shared {
    inner: Arc<dyn Disk>,
    failed: AtomicBool,
    /// Writes fail with ENOSPC, as on a full file system under a file-backed disk.
    full: AtomicBool,
    /// Half-open byte ranges `[start, end)` where I/O returns EIO.
    eio_ranges: Mutex<Vec<(u64, u64)>>,
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// A [`Disk`] that forwards to an inner disk unless told to fail.
///
/// Faults are set through the [`FaultHandle`] returned with it, from any thread.
/// Alignment and range errors are reported before any fault, as the inner disk
/// would. [`Disk::describe`] is the inner disk's, so messages name the real disk.
pub struct FaultyDisk {
    shared: Arc<Shared>,
}

/// Controls and observes one [`FaultyDisk`]. Cheap to clone; all clones act on
/// the same disk.
#[derive(Clone)]
pub struct FaultHandle {
    shared: Arc<Shared>,
}

impl FaultyDisk {
    /// Wrap `inner`, healthy and with all counters at zero.
    pub fn new(inner: Arc<dyn Disk>) -> (FaultyDisk, FaultHandle) {
        let shared = Arc::new(Shared {
            inner,
            failed: AtomicBool::new(false),
            full: AtomicBool::new(false),
            eio_ranges: Mutex::new(Vec::new()),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        });
        (
            FaultyDisk {
                shared: shared.clone(),
            },
            FaultHandle { shared },
        )
    }

    fn check_faults(&self, offset: u64, len: usize) -> Result<(), DiskError> {
        let shared = &self.shared;
        if shared.failed.load(Ordering::SeqCst) {
            return Err(DiskError::Failed {
                disk: self.describe(),
            });
        }
        let end = offset + len as u64;
        let hit = shared
            .eio_ranges
            .lock()
            .iter()
            .any(|&(start, stop)| offset < stop && start < end);
        if hit {
            return Err(DiskError::Io {
                disk: self.describe(),
                offset,
                len,
                source: io::Error::from_raw_os_error(libc::EIO),
            });
        }
        Ok(())
    }
}

impl Disk for FaultyDisk {
    fn capacity_bytes(&self) -> u64 {
        self.shared.inner.capacity_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?;
        self.shared.reads.fetch_add(1, Ordering::SeqCst);
        self.shared
            .bytes_read
            .fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.check_faults(offset, buf.len())?;
        self.shared.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?;
        self.shared.writes.fetch_add(1, Ordering::SeqCst);
        self.shared
            .bytes_written
            .fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.check_faults(offset, buf.len())?;
        if self.shared.full.load(Ordering::SeqCst) {
            return Err(DiskError::Io {
                disk: self.describe(),
                offset,
                len: buf.len(),
                source: io::Error::from_raw_os_error(libc::ENOSPC),
            });
        }
        self.shared.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), DiskError> {
        if self.shared.failed.load(Ordering::SeqCst) {
            return Err(DiskError::Failed {
                disk: self.describe(),
            });
        }
        self.shared.inner.sync()
    }
    fn describe(&self) -> String {
        self.shared.inner.describe()
    }
}

impl FaultHandle {
    /// From now on every read, write and sync returns [`DiskError::Failed`].
    pub fn fail_disk(&self) {
        self.shared.failed.store(true, Ordering::SeqCst);
    }

    /// Undo [`FaultHandle::fail_disk`]. EIO ranges stay (see [`FaultHandle::clear_eio`]).
    pub fn heal(&self) {
        self.shared.failed.store(false, Ordering::SeqCst);
    }

    /// True while the disk is failed.
    pub fn is_failed(&self) -> bool {
        self.shared.failed.load(Ordering::SeqCst)
    }

    /// Reads and writes that touch any byte of `[offset, offset + len)` return
    /// [`DiskError::Io`] carrying an EIO `io::Error`, like a latent sector error.
    /// The bytes on the inner disk are not changed. `len == 0` does nothing.
    pub fn eio_range(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut ranges = self.shared.eio_ranges.lock();
        assert!(
            ranges.len() < EIO_RANGES_MAX,
            "more than {EIO_RANGES_MAX} EIO ranges: clear_eio() between cases"
        );
        ranges.push((offset, offset.saturating_add(len)));
    }

    /// While `full`, every write returns [`DiskError::Io`] carrying ENOSPC, as when the file system under a
    /// file-backed disk is full (reads and syncs work; nothing on the inner disk changes).
    pub fn set_file_system_full(&self, full: bool) {
        self.shared.full.store(full, Ordering::SeqCst);
    }

    /// Remove every EIO range.
    pub fn clear_eio(&self) {
        self.shared.eio_ranges.lock().clear();
    }

    /// Really corrupt the inner disk: read the block holding `byte_offset`,
    /// flip bit `bit` (0 = least significant) of that byte, write it back.
    /// Bypasses the faults and the counters.
    pub fn flip_bit(&self, byte_offset: u64, bit: u8) -> Result<(), DiskError> {
        let inner = &self.shared.inner;
        if bit >= 8 {
            return Err(DiskError::Setup {
                disk: inner.describe(),
                message: format!("bit {bit} is not in 0..8"),
            });
        }
        let block_offset = byte_offset - byte_offset % BLOCK_BYTES as u64;
        let mut block = AlignedBuf::zeroed(BLOCK_BYTES);
        inner.read_at(block_offset, &mut block)?;
        block[(byte_offset - block_offset) as usize] ^= 1 << bit;
        inner.write_at(block_offset, &block)
    }

    /// Read calls made on the disk (including those that failed with a fault;
    /// not counting misaligned or out-of-range calls).
    pub fn reads(&self) -> u64 {
        self.shared.reads.load(Ordering::SeqCst)
    }

    /// Write calls made on the disk, counted like [`FaultHandle::reads`].
    pub fn writes(&self) -> u64 {
        self.shared.writes.load(Ordering::SeqCst)
    }

    /// Bytes requested by the calls counted in [`FaultHandle::reads`].
    pub fn bytes_read(&self) -> u64 {
        self.shared.bytes_read.load(Ordering::SeqCst)
    }

    /// Bytes requested by the calls counted in [`FaultHandle::writes`].
    pub fn bytes_written(&self) -> u64 {
        self.shared.bytes_written.load(Ordering::SeqCst)
    }

    /// Set all four counters back to zero.
    pub fn reset_counters(&self) {
        for counter in [
            &self.shared.reads,
            &self.shared.writes,
            &self.shared.bytes_read,
            &self.shared.bytes_written,
        ] {
            counter.store(0, Ordering::SeqCst);
        }
    }
}
