//! Why a disk woke up: the reason a thread's work gives its disk I/O, and the log of spin-ups the
//! [`super::PowerManager`] keeps with those reasons.
//!
//! Work that may touch disks names itself for the current thread with [`WakeReason::enter`] (a read of object X,
//! a persist, a scrub of disk 7, a rebuild, …); the returned [`ReasonGuard`] restores the previous reason when it
//! drops, so the innermost reason wins. A thread that hands disk work to another thread carries the reason along
//! with [`WakeContext::current`] and [`WakeContext::enter`]. When an acquire spins a disk up, the manager records
//! a [`WakeRecord`] with the acquiring thread's reason (or [`WakeKind::Unattributed`] when there is none), counts
//! the spin-up per reason and times it; a [`WakeWitness`] in the context learns how long the work waited for
//! spin-ups (an S3 request uses it to tell requests that needed a spin-up from those that did not).
//!
//! Reasons are bookkeeping only: they never change what the manager does.

use serde::Serialize;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What kind of work woke a disk. `as_str` is the stable name (metric label, API field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeKind {
    /// A read of an object (subject: `bucket/key`).
    Read,
    /// Restoring archived objects into the cache (subject: `bucket/key`, or the first of a batch and how many
    /// more).
    Restore,
    /// Reading objects into the cache ahead of requests (subject: the read that woke the disk, `bucket/key`, whose
    /// dataset's next objects are read; or `bucket/prefix (keep hot)`). Not a read for the scheduler: nobody waits.
    Prefetch,
    /// A write that is not a persist (engine writes driven directly, tools).
    Write,
    /// Persisting cached contents to the grid (subject: what is being persisted).
    Persist,
    /// Writing parity deltas to parity disks.
    Parity,
    /// Scrubbing (verifying) a disk.
    Scrub,
    /// Rebuilding a replaced disk.
    Rebuild,
    /// Recovering defect ranges in the background.
    Recovery,
    /// Verifying objects or parity on request.
    Verify,
    /// An operator's command (subject: which).
    Operator,
    /// Work that did not name itself.
    Unattributed,
}

impl WakeKind {
    /// Every kind, in a fixed order.
    pub const ALL: [WakeKind; 12] = [
        WakeKind::Read,
        WakeKind::Restore,
        WakeKind::Prefetch,
        WakeKind::Write,
        WakeKind::Persist,
        WakeKind::Parity,
        WakeKind::Scrub,
        WakeKind::Rebuild,
        WakeKind::Recovery,
        WakeKind::Verify,
        WakeKind::Operator,
        WakeKind::Unattributed,
    ];

    /// The stable name: `read`, `restore`, `prefetch`, `write`, `persist`, `parity`, `scrub`, `rebuild`,
    /// `recovery`, `verify`, `operator`, `unattributed`.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeKind::Read => "read",
            WakeKind::Restore => "restore",
            WakeKind::Prefetch => "prefetch",
            WakeKind::Write => "write",
            WakeKind::Persist => "persist",
            WakeKind::Parity => "parity",
            WakeKind::Scrub => "scrub",
            WakeKind::Rebuild => "rebuild",
            WakeKind::Recovery => "recovery",
            WakeKind::Verify => "verify",
            WakeKind::Operator => "operator",
            WakeKind::Unattributed => "unattributed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for WakeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why work touches disks: a kind and, where there is one, what it is about (an object `bucket/key`, a disk, a
/// task), in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WakeReason {
    pub kind: WakeKind,
    #[serde(serialize_with = "serialize_subject")]
    pub subject: Option<Arc<str>>,
}

fn serialize_subject<S: serde::Serializer>(
    subject: &Option<Arc<str>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match subject {
        Some(s) => serializer.serialize_some(&**s),
        None => serializer.serialize_none(),
    }
}

impl WakeReason {
    /// A reason of `kind` without a subject.
    pub fn new(kind: WakeKind) -> WakeReason {
        WakeReason {
            kind,
            subject: None,
        }
    }

    /// A reason of `kind` about `subject`.
    pub fn about(kind: WakeKind, subject: impl Into<Arc<str>>) -> WakeReason {
        WakeReason {
            kind,
            subject: Some(subject.into()),
        }
    }

    /// A read of object `bucket/key`.
    pub fn read(bucket: &str, key: &str) -> WakeReason {
        WakeReason::about(WakeKind::Read, format!("{bucket}/{key}"))
    }

    /// A restore of object `bucket/key` into the cache.
    pub fn restore(bucket: &str, key: &str) -> WakeReason {
        WakeReason::about(WakeKind::Restore, format!("{bucket}/{key}"))
    }

    /// Make this the current thread's reason until the guard drops.
    pub fn enter(self) -> ReasonGuard {
        WakeContext {
            reason: self,
            witness: None,
        }
        .enter()
    }

    /// The reason in words: `read of photos/a.tif`, `scrub`.
    pub fn describe(&self) -> String {
        match &self.subject {
            Some(s) => format!("{} of {s}", self.kind),
            None => self.kind.to_string(),
        }
    }
}

impl std::fmt::Display for WakeReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Learns how long a piece of work waited for disks to spin up (summed over its acquires).
#[derive(Debug, Default)]
pub struct WakeWitness {
    waited_ms: AtomicU64,
    spin_ups: AtomicU64,
}

impl WakeWitness {
    /// A witness that saw nothing yet.
    pub fn new() -> Arc<WakeWitness> {
        Arc::new(WakeWitness::default())
    }
    /// Milliseconds the work's acquires waited for disks that were off or spinning up.
    pub fn waited_ms(&self) -> u64 {
        self.waited_ms.load(Ordering::Relaxed)
    }
    /// Acquires that had to wait for a spin-up (this work's own, or one already under way).
    pub fn spin_ups(&self) -> u64 {
        self.spin_ups.load(Ordering::Relaxed)
    }
    /// Whether the work waited for any spin-up.
    pub fn needed_spin_up(&self) -> bool {
        self.spin_ups() > 0
    }
    pub(crate) fn note_wait(&self, waited_ms: u64) {
        self.spin_ups.fetch_add(1, Ordering::Relaxed);
        self.waited_ms.fetch_add(waited_ms, Ordering::Relaxed);
    }
}

/// A thread's reason and, optionally, the witness of its waits: what a thread hands to the threads it starts.
#[derive(Debug, Clone)]
pub struct WakeContext {
    pub reason: WakeReason,
    pub witness: Option<Arc<WakeWitness>>,
}

thread_local! {
    static CURRENT: RefCell<Option<WakeContext>> = const { RefCell::new(None) };
}

impl WakeContext {
    /// The current thread's context (`None` if no reason was entered).
    pub fn current() -> Option<WakeContext> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Make this the current thread's context until the guard drops.
    pub fn enter(self) -> ReasonGuard {
        let previous = CURRENT.with(|c| c.replace(Some(self)));
        ReasonGuard {
            previous,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Enter `context` if there is one (for threads started on behalf of another).
    pub fn enter_opt(context: Option<WakeContext>) -> Option<ReasonGuard> {
        context.map(WakeContext::enter)
    }
}

/// Restores the thread's previous reason when dropped. Not `Send`: it belongs to the thread that entered it.
#[must_use = "the reason applies only while the guard lives"]
pub struct ReasonGuard {
    previous: Option<WakeContext>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for ReasonGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// One spin-up, with its reason.
#[derive(Debug, Clone, Serialize)]
pub struct WakeRecord {
    /// Numbers every spin-up of the manager's life, from 1.
    pub seq: u64,
    pub disk: usize,
    pub reason: WakeReason,
    /// When the spin-up was granted (manager clock, ms).
    pub at_ms: u64,
    /// When the spin-up was granted, wall clock (ms since the Unix epoch).
    pub at_unix_ms: u64,
    /// How long it took until the disk could serve I/O (the controller's call and the spin-up delay), ms;
    /// 0 while `ready` is false.
    pub spin_up_ms: u64,
    /// Whether the spin-up has completed (a record is made when the spin-up is granted).
    pub ready: bool,
    /// Whether the controller's `spin_up` failed (the I/O that follows reports the drive's real state).
    pub controller_failed: bool,
}

/// Upper bounds (seconds) of the spin-up duration histogram's buckets; the last bucket is everything above.
pub const SPIN_UP_BUCKETS_S: [f64; 12] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0,
];

/// Cumulative spin-up durations: counts per bucket of [`SPIN_UP_BUCKETS_S`] (not cumulative across buckets;
/// `counts[SPIN_UP_BUCKETS_S.len()]` is the overflow), their sum and count.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SpinUpHistogram {
    pub counts: Vec<u64>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl SpinUpHistogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; SPIN_UP_BUCKETS_S.len() + 1];
        }
        let bucket = SPIN_UP_BUCKETS_S
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(SPIN_UP_BUCKETS_S.len());
        self.counts[bucket] += 1;
        self.sum_seconds += seconds;
        self.count += 1;
    }
}

