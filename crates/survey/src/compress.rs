//! The compression estimate: a seeded, bounded, byte-weighted sample of chunks, compressed with
//! zstd, with ZFS's rule that a block saving less than 12.5 % is stored raw (`002` §3.2.2).
//!
//! Sampling: the tree's bytes are cut into chunks of `sample_chunk_bytes` (each file separately,
//! its last chunk shorter). We draw `k = sample_bytes_max / sample_chunk_bytes` byte positions
//! uniformly over all bytes of the tree, with replacement, and compress the chunk holding each.
//! A chunk is therefore drawn with probability proportional to its length, so the mean of the
//! per-pick saved fractions is an unbiased estimate of the tree's saved fraction (Hansen–Hurwitz),
//! and because the picks are independent its 95 % interval is `mean ± 1.96 · sd / sqrt(k)`.
//!
//! The walk streams files, so the positions are drawn with `k` independent weighted reservoirs of
//! size one: file `i` of `w_i` bytes replaces each slot with probability `w_i / W_i`, `W_i` being
//! the bytes seen so far. Slots to replace are found by geometric jumps, so a file costs
//! `O(1 + k · w_i / W_i)` and the whole walk `O(files + k · ln W)`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;

use crate::walk::extension_of;
use crate::{SurveyError, SurveyOptions};

/// ZFS stores a compressed block only when it saves at least this fraction (1/8 = 12.5 %)...
const RULE_MIN_SAVED_EIGHTHS: u64 = 1;
/// ...and at least one sector of this size.
const RULE_SECTOR_BYTES: u64 = 512;
/// Z value of a two-sided 95 % normal interval.
const Z_95: f64 = 1.96;
/// Per-extension rows in the estimate (largest sample first).
const EXTENSION_ROWS_MAX: usize = 20;

/// Bytes a chunk of `raw_bytes` occupies after compression to `compressed_bytes`, under ZFS's
/// rule (`002` §3.2.2): the compressed form is kept only if it saves at least 12.5 % of the chunk
/// and at least one 512-byte sector; otherwise the chunk stays raw.
pub fn stored_bytes(raw_bytes: u64, compressed_bytes: u64) -> u64 {
    if compressed_bytes >= raw_bytes {
        return raw_bytes;
    }
    let saved_bytes = raw_bytes - compressed_bytes;
    let saves_an_eighth = saved_bytes * 8 >= raw_bytes * RULE_MIN_SAVED_EIGHTHS;
    let saves_a_sector =
        compressed_bytes.div_ceil(RULE_SECTOR_BYTES) < raw_bytes.div_ceil(RULE_SECTOR_BYTES);
    if saves_an_eighth && saves_a_sector {
        compressed_bytes
    } else {
        raw_bytes
    }
}

/// One sampled byte position: a file and the chunk holding the position.
#[derive(Clone, Debug)]
pub(crate) struct Pick {
    path: Arc<PathBuf>,
    chunk_index: u64,
}

/// `k` weighted reservoirs of size one over the bytes of the tree.
#[derive(Debug)]
pub(crate) struct ChunkSampler {
    slots: Vec<Option<Pick>>,
    chunk_bytes: u64,
    bytes_seen: u64,
    rng: ChaCha8Rng,
}

