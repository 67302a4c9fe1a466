//! Compare the tree algorithm with a plain minimum spanning tree and with client fan-out on random
//! topologies, and print the model shapes of the test topology.
//!
//! `cargo run --release -p permafrost-topology --example compare_mst [topologies]`

use permafrost_topology::baseline::plain_mst;
use permafrost_topology::random::{random_topology, RandomShape, SplitMix};
use permafrost_topology::{
    fan_out_shape, parity_tree, replication_tree, tree::tree_with_budget, tree_shape, Demand, Flow,
    NodeId, Role, Topology, Tree, TreeError,
};

const OBJECT_BYTES: u64 = 1 << 30;

#[derive(Default)]
struct Stats {
    topologies: usize,
    ours_failed: usize,
    greedy_failed: usize,
    exhausted: usize,
    mst_over_limit: usize,
    mst_via_data_node: usize,
    faster: usize,
    equal: usize,
    slower: usize,
    ratios: Vec<f64>,
    ours_s: f64,
    mst_s: f64,
    fan_out_s: f64,
    ours_hops: u64,
    mst_hops: u64,
    fan_out_root_bytes: u64,
    ours_root_bytes: u64,
}

fn over_limit(t: &Topology, tree: &Tree) -> bool {
    let mut degree = vec![0u32; t.nodes().len()];
    for e in tree.edges() {
        degree[e.parent.index()] += 1;
        degree[e.child.index()] += 1;
    }
    t.nodes()
        .iter()
        .zip(&degree)
        .any(|(n, d)| n.degree_max.is_some_and(|m| *d > m))
}

fn via_data_node(t: &Topology, tree: &Tree) -> bool {
    tree.edges()
        .iter()
        .any(|e| e.parent != tree.root() && !t.forwards(e.parent))
}

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    println!("# Random topologies: {count} per row, 1 client, 2-12 relays, 4-24 data nodes, 0-12 extra relay links,");
    println!("# links 100/200/1000/10000 Mbit/s with 0/25/50/75 % measured use per direction; object 1 GiB.");
    println!("# ours = replication tree (Demand::any k) or parity tree (one holder per piece); mst = plain MST on");
    println!("# utilisation fraction, no limits, any node forwards, pruned to the same targets; fan = root sends/receives each copy.");
    println!(
        "{:<8} {:>2} {:>6} {:>5} | {:>6} {:>6} {:>5} {:>8} {:>8} | {:>6} {:>6} {:>6} | {:>7} {:>7} {:>8} | {:>9} {:>9} | {:>5} {:>5} | {:>5} {:>5}",
        "tree", "k", "limits", "topos", "greedyF", "failed", "exh", "mst>lim", "mst-via", "faster", "equal", "slower",
        "ours_s", "mst_s", "fan_s", "mst/ours", "fan/ours", "hops", "mstH", "rootG", "fanG"
    );
    for flow in [Flow::Down, Flow::Up] {
        for limits in [false, true] {
            for k in [3usize, 4, 5] {
                let s = run(count, flow, limits, k);
                let n = s.ratios.len().max(1) as f64;
                let mut r = s.ratios.clone();
                r.sort_by(f64::total_cmp);
                let median = r.get(r.len() / 2).copied().unwrap_or(f64::NAN);
                println!(
                    "{:<8} {:>2} {:>6} {:>5} | {:>6} {:>6} {:>5} {:>8} {:>8} | {:>6} {:>6} {:>6} | {:>7.2} {:>7.2} {:>8.2} | {:>4.2}/{:<4.2} {:>9.2} | {:>5.2} {:>5.2} | {:>5.2} {:>5.2}",
                    if flow == Flow::Down { "replic." } else { "parity" },
                    k,
                    if limits { "yes" } else { "no" },
                    s.topologies,
                    s.greedy_failed,
                    s.ours_failed,
                    s.exhausted,
                    s.mst_over_limit,
                    s.mst_via_data_node,
                    s.faster,
                    s.equal,
                    s.slower,
                    s.ours_s / n,
                    s.mst_s / n,
                    s.fan_out_s / n,
                    s.mst_s / s.ours_s,
                    median,
                    s.fan_out_s / s.ours_s,
                    s.ours_hops as f64 / n,
                    s.mst_hops as f64 / n,
                    s.ours_root_bytes as f64 / n / OBJECT_BYTES as f64,
                    s.fan_out_root_bytes as f64 / n / OBJECT_BYTES as f64,
                );
            }
        }
    }
    println!(
        "# greedyF = the greedy alone (no backtracking) found no tree; exh = search budget spent;"
    );
    println!("# columns: failed = no tree within degree limits; mst>lim = MST exceeds a degree limit; mst-via = MST forwards");
    println!("# through a data node; faster/equal/slower = ours vs MST model time; *_s = mean model seconds; mst/ours =");
    println!("# ratio of summed times / median ratio; fan/ours = summed fan-out time over ours; hops = mean links used;");
    println!("# rootG / fanG = mean GiB through the root's links, tree / fan-out.");
    example_shape();
}

