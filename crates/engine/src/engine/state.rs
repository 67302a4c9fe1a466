//! The per-disk state kept in the journal and mirrored in memory ([`Maps`](super::Maps)): the written map, the
//! defect ranges, the age of each range (when it was last known good), the scrub cursor, failure, and the power
//! counters.
//!
//! **Invariants.**
//! - The in-memory maps change only after the journal transaction that records the change committed: a crash never
//!   leaves memory ahead of the journal, and replay starts from exactly what was acknowledged.
//! - `journal_with_written` (the write path's journal step) updates the maps once its transaction is committed and
//!   waits for durability after releasing them (group commit: `journal`): it returns only once the change is
//!   durable, and its caller holds the range locks of everything the change covers until then, so no other thread
//!   acts on a written mark that a crash could still take back. Every other change here commits and syncs under
//!   the maps lock.
//! - A range is marked written in the same transaction that records it as known good as of now (fresh encoding
//!   counts as verification); ages can look older than they are, never younger.
//! - Defects are stripe aligned and are only ever removed after the recovered data is durable (`recovery`).
//! - A disk is marked failed after a whole-disk failure or `IO_ERRORS_MAX` failed operations in a row (a successful
//!   read or write clears the run), never for scattered bad sectors, which become defects instead, and never for a
//!   full file system under a file-backed disk (`ENOSPC`: the write fails, the disk stays in service).

use std::sync::atomic::Ordering;

use permafrost_disk::power::PowerStats;
use permafrost_disk::DiskError;
use permafrost_idr::IdrError;

use super::{Maps, Shared, IO_ERRORS_MAX};
use crate::ages::RangeAges;
use crate::journal::{now_ms, RangeTable, ScrubRow};
use crate::rangeset::RangeSet;
use crate::Result;

impl Shared {
    pub(super) fn add_defect(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        let (start, end) = self.stripe_range(start, end);
        let mut maps = self.maps.lock();
        let mut set = maps.defects[disk].clone();
        set.insert(start, end);
        self.journal
            .batch(|b| b.sync_ranges(RangeTable::Defects, disk, &set, start, end))?;
        maps.defects[disk] = set;
        drop(maps);
        self.notify();
        Ok(())
    }

    pub(super) fn defects_in(&self, disk: usize, start: u64, end: u64) -> Vec<(u64, u64)> {
        self.maps.lock().defects[disk].overlapping(start, end)
    }

    /// Written map of `disk` with `[start, end)` (bytes, stripe aligned) added; the caller journals it.
    fn written_with(&self, maps: &Maps, disk: usize, start: u64, end: u64) -> RangeSet {
        let mut set = maps.written[disk].clone();
        set.insert(start / self.stripe_bytes, end.div_ceil(self.stripe_bytes));
        set
    }

    /// Run `extra` and mark `[start, end)` written on `disks` in one journal transaction.
    pub(super) fn journal_with_written(
        &self,
        disks: &[usize],
        start: u64,
        end: u64,
        extra: impl FnOnce(&crate::journal::Batch) -> rusqlite::Result<()>,
    ) -> Result<()> {
        let mut maps = self.maps.lock();
        let sets: Vec<(usize, RangeSet)> = disks
            .iter()
            .map(|&d| (d, self.written_with(&maps, d, start, end)))
            .collect();
        // What is written now is freshly encoded: known good as of now (for the overdue scrub).
        let now = now_ms();
        let ages: Vec<(usize, RangeAges, (u64, u64))> = disks
            .iter()
            .map(|&d| {
                let mut ages = maps.ages[d].clone();
                let span = ages.record(start, end, now);
                (d, ages, span)
            })
            .collect();
        let (lo, hi) = (start / self.stripe_bytes, end.div_ceil(self.stripe_bytes));
        let ((), seq) = self.journal.commit(|b| {
            extra(b)?;
            for (d, set) in &sets {
                b.sync_ranges(RangeTable::Written, *d, set, lo, hi)?;
            }
            for (d, ages, (lo, hi)) in &ages {
                b.sync_ages(*d, &ages.runs_starting_in(*lo, *hi), *lo, *hi)?;
            }
            Ok(())
        })?;
        // Committed: the next writer's rows are computed from these sets, so they follow the commit at once; the
        // sync (shared with the other chunks in flight) comes after the maps are released.
        for (d, set) in sets {
            maps.written[d] = set;
        }
        for (d, ages, _) in ages {
            maps.ages[d] = ages;
        }
        drop(maps);
        self.journal.sync_through(seq)
    }

    /// `[start, end)` of `disk` was verified now: record it for the overdue scrub.
    pub(super) fn record_verified(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        let mut maps = self.maps.lock();
        let mut ages = maps.ages[disk].clone();
        let (lo, hi) = ages.record(start, end, now_ms());
        self.journal
            .batch(|b| b.sync_ages(disk, &ages.runs_starting_in(lo, hi), lo, hi))?;
        maps.ages[disk] = ages;
        Ok(())
    }

