//! Property tests of the tree algorithm on random topologies (seeded, see `random.rs`): every required
//! leaf reached, degree limits honoured, no cycles, each node at most once, only relays forward, pruned
//! leaves not required, the same tree whatever the declaration order, the greedy's tree whenever the
//! greedy alone succeeds, and — without degree limits — always a tree, each target on a widest path,
//! never slower (model) than a plain MST that forwards only at relays.

use permafrost_topology::baseline::plain_mst;
use permafrost_topology::random::{random_topology, RandomShape, SplitMix};
use permafrost_topology::tree_shape;
use permafrost_topology::{
    parity_tree, replication_tree, tree, tree_with_budget, Demand, Flow, LinkId, NodeId, Role,
    Topology, Tree, TreeError,
};
use proptest::prelude::*;

fn shape() -> impl Strategy<Value = (u64, RandomShape)> {
    (
        any::<u64>(),
        1usize..9,
        2usize..16,
        0usize..10,
        any::<bool>(),
    )
        .prop_map(|(seed, relays, nodes, extra_links, degree_limits)| {
            (
                seed,
                RandomShape {
                    relays,
                    nodes,
                    extra_links,
                    degree_limits,
                },
            )
        })
}

/// The same network declared in another order (nodes and links shuffled, link ends swapped).
fn shuffled(t: &Topology, seed: u64) -> Topology {
    let mut rng = SplitMix(seed ^ 0x5eed);
    let mut nodes: Vec<usize> = (0..t.nodes().len()).collect();
    let mut links: Vec<usize> = (0..t.links().len()).collect();
    for v in [&mut nodes, &mut links] {
        for i in (1..v.len()).rev() {
            let j = rng.below(i + 1);
            v.swap(i, j);
        }
    }
    let mut out = Topology::new();
    for i in nodes {
        let n = &t.nodes()[i];
        out.add_node(&n.name, n.role, n.degree_max).unwrap();
    }
    for i in links {
        let l = &t.links()[i];
        let (a, b) = (t.name(l.a), t.name(l.b));
        if rng.below(2) == 0 {
            out.add_link(a, b, l.capacity_mbit, l.used_mbit).unwrap();
        } else {
            out.add_link(b, a, l.capacity_mbit, [l.used_mbit[1], l.used_mbit[0]])
                .unwrap();
        }
    }
    out
}

fn pick(rng: &mut SplitMix, from: &[NodeId], k: usize) -> Vec<NodeId> {
    let mut v = from.to_vec();
    for i in (1..v.len()).rev() {
        let j = rng.below(i + 1);
        v.swap(i, j);
    }
    v.truncate(k);
    v
}

/// Assert everything a returned tree promises for `demand`.
fn assert_valid(t: &Topology, tree: &Tree, demand: &Demand) {
    tree.check(t)
        .unwrap_or_else(|e| panic!("{e}: {:?}", tree.named_edges(t)));
    for (g, group) in demand.groups.iter().enumerate() {
        let reached = group
            .candidates
            .iter()
            .filter(|c| tree.targets().contains(c))
            .count();
        assert_eq!(
            reached, group.count,
            "group {g} reached {reached} of {}",
            group.count
        );
    }
    let wanted: usize = demand.groups.iter().map(|g| g.count).sum();
    assert_eq!(tree.targets().len(), wanted, "no target beyond the demand");
    let nodes = tree.nodes();
    assert_eq!(
        nodes.len(),
        tree.edges().len() + 1,
        "a tree: nodes = edges + 1"
    );
}

/// Widest (max-min free bandwidth) path value from the root to every node, forwarding only at relays.
fn widest(t: &Topology, root: NodeId, flow: Flow) -> Vec<f64> {
    let n = t.nodes().len();
    let mut width = vec![f64::NEG_INFINITY; n];
    width[root.index()] = f64::INFINITY;
    for _ in 0..n {
        for l in t.links() {
            for (x, y) in [(l.a, l.b), (l.b, l.a)] {
                if x != root && !t.forwards(x) {
                    continue;
                }
                let free = match flow {
                    Flow::Down => l.free_mbit_from(x),
                    Flow::Up => l.free_mbit_from(y),
                };
                let w = width[x.index()].min(free);
                if y != root && w > width[y.index()] {
                    width[y.index()] = w;
                }
            }
        }
    }
    width
}

fn path_width(t: &Topology, tree: &Tree, mut node: NodeId) -> f64 {
    let mut w = f64::INFINITY;
    while let Some(e) = tree.parent_edge(node) {
        w = w.min(tree::free_mbit(t, tree.flow(), e.parent, e.link));
        node = e.parent;
    }
    w
}

