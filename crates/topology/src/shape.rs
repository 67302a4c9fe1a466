//! The shape of a transfer: the bytes each link direction carries and the model completion time,
//! for a tree and for the baseline where the root sends (or receives) every copy itself.
//!
//! Model: every stream of the transfer runs at once and is pipelined through relays piece by piece, so
//! the transfer takes as long as its most loaded link direction needs for its bytes at that
//! direction's free bandwidth: `time = max over link directions of bytes × 8 / free bit/s`. Latency,
//! relay CPU and disk speed are left out (the measurement adds them); other traffic keeps its measured
//! share. This is the arithmetic behind "the uplink carries the object once instead of k times" and
//! "flat instead of linear": for a tree every link carries the object once, for fan-out the root's
//! link carries it once per copy.

use std::collections::BTreeMap;

use crate::topology::{LinkId, NodeId, Topology};
use crate::tree::{Flow, Tree};

/// Bytes carried by one direction of one link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkLoad {
    /// The link.
    pub link: LinkId,
    /// The sending end.
    pub from: NodeId,
    /// The receiving end.
    pub to: NodeId,
    /// Streams (copies of the object) on it.
    pub streams: u32,
    /// Bytes on it.
    pub bytes: u64,
    /// Time this direction needs for its bytes at its free bandwidth, seconds (∞ when none is free).
    pub time_s: f64,
}

/// Per-link bytes and the model completion time of one transfer.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// Every loaded link direction, by link id then sender.
    pub loads: Vec<LinkLoad>,
    /// Model completion time, seconds: the slowest link direction.
    pub time_s: f64,
}

impl Shape {
    fn from_streams(
        topology: &Topology,
        streams: BTreeMap<(LinkId, NodeId), u32>,
        object_bytes: u64,
    ) -> Shape {
        let loads: Vec<LinkLoad> = streams
            .into_iter()
            .map(|((link, from), streams)| {
                let l = topology.link(link);
                let bytes = object_bytes * u64::from(streams);
                let free = l.free_mbit_from(from);
                let time_s = if free > 0.0 {
                    bytes as f64 * 8.0 / (free * 1e6)
                } else {
                    f64::INFINITY
                };
                LinkLoad {
                    link,
                    from,
                    to: l.other(from),
                    streams,
                    bytes,
                    time_s,
                }
            })
            .collect();
        let time_s = loads.iter().map(|l| l.time_s).fold(0.0, f64::max);
        Shape { loads, time_s }
    }

    /// Bytes on all links at `node` in the direction that sends to it plus from it (its NIC's total).
    pub fn bytes_at(&self, node: NodeId) -> u64 {
        self.loads
            .iter()
            .filter(|l| l.from == node || l.to == node)
            .map(|l| l.bytes)
            .sum()
    }

    /// Bytes on the busiest link direction.
    pub fn max_link_bytes(&self) -> u64 {
        self.loads.iter().map(|l| l.bytes).max().unwrap_or(0)
    }

    /// Bytes over all links (each hop counted).
    pub fn total_bytes(&self) -> u64 {
        self.loads.iter().map(|l| l.bytes).sum()
    }

    /// The slowest link direction (the bottleneck), if any link is loaded.
    pub fn bottleneck(&self) -> Option<&LinkLoad> {
        self.loads
            .iter()
            .max_by(|a, b| a.time_s.total_cmp(&b.time_s).then(b.link.cmp(&a.link)))
    }
}

/// The shape of sending `object_bytes` along `tree`: one stream per tree link, in the flow direction.
pub fn tree_shape(topology: &Topology, tree: &Tree, object_bytes: u64) -> Shape {
    let mut streams = BTreeMap::new();
    for e in tree.edges() {
        let from = match tree.flow() {
            Flow::Down => e.parent,
            Flow::Up => e.child,
        };
        *streams.entry((e.link, from)).or_insert(0) += 1;
    }
    Shape::from_streams(topology, streams, object_bytes)
}

/// Why a fan-out route is missing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no route between {root:?} and {target:?} through relays")]
pub struct NoRoute {
    /// The root.
    pub root: String,
    /// The target without a route.
    pub target: String,
}

/// The route of one copy between `root` and `target` as ordinary routing picks it: fewest hops through
/// relays, ties to the widest (most free bandwidth in the flow direction), then by the names of the
/// nodes nearer the root. Returned as the links from the root outwards.
pub fn route(
    topology: &Topology,
    root: NodeId,
    target: NodeId,
    flow: Flow,
) -> Result<Vec<(LinkId, NodeId, NodeId)>, NoRoute> {
    let n = topology.nodes().len();
    let mut hops = vec![u32::MAX; n];
    hops[root.index()] = 0;
    let mut layer = vec![root];
    let mut order = vec![root];
    while !layer.is_empty() {
        let mut next = Vec::new();
        for &x in &layer {
            if x != root && !topology.forwards(x) {
                continue;
            }
            for (_, y) in topology.neighbours(x) {
                if hops[y.index()] == u32::MAX {
                    hops[y.index()] = hops[x.index()] + 1;
                    next.push(y);
                }
            }
        }
        order.extend(&next);
        layer = next;
    }
    let no_route = || NoRoute {
        root: topology.name(root).to_string(),
        target: topology.name(target).to_string(),
    };
    if hops[target.index()] == u32::MAX {
        return Err(no_route());
    }
    // Widest shortest path, in BFS order.
    let mut width = vec![f64::NEG_INFINITY; n];
    let mut via: Vec<Option<(LinkId, NodeId)>> = vec![None; n];
    width[root.index()] = f64::INFINITY;
    for &y in order.iter().skip(1) {
        for (link, x) in topology.neighbours(y) {
            let from_root_side = x == root || topology.forwards(x);
            if hops[x.index()] == u32::MAX
                || hops[x.index()] + 1 != hops[y.index()]
                || !from_root_side
            {
                continue;
            }
            let l = topology.link(link);
            let free = match flow {
                Flow::Down => l.free_mbit_from(x),
                Flow::Up => l.free_mbit_from(y),
            };
            let w = width[x.index()].min(free);
            let better = match via[y.index()] {
                None => true,
                Some((_, old)) => w
                    .total_cmp(&width[y.index()])
                    .then_with(|| topology.name(old).cmp(topology.name(x)))
                    .is_gt(),
            };
            if better {
                width[y.index()] = w;
                via[y.index()] = Some((link, x));
            }
        }
    }
    let mut path = Vec::new();
    let mut at = target;
    while at != root {
        let (link, prev) = via[at.index()].ok_or_else(no_route)?;
        path.push((link, prev, at));
        at = prev;
    }
    path.reverse();
    Ok(path)
}

/// The shape of the baseline without trees: the root sends every copy itself (replication, `Flow::Down`)
/// or receives every piece itself (naive rebuild, `Flow::Up`), each copy routed by [`route`].
pub fn fan_out_shape(
    topology: &Topology,
    root: NodeId,
    targets: &[NodeId],
    flow: Flow,
    object_bytes: u64,
) -> Result<Shape, NoRoute> {
    let mut streams = BTreeMap::new();
    for &t in targets {
        for (link, near, far) in route(topology, root, t, flow)? {
            let from = match flow {
                Flow::Down => near,
                Flow::Up => far,
            };
            *streams.entry((link, from)).or_insert(0) += 1;
        }
    }
    Ok(Shape::from_streams(topology, streams, object_bytes))
}
