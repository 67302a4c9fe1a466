//! Reading the true content of disk ranges: what a disk holds (zeros where never written), checked by IDR on read,
//! with the pending parity deltas of a parity disk laid over it; and a reader's chunk, taken from the grid where
//! the disk cannot serve it.
//!
//! **Invariants.**
//! - A read returns the bytes last committed or an error, never wrong bytes: a range that cannot be read or
//!   verified, or that is defect, fails (`ReadFail`) and the caller reconstructs it.
//! - Never-written space reads as zeros without touching the disk (block devices hold garbage there).
//! - All-zero 4 KiB blocks inside the written map are trusted only where IDR verified them with their check blocks
//!   (a zeroed stripe or a blank disk swapped in is damage, not data).
//! - The caller holds a range lock over what it reads (shared at least); this module takes none itself except in
//!   `read_chunk`, which takes its own and drops them before reconstructing.

use permafrost_disk::power::WakeContext;
use std::sync::atomic::Ordering;

use permafrost_idr::IdrError;

use super::{align_down, Shared};
use crate::buffer_pool::BufferPool;
use crate::delta::Snapshot;
use crate::disks::DiskSlot;
use crate::locks::RangeLock;
use crate::Result;

pub(super) enum ReadFail {
    /// The disk is failed (or failed during the read).
    Failed,
    /// These ranges could not be read or verified (or are defect).
    Ranges(Vec<(u64, u64)>),
}

impl Shared {
    /// Read `disk`'s on-disk content of `[offset, offset+buf.len())`: zeros where never written, the IDR space
    /// elsewhere. No overlay, no defect check. The caller holds a lock on the range.
    fn read_raw(
        &self,
        disk: usize,
        offset: u64,
        buf: &mut [u8],
    ) -> std::result::Result<(), ReadFail> {
        let parts = self.written_parts(disk, offset, offset + buf.len() as u64);
        self.read_raw_parts(disk, offset, buf, &parts)
    }

