//! A node of a cluster (issue 13 "Nodes", `docs/cluster.md` "Nodes"): any node answers for any bucket.
//!
//! - **Directory first.** In a cluster, GET and HEAD of the current version look the object up in the shared
//!   directory (`permafrost_catalog::cluster`). This node holds it: the local store answers. Another node
//!   holds it: HEAD is answered from the directory; GET is forwarded to the first holder that is up (newest
//!   version first), and when every holder is down the answer is `503 ServiceUnavailable` naming them.
//! - ListObjects (v1, v2) and ListBuckets come from the directory; buckets are cluster-wide (a PUT into a
//!   bucket another node made creates it here first).
//! - Writes commit locally first: after the local commit a PUT, multipart completion or copy publishes the
//!   object in the directory (a crash between the two is repaired by the reconcile at start), then makes the
//!   bucket's other `copies − 1` copies ([`ClusterNode::replicate`], below) before the client gets its answer.
//!   The publish records the object as under-replicated in the same transaction
//!   ([`ClusterDb::publish_write`]) and its copies clear that record, so a write stopped between the two (a
//!   crash, the database going away, its own store unreadable: answered `503`, never acknowledged) is left
//!   to the catch-up instead of staying short of copies unnoticed.
//! - **Conditional writes** (`If-None-Match: *`, `If-Match`) hold cluster-wide: the local commit checks the
//!   condition in this node's catalog, and the publish checks it against the directory in the transaction that
//!   writes the row ([`ClusterDb::publish_write_if`]); refused, the local commit is undone and the answer is
//!   `412` (`404` for `If-Match` on a key no node holds). Conditional writes of one key on a node take turns
//!   ([`ClusterNode::conditional_begins`] to [`ClusterNode::publish_written`]) and are invisible until their
//!   publish decides ([`ClusterNode::route`]). A crash between the two is published by the reconcile without
//!   the condition (`docs/cluster.md`, "Conditional writes").
//! - **Copies.** `[cluster] copies = k` (or the bucket's own `copies`, [`ClusterDb::set_bucket_copies`]): the
//!   receiving node streams the object, read back from its own store, along a replication tree
//!   ([`tree_for_write`], the one place that chooses it) to `k − 1` other nodes that are up, with
//!   `permafrost_relay::write_copies` (a copy that fails is retried on another node). Each node runs the relay
//!   node role in-process ([`copy_sink`]): a copy is written into its store as the pieces arrive, carries the
//!   origin's ETag, last-modified time and metadata (`wire::ObjectMeta`), and is published by its holder
//!   before it is acknowledged; a copy that breaks off is discarded (nothing visible). The client is answered
//!   after every copy to the nodes that could take one is durable. Fewer nodes than `k` (up, or working):
//!   the write is answered with the copies made and recorded as under-replicated; the catch-up
//!   ([`ClusterNode::catch_up`], on a holder's heartbeat) makes the missing copies when nodes are back.
//! - **Lost nodes.** A node silent for `[cluster] lost_after_ms` is lost: each catch-up pass first retires up to
//!   [`LOST_COPIES_PER_PASS`] of its copies that a live node also holds ([`ClusterDb::retire_lost`]: its row
//!   goes, it gets a tombstone, the object is recorded as under-replicated), so the catch-up makes new copies
//!   elsewhere and the node, should it return, drops its stale copies instead of republishing them.
//! - **A copy racing a DELETE**: the holder publishes a copy only while the version still exists elsewhere
//!   ([`ClusterDb::publish_copy`], one transaction); else it deletes the copy again and does not acknowledge it.
//! - Versioning and `copies > 1` exclude each other (PutBucketVersioning answers `400`): copies do not cover
//!   versions.
//! - **DELETE** (and each key of DeleteObjects) of the current version removes every copy: the local delete, then one directory transaction
//!   that removes every holder's row and leaves each other holder a tombstone ([`ClusterDb::delete_everywhere`]);
//!   a holder deletes its copy when it sees its tombstone — on its next heartbeat when up, at start before
//!   its reconcile when it was down — so a holder that was down never brings the object back.
//! - **Node-to-node data.** Copies and parity fragments move only over relay connections, each opened by a
//!   mutual proof of the cluster secret ([`Replication::credentials`], `permafrost_relay::auth`): a peer
//!   without it is refused before any fragment is read. The GET forwarding below is the one other
//!   node-to-node connection: it is S3, authenticated by the client's own signature.
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use permafrost_catalog::cluster::{
    ClusterDb, DirEntry, Health, NodeInfo, TransferKind, TransferStart, UnderReplicated,
};
use permafrost_catalog::{CatalogError, WriteCondition};
use permafrost_relay::{
    write_copies, Copies, Credentials, NodeStats, ObjectMeta, Sink, SinkFactory,
};
use permafrost_store::{
    BucketSettings, ObjectInfo, PutHandle, PutOptions, ReplicaOf, Store, StoreError,
};
use permafrost_topology::{NodeId, Role, Topology};
use s3s::dto::ETagCondition;
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
    /// How this node makes the copies of what it receives.
    pub replication: Replication,
    /// The `bucket/key`s whose copies this node is making now: one copier per key at a time, so a catch-up
    /// never makes a second set of copies beside a write (whose publish recorded it as under-replicated).
    pub copying: CopiesInFlight,
    /// A publish or directory delete failed after its local change (the database went away): the directory
    /// is behind this node's store until a reconcile. The heartbeat reconciles when it sees this set, so an
    /// outage shorter than a heartbeat is repaired too.
    pub directory_behind: std::sync::atomic::AtomicBool,
}

