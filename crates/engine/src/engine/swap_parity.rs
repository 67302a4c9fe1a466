//! Parity swap (Unraid's "parity swap", docs/grid.md "Mixed sizes and parity swap"): a disk larger than a parity
//! disk takes that parity's place, and the old parity disk becomes a data disk of the grid.
//!
//! A data disk may not be larger than the parity disks of its row and column (its bytes beyond theirs could not be
//! protected). To bring a larger disk in, it becomes a parity disk instead: `Engine::swap_parity` (on a closed
//! grid, like `add_disk`). The steps, each idempotent and each recorded before the next starts:
//! 1. **Recorded**: the intent (the parity disk, the old and the new disk's specs, the old disk's new place) is
//!    written durably to `parity_swaps.json` in the grid directory, state `replacing`.
//! 2. **Replacing**: the old parity disk is brought up to date first: the parity deltas pending for it are
//!    drained onto it, and the record notes what it then vouches for (a [`ParityCopy`]: the journal's next write
//!    transaction id, the geometry version, and its defect ranges, which it does not vouch for). Then the larger
//!    disk replaces the parity disk exactly as `replace_disk` does (the old one is first marked failed in the
//!    journal, then the new one gets the grid's header and `grid.toml` names it, then one journal transaction
//!    makes every range the parity must hold defect); state `rebuilding`.
//! 3. **Rebuilding**: the recovery run (`recover_disk`: locked chunks, journaled, resumable) fills the new parity
//!    the way an evacuation fills a replacement (`evacuate`'s `recovery_piece`): each piece is copied from the old
//!    parity disk where it reads and IDR vouches for it, and reconstructed from the parity's group only where it
//!    does not (and, first, over the ranges the old disk did not vouch for). When no defect is left, state
//!    `moving`.
//! 4. **Moving**: the old parity disk gets a header of the grown geometry's next index and is added as a data disk
//!    (`add_disk`: one journal transaction in `added_disks` is the commit point, then `grid.toml`). Its written map
//!    is empty, so it reads as zeros whatever its bytes hold (the old parity), and the parity of its new row and
//!    column stays valid: nothing is recomputed. State `done`.
//!
//! **Invariants.**
//! - Every object reads byte-exact at every moment: the swap changes only the parity disk's position until the
//!   rebuild is complete, and a parity disk is never read for data unless a data disk fails. Between steps 2 and 3
//!   the grid runs with that parity missing (as during any rebuild): one failure fewer is tolerated for the ranges
//!   still defect.
//! - The old parity disk is never written before the new parity is complete (defects of the position all
//!   recovered and journaled), and it is never named by the grid at two positions: `grid.toml` names it at the
//!   parity's position until step 2, at none between steps 2 and 4, at the added position after.
//! - A crash at any point leaves a grid that opens and reads: the record says which step to redo, and every step
//!   checks what the grid already holds (the journal's failure mark, `grid.toml`, the journal's defects and added
//!   disks) before doing it again. Running `swap_parity` again resumes; a grid opened meanwhile recovers the new
//!   parity's defects in the background as after any replacement.
//! - The copy is valid only while nothing has changed the parity's ranges since the old disk was brought up to
//!   date: no drain of a delta and no write. The swap runs on a closed grid (the command holds the server's lock)
//!   and opens it with the background work paused (no drain, recovery or scrub runs but the swap's), so within
//!   one run nothing but the copy writes the parity. Between runs (a crash, then the grid opened for anything
//!   else) a write may land: every write starts a journaled transaction with a new id, and a delta for the parity
//!   exists only through one. So the copy is used only while the journal's next transaction id and the geometry
//!   version are still those recorded; otherwise the rest of the new parity is reconstructed from its group
//!   (correct, only slower). The old disk's own defects at that time are always reconstructed, never copied.
//! - One swap at a time; a swap is refused when a disk is failed (the fallback to reconstruction needs the group).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use permafrost_disk::{BlockDisk, Disk, FileDisk};
use permafrost_grid::{AddedDisk, Geometry, GroupId, Role};
use serde::{Deserialize, Serialize};

