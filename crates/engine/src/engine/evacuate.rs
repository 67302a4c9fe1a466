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
//!   grid (drains may have changed its ranges since), which is correct and only slower. A parity swap's old parity
//!   disk is copied all the same (`copies_parity`): nothing changes its ranges while it is copied (`swap_parity`).
//! - The evacuation's record (`evacuations.json` in the grid directory: the disk, the old and the new spec, the
//!   state) is durable before the replacement takes the disk's place, so a restart finds the old disk again and
//!   resumes from the defects the journal still holds; nothing copied is copied twice.
//! - The old disk is retired (state `retired` in the record, shown by `grid status`) only after every defect of
//!   the replacement was recovered and journaled.
//! - While a data disk is evacuated, a reader of its ranges not yet copied gets them from the old disk
//!   (IDR-verified, under the reader's shared lock of the range, the same bytes the copy would write), not from
//!   the whole parity group, so a read during an evacuation spins only the disk being evacuated; a range the old
//!   disk cannot serve is reconstructed as without an evacuation.
//! - The evacuation comes before client reads of the disk (it may fail any moment): while it runs, each read of
//!   the disk's position waits for its turn before it takes any lock ([`ReaderShare`], `[evacuation]` in
//!   `grid.toml`): readers together get `reader_share` of the bytes the evacuation moved plus
//!   `reader_floor_bytes_per_s`, in arrival order, and no read waits longer than `reader_wait_ms_max`. A read
//!   waiting for its turn holds no lock, so it never holds up the copy; without an evacuation reads never wait.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use permafrost_disk::{BlockDisk, Disk, FileDisk};
use serde::{Deserialize, Serialize};

use super::{CrashPoint, Engine, RecoveryReport, Shared};
use crate::buffer_pool::BufferPool;
use crate::config::{DiskSpec, EvacuationConfig};
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
    /// Reads of the disk (chunks of a client's read) admitted while this run copied, and how many of them waited
    /// for their turn behind the evacuation (`[evacuation]` in `grid.toml`).
    pub reads_admitted: u64,
    pub reads_waited: u64,
    /// The longest a read of the disk waited for its turn, in ms (at most `reader_wait_ms_max`, give or take the
    /// timer's precision).
    pub read_wait_ms_longest: u64,
    /// True when the old disk is retired (every byte is on the replacement).
    pub retired: bool,
    /// The recovery run underneath.
    pub recovery: RecoveryReport,
}

/// An old disk being evacuated, open for reading.
pub(crate) struct EvacuationSource {
    slot: DiskSlot,
    pub(super) copied: AtomicU64,
    pub(super) reconstructed: AtomicU64,
    served: AtomicU64,
    /// The disk is a parity disk whose ranges nothing changes while it is copied (a parity swap on a closed grid,
    /// see `swap_parity`): its pieces are copied too.
    pub(super) copies_parity: bool,
    /// When the readers of the disk may read.
    admission: ReadAdmission,
}

/// Unused reader allowance kept for later, in bytes: a pause of the readers does not buy them a burst later
/// that would hold up the evacuation (a few read chunks of the default 8 MiB).
pub(crate) const READER_BURST_BYTES: u64 = 32 << 20;

/// Whether a read may go now ([`ReaderShare::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Read now.
    Now,
    /// Ask again after at most this many ms (sooner when the evacuation moved bytes meanwhile).
    WaitMs(u64),
}

/// The readers' share of a disk being evacuated, in bytes (a token bucket; the caller gives the time, so it is
/// a pure function of its calls). The bucket fills with `reader_share` of each byte the evacuation moves and
/// `reader_floor_bytes_per_s` of time, up to [`READER_BURST_BYTES`]; a read takes its bytes from it. Reads go in
/// arrival order: only the first waiting read is admitted from the bucket (once it holds the read's bytes, or
/// [`READER_BURST_BYTES`] for a larger read); any read that waited `reader_wait_ms_max` goes at once, its bytes
/// taken all the same (the bucket runs into debt, which later reads wait out), so no read waits longer.
#[derive(Debug)]
pub(crate) struct ReaderShare {
    config: EvacuationConfig,
    /// Bytes readers may read now (negative: owed by reads that went at their wait limit).
    credit: f64,
    /// The time the floor was last added.
    last_ms: u64,
    /// Tickets of the reads waiting for their turn, in arrival order.
    waiting: VecDeque<u64>,
    next_ticket: u64,
    /// The evacuation ended: every read goes at once.
    finished: bool,
}

