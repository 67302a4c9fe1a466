//! The read pipeline: a large read's stored bytes are read ahead, and its compressed chunks decoded, on threads of
//! their own, so the reader (the HTTP body, the mount) only copies verified bytes out. The read-side twin of the
//! upload pipeline (`pipeline.rs`).
//!
//! A [`BlockStream`] is one of two shapes:
//! - **read-ahead** ([`BlockStream::read_ahead`]): one thread reads a `Read` (a cache file, a grid source that
//!   checks each extent's crc32c and BLAKE3 while it streams, a stream decoder) in blocks of
//!   [`READ_BLOCK_BYTES`], at most [`READ_QUEUE_BLOCKS`] queued;
//! - **chunk decode** ([`BlockStream::decode_chunks`]): one thread reads the stored bytes of a chunked content one
//!   chunk at a time (the chunk index says where each starts and ends) and deals them round-robin to
//!   [`decode_lanes`] lanes that decode independent zstd/lz4 frames at the same time; the reader takes the
//!   decoded chunks round-robin from the lanes, so the order is the stored order.
//!
//! **Invariants.**
//! - Order is kept: block `k` is delivered before block `k + 1` (one queue per lane, filled and drained in the
//!   same round-robin order).
//! - Errors keep their place: a failure reading or decoding chunk `k` (a short stored stream, a crc32c or BLAKE3
//!   mismatch the source reports, a frame that does not decode to its indexed length) is what the reader gets
//!   after the bytes of chunks `< k` and instead of any later byte; the stream never ends cleanly after it. A
//!   stream that ends cleanly read its source to the end (`verify_to_end`: one more read of the source after the
//!   last chunk, so a checking source runs its last extent's checks before the reader sees end-of-file).
//! - Memory is bounded per reader: read-ahead holds at most `READ_QUEUE_BLOCKS + 2` blocks; chunk decode at most
//!   `2 · lanes + 1` stored and `2 · lanes + 1` decoded chunks (chunks are ≤ `CHUNK_BYTES_MAX`, 1 MiB by
//!   default). In total at most [`PIPELINED_READERS_MAX`] readers have a pipeline at once; a reader that finds
//!   none free reads on the caller's thread (same bytes, same checks), so nothing ever waits for a permit.
//! - Dropping a stream stops its threads and joins them (after at most one block or chunk each).

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use permafrost_format::{decode_chunk, ChunkEntry};

/// Bytes the read-ahead thread reads at a time.
pub const READ_BLOCK_BYTES: usize = 1 << 20;
/// Blocks queued between the read-ahead thread and the reader.
pub const READ_QUEUE_BLOCKS: usize = 4;
/// Readers with a pipeline at the same time (further ones read on the caller's thread).
pub const PIPELINED_READERS_MAX: usize = 16;
/// Reads shorter than this stay on the caller's thread (a thread costs more than it saves).
pub const PIPELINE_MIN_BYTES: u64 = 2 << 20;
/// Decode lanes of one reader at most.
pub const DECODE_LANES_MAX: usize = 4;

static PIPELINED_READERS: AtomicUsize = AtomicUsize::new(0);

/// `BlockStream::remaining` of a stream that returns everything up to its clean end.
const UNBOUNDED: u64 = u64::MAX;

/// Decode lanes per reader: one per core, at least one (decoding then overlaps the reader's copying), at most
/// [`DECODE_LANES_MAX`].
pub fn decode_lanes() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, DECODE_LANES_MAX)
}

/// One of the [`PIPELINED_READERS_MAX`] pipelines, returned when the stream is dropped.
pub(crate) struct Permit(());

