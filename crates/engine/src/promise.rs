//! Forward-only read and write promises (thesis §4.3.3, Fig. 4.4).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

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

/// A forward-only read of one bucket range, implementing [`std::io::Read`]. A read-ahead thread keeps
/// `readahead_chunks` chunks in flight. A range that cannot be read or reconstructed ends the stream with an
/// error; it never yields wrong bytes.
pub struct ReadPromise {
    rx: Option<Receiver<Result<Vec<u8>>>>,
    current: Vec<u8>,
    pos: usize,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    error: Option<String>,
}

impl ReadPromise {
    pub(crate) fn new(shared: Arc<Shared>, disk: usize, offset: u64, len: u64) -> ReadPromise {
        let (tx, rx) = sync_channel(shared.readahead_chunks());
        let stop = Arc::new(AtomicBool::new(false));
        let stop_reader = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("permafrost-read-{disk}"))
            .spawn(move || {
                let chunk_max = shared.chunk_bytes_max();
                let end = offset + len;
                let mut at = offset;
                while at < end && !stop_reader.load(Ordering::SeqCst) {
                    if shared.stopped() {
                        let _ = tx.send(Err(Error::Closed));
                        return;
                    }
                    let to = chunk_end(at, end, chunk_max);
                    let want = (to - at) as usize;
                    let mut buf = vec![0u8; want.div_ceil(4096) * 4096];
                    let result = shared.read_chunk(disk, at, &mut buf).map(|()| {
                        buf.truncate(want);
                        buf
                    });
                    let failed = result.is_err();
                    if tx.send(result).is_err() || failed {
                        return;
                    }
                    at = to;
                }
            })
            .expect("spawn a read-ahead thread");
        ReadPromise {
            rx: Some(rx),
            current: Vec::new(),
            pos: 0,
            stop,
            thread: Some(thread),
            error: None,
        }
    }
}

impl io::Read for ReadPromise {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = &self.error {
            return Err(io::Error::other(e.clone()));
        }
        while self.pos == self.current.len() {
            let Some(rx) = &self.rx else { return Ok(0) };
            match rx.recv() {
                Ok(Ok(chunk)) => {
                    self.current = chunk;
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.error = Some(e.to_string());
                    return Err(io::Error::other(e));
                }
                Err(_) => {
                    self.rx = None;
                    return Ok(0);
                }
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
        self.rx = None; // unblocks a read-ahead thread waiting to send
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
