//! The power manager: one model per disk, a budget of spinning disks, idle spin-down.

use super::wake::{unix_ms, WakeLog};
use super::{
    Admission, PowerBudget, PowerController, PowerError, PowerModel, PowerProfile, PowerState,
    PowerStats, SimulatedPower, SpinUpHistogram, WakeContext, WakeKind, WakeReason, WakeRecord,
};
use crate::{check_io, check_ranges, Disk, DiskError};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use permafrost_policy::{
    DiskCosts, IdleConfig, IdleTimeouts, RequestId, Scheduler, SchedulerConfig, SchedulerStrategy,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest a waiting thread sleeps before re-checking, whatever it waits for:
/// a bound on how late a missed wake-up can make anything.
const WAIT_REAL_MAX: Duration = Duration::from_millis(50);
/// A disk read this recently counts as being read: a persist on it yields between chunks. A stream's reads
/// come one chunk after another with short gaps between; this bridges them.
const READ_RECENT_MS: u64 = 250;
/// How long a persist pausing for reads sleeps before it looks again (the manager's clock).
const YIELD_POLL_MS: u64 = 10;
/// A day, for the spin-ups of the last 24 hours.
const DAY_MS: u64 = 24 * 3_600 * 1_000;

thread_local! {
    /// Guards this thread made and still holds: work that holds a guard may
    /// always go on with disks that stay on (it must never wait for itself).
    static GUARDS_HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn thread_holds_guards() -> bool {
    GUARDS_HELD.with(|g| g.get() > 0)
}

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

/// Called with a disk's index after it finished spinning up.
type SpinUpHook = Arc<dyn Fn(usize) + Send + Sync>;

/// Keeps N disks' power models against a clock, with a budget of spinning disks.
/// The models and the budget policy are a [`PowerBudget`] (shared with the
/// trace simulators); this type adds the lock, the controllers, real sleeping
/// and the idle thread.
///
/// - [`PowerManager::acquire`] / [`PowerManager::acquire_many`] return
///   [`ActivityGuard`]s: while any guard of a disk lives, the disk is on.
///   Acquiring an Off disk waits until the budget has room, calls the
///   controller's `spin_up`, and sleeps until the model says the disk is ready
///   (for file-backed disks that sleep *is* the simulated delay).
/// - Who takes the budget next is the read scheduler's
///   ([`permafrost_policy::Scheduler`], the code the energy simulator runs;
///   [`PowerManager::set_scheduler`]). `fifo` (the default of a bare manager):
///   the budget's FIFO ticket queue, first come first served. `deadline`: the
///   oldest request of the disk set with the most waiting requests, and a
///   request that waited `max_wait_ms` before anything else; while one such
///   request waits, only work on disks that have I/O in flight starts, so the
///   other disks fall idle and one is turned off for it.
/// - Reads (work whose [`WakeReason`] is a read) are counted per disk, waiting
///   and in flight: persistence asks [`PowerManager::yield_to_reads`] between
///   its chunks and pauses while reads want its disks (`deadline` only, bounded
///   by `persist_yield_max_ms`).
/// - Idle timeouts adapt per disk to its recent gaps between requests, and a
///   wear budget of spin-ups per day keeps a disk up rather than exceed it,
///   when [`PowerManager::set_idle`] gave settings
///   ([`permafrost_policy::IdleTimeouts`]); else every disk has the profile's.
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
    /// More hooks after `on_spin_up` (each added once: the SMART reader's).
    spin_up_listeners: RwLock<Vec<SpinUpHook>>,
    /// Every spin-up with its reason (a lock of its own: never held with `state`).
    wakes: Mutex<WakeLog>,
}

struct State {
    /// The models, the queue and the budget policy.
    budget: PowerBudget,
    controller_errors: u64,
    stopping: bool,
    /// The order of requests waiting for the budget (`deadline`); with `fifo`
    /// the budget's own ticket queue orders them and this stays empty.
    sched: Scheduler,
    /// The next acquire's name in the scheduler.
    next_request: RequestId,
    /// Per-disk idle timeouts and the wear budget (`None`: the profile's timeout).
    idle: Option<IdleTimeouts>,
    disks: Vec<DiskActivity>,
}

/// What the manager knows of one disk's work besides its model.
#[derive(Clone, Debug, Default)]
struct DiskActivity {
    /// Read acquires waiting for the budget that need this disk.
    reads_waiting: usize,
    /// Guards of reads that keep this disk on.
    reads_in_flight: usize,
    /// When the last read guard of this disk dropped.
    last_read_ms: Option<u64>,
    /// When the disk's last guard dropped, if no acquire came since (a gap
    /// between requests for the idle timeouts).
    idle_since_ms: Option<u64>,
    /// Spin-ups in the last 24 hours, oldest first (at most one a spin-up
    /// time apart, so bounded by the day's length over the spin-up time).
    spin_ups: VecDeque<u64>,
    /// Requests (by [`request_key`]) that started on this disk, with when
    /// they last acquired it: their further I/O continues while the scheduler
    /// holds new work. At most [`STARTED_MAX`].
    started: Vec<(usize, u64)>,
}

/// Requests remembered per disk as started on it.
const STARTED_MAX: usize = 64;
/// A request that acquired a disk this recently is still under way on it.
const CONTINUE_MS: u64 = 5_000;

/// The identity of the request a thread works for: its reason's subject, made
/// once per request (an S3 GET's `bucket/key`) and shared by its threads.
fn request_key(context: &Option<WakeContext>) -> Option<usize> {
    let subject = context.as_ref()?.reason.subject.as_ref()?;
    Some(Arc::as_ptr(subject) as *const u8 as usize)
}

/// What a `deadline` acquire asks for, the same in each of its attempts.
#[derive(Clone, Copy)]
struct ScheduledRequest<'a> {
    id: RequestId,
    disks: &'a [usize],
    arrival_ms: u64,
    read: bool,
    key: Option<usize>,
}

