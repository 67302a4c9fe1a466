//! Read-ahead on a thread of its own: [`ReadAhead`] runs a reader (the decoding of a persisted chunked content:
//! the grid read, its extent checks and the zstd/lz4 decode) on one thread, a few blocks ahead of the caller, so
//! the decode of the next bytes overlaps what the caller does with the current ones (the end check, the copy into
//! the HTTP body).
//!
//! **Invariants.**
//! - Order: the caller gets the inner reader's bytes exactly in order; blocks are filled whole except the last.
//! - Errors keep their place: an error of the inner reader arrives after every byte it delivered before it, and
//!   every read after it fails too (the stream never ends cleanly after an error). A clean end is the inner
//!   reader's clean end (`Ok(0)`, its end checks passed).
//! - Memory: at most [`BLOCKS_AHEAD`] + 2 blocks of [`BLOCK_BYTES`] per reader (queued, being filled, being
//!   read), recycled between the two threads; no allocation per block once they exist.
//! - Dropping the reader stops and joins the thread (which finishes the inner read it is in).
//!
//! [`ChunkDecode`] decodes a cached chunked content's independent chunks on [`DECODE_WORKERS`] threads of its
//! own (worker k decodes chunks k, k + N, k + 2N, … of the range, reading their stored bytes with positioned
//! reads of the cache file), and hands the decoded chunks to the caller in order. A compressible GET from the
//! cache is bound by the zstd decode (about 1 GB/s per core on high-entropy text, twice the cost of the rest of
//! the GET); on two workers the decode of one stream uses both cores. Same invariants as [`ReadAhead`]: order;
//! errors keep their place (a chunk that fails to read or decode fails the read at that chunk, after the bytes
//! before it, and every later read); memory at most [`DECODE_WORKERS`] × 3 decoded chunks (one queued, one
//! being decoded, one being read by the caller) plus one stored chunk per worker, recycled; dropping the
//! reader stops and joins the workers. Decoded bytes are copied once, into the caller's buffer (as a decode on
//! the caller's thread does).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use permafrost_format::{decode_chunk, ChunkIndex};

/// Bytes per block handed from the read-ahead thread to the caller.
pub(crate) const BLOCK_BYTES: usize = 1 << 20;
/// Filled blocks queued ahead of the caller.
pub(crate) const BLOCKS_AHEAD: usize = 3;

