//! # permafrost-relay: the data plane of replication trees
//!
//! **Job.** Move data along the trees of `permafrost-topology` so that every link carries one stream.
//! Replication: the root ([`send`]) streams an object to its children; a relay ([`serve`] on a node
//! with children in the tree) duplicates the stream to its children as it arrives; a data node
//! ([`serve`] at a leaf) checks every piece and stores it through its [`Sink`]; acknowledgements
//! travel back up the same connections, one per data node. Parity ([`rebuild`]): the rebuilding root
//! asks its parity tree; data nodes send their pieces up, relays XOR their children's streams, the
//! root receives one stream, the XOR of all.
//!
//! **Invariants.**
//! - End-to-end integrity: the root computes BLAKE3(index ‖ payload) once per piece; relays forward the
//!   hash unchanged; every leaf checks every piece against it, and the piece count and lengths against
//!   the header. A leaf acknowledges `ok` only after its sink made the whole object durable.
//! - Nothing is acknowledged for a data node that did not store the object: the root's result has one
//!   [`LeafAck`] per data node of the tree, `ok = false` with the reason for every node whose subtree
//!   failed (child down, connection lost, corrupt piece).
//! - Bounded memory: a relay holds at most `QUEUE_PIECES + 2` pieces per child (each at most
//!   [`wire::PIECE_BYTES_MAX`]); a slow child slows its parent's stream instead of growing a buffer.
//! - A stream is served only by the node it is addressed to (the header names it).
//! - Every connection starts with a mutual proof of the cluster secret ([`auth`], HMAC-SHA256 over both
//!   nonces, both names and the wire version): a listener reads nothing but the handshake from a peer that
//!   does not prove it (no header, no piece, no sink opened) and logs one line naming the peer's address and
//!   the reason (at most one a minute per address); a sender sends nothing to a listener that does not prove
//!   it back.
//!
//! - Parity streams are checked at every hop (each sender hashes the pieces it sends, since relays
//!   change the data); the root returns the BLAKE3 of the rebuilt object for comparison with the
//!   catalog. Any failure below fails the whole rebuild with the node and piece named.
//!
//! - A failure is reported, never hidden: every failed ack names the node that failed (`blame`: the
//!   child that could not be reached, broke the connection or sent no ack; none when the data node
//!   itself failed the copy). A relay all of whose children failed answers at once and its parent
//!   stops sending to it, so a dead subtree stops costing the links above it.
//! - [`write_copies`] retries on another tree that avoids every node that failed, sending only to the
//!   copies still missing; a write is complete only when every wanted copy was acknowledged.
//!
//! **Not here.** Choosing the tree (`permafrost-topology`); confidentiality of the streams and their
//! integrity against an attacker on the path after the handshake (no TLS: run the cluster network on a
//! private network or a WireGuard tunnel, docs/security.md "Cluster traffic"); where the secret comes from
//! (the cluster's catalog or a file: `permafrost-cli`).

#![forbid(unsafe_code)]

pub mod auth;
pub mod wire;

mod node;
mod parity;
mod pipe;
mod retry;

pub use auth::{Credentials, Secret};
pub use node::{
    send, serve, NodeStats, PeerBytes, RelayNode, Sink, SinkFactory, QUEUE_PIECES, STREAMS_MAX,
};
pub use parity::{rebuild, SourceFactory};
pub use pipe::{pipe_sink, pipe_source};
pub use retry::{write_copies, Attempt, Copies, Written, ATTEMPTS_MAX};
pub use wire::{Header, Hop, LeafAck, ObjectMeta, Op};

use permafrost_topology::{Topology, Tree};

/// The hops below the root of `tree`, with each node's relay address from `addr_of(name)`.
pub fn hops(topology: &Topology, tree: &Tree, addr_of: &dyn Fn(&str) -> String) -> Vec<Hop> {
    fn hop(
        topology: &Topology,
        tree: &Tree,
        node: permafrost_topology::NodeId,
        addr_of: &dyn Fn(&str) -> String,
    ) -> Hop {
        let name = topology.name(node);
        Hop {
            name: name.to_string(),
            addr: addr_of(name),
            children: tree
                .children(topology, node)
                .into_iter()
                .map(|c| hop(topology, tree, c, addr_of))
                .collect(),
        }
    }
    tree.children(topology, tree.root())
        .into_iter()
        .map(|c| hop(topology, tree, c, addr_of))
        .collect()
}
