//! Count the unrecoverable k-disk failure sets of layouts, exhaustively.
//!
//! `cargo run --release -p permafrost-grid --example fatal_sets -- 4 8x6:4+1 12x6:9+1`
//! prints one line per layout: sets, unrecoverable sets, their fraction, the
//! thesis's `b` (EP1 + EP2) and the time taken.

use std::time::Instant;

use permafrost_grid::{Geometry, Layout};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let k: usize = args
        .next()
        .ok_or("usage: fatal_sets K LAYOUT...")?
        .parse()?;
    for text in args {
        let grid = Geometry::new(text.parse::<Layout>()?)?;
        let d = grid.disks() as u64;
        let sets = (0..k as u64).fold(1u64, |acc, i| acc * (d - i) / (i + 1));
        let start = Instant::now();
        let fatal = grid.count_unrecoverable(k);
        println!(
            "{text}: d = {d}, k = {k}: {fatal} of {sets} sets unrecoverable ({:.5} %), b = {}, usable {:.1} %, {:.2} s",
            100.0 * fatal as f64 / sets as f64,
            grid.fatal_pattern_count(),
            100.0 * grid.usable_fraction(16, 1),
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
