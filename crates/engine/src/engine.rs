//! The engine: an open grid ([`Engine`] and its public API) and the machinery its parts share ([`Shared`]: disk
//! slots, the journal, the in-memory maps, the lock manager, the delta cache, waking the background threads).
//!
//! The parts, one module per concept (each opens with the invariants it keeps):
//! - `open`: create and open a grid, replay on open, start and stop the background threads.
//! - `state`: the journal-backed per-disk state (written map, defects, ages, scrub cursor, failure).
//! - `io`: the true content of disk ranges (check on read, untrusted zeros) and a reader's chunk.
//! - `reconstruct`: a range's content from the grid (smaller intact group, peel plan) in bounded pieces.
//! - `write`: one chunk of a write promise, common to every mode; the modes in `write_direct`,
//!   `write_serialized` and `write_delayed` (with the Cache2Disk drain of parity deltas).
//! - `replay`: settling journal rows after a crash or an I/O error.
//! - `recovery`: recovering defect ranges (background task, `recover_defects`, a rebuild's run).
//! - `rebuild`: replacing a disk (a rebuild is then a recovery run).
//! - `scrub`: spin-up slices and overdue scrubs. `verify`: verify-parity.
//!
//! **Invariants kept here.**
//! - The in-memory maps change only after the journal committed (see `state`).
//! - Lock order: a set of range locks is acquired atomically (no hold-and-wait), power guards only after range
//!   locks, never range locks while holding guards.
//! - A read or write promise is checked (engine open, bucket exists, range aligned and inside the disk) before
//!   any disk is touched, and a bad request gets an error naming what was wrong.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use permafrost_disk::power::{PowerManager, PowerProfile, PowerState, PowerStats};
use permafrost_disk::Disk;
use permafrost_grid::{Geometry, Role};
use permafrost_idr::ScrubReport;
use serde::Serialize;

use crate::ages::RangeAges;
use crate::config::{DiskSpec, GridConfig, WriteMode};
use crate::delta::DeltaCache;
use crate::disks::{DiskSlot, IoCounters, IoStats};
use crate::journal::{now_ms, Journal, ScrubRow};
use crate::locks::{LockGuard, LockManager, RangeLock};
use crate::promise::{ReadPromise, WritePromise};
use crate::rangeset::RangeSet;
use crate::{Error, Result};

mod add_group;
mod evacuate;
mod grow;
mod io;
mod open;
mod rebuild;
mod reconstruct;
mod recovery;
mod replay;
mod scrub;
mod state;
mod swap_parity;
mod verify;
mod write;
mod write_delayed;
mod write_direct;
mod write_serialized;

/// Name of the journal file inside a grid directory.
pub(crate) const JOURNAL_FILE: &str = "journal.sqlite";
/// Failed operations in a row (no read or write of the disk succeeding in between) after which a disk is marked
/// failed.
const IO_ERRORS_MAX: u32 = 3;
/// Poll interval of the background threads.
const POLL_MS: u64 = 20;
/// How often a long-running engine saves its disks' power counters to the journal (they are saved on close too).
const POWER_SAVE_INTERVAL: Duration = Duration::from_secs(60);
/// Largest range one reconstruction works on. Its memory is this times (sources read at once + disks rebuilt on
/// the way), plus one IDR batch buffer per source read at once, whatever the recovery chunk; a recovery adds the
/// one piece being written (8x6:4+1, one failed disk: 5 pieces = 20 MiB; 3 failed disks: ~34 MiB measured).
/// 8 MiB pieces were no faster (measured); 4 MiB per source is one 4.3 MiB disk read.
const RECONSTRUCT_PIECE_BYTES_MAX: u64 = 4 << 20;

/// Wraps each disk as it is opened (tests insert `FaultyDisk` here): `(disk index, disk) -> disk`.
pub type WrapDisk = Box<dyn Fn(usize, Arc<dyn Disk>) -> Arc<dyn Disk> + Send + Sync>;

/// Options of [`Engine::open_with`].
#[derive(Default)]
pub struct OpenOptions {
    /// Wrap each disk's backend (below the power model and the IDR).
    pub wrap_disk: Option<WrapDisk>,
    /// Use this power profile instead of the one in `grid.toml`.
    pub power_profile: Option<PowerProfile>,
}

