//! [`pipe_sink`]: a [`Sink`] that streams a copy into a store as it arrives, with no spool file; and its mirror
//! [`pipe_source`], which streams a stored object out for a parity rebuild as it is read.
//!
//! The store runs on a thread of its own and reads the pieces through a bounded channel, so the memory
//! bound of the relay holds: at most [`QUEUE_PIECES`] pieces wait in the channel, plus the one the store is
//! reading and the one being handed over. A slow store slows the stream (and its parent) instead of growing
//! a buffer.
//!
//! Nothing becomes visible unless every byte arrived: a sink dropped without [`Sink::finish`] (a broken
//! stream, a corrupt piece) makes the store's reader fail with "the copy was abandoned after N of M bytes",
//! so a store that stops at its first read error stores nothing. `finish` ends the stream (the reader sees
//! the end of the object only after exactly `object_bytes`) and returns the store's own result.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::node::{Sink, QUEUE_PIECES};

enum Message {
    Bytes(Vec<u8>),
    /// Every byte was sent: the reader reports the end of the object.
    End,
}

/// The store's side of the pipe.
struct PipeReader {
    rx: Receiver<Message>,
    current: Vec<u8>,
    position: usize,
    /// Bytes that came through the channel.
    arrived: u64,
    object_bytes: u64,
    /// Bytes handed to the store (shared with the sink, which checks them at `finish`).
    delivered: Arc<AtomicU64>,
    ended: bool,
}

impl Read for PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.position == self.current.len() {
            if self.ended {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(Message::Bytes(bytes)) => {
                    self.arrived += bytes.len() as u64;
                    self.current = bytes;
                    self.position = 0;
                }
                Ok(Message::End) => self.ended = true,
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "the copy was abandoned after {} of {} bytes",
                            self.arrived, self.object_bytes
                        ),
                    ))
                }
            }
        }
        let n = buf.len().min(self.current.len() - self.position);
        buf[..n].copy_from_slice(&self.current[self.position..self.position + n]);
        self.position += n;
        self.delivered.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

struct PipeSink {
    object_bytes: u64,
    /// Bytes written to the pipe so far.
    sent: u64,
    /// `None` once the stream ended (finished or abandoned).
    tx: Option<SyncSender<Message>>,
    store: Option<JoinHandle<io::Result<()>>>,
    delivered: Arc<AtomicU64>,
}

impl PipeSink {
    /// Wait for the store to end and return its result.
    fn join(&mut self) -> io::Result<()> {
        match self.store.take() {
            None => Err(io::Error::other("the store already ended")),
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the store panicked"))),
        }
    }

    /// The store stopped taking bytes: its own error, or a generic one if it claimed success.
    fn stopped(&mut self) -> io::Error {
        self.tx = None;
        match self.join() {
            Err(e) => e,
            Ok(()) => io::Error::other(format!(
                "the store ended after reading {} of {} bytes",
                self.delivered.load(Ordering::Relaxed),
                self.object_bytes
            )),
        }
    }
}

impl Sink for PipeSink {
    fn write_piece(&mut self, _index: u64, payload: &[u8]) -> io::Result<()> {
        if self.sent + payload.len() as u64 > self.object_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} bytes would exceed the object's {} bytes",
                    self.sent + payload.len() as u64,
                    self.object_bytes
                ),
            ));
        }
        let Some(tx) = self.tx.as_ref() else {
            return Err(io::Error::other("the stream already ended"));
        };
        if tx.send(Message::Bytes(payload.to_vec())).is_err() {
            return Err(self.stopped());
        }
        self.sent += payload.len() as u64;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if self.sent != self.object_bytes {
            // Dropping the sender abandons the copy: the store fails and nothing becomes visible.
            self.tx = None;
            let _ = self.join();
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the copy ended after {} of {} bytes",
                    self.sent, self.object_bytes
                ),
            ));
        }
        let tx = self.tx.take();
        if tx.is_some_and(|tx| tx.send(Message::End).is_err()) {
            return Err(self.stopped());
        }
        self.join()?;
        let delivered = self.delivered.load(Ordering::Relaxed);
        if delivered != self.object_bytes {
            return Err(io::Error::other(format!(
                "the store read {delivered} of {} bytes",
                self.object_bytes
            )));
        }
        Ok(())
    }
}

