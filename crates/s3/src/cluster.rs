//! A node of a cluster as the S3 layer sees it (issue 13 "Nodes", `docs/cluster.md` "Nodes"): any node answers
//! for any bucket. What a node does to keep each bucket's redundancy (copies, XOR parity, catch-up, tombstones,
//! the publish of conditional writes) is `permafrost-cluster`'s ([`ClusterNode`]); this module routes S3
//! requests to it and turns its results and errors into S3 answers ([`NodeAnswers`]).
//!
//! - **Directory first.** In a cluster, GET and HEAD of the current version look the object up in the shared
//!   directory (`permafrost_catalog::cluster`). This node holds it: the local store answers. Another node
//!   holds it: HEAD is answered from the directory; GET is forwarded to the first holder that is up (newest
//!   version first), and when every holder is down the answer is `503 ServiceUnavailable` naming them.
//!   Held as XOR fragments: `parity` answers.
//! - ListObjects (v1, v2) and ListBuckets come from the directory; buckets are cluster-wide (a PUT into a
//!   bucket another node made creates it here first).
//! - Writes commit locally first, then are published in the directory ([`NodeAnswers::publish`]) and get
//!   their copies ([`NodeAnswers::replicate`], `ClusterNode::replicate_blocking`) before the client gets its
//!   answer; a write stopped between the two is answered `503`, never acknowledged.
//! - **Conditional writes** (`If-None-Match: *`, `If-Match`) hold cluster-wide: the local commit checks the
//!   condition in this node's catalog, and the publish checks it against the directory in the transaction that
//!   writes the row (`ClusterNode::publish_conditional`); refused, the local commit is undone and the answer is
//!   `412` (`404` for `If-Match` on a key no node holds). Conditional writes of one key on a node take turns
//!   ([`NodeAnswers::conditional_begins`] to [`NodeAnswers::publish_written`]) and are invisible until their
//!   publish decides ([`NodeAnswers::route`]). A crash between the two is published by the reconcile without
//!   the condition (`docs/cluster.md`, "Conditional writes").
//! - Versioning and `copies > 1` exclude each other (PutBucketVersioning answers `400`): copies do not cover
//!   versions.
//! - **DELETE** (and each key of DeleteObjects) of the current version removes every copy
//!   (`ClusterNode::delete_everywhere_now`).
//! - **Node-to-node data.** Copies and parity fragments move only over relay connections that prove the
//!   cluster secret (`permafrost-cluster`). The GET forwarding below is the one other node-to-node connection:
//!   it is S3, authenticated by the client's own signature.
//! - **Forwarding and authentication.** The forwarded GET carries the client's own request: method, path,
//!   query and every header, `Host` and `Authorization` included, plus [`FORWARDED_HEADER`]. The holder checks
//!   the client's SigV4 signature itself (the signature covers `Host`, which is kept as the client sent it), so
//!   no node-to-node credential exists that could be stolen or misused, and a node can never read more than
//!   the client may. The price: every node of a cluster has the same root credentials (which a cluster that
//!   answers any request on any node needs anyway), and a presigned URL is forwarded as it is. A forwarded
//!   request is served locally by the holder, never forwarded again (no loops).
//! - **Database gone.** A directory lookup that fails is `503 ServiceUnavailable` with the database's message
//!   (never an answer from stale local state); the store's own catalog errors are mapped the same way
//!   (`error`), and so are [`ClusterError`]s ([`cluster_unavailable`]).

use std::sync::Arc;

use permafrost_catalog::cluster::{DirEntry, Health, NodeInfo};
use permafrost_catalog::{CatalogError, WriteCondition};
use permafrost_cluster::{ClusterError, ClusterNode, ConditionalWrite, Refused};
use permafrost_store::{BucketSettings, Store, StoreError};
use s3s::dto::ETagCondition;
use s3s::{S3Error, S3ErrorCode, S3Result};

/// Marks a request one node forwarded to another (served locally there).
pub const FORWARDED_HEADER: &str = "x-permafrost-forwarded-by";
/// The code of the internal answer "forward this GET to the address in the message" (`server` turns it into
/// the forwarded request; never sent to a client).
pub(crate) const FORWARD_CODE: &str = "PermafrostForwardTo";

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
    /// Held as XOR fragments (`crate::parity`).
    Parity(permafrost_catalog::cluster::ParityObject),
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

/// A cluster error as an S3 error: the directory's as [`unavailable`]; this node's store failing is `503` too
/// (with the same words as a directory outage, as before the cluster code had its own crate).
pub(crate) fn cluster_unavailable(e: ClusterError) -> S3Error {
    match e {
        ClusterError::Catalog(e) => unavailable(e),
        ClusterError::Store(m) => {
            service_unavailable(format!("the cluster catalog database is unavailable: {m}"))
        }
        ClusterError::Runtime(m) => crate::error::internal(m),
    }
}

