//! Statistics of a trace in the shape of thesis Tables 2.1 (size classes), 2.3 (operation mix),
//! 2.4 (sessions) and Fig. 2.5 (skew), computed in one streaming pass.
//!
//! Memory: one entry per live object (size, GET count), one per session, one per distinct
//! (session, object) pair read — never the records themselves. Objects are followed through
//! `RENAME`s: a renamed file is the same object.

use crate::record::{Op, Record, SizeClass};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// P05, P50, P95, P99, mean and count of a sample, as the thesis reports them.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// 5th percentile.
    pub p05: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
    /// Number of values.
    pub count: u64,
}

impl Percentiles {
    /// Percentiles of `values` (sorted in place; nearest-rank).
    pub fn of(values: &mut [f64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_unstable_by(|a, b| a.total_cmp(b));
        let rank = |p: f64| {
            values[(((p * values.len() as f64).ceil() as usize).max(1) - 1).min(values.len() - 1)]
        };
        Percentiles {
            p05: rank(0.05),
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            mean: values.iter().sum::<f64>() / values.len() as f64,
            count: values.len() as u64,
        }
    }
}

/// Per size class (Table 2.1 and the per-class request counts).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SizeClassStats {
    /// The class name.
    pub class: String,
    /// Distinct objects whose (last known) size falls in the class.
    pub objects: u64,
    /// Their summed size.
    pub bytes: u64,
    /// `objects` / all objects.
    pub object_share: f64,
    /// `bytes` / `objects`.
    pub mean_size_bytes: f64,
    /// GET requests of objects in the class, and their bytes.
    pub gets: u64,
    /// Bytes of those GETs.
    pub get_bytes: u64,
    /// PUT requests in the class.
    pub puts: u64,
    /// Bytes of those PUTs.
    pub put_bytes: u64,
}

/// Session statistics (Table 2.4).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SessionStats {
    /// Number of sessions.
    pub sessions: u64,
    /// Distinct users.
    pub users: u64,
    /// Actions per session.
    pub actions: Percentiles,
    /// GETs per session, over sessions with at least one GET.
    pub gets: Percentiles,
    /// GETs of an object already read in the same session, over sessions with such re-gets.
    pub regets: Percentiles,
    /// PUTs per session, over sessions with at least one PUT.
    pub puts: Percentiles,
    /// Time from the first to the last request of a session, in seconds.
    pub lifetime_s: Percentiles,
    /// Time between the end of a user's session and the start of the user's next one, in seconds
    /// (overlapping sessions are left out).
    pub gap_s: Percentiles,
    /// Fraction of sessions with at least one GET.
    pub with_get_fraction: f64,
    /// Fraction of sessions with at least one PUT.
    pub with_put_fraction: f64,
    /// Fraction of all GETs that re-read an object already read in the same session.
    pub reget_fraction_of_gets: f64,
}

/// Everything `permafrost trace stats` reports.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TraceStats {
    /// Records read.
    pub records: u64,
    /// Time of the first and last record, ms since the trace start.
    pub first_ms: u64,
    /// Time of the last record.
    pub last_ms: u64,
    /// Requests per operation, in `Op::ALL` order (GET, PUT, DEL, RENAME).
    pub op_counts: [u64; 4],
    /// Share of each operation among all requests.
    pub op_shares: [f64; 4],
    /// Bytes moved per operation (GET and PUT; 0 for the others).
    pub op_bytes: [u64; 4],
    /// Distinct objects seen (a renamed object counts once).
    pub objects: u64,
    /// Objects with at least one PUT.
    pub objects_with_put: u64,
    /// Objects with at least one GET.
    pub objects_with_get: u64,
    /// Fraction of objects never read.
    pub never_read_fraction: f64,
    /// Smallest fraction of all objects that receives half of all GETs (Fig. 2.5).
    pub half_of_gets_object_fraction: f64,
    /// The same, as a fraction of the objects that were read at all.
    pub half_of_gets_read_object_fraction: f64,
    /// Per size class, smallest first.
    pub size_classes: Vec<SizeClassStats>,
    /// Sessions.
    pub sessions: SessionStats,
}

#[derive(Clone, Copy, Default)]
struct ObjectState {
    size_bytes: u64,
    gets: u32,
    put: bool,
}

#[derive(Clone, Copy)]
struct SessionState {
    user: u32,
    first_ms: u64,
    last_ms: u64,
    actions: u32,
    gets: u32,
    regets: u32,
    puts: u32,
}

/// Accumulates [`TraceStats`] one record at a time.
#[derive(Default)]
pub struct TraceStatsBuilder {
    stats: TraceStats,
    live: HashMap<u64, ObjectState>,
    /// GET counts of retired objects that were read (for the skew).
    retired_get_counts: Vec<u32>,
    retired_objects: u64,
    retired_with_put: u64,
    class_objects: [u64; 6],
    class_bytes: [u64; 6],
    class_gets: [(u64, u64); 6],
    class_puts: [(u64, u64); 6],
    sessions: HashMap<u64, SessionState>,
    session_reads: HashSet<(u64, u64)>,
    any: bool,
}

