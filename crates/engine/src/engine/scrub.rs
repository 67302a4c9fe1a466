//! Scrub: verifying written stripes with IDR (check and repair) — a slice from the scrub cursor whenever a disk
//! spins up (once no read promise is streaming from it: a reader's GET keeps the disk's bandwidth), and
//! deliberately the ranges last known good longer ago than `scrub_overdue_after_ms`.
//!
//! **Invariants.**
//! - The scrub thread runs a slice on a disk that spun up anyway; it spins a disk up only for overdue ranges
//!   (`scrub_overdue_after_ms`), which is what that setting asks for.
//! - A written stripe that is never written on the medium, or that needed repairs and holds an all-zero block, is
//!   reported unrecoverable as a whole and becomes defect (recovered from the grid), never trusted.
//! - Findings are journaled under the range lock, re-checked after it is taken, so a scrub racing a disk
//!   replacement leaves no stale defect on the replacement.
//! - The cursor and each range's verified time are in the journal; a range's age can look older, never younger.
//! - After a test crash point (`Shared::check_crashed`), a scrub takes on no further chunk: under the range locks
//!   the crashed writer let go of lies its write in flight, which a scrub must not repair, record as verified, or
//!   mark defect (a killed process never would).

use std::sync::atomic::Ordering;

use permafrost_disk::power::PowerState;
use permafrost_idr::{IdrError, ScrubReport};

use super::io::has_zero_block;
use super::{Shared, POWER_SAVE_INTERVAL};
use crate::disks::DiskSlot;
use crate::journal::{now_ms, ScrubRow};
use crate::locks::RangeLock;
use crate::{Error, Result};

impl Shared {
    pub(super) fn scrub_range(&self, disk: usize, start: u64, end: u64) -> Result<ScrubReport> {
        let mut total = ScrubReport::default();
        if self.is_failed(disk) {
            return Ok(total);
        }
        let chunk = self.config.read().recovery_chunk_bytes_max;
        for (s, e) in self.written_parts(disk, start, end) {
            let (s, e) = self.stripe_range(s, e);
            let mut at = s;
            while at < e {
                let to = (at + chunk).min(e);
                let _lock = self.lock(vec![RangeLock::shared(disk, at, to)]);
                self.check_crashed()?;
                // Everything under the lock: the disk may have failed or been replaced (a new slot, a new written
                // map) since the ranges were listed, and what this finds must not land on a replacement.
                if self.is_failed(disk) {
                    return Ok(total);
                }
                let slot = self.slot(disk);
                for (ps, pe) in self.written_parts(disk, at, to) {
                    let (ps, pe) = self.stripe_range(ps, pe);
                    let report = match self.scrub_stripes(&slot, ps, pe) {
                        Ok(report) => report,
                        Err(e) => {
                            self.note_error(disk, &e);
                            if self.is_failed(disk) {
                                return Err(Error::DiskFailed {
                                    disk,
                                    message: format!("failed during the scrub: {e}"),
                                });
                            }
                            return Err(Error::Idr(e));
                        }
                    };
                    self.counters[disk]
                        .logical_read
                        .fetch_add(report.bytes_verified, Ordering::Relaxed);
                    total.bytes_verified += report.bytes_verified;
                    total.stripes_never_written += report.stripes_never_written;
                    total.blocks_repaired += report.blocks_repaired;
                    total.check_blocks_repaired += report.check_blocks_repaired;
                    // Verified now; what IDR could not repair becomes defect and is rewritten by recovery.
                    self.record_verified(disk, ps, pe)?;
                    for &(o, l) in &report.unrecoverable {
                        self.add_defect(disk, o, o + l)?;
                    }
                    total.unrecoverable.extend(report.unrecoverable);
                }
                at = to;
            }
        }
        Ok(total)
    }

