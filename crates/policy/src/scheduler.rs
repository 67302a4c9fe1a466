//! The read scheduler: which request waiting for the power budget spins its
//! disks up next, and what a spinning disk serves next (issue 30).
//!
//! An archive that sleeps answers a cold read one spin-up after the request
//! at best. It answers many reads much later than that when they queue: behind
//! a persist on the same disk, behind each other on one disk, or behind other
//! disks' spin-ups under a full power budget. The scheduler orders these
//! queues; it owns no disks, no clock and no budget. The caller (the server's
//! power manager, the energy simulator) tells it what arrived and asks it what
//! to do next, passing the time in; the budget itself stays
//! `permafrost_disk::power::PowerBudget`'s.
//!
//! Two strategies ([`SchedulerStrategy`]):
//!
//! - **`fifo`**: first come, first served everywhere. Requests take the budget
//!   in arrival order; a disk serves its work in the order it was admitted; a
//!   persist, once started, runs to its end before anything queued behind it.
//!   This is what permafrost did before the scheduler, kept to compare.
//! - **`deadline`** (default): bounded reordering with a deadline, after
//!   Pelican (OSDI 2014) and Linux's deadline I/O scheduler:
//!   1. *Spin-up order.* When the budget is full, the next request to take it
//!      is the oldest of the disk set with the most waiting requests (one
//!      spin-up serves them all), ties to the oldest. A request that has
//!      waited [`SchedulerConfig::max_wait_ms`] goes first whatever else
//!      waits, oldest first; while one such request waits, no younger request
//!      starts on a spinning disk either ([`Scheduler::holding`]), so the disks
//!      in the budget drain and one can be turned off for it. The spin-up made
//!      for it serves the requests waiting for the same disks too
//!      ([`Scheduler::waiting_for`]): they need no more budget.
//!   2. *Reads before persistence.* A persist runs in chunks; between chunks
//!      it yields to the reads queued for its disk. It is never starved: reads
//!      may run ahead of it only while the read time it yielded, less the
//!      chunk time it got since, is under
//!      [`SchedulerConfig::persist_yield_max_ms`], so under a read storm it
//!      gets at least half of the disk's time.
//!   3. *On-disk order.* Reads are transferred in chunks too, as the server
//!      streams them: a disk sweeps over its queued reads in ascending offset,
//!      one chunk of each per sweep, wrapping around. So the first byte of
//!      every queued read flows within one sweep, not after every read ahead
//!      of it has been transferred whole; a read whose first byte has waited
//!      `max_wait_ms` goes first, oldest first.
//!   4. *A spinning disk with queued reads stays up* until they are served
//!      ([`Scheduler::has_queued_reads`]): the caller holds the disk's power
//!      for each queued request, so it is neither idle nor evictable.
//!
//! Guarantees (tested by `tests/scheduler_props.rs` under adversarial
//! arrivals, with the real power budget):
//! - every request submitted is served exactly once, whole;
//! - a request that has waited `max_wait_ms` is never passed over: no younger
//!   request takes the budget before it (except those waiting for the same
//!   disks as an older request the budget went to), no younger read of its
//!   disk gets its first byte before it;
//! - hence its wait is bounded by `max_wait_ms` plus the work that was
//!   already admitted or older than it at that moment, or rides on the
//!   spin-up of an older one (one spin-up each), twice over for the persist it
//!   may share its disk with.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

/// How the scheduler orders waiting requests (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerStrategy {
    /// First come, first served; persists run to their end.
    Fifo,
    /// Bounded reordering with a maximum wait; reads before persistence.
    #[default]
    Deadline,
}

impl SchedulerStrategy {
    /// Every strategy's name, as `--scheduler` and the config accept them.
    pub const NAMES: [&'static str; 2] = ["fifo", "deadline"];

    /// The strategy's name.
    pub fn name(self) -> &'static str {
        match self {
            SchedulerStrategy::Fifo => "fifo",
            SchedulerStrategy::Deadline => "deadline",
        }
    }

    /// The strategy called `name`.
    pub fn from_name(name: &str) -> Option<SchedulerStrategy> {
        match name {
            "fifo" => Some(SchedulerStrategy::Fifo),
            "deadline" => Some(SchedulerStrategy::Deadline),
            _ => None,
        }
    }
}

