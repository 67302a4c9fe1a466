//! `permafrost`: the operator's command line.
//!
//! One binary for everything an operator does. Each family of subcommands lives in its own
//! module (`grid`, `serve`) or in the crate that implements it (`plan`, `trace`, `sim`,
//! `survey`); this file only parses and dispatches. Long work shows a progress bar on stderr;
//! `--json` prints machine-readable results on stdout. Errors print one clear line and exit 1.

mod cluster;
mod config;
mod data_dir;
mod grid;
mod grid_add_group;
mod grid_evacuate;
mod grid_grow;
mod grid_swap_parity;
mod key;
mod object;
mod pattern;
mod progress;
mod record;
mod relay;
mod serve;
mod units;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "permafrost",
    version,
    about = "An archive that sleeps: energy-efficient archival storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the archive on a data directory (creates the embedded default on first start).
    Serve(serve::ServeArgs),
    /// Operate a parity grid directly: init, write, read, fail, replace, rebuild, scrub, verify.
    #[command(subcommand)]
    Grid(grid::GridCommand),
    /// Know before you buy: reliability (MTTDL) and the layouts for a number of disks.
    #[command(subcommand)]
    Plan(permafrost_plan::cli::PlanCommand),
    /// Workload traces: generate synthetic ones from published statistics, or summarise one.
    #[command(subcommand)]
    Trace(permafrost_trace::cli::TraceCommand),
    /// Trace-driven simulation: energy of a layout and placement, or cache hit ratios by policy.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Survey a directory tree: sizes, small files, metadata overhead, what packing and compression save.
    Survey(permafrost_survey::cli::SurveyArgs),
    /// Upload a file (or `-` for stdin) as bucket/key.
    Put(object::PutArgs),
    /// Download bucket/key to a file (or `-` for stdout), whole or a byte range.
    Get(object::GetArgs),
    /// List buckets, or the keys of bucket[/prefix].
    Ls(object::LsArgs),
    /// Remove bucket/key (a delete marker in versioned buckets), or one version with --version-id; Object Lock
    /// decides.
    Rm(object::RmArgs),
    /// Show what the archive knows of bucket/key: size, etag, encoding, persistence state, extents.
    Stat(object::KeyArgs),
    /// Make a bucket, optionally with its settings (compression, placement, write mode).
    Mb(object::SettingsArgs),
    /// Show a bucket's settings, or change them (for uploads from now on).
    Settings(object::SettingsArgs),
    /// Remove an empty bucket.
    Rb(object::BucketArgs),
    /// Restore every object under bucket[/prefix] into the cache: one spin-up per disk, on-disk order.
    Restore(object::RestoreArgs),
    /// Datasets (bucket + prefix): size, objects, first/last write, tags, expiry, persistence, disk.
    Datasets(object::DatasetsArgs),
    /// Disks per power state, cache fill, bytes waiting per grid bucket, energy, contents per state.
    Status(object::StatusArgs),
    /// Re-read every object and check its hashes; exits 1 when any object fails.
    Verify(object::VerifyArgs),
    /// Rebuild the objects of one data disk from its extents, without the catalog.
    Salvage(object::SalvageArgs),
    /// e-VLBI recording: start, stop and watch scans of VDIF frames over UDP, schedules, a paced sender.
    #[command(subcommand)]
    Record(record::RecordCommand),
    /// Access keys with per-bucket permissions: create, list, info, allow, deny, disable, enable, delete.
    #[command(subcommand)]
    Key(key::KeyCommand),
    /// Cluster membership: the nodes of the cluster this data directory belongs to, their health and the
    /// topology (docs/cluster.md "Nodes").
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Cluster data plane: run a relay or a data node, write k copies along a replication tree, rebuild through a
    /// parity tree (docs/cluster.md).
    #[command(subcommand)]
    Relay(relay::RelayCommand),
}

