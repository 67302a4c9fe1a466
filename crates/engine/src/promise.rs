//! Forward-only read and write promises (thesis §4.3.3, Fig. 4.4).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use permafrost_disk::power::WakeContext;

use crate::buffer_pool::BufferPool;
use crate::engine::Shared;
use crate::{Error, Result, WriteMode};

/// End of the chunk that starts at `offset`: chunks are aligned to `chunk_bytes_max` in the logical space.
fn chunk_end(offset: u64, end: u64, chunk_bytes_max: u64) -> u64 {
    ((offset / chunk_bytes_max + 1) * chunk_bytes_max).min(end)
}

/// A write of `len` bytes at `offset` of one bucket: `append` data (forward only), then `commit`.
///
/// Appended data is processed one chunk (at most `chunk_bytes_max`, one journal transaction) at a time as it
/// fills. By default each chunk is written in the caller's thread before `append` returns. With
/// [`WritePromise::with_chunks_in_flight`]`(n)`, up to `n` chunks are written at the same time by threads of
/// their own while the caller fills the next one: every chunk is still its own journal transaction with its own
/// range locks (consecutive chunks never overlap), so replay settles each one as it would settle chunks of
/// separate promises; the device sees `n` writes in flight instead of one. `commit()` writes what is left (the
/// last block zero-padded to 4096) and returns when every chunk is done as the mode defines (docs/engine.md).
/// Also implements [`std::io::Write`].
///
/// **Invariants.** At most `chunks_in_flight` chunk buffers are being written; the first failing chunk fails
/// the promise (later appends and `commit` return errors) and every chunk already started is finished, never
/// abandoned half-way (`abort`, drop and errors wait for them: no rollback, thesis §4.3.3).
pub struct WritePromise {
    shared: Arc<Shared>,
    disk: usize,
    mode: WriteMode,
    /// Logical offset of the first byte in `buf`.
    next_offset: u64,
    end: u64,
    buf: Vec<u8>,
    txn_ids: Vec<u64>,
    failed: bool,
    /// Bytes per chunk: `chunk_bytes_max` of the grid, or a multiple of it ([`WritePromise::with_chunk_bytes`]).
    chunk_bytes: u64,
    chunks_in_flight: usize,
    /// Chunks being written by threads, oldest first; each hands back its txn id (or error).
    in_flight: VecDeque<JoinHandle<Result<u64>>>,
    /// The chunk buffers and the chunks' working buffers, reused from one chunk to the next (about six chunks'
    /// worth per chunk in flight, freed with the promise).
    buffers: Arc<BufferPool>,
}

impl WritePromise {
    pub(crate) fn new(
        shared: Arc<Shared>,
        disk: usize,
        offset: u64,
        len: u64,
        mode: WriteMode,
    ) -> WritePromise {
        WritePromise {
            chunk_bytes: shared.chunk_bytes_max(),
            shared,
            disk,
            mode,
            next_offset: offset,
            end: offset + len,
            buf: Vec::new(),
            txn_ids: Vec::new(),
            failed: false,
            chunks_in_flight: 1,
            in_flight: VecDeque::new(),
            buffers: Arc::default(),
        }
    }

    /// Write up to `n` chunks at the same time on threads of their own (1, the default: each chunk in the
    /// caller's thread).
    pub fn with_chunks_in_flight(mut self, n: usize) -> WritePromise {
        self.chunks_in_flight = n.max(1);
        self
    }

    /// Write chunks of `bytes` (rounded down to a multiple of the grid's `chunk_bytes_max`, at least one) instead
    /// of `chunk_bytes_max`: a long sequential write pays its fixed costs per chunk — five journal steps and four
    /// disk syncs in serialized mode — once per larger unit. Chunks stay aligned to their size in the logical
    /// space (so consecutive chunks never share a stripe); memory grows with the unit (about six buffers of it
    /// per chunk in flight).
    pub fn with_chunk_bytes(mut self, bytes: u64) -> WritePromise {
        let unit = self.shared.chunk_bytes_max();
        self.chunk_bytes = (bytes / unit).max(1) * unit;
        self
    }

