//! Throughput of the relay data plane on loopback, in one process: the example topology's replication
//! tree (client → core → edge relays → k data nodes) against client fan-out (the client connects to
//! each data node itself), same run, data discarded at the nodes after the BLAKE3 check.
//! Loopback has no link limit, so this measures the CPU cost of relaying, not the network shape.
//!
//! `cargo run --release -p permafrost-relay --example relay_loopback [MiB] [rounds]`

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use permafrost_relay::{hops, send, serve, Header, Hop, NodeStats, RelayNode, Sink, SinkFactory};
use permafrost_topology::{replication_tree, Demand, Role, Topology};

struct Discard;

impl Sink for Discard {
    fn write_piece(&mut self, _: u64, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn finish(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let bytes = mib << 20;
    let piece_bytes = 1 << 20;
    let t = Topology::from_toml_str(include_str!("../../../docs/cluster-topology.toml")).unwrap();
    let secret = permafrost_relay::Secret::new(b"the example cluster secret").unwrap();
    let mut addrs = HashMap::new();
    for node in t.nodes() {
        if node.role == Role::Client {
            continue;
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        addrs.insert(node.name.clone(), l.local_addr().unwrap().to_string());
        let sink: SinkFactory = Arc::new(|_: &Header| Ok(Box::new(Discard) as Box<dyn Sink>));
        serve(
            l,
            Arc::new(RelayNode {
                name: node.name.clone(),
                sink: Some(sink),
                source: None,
                stats: Arc::default(),
                secret: secret.clone(),
            }),
        );
    }
    let credentials = permafrost_relay::Credentials {
        name: "client".into(),
        secret: secret.clone(),
    };
    let client = t.node_id("client").unwrap();
    let data = t.with_role(Role::Node);
    println!("object {mib} MiB, pieces 1 MiB, best of {rounds} rounds; loopback, one process");
    println!(
        "k | tree s  MB/s  client MiB out | fan-out s  MB/s  client MiB out | fan-out/tree time"
    );
    for k in 3..=5 {
        let tree = replication_tree(&t, client, &Demand::any(&data, k)).unwrap();
        let tree_hops = hops(&t, &tree, &|n| addrs[n].clone());
        let flat: Vec<Hop> = tree
            .targets()
            .iter()
            .map(|&n| Hop {
                name: t.name(n).to_string(),
                addr: addrs[t.name(n)].clone(),
                children: vec![],
            })
            .collect();
        let run = |children: &[Hop]| {
            let mut best = f64::INFINITY;
            let mut out = 0;
            for r in 0..rounds {
                let stats = Arc::new(NodeStats::default());
                let mut src = io::repeat(0x5a).take(bytes);
                let start = Instant::now();
                let acks = send(
                    &format!("b{k}-{r}"),
                    None,
                    children,
                    &mut src,
                    bytes,
                    piece_bytes,
                    &stats,
                    &credentials,
                )
                .unwrap();
                let s = start.elapsed().as_secs_f64();
                assert!(acks.len() == k && acks.iter().all(|a| a.ok), "{acks:?}");
                best = best.min(s);
                out = stats.bytes_out.load(Ordering::Relaxed);
            }
            (best, out)
        };
        let (tree_s, tree_out) = run(&tree_hops);
        let (fan_s, fan_out) = run(&flat);
        let mbs = |s: f64| bytes as f64 / s / 1e6;
        println!(
            "{k} | {tree_s:6.3} {:5.0} {:>14.0} | {fan_s:9.3} {:5.0} {:>14.0} | {:.2}",
            mbs(tree_s),
            tree_out as f64 / (1 << 20) as f64,
            mbs(fan_s),
            fan_out as f64 / (1 << 20) as f64,
            fan_s / tree_s
        );
    }
}
