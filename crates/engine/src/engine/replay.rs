//! Replay: settling the journal rows a crash (or an I/O error in the middle of a chunk) left behind, by the rules of
//! docs/engine.md "Replay": finish what can be finished, undo what was never acknowledged, and mark defect (to be
//! recovered from the grid) whatever cannot be trusted.
//!
//! **Invariants.**
//! - Every defect of a row is journaled before the row's marks change or the row is deleted, so a crash during
//!   replay (which simply runs again) loses none.
//! - A write into never-written space that did not finish leaves the written map (it reads as zeros again, no disk
//!   is spun up); one over written space becomes defect and is recovered from parity (the old data).
//! - The write hole (RAID's): a range of a data disk that only an unacknowledged write touched holds nothing anyone
//!   was promised, so its content is replay's to choose. A write into never-written space that did not finish
//!   takes the range back to never-written (zeros) together with any defect found there meanwhile (a scrub or a
//!   reconstruction that met the write in flight once its writer let go of its range locks with the row still
//!   open, as a test crash point's writer does; such an engine now stops every other writer, `check_crashed`, and
//!   this stays as the second line); the parity disks whose update was
//!   in flight are then recomputed from their members, this range included. Were such a defect kept, the data disk
//!   and the write's three parity disks would all be defect over the same range (direct mode) and none could be
//!   recovered. This never applies to a range holding acknowledged data: the row says the whole range was
//!   unwritten when the write took its exclusive lock on it, so nothing acknowledged is there; a data disk range
//!   the written map says held committed bytes keeps its defects and is recovered from parity.
//! - Direct writes settle their data disk stripe by stripe: a stripe that verifies is kept, one that does not is
//!   re-encoded as it reads; only those.

use permafrost_idr::IdrError;

use super::Shared;
use crate::config::WriteMode;
use crate::delta::Delta;
use crate::journal::{Mark, PromiseRow, RangeTable, Slot, PARITY_SLOTS};
use crate::{Error, Result};

impl Shared {
    /// Finish or recover every promise left in the journal (docs/engine.md "Replay").
    pub(super) fn replay(&self) -> Result<()> {
        let rows = self.journal.promises()?;
        // Rows that would leave their data disk defect (an unfinished serialized or delayed write over written
        // space) go last: whether its parity can give the old data back depends on what the other rows leave in
        // doubt (a direct write in flight in the same stripe of the group).
        let (late, early): (Vec<&PromiseRow>, Vec<&PromiseRow>) = rows.iter().partition(|r| {
            r.finishes[0] == 0 && !r.data_was_unwritten && r.mode != WriteMode::Direct
        });
        let mut with_rows = Vec::new();
        for row in early.into_iter().chain(late) {
            with_rows.push(row.txn_id);
            self.settle_row(row, true)?;
        }
        // Delta files without a row belong to finished or never-started txns.
        for txn in self
            .deltas
            .files()
            .map_err(|e| Error::Io(format!("cannot list the delta cache: {e}")))?
        {
            if !with_rows.contains(&txn) {
                self.deltas
                    .remove_file(txn)
                    .map_err(|e| Error::Io(format!("cannot remove delta {txn}: {e}")))?;
            }
        }
        Ok(())
    }

    /// Settle one unfinished row. `at_open`: replay (delayed deltas may be re-queued). Every defect is journaled
    /// before the row's marks change or the row is deleted, so a crash while settling (replay simply runs again)
    /// loses none of them.
    pub(super) fn settle_row(&self, row: &PromiseRow, at_open: bool) -> Result<()> {
        let (start, end) = (row.offset, row.offset + row.length);
        let disk = row.disks[0];
        let data_finished = row.finishes[0] != 0;
        let unfinished_parities: Vec<usize> = PARITY_SLOTS
            .iter()
            .filter(|&&s| row.finishes[s as usize] == 0)
            .map(|&s| row.disks[s as usize])
            .collect();
        let add_parity_defects = |parities: &[usize]| -> Result<()> {
            for &p in parities {
                if !self.is_failed(p) {
                    self.add_defect(p, start, end)?;
                }
            }
            Ok(())
        };
        if !data_finished {
            let direct = row.mode == WriteMode::Direct;
            if direct {
                // Parity was written at the same time as the data: recompute it from the members.
                add_parity_defects(&unfinished_parities)?;
            }
            if row.data_was_unwritten {
                // Back to never-written: reads as zeros again, and whatever was found wrong there meanwhile goes
                // with it (see the module doc).
                self.forget_unfinished_write(disk, start, end)?;
            } else if direct {
                self.settle_direct_data(disk, start, end)?;
            } else if self.rebuildable_now(disk, start, end) {
                // Parity untouched: it still describes the old data.
                self.add_defect(disk, start, end)?;
            } else {
                // No group of the data disk can give the old data back over the range (a member or parity failed
                // or in doubt, e.g. the parity of a direct write in flight in the same stripe): keep what the disk
                // holds, as for a direct write. Acknowledged bytes are the same in the old and the new content
                // (the write changed only its own, unacknowledged range); the parity is recomputed from it.
                self.settle_direct_data(disk, start, end)?;
                add_parity_defects(&unfinished_parities)?;
            }
            self.journal.batch(|b| b.delete_promise(row.txn_id))?;
            self.deltas
                .remove_file(row.txn_id)
                .map_err(|e| Error::Io(format!("cannot remove delta {}: {e}", row.txn_id)))?;
        } else if row.mode == WriteMode::Delayed && at_open {
            let owed: Vec<Slot> = PARITY_SLOTS
                .iter()
                .copied()
                .filter(|&s| row.finishes[s as usize] == 0)
                .collect();
            let delta = self
                .deltas
                .read_file(row.txn_id)
                .map_err(|e| Error::Io(format!("cannot read delta {}: {e}", row.txn_id)))?;
            let mut requeue = Vec::new();
            let mut parity_defects = Vec::new();
            for &s in &owed {
                let p = row.disks[s as usize];
                if row.starts[s as usize] == 0 && delta.is_some() && !self.is_failed(p) {
                    requeue.push(p);
                } else {
                    parity_defects.push(p);
                }
            }
            add_parity_defects(&parity_defects)?;
            if requeue.is_empty() {
                self.finish_txn(row.txn_id)?;
            } else {
                let delta = delta.expect("checked above");
                let done: Vec<Slot> = owed
                    .iter()
                    .copied()
                    .filter(|&s| !requeue.contains(&row.disks[s as usize]))
                    .collect();
                self.journal.batch(|b| {
                    for &s in &done {
                        b.set_mark(row.txn_id, s, Mark::Finish)?;
                    }
                    Ok(())
                })?;
                let bytes = delta.data.len() as u64;
                let reservation = self.deltas.reserve(bytes, &|| true);
                self.deltas.insert(
                    Delta {
                        parities: row.disks,
                        ..delta
                    },
                    requeue,
                    reservation,
                );
            }
        } else {
            add_parity_defects(&unfinished_parities)?;
            self.finish_txn(row.txn_id)?;
        }
        Ok(())
    }

