//! A node of a cluster (issue 13 "Nodes", `docs/cluster.md` "Nodes"): what it does to hold the bucket's
//! redundancy. Routing S3 requests (the directory lookup of a GET or HEAD, forwarding to a holder, the `503`
//! answers) is `permafrost-s3`'s (`crates/s3/src/cluster.rs`); the node's threads (heartbeat, catch-up loop,
//! relay) are started by the operator binary (`permafrost serve`).
//!
//! - Writes commit locally first: after the local commit a PUT, multipart completion or copy publishes the
//!   object in the directory (a crash between the two is repaired by the reconcile at start), then makes the
//!   bucket's other `copies − 1` copies ([`ClusterNode::replicate_blocking`], below) before the client gets its
//!   answer. The publish records the object as under-replicated in the same transaction
//!   ([`ClusterDb::publish_write`]) and its copies clear that record, so a write stopped between the two (a
//!   crash, the database going away, its own store unreadable: answered `503`, never acknowledged) is left
//!   to the catch-up instead of staying short of copies unnoticed.
//! - **Conditional writes** (`If-None-Match: *`, `If-Match`) hold cluster-wide: the local commit checks the
//!   condition in this node's catalog, and the publish checks it against the directory in the transaction that
//!   writes the row ([`ClusterDb::publish_write_if`], [`ClusterNode::publish_conditional`]); refused, the local
//!   commit is undone ([`undo_local_commit`]) and the answer is `412` (`404` for `If-Match` on a key no node
//!   holds). Conditional writes of one key on a node take turns ([`ClusterNode::conditional_hold`] to the drop
//!   of its [`ConditionalWrite`]) and are invisible until their publish decides
//!   ([`ClusterNode::conditional_pending`]). A crash between the two is published by the reconcile without the
//!   condition (`docs/cluster.md`, "Conditional writes").
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
//!   [`LOST_COPIES_PER_PASS`] of its copies that a node that is up also holds ([`ClusterDb::retire_lost`]: its
//!   row goes, it gets a tombstone, the object is recorded as under-replicated), so the catch-up makes new
//!   copies elsewhere and the node, should it return, drops its stale copies instead of republishing them.
//! - **A copy racing a DELETE**: the holder publishes a copy only while the version still exists elsewhere
//!   ([`ClusterDb::publish_copy`], one transaction); else it deletes the copy again and does not acknowledge it.
//! - **A received copy is covered by a tombstone until it is published.** Before a copy commits, its holder
//!   leaves itself a tombstone of the copy's version ([`ClusterDb::mark_copy`]), which only the publish
//!   removes; tombstone passes leave the keys being received alone, and read each tombstone again while no copy
//!   of its key arrives, so a mark listed before its publish never deletes the published copy
//!   ([`ClusterNode::receiving`], [`Receiving::settle`]). So a copy
//!   committed and never published (a crash or the database gone between the two) is deleted by its node's
//!   next tombstone pass, before any reconcile, and a reconcile never publishes a version its node has a
//!   tombstone for: such a copy is not the node's to publish (its sender counted it as failed, the directory
//!   records the version as short, the catch-up makes a new copy), and after an acknowledged DELETE it would
//!   bring the object back (`permafrost_catalog::cluster::rules`).
//! - Versioning and `copies > 1` exclude each other (PutBucketVersioning answers `400`): copies do not cover
//!   versions.
//! - **DELETE** (and each key of DeleteObjects) of the current version removes every copy: the local delete, then one directory transaction
//!   that removes every holder's row and leaves each other holder a tombstone ([`ClusterDb::delete_everywhere`]);
//!   a holder deletes its copy when it sees its tombstone ([`apply_tombstone`]) — on its next heartbeat when
//!   up, at start before its reconcile when it was down — so a holder that was down never brings the object
//!   back.
//! - **Node-to-node data.** Copies and parity fragments move only over relay connections, each opened by a
//!   mutual proof of the cluster secret ([`Replication::credentials`], `permafrost_relay::auth`): a peer
//!   without it is refused before any fragment is read. The S3 layer's GET forwarding is the one other
//!   node-to-node connection: it is S3, authenticated by the client's own signature.

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

use crate::ClusterError;

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
    /// The `bucket/key`s of copies this node is receiving now, from their mark to their publish
    /// ([`copy_sink`]): a tombstone pass leaves their tombstones for a later pass, so that it never deletes a
    /// copy between its commit and its publish.
    pub receiving: Receiving,
}

