//! Prints the fatal-set counts, tolerances and timings of the thesis's grids:
//! `cargo run --release -p permafrost-plan --example fatal_counts [depth] [layout…]`.
use std::time::Instant;

use permafrost_grid::{Geometry, Layout};
use permafrost_plan::fatal;

fn main() {
    let mut args = std::env::args().skip(1);
    let depth: usize = args.next().map_or(6, |d| d.parse().expect("depth"));
    let mut layouts: Vec<String> = args.collect();
    if layouts.is_empty() {
        layouts = [
            "10x5:7+1",
            "8x8:6+1",
            "12x6:9+1",
            "12x8:6+1",
            "16x6:9+1",
            "21x9:7+1",
            "24x8:6+1",
            "24x8:13+1",
            "38x5:7+1",
        ]
        .map(String::from)
        .to_vec();
    }
    for text in layouts {
        let geometry = Geometry::new(text.parse::<Layout>().expect("layout")).expect("geometry");
        let started = Instant::now();
        let counts = fatal::count(&geometry, depth);
        let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        println!(
            "{text:>10} d={:>3} {elapsed_ms:>8.1} ms  fatal {:?}  minimal {:?}  p {:?}",
            geometry.disks(),
            &counts.unrecoverable[4..],
            &counts.minimal[4..],
            counts.tolerances()[3..]
                .iter()
                .map(|p| format!("{:.6}", p))
                .collect::<Vec<_>>()
        );
    }
}
