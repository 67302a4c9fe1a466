//! Exact counts of fatal (unrecoverable) failure sets of a grid, judged by the grid's own
//! recoverability code.
//!
//! `permafrost_grid::Geometry::count_unrecoverable(k)` enumerates all `C(d, k)` sets; that is
//! exact but costs ~50 ns per set, too slow beyond `k = 4` on large grids. This module gets the
//! same numbers from the *minimal* fatal sets:
//!
//! 1. A minimal fatal set `M` is a stopping set: every parity group that contains a disk of `M`
//!    contains at least two (a group with a single failed disk rebuilds it, and `M` minus that
//!    disk would be fatal too). A depth-first search grows candidate sets from their smallest
//!    disk, always adding a member of a group that has exactly one, up to `max_failures` disks.
//! 2. Every candidate is judged by [`Geometry::is_recoverable`] (the engine's decoder): kept if it
//!    is unrecoverable and every subset one disk smaller is recoverable.
//! 3. A `k`-set is fatal iff it contains a minimal fatal set; each fatal `k`-set is counted once,
//!    from the first (in a fixed order) minimal fatal set it contains.
//!
//! The tests check the result against the exhaustive enumeration.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use permafrost_grid::{Geometry, GroupId, Layout};
use serde::Serialize;

/// The most failures the planner models for a grid (CTMC states `0..=max`).
pub const FAILURES_MAX: usize = 8;

/// Counts of fatal failure sets of one grid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FatalCounts {
    /// Disks of the grid (`d`).
    pub disks: usize,
    /// `unrecoverable[k]`: how many of the `C(d, k)` sets of `k` failed disks cannot be rebuilt,
    /// for `k = 0..=max_failures`.
    pub unrecoverable: Vec<u64>,
    /// Minimal fatal sets found, by size (`minimal[k]` for `k = 0..=max_failures`).
    pub minimal: Vec<u64>,
}

impl FatalCounts {
    /// The largest failure count covered.
    pub fn max_failures(&self) -> usize {
        self.unrecoverable.len() - 1
    }

    /// Hafner and Rao's `p_k` for `k = 0..max_failures`: the probability that one more failure is
    /// tolerated given `k` tolerated ones, `p_k = (s_{k+1}/C(d,k+1)) / (s_k/C(d,k))` with
    /// `s_k = C(d,k) − unrecoverable[k]`.
    pub fn tolerances(&self) -> Vec<f64> {
        let survivable = |k: usize| 1.0 - self.unrecoverable[k] as f64 / binomial(self.disks, k);
        (0..self.max_failures())
            .map(|k| {
                let (now, next) = (survivable(k), survivable(k + 1));
                if now <= 0.0 {
                    0.0
                } else {
                    (next / now).clamp(0.0, 1.0)
                }
            })
            .collect()
    }
}

/// `C(n, k)` as a float (exact for the sizes used here: below 2⁵³).
pub fn binomial(n: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    let k = k.min(n - k);
    (0..k)
        .fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
        .round()
}

/// Fatal-set counts by exhaustive enumeration ([`Geometry::count_unrecoverable`]); the reference
/// the fast method is tested against. Slow: `C(d, k)` sets per `k`.
pub fn exhaustive(geometry: &Geometry, max_failures: usize) -> FatalCounts {
    let unrecoverable: Vec<u64> = (0..=max_failures)
        .map(|k| geometry.count_unrecoverable(k))
        .collect();
    FatalCounts {
        disks: geometry.disks(),
        minimal: vec![0; max_failures + 1],
        unrecoverable,
    }
}

/// Fatal-set counts for `k = 0..=max_failures` (at most [`FAILURES_MAX`]) from the minimal fatal
/// sets, as described in the module documentation. Exact, and fast for the sizes that matter.
pub fn count(geometry: &Geometry, max_failures: usize) -> FatalCounts {
    assert!(
        max_failures <= FAILURES_MAX,
        "max_failures {max_failures} > {FAILURES_MAX}"
    );
    let disks = geometry.disks();
    let groups: Vec<GroupId> = geometry.groups().collect();
    let group_index: HashMap<GroupId, usize> =
        groups.iter().enumerate().map(|(i, g)| (*g, i)).collect();
    let members: Vec<Vec<usize>> = groups
        .iter()
        .map(|g| geometry.group_members(*g).to_vec())
        .collect();
    let disk_groups: Vec<Vec<usize>> = (0..disks)
        .map(|disk| {
            geometry
                .groups_of(disk)
                .iter()
                .map(|g| group_index[g])
                .collect()
        })
        .collect();

    // 1. Candidates: stopping sets of at most max_failures disks.
    let mut search = Search {
        members: &members,
        disk_groups: &disk_groups,
        max_failures,
        in_set: vec![false; disks],
        group_count: vec![0; members.len()],
        set: Vec::with_capacity(max_failures),
        found: HashSet::new(),
    };
    for first in 0..disks {
        search.push(first);
        search.grow(first);
        search.pop(first);
    }

    // 2. Keep the minimal fatal ones, as judged by the grid's decoder.
    let mut minimal: Vec<Vec<usize>> = search
        .found
        .into_iter()
        .filter(|set| {
            !geometry.is_recoverable(set)
                && (0..set.len()).all(|skip| {
                    let smaller: Vec<usize> = set
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != skip)
                        .map(|(_, d)| *d)
                        .collect();
                    geometry.is_recoverable(&smaller)
                })
        })
        .collect();
    minimal.sort_by(|a, b| a.len().cmp(&b.len()).then(a.cmp(b)));

    // 3. Count k-sets containing a minimal fatal set, each once (from its first such set).
    let mut containing: Vec<Vec<usize>> = vec![Vec::new(); disks];
    for (index, set) in minimal.iter().enumerate() {
        for &disk in set {
            containing[disk].push(index);
        }
    }
    let mut unrecoverable = vec![0u64; max_failures + 1];
    let mut minimal_by_size = vec![0u64; max_failures + 1];
    let mut in_set = vec![false; disks];
    for (index, set) in minimal.iter().enumerate() {
        minimal_by_size[set.len()] += 1;
        for &disk in set {
            in_set[disk] = true;
        }
        let others: Vec<usize> = (0..disks).filter(|d| !in_set[*d]).collect();
        // Counts of k failures, k from the set's size up to max_failures.
        for (k, count) in unrecoverable.iter_mut().enumerate().skip(set.len()) {
            let extra = k - set.len();
            for_each_combination(&others, extra, &mut |chosen| {
                for &disk in chosen {
                    in_set[disk] = true;
                }
                let earlier_inside = chosen.iter().any(|&disk| {
                    containing[disk]
                        .iter()
                        .take_while(|&&other| other < index)
                        .any(|&other| minimal[other].iter().all(|d| in_set[*d]))
                });
                for &disk in chosen {
                    in_set[disk] = false;
                }
                if !earlier_inside {
                    *count += 1;
                }
            });
        }
        for &disk in set {
            in_set[disk] = false;
        }
    }
    FatalCounts {
        disks,
        unrecoverable,
        minimal: minimal_by_size,
    }
}

