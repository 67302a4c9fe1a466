//! # permafrost-topology: the cluster's network and the trees data travels along
//!
//! **Job.** Know the network of a permafrost cluster and decide, per transfer, which links carry it:
//!
//! - [`topology`]: the graph — clients, data nodes and relays (`permafrost relay`, the source's switch
//!   nodes), full-duplex links with a capacity and a measured use per direction, and a per-node
//!   `degree_max` (how many tree links a node may carry at once). Parsed from a topology file
//!   ([`Topology::from_toml_str`], format in `docs/cluster.md`) or built in code; live measurements
//!   update it ([`Topology::set_used_mbit`]).
//! - [`tree`]: the source's Algorithm 1 (seed 003, ch. 4) with its gaps fixed. A *replication tree*
//!   per write ([`replication_tree`]): rooted at the writer, reaching `k` data nodes — named, or the
//!   `k` best-connected of some candidates ([`Demand::any`]) — so the root sends the object once and
//!   relays duplicate it. A *parity tree* per rebuild ([`parity_tree`]): rooted at the rebuilding node,
//!   reaching one holder of each surviving piece, so relays XOR their children's streams and each
//!   link, the root's included, carries one stream.
//! - [`shape`]: bytes per link direction and the model completion time (bottleneck) of a tree and of
//!   the baseline where the root sends or receives every copy itself ([`fan_out_shape`]).
//! - [`baseline`]: a plain minimum spanning tree, for comparison only.
//! - [`random`]: seeded random topologies for tests and the comparison example.
//!
//! **Invariants.**
//! - A [`Topology`] value is always valid: unique names, links between two distinct declared nodes,
//!   one link per pair, finite positive capacities, measured use within `0..=capacity`,
//!   `degree_max ≥ 1`. A topology file that breaks one is refused with the line and the name.
//! - Every tree returned satisfies [`Tree::check`]: each node at most once with one parent, no cycles,
//!   every edge a topology link, only relays forward, every leaf a target (unneeded branches pruned),
//!   every group of the demand reached, and **no node beyond its `degree_max`** — when the greedy
//!   cannot honour the limits it fails with [`TreeError::Unreachable`] naming what is short and which
//!   nodes are full; it never exceeds a limit (the source's fallback does).
//! - Deterministic: the choice order is a total order on (free bandwidth, depth, parent name, child
//!   name), so the same network and demand give the same tree whatever the declaration order.
//! - Pure: no I/O (except [`Topology::from_path`]), no clock, no randomness outside [`random`].
//!
//! **Not here.** Moving bytes (the relay data plane), measuring utilisation, storing the topology in
//! the catalog, choosing which nodes are healthy or have room (callers pass candidates).

#![forbid(unsafe_code)]

pub mod baseline;
pub mod random;
pub mod shape;
pub mod topology;
pub mod tree;

pub use shape::{fan_out_shape, route, tree_shape, LinkLoad, NoRoute, Shape};
pub use topology::{Link, LinkId, Node, NodeId, Problem, Role, Topology, TopologyError};
pub use tree::{
    parity_tree, replication_tree, tree_with_budget, Demand, Duty, Flow, Group, Tree, TreeEdge,
    TreeError, Unreachable, SEARCH_STEPS_MAX,
};
