//! Between the async HTTP side and the blocking store: bounded channels and blocking threads.
//!
//! - [`blocking`] runs a store call on tokio's blocking pool.
//! - [`upload`] streams a request body into a [`PutHandle`] on a blocking thread through a channel of at most
//!   [`BODY_PIECES_IN_FLIGHT`] pieces: memory per upload is bounded whatever the object's size. The handle is
//!   finished only after the body ended cleanly (and its trailing checksum, if any, matched); a body that
//!   fails or a client that disconnects aborts it, so nothing half-written becomes visible. A body of a known
//!   length up to [`SMALL_UPLOAD_BYTES`] is received whole first and stored in one blocking call.
//! - [`download`] pumps an [`ObjectReader`] on a blocking thread into a channel of at most
//!   [`BODY_PIECES_IN_FLIGHT`] pieces: the blocks the reader holds as they are ([`ObjectReader::take_block`]:
//!   decoded read-ahead blocks, slices of verified grid chunks; at most [`TAKEN_PIECE_BYTES_MAX`] each), other
//!   bytes copied into pooled buffers of [`READ_PIECE_BYTES`], both handed to hyper as `Bytes` without a further
//!   copy; a read error ends the response body with an error, and the last piece waits for the reader's clean
//!   end, so the client sees a truncated body, never the whole length of wrong bytes.

use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use permafrost_disk::power::WakeContext;
use permafrost_store::{ChecksumAlgorithm, ObjectInfo, ObjectReader, PutHandle, StoreError};
use s3s::dto::StreamingBlob;
use s3s::stream::ByteStream;
use s3s::{S3Error, S3ErrorCode, S3Result, TrailingHeaders};
use tokio::sync::mpsc;

use crate::error::{internal, s3_error};

/// Body pieces queued between the network and the store, per request.
pub const BODY_PIECES_IN_FLIGHT: usize = 4;
/// Size of the pieces a GET reads from the store.
pub const READ_PIECE_BYTES: usize = 256 << 10;
/// Largest piece a GET takes from the store without a copy (the in-flight pieces hold their buffers).
pub const TAKEN_PIECE_BYTES_MAX: usize = 1 << 20;
/// Bodies of a known length up to this size are received whole before the store sees them (see [`upload`]).
pub const SMALL_UPLOAD_BYTES: usize = 256 << 10;

/// Run a blocking store call off the async threads.
pub(crate) async fn blocking<T, F>(f: F) -> S3Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(s3_error),
        Err(e) => Err(internal(format!("store task failed: {e}"))),
    }
}

enum Piece {
    Data(Bytes),
    /// The body ended cleanly; the trailing checksum value the client sent, if one was announced.
    End(Option<String>),
}

/// The trailing checksum's value the client sent after the body, if one was announced.
fn trailer_value(
    trailer: &Option<ChecksumAlgorithm>,
    trailing_headers: &Option<TrailingHeaders>,
) -> Option<String> {
    match (trailer, trailing_headers) {
        (Some(t), Some(headers)) => headers
            .read(|h| {
                h.get(t.header())
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })
            .flatten(),
        _ => None,
    }
}

/// Stream `body` into the handle `begin` opens and finish; the store's pipeline computes the announced trailing
/// checksum and verifies it (with the header checksums) at the end. A body of a known length up to
/// [`SMALL_UPLOAD_BYTES`] is received first and then stored in one blocking call (no writer thread, no channel).
pub(crate) async fn upload<F>(
    body: Option<StreamingBlob>,
    begin: F,
    trailer: Option<ChecksumAlgorithm>,
    trailing_headers: Option<TrailingHeaders>,
) -> S3Result<ObjectInfo>
where
    F: FnOnce() -> Result<PutHandle, StoreError> + Send + 'static,
{
    let small = body
        .as_ref()
        .map_or(Some(0), |b| b.remaining_length().exact());
    match small {
        Some(len) if len <= SMALL_UPLOAD_BYTES => {
            upload_small(body, begin, trailer, trailing_headers).await
        }
        _ => upload_streamed(body, begin, trailer, trailing_headers).await,
    }
}

