//! One chunk of a write promise, common to the three write modes: lock, compute the delta `old ⊕ new`, journal,
//! then hand over to the mode (`write_direct`, `write_serialized`, `write_delayed`); plus the two steps every mode
//! uses, writing the data disk and updating one parity disk.
//!
//! **Invariants.**
//! - One journal transaction (`txn_id`) per chunk; the promise row is journaled before any disk of the chunk is
//!   touched, and every defect is journaled before a mark changes. "Journaled" means durable: a disk is written
//!   only once every journal step this thread committed is synced (group commit, `journal`; asserted in debug
//!   builds before every data and parity write, so every write test checks the order).
//! - Locks: the chunk's stripes on the data disk exclusively (and on `hP`, `vP`, `vhP` too, except for delayed
//!   writes), taken as one set; power guards only after the range locks. A writer that meets a defect on its data
//!   disk drops its locks, recovers the range and retries (no hold-and-wait).
//! - Never-written stripes are written whole (zeros around the user bytes), so IDR never reads unwritten space.
//! - A parity update that finds part of its range defect marks the whole range defect instead of skipping it.
//! - A chunk that fails with an I/O error (not a crash) is settled at once as replay would settle it.
//! - Once a test crash point fired, a chunk that takes its locks afterwards writes no disk and journals nothing
//!   (`Shared::check_crashed`): the crashed writer's locks were let go with its row still open.

use std::sync::atomic::Ordering;

use super::io::ReadFail;
use super::{align_down, CrashPoint, Shared};
use crate::buffer_pool::BufferPool;
use crate::config::WriteMode;
use crate::delta::Snapshot;
use crate::journal::{PromiseRow, Slot};
use crate::locks::RangeLock;
use crate::{Error, Result};

/// The chunk of one write with its computed content; its buffers go back to the write's pool when it is dropped.
pub(super) struct ChunkWrite<'a> {
    pub(super) row: PromiseRow,
    /// New content of the data disk over the row's range.
    pub(super) new: Vec<u8>,
    /// `old ⊕ new` over the user range.
    pub(super) delta: Vec<u8>,
    pub(super) delta_offset: u64,
    /// Written parts of the range on each of the four disks before this chunk marked it written.
    pub(super) written_before: [Vec<(u64, u64)>; 4],
    /// Where `new`, `delta` and the parity updates' buffers come from and go back to.
    pub(super) buffers: &'a BufferPool,
}

impl Drop for ChunkWrite<'_> {
    fn drop(&mut self) {
        self.buffers.give(std::mem::take(&mut self.new));
        self.buffers.give(std::mem::take(&mut self.delta));
    }
}

impl Shared {
    /// Write `data` at `offset` (4 KiB aligned) of data disk `disk` in `mode`: one journal transaction. Its
    /// working buffers come from `buffers` and go back there.
    pub(crate) fn write_chunk(
        &self,
        disk: usize,
        offset: u64,
        data: &[u8],
        mode: WriteMode,
        buffers: &BufferPool,
    ) -> Result<u64> {
        if self.stopped() {
            return Err(Error::Closed);
        }
        let end = offset + data.len() as u64;
        let (io_start, io_end) = self.stripe_range(offset, end);
        let io_len = io_end - io_start;
        let targets = self.geometry.parity_targets(disk);
        let parities = [targets.hp, targets.vp, targets.vhp];
        let reservation = if mode == WriteMode::Delayed {
            Some(self.reserve_delta(data.len() as u64)?)
        } else {
            None
        };
        for _attempt in 0..8 {
            if self.is_failed(disk) {
                return Err(Error::DiskFailed {
                    disk,
                    message: "the data disk failed during the write".into(),
                });
            }
            let mut set = vec![RangeLock::exclusive(disk, io_start, io_end)];
            if mode != WriteMode::Delayed {
                set.extend(
                    parities
                        .iter()
                        .map(|&p| RangeLock::exclusive(p, io_start, io_end)),
                );
            }
            let lock = self.lock(set);
            self.check_crashed()?;
            // Old content of the data disk (zeros where unwritten), made the new one below.
            let mut new = buffers.take(io_len as usize);
            match self.read_true(disk, io_start, &mut new, &Snapshot::default()) {
                Ok(()) => {}
                Err(fail) => {
                    buffers.give(new);
                    let ReadFail::Ranges(ranges) = fail else {
                        continue;
                    };
                    // Journaled under the lock, so they can never land on a disk replaced meanwhile.
                    for (s, e) in ranges {
                        self.add_defect(disk, s, e)?;
                    }
                    drop(lock);
                    self.recover_range(disk, io_start, io_end, &mut 0)?;
                    continue;
                }
            }
            let user = (offset - io_start) as usize..(end - io_start) as usize;
            // δ over the user range only (zero elsewhere): new ⊕ old there.
            let mut delta = buffers.take(data.len());
            delta.copy_from_slice(data);
            permafrost_idr::xor_into(&mut delta, &new[user.clone()]);
            new[user].copy_from_slice(data);
            let data_was_unwritten = self.is_unwritten(disk, io_start, io_end);
            let txn_id = self.next_txn.fetch_add(1, Ordering::SeqCst);
            let row = PromiseRow {
                txn_id,
                mode,
                disks: [disk, parities[0], parities[1], parities[2]],
                offset: io_start,
                length: io_len,
                starts: [0; 4],
                finishes: [0; 4],
                data_was_unwritten,
            };
            let written_before = row.disks.map(|d| self.written_parts(d, io_start, io_end));
            let write = ChunkWrite {
                row,
                new,
                delta,
                delta_offset: offset,
                written_before,
                buffers,
            };
            match mode {
                WriteMode::Direct => self.write_direct(write)?,
                WriteMode::Serialized => self.write_serialized(write)?,
                WriteMode::Delayed => self.write_delayed(write, reservation)?,
            }
            drop(lock);
            return Ok(txn_id);
        }
        Err(Error::Io(format!(
            "disk {disk}: write at {offset} kept failing; giving up"
        )))
    }

