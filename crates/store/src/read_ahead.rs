//! Read-ahead and parallel decode: [`ReadAhead`] reads the chunks of a persisted chunked content (the grid read
//! and its checks) on a thread of its own, a few blocks ahead of the caller, and decodes them (zstd/lz4) on the
//! process's decode threads (`pf-decode-N`, one per core, shared by every read), several blocks at once. One
//! zstd thread decodes text at about 1.4 GB/s on the test machine, less than its disk delivers.
//!
//! **Invariants.**
//! - Order: the caller gets the range's bytes exactly in order, whatever order the decodes finish in. A block
//!   holds whole chunks (the range's part of them): consecutive chunks up to [`BLOCK_BYTES`], or one larger
//!   chunk alone.
//! - Errors keep their place: an error (of the stored read or of a chunk's decode) arrives after every byte
//!   before it, and every read after it fails too (the stream never ends cleanly after an error). A clean end
//!   is the range's end, with the stored reader's checks passed.
//! - Memory: [`BLOCKS_AHEAD`] blocks queued (decoded or being decoded, each with its stored bytes until it is
//!   decoded), one being read, and the ones the caller holds. The stored bytes of a chunk are a slice of the
//!   grid read's verified buffer, without a copy, unless the chunk lies across two buffers (then it is copied
//!   into a buffer of its run). Blocks taken whole ([`ReadAhead::take_block`],
//!   handed to the HTTP body without a copy) and stored buffers go to a process-wide pool of at most
//!   [`POOL_BLOCKS_MAX`] idle blocks when their last user drops them; new blocks come from there. No allocation
//!   per block once the pool has them.
//! - Dropping the reader stops and joins the thread (which finishes the stored read it is in); decodes still
//!   running finish on their own and their blocks go back to the pool.

use std::io::{self, Read};
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use bytes::Bytes;
use permafrost_format::{RangeChunk, StoredChunks};

use crate::read::Source;

/// Bytes per block handed from the read-ahead to the caller (at most, but for a single chunk larger than it).
pub(crate) const BLOCK_BYTES: usize = 1 << 20;
/// Blocks queued ahead of the caller, decoded or being decoded.
pub(crate) const BLOCKS_AHEAD: usize = 3;

/// Idle blocks kept for the next block at most (a new block is a fresh mapping whose pages fault in as it is
/// written: a part list would map and fault a part's blocks anew per part without the pool).
pub(crate) const POOL_BLOCKS_MAX: usize = 32;

/// The decode threads of every reader in the process: one per core (a [`rayon`] pool of its own, started at the
/// first decode). `None` when they cannot be started: then each read-ahead thread decodes its own chunks.
fn decode_threads() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
            .thread_name(|i| format!("pf-decode-{i}"))
            .build()
            .inspect_err(|e| {
                tracing::warn!(
                    "decoding on the read-ahead threads: cannot start decode threads: {e}"
                )
            })
            .ok()
    })
    .as_ref()
}

/// Idle blocks of every reader in the process.
static POOL: parking_lot::Mutex<Vec<Vec<u8>>> = parking_lot::Mutex::new(Vec::new());

/// A buffer of at least [`BLOCK_BYTES`] and how many of its bytes are the block's (`len == 0`: the clean end).
/// Back to the pool when dropped, wherever it is then (in a channel, on a thread, with the caller). Its vector
/// stays initialized at its full length, so filling it again writes no zeros first.
struct Block {
    buf: Vec<u8>,
    len: usize,
}

impl Block {
    /// A buffer of at least `bytes` (from the pool when it fits one), holding no bytes yet.
    fn take(bytes: usize) -> Block {
        let pooled = if bytes <= BLOCK_BYTES {
            POOL.lock().pop()
        } else {
            None
        };
        let buf = pooled.unwrap_or_else(|| vec![0u8; bytes.max(BLOCK_BYTES)]);
        Block { buf, len: 0 }
    }

