//! The power manager: one model per disk, a budget of spinning disks, idle spin-down.

use super::{PowerController, PowerModel, PowerProfile, PowerState, PowerStats, SimulatedPower};
use crate::{check_io, Disk, DiskError};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest a waiting thread sleeps before re-checking, whatever it waits for:
/// a bound on how late a missed wake-up can make anything.
const WAIT_REAL_MAX: Duration = Duration::from_millis(50);

/// The clock a [`PowerManager`] runs on, in milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since an arbitrary fixed origin; never decreases.
    fn now_ms(&self) -> u64;
    /// Real time to block while waiting for `ms` of this clock's time to pass.
    /// The default is `ms` real milliseconds; a clock that does not follow real
    /// time returns a short polling interval instead.
    fn real_wait(&self, ms: u64) -> Duration {
        Duration::from_millis(ms)
    }
}

/// Real, monotonic time since the clock was made.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock reading 0 now.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

/// A clock that moves only when told to: for deterministic tests of code that
/// uses a [`PowerManager`]. Threads waiting on it poll every real millisecond.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now_ms: AtomicU64::new(start_ms),
        }
    }
    /// Move the clock forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
    fn real_wait(&self, _ms: u64) -> Duration {
        Duration::from_millis(1)
    }
}

/// Errors of the power manager. All are caller errors, reported, never hung on.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    #[error("spinning budget must allow at least 1 disk, got {0}")]
    InvalidBudget(usize),
    #[error(
        "{controllers} power controllers given for {n_disks} disks: need exactly one per disk"
    )]
    ControllerCount { controllers: usize, n_disks: usize },
    #[error("invalid power profile: {0}")]
    InvalidProfile(String),
    #[error("disk {disk} does not exist: the power manager has {n_disks} disks")]
    NoSuchDisk { disk: usize, n_disks: usize },
    #[error("cannot keep {requested} disks spinning at once: the budget allows {budget}")]
    SetExceedsBudget { requested: usize, budget: usize },
}

/// Called with a disk's index after it finished spinning up.
type SpinUpHook = Arc<dyn Fn(usize) + Send + Sync>;

/// Keeps N disks' power models against a clock, with a budget of spinning disks.
///
/// - [`PowerManager::acquire`] / [`PowerManager::acquire_many`] return
///   [`ActivityGuard`]s: while any guard of a disk lives, the disk is on.
///   Acquiring an Off disk takes a place in a FIFO queue until the budget has
///   room, calls the controller's `spin_up`, and sleeps until the model says the
///   disk is ready (for file-backed disks that sleep *is* the simulated delay).
/// - When the budget is full and the head of the queue waits, Idle disks (on,
///   no guard) are turned off at once, least recently used first, to make room;
///   otherwise an Idle disk turns off `idle_timeout_ms` after its last guard
///   dropped. A background thread (stopped when the manager is dropped) applies
///   idle timeouts and calls the controllers' `spin_down`.
/// - A disk counts against the budget from the moment its spin-up is granted
///   until its controller's `spin_down` returned, so the budget holds for the
///   physical drives too. [`PowerManager::max_spinning_seen`] records the peak.
///
/// Deadlock rule for callers: never acquire while holding guards, except disks
/// you already hold. To hold several disks, acquire them together with
/// [`PowerManager::acquire_many`], which waits until the whole set can be on.
pub struct PowerManager {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    profile: PowerProfile,
    clock: Arc<dyn Clock>,
    /// One per disk; replaced when a disk is ([`PowerManager::set_controller`]).
    controllers: RwLock<Vec<Arc<dyn PowerController>>>,
    state: Mutex<State>,
    /// Notified whenever a guard drops, a disk turns off or the queue moves.
    changed: Condvar,
    on_spin_up: RwLock<Option<SpinUpHook>>,
}

struct State {
    disks: Vec<Slot>,
    spinning_max: usize,
    max_spinning_seen: usize,
    /// Tickets of acquires waiting for budget, served strictly in order.
    queue: VecDeque<u64>,
    next_ticket: u64,
    controller_errors: u64,
    stopping: bool,
}

struct Slot {
    model: PowerModel,
    /// The controller was told to spin up and has not finished spinning down.
    powered: bool,
    /// A `spin_down` call is in flight (made outside the lock).
    powering_down: bool,
}

