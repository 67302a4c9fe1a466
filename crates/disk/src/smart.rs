//! SMART that never wakes a disk.
//!
//! `smartctl` wakes a sleeping drive, which an archive that sleeps must not do. So SMART is read only when a
//! disk spins anyway: the [`SmartMonitor`] listens to the [`PowerManager`]'s spin-ups (which the scheduler made
//! for other work), and on a spin-up of a disk whose last reading is older than
//! [`SmartSettings::max_age_hours`] it reads SMART from another thread, holding the disk only if it is still on
//! ([`PowerManager::acquire_if_on`]; never an acquire that could spin it up). A disk that was not read for longer
//! than the setting is read at its next spin-up, never by waking it. Real drives are read with
//! `smartctl --json -n standby -i -H -A DEVICE` (`-n standby`: smartctl itself refuses to touch a drive in
//! standby); a file-backed disk reads the same JSON from the file beside it ([`smart_file_beside`]), so tests can
//! raise counts. One parser ([`parse_smartctl_json`]) serves both.
//!
//! Each reading is compared with the previous one of the same drive ([`compare`], pure): an alert when any of
//! attributes 5, 187, 188, 197, 198 ([`WATCHED`]) rises, and when start/stop (4) or load-cycle (193) counts reach
//! [`SmartSettings::rating_warn_percent`] of the drive's rating. Readings go to a [`SmartHistory`] (the catalog
//! in the server) and to the monitor's listener (events, metrics, the dashboard). See `docs/smart.md`.

use crate::power::PowerManager;
use parking_lot::{Condvar, Mutex, RwLock};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Attributes whose raw count rising means the drive is failing: `(id, name)`.
pub const WATCHED: [(u32, &str); 5] = [
    (5, "reallocated_sectors"),
    (187, "reported_uncorrectable"),
    (188, "command_timeout"),
    (197, "current_pending_sectors"),
    (198, "offline_uncorrectable"),
];
/// Start/stop count (attribute 4).
pub const START_STOP: u32 = 4;
/// Load-cycle count (attribute 193).
pub const LOAD_CYCLE: u32 = 193;
/// The most spin-ups waiting for the reader; more are dropped (a disk already waiting is not queued twice).
const QUEUE_MAX: usize = 1024;
/// How long dropping a monitor waits for a reading under way.
const DROP_WAIT: Duration = Duration::from_secs(2);

/// The stable name of an attribute the monitor knows (`attribute_<id>` otherwise).
pub fn attribute_name(id: u32) -> String {
    match id {
        START_STOP => "start_stop_count".to_string(),
        LOAD_CYCLE => "load_cycle_count".to_string(),
        _ => WATCHED
            .iter()
            .find(|(i, _)| *i == id)
            .map_or_else(|| format!("attribute_{id}"), |(_, n)| n.to_string()),
    }
}

/// The settings (`[smart]` in the configuration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmartSettings {
    /// Read SMART at spin-ups at all.
    pub enabled: bool,
    /// A disk whose last reading is older than this is read at its next spin-up (never by waking it).
    pub max_age_hours: f64,
    /// Start/stop cycles (attribute 4) the drive is rated for (datasheets: 50,000 for most 3.5" drives).
    pub start_stop_rating: u64,
    /// Load/unload cycles (attribute 193) the drive is rated for (datasheets: 300,000 to 600,000).
    pub load_cycle_rating: u64,
    /// An alert when a count reaches this percentage of its rating.
    pub rating_warn_percent: f64,
    /// The smartctl program (Debian's smartmontools).
    pub smartctl: PathBuf,
    /// Opt-in: a disk whose SMART says it is failing ([`SmartAlert::is_failing`]) is evacuated by the server at
    /// once (`grid evacuate`'s task, to a new file beside a file-backed disk; a block device needs its
    /// replacement named, so for one the alert says to evacuate it by hand).
    pub evacuate_when_failing: bool,
}