impl ChunkSampler {
    /// A sampler drawing `slots` positions; chunk size must be > 0.
    pub(crate) fn new(slots: usize, chunk_bytes: u64, seed: u64) -> Self {
        assert!(chunk_bytes > 0, "chunk size must be positive");
        ChunkSampler {
            slots: vec![None; slots],
            chunk_bytes,
            bytes_seen: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Offers a file of `size_bytes`; each slot takes one of its positions with probability
    /// `size_bytes / bytes seen so far`.
    pub(crate) fn offer(&mut self, path: &Path, size_bytes: u64) {
        if size_bytes == 0 || self.slots.is_empty() {
            return;
        }
        self.bytes_seen = self.bytes_seen.saturating_add(size_bytes);
        let probability = size_bytes as f64 / self.bytes_seen as f64;
        let mut shared_path: Option<Arc<PathBuf>> = None;
        let slot_count = self.slots.len();
        let mut index = 0usize;
        loop {
            if probability < 1.0 {
                // Number of slots skipped before the next replacement: Geometric(probability).
                let uniform: f64 = 1.0 - self.rng.gen::<f64>(); // in (0, 1]
                let gap = (uniform.ln() / (-probability).ln_1p()).floor();
                // NaN-safe: anything not below the remaining slots ends the round.
                if gap.is_nan() || gap >= (slot_count - index) as f64 {
                    break;
                }
                index += gap as usize;
            }
            if index >= slot_count {
                break;
            }
            let offset = self.rng.gen_range(0..size_bytes);
            let path = shared_path.get_or_insert_with(|| Arc::new(path.to_path_buf()));
            self.slots[index] = Some(Pick {
                path: Arc::clone(path),
                chunk_index: offset / self.chunk_bytes,
            });
            index += 1;
        }
    }

    /// The drawn positions (empty when the tree had no bytes).
    pub(crate) fn picks(&self) -> Vec<Pick> {
        self.slots.iter().flatten().cloned().collect()
    }
}

/// What zstd would save, extrapolated from the sample.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CompressionEstimate {
    /// zstd level used.
    pub zstd_level: i32,
    /// Unit of compression.
    pub chunk_bytes: u64,
    /// Byte positions drawn (with replacement).
    pub picks: u64,
    /// Picks whose chunk could be read and compressed.
    pub picks_used: u64,
    /// Distinct chunks read and compressed.
    pub distinct_chunks: u64,
    /// Bytes read for the sample (at most the sample budget).
    pub sampled_bytes: u64,
    /// Distinct chunks that could not be read (vanished, shrunk or unreadable since the walk).
    pub read_errors: u64,
    /// Fraction of the distinct chunks the 12.5 % rule leaves raw.
    pub chunks_left_raw_fraction: f64,
    /// Estimated fraction of the tree's bytes saved, with the 12.5 % rule.
    pub saved_fraction: f64,
    /// 95 % interval of `saved_fraction`.
    pub saved_fraction_ci95: [f64; 2],
    /// The same estimate if every chunk were stored compressed whenever it shrinks at all.
    pub saved_fraction_without_rule: f64,
    /// `saved_fraction · total bytes`.
    pub estimated_saved_bytes: u64,
    /// Per extension, from the picks that fell in files of that extension.
    pub by_extension: Vec<ExtensionCompression>,
    /// How far to trust the estimate, in words.
    pub confidence_note: String,
}

/// The sample's saved fraction for one extension.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExtensionCompression {
    /// Extension as in the extension table.
    pub extension: String,
    /// Picks that fell in files with it.
    pub picks: u64,
    /// Mean saved fraction of those picks (with the 12.5 % rule).
    pub saved_fraction: f64,
}

/// Result of compressing one chunk: raw and compressed length.
type ChunkResult = Result<(u64, u64), String>;