/// A reader whose inner reader runs on a thread of its own (see the module docs).
pub(crate) struct ReadAhead {
    /// Filled blocks in order; an empty block is the clean end, an error the last message.
    filled: Option<Receiver<io::Result<Vec<u8>>>>,
    /// Blocks the caller is done with, back to the thread.
    empties: Option<Sender<Vec<u8>>>,
    current: Vec<u8>,
    pos: usize,
    /// After an error: its kind and message, repeated by every later read.
    failed: Option<(io::ErrorKind, String)>,
    ended: bool,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    /// Start reading `inner` ahead. Falls back to no thread (the caller reads `inner` itself) only if a thread
    /// cannot be started: then the error is returned with `inner` back.
    pub(crate) fn start(
        inner: Box<dyn Read + Send>,
    ) -> std::result::Result<ReadAhead, (io::Error, Box<dyn Read + Send>)> {
        let (filled_tx, filled_rx) = sync_channel::<io::Result<Vec<u8>>>(BLOCKS_AHEAD);
        let (empty_tx, empty_rx) = channel::<Vec<u8>>();
        // The thread gets `inner` through this slot so it can be handed back when the spawn fails.
        let slot = std::sync::Arc::new(parking_lot::Mutex::new(Some(inner)));
        let thread_slot = std::sync::Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("permafrost-readahead".into())
            .spawn(move || {
                let Some(mut inner) = thread_slot.lock().take() else {
                    return;
                };
                drop(thread_slot);
                let mut made = 0usize;
                loop {
                    let mut block = match empty_rx.try_recv() {
                        Ok(block) => block,
                        Err(_) if made < BLOCKS_AHEAD + 2 => {
                            made += 1;
                            vec![0u8; BLOCK_BYTES]
                        }
                        Err(_) => match empty_rx.recv() {
                            Ok(block) => block,
                            Err(_) => return, // the caller is gone
                        },
                    };
                    block.resize(BLOCK_BYTES, 0);
                    let mut n = 0;
                    let mut failure = None;
                    while n < block.len() {
                        match inner.read(&mut block[n..]) {
                            Ok(0) => break,
                            Ok(k) => n += k,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                    block.truncate(n);
                    let end = n == 0 || failure.is_some();
                    // The bytes read before an error go first; the error (or the clean end) after them.
                    if n > 0 && filled_tx.send(Ok(block)).is_err() {
                        return;
                    }
                    if let Some(e) = failure {
                        let _ = filled_tx.send(Err(e));
                        return;
                    }
                    if end {
                        let _ = filled_tx.send(Ok(Vec::new()));
                        return;
                    }
                }
            });
        match spawned {
            Ok(thread) => Ok(ReadAhead {
                filled: Some(filled_rx),
                empties: Some(empty_tx),
                current: Vec::new(),
                pos: 0,
                failed: None,
                ended: false,
                thread: Some(thread),
            }),
            Err(e) => {
                let inner = slot.lock().take().expect("the thread never started");
                Err((e, inner))
            }
        }
    }

    /// Make the next filled block current. False at the clean end.
    fn next_block(&mut self) -> io::Result<bool> {
        if let Some((kind, message)) = &self.failed {
            return Err(io::Error::new(*kind, message.clone()));
        }
        if self.ended {
            return Ok(false);
        }
        let received = match self.filled.as_ref() {
            Some(rx) => rx.recv(),
            None => return Ok(false),
        };
        let block = match received {
            Ok(Ok(block)) => block,
            Ok(Err(e)) => {
                self.failed = Some((e.kind(), e.to_string()));
                return Err(e);
            }
            Err(_) => {
                let message = "the read-ahead thread ended before the end of the body".to_string();
                self.failed = Some((io::ErrorKind::Other, message.clone()));
                return Err(io::Error::other(message));
            }
        };
        let done = std::mem::replace(&mut self.current, block);
        self.pos = 0;
        if done.capacity() > 0 {
            if let Some(tx) = self.empties.as_ref() {
                let _ = tx.send(done);
            }
        }
        if self.current.is_empty() {
            self.ended = true;
            return Ok(false);
        }
        Ok(true)
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
        while self.pos == self.current.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing both channels ends the thread at its next send or wait.
        self.filled = None;
        self.empties = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Threads decoding one [`ChunkDecode`].
pub(crate) const DECODE_WORKERS: usize = 2;
/// Decoded chunks a worker queues ahead of the caller.
const DECODED_QUEUED: usize = 1;

/// One decoding worker: its decoded chunks in order (an error is its last message), and the buffers the
/// caller is done with.
struct DecodeWorker {
    filled: Option<Receiver<io::Result<Vec<u8>>>>,
    empties: Option<Sender<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

/// A cached chunked content's logical bytes `[offset, offset + len)`, decoded on [`DECODE_WORKERS`] threads
/// (see the module docs).
pub(crate) struct ChunkDecode {
    workers: Vec<DecodeWorker>,
    /// The worker of the next chunk.
    next_worker: usize,
    /// The decoded chunk being read, the position in it, and its worker.
    current: Vec<u8>,
    pos: usize,
    current_worker: Option<usize>,
    /// Bytes of the first chunk before the range.
    skip: usize,
    /// Bytes still to deliver.
    remaining: u64,
    /// After an error: its kind and message, repeated by every later read.
    failed: Option<(io::ErrorKind, String)>,
}

impl ChunkDecode {
    /// Start decoding bytes `[offset, offset + len)` of the content whose stored bytes are `file` (a cache
    /// file) and whose chunks are `index`. The range must lie within the index (the caller resolved it).
    pub(crate) fn start(
        file: File,
        index: &ChunkIndex,
        offset: u64,
        len: u64,
    ) -> io::Result<ChunkDecode> {
        let entries = index.entries();
        let first = index.chunk_at(offset).unwrap_or(entries.len());
        let skip = entries
            .get(first)
            .map_or(0, |e| (offset - e.logical_offset) as usize);
        let end = offset + len;
        let last = if len == 0 {
            first
        } else {
            index.chunk_at(end - 1).map_or(entries.len(), |i| i + 1)
        };
        let chunks: Arc<Vec<_>> = Arc::new(entries[first.min(last)..last].to_vec());
        let file = Arc::new(file);
        let mut workers = Vec::with_capacity(DECODE_WORKERS);
        for k in 0..DECODE_WORKERS.min(chunks.len().max(1)) {
            let (filled_tx, filled_rx) = sync_channel::<io::Result<Vec<u8>>>(DECODED_QUEUED);
            let (empty_tx, empty_rx) = channel::<Vec<u8>>();
            let chunks = Arc::clone(&chunks);
            let file = Arc::clone(&file);
            let spawned = std::thread::Builder::new()
                .name("permafrost-decode".into())
                .spawn(move || {
                    let mut stored = Vec::new();
                    let mut made = 0usize;
                    for entry in chunks.iter().skip(k).step_by(DECODE_WORKERS) {
                        let mut out = match empty_rx.try_recv() {
                            Ok(buf) => buf,
                            Err(_) if made < DECODED_QUEUED + 2 => {
                                made += 1;
                                Vec::new()
                            }
                            Err(_) => match empty_rx.recv() {
                                Ok(buf) => buf,
                                Err(_) => return, // the caller is gone
                            },
                        };
                        stored.resize(entry.stored_len as usize, 0);
                        let decoded = file
                            .read_exact_at(&mut stored, entry.stored_offset)
                            .map_err(|e| {
                                io::Error::new(
                                    e.kind(),
                                    format!(
                                        "cache file: chunk at stored offset {}: {e}",
                                        entry.stored_offset
                                    ),
                                )
                            })
                            .and_then(|()| {
                                decode_chunk(entry, &stored, &mut out)
                                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
                            });
                        match decoded {
                            Ok(()) => {
                                if filled_tx.send(Ok(out)).is_err() {
                                    return;
                                }
                            }
                            Err(e) => {
                                let _ = filled_tx.send(Err(e));
                                return;
                            }
                        }
                    }
                });
            let thread = spawned?;
            workers.push(DecodeWorker {
                filled: Some(filled_rx),
                empties: Some(empty_tx),
                thread: Some(thread),
            });
        }
        Ok(ChunkDecode {
            workers,
            next_worker: 0,
            current: Vec::new(),
            pos: 0,
            current_worker: None,
            skip,
            remaining: len,
            failed: None,
        })
    }

    fn fail(&mut self, kind: io::ErrorKind, message: String) -> io::Error {
        self.failed = Some((kind, message.clone()));
        io::Error::new(kind, message)
    }

    /// Make the next decoded chunk current.
    fn next_chunk(&mut self) -> io::Result<()> {
        let done = std::mem::take(&mut self.current);
        if let Some(w) = self.current_worker.take() {
            if let Some(tx) = self.workers[w].empties.as_ref() {
                let _ = tx.send(done);
            }
        }
        let w = self.next_worker;
        let received = match self.workers.get(w).and_then(|w| w.filled.as_ref()) {
            Some(rx) => rx.recv(),
            None => {
                return Err(self.fail(io::ErrorKind::Other, "no decoding worker".into()));
            }
        };
        match received {
            Ok(Ok(chunk)) => {
                self.current = chunk;
                self.current_worker = Some(w);
                self.next_worker = (w + 1) % self.workers.len();
                self.pos = std::mem::take(&mut self.skip);
                if self.pos >= self.current.len() {
                    return Err(self.fail(
                        io::ErrorKind::InvalidData,
                        "a decoded chunk ended before the range".into(),
                    ));
                }
                Ok(())
            }
            Ok(Err(e)) => Err(self.fail(e.kind(), e.to_string())),
            Err(_) => Err(self.fail(
                io::ErrorKind::UnexpectedEof,
                "the cached content's chunks ended before the range".into(),
            )),
        }
    }
}

impl Read for ChunkDecode {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some((kind, message)) = &self.failed {
            return Err(io::Error::new(*kind, message.clone()));
        }
        if buf.is_empty() || self.remaining == 0 {
            return Ok(0);
        }
        if self.pos == self.current.len() {
            self.next_chunk()?;
        }
        let n = buf
            .len()
            .min(self.current.len() - self.pos)
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        self.remaining -= n as u64;
        Ok(n)
    }
}

impl Drop for ChunkDecode {
    fn drop(&mut self) {
        // Closing the channels ends each worker at its next send or wait.
        for w in &mut self.workers {
            w.filled = None;
            w.empties = None;
        }
        for w in &mut self.workers {
            if let Some(thread) = w.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// `data` in reads of at most `step` bytes, then `end` (`None`: a clean end) once `fail_at` bytes are read.
    struct Source {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        fail_at: Option<usize>,
        reads: Arc<AtomicUsize>,
    }

    impl Read for Source {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if let Some(at) = self.fail_at {
                if self.pos >= at {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "damaged"));
                }
            }
            let limit = self.fail_at.unwrap_or(self.data.len()).min(self.data.len());
            let n = buf.len().min(self.step).min(limit - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    fn source(data: &[u8], step: usize, fail_at: Option<usize>) -> (Box<Source>, Arc<AtomicUsize>) {
        let reads = Arc::new(AtomicUsize::new(0));
        let s = Source {
            data: data.to_vec(),
            pos: 0,
            step,
            fail_at,
            reads: Arc::clone(&reads),
        };
        (Box::new(s), reads)
    }

    #[test]
    fn bytes_arrive_in_order_whatever_the_sizes() {
        for len in [0, 1, BLOCK_BYTES - 1, BLOCK_BYTES, 5 * BLOCK_BYTES + 12_345] {
            let data = bytes(len);
            for (step, out_step) in [(1 << 20, 1 << 20), (4097, 100_000), (3 << 20, 7)] {
                let (s, _) = source(&data, step, None);
                let mut r = ReadAhead::start(s).map_err(|(e, _)| e).unwrap();
                let mut back = Vec::new();
                let mut buf = vec![0u8; out_step];
                loop {
                    let n = r.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    back.extend_from_slice(&buf[..n]);
                    if out_step == 7 && back.len() > 20_000 {
                        buf = vec![0u8; 1 << 20];
                    }
                }
                assert!(back == data, "len {len}, step {step}, out {out_step}");
                assert_eq!(r.read(&mut buf).unwrap(), 0, "stays at the end");
            }
        }
    }

    #[test]
    fn an_error_at_any_position_comes_after_the_bytes_before_it_and_repeats() {
        let data = bytes(4 * BLOCK_BYTES + 5);
        for fail_at in [
            0,
            1,
            BLOCK_BYTES - 1,
            BLOCK_BYTES,
            2 * BLOCK_BYTES + 3,
            data.len(),
        ] {
            let (s, _) = source(&data, 65_536, Some(fail_at));
            let mut r = ReadAhead::start(s).map_err(|(e, _)| e).unwrap();
            let mut back = Vec::new();
            let err = r.read_to_end(&mut back).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "at {fail_at}");
            assert!(
                back == data[..fail_at],
                "at {fail_at}: {} bytes",
                back.len()
            );
            let again = r.read(&mut [0u8; 10]).unwrap_err();
            assert_eq!(again.kind(), io::ErrorKind::InvalidData);
            assert!(r.read(&mut []).is_err(), "an empty read reports it too");
        }
    }

    #[test]
    fn a_slow_caller_bounds_what_is_read_ahead() {
        let data = bytes(64 * BLOCK_BYTES);
        let (s, reads) = source(&data, BLOCK_BYTES, None);
        let mut r = ReadAhead::start(s).map_err(|(e, _)| e).unwrap();
        let mut buf = vec![0u8; 10];
        r.read_exact(&mut buf).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Queued, being filled, being read (and the read that finds the queue full).
        let ahead = reads.load(Ordering::SeqCst);
        assert!(ahead <= BLOCKS_AHEAD + 3, "{ahead} blocks read ahead");
        drop(r);
        // After the drop the thread is joined: nothing reads any more.
        let after = reads.load(Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(reads.load(Ordering::SeqCst), after);
    }

    #[test]
    fn dropped_in_the_middle_stops_the_thread() {
        let data = bytes(16 * BLOCK_BYTES);
        for take in [0, 1, BLOCK_BYTES + 3] {
            let (s, reads) = source(&data, 100_000, None);
            let mut r = ReadAhead::start(s).map_err(|(e, _)| e).unwrap();
            let mut buf = vec![0u8; take];
            r.read_exact(&mut buf).unwrap();
            assert!(buf == data[..take]);
            drop(r);
            let after = reads.load(Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(30));
            assert_eq!(reads.load(Ordering::SeqCst), after, "take {take}");
        }
    }

    /// Half-compressible bytes (zstd saves about half; some chunks of `raw_every` stored raw).
    fn text(len: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if (i >> 18) % 5 == 3 {
                    (x >> 24) as u8 // incompressible stretch: stored raw inside the chunked form
                } else {
                    b"abcdefghijklmnop "[(x >> 40) as usize % 17]
                }
            })
            .collect()
    }

    fn cached(data: &[u8], chunk_bytes: u32) -> (tempfile::NamedTempFile, ChunkIndex) {
        let (index, stored) =
            permafrost_format::encode_chunks(data, permafrost_format::Algorithm::Zstd, chunk_bytes)
                .unwrap();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, &stored).unwrap();
        (file, index)
    }

    #[test]
    fn chunks_decoded_in_parallel_arrive_in_order_for_any_range() {
        let data = text(5 * (256 << 10) + 12_345);
        let (file, index) = cached(&data, 256 << 10);
        assert!(index.entries().len() >= 6);
        let len = data.len() as u64;
        for (offset, n) in [
            (0, len),
            (1, len - 1),
            (0, 1),
            (256 << 10, 256 << 10),
            ((256 << 10) - 1, 2),
            (300_000, 700_001),
            (len - 1, 1),
            (len, 0),
        ] {
            for out_step in [7, 100_000, 1 << 20] {
                let f = File::open(file.path()).unwrap();
                let mut r = ChunkDecode::start(f, &index, offset, n).unwrap();
                let mut back = Vec::new();
                let mut buf = vec![0u8; out_step];
                loop {
                    let k = r.read(&mut buf).unwrap();
                    if k == 0 {
                        break;
                    }
                    back.extend_from_slice(&buf[..k]);
                }
                let want = &data[offset as usize..(offset + n) as usize];
                assert!(back == want, "offset {offset}, len {n}, out {out_step}");
                assert_eq!(r.read(&mut buf).unwrap(), 0, "stays at the end");
            }
        }
    }

    #[test]
    fn a_damaged_or_missing_chunk_fails_at_its_place_and_repeats() {
        let chunk = 256 << 10;
        let data = text(6 * chunk);
        let (file, index) = cached(&data, chunk as u32);
        let damaged_chunk = index.entries()[2];
        assert_eq!(damaged_chunk.algorithm, permafrost_format::Algorithm::Zstd);
        // Damage chunk 2 (its first stored bytes: a zstd frame header that no longer parses).
        let damaged = tempfile::NamedTempFile::new().unwrap();
        let mut stored = std::fs::read(file.path()).unwrap();
        for b in &mut stored
            [damaged_chunk.stored_offset as usize..damaged_chunk.stored_offset as usize + 8]
        {
            *b ^= 0x5a;
        }
        std::fs::write(damaged.path(), &stored).unwrap();
        // A truncated file: chunk 2 and later are missing.
        let short = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            short.path(),
            &stored[..damaged_chunk.stored_offset as usize + 3],
        )
        .unwrap();
        for (path, kind) in [
            (damaged.path(), io::ErrorKind::InvalidData),
            (short.path(), io::ErrorKind::UnexpectedEof),
        ] {
            let f = File::open(path).unwrap();
            let mut r = ChunkDecode::start(f, &index, 0, data.len() as u64).unwrap();
            let mut back = Vec::new();
            let err = r.read_to_end(&mut back).unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
            assert!(
                back == data[..3 * chunk],
                "{} bytes before the error",
                back.len()
            );
            assert_eq!(r.read(&mut [0u8; 10]).unwrap_err().kind(), kind);
        }
    }

    #[test]
    fn dropped_in_the_middle_stops_the_workers() {
        let data = text(32 * (64 << 10));
        let (file, index) = cached(&data, 64 << 10);
        for take in [0, 1, (64 << 10) + 3] {
            let f = File::open(file.path()).unwrap();
            let mut r = ChunkDecode::start(f, &index, 0, data.len() as u64).unwrap();
            let mut buf = vec![0u8; take];
            r.read_exact(&mut buf).unwrap();
            assert!(buf == data[..take]);
            drop(r); // joins the workers: returns only when they stopped
        }
    }
}
