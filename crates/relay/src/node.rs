//! The root's sender and the node-side server (relay or leaf), over blocking TCP with one thread per
//! connection and per child: simple, and the bounded channels give the memory bound directly.

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::auth::{self, Credentials, Secret, HANDSHAKE_TIMEOUT};
use crate::parity::{self, SourceFactory};
use crate::wire::{self, piece_hash, Header, Hop, LeafAck, Op, Piece};

/// Pieces queued per child before the stream waits for that child.
pub const QUEUE_PIECES: usize = 4;
/// A connection that moves nothing for this long fails (its subtree is reported failed).
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// After the last piece, a data node makes its copy durable before it answers; the ack is awaited
/// for [`IO_TIMEOUT`] plus the object's size at this rate (a node storing slower counts as failed):
/// 30 s + 64 s for 256 MiB.
pub const FINISH_BYTES_PER_S_MIN: u64 = 4 << 20;

/// How long a parent waits for an ack after the stream to the child stopped moving.
pub(crate) fn ack_patience(object_bytes: u64) -> Duration {
    IO_TIMEOUT + Duration::from_secs(object_bytes / FINISH_BYTES_PER_S_MIN)
}
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

/// Bytes on the connections to one peer (see [`NodeStats::peers`]).
#[derive(Debug, Default)]
pub struct PeerBytes {
    /// Bytes written to the peer: the link direction from this node to it.
    pub bytes_out: AtomicU64,
    /// Bytes read from the peer: the direction from it to this node.
    pub bytes_in: AtomicU64,
}

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
    /// Streams being served now (and connections in their handshake).
    pub streams_open: AtomicU64,
    /// Connections refused before their header: the peer did not prove the cluster secret.
    pub refused: AtomicU64,
    /// Bytes per peer this node opened connections to (its children in a tree, by topology name). Each
    /// connection is counted by the end that opened it (the parent), never by both, so the counts of all
    /// processes add up per link direction (what `permafrost_catalog::cluster::LinkUse` sums).
    pub peers: std::sync::Mutex<std::collections::BTreeMap<String, Arc<PeerBytes>>>,
}