impl Default for SmartSettings {
    fn default() -> Self {
        SmartSettings {
            enabled: true,
            max_age_hours: 24.0,
            start_stop_rating: 50_000,
            load_cycle_rating: 300_000,
            rating_warn_percent: 90.0,
            smartctl: PathBuf::from("smartctl"),
            evacuate_when_failing: false,
        }
    }
}

impl SmartSettings {
    /// [`SmartSettings::max_age_hours`] in milliseconds.
    pub fn max_age_ms(&self) -> u64 {
        (self.max_age_hours.max(0.0) * 3_600_000.0) as u64
    }
}

/// One SMART reading of a drive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartReading {
    /// When it was read (ms since the epoch, the monitor's clock).
    pub at_unix_ms: u64,
    /// Raw value per attribute id.
    pub attributes: BTreeMap<u32, u64>,
    /// The drive's overall self-assessment, when reported.
    pub passed: Option<bool>,
    pub model: Option<String>,
    pub serial: Option<String>,
}

/// Why a reading did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SmartError {
    /// The drive was in standby (smartctl `-n standby` refused): it is read at its next spin-up.
    #[error("the drive is in standby; not woken for SMART")]
    Standby,
    /// Nothing to read (a file-backed disk without a SMART file beside it).
    #[error("no SMART data: {0}")]
    Unavailable(String),
    /// The reader failed (smartctl missing, the file unreadable).
    #[error("reading SMART failed: {0}")]
    Read(String),
    /// The JSON was not smartctl's.
    #[error("SMART JSON not understood: {0}")]
    Parse(String),
}

/// Parse `smartctl --json` output (`-A`, optionally with `-i -H`): ATA attributes' raw values, the overall
/// health, model and serial. Output saying the drive is in standby is [`SmartError::Standby`]; output without an
/// attribute table is [`SmartError::Unavailable`]. `at_unix_ms` of the result is 0 (the caller stamps it).
pub fn parse_smartctl_json(text: &str) -> Result<SmartReading, SmartError> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| SmartError::Parse(e.to_string()))?;
    if !json.is_object() {
        return Err(SmartError::Parse("not a JSON object".to_string()));
    }
    let messages = json["smartctl"]["messages"].as_array();
    let standby = messages.is_some_and(|m| {
        m.iter().any(|m| {
            m["string"]
                .as_str()
                .is_some_and(|s| s.to_ascii_uppercase().contains("STANDBY"))
        })
    });
    if standby {
        return Err(SmartError::Standby);
    }
    let Some(table) = json["ata_smart_attributes"]["table"].as_array() else {
        let why = messages
            .and_then(|m| m.iter().find_map(|m| m["string"].as_str()))
            .unwrap_or("no ata_smart_attributes table");
        return Err(SmartError::Unavailable(why.to_string()));
    };
    let mut attributes = BTreeMap::new();
    for row in table {
        let id = row["id"]
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| SmartError::Parse(format!("attribute without an id: {row}")))?;
        let raw = row["raw"]["value"]
            .as_u64()
            .ok_or_else(|| SmartError::Parse(format!("attribute {id} without raw.value")))?;
        attributes.insert(id, raw);
    }
    let text_of = |v: &serde_json::Value| v.as_str().map(|s| s.trim().to_string());
    Ok(SmartReading {
        at_unix_ms: 0,
        attributes,
        passed: json["smart_status"]["passed"].as_bool(),
        model: text_of(&json["model_name"]),
        serial: text_of(&json["serial_number"]),
    })
}

/// What a reading says that the operator must hear.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "alert", rename_all = "snake_case")]
pub enum SmartAlert {
    /// A watched attribute's raw count rose (from 0 for the first reading of a drive).
    Rose { id: u32, from: u64, to: u64 },
    /// A start/stop or load-cycle count reached the warning share of the drive's rating.
    NearRating { id: u32, count: u64, rating: u64 },
    /// The drive's overall self-assessment turned to failed.
    HealthFailed,
}

