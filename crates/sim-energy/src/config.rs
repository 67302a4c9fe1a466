//! What is simulated: the hardware, the cache, the policies.

use permafrost_disk::power::PowerProfile;
use permafrost_policy::{IdleConfig, PlacementConfig, SchedulerConfig, WatchdogConfig};
use serde::{Deserialize, Serialize};

/// How a persist updates parity (SPEC idea 5, `docs/engine.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    /// Serialized direct: the data disk and its three parity disks (`hP`, `vP`,
    /// `vhP`) are spun up together; each chunk is written to them one after the
    /// other, with chunks pipelined, so all four are busy for about the data's
    /// transfer time.
    Serialized,
    /// Delayed: only the data disk is written; the parity delta waits in the
    /// cache for each parity disk, and each parity disk is drained (spun up,
    /// written) by the same watchdog rules as a data disk.
    Delayed,
}

/// Everything the simulation needs besides the trace and the systems.
/// Every field has a default; a TOML file may set any subset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Capacity of each disk.
    pub disk_capacity_bytes: u64,
    /// Sequential transfer rate of each disk.
    pub disk_bytes_per_s: u64,
    /// Capacity of the flash cache (write-back cache and read cache together).
    pub cache_capacity_bytes: u64,
    /// A read from disk leaves the object in the cache (LRU).
    pub cache_reads: bool,
    /// Parity update mode of the grid.
    pub write_mode: WriteMode,
    /// At most this many grid disks spin at once (spin-ups queue); `None` = no limit.
    /// Applies to the grid systems, not the baselines.
    pub budget_max_spinning: Option<usize>,
    /// The disks' power model parameters (shared with the server).
    pub power: PowerProfile,
    /// The watchdog's thresholds (shared with the server).
    pub watchdog: WatchdogConfig,
    /// Placement settings (shared with the server).
    pub placement: PlacementConfig,
    /// The grid's read scheduler (shared with the server; `docs/energy.md`).
    pub scheduler: SchedulerConfig,
    /// With the `deadline` scheduler reads and persists are transferred in
    /// chunks of this size (the engine's chunk, 8 MiB): a persist yields to
    /// reads between chunks, a disk sweeps over its reads one chunk each.
    pub persist_chunk_bytes: u64,
    /// With the `deadline` scheduler, reads and persists are transferred in
    /// chunks of `persist_chunk_bytes`; moving to another request's data costs
    /// this long (a seek; the `fifo` path, as before, charges none).
    pub seek_ms: u64,
    /// With the `deadline` scheduler: per-disk idle timeouts adapted to the
    /// disk's recent gaps, and the wear budget (shared with the server).
    pub idle: IdleConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            disk_capacity_bytes: 4_000_000_000_000,
            disk_bytes_per_s: 100_000_000,
            cache_capacity_bytes: 1 << 40,
            cache_reads: true,
            write_mode: WriteMode::Serialized,
            budget_max_spinning: None,
            power: PowerProfile::default(),
            watchdog: WatchdogConfig::default(),
            placement: PlacementConfig::default(),
            scheduler: SchedulerConfig::default(),
            persist_chunk_bytes: 8 << 20,
            seek_ms: 10,
            idle: IdleConfig::default(),
        }
    }
}

impl SimConfig {
    /// Check the values a simulation cannot run with.
    pub fn validate(&self) -> Result<(), String> {
        if self.disk_capacity_bytes == 0 {
            return Err("disk_capacity_bytes must be positive".into());
        }
        if self.disk_bytes_per_s == 0 {
            return Err("disk_bytes_per_s must be positive".into());
        }
        if self.budget_max_spinning == Some(0) {
            return Err("a power budget of 0 spinning disks can serve nothing".into());
        }
        if self.persist_chunk_bytes == 0 {
            return Err("persist_chunk_bytes must be positive".into());
        }
        if self.watchdog.interval_ms == 0 {
            return Err("watchdog.interval_ms must be positive".into());
        }
        self.power.validate()
    }
}
