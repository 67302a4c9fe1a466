//! Workload traces for permafrost: the one documented trace format (`docs/trace.md`), streaming
//! readers and writers, a parser for the LoneStar thesis's pipe-separated ECFS traces, synthetic
//! generators for the workloads of the sources (`ecfs`, `mars`, `vlbi`, `robotics`), and the
//! statistics of thesis Tables 2.1, 2.3 and 2.4 so a trace can be checked against its profile.
//!
//! Guarantees:
//! - Reading and writing stream: memory does not grow with the number of records. Statistics
//!   keep per-object and per-session counters (not records): a few tens of bytes per object.
//! - Generation is deterministic: the same profile, options and seed give the same records.
//! - Records come out of every generator in non-decreasing `time_ms`.
//! - Bad input is an error naming the line and what is wrong with it, never a panic.
//!
//! ```
//! use permafrost_trace::{generate, GenOptions, Profile, TraceWriter, TraceReader};
//! let records: Vec<_> = generate(Profile::Ecfs, &GenOptions { requests: 1000, seed: 7, duration_ms: None })
//!     .collect();
//! let mut writer = TraceWriter::new(Vec::new())?;
//! for record in &records { writer.write(record)?; }
//! let bytes = writer.finish()?;
//! let reader = TraceReader::from_reader(Box::new(std::io::Cursor::new(bytes)), "memory")?;
//! let back: Vec<_> = reader.collect::<Result<_, _>>()?;
//! assert_eq!(back, records);
//! # Ok::<(), permafrost_trace::TraceError>(())
//! ```

#![forbid(unsafe_code)]

pub mod cli;
mod format;
mod gen;
mod reader;
mod record;
mod stats;
mod thesis;

pub use format::{parse_line, TraceWriter, FIELDS_LINE, HEADER_V1};
pub use gen::{generate, GenOptions, Generator, Profile};
pub use reader::{TraceFormat, TraceReader};
pub use record::{hash_name, NextAccess, Op, Record, SizeClass};
pub use stats::{Percentiles, SessionStats, SizeClassStats, TraceStats, TraceStatsBuilder};
pub use thesis::{ThesisParser, SESSION_WINDOW_S_DEFAULT};

use std::path::PathBuf;

/// What went wrong reading or writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("reading trace {path}: {source}")]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Writing the trace failed.
    #[error("writing trace: {0}")]
    Write(std::io::Error),
    /// The first line is not a known header.
    #[error("{0}")]
    Header(String),
    /// A line is malformed.
    #[error("trace line {line}: {reason}")]
    Parse {
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record cannot be written as given.
    #[error("{0}")]
    Invalid(String),
}

impl TraceError {
    fn write(source: std::io::Error) -> TraceError {
        TraceError::Write(source)
    }
}

/// Opens `path` for writing a trace; a name ending in `.gz` is gzip-compressed.
pub fn create_trace_file(
    path: &std::path::Path,
) -> Result<TraceWriter<Box<dyn std::io::Write + Send>>, TraceError> {
    let file = std::fs::File::create(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let buffered = std::io::BufWriter::with_capacity(1 << 20, file);
    let out: Box<dyn std::io::Write + Send> = if path.extension().is_some_and(|ext| ext == "gz") {
        Box::new(flate2::write::GzEncoder::new(
            buffered,
            flate2::Compression::fast(),
        ))
    } else {
        Box::new(buffered)
    };
    TraceWriter::new(out)
}
