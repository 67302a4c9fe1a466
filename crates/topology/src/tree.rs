//! Replication trees and parity trees: the source's Algorithm 1 (a Prim-style greedy over the
//! least-utilised links, then pruning) with its gaps fixed. See `docs/cluster.md` for the list of fixes.
//!
//! One greedy serves both trees; they differ in the direction data flows ([`Flow`]) and in the demand:
//! a replication tree reaches `k` data nodes (named, or the `k` best-connected of some candidates); a
//! parity tree reaches one holder of each surviving piece of a parity group.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::fmt;

use crate::topology::{LinkId, NodeId, Role, Topology};

/// Which way data travels along a tree's links.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// From the root to the leaves (replication: relays duplicate the stream to their children).
    Down,
    /// From the leaves to the root (parity rebuild: relays XOR their children's streams).
    Up,
}

/// A set of data nodes of which a tree must reach `count` (e.g. "2 of the 3 holders of piece B").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The nodes that qualify (data nodes, distinct, not the root).
    pub candidates: Vec<NodeId>,
    /// How many of them the tree must reach (1..=candidates.len()).
    pub count: usize,
}

/// What a tree must reach: every group's `count` members. A node belongs to at most one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    /// The groups.
    pub groups: Vec<Group>,
    /// Nodes the tree must not use (relays or data nodes that failed: a retry on another tree).
    /// An avoided candidate is never chosen.
    pub avoid: Vec<NodeId>,
    /// Links the tree must not use (a link that failed while its two ends still answer).
    pub avoid_links: Vec<LinkId>,
}

impl Demand {
    /// Exactly these data nodes (each its own group of one).
    pub fn exact(nodes: &[NodeId]) -> Self {
        Demand {
            groups: nodes
                .iter()
                .map(|&n| Group {
                    candidates: vec![n],
                    count: 1,
                })
                .collect(),
            avoid: Vec::new(),
            avoid_links: Vec::new(),
        }
    }

    /// Any `k` of these candidates: the tree picks the best-connected (the first `k` its greedy reaches).
    pub fn any(candidates: &[NodeId], k: usize) -> Self {
        Demand {
            groups: vec![Group {
                candidates: candidates.to_vec(),
                count: k,
            }],
            avoid: Vec::new(),
            avoid_links: Vec::new(),
        }
    }

    /// One holder of each piece (a parity rebuild: `holders[i]` are the nodes holding surviving piece i).
    pub fn one_of_each(holders: &[Vec<NodeId>]) -> Self {
        Demand {
            groups: holders
                .iter()
                .map(|h| Group {
                    candidates: h.clone(),
                    count: 1,
                })
                .collect(),
            avoid: Vec::new(),
            avoid_links: Vec::new(),
        }
    }

    /// The same demand, not using `nodes` (e.g. the relay or data node that failed during a write).
    pub fn avoiding(mut self, nodes: &[NodeId]) -> Self {
        self.avoid.extend_from_slice(nodes);
        self
    }

    /// The same demand, not using `links` (links that failed during a write).
    pub fn avoiding_links(mut self, links: &[LinkId]) -> Self {
        self.avoid_links.extend_from_slice(links);
        self
    }
}

/// One link of a tree: `parent` is nearer the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeEdge {
    /// The end nearer the root.
    pub parent: NodeId,
    /// The end nearer the leaves.
    pub child: NodeId,
    /// The topology link.
    pub link: LinkId,
}

/// A tree rooted at one node. Invariants (checked by [`Tree::check`], held by every tree this module
/// returns): every edge is a topology link; every node but the root has exactly one parent and is
/// reachable from the root (so: no cycles, each node at most once); every interior node other than the
/// root is a relay; every leaf is a target; no node has more tree links than its `degree_max`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    root: NodeId,
    flow: Flow,
    /// In the order the greedy added them (parents before children).
    edges: Vec<TreeEdge>,
    /// The data nodes reached, in the order the greedy reached them.
    targets: Vec<NodeId>,
}