impl Drop for PipeSink {
    fn drop(&mut self) {
        // Not finished: the reader reports the copy abandoned; wait for the store to give up.
        self.tx = None;
        if self.store.is_some() {
            let _ = self.join();
        }
    }
}

/// A [`Sink`] that runs `store` on its own thread and feeds it the object's bytes as the pieces arrive,
/// through a bounded channel ([`QUEUE_PIECES`] pieces). [`Sink::finish`] ends the stream and returns the
/// store's result (an error as well when the store read fewer than `object_bytes` bytes, or when more or
/// fewer arrived); a sink dropped without `finish` makes the store's reads fail ("the copy was abandoned
/// after N of M bytes"), so the store must make nothing visible when a read fails. Dropping the sink waits
/// for the store's thread.
pub fn pipe_sink<F>(object_bytes: u64, store: F) -> io::Result<Box<dyn Sink>>
where
    F: FnOnce(&mut dyn Read) -> io::Result<()> + Send + 'static,
{
    let (tx, rx) = sync_channel(QUEUE_PIECES);
    let delivered = Arc::new(AtomicU64::new(0));
    let mut reader = PipeReader {
        rx,
        current: Vec::new(),
        position: 0,
        arrived: 0,
        object_bytes,
        delivered: Arc::clone(&delivered),
        ended: false,
    };
    let handle = thread::Builder::new()
        .name("relay-store".to_string())
        .spawn(move || store(&mut reader))?;
    Ok(Box::new(PipeSink {
        object_bytes,
        sent: 0,
        tx: Some(tx),
        store: Some(handle),
        delivered,
    }))
}

/// The reading side of [`pipe_source`].
struct SourceReader {
    rx: Option<Receiver<io::Result<Vec<u8>>>>,
    current: Vec<u8>,
    position: usize,
    producer: Option<JoinHandle<()>>,
}

impl Read for SourceReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.position == self.current.len() {
            let Some(rx) = self.rx.as_ref() else {
                return Ok(0);
            };
            match rx.recv() {
                Ok(Ok(bytes)) => {
                    self.current = bytes;
                    self.position = 0;
                }
                Ok(Err(e)) => {
                    self.rx = None;
                    return Err(e);
                }
                // The producer ended after every byte.
                Err(_) => self.rx = None,
            }
        }
        let n = buf.len().min(self.current.len() - self.position);
        buf[..n].copy_from_slice(&self.current[self.position..self.position + n]);
        self.position += n;
        Ok(n)
    }
}

impl Drop for SourceReader {
    fn drop(&mut self) {
        // A producer still writing sees the pipe closed and stops.
        self.rx = None;
        if let Some(handle) = self.producer.take() {
            let _ = handle.join();
        }
    }
}

/// The producing side of [`pipe_source`]: refuses more than the object's bytes.
struct SourceWriter {
    tx: SyncSender<io::Result<Vec<u8>>>,
    written: u64,
    object_bytes: u64,
}

impl Write for SourceWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written + buf.len() as u64 > self.object_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("holds more than the {} bytes asked for", self.object_bytes),
            ));
        }
        self.tx
            .send(Ok(buf.to_vec()))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the reader went away"))?;
        self.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The mirror of [`pipe_sink`] for parity sources: runs `produce` on its own thread and returns a reader of
