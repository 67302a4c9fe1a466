//! The permafrost trace format, version 1 (see `docs/trace.md`): a text file of tab-separated
//! records after a header line, optionally gzip-compressed.

use crate::record::{NextAccess, Op, Record};
use crate::TraceError;
use std::io::Write;

/// The first line of every version-1 trace.
pub const HEADER_V1: &str = "#permafrost-trace v1";
/// The second line: the field names, for people reading the file.
pub const FIELDS_LINE: &str =
    "#fields\ttime_ms\top\tobject\tsize_bytes\tuser\tsession\tnext_ms\ttarget\tpath";
/// Number of tab-separated fields in a record line.
pub const FIELD_COUNT: usize = 9;

/// Writes records in the version-1 format. Call [`TraceWriter::finish`] at the end to flush
/// (and to finish a gzip stream); dropping the writer without it may lose the tail.
pub struct TraceWriter<W: Write> {
    out: W,
    line: String,
    records_written: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace on `out` by writing the header.
    pub fn new(mut out: W) -> Result<TraceWriter<W>, TraceError> {
        writeln!(out, "{HEADER_V1}\n{FIELDS_LINE}").map_err(TraceError::write)?;
        Ok(TraceWriter {
            out,
            line: String::with_capacity(128),
            records_written: 0,
        })
    }

    /// Appends one record. Refuses a path containing a tab or line break (it would break the
    /// line structure) and a `RENAME` without a target.
    pub fn write(&mut self, record: &Record) -> Result<(), TraceError> {
        use std::fmt::Write as _;
        if let Some(path) = &record.path {
            if path.contains(['\t', '\n', '\r']) || path.is_empty() {
                return Err(TraceError::Invalid(format!(
                    "record {}: path {path:?} is empty or contains a tab or line break",
                    self.records_written + 1
                )));
            }
        }
        if (record.op == Op::Rename) != record.target.is_some() {
            return Err(TraceError::Invalid(format!(
                "record {}: a RENAME needs a target and other operations must not have one",
                self.records_written + 1
            )));
        }
        self.line.clear();
        let _ = write!(
            self.line,
            "{}\t{}\t{}\t{}\t{}\t{}\t",
            record.time_ms,
            record.op,
            record.object,
            record.size_bytes,
            record.user,
            record.session
        );
        let _ = match record.next_access {
            NextAccess::Unknown => write!(self.line, "-\t"),
            NextAccess::Never => write!(self.line, "never\t"),
            NextAccess::AtMs(ms) => write!(self.line, "{ms}\t"),
        };
        let _ = match record.target {
            Some(target) => write!(self.line, "{target}\t"),
            None => write!(self.line, "-\t"),
        };
        self.line.push_str(record.path.as_deref().unwrap_or("-"));
        self.line.push('\n');
        self.out
            .write_all(self.line.as_bytes())
            .map_err(TraceError::write)?;
        self.records_written += 1;
        Ok(())
    }

    /// How many records were written so far.
    pub fn records_written(&self) -> u64 {
        self.records_written
    }

    /// Flushes and returns the inner writer.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.out.flush().map_err(TraceError::write)?;
        Ok(self.out)
    }
}

fn parse_u64(field: &str, name: &str, line_number: u64) -> Result<u64, TraceError> {
    field.parse::<u64>().map_err(|_| TraceError::Parse {
        line: line_number,
        reason: format!("{name} {field:?} is not a non-negative integer"),
    })
}

/// Parses one record line of the version-1 format (without its line break).
pub fn parse_line(line: &str, line_number: u64) -> Result<Record, TraceError> {
    let mut fields = line.splitn(FIELD_COUNT, '\t');
    let mut next = |name: &str| {
        fields.next().ok_or_else(|| TraceError::Parse {
            line: line_number,
            reason: format!(
                "missing field {name} (a record has {FIELD_COUNT} tab-separated fields)"
            ),
        })
    };
    let time_ms = parse_u64(next("time_ms")?, "time_ms", line_number)?;
    let op_text = next("op")?;
    let op = Op::parse(op_text).ok_or_else(|| TraceError::Parse {
        line: line_number,
        reason: format!("op {op_text:?} is not GET, PUT, DEL or RENAME"),
    })?;
    let object = parse_u64(next("object")?, "object", line_number)?;
    let size_bytes = parse_u64(next("size_bytes")?, "size_bytes", line_number)?;
    let user_text = next("user")?;
    let user = user_text.parse::<u32>().map_err(|_| TraceError::Parse {
        line: line_number,
        reason: format!("user {user_text:?} is not a 32-bit unsigned integer"),
    })?;
    let session = parse_u64(next("session")?, "session", line_number)?;
    let next_access = match next("next_ms")? {
        "-" => NextAccess::Unknown,
        "never" => NextAccess::Never,
        text => NextAccess::AtMs(parse_u64(text, "next_ms", line_number)?),
    };
    let target = match next("target")? {
        "-" => None,
        text => Some(parse_u64(text, "target", line_number)?),
    };
    let path = match next("path")? {
        "-" => None,
        text => Some(text.to_string()),
    };
    if (op == Op::Rename) != target.is_some() {
        return Err(TraceError::Parse {
            line: line_number,
            reason: "a RENAME needs a target and other operations must have '-'".into(),
        });
    }
    Ok(Record {
        time_ms,
        op,
        object,
        size_bytes,
        user,
        session,
        target,
        next_access,
        path,
    })
}