/// The `bucket/key`s whose copies this node is making ([`ClusterNode::copying`]): a write waits for the
/// key ([`CopiesInFlight::enter`]), a catch-up skips it when taken ([`CopiesInFlight::try_enter`]); whoever
/// comes second reads the holders again and finds the copies the first one made.
#[derive(Default)]
pub struct CopiesInFlight {
    keys: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    freed: std::sync::Condvar,
}

impl CopiesInFlight {
    /// Take `bucket/key`, waiting while another copier has it.
    fn enter(&self, bucket: &str, key: &str) -> CopyingGuard<'_> {
        let id = (bucket.to_owned(), key.to_owned());
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        while keys.contains(&id) {
            keys = self.freed.wait(keys).unwrap_or_else(|p| p.into_inner());
        }
        keys.insert(id.clone());
        CopyingGuard { set: self, id }
    }

    /// Take `bucket/key` if no other copier has it.
    fn try_enter(&self, bucket: &str, key: &str) -> Option<CopyingGuard<'_>> {
        let id = (bucket.to_owned(), key.to_owned());
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if !keys.insert(id.clone()) {
            return None; // (a guard made here would free the other copier's key when dropped)
        }
        Some(CopyingGuard { set: self, id })
    }
}

/// A copier's hold on one key of [`CopiesInFlight`], given up when dropped.
struct CopyingGuard<'a> {
    set: &'a CopiesInFlight,
    id: (String, String),
}

impl Drop for CopyingGuard<'_> {
    fn drop(&mut self) {
        let mut keys = self.set.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.remove(&self.id);
        self.set.freed.notify_all();
    }
}

/// How a node makes copies (issue 13 `copies = k`).
pub struct Replication {
    /// `[cluster] copies`: the cluster default of copies per object (1 = one holder, no copies).
    pub copies: u32,
    /// `[cluster] topology`, when set: the network the trees are built on (else direct hops).
    pub topology: Option<Arc<Topology>>,
    /// `[cluster.relays]`: where the `permafrost relay serve` processes the topology names listen.
    pub relays: BTreeMap<String, String>,
    /// The root sender's counters.
    pub stats: Arc<NodeStats>,
    /// `[cluster] lost_after_ms`: a node silent this long is lost; its copies are made again elsewhere.
    pub lost_after_ms: u64,
    /// This node's name and the cluster secret, proved on every connection it opens to another node's relay
    /// (`permafrost_relay::auth`; docs/security.md "Cluster traffic").
    pub credentials: Credentials,
}

impl Default for Replication {
    fn default() -> Self {
        Replication {
            copies: 1,
            topology: None,
            relays: BTreeMap::new(),
            stats: Arc::new(NodeStats::default()),
            lost_after_ms: 600_000,
            // A secret no other process knows: a node made without the cluster's secret reaches no relay.
            credentials: Credentials {
                name: String::new(),
                secret: permafrost_relay::Secret::new(
                    permafrost_relay::Secret::generate_hex().as_bytes(),
                )
                .expect("64 hex digits"),
            },
        }
    }
}

/// Piece size of a copy on the wire.
pub const COPY_PIECE_BYTES: u32 = 1 << 20;