impl Permit {
    /// A permit if one is free (never waits).
    pub(crate) fn try_take() -> Option<Permit> {
        PIPELINED_READERS
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < PIPELINED_READERS_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit(()))
    }

    /// A permit for a read of `len` bytes, if it is worth a pipeline and one is free.
    pub(crate) fn for_read(len: u64) -> Option<Permit> {
        (len >= PIPELINE_MIN_BYTES).then(Permit::try_take).flatten()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        PIPELINED_READERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Buffers a stream's threads reuse (a fresh 1 MiB buffer costs page faults and clearing). `created` counts the
/// buffers ever allocated: with every buffer handed back, it is the most that were alive at once.
struct Buffers {
    spare: Mutex<Vec<Vec<u8>>>,
    keep: usize,
    created: AtomicUsize,
}

impl Buffers {
    fn new(keep: usize) -> Arc<Buffers> {
        Arc::new(Buffers {
            spare: Mutex::new(Vec::with_capacity(keep)),
            keep,
            created: AtomicUsize::new(0),
        })
    }

    fn take(&self) -> Vec<u8> {
        if let Some(buf) = self.spare.lock().pop() {
            return buf;
        }
        self.created.fetch_add(1, Ordering::Relaxed);
        Vec::new()
    }

    /// Hand back a buffer. Its bytes stay (so a `resize` to the next block's size clears nothing): every user
    /// overwrites what it keeps (`fill` then `truncate`, `decode_chunk` clears first).
    fn give(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let mut spare = self.spare.lock();
        if spare.len() < self.keep {
            spare.push(buf);
        }
    }
}

/// A block, or `None` at a clean end; an error ends the stream.
type Message = io::Result<Option<Vec<u8>>>;

/// Work for a decode lane.
enum Job {
    Chunk(ChunkEntry, Vec<u8>),
    End,
    Fail(io::Error),
}

enum State {
    Open,
    Ended,
    Failed(io::ErrorKind, String),
}

/// Blocks from threads, in order; see the module doc.
pub(crate) struct BlockStream {
    /// Block `k` comes from `outs[k % outs.len()]`.
    outs: Vec<Receiver<Message>>,
    next: usize,
    current: Vec<u8>,
    pos: usize,
    /// Bytes still to drop from the front of the stream.
    skip: u64,
    /// Bytes still to return ([`UNBOUNDED`]: up to the clean end).
    remaining: u64,
    state: State,
    stop: Arc<AtomicBool>,
    buffers: Arc<Buffers>,
    threads: Vec<JoinHandle<()>>,
    _permit: Permit,
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(f)
}

/// Read into `buf` until it is full or `reader` ends; returns the bytes read.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// [`fill`] that keeps what was read before an error: `(bytes read, the error)`.
fn fill_until_error(reader: &mut impl Read, buf: &mut [u8]) -> (usize, Option<io::Error>) {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (filled, Some(e)),
        }
    }
    (filled, None)
}

impl BlockStream {
    fn new(
        outs: Vec<Receiver<Message>>,
        skip: u64,
        remaining: u64,
        stop: Arc<AtomicBool>,
        buffers: Arc<Buffers>,
        permit: Permit,
    ) -> BlockStream {
        BlockStream {
            outs,
            next: 0,
            current: Vec::new(),
            pos: 0,
            skip,
            remaining,
            state: State::Open,
            stop,
            buffers,
            threads: Vec::new(),
            _permit: permit,
        }
    }