/// Why no tree was built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TreeError {
    /// A node id does not belong to the topology.
    #[error("node #{0} is not in the topology")]
    UnknownNode(usize),
    /// A link id does not belong to the topology.
    #[error("link #{0} is not in the topology")]
    UnknownLink(usize),
    /// The demand asks for nothing.
    #[error("the demand is empty: a tree needs at least one data node to reach")]
    EmptyDemand,
    /// A target is not a data node.
    #[error("{name:?} is a {role}, not a data node: only data nodes are tree targets")]
    NotADataNode {
        /// The node.
        name: String,
        /// Its role.
        role: &'static str,
    },
    /// The root is among the targets.
    #[error("{0:?} is both the root and a target (count the root's own copy outside the tree)")]
    RootIsTarget(String),
    /// A node appears twice in the demand.
    #[error("{0:?} appears twice in the demand (a node can serve one group once)")]
    DuplicateTarget(String),
    /// A group asks for more members than it has, or for none.
    #[error("group {group} asks for {count} of {candidates} candidates")]
    BadCount {
        /// Index of the group.
        group: usize,
        /// Count asked.
        count: usize,
        /// Candidates given.
        candidates: usize,
    },
    /// The greedy could not reach every group.
    #[error("{0}")]
    Unreachable(Unreachable),
}

/// Details of a failed tree: which groups were left short and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreachable {
    /// For each short group: its index, the names of its candidates, how many it still needs.
    pub short: Vec<(usize, Vec<String>, usize)>,
    /// Candidates of short groups with no path from the root through relays at all.
    pub disconnected: Vec<String>,
    /// Nodes of the greedy's partial tree at their degree limit (they blocked the rest).
    pub full: Vec<String>,
    /// The nodes and links the demand avoids (failed ones), as named in the topology
    /// (`"edge1"`, `"core–edge1"`); empty when the demand avoids nothing.
    pub avoided: Vec<String>,
    /// The search stopped before it was complete (its budget of [`SEARCH_STEPS_MAX`] steps spent, or
    /// backtracking off): a tree may exist that it did not find. Otherwise no tree within the limits
    /// exists.
    pub exhausted: bool,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no tree within the degree limits reaches")?;
        for (i, (group, names, need)) in self.short.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(
                f,
                "{sep}group {group} ({need} more of {})",
                names.join(", ")
            )?;
        }
        if !self.disconnected.is_empty() {
            write!(
                f,
                "; not connected to the root through relays{}: {}",
                if self.avoided.is_empty() {
                    ""
                } else {
                    " without the avoided ones"
                },
                self.disconnected.join(", ")
            )?;
        }
        if !self.avoided.is_empty() {
            write!(f, "; avoided: {}", self.avoided.join(", "))?;
        }
        if !self.full.is_empty() {
            write!(f, "; at their degree limit: {}", self.full.join(", "))?;
        }
        if self.exhausted {
            write!(f, " (search stopped after {SEARCH_STEPS_MAX} steps)")?;
        }
        Ok(())
    }
}

/// A replication tree for one write: rooted at the writer, data flowing down, reaching the demand.
pub fn replication_tree(
    topology: &Topology,
    root: NodeId,
    demand: &Demand,
) -> Result<Tree, TreeError> {
    build(topology, root, demand, Flow::Down)
}

/// A parity tree for one rebuild: rooted at the rebuilding node, data flowing up, reaching one holder
/// of each surviving piece; relays XOR their children's streams, so each tree link carries one stream.
pub fn parity_tree(topology: &Topology, root: NodeId, demand: &Demand) -> Result<Tree, TreeError> {
    build(topology, root, demand, Flow::Up)
}

/// Free bandwidth of `link` in the direction data flows between `parent` and `child`.
pub fn free_mbit(topology: &Topology, flow: Flow, parent: NodeId, link: LinkId) -> f64 {
    let l = topology.link(link);
    match flow {
        Flow::Down => l.free_mbit_from(parent),
        Flow::Up => l.free_mbit_from(l.other(parent)),
    }
}

fn degree_room(topology: &Topology, node: NodeId, used: u32) -> bool {
    topology.node(node).degree_max.is_none_or(|max| used < max)
}

/// A relay that can still forward: it needs a parent link and at least one child link.
fn can_forward(topology: &Topology, node: NodeId) -> bool {
    topology.forwards(node) && topology.node(node).degree_max.is_none_or(|max| max >= 2)
}

