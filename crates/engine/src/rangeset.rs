//! A set of half-open `u64` ranges `[start, end)`, kept coalesced (no two ranges overlap or touch).
//!
//! Used for the written map (in stripe units), defect ranges and lock bookkeeping (in bytes).

use std::collections::BTreeMap;

/// Coalesced set of half-open ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    /// start → end, non-overlapping, non-adjacent.
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Add `[start, end)`, merging with overlapping or adjacent ranges.
    pub(crate) fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut new_start = start;
        let mut new_end = end;
        // A range starting before `start` that reaches it.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back() {
            if e >= start {
                new_start = s;
                new_end = new_end.max(e);
            }
        }
        let overlapping: Vec<u64> = self
            .ranges
            .range(new_start..=new_end)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            let e = self.ranges.remove(&s).expect("key listed above");
            new_end = new_end.max(e);
        }
        self.ranges.insert(new_start, new_end);
    }

    /// Remove `[start, end)`, splitting ranges as needed.
    pub(crate) fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        for (s, e) in self.raw_overlapping(start, end) {
            self.ranges.remove(&s);
            if s < start {
                self.ranges.insert(s, start);
            }
            if e > end {
                self.ranges.insert(end, e);
            }
        }
    }

    /// Whole stored ranges overlapping `[start, end)` (not clipped).
    fn raw_overlapping(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if let Some((&s, &e)) = self.ranges.range(..start).next_back() {
            if e > start {
                out.push((s, e));
            }
        }
        out.extend(self.ranges.range(start..end).map(|(&s, &e)| (s, e)));
        out
    }

    /// The parts of the set inside `[start, end)`, clipped, in order.
    pub(crate) fn overlapping(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        if start >= end {
            return Vec::new();
        }
        self.raw_overlapping(start, end)
            .into_iter()
            .map(|(s, e)| (s.max(start), e.min(end)))
            .collect()
    }

    /// The parts of `[start, end)` not in the set, in order.
    #[cfg(test)]
    pub(crate) fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut cursor = start;
        for (s, e) in self.overlapping(start, end) {
            if s > cursor {
                out.push((cursor, s));
            }
            cursor = e;
        }
        if cursor < end {
            out.push((cursor, end));
        }
        out
    }

    pub(crate) fn intersects(&self, start: u64, end: u64) -> bool {
        !self.overlapping(start, end).is_empty()
    }

    #[cfg(test)]
    pub(crate) fn contains_all(&self, start: u64, end: u64) -> bool {
        start >= end || self.gaps(start, end).is_empty()
    }

    /// Sum of range lengths.
    pub(crate) fn total(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }

    /// First range starting at or after `from` (or containing `from`, clipped to start there).
    pub(crate) fn first_from(&self, from: u64) -> Option<(u64, u64)> {
        if let Some((&_s, &e)) = self.ranges.range(..=from).next_back() {
            if e > from {
                return Some((from, e));
            }
        }
        self.ranges.range(from..).next().map(|(&s, &e)| (s, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges_overlapping_and_adjacent_ranges() {
        let mut set = RangeSet::new();
        set.insert(10, 20);
        set.insert(30, 40);
        set.insert(20, 30);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(10, 40)]);
        set.insert(5, 12);
        set.insert(39, 50);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(5, 50)]);
        set.insert(60, 70);
        assert_eq!(set.total(), 55);
    }

    #[test]
    fn remove_splits_ranges() {
        let mut set = RangeSet::new();
        set.insert(0, 100);
        set.remove(10, 20);
        set.remove(90, 200);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(0, 10), (20, 90)]);
        assert_eq!(set.gaps(0, 100), vec![(10, 20), (90, 100)]);
        assert_eq!(set.overlapping(5, 25), vec![(5, 10), (20, 25)]);
        assert!(set.contains_all(20, 90));
        assert!(!set.contains_all(5, 15));
        assert!(!set.intersects(10, 20));
        assert_eq!(set.first_from(10), Some((20, 90)));
        assert_eq!(set.first_from(30), Some((30, 90)));
        assert_eq!(set.first_from(95), None);
    }
}
