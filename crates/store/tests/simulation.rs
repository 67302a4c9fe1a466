//! Deterministic simulation of the object store (the engine's `crates/engine/tests/simulation.rs`, one floor
//! up): a seeded random schedule drives the real [`Store`] — its SQLite catalog, its cache and its engine on a
//! small file-backed grid (4x4:2+1) in a temporary directory, nothing mocked — through PUTs (small inline,
//! packed and multi-extent bodies, some identical to earlier ones), multipart uploads (create, upload and
//! replace parts, complete, abort), copies, deletes of current versions and of versions by id, versioning turned
//! on and suspended, Object Lock (legal holds on and off, GOVERNANCE and COMPLIANCE retention set, extended and
//! removed), persist runs in the three write modes, cache eviction, garbage collection and lifecycle expiry of
//! noncurrent versions (on a simulated clock three days ahead); with crashes at any step (the store dropped
//! without a clean stop and opened again, uploads cut off mid-body, junk left in the cache directory, the engine
//! stopped at each of its `CrashPoint`s in the middle of a persist) and disk faults (a disk failed, bytes zeroed
//! or bits flipped in a disk's file behind the engine, at most two disks damaged at once; repairs replace and
//! rebuild or scrub them).
//!
//! The model is what was acknowledged: per bucket and key, the versions newest first (their bytes, or a delete
//! marker; their legal hold and retention), the multipart uploads and their parts, the versioning state. Every
//! operation's answer is predicted (its version id `null` or new, `AccessDenied` where Object Lock forbids,
//! `EntityTooSmall`, `NoSuchUpload`, the number of versions a lifecycle pass expires). Checked:
//! - acknowledged data is readable and exact: every version in the model reads back byte for byte (`Lost`);
//! - nothing unacknowledged is visible: the store lists exactly the model's versions, in order, and its uploads
//!   (`Unacknowledged`);
//! - locked versions are never gone: a version under a legal hold or a retention in force that the store no
//!   longer lists or reads (`LockedGone`);
//! - the catalog's claims are true: after a successful persist run every version is `persisted`;
//!   `Store::verify_persisted` finds no false claim; after the cache is evicted, every version the catalog says
//!   is persisted reads back exact from the grid (`FalseClaim`).
//!
//! Two bugs are planted on purpose (`permafrost_store::planted_bugs`, off unless a test turns them on): contents
//! marked persisted before their grid write is durable, and a lifecycle that ignores legal holds; the tests at the
//! end switch each on and require the simulation to report it, of the right kind, within the CI seed budget.
//!
//! Engine crash points fire on a grid with at most one damaged disk (see `Sim::op_persist`), and the engine's
//! defect recovery runs right after each crash's replay: a range it cannot repair then, or in a repair, is a
//! failure (`Lost`).
//!
//! CI runs seeds from 1 on for `CI_SECONDS` (at least `CI_SEEDS_MIN` seeds), `PERMAFROST_SIM_THREADS` (default 4)
//! at a time; each seed is deterministic on its own. On failure the seed, the violation and
//! the last operations are printed with the command that replays it:
//! `PERMAFROST_SIM_SEED=<seed> cargo test --workspace --test simulation -- --ignored store_simulation_replay --nocapture`;
//! `PERMAFROST_SIM_SEEDS=<count>` runs that many seeds from 1 instead (`scripts/test --soak` runs the ignored
//! soak: 2,000 seeds unless `PERMAFROST_SIM_SEEDS` says otherwise); `PERMAFROST_SIM_VERBOSE=1` prints every
//! operation.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use permafrost_disk::power::PowerProfile;
use permafrost_engine::{CrashPoint, HEADER_BYTES};
use permafrost_policy::WatchdogConfig;
use permafrost_store::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BUCKETS: [&str; 2] = ["plain", "locked"];
const KEYS: [&str; 3] = ["a", "ds/b", "ds/c"];
/// Disks damaged at once at most (the grid survives three).
const DAMAGED_MAX: usize = 2;
const DISK_BYTES: u64 = 32 << 20;
const LOG_LINES_MAX: usize = 60;
const DAY_MS: u64 = 86_400_000;
/// Lifecycle passes run on a clock this far ahead: every noncurrent version is a day past its rule.
const LIFECYCLE_AHEAD_MS: u64 = 3 * DAY_MS;
const PART_MIN: usize = 5 << 20;
/// The CI test: seeds from 1 on for this long (the planted-bug tests search this many seconds at most too).
const CI_SECONDS: u64 = 50;
const CI_SEEDS_MIN: u64 = 20;
const STEPS: usize = 40;

fn config() -> StoreConfig {
    StoreConfig {
        cache_bytes_max: 256 << 20,
        cache_wait_ms_max: 2_000,
        free_bytes_min: 1 << 20,
        watchdog: WatchdogConfig {
            interval_ms: 3_600_000,
            max_age_ms: u64::MAX / 4,
            persist_spinning_after_ms: u64::MAX / 4,
            start_off_disk_above_bytes: u64::MAX / 4,
            persist_spinning_above_bytes: u64::MAX / 4,
            pressure_fill_percent: 100.0,
            persist_under_pressure_above_bytes: u64::MAX / 4,
        },
        inline_bytes_max: 2048,
        pack_threshold_bytes: 48 << 10,
        extent_bytes_max: 1 << 20,
        chunk_bytes: 64 << 10,
        gc_grace_ms: 3_600_000,
        gc_interval_ms: 3_600_000,
        persist_batch_bytes_max: 1 << 20,
        persist_chunk_bytes: 1 << 20,
        fsync: false,
        grid: GridSetup {
            layout: "4x4:2+1".into(),
            disk_capacity_bytes: DISK_BYTES,
            spinning_max: 64,
            ..GridSetup::default()
        },
        power_profile: Some(PowerProfile {
            spin_up_ms: 0,
            idle_timeout_ms: 1_000,
            ..PowerProfile::for_tests()
        }),
        prefetch_bytes_max: 0,
        ..StoreConfig::default()
    }
}

/// What the simulation found wrong, by kind (the planted-bug tests check the kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Acknowledged data unreadable or different.
    Lost,
    /// Something never acknowledged is visible (or an acknowledged removal did not happen).
    Unacknowledged,
    /// A version under a legal hold or a retention in force is gone.
    LockedGone,
    /// The catalog claims a content persisted that the grid does not give back.
    FalseClaim,
    /// An operation answered otherwise than the model predicts.
    Unexpected,
}

#[derive(Debug, Clone)]
struct Violation {
    kind: Kind,
    message: String,
}

type Check<T = ()> = Result<T, Violation>;

fn violation(kind: Kind, message: impl Into<String>) -> Violation {
    Violation {
        kind,
        message: message.into(),
    }
}

fn unexpected(message: impl Into<String>) -> Violation {
    violation(Kind::Unexpected, message)
}

