//! Writes one chart of each kind into the directory given as the first argument.
use permafrost_plot::Chart;

fn main() -> Result<(), permafrost_plot::PlotError> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "plots".to_string());
    let dir = std::path::Path::new(&dir);
    Chart::scatter("MTTDL against efficiency")
        .x_label("efficiency (%)")
        .y_label("MTTDL (hours)")
        .y_log(true)
        .labeled_series(
            "grids",
            [(70.6, 3.8e9, "12x8:6+1"), (75.0, 1.8e9, "16x6:9+1")],
        )
        .series(
            "n+k arrays",
            [(75.0, 4.13e6), (66.7, 1.91e10), (80.0, 2.57e6)],
        )
        .write(dir, "scatter")?;
    Chart::bar(
        "Energy per strategy",
        ["always-on RAID 6", "object store 12+4", "grid"],
    )
    .y_label("kWh")
    .bars("ecfs", [1200.0, 900.0, 150.0])
    .bars("vlbi", [1100.0, 950.0, 90.0])
    .write(dir, "bar")?;
    Chart::histogram("File sizes")
        .x_label("size (bytes)")
        .y_label("files")
        .x_log(true)
        .bins(
            "files",
            (0..21).map(|i| 2f64.powi(i * 2)),
            (0..20).map(|i| ((i * 7) % 13) as f64 * 100.0),
        )
        .write(dir, "histogram")?;
    Chart::line("Hit ratio against cache size")
        .x_label("cache size (GiB)")
        .y_label("hit ratio")
        .x_log(true)
        .series(
            "LRU",
            [(1.0, 0.1), (10.0, 0.3), (100.0, 0.55), (1000.0, 0.7)],
        )
        .series(
            "ARC",
            [(1.0, 0.12), (10.0, 0.33), (100.0, 0.58), (1000.0, 0.71)],
        )
        .write(dir, "line")?;
    Ok(())
}