impl NodeStats {
    /// The counters of the connections to `peer` (made on first use).
    pub fn peer(&self, peer: &str) -> Arc<PeerBytes> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(peers.entry(peer.to_string()).or_default())
    }

    /// `(peer, bytes to it, bytes from it)` for every peer so far, by name.
    pub fn peer_bytes(&self) -> Vec<(String, u64, u64)> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers
            .iter()
            .map(|(name, b)| {
                (
                    name.clone(),
                    b.bytes_out.load(Ordering::Relaxed),
                    b.bytes_in.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
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
    /// The cluster secret: a peer that does not prove it is refused before anything is read from it, and
    /// this node proves it to the children it connects to.
    pub secret: Secret,
}

impl RelayNode {
    /// How this node introduces itself to the children it connects to.
    pub(crate) fn credentials(&self) -> Credentials {
        Credentials {
            name: self.name.clone(),
            secret: self.secret.clone(),
        }
    }
}

pub(crate) struct Counting<T> {
    pub(crate) inner: T,
    pub(crate) count: Arc<NodeStats>,
    pub(crate) inbound: bool,
    /// The peer at the other end, on connections this node opened (see [`NodeStats::peers`]).
    pub(crate) peer: Option<Arc<PeerBytes>>,
}

impl<T: Read> Read for Counting<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(p) = &self.peer {
            p.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
}

impl<T: Write> Write for Counting<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let (counter, peer) = if self.inbound {
            (
                &self.count.bytes_in,
                self.peer.as_ref().map(|p| &p.bytes_in),
            )
        } else {
            (
                &self.count.bytes_out,
                self.peer.as_ref().map(|p| &p.bytes_out),
            )
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(p) = peer {
            p.fetch_add(n as u64, Ordering::Relaxed);
        }
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

/// Every leaf below `hop` failed because of `blame` (the hop itself, when it could not be reached or
/// broke the connection; `None` when the node that failed is the leaf itself).
fn failed_by(hop: &Hop, message: &str, blame: Option<&str>) -> Vec<LeafAck> {
    hop.leaves()
        .into_iter()
        .map(|node| LeafAck {
            node,
            ok: false,
            error: Some(message.to_string()),
            blame: blame.map(str::to_string),
        })
        .collect()
}

/// Every leaf below `hop` failed because `hop` did (unreachable, connection lost, no ack).
fn failed(hop: &Hop, message: &str) -> Vec<LeafAck> {
    failed_by(hop, message, Some(&hop.name))
}

/// Connect to the relay listener at `addr` and prove membership (`auth`): nothing is sent on a connection
/// whose server did not prove the cluster secret back.
pub(crate) fn connect(addr: &str, credentials: &Credentials) -> io::Result<TcpStream> {
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{addr} resolves to nothing"),
    );
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, IO_TIMEOUT) {
            Ok(mut s) => {
                s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
                s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
                s.set_nodelay(true)?;
                auth::connect(&mut s, credentials)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// When a connection last moved data (milliseconds since `base`): the ack reader waits as long as the
/// stream it answers is moving, and at most [`IO_TIMEOUT`] after it stopped.
struct Progress {
    base: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = self.base.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    fn idle(&self) -> Duration {
        let now = self.base.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Reads through socket timeouts until the stream in the other direction has not moved for `patience`.
struct Patient<R> {
    inner: R,
    progress: Arc<Progress>,
    patience: Duration,
}

impl<R: Read> Read for Patient<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) && self.progress.idle() < self.patience => {}
                other => return other,
            }
        }
    }
}

/// Stream the pieces from `rx` to one child and return its subtree's acks (all failed, with the
/// reason, if the child cannot be reached, the connection breaks, or the stream ends early).
///
/// The ack is read by a second thread while the pieces go out: a child whose whole subtree failed
/// answers at once (see [`handle`]), and then this stops sending to it and drops `rx`, so that a
/// parent none of whose children is left stops too (and answers its own parent early).
fn child_stream(
    header: Header,
    rx: Receiver<Arc<Held>>,
    stats: Arc<NodeStats>,
    credentials: Credentials,
) -> Vec<LeafAck> {
    let hop = header.hop.clone();
    let fail = |rx: Receiver<Arc<Held>>, what: String| {
        // Dropping the queue tells the parent this child takes no more pieces.
        drop(rx);
        failed(&hop, &format!("{} ({}): {what}", hop.name, hop.addr))
    };
    let conn = match connect(&hop.addr, &credentials) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return fail(rx, e.to_string()),
        Err(e) => return fail(rx, format!("cannot connect: {e}")),
    };
    let (writer, reader) = match (conn.try_clone(), conn.try_clone()) {
        (Ok(w), Ok(r)) => (w, r),
        (Err(e), _) | (_, Err(e)) => return fail(rx, e.to_string()),
    };
    let progress = Arc::new(Progress::new());
    let patience = ack_patience(header.object_bytes);
    let answered = Arc::new(AtomicBool::new(false));
    let ack_reader = {
        let peer = stats.peer(&hop.name);
        let progress = Arc::clone(&progress);
        let answered = Arc::clone(&answered);
        let stats = Arc::clone(&stats);
        thread::spawn(move || {
            let mut r = Patient {
                inner: Counting {
                    inner: reader,
                    count: stats,
                    inbound: true,
                    peer: Some(peer),
                },
                progress,
                patience,
            };
            let acks = wire::read_json::<Vec<LeafAck>>(&mut r);
            answered.store(true, Ordering::Release);
            acks
        })
    };
    let mut w = BufWriter::with_capacity(
        BUFFER_BYTES,
        Counting {
            inner: writer,
            count: Arc::clone(&stats),
            inbound: false,
            peer: Some(stats.peer(&hop.name)),
        },
    );
    let mut sent = 0u64;
    // The child answered (or closed) before the stream's end.
    let mut child_ended = false;
    let mut send_error = wire::write_json(&mut w, &header)
        .err()
        .map(|e| format!("sending the header: {e}"));
    if send_error.is_none() {
        while let Ok(held) = rx.recv() {
            if answered.load(Ordering::Acquire) {
                child_ended = true;
                break;
            }
            if let Err(e) = wire::write_piece(&mut w, &held.piece) {
                send_error = Some(format!("sending piece {sent}: {e}"));
                break;
            }
            sent += 1;
            progress.touch();
        }
    }
    if send_error.is_none() && sent == header.pieces() {
        if let Err(e) = w.flush() {
            send_error = Some(e.to_string());
        }
        progress.touch();
    }
    let early = sent < header.pieces();
    drop(rx);
    if early || send_error.is_some() {
        // The child answered early, the connection broke, or the stream above ended: the child sees
        // the end of the stream (and a broken connection ends the ack reader at once).
        let how = if send_error.is_some() {
            Shutdown::Both
        } else {
            Shutdown::Write
        };
        let _ = conn.shutdown(how);
    }
    let answer = ack_reader
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("ack reader panicked")));
    match (answer, send_error) {
        (Ok(mut acks), _) => {
            // Every leaf of the subtree gets an answer, whatever the child sent.
            for leaf in hop.leaves() {
                if !acks.iter().any(|a| a.node == leaf) {
                    acks.push(LeafAck {
                        node: leaf,
                        ok: false,
                        error: Some(format!("{}: no acknowledgement", hop.name)),
                        blame: Some(hop.name.clone()),
                    });
                }
            }
            acks.retain(|a| hop.leaves().contains(&a.node));
            if early {
                // No leaf below can hold a copy it did not receive in full.
                for a in acks.iter_mut().filter(|a| a.ok) {
                    a.ok = false;
                    a.error = Some(format!(
                        "{}: acknowledged after {sent} of {} pieces",
                        hop.name,
                        header.pieces()
                    ));
                    a.blame = Some(hop.name.clone());
                }
            }
            acks
        }
        (Err(_), Some(what)) => failed(&hop, &format!("{} ({}): {what}", hop.name, hop.addr)),
        (Err(_), None) if early && !child_ended => failed_by(
            &hop,
            &format!(
                "{}: the stream above it ended after {sent} pieces",
                hop.name
            ),
            // This node's own source ended: not the child's fault.
            None,
        ),
        (Err(e), None) if e.kind() == io::ErrorKind::UnexpectedEof => failed(
            &hop,
            &format!(
                "{} ({}): closed the connection without an ack",
                hop.name, hop.addr
            ),
        ),
        (Err(e), None) => failed(
            &hop,
            &format!("{} ({}): waiting for the ack: {e}", hop.name, hop.addr),
        ),
    }
}

