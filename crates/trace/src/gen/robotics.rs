//! The `robotics` profile (seeds/000 ch. 3): each run of a recycling robot writes one immutable
//! data set of channel files; humans annotate a small fraction, which machine-learning training
//! then rereads often; unannotated data sets expire and are purged.
//!
//! From the source: data sets are immutable and written once; channels are split into files of
//! "tens to hundreds of megabytes"; many small files (8 KiB – 1 MiB frames) and zero-length flag
//! files mark status; annotated data sets are "very unlikely" to be removed, the others are purged
//! after a set period. Assumed here (the source gives no rates): a run every 2 hours on average
//! (exponential), 6 channels of 1–20 files of 10–500 MB (log-uniform), 20 small files and one
//! flag file per data set, 5 % of data sets annotated (read in full 1–3 days after the run),
//! the rest deleted after 30 days, and a training job every 6 hours that rereads 3 random
//! annotated data sets.

use super::{log_uniform, GenOptions, DAY_MS, KIB, MIB, SECOND_MS};
use crate::record::{Op, Record};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const HOUR_MS: u64 = 3600 * SECOND_MS;

#[derive(Clone, Debug)]
pub(crate) struct RoboticsParams {
    run_interval_ms_mean: f64,
    run_ms: u64,
    channels: u32,
    files_per_channel_max: u32,
    channel_file_bytes: (f64, f64),
    small_files: u32,
    small_file_bytes: (f64, f64),
    annotated_fraction: f64,
    annotation_delay_ms: (u64, u64),
    retention_ms: u64,
    training_interval_ms: u64,
    training_datasets: usize,
}

impl Default for RoboticsParams {
    fn default() -> RoboticsParams {
        RoboticsParams {
            run_interval_ms_mean: 2.0 * HOUR_MS as f64,
            run_ms: HOUR_MS,
            channels: 6,
            files_per_channel_max: 20,
            channel_file_bytes: (10e6, 500e6),
            small_files: 20,
            small_file_bytes: (8.0 * KIB as f64, MIB as f64),
            annotated_fraction: 0.05,
            annotation_delay_ms: (DAY_MS, 3 * DAY_MS),
            retention_ms: 30 * DAY_MS,
            training_interval_ms: 6 * HOUR_MS,
            training_datasets: 3,
        }
    }
}

enum Event {
    Emit(Record),
    NewRun,
    Train,
}

struct Dataset {
    ready_ms: u64,
    files: Vec<(u64, u64, String)>,
    number: u64,
}

pub(crate) struct RoboticsGenerator {
    params: RoboticsParams,
    rng: ChaCha8Rng,
    requests_left: u64,
    end_ms: u64,
    events: BinaryHeap<Reverse<(u64, u64)>>,
    payloads: std::collections::HashMap<u64, Event>,
    sequence: u64,
    next_id: u64,
    datasets: u64,
    annotated: Vec<Dataset>,
}

impl RoboticsGenerator {
    pub(crate) fn new(params: RoboticsParams, options: &GenOptions) -> RoboticsGenerator {
        let mut generator = RoboticsGenerator {
            params,
            rng: ChaCha8Rng::seed_from_u64(options.seed),
            requests_left: options.requests,
            end_ms: options.duration_ms.unwrap_or(u64::MAX),
            events: BinaryHeap::new(),
            payloads: std::collections::HashMap::new(),
            sequence: 0,
            next_id: 1,
            datasets: 0,
            annotated: Vec::new(),
        };
        generator.schedule(0, Event::NewRun);
        let first_training_ms = generator.params.training_interval_ms;
        generator.schedule(first_training_ms, Event::Train);
        generator
    }

    fn schedule(&mut self, time_ms: u64, event: Event) {
        self.sequence += 1;
        self.events.push(Reverse((time_ms, self.sequence)));
        self.payloads.insert(self.sequence, event);
    }

