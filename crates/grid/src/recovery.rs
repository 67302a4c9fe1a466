//! Recoverability of failed-disk sets: peel decoding, recovery plans, and
//! exhaustive counting of fatal sets for the reliability planner.
//!
//! Every group is a single XOR parity group, so a failed disk can be rebuilt
//! exactly when it is the only failure left in one of its groups. Rebuilding it
//! may free another group, and so on (*peel decoding*). The disks that remain
//! are the largest *stopping set* inside the failed set (every one of them has a
//! second failure in each of its groups); this residue does not depend on the
//! order of the steps, so the fast check and the ordered plan always agree.

use std::fmt;

use crate::geometry::{Geometry, GroupId, NO_GROUP};
use crate::layout::Layout;

/// One step of a recovery: rebuild `disk` as the XOR of `sources`, which are the
/// other members of `group` (all alive or rebuilt by an earlier step).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryStep {
    /// The disk to rebuild.
    pub disk: usize,
    /// The parity group it is rebuilt from.
    pub group: GroupId,
    /// The other members of `group`, in disk order.
    pub sources: Vec<usize>,
}

/// Ordered steps that rebuild failed disks; execute them in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// The steps, in execution order.
    pub steps: Vec<RecoveryStep>,
}

/// The result of [`Geometry::partial_recovery_plan`]: what can be rebuilt, and what cannot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartialRecovery {
    /// Steps that rebuild every recoverable failed disk.
    pub plan: RecoveryPlan,
    /// Failed disks that cannot be rebuilt (sorted); empty when all can.
    pub stuck: Vec<usize>,
}

/// Some failed disks cannot be rebuilt: each of them shares every one of its
/// parity groups with another unrecoverable failed disk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Unrecoverable {
    /// The disks that cannot be rebuilt (sorted).
    pub stuck: Vec<usize>,
}

impl fmt::Display for Unrecoverable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "disks {:?} cannot be rebuilt: each has another unrecoverable failure in every one of its parity groups",
            self.stuck
        )
    }
}

/// Upper bound of dense group numbers: `hpgs + x = x·(y−1)/(hn+1) + x ≤ x·y`.
const MAX_GROUPS: usize = Layout::MAX_DISKS;
const SET_WORDS: usize = Layout::MAX_DISKS.div_ceil(64);

/// Scratch space of the peel decoder: fixed size, reusable, no allocation per
/// call. Only the entries of groups touched by a failed set are reset per call.
struct Peeler {
    count: [u16; MAX_GROUPS],
    xor: [u16; MAX_GROUPS],
    /// Groups with exactly one failure left; a group is pushed at most twice
    /// (when first counted and when its count drops to 1).
    ready: [u16; 2 * MAX_GROUPS],
    /// The distinct disks of the set being checked.
    distinct: [u16; Layout::MAX_DISKS],
}

thread_local! {
    /// One peeler per thread, so [`Geometry::is_recoverable`] neither allocates
    /// nor clears kilobytes of scratch per call.
    static PEELER: std::cell::RefCell<Box<Peeler>> = std::cell::RefCell::new(Peeler::new());
}

impl Peeler {
    fn new() -> Box<Peeler> {
        Box::new(Peeler {
            count: [0; MAX_GROUPS],
            xor: [0; MAX_GROUPS],
            ready: [0; 2 * MAX_GROUPS],
            distinct: [0; Layout::MAX_DISKS],
        })
    }

    /// Peel `failed` (distinct disks) and return how many stay unrecoverable.
    #[inline]
    fn stuck(&mut self, disk_groups: &[[u16; 2]], failed: &[u16]) -> usize {
        peel(
            &mut self.count,
            &mut self.xor,
            &mut self.ready,
            disk_groups,
            failed,
        )
    }
}

