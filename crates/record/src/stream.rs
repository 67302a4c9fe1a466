//! A deterministic VDIF stream for tests, demos and benchmarks: [`StreamSpec`] says which frames exist (rate,
//! duration, threads, station, frame size, seed) and in which order a sender sends them (frames left out,
//! pairs swapped); [`send`] paces them over UDP; [`Verifier`] checks bytes read back against the same stream.
//! Frame `i` is the same bytes wherever it is generated, so a recording can be compared without keeping a copy.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use serde::Serialize;

use crate::net::{BatchSender, BATCH_MAX};
use crate::vdif::{station_id, Header, HEADER_BYTES, UDPS_PREFIX_BYTES};

/// Bytes of the pool payloads are cut from.
const POOL_BYTES: usize = 4 << 20;

/// Which frames a stream has and the order they are sent in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// Bytes per frame, header included (a multiple of 8).
    pub frame_bytes: usize,
    /// Frames per second of each thread.
    pub frames_per_second: u64,
    /// Frames in the stream (before any is left out), all threads together.
    pub frames: u64,
    pub threads: u16,
    pub station: String,
    /// VDIF second of the first frame.
    pub first_second: u32,
    pub ref_epoch: u8,
    /// Prefix each datagram with the `udps` sequence number (the frame's index).
    pub udps: bool,
    pub seed: u64,
    /// Frame indices not sent, as `(first, count)` runs.
    pub skip: Vec<(u64, u64)>,
    /// Frame indices `i` sent after frame `i + 1` (the pair swapped).
    pub swap: Vec<u64>,
}

impl StreamSpec {
    /// A stream at `rate_bits_per_second` for `seconds`, one thread, 8-byte-aligned frames of `frame_bytes`.
    pub fn at_rate(rate_bits_per_second: u64, seconds: f64, frame_bytes: usize) -> StreamSpec {
        let frames_per_second = (rate_bits_per_second / (8 * frame_bytes as u64)).max(1);
        StreamSpec {
            frame_bytes,
            frames_per_second,
            frames: (frames_per_second as f64 * seconds).round() as u64,
            threads: 1,
            station: "Pf".into(),
            first_second: 0,
            ref_epoch: 0,
            udps: false,
            seed: 1,
            skip: Vec::new(),
            swap: Vec::new(),
        }
    }

    /// Data rate in bits per second (all threads).
    pub fn rate_bits_per_second(&self) -> u64 {
        self.frames_per_second * self.threads as u64 * self.frame_bytes as u64 * 8
    }

    /// Bytes of one datagram.
    pub fn datagram_bytes(&self) -> usize {
        self.frame_bytes + if self.udps { UDPS_PREFIX_BYTES } else { 0 }
    }

    fn skipped(&self, index: u64) -> bool {
        self.skip
            .iter()
            .any(|&(first, count)| (first..first + count).contains(&index))
    }

    /// Frame indices in the order they are sent.
    pub fn send_order(&self) -> impl Iterator<Item = u64> + '_ {
        let mut swap: Vec<u64> = self.swap.clone();
        swap.sort_unstable();
        (0..self.frames)
            .map(move |i| {
                if swap.binary_search(&i).is_ok() && i + 1 < self.frames {
                    i + 1
                } else if i > 0 && swap.binary_search(&(i - 1)).is_ok() {
                    i - 1
                } else {
                    i
                }
            })
            .filter(move |&i| !self.skipped(i))
    }

    /// The index in this stream of the frame at `position` (`None` when it is not one of its frames).
    pub fn index_of(&self, position: &crate::loss::Position) -> Option<u64> {
        use crate::loss::Position;
        match *position {
            Position::Sequence { seq } => Some(seq),
            Position::Time {
                thread,
                second,
                frame,
            } => {
                let seconds = (second as u64).checked_sub(self.first_second as u64)?;
                let n = seconds * self.frames_per_second + frame as u64;
                Some(n * self.threads as u64 + thread as u64)
            }
        }
    }

    /// Frames sent.
    pub fn frames_sent(&self) -> u64 {
        self.send_order().count() as u64
    }
}