/// [`upload`] of a small body: all of it, then the store.
async fn upload_small<F>(
    body: Option<StreamingBlob>,
    begin: F,
    trailer: Option<ChecksumAlgorithm>,
    trailing_headers: Option<TrailingHeaders>,
) -> S3Result<ObjectInfo>
where
    F: FnOnce() -> Result<PutHandle, StoreError> + Send + 'static,
{
    let mut pieces = Vec::new();
    let mut received = 0;
    if let Some(mut body) = body {
        while let Some(piece) = body.next().await {
            match piece {
                Ok(bytes) => {
                    received += bytes.len();
                    if received > SMALL_UPLOAD_BYTES {
                        // Longer than it announced: hyper ends such a body with an error first; never buffer it.
                        return Err(s3_error(StoreError::InvalidArgument(
                            "the request body is longer than its Content-Length".into(),
                        )));
                    }
                    pieces.push(bytes);
                }
                Err(e) => return Err(body_stream_error(&*e)),
            }
        }
    }
    let trailer_value = trailer_value(&trailer, &trailing_headers);
    blocking(move || {
        let mut handle = begin()?;
        if let Some(t) = trailer {
            handle.expect_trailer(t)?;
        }
        for piece in &pieces {
            handle.write(piece)?;
        }
        handle.finish_with_trailer(trailer_value.as_deref())
    })
    .await
}

/// [`upload`] of a body of any length: a writer on a blocking thread takes it in pieces as it arrives.
async fn upload_streamed<F>(
    body: Option<StreamingBlob>,
    begin: F,
    trailer: Option<ChecksumAlgorithm>,
    trailing_headers: Option<TrailingHeaders>,
) -> S3Result<ObjectInfo>
where
    F: FnOnce() -> Result<PutHandle, StoreError> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<Piece>(BODY_PIECES_IN_FLIGHT);
    let writer = tokio::task::spawn_blocking(move || -> Result<ObjectInfo, StoreError> {
        let mut handle = begin()?;
        if let Some(t) = trailer {
            handle.expect_trailer(t)?;
        }
        loop {
            match rx.blocking_recv() {
                Some(Piece::Data(bytes)) => handle.write(&bytes)?,
                Some(Piece::End(trailer_value)) => {
                    return handle.finish_with_trailer(trailer_value.as_deref());
                }
                None => {
                    handle.abort();
                    return Err(StoreError::Internal("the request body ended early".into()));
                }
            }
        }
    });

    let mut body_error: Option<S3Error> = None;
    if let Some(mut body) = body {
        while let Some(piece) = body.next().await {
            match piece {
                Ok(bytes) if bytes.is_empty() => {}
                Ok(bytes) => {
                    if tx.send(Piece::Data(bytes)).await.is_err() {
                        break; // the writer stopped (an error): its result says why
                    }
                }
                Err(e) => {
                    body_error = Some(body_stream_error(&*e));
                    break;
                }
            }
        }
    }
    if body_error.is_none() {
        let _ = tx
            .send(Piece::End(trailer_value(&trailer, &trailing_headers)))
            .await;
    }
    drop(tx);
    let result = writer.await;
    if let Some(e) = body_error {
        return Err(e);
    }
    match result {
        Ok(r) => r.map_err(s3_error),
        Err(e) => Err(internal(format!("upload task failed: {e}"))),
    }
}

/// The S3 error for a body stream that failed (a bad chunk signature, a payload hash mismatch, a short body).
fn body_stream_error(e: &(dyn std::error::Error + Send + Sync + 'static)) -> S3Error {
    if let Some(s3) = e.downcast_ref::<S3Error>() {
        return S3Error::with_message(
            s3.code().clone(),
            s3.message().unwrap_or("bad request body").to_owned(),
        );
    }
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    let code = if lower.contains("signature") {
        S3ErrorCode::SignatureDoesNotMatch
    } else if lower.contains("sha256") || lower.contains("checksum") {
        S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into())
    } else {
        S3ErrorCode::IncompleteBody
    };
    let mut error = S3Error::with_message(code, format!("request body: {text}"));
    if error.status_code().is_none() {
        error.set_status_code(http::StatusCode::BAD_REQUEST);
    }
    error
}

