//! Cluster membership of `permafrost serve` and `permafrost cluster status` (issue 13 "Nodes",
//! `docs/cluster.md` "Nodes").
//!
//! A `[cluster]` table in `DATA/permafrost.toml` makes the server a node of a cluster whose shared tables live
//! in the PostgreSQL catalog database (`permafrost_catalog::cluster`):
//!
//! ```toml
//! [catalog]
//! url = "postgresql://permafrost:secret@db:5432/permafrost"
//! [cluster]
//! name = "archive"          # the cluster; the first node makes it (and its id)
//! node = "n1"               # this node: 1–40 of a-z 0-9 _; its store catalog is schema pf_node_n1
//! address = "10.0.0.11:9000" # where the other nodes reach its S3 endpoint [default: the listen address]
//! heartbeat_ms = 2000       # how often it says it is alive
//! timeout_ms = 10000        # a node whose last heartbeat is older shows as down
//! lost_after_ms = 600000    # … and, older than this (≥ timeout_ms), is lost: its copies are made again elsewhere
//! topology = "topology.toml" # optional: the network (docs/cluster.md "Topology file")
//! copies = 2                # nodes holding each object (the cluster default; a bucket may set its own) [1]
//! relay_address = "10.0.0.11:9400" # where this node's in-process relay listens [address's host, any port]
//! secret_file = "cluster.secret" # the cluster secret the relays prove [the one kept in the catalog]
//! [cluster.relays]          # with a topology: where its `permafrost relay serve` processes listen
//! core = "10.0.0.2:7400"
//! ```
//!
//! **Start-up checks** (each one line, before the archive opens): `[cluster]` without a PostgreSQL catalog; the
//! database unreachable; the database holding another cluster name; a data directory that recorded another
//! cluster id (`DATA/cluster-id`, written when the directory first joins); a node name taken by another data
//! directory; a topology file that does not parse (a link naming an unknown node) or that lacks a node the
//! cluster knows.
//!
//! **While serving**: one thread sends a heartbeat (capacity, bytes used) every `heartbeat_ms`; when a heartbeat
//! fails (the database went away) the node reconciles its directory rows again once it is back. On each beat
//! it applies the deletes other nodes left it (tombstones), and every [`CATCH_UP_BEATS`] beats it makes the
//! missing copies of under-replicated objects it holds (`permafrost_cluster::ClusterNode::catch_up`; it first retires
//! the copies of nodes lost for `lost_after_ms`, so they are made again elsewhere). The node's
//! relay (`permafrost_relay::serve`, storing copies into this node's store) listens on `relay_address`, which is
//! published in the nodes table; without it, on the host of `address` (never on every interface by default),
//! and a node that knows neither refuses to start.
//!
//! **The cluster secret** (docs/security.md "Cluster traffic"): every relay connection, in and out, proves it
//! before anything else moves. It is `secret_file` (relative to the data directory) when set, else the secret the
//! catalog keeps (`ClusterDb::relay_secret`, made by the first node of a build that knows it).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use permafrost_catalog::cluster::{
    self, ClusterDb, DirEntry, LinkReport, LinkSample, ReporterInfo, TransferInfo, LINK_FRESH_MS,
};
use permafrost_cluster::ClusterNode;
use permafrost_relay::NodeStats;
use permafrost_store::{ListQuery, Store};

use crate::object::CONFIG_FILE;

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

fn timeout_default() -> u64 {
    10_000
}

fn lost_after_default() -> u64 {
    600_000
}

