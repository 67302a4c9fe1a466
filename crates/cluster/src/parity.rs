//! Cross-node XOR parity as a bucket's redundancy (issue 13; `docs/cluster.md` "Cross-node XOR parity").
//!
//! An object of `n` bytes in a bucket with `parity = xor` is held as three fragments of `h = ceil(n / 2)` bytes
//! on three distinct nodes: `a` = bytes `[0, h)`, `b` = bytes `[h, n)` zero-padded to `h`, `p = a ⊕ b` (Fig. 4.2
//! of seed 003). Any two give the third.
//!
//! - **Write** ([`place`]): after the local commit, the receiving node streams the three fragments (read from
//!   its store, `p` computed on the fly) to three nodes that are up (rendezvous-hashed, the receiving node may be
//!   one) through their in-process relays; each holder stores its fragment as the internal object
//!   [`FRAGMENTS_BUCKET`]/[`fragment_key`] and acknowledges it durable. Then one directory transaction publishes
//!   the fragments (with their BLAKE3) and the object (`ClusterDb::publish_parity`), and only then does the node
//!   drop its whole copy and answer the client. Fewer than three nodes able to take a fragment: the whole copy
//!   stays and the object is recorded under-replicated (the catch-up places it later).
//! - **Read** (the S3 layer's GET and HEAD, through [`ways`] and [`fetch_fragment`]): any node. Each half the request needs (`a`, `b`, or both; [`plan`]) is fetched
//!   from its holder through a one-source parity rebuild, or, when that holder is down or fails before its first
//!   byte, rebuilt as the XOR of the other two through a parity tree rooted at the reading node
//!   (`permafrost_relay::rebuild`: every piece BLAKE3-checked on the wire). The half's BLAKE3 is compared with
//!   the directory's before the body's last bytes go out: a mismatch cuts the body (never a whole wrong answer).
//!   A range reads whole halves and skips what is outside it.
//! - **Lost node** ([`rebuild_lost`]): each fragment a lost node held is rebuilt by the first node (by name) that
//!   is up and holds no fragment of that object, from the other two, checked against the directory, stored, and
//!   moved to it in the directory (the lost node gets a tombstone for it). When no node is free (three nodes,
//!   each holding a fragment), the object is kept at the best redundancy two nodes allow: each surviving holder
//!   rebuilds it whole and publishes a whole copy, then the object switches to them (its fragments go) and is
//!   recorded under-replicated for parity, the state of a write that found fewer than three nodes; the
//!   catch-up re-encodes it into fragments (dropping the whole copies) once three nodes are up.
//!   [`rebuild_plan`] says which of the two happens (`permafrost cluster rebuild`).
//! - **Sources**: [`fragment_source`] is the in-process relay's `SourceFactory`: the transfer id of a parity
//!   stream names the object's fragment prefix and which role each node sends (`node=role,…|prefix`).

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use permafrost_catalog::cluster::{
    fragment_key, fragment_prefix, Health, NewFragment, NodeInfo, ParityObject, UnderReplicated,
    FRAGMENTS_BUCKET,
};
use permafrost_relay::{Hop, ObjectMeta, SourceFactory};
use permafrost_store::{ByteRange, Store};

use crate::decide::Way;
use crate::node::{ClusterNode, COPY_PIECE_BYTES};
use crate::ClusterError;

/// The value of `buckets.parity` for cross-node XOR parity.
pub const XOR: &str = "xor";
/// The roles of the three fragments, in placement order.
pub const ROLES: [&str; 3] = ["a", "b", "p"];

/// Bytes of each fragment of an object of `n` bytes.
pub fn half(n: u64) -> u64 {
    n.div_ceil(2)
}

/// The three fragments of `object` (a, b zero-padded, a ⊕ b), each [`half`] long.
pub fn split(object: &[u8]) -> [Vec<u8>; 3] {
    let h = half(object.len() as u64) as usize;
    let a = object[..h].to_vec();
    let mut b = object[h..].to_vec();
    b.resize(h, 0);
    let p = a.iter().zip(&b).map(|(x, y)| x ^ y).collect();
    [a, b, p]
}

