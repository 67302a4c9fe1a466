//! Turns the walk's tally into a [`Survey`], derives the recommendations, and renders the text
//! report.

use std::fmt::Write as _;
use std::path::Path;

use crate::compress::CompressionEstimate;
use crate::units::{format_boundary, format_bytes, format_percent};
use crate::walk::{bin_bounds, Tally, BINS};
use crate::{
    CountBin, DirectoryStats, ExtensionStat, HddBin, HddPrediction, PackingEstimate, SizeBin,
    SpaceOverhead, Survey, SurveyOptions, SMALL_FILE_QUOTE_BYTES,
};

const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;
/// ext4's default `bytes-per-inode` (`mke2fs -i`), quoted by the study (`000` §3.2.2).
const EXT4_BYTES_PER_INODE: f64 = 16384.0;
/// A directory with at least this many files is called out.
const CROWDED_DIRECTORY_FILES: u64 = 10_000;
/// Extension rows printed in the text report (the JSON has them all).
const EXTENSION_ROWS_PRINTED: usize = 15;

/// The index range from the first to the last non-zero entry, if any.
fn occupied_span(counts: impl Iterator<Item = u64> + Clone) -> Option<(usize, usize)> {
    let first = counts.clone().position(|c| c > 0)?;
    let last = BINS
        - 1
        - counts
            .collect::<Vec<_>>()
            .iter()
            .rev()
            .position(|&c| c > 0)?;
    Some((first, last))
}

