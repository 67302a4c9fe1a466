//! `permafrost relay`: the cluster's data plane (`permafrost-relay`) from the command line (docs/cluster.md).
//!
//! - `serve`: a relay (the source's switch node) listening on an address; it forwards each replication stream to
//!   the children its header names and XORs its children's streams for a parity rebuild. Holds no data.
//! - `node`: a data node. Each copy that arrives is checked piece by piece (BLAKE3 from the root) and streamed
//!   straight into the node's archive as it arrives (`--data-dir`, opened in this process, or a running
//!   `permafrost serve` through `--endpoint`; no spool file); the ack goes back only after the archive acknowledged
//!   the object, and a copy that breaks off leaves nothing visible. For a parity rebuild it streams the object
//!   named by the transfer out of the archive and sends it up piece by piece as it is read. Concurrent streams
//!   share one open archive (a data directory is opened by the first and closed by the last, so it is locked only
//!   while streams run).
//! - `send`: write a file with k copies along a replication tree from the topology (the client sends it once);
//!   `--fan-out` sends one stream per copy from here to the same data nodes (the baseline).
//! - `rebuild`: receive the XOR of the survivors' pieces through a parity tree rooted here (one stream);
//!   `--naive` opens one stream per survivor from here (the baseline).
//!
//! Names are the topology's; `--addr NAME=HOST:PORT` says where each relay or data node listens. Bad input (a
//! topology naming unknown nodes, an unknown node, a missing address, no tree within the limits) fails before
//! anything is sent; an unreachable relay or node fails the copies below it, named, and the command exits 1.
//!
//! Every connection proves the cluster secret first (`permafrost_relay::auth`): `--secret-file FILE`, else the
//! secret kept in the catalog of `--catalog` (the one the cluster's `permafrost serve` nodes use); without
//! either a command refuses to start. A relay or data node refuses a peer without the secret before reading
//! anything from it and logs one line naming the peer's address and the reason.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;

use permafrost_relay::{
    hops, pipe_sink, pipe_source, rebuild, send, serve, write_copies, Attempt, Copies, Credentials,
    Header, Hop, LeafAck, NodeStats, RelayNode, Secret, Sink, SinkFactory, SourceFactory,
};
use permafrost_topology::{parity_tree, replication_tree, Demand, NodeId, Role, Topology, Tree};

use crate::object::{data_dir_of, open_archive, OpenArchive, Target};

/// Piece size on the wire unless `--piece-bytes` says otherwise.
const PIECE_BYTES_DEFAULT: u32 = 1 << 20;

#[derive(Subcommand)]
pub enum RelayCommand {
    /// Run a relay (switch node): duplicate replication streams to their children, XOR parity streams.
    Serve(ServeArgs),
    /// Run a data node: store each copy that arrives into the archive; send stored objects up for rebuilds.
    Node(NodeArgs),
    /// Write a file with k copies along a replication tree (or, with --fan-out, one stream per copy).
    Send(SendArgs),
    /// Rebuild from the survivors through a parity tree (or, with --naive, one stream per survivor).
    Rebuild(RebuildArgs),
}

#[derive(Args)]
pub struct ServeArgs {
    /// This relay's name in the topology (streams addressed to another name are refused).
    #[arg(long)]
    name: String,
    /// Address to listen on, HOST:PORT.
    #[arg(long)]
    listen: String,
    #[command(flatten)]
    secret: SecretArgs,
    #[command(flatten)]
    report: Report,
}

/// The cluster secret every relay connection proves (docs/security.md "Cluster traffic").
#[derive(Args)]
pub struct SecretArgs {
    /// File holding the cluster secret (at least 16 bytes, e.g. `openssl rand -hex 32`), the same for every
    /// relay, data node and sender [default: the catalog's secret, with --catalog].
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
}

