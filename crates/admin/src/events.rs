//! Events: disk state changes with their reasons, spin-ups, task and rebuild progress, errors. Kept in a
//! bounded ring (so a reconnecting client catches up from `Last-Event-ID`) and broadcast to the
//! server-sent-events streams of `GET /_permafrost/api/v1/events`.
//!
//! Each SSE message is `id: N`, `event: KIND` and `data: JSON` (the [`Event`]); a comment line every
//! [`HEARTBEAT`] keeps idle connections open through proxies. Streams end when the server shuts down.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Response};
use parking_lot::Mutex;
use s3s::Body;
use serde::Serialize;
use tokio::sync::{broadcast, watch};

/// Events kept for clients that reconnect.
pub const RECENT_MAX: usize = 2048;
/// A comment line this often on an idle stream.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// One event.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Numbers the events of this server's life, from 1.
    pub id: u64,
    pub at_unix_ms: u64,
    /// `disk` (a disk's shown state changed), `wake` (a disk spun up, with its reason), `task` (a task started,
    /// progressed or ended), `rebuild` (defect bytes of a disk changed), `persist` (bytes waiting in the cache
    /// changed), `restore` (`s3:ObjectRestore:Post` or `…:Completed`, as S3 event records), `error`, `webhook`,
    /// `smart` (a SMART reading raised alerts: a watched count rose, a count neared its rating),
    /// `request` (a request that changed something or was refused: who signed it,
    /// the operation, bucket and key), `key` (an access key was created, changed or deleted).
    pub kind: &'static str,
    /// What happened, in words.
    pub text: String,
    /// The details, shaped by `kind`.
    pub data: serde_json::Value,
}

/// The ring of recent events and the broadcast to live streams.
pub struct EventBus {
    next_id: AtomicU64,
    recent: Mutex<VecDeque<Arc<Event>>>,
    live: broadcast::Sender<Arc<Event>>,
    closed: watch::Sender<bool>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus::new()
    }
}

impl EventBus {
    pub fn new() -> EventBus {
        EventBus {
            next_id: AtomicU64::new(1),
            recent: Mutex::new(VecDeque::new()),
            live: broadcast::channel(1024).0,
            closed: watch::channel(false).0,
        }
    }

    /// Publish an event (logged at debug level).
    pub fn emit(&self, kind: &'static str, text: impl Into<String>, data: serde_json::Value) {
        let text = text.into();
        tracing::debug!("event {kind}: {text}");
        // Numbered under the ring's lock, so the ring is in id order.
        let mut recent = self.recent.lock();
        let event = Arc::new(Event {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            at_unix_ms: crate::unix_ms(),
            kind,
            text,
            data,
        });
        if recent.len() == RECENT_MAX {
            recent.pop_front();
        }
        recent.push_back(event.clone());
        drop(recent);
        let _ = self.live.send(event); // no stream listening is fine
    }

    /// Events after `id` still in the ring, oldest first (at most `limit`, the newest ones).
    pub fn since(&self, id: u64, limit: usize) -> Vec<Arc<Event>> {
        let recent = self.recent.lock();
        let matching: Vec<_> = recent.iter().filter(|e| e.id > id).cloned().collect();
        let skip = matching.len().saturating_sub(limit);
        matching.into_iter().skip(skip).collect()
    }

    /// End every stream (server shutdown): a draining server must not wait for them.
    pub fn close(&self) {
        let _ = self.closed.send(true);
    }

    /// A server-sent-events response: the events after `last_id` still in the ring, then live ones; with `key`,
    /// only the events about that access key (`data.key`: requests it signed, changes to it).
    pub fn sse(&self, last_id: Option<u64>, key: Option<String>) -> Response<Body> {
        let mut live = self.live.subscribe();
        let wanted = move |e: &Event| key.as_deref().is_none_or(|k| about_key(e, k));
        // Subscribed before reading the ring: nothing falls between them (duplicates are skipped by id).
        let backlog: Vec<_> = match last_id {
            Some(id) => self.since(id, RECENT_MAX),
            None => Vec::new(),
        }
        .into_iter()
        .filter(|e| wanted(e))
        .collect();
        let mut closed = self.closed.subscribe();
        let mut sent = backlog.last().map_or(last_id.unwrap_or(0), |e| e.id);
        let stream = async_stream(move |tx| async move {
            let _ = tx.send(Bytes::from_static(b": permafrost events\nretry: 2000\n\n"));
            for event in backlog {
                if tx.send(encode(&event)).is_err() {
                    return;
                }
            }
            loop {
                if *closed.borrow() {
                    return;
                }
                tokio::select! {
                    received = live.recv() => match received {
                        Ok(event) => {
                            if event.id <= sent { continue; }
                            sent = event.id;
                            if !wanted(&event) { continue; }
                            if tx.send(encode(&event)).is_err() { return; }
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            let note = format!(": {n} events skipped (the client read too slowly)\n\n");
                            if tx.send(Bytes::from(note)).is_err() { return; }
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = closed.changed() => return,
                    () = tokio::time::sleep(HEARTBEAT) => {
                        if tx.send(Bytes::from_static(b": heartbeat\n\n")).is_err() { return; }
                    }
                }
            }
        });
        let body = http_body_stream(stream);
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
        response
    }
}

/// Whether an event is about the access key `name` (its `data.key`).
pub fn about_key(event: &Event, name: &str) -> bool {
    event.data.get("key").and_then(|k| k.as_str()) == Some(name)
}

/// One event as an SSE message.
fn encode(event: &Event) -> Bytes {
    let data = serde_json::to_string(event).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        event.id, event.kind
    ))
}

/// A stream of the pieces a task sends (the task runs on the runtime and stops when the stream is dropped).
fn async_stream<F, Fut>(f: F) -> impl futures::Stream<Item = Bytes> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::UnboundedSender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(f(tx));
    let abort = AbortOnDrop(task);
    futures::stream::unfold((rx, abort), |(mut rx, abort)| async move {
        rx.recv().await.map(|b| (b, (rx, abort)))
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A body of byte pieces.
pub(crate) fn http_body_stream(
    stream: impl futures::Stream<Item = Bytes> + Send + 'static,
) -> Body {
    Body::http_body_unsync(StreamBody(Box::pin(stream.map(Ok::<_, Infallible>))))
}

struct StreamBody(
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static>>,
);

impl http_body::Body for StreamBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .as_mut()
            .poll_next(cx)
            .map(|o| o.map(|r| r.map(http_body::Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_events_in_order() {
        let bus = EventBus::new();
        for i in 0..(RECENT_MAX + 5) {
            bus.emit("disk", format!("e{i}"), serde_json::json!({}));
        }
        let all = bus.since(0, usize::MAX);
        assert_eq!(all.len(), RECENT_MAX);
        assert_eq!(all[0].id, 6);
        assert_eq!(bus.since(all.last().unwrap().id - 2, 10).len(), 2);
        assert_eq!(bus.since(0, 3).len(), 3);
        assert_eq!(bus.since(0, 3)[2].id, all.last().unwrap().id);
    }
}