/// Ranges `(disk, offset, length)` the engine's `recover_defects` could not repair `when`: at most one disk is
/// damaged when the engine crashes and at most two at any time (the grid survives three), so every range must be
/// repairable; one that is not may hold acknowledged data.
fn unrepairable(ranges: &[(usize, u64, u64)], when: &str) -> Violation {
    violation(
        Kind::Lost,
        format!("recover defects {when}: unrecoverable {ranges:?}"),
    )
}

#[derive(Debug, Clone)]
struct Version {
    id: String,
    /// `None`: a delete marker.
    body: Option<Arc<Vec<u8>>>,
    hold: bool,
    retention: Option<Retention>,
}

impl Version {
    fn locked_at(&self, now_ms: u64) -> bool {
        self.body.is_some()
            && (self.hold || self.retention.is_some_and(|r| r.retain_until_ms > now_ms))
    }
}

#[derive(Debug, Clone)]
struct UploadModel {
    bucket: usize,
    key: String,
    /// Part number -> (body, ETag).
    parts: BTreeMap<u32, (Arc<Vec<u8>>, String)>,
}

#[derive(Debug, Clone, Default)]
struct BucketModel {
    versioning: Versioning,
    object_lock: bool,
    /// Key -> versions, newest first.
    keys: BTreeMap<String, Vec<Version>>,
}

#[derive(Default, Debug)]
struct Stats {
    steps: u64,
    puts: u64,
    completes: u64,
    copies: u64,
    deletes: u64,
    refused: u64,
    persists: u64,
    persist_crashes: u64,
    evictions: u64,
    grid_reads: u64,
    gcs: u64,
    expired: u64,
    crashes: u64,
    faults: u64,
    repairs: u64,
    /// Time per kind of step.
    time: BTreeMap<&'static str, Duration>,
}

fn roll_name(roll: u32) -> &'static str {
    match roll {
        0..=21 => "put",
        22..=31 => "multipart",
        32..=36 => "copy",
        37..=45 => "delete",
        46..=47 => "versioning",
        48..=55 => "lock",
        56..=65 => "persist",
        66..=71 => "evict",
        72..=75 => "gc",
        76..=79 => "lifecycle",
        80..=87 => "read",
        88..=90 => "crash",
        91..=92 => "torn upload",
        93..=96 => "fault",
        _ => "repair",
    }
}

struct Sim {
    seed: u64,
    rng: StdRng,
    dir: tempfile::TempDir,
    store: Option<Store>,
    buckets: Vec<BucketModel>,
    uploads: BTreeMap<String, UploadModel>,
    /// Bodies acknowledged so far (some uploads reuse one: identical bytes are stored once).
    bodies: Vec<Arc<Vec<u8>>>,
    /// Disks damaged and not repaired yet.
    damaged: Vec<usize>,
    /// Retention dates are this far in the future, plus up to three days.
    retention_base_ms: u64,
    log: Arc<Mutex<VecDeque<String>>>,
    stats: Stats,
    verbose: bool,
    started: Instant,
}

fn read_all(reader: &mut ObjectReader) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    reader.read_to_end(&mut out)?;
    Ok(out)
}

impl Sim {
    fn new(seed: u64, log: Arc<Mutex<VecDeque<String>>>) -> Check<Sim> {
        let dir = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let mut sim = Sim {
            seed,
            rng: StdRng::seed_from_u64(seed),
            dir,
            store: None,
            buckets: vec![BucketModel::default(); BUCKETS.len()],
            uploads: BTreeMap::new(),
            bodies: Vec::new(),
            damaged: Vec::new(),
            retention_base_ms: now_ms() + 20 * DAY_MS,
            log,
            stats: Stats::default(),
            verbose: std::env::var_os("PERMAFROST_SIM_VERBOSE").is_some(),
            started: Instant::now(),
        };
        sim.store = Some(
            Store::open(sim.dir.path(), config()).map_err(|e| unexpected(format!("open: {e}")))?,
        );
        let modes = ["direct", "serialized", "delayed"];
        for (i, name) in BUCKETS.iter().enumerate() {
            let mode = modes[sim.rng.gen_range(0..modes.len())];
            sim.note(format!("create bucket {name} write mode {mode}"));
            let settings = BucketSettings {
                write_mode: Some(mode.to_string()),
                compression: Some([Compression::None, Compression::Zstd][sim.rng.gen_range(0..2)]),
                ..Default::default()
            };
            sim.store()
                .create_bucket(name, settings)
                .map_err(|e| unexpected(format!("create bucket {name}: {e}")))?;
            if *name == "locked" {
                let archive = BucketArchive {
                    versioning: Versioning::Enabled,
                    object_lock: true,
                    lifecycle: Some(Lifecycle {
                        day_ms: 0,
                        rules: vec![LifecycleRule {
                            id: "noncurrent".into(),
                            enabled: true,
                            filter: LifecycleFilter::default(),
                            expiration_days: None,
                            expiration_date_ms: None,
                            expired_object_delete_marker: false,
                            noncurrent_days: Some(1),
                            newer_noncurrent_versions: None,
                            abort_incomplete_multipart_days: None,
                        }],
                    }),
                    ..Default::default()
                };
                sim.store()
                    .set_bucket_archive(name, archive)
                    .map_err(|e| unexpected(format!("configure bucket {name}: {e}")))?;
                sim.buckets[i].versioning = Versioning::Enabled;
                sim.buckets[i].object_lock = true;
            }
        }
        Ok(sim)
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store open")
    }

    fn note(&self, line: String) {
        if self.verbose {
            eprintln!("[seed {} {:?}] {line}", self.seed, self.started.elapsed());
        }
        let mut log = self.log.lock();
        if log.len() == LOG_LINES_MAX {
            log.pop_front();
        }
        log.push_back(line);
    }

    // ------------------------------------------------------------------------------------------ choices

    fn pick_bucket(&mut self) -> usize {
        self.rng.gen_range(0..BUCKETS.len())
    }

    fn pick_key(&mut self) -> String {
        KEYS[self.rng.gen_range(0..KEYS.len())].to_string()
    }

    fn body(&mut self) -> Arc<Vec<u8>> {
        if !self.bodies.is_empty() && self.rng.gen_bool(0.15) {
            return Arc::clone(&self.bodies[self.rng.gen_range(0..self.bodies.len())]);
        }
        let len = match self.rng.gen_range(0..100) {
            0..=4 => 0,
            5..=34 => self.rng.gen_range(1..2048),
            35..=84 => self.rng.gen_range(2048..48 << 10),
            _ => self.rng.gen_range(48 << 10..200 << 10),
        };
        self.fresh_body(len)
    }

    fn fresh_body(&mut self, len: usize) -> Arc<Vec<u8>> {
        let mut data = vec![0u8; len];
        self.rng.fill(&mut data[..]);
        if self.rng.gen_bool(0.5) {
            for (i, b) in data.iter_mut().enumerate() {
                if (i / 512) % 4 != 0 {
                    *b = b"permafrost "[i % 11];
                }
            }
        }
        let body = Arc::new(data);
        self.bodies.push(Arc::clone(&body));
        body
    }