/// Run a blocking cluster call off the async threads.
pub(crate) async fn blocking<T, E, F>(f: F) -> S3Result<T>
where
    T: Send + 'static,
    E: Into<ClusterError> + Send + 'static,
    F: FnOnce() -> Result<T, E> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(|e| cluster_unavailable(e.into())),
        Err(e) => Err(crate::error::internal(format!("cluster task failed: {e}"))),
    }
}

/// What the S3 layer asks of this node's [`ClusterNode`], answered as S3 answers (each blocking cluster call
/// runs off the async threads).
pub(crate) trait NodeAnswers {
    /// Where the current version of `bucket/key` is answered.
    async fn route(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
    ) -> S3Result<Route>;

    /// The answer for a GET held elsewhere: forward to the holders up (in order: the next one when one does not
    /// answer), or 503 naming the holders down. The message lists `name=address` of the holders up.
    fn forward_or_unavailable(
        bucket: &str,
        key: &str,
        up: &[NodeInfo],
        down: &[NodeInfo],
    ) -> S3Error;

    /// The bucket exists here too when the cluster knows it (a PUT into a bucket another node made).
    async fn ensure_local_bucket(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
    ) -> S3Result<()>;

    /// After a local write of `bucket/key`: publish what the store now holds, recorded as under-replicated
    /// until its copies are made (`ClusterNode::publish_entry`).
    async fn publish(self: &Arc<Self>, store: &Arc<Store>, bucket: &str, key: &str)
        -> S3Result<()>;

    /// Before a conditional write (`If-None-Match: *`, `If-Match`) of `bucket/key` in a cluster; `None` for an
    /// unconditional one. Conditional writes of one key on this node take turns (from before the body is read
    /// to their publish), and until its publish decides, the write is invisible here ([`NodeAnswers::route`]).
    /// The returned hold carries the condition the local commit checks when it must differ from the client's
    /// (`ClusterNode::conditional_local`; [`LocalHeaders`]).
    /// `503` while this node's directory rows are behind its store (a publish failed; the next reconcile
    /// catches up): the directory could not decide the condition correctly until then.
    async fn conditional_begins(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
        condition: WriteCondition,
    ) -> S3Result<Option<ConditionalWrite>>;

    /// After the local commit of a write of `bucket/key`: [`NodeAnswers::publish`], or for a conditional write
    /// the publish that checks the client's condition against the directory
    /// (`ClusterNode::publish_conditional`). Refused (another node holds the key, or another version): the
    /// local commit is undone — the version is removed (a versioned bucket's previous version is current
    /// again), its content left to the garbage collection — and the answer is `412 PreconditionFailed` (`404
    /// NoSuchKey` for `If-Match` on a key that exists nowhere). The database unavailable: undone as well,
    /// answered `503`.
    async fn publish_written(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
        conditional: Option<ConditionalWrite>,
        written: Option<&s3s::dto::ETag>,
    ) -> S3Result<()>;

    /// After a local delete of the current version of `bucket/key`: no node holds it any more (the other
    /// holders get tombstones and delete their copies).
    async fn delete_everywhere(self: &Arc<Self>, bucket: &str, key: &str) -> S3Result<()>;

    /// After the local commit and publish of `bucket/key`: make the bucket's other copies
    /// (`ClusterNode::replicate_blocking`). `Err` only when the directory cannot be reached (`503`).
    async fn replicate(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
    ) -> S3Result<()>;

    /// PutBucketVersioning on a bucket with `copies > 1`, and CreateBucket with Object Lock (versioned from the
    /// start) when the cluster default is `> 1`, are refused (`400 InvalidRequest`): copies do not cover
    /// versions (a copy would become a new version on its holder, delete markers would not be copied).
    async fn refuse_versioning_with_copies(self: &Arc<Self>, bucket: &str) -> S3Result<()>;
}