#[derive(Subcommand)]
enum SimCommand {
    /// Disk-hours, spin-ups, kWh and read latency of a grid against always-on baselines.
    Energy(permafrost_sim_energy::cli::EnergyArgs),
    /// Request and byte hit ratios of LRU, MRU, FIFO, RANDOM, ARC and Bélády over cache sizes.
    Cache(permafrost_sim_cache::cli::CacheArgs),
}

/// The log filter unless `PERMAFROST_LOG` sets one. Warnings and errors; one info line per failed S3 request
/// (`permafrost_s3::requests`; every request at debug), per request that changed something (the audit trail,
/// `permafrost_s3::audit`) and per change to access keys (`permafrost_admin::keys`); s3s's own lines are Debug
/// dumps of whole requests and responses, so they are off (`PERMAFROST_LOG` overrides all of this; docs/admin.md
/// "Logs").
const LOG_FILTER_DEFAULT: &str =
    "warn,s3s=off,permafrost_s3::requests=info,permafrost_s3::audit=info,permafrost_admin::keys=info";

/// [`LOG_FILTER_DEFAULT`] of the long-running services (`serve`, `record`), for their operators: also one info
/// line per persisted batch (`permafrost_store::persist`), per completed restore (`permafrost_store::restore`)
/// and per disk spin-up with its reason (`permafrost_disk::power`). One-shot commands keep stderr for their
/// own output (`grid read` to stdout writes its JSON report there).
const LOG_FILTER_SERVICE: &str =
    "warn,s3s=off,permafrost_s3::requests=info,permafrost_s3::audit=info,permafrost_admin::keys=info,\
     permafrost_store::persist=info,permafrost_store::restore=info,permafrost_disk::power=info";

/// Large buffers (read-ahead chunks, IDR batches, upload pieces) go straight to `mmap` and back to the kernel
/// when freed. glibc otherwise raises its mmap threshold after the first large free (up to 32 MiB), so later
/// 8 MiB chunk buffers come from per-thread arenas that keep their pages: a 1 GiB GET from the grid left the
/// server at 264 MiB resident instead of 48 MiB (tests/e2e/test_streaming.py measures the peak).
fn bound_allocator_retention() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// `permafrost grid status | head`: a reader that closes stdout early ends a command quietly, with the status a
/// shell reports for a tool the pipe stopped (128 + SIGPIPE), as other Unix tools do; std's printing macros
/// panic on a closed stdout. SIGPIPE itself stays ignored, so a closed socket is an error, never a silent exit.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(128 + libc::SIGPIPE);
        }
        default(info);
    }));
}

fn main() {
    bound_allocator_retention();
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Command::Serve(_) | Command::Record(_) => LOG_FILTER_SERVICE,
        _ => LOG_FILTER_DEFAULT,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PERMAFROST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Grid(command) => grid::run(command),
        Command::Plan(command) => permafrost_plan::cli::run(command),
        Command::Trace(command) => permafrost_trace::cli::run(command),
        Command::Sim(SimCommand::Energy(args)) => permafrost_sim_energy::cli::run(&args),
        Command::Sim(SimCommand::Cache(args)) => permafrost_sim_cache::cli::run(args),
        Command::Survey(args) => permafrost_survey::cli::run(&args),
        Command::Put(args) => object::put(args),
        Command::Get(args) => object::get(args),
        Command::Ls(args) => object::ls(args),
        Command::Rm(args) => object::rm(args),
        Command::Stat(args) => object::stat(args),
        Command::Mb(args) => object::mb(args),
        Command::Settings(args) => object::settings(args),
        Command::Rb(args) => object::rb(args),
        Command::Restore(args) => object::restore(args),
        Command::Datasets(args) => object::datasets(args),
        Command::Status(args) => object::status(args),
        Command::Verify(args) => object::verify(args),
        Command::Salvage(args) => object::salvage(args),
        Command::Record(command) => record::run(command),
        Command::Relay(command) => relay::run(command),
        Command::Cluster(command) => cluster::run(command),
        Command::Key(command) => key::run(command),
    };
    if let Err(error) = result {
        eprintln!("permafrost: {error:#}");
        std::process::exit(1);
    }
}
