//! `permafrost sim energy` as a standalone program (the same code as the
//! `permafrost` binary's subcommand, without building the whole binary):
//! `cargo run --release -p permafrost-sim-energy --example sim_energy -- --trace T`.

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    energy: permafrost_sim_energy::cli::EnergyArgs,
}

fn main() -> anyhow::Result<()> {
    permafrost_sim_energy::cli::run(&Args::parse().energy)
}
