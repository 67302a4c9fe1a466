//! Runs the survey without the `permafrost` binary: `cargo run -p permafrost-survey --example survey -- DIR`.

use clap::Parser;

#[derive(Parser)]
struct Command {
    #[command(flatten)]
    args: permafrost_survey::cli::SurveyArgs,
}

fn main() -> anyhow::Result<()> {
    permafrost_survey::cli::run(&Command::parse().args)
}