    /// A version of the model to act on: `(bucket, key, index)`.
    fn pick_version(
        &mut self,
        bucket: Option<usize>,
        data_only: bool,
    ) -> Option<(usize, String, usize)> {
        let mut all = Vec::new();
        for (b, model) in self.buckets.iter().enumerate() {
            if bucket.is_some_and(|x| x != b) {
                continue;
            }
            for (key, versions) in &model.keys {
                for (i, v) in versions.iter().enumerate() {
                    if !data_only || v.body.is_some() {
                        all.push((b, key.clone(), i));
                    }
                }
            }
        }
        if all.is_empty() {
            None
        } else {
            Some(all.swap_remove(self.rng.gen_range(0..all.len())))
        }
    }

    // ------------------------------------------------------------------------------------------ model

    /// A new version written to `bucket/key` with the version id the store gave it: `null` replaces the null
    /// version (unversioned and suspended buckets), any other id is new.
    fn add_version(&mut self, bucket: usize, key: &str, version: Version) -> Check {
        let model = &mut self.buckets[bucket];
        let expect_null = model.versioning != Versioning::Enabled;
        if (version.id == NULL_VERSION) != expect_null {
            return Err(unexpected(format!(
                "{}/{key}: version id {} in a bucket whose versioning is {:?}",
                BUCKETS[bucket], version.id, model.versioning
            )));
        }
        let versions = model.keys.entry(key.to_string()).or_default();
        if versions
            .iter()
            .any(|v| v.id == version.id && v.id != NULL_VERSION)
        {
            return Err(unexpected(format!(
                "{}/{key}: version id {} given twice",
                BUCKETS[bucket], version.id
            )));
        }
        versions.retain(|v| v.id != version.id);
        versions.insert(0, version);
        Ok(())
    }

    /// Whether writing a null version to `bucket/key` is refused by the lock of the null version it replaces.
    fn null_locked(&self, bucket: usize, key: &str) -> bool {
        let model = &self.buckets[bucket];
        model.versioning != Versioning::Enabled
            && model.keys.get(key).is_some_and(|vs| {
                vs.iter()
                    .any(|v| v.id == NULL_VERSION && v.locked_at(now_ms()))
            })
    }

    fn new_lock(&mut self, bucket: usize) -> (bool, Option<Retention>) {
        if !self.buckets[bucket].object_lock {
            return (false, None);
        }
        let hold = self.rng.gen_bool(0.3);
        let retention = self.rng.gen_bool(0.2).then(|| self.retention());
        (hold, retention)
    }

    fn retention(&mut self) -> Retention {
        Retention {
            mode: if self.rng.gen_bool(0.5) {
                LockMode::Governance
            } else {
                LockMode::Compliance
            },
            retain_until_ms: self.retention_base_ms + self.rng.gen_range(0..3 * DAY_MS),
        }
    }

    // ------------------------------------------------------------------------------------------ operations

