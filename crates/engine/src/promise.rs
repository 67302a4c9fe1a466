//! Forward-only read and write promises (thesis §4.3.3, Fig. 4.4).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use permafrost_disk::power::WakeContext;

use crate::engine::Shared;
use crate::{Error, Result, WriteMode};

/// End of the chunk that starts at `offset`: chunks are aligned to `chunk_bytes_max` in the logical space.
fn chunk_end(offset: u64, end: u64, chunk_bytes_max: u64) -> u64 {
    ((offset / chunk_bytes_max + 1) * chunk_bytes_max).min(end)
}

/// A write of `len` bytes at `offset` of one bucket: `append` data (forward only), then `commit`.
///
/// Appended data is processed one chunk (at most `chunk_bytes_max`, one journal transaction) at a time as it
/// fills, in the caller's thread. `commit()` writes what is left (the last block zero-padded to 4096) and returns
/// when every chunk is done as the mode defines (docs/engine.md). Also implements [`std::io::Write`].
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
            shared,
            disk,
            mode,
            next_offset: offset,
            end: offset + len,
            buf: Vec::new(),
            txn_ids: Vec::new(),
            failed: false,
        }
    }

    /// The write mode.
    pub fn mode(&self) -> WriteMode {
        self.mode
    }

    /// Journal transactions of the chunks written so far (for [`crate::Engine::wait_persisted`]).
    pub fn txn_ids(&self) -> &[u64] {
        &self.txn_ids
    }

    /// Append `data`; full chunks are written now. Appending beyond the promise's length is an error.
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
        let chunk_max = self.shared.chunk_bytes_max();
        let mut data = data;
        while !data.is_empty() {
            let chunk_len =
                (chunk_end(self.next_offset, self.end, chunk_max) - self.next_offset) as usize;
            let take = (chunk_len - self.buf.len()).min(data.len());
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
        let result = self
            .shared
            .write_chunk(self.disk, self.next_offset, &self.buf, self.mode);
        match result {
            Ok(txn) => {
                self.txn_ids.push(txn);
                self.next_offset += self.buf.len() as u64;
                self.buf.clear();
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// Write what is left and return when the whole promise is committed (see the mode). Returns the txn ids.
    pub fn commit(mut self) -> Result<Vec<u64>> {
        if self.failed {
            return Err(Error::InvalidArgument("commit after a failed chunk".into()));
        }
        self.write_buffer()?;
        Ok(std::mem::take(&mut self.txn_ids))
    }

    /// Discard data not yet written. Chunks already started are complete (no rollback: thesis §4.3.3).
    pub fn abort(self) {}
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
/// Memory is bounded: a thread holds one chunk (being read, or waiting for the reader to take it) and the reader
/// one, so at most `readahead_chunks + 1` chunk buffers exist; the reader hands each one back for reuse.
pub struct ReadPromise {
    /// One rendezvous channel per read-ahead thread; chunk `k` comes from `chunks[k % chunks.len()]`.
    chunks: Vec<Receiver<Result<Vec<u8>>>>,
    /// Index of the next chunk to receive.
    next_chunk: usize,
    /// Bytes of the range not yet received.
    remaining_bytes: u64,
    current: Vec<u8>,
    pos: usize,
    /// Chunk buffers the reader is done with, for the threads to reuse (at most `readahead_chunks + 1`).
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    error: Option<String>,
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

impl ReadPromise {
    pub(crate) fn new(shared: Arc<Shared>, disk: usize, offset: u64, len: u64) -> ReadPromise {
        let threads_count = shared.readahead_chunks();
        let chunk_max = shared.chunk_bytes_max();
        let end = offset + len;
        let stop = Arc::new(AtomicBool::new(false));
        let spare = Arc::new(Mutex::new(Vec::with_capacity(threads_count + 1)));
        let mut chunks = Vec::with_capacity(threads_count);
        let mut threads = Vec::with_capacity(threads_count);
        for first in 0..threads_count {
            // Rendezvous: a finished chunk waits in its thread until the reader takes it.
            let (tx, rx) = sync_channel(0);
            chunks.push(rx);
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            let spare = Arc::clone(&spare);
            let wake = WakeContext::current(); // the reader's reason, for the spin-ups it causes
            let thread = std::thread::Builder::new()
                .name(format!("permafrost-read-{disk}"))
                .spawn(move || {
                    let _wake = WakeContext::enter_opt(wake);
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
                        let mut buf: Vec<u8> = spare.lock().pop().unwrap_or_default();
                        // Every byte is overwritten by the read: a reused buffer's old bytes never show.
                        buf.resize(want.div_ceil(4096) * 4096, 0);
                        let result = shared.read_chunk(disk, from, &mut buf).map(|()| {
                            buf.truncate(want);
                            buf
                        });
                        let failed = result.is_err();
                        if tx.send(result).is_err() || failed {
                            return;
                        }
                        k += threads_count as u64;
                    }
                })
                .expect("spawn a read-ahead thread");
            threads.push(thread);
        }
        ReadPromise {
            chunks,
            next_chunk: 0,
            remaining_bytes: len,
            current: Vec::new(),
            pos: 0,
            spare,
            stop,
            threads,
            error: None,
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
        self.remaining_bytes -= chunk.len() as u64;
        let done = std::mem::replace(&mut self.current, chunk);
        self.pos = 0;
        let mut spare = self.spare.lock();
        if done.capacity() > 0 && spare.len() <= self.chunks.len() {
            spare.push(done);
        }
        Ok(true)
    }
}

impl io::Read for ReadPromise {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = &self.error {
            return Err(io::Error::other(e.clone()));
        }
        while self.pos == self.current.len() {
            if !self.next()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.current.len() - self.pos);
        out[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Drop for ReadPromise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.chunks.clear(); // unblocks read-ahead threads waiting to send
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