impl SecretArgs {
    /// The secret of `--secret-file`, else the one kept in the catalog `catalog` (made there if it has none).
    fn secret(&self, catalog: Option<&permafrost_catalog::cluster::ClusterDb>) -> Result<Secret> {
        if let Some(path) = &self.secret_file {
            return Secret::from_file(path).map_err(anyhow::Error::msg);
        }
        match catalog {
            Some(db) => crate::cluster::catalog_secret(db),
            None => bail!(
                "no cluster secret: pass --secret-file FILE (the same file for every relay, data node and sender; \
                 make one with `openssl rand -hex 32 > FILE`) or --catalog URL (the secret the cluster's nodes use)"
            ),
        }
    }

    /// The secret for a relay or data node: `--secret-file`, else the catalog's at `url`.
    fn for_listener(&self, url: Option<&str>) -> Result<Secret> {
        match (&self.secret_file, url) {
            (None, Some(url)) => self.secret(Some(&crate::cluster::connect_catalog(url)?)),
            _ => self.secret(None),
        }
    }
}

/// Reporting link use to the cluster's catalog (docs/cluster.md "Live utilisation").
#[derive(Args)]
pub struct Report {
    /// The cluster's catalog database (postgresql://…): report this process's link use there.
    #[arg(long, value_name = "URL")]
    catalog: Option<String>,
    /// How often to report, ms.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..))]
    report_ms: u64,
}

impl Report {
    /// Start reporting `stats` as node `name` of kind `kind`, when a catalog was given.
    fn start(
        &self,
        name: &str,
        kind: &str,
        stats: &Arc<NodeStats>,
    ) -> Result<Option<crate::cluster::LinkReporter>> {
        let Some(url) = &self.catalog else {
            return Ok(None);
        };
        let db = Arc::new(crate::cluster::connect_catalog(url)?);
        let meter = crate::cluster::LinkMeter::new(name, kind, Arc::clone(stats));
        eprintln!(
            "permafrost relay {name}: reporting link use to {} every {} ms",
            db.shown_url(),
            self.report_ms
        );
        crate::cluster::spawn_link_reporter(db, meter, Duration::from_millis(self.report_ms))
            .map(Some)
    }
}

#[derive(Args)]
pub struct NodeArgs {
    /// This data node's name in the topology.
    #[arg(long)]
    name: String,
    /// Address to listen on, HOST:PORT.
    #[arg(long)]
    listen: String,
    /// Bucket the copies are stored in (key = the transfer's key); made when missing.
    #[arg(long, default_value = "relay")]
    bucket: String,
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    secret: SecretArgs,
    #[command(flatten)]
    report: Report,
}

/// The topology and where its nodes listen.
#[derive(Args)]
pub struct Network {
    /// The cluster topology file (format: docs/cluster.md) [default: the catalog's, with --catalog].
    #[arg(long)]
    topology: Option<PathBuf>,
    /// The cluster's catalog database (postgresql://…): trees from the live link use there, the transfer
    /// recorded there, this process's link use reported there.
    #[arg(long, value_name = "URL")]
    catalog: Option<String>,
    /// Where node NAME's relay or data node listens (repeatable; every node of the tree needs one).
    #[arg(long = "addr", value_name = "NAME=HOST:PORT")]
    addrs: Vec<String>,
    #[command(flatten)]
    secret: SecretArgs,
}

#[derive(Args)]
pub struct SendArgs {
    #[command(flatten)]
    network: Network,
    /// The tree's root: this host's node in the topology [default: the topology's only client].
    #[arg(long)]
    from: Option<String>,
    /// Number of copies; the tree picks the best-connected data nodes.
    #[arg(long, conflicts_with = "to")]
    copies: Option<usize>,
    /// These data nodes, comma-separated (instead of --copies).
    #[arg(long, value_delimiter = ',')]
    to: Vec<String>,
    /// Baseline: send one stream per copy from here to the tree's data nodes (routed by the network).
    #[arg(long)]
    fan_out: bool,
    /// Object key at the data nodes [default: the file's name].
    #[arg(long)]
    key: Option<String>,
    /// Piece size on the wire, bytes.
    #[arg(long, default_value_t = PIECE_BYTES_DEFAULT)]
    piece_bytes: u32,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// The file to write.
    file: PathBuf,
}

