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
//! **Start-up checks** (each one line, before the archive opens): `[cluster]` without a PostgreSQL catalog, a
//! `[cluster]` table that does not parse or holds values that cannot work together; [`crate::config`] reads
//! and checks the table with the rest of the file. The node's runtime (joining and its other start-up checks, the heartbeat, reconcile,
//! tombstones, the catch-up loop, the in-process relay, link reports) and the status computation are
//! `permafrost_cluster::runtime` and `permafrost_cluster::status`; this module re-exports them for `serve`
//! and `relay`, and keeps the `permafrost cluster` commands and their printing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use permafrost_catalog::cluster::ClusterDb;

pub use permafrost_cluster::runtime::{join, start, ClusterSection, LinkMeter, LinkReporter};
use permafrost_cluster::runtime::{lost_after_default, timeout_default};
pub use permafrost_cluster::status::{
    process_ms, recovery_totals, status, RecoveryTracker, Status,
};

/// The cluster secret kept in the catalog (made there by the first caller).
pub fn catalog_secret(db: &ClusterDb) -> Result<permafrost_relay::Secret> {
    Ok(permafrost_cluster::runtime::catalog_secret(db)?)
}

/// Start reporting `meter` to `db` every `every` (`permafrost_cluster::runtime::spawn_link_reporter`).
pub fn spawn_link_reporter(
    db: Arc<ClusterDb>,
    meter: LinkMeter,
    every: Duration,
) -> Result<LinkReporter> {
    Ok(permafrost_cluster::runtime::spawn_link_reporter(
        db, meter, every,
    )?)
}

use crate::config::{cluster_database_url, Config};

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
        )
        .map_err(|e| e.to_string())?;
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
        orphans_collected_objects: permafrost_cluster::orphans::collected().0,
        orphans_collected_bytes: permafrost_cluster::orphans::collected().1,
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
    let config = Config::load(data_dir)?;
    let url = config.cluster_database_url();
    let Some(section) = config.cluster else {
        bail!(
            "{}: no [cluster] table: this data directory is not a node of a cluster",
            config.path.display()
        );
    };
    let url = url?;
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
    let plan =
        permafrost_cluster::parity::rebuild_plan(&db, node).map_err(|e| anyhow::anyhow!("{e}"))?;
    db.request_rebuild(&node.name)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "rebuild of node {} requested: {} fragment(s) rebuilt on nodes that hold no fragment of their object; \
         {} object(s) with no such node kept as 2 whole copies on their other holders (fragments again once three \
         nodes are up); {} object(s) wait for another holder that is down; done by the nodes that are up on their \
         next catch-up pass",
        node.name, plan.fragments_rebuilt, plan.objects_kept_whole, plan.objects_waiting
    );
    Ok(())
}

/// Connect to a catalog database given on the command line (`--catalog URL` of `cluster status` and
/// `permafrost relay`).
pub fn connect_catalog(url: &str) -> Result<ClusterDb> {
    let url = cluster_database_url(Some(url), Path::new("--catalog"))?;
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
    fn durations_read_as_an_operator_would_say_them() {
        assert_eq!(duration_text(850), "850 ms");
        assert_eq!(duration_text(4200), "4.2 s");
        assert_eq!(duration_text(200_000), "3 min 20 s");
        assert_eq!(duration_text(7_500_000), "2 h 5 min");
    }
}
