//! `permafrost grid swap-parity`: a disk larger than a parity disk becomes that parity, and the old parity disk a
//! data disk of the grid (Unraid's "parity swap"). Restartable: running the command again (with the same disk, or
//! with none) resumes a swap that was interrupted, at whatever step it was.

use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use permafrost_disk::power::PowerControl;
use permafrost_engine::{
    DiskSpec, Engine, GridStatus, OpenOptions, SwapParity, SwapState, PARITY_SWAPS_FILE,
};

use crate::progress::{bytes_bar, step_progress};
use crate::units::{format_bytes, parse_bytes};

#[derive(Args)]
pub struct SwapParityArgs {
    /// The grid directory.
    #[arg(long)]
    dir: PathBuf,
    /// The parity disk to replace by the larger disk [default: resume the swap in progress].
    #[arg(long)]
    parity: Option<usize>,
    /// The larger drive (a block device) that becomes the parity.
    #[arg(long, conflicts_with = "size")]
    device: Option<PathBuf>,
    /// A new sparse file-backed disk of this size becomes the parity (in `disks/` of the grid directory).
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// What spins the new drive down and up (see `grid init --power-control`) [default: the old parity's].
    #[arg(long, requires = "device")]
    power_control: Option<PowerControl>,
    /// The row (horizontal parity group) the old parity disk joins as a data disk [default: the narrowest that
    /// fits].
    #[arg(long, alias = "hpg")]
    row: Option<usize>,
    /// The column the old parity disk joins [default: the narrowest free column of the row].
    #[arg(long)]
    column: Option<usize>,
    #[arg(long)]
    json: bool,
}

pub fn run(args: SwapParityArgs) -> Result<()> {
    // As for add-disk: a server holds DATA/.lock while it has the grid open; holding it keeps one from starting.
    let _lock = hold_server_lock(&args.dir)?;
    let swaps = Engine::parity_swaps(&args.dir)
        .with_context(|| format!("cannot read the grid in {}", args.dir.display()))?;
    let pending = swaps.last().filter(|s| s.state != SwapState::Done).cloned();
    let config = permafrost_engine::GridConfig::load(&args.dir)
        .with_context(|| format!("cannot read the grid in {}", args.dir.display()))?;
    let new = match (&args.device, args.size, &pending) {
        (None, None, _) => None,
        // Running the same command again resumes: the file it named is the recorded one.
        (None, Some(size), Some(p)) => match &p.new {
            DiskSpec::File { capacity_bytes, .. } if *capacity_bytes == size => None,
            other => Some(other_file(size, p.parity, other)),
        },
        (None, Some(size), None) => {
            let Some(parity) = args.parity else {
                bail!("give the parity disk to replace (--parity)");
            };
            Some(DiskSpec::File {
                path: PathBuf::from(format!(
                    "disks/disk-{parity:02}-parity-swap-{}.img",
                    swaps.len() + 1
                )),
                capacity_bytes: size,
            })
        }
        (Some(path), _, _) => {
            let previous = args
                .parity
                .or(pending.as_ref().map(|p| p.parity))
                .and_then(|p| config.disks.get(p).cloned());
            let previous_control = match (&pending, previous) {
                (Some(p), _) => match &p.new {
                    DiskSpec::Block { power_control, .. } => power_control.clone(),
                    _ => PowerControl::Simulated,
                },
                (None, Some(DiskSpec::Block { power_control, .. })) => power_control,
                _ => PowerControl::Simulated,
            };
            Some(DiskSpec::Block {
                path: path.clone(),
                power_control: args.power_control.clone().unwrap_or(previous_control),
            })
        }
    };
    if let Some(p) = &pending {
        if !args.json {
            eprintln!(
                "resuming the parity swap of disk {} (recorded in {PARITY_SWAPS_FILE}, step {:?})",
                p.parity, p.state
            );
        }
    }
    let bar = bytes_bar("filling the new parity", args.json);
    let started = Instant::now();
    let result = Engine::swap_parity(
        &args.dir,
        SwapParity {
            parity: args.parity,
            new,
            hpg: args.row,
            column: args.column,
            crash_after: None,
        },
        OpenOptions::default(),
        &step_progress(&bar, args.json, SwapState::Rebuilding, step_line),
    );
    bar.finish_and_clear();
    let report = result.with_context(|| {
        let pending = Engine::parity_swaps(&args.dir)
            .ok()
            .and_then(|l| l.last().cloned())
            .filter(|s| s.state != SwapState::Done);
        match pending {
            Some(p) => format!(
                "the parity swap of disk {} stopped at step {:?}; every object still reads; run `permafrost grid \
                 swap-parity --dir {}` again to resume",
                p.parity,
                p.state,
                args.dir.display()
            ),
            None => format!("cannot swap a parity disk of the grid in {}", args.dir.display()),
        }
    })?;
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "swapped": report, "seconds": seconds })
            )?
        );
    } else {
        println!(
            "parity disk {} is now {} ({}); the old parity disk {} ({}) is data disk {} (bucket {}) in row {} and \
             column {}",
            report.parity,
            report.new_parity,
            format_bytes(report.new_capacity_bytes),
            report.old_parity,
            format_bytes(report.old_capacity_bytes),
            report.data_disk,
            report.bucket,
            report.hpg,
            report.column
        );
        println!(
            "new parity filled in {seconds:.1} s{}: copied from the old parity disk {}, reconstructed from the grid \
             {}; the new data disk reads as zeros, so no other parity was recomputed; grid now {} (geometry version \
             {})",
            if report.resumed { " (resumed)" } else { "" },
            format_bytes(report.bytes_copied),
            format_bytes(report.bytes_reconstructed),
            report.geometry,
            report.geometry_version
        );
    }
    Ok(())
}