/// Reads and compresses the picked chunks (each distinct chunk once, in parallel) and
/// extrapolates to `total_bytes`.
pub(crate) fn estimate(
    picks: Vec<Pick>,
    total_bytes: u64,
    options: &SurveyOptions,
    threads: usize,
) -> Result<CompressionEstimate, SurveyError> {
    let chunk_bytes = options.sample_chunk_bytes;
    let mut distinct: Vec<(Arc<PathBuf>, u64)> = picks
        .iter()
        .map(|pick| (Arc::clone(&pick.path), pick.chunk_index))
        .collect();
    distinct.sort();
    distinct.dedup();

    let progress = compress_progress(options.show_progress, distinct.len() as u64);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|error| SurveyError::Threads(error.to_string()))?;
    let results: Vec<ChunkResult> = pool.install(|| {
        distinct
            .par_iter()
            .map(|(path, chunk_index)| {
                let result = compress_chunk(path, *chunk_index, chunk_bytes, options.zstd_level);
                progress.inc(1);
                result
            })
            .collect()
    });
    progress.finish_and_clear();

    let by_chunk: HashMap<(Arc<PathBuf>, u64), &ChunkResult> =
        distinct.iter().cloned().zip(results.iter()).collect();
    let mut sampled_bytes = 0u64;
    let mut read_errors = 0u64;
    let mut left_raw = 0u64;
    for result in &results {
        match result {
            Ok((raw, compressed)) => {
                sampled_bytes += raw;
                if stored_bytes(*raw, *compressed) == *raw {
                    left_raw += 1;
                }
            }
            Err(_) => read_errors += 1,
        }
    }

    let mut saved = Vec::with_capacity(picks.len());
    let mut saved_without_rule = Vec::with_capacity(picks.len());
    let mut per_extension: HashMap<String, (u64, f64)> = HashMap::new();
    for pick in &picks {
        let Ok((raw, compressed)) = by_chunk[&(Arc::clone(&pick.path), pick.chunk_index)] else {
            continue;
        };
        let raw_f = *raw as f64;
        let fraction = (raw - stored_bytes(*raw, *compressed)) as f64 / raw_f;
        saved.push(fraction);
        saved_without_rule.push(raw.saturating_sub(*compressed) as f64 / raw_f);
        let extension = extension_of(pick.path.file_name().unwrap_or_default());
        let row = per_extension.entry(extension).or_default();
        row.0 += 1;
        row.1 += fraction;
    }

    let (mean, half_width) = mean_and_ci95_half_width(&saved);
    let (mean_without_rule, _) = mean_and_ci95_half_width(&saved_without_rule);
    let mut by_extension: Vec<ExtensionCompression> = per_extension
        .into_iter()
        .map(|(extension, (picks, sum))| ExtensionCompression {
            extension,
            picks,
            saved_fraction: sum / picks as f64,
        })
        .collect();
    by_extension.sort_by(|a, b| b.picks.cmp(&a.picks).then(a.extension.cmp(&b.extension)));
    by_extension.truncate(EXTENSION_ROWS_MAX);

    let picks_used = saved.len() as u64;
    let distinct_read = distinct.len() as u64 - read_errors;
    let confidence_note = if picks_used == 0 {
        "no data could be sampled; no estimate".to_string()
    } else {
        format!(
            "{picks_used} byte positions drawn uniformly over all {} bytes (seeded, with replacement); \
             {distinct_read} distinct {} KiB chunks compressed independently at zstd level {}, as a \
             file system with {} KiB records would. 95 % interval from the normal approximation; \
             it covers sampling error only: whole-file compression or a larger level would save more, \
             and files changed since the walk are not reflected.{}",
            total_bytes,
            chunk_bytes / 1024,
            options.zstd_level,
            chunk_bytes / 1024,
            if read_errors > 0 {
                format!(" {read_errors} chunks could not be read and were left out.")
            } else {
                String::new()
            }
        )
    };
    Ok(CompressionEstimate {
        zstd_level: options.zstd_level,
        chunk_bytes,
        picks: picks.len() as u64,
        picks_used,
        distinct_chunks: distinct.len() as u64,
        sampled_bytes,
        read_errors,
        chunks_left_raw_fraction: if distinct_read == 0 {
            0.0
        } else {
            left_raw as f64 / distinct_read as f64
        },
        saved_fraction: mean,
        saved_fraction_ci95: [(mean - half_width).max(0.0), (mean + half_width).min(1.0)],
        saved_fraction_without_rule: mean_without_rule,
        estimated_saved_bytes: (mean * total_bytes as f64).round() as u64,
        by_extension,
        confidence_note,
    })
}

