//! Deterministic simulation of the engine under faults and crashes (in the spirit of TigerBeetle's VOPR and
//! FoundationDB's simulator): a seeded random schedule of thousands of operations on a small file-backed grid
//! (8x6:4+1) whose disks are wrapped in `FaultyDisk`s — writes in all three modes (appends into never-written
//! space and overwrites, some of all-zero data), reads, flushes, whole-disk failures, EIO ranges, flipped bits,
//! zeroed stripes and blanked disks, replacements with rebuilds, scrubs, clean reopens and crashes at every
//! `CrashPoint` — checked against a model of what every 4 KiB block of every bucket may contain.
//!
//! The model: a committed block has one allowed content; a block of a write that crashed or failed has the
//! contents it had before plus the new one (never anything else, once replay finished); the first read collapses
//! it to what it returned (a range nobody wrote must then read the same forever). Invariants checked after the
//! steps: every read matches the model; the disks the engine marks failed are among the ones the schedule
//! damaged; never more than 3 disks are damaged at once, so everything must stay readable; after a repair
//! (replace + rebuild + recover + scrub + flush) `verify_parity` is clean, no defect and no open promise is left.
//!
//! Background threads are paused (`Engine::open_paused`): the schedule decides when recovery and drains run, so a
//! seed replays the same run. On failure the seed and the last operations are printed; rerun one seed with
//! `PERMAFROST_SIM_SEED=<seed> cargo test -p permafrost-engine --test simulation -- --ignored --nocapture`, many
//! with `PERMAFROST_SIM_SEEDS=<count>`.

