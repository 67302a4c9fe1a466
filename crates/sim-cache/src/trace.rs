//! The trace as the simulator holds it: one 32-byte request per record, object ids interned to
//! dense numbers, next-read times filled in.

use crate::policy::NEVER;
use permafrost_trace::{NextAccess, Op, Record, SizeClass};
use std::collections::HashMap;

/// One request, compact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// When the object (as this request leaves it) is next read, ms; [`NEVER`] if not.
    pub next_ms: u64,
    /// Object size in bytes.
    pub size_bytes: u64,
    /// Dense object number.
    pub object: u32,
    /// For `RENAME`: the new object number; otherwise equal to `object`.
    pub target: u32,
    /// The operation.
    pub op: Op,
}

/// A whole trace in memory (32 bytes per request plus the id table while loading).
#[derive(Clone, Debug, Default)]
pub struct CompactTrace {
    /// The requests, in trace order.
    pub requests: Vec<Request>,
    /// Number of distinct object ids.
    pub objects: usize,
    /// Requests before this index warm the caches up and are not counted.
    pub warmup_requests: usize,
    /// Per size class: summed size of the distinct objects (at their largest), bytes.
    pub footprint_bytes: [u64; 6],
    /// Whether next-read times came from the trace (`true`) or were computed (`false`).
    pub next_from_trace: bool,
    /// Time of the first and last request, ms.
    pub first_ms: u64,
    /// Time of the last request.
    pub last_ms: u64,
}

impl CompactTrace {
    /// Builds the compact trace from records, computing next-read times unless every record
    /// carries one. The first `warmup_fraction` of the trace's time span is warm-up.
    pub fn from_records<E>(
        records: impl IntoIterator<Item = Result<Record, E>>,
        warmup_fraction: f64,
    ) -> Result<CompactTrace, E> {
        let mut ids: HashMap<u64, u32> = HashMap::new();
        let mut intern = |id: u64| -> u32 {
            let next = ids.len() as u32;
            *ids.entry(id).or_insert(next)
        };
        let mut trace = CompactTrace { next_from_trace: true, ..CompactTrace::default() };
        let mut times_ms: Vec<u64> = Vec::new();
        let mut largest: Vec<u64> = Vec::new();
        for record in records {
            let record = record?;
            let object = intern(record.object);
            let target = match (record.op, record.target) {
                (Op::Rename, Some(target)) => intern(target),
                _ => object,
            };
            let next_ms = match record.next_access {
                NextAccess::AtMs(ms) => ms,
                NextAccess::Never => NEVER,
                NextAccess::Unknown => {
                    trace.next_from_trace = false;
                    NEVER
                }
            };
            largest.resize(ids.len(), 0);
            largest[object as usize] = largest[object as usize].max(record.size_bytes);
            times_ms.push(record.time_ms);
            trace.requests.push(Request { next_ms, size_bytes: record.size_bytes, object, target, op: record.op });
        }
        trace.objects = ids.len();
        drop(ids);
        for size in largest {
            trace.footprint_bytes[SizeClass::of(size).index()] += size;
        }
        if let (Some(first), Some(last)) = (times_ms.first(), times_ms.iter().max()) {
            trace.first_ms = *first;
            trace.last_ms = *last;
            let warmup_end_ms = first + ((last - first) as f64 * warmup_fraction.clamp(0.0, 1.0)) as u64;
            trace.warmup_requests = times_ms.iter().position(|t| *t >= warmup_end_ms).unwrap_or(times_ms.len());
        }
        if !trace.next_from_trace {
            fill_next_access(&mut trace.requests, &times_ms, trace.objects);
        }
        Ok(trace)
    }

    /// Summed footprint of all classes.
    pub fn footprint_total_bytes(&self) -> u64 {
        self.footprint_bytes.iter().sum()
    }
}

/// Sets every request's `next_ms` to the time of the next `GET` of the object as the request
/// leaves it: a later `PUT` or `DEL` of the id ends that version (never read again); a `RENAME`
/// carries the object to its new id, and the rename's own `next_ms` is the next `GET` of the new
/// id. One forward pass, one `u32` per object.
pub fn fill_next_access(requests: &mut [Request], times_ms: &[u64], objects: usize) {
    assert_eq!(requests.len(), times_ms.len());
    // object → index + 1 of the request whose version is current (0 = none).
    let mut waiting: Vec<u32> = vec![0; objects];
    for index in 0..requests.len() {
        let request = requests[index];
        requests[index].next_ms = NEVER;
        let object = request.object as usize;
        match request.op {
            Op::Get => {
                if waiting[object] != 0 {
                    requests[waiting[object] as usize - 1].next_ms = times_ms[index];
                }
                waiting[object] = index as u32 + 1;
            }
            Op::Put => waiting[object] = index as u32 + 1,
            Op::Del => waiting[object] = 0,
            Op::Rename => {
                waiting[object] = 0;
                waiting[request.target as usize] = index as u32 + 1;
            }
        }
    }
}