/// Without degree limits: can the network minus the avoided nodes and links carry `demand` from `root`?
/// (Per group: enough non-avoided candidates next to the root or to a relay reachable from the root
/// through non-avoided relays and links.)
fn feasible_avoiding(t: &Topology, root: NodeId, demand: &Demand) -> bool {
    let n = t.nodes().len();
    let avoided = |v: NodeId| demand.avoid.contains(&v);
    let link_avoided = |a: NodeId, b: NodeId| {
        demand
            .avoid_links
            .contains(&t.link_between(a, b).expect("neighbours share a link"))
    };
    let mut seen = vec![false; n];
    seen[root.index()] = true;
    let mut queue = vec![root];
    let mut reached = vec![false; n];
    while let Some(x) = queue.pop() {
        for (_, y) in t.neighbours(x) {
            if seen[y.index()] || avoided(y) || link_avoided(x, y) {
                continue;
            }
            if t.node(y).role == Role::Node {
                reached[y.index()] = true;
            } else if t.forwards(y) {
                seen[y.index()] = true;
                queue.push(y);
            }
        }
    }
    demand.groups.iter().all(|g| {
        g.candidates
            .iter()
            .filter(|c| reached[c.index()] && !avoided(**c))
            .count()
            >= g.count
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn replication_trees_keep_every_promise((seed, shape) in shape(), k_pick in 1usize..6, any_k in any::<bool>()) {
        let t = random_topology(seed, shape);
        let client = t.node_id("client").unwrap();
        let data = t.with_role(Role::Node);
        let k = k_pick.min(data.len());
        let mut rng = SplitMix(seed);
        let demand = if any_k { Demand::any(&data, k) } else { Demand::exact(&pick(&mut rng, &data, k)) };
        match replication_tree(&t, client, &demand) {
            Ok(tree) => {
                assert_valid(&t, &tree, &demand);
                // Same input → same tree, whatever the declaration order.
                let again = replication_tree(&t, client, &demand).unwrap();
                prop_assert_eq!(&again, &tree);
                let t2 = shuffled(&t, seed);
                let map = |ids: &[NodeId]| ids.iter().map(|&n| t2.node_id(t.name(n)).unwrap()).collect::<Vec<_>>();
                let demand2 = Demand {
                    groups: demand.groups.iter().map(|g| permafrost_topology::Group {
                        candidates: map(&g.candidates),
                        count: g.count,
                    }).collect(),
                    avoid: vec![],
                    avoid_links: vec![],
                };
                let tree2 = replication_tree(&t2, t2.node_id("client").unwrap(), &demand2).unwrap();
                prop_assert_eq!(tree2.named_edges(&t2), tree.named_edges(&t));
                // The search returns the greedy's tree whenever the greedy alone finds one.
                if let Ok(greedy) = tree_with_budget(&t, client, &demand, Flow::Down, u32::MAX, false) {
                    prop_assert_eq!(&greedy, &tree);
                }
                if !shape.degree_limits {
                    // Without limits each target hangs on a widest path from the root.
                    let best = widest(&t, client, Flow::Down);
                    for &target in tree.targets() {
                        prop_assert_eq!(path_width(&t, &tree, target), best[target.index()]);
                    }
                    // So a plain MST to the same targets that forwards only at relays is never faster.
                    let mst = plain_mst(&t, client, tree.targets(), Flow::Down).unwrap();
                    if mst.check(&t).is_ok() {
                        let ours = tree_shape(&t, &tree, 1 << 30).time_s;
                        let theirs = tree_shape(&t, &mst, 1 << 30).time_s;
                        prop_assert!(ours <= theirs, "tree {} s, plain MST {} s", ours, theirs);
                    }
                }
            }
            Err(TreeError::Unreachable(u)) => {
                // Random topologies are connected, so only degree limits can leave a tree short.
                prop_assert!(shape.degree_limits, "no limits, yet no tree: {}", u);
                prop_assert!(u.disconnected.is_empty());
                prop_assert!(!u.exhausted, "small topologies are searched completely: {}", u);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
        // A retry avoiding a relay (as after a relay failed mid-write) never uses it.
        let avoided = t.with_role(Role::Relay)[rng.below(shape.relays.max(1))];
        match replication_tree(&t, client, &demand.clone().avoiding(&[avoided])) {
            Ok(tree) => {
                assert_valid(&t, &tree, &demand);
                prop_assert!(tree.duty(avoided).is_none(), "avoided relay used");
            }
            Err(TreeError::Unreachable(u)) => {
                prop_assert!(!u.exhausted, "{}", u);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }

    /// A retry after failures: whatever relays, data nodes and links it must avoid, the tree never uses
    /// one of them; without degree limits it exists exactly when the rest of the network can carry the
    /// demand, and otherwise the error names the groups left short, the unreachable candidates and
    /// every avoided element.
    #[test]
    fn retry_trees_avoid_failed_elements((seed, shape) in shape(), k_pick in 1usize..6, any_k in any::<bool>(),
                                          node_odds in 2usize..8, link_odds in 2usize..10) {
        let t = random_topology(seed, shape);
        let client = t.node_id("client").unwrap();
        let data = t.with_role(Role::Node);
        let k = k_pick.min(data.len());
        let mut rng = SplitMix(seed ^ 0xfa11);
        let demand = if any_k { Demand::any(&data, k) } else { Demand::exact(&pick(&mut rng, &data, k)) };
        let avoid_nodes: Vec<NodeId> = t
            .nodes()
            .iter()
            .filter_map(|n| t.node_id(&n.name))
            .filter(|&v| v != client && rng.below(node_odds) == 0)
            .collect();
        let avoid_links: Vec<LinkId> = t
            .links()
            .iter()
            .map(|l| t.link_between(l.a, l.b).unwrap())
            .filter(|_| rng.below(link_odds) == 0)
            .collect();
        let demand = demand.avoiding(&avoid_nodes).avoiding_links(&avoid_links);
        let feasible = feasible_avoiding(&t, client, &demand);
        match replication_tree(&t, client, &demand) {
            Ok(tree) => {
                assert_valid(&t, &tree, &demand);
                prop_assert!(feasible, "a tree the network minus the avoided cannot carry");
                for &v in &avoid_nodes {
                    prop_assert!(tree.duty(v).is_none(), "avoided node {} used", t.name(v));
                }
                for e in tree.edges() {
                    prop_assert!(!avoid_links.contains(&e.link), "avoided link {}–{} used",
                        t.name(e.parent), t.name(e.child));
                }
            }
            Err(TreeError::Unreachable(u)) => {
                prop_assert!(!u.exhausted, "{}", u);
                prop_assert!(!feasible || shape.degree_limits, "no limits and feasible, yet no tree: {}", u);
                prop_assert!(!u.short.is_empty(), "{}", u);
                prop_assert_eq!(u.avoided.len(), avoid_nodes.len() + avoid_links.len());
                let text = u.to_string();
                for &v in &avoid_nodes {
                    prop_assert!(text.contains(t.name(v)), "{} not named in {}", t.name(v), text);
                }
                if !shape.degree_limits {
                    // Some short group's candidate is named as unreachable, or the group lacks candidates.
                    prop_assert!(!u.disconnected.is_empty()
                        || demand.groups.iter().any(|g| g.candidates.iter().filter(|c| !avoid_nodes.contains(c)).count() < g.count),
                        "{}", text);
                }
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }

    #[test]
    fn parity_trees_keep_every_promise((seed, shape) in shape(), pieces in 2usize..6) {
        let t = random_topology(seed, shape);
        let data = t.with_role(Role::Node);
        prop_assume!(data.len() >= 3);
        let mut rng = SplitMix(seed);
        let order = pick(&mut rng, &data, data.len());
        let root = order[0];
        // Survivors: up to `pieces` pieces, each held by one or two nodes.
        let mut holders: Vec<Vec<NodeId>> = Vec::new();
        let mut rest = order[1..].iter().copied();
        while holders.len() < pieces {
            let Some(first) = rest.next() else { break };
            let mut h = vec![first];
            if rng.below(2) == 0 {
                h.extend(rest.next());
            }
            holders.push(h);
        }
        let demand = Demand::one_of_each(&holders);
        match parity_tree(&t, root, &demand) {
            Ok(tree) => {
                assert_valid(&t, &tree, &demand);
                prop_assert_eq!(tree.flow(), Flow::Up);
                prop_assert_eq!(&parity_tree(&t, root, &demand).unwrap(), &tree);
                if !shape.degree_limits {
                    let best = widest(&t, root, Flow::Up);
                    for &target in tree.targets() {
                        prop_assert_eq!(path_width(&t, &tree, target), best[target.index()]);
                    }
                }
            }
            Err(TreeError::Unreachable(u)) => {
                // The root is a data node: it reaches others only through its relays.
                prop_assert!(shape.degree_limits, "no limits, yet no tree: {}", u);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}

const EXAMPLE: &str = include_str!("../../../docs/cluster-topology.toml");

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Bad input never panics: arbitrary text, and the example file with one line replaced, deleted
    /// or duplicated, either parses into a valid topology or is refused with a message.
    #[test]
    fn no_topology_text_makes_the_parser_panic(
        junk in "\\PC{0,200}",
        line in 0usize..200,
        edit in 0u8..3,
    ) {
        let _ = Topology::from_toml_str(&junk);
        let mut lines: Vec<&str> = EXAMPLE.lines().collect();
        let i = line % lines.len();
        match edit {
            0 => lines[i] = &junk,
            1 => { lines.remove(i); }
            _ => lines.insert(i, lines[i]),
        }
        let text = lines.join("\n");
        match Topology::from_toml_str(&text) {
            Ok(t) => prop_assert!(t.links().iter().all(|l| l.capacity_mbit > 0.0)),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
