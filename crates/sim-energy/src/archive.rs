//! One simulated archive: disks with the server's power budget, a cache, the
//! watchdog, a placement strategy, and a discrete-event loop on simulated time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

use permafrost_disk::power::{Grant, PowerBudget, PowerState, PowerStats, Ticket};
use permafrost_grid::{Geometry, Layout};
use permafrost_policy::{
    BucketHealth, BucketView, CacheView, DiskCosts, IdleTimeouts, Next, ObjectToPlace, Placement,
    Scheduler, SchedulerStrategy, TargetView, WatchdogPolicy,
};
use permafrost_trace::{Op, Record};

use crate::config::{SimConfig, WriteMode};
use crate::latency::LatencyHistogram;
use crate::report::SystemReport;
use crate::SimError;

/// An idle timeout long enough to mean "never" (1,000 years) without
/// overflowing the model's arithmetic.
const ALWAYS_ON_IDLE_TIMEOUT_MS: u64 = 1_000 * 365 * 24 * 3_600 * 1_000;

/// The disks behind the archive's front end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A LoneStar grid: objects live whole on one data disk (a grid bucket).
    Grid(Layout),
    /// Always-on RAID 6 arrays of `10 + 2` disks, enough arrays for at least
    /// `data_disks` disks of user data; objects are striped over an array.
    Raid6AlwaysOn { data_disks: usize },
    /// An erasure-coded object store with stripe sets of `12 + 4` disks that
    /// spin down like the grid's; every access spins up all 16 disks of the set.
    ErasureCoded { data_disks: usize },
}

/// One system to simulate: its backend and the placement strategy choosing a
/// home (grid bucket, RAID array, stripe set) for each new object.
pub struct SystemSpec {
    /// Name in reports, e.g. `grid 8x6:4+1 dataset-affinity`.
    pub label: String,
    /// The disks.
    pub backend: Backend,
    /// The placement strategy (from `permafrost-policy`).
    pub placement: Box<dyn Placement>,
    /// The grid's scheduler strategy; `None`: the config's. Baselines always
    /// run first come, first served.
    pub scheduler: Option<SchedulerStrategy>,
}

/// A place objects live: a grid bucket, a RAID array or a stripe set.
struct Home {
    /// Disks a read of an object here runs on.
    read_disks: Vec<usize>,
    /// Each read disk transfers `bytes / read_divisor`.
    read_divisor: u64,
    capacity_bytes: u64,
    used_bytes: u64,
    waiting_bytes: u64,
    /// Where the next persisted object starts on the disk (objects are
    /// written one after another; deleted space is not reused here).
    next_offset: u64,
}

/// Something the watchdog persists to: a home (its target has the same index)
/// or, in delayed mode, a parity disk with pending deltas.
struct Target {
    /// Disks held together by a persist.
    disks: Vec<usize>,
    /// Hold time of a persist of `b` bytes: `b · hold_factor / hold_divisor` at disk speed.
    hold_factor: u64,
    hold_divisor: u64,
    pending: VecDeque<Pending>,
    outstanding_bytes: u64,
    persisting: bool,
    /// Delayed mode: the parity targets that receive a delta after a persist.
    delta_targets: Vec<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    since_ms: u64,
    bytes: u64,
    item: Item,
}