    /// The write mode.
    pub fn mode(&self) -> WriteMode {
        self.mode
    }

    /// Journal transactions of the chunks written so far (for [`crate::Engine::wait_persisted`]).
    pub fn txn_ids(&self) -> &[u64] {
        &self.txn_ids
    }

    /// Append `data`; full chunks are written now (or handed to a thread). Appending beyond the promise's
    /// length is an error.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        if self.failed {
            return Err(Error::InvalidArgument(
                "append after a failed chunk: the promise is finished".into(),
            ));
        }
        let room = self.end - self.next_offset - self.buf.len() as u64;
        if data.len() as u64 > room {
            return Err(Error::InvalidArgument(format!(
                "append of {} bytes exceeds the promise: {room} bytes left",
                data.len()
            )));
        }
        let chunk_max = self.chunk_bytes;
        let mut data = data;
        while !data.is_empty() {
            let chunk_len =
                (chunk_end(self.next_offset, self.end, chunk_max) - self.next_offset) as usize;
            let take = (chunk_len - self.buf.len()).min(data.len());
            self.buf.reserve(chunk_len - self.buf.len()); // once per chunk, not by doubling
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buf.len() == chunk_len {
                self.write_buffer()?;
            }
        }
        Ok(())
    }

    fn write_buffer(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let padded = self.buf.len().div_ceil(4096) * 4096;
        self.buf.resize(padded, 0);
        let offset = self.next_offset;
        self.next_offset += self.buf.len() as u64;
        if self.chunks_in_flight <= 1 {
            let result =
                self.shared
                    .write_chunk(self.disk, offset, &self.buf, self.mode, &self.buffers);
            self.buf.clear();
            return self.settle(result);
        }
        while self.in_flight.len() >= self.chunks_in_flight {
            self.join_oldest()?;
        }
        let next = self.buffers.take_empty(self.chunk_bytes as usize);
        let buf = std::mem::replace(&mut self.buf, next);
        let (shared, disk, mode) = (Arc::clone(&self.shared), self.disk, self.mode);
        let buffers = Arc::clone(&self.buffers);
        // The writer's reason (persist, rebuild, …), for the spin-ups of the chunk's disks.
        let wake = WakeContext::current();
        let spawned = std::thread::Builder::new()
            .name(format!("permafrost-write-{disk}"))
            .spawn(move || {
                let _wake = WakeContext::enter_opt(wake);
                let result = shared.write_chunk(disk, offset, &buf, mode, &buffers);
                buffers.give(buf);
                result
            });
        match spawned {
            Ok(handle) => {
                self.in_flight.push_back(handle);
                Ok(())
            }
            Err(e) => self.settle(Err(Error::Io(format!(
                "cannot start a thread to write a chunk: {e}"
            )))),
        }
    }

    /// Record one chunk's outcome (in chunk order); an error fails the promise.
    fn settle(&mut self, result: Result<u64>) -> Result<()> {
        match result {
            Ok(txn) => {
                self.txn_ids.push(txn);
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                self.join_all();
                Err(e)
            }
        }
    }

    /// Wait for the oldest chunk in flight and settle it.
    fn join_oldest(&mut self) -> Result<()> {
        let Some(handle) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let result = handle
            .join()
            .unwrap_or_else(|_| Err(Error::Io("a chunk's write thread panicked".into())));
        self.settle(result)
    }

    /// Wait for every chunk in flight (after a failure, or when the promise is dropped): started chunks finish.
    fn join_all(&mut self) {
        for handle in self.in_flight.drain(..) {
            if let Ok(Ok(txn)) = handle.join() {
                self.txn_ids.push(txn);
            }
        }
    }

    /// Write what is left and return when the whole promise is committed (see the mode). Returns the txn ids.
    pub fn commit(mut self) -> Result<Vec<u64>> {
        if self.failed {
            return Err(Error::InvalidArgument("commit after a failed chunk".into()));
        }
        self.write_buffer()?;
        while !self.in_flight.is_empty() {
            self.join_oldest()?;
        }
        Ok(std::mem::take(&mut self.txn_ids))
    }

    /// Discard data not yet written. Chunks already started are complete (no rollback: thesis §4.3.3).
    pub fn abort(self) {}
}

