//! # permafrost-cluster: the nodes of a cluster and the redundancy they keep
//!
//! **Job.** Keep every object of a cluster (`docs/cluster.md`) at its bucket's redundancy across the nodes that
//! share one PostgreSQL directory (`permafrost_catalog::cluster`): whole copies made along replication trees
//! (`node`: [`ClusterNode::replicate_blocking`], [`tree_for_write`], [`copy_sink`]), cross-node XOR parity
//! (`parity`: placement, fetching a fragment directly or rebuilt from the other two, rebuilding a lost
//! node's fragments), the catch-up of under-replicated objects and the retirement of lost nodes' copies
//! ([`ClusterNode::catch_up`]), deletes carried to every holder as tombstones ([`apply_tombstone`]), and the
//! publish protocol of conditional writes ([`conditional_hold`], [`ClusterNode::publish_conditional`]); and
//! the node's runtime (`runtime`: joining, reconcile, the heartbeat and catch-up loop, the in-process relay,
//! link reports) and what `cluster status` shows (`status`). Blocking, like the store it sits on; the S3 layer
//! (`permafrost-s3`) routes requests to it and turns its results into S3 answers, the operator binary reads
//! its configuration, starts it and prints its status.
//!
//! **Invariants.**
//! - A copy or fragment is published in the directory only after its holder made it durable, and a copy of a
//!   version the cluster deleted or replaced meanwhile is dropped instead (`ClusterDb::publish_copy`).
//! - A write short of copies (too few nodes up, a copy failed) is recorded as under-replicated in the
//!   directory, in the transaction that publishes it; exactly one node (the first holder that is up) makes the
//!   missing copies of an object, one copier per key at a time.
//! - Every byte moved between nodes travels over relay connections that prove the cluster secret
//!   (`permafrost_relay::auth`) and is BLAKE3-checked per piece; a parity fragment is compared with the
//!   directory's BLAKE3 before it is stored or its last bytes are served.
//! - A node never brings back an object the cluster deleted: its tombstone is applied before a read or a
//!   conditional write of the key is decided on that node, and before its reconcile. A copy received from
//!   another node is covered by a tombstone of its version from before its local commit until its publish
//!   (`ClusterDb::mark_copy`), and a reconcile never publishes a version its node has a tombstone for, so a
//!   copy committed but never published is deleted, not published later.
//! - Errors are [`ClusterError`]: the directory's ([`CatalogError`]) or this node's own store's; nothing
//!   panics on a database outage.
//!
//! **Layering.** Below `permafrost-s3` and the CLI: this crate depends on the catalog, store, relay and
//! topology crates only, never on the S3 layer, `s3s` or `hyper`.

#![forbid(unsafe_code)]

pub mod decide;
pub mod node;
pub mod orphans;
pub mod parity;
pub mod runtime;
pub mod status;

pub use node::{
    apply_tombstone, conditional_hold, conditional_pending, conditional_wait, copy_sink, fnv1a,
    local_version, tree_for_write, undo_local_commit, CatchUp, ClusterNode, ConditionalWrite,
    CopiesInFlight, Receiving, ReceivingGuard, Refused, Replication, ReportGate, WritePlan,
    COPY_PIECE_BYTES, LOST_COPIES_PER_PASS,
};
pub use parity::{fetch_fragment, fragment_source, half, plan, rebuild_lost, ways, ROLES, XOR};

use permafrost_catalog::CatalogError;

/// What a cluster operation met that it could not get past.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The shared directory (the catalog database) failed, is unreachable, or refused the change.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// This node's own store failed (reading back an object to copy it, deleting a copy the cluster deleted);
    /// the message names the object.
    #[error("{0}")]
    Store(String),
    /// Joining or running the node failed otherwise (a start-up check refused, a file or listener, a thread):
    /// one line that says what and why ([`runtime`]).
    #[error("{0}")]
    Runtime(String),
}
