//! `permafrost grid add-group`: a new horizontal parity group (a "row") with its own parity disk, made of data disks
//! added since `grid init` (which widened their rows). The parity is computed by the grid's recovery, with a
//! progress bar; restartable: running the same command again resumes the computation (docs/grid.md "Adding a
//! parity group").

use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use permafrost_disk::power::PowerControl;
use permafrost_engine::{AddGroup, AddGroupPhase, DiskSpec, Engine, OpenOptions};

use crate::progress::{bytes_bar, step_progress};
use crate::units::{format_bytes, parse_bytes};

#[derive(Args)]
pub struct AddGroupArgs {
    /// The grid directory.
    #[arg(long)]
    dir: PathBuf,
    /// The data disks that move into the new group (disk numbers of disks added since `grid init`, comma
    /// separated, at most one per column).
    #[arg(long, value_delimiter = ',', required = true)]
    members: Vec<usize>,
    /// The new parity disk: a block device.
    #[arg(long, conflicts_with = "size")]
    device: Option<PathBuf>,
    /// The new parity disk: a sparse file of this size (in `disks/` of the grid directory).
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// What spins the new drive down and up (see `grid init --power-control`).
    #[arg(long, requires = "device")]
    power_control: Option<PowerControl>,
    /// The new parity disk's column [default: the narrowest column none of the members uses].
    #[arg(long)]
    column: Option<usize>,
    #[arg(long)]
    json: bool,
}

pub fn run(args: AddGroupArgs) -> Result<()> {
    let _lock = hold_server_lock(&args.dir)?;
    let geometry = Engine::stored_geometry(&args.dir)
        .with_context(|| format!("cannot read the grid in {}", args.dir.display()))?;
    let spec = match (&args.device, args.size) {
        (Some(path), None) => DiskSpec::Block {
            path: path.clone(),
            power_control: args
                .power_control
                .clone()
                .unwrap_or(PowerControl::Simulated),
        },
        // The next disk number: the same file when an add cut off before its commit runs again.
        (None, Some(capacity_bytes)) => DiskSpec::File {
            path: PathBuf::from(format!("disks/disk-{:02}.img", geometry.disks())),
            capacity_bytes,
        },
        _ => bail!("give the new parity disk: --device or --size"),
    };
    let bar = bytes_bar("computing the parity", args.json);
    let started = Instant::now();
    let result = Engine::add_group(
        &args.dir,
        AddGroup {
            members: args.members.clone(),
            spec,
            column: args.column,
            crash_after: None,
        },
        OpenOptions::default(),
        &step_progress(&bar, args.json, AddGroupPhase::Computing, step_line),
    );
    bar.finish_and_clear();
    let report = result.with_context(|| {
        format!(
            "cannot add the parity group of disks {:?} to the grid in {} (once the group is committed, `grid \
             status` shows it and running the same command again resumes the computation)",
            args.members,
            args.dir.display()
        )
    })?;
    let seconds = started.elapsed().as_secs_f64();
    // The failure guarantees before and after, as `grid add-disk` prints them.
    let grown = Engine::stored_geometry(&args.dir)?;
    let params = permafrost_plan::ModelParams::thesis(true);
    let depth = permafrost_plan::GridDepth::default();
    let mttdl = |g: &permafrost_grid::Geometry| {
        permafrost_plan::grid_reliability(g, &params, depth).map(|r| r.mttdl_hours)
    };
    let before = if report.resumed {
        None
    } else {
        Some((mttdl(&geometry)?, geometry.fatal_pattern_count()))
    };
    let (mttdl_after, fatal_after) = (mttdl(&grown)?, grown.fatal_pattern_count());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "added_group": report,
                "seconds": seconds,
                "fatal_four_sets_before": before.map(|b| b.1), "fatal_four_sets_after": fatal_after,
                "mttdl_hours_before": before.map(|b| b.0), "mttdl_hours_after": mttdl_after,
            }))?
        );
    } else {
        println!(
            "parity group hPG {} added: disks {:?} under the new parity disk {} ({}) in column {}; parity \
             recomputed on disks {:?}",
            report.hpg,
            report.members,
            report.parity,
            format_bytes(report.capacity_bytes),
            report.column,
            report.recomputed
        );
        println!(
            "{} of parity computed in {seconds:.1} s{}; grid now {} (geometry version {})",
            format_bytes(report.bytes_to_compute),
            if report.resumed { " (resumed)" } else { "" },
            report.geometry,
            report.geometry_version
        );
        match before {
            Some((mttdl_before, fatal_before)) => println!(
                "fatal 4-disk failure sets: {fatal_before} -> {fatal_after}; MTTDL of the grid (thesis model): \
                 {mttdl_before:.3e} h -> {mttdl_after:.3e} h; any 3 failed disks stay recoverable"
            ),
            None => println!(
                "fatal 4-disk failure sets: {fatal_after}; MTTDL of the grid (thesis model): {mttdl_after:.3e} h; \
                 any 3 failed disks stay recoverable"
            ),
        }
    }
    Ok(())
}

fn step_line(phase: AddGroupPhase) -> &'static str {
    match phase {
        AddGroupPhase::Preparing => {
            "step 1/3: applying pending parity updates and reading the members' written ranges"
        }
        AddGroupPhase::Committing => {
            "step 2/3: writing the new parity disk's header and recording the group (the commit point)"
        }
        AddGroupPhase::Computing => {
            "step 3/3: computing the new parity, then the old row's parity and the column parities (restartable)"
        }
    }
}

/// Hold `DATA/.lock` (the grid directory's parent) if it exists: refused while a server has the grid open (the
/// group changes the row of disks an open grid uses).
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
                    "{} is held: a server (or another command) has this grid open; stop it, add the group, start \
                     it again",
                    path.display()
                );
            }
            Ok(Some(file))
        }
        _ => Ok(None),
    }
}
