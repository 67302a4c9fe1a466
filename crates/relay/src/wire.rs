//! The relay wire format, version 2 (all integers little-endian).
//!
//! ```text
//! connection  = handshake header piece* ← ack (the receiver answers with one ack after the last piece)
//! handshake   = the mutual proof of the cluster secret (`auth`); version 1 had none
//! header      = u32 length, JSON Header      (length ≤ HEADER_BYTES_MAX)
//! piece       = u32 length, [32] BLAKE3(u64 index ‖ payload), payload
//!               pieces 0..n in order, n = ceil(object_bytes / piece_bytes), each piece_bytes long but
//!               the last; the hash is computed once by the sender at the root
//! ack         = u32 length, JSON [LeafAck]   (one entry per data node of the receiver's subtree)
//! ```
//!
//! The sender reads the ack while it sends: a relay all of whose children failed sends its ack (every
//! leaf failed) before the last piece and then reads and drops what still arrives; the sender stops
//! and closes its side.
//!
//! For `op = "xor"` (a parity tree) the connecting parent sends only the header and the pieces flow
//! back on the same connection, each hashed by the node that sent it (data are combined on the way);
//! instead of a piece, a node may send `u32 0xFFFF_FFFF, u32 length, JSON string`: the error that
//! stopped its subtree.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// Wire format version (the handshake's too: version 1 had no handshake).
pub const VERSION: u32 = crate::auth::AUTH_VERSION;
/// Largest header or ack accepted, bytes.
pub const HEADER_BYTES_MAX: u32 = 1 << 20;
/// Largest piece accepted, bytes (bounds a relay's memory per queued piece).
pub const PIECE_BYTES_MAX: u32 = 16 << 20;

/// One hop of a transfer's tree: a node, where to reach it, and its subtree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// Node name (as in the topology).
    pub name: String,
    /// `host:port` of its relay listener.
    pub addr: String,
    /// The hops below it; empty for a data node at a leaf.
    pub children: Vec<Hop>,
}

impl Hop {
    /// The data nodes (leaves) of this subtree, in order.
    pub fn leaves(&self) -> Vec<String> {
        if self.children.is_empty() {
            return vec![self.name.clone()];
        }
        self.children.iter().flat_map(Hop::leaves).collect()
    }
}

/// What a stream does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Replication: pieces flow from the connecting parent down to the data nodes, which store them.
    #[default]
    Replicate,
    /// Parity: the parent connects and sends the header; pieces flow back up: data nodes read theirs,
    /// relays XOR their children's, the root receives the XOR of all.
    Xor,
}

/// What the sender tells each receiver before the pieces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// [`VERSION`].
    pub version: u32,
    /// Which way the pieces flow and what relays do with them.
    #[serde(default)]
    pub op: Op,
    /// The transfer's id (chosen by the root; names the object at the leaves).
    pub transfer: String,
    /// Object size, bytes.
    pub object_bytes: u64,
    /// Piece size, bytes (1..=PIECE_BYTES_MAX).
    pub piece_bytes: u32,
    /// The receiver itself and its subtree.
    pub hop: Hop,
    /// The object a replication stream carries, as the root holds it (a cluster copy keeps the origin's
    /// bucket, key, ETag, last modified and metadata); absent for `permafrost relay send` (the transfer
    /// names the object). Optional on the wire: senders and receivers of before it interoperate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectMeta>,
}

/// What a data node needs to store a copy that is the same object as the origin's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub bucket: String,
    pub key: String,
    /// The origin's ETag (a multipart `md5-N` one too), kept as it is.
    pub etag: String,
    /// The origin's last-modified time, ms since the epoch.
    pub last_modified_ms: u64,
    #[serde(default)]
    pub content_type: Option<String>,
    /// `x-amz-meta-*` pairs, names without the prefix.
    #[serde(default)]
    pub user_metadata: Vec<(String, String)>,
    /// Stored headers, tags, storage class and Object Lock (the store's attributes, as JSON).
    #[serde(default)]
    pub attributes: Option<serde_json::Value>,
}

impl Header {
    /// Number of pieces.
    pub fn pieces(&self) -> u64 {
        self.object_bytes.div_ceil(u64::from(self.piece_bytes))
    }

    /// Length of piece `index`.
    pub fn piece_len(&self, index: u64) -> u32 {
        let start = index * u64::from(self.piece_bytes);
        (self.object_bytes - start).min(u64::from(self.piece_bytes)) as u32
    }

    /// Refuse a header this build cannot serve.
    pub fn validate(&self, own_name: &str) -> Result<(), String> {
        if self.version != VERSION {
            return Err(format!(
                "wire version {} (this build speaks {VERSION})",
                self.version
            ));
        }
        if self.piece_bytes == 0 || self.piece_bytes > PIECE_BYTES_MAX {
            return Err(format!(
                "piece size {} outside 1..={PIECE_BYTES_MAX}",
                self.piece_bytes
            ));
        }
        if self.hop.name != own_name {
            return Err(format!(
                "stream for {:?} reached {own_name:?}",
                self.hop.name
            ));
        }
        Ok(())
    }
}

/// The outcome at one data node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafAck {
    /// Data node name.
    pub node: String,
    /// Every piece arrived, matched its hash and the copy is durable.
    pub ok: bool,
    /// Why not, when not.
    pub error: Option<String>,
    /// When not ok: the relay or data node that failed (could not be reached, broke the connection,
    /// sent no ack), as seen by its parent; `None` when the data node itself refused or failed the copy
    /// (corrupt piece, storage error). A retry avoids the blamed node (or the data node itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blame: Option<String>,
}

/// The hash that travels with piece `index`.
pub fn piece_hash(index: u64, payload: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&index.to_le_bytes());
    h.update(payload);
    *h.finalize().as_bytes()
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Write a length-prefixed JSON message.
pub fn write_json<T: Serialize>(w: &mut impl Write, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(|e| bad(e.to_string()))?;
    w.write_all(&(bytes.len() as u32).to_le_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

/// Read a length-prefixed JSON message.
pub fn read_json<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > HEADER_BYTES_MAX {
        return Err(bad(format!(
            "message of {len} bytes exceeds {HEADER_BYTES_MAX}"
        )));
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes)?;
    serde_json::from_slice(&bytes).map_err(|e| bad(format!("bad message: {e}")))
}

/// One piece as it travels: payload and the root's hash.
#[derive(Debug)]
pub struct Piece {
    /// BLAKE3 of index ‖ payload, computed at the root.
    pub hash: [u8; 32],
    /// The bytes.
    pub payload: Vec<u8>,
}

/// Write one piece frame.
pub fn write_piece(w: &mut impl Write, piece: &Piece) -> io::Result<()> {
    w.write_all(&(piece.payload.len() as u32).to_le_bytes())?;
    w.write_all(&piece.hash)?;
    w.write_all(&piece.payload)
}

/// Read one piece frame, expecting `len` payload bytes (the hash is not checked here).
pub fn read_piece(r: &mut impl Read, len: u32) -> io::Result<Piece> {
    let mut prefix = [0u8; 36];
    r.read_exact(&mut prefix)?;
    let found = u32::from_le_bytes(prefix[..4].try_into().expect("4 bytes"));
    if found != len {
        return Err(bad(format!("piece of {found} bytes where {len} were due")));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    Ok(Piece {
        hash: prefix[4..].try_into().expect("32 bytes"),
        payload,
    })
}
