//! `permafrost grid …`: operate a parity grid directly through the engine.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use permafrost_disk::power::PowerControl;
use permafrost_engine::{AddDisk, DiskSpec, Engine, GridConfig, WriteMode};
use permafrost_grid::Layout;

use crate::progress::bytes_bar;
use crate::units::{format_bytes, parse_bytes};

#[derive(Subcommand)]
pub enum GridCommand {
    /// Create a grid: file-backed disks (--disk-size) or one block device per position (--device).
    Init(InitArgs),
    /// Write a file (or stdin) into a bucket range through a write promise.
    Write(WriteArgs),
    /// Read a bucket range through a read promise (check-on-read, transparent repair).
    Read(ReadArgs),
    /// Per-disk role, power state, fill, health and energy.
    Status(StatusArgs),
    /// Mark a disk failed: it is no longer read or written; its data is reconstructed on read.
    Fail(DiskArgs),
    /// Put a fresh disk in a failed disk's place (a new file, or --device) and mark it for rebuild.
    Replace(ReplaceArgs),
    /// Add a data disk to a grid (file --size or --device) in a horizontal parity group (--row) and column: no
    /// parity is recomputed and no other disk spins (the new disk reads as zeros until written).
    AddDisk(AddDiskArgs),
    /// Rebuild a replaced disk from the smaller intact parity group.
    Rebuild(DiskArgs),
    /// Copy a disk to a replacement while it still reads (the grid fills what it cannot read), then retire it.
    Evacuate(crate::grid_evacuate::EvacuateArgs),
    /// Put a disk larger than a parity disk in that parity's place; the old parity disk becomes a data disk
    /// (Unraid's parity swap). Restartable: run it again to resume.
    SwapParity(crate::grid_swap_parity::SwapParityArgs),
    /// Add a parity group (a new row) with its own parity disk, made of data disks added since `grid init`; its
    /// parity is computed with progress within the power budget. Restartable: run it again to resume.
    AddGroup(crate::grid_add_group::AddGroupArgs),
    /// Verify (and repair) disks: one disk, all disks, or the ranges whose last verification is overdue.
    Scrub(ScrubArgs),
    /// Recompute every parity disk from its members and report mismatches (exit code 2 if any).
    VerifyParity(DirArgs),
    /// Apply all pending parity deltas of delayed writes now.
    Flush(DirArgs),
    /// Test workload: write deterministic chunks to random buckets until killed, printing each write and commit.
    #[command(hide = true)]
    Soak(SoakArgs),
}

