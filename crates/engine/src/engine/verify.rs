//! Verify-parity: recompute every parity disk from its members over the written ranges (and the ranges of pending
//! deltas) and report each range where the parity is not the XOR of its group.
//!
//! **Invariants.**
//! - Read-only: it reports mismatches, it repairs nothing.
//! - Each group is compared under shared locks on all its disks with one delta snapshot, so a write in flight is
//!   never reported as a mismatch.
//! - Unreadable members are reconstructed after the group's power guards are dropped (a reconstruction acquires its
//!   own set: guards are never acquired while holding guards).

use std::collections::HashMap;

use super::{ParityMismatch, ParityReport, Shared};
use crate::buffer_pool::BufferPool;
use crate::locks::RangeLock;
use crate::rangeset::RangeSet;
use crate::Result;

impl Shared {
    pub(super) fn verify_parity(&self, progress: &dyn Fn(u64, u64)) -> Result<ParityReport> {
        let mut report = ParityReport::default();
        let groups: Vec<_> = self.geometry.groups().collect();
        // Ranges to check per group: where any member (parity included) was ever written.
        let mut work: Vec<(permafrost_grid::GroupId, RangeSet)> = Vec::new();
        let pending: HashMap<usize, RangeSet> = self
            .geometry
            .parity_disks()
            .iter()
            .map(|&p| (p, self.pending_delta_units(p)))
            .collect();
        {
            let maps = self.maps.lock();
            for &g in &groups {
                let members = self.geometry.group_members(g);
                if members.iter().any(|&m| maps.failed[m]) {
                    report.groups_skipped += 1;
                    continue;
                }
                // Where any member (parity included) was written or has pending deltas.
                let mut units = RangeSet::new();
                for &m in members {
                    let ranges = maps.written[m]
                        .iter()
                        .chain(pending.get(&m).into_iter().flat_map(|p| p.iter()));
                    for (s, e) in ranges {
                        units.insert(s, e);
                    }
                }
                work.push((g, units));
            }
        }
        let total: u64 = work
            .iter()
            .map(|(_, u)| u.total() * self.stripe_bytes)
            .sum();
        let chunk = self.chunk_bytes_max();
        let mut done = 0;
        progress(0, total);
        for (group, units) in work {
            let members = self.geometry.group_members(group);
            let parity = self.geometry.group_parity(group);
            for (us, ue) in units.iter() {
                let (s, e) = (
                    us * self.stripe_bytes,
                    (ue * self.stripe_bytes).min(self.logical_bytes),
                );
                let mut at = s;
                while at < e {
                    let to = (at + chunk).min(e);
                    let len = (to - at) as usize;
                    let _lock = self.lock(
                        members
                            .iter()
                            .map(|&m| RangeLock::shared(m, at, to))
                            .collect(),
                    );
                    let snapshot = self.deltas.snapshot(self.geometry.parity_disks());
                    let mut acc = vec![0u8; len];
                    let mut buf = vec![0u8; len];
                    let mut expected = vec![0u8; len];
                    let mut unreadable = Vec::new();
                    {
                        let _guards = self.power.acquire_many(members).ok();
                        for &m in members {
                            let target = if m == parity { &mut expected } else { &mut buf };
                            if self.read_true(m, at, target, &snapshot).is_err() {
                                unreadable.push(m);
                            } else if m != parity {
                                permafrost_idr::xor_into(&mut acc, &buf);
                            }
                        }
                    }
                    // Unreadable members are reconstructed through the grid, with the group's power guards
                    // dropped: the reconstruction acquires its own set (never acquire while holding guards).
                    let pool = BufferPool::default();
                    for m in unreadable {
                        let target = if m == parity { &mut expected } else { &mut buf };
                        self.reconstruct_into(m, at, target, &snapshot, &pool)?;
                        if m != parity {
                            permafrost_idr::xor_into(&mut acc, &buf);
                        }
                    }
                    let mut block = 0;
                    while block < len {
                        let b_end = (block + 4096).min(len);
                        if acc[block..b_end] != expected[block..b_end] {
                            let off = at + block as u64;
                            match report.mismatches.last_mut() {
                                Some(last)
                                    if last.parity_disk == parity
                                        && last.offset + last.len == off =>
                                {
                                    last.len += (b_end - block) as u64
                                }
                                _ => report.mismatches.push(ParityMismatch {
                                    parity_disk: parity,
                                    group: match group {
                                        permafrost_grid::GroupId::Horizontal(h) => {
                                            format!("hPG {h}")
                                        }
                                        permafrost_grid::GroupId::Vertical(c) => format!("vPG {c}"),
                                    },
                                    offset: off,
                                    len: (b_end - block) as u64,
                                }),
                            }
                        }
                        block = b_end;
                    }
                    report.bytes_checked += to - at;
                    done += to - at;
                    progress(done, total);
                    at = to;
                }
            }
        }
        Ok(report)
    }
}
