//! The recorder of a server: the scans being recorded (at most one per UDP port), the ones that ended, the
//! schedule, and what a restart finds (scans a crash interrupted are finished as `interrupted`).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use permafrost_store::{
    BucketArchive, BucketSettings, Compression, Lifecycle, LifecycleRule, Store, StoreError,
};
use serde::{Deserialize, Serialize};

use crate::scan::{permafrost_store_now_ms, Recording, ScanSpec, ScanState, ScanStatus};
use crate::schedule::{self, check_name};
use crate::{meta, net, RecordConfig};

/// How long `stop` waits for a scan's last piece to be sealed and the object finished.
const STOP_WAIT_MS: u64 = 120_000;
/// The scheduler looks at the clock at least this often.
const SCHEDULER_TICK_MS: u64 = 100;

/// Errors of the recorder's operations, each with the message for the operator.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Bad input (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// No such scan (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// Conflicts with a scan, a port or an object (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    /// Anything else (HTTP 500).
    #[error("{0}")]
    Internal(String),
}

/// What the schedule's lines leave out: where and what to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleDefaults {
    pub experiment: String,
    pub station: String,
    pub listen: SocketAddr,
    #[serde(default)]
    pub udps: bool,
    #[serde(default)]
    pub frame_bytes: Option<usize>,
    #[serde(default)]
    pub frames_per_second: Option<u64>,
}

/// A scan waiting for its start time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduledScan {
    pub id: String,
    pub start_ms: u64,
    pub start: String,
    pub duration_ms: u64,
    pub listen: SocketAddr,
    /// Line of the schedule file.
    pub line: usize,
    pub spec: ScanSpec,
}

/// Everything `permafrost record status` shows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecorderStatus {
    pub bucket: String,
    /// `net.core.rmem_max` of this host and what a scan asks for.
    pub rmem_max_bytes: Option<u64>,
    pub rcvbuf_requested_bytes: usize,
    /// Scans being recorded, then those that ended (most recent first).
    pub scans: Vec<ScanStatus>,
    pub scheduled: Vec<ScheduledScan>,
    /// Scheduled scans that could not start, with why.
    pub schedule_errors: Vec<String>,
}

struct State {
    active: BTreeMap<String, Recording>,
    ended: VecDeque<ScanStatus>,
    scheduled: Vec<ScheduledScan>,
    schedule_errors: Vec<String>,
}

/// The recorder (see the module doc). Create with [`Recorder::open`]; call [`Recorder::shutdown`] before the
/// store closes.
pub struct Recorder {
    store: Arc<Store>,
    config: RecordConfig,
    state: Mutex<State>,
    wake: Condvar,
    stopping: AtomicBool,
    scheduler: Mutex<Option<JoinHandle<()>>>,
}

fn internal(e: impl std::fmt::Display) -> RecordError {
    RecordError::Internal(e.to_string())
}

/// The lifecycle of a bucket the recorder creates: its scans expire `days` after they were written (the operator
/// may change the rules later like any bucket's).
fn retention_rule(days: u32) -> BucketArchive {
    BucketArchive {
        lifecycle: Some(Lifecycle {
            rules: vec![LifecycleRule {
                id: "record-retention".into(),
                enabled: true,
                expiration_days: Some(days),
                ..LifecycleRule::default()
            }],
            ..Lifecycle::default()
        }),
        ..BucketArchive::default()
    }
}

