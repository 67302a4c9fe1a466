//! Between the async HTTP side and the blocking store: bounded channels and blocking threads.
//!
//! - [`blocking`] runs a store call on tokio's blocking pool.
//! - [`upload`] streams a request body into a [`PutHandle`] on a blocking thread through a channel of at most
//!   [`BODY_PIECES_IN_FLIGHT`] pieces: memory per upload is bounded whatever the object's size. The handle is
//!   finished only after the body ended cleanly (and its trailing checksum, if any, matched); a body that
//!   fails or a client that disconnects aborts it, so nothing half-written becomes visible.
//! - [`download`] pumps an [`ObjectReader`] on a blocking thread into a channel of at most
//!   [`BODY_PIECES_IN_FLIGHT`] pieces of [`READ_PIECE_BYTES`]; a read error ends the response body with an error,
//!   so the client sees a truncated body, never wrong bytes.

use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use permafrost_disk::power::WakeContext;
use permafrost_store::{ChecksumAlgorithm, ObjectInfo, ObjectReader, PutHandle, StoreError};
use s3s::dto::StreamingBlob;
use s3s::{S3Error, S3ErrorCode, S3Result, TrailingHeaders};
use tokio::sync::mpsc;

use crate::error::{internal, s3_error};

/// Body pieces queued between the network and the store, per request.
pub const BODY_PIECES_IN_FLIGHT: usize = 4;
/// Size of the pieces a GET reads from the store.
pub const READ_PIECE_BYTES: usize = 256 << 10;

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

/// Stream `body` into the handle `begin` opens and finish; the store's pipeline computes the announced trailing
/// checksum and verifies it (with the header checksums) at the end.
pub(crate) async fn upload<F>(
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
        let trailer_value = match (&trailer, &trailing_headers) {
            (Some(t), Some(headers)) => headers
                .read(|h| {
                    h.get(t.header())
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                })
                .flatten(),
            _ => None,
        };
        let _ = tx.send(Piece::End(trailer_value)).await;
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

/// Turn `reader` into a response body read on a blocking thread, `READ_PIECE_BYTES` at a time, with at most
/// `BODY_PIECES_IN_FLIGHT` pieces buffered. `keep` is held until the reader is done (the store, typically).
pub(crate) fn download<K: Send + Sync + 'static>(
    mut reader: ObjectReader,
    keep: Arc<K>,
    wake: Option<WakeContext>,
) -> StreamingBlob {
    let (tx, rx) = mpsc::channel(BODY_PIECES_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let _keep = keep;
        let _wake = WakeContext::enter_opt(wake); // why the reads wake disks
        let mut remaining = reader.len();
        loop {
            let mut buf = BytesMut::zeroed(READ_PIECE_BYTES);
            match reader.read(&mut buf) {
                Ok(0) => {
                    if remaining > 0 {
                        let e = std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            format!("object body ended {remaining} bytes early"),
                        );
                        tracing::error!("{e}");
                        let _ = tx.blocking_send(Err(e));
                    }
                    return;
                }
                Ok(n) => {
                    buf.truncate(n);
                    remaining = remaining.saturating_sub(n as u64);
                    if tx.blocking_send(Ok(buf.freeze())).is_err() {
                        return; // the client went away
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!("reading an object failed: {e}");
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    StreamingBlob::wrap(ReaderStream { rx })
}
