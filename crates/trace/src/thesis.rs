//! The pipe-separated ECFS trace format of the LoneStar thesis's tools
//! (`start_time|user|host|pid|request|params|file_size|exec_time|info|next_line`).
//!
//! How a line maps to a [`Record`] (also in `docs/trace.md`):
//! - `start_time` is Unix seconds; `time_ms` is milliseconds since the first record's start.
//! - `params` is the (obfuscated) path; the object id is [`hash_name`] of it. For `RENAME` it holds
//!   `from to` separated by a space.
//! - `user` is hashed to a `u32`; sessions are not in the format, so they are derived as the
//!   thesis did (§2.4.3): requests of one `user@host` belong to one session while the gap between
//!   them is at most the session window.
//! - `next_line` (a line number in the thesis's preprocessed traces) is not carried over: the
//!   record's `next_access` is `Unknown` and the cache simulator computes it.
//! - Lines whose `start_time` is not a number (headers, comments) are skipped and counted.

use crate::record::{hash_name, NextAccess, Op, Record};
use crate::TraceError;
use std::collections::HashMap;

/// Default gap that ends a session, in seconds.
pub const SESSION_WINDOW_S_DEFAULT: u64 = 600;

/// Bound on the number of `user@host` pairs tracked for session clustering; past it, the least
/// recently seen half is forgotten (their next request starts a new session).
const SESSION_KEYS_MAX: usize = 1 << 20;

/// Turns thesis-format lines into records, keeping the little state that needs (first time,
/// open sessions).
pub struct ThesisParser {
    first_start_s: Option<u64>,
    session_window_s: u64,
    /// `hash(user@host)` → (session id, last request time in s).
    open_sessions: HashMap<u64, (u64, u64)>,
    sessions_started: u64,
}

impl ThesisParser {
    /// A parser that ends a session after `session_window_s` seconds without a request.
    pub fn new(session_window_s: u64) -> ThesisParser {
        ThesisParser {
            first_start_s: None,
            session_window_s,
            open_sessions: HashMap::new(),
            sessions_started: 0,
        }
    }

    /// Parses a line: `Ok(None)` for a line to skip (no numeric `start_time`).
    pub fn parse_line(
        &mut self,
        line: &str,
        line_number: u64,
    ) -> Result<Option<Record>, TraceError> {
        let fields: Vec<&str> = line.split('|').collect();
        let Some(start_text) = fields.first() else {
            return Ok(None);
        };
        let Ok(start_s) = start_text.trim().parse::<u64>() else {
            return Ok(None);
        };
        let error = |reason: String| TraceError::Parse {
            line: line_number,
            reason,
        };
        if fields.len() < 7 {
            return Err(error(format!(
                "{} pipe-separated fields, expected at least 7 (start_time|user|host|pid|request|params|file_size|...)",
                fields.len()
            )));
        }
        let (user_name, host, request, params, size_text) = (
            fields[1].trim(),
            fields[2].trim(),
            fields[4].trim(),
            fields[5].trim(),
            fields[6].trim(),
        );
        let op = Op::parse(request).ok_or_else(|| {
            error(format!(
                "request {request:?} is not GET, PUT, DEL or RENAME"
            ))
        })?;
        let size_bytes = match size_text.parse::<u64>() {
            Ok(size) => size,
            Err(_) if matches!(op, Op::Del | Op::Rename) => 0,
            Err(_) => {
                return Err(error(format!(
                    "file_size {size_text:?} of a {op} is not a number"
                )))
            }
        };
        let first = *self.first_start_s.get_or_insert(start_s);
        let time_ms = start_s.saturating_sub(first) * 1000;
        let (object, target, path) = if op == Op::Rename {
            let mut names = params.split_whitespace();
            let (Some(from), Some(to)) = (names.next(), names.next()) else {
                return Err(error(format!("RENAME params {params:?} are not 'from to'")));
            };
            (hash_name(from), Some(hash_name(to)), to)
        } else {
            if params.is_empty() {
                return Err(error("empty params (path)".into()));
            }
            (hash_name(params), None, params)
        };
        let session = self.session_of(user_name, host, start_s);
        let path = (!path.contains('\t')).then(|| path.to_string());
        Ok(Some(Record {
            time_ms,
            op,
            object,
            size_bytes,
            user: hash_name(user_name) as u32,
            session,
            target,
            next_access: NextAccess::Unknown,
            path,
        }))
    }

