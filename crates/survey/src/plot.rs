//! Charts for `--plot DIR`, drawn with `permafrost-plot` (SVG and PNG of each):
//!
//! - `survey_sizes_by_count`: files per power-of-two size bin (`000` Fig. 3.4);
//! - `survey_sizes_by_bytes`: bytes per size bin (`000` Fig. 3.5);
//! - `survey_files_per_directory`: directories by number of files (`000` Fig. 3.6);
//! - `survey_extensions`: the top extensions' share of bytes and of files (`000` Fig. 3.7);
//! - `survey_hdd_model`: modelled throughput against request size, eq. 2.1 and eq. 4.1
//!   (`000` Fig. 2.1 and 4.1).

use std::path::{Path, PathBuf};

use anyhow::Context;
use permafrost_plot::Chart;

use crate::units::format_boundary;
use crate::Survey;

/// Extensions shown in the extension chart.
const EXTENSION_BARS_MAX: usize = 12;
const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;

pub(crate) fn write_charts(survey: &Survey, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (name, chart) in charts(survey) {
        let files = chart
            .write(dir, name)
            .with_context(|| format!("cannot write chart {name} into {}", dir.display()))?;
        written.push(files.svg);
        written.push(files.png);
    }
    Ok(written)
}

fn charts(survey: &Survey) -> Vec<(&'static str, Chart)> {
    let size_labels: Vec<String> = survey
        .size_histogram
        .iter()
        .map(|bin| format_boundary(bin.lower_bytes))
        .collect();
    let by_count = Chart::bar(
        "Files by size (power-of-two bins, lower bound)",
        size_labels.clone(),
    )
    .x_label("file size (bytes, bin lower bound)")
    .y_label("files")
    .bars(
        "files",
        survey.size_histogram.iter().map(|bin| bin.files as f64),
    );
    let by_bytes = Chart::bar(
        "Bytes by file size (power-of-two bins, lower bound)",
        size_labels,
    )
    .x_label("file size (bytes, bin lower bound)")
    .y_label("MiB")
    .bars(
        "MiB",
        survey
            .size_histogram
            .iter()
            .map(|bin| bin.bytes as f64 / BYTES_PER_MIB),
    );

    let directory_bins = &survey.files_per_directory.bins;
    let per_directory = Chart::bar(
        "Directories by number of files",
        directory_bins.iter().map(|bin| format_boundary(bin.lower)),
    )
    .x_label("files in the directory (bin lower bound)")
    .y_label("directories")
    .bars(
        "directories",
        directory_bins.iter().map(|bin| bin.directories as f64),
    );

    let top: Vec<_> = survey.extensions.iter().take(EXTENSION_BARS_MAX).collect();
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    };
    let extensions = Chart::bar(
        "Top extensions by bytes",
        top.iter().map(|row| row.extension.clone()),
    )
    .x_label("extension")
    .y_label("share (%)")
    .bars(
        "% of bytes",
        top.iter()
            .map(|row| percent(row.bytes, survey.totals.bytes)),
    )
    .bars(
        "% of files",
        top.iter()
            .map(|row| percent(row.files, survey.totals.files)),
    );

    let model = survey.options.hdd;
    let request_sizes: Vec<u64> = (0..=30).map(|power| 1u64 << power).collect();
    let hdd = Chart::line(&format!(
        "HDD model: {:.1} ms positioning, {} MiB/s, {} B sectors",
        model.positioning_ms(),
        model.sequential_mib_s,
        model.sector_bytes
    ))
    .x_label("request size (bytes)")
    .y_label("throughput (MiB/s)")
    .x_log(true)
    .y_log(true)
    .series(
        "eq. 2.1",
        request_sizes
            .iter()
            .map(|&l| (l as f64, model.eq_2_1_bytes_per_s(l as f64) / BYTES_PER_MIB)),
    )
    .series(
        "eq. 4.1 (whole sectors)",
        request_sizes
            .iter()
            .map(|&l| (l as f64, model.throughput_bytes_per_s(l) / BYTES_PER_MIB)),
    );

    vec![
        ("survey_sizes_by_count", by_count),
        ("survey_sizes_by_bytes", by_bytes),
        ("survey_files_per_directory", per_directory),
        ("survey_extensions", extensions),
        ("survey_hdd_model", hdd),
    ]
}