#[derive(Args)]
pub struct DirArgs {
    /// The grid directory (grid.toml, journal, file-backed disks).
    #[arg(long)]
    pub dir: PathBuf,
    /// Print machine-readable JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct InitArgs {
    #[arg(long)]
    dir: PathBuf,
    /// Grid layout XxY:hn+hk.
    #[arg(long, default_value = "8x6:4+1")]
    layout: Layout,
    /// Size of each file-backed disk (e.g. 64MiB, 4TiB); files are sparse.
    #[arg(long, value_parser = parse_bytes, conflicts_with = "device")]
    disk_size: Option<u64>,
    /// Block devices in grid order, one per position (repeat the flag).
    #[arg(long)]
    device: Vec<PathBuf>,
    /// What spins the --device drives down and up: simulated (default: only the power model runs), hdparm
    /// (`hdparm -y` standby), scsi (`sg_start` START STOP UNIT) or ses:ENCLOSURE:SLOT (`sg_ses` slot power).
    /// Once for all drives, or once per --device in the same order.
    #[arg(long, requires = "device")]
    power_control: Vec<PowerControl>,
    /// Default write mode: direct, serialized or delayed.
    #[arg(long, default_value = "serialized")]
    mode: WriteMode,
    /// At most this many disks spin at once.
    #[arg(long)]
    spinning_max: Option<usize>,
    /// Spin-up delay of the (simulated) disks in milliseconds (default: the thesis's ~10 s).
    #[arg(long)]
    spin_up_ms: Option<u64>,
    /// Idle time before a disk is turned off, in milliseconds (default: 50 s).
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct WriteArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    bucket: usize,
    /// Bucket offset (a multiple of 4096).
    #[arg(long, value_parser = parse_bytes)]
    offset: u64,
    /// File to write; `-` for stdin. Its length is padded with zeros to a multiple of 4096.
    #[arg(long, default_value = "-")]
    input: PathBuf,
    /// Write mode (default: the grid's).
    #[arg(long)]
    mode: Option<WriteMode>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReadArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    bucket: usize,
    #[arg(long, value_parser = parse_bytes)]
    offset: u64,
    #[arg(long, value_parser = parse_bytes)]
    length: u64,
    /// Output file; `-` for stdout.
    #[arg(long, default_value = "-")]
    output: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DiskArgs {
    #[arg(long)]
    dir: PathBuf,
    /// Disk index (row-major position in the grid).
    #[arg(long)]
    disk: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReplaceArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    disk: usize,
    /// The new block device; without it a fresh file replaces a file-backed disk.
    #[arg(long)]
    device: Option<PathBuf>,
    /// What spins the new drive down and up (see `grid init --power-control`) [default: the replaced drive's].
    #[arg(long, requires = "device")]
    power_control: Option<PowerControl>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct AddDiskArgs {
    #[arg(long)]
    dir: PathBuf,
    /// The new drive (a block device); it must not be larger than the parity disks of its group and column.
    #[arg(long, conflicts_with = "size", required_unless_present = "size")]
    device: Option<PathBuf>,
    /// A new sparse file-backed disk of this size (`disks/disk-NN.img` in the grid directory).
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// What spins the new drive down and up (see `grid init --power-control`) [default: simulated].
    #[arg(long, requires = "device")]
    power_control: Option<PowerControl>,
    /// The horizontal parity group ("row") to join [default: the narrowest that fits].
    #[arg(long, alias = "hpg")]
    row: Option<usize>,
    /// The column to join [default: the narrowest free column of the row].
    #[arg(long)]
    column: Option<usize>,
    /// A running server to grow the grid of, e.g. http://127.0.0.1:9000 [default: the server that has DIR's data
    /// directory open, if any]. The server adds the disk to its open grid (POST /_permafrost/api/v1/disks).
    #[arg(long)]
    server: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ScrubArgs {
    #[arg(long)]
    dir: PathBuf,
    /// Scrub only this disk.
    #[arg(long)]
    disk: Option<usize>,
    /// Scrub only the written ranges not verified (scrubbed or written) for this many hours, on every disk.
    #[arg(long, conflicts_with = "disk")]
    overdue_hours: Option<f64>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SoakArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    mode: WriteMode,
    /// Seed of the data and of the choice of buckets.
    #[arg(long)]
    seed: u64,
    /// Stop after this many chunks [default: write until killed].
    #[arg(long)]
    writes: Option<u64>,
    /// Bytes per chunk (a multiple of 4096).
    #[arg(long, value_parser = parse_bytes, default_value = "64KiB")]
    chunk: u64,
    /// Bucket offset where each bucket's region starts.
    #[arg(long, value_parser = parse_bytes)]
    start: u64,
    /// Bytes of each bucket's region (a multiple of --chunk). When a bucket's region is full the writer wraps
    /// around to --start and overwrites it with the next generation of the pattern.
    #[arg(long, value_parser = parse_bytes)]
    region: u64,
    /// Write only to these buckets (repeat the flag) [default: all].
    #[arg(long)]
    bucket: Vec<usize>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(command: GridCommand) -> Result<()> {
    match command {
        GridCommand::Init(args) => init(args),
        GridCommand::Write(args) => write(args),
        GridCommand::Read(args) => read(args),
        GridCommand::Status(args) => status(args),
        GridCommand::Fail(args) => {
            let engine = open(&args.dir)?;
            engine.fail_disk(args.disk)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "disk": args.disk, "failed": engine.is_failed(args.disk) })
                );
            } else {
                eprintln!("disk {} is marked failed; its data is reconstructed on read until it is replaced and rebuilt", args.disk);
            }
            close(engine)
        }
        GridCommand::Replace(args) => {
            let engine = open(&args.dir)?;
            let previous_control = match engine.config().disks.get(args.disk) {
                Some(DiskSpec::Block { power_control, .. }) => power_control.clone(),
                _ => PowerControl::Simulated,
            };
            let spec = args.device.map(|path| DiskSpec::Block {
                path,
                power_control: args.power_control.unwrap_or(previous_control),
            });
            engine.replace_disk(args.disk, spec)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "disk": args.disk, "replaced": true, "defect_bytes": engine.defect_bytes(args.disk),
                    })
                );
            } else {
                eprintln!(
                    "disk {} replaced: {} to rebuild; run `permafrost grid rebuild --dir {} --disk {}`",
                    args.disk,
                    format_bytes(engine.defect_bytes(args.disk)),
                    args.dir.display(),
                    args.disk
                );
            }
            close(engine)
        }
        GridCommand::AddDisk(args) => add_disk(args),
        GridCommand::Rebuild(args) => rebuild(args),
        GridCommand::Evacuate(args) => crate::grid_evacuate::run(args),
        GridCommand::SwapParity(args) => crate::grid_swap_parity::run(args),
        GridCommand::AddGroup(args) => crate::grid_add_group::run(args),
        GridCommand::Scrub(args) => scrub(args),
        GridCommand::VerifyParity(args) => verify_parity(args),
        GridCommand::Flush(args) => {
            let engine = open(&args.dir)?;
            let pending = engine.status()?.pending_delta_bytes;
            engine.flush()?;
            let left = engine.status()?.pending_delta_bytes;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "applied_delta_bytes": pending - left, "pending_delta_bytes": left })
                );
            } else {
                eprintln!(
                    "applied {} of parity deltas, {} pending",
                    format_bytes(pending - left),
                    format_bytes(left)
                );
            }
            close(engine)
        }
        GridCommand::Soak(args) => soak(args),
    }
}