/// The peel decoder on [`Peeler`]'s arrays: count the failures and the XOR of
/// their disk numbers per group; a group with one failure left names that disk.
#[inline]
fn peel(
    count: &mut [u16; MAX_GROUPS],
    xor: &mut [u16; MAX_GROUPS],
    ready: &mut [u16; 2 * MAX_GROUPS],
    disk_groups: &[[u16; 2]],
    failed: &[u16],
) -> usize {
    for &disk in failed {
        for group in disk_groups[disk as usize] {
            if group != NO_GROUP {
                count[group as usize] = 0;
                xor[group as usize] = 0;
            }
        }
    }
    for &disk in failed {
        for group in disk_groups[disk as usize] {
            if group != NO_GROUP {
                count[group as usize] += 1;
                xor[group as usize] ^= disk;
            }
        }
    }
    let mut top = 0;
    for &disk in failed {
        for group in disk_groups[disk as usize] {
            if group != NO_GROUP && count[group as usize] == 1 {
                ready[top] = group;
                top += 1;
            }
        }
    }
    let mut left = failed.len();
    while top > 0 {
        top -= 1;
        let group = ready[top] as usize;
        if count[group] != 1 {
            continue; // already emptied by rebuilding its last failure through another group
        }
        let disk = xor[group];
        left -= 1;
        for other in disk_groups[disk as usize] {
            if other != NO_GROUP {
                let other = other as usize;
                count[other] -= 1;
                xor[other] ^= disk;
                if count[other] == 1 {
                    ready[top] = other as u16;
                    top += 1;
                }
            }
        }
    }
    left
}

impl Geometry {
    /// Whether every disk of `failed` can be rebuilt (duplicates are ignored).
    /// Allocation-free and O(|failed|): meant to be called for millions of sets.
    /// Panics if a disk number is out of range (a caller bug).
    pub fn is_recoverable(&self, failed: &[usize]) -> bool {
        PEELER.with_borrow_mut(|peeler| {
            let mut seen = [0u64; SET_WORDS];
            let mut len = 0;
            for &disk in failed {
                assert!(
                    disk < self.disks(),
                    "disk {disk} out of range (grid of {} disks)",
                    self.disks()
                );
                let (word, bit) = (disk / 64, 1u64 << (disk % 64));
                if seen[word] & bit == 0 {
                    seen[word] |= bit;
                    peeler.distinct[len] = disk as u16;
                    len += 1;
                }
            }
            let Peeler {
                count,
                xor,
                ready,
                distinct,
            } = &mut **peeler;
            peel(count, xor, ready, &self.disk_groups, &distinct[..len]) == 0
        })
    }

    /// An ordered plan that rebuilds every disk of `failed`, or the disks that
    /// cannot be rebuilt. See [`Geometry::partial_recovery_plan`] for the order.
    pub fn recovery_plan(&self, failed: &[usize]) -> Result<RecoveryPlan, Unrecoverable> {
        let PartialRecovery { plan, stuck } = self.partial_recovery_plan(failed);
        if stuck.is_empty() {
            Ok(plan)
        } else {
            Err(Unrecoverable { stuck })
        }
    }

    /// Rebuild as much of `failed` as possible (duplicates are ignored).
    ///
    /// Each step takes, among the failed disks that are the only failure left in
    /// one of their groups, the one with the smallest such group (fewest disks
    /// to spin up and read, as the thesis prescribes), breaking ties by lower
    /// disk number and then horizontal before vertical group; that disk then
    /// counts as rebuilt. The disks never reached are returned as `stuck`.
    /// Panics if a disk number is out of range (a caller bug).
    pub fn partial_recovery_plan(&self, failed: &[usize]) -> PartialRecovery {
        let mut lost = vec![false; self.disks()];
        for &disk in failed {
            assert!(
                disk < self.disks(),
                "disk {disk} out of range (grid of {} disks)",
                self.disks()
            );
            lost[disk] = true;
        }
        let mut pending: Vec<usize> = (0..self.disks()).filter(|&disk| lost[disk]).collect();
        let mut steps = Vec::with_capacity(pending.len());
        loop {
            let mut best: Option<(usize, usize, GroupId)> = None;
            for &disk in &pending {
                for group in self.groups_of(disk) {
                    let members = self.group_members(group);
                    if members
                        .iter()
                        .all(|&member| member == disk || !lost[member])
                    {
                        let key = (members.len(), disk, group);
                        if best.is_none_or(|best| key < best) {
                            best = Some(key);
                        }
                    }
                }
            }
            let Some((_, disk, group)) = best else { break };
            let sources = self
                .group_members(group)
                .iter()
                .copied()
                .filter(|&member| member != disk)
                .collect();
            steps.push(RecoveryStep {
                disk,
                group,
                sources,
            });
            lost[disk] = false;
            pending.retain(|&other| other != disk);
        }
        PartialRecovery {
            plan: RecoveryPlan { steps },
            stuck: pending,
        }
    }