/// The choice order of frontier links: most free bandwidth first (least utilised), then the shallower
/// tree (fewer hops from the root), then the parent's name, then the child's name. Names are unique,
/// so this is a total order and the tree does not depend on declaration order.
struct Candidate {
    free_mbit: f64,
    depth: u32,
    parent: NodeId,
    child: NodeId,
    link: LinkId,
}

fn better(topology: &Topology, x: &Candidate, y: &Candidate) -> bool {
    let order = y
        .free_mbit
        .total_cmp(&x.free_mbit)
        .then(x.depth.cmp(&y.depth))
        .then_with(|| topology.name(x.parent).cmp(topology.name(y.parent)))
        .then_with(|| topology.name(x.child).cmp(topology.name(y.child)));
    order == Ordering::Less
}

fn validate(
    topology: &Topology,
    root: NodeId,
    demand: &Demand,
) -> Result<Vec<Option<usize>>, TreeError> {
    if !topology.contains(root) {
        return Err(TreeError::UnknownNode(root.index()));
    }
    if demand.groups.iter().all(|g| g.count == 0) {
        return Err(TreeError::EmptyDemand);
    }
    let mut group_of = vec![None; topology.nodes().len()];
    for (g, group) in demand.groups.iter().enumerate() {
        if group.count == 0 || group.count > group.candidates.len() {
            return Err(TreeError::BadCount {
                group: g,
                count: group.count,
                candidates: group.candidates.len(),
            });
        }
        for &c in &group.candidates {
            if !topology.contains(c) {
                return Err(TreeError::UnknownNode(c.index()));
            }
            let node = topology.node(c);
            if node.role != Role::Node {
                return Err(TreeError::NotADataNode {
                    name: node.name.clone(),
                    role: node.role.as_str(),
                });
            }
            if c == root {
                return Err(TreeError::RootIsTarget(node.name.clone()));
            }
            if group_of[c.index()].replace(g).is_some() {
                return Err(TreeError::DuplicateTarget(node.name.clone()));
            }
        }
    }
    Ok(group_of)
}

/// The most steps one tree search takes (a greedy step or an undo; each costs one pass over the nodes
/// and links): the bound on the work per tree, reached only when the limits leave no easy tree.
pub const SEARCH_STEPS_MAX: u32 = 50_000;

fn build(
    topology: &Topology,
    root: NodeId,
    demand: &Demand,
    flow: Flow,
) -> Result<Tree, TreeError> {
    tree_with_budget(topology, root, demand, flow, SEARCH_STEPS_MAX, true)
}

/// The search state: the tree grown so far and the links ruled out by backtracking.
struct Search<'a> {
    topology: &'a Topology,
    demand: &'a Demand,
    root: NodeId,
    flow: Flow,
    group_of: Vec<Option<usize>>,
    in_tree: Vec<bool>,
    depth: Vec<u32>,
    degree: Vec<u32>,
    reached: Vec<usize>,
    forbidden: Vec<bool>,
    avoided: Vec<bool>,
    /// Links the demand avoids (unlike `forbidden`, never undone by backtracking).
    link_avoided: Vec<bool>,
    edges: Vec<TreeEdge>,
    targets: Vec<NodeId>,
}