    /// [`Shared::read_raw`] with the written parts given (as they were before the caller marked the range).
    pub(super) fn read_raw_parts(
        &self,
        disk: usize,
        offset: u64,
        buf: &mut [u8],
        parts: &[(u64, u64)],
    ) -> std::result::Result<(), ReadFail> {
        if self.is_failed(disk) {
            return Err(ReadFail::Failed);
        }
        let end = offset + buf.len() as u64;
        // Outside the written parts the disk reads as zeros; inside, IDR overwrites every byte (verified data, or
        // zeros where it cannot verify), so a reused buffer's old bytes never show and only the gaps are cleared.
        zero_outside(buf, offset, parts);
        let slot = self.slot(disk);
        let mut bad = Vec::new();
        for &(s, e) in parts {
            let part = &mut buf[(s - offset) as usize..(e - offset) as usize];
            // Zeros in a written stripe may be damage (see `untrusted_zero_stripes`); a stripe with an
            // unverifiable part is reconstructed whole.
            let checked = match slot.idr.read(s, part) {
                Ok(report) => {
                    self.counters[disk]
                        .logical_read
                        .fetch_add(e - s, Ordering::Relaxed);
                    self.untrusted_zero_stripes(&slot, s, part, report.check_blocks_repaired > 0)
                }
                Err(IdrError::Unrecoverable { ranges }) => {
                    for (o, l) in ranges {
                        let (rs, re) = self.stripe_range(o, o + l);
                        bad.push((rs.max(s), re.min(e)));
                    }
                    self.untrusted_zero_stripes(&slot, s, part, true)
                }
                Err(e) => Err(e),
            };
            match checked {
                Ok(untrusted) => bad.extend(untrusted),
                Err(e) => {
                    self.note_error(disk, &e);
                    return Err(if self.is_failed(disk) {
                        ReadFail::Failed
                    } else {
                        ReadFail::Ranges(vec![(offset, end)])
                    });
                }
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(ReadFail::Ranges(bad))
        }
    }

    /// Stripes of `[offset, offset + data.len())` (just read from `slot`, inside the written map) whose all-zero
    /// blocks cannot be trusted, clipped to the range. IDR returns zeros without complaint for a stripe that is
    /// physically never written (zeroed in place, a blank disk swapped in), and verifies an all-zero iPG by parity
    /// alone when both check blocks are lost (a zeroed stripe with one flipped bit). So a stripe holding an
    /// all-zero 4 KiB block is damaged when `distrust` (the read repaired check blocks or failed elsewhere, which
    /// may have erased the evidence) or when a scrub of that one stripe finds it never written, unverifiable or
    /// with repaired check blocks. Data without zero blocks costs nothing extra. The caller holds a lock on them.
    pub(super) fn untrusted_zero_stripes(
        &self,
        slot: &DiskSlot,
        offset: u64,
        data: &[u8],
        distrust: bool,
    ) -> std::result::Result<Vec<(u64, u64)>, IdrError> {
        let end = offset + data.len() as u64;
        let mut untrusted = Vec::new();
        let mut stripe = align_down(offset, self.stripe_bytes);
        while stripe < end {
            let (from, to) = (stripe.max(offset), (stripe + self.stripe_bytes).min(end));
            let bytes = &data[(from - offset) as usize..(to - offset) as usize];
            if has_zero_block(bytes) && (distrust || self.stripe_suspect(slot, stripe)?) {
                untrusted.push((from, to));
            }
            stripe += self.stripe_bytes;
        }
        Ok(untrusted)
    }

    /// A scrub of one stripe finds it never written, unverifiable in part, or with check blocks to repair.
    fn stripe_suspect(&self, slot: &DiskSlot, stripe: u64) -> std::result::Result<bool, IdrError> {
        let report = slot.idr.scrub(stripe, self.stripe_bytes)?;
        Ok(report.stripes_never_written > 0
            || !report.unrecoverable.is_empty()
            || report.check_blocks_repaired > 0)
    }

    /// The true content of `disk` over the range: defect ranges fail, parity disks get the snapshot's overlay.
    pub(super) fn read_true(
        &self,
        disk: usize,
        offset: u64,
        buf: &mut [u8],
        snapshot: &Snapshot,
    ) -> std::result::Result<(), ReadFail> {
        if self.is_failed(disk) {
            return Err(ReadFail::Failed);
        }
        let defects = self.defects_in(disk, offset, offset + buf.len() as u64);
        if !defects.is_empty() {
            return Err(ReadFail::Ranges(defects));
        }
        self.read_raw(disk, offset, buf)?;
        snapshot.overlay(disk, offset, buf);
        Ok(())
    }

    /// [`Shared::read_true`] of each of `sources` over `[offset, offset + len)` into a new buffer, all at the same
    /// time (one thread per source: their disk reads and IDR checks overlap). Results in the order of `sources`.
    pub(super) fn read_true_parallel(
        &self,
        sources: &[usize],
        offset: u64,
        len: u64,
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Vec<std::result::Result<Vec<u8>, ReadFail>> {
        let read = |source: usize| {
            let mut buf = pool.take(len as usize);
            match self.read_true(source, offset, &mut buf, snapshot) {
                Ok(()) => Ok(buf),
                Err(fail) => {
                    pool.give(buf);
                    Err(fail)
                }
            }
        };
        if sources.len() <= 1 {
            return sources.iter().map(|&source| read(source)).collect();
        }
        let read = &read;
        let wake = &WakeContext::current(); // the reader's reason, for the spin-ups of its sources
        std::thread::scope(|scope| {
            let handles: Vec<_> = sources
                .iter()
                .map(|&source| {
                    scope.spawn(move || {
                        let _wake = WakeContext::enter_opt(wake.clone());
                        read(source)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("source read thread panicked"))
                .collect()
        })
    }

    /// Read the true content of `disk` over a chunk for a reader: the disk itself where it can, the grid where it
    /// cannot (then the damaged ranges are queued as defect for the background recovery).
    pub(crate) fn read_chunk(&self, disk: usize, offset: u64, buf: &mut [u8]) -> Result<()> {
        // While the disk is being evacuated the copy comes first: wait for this read's turn, holding no lock.
        self.wait_evacuation_turn(disk, buf.len() as u64);
        let end = offset + buf.len() as u64;
        let (lock_start, lock_end) = self.stripe_range(offset, end);
        {
            let _lock = self.lock(vec![RangeLock::shared(disk, lock_start, lock_end)]);
            // A read repairs blocks in place and records defects: after a test crash point it does neither.
            self.check_crashed()?;
            match self.read_true(disk, offset, buf, &Snapshot::default()) {
                Ok(()) => return Ok(()),
                Err(ReadFail::Ranges(ranges)) => {
                    // Being evacuated: what is not copied yet comes from the old disk, not from the grid.
                    if self.read_evacuating(disk, offset, buf) {
                        return Ok(());
                    }
                    for (s, e) in ranges {
                        self.add_defect(disk, s, e)?;
                    }
                }
                Err(ReadFail::Failed) => {}
            }
        }
        // Degraded: per stripe, the disk where it is good, the grid elsewhere; runs of stripes that need the grid
        // (all of them when the disk is failed) are reconstructed together, in pieces.
        let _lock = self.lock_all(disk, false, lock_start, lock_end);
        self.check_crashed()?;
        let snapshot = self.deltas.snapshot(self.geometry.parity_disks());
        let pool = BufferPool::default();
        // Stripes `[from, to)` from the grid, their part inside `[offset, end)` copied into `buf`.
        let reconstruct_run = |buf: &mut [u8], from: u64, to: u64| -> Result<()> {
            let (s, e) = (from.max(offset), to.min(end));
            if (s, e) == (from, to) {
                let part = &mut buf[(from - offset) as usize..(to - offset) as usize];
                return self.reconstruct_into(disk, from, part, &snapshot, &pool);
            }
            let mut whole = vec![0u8; (to - from) as usize];
            self.reconstruct_into(disk, from, &mut whole, &snapshot, &pool)?;
            buf[(s - offset) as usize..(e - offset) as usize]
                .copy_from_slice(&whole[(s - from) as usize..(e - from) as usize]);
            Ok(())
        };
        let mut run_start = None;
        let mut stripe = lock_start;
        while stripe < lock_end {
            let s_end = stripe + self.stripe_bytes;
            let from = stripe.max(offset);
            let to = s_end.min(end);
            let part = &mut buf[(from - offset) as usize..(to - offset) as usize];
            if self.read_true(disk, from, part, &snapshot).is_err()
                && !self.read_evacuating(disk, from, part)
            {
                run_start.get_or_insert(stripe);
            } else if let Some(run) = run_start.take() {
                reconstruct_run(buf, run, stripe)?;
            }
            stripe = s_end;
        }
        if let Some(run) = run_start {
            reconstruct_run(buf, run, lock_end)?;
        }
        Ok(())
    }
}

/// Zero the bytes of `buf` (holding `[offset, offset + buf.len())`) outside every range of `parts` (inside the
/// buffer's range, possibly overlapping). With parts in ascending order exactly those; out of order, every
/// uncovered byte and maybe some covered ones (which the caller overwrites anyway).
fn zero_outside(buf: &mut [u8], offset: u64, parts: &[(u64, u64)]) {
    let end = offset + buf.len() as u64;
    let mut at = offset;
    for &(s, e) in parts {
        if s > at {
            buf[(at - offset) as usize..(s.min(end) - offset) as usize].fill(0);
        }
        at = at.max(e.min(end));
    }
    buf[(at - offset) as usize..].fill(0);
}

pub(super) fn has_zero_block(bytes: &[u8]) -> bool {
    bytes.chunks(4096).any(is_zero)
}

/// True when every byte is zero (64 bytes at a time, which the compiler vectorises).
fn is_zero(bytes: &[u8]) -> bool {
    let chunks = bytes.chunks_exact(64);
    let tail = chunks.remainder();
    chunks
        .into_iter()
        .all(|c| c.iter().fold(0u8, |acc, &b| acc | b) == 0)
        && tail.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod zero_outside_tests {
    use super::zero_outside;

    #[test]
    fn zero_outside_clears_every_byte_no_part_covers() {
        // Buffer of 10 bytes at offset 100; parts ascending and overlapping.
        let mut buf = [7u8; 10];
        zero_outside(&mut buf, 100, &[(101, 103), (102, 104), (106, 108)]);
        assert_eq!(buf, [0, 7, 7, 7, 0, 0, 7, 7, 0, 0]);
        // Out of order: still no uncovered byte is left.
        let mut buf = [7u8; 10];
        zero_outside(&mut buf, 100, &[(106, 108), (101, 103)]);
        for (i, &b) in buf.iter().enumerate() {
            assert!(
                b == 0 || (1..3).contains(&i) || (6..8).contains(&i),
                "byte {i}"
            );
        }
        let mut all = [7u8; 4];
        zero_outside(&mut all, 0, &[(0, 4)]);
        assert_eq!(all, [7; 4]);
        zero_outside(&mut all, 0, &[]);
        assert_eq!(all, [0; 4]);
    }
}