impl Recorder {
    /// Start the recorder on `store`: finish the scans a previous run left unfinished (as `interrupted`), and
    /// start the scheduler. Its bucket is created by the first scan ([`Recorder::start`]), not here: a server
    /// that records nothing has no recorder bucket.
    pub fn open(store: Arc<Store>, config: RecordConfig) -> anyhow::Result<Arc<Recorder>> {
        config.validate()?;
        let mut ended = VecDeque::new();
        for object in store.growing_objects()? {
            let metadata = object.user_metadata();
            if meta::get(&metadata, meta::STATE) != Some(ScanState::Recording.as_str()) {
                continue; // not a scan
            }
            let info = Recording::finish_interrupted(&object)?;
            tracing::warn!(
                "record: scan {}/{} was interrupted by a stop of the server; finished with its last durable point: {} bytes, last frame {}",
                info.bucket,
                info.key,
                info.size_bytes,
                meta::get(&metadata, meta::LAST).unwrap_or("none")
            );
            ended.push_front(interrupted_status(&info, &metadata));
        }
        let recorder = Arc::new(Recorder {
            store,
            config,
            state: Mutex::new(State {
                active: BTreeMap::new(),
                ended,
                scheduled: Vec::new(),
                schedule_errors: Vec::new(),
            }),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
            scheduler: Mutex::new(None),
        });
        let weak = Arc::downgrade(&recorder);
        let handle = std::thread::Builder::new()
            .name("record-schedule".into())
            .spawn(move || scheduler(weak))?;
        *recorder.scheduler.lock() = Some(handle);
        Ok(recorder)
    }

    pub fn config(&self) -> &RecordConfig {
        &self.config
    }

    /// Create the recorder's bucket if it is missing, with compression `none` (VDIF samples do not compress)
    /// and, when `retention_days` > 0, a lifecycle rule expiring scans after that many days. Called by each
    /// scan's start; a bucket that exists (made by an earlier scan or by an operator) is left as it is.
    fn ensure_bucket(&self) -> Result<(), RecordError> {
        let bucket = &self.config.bucket;
        match self.store.head_bucket(bucket) {
            Ok(_) => return Ok(()),
            Err(StoreError::NoSuchBucket(_)) => {}
            Err(e) => return Err(internal(e)),
        }
        let settings = BucketSettings {
            compression: Some(Compression::None),
            ..BucketSettings::default()
        };
        match self.store.create_bucket(bucket, settings) {
            Ok(()) => {}
            // Created meanwhile through S3: the operator's bucket, left as it is.
            Err(StoreError::BucketAlreadyOwnedByYou(_)) => return Ok(()),
            Err(e) => {
                return Err(internal(format!(
                    "cannot create the recorder's bucket {bucket}: {e}"
                )))
            }
        }
        if self.config.retention_days > 0 {
            self.store
                .set_bucket_archive(bucket, retention_rule(self.config.retention_days))
                .map_err(|e| {
                    internal(format!(
                        "cannot set the retention rule of the recorder's bucket {bucket}: {e}"
                    ))
                })?;
        }
        let expiry = match self.config.retention_days {
            0 => "no expiry".to_string(),
            days => format!("scans expire after {days} days"),
        };
        tracing::info!(
            "record: created bucket {bucket} for the scans (compression none, {expiry})"
        );
        Ok(())
    }

    fn check_spec(&self, spec: &ScanSpec, state: &State) -> Result<(), RecordError> {
        check_name("experiment", &spec.experiment).map_err(RecordError::BadRequest)?;
        check_name("station", &spec.station).map_err(RecordError::BadRequest)?;
        check_name("scan", &spec.scan).map_err(RecordError::BadRequest)?;
        if let Some(fb) = spec.frame_bytes {
            if fb % 8 != 0
                || !(crate::vdif::HEADER_BYTES..=crate::vdif::FRAME_BYTES_MAX).contains(&fb)
            {
                return Err(RecordError::BadRequest(format!(
                    "frame size {fb} must be a multiple of 8 between {} and {} bytes",
                    crate::vdif::HEADER_BYTES,
                    crate::vdif::FRAME_BYTES_MAX
                )));
            }
        }
        if spec.duration_ms == Some(0) || spec.frames_per_second == Some(0) {
            return Err(RecordError::BadRequest(
                "duration and frames per second must be positive".into(),
            ));
        }
        let id = spec.id();
        if state.active.contains_key(&id) {
            return Err(RecordError::Conflict(format!(
                "scan {id} is being recorded already"
            )));
        }
        if state.scheduled.iter().any(|s| s.id == id) {
            return Err(RecordError::Conflict(format!(
                "scan {id} is in the schedule already"
            )));
        }
        if let Some((other, _)) = state
            .active
            .iter()
            .find(|(_, r)| r.shared.spec.listen.port() == spec.listen.port())
        {
            return Err(RecordError::Conflict(format!(
                "UDP port {} is in use by scan {other}",
                spec.listen.port()
            )));
        }
        match self.store.head_object(&self.config.bucket, &spec.key()) {
            Ok(_) => Err(RecordError::Conflict(format!(
                "scan {id} exists already as {}/{}; choose another scan name",
                self.config.bucket,
                spec.key()
            ))),
            // No bucket yet: the scan's start creates it.
            Err(StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket(_)) => Ok(()),
            Err(e) => Err(internal(e)),
        }
    }