    /// The clean end.
    fn end() -> Block {
        Block {
            buf: Vec::new(),
            len: 0,
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // Only buffers of exactly one block's size: a larger chunk's buffer is freed.
        if self.buf.len() == BLOCK_BYTES {
            let mut pool = POOL.lock();
            if pool.len() < POOL_BLOCKS_MAX {
                pool.push(std::mem::take(&mut self.buf));
            }
        }
    }
}

impl AsRef<[u8]> for Block {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A queued block: its bytes (or the error in its place), or the decode that delivers them.
enum Slot {
    Ready(io::Result<Block>),
    Decoding(Receiver<io::Result<Block>>),
}

/// A reader whose chunks are read on a thread of its own and decoded in parallel (see the module docs).
pub(crate) struct ReadAhead {
    /// Queued blocks in order; an empty block is the clean end, an error the last message.
    filled: Option<Receiver<Slot>>,
    current: Block,
    pos: usize,
    /// After an error: its kind and message, repeated by every later read.
    failed: Option<(io::ErrorKind, String)>,
    ended: bool,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    /// Start reading and decoding `chunks` ahead. Falls back to no thread (the caller decodes `chunks` itself)
    /// only if a thread cannot be started: then the error is returned with `chunks` back.
    pub(crate) fn start(
        chunks: StoredChunks<Box<dyn Source>>,
    ) -> std::result::Result<ReadAhead, (io::Error, StoredChunks<Box<dyn Source>>)> {
        let (filled_tx, filled_rx) = sync_channel::<Slot>(BLOCKS_AHEAD);
        // The thread gets `chunks` through this slot so they can be handed back when the spawn fails.
        let slot = std::sync::Arc::new(parking_lot::Mutex::new(Some(chunks)));
        let thread_slot = std::sync::Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("pf-readahead".into())
            .spawn(move || {
                let Some(chunks) = thread_slot.lock().take() else {
                    return;
                };
                drop(thread_slot);
                read_and_decode(chunks, filled_tx);
            });
        match spawned {
            Ok(thread) => Ok(ReadAhead {
                filled: Some(filled_rx),
                current: Block::end(),
                pos: 0,
                failed: None,
                ended: false,
                thread: Some(thread),
            }),
            Err(e) => {
                let chunks = slot.lock().take().expect("the thread never started");
                Err((e, chunks))
            }
        }
    }