impl std::fmt::Display for SmartAlert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SmartAlert::Rose { id, from, to } => {
                write!(f, "{} ({id}) rose from {from} to {to}", attribute_name(*id))
            }
            SmartAlert::NearRating { id, count, rating } => write!(
                f,
                "{} ({id}) is {count}, {:.0}% of the drive's rating of {rating}",
                attribute_name(*id),
                *count as f64 * 100.0 / (*rating).max(1) as f64
            ),
            SmartAlert::HealthFailed => f.write_str("the drive's overall health assessment failed"),
        }
    }
}

impl SmartAlert {
    /// Whether the alert says the drive is failing (a watched error count rose, or its health failed), as
    /// opposed to wearing towards its rated start/stop or load cycles.
    pub fn is_failing(&self) -> bool {
        matches!(self, SmartAlert::Rose { .. } | SmartAlert::HealthFailed)
    }
}

/// Whether `count` is at or above the warning share of `rating` (a rating of 0: never).
fn near(count: u64, rating: u64, percent: f64) -> bool {
    rating > 0 && count as f64 >= rating as f64 * percent / 100.0
}

/// The alerts of `current` after `previous` (the drive's last reading, if any). A reading of another drive
/// (its serial differs) starts over as a first reading. Pure.
pub fn compare(
    previous: Option<&SmartReading>,
    current: &SmartReading,
    settings: &SmartSettings,
) -> Vec<SmartAlert> {
    let previous = previous.filter(|p| p.serial == current.serial);
    let before = |id: u32| previous.and_then(|p| p.attributes.get(&id).copied());
    let mut alerts = Vec::new();
    for (id, _) in WATCHED {
        if let Some(&to) = current.attributes.get(&id) {
            let from = before(id).unwrap_or(0);
            if to > from {
                alerts.push(SmartAlert::Rose { id, from, to });
            }
        }
    }
    for (id, rating) in [
        (START_STOP, settings.start_stop_rating),
        (LOAD_CYCLE, settings.load_cycle_rating),
    ] {
        if let Some(&count) = current.attributes.get(&id) {
            let was_near =
                before(id).is_some_and(|b| near(b, rating, settings.rating_warn_percent));
            if near(count, rating, settings.rating_warn_percent) && !was_near {
                alerts.push(SmartAlert::NearRating { id, count, rating });
            }
        }
    }
    let passed_before = previous.is_none_or(|p| p.passed != Some(false));
    if current.passed == Some(false) && passed_before {
        alerts.push(SmartAlert::HealthFailed);
    }
    alerts
}

/// Whether a reading says the disk needs attention now (the dashboard's mark, `permafrost_disk_smart_warning`):
/// a watched count above 0, a count at the warning share of its rating, or a failed health assessment.
pub fn warning(reading: &SmartReading, settings: &SmartSettings) -> bool {
    let a = |id: u32| reading.attributes.get(&id).copied().unwrap_or(0);
    WATCHED.iter().any(|&(id, _)| a(id) > 0)
        || near(
            a(START_STOP),
            settings.start_stop_rating,
            settings.rating_warn_percent,
        )
        || near(
            a(LOAD_CYCLE),
            settings.load_cycle_rating,
            settings.rating_warn_percent,
        )
        || reading.passed == Some(false)
}

/// Whether a disk last read at `last_unix_ms` (`None`: never) is due for a reading at `now_unix_ms`.
pub fn due(last_unix_ms: Option<u64>, now_unix_ms: u64, max_age_ms: u64) -> bool {
    last_unix_ms.is_none_or(|last| now_unix_ms.saturating_sub(last) >= max_age_ms)
}

/// Where a disk's SMART comes from.
pub trait SmartSource: Send + Sync {
    /// The JSON text of one reading (smartctl's shape).
    fn read_json(&self) -> Result<String, SmartError>;
    /// What it reads, for messages.
    fn describe(&self) -> String;
}