impl Drop for WritePromise {
    fn drop(&mut self) {
        self.join_all();
    }
}

impl io::Write for WritePromise {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.append(data).map_err(io::Error::other)?;
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A forward-only read of one bucket range, implementing [`std::io::Read`].
///
/// `readahead_chunks` read-ahead threads read and verify chunks at the same time (chunk `k` by thread
/// `k mod readahead_chunks`), so the disk read of one chunk overlaps the verification of another, and hand them
/// to the reader in order. Each chunk goes through the engine's chunk read whole (check-on-read, IDR repair,
/// reconstruction from the grid): the reader only ever sees verified bytes. A range that cannot be read or
/// reconstructed ends the stream with an error; it never yields wrong bytes, and a stream never ends short.
///
/// The disk reads go in chunk order, one at a time ([`ReadOrder`]): chunk `k`'s thread starts its read once
/// chunk `k - 1`'s disk read has completed, so the disk reads the range front to back at one request in flight,
/// as a sequential reader would, while the other threads check the chunks already read (crc32c, IDR repair) and
/// hand them over. Reads of the promise never wait for each other's checks, and the disk never has two chunks
/// of one promise in flight that would finish together, both late. The thread whose read completed leaves its
/// processor to the next chunk's thread until that one has started its read (at most [`HANDOFF_WAIT_MAX`]),
/// then checks its own chunk: on a busy machine the next read does not wait for the scheduler to find the
/// woken thread a processor while the checks and the reader's work take them all.
///
/// A promise opened while another read promise of the same disk is open whose range ends where this one's
/// begins (the next part or segment of one object, opened ahead by the store) reads after it: its first chunk
/// starts once that promise's last chunk has had its disk read, or as soon as that promise has no read to make
/// (its threads all wait for their reader), so the disk reads on across the boundary front to back instead of
/// serving both promises at once, and a reader that stopped reading holds up nobody.
///
/// Memory is bounded: a thread holds one chunk (being read, or waiting for the reader to take it) and the reader
/// one, so at most `readahead_chunks + 1` chunk buffers are in use, plus those the caller still holds slices of
/// ([`ReadPromise::take_bytes`]); each one goes back to a pool
/// shared by all promises (at most `CHUNK_BUFFERS_KEPT` idle buffers), so a new promise (every segment of a
/// GET opens one) reuses buffers instead of paying page faults and clearing for fresh ones.
///
/// Besides [`std::io::Read`] (a copy into the caller's buffer), it implements [`std::io::BufRead`]: a caller
/// that checks or copies the bytes anyway reads them in place from the chunk buffer (one copy less).
pub struct ReadPromise {
    /// One rendezvous channel per read-ahead thread; chunk `k` comes from `chunks[k % chunks.len()]`.
    chunks: Vec<Receiver<Result<ChunkBuf>>>,
    /// The order of the threads' disk reads.
    order: Arc<ReadOrder>,
    /// The order of the promise this one reads after (see above), woken when this one stops.
    after: Option<Arc<ReadOrder>>,
    /// Index of the next chunk to receive.
    next_chunk: usize,
    /// Bytes of the range not yet received.
    remaining_bytes: u64,
    /// The chunk being read, shared with the [`Bytes`] handed out of it ([`ReadPromise::take_bytes`]).
    current: Bytes,
    pos: usize,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    error: Option<String>,
    /// Counted in `Shared::readers` until dropped.
    shared: Arc<Shared>,
    disk: usize,
}

/// The order in which a read promise's threads read the disk: chunk `k` starts when every chunk before it has
/// had its first disk read completed (or is done without one).
///
/// A thread takes chunk `k`'s turn ([`ReadOrder::take_turn`]); the engine's disk stack reports each completed
/// disk read of that thread ([`disk_read_done`]), which lets the next chunk go. A chunk whose read ends without a
/// disk read (never-written space, a failed disk) lets the next one go when it ends. A thread waits for its turn
/// holding no lock and no chunk; a stopping promise or an ending thread lets every chunk go.
#[derive(Default)]
struct ReadOrder {
    state: Mutex<OrderState>,
    changed: Condvar,
}

#[derive(Default)]
struct OrderState {
    /// Every chunk before this one has had its disk read.
    next: u64,
    /// The chunks threads wait to read: this promise's own, and the first of a promise that reads after this
    /// one (numbered as if it followed this promise's last chunk).
    waiting: Vec<u64>,
    /// This promise's threads that took their turn and wait for their first disk read.
    reading: usize,
}

impl OrderState {
    /// This promise's reads are done or cannot go on now: its last chunk (of `chunks`) had its disk read, or no
    /// thread of it reads or waits to read (they all wait for their reader, or have ended).
    fn idle(&self, chunks: u64) -> bool {
        self.next >= chunks || (self.reading == 0 && self.waiting.iter().all(|&k| k >= chunks))
    }
}

thread_local! {
    /// The order and the chunk a read-ahead thread is reading, while it waits for the chunk's first disk read.
    static READING: RefCell<Option<(Arc<ReadOrder>, u64)>> = const { RefCell::new(None) };
}

/// How long a thread whose disk read completed leaves its processor to the thread of the next read before it
/// checks its own chunk (the next thread's way to its disk read takes microseconds; this bounds the wait when
/// it takes longer, e.g. for a fresh buffer).
const HANDOFF_WAIT_MAX: Duration = Duration::from_millis(2);

impl ReadOrder {
    /// Wait until chunk `k` may read (or the promise stops), then hold its turn until the thread's first disk
    /// read completes or the returned guard drops.
    fn take_turn(self: &Arc<Self>, k: u64, stop: &AtomicBool) -> ReadingChunk {
        let mut state = self.state.lock();
        state.waiting.push(k);
        while state.next < k && !stop.load(Ordering::SeqCst) {
            self.changed.wait(&mut state);
        }
        remove_one(&mut state.waiting, k);
        state.reading += 1;
        drop(state);
        READING.with(|r| *r.borrow_mut() = Some((Arc::clone(self), k)));
        ReadingChunk
    }