/// Send `pieces` of the transfer described by `base` to `children`, each in its own thread behind a
/// bounded queue; return every leaf's ack and whether every piece was taken from the source (not
/// when every child failed first: then it stops early), or the error that stopped the source.
fn forward(
    base: &Header,
    children: &[Hop],
    next_piece: &mut dyn FnMut(u64) -> io::Result<Piece>,
    stats: &Arc<NodeStats>,
    credentials: &Credentials,
) -> io::Result<(Vec<LeafAck>, bool)> {
    let mut senders = Vec::with_capacity(children.len());
    let mut threads: Vec<JoinHandle<Vec<LeafAck>>> = Vec::with_capacity(children.len());
    for child in children {
        let (tx, rx) = sync_channel::<Arc<Held>>(QUEUE_PIECES);
        let header = Header {
            hop: child.clone(),
            ..base.clone()
        };
        let stats = Arc::clone(stats);
        let credentials = credentials.clone();
        threads.push(thread::spawn(move || {
            child_stream(header, rx, stats, credentials)
        }));
        senders.push(tx);
    }
    let mut source_error = None;
    let mut alive = vec![true; senders.len()];
    let mut complete = true;
    for index in 0..base.pieces() {
        if !alive.iter().any(|a| *a) {
            // Every child failed (each reported its subtree): reading on would only waste the links above.
            complete = false;
            break;
        }
        match next_piece(index) {
            Ok(piece) => {
                let held = Arc::new(Held::new(piece, stats));
                for (tx, alive) in senders.iter().zip(alive.iter_mut()) {
                    // A child thread that ended has already reported its subtree as failed.
                    if *alive && tx.send(Arc::clone(&held)).is_err() {
                        *alive = false;
                    }
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
        None => Ok((acks, complete)),
    }
}

/// At the root: send `object_bytes` bytes from `object` along the tree below the root (`children`),
/// in pieces of `piece_bytes`; `object_meta` travels in every header (a cluster copy's metadata). Every
/// connection proves `credentials` first. Returns one ack per data node of the tree; `Err` only when
/// reading `object` fails (then nothing is acknowledged: the children see the stream end early).
#[allow(clippy::too_many_arguments)]
pub fn send(
    transfer: &str,
    object_meta: Option<&wire::ObjectMeta>,
    children: &[Hop],
    object: &mut dyn Read,
    object_bytes: u64,
    piece_bytes: u32,
    stats: &Arc<NodeStats>,
    credentials: &Credentials,
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
        object: object_meta.cloned(),
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
    forward(&base, children, &mut next, stats, credentials).map(|(acks, _)| acks)
}

/// After refusing a peer, at most this much of what it still sends is read and dropped, bytes…
const REFUSED_DRAIN_BYTES_MAX: u64 = 64 << 10;
/// … for at most this long (so that closing does not reset the connection before the refusal arrives).
const REFUSED_DRAIN_TIME: Duration = Duration::from_secs(1);

/// Most streams one node serves at once; more are refused (closed), and their senders report the
/// subtree failed.
pub const STREAMS_MAX: u64 = 512;

/// Accept streams on `listener` until it fails; one thread per connection, at most [`STREAMS_MAX`]. Each
/// connection first proves the cluster secret ([`RelayNode::secret`]); a peer that does not is refused
/// before anything is read from it beyond the handshake, and one line names its address and the reason.
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

fn handle(mut conn: TcpStream, node: &RelayNode) -> io::Result<()> {
    conn.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    conn.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    conn.set_nodelay(true)?;
    if let Err(refusal) = auth::accept(&mut conn, &node.name, &node.secret) {
        node.stats.refused.fetch_add(1, Ordering::Relaxed);
        auth::log_refusal(&node.name, conn.peer_addr().ok(), &refusal.0);
        // Closing with unread bytes (an old sender's header) would reset the connection and lose the
        // refusal on its way: end the write side, then drop a bounded amount of what still arrives.
        let _ = conn.shutdown(Shutdown::Write);
        let _ = conn.set_read_timeout(Some(REFUSED_DRAIN_TIME));
        let _ = io::copy(&mut (&conn).take(REFUSED_DRAIN_BYTES_MAX), &mut io::sink());
        return Ok(());
    }
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    node.stats.streams.fetch_add(1, Ordering::Relaxed);
    let mut reader = BufReader::with_capacity(
        BUFFER_BYTES,
        Counting {
            inner: conn.try_clone()?,
            count: Arc::clone(&node.stats),
            inbound: true,
            peer: None,
        },
    );
    let mut writer = Counting {
        inner: conn,
        count: Arc::clone(&node.stats),
        inbound: false,
        peer: None,
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
                wire::write_json(&mut writer, &failed_by(&header.hop, &why, Some(&node.name)))
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
    if header.hop.children.is_empty() {
        let acks = store(&header, &mut reader, node)?;
        return wire::write_json(&mut writer, &acks);
    }
    let mut next = |index: u64| wire::read_piece(&mut reader, header.piece_len(index));
    let (acks, complete) = forward(
        &header,
        &header.hop.children,
        &mut next,
        &node.stats,
        &node.credentials(),
    )?;
    wire::write_json(&mut writer, &acks)?;
    if !complete {
        // Every child failed: the parent has the answer now and stops sending; take what is still on
        // its way until it closes, so that the connection ends cleanly (a reset would look like a
        // failure of this relay).
        writer.inner.shutdown(Shutdown::Write)?;
        io::copy(&mut reader, &mut io::sink())?;
    }
    Ok(())
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
        blame: None,
    }])
}