impl std::fmt::Display for SchedulerStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SchedulerStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchedulerStrategy::from_name(s).ok_or_else(|| {
            format!(
                "unknown scheduler {s:?}: one of {}",
                SchedulerStrategy::NAMES.join(", ")
            )
        })
    }
}

/// Settings of the scheduler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// The strategy.
    pub strategy: SchedulerStrategy,
    /// A request that has waited this long is served before any younger one
    /// (`deadline` only).
    pub max_wait_ms: u64,
    /// Reads may run ahead of a persist on the same disk until the persist has
    /// yielded this much more read time than it got chunk time (`deadline` only).
    pub persist_yield_max_ms: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            strategy: SchedulerStrategy::Deadline,
            max_wait_ms: 30_000,
            persist_yield_max_ms: 30_000,
        }
    }
}

/// The caller's name for a request (unique among requests the scheduler holds).
pub type RequestId = u64;

/// What a free disk should do next: one chunk of a read or of a persist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Next {
    /// Transfer `ms` of read `id`. `first`: its first byte flows now (time to
    /// first byte ends); `last`: the read is done after this chunk (it leaves
    /// the scheduler).
    Read {
        id: RequestId,
        ms: u64,
        first: bool,
        last: bool,
    },
    /// Transfer `ms` of persist `id`; `last`: the persist is done after this
    /// chunk (it leaves the scheduler).
    Persist { id: RequestId, ms: u64, last: bool },
}

impl Next {
    /// The request this chunk belongs to.
    pub fn id(&self) -> RequestId {
        match *self {
            Next::Read { id, .. } | Next::Persist { id, .. } => id,
        }
    }
}

#[derive(Clone, Debug)]
struct Waiting {
    disks: Box<[usize]>,
}

#[derive(Clone, Copy, Debug)]
struct QueuedRead {
    offset: u64,
    arrival_ms: u64,
    remaining_ms: u64,
    chunk_ms: u64,
    started: bool,
}

#[derive(Clone, Copy, Debug)]
struct PersistState {
    id: RequestId,
    remaining_ms: u64,
    chunk_ms: u64,
    /// Read time served ahead of this persist, less chunk time it got since.
    yielded_ms: u64,
}

#[derive(Clone, Debug, Default)]
struct DiskQueue {
    /// `deadline`: reads with data left, in on-disk order.
    by_offset: BTreeSet<(u64, RequestId)>,
    /// `deadline`: reads whose first byte has not flowed yet, by age.
    by_age: BTreeSet<(u64, RequestId)>,
    /// Reads with data left.
    reads: HashMap<RequestId, QueuedRead>,
    /// `fifo`: the disk's work in admission order.
    fifo: VecDeque<RequestId>,
    persist: Option<PersistState>,
    /// The sweep's position: the read served last.
    head: Option<(u64, RequestId)>,
}

/// The scheduler: per-disk queues and the queue for the power budget.
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    /// Requests waiting for the budget, by arrival.
    spin: BTreeMap<(u64, RequestId), Waiting>,
    /// The same requests grouped by their disk set.
    groups: HashMap<Box<[usize]>, BTreeSet<(u64, RequestId)>>,
    arrivals: HashMap<RequestId, u64>,
    disks: Vec<DiskQueue>,
}

impl Scheduler {
    /// A scheduler for `n_disks` disks.
    pub fn new(config: SchedulerConfig, n_disks: usize) -> Scheduler {
        Scheduler {
            config,
            spin: BTreeMap::new(),
            groups: HashMap::new(),
            arrivals: HashMap::new(),
            disks: vec![DiskQueue::default(); n_disks],
        }
    }

    /// One more disk (a grid grown by a disk), numbered after the others, with nothing queued.
    pub fn add_disk(&mut self) {
        self.disks.push(DiskQueue::default());
    }

    /// The settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The strategy.
    pub fn strategy(&self) -> SchedulerStrategy {
        self.config.strategy
    }

    // ---- the queue for the power budget ----

