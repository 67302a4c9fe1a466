//! Replication and parity trees on small hand-made networks and on the test shape
//! (`docs/cluster-topology.toml`), with the model shapes the benchmark will be compared against.

use permafrost_topology::{
    fan_out_shape, parity_tree, replication_tree, tree_shape, tree_with_budget, Demand, Duty, Flow,
    NodeId, Role, Topology, TreeError, SEARCH_STEPS_MAX,
};

const EXAMPLE: &str = include_str!("../../../docs/cluster-topology.toml");
const OBJECT_BYTES: u64 = 256 << 20;

fn ids(t: &Topology, names: &[&str]) -> Vec<NodeId> {
    names.iter().map(|n| t.node_id(n).expect(n)).collect()
}

fn names(t: &Topology, nodes: &[NodeId]) -> Vec<String> {
    nodes.iter().map(|&n| t.name(n).to_string()).collect()
}

/// Build a topology from `(name, role, degree_max)` and `(a, b, capacity, [a→b, b→a])`.
fn net(nodes: &[(&str, Role, Option<u32>)], links: &[(&str, &str, f64, [f64; 2])]) -> Topology {
    let mut t = Topology::new();
    for (name, role, degree) in nodes {
        t.add_node(name, *role, *degree).unwrap();
    }
    for (a, b, cap, used) in links {
        t.add_link(a, b, *cap, *used).unwrap();
    }
    t
}

#[test]
fn the_example_topology_parses_and_matches_the_test_shape() {
    let t = Topology::from_toml_str(EXAMPLE).unwrap();
    assert_eq!(t.with_role(Role::Client).len(), 1);
    assert_eq!(t.with_role(Role::Relay).len(), 3);
    assert!(t.with_role(Role::Node).len() >= 4);
    assert!(t.links().iter().all(|l| l.capacity_mbit == 200.0));
}

#[test]
fn a_replication_tree_carries_the_object_over_the_uplink_once_and_stays_flat_as_k_grows() {
    let t = Topology::from_toml_str(EXAMPLE).unwrap();
    let client = t.node_id("client").unwrap();
    let uplink = t.link_between(client, t.node_id("core").unwrap()).unwrap();
    let data = t.with_role(Role::Node);
    let one_copy_s = OBJECT_BYTES as f64 * 8.0 / 200e6;
    for k in 3..=5 {
        let tree = replication_tree(&t, client, &Demand::any(&data, k)).unwrap();
        tree.check(&t).unwrap();
        assert_eq!(tree.targets().len(), k);
        let shape = tree_shape(&t, &tree, OBJECT_BYTES);
        let fan_out = fan_out_shape(&t, client, tree.targets(), Flow::Down, OBJECT_BYTES).unwrap();
        let on_uplink = |s: &permafrost_topology::Shape| {
            s.loads
                .iter()
                .filter(|l| l.link == uplink)
                .map(|l| l.bytes)
                .sum::<u64>()
        };
        assert_eq!(
            on_uplink(&shape),
            OBJECT_BYTES,
            "k={k}: tree uplink carries it once"
        );
        assert_eq!(
            on_uplink(&fan_out),
            k as u64 * OBJECT_BYTES,
            "k={k}: fan-out k times"
        );
        assert!(
            (shape.time_s - one_copy_s).abs() < 1e-9,
            "k={k}: tree time is one copy's"
        );
        assert!(
            (fan_out.time_s - k as f64 * one_copy_s).abs() < 1e-9,
            "k={k}: fan-out k copies'"
        );
        assert_eq!(shape.max_link_bytes(), OBJECT_BYTES);
        // Edge relays with more than one child duplicate; the client forwards nothing.
        let edge1 = t.node_id("edge1").unwrap();
        assert_eq!(tree.duty(edge1), Some(Duty::Duplicate));
        assert_eq!(tree.duty(client), Some(Duty::Root));
    }
    let tree = replication_tree(&t, client, &Demand::any(&data, 4)).unwrap();
    assert_eq!(
        tree.render(&t),
        "client → core → { edge1 → { n1, n2, n3 }, edge2 → n4 }"
    );
}

#[test]
fn any_k_picks_best_connected_nodes_deterministically_by_name_on_ties() {
    let t = Topology::from_toml_str(EXAMPLE).unwrap();
    let client = t.node_id("client").unwrap();
    let data = t.with_role(Role::Node);
    let tree = replication_tree(&t, client, &Demand::any(&data, 4)).unwrap();
    // All links equal: one edge relay fills first (its degree limit allows three), then the other.
    assert_eq!(names(&t, tree.targets()), ["n1", "n2", "n3", "n4"]);
    // Load on edge1–n2 makes n2 the worst choice.
    let mut t2 = t.clone();
    let (edge1, n2) = (t2.node_id("edge1").unwrap(), t2.node_id("n2").unwrap());
    let l = t2.link_between(edge1, n2).unwrap();
    t2.set_used_mbit(l, edge1, 150.0);
    let tree = replication_tree(&t2, client, &Demand::any(&data, 4)).unwrap();
    let mut chosen = names(&t2, tree.targets());
    chosen.sort();
    assert_eq!(chosen, ["n1", "n3", "n4", "n5"]);
}