#[derive(Args)]
pub struct RebuildArgs {
    #[command(flatten)]
    network: Network,
    /// The rebuilding node (this host's node in the topology; the tree's root).
    #[arg(long)]
    onto: String,
    /// The data nodes holding the surviving pieces, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    from: Vec<String>,
    /// Key of the pieces at the survivors (each holds its own piece under this key).
    #[arg(long)]
    key: String,
    /// Size of each piece, bytes (every survivor's object must have exactly this size).
    #[arg(long)]
    bytes: u64,
    /// Baseline: one stream per survivor from here, XORed here.
    #[arg(long)]
    naive: bool,
    /// Piece size on the wire, bytes.
    #[arg(long, default_value_t = PIECE_BYTES_DEFAULT)]
    piece_bytes: u32,
    /// File the rebuilt bytes are written to.
    #[arg(long)]
    out: PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(command: RelayCommand) -> Result<()> {
    match command {
        RelayCommand::Serve(args) => run_relay(args),
        RelayCommand::Node(args) => run_node(args),
        RelayCommand::Send(args) => run_send(args),
        RelayCommand::Rebuild(args) => run_rebuild(args),
    }
}

fn listen(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))
}

fn run_relay(args: ServeArgs) -> Result<()> {
    let secret = args.secret.for_listener(args.report.catalog.as_deref())?;
    let listener = listen(&args.listen)?;
    eprintln!(
        "permafrost relay {}: listening on {}",
        args.name, args.listen
    );
    let stats = Arc::new(NodeStats::default());
    let _reporter = args.report.start(&args.name, "relay", &stats)?;
    let node = RelayNode {
        name: args.name,
        sink: None,
        source: None,
        stats,
        secret,
    };
    serve(listener, Arc::new(node))
        .join()
        .map_err(|_| anyhow::anyhow!("the relay's accept loop panicked"))
}

/// What every stream of a data node shares: the archive, opened by the first stream that needs it and closed
/// when the last one ends (so a data directory is locked only while copies or rebuild sources are moving, and
/// `permafrost get --data-dir` works between them).
struct DataNode {
    name: String,
    bucket: String,
    target: Target,
    /// The open archive while some stream uses it. The lock also orders opening and closing: the last user
    /// closes it (and releases the data directory's lock) before the next one can open it.
    archive: Mutex<Weak<OpenArchive>>,
}

/// One stream's use of the data node's archive; dropping it closes the archive when it was the last use.
struct ArchiveUse {
    node: Arc<DataNode>,
    archive: Option<Arc<OpenArchive>>,
}

impl DataNode {
    fn archive(self: &Arc<Self>) -> io::Result<ArchiveUse> {
        let mut shared = self.archive.lock().unwrap_or_else(|p| p.into_inner());
        let archive = match shared.upgrade() {
            Some(open) => open,
            None => {
                let open = Arc::new(
                    open_archive(&self.target).map_err(|e| io::Error::other(format!("{e:#}")))?,
                );
                *shared = Arc::downgrade(&open);
                open
            }
        };
        Ok(ArchiveUse {
            node: Arc::clone(self),
            archive: Some(archive),
        })
    }
}

impl std::ops::Deref for ArchiveUse {
    type Target = OpenArchive;
    fn deref(&self) -> &OpenArchive {
        self.archive.as_ref().expect("held until drop")
    }
}

impl Drop for ArchiveUse {
    fn drop(&mut self) {
        let _shared = self.node.archive.lock().unwrap_or_else(|p| p.into_inner());
        // The last use closes the archive here, under the lock.
        self.archive = None;
    }
}

