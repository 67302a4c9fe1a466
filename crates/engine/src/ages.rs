//! `RangeAges`: when each range of a disk was last known good — verified by a scrub, or freshly encoded by a write,
//! a drain or a recovery — so that what is overdue for a scrub is known per range, not per disk.
//!
//! Runs `[start, end) → verified_ms` are kept sorted and non-overlapping; a range in no run was never verified.
//! Touching runs with the same time merge. The number of runs is bounded by [`RUNS_MAX`]: beyond it the two touching
//! runs with the closest times merge, keeping the *older* time (a range may look older than it is, never younger,
//! so it is scrubbed early rather than late); when no runs touch, the youngest run is forgotten (never verified),
//! which errs the same way.

use std::collections::BTreeMap;

/// Most runs kept per disk (each is a journal row).
pub(crate) const RUNS_MAX: usize = 4096;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeAges {
    /// start → (end, verified_ms).
    runs: BTreeMap<u64, (u64, u64)>,
}

impl RangeAges {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Add a run read back from the journal (no merging: the journal holds what `record` left).
    pub(crate) fn load(&mut self, start: u64, end: u64, verified_ms: u64) {
        if start < end {
            self.runs.insert(start, (end, verified_ms));
        }
    }

    /// `[start, end)` was verified (or written) at `now_ms`. Returns the span `[lo, hi)` that holds every run this
    /// removed, changed or added: the runs starting inside it are what the journal must store anew.
    pub(crate) fn record(&mut self, start: u64, end: u64, now_ms: u64) -> (u64, u64) {
        if start >= end {
            return (start, start);
        }
        let (mut lo, mut hi) = (start, end);
        // Cut away what the new run covers, keeping the parts of partly covered runs outside it.
        let mut overlapping: Vec<(u64, u64, u64)> = Vec::new();
        if let Some((&s, &(e, ms))) = self.runs.range(..start).next_back() {
            if e > start {
                overlapping.push((s, e, ms));
            }
        }
        overlapping.extend(self.runs.range(start..end).map(|(&s, &(e, ms))| (s, e, ms)));
        for (s, e, ms) in overlapping {
            self.runs.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
            if s < start {
                self.runs.insert(s, (start, ms));
            }
            if e > end {
                self.runs.insert(end, (e, ms));
            }
        }
        // The new run, merged with touching neighbours of the same time.
        let (mut run_start, mut run_end) = (start, end);
        if let Some((&s, &(e, ms))) = self.runs.range(..start).next_back() {
            if e == start && ms == now_ms {
                self.runs.remove(&s);
                run_start = s;
                lo = lo.min(s);
            }
        }
        if let Some(&(e, ms)) = self.runs.get(&end) {
            if ms == now_ms {
                self.runs.remove(&end);
                run_end = e;
                hi = hi.max(e);
            }
        }
        self.runs.insert(run_start, (run_end, now_ms));
        while self.runs.len() > RUNS_MAX {
            let (s, e) = self.shed_one();
            lo = lo.min(s);
            hi = hi.max(e);
        }
        (lo, hi)
    }

    /// Merge the two touching runs with the closest times (keeping the older), or forget the youngest run when no
    /// runs touch. Returns the span changed.
    fn shed_one(&mut self) -> (u64, u64) {
        let runs: Vec<(u64, u64, u64)> = self.iter().collect();
        let closest = runs
            .windows(2)
            .filter(|pair| pair[0].1 == pair[1].0)
            .min_by_key(|pair| pair[0].2.abs_diff(pair[1].2));
        match closest {
            Some(pair) => {
                let (s, _, left_ms) = pair[0];
                let (right_start, e, right_ms) = pair[1];
                self.runs.remove(&right_start);
                self.runs.insert(s, (e, left_ms.min(right_ms)));
                (s, e)
            }
            None => {
                let &(s, e, _) = runs
                    .iter()
                    .max_by_key(|run| run.2)
                    .expect("over the bound, so not empty");
                self.runs.remove(&s);
                (s, e)
            }
        }
    }

