//! Replacing a disk: the new backend gets the grid's header and every range the disk must hold becomes defect, so
//! `Engine::rebuild` (a recovery run, see `recovery`) fills it from the smaller intact parity group.
//!
//! **Invariants.**
//! - The replacement happens under an exclusive lock over the whole disk: no I/O of the disk is in flight while
//!   its slot, written map and defects change.
//! - A parity disk must hold its members' written ranges and the ranges of their pending deltas; all of them
//!   become defect.
//! - The new backend is wrapped like the disks opened with the grid (`OpenOptions::wrap_disk`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use permafrost_disk::{BlockDisk, Disk, FileDisk};

use super::Shared;
use crate::config::DiskSpec;
use crate::disks::DiskSlot;
use crate::header::DiskHeader;
use crate::journal::{RangeTable, ScrubRow};
use crate::locks::RangeLock;
use crate::rangeset::RangeSet;
use crate::{Error, Result};

impl Shared {
    pub(super) fn replace_disk(&self, disk: usize, spec: Option<DiskSpec>) -> Result<()> {
        self.check_disk(disk)?;
        self.mark_failed(disk, "being replaced")?;
        // No I/O of `disk` in flight while its slot and maps change: writers, drains, recoveries and readers all
        // hold a range lock of the disk while they use it.
        let _lock = self.lock(vec![RangeLock::exclusive(disk, 0, self.logical_bytes)]);
        // Not while the grid grows: both rewrite `config.disks`.
        let _grow = self.grow_mutex.lock();
        let mut config = self.config.read().clone();
        if let Some(spec) = spec {
            config.disks[disk] = spec;
        }
        let spec = config.disks[disk].clone();
        let path = spec.resolved_path(&self.dir);
        let controller = spec.power_controller(&self.dir)?;
        let backend: Arc<dyn Disk> = match &spec {
            DiskSpec::File { capacity_bytes, .. } => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        Error::Io(format!("cannot create {}: {e}", parent.display()))
                    })?;
                }
                Arc::new(FileDisk::create_or_replace(&path, *capacity_bytes)?)
            }
            DiskSpec::Block { .. } => Arc::new(BlockDisk::open(&path)?),
        };
        // The same wrapper as the disks opened with the grid (tests inject faults into replacements too).
        let backend = match &self.wrap_disk {
            Some(wrap) => wrap(disk, backend),
            None => backend,
        };
        let header = DiskHeader::new(
            config.grid_id,
            &self.geometry,
            disk,
            backend.capacity_bytes(),
            config.idr,
        );
        header.write(backend.as_ref())?;
        let slot = DiskSlot::build(
            backend,
            Arc::clone(&self.counters[disk]),
            &self.power,
            disk,
            config.idr,
        )?;
        if slot.idr.logical_capacity() < self.logical_bytes {
            return Err(Error::Header {
                disk,
                name: path.display().to_string(),
                message: format!(
                    "too small: {} logical bytes, the grid needs {}",
                    slot.idr.logical_capacity(),
                    self.logical_bytes
                ),
            });
        }
        config.save(&self.dir)?;
        *self.config.write() = config;
        self.power.set_controller(disk, controller);
        // Everything the disk must hold becomes defect: its own written ranges and, for a parity disk, those of
        // the members of the group it protects — where they were written *or* have pending deltas (an hP member
        // of a column holds data where only a delta not yet drained says so).
        let mut units = RangeSet::new();
        for group in self.geometry.groups_of(disk) {
            if self.geometry.group_parity(group) == disk {
                for &m in self.geometry.group_members(group) {
                    for (s, e) in self.pending_delta_units(m).iter() {
                        units.insert(s, e);
                    }
                }
            }
        }
        let mut maps = self.maps.lock();
        for (s, e) in maps.written[disk].iter() {
            units.insert(s, e);
        }
        for group in self.geometry.groups_of(disk) {
            if self.geometry.group_parity(group) == disk {
                for &m in self.geometry.group_members(group) {
                    for (s, e) in maps.written[m].iter() {
                        units.insert(s, e);
                    }
                }
            }
        }
        let mut defects = maps.defects[disk].clone();
        for (s, e) in units.iter() {
            defects.insert(
                s * self.stripe_bytes,
                (e * self.stripe_bytes).min(self.logical_bytes),
            );
        }
        self.journal.batch(|b| {
            b.replace_all_ranges(RangeTable::Written, disk, &RangeSet::new())?;
            b.replace_all_ranges(RangeTable::Defects, disk, &defects)?;
            b.set_scrub(disk, ScrubRow::default())?;
            b.clear_ages(disk)?;
            b.clear_failed(disk)
        })?;
        self.slots.write()[disk] = Arc::new(slot);
        maps.written[disk] = RangeSet::new();
        maps.defects[disk] = defects;
        maps.scrub[disk] = ScrubRow::default();
        maps.ages[disk].clear();
        maps.failed[disk] = false;
        self.counters[disk]
            .errors_in_a_row
            .store(0, Ordering::SeqCst);
        drop(maps);
        self.notify();
        Ok(())
    }
}