impl TraceStatsBuilder {
    /// An empty accumulator.
    pub fn new() -> TraceStatsBuilder {
        TraceStatsBuilder::default()
    }

    fn retire(&mut self, state: ObjectState) {
        self.retired_objects += 1;
        self.retired_with_put += u64::from(state.put);
        if state.gets > 0 {
            self.retired_get_counts.push(state.gets);
        }
        let class = SizeClass::of(state.size_bytes).index();
        self.class_objects[class] += 1;
        self.class_bytes[class] += state.size_bytes;
    }

    /// Adds one record.
    pub fn add(&mut self, record: &Record) {
        let stats = &mut self.stats;
        if !self.any {
            stats.first_ms = record.time_ms;
            self.any = true;
        }
        stats.records += 1;
        stats.last_ms = stats.last_ms.max(record.time_ms);
        stats.op_counts[record.op.index()] += 1;
        let class = SizeClass::of(record.size_bytes).index();
        match record.op {
            Op::Get => {
                stats.op_bytes[0] += record.size_bytes;
                self.class_gets[class].0 += 1;
                self.class_gets[class].1 += record.size_bytes;
                let state = self.live.entry(record.object).or_default();
                state.gets = state.gets.saturating_add(1);
                state.size_bytes = record.size_bytes;
            }
            Op::Put => {
                stats.op_bytes[1] += record.size_bytes;
                self.class_puts[class].0 += 1;
                self.class_puts[class].1 += record.size_bytes;
                let state = self.live.entry(record.object).or_default();
                state.put = true;
                state.size_bytes = record.size_bytes;
            }
            Op::Del => {
                let state = self.live.remove(&record.object).unwrap_or(ObjectState {
                    size_bytes: record.size_bytes,
                    ..ObjectState::default()
                });
                self.retire(state);
            }
            Op::Rename => {
                let moved = self.live.remove(&record.object).unwrap_or(ObjectState {
                    size_bytes: record.size_bytes,
                    ..ObjectState::default()
                });
                if let Some(target) = record.target {
                    if let Some(replaced) = self.live.insert(target, moved) {
                        self.retire(replaced);
                    }
                }
            }
        }
        let session = self.sessions.entry(record.session).or_insert(SessionState {
            user: record.user,
            first_ms: record.time_ms,
            last_ms: record.time_ms,
            actions: 0,
            gets: 0,
            regets: 0,
            puts: 0,
        });
        session.first_ms = session.first_ms.min(record.time_ms);
        session.last_ms = session.last_ms.max(record.time_ms);
        session.actions += 1;
        match record.op {
            Op::Get => {
                session.gets += 1;
                if !self.session_reads.insert((record.session, record.object)) {
                    session.regets += 1;
                }
            }
            Op::Put => session.puts += 1,
            _ => {}
        }
    }

    /// Finishes the statistics.
    pub fn finish(mut self) -> TraceStats {
        let live: Vec<ObjectState> = self.live.drain().map(|(_, state)| state).collect();
        for state in live {
            self.retire(state);
        }
        let mut stats = self.stats;
        let total = stats.records.max(1) as f64;
        for (share, count) in stats.op_shares.iter_mut().zip(stats.op_counts) {
            *share = count as f64 / total;
        }
        stats.objects = self.retired_objects;
        stats.objects_with_put = self.retired_with_put;
        stats.objects_with_get = self.retired_get_counts.len() as u64;
        let objects = stats.objects.max(1) as f64;
        stats.never_read_fraction = (stats.objects - stats.objects_with_get) as f64 / objects;
        let mut counts = self.retired_get_counts;
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let gets_total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
        let mut covered = 0u64;
        let mut needed = 0usize;
        for count in &counts {
            if 2 * covered >= gets_total {
                break;
            }
            covered += u64::from(*count);
            needed += 1;
        }
        stats.half_of_gets_object_fraction = needed as f64 / objects;
        stats.half_of_gets_read_object_fraction = needed as f64 / counts.len().max(1) as f64;
        stats.size_classes = SizeClass::ALL
            .iter()
            .map(|class| {
                let i = class.index();
                SizeClassStats {
                    class: class.name().to_string(),
                    objects: self.class_objects[i],
                    bytes: self.class_bytes[i],
                    object_share: self.class_objects[i] as f64 / objects,
                    mean_size_bytes: self.class_bytes[i] as f64
                        / self.class_objects[i].max(1) as f64,
                    gets: self.class_gets[i].0,
                    get_bytes: self.class_gets[i].1,
                    puts: self.class_puts[i].0,
                    put_bytes: self.class_puts[i].1,
                }
            })
            .collect();
        stats.sessions = session_stats(&self.sessions, stats.op_counts[0]);
        stats
    }
}

