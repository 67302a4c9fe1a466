//! The runtime of a node of a cluster (issue 13 "Nodes", `docs/cluster.md` "Nodes"): joining, the heartbeat,
//! reconcile, tombstones, the catch-up loop, the in-process relay and link reports. The operator binary reads
//! the `[cluster]` table ([`ClusterSection`]) of `DATA/permafrost.toml`, calls [`join`] before the archive
//! opens and [`start`] after.
//!
//! **Start-up checks** (each one line, before the archive opens): the database unreachable; the database
//! holding another cluster name; a data directory that recorded another cluster id (`DATA/cluster-id`, written
//! when the directory first joins); a node name taken by another data directory; a topology file that does not
//! parse (a link naming an unknown node) or that lacks a node the cluster knows.
//!
//! **While serving**: one thread sends a heartbeat (capacity, bytes used) every `heartbeat_ms`; when a heartbeat
//! fails (the database went away) the node reconciles its directory rows again once it is back. On each beat
//! it applies the deletes other nodes left it (tombstones), and every [`CATCH_UP_BEATS`] beats it makes the
//! missing copies of under-replicated objects it holds ([`ClusterNode::catch_up`]; it first retires the
//! copies of nodes lost for `lost_after_ms`, so they are made again elsewhere) and rebuilds the parity
//! fragments of lost nodes ([`crate::rebuild_lost`]). The node's relay (`permafrost_relay::serve`, storing
//! copies into this node's store) listens on `relay_address`, which is published in the nodes table; without
//! it, on the host of `address` (never on every interface by default), and a node that knows neither refuses
//! to start.
//!
//! **The cluster secret** (docs/security.md "Cluster traffic"): every relay connection, in and out, proves it
//! before anything else moves. It is `secret_file` (relative to the data directory) when set, else the secret the
//! catalog keeps (`ClusterDb::relay_secret`, made by the first node of a build that knows it).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use permafrost_catalog::cluster::{self, ClusterDb, DirEntry, LinkReport, LinkSample};
use permafrost_relay::NodeStats;
use permafrost_store::{ListQuery, Store};

use crate::{ClusterError, ClusterNode};

type Result<T> = std::result::Result<T, ClusterError>;

/// Refuse with a one-line message ([`ClusterError::Runtime`]).
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(ClusterError::Runtime(format!($($arg)*)))
    };
}

/// What was being done when an operation failed, in front of its error (one line).
trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
    fn with_context<S: Display>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|e| ClusterError::Runtime(format!("{what}: {e}")))
    }

    fn with_context<S: Display>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| ClusterError::Runtime(format!("{}: {e}", what())))
    }
}

/// Any error as [`ClusterError::Runtime`], its message kept.
fn runtime(e: impl Display) -> ClusterError {
    ClusterError::Runtime(e.to_string())
}

/// The file in the data directory that records the cluster the directory belongs to.
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// The `[cluster]` table of permafrost.toml.
#[derive(serde::Deserialize, serde::Serialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    pub name: String,
    pub node: String,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default = "heartbeat_default")]
    pub heartbeat_ms: u64,
    #[serde(default = "timeout_default")]
    pub timeout_ms: u64,
    /// A node whose last heartbeat is older than this is lost: its copies count no more and are made again on
    /// other nodes (≥ `timeout_ms`) [600000 = 10 min].
    #[serde(default = "lost_after_default")]
    pub lost_after_ms: u64,
    #[serde(default)]
    pub topology: Option<PathBuf>,
    /// Nodes holding each object, the cluster default (a bucket may set its own: `cluster bucket`).
    #[serde(default = "copies_default")]
    pub copies: u32,
    /// Where this node's relay listens (`host:port`; port 0 = any free port) [the host of `address`, any
    /// free port].
    #[serde(default)]
    pub relay_address: Option<String>,
    /// With a topology: the `permafrost relay serve` processes it names, `name = "host:port"`.
    #[serde(default)]
    pub relays: std::collections::BTreeMap<String, String>,
    /// A file holding the cluster secret the relays prove (relative to the data directory) [the secret kept in
    /// the catalog].
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// A fragment in this node's store that the directory does not list is deleted once it has been seen
    /// unlisted for this long (a placement stores before it publishes) [21600000 = 6 h].
    #[serde(default = "orphan_grace_default")]
    pub orphan_grace_ms: u64,
}

fn orphan_grace_default() -> u64 {
    crate::orphans::ORPHAN_GRACE_DEFAULT_MS
}

fn copies_default() -> u32 {
    1
}

/// Heartbeats between two catch-up passes over the under-replicated objects.
pub const CATCH_UP_BEATS: u64 = 3;

/// Why the heartbeat reconciles after a heartbeat failed (the log line says it).
const OUTAGE: &str = "the catalog database was unreachable";

