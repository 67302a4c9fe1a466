//! Loss accounting as VLBI recorders report it: frames expected (from the first to the highest position seen)
//! against frames received, frames that arrived out of order (after a frame of a higher position), duplicates,
//! and the gaps — each a run of missing positions and the byte offset in the scan where it would have been.
//!
//! A position is the `udps` sequence number, or, per VDIF thread, `seconds × frames per second + frame number`.
//! Frames are never invented: a gap is only recorded. A frame that arrives late fills (part of) its gap.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::vdif::Header;

/// Gaps listed per stream at most; beyond it gaps are still counted (`gap_list_complete = false`).
pub const GAPS_LISTED_MAX: usize = 100_000;

/// How a frame arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next position (or the first frame).
    InOrder,
    /// After a gap it opened.
    AfterGap { missing: u64 },
    /// Late: a position below the highest seen that was missing.
    Late,
    /// A position already received.
    Duplicate,
}

/// One run of missing positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gap {
    end: u64,
    at_byte: u64,
}

/// The accounting of one stream of positions.
#[derive(Debug, Clone, Default)]
pub struct StreamLoss {
    first: Option<u64>,
    highest: u64,
    received: u64,
    out_of_order: u64,
    duplicates: u64,
    missing: u64,
    /// start → gap, disjoint, inside `[first, highest]`.
    gaps: BTreeMap<u64, Gap>,
    /// Some gap was not listed (the list was full).
    gaps_unlisted: bool,
}

impl StreamLoss {
    fn open_gap(&mut self, start: u64, end: u64, at_byte: u64) {
        self.missing += end - start;
        if self.gaps.len() < GAPS_LISTED_MAX {
            self.gaps.insert(start, Gap { end, at_byte });
        } else {
            self.gaps_unlisted = true;
        }
    }

    /// Record a frame at `position`, stored at byte `at_byte` of the scan.
    pub fn record(&mut self, position: u64, at_byte: u64) -> Arrival {
        self.received += 1;
        let Some(first) = self.first else {
            self.first = Some(position);
            self.highest = position;
            return Arrival::InOrder;
        };
        if position > self.highest {
            let missing = position - self.highest - 1;
            if missing > 0 {
                self.open_gap(self.highest + 1, position, at_byte);
            }
            self.highest = position;
            return if missing == 0 {
                Arrival::InOrder
            } else {
                Arrival::AfterGap { missing }
            };
        }
        if position < first {
            if position + 1 < first {
                self.open_gap(position + 1, first, at_byte);
            }
            self.first = Some(position);
            self.out_of_order += 1;
            return Arrival::Late;
        }
        // first ≤ position ≤ highest: a late frame filling a gap, or a duplicate.
        let containing = self
            .gaps
            .range(..=position)
            .next_back()
            .filter(|(_, g)| position < g.end)
            .map(|(s, g)| (*s, *g));
        match containing {
            Some((start, gap)) => {
                self.gaps.remove(&start);
                if start < position {
                    self.gaps.insert(
                        start,
                        Gap {
                            end: position,
                            ..gap
                        },
                    );
                }
                if position + 1 < gap.end {
                    self.gaps.insert(position + 1, gap);
                }
                self.missing -= 1;
                self.out_of_order += 1;
                Arrival::Late
            }
            None if self.gaps_unlisted => {
                // Perhaps it filled a gap that was not listed; counted as late, the missing count may be high.
                self.out_of_order += 1;
                Arrival::Late
            }
            None => {
                self.duplicates += 1;
                Arrival::Duplicate
            }
        }
    }

    /// Positions from the first to the highest seen.
    pub fn expected(&self) -> u64 {
        self.first.map_or(0, |f| self.highest - f + 1)
    }
    pub fn received(&self) -> u64 {
        self.received
    }
    pub fn missing(&self) -> u64 {
        self.missing
    }
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }
    pub fn first(&self) -> Option<u64> {
        self.first
    }
    pub fn highest(&self) -> Option<u64> {
        self.first.map(|_| self.highest)
    }
    /// The listed gaps in position order: `(first missing position, missing frames, at byte)`.
    pub fn gaps(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.gaps.iter().map(|(s, g)| (*s, g.end - s, g.at_byte))
    }
    pub fn gap_count(&self) -> usize {
        self.gaps.len()
    }
    pub fn gap_list_complete(&self) -> bool {
        !self.gaps_unlisted
    }
}