fn open(dir: &std::path::Path) -> Result<Engine> {
    Engine::open(dir).with_context(|| format!("cannot open the grid in {}", dir.display()))
}

fn close(engine: Engine) -> Result<()> {
    engine.close().context("closing the grid")
}

fn init(args: InitArgs) -> Result<()> {
    let mut config = match (args.disk_size, args.device.is_empty()) {
        (Some(size), true) => GridConfig::with_file_disks(args.layout, size),
        (None, false) => {
            GridConfig::with_block_devices(args.layout, &args.device, &args.power_control)?
        }
        (Some(_), false) => bail!(
            "give either --disk-size (file-backed disks) or --device (block devices), not both"
        ),
        (None, true) => bail!("give --disk-size for file-backed disks or one --device per disk"),
    };
    config.write_mode_default = args.mode;
    if let Some(spinning_max) = args.spinning_max {
        config.spinning_max = spinning_max;
    }
    if let Some(ms) = args.spin_up_ms {
        config.power.spin_up_ms = ms;
    }
    if let Some(ms) = args.idle_timeout_ms {
        config.power.idle_timeout_ms = ms;
    }
    let engine = Engine::create(&args.dir, config)
        .with_context(|| format!("cannot create a grid in {}", args.dir.display()))?;
    let geometry = engine.geometry();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "dir": args.dir, "layout": args.layout.to_string(), "disks": geometry.disks(),
                "buckets": engine.buckets(), "bucket_capacity_bytes": engine.bucket_capacity_bytes(),
            })
        );
    } else {
        println!(
            "created grid {} in {}: {} disks, {} buckets of {} each",
            args.layout,
            args.dir.display(),
            geometry.disks(),
            engine.buckets(),
            format_bytes(engine.bucket_capacity_bytes())
        );
    }
    close(engine)
}