    /// Make the next block current. False at the clean end.
    fn next_block(&mut self) -> io::Result<bool> {
        if let Some((kind, message)) = &self.failed {
            return Err(io::Error::new(*kind, message.clone()));
        }
        if self.ended {
            return Ok(false);
        }
        let received = match self.filled.as_ref().map(|rx| rx.recv()) {
            Some(Ok(Slot::Ready(result))) => Some(result),
            Some(Ok(Slot::Decoding(decode))) => decode.recv().ok(),
            _ => None,
        };
        let block = match received {
            Some(Ok(block)) => block,
            Some(Err(e)) => {
                self.failed = Some((e.kind(), e.to_string()));
                return Err(e);
            }
            None => {
                let message = "the read-ahead ended before the end of the body".to_string();
                self.failed = Some((io::ErrorKind::Other, message.clone()));
                return Err(io::Error::other(message));
            }
        };
        self.current = block;
        self.pos = 0;
        if self.current.len == 0 {
            self.ended = true;
            return Ok(false);
        }
        Ok(true)
    }
}

/// Where a chunk's stored bytes are for its decode: a slice of the source's own verified buffers (taken without
/// a copy, [`Source::take_block`]), or copied into the run's buffer at an offset (a chunk across two of them).
enum Stored {
    Shared(Bytes),
    Buffered(usize),
}

/// The read-ahead thread: reads runs of consecutive chunks and hands each run to a decode thread, queueing the
/// decode's answer in order; stops at the end, at an error (queued in its place) or when the reader is dropped.
fn read_and_decode(mut chunks: StoredChunks<Box<dyn Source>>, filled: SyncSender<Slot>) {
    loop {
        let mut buffer: Option<Block> = None;
        let mut run: Vec<(RangeChunk, Stored)> = Vec::new();
        let mut out_bytes = 0;
        let mut failure = None;
        while let Some(next) = chunks.peek() {
            if !run.is_empty() && out_bytes + next.take > BLOCK_BYTES {
                break;
            }
            let read = chunks.next_with(|source, entry| {
                let len = entry.stored_len as usize;
                let first = match source.take_block(len)? {
                    Some(whole) if whole.len() == len => return Ok(Stored::Shared(whole)),
                    first => first,
                };
                let buffer = buffer.get_or_insert_with(|| Block::take(0));
                let (from, end) = (buffer.len, buffer.len + len);
                if buffer.buf.len() < end {
                    buffer.buf.resize(end, 0);
                }
                let mut at = from;
                if let Some(part) = first {
                    buffer.buf[at..at + part.len()].copy_from_slice(&part);
                    at += part.len();
                }
                permafrost_format::read_stored(source, entry, &mut buffer.buf[at..end])?;
                buffer.len = end;
                Ok(Stored::Buffered(from))
            });
            match read {
                Ok(Some((chunk, stored))) => {
                    out_bytes += chunk.take;
                    run.push((chunk, stored));
                }
                Ok(None) => break,
                Err(e) => {
                    failure = Some(io::Error::from(e));
                    break;
                }
            }
        }
        // The chunks read before an error go first; the error (or the clean end) after them.
        if !run.is_empty() {
            let decode = move || {
                std::panic::catch_unwind(AssertUnwindSafe(|| {
                    decode_run(&run, buffer.as_ref(), out_bytes)
                }))
                .unwrap_or_else(|_| Err(io::Error::other("the decode of a chunk panicked")))
            };
            let slot = match decode_threads() {
                Some(threads) => {
                    let (tx, rx) = sync_channel(1);
                    threads.spawn(move || {
                        let _ = tx.send(decode());
                    });
                    Slot::Decoding(rx)
                }
                None => Slot::Ready(decode()),
            };
            if filled.send(slot).is_err() {
                return;
            }
        }
        if let Some(e) = failure {
            let _ = filled.send(Slot::Ready(Err(e)));
            return;
        }
        if chunks.peek().is_none() {
            let _ = filled.send(Slot::Ready(Ok(Block::end())));
            return;
        }
    }
}

/// Decodes a run of chunks (their stored bytes shared, or in `buffer`) into one block of `out_bytes`.
fn decode_run(
    run: &[(RangeChunk, Stored)],
    buffer: Option<&Block>,
    out_bytes: usize,
) -> io::Result<Block> {
    let mut out = Block::take(out_bytes);
    let mut at = 0;
    for (chunk, stored) in run {
        let bytes = match stored {
            Stored::Shared(bytes) => &bytes[..],
            Stored::Buffered(from) => {
                let buffer =
                    buffer.ok_or_else(|| io::Error::other("a chunk's stored bytes are missing"))?;
                &buffer.buf[*from..*from + chunk.entry.stored_len as usize]
            }
        };
        chunk.decode_into(bytes, &mut out.buf[at..at + chunk.take])?;
        at += chunk.take;
    }
    out.len = at;
    Ok(out)
}

impl ReadAhead {
    /// The rest of the current block (the next one when it is done) as [`Bytes`] that own it, without a copy,
    /// when it is at most `max` bytes; `None` at the clean end, or when `max` would cut the block (then `read`
    /// copies). The block goes back to the pool when the last `Bytes` of it is dropped.
    pub(crate) fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        if max == 0 {
            return Ok(None);
        }
        while self.pos == self.current.len {
            if !self.next_block()? {
                return Ok(None);
            }
        }
        if self.current.len - self.pos > max {
            return Ok(None);
        }
        let block = std::mem::replace(&mut self.current, Block::end());
        let from = std::mem::take(&mut self.pos);
        Ok(Some(Bytes::from_owner(block).slice(from..)))
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return match &self.failed {
                Some((kind, message)) => Err(io::Error::new(*kind, message.clone())),
                None => Ok(0),
            };
        }
        while self.pos == self.current.len {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.current.len - self.pos);
        buf[..n].copy_from_slice(&self.current.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing the queue ends the thread at its next send.
        self.filled = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use permafrost_format::{encode_chunks, stored_chunks, Algorithm, ChunkIndex};
    use std::io::{Seek, SeekFrom};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Stored bytes in reads of at most `step` bytes, or (`shares`) in blocks of at most `step` taken whole;
    /// a read at or after `fail_at` fails.
    struct TestSource {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        shares: bool,
        fail_at: Option<usize>,
        reads: Arc<AtomicUsize>,
    }

    impl Source for TestSource {
        fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
            if !self.shares {
                return Ok(None);
            }
            let mut block = vec![0u8; max.min(self.step)];
            let n = self.read(&mut block)?;
            block.truncate(n);
            Ok((n > 0).then(|| Bytes::from(block)))
        }
    }

