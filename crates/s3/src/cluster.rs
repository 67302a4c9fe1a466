//! A node of a cluster (issue 13 "Nodes", `docs/cluster.md` "Nodes"): any node answers for any bucket.
//!
//! - **Directory first.** In a cluster, GET and HEAD of the current version look the object up in the shared
//!   directory (`permafrost_catalog::cluster`). This node holds it: the local store answers. Another node
//!   holds it: HEAD is answered from the directory; GET is forwarded to the first holder that is up (newest
//!   version first), and when every holder is down the answer is `503 ServiceUnavailable` naming them.
//! - ListObjects (v1, v2) and ListBuckets come from the directory; buckets are cluster-wide (a PUT into a
//!   bucket another node made creates it here first).
//! - Writes stay local: after the local commit a PUT, multipart completion or copy publishes the object in the
//!   directory, a DELETE removes this node's row (a crash between the two is repaired by the reconcile at
//!   start).
//! - **Forwarding and authentication.** The forwarded GET carries the client's own request: method, path,
//!   query and every header, `Host` and `Authorization` included, plus [`FORWARDED_HEADER`]. The holder checks
//!   the client's SigV4 signature itself (the signature covers `Host`, which is kept as the client sent it), so
//!   no node-to-node credential exists that could be stolen or misused, and a node can never read more than
//!   the client may. The price: every node of a cluster has the same root credentials (which a cluster that
//!   answers any request on any node needs anyway), and a presigned URL is forwarded as it is. A forwarded
//!   request is served locally by the holder, never forwarded again (no loops).
//! - **Database gone.** A directory lookup that fails is `503 ServiceUnavailable` with the database's message
//!   (never an answer from stale local state); the store's own catalog errors are mapped the same way
//!   (`error`).

use std::sync::Arc;

use permafrost_catalog::cluster::{ClusterDb, DirEntry, Health, NodeInfo};
use permafrost_catalog::CatalogError;
use permafrost_store::{BucketSettings, Store, StoreError};
use s3s::{S3Error, S3ErrorCode, S3Result};

/// Marks a request one node forwarded to another (served locally there).
pub const FORWARDED_HEADER: &str = "x-permafrost-forwarded-by";
/// The code of the internal answer "forward this GET to the address in the message" (`server` turns it into
/// the forwarded request; never sent to a client).
pub(crate) const FORWARD_CODE: &str = "PermafrostForwardTo";

/// This node's view of its cluster.
pub struct ClusterNode {
    pub db: Arc<ClusterDb>,
    pub node_id: i64,
    pub node_name: String,
}

/// Where a GET or HEAD of the current version is answered.
pub(crate) enum Route {
    /// By the local store (this node holds it, or the directory does not know it).
    Local,
    /// Another node holds it; the newest version, the holders that are up (in order) and those down.
    Remote {
        entry: DirEntry,
        up: Vec<NodeInfo>,
        down: Vec<NodeInfo>,
    },
}

/// A cluster (catalog) error as an S3 error: the database gone is `503 ServiceUnavailable`.
pub(crate) fn unavailable(e: CatalogError) -> S3Error {
    match e {
        CatalogError::NoSuchBucket(b) => {
            S3Error::with_message(S3ErrorCode::NoSuchBucket, format!("no such bucket: {b}"))
        }
        CatalogError::BucketNotEmpty(b) => S3Error::with_message(
            S3ErrorCode::BucketNotEmpty,
            format!("bucket {b} is not empty"),
        ),
        other => service_unavailable(format!(
            "the cluster catalog database is unavailable: {other}"
        )),
    }
}

/// `503 ServiceUnavailable` with `message` (logged once, by the server's failed-request line).
pub(crate) fn service_unavailable(message: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::ServiceUnavailable, message);
    e.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
    e
}

/// Run a blocking cluster call off the async threads.
pub(crate) async fn blocking<T, F>(f: F) -> S3Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, CatalogError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(unavailable),
        Err(e) => Err(crate::error::internal(format!("cluster task failed: {e}"))),
    }
}

