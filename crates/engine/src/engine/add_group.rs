//! Adding a parity group to a grown grid (`Engine::add_group`, docs/grid.md "Adding a parity group"): data disks
//! added since `grid init` (`grow`) leave the hPGs they widened for a new hPG whose parity disk `hP'` is a new
//! disk, in a column none of them uses. The parity is then computed by the recovery machinery.
//!
//! The steps, each safe to interrupt:
//! 1. open the grid and apply every pending parity delta (`flush`): a delta still pending for an old `hP` would
//!    XOR a moved member into it after the move; read the members' written ranges; close;
//! 2. create `hP'`'s file (or open its device) and write its header (the grown geometry's index, role parity); a
//!    crash here leaves a disk no geometry names, reused by the next run at the same index;
//! 3. one journal transaction, the commit point, records the group (`added_groups`: parity disk, hPG, column,
//!    members) and marks defect, over the written ranges of the members:
//!    - `hP'` (nothing computed yet) over all of them;
//!    - the old `hP` of each member (it still XORs the member in) over that member's;
//!    - the `vP` of each such old `hP`'s column (it XORs in the old `hP` as it is now) over the same;
//!    - the `vP` of `hP'`'s column (it does not include `hP'` yet) over all of them;
//! 4. `grid.toml` lists `hP'` (a crash before it is repaired on open from the journal's row);
//! 5. open the grid with the new geometry and recover every defect, `hP'` first, with the recovery runs of a
//!    rebuild (`recover_disk`: journaled per chunk, power-accounted, with progress). A crash during it leaves
//!    journaled defects: running the command again, or any open's background recovery, finishes it.
//!
//! **Invariants.**
//! - Before the commit point nothing the grid reads changed; after it the journal's `added_groups` rows are part of
//!   the geometry (`growth_steps`, `Geometry::grown_by`), and every parity that is not yet the XOR of its group
//!   under the new geometry is inside a defect range, so no read or reconstruction ever uses it.
//! - The recomputation never uses a parity it must recompute: each of them is defect in both of its groups
//!   (`hP'`: itself and the `vP` of its column; an old `hP`: itself and the `vP` of its column), so the only
//!   complete group of `hP'` and of an old `hP` is its hPG, and a `vP` waits for the `hP` of its column (peeling).
//! - Until the recomputation ends, the members' written ranges are protected by their columns only (and the rows
//!   they left by their old `hP`s' groups minus the moved disks): a reduced-redundancy window like a rebuild's.
//! - The grid must be closed (no server): an open engine's geometry only grows in place (`grow::GeometryCell`),
//!   and a group changes the hPG of disks that exist.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use permafrost_disk::{BlockDisk, Disk};
use permafrost_grid::{AddedDisk, AddedGroup, Geometry, GroupId, Growth, Role};
use serde::Serialize;

use super::{CrashPoint, Engine, OpenOptions, JOURNAL_FILE};
use crate::config::{DiskSpec, GridConfig};
use crate::header::DiskHeader;
use crate::journal::{AddedGroupRow, Journal, RangeTable};
use crate::rangeset::RangeSet;
use crate::{Error, Result};

/// Points where the test hook `AddGroup::crash_after` stops an add as if the process died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddGroupStep {
    /// The new parity disk's header is written; nothing is journaled.
    HeaderWritten,
    /// The journal transaction committed; `grid.toml` does not list the new parity disk yet.
    Committed,
    /// The recomputation journaled its first recovery chunk.
    Computing,
}

/// What to add: the members and the new parity disk.
#[derive(Debug, Clone)]
pub struct AddGroup {
    /// The data disks (added since `grid init`) that move into the new group.
    pub members: Vec<usize>,
    /// The new parity disk: a file to create (sparse) or a block device.
    pub spec: DiskSpec,
    /// Its column; chosen when `None` (the narrowest column none of the members uses).
    pub column: Option<usize>,
    /// Test hook: stop after this step as if the process died (`Error::SimulatedCrash`).
    #[doc(hidden)]
    pub crash_after: Option<AddGroupStep>,
}

