//! The `ecfs` and `mars` profiles: user sessions against an archive of files.
//!
//! Model (numbers per profile in [`ArchiveParams`], derivation in `docs/trace.md`):
//! - `streams` user streams run side by side; each runs sessions back to back, separated by a
//!   log-normal gap. A session has a log-normal number of actions spread uniformly over a
//!   log-normal lifetime, and is read-only, write-only or mixed.
//! - A `PUT` creates a new object (size from the profile's size model) or overwrites a random
//!   existing one. At creation an object is marked to be read later with the probability that
//!   makes the never-read fraction come out right; pre-existing objects (never written in the
//!   trace, read from the archive) make up the rest of the read objects.
//! - A `GET` is a first read (of a marked object or a pre-existing one), a re-read within the
//!   session, or a re-read of a hot object, picked with a bias to recently heated ones. The hot
//!   set is a small fraction of all objects: that gives the skew of Fig. 2.5.

use super::{GenOptions, LogNormal, DAY_MS, GIB, KIB, MIB, SECOND_MS};
use crate::record::{Op, Record, SizeClass};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Upper bound on actions in one session (bounds per-stream memory).
const ACTIONS_MAX: u64 = 20_000;
/// Objects remembered per session for re-gets.
const SESSION_HISTORY_MAX: usize = 64;
/// Feedback gain of the operation mix, in requests of deficit per unit of probability.
const MIX_FEEDBACK_REQUESTS: f64 = 256.0;
/// Attempts to find a live object before giving up on a pick.
const PICK_TRIES: usize = 8;