    fn session_of(&mut self, user: &str, host: &str, start_s: u64) -> u64 {
        let key = hash_name(user) ^ hash_name(host).rotate_left(17);
        if let Some((session, last_s)) = self.open_sessions.get_mut(&key) {
            if start_s.saturating_sub(*last_s) <= self.session_window_s {
                *last_s = (*last_s).max(start_s);
                return *session;
            }
        }
        if self.open_sessions.len() >= SESSION_KEYS_MAX {
            let mut times: Vec<u64> = self.open_sessions.values().map(|(_, last)| *last).collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            self.open_sessions.retain(|_, (_, last)| *last > cut);
        }
        self.sessions_started += 1;
        self.open_sessions
            .insert(key, (self.sessions_started, start_s));
        self.sessions_started
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line shaped like the thesis tools' traces (the thesis prints no example; the field order
    /// is the one of its `evaluate_cache_models.py`, paths obfuscated to hashes).
    const GET_LINE: &str = "1325462400|a1b2c3|h9f8e7|4711|GET|/7c4a8d09ca/e10adc3949/5f4dcc3b5a.grib|52428800|12|ok|17";

    #[test]
    fn parses_a_thesis_get_line() {
        let mut parser = ThesisParser::new(SESSION_WINDOW_S_DEFAULT);
        let record = parser.parse_line(GET_LINE, 1).unwrap().unwrap();
        assert_eq!(record.op, Op::Get);
        assert_eq!(record.time_ms, 0);
        assert_eq!(record.size_bytes, 52_428_800);
        assert_eq!(
            record.object,
            hash_name("/7c4a8d09ca/e10adc3949/5f4dcc3b5a.grib")
        );
        assert_eq!(record.user, hash_name("a1b2c3") as u32);
        assert_eq!(record.next_access, NextAccess::Unknown);
        assert_eq!(record.session, 1);
    }

    #[test]
    fn thesis_rename_has_source_and_target_and_sessions_split_on_gaps() {
        let mut parser = ThesisParser::new(600);
        parser.parse_line(GET_LINE, 1).unwrap();
        let rename = parser
            .parse_line("1325462460|a1b2c3|h9f8e7|4712|RENAME|/d/a /d/b|-|1||-1", 2)
            .unwrap()
            .unwrap();
        assert_eq!(rename.op, Op::Rename);
        assert_eq!(rename.time_ms, 60_000);
        assert_eq!(rename.object, hash_name("/d/a"));
        assert_eq!(rename.target, Some(hash_name("/d/b")));
        assert_eq!(rename.session, 1, "60 s later is the same session");
        let later = parser
            .parse_line("1325463100|a1b2c3|h9f8e7|4713|DEL|/d/b|0|1||-1", 3)
            .unwrap()
            .unwrap();
        assert_eq!(
            later.session, 2,
            "640 s after the last request starts a new session"
        );
        let other_host = parser
            .parse_line("1325463101|a1b2c3|other|1|PUT|/d/c|10|1||-1", 4)
            .unwrap()
            .unwrap();
        assert_eq!(other_host.session, 3, "sessions are per user@host");
    }

    #[test]
    fn thesis_header_lines_are_skipped_and_bad_sizes_are_errors() {
        let mut parser = ThesisParser::new(600);
        assert!(parser
            .parse_line(
                "start_time|user|host|pid|request|params|file_size|exec_time|info|next_line",
                1
            )
            .unwrap()
            .is_none());
        let error = parser
            .parse_line("1325462400|u|h|1|GET|/x|big|1||-1", 2)
            .unwrap_err();
        assert!(error.to_string().contains("file_size"), "{error}");
        let error = parser
            .parse_line("1325462400|u|h|1|LIST|/x|1|1||-1", 3)
            .unwrap_err();
        assert!(error.to_string().contains("LIST"), "{error}");
    }
}