    /// Written ranges of `disk` in bytes.
    pub(super) fn written_bytes_of(&self, maps: &Maps, disk: usize) -> Vec<(u64, u64)> {
        maps.written[disk]
            .iter()
            .map(|(s, e)| {
                (
                    s * self.stripe_bytes,
                    (e * self.stripe_bytes).min(self.logical_bytes),
                )
            })
            .collect()
    }

    /// Written ranges of live disks last known good at or before `cutoff_ms` (or never), as
    /// `(disk, start, end, verified_ms)`.
    pub(super) fn overdue_ranges(&self, cutoff_ms: u64) -> Vec<(usize, u64, u64, u64)> {
        let maps = self.maps.lock();
        let mut out = Vec::new();
        for disk in 0..self.geometry.disks() {
            if maps.failed[disk] {
                continue;
            }
            for (start, end) in self.written_bytes_of(&maps, disk) {
                out.extend(
                    maps.ages[disk]
                        .older_than(start, end, cutoff_ms)
                        .into_iter()
                        .map(|(s, e, ms)| (disk, s, e, ms)),
                );
            }
        }
        out
    }

    /// This disk's power counters: earlier processes' (journal) plus this one's.
    pub(super) fn power_stats(&self, disk: usize) -> PowerStats {
        let mut stats = self.power_base[disk];
        stats.add(&self.power.stats(disk));
        stats
    }

    /// Save every disk's power counters in the journal.
    pub(super) fn save_power_stats(&self) -> Result<()> {
        let stats: Vec<PowerStats> = (0..self.geometry.disks())
            .map(|d| self.power_stats(d))
            .collect();
        self.journal.batch(|b| {
            for (disk, stats) in stats.iter().enumerate() {
                b.set_power(disk, stats)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    pub(super) fn is_unwritten(&self, disk: usize, start: u64, end: u64) -> bool {
        !self.maps.lock().written[disk]
            .intersects(start / self.stripe_bytes, end.div_ceil(self.stripe_bytes))
    }

    /// Written parts of `[start, end)` of `disk`, in bytes.
    pub(super) fn written_parts(&self, disk: usize, start: u64, end: u64) -> Vec<(u64, u64)> {
        let unit = self.stripe_bytes;
        self.maps.lock().written[disk]
            .overlapping(start / unit, end.div_ceil(unit))
            .into_iter()
            .map(|(s, e)| ((s * unit).max(start), (e * unit).min(end)))
            .collect()
    }

    /// Stripe units covered by the pending deltas of `disk` (its true content may be non-zero there even where
    /// its written map is empty).
    pub(super) fn pending_delta_units(&self, disk: usize) -> RangeSet {
        let mut units = RangeSet::new();
        for delta in self.deltas.pending_of(disk) {
            units.insert(
                delta.offset / self.stripe_bytes,
                delta.end().div_ceil(self.stripe_bytes),
            );
        }
        units
    }

    pub(super) fn set_scrub_row(&self, disk: usize, row: ScrubRow) -> Result<()> {
        self.journal.batch(|b| b.set_scrub(disk, row))?;
        self.maps.lock().scrub[disk] = row;
        Ok(())
    }

    pub(super) fn mark_failed(&self, disk: usize, reason: &str) -> Result<()> {
        {
            let mut maps = self.maps.lock();
            if maps.failed[disk] {
                return Ok(());
            }
            self.journal.batch(|b| b.set_failed(disk, reason))?;
            maps.failed[disk] = true;
        }
        tracing::warn!("disk {disk} marked failed: {reason}");
        // A failed parity disk will be recomputed from its members: it no longer owes any delta. No drain mutex
        // here: this runs inside a drain of `disk` (an I/O error there) and inside reconstructions that hold
        // range locks a drain waits for; completing a delta is idempotent, so a concurrent drain is harmless.
        for delta in self.deltas.pending_of(disk) {
            self.complete_delta(&delta, disk)?;
        }
        self.notify();
        Ok(())
    }

    /// Note an I/O error of `disk`; a whole-disk failure or repeated errors mark it failed.
    pub(super) fn note_error(&self, disk: usize, error: &IdrError) {
        let fatal = match error {
            IdrError::Disk(DiskError::Failed { .. }) => true,
            // A full file system under a file-backed disk: the write failed (its range is handled as any failed
            // write), but the disk is not failing and must not be marked failed for it.
            IdrError::Disk(e) if e.is_out_of_space() => false,
            IdrError::Disk(_) => {
                self.counters[disk]
                    .errors_in_a_row
                    .fetch_add(1, Ordering::SeqCst)
                    + 1
                    >= IO_ERRORS_MAX
            }
            _ => false,
        };
        if fatal {
            if let Err(e) = self.mark_failed(disk, &error.to_string()) {
                tracing::error!("cannot mark disk {disk} failed: {e}");
            }
        }
    }
}