/// Store an arriving copy straight into the archive as its pieces arrive (`pipe_sink`: no spool file; a copy
/// that breaks off fails the put, and nothing becomes visible).
fn store_copy(node: &Arc<DataNode>, h: &Header) -> io::Result<Box<dyn Sink>> {
    let node = Arc::clone(node);
    let key = h.transfer.clone();
    let object_bytes = h.object_bytes;
    let started = Instant::now();
    pipe_sink(object_bytes, move |reader: &mut dyn io::Read| {
        let archive = node.archive()?;
        let mut counted = LastByte {
            inner: reader,
            left: object_bytes,
            at: None,
            started,
        };
        let stored = archive
            .put_stream(&node.bucket, &key, &mut counted, object_bytes)
            .map_err(|e| io::Error::other(format!("{e:#}")))?;
        let received = counted.at.unwrap_or_default();
        eprintln!(
            "permafrost relay node {}: stored {}/{} ({} bytes, etag {}) {:.3} s after the first byte \
             (last piece at {received:.3} s)",
            node.name,
            node.bucket,
            key,
            object_bytes,
            stored.etag,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
}

/// Notes when the last byte of the object was read (seconds after `started`).
struct LastByte<'a> {
    inner: &'a mut dyn io::Read,
    left: u64,
    at: Option<f64>,
    started: Instant,
}

impl io::Read for LastByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.saturating_sub(n as u64);
        if self.left == 0 && self.at.is_none() {
            self.at = Some(self.started.elapsed().as_secs_f64());
        }
        Ok(n)
    }
}

/// Stream this node's copy of the transfer's key out of the archive for a parity rebuild, as it is read (no
/// whole read first).
fn read_source(node: &Arc<DataNode>, h: &Header) -> io::Result<Box<dyn io::Read + Send>> {
    let node = Arc::clone(node);
    let key = h.transfer.clone();
    let object_bytes = h.object_bytes;
    pipe_source(object_bytes, move |out: &mut dyn io::Write| {
        let archive = node.archive()?;
        archive
            .get_into(&node.bucket, &key, out)
            .map(|_| ())
            .map_err(|e| io::Error::other(format!("{}/{key}: {e:#}", node.bucket)))
    })
}

fn run_node(args: NodeArgs) -> Result<()> {
    if let Some(dir) = data_dir_of(&args.target) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let secret = args.secret.for_listener(args.report.catalog.as_deref())?;
    let listener = listen(&args.listen)?;
    let node = Arc::new(DataNode {
        name: args.name.clone(),
        bucket: args.bucket,
        target: args.target,
        archive: Mutex::new(Weak::new()),
    });
    let sink_node = Arc::clone(&node);
    let sink: SinkFactory = Arc::new(move |h: &Header| store_copy(&sink_node, h));
    let source_node = Arc::clone(&node);
    let source: SourceFactory = Arc::new(move |h: &Header| read_source(&source_node, h));
    eprintln!(
        "permafrost relay node {}: listening on {}, storing into bucket {} ({})",
        node.name,
        args.listen,
        node.bucket,
        match data_dir_of(&node.target) {
            Some(dir) => format!("archive {}", dir.display()),
            None => "the --endpoint server".to_string(),
        }
    );
    let stats = Arc::new(NodeStats::default());
    let _reporter = args.report.start(&args.name, "node", &stats)?;
    let relay = RelayNode {
        name: args.name,
        sink: Some(sink),
        source: Some(source),
        stats,
        secret,
    };
    serve(listener, Arc::new(relay))
        .join()
        .map_err(|_| anyhow::anyhow!("the data node's accept loop panicked"))
}

/// The topology with every node's address checked, and the catalog when one was given.
struct Cluster {
    topology: Topology,
    addrs: HashMap<String, String>,
    catalog: Option<Arc<permafrost_catalog::cluster::ClusterDb>>,
}

