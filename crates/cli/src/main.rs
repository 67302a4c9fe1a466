//! `permafrost`: the operator's command line.
//!
//! One binary for everything an operator does. Each family of subcommands lives in its own
//! module (`grid`, `serve`) or in the crate that implements it (`plan`, `trace`, `sim`,
//! `survey`); this file only parses and dispatches. Long work shows a progress bar on stderr;
//! `--json` prints machine-readable results on stdout. Errors print one clear line and exit 1.

mod grid;
mod pattern;
mod progress;
mod serve;
mod units;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "permafrost", version, about = "An archive that sleeps: energy-efficient archival storage")]
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
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("PERMAFROST_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Grid(command) => grid::run(command),
    };
    if let Err(error) = result {
        eprintln!("permafrost: {error:#}");
        std::process::exit(1);
    }
}