    /// Wait until this promise (of `chunks` chunks) is [`OrderState::idle`], for the first chunk of the promise
    /// that reads after it (or until that promise stops).
    fn wait_idle(&self, chunks: u64, stop: &AtomicBool) {
        let mut state = self.state.lock();
        state.waiting.push(chunks);
        while !state.idle(chunks) && !stop.load(Ordering::SeqCst) {
            self.changed.wait(&mut state);
        }
        remove_one(&mut state.waiting, chunks);
    }

    /// Chunk `k`'s turn is over (its first disk read completed, or it ended without one): chunks up to `k` have
    /// had their disk read and the next may start. True when a thread waits to read chunk `k + 1`.
    fn pass(&self, k: u64) -> bool {
        let mut state = self.state.lock();
        state.reading -= 1;
        state.next = state.next.max(k + 1);
        self.changed.notify_all();
        state.waiting.contains(&(k + 1))
    }

    /// The chunk the order waits for: every one before it has had its disk read.
    fn next(&self) -> u64 {
        self.state.lock().next
    }

    /// No more order: every waiting chunk may start.
    fn release(&self) {
        self.state.lock().next = u64::MAX;
        self.changed.notify_all();
    }

    /// Wake the threads waiting on this order (to see their promise stop).
    fn wake(&self) {
        let _state = self.state.lock();
        self.changed.notify_all();
    }
}

fn remove_one(list: &mut Vec<u64>, k: u64) {
    if let Some(i) = list.iter().position(|&w| w == k) {
        list.swap_remove(i);
    }
}

/// This thread's chunk read in [`ReadOrder`]; dropping it ends the chunk's turn if no disk read did.
struct ReadingChunk;

impl Drop for ReadingChunk {
    fn drop(&mut self) {
        if let Some((order, k)) = READING.with(|r| r.borrow_mut().take()) {
            order.pass(k);
        }
    }
}

/// A disk read of the calling thread completed: when it is a read promise's thread and the read was its
/// chunk's first, the chunk's turn is over and the next chunk may start reading (see [`ReadPromise`]). When the
/// next chunk's thread waits for that, this thread sleeps until `next_read_started()` says a later read of the
/// disk has started, that chunk's turn is over, or [`HANDOFF_WAIT_MAX`] has passed. Called by the engine's disk
/// stack.
pub(crate) fn disk_read_done(next_read_started: impl Fn() -> bool) {
    let Some((order, k)) = READING.with(|r| r.borrow_mut().take()) else {
        return;
    };
    if !order.pass(k) {
        return;
    }
    let deadline = Instant::now() + HANDOFF_WAIT_MAX;
    while !next_read_started() && order.next() <= k + 1 && Instant::now() < deadline {
        std::thread::sleep(HANDOFF_POLL);
    }
}

/// How often a thread that leaves its processor to the next read looks whether that read has started.
const HANDOFF_POLL: Duration = Duration::from_micros(50);

/// The open read promises' range ends per disk, so a promise opened where one ends reads after it (see
/// [`ReadPromise`]); entries of promises gone are dropped as new promises open.
#[derive(Default)]
pub(crate) struct ReadTails(Mutex<Vec<ReadTail>>);

struct ReadTail {
    disk: usize,
    end: u64,
    chunks: u64,
    order: Weak<ReadOrder>,
}

impl ReadTails {
    /// Register a promise of `disk` over `[offset, end)` in `chunks` chunks; returns the order of the open
    /// promise it reads after, and that promise's chunk count, when one ends at `offset`.
    fn register(
        &self,
        disk: usize,
        offset: u64,
        end: u64,
        chunks: u64,
        order: &Arc<ReadOrder>,
    ) -> Option<(Arc<ReadOrder>, u64)> {
        let mut tails = self.0.lock();
        tails.retain(|t| t.order.strong_count() > 0);
        let before = tails
            .iter()
            .position(|t| t.disk == disk && t.end == offset)
            .map(|i| tails.swap_remove(i))
            .and_then(|t| Some((t.order.upgrade()?, t.chunks)));
        tails.push(ReadTail {
            disk,
            end,
            chunks,
            order: Arc::downgrade(order),
        });
        before
    }
}

/// Idle chunk buffers kept for read promises to reuse (engine-wide; 8 MiB each by default).
const CHUNK_BUFFERS_KEPT: usize = 8;

static CHUNK_BUFFERS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A read promise's chunk: the first `len` bytes of a pooled buffer of a whole chunk's size. The buffer keeps
/// its size whatever the chunk's, so a short chunk (a range's last) does not cost the next full one a clearing
/// of the rest (a `Vec` truncated and resized again writes zeros over it). The buffer goes back to the pool when
/// the chunk drops: when the last [`Bytes`] of it drops, once the reader has it.
struct ChunkBuf {
    buf: Vec<u8>,
    len: usize,
}

/// Alignment of a chunk's first byte (a cache line): the disk layer copies verified blocks into it with
/// streaming stores, which need it.
const CHUNK_ALIGN: usize = 64;

impl ChunkBuf {
    /// A chunk of `len` bytes (a multiple of 4096), in a pooled buffer of at least `capacity` bytes when one is
    /// idle, else a fresh one. Its bytes are stale: the read overwrites every one.
    fn take(len: usize, capacity: usize) -> ChunkBuf {
        let pooled = CHUNK_BUFFERS
            .lock()
            .pop()
            .filter(|b| b.len() >= len + CHUNK_ALIGN);
        let buf = pooled.unwrap_or_else(|| vec![0; capacity.max(len) + CHUNK_ALIGN]);
        ChunkBuf { buf, len }
    }