    impl Read for TestSource {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if let Some(at) = self.fail_at {
                if self.pos >= at {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "damaged"));
                }
            }
            let limit = self.fail_at.unwrap_or(self.data.len()).min(self.data.len());
            let n = buf.len().min(self.step).min(limit.saturating_sub(self.pos));
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    impl Seek for TestSource {
        fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
            match to {
                SeekFrom::Start(n) => self.pos = n as usize,
                _ => return Err(io::Error::other("only seeks from the start")),
            }
            Ok(self.pos as u64)
        }
    }

    /// Text-like bytes (zstd about halves them), different per block.
    fn bytes(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"abcdefghijklmnop "[(i * 7 + i / 4093 + i * i / 65_521) % 17])
            .collect()
    }

    struct Encoded {
        data: Vec<u8>,
        index: ChunkIndex,
        stored: Vec<u8>,
    }

    fn encoded(len: usize, algorithm: Algorithm, chunk_bytes: u32) -> Encoded {
        let data = bytes(len);
        let (index, stored) = encode_chunks(&data, algorithm, chunk_bytes).unwrap();
        Encoded {
            data,
            index,
            stored,
        }
    }

    fn start(
        e: &Encoded,
        offset: u64,
        len: u64,
        step: usize,
        fail_at: Option<usize>,
    ) -> (ReadAhead, Arc<AtomicUsize>) {
        let reads = Arc::new(AtomicUsize::new(0));
        let source: Box<dyn Source> = Box::new(TestSource {
            data: e.stored.clone(),
            pos: 0,
            step,
            // Odd steps: stored bytes taken whole where a chunk fits, copied where it lies across two.
            shares: step % 2 == 1,
            fail_at,
            reads: Arc::clone(&reads),
        });
        let chunks = stored_chunks(&e.index, source, offset, len).unwrap();
        let ahead = ReadAhead::start(chunks).map_err(|(e, _)| e).unwrap();
        (ahead, reads)
    }

    #[test]
    fn bytes_arrive_in_order_whatever_the_sizes() {
        for (algorithm, chunk_bytes) in [
            (Algorithm::Zstd, 1 << 20),
            (Algorithm::Zstd, 4096),
            (Algorithm::Lz4, 3 << 20),
            (Algorithm::None, 100_000),
        ] {
            for len in [0, 1, BLOCK_BYTES - 1, BLOCK_BYTES, 5 * BLOCK_BYTES + 12_345] {
                let e = encoded(len, algorithm, chunk_bytes);
                let ranges = [(0, len), (len / 3, len - len / 3), (len / 4, len / 2)];
                for (i, (offset, n)) in ranges.into_iter().enumerate() {
                    let (step, out_step) =
                        [(1 << 20, 1 << 20), (4097, 100_000), ((3 << 20) + 1, 7)][i];
                    let (mut r, _) = start(&e, offset as u64, n as u64, step, None);
                    let mut back = Vec::new();
                    let mut buf = vec![0u8; out_step];
                    loop {
                        // Blocks taken whole and reads by copy, mixed.
                        if back.len() % 3 == 1 {
                            if let Some(block) = r.take_block(2 << 20).unwrap() {
                                back.extend_from_slice(&block);
                                continue;
                            }
                        }
                        let k = r.read(&mut buf).unwrap();
                        if k == 0 {
                            break;
                        }
                        back.extend_from_slice(&buf[..k]);
                        if out_step == 7 && back.len() > 20_000 {
                            buf = vec![0u8; 1 << 20];
                        }
                    }
                    let what =
                        format!("{algorithm} chunks of {chunk_bytes}, {offset}+{n} of {len}");
                    assert!(back == e.data[offset..offset + n], "{what}");
                    assert_eq!(r.read(&mut buf).unwrap(), 0, "stays at the end: {what}");
                }
            }
        }
    }

    #[test]
    fn a_read_error_at_any_position_comes_after_the_chunks_before_it_and_repeats() {
        let e = encoded(6 * BLOCK_BYTES + 5, Algorithm::Zstd, 256 << 10);
        let stored_len = e.stored.len();
        for (fail_at, step) in [0, 1, 300_000, stored_len / 2, stored_len - 1]
            .into_iter()
            .flat_map(|at| [(at, 65_536), (at, 200_001)])
        {
            let (mut r, _) = start(&e, 0, e.data.len() as u64, step, Some(fail_at));
            let mut back = Vec::new();
            let err = r.read_to_end(&mut back).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "at {fail_at}");
            // Every chunk whose stored bytes were read whole, and nothing after them.
            let whole = e
                .index
                .entries()
                .iter()
                .take_while(|c| (c.stored_offset + c.stored_len) as usize <= fail_at)
                .map(|c| c.logical_len as usize)
                .sum::<usize>();
            assert!(
                back == e.data[..whole],
                "at {fail_at}: {} bytes",
                back.len()
            );
            let again = r.read(&mut [0u8; 10]).unwrap_err();
            assert_eq!(again.kind(), io::ErrorKind::InvalidData);
            assert!(r.read(&mut []).is_err(), "an empty read reports it too");
            assert!(
                r.take_block(1 << 20).is_err(),
                "so does a block taken whole"
            );
        }
    }

    #[test]
    fn a_chunk_that_does_not_decode_fails_in_its_place_though_later_ones_decode() {
        let mut e = encoded(8 * BLOCK_BYTES, Algorithm::Zstd, 1 << 20);
        let bad = e.index.entries()[3];
        let middle = (bad.stored_offset + bad.stored_len / 2) as usize;
        for b in &mut e.stored[middle..middle + 64] {
            *b ^= 0x5A;
        }
        let (mut r, _) = start(&e, 0, e.data.len() as u64, (1 << 20) + 1, None);
        let mut back = Vec::new();
        let err = r.read_to_end(&mut back).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(back == e.data[..3 * BLOCK_BYTES], "{} bytes", back.len());
        assert!(r.read(&mut [0u8; 10]).is_err());
    }

    #[test]
    fn a_slow_caller_bounds_what_is_read_ahead() {
        let e = encoded(64 * BLOCK_BYTES, Algorithm::None, 1 << 20);
        let (mut r, reads) = start(&e, 0, e.data.len() as u64, BLOCK_BYTES, None);
        let mut buf = vec![0u8; 10];
        r.read_exact(&mut buf).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Queued, being read, being read by the caller (and the read that finds the queue full).
        let ahead = reads.load(Ordering::SeqCst);
        assert!(ahead <= BLOCKS_AHEAD + 3, "{ahead} chunks read ahead");
        drop(r);
        // After the drop the thread is joined: nothing reads any more.
        let after = reads.load(Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(reads.load(Ordering::SeqCst), after);
    }

    #[test]
    fn dropped_in_the_middle_stops_the_thread() {
        let e = encoded(16 * BLOCK_BYTES, Algorithm::Zstd, 1 << 20);
        for take in [0, 1, BLOCK_BYTES + 3] {
            let (mut r, reads) = start(&e, 0, e.data.len() as u64, 100_000, None);
            let mut buf = vec![0u8; take];
            r.read_exact(&mut buf).unwrap();
            assert!(buf == e.data[..take]);
            drop(r);
            let after = reads.load(Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(30));
            assert_eq!(reads.load(Ordering::SeqCst), after, "take {take}");
        }
    }
}
