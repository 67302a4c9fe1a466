//! `permafrost survey DIR`: what an existing directory tree would cost to keep, and what
//! packing and compression would save, before anyone buys disks for it.
//!
//! It measures what the sensor-data study (`000` ch. 3–4) measured on its NAS: a file-size
//! histogram in power-of-two bins by count and by bytes, files per directory, bytes and counts by
//! extension, zero-length files, space lost to file-system metadata and block rounding, what
//! packing small files into large extents and compressing with zstd would save, and the HDD
//! throughput model (eq. 2.1 with the sector correction of eq. 4.1) applied to the observed
//! sizes. It ends with plain-language recommendations.
//!
//! Invariants and promises:
//! - The survey only reads. It never follows symbolic links (they are counted and skipped),
//!   counts special files (devices, FIFOs, sockets) and skips them, and counts a file with
//!   several hard links once (by device and inode) for sizes and bytes.
//! - Memory is bounded independently of the tree size except for the hard-link table (one entry
//!   per multiply-linked inode): histograms are fixed arrays, distinct extensions are capped at
//!   [`EXTENSIONS_MAX`], error examples at [`ERROR_EXAMPLES_MAX`], and the compression sample
//!   holds at most `sample_bytes_max / sample_chunk_bytes` picks.
//! - The compression sample is seeded: the same tree and options give the same estimate.
//! - Unreadable entries are counted as errors and reported, never fatal; only an unusable root
//!   or invalid options make [`survey`] fail.
//!
//! ```no_run
//! use permafrost_survey::{render_text, survey, SurveyOptions};
//! let result = survey(std::path::Path::new("/data/datasets"), &SurveyOptions::default())?;
//! println!("{}", render_text(&result));
//! println!("{} of {} bytes are in files below 1 MiB", result.packing.small_bytes, result.totals.bytes);
//! # Ok::<(), permafrost_survey::SurveyError>(())
//! ```
//!
//! The `permafrost` binary embeds [`cli::SurveyArgs`] as `permafrost survey` and calls
//! [`cli::run`]. See `docs/survey.md` for what each number means.

pub mod cli;
mod compress;
pub mod hdd;
mod plot;
mod report;
pub mod units;
mod walk;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

pub use compress::{stored_bytes, CompressionEstimate, ExtensionCompression};
pub use hdd::HddModel;
pub use report::render_text;

/// At most this many distinct extensions are tallied; the rest are counted as `(other)`.
pub const EXTENSIONS_MAX: usize = 10_000;
/// At most this many error messages are kept as examples (all errors are counted).
pub const ERROR_EXAMPLES_MAX: usize = 20;
/// Recommendations quote the share of files below this size (as in "62 % of files are < 64 KiB").
pub const SMALL_FILE_QUOTE_BYTES: u64 = 64 * 1024;

/// What to measure and which model parameters to use.
#[derive(Clone, Debug, Serialize)]
pub struct SurveyOptions {
    /// Files smaller than this are candidates for packing (default 1 MiB).
    pub pack_threshold_bytes: u64,
    /// Size of the extents small files would be packed into (default 64 MiB).
    pub pack_extent_bytes: u64,
    /// Upper bound on bytes read and compressed for the compression estimate (default 256 MiB);
    /// 0 skips the estimate.
    pub sample_bytes_max: u64,
    /// Unit of compression, like a ZFS record (default 128 KiB).
    pub sample_chunk_bytes: u64,
    /// zstd level used on the sample (default 3).
    pub zstd_level: i32,
    /// Seed of the sample.
    pub seed: u64,
    /// Estimated bytes of one inode on the surveyed file system (default 256, ext4's default).
    pub inode_bytes: u64,
    /// File-system block size for the rounding model; `None` asks the file system (statvfs).
    pub block_bytes: Option<u64>,
    /// Drive parameters for the throughput model.
    pub hdd: HddModel,
    /// Do not descend into directories on other file systems than the root's.
    pub one_file_system: bool,
    /// Worker threads for walking and compressing; 0 uses the number of CPUs.
    pub threads: usize,
    /// Draw progress bars on stderr (hidden automatically when stderr is not a terminal).
    pub show_progress: bool,
}

