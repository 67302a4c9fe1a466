//! Opening a grid: `Engine::create` (headers on every disk, an empty journal), `Engine::open` (check each disk's
//! header, load the journal's maps, replay what a crash left), the background threads (one drain per parity disk,
//! recovery, scrub) and closing.
//!
//! **Invariants.**
//! - A disk whose header does not match the grid (wrong grid id, index or geometry) is refused with an error naming
//!   it; a disk that cannot be opened at all runs as failed (reconstructed on read, rebuilt on replacement).
//! - No promise is served before replay has settled every journal row (docs/engine.md "Replay").
//! - Closing stops the threads first (each finishes its piece in flight and journals it), then saves the power
//!   counters; a dropped engine closes itself.

use permafrost_disk::power::{WakeKind, WakeReason};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, RwLock};
use permafrost_disk::power::{PowerManager, PowerStats};
use permafrost_disk::{BlockDisk, Disk, DiskError, FileDisk};
use permafrost_grid::{Geometry, Layout};

use super::{Engine, Maps, OpenOptions, Shared, JOURNAL_FILE};
use crate::config::{DiskSpec, GridConfig, CONFIG_FILE};
use crate::delta::{delta_dir, DeltaCache};
use crate::disks::{DiskSlot, IoCounters, MissingDisk};
use crate::header::DiskHeader;
use crate::journal::{Journal, RangeTable};
use crate::locks::LockManager;
use crate::{Error, Result};

impl Engine {
    /// Create a new grid in `dir` (which must not hold a `grid.toml`): create missing file disks, write every
    /// disk's header, the configuration and an empty journal; then open it.
    pub fn create(dir: impl AsRef<Path>, config: GridConfig) -> Result<Engine> {
        let dir = dir.as_ref();
        config.validate()?;
        let geometry = Geometry::new(config.layout).map_err(|e| Error::Config(e.to_string()))?;
        if config.disks.len() != geometry.disks() {
            return Err(Error::Config(format!(
                "layout {} has {} disks but {} are configured (disks are added to a grid with `add_disk`)",
                config.layout,
                geometry.disks(),
                config.disks.len()
            )));
        }
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
        let mut config = GridConfig::load(&dir)?;
        let journal = Journal::open(&dir.join(JOURNAL_FILE))?;
        let version = journal.schema_version()?;
        if version != crate::journal::SCHEMA_VERSION {
            return Err(Error::Config(format!(
                "{JOURNAL_FILE} has schema version {version}; this engine reads version {}",
                crate::journal::SCHEMA_VERSION
            )));
        }
        let geometry = super::grow::load_geometry(&dir, &mut config, &journal)?;
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
        let failed_in_journal: HashMap<usize, String> =
            journal.failed_disks()?.into_iter().collect();

        // Per-disk entries for every index the grid may grow to (see `Shared::counters`).
        let per_disk = Layout::MAX_DISKS.max(n);
        let counters: Vec<Arc<IoCounters>> = (0..per_disk)
            .map(|_| Arc::new(IoCounters::default()))
            .collect();
        let mut backends: Vec<Option<Arc<dyn Disk>>> = Vec::with_capacity(n);
        let mut failed = vec![false; n];
        let mut newly_failed = Vec::new();
        for (index, spec) in config.disks.iter().enumerate() {
            match open_backend(
                &dir,
                &config,
                &geometry,
                index,
                spec,
                options.wrap_disk.as_ref(),
            )? {
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
        let mut power_base = journal.power(n)?;
        power_base.resize(per_disk, PowerStats::default());
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
            geometry: super::grow::GeometryCell::new(geometry),
            power: Arc::clone(&power),
            slots: RwLock::new(slots.into_iter().map(Arc::new).collect()),
            counters,
            logical_bytes,
            stripe_bytes,
            journal,
            locks: LockManager::new(),
            deltas,
            drain_mutexes: (0..per_disk).map(|_| Mutex::new(())).collect(),
            recovery_mutexes: (0..per_disk).map(|_| Mutex::new(())).collect(),
            evacuation_sources: Default::default(),
            bytes_recovered: (0..per_disk).map(|_| AtomicU64::new(0)).collect(),
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
            crashed: AtomicBool::new(false),
            wake: Condvar::new(),
            wake_mutex: Mutex::new(()),
            scrub_queue: Mutex::new(VecDeque::new()),
            readers: (0..per_disk).map(|_| AtomicUsize::new(0)).collect(),
            read_tails: Default::default(),
            wrap_disk: options.wrap_disk,
            power_base,
            grow_mutex: Mutex::new(()),
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
        // Each thread names the reason of the spin-ups it causes (the operator's view shows them).
        threads.push(spawn("permafrost-recovery", move || {
            let _wake = WakeReason::about(WakeKind::Recovery, "damaged ranges").enter();
            shared.recovery_loop()
        }));
        for &disk in self.shared.geometry.parity_disks() {
            let shared = Arc::clone(&self.shared);
            threads.push(spawn(&format!("permafrost-drain-{disk}"), move || {
                let _wake =
                    WakeReason::about(WakeKind::Parity, format!("deltas for disk {disk}")).enter();
                shared.drain_loop(disk)
            }));
        }
        let shared = Arc::clone(&self.shared);
        threads.push(spawn("permafrost-scrub", move || {
            let _wake = WakeReason::about(WakeKind::Scrub, "ranges due (background)").enter();
            shared.scrub_loop()
        }));
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
        if self.shared.crashed() {
            return Ok(()); // stopped at a test crash point: a killed process saves nothing
        }
        self.shared.save_power_stats()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.shut_down() {
            tracing::warn!("closing the grid: {e}");
        }
    }
}

pub(super) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawn an engine thread")
}

/// Open one disk's backend, wrap it (`wrap`: the caller's wrapper, tests) and check its header. `Ok(None)`: the
/// disk cannot be opened (it runs as failed).
pub(super) fn open_backend(
    dir: &Path,
    config: &GridConfig,
    geometry: &Geometry,
    index: usize,
    spec: &DiskSpec,
    wrap: Option<&super::WrapDisk>,
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
    let disk = match wrap {
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