impl Network {
    /// The topology file's (with the catalog's live link use, when given) or else the catalog's live topology.
    fn load(&self) -> Result<Cluster> {
        let catalog = match &self.catalog {
            Some(url) => Some(Arc::new(crate::cluster::connect_catalog(url)?)),
            None => None,
        };
        let (topology, shown) = match (&self.topology, &catalog) {
            (Some(path), _) => {
                let mut topology = Topology::from_path(path)
                    .map_err(|e| anyhow::anyhow!("{e}"))
                    .with_context(|| format!("topology {}", path.display()))?;
                if let Some(db) = &catalog {
                    let uses = db
                        .link_use(permafrost_catalog::cluster::LINK_FRESH_MS)
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    permafrost_catalog::cluster::apply_link_use(&mut topology, &uses);
                }
                (topology, path.display().to_string())
            }
            (None, Some(db)) => {
                let topology = db
                    .topology_live()
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .with_context(|| {
                        format!(
                            "the catalog {} holds no topology (a node with [cluster] topology loads it): pass --topology FILE",
                            db.shown_url()
                        )
                    })?;
                (topology, format!("of the catalog {}", db.shown_url()))
            }
            (None, None) => {
                bail!("say which network: --topology FILE, or --catalog URL whose catalog holds it")
            }
        };
        let mut addrs = HashMap::new();
        for entry in &self.addrs {
            let Some((name, addr)) = entry.split_once('=') else {
                bail!("--addr {entry:?}: use NAME=HOST:PORT");
            };
            if topology.node_id(name).is_none() {
                bail!("--addr {entry:?}: the topology {shown} has no node {name:?}");
            }
            if addr
                .rsplit_once(':')
                .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
            {
                bail!("--addr {entry:?}: the address is not HOST:PORT");
            }
            if addrs.insert(name.to_string(), addr.to_string()).is_some() {
                bail!("--addr names {name:?} twice");
            }
        }
        Ok(Cluster {
            topology,
            addrs,
            catalog,
        })
    }
}

impl Cluster {
    fn node(&self, name: &str, what: &str) -> Result<NodeId> {
        self.topology.node_id(name).with_context(|| {
            format!(
                "{what} {name:?}: the topology has no such node (nodes: {})",
                self.names(None)
            )
        })
    }

    fn data_node(&self, name: &str, what: &str) -> Result<NodeId> {
        let id = self.node(name, what)?;
        if self.topology.node(id).role != Role::Node {
            bail!(
                "{what} {name:?} is a {}, not a data node (data nodes: {})",
                self.topology.node(id).role.as_str(),
                self.names(Some(Role::Node))
            );
        }
        Ok(id)
    }