impl Slot {
    fn counts_as_spinning(&self) -> bool {
        self.model.state() != PowerState::Off || self.powered
    }
}

impl State {
    fn spinning(&self) -> usize {
        self.disks.iter().filter(|s| s.counts_as_spinning()).count()
    }
}

impl PowerManager {
    /// A manager of `n_disks` disks, all Off, with at most `spinning_max` of
    /// them spinning at once, on the real clock. `controllers[i]` controls disk i.
    pub fn new(
        profile: PowerProfile,
        n_disks: usize,
        spinning_max: usize,
        controllers: Vec<Arc<dyn PowerController>>,
    ) -> Result<Arc<PowerManager>, PowerError> {
        PowerManager::with_clock(
            profile,
            n_disks,
            spinning_max,
            controllers,
            Arc::new(SystemClock::new()),
        )
    }

    /// [`PowerManager::new`] with [`SimulatedPower`] for every disk.
    pub fn simulated(
        profile: PowerProfile,
        n_disks: usize,
        spinning_max: usize,
    ) -> Result<Arc<PowerManager>, PowerError> {
        let controllers = (0..n_disks)
            .map(|_| Arc::new(SimulatedPower) as Arc<dyn PowerController>)
            .collect();
        PowerManager::new(profile, n_disks, spinning_max, controllers)
    }