fn write(args: WriteArgs) -> Result<()> {
    let engine = open(&args.dir)?;
    let mut input: Box<dyn Read> = if args.input.as_os_str() == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(
            File::open(&args.input)
                .with_context(|| format!("cannot open {}", args.input.display()))?,
        )
    };
    let length = if args.input.as_os_str() == "-" {
        None
    } else {
        Some(std::fs::metadata(&args.input)?.len().next_multiple_of(4096))
    };
    let mut data = Vec::new();
    let started = Instant::now();
    let mode = args.mode.unwrap_or(engine.config().write_mode_default);
    // A promise needs its length up front; stdin is read fully first, a file streams.
    let total = match length {
        Some(len) => len,
        None => {
            input.read_to_end(&mut data).context("reading stdin")?;
            data.len().next_multiple_of(4096) as u64
        }
    };
    let bar = bytes_bar("writing", args.json);
    bar.set_length(total);
    let mut promise = engine.write(args.bucket, args.offset, total, mode)?;
    let mut written = 0u64;
    if length.is_some() {
        let mut buf = vec![0u8; 8 << 20];
        loop {
            let n = read_full(&mut input, &mut buf)?;
            if n == 0 {
                break;
            }
            let padded = n.next_multiple_of(4096).min(buf.len());
            buf[n..padded].fill(0);
            promise.append(&buf[..padded])?;
            written += padded as u64;
            bar.set_position(written);
        }
    } else {
        data.resize(total as usize, 0);
        promise.append(&data)?;
        written = total;
    }
    promise.commit()?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    report_throughput("written", args.json, written, seconds, mode);
    close(engine)
}

fn read(args: ReadArgs) -> Result<()> {
    let engine = open(&args.dir)?;
    let started = Instant::now();
    let mut promise = engine.read(args.bucket, args.offset, args.length)?;
    let mut output: Box<dyn Write> = if args.output.as_os_str() == "-" {
        Box::new(BufWriter::new(io::stdout().lock()))
    } else {
        Box::new(
            File::create(&args.output)
                .with_context(|| format!("cannot create {}", args.output.display()))?,
        )
    };
    let bar = bytes_bar("reading", args.json || args.output.as_os_str() == "-");
    bar.set_length(args.length);
    let mut buf = vec![0u8; 8 << 20];
    let mut done = 0u64;
    loop {
        let n = promise.read(&mut buf).context("reading the bucket")?;
        if n == 0 {
            break;
        }
        output.write_all(&buf[..n])?;
        done += n as u64;
        bar.set_position(done);
    }
    output.flush()?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    // With the data on stdout, the JSON report goes to stderr.
    let to_stdout = args.output.as_os_str() == "-";
    let report = serde_json::json!({ "bytes": done, "seconds": seconds, "mb_per_s": done as f64 / seconds.max(1e-9) / 1e6 });
    match (args.json, to_stdout) {
        (true, false) => println!("{report}"),
        (true, true) => eprintln!("{report}"),
        (false, _) => eprintln!(
            "read {} in {seconds:.2} s ({:.0} MB/s)",
            format_bytes(done),
            done as f64 / seconds.max(1e-9) / 1e6
        ),
    }
    close(engine)
}

fn report_throughput(what: &str, json: bool, bytes: u64, seconds: f64, mode: WriteMode) {
    let mb_per_s = bytes as f64 / seconds.max(1e-9) / 1e6;
    if json {
        println!(
            "{}",
            serde_json::json!({ "bytes": bytes, "seconds": seconds, "mb_per_s": mb_per_s, "mode": mode.to_string() })
        );
    } else {
        eprintln!(
            "{what} {} in {seconds:.2} s ({mb_per_s:.0} MB/s)",
            format_bytes(bytes)
        );
    }
}

fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn status(args: StatusArgs) -> Result<()> {
    let engine = open(&args.dir)?;
    let status = engine.status()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print_status(&status);
    }
    close(engine)
}