pub(crate) fn build(
    root: &Path,
    options: &SurveyOptions,
    block_bytes: u64,
    tally: Tally,
    compression: Option<CompressionEstimate>,
    walk_ms: u64,
    compress_ms: u64,
) -> Survey {
    let hdd = &options.hdd;
    let totals = tally.totals.clone();

    let size_histogram: Vec<SizeBin> = occupied_span(tally.size_bins.iter().map(|b| b.files))
        .map(|(first, last)| {
            (first..=last)
                .map(|bin| {
                    let (lower_bytes, upper_bytes) = bin_bounds(bin);
                    let sums = tally.size_bins[bin];
                    SizeBin {
                        lower_bytes,
                        upper_bytes,
                        files: sums.files,
                        bytes: sums.bytes,
                        allocated_bytes: sums.allocated_bytes,
                    }
                })
                .collect()
        })
        .unwrap_or_default();

    let directory_bins = &tally.directories.bins;
    let files_per_directory = DirectoryStats {
        directories_read: tally.directories.directories_read,
        empty_directories: tally.directories.empty_directories,
        single_file_directories: tally.directories.single_file_directories,
        max_files: tally.directories.max_files,
        bins: occupied_span(directory_bins.iter().copied())
            .map(|(first, last)| {
                (first..=last)
                    .map(|bin| {
                        let (lower, upper) = bin_bounds(bin);
                        CountBin {
                            lower,
                            upper,
                            directories: directory_bins[bin],
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };

    let mut extensions: Vec<ExtensionStat> = tally
        .extensions
        .iter()
        .map(|(extension, &(files, bytes))| ExtensionStat {
            extension: extension.clone(),
            files,
            bytes,
        })
        .collect();
    extensions.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.files.cmp(&a.files))
            .then(a.extension.cmp(&b.extension))
    });

    let inodes = totals.files + totals.directories + totals.symlinks + totals.special_files;
    let inode_table_bytes = inodes * options.inode_bytes;
    let overhead_bytes = tally.rounding_waste_bytes + tally.directory_bytes + inode_table_bytes;
    let space = SpaceOverhead {
        apparent_bytes: totals.bytes,
        allocated_bytes: totals.allocated_bytes,
        rounding_waste_bytes: tally.rounding_waste_bytes,
        unallocated_bytes: tally.unallocated_bytes,
        block_rounding_model_bytes: tally.block_rounding_model_bytes,
        directory_bytes: tally.directory_bytes,
        inodes,
        inode_table_bytes,
        overhead_bytes,
        overhead_fraction: ratio(overhead_bytes as f64, totals.bytes as f64),
        bytes_per_inode: ratio(totals.bytes as f64, inodes as f64),
    };

    let small = tally.small;
    let extents = small.bytes.div_ceil(options.pack_extent_bytes);
    let hdd_read_s_before = hdd.batch_read_time_s(small.requests, small.transferred_bytes);
    let hdd_read_s_after = hdd.batch_read_time_s(extents, small.bytes);
    let inodes_saved = small.files.saturating_sub(extents);
    let packing = PackingEstimate {
        small_files: small.files,
        small_bytes: small.bytes,
        small_allocated_bytes: small.allocated_bytes,
        extents,
        inodes_saved,
        inode_table_bytes_saved: inodes_saved * options.inode_bytes,
        rounding_waste_saved_bytes: small
            .rounding_waste_bytes
            .saturating_sub(extents * block_bytes),
        metadata_reads_before: small.files,
        metadata_reads_after: extents,
        hdd_read_s_before,
        hdd_read_s_after,
    };

    let requests: u64 = tally.size_bins[1..].iter().map(|b| b.files).sum();
    let transferred: u64 = tally.size_bins.iter().map(|b| b.transferred_bytes).sum();
    let read_s = hdd.batch_read_time_s(requests, transferred);
    let packed_read_s = read_s - hdd_read_s_before + hdd_read_s_after;
    let bytes_f = totals.bytes as f64;
    let hdd_bins = size_histogram
        .iter()
        .filter(|bin| bin.lower_bytes > 0 && bin.files > 0)
        .map(|bin| {
            let sums = tally.size_bins[crate::walk::bin_of(bin.lower_bytes)];
            let time_s = hdd.batch_read_time_s(sums.files, sums.transferred_bytes);
            HddBin {
                lower_bytes: bin.lower_bytes,
                upper_bytes: bin.upper_bytes,
                mean_file_bytes: sums.bytes as f64 / sums.files as f64,
                throughput_mib_s: sums.bytes as f64 / time_s / BYTES_PER_MIB,
                read_time_fraction: ratio(time_s, read_s),
                bytes_fraction: ratio(sums.bytes as f64, bytes_f),
            }
        })
        .collect();
    let hdd_prediction = HddPrediction {
        positioning_ms: hdd.positioning_ms(),
        half_rate_request_bytes: hdd.half_rate_request_bytes(),
        requests,
        read_s,
        throughput_mib_s: ratio(bytes_f, read_s) / BYTES_PER_MIB,
        packed_read_s,
        packed_throughput_mib_s: ratio(bytes_f, packed_read_s) / BYTES_PER_MIB,
        bins: hdd_bins,
    };

    let mut survey = Survey {
        root: root.to_path_buf(),
        options: options.clone(),
        block_bytes,
        totals,
        size_histogram,
        files_per_directory,
        extensions,
        space,
        packing,
        compression,
        hdd: hdd_prediction,
        recommendations: Vec::new(),
        walk_ms,
        compress_ms,
    };
    survey.recommendations = recommend(&survey);
    survey
}

fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator > 0.0 {
        numerator / denominator
    } else {
        0.0
    }
}

fn format_seconds(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.0} ms", seconds * 1000.0)
    } else if seconds < 120.0 {
        format!("{seconds:.1} s")
    } else if seconds < 7200.0 {
        format!("{:.1} min", seconds / 60.0)
    } else if seconds < 3.0 * 86400.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.1} days", seconds / 86400.0)
    }
}

