//! Runs `permafrost plan …` without the main binary: `cargo run -p permafrost-plan --example plan -- mttdl --layout 6+2`.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: permafrost_plan::cli::PlanCommand,
}

fn main() -> anyhow::Result<()> {
    permafrost_plan::cli::run(Cli::parse().command)
}