fn heartbeat_default() -> u64 {
    2000
}

/// `[cluster] timeout_ms` when not set.
pub fn timeout_default() -> u64 {
    10_000
}

/// `[cluster] lost_after_ms` when not set.
pub fn lost_after_default() -> u64 {
    600_000
}

/// What joining decided before the archive opens.
pub struct Membership {
    pub section: ClusterSection,
    pub db: Arc<ClusterDb>,
    pub cluster_id: String,
    pub node_id: i64,
    pub address: String,
    /// `[cluster] topology`, checked.
    pub topology: Option<Arc<permafrost_topology::Topology>>,
    /// The cluster secret every relay connection proves.
    pub secret: permafrost_relay::Secret,
}

/// The cluster secret kept in the catalog (made there by the first caller).
pub fn catalog_secret(db: &ClusterDb) -> Result<permafrost_relay::Secret> {
    let text = db
        .relay_secret(&permafrost_relay::Secret::generate_hex())
        .map_err(|e| ClusterError::Runtime(format!("reading the cluster secret: {e}")))?;
    permafrost_relay::Secret::new(text.as_bytes())
        .map_err(|e| ClusterError::Runtime(format!("the catalog {}: {e}", db.shown_url())))
}

/// Check everything about the cluster and register this node (before the store opens: a refused start changes
/// nothing in the data directory but `DATA/cluster-id` on the first join).
pub fn join(
    data_dir: &Path,
    section: ClusterSection,
    database_url: &str,
    listen: &str,
) -> Result<Membership> {
    if section.orphan_grace_ms == 0 {
        bail!(
            "[cluster] orphan_grace_ms = 0: a placement stores its fragments before it publishes them, so no grace \
             would delete the fragments of placements in progress; set a grace longer than a placement takes \
             (default {} = 6 h)",
            crate::orphans::ORPHAN_GRACE_DEFAULT_MS
        );
    }
    let address = section.address.clone().unwrap_or_else(|| listen.to_owned());
    if address.ends_with(":0") {
        bail!(
            "[cluster] address: the other nodes need a fixed address; set [cluster] address or listen on a fixed port (not {address})"
        );
    }
    let db = ClusterDb::connect(database_url, section.timeout_ms).map_err(runtime)?;
    let cluster_id = db.cluster(&section.name).map_err(runtime)?;
    let secret = match &section.secret_file {
        Some(path) => permafrost_relay::Secret::from_file(&data_dir.join(path))
            .map_err(|e| ClusterError::Runtime(format!("[cluster] secret_file: {e}")))?,
        None => catalog_secret(&db)?,
    };
    relay_listen_address(&section, &address)?;
    let id_path = data_dir.join(CLUSTER_ID_FILE);
    let instance = match std::fs::read_to_string(&id_path) {
        Ok(text) => {
            let (mut recorded, mut instance) = (None, None);
            for line in text.lines() {
                match line.split_once('=') {
                    Some((k, v)) if k.trim() == "cluster_id" => {
                        recorded = Some(v.trim().trim_matches('"').to_owned())
                    }
                    Some((k, v)) if k.trim() == "instance" => {
                        instance = Some(v.trim().trim_matches('"').to_owned())
                    }
                    _ => {}
                }
            }
            let (Some(recorded), Some(instance)) = (recorded, instance) else {
                bail!(
                    "{} must hold cluster_id = \"…\" and instance = \"…\"",
                    id_path.display()
                );
            };
            if recorded != cluster_id {
                bail!(
                    "data directory {} belongs to cluster id {recorded}, but the catalog database {} holds cluster \"{}\" with id {cluster_id} (a foreign cluster id): point [catalog] url at that cluster's database or use a fresh data directory",
                    data_dir.display(),
                    db.shown_url(),
                    section.name
                );
            }
            instance
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let instance = cluster::random_id();
            let text = format!(
                "# The cluster this data directory belongs to (written when it first joined; do not edit).\n\
                 cluster_id = \"{cluster_id}\"\ninstance = \"{instance}\"\n"
            );
            permafrost_disk::durable::write_durable(&id_path, text.as_bytes())
                .with_context(|| format!("cannot write {}", id_path.display()))?;
            instance
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", id_path.display())),
    };
    let topology = match &section.topology {
        Some(path) => {
            let t = check_topology(&data_dir.join(path), &db, &section.node)?;
            let data_nodes = t.with_role(permafrost_topology::Role::Node).len();
            if section.copies as usize > data_nodes {
                bail!(
                    "[cluster] copies = {}: the topology {} has only {data_nodes} data nodes",
                    section.copies,
                    data_dir.join(path).display()
                );
            }
            for name in section.relays.keys() {
                match t.node_id(name) {
                    Some(id) if t.node(id).role == permafrost_topology::Role::Relay => {}
                    _ => bail!(
                        "[cluster.relays] {name}: the topology {} names no relay {name:?}",
                        data_dir.join(path).display()
                    ),
                }
            }
            load_topology(&db, &t, &data_dir.join(path), &section.node)?;
            Some(Arc::new(t))
        }
        None => None,
    };
    db.make_node_schema(&section.node).map_err(runtime)?;
    let joined = db
        .join(&cluster_id, &section.node, &instance, &address, 0, 0)
        .map_err(runtime)?;
    Ok(Membership {
        section,
        db: Arc::new(db),
        cluster_id,
        node_id: joined.node_id,
        address,
        topology,
        secret,
    })
}

/// The topology must parse, name this node and every node the cluster knows as data nodes.
fn check_topology(path: &Path, db: &ClusterDb, me: &str) -> Result<permafrost_topology::Topology> {
    let topology = permafrost_topology::Topology::from_path(path).map_err(|e| {
        ClusterError::Runtime(format!("[cluster] topology {}: {e}", path.display()))
    })?;
    let mut known: Vec<String> = db
        .nodes()
        .map_err(runtime)?
        .into_iter()
        .map(|n| n.name)
        .collect();
    if !known.iter().any(|n| n == me) {
        known.push(me.to_owned());
    }
    let data_nodes: Vec<&str> = topology
        .nodes()
        .iter()
        .filter(|n| n.role == permafrost_topology::Role::Node)
        .map(|n| n.name.as_str())
        .collect();
    let missing: Vec<&str> = known
        .iter()
        .map(String::as_str)
        .filter(|n| !data_nodes.contains(n))
        .collect();
    if !missing.is_empty() {
        bail!(
            "[cluster] topology {}: the cluster has node(s) {} that the topology does not name as data nodes (role = \"node\")",
            path.display(),
            missing.join(", ")
        );
    }
    Ok(topology)
}

/// Put the node's topology into the catalog (replacing the one there when it differs); one line says what.
fn load_topology(
    db: &ClusterDb,
    topology: &permafrost_topology::Topology,
    path: &Path,
    me: &str,
) -> Result<()> {
    let load = db
        .store_topology(topology, &path.display().to_string(), me)
        .map_err(runtime)?;
    let count = |role| topology.with_role(role).len();
    let what = match (load.first, load.replaced) {
        (true, _) => "loaded into the catalog",
        (false, true) => "replaced the catalog's topology (it differed)",
        (false, false) => "the catalog already holds it",
    };
    eprintln!(
        "permafrost: topology {}: {} nodes ({} clients, {} relays, {} data nodes), {} links; {what} (hash {})",
        path.display(),
        load.nodes,
        count(permafrost_topology::Role::Client),
        count(permafrost_topology::Role::Relay),
        count(permafrost_topology::Role::Node),
        load.links,
        &load.hash[..12]
    );
    Ok(())
}

/// How far back a reported rate looks: the bytes moved in about the last five seconds.
pub const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Turns a process's per-peer relay counters (`NodeStats::peers`) into link reports for the catalog: per link
/// direction, the rate over about the last [`RATE_WINDOW`] and the bytes so far. The process counts the
/// connections it opened (to its children), both directions (`docs/cluster.md` "Live utilisation").
pub struct LinkMeter {
    reporter: String,
    node: String,
    kind: String,
    stats: Arc<NodeStats>,
    samples: VecDeque<(Instant, PeerCounts)>,
}

/// Bytes (to, from) per peer at one instant.
type PeerCounts = BTreeMap<String, (u64, u64)>;

impl LinkMeter {
    /// A meter for node `node` (its topology name) of kind `relay`, `node`, `send`, `rebuild` or `serve`.
    pub fn new(node: &str, kind: &str, stats: Arc<NodeStats>) -> LinkMeter {
        let mut meter = LinkMeter {
            reporter: format!("{node}/{}", &cluster::random_id()[..8]),
            node: node.to_owned(),
            kind: kind.to_owned(),
            stats,
            samples: VecDeque::new(),
        };
        let first = meter.snapshot();
        meter.samples.push_back((Instant::now(), first));
        meter
    }

    fn snapshot(&self) -> PeerCounts {
        self.stats
            .peer_bytes()
            .into_iter()
            .map(|(peer, out, inn)| (peer, (out, inn)))
            .collect()
    }

    /// The report now: rates against the oldest sample within the window.
    pub fn report(&mut self) -> LinkReport {
        let now = Instant::now();
        let current = self.snapshot();
        while self.samples.len() > 1 && now.duration_since(self.samples[1].0) >= RATE_WINDOW {
            self.samples.pop_front();
        }
        let (then, old) = self.samples.front().expect("one sample at least");
        let seconds = now.duration_since(*then).as_secs_f64().max(0.001);
        let mbit = |now: u64, before: u64| now.saturating_sub(before) as f64 * 8.0 / seconds / 1e6;
        let mut links = Vec::new();
        for (peer, &(out, inn)) in &current {
            let (old_out, old_in) = old.get(peer).copied().unwrap_or((0, 0));
            links.push(LinkSample {
                from: self.node.clone(),
                to: peer.clone(),
                mbit: mbit(out, old_out),
                bytes: out,
            });
            links.push(LinkSample {
                from: peer.clone(),
                to: self.node.clone(),
                mbit: mbit(inn, old_in),
                bytes: inn,
            });
        }
        self.samples.push_back((now, current));
        LinkReport {
            reporter: self.reporter.clone(),
            node: self.node.clone(),
            kind: self.kind.clone(),
            streams: self.stats.streams.load(Ordering::Relaxed),
            bytes_in: self.stats.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.stats.bytes_out.load(Ordering::Relaxed),
            links,
        }
    }
}

/// Reports a [`LinkMeter`] to the catalog every `every` until dropped, and once more when dropped (so a
/// short transfer is reported before its process exits).
pub struct LinkReporter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LinkReporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Start reporting `meter` to `db` every `every` (a serve node: its heartbeat interval, with the stats of its
/// in-process relay node). A failed report is logged once until one succeeds again.
pub fn spawn_link_reporter(
    db: Arc<ClusterDb>,
    mut meter: LinkMeter,
    every: Duration,
) -> Result<LinkReporter> {
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("permafrost-links".into())
            .spawn(move || {
                let mut failing = false;
                let mut next = Instant::now() + every;
                loop {
                    let stopping = stop.load(Ordering::SeqCst);
                    if stopping || Instant::now() >= next {
                        match db.report_links(&meter.report()) {
                            Ok(()) => failing = false,
                            Err(e) if !failing => {
                                failing = true;
                                eprintln!(
                                    "permafrost: {}: reporting link use to the catalog failed (retrying): {e}",
                                    meter.node
                                );
                            }
                            Err(_) => {}
                        }
                        next = Instant::now() + every;
                    }
                    if stopping {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50).min(every));
                }
            })
            .context("starting the link reporter thread")?
    };
    Ok(LinkReporter {
        stop,
        thread: Some(thread),
    })
}