use super::{CrashPoint, Engine, OpenOptions, Shared, JOURNAL_FILE};
use crate::config::{DiskSpec, GridConfig};
use crate::header::DiskHeader;
use crate::journal::{now_ms, Journal};
use crate::{AddDisk, Error, Result};

/// The file in the grid directory that records parity swaps.
pub const PARITY_SWAPS_FILE: &str = "parity_swaps.json";

/// Where a parity swap stands (each state names the step to do next).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwapState {
    /// The new disk is to take the parity's place.
    Replacing,
    /// The new disk is the parity; its ranges are being filled (copied from the old parity disk, or reconstructed
    /// from its groups).
    Rebuilding,
    /// The new parity is complete; the old parity disk is to become a data disk.
    Moving,
    /// Done: the old parity disk is a data disk of the grid.
    Done,
}

/// Points where the test hook `SwapParity::crash_after` stops a swap as if the process died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapStep {
    /// The record is written; nothing else done.
    Recorded,
    /// The new disk replaced the parity (journaled); the record still says `replacing`.
    Replaced,
    /// The rebuild journaled its first recovery chunk.
    Rebuilding,
    /// The rebuild is complete; the record still says `rebuilding`.
    Rebuilt,
    /// The old parity disk's header names its new index; it is not added yet.
    HeaderWritten,
    /// The old parity disk is added (journal and `grid.toml`); the record still says `moving`.
    Added,
}

/// One parity swap, as recorded in `parity_swaps.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParitySwap {
    /// The parity position.
    pub parity: usize,
    /// The old parity disk (a data disk at the end).
    pub old: DiskSpec,
    /// The larger disk that becomes the parity.
    pub new: DiskSpec,
    /// The old disk's requested row (horizontal parity group) and column as a data disk (chosen when `None`).
    pub hpg: Option<usize>,
    pub column: Option<usize>,
    pub state: SwapState,
    pub started_ms: u64,
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// The old disk's index as a data disk, once added.
    #[serde(default)]
    pub data_disk: Option<usize>,
    /// Bytes of the new parity filled (over all runs): copied plus reconstructed.
    #[serde(default)]
    pub bytes_rebuilt: u64,
    /// What the old parity disk vouched for right before the replacement (`None` in records of swaps that rebuilt
    /// from the groups only, or until the replacement).
    #[serde(default)]
    pub copy: Option<ParityCopy>,
    /// Of `bytes_rebuilt`, the bytes copied from the old parity disk and those reconstructed from the grid.
    #[serde(default)]
    pub bytes_copied: u64,
    #[serde(default)]
    pub bytes_reconstructed: u64,
}

/// The old parity disk's contents as a source for the new parity, recorded right before the replacement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParityCopy {
    /// The journal's next write transaction id once the parity's pending deltas were drained onto the old disk: the
    /// copy is valid while it is still the next one (no write started since).
    pub next_txn: u64,
    /// The geometry version then (no disk or group added since).
    pub geometry_version: u64,
    /// Ranges `[start, end)` (logical bytes) the old disk did not vouch for (its defects then): reconstructed.
    pub untrusted: Vec<(u64, u64)>,
}

/// What to swap. `new` may be `None` to resume the swap in progress.
#[derive(Debug, Clone, Default)]
pub struct SwapParity {
    /// The parity disk to replace; `None` resumes the swap in progress.
    pub parity: Option<usize>,
    /// The larger disk (a file to create, or a block device).
    pub new: Option<DiskSpec>,
    /// Where the old parity disk goes as a data disk.
    pub hpg: Option<usize>,
    pub column: Option<usize>,
    /// Test hook: stop after this step as if the process died (`Error::SimulatedCrash`).
    #[doc(hidden)]
    pub crash_after: Option<SwapStep>,
}