    fn op_put(&mut self) -> Check {
        let bucket = self.pick_bucket();
        let key = self.pick_key();
        let body = self.body();
        let (hold, retention) = self.new_lock(bucket);
        let refused = self.null_locked(bucket, &key);
        self.note(format!(
            "put {}/{key} {} bytes hold {hold} retention {retention:?}",
            BUCKETS[bucket],
            body.len()
        ));
        self.stats.puts += 1;
        let options = PutOptions {
            attributes: ObjectAttributes {
                lock: ObjectLock {
                    retention,
                    legal_hold: hold,
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let result = self
            .store()
            .put_object(BUCKETS[bucket], &key, options, &body);
        self.written(bucket, &key, body, hold, retention, refused, result, "put")
    }

    #[allow(clippy::too_many_arguments)]
    fn written(
        &mut self,
        bucket: usize,
        key: &str,
        body: Arc<Vec<u8>>,
        hold: bool,
        retention: Option<Retention>,
        refused: bool,
        result: Result<ObjectInfo, StoreError>,
        what: &str,
    ) -> Check {
        match (result, refused) {
            (Ok(info), false) => {
                if info.size_bytes != body.len() as u64 {
                    return Err(unexpected(format!(
                        "{what} {}/{key}: size {} acknowledged for {} bytes",
                        BUCKETS[bucket],
                        info.size_bytes,
                        body.len()
                    )));
                }
                self.note(format!("  version {}", info.version_id));
                self.add_version(
                    bucket,
                    key,
                    Version {
                        id: info.version_id,
                        body: Some(body),
                        hold,
                        retention,
                    },
                )
            }
            (Err(StoreError::AccessDenied(_)), true) => {
                self.stats.refused += 1;
                self.note("  refused: the null version it replaces is locked".into());
                Ok(())
            }
            (Ok(info), true) => Err(violation(
                Kind::LockedGone,
                format!(
                    "{what} {}/{key} replaced a locked null version (new version {})",
                    BUCKETS[bucket], info.version_id
                ),
            )),
            (Err(e), _) => Err(unexpected(format!("{what} {}/{key}: {e}", BUCKETS[bucket]))),
        }
    }

    fn op_copy(&mut self) -> Check {
        let Some((src, src_key, _)) = self.pick_version(None, false) else {
            return Ok(());
        };
        let dst = self.pick_bucket();
        let dst_key = self.pick_key();
        let source = self.buckets[src].keys[&src_key]
            .first()
            .and_then(|v| v.body.clone());
        let refused = self.null_locked(dst, &dst_key);
        self.note(format!(
            "copy {}/{src_key} -> {}/{dst_key}",
            BUCKETS[src], BUCKETS[dst]
        ));
        self.stats.copies += 1;
        let result = self
            .store()
            .copy_object(BUCKETS[src], &src_key, BUCKETS[dst], &dst_key, None);
        match source {
            None => match result {
                Err(StoreError::NoSuchKey { .. }) => Ok(()),
                other => Err(violation(
                    Kind::Unacknowledged,
                    format!(
                        "copy of {}/{src_key}, whose newest version is a delete marker or gone: {other:?}",
                        BUCKETS[src]
                    ),
                )),
            },
            // The copy never takes the source's lock.
            Some(body) => self.written(dst, &dst_key, body, false, None, refused, result, "copy"),
        }
    }

    fn op_multipart(&mut self) -> Check {
        let roll = self.rng.gen_range(0..100);
        let ids: Vec<String> = self.uploads.keys().cloned().collect();
        if ids.is_empty() || roll < 25 {
            let bucket = self.pick_bucket();
            let key = self.pick_key();
            self.note(format!("create multipart {}/{key}", BUCKETS[bucket]));
            let id = self
                .store()
                .create_multipart(BUCKETS[bucket], &key, PutOptions::default())
                .map_err(|e| unexpected(format!("create multipart: {e}")))?;
            self.note(format!("  upload {id}"));
            self.uploads.insert(
                id,
                UploadModel {
                    bucket,
                    key,
                    parts: BTreeMap::new(),
                },
            );
            return Ok(());
        }
        let id = ids[self.rng.gen_range(0..ids.len())].clone();
        if roll < 70 {
            let number = self.rng.gen_range(1..=3);
            let body = if number == 1 && self.rng.gen_bool(0.1) {
                self.fresh_body(PART_MIN)
            } else {
                self.body()
            };
            self.note(format!(
                "upload part {number} ({} bytes) of {id}",
                body.len()
            ));
            let mut handle = self
                .store()
                .upload_part(&id, number, Checksums::default())
                .map_err(|e| unexpected(format!("upload part: {e}")))?;
            handle
                .write(&body)
                .map_err(|e| unexpected(format!("upload part: {e}")))?;
            let info = handle
                .finish()
                .map_err(|e| unexpected(format!("upload part: {e}")))?;
            self.uploads
                .get_mut(&id)
                .expect("listed")
                .parts
                .insert(number, (body, info.etag));
        } else if roll < 95 {
            let upload = self.uploads[&id].clone();
            let parts: Vec<(u32, String)> = upload
                .parts
                .iter()
                .map(|(n, (_, etag))| (*n, etag.clone()))
                .collect();
            let too_small = upload
                .parts
                .values()
                .rev()
                .skip(1)
                .any(|(body, _)| body.len() < PART_MIN);
            let refused = self.null_locked(upload.bucket, &upload.key);
            self.note(format!(
                "complete {id} ({}/{}, parts {:?})",
                BUCKETS[upload.bucket],
                upload.key,
                upload.parts.keys().collect::<Vec<_>>()
            ));
            self.stats.completes += 1;
            let result = self.store().complete_multipart(&id, &parts);
            if parts.is_empty() || too_small {
                return match result {
                    Err(
                        StoreError::EntityTooSmall(_)
                        | StoreError::InvalidPart(_)
                        | StoreError::InvalidRequest(_)
                        | StoreError::InvalidArgument(_),
                    ) => Ok(()),
                    other => Err(unexpected(format!(
                        "complete of {id} with parts too small or none: {other:?}"
                    ))),
                };
            }
            let mut whole = Vec::new();
            for (body, _) in upload.parts.values() {
                whole.extend_from_slice(body);
            }
            let body = Arc::new(whole);
            if result.is_ok() || !refused {
                self.uploads.remove(&id);
            }
            self.written(
                upload.bucket,
                &upload.key,
                body,
                false,
                None,
                refused,
                result,
                "complete",
            )?;
        } else {
            self.note(format!("abort {id}"));
            self.store()
                .abort_multipart(&id)
                .map_err(|e| unexpected(format!("abort {id}: {e}")))?;
            self.uploads.remove(&id);
        }
        Ok(())
    }

    fn op_delete(&mut self) -> Check {
        self.stats.deletes += 1;
        if self.rng.gen_bool(0.5) {
            let bucket = self.pick_bucket();
            let key = self.pick_key();
            let refused = self.null_locked(bucket, &key);
            self.note(format!("delete {}/{key}", BUCKETS[bucket]));
            let result = self
                .store()
                .delete_version(BUCKETS[bucket], &key, None, false);
            let versioning = self.buckets[bucket].versioning;
            return match (result, refused) {
                (Err(StoreError::AccessDenied(_)), true) => {
                    self.stats.refused += 1;
                    Ok(())
                }
                (Ok(outcome), false) => {
                    let versions = self.buckets[bucket].keys.entry(key.clone()).or_default();
                    if versioning != Versioning::Enabled {
                        versions.retain(|v| v.id != NULL_VERSION);
                    }
                    if versioning != Versioning::Unversioned {
                        let Some(id) = outcome.version_id.clone().filter(|_| outcome.delete_marker)
                        else {
                            return Err(unexpected(format!(
                                "delete {}/{key}: no delete marker ({outcome:?})",
                                BUCKETS[bucket]
                            )));
                        };
                        self.note(format!("  marker {id}"));
                        self.add_version(
                            bucket,
                            &key,
                            Version {
                                id,
                                body: None,
                                hold: false,
                                retention: None,
                            },
                        )?;
                    }
                    Ok(())
                }
                (Ok(_), true) => Err(violation(
                    Kind::LockedGone,
                    format!(
                        "delete {}/{key} removed a locked null version",
                        BUCKETS[bucket]
                    ),
                )),
                (Err(e), _) => Err(unexpected(format!("delete {}/{key}: {e}", BUCKETS[bucket]))),
            };
        }
        let Some((bucket, key, index)) = self.pick_version(None, false) else {
            return Ok(());
        };
        let version = self.buckets[bucket].keys[&key][index].clone();
        let bypass = self.rng.gen_bool(0.5);
        let now = now_ms();
        let refused = version.hold
            || version.retention.is_some_and(|r| {
                r.retain_until_ms > now && (r.mode == LockMode::Compliance || !bypass)
            });
        self.note(format!(
            "delete {}/{key} version {} bypass {bypass} (hold {} retention {:?})",
            BUCKETS[bucket], version.id, version.hold, version.retention
        ));
        match (
            self.store()
                .delete_version(BUCKETS[bucket], &key, Some(&version.id), bypass),
            refused,
        ) {
            (Err(StoreError::AccessDenied(_)), true) => {
                self.stats.refused += 1;
                Ok(())
            }
            (Ok(_), false) => {
                self.buckets[bucket]
                    .keys
                    .get_mut(&key)
                    .expect("picked")
                    .remove(index);
                Ok(())
            }
            (Ok(_), true) => Err(violation(
                Kind::LockedGone,
                format!(
                    "{}/{key} version {} deleted under hold {} retention {:?}",
                    BUCKETS[bucket], version.id, version.hold, version.retention
                ),
            )),
            (Err(e), _) => Err(unexpected(format!(
                "delete {}/{key} version {}: {e}",
                BUCKETS[bucket], version.id
            ))),
        }
    }

    fn op_versioning(&mut self) -> Check {
        // Only the bucket without Object Lock may change (Object Lock keeps versioning enabled).
        let bucket = 0;
        let next = match self.buckets[bucket].versioning {
            Versioning::Enabled => Versioning::Suspended,
            _ => Versioning::Enabled,
        };
        self.note(format!("versioning of {} -> {next:?}", BUCKETS[bucket]));
        let mut archive = self
            .store()
            .bucket_archive(BUCKETS[bucket])
            .map_err(|e| unexpected(format!("bucket archive: {e}")))?;
        archive.versioning = next;
        self.store()
            .set_bucket_archive(BUCKETS[bucket], archive)
            .map_err(|e| unexpected(format!("set versioning {next:?}: {e}")))?;
        self.buckets[bucket].versioning = next;
        Ok(())
    }

    fn op_lock(&mut self) -> Check {
        let Some((bucket, key, index)) = self.pick_version(Some(1), true) else {
            return Ok(());
        };
        let version = self.buckets[bucket].keys[&key][index].clone();
        let now = now_ms();
        if self.rng.gen_bool(0.6) {
            let on = !version.hold;
            self.note(format!(
                "legal hold {on} on {}/{key} version {}",
                BUCKETS[bucket], version.id
            ));
            self.store()
                .change_attributes(
                    BUCKETS[bucket],
                    &key,
                    Some(&version.id),
                    &AttributeChange::LegalHold(on),
                    false,
                )
                .map_err(|e| unexpected(format!("legal hold {on}: {e}")))?;
            self.buckets[bucket].keys.get_mut(&key).expect("picked")[index].hold = on;
            return Ok(());
        }
        let new = if self.rng.gen_bool(0.2) {
            None
        } else {
            Some(self.retention())
        };
        let bypass = self.rng.gen_bool(0.5);
        // ObjectLock::may_set_retention, the rule every retention change obeys.
        let allowed = match version.retention.filter(|r| r.retain_until_ms > now) {
            None => true,
            Some(old) => {
                let extends = new.is_some_and(|n| {
                    n.mode == old.mode && n.retain_until_ms >= old.retain_until_ms
                });
                let to_compliance = new.is_some_and(|n| {
                    old.mode == LockMode::Governance
                        && n.mode == LockMode::Compliance
                        && n.retain_until_ms >= old.retain_until_ms
                });
                extends || to_compliance || (old.mode == LockMode::Governance && bypass)
            }
        };
        self.note(format!(
            "retention {new:?} on {}/{key} version {} (was {:?}) bypass {bypass}",
            BUCKETS[bucket], version.id, version.retention
        ));
        match (
            self.store().change_attributes(
                BUCKETS[bucket],
                &key,
                Some(&version.id),
                &AttributeChange::Retention(new),
                bypass,
            ),
            allowed,
        ) {
            (Ok(_), true) => {
                self.buckets[bucket].keys.get_mut(&key).expect("picked")[index].retention = new;
                Ok(())
            }
            (Err(StoreError::AccessDenied(_)), false) => {
                self.stats.refused += 1;
                Ok(())
            }
            (Ok(_), false) => Err(violation(
                Kind::LockedGone,
                format!(
                    "retention {:?} shortened or removed to {new:?} (bypass {bypass})",
                    version.retention
                ),
            )),
            (Err(e), _) => Err(unexpected(format!("retention {new:?}: {e}"))),
        }
    }

    /// A lifecycle pass on a clock `LIFECYCLE_AHEAD_MS` ahead: every noncurrent version of the bucket with the
    /// rule that no lock protects then goes.
    fn op_lifecycle(&mut self) -> Check {
        let at = now_ms() + LIFECYCLE_AHEAD_MS;
        let mut expected = 0;
        for (b, model) in self.buckets.iter().enumerate() {
            if BUCKETS[b] != "locked" {
                continue;
            }
            for versions in model.keys.values() {
                expected += versions
                    .iter()
                    .enumerate()
                    .filter(|(i, v)| *i > 0 && v.body.is_some() && !v.locked_at(at))
                    .count() as u64;
            }
        }
        self.note(format!(
            "lifecycle pass (expecting {expected} noncurrent versions to expire)"
        ));
        let catalog = self.store().catalog();
        let current = catalog
            .expire_objects(at, usize::MAX)
            .map_err(|e| unexpected(format!("lifecycle: {e}")))?;
        let removed = catalog
            .expire_noncurrent(at, usize::MAX)
            .map_err(|e| unexpected(format!("lifecycle: {e}")))?;
        for (b, model) in self.buckets.iter_mut().enumerate() {
            if BUCKETS[b] != "locked" {
                continue;
            }
            for versions in model.keys.values_mut() {
                let mut i = 0;
                versions.retain(|v| {
                    i += 1;
                    i == 1 || v.body.is_none() || v.locked_at(at)
                });
            }
        }
        self.stats.expired += removed;
        if current != 0 || removed != expected {
            // Say which: the listing against the model.
            self.check_namespace()?;
            return Err(unexpected(format!(
                "lifecycle expired {current} current and {removed} noncurrent versions, expected 0 and {expected}"
            )));
        }
        Ok(())
    }

    /// A persist run, sometimes with the engine stopped at a crash point on the way (then the store is dropped
    /// and opened again, as after a crash).
    fn op_persist(&mut self) -> Check {
        self.stats.persists += 1;
        // Engine crashes on a grid with at most one damaged disk. With two (say a data disk and the hP of its
        // group both failed), a direct write stopped mid-way leaves its three parity disks in doubt (the write
        // hole: each holds the old or the new parity, or a mix) while the failed disks may need exactly those to
        // be rebuilt; nothing in the grid then knows their content, in any engine (RAID's degraded write hole).
        let crash = (self.rng.gen_bool(0.35) && self.damaged.len() <= 1).then(|| {
            [
                CrashPoint::DataStarted,
                CrashPoint::DataHalfWritten,
                CrashPoint::DataWritten,
                CrashPoint::DataFinished,
                CrashPoint::ParityHalfWritten,
                CrashPoint::DrainHalfWritten,
            ][self.rng.gen_range(0..6)]
        });
        if crash.is_some() {
            self.op_put()?; // something to write when the engine stops
        }
        self.note(format!("persist (crash at {crash:?})"));
        self.store().engine().set_crash_point(crash);
        let result = self.store().persist_now();
        self.store().engine().set_crash_point(None);
        if crash.is_some() {
            self.note(format!("  persist: {result:?}"));
            if result.is_err() {
                self.stats.persist_crashes += 1;
            }
            return self.crash();
        }
        match result {
            Ok(()) => self.check_all_persisted(),
            // A damaged grid may refuse a write; the contents wait for the next run.
            Err(e) if !self.damaged.is_empty() => {
                self.note(format!("  persist failed on a damaged grid: {e}"));
                Ok(())
            }
            Err(e) => Err(unexpected(format!("persist on a healthy grid: {e}"))),
        }
    }

    /// After a successful persist run, every version is persisted (the run's promise).
    fn check_all_persisted(&mut self) -> Check {
        for (b, model) in self.buckets.iter().enumerate() {
            for (key, versions) in &model.keys {
                for v in versions.iter().filter(|v| v.body.is_some()) {
                    let info = self
                        .store()
                        .head_version(BUCKETS[b], key, Some(&v.id))
                        .map_err(|e| self.missing(b, key, v, &e))?;
                    if info.state != ContentState::Persisted {
                        return Err(violation(
                            Kind::FalseClaim,
                            format!(
                                "{}/{key} version {} is {:?} after a persist run that succeeded",
                                BUCKETS[b], v.id, info.state
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Evict the cache and check the catalog's persistence claims against the grid.
    fn op_evict(&mut self) -> Check {
        self.stats.evictions += 1;
        self.note("evict the cache, check the persisted claims".into());
        self.store()
            .evict_cache()
            .map_err(|e| unexpected(format!("evict: {e}")))?;
        let report = self
            .store()
            .verify_persisted(&mut |_| {})
            .map_err(|e| unexpected(format!("verify_persisted: {e}")))?;
        if report.false_claims_total > 0 {
            let first = report
                .false_claims
                .first()
                .map(|f| f.to_string())
                .unwrap_or_default();
            return Err(violation(
                Kind::FalseClaim,
                format!(
                    "verify_persisted: {} false claims, first {first}",
                    report.false_claims_total
                ),
            ));
        }
        self.check_reads()
    }

    fn op_gc(&mut self) -> Check {
        self.stats.gcs += 1;
        let removed = self
            .store()
            .gc_now(true)
            .map_err(|e| unexpected(format!("gc: {e}")))?;
        self.note(format!("gc removed {removed} contents"));
        Ok(())
    }

    fn op_read(&mut self) -> Check {
        let Some((bucket, key, index)) = self.pick_version(None, true) else {
            return Ok(());
        };
        let version = self.buckets[bucket].keys[&key][index].clone();
        self.note(format!(
            "read {}/{key} version {}",
            BUCKETS[bucket], version.id
        ));
        self.check_version(bucket, &key, &version)
    }

    fn missing(&self, bucket: usize, key: &str, v: &Version, e: &StoreError) -> Violation {
        let kind = if v.locked_at(now_ms()) {
            Kind::LockedGone
        } else {
            Kind::Lost
        };
        violation(
            kind,
            format!(
                "{}/{key} version {} (hold {}, retention {:?}) is gone: {e}",
                BUCKETS[bucket], v.id, v.hold, v.retention
            ),
        )
    }

    fn check_version(&mut self, bucket: usize, key: &str, v: &Version) -> Check {
        let Some(body) = &v.body else { return Ok(()) };
        let info = self
            .store()
            .head_version(BUCKETS[bucket], key, Some(&v.id))
            .map_err(|e| self.missing(bucket, key, v, &e))?;
        let from_grid = !info.in_cache;
        if from_grid {
            self.stats.grid_reads += 1;
        }
        let store = self.store();
        // A claim of the catalog: a persisted content read from the grid.
        let kind = if info.state == ContentState::Persisted && from_grid {
            Kind::FalseClaim
        } else {
            Kind::Lost
        };
        let what = format!(
            "{}/{key} version {} ({:?}, {})",
            BUCKETS[bucket],
            v.id,
            info.state,
            if from_grid {
                "from the grid"
            } else {
                "from the cache"
            }
        );
        let (_, mut reader) = store
            .open_version(BUCKETS[bucket], key, Some(&v.id), None, None)
            .map_err(|e| violation(kind, format!("{what}: open: {e}")))?;
        let back =
            read_all(&mut reader).map_err(|e| violation(kind, format!("{what}: read: {e}")))?;
        if back != **body {
            return Err(violation(
                kind,
                format!(
                    "{what}: read {} bytes that differ from the {} acknowledged",
                    back.len(),
                    body.len()
                ),
            ));
        }
        if v.locked_at(now_ms())
            && !(info.attributes.lock.legal_hold == v.hold
                && info.attributes.lock.retention == v.retention)
        {
            return Err(unexpected(format!(
                "{what}: lock {:?}, acknowledged hold {} retention {:?}",
                info.attributes.lock, v.hold, v.retention
            )));
        }
        Ok(())
    }

    fn check_reads(&mut self) -> Check {
        let all: Vec<(usize, String, Version)> = self
            .buckets
            .iter()
            .enumerate()
            .flat_map(|(b, m)| {
                m.keys
                    .iter()
                    .flat_map(move |(k, vs)| vs.iter().map(move |v| (b, k.clone(), v.clone())))
            })
            .collect();
        for (b, key, v) in all {
            self.check_version(b, &key, &v)?;
        }
        Ok(())
    }

    /// The store lists exactly the model's versions (in order, markers where markers are) and uploads.
    fn check_namespace(&mut self) -> Check {
        for (b, model) in self.buckets.iter().enumerate() {
            let page = self
                .store()
                .list_object_versions(BUCKETS[b], &VersionQuery::default())
                .map_err(|e| unexpected(format!("list versions of {}: {e}", BUCKETS[b])))?;
            let listed: Vec<(String, String, bool)> = page
                .versions
                .iter()
                .map(|v| (v.key.clone(), v.version_id.clone(), v.object.is_some()))
                .collect();
            let modelled: Vec<(String, String, bool)> = model
                .keys
                .iter()
                .flat_map(|(k, vs)| {
                    vs.iter()
                        .map(move |v| (k.clone(), v.id.clone(), v.body.is_some()))
                })
                .collect();
            if listed == modelled {
                continue;
            }
            let now = now_ms();
            for (key, versions) in &model.keys {
                for v in versions {
                    if !listed.iter().any(|(k, id, _)| k == key && *id == v.id) {
                        let kind = if v.locked_at(now) {
                            Kind::LockedGone
                        } else {
                            Kind::Lost
                        };
                        return Err(violation(
                            kind,
                            format!(
                                "{}/{key} version {} (hold {}, retention {:?}) is no longer listed",
                                BUCKETS[b], v.id, v.hold, v.retention
                            ),
                        ));
                    }
                }
            }
            return Err(violation(
                Kind::Unacknowledged,
                format!("{} lists {listed:?}, acknowledged {modelled:?}", BUCKETS[b]),
            ));
        }
        let mut listed = Vec::new();
        for name in BUCKETS {
            for upload in self
                .store()
                .list_uploads(name, "", 1000)
                .map_err(|e| unexpected(format!("list uploads: {e}")))?
            {
                listed.push(upload.upload_id);
            }
        }
        listed.sort();
        let modelled: Vec<String> = self.uploads.keys().cloned().collect();
        if listed != modelled {
            return Err(violation(
                Kind::Unacknowledged,
                format!("uploads listed {listed:?}, acknowledged {modelled:?}"),
            ));
        }
        Ok(())
    }

    // ------------------------------------------------------------------------------------------ crashes

    /// Drop the store without closing it (threads stopped, nothing flushed) and open it again.
    fn crash(&mut self) -> Check {
        self.stats.crashes += 1;
        let began = Instant::now();
        drop(self.store.take());
        *self.stats.time.entry("drop").or_default() += began.elapsed();
        // What a crash may leave in the cache directory: a partial upload and a file the catalog never named.
        if self.rng.gen_bool(0.3) {
            let cache = self.dir.path().join("cache");
            for (sub, name) in [("tmp", "partial-upload"), ("contents", "never-committed")] {
                let dir = cache.join(sub);
                let _ = std::fs::create_dir_all(&dir);
                let junk = vec![0x5a; self.rng.gen_range(1..5000)];
                std::fs::write(dir.join(name), junk)
                    .map_err(|e| unexpected(format!("junk file: {e}")))?;
            }
        }
        self.note("  reopen".into());
        self.store = Some(
            Store::open(self.dir.path(), config())
                .map_err(|e| unexpected(format!("reopen after a crash: {e}")))?,
        );
        // The ranges a crashed write left defect are repaired by the engine's recovery thread soon after the
        // replay; run it now, so that the schedule does not depend on when it runs (until then the grid has less
        // redundancy there: a disk damaged meanwhile could make them unrecoverable).
        let report = self
            .store()
            .engine()
            .recover_defects()
            .map_err(|e| unexpected(format!("recover defects after a crash: {e}")))?;
        if !report.unrecoverable.is_empty() {
            return Err(unrepairable(&report.unrecoverable, "after a crash"));
        }
        self.check_namespace()
    }

    /// An upload cut off in the middle of its body by a crash: never visible.
    fn op_torn_upload(&mut self) -> Check {
        let bucket = self.pick_bucket();
        let key = self.pick_key();
        let body = self.body();
        let cut = self.rng.gen_range(0..=body.len());
        let part = !self.uploads.is_empty() && self.rng.gen_bool(0.3);
        self.note(format!(
            "crash during an upload of {}/{key} after {cut} of {} bytes (a part: {part})",
            BUCKETS[bucket],
            body.len()
        ));
        let mut handle = if part {
            let id = self.uploads.keys().next().expect("one").clone();
            self.store()
                .upload_part(&id, 9, Checksums::default())
                .map_err(|e| unexpected(format!("upload part: {e}")))?
        } else {
            self.store()
                .begin_put(BUCKETS[bucket], &key, PutOptions::default())
                .map_err(|e| unexpected(format!("begin put: {e}")))?
        };
        handle
            .write(&body[..cut])
            .map_err(|e| unexpected(format!("write: {e}")))?;
        drop(handle);
        self.crash()
    }

    // ------------------------------------------------------------------------------------------ disk faults

    fn disk_path(&self, disk: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("grid/disks/disk-{disk:02}.img"))
    }

    fn op_fault(&mut self) -> Check {
        let disks = self.store().engine().geometry().disks();
        let disk = if self.damaged.len() < DAMAGED_MAX {
            self.rng.gen_range(0..disks)
        } else {
            self.damaged[self.rng.gen_range(0..self.damaged.len())]
        };
        if !self.damaged.contains(&disk) {
            self.damaged.push(disk);
        }
        self.stats.faults += 1;
        match self.rng.gen_range(0..3) {
            0 => {
                self.note(format!("fault: disk {disk} fails"));
                self.store()
                    .engine()
                    .fail_disk(disk)
                    .map_err(|e| unexpected(format!("fail disk {disk}: {e}")))?;
            }
            1 => {
                let len = self.rng.gen_range(1..=64u64) * 4096;
                let at = HEADER_BYTES + self.rng.gen_range(0..(4 << 20) / 4096) * 4096;
                self.note(format!("fault: disk {disk} bytes {at}+{len} zeroed"));
                write_at(&self.disk_path(disk), at, &vec![0u8; len as usize])?;
            }
            _ => {
                let flips = self.rng.gen_range(1..=16);
                self.note(format!("fault: disk {disk} {flips} bits flipped"));
                for _ in 0..flips {
                    let at = HEADER_BYTES + self.rng.gen_range(0..(4u64 << 20));
                    let bit = self.rng.gen_range(0..8);
                    flip_bit(&self.disk_path(disk), at, bit)?;
                }
            }
        }
        Ok(())
    }

    /// Repair every damaged disk: a failed one replaced and rebuilt, the others scrubbed.
    fn op_repair(&mut self) -> Check {
        self.stats.repairs += 1;
        self.note(format!("repair disks {:?}", self.damaged));
        let damaged = std::mem::take(&mut self.damaged);
        let engine = self.store().engine();
        let bucket_bytes = engine.bucket_capacity_bytes();
        for &disk in &damaged {
            if engine.is_failed(disk) {
                engine
                    .replace_disk(disk, None)
                    .map_err(|e| unexpected(format!("replace disk {disk}: {e}")))?;
                let report = engine
                    .rebuild(disk, &|_, _| {})
                    .map_err(|e| unexpected(format!("rebuild disk {disk}: {e}")))?;
                if !report.unrecoverable.is_empty() {
                    return Err(violation(
                        Kind::Lost,
                        format!(
                            "rebuild of disk {disk}: unrecoverable {:?}",
                            report.unrecoverable
                        ),
                    ));
                }
            } else {
                engine
                    .scrub(disk, 0, bucket_bytes)
                    .map_err(|e| unexpected(format!("scrub disk {disk}: {e}")))?;
            }
        }
        let report = engine
            .recover_defects()
            .map_err(|e| unexpected(format!("recover defects: {e}")))?;
        if !report.unrecoverable.is_empty() {
            return Err(unrepairable(&report.unrecoverable, "in a repair"));
        }
        Ok(())
    }

    // ------------------------------------------------------------------------------------------ schedule

    fn step(&mut self) -> Check {
        self.stats.steps += 1;
        let roll = self.rng.gen_range(0..100);
        let began = Instant::now();
        let result = self.op(roll);
        *self.stats.time.entry(roll_name(roll)).or_default() += began.elapsed();
        result
    }

    fn op(&mut self, roll: u32) -> Check {
        match roll {
            0..=21 => self.op_put(),
            22..=31 => self.op_multipart(),
            32..=36 => self.op_copy(),
            37..=45 => self.op_delete(),
            46..=47 => self.op_versioning(),
            48..=55 => self.op_lock(),
            56..=65 => self.op_persist(),
            66..=71 => self.op_evict(),
            72..=75 => self.op_gc(),
            76..=79 => self.op_lifecycle(),
            80..=87 => self.op_read(),
            88..=90 => {
                self.note("crash".into());
                self.crash()
            }
            91..=92 => self.op_torn_upload(),
            93..=96 => self.op_fault(),
            _ => {
                if self.damaged.is_empty() {
                    Ok(())
                } else {
                    self.op_repair()
                }
            }
        }
    }

    fn run(&mut self, steps: usize) -> Check {
        self.stats.time.insert("open", self.started.elapsed());
        for step in 0..steps {
            self.note(format!("-- step {step}"));
            self.step()?;
        }
        // The end: everything persisted, evicted, read back from the grid; a last crash and the same again.
        self.note("-- final checks".into());
        let began = Instant::now();
        let result = self.final_checks();
        self.stats.time.insert("final", began.elapsed());
        result
    }

    fn final_checks(&mut self) -> Check {
        self.check_namespace()?;
        if !self.damaged.is_empty() {
            self.op_repair()?;
        }
        self.note("persist".into());
        match self.store().persist_now() {
            Ok(()) => self.check_all_persisted()?,
            Err(e) => return Err(unexpected(format!("final persist: {e}"))),
        }
        self.op_gc()?;
        self.op_evict()?;
        self.crash()?;
        self.op_evict()
    }
}

fn write_at(path: &Path, at: u64, data: &[u8]) -> Check {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| unexpected(format!("open {}: {e}", path.display())))?;
    file.write_all_at(data, at)
        .map_err(|e| unexpected(format!("write {}: {e}", path.display())))
}

fn flip_bit(path: &Path, at: u64, bit: u8) -> Check {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| unexpected(format!("open {}: {e}", path.display())))?;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at)
        .map_err(|e| unexpected(format!("read {}: {e}", path.display())))?;
    byte[0] ^= 1 << bit;
    file.write_all_at(&byte, at)
        .map_err(|e| unexpected(format!("write {}: {e}", path.display())))
}

/// What one seed did: `Ok` with its statistics, or the violation and the last operations.
fn run_seed(seed: u64) -> Result<String, (Violation, String)> {
    let log = Arc::new(Mutex::new(VecDeque::new()));
    let log_for_run = Arc::clone(&log);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut sim = Sim::new(seed, log_for_run)?;
        sim.run(STEPS)?;
        Ok(format!("{:?}", sim.stats))
    }));
    let dump = || log.lock().iter().cloned().collect::<Vec<_>>().join("\n  ");
    match outcome {
        Ok(Ok(stats)) => Ok(stats),
        Ok(Err(v)) => Err((v, dump())),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err((unexpected(format!("panicked: {message}")), dump()))
        }
    }
}

fn rerun_line(seed: u64) -> String {
    format!(
        "PERMAFROST_SIM_SEED={seed} cargo test --workspace --test simulation -- --ignored store_simulation_replay --nocapture"
    )
}

fn failure_message(seed: u64, v: &Violation, log: &str) -> String {
    format!(
        "store simulation seed {seed} failed ({:?}): {}\nlast operations:\n  {log}\nrerun: {}",
        v.kind,
        v.message,
        rerun_line(seed)
    )
}

/// What a run of many seeds did.
struct Outcome {
    /// Seeds run to their end (passed or failed).
    seeds: u64,
    /// The lowest failing seed, its violation and its last operations.
    failure: Option<(u64, Violation, String)>,
}

/// Run seeds from 1 on, `PERMAFROST_SIM_THREADS` (default 4) at a time (a schedule mostly waits: on fsyncs,
/// threads stopping, disks), while fewer than `count` seeds ran and either fewer than `min` ran or `budget`
/// has not passed; stop at the first failure.
fn run_seeds(count: Option<u64>, budget: Option<Duration>, min: u64) -> Outcome {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let threads = env_u64("PERMAFROST_SIM_THREADS").unwrap_or(4).max(1);
    let verbose = std::env::var_os("PERMAFROST_SIM_VERBOSE").is_some();
    let started = Instant::now();
    let next = AtomicU64::new(1);
    let done = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if failed.load(Ordering::SeqCst) {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::SeqCst);
                let in_time = seed <= min || budget.is_none_or(|b| started.elapsed() < b);
                if count.is_some_and(|c| seed > c) || !in_time {
                    return;
                }
                let began = Instant::now();
                let result = run_seed(seed);
                done.fetch_add(1, Ordering::SeqCst);
                match result {
                    Ok(stats) if verbose => eprintln!(
                        "store simulation seed {seed}: ok in {:.2} s; {stats}",
                        began.elapsed().as_secs_f64()
                    ),
                    Ok(_) => {}
                    Err((v, log)) => {
                        failed.store(true, Ordering::SeqCst);
                        failures.lock().push((seed, v, log));
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner();
    failures.sort_by_key(|(seed, _, _)| *seed);
    Outcome {
        seeds: done.into_inner(),
        failure: failures.into_iter().next(),
    }
}

/// The planted-bug switches are process-wide: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

#[test]
fn store_simulation_never_loses_acknowledged_data_nor_shows_unacknowledged() {
    let _serial = SERIAL.lock();
    let started = Instant::now();
    let outcome = run_seeds(None, Some(Duration::from_secs(CI_SECONDS)), CI_SEEDS_MIN);
    if let Some((seed, v, log)) = outcome.failure {
        panic!("{}", failure_message(seed, &v, &log));
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "store simulation: {} seeds passed in {seconds:.1} s ({:.1} seeds/s)",
        outcome.seeds,
        outcome.seeds as f64 / seconds
    );
}

/// `PERMAFROST_SIM_SEED=<seed>` replays one seed; `PERMAFROST_SIM_SEEDS=<count>` runs seeds 1..=count (2,000
/// by default: `scripts/test --soak` runs it).
#[test]
#[ignore]
fn store_simulation_replay() {
    let _serial = SERIAL.lock();
    if let Some(seed) = env_u64("PERMAFROST_SIM_SEED") {
        let started = Instant::now();
        match run_seed(seed) {
            Ok(stats) => eprintln!(
                "store simulation seed {seed}: ok in {:.2} s; {stats}",
                started.elapsed().as_secs_f64()
            ),
            Err((v, log)) => panic!("{}", failure_message(seed, &v, &log)),
        }
        return;
    }
    let count = env_u64("PERMAFROST_SIM_SEEDS").unwrap_or(2_000);
    let started = Instant::now();
    let outcome = run_seeds(Some(count), None, 0);
    if let Some((seed, v, log)) = outcome.failure {
        panic!("{}", failure_message(seed, &v, &log));
    }
    eprintln!(
        "store simulation: {count} seeds passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Turn `switch` on, run seeds until the simulation reports a violation (within the CI budget), turn it off.
fn planted_bug_is_caught(
    switch: &'static std::sync::atomic::AtomicBool,
    expected: &[Kind],
    name: &str,
) {
    struct Off(&'static std::sync::atomic::AtomicBool);
    impl Drop for Off {
        fn drop(&mut self) {
            self.0.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let _serial = SERIAL.lock();
    switch.store(true, std::sync::atomic::Ordering::SeqCst);
    let _off = Off(switch);
    let started = Instant::now();
    let outcome = run_seeds(None, Some(Duration::from_secs(CI_SECONDS)), 0);
    let Some((seed, v, _)) = outcome.failure else {
        panic!(
            "planted bug {name}: not caught by {} seeds in {CI_SECONDS} s",
            outcome.seeds
        );
    };
    assert!(
        expected.contains(&v.kind),
        "planted bug {name}: seed {seed} reported {:?} ({}), expected one of {expected:?}",
        v.kind,
        v.message
    );
    eprintln!(
        "planted bug {name}: caught by seed {seed} ({} seeds run) after {:.1} s as {:?}: {}",
        outcome.seeds,
        started.elapsed().as_secs_f64(),
        v.kind,
        v.message
    );
}

#[test]
fn the_simulation_catches_contents_marked_persisted_before_their_grid_write_is_durable() {
    planted_bug_is_caught(
        &planted_bugs::PERSISTED_BEFORE_DURABLE,
        &[Kind::FalseClaim],
        "persisted before durable",
    );
}

#[test]
fn the_simulation_catches_a_lifecycle_that_ignores_legal_holds() {
    planted_bug_is_caught(
        &planted_bugs::LIFECYCLE_IGNORES_LEGAL_HOLD,
        &[Kind::LockedGone],
        "lifecycle ignores legal holds",
    );
}

/// Found by this simulation: dropping (or closing) a store waited out the restore thread's poll, a second per
/// stop, because the stop never woke it.
#[test]
fn a_store_stops_without_waiting_out_the_restore_thread_poll() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..3 {
        let store = Store::open(dir.path(), config()).unwrap();
        // Let every thread reach its wait.
        std::thread::sleep(Duration::from_millis(150));
        let started = Instant::now();
        drop(store);
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(700),
            "the store took {took:?} to stop"
        );
    }
}
