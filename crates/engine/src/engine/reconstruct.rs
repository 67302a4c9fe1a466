//! Reconstruction: computing the true content of a disk range from the grid, from the smaller intact parity group
//! first and otherwise along the geometry's recovery plan (peel decoding), in bounded pieces whose sources are read
//! at the same time.
//!
//! **Invariants.**
//! - The caller holds at least shared locks on every disk over the range and took the delta snapshot after
//!   locking, so every parity read and every member read describe the same moment.
//! - Memory is bounded whatever the range: at most `RECONSTRUCT_PIECE_BYTES_MAX` per source and step at a time,
//!   buffers reused through [`BufferPool`].
//! - A range unrecoverable as a whole is retried stripe by stripe before it is reported unrecoverable; the error
//!   names the disk, the range and the disks that blocked it.

use std::collections::HashMap;

use super::io::ReadFail;
use super::{align_down, Shared, RECONSTRUCT_PIECE_BYTES_MAX};
use crate::buffer_pool::BufferPool;
use crate::delta::Snapshot;
use crate::{Error, Result};

impl Shared {
    /// Compute the true content of `target` over `[offset, offset+len)` from the grid (in a buffer of `pool`). The
    /// caller holds at least shared locks on every disk over the range and took `snapshot` after locking.
    pub(super) fn reconstruct(
        &self,
        target: usize,
        offset: u64,
        len: u64,
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Result<Vec<u8>> {
        let end = offset + len;
        let mut unavailable: Vec<usize> = (0..self.geometry.disks())
            .filter(|&d| {
                d == target || self.is_failed(d) || !self.defects_in(d, offset, end).is_empty()
            })
            .collect();
        for _attempt in 0..=self.geometry.disks() {
            let partial = self.geometry.partial_recovery_plan(&unavailable);
            if partial.stuck.contains(&target) {
                return Err(Error::Unrecoverable {
                    disk: target,
                    offset,
                    end,
                    stuck: partial.stuck,
                });
            }
            // Only the steps the target depends on.
            let steps = needed_steps(&partial.plan.steps, target);
            let sources: Vec<usize> = {
                let mut s: Vec<usize> = steps
                    .iter()
                    .flat_map(|st| st.sources.iter().copied())
                    .filter(|d| !unavailable.contains(d))
                    .collect();
                s.sort_unstable();
                s.dedup();
                s
            };
            // Spin the sources that hold data up together (range locks are held; power comes after them).
            let to_power: Vec<usize> = sources
                .iter()
                .copied()
                .filter(|&d| !self.is_unwritten(d, offset, end))
                .collect();
            let _guards = if to_power.len() <= self.power.budget() {
                self.power.acquire_many(&to_power).ok()
            } else {
                None
            };
            // Step by step; each step reads its sources at the same time (one thread per source) and XORs them
            // with the steps before it. Memory: one buffer per source of the step plus one per step done.
            let mut recovered: HashMap<usize, Vec<u8>> = HashMap::new();
            let mut newly_bad = Vec::new();
            for step in &steps {
                let to_read: Vec<usize> = step
                    .sources
                    .iter()
                    .copied()
                    .filter(|source| !recovered.contains_key(source))
                    .collect();
                let mut acc: Option<Vec<u8>> = None;
                let reads = self.read_true_parallel(&to_read, offset, len, snapshot, pool);
                for (&source, read) in to_read.iter().zip(reads) {
                    match read {
                        Ok(buf) => match acc.as_mut() {
                            Some(acc) => {
                                permafrost_idr::xor_into(acc, &buf);
                                pool.give(buf);
                            }
                            None => acc = Some(buf),
                        },
                        Err(fail) => {
                            if let ReadFail::Ranges(ranges) = &fail {
                                for &(s, e) in ranges {
                                    let _ = self.add_defect(source, s, e);
                                }
                            }
                            newly_bad.push(source);
                        }
                    }
                }
                if !newly_bad.is_empty() {
                    acc.into_iter().for_each(|buf| pool.give(buf));
                    break;
                }
                let mut acc = acc.unwrap_or_else(|| vec![0u8; len as usize]);
                for source in &step.sources {
                    if let Some(data) = recovered.get(source) {
                        permafrost_idr::xor_into(&mut acc, data);
                    }
                }
                recovered.insert(step.disk, acc);
            }
            let data = recovered.remove(&target);
            recovered.into_values().for_each(|buf| pool.give(buf));
            if newly_bad.is_empty() {
                return Ok(data.expect("the plan rebuilds the target"));
            }
            data.into_iter().for_each(|buf| pool.give(buf));
            unavailable.extend(newly_bad);
        }
        Err(Error::Unrecoverable {
            disk: target,
            offset,
            end,
            stuck: unavailable,
        })
    }

    /// [`Shared::reconstruct`], falling back to one stripe at a time when the range is unrecoverable as a whole
    /// (damage on other disks in different stripes). `offset` is stripe aligned; locks as for `reconstruct`.
    pub(super) fn reconstruct_piece(
        &self,
        target: usize,
        offset: u64,
        len: u64,
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Result<Vec<u8>> {
        match self.reconstruct(target, offset, len, snapshot, pool) {
            Err(Error::Unrecoverable { .. }) if len > self.stripe_bytes => {
                let end = offset + len;
                let mut out = pool.take(len as usize);
                let mut stripe = offset;
                while stripe < end {
                    let stripe_end = (stripe + self.stripe_bytes).min(end);
                    let data =
                        match self.reconstruct(target, stripe, stripe_end - stripe, snapshot, pool)
                        {
                            Ok(data) => data,
                            Err(e) => {
                                pool.give(out);
                                return Err(e);
                            }
                        };
                    out[(stripe - offset) as usize..(stripe_end - offset) as usize]
                        .copy_from_slice(&data);
                    pool.give(data);
                    stripe = stripe_end;
                }
                Ok(out)
            }
            other => other,
        }
    }

    /// The largest piece one reconstruction works on (whole stripes).
    pub(super) fn piece_bytes_max(&self) -> u64 {
        align_down(RECONSTRUCT_PIECE_BYTES_MAX, self.stripe_bytes).max(self.stripe_bytes)
    }

    /// [`Shared::reconstruct_piece`] into `out`, in pieces of at most [`RECONSTRUCT_PIECE_BYTES_MAX`] (memory stays
    /// one piece per source and step whatever the range). `offset` is stripe aligned; locks as for `reconstruct`.
    pub(super) fn reconstruct_into(
        &self,
        target: usize,
        offset: u64,
        out: &mut [u8],
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Result<()> {
        let end = offset + out.len() as u64;
        let mut at = offset;
        while at < end {
            let to = (at + self.piece_bytes_max()).min(end);
            let data = self.reconstruct_piece(target, at, to - at, snapshot, pool)?;
            out[(at - offset) as usize..(to - offset) as usize].copy_from_slice(&data);
            pool.give(data);
            at = to;
        }
        Ok(())
    }
}

/// The steps of `steps` that `target`'s step depends on, in order.
fn needed_steps(
    steps: &[permafrost_grid::RecoveryStep],
    target: usize,
) -> Vec<permafrost_grid::RecoveryStep> {
    let mut needed = vec![target];
    let mut out = Vec::new();
    for step in steps.iter().rev() {
        if needed.contains(&step.disk) {
            needed.extend(step.sources.iter().copied());
            out.push(step.clone());
        }
    }
    out.reverse();
    out
}