/// The `bucket/key`s of the copies a node is receiving ([`ClusterNode::receiving`]), each with how many
/// arrive at once, and the keys whose tombstone is being applied now ([`Receiving::settle`]): a copy's arrival
/// and its key's tombstone take turns, so a tombstone read before a copy's publish removed it never deletes
/// that copy after.
#[derive(Default)]
pub struct Receiving {
    keys: std::sync::Mutex<ReceivingKeys>,
    settled: std::sync::Condvar,
}

#[derive(Default)]
struct ReceivingKeys {
    arriving: std::collections::HashMap<(String, String), usize>,
    settling: std::collections::HashSet<(String, String)>,
}

impl Receiving {
    fn lock(&self) -> std::sync::MutexGuard<'_, ReceivingKeys> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The keys, once no tombstone of `id` is being applied ([`Receiving::settle`]).
    fn lock_unsettled(&self, id: &(String, String)) -> std::sync::MutexGuard<'_, ReceivingKeys> {
        let mut keys = self.lock();
        while keys.settling.contains(id) {
            keys = self.settled.wait(keys).unwrap_or_else(|p| p.into_inner());
        }
        keys
    }

    /// A copy of `bucket/key` is about to be marked, committed and published; until the guard is dropped.
    /// Waits while a tombstone of the key is being applied ([`Receiving::settle`]).
    pub fn enter(&self, bucket: &str, key: &str) -> ReceivingGuard<'_> {
        let id = (bucket.to_owned(), key.to_owned());
        let mut keys = self.lock_unsettled(&id);
        *keys.arriving.entry(id.clone()).or_default() += 1;
        ReceivingGuard { set: self, id }
    }

    /// Whether a copy of `bucket/key` is being received now.
    pub fn contains(&self, bucket: &str, key: &str) -> bool {
        self.lock()
            .arriving
            .contains_key(&(bucket.to_owned(), key.to_owned()))
    }

    /// Run `apply` (the application of `bucket/key`'s tombstone, which must read the tombstone afresh) unless a
    /// copy of the key is arriving now (`None`: its tombstone is that copy's mark, or a delete its publish
    /// refuses, and waits for a later pass). No copy of the key starts or ends its arrival while `apply` runs:
    /// a tombstone read inside it is one no publish removes before `apply` is done with it.
    pub fn settle<R>(&self, bucket: &str, key: &str, apply: impl FnOnce() -> R) -> Option<R> {
        let id = (bucket.to_owned(), key.to_owned());
        {
            let mut keys = self.lock_unsettled(&id);
            if keys.arriving.contains_key(&id) {
                return None;
            }
            keys.settling.insert(id.clone());
        }
        struct Settled<'a>(&'a Receiving, (String, String));
        impl Drop for Settled<'_> {
            fn drop(&mut self) {
                self.0.lock().settling.remove(&self.1);
                self.0.settled.notify_all();
            }
        }
        let _settled = Settled(self, id);
        Some(apply())
    }
}

/// One copy's hold on its key in [`Receiving`], given up when dropped.
pub struct ReceivingGuard<'a> {
    set: &'a Receiving,
    id: (String, String),
}

impl Drop for ReceivingGuard<'_> {
    fn drop(&mut self) {
        let mut keys = self.set.lock();
        if let Some(n) = keys.arriving.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                keys.arriving.remove(&self.id);
            }
        }
    }
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