/// Depth-first search for stopping sets (see the module documentation).
struct Search<'a> {
    members: &'a [Vec<usize>],
    disk_groups: &'a [Vec<usize>],
    max_failures: usize,
    in_set: Vec<bool>,
    group_count: Vec<u32>,
    set: Vec<usize>,
    found: HashSet<Vec<usize>>,
}

impl Search<'_> {
    fn push(&mut self, disk: usize) {
        self.in_set[disk] = true;
        self.set.push(disk);
        for &g in &self.disk_groups[disk] {
            self.group_count[g] += 1;
        }
    }

    fn pop(&mut self, disk: usize) {
        self.in_set[disk] = false;
        self.set.pop();
        for &g in &self.disk_groups[disk] {
            self.group_count[g] -= 1;
        }
    }

    /// Extend the current set (whose smallest disk is `first`) until no group holds exactly one
    /// of its disks; branch over the members of the smallest such group.
    fn grow(&mut self, first: usize) {
        let deficient = self
            .set
            .iter()
            .flat_map(|&disk| self.disk_groups[disk].iter().copied())
            .filter(|&g| self.group_count[g] == 1)
            .min_by_key(|&g| self.members[g].len());
        let Some(group) = deficient else {
            let mut set = self.set.clone();
            set.sort_unstable();
            self.found.insert(set);
            return;
        };
        if self.set.len() == self.max_failures {
            return;
        }
        for i in 0..self.members[group].len() {
            let disk = self.members[group][i];
            if disk > first && !self.in_set[disk] {
                self.push(disk);
                self.grow(first);
                self.pop(disk);
            }
        }
    }
}

/// Call `f` with every `size`-combination of `items` (in lexicographic order).
fn for_each_combination(items: &[usize], size: usize, f: &mut dyn FnMut(&[usize])) {
    fn recurse(
        items: &[usize],
        size: usize,
        start: usize,
        chosen: &mut Vec<usize>,
        f: &mut dyn FnMut(&[usize]),
    ) {
        if chosen.len() == size {
            f(chosen);
            return;
        }
        let needed = size - chosen.len();
        for i in start..=items.len().saturating_sub(needed) {
            if i >= items.len() {
                break;
            }
            chosen.push(items[i]);
            recurse(items, size, i + 1, chosen, f);
            chosen.pop();
        }
    }
    recurse(items, size, 0, &mut Vec::with_capacity(size), f);
}

/// Results of [`count`] kept for the life of the process, keyed by layout and failure limit (the
/// layout explorer asks for many layouts, the MTTDL command for the same layout twice).
pub fn cached(layout: Layout, max_failures: usize) -> FatalCounts {
    /// Bound on the cached entries; the explorer's largest sweep stays far below it.
    const ENTRIES_MAX: usize = 100_000;
    static CACHE: Mutex<Option<HashMap<(Layout, usize), FatalCounts>>> = Mutex::new(None);
    if let Some(hit) = CACHE
        .lock()
        .expect("cache lock")
        .get_or_insert_with(HashMap::new)
        .get(&(layout, max_failures))
    {
        return hit.clone();
    }
    let geometry = Geometry::new(layout).expect("layouts reaching the planner are validated");
    let counts = count(&geometry, max_failures);
    let mut cache = CACHE.lock().expect("cache lock");
    let cache = cache.get_or_insert_with(HashMap::new);
    if cache.len() < ENTRIES_MAX {
        cache.insert((layout, max_failures), counts.clone());
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_are_all_visited_once() {
        let mut seen = Vec::new();
        for_each_combination(&[1, 2, 3, 4], 2, &mut |c| seen.push(c.to_vec()));
        assert_eq!(seen, [[1, 2], [1, 3], [1, 4], [2, 3], [2, 4], [3, 4]]);
        let mut empty = 0;
        for_each_combination(&[1, 2], 0, &mut |_| empty += 1);
        assert_eq!(empty, 1);
        assert_eq!(binomial(192, 4), 54_870_480.0);
    }
}
