//! `permafrost sim energy`: the command-line surface (wired into the
//! `permafrost` binary by `crates/cli`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use permafrost_grid::Layout;
use permafrost_plot::Chart;

use crate::{scheduler_systems, simulate, standard_systems, Report, SimConfig, WriteMode};

/// Arguments of `permafrost sim energy`.
#[derive(Clone, Debug, clap::Args)]
pub struct EnergyArgs {
    /// The trace to replay (permafrost v1 or the thesis's pipe format, optionally gzip).
    #[arg(long)]
    pub trace: PathBuf,
    /// Grid layout `XxY:hn+hk`.
    #[arg(long, default_value = "8x6:4+1")]
    pub layout: Layout,
    /// Placement strategy (see `permafrost-policy`): dataset-affinity, random, round-robin, least-full.
    #[arg(long, default_value = "dataset-affinity")]
    pub placement: String,
    /// Power budget: at most N grid disks spinning at once.
    #[arg(long, value_name = "N")]
    pub budget: Option<usize>,
    /// Read scheduler of the grids: deadline (bounded reordering, reads
    /// before persistence, adaptive idle timeouts; default) or fifo (first
    /// come, first served, fixed idle timeout: the behaviour before issue 30).
    /// More names, comma-separated, add the grid under each as further
    /// systems of the same run (`--scheduler deadline,fifo`).
    #[arg(long, value_name = "NAME[,NAME]", value_delimiter = ',')]
    pub scheduler: Vec<permafrost_policy::SchedulerStrategy>,
    /// Parity update mode of the grid.
    #[arg(long, value_enum)]
    pub write_mode: Option<WriteMode>,
    /// Flash cache size in GiB.
    #[arg(long)]
    pub cache_gib: Option<u64>,
    /// Disk capacity in TB (10^12 bytes).
    #[arg(long)]
    pub disk_tb: Option<f64>,
    /// Seed of the random placements.
    #[arg(long)]
    pub seed: Option<u64>,
    /// TOML file with any fields of the simulation config (power, watchdog,
    /// placement, cache, disks); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Simulate only the grid with the chosen placement (and the same grid
    /// under the further `--scheduler` names).
    #[arg(long)]
    pub no_baselines: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write charts (SVG and PNG) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

impl EnergyArgs {
    /// The simulation config these arguments describe.
    pub fn sim_config(&self) -> anyhow::Result<SimConfig> {
        let mut config = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => SimConfig::default(),
        };
        if let Some(b) = self.budget {
            config.budget_max_spinning = Some(b);
        }
        if let Some(&s) = self.scheduler.first() {
            config.scheduler.strategy = s;
        }
        if let Some(m) = self.write_mode {
            config.write_mode = m;
        }
        if let Some(g) = self.cache_gib {
            config.cache_capacity_bytes =
                g.checked_mul(1 << 30).context("--cache-gib is too large")?;
        }
        if let Some(tb) = self.disk_tb {
            anyhow::ensure!(
                tb.is_finite() && tb > 0.0,
                "--disk-tb must be a positive number, not {tb}"
            );
            config.disk_capacity_bytes = (tb * 1e12) as u64;
        }
        if let Some(seed) = self.seed {
            config.placement.seed = seed;
        }
        config.validate().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

/// Run `permafrost sim energy`.
pub fn run(args: &EnergyArgs) -> anyhow::Result<()> {
    let config = args.sim_config()?;
    let mut systems = standard_systems(&config, args.layout, &args.placement)?;
    if args.no_baselines {
        systems.truncate(1);
    }
    let others = args.scheduler.get(1..).unwrap_or_default();
    systems.extend(scheduler_systems(
        &config,
        args.layout,
        &args.placement,
        others,
    )?);
    let reader = permafrost_trace::TraceReader::open(&args.trace)?;
    let report = simulate(&config, systems, reader, &args.trace.display().to_string())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_table());
    }
    if let Some(dir) = &args.plot {
        let written = write_plots(&report, dir)?;
        if !args.json {
            for path in written {
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

/// Write the charts of a report into `dir`: `energy-kwh`, `spin-ups`,
/// `disk-hours` and `read-latency` (SVG and PNG each). Returns the SVG paths.
pub fn write_plots(report: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let labels: Vec<String> = report.systems.iter().map(|s| s.label.clone()).collect();
    let mut written = Vec::new();
    let energy = Chart::bar("Energy of the disks", labels.clone())
        .y_label("kWh")
        .bars("energy", report.systems.iter().map(|s| s.kwh));
    written.push(energy.write(dir, "energy-kwh")?.svg);
    let spin_ups = Chart::bar("Disk spin-ups", labels.clone())
        .y_label("spin-ups")
        .bars("spin-ups", report.systems.iter().map(|s| s.spin_ups as f64));
    written.push(spin_ups.write(dir, "spin-ups")?.svg);
    let mut hours = Chart::bar("Disk-hours by power state", labels.clone())
        .y_label("disk-hours")
        .y_log(true);
    type Pick = fn(&crate::StateHours) -> f64;
    let states: [(&str, Pick); 4] = [
        ("off", |h| h.off),
        ("spinning up", |h| h.spinning_up),
        ("idle", |h| h.idle),
        ("active", |h| h.active),
    ];
    for (name, pick) in states {
        hours = hours.bars(name, report.systems.iter().map(|s| pick(&s.disk_hours)));
    }
    written.push(hours.write(dir, "disk-hours")?.svg);
    let latency = Chart::bar("Read latency (time to first byte)", labels)
        .y_label("seconds")
        .bars(
            "mean",
            report
                .systems
                .iter()
                .map(|s| s.read_latency_mean_ms / 1000.0),
        )
        .bars(
            "p99",
            report
                .systems
                .iter()
                .map(|s| s.read_latency_p99_ms as f64 / 1000.0),
        );
    written.push(latency.write(dir, "read-latency")?.svg);
    Ok(written)
}