/// A response body fed by a blocking reader.
struct ReaderStream {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl Stream for ReaderStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// Piece buffers of one download, handed back when hyper drops the piece: a GET allocates (and clears) its
/// buffers once instead of once per piece.
#[derive(Default)]
struct PiecePool(Mutex<Vec<Vec<u8>>>);

impl PiecePool {
    /// Buffers kept for reuse: the pieces queued, one with hyper and one being filled.
    const KEPT: usize = BODY_PIECES_IN_FLIGHT + 2;

    fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| vec![0; READ_PIECE_BYTES])
    }

    fn give(&self, buf: Vec<u8>) {
        let mut pool = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < Self::KEPT {
            pool.push(buf);
        }
    }
}

/// The first `len` bytes of a pooled buffer, as the owner of a [`Bytes`] (no copy); back to the pool on drop.
struct PooledPiece {
    buf: Vec<u8>,
    len: usize,
    pool: Arc<PiecePool>,
}

impl AsRef<[u8]> for PooledPiece {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for PooledPiece {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

/// Read into `buf` until it is full or the reader ends; the bytes read.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Read the rest of `reader`, which must be exactly `len` bytes long, then its end: the end-of-body checks (an
/// object's BLAKE3, its length) run before the bytes are returned.
pub(crate) fn read_whole(reader: &mut ObjectReader) -> std::io::Result<Vec<u8>> {
    let len = usize::try_from(reader.len()).map_err(std::io::Error::other)?;
    let mut buf = vec![0; len];
    let n = fill(reader, &mut buf)?;
    if n < len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("object body ended {} bytes early", len - n),
        ));
    }
    check_end(reader)?;
    Ok(buf)
}

/// The reader's clean end after its last byte (its checks pass), or the error that says why not.
fn check_end(reader: &mut ObjectReader) -> std::io::Result<()> {
    let mut probe = [0u8; 1];
    if fill(reader, &mut probe)? != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "object body longer than its length",
        ));
    }
    Ok(())
}

/// Turn `reader` into a response body read on a blocking thread in pieces of [`READ_PIECE_BYTES`] (filled
/// whole, pooled, handed to hyper without a copy), with at most `BODY_PIECES_IN_FLIGHT` pieces queued. The last
/// piece is sent only after the reader's clean end: a verification failure at the end (the object's BLAKE3)
/// leaves the client with a short body and an error, never the complete length. `keep` is held until the reader
/// is done (the store, typically).
pub(crate) fn download<K: Send + Sync + 'static>(
    mut reader: ObjectReader,
    keep: Arc<K>,
    wake: Option<WakeContext>,
) -> StreamingBlob {
    let (tx, rx) = mpsc::channel(BODY_PIECES_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let _keep = keep;
        let _wake = WakeContext::enter_opt(wake); // why the reads wake disks
        let pool = Arc::new(PiecePool::default());
        let mut remaining = reader.len();
        let fail = |e: std::io::Error| {
            tracing::error!("reading an object failed: {e}");
            let _ = tx.blocking_send(Err(e));
        };
        if remaining == 0 {
            if let Err(e) = check_end(&mut reader) {
                fail(e);
            }
            return;
        }
        while remaining > 0 {
            let left = usize::try_from(remaining).unwrap_or(usize::MAX);
            // A block the reader holds goes to hyper as it is; other bytes are copied into a pooled piece.
            let piece = match reader.take_block(left.min(TAKEN_PIECE_BYTES_MAX)) {
                Ok(Some(block)) => block,
                Ok(None) => {
                    let mut buf = pool.take();
                    let want = buf.len().min(left);
                    let n = match fill(&mut reader, &mut buf[..want]) {
                        Ok(n) => n,
                        Err(e) => return fail(e),
                    };
                    if n < want {
                        return fail(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            format!("object body ended {} bytes early", remaining - n as u64),
                        ));
                    }
                    Bytes::from_owner(PooledPiece {
                        buf,
                        len: n,
                        pool: Arc::clone(&pool),
                    })
                }
                Err(e) => return fail(e),
            };
            remaining -= piece.len() as u64;
            if remaining == 0 {
                if let Err(e) = check_end(&mut reader) {
                    return fail(e);
                }
            }
            if tx.blocking_send(Ok(piece)).is_err() {
                return; // the client went away
            }
        }
    });
    StreamingBlob::wrap(ReaderStream { rx })
}