impl Search<'_> {
    fn satisfied(&self) -> bool {
        self.reached
            .iter()
            .zip(&self.demand.groups)
            .all(|(r, g)| *r >= g.count)
    }

    fn open(&self, node: NodeId) -> bool {
        !self.in_tree[node.index()]
            && !self.avoided[node.index()]
            && self.group_of[node.index()]
                .is_some_and(|g| self.reached[g] < self.demand.groups[g].count)
    }

    fn can_parent(&self, node: NodeId) -> bool {
        self.in_tree[node.index()]
            && (node == self.root || self.topology.forwards(node))
            && degree_room(self.topology, node, self.degree[node.index()])
    }

    /// Relays outside the tree with a path of such relays (over links not ruled out) to an open target:
    /// the only relays worth adding. Also returns, per group, how many open candidates the tree could
    /// still reach ignoring degree limits beyond its own nodes (a relaxation: if even that is short, the
    /// branch is dead).
    fn useful_and_feasible(&self) -> (Vec<bool>, bool) {
        let n = self.in_tree.len();
        let topology = self.topology;
        let mut useful = vec![false; n];
        let mut queue: VecDeque<NodeId> = (0..n)
            .map(|i| NodeId(i as u32))
            .filter(|&v| self.open(v))
            .collect();
        while let Some(x) = queue.pop_front() {
            for (link, y) in topology.neighbours(x) {
                if !useful[y.index()]
                    && !self.avoided[y.index()]
                    && !self.forbidden[link.index()]
                    && !self.link_avoided[link.index()]
                    && !self.in_tree[y.index()]
                    && can_forward(topology, y)
                {
                    useful[y.index()] = true;
                    queue.push_back(y);
                }
            }
        }
        // Relaxation: from the tree's nodes with room, through useful relays, count open targets.
        let mut seen = vec![false; n];
        let mut queue: VecDeque<NodeId> = (0..n)
            .map(|i| NodeId(i as u32))
            .filter(|&v| self.can_parent(v))
            .collect();
        let mut reachable = self.reached.clone();
        while let Some(x) = queue.pop_front() {
            for (link, y) in topology.neighbours(x) {
                if seen[y.index()]
                    || self.forbidden[link.index()]
                    || self.link_avoided[link.index()]
                    || self.in_tree[y.index()]
                {
                    continue;
                }
                if self.open(y) {
                    seen[y.index()] = true;
                    reachable[self.group_of[y.index()].expect("open targets have a group")] += 1;
                } else if useful[y.index()] {
                    seen[y.index()] = true;
                    queue.push_back(y);
                }
            }
        }
        let feasible = reachable
            .iter()
            .zip(&self.demand.groups)
            .all(|(r, g)| *r >= g.count);
        (useful, feasible)
    }

    /// The best link to add next (see [`better`]), or None at a dead end.
    fn best(&self) -> Option<Candidate> {
        let (useful, feasible) = self.useful_and_feasible();
        if !feasible {
            return None;
        }
        let topology = self.topology;
        let mut best: Option<Candidate> = None;
        for parent in (0..self.in_tree.len()).map(|i| NodeId(i as u32)) {
            if !self.can_parent(parent) {
                continue;
            }
            for (link, child) in topology.neighbours(parent) {
                let c = child.index();
                if self.in_tree[c]
                    || self.forbidden[link.index()]
                    || self.link_avoided[link.index()]
                    || !(self.open(child) || useful[c])
                {
                    continue;
                }
                let candidate = Candidate {
                    free_mbit: free_mbit(topology, self.flow, parent, link),
                    depth: self.depth[parent.index()] + 1,
                    parent,
                    child,
                    link,
                };
                if best
                    .as_ref()
                    .is_none_or(|b| better(topology, &candidate, b))
                {
                    best = Some(candidate);
                }
            }
        }
        best
    }

    fn add(&mut self, c: &Candidate) {
        let (p, v) = (c.parent.index(), c.child.index());
        self.in_tree[v] = true;
        self.depth[v] = c.depth;
        self.degree[p] += 1;
        self.degree[v] += 1;
        self.edges.push(TreeEdge {
            parent: c.parent,
            child: c.child,
            link: c.link,
        });
        if let Some(g) = self.group_of[v] {
            self.reached[g] += 1;
            self.targets.push(c.child);
        }
    }

    fn undo_add(&mut self, c: &Candidate) {
        let (p, v) = (c.parent.index(), c.child.index());
        let last = self.edges.pop().expect("undo follows add");
        debug_assert_eq!(last.link, c.link);
        self.in_tree[v] = false;
        self.degree[p] -= 1;
        self.degree[v] -= 1;
        if let Some(g) = self.group_of[v] {
            self.reached[g] -= 1;
            self.targets.pop();
        }
    }
}