/// What a read of bytes `first..=last` (within an object of `n > 0` bytes) needs: per half (`a`, `b`), the bytes
/// of the half to skip and then to take. Halves the range does not touch are left out.
pub fn plan(n: u64, first: u64, last: u64) -> Vec<(&'static str, u64, u64)> {
    let h = half(n);
    let mut out = Vec::new();
    if first < h {
        out.push(("a", first, last.min(h - 1) - first + 1));
    }
    if last >= h {
        let from = first.max(h) - h;
        out.push(("b", from, last - h - from + 1));
    }
    out
}

/// The XOR of the two fragments the reader's two sources give (each `h` bytes).
struct XorReader<A, B> {
    a: A,
    b: B,
    scratch: Vec<u8>,
}

impl<A: Read, B: Read> Read for XorReader<A, B> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.a.read(buf)?;
        self.scratch.resize(n, 0);
        self.b.read_exact(&mut self.scratch)?;
        buf[..n]
            .iter_mut()
            .zip(&self.scratch)
            .for_each(|(x, y)| *x ^= y);
        Ok(n)
    }
}

/// Hashes what passes through.
struct Hashing<R> {
    inner: R,
    hasher: Arc<Mutex<blake3::Hasher>>,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .update(&buf[..n]);
        Ok(n)
    }
}

