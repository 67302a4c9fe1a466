//! `permafrost sim cache …`: the command-line surface of this crate (wired into the binary by
//! `crates/cli`).

use crate::{sweep, CompactTrace, Layout, Policy, SweepOptions, SweepPoint};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use permafrost_trace::{SizeClass, TraceReader};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Default sweep: these fractions of the trace's footprint (summed size of its distinct objects).
const DEFAULT_CAPACITY_FRACTIONS: [f64; 8] = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 0.6, 1.0];

/// Replay a trace against caches of several policies and sizes (thesis §2.7).
#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// The trace (permafrost format or the thesis's pipe format, optionally gzip'ed).
    #[arg(long)]
    pub trace: PathBuf,
    /// Total cache capacities, comma-separated: bytes with a unit (`500GiB`, `2TB`) or a
    /// percentage of the trace's footprint (`1%`); default 0.1 % … 100 % of the footprint.
    #[arg(long, value_delimiter = ',')]
    pub capacities: Vec<String>,
    /// Policies, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub policies: Vec<Policy>,
    /// Also simulate one cache per size class (capacity split by class footprint).
    #[arg(long)]
    pub by_size_class: bool,
    /// Fraction of the trace's time span used to warm the caches up (the thesis: 2012 of
    /// 2012/01–2014/05, about 0.41).
    #[arg(long, default_value_t = 0.41)]
    pub warmup: f64,
    /// Seeds RANDOM is averaged over.
    #[arg(long, default_value_t = 5)]
    pub random_seeds: u64,
    /// Worker threads (default: available cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print JSON to standard output instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write charts (SVG and PNG) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Parses a capacity: `N%` of `footprint_bytes`, or a byte count with an optional unit
/// (B, KB, MB, GB, TB, PB decimal; KiB, MiB, GiB, TiB, PiB binary).
pub fn parse_capacity(text: &str, footprint_bytes: u64) -> Result<u64> {
    let text = text.trim();
    if let Some(percent) = text.strip_suffix('%') {
        let value: f64 = percent
            .trim()
            .parse()
            .with_context(|| format!("capacity {text:?}: bad percentage"))?;
        if !value.is_finite() || value <= 0.0 {
            bail!("capacity {text:?} must be positive");
        }
        return Ok((footprint_bytes as f64 * value / 100.0).round() as u64);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().with_context(|| {
        format!("capacity {text:?}: expected a number with a unit, e.g. 500GiB, 2TB or 1%")
    })?;
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "PB" => 1e15,
        "KiB" => 1024.0,
        "MiB" => 1024f64.powi(2),
        "GiB" => 1024f64.powi(3),
        "TiB" => 1024f64.powi(4),
        "PiB" => 1024f64.powi(5),
        other => bail!("capacity {text:?}: unknown unit {other:?}"),
    };
    let bytes = (value * scale).round() as u64;
    if bytes == 0 {
        bail!("capacity {text:?} must be positive");
    }
    Ok(bytes)
}

