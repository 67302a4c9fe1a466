//! `permafrost plan …`: the command-line surface of the planner. The binary wires
//! [`PlanCommand`] in as a subcommand and calls [`run`].

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use permafrost_plot::Chart;

use crate::explore::{explore, ExploreOptions, LayoutRow};
use crate::layout::PlanLayout;
use crate::model::{plan_system, GridDepth, ModelParams, SystemPlan, TIB};

/// `permafrost plan`: know before you buy.
#[derive(Debug, clap::Subcommand)]
pub enum PlanCommand {
    /// MTTDL of a layout for a system sized to hold the user data (thesis §4.4.1–4.4.2).
    Mttdl(MttdlArgs),
    /// Every valid layout for a disk count, with efficiency, MTTDL, groups and parallel writes.
    Layouts(LayoutsArgs),
}

/// Reliability model parameters (thesis Table 4.1 by default).
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Raw capacity of one disk (e.g. 4TiB, 8TB, 500GiB). The thesis's "4 TB" is 4 TiB.
    #[arg(long, default_value = "4TiB", value_parser = parse_bytes)]
    pub disk_size: u128,
    /// Drive MTTF in hours: λ = 1/MTTF.
    #[arg(long, default_value_t = 500_000.0)]
    pub mttf_hours: f64,
    /// Drive rebuild time in hours: μ = 1/MTTR.
    #[arg(long, default_value_t = 12.0)]
    pub mttr_hours: f64,
    /// Hard error rate without IDR, errors per byte read.
    #[arg(long, default_value_t = 8e-15)]
    pub her: f64,
    /// HER(IDR) / HER: how much the 16+1 IDR code improves the hard error rate.
    #[arg(long, default_value_t = 0.1)]
    pub idr_her_factor: f64,
    /// Model only disks with the 16+1 IDR code (default: show both; JSON: without).
    #[arg(long, conflicts_with = "no_idr")]
    pub idr: bool,
    /// Model only disks without IDR.
    #[arg(long)]
    pub no_idr: bool,
    /// Grids: failures modelled exactly (CTMC depth); deeper costs time, changes < 0.1 %.
    #[arg(long)]
    pub depth: Option<usize>,
}

/// Arguments of `plan mttdl`.
#[derive(Debug, Clone, clap::Args)]
pub struct MttdlArgs {
    /// Layout: `n+k` (array) or `XxY:hn+hk` (grid); repeat to compare several.
    #[arg(long, required = true)]
    pub layout: Vec<String>,
    /// User data to store (e.g. 10PiB, 10240TiB, 500TB).
    #[arg(long, default_value = "10PiB", value_parser = parse_bytes)]
    pub capacity: u128,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print JSON (one object per layout; an array when several layouts are given).
    #[arg(long)]
    pub json: bool,
    /// Write charts (SVG and PNG) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Sort order of `plan layouts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    /// Highest MTTDL first.
    Mttdl,
    /// Highest efficiency first.
    Efficiency,
    /// Most parallel writes first.
    Writes,
    /// Fewest disks per grid first.
    Disks,
}

/// Arguments of `plan layouts`.
#[derive(Debug, Clone, clap::Args)]
pub struct LayoutsArgs {
    /// Disk count N: layouts that fill exactly N disks with identical grids or arrays.
    #[arg(long)]
    pub disks: usize,
    /// List every layout of at most N disks (as many copies as fit) instead.
    #[arg(long)]
    pub up_to: bool,
    /// Leave out the n+k arrays shown for comparison.
    #[arg(long)]
    pub no_arrays: bool,
    /// Only layouts with at least this storage efficiency, in percent.
    #[arg(long)]
    pub min_efficiency: Option<f64>,
    /// Only layouts with at least this MTTDL, in hours.
    #[arg(long)]
    pub min_mttdl: Option<f64>,
    /// Sort order.
    #[arg(long, value_enum, default_value_t = SortBy::Efficiency)]
    pub sort: SortBy,
    /// Show at most this many rows.
    #[arg(long)]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Write charts (SVG and PNG) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Parse a byte count with an optional unit: B, KB/MB/GB/TB/PB (powers of 1000),
/// KiB/MiB/GiB/TiB/PiB (powers of 1024). Decimals are allowed (`1.5TB`).
pub fn parse_bytes(text: &str) -> Result<u128, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "pib" => 1 << 50,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use B, GB, TB, PB, GiB, TiB, PiB)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a number"))?;
    let bytes = value * scale as f64;
    if !(bytes.is_finite() && (1.0..1e30).contains(&bytes)) {
        return Err(format!("{text:?} is not a usable size"));
    }
    // Whole numbers stay exact; fractions are rounded to the byte.
    Ok(if number.contains('.') {
        bytes.round() as u128
    } else {
        number.parse::<u128>().map_err(|e| e.to_string())? * scale
    })
}