    fn names(&self, role: Option<Role>) -> String {
        self.topology
            .nodes()
            .iter()
            .filter(|n| role.is_none_or(|r| n.role == r))
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The hops of `tree` below its root; every node in it needs an address.
    fn tree_hops(&self, tree: &Tree) -> Result<Vec<Hop>> {
        for id in tree.nodes() {
            let name = self.topology.name(id);
            if id != tree.root() && !self.addrs.contains_key(name) {
                bail!(
                    "no --addr for {name:?}, which is in the tree {}",
                    tree.render(&self.topology)
                );
            }
        }
        Ok(hops(&self.topology, tree, &|name| self.addrs[name].clone()))
    }

    /// One direct stream per node (the baselines), routed by the network, not by relays.
    fn direct_hops(&self, nodes: &[NodeId]) -> Result<Vec<Hop>> {
        nodes
            .iter()
            .map(|&id| {
                let name = self.topology.name(id);
                let addr = self
                    .addrs
                    .get(name)
                    .with_context(|| format!("no --addr for {name:?}"))?;
                Ok(Hop {
                    name: name.to_string(),
                    addr: addr.clone(),
                    children: Vec::new(),
                })
            })
            .collect()
    }
}

/// A transfer recorded in the catalog, and this process's link use reported there while it runs.
struct Recorded {
    db: Arc<permafrost_catalog::cluster::ClusterDb>,
    id: Option<i64>,
    reporter: Option<crate::cluster::LinkReporter>,
}

impl Cluster {
    /// With a catalog: record the transfer as started and report this process's link use (every second and
    /// once at the end). A catalog that fails here is logged, never fails the transfer.
    fn record(
        &self,
        start: permafrost_catalog::cluster::TransferStart,
        stats: &Arc<NodeStats>,
    ) -> Option<Recorded> {
        let db = self.catalog.as_ref()?;
        let id = db
            .transfer_started(&start)
            .map_err(|e| eprintln!("permafrost relay: recording the transfer in the catalog: {e}"))
            .ok();
        let meter =
            crate::cluster::LinkMeter::new(&start.root, start.kind.as_str(), Arc::clone(stats));
        let reporter =
            crate::cluster::spawn_link_reporter(Arc::clone(db), meter, Duration::from_secs(1))
                .map_err(|e| eprintln!("permafrost relay: {e:#}"))
                .ok();
        Some(Recorded {
            db: Arc::clone(db),
            id,
            reporter,
        })
    }
}

impl Recorded {
    /// The last link report, then the outcome (`ok` or `failed: why`) and the tree it ended on.
    fn finish(mut self, outcome: &str, tree: Option<&str>) {
        drop(self.reporter.take());
        if let Some(id) = self.id {
            if let Err(e) = self.db.transfer_finished(id, outcome, tree) {
                eprintln!("permafrost relay: recording the transfer's end in the catalog: {e}");
            }
        }
    }
}

#[derive(Serialize)]
struct SendReport {
    mode: &'static str,
    /// The first tree tried (fan-out: the direct streams).
    tree: String,
    key: String,
    object_bytes: u64,
    /// Copies wanted.
    copies: usize,
    /// Copies acknowledged (every piece checked, durable at its node).
    copies_ok: usize,
    seconds: f64,
    /// Bytes this process wrote to the network (headers, hashes, payload), all attempts.
    bytes_out: u64,
    /// Per data node that was sent a copy: its last ack (ok, or why not and which node failed).
    acks: Vec<LeafAck>,
    /// Every tree tried, in order, with its acks (more than one after a failure: the retries).
    attempts: Vec<Attempt>,
    /// Why the write stopped short of the copies wanted, when it did.
    gave_up: Option<String>,
}

fn run_send(args: SendArgs) -> Result<()> {
    let cluster = args.network.load()?;
    let t = &cluster.topology;
    let root = match &args.from {
        Some(name) => cluster.node(name, "--from")?,
        None => match t.with_role(Role::Client).as_slice() {
            [one] => *one,
            _ => bail!(
                "the topology has {} clients: say which one this is with --from",
                t.with_role(Role::Client).len()
            ),
        },
    };
    let copies = if !args.to.is_empty() {
        let to = args
            .to
            .iter()
            .map(|n| cluster.data_node(n, "--to"))
            .collect::<Result<Vec<_>>>()?;
        Copies::Exact(to)
    } else {
        let Some(k) = args.copies else {
            bail!("say how many copies (--copies K) or where (--to n1,n2)");
        };
        let candidates: Vec<NodeId> = t
            .with_role(Role::Node)
            .into_iter()
            .filter(|&n| n != root)
            .collect();
        if k == 0 || k > candidates.len() {
            bail!(
                "--copies {k}: the topology has {} data nodes to hold copies",
                candidates.len()
            );
        }
        Copies::Any { candidates, k }
    };
    let demand = match &copies {
        Copies::Exact(nodes) => Demand::exact(nodes),
        Copies::Any { candidates, k } => Demand::any(candidates, *k),
    };
    let tree = replication_tree(t, root, &demand)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("no replication tree")?;
    let key = match &args.key {
        Some(k) => k.clone(),
        None => args
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .context("the file has no name: pass --key")?,
    };
    let object_bytes = std::fs::metadata(&args.file)
        .with_context(|| format!("cannot stat {}", args.file.display()))?
        .len();
    let path = args.file.clone();
    let mut open = move || -> io::Result<Box<dyn io::Read>> {
        Ok(Box::new(io::BufReader::with_capacity(
            1 << 20,
            File::open(&path)?,
        )))
    };
    if !args.fan_out {
        // Fails before sending when the first tree lacks an address; retries check theirs.
        cluster.tree_hops(&tree)?;
    }
    let credentials = Credentials {
        name: t.name(root).to_string(),
        secret: args.network.secret.secret(cluster.catalog.as_deref())?,
    };
    let stats = Arc::new(NodeStats::default());
    let recorded = cluster.record(
        permafrost_catalog::cluster::TransferStart {
            name: key.clone(),
            kind: permafrost_catalog::cluster::TransferKind::Write,
            root: t.name(root).to_string(),
            tree: if args.fan_out {
                let names: Vec<&str> = tree.targets().iter().map(|&n| t.name(n)).collect();
                format!("{} → {{ {} }} (direct)", t.name(root), names.join(", "))
            } else {
                tree.render(t)
            },
            k: copies.wanted() as u64,
            bytes: object_bytes,
        },
        &stats,
    );
    let started = Instant::now();
    let (mode, shape, attempts, gave_up) = if args.fan_out {
        // The baseline: one direct stream per copy, to the nodes the tree chose; no retry.
        let targets: Vec<NodeId> = tree.targets().to_vec();
        let direct = cluster.direct_hops(&targets)?;
        let names: Vec<&str> = targets.iter().map(|&n| t.name(n)).collect();
        let shape = format!("{} → {{ {} }} (direct)", t.name(root), names.join(", "));
        let mut reader = open().with_context(|| format!("cannot open {}", args.file.display()))?;
        let acks = send(
            &key,
            None,
            &direct,
            &mut *reader,
            object_bytes,
            args.piece_bytes,
            &stats,
            &credentials,
        )
        .with_context(|| format!("reading {}", args.file.display()))?;
        let attempt = Attempt {
            tree: shape.clone(),
            avoided: Vec::new(),
            acks,
            seconds: started.elapsed().as_secs_f64(),
            bytes_out: stats.bytes_out.load(std::sync::atomic::Ordering::Relaxed),
        };
        ("fan-out", shape, vec![attempt], None)
    } else {
        let written = write_copies(
            t,
            root,
            &copies,
            &|name| cluster.addrs.get(name).cloned(),
            &key,
            None,
            &mut open,
            object_bytes,
            args.piece_bytes,
            &stats,
            &credentials,
        )
        .with_context(|| format!("writing {}", args.file.display()))?;
        ("tree", tree.render(t), written.attempts, written.gave_up)
    };
    // Each node's last word: a node retried later (or replaced) shows its final state.
    let mut acks: Vec<LeafAck> = Vec::new();
    for attempt in &attempts {
        for ack in &attempt.acks {
            match acks.iter_mut().find(|a| a.node == ack.node) {
                Some(a) => *a = ack.clone(),
                None => acks.push(ack.clone()),
            }
        }
    }
    if let Some(recorded) = recorded {
        let ok = acks.iter().filter(|a| a.ok).count();
        let outcome = if ok == copies.wanted() {
            "ok".to_string()
        } else {
            format!("failed: {ok} of {} copies stored", copies.wanted())
        };
        recorded.finish(&outcome, attempts.last().map(|a| a.tree.as_str()));
    }
    let report = SendReport {
        mode,
        tree: shape,
        key,
        object_bytes,
        copies: copies.wanted(),
        copies_ok: acks.iter().filter(|a| a.ok).count(),
        seconds: started.elapsed().as_secs_f64(),
        bytes_out: stats.bytes_out.load(std::sync::atomic::Ordering::Relaxed),
        acks,
        attempts,
        gave_up,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for (i, attempt) in report.attempts.iter().enumerate() {
            let stored: Vec<&str> = attempt
                .acks
                .iter()
                .filter(|a| a.ok)
                .map(|a| a.node.as_str())
                .collect();
            println!(
                "attempt {} {}: stored on [{}] in {:.3} s ({} bytes sent from here){}",
                i + 1,
                attempt.tree,
                stored.join(", "),
                attempt.seconds,
                attempt.bytes_out,
                if attempt.avoided.is_empty() {
                    String::new()
                } else {
                    format!(", avoiding {}", attempt.avoided.join(", "))
                }
            );
            for ack in attempt.acks.iter().filter(|a| !a.ok) {
                println!(
                    "  {}: failed: {}",
                    ack.node,
                    ack.error.as_deref().unwrap_or("no reason given")
                );
            }
        }
        println!(
            "{} {}: {} of {} copies stored in {:.3} s ({} bytes sent from here)",
            report.mode,
            report.tree,
            report.copies_ok,
            report.copies,
            report.seconds,
            report.bytes_out
        );
    }
    if report.copies_ok < report.copies {
        let failures: Vec<String> = report
            .acks
            .iter()
            .filter(|a| !a.ok)
            .map(|a| format!("{}: {}", a.node, a.error.as_deref().unwrap_or("failed")))
            .collect();
        bail!(
            "{} of {} copies stored, the write is not acknowledged; failed: {}{}",
            report.copies_ok,
            report.copies,
            failures.join("; "),
            report
                .gave_up
                .as_deref()
                .map(|g| format!("; {g}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct RebuildReport {
    mode: &'static str,
    tree: String,
    key: String,
    object_bytes: u64,
    seconds: f64,
    /// Bytes this process read from the network.
    bytes_in: u64,
    blake3: String,
}

fn run_rebuild(args: RebuildArgs) -> Result<()> {
    let cluster = args.network.load()?;
    let t = &cluster.topology;
    let root = cluster.node(&args.onto, "--onto")?;
    let survivors = args
        .from
        .iter()
        .map(|n| cluster.data_node(n, "--from"))
        .collect::<Result<Vec<_>>>()?;
    if survivors.contains(&root) {
        bail!("--from names the rebuilding node {:?} itself", args.onto);
    }
    let holders: Vec<Vec<NodeId>> = survivors.iter().map(|&n| vec![n]).collect();
    let (mode, children, shape) = if args.naive {
        let names: Vec<&str> = survivors.iter().map(|&n| t.name(n)).collect();
        (
            "naive",
            cluster.direct_hops(&survivors)?,
            format!("{} ← {{ {} }} (direct)", t.name(root), names.join(", ")),
        )
    } else {
        let tree = parity_tree(t, root, &Demand::one_of_each(&holders))
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("no parity tree")?;
        ("tree", cluster.tree_hops(&tree)?, tree.render(t))
    };
    let out =
        File::create(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut out = io::BufWriter::with_capacity(1 << 20, out);
    let credentials = Credentials {
        name: args.onto.clone(),
        secret: args.network.secret.secret(cluster.catalog.as_deref())?,
    };
    let stats = Arc::new(NodeStats::default());
    let recorded = cluster.record(
        permafrost_catalog::cluster::TransferStart {
            name: args.key.clone(),
            kind: permafrost_catalog::cluster::TransferKind::Rebuild,
            root: args.onto.clone(),
            tree: shape.clone(),
            k: survivors.len() as u64,
            bytes: args.bytes,
        },
        &stats,
    );
    let started = Instant::now();
    let rebuilt = rebuild(
        &args.key,
        &children,
        args.bytes,
        args.piece_bytes,
        &mut out,
        &stats,
        &credentials,
    );
    if let Some(recorded) = recorded {
        match &rebuilt {
            Ok(_) => recorded.finish("ok", None),
            Err(e) => recorded.finish(&format!("failed: {e}"), None),
        }
    }
    let hash = rebuilt.context("rebuild failed")?;
    finish_file(out, &args.out)?;
    let report = RebuildReport {
        mode,
        tree: shape,
        key: args.key,
        object_bytes: args.bytes,
        seconds: started.elapsed().as_secs_f64(),
        bytes_in: stats.bytes_in.load(std::sync::atomic::Ordering::Relaxed),
        blake3: hash.iter().map(|b| format!("{b:02x}")).collect(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} {}: rebuilt {} bytes in {:.3} s ({} bytes received here), BLAKE3 {}",
            report.mode,
            report.tree,
            report.object_bytes,
            report.seconds,
            report.bytes_in,
            report.blake3
        );
    }
    Ok(())
}

fn finish_file(out: io::BufWriter<File>, path: &Path) -> Result<()> {
    let file = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", path.display()))?;
    file.sync_all()
        .with_context(|| format!("writing {}", path.display()))
}