    /// Forget everything (a replaced disk: recovery records what it writes).
    pub(crate) fn clear(&mut self) {
        self.runs.clear();
    }

    /// The parts of `[start, end)` last verified at or before `cutoff_ms`, or never, with that time (0 = never), in
    /// order.
    pub(crate) fn older_than(&self, start: u64, end: u64, cutoff_ms: u64) -> Vec<(u64, u64, u64)> {
        let mut out: Vec<(u64, u64, u64)> = Vec::new();
        let mut push = |s: u64, e: u64, ms: u64| {
            if s >= e {
                return;
            }
            match out.last_mut() {
                Some(last) if last.1 == s && last.2 == ms => last.1 = e,
                _ => out.push((s, e, ms)),
            }
        };
        let mut at = start;
        let first = self
            .runs
            .range(..start)
            .next_back()
            .filter(|(_, &(e, _))| e > start)
            .map(|(&s, &v)| (s, v));
        for (s, (e, ms)) in first
            .into_iter()
            .chain(self.runs.range(start..end).map(|(&s, &v)| (s, v)))
        {
            let (s, e) = (s.max(start), e.min(end));
            push(at, s, 0);
            if ms <= cutoff_ms {
                push(s, e, ms);
            }
            at = e;
        }
        push(at, end, 0);
        out
    }

    /// Runs whose start lies in `[lo, hi)`, as `(start, end, verified_ms)`.
    pub(crate) fn runs_starting_in(&self, lo: u64, hi: u64) -> Vec<(u64, u64, u64)> {
        self.runs
            .range(lo..hi)
            .map(|(&s, &(e, ms))| (s, e, ms))
            .collect()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.runs.iter().map(|(&s, &(e, ms))| (s, e, ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_replaces_what_it_covers_and_merges_equal_neighbours() {
        let mut ages = RangeAges::new();
        ages.record(0, 100, 10);
        ages.record(40, 60, 20);
        assert_eq!(
            ages.iter().collect::<Vec<_>>(),
            vec![(0, 40, 10), (40, 60, 20), (60, 100, 10)]
        );
        let span = ages.record(60, 100, 20);
        assert_eq!(
            ages.iter().collect::<Vec<_>>(),
            vec![(0, 40, 10), (40, 100, 20)]
        );
        assert_eq!(span, (40, 100), "the span holds the merged run");
        assert_eq!(
            ages.older_than(0, 200, 15),
            vec![(0, 40, 10), (100, 200, 0)]
        );
        assert_eq!(ages.older_than(50, 70, 15), vec![]);
        assert_eq!(ages.older_than(50, 70, 25), vec![(50, 70, 20)]);
        assert_eq!(ages.runs_starting_in(40, 100), vec![(40, 100, 20)]);
    }

    #[test]
    fn the_number_of_runs_is_bounded_and_ages_only_err_towards_older() {
        let mut ages = RangeAges::new();
        for i in 0..(RUNS_MAX as u64 + 10) {
            ages.record(i * 10, i * 10 + 10, 1000 + i);
        }
        assert_eq!(ages.iter().count(), RUNS_MAX);
        for i in 0..(RUNS_MAX as u64 + 10) {
            let older = ages.older_than(i * 10, i * 10 + 10, 1000 + i + 1);
            assert_eq!(
                older.iter().map(|r| r.1 - r.0).sum::<u64>(),
                10,
                "range {i} looks younger than it is"
            );
        }
        // Runs that do not touch: the youngest is forgotten (reads as never verified).
        let mut apart = RangeAges::new();
        for i in 0..(RUNS_MAX as u64 + 1) {
            apart.record(i * 20, i * 20 + 10, 5 + i);
        }
        assert_eq!(apart.iter().count(), RUNS_MAX);
        let last = RUNS_MAX as u64 * 20;
        assert_eq!(
            apart.older_than(last, last + 10, 1),
            vec![(last, last + 10, 0)]
        );
    }
}
