//! The cluster's figures in the Prometheus metrics (`docs/cluster.md` "`permafrost cluster status`"), when the
//! server is a node of a cluster: the node runtime (`permafrost cluster`'s `add_endpoint`) gives the admin a
//! [`ClusterSource`] that reads them from the catalog at scrape time — the same figures as
//! `GET /_permafrost/api/v1/cluster` and `permafrost cluster status`.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::metrics::{counter, gauge};

/// What the metrics show of a cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterFigures {
    /// Per node: name, `up`/`down`/`lost`, age of its last heartbeat in seconds.
    pub nodes: Vec<(String, &'static str, f64)>,
    pub timeout_seconds: f64,
    pub lost_after_seconds: f64,
    /// Per bucket: objects recorded short of copies, their bytes, copies missing.
    pub under_replicated: Vec<(String, u64, u64, u64)>,
    /// Recovery: objects still short, healed per second, estimated seconds to finish (none: nothing left or no
    /// rate yet).
    pub recovery_remaining_objects: u64,
    pub recovery_objects_per_second: f64,
    pub recovery_bytes_per_second: f64,
    pub recovery_eta_seconds: Option<f64>,
    /// Orphan fragments this node deleted since it started (unlisted in the directory past the grace period),
    /// and their bytes.
    pub orphans_collected_objects: u64,
    pub orphans_collected_bytes: u64,
}

/// Reads the figures now (an error: the catalog database does not answer; the cluster series are left out).
pub type ClusterSource = Arc<dyn Fn() -> Result<ClusterFigures, String> + Send + Sync>;

type Labels = Vec<(&'static str, String)>;

impl Collector for ClusterFigures {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            &mut e,
            "permafrost_cluster_nodes",
            "Nodes of the cluster by state (up; down: no heartbeat for the timeout; lost: none for lost_after)",
            ["up", "down", "lost"].map(|st| {
                (
                    vec![("state", st.to_owned())] as Labels,
                    self.nodes.iter().filter(|n| n.1 == st).count() as f64,
                )
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_node_state",
            "1 for each node's current state, 0 for the others",
            self.nodes.iter().flat_map(|(name, state, _)| {
                ["up", "down", "lost"].map(|st| {
                    (
                        vec![("node", name.clone()), ("state", st.to_owned())] as Labels,
                        f64::from(u8::from(*state == st)),
                    )
                })
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_node_heartbeat_age_seconds",
            "Age of each node's last heartbeat on the catalog database's clock",
            self.nodes
                .iter()
                .map(|(name, _, age)| (vec![("node", name.clone())] as Labels, *age)),
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_lost_after_seconds",
            "A node without a heartbeat for this long is lost: its copies are made again elsewhere",
            [(Labels::new(), self.lost_after_seconds)],
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_down_after_seconds",
            "A node without a heartbeat for this long is down",
            [(Labels::new(), self.timeout_seconds)],
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_under_replicated_objects",
            "Objects recorded with fewer copies than wanted, by bucket",
            self.under_replicated
                .iter()
                .map(|(b, objects, _, _)| (vec![("bucket", b.clone())] as Labels, *objects as f64)),
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_under_replicated_bytes",
            "Size of the objects recorded with fewer copies than wanted (one copy each), by bucket",
            self.under_replicated
                .iter()
                .map(|(b, _, bytes, _)| (vec![("bucket", b.clone())] as Labels, *bytes as f64)),
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_missing_copies",
            "Copies missing (wanted − held over the under-replicated objects), by bucket",
            self.under_replicated
                .iter()
                .map(|(b, _, _, m)| (vec![("bucket", b.clone())] as Labels, *m as f64)),
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_recovery_remaining_objects",
            "Objects still recorded short of copies",
            [(Labels::new(), self.recovery_remaining_objects as f64)],
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_recovery_objects_per_second",
            "Objects healed per second over the last minutes (drops of the under-replicated count, sampled)",
            [(Labels::new(), self.recovery_objects_per_second)],
        )?;
        gauge(
            &mut e,
            "permafrost_cluster_recovery_bytes_per_second",
            "Bytes of objects healed per second over the last minutes",
            [(Labels::new(), self.recovery_bytes_per_second)],
        )?;
        counter(
            &mut e,
            "permafrost_cluster_orphans_collected",
            "Orphan fragments this node deleted since it started (unlisted in the directory past the grace period)",
            [(Labels::new(), self.orphans_collected_objects as f64)],
        )?;
        counter(
            &mut e,
            "permafrost_cluster_orphans_collected_bytes",
            "Bytes of the orphan fragments this node deleted since it started",
            [(Labels::new(), self.orphans_collected_bytes as f64)],
        )?;
        if let Some(eta) = self.recovery_eta_seconds {
            gauge(
                &mut e,
                "permafrost_cluster_recovery_eta_seconds",
                "Estimated seconds until no object is short of copies, at the recent rate (absent without one)",
                [(Labels::new(), eta)],
            )?;
        }
        Ok(())
    }
}