/// How positions are numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Numbering {
    /// jive5ab's `udps`: the 64-bit sequence number before each frame, one stream.
    UdpsSequence,
    /// VDIF time: per thread, seconds × frames per second + frame number.
    VdifTime,
}

/// Where a frame sits in the stream, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Position {
    Sequence {
        seq: u64,
    },
    Time {
        thread: u16,
        second: u32,
        frame: u32,
    },
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Sequence { seq } => write!(f, "seq {seq}"),
            Position::Time {
                thread,
                second,
                frame,
            } => write!(f, "thread {thread} second {second} frame {frame}"),
        }
    }
}

impl std::str::FromStr for Position {
    type Err = String;
    /// The text [`Position`]'s `Display` writes: `seq N` or `thread T second S frame F`.
    fn from_str(text: &str) -> Result<Position, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let number = |w: &str| {
            w.parse::<u64>()
                .map_err(|_| format!("position {text:?}: {w:?} is not a number"))
        };
        match words[..] {
            ["seq", n] => Ok(Position::Sequence { seq: number(n)? }),
            ["thread", t, "second", s, "frame", f] => Ok(Position::Time {
                thread: number(t)? as u16,
                second: number(s)? as u32,
                frame: number(f)? as u32,
            }),
            _ => Err(format!(
                "position {text:?}: expected `seq N` or `thread T second S frame F`"
            )),
        }
    }
}

impl std::str::FromStr for GapRecord {
    type Err = String;
    /// The text [`GapRecord`]'s `Display` writes: `N frames missing from POSITION at byte B`.
    fn from_str(text: &str) -> Result<GapRecord, String> {
        let bad = || format!("gap {text:?}: expected `N frames missing from POSITION at byte B`");
        let (frames, rest) = text
            .trim()
            .split_once(" frames missing from ")
            .ok_or_else(bad)?;
        let (position, at) = rest.rsplit_once(" at byte ").ok_or_else(bad)?;
        Ok(GapRecord {
            from: position.parse()?,
            frames: frames.parse().map_err(|_| bad())?,
            at_byte: at.parse().map_err(|_| bad())?,
        })
    }
}

/// A gap as stored with the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GapRecord {
    /// The first missing frame.
    pub from: Position,
    pub frames: u64,
    /// Byte offset in the scan where the missing frames would have been (where the next frame was stored).
    pub at_byte: u64,
}

impl std::fmt::Display for GapRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} frames missing from {} at byte {}",
            self.frames, self.from, self.at_byte
        )
    }
}

/// Totals over every stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LossTotals {
    pub frames_received: u64,
    pub frames_expected: u64,
    pub frames_missing: u64,
    pub frames_out_of_order: u64,
    pub frames_duplicate: u64,
    /// Frames the sender marked invalid (stored as received).
    pub frames_invalid: u64,
    pub gaps: u64,
    /// Every gap is in the gap list.
    pub gap_list_complete: bool,
    /// VDIF threads seen.
    pub threads: u64,
}

/// Frames that arrived before the frame rate was known (VDIF time numbering without a configured rate).
const PENDING_MAX: usize = 1 << 20;

/// The accounting of a scan.
#[derive(Debug, Clone)]
pub struct Accounting {
    numbering: Numbering,
    frames_per_second: Option<u64>,
    /// The rate was learned from the frame numbers (not configured).
    learned: bool,
    streams: HashMap<u16, StreamLoss>,
    /// VDIF time, rate unknown: `(thread, second, frame, at_byte)` waiting for the first second to end.
    pending: Vec<(u16, u32, u32, u64)>,
    /// Highest frame number seen per thread in its first second (to learn the rate).
    first_second: HashMap<u16, (u32, u32)>,
    invalid: u64,
    threads: std::collections::BTreeSet<u16>,
    first_position: Option<Position>,
    last_position: Option<Position>,
}

impl Accounting {
    /// `frames_per_second` is needed for VDIF time numbering; without it the rate is learned when the first
    /// second ends (the highest frame number seen in it + 1), which undercounts if that second's last frames
    /// were lost.
    pub fn new(numbering: Numbering, frames_per_second: Option<u64>) -> Accounting {
        Accounting {
            numbering,
            frames_per_second: frames_per_second.filter(|n| *n > 0),
            learned: false,
            streams: HashMap::new(),
            pending: Vec::new(),
            first_second: HashMap::new(),
            invalid: 0,
            threads: Default::default(),
            first_position: None,
            last_position: None,
        }
    }