/// What [`Engine::swap_parity`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParitySwapReport {
    pub parity: usize,
    /// The new parity disk's and the old one's paths.
    pub new_parity: String,
    pub old_parity: String,
    pub new_capacity_bytes: u64,
    pub old_capacity_bytes: u64,
    /// The old parity disk's place as a data disk.
    pub data_disk: usize,
    pub bucket: usize,
    pub hpg: usize,
    pub column: usize,
    /// Bytes of the new parity filled by this run: copied plus reconstructed.
    pub bytes_rebuilt: u64,
    /// Of those, the bytes copied from the old parity disk (IDR-verified) and those reconstructed from the grid.
    pub bytes_copied: u64,
    pub bytes_reconstructed: u64,
    /// True when this run resumed a swap recorded earlier.
    pub resumed: bool,
    pub geometry_version: u64,
    pub geometry: String,
    pub millis: u64,
}

/// The parity swaps recorded in the grid directory `dir` (none when there is no record).
pub fn parity_swaps(dir: &Path) -> Result<Vec<ParitySwap>> {
    let path = dir.join(PARITY_SWAPS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::Config(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::Io(format!("cannot read {}: {e}", path.display()))),
    }
}

fn save_swaps(dir: &Path, list: &[ParitySwap]) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(list).map_err(|e| Error::Config(e.to_string()))?;
    permafrost_disk::durable::write_durable(&dir.join(PARITY_SWAPS_FILE), &bytes)
        .map_err(|e| Error::Io(e.to_string()))
}

/// Update the swap in progress (the last entry) and save the record.
fn set_state(dir: &Path, list: &mut [ParitySwap], state: SwapState) -> Result<()> {
    let entry = list.last_mut().expect("a swap in progress");
    entry.state = state;
    if state == SwapState::Done {
        entry.finished_ms = Some(now_ms());
    }
    let parity = entry.parity;
    save_swaps(dir, list)?;
    tracing::info!("parity swap of disk {parity}: {state:?}");
    Ok(())
}

fn crash(request: &SwapParity, step: SwapStep) -> Result<()> {
    if request.crash_after == Some(step) {
        return Err(Error::SimulatedCrash(CrashPoint::ParitySwap(step)));
    }
    Ok(())
}

/// A disk's size without writing it: a file's configured size, a device's size.
fn capacity_of(dir: &Path, spec: &DiskSpec) -> Result<u64> {
    Ok(match spec {
        DiskSpec::File { capacity_bytes, .. } => *capacity_bytes,
        DiskSpec::Block { .. } => BlockDisk::open(spec.resolved_path(dir))?.capacity_bytes(),
    })
}

fn open_disk(dir: &Path, spec: &DiskSpec) -> Result<std::sync::Arc<dyn Disk>> {
    let path = spec.resolved_path(dir);
    Ok(match spec {
        DiskSpec::File { .. } => std::sync::Arc::new(FileDisk::open(&path)?),
        DiskSpec::Block { .. } => std::sync::Arc::new(BlockDisk::open(&path)?),
    })
}

/// The grid's configuration and geometry as the journal records them, with `grid.toml` made to follow.
fn stored(dir: &Path) -> Result<(GridConfig, Geometry)> {
    let mut config = GridConfig::load(dir)?;
    let journal = Journal::open(&dir.join(JOURNAL_FILE))?;
    let listed = config.disks.len();
    let geometry = super::grow::load_geometry(dir, &mut config, &journal)?;
    if config.disks.len() != listed {
        config.save(dir)?; // an add whose last step a crash cut off
    }
    Ok((config, geometry))
}