#[derive(Clone, Copy, Debug)]
enum Item {
    Object { slot: u32, generation: u64 },
    Delta(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cached {
    Absent,
    /// Outstanding: waiting for a persist.
    Dirty,
    /// Part of a running persist.
    Persisting,
    /// Persisted and cached; the value is its LRU tick.
    Clean(u64),
}

#[derive(Clone, Copy, Debug)]
struct Obj {
    size_bytes: u64,
    home: u32,
    generation: u64,
    live: bool,
    cached: Cached,
    /// Where the object starts on its disk (its on-disk order).
    offset: u64,
}

enum JobKind {
    Read {
        slot: u32,
        generation: u64,
        arrival_ms: u64,
        offset: u64,
    },
    Persist {
        target: u32,
        entries: Vec<Pending>,
        bytes: u64,
    },
}

struct Job {
    disks: Vec<usize>,
    hold_ms: u64,
    kind: JobKind,
    /// With a scheduler: when the granted disks are ready.
    ready_ms: u64,
    /// When the request was made.
    submitted_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    IoEnd(u32),
    JobDone(u32),
    Watchdog,
    /// With a scheduler: the operation running on this disk ends.
    OpEnd(u32),
}

/// Counters of one run, beyond the power models' own.
#[derive(Clone, Debug, Default)]
struct Counters {
    records: u64,
    events: u64,
    reads: u64,
    cache_hits: u64,
    writes: u64,
    deletes: u64,
    renames: u64,
    bytes_read_from_disks: u64,
    bytes_persisted: u64,
    persists: u64,
    parity_drains: u64,
    cache_overflow_bytes: u64,
    placement_failures: u64,
    out_of_order_records: u64,
    persist_suspensions: u64,
}

/// One archive under simulation. Feed it records in time order with
/// [`ArchiveSim::apply`], then [`ArchiveSim::drain`] and [`ArchiveSim::finish`].
pub struct ArchiveSim {
    label: String,
    backend: Backend,
    disk_bytes_per_s: u64,
    cache_reads: bool,
    /// The configured budget (`None`: as many as there are disks).
    budget: Option<usize>,
    check_invariants: bool,
    now_ms: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// The disks' power models and the budget: the server's own policy
    /// (`PowerManager` runs the same type). Drives power down instantly here.
    power: PowerBudget,
    /// Per disk: when its last I/O ends (a disk serves its I/Os one by one).
    busy_until_ms: Vec<u64>,
    homes: Vec<Home>,
    targets: Vec<Target>,
    placement: Box<dyn Placement>,
    watchdog: WatchdogPolicy,
    watchdog_at_ms: Option<u64>,
    ids: HashMap<u64, u32>,
    objs: Vec<Obj>,
    free_slots: Vec<u32>,
    next_generation: u64,
    deltas: Vec<(u64, u32)>,
    free_deltas: Vec<u32>,
    cache_capacity_bytes: u64,
    cache_used_bytes: u64,
    /// Of `cache_used_bytes`, persisted copies (evictable, in `lru`).
    cache_clean_bytes: u64,
    lru: BTreeMap<u64, u32>,
    lru_tick: u64,
    jobs: Vec<Option<Job>>,
    free_jobs: Vec<u32>,
    /// Jobs waiting for budget, by their place in the power budget's queue.
    waiting: HashMap<Ticket, u32>,
    latency: LatencyHistogram,
    counters: Counters,
    bucket_views: Vec<BucketView>,
    target_views: Vec<TargetView>,
    /// The grid's scheduler (`None`: first come, first served through the
    /// budget's FIFO and each disk's `busy_until_ms`, as before issue 30).
    sched: Option<Scheduler>,
    /// With a scheduler: a persist's chunk, in transfer time.
    chunk_ms: u64,
    /// With a scheduler: the job whose chunk each disk transfers (`true`: its last).
    disk_op: Vec<Option<(u32, bool)>>,
    /// With a scheduler: the job each disk transferred last (another one costs a seek).
    last_on_disk: Vec<Option<u32>>,
    /// With a scheduler: the time to move to another request's data.
    seek_ms: u64,
    /// With a scheduler: per-disk idle timeouts and the wear budget.
    idle: Option<IdleTimeouts>,
    /// Per disk: its spin-ups in the last 24 hours.
    spin_ups_day: Vec<VecDeque<u64>>,
    /// The most spin-ups of one disk in any 24 hours.
    spin_ups_day_peak: usize,
}

impl ArchiveSim {
    /// Build the disks, homes and targets of `spec` under `config`.
    pub fn new(config: &SimConfig, spec: SystemSpec) -> Result<ArchiveSim, SimError> {
        config.validate().map_err(SimError::Config)?;
        let capacity = config.disk_capacity_bytes;
        let mut profile = config.power.clone();
        let mut homes = Vec::new();
        let mut targets = Vec::new();
        let disks;
        let mut budget = None;
        match &spec.backend {
            Backend::Grid(layout) => {
                let geometry = Geometry::new(*layout)
                    .map_err(|e| SimError::Config(format!("layout {layout}: {e}")))?;
                disks = geometry.disks();
                let mut parity_target = HashMap::new();
                for bucket in 0..geometry.buckets() {
                    let d = geometry.bucket_disk(bucket);
                    let p = geometry.parity_targets(d);
                    let parity = [p.hp, p.vp, p.vhp];
                    homes.push(Home {
                        read_disks: vec![d],
                        read_divisor: 1,
                        capacity_bytes: capacity,
                        used_bytes: 0,
                        waiting_bytes: 0,
                        next_offset: 0,
                    });
                    let (target_disks, factor) = match config.write_mode {
                        // Chunks are pipelined (thesis l. 1647: several write promises
                        // in flight), so each of the four disks writes the data once
                        // and all four are busy for about one transfer time.
                        WriteMode::Serialized => (std::iter::once(d).chain(parity).collect(), 1),
                        WriteMode::Delayed => (vec![d], 1),
                    };
                    targets.push(Target::new(target_disks, factor, 1));
                    if config.write_mode == WriteMode::Delayed {
                        for pd in parity {
                            parity_target.entry(pd).or_insert(usize::MAX);
                        }
                    }
                }
                if config.write_mode == WriteMode::Delayed {
                    let mut parity_disks: Vec<usize> = parity_target.keys().copied().collect();
                    parity_disks.sort_unstable();
                    for pd in parity_disks {
                        parity_target.insert(pd, targets.len());
                        targets.push(Target::new(vec![pd], 1, 1));
                    }
                    for (bucket, target) in targets.iter_mut().enumerate().take(geometry.buckets())
                    {
                        let p = geometry.parity_targets(geometry.bucket_disk(bucket));
                        target.delta_targets = [p.hp, p.vp, p.vhp]
                            .iter()
                            .map(|pd| parity_target[pd] as u32)
                            .collect();
                    }
                }
                budget = config.budget_max_spinning;
                let gang = targets.iter().map(|t| t.disks.len()).max().unwrap_or(1);
                if let Some(b) = budget {
                    if b < gang {
                        return Err(SimError::Config(format!(
                            "power budget {b} is smaller than the {gang} disks a persist needs together \
                             ({:?} mode)",
                            config.write_mode
                        )));
                    }
                }
            }
            Backend::Raid6AlwaysOn { data_disks } | Backend::ErasureCoded { data_disks } => {
                let (n, k) = if matches!(spec.backend, Backend::Raid6AlwaysOn { .. }) {
                    (10, 2)
                } else {
                    (12, 4)
                };
                let sets = data_disks.div_ceil(n).max(1);
                disks = sets * (n + k);
                for s in 0..sets {
                    let members: Vec<usize> = ((s * (n + k))..((s + 1) * (n + k))).collect();
                    homes.push(Home {
                        read_disks: members.clone(),
                        read_divisor: n as u64,
                        capacity_bytes: capacity * n as u64,
                        used_bytes: 0,
                        waiting_bytes: 0,
                        next_offset: 0,
                    });
                    targets.push(Target::new(members, 1, n as u64));
                }
                if matches!(spec.backend, Backend::Raid6AlwaysOn { .. }) {
                    profile.idle_timeout_ms = ALWAYS_ON_IDLE_TIMEOUT_MS;
                }
            }
        }
        // Without a budget every disk may spin: a budget of all disks never
        // makes a request wait.
        let power = PowerBudget::new(profile, disks, budget.unwrap_or(disks).max(1), 0)
            .map_err(|e| SimError::Config(e.to_string()))?;
        let strategy = spec.scheduler.unwrap_or(config.scheduler.strategy);
        let sched = match (&spec.backend, strategy) {
            (Backend::Grid(_), SchedulerStrategy::Deadline) => {
                let mut c = config.scheduler.clone();
                c.strategy = strategy;
                Some(Scheduler::new(c, disks))
            }
            _ => None,
        };
        let chunk_ms = (u128::from(config.persist_chunk_bytes.max(1)) * 1000)
            .div_ceil(u128::from(config.disk_bytes_per_s)) as u64;
        let mut sim = ArchiveSim {
            label: spec.label,
            backend: spec.backend,
            disk_bytes_per_s: config.disk_bytes_per_s,
            cache_reads: config.cache_reads,
            budget,
            check_invariants: false,
            now_ms: 0,
            seq: 0,
            events: BinaryHeap::new(),
            power,
            busy_until_ms: vec![0; disks],
            homes,
            targets,
            placement: spec.placement,
            watchdog: WatchdogPolicy::new(config.watchdog.clone()),
            watchdog_at_ms: None,
            ids: HashMap::new(),
            objs: Vec::new(),
            free_slots: Vec::new(),
            next_generation: 0,
            deltas: Vec::new(),
            free_deltas: Vec::new(),
            cache_capacity_bytes: config.cache_capacity_bytes,
            cache_used_bytes: 0,
            cache_clean_bytes: 0,
            lru: BTreeMap::new(),
            lru_tick: 0,
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            waiting: HashMap::new(),
            latency: LatencyHistogram::default(),
            counters: Counters::default(),
            bucket_views: Vec::new(),
            target_views: Vec::new(),
            sched,
            chunk_ms: chunk_ms.max(1),
            disk_op: vec![None; disks],
            last_on_disk: vec![None; disks],
            seek_ms: config.seek_ms,
            idle: None,
            spin_ups_day: vec![VecDeque::new(); disks],
            spin_ups_day_peak: 0,
        };
        if sim.sched.is_some() {
            let p = sim.power.profile();
            let costs = DiskCosts {
                default_timeout_ms: p.idle_timeout_ms,
                watts_idle: p.watts_idle,
                spin_up_joules: p.spin_up_ms as f64 / 1000.0 * p.watts_spinning_up,
            };
            sim.idle = Some(IdleTimeouts::new(config.idle.clone(), costs, disks));
        }
        if matches!(sim.backend, Backend::Raid6AlwaysOn { .. }) {
            // Always on: every disk spins up at time 0 and never times out.
            let all: Vec<usize> = (0..disks).collect();
            sim.acquire(&all, &mut None)
                .expect("no budget: every disk may spin");
            for d in all {
                sim.power.release(d, 0);
            }
        }
        Ok(sim)
    }

    /// Check the power budget after every event (slow; for tests). Panics if
    /// more disks than the budget are ever on.
    pub fn set_check_invariants(&mut self, on: bool) {
        self.check_invariants = on;
    }

    /// The label given at construction.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Power counters of every disk, as its model accrued them.
    pub fn disk_stats(&self) -> Vec<PowerStats> {
        (0..self.power.n_disks())
            .map(|d| self.power.model(d).stats())
            .collect()
    }

    /// Where the placement strategy put the trace's object `object`: the index
    /// of its home (for a grid, the grid bucket). `None` if the object is not
    /// live (never written or read, deleted, or no home had room).
    pub fn home_of(&self, object: u64) -> Option<usize> {
        let slot = *self.ids.get(&object)?;
        Some(self.objs[slot as usize].home as usize)
    }

    /// The disks' power models and budget: the type the server's
    /// `PowerManager` runs, as this simulation drove it.
    pub fn power(&self) -> &PowerBudget {
        &self.power
    }

    /// Simulated time of the last processed event or record.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Process everything due up to the record's time, then the record.
    pub fn apply(&mut self, record: &Record) {
        let mut at = record.time_ms;
        if at < self.now_ms {
            self.counters.out_of_order_records += 1;
            at = self.now_ms;
        }
        self.run_until(at);
        self.counters.records += 1;
        self.counters.events += 1;
        match record.op {
            Op::Get => self.get(record),
            Op::Put => self.put(record),
            Op::Del => {
                self.counters.deletes += 1;
                if let Some(slot) = self.ids.remove(&record.object) {
                    self.delete_slot(slot);
                }
            }
            Op::Rename => {
                self.counters.renames += 1;
                let Some(target) = record.target else { return };
                let slot = match self.ids.remove(&record.object) {
                    Some(slot) => slot,
                    None => match self.preexisting(record) {
                        Some(slot) => slot,
                        None => return,
                    },
                };
                if let Some(old) = self.ids.insert(target, slot) {
                    self.delete_slot(old);
                }
            }
        }
        self.check();
    }

    /// Run every pending event (the watchdog persists what is still cached).
    /// Returns the time by which every disk has settled: the last event, or
    /// the last idle timeout after it.
    /// The returned time also covers the last idle timeout, so the energy of
    /// disks idling before they turn off is part of the report.
    pub fn drain(&mut self) -> u64 {
        self.run_until(u64::MAX);
        let now = self.now_ms;
        self.settle(now);
        (0..self.power.n_disks())
            .filter_map(|d| {
                self.power
                    .model(d)
                    .next_transition_ms()
                    .filter(|&t| t < ALWAYS_ON_IDLE_TIMEOUT_MS)
            })
            .fold(now, u64::max)
    }

    /// Account every disk's power up to `end_ms` (at least [`ArchiveSim::now_ms`])
    /// and produce the report.
    pub fn finish(&mut self, end_ms: u64) -> SystemReport {
        let end_ms = end_ms.max(self.now_ms);
        self.settle(end_ms);
        let power = self.power.totals_at(end_ms);
        let c = &self.counters;
        SystemReport::new(
            self.label.clone(),
            self.power.n_disks(),
            self.homes.iter().map(|h| h.capacity_bytes).sum(),
            power,
            self.power.profile().clone(),
            crate::report::Activity {
                reads: c.reads,
                cache_hits: c.cache_hits,
                writes: c.writes,
                deletes: c.deletes,
                renames: c.renames,
                bytes_read_from_disks: c.bytes_read_from_disks,
                bytes_persisted: c.bytes_persisted,
                persists: c.persists,
                parity_drains: c.parity_drains,
                cache_overflow_bytes: c.cache_overflow_bytes,
                placement_failures: c.placement_failures,
                persist_suspensions: c.persist_suspensions,
                out_of_order_records: c.out_of_order_records,
                max_spinning: self.power.max_spinning_seen(),
                spin_ups_per_disk_day_max: self.spin_ups_day_peak as u64,
                budget_max_spinning: self.budget,
                events: c.events,
            },
            &self.latency,
            end_ms,
        )
    }

    // ---- event loop ----

    fn push(&mut self, at_ms: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((at_ms, self.seq, event)));
    }

    fn run_until(&mut self, t_ms: u64) {
        while let Some(Reverse((at, _, _))) = self.events.peek() {
            if *at > t_ms {
                break;
            }
            let Reverse((at, _, event)) = self.events.pop().expect("peeked");
            self.now_ms = at;
            self.counters.events += 1;
            match event {
                Event::IoEnd(d) => {
                    let idle = self.power.release(d as usize, at);
                    if idle && !self.waiting.is_empty() {
                        self.serve_queue();
                    }
                }
                Event::JobDone(j) => self.job_done(j),
                Event::Watchdog => {
                    if self.watchdog_at_ms == Some(at) {
                        self.watchdog_at_ms = None;
                        self.run_watchdog();
                    }
                }
                Event::OpEnd(d) => self.op_end(d as usize),
            }
            self.check();
        }
        if t_ms != u64::MAX {
            self.now_ms = self.now_ms.max(t_ms);
        }
    }

    fn check(&mut self) {
        if !self.check_invariants {
            return;
        }
        let now = self.now_ms;
        self.settle(now);
        let on = self.power.spinning();
        if let Some(b) = self.budget {
            assert!(
                on <= b,
                "{}: {on} disks on at {now} ms, budget {b}",
                self.label
            );
        }
    }

    fn is_on(&mut self, d: usize) -> bool {
        self.power.state_at(d, self.now_ms) != PowerState::Off
    }

    // ---- jobs and the power budget ----

    fn transfer_ms(&self, bytes: u64) -> u64 {
        (u128::from(bytes) * 1000).div_ceil(u128::from(self.disk_bytes_per_s)) as u64
    }

    /// Bring the power models to `now_ms`. The simulated drives have no motor
    /// to stop: a disk whose model turned Off is powered down at once.
    fn settle(&mut self, now_ms: u64) {
        for disk in self.power.settle(now_ms) {
            self.power.powered_down(disk);
        }
    }

    /// What `PowerManager::acquire_many` does, without the sleeping: the fast
    /// path for a new request; then (also each time a waiting one is retried)
    /// settle, try, and after making room try again. `None`: wait (in the
    /// budget's queue when `ticket` is set).
    fn acquire(&mut self, disks: &[usize], ticket: &mut Option<Ticket>) -> Option<Grant> {
        let now = self.now_ms;
        if ticket.is_none() {
            if let Some(grant) = self.power.acquire_on(disks, now) {
                return Some(grant);
            }
        }
        match self.power.acquire_stopping_at_once(disks, ticket, now) {
            Ok(grant) => grant,
            Err(e) => unreachable!("{}: {e} (checked at construction)", self.label),
        }
    }

    fn submit(&mut self, job: Job) {
        if self.sched.is_some() {
            return self.submit_scheduled(job);
        }
        let disks = job.disks.clone();
        let id = match self.free_jobs.pop() {
            Some(id) => {
                self.jobs[id as usize] = Some(job);
                id
            }
            None => {
                self.jobs.push(Some(job));
                (self.jobs.len() - 1) as u32
            }
        };
        let mut ticket = None;
        match self.acquire(&disks, &mut ticket) {
            Some(grant) => self.start(id, grant),
            None => {
                let ticket = ticket.expect("a job that waits has a place in the budget's queue");
                self.waiting.insert(ticket, id);
            }
        }
    }

    /// A disk went idle: retry the waiting jobs, as every waiting
    /// `acquire_many` does when woken. Only the head of the queue may take
    /// budget. A job behind it goes as soon as all its disks are on, which
    /// only a grant that spun disks up can bring about: so the rest of the
    /// queue is looked at after such a grant only, and before the new head
    /// may turn their (then Active) disks off to make room.
    fn serve_queue(&mut self) {
        while let Some(head) = self.power.queue_head() {
            match self.retry(head) {
                None => return,
                Some(false) => {}
                Some(true) => {
                    let behind: Vec<Ticket> = self.power.waiting().skip(1).collect();
                    for ticket in behind {
                        self.retry(ticket);
                    }
                }
            }
        }
    }

    /// Try to start the job waiting with `ticket`. `Some(spun_up)` if it started.
    fn retry(&mut self, ticket: Ticket) -> Option<bool> {
        let id = self.waiting[&ticket];
        let disks = self.jobs[id as usize]
            .as_ref()
            .expect("waiting job")
            .disks
            .clone();
        let grant = self.acquire(&disks, &mut Some(ticket))?;
        self.waiting.remove(&ticket);
        let spun_up = !grant.spun_up.is_empty();
        self.start(id, grant);
        Some(spun_up)
    }

    /// Run a job whose disks were granted: its I/O starts when every disk is
    /// ready and done with earlier I/O, and holds the disks for `hold_ms`.
    fn start(&mut self, id: u32, grant: Grant) {
        self.count_spin_ups(&grant.spun_up);
        let job = self.jobs[id as usize].as_ref().expect("job to start");
        let hold_ms = job.hold_ms.max(1);
        let disks = job.disks.clone();
        let arrival_ms = match job.kind {
            JobKind::Read { arrival_ms, .. } => Some(arrival_ms),
            JobKind::Persist { .. } => None,
        };
        let start_ms = disks
            .iter()
            .map(|&d| self.busy_until_ms[d])
            .fold(grant.ready_ms, u64::max);
        let end_ms = start_ms + hold_ms;
        for &d in &disks {
            self.busy_until_ms[d] = end_ms;
            self.push(end_ms, Event::IoEnd(d as u32));
        }
        self.push(end_ms, Event::JobDone(id));
        if let Some(arrival_ms) = arrival_ms {
            self.latency.record(start_ms - arrival_ms);
        }
    }

    fn job_done(&mut self, id: u32) {
        let job = self.jobs[id as usize].take().expect("finished job");
        self.free_jobs.push(id);
        match job.kind {
            JobKind::Read {
                slot, generation, ..
            } => {
                let o = self.objs[slot as usize];
                if self.cache_reads
                    && o.live
                    && o.generation == generation
                    && o.cached == Cached::Absent
                    && self.make_room(o.size_bytes)
                {
                    self.cache_used_bytes += o.size_bytes;
                    self.touch(slot);
                }
            }
            JobKind::Persist {
                target,
                entries,
                bytes,
            } => self.persist_done(target, entries, bytes),
        }
    }

    /// Count the spin-ups of a grant (per disk per 24 hours).
    fn count_spin_ups(&mut self, spun_up: &[usize]) {
        const DAY_MS: u64 = 24 * 3_600 * 1_000;
        let now = self.now_ms;
        for &d in spun_up {
            let w = &mut self.spin_ups_day[d];
            while w.front().is_some_and(|&t| t + DAY_MS <= now) {
                w.pop_front();
            }
            w.push_back(now);
            self.spin_ups_day_peak = self.spin_ups_day_peak.max(w.len());
            if let Some(idle) = self.idle.as_mut() {
                idle.spun_up(d, now);
            }
        }
        if !spun_up.is_empty() {
            // Data waiting for these disks may now be persisted without a spin-up of its own.
            self.schedule_watchdog(now);
        }
    }

    // ---- the scheduler (issue 30) ----

    fn alloc_job(&mut self, job: Job) -> u32 {
        match self.free_jobs.pop() {
            Some(id) => {
                self.jobs[id as usize] = Some(job);
                id
            }
            None => {
                self.jobs.push(Some(job));
                (self.jobs.len() - 1) as u32
            }
        }
    }

    fn sched(&mut self) -> &mut Scheduler {
        self.sched.as_mut().expect("a scheduled system")
    }

    /// A new request with the scheduler: it starts at once if its disks are on
    /// (unless the scheduler holds new work for a request that waited too
    /// long) or the budget has room; else it waits in the scheduler's queue.
    fn submit_scheduled(&mut self, job: Job) {
        let now = self.now_ms;
        let disks = job.disks.clone();
        let arrival = job.submitted_ms;
        let id = self.alloc_job(job);
        if let Some(idle) = self.idle.as_mut() {
            for &d in &disks {
                idle.request(d, now);
            }
        }
        let sched = self.sched.as_ref().expect("scheduled");
        let queue_first = sched.holding(now) || sched.budget_waiting() > 0;
        if !queue_first && self.try_grant(id) {
            return;
        }
        self.sched().wait_for_budget(u64::from(id), &disks, arrival);
        if !self.sched.as_ref().expect("scheduled").holding(now) {
            self.serve_scheduled();
        }
    }

    /// Try to give job `id` its disks now, through the power budget (which is
    /// never left holding a ticket: the order of waiting requests is the
    /// scheduler's). True if it started.
    fn try_grant(&mut self, id: u32) -> bool {
        let disks = self.jobs[id as usize].as_ref().expect("job").disks.clone();
        let now = self.now_ms;
        let grant = match self.power.acquire_on(&disks, now) {
            Some(g) => Some(g),
            None => {
                let mut ticket = None;
                let g = self
                    .power
                    .acquire_stopping_at_once(&disks, &mut ticket, now)
                    .unwrap_or_else(|e| {
                        unreachable!("{}: {e} (checked at construction)", self.label)
                    });
                self.power.cancel(&mut ticket);
                g
            }
        };
        match grant {
            Some(g) => {
                self.start_scheduled(id, g);
                true
            }
            None => false,
        }
    }

    /// Budget may have come free: start waiting requests in the scheduler's order.
    fn serve_scheduled(&mut self) {
        let now = self.now_ms;
        while let Some(id) = self.sched.as_ref().expect("scheduled").next_to_spin(now) {
            let aged = self.sched.as_ref().expect("scheduled").holding(now);
            if !self.try_grant(id as u32) {
                break;
            }
            self.sched().granted(id);
            if aged {
                // The disks spun up for a request that waited too long serve
                // every request waiting for the same disks.
                let disks = self.jobs[id as usize].as_ref().expect("job").disks.clone();
                for other in self.sched.as_ref().expect("scheduled").waiting_for(&disks) {
                    if self.try_grant(other as u32) {
                        self.sched().granted(other);
                    }
                }
            }
        }
        if self.sched.as_ref().expect("scheduled").holding(now) {
            return;
        }
        // Requests behind the head whose disks are all on go at once.
        let on: Vec<u64> = {
            let sched = self.sched.as_ref().expect("scheduled");
            sched
                .budget_queue()
                .filter(|(_, _, disks)| {
                    disks.iter().all(|&d| {
                        let m = self.power.model(d);
                        m.state() != PowerState::Off
                            && m.next_transition_ms().is_none_or(|t| t > now)
                    })
                })
                .map(|(id, _, _)| id)
                .collect()
        };
        for id in on {
            if self.try_grant(id as u32) {
                self.sched().granted(id);
            }
        }
    }

    /// Job `id` has its disks' power: hand it to its disk's queue.
    fn start_scheduled(&mut self, id: u32, grant: Grant) {
        self.count_spin_ups(&grant.spun_up);
        let chunk_ms = self.chunk_ms;
        let job = self.jobs[id as usize].as_mut().expect("job to start");
        job.ready_ms = grant.ready_ms;
        let disk = job.disks[0];
        let hold_ms = job.hold_ms.max(1);
        match job.kind {
            JobKind::Read {
                arrival_ms, offset, ..
            } => {
                self.sched().enqueue_read(
                    disk,
                    u64::from(id),
                    offset,
                    arrival_ms,
                    hold_ms,
                    chunk_ms,
                );
            }
            JobKind::Persist { .. } => {
                self.sched()
                    .begin_persist(disk, u64::from(id), hold_ms, chunk_ms);
            }
        }
        self.kick(disk);
    }

    /// If `disk` is free, start the chunk the scheduler says it should
    /// transfer next. A chunk of another request than the disk's last one
    /// costs a seek first.
    fn kick(&mut self, disk: usize) {
        if self.disk_op[disk].is_some() {
            return;
        }
        let now = self.now_ms;
        let Some(next) = self.sched().next_on_disk(disk, now) else {
            return;
        };
        let j = next.id() as u32;
        // Moving from one request's data to another's costs a seek; the first
        // request after the disk was idle finds its heads wherever they are
        // (no seek is charged, as before the scheduler).
        let seek = match self.last_on_disk[disk] {
            Some(last) if last != j => self.seek_ms,
            _ => 0,
        };
        self.last_on_disk[disk] = Some(j);
        let job = self.jobs[j as usize].as_ref().expect("scheduled job");
        match next {
            Next::Read {
                ms, first, last, ..
            } => {
                let start = now.max(job.ready_ms).max(self.busy_until_ms[disk]) + seek;
                if first {
                    if let JobKind::Read { arrival_ms, .. } = job.kind {
                        self.latency.record(start - arrival_ms);
                    }
                }
                let end = start + ms.max(1);
                self.busy_until_ms[disk] = end;
                self.disk_op[disk] = Some((j, last));
                self.push(end, Event::OpEnd(disk as u32));
            }
            Next::Persist { ms, last, .. } => {
                // The chunk goes to the data disk and its parity disks together.
                let start = job
                    .disks
                    .iter()
                    .map(|&d| self.busy_until_ms[d])
                    .fold(now.max(job.ready_ms), u64::max)
                    + seek;
                let end = start + ms.max(1);
                for &d in &job.disks {
                    self.busy_until_ms[d] = end;
                }
                self.disk_op[disk] = Some((j, last));
                self.push(end, Event::OpEnd(disk as u32));
            }
        }
    }

    /// The chunk on `disk` ended: after a request's last chunk release what it
    /// held; then the disk's next chunk.
    fn op_end(&mut self, disk: usize) {
        let now = self.now_ms;
        let (j, last) = self.disk_op[disk].take().expect("a chunk ran");
        let mut idle = false;
        if last {
            let disks = self.jobs[j as usize].as_ref().expect("job").disks.clone();
            idle = self.release_all(&disks);
            self.job_done(j);
        } else if self.sched.as_ref().expect("scheduled").holding(now)
            && self.sched.as_ref().expect("scheduled").persisting(disk)
            && self.jobs[j as usize]
                .as_ref()
                .is_some_and(|job| matches!(job.kind, JobKind::Persist { .. }))
        {
            // A request that has waited `max_wait_ms` waits for the budget: a
            // persist gives its disks back between chunks and waits behind it.
            let remaining = self
                .sched()
                .suspend_persist(disk)
                .expect("the disk's persist");
            let job = self.jobs[j as usize].as_mut().expect("persist");
            job.hold_ms = remaining;
            let disks = job.disks.clone();
            idle = self.release_all(&disks);
            self.counters.persist_suspensions += 1;
            self.sched().wait_for_budget(u64::from(j), &disks, now);
        }
        self.kick(disk);
        if idle && self.sched.as_ref().expect("scheduled").budget_waiting() > 0 {
            self.serve_scheduled();
        }
    }

    /// End one I/O on each of `disks`; true if one of them went idle.
    fn release_all(&mut self, disks: &[usize]) -> bool {
        let now = self.now_ms;
        let mut idle = false;
        for &d in disks {
            // The disk's timeout is set before its last I/O ends: the model
            // starts the idle period (and ends it, at once, for a zero
            // timeout) as the I/O ends.
            if let Some(timeouts) = self.idle.as_ref() {
                if self.power.model(d).io_in_flight() == 1 {
                    let t = timeouts.timeout_ms(d, now);
                    self.power.set_idle_timeout_ms(d, t);
                }
            }
            if self.power.release(d, now) {
                idle = true;
                self.last_on_disk[d] = None;
                if let Some(timeouts) = self.idle.as_mut() {
                    timeouts.went_idle(d, now);
                }
            }
        }
        idle
    }

    // ---- cache ----

    /// Evict persisted objects (LRU) until `bytes` more fit. False if they cannot.
    fn make_room(&mut self, bytes: u64) -> bool {
        while self.cache_used_bytes + bytes > self.cache_capacity_bytes {
            let Some((_, slot)) = self.lru.pop_first() else {
                return false;
            };
            let o = &mut self.objs[slot as usize];
            o.cached = Cached::Absent;
            self.cache_used_bytes -= o.size_bytes;
            self.cache_clean_bytes -= o.size_bytes;
        }
        true
    }

    /// Mark a persisted object most recently used (inserting it into the LRU).
    fn touch(&mut self, slot: u32) {
        match self.objs[slot as usize].cached {
            Cached::Clean(tick) => {
                self.lru.remove(&tick);
            }
            _ => self.cache_clean_bytes += self.objs[slot as usize].size_bytes,
        }
        self.lru_tick += 1;
        self.objs[slot as usize].cached = Cached::Clean(self.lru_tick);
        self.lru.insert(self.lru_tick, slot);
    }

    /// Take `bytes` of cache for data that must be kept (outstanding data,
    /// deltas). Beyond capacity the server would slow writers down; the
    /// simulation admits the data and counts the overflow.
    fn reserve(&mut self, bytes: u64) {
        if !self.make_room(bytes) {
            let over = (self.cache_used_bytes + bytes).saturating_sub(self.cache_capacity_bytes);
            self.counters.cache_overflow_bytes += over.min(bytes);
        }
        self.cache_used_bytes += bytes;
    }

    // ---- objects ----

    fn new_slot(&mut self, size_bytes: u64, home: u32) -> u32 {
        self.next_generation += 1;
        let obj = Obj {
            size_bytes,
            home,
            generation: self.next_generation,
            live: true,
            cached: Cached::Absent,
            offset: 0,
        };
        match self.free_slots.pop() {
            Some(slot) => {
                self.objs[slot as usize] = obj;
                slot
            }
            None => {
                self.objs.push(obj);
                (self.objs.len() - 1) as u32
            }
        }
    }

    fn place(&mut self, record: &Record, size_bytes: u64) -> Option<u32> {
        self.bucket_views.clear();
        for h in 0..self.homes.len() {
            let spinning = {
                let disks = self.homes[h].read_disks.clone();
                disks.into_iter().all(|d| self.is_on(d))
            };
            let home = &self.homes[h];
            self.bucket_views.push(BucketView {
                capacity_bytes: home.capacity_bytes,
                used_bytes: home.used_bytes,
                waiting_bytes: home.waiting_bytes,
                spinning,
                health: BucketHealth::Ok,
                parity_group: None,
                added: false,
            });
        }
        let names = PlacementNames::of(record);
        let object = ObjectToPlace {
            s3_bucket: &names.bucket,
            key: &names.key,
            dataset: None,
            size_bytes,
            tags: &[],
            owner: &names.owner,
        };
        match self.placement.place(&object, &self.bucket_views) {
            Ok(h) => Some(h as u32),
            Err(_) => {
                self.counters.placement_failures += 1;
                None
            }
        }
    }

    /// An object the trace touches before writing it was stored before the
    /// trace began: place it now (as the archive did then) and count it as
    /// persisted and not cached.
    fn preexisting(&mut self, record: &Record) -> Option<u32> {
        let home = self.place(record, record.size_bytes)?;
        let h = &mut self.homes[home as usize];
        h.used_bytes += record.size_bytes;
        let offset = h.next_offset;
        h.next_offset += record.size_bytes;
        let slot = self.new_slot(record.size_bytes, home);
        self.objs[slot as usize].offset = offset;
        Some(slot)
    }

    fn delete_slot(&mut self, slot: u32) {
        let o = self.objs[slot as usize];
        debug_assert!(o.live);
        let home = &mut self.homes[o.home as usize];
        match o.cached {
            Cached::Dirty => {
                home.waiting_bytes -= o.size_bytes;
                self.targets[o.home as usize].outstanding_bytes -= o.size_bytes;
                self.cache_used_bytes -= o.size_bytes;
            }
            Cached::Persisting => {
                home.waiting_bytes -= o.size_bytes;
                self.cache_used_bytes -= o.size_bytes;
            }
            Cached::Clean(tick) => {
                home.used_bytes -= o.size_bytes;
                self.lru.remove(&tick);
                self.cache_used_bytes -= o.size_bytes;
                self.cache_clean_bytes -= o.size_bytes;
            }
            Cached::Absent => home.used_bytes -= o.size_bytes,
        }
        let obj = &mut self.objs[slot as usize];
        obj.live = false;
        obj.cached = Cached::Absent;
        self.free_slots.push(slot);
    }

    fn get(&mut self, record: &Record) {
        self.counters.reads += 1;
        let slot = match self.ids.get(&record.object) {
            Some(&slot) => slot,
            None => match self.preexisting(record) {
                Some(slot) => {
                    self.ids.insert(record.object, slot);
                    slot
                }
                None => return,
            },
        };
        let o = self.objs[slot as usize];
        match o.cached {
            Cached::Dirty | Cached::Persisting => {
                self.counters.cache_hits += 1;
                self.latency.record(0);
            }
            Cached::Clean(_) => {
                self.counters.cache_hits += 1;
                self.latency.record(0);
                self.touch(slot);
            }
            Cached::Absent => {
                let home = &self.homes[o.home as usize];
                let hold_ms = self.transfer_ms(o.size_bytes.div_ceil(home.read_divisor));
                self.counters.bytes_read_from_disks += o.size_bytes;
                let disks = home.read_disks.clone();
                self.submit(Job {
                    disks,
                    hold_ms,
                    kind: JobKind::Read {
                        slot,
                        generation: o.generation,
                        arrival_ms: self.now_ms,
                        offset: o.offset,
                    },
                    ready_ms: 0,
                    submitted_ms: self.now_ms,
                });
            }
        }
    }

    fn put(&mut self, record: &Record) {
        self.counters.writes += 1;
        if let Some(old) = self.ids.remove(&record.object) {
            self.delete_slot(old);
        }
        let size = record.size_bytes;
        let Some(home) = self.place(record, size) else {
            return;
        };
        let slot = self.new_slot(size, home);
        self.ids.insert(record.object, slot);
        self.reserve(size);
        self.objs[slot as usize].cached = Cached::Dirty;
        self.homes[home as usize].waiting_bytes += size;
        let generation = self.objs[slot as usize].generation;
        let t = &mut self.targets[home as usize];
        t.outstanding_bytes += size;
        t.pending.push_back(Pending {
            since_ms: self.now_ms,
            bytes: size,
            item: Item::Object { slot, generation },
        });
        self.schedule_watchdog(self.now_ms);
    }

    // ---- watchdog and persistence ----

    fn entry_valid(&self, p: &Pending) -> bool {
        match p.item {
            Item::Object { slot, generation } => {
                let o = &self.objs[slot as usize];
                o.live && o.generation == generation && o.cached == Cached::Dirty
            }
            Item::Delta(_) => true,
        }
    }

    /// Run the watchdog at the next multiple of its interval at or after `at_ms`.
    fn schedule_watchdog(&mut self, at_ms: u64) {
        let interval = self.watchdog.config().interval_ms;
        let at = at_ms
            .div_ceil(interval)
            .saturating_mul(interval)
            .max(self.now_ms);
        if self.watchdog_at_ms.is_none_or(|w| at < w) {
            self.watchdog_at_ms = Some(at);
            self.push(at, Event::Watchdog);
        }
    }

    fn build_target_views(&mut self) {
        self.target_views.clear();
        for i in 0..self.targets.len() {
            if self.targets[i].outstanding_bytes == 0 && !self.targets[i].persisting {
                continue;
            }
            while let Some(front) = self.targets[i].pending.front() {
                if self.entry_valid(front) {
                    break;
                }
                self.targets[i].pending.pop_front();
            }
            let disks = self.targets[i].disks.clone();
            let spinning = disks.into_iter().all(|d| self.is_on(d));
            let t = &self.targets[i];
            self.target_views.push(TargetView {
                disk: i,
                spinning,
                outstanding_bytes: t.outstanding_bytes,
                oldest_outstanding_ms: t.pending.front().map(|p| p.since_ms),
                persisting: t.persisting,
            });
        }
    }

    fn cache_view(&self) -> CacheView<'_> {
        CacheView {
            capacity_bytes: self.cache_capacity_bytes,
            used_bytes: self.cache_used_bytes,
            evictable_bytes: self.cache_clean_bytes,
            // The simulator admits writes beyond capacity and counts them (`cache_overflow_bytes`).
            writers_waiting: false,
            targets: &self.target_views,
        }
    }