    /// Start recording `spec` now.
    pub fn start(&self, spec: ScanSpec) -> Result<ScanStatus, RecordError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(RecordError::Conflict("the server is stopping".into()));
        }
        let mut state = self.state.lock();
        self.check_spec(&spec, &state)?;
        self.ensure_bucket()?;
        let id = spec.id();
        let recording = Recording::start(
            &self.store,
            spec,
            &self.config.bucket,
            &self.config,
            self.config.retention_days,
        )
        .map_err(|e| match e.downcast::<net::NetError>() {
            Ok(n @ net::NetError::PortInUse { .. }) => RecordError::Conflict(n.to_string()),
            Ok(n) => RecordError::BadRequest(n.to_string()),
            Err(e) => match e.downcast::<StoreError>() {
                Ok(StoreError::InvalidArgument(m)) => RecordError::Conflict(m),
                Ok(s) => internal(s),
                Err(e) => internal(e),
            },
        })?;
        let status = recording.shared.status();
        state.active.insert(id, recording);
        Ok(status)
    }

    /// Stop scan `id` (`experiment/station/scan`) and wait until its object is finished.
    pub fn stop(&self, id: &str) -> Result<ScanStatus, RecordError> {
        let mut recording = {
            let mut state = self.state.lock();
            if let Some(i) = state.scheduled.iter().position(|s| s.id == id) {
                let s = state.scheduled.remove(i);
                return Err(RecordError::NotFound(format!(
                    "scan {id} had not started (scheduled for {}); it is removed from the schedule",
                    s.start
                )));
            }
            match state.active.remove(id) {
                Some(r) => r,
                None => {
                    let active: Vec<&String> = state.active.keys().collect();
                    return Err(RecordError::NotFound(if active.is_empty() {
                        format!("no scan {id} is being recorded (none is)")
                    } else {
                        format!(
                            "no scan {id} is being recorded (recording: {})",
                            active
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }));
                }
            }
        };
        recording.request_stop();
        let deadline = std::time::Instant::now() + Duration::from_millis(STOP_WAIT_MS);
        while !recording.is_done() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !recording.is_done() {
            self.state.lock().active.insert(id.to_string(), recording);
            return Err(RecordError::Internal(format!(
                "scan {id} did not finish within {STOP_WAIT_MS} ms; it is still finishing"
            )));
        }
        recording.join();
        let status = recording.shared.status();
        self.remember(status.clone());
        Ok(status)
    }

    fn remember(&self, status: ScanStatus) {
        let mut state = self.state.lock();
        state.ended.push_front(status);
        while state.ended.len() > self.config.history_max {
            state.ended.pop_back();
        }
    }

    /// Move scans whose threads ended (duration reached, failure) to the history.
    fn reap(&self) {
        let done: Vec<Recording> = {
            let mut state = self.state.lock();
            let ids: Vec<String> = state
                .active
                .iter()
                .filter(|(_, r)| r.is_done())
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter()
                .filter_map(|id| state.active.remove(id))
                .collect()
        };
        for mut r in done {
            r.join();
            self.remember(r.shared.status());
        }
    }

    /// The recorder's status.
    pub fn status(&self) -> RecorderStatus {
        self.reap();
        let state = self.state.lock();
        let mut scans: Vec<ScanStatus> = state.active.values().map(|r| r.shared.status()).collect();
        scans.extend(state.ended.iter().cloned());
        RecorderStatus {
            bucket: self.config.bucket.clone(),
            rmem_max_bytes: net::rmem_max(),
            rcvbuf_requested_bytes: self.config.rcvbuf_bytes,
            scans,
            scheduled: state.scheduled.clone(),
            schedule_errors: state.schedule_errors.clone(),
        }
    }

    /// The status of scan `id` (being recorded or ended).
    pub fn scan_status(&self, id: &str) -> Result<ScanStatus, RecordError> {
        self.status()
            .scans
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| RecordError::NotFound(format!("no scan {id} is known to this server")))
    }

    /// Add the scans of a schedule file (all or none): each starts at its time and stops after its duration.
    pub fn schedule(
        &self,
        defaults: &ScheduleDefaults,
        text: &str,
    ) -> Result<Vec<ScheduledScan>, RecordError> {
        let entries =
            schedule::parse(text, permafrost_store_now_ms()).map_err(RecordError::BadRequest)?;
        let mut state = self.state.lock();
        let mut added = Vec::new();
        for e in entries {
            let spec = ScanSpec {
                experiment: defaults.experiment.clone(),
                station: defaults.station.clone(),
                scan: e.scan.clone(),
                listen: defaults.listen,
                udps: defaults.udps,
                frame_bytes: defaults.frame_bytes,
                frames_per_second: defaults.frames_per_second,
                duration_ms: Some(e.duration_ms),
            };
            self.check_spec(&spec, &state).map_err(|err| {
                RecordError::BadRequest(format!("schedule line {}: {err}", e.line))
            })?;
            let clash = state
                .scheduled
                .iter()
                .chain(added.iter())
                .find(|s: &&ScheduledScan| {
                    s.listen.port() == spec.listen.port()
                        && e.start_ms < s.start_ms + s.duration_ms
                        && s.start_ms < e.start_ms + e.duration_ms
                });
            if let Some(other) = clash {
                return Err(RecordError::BadRequest(format!(
                    "schedule line {}: scan {} overlaps scheduled scan {} on UDP port {}",
                    e.line,
                    spec.id(),
                    other.id,
                    spec.listen.port()
                )));
            }
            added.push(ScheduledScan {
                id: spec.id(),
                start_ms: e.start_ms,
                start: meta::rfc3339(e.start_ms),
                duration_ms: e.duration_ms,
                listen: spec.listen,
                line: e.line,
                spec,
            });
        }
        state.scheduled.extend(added.iter().cloned());
        state.scheduled.sort_by_key(|s| s.start_ms);
        drop(state);
        self.wake.notify_all();
        Ok(added)
    }

    /// Remove every scan that has not started from the schedule; returns how many.
    pub fn clear_schedule(&self) -> usize {
        let mut state = self.state.lock();
        let n = state.scheduled.len();
        state.scheduled.clear();
        n
    }

    /// Start the scheduled scans that are due.
    fn start_due(&self) {
        let now = permafrost_store_now_ms();
        let due: Vec<ScheduledScan> = {
            let mut state = self.state.lock();
            let n = state
                .scheduled
                .iter()
                .take_while(|s| s.start_ms <= now)
                .count();
            state.scheduled.drain(..n).collect()
        };
        for s in due {
            let late_ms = now.saturating_sub(s.start_ms);
            match self.start(s.spec.clone()) {
                Ok(_) => tracing::info!(
                    "record: scheduled scan {} started ({late_ms} ms after its time, line {})",
                    s.id,
                    s.line
                ),
                Err(e) => {
                    let message = format!(
                        "scheduled scan {} (line {}) did not start: {e}",
                        s.id, s.line
                    );
                    tracing::warn!("record: {message}");
                    self.state.lock().schedule_errors.push(message);
                }
            }
        }
    }

    /// Stop every scan (the server is stopping): each is finished as `interrupted` with what it received.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_all();
        if let Some(h) = self.scheduler.lock().take() {
            let _ = h.join();
        }
        let active: Vec<(String, Recording)> = std::mem::take(&mut self.state.lock().active)
            .into_iter()
            .collect();
        for (id, mut r) in active {
            r.shared
                .interrupted
                .lock()
                .get_or_insert_with(|| "the server was stopped during the scan".into());
            r.request_stop();
            r.join();
            tracing::info!("record: scan {id} stopped with the server");
            self.remember(r.shared.status());
        }
    }
}