fn other_file(size: u64, parity: usize, recorded: &DiskSpec) -> DiskSpec {
    // A different size than the recorded disk's: the engine refuses it and names the recorded one.
    match recorded {
        DiskSpec::File { path, .. } => DiskSpec::File {
            path: path.clone(),
            capacity_bytes: size,
        },
        DiskSpec::Block { .. } => DiskSpec::File {
            path: PathBuf::from(format!("disks/disk-{parity:02}-parity-swap.img")),
            capacity_bytes: size,
        },
    }
}

fn step_line(state: SwapState) -> &'static str {
    match state {
        SwapState::Replacing => {
            "step 1/3: pending parity deltas drained onto the old parity disk; the larger disk takes its place"
        }
        SwapState::Rebuilding => {
            "step 2/3: copying the old parity disk onto the larger disk (the grid fills what it cannot vouch for)"
        }
        SwapState::Moving => {
            "step 3/3: the old parity disk becomes a data disk (reads as zeros until written)"
        }
        SwapState::Done => "done",
    }
}

/// Hold `DATA/.lock` (the grid directory's parent) if it exists: refused while a server has the grid open.
fn hold_server_lock(dir: &std::path::Path) -> Result<Option<File>> {
    match dir.parent().map(|data| data.join(".lock")) {
        Some(path) if path.exists() => {
            let file = File::options()
                .read(true)
                .write(true)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            if file.try_lock().is_err() {
                bail!(
                    "{} is held: a server (or another command) has this grid open; stop it, swap the parity, \
                     start it again",
                    path.display()
                );
            }
            Ok(Some(file))
        }
        _ => Ok(None),
    }
}

/// The parity swap lines of `grid status`.
pub fn print_swaps(status: &GridStatus) {
    for s in &status.parity_swaps {
        let path = |spec: &DiskSpec| match spec {
            DiskSpec::File { path, .. } | DiskSpec::Block { path, .. } => {
                path.display().to_string()
            }
        };
        let state = match s.state {
            SwapState::Replacing | SwapState::Rebuilding | SwapState::Moving => format!(
                "parity swap in progress at step {:?} (run `grid swap-parity` again to resume)",
                s.state
            ),
            SwapState::Done => format!(
                "parity swapped; the old parity disk is data disk {}",
                s.data_disk.map_or("?".to_string(), |d| d.to_string())
            ),
        };
        println!(
            "disk {}: {} -> {}: {state} ({} of parity copied from the old parity disk, {} reconstructed)",
            s.parity,
            path(&s.old),
            path(&s.new),
            format_bytes(s.bytes_copied),
            format_bytes(s.bytes_reconstructed)
        );
    }
}
