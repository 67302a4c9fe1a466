//! The root's sender and the node-side server (relay or leaf), over blocking TCP with one thread per
//! connection and per child: simple, and the bounded channels give the memory bound directly.

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::parity::{self, SourceFactory};
use crate::wire::{self, piece_hash, Header, Hop, LeafAck, Op, Piece};

/// Pieces queued per child before the stream waits for that child.
pub const QUEUE_PIECES: usize = 4;
/// A connection that moves nothing for this long fails (its subtree is reported failed).
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Socket buffering per connection, bytes.
pub(crate) const BUFFER_BYTES: usize = 256 << 10;

/// Where a data node puts an incoming object.
pub trait Sink: Send {
    /// Store piece `index` (pieces arrive in order, each already checked).
    fn write_piece(&mut self, index: u64, payload: &[u8]) -> io::Result<()>;
    /// Make the whole object durable; only then is it acknowledged. A sink dropped without `finish`
    /// must leave nothing visible.
    fn finish(self: Box<Self>) -> io::Result<()>;
}

/// Opens a [`Sink`] for a transfer.
pub type SinkFactory = Arc<dyn Fn(&Header) -> io::Result<Box<dyn Sink>> + Send + Sync>;

/// Counters of one node (root sender, relay or data node).
#[derive(Debug, Default)]
pub struct NodeStats {
    /// Bytes read from the network (headers, hashes, payload).
    pub bytes_in: AtomicU64,
    /// Bytes written to the network.
    pub bytes_out: AtomicU64,
    /// Pieces alive in this node's forwarding now.
    pub pieces_held: AtomicU64,
    /// Most pieces alive at once in one stream's forwarding (the memory bound in pieces).
    pub pieces_held_max: AtomicU64,
    /// Streams accepted.
    pub streams: AtomicU64,
    /// Streams being served now.
    pub streams_open: AtomicU64,
}

/// A node that accepts streams: a relay (forwards to the children the header names) and, when it
/// has a sink, a data node (stores when the header gives it no children).
pub struct RelayNode {
    /// Its name in the topology (a stream addressed to another name is refused).
    pub name: String,
    /// Storage for objects; None on a pure relay.
    pub sink: Option<SinkFactory>,
    /// Stored bytes for parity rebuilds; None on a pure relay.
    pub source: Option<SourceFactory>,
    /// Its counters.
    pub stats: Arc<NodeStats>,
}

pub(crate) struct Counting<T> {
    pub(crate) inner: T,
    pub(crate) count: Arc<NodeStats>,
    pub(crate) inbound: bool,
}

