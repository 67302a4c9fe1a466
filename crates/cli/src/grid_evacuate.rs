//! `permafrost grid evacuate`: move a disk's contents to a replacement while the disk still reads, then retire it.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use permafrost_disk::power::PowerControl;
use permafrost_engine::{DiskSpec, Engine, EvacuationState, GridStatus};

use crate::progress::bytes_bar;
use crate::units::format_bytes;

#[derive(Args)]
pub struct EvacuateArgs {
    /// The grid directory.
    #[arg(long)]
    dir: PathBuf,
    /// The disk to evacuate (row-major position in the grid).
    #[arg(long)]
    disk: usize,
    /// The replacement block device [default for a file-backed disk: a new file beside it]. Running the command
    /// again resumes an evacuation that was interrupted.
    #[arg(long)]
    to: Option<PathBuf>,
    /// What spins the replacement down and up (see `grid init --power-control`) [default: the old drive's].
    #[arg(long, requires = "to")]
    power_control: Option<PowerControl>,
    #[arg(long)]
    json: bool,
}

pub fn run(args: EvacuateArgs) -> Result<()> {
    let engine = Engine::open(&args.dir)
        .with_context(|| format!("cannot open the grid in {}", args.dir.display()))?;
    let previous_control = match engine.config().disks.get(args.disk) {
        Some(DiskSpec::Block { power_control, .. }) => power_control.clone(),
        _ => PowerControl::Simulated,
    };
    let to = args.to.map(|path| DiskSpec::Block {
        path,
        power_control: args.power_control.unwrap_or(previous_control),
    });
    let bar = bytes_bar("evacuating", args.json);
    let started = Instant::now();
    let result = engine.evacuate(args.disk, to, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            let pending = engine
                .evacuations()
                .unwrap_or_default()
                .iter()
                .any(|r| r.disk == args.disk && r.state == EvacuationState::Copying);
            let _ = engine.close();
            if !pending {
                return Err(e.into());
            }
            return Err(e).with_context(|| {
                format!(
                    "evacuating disk {} stopped; run the command again to resume",
                    args.disk
                )
            });
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "disk": args.disk, "report": report, "seconds": seconds })
        );
    } else {
        eprintln!(
            "disk {}: {} copied from the old disk, {} reconstructed from the grid in {seconds:.1} s",
            args.disk,
            format_bytes(report.bytes_copied),
            format_bytes(report.bytes_reconstructed)
        );
        for (disk, offset, len) in &report.recovery.unrecoverable {
            eprintln!("  not recoverable now: disk {disk} bytes {offset}+{len}");
        }
        if report.retired {
            eprintln!("disk {} evacuated; the old disk is retired", args.disk);
        }
    }
    engine.close().context("closing the grid")?;
    if !report.retired {
        bail!(
            "disk {} is not fully evacuated (ranges above); run the command again to resume",
            args.disk
        );
    }
    Ok(())
}

/// The evacuation lines of `grid status`.
pub fn print_evacuations(status: &GridStatus) {
    for e in &status.evacuations {
        let state = match e.state {
            EvacuationState::Copying => "evacuating (run `grid evacuate` again to resume)",
            EvacuationState::Retired => "retired",
        };
        let path = |spec: &DiskSpec| match spec {
            DiskSpec::File { path, .. } | DiskSpec::Block { path, .. } => {
                path.display().to_string()
            }
        };
        println!(
            "disk {}: {} -> {}: {state} ({} copied, {} reconstructed)",
            e.disk,
            path(&e.source),
            path(&e.target),
            format_bytes(e.bytes_copied),
            format_bytes(e.bytes_reconstructed)
        );
    }
}