    /// `id`, which arrived at `arrival_ms`, needs `disks` and cannot start now
    /// (a disk is off and the budget is full, or [`Scheduler::holding`]).
    pub fn wait_for_budget(&mut self, id: RequestId, disks: &[usize], arrival_ms: u64) {
        let mut set: Vec<usize> = disks.to_vec();
        set.sort_unstable();
        set.dedup();
        let set: Box<[usize]> = set.into();
        self.groups
            .entry(set.clone())
            .or_default()
            .insert((arrival_ms, id));
        self.arrivals.insert(id, arrival_ms);
        self.spin.insert((arrival_ms, id), Waiting { disks: set });
    }

    /// Requests waiting for the budget.
    pub fn budget_waiting(&self) -> usize {
        self.spin.len()
    }

    /// The waiting requests in arrival order, with their arrival and disks.
    pub fn budget_queue(&self) -> impl Iterator<Item = (RequestId, u64, &[usize])> + '_ {
        self.spin
            .iter()
            .map(|(&(arrival, id), w)| (id, arrival, &w.disks[..]))
    }

    /// The request that should take the budget next, if any waits.
    pub fn next_to_spin(&self, now_ms: u64) -> Option<RequestId> {
        let (&(oldest_arrival, oldest), _) = self.spin.first_key_value()?;
        if self.config.strategy == SchedulerStrategy::Fifo
            || now_ms.saturating_sub(oldest_arrival) >= self.config.max_wait_ms
        {
            return Some(oldest);
        }
        self.groups
            .values()
            .filter_map(|g| g.first().map(|&first| (g.len(), first)))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, (_, id))| id)
    }

    /// Whether a request that has waited `max_wait_ms` waits for the budget:
    /// then no younger request may start, even on spinning disks (`deadline`;
    /// `fifo` never holds). The caller queues such requests with
    /// [`Scheduler::wait_for_budget`].
    pub fn holding(&self, now_ms: u64) -> bool {
        self.config.strategy == SchedulerStrategy::Deadline
            && self
                .spin
                .first_key_value()
                .is_some_and(|(&(arrival, _), _)| {
                    now_ms.saturating_sub(arrival) >= self.config.max_wait_ms
                })
    }

    /// When [`Scheduler::holding`] turns true without a call, if it will.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        if self.config.strategy == SchedulerStrategy::Fifo {
            return None;
        }
        self.spin
            .first_key_value()
            .map(|(&(arrival, _), _)| arrival.saturating_add(self.config.max_wait_ms))
    }

    /// The requests waiting for the budget for exactly `disks`, oldest first.
    /// When disks spin up for a request that has waited `max_wait_ms`, these
    /// go with it: they need no more budget.
    pub fn waiting_for(&self, disks: &[usize]) -> Vec<RequestId> {
        let mut set: Vec<usize> = disks.to_vec();
        set.sort_unstable();
        set.dedup();
        self.groups
            .get(&set[..])
            .map(|g| g.iter().map(|&(_, id)| id).collect())
            .unwrap_or_default()
    }

    /// Whether `id` waits for the budget.
    pub fn is_waiting(&self, id: RequestId) -> bool {
        self.arrivals.contains_key(&id)
    }

    /// `id` took the budget (or started on spinning disks): it leaves the queue.
    /// Returns false if it was not waiting.
    pub fn granted(&mut self, id: RequestId) -> bool {
        let Some(arrival) = self.arrivals.remove(&id) else {
            return false;
        };
        let w = self
            .spin
            .remove(&(arrival, id))
            .expect("a waiting request is in the queue");
        let group = self.groups.get_mut(&w.disks).expect("and in its group");
        group.remove(&(arrival, id));
        if group.is_empty() {
            self.groups.remove(&w.disks);
        }
        true
    }

    // ---- the disks' queues ----

    /// A read `id` of the data at `offset` on `disk`, which arrived at
    /// `arrival_ms` and transfers for `service_ms`, has its disk's power:
    /// queue it. It is served in chunks of `chunk_ms` (`deadline`) or at once
    /// (`fifo`).
    pub fn enqueue_read(
        &mut self,
        disk: usize,
        id: RequestId,
        offset: u64,
        arrival_ms: u64,
        service_ms: u64,
        chunk_ms: u64,
    ) {
        let q = &mut self.disks[disk];
        q.reads.insert(
            id,
            QueuedRead {
                offset,
                arrival_ms,
                remaining_ms: service_ms,
                chunk_ms: chunk_ms.max(1),
                started: false,
            },
        );
        match self.config.strategy {
            SchedulerStrategy::Fifo => q.fifo.push_back(id),
            SchedulerStrategy::Deadline => {
                q.by_offset.insert((offset, id));
                q.by_age.insert((arrival_ms, id));
            }
        }
    }

    /// A persist `id` to `disk` has its disks' power; it transfers for
    /// `service_ms` in chunks of `chunk_ms` (`fifo`: at once). One persist per
    /// disk at a time.
    ///
    /// # Panics
    /// If a persist of `disk` is already queued (a bug in the caller).
    pub fn begin_persist(&mut self, disk: usize, id: RequestId, service_ms: u64, chunk_ms: u64) {
        let q = &mut self.disks[disk];
        assert!(
            q.persist.is_none(),
            "disk {disk}: persist {id} begun while another runs"
        );
        q.persist = Some(PersistState {
            id,
            remaining_ms: service_ms,
            chunk_ms: chunk_ms.max(1),
            yielded_ms: 0,
        });
        if self.config.strategy == SchedulerStrategy::Fifo {
            q.fifo.push_back(id);
        }
    }

    /// Take the persist of `disk` out of its queue between chunks (its caller
    /// gives its disks back to the budget and queues it again, e.g. while
    /// [`Scheduler::holding`]). Returns the transfer time it has left.
    pub fn suspend_persist(&mut self, disk: usize) -> Option<u64> {
        let q = &mut self.disks[disk];
        let p = q.persist.take()?;
        if let Some(pos) = q.fifo.iter().position(|&id| id == p.id) {
            q.fifo.remove(pos);
        }
        Some(p.remaining_ms)
    }

    /// Whether `disk` has reads queued (it must stay up until they are served).
    pub fn has_queued_reads(&self, disk: usize) -> bool {
        !self.disks[disk].reads.is_empty()
    }

    /// Reads queued for `disk` (started or not).
    pub fn queued_reads(&self, disk: usize) -> usize {
        self.disks[disk].reads.len()
    }

    /// Whether `disk` has a persist queued or running.
    pub fn persisting(&self, disk: usize) -> bool {
        self.disks[disk].persist.is_some()
    }

    /// `disk` is free at `now_ms`: the chunk it should transfer next, if any.
    pub fn next_on_disk(&mut self, disk: usize, now_ms: u64) -> Option<Next> {
        let max_wait_ms = self.config.max_wait_ms;
        let yield_max_ms = self.config.persist_yield_max_ms;
        let q = &mut self.disks[disk];
        match self.config.strategy {
            SchedulerStrategy::Fifo => {
                let id = *q.fifo.front()?;
                q.fifo.pop_front();
                if let Some(r) = q.reads.remove(&id) {
                    return Some(Next::Read {
                        id,
                        ms: r.remaining_ms,
                        first: true,
                        last: true,
                    });
                }
                let p = q
                    .persist
                    .take()
                    .expect("fifo work is a read or the persist");
                Some(Next::Persist {
                    id,
                    ms: p.remaining_ms,
                    last: true,
                })
            }
            SchedulerStrategy::Deadline => {
                if let Some(p) = q.persist.as_mut() {
                    if q.reads.is_empty() || p.yielded_ms >= yield_max_ms {
                        let ms = p.remaining_ms.min(p.chunk_ms);
                        p.remaining_ms -= ms;
                        p.yielded_ms = p.yielded_ms.saturating_sub(ms);
                        let (id, last) = (p.id, p.remaining_ms == 0);
                        if last {
                            q.persist = None;
                        }
                        return Some(Next::Persist { id, ms, last });
                    }
                }
                let aged = q
                    .by_age
                    .first()
                    .filter(|&&(arrival, _)| now_ms.saturating_sub(arrival) >= max_wait_ms)
                    .map(|&(_, id)| id);
                let id = match aged {
                    Some(id) => id,
                    None => {
                        let after = match q.head {
                            Some(head) => std::ops::Bound::Excluded(head),
                            None => std::ops::Bound::Unbounded,
                        };
                        let &(_, id) = q
                            .by_offset
                            .range((after, std::ops::Bound::Unbounded))
                            .next()
                            .or_else(|| q.by_offset.first())?;
                        id
                    }
                };
                let r = q.reads.get_mut(&id).expect("queued read");
                let first = !r.started;
                r.started = true;
                let ms = r.remaining_ms.min(r.chunk_ms);
                r.remaining_ms -= ms;
                let last = r.remaining_ms == 0;
                let (offset, arrival) = (r.offset, r.arrival_ms);
                if first {
                    q.by_age.remove(&(arrival, id));
                }
                if last {
                    q.reads.remove(&id);
                    q.by_offset.remove(&(offset, id));
                }
                q.head = Some((offset, id));
                if let Some(p) = q.persist.as_mut() {
                    p.yielded_ms = p.yielded_ms.saturating_add(ms);
                }
                Some(Next::Read {
                    id,
                    ms,
                    first,
                    last,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadline() -> Scheduler {
        Scheduler::new(SchedulerConfig::default(), 4)
    }

    fn fifo() -> Scheduler {
        Scheduler::new(
            SchedulerConfig {
                strategy: SchedulerStrategy::Fifo,
                ..SchedulerConfig::default()
            },
            4,
        )
    }

    fn read(id: RequestId, ms: u64, first: bool, last: bool) -> Next {
        Next::Read {
            id,
            ms,
            first,
            last,
        }
    }

    #[test]
    fn the_disk_with_most_waiting_requests_spins_first_until_one_is_too_old() {
        let mut s = deadline();
        s.wait_for_budget(1, &[0], 0);
        s.wait_for_budget(2, &[1], 1_000);
        s.wait_for_budget(3, &[1], 2_000);
        assert_eq!(s.next_to_spin(5_000), Some(2), "disk 1 has two waiting");
        assert!(!s.holding(29_999));
        assert_eq!(
            s.next_to_spin(30_000),
            Some(1),
            "request 1 waited 30 s: it goes first"
        );
        assert!(s.holding(30_000));
        assert!(s.granted(1));
        assert!(!s.granted(1), "granted once");
        assert_eq!(s.next_to_spin(30_000), Some(2));
        assert_eq!(s.next_deadline_ms(), Some(31_000));
    }

    #[test]
    fn requests_for_the_same_disks_are_found_together() {
        let mut s = deadline();
        s.wait_for_budget(1, &[2, 1], 0);
        s.wait_for_budget(2, &[1], 5);
        s.wait_for_budget(3, &[1, 2, 2], 9);
        assert_eq!(s.waiting_for(&[1, 2]), vec![1, 3]);
        assert_eq!(s.waiting_for(&[1]), vec![2]);
        assert!(s.waiting_for(&[3]).is_empty());
        s.granted(1);
        assert_eq!(s.waiting_for(&[2, 1]), vec![3]);
    }

    #[test]
    fn fifo_spins_in_arrival_order_and_never_holds() {
        let mut s = fifo();
        s.wait_for_budget(1, &[0], 0);
        s.wait_for_budget(2, &[1], 1);
        s.wait_for_budget(3, &[1], 2);
        assert_eq!(s.next_to_spin(10), Some(1));
        assert!(!s.holding(1_000_000));
    }

    #[test]
    fn a_disk_sweeps_its_reads_in_on_disk_order_one_chunk_each() {
        let mut s = deadline();
        s.enqueue_read(0, 1, 500, 0, 250, 100);
        s.enqueue_read(0, 2, 100, 1, 100, 100);
        s.enqueue_read(0, 3, 300, 2, 150, 100);
        let order: Vec<Next> = std::iter::from_fn(|| s.next_on_disk(0, 10)).collect();
        assert_eq!(
            order,
            vec![
                read(2, 100, true, true),
                read(3, 100, true, false),
                read(1, 100, true, false),
                read(3, 50, false, true),
                read(1, 100, false, false),
                read(1, 50, false, true),
            ]
        );
        assert!(!s.has_queued_reads(0));
    }

    #[test]
    fn a_read_that_waited_max_wait_gets_its_first_byte_first() {
        let mut s = deadline();
        s.enqueue_read(0, 1, 10, 20_000, 10, 10);
        s.enqueue_read(0, 2, 900, 0, 10, 10);
        assert_eq!(s.next_on_disk(0, 29_999), Some(read(1, 10, true, true)));
        s.enqueue_read(0, 3, 10, 20_000, 10, 10);
        assert_eq!(
            s.next_on_disk(0, 30_000),
            Some(read(2, 10, true, true)),
            "waited 30 s"
        );
        assert_eq!(s.next_on_disk(0, 30_000), Some(read(3, 10, true, true)));
        assert_eq!(s.next_on_disk(0, 30_000), None);
    }

    #[test]
    fn a_persist_yields_to_reads_between_chunks_but_gets_half_the_disk() {
        let mut s = deadline();
        s.begin_persist(0, 100, 100_000, 1_000);
        assert_eq!(
            s.next_on_disk(0, 0),
            Some(Next::Persist {
                id: 100,
                ms: 1_000,
                last: false
            })
        );
        for i in 0..10 {
            s.enqueue_read(0, i, i, 0, 10_000, 10_000);
        }
        let order: Vec<Next> = (0..40).filter_map(|_| s.next_on_disk(0, 1)).collect();
        // 30 s of reads go ahead, then the persist pays back 1 s per chunk:
        // never more than 30 s (plus one read) of reads beyond what it got.
        let mut debt: i64 = 0;
        for n in &order {
            match n {
                Next::Read { ms, .. } => debt += *ms as i64,
                Next::Persist { ms, .. } => debt -= *ms as i64,
            }
            assert!(debt < 40_000, "{order:?}");
        }
        assert!(matches!(order[2], Next::Read { id: 2, .. }));
        assert!(matches!(order[3], Next::Persist { id: 100, .. }));
        let persisted: u64 = order
            .iter()
            .filter_map(|n| match n {
                Next::Persist { ms, .. } => Some(*ms),
                _ => None,
            })
            .sum();
        assert!(persisted >= 9_000, "{order:?}");
    }

    #[test]
    fn a_persist_ends_with_its_last_chunk() {
        let mut s = deadline();
        s.begin_persist(0, 7, 2_500, 1_000);
        let order: Vec<Next> = std::iter::from_fn(|| s.next_on_disk(0, 0)).collect();
        assert_eq!(
            order.last(),
            Some(&Next::Persist {
                id: 7,
                ms: 500,
                last: true
            })
        );
        assert_eq!(order.len(), 3);
        assert!(!s.persisting(0));
        s.begin_persist(0, 8, 1, 1_000);
    }

    #[test]
    fn a_suspended_persist_leaves_with_what_it_has_left() {
        let mut s = deadline();
        s.begin_persist(0, 7, 2_500, 1_000);
        assert!(s.next_on_disk(0, 0).is_some());
        assert_eq!(s.suspend_persist(0), Some(1_500));
        assert_eq!(s.suspend_persist(0), None);
        assert_eq!(s.next_on_disk(0, 0), None);
        s.begin_persist(0, 7, 1_500, 1_000);
        assert!(s.persisting(0));
    }

    #[test]
    fn fifo_serves_whole_requests_in_arrival_order() {
        let mut s = fifo();
        s.enqueue_read(0, 1, 9, 0, 10, 1);
        s.begin_persist(0, 100, 5_000, 1_000);
        s.enqueue_read(0, 2, 1, 1, 10, 1);
        assert_eq!(s.next_on_disk(0, 5), Some(read(1, 10, true, true)));
        assert_eq!(
            s.next_on_disk(0, 5),
            Some(Next::Persist {
                id: 100,
                ms: 5_000,
                last: true
            })
        );
        assert_eq!(s.next_on_disk(0, 5), Some(read(2, 10, true, true)));
        assert_eq!(s.next_on_disk(0, 5), None);
    }

    #[test]
    fn strategies_have_names() {
        for name in SchedulerStrategy::NAMES {
            assert_eq!(SchedulerStrategy::from_name(name).unwrap().name(), name);
        }
        assert!("lifo".parse::<SchedulerStrategy>().is_err());
        let c: SchedulerConfig = serde_json::from_str(r#"{"strategy": "fifo"}"#).unwrap();
        assert_eq!(c.strategy, SchedulerStrategy::Fifo);
        assert_eq!(c.max_wait_ms, 30_000);
    }
}