fn scheduler(recorder: std::sync::Weak<Recorder>) {
    loop {
        let Some(r) = recorder.upgrade() else { return };
        if r.stopping.load(Ordering::SeqCst) {
            return;
        }
        r.start_due();
        r.reap();
        let mut state = r.state.lock();
        let now = permafrost_store_now_ms();
        let wait = state.scheduled.first().map_or(SCHEDULER_TICK_MS, |s| {
            s.start_ms.saturating_sub(now).min(SCHEDULER_TICK_MS)
        });
        if wait > 0 && !r.stopping.load(Ordering::SeqCst) {
            r.wake.wait_for(&mut state, Duration::from_millis(wait));
        }
    }
}

/// The status of a scan finished after a crash, from its object.
fn interrupted_status(
    info: &permafrost_store::ObjectInfo,
    metadata: &[(String, String)],
) -> ScanStatus {
    let number = |name| meta::get(metadata, name).and_then(|v| v.split(' ').next()?.parse().ok());
    let mut writer = crate::scan::WriterView {
        durable_bytes: info.size_bytes,
        bytes_written: info.size_bytes,
        ..Default::default()
    };
    writer.loss.frames_received = number(meta::RECEIVED).unwrap_or(0);
    writer.loss.frames_expected = number(meta::EXPECTED).unwrap_or(0);
    writer.loss.frames_missing = number(meta::MISSING).unwrap_or(0);
    writer.loss.frames_out_of_order = number(meta::OUT_OF_ORDER).unwrap_or(0);
    ScanStatus {
        id: format!(
            "{}/{}/{}",
            meta::get(metadata, meta::EXPERIMENT).unwrap_or("?"),
            meta::get(metadata, meta::STATION).unwrap_or("?"),
            meta::get(metadata, meta::SCAN).unwrap_or("?")
        ),
        bucket: info.bucket.clone(),
        key: info.key.clone(),
        state: ScanState::Interrupted,
        listen: "0.0.0.0:0".parse().expect("address"),
        numbering: if meta::get(metadata, meta::NUMBERING) == Some("udps-sequence") {
            crate::loss::Numbering::UdpsSequence
        } else {
            crate::loss::Numbering::VdifTime
        },
        frame_bytes: number(meta::FRAME_BYTES).map(|n: u64| n as usize),
        started_ms: 0,
        ended_ms: Some(permafrost_store_now_ms()),
        duration_ms: None,
        rcvbuf: None,
        datagrams_received: 0,
        bytes_received: 0,
        frames_accepted: 0,
        frames_rejected: BTreeMap::new(),
        first_rejection: None,
        ring_dropped_frames: 0,
        ring_bytes_allocated: 0,
        ring_bytes_used_max: 0,
        kernel_drops: 0,
        udp_rcvbuf_errors_system: None,
        writer,
        cpu_seconds: Default::default(),
        error: Some("the server stopped during the scan".into()),
    }
}