/// Generates the frames of a [`StreamSpec`].
pub struct Generator {
    spec: StreamSpec,
    pool: Vec<u8>,
    station: u16,
}

impl Generator {
    pub fn new(spec: StreamSpec) -> Generator {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(spec.seed);
        let mut pool = vec![0u8; POOL_BYTES + spec.frame_bytes];
        rng.fill_bytes(&mut pool);
        let station = station_id(&spec.station);
        Generator {
            spec,
            pool,
            station,
        }
    }

    pub fn spec(&self) -> &StreamSpec {
        &self.spec
    }

    /// The header of frame `index`.
    pub fn header(&self, index: u64) -> Header {
        let s = &self.spec;
        let thread = (index % s.threads as u64) as u16;
        let n = index / s.threads as u64;
        Header {
            seconds: s.first_second + (n / s.frames_per_second) as u32,
            ref_epoch: s.ref_epoch,
            frame_number: (n % s.frames_per_second) as u32,
            frame_len_8: (s.frame_bytes / 8) as u32,
            bits_per_sample: 2,
            thread_id: thread,
            station_id: self.station,
            ..Header::default()
        }
    }

    /// Write frame `index` (header and samples) into `out[..frame_bytes]`.
    pub fn frame(&self, index: u64, out: &mut [u8]) {
        let fb = self.spec.frame_bytes;
        self.header(index).write(out);
        let offset = (index.wrapping_mul(0x9E37_79B9) as usize % POOL_BYTES) & !7;
        out[HEADER_BYTES..fb].copy_from_slice(&self.pool[offset..offset + fb - HEADER_BYTES]);
    }

    /// Write datagram `index` (with the `udps` prefix when the stream has one).
    pub fn datagram(&self, index: u64, out: &mut [u8]) {
        if self.spec.udps {
            out[..UDPS_PREFIX_BYTES].copy_from_slice(&index.to_le_bytes());
            self.frame(index, &mut out[UDPS_PREFIX_BYTES..]);
        } else {
            self.frame(index, out);
        }
    }
}

/// What a sender did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SendReport {
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub seconds: f64,
    /// Achieved rate in bits per second (frames only, without the `udps` prefix).
    pub rate_bits_per_second: f64,
    /// How far behind its schedule the sender fell at worst (ms): the pacing held when small.
    pub behind_ms_max: f64,
}

