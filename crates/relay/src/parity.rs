//! Parity trees on the wire: data nodes send their pieces up, relays XOR their children's streams,
//! the rebuilding root receives one stream, the XOR of all.
//!
//! Each hop hashes what it sends (the data change at every relay) and each receiver checks every
//! piece of every child; the root returns the BLAKE3 of the rebuilt object for the caller to compare
//! with the catalog's. Memory per relay stream: at most `QUEUE_PIECES + 1` pieces per child plus one.

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread;

use crate::auth::Credentials;
use crate::node::{connect, Counting, NodeStats, RelayNode, BUFFER_BYTES, QUEUE_PIECES};
use crate::wire::{self, piece_hash, Header, Hop, Op, Piece};

/// Opens the stored bytes a data node contributes to a parity rebuild (`object_bytes` long).
pub type SourceFactory = Arc<dyn Fn(&Header) -> io::Result<Box<dyn Read + Send>> + Send + Sync>;

const ERROR_FRAME: u32 = u32::MAX;

fn write_error(w: &mut impl Write, message: &str) -> io::Result<()> {
    w.write_all(&ERROR_FRAME.to_le_bytes())?;
    wire::write_json(w, &message)
}

/// One piece from below, or the error a node below reported.
fn read_up(r: &mut impl Read, len: u32) -> Result<Piece, String> {
    let mut prefix = [0u8; 4];
    r.read_exact(&mut prefix).map_err(|e| e.to_string())?;
    let found = u32::from_le_bytes(prefix);
    if found == ERROR_FRAME {
        return Err(wire::read_json::<String>(r).unwrap_or_else(|e| e.to_string()));
    }
    if found != len {
        return Err(format!("piece of {found} bytes where {len} were due"));
    }
    let mut hash = [0u8; 32];
    r.read_exact(&mut hash).map_err(|e| e.to_string())?;
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload).map_err(|e| e.to_string())?;
    Ok(Piece { hash, payload })
}

/// Connect to one child, send it the header, and pass its checked pieces (or its error) on.
fn child_up(
    header: Header,
    tx: SyncSender<Result<Vec<u8>, String>>,
    stats: Arc<NodeStats>,
    credentials: Credentials,
) {
    let hop = header.hop.clone();
    let context = |what: String| format!("{} ({}): {what}", hop.name, hop.addr);
    let conn = match connect(&hop.addr, &credentials) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let _ = tx.send(Err(context(e.to_string())));
            return;
        }
        Err(e) => {
            let _ = tx.send(Err(context(format!("cannot connect: {e}"))));
            return;
        }
    };
    let sent = conn.try_clone().and_then(|w| {
        let mut w = Counting {
            inner: w,
            count: Arc::clone(&stats),
            inbound: false,
            peer: Some(stats.peer(&hop.name)),
        };
        wire::write_json(&mut w, &header)
    });
    if let Err(e) = sent {
        let _ = tx.send(Err(context(format!("sending the header: {e}"))));
        return;
    }
    let mut r = BufReader::with_capacity(
        BUFFER_BYTES,
        Counting {
            inner: conn,
            peer: Some(stats.peer(&hop.name)),
            count: stats,
            inbound: true,
        },
    );
    for index in 0..header.pieces() {
        let item = match read_up(&mut r, header.piece_len(index)) {
            Ok(p) if piece_hash(index, &p.payload) == p.hash => Ok(p.payload),
            Ok(_) => Err(context(format!("piece {index}: BLAKE3 mismatch"))),
            // An error from further down already names where it happened.
            Err(m) => Err(context(m)),
        };
        let stop = item.is_err();
        if tx.send(item).is_err() || stop {
            return;
        }
    }
}