/// Every object the local store holds (current versions), for the directory.
fn local_entries(store: &Store) -> Result<(Vec<String>, Vec<DirEntry>)> {
    let mut buckets = Vec::new();
    let mut entries = Vec::new();
    for bucket in store.list_buckets().map_err(runtime)? {
        if bucket.name == permafrost_catalog::cluster::FRAGMENTS_BUCKET {
            continue; // parity fragments: published by their sender (`fragments`), never as objects
        }
        let mut start_after = None;
        loop {
            let page = store
                .list_objects(
                    &bucket.name,
                    &ListQuery {
                        prefix: String::new(),
                        delimiter: None,
                        start_after: start_after.clone(),
                        max_keys: 1000,
                    },
                )
                .map_err(runtime)?;
            for o in page.objects {
                entries.push(DirEntry {
                    bucket: o.bucket,
                    key: o.key,
                    size_bytes: o.size_bytes,
                    etag: o.etag,
                    last_modified_ms: o.last_modified_ms,
                    content_type: o.content_type,
                });
            }
            if !page.is_truncated {
                break;
            }
            start_after = page.next_start_after;
        }
        buckets.push(bucket.name);
    }
    Ok((buckets, entries))
}

/// Make the directory's rows of this node equal to what its store holds; returns (published, removed).
/// What it publishes is recorded as short of copies as a write's publish is (`default_copies`: `[cluster]
/// copies`), so a write whose publish was lost still gets its copies from the catch-up.
/// A version the node has a tombstone for is not published (a received copy never published keeps its mark:
/// `permafrost_catalog::cluster::rules`); `receiving` are the copies arriving now (their tombstones wait).
pub fn reconcile(
    store: &Store,
    db: &ClusterDb,
    node_id: i64,
    default_copies: u32,
    receiving: &crate::Receiving,
) -> Result<(usize, usize)> {
    // Deletes made while this node was away first: what they removed must not be published again.
    let deleted = apply_tombstones(store, db, node_id, receiving)?;
    if deleted > 0 {
        tracing::info!(
            deleted,
            "cluster: applied the deletes made while this node was away"
        );
    }
    let (buckets, entries) = local_entries(store)?;
    for bucket in &buckets {
        db.add_bucket(bucket).map_err(runtime)?;
    }
    let (published, removed) = db
        .reconcile_keys(node_id, &entries, default_copies)
        .map_err(runtime)?;
    // A write (or an arriving copy) that committed after the snapshot above and published its row before the
    // reconcile's transaction lost that row: what the store holds now is published again. (Without this a copy
    // racing the reconcile leaves an object with fewer rows than holders, and its sender's own row gone makes
    // the other copies look deleted: `ClusterDb::publish_copy`.)
    let mut kept = 0;
    for (bucket, key) in &removed {
        if let Ok(info) = store.head_object(bucket, key) {
            let entry = DirEntry {
                bucket: bucket.clone(),
                key: key.clone(),
                size_bytes: info.size_bytes,
                etag: info.etag,
                last_modified_ms: info.last_modified_ms,
                content_type: info.content_type,
            };
            // Not a version this node has a tombstone for (a received copy never published: its mark).
            if db
                .publish_held(node_id, &entry, default_copies)
                .map_err(runtime)?
            {
                kept += 1;
            }
        }
    }
    Ok((published + kept, removed.len() - kept))
}