/// The file beside a file-backed disk holding its SMART data: `DISK.smart.json`.
pub fn smart_file_beside(disk: &Path) -> PathBuf {
    let mut name = disk.as_os_str().to_os_string();
    name.push(".smart.json");
    PathBuf::from(name)
}

/// SMART of a file-backed disk: the JSON file beside it.
#[derive(Debug, Clone)]
pub struct SmartFile {
    pub path: PathBuf,
}

impl SmartSource for SmartFile {
    fn read_json(&self) -> Result<String, SmartError> {
        std::fs::read_to_string(&self.path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SmartError::Unavailable(format!(
                    "file-backed disk: no SMART file {}",
                    self.path.display()
                ))
            } else {
                SmartError::Read(format!("{}: {e}", self.path.display()))
            }
        })
    }
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// SMART of a drive: `smartctl --json -n standby -i -H -A DEVICE`.
#[derive(Debug, Clone)]
pub struct Smartctl {
    pub program: PathBuf,
    pub device: PathBuf,
}

impl SmartSource for Smartctl {
    fn read_json(&self) -> Result<String, SmartError> {
        let output = std::process::Command::new(&self.program)
            .args(["--json", "-n", "standby", "-i", "-H", "-A"])
            .arg(&self.device)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| SmartError::Read(format!("{}: {e}", self.program.display())))?;
        // The exit status is a bit mask; bits 2 and up describe the drive and the JSON is still whole.
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        match output.status.code() {
            Some(code) if code & 0b11 == 0 => Ok(text),
            _ if text.to_ascii_uppercase().contains("STANDBY") => Err(SmartError::Standby),
            _ => Err(SmartError::Read(format!(
                "{} {} exited with {}: {}",
                self.program.display(),
                self.device.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))),
        }
    }
    fn describe(&self) -> String {
        format!("{} {}", self.program.display(), self.device.display())
    }
}

/// The source for a disk named `name` (its device or file path): smartctl for `/dev/…`, else the file beside.
pub fn source_for(name: &str, settings: &SmartSettings) -> Arc<dyn SmartSource> {
    if name.starts_with("/dev/") {
        Arc::new(Smartctl {
            program: settings.smartctl.clone(),
            device: PathBuf::from(name),
        })
    } else {
        Arc::new(SmartFile {
            path: smart_file_beside(Path::new(name)),
        })
    }
}

/// Where readings are kept (the catalog in the server).
pub trait SmartHistory: Send + Sync {
    /// The newest reading of every disk that has one.
    fn latest(&self) -> Result<Vec<(usize, SmartReading)>, String>;
    /// Keep a reading of `disk`.
    fn record(&self, disk: usize, reading: &SmartReading) -> Result<(), String>;
}

/// Readings kept in memory (tests, and a server without a catalog for them).
#[derive(Debug, Default)]
pub struct MemoryHistory {
    readings: Mutex<Vec<(usize, SmartReading)>>,
}

impl MemoryHistory {
    /// Every reading kept, oldest first.
    pub fn all(&self) -> Vec<(usize, SmartReading)> {
        self.readings.lock().clone()
    }
}

impl SmartHistory for MemoryHistory {
    fn latest(&self) -> Result<Vec<(usize, SmartReading)>, String> {
        let mut newest: BTreeMap<usize, SmartReading> = BTreeMap::new();
        for (disk, r) in self.readings.lock().iter() {
            if newest
                .get(disk)
                .is_none_or(|n| n.at_unix_ms <= r.at_unix_ms)
            {
                newest.insert(*disk, r.clone());
            }
        }
        Ok(newest.into_iter().collect())
    }
    fn record(&self, disk: usize, reading: &SmartReading) -> Result<(), String> {
        self.readings.lock().push((disk, reading.clone()));
        Ok(())
    }
}

/// One reading as the monitor's listener hears it.
#[derive(Debug, Clone, Serialize)]
pub struct SmartEvent {
    pub disk: usize,
    /// The disk's device or file.
    pub name: String,
    pub reading: SmartReading,
    /// Empty when nothing rose.
    pub alerts: Vec<SmartAlert>,
}