/// Plain-language advice, most consequential first.
fn recommend(survey: &Survey) -> Vec<String> {
    let mut advice = Vec::new();
    let totals = &survey.totals;
    let options = &survey.options;
    if totals.files == 0 {
        advice
            .push("The tree holds no regular files; there is nothing to pack or compress.".into());
        return advice;
    }

    let (quote_files, quote_bytes) = survey
        .size_histogram
        .iter()
        .filter(|bin| bin.upper_bytes <= SMALL_FILE_QUOTE_BYTES)
        .fold((0u64, 0u64), |(f, b), bin| (f + bin.files, b + bin.bytes));
    let packing = &survey.packing;
    let speedup = ratio(packing.hdd_read_s_before, packing.hdd_read_s_after);
    let mut line = format!(
        "{} of files are < {} but hold {} of bytes.",
        format_percent(quote_files as f64 / totals.files as f64),
        format_bytes(SMALL_FILE_QUOTE_BYTES),
        format_percent(ratio(quote_bytes as f64, totals.bytes as f64)),
    );
    if packing.inodes_saved > 0 {
        let verdict = if speedup >= 2.0 && packing.small_files >= 1000 {
            "Pack them"
        } else {
            "Packing would gain little here"
        };
        let _ = write!(
            line,
            " {verdict}: putting the {} files below {} into {} extents saves {} inodes (~{} of inode table), \
             {} of block rounding, and cuts the metadata reads needed to read them all from {} to {}; \
             the modelled HDD reads them in {} instead of {} ({:.0}x faster).",
            packing.small_files,
            format_bytes(options.pack_threshold_bytes),
            format_bytes(options.pack_extent_bytes),
            packing.inodes_saved,
            format_bytes(packing.inode_table_bytes_saved),
            format_bytes(packing.rounding_waste_saved_bytes),
            packing.metadata_reads_before,
            packing.metadata_reads_after,
            format_seconds(packing.hdd_read_s_after),
            format_seconds(packing.hdd_read_s_before),
            speedup,
        );
    }
    advice.push(line);

    let hdd = &survey.hdd;
    if hdd.requests > 0 {
        advice.push(format!(
            "Reading every file once in random order, the modelled drive ({:.1} ms positioning, {} MiB/s sequential) \
             delivers {:.1} MiB/s ({} of its sequential rate) and needs {}; after packing, {:.1} MiB/s in {}. \
             Requests below {} get less than half the sequential rate (eq. 2.1).",
            hdd.positioning_ms,
            options.hdd.sequential_mib_s,
            hdd.throughput_mib_s,
            format_percent(hdd.throughput_mib_s / options.hdd.sequential_mib_s),
            format_seconds(hdd.read_s),
            hdd.packed_throughput_mib_s,
            format_seconds(hdd.packed_read_s),
            format_bytes(hdd.half_rate_request_bytes as u64),
        ));
    }

    if let Some(compression) = &survey.compression {
        if compression.picks_used > 0 {
            let [low, high] = compression.saved_fraction_ci95;
            let range = format!(
                "about {} ({}, 95 % interval {}–{})",
                format_percent(compression.saved_fraction),
                format_bytes(compression.estimated_saved_bytes),
                format_percent(low),
                format_percent(high)
            );
            let notable: Vec<String> = compression
                .by_extension
                .iter()
                .filter(|row| row.picks >= 10)
                .take(5)
                .map(|row| format!("{} {}", row.extension, format_percent(row.saved_fraction)))
                .collect();
            let by_type = if notable.is_empty() {
                String::new()
            } else {
                format!(" By type: {}.", notable.join(", "))
            };
            let verdict = if compression.saved_fraction >= 0.10 {
                format!(
                    "zstd level {} would save {range}: compress when the data is produced, not afterwards.",
                    compression.zstd_level
                )
            } else if compression.saved_fraction >= 0.03 {
                format!(
                    "zstd level {} would save only {range}; worth it only where CPU is idle.",
                    compression.zstd_level
                )
            } else {
                format!(
                    "The data is already compressed or random: zstd level {} would save {range}. Do not spend CPU on it.",
                    compression.zstd_level
                )
            };
            advice.push(format!("{verdict}{by_type}"));
        }
    }

    if totals.zero_length_files > 0 {
        advice.push(format!(
            "{} files are empty ({} of files). If they are flags marking a dataset's state, as in the study, \
             keep that state in a database: each one costs an inode and a directory entry.",
            totals.zero_length_files,
            format_percent(totals.zero_length_files as f64 / totals.files as f64),
        ));
    }

    let directories = &survey.files_per_directory;
    if directories.empty_directories + directories.single_file_directories > 0 {
        advice.push(format!(
            "{} directories are empty and {} hold a single file; the study found such directories easy to \
             eliminate (merge single files into their parent or into a container).",
            directories.empty_directories, directories.single_file_directories
        ));
    }
    if directories.max_files >= CROWDED_DIRECTORY_FILES {
        advice.push(format!(
            "The most crowded directory holds {} files; such directories (e.g. one file per video frame) are \
             better stored as one container file per dataset.",
            directories.max_files
        ));
    }

    let space = &survey.space;
    if space.bytes_per_inode < EXT4_BYTES_PER_INODE {
        advice.push(format!(
            "The average inode holds {}, less than the 16 KiB per inode a default ext4 reserves: such a file \
             system runs out of inodes before space. Pack, or format with one inode per 4 KiB.",
            format_bytes(space.bytes_per_inode as u64)
        ));
    }
    advice.push(format!(
        "File-system overhead is {} of the data: {} of block rounding (measured), {} of directories and ~{} \
         of inodes ({} bytes each, estimated).",
        format_percent(space.overhead_fraction),
        format_bytes(space.rounding_waste_bytes),
        format_bytes(space.directory_bytes),
        format_bytes(space.inode_table_bytes),
        options.inode_bytes,
    ));

    if totals.errors > 0 {
        advice.push(format!(
            "{} entries could not be read; every number above leaves them out.",
            totals.errors
        ));
    }
    advice
}

