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
        fn intern(ids: &mut HashMap<u64, u32>, id: u64) -> u32 {
            let next = ids.len() as u32;
            *ids.entry(id).or_insert(next)
        }
        let mut trace = CompactTrace {
            next_from_trace: true,
            ..CompactTrace::default()
        };
        let mut times_ms: Vec<u64> = Vec::new();
        let mut largest: Vec<u64> = Vec::new();
        for record in records {
            let record = record?;
            let object = intern(&mut ids, record.object);
            let target = match (record.op, record.target) {
                (Op::Rename, Some(target)) => intern(&mut ids, target),
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
            trace.requests.push(Request {
                next_ms,
                size_bytes: record.size_bytes,
                object,
                target,
                op: record.op,
            });
        }
        trace.objects = ids.len();
        drop(ids);
        for size in largest {
            trace.footprint_bytes[SizeClass::of(size).index()] += size;
        }
        if let (Some(first), Some(last)) = (times_ms.first(), times_ms.iter().max()) {
            trace.first_ms = *first;
            trace.last_ms = *last;
            let warmup_ms = (last - first) as f64 * warmup_fraction.clamp(0.0, 1.0);
            trace.warmup_requests = times_ms
                .iter()
                .position(|t| t.saturating_sub(*first) as f64 >= warmup_ms)
                .unwrap_or(times_ms.len());
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
/// carries the object to its new id, so the requests before the rename get the next `GET` under
/// the new id too. One forward pass; memory: one `u32` per object plus one entry per pending
/// rename.
pub fn fill_next_access(requests: &mut [Request], times_ms: &[u64], objects: usize) {
    assert_eq!(requests.len(), times_ms.len());
    // object → index + 1 of the latest request of its current version (0 = none).
    let mut waiting: Vec<u32> = vec![0; objects];
    // rename request index + 1 → index + 1 of the request of the same version before the rename.
    let mut before_rename: HashMap<u32, u32> = HashMap::new();
    // Sets `next_ms` of the chain of requests ending at `latest` (or only forgets the chain).
    fn resolve(
        requests: &mut [Request],
        before_rename: &mut HashMap<u32, u32>,
        latest: u32,
        next_ms: u64,
    ) {
        let mut at = latest;
        while at != 0 {
            requests[at as usize - 1].next_ms = next_ms;
            at = before_rename.remove(&at).unwrap_or(0);
        }
    }
    for index in 0..requests.len() {
        let request = requests[index];
        requests[index].next_ms = NEVER;
        let object = request.object as usize;
        let this = index as u32 + 1;
        match request.op {
            Op::Get => {
                resolve(
                    requests,
                    &mut before_rename,
                    waiting[object],
                    times_ms[index],
                );
                waiting[object] = this;
            }
            Op::Put | Op::Del => {
                resolve(requests, &mut before_rename, waiting[object], NEVER);
                waiting[object] = if request.op == Op::Put { this } else { 0 };
            }
            Op::Rename => {
                let target = request.target as usize;
                resolve(requests, &mut before_rename, waiting[target], NEVER);
                if waiting[object] != 0 {
                    before_rename.insert(this, waiting[object]);
                }
                waiting[object] = 0;
                waiting[target] = this;
            }
        }
    }
    // Requests still waiting are never read again: their next_ms is already NEVER.
}
