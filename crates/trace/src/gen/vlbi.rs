//! The `vlbi` profile (seeds/004): observing runs of about 20 days record scan files of 20–50 GB
//! at a fixed rate; about 100 days after recording a scan is read once (shipped to the
//! correlator) and then deleted.
//!
//! From the report: rates 1, 2, 4 (8) Gbit/s; scan files "some gigabytes … up to tenths of
//! gigabytes", typical maximum 50 GB, tests with 20 GB; gaps between scans 10–15 s; a run lasts up
//! to 20 days and produces about 100 TB per antenna; data are kept about 100 days. Assumed here
//! (the report does not say): one run every 120 days (three sessions a year), scans of uniformly
//! 20–50 GB, and the idle time between scans stretched so that a run writes 100 TB; reads happen
//! 100 days ± 1 day after the scan was written, at the recording rate, and the delete follows the
//! read's end.

use super::{GenOptions, DAY_MS, SECOND_MS};
use crate::record::{Op, Record};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, Debug)]
pub(crate) struct VlbiParams {
    rate_bits_per_s: f64,
    scan_bytes_min: u64,
    scan_bytes_max: u64,
    scan_gap_ms_min: u64,
    run_ms: u64,
    run_bytes: f64,
    run_period_ms: u64,
    retention_ms: u64,
    retention_jitter_ms: u64,
}

impl Default for VlbiParams {
    fn default() -> VlbiParams {
        VlbiParams {
            rate_bits_per_s: 4e9,
            scan_bytes_min: 20_000_000_000,
            scan_bytes_max: 50_000_000_000,
            scan_gap_ms_min: 10 * SECOND_MS,
            run_ms: 20 * DAY_MS,
            run_bytes: 100e12,
            run_period_ms: 120 * DAY_MS,
            retention_ms: 100 * DAY_MS,
            retention_jitter_ms: DAY_MS,
        }
    }
}

pub(crate) struct VlbiGenerator {
    params: VlbiParams,
    rng: ChaCha8Rng,
    requests_left: u64,
    end_ms: u64,
    /// Start time of the next scan to write.
    write_ms: u64,
    run: u64,
    run_start_ms: u64,
    scan_in_run: u64,
    next_id: u64,
    /// Reads and deletes waiting for their time: (time, sequence, record).
    later: BinaryHeap<Reverse<(u64, u64, RecordKey)>>,
    sequence: u64,
}

/// What a scheduled read or delete needs (kept small; the record is built when it is due).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RecordKey {
    op_is_delete: bool,
    object: u64,
    size_bytes: u64,
    run: u64,
    scan: u64,
}

impl VlbiGenerator {
    pub(crate) fn new(params: VlbiParams, options: &GenOptions) -> VlbiGenerator {
        VlbiGenerator {
            params,
            rng: ChaCha8Rng::seed_from_u64(options.seed),
            requests_left: options.requests,
            end_ms: options.duration_ms.unwrap_or(u64::MAX),
            write_ms: 0,
            run: 1,
            run_start_ms: 0,
            scan_in_run: 0,
            next_id: 1,
            later: BinaryHeap::new(),
            sequence: 0,
        }
    }

    fn transfer_ms(&self, size_bytes: u64) -> u64 {
        (size_bytes as f64 * 8.0 / self.params.rate_bits_per_s * SECOND_MS as f64) as u64
    }

    fn record(&self, time_ms: u64, op: Op, key: &RecordKey) -> Record {
        Record {
            user: 1,
            session: key.run,
            path: Some(format!("run{:03}/scan{:05}.vdif", key.run, key.scan)),
            ..Record::new(time_ms, op, key.object, key.size_bytes)
        }
    }

    fn write_scan(&mut self) -> Record {
        let p = &self.params;
        let size_bytes = self.rng.gen_range(p.scan_bytes_min..=p.scan_bytes_max);
        let write_ms = self.transfer_ms(size_bytes);
        // Stretch the idle time between scans so the run writes `run_bytes` in `run_ms`.
        let average_ms = (size_bytes as f64 / p.run_bytes * p.run_ms as f64) as u64;
        let gap_ms = average_ms.saturating_sub(write_ms).max(p.scan_gap_ms_min);
        self.scan_in_run += 1;
        let key = RecordKey {
            op_is_delete: false,
            object: self.next_id,
            size_bytes,
            run: self.run,
            scan: self.scan_in_run,
        };
        self.next_id += 1;
        let time_ms = self.write_ms;
        let jitter = self.rng.gen_range(0..=2 * p.retention_jitter_ms);
        let read_ms = time_ms + write_ms + p.retention_ms - p.retention_jitter_ms + jitter;
        let delete_ms = read_ms + write_ms;
        self.sequence += 2;
        self.later
            .push(Reverse((read_ms, self.sequence - 1, key.clone())));
        self.later.push(Reverse((
            delete_ms,
            self.sequence,
            RecordKey {
                op_is_delete: true,
                ..key.clone()
            },
        )));
        // Next scan; a new run when this one is over.
        self.write_ms = time_ms + write_ms + gap_ms;
        if self.write_ms >= self.run_start_ms + p.run_ms {
            self.run += 1;
            self.run_start_ms += p.run_period_ms;
            self.write_ms = self.write_ms.max(self.run_start_ms);
            self.scan_in_run = 0;
        }
        self.record(time_ms, Op::Put, &key)
    }
}

impl Iterator for VlbiGenerator {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if self.requests_left == 0 {
            return None;
        }
        let due_later = self
            .later
            .peek()
            .is_some_and(|Reverse((time_ms, _, _))| *time_ms <= self.write_ms);
        let record = if due_later {
            let Reverse((time_ms, _, key)) = self.later.pop()?;
            let op = if key.op_is_delete { Op::Del } else { Op::Get };
            self.record(time_ms, op, &key)
        } else {
            self.write_scan()
        };
        if record.time_ms >= self.end_ms {
            self.requests_left = 0;
            return None;
        }
        self.requests_left -= 1;
        Some(record)
    }
}