/// Renders the survey as the text report printed by `permafrost survey`.
pub fn render_text(survey: &Survey) -> String {
    let mut out = String::new();
    let totals = &survey.totals;
    let _ = writeln!(out, "Survey of {}", survey.root.display());
    let _ = writeln!(
        out,
        "  {} files, {} ({} allocated), {} directories, {} empty files",
        totals.files,
        format_bytes(totals.bytes),
        format_bytes(totals.allocated_bytes),
        totals.directories,
        totals.zero_length_files
    );
    let _ = writeln!(
        out,
        "  skipped: {} symlinks, {} special files, {} extra hard-link names; {} errors; walk {} ms",
        totals.symlinks,
        totals.special_files,
        totals.extra_hard_link_names,
        totals.errors,
        survey.walk_ms
    );
    for example in &totals.error_examples {
        let _ = writeln!(out, "    error: {example}");
    }

    let _ = writeln!(out, "\nFile sizes (power-of-two bins)");
    let _ = writeln!(
        out,
        "  {:>15} {:>10} {:>8} {:>11} {:>8}",
        "size", "files", "files%", "bytes", "bytes%"
    );
    for bin in &survey.size_histogram {
        let label = if bin.lower_bytes == 0 {
            "0".to_string()
        } else {
            format!(
                "[{}, {})",
                format_boundary(bin.lower_bytes),
                format_boundary(bin.upper_bytes)
            )
        };
        let _ = writeln!(
            out,
            "  {:>15} {:>10} {:>8} {:>11} {:>8}",
            label,
            bin.files,
            format_percent(ratio(bin.files as f64, totals.files as f64)),
            format_bytes(bin.bytes),
            format_percent(ratio(bin.bytes as f64, totals.bytes as f64)),
        );
    }

    let directories = &survey.files_per_directory;
    let _ = writeln!(
        out,
        "\nFiles per directory ({} read, {} empty, {} with one file, at most {})",
        directories.directories_read,
        directories.empty_directories,
        directories.single_file_directories,
        directories.max_files
    );
    for bin in &directories.bins {
        let label = if bin.lower == 0 {
            "0".to_string()
        } else if bin.upper - bin.lower == 1 {
            bin.lower.to_string()
        } else {
            format!("{}–{}", bin.lower, bin.upper - 1)
        };
        let _ = writeln!(out, "  {:>15} {:>10}", label, bin.directories);
    }

    let _ = writeln!(
        out,
        "\nExtensions by bytes (top {} of {})",
        EXTENSION_ROWS_PRINTED.min(survey.extensions.len()),
        survey.extensions.len()
    );
    for row in survey.extensions.iter().take(EXTENSION_ROWS_PRINTED) {
        let _ = writeln!(
            out,
            "  {:>15} {:>10} {:>11} {:>8}",
            row.extension,
            row.files,
            format_bytes(row.bytes),
            format_percent(ratio(row.bytes as f64, totals.bytes as f64))
        );
    }

    let space = &survey.space;
    let _ = writeln!(out, "\nSpace beyond the data");
    let _ = writeln!(
        out,
        "  allocated {} for {} of data; block rounding {} measured ({} modelled at {} blocks); \
         {} not allocated (holes, inline or compressed)",
        format_bytes(space.allocated_bytes),
        format_bytes(space.apparent_bytes),
        format_bytes(space.rounding_waste_bytes),
        format_bytes(space.block_rounding_model_bytes),
        format_bytes(survey.block_bytes),
        format_bytes(space.unallocated_bytes)
    );
    let _ = writeln!(
        out,
        "  directories {}; {} inodes ~ {}; overhead {} of the data; {} per inode",
        format_bytes(space.directory_bytes),
        space.inodes,
        format_bytes(space.inode_table_bytes),
        format_percent(space.overhead_fraction),
        format_bytes(space.bytes_per_inode as u64)
    );

    let packing = &survey.packing;
    let _ = writeln!(
        out,
        "\nPacking files below {} into {} extents",
        format_bytes(survey.options.pack_threshold_bytes),
        format_bytes(survey.options.pack_extent_bytes)
    );
    let _ = writeln!(
        out,
        "  {} files, {} -> {} extents: {} inodes and {} of rounding saved; metadata reads {} -> {}; \
         HDD read {} -> {}",
        packing.small_files,
        format_bytes(packing.small_bytes),
        packing.extents,
        packing.inodes_saved,
        format_bytes(packing.rounding_waste_saved_bytes),
        packing.metadata_reads_before,
        packing.metadata_reads_after,
        format_seconds(packing.hdd_read_s_before),
        format_seconds(packing.hdd_read_s_after)
    );

    if let Some(compression) = &survey.compression {
        let _ = writeln!(
            out,
            "\nCompression (zstd level {}, {} chunks, 12.5 % rule)",
            compression.zstd_level,
            format_bytes(compression.chunk_bytes)
        );
        let [low, high] = compression.saved_fraction_ci95;
        let _ = writeln!(
            out,
            "  saves {} (95 % interval {}–{}) = {}; without the rule {}; {} of chunks left raw",
            format_percent(compression.saved_fraction),
            format_percent(low),
            format_percent(high),
            format_bytes(compression.estimated_saved_bytes),
            format_percent(compression.saved_fraction_without_rule),
            format_percent(compression.chunks_left_raw_fraction)
        );
        let _ = writeln!(
            out,
            "  sample: {} picks, {} distinct chunks, {} read in {} ms",
            compression.picks,
            compression.distinct_chunks,
            format_bytes(compression.sampled_bytes),
            survey.compress_ms
        );
        for row in compression.by_extension.iter().take(10) {
            let _ = writeln!(
                out,
                "  {:>15} {:>6} picks {:>8} saved",
                row.extension,
                row.picks,
                format_percent(row.saved_fraction)
            );
        }
        let _ = writeln!(out, "  note: {}", compression.confidence_note);
    }

    let hdd = &survey.hdd;
    let model = &survey.options.hdd;
    let _ = writeln!(
        out,
        "\nHDD model (eq. 2.1 + 4.1): seek {:.2} ms + half rotation at {} rpm = {:.2} ms, {} MiB/s, {} B sectors",
        model.seek_ms, model.rpm, hdd.positioning_ms, model.sequential_mib_s, model.sector_bytes
    );
    let _ = writeln!(
        out,
        "  {:>15} {:>11} {:>10} {:>8} {:>8}",
        "size", "mean", "MiB/s", "time%", "bytes%"
    );
    for bin in &hdd.bins {
        let _ = writeln!(
            out,
            "  {:>15} {:>11} {:>10.3} {:>8} {:>8}",
            format!(
                "[{}, {})",
                format_boundary(bin.lower_bytes),
                format_boundary(bin.upper_bytes)
            ),
            format_bytes(bin.mean_file_bytes as u64),
            bin.throughput_mib_s,
            format_percent(bin.read_time_fraction),
            format_percent(bin.bytes_fraction)
        );
    }
    let _ = writeln!(
        out,
        "  whole tree: {} requests, {} at {:.2} MiB/s; packed: {} at {:.2} MiB/s",
        hdd.requests,
        format_seconds(hdd.read_s),
        hdd.throughput_mib_s,
        format_seconds(hdd.packed_read_s),
        hdd.packed_throughput_mib_s
    );

    let _ = writeln!(out, "\nRecommendations");
    for advice in &survey.recommendations {
        let _ = writeln!(out, "  - {advice}");
    }
    out
}
