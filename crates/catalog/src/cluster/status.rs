//! Read-only figures for `permafrost cluster status`, the admin API's `GET /cluster`, the metrics and the
//! dashboard (`docs/cluster.md` "`permafrost cluster status`"): what the under-replicated record and the directory
//! say per bucket and per node, and the database's clock. Nothing here writes.

use super::{sql_err, ClusterDb, NOW_MS};
use crate::sql::params;
use crate::Result;

/// The objects of one bucket recorded with fewer copies than wanted (`permafrost_cluster.under_replicated`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BucketShort {
    pub bucket: String,
    /// Objects recorded short of copies.
    pub objects: u64,
    /// Their size (one copy each), from the directory rows of the recorded version; 0 for an object no node
    /// holds any more (the catch-up drops its record).
    pub bytes: u64,
    /// Copies missing: the sum of wanted − held.
    pub missing_copies: u64,
}

/// What the directory names one node as holding.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeHeld {
    pub node_id: i64,
    pub objects: u64,
    pub bytes: u64,
}

/// Parity fragments (`permafrost_cluster.fragments`) one node holds of one bucket.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FragmentsHeld {
    pub bucket: String,
    pub node_id: i64,
    pub fragments: u64,
}

fn count(v: i64) -> u64 {
    v.max(0) as u64
}

impl ClusterDb {
    /// The under-replicated record per bucket (objects, their bytes, copies missing), by bucket; buckets with
    /// nothing recorded are left out.
    pub fn under_replicated_by_bucket(&self) -> Result<Vec<BucketShort>> {
        self.read(|c| {
            let mut st = c
                .prepare_cached(
                    "SELECT u.bucket, count(*), COALESCE(sum(s.size), 0)::BIGINT, \
                     COALESCE(sum(GREATEST(u.wanted - u.held, 0)), 0)::BIGINT \
                     FROM permafrost_cluster.under_replicated u \
                     LEFT JOIN LATERAL (SELECT max(o.size_bytes) AS size FROM permafrost_cluster.objects o \
                       WHERE o.bucket = u.bucket AND o.key = u.key AND o.etag = u.etag \
                       AND o.last_modified_ms = u.last_modified_ms) s ON true \
                     GROUP BY u.bucket ORDER BY u.bucket",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![], |r| {
                    Ok(BucketShort {
                        bucket: r.get(0)?,
                        objects: count(r.get(1)?),
                        bytes: count(r.get(2)?),
                        missing_copies: count(r.get(3)?),
                    })
                })
                .map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)).collect()
        })
    }

    /// Objects and bytes the directory names each node as holding (nodes holding none are left out).
    pub fn held_by_node(&self) -> Result<Vec<NodeHeld>> {
        self.read(|c| {
            let mut st = c
                .prepare_cached(
                    "SELECT node_id, count(*), COALESCE(sum(size_bytes), 0)::BIGINT \
                     FROM permafrost_cluster.objects GROUP BY node_id ORDER BY node_id",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![], |r| {
                    Ok(NodeHeld {
                        node_id: r.get(0)?,
                        objects: count(r.get(1)?),
                        bytes: count(r.get(2)?),
                    })
                })
                .map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)).collect()
        })
    }

    /// Parity fragments held per bucket and node (pairs holding none are left out).
    pub fn fragments_by_bucket_and_node(&self) -> Result<Vec<FragmentsHeld>> {
        self.read(|c| {
            let mut st = c
                .prepare_cached(
                    "SELECT bucket, node_id, count(*) FROM permafrost_cluster.fragments \
                     GROUP BY bucket, node_id ORDER BY bucket, node_id",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![], |r| {
                    Ok(FragmentsHeld {
                        bucket: r.get(0)?,
                        node_id: r.get(1)?,
                        fragments: count(r.get(2)?),
                    })
                })
                .map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)).collect()
        })
    }

    /// The database server's clock, ms since the epoch (the clock heartbeats are measured on).
    pub fn now_ms(&self) -> Result<u64> {
        self.read(|c| {
            c.query_row(&format!("SELECT {NOW_MS}"), params![], |r| {
                r.get::<_, i64>(0)
            })
            .map(count)
            .map_err(sql_err)
        })
    }
}
