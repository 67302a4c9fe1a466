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
//! topology = "topology.toml" # optional: the network (docs/cluster.md "Topology file")
//! copies = 2                # nodes holding each object (the cluster default; a bucket may set its own) [1]
//! relay_address = "0.0.0.0:9400" # where this node's in-process relay listens [an ephemeral port]
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
//! missing copies of under-replicated objects it holds (`permafrost_s3::ClusterNode::catch_up`). The node's
//! relay (`permafrost_relay::serve`, storing copies into this node's store) listens on `relay_address`, which is
//! published in the nodes table.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use permafrost_catalog::cluster::{self, ClusterDb, DirEntry, NodeInfo};
use permafrost_s3::ClusterNode;
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
    #[serde(default)]
    pub topology: Option<PathBuf>,
    /// Nodes holding each object, the cluster default (a bucket may set its own: `cluster bucket`).
    #[serde(default = "copies_default")]
    pub copies: u32,
    /// Where this node's relay listens (`host:port`; port 0 = any free port) [`0.0.0.0:0`].
    #[serde(default)]
    pub relay_address: Option<String>,
    /// With a topology: the `permafrost relay serve` processes it names, `name = "host:port"`.
    #[serde(default)]
    pub relays: std::collections::BTreeMap<String, String>,
}

fn copies_default() -> u32 {
    1
}

/// Heartbeats between two catch-up passes over the under-replicated objects.
pub const CATCH_UP_BEATS: u64 = 3;

fn heartbeat_default() -> u64 {
    2000
}