/// Is there a place (row, column) for one more data disk of `capacity` bytes, with parity disks at least as
/// large (`sizes`, by disk index)? The first such place, the requested one if given.
fn place_for(
    geometry: &Geometry,
    sizes: &[u64],
    capacity: u64,
    hpg: Option<usize>,
    column: Option<usize>,
) -> std::result::Result<(usize, usize), String> {
    let mut why = None;
    for h in 0..geometry.hpgs() {
        if hpg.is_some_and(|w| w != h) {
            continue;
        }
        for c in geometry.free_columns(h) {
            if column.is_some_and(|w| w != c) {
                continue;
            }
            let small = [GroupId::Horizontal(h), GroupId::Vertical(c)]
                .into_iter()
                .map(|g| geometry.group_parity(g))
                .find(|&p| sizes[p] < capacity);
            match small {
                None => return Ok((h, c)),
                Some(p) => {
                    why.get_or_insert(format!(
                        "row {h} column {c}: parity disk {p} ({} bytes) is smaller than the old parity disk \
                         ({capacity} bytes)",
                        sizes[p]
                    ));
                }
            }
        }
    }
    Err(why.unwrap_or_else(|| match (hpg, column) {
        (None, None) => "no row has a free column for the old parity disk".to_string(),
        _ => format!(
            "no free place at row {} column {} (a column holds one disk of each row)",
            hpg.map_or("any".into(), |h| h.to_string()),
            column.map_or("any".into(), |c| c.to_string())
        ),
    }))
}

impl Engine {
    /// The parity swaps recorded for the grid in `dir` (in progress and done).
    pub fn parity_swaps(dir: impl AsRef<Path>) -> Result<Vec<ParitySwap>> {
        parity_swaps(dir.as_ref())
    }

