//! `permafrost trace …`: the command-line surface of this crate (wired into the binary by
//! `crates/cli`).

use crate::{create_trace_file, generate, GenOptions, Profile, TraceReader, TraceStatsBuilder};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Workload traces: generate synthetic ones, print statistics.
#[derive(Debug, clap::Subcommand)]
pub enum TraceCommand {
    /// Generate a synthetic trace that follows a published workload.
    Gen {
        /// Which workload to imitate.
        #[arg(long, value_enum)]
        profile: Profile,
        /// Number of requests.
        #[arg(long, default_value_t = 1_000_000)]
        requests: u64,
        /// Time span, e.g. `30d`, `12h`, `900s` (default: the profile's natural rate).
        #[arg(long, value_parser = parse_duration_ms)]
        duration: Option<u64>,
        /// Seed; the same seed gives the same trace.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file (`.gz` to compress); `-` for standard output.
        #[arg(long, short, default_value = "-")]
        output: PathBuf,
    },
    /// Print a trace's statistics in the shape of thesis Tables 2.1, 2.3 and 2.4.
    Stats {
        /// The trace (permafrost format or the thesis's pipe format, optionally gzip'ed).
        trace: PathBuf,
        /// Print JSON to standard output instead of tables.
        #[arg(long)]
        json: bool,
        /// Write charts (SVG and PNG) into this directory: `trace_size_classes` (share of
        /// objects, GETs and PUTs per size class) and `trace_operations` (the operation mix).
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
    },
}

/// Parses `123ms`, `90s`, `15m`, `12h`, `30d` (or a bare number of seconds) into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("duration {text:?}: expected a number followed by ms, s, m, h or d")
    })?;
    let unit_ms = match unit {
        "ms" => 1.0,
        "" | "s" => 1e3,
        "m" | "min" => 60e3,
        "h" => 3600e3,
        "d" => 86_400e3,
        _ => {
            return Err(format!(
                "duration {text:?}: unknown unit {unit:?} (use ms, s, m, h or d)"
            ))
        }
    };
    Ok((value * unit_ms).round() as u64)
}

fn progress_bar(length: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(length);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {percent}% {elapsed_precise} eta {eta}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Runs a `trace` subcommand.
pub fn run(command: TraceCommand) -> Result<()> {
    match command {
        TraceCommand::Gen {
            profile,
            requests,
            duration,
            seed,
            output,
        } => {
            let options = GenOptions {
                requests,
                seed,
                duration_ms: duration,
            };
            let bar = progress_bar(requests, "generating");
            let mut writer = if output.as_os_str() == "-" {
                crate::TraceWriter::new(Box::new(std::io::BufWriter::with_capacity(
                    1 << 20,
                    std::io::stdout(),
                )) as Box<dyn std::io::Write + Send>)?
            } else {
                create_trace_file(&output)?
            };
            for (index, record) in generate(profile, &options).enumerate() {
                writer.write(&record)?;
                if index % 65_536 == 0 {
                    bar.set_position(index as u64);
                }
            }
            let written = writer.records_written();
            drop(writer.finish()?);
            bar.finish_and_clear();
            if written < requests {
                eprintln!("note: the {profile:?} profile ended after {written} of {requests} requests (duration limit)");
            }
            Ok(())
        }
        TraceCommand::Stats { trace, json, plot } => {
            let length = std::fs::metadata(&trace)
                .with_context(|| format!("trace {}", trace.display()))?
                .len();
            let read_bytes = Arc::new(AtomicU64::new(0));
            let reader = TraceReader::open_with_progress(&trace, Some(read_bytes.clone()))?;
            let bar = progress_bar(length, "reading");
            let mut builder = TraceStatsBuilder::new();
            for (index, record) in reader.enumerate() {
                builder.add(&record?);
                if index % 65_536 == 0 {
                    bar.set_position(read_bytes.load(Ordering::Relaxed));
                }
            }
            bar.finish_and_clear();
            let stats = builder.finish();
            if stats.records == 0 {
                bail!("trace {} has no records", trace.display());
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{}", stats.to_text());
            }
            if let Some(dir) = plot {
                for path in write_charts(&stats, &dir)? {
                    eprintln!("wrote {}", path.display());
                }
            }
            Ok(())
        }
    }
}

/// Writes the charts of `trace stats --plot DIR`: `trace_size_classes` (per size class of
/// Table 2.1, the share of objects, of GETs and of PUTs, in %) and `trace_operations` (the
/// share of GET, PUT, DEL and RENAME, Table 2.3), SVG and PNG each. Returns the files written.
pub fn write_charts(stats: &crate::TraceStats, dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    use permafrost_plot::Chart;
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    };
    let classes = &stats.size_classes;
    let gets: u64 = classes.iter().map(|c| c.gets).sum();
    let puts: u64 = classes.iter().map(|c| c.puts).sum();
    let by_class = Chart::bar(
        "Size classes (Table 2.1): objects and requests",
        classes.iter().map(|c| c.class.clone()),
    )
    .x_label("size class")
    .y_label("share (%)")
    .bars(
        "% of objects",
        classes.iter().map(|c| 100.0 * c.object_share),
    )
    .bars("% of GETs", classes.iter().map(|c| percent(c.gets, gets)))
    .bars("% of PUTs", classes.iter().map(|c| percent(c.puts, puts)));
    let operations = Chart::bar(
        "Operation mix (Table 2.3)",
        crate::Op::ALL.iter().map(|op| op.as_str().to_string()),
    )
    .x_label("operation")
    .y_label("share of requests (%)")
    .bars(
        "requests",
        stats.op_shares.iter().map(|share| 100.0 * share),
    );
    let mut written = Vec::new();
    for (name, chart) in [
        ("trace_size_classes", by_class),
        ("trace_operations", operations),
    ] {
        let files = chart
            .write(dir, name)
            .with_context(|| format!("writing chart {name} into {}", dir.display()))?;
        written.push(files.svg);
        written.push(files.png);
    }
    Ok(written)
}