fn session_stats(sessions: &HashMap<u64, SessionState>, gets_total: u64) -> SessionStats {
    let all: Vec<&SessionState> = sessions.values().collect();
    let collect = |f: &dyn Fn(&SessionState) -> Option<f64>| -> Percentiles {
        let mut values: Vec<f64> = all.iter().filter_map(|s| f(s)).collect();
        Percentiles::of(&mut values)
    };
    let mut by_user: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    for session in &all {
        by_user
            .entry(session.user)
            .or_default()
            .push((session.first_ms, session.last_ms));
    }
    let mut gaps = Vec::new();
    for spans in by_user.values_mut() {
        spans.sort_unstable();
        for pair in spans.windows(2) {
            if pair[1].0 >= pair[0].1 {
                gaps.push((pair[1].0 - pair[0].1) as f64 / 1000.0);
            }
        }
    }
    let count = all.len().max(1) as f64;
    let regets_total: u64 = all.iter().map(|s| u64::from(s.regets)).sum();
    SessionStats {
        sessions: all.len() as u64,
        users: by_user.len() as u64,
        actions: collect(&|s| Some(f64::from(s.actions))),
        gets: collect(&|s| (s.gets > 0).then_some(f64::from(s.gets))),
        regets: collect(&|s| (s.regets > 0).then_some(f64::from(s.regets))),
        puts: collect(&|s| (s.puts > 0).then_some(f64::from(s.puts))),
        lifetime_s: collect(&|s| Some((s.last_ms - s.first_ms) as f64 / 1000.0)),
        gap_s: Percentiles::of(&mut gaps),
        with_get_fraction: all.iter().filter(|s| s.gets > 0).count() as f64 / count,
        with_put_fraction: all.iter().filter(|s| s.puts > 0).count() as f64 / count,
        reget_fraction_of_gets: regets_total as f64 / gets_total.max(1) as f64,
    }
}

fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

impl TraceStats {
    /// The statistics as text tables shaped like the thesis's.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let days = (self.last_ms - self.first_ms) as f64 / 86_400_000.0;
        let _ = writeln!(out, "{} records over {days:.2} days\n", self.records);
        let _ = writeln!(out, "Operations (Table 2.3)");
        let _ = writeln!(
            out,
            "{:<8} {:>12} {:>8} {:>14}",
            "op", "requests", "share", "bytes"
        );
        for op in Op::ALL {
            let i = op.index();
            let _ = writeln!(
                out,
                "{:<8} {:>12} {:>7.2}% {:>14}",
                op.as_str(),
                self.op_counts[i],
                100.0 * self.op_shares[i],
                human_bytes(self.op_bytes[i] as f64)
            );
        }
        let _ = writeln!(
            out,
            "objects {}  with PUT {}  with GET {}  never read {:.1}%  half of GETs go to {:.2}% of objects ({:.2}% of read objects)\n",
            self.objects,
            self.objects_with_put,
            self.objects_with_get,
            100.0 * self.never_read_fraction,
            100.0 * self.half_of_gets_object_fraction,
            100.0 * self.half_of_gets_read_object_fraction
        );
        let _ = writeln!(out, "Size classes (Table 2.1)");
        let _ = writeln!(
            out,
            "{:<9} {:>11} {:>7} {:>12} {:>12} {:>10} {:>12} {:>10} {:>12}",
            "class",
            "objects",
            "share",
            "capacity",
            "mean size",
            "GETs",
            "GET bytes",
            "PUTs",
            "PUT bytes"
        );
        for class in &self.size_classes {
            let _ = writeln!(
                out,
                "{:<9} {:>11} {:>6.2}% {:>12} {:>12} {:>10} {:>12} {:>10} {:>12}",
                class.class,
                class.objects,
                100.0 * class.object_share,
                human_bytes(class.bytes as f64),
                human_bytes(class.mean_size_bytes),
                class.gets,
                human_bytes(class.get_bytes as f64),
                class.puts,
                human_bytes(class.put_bytes as f64)
            );
        }
        let s = &self.sessions;
        let _ = writeln!(
            out,
            "\nSessions (Table 2.4): {} sessions, {} users, {:.1}% with GETs, {:.1}% with PUTs, {:.1}% of GETs are in-session re-gets",
            s.sessions,
            s.users,
            100.0 * s.with_get_fraction,
            100.0 * s.with_put_fraction,
            100.0 * s.reget_fraction_of_gets
        );
        let _ = writeln!(
            out,
            "{:<28} {:>10} {:>10} {:>12} {:>10} {:>10} {:>10}",
            "key", "P05", "P50", "mean", "P95", "P99", "count"
        );
        for (name, p) in [
            ("Actions per session", &s.actions),
            ("GET requests per session", &s.gets),
            ("ReGET requests per session", &s.regets),
            ("PUT requests per session", &s.puts),
            ("Session lifetime in s", &s.lifetime_s),
            ("Gap between sessions in s", &s.gap_s),
        ] {
            let _ = writeln!(
                out,
                "{name:<28} {:>10.1} {:>10.1} {:>12.2} {:>10.1} {:>10.1} {:>10}",
                p.p05, p.p50, p.mean, p.p95, p.p99, p.count
            );
        }
        out
    }
}