/// Points where the test hook [`Engine::set_crash_point`] stops a write or drain as if the process died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// The promise row is journaled with the data disk started; nothing written.
    DataStarted,
    /// Half of the data disk's range is written.
    DataHalfWritten,
    /// The data disk is written and synced; its finish mark is not set.
    DataWritten,
    /// The data disk's finish mark is set; no parity disk touched (serialized, delayed: delta only in its file).
    DataFinished,
    /// Half of the first parity disk's range is written (serialized: `hP`; direct: all three).
    ParityHalfWritten,
    /// The drain set its start marks and wrote half of its first region.
    DrainHalfWritten,
    /// An evacuation copied its first recovery chunk (journaled) and starts the next one.
    EvacuationCopied,
    /// A parity swap stopped after this step (`SwapParity::crash_after`).
    ParitySwap(swap_parity::SwapStep),
    /// Adding a parity group stopped after this step (`AddGroup::crash_after`).
    AddGroup(add_group::AddGroupStep),
}

/// A range of a parity disk that is not the XOR of its group's members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParityMismatch {
    pub parity_disk: usize,
    /// The parity group, e.g. `hPG 3` or `vPG 5`.
    pub group: String,
    /// Logical offset and length on every member.
    pub offset: u64,
    pub len: u64,
}

/// What [`Engine::verify_parity`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ParityReport {
    /// Every range whose parity does not match its members.
    pub mismatches: Vec<ParityMismatch>,
    /// Logical bytes of parity compared.
    pub bytes_checked: u64,
    /// Parity groups skipped because a member is failed.
    pub groups_skipped: usize,
}

/// What [`Engine::scrub_overdue`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OverdueScrubReport {
    /// Ranges `(disk, offset, length)` of written data last known good before the cutoff (or never verified), all
    /// scrubbed now.
    pub ranges: Vec<(usize, u64, u64)>,
    /// Logical bytes verified.
    pub bytes_verified: u64,
    /// Blocks IDR repaired.
    pub blocks_repaired: u64,
    /// Check blocks IDR rewrote.
    pub check_blocks_repaired: u64,
    /// Ranges `(disk, offset, length)` IDR could not repair: now defect, recovered from the grid.
    pub unrecoverable: Vec<(usize, u64, u64)>,
}

/// What a recovery run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// Bytes this run recovered and wrote back.
    pub bytes_recovered: u64,
    /// Bytes of the same disks recovered by others while the run went on (never twice: every recovery re-checks
    /// the defects under its locks): a background chunk or another run in flight when the run started, and ranges
    /// a writer needed first. `bytes_recovered` plus this is everything recovered on the disks during the run.
    pub bytes_recovered_concurrently: u64,
    /// Ranges `(disk, offset, length)` that could not be recovered now (they stay defect).
    pub unrecoverable: Vec<(usize, u64, u64)>,
}

/// State of one disk for [`Engine::status`].
#[derive(Debug, Clone, Serialize)]
pub struct DiskStatus {
    pub index: usize,
    pub name: String,
    pub role: Role,
    pub power_state: PowerState,
    pub power: PowerStats,
    pub failed: bool,
    pub defect_bytes: u64,
    pub written_bytes: u64,
    pub pending_delta_bytes: u64,
    pub io: IoStats,
    /// When the last full scrub pass finished (ms since the epoch, 0 = never).
    pub last_scrub_pass_ms: u64,
    /// Where the next slice scrubbed on spin-up starts (logical bytes).
    pub scrub_cursor_bytes: u64,
    /// When the longest-unverified written range was last known good — scrubbed, or written (ms since the epoch;
    /// 0 = some written range was never verified; `None` = nothing written).
    pub verified_oldest_ms: Option<u64>,
}

/// State of the grid for [`Engine::status`].
#[derive(Debug, Clone, Serialize)]
pub struct GridStatus {
    pub grid_id: String,
    pub layout: String,
    /// 0 as created, +1 for every data disk added since (`Engine::add_disk`).
    pub geometry_version: u64,
    /// The layout and the disks added to it, e.g. `8x6:4+1 +1 disk (hPG 0 col 5)`.
    pub geometry: String,
    pub buckets: usize,
    pub bucket_capacity_bytes: u64,
    pub disks: Vec<DiskStatus>,
    pub pending_delta_bytes: u64,
    pub open_promises: u64,
    pub journal_rows: u64,
    /// WAL syncs of the journal since the engine opened (group commit: one covers every commit before it).
    pub journal_syncs: u64,
    pub spinning_now: usize,
    pub max_spinning_seen: usize,
    /// Evacuations of disks (copying, or retired old disks), from `evacuations.json`.
    pub evacuations: Vec<evacuate::Evacuation>,
    /// Parity swaps (in progress, or done), from `parity_swaps.json`.
    pub parity_swaps: Vec<swap_parity::ParitySwap>,
}