fn bar(length: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::new(length);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {percent}% {elapsed_precise} eta {eta}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

/// Reads a trace file into a [`CompactTrace`] with a progress bar on standard error.
pub fn load_trace(path: &Path, warmup_fraction: f64) -> Result<CompactTrace> {
    let length = std::fs::metadata(path)
        .with_context(|| format!("trace {}", path.display()))?
        .len();
    let read_bytes = Arc::new(AtomicU64::new(0));
    let reader = TraceReader::open_with_progress(path, Some(read_bytes.clone()))?;
    let progress = bar(length, "loading trace");
    let records = reader.enumerate().map(|(index, record)| {
        if index % 65_536 == 0 {
            progress.set_position(read_bytes.load(Ordering::Relaxed));
        }
        record
    });
    let trace = CompactTrace::from_records(records, warmup_fraction)?;
    progress.finish_and_clear();
    Ok(trace)
}

#[derive(Serialize)]
struct TraceSummary {
    requests: usize,
    objects: usize,
    warmup_requests: usize,
    footprint_bytes: u64,
    footprint_bytes_by_class: [u64; 6],
    next_access_from_trace: bool,
}

#[derive(Serialize)]
struct Report {
    trace: TraceSummary,
    events_simulated: u64,
    seconds: f64,
    events_per_second: f64,
    points: Vec<SweepPoint>,
}

/// Runs `permafrost sim cache`.
pub fn run(args: CacheArgs) -> Result<()> {
    if !(0.0..1.0).contains(&args.warmup) {
        bail!("--warmup {} must be in [0, 1)", args.warmup);
    }
    let trace = load_trace(&args.trace, args.warmup)?;
    if trace.requests.is_empty() {
        bail!("trace {} has no records", args.trace.display());
    }
    let footprint = trace.footprint_total_bytes().max(1);
    let mut capacities: Vec<u64> = if args.capacities.is_empty() {
        DEFAULT_CAPACITY_FRACTIONS
            .iter()
            .map(|f| ((footprint as f64 * f) as u64).max(1))
            .collect()
    } else {
        args.capacities
            .iter()
            .map(|c| parse_capacity(c, footprint))
            .collect::<Result<_>>()?
    };
    capacities.sort_unstable();
    capacities.dedup();
    let policies = if args.policies.is_empty() {
        Policy::ALL.to_vec()
    } else {
        args.policies.clone()
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let options = SweepOptions {
        policies,
        capacities_bytes: capacities,
        by_size_class: args.by_size_class,
        random_seeds: args.random_seeds.max(1),
        threads,
    };
    let runs: u64 = options
        .policies
        .iter()
        .map(|p| {
            if *p == Policy::Random {
                options.random_seeds
            } else {
                1
            }
        })
        .sum::<u64>()
        * options.capacities_bytes.len() as u64
        * if options.by_size_class { 2 } else { 1 };
    let events = runs * trace.requests.len() as u64;
    let progress = bar(events, "simulating");
    let started = Instant::now();
    let points = sweep(&trace, &options, &|done| progress.inc(done));
    let seconds = started.elapsed().as_secs_f64();
    progress.finish_and_clear();
    let report = Report {
        trace: TraceSummary {
            requests: trace.requests.len(),
            objects: trace.objects,
            warmup_requests: trace.warmup_requests,
            footprint_bytes: footprint,
            footprint_bytes_by_class: trace.footprint_bytes,
            next_access_from_trace: trace.next_from_trace,
        },
        events_simulated: events,
        seconds,
        events_per_second: events as f64 / seconds.max(1e-9),
        points,
    };
    if let Some(dir) = &args.plot {
        write_charts(dir, &report.points, footprint)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", to_text(&report));
    }
    Ok(())
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn find(
    points: &[SweepPoint],
    policy: Policy,
    layout: Layout,
    capacity: u64,
) -> Option<&SweepPoint> {
    points
        .iter()
        .find(|p| p.policy == policy && p.layout == layout && p.capacity_bytes == capacity)
}

fn to_text(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let t = &report.trace;
    let _ = writeln!(
        out,
        "{} requests ({} warm-up), {} objects, footprint {:.1} GiB, next-access times {}",
        t.requests,
        t.warmup_requests,
        t.objects,
        gib(t.footprint_bytes),
        if t.next_access_from_trace {
            "from the trace"
        } else {
            "computed"
        }
    );
    let _ = writeln!(
        out,
        "{} events in {:.1} s: {:.2} M events/s\n",
        report.events_simulated,
        report.seconds,
        report.events_per_second / 1e6
    );
    let by_class = report
        .points
        .iter()
        .any(|p| p.layout == Layout::BySizeClass);
    let _ = write!(
        out,
        "{:>12} {:>7} {:>7} {:>9} {:>9}",
        "capacity", "(% fp)", "policy", "hit %", "byte %"
    );
    if by_class {
        let _ = write!(
            out,
            " {:>11} {:>12} {:>13}",
            "classes hit%", "classes byte%", "combined-cls"
        );
    }
    let _ = writeln!(out);
    let mut capacities: Vec<u64> = report.points.iter().map(|p| p.capacity_bytes).collect();
    capacities.sort_unstable();
    capacities.dedup();
    let mut policies: Vec<Policy> = report.points.iter().map(|p| p.policy).collect();
    policies.sort_unstable();
    policies.dedup();
    for capacity in capacities {
        for &policy in &policies {
            let Some(combined) = find(&report.points, policy, Layout::Combined, capacity) else {
                continue;
            };
            let _ = write!(
                out,
                "{:>8.1} GiB {:>6.2}% {:>7} {:>8.2}% {:>8.2}%",
                gib(capacity),
                100.0 * capacity as f64 / t.footprint_bytes as f64,
                policy.name(),
                100.0 * combined.total.request_hit_ratio(),
                100.0 * combined.total.byte_hit_ratio()
            );
            if let Some(classes) = find(&report.points, policy, Layout::BySizeClass, capacity) {
                let _ = write!(
                    out,
                    " {:>11.2}% {:>11.2}% {:>+12.2}",
                    100.0 * classes.total.request_hit_ratio(),
                    100.0 * classes.total.byte_hit_ratio(),
                    100.0
                        * (combined.total.request_hit_ratio() - classes.total.request_hit_ratio())
                );
            }
            let _ = writeln!(out);
        }
    }
    if by_class {
        let _ = writeln!(out, "\ncombined-cls: request hit ratio of the combined cache minus that of the six class caches, in points (negative: the class caches are better)");
    }
    out
}

fn write_charts(dir: &Path, points: &[SweepPoint], footprint_bytes: u64) -> Result<()> {
    use permafrost_plot::Chart;
    let mut policies: Vec<Policy> = points.iter().map(|p| p.policy).collect();
    policies.sort_unstable();
    policies.dedup();
    let series =
        |layout: Layout, policy: Policy, value: &dyn Fn(&SweepPoint) -> f64| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter(|p| p.layout == layout && p.policy == policy)
                .map(|p| {
                    (
                        100.0 * p.capacity_bytes as f64 / footprint_bytes as f64,
                        value(p),
                    )
                })
                .collect()
        };
    let x_label = "cache size (% of the trace's footprint)";
    let mut charts = Vec::new();
    for (name, title, layout, byte) in [
        (
            "hit_ratio_combined",
            "Request hit ratio, one combined cache",
            Layout::Combined,
            false,
        ),
        (
            "byte_hit_ratio_combined",
            "Byte hit ratio, one combined cache",
            Layout::Combined,
            true,
        ),
        (
            "hit_ratio_by_size_class",
            "Request hit ratio, one cache per size class",
            Layout::BySizeClass,
            false,
        ),
    ] {
        if !points.iter().any(|p| p.layout == layout) {
            continue;
        }
        let mut chart = Chart::line(title)
            .x_label(x_label)
            .y_label(if byte {
                "byte hit ratio (%)"
            } else {
                "request hit ratio (%)"
            })
            .x_log(true);
        for &policy in &policies {
            let value = |p: &SweepPoint| {
                100.0
                    * if byte {
                        p.total.byte_hit_ratio()
                    } else {
                        p.total.request_hit_ratio()
                    }
            };
            chart = chart.series(policy.name(), series(layout, policy, &value));
        }
        charts.push((name.to_string(), chart));
    }
    if points.iter().any(|p| p.layout == Layout::BySizeClass) {
        let mut chart = Chart::line("Combined cache minus size-class caches (request hit ratio)")
            .x_label(x_label)
            .y_label("difference (percentage points)")
            .x_log(true);
        for &policy in &policies {
            let differences: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.layout == Layout::Combined && p.policy == policy)
                .filter_map(|combined| {
                    let classes =
                        find(points, policy, Layout::BySizeClass, combined.capacity_bytes)?;
                    Some((
                        100.0 * combined.capacity_bytes as f64 / footprint_bytes as f64,
                        100.0
                            * (combined.total.request_hit_ratio()
                                - classes.total.request_hit_ratio()),
                    ))
                })
                .collect();
            chart = chart.series(policy.name(), differences);
        }
        charts.push(("combined_minus_classes".to_string(), chart));
    }
    let layout = if points.iter().any(|p| p.layout == Layout::BySizeClass) {
        Layout::BySizeClass
    } else {
        Layout::Combined
    };
    for class in SizeClass::ALL {
        let mut chart = Chart::line(&format!(
            "{} files: request hit ratio ({:?} layout)",
            class.name(),
            layout
        ))
        .x_label(x_label)
        .y_label("request hit ratio (%)")
        .x_log(true);
        for &policy in &policies {
            let value = |p: &SweepPoint| 100.0 * p.by_class[class.index()].request_hit_ratio();
            chart = chart.series(policy.name(), series(layout, policy, &value));
        }
        charts.push((format!("hit_ratio_{}", class.name().to_lowercase()), chart));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, chart) in charts {
        chart
            .write(dir, &name)
            .with_context(|| format!("writing chart {name} into {}", dir.display()))?;
    }
    Ok(())
}
