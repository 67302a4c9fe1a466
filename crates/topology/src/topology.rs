//! The network graph: nodes (clients, data nodes, relays) and full-duplex links with a capacity and a
//! measured utilisation per direction, built by [`Topology::add_node`] / [`Topology::add_link`] or parsed
//! from a topology file ([`Topology::from_toml_str`]). Both paths run the same checks.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

/// The topology file format version this code reads.
pub const FORMAT_VERSION: u32 = 1;

/// A node of one [`Topology`] (an index into it; only meaningful with the topology that made it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) u32);

impl NodeId {
    /// The id of the node at `index` in [`Topology::nodes`] (checked by the functions that take it).
    pub fn from_index(index: usize) -> NodeId {
        NodeId(u32::try_from(index).unwrap_or(u32::MAX))
    }

    /// The index of the node in [`Topology::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A link of one [`Topology`] (an index into [`Topology::links`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub(crate) u32);

impl LinkId {
    /// The index of the link in [`Topology::links`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a node does in the cluster. Only relays forward data inside a tree; clients and data nodes are
/// the root or the leaves (the source's rule that data and name nodes attach only to switch nodes, kept
/// for forwarding but not for links: a client may be cabled straight to a data node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Writes and reads objects (an S3 client host, or a node receiving a request).
    Client,
    /// A permafrost server holding data (a data node).
    Node,
    /// `permafrost relay`: duplicates a stream to its children, or XORs its children's streams.
    Relay,
}

impl Role {
    /// The name used in topology files.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Node => "node",
            Role::Relay => "relay",
        }
    }
}

/// A node of the topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique, non-empty, no whitespace.
    pub name: String,
    /// What the node does.
    pub role: Role,
    /// The most tree links this node may carry in one tree (its parent link plus its children), or no
    /// limit. A relay's limit stands for its forwarding bandwidth and CPU (the source's
    /// `maxconnections`); a client's limit of 1 makes it send every object once.
    pub degree_max: Option<u32>,
}

/// A full-duplex link between two nodes. Each direction has the full capacity; the measured use is kept
/// per direction because a replication tree sends away from its root and a parity tree towards it.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// First end (as written in the file).
    pub a: NodeId,
    /// Second end.
    pub b: NodeId,
    /// Capacity of each direction, Mbit/s; finite and > 0.
    pub capacity_mbit: f64,
    /// Measured use, Mbit/s: `[a → b, b → a]`; each within `0..=capacity_mbit`.
    pub used_mbit: [f64; 2],
}

impl Link {
    /// The other end of the link, seen from `node` (which must be one of its ends).
    pub fn other(&self, node: NodeId) -> NodeId {
        if node == self.a {
            self.b
        } else {
            debug_assert_eq!(node, self.b, "node is not an end of the link");
            self.a
        }
    }

    fn direction(&self, from: NodeId) -> usize {
        if from == self.a {
            0
        } else {
            debug_assert_eq!(from, self.b, "node is not an end of the link");
            1
        }
    }

    /// Measured use of the direction that leaves `from`, Mbit/s.
    pub fn used_mbit_from(&self, from: NodeId) -> f64 {
        self.used_mbit[self.direction(from)]
    }

    /// Unused bandwidth of the direction that leaves `from`, Mbit/s (capacity minus measured use, ≥ 0).
    /// This is what "least-utilised" means in the tree algorithms: free bandwidth, not a percentage,
    /// so that an idle 100 Mbit/s link does not win over a half-used 10 Gbit/s one.
    pub fn free_mbit_from(&self, from: NodeId) -> f64 {
        (self.capacity_mbit - self.used_mbit_from(from)).max(0.0)
    }

    /// Measured use of the direction leaving `from` as a fraction of capacity (what a plain MST weighs).
    pub fn utilisation_from(&self, from: NodeId) -> f64 {
        self.used_mbit_from(from) / self.capacity_mbit
    }
}

/// Why a topology was refused; `line` is the line of the topology file when it came from one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct TopologyError {
    /// 1-based line in the topology file, if the topology came from a file.
    pub line: Option<usize>,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "topology line {line}: {}", self.problem),
            None => write!(f, "topology: {}", self.problem),
        }
    }
}