fn timeout_default() -> u64 {
    10_000
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

/// Every object the local store holds (current versions), for the directory.
fn local_entries(store: &Store) -> Result<(Vec<String>, Vec<DirEntry>)> {
    let mut buckets = Vec::new();
    let mut entries = Vec::new();
    for bucket in store.list_buckets()? {
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
pub fn reconcile(store: &Store, db: &ClusterDb, node_id: i64) -> Result<(usize, usize)> {
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
    db.reconcile(node_id, &entries)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Delete the copies other nodes' DELETEs left this node tombstones for (the version deleted or an older one; a
/// newer local version stays). Returns the copies deleted.
pub fn apply_tombstones(store: &Store, db: &ClusterDb, node_id: i64) -> Result<usize> {
    let mut deleted = 0;
    for t in db.tombstones(node_id).map_err(|e| anyhow::anyhow!("{e}"))? {
        if permafrost_s3::apply_tombstone(store, &t).map_err(|e| anyhow::anyhow!("{e}"))? {
            deleted += 1;
        }
        db.clear_tombstone(node_id, &t)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(deleted)
}

/// Capacity of the grid and the stored bytes the catalog counts.
fn capacity_and_used(store: &Store) -> (u64, u64) {
    let engine = store.engine();
    let capacity = engine.bucket_capacity_bytes() * engine.buckets() as u64;
    let used = store
        .catalog()
        .stats()
        .map(|s| s.contents_by_state.iter().map(|(_, _, bytes)| bytes).sum())
        .unwrap_or(0);
    (capacity, used)
}

/// The running membership: heartbeats until dropped.
pub struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The store as the relay's sink sees it; emptied at stop so that the archive can close.
    relay_store: Arc<std::sync::Mutex<Option<Arc<Store>>>>,
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
        replication: permafrost_s3::Replication {
            copies: m.section.copies,
            topology: m.topology.clone(),
            relays: m.section.relays.clone(),
            ..Default::default()
        },
    });
    let (published, removed) = reconcile(store, &m.db, m.node_id)?;
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
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (stop, store, db) = (Arc::clone(&stop), Arc::clone(store), Arc::clone(&m.db));
        let me = Arc::clone(&node);
        let (node_id, every) = (m.node_id, Duration::from_millis(m.section.heartbeat_ms));
        std::thread::Builder::new()
            .name("permafrost-heartbeat".into())
            .spawn(move || {
                let mut failing = false;
                let mut last = (capacity, used);
                let mut beats = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(every);
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    beats += 1;
                    // Bytes used are summed over the catalog: every 10th heartbeat, not every one.
                    if !failing && beats.is_multiple_of(10) {
                        last = capacity_and_used(&store);
                    }
                    match db.heartbeat(node_id, last.0, last.1) {
                        Ok(()) if failing => match reconcile(&store, &db, node_id) {
                            Ok((p, r)) => {
                                failing = false;
                                tracing::warn!(published = p, removed = r, "cluster: the catalog database is back; directory reconciled");
                            }
                            Err(e) => tracing::warn!("cluster: reconcile after the database came back failed: {e}"),
                        },
                        Ok(()) => {
                            if let Err(e) = apply_tombstones(&store, &db, node_id) {
                                tracing::warn!("cluster: applying deletes failed: {e:#}");
                            }
                            if beats.is_multiple_of(CATCH_UP_BEATS) {
                                match me.catch_up(&store) {
                                    Ok(0) => {}
                                    Ok(made) => tracing::info!(made, "cluster: catch-up made missing copies"),
                                    Err(e) => tracing::warn!("cluster: catch-up failed: {e}"),
                                }
                            }
                        }
                        Err(e) => {
                            if !failing {
                                tracing::error!("cluster: heartbeat failed (requests answer 503 until the database is back): {e}");
                            }
                            failing = true;
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
        },
    ))
}

/// Listen on `[cluster] relay_address` and serve the relay node role in-process: copies that arrive are
/// stored into this node's store (`permafrost_s3::cluster::copy_sink`). Publishes the address other nodes
/// reach it at (the advertised S3 host with the bound port when the listen host is unspecified).
fn start_relay(
    m: &Membership,
    node: &Arc<ClusterNode>,
    store: &Arc<std::sync::Mutex<Option<Arc<Store>>>>,
) -> Result<String> {
    let listen = m
        .section
        .relay_address
        .clone()
        .unwrap_or_else(|| "0.0.0.0:0".to_owned());
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
    let sink = permafrost_s3::copy_sink(slot, Arc::clone(node));
    permafrost_relay::serve(
        listener,
        Arc::new(permafrost_relay::RelayNode {
            name: m.section.node.clone(),
            sink: Some(sink),
            source: None,
            stats: Arc::new(permafrost_relay::NodeStats::default()),
        }),
    );
    Ok(published)
}

/// What `cluster status` and the admin endpoint show.
#[derive(serde::Serialize)]
pub struct Status {
    pub cluster: String,
    pub cluster_id: String,
    pub database: String,
    pub timeout_ms: u64,
    pub nodes: Vec<NodeStatus>,
    pub topology: Option<String>,
}

#[derive(serde::Serialize)]
pub struct NodeStatus {
    pub name: String,
    pub address: String,
    pub health: &'static str,
    pub heartbeat_age_ms: u64,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
}

impl From<NodeInfo> for NodeStatus {
    fn from(n: NodeInfo) -> Self {
        NodeStatus {
            name: n.name,
            address: n.address,
            health: n.health.as_str(),
            heartbeat_age_ms: n.heartbeat_age_ms,
            capacity_bytes: n.capacity_bytes,
            used_bytes: n.used_bytes,
        }
    }
}

/// The cluster's state now.
pub fn status(
    db: &ClusterDb,
    section: &ClusterSection,
    cluster_id: &str,
    data_dir: &Path,
) -> std::result::Result<Status, String> {
    let nodes = db.nodes().map_err(|e| e.to_string())?;
    let topology = match &section.topology {
        None => None,
        Some(path) => {
            let path = data_dir.join(path);
            Some(match permafrost_topology::Topology::from_path(&path) {
                Ok(t) => describe_topology(&t),
                Err(e) => format!("{}: {e}", path.display()),
            })
        }
    };
    Ok(Status {
        cluster: section.name.clone(),
        cluster_id: cluster_id.to_owned(),
        database: db.shown_url().to_owned(),
        timeout_ms: db.timeout_ms(),
        nodes: nodes.into_iter().map(NodeStatus::from).collect(),
        topology,
    })
}

fn describe_topology(t: &permafrost_topology::Topology) -> String {
    let nodes: Vec<String> = t
        .nodes()
        .iter()
        .map(|n| format!("{} ({})", n.name, n.role.as_str()))
        .collect();
    let links: Vec<String> = t
        .links()
        .iter()
        .map(|l| format!("{}–{} {} Mbit/s", t.name(l.a), t.name(l.b), l.capacity_mbit))
        .collect();
    format!("nodes: {}; links: {}", nodes.join(", "), links.join(", "))
}

/// Add `GET /_permafrost/api/v1/cluster` (the same JSON as `permafrost cluster status --json`).
pub fn add_endpoint(
    admin: &permafrost_admin::Admin,
    db: Arc<ClusterDb>,
    section: ClusterSection,
    cluster_id: String,
    data_dir: PathBuf,
) {
    use permafrost_admin::{handler, json, ApiError};
    let context = Arc::new((db, section, cluster_id, data_dir));
    admin.route(
        http::Method::GET,
        "/cluster",
        handler(move |_admin, _req| {
            let context = Arc::clone(&context);
            async move {
                let answer = tokio::task::spawn_blocking(move || {
                    let (db, section, id, dir) = &*context;
                    status(db, section, id, dir)
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

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Nodes (address, health, last heartbeat, capacity and use) and the topology, from the shared catalog.
    Status(StatusArgs),
    /// A bucket's own `copies` (nodes holding each of its objects), overriding the cluster's `[cluster] copies`.
    Bucket(BucketArgs),
}

#[derive(Args)]
pub struct BucketArgs {
    /// The bucket (cluster-wide).
    name: String,
    /// Nodes holding each new object of the bucket: 1 up to the nodes of the cluster, or `default` for the
    /// cluster's `[cluster] copies`. Without it: show the bucket's setting.
    #[arg(long)]
    copies: Option<String>,
    /// Data directory of a node of the cluster.
    #[arg(long, default_value = "./permafrost-data")]
    data_dir: PathBuf,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Data directory of a node of the cluster (its permafrost.toml names the database and the cluster).
    #[arg(long, default_value = "./permafrost-data")]
    data_dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(command: ClusterCommand) -> Result<()> {
    match command {
        ClusterCommand::Status(args) => run_status(args),
        ClusterCommand::Bucket(args) => run_bucket(args),
    }
}

fn run_bucket(args: BucketArgs) -> Result<()> {
    let path = args.data_dir.join(CONFIG_FILE);
    let Some(section) = section(&args.data_dir)? else {
        bail!(
            "{}: no [cluster] table: this data directory is not a node of a cluster",
            path.display()
        );
    };
    let config = crate::object::load_config(&args.data_dir)?;
    let url = database_url(config.catalog.url.as_deref(), &path)?;
    let db = ClusterDb::connect(&url, section.timeout_ms).map_err(|e| anyhow::anyhow!("{e}"))?;
    db.cluster(&section.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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
        db.set_bucket_copies(&args.name, copies)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
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

fn run_status(args: StatusArgs) -> Result<()> {
    let path = args.data_dir.join(CONFIG_FILE);
    let Some(section) = section(&args.data_dir)? else {
        bail!(
            "{}: no [cluster] table: this data directory is not a node of a cluster",
            path.display()
        );
    };
    let config = crate::object::load_config(&args.data_dir)?;
    let url = database_url(config.catalog.url.as_deref(), &path)?;
    let db = ClusterDb::connect(&url, section.timeout_ms).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cluster_id = db
        .cluster(&section.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let status =
        status(&db, &section, &cluster_id, &args.data_dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    println!(
        "cluster {} (id {}), database {}; a node is down after {} s without a heartbeat",
        status.cluster,
        status.cluster_id,
        status.database,
        status.timeout_ms as f64 / 1000.0
    );
    println!(
        "{:<16} {:<22} {:<6} {:>14} {:>12} {:>12}",
        "node", "address", "health", "heartbeat", "capacity", "used"
    );
    for n in &status.nodes {
        println!(
            "{:<16} {:<22} {:<6} {:>12.1}s ago {:>12} {:>12}",
            n.name,
            n.address,
            n.health,
            n.heartbeat_age_ms as f64 / 1000.0,
            crate::units::format_bytes(n.capacity_bytes),
            crate::units::format_bytes(n.used_bytes)
        );
    }
    if let Some(t) = &status.topology {
        println!("topology: {t}");
    }
    Ok(())
}