/// Gather the XOR of `children`'s streams piece by piece and hand each combined piece to `emit`.
fn gather(
    base: &Header,
    children: &[Hop],
    stats: &Arc<NodeStats>,
    credentials: &Credentials,
    emit: &mut dyn FnMut(u64, Vec<u8>) -> Result<(), String>,
) -> Result<(), String> {
    let receivers: Vec<_> = children
        .iter()
        .map(|child| {
            let (tx, rx) = sync_channel(QUEUE_PIECES);
            let header = Header {
                hop: child.clone(),
                ..base.clone()
            };
            let stats = Arc::clone(stats);
            let credentials = credentials.clone();
            thread::spawn(move || child_up(header, tx, stats, credentials));
            rx
        })
        .collect();
    for index in 0..base.pieces() {
        let mut combined: Option<Vec<u8>> = None;
        for (rx, child) in receivers.iter().zip(children) {
            let payload = rx
                .recv()
                .map_err(|_| format!("{}: stream ended early", child.name))??;
            match combined.as_mut() {
                None => combined = Some(payload),
                Some(acc) => acc.iter_mut().zip(&payload).for_each(|(a, b)| *a ^= b),
            }
        }
        emit(index, combined.unwrap_or_default())?;
    }
    Ok(())
}

/// At a relay or data node: serve one parity stream on `w` (the connection to the parent).
pub(crate) fn serve_xor(header: &Header, w: TcpStream, node: &RelayNode) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(
        BUFFER_BYTES,
        Counting {
            inner: w,
            count: Arc::clone(&node.stats),
            inbound: false,
            peer: None,
        },
    );
    let outcome = if header.hop.children.is_empty() {
        send_own(header, &mut w, node)
    } else {
        let mut emit = |index: u64, payload: Vec<u8>| {
            let piece = Piece {
                hash: piece_hash(index, &payload),
                payload,
            };
            wire::write_piece(&mut w, &piece).map_err(|e| format!("sending up: {e}"))
        };
        gather(
            header,
            &header.hop.children,
            &node.stats,
            &node.credentials(),
            &mut emit,
        )
    };
    if let Err(message) = outcome {
        write_error(&mut w, &format!("{}: {message}", node.name))?;
    }
    w.flush()
}

/// At a data node: send its own bytes up, hashed per piece.
fn send_own(header: &Header, w: &mut impl Write, node: &RelayNode) -> Result<(), String> {
    let open = node
        .source
        .as_ref()
        .ok_or("a relay without storage was asked for a piece")?;
    let mut source = open(header).map_err(|e| format!("cannot open the piece: {e}"))?;
    for index in 0..header.pieces() {
        let mut payload = vec![0u8; header.piece_len(index) as usize];
        source
            .read_exact(&mut payload)
            .map_err(|e| format!("reading piece {index}: {e}"))?;
        let piece = Piece {
            hash: piece_hash(index, &payload),
            payload,
        };
        wire::write_piece(w, &piece).map_err(|e| format!("sending piece {index}: {e}"))?;
    }
    Ok(())
}

/// At the rebuilding root: receive the XOR of the pieces held below it (`children`: the parity tree
/// below the root) and write it to `out`. Returns the BLAKE3 of the rebuilt object (compare it with
/// the catalog's before using it); `Err` names the node and piece that failed. Every connection proves
/// `credentials` first.
pub fn rebuild(
    transfer: &str,
    children: &[Hop],
    object_bytes: u64,
    piece_bytes: u32,
    out: &mut dyn Write,
    stats: &Arc<NodeStats>,
    credentials: &Credentials,
) -> io::Result<[u8; 32]> {
    if piece_bytes == 0 || piece_bytes > wire::PIECE_BYTES_MAX || children.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a rebuild needs children and a piece size in 1..={}",
                wire::PIECE_BYTES_MAX
            ),
        ));
    }
    let base = Header {
        version: wire::VERSION,
        op: Op::Xor,
        transfer: transfer.to_string(),
        object_bytes,
        piece_bytes,
        object: None,
        hop: Hop {
            name: String::new(),
            addr: String::new(),
            children: Vec::new(),
        },
    };
    let mut whole = blake3::Hasher::new();
    let mut emit = |_: u64, payload: Vec<u8>| {
        whole.update(&payload);
        out.write_all(&payload)
            .map_err(|e| format!("writing the rebuilt object: {e}"))
    };
    gather(&base, children, stats, credentials, &mut emit).map_err(io::Error::other)?;
    Ok(*whole.finalize().as_bytes())
}