    /// Number of `k`-disk failure sets that are not fully recoverable, counted
    /// exhaustively over all `C(d, k)` sets (on all available cores). This is
    /// `C(d, k) − s_k` of the thesis's reliability model (§4.4.1).
    ///
    /// Cost: about 50 ns per set per core, so `k = 4` is fine for 192 disks
    /// (55 M sets) and `k = 5` for up to ~100 disks (75 M sets); larger `k` on
    /// large grids takes hours. `k = 0` and `k > d` give 0.
    pub fn count_unrecoverable(&self, k: usize) -> u64 {
        let disks = self.disks();
        if k == 0 || k > disks {
            return 0;
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(disks);
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|worker| {
                    scope.spawn(move || self.count_unrecoverable_from(k, worker, threads))
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().expect("counting thread panicked"))
                .sum()
        })
    }

    /// The part of [`Geometry::count_unrecoverable`] whose smallest disk is
    /// `worker`, `worker + stride`, … (interleaved so threads get similar work).
    fn count_unrecoverable_from(&self, k: usize, worker: usize, stride: usize) -> u64 {
        let disks = self.disks();
        let mut peeler = Peeler::new();
        let mut set = vec![0u16; k];
        let mut fatal = 0u64;
        for first in (worker..=disks - k).step_by(stride) {
            // The rest of the set: the lexicographically first (k−1)-combination above `first`.
            for (i, slot) in set.iter_mut().enumerate() {
                *slot = (first + i) as u16;
            }
            loop {
                if peeler.stuck(&self.disk_groups, &set) != 0 {
                    fatal += 1;
                }
                // Advance positions 1..k to the next combination, or stop.
                let Some(i) = (1..k).rev().find(|&i| (set[i] as usize) < disks - (k - i)) else {
                    break;
                };
                set[i] += 1;
                for j in i + 1..k {
                    set[j] = set[j - 1] + 1;
                }
            }
        }
        fatal
    }

    /// The thesis's `b` (§4.4.1): the number of minimal fatal patterns of four
    /// disks, computed from the structure instead of by enumeration.
    ///
    /// A fatal set needs at least two failures in every group it touches, and a
    /// horizontal group never has two disks in one column, so a fatal 4-set is
    /// either two hPGs with failures in the same two columns (EP1), or two
    /// failed `vP`s plus two failed members of one hPG in those columns (EP2).
    /// Equals `count_unrecoverable(4)` (checked by the tests), on grown (ragged) grids too: an added disk is a
    /// member of one hPG and one column like any other data disk, so EP2 counts the pairs of each hPG's members.
    pub fn fatal_pattern_count(&self) -> u64 {
        let x = self.layout().x;
        let column_sets: Vec<Vec<bool>> = (0..self.hpgs())
            .map(|hpg| {
                let mut columns = vec![false; x];
                for &disk in self.group_members(GroupId::Horizontal(hpg)) {
                    columns[self.column(disk)] = true;
                }
                columns
            })
            .collect();
        let pairs = |n: u64| n * n.saturating_sub(1) / 2;
        let mut ep1 = 0;
        for (i, a) in column_sets.iter().enumerate() {
            for b in &column_sets[i + 1..] {
                let shared = a.iter().zip(b).filter(|(a, b)| **a && **b).count() as u64;
                ep1 += pairs(shared);
            }
        }
        let ep2 = (0..self.hpgs())
            .map(|hpg| pairs(self.group_members(GroupId::Horizontal(hpg)).len() as u64))
            .sum::<u64>();
        ep1 + ep2
    }
}