impl ModelArgs {
    fn params(&self, idr: bool) -> anyhow::Result<ModelParams> {
        let mut params = ModelParams::thesis(idr);
        params.disk_capacity_bytes =
            u64::try_from(self.disk_size).context("disk size too large")?;
        anyhow::ensure!(
            self.mttf_hours > 0.0 && self.mttr_hours > 0.0,
            "--mttf-hours and --mttr-hours must be positive"
        );
        params.failure_rate_per_hour = 1.0 / self.mttf_hours;
        params.rebuild_rate_per_hour = 1.0 / self.mttr_hours;
        params.hard_error_rate_per_byte = self.her;
        if let Some(idr) = params.idr.as_mut() {
            idr.her_factor = self.idr_her_factor;
        }
        Ok(params)
    }

    /// IDR variants to model: both, unless one was asked for.
    fn variants(&self) -> Vec<bool> {
        match (self.idr, self.no_idr) {
            (true, _) => vec![true],
            (_, true) => vec![false],
            _ => vec![false, true],
        }
    }
}

/// Run one `permafrost plan` command, printing to stdout.
pub fn run(cmd: PlanCommand) -> anyhow::Result<()> {
    run_to(cmd, &mut std::io::stdout().lock())
}

/// Run one `permafrost plan` command, printing to `out` (tests capture it here).
pub fn run_to(cmd: PlanCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match cmd {
        PlanCommand::Mttdl(args) => run_mttdl(&args, out),
        PlanCommand::Layouts(args) => run_layouts(&args, out),
    }
}

fn scientific(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3e}").replace("e", "·10^")
    } else {
        "∞".to_string()
    }
}

fn run_mttdl(args: &MttdlArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let layouts: Vec<PlanLayout> = args
        .layout
        .iter()
        .map(|text| text.parse())
        .collect::<Result<_, _>>()?;
    let depth = args.model.depth.map(GridDepth).unwrap_or_default();
    let started = Instant::now();
    let variants = if args.json && !args.model.idr {
        vec![false]
    } else {
        args.model.variants()
    };
    let mut plans: Vec<SystemPlan> = Vec::new();
    for layout in &layouts {
        for &idr in &variants {
            plans.push(plan_system(
                layout,
                &args.model.params(idr)?,
                args.capacity,
                depth,
            )?);
        }
    }
    let elapsed_ms = started.elapsed().as_millis();
    if args.json {
        if plans.len() == 1 {
            serde_json::to_writer_pretty(&mut *out, &plans[0])?;
        } else {
            serde_json::to_writer_pretty(&mut *out, &plans)?;
        }
        writeln!(out)?;
    } else {
        let m = &args.model;
        writeln!(
            out,
            "{} TiB of user data on {} TiB disks; λ = 1/{} h, μ = 1/{} h, HER {:e}/byte (IDR 16+1: ×{}, 16/17 capacity)\n",
            args.capacity as f64 / TIB as f64,
            m.disk_size as f64 / TIB as f64,
            m.mttf_hours,
            m.mttr_hours,
            m.her,
            m.idr_her_factor
        )?;
        writeln!(
            out,
            "{:<12} {:<5} {:>7} {:>7} {:>7} {:>16} {:>16}",
            "layout", "IDR", "arrays", "disks", "eff.", "MTTDL array h", "MTTDL system h"
        )?;
        for plan in &plans {
            writeln!(
                out,
                "{:<12} {:<5} {:>7} {:>7} {:>6.1}% {:>16} {:>16}",
                plan.layout.to_string(),
                if plan.idr { "16+1" } else { "no" },
                plan.arrays,
                plan.disks,
                plan.efficiency_percent,
                scientific(plan.mttdl_array_hours),
                scientific(plan.mttdl_hours)
            )?;
        }
        writeln!(
            out,
            "\n(computed in {elapsed_ms} ms; grids modelled to {} simultaneous failures)",
            depth.0
        )?;
    }
    if let Some(dir) = &args.plot {
        let categories: Vec<String> = layouts.iter().map(|l| l.to_string()).collect();
        let mut chart = Chart::bar("MTTDL of the system", categories)
            .y_label("MTTDL (hours)")
            .y_log(true);
        for &idr in &variants {
            let values = plans.iter().filter(|p| p.idr == idr).map(|p| p.mttdl_hours);
            chart = chart.bars(if idr { "with 16+1 IDR" } else { "without IDR" }, values);
        }
        let written = chart.write(dir, "mttdl")?;
        if !args.json {
            writeln!(
                out,
                "chart: {} and {}",
                written.svg.display(),
                written.png.display()
            )?;
        }
    }
    Ok(())
}

