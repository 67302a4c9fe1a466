//! Delayed write mode and the Cache2Disk drain: the data disk is written at once, the parity delta `old ⊕ new`
//! waits in the non-volatile delta cache, and one drain thread per parity disk merges its pending deltas and applies
//! them in one read-modify-write per region when the disk is up anyway.
//!
//! **Invariants.**
//! - The delta file is fsynced before the data disk's start mark: when `commit()` returns, data and delta are
//!   durable (parity pending); `wait_persisted` waits for the parity.
//! - A parity disk's true content is its on-disk content XOR its pending deltas; each delta is in a snapshot for
//!   all three of its parities or for none.
//! - A drain re-checks under its exclusive range lock which deltas the disk still owes, so a delta completed
//!   meanwhile (disk failed, replaced and recomputed) is never applied twice.
//! - A txn's row and delta file are deleted only when all three parities applied (or no longer owe) the delta.
//! - Once a test crash point fired, a drain takes on no further region (`Shared::check_crashed` after its lock).
//! - A full delta cache never blocks a writer forever (the drains make room; paused drains are run by the
//!   writer itself, which holds no lock then).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use permafrost_disk::power::PowerState;

use super::write::slot_of;
use super::write::ChunkWrite;
use super::{align_down, CrashPoint, Shared, POLL_MS};
use crate::delta::Delta;
use crate::journal::{now_ms, Mark, Slot, PARITY_SLOTS};
use crate::locks::RangeLock;
use crate::{Error, Result};