/// In-memory copies of the journal's per-disk state (updated only after the journal committed).
struct Maps {
    /// Written map in stripe units.
    written: Vec<RangeSet>,
    /// Defect ranges in bytes (stripe aligned).
    defects: Vec<RangeSet>,
    failed: Vec<bool>,
    scrub: Vec<ScrubRow>,
    /// When each range was last known good (bytes).
    ages: Vec<RangeAges>,
}

pub use add_group::{AddGroup, AddGroupPhase, AddGroupStep, AddedGroupReport};
pub use evacuate::{Evacuation, EvacuationReport, EvacuationState, EVACUATIONS_FILE};
pub use grow::{AddDisk, AddedDiskReport};
pub use swap_parity::{
    ParitySwap, ParitySwapReport, SwapParity, SwapState, SwapStep, PARITY_SWAPS_FILE,
};

pub(crate) struct Shared {
    /// Old disks being evacuated, read by the recovery of their replacements (`evacuate`).
    evacuation_sources: evacuate::EvacuationSources,
    pub dir: PathBuf,
    pub config: RwLock<GridConfig>,
    /// The geometry, grown in place by `add_disk_live` (`grow::GeometryCell`: only ever grows).
    pub geometry: grow::GeometryCell,
    pub power: Arc<PowerManager>,
    /// One per disk of the geometry (a replacement swaps one, `add_disk_live` appends one).
    slots: RwLock<Vec<Arc<DiskSlot>>>,
    /// This and the other per-disk vectors below (drain and recovery mutexes, recovered bytes, readers, power
    /// base) have an entry for every disk index a grid may grow to (`Layout::MAX_DISKS`), so growing the grid
    /// never moves what threads index without a lock.
    counters: Vec<Arc<IoCounters>>,
    /// Logical bytes of every disk's IDR space (the bucket capacity).
    pub logical_bytes: u64,
    pub stripe_bytes: u64,
    journal: Journal,
    locks: Arc<LockManager>,
    deltas: DeltaCache,
    drain_mutexes: Vec<Mutex<()>>,
    /// Held by a recovery of a disk's defects: a whole run (`rebuild`, `recover_defects`) or one background
    /// chunk. The background task skips a disk whose mutex is taken.
    recovery_mutexes: Vec<Mutex<()>>,
    /// Bytes recovered (written back, synced and journaled) per disk since the engine opened, by any recovery.
    bytes_recovered: Vec<AtomicU64>,
    maps: Mutex<Maps>,
    next_txn: AtomicU64,
    stop: AtomicBool,
    paused: AtomicBool,
    crash_point: Mutex<Option<CrashPoint>>,
    /// Set when a test crash point fired (`crash_at`): from then on no thread starts another step under range
    /// locks, as in a killed process (`Shared::check_crashed`).
    crashed: AtomicBool,
    /// Wakes the background threads (defects added, deltas added, stop).
    wake: Condvar,
    wake_mutex: Mutex<()>,
    scrub_queue: Mutex<VecDeque<usize>>,
    /// Read promises open per disk: the spin-up scrub slice of a disk waits while a reader streams from it.
    pub(crate) readers: Vec<AtomicUsize>,
    /// Where the open read promises end, so one opened where another ends reads after it.
    pub(crate) read_tails: crate::promise::ReadTails,
    /// The caller's disk wrapper, applied to replacement disks too.
    wrap_disk: Option<WrapDisk>,
    /// Power counters of earlier processes (from the journal); this process's are added on top.
    power_base: Vec<PowerStats>,
    /// Held while the grid grows (`add_disk_live`) or a disk is replaced: both change `config.disks`.
    grow_mutex: Mutex<()>,
}

/// An open grid. Cheap to share by reference across threads (`&Engine` is `Send + Sync`).
pub struct Engine {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Threads stopped and power counters saved (by `close` or `drop`).
    closed: AtomicBool,
}