/// Send the stream to `target`, paced at its rate: batches of up to [`BATCH_MAX`] datagrams, each sent when its
/// first frame is due (sleeping in between, never spinning).
pub fn send(spec: &StreamSpec, target: SocketAddr) -> std::io::Result<SendReport> {
    let generator = Generator::new(spec.clone());
    let sender = BatchSender::connect(target)?;
    let stride = spec.datagram_bytes();
    let mut buf = vec![0u8; BATCH_MAX * stride];
    let frames_per_second_all = spec.frames_per_second as f64 * spec.threads as f64;
    let start = Instant::now();
    let mut order = spec.send_order().peekable();
    let (mut sent, mut behind_max) = (0u64, 0f64);
    let mut position = 0u64; // frames of the stream's timeline passed (sent or skipped)
    let mut batch = Vec::with_capacity(BATCH_MAX);
    while order.peek().is_some() {
        batch.clear();
        while batch.len() < BATCH_MAX {
            match order.next() {
                Some(i) => batch.push(i),
                None => break,
            }
        }
        let due = Duration::from_secs_f64(position as f64 / frames_per_second_all);
        let now = start.elapsed();
        if due > now {
            std::thread::sleep(due - now);
        } else {
            behind_max = behind_max.max((now - due).as_secs_f64() * 1000.0);
        }
        for (k, &i) in batch.iter().enumerate() {
            generator.datagram(i, &mut buf[k * stride..(k + 1) * stride]);
        }
        sent += sender.send(&buf, stride, batch.len())? as u64;
        position = batch.last().map_or(position, |&i| i.max(position) + 1);
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(SendReport {
        frames_sent: sent,
        bytes_sent: sent * stride as u64,
        seconds,
        rate_bits_per_second: (sent * spec.frame_bytes as u64 * 8) as f64 / seconds.max(1e-9),
        behind_ms_max: behind_max,
    })
}

/// Compares bytes read back with the frames the stream sent, in send order.
pub struct Verifier {
    generator: Generator,
    order: Vec<u64>,
    expected: Vec<u8>,
    /// Bytes compared so far.
    offset: u64,
    /// Index into `order` of the frame at `offset`, and bytes of it already compared.
    frame: usize,
    within: usize,
    mismatch: Option<u64>,
}

impl Verifier {
    pub fn new(spec: StreamSpec) -> Verifier {
        let order: Vec<u64> = spec.send_order().collect();
        let expected = vec![0u8; spec.frame_bytes];
        Verifier {
            generator: Generator::new(spec),
            order,
            expected,
            offset: 0,
            frame: 0,
            within: 0,
            mismatch: None,
        }
    }

    /// Compare the next bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        let fb = self.generator.spec().frame_bytes;
        while !data.is_empty() && self.mismatch.is_none() {
            let Some(&index) = self.order.get(self.frame) else {
                self.mismatch = Some(self.offset);
                return;
            };
            if self.within == 0 {
                self.generator.frame(index, &mut self.expected);
            }
            let n = (fb - self.within).min(data.len());
            if data[..n] != self.expected[self.within..self.within + n] {
                let at = data[..n]
                    .iter()
                    .zip(&self.expected[self.within..])
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                self.mismatch = Some(self.offset + at as u64);
                return;
            }
            self.offset += n as u64;
            self.within += n;
            data = &data[n..];
            if self.within == fb {
                self.within = 0;
                self.frame += 1;
            }
        }
    }

    /// `Ok(bytes)` when everything matched and every sent frame was there; else where it differs.
    pub fn finish(self) -> Result<u64, String> {
        let expected_bytes = self.order.len() as u64 * self.generator.spec().frame_bytes as u64;
        match self.mismatch {
            Some(at) => Err(format!("the bytes differ from what was sent at byte {at}")),
            None if self.offset != expected_bytes => Err(format!(
                "{} bytes read back, {} were sent",
                self.offset, expected_bytes
            )),
            None => Ok(self.offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdif::check_frame;

    #[test]
    fn gaps_and_swaps_change_the_send_order_only_where_asked() {
        let mut spec = StreamSpec::at_rate(8032 * 8 * 10, 1.0, 8032);
        assert_eq!(spec.frames, 10);
        spec.skip = vec![(2, 2)];
        spec.swap = vec![6];
        assert_eq!(
            spec.send_order().collect::<Vec<_>>(),
            vec![0, 1, 4, 5, 7, 6, 8, 9]
        );
        assert_eq!(spec.frames_sent(), 8);
    }

    #[test]
    fn frames_are_valid_vdif_and_the_same_wherever_generated() {
        let mut spec = StreamSpec::at_rate(1_000_000_000, 0.01, 8032);
        spec.threads = 2;
        let g = Generator::new(spec.clone());
        let mut a = vec![0u8; 8032];
        let mut b = vec![0u8; 8032];
        g.frame(77, &mut a);
        Generator::new(spec.clone()).frame(77, &mut b);
        assert_eq!(a, b);
        let h = check_frame(&a).unwrap();
        assert_eq!((h.thread_id, h.station()), (1, "Pf".to_string()));
        let mut v = Verifier::new(spec.clone());
        for i in spec.send_order() {
            g.frame(i, &mut a);
            v.update(&a[..100]);
            v.update(&a[100..]);
        }
        assert_eq!(v.finish().unwrap(), spec.frames * 8032);
        let mut v = Verifier::new(spec.clone());
        g.frame(0, &mut a);
        a[500] ^= 1;
        v.update(&a);
        assert_eq!(
            v.finish().unwrap_err(),
            "the bytes differ from what was sent at byte 500"
        );
    }
}
