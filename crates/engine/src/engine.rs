//! The engine: opening a grid, the true content of disk ranges, reconstruction, writes per mode, the
//! Cache2Disk drain, replay, recovery, rebuild, scrub and verify-parity.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use permafrost_disk::power::{PowerManager, PowerProfile, PowerState, PowerStats};
use permafrost_disk::{BlockDisk, Disk, DiskError, FileDisk};
use permafrost_grid::{Geometry, Role};
use permafrost_idr::{IdrError, ScrubReport};
use serde::Serialize;

use crate::ages::RangeAges;
use crate::config::{DiskSpec, GridConfig, WriteMode, CONFIG_FILE};
use crate::delta::{delta_dir, Delta, DeltaCache, Snapshot};
use crate::disks::{DiskSlot, IoCounters, IoStats, MissingDisk};
use crate::header::DiskHeader;
use crate::journal::{now_ms, Journal, Mark, PromiseRow, RangeTable, ScrubRow, Slot, PARITY_SLOTS};
use crate::locks::{LockGuard, LockManager, RangeLock};
use crate::promise::{ReadPromise, WritePromise};
use crate::rangeset::RangeSet;
use crate::{Error, Result};

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
    pub buckets: usize,
    pub bucket_capacity_bytes: u64,
    pub disks: Vec<DiskStatus>,
    pub pending_delta_bytes: u64,
    pub open_promises: u64,
    pub journal_rows: u64,
    pub spinning_now: usize,
    pub max_spinning_seen: usize,
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

pub(crate) struct Shared {
    pub dir: PathBuf,
    pub config: RwLock<GridConfig>,
    pub geometry: Geometry,
    pub power: Arc<PowerManager>,
    slots: Vec<RwLock<Arc<DiskSlot>>>,
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
    /// Wakes the background threads (defects added, deltas added, stop).
    wake: Condvar,
    wake_mutex: Mutex<()>,
    scrub_queue: Mutex<VecDeque<usize>>,
    /// The caller's disk wrapper, applied to replacement disks too.
    wrap_disk: Option<WrapDisk>,
    /// Power counters of earlier processes (from the journal); this process's are added on top.
    power_base: Vec<PowerStats>,
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

/// Piece buffers handed back for reuse within one recovery chunk or one degraded read, so that every piece does not
/// fault in and clear fresh pages (that was a third of a rebuild's CPU time). It holds only buffers given back and
/// frees them when dropped: never more than the most in use at once. Contents of a taken buffer are unspecified.
#[derive(Default)]
struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = self.free.lock().pop().unwrap_or_default();
        buf.resize(len, 0);
        buf
    }

    fn give(&self, buf: Vec<u8>) {
        self.free.lock().push(buf);
    }
}

enum ReadFail {
    /// The disk is failed (or failed during the read).
    Failed,
    /// These ranges could not be read or verified (or are defect).
    Ranges(Vec<(u64, u64)>),
}