    fn run_watchdog(&mut self) {
        self.build_target_views();
        let actions = self.watchdog.decide(self.now_ms, &self.cache_view());
        for action in actions {
            self.start_persist(action.disk as u32);
        }
        self.build_target_views();
        if let Some(deadline) = self.watchdog.next_deadline_ms(&self.cache_view()) {
            self.schedule_watchdog(deadline);
        }
    }

    fn start_persist(&mut self, target: u32) {
        let t = target as usize;
        let pending = std::mem::take(&mut self.targets[t].pending);
        let mut entries = Vec::with_capacity(pending.len());
        let mut bytes = 0;
        for p in pending {
            if !self.entry_valid(&p) {
                continue;
            }
            if let Item::Object { slot, .. } = p.item {
                self.objs[slot as usize].cached = Cached::Persisting;
            }
            bytes += p.bytes;
            entries.push(p);
        }
        debug_assert_eq!(bytes, self.targets[t].outstanding_bytes);
        self.targets[t].outstanding_bytes = 0;
        if entries.is_empty() {
            return;
        }
        self.targets[t].persisting = true;
        let tg = &self.targets[t];
        let hold_ms = self.transfer_ms(
            (u128::from(bytes) * u128::from(tg.hold_factor)).div_ceil(u128::from(tg.hold_divisor))
                as u64,
        );
        if t < self.homes.len() {
            self.counters.persists += 1;
            self.counters.bytes_persisted += bytes;
        } else {
            self.counters.parity_drains += 1;
        }
        let disks = tg.disks.clone();
        self.submit(Job {
            disks,
            hold_ms,
            kind: JobKind::Persist {
                target,
                entries,
                bytes,
            },
            ready_ms: 0,
            submitted_ms: self.now_ms,
        });
    }

