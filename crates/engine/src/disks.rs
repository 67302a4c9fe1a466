//! Disk stacks of a grid: backend (file / block / missing) → caller's wrapper (tests) → I/O counters →
//! `PoweredDisk` → `IdrDisk`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use permafrost_disk::power::{PowerManager, PoweredDisk};
use permafrost_disk::{Disk, DiskError};
use permafrost_idr::IdrDisk;
use serde::Serialize;

/// Bytes moved to and from one disk since the engine opened (or [`crate::Engine::reset_io_stats`]).
///
/// *Logical* bytes are what the engine asked of the disk's IDR space (the unit of the thesis's I/O factors);
/// *physical* bytes are what reached the device, IDR check and parity blocks included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IoStats {
    pub logical_read_bytes: u64,
    pub logical_written_bytes: u64,
    pub physical_read_bytes: u64,
    pub physical_written_bytes: u64,
}

#[derive(Default)]
pub(crate) struct IoCounters {
    pub logical_read: AtomicU64,
    pub logical_written: AtomicU64,
    pub physical_read: AtomicU64,
    pub physical_written: AtomicU64,
    /// Failed engine operations since the disk last completed a read or write: a disk that fails this many in a
    /// row is marked failed; one with bad sectors among good ones stays live (its bad ranges become defects).
    pub errors_in_a_row: AtomicU32,
    /// Reads started on the disk (for a read promise's thread that waits until the next read has started).
    pub reads_started: AtomicU64,
}

impl IoCounters {
    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            logical_read_bytes: self.logical_read.load(Ordering::Relaxed),
            logical_written_bytes: self.logical_written.load(Ordering::Relaxed),
            physical_read_bytes: self.physical_read.load(Ordering::Relaxed),
            physical_written_bytes: self.physical_written.load(Ordering::Relaxed),
        }
    }
    pub(crate) fn reset(&self) {
        for c in [
            &self.logical_read,
            &self.logical_written,
            &self.physical_read,
            &self.physical_written,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Counts physical bytes of successful I/O (and clears the disk's run of errors) and the reads started; tells
/// a read promise's ordering that its thread's disk read completed.
pub(crate) struct CountingDisk {
    pub inner: Arc<dyn Disk>,
    pub counters: Arc<IoCounters>,
}

impl CountingDisk {
    /// One disk read of `bytes` bytes: counted when it succeeds, and reported to a read promise's ordering.
    fn counted_read(
        &self,
        bytes: usize,
        read: impl FnOnce() -> Result<(), DiskError>,
    ) -> Result<(), DiskError> {
        let started = self.counters.reads_started.fetch_add(1, Ordering::SeqCst) + 1;
        let result = read();
        // A read promise's next chunk may start reading (this thread waits until it has).
        crate::promise::disk_read_done(|| {
            self.counters.reads_started.load(Ordering::SeqCst) > started
        });
        result?;
        self.counters
            .physical_read
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.counters.errors_in_a_row.store(0, Ordering::Relaxed);
        Ok(())
    }
}

impl Disk for CountingDisk {
    fn capacity_bytes(&self) -> u64 {
        self.inner.capacity_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let bytes = buf.len();
        self.counted_read(bytes, || self.inner.read_at(offset, buf))
    }
    /// One disk read for a read promise's ordering (its next chunk starts after all the ranges).
    fn read_ranges_at(&self, ranges: &mut [(u64, &mut [u8])]) -> Result<(), DiskError> {
        let bytes = ranges.iter().map(|(_, buf)| buf.len()).sum();
        self.counted_read(bytes, || self.inner.read_ranges_at(ranges))
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        self.inner.write_at(offset, buf)?;
        self.counters
            .physical_written
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.counters.errors_in_a_row.store(0, Ordering::Relaxed);
        Ok(())
    }
    fn sync(&self) -> Result<(), DiskError> {
        self.inner.sync()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Stands in for a disk that could not be opened: every I/O fails.
pub(crate) struct MissingDisk {
    pub name: String,
    pub capacity_bytes: u64,
}

impl Disk for MissingDisk {
    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
    fn read_at(&self, _offset: u64, _buf: &mut [u8]) -> Result<(), DiskError> {
        Err(DiskError::Failed {
            disk: self.name.clone(),
        })
    }
    fn write_at(&self, _offset: u64, _buf: &[u8]) -> Result<(), DiskError> {
        Err(DiskError::Failed {
            disk: self.name.clone(),
        })
    }
    fn sync(&self) -> Result<(), DiskError> {
        Err(DiskError::Failed {
            disk: self.name.clone(),
        })
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// One opened disk of the grid.
pub(crate) struct DiskSlot {
    /// The logical space (powered).
    pub idr: IdrDisk,
    pub name: String,
}

impl DiskSlot {
    pub(crate) fn build(
        backend: Arc<dyn Disk>,
        counters: Arc<IoCounters>,
        power: &Arc<PowerManager>,
        index: usize,
        idr: permafrost_idr::IdrConfig,
    ) -> Result<DiskSlot, permafrost_idr::IdrError> {
        let name = backend.describe();
        let raw: Arc<dyn Disk> = Arc::new(CountingDisk {
            inner: backend,
            counters,
        });
        let powered: Arc<dyn Disk> =
            Arc::new(PoweredDisk::new(Arc::clone(&raw), Arc::clone(power), index));
        let idr = IdrDisk::new(powered, crate::header::HEADER_BYTES, idr)?;
        Ok(DiskSlot { idr, name })
    }
}