/// Delete the copies other nodes' DELETEs left this node tombstones for (the version deleted or an older one; a
/// newer local version stays), and the copies received but never published (their marks). The tombstone of a
/// key whose copy is arriving now (`receiving`) waits for a later pass: it is that copy's mark, removed by its
/// publish, or a delete its publish refuses. Returns the copies deleted.
pub fn apply_tombstones(
    store: &Store,
    db: &ClusterDb,
    node_id: i64,
    receiving: &crate::Receiving,
) -> Result<usize> {
    let listed = db.tombstones(node_id).map_err(runtime)?;
    apply_listed_tombstones(store, db, node_id, receiving, &listed)
}

/// [`apply_tombstones`] for the keys of tombstones `listed` earlier. A listed tombstone may be gone by now (a
/// copy's mark its publish removed, after which the copy is the node's to keep), so each key's tombstone is
/// read again, and applied, while no copy of the key arrives ([`crate::Receiving::settle`]).
pub fn apply_listed_tombstones(
    store: &Store,
    db: &ClusterDb,
    node_id: i64,
    receiving: &crate::Receiving,
    listed: &[permafrost_catalog::cluster::Tombstone],
) -> Result<usize> {
    let mut deleted = 0;
    for t in listed {
        let applied = receiving.settle(&t.bucket, &t.key, || -> Result<bool> {
            let Some(now) = db.tombstone(node_id, &t.bucket, &t.key).map_err(runtime)? else {
                return Ok(false);
            };
            let gone = crate::apply_tombstone(store, &now).map_err(runtime)?;
            db.clear_tombstone(node_id, &now).map_err(runtime)?;
            Ok(gone)
        });
        if applied.transpose()?.unwrap_or(false) {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The node's capacity and the stored bytes the catalog counts. Capacity is the bytes stored plus the bytes the
/// grid's file system has free (statvfs), at most the grid's nominal size: the grid's disk files are sparse, so
/// their apparent sizes overstate the room when the file system is smaller or shared.
fn capacity_and_used(store: &Store) -> (u64, u64) {
    let engine = store.engine();
    let nominal = engine.bucket_capacity_bytes() * engine.buckets() as u64;
    let used: u64 = store
        .catalog()
        .stats()
        .map(|s| s.contents_by_state.iter().map(|(_, _, bytes)| bytes).sum())
        .unwrap_or(0);
    let capacity = match store.grid_file_system() {
        Some((free, total)) => nominal.min(used.saturating_add(free).min(total)),
        None => nominal,
    };
    (capacity, used)
}

/// The running membership: heartbeats until dropped.
pub struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The store as the relay's sink sees it; emptied at stop so that the archive can close.
    relay_store: Arc<std::sync::Mutex<Option<Arc<Store>>>>,
    /// Reports this node's link use (its relay and its writes' trees) to the catalog until dropped.
    _links: LinkReporter,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        *self.relay_store.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reconcile the directory with the store, then heartbeat every `heartbeat_ms` (reconciling again after the
/// database comes back). Returns the S3 layer's view and the heartbeat (stops when dropped).
pub fn start(store: &Arc<Store>, m: &Membership) -> Result<(Arc<ClusterNode>, Heartbeat)> {
    let node = Arc::new(ClusterNode {
        db: Arc::clone(&m.db),
        node_id: m.node_id,
        node_name: m.section.node.clone(),
        replication: crate::Replication {
            copies: m.section.copies,
            lost_after_ms: m.section.lost_after_ms,
            topology: m.topology.clone(),
            relays: m.section.relays.clone(),
            credentials: permafrost_relay::Credentials {
                name: m.section.node.clone(),
                secret: m.secret.clone(),
            },
            ..Default::default()
        },
        copying: Default::default(),
        directory_behind: Default::default(),
        receiving: Default::default(),
    });
    let (published, removed) =
        reconcile(store, &m.db, m.node_id, m.section.copies, &node.receiving)?;
    tracing::info!(
        node = %m.section.node,
        published,
        removed,
        "cluster: directory reconciled"
    );
    let (capacity, used) = capacity_and_used(store);
    m.db.heartbeat(m.node_id, capacity, used).map_err(runtime)?;
    let relay_store = Arc::new(std::sync::Mutex::new(Some(Arc::clone(store))));
    let relay_address = start_relay(m, &node, &relay_store)?;
    tracing::info!(node = %m.section.node, %relay_address, copies = m.section.copies, "cluster: relay listening");
    // One meter for the copies this node sends and the relay it runs: they share `replication.stats`.
    let links = spawn_link_reporter(
        Arc::clone(&m.db),
        LinkMeter::new(
            &m.section.node,
            "serve",
            Arc::clone(&node.replication.stats),
        ),
        Duration::from_millis(m.section.heartbeat_ms),
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (stop, store, db) = (Arc::clone(&stop), Arc::clone(store), Arc::clone(&m.db));
        let me = Arc::clone(&node);
        let (node_id, every) = (m.node_id, Duration::from_millis(m.section.heartbeat_ms));
        let lost_after_ms = m.section.lost_after_ms;
        let mut orphans = crate::orphans::OrphanCollector::new(m.section.orphan_grace_ms);
        std::thread::Builder::new()
            .name("permafrost-heartbeat".into())
            .spawn(move || {
                // Why the directory must be reconciled with the store before anything else (`None`: it need not).
                let mut behind: Option<&str> = None;
                let mut reconcile_failure_logged = false;
                let mut last = (capacity, used);
                let mut beats = 0u64;
                // One line per change (nodes down or back, objects short of copies or whole again, a failing
                // pass), then a reminder every REPORT_EVERY while it lasts; each object's detail is at debug.
                let mut down_seen: Option<Vec<String>> = None;
                let mut short_gate = crate::ReportGate::<Vec<String>>::new(REPORT_EVERY);
                let mut catch_up_failing = crate::ReportGate::<bool>::new(REPORT_EVERY);
                let mut rebuild_failing = crate::ReportGate::<bool>::new(REPORT_EVERY);
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(every);
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    beats += 1;
                    // Bytes used are summed over the catalog: every 10th heartbeat, not every one.
                    if behind.is_none() && beats.is_multiple_of(10) {
                        last = capacity_and_used(&store);
                    }
                    let beat = db.heartbeat(node_id, last.0, last.1);
                    // A write or delete whose directory step failed (an outage shorter than a heartbeat, which
                    // no heartbeat saw): reconcile now, as after an outage a heartbeat saw.
                    if beat.is_ok() && me.directory_behind.swap(false, Ordering::SeqCst) && behind.is_none() {
                        behind = Some("a write or delete whose directory update failed");
                    }
                    match beat {
                        Ok(()) if behind.is_some() => match reconcile(&store, &db, node_id, me.replication.copies, &me.receiving) {
                            Ok((p, r)) => {
                                tracing::warn!(
                                    "cluster: directory reconciled with this node's store after {}: {p} object(s) published, {r} removed",
                                    behind.take().unwrap_or_default()
                                );
                                reconcile_failure_logged = false;
                            }
                            Err(e) => {
                                if !reconcile_failure_logged {
                                    tracing::warn!("cluster: cannot reconcile the directory with this node's store yet (retrying every heartbeat): {e}");
                                    reconcile_failure_logged = true;
                                }
                            }
                        },
                        Ok(()) => {
                            if let Err(e) = apply_tombstones(&store, &db, node_id, &me.receiving) {
                                tracing::warn!("cluster: applying deletes failed: {e:#}");
                            }
                            if beats.is_multiple_of(CATCH_UP_BEATS) {
                                let now = std::time::Instant::now();
                                match me.catch_up(&store) {
                                    Ok(pass) => {
                                        if catch_up_failing.last() == Some(&true) {
                                            tracing::info!("cluster: catch-up works again");
                                        }
                                        catch_up_failing.reset();
                                        report_catch_up(&pass, &mut down_seen, &mut short_gate, now);
                                    }
                                    Err(e) => {
                                        if catch_up_failing.due(now, true) {
                                            tracing::warn!(
                                                "cluster: catch-up failed: {e}; retried every {:.1} s, next report in {} min",
                                                (every * CATCH_UP_BEATS as u32).as_secs_f64(),
                                                REPORT_EVERY.as_secs() / 60
                                            );
                                        }
                                    }
                                }
                                orphans.pass_logged(&store, &db, node_id);
                                match rebuild_lost_nodes(&me, &store, lost_after_ms) {
                                    Ok(()) => {
                                        if rebuild_failing.last() == Some(&true) {
                                            tracing::info!("cluster: rebuilding the fragments of lost nodes works again");
                                        }
                                        rebuild_failing.reset();
                                    }
                                    Err(e) => {
                                        if rebuild_failing.due(now, true) {
                                            tracing::warn!(
                                                "cluster: rebuilding the fragments of lost nodes failed: {e}; next report in {} min",
                                                REPORT_EVERY.as_secs() / 60
                                            );
                                        }
                                    }
                                }
                            }
                        }
                        Err(e) => {
                            if behind != Some(OUTAGE) {
                                tracing::error!("cluster: heartbeat failed (requests answer 503 until the database is back): {e}");
                            }
                            behind = Some(OUTAGE);
                        }
                    }
                }
            })
            .context("starting the heartbeat thread")?
    };
    Ok((
        node,
        Heartbeat {
            stop,
            thread: Some(thread),
            relay_store,
            _links: links,
        },
    ))
}

/// How often a condition that lasts (objects short of copies, a failing pass) is reported again.
const REPORT_EVERY: Duration = Duration::from_secs(300);

/// The log lines of a catch-up pass: one when the set of nodes not up changes, one when the count of objects
/// short of copies first shows or the nodes not up change (then every [`REPORT_EVERY`] while it lasts, with the
/// count), one when none is short any more.
fn report_catch_up(
    pass: &crate::CatchUp,
    down_seen: &mut Option<Vec<String>>,
    short_gate: &mut crate::ReportGate<Vec<String>>,
    now: std::time::Instant,
) {
    if pass.made > 0 {
        tracing::info!("cluster: catch-up made {} missing copies", pass.made);
    }
    if down_seen.as_ref() != Some(&pass.down) {
        match (&down_seen, pass.down.is_empty()) {
            (_, false) => tracing::warn!("cluster: node(s) not up: {}", pass.down.join(", ")),
            (Some(_), true) => tracing::info!("cluster: every node is up again"),
            (None, true) => {}
        }
        *down_seen = Some(pass.down.clone());
    }
    if pass.short == 0 {
        if short_gate.last().is_some() {
            tracing::info!("cluster: catch-up: every object this node copies has its copies again");
        }
        short_gate.reset();
        return;
    }
    if short_gate.due(now, pass.down.clone()) {
        tracing::warn!(
            "cluster: catch-up: {} object(s) still short of copies{}; next report in {} min",
            pass.short,
            if pass.down.is_empty() {
                String::new()
            } else {
                format!(", node(s) not up: {}", pass.down.join(", "))
            },
            REPORT_EVERY.as_secs() / 60
        );
    }
}

/// The parity rebuild pass (`crate::rebuild_lost`): the fragments of every node lost (down longer than
/// `lost_after_ms`) or down with an operator's request (`cluster rebuild`) that this node is to rebuild. A request
/// is cleared when its node holds no fragment any more or is up again.
fn rebuild_lost_nodes(me: &ClusterNode, store: &Store, lost_after_ms: u64) -> Result<()> {
    let db = &me.db;
    let mut nodes = db.lost_nodes(lost_after_ms).map_err(runtime)?;
    let requested = db.rebuild_requests().map_err(runtime)?;
    if !requested.is_empty() {
        for n in db.nodes().map_err(runtime)? {
            if !requested.contains(&n.name) {
                continue;
            }
            if n.health == permafrost_catalog::cluster::Health::Up {
                db.clear_rebuild_request(&n.name).map_err(runtime)?;
            } else if !nodes.iter().any(|l| l.id == n.id) {
                nodes.push(n);
            }
        }
    }
    for lost in nodes {
        crate::rebuild_lost(me, store, &lost).map_err(runtime)?;
        if requested.contains(&lost.name) && db.fragments_on(lost.id).map_err(runtime)?.is_empty() {
            db.clear_rebuild_request(&lost.name).map_err(runtime)?;
        }
    }
    Ok(())
}

/// Where the in-process relay listens: `[cluster] relay_address`, else the host of the node's own address
/// (`[cluster] address`, or the S3 listen address) with any free port. Never every interface by default: an
/// address whose host is unspecified (`0.0.0.0`, `[::]`) is refused unless `relay_address` names one.
fn relay_listen_address(section: &ClusterSection, address: &str) -> Result<String> {
    if let Some(configured) = &section.relay_address {
        return Ok(configured.clone());
    }
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let unspecified = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if host.is_empty() || unspecified {
        bail!(
            "[cluster] relay_address is not set and the node's address {address} names no host to listen on: \
             set [cluster] relay_address = \"HOST:PORT\" (the cluster network's address of this node) or \
             [cluster] address"
        );
    }
    Ok(format!("{host}:0"))
}

/// Listen on `[cluster] relay_address` (or the node's own host, [`relay_listen_address`]) and serve the relay
/// node role in-process: copies that arrive are stored into this node's store
/// (`crate::copy_sink`), from peers that prove the cluster secret. Publishes the address other
/// nodes reach it at (the advertised S3 host with the bound port when the listen host is unspecified).
fn start_relay(
    m: &Membership,
    node: &Arc<ClusterNode>,
    store: &Arc<std::sync::Mutex<Option<Arc<Store>>>>,
) -> Result<String> {
    let listen = relay_listen_address(&m.section, &m.address)?;
    let listener = std::net::TcpListener::bind(&listen)
        .with_context(|| format!("[cluster] relay_address {listen}: cannot listen"))?;
    let bound = listener.local_addr().map_err(runtime)?;
    let published = if bound.ip().is_unspecified() {
        let host = m
            .address
            .rsplit_once(':')
            .map_or(m.address.as_str(), |(h, _)| h);
        format!("{host}:{}", bound.port())
    } else {
        bound.to_string()
    };
    m.db.set_relay_address(m.node_id, &published)
        .map_err(runtime)?;
    let slot = Arc::clone(store);
    let sink = crate::copy_sink(slot, Arc::clone(node));
    permafrost_relay::serve(
        listener,
        Arc::new(permafrost_relay::RelayNode {
            name: m.section.node.clone(),
            sink: Some(sink),
            source: Some(crate::fragment_source(Arc::clone(store))),
            stats: Arc::clone(&node.replication.stats),
            secret: m.secret.clone(),
        }),
    );
    Ok(published)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_grace_for_orphans_is_refused_before_the_database_is_asked() {
        let section: ClusterSection = serde_json::from_value(serde_json::json!({
            "name": "c",
            "node": "n1",
            "orphan_grace_ms": 0,
        }))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let refused = join(
            dir.path(),
            section,
            "postgresql://nowhere.invalid/db",
            "127.0.0.1:9000",
        );
        let message = refused.err().expect("refused").to_string();
        assert!(
            message.starts_with("[cluster] orphan_grace_ms = 0: "),
            "{message}"
        );
    }

    #[test]
    fn the_relay_listens_where_configured_else_on_the_node_s_own_host_never_everywhere() {
        let section = |relay_address: Option<&str>| -> ClusterSection {
            serde_json::from_value(serde_json::json!({
                "name": "c",
                "node": "n1",
                "relay_address": relay_address,
            }))
            .unwrap()
        };
        let configured = section(Some("10.1.0.5:9400"));
        assert_eq!(
            relay_listen_address(&configured, "0.0.0.0:9000").unwrap(),
            "10.1.0.5:9400"
        );
        let default = section(None);
        assert_eq!(
            relay_listen_address(&default, "10.0.0.11:9000").unwrap(),
            "10.0.0.11:0"
        );
        assert_eq!(
            relay_listen_address(&default, "[fd00::11]:9000").unwrap(),
            "[fd00::11]:0"
        );
        assert_eq!(
            relay_listen_address(&default, "node1.example:9000").unwrap(),
            "node1.example:0"
        );
        for nowhere in ["0.0.0.0:9000", "[::]:9000", ":9000"] {
            let e = relay_listen_address(&default, nowhere)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("[cluster] relay_address is not set") && e.contains("names no host"),
                "{nowhere}: {e}"
            );
        }
    }

    #[test]
    fn a_link_meter_reports_both_directions_of_each_peer_with_rates_over_its_window() {
        let stats = Arc::new(NodeStats::default());
        let mut meter = LinkMeter::new("core", "relay", Arc::clone(&stats));
        assert!(meter.report().links.is_empty(), "no peer yet");
        let edge = stats.peer("edge1");
        edge.bytes_out.fetch_add(10_000_000, Ordering::Relaxed);
        edge.bytes_in.fetch_add(500, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(200));
        let report = meter.report();
        assert!(report.reporter.starts_with("core/"));
        assert_eq!(
            (report.node.as_str(), report.kind.as_str()),
            ("core", "relay")
        );
        let down = &report.links[0];
        let up = &report.links[1];
        assert_eq!(
            (down.from.as_str(), down.to.as_str(), down.bytes),
            ("core", "edge1", 10_000_000)
        );
        assert_eq!(
            (up.from.as_str(), up.to.as_str(), up.bytes),
            ("edge1", "core", 500)
        );
        // 80 Mbit in a bit more than 0.2 s (the window starts at the meter's first sample).
        assert!(down.mbit > 100.0 && down.mbit <= 400.0, "{}", down.mbit);
        assert!(up.mbit > 0.0 && up.mbit < 0.1, "{}", up.mbit);
        // Nothing more moved: the rate falls as the window slides, the bytes stay.
        std::thread::sleep(Duration::from_millis(200));
        let later = meter.report();
        assert!(later.links[0].mbit < down.mbit);
        assert_eq!(later.links[0].bytes, 10_000_000);
    }
}
