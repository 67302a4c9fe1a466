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
//! - Memory: [`BLOCKS_AHEAD`] filled blocks of [`BLOCK_BYTES`] queued, one being filled, and the ones the caller
//!   holds: read by copy, a block goes back to the thread when the caller is done with it; taken whole
//!   ([`ReadAhead::take_block`], handed to the HTTP body without a copy), it goes to a process-wide pool of at
//!   most [`POOL_BLOCKS_MAX`] idle blocks when its last user drops it, and the thread takes its next block from
//!   there. No allocation per block once the pool has them.
//! - Dropping the reader stops and joins the thread (which finishes the inner read it is in).

use std::io::{self, Read};

use bytes::Bytes;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::thread::JoinHandle;

/// Bytes per block handed from the read-ahead thread to the caller.
pub(crate) const BLOCK_BYTES: usize = 1 << 20;
/// Filled blocks queued ahead of the caller.
pub(crate) const BLOCKS_AHEAD: usize = 3;

/// Idle blocks kept for the next reader at most (a new block is a fresh mapping whose pages fault in as the
/// decoder writes them: a part list would map and fault a part's blocks anew per part without the pool).
pub(crate) const POOL_BLOCKS_MAX: usize = 16;

/// Idle blocks of every reader in the process.
static POOL: parking_lot::Mutex<Vec<Vec<u8>>> = parking_lot::Mutex::new(Vec::new());

/// A block of [`BLOCK_BYTES`] (or empty: the clean end), back to the pool when dropped, wherever it is then (in
/// a channel, on the thread, with the caller).
struct Block(Vec<u8>);

impl Block {
    /// A block from the pool, else a new one.
    fn take() -> Block {
        Block(POOL.lock().pop().unwrap_or_else(|| vec![0u8; BLOCK_BYTES]))
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if self.0.capacity() >= BLOCK_BYTES {
            let mut pool = POOL.lock();
            if pool.len() < POOL_BLOCKS_MAX {
                pool.push(std::mem::take(&mut self.0));
            }
        }
    }
}

/// A reader whose inner reader runs on a thread of its own (see the module docs).
pub(crate) struct ReadAhead {
    /// Filled blocks in order; an empty block is the clean end, an error the last message.
    filled: Option<Receiver<io::Result<Block>>>,
    /// Blocks the caller is done with, back to the thread.
    empties: Option<Sender<Block>>,
    current: Block,
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
        let (filled_tx, filled_rx) = sync_channel::<io::Result<Block>>(BLOCKS_AHEAD);
        let (empty_tx, empty_rx) = channel::<Block>();
        // The thread gets `inner` through this slot so it can be handed back when the spawn fails.
        let slot = std::sync::Arc::new(parking_lot::Mutex::new(Some(inner)));
        let thread_slot = std::sync::Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("pf-readahead".into())
            .spawn(move || {
                let Some(mut inner) = thread_slot.lock().take() else {
                    return;
                };
                drop(thread_slot);
                loop {
                    // A block the caller is done with, else one from the pool: the number of blocks is bounded
                    // by the queue (a send waits while it is full) and by what the caller holds, not here.
                    let mut block = empty_rx.try_recv().unwrap_or_else(|_| Block::take());
                    block.0.resize(BLOCK_BYTES, 0);
                    let mut n = 0;
                    let mut failure = None;
                    while n < block.0.len() {
                        match inner.read(&mut block.0[n..]) {
                            Ok(0) => break,
                            Ok(k) => n += k,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                    block.0.truncate(n);
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
                        let _ = filled_tx.send(Ok(Block(Vec::new())));
                        return;
                    }
                }
            });
        match spawned {
            Ok(thread) => Ok(ReadAhead {
                filled: Some(filled_rx),
                empties: Some(empty_tx),
                current: Block(Vec::new()),
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
        if done.0.capacity() > 0 {
            if let Some(tx) = self.empties.as_ref() {
                let _ = tx.send(done);
            }
        }
        if self.current.0.is_empty() {
            self.ended = true;
            return Ok(false);
        }
        Ok(true)
    }
}

impl ReadAhead {
    /// The rest of the current block (the next one when it is done) as [`Bytes`] that own it, without a copy,
    /// when it is at most `max` bytes; `None` at the clean end, or when `max` would cut the block (then `read`
    /// copies). The block goes back to the pool when the last `Bytes` of it is dropped.
    pub(crate) fn take_block(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        if max == 0 {
            return Ok(None);
        }
        while self.pos == self.current.0.len() {
            if !self.next_block()? {
                return Ok(None);
            }
        }
        if self.current.0.len() - self.pos > max {
            return Ok(None);
        }
        let block = std::mem::replace(&mut self.current, Block(Vec::new()));
        let from = std::mem::take(&mut self.pos);
        Ok(Some(Bytes::from_owner(block).slice(from..)))
    }
}

impl AsRef<[u8]> for Block {
    fn as_ref(&self) -> &[u8] {
        &self.0
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
        while self.pos == self.current.0.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.current.0.len() - self.pos);
        buf[..n].copy_from_slice(&self.current.0[self.pos..self.pos + n]);
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
}
