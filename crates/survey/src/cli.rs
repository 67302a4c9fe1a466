//! `permafrost survey DIR`: clap arguments and the command's entry point.
//!
//! The `permafrost` binary embeds [`SurveyArgs`] as its `survey` subcommand and calls [`run`].

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::hdd::{DEFAULT_RPM, DEFAULT_SECTOR_BYTES, DEFAULT_SEEK_MS, DEFAULT_SEQUENTIAL_MIB_S};
use crate::units::parse_bytes;
use crate::{HddModel, SurveyOptions};

/// Survey a directory tree: size histograms, small files, metadata overhead, what packing and
/// compression would save, and the modelled HDD read throughput.
#[derive(Clone, Debug, clap::Args)]
pub struct SurveyArgs {
    /// Directory to survey (read only; symlinks are not followed).
    pub dir: PathBuf,
    /// Print the survey as JSON on stdout instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Write charts (size histograms by count and by bytes, extension bars) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Files below this size are candidates for packing.
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes)]
    pub pack_threshold: u64,
    /// Size of the extents small files would be packed into.
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    pub pack_extent: u64,
    /// At most this many bytes are read and compressed for the compression estimate (0 skips it).
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    pub sample: u64,
    /// Unit of compression in the sample (like a ZFS record).
    #[arg(long, default_value = "128KiB", value_parser = parse_bytes)]
    pub sample_chunk: u64,
    /// zstd level for the compression estimate.
    #[arg(long, default_value_t = 3)]
    pub zstd_level: i32,
    /// Seed of the compression sample.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Estimated size of one inode on the surveyed file system (ext4 default: 256).
    #[arg(long, default_value_t = 256)]
    pub inode_bytes: u64,
    /// Block size for the rounding model [default: the file system's, from statvfs].
    #[arg(long, value_parser = parse_bytes)]
    pub block_size: Option<u64>,
    /// HDD model: average seek time in ms, without rotational latency.
    #[arg(long, default_value_t = DEFAULT_SEEK_MS)]
    pub seek_ms: f64,
    /// HDD model: spindle speed (half a rotation is added to each seek).
    #[arg(long, default_value_t = DEFAULT_RPM)]
    pub rpm: f64,
    /// HDD model: sustained transfer rate averaged over the surface, MiB/s.
    #[arg(long, default_value_t = DEFAULT_SEQUENTIAL_MIB_S)]
    pub sequential_mib_s: f64,
    /// HDD model: sector size in bytes.
    #[arg(long, default_value_t = DEFAULT_SECTOR_BYTES)]
    pub sector_bytes: u64,
    /// Stay on the root's file system.
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    /// Worker threads (0 = one per CPU).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// No progress bars.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl SurveyArgs {
    /// The library options these arguments describe.
    pub fn options(&self) -> SurveyOptions {
        SurveyOptions {
            pack_threshold_bytes: self.pack_threshold,
            pack_extent_bytes: self.pack_extent,
            sample_bytes_max: self.sample,
            sample_chunk_bytes: self.sample_chunk,
            zstd_level: self.zstd_level,
            seed: self.seed,
            inode_bytes: self.inode_bytes,
            block_bytes: self.block_size,
            hdd: HddModel {
                seek_ms: self.seek_ms,
                rpm: self.rpm,
                sequential_mib_s: self.sequential_mib_s,
                sector_bytes: self.sector_bytes,
            },
            one_file_system: self.one_file_system,
            threads: self.threads,
            show_progress: !self.quiet,
        }
    }
}

/// Runs `permafrost survey`: the text report (or JSON with `--json`) on stdout, progress on
/// stderr, charts into `--plot DIR`.
pub fn run(args: &SurveyArgs) -> anyhow::Result<()> {
    let survey = crate::survey(&args.dir, &args.options())?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &survey).context("cannot write JSON")?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", crate::render_text(&survey))?;
    }
    if let Some(dir) = &args.plot {
        let written = crate::write_charts(&survey, dir)?;
        for path in written {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
