//! The metadata stored with each scan (S3 user metadata, `x-amz-meta-*`; names below are without the prefix),
//! written at every durable point and when the scan ends, so that a crash keeps the accounting of exactly
//! the frames the scan holds. Counts are decimal, times RFC 3339 UTC. See docs/record.md for each name.

use permafrost_store::{PutOptions, Store};

use crate::loss::Numbering;
use crate::scan::{ScanState, Shared, WriterView};

/// Content type of a scan.
pub const CONTENT_TYPE: &str = "application/x-vdif";

pub const STATE: &str = "record-state";
pub const EXPERIMENT: &str = "vdif-experiment";
pub const STATION: &str = "vdif-station";
pub const SCAN: &str = "vdif-scan";
pub const STARTED: &str = "record-started";
pub const ENDED: &str = "record-ended";
pub const EXPIRES: &str = "record-expires";
pub const ERROR: &str = "record-error";
pub const FRAME_BYTES: &str = "vdif-frame-bytes";
pub const NUMBERING: &str = "vdif-numbering";
pub const FRAMES_PER_SECOND: &str = "vdif-frames-per-second";
pub const RECEIVED: &str = "vdif-frames-received";
pub const EXPECTED: &str = "vdif-frames-expected";
pub const MISSING: &str = "vdif-frames-missing";
pub const OUT_OF_ORDER: &str = "vdif-frames-out-of-order";
pub const DUPLICATE: &str = "vdif-frames-duplicate";
pub const INVALID: &str = "vdif-frames-invalid";
pub const THREADS: &str = "vdif-threads";
pub const FIRST: &str = "vdif-first";
pub const LAST: &str = "vdif-last";
pub const GAPS: &str = "vdif-gaps";
pub const GAP_LIST: &str = "vdif-gap-list";
pub const GAP_LIST_OBJECT: &str = "vdif-gap-list-object";
pub const REJECTED: &str = "record-datagrams-rejected";
pub const RING_DROPPED: &str = "record-frames-dropped-writer-behind";
pub const KERNEL_DROPS: &str = "record-kernel-drops";
pub const SNMP_ERRORS: &str = "record-udp-rcvbuf-errors-system";
pub const RCVBUF: &str = "record-rcvbuf-bytes";

/// Set `name` to `value` (replacing an earlier value).
pub fn set(metadata: &mut Vec<(String, String)>, name: &str, value: &str) {
    match metadata.iter_mut().find(|(k, _)| k == name) {
        Some((_, v)) => *v = value.to_string(),
        None => metadata.push((name.to_string(), value.to_string())),
    }
}

/// The value of `name`.
pub fn get<'a>(metadata: &'a [(String, String)], name: &str) -> Option<&'a str> {
    metadata
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Milliseconds since the epoch as RFC 3339 UTC.
pub fn rfc3339(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.round(jiff::Unit::Millisecond).unwrap_or(t).to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// The metadata of a scan in `state` with the writer's view `view`.
pub(crate) fn metadata(
    shared: &Shared,
    view: &WriterView,
    state: ScanState,
) -> Vec<(String, String)> {
    let spec = &shared.spec;
    let status = shared.status();
    let mut m: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| m.push((k.to_string(), v));
    put(STATE, state.as_str().into());
    put(EXPERIMENT, spec.experiment.clone());
    put(STATION, spec.station.clone());
    put(SCAN, spec.scan.clone());
    put(STARTED, rfc3339(shared.started_ms));
    put(
        EXPIRES,
        rfc3339(shared.started_ms + shared.retention_days as u64 * 86_400_000),
    );
    if let Some(fb) = status.frame_bytes {
        put(FRAME_BYTES, fb.to_string());
    }
    put(
        NUMBERING,
        match status.numbering {
            Numbering::UdpsSequence => "udps-sequence",
            Numbering::VdifTime => "vdif-time",
        }
        .into(),
    );
    if let Some(fps) = view.frames_per_second {
        let learned = if view.frames_per_second_learned {
            " (learned from the first second)"
        } else {
            ""
        };
        put(FRAMES_PER_SECOND, format!("{fps}{learned}"));
    }
    let l = &view.loss;
    put(RECEIVED, l.frames_received.to_string());
    put(EXPECTED, l.frames_expected.to_string());
    put(MISSING, l.frames_missing.to_string());
    put(OUT_OF_ORDER, l.frames_out_of_order.to_string());
    put(DUPLICATE, l.frames_duplicate.to_string());
    put(INVALID, l.frames_invalid.to_string());
    put(THREADS, l.threads.to_string());
    if let Some(p) = view.first {
        put(FIRST, p.to_string());
    }
    if let Some(p) = view.last {
        put(LAST, p.to_string());
    }
    put(GAPS, l.gaps.to_string());
    if !view.gaps.is_empty() {
        let mut list: Vec<String> = view.gaps.iter().map(|g| g.to_string()).collect();
        if (l.gaps as usize) > view.gaps.len() {
            list.push(format!("and {} more", l.gaps as usize - view.gaps.len()));
        }
        put(GAP_LIST, list.join("; "));
    }
    let rejected: u64 = status.frames_rejected.values().sum();
    let mut why = String::new();
    if let Some(first) = &status.first_rejection {
        why = format!(" (first: {first})");
    }
    put(REJECTED, format!("{rejected}{why}"));
    put(RING_DROPPED, status.ring_dropped_frames.to_string());
    put(KERNEL_DROPS, status.kernel_drops.to_string());
    if let Some(n) = status.udp_rcvbuf_errors_system {
        put(SNMP_ERRORS, n.to_string());
    }
    if let Some(r) = status.rcvbuf {
        put(RCVBUF, (r.granted_bytes / 2).to_string());
    }
    m
}

/// When a scan has more gaps than its metadata lists, store them all as `KEY.gaps.json` next to it and name
/// that object in the metadata.
pub(crate) fn store_gap_list(
    store: &Store,
    shared: &Shared,
    view: &WriterView,
    metadata: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    let all = shared.all_gaps.lock().clone();
    if all.len() <= view.gaps.len() {
        return Ok(());
    }
    let key = format!("{}.gaps.json", shared.spec.key());
    let body = serde_json::to_vec_pretty(&all)?;
    let options = PutOptions {
        content_type: Some("application/json".into()),
        ..PutOptions::default()
    };
    store.put_object(&shared.bucket, &key, options, &body)?;
    set(metadata, GAP_LIST_OBJECT, &key);
    Ok(())
}