    /// Room for a delta of `bytes` in the cache. The drain threads make room; while they are paused (test hook)
    /// the writer drains itself (it holds no lock here), so a full cache never blocks a writer forever.
    fn reserve_delta(&self, bytes: u64) -> Result<crate::delta::Reservation<'_>> {
        loop {
            let paused = || self.stopped() || self.paused.load(Ordering::SeqCst);
            if let Some(reservation) = self.deltas.reserve(bytes, &paused) {
                return Ok(reservation);
            }
            if self.stopped() {
                return Err(Error::Closed);
            }
            for disk in self.deltas.disks_with_pending() {
                self.drain(disk)?;
            }
        }
    }

    /// Write the data disk's new content over the row's range (crash hooks included).
    pub(super) fn write_data(&self, w: &ChunkWrite) -> Result<()> {
        let disk = w.row.disks[0];
        debug_assert!(
            self.journal.own_commits_durable(),
            "disk {disk} written before the journal step that allows it is durable"
        );
        let slot = self.slot(disk);
        if self.crash_point.lock().is_some() {
            self.crash_at(CrashPoint::DataStarted)?;
            if *self.crash_point.lock() == Some(CrashPoint::DataHalfWritten) {
                let half = align_down(w.new.len() as u64 / 2, 4096).max(4096) as usize;
                let _ = slot.idr.write(w.row.offset, &w.new[..half]);
                let _ = slot.idr.sync();
                self.crash_at(CrashPoint::DataHalfWritten)?;
            }
        }
        let result = slot
            .idr
            .write(w.row.offset, &w.new)
            .and_then(|_| slot.idr.sync());
        if let Err(e) = result {
            self.note_error(disk, &e);
            return Err(Error::Idr(e));
        }
        self.counters[disk]
            .logical_written
            .fetch_add(w.new.len() as u64, Ordering::Relaxed);
        self.crash_at(CrashPoint::DataWritten)
    }

    /// `raw(P) ^= δ` over the row's range. Returns false if `P` could not be updated (then its range is defect).
    pub(super) fn update_parity(
        &self,
        parity: usize,
        w: &ChunkWrite,
        crash_half: bool,
    ) -> Result<bool> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        if self.is_failed(parity) {
            return Ok(false);
        }
        if !self.defects_in(parity, start, end).is_empty() {
            // Recovery recomputes it from the members, which already include this write. The whole range: a
            // defect over part of it must not leave the rest without this write's delta.
            self.add_defect(parity, start, end)?;
            return Ok(false);
        }
        let mut buf = w.buffers.take(w.row.length as usize);
        let updated = self.update_parity_in(parity, w, crash_half, &mut buf);
        w.buffers.give(buf);
        updated
    }

    /// [`Shared::update_parity`] with `buf` (`w.row.length` bytes) to read the old parity into.
    fn update_parity_in(
        &self,
        parity: usize,
        w: &ChunkWrite,
        crash_half: bool,
        buf: &mut [u8],
    ) -> Result<bool> {
        let (start, end) = (w.row.offset, w.row.offset + w.row.length);
        let parts = &w.written_before[slot_of(&w.row.disks, parity) as usize];
        if let Err(fail) = self.read_raw_parts(parity, start, buf, parts) {
            if let ReadFail::Ranges(_) = fail {
                self.add_defect(parity, start, end)?;
            }
            return Ok(false);
        }
        let at = (w.delta_offset - start) as usize;
        permafrost_idr::xor_into(&mut buf[at..at + w.delta.len()], &w.delta);
        debug_assert!(
            self.journal.own_commits_durable(),
            "parity disk {parity} written before the journal step that allows it is durable"
        );
        let slot = self.slot(parity);
        if crash_half {
            let half = align_down(buf.len() as u64 / 2, 4096).max(4096) as usize;
            let _ = slot.idr.write(start, &buf[..half]);
            let _ = slot.idr.sync();
            self.crash_at(CrashPoint::ParityHalfWritten)?;
        }
        match slot.idr.write(start, buf).and_then(|_| slot.idr.sync()) {
            Ok(()) => {
                self.counters[parity]
                    .logical_written
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.note_error(parity, &e);
                if !self.is_failed(parity) {
                    self.add_defect(parity, start, end)?;
                }
                Ok(false)
            }
        }
    }

    pub(super) fn live_disks(&self, disks: &[usize]) -> Vec<usize> {
        disks
            .iter()
            .copied()
            .filter(|&d| !self.is_failed(d))
            .collect()
    }

    /// A chunk that failed mid-way (I/O error, not a crash): settle its row as replay would.
    pub(super) fn settle_row_now(&self, row: &PromiseRow) -> Result<()> {
        let rows = self.journal.promises()?;
        if let Some(current) = rows.into_iter().find(|r| r.txn_id == row.txn_id) {
            self.settle_row(&current, false)?;
        }
        Ok(())
    }
}

/// Slot of `disk` among a promise's four disks.
pub(super) fn slot_of(disks: &[usize; 4], disk: usize) -> Slot {
    match disks.iter().position(|&d| d == disk) {
        Some(0) => Slot::Data,
        Some(1) => Slot::HParity,
        Some(2) => Slot::VParity,
        Some(3) => Slot::VhParity,
        _ => panic!("disk {disk} is not one of the promise's disks {disks:?}"),
    }
}