impl Default for SurveyOptions {
    fn default() -> Self {
        SurveyOptions {
            pack_threshold_bytes: 1 << 20,
            pack_extent_bytes: 64 << 20,
            sample_bytes_max: 256 << 20,
            sample_chunk_bytes: 128 << 10,
            zstd_level: 3,
            seed: 0x5eed,
            inode_bytes: 256,
            block_bytes: None,
            hdd: HddModel::default(),
            one_file_system: false,
            threads: 0,
            show_progress: false,
        }
    }
}

impl SurveyOptions {
    /// Checks every option; the message names the bad one.
    pub fn validate(&self) -> Result<(), SurveyError> {
        let bad = |message: String| Err(SurveyError::InvalidOption(message));
        if self.pack_extent_bytes == 0 {
            return bad("pack extent size must be > 0 bytes".into());
        }
        if self.sample_bytes_max > 0 && self.sample_chunk_bytes == 0 {
            return bad("sample chunk size must be > 0 bytes".into());
        }
        if self.sample_chunk_bytes > 1 << 30 {
            return bad(format!(
                "sample chunk size {} is above the 1 GiB bound",
                self.sample_chunk_bytes
            ));
        }
        let levels = zstd::compression_level_range();
        if !levels.contains(&self.zstd_level) {
            return bad(format!(
                "zstd level {} is outside {}..={}",
                self.zstd_level,
                levels.start(),
                levels.end()
            ));
        }
        if self.block_bytes == Some(0) {
            return bad("block size must be > 0 bytes".into());
        }
        self.hdd.validate().map_err(SurveyError::InvalidOption)
    }
}

/// Why a survey could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum SurveyError {
    /// The root could not be inspected.
    #[error("cannot survey {path}: {reason}")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// What the file system said (part of the message, so not repeated as a source).
        reason: std::io::Error,
    },
    /// The root exists but is not a directory.
    #[error("cannot survey {0}: not a directory")]
    NotADirectory(PathBuf),
    /// An option is out of range.
    #[error("invalid survey option: {0}")]
    InvalidOption(String),
    /// The worker thread pool could not be started.
    #[error("cannot start worker threads: {0}")]
    Threads(String),
}

/// Everything a survey found. Serialized as the `--json` output.
#[derive(Clone, Debug, Serialize)]
pub struct Survey {
    /// The root as given.
    pub root: PathBuf,
    /// Options and model parameters in force.
    pub options: SurveyOptions,
    /// Block size used by the rounding model.
    pub block_bytes: u64,
    /// Counts over the whole tree.
    pub totals: Totals,
    /// File sizes in power-of-two bins; only the span from the first to the last non-empty bin.
    pub size_histogram: Vec<SizeBin>,
    /// How many regular-file names each directory holds, in power-of-two bins.
    pub files_per_directory: DirectoryStats,
    /// Per extension, sorted by bytes (largest first).
    pub extensions: Vec<ExtensionStat>,
    /// Space used beyond the file contents.
    pub space: SpaceOverhead,
    /// What packing small files into extents would save.
    pub packing: PackingEstimate,
    /// What zstd would save; `None` when the sample budget is 0.
    pub compression: Option<CompressionEstimate>,
    /// Predicted HDD read throughput for the observed sizes.
    pub hdd: HddPrediction,
    /// Plain-language advice derived from the numbers above.
    pub recommendations: Vec<String>,
    /// Wall time of the walk.
    pub walk_ms: u64,
    /// Wall time of the compression sample.
    pub compress_ms: u64,
}

