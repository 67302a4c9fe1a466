//! The schedule file: one scan per line, `START DURATION SCAN`, e.g.
//!
//! ```text
//! # experiment r1234, station Ef: start (RFC 3339, UTC or with an offset), duration, scan name
//! 2026-11-25T15:00:00Z  120s  no0001
//! 2026-11-25T15:02:30Z  2m    no0002
//! ```
//!
//! Durations are a number with `ms`, `s` (the default), `m` or `h`. Blank lines and `#` comments are ignored.
//! A schedule is refused as a whole, with the line and what is wrong, when a line cannot be read, a scan
//! starts in the past, scans overlap or come out of order, or a scan name repeats.

use std::collections::HashSet;

use serde::Serialize;

/// One scheduled scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScheduleEntry {
    /// Line of the file (from 1).
    pub line: usize,
    pub start_ms: u64,
    pub duration_ms: u64,
    pub scan: String,
}

/// Names of experiments, stations and scans: 1–64 of `A–Z a–z 0–9 . _ -`, not starting with `.`.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} name {name:?} must be 1 to 64 of A-Z a-z 0-9 . _ - and not start with a dot"
        ))
    }
}

/// A duration: a number with `ms`, `s` (default), `m` or `h`.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} is not a number with ms, s, m or h"))?;
    let factor = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("duration {text:?}: unit must be ms, s, m or h")),
    };
    let ms = n
        .checked_mul(factor)
        .ok_or_else(|| format!("duration {text:?} is too long"))?;
    if ms == 0 {
        return Err(format!("duration {text:?} must be positive"));
    }
    Ok(ms)
}

/// A point in time, RFC 3339 (`2026-11-25T15:00:00Z`), as milliseconds since the epoch.
pub fn parse_time_ms(text: &str) -> Result<u64, String> {
    let t: jiff::Timestamp = text.parse().map_err(|e| {
        format!("start time {text:?} is not an RFC 3339 time such as 2026-11-25T15:00:00Z ({e})")
    })?;
    u64::try_from(t.as_millisecond()).map_err(|_| format!("start time {text:?} is before 1970"))
}

/// Parse and check a schedule against the clock `now_ms`.
pub fn parse(text: &str, now_ms: u64) -> Result<Vec<ScheduleEntry>, String> {
    let mut out: Vec<ScheduleEntry> = Vec::new();
    let mut names = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = content.split_whitespace().collect();
        let err = |m: String| format!("schedule line {line}: {m}");
        let [start, duration, scan] = fields[..] else {
            return Err(err(format!(
                "expected START DURATION SCAN, found {} field(s): {content:?}",
                fields.len()
            )));
        };
        let start_ms = parse_time_ms(start).map_err(err)?;
        let duration_ms = parse_duration_ms(duration).map_err(err)?;
        check_name("scan", scan).map_err(err)?;
        if start_ms < now_ms {
            return Err(err(format!(
                "scan {scan} starts at {start}, which is in the past (now {})",
                crate::meta::rfc3339(now_ms)
            )));
        }
        if !names.insert(scan.to_string()) {
            return Err(err(format!("scan name {scan} appears twice")));
        }
        if let Some(previous) = out.last() {
            if start_ms < previous.start_ms + previous.duration_ms {
                return Err(err(format!(
                    "scan {scan} starts before scan {} (line {}) ends",
                    previous.scan, previous.line
                )));
            }
        }
        out.push(ScheduleEntry {
            line,
            start_ms,
            duration_ms,
            scan: scan.to_string(),
        });
    }
    if out.is_empty() {
        return Err("the schedule has no scans".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000; // 2027-01-15

    #[test]
    fn a_schedule_reads_in_order_with_units_and_comments() {
        let text = "# r1234 Ef\n\n2027-01-15T08:00:00Z 120s no0001  # first\n2027-01-15T08:02:00Z 2m no0002\n2027-01-15T09:05:00+01:00 1500ms no0003\n";
        let s = parse(text, NOW).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[0].line, s[0].duration_ms, s[0].scan.as_str()),
            (3, 120_000, "no0001")
        );
        assert_eq!(s[1].start_ms, s[0].start_ms + 120_000);
        assert_eq!(s[2].start_ms, s[0].start_ms + 300_000); // 09:05 at +01:00 is 08:05 UTC
        assert_eq!(s[2].duration_ms, 1500);
    }

    #[test]
    fn bad_schedules_are_refused_with_the_line_and_the_reason() {
        let cases = [
            (
                "2020-01-01T00:00:00Z 10s old",
                "line 1: scan old starts at 2020-01-01T00:00:00Z, which is in the past",
            ),
            (
                "2027-01-15T08:00:00Z 10s a\n2027-01-15T08:00:05Z 10s b",
                "line 2: scan b starts before scan a (line 1) ends",
            ),
            (
                "2027-01-15T08:00:00Z 10s a\n2027-01-15T08:01:00Z 10s a",
                "line 2: scan name a appears twice",
            ),
            (
                "2027-01-15T08:00:00Z 10s",
                "line 1: expected START DURATION SCAN, found 2 field(s)",
            ),
            (
                "tomorrow 10s a",
                "line 1: start time \"tomorrow\" is not an RFC 3339 time",
            ),
            (
                "2027-01-15T08:00:00Z 10x a",
                "line 1: duration \"10x\": unit must be ms, s, m or h",
            ),
            (
                "2027-01-15T08:00:00Z 0s a",
                "line 1: duration \"0s\" must be positive",
            ),
            (
                "2027-01-15T08:00:00Z 10s a/b",
                "line 1: scan name \"a/b\" must be",
            ),
            ("# nothing\n", "the schedule has no scans"),
        ];
        for (text, expected) in cases {
            let e = parse(text, NOW).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }
}