#[test]
fn a_parity_tree_gives_the_rebuilding_node_one_stream_whatever_the_group_size() {
    let t = Topology::from_toml_str(EXAMPLE).unwrap();
    let root = t.node_id("n6").unwrap();
    let edge2 = t.node_id("edge2").unwrap();
    let downlink = t.link_between(edge2, root).unwrap();
    let one_copy_s = OBJECT_BYTES as f64 * 8.0 / 200e6;
    for group in 3..=5usize {
        // Group n1..n<group>; n1 is lost; the survivors' pieces are combined at relays into n6.
        let survivors: Vec<Vec<NodeId>> = (2..=group)
            .map(|i| vec![t.node_id(&format!("n{i}")).unwrap()])
            .collect();
        let tree = parity_tree(&t, root, &Demand::one_of_each(&survivors)).unwrap();
        tree.check(&t).unwrap();
        assert_eq!(tree.flow(), Flow::Up);
        let shape = tree_shape(&t, &tree, OBJECT_BYTES);
        let naive = fan_out_shape(&t, root, tree.targets(), Flow::Up, OBJECT_BYTES).unwrap();
        let into_root = |s: &permafrost_topology::Shape| {
            s.loads
                .iter()
                .filter(|l| l.link == downlink && l.to == root)
                .map(|l| l.bytes)
                .sum::<u64>()
        };
        assert_eq!(
            into_root(&shape),
            OBJECT_BYTES,
            "group {group}: one stream in"
        );
        assert_eq!(into_root(&naive), (group as u64 - 1) * OBJECT_BYTES);
        assert!((shape.time_s - one_copy_s).abs() < 1e-9);
        assert!((naive.time_s - (group - 1) as f64 * one_copy_s).abs() < 1e-9);
        if group >= 4 {
            assert_eq!(tree.duty(edge2), Some(Duty::Xor));
        }
    }
}

