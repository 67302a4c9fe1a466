//! The relay data plane over TCP on loopback, in one process: the test topology
//! (`docs/cluster-topology.toml`), a replication tree from `permafrost-topology`, one listener per
//! relay and data node.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use permafrost_relay::{
    hops, rebuild, send, serve, write_copies, Copies, Credentials, Header, LeafAck, NodeStats,
    RelayNode, Secret, Sink, SinkFactory, SourceFactory, Written, QUEUE_PIECES,
};
use permafrost_topology::{parity_tree, replication_tree, Demand, NodeId, Role, Topology};

type Stored = Arc<Mutex<HashMap<String, Vec<u8>>>>;

struct MemorySink {
    transfer: String,
    buf: Vec<u8>,
    stored: Stored,
    delay: Duration,
}

impl Sink for MemorySink {
    fn write_piece(&mut self, _index: u64, payload: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(payload);
        thread::sleep(self.delay);
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        self.stored.lock().unwrap().insert(self.transfer, self.buf);
        Ok(())
    }
}

struct Cluster {
    topology: Topology,
    addrs: HashMap<String, String>,
    stats: HashMap<String, Arc<NodeStats>>,
    stored: HashMap<String, Stored>,
}

/// Start a listener for every relay and data node of the example topology; data node `slow` sleeps
/// 1 ms per piece.
fn start(slow: &str) -> Cluster {
    let topology =
        Topology::from_toml_str(include_str!("../../../docs/cluster-topology.toml")).unwrap();
    let mut c = Cluster {
        topology,
        addrs: HashMap::new(),
        stats: HashMap::new(),
        stored: HashMap::new(),
    };
    for node in c.topology.nodes().to_vec() {
        if node.role == Role::Client {
            continue;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stats = Arc::new(NodeStats::default());
        let sink: Option<SinkFactory> = (node.role == Role::Node).then(|| {
            let stored: Stored = Arc::default();
            c.stored.insert(node.name.clone(), Arc::clone(&stored));
            let delay = if node.name == slow {
                Duration::from_millis(1)
            } else {
                Duration::ZERO
            };
            let factory: SinkFactory = Arc::new(move |h: &Header| {
                Ok(Box::new(MemorySink {
                    transfer: h.transfer.clone(),
                    buf: Vec::new(),
                    stored: Arc::clone(&stored),
                    delay,
                }) as Box<dyn Sink>)
            });
            factory
        });
        let source: Option<SourceFactory> = (node.role == Role::Node).then(|| {
            let name = node.name.clone();
            let factory: SourceFactory = Arc::new(move |h: &Header| {
                Ok(
                    Box::new(io::Cursor::new(held_by(&name, h.object_bytes as usize)))
                        as Box<dyn Read + Send>,
                )
            });
            factory
        });
        c.addrs.insert(
            node.name.clone(),
            listener.local_addr().unwrap().to_string(),
        );
        c.stats.insert(node.name.clone(), Arc::clone(&stats));
        serve(
            listener,
            Arc::new(RelayNode {
                name: node.name.clone(),
                sink,
                source,
                stats,
                secret: secret(),
            }),
        );
    }
    c
}

/// The cluster secret of the test cluster.
fn secret() -> Secret {
    Secret::new(b"the loopback cluster's secret").unwrap()
}

/// How the test's sender introduces itself.
fn creds() -> Credentials {
    Credentials {
        name: "client".into(),
        secret: secret(),
    }
}

/// The piece data node `name` holds for parity rebuilds.
fn held_by(name: &str, bytes: usize) -> Vec<u8> {
    let seed = name
        .bytes()
        .fold(0x9E37_79B9u64, |h, b| h.wrapping_mul(31) ^ u64::from(b));
    object_seeded(bytes, seed)
}

fn object(bytes: usize) -> Vec<u8> {
    object_seeded(bytes, 0x243F_6A88_85A3_08D3)
}

fn object_seeded(bytes: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A one-connection TCP proxy to `target` that flips the byte at 1 MiB of the stream going towards
/// the target (`towards_target`) or coming back from it. Returns its address.
fn flipping_proxy(target: String, towards_target: bool) -> String {
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = proxy.local_addr().unwrap().to_string();
    thread::spawn(move || {
        let (near, _) = proxy.accept().unwrap();
        let far = TcpStream::connect(target).unwrap();
        let (mut from, mut to, mut plain_from, mut plain_to) = if towards_target {
            (
                near.try_clone().unwrap(),
                far.try_clone().unwrap(),
                far,
                near,
            )
        } else {
            (
                far.try_clone().unwrap(),
                near.try_clone().unwrap(),
                near,
                far,
            )
        };
        thread::spawn(move || io::copy(&mut plain_from, &mut plain_to));
        let mut buf = vec![0u8; 64 << 10];
        let mut seen = 0usize;
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            const AT: usize = 1 << 20;
            if (seen..seen + n).contains(&AT) {
                buf[AT - seen] ^= 0x40;
            }
            seen += n;
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    addr
}

const OBJECT_BYTES: usize = 8 << 20;
const PIECE_BYTES: u32 = 64 << 10;

fn all_ok(acks: &[LeafAck]) -> bool {
    acks.iter().all(|a| a.ok)
}

#[test]
fn a_replication_tree_delivers_byte_exact_copies_and_the_client_sends_once() {
    let c = start("n1");
    let client = c.topology.node_id("client").unwrap();
    let data = c.topology.with_role(Role::Node);
    let tree = replication_tree(&c.topology, client, &Demand::any(&data, 5)).unwrap();
    let children = hops(&c.topology, &tree, &|n| c.addrs[n].clone());
    let body = object(OBJECT_BYTES);
    let client_stats = Arc::new(NodeStats::default());
    let acks = send(
        "t1",
        None,
        &children,
        &mut &body[..],
        body.len() as u64,
        PIECE_BYTES,
        &client_stats,
        &creds(),
    )
    .unwrap();
    assert_eq!(acks.len(), 5, "{acks:?}");
    assert!(all_ok(&acks), "{acks:?}");
    for target in tree.targets() {
        let name = c.topology.name(*target);
        assert!(
            c.stored[name].lock().unwrap()["t1"] == body,
            "{name} holds a byte-exact copy"
        );
    }
    // The client's uplink carries the object once (plus headers and 36 bytes per piece).
    let out = client_stats.bytes_out.load(Ordering::Relaxed) as f64;
    let overhead = 1.0 + 36.0 / f64::from(PIECE_BYTES) + 0.001;
    assert!(
        out >= OBJECT_BYTES as f64 && out < OBJECT_BYTES as f64 * overhead,
        "{out}"
    );
    // The core relay receives it once and sends it once per edge relay.
    let core = &c.stats["core"];
    let core_in = core.bytes_in.load(Ordering::Relaxed) as f64;
    let core_out = core.bytes_out.load(Ordering::Relaxed) as f64;
    assert!(
        core_in < OBJECT_BYTES as f64 * overhead + 4096.0,
        "{core_in}"
    );
    assert!(
        core_out >= 2.0 * OBJECT_BYTES as f64
            && core_out < 2.0 * OBJECT_BYTES as f64 * overhead + 4096.0
    );
    // Per link: every tree edge is counted once, by its parent, with the object going down and only
    // acks coming up; nothing else is counted.
    let mut counted: Vec<(String, String)> = Vec::new();
    for (parent, stats) in c
        .stats
        .iter()
        .chain([(&"client".to_string(), &client_stats)])
    {
        for (peer, down, up) in stats.peer_bytes() {
            assert!(
                down as f64 >= OBJECT_BYTES as f64,
                "{parent}→{peer}: {down}"
            );
            assert!(up < 4096, "{peer}→{parent}: {up}");
            counted.push((parent.clone(), peer));
        }
    }
    counted.sort();
    let mut edges = tree.named_edges(&c.topology);
    edges.sort();
    assert_eq!(counted, edges);
    // Bounded memory: even with the slow data node n1 under edge1, a relay holds few pieces.
    for relay in ["core", "edge1", "edge2"] {
        let held = c.stats[relay].pieces_held_max.load(Ordering::Relaxed);
        assert!(
            held <= QUEUE_PIECES as u64 + 2,
            "{relay} held {held} pieces"
        );
    }
}

#[test]
fn a_corrupted_byte_on_the_uplink_is_caught_at_every_leaf_and_nothing_is_acknowledged() {
    let c = start("");
    let client = c.topology.node_id("client").unwrap();
    let data = c.topology.with_role(Role::Node);
    let tree = replication_tree(&c.topology, client, &Demand::any(&data, 3)).unwrap();
    // A proxy in front of the core relay flips one byte in the middle of the stream.
    let proxy_addr = flipping_proxy(c.addrs["core"].clone(), true);
    let children = hops(&c.topology, &tree, &|n| {
        if n == "core" {
            proxy_addr.clone()
        } else {
            c.addrs[n].clone()
        }
    });
    let body = object(2 << 20);
    let acks = send(
        "t2",
        None,
        &children,
        &mut &body[..],
        body.len() as u64,
        PIECE_BYTES,
        &Arc::new(NodeStats::default()),
        &creds(),
    )
    .unwrap();
    assert_eq!(acks.len(), 3);
    for a in &acks {
        assert!(!a.ok, "{a:?}");
        assert!(
            a.error.as_deref().unwrap().contains("BLAKE3 mismatch"),
            "{a:?}"
        );
    }
    for stored in c.stored.values() {
        assert!(
            !stored.lock().unwrap().contains_key("t2"),
            "no partial copy is visible"
        );
    }
}

#[test]
fn a_data_node_that_is_down_is_reported_and_the_others_still_get_their_copy() {
    let c = start("");
    let client = c.topology.node_id("client").unwrap();
    let data = c.topology.with_role(Role::Node);
    let tree = replication_tree(&c.topology, client, &Demand::any(&data, 4)).unwrap();
    let down = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let children = hops(&c.topology, &tree, &|n| {
        if n == "n2" {
            down.clone()
        } else {
            c.addrs[n].clone()
        }
    });
    let body = object(1 << 20);
    let acks = send(
        "t3",
        None,
        &children,
        &mut &body[..],
        body.len() as u64,
        PIECE_BYTES,
        &Arc::new(NodeStats::default()),
        &creds(),
    )
    .unwrap();
    assert_eq!(acks.len(), 4);
    for a in &acks {
        if a.node == "n2" {
            assert!(
                !a.ok && a.error.as_deref().unwrap().contains("cannot connect"),
                "{a:?}"
            );
        } else {
            assert!(a.ok, "{a:?}");
            assert!(c.stored[&a.node].lock().unwrap()["t3"] == body);
        }
    }
}

#[test]
fn a_stream_sent_to_the_wrong_node_is_refused_and_an_empty_object_is_fine() {
    let c = start("");
    let wrong = permafrost_relay::Hop {
        name: "n1".into(),
        addr: c.addrs["n2"].clone(),
        children: vec![],
    };
    let acks = send(
        "t4",
        None,
        &[wrong],
        &mut &b""[..],
        0,
        PIECE_BYTES,
        &Arc::default(),
        &creds(),
    )
    .unwrap();
    assert!(
        !acks[0].ok && acks[0].error.as_deref().unwrap().contains("reached \"n2\""),
        "{acks:?}"
    );
    let right = permafrost_relay::Hop {
        name: "n1".into(),
        addr: c.addrs["n1"].clone(),
        children: vec![],
    };
    let acks = send(
        "t5",
        None,
        &[right],
        &mut &b""[..],
        0,
        PIECE_BYTES,
        &Arc::default(),
        &creds(),
    )
    .unwrap();
    assert!(all_ok(&acks), "{acks:?}");
    assert!(c.stored["n1"].lock().unwrap()["t5"].is_empty());
}

fn xor_of(names: &[&str], bytes: usize) -> Vec<u8> {
    let mut acc = vec![0u8; bytes];
    for n in names {
        acc.iter_mut()
            .zip(held_by(n, bytes))
            .for_each(|(a, b)| *a ^= b);
    }
    acc
}

#[test]
fn a_parity_tree_rebuilds_the_xor_and_the_root_receives_one_stream_whatever_the_group() {
    let c = start("");
    let root = c.topology.node_id("n6").unwrap();
    let bytes = 4 << 20;
    for group in 3..=5usize {
        let survivors: Vec<String> = (2..=group).map(|i| format!("n{i}")).collect();
        let holders: Vec<Vec<NodeId>> = survivors
            .iter()
            .map(|n| vec![c.topology.node_id(n).unwrap()])
            .collect();
        let tree = parity_tree(&c.topology, root, &Demand::one_of_each(&holders)).unwrap();
        let children = hops(&c.topology, &tree, &|n| c.addrs[n].clone());
        let stats = Arc::new(NodeStats::default());
        let mut out = Vec::new();
        let hash = rebuild(
            "p1",
            &children,
            bytes as u64,
            PIECE_BYTES,
            &mut out,
            &stats,
            &creds(),
        )
        .unwrap();
        let names: Vec<&str> = survivors.iter().map(String::as_str).collect();
        let expected = xor_of(&names, bytes);
        assert!(
            out == expected,
            "group {group}: the rebuilt bytes are the XOR of the survivors"
        );
        assert_eq!(hash, *blake3::hash(&expected).as_bytes());
        // One stream into the root, whatever the group size.
        let into_root = stats.bytes_in.load(Ordering::Relaxed) as f64;
        let overhead = 1.0 + 36.0 / f64::from(PIECE_BYTES);
        assert!(
            into_root >= bytes as f64 && into_root <= bytes as f64 * overhead,
            "{into_root}"
        );
    }
}

#[test]
fn a_corrupted_piece_below_a_relay_fails_the_rebuild_naming_the_node() {
    let c = start("");
    let root = c.topology.node_id("n6").unwrap();
    let holders: Vec<Vec<NodeId>> = ["n2", "n4", "n5"]
        .iter()
        .map(|n| vec![c.topology.node_id(n).unwrap()])
        .collect();
    let tree = parity_tree(&c.topology, root, &Demand::one_of_each(&holders)).unwrap();
    // n4's answer to edge2 passes a proxy that flips a byte.
    let proxy = flipping_proxy(c.addrs["n4"].clone(), false);
    let children = hops(&c.topology, &tree, &|n| {
        if n == "n4" {
            proxy.clone()
        } else {
            c.addrs[n].clone()
        }
    });
    let mut out = Vec::new();
    let e = rebuild(
        "p2",
        &children,
        4 << 20,
        PIECE_BYTES,
        &mut out,
        &Arc::default(),
        &creds(),
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("n4") && text.contains("BLAKE3 mismatch"),
        "{text}"
    );
    assert!(
        text.contains("edge2"),
        "the relay that caught it is named: {text}"
    );
    assert!(out.len() < 4 << 20, "the rebuild stopped");
}

/// A one-connection TCP proxy to `target` that forwards 1 MiB and then cuts both connections (a relay
/// dying mid-transfer). Returns its address.
fn cutting_proxy(target: String) -> String {
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = proxy.local_addr().unwrap().to_string();
    thread::spawn(move || {
        let (mut near, _) = proxy.accept().unwrap();
        let mut far = TcpStream::connect(target).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        let mut left = 1usize << 20;
        while left > 0 {
            let Ok(n) = near.read(&mut buf[..left.min(64 << 10)]) else {
                break;
            };
            if n == 0 || far.write_all(&buf[..n]).is_err() {
                break;
            }
            left -= n;
        }
        let _ = near.shutdown(std::net::Shutdown::Both);
        let _ = far.shutdown(std::net::Shutdown::Both);
    });
    addr
}

#[test]
fn when_a_relay_dies_mid_write_the_missing_copies_go_out_on_a_tree_around_it() {
    let c = start("");
    let t = &c.topology;
    let client = t.node_id("client").unwrap();
    let edge1 = t.node_id("edge1").unwrap();
    let data = t.with_role(Role::Node);
    let k = 3;
    let body = object(4 << 20);
    let tree = replication_tree(t, client, &Demand::any(&data, k)).unwrap();
    assert!(
        tree.duty(edge1).is_some(),
        "the first tree runs through edge1"
    );
    let cut = cutting_proxy(c.addrs["edge1"].clone());
    let children = hops(t, &tree, &|n| {
        if n == "edge1" {
            cut.clone()
        } else {
            c.addrs[n].clone()
        }
    });
    let first = send(
        "w1",
        None,
        &children,
        &mut &body[..],
        body.len() as u64,
        PIECE_BYTES,
        &Arc::default(),
        &creds(),
    )
    .unwrap();
    let done: Vec<NodeId> = first
        .iter()
        .filter(|a| a.ok)
        .map(|a| t.node_id(&a.node).unwrap())
        .collect();
    assert!(done.len() < k, "the copies behind edge1 failed: {first:?}");
    for a in first.iter().filter(|a| !a.ok) {
        assert!(
            !c.stored[&a.node].lock().unwrap().contains_key("w1"),
            "no partial copy on {}",
            a.node
        );
    }
    // Retry: the copies still missing, on candidates not yet holding one, around the failed relay.
    let rest: Vec<NodeId> = data.iter().copied().filter(|n| !done.contains(n)).collect();
    let failed_nodes: Vec<NodeId> = first
        .iter()
        .filter(|a| !a.ok)
        .map(|a| t.node_id(&a.node).unwrap())
        .collect();
    let demand = Demand::any(&rest, k - done.len()).avoiding(&[edge1]);
    let retry = replication_tree(t, client, &demand.avoiding(&failed_nodes)).unwrap();
    assert!(retry.duty(edge1).is_none());
    let children = hops(t, &retry, &|n| c.addrs[n].clone());
    let second = send(
        "w1",
        None,
        &children,
        &mut &body[..],
        body.len() as u64,
        PIECE_BYTES,
        &Arc::default(),
        &creds(),
    )
    .unwrap();
    assert!(all_ok(&second), "{second:?}");
    let holders: Vec<&String> = c
        .stored
        .iter()
        .filter(|(_, s)| s.lock().unwrap().get("w1") == Some(&body))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        holders.len(),
        k,
        "k byte-exact copies in the end: {holders:?}"
    );
}

/// The holders of a byte-exact copy of `body` under `key`.
fn holders_of(c: &Cluster, key: &str, body: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = c
        .stored
        .iter()
        .filter(|(_, s)| s.lock().unwrap().get(key).map(Vec::as_slice) == Some(body))
        .map(|(n, _)| n.clone())
        .collect();
    v.sort();
    v
}

fn write_through(
    c: &Cluster,
    copies: &Copies,
    key: &str,
    body: &[u8],
    cut: &[(&str, String)],
    stats: &Arc<NodeStats>,
) -> Written {
    let t = &c.topology;
    let client = t.node_id("client").unwrap();
    let body = body.to_vec();
    let len = body.len() as u64;
    let mut open = move || Ok(Box::new(io::Cursor::new(body.clone())) as Box<dyn Read>);
    write_copies(
        t,
        client,
        copies,
        &|n| {
            cut.iter()
                .find(|(name, _)| *name == n)
                .map(|(_, a)| a.clone())
                .or_else(|| c.addrs.get(n).cloned())
        },
        key,
        None,
        &mut open,
        len,
        PIECE_BYTES,
        stats,
        &creds(),
    )
    .unwrap()
}

#[test]
fn write_copies_retries_around_a_relay_that_dies_and_stops_feeding_its_dead_subtree() {
    let c = start("");
    let t = &c.topology;
    let data = t.with_role(Role::Node);
    let body = object(32 << 20);
    let cut = cutting_proxy(c.addrs["edge1"].clone());
    let stats = Arc::new(NodeStats::default());
    let copies = Copies::Any {
        candidates: data.clone(),
        k: 3,
    };
    let w = write_through(&c, &copies, "w2", &body, &[("edge1", cut)], &stats);
    assert!(w.complete(), "{w:?}");
    assert_eq!(w.attempts.len(), 2, "one retry: {w:?}");
    let first = &w.attempts[0];
    assert!(first.tree.contains("edge1"), "{}", first.tree);
    for a in &first.acks {
        assert!(!a.ok, "{a:?}");
        assert_eq!(a.blame.as_deref(), Some("edge1"), "{a:?}");
        assert!(
            !c.stored[&a.node].lock().unwrap().contains_key("w2"),
            "no copy on {}",
            a.node
        );
    }
    // core answered as soon as its only child failed: the client stopped well before the end.
    assert!(
        first.bytes_out < body.len() as u64 * 3 / 4,
        "the first attempt sent {} of {} bytes",
        first.bytes_out,
        body.len()
    );
    let second = &w.attempts[1];
    assert_eq!(second.avoided, vec!["edge1".to_string()]);
    assert!(!second.tree.contains("edge1"), "{}", second.tree);
    assert!(second.acks.iter().all(|a| a.ok), "{second:?}");
    assert_eq!(holders_of(&c, "w2", &body), ["n4", "n5", "n6"]);
    assert_eq!(w.stored.len(), 3);
}

#[test]
fn a_data_node_dying_mid_write_is_replaced_for_any_k_and_fails_an_exact_write_naming_it() {
    let c = start("");
    let t = &c.topology;
    let data = t.with_role(Role::Node);
    let body = object(8 << 20);
    // Any 3: n2 dies after 1 MiB; n1 and n3 keep their copies, a retry puts the third elsewhere.
    let cut = cutting_proxy(c.addrs["n2"].clone());
    let w = write_through(
        &c,
        &Copies::Any {
            candidates: data.clone(),
            k: 3,
        },
        "w3",
        &body,
        &[("n2", cut)],
        &Arc::default(),
    );
    assert!(w.complete(), "{w:?}");
    assert_eq!(w.attempts.len(), 2, "{w:?}");
    let failed: Vec<_> = w.attempts[0].acks.iter().filter(|a| !a.ok).collect();
    assert_eq!(failed.len(), 1, "{w:?}");
    assert_eq!(failed[0].node, "n2");
    assert_eq!(failed[0].blame.as_deref(), Some("n2"));
    assert_eq!(w.attempts[1].avoided, vec!["n2".to_string()]);
    let holders = holders_of(&c, "w3", &body);
    assert_eq!(holders.len(), 3, "{holders:?}");
    assert!(!holders.contains(&"n2".to_string()));
    assert!(
        !c.stored["n2"].lock().unwrap().contains_key("w3"),
        "no half copy on n2"
    );
    // Exactly n1, n2, n3: n2 cannot be replaced, so the write is not complete and says why.
    let cut = cutting_proxy(c.addrs["n2"].clone());
    let exact = ["n1", "n2", "n3"].map(|n| t.node_id(n).unwrap()).to_vec();
    let w = write_through(
        &c,
        &Copies::Exact(exact),
        "w4",
        &body,
        &[("n2", cut)],
        &Arc::default(),
    );
    assert!(!w.complete(), "{w:?}");
    assert_eq!(w.stored, ["n1", "n3"]);
    let why = w.gave_up.as_deref().unwrap();
    assert!(why.contains("n2"), "{why}");
    assert!(why.contains("avoided: n2"), "{why}");
    assert!(
        !c.stored["n2"].lock().unwrap().contains_key("w4"),
        "no half copy on n2"
    );
}

#[test]
fn when_the_only_path_dies_the_write_fails_naming_what_is_unreachable() {
    let c = start("");
    let t = &c.topology;
    let data = t.with_role(Role::Node);
    let body = object(4 << 20);
    let cut = cutting_proxy(c.addrs["core"].clone());
    let w = write_through(
        &c,
        &Copies::Any {
            candidates: data.clone(),
            k: 3,
        },
        "w5",
        &body,
        &[("core", cut)],
        &Arc::default(),
    );
    assert!(!w.complete());
    assert!(w.stored.is_empty(), "{w:?}");
    assert_eq!(w.attempts.len(), 1);
    assert!(
        w.attempts[0]
            .acks
            .iter()
            .all(|a| a.blame.as_deref() == Some("core")),
        "{w:?}"
    );
    let why = w.gave_up.unwrap();
    assert!(why.contains("avoided: core"), "{why}");
    assert!(why.contains("not connected to the root"), "{why}");
    assert!(holders_of(&c, "w5", &body).is_empty());
}
