//! `permafrost serve`: run the archive on a data directory.
//!
//! On first start it creates the embedded default: an 8×6 grid with 4+1 horizontal parity
//! groups on sparse file-backed disks under `DATA_DIR/grid`. Every start replays the journal.
//! The process then keeps the grid's background work running (defect recovery, parity-delta
//! drains, scrub on spin-up, disk power) until SIGTERM or SIGINT, and closes the grid cleanly.
//! The S3 front end is not part of this milestone yet; `--listen` is accepted and reported.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use permafrost_engine::{Engine, GridConfig};
use permafrost_grid::Layout;

use crate::units::{format_bytes, parse_bytes};

#[derive(Args)]
pub struct ServeArgs {
    /// Data directory (created with the embedded default on first start).
    #[arg(long, default_value = "./permafrost-data")]
    data_dir: PathBuf,
    /// Address the S3 endpoint will listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: String,
    /// Size of each file-backed disk of the embedded default (sparse files).
    #[arg(long, value_parser = parse_bytes, default_value = "1GiB")]
    disk_size: u64,
}

pub fn run(args: ServeArgs) -> Result<()> {
    let grid_dir = args.data_dir.join("grid");
    let engine = if grid_dir.join(permafrost_engine::CONFIG_FILE).exists() {
        Engine::open(&grid_dir).with_context(|| format!("cannot open the grid in {}", grid_dir.display()))?
    } else {
        std::fs::create_dir_all(&args.data_dir).with_context(|| format!("cannot create {}", args.data_dir.display()))?;
        let layout: Layout = "8x6:4+1".parse().expect("the default layout is valid");
        let config = GridConfig::with_file_disks(layout, args.disk_size);
        eprintln!(
            "creating the embedded default in {}: grid {layout}, {} sparse file-backed disks of {}",
            args.data_dir.display(),
            layout.disks(),
            format_bytes(args.disk_size)
        );
        Engine::create(&grid_dir, config).with_context(|| format!("cannot create a grid in {}", grid_dir.display()))?
    };
    eprintln!(
        "permafrost: grid {} open, {} buckets of {}; disk power is simulated for file-backed disks",
        engine.config().layout,
        engine.buckets(),
        format_bytes(engine.bucket_capacity_bytes())
    );
    eprintln!("permafrost: the S3 endpoint ({}) arrives with the service milestone; use `permafrost grid` meanwhile", args.listen);

    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).context("installing signal handlers")?;
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("permafrost: stopping, closing the grid");
    engine.close().context("closing the grid")
}