/// Most copies of lost nodes one catch-up pass retires (each then needs a new copy): bounds a pass's work.
pub const LOST_COPIES_PER_PASS: usize = 256;

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
    pub(crate) async fn route(
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
        if conditional_pending(&me.node_name, &bucket, &key) {
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
            drop(
                conditional_stripe(&me.node_name, &bucket, &key)
                    .lock()
                    .await,
            );
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
                blocking(move || {
                    if let Some(t) = me.db.tombstone(me.node_id, &bucket, &key)? {
                        apply_tombstone(&store, &t).map_err(CatalogError::Unreachable)?;
                        me.db.clear_tombstone(me.node_id, &t)?;
                    }
                    Ok(())
                })
                .await?;
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

    /// After a local write of `bucket/key`: publish what the store now holds, recorded as under-replicated
    /// until its copies are made ([`ClusterDb::publish_write`]).
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
        let published = async {
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
            let me = Arc::clone(&me);
            blocking(move || {
                me.db
                    .publish_write(me.node_id, &entry, me.replication.copies)
            })
            .await
        }
        .await;
        if published.is_err() {
            // The local commit stands unpublished: the heartbeat's reconcile publishes it.
            me.directory_behind
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        published
    }

    /// Before a conditional write (`If-None-Match: *`, `If-Match`) of `bucket/key` in a cluster; `None` for an
    /// unconditional one. Conditional writes of one key on this node take turns (from before the body is read
    /// to their publish), and until its publish decides, the write is invisible here ([`ClusterNode::route`]).
    /// The returned hold carries the condition the local commit checks when it must differ from the client's:
    /// `If-Match` through a node that holds no current copy (none, or a stale one) cannot be decided by its own
    /// catalog, so the local commit then only checks that the local key is still as seen here (absent, or that
    /// stale ETag) and the directory decides the client's condition ([`ClusterNode::publish_written`]).
    /// `503` while this node's directory rows are behind its store (a publish failed; the next reconcile
    /// catches up): the directory could not decide the condition correctly until then.
    pub(crate) async fn conditional_begins(
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
        let id = (self.node_name.clone(), bucket.to_owned(), key.to_owned());
        let held = conditional_stripe(&self.node_name, bucket, key)
            .lock_owned()
            .await;
        conditional_state()
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone());
        let mut write = ConditionalWrite {
            _held: held,
            id,
            condition: condition.clone(),
            local: None,
        };
        let (me, store2, b, k) = (
            Arc::clone(self),
            Arc::clone(store),
            bucket.to_owned(),
            key.to_owned(),
        );
        write.local = blocking(move || {
            // A copy the cluster deleted is gone here first (as a read does): it must not decide the condition.
            if let Some(t) = me.db.tombstone(me.node_id, &b, &k)? {
                apply_tombstone(&store2, &t).map_err(CatalogError::Unreachable)?;
                me.db.clear_tombstone(me.node_id, &t)?;
            }
            if !matches!(condition, WriteCondition::EtagMatches(_)) {
                return Ok(None);
            }
            let newest = match me.db.holders(&b, &k)?.into_iter().next() {
                Some((_, e)) => Some(e),
                None => me.db.parity_object(&b, &k)?.map(|p| p.entry),
            };
            let Some(newest) = newest else {
                return Ok(None); // exists nowhere in the directory: the local check answers (404 or 412)
            };
            Ok(match store2.head_object(&b, &k) {
                Ok(l) if l.etag == newest.etag && l.last_modified_ms == newest.last_modified_ms => {
                    None
                }
                Ok(stale) => Some(WriteCondition::EtagMatches(vec![stale.etag])),
                Err(StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket(_)) => {
                    Some(WriteCondition::Absent)
                }
                Err(e) => return Err(CatalogError::Unreachable(e.to_string())),
            })
        })
        .await?;
        Ok(Some(write))
    }

    /// After the local commit of a write of `bucket/key`: [`ClusterNode::publish`], or for a conditional write
    /// the publish that checks the client's condition against the directory ([`ClusterDb::publish_write_if`]).
    /// Refused (another node holds the key, or another version): the local commit is undone — the version is
    /// removed (a versioned bucket's previous version is current again), its content left to the garbage
    /// collection — and the answer is `412 PreconditionFailed` (`404 NoSuchKey` for `If-Match` on a key that
    /// exists nowhere). The database unavailable: undone as well, answered `503`.
    pub(crate) async fn publish_written(
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
            let info = match store.head_object(&b, &k) {
                Ok(info) => info,
                Err(e) => return Err((CatalogError::Unreachable(e.to_string()), None)),
            };
            if written.as_deref().is_some_and(|w| w != info.etag.trim_matches('"')) {
                // Replaced on this node by a later write before this publish: this write is not current anywhere
                // and its condition was never decided by the directory; refused (nothing to undo).
                let refused = CatalogError::PreconditionFailed(format!(
                    "{b}/{k} was replaced on this node by another write before this conditional write was published"
                ));
                return Err((refused, None));
            }
            let entry = DirEntry {
                bucket: b.clone(),
                key: k.clone(),
                size_bytes: info.size_bytes,
                etag: info.etag.clone(),
                last_modified_ms: info.last_modified_ms,
                content_type: info.content_type.clone(),
            };
            let published = me.db.publish_write_if(
                me.node_id,
                &entry,
                me.replication.copies,
                &write.condition,
            );
            let Err(refused) = published else {
                drop(write);
                return Ok(());
            };
            let undone = undo_local_commit(&store, &b, &k, &info);
            drop(write);
            Err((refused, Some(undone)))
        })
        .await
        .map_err(|e| crate::error::internal(format!("cluster task failed: {e}")))?;
        let (refused, undone) = match outcome {
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

    /// After a local delete of the current version of `bucket/key`: no node holds it any more (the other
    /// holders get tombstones and delete their copies).
    pub(crate) async fn delete_everywhere(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
    ) -> S3Result<()> {
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

    /// [`ClusterNode::delete_everywhere`] on the calling (blocking) thread; DeleteObjects calls it per key.
    /// Returns the other nodes left a tombstone. When the directory cannot be changed, the local delete stands
    /// and the next heartbeat's reconcile removes this node's row.
    pub(crate) fn delete_everywhere_now(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Vec<String>, CatalogError> {
        let deleted = self
            .db
            .delete_everywhere(self.node_id, bucket, key)
            .and_then(|mut others| {
                // Held as XOR fragments: each fragment holder gets a tombstone too.
                others.extend(self.db.delete_parity(bucket, key)?);
                Ok(others)
            });
        if deleted.is_err() {
            self.directory_behind
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        deleted
    }

    /// After the local commit and publish of `bucket/key`: make the bucket's other copies (see the module
    /// doc). `Err` only when the directory cannot be reached (`503`).
    pub(crate) async fn replicate(
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
            Ok(result) => result.map(|_| ()).map_err(unavailable),
            Err(e) => Err(crate::error::internal(format!("copy task failed: {e}"))),
        }
    }

    /// PutBucketVersioning on a bucket with `copies > 1`, and CreateBucket with Object Lock (versioned from the
    /// start) when the cluster default is `> 1`, are refused (`400 InvalidRequest`): copies do not cover
    /// versions (a copy would become a new version on its holder, delete markers would not be copied).
    pub(crate) async fn refuse_versioning_with_copies(
        self: &Arc<Self>,
        bucket: &str,
    ) -> S3Result<()> {
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

    /// The copies of `bucket`: its own setting, else the cluster default.
    pub fn copies_for(&self, bucket: &str) -> Result<u32, CatalogError> {
        Ok(self
            .db
            .bucket_copies(bucket)?
            .unwrap_or(self.replication.copies))
    }

    /// Make the missing copies of the version of `bucket/key` this node holds (`expect`: only when it is that
    /// version), from this node, to nodes that are up and hold none. Returns the holders after it. The
    /// outcome is recorded in the directory (under-replicated or not) and logged in one line.
    pub fn replicate_blocking(
        &self,
        store: &Store,
        bucket: &str,
        key: &str,
        expect: Option<&UnderReplicated>,
    ) -> Result<usize, CatalogError> {
        if self.db.bucket_parity(bucket)?.as_deref() == Some(crate::parity::XOR) {
            return crate::parity::place(self, store, bucket, key, expect);
        }
        let wanted = self.copies_for(bucket)?.max(1);
        if wanted == 1 && expect.is_none() {
            return Ok(1);
        }
        // A write waits for a catch-up of its key (then finds its copies made); a catch-up takes the key in
        // `catch_up`.
        let _copying = expect.is_none().then(|| self.copying.enter(bucket, key));
        let Some((info, entry)) = local_version(store, bucket, key, expect, "copies")? else {
            return Ok(0);
        };
        let holders: Vec<String> = self
            .db
            .holders(bucket, key)?
            .into_iter()
            .filter(|(_, e)| e.etag == entry.etag && e.last_modified_ms == entry.last_modified_ms)
            .map(|(n, _)| n.name)
            .collect();
        let have = holders.len().max(1);
        if have >= wanted as usize {
            self.db.record_copies(&entry, wanted, have as u32)?;
            return Ok(have);
        }
        let relays: BTreeMap<String, String> = self.db.relay_addresses()?.into_iter().collect();
        let up: Vec<String> = self
            .db
            .nodes()?
            .into_iter()
            .filter(|n| {
                n.health == Health::Up
                    && n.id != self.node_id
                    && relays.contains_key(&n.name)
                    && !holders.contains(&n.name)
            })
            .map(|n| n.name)
            .collect();
        let started = Instant::now();
        // The network with the links' live use (the catalog's topology, loaded by the nodes that have a
        // `[cluster] topology`); if the catalog cannot say, the file this node loaded at start.
        let live = match self.db.topology_live() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(
                    "cluster: the live topology is unavailable ({e}); {bucket}/{key} uses this node's topology file"
                );
                None
            }
        };
        let mut recorded: Option<i64> = None;
        let outcome = match tree_for_write(
            &self.node_name,
            &up,
            live.as_ref().or(self.replication.topology.as_deref()),
            &format!("{bucket}/{key}"),
        ) {
            Err(e) => Err(e),
            Ok(plan) if plan.candidates.is_empty() => Err("no other node is up".to_owned()),
            Ok(plan) => {
                let k = (wanted as usize - have).min(plan.candidates.len());
                let names: Vec<&str> = plan
                    .candidates
                    .iter()
                    .map(|&c| plan.topology.name(c))
                    .collect();
                recorded = self
                    .db
                    .transfer_started(&TransferStart {
                        name: format!("{bucket}/{key}"),
                        kind: TransferKind::Write,
                        root: self.node_name.clone(),
                        tree: format!("{} → {k} of {{ {} }}", self.node_name, names.join(", ")),
                        k: k as u64,
                        bytes: info.size_bytes,
                    })
                    .map_err(|e| {
                        tracing::warn!(
                            "cluster: could not record the transfer of {bucket}/{key}: {e}"
                        )
                    })
                    .ok();
                let meta = ObjectMeta {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                    etag: info.etag.clone(),
                    last_modified_ms: info.last_modified_ms,
                    content_type: info.content_type.clone(),
                    user_metadata: info.user_metadata.clone(),
                    attributes: serde_json::to_value(&info.attributes).ok(),
                };
                let addr_of = |name: &str| {
                    relays
                        .get(name)
                        .or_else(|| self.replication.relays.get(name))
                        .cloned()
                };
                let mut open = || -> std::io::Result<Box<dyn std::io::Read>> {
                    let (now, reader) = store
                        .open_object(bucket, key, None, None)
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                    if now.etag != info.etag || now.last_modified_ms != info.last_modified_ms {
                        return Err(std::io::Error::other(
                            "a newer version replaced it meanwhile (that write makes its own copies)",
                        ));
                    }
                    Ok(Box::new(reader))
                };
                let transfer = format!("{bucket}/{key}@{}", info.last_modified_ms);
                write_copies(
                    &plan.topology,
                    plan.root,
                    &Copies::Any {
                        candidates: plan.candidates,
                        k,
                    },
                    &addr_of,
                    &transfer,
                    Some(&meta),
                    &mut open,
                    info.size_bytes,
                    COPY_PIECE_BYTES,
                    &self.replication.stats,
                    &self.replication.credentials,
                )
                .map_err(|e| e.to_string())
            }
        };
        if let Some(id) = recorded {
            let (result, tree) = match &outcome {
                Ok(w) if w.complete() => {
                    ("ok".to_owned(), w.attempts.last().map(|a| a.tree.clone()))
                }
                Ok(w) => (
                    format!(
                        "failed: {}",
                        w.gave_up.as_deref().unwrap_or("copies missing")
                    ),
                    w.attempts.last().map(|a| a.tree.clone()),
                ),
                Err(e) => (format!("failed: {e}"), None),
            };
            if let Err(e) = self.db.transfer_finished(id, &result, tree.as_deref()) {
                tracing::warn!(
                    "cluster: could not record the end of the transfer of {bucket}/{key}: {e}"
                );
            }
        }
        let (stored, why) = match outcome {
            Ok(written) => {
                let failures: Vec<String> = written
                    .attempts
                    .iter()
                    .flat_map(|a| &a.acks)
                    .filter(|a| !a.ok)
                    .map(|a| format!("{}: {}", a.node, a.error.as_deref().unwrap_or("failed")))
                    .collect();
                let why = written
                    .gave_up
                    .into_iter()
                    .chain(failures)
                    .collect::<Vec<_>>();
                (written.stored, why.join("; "))
            }
            Err(e) => (Vec::new(), e),
        };
        let held = have + stored.len();
        if expect.is_some() && stored.is_empty() {
            return Ok(held); // a catch-up that found no node to copy to: nothing changed, nothing to say
        }
        self.db.record_copies(&entry, wanted, held as u32)?;
        let mut all = holders;
        all.extend(stored.iter().cloned());
        if held < wanted as usize {
            let why = if why.is_empty() {
                "too few nodes up"
            } else {
                why.as_str()
            };
            // A write says it once; a catch-up pass repeats it per object, so the pass's summary carries the count.
            if expect.is_some() {
                tracing::debug!(
                    "cluster: {bucket}/{key}: {held} of {wanted} copies ({}) in {:.3} s, still under-replicated: {why}",
                    all.join(", "),
                    started.elapsed().as_secs_f64(),
                );
            } else {
                tracing::warn!(
                    "cluster: {bucket}/{key}: {held} of {wanted} copies ({}) in {:.3} s, recorded as under-replicated: {why}",
                    all.join(", "),
                    started.elapsed().as_secs_f64(),
                );
            }
        } else {
            tracing::info!(
                "cluster: {bucket}/{key}: {held} of {wanted} copies ({}) in {:.3} s{}",
                all.join(", "),
                started.elapsed().as_secs_f64(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" (retried after: {why})")
                }
            );
        }
        Ok(held)
    }

    /// The catch-up: for every object recorded as under-replicated whose version this node holds, and of whose
    /// holders that are up this node comes first by name (one node does it), make the missing copies. Objects
    /// whose recorded version no node holds any more are dropped from the record. Returns the copies made.
    pub fn catch_up(&self, store: &Store) -> Result<CatchUp, CatalogError> {
        self.retire_lost()?;
        let mut made = 0;
        let mut short = 0;
        let down: Vec<String> = self
            .db
            .nodes()?
            .into_iter()
            .filter(|n| n.health != Health::Up)
            .map(|n| n.name)
            .collect();
        for x in self.db.under_replicated()? {
            let holders = self.db.holders(&x.bucket, &x.key)?;
            let of_version: Vec<&NodeInfo> = holders
                .iter()
                .filter(|(_, e)| e.etag == x.etag && e.last_modified_ms == x.last_modified_ms)
                .map(|(n, _)| n)
                .collect();
            if of_version.is_empty() {
                let entry = DirEntry {
                    bucket: x.bucket.clone(),
                    key: x.key.clone(),
                    size_bytes: 0,
                    etag: x.etag.clone(),
                    last_modified_ms: x.last_modified_ms,
                    content_type: None,
                };
                self.db.record_copies(&entry, 0, 0)?;
                continue;
            }
            let first_up = of_version.iter().find(|n| n.health == Health::Up);
            if first_up.map(|n| n.id) != Some(self.node_id) {
                continue;
            }
            // A write of this key is making its copies now: it clears the record itself.
            let Some(_copying) = self.copying.try_enter(&x.bucket, &x.key) else {
                continue;
            };
            let held = self.replicate_blocking(store, &x.bucket, &x.key, Some(&x))?;
            made += held.saturating_sub(of_version.len());
            if held < x.wanted as usize {
                short += 1;
            }
        }
        Ok(CatchUp { made, short, down })
    }
}