/// The `[cluster]` table of `DATA/permafrost.toml`, if there is one.
pub fn section(data_dir: &Path) -> Result<Option<ClusterSection>> {
    let path = data_dir.join(CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    section_of(&table, &path)
}

/// The `[cluster]` table of a parsed permafrost.toml.
pub fn section_of(table: &toml::Table, path: &Path) -> Result<Option<ClusterSection>> {
    let Some(value) = table.get("cluster") else {
        return Ok(None);
    };
    let section: ClusterSection = value
        .clone()
        .try_into()
        .with_context(|| format!("{}: invalid [cluster] table", path.display()))?;
    if !cluster::valid_node_name(&section.node) {
        bail!(
            "{}: [cluster] node = {:?}: use 1–40 of a-z, 0-9 and _",
            path.display(),
            section.node
        );
    }
    if section.copies == 0 {
        bail!(
            "{}: [cluster] copies = 0: every object needs at least one holder (1 = no copies)",
            path.display()
        );
    }
    if section.heartbeat_ms == 0 || section.timeout_ms <= section.heartbeat_ms {
        bail!(
            "{}: [cluster] needs heartbeat_ms > 0 and timeout_ms > heartbeat_ms",
            path.display()
        );
    }
    if section.lost_after_ms < section.timeout_ms {
        bail!(
            "{}: [cluster] lost_after_ms = {} is shorter than timeout_ms = {}: a node is lost (its copies made \
             again elsewhere) only after it is down; set lost_after_ms ≥ timeout_ms",
            path.display(),
            section.lost_after_ms,
            section.timeout_ms
        );
    }
    Ok(Some(section))
}

/// The PostgreSQL URL a cluster needs, or the one-line error for the SQLite catalog.
pub fn database_url(catalog_url: Option<&str>, path: &Path) -> Result<String> {
    match catalog_url {
        Some(url) if url.starts_with("postgresql://") || url.starts_with("postgres://") => {
            Ok(url.to_owned())
        }
        _ => bail!(
            "{}: [cluster] needs the shared PostgreSQL catalog: add [catalog] url = \"postgresql://…\" (the SQLite \
             catalog belongs to one server)",
            path.display()
        ),
    }
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
        .map_err(|e| anyhow::anyhow!("reading the cluster secret: {e}"))?;
    permafrost_relay::Secret::new(text.as_bytes())
        .map_err(|e| anyhow::anyhow!("the catalog {}: {e}", db.shown_url()))
}

/// Check everything about the cluster and register this node (before the store opens: a refused start changes
/// nothing in the data directory but `DATA/cluster-id` on the first join).
pub fn join(
    data_dir: &Path,
    section: ClusterSection,
    database_url: &str,
    listen: &str,
) -> Result<Membership> {
    let address = section.address.clone().unwrap_or_else(|| listen.to_owned());
    if address.ends_with(":0") {
        bail!(
            "[cluster] address: the other nodes need a fixed address; set [cluster] address or listen on a fixed port (not {address})"
        );
    }
    let db =
        ClusterDb::connect(database_url, section.timeout_ms).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cluster_id = db
        .cluster(&section.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let secret = match &section.secret_file {
        Some(path) => permafrost_relay::Secret::from_file(&data_dir.join(path))
            .map_err(|e| anyhow::anyhow!("[cluster] secret_file: {e}"))?,
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
            crate::serve::write_durable(&id_path, &text)?;
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
    db.make_node_schema(&section.node)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let joined = db
        .join(&cluster_id, &section.node, &instance, &address, 0, 0)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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
    let topology = permafrost_topology::Topology::from_path(path)
        .map_err(|e| anyhow::anyhow!("[cluster] topology {}: {e}", path.display()))?;
    let mut known: Vec<String> = db
        .nodes()
        .map_err(|e| anyhow::anyhow!("{e}"))?
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
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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
    for bucket in store.list_buckets()? {
        if bucket.name == permafrost_catalog::cluster::FRAGMENTS_BUCKET {
            continue; // parity fragments: published by their sender (`fragments`), never as objects
        }
        let mut start_after = None;
        loop {
            let page = store.list_objects(
                &bucket.name,
                &ListQuery {
                    prefix: String::new(),
                    delimiter: None,
                    start_after: start_after.clone(),
                    max_keys: 1000,
                },
            )?;
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
pub fn reconcile(
    store: &Store,
    db: &ClusterDb,
    node_id: i64,
    default_copies: u32,
) -> Result<(usize, usize)> {
    // Deletes made while this node was away first: what they removed must not be published again.
    let deleted = apply_tombstones(store, db, node_id)?;
    if deleted > 0 {
        tracing::info!(
            deleted,
            "cluster: applied the deletes made while this node was away"
        );
    }
    let (buckets, entries) = local_entries(store)?;
    for bucket in &buckets {
        db.add_bucket(bucket).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let (published, removed) = db
        .reconcile_keys(node_id, &entries, default_copies)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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
            db.publish_write(node_id, &entry, default_copies)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            kept += 1;
        }
    }
    Ok((published + kept, removed.len() - kept))
}

/// Delete the copies other nodes' DELETEs left this node tombstones for (the version deleted or an older one; a
/// newer local version stays). Returns the copies deleted.
pub fn apply_tombstones(store: &Store, db: &ClusterDb, node_id: i64) -> Result<usize> {
    let mut deleted = 0;
    for t in db.tombstones(node_id).map_err(|e| anyhow::anyhow!("{e}"))? {
        if permafrost_cluster::apply_tombstone(store, &t).map_err(|e| anyhow::anyhow!("{e}"))? {
            deleted += 1;
        }
        db.clear_tombstone(node_id, &t)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
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
        replication: permafrost_cluster::Replication {
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
    });
    let (published, removed) = reconcile(store, &m.db, m.node_id, m.section.copies)?;
    tracing::info!(
        node = %m.section.node,
        published,
        removed,
        "cluster: directory reconciled"
    );
    let (capacity, used) = capacity_and_used(store);
    m.db.heartbeat(m.node_id, capacity, used)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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
                let mut short_gate = permafrost_cluster::ReportGate::<Vec<String>>::new(REPORT_EVERY);
                let mut catch_up_failing = permafrost_cluster::ReportGate::<bool>::new(REPORT_EVERY);
                let mut rebuild_failing = permafrost_cluster::ReportGate::<bool>::new(REPORT_EVERY);
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
                        Ok(()) if behind.is_some() => match reconcile(&store, &db, node_id, me.replication.copies) {
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
                            if let Err(e) = apply_tombstones(&store, &db, node_id) {
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
    pass: &permafrost_cluster::CatchUp,
    down_seen: &mut Option<Vec<String>>,
    short_gate: &mut permafrost_cluster::ReportGate<Vec<String>>,
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

/// The parity rebuild pass (`permafrost_cluster::rebuild_lost`): the fragments of every node lost (down longer than
/// `lost_after_ms`) or down with an operator's request (`cluster rebuild`) that this node is to rebuild. A request
/// is cleared when its node holds no fragment any more or is up again.
fn rebuild_lost_nodes(me: &ClusterNode, store: &Store, lost_after_ms: u64) -> Result<()> {
    let db = &me.db;
    let mut nodes = db
        .lost_nodes(lost_after_ms)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let requested = db.rebuild_requests().map_err(|e| anyhow::anyhow!("{e}"))?;
    if !requested.is_empty() {
        for n in db.nodes().map_err(|e| anyhow::anyhow!("{e}"))? {
            if !requested.contains(&n.name) {
                continue;
            }
            if n.health == permafrost_catalog::cluster::Health::Up {
                db.clear_rebuild_request(&n.name)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            } else if !nodes.iter().any(|l| l.id == n.id) {
                nodes.push(n);
            }
        }
    }
    for lost in nodes {
        permafrost_cluster::rebuild_lost(me, store, &lost).map_err(|e| anyhow::anyhow!("{e}"))?;
        if requested.contains(&lost.name)
            && db
                .fragments_on(lost.id)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .is_empty()
        {
            db.clear_rebuild_request(&lost.name)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
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
/// (`permafrost_cluster::copy_sink`), from peers that prove the cluster secret. Publishes the address other
/// nodes reach it at (the advertised S3 host with the bound port when the listen host is unspecified).
fn start_relay(
    m: &Membership,
    node: &Arc<ClusterNode>,
    store: &Arc<std::sync::Mutex<Option<Arc<Store>>>>,
) -> Result<String> {
    let listen = relay_listen_address(&m.section, &m.address)?;
    let listener = std::net::TcpListener::bind(&listen)
        .with_context(|| format!("[cluster] relay_address {listen}: cannot listen"))?;
    let bound = listener.local_addr()?;
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
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let slot = Arc::clone(store);
    let sink = permafrost_cluster::copy_sink(slot, Arc::clone(node));
    permafrost_relay::serve(
        listener,
        Arc::new(permafrost_relay::RelayNode {
            name: m.section.node.clone(),
            sink: Some(sink),
            source: Some(permafrost_cluster::fragment_source(Arc::clone(store))),
            stats: Arc::clone(&node.replication.stats),
            secret: m.secret.clone(),
        }),
    );
    Ok(published)
}

/// Transfers `cluster status` shows (the running ones and the newest finished ones).
pub const STATUS_TRANSFERS: usize = 20;

/// What `cluster status` and the admin endpoint show.
#[derive(serde::Serialize)]
pub struct Status {
    pub cluster: String,
    pub cluster_id: String,
    /// The catalog database, `user@host:port/dbname` (no password, no connection options: every node's store
    /// catalog is a schema of this one database).
    pub database: String,
    /// A node whose last heartbeat is older shows as down, ms.
    pub timeout_ms: u64,
    /// … and, older than this, as lost (its copies are made again elsewhere), ms: `[cluster] lost_after_ms` of the
    /// node answering (of the data directory given; the default with `--catalog`).
    pub lost_after_ms: u64,
    /// The database server's clock when this was read, ms since the epoch (the clock of every heartbeat).
    pub now_unix_ms: u64,
    pub nodes: Vec<NodeStatus>,
    /// Nodes per state.
    pub nodes_up: usize,
    pub nodes_down: usize,
    pub nodes_lost: usize,
    /// Objects recorded with fewer copies than wanted (`permafrost_cluster.under_replicated`), per bucket.
    pub under_replicated: UnderReplicatedStatus,
    /// Parity fragments held by nodes that are down or lost, per bucket (those of lost nodes are rebuilt
    /// elsewhere: `cluster rebuild`, docs/cluster.md "Cross-node XOR parity").
    pub parity: Vec<ParityShort>,
    /// How fast the under-replicated record and the fragments of lost nodes shrink ([`RecoveryTracker`]).
    pub recovery: Recovery,
    /// The catalog's topology (none until a node with `[cluster] topology` started).
    pub topology: Option<TopologyStatus>,
    /// The topology's relays, each with the last report of a process running it.
    pub relays: Vec<RelayStatus>,
    /// Every link of the topology with its live use per direction.
    pub links: Vec<LinkStatus>,
    /// Every process that reported link use (relays, data nodes, senders, serve nodes), by node.
    pub reporters: Vec<ReporterInfo>,
    /// Trees in use: running transfers first, then the newest finished ones.
    pub transfers: Vec<TransferInfo>,
    /// How long a link measurement counts, ms.
    pub link_fresh_ms: u64,
}

#[derive(serde::Serialize)]
pub struct NodeStatus {
    pub name: String,
    pub address: String,
    /// `up` or `down` (a lost node is down too): what requests act on.
    pub health: &'static str,
    /// `up`, `down` or `lost` ([`node_state`]).
    pub state: &'static str,
    /// How long the node has been down or lost (since its last heartbeat + the timeout, or + `lost_after_ms`),
    /// ms; none while up (the catalog does not record when a node came back).
    pub state_for_ms: Option<u64>,
    /// When it went down or lost, ms since the epoch on the database's clock; none while up.
    pub state_since_unix_ms: Option<u64>,
    pub heartbeat_age_ms: u64,
    /// Its last heartbeat, ms since the epoch on the database's clock.
    pub heartbeat_unix_ms: u64,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// Objects (copies) and bytes the directory names it as holding.
    pub objects_held: u64,
    pub bytes_held: u64,
    /// Parity fragments it holds.
    pub fragments_held: u64,
}

/// A bucket's parity fragments on nodes that are not up.
#[derive(serde::Serialize, Default, Clone, Debug, PartialEq)]
pub struct ParityShort {
    pub bucket: String,
    /// Held by nodes that are down (not lost yet: not rebuilt unless `cluster rebuild` asks).
    pub fragments_on_down: u64,
    /// Held by lost nodes: the rebuild pass makes them again on nodes that are up.
    pub fragments_on_lost: u64,
}

/// A node's state from the age of its last heartbeat: `up` while it is at most `timeout_ms`, `lost` once it is
/// older than `lost_after_ms`, `down` between (the same comparisons as `ClusterDb::nodes` and
/// `ClusterDb::lost_nodes`), with how long it has been in that state (none while up).
pub fn node_state(
    heartbeat_age_ms: u64,
    timeout_ms: u64,
    lost_after_ms: u64,
) -> (&'static str, Option<u64>) {
    if heartbeat_age_ms > lost_after_ms.max(timeout_ms) {
        (
            "lost",
            Some(heartbeat_age_ms - lost_after_ms.max(timeout_ms)),
        )
    } else if heartbeat_age_ms > timeout_ms {
        ("down", Some(heartbeat_age_ms - timeout_ms))
    } else {
        ("up", None)
    }
}

/// Objects short of copies, in total and per bucket.
#[derive(serde::Serialize, Default, Clone)]
pub struct UnderReplicatedStatus {
    pub objects: u64,
    pub bytes: u64,
    pub missing_copies: u64,
    pub buckets: Vec<cluster::BucketShort>,
}

/// Samples of the under-replicated record kept for [`RECOVERY_WINDOW_MS`].
pub const RECOVERY_WINDOW_MS: u64 = 5 * 60_000;

/// Recovery progress from samples of the under-replicated record (objects and bytes recorded short of copies)
/// taken by this process over time: each drop of the count between two samples is objects healed (a copy or
/// fragment made, or a record dropped); rises (new objects recorded short) are not subtracted. The rate is what
/// was healed over the time the samples span (at most [`RECOVERY_WINDOW_MS`]), the estimated finish what is left
/// at that rate. Times are the caller's clock in ms (a manual one in tests).
#[derive(Default, Debug)]
pub struct RecoveryTracker {
    samples: VecDeque<(u64, u64, u64)>,
}

/// What [`RecoveryTracker::progress`] says.
#[derive(serde::Serialize, Default, Debug, Clone, PartialEq)]
pub struct Recovery {
    /// Objects still recorded short of copies, plus parity fragments on lost nodes (the newest sample).
    pub remaining_objects: u64,
    pub remaining_bytes: u64,
    /// Something is left to heal.
    pub in_progress: bool,
    /// The time the samples span, ms (0: one sample, no rate yet).
    pub window_ms: u64,
    /// Samples taken in that time.
    pub samples: usize,
    /// Objects and bytes healed in that time.
    pub healed_objects: u64,
    pub healed_bytes: u64,
    pub objects_per_minute: f64,
    pub bytes_per_second: f64,
    /// Estimated time to finish at that rate, ms (none when nothing is left or nothing was healed yet).
    pub eta_ms: Option<u64>,
    /// How this was computed.
    pub basis: String,
}

impl RecoveryTracker {
    /// Record the under-replicated totals seen at `at_ms`; samples older than the window are dropped.
    pub fn record(&mut self, at_ms: u64, objects: u64, bytes: u64) {
        if self.samples.back().is_some_and(|&(t, _, _)| at_ms < t) {
            self.samples.clear(); // a clock that went back: start over
        }
        self.samples.push_back((at_ms, objects, bytes));
        while self
            .samples
            .front()
            .is_some_and(|&(t, _, _)| t + RECOVERY_WINDOW_MS < at_ms)
        {
            self.samples.pop_front();
        }
    }

    /// The progress over the samples kept.
    pub fn progress(&self) -> Recovery {
        let Some(&(last_at, objects, bytes)) = self.samples.back() else {
            return Recovery {
                basis: "no sample of the under-replicated record yet".to_owned(),
                ..Default::default()
            };
        };
        let first_at = self.samples.front().map_or(last_at, |s| s.0);
        let (mut healed_objects, mut healed_bytes) = (0u64, 0u64);
        for (a, b) in self.samples.iter().zip(self.samples.iter().skip(1)) {
            healed_objects += a.1.saturating_sub(b.1);
            healed_bytes += a.2.saturating_sub(b.2);
        }
        let window_ms = last_at - first_at;
        let seconds = window_ms as f64 / 1000.0;
        let (objects_per_minute, bytes_per_second) = if window_ms > 0 {
            (
                healed_objects as f64 * 60.0 / seconds,
                healed_bytes as f64 / seconds,
            )
        } else {
            (0.0, 0.0)
        };
        let eta_ms = (objects > 0 && healed_objects > 0)
            .then(|| (objects as f64 * window_ms as f64 / healed_objects as f64).ceil() as u64);
        Recovery {
            remaining_objects: objects,
            remaining_bytes: bytes,
            in_progress: objects > 0,
            window_ms,
            samples: self.samples.len(),
            healed_objects,
            healed_bytes,
            objects_per_minute,
            bytes_per_second,
            eta_ms,
            basis: format!(
                "{} sample(s) of the under-replicated record over {:.1} s: drops of its count are objects healed; \
                 the estimated finish is what is left at that rate",
                self.samples.len(),
                seconds
            ),
        }
    }
}

/// The under-replicated record per bucket, with totals.
pub fn under_replicated_status(
    db: &ClusterDb,
) -> std::result::Result<UnderReplicatedStatus, String> {
    let buckets = db.under_replicated_by_bucket().map_err(|e| e.to_string())?;
    Ok(UnderReplicatedStatus {
        objects: buckets.iter().map(|b| b.objects).sum(),
        bytes: buckets.iter().map(|b| b.bytes).sum(),
        missing_copies: buckets.iter().map(|b| b.missing_copies).sum(),
        buckets,
    })
}

/// What recovery has left, cheaply (the sampler's query): objects recorded short of copies plus the parity
/// fragments lost nodes hold, and the objects' bytes.
pub fn recovery_totals(
    db: &ClusterDb,
    lost_after_ms: u64,
) -> std::result::Result<(u64, u64), String> {
    let short = under_replicated_status(db)?;
    let mut fragments = 0u64;
    for lost in db.lost_nodes(lost_after_ms).map_err(|e| e.to_string())? {
        fragments += db.fragments_on(lost.id).map_err(|e| e.to_string())?.len() as u64;
    }
    Ok((short.objects + fragments, short.bytes))
}

/// The database endpoint of a (password-free) URL: `user@host:port/dbname`, without scheme and options.
pub fn database_endpoint(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    match rest.split_once('@') {
        Some((user, host)) => format!("{}@{host}", user.split(':').next().unwrap_or(user)),
        None => rest.to_owned(),
    }
}

/// Milliseconds of this process's monotonic clock (the recovery samples' clock).
fn process_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

#[derive(serde::Serialize)]
pub struct TopologyStatus {
    /// The file, as the loading node named it.
    pub source: String,
    pub loaded_by: String,
    pub loaded_age_ms: u64,
    pub hash: String,
    pub nodes: Vec<TopologyNode>,
}

#[derive(serde::Serialize)]
pub struct TopologyNode {
    pub name: String,
    pub role: &'static str,
    pub degree_max: Option<u32>,
}

#[derive(serde::Serialize)]
pub struct RelayStatus {
    pub name: String,
    pub degree_max: Option<u32>,
    /// The freshest report of a process running this relay; none if none ever reported.
    pub last_report: Option<ReporterInfo>,
}

/// One link, both directions: `a → b` and `b → a`.
#[derive(serde::Serialize)]
pub struct LinkStatus {
    pub a: String,
    pub b: String,
    pub capacity_mbit: f64,
    /// Live use `a → b`, Mbit/s (fresh measurements summed and clamped to capacity, else the file's value).
    pub used_ab_mbit: f64,
    pub used_ba_mbit: f64,
    /// Bytes counted `a → b` by the reporters still known.
    pub bytes_ab: u64,
    pub bytes_ba: u64,
    /// Age of the freshest measurement of either direction, ms; none if never measured.
    pub measured_age_ms: Option<u64>,
}

/// The cluster's state now, from the catalog.
pub fn status(
    db: &ClusterDb,
    cluster_name: &str,
    cluster_id: &str,
    lost_after_ms: u64,
    tracker: &mut RecoveryTracker,
) -> std::result::Result<Status, String> {
    let e = |e: permafrost_catalog::CatalogError| e.to_string();
    let now_unix_ms = db.now_ms().map_err(e)?;
    let nodes = db.nodes().map_err(e)?;
    let held = db.held_by_node().map_err(e)?;
    let under_replicated = under_replicated_status(db)?;
    let fragments = db.fragments_by_bucket_and_node().map_err(e)?;
    let timeout_ms = db.timeout_ms();
    let state_of = |id: i64| {
        nodes.iter().find(|n| n.id == id).map_or("up", |n| {
            node_state(n.heartbeat_age_ms, timeout_ms, lost_after_ms).0
        })
    };
    let mut parity: Vec<ParityShort> = Vec::new();
    for f in &fragments {
        let state = state_of(f.node_id);
        if state == "up" {
            continue;
        }
        if parity.last().is_none_or(|p| p.bucket != f.bucket) {
            parity.push(ParityShort {
                bucket: f.bucket.clone(),
                ..Default::default()
            });
        }
        let p = parity.last_mut().expect("pushed");
        if state == "lost" {
            p.fragments_on_lost += f.fragments;
        } else {
            p.fragments_on_down += f.fragments;
        }
    }
    let lost_fragments: u64 = parity.iter().map(|p| p.fragments_on_lost).sum();
    tracker.record(
        process_ms(),
        under_replicated.objects + lost_fragments,
        under_replicated.bytes,
    );
    let recovery = tracker.progress();
    let stored = db.topology().map_err(e)?;
    let uses = db.link_use(LINK_FRESH_MS).map_err(e)?;
    let reporters = db.reporters().map_err(e)?;
    let transfers = db.transfers(STATUS_TRANSFERS).map_err(e)?;
    let (mut topology, mut relays, mut links) = (None, Vec::new(), Vec::new());
    if let Some((mut t, source)) = stored {
        cluster::apply_link_use(&mut t, &uses);
        let use_of = |from: &str, to: &str| uses.iter().find(|u| u.from == from && u.to == to);
        for l in t.links() {
            let (a, b) = (t.name(l.a), t.name(l.b));
            let (ab, ba) = (use_of(a, b), use_of(b, a));
            links.push(LinkStatus {
                a: a.to_owned(),
                b: b.to_owned(),
                capacity_mbit: l.capacity_mbit,
                used_ab_mbit: l.used_mbit[0],
                used_ba_mbit: l.used_mbit[1],
                bytes_ab: ab.map_or(0, |u| u.bytes),
                bytes_ba: ba.map_or(0, |u| u.bytes),
                measured_age_ms: ab.iter().chain(ba.iter()).map(|u| u.age_ms).min(),
            });
        }
        for n in t.nodes() {
            if n.role == permafrost_topology::Role::Relay {
                relays.push(RelayStatus {
                    name: n.name.clone(),
                    degree_max: n.degree_max,
                    last_report: reporters
                        .iter()
                        .filter(|r| r.node == n.name)
                        .min_by_key(|r| r.age_ms)
                        .cloned(),
                });
            }
        }
        topology = Some(TopologyStatus {
            source: source.source,
            loaded_by: source.loaded_by,
            loaded_age_ms: source.age_ms,
            hash: source.hash,
            nodes: t
                .nodes()
                .iter()
                .map(|n| TopologyNode {
                    name: n.name.clone(),
                    role: n.role.as_str(),
                    degree_max: n.degree_max,
                })
                .collect(),
        });
    }
    let nodes: Vec<NodeStatus> = nodes
        .into_iter()
        .map(|n| {
            let (state, state_for_ms) = node_state(n.heartbeat_age_ms, timeout_ms, lost_after_ms);
            let mine = held.iter().find(|h| h.node_id == n.id);
            NodeStatus {
                address: n.address,
                health: n.health.as_str(),
                state,
                state_for_ms,
                state_since_unix_ms: state_for_ms.map(|f| now_unix_ms.saturating_sub(f)),
                heartbeat_age_ms: n.heartbeat_age_ms,
                heartbeat_unix_ms: n.heartbeat_ms,
                capacity_bytes: n.capacity_bytes,
                used_bytes: n.used_bytes,
                objects_held: mine.map_or(0, |h| h.objects),
                bytes_held: mine.map_or(0, |h| h.bytes),
                fragments_held: fragments
                    .iter()
                    .filter(|f| f.node_id == n.id)
                    .map(|f| f.fragments)
                    .sum(),
                name: n.name,
            }
        })
        .collect();
    let count = |state: &str| nodes.iter().filter(|n| n.state == state).count();
    Ok(Status {
        cluster: cluster_name.to_owned(),
        cluster_id: cluster_id.to_owned(),
        database: database_endpoint(db.shown_url()),
        timeout_ms,
        lost_after_ms,
        now_unix_ms,
        nodes_up: count("up"),
        nodes_down: count("down"),
        nodes_lost: count("lost"),
        nodes,
        under_replicated,
        parity,
        recovery,
        topology,
        relays,
        links,
        reporters,
        transfers,
        link_fresh_ms: LINK_FRESH_MS,
    })
}

/// Add `GET /_permafrost/api/v1/cluster` (the same JSON as `permafrost cluster status --json`) and the cluster's
/// series in the metrics. A thread samples the under-replicated record every `max(heartbeat_ms, 1 s)` for the
/// recovery rate (each answer samples it too), until the admin drops the endpoint.
pub fn add_endpoint(
    admin: &permafrost_admin::Admin,
    db: Arc<ClusterDb>,
    section: ClusterSection,
    cluster_id: String,
    data_dir: PathBuf,
) {
    use permafrost_admin::{handler, json, ApiError};
    let _ = data_dir;
    let tracker = Arc::new(std::sync::Mutex::new(RecoveryTracker::default()));
    let every = Duration::from_millis(section.heartbeat_ms.max(1000));
    let context = Arc::new((db, section, cluster_id, Arc::clone(&tracker)));
    {
        let weak = Arc::downgrade(&context);
        let _ = std::thread::Builder::new()
            .name("permafrost-cluster-sampler".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                let Some(context) = weak.upgrade() else {
                    return;
                };
                if let Ok((items, bytes)) = recovery_totals(&context.0, context.1.lost_after_ms) {
                    lock(&context.3).record(process_ms(), items, bytes);
                }
            });
    }
    let figures_context = Arc::downgrade(&context);
    admin.set_cluster_source(Arc::new(move || {
        let context = figures_context
            .upgrade()
            .ok_or_else(|| "the cluster endpoint is gone".to_owned())?;
        let (db, section, id, tracker) = &*context;
        let s = status(
            db,
            &section.name,
            id,
            section.lost_after_ms,
            &mut lock(tracker),
        )?;
        Ok(figures(&s))
    }));
    admin.route(
        http::Method::GET,
        "/cluster",
        handler(move |_admin, _req| {
            let context = Arc::clone(&context);
            async move {
                let answer = tokio::task::spawn_blocking(move || {
                    let (db, section, id, tracker) = &*context;
                    status(
                        db,
                        &section.name,
                        id,
                        section.lost_after_ms,
                        &mut lock(tracker),
                    )
                })
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .map_err(|e| {
                    ApiError::new(
                        http::StatusCode::SERVICE_UNAVAILABLE,
                        "ServiceUnavailable",
                        format!("the cluster catalog database is unavailable: {e}"),
                    )
                })?;
                json(&answer)
            }
        }),
    );
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The metrics' view of a status.
pub fn figures(s: &Status) -> permafrost_admin::ClusterFigures {
    permafrost_admin::ClusterFigures {
        nodes: s
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.state, n.heartbeat_age_ms as f64 / 1000.0))
            .collect(),
        timeout_seconds: s.timeout_ms as f64 / 1000.0,
        lost_after_seconds: s.lost_after_ms as f64 / 1000.0,
        under_replicated: s
            .under_replicated
            .buckets
            .iter()
            .map(|b| (b.bucket.clone(), b.objects, b.bytes, b.missing_copies))
            .collect(),
        recovery_remaining_objects: s.recovery.remaining_objects,
        recovery_objects_per_second: s.recovery.objects_per_minute / 60.0,
        recovery_bytes_per_second: s.recovery.bytes_per_second,
        recovery_eta_seconds: s.recovery.eta_ms.map(|ms| ms as f64 / 1000.0),
    }
}

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Nodes (health, heartbeat, capacity, use), relays, links with their live use, and the trees in use.
    Status(StatusArgs),
    /// A bucket's redundancy: its own `copies` (nodes holding each of its objects, overriding the cluster's
    /// `[cluster] copies`) or cross-node XOR parity (`--parity xor`).
    Bucket(BucketArgs),
    /// Rebuild the parity fragments a node that is down held, now (before `[cluster] lost_after_ms`): the
    /// nodes that are up rebuild them on their next catch-up pass.
    Rebuild(RebuildArgs),
}

#[derive(Args)]
pub struct RebuildArgs {
    /// The node whose fragments to rebuild (it must be down).
    #[arg(long)]
    node: String,
    /// Data directory of a node of the cluster.
    #[arg(long, default_value = "./permafrost-data")]
    data_dir: PathBuf,
}

#[derive(Args)]
pub struct BucketArgs {
    /// The bucket (cluster-wide).
    name: String,
    /// Nodes holding each new object of the bucket: 1 up to the nodes of the cluster, or `default` for the
    /// cluster's `[cluster] copies`. Without it: show the bucket's setting.
    #[arg(long, conflicts_with = "parity")]
    copies: Option<String>,
    /// `xor`: each new object is held as three fragments A, B and A⊕B on three nodes (needs 3 nodes); `none`:
    /// back to copies.
    #[arg(long)]
    parity: Option<String>,
    /// Data directory of a node of the cluster.
    #[arg(long, default_value = "./permafrost-data")]
    data_dir: PathBuf,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Data directory of a node of the cluster (its permafrost.toml names the database and the cluster).
    #[arg(long, default_value = "./permafrost-data")]
    data_dir: PathBuf,
    /// The cluster's catalog database (postgresql://…), instead of a node's data directory.
    #[arg(long, value_name = "URL")]
    catalog: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// While objects are under-replicated, sample the record twice this far apart for the recovery rate and
    /// estimated finish (0: one look, no rate).
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    sample_ms: u64,
}

pub fn run(command: ClusterCommand) -> Result<()> {
    match command {
        ClusterCommand::Status(args) => run_status(args),
        ClusterCommand::Bucket(args) => run_bucket(args),
        ClusterCommand::Rebuild(args) => run_rebuild(args),
    }
}

/// The cluster a node's data directory belongs to: its `[cluster]` table, the shared catalog, the cluster id.
fn open_from_data_dir(data_dir: &Path) -> Result<(ClusterSection, ClusterDb, String)> {
    let path = data_dir.join(CONFIG_FILE);
    let Some(section) = section(data_dir)? else {
        bail!(
            "{}: no [cluster] table: this data directory is not a node of a cluster",
            path.display()
        );
    };
    let config = crate::object::load_config(data_dir)?;
    let url = database_url(config.catalog.url.as_deref(), &path)?;
    let db = ClusterDb::connect(&url, section.timeout_ms).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cluster_id = db
        .cluster(&section.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((section, db, cluster_id))
}

fn run_bucket(args: BucketArgs) -> Result<()> {
    let (section, db, _) = open_from_data_dir(&args.data_dir)?;
    if !db
        .bucket_exists(&args.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        bail!("no such bucket in the cluster: {}", args.name);
    }
    let wanted = match args.copies.as_deref() {
        None => None,
        Some("default") => Some(None),
        Some(text) => {
            let nodes = db.nodes().map_err(|e| anyhow::anyhow!("{e}"))?.len();
            match text.parse::<u32>() {
                Ok(k) if k >= 1 && k as usize <= nodes => Some(Some(k)),
                Ok(k) if k >= 1 => bail!(
                    "--copies {k}: the cluster has only {nodes} node(s); at most {nodes} copies"
                ),
                _ => bail!(
                    "--copies {text:?}: a number of nodes from 1 (no copies) up to the nodes of the cluster, or `default`"
                ),
            }
        }
    };
    if let Some(copies) = wanted {
        let effective = copies.unwrap_or(section.copies);
        if effective > 1 {
            // Copies do not cover versions (docs/cluster.md "Copies"): refused rather than half done.
            let on = db
                .versioned_on(&args.name)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            if !on.is_empty() {
                bail!(
                    "bucket {}: copies = {effective} refused: versioning is on for it (on node(s) {}), and copies \
                     do not cover versioned buckets yet",
                    args.name,
                    on.join(", ")
                );
            }
        }
        db.set_bucket_copies(&args.name, copies)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        db.set_bucket_parity(&args.name, None)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    match args.parity.as_deref() {
        None => {}
        Some("none") => db
            .set_bucket_parity(&args.name, None)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        Some(permafrost_cluster::XOR) => {
            let nodes = db.nodes().map_err(|e| anyhow::anyhow!("{e}"))?.len();
            if nodes < 3 {
                bail!("--parity xor: the cluster has only {nodes} node(s); XOR parity needs 3 (A, B and A⊕B on three nodes)");
            }
            db.set_bucket_parity(&args.name, Some(permafrost_cluster::XOR))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Some(other) => {
            bail!("--parity {other:?}: `xor` (A, B and A⊕B on three nodes) or `none` (copies)")
        }
    }
    if db
        .bucket_parity(&args.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .is_some()
    {
        println!(
            "bucket {}: parity = xor (A, B and A⊕B on three nodes)",
            args.name
        );
        return Ok(());
    }
    match db
        .bucket_copies(&args.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        Some(k) => println!("bucket {}: copies = {k}", args.name),
        None => println!(
            "bucket {}: copies = the cluster default ([cluster] copies, {} on this node)",
            args.name, section.copies
        ),
    }
    Ok(())
}

fn run_rebuild(args: RebuildArgs) -> Result<()> {
    let (_, db, _) = open_from_data_dir(&args.data_dir)?;
    let nodes = db.nodes().map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(node) = nodes.iter().find(|n| n.name == args.node) else {
        bail!("no such node in the cluster: {}", args.node);
    };
    if node.health == permafrost_catalog::cluster::Health::Up {
        bail!(
            "node {} is up (last heartbeat {} ms ago): only a node that is down is rebuilt",
            node.name,
            node.heartbeat_age_ms
        );
    }
    let held = db
        .fragments_on(node.id)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .len();
    db.request_rebuild(&node.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "rebuild of node {} requested: {held} fragments; the nodes that are up rebuild them on their next catch-up pass",
        node.name
    );
    Ok(())
}

/// Connect to a catalog database given on the command line (`--catalog URL` of `cluster status` and
/// `permafrost relay`).
pub fn connect_catalog(url: &str) -> Result<ClusterDb> {
    let url = database_url(Some(url), Path::new("--catalog"))?;
    ClusterDb::connect(&url, timeout_default()).map_err(|e| anyhow::anyhow!("{e}"))
}

fn run_status(args: StatusArgs) -> Result<()> {
    let (db, name, cluster_id, lost_after_ms) = match &args.catalog {
        Some(url) => {
            let db = connect_catalog(url)?;
            let (id, name) = db
                .cluster_identity()
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .unwrap_or_else(|| ("(none yet)".to_owned(), "(no node joined yet)".to_owned()));
            (db, name, id, lost_after_default())
        }
        None => {
            let (section, db, cluster_id) = open_from_data_dir(&args.data_dir)?;
            (db, section.name, cluster_id, section.lost_after_ms)
        }
    };
    // One process, one look: a rate needs a second sample a moment later.
    let mut tracker = RecoveryTracker::default();
    if args.sample_ms > 0 {
        let (items, bytes) =
            recovery_totals(&db, lost_after_ms).map_err(|e| anyhow::anyhow!("{e}"))?;
        if items > 0 {
            tracker.record(process_ms(), items, bytes);
            std::thread::sleep(Duration::from_millis(args.sample_ms));
        }
    }
    let status = status(&db, &name, &cluster_id, lost_after_ms, &mut tracker)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    print!("{}", status_text(&status));
    Ok(())
}

/// `850 ms`, `4.2 s`, `3 min 20 s`, `2 h 5 min`.
pub fn duration_text(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `cluster status` as text: one line per node, relay, link and transfer.
pub fn status_text(status: &Status) -> String {
    use crate::units::format_bytes;
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cluster {} (id {}), database {}",
        status.cluster, status.cluster_id, status.database,
    );
    let _ = writeln!(
        out,
        "nodes: {} up, {} down, {} lost; a node is down after {} without a heartbeat, lost after {} (its copies \
         are then made again elsewhere)",
        status.nodes_up,
        status.nodes_down,
        status.nodes_lost,
        duration_text(status.timeout_ms),
        duration_text(status.lost_after_ms)
    );
    let _ = writeln!(
        out,
        "{:<16} {:<22} {:<20} {:>14} {:>10} {:>10} {:>10} {:>10}",
        "node", "address", "state", "heartbeat", "capacity", "used", "objects", "held"
    );
    for n in &status.nodes {
        let state = match n.state_for_ms {
            Some(ms) => format!("{} for {}", n.state, duration_text(ms)),
            None => n.state.to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<16} {:<22} {:<20} {:>10} ago {:>10} {:>10} {:>10} {:>10}",
            n.name,
            n.address,
            state,
            duration_text(n.heartbeat_age_ms),
            format_bytes(n.capacity_bytes),
            format_bytes(n.used_bytes),
            n.objects_held,
            format_bytes(n.bytes_held)
        );
    }
    let u = &status.under_replicated;
    if u.objects == 0 {
        let _ = writeln!(out, "under-replicated: none (every object has its copies)");
    } else {
        let _ = writeln!(
            out,
            "under-replicated: {} object(s), {}, {} copies missing",
            u.objects,
            format_bytes(u.bytes),
            u.missing_copies
        );
        let _ = writeln!(
            out,
            "  {:<30} {:>10} {:>12} {:>10}",
            "bucket", "objects", "bytes", "missing"
        );
        for b in &u.buckets {
            let _ = writeln!(
                out,
                "  {:<30} {:>10} {:>12} {:>10}",
                b.bucket,
                b.objects,
                format_bytes(b.bytes),
                b.missing_copies
            );
        }
    }
    for p in &status.parity {
        let _ = writeln!(
            out,
            "parity {}: {} fragment(s) on lost nodes (rebuilt elsewhere), {} on nodes down",
            p.bucket, p.fragments_on_lost, p.fragments_on_down
        );
    }
    let r = &status.recovery;
    if r.in_progress {
        match r.eta_ms {
            Some(eta) => {
                let _ = writeln!(
                    out,
                    "recovery: {} object(s) healed in the last {} ({:.1}/min, {}/s); {} left, estimated finish in {}",
                    r.healed_objects,
                    duration_text(r.window_ms),
                    r.objects_per_minute,
                    format_bytes(r.bytes_per_second as u64),
                    r.remaining_objects,
                    duration_text(eta)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "recovery: no object healed in the last {} ({} sample(s)); {} left, no estimated finish yet",
                    duration_text(r.window_ms),
                    r.samples,
                    r.remaining_objects
                );
            }
        }
    }
    let Some(t) = &status.topology else {
        let _ = writeln!(
            out,
            "topology: none in the catalog (a node with [cluster] topology loads it at start)"
        );
        return out;
    };
    let _ = writeln!(
        out,
        "topology {} (loaded by {} {} ago): {} nodes, {} links; link use counts for {} after a measurement",
        t.source,
        t.loaded_by,
        seconds(t.loaded_age_ms),
        t.nodes.len(),
        status.links.len(),
        seconds(status.link_fresh_ms)
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>16} {:>8} {:>10} {:>10}",
        "relay", "degree_max", "last report", "streams", "in", "out"
    );
    for r in &status.relays {
        let degree = r.degree_max.map_or("-".to_owned(), |d| d.to_string());
        match &r.last_report {
            Some(p) => {
                let _ = writeln!(
                    out,
                    "{:<16} {:>10} {:>12} ago {:>8} {:>10} {:>10}",
                    r.name,
                    degree,
                    seconds(p.age_ms),
                    p.streams,
                    format_bytes(p.bytes_in),
                    format_bytes(p.bytes_out)
                );
            }
            None => {
                let _ = writeln!(out, "{:<16} {:>10} {:>16}", r.name, degree, "never");
            }
        }
    }
    let _ = writeln!(
        out,
        "{:<28} {:>10} {:>22} {:>22} {:>10}",
        "link a → b", "capacity", "used a → b", "used b → a", "measured"
    );
    for l in &status.links {
        let pct = |used: f64| 100.0 * used / l.capacity_mbit;
        let _ = writeln!(
            out,
            "{:<28} {:>5} Mbit/s {:>7.1} Mbit/s ({:>3.0}%) {:>7.1} Mbit/s ({:>3.0}%) {:>10}",
            format!("{} → {}", l.a, l.b),
            l.capacity_mbit,
            l.used_ab_mbit,
            pct(l.used_ab_mbit),
            l.used_ba_mbit,
            pct(l.used_ba_mbit),
            l.measured_age_ms
                .map_or("never".to_owned(), |ms| format!("{} ago", seconds(ms)))
        );
    }
    if status.transfers.is_empty() {
        let _ = writeln!(out, "transfers: none recorded");
    }
    for x in &status.transfers {
        let state = match &x.outcome {
            None => format!("running for {}", seconds(x.duration_ms)),
            Some(o) => format!(
                "{o} after {}, started {} ago",
                seconds(x.duration_ms),
                seconds(x.started_age_ms)
            ),
        };
        let _ = writeln!(
            out,
            "transfer {} {} {} ({}, k = {}): {} — {state}",
            x.id,
            x.kind,
            x.name,
            format_bytes(x.bytes),
            x.k,
            x.tree
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_up_then_down_after_the_timeout_then_lost_after_lost_after_ms() {
        // timeout 3 s, lost after 10 s
        assert_eq!(node_state(0, 3000, 10_000), ("up", None));
        assert_eq!(node_state(3000, 3000, 10_000), ("up", None));
        assert_eq!(node_state(3001, 3000, 10_000), ("down", Some(1)));
        assert_eq!(node_state(10_000, 3000, 10_000), ("down", Some(7000)));
        assert_eq!(node_state(10_001, 3000, 10_000), ("lost", Some(1)));
        assert_eq!(node_state(70_000, 3000, 10_000), ("lost", Some(60_000)));
        // lost_after equal to the timeout: down is skipped
        assert_eq!(node_state(3001, 3000, 3000), ("lost", Some(1)));
    }

    #[test]
    fn recovery_rate_and_finish_come_from_drops_of_the_under_replicated_count() {
        let mut t = RecoveryTracker::default();
        let r = t.progress();
        assert!(!r.in_progress && r.eta_ms.is_none() && r.samples == 0);
        // One sample: something left, no rate yet.
        t.record(1_000, 100, 100_000);
        let r = t.progress();
        assert!(r.in_progress);
        assert_eq!((r.window_ms, r.healed_objects, r.eta_ms), (0, 0, None));
        // 10 healed in 10 s: 60/min, 90 left → 90 s.
        t.record(11_000, 90, 90_000);
        let r = t.progress();
        assert_eq!(
            (r.window_ms, r.healed_objects, r.healed_bytes),
            (10_000, 10, 10_000)
        );
        assert!((r.objects_per_minute - 60.0).abs() < 1e-9);
        assert!((r.bytes_per_second - 1000.0).abs() < 1e-9);
        assert_eq!(r.eta_ms, Some(90_000));
        // New objects recorded short (a rise) are not subtracted from what was healed.
        t.record(21_000, 95, 95_000);
        t.record(31_000, 85, 85_000);
        let r = t.progress();
        assert_eq!((r.window_ms, r.healed_objects), (30_000, 20));
        assert_eq!(r.eta_ms, Some((85.0f64 * 30_000.0 / 20.0).ceil() as u64));
        // Done: nothing left, no estimate.
        t.record(41_000, 0, 0);
        let r = t.progress();
        assert!(!r.in_progress);
        assert_eq!(
            (r.remaining_objects, r.eta_ms, r.healed_objects),
            (0, None, 105)
        );
        // Samples older than the window are dropped: a stall shows no rate.
        t.record(41_000 + RECOVERY_WINDOW_MS + 1, 5, 5);
        let r = t.progress();
        assert_eq!((r.samples, r.healed_objects, r.eta_ms), (1, 0, None));
        // A clock that goes back starts over.
        t.record(10, 5, 5);
        assert_eq!(t.progress().samples, 1);
    }

    #[test]
    fn the_database_is_shown_once_without_password_scheme_or_options() {
        assert_eq!(
            database_endpoint(
                "postgresql://permafrost@127.0.0.1:5432/c_1?options=-csearch_path%3Dpf_node_a"
            ),
            "permafrost@127.0.0.1:5432/c_1"
        );
        assert_eq!(
            database_endpoint("postgres://me:secret@db.example:5432/archive"),
            "me@db.example:5432/archive"
        );
        assert_eq!(database_endpoint("postgresql://db/x"), "db/x");
    }

    #[test]
    fn durations_read_as_an_operator_would_say_them() {
        assert_eq!(duration_text(850), "850 ms");
        assert_eq!(duration_text(4200), "4.2 s");
        assert_eq!(duration_text(200_000), "3 min 20 s");
        assert_eq!(duration_text(7_500_000), "2 h 5 min");
    }

    #[test]
    fn lost_after_ms_defaults_to_ten_minutes_and_may_not_be_shorter_than_the_timeout() {
        let parse = |extra: &str| {
            let text = format!("[cluster]\nname = \"c\"\nnode = \"n1\"\n{extra}");
            let table: toml::Table = toml::from_str(&text).unwrap();
            section_of(&table, Path::new("D/permafrost.toml"))
        };
        let s = parse("").unwrap().unwrap();
        assert_eq!((s.timeout_ms, s.lost_after_ms), (10_000, 600_000));
        let s = parse("heartbeat_ms = 200\ntimeout_ms = 1000\nlost_after_ms = 3000\n")
            .unwrap()
            .unwrap();
        assert_eq!(s.lost_after_ms, 3000);
        let e = parse("lost_after_ms = 5000\n").unwrap_err().to_string();
        assert!(
            e.contains("lost_after_ms = 5000 is shorter than timeout_ms = 10000"),
            "{e}"
        );
    }

    #[test]
    fn the_relay_listens_where_configured_else_on_the_node_s_own_host_never_everywhere() {
        let section = |extra: &str| {
            let text = format!("[cluster]\nname = \"c\"\nnode = \"n1\"\n{extra}");
            let table: toml::Table = toml::from_str(&text).unwrap();
            section_of(&table, Path::new("D/permafrost.toml"))
                .unwrap()
                .unwrap()
        };
        let configured = section("relay_address = \"10.1.0.5:9400\"\n");
        assert_eq!(
            relay_listen_address(&configured, "0.0.0.0:9000").unwrap(),
            "10.1.0.5:9400"
        );
        let default = section("");
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
