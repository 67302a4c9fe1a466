//! Stand-alone `sim cache` command for trying the crate without the `permafrost` binary:
//! `cargo run --release -p permafrost-sim-cache --example sim_cache -- --trace t.pft --by-size-class`.

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    cache: permafrost_sim_cache::cli::CacheArgs,
}

fn main() -> anyhow::Result<()> {
    permafrost_sim_cache::cli::run(Args::parse().cache)
}