impl ClusterNode {
    /// Re-replication after the timeout: the copies of nodes lost for `lost_after_ms` whose version a live node
    /// still holds are retired (their rows go, their nodes get tombstones) and recorded as under-replicated, at
    /// most [`LOST_COPIES_PER_PASS`] per pass; the catch-up that follows makes the new copies. One log line per
    /// pass that retired any. Returns the copies retired.
    fn retire_lost(&self) -> Result<usize, CatalogError> {
        let retired = self
            .db
            .retire_lost(self.replication.lost_after_ms, LOST_COPIES_PER_PASS)?;
        if !retired.is_empty() {
            let mut by_node: BTreeMap<&str, usize> = BTreeMap::new();
            for r in &retired {
                *by_node.entry(r.node.as_str()).or_default() += 1;
            }
            tracing::warn!(
                "cluster: lost node(s) (no heartbeat for {:.0} s): retired {} of their copies ({}); tombstones left, \
                 new copies follow{}",
                self.replication.lost_after_ms as f64 / 1000.0,
                retired.len(),
                by_node
                    .iter()
                    .map(|(n, c)| format!("{n}: {c}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if retired.len() == LOST_COPIES_PER_PASS {
                    " (more next pass)"
                } else {
                    ""
                }
            );
        }
        Ok(retired.len())
    }
}

/// The version of `bucket/key` this node holds, with its directory entry, before its copies or fragments
/// (`what`) are made.
///
/// - `Ok(None)`: nothing to copy. The key or its bucket is gone (a DELETE won the race, and the write it raced
///   needs no copies), or, with `expect` (a catch-up of that version), this node holds another version.
/// - `Err`: this node cannot read its own store (its catalog failed). A fresh write must then not be answered:
///   its copies were never made, so an acknowledgement would claim copies that do not exist (the caller answers
///   `503`; the write is published with one holder, as a crash at this point would leave it).
pub(crate) fn local_version(
    store: &Store,
    bucket: &str,
    key: &str,
    expect: Option<&UnderReplicated>,
    what: &str,
) -> Result<Option<(ObjectInfo, DirEntry)>, CatalogError> {
    let info = match store.head_object(bucket, key) {
        Ok(info) => info,
        Err(StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket(_)) => return Ok(None),
        Err(e) => {
            return Err(CatalogError::Unreachable(format!(
                "no {what} of {bucket}/{key} were made: this node cannot read it back from its store ({e})"
            )))
        }
    };
    if let Some(x) = expect {
        if x.etag != info.etag || x.last_modified_ms != info.last_modified_ms {
            return Ok(None);
        }
    }
    let entry = DirEntry {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        size_bytes: info.size_bytes,
        etag: info.etag.clone(),
        last_modified_ms: info.last_modified_ms,
        content_type: info.content_type.clone(),
    };
    Ok(Some((info, entry)))
}

/// Undo the local commit `committed` of `bucket/key` that the directory refused: remove that version (when it
/// is still the current one), as if it had never been written. A versioned bucket's previous version becomes
/// current again; an unversioned bucket's previous version was replaced by the commit, and the directory
/// refuses a conditional write only when that version was not the cluster's current one (see
/// [`ClusterNode::conditional_begins`]), so nothing the cluster lists is lost.
fn undo_local_commit(
    store: &Store,
    bucket: &str,
    key: &str,
    committed: &ObjectInfo,
) -> Result<(), String> {
    match store.head_object(bucket, key) {
        Ok(now)
            if now.etag == committed.etag
                && now.last_modified_ms == committed.last_modified_ms
                && now.version_id == committed.version_id =>
        {
            store
                .delete_version(bucket, key, Some(&committed.version_id), true)
                .map(|_| ())
                .map_err(|e| e.to_string())?;
            tracing::info!(
                "cluster: {bucket}/{key}: the conditional write (etag {}) was refused by the directory; \
                 its local commit is undone",
                committed.etag
            );
            Ok(())
        }
        Ok(_) | Err(StoreError::NoSuchKey { .. }) => Ok(()), // replaced meanwhile by a later local write
        Err(e) => Err(e.to_string()),
    }
}

/// Lock stripes of the conditional writes in flight ([`ClusterNode::conditional_begins`]).
const CONDITIONAL_STRIPES: usize = 256;

/// The conditional writes of this process's nodes: a stripe of locks by key, and the keys between their hold
/// and their publish (`node name, bucket, key`).
struct ConditionalState {
    stripes: Vec<Arc<tokio::sync::Mutex<()>>>,
    pending: std::sync::Mutex<std::collections::HashSet<(String, String, String)>>,
}

fn conditional_state() -> &'static ConditionalState {
    static STATE: std::sync::OnceLock<ConditionalState> = std::sync::OnceLock::new();
    STATE.get_or_init(|| ConditionalState {
        stripes: (0..CONDITIONAL_STRIPES)
            .map(|_| Arc::new(tokio::sync::Mutex::new(())))
            .collect(),
        pending: Default::default(),
    })
}