/// Most recent spin-ups kept by the log.
pub const WAKE_LOG_RECENT_MAX: usize = 1024;

/// The manager's log of spin-ups: the last one per disk, counts per disk and reason, the recent ones in order,
/// and the duration histogram. Counts cover the manager's life (this process).
#[derive(Debug)]
pub(crate) struct WakeLog {
    next_seq: u64,
    last: Vec<Option<WakeRecord>>,
    counts: Vec<[u64; WakeKind::ALL.len()]>,
    recent: VecDeque<WakeRecord>,
    histogram: SpinUpHistogram,
}

impl WakeLog {
    /// One more disk, never woken.
    pub(crate) fn add_disk(&mut self) {
        self.last.push(None);
        self.counts.push([0; WakeKind::ALL.len()]);
    }

    pub(crate) fn new(n_disks: usize) -> WakeLog {
        WakeLog {
            next_seq: 1,
            last: vec![None; n_disks],
            counts: vec![[0; WakeKind::ALL.len()]; n_disks],
            recent: VecDeque::new(),
            histogram: SpinUpHistogram::default(),
        }
    }

    /// A spin-up granted now (`ready` false); returns its number.
    pub(crate) fn record(&mut self, mut record: WakeRecord) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        record.seq = seq;
        record.ready = false;
        self.counts[record.disk][record.reason.kind.index()] += 1;
        self.last[record.disk] = Some(record.clone());
        if self.recent.len() == WAKE_LOG_RECENT_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(record);
        seq
    }

    /// Spin-up `seq` completed after `spin_up_ms`.
    pub(crate) fn complete(&mut self, seq: u64, spin_up_ms: u64, controller_failed: bool) {
        self.histogram.observe(spin_up_ms as f64 / 1000.0);
        let update = |r: &mut WakeRecord| {
            r.ready = true;
            r.spin_up_ms = spin_up_ms;
            r.controller_failed = controller_failed;
        };
        if let Some(r) = self.recent.iter_mut().rev().find(|r| r.seq == seq) {
            update(r);
        }
        for r in self.last.iter_mut().flatten().filter(|r| r.seq == seq) {
            update(r);
        }
    }

    pub(crate) fn last(&self, disk: usize) -> Option<WakeRecord> {
        self.last.get(disk).cloned().flatten()
    }

    pub(crate) fn counts(&self, disk: usize) -> Vec<(WakeKind, u64)> {
        WakeKind::ALL
            .iter()
            .map(|&k| (k, self.counts[disk][k.index()]))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    pub(crate) fn since(&self, seq: u64) -> Vec<WakeRecord> {
        self.recent
            .iter()
            .filter(|r| r.seq > seq)
            .cloned()
            .collect()
    }

    pub(crate) fn histogram(&self) -> SpinUpHistogram {
        let mut h = self.histogram.clone();
        if h.counts.is_empty() {
            h.counts = vec![0; SPIN_UP_BUCKETS_S.len() + 1];
        }
        h
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_reason_wins_and_the_outer_one_comes_back() {
        assert!(WakeContext::current().is_none());
        {
            let _outer = WakeReason::new(WakeKind::Scrub).enter();
            assert_eq!(WakeContext::current().unwrap().reason.kind, WakeKind::Scrub);
            {
                let _inner = WakeReason::read("b", "k").enter();
                let current = WakeContext::current().unwrap().reason;
                assert_eq!(current.kind, WakeKind::Read);
                assert_eq!(current.describe(), "read of b/k");
            }
            assert_eq!(WakeContext::current().unwrap().reason.kind, WakeKind::Scrub);
        }
        assert!(WakeContext::current().is_none());
    }

    #[test]
    fn a_context_carried_to_another_thread_applies_there() {
        let _g = WakeReason::about(WakeKind::Rebuild, "disk 3").enter();
        let context = WakeContext::current();
        let seen = std::thread::spawn(move || {
            let _g = WakeContext::enter_opt(context);
            WakeContext::current().map(|c| c.reason.describe())
        })
        .join()
        .unwrap();
        assert_eq!(seen.as_deref(), Some("rebuild of disk 3"));
    }

    #[test]
    fn the_log_counts_per_disk_and_reason_and_keeps_the_last() {
        let mut log = WakeLog::new(2);
        let record = |disk, kind| WakeRecord {
            seq: 0,
            disk,
            reason: WakeReason::new(kind),
            at_ms: 0,
            at_unix_ms: 0,
            spin_up_ms: 0,
            ready: false,
            controller_failed: false,
        };
        for (seq, kind) in [
            (1, WakeKind::Read),
            (2, WakeKind::Scrub),
            (3, WakeKind::Read),
        ] {
            assert_eq!(log.record(record(1, kind)), seq);
            assert!(!log.last(1).unwrap().ready);
            log.complete(seq, 120, false);
        }
        assert!(log.last(1).unwrap().ready);
        assert_eq!(log.last(1).unwrap().spin_up_ms, 120);
        assert_eq!(
            log.counts(1),
            vec![(WakeKind::Read, 2), (WakeKind::Scrub, 1)]
        );
        assert!(log.counts(0).is_empty());
        assert_eq!(log.last(1).unwrap().seq, 3);
        assert_eq!(log.since(1).len(), 2);
        let h = log.histogram();
        assert_eq!(h.count, 3);
        assert_eq!(h.counts[2], 3, "0.12 s falls in the 0.25 s bucket");
    }
}
