//! What a simulation reports, as JSON and as a table.

use permafrost_disk::power::{PowerProfile, PowerState, PowerStats};
use serde::Serialize;

use crate::latency::LatencyHistogram;

const MS_PER_HOUR: f64 = 3_600_000.0;
const JOULES_PER_KWH: f64 = 3_600_000.0;

/// Disk-hours spent in each power state, summed over a system's disks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StateHours {
    /// Powered off.
    pub off: f64,
    /// Spinning up.
    pub spinning_up: f64,
    /// Spinning, no I/O.
    pub idle: f64,
    /// Spinning with I/O.
    pub active: f64,
}

/// Request and disk activity of one system (input to [`SystemReport::new`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Activity {
    /// GET requests.
    pub reads: u64,
    /// GETs served from the cache.
    pub cache_hits: u64,
    /// PUT requests.
    pub writes: u64,
    /// DEL requests (catalog only: no disk wakes).
    pub deletes: u64,
    /// RENAME requests (catalog only).
    pub renames: u64,
    /// Object bytes read from disks (cache misses).
    pub bytes_read_from_disks: u64,
    /// Object bytes persisted from the cache.
    pub bytes_persisted: u64,
    /// Persist jobs of data (one per watchdog action or continuation).
    pub persists: u64,
    /// Delayed mode: parity-delta drains.
    pub parity_drains: u64,
    /// Bytes admitted beyond the cache's capacity (the server would have
    /// slowed writers down instead).
    pub cache_overflow_bytes: u64,
    /// Writes no home had room for (not simulated further).
    pub placement_failures: u64,
    /// `deadline`: persists that gave their disks back between chunks to a
    /// request that had waited `max_wait_ms` for the budget.
    pub persist_suspensions: u64,
    /// Records earlier than their predecessor (processed at the later time).
    pub out_of_order_records: u64,
    /// Most disks on at once.
    pub max_spinning: usize,
    /// The most spin-ups one disk made in any 24 hours.
    pub spin_ups_per_disk_day_max: u64,
    /// The power budget, if one applied.
    pub budget_max_spinning: Option<usize>,
    /// Records plus internal events processed.
    pub events: u64,
}

/// The result for one system.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SystemReport {
    /// Name of the system.
    pub label: String,
    /// Number of disks.
    pub disks: usize,
    /// User-data capacity.
    pub usable_bytes: u64,
    /// Simulated time covered.
    pub duration_ms: u64,
    /// Sum of the disks' power-model counters (spin-ups, ms per state, joules).
    pub power: PowerStats,
    /// The power profile the disks ran.
    pub profile: PowerProfile,
    /// Spin-ups (= `power.spin_ups`).
    pub spin_ups: u64,
    /// Energy in kWh (= `power.joules / 3.6e6`).
    pub kwh: f64,
    /// Disk-hours per state (= `power.ms_in_state / 3.6e6`).
    pub disk_hours: StateHours,
    /// Fraction of GETs served from the cache.
    pub hit_ratio: f64,
    /// Mean time from a GET's arrival until its data starts to flow, in ms
    /// (0 for a cache hit; includes queueing, spin-up and budget waits).
    pub read_latency_mean_ms: f64,
    /// 99th percentile of the same.
    pub read_latency_p99_ms: u64,
    /// Largest of the same.
    pub read_latency_max_ms: u64,
    /// Request and disk activity.
    pub activity: Activity,
}

impl SystemReport {
    /// Assemble a report from the summed power counters and the activity.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        label: String,
        disks: usize,
        usable_bytes: u64,
        power: PowerStats,
        profile: PowerProfile,
        activity: Activity,
        latency: &LatencyHistogram,
        duration_ms: u64,
    ) -> SystemReport {
        let hours = |s: PowerState| power.ms_in_state[s.index()] as f64 / MS_PER_HOUR;
        SystemReport {
            label,
            disks,
            usable_bytes,
            duration_ms,
            spin_ups: power.spin_ups,
            kwh: power.joules / JOULES_PER_KWH,
            disk_hours: StateHours {
                off: hours(PowerState::Off),
                spinning_up: hours(PowerState::SpinningUp),
                idle: hours(PowerState::Idle),
                active: hours(PowerState::Active),
            },
            hit_ratio: if activity.reads == 0 {
                0.0
            } else {
                activity.cache_hits as f64 / activity.reads as f64
            },
            read_latency_mean_ms: latency.mean_ms(),
            read_latency_p99_ms: latency.quantile_ms(0.99),
            read_latency_max_ms: latency.max_ms(),
            power,
            profile,
            activity,
        }
    }

    /// Disk-hours spent spinning (every state but Off).
    pub fn spinning_disk_hours(&self) -> f64 {
        self.disk_hours.spinning_up + self.disk_hours.idle + self.disk_hours.active
    }
}

/// The result of one run over one trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Where the records came from.
    pub trace: String,
    /// Records read.
    pub records: u64,
    /// Simulated time covered (trace span plus draining the cache).
    pub duration_ms: u64,
    /// One entry per system, the simulated grid first.
    pub systems: Vec<SystemReport>,
    /// Records plus internal events, over all systems.
    pub events: u64,
    /// Wall-clock time of the run.
    pub wall_seconds: f64,
    /// `events / wall_seconds`.
    pub events_per_second: f64,
}

impl Report {
    /// A plain-text table for people.
    pub fn to_table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let days = self.duration_ms as f64 / MS_PER_HOUR / 24.0;
        let _ = writeln!(
            out,
            "trace {}: {} records over {:.1} simulated days",
            self.trace, self.records, days
        );
        let _ = writeln!(
            out,
            "{:<46} {:>5} {:>9} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>6} {:>10} {:>10}",
            "system",
            "disks",
            "spin-ups",
            "su/d max",
            "kWh",
            "off h",
            "spinup h",
            "idle h",
            "active h",
            "hit %",
            "lat mean s",
            "lat p99 s"
        );
        for s in &self.systems {
            let _ = writeln!(
                out,
                "{:<46} {:>5} {:>9} {:>8} {:>10.1} {:>10.0} {:>9.1} {:>9.0} {:>9.0} {:>6.1} {:>10.2} {:>10.2}",
                s.label,
                s.disks,
                s.spin_ups,
                s.activity.spin_ups_per_disk_day_max,
                s.kwh,
                s.disk_hours.off,
                s.disk_hours.spinning_up,
                s.disk_hours.idle,
                s.disk_hours.active,
                s.hit_ratio * 100.0,
                s.read_latency_mean_ms / 1000.0,
                s.read_latency_p99_ms as f64 / 1000.0,
            );
        }
        for s in &self.systems {
            let a = &s.activity;
            if a.cache_overflow_bytes > 0 || a.placement_failures > 0 || a.out_of_order_records > 0
            {
                let _ = writeln!(
                    out,
                    "note: {}: {} bytes over cache capacity, {} writes without room, {} records out of order",
                    s.label, a.cache_overflow_bytes, a.placement_failures, a.out_of_order_records
                );
            }
            if let Some(b) = a.budget_max_spinning {
                let _ = writeln!(
                    out,
                    "{}: power budget {b} disks, at most {} were on",
                    s.label, a.max_spinning
                );
            }
        }
        let _ = writeln!(
            out,
            "{} events in {:.2} s: {:.0} events/s",
            self.events, self.wall_seconds, self.events_per_second
        );
        out
    }
}