/// A conditional write in flight on this node ([`ClusterNode::conditional_begins`]), until its publish.
pub(crate) struct ConditionalWrite {
    _held: tokio::sync::OwnedMutexGuard<()>,
    id: (String, String, String),
    /// The client's condition, decided by the directory.
    condition: WriteCondition,
    /// The condition of the local commit when it differs from the client's.
    local: Option<WriteCondition>,
}

impl ConditionalWrite {
    /// The local commit's `(If-Match, If-None-Match)` when they must replace the client's headers.
    pub(crate) fn local_headers(&self) -> Option<(Option<ETagCondition>, Option<ETagCondition>)> {
        self.local.as_ref().map(|c| match c {
            WriteCondition::Absent => (None, Some(ETagCondition::Any)),
            WriteCondition::EtagMatches(tags) => (
                Some(ETagCondition::ETag(s3s::dto::ETag::Strong(tags.join(", ")))),
                None,
            ),
            WriteCondition::Always => (None, None),
        })
    }

    /// [`ConditionalWrite::local_headers`] on a request's raw headers (CopyObject reads them there).
    pub(crate) fn set_local_headers(&self, headers: &mut http::HeaderMap) {
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

impl Drop for ConditionalWrite {
    fn drop(&mut self) {
        conditional_state()
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// The lock stripe of `bucket/key` on node `node`.
fn conditional_stripe(node: &str, bucket: &str, key: &str) -> Arc<tokio::sync::Mutex<()>> {
    let at = fnv1a(&[
        node.as_bytes(),
        b"\0",
        bucket.as_bytes(),
        b"\0",
        key.as_bytes(),
    ]) % CONDITIONAL_STRIPES as u64;
    Arc::clone(&conditional_state().stripes[at as usize])
}

/// Whether a conditional write of `bucket/key` on node `node` is between its hold and its publish.
fn conditional_pending(node: &str, bucket: &str, key: &str) -> bool {
    conditional_state()
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&(node.to_owned(), bucket.to_owned(), key.to_owned()))
}

/// Apply one delete another node made: delete the local copy when it is that version or older (a newer local
/// version stays). Returns whether a copy was deleted.
pub fn apply_tombstone(
    store: &Store,
    t: &permafrost_catalog::cluster::Tombstone,
) -> Result<bool, String> {
    match store.head_object(&t.bucket, &t.key) {
        Ok(info) if info.last_modified_ms <= t.last_modified_ms => {
            store.delete_object(&t.bucket, &t.key).map_err(|e| {
                format!(
                    "deleting {}/{} (deleted on another node): {e}",
                    t.bucket, t.key
                )
            })?;
            tracing::info!(
                "cluster: deleted this node's copy of {}/{} (deleted on another node)",
                t.bucket,
                t.key
            );
            Ok(true)
        }
        Ok(_) | Err(StoreError::NoSuchKey { .. }) | Err(StoreError::NoSuchBucket(_)) => Ok(false),
        Err(e) => Err(format!(
            "reading {}/{} (deleted on another node): {e}",
            t.bucket, t.key
        )),
    }
}

/// The tree of one write: the network, its root (the writing node) and the data nodes that may take a copy.
pub struct WritePlan {
    pub topology: Topology,
    pub root: NodeId,
    pub candidates: Vec<NodeId>,
}

/// Choose the network of a write of `object` (`bucket/key`) from `me` to the nodes `up` (up, with a relay,
/// holding no copy): the configured topology when there is one (`me` is the root; candidates are the nodes
/// `up` that it names as data nodes), else direct hops (a star from `me`) whose links are weighted by a hash
/// of the object and the node (rendezvous hashing), so that the copies of different objects spread over the
/// nodes instead of all going to the first by name. The only place that chooses it: a topology with live
/// utilisation from the catalog replaces `configured` here.
pub fn tree_for_write(
    me: &str,
    up: &[String],
    configured: Option<&Topology>,
    object: &str,
) -> Result<WritePlan, String> {
    let topology = match configured {
        Some(t) => t.clone(),
        None => {
            let mut t = Topology::new();
            t.add_node(me, Role::Node, None)
                .map_err(|e| e.to_string())?;
            for name in up {
                t.add_node(name, Role::Node, None)
                    .map_err(|e| e.to_string())?;
                let spread = (fnv1a(&[object.as_bytes(), b"\0", name.as_bytes()]) % 500) as f64;
                t.add_link(me, name, 1000.0, [spread, 0.0])
                    .map_err(|e| e.to_string())?;
            }
            t
        }
    };
    let root = topology
        .node_id(me)
        .ok_or_else(|| format!("the topology does not name this node ({me})"))?;
    let candidates = up
        .iter()
        .filter_map(|n| topology.node_id(n))
        .filter(|&id| id != root && topology.node(id).role == Role::Node)
        .collect();
    Ok(WritePlan {
        topology,
        root,
        candidates,
    })
}

/// FNV-1a over `parts` (a stable hash: the same object goes to the same nodes on every node and build).
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The storage of this node's in-process relay node: a copy that arrives (its header carries the object's
/// [`ObjectMeta`]) is written into `store` as the pieces arrive, with the origin's ETag, last-modified time and
/// metadata; after the last piece the put commits and the copy is published in the directory, and only then is
/// it acknowledged. A stream that breaks off drops the put: nothing visible.
/// `store` is emptied when the node stops (streams arriving then are refused).
pub fn copy_sink(
    store: Arc<std::sync::Mutex<Option<Arc<Store>>>>,
    node: Arc<ClusterNode>,
) -> SinkFactory {
    Arc::new(move |header: &permafrost_relay::Header| {
        let Some(store) = store.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Err(std::io::Error::other("this node is stopping"));
        };
        let Some(meta) = header.object.clone() else {
            return Err(std::io::Error::other(
                "a stream without object metadata (a cluster node stores cluster copies only)",
            ));
        };
        match store.head_bucket(&meta.bucket) {
            Ok(_) => {}
            Err(StoreError::NoSuchBucket(_)) => {
                match store.create_bucket(&meta.bucket, BucketSettings::default()) {
                    Ok(()) | Err(StoreError::BucketAlreadyOwnedByYou(_)) => {}
                    Err(e) => return Err(std::io::Error::other(e.to_string())),
                }
            }
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
        let options = PutOptions {
            user_metadata: meta.user_metadata.clone(),
            content_type: meta.content_type.clone(),
            attributes: meta
                .attributes
                .clone()
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
            replica_of: Some(ReplicaOf {
                etag: meta.etag.clone(),
                last_modified_ms: meta.last_modified_ms,
            }),
            ..PutOptions::default()
        };
        let handle = store
            .begin_put(&meta.bucket, &meta.key, options)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Box::new(CopySink {
            handle,
            store,
            meta,
            node: Arc::clone(&node),
            started: Instant::now(),
        }) as Box<dyn Sink>)
    })
}

struct CopySink {
    handle: PutHandle,
    store: Arc<Store>,
    meta: ObjectMeta,
    node: Arc<ClusterNode>,
    started: Instant,
}

impl Sink for CopySink {
    fn write_piece(&mut self, _index: u64, payload: &[u8]) -> std::io::Result<()> {
        self.handle
            .write(payload)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    fn finish(self: Box<Self>) -> std::io::Result<()> {
        let CopySink {
            handle,
            store,
            meta,
            node,
            started,
        } = *self;
        let info = handle
            .finish()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if meta.bucket == permafrost_catalog::cluster::FRAGMENTS_BUCKET {
            // A parity fragment: its sender publishes it with the other two (`crate::parity::place`).
            return Ok(());
        }
        let entry = DirEntry {
            bucket: meta.bucket,
            key: meta.key,
            size_bytes: info.size_bytes,
            etag: info.etag,
            last_modified_ms: info.last_modified_ms,
            content_type: info.content_type,
        };
        let published = node
            .db
            .publish_copy(node.node_id, &entry)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if !published {
            // Deleted (or replaced) while the copy was on its way: the copy must not survive here.
            let gone = permafrost_catalog::cluster::Tombstone {
                bucket: entry.bucket.clone(),
                key: entry.key.clone(),
                etag: entry.etag.clone(),
                last_modified_ms: entry.last_modified_ms,
            };
            let why = match apply_tombstone(&store, &gone) {
                Ok(_) => "dropped it".to_owned(),
                Err(e) => format!("dropping it failed: {e}"),
            };
            tracing::info!(
                "cluster: the copy of {}/{} (etag {}) arrived after a DELETE or a newer version of it; {why}",
                entry.bucket,
                entry.key,
                entry.etag
            );
            return Err(std::io::Error::other(format!(
                "{}/{} was deleted or replaced while its copy arrived; the copy was dropped",
                entry.bucket, entry.key
            )));
        }
        tracing::info!(
            "cluster: stored the copy of {}/{} ({} bytes, etag {}) in {:.3} s",
            entry.bucket,
            entry.key,
            entry.size_bytes,
            entry.etag,
            started.elapsed().as_secs_f64()
        );
        Ok(())
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

/// What a catch-up pass did: copies made, objects this node tried that are still short of copies, and the nodes
/// not up (down or lost) when it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatchUp {
    pub made: usize,
    pub short: usize,
    pub down: Vec<String>,
}

/// Rate limit for a background loop's repeated report: a report is due when the state it describes changed, or
/// when `every` has passed since the last one. The caller passes the time, so a test can drive the clock.
#[derive(Debug, Clone)]
pub struct ReportGate<S> {
    every: std::time::Duration,
    last: Option<(Instant, S)>,
}

impl<S: PartialEq> ReportGate<S> {
    pub fn new(every: std::time::Duration) -> Self {
        Self { every, last: None }
    }

    /// Whether to report `state` at `now`; when it is, `now` and `state` become the last report.
    pub fn due(&mut self, now: Instant, state: S) -> bool {
        let due = match &self.last {
            None => true,
            Some((at, last)) => *last != state || now.saturating_duration_since(*at) >= self.every,
        };
        if due {
            self.last = Some((now, state));
        }
        due
    }

    /// The last reported state, if any.
    pub fn last(&self) -> Option<&S> {
        self.last.as_ref().map(|(_, s)| s)
    }

    /// Forget the last report: the next state is reported whatever it is.
    pub fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::CopiesInFlight;

    #[test]
    fn a_report_is_due_on_a_change_of_state_or_after_the_interval() {
        use super::ReportGate;
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut gate = ReportGate::new(Duration::from_secs(300));
        assert!(gate.due(at(0), 12), "the first report");
        // The same state every 3 s: silent until five minutes have passed.
        for s in (3..300).step_by(3) {
            assert!(!gate.due(at(s), 12), "repeat at {s} s");
        }
        assert!(gate.due(at(300), 12), "the periodic reminder");
        assert!(!gate.due(at(301), 12));
        // A change is reported at once, and restarts the interval.
        assert!(gate.due(at(302), 3));
        assert!(!gate.due(at(599), 3));
        assert!(gate.due(at(602), 3));
        assert_eq!(gate.last(), Some(&3));
        gate.reset();
        assert!(gate.due(at(603), 3), "after a reset");
    }

    #[test]
    fn a_conditional_write_is_pending_until_dropped_and_rewrites_the_local_headers() {
        use super::{conditional_pending, conditional_state, conditional_stripe, ConditionalWrite};
        use permafrost_catalog::WriteCondition;
        let held = conditional_stripe("n1", "b", "k")
            .try_lock_owned()
            .expect("free");
        let id = ("n1".to_owned(), "b".to_owned(), "k".to_owned());
        conditional_state()
            .pending
            .lock()
            .unwrap()
            .insert(id.clone());
        let mut write = ConditionalWrite {
            _held: held,
            id,
            condition: WriteCondition::EtagMatches(vec!["e1".into()]),
            local: None,
        };
        assert!(conditional_pending("n1", "b", "k"));
        assert!(!conditional_pending("n2", "b", "k"), "another node's key");
        assert!(conditional_stripe("n1", "b", "k").try_lock_owned().is_err());
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::IF_MATCH, "\"e1\"".parse().unwrap());
        write.set_local_headers(&mut headers);
        assert_eq!(
            headers[http::header::IF_MATCH],
            "\"e1\"",
            "no local condition: as sent"
        );
        write.local = Some(WriteCondition::Absent);
        write.set_local_headers(&mut headers);
        assert!(headers.get(http::header::IF_MATCH).is_none());
        assert_eq!(headers[http::header::IF_NONE_MATCH], "*");
        write.local = Some(WriteCondition::EtagMatches(vec!["\"stale\"".into()]));
        write.set_local_headers(&mut headers);
        assert!(headers.get(http::header::IF_NONE_MATCH).is_none());
        let local = crate::conditional::write_condition_of_headers(&headers).unwrap();
        assert_eq!(local, WriteCondition::EtagMatches(vec!["stale".into()]));
        drop(write);
        assert!(!conditional_pending("n1", "b", "k"));
        assert!(conditional_stripe("n1", "b", "k").try_lock_owned().is_ok());
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn one_copier_per_key_a_write_waits_and_a_catch_up_skips() {
        let copying = CopiesInFlight::default();
        let catch_up = copying.try_enter("b", "k").expect("the key is free");
        assert!(copying.try_enter("b", "k").is_none(), "taken twice");
        let other = copying
            .try_enter("b", "other")
            .expect("another key is free");
        let write_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let write = s.spawn(|| {
                let _held = copying.enter("b", "k");
                write_done.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !write_done.load(Ordering::SeqCst),
                "the write went on while the catch-up held its key"
            );
            drop(catch_up);
            write.join().unwrap();
        });
        assert!(write_done.load(Ordering::SeqCst));
        drop(other);
        assert!(
            copying.try_enter("b", "k").is_some(),
            "the write gave the key back"
        );
    }
}