impl Engine {
    /// Create a new grid in `dir` (which must not hold a `grid.toml`): create missing file disks, write every
    /// disk's header, the configuration and an empty journal; then open it.
    pub fn create(dir: impl AsRef<Path>, config: GridConfig) -> Result<Engine> {
        let dir = dir.as_ref();
        config.validate()?;
        let geometry = Geometry::new(config.layout).map_err(|e| Error::Config(e.to_string()))?;
        if dir.join(CONFIG_FILE).exists() {
            return Err(Error::Config(format!(
                "{} already holds a grid ({CONFIG_FILE} exists)",
                dir.display()
            )));
        }
        let io = |e: std::io::Error| Error::Io(format!("cannot create {}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        for (index, spec) in config.disks.iter().enumerate() {
            let path = spec.resolved_path(dir);
            let disk: Arc<dyn Disk> = match spec {
                DiskSpec::File { capacity_bytes, .. } => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(io)?;
                    }
                    if path.exists() {
                        let disk = FileDisk::open(&path)?;
                        if disk.capacity_bytes() != *capacity_bytes {
                            return Err(Error::Header {
                                disk: index,
                                name: path.display().to_string(),
                                message: format!(
                                    "existing file has {} bytes, configuration says {capacity_bytes}",
                                    disk.capacity_bytes()
                                ),
                            });
                        }
                        Arc::new(disk)
                    } else {
                        Arc::new(FileDisk::create(&path, *capacity_bytes)?)
                    }
                }
                DiskSpec::Block { .. } => Arc::new(BlockDisk::open(&path)?),
            };
            // Never claim a drive of a grid: its data would be lost silently. A blank (or wiped) drive is fine.
            // (File disks are this directory's own: without its grid.toml, they are leftovers of a create
            // that did not finish.)
            let is_block = matches!(spec, DiskSpec::Block { .. });
            if let (true, Ok(Some(existing))) = (is_block, DiskHeader::read(disk.as_ref())) {
                return Err(Error::Header {
                    disk: index,
                    name: path.display().to_string(),
                    message: format!(
                        "already holds disk {} of grid {}; wipe its first {} bytes to reuse it",
                        existing.disk_index,
                        existing.grid_id,
                        crate::HEADER_BYTES
                    ),
                });
            }
            DiskHeader::new(
                config.grid_id,
                &geometry,
                index,
                disk.capacity_bytes(),
                config.idr,
            )
            .write(disk.as_ref())?;
        }
        Journal::open(&dir.join(JOURNAL_FILE))?;
        std::fs::create_dir_all(delta_dir(dir)).map_err(io)?;
        config.save(dir)?;
        Engine::open(dir)
    }

    /// Open the grid in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Engine> {
        Engine::open_with(dir, OpenOptions::default())
    }

    /// Open the grid in `dir` with options: validate every disk's header (a disk that cannot be opened or read is
    /// opened as *failed*; a disk of another grid, at a wrong position or of a wrong size is an error), replay
    /// the journal, start the background threads.
    pub fn open_with(dir: impl AsRef<Path>, options: OpenOptions) -> Result<Engine> {
        Engine::open_inner(dir.as_ref(), options, false)
    }

    /// Test hook: [`Engine::open_with`] with the background threads paused from the start (as after
    /// [`Engine::pause_background`]`(true)`), so a simulation decides when recovery and drains run.
    #[doc(hidden)]
    pub fn open_paused(dir: impl AsRef<Path>, options: OpenOptions) -> Result<Engine> {
        Engine::open_inner(dir.as_ref(), options, true)
    }

    fn open_inner(dir: &Path, options: OpenOptions, paused: bool) -> Result<Engine> {
        let dir = dir.to_path_buf();
        let config = GridConfig::load(&dir)?;
        let geometry = Geometry::new(config.layout).map_err(|e| Error::Config(e.to_string()))?;
        let n = geometry.disks();
        let profile = options
            .power_profile
            .clone()
            .unwrap_or_else(|| config.power.clone());
        let controllers = config
            .disks
            .iter()
            .map(|spec| spec.power_controller(&dir))
            .collect::<Result<Vec<_>>>()?;
        let power = PowerManager::new(profile, n, config.spinning_max, controllers)?;
        let journal = Journal::open(&dir.join(JOURNAL_FILE))?;
        let version = journal.schema_version()?;
        if version != crate::journal::SCHEMA_VERSION {
            return Err(Error::Config(format!(
                "{JOURNAL_FILE} has schema version {version}; this engine reads version {}",
                crate::journal::SCHEMA_VERSION
            )));
        }
        let failed_in_journal: HashMap<usize, String> =
            journal.failed_disks()?.into_iter().collect();

        let counters: Vec<Arc<IoCounters>> =
            (0..n).map(|_| Arc::new(IoCounters::default())).collect();
        let mut backends: Vec<Option<Arc<dyn Disk>>> = Vec::with_capacity(n);
        let mut failed = vec![false; n];
        let mut newly_failed = Vec::new();
        for (index, spec) in config.disks.iter().enumerate() {
            match open_backend(&dir, &config, &geometry, index, spec, &options)? {
                Some(disk) => backends.push(Some(disk)),
                None => {
                    backends.push(None);
                    failed[index] = true;
                    if !failed_in_journal.contains_key(&index) {
                        newly_failed.push(index);
                    }
                }
            }
            if failed_in_journal.contains_key(&index) {
                failed[index] = true;
            }
        }
        let capacity = backends
            .iter()
            .flatten()
            .map(|d| d.capacity_bytes())
            .max()
            .unwrap_or_else(|| {
                config
                    .disks
                    .iter()
                    .map(|s| {
                        if let DiskSpec::File { capacity_bytes, .. } = s {
                            *capacity_bytes
                        } else {
                            0
                        }
                    })
                    .max()
                    .unwrap_or(0)
            });
        let mut slots = Vec::with_capacity(n);
        for (index, backend) in backends.into_iter().enumerate() {
            let backend = backend.unwrap_or_else(|| {
                Arc::new(MissingDisk {
                    name: config.disks[index]
                        .resolved_path(&dir)
                        .display()
                        .to_string(),
                    capacity_bytes: capacity,
                })
            });
            let slot = DiskSlot::build(
                backend,
                Arc::clone(&counters[index]),
                &power,
                index,
                config.idr,
            )?;
            slots.push(slot);
        }
        let logical_bytes = slots
            .iter()
            .map(|s| s.idr.logical_capacity())
            .min()
            .unwrap_or(0);
        let stripe_bytes = slots[0].idr.stripe_bytes();
        if config.chunk_bytes_max % stripe_bytes != 0
            || config.recovery_chunk_bytes_max % stripe_bytes != 0
        {
            return Err(Error::Config(format!(
                "chunk_bytes_max and recovery_chunk_bytes_max must be multiples of the IDR stripe ({stripe_bytes} bytes)"
            )));
        }
        let written = journal.ranges(RangeTable::Written, n)?;
        let defects = journal.ranges(RangeTable::Defects, n)?;
        let scrub = journal.scrub_rows(n)?;
        let ages = journal.ages(n)?;
        let power_base = journal.power(n)?;
        let next_txn = journal.next_txn()?;
        let deltas =
            DeltaCache::new(delta_dir(&dir), config.delta_cache_bytes_max).map_err(|e| {
                Error::Io(format!(
                    "cannot open the delta cache in {}: {e}",
                    delta_dir(&dir).display()
                ))
            })?;
        let shared = Arc::new(Shared {
            dir,
            geometry,
            power: Arc::clone(&power),
            slots: slots
                .into_iter()
                .map(|s| RwLock::new(Arc::new(s)))
                .collect(),
            counters,
            logical_bytes,
            stripe_bytes,
            journal,
            locks: LockManager::new(),
            deltas,
            drain_mutexes: (0..n).map(|_| Mutex::new(())).collect(),
            recovery_mutexes: (0..n).map(|_| Mutex::new(())).collect(),
            bytes_recovered: (0..n).map(|_| AtomicU64::new(0)).collect(),
            maps: Mutex::new(Maps {
                written,
                defects,
                failed,
                scrub,
                ages,
            }),
            next_txn: AtomicU64::new(next_txn),
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            crash_point: Mutex::new(None),
            wake: Condvar::new(),
            wake_mutex: Mutex::new(()),
            scrub_queue: Mutex::new(VecDeque::new()),
            wrap_disk: options.wrap_disk,
            power_base,
            config: RwLock::new(config),
        });
        shared.paused.store(paused, Ordering::SeqCst);
        for index in newly_failed {
            shared
                .journal
                .batch(|b| b.set_failed(index, "could not be opened"))?;
        }
        shared.replay()?;
        let engine = Engine {
            shared: Arc::clone(&shared),
            threads: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        };
        engine.start_threads();
        Ok(engine)
    }

    fn start_threads(&self) {
        let mut threads = self.threads.lock();
        let shared = Arc::clone(&self.shared);
        threads.push(spawn("permafrost-recovery", move || shared.recovery_loop()));
        for &disk in self.shared.geometry.parity_disks() {
            let shared = Arc::clone(&self.shared);
            threads.push(spawn(&format!("permafrost-drain-{disk}"), move || {
                shared.drain_loop(disk)
            }));
        }
        let shared = Arc::clone(&self.shared);
        threads.push(spawn("permafrost-scrub", move || shared.scrub_loop()));
        let weak = Arc::downgrade(&self.shared);
        self.shared.power.set_on_spin_up(Box::new(move |disk| {
            if let Some(shared) = weak.upgrade() {
                let mut queue = shared.scrub_queue.lock();
                if !queue.contains(&disk) && queue.len() < 1024 {
                    queue.push_back(disk);
                }
                shared.wake.notify_all();
            }
        }));
    }

    /// Stop the background threads, save the disks' power counters and close the grid. Pending deltas stay
    /// durable in `DIR/deltas` and are re-queued on the next open.
    pub fn close(self) -> Result<()> {
        self.shut_down()
    }

    fn shut_down(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            let _ = t.join();
        }
        self.shared.save_power_stats()
    }

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
        self.shared.counters.iter().map(|c| c.snapshot()).collect()
    }

    /// Zero the I/O counters.
    pub fn reset_io_stats(&self) {
        self.shared.counters.iter().for_each(|c| c.reset());
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
            buckets: s.geometry.buckets(),
            bucket_capacity_bytes: s.logical_bytes,
            disks,
            pending_delta_bytes: s.deltas.pending_bytes(),
            open_promises: s.journal.promise_count()?,
            journal_rows: s.journal.row_count()?,
            spinning_now: s.power.spinning_now(),
            max_spinning_seen: s.power.max_spinning_seen(),
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

    /// Test hook: make the next write or drain that reaches `point` stop there as if the process died (the
    /// engine stops its background threads and must be dropped and reopened).
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

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.shut_down() {
            tracing::warn!("closing the grid: {e}");
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawn an engine thread")
}

/// Open one disk's backend and check its header. `Ok(None)`: the disk cannot be opened (it runs as failed).
fn open_backend(
    dir: &Path,
    config: &GridConfig,
    geometry: &Geometry,
    index: usize,
    spec: &DiskSpec,
    options: &OpenOptions,
) -> Result<Option<Arc<dyn Disk>>> {
    let path = spec.resolved_path(dir);
    let name = path.display().to_string();
    let opened: std::result::Result<Arc<dyn Disk>, DiskError> = match spec {
        DiskSpec::File { .. } => FileDisk::open(&path).map(|d| Arc::new(d) as Arc<dyn Disk>),
        DiskSpec::Block { .. } => BlockDisk::open(&path).map(|d| Arc::new(d) as Arc<dyn Disk>),
    };
    let disk = match opened {
        Ok(disk) => disk,
        Err(e) => {
            tracing::warn!("disk {index} ({name}) cannot be opened, running it as failed: {e}");
            return Ok(None);
        }
    };
    let header_error = |message: String| Error::Header {
        disk: index,
        name: name.clone(),
        message,
    };
    if let DiskSpec::File { capacity_bytes, .. } = spec {
        if disk.capacity_bytes() != *capacity_bytes {
            return Err(header_error(format!(
                "wrong size: {} bytes, configured {capacity_bytes}",
                disk.capacity_bytes()
            )));
        }
    }
    let disk = match &options.wrap_disk {
        Some(wrap) => wrap(index, disk),
        None => disk,
    };
    let header = match DiskHeader::read(disk.as_ref()) {
        Ok(Some(h)) => h,
        Ok(None) => {
            // Blank or damaged header: a wiped or swapped-in blank disk. Its data is gone, so run it as
            // failed (reconstructed on read, rebuilt after `replace_disk`). A *valid* header of another
            // grid or position is refused below: that is a cabling mistake, not a failure.
            tracing::warn!("disk {index} ({name}) has no valid permafrost header (blank or wiped), running it as failed");
            return Ok(None);
        }
        Err(e) => {
            tracing::warn!("disk {index} ({name}): header unreadable, running it as failed: {e}");
            return Ok(None);
        }
    };
    if header.grid_id != config.grid_id {
        return Err(header_error(format!(
            "belongs to another grid ({}), not {}",
            header.grid_id, config.grid_id
        )));
    }
    if header.disk_index as usize != index {
        return Err(header_error(format!(
            "wrong position: its header says disk {}, it is configured as disk {index}",
            header.disk_index
        )));
    }
    if header.capacity_bytes != disk.capacity_bytes() {
        return Err(header_error(format!(
            "wrong size: {} bytes, its header says {}",
            disk.capacity_bytes(),
            header.capacity_bytes
        )));
    }
    let expected = DiskHeader::new(
        config.grid_id,
        geometry,
        index,
        disk.capacity_bytes(),
        config.idr,
    );
    if header.layout != expected.layout
        || header.idr != expected.idr
        || header.role != expected.role
    {
        return Err(header_error(format!(
            "header says layout {} / IDR {:?}, the grid is {} / {:?}",
            header.layout, header.idr, expected.layout, expected.idr
        )));
    }
    Ok(Some(disk))
}

// ---------------------------------------------------------------------------------------------------------------
// Shared: the machinery.

impl Shared {
    pub(crate) fn slot(&self, disk: usize) -> Arc<DiskSlot> {
        Arc::clone(&self.slots[disk].read())
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

    fn crash_at(&self, point: CrashPoint) -> Result<()> {
        let mut armed = self.crash_point.lock();
        if *armed == Some(point) {
            *armed = None;
            self.stop.store(true, Ordering::SeqCst);
            self.wake.notify_all();
            return Err(Error::SimulatedCrash(point));
        }
        Ok(())
    }

    fn notify(&self) {
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

    // ---- journal-backed maps -----------------------------------------------------------------------------------

    fn add_defect(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        let (start, end) = self.stripe_range(start, end);
        let mut maps = self.maps.lock();
        let mut set = maps.defects[disk].clone();
        set.insert(start, end);
        self.journal
            .batch(|b| b.sync_ranges(RangeTable::Defects, disk, &set, start, end))?;
        maps.defects[disk] = set;
        drop(maps);
        self.notify();
        Ok(())
    }

    fn defects_in(&self, disk: usize, start: u64, end: u64) -> Vec<(u64, u64)> {
        self.maps.lock().defects[disk].overlapping(start, end)
    }

    /// Written map of `disk` with `[start, end)` (bytes, stripe aligned) added; the caller journals it.
    fn written_with(&self, maps: &Maps, disk: usize, start: u64, end: u64) -> RangeSet {
        let mut set = maps.written[disk].clone();
        set.insert(start / self.stripe_bytes, end.div_ceil(self.stripe_bytes));
        set
    }

    /// Run `extra` and mark `[start, end)` written on `disks` in one journal transaction.
    fn journal_with_written(
        &self,
        disks: &[usize],
        start: u64,
        end: u64,
        extra: impl FnOnce(&crate::journal::Batch) -> rusqlite::Result<()>,
    ) -> Result<()> {
        let mut maps = self.maps.lock();
        let sets: Vec<(usize, RangeSet)> = disks
            .iter()
            .map(|&d| (d, self.written_with(&maps, d, start, end)))
            .collect();
        // What is written now is freshly encoded: known good as of now (for the overdue scrub).
        let now = now_ms();
        let ages: Vec<(usize, RangeAges, (u64, u64))> = disks
            .iter()
            .map(|&d| {
                let mut ages = maps.ages[d].clone();
                let span = ages.record(start, end, now);
                (d, ages, span)
            })
            .collect();
        let (lo, hi) = (start / self.stripe_bytes, end.div_ceil(self.stripe_bytes));
        self.journal.batch(|b| {
            extra(b)?;
            for (d, set) in &sets {
                b.sync_ranges(RangeTable::Written, *d, set, lo, hi)?;
            }
            for (d, ages, (lo, hi)) in &ages {
                b.sync_ages(*d, &ages.runs_starting_in(*lo, *hi), *lo, *hi)?;
            }
            Ok(())
        })?;
        for (d, set) in sets {
            maps.written[d] = set;
        }
        for (d, ages, _) in ages {
            maps.ages[d] = ages;
        }
        Ok(())
    }

    /// `[start, end)` of `disk` was verified now: record it for the overdue scrub.
    fn record_verified(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        let mut maps = self.maps.lock();
        let mut ages = maps.ages[disk].clone();
        let (lo, hi) = ages.record(start, end, now_ms());
        self.journal
            .batch(|b| b.sync_ages(disk, &ages.runs_starting_in(lo, hi), lo, hi))?;
        maps.ages[disk] = ages;
        Ok(())
    }

    /// Written ranges of `disk` in bytes.
    fn written_bytes_of(&self, maps: &Maps, disk: usize) -> Vec<(u64, u64)> {
        maps.written[disk]
            .iter()
            .map(|(s, e)| {
                (
                    s * self.stripe_bytes,
                    (e * self.stripe_bytes).min(self.logical_bytes),
                )
            })
            .collect()
    }

    /// Written ranges of live disks last known good at or before `cutoff_ms` (or never), as
    /// `(disk, start, end, verified_ms)`.
    fn overdue_ranges(&self, cutoff_ms: u64) -> Vec<(usize, u64, u64, u64)> {
        let maps = self.maps.lock();
        let mut out = Vec::new();
        for disk in 0..self.geometry.disks() {
            if maps.failed[disk] {
                continue;
            }
            for (start, end) in self.written_bytes_of(&maps, disk) {
                out.extend(
                    maps.ages[disk]
                        .older_than(start, end, cutoff_ms)
                        .into_iter()
                        .map(|(s, e, ms)| (disk, s, e, ms)),
                );
            }
        }
        out
    }

    /// This disk's power counters: earlier processes' (journal) plus this one's.
    fn power_stats(&self, disk: usize) -> PowerStats {
        let mut stats = self.power_base[disk];
        stats.add(&self.power.stats(disk));
        stats
    }

    /// Save every disk's power counters in the journal.
    fn save_power_stats(&self) -> Result<()> {
        let stats: Vec<PowerStats> = (0..self.geometry.disks())
            .map(|d| self.power_stats(d))
            .collect();
        self.journal.batch(|b| {
            for (disk, stats) in stats.iter().enumerate() {
                b.set_power(disk, stats)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    fn is_unwritten(&self, disk: usize, start: u64, end: u64) -> bool {
        !self.maps.lock().written[disk]
            .intersects(start / self.stripe_bytes, end.div_ceil(self.stripe_bytes))
    }

    /// Written parts of `[start, end)` of `disk`, in bytes.
    fn written_parts(&self, disk: usize, start: u64, end: u64) -> Vec<(u64, u64)> {
        let unit = self.stripe_bytes;
        self.maps.lock().written[disk]
            .overlapping(start / unit, end.div_ceil(unit))
            .into_iter()
            .map(|(s, e)| ((s * unit).max(start), (e * unit).min(end)))
            .collect()
    }

    /// Stripe units covered by the pending deltas of `disk` (its true content may be non-zero there even where
    /// its written map is empty).
    fn pending_delta_units(&self, disk: usize) -> RangeSet {
        let mut units = RangeSet::new();
        for delta in self.deltas.pending_of(disk) {
            units.insert(
                delta.offset / self.stripe_bytes,
                delta.end().div_ceil(self.stripe_bytes),
            );
        }
        units
    }

    fn set_scrub_row(&self, disk: usize, row: ScrubRow) -> Result<()> {
        self.journal.batch(|b| b.set_scrub(disk, row))?;
        self.maps.lock().scrub[disk] = row;
        Ok(())
    }

    fn mark_failed(&self, disk: usize, reason: &str) -> Result<()> {
        {
            let mut maps = self.maps.lock();
            if maps.failed[disk] {
                return Ok(());
            }
            self.journal.batch(|b| b.set_failed(disk, reason))?;
            maps.failed[disk] = true;
        }
        tracing::warn!("disk {disk} marked failed: {reason}");
        // A failed parity disk will be recomputed from its members: it no longer owes any delta. No drain mutex
        // here: this runs inside a drain of `disk` (an I/O error there) and inside reconstructions that hold
        // range locks a drain waits for; completing a delta is idempotent, so a concurrent drain is harmless.
        for delta in self.deltas.pending_of(disk) {
            self.complete_delta(&delta, disk)?;
        }
        self.notify();
        Ok(())
    }

    /// Note an I/O error of `disk`; a whole-disk failure or repeated errors mark it failed.
    fn note_error(&self, disk: usize, error: &IdrError) {
        let fatal = match error {
            IdrError::Disk(DiskError::Failed { .. }) => true,
            IdrError::Disk(_) => {
                self.counters[disk]
                    .errors_in_a_row
                    .fetch_add(1, Ordering::SeqCst)
                    + 1
                    >= IO_ERRORS_MAX
            }
            _ => false,
        };
        if fatal {
            if let Err(e) = self.mark_failed(disk, &error.to_string()) {
                tracing::error!("cannot mark disk {disk} failed: {e}");
            }
        }
    }

    // ---- reading true content ----------------------------------------------------------------------------------

    /// Read `disk`'s on-disk content of `[offset, offset+buf.len())`: zeros where never written, the IDR space
    /// elsewhere. No overlay, no defect check. The caller holds a lock on the range.
    fn read_raw(
        &self,
        disk: usize,
        offset: u64,
        buf: &mut [u8],
    ) -> std::result::Result<(), ReadFail> {
        let parts = self.written_parts(disk, offset, offset + buf.len() as u64);
        self.read_raw_parts(disk, offset, buf, &parts)
    }

    /// [`Shared::read_raw`] with the written parts given (as they were before the caller marked the range).
    fn read_raw_parts(
        &self,
        disk: usize,
        offset: u64,
        buf: &mut [u8],
        parts: &[(u64, u64)],
    ) -> std::result::Result<(), ReadFail> {
        if self.is_failed(disk) {
            return Err(ReadFail::Failed);
        }
        let end = offset + buf.len() as u64;
        // Outside the written parts the disk reads as zeros; inside, IDR overwrites every byte (verified data, or
        // zeros where it cannot verify), so a reused buffer's old bytes never show and only the gaps are cleared.
        zero_outside(buf, offset, parts);
        let slot = self.slot(disk);
        let mut bad = Vec::new();
        for &(s, e) in parts {
            let part = &mut buf[(s - offset) as usize..(e - offset) as usize];
            // Zeros in a written stripe may be damage (see `untrusted_zero_stripes`); a stripe with an
            // unverifiable part is reconstructed whole.
            let checked = match slot.idr.read(s, part) {
                Ok(report) => {
                    self.counters[disk]
                        .logical_read
                        .fetch_add(e - s, Ordering::Relaxed);
                    self.untrusted_zero_stripes(&slot, s, part, report.check_blocks_repaired > 0)
                }
                Err(IdrError::Unrecoverable { ranges }) => {
                    for (o, l) in ranges {
                        let (rs, re) = self.stripe_range(o, o + l);
                        bad.push((rs.max(s), re.min(e)));
                    }
                    self.untrusted_zero_stripes(&slot, s, part, true)
                }
                Err(e) => Err(e),
            };
            match checked {
                Ok(untrusted) => bad.extend(untrusted),
                Err(e) => {
                    self.note_error(disk, &e);
                    return Err(if self.is_failed(disk) {
                        ReadFail::Failed
                    } else {
                        ReadFail::Ranges(vec![(offset, end)])
                    });
                }
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(ReadFail::Ranges(bad))
        }
    }

    /// Stripes of `[offset, offset + data.len())` (just read from `slot`, inside the written map) whose all-zero
    /// blocks cannot be trusted, clipped to the range. IDR returns zeros without complaint for a stripe that is
    /// physically never written (zeroed in place, a blank disk swapped in), and verifies an all-zero iPG by parity
    /// alone when both check blocks are lost (a zeroed stripe with one flipped bit). So a stripe holding an
    /// all-zero 4 KiB block is damaged when `distrust` (the read repaired check blocks or failed elsewhere, which
    /// may have erased the evidence) or when a scrub of that one stripe finds it never written, unverifiable or
    /// with repaired check blocks. Data without zero blocks costs nothing extra. The caller holds a lock on them.
    fn untrusted_zero_stripes(
        &self,
        slot: &DiskSlot,
        offset: u64,
        data: &[u8],
        distrust: bool,
    ) -> std::result::Result<Vec<(u64, u64)>, IdrError> {
        let end = offset + data.len() as u64;
        let mut untrusted = Vec::new();
        let mut stripe = align_down(offset, self.stripe_bytes);
        while stripe < end {
            let (from, to) = (stripe.max(offset), (stripe + self.stripe_bytes).min(end));
            let bytes = &data[(from - offset) as usize..(to - offset) as usize];
            if has_zero_block(bytes) && (distrust || self.stripe_suspect(slot, stripe)?) {
                untrusted.push((from, to));
            }
            stripe += self.stripe_bytes;
        }
        Ok(untrusted)
    }

    /// A scrub of one stripe finds it never written, unverifiable in part, or with check blocks to repair.
    fn stripe_suspect(&self, slot: &DiskSlot, stripe: u64) -> std::result::Result<bool, IdrError> {
        let report = slot.idr.scrub(stripe, self.stripe_bytes)?;
        Ok(report.stripes_never_written > 0
            || !report.unrecoverable.is_empty()
            || report.check_blocks_repaired > 0)
    }

    /// The true content of `disk` over the range: defect ranges fail, parity disks get the snapshot's overlay.
    fn read_true(
        &self,
        disk: usize,
        offset: u64,
        buf: &mut [u8],
        snapshot: &Snapshot,
    ) -> std::result::Result<(), ReadFail> {
        if self.is_failed(disk) {
            return Err(ReadFail::Failed);
        }
        let defects = self.defects_in(disk, offset, offset + buf.len() as u64);
        if !defects.is_empty() {
            return Err(ReadFail::Ranges(defects));
        }
        self.read_raw(disk, offset, buf)?;
        snapshot.overlay(disk, offset, buf);
        Ok(())
    }

    /// [`Shared::read_true`] of each of `sources` over `[offset, offset + len)` into a new buffer, all at the same
    /// time (one thread per source: their disk reads and IDR checks overlap). Results in the order of `sources`.
    fn read_true_parallel(
        &self,
        sources: &[usize],
        offset: u64,
        len: u64,
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Vec<std::result::Result<Vec<u8>, ReadFail>> {
        let read = |source: usize| {
            let mut buf = pool.take(len as usize);
            match self.read_true(source, offset, &mut buf, snapshot) {
                Ok(()) => Ok(buf),
                Err(fail) => {
                    pool.give(buf);
                    Err(fail)
                }
            }
        };
        if sources.len() <= 1 {
            return sources.iter().map(|&source| read(source)).collect();
        }
        let read = &read;
        std::thread::scope(|scope| {
            let handles: Vec<_> = sources
                .iter()
                .map(|&source| scope.spawn(move || read(source)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("source read thread panicked"))
                .collect()
        })
    }

    /// Compute the true content of `target` over `[offset, offset+len)` from the grid (in a buffer of `pool`). The
    /// caller holds at least shared locks on every disk over the range and took `snapshot` after locking.
    fn reconstruct(
        &self,
        target: usize,
        offset: u64,
        len: u64,
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Result<Vec<u8>> {
        let end = offset + len;
        let mut unavailable: Vec<usize> = (0..self.geometry.disks())
            .filter(|&d| {
                d == target || self.is_failed(d) || !self.defects_in(d, offset, end).is_empty()
            })
            .collect();
        for _attempt in 0..=self.geometry.disks() {
            let partial = self.geometry.partial_recovery_plan(&unavailable);
            if partial.stuck.contains(&target) {
                return Err(Error::Unrecoverable {
                    disk: target,
                    offset,
                    end,
                    stuck: partial.stuck,
                });
            }
            // Only the steps the target depends on.
            let steps = needed_steps(&partial.plan.steps, target);
            let sources: Vec<usize> = {
                let mut s: Vec<usize> = steps
                    .iter()
                    .flat_map(|st| st.sources.iter().copied())
                    .filter(|d| !unavailable.contains(d))
                    .collect();
                s.sort_unstable();
                s.dedup();
                s
            };
            // Spin the sources that hold data up together (range locks are held; power comes after them).
            let to_power: Vec<usize> = sources
                .iter()
                .copied()
                .filter(|&d| !self.is_unwritten(d, offset, end))
                .collect();
            let _guards = if to_power.len() <= self.power.budget() {
                self.power.acquire_many(&to_power).ok()
            } else {
                None
            };
            // Step by step; each step reads its sources at the same time (one thread per source) and XORs them
            // with the steps before it. Memory: one buffer per source of the step plus one per step done.
            let mut recovered: HashMap<usize, Vec<u8>> = HashMap::new();
            let mut newly_bad = Vec::new();
            for step in &steps {
                let to_read: Vec<usize> = step
                    .sources
                    .iter()
                    .copied()
                    .filter(|source| !recovered.contains_key(source))
                    .collect();
                let mut acc: Option<Vec<u8>> = None;
                let reads = self.read_true_parallel(&to_read, offset, len, snapshot, pool);
                for (&source, read) in to_read.iter().zip(reads) {
                    match read {
                        Ok(buf) => match acc.as_mut() {
                            Some(acc) => {
                                permafrost_idr::xor_into(acc, &buf);
                                pool.give(buf);
                            }
                            None => acc = Some(buf),
                        },
                        Err(fail) => {
                            if let ReadFail::Ranges(ranges) = &fail {
                                for &(s, e) in ranges {
                                    let _ = self.add_defect(source, s, e);
                                }
                            }
                            newly_bad.push(source);
                        }
                    }
                }
                if !newly_bad.is_empty() {
                    acc.into_iter().for_each(|buf| pool.give(buf));
                    break;
                }
                let mut acc = acc.unwrap_or_else(|| vec![0u8; len as usize]);
                for source in &step.sources {
                    if let Some(data) = recovered.get(source) {
                        permafrost_idr::xor_into(&mut acc, data);
                    }
                }
                recovered.insert(step.disk, acc);
            }
            let data = recovered.remove(&target);
            recovered.into_values().for_each(|buf| pool.give(buf));
            if newly_bad.is_empty() {
                return Ok(data.expect("the plan rebuilds the target"));
            }
            data.into_iter().for_each(|buf| pool.give(buf));
            unavailable.extend(newly_bad);
        }
        Err(Error::Unrecoverable {
            disk: target,
            offset,
            end,
            stuck: unavailable,
        })
    }

    /// [`Shared::reconstruct`], falling back to one stripe at a time when the range is unrecoverable as a whole
    /// (damage on other disks in different stripes). `offset` is stripe aligned; locks as for `reconstruct`.
    fn reconstruct_piece(
        &self,
        target: usize,
        offset: u64,
        len: u64,
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Result<Vec<u8>> {
        match self.reconstruct(target, offset, len, snapshot, pool) {
            Err(Error::Unrecoverable { .. }) if len > self.stripe_bytes => {
                let end = offset + len;
                let mut out = pool.take(len as usize);
                let mut stripe = offset;
                while stripe < end {
                    let stripe_end = (stripe + self.stripe_bytes).min(end);
                    let data =
                        match self.reconstruct(target, stripe, stripe_end - stripe, snapshot, pool)
                        {
                            Ok(data) => data,
                            Err(e) => {
                                pool.give(out);
                                return Err(e);
                            }
                        };
                    out[(stripe - offset) as usize..(stripe_end - offset) as usize]
                        .copy_from_slice(&data);
                    pool.give(data);
                    stripe = stripe_end;
                }
                Ok(out)
            }
            other => other,
        }
    }

    /// The largest piece one reconstruction works on (whole stripes).
    fn piece_bytes_max(&self) -> u64 {
        align_down(RECONSTRUCT_PIECE_BYTES_MAX, self.stripe_bytes).max(self.stripe_bytes)
    }

    /// [`Shared::reconstruct_piece`] into `out`, in pieces of at most [`RECONSTRUCT_PIECE_BYTES_MAX`] (memory stays
    /// one piece per source and step whatever the range). `offset` is stripe aligned; locks as for `reconstruct`.
    fn reconstruct_into(
        &self,
        target: usize,
        offset: u64,
        out: &mut [u8],
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Result<()> {
        let end = offset + out.len() as u64;
        let mut at = offset;
        while at < end {
            let to = (at + self.piece_bytes_max()).min(end);
            let data = self.reconstruct_piece(target, at, to - at, snapshot, pool)?;
            out[(at - offset) as usize..(to - offset) as usize].copy_from_slice(&data);
            pool.give(data);
            at = to;
        }
        Ok(())
    }

    /// Read the true content of `disk` over a chunk for a reader: the disk itself where it can, the grid where it
    /// cannot (then the damaged ranges are queued as defect for the background recovery).
    pub(crate) fn read_chunk(&self, disk: usize, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset + buf.len() as u64;
        let (lock_start, lock_end) = self.stripe_range(offset, end);
        {
            let _lock = self.lock(vec![RangeLock::shared(disk, lock_start, lock_end)]);
            match self.read_true(disk, offset, buf, &Snapshot::default()) {
                Ok(()) => return Ok(()),
                Err(ReadFail::Ranges(ranges)) => {
                    for (s, e) in ranges {
                        self.add_defect(disk, s, e)?;
                    }
                }
                Err(ReadFail::Failed) => {}
            }
        }
        // Degraded: per stripe, the disk where it is good, the grid elsewhere; runs of stripes that need the grid
        // (all of them when the disk is failed) are reconstructed together, in pieces.
        let _lock = self.lock_all(disk, false, lock_start, lock_end);
        let snapshot = self.deltas.snapshot(self.geometry.parity_disks());
        let pool = BufferPool::default();
        // Stripes `[from, to)` from the grid, their part inside `[offset, end)` copied into `buf`.
        let reconstruct_run = |buf: &mut [u8], from: u64, to: u64| -> Result<()> {
            let (s, e) = (from.max(offset), to.min(end));
            if (s, e) == (from, to) {
                let part = &mut buf[(from - offset) as usize..(to - offset) as usize];
                return self.reconstruct_into(disk, from, part, &snapshot, &pool);
            }
            let mut whole = vec![0u8; (to - from) as usize];
            self.reconstruct_into(disk, from, &mut whole, &snapshot, &pool)?;
            buf[(s - offset) as usize..(e - offset) as usize]
                .copy_from_slice(&whole[(s - from) as usize..(e - from) as usize]);
            Ok(())
        };
        let mut run_start = None;
        let mut stripe = lock_start;
        while stripe < lock_end {
            let s_end = stripe + self.stripe_bytes;
            let from = stripe.max(offset);
            let to = s_end.min(end);
            let part = &mut buf[(from - offset) as usize..(to - offset) as usize];
            if self.read_true(disk, from, part, &snapshot).is_err() {
                run_start.get_or_insert(stripe);
            } else if let Some(run) = run_start.take() {
                reconstruct_run(buf, run, stripe)?;
            }
            stripe = s_end;
        }
        if let Some(run) = run_start {
            reconstruct_run(buf, run, lock_end)?;
        }
        Ok(())
    }

    // ---- writes ------------------------------------------------------------------------------------------------

    /// Write `data` at `offset` (4 KiB aligned) of data disk `disk` in `mode`: one journal transaction.
    pub(crate) fn write_chunk(
        &self,
        disk: usize,
        offset: u64,
        data: &[u8],
        mode: WriteMode,
    ) -> Result<u64> {
        if self.stopped() {
            return Err(Error::Closed);
        }
        let end = offset + data.len() as u64;
        let (io_start, io_end) = self.stripe_range(offset, end);
        let io_len = io_end - io_start;
        let targets = self.geometry.parity_targets(disk);
        let parities = [targets.hp, targets.vp, targets.vhp];
        let reservation = if mode == WriteMode::Delayed {
            Some(self.reserve_delta(data.len() as u64)?)
        } else {
            None
        };
        for _attempt in 0..8 {
            if self.is_failed(disk) {
                return Err(Error::DiskFailed {
                    disk,
                    message: "the data disk failed during the write".into(),
                });
            }
            let mut set = vec![RangeLock::exclusive(disk, io_start, io_end)];
            if mode != WriteMode::Delayed {
                set.extend(
                    parities
                        .iter()
                        .map(|&p| RangeLock::exclusive(p, io_start, io_end)),
                );
            }
            let lock = self.lock(set);
            // Old content of the data disk (zeros where unwritten).
            let mut old = vec![0u8; io_len as usize];
            match self.read_true(disk, io_start, &mut old, &Snapshot::default()) {
                Ok(()) => {}
                Err(ReadFail::Failed) => continue,
                Err(ReadFail::Ranges(ranges)) => {
                    // Journaled under the lock, so they can never land on a disk replaced meanwhile.
                    for (s, e) in ranges {
                        self.add_defect(disk, s, e)?;
                    }
                    drop(lock);
                    self.recover_range(disk, io_start, io_end, &mut 0)?;
                    continue;
                }
            }
            let mut new = old.clone();
            new[(offset - io_start) as usize..(end - io_start) as usize].copy_from_slice(data);
            // δ over the user range only (zero elsewhere).
            let mut delta = new[(offset - io_start) as usize..(end - io_start) as usize].to_vec();
            permafrost_idr::xor_into(
                &mut delta,
                &old[(offset - io_start) as usize..(end - io_start) as usize],
            );
            let data_was_unwritten = self.is_unwritten(disk, io_start, io_end);
            let txn_id = self.next_txn.fetch_add(1, Ordering::SeqCst);
            let row = PromiseRow {
                txn_id,
                mode,
                disks: [disk, parities[0], parities[1], parities[2]],
                offset: io_start,
                length: io_len,
                starts: [0; 4],
                finishes: [0; 4],
                data_was_unwritten,
            };
            let written_before = row.disks.map(|d| self.written_parts(d, io_start, io_end));
            let write = ChunkWrite {
                row,
                new,
                delta,
                delta_offset: offset,
                written_before,
            };
            match mode {
                WriteMode::Direct => self.write_direct(write)?,
                WriteMode::Serialized => self.write_serialized(write)?,
                WriteMode::Delayed => self.write_delayed(write, reservation)?,
            }
            drop(lock);
            return Ok(txn_id);
        }
        Err(Error::Io(format!(
            "disk {disk}: write at {offset} kept failing; giving up"
        )))
    }

    /// Room for a delta of `bytes` in the cache. The drain threads make room; while they are paused (test hook)
    /// the writer drains itself (it holds no lock here), so a full cache never blocks a writer forever.
    fn reserve_delta(&self, bytes: u64) -> Result<crate::delta::Reservation<'_>> {
        loop {
            let paused = || self.stopped() || self.paused.load(Ordering::SeqCst);
            if let Some(reservation) = self.deltas.reserve(bytes, &paused) {
                return Ok(reservation);
            }
            if self.stopped() {
                return Err(Error::Closed);
            }
            for disk in self.deltas.disks_with_pending() {
                self.drain(disk)?;
            }
        }
    }

    /// Write the data disk's new content over the row's range (crash hooks included).
    fn write_data(&self, w: &ChunkWrite) -> Result<()> {
        let disk = w.row.disks[0];
        let slot = self.slot(disk);
        if self.crash_point.lock().is_some() {
            self.crash_at(CrashPoint::DataStarted)?;
            if *self.crash_point.lock() == Some(CrashPoint::DataHalfWritten) {
                let half = align_down(w.new.len() as u64 / 2, 4096).max(4096) as usize;
                let _ = slot.idr.write(w.row.offset, &w.new[..half]);
                let _ = slot.idr.sync();
                self.crash_at(CrashPoint::DataHalfWritten)?;
            }
        }
        let result = slot
            .idr
            .write(w.row.offset, &w.new)
            .and_then(|_| slot.idr.sync());
        if let Err(e) = result {
            self.note_error(disk, &e);
            return Err(Error::Idr(e));
        }
        self.counters[disk]
            .logical_written
            .fetch_add(w.new.len() as u64, Ordering::Relaxed);
        self.crash_at(CrashPoint::DataWritten)
    }

    /// `raw(P) ^= δ` over the row's range. Returns false if `P` could not be updated (then its range is defect).
    fn update_parity(&self, parity: usize, w: &ChunkWrite, crash_half: bool) -> Result<bool> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        if self.is_failed(parity) {
            return Ok(false);
        }
        if !self.defects_in(parity, start, end).is_empty() {
            // Recovery recomputes it from the members, which already include this write. The whole range: a
            // defect over part of it must not leave the rest without this write's delta.
            self.add_defect(parity, start, end)?;
            return Ok(false);
        }
        let mut buf = vec![0u8; w.row.length as usize];
        let parts = &w.written_before[slot_of(&w.row.disks, parity) as usize];
        if let Err(fail) = self.read_raw_parts(parity, start, &mut buf, parts) {
            if let ReadFail::Ranges(_) = fail {
                self.add_defect(parity, start, end)?;
            }
            return Ok(false);
        }
        let at = (w.delta_offset - start) as usize;
        permafrost_idr::xor_into(&mut buf[at..at + w.delta.len()], &w.delta);
        let slot = self.slot(parity);
        if crash_half {
            let half = align_down(buf.len() as u64 / 2, 4096).max(4096) as usize;
            let _ = slot.idr.write(start, &buf[..half]);
            let _ = slot.idr.sync();
            self.crash_at(CrashPoint::ParityHalfWritten)?;
        }
        match slot.idr.write(start, &buf).and_then(|_| slot.idr.sync()) {
            Ok(()) => {
                self.counters[parity]
                    .logical_written
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.note_error(parity, &e);
                if !self.is_failed(parity) {
                    self.add_defect(parity, start, end)?;
                }
                Ok(false)
            }
        }
    }

    fn live_disks(&self, disks: &[usize]) -> Vec<usize> {
        disks
            .iter()
            .copied()
            .filter(|&d| !self.is_failed(d))
            .collect()
    }

    fn write_direct(&self, mut w: ChunkWrite) -> Result<()> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        let now = now_ms();
        w.row.starts = [now; 4];
        let live = self.live_disks(&w.row.disks);
        self.journal_with_written(&live, start, end, |b| b.insert_promise(&w.row))?;
        let _guards = self.power.acquire_many(&live).ok();
        let crash_parity = *self.crash_point.lock() == Some(CrashPoint::ParityHalfWritten);
        let w = &w;
        let results: Vec<Result<bool>> = std::thread::scope(|scope| {
            let handles: Vec<_> = PARITY_SLOTS
                .iter()
                .map(|&slot| {
                    scope.spawn(move || {
                        self.update_parity(w.row.disks[slot as usize], w, crash_parity)
                    })
                })
                .collect();
            let data = self.write_data(w).map(|_| true);
            std::iter::once(data)
                .chain(
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("parity thread panicked")),
                )
                .collect()
        });
        for r in &results {
            if let Err(Error::SimulatedCrash(p)) = r {
                return Err(Error::SimulatedCrash(*p));
            }
        }
        if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
            self.settle_row_now(&w.row)?;
            return Err(e);
        }
        self.journal.batch(|b| b.delete_promise(w.row.txn_id))?;
        Ok(())
    }

    fn write_serialized(&self, mut w: ChunkWrite) -> Result<()> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        let disk = w.row.disks[0];
        w.row.starts[0] = now_ms();
        self.journal_with_written(&[disk], start, end, |b| b.insert_promise(&w.row))?;
        let live = self.live_disks(&w.row.disks);
        let _guards = self.power.acquire_many(&live).ok();
        if let Err(e) = self.write_data(&w) {
            if !matches!(e, Error::SimulatedCrash(_)) {
                self.settle_row_now(&w.row)?;
            }
            return Err(e);
        }
        let txn = w.row.txn_id;
        let mut previous = Slot::Data;
        for (i, &slot) in PARITY_SLOTS.iter().enumerate() {
            let parity = w.row.disks[slot as usize];
            let prev = previous;
            let live = !self.is_failed(parity);
            let marks = |b: &crate::journal::Batch| {
                b.set_mark(txn, prev, Mark::Finish)?;
                b.set_mark(txn, slot, Mark::Start)
            };
            if live {
                self.journal_with_written(&[parity], start, end, marks)?;
            } else {
                self.journal.batch(marks)?;
            }
            if i == 0 {
                self.crash_at(CrashPoint::DataFinished)?;
            }
            let crash_half =
                i == 0 && *self.crash_point.lock() == Some(CrashPoint::ParityHalfWritten);
            self.update_parity(parity, &w, crash_half)?;
            previous = slot;
        }
        self.journal.batch(|b| b.delete_promise(txn))?;
        Ok(())
    }

    fn write_delayed(
        &self,
        mut w: ChunkWrite,
        reservation: Option<crate::delta::Reservation<'_>>,
    ) -> Result<()> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        let disk = w.row.disks[0];
        let txn = w.row.txn_id;
        self.deltas
            .write_file(txn, w.delta_offset, &w.delta)
            .map_err(|e| Error::Io(format!("cannot write the delta file of txn {txn}: {e}")))?;
        w.row.starts[0] = now_ms();
        self.journal_with_written(&[disk], start, end, |b| b.insert_promise(&w.row))?;
        if let Err(e) = self.write_data(&w) {
            if !matches!(e, Error::SimulatedCrash(_)) {
                self.settle_row_now(&w.row)?;
            }
            return Err(e);
        }
        self.journal
            .batch(|b| b.set_mark(txn, Slot::Data, Mark::Finish))?;
        self.crash_at(CrashPoint::DataFinished)?;
        let parities: Vec<usize> = PARITY_SLOTS
            .iter()
            .map(|&s| w.row.disks[s as usize])
            .collect();
        let live: Vec<usize> = self.live_disks(&parities);
        let delta = Delta {
            txn_id: txn,
            offset: w.delta_offset,
            data: std::mem::take(&mut w.delta),
            parities: w.row.disks,
        };
        if live.is_empty() {
            self.deltas.insert(delta, Vec::new(), reservation);
            self.finish_txn(txn)?;
        } else {
            let failed: Vec<usize> = parities
                .iter()
                .copied()
                .filter(|p| !live.contains(p))
                .collect();
            if !failed.is_empty() {
                self.journal.batch(|b| {
                    for &p in &failed {
                        b.set_mark(txn, slot_of(&w.row.disks, p), Mark::Finish)?;
                    }
                    Ok(())
                })?;
            }
            self.deltas.insert(delta, live, reservation);
            self.notify();
        }
        Ok(())
    }

    /// A chunk that failed mid-way (I/O error, not a crash): settle its row as replay would.
    fn settle_row_now(&self, row: &PromiseRow) -> Result<()> {
        let rows = self.journal.promises()?;
        if let Some(current) = rows.into_iter().find(|r| r.txn_id == row.txn_id) {
            self.settle_row(&current, false)?;
        }
        Ok(())
    }

    fn finish_txn(&self, txn: u64) -> Result<()> {
        self.journal.batch(|b| b.delete_promise(txn))?;
        self.deltas
            .remove_file(txn)
            .map_err(|e| Error::Io(format!("cannot remove the delta file of txn {txn}: {e}")))
    }

    /// `disk` has applied (or no longer owes) `delta`: set its finish mark; finish the txn when none is owed.
    fn complete_delta(&self, delta: &Delta, disk: usize) -> Result<()> {
        self.journal
            .batch(|b| b.set_mark(delta.txn_id, slot_of(&delta.parities, disk), Mark::Finish))?;
        if self.deltas.complete(delta.txn_id, disk) {
            self.finish_txn(delta.txn_id)?;
        }
        Ok(())
    }

    // ---- Cache2Disk drain --------------------------------------------------------------------------------------

    /// Apply every pending delta of parity disk `disk`: merged, one read-modify-write per region.
    pub(crate) fn drain(&self, disk: usize) -> Result<()> {
        let _one_drain = self.drain_mutexes[disk].lock();
        let deltas = self.deltas.pending_of(disk);
        if deltas.is_empty() {
            return Ok(());
        }
        if self.is_failed(disk) {
            for d in &deltas {
                self.complete_delta(d, disk)?;
            }
            return Ok(());
        }
        // Regions: stripe-expanded deltas, merged where they overlap or touch.
        let mut regions: Vec<(u64, u64, Vec<Arc<Delta>>)> = Vec::new();
        for d in deltas {
            let (s, e) = self.stripe_range(d.offset, d.end());
            match regions.last_mut() {
                Some((_, re, list)) if s <= *re => {
                    *re = (*re).max(e);
                    list.push(d);
                }
                _ => regions.push((s, e, vec![d])),
            }
        }
        let piece_max = self.chunk_bytes_max();
        for (start, end, list) in regions {
            if self.stopped() {
                return Err(Error::Closed);
            }
            let _lock = self.lock(vec![RangeLock::exclusive(disk, start, end)]);
            // Under the lock, only what the disk still owes: a delta completed meanwhile (the disk failed and
            // was replaced, its range recomputed from the members) must not be applied on top.
            let list: Vec<Arc<Delta>> = list
                .into_iter()
                .filter(|d| self.deltas.pending_disks_of(d.txn_id).contains(&disk))
                .collect();
            if list.is_empty() {
                continue;
            }
            if self.is_failed(disk) {
                for d in &list {
                    self.complete_delta(d, disk)?;
                }
                continue;
            }
            let written_before = self.written_parts(disk, start, end);
            self.journal_with_written(&[disk], start, end, |b| {
                for d in &list {
                    b.set_mark(d.txn_id, slot_of(&d.parities, disk), Mark::Start)?;
                }
                Ok(())
            })?;
            let slot = self.slot(disk);
            let mut ok = true;
            let mut piece = start;
            while piece < end {
                let piece_end = (piece + piece_max).min(end);
                let mut buf = vec![0u8; (piece_end - piece) as usize];
                let parts: Vec<(u64, u64)> = written_before
                    .iter()
                    .filter(|&&(s, e)| s < piece_end && e > piece)
                    .map(|&(s, e)| (s.max(piece), e.min(piece_end)))
                    .collect();
                if self.read_raw_parts(disk, piece, &mut buf, &parts).is_err() {
                    ok = false;
                    break;
                }
                for d in &list {
                    d.xor_into(piece, &mut buf);
                }
                if piece == start && *self.crash_point.lock() == Some(CrashPoint::DrainHalfWritten)
                {
                    let half = align_down(buf.len() as u64 / 2, 4096).max(4096) as usize;
                    let _ = slot.idr.write(piece, &buf[..half]);
                    let _ = slot.idr.sync();
                    self.crash_at(CrashPoint::DrainHalfWritten)?;
                }
                if let Err(e) = slot.idr.write(piece, &buf) {
                    self.note_error(disk, &e);
                    ok = false;
                    break;
                }
                self.counters[disk]
                    .logical_written
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                piece = piece_end;
            }
            if ok {
                if let Err(e) = slot.idr.sync() {
                    self.note_error(disk, &e);
                    ok = false;
                }
            }
            if !ok && !self.is_failed(disk) {
                // Recomputed from the members, which hold the deltas' data already.
                self.add_defect(disk, start, end)?;
            }
            for d in &list {
                self.complete_delta(d, disk)?;
            }
        }
        Ok(())
    }

    fn drain_loop(&self, disk: usize) {
        while !self.stopped() {
            if !self.paused.load(Ordering::SeqCst) && !self.deltas.pending_of(disk).is_empty() {
                let spinning = matches!(
                    self.power.state(disk),
                    PowerState::Idle | PowerState::Active
                );
                if spinning || self.deltas.over_bound() {
                    if let Err(e) = self.drain(disk) {
                        if !self.stopped() {
                            tracing::error!("drain of disk {disk} failed: {e}");
                        }
                    }
                    continue;
                }
            }
            self.deltas.wait_change(Duration::from_millis(POLL_MS));
        }
    }

    // ---- replay ------------------------------------------------------------------------------------------------

    /// Finish or recover every promise left in the journal (docs/engine.md "Replay").
    fn replay(&self) -> Result<()> {
        let rows = self.journal.promises()?;
        let mut with_rows = Vec::new();
        for row in &rows {
            with_rows.push(row.txn_id);
            self.settle_row(row, true)?;
        }
        // Delta files without a row belong to finished or never-started txns.
        for txn in self
            .deltas
            .files()
            .map_err(|e| Error::Io(format!("cannot list the delta cache: {e}")))?
        {
            if !with_rows.contains(&txn) {
                self.deltas
                    .remove_file(txn)
                    .map_err(|e| Error::Io(format!("cannot remove delta {txn}: {e}")))?;
            }
        }
        Ok(())
    }

    /// Settle one unfinished row. `at_open`: replay (delayed deltas may be re-queued). Every defect is journaled
    /// before the row's marks change or the row is deleted, so a crash while settling (replay simply runs again)
    /// loses none of them.
    fn settle_row(&self, row: &PromiseRow, at_open: bool) -> Result<()> {
        let (start, end) = (row.offset, row.offset + row.length);
        let disk = row.disks[0];
        let data_finished = row.finishes[0] != 0;
        let unfinished_parities: Vec<usize> = PARITY_SLOTS
            .iter()
            .filter(|&&s| row.finishes[s as usize] == 0)
            .map(|&s| row.disks[s as usize])
            .collect();
        let add_parity_defects = |parities: &[usize]| -> Result<()> {
            for &p in parities {
                if !self.is_failed(p) {
                    self.add_defect(p, start, end)?;
                }
            }
            Ok(())
        };
        if !data_finished {
            let direct = row.mode == WriteMode::Direct;
            if direct {
                // Parity was written at the same time as the data: recompute it from the members.
                add_parity_defects(&unfinished_parities)?;
            }
            if row.data_was_unwritten {
                // Back to never-written: reads as zeros again.
                self.unmark_written(disk, start, end)?;
            } else if direct {
                self.settle_direct_data(disk, start, end)?;
            } else {
                // Parity untouched: it still describes the old data.
                self.add_defect(disk, start, end)?;
            }
            self.journal.batch(|b| b.delete_promise(row.txn_id))?;
            self.deltas
                .remove_file(row.txn_id)
                .map_err(|e| Error::Io(format!("cannot remove delta {}: {e}", row.txn_id)))?;
        } else if row.mode == WriteMode::Delayed && at_open {
            let owed: Vec<Slot> = PARITY_SLOTS
                .iter()
                .copied()
                .filter(|&s| row.finishes[s as usize] == 0)
                .collect();
            let delta = self
                .deltas
                .read_file(row.txn_id)
                .map_err(|e| Error::Io(format!("cannot read delta {}: {e}", row.txn_id)))?;
            let mut requeue = Vec::new();
            let mut parity_defects = Vec::new();
            for &s in &owed {
                let p = row.disks[s as usize];
                if row.starts[s as usize] == 0 && delta.is_some() && !self.is_failed(p) {
                    requeue.push(p);
                } else {
                    parity_defects.push(p);
                }
            }
            add_parity_defects(&parity_defects)?;
            if requeue.is_empty() {
                self.finish_txn(row.txn_id)?;
            } else {
                let delta = delta.expect("checked above");
                let done: Vec<Slot> = owed
                    .iter()
                    .copied()
                    .filter(|&s| !requeue.contains(&row.disks[s as usize]))
                    .collect();
                self.journal.batch(|b| {
                    for &s in &done {
                        b.set_mark(row.txn_id, s, Mark::Finish)?;
                    }
                    Ok(())
                })?;
                let bytes = delta.data.len() as u64;
                let reservation = self.deltas.reserve(bytes, &|| true);
                self.deltas.insert(
                    Delta {
                        parities: row.disks,
                        ..delta
                    },
                    requeue,
                    reservation,
                );
            }
        } else {
            add_parity_defects(&unfinished_parities)?;
            self.finish_txn(row.txn_id)?;
        }
        Ok(())
    }

    /// Remove `[start, end)` (bytes, stripe aligned) from the written map of `disk`.
    fn unmark_written(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        let (lo, hi) = (start / self.stripe_bytes, end.div_ceil(self.stripe_bytes));
        let mut maps = self.maps.lock();
        let mut set = maps.written[disk].clone();
        set.remove(lo, hi);
        self.journal
            .batch(|b| b.sync_ranges(RangeTable::Written, disk, &set, lo, hi))?;
        maps.written[disk] = set;
        Ok(())
    }

    /// The data disk of an interrupted direct write (its parities are being recomputed): keep each stripe as it
    /// is where it verifies (all old or all new); re-encode a stripe that does not, taking its blocks as they
    /// read (the write hole the thesis accepts); a stripe the write never reached and that was never written
    /// before leaves the written map (it reads as zeros, as before).
    fn settle_direct_data(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        if self.is_failed(disk) {
            return Ok(());
        }
        let slot = self.slot(disk);
        let mut buf = vec![0u8; self.stripe_bytes as usize];
        let mut stripe = start;
        while stripe < end {
            let stripe_end = stripe + self.stripe_bytes;
            let outcome = slot
                .idr
                .scrub(stripe, self.stripe_bytes)
                .and_then(|report| {
                    if report.stripes_never_written > 0 {
                        return Ok(Some(true));
                    }
                    match slot.idr.read(stripe, &mut buf) {
                        Ok(_) => Ok(None),
                        Err(IdrError::Unrecoverable { .. }) => {
                            slot.idr.reencode(stripe, self.stripe_bytes)?;
                            slot.idr.sync()?;
                            Ok(Some(false))
                        }
                        Err(e) => Err(e),
                    }
                });
            match outcome {
                Ok(Some(true)) => self.unmark_written(disk, stripe, stripe_end)?,
                Ok(_) => {}
                Err(e) => {
                    self.note_error(disk, &e);
                    if !self.is_failed(disk) {
                        self.add_defect(disk, stripe, stripe_end)?;
                    }
                }
            }
            stripe = stripe_end;
        }
        Ok(())
    }

    // ---- recovery ----------------------------------------------------------------------------------------------

    /// Recover the defect parts of `[start, end)` of `disk` from the grid and write them back, one recovery chunk
    /// at a time, adding the bytes recovered to `recovered` (also when it fails part way). Under each chunk's locks
    /// only what is still defect is recovered: a concurrent recovery or writer may have done the rest, and nothing
    /// is recovered twice.
    fn recover_range(&self, disk: usize, start: u64, end: u64, recovered: &mut u64) -> Result<()> {
        let (start, end) = self.stripe_range(start, end);
        let chunk = self.config.read().recovery_chunk_bytes_max;
        let mut at = start;
        let mut unrecoverable = None;
        while at < end {
            if self.stopped() {
                return Err(Error::Closed);
            }
            let to = (at + chunk).min(end);
            let _lock = self.lock_all(disk, true, at, to);
            if self.is_failed(disk) {
                return Err(Error::DiskFailed {
                    disk,
                    message: "cannot write recovered data to a failed disk".into(),
                });
            }
            let snapshot = self.deltas.snapshot(self.geometry.parity_disks());
            for (s, e) in self.defects_in(disk, at, to) {
                *recovered += self.recover_locked(disk, s, e, &snapshot, &mut unrecoverable)?;
            }
            at = to;
        }
        match unrecoverable {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Recover `[start, end)` of `disk` (defect, stripe aligned, inside one locked recovery chunk). Pieces are
    /// reconstructed while a writer thread writes the piece before (so reads, XOR and the write overlap); the disk
    /// is synced once, and then one journal transaction marks the recovered runs written and removes them from the
    /// defects: a defect is never removed before its data is durable. Memory: the pieces of one reconstruction
    /// (one per source and step) plus the one piece being written. Returns the bytes recovered; a piece that
    /// cannot be reconstructed now stays defect, and its error is left in `unrecoverable` (if none is yet).
    fn recover_locked(
        &self,
        disk: usize,
        start: u64,
        end: u64,
        snapshot: &Snapshot,
        unrecoverable: &mut Option<Error>,
    ) -> Result<u64> {
        let slot = self.slot(disk);
        let counters = &self.counters[disk];
        let mut reconstruct_error = None;
        let pool = &BufferPool::default();
        let (sender, receiver) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>)>(0);
        let written = std::thread::scope(|scope| {
            let writer = scope.spawn(move || -> std::result::Result<RangeSet, IdrError> {
                let mut runs = RangeSet::new();
                for (offset, data) in receiver {
                    slot.idr.write(offset, &data)?;
                    counters
                        .logical_written
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    runs.insert(offset, offset + data.len() as u64);
                    pool.give(data);
                }
                slot.idr.sync()?;
                Ok(runs)
            });
            let mut piece = start;
            // On close, stop after the piece in flight: what is written so far is synced and journaled below.
            while piece < end && !self.stopped() {
                let piece_end = (piece + self.piece_bytes_max()).min(end);
                let mut data =
                    match self.reconstruct_piece(disk, piece, piece_end - piece, snapshot, pool) {
                        Ok(data) => data,
                        Err(e @ Error::Unrecoverable { .. }) => {
                            // Recover what can be; this piece stays defect.
                            unrecoverable.get_or_insert(e);
                            piece = piece_end;
                            continue;
                        }
                        Err(e) => {
                            reconstruct_error = Some(e);
                            break;
                        }
                    };
                // On-disk content = true content XOR what is still pending for this disk.
                snapshot.overlay(disk, piece, &mut data);
                if sender.send((piece, data)).is_err() {
                    break; // the writer failed: its error is returned below
                }
                piece = piece_end;
            }
            drop(sender);
            writer.join().expect("recovery writer thread panicked")
        });
        let written = match written {
            Ok(runs) => runs,
            Err(e) => {
                self.note_error(disk, &e);
                return Err(Error::Idr(e));
            }
        };
        if let Some(e) = reconstruct_error {
            return Err(e);
        }
        let runs: Vec<(u64, u64)> = written.iter().collect();
        self.journal_recovered(disk, &runs)?;
        self.bytes_recovered[disk].fetch_add(written.total(), Ordering::SeqCst);
        Ok(written.total())
    }

    /// `runs` of `disk` were recovered, written and synced: mark them written and known good as of now, and remove
    /// them from the defects, in one journal transaction.
    fn journal_recovered(&self, disk: usize, runs: &[(u64, u64)]) -> Result<()> {
        let (Some(&(lo, _)), Some(&(_, hi))) = (runs.first(), runs.last()) else {
            return Ok(());
        };
        let unit = self.stripe_bytes;
        let mut maps = self.maps.lock();
        let mut written = maps.written[disk].clone();
        let mut defects = maps.defects[disk].clone();
        let mut ages = maps.ages[disk].clone();
        let now = now_ms();
        let (mut ages_lo, mut ages_hi) = (u64::MAX, 0);
        for &(s, e) in runs {
            written.insert(s / unit, e.div_ceil(unit));
            defects.remove(s, e);
            let (span_lo, span_hi) = ages.record(s, e, now);
            ages_lo = ages_lo.min(span_lo);
            ages_hi = ages_hi.max(span_hi);
        }
        self.journal.batch(|b| {
            b.sync_ranges(
                RangeTable::Written,
                disk,
                &written,
                lo / unit,
                hi.div_ceil(unit),
            )?;
            b.sync_ranges(RangeTable::Defects, disk, &defects, lo, hi)?;
            b.sync_ages(
                disk,
                &ages.runs_starting_in(ages_lo, ages_hi),
                ages_lo,
                ages_hi,
            )
        })?;
        maps.written[disk] = written;
        maps.defects[disk] = defects;
        maps.ages[disk] = ages;
        Ok(())
    }

    /// Recover every defect range of `disk`. One run per disk at a time: it waits for a recovery of the disk in
    /// progress (the background task's chunk, another run), and the background task leaves the disk alone until it
    /// ends. What others recovered of the disk meanwhile is reported apart (`bytes_recovered_concurrently`).
    fn recover_disk(&self, disk: usize, progress: &dyn Fn(u64, u64)) -> Result<RecoveryReport> {
        let recovered_before = self.bytes_recovered[disk].load(Ordering::SeqCst);
        let _one_run = self.recovery_mutexes[disk].lock();
        let total = self.maps.lock().defects[disk].total();
        let mut report = RecoveryReport::default();
        let mut cursor = 0;
        progress(0, total);
        loop {
            let next = self.maps.lock().defects[disk].first_from(cursor);
            let Some((s, e)) = next else { break };
            let chunk = self.config.read().recovery_chunk_bytes_max;
            let e = e.min(s + chunk);
            match self.recover_range(disk, s, e, &mut report.bytes_recovered) {
                Ok(()) => {}
                // Not from the grid now, or not onto this disk (a write error): the range stays defect and the
                // other ranges are still worth recovering. Only a failed disk or the journal stops the run.
                Err(Error::Unrecoverable { .. }) | Err(Error::Idr(_)) if !self.is_failed(disk) => {
                    report.unrecoverable.push((disk, s, e - s))
                }
                Err(err) => return Err(err),
            }
            cursor = e;
            progress(report.bytes_recovered.min(total), total);
        }
        let recovered_by_all = self.bytes_recovered[disk].load(Ordering::SeqCst) - recovered_before;
        report.bytes_recovered_concurrently = recovered_by_all - report.bytes_recovered;
        Ok(report)
    }

    fn recovery_loop(&self) {
        // Ranges that failed recovery are retried after a pause, not in a hot loop.
        let mut retry_after: HashMap<(usize, u64), std::time::Instant> = HashMap::new();
        while !self.stopped() {
            let mut work = None;
            if !self.paused.load(Ordering::SeqCst) {
                let maps = self.maps.lock();
                'find: for disk in 0..self.geometry.disks() {
                    // A rebuild (or `recover_defects`) of the disk is running: it recovers the disk itself.
                    if maps.failed[disk] || self.recovery_mutexes[disk].is_locked() {
                        continue;
                    }
                    for (s, e) in maps.defects[disk].iter() {
                        if retry_after
                            .get(&(disk, s))
                            .is_none_or(|t| *t <= std::time::Instant::now())
                        {
                            work = Some((disk, s, e));
                            break 'find;
                        }
                    }
                }
            }
            let Some((disk, s, e)) = work else {
                self.sleep_until_woken(200);
                continue;
            };
            let Some(_one_chunk) = self.recovery_mutexes[disk].try_lock() else {
                continue; // a run started since the search
            };
            let chunk = self.config.read().recovery_chunk_bytes_max;
            let e = e.min(s + chunk);
            if let Err(err) = self.recover_range(disk, s, e, &mut 0) {
                if !self.stopped() {
                    tracing::warn!("background recovery of disk {disk} {s}..{e} failed: {err}");
                }
                retry_after.insert(
                    (disk, s),
                    std::time::Instant::now() + Duration::from_secs(5),
                );
            }
        }
    }

    // ---- replace / rebuild ---------------------------------------------------------------------------------------

    fn replace_disk(&self, disk: usize, spec: Option<DiskSpec>) -> Result<()> {
        self.check_disk(disk)?;
        self.mark_failed(disk, "being replaced")?;
        // No I/O of `disk` in flight while its slot and maps change: writers, drains, recoveries and readers all
        // hold a range lock of the disk while they use it.
        let _lock = self.lock(vec![RangeLock::exclusive(disk, 0, self.logical_bytes)]);
        let mut config = self.config.read().clone();
        if let Some(spec) = spec {
            config.disks[disk] = spec;
        }
        let spec = config.disks[disk].clone();
        let path = spec.resolved_path(&self.dir);
        let controller = spec.power_controller(&self.dir)?;
        let backend: Arc<dyn Disk> = match &spec {
            DiskSpec::File { capacity_bytes, .. } => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        Error::Io(format!("cannot create {}: {e}", parent.display()))
                    })?;
                }
                Arc::new(FileDisk::create_or_replace(&path, *capacity_bytes)?)
            }
            DiskSpec::Block { .. } => Arc::new(BlockDisk::open(&path)?),
        };
        // The same wrapper as the disks opened with the grid (tests inject faults into replacements too).
        let backend = match &self.wrap_disk {
            Some(wrap) => wrap(disk, backend),
            None => backend,
        };
        let header = DiskHeader::new(
            config.grid_id,
            &self.geometry,
            disk,
            backend.capacity_bytes(),
            config.idr,
        );
        header.write(backend.as_ref())?;
        let slot = DiskSlot::build(
            backend,
            Arc::clone(&self.counters[disk]),
            &self.power,
            disk,
            config.idr,
        )?;
        if slot.idr.logical_capacity() < self.logical_bytes {
            return Err(Error::Header {
                disk,
                name: path.display().to_string(),
                message: format!(
                    "too small: {} logical bytes, the grid needs {}",
                    slot.idr.logical_capacity(),
                    self.logical_bytes
                ),
            });
        }
        config.save(&self.dir)?;
        *self.config.write() = config;
        self.power.set_controller(disk, controller);
        // Everything the disk must hold becomes defect: its own written ranges and, for a parity disk, those of
        // the members of the group it protects — where they were written *or* have pending deltas (an hP member
        // of a column holds data where only a delta not yet drained says so).
        let mut units = RangeSet::new();
        for group in self.geometry.groups_of(disk) {
            if self.geometry.group_parity(group) == disk {
                for &m in self.geometry.group_members(group) {
                    for (s, e) in self.pending_delta_units(m).iter() {
                        units.insert(s, e);
                    }
                }
            }
        }
        let mut maps = self.maps.lock();
        for (s, e) in maps.written[disk].iter() {
            units.insert(s, e);
        }
        for group in self.geometry.groups_of(disk) {
            if self.geometry.group_parity(group) == disk {
                for &m in self.geometry.group_members(group) {
                    for (s, e) in maps.written[m].iter() {
                        units.insert(s, e);
                    }
                }
            }
        }
        let mut defects = maps.defects[disk].clone();
        for (s, e) in units.iter() {
            defects.insert(
                s * self.stripe_bytes,
                (e * self.stripe_bytes).min(self.logical_bytes),
            );
        }
        self.journal.batch(|b| {
            b.replace_all_ranges(RangeTable::Written, disk, &RangeSet::new())?;
            b.replace_all_ranges(RangeTable::Defects, disk, &defects)?;
            b.set_scrub(disk, ScrubRow::default())?;
            b.clear_ages(disk)?;
            b.clear_failed(disk)
        })?;
        *self.slots[disk].write() = Arc::new(slot);
        maps.written[disk] = RangeSet::new();
        maps.defects[disk] = defects;
        maps.scrub[disk] = ScrubRow::default();
        maps.ages[disk].clear();
        maps.failed[disk] = false;
        self.counters[disk]
            .errors_in_a_row
            .store(0, Ordering::SeqCst);
        drop(maps);
        self.notify();
        Ok(())
    }

    // ---- scrub -------------------------------------------------------------------------------------------------

    fn scrub_range(&self, disk: usize, start: u64, end: u64) -> Result<ScrubReport> {
        let mut total = ScrubReport::default();
        if self.is_failed(disk) {
            return Ok(total);
        }
        let chunk = self.config.read().recovery_chunk_bytes_max;
        for (s, e) in self.written_parts(disk, start, end) {
            let (s, e) = self.stripe_range(s, e);
            let mut at = s;
            while at < e {
                let to = (at + chunk).min(e);
                let _lock = self.lock(vec![RangeLock::shared(disk, at, to)]);
                // Everything under the lock: the disk may have failed or been replaced (a new slot, a new written
                // map) since the ranges were listed, and what this finds must not land on a replacement.
                if self.is_failed(disk) {
                    return Ok(total);
                }
                let slot = self.slot(disk);
                for (ps, pe) in self.written_parts(disk, at, to) {
                    let (ps, pe) = self.stripe_range(ps, pe);
                    let report = match self.scrub_stripes(&slot, ps, pe) {
                        Ok(report) => report,
                        Err(e) => {
                            self.note_error(disk, &e);
                            if self.is_failed(disk) {
                                return Err(Error::DiskFailed {
                                    disk,
                                    message: format!("failed during the scrub: {e}"),
                                });
                            }
                            return Err(Error::Idr(e));
                        }
                    };
                    self.counters[disk]
                        .logical_read
                        .fetch_add(report.bytes_verified, Ordering::Relaxed);
                    total.bytes_verified += report.bytes_verified;
                    total.stripes_never_written += report.stripes_never_written;
                    total.blocks_repaired += report.blocks_repaired;
                    total.check_blocks_repaired += report.check_blocks_repaired;
                    // Verified now; what IDR could not repair becomes defect and is rewritten by recovery.
                    self.record_verified(disk, ps, pe)?;
                    for &(o, l) in &report.unrecoverable {
                        self.add_defect(disk, o, o + l)?;
                    }
                    total.unrecoverable.extend(report.unrecoverable);
                }
                at = to;
            }
        }
        Ok(total)
    }

    /// `IdrDisk::scrub` of `[at, to)` (written stripes), one stripe at a time so that damage IDR accepts is found:
    /// a stripe that is never written, or that needed repairs and holds an all-zero block (see
    /// `untrusted_zero_stripes`), is reported unrecoverable as a whole.
    fn scrub_stripes(
        &self,
        slot: &DiskSlot,
        at: u64,
        to: u64,
    ) -> std::result::Result<ScrubReport, IdrError> {
        let mut total = ScrubReport::default();
        let mut buf = vec![0u8; self.stripe_bytes as usize];
        let mut stripe = at;
        while stripe < to {
            let report = slot.idr.scrub(stripe, self.stripe_bytes)?;
            total.bytes_verified += report.bytes_verified;
            total.stripes_never_written += report.stripes_never_written;
            total.blocks_repaired += report.blocks_repaired;
            total.check_blocks_repaired += report.check_blocks_repaired;
            let suspect = report.stripes_never_written > 0
                || !report.unrecoverable.is_empty()
                || report.check_blocks_repaired > 0;
            let untrusted = suspect
                && match slot.idr.read(stripe, &mut buf) {
                    Ok(_) | Err(IdrError::Unrecoverable { .. }) => {
                        report.stripes_never_written > 0 || has_zero_block(&buf)
                    }
                    Err(e) => return Err(e),
                };
            if untrusted {
                total.unrecoverable.push((stripe, self.stripe_bytes));
            } else {
                total.unrecoverable.extend(report.unrecoverable);
            }
            stripe += self.stripe_bytes;
        }
        Ok(total)
    }

    /// The scrub thread: a slice of each disk that spins up (from its cursor), and, when there is none to do and
    /// `scrub_overdue_after_ms` is set, the overdue ranges a chunk at a time, oldest first. Also saves the power
    /// counters now and then.
    fn scrub_loop(&self) {
        let mut power_saved = std::time::Instant::now();
        while !self.stopped() {
            if power_saved.elapsed() >= POWER_SAVE_INTERVAL {
                if let Err(e) = self.save_power_stats() {
                    tracing::warn!("cannot save the power counters: {e}");
                }
                power_saved = std::time::Instant::now();
            }
            let paused = self.paused.load(Ordering::SeqCst);
            let next = if paused {
                None
            } else {
                self.scrub_queue.lock().pop_front()
            };
            let Some(disk) = next else {
                if paused || !self.scrub_overdue_step() {
                    self.sleep_until_woken(200);
                }
                continue;
            };
            // Only while the disk is up anyway: never spin a disk up just for this slice.
            if !matches!(
                self.power.state(disk),
                PowerState::Idle | PowerState::Active
            ) || self.is_failed(disk)
            {
                continue;
            }
            let slice = self.config.read().scrub_slice_bytes;
            let row = self.maps.lock().scrub[disk];
            let from = row.cursor.min(self.logical_bytes);
            let to = (from + slice).min(self.logical_bytes);
            if let Err(e) = self.scrub_range(disk, from, to) {
                tracing::warn!("scrub of disk {disk} failed: {e}");
                continue;
            }
            let new_row = if to >= self.logical_bytes {
                ScrubRow {
                    cursor: 0,
                    last_pass_ms: now_ms(),
                }
            } else {
                ScrubRow { cursor: to, ..row }
            };
            if let Err(e) = self.set_scrub_row(disk, new_row) {
                tracing::warn!("cannot record scrub progress of disk {disk}: {e}");
            }
        }
    }

    /// One step of the scheduled deliberate scrub: the oldest overdue range of a live disk, at most one recovery
    /// chunk of it. Returns whether it scrubbed something.
    fn scrub_overdue_step(&self) -> bool {
        let (after_ms, chunk) = {
            let config = self.config.read();
            (
                config.scrub_overdue_after_ms,
                config.recovery_chunk_bytes_max,
            )
        };
        if after_ms == 0 {
            return false;
        }
        let cutoff = now_ms().saturating_sub(after_ms);
        let Some((disk, start, end, _)) = self
            .overdue_ranges(cutoff)
            .into_iter()
            .min_by_key(|range| range.3)
        else {
            return false;
        };
        match self.scrub_range(disk, start, end.min(start + chunk)) {
            Ok(_) => true,
            Err(e) => {
                if !self.stopped() {
                    tracing::warn!("scheduled scrub of disk {disk} at {start} failed: {e}");
                }
                false
            }
        }
    }

    // ---- verify parity -----------------------------------------------------------------------------------------

    fn verify_parity(&self, progress: &dyn Fn(u64, u64)) -> Result<ParityReport> {
        let mut report = ParityReport::default();
        let groups: Vec<_> = self.geometry.groups().collect();
        // Ranges to check per group: where any member (parity included) was ever written.
        let mut work: Vec<(permafrost_grid::GroupId, RangeSet)> = Vec::new();
        let pending: HashMap<usize, RangeSet> = self
            .geometry
            .parity_disks()
            .iter()
            .map(|&p| (p, self.pending_delta_units(p)))
            .collect();
        {
            let maps = self.maps.lock();
            for &g in &groups {
                let members = self.geometry.group_members(g);
                if members.iter().any(|&m| maps.failed[m]) {
                    report.groups_skipped += 1;
                    continue;
                }
                // Where any member (parity included) was written or has pending deltas.
                let mut units = RangeSet::new();
                for &m in members {
                    let ranges = maps.written[m]
                        .iter()
                        .chain(pending.get(&m).into_iter().flat_map(|p| p.iter()));
                    for (s, e) in ranges {
                        units.insert(s, e);
                    }
                }
                work.push((g, units));
            }
        }
        let total: u64 = work
            .iter()
            .map(|(_, u)| u.total() * self.stripe_bytes)
            .sum();
        let chunk = self.chunk_bytes_max();
        let mut done = 0;
        progress(0, total);
        for (group, units) in work {
            let members = self.geometry.group_members(group);
            let parity = self.geometry.group_parity(group);
            for (us, ue) in units.iter() {
                let (s, e) = (
                    us * self.stripe_bytes,
                    (ue * self.stripe_bytes).min(self.logical_bytes),
                );
                let mut at = s;
                while at < e {
                    let to = (at + chunk).min(e);
                    let len = (to - at) as usize;
                    let _lock = self.lock(
                        members
                            .iter()
                            .map(|&m| RangeLock::shared(m, at, to))
                            .collect(),
                    );
                    let snapshot = self.deltas.snapshot(self.geometry.parity_disks());
                    let mut acc = vec![0u8; len];
                    let mut buf = vec![0u8; len];
                    let mut expected = vec![0u8; len];
                    let mut unreadable = Vec::new();
                    {
                        let _guards = self.power.acquire_many(members).ok();
                        for &m in members {
                            let target = if m == parity { &mut expected } else { &mut buf };
                            if self.read_true(m, at, target, &snapshot).is_err() {
                                unreadable.push(m);
                            } else if m != parity {
                                permafrost_idr::xor_into(&mut acc, &buf);
                            }
                        }
                    }
                    // Unreadable members are reconstructed through the grid, with the group's power guards
                    // dropped: the reconstruction acquires its own set (never acquire while holding guards).
                    let pool = BufferPool::default();
                    for m in unreadable {
                        let target = if m == parity { &mut expected } else { &mut buf };
                        self.reconstruct_into(m, at, target, &snapshot, &pool)?;
                        if m != parity {
                            permafrost_idr::xor_into(&mut acc, &buf);
                        }
                    }
                    let mut block = 0;
                    while block < len {
                        let b_end = (block + 4096).min(len);
                        if acc[block..b_end] != expected[block..b_end] {
                            let off = at + block as u64;
                            match report.mismatches.last_mut() {
                                Some(last)
                                    if last.parity_disk == parity
                                        && last.offset + last.len == off =>
                                {
                                    last.len += (b_end - block) as u64
                                }
                                _ => report.mismatches.push(ParityMismatch {
                                    parity_disk: parity,
                                    group: match group {
                                        permafrost_grid::GroupId::Horizontal(h) => {
                                            format!("hPG {h}")
                                        }
                                        permafrost_grid::GroupId::Vertical(c) => format!("vPG {c}"),
                                    },
                                    offset: off,
                                    len: (b_end - block) as u64,
                                }),
                            }
                        }
                        block = b_end;
                    }
                    report.bytes_checked += to - at;
                    done += to - at;
                    progress(done, total);
                    at = to;
                }
            }
        }
        Ok(report)
    }
}

/// The chunk of one write with its computed content.
struct ChunkWrite {
    row: PromiseRow,
    /// New content of the data disk over the row's range.
    new: Vec<u8>,
    /// `old ⊕ new` over the user range.
    delta: Vec<u8>,
    delta_offset: u64,
    /// Written parts of the range on each of the four disks before this chunk marked it written.
    written_before: [Vec<(u64, u64)>; 4],
}

/// True when some 4 KiB block of `bytes` (4 KiB aligned) is all zeros.
/// Zero the bytes of `buf` (holding `[offset, offset + buf.len())`) outside every range of `parts` (inside the
/// buffer's range, possibly overlapping). With parts in ascending order exactly those; out of order, every
/// uncovered byte and maybe some covered ones (which the caller overwrites anyway).
fn zero_outside(buf: &mut [u8], offset: u64, parts: &[(u64, u64)]) {
    let end = offset + buf.len() as u64;
    let mut at = offset;
    for &(s, e) in parts {
        if s > at {
            buf[(at - offset) as usize..(s.min(end) - offset) as usize].fill(0);
        }
        at = at.max(e.min(end));
    }
    buf[(at - offset) as usize..].fill(0);
}

fn has_zero_block(bytes: &[u8]) -> bool {
    bytes.chunks(4096).any(is_zero)
}

/// True when every byte is zero (64 bytes at a time, which the compiler vectorises).
fn is_zero(bytes: &[u8]) -> bool {
    let chunks = bytes.chunks_exact(64);
    let tail = chunks.remainder();
    chunks
        .into_iter()
        .all(|c| c.iter().fold(0u8, |acc, &b| acc | b) == 0)
        && tail.iter().all(|&b| b == 0)
}

/// Slot of `disk` among a promise's four disks.
fn slot_of(disks: &[usize; 4], disk: usize) -> Slot {
    match disks.iter().position(|&d| d == disk) {
        Some(0) => Slot::Data,
        Some(1) => Slot::HParity,
        Some(2) => Slot::VParity,
        Some(3) => Slot::VhParity,
        _ => panic!("disk {disk} is not one of the promise's disks {disks:?}"),
    }
}

/// The steps of `steps` that `target`'s step depends on, in order.
fn needed_steps(
    steps: &[permafrost_grid::RecoveryStep],
    target: usize,
) -> Vec<permafrost_grid::RecoveryStep> {
    let mut needed = vec![target];
    let mut out = Vec::new();
    for step in steps.iter().rev() {
        if needed.contains(&step.disk) {
            needed.extend(step.sources.iter().copied());
            out.push(step.clone());
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod zero_outside_tests {
    use super::zero_outside;

    #[test]
    fn zero_outside_clears_every_byte_no_part_covers() {
        // Buffer of 10 bytes at offset 100; parts ascending and overlapping.
        let mut buf = [7u8; 10];
        zero_outside(&mut buf, 100, &[(101, 103), (102, 104), (106, 108)]);
        assert_eq!(buf, [0, 7, 7, 7, 0, 0, 7, 7, 0, 0]);
        // Out of order: still no uncovered byte is left.
        let mut buf = [7u8; 10];
        zero_outside(&mut buf, 100, &[(106, 108), (101, 103)]);
        for (i, &b) in buf.iter().enumerate() {
            assert!(
                b == 0 || (1..3).contains(&i) || (6..8).contains(&i),
                "byte {i}"
            );
        }
        let mut all = [7u8; 4];
        zero_outside(&mut all, 0, &[(0, 4)]);
        assert_eq!(all, [7; 4]);
        zero_outside(&mut all, 0, &[]);
        assert_eq!(all, [0; 4]);
    }
}