fn align_down(x: u64, unit: u64) -> u64 {
    x / unit * unit
}
fn align_up(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

impl Engine {
    /// The grid's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.shared.geometry
    }

    /// Number of buckets (data disks).
    pub fn buckets(&self) -> usize {
        self.shared.geometry.buckets()
    }

    /// Logical bytes of every bucket.
    pub fn bucket_capacity_bytes(&self) -> u64 {
        self.shared.logical_bytes
    }

    /// The IDR stripe: the unit of the written map, of defects and of locks.
    pub fn stripe_bytes(&self) -> u64 {
        self.shared.stripe_bytes
    }

    /// The configuration in effect.
    pub fn config(&self) -> GridConfig {
        self.shared.config.read().clone()
    }

    /// The power manager (power states, stats, budget) of the grid's disks.
    pub fn power(&self) -> &Arc<PowerManager> {
        &self.shared.power
    }

    /// Start a write promise of `len` bytes at `offset` of `bucket` (both multiples of 4096).
    pub fn write(
        &self,
        bucket: usize,
        offset: u64,
        len: u64,
        mode: WriteMode,
    ) -> Result<WritePromise> {
        let disk = self.shared.check_bucket_range(bucket, offset, len)?;
        if self.shared.is_failed(disk) {
            return Err(Error::DiskFailed {
                disk,
                message: format!(
                    "bucket {bucket} cannot be written until it is replaced and rebuilt"
                ),
            });
        }
        Ok(WritePromise::new(
            Arc::clone(&self.shared),
            disk,
            offset,
            len,
            mode,
        ))
    }

    /// Start a read promise of `len` bytes at `offset` (a multiple of 4096) of `bucket`.
    pub fn read(&self, bucket: usize, offset: u64, len: u64) -> Result<ReadPromise> {
        let disk = self.shared.check_bucket_range(bucket, offset, len)?;
        Ok(ReadPromise::new(
            Arc::clone(&self.shared),
            disk,
            offset,
            len,
        ))
    }

    /// Apply every pending parity delta (spinning up the parity disks concerned).
    pub fn flush(&self) -> Result<()> {
        for disk in self.shared.deltas.disks_with_pending() {
            self.shared.drain(disk)?;
        }
        Ok(())
    }

    /// Wait until the parity of write `txn_id` is durable on all its parity disks (draining them now).
    pub fn wait_persisted(&self, txn_id: u64) -> Result<()> {
        for disk in self.shared.deltas.pending_disks_of(txn_id) {
            self.shared.drain(disk)?;
        }
        Ok(())
    }

    /// Mark disk `disk` failed (operator action): it is never read or written again until replaced.
    pub fn fail_disk(&self, disk: usize) -> Result<()> {
        self.shared.check_disk(disk)?;
        self.shared.mark_failed(disk, "failed by the operator")
    }

    /// Replace disk `disk` by a fresh one (`spec`, or a new empty file at the configured path), write its header
    /// and mark every range it must hold defect; [`Engine::rebuild`] (or the background recovery) fills it.
    pub fn replace_disk(&self, disk: usize, spec: Option<DiskSpec>) -> Result<()> {
        self.shared.replace_disk(disk, spec)
    }

    /// Recover every defect range of `disk` now, reporting progress in bytes.
    pub fn rebuild(&self, disk: usize, progress: &dyn Fn(u64, u64)) -> Result<RecoveryReport> {
        self.shared.check_disk(disk)?;
        if self.shared.is_failed(disk) {
            return Err(Error::DiskFailed {
                disk,
                message: "replace it (replace_disk) before rebuilding".into(),
            });
        }
        self.shared.recover_disk(disk, progress)
    }

    /// Recover every defect range of every live disk now.
    pub fn recover_defects(&self) -> Result<RecoveryReport> {
        let mut report = RecoveryReport::default();
        for disk in 0..self.shared.geometry.disks() {
            if !self.shared.is_failed(disk) {
                match self.shared.recover_disk(disk, &|_, _| {}) {
                    Ok(r) => {
                        report.bytes_recovered += r.bytes_recovered;
                        report.bytes_recovered_concurrently += r.bytes_recovered_concurrently;
                        report.unrecoverable.extend(r.unrecoverable);
                    }
                    // The disk failed on the way: it will be rebuilt; the other disks still need recovery.
                    Err(_) if self.shared.is_failed(disk) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(report)
    }

    /// Verify (IDR check, repairing what IDR can) the written parts of `[offset, offset+len)` of `disk`'s logical
    /// space; ranges IDR cannot repair become defect (recovered from the grid in the background).
    pub fn scrub(&self, disk: usize, offset: u64, len: u64) -> Result<ScrubReport> {
        self.shared.check_disk(disk)?;
        if !offset.is_multiple_of(4096)
            || !len.is_multiple_of(4096)
            || offset.saturating_add(len) > self.shared.logical_bytes
        {
            return Err(Error::InvalidArgument(format!(
                "scrub range {offset}+{len} must be 4096-aligned and inside the disk's {} logical bytes",
                self.shared.logical_bytes
            )));
        }
        self.shared.scrub_range(disk, offset, offset + len)
    }

    /// The deliberate scrub: verify now every written range last known good (scrubbed, or written) `max_age` ago
    /// or longer, or never (`Duration::ZERO`: everything written), on every live disk, spinning the disks up as needed. With
    /// `GridConfig::scrub_overdue_after_ms` set, the background scrub does the same on its own, a chunk at a time.
    pub fn scrub_overdue(&self, max_age: Duration) -> Result<OverdueScrubReport> {
        let cutoff = now_ms().saturating_sub(max_age.as_millis() as u64);
        let mut report = OverdueScrubReport::default();
        for (disk, start, end, _) in self.shared.overdue_ranges(cutoff) {
            let scrubbed = self.shared.scrub_range(disk, start, end)?;
            report.ranges.push((disk, start, end - start));
            report.bytes_verified += scrubbed.bytes_verified;
            report.blocks_repaired += scrubbed.blocks_repaired;
            report.check_blocks_repaired += scrubbed.check_blocks_repaired;
            report.unrecoverable.extend(
                scrubbed
                    .unrecoverable
                    .into_iter()
                    .map(|(offset, len)| (disk, offset, len)),
            );
        }
        Ok(report)
    }

    /// Recompute every parity disk from its group's members over all written ranges and report mismatches.
    pub fn verify_parity(&self, progress: &dyn Fn(u64, u64)) -> Result<ParityReport> {
        self.shared.verify_parity(progress)
    }

    /// Bytes moved per disk, by disk index.
    pub fn io_stats(&self) -> Vec<IoStats> {
        self.shared.counters[..self.shared.geometry.disks()]
            .iter()
            .map(|c| c.snapshot())
            .collect()
    }

    /// Zero the I/O counters.
    pub fn reset_io_stats(&self) {
        self.shared.counters[..self.shared.geometry.disks()]
            .iter()
            .for_each(|c| c.reset());
    }

    /// The grid's state.
    pub fn status(&self) -> Result<GridStatus> {
        let s = &self.shared;
        let config = s.config.read().clone();
        let maps = s.maps.lock();
        let disks = (0..s.geometry.disks())
            .map(|d| DiskStatus {
                index: d,
                name: s.slot(d).name.clone(),
                role: s.geometry.role(d),
                power_state: s.power.state(d),
                power: s.power_stats(d),
                failed: maps.failed[d],
                defect_bytes: maps.defects[d].total(),
                written_bytes: maps.written[d].total() * s.stripe_bytes,
                pending_delta_bytes: s.deltas.pending_bytes_of(d),
                io: s.counters[d].snapshot(),
                last_scrub_pass_ms: maps.scrub[d].last_pass_ms,
                scrub_cursor_bytes: maps.scrub[d].cursor,
                verified_oldest_ms: {
                    let written = s.written_bytes_of(&maps, d);
                    written
                        .iter()
                        .flat_map(|&(ws, we)| maps.ages[d].older_than(ws, we, u64::MAX))
                        .map(|(_, _, ms)| ms)
                        .min()
                },
            })
            .collect();
        drop(maps);
        Ok(GridStatus {
            grid_id: config.grid_id.to_string(),
            layout: config.layout.to_string(),
            geometry_version: s.geometry.version(),
            geometry: s.geometry.describe(),
            buckets: s.geometry.buckets(),
            bucket_capacity_bytes: s.logical_bytes,
            disks,
            pending_delta_bytes: s.deltas.pending_bytes(),
            open_promises: s.journal.promise_count()?,
            journal_rows: s.journal.row_count()?,
            journal_syncs: s.journal.syncs(),
            spinning_now: s.power.spinning_now(),
            max_spinning_seen: s.power.max_spinning_seen(),
            evacuations: evacuate::evacuations(&s.dir)?,
            parity_swaps: swap_parity::parity_swaps(&s.dir)?,
        })
    }

    /// Is `disk` marked failed?
    pub fn is_failed(&self, disk: usize) -> bool {
        self.shared.is_failed(disk)
    }

    /// Defect bytes of `disk` (ranges waiting for recovery).
    pub fn defect_bytes(&self, disk: usize) -> u64 {
        self.shared
            .maps
            .lock()
            .defects
            .get(disk)
            .map_or(0, |d| d.total())
    }

    /// Test hook: make the next write or drain that reaches `point` stop there as if the process died: from then
    /// on no thread of the engine starts another step under range locks (see `Shared::check_crashed`), and the
    /// power counters are not saved; it must be dropped and reopened.
    #[doc(hidden)]
    pub fn set_crash_point(&self, point: Option<CrashPoint>) {
        *self.shared.crash_point.lock() = point;
    }

    /// Test hook: pause or resume the background threads (recovery, drains, scrub) so tests can observe
    /// pending states deterministically.
    #[doc(hidden)]
    pub fn pause_background(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::SeqCst);
        self.shared.wake.notify_all();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Shared: the machinery.

impl Shared {
    pub(crate) fn slot(&self, disk: usize) -> Arc<DiskSlot> {
        Arc::clone(&self.slots.read()[disk])
    }

    pub(crate) fn is_failed(&self, disk: usize) -> bool {
        self.maps.lock().failed[disk]
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn check_disk(&self, disk: usize) -> Result<()> {
        if disk >= self.geometry.disks() {
            return Err(Error::InvalidArgument(format!(
                "disk {disk} does not exist: the grid has {} disks",
                self.geometry.disks()
            )));
        }
        Ok(())
    }

    fn check_bucket_range(&self, bucket: usize, offset: u64, len: u64) -> Result<usize> {
        if self.stopped() {
            return Err(Error::Closed);
        }
        if bucket >= self.geometry.buckets() {
            return Err(Error::InvalidArgument(format!(
                "bucket {bucket} does not exist: the grid has {} buckets",
                self.geometry.buckets()
            )));
        }
        if !offset.is_multiple_of(4096) {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} is not a multiple of 4096"
            )));
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.logical_bytes)
        {
            return Err(Error::InvalidArgument(format!(
                "range {offset}+{len} is outside bucket {bucket} ({} bytes)",
                self.logical_bytes
            )));
        }
        Ok(self.geometry.bucket_disk(bucket))
    }

    pub(crate) fn chunk_bytes_max(&self) -> u64 {
        self.config.read().chunk_bytes_max
    }

    pub(crate) fn readahead_chunks(&self) -> usize {
        self.config.read().readahead_chunks
    }

    /// Stop at `point` if it is the armed crash point. Every other writer of disks or journal (write chunks,
    /// drains, scrub, recovery) then stops at its next `check_crashed`, right after it takes its range locks. The
    /// flag is set before this returns, so before the crashed writer lets go of its range locks: a thread that
    /// takes them afterwards always sees it.
    fn crash_at(&self, point: CrashPoint) -> Result<()> {
        let mut armed = self.crash_point.lock();
        if *armed == Some(point) {
            *armed = None;
            self.crashed.store(true, Ordering::SeqCst);
            self.stop.store(true, Ordering::SeqCst);
            self.wake.notify_all();
            return Err(Error::SimulatedCrash(point));
        }
        Ok(())
    }

    /// Has a test crash point fired?
    pub(crate) fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// `Err(Closed)` once a test crash point fired. Writers of disks or journal call it right after taking their
    /// range locks, before any disk write or journal step under them: a crashed writer's locks are released with
    /// its row still open, and what lies under them may be half written; a killed process never acts on that. A
    /// thread that already held its locks when the crash fired finishes the step under them (as if the crash came
    /// a moment later) and takes no further locks.
    pub(crate) fn check_crashed(&self) -> Result<()> {
        if self.crashed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Wake the background threads.
    pub(crate) fn notify(&self) {
        self.wake.notify_all();
    }

    fn sleep_until_woken(&self, ms: u64) {
        let mut guard = self.wake_mutex.lock();
        if !self.stopped() {
            self.wake.wait_for(&mut guard, Duration::from_millis(ms));
        }
    }

    fn stripe_range(&self, start: u64, end: u64) -> (u64, u64) {
        (
            align_down(start, self.stripe_bytes),
            align_up(end, self.stripe_bytes).min(self.logical_bytes),
        )
    }

    fn lock(&self, set: Vec<RangeLock>) -> LockGuard {
        self.locks.acquire(set)
    }

    /// `target` in `mode` plus every other disk shared, over `[start, end)`.
    fn lock_all(&self, target: usize, exclusive: bool, start: u64, end: u64) -> LockGuard {
        let set = (0..self.geometry.disks())
            .map(|d| {
                if d == target && exclusive {
                    RangeLock::exclusive(d, start, end)
                } else {
                    RangeLock::shared(d, start, end)
                }
            })
            .collect();
        self.lock(set)
    }
}