fn run_layouts(args: &LayoutsArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let idr = !args.model.no_idr; // Table 4.4 assumes the 16+1 IDR code.
    let options = ExploreOptions {
        disks: args.disks,
        up_to: args.up_to,
        arrays: !args.no_arrays,
        params: args.model.params(idr)?,
        depth: GridDepth(args.model.depth.unwrap_or(5)),
    };
    let started = Instant::now();
    let mut rows = explore(&options)?;
    let elapsed_ms = started.elapsed().as_millis();
    let evaluated = rows.len();
    rows.retain(|row| {
        args.min_efficiency
            .is_none_or(|min| row.efficiency_percent >= min)
            && args.min_mttdl.is_none_or(|min| row.mttdl_hours >= min)
    });
    sort_rows(&mut rows, args.sort);
    if let Some(limit) = args.limit {
        rows.truncate(limit);
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>7} {:>14} {:>6} {:>7} {:>9}",
            "layout", "copies", "disks", "eff.", "MTTDL h", "#HPGs", "writes", "hPG/vPG"
        )?;
        for row in &rows {
            let recovery = match row.vpg_size {
                Some(vpg) => format!("{}/{}", row.hpg_size, vpg),
                None => format!("{}", row.hpg_size),
            };
            writeln!(
                out,
                "{:<12} {:>6} {:>6} {:>6.1}% {:>14} {:>6} {:>7} {:>9}",
                row.layout.to_string(),
                row.copies,
                row.disks,
                row.efficiency_percent,
                scientific(row.mttdl_hours),
                row.hpgs,
                format!("{}·{}", row.copies, row.parallel_writes),
                recovery
            )?;
        }
        writeln!(
            out,
            "\n{} of {evaluated} layouts shown ({}, IDR {}); evaluated in {elapsed_ms} ms",
            rows.len(),
            if args.up_to {
                format!("at most {} disks", args.disks)
            } else {
                format!("exactly {} disks", args.disks)
            },
            if idr { "16+1" } else { "off" }
        )?;
    }
    if let Some(dir) = &args.plot {
        let point = |row: &LayoutRow| {
            (
                row.efficiency_percent,
                row.mttdl_hours,
                row.layout.to_string(),
            )
        };
        let grids: Vec<_> = rows
            .iter()
            .filter(|r| r.layout.is_grid())
            .map(point)
            .collect();
        let arrays: Vec<_> = rows
            .iter()
            .filter(|r| !r.layout.is_grid())
            .map(|r| (r.efficiency_percent, r.mttdl_hours))
            .collect();
        let label_grids = grids.len() <= 30;
        let mut chart = Chart::scatter(&format!("MTTDL against efficiency, {} disks", args.disks))
            .x_label("storage efficiency (%)")
            .y_label("MTTDL of the system (hours)")
            .y_log(true);
        chart = if label_grids {
            chart.labeled_series("grids", grids)
        } else {
            chart.series("grids", grids.into_iter().map(|(x, y, _)| (x, y)))
        };
        if !arrays.is_empty() {
            chart = chart.series("n+k arrays", arrays);
        }
        let written = chart.write(dir, "layouts")?;
        if !args.json {
            writeln!(
                out,
                "chart: {} and {}",
                written.svg.display(),
                written.png.display()
            )?;
        }
    }
    Ok(())
}

fn sort_rows(rows: &mut [LayoutRow], by: SortBy) {
    rows.sort_by(|a, b| match by {
        SortBy::Mttdl => b.mttdl_hours.total_cmp(&a.mttdl_hours),
        SortBy::Efficiency => b
            .efficiency_percent
            .total_cmp(&a.efficiency_percent)
            .then(b.mttdl_hours.total_cmp(&a.mttdl_hours)),
        SortBy::Writes => (b.copies * b.parallel_writes)
            .cmp(&(a.copies * a.parallel_writes))
            .then(b.mttdl_hours.total_cmp(&a.mttdl_hours)),
        SortBy::Disks => a
            .layout
            .disks()
            .cmp(&b.layout.disks())
            .then(b.mttdl_hours.total_cmp(&a.mttdl_hours)),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse_in_both_unit_families() {
        assert_eq!(parse_bytes("4TiB").unwrap(), 4 << 40);
        assert_eq!(parse_bytes("10PiB").unwrap(), 10240 << 40);
        assert_eq!(parse_bytes("4TB").unwrap(), 4_000_000_000_000);
        assert_eq!(parse_bytes("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_bytes("512").unwrap(), 512);
        assert!(parse_bytes("4 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_bytes("TiB").is_err());
    }
}