    /// Can `[start, end)` of `disk` be reconstructed in one step: one of its groups has every other member (its
    /// parity included) live and without defects there?
    fn rebuildable_now(&self, disk: usize, start: u64, end: u64) -> bool {
        self.geometry.groups_of(disk).into_iter().any(|g| {
            self.geometry
                .group_members(g)
                .iter()
                .filter(|&&m| m != disk)
                .all(|&m| !self.is_failed(m) && self.defects_in(m, start, end).is_empty())
        })
    }

    /// Remove `[start, end)` (bytes, stripe aligned) from the written map of `disk`.
    fn unmark_written(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        let (lo, hi) = (start / self.stripe_bytes, end.div_ceil(self.stripe_bytes));
        let mut maps = self.maps.lock();
        let mut set = maps.written[disk].clone();
        set.remove(lo, hi);
        self.journal
            .batch(|b| b.sync_ranges(RangeTable::Written, disk, &set, lo, hi))?;
        maps.written[disk] = set;
        Ok(())
    }

    /// `[start, end)` of data disk `disk` held nothing before an unfinished write into it (the row's
    /// `data_was_unwritten`): remove it from the written map and from the defects in one journal transaction. A
    /// defect there describes only the write in flight, which nobody was promised; kept, it would make the range
    /// unrecoverable whenever the write's parity disks are being recomputed from their members (direct mode).
    fn forget_unfinished_write(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        let unit = self.stripe_bytes;
        let (lo, hi) = (start / unit, end.div_ceil(unit));
        let mut maps = self.maps.lock();
        let mut written = maps.written[disk].clone();
        written.remove(lo, hi);
        let mut defects = maps.defects[disk].clone();
        defects.remove(lo * unit, (hi * unit).min(self.logical_bytes));
        let voided = maps.defects[disk].total() - defects.total();
        self.journal.batch(|b| {
            b.sync_ranges(RangeTable::Written, disk, &written, lo, hi)?;
            b.sync_ranges(RangeTable::Defects, disk, &defects, lo * unit, hi * unit)
        })?;
        maps.written[disk] = written;
        maps.defects[disk] = defects;
        drop(maps);
        if voided > 0 {
            tracing::info!(
                "replay: disk {disk} {start}..{end} held nothing before an unfinished write; its {voided} defect bytes there are void"
            );
        }
        Ok(())
    }

    /// The data disk of an interrupted direct write (its parities are being recomputed): keep each stripe as it
    /// is where it verifies (all old or all new); re-encode a stripe that does not, taking its blocks as they
    /// read (the write hole the thesis accepts); a stripe the write never reached and that was never written
    /// before leaves the written map (it reads as zeros, as before).
    fn settle_direct_data(&self, disk: usize, start: u64, end: u64) -> Result<()> {
        if self.is_failed(disk) {
            return Ok(());
        }
        let slot = self.slot(disk);
        let mut buf = vec![0u8; self.stripe_bytes as usize];
        let mut stripe = start;
        while stripe < end {
            let stripe_end = stripe + self.stripe_bytes;
            let outcome = slot
                .idr
                .scrub(stripe, self.stripe_bytes)
                .and_then(|report| {
                    if report.stripes_never_written > 0 {
                        return Ok(Some(true));
                    }
                    match slot.idr.read(stripe, &mut buf) {
                        Ok(_) => Ok(None),
                        Err(IdrError::Unrecoverable { .. }) => {
                            slot.idr.reencode(stripe, self.stripe_bytes)?;
                            slot.idr.sync()?;
                            Ok(Some(false))
                        }
                        Err(e) => Err(e),
                    }
                });
            match outcome {
                Ok(Some(true)) => self.unmark_written(disk, stripe, stripe_end)?,
                Ok(_) => {}
                Err(e) => {
                    self.note_error(disk, &e);
                    if !self.is_failed(disk) {
                        self.add_defect(disk, stripe, stripe_end)?;
                    }
                }
            }
            stripe = stripe_end;
        }
        Ok(())
    }
}