    pub fn numbering(&self) -> Numbering {
        self.numbering
    }

    /// The frame rate in use and whether it was learned.
    pub fn frames_per_second(&self) -> Option<(u64, bool)> {
        self.frames_per_second.map(|n| (n, self.learned))
    }

    /// Record a stored frame with its header (and `udps` sequence number), stored at `at_byte`.
    pub fn record(&mut self, header: &Header, seq: Option<u64>, at_byte: u64) {
        if header.invalid {
            self.invalid += 1;
        }
        self.threads.insert(header.thread_id);
        let position = match (self.numbering, seq) {
            (Numbering::UdpsSequence, Some(seq)) => Position::Sequence { seq },
            _ => Position::Time {
                thread: header.thread_id,
                second: header.seconds,
                frame: header.frame_number,
            },
        };
        self.first_position.get_or_insert(position);
        self.last_position = Some(position);
        match (self.numbering, seq) {
            (Numbering::UdpsSequence, Some(seq)) => {
                self.streams.entry(0).or_default().record(seq, at_byte);
            }
            _ => self.record_time(
                header.thread_id,
                header.seconds,
                header.frame_number,
                at_byte,
            ),
        }
    }

    fn record_time(&mut self, thread: u16, second: u32, frame: u32, at_byte: u64) {
        if let Some(fps) = self.frames_per_second {
            let position = second as u64 * fps + frame as u64;
            self.streams
                .entry(thread)
                .or_default()
                .record(position, at_byte);
            return;
        }
        let entry = self.first_second.entry(thread).or_insert((second, frame));
        if second == entry.0 {
            entry.1 = entry.1.max(frame);
        }
        let ended = second > entry.0;
        let learned_from = entry.1;
        self.pending.push((thread, second, frame, at_byte));
        if ended || self.pending.len() >= PENDING_MAX {
            self.frames_per_second = Some(learned_from as u64 + 1);
            self.learned = true;
            for (thread, second, frame, at_byte) in std::mem::take(&mut self.pending) {
                self.record_time(thread, second, frame, at_byte);
            }
        }
    }

    /// Totals so far (frames waiting for the rate count as received).
    pub fn totals(&self) -> LossTotals {
        let mut t = LossTotals {
            frames_invalid: self.invalid,
            gap_list_complete: true,
            threads: self.threads.len() as u64,
            ..LossTotals::default()
        };
        for s in self.streams.values() {
            t.frames_received += s.received();
            t.frames_expected += s.expected();
            t.frames_missing += s.missing();
            t.frames_out_of_order += s.out_of_order();
            t.frames_duplicate += s.duplicates();
            t.gaps += s.gap_count() as u64;
            t.gap_list_complete &= s.gap_list_complete();
        }
        t.frames_received += self.pending.len() as u64;
        t.frames_expected += self.pending.len() as u64;
        t
    }

    fn position_of(&self, thread: u16, position: u64) -> Position {
        match (self.numbering, self.frames_per_second) {
            (Numbering::VdifTime, Some(fps)) => Position::Time {
                thread,
                second: (position / fps) as u32,
                frame: (position % fps) as u32,
            },
            _ => Position::Sequence { seq: position },
        }
    }

    /// The listed gaps (by thread, then position), at most `limit`.
    pub fn gaps(&self, limit: usize) -> Vec<GapRecord> {
        let mut threads: Vec<_> = self.streams.keys().copied().collect();
        threads.sort_unstable();
        threads
            .into_iter()
            .flat_map(|t| {
                self.streams[&t]
                    .gaps()
                    .map(move |(start, frames, at_byte)| GapRecord {
                        from: self.position_of(t, start),
                        frames,
                        at_byte,
                    })
            })
            .take(limit)
            .collect()
    }