use std::collections::{BTreeSet, VecDeque};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use permafrost_disk::power::PowerProfile;
use permafrost_disk::{Disk, FaultHandle, FaultyDisk};
use permafrost_engine::{
    CrashPoint, Engine, Error, GridConfig, OpenOptions, WriteMode, HEADER_BYTES,
};
use permafrost_idr::{CodecKind, IdrConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BLOCK: u64 = 4096;
const DISKS: usize = 48;
/// s = 4: 256 KiB logical stripes of (2 + 4·17) physical blocks.
const SCRAMBLE_GROUPS: usize = 4;
const STRIPE_BYTES: u64 = SCRAMBLE_GROUPS as u64 * 16 * BLOCK;
const PHYSICAL_STRIPE_BYTES: u64 = (2 + SCRAMBLE_GROUPS as u64 * 17) * BLOCK;
const STRIPES_PER_DISK: u64 = 12;
const DISK_BYTES: u64 = HEADER_BYTES + STRIPES_PER_DISK * PHYSICAL_STRIPE_BYTES;
/// The grid survives any 3 failed disks; the schedule never damages more at once.
const DAMAGED_MAX: usize = 3;
/// Operations remembered for the failure report.
const LOG_LINES_MAX: usize = 40;

fn config() -> GridConfig {
    let mut config = GridConfig::with_file_disks("8x6:4+1".parse().unwrap(), DISK_BYTES);
    config.idr = IdrConfig {
        codec: CodecKind::Spc16,
        scramble_groups: SCRAMBLE_GROUPS,
    };
    config.power = PowerProfile {
        spin_up_ms: 0,
        idle_timeout_ms: 50,
        ..PowerProfile::for_tests()
    };
    config.chunk_bytes_max = 2 * STRIPE_BYTES;
    config.recovery_chunk_bytes_max = 4 * STRIPE_BYTES;
    config.delta_cache_bytes_max = 4 * STRIPE_BYTES;
    config.scrub_slice_bytes = 2 * STRIPE_BYTES;
    config.readahead_chunks = 2;
    config
}

/// Faults of one disk that survive a reopen (the wrapper re-applies them to the new `FaultyDisk`).
#[derive(Default, Clone)]
struct DiskFaults {
    failed: bool,
    eio: Vec<(u64, u64)>,
}

/// One opened disk: its fault handle and the raw backend (for zeroing behind the engine's back).
#[derive(Clone)]
struct Opened {
    handle: FaultHandle,
    raw: Arc<dyn Disk>,
}

type Table<T> = Arc<Mutex<Vec<T>>>;

fn block_hash(block: &[u8]) -> u64 {
    u64::from_le_bytes(blake3::hash(block).as_bytes()[..8].try_into().unwrap())
}

struct Sim {
    seed: u64,
    rng: StdRng,
    dir: tempfile::TempDir,
    engine: Option<Engine>,
    faults: Table<DiskFaults>,
    opened: Table<Option<Opened>>,
    /// Per bucket, per 4 KiB block: the hashes of the contents it may hold (one when committed).
    model: Vec<Vec<Vec<u64>>>,
    bucket_bytes: u64,
    /// Next append offset per bucket (everything below was written at least once).
    append_at: Vec<u64>,
    /// Disks with injected faults or failed, not yet repaired.
    damaged: BTreeSet<usize>,
    log: Arc<Mutex<VecDeque<String>>>,
    zero_hash: u64,
    stats: Stats,
    /// `PERMAFROST_SIM_VERBOSE=1`: print every operation as it runs.
    verbose: bool,
}

#[derive(Default, Debug)]
struct Stats {
    writes: u64,
    write_errors: u64,
    reads: u64,
    crashes: u64,
    reopens: u64,
    faults: u64,
    repairs: u64,
    rebuilds: u64,
}

type Check = Result<(), String>;

impl Sim {
    fn new(seed: u64, log: Arc<Mutex<VecDeque<String>>>) -> Sim {
        let dir = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        Engine::create(dir.path(), config())
            .expect("create grid")
            .close()
            .unwrap();
        let mut sim = Sim {
            seed,
            rng: StdRng::seed_from_u64(seed),
            dir,
            engine: None,
            faults: Arc::new(Mutex::new(vec![DiskFaults::default(); DISKS])),
            opened: Arc::new(Mutex::new(vec![None; DISKS])),
            model: Vec::new(),
            bucket_bytes: 0,
            append_at: Vec::new(),
            damaged: BTreeSet::new(),
            log,
            zero_hash: block_hash(&[0u8; BLOCK as usize]),
            stats: Stats::default(),
            verbose: std::env::var_os("PERMAFROST_SIM_VERBOSE").is_some(),
        };
        sim.open();
        sim.bucket_bytes = sim.engine().bucket_capacity_bytes();
        let buckets = sim.engine().buckets();
        let blocks = (sim.bucket_bytes / BLOCK) as usize;
        sim.model = vec![vec![vec![sim.zero_hash]; blocks]; buckets];
        sim.append_at = vec![0; buckets];
        sim
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("engine open")
    }

    fn note(&self, line: String) {
        if self.verbose {
            eprintln!("[seed {}] {line}", self.seed);
        }
        let mut log = self.log.lock();
        if log.len() == LOG_LINES_MAX {
            log.pop_front();
        }
        log.push_back(line);
    }

    fn open(&mut self) {
        let faults = Arc::clone(&self.faults);
        let opened = Arc::clone(&self.opened);
        let options = OpenOptions {
            wrap_disk: Some(Box::new(move |index, disk: Arc<dyn Disk>| {
                let (faulty, handle) = FaultyDisk::new(Arc::clone(&disk));
                let f = faults.lock()[index].clone();
                if f.failed {
                    handle.fail_disk();
                }
                for (s, e) in f.eio {
                    handle.eio_range(s, e - s);
                }
                opened.lock()[index] = Some(Opened { handle, raw: disk });
                Arc::new(faulty) as Arc<dyn Disk>
            })),
            power_profile: None,
        };
        self.engine = Some(Engine::open_paused(self.dir.path(), options).expect("reopen grid"));
    }

    /// Drop the engine (as a crash or a clean stop: nothing is flushed) and open it again: replay runs.
    fn reopen(&mut self) -> Check {
        self.stats.reopens += 1;
        drop(self.engine.take());
        self.open();
        self.recover("after reopen")
    }

    fn recover(&mut self, what: &str) -> Check {
        let report = self
            .engine()
            .recover_defects()
            .map_err(|e| format!("recover_defects {what}: {e}"))?;
        // A range may stay defect only where writing it back hit an injected EIO range.
        let faults = self.faults.lock();
        let unexplained: Vec<_> = report
            .unrecoverable
            .iter()
            .filter(|(disk, _, _)| faults[*disk].eio.is_empty())
            .collect();
        if !unexplained.is_empty() {
            return Err(format!(
                "recover_defects {what}: unrecoverable {unexplained:?} with damaged disks {:?}",
                self.damaged
            ));
        }
        Ok(())
    }

    fn random_data(&mut self, len: usize) -> Vec<u8> {
        let mut data = vec![0u8; len];
        if self.rng.gen_range(0..20) != 0 {
            self.rng.fill(&mut data[..]);
        }
        data
    }

    /// A write range: an append at the bucket's end of data when there is room (half of the time), else an
    /// overwrite anywhere. Lengths span one block to a bit more than two chunks.
    fn pick_write(&mut self, bucket: usize) -> (u64, u64) {
        let blocks = self.rng.gen_range(1..=5 * STRIPE_BYTES / BLOCK / 2);
        let len = blocks * BLOCK;
        let append = self.append_at[bucket];
        if self.rng.gen_bool(0.5) && append + len <= self.bucket_bytes {
            return (append, len);
        }
        let len = len.min(self.bucket_bytes);
        let offset = self.rng.gen_range(0..=(self.bucket_bytes - len) / BLOCK) * BLOCK;
        (offset, len)
    }

    fn commit_model(&mut self, bucket: usize, offset: u64, data: &[u8]) {
        for (i, block) in data.chunks(BLOCK as usize).enumerate() {
            self.model[bucket][(offset / BLOCK) as usize + i] = vec![block_hash(block)];
        }
        self.append_at[bucket] = self.append_at[bucket].max(offset + data.len() as u64);
    }

    fn uncertain_model(&mut self, bucket: usize, offset: u64, data: &[u8]) {
        for (i, block) in data.chunks(BLOCK as usize).enumerate() {
            let slot = &mut self.model[bucket][(offset / BLOCK) as usize + i];
            let h = block_hash(block);
            if !slot.contains(&h) {
                slot.push(h);
            }
        }
        self.append_at[bucket] = self.append_at[bucket].max(offset + data.len() as u64);
    }

    fn try_write(
        engine: &Engine,
        bucket: usize,
        offset: u64,
        data: &[u8],
        mode: WriteMode,
        pieces: usize,
    ) -> Result<Vec<u64>, Error> {
        let mut promise = engine.write(bucket, offset, data.len() as u64, mode)?;
        for piece in data.chunks(pieces) {
            promise.append(piece)?;
        }
        promise.commit()
    }

    fn op_write(&mut self, crash: Option<CrashPoint>) -> Check {
        let bucket = self.rng.gen_range(0..self.model.len());
        let mode = [WriteMode::Direct, WriteMode::Serialized, WriteMode::Delayed]
            [self.rng.gen_range(0..3)];
        let (offset, len) = self.pick_write(bucket);
        let data = self.random_data(len as usize);
        let pieces = self.rng.gen_range(1..=len as usize);
        self.note(format!(
            "write bucket {bucket} {offset}+{len} {mode} crash {crash:?}"
        ));
        self.stats.writes += 1;
        self.engine().set_crash_point(crash);
        let result = Sim::try_write(self.engine(), bucket, offset, &data, mode, pieces);
        self.engine().set_crash_point(None);
        match result {
            Ok(txns) => {
                self.commit_model(bucket, offset, &data);
                if crash == Some(CrashPoint::DrainHalfWritten) && mode == WriteMode::Delayed {
                    match self.engine().flush() {
                        Err(Error::SimulatedCrash(_)) => {
                            self.stats.crashes += 1;
                            self.note("  drain crashed".into());
                            return self.reopen();
                        }
                        Err(e) => return Err(format!("flush: {e}")),
                        Ok(()) => {}
                    }
                } else if self.rng.gen_range(0..10) == 0 {
                    for txn in txns {
                        self.engine()
                            .wait_persisted(txn)
                            .map_err(|e| format!("wait_persisted({txn}): {e}"))?;
                    }
                }
                Ok(())
            }
            Err(Error::SimulatedCrash(point)) => {
                self.stats.crashes += 1;
                self.note(format!("  crashed at {point:?}"));
                self.uncertain_model(bucket, offset, &data);
                self.reopen()
            }
            Err(e) => {
                // Only a damaged data disk may refuse or break a write.
                let disk = self.engine().geometry().bucket_disk(bucket);
                self.stats.write_errors += 1;
                self.note(format!("  write failed: {e}"));
                if !self.damaged.contains(&disk) {
                    return Err(format!(
                        "write to bucket {bucket} (disk {disk}, healthy) failed: {e}"
                    ));
                }
                self.uncertain_model(bucket, offset, &data);
                Ok(())
            }
        }
    }

    fn check_read(&mut self, bucket: usize, offset: u64, len: u64) -> Check {
        self.stats.reads += 1;
        let mut back = Vec::new();
        self.engine()
            .read(bucket, offset, len)
            .map_err(|e| format!("read bucket {bucket} {offset}+{len}: {e}"))?
            .read_to_end(&mut back)
            .map_err(|e| {
                format!(
                    "read bucket {bucket} {offset}+{len} (damaged disks {:?}): {e}",
                    self.damaged
                )
            })?;
        if back.len() as u64 != len {
            return Err(format!(
                "read bucket {bucket} {offset}+{len}: got {} bytes",
                back.len()
            ));
        }
        for (i, block) in back.chunks(BLOCK as usize).enumerate() {
            let index = (offset / BLOCK) as usize + i;
            let h = block_hash(block);
            let slot = &mut self.model[bucket][index];
            if !slot.contains(&h) {
                let zero = block.iter().all(|&b| b == 0);
                return Err(format!(
                    "bucket {bucket} block {index} (offset {}): read {} bytes that were never written there \
                     ({} allowed contents; damaged disks {:?})",
                    index as u64 * BLOCK,
                    if zero { "zero" } else { "unexpected" },
                    slot.len(),
                    self.damaged
                ));
            }
            *slot = vec![h];
        }
        Ok(())
    }

    fn op_read(&mut self) -> Check {
        let bucket = self.rng.gen_range(0..self.model.len());
        let len = self.rng.gen_range(1..=(4 * STRIPE_BYTES / BLOCK)) * BLOCK;
        let len = len.min(self.bucket_bytes);
        let offset = self.rng.gen_range(0..=(self.bucket_bytes - len) / BLOCK) * BLOCK;
        self.note(format!("read bucket {bucket} {offset}+{len}"));
        self.check_read(bucket, offset, len)
    }

    fn read_everything(&mut self) -> Check {
        self.note("read every bucket".into());
        for bucket in 0..self.model.len() {
            self.check_read(bucket, 0, self.bucket_bytes)?;
        }
        Ok(())
    }

    /// A random byte range of the disk's IDR region (never the header).
    fn idr_range(&mut self, max_bytes: u64) -> (u64, u64) {
        let len = self.rng.gen_range(1..=max_bytes / BLOCK) * BLOCK;
        let start = HEADER_BYTES
            + self
                .rng
                .gen_range(0..=(DISK_BYTES - HEADER_BYTES - len) / BLOCK)
                * BLOCK;
        (start, len)
    }

    fn op_fault(&mut self) -> Check {
        // A new victim only while the damage budget allows; otherwise hurt an already damaged disk more.
        let disk = if self.damaged.len() < DAMAGED_MAX && self.rng.gen_bool(0.7) {
            self.rng.gen_range(0..DISKS)
        } else if let Some(&d) = self
            .damaged
            .iter()
            .nth(self.rng.gen_range(0..self.damaged.len().max(1)))
        {
            d
        } else {
            return Ok(());
        };
        self.damaged.insert(disk);
        self.stats.faults += 1;
        let opened = self.opened.lock()[disk].clone().expect("disk opened");
        let kind = self.rng.gen_range(0..7);
        match kind {
            0 => {
                self.note(format!("fault: disk {disk} fails"));
                self.faults.lock()[disk].failed = true;
                opened.handle.fail_disk();
            }
            1 => {
                self.note(format!("fault: operator fails disk {disk}"));
                self.engine()
                    .fail_disk(disk)
                    .map_err(|e| format!("fail_disk({disk}): {e}"))?;
            }
            2 => {
                let (s, len) = self.idr_range(PHYSICAL_STRIPE_BYTES);
                self.note(format!("fault: disk {disk} EIO {s}+{len}"));
                self.faults.lock()[disk].eio.push((s, s + len));
                opened.handle.eio_range(s, len);
            }
            3 => {
                let flips = self.rng.gen_range(1..=8);
                self.note(format!("fault: disk {disk} {flips} flipped bits"));
                for _ in 0..flips {
                    let at = self.rng.gen_range(HEADER_BYTES..DISK_BYTES);
                    opened
                        .handle
                        .flip_bit(at, self.rng.gen_range(0..8))
                        .map_err(|e| format!("flip_bit: {e}"))?;
                }
            }
            4 => {
                // Whole physical stripes zeroed in place: they read back as never written.
                let first = self.rng.gen_range(0..STRIPES_PER_DISK);
                let count = self.rng.gen_range(1..=3).min(STRIPES_PER_DISK - first);
                self.note(format!(
                    "fault: disk {disk} stripes {first}..{} zeroed",
                    first + count
                ));
                let zeros = vec![0u8; (count * PHYSICAL_STRIPE_BYTES) as usize];
                let _ = opened
                    .raw
                    .write_at(HEADER_BYTES + first * PHYSICAL_STRIPE_BYTES, &zeros);
            }
            5 => {
                let (s, len) = self.idr_range(2 * PHYSICAL_STRIPE_BYTES);
                self.note(format!("fault: disk {disk} bytes {s}+{len} zeroed"));
                let _ = opened.raw.write_at(s, &vec![0u8; len as usize]);
            }
            _ => {
                // A blank disk swapped in under the running engine (its header kept, so a reopen finds it).
                self.note(format!("fault: disk {disk} blanked"));
                let zeros = vec![0u8; (DISK_BYTES - HEADER_BYTES) as usize];
                let _ = opened.raw.write_at(HEADER_BYTES, &zeros);
            }
        }
        Ok(())
    }

    /// Undo all damage: heal EIO, replace and rebuild failed disks, recover and scrub, then check that the grid is
    /// whole again (parity, defects, promises, every byte).
    fn op_repair(&mut self) -> Check {
        self.stats.repairs += 1;
        self.note(format!("repair {:?}", self.damaged));
        for disk in 0..DISKS {
            self.faults.lock()[disk].eio.clear();
            if let Some(o) = self.opened.lock()[disk].as_ref() {
                o.handle.clear_eio();
            }
        }
        let damaged: Vec<usize> = self.damaged.iter().copied().collect();
        // Scrub first: it finds zeroed and flipped blocks (data the grid still holds elsewhere).
        for &disk in &damaged {
            if !self.engine().is_failed(disk) && !self.faults.lock()[disk].failed {
                self.engine()
                    .scrub(disk, 0, self.bucket_bytes)
                    .map_err(|e| format!("scrub({disk}): {e}"))?;
            }
        }
        // Rebuild while another disk fails (the damage budget allowing): a thread fails it physically within a
        // few milliseconds of the rebuild's start (the only timing-dependent step: the outcome must not depend on
        // it); it is replaced and rebuilt in turn.
        let victim = self.rng.gen_range(0..DISKS);
        let fail_victim = self.damaged.len() < DAMAGED_MAX
            && !self.damaged.contains(&victim)
            && self.rng.gen_bool(0.2);
        let failer = fail_victim.then(|| {
            self.damaged.insert(victim);
            self.note(format!("  disk {victim} fails during the rebuild"));
            self.faults.lock()[victim].failed = true;
            let handle = self.opened.lock()[victim]
                .as_ref()
                .map(|o| o.handle.clone());
            let delay_ms = self.rng.gen_range(0..3);
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(delay_ms));
                if let Some(handle) = handle {
                    handle.fail_disk();
                }
            })
        });
        let rebuilt = self.replace_and_rebuild(&damaged);
        if let Some(failer) = failer {
            failer.join().unwrap();
        }
        rebuilt?;
        if fail_victim {
            self.replace_and_rebuild(&[victim])?;
        }
        self.recover("in repair")?;
        self.engine().flush().map_err(|e| format!("flush: {e}"))?;
        self.damaged.clear();
        self.check_whole()
    }

    /// Replace and rebuild those of `disks` that are failed (by the engine or physically).
    fn replace_and_rebuild(&mut self, disks: &[usize]) -> Check {
        for &disk in disks {
            if self.engine().is_failed(disk) || self.faults.lock()[disk].failed {
                self.stats.rebuilds += 1;
                self.faults.lock()[disk] = DiskFaults::default();
                self.engine()
                    .replace_disk(disk, None)
                    .map_err(|e| format!("replace_disk({disk}): {e}"))?;
                let report = self
                    .engine()
                    .rebuild(disk, &|_, _| {})
                    .map_err(|e| format!("rebuild({disk}): {e}"))?;
                if !report.unrecoverable.is_empty() {
                    return Err(format!(
                        "rebuild({disk}): unrecoverable {:?}",
                        report.unrecoverable
                    ));
                }
            }
        }
        Ok(())
    }

    /// No damage pending: parity verifies, nothing is defect or open, every disk is alive.
    fn check_whole(&mut self) -> Check {
        let report = self
            .engine()
            .verify_parity(&|_, _| {})
            .map_err(|e| format!("verify_parity: {e}"))?;
        if !report.mismatches.is_empty() || report.groups_skipped != 0 {
            return Err(format!(
                "verify_parity: mismatches {:?}, groups skipped {}",
                report.mismatches, report.groups_skipped
            ));
        }
        let status = self.engine().status().map_err(|e| e.to_string())?;
        if status.open_promises != 0 {
            return Err(format!(
                "{} promises open after a flush",
                status.open_promises
            ));
        }
        for d in &status.disks {
            if d.failed || d.defect_bytes != 0 {
                return Err(format!(
                    "disk {} failed {} with {} defect bytes after a repair",
                    d.index, d.failed, d.defect_bytes
                ));
            }
        }
        self.read_everything()
    }

    fn check_invariants(&self) -> Check {
        if self.damaged.len() > DAMAGED_MAX {
            return Err(format!("schedule bug: damaged {:?}", self.damaged));
        }
        for disk in 0..DISKS {
            if self.engine().is_failed(disk) && !self.damaged.contains(&disk) {
                return Err(format!(
                    "the engine failed disk {disk}, which was never damaged"
                ));
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Check {
        let roll = self.rng.gen_range(0..100);
        match roll {
            0..=39 => self.op_write(None)?,
            40..=64 => self.op_read()?,
            65..=68 => {
                self.note("flush".into());
                self.engine().flush().map_err(|e| format!("flush: {e}"))?;
            }
            69..=76 => self.op_fault()?,
            77..=83 => {
                // Crashes with at most one damaged disk: the crashed write's parity ranges become defect too.
                if self.damaged.len() <= 1 {
                    let point = [
                        CrashPoint::DataStarted,
                        CrashPoint::DataHalfWritten,
                        CrashPoint::DataWritten,
                        CrashPoint::DataFinished,
                        CrashPoint::ParityHalfWritten,
                        CrashPoint::DrainHalfWritten,
                    ][self.rng.gen_range(0..6)];
                    self.op_write(Some(point))?;
                }
            }
            84..=85 => {
                self.note("reopen".into());
                self.reopen()?;
            }
            86..=88 => {
                let disk = self.rng.gen_range(0..DISKS);
                let offset = self.rng.gen_range(0..STRIPES_PER_DISK) * STRIPE_BYTES;
                let len = (2 * STRIPE_BYTES).min(self.bucket_bytes - offset);
                self.note(format!("scrub disk {disk} {offset}+{len}"));
                if let Err(e) = self.engine().scrub(disk, offset, len) {
                    // A damaged disk may fail under the scrub; a healthy one must not.
                    if !self.damaged.contains(&disk) {
                        return Err(format!("scrub({disk}): {e}"));
                    }
                    self.note(format!("  scrub failed: {e}"));
                }
            }
            89..=91 => {
                self.note("recover defects".into());
                self.recover("on schedule")?;
            }
            _ => {
                if !self.damaged.is_empty() || self.rng.gen_bool(0.3) {
                    self.op_repair()?;
                }
            }
        }
        self.check_invariants()
    }

    fn run(&mut self, steps: usize) -> Check {
        for step in 0..steps {
            self.note(format!("-- step {step}"));
            self.step()?;
        }
        self.op_repair()
    }
}

/// Run one seed; panic with the seed and the last operations if an invariant breaks.
fn run_seed(seed: u64, steps: usize) {
    let log = Arc::new(Mutex::new(VecDeque::new()));
    let started = Instant::now();
    let log_for_run = Arc::clone(&log);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut sim = Sim::new(seed, log_for_run);
        let result = sim.run(steps);
        (result, format!("{:?}", sim.stats))
    }));
    let dump = || log.lock().iter().cloned().collect::<Vec<_>>().join("\n  ");
    match outcome {
        Ok((Ok(()), stats)) => {
            eprintln!(
                "simulation seed {seed}: {steps} steps ok in {:.1} s; {stats}",
                started.elapsed().as_secs_f64()
            );
        }
        Ok((Err(message), _)) => panic!(
            "simulation seed {seed} failed: {message}\nlast operations:\n  {}\nrerun: PERMAFROST_SIM_SEED={seed} \
             cargo test -p permafrost-engine --test simulation -- --ignored --nocapture",
            dump()
        ),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "simulation seed {seed} panicked: {message}\nlast operations:\n  {}",
                dump()
            )
        }
    }
}

/// Seeds run in CI (short: the whole file stays well under a minute at opt-level 2).
const CI_SEEDS: [u64; 3] = [1, 2, 3];
const CI_STEPS: usize = 800;

#[test]
fn simulated_faults_and_crashes_never_lose_or_corrupt_committed_data() {
    for seed in CI_SEEDS {
        run_seed(seed, CI_STEPS);
    }
}

/// `PERMAFROST_SIM_SEEDS=<count>` seeds from 1000 on (or the one `PERMAFROST_SIM_SEED`), each
/// `PERMAFROST_SIM_STEPS` steps (default 5000).
#[test]
#[ignore]
fn simulation_many_seeds() {
    let steps = std::env::var("PERMAFROST_SIM_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    if let Some(seed) = std::env::var("PERMAFROST_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_seed(seed, steps);
        return;
    }
    let count: u64 = std::env::var("PERMAFROST_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for seed in 1000..1000 + count {
        run_seed(seed, steps);
    }
}