impl State {
    fn deadline(&self) -> bool {
        self.sched.strategy() == SchedulerStrategy::Deadline
    }

    /// Whether the scheduler holds this new work on `disks` at `now_ms`: a
    /// request that waited `max_wait_ms` waits for the budget, so the disks
    /// in the budget must drain. Work that goes on anyway: on disks that have
    /// I/O in flight, anything but a read (a persist pauses between its chunks
    /// instead, [`ReadYield`]) and a read whose thread holds guards (it must
    /// not wait for itself).
    fn held(&self, disks: &[usize], read: bool, key: Option<usize>, now_ms: u64) -> bool {
        self.deadline()
            && self.sched.holding(now_ms)
            && !disks.iter().all(|&d| {
                let continuing = key.is_some_and(|k| {
                    self.disks[d]
                        .started
                        .iter()
                        .any(|&(s, at)| s == k && now_ms.saturating_sub(at) < CONTINUE_MS)
                });
                continuing
                    || (self.budget.model(d).io_in_flight() > 0 && (!read || thread_holds_guards()))
            })
    }

    /// Request `key` acquired `disks` at `now_ms`.
    fn note_started(&mut self, disks: &[usize], key: Option<usize>, now_ms: u64) {
        let Some(key) = key else { return };
        for &d in disks {
            let started = &mut self.disks[d].started;
            if let Some(entry) = started.iter_mut().find(|(s, _)| *s == key) {
                entry.1 = now_ms;
                continue;
            }
            if started.len() >= STARTED_MAX {
                let oldest = (0..started.len())
                    .min_by_key(|&i| started[i].1)
                    .expect("a full list");
                started.swap_remove(oldest);
            }
            started.push((key, now_ms));
        }
    }

    /// Work on `disks` begins at `now_ms`: a read is counted, and a disk's gap
    /// since its last work ends (for its idle timeout). Gaps shorter than the
    /// shortest timeout cost the same under every timeout, so they are not
    /// remembered (they would only push the long ones out).
    fn begin(&mut self, disks: &[usize], read: bool, now_ms: u64) {
        for &d in disks {
            let a = &mut self.disks[d];
            if read {
                a.reads_in_flight += 1;
            }
            if let Some(since) = a.idle_since_ms.take() {
                if let Some(idle) = self.idle.as_mut() {
                    if now_ms.saturating_sub(since) >= idle.config().timeout_min_ms {
                        idle.went_idle(d, since);
                        idle.request(d, now_ms);
                    }
                }
            }
        }
    }

