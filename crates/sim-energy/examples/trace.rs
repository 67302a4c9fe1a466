//! `permafrost trace` as a standalone program (generates the traces of
//! `docs/energy.md`): `cargo run --release -p permafrost-sim-energy --example trace -- gen …`.

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: permafrost_trace::cli::TraceCommand,
}

fn main() -> anyhow::Result<()> {
    permafrost_trace::cli::run(Args::parse().command)
}