fn print_status(status: &permafrost_engine::GridStatus) {
    if status.geometry_version > 0 {
        println!(
            "grown grid: {} (geometry version {})",
            status.geometry, status.geometry_version
        );
    }
    println!(
        "grid {} ({}): {} buckets of {}, {} disks spinning now (most at once: {}), {} pending parity delta, {} journal rows",
        status.layout,
        status.grid_id,
        status.buckets,
        format_bytes(status.bucket_capacity_bytes),
        status.spinning_now,
        status.max_spinning_seen,
        format_bytes(status.pending_delta_bytes),
        status.journal_rows
    );
    println!(
        "{:>4}  {:<14} {:<11} {:>9} {:>11} {:>11} {:>10}  health",
        "disk", "role", "power", "spin-ups", "energy J", "written", "defect"
    );
    for disk in &status.disks {
        let role = match disk.role {
            permafrost_grid::Role::Data { bucket } => format!("data b{bucket}"),
            permafrost_grid::Role::HParity { hpg } => format!("hP of hPG {hpg}"),
            permafrost_grid::Role::VParity { column } => format!("vP of col {column}"),
        };
        let health = if disk.failed {
            "FAILED"
        } else if disk.defect_bytes > 0 {
            "recovering"
        } else {
            "ok"
        };
        println!(
            "{:>4}  {:<14} {:<11} {:>9} {:>11.1} {:>11} {:>10}  {health}",
            disk.index,
            role,
            format!("{:?}", disk.power_state),
            disk.power.spin_ups,
            disk.power.joules,
            format_bytes(disk.written_bytes),
            format_bytes(disk.defect_bytes),
        );
    }
    crate::grid_evacuate::print_evacuations(status);
    crate::grid_swap_parity::print_swaps(status);
    let joules: f64 = status.disks.iter().map(|d| d.power.joules).sum();
    let spin_ups: u64 = status.disks.iter().map(|d| d.power.spin_ups).sum();
    println!(
        "total: {spin_ups} spin-ups, {:.3} kWh (power states of file-backed disks are simulated)",
        joules / 3.6e6
    );
}

fn add_disk(args: AddDiskArgs) -> Result<()> {
    if let Some(server) = crate::grid_grow::server_for(&args.dir, args.server.as_deref()) {
        let disk = crate::grid_grow::NewDisk {
            device: args.device,
            size: args.size,
            power_control: args.power_control,
            row: args.row,
            column: args.column,
        };
        return crate::grid_grow::add_disk_on_server(&server, &args.dir, disk, args.json);
    }
    // A server keeps the grid of DATA/grid open and holds DATA/.lock (it is asked above when it wrote its
    // endpoint). Holding the lock for the add also keeps a server from starting meanwhile.
    let _lock = match args.dir.parent().map(|data| data.join(".lock")) {
        Some(path) if path.exists() => {
            let file = File::options()
                .read(true)
                .write(true)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            if file.try_lock().is_err() {
                bail!(
                    "{} is held: a server (or another command) has this grid open; give the running server with --server URL, or stop it and add the disk",
                    path.display()
                );
            }
            Some(file)
        }
        _ => None,
    };
    let geometry = Engine::stored_geometry(&args.dir)
        .with_context(|| format!("cannot read the grid in {}", args.dir.display()))?;
    let spec = match (args.device, args.size) {
        (Some(path), None) => DiskSpec::Block {
            path,
            power_control: args.power_control.unwrap_or(PowerControl::Simulated),
        },
        (None, Some(capacity_bytes)) => DiskSpec::File {
            path: PathBuf::from(format!("disks/disk-{:02}.img", geometry.disks())),
            capacity_bytes,
        },
        _ => bail!("give either --device or --size"),
    };
    let report = Engine::add_disk(
        &args.dir,
        AddDisk {
            spec,
            hpg: args.row,
            column: args.column,
        },
    )
    .with_context(|| format!("cannot add a disk to the grid in {}", args.dir.display()))?;
    // The failure guarantees before and after: the minimal fatal 4-disk sets (EP1 + EP2; every set of at most 3
    // failed disks stays recoverable) and the thesis model's MTTDL of one grid.
    let grown = Engine::stored_geometry(&args.dir)?;
    let params = permafrost_plan::ModelParams::thesis(true);
    let depth = permafrost_plan::GridDepth::default();
    let mttdl = |g: &permafrost_grid::Geometry| {
        permafrost_plan::grid_reliability(g, &params, depth).map(|r| r.mttdl_hours)
    };
    let (mttdl_before, mttdl_after) = (mttdl(&geometry)?, mttdl(&grown)?);
    let (fatal_before, fatal_after) = (geometry.fatal_pattern_count(), grown.fatal_pattern_count());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "added": report,
                "fatal_four_sets_before": fatal_before, "fatal_four_sets_after": fatal_after,
                "mttdl_hours_before": mttdl_before, "mttdl_hours_after": mttdl_after,
            }))?
        );
    } else {
        println!(
            "disk {} added as bucket {} ({}) in row (horizontal parity group) {} and column {}, parity disks {} and {}, in {} ms; grid now {} (geometry version {}); no parity recomputed, no other disk touched",
            report.disk,
            report.bucket,
            format_bytes(report.capacity_bytes),
            report.hpg,
            report.column,
            report.hp,
            report.vp,
            report.millis,
            report.geometry,
            report.geometry_version
        );
        println!(
            "every set of up to 3 failed disks stays recoverable; fatal 4-disk sets {fatal_before} -> {fatal_after}; \
             MTTDL of the grid (thesis model, IDR) {:.3e} -> {:.3e} hours",
            mttdl_before, mttdl_after
        );
    }
    Ok(())
}

