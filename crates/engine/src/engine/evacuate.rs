//! Evacuating a disk before it fails: its contents move to a replacement (a new file or `--to` device) while it
//! still reads, and the old disk is then retired.
//!
//! An evacuation is a rebuild whose pieces are copied from the old disk: the replacement takes the disk's place
//! exactly as `replace_disk` does (everything the disk holds becomes defect, in the journal), the old disk stays
//! open as the evacuation's *source*, and the recovery run (`recover_disk`, with its locks, chunks, journal and
//! power accounting) fills each piece with the source's IDR-verified bytes, reconstructing from the grid only the
//! stripes the source cannot read (or reads as all-zero 4 KiB blocks where a scrub of the stripe cannot vouch for
//! them, as the read path judges zeros: a wiped stretch reads as zeros without complaint).
//!
//! **Invariants.**
//! - Only a data disk (parity of no group) is copied: no delta is ever drained onto it, so a range still defect on
//!   the replacement holds exactly what the old disk holds. A parity disk's replacement is reconstructed from the
//!   grid (drains may have changed its ranges since), which is correct and only slower.
//! - The evacuation's record (`evacuations.json` in the grid directory: the disk, the old and the new spec, the
//!   state) is durable before the replacement takes the disk's place, so a restart finds the old disk again and
//!   resumes from the defects the journal still holds; nothing copied is copied twice.
//! - The old disk is retired (state `retired` in the record, shown by `grid status`) only after every defect of
//!   the replacement was recovered and journaled.
//! - While a data disk is evacuated, a reader of its ranges not yet copied gets them from the old disk
//!   (IDR-verified, under the reader's shared lock of the range, the same bytes the copy would write), not from
//!   the whole parity group, so a read during an evacuation spins only the disk being evacuated; a range the old
//!   disk cannot serve is reconstructed as without an evacuation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use permafrost_disk::{BlockDisk, Disk, FileDisk};
use serde::{Deserialize, Serialize};

use super::{CrashPoint, Engine, RecoveryReport, Shared};
use crate::buffer_pool::BufferPool;
use crate::config::DiskSpec;
use crate::delta::Snapshot;
use crate::disks::DiskSlot;
use crate::journal::now_ms;
use crate::{Error, Result};

/// The file in the grid directory that records evacuations.
pub const EVACUATIONS_FILE: &str = "evacuations.json";

/// Where an evacuation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvacuationState {
    /// Copying to the replacement (`grid evacuate` again resumes it).
    Copying,
    /// Done: the replacement holds everything and the old disk is no longer part of the grid.
    Retired,
}

/// One evacuation of a disk position, as recorded in `evacuations.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evacuation {
    pub disk: usize,
    /// The old disk (retired at the end).
    pub source: DiskSpec,
    /// The replacement that takes its place.
    pub target: DiskSpec,
    pub state: EvacuationState,
    pub started_ms: u64,
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// Bytes copied from the old disk and bytes reconstructed from the grid (over all runs).
    #[serde(default)]
    pub bytes_copied: u64,
    #[serde(default)]
    pub bytes_reconstructed: u64,
}

/// What [`Engine::evacuate`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EvacuationReport {
    pub disk: usize,
    /// Bytes this run copied from the old disk (IDR-verified).
    pub bytes_copied: u64,
    /// Bytes this run reconstructed from the grid (unreadable on the old disk, or a parity disk).
    pub bytes_reconstructed: u64,
    /// Bytes readers were served from the old disk while this run copied (ranges not yet copied).
    pub bytes_served_to_readers: u64,
    /// True when the old disk is retired (every byte is on the replacement).
    pub retired: bool,
    /// The recovery run underneath.
    pub recovery: RecoveryReport,
}

/// An old disk being evacuated, open for reading.
pub(crate) struct EvacuationSource {
    slot: DiskSlot,
    copied: AtomicU64,
    reconstructed: AtomicU64,
    served: AtomicU64,
}

/// The evacuation sources of an open grid, by disk position.
pub(crate) type EvacuationSources = parking_lot::Mutex<HashMap<usize, Arc<EvacuationSource>>>;

/// The evacuations recorded in the grid directory `dir` (none when there is no record).
pub fn evacuations(dir: &Path) -> Result<Vec<Evacuation>> {
    let path = dir.join(EVACUATIONS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::Config(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::Io(format!("cannot read {}: {e}", path.display()))),
    }
}

