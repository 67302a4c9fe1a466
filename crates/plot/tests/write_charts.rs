//! Every kind of chart is written as a well-formed SVG and a real PNG.

use std::path::Path;

use permafrost_plot::{Chart, Written};

fn assert_files_are_real_charts(written: &Written, must_mention: &str) {
    let svg = std::fs::read_to_string(&written.svg).unwrap();
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{}",
        &svg[..80.min(svg.len())]
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(must_mention), "svg lacks {must_mention:?}");
    let png = std::fs::read(&written.png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    // IHDR: width and height, big endian, at bytes 16..24.
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1290, 780));
    assert!(
        png.len() > 10_000,
        "PNG of {} bytes is too small to hold a chart",
        png.len()
    );
}

fn charts() -> Vec<(&'static str, Chart, &'static str)> {
    vec![
        (
            "line",
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
                ),
            "ARC",
        ),
        (
            "scatter",
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
                ),
            "12x8:6+1",
        ),
        (
            "bar",
            Chart::bar(
                "Energy per strategy",
                ["always-on RAID 6", "object store 12+4", "grid"],
            )
            .y_label("kWh")
            .bars("ecfs", [1200.0, 900.0, 150.0])
            .bars("vlbi", [1100.0, 950.0, 90.0]),
            "vlbi",
        ),
        (
            "histogram",
            Chart::histogram("File sizes")
                .x_label("size (bytes)")
                .y_label("files")
                .x_log(true)
                .y_log(true)
                .bins(
                    "files",
                    [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
                    [10.0, 0.0, 300.0, 25.0, 4.0],
                ),
            "File sizes",
        ),
    ]
}

#[test]
fn every_chart_kind_writes_a_valid_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    for (name, chart, mention) in charts() {
        let written = chart.write(dir.path(), name).unwrap();
        assert_eq!(written.svg, dir.path().join(format!("{name}.svg")));
        assert_files_are_real_charts(&written, mention);
    }
}

#[test]
fn write_creates_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a").join("b");
    let written = Chart::line("empty chart").write(&nested, "empty").unwrap();
    assert!(Path::new(&written.png).exists());
}

#[test]
fn zero_bars_and_empty_bins_draw_no_zero_height_rectangles() {
    // A zero-height <rect> draws nothing and makes SVG renderers (usvg, so our own PNG step) warn.
    let bars = Chart::bar("zeros", ["a", "b", "c"])
        .bars("values", [0.0, 2.0, 0.0])
        .to_svg()
        .unwrap();
    let histogram = Chart::histogram("empty bins")
        .bins("counts", [0.0, 1.0, 2.0, 3.0], [4.0, 0.0, 1.0])
        .to_svg()
        .unwrap();
    for svg in [&bars, &histogram] {
        assert!(!svg.contains("height=\"0.0\""), "{svg}");
    }
    let filled = |svg: &str| svg.matches("fill=\"#0072B2\"").count();
    assert_eq!(filled(&bars), 1 + 1, "one bar and the legend swatch");
    assert_eq!(filled(&histogram), 2 + 1, "two bins and the legend swatch");
}
