//! The membership proof on real TCP connections: a data node stores what a member sends and opens no sink
//! for a peer that does not prove the cluster secret (a wrong one, none: the old unauthenticated protocol,
//! a handshake cut short), and a sender sends nothing to a listener that does not prove it back.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use permafrost_relay::{
    send, serve, wire, Credentials, Header, Hop, NodeStats, RelayNode, Secret, Sink, SinkFactory,
};

const RIGHT: &[u8] = b"the cluster's own secret";
const WRONG: &[u8] = b"a secret of another cluster";

/// A data node `n1` with secret `secret`; counts the sinks it opened and keeps what they stored.
struct Node {
    addr: String,
    stats: Arc<NodeStats>,
    opened: Arc<AtomicU64>,
    stored: Arc<Mutex<Vec<Vec<u8>>>>,
}

struct Memory {
    buf: Vec<u8>,
    stored: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Sink for Memory {
    fn write_piece(&mut self, _index: u64, payload: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(payload);
        Ok(())
    }
    fn finish(self: Box<Self>) -> io::Result<()> {
        self.stored.lock().unwrap().push(self.buf);
        Ok(())
    }
}

fn node(secret: &[u8]) -> Node {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stats = Arc::new(NodeStats::default());
    let opened = Arc::new(AtomicU64::new(0));
    let stored = Arc::new(Mutex::new(Vec::new()));
    let sink: SinkFactory = {
        let (opened, stored) = (Arc::clone(&opened), Arc::clone(&stored));
        Arc::new(move |_: &Header| {
            opened.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(Memory {
                buf: Vec::new(),
                stored: Arc::clone(&stored),
            }) as Box<dyn Sink>)
        })
    };
    serve(
        listener,
        Arc::new(RelayNode {
            name: "n1".into(),
            sink: Some(sink),
            source: None,
            stats: Arc::clone(&stats),
            secret: Secret::new(secret).unwrap(),
        }),
    );
    Node {
        addr,
        stats,
        opened,
        stored,
    }
}

fn send_to(n: &Node, secret: &[u8], body: &[u8]) -> Vec<permafrost_relay::LeafAck> {
    let hop = Hop {
        name: "n1".into(),
        addr: n.addr.clone(),
        children: Vec::new(),
    };
    send(
        "t",
        None,
        &[hop],
        &mut io::Cursor::new(body.to_vec()),
        body.len() as u64,
        1024,
        &Arc::new(NodeStats::default()),
        &Credentials {
            name: "root".into(),
            secret: Secret::new(secret).unwrap(),
        },
    )
    .unwrap()
}

/// Wait until the node has refused `count` connections (the refusal ends after the client's side).
fn refused(n: &Node, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while n.stats.refused.load(Ordering::SeqCst) < count {
        assert!(Instant::now() < deadline, "the node never refused the peer");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn nothing_stored(n: &Node) {
    assert_eq!(n.opened.load(Ordering::SeqCst), 0, "a sink was opened");
    assert!(n.stored.lock().unwrap().is_empty());
    assert_eq!(
        n.stats.streams.load(Ordering::SeqCst),
        0,
        "a stream was accepted"
    );
}

#[test]
fn a_member_with_the_secret_stores_its_copy() {
    let n = node(RIGHT);
    let body: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let acks = send_to(&n, RIGHT, &body);
    assert!(acks.len() == 1 && acks[0].ok, "{acks:?}");
    assert_eq!(*n.stored.lock().unwrap(), vec![body]);
    assert_eq!(n.stats.refused.load(Ordering::SeqCst), 0);
}

#[test]
fn a_sender_with_a_wrong_secret_is_refused_and_nothing_reaches_the_sink() {
    let n = node(RIGHT);
    let acks = send_to(&n, WRONG, b"pushed by an outsider");
    assert!(acks.len() == 1 && !acks[0].ok, "{acks:?}");
    let error = acks[0].error.as_deref().unwrap();
    assert!(error.contains("refused the connection"), "{error}");
    assert_eq!(acks[0].blame.as_deref(), Some("n1"));
    refused(&n, 1);
    nothing_stored(&n);
}

#[test]
fn a_sender_of_the_unauthenticated_protocol_is_refused_and_nothing_reaches_the_sink() {
    let n = node(RIGHT);
    // What a build of wire version 1 sends: the header and the pieces at once, no handshake.
    let mut c = TcpStream::connect(&n.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let header = Header {
        version: 1,
        op: Default::default(),
        transfer: "t".into(),
        object_bytes: 4,
        piece_bytes: 1024,
        hop: Hop {
            name: "n1".into(),
            addr: n.addr.clone(),
            children: Vec::new(),
        },
        object: None,
    };
    wire::write_json(&mut c, &header).unwrap();
    let piece = wire::Piece {
        hash: wire::piece_hash(0, b"evil"),
        payload: b"evil".to_vec(),
    };
    let _ = wire::write_piece(&mut c, &piece);
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.contains("unauthenticated relay protocol"),
        "{answer}"
    );
    refused(&n, 1);
    nothing_stored(&n);
}

#[test]
fn a_handshake_cut_short_is_refused_and_nothing_reaches_the_sink() {
    let n = node(RIGHT);
    let mut c = TcpStream::connect(&n.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut hello = [0u8; 8];
    c.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..4], b"PFRL");
    c.write_all(b"PFRL\x02\x00\x00\x00only part of a nonce")
        .unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    refused(&n, 1);
    nothing_stored(&n);
}

#[test]
fn a_sender_sends_nothing_to_a_listener_without_the_secret() {
    // A listener of another cluster: it refuses the sender, and the sender's header never leaves.
    let n = node(WRONG);
    let acks = send_to(&n, RIGHT, b"not for them");
    assert!(!acks[0].ok, "{acks:?}");
    refused(&n, 1);
    nothing_stored(&n);
    assert_eq!(
        n.stats.bytes_in.load(Ordering::SeqCst),
        0,
        "the header was read"
    );
}