    fn persist_done(&mut self, target: u32, entries: Vec<Pending>, bytes: u64) {
        let t = target as usize;
        for p in &entries {
            match p.item {
                Item::Object { slot, generation } => {
                    let o = self.objs[slot as usize];
                    if o.live && o.generation == generation && o.cached == Cached::Persisting {
                        let home = &mut self.homes[o.home as usize];
                        home.waiting_bytes -= o.size_bytes;
                        home.used_bytes += o.size_bytes;
                        let offset = home.next_offset;
                        home.next_offset += o.size_bytes;
                        self.objs[slot as usize].offset = offset;
                        self.touch(slot);
                    }
                }
                Item::Delta(id) => {
                    let delta = &mut self.deltas[id as usize];
                    delta.1 -= 1;
                    if delta.1 == 0 {
                        self.cache_used_bytes -= delta.0;
                        self.free_deltas.push(id);
                    }
                }
            }
        }
        let delta_targets = self.targets[t].delta_targets.clone();
        if !delta_targets.is_empty() && bytes > 0 {
            self.reserve(bytes);
            let entry = (bytes, delta_targets.len() as u32);
            let id = match self.free_deltas.pop() {
                Some(id) => {
                    self.deltas[id as usize] = entry;
                    id
                }
                None => {
                    self.deltas.push(entry);
                    (self.deltas.len() - 1) as u32
                }
            };
            for pt in delta_targets {
                let ptg = &mut self.targets[pt as usize];
                ptg.outstanding_bytes += bytes;
                ptg.pending.push_back(Pending {
                    since_ms: self.now_ms,
                    bytes,
                    item: Item::Delta(id),
                });
            }
        }
        self.targets[t].persisting = false;
        // A running Cache2Disk task continues until nothing is outstanding (§4.4.4).
        if self.targets[t].outstanding_bytes > 0 {
            self.start_persist(target);
        }
        self.schedule_watchdog(self.now_ms);
    }
}

impl Target {
    fn new(disks: Vec<usize>, hold_factor: u64, hold_divisor: u64) -> Target {
        Target {
            disks,
            hold_factor,
            hold_divisor,
            pending: VecDeque::new(),
            outstanding_bytes: 0,
            persisting: false,
            delta_targets: Vec::new(),
        }
    }
}

/// How a trace record names its object for placement: a path `bucket/key…`
/// when the trace has one, else `user-U` / `session-S/O` (an ECFS session is
/// the closest thing to a dataset such traces record).
struct PlacementNames {
    bucket: String,
    key: String,
    owner: String,
}

impl PlacementNames {
    fn of(record: &Record) -> PlacementNames {
        let owner = format!("user-{}", record.user);
        match record.path.as_deref().map(|p| p.trim_start_matches('/')) {
            Some(path) if !path.is_empty() => {
                let (bucket, key) = path.split_once('/').unwrap_or(("", path));
                PlacementNames {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    owner,
                }
            }
            _ => PlacementNames {
                bucket: owner.clone(),
                key: format!("session-{}/{}", record.session, record.object),
                owner,
            },
        }
    }
}