impl ClusterNode {
    /// After a local delete of the current version of `bucket/key`: no node holds it any more (the other
    /// holders get tombstones and delete their copies); DeleteObjects calls it per key. Returns the other nodes left a tombstone. When the directory cannot be changed, the local delete stands
    /// and the next heartbeat's reconcile removes this node's row.
    pub fn delete_everywhere_now(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Vec<String>, ClusterError> {
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
        Ok(deleted?)
    }

    /// The copies of `bucket`: its own setting, else the cluster default.
    pub fn copies_for(&self, bucket: &str) -> Result<u32, ClusterError> {
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
    ) -> Result<usize, ClusterError> {
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
        let nodes: Vec<(String, bool)> = self
            .db
            .nodes()?
            .into_iter()
            .map(|n| {
                let usable = n.health == Health::Up && relays.contains_key(&n.name);
                (n.name, usable)
            })
            .collect();
        let up = crate::decide::copy_candidates(&self.node_name, &nodes, &holders);
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
                let k = crate::decide::copies_to_make(wanted, have, plan.candidates.len());
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
    pub fn catch_up(&self, store: &Store) -> Result<CatchUp, ClusterError> {
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
            let seen: Vec<(i64, bool)> = of_version
                .iter()
                .map(|n| (n.id, n.health == Health::Up))
                .collect();
            let action = crate::decide::catch_up_action(self.node_id, &seen);
            if action == crate::decide::CatchUpAction::Forget {
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
            if action == crate::decide::CatchUpAction::Skip {
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
    /// Re-replication after the timeout: the copies of nodes lost for `lost_after_ms` whose version a node that is
    /// up still holds are retired (their rows go, their nodes get tombstones) and recorded as under-replicated, at
    /// most [`LOST_COPIES_PER_PASS`] per pass; the catch-up that follows makes the new copies. One log line per
    /// pass that retired any. Returns the copies retired.
    fn retire_lost(&self) -> Result<usize, ClusterError> {
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
pub fn local_version(
    store: &Store,
    bucket: &str,
    key: &str,
    expect: Option<&UnderReplicated>,
    what: &str,
) -> Result<Option<(ObjectInfo, DirEntry)>, ClusterError> {
    let info = match store.head_object(bucket, key) {
        Ok(info) => info,
        Err(StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket(_)) => return Ok(None),
        Err(e) => {
            return Err(ClusterError::Store(format!(
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
/// [`conditional_hold`]), so nothing the cluster lists is lost.
pub fn undo_local_commit(
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

/// Lock stripes of the conditional writes in flight ([`conditional_hold`]).
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

/// A conditional write in flight on this node ([`conditional_hold`]), until its publish.
pub struct ConditionalWrite {
    _held: tokio::sync::OwnedMutexGuard<()>,
    id: (String, String, String),
    /// The client's condition, decided by the directory.
    condition: WriteCondition,
    /// The condition of the local commit when it differs from the client's.
    local: Option<WriteCondition>,
}

impl ConditionalWrite {
    /// The client's condition, decided by the directory.
    pub fn condition(&self) -> &WriteCondition {
        &self.condition
    }

    /// The condition of the local commit when it must differ from the client's ([`ClusterNode::conditional_local`]).
    pub fn local(&self) -> Option<&WriteCondition> {
        self.local.as_ref()
    }

    /// Set the local commit's condition ([`ClusterNode::conditional_local`] decides it).
    pub fn set_local(&mut self, local: Option<WriteCondition>) {
        self.local = local;
    }
}

/// Take node `node`'s turn for a conditional write of `bucket/key` (waiting while another one of that key is in
/// flight there): until the returned hold is dropped, the write is pending ([`conditional_pending`]).
pub async fn conditional_hold(
    node: &str,
    bucket: &str,
    key: &str,
    condition: WriteCondition,
) -> ConditionalWrite {
    let id = (node.to_owned(), bucket.to_owned(), key.to_owned());
    let held = conditional_stripe(node, bucket, key).lock_owned().await;
    conditional_state()
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone());
    ConditionalWrite {
        _held: held,
        id,
        condition,
        local: None,
    }
}

/// Wait until no conditional write of `bucket/key` on node `node` holds its turn (its publish decided).
pub async fn conditional_wait(node: &str, bucket: &str, key: &str) {
    drop(conditional_stripe(node, bucket, key).lock().await);
}

/// A conditional write the directory refused ([`ClusterNode::publish_conditional`]): why, and, when the local
/// commit had to be undone, whether that worked.
#[derive(Debug)]
pub struct Refused {
    pub error: CatalogError,
    pub undone: Option<Result<(), String>>,
}

impl ClusterNode {
    /// Delete this node's copy of `bucket/key` when the cluster deleted it (its tombstone waits here), and clear
    /// the tombstone: a copy the cluster deleted never answers a read or decides a condition.
    pub fn apply_own_tombstone(
        &self,
        store: &Store,
        bucket: &str,
        key: &str,
    ) -> Result<(), ClusterError> {
        // A copy of the key arriving now is covered by its own tombstone until its publish: left for later.
        self.receiving
            .settle(bucket, key, || {
                if let Some(t) = self.db.tombstone(self.node_id, bucket, key)? {
                    apply_tombstone(store, &t).map_err(ClusterError::Store)?;
                    self.db.clear_tombstone(self.node_id, &t)?;
                }
                Ok(())
            })
            .unwrap_or(Ok(()))
    }

    /// The condition the local commit of a conditional write checks when it must differ from the client's
    /// `condition` (`None`: the client's). `If-Match` through a node that holds no current copy (none, or a
    /// stale one) cannot be decided by its own catalog, so the local commit then only checks that the local key
    /// is still as seen here (absent, or that stale ETag) and the directory decides the client's condition
    /// ([`ClusterNode::publish_conditional`]).
    pub fn conditional_local(
        &self,
        store: &Store,
        bucket: &str,
        key: &str,
        condition: &WriteCondition,
    ) -> Result<Option<WriteCondition>, ClusterError> {
        // A copy the cluster deleted is gone here first (as a read does): it must not decide the condition.
        self.apply_own_tombstone(store, bucket, key)?;
        if !matches!(condition, WriteCondition::EtagMatches(_)) {
            return Ok(None);
        }
        let newest = match self.db.holders(bucket, key)?.into_iter().next() {
            Some((_, e)) => Some(e),
            None => self.db.parity_object(bucket, key)?.map(|p| p.entry),
        };
        let Some(newest) = newest else {
            return Ok(None); // exists nowhere in the directory: the local check answers (404 or 412)
        };
        Ok(match store.head_object(bucket, key) {
            Ok(l) if l.etag == newest.etag && l.last_modified_ms == newest.last_modified_ms => None,
            Ok(stale) => Some(WriteCondition::EtagMatches(vec![stale.etag])),
            Err(StoreError::NoSuchKey { .. } | StoreError::NoSuchBucket(_)) => {
                Some(WriteCondition::Absent)
            }
            Err(e) => return Err(ClusterError::Store(e.to_string())),
        })
    }

    /// After the local commit of the conditional write `write` of `bucket/key` (`written`: the ETag the commit
    /// answered, unquoted): the publish that checks the client's condition against the directory
    /// ([`ClusterDb::publish_write_if`]). Refused (another node holds the key, or another version): the local
    /// commit is undone ([`undo_local_commit`]). The database unavailable: undone as well. The hold is given up
    /// when the publish decided.
    pub fn publish_conditional(
        &self,
        store: &Store,
        bucket: &str,
        key: &str,
        write: ConditionalWrite,
        written: Option<&str>,
    ) -> Result<(), Refused> {
        let (b, k) = (bucket, key);
        let info = match store.head_object(b, k) {
            Ok(info) => info,
            Err(e) => {
                return Err(Refused {
                    error: CatalogError::Unreachable(e.to_string()),
                    undone: None,
                })
            }
        };
        if written.is_some_and(|w| w != info.etag.trim_matches('"')) {
            // Replaced on this node by a later write before this publish: this write is not current anywhere
            // and its condition was never decided by the directory; refused (nothing to undo).
            let refused = CatalogError::PreconditionFailed(format!(
                "{b}/{k} was replaced on this node by another write before this conditional write was published"
            ));
            return Err(Refused {
                error: refused,
                undone: None,
            });
        }
        let entry = DirEntry {
            bucket: b.to_owned(),
            key: k.to_owned(),
            size_bytes: info.size_bytes,
            etag: info.etag.clone(),
            last_modified_ms: info.last_modified_ms,
            content_type: info.content_type.clone(),
        };
        let published = self.db.publish_write_if(
            self.node_id,
            &entry,
            self.replication.copies,
            &write.condition,
        );
        let Err(refused) = published else {
            drop(write);
            return Ok(());
        };
        let undone = undo_local_commit(store, b, k, &info);
        drop(write);
        Err(Refused {
            error: refused,
            undone: Some(undone),
        })
    }

    /// After a local write of `bucket/key` whose object the store describes as `entry`: publish it, recorded as
    /// under-replicated until its copies are made ([`ClusterDb::publish_write`]). A failure marks the
    /// directory as behind this node's store ([`ClusterNode::directory_behind`]): the heartbeat's reconcile
    /// publishes it.
    pub fn publish_entry(&self, entry: &DirEntry) -> Result<(), ClusterError> {
        let published = self
            .db
            .publish_write(self.node_id, entry, self.replication.copies);
        if published.is_err() {
            self.directory_behind
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(published?)
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
pub fn conditional_pending(node: &str, bucket: &str, key: &str) -> bool {
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
        Ok(info) if crate::decide::tombstone_deletes(info.last_modified_ms, t.last_modified_ms) => {
            store.delete_object(&t.bucket, &t.key).map_err(|e| {
                format!(
                    "deleting {}/{} (deleted on another node): {e}",
                    t.bucket, t.key
                )
            })?;
            tracing::info!(
                "cluster: deleted this node's copy of {}/{} (deleted or replaced on another node, or received \
                 here and never published)",
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
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
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
        let mut handle = store
            .begin_put(&meta.bucket, &meta.key, options)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // A copy never replaces a newer version this node holds (a write of the key here raced the copy of an
        // older one: found by the cluster simulation), and commits only if the local version is still the one
        // seen now.
        match store.head_object(&meta.bucket, &meta.key) {
            Ok(local) => {
                if !crate::decide::copy_replaces(
                    Some(local.last_modified_ms),
                    meta.last_modified_ms,
                ) {
                    return Err(std::io::Error::other(format!(
                        "{}/{}: this node holds a newer version (last modified at {} ms, the copy's at {} ms); \
                         the copy is refused",
                        meta.bucket, meta.key, local.last_modified_ms, meta.last_modified_ms
                    )));
                }
                handle.set_condition(WriteCondition::EtagMatches(vec![local.etag]));
            }
            Err(StoreError::NoSuchKey { .. }) => handle.set_condition(WriteCondition::Absent),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
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
        if meta.bucket == permafrost_catalog::cluster::FRAGMENTS_BUCKET {
            // A parity fragment: its sender publishes it with the other two (`crate::parity::place`).
            handle
                .finish()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            return Ok(());
        }
        // The copy's mark before its commit: until its publish removes it, the copy is covered by this node's
        // tombstone of its version, so a copy committed and never published (a crash, the database gone) is
        // deleted by the node's next tombstone pass and never published by a reconcile
        // (`permafrost_catalog::cluster::rules`). The database unreachable: nothing commits.
        let _receiving = node.receiving.enter(&meta.bucket, &meta.key);
        node.db
            .mark_copy(
                node.node_id,
                &DirEntry {
                    bucket: meta.bucket.clone(),
                    key: meta.key.clone(),
                    size_bytes: 0,
                    etag: meta.etag.clone(),
                    last_modified_ms: meta.last_modified_ms,
                    content_type: None,
                },
            )
            .map_err(|e| {
                std::io::Error::other(format!(
                    "{}/{}: marking the copy before its commit: {e}",
                    meta.bucket, meta.key
                ))
            })?;
        let info = handle
            .finish()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
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
    use super::{CopiesInFlight, Receiving};

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
    fn a_conditional_write_is_pending_until_dropped() {
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
        assert!(write.local().is_none());
        write.set_local(Some(WriteCondition::Absent));
        assert_eq!(write.local(), Some(&WriteCondition::Absent));
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

    #[test]
    fn a_tombstone_waits_for_an_arriving_copy_and_an_arrival_waits_for_a_tombstone() {
        let receiving = Receiving::default();
        let arriving = receiving.enter("b", "k");
        assert_eq!(
            receiving.settle("b", "k", || "applied"),
            None,
            "a tombstone applied while a copy of its key arrives"
        );
        assert_eq!(
            receiving.settle("b", "other", || "applied"),
            Some("applied")
        );
        drop(arriving);
        let entered = AtomicBool::new(false);
        std::thread::scope(|s| {
            receiving
                .settle("b", "k", || {
                    let copy = s.spawn(|| {
                        let _arriving = receiving.enter("b", "k");
                        entered.store(true, Ordering::SeqCst);
                    });
                    std::thread::sleep(Duration::from_millis(100));
                    assert!(
                        !entered.load(Ordering::SeqCst),
                        "a copy began to arrive while its key's tombstone was applied"
                    );
                    copy
                })
                .expect("no copy of the key arrives")
                .join()
                .unwrap();
        });
        assert!(entered.load(Ordering::SeqCst));
        assert!(!receiving.contains("b", "k"), "the copy gave the key back");
    }
}