/// Write the record durably: a temporary file, synced, renamed over the old one, and the directory synced.
fn save_evacuations(dir: &Path, list: &[Evacuation]) -> Result<()> {
    let path = dir.join(EVACUATIONS_FILE);
    let tmp = dir.join(format!("{EVACUATIONS_FILE}.tmp"));
    let io = |e: std::io::Error| Error::Io(format!("cannot write {}: {e}", path.display()));
    let bytes = serde_json::to_vec_pretty(list).map_err(|e| Error::Config(e.to_string()))?;
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        file.write_all(&bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, &path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

/// The default replacement of a file-backed disk: a new file beside it, of the same size.
fn default_target(disk: usize, source: &DiskSpec, started_ms: u64) -> Result<DiskSpec> {
    match source {
        DiskSpec::File { capacity_bytes, .. } => Ok(DiskSpec::File {
            path: PathBuf::from(format!("disks/disk-{disk:02}-evacuated-{started_ms}.img")),
            capacity_bytes: *capacity_bytes,
        }),
        DiskSpec::Block { .. } => Err(Error::InvalidArgument(format!(
            "disk {disk} is a block device: give the replacement device to evacuate it to"
        ))),
    }
}

impl Engine {
    /// Evacuate `disk` to `to` (default: a new file beside a file-backed disk): the replacement takes the disk's
    /// place and is filled from the old disk, range by range, falling back to the grid for what the old disk
    /// cannot read; then the old disk is retired. Resumes an evacuation of `disk` recorded as copying (after a
    /// crash or a close); `to` must then be the recorded target or none. `progress(done, total)` as for a rebuild.
    pub fn evacuate(
        &self,
        disk: usize,
        to: Option<DiskSpec>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<EvacuationReport> {
        let s = &self.shared;
        s.check_disk(disk)?;
        let mut list = evacuations(&s.dir)?;
        let index = match list
            .iter()
            .position(|e| e.disk == disk && e.state == EvacuationState::Copying)
        {
            Some(i) => {
                if to.as_ref().is_some_and(|t| *t != list[i].target) {
                    return Err(Error::InvalidArgument(format!(
                        "disk {disk} is already being evacuated to {:?}: run the evacuation again without a \
                         target to resume it",
                        list[i].target
                    )));
                }
                tracing::info!("resuming the evacuation of disk {disk}");
                i
            }
            None => {
                if s.is_failed(disk) {
                    return Err(Error::DiskFailed {
                        disk,
                        message: "a failed disk cannot be evacuated: replace and rebuild it".into(),
                    });
                }
                let source = s.config.read().disks[disk].clone();
                let started_ms = now_ms();
                let target = match to {
                    Some(t) => t,
                    None => default_target(disk, &source, started_ms)?,
                };
                if target.resolved_path(&s.dir) == source.resolved_path(&s.dir) {
                    return Err(Error::InvalidArgument(format!(
                        "disk {disk} cannot be evacuated onto itself"
                    )));
                }
                list.push(Evacuation {
                    disk,
                    source,
                    target,
                    state: EvacuationState::Copying,
                    started_ms,
                    finished_ms: None,
                    bytes_copied: 0,
                    bytes_reconstructed: 0,
                });
                save_evacuations(&s.dir, &list)?;
                tracing::info!("evacuating disk {disk}");
                list.len() - 1
            }
        };
        let record = list[index].clone();
        let source = Arc::new(s.open_evacuation_source(disk, &record.source)?);
        s.evacuation_sources
            .lock()
            .insert(disk, Arc::clone(&source));
        let result = (|| {
            if s.config.read().disks[disk] != record.target {
                s.replace_disk(disk, Some(record.target.clone()))?;
            }
            s.recover_disk(disk, progress)
        })();
        s.evacuation_sources.lock().remove(&disk);
        let mut report = EvacuationReport {
            disk,
            bytes_copied: source.copied.load(Ordering::SeqCst),
            bytes_reconstructed: source.reconstructed.load(Ordering::SeqCst),
            bytes_served_to_readers: source.served.load(Ordering::SeqCst),
            ..Default::default()
        };
        // Re-read the record: nothing else writes it for this disk, but keep other disks' entries as they are.
        let mut list = evacuations(&s.dir)?;
        let Some(entry) = list
            .iter_mut()
            .find(|e| e.disk == disk && e.state == EvacuationState::Copying)
        else {
            return Err(Error::Config(format!(
                "{EVACUATIONS_FILE} lost the evacuation of disk {disk}"
            )));
        };
        entry.bytes_copied += report.bytes_copied;
        entry.bytes_reconstructed += report.bytes_reconstructed;
        let recovery = match result {
            Ok(r) => r,
            Err(e) => {
                save_evacuations(&s.dir, &list)?;
                return Err(e);
            }
        };
        if recovery.unrecoverable.is_empty() && s.maps.lock().defects[disk].total() == 0 {
            entry.state = EvacuationState::Retired;
            entry.finished_ms = Some(now_ms());
            report.retired = true;
            tracing::info!(
                "disk {disk} evacuated ({} bytes copied, {} reconstructed); the old disk is retired",
                entry.bytes_copied,
                entry.bytes_reconstructed
            );
        }
        save_evacuations(&s.dir, &list)?;
        report.recovery = recovery;
        Ok(report)
    }

    /// The evacuations recorded for this grid (copying and retired).
    pub fn evacuations(&self) -> Result<Vec<Evacuation>> {
        evacuations(&self.shared.dir)
    }
}

impl Shared {
    /// Open the old disk of an evacuation for reading, wrapped as the grid's disks are (power, counters, tests'
    /// faults).
    fn open_evacuation_source(&self, disk: usize, spec: &DiskSpec) -> Result<EvacuationSource> {
        let path = spec.resolved_path(&self.dir);
        let backend: Arc<dyn Disk> = match spec {
            DiskSpec::File { .. } => Arc::new(FileDisk::open(&path)?),
            DiskSpec::Block { .. } => Arc::new(BlockDisk::open(&path)?),
        };
        let backend = match &self.wrap_disk {
            Some(wrap) => wrap(disk, backend),
            None => backend,
        };
        let idr = self.config.read().idr;
        let slot = DiskSlot::build(
            backend,
            Arc::clone(&self.counters[disk]),
            &self.power,
            disk,
            idr,
        )?;
        Ok(EvacuationSource {
            slot,
            copied: AtomicU64::new(0),
            reconstructed: AtomicU64::new(0),
            served: AtomicU64::new(0),
        })
    }

    /// The content a recovery writes to `disk` over `[offset, offset + len)` (stripe aligned): copied from the
    /// disk's evacuation source where it reads (stripe by stripe once a whole piece fails), reconstructed from
    /// the grid elsewhere (and always when the disk is not being evacuated or protects a group).
    pub(super) fn recovery_piece(
        &self,
        disk: usize,
        offset: u64,
        len: u64,
        snapshot: &Snapshot,
        pool: &BufferPool,
    ) -> Result<Vec<u8>> {
        let source = self.evacuation_sources.lock().get(&disk).cloned();
        let source = match source {
            Some(source) if !self.protects_a_group(disk) => source,
            Some(source) => {
                let data = self.reconstruct_piece(disk, offset, len, snapshot, pool)?;
                source.reconstructed.fetch_add(len, Ordering::Relaxed);
                return Ok(data);
            }
            None => return self.reconstruct_piece(disk, offset, len, snapshot, pool),
        };
        if offset >= self.config.read().recovery_chunk_bytes_max {
            self.crash_at(CrashPoint::EvacuationCopied)?;
        }
        let mut out = pool.take(len as usize);
        if self.read_trusted(&source, offset, &mut out) {
            source.copied.fetch_add(len, Ordering::Relaxed);
            return Ok(out);
        }
        let end = offset + len;
        let mut stripe = offset;
        while stripe < end {
            let stripe_end = (stripe + self.stripe_bytes).min(end);
            let part = &mut out[(stripe - offset) as usize..(stripe_end - offset) as usize];
            if self.read_trusted(&source, stripe, part) {
                source
                    .copied
                    .fetch_add(stripe_end - stripe, Ordering::Relaxed);
            } else {
                tracing::info!(
                    "disk {disk} bytes {stripe}..{stripe_end} unreadable on the disk being evacuated, \
                     reconstructed from the grid"
                );
                let data =
                    match self.reconstruct_piece(disk, stripe, stripe_end - stripe, snapshot, pool)
                    {
                        Ok(data) => data,
                        Err(e) => {
                            pool.give(out);
                            return Err(e);
                        }
                    };
                out[(stripe - offset) as usize..(stripe_end - offset) as usize]
                    .copy_from_slice(&data);
                pool.give(data);
                source
                    .reconstructed
                    .fetch_add(stripe_end - stripe, Ordering::Relaxed);
            }
            stripe = stripe_end;
        }
        Ok(out)
    }

    /// True when `disk` is the parity disk of a group.
    fn protects_a_group(&self, disk: usize) -> bool {
        self.geometry
            .groups_of(disk)
            .into_iter()
            .any(|g| self.geometry.group_parity(g) == disk)
    }

    /// A reader's `[offset, offset + buf.len())` of `disk` while the disk is being evacuated: its defect ranges
    /// (not yet copied) from the old disk, IDR-verified, the rest from the replacement. False (with `buf` in any
    /// state) when `disk` is not being evacuated, protects a group, or a part cannot be served this way (unreadable,
    /// or zeros IDR cannot vouch for, see [`Shared::read_trusted`]); the caller then reads as without an evacuation.
    /// The caller holds a shared lock over the range of `disk`: a range still defect under it holds on the
    /// replacement exactly what the old disk holds (nothing is written to a data disk's defect range before it is
    /// recovered).
    pub(super) fn read_evacuating(&self, disk: usize, offset: u64, buf: &mut [u8]) -> bool {
        let Some(source) = self.evacuation_sources.lock().get(&disk).cloned() else {
            return false;
        };
        if self.protects_a_group(disk) {
            return false;
        }
        let end = offset + buf.len() as u64;
        let mut at = offset;
        let mut served = 0;
        let mut defects = self.defects_in(disk, offset, end);
        defects.sort_unstable();
        for (s, e) in defects {
            let (s, e) = (s.max(at), e.min(end));
            if s >= e {
                continue;
            }
            if s > at
                && self
                    .read_true(
                        disk,
                        at,
                        &mut buf[(at - offset) as usize..(s - offset) as usize],
                        &Snapshot::default(),
                    )
                    .is_err()
            {
                return false;
            }
            if !self.read_source(
                &source,
                s,
                &mut buf[(s - offset) as usize..(e - offset) as usize],
            ) {
                return false;
            }
            served += e - s;
            at = e;
        }
        if at < end
            && self
                .read_true(
                    disk,
                    at,
                    &mut buf[(at - offset) as usize..],
                    &Snapshot::default(),
                )
                .is_err()
        {
            return false;
        }
        source.served.fetch_add(served, Ordering::Relaxed);
        true
    }

    /// Read `[offset, offset + buf.len())` (whole stripes) of the old disk `source`, IDR-verified; false when it
    /// does not read or holds an all-zero 4 KiB block in a stripe IDR cannot vouch for (never written, unverifiable
    /// or with repaired check blocks: a wiped stretch reads as zeros without complaint), as the read path judges
    /// the grid's own disks (`untrusted_zero_stripes`). Zeros a writer wrote (the padding of a stripe) are trusted.
    fn read_trusted(&self, source: &EvacuationSource, offset: u64, buf: &mut [u8]) -> bool {
        match source.slot.idr.read(offset, buf) {
            Ok(report) => self
                .untrusted_zero_stripes(&source.slot, offset, buf, report.check_blocks_repaired > 0)
                .is_ok_and(|untrusted| untrusted.is_empty()),
            Err(_) => false,
        }
    }

    /// `[offset, offset + part.len())` (defect on the replacement: the disk's written ranges when it was replaced)
    /// of the old disk `source`, read in whole stripes and IDR-verified (false when [`Shared::read_trusted`] is).
    fn read_source(&self, source: &EvacuationSource, offset: u64, part: &mut [u8]) -> bool {
        let end = offset + part.len() as u64;
        let (from, to) = self.stripe_range(offset, end);
        if (from, to) == (offset, end) {
            return self.read_trusted(source, offset, part);
        }
        let mut whole = vec![0u8; (to - from) as usize];
        if !self.read_trusted(source, from, &mut whole) {
            return false;
        }
        part.copy_from_slice(&whole[(offset - from) as usize..(end - from) as usize]);
        true
    }
}