impl<T: Read> Read for Counting<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<T: Write> Write for Counting<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let counter = if self.inbound {
            &self.count.bytes_in
        } else {
            &self.count.bytes_out
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A piece counted in [`NodeStats::pieces_held`] while alive.
struct Held {
    piece: Piece,
    stats: Arc<NodeStats>,
}

impl Held {
    fn new(piece: Piece, stats: &Arc<NodeStats>) -> Held {
        let now = stats.pieces_held.fetch_add(1, Ordering::Relaxed) + 1;
        stats.pieces_held_max.fetch_max(now, Ordering::Relaxed);
        Held {
            piece,
            stats: Arc::clone(stats),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.stats.pieces_held.fetch_sub(1, Ordering::Relaxed);
    }
}

fn failed(hop: &Hop, message: &str) -> Vec<LeafAck> {
    hop.leaves()
        .into_iter()
        .map(|node| LeafAck {
            node,
            ok: false,
            error: Some(message.to_string()),
        })
        .collect()
}

pub(crate) fn connect(addr: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{addr} resolves to nothing"),
    );
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, IO_TIMEOUT) {
            Ok(s) => {
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Stream the pieces from `rx` to one child and return its subtree's acks (all failed, with the
/// reason, if the child cannot be reached, the connection breaks, or the stream ends early).
fn child_stream(header: Header, rx: Receiver<Arc<Held>>, stats: Arc<NodeStats>) -> Vec<LeafAck> {
    let hop = header.hop.clone();
    let fail = |rx: Receiver<Arc<Held>>, what: String| {
        // Keep taking pieces so that the other children are not held up by this one.
        for _ in rx.iter() {}
        failed(&hop, &format!("{} ({}): {what}", hop.name, hop.addr))
    };
    let conn = match connect(&hop.addr) {
        Ok(c) => c,
        Err(e) => return fail(rx, format!("cannot connect: {e}")),
    };
    let writer = match conn.try_clone() {
        Ok(w) => w,
        Err(e) => return fail(rx, e.to_string()),
    };
    let mut w = BufWriter::with_capacity(
        BUFFER_BYTES,
        Counting {
            inner: writer,
            count: Arc::clone(&stats),
            inbound: false,
        },
    );
    if let Err(e) = wire::write_json(&mut w, &header) {
        return fail(rx, format!("sending the header: {e}"));
    }
    let mut sent = 0u64;
    while let Ok(held) = rx.recv() {
        if let Err(e) = wire::write_piece(&mut w, &held.piece) {
            drop(held);
            return fail(rx, format!("sending piece {sent}: {e}"));
        }
        sent += 1;
    }
    if sent < header.pieces() {
        let _ = conn.shutdown(Shutdown::Both);
        return failed(
            &hop,
            &format!(
                "{}: the stream above it ended after {sent} pieces",
                hop.name
            ),
        );
    }
    if let Err(e) = w.flush() {
        return failed(&hop, &format!("{} ({}): {e}", hop.name, hop.addr));
    }
    let mut r = Counting {
        inner: conn,
        count: stats,
        inbound: true,
    };
    match wire::read_json::<Vec<LeafAck>>(&mut r) {
        Ok(mut acks) => {
            // Every leaf of the subtree gets an answer, whatever the child sent.
            for leaf in hop.leaves() {
                if !acks.iter().any(|a| a.node == leaf) {
                    acks.push(LeafAck {
                        node: leaf,
                        ok: false,
                        error: Some(format!("{}: no acknowledgement", hop.name)),
                    });
                }
            }
            acks.retain(|a| hop.leaves().contains(&a.node));
            acks
        }
        Err(e) => failed(
            &hop,
            &format!("{} ({}): waiting for the ack: {e}", hop.name, hop.addr),
        ),
    }
}

/// Send `pieces` of the transfer described by `base` to `children`, each in its own thread behind a
/// bounded queue; return every leaf's ack, or the error that stopped the source.
fn forward(
    base: &Header,
    children: &[Hop],
    next_piece: &mut dyn FnMut(u64) -> io::Result<Piece>,
    stats: &Arc<NodeStats>,
) -> io::Result<Vec<LeafAck>> {
    let mut senders = Vec::with_capacity(children.len());
    let mut threads: Vec<JoinHandle<Vec<LeafAck>>> = Vec::with_capacity(children.len());
    for child in children {
        let (tx, rx) = sync_channel::<Arc<Held>>(QUEUE_PIECES);
        let header = Header {
            hop: child.clone(),
            ..base.clone()
        };
        let stats = Arc::clone(stats);
        threads.push(thread::spawn(move || child_stream(header, rx, stats)));
        senders.push(tx);
    }
    let mut source_error = None;
    for index in 0..base.pieces() {
        match next_piece(index) {
            Ok(piece) => {
                let held = Arc::new(Held::new(piece, stats));
                for tx in &senders {
                    // A child thread that ended has already reported its subtree as failed.
                    let _ = tx.send(Arc::clone(&held));
                }
            }
            Err(e) => {
                source_error = Some(e);
                break;
            }
        }
    }
    drop(senders);
    let mut acks = Vec::new();
    for (t, child) in threads.into_iter().zip(children) {
        acks.extend(
            t.join().unwrap_or_else(|_| {
                failed(child, &format!("{}: sender thread panicked", child.name))
            }),
        );
    }
    match source_error {
        Some(e) => Err(e),
        None => Ok(acks),
    }
}

/// At the root: send `object_bytes` bytes from `object` along the tree below the root (`children`),
/// in pieces of `piece_bytes`. Returns one ack per data node of the tree; `Err` only when reading
/// `object` fails (then nothing is acknowledged: the children see the stream end early).
pub fn send(
    transfer: &str,
    children: &[Hop],
    object: &mut dyn Read,
    object_bytes: u64,
    piece_bytes: u32,
    stats: &Arc<NodeStats>,
) -> io::Result<Vec<LeafAck>> {
    let base = Header {
        version: wire::VERSION,
        op: Op::Replicate,
        transfer: transfer.to_string(),
        object_bytes,
        piece_bytes,
        hop: Hop {
            name: String::new(),
            addr: String::new(),
            children: Vec::new(),
        },
    };
    if piece_bytes == 0 || piece_bytes > wire::PIECE_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "piece size {piece_bytes} outside 1..={}",
                wire::PIECE_BYTES_MAX
            ),
        ));
    }
    let mut next = |index: u64| {
        let mut payload = vec![0u8; base.piece_len(index) as usize];
        object.read_exact(&mut payload)?;
        Ok(Piece {
            hash: piece_hash(index, &payload),
            payload,
        })
    };
    forward(&base, children, &mut next, stats)
}