/// How object sizes are drawn.
#[derive(Clone, Debug)]
pub(crate) enum SizeModel {
    /// Class by `share` (count fraction), then `low + (high-low)·u^k` within the class with `k`
    /// chosen so the class's mean size is `mean_bytes`.
    Classes(Vec<ClassShare>),
    /// Log-normal, clamped.
    LogNormal {
        dist: LogNormal,
        min_bytes: u64,
        max_bytes: u64,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct ClassShare {
    share: f64,
    mean_bytes: f64,
    low_bytes: u64,
    high_bytes: u64,
    exponent: f64,
}

impl ClassShare {
    fn new(count: f64, low_bytes: u64, high_bytes: u64, mean_bytes: f64) -> ClassShare {
        let exponent = (high_bytes - low_bytes) as f64 / (mean_bytes - low_bytes as f64) - 1.0;
        ClassShare {
            share: count,
            mean_bytes,
            low_bytes,
            high_bytes,
            exponent,
        }
    }
}

impl SizeModel {
    fn sample(&self, rng: &mut ChaCha8Rng) -> u64 {
        match self {
            SizeModel::Classes(classes) => {
                let mut u: f64 = rng.gen();
                let total: f64 = classes.iter().map(|c| c.share).sum();
                let mut chosen = classes[classes.len() - 1];
                for class in classes {
                    if u < class.share / total {
                        chosen = *class;
                        break;
                    }
                    u -= class.share / total;
                }
                let span = (chosen.high_bytes - chosen.low_bytes) as f64;
                let size = chosen.low_bytes as f64 + span * rng.gen::<f64>().powf(chosen.exponent);
                // Stay inside the class: strictly above its lower bound (bounds are inclusive above).
                (size as u64).clamp(
                    chosen.low_bytes + u64::from(chosen.low_bytes > 0),
                    chosen.high_bytes,
                )
            }
            SizeModel::LogNormal {
                dist,
                min_bytes,
                max_bytes,
            } => (dist.sample(rng) as u64).clamp(*min_bytes, *max_bytes),
        }
    }
}

impl ArchiveParams {
    /// The factor on the probability of being read, per size class: `(mean / 1 MB)^tilt`,
    /// normalised so that its mean over new objects (by class share) is 1.
    fn read_weight_by_class(&self) -> [f64; 6] {
        let mut weights = [1.0; 6];
        let SizeModel::Classes(classes) = &self.sizes else {
            return weights;
        };
        if self.read_size_tilt == 0.0 || classes.len() != weights.len() {
            return weights;
        }
        let total_share: f64 = classes.iter().map(|c| c.share).sum();
        let mut mean_weight = 0.0;
        for (weight, class) in weights.iter_mut().zip(classes) {
            *weight = (class.mean_bytes / 1e6).powf(self.read_size_tilt);
            mean_weight += class.share / total_share * *weight;
        }
        weights.map(|w| w / mean_weight)
    }
}

/// The numbers that define an archive profile.
#[derive(Clone, Debug)]
pub(crate) struct ArchiveParams {
    /// Shares of GET, PUT, DEL, RENAME among requests.
    op_share: [f64; 4],
    sizes: SizeModel,
    /// Fraction of objects never read.
    never_read: f64,
    /// Size dependence of reading: a new object of size class `c` is marked to be read with a
    /// probability proportional to `(mean size of c / 1 MB)^read_size_tilt` (0: independent of
    /// size). Only for [`SizeModel::Classes`]; the never-read fraction stays `never_read`.
    read_size_tilt: f64,
    /// Fraction of objects that exist before the trace (only read in it).
    preexisting: f64,
    /// Fraction of PUTs that overwrite an existing object.
    overwrite: f64,
    /// Probability that a GET re-reads an object read earlier in the same session (calibrated:
    /// hot re-reads land in the session's own history too, adding about 5 points).
    session_reget: f64,
    /// Fraction of all objects in the hot set.
    hot_objects: f64,
    /// Recency bias of hot re-reads: index from the newest = len · u^bias.
    hot_recency_bias: f64,
    /// Recency bias of first reads among the objects marked to be read (same form).
    pending_recency_bias: f64,
    /// Session kinds: shares of read-only and write-only sessions (the rest is mixed).
    read_only_sessions: f64,
    write_only_sessions: f64,
    actions: LogNormal,
    lifetime_s: LogNormal,
    gap_s: LogNormal,
    /// Requests per day of the real trace (sets the default duration).
    real_requests_per_day: f64,
}

impl ArchiveParams {
    /// ECFS, thesis ch. 2.
    pub(crate) fn ecfs() -> ArchiveParams {
        // Table 2.1: count (millions) and used capacity per class → mean size per class.
        let classes = vec![
            ClassShare::new(36.0, 0, 512 * KIB, 4.4e12 / 36.0e6),
            ClassShare::new(9.1, 512 * KIB, MIB, 6.3e12 / 9.1e6),
            ClassShare::new(29.5, MIB, 8 * MIB, 101e12 / 29.5e6),
            ClassShare::new(30.0, 8 * MIB, 48 * MIB, 585e12 / 30.0e6),
            ClassShare::new(29.7, 48 * MIB, GIB, 6.2e15 / 29.7e6),
            // "Largest file size 32 GB" (Table 2.2) closes the last class.
            ClassShare::new(3.1, GIB, 32 * GIB, 8e15 / 3.1e6),
        ];
        // Table 2.3: 38.5 M GET, 78.3 M PUT, 4.2 M DEL, 6.4 M RENAME.
        let total = 38.5 + 78.3 + 4.2 + 6.4;
        ArchiveParams {
            op_share: [38.5 / total, 78.3 / total, 4.2 / total, 6.4 / total],
            sizes: SizeModel::Classes(classes),
            // "Only 26.3 % of the files on tape were ever read" (§2.8).
            never_read: 0.737,
            // Table 2.3: 7.24 PB in 38.5 M GETs = 188 MB per GET, against 108 MB per stored file
            // (Table 2.1) and 151 MB per PUT: reads lean to large files. The thesis gives no
            // per-class read counts, so the form is assumed (a power of the class's mean size);
            // the exponent is calibrated so that a generated trace has ~188 MB per GET.
            read_size_tilt: 0.18,
            // Table 2.3: 73.4 M files, 66.2 M with a PUT → 7.2 M only read.
            preexisting: (73.4 - 66.2) / 73.4,
            // 78.3 M PUTs on 66.2 M files.
            overwrite: (78.3 - 66.2) / 78.3,
            // §2.4.3: 11 % of GETs re-retrieve a file within the session.
            session_reget: 0.06,
            // Fig. 2.5: 50 % of GETs hit less than 5 % of the files; 3 % hot leaves margin.
            hot_objects: 0.03,
            hot_recency_bias: 3.0,
            pending_recency_bias: 3.0,
            // Table 2.4: 1,083,067 of 2,709,343 sessions have GETs, 2,274,645 have PUTs.
            read_only_sessions: 1.0 - 2_274_645.0 / 2_709_343.0,
            write_only_sessions: 1.0 - 1_083_067.0 / 2_709_343.0,
            // Table 2.4: actions per session P50 7, mean 47.04; lifetime P50 154 s, mean 2,601.6 s;
            // gap P50 250 s, mean 896.26 s.
            actions: LogNormal::from_median_mean(7.0, 47.04),
            // Single-action sessions last 0 s: the log-normal is for the others, such that the
            // mixture has the table's median and mean.
            lifetime_s: {
                let actions = LogNormal::from_median_mean(7.0, 47.04);
                LogNormal::with_zero_share(154.0, 2601.6, actions.cdf(1.5))
            },
            gap_s: LogNormal::from_median_mean(250.0, 896.26),
            // 127.4 M requests from 2012/01/02 to 2014/05/21 (870 days).
            real_requests_per_day: 127.4e6 / 870.0,
        }
    }

    /// MARS, thesis §2.5 (Tables 2.5, 2.6); what the thesis does not give is borrowed from ECFS.
    pub(crate) fn mars() -> ArchiveParams {
        let ecfs = ArchiveParams::ecfs();
        // Table 2.6: 1.2 G retrieve and 115 M archive requests; no deletes or renames reported.
        let total = 1200.0 + 115.0;
        ArchiveParams {
            op_share: [1200.0 / total, 115.0 / total, 0.0, 0.0],
            // Fig. 2.8 peaks at 128–256 MiB; Table 2.5: 37.9 PB in 9.7 M files (mean 3.9 GB),
            // largest 1.34 TB.
            sizes: SizeModel::LogNormal {
                dist: LogNormal::from_median_mean(192.0 * MIB as f64, 37.9e15 / 9.7e6),
                min_bytes: KIB,
                max_bytes: 1_340_000_000_000,
            },
            // Table 2.5: 7.9 M of 9.7 M files never read from tape.
            never_read: 7.9 / 9.7,
            // Not reported for MARS (and its sizes are not in classes).
            read_size_tilt: 0.0,
            // Not reported: half of the read files are taken to predate the trace.
            preexisting: (1.0 - 7.9 / 9.7) / 2.0,
            overwrite: 0.0,
            // Not reported for MARS: read-dominant sessions, mostly read-only.
            read_only_sessions: 0.85,
            write_only_sessions: 0.07,
            // 1.315 G requests from 2010/01/01 to 2014/02/27 (1,519 days).
            real_requests_per_day: 1.315e9 / 1519.0,
            ..ecfs
        }
    }
}

#[derive(Clone, Copy)]
struct Object {
    id: u64,
    size_bytes: u64,
    alive: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SessionKind {
    ReadOnly,
    WriteOnly,
    Mixed,
}

struct Stream {
    user: u32,
    session: u64,
    kind: SessionKind,
    /// Remaining action times of the current session, latest first.
    times_ms: Vec<u64>,
    /// Actions done in the current session.
    done: u32,
    last_ms: u64,
    history: Vec<u32>,
}

pub(crate) struct ArchiveGenerator {
    params: ArchiveParams,
    rng: ChaCha8Rng,
    requests_left: u64,
    streams: Vec<Stream>,
    /// (next action time, stream index)
    queue: BinaryHeap<Reverse<(u64, u32)>>,
    objects: Vec<Object>,
    /// Objects marked to be read, not read yet.
    pending_reads: Vec<u32>,
    /// Objects that get re-read, oldest first.
    hot: Vec<u32>,
    next_id: u64,
    sessions_started: u64,
    /// Records produced per operation (GET, PUT, DEL, RENAME).
    op_counts: [u64; 4],
    // Derived probabilities.
    first_read_share: f64,
    preexisting_share_of_first_reads: f64,
    mark_for_read: f64,
    /// Per size class (Table 2.1 order): factor on `mark_for_read`, mean 1 over new objects.
    read_weight_by_class: [f64; 6],
    hot_on_first_read: f64,
    mixed_get_share: f64,
    mixed_among_multi: f64,
    read_only_among_single: f64,
}

impl ArchiveGenerator {
    pub(crate) fn new(params: ArchiveParams, options: &GenOptions) -> ArchiveGenerator {
        let rng = ChaCha8Rng::seed_from_u64(options.seed);
        let [get, put, _, _] = params.op_share;
        // Per request: new objects from PUTs, all objects, read objects, pre-existing objects.
        let new_per_request = put * (1.0 - params.overwrite);
        let objects_per_request = new_per_request / (1.0 - params.preexisting);
        let read_per_request = (1.0 - params.never_read) * objects_per_request;
        let preexisting_per_request = params.preexisting * objects_per_request;
        let first_read_share = (read_per_request / get).min(1.0);
        let preexisting_share_of_first_reads =
            (preexisting_per_request / read_per_request).min(1.0);
        let mark_for_read =
            ((read_per_request - preexisting_per_request) / new_per_request).clamp(0.0, 1.0);
        let hot_on_first_read = (params.hot_objects / (1.0 - params.never_read)).min(1.0);
        let read_weight_by_class = params.read_weight_by_class();
        // Single-action sessions cannot be mixed: the mixed sessions are drawn among the others,
        // so the fractions of sessions with a GET and with a PUT come out as given.
        let single_share = params.actions.cdf(1.5);
        let mixed = 1.0 - params.read_only_sessions - params.write_only_sessions;
        let mixed_among_multi = (mixed / (1.0 - single_share)).min(1.0);
        let read_only_among_single =
            params.read_only_sessions / (params.read_only_sessions + params.write_only_sessions);
        let read_only_among_multi = (1.0 - mixed_among_multi) * read_only_among_single;
        let mixed_get_share = ((get - read_only_among_multi) / mixed_among_multi).clamp(0.0, 1.0);

        // Enough streams to put `requests` into the duration.
        let duration_ms = options
            .duration_ms
            .unwrap_or_else(|| {
                (options.requests as f64 / params.real_requests_per_day * DAY_MS as f64) as u64
            })
            .max(1);
        let mean_actions = (params.actions.mu + params.actions.sigma.powi(2) / 2.0).exp();
        let mean_cycle_ms = ((params.lifetime_s.mu + params.lifetime_s.sigma.powi(2) / 2.0).exp()
            + (params.gap_s.mu + params.gap_s.sigma.powi(2) / 2.0).exp())
            * SECOND_MS as f64;
        let sessions = options.requests as f64 / mean_actions;
        let stream_count =
            ((sessions * mean_cycle_ms / duration_ms as f64).ceil() as usize).clamp(1, 100_000);

        let mut generator = ArchiveGenerator {
            params,
            rng,
            requests_left: options.requests,
            streams: Vec::with_capacity(stream_count),
            queue: BinaryHeap::with_capacity(stream_count),
            objects: Vec::new(),
            pending_reads: Vec::new(),
            hot: Vec::new(),
            next_id: 1,
            sessions_started: 0,
            op_counts: [0; 4],
            first_read_share,
            preexisting_share_of_first_reads,
            mark_for_read,
            read_weight_by_class,
            hot_on_first_read,
            mixed_get_share,
            mixed_among_multi,
            read_only_among_single,
        };
        for index in 0..stream_count {
            let start_ms = (generator.rng.gen::<f64>() * mean_cycle_ms) as u64;
            generator.streams.push(Stream {
                user: index as u32 + 1,
                session: 0,
                kind: SessionKind::Mixed,
                times_ms: Vec::new(),
                done: 0,
                last_ms: 0,
                history: Vec::new(),
            });
            generator.start_session(index, start_ms);
        }
        generator
    }

    fn start_session(&mut self, index: usize, start_ms: u64) {
        let rng = &mut self.rng;
        let actions = (self.params.actions.sample(rng).round() as u64).clamp(1, ACTIONS_MAX);
        let lifetime_ms = if actions == 1 {
            0
        } else {
            (self.params.lifetime_s.sample(rng) * SECOND_MS as f64) as u64
        };
        let mut times: Vec<u64> = Vec::with_capacity(actions as usize);
        times.push(start_ms);
        if actions > 1 {
            times.push(start_ms + lifetime_ms);
            for _ in 2..actions {
                times.push(start_ms + (rng.gen::<f64>() * lifetime_ms as f64) as u64);
            }
        }
        times.sort_unstable_by(|a, b| b.cmp(a));
        let mixed_share = if actions == 1 {
            0.0
        } else {
            self.mixed_among_multi
        };
        let kind = if rng.gen::<f64>() < mixed_share {
            SessionKind::Mixed
        } else if rng.gen::<f64>() < self.read_only_among_single {
            SessionKind::ReadOnly
        } else {
            SessionKind::WriteOnly
        };
        self.sessions_started += 1;
        let stream = &mut self.streams[index];
        stream.session = self.sessions_started;
        stream.kind = kind;
        stream.times_ms = times;
        stream.done = 0;
        stream.history.clear();
        self.queue.push(Reverse((start_ms, index as u32)));
    }

    fn new_object(&mut self) -> u32 {
        let size_bytes = self.params.sizes.sample(&mut self.rng);
        self.objects.push(Object {
            id: self.next_id,
            size_bytes,
            alive: true,
        });
        self.next_id += 1;
        (self.objects.len() - 1) as u32
    }

    fn random_live_object(&mut self) -> Option<u32> {
        if self.objects.is_empty() {
            return None;
        }
        (0..PICK_TRIES)
            .map(|_| self.rng.gen_range(0..self.objects.len()) as u32)
            .find(|slot| self.objects[*slot as usize].alive)
    }

    fn first_read(&mut self) -> u32 {
        let mut slot = None;
        if self.rng.gen::<f64>() >= self.preexisting_share_of_first_reads {
            for _ in 0..PICK_TRIES {
                if self.pending_reads.is_empty() {
                    break;
                }
                // Files are mostly read back soon after they were written: bias to recent ones.
                let len = self.pending_reads.len();
                let back = (len as f64
                    * self.rng.gen::<f64>().powf(self.params.pending_recency_bias))
                    as usize;
                let candidate = self.pending_reads.swap_remove(len - 1 - back.min(len - 1));
                if self.objects[candidate as usize].alive {
                    slot = Some(candidate);
                    break;
                }
            }
        }
        // A pre-existing object: it was never written in the trace, its first read is a miss.
        let slot = slot.unwrap_or_else(|| self.new_object());
        if self.rng.gen::<f64>() < self.hot_on_first_read {
            self.hot.push(slot);
        }
        slot
    }

    fn hot_reread(&mut self) -> Option<u32> {
        for _ in 0..PICK_TRIES {
            if self.hot.is_empty() {
                return None;
            }
            let back = (self.hot.len() as f64
                * self.rng.gen::<f64>().powf(self.params.hot_recency_bias))
                as usize;
            let index = self.hot.len() - 1 - back.min(self.hot.len() - 1);
            let slot = self.hot[index];
            if self.objects[slot as usize].alive {
                return Some(slot);
            }
            self.hot.swap_remove(index);
        }
        None
    }

    fn choose_op(&mut self, kind: SessionKind, done: u32) -> Op {
        // A mixed session reads and writes; a write-only session writes: their first actions say so.
        match (kind, done) {
            (SessionKind::Mixed, 0) => return Op::Get,
            (SessionKind::Mixed, 1) | (SessionKind::WriteOnly, 0)
                if self.params.op_share[1] > 0.0 =>
            {
                return Op::Put
            }
            _ => {}
        }
        // Long read-only or write-only sessions would make the mix wander from the target; the
        // free choices lean against the running deficit of each operation (feedback gain: one
        // unit of probability per `MIX_FEEDBACK_REQUESTS` requests of deficit).
        let [get, put, del, rename] = self.params.op_share;
        let done_total: u64 = self.op_counts.iter().sum();
        let get_share = match kind {
            SessionKind::ReadOnly => 1.0,
            SessionKind::WriteOnly => 0.0,
            SessionKind::Mixed => {
                let deficit = get * done_total as f64 - self.op_counts[0] as f64;
                (self.mixed_get_share + deficit / MIX_FEEDBACK_REQUESTS).clamp(0.0, 1.0)
            }
        };
        if self.rng.gen::<f64>() < get_share {
            return Op::Get;
        }
        let writes_done = (done_total - self.op_counts[0]) as f64;
        let write_share = put + del + rename;
        let weight = |share: f64, count: u64| {
            let deficit = share / write_share * writes_done - count as f64;
            (share / write_share + deficit / MIX_FEEDBACK_REQUESTS).max(0.0)
        };
        let weights = [
            weight(put, self.op_counts[1]),
            weight(del, self.op_counts[2]),
            weight(rename, self.op_counts[3]),
        ];
        let u = self.rng.gen::<f64>() * weights.iter().sum::<f64>();
        if u < weights[0] || weights.iter().sum::<f64>() == 0.0 {
            Op::Put
        } else if u < weights[0] + weights[1] {
            Op::Del
        } else {
            Op::Rename
        }
    }

    fn action(&mut self, index: usize, time_ms: u64) -> Record {
        let (kind, done) = (self.streams[index].kind, self.streams[index].done);
        self.streams[index].done += 1;
        let op = self.choose_op(kind, done);
        let (user, session) = (self.streams[index].user, self.streams[index].session);
        let record = |op, object: &Object| Record {
            user,
            session,
            ..Record::new(time_ms, op, object.id, object.size_bytes)
        };
        match op {
            Op::Get => {
                let u: f64 = self.rng.gen();
                let history_len = self.streams[index].history.len();
                let slot = if u < self.first_read_share {
                    self.first_read()
                } else if u < self.first_read_share + self.params.session_reget && history_len > 0 {
                    let pick = self.rng.gen_range(0..history_len);
                    let slot = self.streams[index].history[pick];
                    if self.objects[slot as usize].alive {
                        slot
                    } else {
                        self.first_read()
                    }
                } else {
                    match self.hot_reread() {
                        Some(slot) => slot,
                        None => self.first_read(),
                    }
                };
                let history = &mut self.streams[index].history;
                if history.len() < SESSION_HISTORY_MAX {
                    history.push(slot);
                } else {
                    let replace = self.rng.gen_range(0..SESSION_HISTORY_MAX);
                    history[replace] = slot;
                }
                record(Op::Get, &self.objects[slot as usize])
            }
            Op::Put => {
                let overwrite = if self.rng.gen::<f64>() < self.params.overwrite {
                    self.random_live_object()
                } else {
                    None
                };
                let slot = match overwrite {
                    Some(slot) => {
                        self.objects[slot as usize].size_bytes =
                            self.params.sizes.sample(&mut self.rng);
                        slot
                    }
                    None => {
                        let slot = self.new_object();
                        let class = SizeClass::of(self.objects[slot as usize].size_bytes).index();
                        if self.rng.gen::<f64>()
                            < self.mark_for_read * self.read_weight_by_class[class]
                        {
                            self.pending_reads.push(slot);
                        }
                        slot
                    }
                };
                record(Op::Put, &self.objects[slot as usize])
            }
            Op::Del => match self.random_live_object() {
                Some(slot) => {
                    self.objects[slot as usize].alive = false;
                    record(Op::Del, &self.objects[slot as usize])
                }
                None => {
                    let slot = self.new_object();
                    record(Op::Put, &self.objects[slot as usize])
                }
            },
            Op::Rename => match self.random_live_object() {
                Some(slot) => {
                    let before = self.objects[slot as usize];
                    self.objects[slot as usize].id = self.next_id;
                    self.next_id += 1;
                    Record {
                        target: Some(self.next_id - 1),
                        ..record(Op::Rename, &before)
                    }
                }
                None => {
                    let slot = self.new_object();
                    record(Op::Put, &self.objects[slot as usize])
                }
            },
        }
    }
}

impl Iterator for ArchiveGenerator {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if self.requests_left == 0 {
            return None;
        }
        let Reverse((time_ms, index)) = self.queue.pop()?;
        let index = index as usize;
        let popped = self.streams[index].times_ms.pop();
        debug_assert_eq!(popped, Some(time_ms));
        self.streams[index].last_ms = time_ms;
        let record = self.action(index, time_ms);
        match self.streams[index].times_ms.last() {
            Some(next_ms) => self.queue.push(Reverse((*next_ms, index as u32))),
            None => {
                let gap_ms = (self.params.gap_s.sample(&mut self.rng) * SECOND_MS as f64) as u64;
                let start_ms = self.streams[index].last_ms + gap_ms.max(1);
                self.start_session(index, start_ms);
            }
        }
        self.requests_left -= 1;
        self.op_counts[record.op.index()] += 1;
        Some(record)
    }
}