/// Where [`Engine::add_group`] is, for progress lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddGroupPhase {
    /// Applying pending parity deltas and reading the members' written ranges.
    Preparing,
    /// Writing the new parity disk's header and committing the group.
    Committing,
    /// Computing the parity (bytes done of total).
    Computing,
}

/// What [`Engine::add_group`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AddedGroupReport {
    /// The new group's hPG number and parity disk.
    pub hpg: usize,
    pub parity: usize,
    pub column: usize,
    pub members: Vec<usize>,
    /// The parity disks recomputed: the old `hP`s the members left and the `vP`s concerned.
    pub recomputed: Vec<usize>,
    pub capacity_bytes: u64,
    /// Bytes of parity left to compute when this run started its computation (defects of the grid's disks).
    pub bytes_to_compute: u64,
    /// Bytes of parity computed by the runs of this call (the background recovery may have done part of the rest).
    pub bytes_computed: u64,
    /// Whether the group was already committed (this run resumed its computation).
    pub resumed: bool,
    pub geometry_version: u64,
    pub geometry: String,
    pub millis: u64,
}

/// One growth step as the journal records it: the disk it adds, the step, and the disk's spec (JSON).
pub(super) struct GrowthRow {
    pub disk: usize,
    pub growth: Growth,
    pub spec_json: String,
}

/// The journal's added disks and added groups merged in disk order, checked to follow the layout's `base` disks
/// without a gap.
pub(super) fn growth_steps(journal: &Journal, base: usize) -> Result<Vec<GrowthRow>> {
    let mut rows: Vec<GrowthRow> = journal
        .added_disks()?
        .into_iter()
        .map(|row| GrowthRow {
            disk: row.disk,
            growth: Growth::Disk(AddedDisk {
                hpg: row.hpg,
                column: row.column,
            }),
            spec_json: row.spec_json,
        })
        .collect();
    rows.extend(journal.added_groups()?.into_iter().map(|row| GrowthRow {
        disk: row.disk,
        growth: Growth::Group(AddedGroup {
            members: row.members,
            column: row.column,
        }),
        spec_json: row.spec_json,
    }));
    rows.sort_by_key(|row| row.disk);
    for (i, row) in rows.iter().enumerate() {
        if row.disk != base + i {
            return Err(Error::Config(format!(
                "{JOURNAL_FILE}: added disk {} where disk {} was expected (the added disks must follow the \
                 layout's {base} in order)",
                row.disk,
                base + i
            )));
        }
    }
    Ok(rows)
}

fn capacity_of(dir: &Path, spec: &DiskSpec) -> Result<u64> {
    Ok(match spec {
        DiskSpec::File { capacity_bytes, .. } => *capacity_bytes,
        DiskSpec::Block { .. } => BlockDisk::open(spec.resolved_path(dir))?.capacity_bytes(),
    })
}

fn crash(request: &AddGroup, step: AddGroupStep) -> Result<()> {
    if request.crash_after == Some(step) {
        return Err(Error::SimulatedCrash(CrashPoint::AddGroup(step)));
    }
    Ok(())
}

/// The group of `geometry` whose members are `members` (as a set), if it was added already: its index.
fn committed_group(geometry: &Geometry, members: &[usize]) -> Option<usize> {
    let wanted: BTreeSet<usize> = members.iter().copied().collect();
    geometry
        .added_groups()
        .iter()
        .position(|g| g.members.iter().copied().collect::<BTreeSet<_>>() == wanted)
}