fn rebuild(args: DiskArgs) -> Result<()> {
    let engine = open(&args.dir)?;
    let bar = bytes_bar("rebuilding", args.json);
    let started = Instant::now();
    let report = engine.rebuild(args.disk, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "disk": args.disk, "report": report, "seconds": seconds })
        );
    } else {
        eprintln!(
            "disk {} rebuilt: {} in {seconds:.1} s",
            args.disk,
            format_bytes(report.bytes_recovered)
        );
        if report.bytes_recovered_concurrently > 0 {
            eprintln!(
                "  and {} recovered meanwhile by the background recovery or by writers",
                format_bytes(report.bytes_recovered_concurrently)
            );
        }
        for (disk, offset, len) in &report.unrecoverable {
            eprintln!("  not recoverable now: disk {disk} bytes {offset}+{len}");
        }
    }
    let clean = report.unrecoverable.is_empty();
    close(engine)?;
    if !clean {
        bail!("the rebuild left ranges that could not be recovered (listed above)");
    }
    Ok(())
}

fn scrub(args: ScrubArgs) -> Result<()> {
    let engine = open(&args.dir)?;
    if let Some(hours) = args.overdue_hours {
        let report = engine.scrub_overdue(std::time::Duration::from_secs_f64(hours * 3600.0))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!(
                "scrubbed {} overdue ranges: verified {}, repaired {} blocks and {} check blocks, {} ranges left to the grid",
                report.ranges.len(),
                format_bytes(report.bytes_verified),
                report.blocks_repaired,
                report.check_blocks_repaired,
                report.unrecoverable.len()
            );
            for (disk, offset, len) in &report.ranges {
                println!("  disk {disk}: {} at {offset}", format_bytes(*len));
            }
        }
        return close(engine);
    }
    let disks: Vec<usize> = match args.disk {
        Some(disk) => vec![disk],
        None => (0..engine.geometry().disks())
            .filter(|&d| !engine.is_failed(d))
            .collect(),
    };
    let capacity = engine.bucket_capacity_bytes();
    let step = 64 << 20;
    let bar = bytes_bar("scrubbing", args.json);
    bar.set_length(capacity * disks.len() as u64);
    let mut totals = Vec::new();
    for (done_disks, &disk) in disks.iter().enumerate() {
        let mut total = permafrost_idr::ScrubReport::default();
        let mut offset = 0;
        while offset < capacity {
            let len = step.min(capacity - offset);
            let report = engine.scrub(disk, offset, len)?;
            total.bytes_verified += report.bytes_verified;
            total.stripes_never_written += report.stripes_never_written;
            total.blocks_repaired += report.blocks_repaired;
            total.check_blocks_repaired += report.check_blocks_repaired;
            total.unrecoverable.extend(report.unrecoverable);
            offset += len;
            bar.set_position(done_disks as u64 * capacity + offset);
        }
        totals.push((disk, total));
    }
    bar.finish_and_clear();
    if args.json {
        let rows: Vec<_> = totals
            .iter()
            .map(|(disk, r)| {
                serde_json::json!({ "disk": disk, "bytes_verified": r.bytes_verified, "blocks_repaired": r.blocks_repaired,
                    "check_blocks_repaired": r.check_blocks_repaired, "unrecoverable": r.unrecoverable })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for (disk, r) in &totals {
            println!(
                "disk {disk}: verified {}, repaired {} blocks and {} check blocks, {} ranges left to the grid",
                format_bytes(r.bytes_verified),
                r.blocks_repaired,
                r.check_blocks_repaired,
                r.unrecoverable.len()
            );
        }
    }
    close(engine)
}

fn verify_parity(args: DirArgs) -> Result<()> {
    let engine = open(&args.dir)?;
    let bar = bytes_bar("verifying", args.json);
    let report = engine.verify_parity(&|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "checked {} of parity: {} mismatches",
            format_bytes(report.bytes_checked),
            report.mismatches.len()
        );
        for m in &report.mismatches {
            println!(
                "  mismatch: parity disk {} ({}) bytes {}+{}",
                m.parity_disk, m.group, m.offset, m.len
            );
        }
        if report.groups_skipped > 0 {
            println!(
                "  {} parity groups not checked: a member is failed",
                report.groups_skipped
            );
        }
    }
    let clean = report.mismatches.is_empty();
    close(engine)?;
    if !clean {
        std::process::exit(2);
    }
    Ok(())
}