    fn new_run(&mut self, now_ms: u64) {
        self.datasets += 1;
        let number = self.datasets;
        let p = self.params.clone();
        let mut files = Vec::new();
        for channel in 0..p.channels {
            for part in 0..self.rng.gen_range(1..=p.files_per_channel_max) {
                let size = log_uniform(
                    &mut self.rng,
                    p.channel_file_bytes.0,
                    p.channel_file_bytes.1,
                ) as u64;
                files.push((
                    size,
                    format!("ds{number:06}/ch{channel}/part{part:03}.blob"),
                ));
            }
        }
        for frame in 0..p.small_files {
            let size =
                log_uniform(&mut self.rng, p.small_file_bytes.0, p.small_file_bytes.1) as u64;
            files.push((size, format!("ds{number:06}/frames/{frame:04}.jpg")));
        }
        files.push((0, format!("ds{number:06}/DONE")));
        // Files are written over the run, in order; the flag file last.
        let step_ms = p.run_ms / files.len() as u64;
        let mut written = Vec::with_capacity(files.len());
        for (index, (size, path)) in files.into_iter().enumerate() {
            let id = self.next_id;
            self.next_id += 1;
            let record = Record {
                user: 1,
                session: number,
                path: Some(path.clone()),
                ..Record::new(now_ms + index as u64 * step_ms, Op::Put, id, size)
            };
            self.schedule(record.time_ms, Event::Emit(record));
            written.push((id, size, path));
        }
        let end_ms = now_ms + p.run_ms;
        if self.rng.gen::<f64>() < p.annotated_fraction {
            let ready_ms = end_ms
                + self
                    .rng
                    .gen_range(p.annotation_delay_ms.0..=p.annotation_delay_ms.1);
            self.read_all(&written, ready_ms, 2, number);
            self.annotated.push(Dataset {
                ready_ms,
                files: written,
                number,
            });
        } else {
            for (index, (id, size, path)) in written.into_iter().enumerate() {
                let record = Record {
                    user: 1,
                    session: number,
                    path: Some(path),
                    ..Record::new(
                        end_ms + p.retention_ms + index as u64 * SECOND_MS,
                        Op::Del,
                        id,
                        size,
                    )
                };
                self.schedule(record.time_ms, Event::Emit(record));
            }
        }
        let gap_ms =
            (-self.rng.gen::<f64>().max(f64::MIN_POSITIVE).ln() * p.run_interval_ms_mean) as u64;
        self.schedule(now_ms + gap_ms.max(p.run_ms), Event::NewRun);
    }

    fn read_all(&mut self, files: &[(u64, u64, String)], start_ms: u64, user: u32, session: u64) {
        for (index, (id, size, path)) in files.iter().enumerate() {
            let record = Record {
                user,
                session,
                path: Some(path.clone()),
                ..Record::new(start_ms + index as u64 * SECOND_MS, Op::Get, *id, *size)
            };
            self.schedule(record.time_ms, Event::Emit(record));
        }
    }

    fn train(&mut self, now_ms: u64) {
        let ready: Vec<usize> = (0..self.annotated.len())
            .filter(|i| self.annotated[*i].ready_ms <= now_ms)
            .collect();
        if !ready.is_empty() {
            let job = now_ms / self.params.training_interval_ms;
            let mut start_ms = now_ms;
            for _ in 0..self.params.training_datasets {
                let dataset = &self.annotated[ready[self.rng.gen_range(0..ready.len())]];
                let (files, number) = (dataset.files.clone(), dataset.number);
                self.read_all(
                    &files,
                    start_ms,
                    3,
                    1_000_000_000 + job * 1000 + number % 1000,
                );
                start_ms += files.len() as u64 * SECOND_MS;
            }
        }
        self.schedule(now_ms + self.params.training_interval_ms, Event::Train);
    }
}

impl Iterator for RoboticsGenerator {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        while self.requests_left > 0 {
            let Reverse((time_ms, sequence)) = self.events.pop()?;
            if time_ms >= self.end_ms {
                break;
            }
            match self
                .payloads
                .remove(&sequence)
                .expect("every scheduled event has a payload")
            {
                Event::Emit(record) => {
                    self.requests_left -= 1;
                    return Some(record);
                }
                Event::NewRun => self.new_run(time_ms),
                Event::Train => self.train(time_ms),
            }
        }
        self.requests_left = 0;
        None
    }
}