    /// All of `reader`'s bytes, read ahead on a thread of its own.
    pub(crate) fn read_ahead<R: Read + Send + 'static>(
        mut reader: R,
        permit: Permit,
    ) -> io::Result<BlockStream> {
        let (tx, rx) = sync_channel::<Message>(READ_QUEUE_BLOCKS);
        let stop = Arc::new(AtomicBool::new(false));
        let buffers = Buffers::new(READ_QUEUE_BLOCKS + 2);
        let mut stream = BlockStream::new(
            vec![rx],
            0,
            UNBOUNDED,
            Arc::clone(&stop),
            Arc::clone(&buffers),
            permit,
        );
        let wake = permafrost_disk::power::WakeContext::current();
        stream.threads.push(spawn("permafrost-read-ahead", move || {
            let _wake = permafrost_disk::power::WakeContext::enter_opt(wake);
            while !stop.load(Ordering::Relaxed) {
                let mut buf = buffers.take();
                buf.resize(READ_BLOCK_BYTES, 0);
                let (n, error) = fill_until_error(&mut reader, &mut buf);
                buf.truncate(n);
                if n > 0 && tx.send(Ok(Some(buf))).is_err() {
                    return;
                }
                match error {
                    Some(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                    None if n == 0 => {
                        let _ = tx.send(Ok(None));
                        return;
                    }
                    None => {}
                }
            }
        })?);
        Ok(stream)
    }

    /// Logical bytes `[skip, skip + len)` of the chunks `entries` (consecutive entries of a chunk index), whose
    /// stored bytes `stored` delivers from the first entry's stored offset on. `verify_to_end`: after the last
    /// chunk, read `stored` once more so a checking source finishes its checks before the stream ends.
    pub(crate) fn decode_chunks<R: Read + Send + 'static>(
        entries: Vec<ChunkEntry>,
        mut stored: R,
        skip: u64,
        len: u64,
        verify_to_end: bool,
        lanes: usize,
        permit: Permit,
    ) -> io::Result<BlockStream> {
        let lanes = lanes.max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let buffers = Buffers::new(4 * lanes + 2);
        let mut inputs = Vec::with_capacity(lanes);
        let mut outs = Vec::with_capacity(lanes);
        let mut lane_threads = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            let (job_tx, job_rx) = sync_channel::<Job>(1);
            let (out_tx, out_rx) = sync_channel::<Message>(1);
            inputs.push(job_tx);
            outs.push(out_rx);
            let buffers = Arc::clone(&buffers);
            lane_threads.push((lane, job_rx, out_tx, buffers));
        }
        let mut stream = BlockStream::new(
            outs,
            skip,
            len,
            Arc::clone(&stop),
            Arc::clone(&buffers),
            permit,
        );
        for (lane, jobs, out, buffers) in lane_threads {
            stream
                .threads
                .push(spawn(&format!("permafrost-decode-{lane}"), move || {
                    decode_lane(&jobs, &out, &buffers)
                })?);
        }
        let wake = permafrost_disk::power::WakeContext::current();
        stream.threads.push(spawn("permafrost-read-chunks", move || {
            let _wake = permafrost_disk::power::WakeContext::enter_opt(wake);
            let to = |k: usize, job: Job| inputs[k % inputs.len()].send(job).is_ok();
            for (k, entry) in entries.iter().enumerate() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let mut buf = buffers.take();
                buf.resize(entry.stored_len as usize, 0);
                match fill(&mut stored, &mut buf) {
                    Ok(n) if n as u64 == entry.stored_len => {
                        if !to(k, Job::Chunk(*entry, buf)) {
                            return;
                        }
                    }
                    Ok(n) => {
                        let e = io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "stored bytes end at {} inside a chunk of {} bytes at stored offset {}",
                                entry.stored_offset + n as u64,
                                entry.stored_len,
                                entry.stored_offset
                            ),
                        );
                        to(k, Job::Fail(e));
                        return;
                    }
                    Err(e) => {
                        to(k, Job::Fail(e));
                        return;
                    }
                }
            }
            let k = entries.len();
            if verify_to_end {
                if let Err(e) = stored.read(&mut [0u8; 1]) {
                    to(k, Job::Fail(e));
                    return;
                }
            }
            to(k, Job::End);
        })?);
        Ok(stream)
    }

    /// Peak buffers this stream's threads had alive at once (with every buffer handed back).
    #[cfg(test)]
    fn buffers_created(&self) -> usize {
        self.buffers.created.load(Ordering::Relaxed)
    }

    /// Receive the next block into `current`. False at the clean end.
    fn next_block(&mut self) -> io::Result<bool> {
        match &self.state {
            State::Open => {}
            State::Ended => return Ok(false),
            State::Failed(kind, message) => return Err(io::Error::new(*kind, message.clone())),
        }
        // The current block is used up: its buffer goes back before the next one is taken.
        self.buffers.give(std::mem::take(&mut self.current));
        self.pos = 0;
        let message = self.outs[self.next % self.outs.len()]
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("a read pipeline thread ended early")));
        self.next += 1;
        match message {
            Ok(Some(block)) => {
                self.current = block;
                if self.skip > 0 {
                    let dropped = self.skip.min(self.current.len() as u64);
                    self.pos = dropped as usize;
                    self.skip -= dropped;
                }
                Ok(true)
            }
            Ok(None) => {
                self.state = State::Ended;
                Ok(false)
            }
            Err(e) => {
                self.state = State::Failed(e.kind(), e.to_string());
                Err(e)
            }
        }
    }
}

