//! Reads of an open file: a producer thread streams the object from the store (cache, or the grid through one
//! spinning disk) into a bounded window ahead of the reader; FUSE read requests wait for their bytes without
//! holding a thread (an async wait that an interrupt ends with `EINTR`).
//!
//! The kernel sends sequential reads, several of them at once and not always in order (asynchronous
//! read-ahead: up to `max_background` requests spanning the mount's `read_ahead_kb`), so the window keeps
//! `BEHIND_BYTES` behind the furthest read and fills `AHEAD_BYTES` beyond it. A read far beyond the window or
//! far before it restarts the stream at its offset (a seek); a read a little before it (a late request of the
//! read-ahead) is [`Miss::Behind`]: the caller reads those bytes on their own and leaves the stream alone.
//! A closed stream (replaced by another read's restart) answers its waiting reads with [`Miss::Restart`] at
//! once, so they go on with the stream that replaced it.
//!
//! Costs per byte: the producer reads into 1 MiB buffers it reuses (a pool per stream; a fresh buffer per MiB
//! cost page faults and zeroing), and a read request inside one chunk is answered with a slice of it (no
//! copy); only a request spanning chunks is copied together.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::{Condvar, Mutex};
use permafrost_disk::power::WakeReason;
use permafrost_store::{ByteRange, ContentId, Store};
use tokio::sync::Notify;

/// Bytes streamed ahead of the furthest byte asked for.
pub const AHEAD_BYTES: u64 = 8 << 20;
/// Bytes kept behind it (reads arriving out of order).
const BEHIND_BYTES: u64 = 2 << 20;
/// A read starting this far beyond the window restarts the stream rather than reading up to it.
const JUMP_BYTES: u64 = AHEAD_BYTES;
/// A read starting at most this far before the window is a late request of the kernel's read-ahead
/// ([`Miss::Behind`]); further back it is a seek ([`Miss::Restart`]).
const LATE_BYTES: u64 = AHEAD_BYTES;
/// One read from the store.
const CHUNK_BYTES: usize = 1 << 20;
/// Chunk buffers a stream keeps for reuse: the window's, plus a few with replies in flight.
const POOL_KEPT: usize = ((AHEAD_BYTES + BEHIND_BYTES) / CHUNK_BYTES as u64) as usize + 4;

/// Chunk buffers of one stream, reused: a fresh 1 MiB buffer per chunk costs the allocator's page faults and
/// zeroing on every MiB read.
#[derive(Default)]
struct ChunkPool(Mutex<Vec<Vec<u8>>>);

impl ChunkPool {
    fn take(&self) -> Vec<u8> {
        self.0.lock().pop().unwrap_or_else(|| vec![0; CHUNK_BYTES])
    }

    fn give(&self, buf: Vec<u8>) {
        let mut pool = self.0.lock();
        if pool.len() < POOL_KEPT {
            pool.push(buf);
        }
    }
}

/// The first `len` bytes of a pooled buffer as the owner of a [`Bytes`] (no copy); back to the pool when the
/// last slice of it is dropped (a reply sent, the window trimmed).
struct PooledChunk {
    buf: Vec<u8>,
    len: usize,
    pool: Arc<ChunkPool>,
}

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

#[derive(Default)]
struct Window {
    /// Offset of the first byte of `chunks`.
    start: u64,
    chunks: VecDeque<Bytes>,
    /// Offset after the last byte of `chunks`.
    end: u64,
    /// Fill up to here.
    wanted_until: u64,
    eof: bool,
    error: Option<String>,
    /// The reader went away: the producer stops.
    closed: bool,
}

/// Why a read could not be served from this stream.
#[derive(Debug, PartialEq)]
pub enum Miss {
    /// The offset lies far outside the window, or the stream was closed: go on with the current stream, or
    /// start a new one there.
    Restart,
    /// The offset lies a little before the window (a late read-ahead request): read it on its own.
    Behind,
    /// The stream failed (the message says why; logged once by the caller).
    Failed(String),
}

/// One stream of an object from an offset on.
pub struct ReadAhead {
    window: Mutex<Window>,
    /// Producer waits here for room.
    room: Condvar,
    /// Readers wait here for bytes.
    data: Notify,
}

