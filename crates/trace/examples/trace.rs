//! Stand-alone `trace` command for trying the crate without the `permafrost` binary:
//! `cargo run --release -p permafrost-trace --example trace -- gen --profile ecfs -o t.pft`.

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: permafrost_trace::cli::TraceCommand,
}

fn main() -> anyhow::Result<()> {
    permafrost_trace::cli::run(Args::parse().command)
}