/// [`replication_tree`] / [`parity_tree`] with an explicit budget of steps, and with or without
/// backtracking (without: the greedy alone, for comparison).
///
/// The greedy takes the best admissible link each step. At a dead end (no admissible link, or the
/// groups still short cannot be reached even ignoring the limits of nodes outside the tree) it
/// backtracks: the latest added link is ruled out instead, and the greedy continues. Branching on
/// "use this link / never use it" visits each tree once, so with enough budget the search finds a
/// tree whenever one exists; the first tree found is the greedy's whenever the greedy succeeds.
pub fn tree_with_budget(
    topology: &Topology,
    root: NodeId,
    demand: &Demand,
    flow: Flow,
    steps_max: u32,
    backtrack: bool,
) -> Result<Tree, TreeError> {
    let group_of = validate(topology, root, demand)?;
    let n = topology.nodes().len();
    let mut s = Search {
        topology,
        demand,
        root,
        flow,
        group_of,
        in_tree: vec![false; n],
        depth: vec![0; n],
        degree: vec![0; n],
        reached: vec![0; demand.groups.len()],
        forbidden: vec![false; topology.links().len()],
        avoided: vec![false; n],
        link_avoided: vec![false; topology.links().len()],
        edges: Vec::new(),
        targets: Vec::new(),
    };
    s.in_tree[root.index()] = true;
    for &v in &demand.avoid {
        if !topology.contains(v) {
            return Err(TreeError::UnknownNode(v.index()));
        }
        if v != root {
            s.avoided[v.index()] = true;
        }
    }
    for &l in &demand.avoid_links {
        if l.index() >= topology.links().len() {
            return Err(TreeError::UnknownLink(l.index()));
        }
        s.link_avoided[l.index()] = true;
    }
    // The choices taken, and whether each was turned into "ruled out" by backtracking.
    let mut stack: Vec<(Candidate, bool)> = Vec::new();
    let mut steps = 0u32;
    let mut first_dead_end: Option<Vec<TreeEdge>> = None;
    let exhausted = loop {
        if s.satisfied() {
            break false;
        }
        if steps >= steps_max {
            first_dead_end.get_or_insert_with(|| s.edges.clone());
            break true;
        }
        steps += 1;
        if let Some(c) = s.best() {
            s.add(&c);
            stack.push((c, false));
            continue;
        }
        first_dead_end.get_or_insert_with(|| s.edges.clone());
        if stack.iter().all(|(_, ruled_out)| *ruled_out) {
            break false;
        }
        if !backtrack {
            break true;
        }
        // Undo "rule out" choices, then turn the latest "add" into "rule out".
        loop {
            match stack.pop() {
                None => break,
                Some((c, true)) => s.forbidden[c.link.index()] = false,
                Some((c, false)) => {
                    s.undo_add(&c);
                    s.forbidden[c.link.index()] = true;
                    stack.push((c, true));
                    break;
                }
            }
        }
    };
    if !s.satisfied() {
        // Explain from the greedy's own dead end: the most telling partial tree.
        let edges = first_dead_end.unwrap_or_default();
        let mut reached = vec![0usize; demand.groups.len()];
        for e in &edges {
            if let Some(g) = s.group_of[e.child.index()] {
                reached[g] += 1;
            }
        }
        let short: Vec<usize> = (0..demand.groups.len())
            .filter(|&g| reached[g] < demand.groups[g].count)
            .collect();
        let mut why = explain(topology, root, demand, &short, &reached, &edges, &s);
        why.exhausted = exhausted;
        return Err(TreeError::Unreachable(why));
    }
    let mut edges = s.edges;
    let targets = s.targets;
    // Prune: repeatedly drop leaves that are not targets (relays that ended up leading nowhere).
    loop {
        let mut children = vec![0u32; n];
        for e in &edges {
            children[e.parent.index()] += 1;
        }
        let before = edges.len();
        edges.retain(|e| children[e.child.index()] > 0 || s.group_of[e.child.index()].is_some());
        if edges.len() == before {
            break;
        }
    }
    let tree = Tree {
        root,
        flow,
        edges,
        targets,
    };
    debug_assert_eq!(tree.check(topology), Ok(()));
    Ok(tree)
}

