//! `permafrost grid evacuate`: move a disk's contents to a replacement while the disk still reads, then retire it.
//!
//! With `--dir` the grid is opened here (its server stopped); without it the command asks the running server
//! (`--endpoint`, or the server running on `--data-dir`) to evacuate the disk (`POST /disks/{disk}/evacuate` of
//! the admin API) and follows the task's progress until it ends, while the server keeps serving reads.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use permafrost_disk::power::PowerControl;
use permafrost_engine::{DiskSpec, Engine, EvacuationState, GridStatus};

use crate::object::remote::Remote;
use crate::object::{server_endpoint, Target};
use crate::progress::bytes_bar;
use crate::units::format_bytes;

#[derive(Args)]
pub struct EvacuateArgs {
    /// The grid directory, opened here (its server must be stopped). Without it, the running server evacuates the
    /// disk (`--endpoint`, or the server on `--data-dir`) while it keeps serving.
    #[arg(long)]
    dir: Option<PathBuf>,
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
    #[command(flatten)]
    target: Target,
}

pub fn run(args: EvacuateArgs) -> Result<()> {
    let Some(dir) = args.dir.clone() else {
        return run_on_server(args);
    };
    let json = args.target.json;
    let engine =
        Engine::open(&dir).with_context(|| format!("cannot open the grid in {}", dir.display()))?;
    let previous_control = match engine.config().disks.get(args.disk) {
        Some(DiskSpec::Block { power_control, .. }) => power_control.clone(),
        _ => PowerControl::Simulated,
    };
    let to = args.to.map(|path| DiskSpec::Block {
        path,
        power_control: args.power_control.unwrap_or(previous_control),
    });
    let bar = bytes_bar("evacuating", json);
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
    if json {
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

/// The admin API's prefix.
const API: &str = "/_permafrost/api/v1";

/// Ask the running server to evacuate the disk and follow the task until it ends.
fn run_on_server(args: EvacuateArgs) -> Result<()> {
    let Some(endpoint) = server_endpoint(&args.target) else {
        bail!(
            "no server runs on {} and no --endpoint is given: give --dir GRID to evacuate the disk of a stopped \
             server's grid here",
            args.target.data_dir.display()
        );
    };
    let json = args.target.json;
    let server = Remote::connect(&endpoint, &args.target)?;
    let mut body = serde_json::json!({});
    if let Some(to) = &args.to {
        body["to"] = serde_json::json!(to);
    }
    if let Some(control) = &args.power_control {
        body["power_control"] = serde_json::to_value(control)?;
    }
    let answer = server
        .admin(
            "POST",
            &format!("{API}/disks/{}/evacuate", args.disk),
            Some(&body),
        )
        .with_context(|| format!("asking {endpoint} to evacuate disk {}", args.disk))?;
    let id = answer["task"]["id"]
        .as_u64()
        .with_context(|| format!("the server's answer names no task: {answer}"))?;
    if !json {
        eprintln!(
            "disk {}: evacuation running on {endpoint} as task {id}",
            args.disk
        );
    }
    let bar = bytes_bar("evacuating", json);
    let lines = bar.is_hidden() && !json;
    let started = Instant::now();
    let mut last_line = Instant::now();
    let task = loop {
        let task = server.admin("GET", &format!("{API}/tasks/{id}"), None)?;
        let (done, total) = (
            task["done_bytes"].as_u64().unwrap_or(0),
            task["total_bytes"].as_u64().unwrap_or(0),
        );
        bar.set_length(total);
        bar.set_position(done);
        if lines && total > 0 && last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "disk {}: {} of {} ({:.0}%)",
                args.disk,
                format_bytes(done),
                format_bytes(total),
                done as f64 * 100.0 / total as f64
            );
            last_line = Instant::now();
        }
        if matches!(task["state"].as_str(), Some("done" | "failed")) {
            break task;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    if task["state"] == "failed" {
        bail!(
            "evacuating disk {} stopped: {}; run the command again to resume",
            args.disk,
            task["error"].as_str().unwrap_or("no reason given")
        );
    }
    let report = &task["result"];
    if json {
        println!(
            "{}",
            serde_json::json!({ "disk": args.disk, "task": id, "report": report, "seconds": seconds })
        );
    } else {
        let bytes = |name: &str| format_bytes(report[name].as_u64().unwrap_or(0));
        eprintln!(
            "disk {}: {} copied from the old disk, {} reconstructed from the grid, {} served to readers from \
             the old disk in {seconds:.1} s",
            args.disk,
            bytes("bytes_copied"),
            bytes("bytes_reconstructed"),
            bytes("bytes_served_to_readers")
        );
        eprintln!("disk {} evacuated; the old disk is retired", args.disk);
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
