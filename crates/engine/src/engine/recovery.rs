//! Recovery of defect ranges: the background task, `recover_defects` and a rebuild's run, one recovery chunk (at
//! most `recovery_chunk_bytes_max`) at a time, reconstructing pieces while the piece before is written.
//!
//! **Invariants.**
//! - Under a chunk's locks only what is still defect is recovered: two recoveries of the same range (background,
//!   rebuild, a writer needing it) never both do it.
//! - A defect is removed from the journal only after its recovered data is synced, in the same transaction that
//!   marks it written and known good as of now.
//! - One run per disk at a time (`recovery_mutexes`); the background task skips a disk whose run is in progress.
//! - A piece that cannot be recovered now stays defect and the run goes on; only a failed target or a journal error
//!   ends it.
//! - After a test crash point (`Shared::check_crashed`), a recovery takes on no further chunk: the crashed writer
//!   let go of its range locks with its row open, and a range reconstructed from disks in the middle of its write
//!   is not the range's content (a killed process never recovers anything).

use permafrost_disk::power::WakeContext;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use permafrost_idr::IdrError;

use super::{RecoveryReport, Shared};
use crate::buffer_pool::BufferPool;
use crate::delta::Snapshot;
use crate::journal::{now_ms, RangeTable};
use crate::rangeset::RangeSet;
use crate::{Error, Result};

