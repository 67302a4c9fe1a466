//! History: a sample of throughput, operations, spin-ups, watts and cache every
//! [`crate::AdminOptions::history_interval_ms`], kept in the catalog (the newest
//! [`crate::AdminOptions::history_keep`]), served by `GET /_permafrost/api/v1/history` with the rates between
//! samples. Taken from memory and the catalog: no disk is touched.

use permafrost_catalog::HistorySample;
use serde::Serialize;

use crate::Admin;

/// Take a sample now.
pub fn sample(admin: &Admin) -> Result<HistorySample, crate::ApiError> {
    let store = admin.store();
    let engine = store.engine();
    let status = engine.status()?;
    let profile = engine.power().profile().clone();
    let (mut read_bytes, mut written_bytes) = (0, 0);
    for io in engine.io_stats() {
        read_bytes += io.physical_read_bytes;
        written_bytes += io.physical_written_bytes;
    }
    let report = store.status()?;
    let dirty = report
        .catalog
        .contents_by_state
        .iter()
        .filter(|(s, _, _)| s.as_str() != "persisted")
        .map(|(_, _, bytes)| *bytes)
        .sum();
    Ok(HistorySample {
        at_ms: crate::unix_ms(),
        read_bytes,
        written_bytes,
        requests: admin.metrics().requests_total(),
        spin_ups: status.disks.iter().map(|d| d.power.spin_ups).sum(),
        watts: status
            .disks
            .iter()
            .map(|d| profile.watts(d.power_state))
            .sum(),
        joules: status.disks.iter().map(|d| d.power.joules).sum(),
        disks_spinning: status.spinning_now as u32,
        cache_used_bytes: report.cache_used_bytes,
        cache_dirty_bytes: dirty,
    })
}

/// Take a sample and keep it.
pub(crate) fn record(admin: &Admin) -> Result<(), crate::ApiError> {
    let s = sample(admin)?;
    admin
        .store()
        .catalog()
        .history_append(&s, admin.options().history_keep)?;
    Ok(())
}

/// One sample as the API serves it, with the rates since the previous one.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub at_unix_ms: u64,
    pub watts: f64,
    pub joules: f64,
    pub spin_ups: u64,
    pub disks_spinning: u32,
    pub cache_used_bytes: u64,
    pub cache_dirty_bytes: u64,
    /// Since the previous sample (`null` for the first, or after a restart reset the counters).
    pub read_bytes_per_second: Option<f64>,
    pub written_bytes_per_second: Option<f64>,
    pub requests_per_second: Option<f64>,
    pub spin_ups_since_previous: Option<u64>,
}

/// The points of `samples` (oldest first).
pub fn points(samples: &[HistorySample]) -> Vec<Point> {
    let mut previous: Option<&HistorySample> = None;
    samples
        .iter()
        .map(|s| {
            let rate = |now: u64, before: u64, p: &HistorySample| {
                let seconds = (s.at_ms.saturating_sub(p.at_ms)) as f64 / 1000.0;
                (now >= before && seconds > 0.0).then(|| (now - before) as f64 / seconds)
            };
            let point = Point {
                at_unix_ms: s.at_ms,
                watts: s.watts,
                joules: s.joules,
                spin_ups: s.spin_ups,
                disks_spinning: s.disks_spinning,
                cache_used_bytes: s.cache_used_bytes,
                cache_dirty_bytes: s.cache_dirty_bytes,
                read_bytes_per_second: previous.and_then(|p| rate(s.read_bytes, p.read_bytes, p)),
                written_bytes_per_second: previous
                    .and_then(|p| rate(s.written_bytes, p.written_bytes, p)),
                requests_per_second: previous.and_then(|p| rate(s.requests, p.requests, p)),
                spin_ups_since_previous: previous.and_then(|p| s.spin_ups.checked_sub(p.spin_ups)),
            };
            previous = Some(s);
            point
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_ms: u64, read: u64, requests: u64, spin_ups: u64) -> HistorySample {
        HistorySample {
            at_ms,
            read_bytes: read,
            written_bytes: 0,
            requests,
            spin_ups,
            watts: 1.0,
            joules: 2.0,
            disks_spinning: 0,
            cache_used_bytes: 0,
            cache_dirty_bytes: 0,
        }
    }

    #[test]
    fn rates_are_differences_between_samples_and_a_restart_shows_none() {
        let p = points(&[s(0, 0, 0, 5), s(2000, 4000, 10, 7), s(4000, 100, 2, 7)]);
        assert_eq!(p[0].read_bytes_per_second, None);
        assert_eq!(p[1].read_bytes_per_second, Some(2000.0));
        assert_eq!(p[1].requests_per_second, Some(5.0));
        assert_eq!(p[1].spin_ups_since_previous, Some(2));
        assert_eq!(p[2].read_bytes_per_second, None, "the counters restarted");
        assert_eq!(p[2].spin_ups_since_previous, Some(0));
    }
}
