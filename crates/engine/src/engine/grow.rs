//! Growing a grid by one data disk at a time, closed (`Engine::add_disk`) or open (`Engine::add_disk_live`, a
//! running server), docs/grid.md "Growing a grid". Both run the same durable steps (`add_durable`).
//!
//! A disk never written reads as zeros (the written map), so a new data disk leaves the parity of its horizontal
//! parity group and of its column valid: nothing is recomputed, no other disk is opened for I/O, nothing spins.
//! The steps, each safe to interrupt:
//! 1. create the disk's file (or open its device) and write its header (the grown geometry's disk index, role
//!    data); a crash here leaves a disk no geometry names, reused by the next `add_disk` at the same index;
//! 2. one journal transaction records the disk (`added_disks`): the commit point, the geometry's version bumps;
//! 3. `grid.toml` lists the disk too (a crash before it is repaired on open from the journal's row).
//!
//! An open engine then grows what it holds per disk, the geometry last: the power manager's entry (the new disk
//! alone, Off), the disk's slot (its stack of counters, power and IDR), its maps (nothing written, no defect) and
//! the configuration. Until the geometry is published no thread names the new disk; a thread still working with
//! the geometry it read before is right too: the never-written disk adds zeros to its groups' parity.
//!
//! **Invariants.**
//! - The journal's `added_disks` rows, with its `added_groups` rows (`add_group`), are the geometry:
//!   `Geometry::grown_by(layout, rows in disk order)`; `grid.toml`'s `disks`
//!   follow it (an entry without a row, from a crash between steps 1 and 2, is ignored).
//! - A data disk is never larger than the parity disks of its groups (its bytes beyond theirs could not be
//!   protected), nor smaller than the grid's disks (every bucket has the grid's bucket capacity).
//! - A recovery of a group needs every member spinning: a group never grows beyond `spinning_max` disks.
//! - A geometry only grows: a disk index, once valid, keeps its role and groups' parity disks (`GeometryCell`).
//! - One growth at a time per engine, never during a replacement (`Shared::grow_mutex`).

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;
use permafrost_disk::{BlockDisk, Disk, FileDisk};
use permafrost_grid::{AddedDisk, Geometry, GroupId, Growth};
use serde::Serialize;

use super::{Engine, JOURNAL_FILE};
use crate::ages::RangeAges;
use crate::config::{DiskSpec, GridConfig};
use crate::disks::{DiskSlot, MissingDisk};
use crate::header::DiskHeader;
use crate::journal::{AddedDiskRow, Journal, ScrubRow};
use crate::rangeset::RangeSet;
use crate::{Error, Result};

/// The geometry of an open engine: the one it opened with, then the latest grown one. Dereferences to the
/// current geometry without holding a lock, so `&Geometry` can be handed out (`Engine::geometry`) and kept:
/// a grown geometry is leaked on purpose (a few hundred bytes per disk added during the process's life), so a
/// reference taken before a growth stays valid, and stays right for every disk it names (geometries only grow).
pub(crate) struct GeometryCell {
    opened: Geometry,
    grown: RwLock<Option<&'static Geometry>>,
}

impl GeometryCell {
    pub(crate) fn new(opened: Geometry) -> GeometryCell {
        GeometryCell {
            opened,
            grown: RwLock::new(None),
        }
    }

    /// Make `grown` the current geometry (it must extend the current one).
    fn publish(&self, grown: Geometry) {
        debug_assert!(grown.disks() > self.disks());
        *self.grown.write() = Some(Box::leak(Box::new(grown)));
    }
}

impl Deref for GeometryCell {
    type Target = Geometry;

    fn deref(&self) -> &Geometry {
        match *self.grown.read() {
            Some(grown) => grown,
            None => &self.opened,
        }
    }
}

/// What to add: a disk, and optionally where.
#[derive(Debug, Clone)]
pub struct AddDisk {
    /// The new disk: a file to create (sparse) or a block device.
    pub spec: DiskSpec,
    /// Its horizontal parity group (the "row"); chosen when `None`.
    pub hpg: Option<usize>,
    /// Its column; chosen when `None`.
    pub column: Option<usize>,
}

/// What [`Engine::add_disk`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AddedDiskReport {
    /// The new disk's index and bucket.
    pub disk: usize,
    pub bucket: usize,
    pub hpg: usize,
    pub column: usize,
    /// Its parity disks (`hP` of its group, `vP` of its column).
    pub hp: usize,
    pub vp: usize,
    pub capacity_bytes: u64,
    /// The geometry's version after the add (0 = as created).
    pub geometry_version: u64,
    /// The grid after the add, e.g. `8x6:4+1 +1 disk (hPG 0 col 5)`.
    pub geometry: String,
    /// Wall time of the add.
    pub millis: u64,
}