/// The test workload behind the crash-consistency test: writes chunks until killed (or `--writes`), each bucket's
/// region in order, wrapping around to overwrite it with the next generation of the pattern. Before each write it
/// prints `writing BUCKET OFFSET LEN GENERATION` and after each commit `committed …` with the same fields (JSON
/// objects with `--json`). The commit of one chunk and the start of the next are printed in one write, after the
/// next chunk's data is ready: from the first `writing` line on, exactly one write is in flight until the process
/// dies, and the reader knows which.
fn soak(args: SoakArgs) -> Result<()> {
    use rand::{Rng, SeedableRng};
    let engine = open(&args.dir)?;
    let buckets: Vec<usize> = if args.bucket.is_empty() {
        (0..engine.buckets()).collect()
    } else {
        args.bucket.clone()
    };
    if let Some(&bucket) = buckets.iter().find(|&&b| b >= engine.buckets()) {
        bail!(
            "bucket {bucket} does not exist: the grid has {} buckets",
            engine.buckets()
        );
    }
    if args.chunk == 0
        || !args.chunk.is_multiple_of(4096)
        || args.region < args.chunk
        || !args.region.is_multiple_of(args.chunk)
    {
        bail!(
            "--chunk {} must be a non-zero multiple of 4096 and --region {} a non-zero multiple of it",
            args.chunk,
            args.region
        );
    }
    if !args.start.is_multiple_of(4096) || args.start + args.region > engine.bucket_capacity_bytes()
    {
        bail!(
            "--start {} + --region {} must be 4096-aligned and inside a bucket ({} bytes)",
            args.start,
            args.region,
            engine.bucket_capacity_bytes()
        );
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    // Per bucket: bytes of the region written in the current generation, and that generation.
    let mut filled = vec![0u64; engine.buckets()];
    let mut generation = vec![0u64; engine.buckets()];
    let mut committed: Option<String> = None;
    let mut out = io::stdout().lock();
    let mut written = 0u64;
    while args.writes.is_none_or(|writes| written < writes) {
        let bucket = buckets[rng.gen_range(0..buckets.len())];
        if filled[bucket] == args.region {
            filled[bucket] = 0;
            generation[bucket] += 1;
        }
        let offset = args.start + filled[bucket];
        let seed = crate::pattern::generation_seed(args.seed, generation[bucket]);
        let data = crate::pattern::pattern_bytes(seed, bucket, offset, args.chunk as usize);
        let writing = soak_line(
            "writing",
            bucket,
            offset,
            args.chunk,
            generation[bucket],
            args.json,
        );
        out.write_all(format!("{}{writing}", committed.take().unwrap_or_default()).as_bytes())?;
        out.flush()?;
        let mut promise = engine.write(bucket, offset, args.chunk, args.mode)?;
        promise.append(&data)?;
        promise.commit()?;
        filled[bucket] += args.chunk;
        written += 1;
        committed = Some(soak_line(
            "committed",
            bucket,
            offset,
            args.chunk,
            generation[bucket],
            args.json,
        ));
    }
    if let Some(line) = committed {
        out.write_all(line.as_bytes())?;
        out.flush()?;
    }
    close(engine)
}

fn soak_line(
    event: &str,
    bucket: usize,
    offset: u64,
    len: u64,
    generation: u64,
    json: bool,
) -> String {
    if json {
        let line = serde_json::json!({
            "event": event, "bucket": bucket, "offset": offset, "len": len, "generation": generation,
        });
        format!("{line}\n")
    } else {
        format!("{event} {bucket} {offset} {len} {generation}\n")
    }
}