impl ReaderShare {
    pub(crate) fn new(config: EvacuationConfig, now_ms: u64) -> ReaderShare {
        ReaderShare {
            config,
            credit: 0.0,
            last_ms: now_ms,
            waiting: VecDeque::new(),
            next_ticket: 0,
            finished: false,
        }
    }

    /// The evacuation moved `bytes` (copied or reconstructed).
    pub(crate) fn moved(&mut self, bytes: u64) {
        self.credit =
            (self.credit + self.config.reader_share * bytes as f64).min(READER_BURST_BYTES as f64);
    }

    /// The evacuation ended: every read, waiting or new, goes at once.
    pub(crate) fn finish(&mut self) {
        self.finished = true;
        self.waiting.clear();
    }

    /// A read arrives: its ticket (its place in the order).
    pub(crate) fn arrive(&mut self) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        if !self.finished {
            self.waiting.push_back(ticket);
        }
        ticket
    }

    /// May the read `ticket` of `len` bytes, waiting since `arrived_ms`, go at `now_ms`?
    pub(crate) fn admit(
        &mut self,
        ticket: u64,
        len: u64,
        arrived_ms: u64,
        now_ms: u64,
    ) -> Admission {
        let floor = self.config.reader_floor_bytes_per_s as f64;
        if now_ms > self.last_ms {
            self.credit = (self.credit + floor * (now_ms - self.last_ms) as f64 / 1000.0)
                .min(READER_BURST_BYTES as f64);
            self.last_ms = now_ms;
        }
        if self.finished {
            return Admission::Now;
        }
        let waited_ms = now_ms.saturating_sub(arrived_ms);
        let first = self.waiting.front() == Some(&ticket);
        let need = len.min(READER_BURST_BYTES) as f64;
        if waited_ms >= self.config.reader_wait_ms_max || (first && self.credit >= need) {
            self.waiting.retain(|&t| t != ticket);
            self.credit -= len as f64;
            return Admission::Now;
        }
        let limit_ms = self.config.reader_wait_ms_max - waited_ms;
        // Only the floor is sure to fill the bucket; the evacuation's bytes wake the caller sooner.
        let wait_ms = if first && floor > 0.0 {
            ((need - self.credit) / floor * 1000.0).ceil() as u64
        } else {
            limit_ms
        };
        Admission::WaitMs(wait_ms.clamp(1, limit_ms))
    }
}

/// [`ReaderShare`] for the threads of a running grid: readers wait in [`ReadAdmission::wait_turn`], the
/// evacuation reports its bytes in [`ReadAdmission::moved`].
pub(crate) struct ReadAdmission {
    share: parking_lot::Mutex<ReaderShare>,
    changed: parking_lot::Condvar,
    epoch: Instant,
    admitted: AtomicU64,
    waited: AtomicU64,
    wait_ms_longest: AtomicU64,
}