impl NodeAnswers for ClusterNode {
    async fn route(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
    ) -> S3Result<Route> {
        let store = Arc::clone(store);
        let me = Arc::clone(self);
        let (bucket, key) = (bucket.to_owned(), key.to_owned());
        let holders = {
            let (me, bucket, key) = (Arc::clone(&me), bucket.clone(), key.clone());
            blocking(move || me.db.holders(&bucket, &key)).await?
        };
        if permafrost_cluster::conditional_pending(&me.node_name, &bucket, &key) {
            // A conditional write of the key on this node awaits its publish, which may refuse it: unlisted, the
            // key does not exist yet; listed, the answer waits for the publish (the local store may hold the
            // write that is being decided).
            let listed = !holders.is_empty() || {
                let (me, bucket, key) = (Arc::clone(&me), bucket.clone(), key.clone());
                blocking(move || me.db.parity_object(&bucket, &key))
                    .await?
                    .is_some()
            };
            if !listed {
                return Err(S3Error::with_message(
                    S3ErrorCode::NoSuchKey,
                    format!("{bucket}/{key} does not exist (a conditional write of it is not decided yet)"),
                ));
            }
            permafrost_cluster::conditional_wait(&me.node_name, &bucket, &key).await;
            return Box::pin(me.route(&store, &bucket, &key)).await;
        }
        let Some((_, newest)) = holders.first() else {
            // No whole holder: held as XOR fragments?
            let parity = {
                let (me, bucket, key) = (Arc::clone(&me), bucket.clone(), key.clone());
                blocking(move || me.db.parity_object(&bucket, &key)).await?
            };
            if let Some(obj) = parity {
                return Ok(Route::Parity(obj));
            }
            // Deleted on another node while this one still has its copy (its heartbeat deletes it soon): delete
            // it now, so that this node never answers with an object the cluster deleted.
            {
                let (me, store, bucket) = (Arc::clone(&me), Arc::clone(&store), bucket.clone());
                blocking(move || me.apply_own_tombstone(&store, &bucket, &key)).await?;
            }
            // A cluster bucket this node has no copy in yet: the local answer is then NoSuchKey, as elsewhere.
            me.ensure_local_bucket(&store, &bucket).await?;
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

    fn forward_or_unavailable(
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

    async fn ensure_local_bucket(
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

    async fn publish(
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
            crate::bridge::blocking(move || store.head_object(&bucket, &key)).await
        };
        let info = match info {
            Ok(info) => info,
            Err(e) => {
                // The local commit stands unpublished: the heartbeat's reconcile publishes it.
                me.directory_behind
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                return Err(e);
            }
        };
        let entry = DirEntry {
            bucket,
            key,
            size_bytes: info.size_bytes,
            etag: info.etag,
            last_modified_ms: info.last_modified_ms,
            content_type: info.content_type,
        };
        blocking(move || me.publish_entry(&entry)).await
    }

    async fn conditional_begins(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
        condition: WriteCondition,
    ) -> S3Result<Option<ConditionalWrite>> {
        if condition == WriteCondition::Always {
            return Ok(None);
        }
        if self
            .directory_behind
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(service_unavailable(format!(
                "{bucket}/{key}: this node's directory rows are behind its store (the cluster database was \
                 unavailable); conditional writes are refused until its reconcile caught up, try again shortly"
            )));
        }
        let mut write =
            permafrost_cluster::conditional_hold(&self.node_name, bucket, key, condition.clone())
                .await;
        let (me, store, b, k) = (
            Arc::clone(self),
            Arc::clone(store),
            bucket.to_owned(),
            key.to_owned(),
        );
        let local = blocking(move || me.conditional_local(&store, &b, &k, &condition)).await?;
        write.set_local(local);
        Ok(Some(write))
    }

    async fn publish_written(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
        conditional: Option<ConditionalWrite>,
        written: Option<&s3s::dto::ETag>,
    ) -> S3Result<()> {
        let Some(write) = conditional else {
            return self.publish(store, bucket, key).await;
        };
        let written = written.map(|t| t.value().trim_matches('"').to_owned());
        let (me, store, b, k) = (
            Arc::clone(self),
            Arc::clone(store),
            bucket.to_owned(),
            key.to_owned(),
        );
        let outcome = tokio::task::spawn_blocking(move || {
            me.publish_conditional(&store, &b, &k, write, written.as_deref())
        })
        .await
        .map_err(|e| crate::error::internal(format!("cluster task failed: {e}")))?;
        let Refused {
            error: refused,
            undone,
        } = match outcome {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if let Some(Err(e)) = &undone {
            // Left committed and unpublished: the reconcile would publish it without its condition.
            tracing::error!(
                "cluster: the refused conditional write of {bucket}/{key} could not be undone: {e}"
            );
        }
        Err(match refused {
            CatalogError::PreconditionFailed(m) => {
                S3Error::with_message(S3ErrorCode::PreconditionFailed, m)
            }
            CatalogError::NoSuchKey { bucket, key } => S3Error::with_message(
                S3ErrorCode::NoSuchKey,
                format!("{bucket}/{key} exists on no node of the cluster (If-Match)"),
            ),
            other => unavailable(other),
        })
    }

    async fn delete_everywhere(self: &Arc<Self>, bucket: &str, key: &str) -> S3Result<()> {
        let others = {
            let (me, bucket, key) = (Arc::clone(self), bucket.to_owned(), key.to_owned());
            blocking(move || me.delete_everywhere_now(&bucket, &key)).await?
        };
        if !others.is_empty() {
            tracing::info!(
                "cluster: deleted {bucket}/{key}; tombstones for {} (each deletes its copy)",
                others.join(", ")
            );
        }
        Ok(())
    }

    async fn replicate(
        self: &Arc<Self>,
        store: &Arc<Store>,
        bucket: &str,
        key: &str,
    ) -> S3Result<()> {
        let (me, store, bucket, key) = (
            Arc::clone(self),
            Arc::clone(store),
            bucket.to_owned(),
            key.to_owned(),
        );
        match tokio::task::spawn_blocking(move || {
            me.replicate_blocking(&store, &bucket, &key, None)
        })
        .await
        {
            Ok(result) => result.map(|_| ()).map_err(cluster_unavailable),
            Err(e) => Err(crate::error::internal(format!("copy task failed: {e}"))),
        }
    }

    async fn refuse_versioning_with_copies(self: &Arc<Self>, bucket: &str) -> S3Result<()> {
        let (me, name) = (Arc::clone(self), bucket.to_owned());
        let copies = blocking(move || me.copies_for(&name)).await?;
        if copies > 1 {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!(
                    "bucket {bucket} has copies = {copies} across the cluster's nodes, and copies do not cover \
                     versioned buckets yet; set `permafrost cluster bucket {bucket} --copies 1` first"
                ),
            ));
        }
        Ok(())
    }
}

/// The local commit's conditions of a conditional write, as S3 request headers.
pub(crate) trait LocalHeaders {
    /// The local commit's `(If-Match, If-None-Match)` when they must replace the client's headers.
    fn local_headers(&self) -> Option<(Option<ETagCondition>, Option<ETagCondition>)>;