/// Counts over the whole tree.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    /// Regular files, each inode counted once.
    pub files: u64,
    /// Apparent bytes (st_size) of those files.
    pub bytes: u64,
    /// Allocated bytes (st_blocks · 512) of those files.
    pub allocated_bytes: u64,
    /// Regular files of length 0.
    pub zero_length_files: u64,
    /// Directories, the root included.
    pub directories: u64,
    /// Symbolic links (counted, not followed).
    pub symlinks: u64,
    /// Devices, FIFOs and sockets (counted, skipped).
    pub special_files: u64,
    /// Names of regular files beyond the first for inodes with several hard links.
    pub extra_hard_link_names: u64,
    /// Entries that could not be read or inspected.
    pub errors: u64,
    /// The first few error messages.
    pub error_examples: Vec<String>,
    /// Directories not entered because they are on another file system (`--one-file-system`).
    pub other_file_system_directories: u64,
}

/// One power-of-two bin of the size histogram: `lower_bytes <= size < upper_bytes`.
/// Bin 0 holds the empty files (`0 <= size < 1`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SizeBin {
    /// Inclusive lower bound.
    pub lower_bytes: u64,
    /// Exclusive upper bound (`u64::MAX` for the last possible bin).
    pub upper_bytes: u64,
    /// Files in the bin.
    pub files: u64,
    /// Their apparent bytes.
    pub bytes: u64,
    /// Their allocated bytes.
    pub allocated_bytes: u64,
}

/// Files-per-directory distribution (`000` Fig. 3.6).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DirectoryStats {
    /// Directories that were read.
    pub directories_read: u64,
    /// Directories with no entries at all.
    pub empty_directories: u64,
    /// Directories holding exactly one regular file (and possibly subdirectories).
    pub single_file_directories: u64,
    /// Most regular-file names in one directory.
    pub max_files: u64,
    /// Power-of-two bins over the number of regular-file names per directory:
    /// `lower <= files < upper`, the first bin being exactly 0.
    pub bins: Vec<CountBin>,
}

/// One bin of the files-per-directory histogram.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CountBin {
    /// Inclusive lower bound on files per directory.
    pub lower: u64,
    /// Exclusive upper bound.
    pub upper: u64,
    /// Directories in the bin.
    pub directories: u64,
}

/// Counts and bytes for one file extension.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExtensionStat {
    /// Lower-case text after the last dot, `(none)` or `(other)` past [`EXTENSIONS_MAX`].
    pub extension: String,
    /// Files.
    pub files: u64,
    /// Apparent bytes.
    pub bytes: u64,
}

/// Space beyond the file contents.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SpaceOverhead {
    /// Apparent bytes of all regular files.
    pub apparent_bytes: u64,
    /// What the file system allocated to them (st_blocks · 512).
    pub allocated_bytes: u64,
    /// Sum over files of `allocated − size` where positive: measured block rounding.
    pub rounding_waste_bytes: u64,
    /// Sum over files of `size − allocated` where positive: holes, inline data, fs compression.
    pub unallocated_bytes: u64,
    /// Block rounding predicted for the block size: sum of `ceil(size / block) · block − size`.
    pub block_rounding_model_bytes: u64,
    /// Blocks allocated to the directories themselves (measured).
    pub directory_bytes: u64,
    /// Inodes in use: files, directories, symlinks and special files.
    pub inodes: u64,
    /// `inodes · inode_bytes` (an estimate: the inode size is an option).
    pub inode_table_bytes: u64,
    /// `rounding_waste_bytes + directory_bytes + inode_table_bytes`.
    pub overhead_bytes: u64,
    /// `overhead_bytes / apparent_bytes` (0 when the tree is empty).
    pub overhead_fraction: f64,
    /// Average apparent bytes per inode, to compare with ext4's default of one inode per 16 KiB.
    pub bytes_per_inode: f64,
}