impl ClusterNode {
    /// Where the current version of `bucket/key` is answered.
    pub(crate) async fn route(self: &Arc<Self>, bucket: &str, key: &str) -> S3Result<Route> {
        let me = Arc::clone(self);
        let (bucket, key) = (bucket.to_owned(), key.to_owned());
        let holders = blocking(move || me.db.holders(&bucket, &key)).await?;
        let Some((_, newest)) = holders.first() else {
            return Ok(Route::Local);
        };
        let newest = newest.clone();
        let current: Vec<NodeInfo> = holders
            .into_iter()
            .filter(|(_, e)| e.etag == newest.etag && e.last_modified_ms == newest.last_modified_ms)
            .map(|(n, _)| n)
            .collect();
        if current.iter().any(|n| n.id == self.node_id) {
            return Ok(Route::Local);
        }
        let (up, down): (Vec<NodeInfo>, Vec<NodeInfo>) =
            current.into_iter().partition(|n| n.health == Health::Up);
        Ok(Route::Remote {
            entry: newest,
            up,
            down,
        })
    }

    /// The answer for a GET held elsewhere: forward to the holders up (in order: the next one when one does not
    /// answer), or 503 naming the holders down. The message lists `name=address` of the holders up.
    pub(crate) fn forward_or_unavailable(
        bucket: &str,
        key: &str,
        up: &[NodeInfo],
        down: &[NodeInfo],
    ) -> S3Error {
        match up.is_empty() {
            false => S3Error::with_message(
                S3ErrorCode::Custom(FORWARD_CODE.into()),
                up.iter()
                    .map(|n| format!("{}={}", n.name, n.address))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            true => service_unavailable(format!(
                "{bucket}/{key} is held only by {}, which {} down; try again when {} back",
                names(down),
                if down.len() == 1 { "is" } else { "are" },
                if down.len() == 1 { "it is" } else { "one is" },
            )),
        }
    }

    /// The bucket exists here too when the cluster knows it (a PUT into a bucket another node made).
    pub(crate) async fn ensure_local_bucket(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
    ) -> S3Result<()> {
        let (store, me, bucket) = (Arc::clone(store), Arc::clone(self), bucket.to_owned());
        let exists_here = {
            let (store, bucket) = (Arc::clone(&store), bucket.clone());
            crate::bridge::blocking(move || match store.head_bucket(&bucket) {
                Ok(_) => Ok(true),
                Err(StoreError::NoSuchBucket(_)) => Ok(false),
                Err(e) => Err(e),
            })
            .await?
        };
        if exists_here {
            return Ok(());
        }
        let known = {
            let bucket = bucket.clone();
            blocking(move || me.db.bucket_exists(&bucket)).await?
        };
        if known {
            crate::bridge::blocking(move || {
                match store.create_bucket(&bucket, BucketSettings::default()) {
                    Ok(()) | Err(StoreError::BucketAlreadyOwnedByYou(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .await?;
        }
        Ok(())
    }

    /// After a local write of `bucket/key`: publish what the store now holds.
    pub(crate) async fn publish(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
    ) -> S3Result<()> {
        let (store, me, bucket, key) = (
            Arc::clone(store),
            Arc::clone(self),
            bucket.to_owned(),
            key.to_owned(),
        );
        let info = {
            let (bucket, key) = (bucket.clone(), key.clone());
            crate::bridge::blocking(move || store.head_object(&bucket, &key)).await?
        };
        let entry = DirEntry {
            bucket,
            key,
            size_bytes: info.size_bytes,
            etag: info.etag,
            last_modified_ms: info.last_modified_ms,
            content_type: info.content_type,
        };
        blocking(move || me.db.publish(me.node_id, &entry)).await
    }

    /// After a local delete of `bucket/key`: this node no longer holds it.
    pub(crate) async fn unpublish(self: &Arc<Self>, bucket: &str, key: &str) -> S3Result<()> {
        let (me, bucket, key) = (Arc::clone(self), bucket.to_owned(), key.to_owned());
        blocking(move || me.db.unpublish(me.node_id, &bucket, &key)).await
    }
}

fn names(nodes: &[NodeInfo]) -> String {
    nodes
        .iter()
        .map(|n| {
            format!(
                "node {} ({}, last heartbeat {} s ago)",
                n.name,
                n.address,
                n.heartbeat_age_ms / 1000
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Forward a GET to the first of `holders` (`name=address …`) that answers, with the client's own request
/// line and headers; the answer streams back. None answers: `503` naming each with its error.
pub(crate) async fn forward(
    holders: &str,
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    node_name: &str,
) -> http::Response<s3s::Body> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let holders: Vec<(String, String)> = holders
        .split(' ')
        .filter_map(|h| h.split_once('='))
        .map(|(n, a)| (n.to_owned(), a.to_owned()))
        .collect();
    static AGENT: std::sync::OnceLock<ureq::Agent> = std::sync::OnceLock::new();
    let agent = AGENT.get_or_init(|| {
        ureq::AgentBuilder::new()
            .timeout_connect(std::time::Duration::from_secs(3))
            .redirects(0)
            .build()
    });
    let request_to = |address: &str| {
        let mut request = agent.request(method.as_str(), &format!("http://{address}{path}"));
        for (name, value) in headers {
            if HOP_BY_HOP.contains(&name.as_str()) {
                continue;
            }
            if let Ok(v) = value.to_str() {
                request = request.set(name.as_str(), v);
            }
        }
        request.set(FORWARDED_HEADER, node_name)
    };
    let requests: Vec<(String, String, ureq::Request)> = holders
        .into_iter()
        .map(|(name, address)| {
            let request = request_to(&address);
            (name, address, request)
        })
        .collect();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(
        crate::BODY_PIECES_IN_FLIGHT,
    );
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let mut failures = Vec::new();
        let mut answer = None;
        for (name, address, request) in requests {
            match request.call() {
                Ok(r) | Err(ureq::Error::Status(_, r)) => {
                    answer = Some(r);
                    break;
                }
                Err(e) => failures.push(format!("node {name} ({address}) does not answer: {e}")),
            }
        }
        let Some(response) = answer else {
            let _ = head_tx.send(Err(format!(
                "{}; it has not missed heartbeats for the timeout yet, try again shortly",
                failures.join("; ")
            )));
            return;
        };
        let mut head = http::Response::builder().status(response.status());
        for name in response.headers_names() {
            if HOP_BY_HOP.contains(&name.as_str()) {
                continue;
            }
            for value in response.all(&name) {
                head = head.header(name.as_str(), value);
            }
        }
        if head_tx.send(Ok(head)).is_err() {
            return;
        }
        let mut reader = response.into_reader();
        loop {
            let mut buf = vec![0u8; crate::READ_PIECE_BYTES];
            match std::io::Read::read(&mut reader, &mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.blocking_send(Ok(bytes::Bytes::from(buf))).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    let head = match head_rx.await {
        Ok(Ok(head)) => head,
        Ok(Err(message)) => return error_response(&message),
        Err(_) => return error_response("forwarding task failed"),
    };
    let body = s3s::Body::from(s3s::dto::StreamingBlob::wrap(Pieces { rx }));
    head.body(body)
        .unwrap_or_else(|e| error_response(&format!("bad answer from the holder: {e}")))
}

/// A `503 ServiceUnavailable` answer in S3's XML.
pub(crate) fn error_response(message: &str) -> http::Response<s3s::Body> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>ServiceUnavailable</Code><Message>{}</Message></Error>",
        message.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
    );
    let mut response = http::Response::new(s3s::Body::from(xml));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    response
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
];

/// The forwarded answer's body, fed by the blocking reader.
struct Pieces {
    rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>,
}

impl futures::Stream for Pieces {
    type Item = Result<bytes::Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}