impl ReadAdmission {
    fn new(config: EvacuationConfig) -> ReadAdmission {
        ReadAdmission {
            share: parking_lot::Mutex::new(ReaderShare::new(config, 0)),
            changed: parking_lot::Condvar::new(),
            epoch: Instant::now(),
            admitted: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            wait_ms_longest: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Wait until a read of `len` bytes may go (at most `reader_wait_ms_max`). The caller holds no lock.
    fn wait_turn(&self, len: u64) {
        let mut share = self.share.lock();
        let arrived_ms = self.now_ms();
        let ticket = share.arrive();
        loop {
            match share.admit(ticket, len, arrived_ms, self.now_ms()) {
                Admission::Now => break,
                Admission::WaitMs(ms) => {
                    self.changed.wait_for(&mut share, Duration::from_millis(ms));
                }
            }
        }
        drop(share);
        // The next read in line may go now.
        self.changed.notify_all();
        let waited_ms = self.now_ms() - arrived_ms;
        self.admitted.fetch_add(1, Ordering::Relaxed);
        if waited_ms > 0 {
            self.waited.fetch_add(1, Ordering::Relaxed);
            self.wait_ms_longest.fetch_max(waited_ms, Ordering::Relaxed);
        }
    }

    fn moved(&self, bytes: u64) {
        self.share.lock().moved(bytes);
        self.changed.notify_all();
    }

    fn finish(&self) {
        self.share.lock().finish();
        self.changed.notify_all();
    }
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
        source.admission.finish();
        let mut report = EvacuationReport {
            disk,
            bytes_copied: source.copied.load(Ordering::SeqCst),
            bytes_reconstructed: source.reconstructed.load(Ordering::SeqCst),
            bytes_served_to_readers: source.served.load(Ordering::SeqCst),
            reads_admitted: source.admission.admitted.load(Ordering::SeqCst),
            reads_waited: source.admission.waited.load(Ordering::SeqCst),
            read_wait_ms_longest: source.admission.wait_ms_longest.load(Ordering::SeqCst),
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
    pub(super) fn open_evacuation_source(
        &self,
        disk: usize,
        spec: &DiskSpec,
    ) -> Result<EvacuationSource> {
        let path = spec.resolved_path(&self.dir);
        let backend: Arc<dyn Disk> = match spec {
            DiskSpec::File { .. } => Arc::new(FileDisk::open(&path)?),
            DiskSpec::Block { .. } => Arc::new(BlockDisk::open(&path)?),
        };
        let backend = match &self.wrap_disk {
            Some(wrap) => wrap(disk, backend),
            None => backend,
        };
        let (idr, priority) = {
            let config = self.config.read();
            (config.idr, config.evacuation)
        };
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
            copies_parity: false,
            admission: ReadAdmission::new(priority),
        })
    }

    /// A read of `len` bytes of `disk` waits here for its turn while the disk is being evacuated (see
    /// [`ReaderShare`]); at once otherwise. The caller holds no lock.
    pub(super) fn wait_evacuation_turn(&self, disk: usize, len: u64) {
        let source = self.evacuation_sources.lock().get(&disk).cloned();
        if let Some(source) = source {
            source.admission.wait_turn(len);
        }
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
            Some(source) if source.copies_parity || !self.protects_a_group(disk) => source,
            Some(source) => {
                let data = self.reconstruct_piece(disk, offset, len, snapshot, pool)?;
                source.reconstructed.fetch_add(len, Ordering::Relaxed);
                source.admission.moved(len);
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
            source.admission.moved(len);
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
            source.admission.moved(stripe_end - stripe);
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

#[cfg(test)]
mod reader_share_tests {
    use super::{Admission, ReaderShare, READER_BURST_BYTES};
    use crate::config::EvacuationConfig;

    const MB: u64 = 1_000_000;

    fn share(reader_share: f64, floor_bytes_per_s: u64, wait_ms_max: u64) -> ReaderShare {
        ReaderShare::new(
            EvacuationConfig {
                reader_share,
                reader_floor_bytes_per_s: floor_bytes_per_s,
                reader_wait_ms_max: wait_ms_max,
            },
            0,
        )
    }

    #[test]
    fn readers_get_their_share_of_the_bytes_the_evacuation_moved() {
        let mut s = share(0.1, 0, 60_000);
        let t = s.arrive();
        assert!(matches!(s.admit(t, 8 * MB, 0, 0), Admission::WaitMs(_)));
        s.moved(79 * MB);
        assert!(
            matches!(s.admit(t, 8 * MB, 0, 10), Admission::WaitMs(_)),
            "an 8 MB read went after the evacuation moved 79 MB (share 0.1)"
        );
        s.moved(MB);
        assert_eq!(s.admit(t, 8 * MB, 0, 20), Admission::Now);
        // The bytes are taken: the next read waits for the next 80 MB.
        let u = s.arrive();
        assert!(matches!(s.admit(u, 8 * MB, 20, 20), Admission::WaitMs(_)));
        s.moved(80 * MB);
        assert_eq!(s.admit(u, 8 * MB, 20, 30), Admission::Now);
    }

    #[test]
    fn the_floor_admits_reads_when_the_evacuation_moves_nothing() {
        let mut s = share(0.1, 8 * MB, 60_000);
        let t = s.arrive();
        // 8 MB at 8 MB/s: one second, and the read is told so.
        assert_eq!(s.admit(t, 8 * MB, 0, 0), Admission::WaitMs(1000));
        assert_eq!(s.admit(t, 8 * MB, 0, 500), Admission::WaitMs(500));
        assert_eq!(s.admit(t, 8 * MB, 0, 1000), Admission::Now);
    }

    #[test]
    fn no_read_waits_longer_than_the_limit() {
        let mut s = share(0.0, 0, 5000);
        let first = s.arrive();
        let second = s.arrive();
        // Nothing fills the bucket: each read is told to wait at most until its limit, then goes.
        assert_eq!(s.admit(first, MB, 0, 0), Admission::WaitMs(5000));
        assert_eq!(s.admit(second, MB, 100, 1000), Admission::WaitMs(4100));
        assert_eq!(s.admit(first, MB, 0, 4999), Admission::WaitMs(1));
        assert_eq!(s.admit(first, MB, 0, 5000), Admission::Now);
        assert_eq!(s.admit(second, MB, 100, 5100), Admission::Now);
        // Their bytes are owed: a share of 0.1 must first pay back 2 MB (20 MB moved) before 1 MB more goes.
        let mut s = share(0.1, 0, 5000);
        let (a, b) = (s.arrive(), s.arrive());
        assert_eq!(s.admit(a, MB, 0, 5000), Admission::Now);
        assert_eq!(s.admit(b, MB, 0, 5000), Admission::Now);
        let c = s.arrive();
        s.moved(29 * MB);
        assert!(matches!(s.admit(c, MB, 5000, 5000), Admission::WaitMs(_)));
        s.moved(MB);
        assert_eq!(s.admit(c, MB, 5000, 5000), Admission::Now);
    }

    #[test]
    fn reads_go_in_arrival_order() {
        let mut s = share(0.1, 0, 60_000);
        let big = s.arrive();
        let small = s.arrive();
        s.moved(20 * MB);
        // 2 MB in the bucket: enough for the small read, but the big one came first.
        assert!(matches!(s.admit(small, MB, 0, 0), Admission::WaitMs(_)));
        assert!(matches!(s.admit(big, 4 * MB, 0, 0), Admission::WaitMs(_)));
        s.moved(20 * MB);
        assert_eq!(s.admit(big, 4 * MB, 0, 0), Admission::Now);
        assert!(matches!(s.admit(small, MB, 0, 0), Admission::WaitMs(_)));
        s.moved(10 * MB);
        assert_eq!(s.admit(small, MB, 0, 0), Admission::Now);
    }

    #[test]
    fn unused_allowance_is_kept_only_up_to_the_burst() {
        let mut s = share(0.1, 8 * MB, 60_000);
        // A long evacuation without readers, then readers arrive: they get the burst, not the whole share.
        s.moved(100_000 * MB);
        let mut admitted = 0;
        let mut t = s.arrive();
        while s.admit(t, MB, 3_600_000, 3_600_000) == Admission::Now {
            admitted += MB;
            t = s.arrive();
        }
        assert!(
            admitted <= READER_BURST_BYTES,
            "{admitted} bytes in a burst"
        );
        assert!(
            admitted >= READER_BURST_BYTES - MB,
            "{admitted} bytes in a burst"
        );
    }

    #[test]
    fn a_read_larger_than_the_burst_goes_once_the_bucket_is_full() {
        let mut s = share(0.1, 0, 60_000);
        let t = s.arrive();
        s.moved(100_000 * MB);
        assert_eq!(s.admit(t, 2 * READER_BURST_BYTES, 0, 0), Admission::Now);
    }

    #[test]
    fn every_read_goes_once_the_evacuation_ended_or_without_a_wait_limit() {
        let mut s = share(0.1, 0, 60_000);
        let t = s.arrive();
        assert!(matches!(s.admit(t, MB, 0, 0), Admission::WaitMs(_)));
        s.finish();
        assert_eq!(s.admit(t, MB, 0, 0), Admission::Now);
        let u = s.arrive();
        assert_eq!(s.admit(u, MB, 0, 0), Admission::Now);
        // reader_wait_ms_max = 0: the priority is off.
        let mut s = share(0.1, 0, 0);
        let t = s.arrive();
        assert_eq!(s.admit(t, 100 * MB, 0, 0), Admission::Now);
    }
}