/// What the monitor knows of one disk (for the API, the metrics and the dashboard).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DiskSmart {
    /// The newest reading (this server's, or the history's).
    pub last: Option<SmartReading>,
    /// The newest reading shows a reason for concern ([`warning`]).
    pub warning: bool,
    /// The alerts of the newest reading that had any.
    pub last_alerts: Vec<SmartAlert>,
    /// Alerts raised in this server's life.
    pub alerts: u64,
    /// Readings in this server's life.
    pub reads: u64,
    /// Readings due at a spin-up but skipped because the disk was off again (or in standby) by then.
    pub skipped_off: u64,
    /// Readings that failed.
    pub errors: u64,
    /// Why the last attempt gave no reading (no SMART file, smartctl missing, …).
    pub last_error: Option<String>,
}

/// Called with each reading (on the monitor's thread).
pub type SmartListener = Box<dyn Fn(&SmartEvent) + Send + Sync>;
/// The name (device or file) of a disk now, `None` for a disk that is not there (failed, missing).
pub type DiskNames = Box<dyn Fn(usize) -> Option<String> + Send + Sync>;
/// Milliseconds since the epoch (a simulated clock in tests).
pub type UnixClock = Box<dyn Fn() -> u64 + Send + Sync>;

/// Reads SMART at spin-ups the power manager made for other work (see the module's documentation). The reader
/// thread stops when the monitor drops (after the reading under way, waited for at most 2 s).
pub struct SmartMonitor {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    settings: SmartSettings,
    power: Weak<PowerManager>,
    names: DiskNames,
    history: Arc<dyn SmartHistory>,
    listener: RwLock<Option<SmartListener>>,
    now_unix_ms: UnixClock,
    disks: Mutex<Vec<DiskSmart>>,
    queue: Mutex<VecDeque<usize>>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The system clock in ms since the epoch.
pub fn system_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl SmartMonitor {
    /// A monitor of `power`'s disks: it listens to their spin-ups from now on. The newest reading of each disk
    /// is loaded from `history` (their ages decide what is due).
    pub fn start(
        settings: SmartSettings,
        power: &Arc<PowerManager>,
        names: DiskNames,
        history: Arc<dyn SmartHistory>,
        now_unix_ms: UnixClock,
    ) -> SmartMonitor {
        let n_disks = power.n_disks();
        let mut disks = vec![DiskSmart::default(); n_disks];
        match history.latest() {
            Ok(latest) => {
                for (disk, reading) in latest {
                    if let Some(d) = disks.get_mut(disk) {
                        d.warning = warning(&reading, &settings);
                        d.last = Some(reading);
                    }
                }
            }
            Err(e) => tracing::warn!("SMART: the history of readings is unavailable ({e}); every disk is read at its next spin-up"),
        }
        let inner = Arc::new(Inner {
            settings,
            power: Arc::downgrade(power),
            names,
            history,
            listener: RwLock::new(None),
            now_unix_ms,
            disks: Mutex::new(disks),
            queue: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&inner);
        power.add_spin_up_listener(Box::new(move |disk| {
            // Runs on the thread that spun the disk up: only queue the disk, the reader thread does the rest.
            if let Some(inner) = weak.upgrade() {
                inner.spun_up(disk);
            }
        }));
        let worker = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("permafrost-smart".to_string())
            .spawn(move || worker.run())
            .expect("spawn the SMART reader thread");
        SmartMonitor {
            inner,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Call `listener` with every reading from now on.
    pub fn set_listener(&self, listener: SmartListener) {
        *self.inner.listener.write() = Some(listener);
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &SmartSettings {
        &self.inner.settings
    }

    /// What it knows of each disk.
    pub fn status(&self) -> Vec<DiskSmart> {
        self.inner.disks.lock().clone()
    }

    /// Spin-ups waiting for the reader (0 once it caught up).
    pub fn queued(&self) -> usize {
        self.inner.queue.lock().len()
    }
}

impl Drop for SmartMonitor {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            // A reading under way (smartctl may take seconds) is waited for a moment, then left to end alone.
            let start = std::time::Instant::now();
            while !thread.is_finished() && start.elapsed() < DROP_WAIT {
                std::thread::sleep(Duration::from_millis(1));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

impl Inner {
    /// `disk` spun up: queue it when its reading is due.
    fn spun_up(&self, disk: usize) {
        if !self.settings.enabled {
            return;
        }
        let last = {
            let mut disks = self.disks.lock();
            // A disk the grid grew by after the monitor started (numbered after the others).
            if disk >= disks.len() && self.power.upgrade().is_some_and(|p| disk < p.n_disks()) {
                disks.resize(disk + 1, DiskSmart::default());
            }
            disks
                .get(disk)
                .map(|d| d.last.as_ref().map(|r| r.at_unix_ms))
        };
        let Some(last) = last else { return };
        if !due(last, (self.now_unix_ms)(), self.settings.max_age_ms()) {
            return;
        }
        let mut queue = self.queue.lock();
        if !queue.contains(&disk) && queue.len() < QUEUE_MAX {
            queue.push_back(disk);
            self.wake.notify_all();
        }
    }

    fn run(&self) {
        loop {
            let disk = {
                let mut queue = self.queue.lock();
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(disk) = queue.front().copied() {
                        break disk;
                    }
                    self.wake.wait_for(&mut queue, Duration::from_secs(1));
                }
            };
            self.read(disk);
            self.queue.lock().retain(|&d| d != disk);
        }
    }

    /// Read `disk` if it is still on, compare, keep, tell.
    fn read(&self, disk: usize) {
        let Some(power) = self.power.upgrade() else {
            return;
        };
        let Some(name) = (self.names)(disk) else {
            return;
        };
        let source = source_for(&name, &self.settings);
        // Held only if on: this never spins the disk up, and keeps it from spinning down during the read.
        let Some(guard) = power.acquire_if_on(disk) else {
            tracing::debug!("SMART of disk {disk} skipped: it turned off before it could be read");
            self.disks.lock()[disk].skipped_off += 1;
            return;
        };
        let result = source.read_json();
        drop(guard);
        let mut reading = match result.and_then(|text| parse_smartctl_json(&text)) {
            Ok(reading) => reading,
            Err(SmartError::Standby) => {
                tracing::debug!("SMART of disk {disk} skipped: the drive is in standby");
                self.disks.lock()[disk].skipped_off += 1;
                return;
            }
            Err(e) => {
                let mut disks = self.disks.lock();
                let d = &mut disks[disk];
                let message = e.to_string();
                if d.last_error.as_deref() != Some(message.as_str()) {
                    if matches!(e, SmartError::Unavailable(_)) {
                        tracing::debug!("SMART of disk {disk} ({name}): {message}");
                    } else {
                        tracing::warn!("SMART of disk {disk} ({name}): {message}");
                    }
                }
                d.errors += u64::from(!matches!(e, SmartError::Unavailable(_)));
                d.last_error = Some(message);
                return;
            }
        };
        reading.at_unix_ms = (self.now_unix_ms)();
        let previous = self.disks.lock()[disk].last.clone();
        let alerts = compare(previous.as_ref(), &reading, &self.settings);
        if let Err(e) = self.history.record(disk, &reading) {
            tracing::warn!(
                "SMART of disk {disk}: the reading could not be kept in the history: {e}"
            );
        }
        {
            let mut disks = self.disks.lock();
            let d = &mut disks[disk];
            d.reads += 1;
            d.alerts += alerts.len() as u64;
            d.warning = warning(&reading, &self.settings);
            d.last_error = None;
            if !alerts.is_empty() {
                d.last_alerts = alerts.clone();
            }
            d.last = Some(reading.clone());
        }
        for alert in &alerts {
            tracing::warn!("SMART of disk {disk} ({name}): {alert}");
        }
        tracing::debug!(
            "SMART of disk {disk} read ({} attributes)",
            reading.attributes.len()
        );
        let event = SmartEvent {
            disk,
            name,
            reading,
            alerts,
        };
        if let Some(listener) = self.listener.read().as_ref() {
            listener(&event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(attrs: &[(u32, u64)]) -> SmartReading {
        SmartReading {
            at_unix_ms: 0,
            attributes: attrs.iter().copied().collect(),
            passed: Some(true),
            model: None,
            serial: Some("S1".into()),
        }
    }

    const SAMPLE: &str = r#"{
      "json_format_version": [1, 0],
      "smartctl": {"version": [7, 3], "exit_status": 0},
      "device": {"name": "/dev/sda", "type": "sat"},
      "model_name": "WDC WD80EFAX-68KNBN0",
      "serial_number": "VAGXXXXX ",
      "smart_status": {"passed": true},
      "ata_smart_attributes": {"revision": 16, "table": [
        {"id": 4, "name": "Start_Stop_Count", "value": 100, "worst": 100, "thresh": 0,
         "raw": {"value": 1234, "string": "1234"}},
        {"id": 5, "name": "Reallocated_Sector_Ct", "value": 100, "worst": 100, "thresh": 5,
         "raw": {"value": 0, "string": "0"}},
        {"id": 194, "name": "Temperature_Celsius", "value": 175, "worst": 175, "thresh": 0,
         "raw": {"value": 47245361186, "string": "34 (Min/Max 20/44)"}}
      ]}
    }"#;

    #[test]
    fn parses_smartctl_json_raw_values_health_model_and_serial() {
        let r = parse_smartctl_json(SAMPLE).unwrap();
        assert_eq!(r.attributes[&4], 1234);
        assert_eq!(r.attributes[&5], 0);
        assert_eq!(r.attributes[&194], 47_245_361_186);
        assert_eq!(r.passed, Some(true));
        assert_eq!(r.model.as_deref(), Some("WDC WD80EFAX-68KNBN0"));
        assert_eq!(r.serial.as_deref(), Some("VAGXXXXX"));
    }

    #[test]
    fn standby_and_missing_tables_and_garbage_are_told_apart() {
        let standby = r#"{"smartctl": {"messages": [{"string": "Device is in STANDBY mode, exit(2)",
            "severity": "information"}], "exit_status": 2}}"#;
        assert!(matches!(
            parse_smartctl_json(standby),
            Err(SmartError::Standby)
        ));
        let nvme = r#"{"smartctl": {"exit_status": 0}, "nvme_smart_health_information_log": {}}"#;
        assert!(matches!(
            parse_smartctl_json(nvme),
            Err(SmartError::Unavailable(_))
        ));
        assert!(matches!(
            parse_smartctl_json("not json"),
            Err(SmartError::Parse(_))
        ));
        let no_raw = r#"{"ata_smart_attributes": {"table": [{"id": 5}]}}"#;
        assert!(matches!(
            parse_smartctl_json(no_raw),
            Err(SmartError::Parse(_))
        ));
    }

    #[test]
    fn a_rising_watched_count_alerts_and_a_steady_one_does_not() {
        let s = SmartSettings::default();
        let before = reading(&[(5, 0), (197, 2), (9, 100)]);
        let same = reading(&[(5, 0), (197, 2), (9, 200)]);
        assert!(compare(Some(&before), &same, &s).is_empty());
        let rose = reading(&[(5, 8), (197, 2), (9, 300)]);
        assert_eq!(
            compare(Some(&before), &rose, &s),
            vec![SmartAlert::Rose {
                id: 5,
                from: 0,
                to: 8
            }]
        );
        // A first reading with counts above 0 alerts (they rose since the drive was made).
        assert_eq!(
            compare(None, &before, &s),
            vec![SmartAlert::Rose {
                id: 197,
                from: 0,
                to: 2
            }]
        );
        // Another drive in the same slot starts over.
        let mut other = rose.clone();
        other.serial = Some("S2".into());
        other.attributes.insert(5, 0);
        assert_eq!(
            compare(Some(&rose), &other, &s),
            vec![SmartAlert::Rose {
                id: 197,
                from: 0,
                to: 2
            }]
        );
    }

    #[test]
    fn rating_alerts_fire_once_when_the_share_is_crossed() {
        let s = SmartSettings {
            start_stop_rating: 1000,
            load_cycle_rating: 10_000,
            rating_warn_percent: 90.0,
            ..SmartSettings::default()
        };
        let below = reading(&[(4, 899), (193, 100)]);
        let at = reading(&[(4, 900), (193, 100)]);
        let above = reading(&[(4, 950), (193, 9_000)]);
        assert!(compare(None, &below, &s).is_empty());
        assert_eq!(
            compare(Some(&below), &at, &s),
            vec![SmartAlert::NearRating {
                id: 4,
                count: 900,
                rating: 1000
            }]
        );
        assert_eq!(
            compare(Some(&at), &above, &s),
            vec![SmartAlert::NearRating {
                id: 193,
                count: 9_000,
                rating: 10_000
            }]
        );
        assert!(warning(&above, &s) && !warning(&below, &s));
        let unrated = SmartSettings {
            start_stop_rating: 0,
            ..s
        };
        assert!(compare(None, &reading(&[(4, u64::MAX)]), &unrated).is_empty());
    }

    #[test]
    fn health_turning_failed_alerts_once() {
        let s = SmartSettings::default();
        let ok = reading(&[]);
        let mut failed = reading(&[]);
        failed.passed = Some(false);
        assert_eq!(
            compare(Some(&ok), &failed, &s),
            vec![SmartAlert::HealthFailed]
        );
        assert!(compare(Some(&failed), &failed, &s).is_empty());
        assert!(warning(&failed, &s));
    }

    #[test]
    fn due_after_max_age_or_never_read() {
        assert!(due(None, 0, 1_000));
        assert!(!due(Some(5_000), 5_999, 1_000));
        assert!(due(Some(5_000), 6_000, 1_000));
        assert!(due(Some(5_000), 5_000, 0), "max age 0: every spin-up");
    }

    #[test]
    fn the_file_beside_a_disk_is_named_after_it() {
        assert_eq!(
            smart_file_beside(Path::new("/data/disks/d03.img")),
            PathBuf::from("/data/disks/d03.img.smart.json")
        );
        let s = SmartSettings::default();
        assert!(source_for("/dev/sdb", &s)
            .describe()
            .contains("smartctl /dev/sdb"));
        assert_eq!(source_for("/x/d0", &s).describe(), "/x/d0.smart.json");
    }

    proptest::proptest! {
        /// Alerts name exactly the watched attributes that rose, each with its counts; nothing else alerts when the
        /// rated counts stay below their share.
        #[test]
        fn alerts_are_exactly_the_rises(
            before in proptest::collection::vec(0u64..50, 5),
            after in proptest::collection::vec(0u64..50, 5),
        ) {
            let s = SmartSettings::default();
            let ids: Vec<u32> = WATCHED.iter().map(|w| w.0).collect();
            let prev = reading(&ids.iter().copied().zip(before.iter().copied()).collect::<Vec<_>>());
            let cur = reading(&ids.iter().copied().zip(after.iter().copied()).collect::<Vec<_>>());
            let alerts = compare(Some(&prev), &cur, &s);
            let expected: Vec<SmartAlert> = ids
                .iter()
                .zip(before.iter().zip(&after))
                .filter(|(_, (b, a))| a > b)
                .map(|(&id, (&from, &to))| SmartAlert::Rose { id, from, to })
                .collect();
            proptest::prop_assert_eq!(alerts, expected);
            proptest::prop_assert_eq!(warning(&cur, &s), after.iter().any(|&a| a > 0));
        }
    }
}