impl ReadAhead {
    /// Start streaming `content` (of `size_bytes`) from `offset`; disks it wakes are woken for `reason`.
    pub fn start(
        store: Arc<Store>,
        content: ContentId,
        size_bytes: u64,
        offset: u64,
        reason: WakeReason,
    ) -> Arc<Self> {
        let ahead = Arc::new(ReadAhead {
            window: Mutex::new(Window {
                start: offset,
                end: offset,
                wanted_until: offset + AHEAD_BYTES,
                eof: offset >= size_bytes,
                ..Default::default()
            }),
            room: Condvar::new(),
            data: Notify::new(),
        });
        let producer = Arc::clone(&ahead);
        let spawned = std::thread::Builder::new()
            .name("permafrost-mount-read".into())
            .spawn(move || {
                let _reason = reason.enter();
                producer.produce(&store, &content, offset, size_bytes)
            });
        if let Err(e) = spawned {
            let mut w = ahead.window.lock();
            w.error = Some(format!("cannot start a reader thread: {e}"));
        }
        ahead
    }

    fn produce(&self, store: &Store, content: &ContentId, offset: u64, size_bytes: u64) {
        if self.window.lock().eof {
            return;
        }
        let range = (offset > 0).then_some(ByteRange::From(offset));
        let mut reader = match store.open_content(content, range) {
            Ok(r) => r,
            Err(e) => return self.fail(e.to_string()),
        };
        let pool = Arc::new(ChunkPool::default());
        loop {
            {
                let mut w = self.window.lock();
                while !w.closed && w.end >= w.wanted_until {
                    self.room.wait(&mut w);
                }
                if w.closed {
                    return;
                }
            }
            let at = self.window.lock().end;
            let want = CHUNK_BYTES.min(size_bytes.saturating_sub(at).max(1) as usize);
            let mut buf = pool.take();
            let mut filled = 0;
            // Fill the chunk (sources return short reads at segment boundaries).
            let result = loop {
                match reader.read(&mut buf[filled..want]) {
                    Ok(0) => break Ok(true),
                    Ok(n) => {
                        filled += n;
                        if filled == want {
                            break Ok(false);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e.to_string()),
                }
            };
            {
                let mut w = self.window.lock();
                if filled > 0 {
                    w.end += filled as u64;
                    w.chunks.push_back(Bytes::from_owner(PooledChunk {
                        buf,
                        len: filled,
                        pool: Arc::clone(&pool),
                    }));
                }
                match &result {
                    Ok(true) => w.eof = true,
                    Ok(false) => {}
                    Err(message) => w.error = Some(message.clone()),
                }
            }
            self.data.notify_waiters();
            if result != Ok(false) {
                return;
            }
        }
    }

    fn fail(&self, message: String) {
        self.window.lock().error = Some(message);
        self.data.notify_waiters();
    }

    /// The bytes `[offset, offset + len)` (fewer at the end of the object), waiting for the producer; `Miss`
    /// when the offset is outside this stream or it failed.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes, Miss> {
        loop {
            let notified = self.data.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut w = self.window.lock();
                if w.closed || offset + LATE_BYTES < w.start || offset > w.end + JUMP_BYTES {
                    return Err(Miss::Restart);
                }
                if offset < w.start {
                    return Err(Miss::Behind);
                }
                let until = offset + len;
                if until + AHEAD_BYTES > w.wanted_until {
                    w.wanted_until = until + AHEAD_BYTES;
                    self.room.notify_one();
                }
                if w.end >= until || w.eof {
                    let out = copy_out(&w, offset, until.min(w.end));
                    trim(&mut w, offset.saturating_sub(BEHIND_BYTES));
                    return Ok(out);
                }
                if let Some(message) = &w.error {
                    return Err(Miss::Failed(message.clone()));
                }
            }
            notified.await;
        }
    }

    /// Stop the producer (the file was closed, or a new stream replaces this one); reads waiting for bytes
    /// get [`Miss::Restart`].
    pub fn close(&self) {
        self.window.lock().closed = true;
        self.room.notify_one();
        self.data.notify_waiters();
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.close();
    }
}

fn copy_out(w: &Window, from: u64, until: u64) -> Bytes {
    if until <= from {
        return Bytes::new();
    }
    let mut out = BytesMut::with_capacity((until - from) as usize);
    let mut at = w.start;
    for chunk in &w.chunks {
        let chunk_end = at + chunk.len() as u64;
        if chunk_end > from && at < until {
            let lo = from.max(at) - at;
            let hi = until.min(chunk_end) - at;
            if out.is_empty() && until <= chunk_end {
                return chunk.slice(lo as usize..hi as usize); // inside one chunk: no copy
            }
            out.extend_from_slice(&chunk[lo as usize..hi as usize]);
        }
        at = chunk_end;
        if at >= until {
            break;
        }
    }
    out.freeze()
}