/// Most streams one node serves at once; more are refused (closed), and their senders report the
/// subtree failed.
pub const STREAMS_MAX: u64 = 512;

/// Accept streams on `listener` until it fails; one thread per connection, at most [`STREAMS_MAX`].
pub fn serve(listener: TcpListener, node: Arc<RelayNode>) -> JoinHandle<()> {
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            if node.stats.streams_open.fetch_add(1, Ordering::AcqRel) >= STREAMS_MAX {
                node.stats.streams_open.fetch_sub(1, Ordering::AcqRel);
                drop(conn);
                continue;
            }
            let node = Arc::clone(&node);
            thread::spawn(move || {
                let _ = handle(conn, &node);
                node.stats.streams_open.fetch_sub(1, Ordering::AcqRel);
            });
        }
    })
}

fn handle(conn: TcpStream, node: &RelayNode) -> io::Result<()> {
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    conn.set_nodelay(true)?;
    node.stats.streams.fetch_add(1, Ordering::Relaxed);
    let mut reader = BufReader::with_capacity(
        BUFFER_BYTES,
        Counting {
            inner: conn.try_clone()?,
            count: Arc::clone(&node.stats),
            inbound: true,
        },
    );
    let mut writer = Counting {
        inner: conn,
        count: Arc::clone(&node.stats),
        inbound: false,
    };
    let header: Header = wire::read_json(&mut reader)?;
    if let Err(why) = header.validate(&node.name) {
        let why = format!("{}: {why}", node.name);
        return match header.op {
            Op::Replicate => {
                // Read the stream to its end when it can be framed, so the sender gets the reason.
                if (1..=wire::PIECE_BYTES_MAX).contains(&header.piece_bytes) {
                    for index in 0..header.pieces() {
                        wire::read_piece(&mut reader, header.piece_len(index))?;
                    }
                }
                wire::write_json(&mut writer, &failed(&header.hop, &why))
            }
            Op::Xor => {
                writer.write_all(&u32::MAX.to_le_bytes())?;
                wire::write_json(&mut writer, &why)
            }
        };
    }
    if header.op == Op::Xor {
        return parity::serve_xor(&header, writer.inner, node);
    }
    let acks = if header.hop.children.is_empty() {
        store(&header, &mut reader, node)?
    } else {
        let mut next = |index: u64| wire::read_piece(&mut reader, header.piece_len(index));
        forward(&header, &header.hop.children, &mut next, &node.stats)?
    };
    wire::write_json(&mut writer, &acks)
}

/// At a data node: check every piece against the root's hash and store it; ack after `finish`.
/// A bad piece fails the copy, but the rest of the stream is still read so the ack gets through.
fn store(header: &Header, reader: &mut impl Read, node: &RelayNode) -> io::Result<Vec<LeafAck>> {
    let mut failure: Option<String> = None;
    let mut sink = match &node.sink {
        None => {
            failure = Some("a relay without storage was sent a copy".to_string());
            None
        }
        Some(open) => match open(header) {
            Ok(s) => Some(s),
            Err(e) => {
                failure = Some(format!("cannot open storage: {e}"));
                None
            }
        },
    };
    for index in 0..header.pieces() {
        let piece = wire::read_piece(reader, header.piece_len(index))?;
        if failure.is_some() {
            continue;
        }
        if piece_hash(index, &piece.payload) != piece.hash {
            failure = Some(format!("piece {index}: BLAKE3 mismatch"));
            sink = None;
            continue;
        }
        if let Some(s) = sink.as_mut() {
            if let Err(e) = s.write_piece(index, &piece.payload) {
                failure = Some(format!("storing piece {index}: {e}"));
                sink = None;
            }
        }
    }
    if let (None, Some(s)) = (&failure, sink) {
        if let Err(e) = s.finish() {
            failure = Some(format!("making the copy durable: {e}"));
        }
    }
    Ok(vec![LeafAck {
        node: node.name.clone(),
        ok: failure.is_none(),
        error: failure.map(|f| format!("{}: {f}", node.name)),
    }])
}