    /// [`LocalHeaders::local_headers`] on a request's raw headers (CopyObject reads them there).
    fn set_local_headers(&self, headers: &mut http::HeaderMap);
}

impl LocalHeaders for ConditionalWrite {
    fn local_headers(&self) -> Option<(Option<ETagCondition>, Option<ETagCondition>)> {
        self.local().map(|c| match c {
            WriteCondition::Absent => (None, Some(ETagCondition::Any)),
            WriteCondition::EtagMatches(tags) => (
                Some(ETagCondition::ETag(s3s::dto::ETag::Strong(tags.join(", ")))),
                None,
            ),
            WriteCondition::Always => (None, None),
        })
    }

    fn set_local_headers(&self, headers: &mut http::HeaderMap) {
        let Some((if_match, if_none_match)) = self.local_headers() else {
            return;
        };
        headers.remove(http::header::IF_MATCH);
        headers.remove(http::header::IF_NONE_MATCH);
        let text = |c: ETagCondition| match c {
            ETagCondition::Any => "*".to_owned(),
            ETagCondition::ETag(t) => format!("\"{}\"", t.value()),
        };
        if let Some(v) = if_match.map(text).and_then(|t| t.parse().ok()) {
            headers.insert(http::header::IF_MATCH, v);
        }
        if let Some(v) = if_none_match.map(text).and_then(|t| t.parse().ok()) {
            headers.insert(http::header::IF_NONE_MATCH, v);
        }
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

#[cfg(test)]
mod tests {
    use super::LocalHeaders;

    #[test]
    fn a_conditional_write_rewrites_the_local_headers() {
        use permafrost_catalog::WriteCondition;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut write = runtime.block_on(permafrost_cluster::conditional_hold(
            "n1",
            "b",
            "k",
            WriteCondition::EtagMatches(vec!["e1".into()]),
        ));
        assert!(permafrost_cluster::conditional_pending("n1", "b", "k"));
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::IF_MATCH, "\"e1\"".parse().unwrap());
        write.set_local_headers(&mut headers);
        assert_eq!(
            headers[http::header::IF_MATCH],
            "\"e1\"",
            "no local condition: as sent"
        );
        write.set_local(Some(WriteCondition::Absent));
        write.set_local_headers(&mut headers);
        assert!(headers.get(http::header::IF_MATCH).is_none());
        assert_eq!(headers[http::header::IF_NONE_MATCH], "*");
        write.set_local(Some(WriteCondition::EtagMatches(vec!["\"stale\"".into()])));
        write.set_local_headers(&mut headers);
        assert!(headers.get(http::header::IF_NONE_MATCH).is_none());
        let local = crate::conditional::write_condition_of_headers(&headers).unwrap();
        assert_eq!(local, WriteCondition::EtagMatches(vec!["stale".into()]));
        drop(write);
        assert!(!permafrost_cluster::conditional_pending("n1", "b", "k"));
    }
}