/// The checks a topology must pass.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// The file is not valid TOML or does not have the expected fields (the message carries the place).
    #[error("{0}")]
    Syntax(String),
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
    /// `version` is not one this code reads.
    #[error("format version {found} is not supported (this build reads version {FORMAT_VERSION})")]
    Version {
        /// The version found.
        found: i64,
    },
    /// A node name is empty or contains whitespace or control characters.
    #[error("node name {0:?} is not valid (non-empty, no whitespace)")]
    BadName(String),
    /// Two nodes with one name.
    #[error("node {name:?} is declared twice")]
    DuplicateNode {
        /// The name.
        name: String,
    },
    /// A link names a node that is not declared.
    #[error("link names unknown node {name:?} (declare it in a [[node]] table first)")]
    UnknownNode {
        /// The unknown name.
        name: String,
    },
    /// A link from a node to itself.
    #[error("link from {name:?} to itself")]
    SelfLink {
        /// The node.
        name: String,
    },
    /// A second link between the same two nodes (in either order).
    #[error(
        "second link between {a:?} and {b:?} (one link per pair; give it the summed capacity)"
    )]
    DuplicateLink {
        /// One end.
        a: String,
        /// The other end.
        b: String,
    },
    /// `between` does not name exactly two nodes.
    #[error("a link joins exactly two nodes: `between = [\"a\", \"b\"]`, found {0} names")]
    LinkEnds(usize),
    /// Capacity not finite or not positive.
    #[error("link {a:?}–{b:?}: capacity_mbit must be a positive number, found {capacity_mbit}")]
    BadCapacity {
        /// One end.
        a: String,
        /// The other end.
        b: String,
        /// The value found.
        capacity_mbit: f64,
    },
    /// Measured use negative, not finite, above capacity, or not two values.
    #[error("link {a:?}–{b:?}: used_mbit must be two numbers [a→b, b→a] within 0..={capacity_mbit}, found {found}")]
    BadUsed {
        /// One end.
        a: String,
        /// The other end.
        b: String,
        /// The capacity.
        capacity_mbit: f64,
        /// What was found.
        found: String,
    },
    /// `degree_max` below 1.
    #[error("node {name:?}: degree_max must be at least 1, found {found}")]
    BadDegree {
        /// The node.
        name: String,
        /// The value found.
        found: i64,
    },
    /// A name the caller requires (e.g. a node registered in the catalog) is not in the topology, or a
    /// topology data node the caller does not know.
    #[error("{0}")]
    Mismatch(String),
}

/// The cluster's network: nodes and links. Invariants (checked on every insertion, so every
/// `Topology` value satisfies them): node names unique and valid; every link joins two distinct
/// declared nodes; at most one link per pair; capacities finite and positive; measured use within
/// `0..=capacity`; `degree_max ≥ 1`.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    nodes: Vec<Node>,
    links: Vec<Link>,
    by_name: HashMap<String, NodeId>,
    by_pair: HashMap<(NodeId, NodeId), LinkId>,
    adjacency: Vec<Vec<LinkId>>,
}