impl Shared {
    pub(super) fn write_delayed(
        &self,
        mut w: ChunkWrite<'_>,
        reservation: Option<crate::delta::Reservation<'_>>,
    ) -> Result<()> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        let disk = w.row.disks[0];
        let txn = w.row.txn_id;
        self.deltas
            .write_file(txn, w.delta_offset, &w.delta)
            .map_err(|e| Error::Io(format!("cannot write the delta file of txn {txn}: {e}")))?;
        w.row.starts[0] = now_ms();
        self.journal_with_written(&[disk], start, end, |b| b.insert_promise(&w.row))?;
        if let Err(e) = self.write_data(&w) {
            if !matches!(e, Error::SimulatedCrash(_)) {
                self.settle_row_now(&w.row)?;
            }
            return Err(e);
        }
        self.journal
            .batch(|b| b.set_mark(txn, Slot::Data, Mark::Finish))?;
        self.crash_at(CrashPoint::DataFinished)?;
        let parities: Vec<usize> = PARITY_SLOTS
            .iter()
            .map(|&s| w.row.disks[s as usize])
            .collect();
        let live: Vec<usize> = self.live_disks(&parities);
        let delta = Delta {
            txn_id: txn,
            offset: w.delta_offset,
            data: std::mem::take(&mut w.delta),
            parities: w.row.disks,
        };
        if live.is_empty() {
            self.deltas.insert(delta, Vec::new(), reservation);
            self.finish_txn(txn)?;
        } else {
            let failed: Vec<usize> = parities
                .iter()
                .copied()
                .filter(|p| !live.contains(p))
                .collect();
            if !failed.is_empty() {
                self.journal.batch(|b| {
                    for &p in &failed {
                        b.set_mark(txn, slot_of(&w.row.disks, p), Mark::Finish)?;
                    }
                    Ok(())
                })?;
            }
            self.deltas.insert(delta, live, reservation);
            self.notify();
        }
        Ok(())
    }

    pub(super) fn finish_txn(&self, txn: u64) -> Result<()> {
        self.journal.batch(|b| b.delete_promise(txn))?;
        self.deltas
            .remove_file(txn)
            .map_err(|e| Error::Io(format!("cannot remove the delta file of txn {txn}: {e}")))
    }

    /// `disk` has applied (or no longer owes) `delta`: set its finish mark; finish the txn when none is owed.
    pub(super) fn complete_delta(&self, delta: &Delta, disk: usize) -> Result<()> {
        self.journal
            .batch(|b| b.set_mark(delta.txn_id, slot_of(&delta.parities, disk), Mark::Finish))?;
        if self.deltas.complete(delta.txn_id, disk) {
            self.finish_txn(delta.txn_id)?;
        }
        Ok(())
    }

    /// Apply every pending delta of parity disk `disk`: merged, one read-modify-write per region.
    pub(crate) fn drain(&self, disk: usize) -> Result<()> {
        let _one_drain = self.drain_mutexes[disk].lock();
        let deltas = self.deltas.pending_of(disk);
        if deltas.is_empty() {
            return Ok(());
        }
        if self.is_failed(disk) {
            for d in &deltas {
                self.complete_delta(d, disk)?;
            }
            return Ok(());
        }
        // Regions: stripe-expanded deltas, merged where they overlap or touch.
        let mut regions: Vec<(u64, u64, Vec<Arc<Delta>>)> = Vec::new();
        for d in deltas {
            let (s, e) = self.stripe_range(d.offset, d.end());
            match regions.last_mut() {
                Some((_, re, list)) if s <= *re => {
                    *re = (*re).max(e);
                    list.push(d);
                }
                _ => regions.push((s, e, vec![d])),
            }
        }
        let piece_max = self.chunk_bytes_max();
        for (start, end, list) in regions {
            if self.stopped() {
                return Err(Error::Closed);
            }
            let _lock = self.lock(vec![RangeLock::exclusive(disk, start, end)]);
            self.check_crashed()?;
            // Under the lock, only what the disk still owes: a delta completed meanwhile (the disk failed and
            // was replaced, its range recomputed from the members) must not be applied on top.
            let list: Vec<Arc<Delta>> = list
                .into_iter()
                .filter(|d| self.deltas.pending_disks_of(d.txn_id).contains(&disk))
                .collect();
            if list.is_empty() {
                continue;
            }
            if self.is_failed(disk) {
                for d in &list {
                    self.complete_delta(d, disk)?;
                }
                continue;
            }
            let written_before = self.written_parts(disk, start, end);
            self.journal_with_written(&[disk], start, end, |b| {
                for d in &list {
                    b.set_mark(d.txn_id, slot_of(&d.parities, disk), Mark::Start)?;
                }
                Ok(())
            })?;
            debug_assert!(
                self.journal.own_commits_durable(),
                "parity disk {disk} drained before its start marks are durable"
            );
            let slot = self.slot(disk);
            let mut ok = true;
            let mut piece = start;
            while piece < end {
                let piece_end = (piece + piece_max).min(end);
                let mut buf = vec![0u8; (piece_end - piece) as usize];
                let parts: Vec<(u64, u64)> = written_before
                    .iter()
                    .filter(|&&(s, e)| s < piece_end && e > piece)
                    .map(|&(s, e)| (s.max(piece), e.min(piece_end)))
                    .collect();
                if self.read_raw_parts(disk, piece, &mut buf, &parts).is_err() {
                    ok = false;
                    break;
                }
                for d in &list {
                    d.xor_into(piece, &mut buf);
                }
                if piece == start && *self.crash_point.lock() == Some(CrashPoint::DrainHalfWritten)
                {
                    let half = align_down(buf.len() as u64 / 2, 4096).max(4096) as usize;
                    let _ = slot.idr.write(piece, &buf[..half]);
                    let _ = slot.idr.sync();
                    self.crash_at(CrashPoint::DrainHalfWritten)?;
                }
                if let Err(e) = slot.idr.write(piece, &buf) {
                    self.note_error(disk, &e);
                    ok = false;
                    break;
                }
                self.counters[disk]
                    .logical_written
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                piece = piece_end;
            }
            if ok {
                if let Err(e) = slot.idr.sync() {
                    self.note_error(disk, &e);
                    ok = false;
                }
            }
            if !ok && !self.is_failed(disk) {
                // Recomputed from the members, which hold the deltas' data already.
                self.add_defect(disk, start, end)?;
            }
            for d in &list {
                self.complete_delta(d, disk)?;
            }
        }
        Ok(())
    }

    pub(super) fn drain_loop(&self, disk: usize) {
        while !self.stopped() {
            if !self.paused.load(Ordering::SeqCst) && !self.deltas.pending_of(disk).is_empty() {
                let spinning = matches!(
                    self.power.state(disk),
                    PowerState::Idle | PowerState::Active
                );
                if spinning || self.deltas.over_bound() {
                    if let Err(e) = self.drain(disk) {
                        if !self.stopped() {
                            tracing::error!("drain of disk {disk} failed: {e}");
                        }
                    }
                    continue;
                }
            }
            self.deltas.wait_change(Duration::from_millis(POLL_MS));
        }
    }
}