    /// Swap parity disk `request.parity` for the larger `request.new` on the (closed) grid in `dir`; the old parity
    /// disk becomes a data disk at `request.hpg`/`request.column` (chosen when `None`). See the module doc for the
    /// steps and what a crash leaves. Resumes the swap in progress (then `request.new` may be `None`).
    /// `progress(state, done, total)`: the step under way and, while rebuilding, the bytes rebuilt of the total.
    pub fn swap_parity(
        dir: impl AsRef<Path>,
        request: SwapParity,
        options: OpenOptions,
        progress: &dyn Fn(SwapState, u64, u64),
    ) -> Result<ParitySwapReport> {
        let started = Instant::now();
        let dir = dir.as_ref();
        let mut list = parity_swaps(dir)?;
        let in_progress = list.last().is_some_and(|s| s.state != SwapState::Done);
        let resumed = in_progress;
        if in_progress {
            let swap = list.last_mut().expect("checked");
            if request.parity.is_some_and(|p| p != swap.parity) {
                return Err(Error::InvalidArgument(format!(
                    "the swap of parity disk {} is not finished: run the swap again without a new disk to resume \
                     it first",
                    swap.parity
                )));
            }
            if request.new.as_ref().is_some_and(|n| *n != swap.new) {
                return Err(Error::InvalidArgument(format!(
                    "parity disk {} is already being swapped for {}: run the swap again without a new disk to \
                     resume it",
                    swap.parity,
                    swap.new.resolved_path(dir).display()
                )));
            }
            // The old disk's place may still be chosen again until it is added.
            if swap.state != SwapState::Done {
                if request.hpg.is_some() {
                    swap.hpg = request.hpg;
                }
                if request.column.is_some() {
                    swap.column = request.column;
                }
            }
            tracing::info!(
                "resuming the parity swap of disk {} ({:?})",
                swap.parity,
                swap.state
            );
        } else {
            let Some(parity) = request.parity else {
                return Err(Error::InvalidArgument(
                    "no parity swap is in progress: name the parity disk and the larger disk"
                        .into(),
                ));
            };
            let Some(new) = request.new.clone() else {
                return Err(Error::InvalidArgument(format!(
                    "give the larger disk that replaces parity disk {parity}"
                )));
            };
            list.push(Self::check_swap(dir, parity, new, &request)?);
            save_swaps(dir, &list)?;
            tracing::info!(
                "parity swap of disk {parity} recorded: {} becomes the parity",
                list.last()
                    .expect("pushed")
                    .new
                    .resolved_path(dir)
                    .display()
            );
            crash(&request, SwapStep::Recorded)?;
        }
        let swap = list.last().expect("a swap").clone();
        let parity = swap.parity;
        let mut filled = Filled::default();

        if matches!(swap.state, SwapState::Replacing | SwapState::Rebuilding) {
            // Paused: no drain, recovery or scrub runs but the swap's own, so nothing but the swap writes the
            // parity while its old disk is copied (see the invariants).
            let engine = Engine::open_paused(dir, options)?;
            let s = &engine.shared;
            if swap.state == SwapState::Replacing {
                progress(SwapState::Replacing, 0, 0);
                // A replacement whose journal transaction committed has the new disk named and the failure mark
                // cleared; one cut off before it left the position marked failed: do it (again).
                let replaced = s.config.read().disks[parity] == swap.new && !s.is_failed(parity);
                if !replaced {
                    // The old disk still holds the position: bring it up to date and note what it vouches for. A
                    // position marked failed is a replacement cut off after that note, which stays as it is.
                    if !s.is_failed(parity) && s.config.read().disks[parity] == swap.old {
                        let copy = prepare_copy(s, parity)?;
                        list.last_mut().expect("a swap").copy = copy;
                        save_swaps(dir, &list)?;
                    }
                    s.replace_disk(parity, Some(swap.new.clone()))?;
                }
                crash(&request, SwapStep::Replaced)?;
                set_state(dir, &mut list, SwapState::Rebuilding)?;
            }
            if s.is_failed(parity) {
                return Err(Error::DiskFailed {
                    disk: parity,
                    message: "the new parity disk failed during the swap: replace it (`grid replace`) and run \
                              the swap again"
                        .into(),
                });
            }
            let result = fill_new_parity(s, &list, &request, progress, &mut filled);
            let entry = list.last_mut().expect("a swap");
            entry.bytes_rebuilt += filled.copied + filled.reconstructed;
            entry.bytes_copied += filled.copied;
            entry.bytes_reconstructed += filled.reconstructed;
            match result {
                // As if the process died: nothing more is saved.
                Err(e @ Error::SimulatedCrash(_)) => return Err(e),
                Err(e) => {
                    save_swaps(dir, &list)?;
                    return Err(e);
                }
                Ok(()) => {}
            }
            crash(&request, SwapStep::Rebuilt)?;
            set_state(dir, &mut list, SwapState::Moving)?;
            tracing::info!(
                "parity swap of disk {parity}: the new parity is complete ({} bytes copied from the old parity \
                 disk, {} reconstructed from the grid, over all runs)",
                list.last().expect("a swap").bytes_copied,
                list.last().expect("a swap").bytes_reconstructed
            );
            engine.close()?;
        }

        let swap = list.last().expect("a swap").clone();
        if swap.state == SwapState::Moving {
            progress(SwapState::Moving, 0, 0);
            let (config, geometry) = stored(dir)?;
            let base = config.layout.disks();
            let added_at = (base..config.disks.len()).find(|&d| config.disks[d] == swap.old);
            if added_at.is_none() {
                if config.disks[parity] != swap.new {
                    return Err(Error::Config(format!(
                        "{PARITY_SWAPS_FILE}: parity disk {parity} is no longer the swap's new disk ({}); the \
                         old parity disk is left as it is",
                        swap.new.resolved_path(dir).display()
                    )));
                }
                resize_cut_file(dir, &swap.old)?;
                self::write_moved_header(dir, &config, &geometry, &swap)?;
                crash(&request, SwapStep::HeaderWritten)?;
                Engine::add_disk(
                    dir,
                    AddDisk {
                        spec: swap.old.clone(),
                        hpg: swap.hpg,
                        column: swap.column,
                    },
                )?;
                crash(&request, SwapStep::Added)?;
            }
            set_state(dir, &mut list, SwapState::Done)?;
        }

        // The report, from what the grid records now.
        let (config, geometry) = stored(dir)?;
        let swap = list.last().expect("a swap").clone();
        let base = config.layout.disks();
        let data_disk = (base..config.disks.len())
            .find(|&d| config.disks[d] == swap.old)
            .ok_or_else(|| {
                Error::Config(format!(
                    "{PARITY_SWAPS_FILE}: the swap of parity disk {parity} is done but the old disk is not in \
                     the grid"
                ))
            })?;
        if swap.data_disk != Some(data_disk) {
            list.last_mut().expect("a swap").data_disk = Some(data_disk);
            save_swaps(dir, &list)?;
        }
        let bucket = match geometry.role(data_disk) {
            Role::Data { bucket } => bucket,
            _ => unreachable!("an added disk is a data disk"),
        };
        let added = geometry.added()[data_disk - base];
        let report = ParitySwapReport {
            parity,
            new_parity: swap.new.resolved_path(dir).display().to_string(),
            old_parity: swap.old.resolved_path(dir).display().to_string(),
            new_capacity_bytes: capacity_of(dir, &swap.new)?,
            old_capacity_bytes: capacity_of(dir, &swap.old)?,
            data_disk,
            bucket,
            hpg: added.hpg,
            column: added.column,
            bytes_rebuilt: filled.copied + filled.reconstructed,
            bytes_copied: filled.copied,
            bytes_reconstructed: filled.reconstructed,
            resumed,
            geometry_version: geometry.version(),
            geometry: geometry.describe(),
            millis: started.elapsed().as_millis() as u64,
        };
        tracing::info!(
            "parity swap of disk {parity} done: {} is the parity, the old parity disk is data disk {data_disk} \
             (bucket {bucket}, row {} column {})",
            report.new_parity,
            report.hpg,
            report.column
        );
        Ok(report)
    }

