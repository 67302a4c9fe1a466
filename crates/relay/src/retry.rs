//! A write of k copies that survives a relay or data node dying mid-transfer: send along a replication
//! tree, and when some copies fail, build another tree that avoids what failed and send again to the
//! copies still missing. A copy counts only when its data node acknowledged it (every piece checked,
//! the copy durable), so the caller acknowledges the write only when [`Written::complete`].

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use permafrost_topology::{replication_tree, Demand, NodeId, Topology};
use serde::Serialize;

use crate::node::{send, NodeStats};
use crate::wire::LeafAck;

/// Most trees one write tries (the first and up to three retries); each retry avoids at least one
/// more failed node, so a write never loops.
pub const ATTEMPTS_MAX: usize = 4;

/// Where the copies go.
#[derive(Clone, Debug)]
pub enum Copies {
    /// Exactly these data nodes (a failed one cannot be replaced: the write then fails, naming it).
    Exact(Vec<NodeId>),
    /// Any `k` of these candidates: a failed one is replaced by the next best-connected candidate.
    Any {
        /// The data nodes that may hold a copy.
        candidates: Vec<NodeId>,
        /// How many copies.
        k: usize,
    },
}

impl Copies {
    /// The number of copies wanted.
    pub fn wanted(&self) -> usize {
        match self {
            Copies::Exact(nodes) => nodes.len(),
            Copies::Any { k, .. } => *k,
        }
    }
}

/// One tree tried.
#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    /// The tree, one line (`client → core → { edge1 → { n1, n2 } }`).
    pub tree: String,
    /// The nodes and links this tree had to avoid (failed in earlier attempts).
    pub avoided: Vec<String>,
    /// One ack per data node of the tree.
    pub acks: Vec<LeafAck>,
    /// Wall time of this attempt, seconds.
    pub seconds: f64,
    /// Bytes the root wrote to the network in this attempt.
    pub bytes_out: u64,
}

/// The outcome of [`write_copies`].
#[derive(Clone, Debug, Serialize)]
pub struct Written {
    /// Copies wanted.
    pub wanted: usize,
    /// Data nodes holding an acknowledged copy, in the order they acknowledged.
    pub stored: Vec<String>,
    /// Every tree tried, in order.
    pub attempts: Vec<Attempt>,
    /// Why the write stopped short, when it did (no tree avoiding what failed, attempts used up).
    pub gave_up: Option<String>,
}

impl Written {
    /// Every wanted copy is durable: only then may the write be acknowledged.
    pub fn complete(&self) -> bool {
        self.stored.len() == self.wanted
    }
}

/// Write `object_bytes` bytes (from a fresh reader `open()` per attempt) as `copies` from `root`
/// (`object_meta`: see [`send`]),
/// retrying on another tree after failures, at most [`ATTEMPTS_MAX`] trees.
///
/// After each attempt, every failed copy marks a node unusable: the relay or data node its ack
/// blames (unreachable, connection lost or reset, no ack within the timeout), else the data node
/// itself (corrupt piece, storage error). The next tree avoids every such node and reaches only the
/// copies still missing (for [`Copies::Any`], from the candidates without a copy that are not
/// avoided). `Err` only for local problems: `open` failing, a tree node without an address.
#[allow(clippy::too_many_arguments)] // the tree's inputs, the object's, and the counters: all needed.
pub fn write_copies(
    topology: &Topology,
    root: NodeId,
    copies: &Copies,
    addr_of: &dyn Fn(&str) -> Option<String>,
    transfer: &str,
    object_meta: Option<&crate::wire::ObjectMeta>,
    open: &mut dyn FnMut() -> io::Result<Box<dyn Read>>,
    object_bytes: u64,
    piece_bytes: u32,
    stats: &Arc<NodeStats>,
    credentials: &crate::Credentials,
) -> io::Result<Written> {
    let wanted = copies.wanted();
    let mut stored: Vec<NodeId> = Vec::new();
    let mut avoid: Vec<NodeId> = Vec::new();
    let mut attempts = Vec::new();
    let mut gave_up = None;
    while stored.len() < wanted {
        if attempts.len() == ATTEMPTS_MAX {
            gave_up = Some(format!("{ATTEMPTS_MAX} trees tried"));
            break;
        }
        let need = wanted - stored.len();
        let demand = match copies {
            Copies::Exact(nodes) => {
                let rest: Vec<NodeId> = nodes
                    .iter()
                    .copied()
                    .filter(|n| !stored.contains(n))
                    .collect();
                Demand::exact(&rest)
            }
            Copies::Any { candidates, .. } => {
                let rest: Vec<NodeId> = candidates
                    .iter()
                    .copied()
                    .filter(|n| !stored.contains(n))
                    .collect();
                let usable = rest.iter().filter(|n| !avoid.contains(n)).count();
                if usable < need {
                    gave_up = Some(format!(
                        "{need} more copies wanted, {usable} candidates left without a copy that did not fail{}",
                        names_suffix(topology, &avoid)
                    ));
                    break;
                }
                Demand::any(&rest, need)
            }
        }
        .avoiding(&avoid);
        let tree = match replication_tree(topology, root, &demand) {
            Ok(tree) => tree,
            Err(e) => {
                gave_up = Some(format!("no tree for the {need} copies left: {e}"));
                break;
            }
        };
        let missing: Vec<&str> = tree
            .nodes()
            .into_iter()
            .filter(|&n| n != root)
            .map(|n| topology.name(n))
            .filter(|name| addr_of(name).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "no address for {} (in the tree {})",
                    missing.join(", "),
                    tree.render(topology)
                ),
            ));
        }
        let hops = crate::hops(topology, &tree, &|name| addr_of(name).unwrap_or_default());
        let bytes_before = stats.bytes_out.load(Ordering::Relaxed);
        let started = Instant::now();
        let mut reader = open()?;
        let acks = send(
            transfer,
            object_meta,
            &hops,
            &mut *reader,
            object_bytes,
            piece_bytes,
            stats,
            credentials,
        )?;
        for ack in &acks {
            let Some(node) = topology.node_id(&ack.node) else {
                continue;
            };
            if ack.ok {
                if !stored.contains(&node) {
                    stored.push(node);
                }
                continue;
            }
            let culprit = ack
                .blame
                .as_deref()
                .and_then(|b| topology.node_id(b))
                .filter(|&b| b != root)
                .unwrap_or(node);
            if !avoid.contains(&culprit) {
                avoid.push(culprit);
            }
        }
        attempts.push(Attempt {
            tree: tree.render(topology),
            avoided: demand
                .avoid
                .iter()
                .map(|&n| topology.name(n).to_string())
                .collect(),
            acks,
            seconds: started.elapsed().as_secs_f64(),
            bytes_out: stats.bytes_out.load(Ordering::Relaxed) - bytes_before,
        });
    }
    Ok(Written {
        wanted,
        stored: stored
            .iter()
            .map(|&n| topology.name(n).to_string())
            .collect(),
        attempts,
        gave_up,
    })
}

fn names_suffix(topology: &Topology, nodes: &[NodeId]) -> String {
    if nodes.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = nodes.iter().map(|&n| topology.name(n)).collect();
    format!(" (failed: {})", names.join(", "))
}