/// Mean and half width of the 95 % normal interval; (0, 0) for no values.
fn mean_and_ci95_half_width(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, Z_95 * (variance / n).sqrt())
}

fn compress_chunk(path: &Path, chunk_index: u64, chunk_bytes: u64, level: i32) -> ChunkResult {
    let describe = |error: std::io::Error| format!("{}: {error}", path.display());
    let mut file = File::open(path).map_err(describe)?;
    file.seek(SeekFrom::Start(chunk_index * chunk_bytes))
        .map_err(describe)?;
    let mut buffer = Vec::with_capacity(chunk_bytes as usize);
    file.take(chunk_bytes)
        .read_to_end(&mut buffer)
        .map_err(describe)?;
    if buffer.is_empty() {
        return Err(format!("{}: shorter than at the walk", path.display()));
    }
    let compressed = zstd::bulk::compress(&buffer, level).map_err(describe)?;
    Ok((buffer.len() as u64, compressed.len() as u64))
}

fn compress_progress(show: bool, chunks: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let progress = ProgressBar::with_draw_target(Some(chunks), ProgressDrawTarget::stderr());
    progress.set_style(
        ProgressStyle::with_template("compressing sample {bar:30} {pos}/{len} chunks [{elapsed}]")
            .expect("static progress template is valid"),
    );
    progress.enable_steady_tick(Duration::from_millis(120));
    progress
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twelve_and_a_half_percent_rule_keeps_small_savings_raw() {
        let raw = 128 * 1024;
        // Saving exactly 1/8 is kept compressed; a byte less stays raw.
        assert_eq!(stored_bytes(raw, raw - raw / 8), raw - raw / 8);
        assert_eq!(stored_bytes(raw, raw - raw / 8 + 1), raw);
        assert_eq!(stored_bytes(raw, 1000), 1000);
        // Expansion is never stored.
        assert_eq!(stored_bytes(100, 200), 100);
        // 700 -> 600 saves 14 % but no whole 512-byte sector (2 sectors either way).
        assert_eq!(stored_bytes(700, 600), 700);
        assert_eq!(stored_bytes(1024, 100), 100);
    }

    #[test]
    fn sampler_draws_positions_in_proportion_to_bytes() {
        // Two files, 1 and 3 units of bytes: about 1/4 of 4000 slots should land in the first.
        let mut sampler = ChunkSampler::new(4000, 1024, 7);
        sampler.offer(Path::new("small"), 1 << 20);
        sampler.offer(Path::new("large"), 3 << 20);
        let picks = sampler.picks();
        assert_eq!(picks.len(), 4000);
        let small = picks
            .iter()
            .filter(|p| p.path.as_path() == Path::new("small"))
            .count() as f64;
        let share = small / 4000.0;
        // sd of the share is sqrt(0.25 * 0.75 / 4000) = 0.007; allow 5 sd.
        assert!((share - 0.25).abs() < 0.035, "share {share}");
        assert!(picks.iter().all(|p| p.chunk_index < 3 << 10));
    }

    #[test]
    fn sampler_is_deterministic_for_a_seed_and_ignores_empty_files() {
        let run = |seed| {
            let mut sampler = ChunkSampler::new(64, 4096, seed);
            sampler.offer(Path::new("empty"), 0);
            for i in 0..100u64 {
                sampler.offer(Path::new(&format!("f{i}")), 1000 + i * 37);
            }
            sampler
                .picks()
                .into_iter()
                .map(|p| (p.path.to_string_lossy().into_owned(), p.chunk_index))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert!(run(1).iter().all(|(path, _)| path != "empty"));
    }

    #[test]
    fn interval_is_zero_for_identical_values_and_widens_with_spread() {
        assert_eq!(mean_and_ci95_half_width(&[0.5; 10]), (0.5, 0.0));
        let (mean, half) = mean_and_ci95_half_width(&[0.0, 1.0, 0.0, 1.0]);
        assert_eq!(mean, 0.5);
        assert!(half > 0.4);
    }
}