fn decode_lane(jobs: &Receiver<Job>, out: &SyncSender<Message>, buffers: &Buffers) {
    while let Ok(job) = jobs.recv() {
        let message = match job {
            Job::Chunk(entry, stored) => {
                let mut decoded = buffers.take();
                let result = decode_chunk(&entry, &stored, &mut decoded);
                buffers.give(stored);
                result
                    .map(|()| Some(decoded))
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
            }
            Job::End => Ok(None),
            Job::Fail(e) => Err(e),
        };
        let last = !matches!(message, Ok(Some(_)));
        if out.send(message).is_err() || last {
            return;
        }
    }
}

impl Read for BlockStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.remaining == 0 {
                // Wait for the end mark (or the error of a last check) before reporting the end.
                while self.next_block()? {}
                return Ok(0);
            }
            if self.pos < self.current.len() {
                let n = buf
                    .len()
                    .min(self.current.len() - self.pos)
                    .min(self.remaining.min(usize::MAX as u64) as usize);
                buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
                self.pos += n;
                if self.remaining != UNBOUNDED {
                    self.remaining -= n as u64;
                }
                return Ok(n);
            }
            if !self.next_block()? {
                if self.remaining != UNBOUNDED && self.remaining > 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the stored bytes ended {} bytes early", self.remaining),
                    ));
                }
                return Ok(0);
            }
        }
    }
}