    /// Where the chunk starts in the buffer: its first [`CHUNK_ALIGN`]-aligned byte.
    fn start(&self) -> usize {
        self.buf.as_ptr().align_offset(CHUNK_ALIGN)
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        let start = self.start();
        &mut self.buf[start..start + self.len]
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl AsRef<[u8]> for ChunkBuf {
    fn as_ref(&self) -> &[u8] {
        let start = self.start();
        &self.buf[start..start + self.len]
    }
}

impl Drop for ChunkBuf {
    /// Back to the pool (dropped when the pool is full).
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let mut pool = CHUNK_BUFFERS.lock();
        if !buf.is_empty() && pool.len() < CHUNK_BUFFERS_KEPT {
            pool.push(buf);
        }
    }
}

/// Chunk `k` of `[offset, end)`: chunks are aligned to `chunk_bytes_max` in the logical space, so the first may
/// be short. `None` past the end.
fn chunk_range(offset: u64, end: u64, chunk_bytes_max: u64, k: u64) -> Option<(u64, u64)> {
    let first_boundary = (offset / chunk_bytes_max + 1) * chunk_bytes_max;
    let from = if k == 0 {
        offset
    } else {
        first_boundary + (k - 1) * chunk_bytes_max
    };
    (from < end).then(|| (from, chunk_end(from, end, chunk_bytes_max)))
}

/// The number of chunks of `[offset, end)` ([`chunk_range`]).
fn chunk_count(offset: u64, end: u64, chunk_bytes_max: u64) -> u64 {
    if end <= offset {
        return 0;
    }
    let first_boundary = (offset / chunk_bytes_max + 1) * chunk_bytes_max;
    1 + end.saturating_sub(first_boundary).div_ceil(chunk_bytes_max)
}

impl ReadPromise {
    pub(crate) fn new(shared: Arc<Shared>, disk: usize, offset: u64, len: u64) -> ReadPromise {
        let threads_count = shared.readahead_chunks();
        let chunk_max = shared.chunk_bytes_max();
        let end = offset + len;
        let stop = Arc::new(AtomicBool::new(false));
        let order = Arc::new(ReadOrder::default());
        let chunks_count = chunk_count(offset, end, chunk_max);
        let after = shared
            .read_tails
            .register(disk, offset, end, chunks_count, &order);
        shared.readers[disk].fetch_add(1, Ordering::SeqCst);
        let mut chunks = Vec::with_capacity(threads_count);
        let mut threads = Vec::with_capacity(threads_count);
        for first in 0..threads_count {
            // Rendezvous: a finished chunk waits in its thread until the reader takes it.
            let (tx, rx) = sync_channel(0);
            chunks.push(rx);
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            let order = Arc::clone(&order);
            // The first chunk's thread reads after the promise this one follows.
            let after = after.clone().filter(|_| first == 0);
            let wake = WakeContext::current(); // the reader's reason, for the spin-ups it causes
            let thread = std::thread::Builder::new()
                .name(format!("permafrost-read-{disk}"))
                .spawn(move || {
                    let _wake = WakeContext::enter_opt(wake);
                    // A thread that ends before its last chunk (stopped, an error, the reader gone) lets every
                    // later chunk go: none waits for a read that will not come.
                    struct Release {
                        order: Arc<ReadOrder>,
                        finished: bool,
                    }
                    impl Drop for Release {
                        fn drop(&mut self) {
                            if !self.finished {
                                self.order.release();
                            }
                        }
                    }
                    let mut release = Release {
                        order: Arc::clone(&order),
                        finished: false,
                    };
                    let mut k = first as u64;
                    while let Some((from, to)) = chunk_range(offset, end, chunk_max, k) {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        if shared.stopped() {
                            let _ = tx.send(Err(Error::Closed));
                            return;
                        }
                        let want = (to - from) as usize;
                        // Every byte is overwritten by the read: a reused buffer's old bytes never show.
                        let mut buf =
                            ChunkBuf::take(want.div_ceil(4096) * 4096, chunk_max as usize);
                        if let (0, Some((before, before_chunks))) = (k, &after) {
                            before.wait_idle(*before_chunks, &stop);
                        }
                        let reading = order.take_turn(k, &stop);
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let read = shared.read_chunk(disk, from, buf.as_mut_slice());
                        drop(reading);
                        let result = read.map(|()| {
                            buf.truncate(want);
                            buf
                        });
                        let failed = result.is_err();
                        if tx.send(result).is_err() {
                            return; // the reader is gone (the buffer went back to the pool)
                        }
                        if failed {
                            return;
                        }
                        k += threads_count as u64;
                    }
                    release.finished = true;
                })
                .expect("spawn a read-ahead thread");
            threads.push(thread);
        }
        ReadPromise {
            chunks,
            order,
            after: after.map(|(before, _)| before),
            next_chunk: 0,
            remaining_bytes: len,
            current: Bytes::new(),
            pos: 0,
            stop,
            threads,
            error: None,
            shared,
            disk,
        }
    }