/// What packing the files below the threshold into large extents would save.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PackingEstimate {
    /// Files below `pack_threshold_bytes` (empty files included).
    pub small_files: u64,
    /// Their apparent bytes.
    pub small_bytes: u64,
    /// Their allocated bytes.
    pub small_allocated_bytes: u64,
    /// Extents of `pack_extent_bytes` needed to hold them.
    pub extents: u64,
    /// `small_files − extents`.
    pub inodes_saved: u64,
    /// `inodes_saved · inode_bytes`.
    pub inode_table_bytes_saved: u64,
    /// Measured rounding waste of the small files minus at most one block per extent.
    pub rounding_waste_saved_bytes: u64,
    /// File opens (inode reads) to read every small file: one per file.
    pub metadata_reads_before: u64,
    /// After packing: one per extent (the index lives in a database, as `000` ch. 5 proposes).
    pub metadata_reads_after: u64,
    /// Modelled seconds to read every non-empty small file, one random request each.
    pub hdd_read_s_before: f64,
    /// Modelled seconds to read the same bytes from packed extents.
    pub hdd_read_s_after: f64,
}

/// The HDD model applied to the observed sizes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HddPrediction {
    /// `t_seek` of the source: seek plus half a rotation.
    pub positioning_ms: f64,
    /// Request size at which eq. 2.1 reaches half the sustained rate.
    pub half_rate_request_bytes: f64,
    /// Non-empty files, each read as one random request.
    pub requests: u64,
    /// Modelled seconds to read every non-empty file once, in random order.
    pub read_s: f64,
    /// `bytes / read_s` in MiB/s.
    pub throughput_mib_s: f64,
    /// The same after packing the small files into extents.
    pub packed_read_s: f64,
    /// `bytes / packed_read_s` in MiB/s.
    pub packed_throughput_mib_s: f64,
    /// Per size bin: the model at the bin's mean size and the bin's share of reading time.
    pub bins: Vec<HddBin>,
}

/// The HDD model for one size bin.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HddBin {
    /// Inclusive lower bound.
    pub lower_bytes: u64,
    /// Exclusive upper bound.
    pub upper_bytes: u64,
    /// Mean file size in the bin.
    pub mean_file_bytes: f64,
    /// Eq. 4.1 throughput for the bin's files, in MiB/s.
    pub throughput_mib_s: f64,
    /// Share of the whole tree's modelled reading time spent on this bin.
    pub read_time_fraction: f64,
    /// Share of the tree's bytes in this bin.
    pub bytes_fraction: f64,
}

/// Surveys the tree under `root`.
///
/// Fails only when `root` is not a readable directory or an option is invalid; unreadable
/// entries below it are counted in [`Totals::errors`].
pub fn survey(root: &Path, options: &SurveyOptions) -> Result<Survey, SurveyError> {
    options.validate()?;
    let metadata = std::fs::metadata(root).map_err(|reason| SurveyError::Root {
        path: root.to_path_buf(),
        reason,
    })?;
    if !metadata.is_dir() {
        return Err(SurveyError::NotADirectory(root.to_path_buf()));
    }
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    let block_bytes = match options.block_bytes {
        Some(bytes) => bytes,
        None => walk::file_system_block_bytes(root).unwrap_or(4096),
    };

    let walk_started = Instant::now();
    let tally = walk::walk(root, options, block_bytes, threads)?;
    let walk_ms = walk_started.elapsed().as_millis() as u64;

    let compress_started = Instant::now();
    let compression = if options.sample_bytes_max == 0 {
        None
    } else {
        Some(compress::estimate(
            tally.sampler.picks(),
            tally.totals.bytes,
            options,
            threads,
        )?)
    };
    let compress_ms = compress_started.elapsed().as_millis() as u64;

    Ok(report::build(
        root,
        options,
        block_bytes,
        tally,
        compression,
        walk_ms,
        compress_ms,
    ))
}

/// Writes the survey's charts into `dir` as SVG and PNG (size histograms by count and by
/// bytes, files per directory, extension shares, the HDD model); returns the files written.
pub fn write_charts(survey: &Survey, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    plot::write_charts(survey, dir)
}