    /// `disks` started spinning up at `now_ms`.
    fn spun_up(&mut self, disks: &[usize], now_ms: u64) {
        for &d in disks {
            let ups = &mut self.disks[d].spin_ups;
            while ups
                .front()
                .is_some_and(|&t| t.saturating_add(DAY_MS) <= now_ms)
            {
                ups.pop_front();
            }
            ups.push_back(now_ms);
            if let Some(idle) = self.idle.as_mut() {
                idle.spun_up(d, now_ms);
            }
        }
    }

    /// Whether reads want `disk` at `now_ms`: waiting for it, reading it, or
    /// done with it less than [`READ_RECENT_MS`] ago.
    fn reads_want(&self, disk: usize, now_ms: u64) -> bool {
        let a = &self.disks[disk];
        a.reads_waiting > 0
            || a.reads_in_flight > 0
            || a.last_read_ms
                .is_some_and(|t| now_ms.saturating_sub(t) < READ_RECENT_MS)
    }

    /// One attempt of a `deadline` acquire `id` (arrived at `arrival_ms`) to
    /// keep `disks` on at `now_ms`, after settling. It may take budget when the
    /// scheduler names it next (or nobody waits); it needs none when its disks
    /// are all on. Otherwise it waits in the scheduler's queue (`registered`).
    fn try_scheduled(
        &mut self,
        request: ScheduledRequest<'_>,
        registered: &mut bool,
        now_ms: u64,
    ) -> Result<Admission, PowerError> {
        let ScheduledRequest {
            id,
            disks,
            arrival_ms,
            read,
            key,
        } = request;
        if *registered && !self.sched.is_waiting(id) {
            // The scheduler was replaced while this request waited.
            self.sched.wait_for_budget(id, disks, arrival_ms);
        }
        let me_next = *registered && self.sched.next_to_spin(now_ms) == Some(id);
        let held = !me_next && self.held(disks, read, key, now_ms);
        if !held {
            let nobody_waits = self.sched.budget_waiting() == 0;
            let all_on = disks
                .iter()
                .all(|&d| self.budget.model(d).state() != PowerState::Off);
            if me_next || nobody_waits || all_on {
                let mut ticket = None;
                let admission = self.budget.try_acquire(disks, &mut ticket, now_ms);
                self.budget.cancel(&mut ticket); // the order is the scheduler's
                match admission {
                    Ok(Admission::Granted(grant)) => {
                        if *registered {
                            self.sched.granted(id);
                            *registered = false;
                        }
                        return Ok(Admission::Granted(grant));
                    }
                    Ok(Admission::MadeRoom) if me_next || nobody_waits => {
                        return Ok(Admission::MadeRoom)
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if *registered {
                            self.sched.granted(id);
                            *registered = false;
                        }
                        return Err(e);
                    }
                }
            }
        }
        if !*registered {
            self.sched.wait_for_budget(id, disks, arrival_ms);
            *registered = true;
        }
        Ok(Admission::Wait)
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
        let budget = PowerBudget::new(profile.clone(), n_disks, spinning_max, clock.now_ms())?;
        if controllers.len() != n_disks {
            return Err(PowerError::ControllerCount {
                controllers: controllers.len(),
                n_disks,
            });
        }
        let inner = Arc::new(Inner {
            profile,
            clock,
            controllers: RwLock::new(controllers),
            state: Mutex::new(State {
                budget,
                controller_errors: 0,
                stopping: false,
                sched: Scheduler::new(
                    SchedulerConfig {
                        strategy: SchedulerStrategy::Fifo,
                        ..SchedulerConfig::default()
                    },
                    n_disks,
                ),
                next_request: 0,
                idle: None,
                disks: vec![DiskActivity::default(); n_disks],
            }),
            changed: Condvar::new(),
            on_spin_up: RwLock::new(None),
            spin_up_listeners: RwLock::new(Vec::new()),
            wakes: Mutex::new(WakeLog::new(n_disks)),
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
        self.inner.state.lock().budget.budget()
    }

    /// Change the budget. Lowering it turns nothing off at once: new spin-ups
    /// wait until fewer than `spinning_max` disks spin.
    pub fn set_budget(&self, spinning_max: usize) -> Result<(), PowerError> {
        self.inner.state.lock().budget.set_budget(spinning_max)?;
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

    /// Add a hook called like [`PowerManager::set_on_spin_up`]'s, after it; it stays until the manager drops.
    pub fn add_spin_up_listener(&self, hook: Box<dyn Fn(usize) + Send + Sync>) {
        self.inner.spin_up_listeners.write().push(Arc::from(hook));
    }

    /// Keep `disk` on until the guard drops if it is on now and not due to turn off: never spins it up, never
    /// waits for the budget (`None` instead). A disk still spinning up is waited for.
    pub fn acquire_if_on(&self, disk: usize) -> Option<ActivityGuard> {
        let now_ms = self.inner.clock.now_ms();
        let mut st = self.inner.state.lock();
        let grant = (disk < st.budget.n_disks())
            .then(|| st.budget.acquire_on(&[disk], now_ms))
            .flatten()?;
        drop(st);
        self.inner.sleep_until(grant.ready_ms);
        self.inner.guards(&[disk], false).pop()
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
        let context = WakeContext::current();
        let read = context
            .as_ref()
            .is_some_and(|c| c.reason.kind == WakeKind::Read);
        let start_ms = inner.clock.now_ms();
        let mut st = inner.state.lock();
        // Fast path for the common case: disks that are already on and not due
        // to turn off. Needs no budget and no settling of others (unless the
        // scheduler holds new work for a request that waited too long).
        let key = request_key(&context);
        let held = st.held(disks, read, key, start_ms);
        if !held {
            if let Some(grant) = st.budget.acquire_on(disks, start_ms) {
                st.begin(disks, read, start_ms);
                if st.deadline() {
                    st.note_started(disks, key, start_ms);
                }
                drop(st);
                inner.sleep_until(grant.ready_ms);
                if grant.ready_ms > start_ms {
                    inner.note_wait(&context, start_ms); // someone else's spin-up is under way
                }
                return Ok(inner.guards(disks, read));
            }
        }
        // The strategy is the one in force when the request arrived.
        let deadline = st.deadline();
        let id = st.next_request;
        st.next_request += 1;
        let mut registered = false;
        let mut ticket = None;
        if read {
            for &d in disks {
                st.disks[d].reads_waiting += 1;
            }
        }
        let result = loop {
            let now_ms = inner.settle(&mut st);
            let queued = ticket.is_some() || registered;
            let admission = if deadline {
                let request = ScheduledRequest {
                    id,
                    disks,
                    arrival_ms: start_ms,
                    read,
                    key,
                };
                st.try_scheduled(request, &mut registered, now_ms)
            } else {
                st.budget.try_acquire(disks, &mut ticket, now_ms)
            };
            match admission {
                Ok(Admission::Granted(grant)) => break Ok(grant),
                Ok(Admission::MadeRoom) => continue, // the next settle powers the victims down
                Ok(Admission::Wait) => {
                    if registered && !queued {
                        inner.changed.notify_all(); // the scheduler's order changed
                    }
                    inner.wait(&mut st, now_ms)
                }
                Err(e) => break Err((e, queued)),
            }
        };
        if read {
            for &d in disks {
                st.disks[d].reads_waiting -= 1;
            }
        }
        let grant = match result {
            Ok(grant) => grant,
            Err((e, queued)) => {
                drop(st);
                if queued {
                    inner.changed.notify_all(); // the queue moved
                }
                return Err(e);
            }
        };
        let granted_ms = inner.clock.now_ms();
        st.begin(disks, read, granted_ms);
        if st.deadline() {
            st.note_started(disks, key, granted_ms);
        }
        st.spun_up(&grant.spun_up, granted_ms);
        let guards = inner.guards(disks, read);
        drop(st);
        inner.changed.notify_all();

        let spun_up = grant.spun_up;
        // Recorded before the drives are told, so whoever sees a disk spinning up can learn why.
        let seqs: Vec<u64> = if spun_up.is_empty() {
            Vec::new()
        } else {
            let reason = context.as_ref().map_or_else(
                || WakeReason::new(WakeKind::Unattributed),
                |c| c.reason.clone(),
            );
            let at_unix_ms = unix_ms();
            let mut wakes = inner.wakes.lock();
            spun_up
                .iter()
                .map(|&disk| {
                    wakes.record(WakeRecord {
                        seq: 0,
                        disk,
                        reason: reason.clone(),
                        at_ms: granted_ms,
                        at_unix_ms,
                        spin_up_ms: 0,
                        ready: false,
                        controller_failed: false,
                    })
                })
                .collect()
        };
        let mut controller_failed = vec![false; spun_up.len()];
        for (i, &disk) in spun_up.iter().enumerate() {
            tracing::debug!(disk, "spinning up");
            let controller = inner.controller(disk);
            if let Err(e) = controller.spin_up() {
                // The I/O that follows reports the drive's real state; note it here.
                tracing::warn!(disk, controller = %controller.describe(), "spin-up failed: {e}");
                inner.state.lock().controller_errors += 1;
                controller_failed[i] = true;
            }
        }
        inner.sleep_until(grant.ready_ms);
        if !spun_up.is_empty() {
            let spin_up_ms = inner.clock.now_ms() - granted_ms;
            let mut wakes = inner.wakes.lock();
            for (&seq, failed) in seqs.iter().zip(&controller_failed) {
                wakes.complete(seq, spin_up_ms, *failed);
            }
            drop(wakes);
            // One line per spin-up for operators, with its reason (target `permafrost_disk::power`, on by
            // default).
            let reason = context.as_ref().map_or_else(
                || WakeKind::Unattributed.to_string(),
                |c| c.reason.to_string(),
            );
            for (&disk, failed) in spun_up.iter().zip(&controller_failed) {
                let failed = if *failed {
                    " (the controller reported a failure)"
                } else {
                    ""
                };
                tracing::info!(
                    target: "permafrost_disk::power",
                    "disk {disk} spun up in {spin_up_ms} ms for {reason}{failed}"
                );
            }
        }
        if grant.ready_ms > granted_ms || !spun_up.is_empty() {
            inner.note_wait(&context, start_ms);
        }
        if !spun_up.is_empty() {
            let hook = inner.on_spin_up.read().clone();
            let listeners = inner.spin_up_listeners.read().clone();
            for hook in hook.iter().chain(&listeners) {
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
        self.inner.state.lock().budget.totals_at(now_ms)
    }

    /// Disks counted against the budget now (on, spinning up, or still being
    /// powered down).
    pub fn spinning_now(&self) -> usize {
        self.inner.state.lock().budget.spinning()
    }

    /// The most disks ever counted against the budget at once.
    pub fn max_spinning_seen(&self) -> usize {
        self.inner.state.lock().budget.max_spinning_seen()
    }

    /// Order the requests waiting for the budget by `config` from now on
    /// (requests already waiting keep the strategy they arrived under).
    pub fn set_scheduler(&self, config: SchedulerConfig) {
        let mut st = self.inner.state.lock();
        let n_disks = st.budget.n_disks();
        st.sched = Scheduler::new(config, n_disks);
        drop(st);
        self.inner.changed.notify_all();
    }

    /// The scheduler's settings.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        self.inner.state.lock().sched.config().clone()
    }

    /// Adapt each disk's idle timeout to its recent gaps between requests,
    /// with the wear budget of `config` (`None`: every disk keeps the
    /// profile's fixed timeout). What the disks learnt so far is forgotten.
    pub fn set_idle(&self, config: Option<IdleConfig>) {
        let profile = &self.inner.profile;
        let costs = DiskCosts {
            default_timeout_ms: profile.idle_timeout_ms,
            watts_idle: profile.watts_idle,
            spin_up_joules: profile.spin_up_ms as f64 / 1000.0 * profile.watts_spinning_up,
        };
        let mut st = self.inner.state.lock();
        let n_disks = st.budget.n_disks();
        st.idle = config.map(|c| IdleTimeouts::new(c, costs, n_disks));
        for disk in 0..n_disks {
            st.budget.set_idle_timeout_ms(disk, profile.idle_timeout_ms);
        }
        drop(st);
        self.inner.changed.notify_all();
    }

    /// The idle and wear settings, if idle timeouts adapt.
    pub fn idle_config(&self) -> Option<IdleConfig> {
        self.inner
            .state
            .lock()
            .idle
            .as_ref()
            .map(|i| i.config().clone())
    }

    /// The wear budget in spin-ups per disk per day, if idle timeouts adapt
    /// ([`PowerManager::set_idle`]) and it is enforced.
    pub fn spinups_per_day_max(&self) -> Option<u32> {
        let st = self.inner.state.lock();
        let idle = st.idle.as_ref()?;
        idle.config()
            .enforce_wear_budget
            .then(|| idle.spinups_per_day())
    }

    /// The idle timeout `disk` has now (adapted, or the profile's).
    ///
    /// # Panics
    /// If `disk >= n_disks()`.
    pub fn idle_timeout_ms(&self, disk: usize) -> u64 {
        let now_ms = self.inner.clock.now_ms();
        let st = self.inner.state.lock();
        match st.idle.as_ref() {
            Some(idle) => idle.timeout_ms(disk, now_ms),
            None => self.inner.profile.idle_timeout_ms,
        }
    }

    /// Spin-ups of `disk` in the last 24 hours (of this manager's life).
    ///
    /// # Panics
    /// If `disk >= n_disks()`.
    pub fn spin_ups_last_day(&self, disk: usize) -> u64 {
        let now_ms = self.inner.clock.now_ms();
        let st = self.inner.state.lock();
        st.disks[disk]
            .spin_ups
            .iter()
            .filter(|&&t| t.saturating_add(DAY_MS) > now_ms)
            .count() as u64
    }

    /// Reads that wait for `disk` (for the budget) or read it now.
    ///
    /// # Panics
    /// If `disk >= n_disks()`.
    pub fn reads_waiting(&self, disk: usize) -> usize {
        let st = self.inner.state.lock();
        st.disks[disk].reads_waiting + st.disks[disk].reads_in_flight
    }

    /// Requests waiting for the budget now.
    pub fn budget_waiting(&self) -> usize {
        let st = self.inner.state.lock();
        st.sched.budget_waiting() + st.budget.waiting().count()
    }

    /// Whether work on `disks` that can pause (persistence between two chunks)
    /// should, now: reads wait for one of them or read it (or did less than a
    /// moment ago), or a request that has waited `max_wait_ms` waits for the
    /// budget. Always false with the `fifo` scheduler.
    pub fn reads_want(&self, disks: &[usize]) -> bool {
        let now_ms = self.inner.clock.now_ms();
        let st = self.inner.state.lock();
        st.deadline()
            && (st.sched.holding(now_ms) || disks.iter().any(|&d| st.reads_want(d, now_ms)))
    }

    /// Persistence's side of "reads before persistence" for a persist writing
    /// `disks`: call [`ReadYield::between_chunks`] between its chunks.
    pub fn yield_to_reads(self: &Arc<Self>, disks: &[usize]) -> ReadYield {
        ReadYield {
            manager: Arc::clone(self),
            disks: disks.to_vec(),
            yielded_ms: 0,
            paused_ms: 0,
            pauses: 0,
            last_ms: self.inner.clock.now_ms(),
        }
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

    /// Manage one more disk (a grid grown by a disk while open), Off, controlled by `controller`; returns its
    /// index (the next after the others). No other disk changes state. The disk is usable once this returns:
    /// [`PowerManager::n_disks`] counts it last.
    pub fn add_disk(&self, controller: Arc<dyn PowerController>) -> usize {
        let now_ms = self.inner.clock.now_ms();
        self.inner.wakes.lock().add_disk();
        let mut st = self.inner.state.lock();
        let index = st.budget.add_disk(now_ms);
        st.sched.add_disk();
        if let Some(idle) = st.idle.as_mut() {
            idle.add_disk();
        }
        st.disks.push(DiskActivity::default());
        drop(st);
        // Counted last: callers check indices against `n_disks()`.
        self.inner.controllers.write().push(controller);
        self.inner.changed.notify_all();
        index
    }

    /// Every disk's state and counters up to now, read at one instant.
    pub fn snapshot(&self) -> Vec<(PowerState, PowerStats)> {
        let now_ms = self.inner.clock.now_ms();
        let st = self.inner.state.lock();
        (0..st.budget.n_disks())
            .map(|d| {
                let model = st.budget.model_at(d, now_ms);
                (model.state(), model.stats())
            })
            .collect()
    }
    /// The last spin-up of `disk` with its reason (`None` if it never spun up in this manager's life).
    pub fn last_wake(&self, disk: usize) -> Option<WakeRecord> {
        self.inner.wakes.lock().last(disk)
    }
    /// Spin-ups of `disk` per reason (kinds with at least one), in this manager's life.
    pub fn wake_counts(&self, disk: usize) -> Vec<(WakeKind, u64)> {
        self.inner.wakes.lock().counts(disk)
    }
    /// Spin-ups numbered after `seq`, oldest first (at most the last
    /// [`super::WAKE_LOG_RECENT_MAX`]); `last_wake_seq` is the newest number.
    pub fn wakes_since(&self, seq: u64) -> Vec<WakeRecord> {
        self.inner.wakes.lock().since(seq)
    }
    /// Number of the newest spin-up (0 if none yet).
    pub fn last_wake_seq(&self) -> u64 {
        self.inner.wakes.lock().last_seq()
    }
    /// How long spin-ups took until the disk could serve I/O.
    pub fn spin_up_histogram(&self) -> SpinUpHistogram {
        self.inner.wakes.lock().histogram()
    }
    /// The manager's clock now (ms), the time base of [`WakeRecord::at_ms`].
    pub fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }
    fn peek(&self, disk: usize) -> PowerModel {
        let now_ms = self.inner.clock.now_ms();
        self.inner.state.lock().budget.model_at(disk, now_ms)
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

    /// Tell the acquiring work's witness (if any) that it waited for a spin-up since `start_ms`.
    fn note_wait(&self, context: &Option<WakeContext>, start_ms: u64) {
        if let Some(witness) = context.as_ref().and_then(|c| c.witness.as_ref()) {
            witness.note_wait(self.clock.now_ms().saturating_sub(start_ms));
        }
    }
    /// Guards for a granted request, one per entry of `disks` (counted by
    /// [`State::begin`]).
    fn guards(self: &Arc<Self>, disks: &[usize], read: bool) -> Vec<ActivityGuard> {
        let thread = std::thread::current().id();
        GUARDS_HELD.with(|g| g.set(g.get() + disks.len()));
        disks
            .iter()
            .map(|&disk| ActivityGuard {
                inner: self.clone(),
                disk,
                read,
                thread,
            })
            .collect()
    }

    /// Bring every model to now and spin down the drives whose model turned
    /// Off (idle timeout or eviction). Controller calls happen with the lock
    /// released. Returns the time at which nothing was left to do.
    fn settle(&self, st: &mut MutexGuard<'_, State>) -> u64 {
        loop {
            let now_ms = self.clock.now_ms();
            let victims = st.budget.settle(now_ms);
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
                st.budget.powered_down(disk);
            }
            self.changed.notify_all();
        }
    }

    /// Wait for a change, or until the next model transition is due.
    fn wait(&self, st: &mut MutexGuard<'_, State>, now_ms: u64) {
        let timeout = match st.budget.next_transition_ms() {
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
            let timeout = match st.budget.next_transition_ms() {
                Some(due_ms) => self.clock.real_wait(due_ms.saturating_sub(now_ms).max(1)),
                None => Duration::from_secs(1),
            };
            self.changed
                .wait_for(&mut st, timeout.min(Duration::from_secs(1)));
        }
    }
}

/// A persist's pauses for reads: between two chunks it waits while reads want
/// its disks ([`PowerManager::reads_want`]), so a read waits behind at most
/// the chunks already under way, never the whole persist. Never starved: it
/// pauses only while the time it paused, less the chunk time it got since, is
/// under the scheduler's `persist_yield_max_ms` (the energy simulator's rule),
/// so under a read storm it still gets about half of the time.
pub struct ReadYield {
    manager: Arc<PowerManager>,
    disks: Vec<usize>,
    /// Time paused for reads, less the chunk time got since.
    yielded_ms: u64,
    paused_ms: u64,
    pauses: u64,
    /// The end of the last pause (the start of the chunk time since).
    last_ms: u64,
}

impl std::fmt::Debug for ReadYield {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadYield")
            .field("disks", &self.disks)
            .field("yielded_ms", &self.yielded_ms)
            .field("paused_ms", &self.paused_ms)
            .finish()
    }
}

impl ReadYield {
    /// Between two chunks: pause while reads want the disks, within the
    /// bound. Returns how long it paused (the manager's clock).
    pub fn between_chunks(&mut self) -> u64 {
        let inner = &self.manager.inner;
        let start_ms = inner.clock.now_ms();
        self.yielded_ms = self
            .yielded_ms
            .saturating_sub(start_ms.saturating_sub(self.last_ms));
        let yield_max_ms = inner.state.lock().sched.config().persist_yield_max_ms;
        let mut now_ms = start_ms;
        let mut paused = false;
        while self.yielded_ms + (now_ms - start_ms) < yield_max_ms
            && self.manager.reads_want(&self.disks)
        {
            paused = true;
            std::thread::sleep(inner.clock.real_wait(YIELD_POLL_MS));
            now_ms = inner.clock.now_ms().max(now_ms);
        }
        let waited_ms = now_ms - start_ms;
        self.yielded_ms += waited_ms;
        self.paused_ms += waited_ms;
        self.pauses += u64::from(paused);
        self.last_ms = now_ms;
        waited_ms
    }

    /// Time paused so far, ms.
    pub fn paused_ms(&self) -> u64 {
        self.paused_ms
    }

    /// Pauses so far.
    pub fn pauses(&self) -> u64 {
        self.pauses
    }
}

/// Keeps one disk on while it lives. Dropping the last guard of a disk makes it
/// Idle and starts its idle timer.
pub struct ActivityGuard {
    inner: Arc<Inner>,
    disk: usize,
    /// Held for a read (counted in the disk's reads in flight).
    read: bool,
    /// The thread that made it (its count of guards held drops with it).
    thread: std::thread::ThreadId,
}

impl ActivityGuard {
    /// The disk this guard keeps on.
    pub fn disk(&self) -> usize {
        self.disk
    }
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        if std::thread::current().id() == self.thread {
            GUARDS_HELD.with(|g| g.set(g.get().saturating_sub(1)));
        }
        let mut st = self.inner.state.lock();
        let now_ms = self.inner.clock.now_ms();
        let disk = self.disk;
        if self.read {
            let a = &mut st.disks[disk];
            a.reads_in_flight -= 1;
            a.last_read_ms = Some(now_ms);
        }
        let last_guard = st.budget.release(disk, now_ms);
        if last_guard {
            st.disks[disk].idle_since_ms = Some(now_ms);
            if st.deadline() {
                // Work pausing between two I/Os keeps its disk: it is not
                // turned off to make room at once (fifo: as before).
                st.budget
                    .keep_on_until(disk, now_ms.saturating_add(READ_RECENT_MS));
            }
            if let Some(idle) = st.idle.as_ref() {
                let timeout_ms = idle.timeout_ms(disk, now_ms);
                st.budget.set_idle_timeout_ms(disk, timeout_ms);
            }
        }
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
    fn read_ranges_at(&self, ranges: &mut [(u64, &mut [u8])]) -> Result<(), DiskError> {
        check_ranges(self, ranges)?;
        let _on = self.manager.acquire(self.index); // one spin-up check for all of them
        self.inner.read_ranges_at(ranges)
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
