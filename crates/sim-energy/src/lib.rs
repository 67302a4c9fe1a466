//! # permafrost-sim-energy: what a layout and a placement cost in energy
//!
//! **Job.** `permafrost sim energy`: replay a workload trace against a
//! simulated archive on *simulated time* (a year of trace runs in minutes) and
//! report disk-hours per power state, spin-ups, kWh, read latency (mean and
//! p99, spin-up waits included) and the cache hit ratio — for the grid with the
//! chosen placement and, in the same run, for baselines: the grid with random
//! placement, an always-on RAID 6 (10+2) and a 12+4 erasure-coded store.
//! `docs/energy.md` describes the model and its results.
//!
//! **Shared code, not a re-implementation.** The disks and their budget are a
//! [`permafrost_disk::power::PowerBudget`], the type the server's
//! `PowerManager` runs (one `PowerModel` per disk, the FIFO of spin-ups, which
//! Idle disks to turn off to make room); the cache is persisted by
//! [`permafrost_policy::WatchdogPolicy`] and objects are placed by a
//! [`permafrost_policy::Placement`] from the same registry the server uses;
//! the grid's parity targets come from [`permafrost_grid::Geometry`]; under
//! `--scheduler deadline` (the default) the grid's queues are ordered by
//! [`permafrost_policy::Scheduler`] and its disks' idle timeouts chosen by
//! [`permafrost_policy::IdleTimeouts`], the code the server is to run for
//! issue 30 (`--scheduler fifo` keeps the behaviour before it). Reported
//! energy, spin-ups and state hours are the sums of the power models' own
//! counters.
//!
//! **Invariants.**
//! - Deterministic: the same trace, configuration and seeds give the same report.
//! - With a power budget, at most that many grid disks are on at any moment;
//!   the budget's decisions are `PowerBudget`'s, as in the server.
//! - Memory is bounded by the number of live objects (a few tens of bytes
//!   each) plus the jobs in flight; latencies go to a fixed-size histogram.
//!
//! **Not modelled** (see `docs/energy.md`): seek times beyond a fixed cost per
//! switch between requests (`deadline` only; `fifo` serves I/Os one after
//! another at sequential speed), parity-delta merging, packing of small
//! objects, compression, failures and rebuilds.

#![forbid(unsafe_code)]

mod archive;
pub mod cli;
mod config;
mod latency;
mod report;

pub use archive::{ArchiveSim, Backend, SystemSpec};
pub use config::{SimConfig, WriteMode};
pub use latency::LatencyHistogram;
pub use report::{Activity, Report, StateHours, SystemReport};

use permafrost_grid::{Geometry, Layout};
use permafrost_policy::{placement_by_name, RandomPlacement, SchedulerStrategy};
use permafrost_trace::Record;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration or a command-line value is unusable.
    #[error("{0}")]
    Config(String),
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] permafrost_trace::TraceError),
}

/// The systems of a standard run: the grid `layout` with `placement`, the same
/// grid with random placement (unless `placement` is already `random`), an
/// always-on RAID 6 (10+2) and a 12+4 erasure-coded store, both with at least
/// the grid's usable capacity. Placement names come from
/// [`permafrost_policy::placement_by_name`]. The grids run the configured
/// scheduler (`config.scheduler`); see [`scheduler_systems`] to compare.
pub fn standard_systems(
    config: &SimConfig,
    layout: Layout,
    placement: &str,
) -> Result<Vec<SystemSpec>, SimError> {
    let geometry =
        Geometry::new(layout).map_err(|e| SimError::Config(format!("layout {layout}: {e}")))?;
    let data_disks = geometry.buckets();
    let strategy = |name: &str| {
        placement_by_name(name, &config.placement).map_err(|e| SimError::Config(e.to_string()))
    };
    let mut systems = vec![SystemSpec {
        label: format!("grid {layout} {placement}"),
        backend: Backend::Grid(layout),
        placement: strategy(placement)?,
        scheduler: None,
    }];
    if placement != RandomPlacement::NAME {
        systems.push(SystemSpec {
            label: format!("grid {layout} random"),
            backend: Backend::Grid(layout),
            placement: strategy(RandomPlacement::NAME)?,
            scheduler: None,
        });
    }
    systems.push(SystemSpec {
        label: "raid6 10+2 always-on".into(),
        backend: Backend::Raid6AlwaysOn { data_disks },
        placement: strategy(RandomPlacement::NAME)?,
        scheduler: None,
    });
    systems.push(SystemSpec {
        label: "erasure 12+4".into(),
        backend: Backend::ErasureCoded { data_disks },
        placement: strategy(RandomPlacement::NAME)?,
        scheduler: None,
    });
    Ok(systems)
}

/// The grid `layout` with `placement` once more under each of `schedulers`
/// (labelled `grid LAYOUT PLACEMENT, NAME scheduler`), to run beside
/// [`standard_systems`]: e.g. the `fifo` behaviour before issue 30 beside the
/// `deadline` scheduler, on the same records.
pub fn scheduler_systems(
    config: &SimConfig,
    layout: Layout,
    placement: &str,
    schedulers: &[SchedulerStrategy],
) -> Result<Vec<SystemSpec>, SimError> {
    Geometry::new(layout).map_err(|e| SimError::Config(format!("layout {layout}: {e}")))?;
    schedulers
        .iter()
        .map(|&s| {
            Ok(SystemSpec {
                label: format!("grid {layout} {placement}, {s} scheduler"),
                backend: Backend::Grid(layout),
                placement: placement_by_name(placement, &config.placement)
                    .map_err(|e| SimError::Config(e.to_string()))?,
                scheduler: Some(s),
            })
        })
        .collect()
}

/// Run `systems` side by side over `records` (in time order) and report.
/// The records are read once and fed to every system; all systems are
/// accounted up to the same end time (the last event of any of them).
pub fn simulate<E>(
    config: &SimConfig,
    systems: Vec<SystemSpec>,
    records: impl IntoIterator<Item = Result<Record, E>>,
    trace_name: &str,
) -> Result<Report, SimError>
where
    SimError: From<E>,
{
    let mut sims = systems
        .into_iter()
        .map(|s| ArchiveSim::new(config, s))
        .collect::<Result<Vec<_>, _>>()?;
    run(&mut sims, records, trace_name)
}

/// [`simulate`] over simulators built by the caller (e.g. with
/// [`ArchiveSim::set_check_invariants`]).
pub fn run<E>(
    sims: &mut [ArchiveSim],
    records: impl IntoIterator<Item = Result<Record, E>>,
    trace_name: &str,
) -> Result<Report, SimError>
where
    SimError: From<E>,
{
    let started = std::time::Instant::now();
    let mut count = 0u64;
    for record in records {
        let record = record?;
        count += 1;
        for sim in sims.iter_mut() {
            sim.apply(&record);
        }
    }
    let end_ms = sims.iter_mut().map(|s| s.drain()).max().unwrap_or(0);
    let systems: Vec<SystemReport> = sims.iter_mut().map(|s| s.finish(end_ms)).collect();
    let events: u64 = systems.iter().map(|s| s.activity.events).sum();
    let wall_seconds = started.elapsed().as_secs_f64();
    Ok(Report {
        trace: trace_name.to_string(),
        records: count,
        duration_ms: end_ms,
        systems,
        events,
        wall_seconds,
        events_per_second: if wall_seconds > 0.0 {
            events as f64 / wall_seconds
        } else {
            0.0
        },
    })
}

impl From<std::convert::Infallible> for SimError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}
