//! Streaming trace reader: detects the format (permafrost v1 or the thesis's pipe format) and
//! gzip compression, and yields records one at a time.

use crate::format::{parse_line, HEADER_V1};
use crate::record::Record;
use crate::thesis::{ThesisParser, SESSION_WINDOW_S_DEFAULT};
use crate::TraceError;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Which format a trace is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// The permafrost format, version 1 (`docs/trace.md`).
    PermafrostV1,
    /// The thesis's pipe-separated format.
    Thesis,
}

/// Reads a trace record by record (an `Iterator` of `Result<Record, TraceError>`). Memory use
/// does not grow with the trace, except the thesis format's session table (bounded).
pub struct TraceReader {
    input: Box<dyn BufRead + Send>,
    format: TraceFormat,
    thesis: ThesisParser,
    line: String,
    line_number: u64,
    skipped_lines: u64,
    pending: Option<String>,
    bytes_read: u64,
    source: String,
}

const READ_BUFFER_BYTES: usize = 1 << 20;

/// Counts the (compressed) bytes read from the file, for progress bars.
struct CountingRead<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

impl TraceReader {
    /// Opens a trace file (`.gz` or not, detected from its first bytes).
    pub fn open(path: &Path) -> Result<TraceReader, TraceError> {
        Self::open_with_progress(path, None)
    }

    /// Like [`TraceReader::open`], adding the number of file bytes read so far to `progress`.
    pub fn open_with_progress(
        path: &Path,
        progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    ) -> Result<TraceReader, TraceError> {
        let io_error = |source| TraceError::Io {
            path: PathBuf::from(path),
            source,
        };
        let mut file =
            BufReader::with_capacity(READ_BUFFER_BYTES, File::open(path).map_err(io_error)?);
        let gzip = file
            .fill_buf()
            .map_err(io_error)?
            .starts_with(&[0x1f, 0x8b]);
        let count = progress.unwrap_or_default();
        let raw = CountingRead { inner: file, count };
        let input: Box<dyn BufRead + Send> = if gzip {
            Box::new(BufReader::with_capacity(
                READ_BUFFER_BYTES,
                flate2::read::MultiGzDecoder::new(raw),
            ))
        } else {
            Box::new(BufReader::with_capacity(READ_BUFFER_BYTES, raw))
        };
        Self::from_reader(input, &path.display().to_string())
    }

    /// Reads a trace from any buffered input; `source` names it in error messages.
    pub fn from_reader(
        mut input: Box<dyn BufRead + Send>,
        source: &str,
    ) -> Result<TraceReader, TraceError> {
        let mut first = String::new();
        input
            .read_line(&mut first)
            .map_err(|source_error| TraceError::Io {
                path: PathBuf::from(source),
                source: source_error,
            })?;
        let first_trimmed = first.trim_end();
        let (format, pending) = if first_trimmed.starts_with("#permafrost-trace") {
            if first_trimmed != HEADER_V1 {
                return Err(TraceError::Header(format!(
                    "{source}: header {first_trimmed:?} is not {HEADER_V1:?} (unsupported version?)"
                )));
            }
            (TraceFormat::PermafrostV1, None)
        } else if first_trimmed.contains('|') || first_trimmed.is_empty() {
            (TraceFormat::Thesis, Some(first_trimmed.to_string()))
        } else {
            return Err(TraceError::Header(format!(
                "{source}: first line {:?} is neither a permafrost trace header ({HEADER_V1:?}) nor a pipe-separated thesis line",
                first_trimmed.chars().take(80).collect::<String>()
            )));
        };
        Ok(TraceReader {
            input,
            format,
            thesis: ThesisParser::new(SESSION_WINDOW_S_DEFAULT),
            line: String::with_capacity(256),
            line_number: 1,
            skipped_lines: 0,
            pending,
            bytes_read: 0,
            source: source.to_string(),
        })
    }

    /// The detected format.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// Thesis-format lines skipped because they had no numeric start time (headers, comments).
    pub fn skipped_lines(&self) -> u64 {
        self.skipped_lines
    }

    /// Uncompressed bytes consumed so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        loop {
            let line_number;
            if let Some(pending) = self.pending.take() {
                self.line = pending;
                line_number = 1;
            } else {
                self.line.clear();
                let n = self
                    .input
                    .read_line(&mut self.line)
                    .map_err(|source| TraceError::Io {
                        path: PathBuf::from(&self.source),
                        source,
                    })?;
                if n == 0 {
                    return Ok(None);
                }
                self.bytes_read += n as u64;
                self.line_number += 1;
                line_number = self.line_number;
            }
            let line = self.line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                continue;
            }
            match self.format {
                TraceFormat::PermafrostV1 => {
                    if line.starts_with('#') {
                        continue;
                    }
                    return parse_line(line, line_number).map(Some);
                }
                TraceFormat::Thesis => match self.thesis.parse_line(line, line_number)? {
                    Some(record) => return Ok(Some(record)),
                    None => self.skipped_lines += 1,
                },
            }
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}