impl Shared {
    /// Recover the defect parts of `[start, end)` of `disk` from the grid and write them back, one recovery chunk
    /// at a time, adding the bytes recovered to `recovered` (also when it fails part way). Under each chunk's locks
    /// only what is still defect is recovered: a concurrent recovery or writer may have done the rest, and nothing
    /// is recovered twice.
    pub(super) fn recover_range(
        &self,
        disk: usize,
        start: u64,
        end: u64,
        recovered: &mut u64,
    ) -> Result<()> {
        let (start, end) = self.stripe_range(start, end);
        let chunk = self.config.read().recovery_chunk_bytes_max;
        let mut at = start;
        let mut unrecoverable = None;
        while at < end {
            if self.stopped() {
                return Err(Error::Closed);
            }
            let to = (at + chunk).min(end);
            let _lock = self.lock_all(disk, true, at, to);
            self.check_crashed()?;
            if self.is_failed(disk) {
                return Err(Error::DiskFailed {
                    disk,
                    message: "cannot write recovered data to a failed disk".into(),
                });
            }
            let snapshot = self.deltas.snapshot(self.geometry.parity_disks());
            for (s, e) in self.defects_in(disk, at, to) {
                *recovered += self.recover_locked(disk, s, e, &snapshot, &mut unrecoverable)?;
            }
            at = to;
        }
        match unrecoverable {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Recover `[start, end)` of `disk` (defect, stripe aligned, inside one locked recovery chunk). Pieces are
    /// reconstructed while a writer thread writes the piece before (so reads, XOR and the write overlap); the disk
    /// is synced once, and then one journal transaction marks the recovered runs written and removes them from the
    /// defects: a defect is never removed before its data is durable. Memory: the pieces of one reconstruction
    /// (one per source and step) plus the one piece being written. Returns the bytes recovered; a piece that
    /// cannot be reconstructed now stays defect, and its error is left in `unrecoverable` (if none is yet).
    fn recover_locked(
        &self,
        disk: usize,
        start: u64,
        end: u64,
        snapshot: &Snapshot,
        unrecoverable: &mut Option<Error>,
    ) -> Result<u64> {
        let slot = self.slot(disk);
        let counters = &self.counters[disk];
        let mut reconstruct_error = None;
        let pool = &BufferPool::default();
        let (sender, receiver) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>)>(0);
        let wake = WakeContext::current(); // the rebuild's reason, for the writer's spin-ups
        let written = std::thread::scope(|scope| {
            let writer = scope.spawn(move || -> std::result::Result<RangeSet, IdrError> {
                let _wake = WakeContext::enter_opt(wake);
                let mut runs = RangeSet::new();
                for (offset, data) in receiver {
                    slot.idr.write(offset, &data)?;
                    counters
                        .logical_written
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    runs.insert(offset, offset + data.len() as u64);
                    pool.give(data);
                }
                slot.idr.sync()?;
                Ok(runs)
            });
            let mut piece = start;
            // On close, stop after the piece in flight: what is written so far is synced and journaled below.
            while piece < end && !self.stopped() {
                let piece_end = (piece + self.piece_bytes_max()).min(end);
                let mut data =
                    match self.recovery_piece(disk, piece, piece_end - piece, snapshot, pool) {
                        Ok(data) => data,
                        Err(e @ Error::Unrecoverable { .. }) => {
                            // Recover what can be; this piece stays defect.
                            unrecoverable.get_or_insert(e);
                            piece = piece_end;
                            continue;
                        }
                        Err(e) => {
                            reconstruct_error = Some(e);
                            break;
                        }
                    };
                // On-disk content = true content XOR what is still pending for this disk.
                snapshot.overlay(disk, piece, &mut data);
                if sender.send((piece, data)).is_err() {
                    break; // the writer failed: its error is returned below
                }
                piece = piece_end;
            }
            drop(sender);
            writer.join().expect("recovery writer thread panicked")
        });
        let written = match written {
            Ok(runs) => runs,
            Err(e) => {
                self.note_error(disk, &e);
                return Err(Error::Idr(e));
            }
        };
        if let Some(e) = reconstruct_error {
            return Err(e);
        }
        let runs: Vec<(u64, u64)> = written.iter().collect();
        self.journal_recovered(disk, &runs)?;
        self.bytes_recovered[disk].fetch_add(written.total(), Ordering::SeqCst);
        Ok(written.total())
    }

    /// `runs` of `disk` were recovered, written and synced: mark them written and known good as of now, and remove
    /// them from the defects, in one journal transaction.
    fn journal_recovered(&self, disk: usize, runs: &[(u64, u64)]) -> Result<()> {
        let (Some(&(lo, _)), Some(&(_, hi))) = (runs.first(), runs.last()) else {
            return Ok(());
        };
        let unit = self.stripe_bytes;
        let mut maps = self.maps.lock();
        let mut written = maps.written[disk].clone();
        let mut defects = maps.defects[disk].clone();
        let mut ages = maps.ages[disk].clone();
        let now = now_ms();
        let (mut ages_lo, mut ages_hi) = (u64::MAX, 0);
        for &(s, e) in runs {
            written.insert(s / unit, e.div_ceil(unit));
            defects.remove(s, e);
            let (span_lo, span_hi) = ages.record(s, e, now);
            ages_lo = ages_lo.min(span_lo);
            ages_hi = ages_hi.max(span_hi);
        }
        self.journal.batch(|b| {
            b.sync_ranges(
                RangeTable::Written,
                disk,
                &written,
                lo / unit,
                hi.div_ceil(unit),
            )?;
            b.sync_ranges(RangeTable::Defects, disk, &defects, lo, hi)?;
            b.sync_ages(
                disk,
                &ages.runs_starting_in(ages_lo, ages_hi),
                ages_lo,
                ages_hi,
            )
        })?;
        maps.written[disk] = written;
        maps.defects[disk] = defects;
        maps.ages[disk] = ages;
        Ok(())
    }

    /// Recover every defect range of `disk`. One run per disk at a time: it waits for a recovery of the disk in
    /// progress (the background task's chunk, another run), and the background task leaves the disk alone until it
    /// ends. What others recovered of the disk meanwhile is reported apart (`bytes_recovered_concurrently`).
    pub(super) fn recover_disk(
        &self,
        disk: usize,
        progress: &dyn Fn(u64, u64),
    ) -> Result<RecoveryReport> {
        let recovered_before = self.bytes_recovered[disk].load(Ordering::SeqCst);
        let _one_run = self.recovery_mutexes[disk].lock();
        let total = self.maps.lock().defects[disk].total();
        let mut report = RecoveryReport::default();
        let mut cursor = 0;
        progress(0, total);
        loop {
            let next = self.maps.lock().defects[disk].first_from(cursor);
            let Some((s, e)) = next else { break };
            let chunk = self.config.read().recovery_chunk_bytes_max;
            let e = e.min(s + chunk);
            match self.recover_range(disk, s, e, &mut report.bytes_recovered) {
                Ok(()) => {}
                // Not from the grid now, or not onto this disk (a write error): the range stays defect and the
                // other ranges are still worth recovering. Only a failed disk or the journal stops the run.
                Err(Error::Unrecoverable { .. }) | Err(Error::Idr(_)) if !self.is_failed(disk) => {
                    report.unrecoverable.push((disk, s, e - s))
                }
                Err(err) => return Err(err),
            }
            cursor = e;
            progress(report.bytes_recovered.min(total), total);
        }
        let recovered_by_all = self.bytes_recovered[disk].load(Ordering::SeqCst) - recovered_before;
        report.bytes_recovered_concurrently = recovered_by_all - report.bytes_recovered;
        Ok(report)
    }

    pub(super) fn recovery_loop(&self) {
        // Ranges that failed recovery are retried after a pause, not in a hot loop.
        let mut retry_after: HashMap<(usize, u64), std::time::Instant> = HashMap::new();
        while !self.stopped() {
            let mut work = None;
            if !self.paused.load(Ordering::SeqCst) {
                let maps = self.maps.lock();
                'find: for disk in 0..self.geometry.disks() {
                    // A rebuild (or `recover_defects`) of the disk is running: it recovers the disk itself.
                    if maps.failed[disk] || self.recovery_mutexes[disk].is_locked() {
                        continue;
                    }
                    for (s, e) in maps.defects[disk].iter() {
                        if retry_after
                            .get(&(disk, s))
                            .is_none_or(|t| *t <= std::time::Instant::now())
                        {
                            work = Some((disk, s, e));
                            break 'find;
                        }
                    }
                }
            }
            let Some((disk, s, e)) = work else {
                self.sleep_until_woken(200);
                continue;
            };
            let Some(_one_chunk) = self.recovery_mutexes[disk].try_lock() else {
                continue; // a run started since the search
            };
            let chunk = self.config.read().recovery_chunk_bytes_max;
            let e = e.min(s + chunk);
            if let Err(err) = self.recover_range(disk, s, e, &mut 0) {
                if !self.stopped() {
                    tracing::warn!("background recovery of disk {disk} {s}..{e} failed: {err}");
                }
                retry_after.insert(
                    (disk, s),
                    std::time::Instant::now() + Duration::from_secs(5),
                );
            }
        }
    }
}
