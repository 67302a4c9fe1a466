//! Reads of an open file: a producer thread streams the object from the store (cache, or the grid through one
//! spinning disk) into a bounded window ahead of the reader; FUSE read requests wait for their bytes without
//! holding a thread (an async wait that an interrupt ends with `EINTR`).
//!
//! The kernel sends sequential reads, a few of them at once and not always in order (asynchronous
//! read-ahead), so the window keeps `BEHIND_BYTES` behind the furthest read and fills `AHEAD_BYTES` beyond it;
//! a read outside the window restarts the stream at its offset (a seek).

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
const JUMP_BYTES: u64 = 4 << 20;
/// One read from the store.
const CHUNK_BYTES: usize = 1 << 20;

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
pub enum Miss {
    /// The offset lies outside the window: start a new stream there.
    Restart,
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
            let mut buf =
                BytesMut::zeroed(CHUNK_BYTES.min(size_bytes.saturating_sub(at).max(1) as usize));
            let mut filled = 0;
            // Fill the chunk (sources return short reads at segment boundaries).
            let result = loop {
                match reader.read(&mut buf[filled..]) {
                    Ok(0) => break Ok(true),
                    Ok(n) => {
                        filled += n;
                        if filled == buf.len() {
                            break Ok(false);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e.to_string()),
                }
            };
            buf.truncate(filled);
            {
                let mut w = self.window.lock();
                if filled > 0 {
                    w.end += filled as u64;
                    w.chunks.push_back(buf.freeze());
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
                if offset < w.start || offset > w.end + JUMP_BYTES {
                    return Err(Miss::Restart);
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

    /// Stop the producer (the file was closed, or a new stream replaces this one).
    pub fn close(&self) {
        self.window.lock().closed = true;
        self.room.notify_one();
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
            if lo == 0 && hi == chunk.len() as u64 && out.is_empty() && until == chunk_end {
                return chunk.clone(); // one whole chunk: no copy
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
}