/// Bytes `[from, from + len)` of the object as this store holds it, at version (`etag`, `lm`).
fn open_span(
    store: &Store,
    bucket: &str,
    key: &str,
    from: u64,
    len: u64,
    version: (&str, u64),
) -> io::Result<Box<dyn Read>> {
    if len == 0 {
        return Ok(Box::new(io::empty()));
    }
    let (now, reader) = store
        .open_object(
            bucket,
            key,
            Some(ByteRange::FromTo(from, from + len - 1)),
            None,
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
    if now.etag != version.0 || now.last_modified_ms != version.1 {
        return Err(io::Error::other(
            "a newer version replaced it meanwhile (that write places its own fragments)",
        ));
    }
    Ok(Box::new(reader))
}

/// A reader of fragment `role` of the object (`n` bytes) this store holds.
fn open_fragment(
    store: &Store,
    bucket: &str,
    key: &str,
    n: u64,
    role: &str,
    version: (&str, u64),
) -> io::Result<Box<dyn Read>> {
    let h = half(n);
    let padded_b = |store: &Store| -> io::Result<Box<dyn Read>> {
        let b = open_span(store, bucket, key, h, n - h, version)?;
        Ok(Box::new(b.chain(io::repeat(0).take(h - (n - h)))))
    };
    match role {
        "a" => open_span(store, bucket, key, 0, h, version),
        "b" => padded_b(store),
        _ => Ok(Box::new(XorReader {
            a: open_span(store, bucket, key, 0, h, version)?,
            b: padded_b(store)?,
            scratch: Vec::new(),
        })),
    }
}

/// The rendezvous order of `nodes` for `object` (the same on every node).
fn ranked(object: &str, mut nodes: Vec<(i64, String, String)>) -> Vec<(i64, String, String)> {
    nodes.sort_by_key(|(_, name, _)| {
        (
            crate::node::fnv1a(&[object.as_bytes(), b"\0", name.as_bytes()]),
            name.clone(),
        )
    });
    nodes
}

/// Place the fragments of the version of `bucket/key` this node holds (`expect`: only when it is that version):
/// see the module doc. Returns the holders after it as `replicate_blocking` counts them: 3 when placed, else the
/// whole copy's 1 (0 when this node no longer holds that version).
pub(crate) fn place(
    node: &ClusterNode,
    store: &Store,
    bucket: &str,
    key: &str,
    expect: Option<&UnderReplicated>,
) -> Result<usize, ClusterError> {
    let Some((info, entry)) = crate::node::local_version(store, bucket, key, expect, "fragments")?
    else {
        return Ok(0);
    };
    if info.version_id != permafrost_catalog::NULL_VERSION {
        if expect.is_some() {
            tracing::debug!(
                "cluster: {bucket}/{key}: a version of a versioned bucket stays whole on this node (parity covers unversioned buckets only)"
            );
        } else {
            tracing::warn!(
                "cluster: {bucket}/{key}: a version of a versioned bucket stays whole on this node (parity covers unversioned buckets only)"
            );
        }
        return Ok(1);
    }
    let started = Instant::now();
    let relays: std::collections::BTreeMap<String, String> =
        node.db.relay_addresses()?.into_iter().collect();
    let up: Vec<(i64, String, String)> = node
        .db
        .nodes()?
        .into_iter()
        .filter(|n| n.health == Health::Up)
        .filter_map(|n| relays.get(&n.name).map(|a| (n.id, n.name, a.clone())))
        .collect();
    // The whole copies of this version (this node's, and those kept after a lost node: `rebuild_lost`).
    let whole = node
        .db
        .holders(bucket, key)?
        .iter()
        .filter(|(_, e)| e.etag == entry.etag && e.last_modified_ms == entry.last_modified_ms)
        .count()
        .max(1);
    if !crate::decide::xor_placeable(up.len()) {
        // Nothing to send: fragments on fewer than three nodes would only be left over.
        node.db.record_copies(&entry, 3, whole as u32)?;
        let line = format!(
            "cluster: {bucket}/{key}: only {} node(s) up to take its 3 fragments; kept as {whole} whole cop{}, {}",
            up.len(),
            if whole == 1 { "y" } else { "ies" },
            if expect.is_some() { "still under-replicated" } else { "recorded as under-replicated" }
        );
        // A catch-up pass repeats this per object: its summary carries the count.
        if expect.is_some() {
            tracing::debug!("{line}");
        } else {
            tracing::warn!("{line}");
        }
        return Ok(whole);
    }
    let object = format!("{bucket}/{key}");
    let mut candidates = ranked(&object, up).into_iter();
    let n = info.size_bytes;
    let h = half(n);
    let version = (info.etag.as_str(), info.last_modified_ms);
    let send_one = |role: &str, target: &(i64, String, String)| -> Result<String, String> {
        let fkey = fragment_key(bucket, key, &info.etag, role);
        let meta = ObjectMeta {
            bucket: FRAGMENTS_BUCKET.to_owned(),
            key: fkey.clone(),
            etag: info.etag.clone(),
            last_modified_ms: info.last_modified_ms,
            ..ObjectMeta::default()
        };
        let hasher = Arc::new(Mutex::new(blake3::Hasher::new()));
        let reader =
            open_fragment(store, bucket, key, n, role, version).map_err(|e| e.to_string())?;
        let mut reader = Hashing {
            inner: reader,
            hasher: Arc::clone(&hasher),
        };
        let hop = Hop {
            name: target.1.clone(),
            addr: target.2.clone(),
            children: Vec::new(),
        };
        let acks = permafrost_relay::send(
            &format!("{fkey}@{}", info.last_modified_ms),
            Some(&meta),
            &[hop],
            &mut reader,
            h,
            COPY_PIECE_BYTES,
            &node.replication.stats,
            &node.replication.credentials,
        )
        .map_err(|e| e.to_string())?;
        match acks.into_iter().find(|a| a.node == target.1) {
            Some(a) if a.ok => {
                let hash = hasher.lock().unwrap_or_else(|p| p.into_inner()).finalize();
                Ok(hash.to_hex().to_string())
            }
            Some(a) => Err(a.error.unwrap_or_else(|| "failed".into())),
            None => Err("no acknowledgement".into()),
        }
    };
    // The three in order, each on the next candidate; a failed one is retried on the next candidate.
    let mut placed: Vec<(NewFragment, String)> = Vec::new();
    let mut why: Vec<String> = Vec::new();
    for role in ROLES {
        loop {
            let Some(target) = candidates.next() else {
                why.push(format!("fragment {role}: no other node up to take it"));
                break;
            };
            match send_one(role, &target) {
                Ok(blake3) => {
                    placed.push((
                        NewFragment {
                            role: role.to_owned(),
                            node_id: target.0,
                            blake3,
                        },
                        target.1,
                    ));
                    break;
                }
                Err(e) => why.push(format!("fragment {role} to {}: {e}", target.1)),
            }
        }
    }
    let names = placed
        .iter()
        .map(|(f, name)| format!("{}={name}", f.role))
        .collect::<Vec<_>>()
        .join(", ");
    if placed.len() < ROLES.len() {
        node.db.record_copies(&entry, 3, whole as u32)?;
        // A catch-up pass repeats this per object: its summary carries the count.
        if expect.is_some() {
            tracing::debug!(
                "cluster: {bucket}/{key}: {} of 3 fragments placed ({names}) in {:.3} s; the whole copy stays here, still under-replicated: {}",
                placed.len(),
                started.elapsed().as_secs_f64(),
                why.join("; ")
            );
        } else {
            tracing::warn!(
                "cluster: {bucket}/{key}: {} of 3 fragments placed ({names}) in {:.3} s; the whole copy stays here, recorded as under-replicated: {}",
                placed.len(),
                started.elapsed().as_secs_f64(),
                why.join("; ")
            );
        }
        return Ok(whole);
    }
    let meta = serde_json::json!({
        "content_type": info.content_type,
        "user_metadata": info.user_metadata,
    })
    .to_string();
    let fragments: Vec<NewFragment> = placed.into_iter().map(|(f, _)| f).collect();
    if !node
        .db
        .publish_parity(node.node_id, &entry, &meta, &fragments)?
    {
        tracing::info!("cluster: {bucket}/{key}: a newer version was published meanwhile; its fragments are dropped");
        return Ok(0);
    }
    node.db.record_copies(&entry, 3, 3)?;
    // The directory no longer names the whole copy: drop it (unless a newer local version replaced it).
    match store.head_object(bucket, key) {
        Ok(now) if now.etag == info.etag && now.last_modified_ms == info.last_modified_ms => {
            if let Err(e) = store.delete_object(bucket, key) {
                tracing::warn!("cluster: {bucket}/{key}: dropping the whole copy failed: {e}");
            }
        }
        _ => {}
    }
    tracing::info!(
        "cluster: {bucket}/{key}: 3 fragments of {h} bytes ({names}) in {:.3} s{}",
        started.elapsed().as_secs_f64(),
        if why.is_empty() {
            String::new()
        } else {
            format!(" (retried after: {})", why.join("; "))
        }
    );
    Ok(3)
}

/// The transfer id of a parity stream for the fragments of `prefix` (`bucket/key/etag`): which role each
/// source node sends.
fn transfer_id(prefix: &str, sources: &[(&str, &str)]) -> String {
    let map = sources
        .iter()
        .map(|(node, role)| format!("{node}={role}"))
        .collect::<Vec<_>>()
        .join(",");
    format!("{map}|{prefix}")
}

/// The in-process relay's source for parity streams: the fragment of the object the transfer names that this
/// node (`header.hop.name`) is to send, from its store (see the module doc).
pub fn fragment_source(store: Arc<Mutex<Option<Arc<Store>>>>) -> SourceFactory {
    Arc::new(move |header: &permafrost_relay::Header| {
        let Some(store) = store.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Err(io::Error::other("this node is stopping"));
        };
        let (map, prefix) = header
            .transfer
            .split_once('|')
            .ok_or_else(|| io::Error::other("not a fragment transfer"))?;
        let role = map
            .split(',')
            .filter_map(|e| e.split_once('='))
            .find(|(n, _)| *n == header.hop.name)
            .map(|(_, r)| r.to_owned())
            .ok_or_else(|| {
                io::Error::other(format!(
                    "the transfer names no fragment of {}",
                    header.hop.name
                ))
            })?;
        let key = format!("{prefix}/{role}");
        let info = store
            .head_object(FRAGMENTS_BUCKET, &key)
            .map_err(|e| io::Error::other(format!("fragment {key}: {e}")))?;
        if info.size_bytes != header.object_bytes {
            return Err(io::Error::other(format!(
                "fragment {key} holds {} bytes, not {}",
                info.size_bytes, header.object_bytes
            )));
        }
        permafrost_relay::pipe_source(header.object_bytes, move |w| {
            let (_, mut reader) = store
                .open_object(FRAGMENTS_BUCKET, &key, None, None)
                .map_err(|e| io::Error::other(format!("fragment {key}: {e}")))?;
            io::copy(&mut reader, w)?;
            Ok(())
        })
    })
}