fn explain(
    topology: &Topology,
    root: NodeId,
    demand: &Demand,
    short: &[usize],
    reached: &[usize],
    edges: &[TreeEdge],
    s: &Search<'_>,
) -> Unreachable {
    let n = topology.nodes().len();
    // Reachable from the root through relays, ignoring degree limits, without the avoided nodes and links.
    let mut seen = vec![false; n];
    seen[root.index()] = true;
    let mut queue = VecDeque::from([root]);
    while let Some(x) = queue.pop_front() {
        if x != root && !topology.forwards(x) {
            continue;
        }
        for (link, y) in topology.neighbours(x) {
            if !seen[y.index()] && !s.avoided[y.index()] && !s.link_avoided[link.index()] {
                seen[y.index()] = true;
                queue.push_back(y);
            }
        }
    }
    let mut degree = vec![0u32; n];
    for e in edges {
        degree[e.parent.index()] += 1;
        degree[e.child.index()] += 1;
    }
    let mut disconnected = Vec::new();
    let short = short
        .iter()
        .map(|&g| {
            let group = &demand.groups[g];
            let names = group
                .candidates
                .iter()
                .map(|&c| topology.name(c).to_string())
                .collect();
            disconnected.extend(
                group
                    .candidates
                    .iter()
                    .filter(|c| !seen[c.index()] && !s.avoided[c.index()])
                    .map(|&c| topology.name(c).to_string()),
            );
            (g, names, group.count - reached[g])
        })
        .collect();
    let full = (0..n)
        .map(|i| NodeId(i as u32))
        .filter(|&v| degree[v.index()] > 0 || v == root)
        .filter(|&v| !degree_room(topology, v, degree[v.index()]))
        .map(|v| topology.name(v).to_string())
        .collect();
    let mut avoided: Vec<String> = (0..n)
        .filter(|&i| s.avoided[i])
        .map(|i| topology.name(NodeId(i as u32)).to_string())
        .collect();
    avoided.extend(
        topology
            .links()
            .iter()
            .enumerate()
            .filter(|(i, _)| s.link_avoided[*i])
            .map(|(_, l)| format!("{}–{}", topology.name(l.a), topology.name(l.b))),
    );
    Unreachable {
        short,
        disconnected,
        full,
        avoided,
        exhausted: false,
    }
}

/// What a node does in a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duty {
    /// Sends the object (replication) or receives the rebuilt stream (parity).
    Root,
    /// Forwards one stream to several children (replication, more than one child).
    Duplicate,
    /// Combines several children's streams into one by XOR (parity, more than one child).
    Xor,
    /// Forwards one stream unchanged (one child).
    Forward,
    /// A data node at the end: stores the copy (replication) or sends its piece (parity).
    Leaf,
}

impl Tree {
    pub(crate) fn from_parts(
        root: NodeId,
        flow: Flow,
        edges: Vec<TreeEdge>,
        targets: Vec<NodeId>,
    ) -> Tree {
        Tree {
            root,
            flow,
            edges,
            targets,
        }
    }

    /// The root (the writer, or the rebuilding node).
    pub fn root(&self) -> NodeId {
        self.root
    }

    /// Which way data flows.
    pub fn flow(&self) -> Flow {
        self.flow
    }

    /// The tree's links, parents before children.
    pub fn edges(&self) -> &[TreeEdge] {
        &self.edges
    }

    /// The data nodes reached, in the order chosen (for [`Demand::any`]: best-connected first).
    pub fn targets(&self) -> &[NodeId] {
        &self.targets
    }

    /// The root and every node below it, root first, parents before children.
    pub fn nodes(&self) -> Vec<NodeId> {
        std::iter::once(self.root)
            .chain(self.edges.iter().map(|e| e.child))
            .collect()
    }

    /// The edge linking `node` to its parent (None for the root or a node not in the tree).
    pub fn parent_edge(&self, node: NodeId) -> Option<&TreeEdge> {
        self.edges.iter().find(|e| e.child == node)
    }

    /// The children of `node`, ordered by name (the order a relay opens its streams).
    pub fn children(&self, topology: &Topology, node: NodeId) -> Vec<NodeId> {
        let mut children: Vec<NodeId> = self
            .edges
            .iter()
            .filter(|e| e.parent == node)
            .map(|e| e.child)
            .collect();
        children.sort_by(|a, b| topology.name(*a).cmp(topology.name(*b)));
        children
    }

    /// What `node` does in this tree (None when it is not in the tree).
    pub fn duty(&self, node: NodeId) -> Option<Duty> {
        if node == self.root {
            return Some(Duty::Root);
        }
        self.parent_edge(node)?;
        let children = self.edges.iter().filter(|e| e.parent == node).count();
        Some(match (children, self.flow) {
            (0, _) => Duty::Leaf,
            (1, _) => Duty::Forward,
            (_, Flow::Down) => Duty::Duplicate,
            (_, Flow::Up) => Duty::Xor,
        })
    }