fn run(count: usize, flow: Flow, limits: bool, k: usize) -> Stats {
    let mut s = Stats::default();
    for seed in 0..count as u64 {
        let mut rng = SplitMix(seed.wrapping_mul(0x9E37_79B9) ^ k as u64);
        let shape = RandomShape {
            relays: 2 + rng.below(11),
            nodes: 4 + rng.below(21),
            extra_links: rng.below(13),
            degree_limits: limits,
        };
        let t = random_topology(seed, shape);
        let data = t.with_role(Role::Node);
        if data.len() < k + 1 {
            continue;
        }
        s.topologies += 1;
        let (root, demand) = match flow {
            Flow::Down => (t.node_id("client").unwrap(), Demand::any(&data, k)),
            Flow::Up => {
                // Rebuild onto data[0] from a group of k survivors, each piece on one node.
                let holders: Vec<Vec<NodeId>> = data[1..=k].iter().map(|&n| vec![n]).collect();
                (data[0], Demand::one_of_each(&holders))
            }
        };
        let result = match flow {
            Flow::Down => replication_tree(&t, root, &demand),
            Flow::Up => parity_tree(&t, root, &demand),
        };
        let greedy = tree_with_budget(&t, root, &demand, flow, u32::MAX, false);
        s.greedy_failed += usize::from(greedy.is_err());
        let ours = match result {
            Ok(ours) => ours,
            Err(TreeError::Unreachable(u)) => {
                s.ours_failed += 1;
                s.exhausted += usize::from(u.exhausted);
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        if let Ok(g) = greedy {
            assert_eq!(
                g, ours,
                "the search returns the greedy's tree when the greedy succeeds"
            );
        }
        let mst = plain_mst(&t, root, ours.targets(), flow).expect("connected");
        let ours_shape = tree_shape(&t, &ours, OBJECT_BYTES);
        let mst_shape = tree_shape(&t, &mst, OBJECT_BYTES);
        let fan = fan_out_shape(&t, root, ours.targets(), flow, OBJECT_BYTES).unwrap();
        s.mst_over_limit += usize::from(over_limit(&t, &mst));
        s.mst_via_data_node += usize::from(via_data_node(&t, &mst));
        let (a, b) = (ours_shape.time_s, mst_shape.time_s);
        if a < b {
            s.faster += 1;
        } else if a == b {
            s.equal += 1;
        } else {
            s.slower += 1;
        }
        s.ratios.push(b / a);
        s.ours_s += a;
        s.mst_s += b;
        s.fan_out_s += fan.time_s;
        s.ours_hops += ours.edges().len() as u64;
        s.mst_hops += mst.edges().len() as u64;
        s.ours_root_bytes += ours_shape.bytes_at(root);
        s.fan_out_root_bytes += fan.bytes_at(root);
    }
    s
}

/// The test shape: uplink bytes and model time, tree vs fan-out, for k = 3, 4, 5 copies and
/// rebuilds from groups of 3, 4, 5.
fn example_shape() {
    let t = Topology::from_toml_str(include_str!("../../../docs/cluster-topology.toml"))
        .expect("example topology");
    let client = t.node_id("client").unwrap();
    let data = t.with_role(Role::Node);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let object = 256u64 << 20;
    println!("\n# docs/cluster-topology.toml, object 256 MiB, 200 Mbit/s links (model):");
    println!("write  k | client uplink MiB tree / fan-out | time s tree / fan-out");
    for k in 3..=5 {
        let tree = replication_tree(&t, client, &Demand::any(&data, k)).unwrap();
        let a = tree_shape(&t, &tree, object);
        let b = fan_out_shape(&t, client, tree.targets(), Flow::Down, object).unwrap();
        println!(
            "       {k} | {:>8.0} / {:<8.0}              | {:>6.2} / {:<6.2}",
            mib(a.bytes_at(client)),
            mib(b.bytes_at(client)),
            a.time_s,
            b.time_s
        );
    }
    println!("rebuild n | root downlink MiB tree / naive  | time s tree / naive");
    let root = t.node_id("n6").unwrap();
    for group in 3..=5usize {
        let holders: Vec<Vec<NodeId>> = (2..=group)
            .map(|i| vec![t.node_id(&format!("n{i}")).unwrap()])
            .collect();
        let tree = parity_tree(&t, root, &Demand::one_of_each(&holders)).unwrap();
        let a = tree_shape(&t, &tree, object);
        let b = fan_out_shape(&t, root, tree.targets(), Flow::Up, object).unwrap();
        println!(
            "        {group} | {:>8.0} / {:<8.0}              | {:>6.2} / {:<6.2}",
            mib(a.bytes_at(root)),
            mib(b.bytes_at(root)),
            a.time_s,
            b.time_s
        );
    }
}