/// One source of a parity stream: (node name, relay address, role it sends).
pub type Source = (String, String, String);

/// Where half `role` of `obj` comes from, in the order to try: the holder itself, then the other two combined.
/// Each way is the list of (node name, relay address, role it sends). `Err`: no way (the nodes down named).
pub fn ways(
    obj: &ParityObject,
    role: &str,
    relays: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<Vec<Source>>, String> {
    let usable = |f: &permafrost_catalog::cluster::Fragment| {
        f.node.health == Health::Up && relays.contains_key(&f.node.name)
    };
    let src = |f: &permafrost_catalog::cluster::Fragment| {
        (
            f.node.name.clone(),
            relays.get(&f.node.name).cloned().unwrap_or_default(),
            f.role.clone(),
        )
    };
    let mut out = Vec::new();
    let own = obj.fragments.iter().find(|f| f.role == role);
    if let Some(f) = own.filter(|f| usable(f)) {
        out.push(vec![src(f)]);
    }
    let others: Vec<_> = obj.fragments.iter().filter(|f| f.role != role).collect();
    if others.len() == 2 && others.iter().all(|f| usable(f)) {
        out.push(others.iter().map(|f| src(f)).collect());
    }
    if out.is_empty() {
        let down: Vec<String> = obj
            .fragments
            .iter()
            .filter(|f| !usable(f))
            .map(|f| {
                format!(
                    "node {} (fragment {}, last heartbeat {} s ago)",
                    f.node.name,
                    f.role,
                    f.node.heartbeat_age_ms / 1000
                )
            })
            .collect();
        return Err(format!(
            "{}/{} is held as XOR fragments and two of its three holders are unavailable: {}; try again when one is back",
            obj.entry.bucket,
            obj.entry.key,
            if down.is_empty() { "fragments missing from the directory".to_owned() } else { down.join(", ") }
        ));
    }
    Ok(out)
}

/// Stream fragment `role` of `obj` (whole, `half(n)` bytes) into `out` through a parity tree rooted here (a star
/// of the sources), trying each way in turn while nothing was written. Returns the BLAKE3 of what was written.
pub fn fetch_fragment(
    node: &ClusterNode,
    obj: &ParityObject,
    role: &str,
    relays: &std::collections::BTreeMap<String, String>,
    out: &mut dyn Write,
) -> Result<[u8; 32], String> {
    let h = half(obj.entry.size_bytes);
    let prefix = fragment_prefix(&obj.entry.bucket, &obj.entry.key, &obj.entry.etag);
    let mut errors = Vec::new();
    for way in ways(obj, role, relays)? {
        let sources: Vec<(&str, &str)> = way
            .iter()
            .map(|(n, _, r)| (n.as_str(), r.as_str()))
            .collect();
        let (hops, shape) = match (way.len() > 1).then(|| parity_hops(node, &way, relays)) {
            Some(Some(tree)) => tree,
            _ => (
                way.iter()
                    .map(|(n, a, _)| Hop {
                        name: n.clone(),
                        addr: a.clone(),
                        children: Vec::new(),
                    })
                    .collect(),
                "direct".to_owned(),
            ),
        };
        let mut counted = Counted {
            inner: &mut *out,
            written: 0,
        };
        match permafrost_relay::rebuild(
            &transfer_id(&prefix, &sources),
            &hops,
            h,
            COPY_PIECE_BYTES,
            &mut counted,
            &node.replication.stats,
            &node.replication.credentials,
        ) {
            Ok(hash) => {
                if way.len() > 1 {
                    tracing::info!(
                        "cluster: rebuilt fragment {role} of {}/{} ({shape}) from {}",
                        obj.entry.bucket,
                        obj.entry.key,
                        way.iter()
                            .map(|(n, _, r)| format!("{r}@{n}"))
                            .collect::<Vec<_>>()
                            .join(" ⊕ ")
                    );
                }
                return Ok(hash);
            }
            Err(e) if counted.written == 0 => errors.push(e.to_string()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(errors.join("; "))
}

/// The parity tree rooted at this node that reaches the sources of `way`, on the live topology (or this node's
/// topology file); `None` when there is no topology naming this node and the sources, or no tree in it (then the
/// caller connects to the sources directly). With the tree's rendering.
fn parity_hops(
    node: &ClusterNode,
    way: &[Source],
    relays: &std::collections::BTreeMap<String, String>,
) -> Option<(Vec<Hop>, String)> {
    let topology = match node.db.topology_live() {
        Ok(Some(t)) => t,
        _ => node.replication.topology.as_deref()?.clone(),
    };
    let root = topology.node_id(&node.node_name)?;
    let holders: Vec<Vec<permafrost_topology::NodeId>> = way
        .iter()
        .map(|(n, _, _)| topology.node_id(n).map(|id| vec![id]))
        .collect::<Option<_>>()?;
    let tree = match permafrost_topology::parity_tree(
        &topology,
        root,
        &permafrost_topology::Demand::one_of_each(&holders),
    ) {
        Ok(tree) => tree,
        Err(e) => {
            tracing::warn!("cluster: no parity tree ({e}); the sources are read directly");
            return None;
        }
    };
    let addr_of = |name: &str| {
        relays
            .get(name)
            .or_else(|| node.replication.relays.get(name))
            .cloned()
            .unwrap_or_default()
    };
    Some((
        permafrost_relay::hops(&topology, &tree, &addr_of),
        tree.render(&topology),
    ))
}

struct Counted<'a> {
    inner: &'a mut dyn Write,
    written: u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// What the rebuild of a node's fragments does (`permafrost cluster rebuild`, [`rebuild_lost`]), as the cluster
/// is now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildPlan {
    /// Fragments rebuilt on a node that is up and holds no fragment of their object.
    pub fragments_rebuilt: usize,
    /// Objects with no such node: rebuilt whole and kept as whole copies on their surviving holders (re-encoded
    /// into fragments by the catch-up once three nodes are up).
    pub objects_kept_whole: usize,
    /// Objects whose other holders are not both up: nothing can be done until one is back.
    pub objects_waiting: usize,
}

/// What happens to each fragment node `lost` holds (see [`RebuildPlan`]).
pub fn rebuild_plan(
    db: &permafrost_catalog::cluster::ClusterDb,
    lost: &NodeInfo,
) -> Result<RebuildPlan, ClusterError> {
    let nodes = db.nodes()?;
    let relays: std::collections::BTreeMap<String, String> =
        db.relay_addresses()?.into_iter().collect();
    let mut plan = RebuildPlan::default();
    for (bucket, key, _) in db.fragments_on(lost.id)? {
        let Some(obj) = db.parity_object(&bucket, &key)? else {
            continue;
        };
        match way_for(&obj, lost.id, &nodes, &relays) {
            Way::Free(_) => plan.fragments_rebuilt += 1,
            Way::Keep(_) => plan.objects_kept_whole += 1,
            Way::Wait => plan.objects_waiting += 1,
        }
    }
    Ok(plan)
}

fn way_for(
    obj: &ParityObject,
    lost_id: i64,
    nodes: &[NodeInfo],
    relays: &std::collections::BTreeMap<String, String>,
) -> Way {
    let holding: Vec<i64> = obj.fragments.iter().map(|f| f.node.id).collect();
    let seen: Vec<(i64, bool)> = nodes
        .iter()
        .map(|n| (n.id, n.health == Health::Up && relays.contains_key(&n.name)))
        .collect();
    crate::decide::parity_way(&holding, lost_id, &seen)
}

/// Make again every fragment the lost node `lost` held that falls to this node: rebuilt here when this node is
/// the first by name that is up and holds no fragment of the object (from the other two, checked against the
/// directory, stored, moved to this node in the directory); when no node is free (three nodes, each holding a
/// fragment) and this node holds one of the two others, the object is rebuilt whole here and published as a
/// whole copy, and once both surviving holders have theirs it switches to them
/// (`ClusterDb::parity_to_copies`): it survives the loss of one more node, and the catch-up re-encodes it when
/// three nodes are up. One log line per pass that did anything, with counts. Returns (done, failed).
pub fn rebuild_lost(
    node: &ClusterNode,
    store: &Store,
    lost: &NodeInfo,
) -> Result<(usize, usize), ClusterError> {
    let started = Instant::now();
    let nodes = node.db.nodes()?;
    let relays: std::collections::BTreeMap<String, String> =
        node.db.relay_addresses()?.into_iter().collect();
    let (mut rebuilt, mut failed, mut whole_here, mut switched) = (0, 0, 0, 0);
    let mut first_error: Option<String> = None;
    for (bucket, key, role) in node.db.fragments_on(lost.id)? {
        let Some(obj) = node.db.parity_object(&bucket, &key)? else {
            continue;
        };
        match way_for(&obj, lost.id, &nodes, &relays) {
            Way::Wait => continue,
            Way::Free(id) if id != node.node_id => continue,
            Way::Keep(keepers) if !keepers.contains(&node.node_id) => continue,
            Way::Keep(keepers) => match keep_whole(node, store, &obj, lost.id, &relays) {
                Ok(made) => {
                    whole_here += usize::from(made);
                    if node.db.parity_to_copies(&obj.entry, &keepers)? {
                        switched += 1;
                        tracing::debug!(
                            "cluster: {bucket}/{key} (fragment {role} lost with node {}) is now held as {} whole copies",
                            lost.name,
                            keepers.len()
                        );
                    }
                }
                Err(e) => {
                    failed += 1;
                    tracing::debug!(
                        "cluster: rebuilding {bucket}/{key} whole (fragment {role} lost with node {}) failed: {e}",
                        lost.name
                    );
                    first_error.get_or_insert(format!("{bucket}/{key}: {e}"));
                }
            },
            Way::Free(_) => {
                let Some(f) = obj
                    .fragments
                    .iter()
                    .find(|f| f.role == role && f.node.id == lost.id)
                else {
                    continue;
                };
                match rebuild_one(node, store, &obj, f, &relays) {
                    Ok(()) => {
                        if node.db.move_fragment(
                            &obj.entry,
                            &role,
                            lost.id,
                            node.node_id,
                            &f.blake3,
                        )? {
                            rebuilt += 1;
                            tracing::info!(
                                "cluster: rebuilt fragment {role} of {bucket}/{key} (lost with node {}) here",
                                lost.name
                            );
                        }
                    }
                    Err(e) => {
                        failed += 1;
                        tracing::warn!(
                            "cluster: rebuilding fragment {role} of {bucket}/{key} (lost with node {}) failed: {e}",
                            lost.name
                        );
                    }
                }
            }
        }
    }
    if rebuilt > 0 || (failed > 0 && whole_here + switched == 0) {
        tracing::info!(
            "cluster: rebuild of lost node {}: {rebuilt} fragments rebuilt here, {failed} failed{}, in {:.3} s",
            lost.name,
            first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
    }
    if whole_here + switched > 0 {
        tracing::warn!(
            "cluster: node {} lost: {whole_here} xor object(s) rebuilt whole here and {switched} switched to 2 whole \
             copies (no free node up for their fragments; re-encoded when three nodes are up), {failed} failed{}, in {:.3} s",
            lost.name,
            first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok((rebuilt + switched, failed))
}

/// Rebuild `obj` whole into this node's store from its fragments held by nodes other than `lost_id` (each half
/// checked against the directory's BLAKE3) and publish this node's whole copy. Returns whether a copy was made
/// (false: this node held it already, from an earlier pass).
fn keep_whole(
    node: &ClusterNode,
    store: &Store,
    obj: &ParityObject,
    lost_id: i64,
    relays: &std::collections::BTreeMap<String, String>,
) -> Result<bool, String> {
    let e = &obj.entry;
    if let Ok(info) = store.head_object(&e.bucket, &e.key) {
        if info.etag == e.etag && info.last_modified_ms == e.last_modified_ms {
            node.db
                .publish(node.node_id, e)
                .map_err(|e| e.to_string())?;
            return Ok(false);
        }
    }
    let meta: serde_json::Value = serde_json::from_str(&obj.meta).unwrap_or_default();
    let options = permafrost_store::PutOptions {
        content_type: meta["content_type"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| e.content_type.clone()),
        user_metadata: serde_json::from_value(meta["user_metadata"].clone()).unwrap_or_default(),
        replica_of: Some(permafrost_store::ReplicaOf {
            etag: e.etag.clone(),
            last_modified_ms: e.last_modified_ms,
        }),
        ..Default::default()
    };
    match store.head_bucket(&e.bucket) {
        Ok(_) => {}
        Err(_) => match store.create_bucket(&e.bucket, Default::default()) {
            Ok(()) | Err(permafrost_store::StoreError::BucketAlreadyOwnedByYou(_)) => {}
            Err(e) => return Err(e.to_string()),
        },
    }
    let n = e.size_bytes;
    let h = half(n);
    let mut others = obj.clone();
    others.fragments.retain(|f| f.node.id != lost_id);
    let mut handle = store
        .begin_put(&e.bucket, &e.key, options)
        .map_err(|e| e.to_string())?;
    if n > 0 {
        for (role, take) in [("a", h), ("b", n - h)] {
            let want = obj
                .fragments
                .iter()
                .find(|f| f.role == role)
                .map(|f| f.blake3.clone())
                .ok_or_else(|| format!("fragment {role} is missing from the directory"))?;
            let mut sink = Take {
                inner: PutWriter(&mut handle),
                left: take,
            };
            let hash = fetch_fragment(node, &others, role, relays, &mut sink)?;
            if blake3::Hash::from(hash).to_hex().as_str() != want {
                return Err(format!("half {role}'s BLAKE3 differs from the directory's"));
            }
        }
    }
    let info = handle.finish().map_err(|e| e.to_string())?;
    if info.size_bytes != n || info.etag != e.etag {
        return Err(format!(
            "the rebuilt object has {} bytes and ETag {}, the directory says {n} and {}",
            info.size_bytes, info.etag, e.etag
        ));
    }
    node.db
        .publish(node.node_id, e)
        .map_err(|e| e.to_string())?;
    Ok(true)
}

/// Passes the first `left` bytes to `inner` and drops the rest (half `b`'s zero padding).
struct Take<W> {
    inner: W,
    left: u64,
}

impl<W: Write> Write for Take<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        if n > 0 {
            self.inner.write_all(&buf[..n])?;
            self.left -= n as u64;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Rebuild fragment `f` of `obj` from the other two into this node's store.
fn rebuild_one(
    node: &ClusterNode,
    store: &Store,
    obj: &ParityObject,
    f: &permafrost_catalog::cluster::Fragment,
    relays: &std::collections::BTreeMap<String, String>,
) -> Result<(), String> {
    let e = &obj.entry;
    let options = permafrost_store::PutOptions {
        replica_of: Some(permafrost_store::ReplicaOf {
            etag: e.etag.clone(),
            last_modified_ms: e.last_modified_ms,
        }),
        ..Default::default()
    };
    match store.head_bucket(FRAGMENTS_BUCKET) {
        Ok(_) => {}
        Err(_) => match store.create_bucket(FRAGMENTS_BUCKET, Default::default()) {
            Ok(()) | Err(permafrost_store::StoreError::BucketAlreadyOwnedByYou(_)) => {}
            Err(e) => return Err(e.to_string()),
        },
    }
    let fkey = fragment_key(&e.bucket, &e.key, &e.etag, &f.role);
    let mut handle = store
        .begin_put(FRAGMENTS_BUCKET, &fkey, options)
        .map_err(|e| e.to_string())?;
    // Only the other two: never the lost holder itself.
    let mut others = obj.clone();
    others.fragments.retain(|g| g.role != f.role);
    let mut sink = PutWriter(&mut handle);
    let hash = fetch_fragment(node, &others, &f.role, relays, &mut sink)?;
    if blake3::Hash::from(hash).to_hex().as_str() != f.blake3 {
        return Err("the rebuilt fragment's BLAKE3 differs from the directory's".into());
    }
    handle.finish().map_err(|e| e.to_string())?;
    Ok(())
}

struct PutWriter<'a>(&'a mut permafrost_store::PutHandle);

impl Write for PutWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .write(buf)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_objects_split_as_in_the_figure() {
        assert_eq!(split(b""), [Vec::<u8>::new(), vec![], vec![]]);
        assert_eq!(split(b"x"), [b"x".to_vec(), vec![0], b"x".to_vec()]);
        assert_eq!(split(&[1, 2, 3]), [vec![1, 2], vec![3, 0], vec![1 ^ 3, 2]]);
    }

    proptest! {
        #[test]
        fn any_two_fragments_give_the_object(object in proptest::collection::vec(any::<u8>(), 0..300)) {
            let [a, b, p] = split(&object);
            let n = object.len();
            prop_assert_eq!(a.len() as u64, half(n as u64));
            prop_assert_eq!(b.len(), a.len());
            let xor = |x: &[u8], y: &[u8]| x.iter().zip(y).map(|(u, v)| u ^ v).collect::<Vec<u8>>();
            let mut whole = a.clone();
            whole.extend(&b);
            prop_assert_eq!(&whole[..n], &object[..]);
            let mut from_bp = xor(&b, &p);
            from_bp.extend(&b);
            prop_assert_eq!(&from_bp[..n], &object[..]);
            let mut from_ap = a.clone();
            from_ap.extend(xor(&a, &p));
            prop_assert_eq!(&from_ap[..n], &object[..]);
        }

        #[test]
        fn a_plan_reads_exactly_the_range(n in 1u64..200, x in 0u64..200, y in 0u64..200) {
            let (first, last) = (x.min(y) % n, x.max(y) % n);
            let (first, last) = (first.min(last), first.max(last));
            let object: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let [a, b, _] = split(&object);
            let mut got: Vec<u8> = Vec::new();
            for (role, skip, take) in plan(n, first, last) {
                let half = if role == "a" { &a } else { &b };
                prop_assert!(skip + take <= half.len() as u64);
                got.extend(&half[skip as usize..(skip + take) as usize]);
            }
            prop_assert_eq!(&got[..], &object[first as usize..=last as usize]);
        }

    }
}
