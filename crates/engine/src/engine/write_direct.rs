//! Direct write mode: the data disk and its three parity disks are written at the same time, then synced.
//!
//! **Invariants.**
//! - The row carries start marks on all four disks before any is written, and is deleted only after all four are
//!   durable: a crash in between makes replay re-encode the data stripes that do not verify and recompute the
//!   three parity ranges from their members (the write hole the thesis accepts, closed by replay).
//! - When `commit()` returns, data and all parity are durable.

use super::write::ChunkWrite;
use super::{CrashPoint, Shared};
use crate::journal::{now_ms, PARITY_SLOTS};
use crate::{Error, Result};
use permafrost_disk::power::WakeContext;

impl Shared {
    pub(super) fn write_direct(&self, mut w: ChunkWrite<'_>) -> Result<()> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        let now = now_ms();
        w.row.starts = [now; 4];
        let live = self.live_disks(&w.row.disks);
        self.journal_with_written(&live, start, end, |b| b.insert_promise(&w.row))?;
        let _guards = self.power.acquire_many(&live).ok();
        let crash_parity = *self.crash_point.lock() == Some(CrashPoint::ParityHalfWritten);
        let w = &w;
        let wake = &WakeContext::current(); // the writer's reason, for the parity disks' spin-ups
        let results: Vec<Result<bool>> = std::thread::scope(|scope| {
            let handles: Vec<_> = PARITY_SLOTS
                .iter()
                .map(|&slot| {
                    scope.spawn(move || {
                        let _wake = WakeContext::enter_opt(wake.clone());
                        self.update_parity(w.row.disks[slot as usize], w, crash_parity)
                    })
                })
                .collect();
            let data = self.write_data(w).map(|_| true);
            std::iter::once(data)
                .chain(
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("parity thread panicked")),
                )
                .collect()
        });
        for r in &results {
            if let Err(Error::SimulatedCrash(p)) = r {
                return Err(Error::SimulatedCrash(*p));
            }
        }
        if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
            self.settle_row_now(&w.row)?;
            return Err(e);
        }
        self.journal.batch(|b| b.delete_promise(w.row.txn_id))?;
        Ok(())
    }
}