impl Engine {
    /// Add a parity group to the (closed) grid in `dir`: see the module doc for the steps and what a crash leaves.
    /// Run again with the same members after a crash, it resumes (the group committed: only the computation is
    /// left). `progress(phase, done, total)`: the phase under way and, while computing, bytes of parity done.
    pub fn add_group(
        dir: impl AsRef<Path>,
        request: AddGroup,
        options: OpenOptions,
        progress: &dyn Fn(AddGroupPhase, u64, u64),
    ) -> Result<AddedGroupReport> {
        let started = Instant::now();
        let dir = dir.as_ref();
        let stored = Engine::stored_geometry(dir)?;
        let (resumed, recomputed) = match committed_group(&stored, &request.members) {
            Some(i) => {
                tracing::info!(
                    "the group of disks {:?} is committed (hPG {}): computing what is left of its parity",
                    request.members,
                    stored.added_group_hpg(i)
                );
                (true, Vec::new())
            }
            None => (false, Self::add_group_durable(dir, &request, progress)?),
        };

        // Step 5: compute the parity, hP' first.
        let engine = Engine::open_with(dir, options)?;
        let s = &engine.shared;
        let geometry: &Geometry = &s.geometry;
        let i = committed_group(geometry, &request.members).ok_or_else(|| {
            Error::Config("the added group is not in the grid's geometry after its commit".into())
        })?;
        let hpg = geometry.added_group_hpg(i);
        let parity = geometry.group_parity(GroupId::Horizontal(hpg));
        let mut order: Vec<usize> = vec![parity];
        {
            let maps = s.maps.lock();
            order.extend(
                (0..geometry.disks()).filter(|&d| d != parity && maps.defects[d].total() > 0),
            );
        }
        if let Some(&failed) = order.iter().find(|&&d| s.is_failed(d)) {
            return Err(Error::DiskFailed {
                disk: failed,
                message: "the parity of the added group cannot be computed while a disk is failed: replace and \
                          rebuild it (`grid replace`, `grid rebuild`), then run the add again"
                    .into(),
            });
        }
        let totals: Vec<u64> = {
            let maps = s.maps.lock();
            order.iter().map(|&d| maps.defects[d].total()).collect()
        };
        let total: u64 = totals.iter().sum();
        let crash_mid = request.crash_after == Some(AddGroupStep::Computing);
        let mut done_before = 0;
        let mut bytes_computed = 0;
        progress(AddGroupPhase::Computing, 0, total);
        for (&disk, &disk_total) in order.iter().zip(&totals) {
            let result = s.recover_disk(disk, &|done, _| {
                progress(
                    AddGroupPhase::Computing,
                    (done_before + done).min(total),
                    total,
                );
                if crash_mid && done > 0 {
                    // As if the process died after the first chunk was journaled: the run stops at the next.
                    s.stop.store(true, Ordering::SeqCst);
                }
            });
            let report = match result {
                Err(Error::Closed) if crash_mid => {
                    return Err(Error::SimulatedCrash(CrashPoint::AddGroup(
                        AddGroupStep::Computing,
                    )))
                }
                r => r?,
            };
            bytes_computed += report.bytes_recovered + report.bytes_recovered_concurrently;
            done_before += disk_total;
            if let Some(&(disk, offset, len)) = report.unrecoverable.first() {
                return Err(Error::Unrecoverable {
                    disk,
                    offset,
                    end: offset + len,
                    stuck: report.unrecoverable.iter().map(|r| r.0).collect(),
                });
            }
        }
        progress(AddGroupPhase::Computing, total, total);
        let left: Vec<usize> = {
            let maps = s.maps.lock();
            order
                .iter()
                .copied()
                .filter(|&d| maps.defects[d].total() > 0)
                .collect()
        };
        if let Some(&disk) = left.first() {
            return Err(Error::Unrecoverable {
                disk,
                offset: 0,
                end: 0,
                stuck: left,
            });
        }
        let recomputed = if resumed {
            order[1..].to_vec()
        } else {
            recomputed
        };
        let config = s.config.read().clone();
        // Step 4 again when a crash cut it off (the open repaired the list in memory only).
        let mut on_disk = GridConfig::load(dir)?;
        if on_disk.disks.len() < config.disks.len() {
            on_disk.disks = config.disks.clone();
            on_disk.save(dir)?;
        }
        let mut members = request.members.clone();
        members.sort_unstable();
        let report = AddedGroupReport {
            hpg,
            parity,
            column: geometry.column(parity),
            members,
            recomputed,
            capacity_bytes: capacity_of(dir, &config.disks[parity])?,
            bytes_to_compute: total,
            bytes_computed,
            resumed,
            geometry_version: geometry.version(),
            geometry: geometry.describe(),
            millis: started.elapsed().as_millis() as u64,
        };
        tracing::info!(
            "grid {}: parity group hPG {hpg} (disks {:?}, parity disk {parity}) complete: {} bytes of parity \
             computed in {} ms",
            config.grid_id,
            report.members,
            report.bytes_computed,
            report.millis
        );
        engine.close()?;
        Ok(report)
    }