    /// The first and the last frame stored.
    pub fn first_position(&self) -> Option<Position> {
        self.first_position
    }
    pub fn last_position(&self) -> Option<Position> {
        self.last_position
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against a model that keeps every position: missing, late and duplicate counts are exact.
        #[test]
        fn loss_counts_match_a_model_of_every_position(arrivals in proptest::collection::vec(0u64..300, 1..400)) {
            let mut loss = StreamLoss::default();
            let mut seen = BTreeSet::new();
            let mut highest = None::<u64>;
            let mut lowest = None::<u64>;
            let (mut late, mut dup) = (0, 0);
            for (i, &p) in arrivals.iter().enumerate() {
                let arrival = loss.record(p, i as u64);
                if seen.contains(&p) {
                    dup += 1;
                    prop_assert_eq!(arrival, Arrival::Duplicate);
                } else if highest.is_some_and(|h| p < h) {
                    late += 1;
                    prop_assert_eq!(arrival, Arrival::Late);
                }
                seen.insert(p);
                highest = Some(highest.map_or(p, |h: u64| h.max(p)));
                lowest = Some(lowest.map_or(p, |l: u64| l.min(p)));
            }
            let (lo, hi) = (lowest.unwrap(), highest.unwrap());
            prop_assert_eq!(loss.expected(), hi - lo + 1);
            prop_assert_eq!(loss.received(), arrivals.len() as u64);
            prop_assert_eq!(loss.duplicates(), dup);
            prop_assert_eq!(loss.out_of_order(), late);
            let missing: Vec<u64> = (lo..=hi).filter(|p| !seen.contains(p)).collect();
            prop_assert_eq!(loss.missing(), missing.len() as u64);
            let listed: Vec<u64> = loss.gaps().flat_map(|(s, n, _)| s..s + n).collect();
            prop_assert_eq!(listed, missing);
        }
    }

    fn header(thread: u16, second: u32, frame: u32) -> Header {
        Header {
            thread_id: thread,
            seconds: second,
            frame_number: frame,
            frame_len_8: 1004,
            ..Header::default()
        }
    }

    #[test]
    fn vdif_time_learns_the_rate_when_the_first_second_ends() {
        let mut a = Accounting::new(Numbering::VdifTime, None);
        // Second 10: frames 0..4 of a 4-frame-per-second stream, frame 2 missing; second 11 complete but frame 1.
        let frames = [
            (10, 0),
            (10, 1),
            (10, 3),
            (11, 0),
            (11, 2),
            (11, 3),
            (12, 0),
        ];
        for (i, (s, f)) in frames.into_iter().enumerate() {
            a.record(&header(0, s, f), None, i as u64 * 8032);
        }
        assert_eq!(a.frames_per_second(), Some((4, true)));
        let t = a.totals();
        assert_eq!(
            (t.frames_received, t.frames_expected, t.frames_missing),
            (7, 9, 2)
        );
        assert_eq!(
            a.gaps(10),
            vec![
                GapRecord {
                    from: Position::Time {
                        thread: 0,
                        second: 10,
                        frame: 2
                    },
                    frames: 1,
                    at_byte: 2 * 8032
                },
                GapRecord {
                    from: Position::Time {
                        thread: 0,
                        second: 11,
                        frame: 1
                    },
                    frames: 1,
                    at_byte: 4 * 8032
                },
            ]
        );
    }

    #[test]
    fn gap_records_read_back_from_their_text() {
        for g in [
            GapRecord {
                from: Position::Sequence { seq: 17 },
                frames: 3,
                at_byte: 8032,
            },
            GapRecord {
                from: Position::Time {
                    thread: 2,
                    second: 99,
                    frame: 5,
                },
                frames: 1,
                at_byte: 0,
            },
        ] {
            assert_eq!(g.to_string().parse::<GapRecord>(), Ok(g));
        }
        assert!("and 5 more".parse::<GapRecord>().is_err());
    }

    #[test]
    fn threads_are_counted_apart() {
        let mut a = Accounting::new(Numbering::VdifTime, Some(100));
        for f in 0..10 {
            a.record(&header(0, 5, f), None, 0);
            if f != 4 {
                a.record(&header(1, 5, f), None, 0);
            }
        }
        let t = a.totals();
        assert_eq!(
            (t.threads, t.frames_received, t.frames_missing, t.gaps),
            (2, 19, 1, 1)
        );
        assert_eq!(
            a.gaps(10)[0].from,
            Position::Time {
                thread: 1,
                second: 5,
                frame: 4
            }
        );
    }
}