/// The geometry the journal records, with `config.disks` made to follow it: a disk the journal added but
/// `grid.toml` does not list yet gets the spec recorded with it; a listed disk the journal does not know is
/// dropped (an add that did not reach its commit point).
pub(super) fn load_geometry(
    dir: &Path,
    config: &mut GridConfig,
    journal: &Journal,
) -> Result<Geometry> {
    let base = config.layout.disks();
    // Added data disks and added parity groups, in disk order (`add_group`).
    let rows = super::add_group::growth_steps(journal, base)?;
    let added: Vec<Growth> = rows.iter().map(|row| row.growth.clone()).collect();
    let geometry = Geometry::grown_by(config.layout, &added)
        .map_err(|e| Error::Config(format!("{JOURNAL_FILE}: the grid's added disks: {e}")))?;
    if config.disks.len() > geometry.disks() {
        tracing::warn!(
            "{}: {} disks listed beyond the {} of the grid's geometry (an add that did not finish); ignoring them",
            dir.join(crate::CONFIG_FILE).display(),
            config.disks.len() - geometry.disks(),
            geometry.disks()
        );
        config.disks.truncate(geometry.disks());
    }
    for row in &rows[config.disks.len().saturating_sub(base).min(rows.len())..] {
        let spec: DiskSpec = serde_json::from_str(&row.spec_json).map_err(|e| {
            Error::Config(format!(
                "{JOURNAL_FILE}: the spec of added disk {}: {e}",
                row.disk
            ))
        })?;
        config.disks.push(spec);
    }
    Ok(geometry)
}

/// Raw capacity of a configured disk without any I/O: a file's configured size, a device's size (an ioctl, which
/// does not spin the drive up). `None` when a device cannot be opened.
fn configured_capacity(dir: &Path, spec: &DiskSpec) -> Option<u64> {
    match spec {
        DiskSpec::File { capacity_bytes, .. } => Some(*capacity_bytes),
        DiskSpec::Block { .. } => BlockDisk::open(spec.resolved_path(dir))
            .ok()
            .map(|d| d.capacity_bytes()),
    }
}

impl Engine {
    /// The geometry of the grid in `dir` as its configuration and journal record it, without opening any disk.
    pub fn stored_geometry(dir: impl AsRef<Path>) -> Result<Geometry> {
        let dir = dir.as_ref();
        let mut config = GridConfig::load(dir)?;
        let journal = Journal::open(&dir.join(JOURNAL_FILE))?;
        load_geometry(dir, &mut config, &journal)
    }