    /// Steps 1 to 4 of the module doc. Returns the parity disks (other than the new one) made defect.
    fn add_group_durable(
        dir: &Path,
        request: &AddGroup,
        progress: &dyn Fn(AddGroupPhase, u64, u64),
    ) -> Result<Vec<usize>> {
        // Step 1: no pending delta, the members' written ranges.
        progress(AddGroupPhase::Preparing, 0, 0);
        let (geometry, written, stripe_bytes, logical_bytes, failed) = {
            let engine = Engine::open(dir)?;
            engine.flush()?;
            let s = &engine.shared;
            let geometry: Geometry = (*s.geometry).clone();
            let maps = s.maps.lock();
            let written: Vec<RangeSet> = request
                .members
                .iter()
                .map(|&m| maps.written.get(m).cloned().unwrap_or_default())
                .collect();
            let failed: Vec<usize> = (0..geometry.disks()).filter(|&d| maps.failed[d]).collect();
            drop(maps);
            let stripe = s.stripe_bytes;
            let logical = s.logical_bytes;
            engine.close()?;
            (geometry, written, stripe, logical, failed)
        };
        let mut config = GridConfig::load(dir)?;
        let journal = Journal::open(&dir.join(JOURNAL_FILE))?;
        // `config.disks` as the geometry has it (a leftover of an earlier attempt dropped).
        super::grow::load_geometry(dir, &mut config, &journal)?;
        let index = geometry.disks();
        let path = request.spec.resolved_path(dir);
        let name = path.display().to_string();
        let refuse =
            |message: String| Error::InvalidArgument(format!("cannot add the group: {message}"));
        if let Some(other) =
            (0..config.disks.len().min(index)).find(|&d| config.disks[d].resolved_path(dir) == path)
        {
            return Err(refuse(format!(
                "{name} is already disk {other} of this grid"
            )));
        }
        let capacity = capacity_of(dir, &request.spec)?;
        for &m in &request.members {
            if m < config.disks.len() {
                let size = capacity_of(dir, &config.disks[m])?;
                if size > capacity {
                    return Err(refuse(format!(
                        "the new parity disk ({capacity} bytes) is smaller than member disk {m} ({size} bytes)"
                    )));
                }
            }
        }
        let group_width = |group: GroupId| geometry.group_members(group).len();
        let column = match request.column {
            Some(c) => c,
            None => (0..geometry.layout().x)
                .filter(|&c| {
                    request
                        .members
                        .iter()
                        .all(|&m| m >= geometry.disks() || geometry.column(m) != c)
                })
                .min_by_key(|&c| (group_width(GroupId::Vertical(c)), c))
                .ok_or_else(|| refuse("every column holds one of the members".into()))?,
        };
        let group = AddedGroup {
            members: request.members.clone(),
            column,
        };
        let grown = geometry
            .with_added_group(&group)
            .map_err(|e| refuse(e.to_string()))?;
        let hpg = grown.hpgs() - 1;
        for g in [GroupId::Horizontal(hpg), GroupId::Vertical(column)] {
            if grown.group_members(g).len() > config.spinning_max {
                return Err(refuse(format!(
                    "{g:?} would be {} disks wide, more than spinning_max = {} (computing a parity spins a whole \
                     group)",
                    grown.group_members(g).len(),
                    config.spinning_max
                )));
            }
        }
        let vp = geometry.group_parity(GroupId::Vertical(column));
        if let Ok(size) = capacity_of(dir, &config.disks[vp]) {
            if capacity > size {
                return Err(refuse(format!(
                    "the new parity disk ({capacity} bytes) is larger than disk {vp} ({size} bytes), the parity of \
                     column {column}"
                )));
            }
        }
        // The defects of the commit, in bytes.
        let bytes = |units: &RangeSet| {
            let mut set = RangeSet::new();
            for (s, e) in units.iter() {
                set.insert(s * stripe_bytes, (e * stripe_bytes).min(logical_bytes));
            }
            set
        };
        let mut new_defects: std::collections::BTreeMap<usize, RangeSet> = Default::default();
        let mut add = |disk: usize, set: &RangeSet| {
            let entry = new_defects.entry(disk).or_default();
            for (s, e) in set.iter() {
                entry.insert(s, e);
            }
        };
        for (&m, units) in request.members.iter().zip(&written) {
            let set = bytes(units);
            let old_hp = geometry.parity_targets(m).hp;
            add(index, &set);
            add(old_hp, &set);
            add(
                geometry.group_parity(GroupId::Vertical(geometry.column(old_hp))),
                &set,
            );
            add(vp, &set);
        }
        if let Some(&disk) = new_defects.keys().find(|d| failed.contains(d)) {
            return Err(refuse(format!(
                "disk {disk}, whose parity the group changes, is failed: replace and rebuild it first"
            )));
        }

        // Step 2: the new parity disk and its header.
        progress(AddGroupPhase::Committing, 0, 0);
        let disk =
            super::grow::create_grid_disk(&request.spec, &path, config.grid_id, index, &|m| {
                refuse(format!("{name} {m}"))
            })?;
        debug_assert_eq!(grown.role(index), Role::HParity { hpg });
        DiskHeader::new(config.grid_id, &grown, index, capacity, config.idr)
            .write(disk.as_ref())?;
        disk.sync()?;
        drop(disk);
        crash(request, AddGroupStep::HeaderWritten)?;

        // Step 3: the commit point.
        let spec_json = serde_json::to_string(&request.spec)
            .map_err(|e| Error::Config(format!("cannot encode the disk's spec: {e}")))?;
        let existing = journal.ranges(RangeTable::Defects, grown.disks())?;
        journal.batch(|b| {
            b.add_group(&AddedGroupRow {
                disk: index,
                hpg,
                column,
                members: request.members.clone(),
                spec_json: spec_json.clone(),
            })?;
            b.replace_all_ranges(RangeTable::Written, index, &RangeSet::new())?;
            for (&disk, set) in &new_defects {
                let mut all = existing[disk].clone();
                for (s, e) in set.iter() {
                    all.insert(s, e);
                }
                b.replace_all_ranges(RangeTable::Defects, disk, &all)?;
            }
            Ok(())
        })?;
        tracing::info!(
            "grid {}: parity group hPG {hpg} committed: disks {:?} under the new parity disk {index} ({name}) in \
             column {column}; {} bytes of parity to compute on disks {:?}",
            config.grid_id,
            request.members,
            new_defects.values().map(RangeSet::total).sum::<u64>(),
            new_defects.keys().collect::<Vec<_>>()
        );
        crash(request, AddGroupStep::Committed)?;

        // Step 4: grid.toml lists it.
        if config.disks.len() == index {
            config.disks.push(request.spec.clone());
            config.save(dir)?;
        }
        Ok(new_defects
            .keys()
            .copied()
            .filter(|&d| d != index)
            .collect())
    }
}
