//! What `permafrost cluster status`, the admin API's `/cluster` and the metrics show of a cluster (issue 31): per
//! node up/down/lost with since-when, under-replicated objects and bytes per bucket, parity fragments on nodes
//! that are not up, recovery progress ([`RecoveryTracker`]), the topology with its links' live use, and the
//! transfers in flight, all read from the catalog ([`status`]). Printing it is the operator binary's.

use std::collections::VecDeque;
use std::time::Instant;

use permafrost_catalog::cluster::{self, ClusterDb, ReporterInfo, TransferInfo, LINK_FRESH_MS};

use crate::ClusterError;

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
pub fn under_replicated_status(db: &ClusterDb) -> Result<UnderReplicatedStatus, ClusterError> {
    let buckets = db.under_replicated_by_bucket()?;
    Ok(UnderReplicatedStatus {
        objects: buckets.iter().map(|b| b.objects).sum(),
        bytes: buckets.iter().map(|b| b.bytes).sum(),
        missing_copies: buckets.iter().map(|b| b.missing_copies).sum(),
        buckets,
    })
}

/// What recovery has left, cheaply (the sampler's query): objects recorded short of copies plus the parity
/// fragments lost nodes hold, and the objects' bytes.
pub fn recovery_totals(db: &ClusterDb, lost_after_ms: u64) -> Result<(u64, u64), ClusterError> {
    let short = under_replicated_status(db)?;
    let mut fragments = 0u64;
    for lost in db.lost_nodes(lost_after_ms)? {
        fragments += db.fragments_on(lost.id)?.len() as u64;
    }
    Ok((short.objects + fragments, short.bytes))
}

/// The database endpoint of a (password-free) URL: `user@host:port/dbname`, without scheme and options; a
/// URL of several servers names each (`user@a:5432,b:5433/dbname`), in either form libpq takes (a URL, or
/// `key=value` pairs).
pub fn database_endpoint(url: &str) -> String {
    if !url.contains("://") && url.contains('=') {
        return key_value_endpoint(url);
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    match rest.split_once('@') {
        Some((user, host)) => format!("{}@{host}", user.split(':').next().unwrap_or(user)),
        None => rest.to_owned(),
    }
}

/// [`database_endpoint`] of a `key=value …` connection string: its host, port, user and dbname (hosts and ports
/// paired by position; one port serves every host, as libpq reads it).
fn key_value_endpoint(url: &str) -> String {
    let mut pairs = std::collections::BTreeMap::new();
    for item in url.split_whitespace() {
        if let Some((key, value)) = item.split_once('=') {
            pairs.insert(key.trim(), value.trim().trim_matches('\''));
        }
    }
    let hosts: Vec<&str> = pairs.get("host").map_or(vec![], |h| h.split(',').collect());
    let ports: Vec<&str> = pairs.get("port").map_or(vec![], |p| p.split(',').collect());
    let servers: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(i, host)| match ports.get(i).or(ports.last()) {
            Some(port) if !port.is_empty() => format!("{host}:{port}"),
            _ => host.to_string(),
        })
        .collect();
    let mut shown = String::new();
    if let Some(user) = pairs.get("user") {
        shown.push_str(user);
        shown.push('@');
    }
    shown.push_str(&servers.join(","));
    if let Some(dbname) = pairs.get("dbname") {
        shown.push('/');
        shown.push_str(dbname);
    }
    shown
}

/// Milliseconds of this process's monotonic clock (the recovery samples' clock).
pub fn process_ms() -> u64 {
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
) -> Result<Status, ClusterError> {
    let now_unix_ms = db.now_ms()?;
    let nodes = db.nodes()?;
    let held = db.held_by_node()?;
    let under_replicated = under_replicated_status(db)?;
    let fragments = db.fragments_by_bucket_and_node()?;
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
    let stored = db.topology()?;
    let uses = db.link_use(LINK_FRESH_MS)?;
    let reporters = db.reporters()?;
    let transfers = db.transfers(STATUS_TRANSFERS)?;
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
        assert_eq!(
            database_endpoint("postgresql://pf@a:5432,b:5433/c?target_session_attrs=read-write"),
            "pf@a:5432,b:5433/c"
        );
        assert_eq!(
            database_endpoint(
                "host=a,b port=5432,5433 user=pf password=*** dbname=c target_session_attrs=read-write \
                 options='-csearch_path=pf_node_a'"
            ),
            "pf@a:5432,b:5433/c"
        );
        assert_eq!(
            database_endpoint("host=a,b port=6000 dbname=c"),
            "a:6000,b:6000/c"
        );
    }
}