fn problem(problem: Problem) -> TopologyError {
    TopologyError {
        line: None,
        problem,
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declare a node.
    pub fn add_node(
        &mut self,
        name: &str,
        role: Role,
        degree_max: Option<u32>,
    ) -> Result<NodeId, TopologyError> {
        if !valid_name(name) {
            return Err(problem(Problem::BadName(name.to_string())));
        }
        if self.by_name.contains_key(name) {
            return Err(problem(Problem::DuplicateNode {
                name: name.to_string(),
            }));
        }
        if degree_max == Some(0) {
            return Err(problem(Problem::BadDegree {
                name: name.to_string(),
                found: 0,
            }));
        }
        let id = NodeId(u32::try_from(self.nodes.len()).expect("fewer than 2^32 nodes"));
        self.nodes.push(Node {
            name: name.to_string(),
            role,
            degree_max,
        });
        self.by_name.insert(name.to_string(), id);
        self.adjacency.push(Vec::new());
        Ok(id)
    }

    /// Declare a link between two declared nodes; `used_mbit` is `[a → b, b → a]`.
    pub fn add_link(
        &mut self,
        a: &str,
        b: &str,
        capacity_mbit: f64,
        used_mbit: [f64; 2],
    ) -> Result<LinkId, TopologyError> {
        let lookup = |name: &str| {
            self.node_id(name).ok_or_else(|| {
                problem(Problem::UnknownNode {
                    name: name.to_string(),
                })
            })
        };
        let (id_a, id_b) = (lookup(a)?, lookup(b)?);
        if id_a == id_b {
            return Err(problem(Problem::SelfLink {
                name: a.to_string(),
            }));
        }
        let pair = (id_a.min(id_b), id_a.max(id_b));
        if self.by_pair.contains_key(&pair) {
            return Err(problem(Problem::DuplicateLink {
                a: a.to_string(),
                b: b.to_string(),
            }));
        }
        if !(capacity_mbit.is_finite() && capacity_mbit > 0.0) {
            return Err(problem(Problem::BadCapacity {
                a: a.to_string(),
                b: b.to_string(),
                capacity_mbit,
            }));
        }
        if used_mbit
            .iter()
            .any(|u| !(u.is_finite() && *u >= 0.0 && *u <= capacity_mbit))
        {
            return Err(problem(Problem::BadUsed {
                a: a.to_string(),
                b: b.to_string(),
                capacity_mbit,
                found: format!("{used_mbit:?}"),
            }));
        }
        let id = LinkId(u32::try_from(self.links.len()).expect("fewer than 2^32 links"));
        self.links.push(Link {
            a: id_a,
            b: id_b,
            capacity_mbit,
            used_mbit,
        });
        self.by_pair.insert(pair, id);
        self.adjacency[id_a.index()].push(id);
        self.adjacency[id_b.index()].push(id);
        Ok(id)
    }

    /// Record a fresh measurement of the direction of `link` leaving `from` (clamped to
    /// `0..=capacity`; a non-finite value counts as fully used). Live utilisation feeds the next tree.
    pub fn set_used_mbit(&mut self, link: LinkId, from: NodeId, used_mbit: f64) {
        let l = &mut self.links[link.index()];
        let value = if used_mbit.is_finite() {
            used_mbit.clamp(0.0, l.capacity_mbit)
        } else {
            l.capacity_mbit
        };
        let direction = l.direction(from);
        l.used_mbit[direction] = value;
    }

    /// All nodes, in declaration order (`NodeId::index`).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// All links, in declaration order (`LinkId::index`).
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// One node's name.
    pub fn name(&self, id: NodeId) -> &str {
        &self.nodes[id.index()].name
    }

    /// One link.
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id.index()]
    }

    /// Look a node up by name.
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Whether `id` belongs to this topology.
    pub fn contains(&self, id: NodeId) -> bool {
        id.index() < self.nodes.len()
    }

    /// The link joining two nodes, if any.
    pub fn link_between(&self, a: NodeId, b: NodeId) -> Option<LinkId> {
        self.by_pair.get(&(a.min(b), a.max(b))).copied()
    }

    /// The links at a node and the node at their other end, in declaration order.
    pub fn neighbours(&self, node: NodeId) -> impl Iterator<Item = (LinkId, NodeId)> + '_ {
        self.adjacency[node.index()]
            .iter()
            .map(move |&l| (l, self.links[l.index()].other(node)))
    }

    /// Nodes with a role, in declaration order.
    pub fn with_role(&self, role: Role) -> Vec<NodeId> {
        (0..self.nodes.len())
            .map(|i| NodeId(i as u32))
            .filter(|&n| self.node(n).role == role)
            .collect()
    }

    /// Whether a node may forward inside a tree (only relays do).
    pub fn forwards(&self, node: NodeId) -> bool {
        self.node(node).role == Role::Relay
    }

    /// Check the topology against the data nodes the cluster knows (e.g. from the catalog): every
    /// known name must be a data node of the topology and every data node of the topology must be known.
    pub fn check_data_nodes<'a>(
        &self,
        known: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), TopologyError> {
        let known: Vec<&str> = known.into_iter().collect();
        let mut missing: Vec<&str> = known
            .iter()
            .copied()
            .filter(|name| {
                self.node_id(name)
                    .is_none_or(|id| self.node(id).role != Role::Node)
            })
            .collect();
        let mut unknown: Vec<&str> = self
            .with_role(Role::Node)
            .into_iter()
            .map(|id| self.name(id))
            .filter(|name| !known.contains(name))
            .collect();
        missing.sort_unstable();
        unknown.sort_unstable();
        if missing.is_empty() && unknown.is_empty() {
            return Ok(());
        }
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!(
                "cluster nodes missing from the topology (as role \"node\"): {}",
                missing.join(", ")
            ));
        }
        if !unknown.is_empty() {
            parts.push(format!(
                "topology names data nodes the cluster does not know: {}",
                unknown.join(", ")
            ));
        }
        Err(problem(Problem::Mismatch(parts.join("; "))))
    }

    /// Read a topology file (see `docs/cluster.md`).
    pub fn from_path(path: &Path) -> Result<Self, TopologyError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            problem(Problem::Read {
                path: path.display().to_string(),
                message: e.to_string(),
            })
        })?;
        Self::from_toml_str(&text)
    }

    /// Parse a topology file's text. Errors name the line and the offending node or link.
    pub fn from_toml_str(text: &str) -> Result<Self, TopologyError> {
        let file: File = toml::from_str(text)
            .map_err(|e| problem(Problem::Syntax(e.to_string().trim().into())))?;
        let line_of = |span: std::ops::Range<usize>| {
            Some(text[..span.start.min(text.len())].matches('\n').count() + 1)
        };
        let at = |line: Option<usize>| {
            move |mut e: TopologyError| {
                e.line = line;
                e
            }
        };
        if *file.version.get_ref() != i64::from(FORMAT_VERSION) {
            return Err(TopologyError {
                line: line_of(file.version.span()),
                problem: Problem::Version {
                    found: *file.version.get_ref(),
                },
            });
        }
        let mut topology = Topology::new();
        for node in &file.node {
            let line = line_of(node.name.span());
            let degree_max = match &node.degree_max {
                None => None,
                Some(d) => match u32::try_from(*d.get_ref()) {
                    Ok(v) if v >= 1 => Some(v),
                    _ => {
                        return Err(TopologyError {
                            line: line_of(d.span()),
                            problem: Problem::BadDegree {
                                name: node.name.get_ref().clone(),
                                found: *d.get_ref(),
                            },
                        })
                    }
                },
            };
            topology
                .add_node(node.name.get_ref(), node.role, degree_max)
                .map_err(at(line))?;
        }
        for link in &file.link {
            let ends = link.between.get_ref();
            if ends.len() != 2 {
                return Err(TopologyError {
                    line: line_of(link.between.span()),
                    problem: Problem::LinkEnds(ends.len()),
                });
            }
            // An unknown name is reported at its own place in the file.
            for end in ends {
                if topology.node_id(end.get_ref()).is_none() {
                    return Err(TopologyError {
                        line: line_of(end.span()),
                        problem: Problem::UnknownNode {
                            name: end.get_ref().clone(),
                        },
                    });
                }
            }
            let (a, b) = (ends[0].get_ref(), ends[1].get_ref());
            let capacity = *link.capacity_mbit.get_ref();
            let used = match &link.used_mbit {
                None => [0.0, 0.0],
                Some(u) => match u.get_ref().as_slice() {
                    [x, y] => [*x, *y],
                    other => {
                        return Err(TopologyError {
                            line: line_of(u.span()),
                            problem: Problem::BadUsed {
                                a: a.clone(),
                                b: b.clone(),
                                capacity_mbit: capacity,
                                found: format!("{other:?}"),
                            },
                        })
                    }
                },
            };
            topology.add_link(a, b, capacity, used).map_err(|mut e| {
                e.line = match (&e.problem, &link.used_mbit) {
                    (Problem::BadCapacity { .. }, _) => line_of(link.capacity_mbit.span()),
                    (Problem::BadUsed { .. }, Some(u)) => line_of(u.span()),
                    _ => line_of(link.between.span()),
                };
                e
            })?;
        }
        Ok(topology)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: Spanned<i64>,
    #[serde(default)]
    node: Vec<NodeEntry>,
    #[serde(default)]
    link: Vec<LinkEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: Spanned<String>,
    role: Role,
    degree_max: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkEntry {
    between: Spanned<Vec<Spanned<String>>>,
    capacity_mbit: Spanned<f64>,
    used_mbit: Option<Spanned<Vec<f64>>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
version = 1

[[node]]
name = "client"
role = "client"
degree_max = 1

[[node]]
name = "core"
role = "relay"

[[node]]
name = "n1"
role = "node"

[[link]]
between = ["client", "core"]
capacity_mbit = 200

[[link]]
between = ["core", "n1"]
capacity_mbit = 1000.5
used_mbit = [100, 0]
"#;

    fn error(text: &str) -> TopologyError {
        Topology::from_toml_str(text).expect_err("the topology must be refused")
    }

    #[test]
    fn a_valid_file_parses_with_roles_limits_and_per_direction_use() {
        let t = Topology::from_toml_str(GOOD).unwrap();
        assert_eq!(t.nodes().len(), 3);
        assert_eq!(t.links().len(), 2);
        let client = t.node_id("client").unwrap();
        let core = t.node_id("core").unwrap();
        let n1 = t.node_id("n1").unwrap();
        assert_eq!(t.node(client).degree_max, Some(1));
        assert_eq!(t.node(core).role, Role::Relay);
        let l = t.link(t.link_between(n1, core).unwrap());
        assert_eq!(l.free_mbit_from(core), 900.5);
        assert_eq!(l.free_mbit_from(n1), 1000.5);
        assert!(t.forwards(core) && !t.forwards(n1));
    }

    #[test]
    fn an_unknown_node_is_named_with_its_line() {
        let text = GOOD.replace(
            "between = [\"core\", \"n1\"]",
            "between = [\"core\", \"n9\"]",
        );
        let e = error(&text);
        assert_eq!(
            e.problem,
            Problem::UnknownNode {
                name: "n9".to_string()
            }
        );
        assert_eq!(e.line, Some(22));
        assert!(e.to_string().contains("line 22"), "{e}");
        assert!(e.to_string().contains("\"n9\""), "{e}");
    }

    #[test]
    fn duplicate_links_in_either_order_are_refused() {
        let text = format!("{GOOD}\n[[link]]\nbetween = [\"n1\", \"core\"]\ncapacity_mbit = 10\n");
        let e = error(&text);
        assert!(matches!(e.problem, Problem::DuplicateLink { .. }), "{e}");
        assert_eq!(e.line, Some(27), "{e}");
    }

    #[test]
    fn duplicate_nodes_are_refused_with_their_line() {
        let text = format!("{GOOD}\n[[node]]\nname = \"core\"\nrole = \"node\"\n");
        let e = error(&text);
        assert!(matches!(e.problem, Problem::DuplicateNode { .. }), "{e}");
        assert_eq!(e.line, Some(27), "{e}");
    }

    #[test]
    fn non_positive_or_non_finite_capacity_is_refused() {
        for bad in ["0", "-200", "nan", "inf"] {
            let text = GOOD.replace("capacity_mbit = 200", &format!("capacity_mbit = {bad}"));
            let e = error(&text);
            assert!(
                matches!(e.problem, Problem::BadCapacity { .. }),
                "{bad}: {e}"
            );
            assert_eq!(e.line, Some(19), "{e}");
        }
    }

    #[test]
    fn use_above_capacity_negative_or_malformed_is_refused() {
        for bad in ["[2000, 0]", "[-1, 0]", "[1]", "[1, 2, 3]"] {
            let text = GOOD.replace("used_mbit = [100, 0]", &format!("used_mbit = {bad}"));
            let e = error(&text);
            assert!(matches!(e.problem, Problem::BadUsed { .. }), "{bad}: {e}");
            assert_eq!(e.line, Some(24), "{e}");
        }
    }

    #[test]
    fn self_links_bad_degrees_names_roles_fields_and_versions_are_refused() {
        let e = error(&GOOD.replace("[\"core\", \"n1\"]", "[\"core\", \"core\"]"));
        assert!(matches!(e.problem, Problem::SelfLink { .. }), "{e}");
        let e = error(&GOOD.replace("degree_max = 1", "degree_max = 0"));
        assert!(
            matches!(e.problem, Problem::BadDegree { found: 0, .. }),
            "{e}"
        );
        assert_eq!(e.line, Some(7));
        let e = error(&GOOD.replace("name = \"n1\"", "name = \"n 1\""));
        assert!(matches!(e.problem, Problem::BadName(_)), "{e}");
        let e = error(&GOOD.replace("role = \"node\"", "role = \"switch\""));
        assert!(matches!(e.problem, Problem::Syntax(_)), "{e}");
        assert!(e.to_string().contains("line 15"), "{e}");
        let e = error(&GOOD.replace("capacity_mbit = 200", "capacity = 200"));
        assert!(e.to_string().contains("capacity"), "{e}");
        let e = error(&GOOD.replace("version = 1", "version = 2"));
        assert!(matches!(e.problem, Problem::Version { found: 2 }), "{e}");
        let e = error(&GOOD.replace("[\"client\", \"core\"]", "[\"client\"]"));
        assert!(matches!(e.problem, Problem::LinkEnds(1)), "{e}");
    }

    #[test]
    fn data_nodes_are_checked_against_the_cluster() {
        let t = Topology::from_toml_str(GOOD).unwrap();
        t.check_data_nodes(["n1"]).unwrap();
        let e = t.check_data_nodes(["n1", "n2", "core"]).unwrap_err();
        assert!(e.to_string().contains("core, n2"), "{e}");
        let e = t.check_data_nodes([]).unwrap_err();
        assert!(e.to_string().contains("does not know: n1"), "{e}");
    }

    #[test]
    fn live_measurements_are_clamped_to_the_link() {
        let mut t = Topology::from_toml_str(GOOD).unwrap();
        let core = t.node_id("core").unwrap();
        let n1 = t.node_id("n1").unwrap();
        let l = t.link_between(core, n1).unwrap();
        t.set_used_mbit(l, n1, 5000.0);
        assert_eq!(t.link(l).free_mbit_from(n1), 0.0);
        t.set_used_mbit(l, n1, -3.0);
        assert_eq!(t.link(l).free_mbit_from(n1), 1000.5);
        t.set_used_mbit(l, core, f64::NAN);
        assert_eq!(t.link(l).free_mbit_from(core), 0.0);
    }
}