    /// Make the next chunk current. False at the end of the range.
    fn next(&mut self) -> io::Result<bool> {
        if self.remaining_bytes == 0 {
            return Ok(false);
        }
        let rx = &self.chunks[self.next_chunk % self.chunks.len()];
        let chunk = match rx.recv() {
            Ok(Ok(chunk)) => chunk,
            Ok(Err(e)) => {
                self.error = Some(e.to_string());
                return Err(io::Error::other(e));
            }
            Err(_) => {
                let message = format!(
                    "a read-ahead thread ended with {} bytes of the range not read",
                    self.remaining_bytes
                );
                self.error = Some(message.clone());
                return Err(io::Error::other(message));
            }
        };
        self.next_chunk += 1;
        self.remaining_bytes -= chunk.len as u64;
        // The previous chunk's buffer goes back to the pool once no slice of it is held any more.
        self.current = Bytes::from_owner(chunk);
        self.pos = 0;
        Ok(true)
    }

    /// The next verified bytes (at most `max`; empty only at the end of the range or for `max` 0) without a
    /// copy: a slice of the current chunk, consumed as [`io::BufRead::consume`] would. The chunk buffer returns
    /// to the pool when the promise and every slice of it are done with it.
    pub fn take_bytes(&mut self, max: usize) -> io::Result<Bytes> {
        let n = io::BufRead::fill_buf(self)?.len().min(max);
        let bytes = self.current.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(bytes)
    }
}

impl io::Read for ReadPromise {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = io::BufRead::fill_buf(self)?;
        let n = out.len().min(available.len());
        out[..n].copy_from_slice(&available[..n]);
        io::BufRead::consume(self, n);
        Ok(n)
    }
}

impl io::BufRead for ReadPromise {
    /// The verified bytes of the current chunk not yet consumed (empty at the end of the range).
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if let Some(e) = &self.error {
            return Err(io::Error::other(e.clone()));
        }
        while self.pos == self.current.len() {
            if !self.next()? {
                return Ok(&[]);
            }
        }
        Ok(&self.current[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.current.len());
    }
}

impl Drop for ReadPromise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.order.release(); // unblocks read-ahead threads waiting for their turn
        if let Some(before) = &self.after {
            before.wake(); // and the first chunk's thread waiting for the promise before this one
        }
        self.chunks.clear(); // unblocks read-ahead threads waiting to send
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.current = Bytes::new();
        self.shared.readers[self.disk].fetch_sub(1, Ordering::SeqCst);
        // A spin-up scrub slice may be waiting for this disk's readers.
        self.shared.notify();
    }
}