    /// Check a new swap before anything is recorded: the position is a parity disk, the new disk is larger and
    /// not part of the grid, no disk is failed, and the old disk has a place as a data disk.
    fn check_swap(
        dir: &Path,
        parity: usize,
        new: DiskSpec,
        request: &SwapParity,
    ) -> Result<ParitySwap> {
        let (config, geometry) = stored(dir)?;
        if parity >= geometry.disks() || !geometry.parity_disks().contains(&parity) {
            return Err(Error::InvalidArgument(format!(
                "disk {parity} is not a parity disk of this grid (parity disks: {:?})",
                geometry.parity_disks()
            )));
        }
        let old = config.disks[parity].clone();
        let new_path = new.resolved_path(dir);
        let name = new_path.display().to_string();
        let refuse = |message: String| Error::Header {
            disk: parity,
            name: name.clone(),
            message,
        };
        if let Some(d) =
            (0..config.disks.len()).find(|&d| config.disks[d].resolved_path(dir) == new_path)
        {
            return Err(refuse(format!("is already disk {d} of this grid")));
        }
        match &new {
            DiskSpec::File { .. } if new_path.exists() => {
                return Err(refuse("exists already; give a new file".into()))
            }
            DiskSpec::Block { .. } => {
                let disk = BlockDisk::open(&new_path)?;
                if let Ok(Some(h)) = DiskHeader::read(&disk) {
                    return Err(refuse(format!(
                        "already holds disk {} of grid {}; wipe its first {} bytes to reuse it",
                        h.disk_index,
                        h.grid_id,
                        crate::HEADER_BYTES
                    )));
                }
            }
            _ => {}
        }
        let old_capacity = capacity_of(dir, &old)?;
        let new_capacity = capacity_of(dir, &new)?;
        if new_capacity < old_capacity {
            return Err(refuse(format!(
                "smaller ({new_capacity} bytes) than parity disk {parity} ({old_capacity} bytes): a parity swap \
                 brings in a larger disk (`grid replace` puts in one of the same size)"
            )));
        }
        let failed = Journal::open(&dir.join(JOURNAL_FILE))?.failed_disks()?;
        if let Some((disk, why)) = failed.first() {
            return Err(Error::DiskFailed {
                disk: *disk,
                message: format!(
                    "{why}; replace and rebuild it before a parity swap (the swap reconstructs from its groups \
                     what the old parity disk cannot vouch for)"
                ),
            });
        }
        let mut sizes = Vec::with_capacity(config.disks.len());
        for (d, spec) in config.disks.iter().enumerate() {
            sizes.push(if d == parity {
                new_capacity
            } else {
                capacity_of(dir, spec).unwrap_or(u64::MAX)
            });
        }
        place_for(&geometry, &sizes, old_capacity, request.hpg, request.column).map_err(|why| {
            Error::InvalidArgument(format!(
                "parity disk {parity} cannot become a data disk: {why}"
            ))
        })?;
        Ok(ParitySwap {
            parity,
            old,
            new,
            hpg: request.hpg,
            column: request.column,
            state: SwapState::Replacing,
            started_ms: now_ms(),
            finished_ms: None,
            data_disk: None,
            bytes_rebuilt: 0,
            copy: None,
            bytes_copied: 0,
            bytes_reconstructed: 0,
        })
    }
}