#[test]
fn a_full_relay_is_bypassed_instead_of_overloaded() {
    let t = net(
        &[
            ("c", Role::Client, None),
            ("r1", Role::Relay, Some(2)),
            ("r2", Role::Relay, None),
            ("n1", Role::Node, None),
            ("n2", Role::Node, None),
        ],
        &[
            ("c", "r1", 200.0, [0.0; 2]),
            ("c", "r2", 100.0, [0.0; 2]),
            ("r1", "n1", 200.0, [0.0; 2]),
            ("r1", "n2", 200.0, [0.0; 2]),
            ("r2", "n2", 200.0, [0.0; 2]),
        ],
    );
    let [c, n1, n2] = ids(&t, &["c", "n1", "n2"])[..] else {
        unreachable!()
    };
    let tree = replication_tree(&t, c, &Demand::exact(&[n1, n2])).unwrap();
    tree.check(&t).unwrap();
    assert_eq!(
        tree.named_edges(&t),
        [("c", "r1"), ("r1", "n1"), ("c", "r2"), ("r2", "n2")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
}

#[test]
fn when_limits_leave_no_tree_the_error_names_the_short_group_and_the_full_node() {
    let t = net(
        &[
            ("c", Role::Client, Some(1)),
            ("r1", Role::Relay, None),
            ("r2", Role::Relay, None),
            ("n1", Role::Node, None),
            ("n2", Role::Node, None),
            ("n3", Role::Node, None),
        ],
        &[
            ("c", "r1", 200.0, [0.0; 2]),
            ("c", "r2", 200.0, [0.0; 2]),
            ("r1", "n1", 200.0, [0.0; 2]),
            ("r2", "n2", 200.0, [0.0; 2]),
        ],
    );
    let [c, n1, n2, n3] = ids(&t, &["c", "n1", "n2", "n3"])[..] else {
        unreachable!()
    };
    let e = replication_tree(&t, c, &Demand::exact(&[n1, n2])).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("group 1 (1 more of n2)"), "{text}");
    assert!(text.contains("at their degree limit: c"), "{text}");
    let e = replication_tree(&t, c, &Demand::exact(&[n3])).unwrap_err();
    assert!(
        e.to_string()
            .contains("not connected to the root through relays: n3"),
        "{e}"
    );
}

#[test]
fn free_bandwidth_decides_not_the_percentage_and_used_directions_count() {
    // c→r1 is a 10 Gbit/s link half used, c→r2 an idle 100 Mbit/s link: r1 has more room.
    let t = net(
        &[
            ("c", Role::Client, Some(1)),
            ("r1", Role::Relay, None),
            ("r2", Role::Relay, None),
            ("n1", Role::Node, None),
        ],
        &[
            ("c", "r1", 10_000.0, [5_000.0, 0.0]),
            ("c", "r2", 100.0, [0.0, 0.0]),
            ("r1", "n1", 1000.0, [0.0, 0.0]),
            ("r2", "n1", 1000.0, [0.0, 0.0]),
        ],
    );
    let [c, n1, r1] = ids(&t, &["c", "n1", "r1"])[..] else {
        unreachable!()
    };
    let tree = replication_tree(&t, c, &Demand::exact(&[n1])).unwrap();
    assert_eq!(tree.parent_edge(n1).unwrap().parent, r1);
    // A parity tree flows the other way: r1→c is idle, so it still wins; load that direction and
    // the tree moves to r2.
    let mut t2 = t.clone();
    let l = t2.link_between(c, r1).unwrap();
    t2.set_used_mbit(l, r1, 9_990.0);
    let tree = parity_tree(&t2, c, &Demand::exact(&[n1])).unwrap();
    assert_eq!(t2.name(tree.parent_edge(n1).unwrap().parent), "r2");
}

#[test]
fn a_relay_that_ends_up_leading_nowhere_is_pruned() {
    // rC looks useful (it leads to n2) and is added over its wide link, but n2 is then reached
    // through rB, so rC is left a leaf and pruned.
    let t = net(
        &[
            ("c", Role::Client, None),
            ("rA", Role::Relay, None),
            ("rB", Role::Relay, None),
            ("rC", Role::Relay, None),
            ("rD", Role::Relay, None),
            ("n1", Role::Node, None),
            ("n2", Role::Node, None),
        ],
        &[
            ("c", "rA", 1000.0, [0.0; 2]),
            ("c", "rB", 500.0, [0.0; 2]),
            ("rA", "n1", 1000.0, [0.0; 2]),
            ("rA", "rC", 900.0, [0.0; 2]),
            ("rC", "n2", 100.0, [0.0; 2]),
            ("rB", "n2", 800.0, [0.0; 2]),
            ("rA", "rD", 1000.0, [0.0; 2]),
        ],
    );
    let [c, n1, n2, rc, rd] = ids(&t, &["c", "n1", "n2", "rC", "rD"])[..] else {
        unreachable!()
    };
    let tree = replication_tree(&t, c, &Demand::exact(&[n1, n2])).unwrap();
    tree.check(&t).unwrap();
    assert!(
        tree.duty(rc).is_none(),
        "rC pruned: {:?}",
        tree.named_edges(&t)
    );
    assert!(tree.duty(rd).is_none(), "rD (a dead end) never joins");
    assert_eq!(t.name(tree.parent_edge(n2).unwrap().parent), "rB");
    assert_eq!(tree.bottleneck_free_mbit(&t), 500.0);
}

#[test]
fn bad_demands_are_refused_with_a_reason() {
    let t = Topology::from_toml_str(EXAMPLE).unwrap();
    let [client, core, n1, n2] = ids(&t, &["client", "core", "n1", "n2"])[..] else {
        unreachable!()
    };
    let err = |root, d: Demand| replication_tree(&t, root, &d).unwrap_err();
    assert!(matches!(
        err(client, Demand::exact(&[])),
        TreeError::EmptyDemand
    ));
    assert!(matches!(
        err(client, Demand::exact(&[core])),
        TreeError::NotADataNode { .. }
    ));
    assert!(matches!(
        err(n1, Demand::exact(&[n1, n2])),
        TreeError::RootIsTarget(_)
    ));
    assert!(matches!(
        err(client, Demand::exact(&[n1, n1])),
        TreeError::DuplicateTarget(_)
    ));
    assert!(matches!(
        err(client, Demand::any(&[n1, n2], 3)),
        TreeError::BadCount { .. }
    ));
    assert!(matches!(
        err(NodeId::from_index(99), Demand::exact(&[n1])),
        TreeError::UnknownNode(99)
    ));
}

#[test]
fn when_the_greedy_dead_ends_the_search_backtracks_to_a_tree_within_the_limits() {
    // The client may use one link. The greedy takes the wider one, to rA, which reaches only n1;
    // the search rules that link out and finds the tree through rB.
    let t = net(
        &[
            ("c", Role::Client, Some(1)),
            ("rA", Role::Relay, None),
            ("rB", Role::Relay, None),
            ("n1", Role::Node, None),
            ("n2", Role::Node, None),
        ],
        &[
            ("c", "rA", 200.0, [0.0; 2]),
            ("c", "rB", 100.0, [0.0; 2]),
            ("rA", "n1", 200.0, [0.0; 2]),
            ("rB", "n1", 200.0, [0.0; 2]),
            ("rB", "n2", 200.0, [0.0; 2]),
        ],
    );
    let [c, n1, n2] = ids(&t, &["c", "n1", "n2"])[..] else {
        unreachable!()
    };
    let demand = Demand::exact(&[n1, n2]);
    let greedy = tree_with_budget(&t, c, &demand, Flow::Down, SEARCH_STEPS_MAX, false).unwrap_err();
    assert!(
        matches!(&greedy, TreeError::Unreachable(u) if u.exhausted),
        "{greedy}"
    );
    let tree = replication_tree(&t, c, &demand).unwrap();
    tree.check(&t).unwrap();
    assert_eq!(
        tree.named_edges(&t),
        [("c", "rB"), ("rB", "n1"), ("rB", "n2")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
}