    /// Add a data disk to the (closed) grid in `dir`: see the module doc. No other disk is read, written or spun
    /// up. The grid must not be open elsewhere: a running server grows with [`Engine::add_disk_live`].
    pub fn add_disk(dir: impl AsRef<Path>, request: AddDisk) -> Result<AddedDiskReport> {
        let started = Instant::now();
        let dir = dir.as_ref();
        let mut config = GridConfig::load(dir)?;
        let journal = Journal::open(&dir.join(JOURNAL_FILE))?;
        let geometry = load_geometry(dir, &mut config, &journal)?;
        let (_, mut report) = add_durable(dir, &config, &journal, &geometry, &request)?;
        // Step 3: grid.toml lists it.
        config.disks.push(request.spec);
        config.save(dir)?;
        report.millis = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Add a data disk to this open grid (a running server): the durable steps of [`Engine::add_disk`], then the
    /// engine grows every per-disk structure in place (module doc). No other disk is read, written or spun up;
    /// reads and writes go on meanwhile, and the new bucket takes writes as soon as this returns.
    pub fn add_disk_live(&self, request: AddDisk) -> Result<AddedDiskReport> {
        let started = Instant::now();
        let s = &self.shared;
        if s.stopped() {
            return Err(Error::Closed);
        }
        let _one_at_a_time = s.grow_mutex.lock();
        // What can fail without the disk is done before the commit point.
        let controller = request.spec.power_controller(&s.dir)?;
        let config = s.config.read().clone();
        let (grown, mut report) = add_durable(&s.dir, &config, &s.journal, &s.geometry, &request)?;
        let index = report.disk;
        // Committed: from here on the grid has the disk, whatever fails below (the next open finds it).
        {
            let mut config = s.config.write();
            config.disks.push(request.spec.clone());
            if let Err(e) = config.save(&s.dir) {
                tracing::warn!(
                    "disk {index} added, but {} was not updated (the next open repairs it from the journal): {e}",
                    s.dir.join(crate::CONFIG_FILE).display()
                );
            }
        }
        let config = s.config.read().clone();
        let backend = super::open::open_backend(
            &s.dir,
            &config,
            &grown,
            index,
            &request.spec,
            s.wrap_disk.as_ref(),
        )?;
        let failed = backend.is_none();
        let backend: Arc<dyn Disk> = backend.unwrap_or_else(|| {
            Arc::new(MissingDisk {
                name: request.spec.resolved_path(&s.dir).display().to_string(),
                capacity_bytes: report.capacity_bytes,
            })
        });
        let power_index = s.power.add_disk(controller);
        if power_index != index {
            return Err(Error::Config(format!(
                "the power manager numbers the new disk {power_index}, the grid {index} (reopen the grid)"
            )));
        }
        let slot = DiskSlot::build(
            backend,
            Arc::clone(&s.counters[index]),
            &s.power,
            index,
            config.idr,
        )?;
        if slot.idr.logical_capacity() < s.logical_bytes {
            return Err(Error::Header {
                disk: index,
                name: slot.name.clone(),
                message: format!(
                    "too small: {} logical bytes, the grid's buckets have {}",
                    slot.idr.logical_capacity(),
                    s.logical_bytes
                ),
            });
        }
        s.slots.write().push(Arc::new(slot));
        {
            let mut maps = s.maps.lock();
            maps.written.push(RangeSet::new());
            maps.defects.push(RangeSet::new());
            maps.failed.push(false);
            maps.scrub.push(ScrubRow::default());
            maps.ages.push(RangeAges::new());
        }
        s.geometry.publish(grown);
        if failed {
            s.mark_failed(index, "could not be opened right after it was added")?;
        }
        s.notify();
        report.millis = started.elapsed().as_millis() as u64;
        tracing::info!(
            "grid {}: the open grid grew to {} ({} ms); bucket {} takes writes now",
            config.grid_id,
            report.geometry,
            report.millis,
            report.bucket
        );
        Ok(report)
    }
}

/// The durable steps 1 and 2 of adding a disk (module doc) to the grid in `dir` of `config`, `journal` and
/// `geometry`, shared by [`Engine::add_disk`] and [`Engine::add_disk_live`]: choose and check the place, write the
/// disk's header, commit the journal row. Returns the grown geometry and the report (its `millis` left to the
/// caller); step 3 (`grid.toml`) is the caller's.
fn add_durable(
    dir: &Path,
    config: &GridConfig,
    journal: &Journal,
    geometry: &Geometry,
    request: &AddDisk,
) -> Result<(Geometry, AddedDiskReport)> {
    {
        let index = geometry.disks();
        let path = request.spec.resolved_path(dir);
        let name = path.display().to_string();
        let refuse = |message: String| Error::Header {
            disk: index,
            name: name.clone(),
            message,
        };
        if let Some(other) =
            (0..config.disks.len()).find(|&d| config.disks[d].resolved_path(dir) == path)
        {
            return Err(refuse(format!("is already disk {other} of this grid")));
        }
        let capacity = match &request.spec {
            DiskSpec::File { capacity_bytes, .. } => *capacity_bytes,
            DiskSpec::Block { .. } => BlockDisk::open(&path)?.capacity_bytes(),
        };
        let sizes: Vec<Option<u64>> = config
            .disks
            .iter()
            .map(|spec| configured_capacity(dir, spec))
            .collect();
        if let Some(smallest) = sizes.iter().flatten().min() {
            if capacity < *smallest {
                return Err(refuse(format!(
                    "too small: {capacity} bytes, the grid's disks have at least {smallest}; every bucket of a \
                     grid has the same capacity"
                )));
            }
        }
        let group_size = |group: GroupId| geometry.group_members(group).len() + 1;
        let fits = |hpg: usize, column: usize| -> std::result::Result<(), String> {
            for (what, parity) in [
                (
                    format!("horizontal parity group {hpg}"),
                    geometry.group_parity(GroupId::Horizontal(hpg)),
                ),
                (
                    format!("column {column}"),
                    geometry.group_parity(GroupId::Vertical(column)),
                ),
            ] {
                if let Some(size) = sizes[parity] {
                    if capacity > size {
                        return Err(format!(
                            "is larger ({capacity} bytes) than disk {parity} ({}, {size} bytes), the parity disk of \
                             {what}: its bytes beyond the parity's could not be protected. Swap it in as that \
                             parity instead: `permafrost grid swap-parity --dir {} --parity {parity} {}` (the larger \
                             disk becomes parity disk {parity}, the old parity disk a data disk; restartable)",
                            config.disks[parity].resolved_path(dir).display(),
                            dir.display(),
                            super::swap_parity::new_disk_argument(&request.spec),
                        ));
                    }
                }
            }
            for group in [GroupId::Horizontal(hpg), GroupId::Vertical(column)] {
                if group_size(group) > config.spinning_max {
                    return Err(format!(
                        "would make {group:?} {} disks wide, more than spinning_max = {} (a recovery spins a whole \
                         group)",
                        group_size(group),
                        config.spinning_max
                    ));
                }
            }
            Ok(())
        };
        let (hpg, column) = match (request.hpg, request.column) {
            (Some(hpg), Some(column)) => {
                geometry
                    .with_added_disk(AddedDisk { hpg, column })
                    .map_err(|e| refuse(e.to_string()))?;
                fits(hpg, column).map_err(refuse)?;
                (hpg, column)
            }
            (hpg, column) => {
                // The place that keeps the groups narrowest: the smallest resulting hPG, then column, then the
                // lowest numbers.
                let mut best: Option<((usize, usize, usize, usize), String)> = None;
                let mut why_not = None;
                for h in 0..geometry.hpgs() {
                    if hpg.is_some_and(|wanted| wanted != h) {
                        continue;
                    }
                    for c in geometry.free_columns(h) {
                        if column.is_some_and(|wanted| wanted != c) {
                            continue;
                        }
                        match fits(h, c) {
                            Ok(()) => {
                                let key = (
                                    group_size(GroupId::Horizontal(h)),
                                    group_size(GroupId::Vertical(c)),
                                    h,
                                    c,
                                );
                                if best.as_ref().is_none_or(|(b, _)| key < *b) {
                                    best = Some((key, String::new()));
                                }
                            }
                            Err(e) => {
                                why_not.get_or_insert(e);
                            }
                        }
                    }
                }
                match best {
                    Some(((_, _, h, c), _)) => (h, c),
                    None => {
                        return Err(refuse(why_not.unwrap_or_else(|| {
                            "no horizontal parity group has a free column there (a column may hold one disk of \
                             each group)"
                                .to_string()
                        })))
                    }
                }
            }
        };
        let grown = geometry
            .with_added_disk(AddedDisk { hpg, column })
            .map_err(|e| refuse(e.to_string()))?;

        // Step 1: the disk and its header.
        let disk = create_grid_disk(&request.spec, &path, config.grid_id, index, &refuse)?;
        DiskHeader::new(config.grid_id, &grown, index, capacity, config.idr)
            .write(disk.as_ref())?;
        drop(disk);

        // Step 2: the commit point.
        let spec_json = serde_json::to_string(&request.spec)
            .map_err(|e| Error::Config(format!("cannot encode the disk's spec: {e}")))?;
        journal.batch(|b| {
            b.add_disk(&AddedDiskRow {
                disk: index,
                hpg,
                column,
                spec_json: spec_json.clone(),
            })
        })?;
        let targets = grown.parity_targets(index);
        let report = AddedDiskReport {
            disk: index,
            bucket: grown
                .disk_bucket(index)
                .expect("an added disk is a data disk"),
            hpg,
            column,
            hp: targets.hp,
            vp: targets.vp,
            capacity_bytes: capacity,
            geometry_version: grown.version(),
            geometry: grown.describe(),
            millis: 0,
        };
        tracing::info!(
            "grid {}: disk {index} ({name}) added as bucket {} in horizontal parity group {hpg} and column {column}; \
             geometry version {}",
            config.grid_id,
            report.bucket,
            report.geometry_version
        );
        Ok((grown, report))
    }
}

/// Open the disk `spec` names at `path` for grid index `index` of grid `grid_id`, before its header is written: a
/// file is created (a leftover file is reused only when its header is this very disk's, from an add that did not
/// reach its commit point); a block device is refused when it holds another grid's or another index's disk.
/// `refuse` words a refusal.
pub(super) fn create_grid_disk(
    spec: &DiskSpec,
    path: &Path,
    grid_id: uuid::Uuid,
    index: usize,
    refuse: &dyn Fn(String) -> Error,
) -> Result<Arc<dyn Disk>> {
    Ok(match spec {
        DiskSpec::File { capacity_bytes, .. } => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::Io(format!("cannot create {}: {e}", parent.display())))?;
            }
            if path.exists() {
                // Only the leftover of an add of this very disk that did not reach its commit point.
                let existing = FileDisk::open(path)?;
                match DiskHeader::read(&existing) {
                    Ok(Some(h)) if h.grid_id == grid_id && h.disk_index as usize == index => {}
                    _ => return Err(refuse("exists already; give a new file".to_string())),
                }
            }
            Arc::new(FileDisk::create_or_replace(path, *capacity_bytes)?)
        }
        DiskSpec::Block { .. } => {
            let disk = BlockDisk::open(path)?;
            if let Ok(Some(existing)) = DiskHeader::read(&disk) {
                if existing.grid_id != grid_id || existing.disk_index as usize != index {
                    return Err(refuse(format!(
                        "already holds disk {} of grid {}; wipe its first {} bytes to reuse it",
                        existing.disk_index,
                        existing.grid_id,
                        crate::HEADER_BYTES
                    )));
                }
            }
            Arc::new(disk)
        }
    })
}