/// Bytes of the new parity one run filled.
#[derive(Debug, Default)]
struct Filled {
    copied: u64,
    reconstructed: u64,
}

/// Bring the old parity disk up to date (drain the parity deltas pending for it) and note what it vouches for:
/// `None` when deltas are still pending (they could not be drained), so the new parity is reconstructed instead.
fn prepare_copy(s: &Shared, parity: usize) -> Result<Option<ParityCopy>> {
    s.drain(parity)?;
    if s.is_failed(parity) || !s.deltas.pending_of(parity).is_empty() {
        tracing::info!(
            "parity disk {parity} could not take its pending parity deltas: the new parity is reconstructed from \
             its groups, not copied"
        );
        return Ok(None);
    }
    let untrusted = s.maps.lock().defects[parity].iter().collect();
    Ok(Some(ParityCopy {
        next_txn: s.next_txn.load(Ordering::SeqCst),
        geometry_version: s.geometry.version(),
        untrusted,
    }))
}

/// Fill every defect range of the new parity disk (the swap's last entry in `list`): the ranges the old disk did
/// not vouch for from the grid first, then the rest through the recovery run with the old disk as the source its
/// pieces are copied from (`recovery_piece`), when the copy is still valid (no write since it was noted).
fn fill_new_parity(
    s: &Shared,
    list: &[ParitySwap],
    request: &SwapParity,
    progress: &dyn Fn(SwapState, u64, u64),
    filled: &mut Filled,
) -> Result<()> {
    let swap = list.last().expect("a swap");
    let parity = swap.parity;
    let next_txn = s.next_txn.load(Ordering::SeqCst);
    let copy = swap.copy.as_ref().filter(|c| {
        let valid = c.next_txn == next_txn && c.geometry_version == s.geometry.version();
        if !valid {
            tracing::info!(
                "the grid was written or grown since the old parity disk {parity} was brought up to date: the rest \
                 of the new parity is reconstructed from its groups, not copied"
            );
        }
        valid
    });
    let crash_mid = request.crash_after == Some(SwapStep::Rebuilding);
    let stopped = |e: Error| match e {
        Error::Closed if crash_mid => {
            Error::SimulatedCrash(CrashPoint::ParitySwap(SwapStep::Rebuilding))
        }
        e => e,
    };
    if let Some(copy) = copy {
        for &(start, end) in &copy.untrusted {
            let mut recovered = 0;
            let result = s.recover_range(parity, start, end, &mut recovered);
            filled.reconstructed += recovered;
            result.map_err(stopped)?;
        }
    }
    let source = match copy {
        None => None,
        Some(_) => match s.open_evacuation_source(parity, &swap.old) {
            Ok(mut source) => {
                source.copies_parity = true;
                Some(Arc::new(source))
            }
            Err(e) => {
                tracing::warn!(
                    "the old parity disk {} cannot be opened ({e}): the new parity is reconstructed from its \
                     groups",
                    swap.old.resolved_path(&s.dir).display()
                );
                None
            }
        },
    };
    if let Some(source) = &source {
        s.evacuation_sources
            .lock()
            .insert(parity, Arc::clone(source));
    }
    let result = s.recover_disk(parity, &|done, total| {
        progress(SwapState::Rebuilding, done, total);
        if crash_mid && done > 0 {
            // As if the process died after the first chunk was journaled: the run stops at the next.
            s.stop.store(true, Ordering::SeqCst);
        }
    });
    s.evacuation_sources.lock().remove(&parity);
    let recovered = match &result {
        Ok(r) => r.bytes_recovered + r.bytes_recovered_concurrently,
        Err(_) => 0,
    };
    match &source {
        Some(source) => {
            let copied = source.copied.load(Ordering::SeqCst);
            filled.copied += copied;
            filled.reconstructed += source.reconstructed.load(Ordering::SeqCst);
        }
        None => filled.reconstructed += recovered,
    }
    let report = result.map_err(stopped)?;
    let left = s.maps.lock().defects[parity].total();
    if !report.unrecoverable.is_empty() || left > 0 {
        return Err(Error::Unrecoverable {
            disk: parity,
            offset: report.unrecoverable.first().map_or(0, |r| r.1),
            end: report.unrecoverable.first().map_or(0, |r| r.1 + r.2),
            stuck: report.unrecoverable.iter().map(|r| r.0).collect(),
        });
    }
    Ok(())
}