/// Drop whole chunks that end before `keep_from`.
fn trim(w: &mut Window, keep_from: u64) {
    while let Some(first) = w.chunks.front() {
        let first_end = w.start + first.len() as u64;
        if first_end > keep_from {
            break;
        }
        w.start = first_end;
        w.chunks.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A stream whose window is `[start, end)` of filled bytes and no producer.
    fn stream(start: u64, end: u64) -> Arc<ReadAhead> {
        let mut chunks = VecDeque::new();
        if end > start {
            chunks.push_back(Bytes::from(vec![7u8; (end - start) as usize]));
        }
        Arc::new(ReadAhead {
            window: Mutex::new(Window {
                start,
                chunks,
                end,
                wanted_until: end + AHEAD_BYTES,
                ..Default::default()
            }),
            room: Condvar::new(),
            data: Notify::new(),
        })
    }

    #[tokio::test]
    async fn a_read_waiting_on_a_stream_that_is_closed_is_told_to_restart_at_once() {
        // Before: a read waiting for bytes of a stream that another read's restart replaced waited forever
        // (seen with the mount's read_ahead_kb raised to 4096: dd hung).
        let s = stream(0, 0);
        let waiting = tokio::spawn({
            let s = Arc::clone(&s);
            async move { s.read(1 << 20, 4096).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "no bytes yet: the read waits");
        s.close();
        let outcome = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the read still waits after the stream was closed")
            .expect("the read task");
        assert_eq!(outcome.err(), Some(Miss::Restart));
        assert_eq!(s.read(0, 1).await.err(), Some(Miss::Restart));
    }

    #[tokio::test]
    async fn late_reads_before_the_window_are_behind_and_far_ones_restart() {
        let start = 32 << 20;
        let s = stream(start, start + (2 << 20));
        assert_eq!(
            s.read(start + 10, 3).await.unwrap(),
            Bytes::from_static(&[7, 7, 7])
        );
        assert_eq!(s.read(start - 1, 4096).await.err(), Some(Miss::Behind));
        assert_eq!(
            s.read(start - LATE_BYTES, 4096).await.err(),
            Some(Miss::Behind)
        );
        assert_eq!(
            s.read(start - LATE_BYTES - 1, 4096).await.err(),
            Some(Miss::Restart)
        );
        let end = start + (2 << 20);
        assert_eq!(
            s.read(end + JUMP_BYTES + 1, 4096).await.err(),
            Some(Miss::Restart)
        );
    }

    #[test]
    fn copy_out_spans_chunks_and_trim_keeps_what_is_needed() {
        let mut w = Window {
            start: 100,
            end: 106,
            ..Default::default()
        };
        w.chunks.push_back(Bytes::from_static(b"abc"));
        w.chunks.push_back(Bytes::from_static(b"def"));
        assert_eq!(&copy_out(&w, 101, 105)[..], b"bcde");
        assert_eq!(&copy_out(&w, 103, 106)[..], b"def");
        assert_eq!(&copy_out(&w, 106, 106)[..], b"");
        trim(&mut w, 104);
        assert_eq!(w.start, 103);
        assert_eq!(&copy_out(&w, 103, 106)[..], b"def");
    }

    #[test]
    fn a_request_inside_one_chunk_is_a_slice_of_it_and_chunks_return_to_the_pool() {
        let pool = Arc::new(ChunkPool::default());
        let mut buf = pool.take();
        buf[..6].copy_from_slice(b"abcdef");
        let base = buf.as_ptr();
        let chunk = Bytes::from_owner(PooledChunk {
            buf,
            len: 6,
            pool: Arc::clone(&pool),
        });
        let mut w = Window {
            start: 100,
            end: 106,
            ..Default::default()
        };
        w.chunks.push_back(chunk);
        let part = copy_out(&w, 102, 105);
        assert_eq!(&part[..], b"cde");
        assert_eq!(
            part.as_ptr(),
            base.wrapping_add(2),
            "copied instead of sliced"
        );
        w.chunks.clear();
        assert!(
            pool.0.lock().is_empty(),
            "back in the pool while a reply still holds it"
        );
        drop(part);
        assert_eq!(pool.0.lock().len(), 1);
        let again = pool.take();
        assert_eq!(again.as_ptr(), base, "the buffer is reused");
    }
}