    /// `IdrDisk::scrub` of `[at, to)` (written stripes), one stripe at a time so that damage IDR accepts is found:
    /// a stripe that is never written, or that needed repairs and holds an all-zero block (see
    /// `untrusted_zero_stripes`), is reported unrecoverable as a whole.
    fn scrub_stripes(
        &self,
        slot: &DiskSlot,
        at: u64,
        to: u64,
    ) -> std::result::Result<ScrubReport, IdrError> {
        let mut total = ScrubReport::default();
        let mut buf = vec![0u8; self.stripe_bytes as usize];
        let mut stripe = at;
        while stripe < to {
            let report = slot.idr.scrub(stripe, self.stripe_bytes)?;
            total.bytes_verified += report.bytes_verified;
            total.stripes_never_written += report.stripes_never_written;
            total.blocks_repaired += report.blocks_repaired;
            total.check_blocks_repaired += report.check_blocks_repaired;
            let suspect = report.stripes_never_written > 0
                || !report.unrecoverable.is_empty()
                || report.check_blocks_repaired > 0;
            let untrusted = suspect
                && match slot.idr.read(stripe, &mut buf) {
                    Ok(_) | Err(IdrError::Unrecoverable { .. }) => {
                        report.stripes_never_written > 0 || has_zero_block(&buf)
                    }
                    Err(e) => return Err(e),
                };
            if untrusted {
                total.unrecoverable.push((stripe, self.stripe_bytes));
            } else {
                total.unrecoverable.extend(report.unrecoverable);
            }
            stripe += self.stripe_bytes;
        }
        Ok(total)
    }

    /// The scrub thread: a slice of each disk that spins up (from its cursor), and, when there is none to do and
    /// `scrub_overdue_after_ms` is set, the overdue ranges a chunk at a time, oldest first. Also saves the power
    /// counters now and then.
    pub(super) fn scrub_loop(&self) {
        let mut power_saved = std::time::Instant::now();
        while !self.stopped() {
            if power_saved.elapsed() >= POWER_SAVE_INTERVAL {
                if let Err(e) = self.save_power_stats() {
                    tracing::warn!("cannot save the power counters: {e}");
                }
                power_saved = std::time::Instant::now();
            }
            let paused = self.paused.load(Ordering::SeqCst);
            let next = if paused {
                None
            } else {
                self.scrub_queue.lock().pop_front()
            };
            let Some(disk) = next else {
                if paused || !self.scrub_overdue_step() {
                    self.sleep_until_woken(200);
                }
                continue;
            };
            // Not while a reader streams from the disk (the slice would take the disk's bandwidth from it): the
            // slice waits until the last read promise on it is dropped, while the disk is still up.
            if self.readers[disk].load(Ordering::SeqCst) > 0 {
                {
                    let mut queue = self.scrub_queue.lock();
                    if !queue.contains(&disk) {
                        queue.push_back(disk);
                    }
                }
                self.sleep_until_woken(200);
                continue;
            }
            // Only while the disk is up anyway: never spin a disk up just for this slice.
            if !matches!(
                self.power.state(disk),
                PowerState::Idle | PowerState::Active
            ) || self.is_failed(disk)
            {
                continue;
            }
            let slice = self.config.read().scrub_slice_bytes;
            let row = self.maps.lock().scrub[disk];
            let from = row.cursor.min(self.logical_bytes);
            let to = (from + slice).min(self.logical_bytes);
            if let Err(e) = self.scrub_range(disk, from, to) {
                tracing::warn!("scrub of disk {disk} failed: {e}");
                continue;
            }
            let new_row = if to >= self.logical_bytes {
                ScrubRow {
                    cursor: 0,
                    last_pass_ms: now_ms(),
                }
            } else {
                ScrubRow { cursor: to, ..row }
            };
            if let Err(e) = self.set_scrub_row(disk, new_row) {
                tracing::warn!("cannot record scrub progress of disk {disk}: {e}");
            }
        }
    }

    /// One step of the scheduled deliberate scrub: the oldest overdue range of a live disk, at most one recovery
    /// chunk of it. Returns whether it scrubbed something.
    fn scrub_overdue_step(&self) -> bool {
        let (after_ms, chunk) = {
            let config = self.config.read();
            (
                config.scrub_overdue_after_ms,
                config.recovery_chunk_bytes_max,
            )
        };
        if after_ms == 0 {
            return false;
        }
        let cutoff = now_ms().saturating_sub(after_ms);
        let Some((disk, start, end, _)) = self
            .overdue_ranges(cutoff)
            .into_iter()
            .min_by_key(|range| range.3)
        else {
            return false;
        };
        match self.scrub_range(disk, start, end.min(start + chunk)) {
            Ok(_) => true,
            Err(e) => {
                if !self.stopped() {
                    tracing::warn!("scheduled scrub of disk {disk} at {start} failed: {e}");
                }
                false
            }
        }
    }
}