    /// [`PowerManager::new`] on the given clock.
    pub fn with_clock(
        profile: PowerProfile,
        n_disks: usize,
        spinning_max: usize,
        controllers: Vec<Arc<dyn PowerController>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<PowerManager>, PowerError> {
        if spinning_max == 0 {
            return Err(PowerError::InvalidBudget(spinning_max));
        }
        if controllers.len() != n_disks {
            return Err(PowerError::ControllerCount {
                controllers: controllers.len(),
                n_disks,
            });
        }
        profile.validate().map_err(PowerError::InvalidProfile)?;
        let now_ms = clock.now_ms();
        let disks = (0..n_disks)
            .map(|_| Slot {
                model: PowerModel::new(profile.clone(), now_ms),
                powered: false,
                powering_down: false,
            })
            .collect();
        let inner = Arc::new(Inner {
            profile,
            clock,
            controllers: RwLock::new(controllers),
            state: Mutex::new(State {
                disks,
                spinning_max,
                max_spinning_seen: 0,
                queue: VecDeque::new(),
                next_ticket: 0,
                controller_errors: 0,
                stopping: false,
            }),
            changed: Condvar::new(),
            on_spin_up: RwLock::new(None),
        });
        let worker = inner.clone();
        let thread = std::thread::Builder::new()
            .name("permafrost-power".to_string())
            .spawn(move || worker.run_idle_spin_down())
            .expect("spawn the power manager thread");
        Ok(Arc::new(PowerManager {
            inner,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// Number of disks managed.
    pub fn n_disks(&self) -> usize {
        self.inner.controllers.read().len()
    }

    /// The profile every disk's model runs.
    pub fn profile(&self) -> &PowerProfile {
        &self.inner.profile
    }

    /// Current budget: the most disks that may spin at once.
    pub fn budget(&self) -> usize {
        self.inner.state.lock().spinning_max
    }

    /// Change the budget. Lowering it turns nothing off at once: new spin-ups
    /// wait until fewer than `spinning_max` disks spin.
    pub fn set_budget(&self, spinning_max: usize) -> Result<(), PowerError> {
        if spinning_max == 0 {
            return Err(PowerError::InvalidBudget(spinning_max));
        }
        self.inner.state.lock().spinning_max = spinning_max;
        self.inner.changed.notify_all();
        Ok(())
    }

    /// Call `hook(disk)` after each spin-up completes. It runs on the thread
    /// that acquired the disk, outside the manager's locks, before that acquire
    /// returns, while the disk is held on (so I/O to it from the hook does not
    /// wait). Keep it short or hand the work to another thread.
    pub fn set_on_spin_up(&self, hook: Box<dyn Fn(usize) + Send + Sync>) {
        *self.inner.on_spin_up.write() = Some(Arc::from(hook));
    }

    /// Keep `disk` on until the guard drops, spinning it up first if needed
    /// (blocking through the queue and the spin-up delay).
    ///
    /// # Panics
    /// If `disk >= n_disks()`: disk indices come from the caller's own layout.
    pub fn acquire(&self, disk: usize) -> ActivityGuard {
        let n_disks = self.n_disks();
        assert!(
            disk < n_disks,
            "disk {disk} does not exist: the power manager has {n_disks} disks"
        );
        let mut guards = self
            .acquire_many(&[disk])
            .expect("a budget of at least 1 always fits one disk");
        guards.pop().expect("one guard per requested disk")
    }

    /// Keep every disk of `disks` on at once: waits until the whole set can
    /// spin within the budget, then spins up those that are Off together.
    /// Returns one guard per entry of `disks`, in order (duplicates allowed).
    /// Errors, instead of waiting forever, if the set is larger than the budget.
    pub fn acquire_many(&self, disks: &[usize]) -> Result<Vec<ActivityGuard>, PowerError> {
        let inner = &self.inner;
        let n_disks = self.n_disks();
        if let Some(&disk) = disks.iter().find(|&&d| d >= n_disks) {
            return Err(PowerError::NoSuchDisk { disk, n_disks });
        }
        let mut st = inner.state.lock();
        if let [disk] = disks {
            // Fast path for the common case: one disk that is already on and
            // not due to turn off. Needs no budget and no settling of others.
            let now_ms = inner.clock.now_ms();
            let model = &mut st.disks[*disk].model;
            let stays_on = match model.state() {
                PowerState::Off => false,
                PowerState::Idle => model
                    .next_transition_ms()
                    .is_some_and(|due_ms| due_ms > now_ms),
                PowerState::SpinningUp | PowerState::Active => true,
            };
            if stays_on {
                let ready_ms = model.begin_io(now_ms);
                let guard = ActivityGuard {
                    inner: inner.clone(),
                    disk: *disk,
                };
                drop(st);
                inner.sleep_until(ready_ms);
                return Ok(vec![guard]);
            }
        }
        let mut set = disks.to_vec();
        set.sort_unstable();
        set.dedup();
        let mut ticket: Option<u64> = None;
        let grant_ms = loop {
            let now_ms = inner.settle(&mut st);
            if set.len() > st.spinning_max {
                let budget = st.spinning_max;
                inner.leave_queue(&mut st, ticket);
                return Err(PowerError::SetExceedsBudget {
                    requested: set.len(),
                    budget,
                });
            }
            let settling = set.iter().any(|&d| st.disks[d].powering_down);
            let off: Vec<usize> = set
                .iter()
                .copied()
                .filter(|&d| st.disks[d].model.state() == PowerState::Off)
                .collect();
            if !settling && off.is_empty() {
                // Everything is on or spinning up: no budget needed, no queue.
                inner.leave_queue(&mut st, ticket);
                break now_ms;
            }
            if !settling {
                let my_ticket = *ticket.get_or_insert_with(|| {
                    let t = st.next_ticket;
                    st.next_ticket += 1;
                    st.queue.push_back(t);
                    t
                });
                if st.queue.front() == Some(&my_ticket) {
                    let free = st.spinning_max.saturating_sub(st.spinning());
                    if off.len() <= free {
                        inner.leave_queue(&mut st, ticket);
                        break now_ms;
                    }
                    if inner.evict_idle(&mut st, &set, off.len() - free, now_ms) > 0 {
                        continue; // the next settle powers the victims down
                    }
                }
            }
            inner.wait(&mut st, now_ms);
        };

        // Grant: begin one I/O per requested entry at the settled time.
        let mut spun_up = Vec::new();
        let mut ready_ms = grant_ms;
        for &disk in disks {
            let slot = &mut st.disks[disk];
            if slot.model.state() == PowerState::Off {
                slot.powered = true;
                spun_up.push(disk);
            }
            ready_ms = ready_ms.max(slot.model.begin_io(grant_ms));
        }
        let guards: Vec<ActivityGuard> = disks
            .iter()
            .map(|&disk| ActivityGuard {
                inner: inner.clone(),
                disk,
            })
            .collect();
        let spinning = st.spinning();
        st.max_spinning_seen = st.max_spinning_seen.max(spinning);
        drop(st);
        inner.changed.notify_all();

        for &disk in &spun_up {
            tracing::debug!(disk, "spinning up");
            let controller = inner.controller(disk);
            if let Err(e) = controller.spin_up() {
                // The I/O that follows reports the drive's real state; note it here.
                tracing::warn!(disk, controller = %controller.describe(), "spin-up failed: {e}");
                inner.state.lock().controller_errors += 1;
            }
        }
        inner.sleep_until(ready_ms);
        if !spun_up.is_empty() {
            let hook = inner.on_spin_up.read().clone();
            if let Some(hook) = hook {
                for &disk in &spun_up {
                    hook(disk);
                }
            }
        }
        Ok(guards)
    }

    /// The model's state of `disk` now.
    ///
    /// # Panics
    /// If `disk >= n_disks()`.
    pub fn state(&self, disk: usize) -> PowerState {
        self.peek(disk).state()
    }

    /// Counters of `disk` up to now.
    ///
    /// # Panics
    /// If `disk >= n_disks()`.
    pub fn stats(&self, disk: usize) -> PowerStats {
        self.peek(disk).stats()
    }

    /// Counters of all disks summed, up to now.
    pub fn totals(&self) -> PowerStats {
        let now_ms = self.inner.clock.now_ms();
        let st = self.inner.state.lock();
        let mut totals = PowerStats::default();
        for slot in &st.disks {
            let mut model = slot.model.clone();
            model.advance(now_ms);
            totals.add(&model.stats());
        }
        totals
    }

    /// Disks counted against the budget now (on, spinning up, or still being
    /// powered down).
    pub fn spinning_now(&self) -> usize {
        self.inner.state.lock().spinning()
    }

    /// The most disks ever counted against the budget at once.
    pub fn max_spinning_seen(&self) -> usize {
        self.inner.state.lock().max_spinning_seen
    }

    /// Controller `spin_up`/`spin_down` calls that returned an error.
    pub fn controller_errors(&self) -> u64 {
        self.inner.state.lock().controller_errors
    }

    /// What controls `disk`.
    ///
    /// # Panics
    /// If `disk >= n_disks()`.
    pub fn describe_controller(&self, disk: usize) -> String {
        self.inner.controller(disk).describe()
    }

    /// Control `disk` with `controller` from now on (the disk was replaced by another drive).
    ///
    /// # Panics
    /// If `disk >= n_disks()`.
    pub fn set_controller(&self, disk: usize, controller: Arc<dyn PowerController>) {
        self.inner.controllers.write()[disk] = controller;
    }

    fn peek(&self, disk: usize) -> PowerModel {
        let now_ms = self.inner.clock.now_ms();
        let mut model = self.inner.state.lock().disks[disk].model.clone();
        model.advance(now_ms);
        model
    }
}

impl Drop for PowerManager {
    fn drop(&mut self) {
        self.inner.state.lock().stopping = true;
        self.inner.changed.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Inner {
    fn controller(&self, disk: usize) -> Arc<dyn PowerController> {
        self.controllers.read()[disk].clone()
    }

    /// Bring every model to now and spin down the drives whose model turned
    /// Off (idle timeout or eviction). Controller calls happen with the lock
    /// released. Returns the time at which nothing was left to do.
    fn settle(&self, st: &mut MutexGuard<'_, State>) -> u64 {
        loop {
            let now_ms = self.clock.now_ms();
            let mut victims = Vec::new();
            for (disk, slot) in st.disks.iter_mut().enumerate() {
                slot.model.advance(now_ms);
                if slot.model.state() == PowerState::Off && slot.powered && !slot.powering_down {
                    slot.powering_down = true;
                    victims.push(disk);
                }
            }
            if victims.is_empty() {
                return now_ms;
            }
            let failures = MutexGuard::unlocked(st, || {
                let mut failures = 0;
                for &disk in &victims {
                    tracing::debug!(disk, "spinning down");
                    let controller = self.controller(disk);
                    if let Err(e) = controller.spin_down() {
                        tracing::warn!(disk, controller = %controller.describe(), "spin-down failed: {e}");
                        failures += 1;
                    }
                }
                failures
            });
            st.controller_errors += failures;
            for &disk in &victims {
                let slot = &mut st.disks[disk];
                slot.powering_down = false;
                slot.powered = false;
            }
            self.changed.notify_all();
        }
    }

    /// Turn up to `want` Idle disks outside `keep` Off now, least recently used
    /// first. Returns how many.
    fn evict_idle(&self, st: &mut State, keep: &[usize], want: usize, now_ms: u64) -> usize {
        let mut idle: Vec<(u64, usize)> = st
            .disks
            .iter()
            .enumerate()
            .filter(|(disk, slot)| {
                slot.model.state() == PowerState::Idle && keep.binary_search(disk).is_err()
            })
            .map(|(disk, slot)| (slot.model.next_transition_ms().unwrap_or(0), disk))
            .collect();
        idle.sort_unstable();
        let mut evicted = 0;
        for &(_, disk) in idle.iter().take(want) {
            if st.disks[disk].model.spin_down(now_ms) {
                evicted += 1;
            }
        }
        evicted
    }

    fn leave_queue(&self, st: &mut State, ticket: Option<u64>) {
        if let Some(ticket) = ticket {
            st.queue.retain(|&t| t != ticket);
            self.changed.notify_all();
        }
    }

    /// Wait for a change, or until the next model transition is due.
    fn wait(&self, st: &mut MutexGuard<'_, State>, now_ms: u64) {
        let next_ms = st
            .disks
            .iter()
            .filter_map(|s| s.model.next_transition_ms())
            .min();
        let timeout = match next_ms {
            Some(due_ms) => self
                .clock
                .real_wait(due_ms.saturating_sub(now_ms).max(1))
                .min(WAIT_REAL_MAX),
            None => WAIT_REAL_MAX,
        };
        self.changed.wait_for(st, timeout);
    }

    fn sleep_until(&self, ready_ms: u64) {
        loop {
            let now_ms = self.clock.now_ms();
            if now_ms >= ready_ms {
                return;
            }
            std::thread::sleep(self.clock.real_wait(ready_ms - now_ms));
        }
    }

    /// The background thread: apply idle timeouts and spin drives down.
    fn run_idle_spin_down(&self) {
        let mut st = self.state.lock();
        while !st.stopping {
            let now_ms = self.settle(&mut st);
            let next_ms = st
                .disks
                .iter()
                .filter_map(|s| s.model.next_transition_ms())
                .min();
            let timeout = match next_ms {
                Some(due_ms) => self.clock.real_wait(due_ms.saturating_sub(now_ms).max(1)),
                None => Duration::from_secs(1),
            };
            self.changed
                .wait_for(&mut st, timeout.min(Duration::from_secs(1)));
        }
    }
}

/// Keeps one disk on while it lives. Dropping the last guard of a disk makes it
/// Idle and starts its idle timer.
pub struct ActivityGuard {
    inner: Arc<Inner>,
    disk: usize,
}

impl ActivityGuard {
    /// The disk this guard keeps on.
    pub fn disk(&self) -> usize {
        self.disk
    }
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        let now_ms = self.inner.clock.now_ms();
        let model = &mut st.disks[self.disk].model;
        model.end_io(now_ms);
        let last_guard = model.io_in_flight() == 0;
        drop(st);
        if last_guard {
            // The disk is now Idle: a new idle deadline for the background
            // thread, and a disk a waiting acquire may turn off to make room.
            self.inner.changed.notify_all();
        }
    }
}

impl std::fmt::Debug for ActivityGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ActivityGuard(disk {})", self.disk)
    }
}

/// A [`Disk`] whose every read, write and sync holds an [`ActivityGuard`] of
/// its disk, so I/O spins the disk up (through the budget) and keeps it on.
pub struct PoweredDisk {
    inner: Arc<dyn Disk>,
    manager: Arc<PowerManager>,
    index: usize,
}

impl PoweredDisk {
    /// `inner` as disk `index` of `manager`.
    ///
    /// # Panics
    /// If `index >= manager.n_disks()`.
    pub fn new(inner: Arc<dyn Disk>, manager: Arc<PowerManager>, index: usize) -> PoweredDisk {
        let n_disks = manager.n_disks();
        assert!(
            index < n_disks,
            "disk {index} does not exist: the power manager has {n_disks} disks"
        );
        PoweredDisk {
            inner,
            manager,
            index,
        }
    }

    /// This disk's index in its manager.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The manager this disk draws power through.
    pub fn manager(&self) -> &Arc<PowerManager> {
        &self.manager
    }
}

impl Disk for PoweredDisk {
    fn capacity_bytes(&self) -> u64 {
        self.inner.capacity_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?; // a bad request must not spin a disk up
        let _on = self.manager.acquire(self.index);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        check_io(self, offset, buf.len())?;
        let _on = self.manager.acquire(self.index);
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<(), DiskError> {
        let _on = self.manager.acquire(self.index);
        self.inner.sync()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}