    /// The free bandwidth of the tree's narrowest link in the flow direction, Mbit/s (the rate the
    /// whole tree can stream at, other traffic unchanged).
    pub fn bottleneck_free_mbit(&self, topology: &Topology) -> f64 {
        self.edges
            .iter()
            .map(|e| free_mbit(topology, self.flow, e.parent, e.link))
            .fold(f64::INFINITY, f64::min)
    }

    /// One line for status output and logs: `client → core → { edge1 → { n1, n2 }, edge2 → n4 }`
    /// (children by name; parity trees read the same way, data flowing towards the root).
    pub fn render(&self, topology: &Topology) -> String {
        fn below(tree: &Tree, topology: &Topology, node: NodeId, out: &mut String) {
            out.push_str(topology.name(node));
            let children = tree.children(topology, node);
            match children.len() {
                0 => {}
                1 => {
                    out.push_str(" → ");
                    below(tree, topology, children[0], out);
                }
                _ => {
                    out.push_str(" → { ");
                    for (i, c) in children.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        below(tree, topology, *c, out);
                    }
                    out.push_str(" }");
                }
            }
        }
        let mut out = String::new();
        below(self, topology, self.root, &mut out);
        out
    }

    /// Edges as `(parent name, child name)`, for comparing trees across topologies and for display.
    pub fn named_edges(&self, topology: &Topology) -> Vec<(String, String)> {
        self.edges
            .iter()
            .map(|e| {
                (
                    topology.name(e.parent).to_string(),
                    topology.name(e.child).to_string(),
                )
            })
            .collect()
    }

    /// Check the structural invariants (see [`Tree`]); `Err` names the first one broken.
    pub fn check(&self, topology: &Topology) -> Result<(), String> {
        let n = topology.nodes().len();
        let mut parent_count = vec![0u32; n];
        let mut degree = vec![0u32; n];
        let mut children = vec![0u32; n];
        for e in &self.edges {
            if topology.link_between(e.parent, e.child) != Some(e.link) {
                return Err(format!(
                    "edge {}–{} is not that topology link",
                    topology.name(e.parent),
                    topology.name(e.child)
                ));
            }
            parent_count[e.child.index()] += 1;
            degree[e.parent.index()] += 1;
            degree[e.child.index()] += 1;
            children[e.parent.index()] += 1;
        }
        if parent_count[self.root.index()] > 0 {
            return Err("the root has a parent".into());
        }
        if let Some(v) = (0..n).find(|&v| parent_count[v] > 1) {
            return Err(format!(
                "{} appears more than once",
                topology.nodes()[v].name
            ));
        }
        // Reachability from the root in the parent → child order: with one parent each and every
        // node reached, the edges form a tree (no cycles).
        let mut reached = vec![false; n];
        reached[self.root.index()] = true;
        for e in &self.edges {
            if !reached[e.parent.index()] {
                return Err(format!(
                    "{} is added before its parent {} is reached (cycle or detached part)",
                    topology.name(e.child),
                    topology.name(e.parent)
                ));
            }
            reached[e.child.index()] = true;
        }
        for v in (0..n).map(|i| NodeId(i as u32)) {
            let node = topology.node(v);
            if let Some(max) = node.degree_max {
                if degree[v.index()] > max {
                    return Err(format!(
                        "{} carries {} tree links, limit {max}",
                        node.name,
                        degree[v.index()]
                    ));
                }
            }
            if v != self.root && children[v.index()] > 0 && !topology.forwards(v) {
                return Err(format!(
                    "{} ({}) forwards but is not a relay",
                    node.name,
                    node.role.as_str()
                ));
            }
            let is_leaf =
                v != self.root && parent_count[v.index()] == 1 && children[v.index()] == 0;
            if is_leaf && !self.targets.contains(&v) {
                return Err(format!("leaf {} is not a target", node.name));
            }
        }
        for t in &self.targets {
            if !reached[t.index()] || *t == self.root {
                return Err(format!("target {} is not reached", topology.name(*t)));
            }
        }
        Ok(())
    }
}
