//! [`StatusSummary`]: the operator's view of a store, one shape for `permafrost status` (local or through a
//! server) and for the server's `GET /_permafrost/status`.

use serde::{Deserialize, Serialize};

use permafrost_disk::power::PowerState;

use crate::store::{StatusReport, Store};
use crate::Result;

/// What `energy_kwh` covers.
pub const ENERGY_SCOPE: &str =
    "since the archive was opened (the engine keeps no energy counters across restarts)";

/// Disks per power state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskCounts {
    pub total: usize,
    pub off: usize,
    pub spinning_up: usize,
    pub idle: usize,
    pub active: usize,
    pub failed: usize,
}

/// Bytes on one grid bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridBytes {
    pub grid_bucket: u32,
    pub bytes: u64,
}

/// Contents in one persistence state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCount {
    /// `cached`, `placed`, `persisting` or `persisted`.
    pub state: String,
    pub contents: u64,
    pub stored_bytes: u64,
}

/// The summary of a store's [`StatusReport`], with the full report as `detail`.
///
/// Deserializing (a client reading a server's status) skips `detail`: it is the engine's and the catalog's
/// own shape, for programs that read the JSON directly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusSummary {
    pub data_dir: String,
    pub layout: String,
    pub disks: DiskCounts,
    pub cache_used_bytes: u64,
    pub cache_capacity_bytes: u64,
    pub waiting_bytes_per_grid_bucket: Vec<GridBytes>,
    pub used_bytes_per_grid_bucket: Vec<GridBytes>,
    pub contents: Vec<StateCount>,
    pub buckets: u64,
    pub objects: u64,
    pub extents: u64,
    pub pack_extents: u64,
    /// Energy of all disks, [`ENERGY_SCOPE`].
    pub energy_kwh: f64,
    pub energy_scope: String,
    pub last_background_error: Option<String>,
    /// The store's full report (per-disk power, I/O and scrub state, catalog counters).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub detail: Option<StatusReport>,
}

impl StatusSummary {
    /// Summarize `report` of the store in `data_dir`.
    pub fn new(data_dir: &str, report: StatusReport) -> StatusSummary {
        let mut disks = DiskCounts::default();
        let mut joules = 0.0;
        for disk in &report.engine.disks {
            disks.total += 1;
            match disk.power_state {
                PowerState::Off => disks.off += 1,
                PowerState::SpinningUp => disks.spinning_up += 1,
                PowerState::Idle => disks.idle += 1,
                PowerState::Active => disks.active += 1,
            }
            disks.failed += usize::from(disk.failed);
            joules += disk.power.joules;
        }
        let grid_bytes = |pairs: &[(u32, u64)]| -> Vec<GridBytes> {
            pairs
                .iter()
                .map(|&(grid_bucket, bytes)| GridBytes { grid_bucket, bytes })
                .collect()
        };
        StatusSummary {
            data_dir: data_dir.to_string(),
            layout: report.engine.layout.clone(),
            disks,
            cache_used_bytes: report.cache_used_bytes,
            cache_capacity_bytes: report.cache_capacity_bytes,
            waiting_bytes_per_grid_bucket: grid_bytes(&report.waiting_bytes_per_grid_bucket),
            used_bytes_per_grid_bucket: grid_bytes(&report.used_bytes_per_grid_bucket),
            contents: report
                .catalog
                .contents_by_state
                .iter()
                .map(|(state, count, bytes)| StateCount {
                    state: state.as_str().to_string(),
                    contents: *count,
                    stored_bytes: *bytes,
                })
                .collect(),
            buckets: report.catalog.buckets,
            objects: report.catalog.objects,
            extents: report.catalog.extents,
            pack_extents: report.catalog.pack_extents,
            energy_kwh: joules / 3.6e6,
            energy_scope: ENERGY_SCOPE.to_string(),
            last_background_error: report.last_background_error.clone(),
            detail: Some(report),
        }
    }
}

impl Store {
    /// The store's state, summarized ([`Store::status`] as `detail`).
    pub fn summary(&self) -> Result<StatusSummary> {
        let report = self.status()?;
        Ok(StatusSummary::new(
            &self.data_dir().display().to_string(),
            report,
        ))
    }
}