/// what it writes, through a bounded channel ([`QUEUE_PIECES`] writes), so an object is sent up as it is read
/// instead of after a whole read. The reader ends after exactly `object_bytes`; it returns the producer's error
/// where the producer failed, and an error when the producer wrote more or fewer than `object_bytes` bytes.
/// Dropping the reader early makes the producer's writes fail and waits for its thread.
pub fn pipe_source<F>(object_bytes: u64, produce: F) -> io::Result<Box<dyn Read + Send>>
where
    F: FnOnce(&mut dyn Write) -> io::Result<()> + Send + 'static,
{
    let (tx, rx) = sync_channel(QUEUE_PIECES);
    let handle = thread::Builder::new()
        .name("relay-source".to_string())
        .spawn(move || {
            let mut writer = SourceWriter {
                tx,
                written: 0,
                object_bytes,
            };
            let outcome = produce(&mut writer).and_then(|()| {
                if writer.written == object_bytes {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "holds {} bytes, {object_bytes} were asked for",
                            writer.written
                        ),
                    ))
                }
            });
            if let Err(e) = outcome {
                let _ = writer.tx.send(Err(e));
            }
        })?;
    Ok(Box::new(SourceReader {
        rx: Some(rx),
        current: Vec::new(),
        position: 0,
        producer: Some(handle),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// A store that keeps the object only when it read to the end without an error.
    fn keeping(into: Arc<Mutex<Option<Vec<u8>>>>) -> impl FnOnce(&mut dyn Read) -> io::Result<()> {
        move |r: &mut dyn Read| {
            let mut all = Vec::new();
            r.read_to_end(&mut all)?;
            *into.lock().unwrap() = Some(all);
            Ok(())
        }
    }

    #[test]
    fn bytes_arrive_exact() {
        for (len, piece) in [
            (0usize, 1usize),
            (1, 1),
            (1000, 7),
            (65536, 4096),
            (100_001, 9999),
        ] {
            let object = data(len);
            let stored = Arc::new(Mutex::new(None));
            let mut sink = pipe_sink(len as u64, keeping(Arc::clone(&stored))).unwrap();
            for (i, chunk) in object.chunks(piece).enumerate() {
                sink.write_piece(i as u64, chunk).unwrap();
            }
            sink.finish().unwrap();
            assert_eq!(stored.lock().unwrap().as_deref(), Some(&object[..]));
        }
    }

    #[test]
    fn abandon_at_every_position_stores_nothing() {
        let object = data(40);
        for pieces_sent in 0..=4 {
            // Dropped without finish.
            let stored = Arc::new(Mutex::new(None));
            let seen = Arc::new(Mutex::new(None));
            let keep = keeping(Arc::clone(&stored));
            let seen2 = Arc::clone(&seen);
            let mut sink = pipe_sink(40, move |r: &mut dyn Read| {
                let result = keep(r);
                *seen2.lock().unwrap() = result.as_ref().err().map(|e| e.to_string());
                result
            })
            .unwrap();
            for (i, chunk) in object.chunks(10).take(pieces_sent).enumerate() {
                sink.write_piece(i as u64, chunk).unwrap();
            }
            drop(sink);
            assert!(
                stored.lock().unwrap().is_none(),
                "after {pieces_sent} pieces"
            );
            assert_eq!(
                seen.lock().unwrap().as_deref(),
                Some(
                    format!(
                        "the copy was abandoned after {} of 40 bytes",
                        pieces_sent * 10
                    )
                    .as_str()
                )
            );
            // Finished early: an error, and nothing stored either.
            if pieces_sent < 4 {
                let stored = Arc::new(Mutex::new(None));
                let mut sink = pipe_sink(40, keeping(Arc::clone(&stored))).unwrap();
                for (i, chunk) in object.chunks(10).take(pieces_sent).enumerate() {
                    sink.write_piece(i as u64, chunk).unwrap();
                }
                let e = sink.finish().unwrap_err();
                assert!(e.to_string().contains("ended after"), "{e}");
                assert!(stored.lock().unwrap().is_none());
            }
        }
    }

    #[test]
    fn more_than_announced_is_refused() {
        let stored = Arc::new(Mutex::new(None));
        let mut sink = pipe_sink(10, keeping(Arc::clone(&stored))).unwrap();
        sink.write_piece(0, &[1; 8]).unwrap();
        let e = sink.write_piece(1, &[2; 8]).unwrap_err();
        assert!(e.to_string().contains("exceed"), "{e}");
        drop(sink);
        assert!(stored.lock().unwrap().is_none());
    }

    #[test]
    fn store_error_surfaces_at_finish() {
        let mut sink = pipe_sink(30, |r: &mut dyn Read| {
            let mut all = Vec::new();
            r.read_to_end(&mut all)?;
            Err(io::Error::other("disk full"))
        })
        .unwrap();
        for i in 0..3 {
            sink.write_piece(i, &[9; 10]).unwrap();
        }
        assert_eq!(sink.finish().unwrap_err().to_string(), "disk full");
    }

    #[test]
    fn store_that_stops_early_fails_the_copy() {
        // It fails before reading everything: a later write or finish returns its error.
        let mut sink = pipe_sink(1 << 20, |_: &mut dyn Read| {
            Err(io::Error::other("bucket missing"))
        })
        .unwrap();
        let mut error = None;
        for i in 0..64 {
            if let Err(e) = sink.write_piece(i, &[0; 16384]) {
                error = Some(e);
                break;
            }
        }
        let e = match error {
            Some(e) => e,
            None => sink.finish().unwrap_err(),
        };
        assert_eq!(e.to_string(), "bucket missing");
        // It claims success without reading everything: finish says so.
        let mut sink = pipe_sink(20, |r: &mut dyn Read| {
            let mut half = [0u8; 10];
            r.read_exact(&mut half)
        })
        .unwrap();
        sink.write_piece(0, &[1; 10]).unwrap();
        let second = sink.write_piece(1, &[1; 10]);
        let e = match second {
            Err(e) => e,
            Ok(()) => sink.finish().unwrap_err(),
        };
        assert!(e.to_string().contains("10 of 20"), "{e}");
    }

    #[test]
    fn memory_is_bounded_by_the_queue() {
        let (go_tx, go_rx) = sync_channel::<()>(0);
        let stored = Arc::new(Mutex::new(None));
        let keep = keeping(Arc::clone(&stored));
        let sink = pipe_sink(100 * 1024, move |r: &mut dyn Read| {
            // The store does not read until told to.
            go_rx.recv().unwrap();
            keep(r)
        })
        .unwrap();
        let written = Arc::new(AtomicU64::new(0));
        let writer = {
            let written = Arc::clone(&written);
            thread::spawn(move || {
                let mut sink = sink;
                for i in 0..100 {
                    sink.write_piece(i, &[i as u8; 1024]).unwrap();
                    written.fetch_add(1, Ordering::SeqCst);
                }
                sink.finish()
            })
        };
        thread::sleep(Duration::from_millis(300));
        // The channel holds QUEUE_PIECES pieces; the writer waits on the next one.
        assert_eq!(written.load(Ordering::SeqCst), QUEUE_PIECES as u64);
        go_tx.send(()).unwrap();
        writer.join().unwrap().unwrap();
        let stored = stored.lock().unwrap().take().unwrap();
        assert_eq!(stored.len(), 100 * 1024);
        assert!(stored
            .chunks(1024)
            .enumerate()
            .all(|(i, c)| c.iter().all(|b| *b == i as u8)));
    }
    fn read_all(mut r: Box<dyn Read + Send>) -> io::Result<Vec<u8>> {
        let mut all = Vec::new();
        r.read_to_end(&mut all)?;
        Ok(all)
    }

    #[test]
    fn source_streams_exact_bytes_and_errors() {
        let object = data(100_001);
        let copy = object.clone();
        let r = pipe_source(object.len() as u64, move |w: &mut dyn Write| {
            for chunk in copy.chunks(4096) {
                w.write_all(chunk)?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(read_all(r).unwrap(), object);
        // Shorter than asked for.
        let r = pipe_source(10, |w: &mut dyn Write| w.write_all(&[1; 6])).unwrap();
        let e = read_all(r).unwrap_err();
        assert_eq!(e.to_string(), "holds 6 bytes, 10 were asked for");
        // Longer.
        let r = pipe_source(10, |w: &mut dyn Write| w.write_all(&[1; 16])).unwrap();
        assert!(read_all(r).unwrap_err().to_string().contains("more than"));
        // The producer's own error, after the bytes before it.
        let r = pipe_source(10, |w: &mut dyn Write| {
            w.write_all(&[1; 4])?;
            Err(io::Error::other("extent unreadable"))
        })
        .unwrap();
        let mut r = r;
        let mut first = [0u8; 4];
        r.read_exact(&mut first).unwrap();
        assert_eq!(first, [1; 4]);
        assert_eq!(read_all(r).unwrap_err().to_string(), "extent unreadable");
    }

    #[test]
    fn source_reader_dropped_early_stops_the_producer() {
        let (done_tx, done_rx) = sync_channel(1);
        let mut r = pipe_source(1 << 30, move |w: &mut dyn Write| {
            let result = (0..).try_for_each(|_| w.write_all(&[7; 1024]));
            done_tx.send(result.is_err()).unwrap();
            result
        })
        .unwrap();
        let mut some = [0u8; 10];
        r.read_exact(&mut some).unwrap();
        drop(r);
        assert!(done_rx.recv_timeout(Duration::from_secs(5)).unwrap());
    }
}