impl Drop for BlockStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.outs.clear(); // unblocks threads waiting to hand over a block
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use permafrost_format::{encode_chunks, Algorithm, ChunkIndex};
    use rand::{Rng, SeedableRng};

    /// Compressible bytes with some structure (so chunks differ).
    fn text(len: usize, seed: u64) -> Vec<u8> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let words: [&[u8]; 5] = [b"telescope ", b"baseline ", b"fringe ", b"0123 ", b"\n"];
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            out.extend_from_slice(words[rng.gen_range(0..words.len())]);
            if rng.gen_bool(0.05) {
                out.push(rng.gen());
            }
        }
        out.truncate(len);
        out
    }

    fn chunked(logical: &[u8], algorithm: Algorithm, chunk_bytes: u32) -> (ChunkIndex, Vec<u8>) {
        encode_chunks(logical, algorithm, chunk_bytes).unwrap()
    }

    fn permit() -> Permit {
        // Tests run in parallel: a permit that is busy elsewhere would only make the test flaky.
        PIPELINED_READERS.fetch_add(1, Ordering::SeqCst);
        Permit(())
    }

    /// Decode logical `[offset, offset + len)` through the pipeline, as `read.rs` does.
    fn decode(
        index: &ChunkIndex,
        stored: Vec<u8>,
        offset: u64,
        len: u64,
        lanes: usize,
    ) -> io::Result<Vec<u8>> {
        let first = index.chunk_at(offset).unwrap();
        let last = index.chunk_at(offset + len - 1).unwrap();
        let entries = index.entries()[first..=last].to_vec();
        let skip = offset - entries[0].logical_offset;
        let mut source = io::Cursor::new(stored);
        source.set_position(entries[0].stored_offset);
        let mut stream =
            BlockStream::decode_chunks(entries, source, skip, len, true, lanes, permit())?;
        let mut out = Vec::new();
        stream.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn chunks_come_back_in_order_whatever_the_lanes() {
        let logical = text(3 << 20, 1);
        for algorithm in [Algorithm::Zstd, Algorithm::Lz4] {
            let (index, stored) = chunked(&logical, algorithm, 64 << 10);
            assert!(index.entries().len() > 40);
            for lanes in [1, 2, 3, 4] {
                let out = decode(&index, stored.clone(), 0, logical.len() as u64, lanes).unwrap();
                assert!(out == logical, "{algorithm:?}, {lanes} lanes");
            }
        }
    }

    #[test]
    fn ranges_across_chunk_boundaries() {
        let logical = text(1 << 20, 2);
        let chunk = 32 << 10;
        let (index, stored) = chunked(&logical, Algorithm::Zstd, chunk);
        let c = chunk as u64;
        let n = logical.len() as u64;
        let mut cases = vec![
            (0, 1),
            (c - 1, 2),
            (c, c),
            (c - 1, c + 2),
            (3 * c + 17, 5 * c),
            (n - 1, 1),
            (n - c - 3, c + 3),
            (0, n),
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for _ in 0..40 {
            let offset = rng.gen_range(0..n);
            let len = rng.gen_range(1..=n - offset);
            cases.push((offset, len));
        }
        for (offset, len) in cases {
            let out = decode(&index, stored.clone(), offset, len, 2).unwrap();
            assert!(
                out[..] == logical[offset as usize..(offset + len) as usize],
                "range {offset}+{len}"
            );
        }
    }

    /// A reader that hands back what it was given, then fails the way a checking source does at the end of a
    /// damaged extent.
    struct FailsAtEnd(io::Cursor<Vec<u8>>);

    impl Read for FailsAtEnd {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.read(buf)? {
                0 if !buf.is_empty() => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "extent: crc32c mismatch",
                )),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn corruption_in_any_chunk_fails_before_the_end() {
        let logical = text(512 << 10, 3);
        let (index, stored) = chunked(&logical, Algorithm::Zstd, 32 << 10);
        let n = index.entries().len();
        for k in 0..n {
            let entry = index.entries()[k];
            let mut damaged = stored.clone();
            // Break the frame: zstd's content checksum or structure catches it, or the length differs.
            let at = (entry.stored_offset + entry.stored_len / 2) as usize;
            damaged[at] ^= 0x5a;
            damaged[at + 1] ^= 0xa5;
            for lanes in [1, 3] {
                let entries = index.entries().to_vec();
                let mut stream = BlockStream::decode_chunks(
                    entries,
                    io::Cursor::new(damaged.clone()),
                    0,
                    logical.len() as u64,
                    true,
                    lanes,
                    permit(),
                )
                .unwrap();
                let mut out = Vec::new();
                let result = stream.read_to_end(&mut out);
                if let Ok(len) = result {
                    // A flip zstd cannot notice (no frame checksum) must at least not pass as the original.
                    assert!(out != logical, "chunk {k}: {len} bytes passed unnoticed");
                } else {
                    assert!(
                        out.len() as u64 <= entry.logical_offset,
                        "chunk {k}: bytes of the damaged chunk or later were delivered"
                    );
                    assert_eq!(out[..], logical[..out.len()]);
                }
            }
        }
        // The source's own check at the end (verify_to_end) is an error, not a clean end.
        let mut stream = BlockStream::decode_chunks(
            index.entries().to_vec(),
            FailsAtEnd(io::Cursor::new(stored.clone())),
            0,
            logical.len() as u64,
            true,
            2,
            permit(),
        )
        .unwrap();
        let mut out = Vec::new();
        let e = stream.read_to_end(&mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(out, logical, "every byte before the failed check");
        // A stored stream that ends inside a chunk.
        let mut stream = BlockStream::decode_chunks(
            index.entries().to_vec(),
            io::Cursor::new(stored[..stored.len() - 3].to_vec()),
            0,
            logical.len() as u64,
            true,
            2,
            permit(),
        )
        .unwrap();
        assert!(stream.read_to_end(&mut Vec::new()).is_err());
    }

    #[test]
    fn read_ahead_keeps_bytes_and_errors() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let mut bytes = vec![0u8; 5 * READ_BLOCK_BYTES + 12345];
        rng.fill(&mut bytes[..]);
        let mut stream = BlockStream::read_ahead(io::Cursor::new(bytes.clone()), permit()).unwrap();
        let mut out = Vec::new();
        // Small reads: the copy-out works at any size.
        let mut small = [0u8; 1000];
        loop {
            let n = stream.read(&mut small).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&small[..n]);
        }
        assert_eq!(out, bytes);
        let mut stream =
            BlockStream::read_ahead(FailsAtEnd(io::Cursor::new(bytes.clone())), permit()).unwrap();
        let mut out = Vec::new();
        assert!(stream.read_to_end(&mut out).is_err());
        assert_eq!(out, bytes);
        assert!(
            stream.read(&mut small).is_err(),
            "a failed stream stays failed"
        );
    }

    #[test]
    fn memory_is_bounded_whatever_the_reader_pace() {
        // A slow reader of a long stream: the threads run ahead only as far as the queues allow.
        let logical = text(8 << 20, 5);
        let (index, stored) = chunked(&logical, Algorithm::Lz4, 64 << 10);
        let lanes = 3;
        let mut stream = BlockStream::decode_chunks(
            index.entries().to_vec(),
            io::Cursor::new(stored),
            0,
            logical.len() as u64,
            true,
            lanes,
            permit(),
        )
        .unwrap();
        let mut buf = vec![0u8; 16 << 10];
        let mut seen = 0;
        while let n @ 1.. = stream.read(&mut buf).unwrap() {
            seen += n;
            if seen % (1 << 20) < buf.len() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        assert_eq!(seen, logical.len());
        let bound = 2 * (2 * lanes + 1);
        assert!(
            stream.buffers_created() <= bound,
            "{} buffers for a bound of {bound}",
            stream.buffers_created()
        );
        let mut bytes = vec![7u8; 20 * READ_BLOCK_BYTES];
        bytes[0] = 1;
        let mut stream = BlockStream::read_ahead(io::Cursor::new(bytes), permit()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut small = [0u8; 4096];
        while stream.read(&mut small).unwrap() > 0 {}
        assert!(stream.buffers_created() <= READ_QUEUE_BLOCKS + 2);
    }

    #[test]
    fn dropping_a_stream_midway_stops_its_threads() {
        let logical = text(4 << 20, 6);
        let (index, stored) = chunked(&logical, Algorithm::Zstd, 64 << 10);
        let mut stream = BlockStream::decode_chunks(
            index.entries().to_vec(),
            io::Cursor::new(stored),
            0,
            logical.len() as u64,
            true,
            2,
            permit(),
        )
        .unwrap();
        let mut buf = vec![0u8; 100_000];
        stream.read_exact(&mut buf).unwrap();
        assert_eq!(buf[..], logical[..buf.len()]);
        drop(stream); // joins: a hang here fails the test by timeout
    }

    #[test]
    fn permits_are_bounded_and_returned() {
        let taken: Vec<Permit> = std::iter::from_fn(Permit::try_take)
            .take(PIPELINED_READERS_MAX + 5)
            .collect();
        assert!(taken.len() <= PIPELINED_READERS_MAX);
        assert!(Permit::try_take().is_none());
        drop(taken);
        assert!(Permit::for_read(PIPELINE_MIN_BYTES).is_some());
        assert!(Permit::for_read(PIPELINE_MIN_BYTES - 1).is_none());
    }
}
