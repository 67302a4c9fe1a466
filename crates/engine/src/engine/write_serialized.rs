//! Serialized direct write mode: the data disk, then `hP`, `vP` and `vhP` one after another, each written and
//! synced between its start and finish marks.
//!
//! **Invariants.**
//! - At most one of the four disks is undefined at any moment, so no crash opens a write hole: replay either
//!   restores the old data (data disk not finished) or recomputes the one parity range in flight.
//! - When `commit()` returns, data and all parity are durable.

use super::write::ChunkWrite;
use super::{CrashPoint, Shared};
use crate::journal::{now_ms, Mark, Slot, PARITY_SLOTS};
use crate::{Error, Result};

impl Shared {
    pub(super) fn write_serialized(&self, mut w: ChunkWrite<'_>) -> Result<()> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        let disk = w.row.disks[0];
        w.row.starts[0] = now_ms();
        self.journal_with_written(&[disk], start, end, |b| b.insert_promise(&w.row))?;
        let live = self.live_disks(&w.row.disks);
        let _guards = self.power.acquire_many(&live).ok();
        if let Err(e) = self.write_data(&w) {
            if !matches!(e, Error::SimulatedCrash(_)) {
                self.settle_row_now(&w.row)?;
            }
            return Err(e);
        }
        let txn = w.row.txn_id;
        let mut previous = Slot::Data;
        for (i, &slot) in PARITY_SLOTS.iter().enumerate() {
            let parity = w.row.disks[slot as usize];
            let prev = previous;
            let live = !self.is_failed(parity);
            let marks = |b: &crate::journal::Batch| {
                b.set_mark(txn, prev, Mark::Finish)?;
                b.set_mark(txn, slot, Mark::Start)
            };
            if live {
                self.journal_with_written(&[parity], start, end, marks)?;
            } else {
                self.journal.batch(marks)?;
            }
            if i == 0 {
                self.crash_at(CrashPoint::DataFinished)?;
            }
            let crash_half =
                i == 0 && *self.crash_point.lock() == Some(CrashPoint::ParityHalfWritten);
            self.update_parity(parity, &w, crash_half)?;
            previous = slot;
        }
        self.journal.batch(|b| b.delete_promise(txn))?;
        Ok(())
    }
}
