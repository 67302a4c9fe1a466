//! Measures the walk: `walkdir` + `lstat` on one thread against the survey's `jwalk` walk with
//! 1, 2 and 4 threads (compression sample off). Run twice: the first pass warms the page cache.
//!
//! `cargo run --release -p permafrost-survey --example walk_bench -- /usr/share`

use std::path::PathBuf;
use std::time::Instant;

use permafrost_survey::{survey, SurveyOptions};

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "/usr/share".into()),
    );
    for pass in 0..2 {
        let started = Instant::now();
        let (mut entries, mut bytes) = (0u64, 0u64);
        for entry in walkdir::WalkDir::new(&root) {
            let Ok(entry) = entry else { continue };
            if let Ok(metadata) = std::fs::symlink_metadata(entry.path()) {
                entries += 1;
                if metadata.is_file() {
                    bytes += metadata.len();
                }
            }
        }
        println!(
            "pass {pass}: walkdir serial      {:>7.0} ms  ({entries} entries, {bytes} bytes)",
            started.elapsed().as_secs_f64() * 1000.0
        );
        for threads in [1, 2, 4] {
            let options = SurveyOptions {
                sample_bytes_max: 0,
                threads,
                ..SurveyOptions::default()
            };
            let started = Instant::now();
            let result = survey(&root, &options)?;
            println!(
                "pass {pass}: survey {threads} thread(s)  {:>7.0} ms  ({} files, {} bytes)",
                started.elapsed().as_secs_f64() * 1000.0,
                result.totals.files,
                result.totals.bytes
            );
        }
    }
    Ok(())
}