/// Give the old parity disk the header of the grown geometry's next index (role data), so `add_disk` takes it as
/// the disk it adds. Refused when the disk holds another grid's header (it was swapped by hand meanwhile).
/// The add of the old parity disk re-creates its file (`create_grid_disk`: truncated to 0 bytes, then sized), so
/// a process killed in between leaves a short file. The new parity is complete by then and the add re-creates the
/// file anyway: a file of another length than its capacity is sized again, so the resumed move can go on.
fn resize_cut_file(dir: &Path, spec: &DiskSpec) -> Result<()> {
    let DiskSpec::File { capacity_bytes, .. } = spec else {
        return Ok(());
    };
    let path = spec.resolved_path(dir);
    let len = std::fs::metadata(&path)
        .map_err(|e| Error::Io(format!("cannot read the length of {}: {e}", path.display())))?
        .len();
    if len != *capacity_bytes {
        tracing::warn!(
            "parity swap: the old parity disk {} is {len} bytes, not {capacity_bytes} (a move cut short); sized again",
            path.display()
        );
        FileDisk::create_or_replace(&path, *capacity_bytes)?;
    }
    Ok(())
}

fn write_moved_header(
    dir: &Path,
    config: &GridConfig,
    geometry: &Geometry,
    swap: &ParitySwap,
) -> Result<()> {
    let path: PathBuf = swap.old.resolved_path(dir);
    let index = geometry.disks();
    let disk = open_disk(dir, &swap.old)?;
    if let Ok(Some(h)) = DiskHeader::read(disk.as_ref()) {
        if h.grid_id != config.grid_id {
            return Err(Error::Header {
                disk: swap.parity,
                name: path.display().to_string(),
                message: format!(
                    "the old parity disk now holds a disk of grid {}; the swap cannot add it",
                    h.grid_id
                ),
            });
        }
    }
    let sizes: Vec<u64> = config
        .disks
        .iter()
        .map(|spec| capacity_of(dir, spec).unwrap_or(u64::MAX))
        .collect();
    let capacity = disk.capacity_bytes();
    let (hpg, column) = place_for(geometry, &sizes, capacity, swap.hpg, swap.column).map_err(|why| {
        Error::InvalidArgument(format!(
            "the old parity disk cannot become a data disk: {why}; the new parity is complete, run the swap \
             again with another --row/--column"
        ))
    })?;
    let grown = geometry
        .with_added_disk(AddedDisk { hpg, column })
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    DiskHeader::new(config.grid_id, &grown, index, capacity, config.idr).write(disk.as_ref())?;
    disk.sync()?;
    Ok(())
}

/// How `grid swap-parity` names a new disk: `--device PATH` or `--size BYTES` (for add-disk's refusal message).
pub(super) fn new_disk_argument(spec: &DiskSpec) -> String {
    match spec {
        DiskSpec::File { capacity_bytes, .. } => format!("--size {capacity_bytes}"),
        DiskSpec::Block { path, .. } => format!("--device {}", path.display()),
    }
}
