//! Cross-node XOR parity in the shared tables (issue 13; `docs/cluster.md` "Cross-node XOR parity").
//!
//! **Tables** (schema version 4 of `permafrost_cluster`): `buckets.parity` (`'xor'` or NULL: copies), and
//! `fragments`: one row per fragment of the current parity version of an object — role `a` (bytes `[0, h)`), `b`
//! (bytes `[h, n)` zero-padded to `h`) or `p` (`a ⊕ b`), `h = ceil(n / 2)` — with its holder, its BLAKE3 and the
//! object's metadata (JSON) for HEAD and GET.
//!
//! **Invariants.**
//! - An object held as fragments has one row in `objects` under the holder [`PARITY_HOLDER`] (node id 0, never a
//!   real node: ids start at 1), so listing and `remove_bucket` see it like any object, while
//!   [`ClusterDb::holders`] (a join with `nodes`) names only whole holders.
//! - [`ClusterDb::publish_parity`] makes the three fragments and that row visible in one transaction, and removes
//!   the publishing node's whole-copy row (the node then drops its local copy): a reader sees the whole copy or
//!   the fragments, never neither.
//! - A fragment that stops being current (a newer version, a DELETE, a holder replaced by a rebuild) leaves its
//!   holder a tombstone for its internal object ([`FRAGMENTS_BUCKET`]/[`fragment_key`]), so a holder that was
//!   down drops its stale fragment when it comes back.

use super::{
    newer_version_listed, node_row, publish_in, record_copies_in, sql_err, with_health, ClusterDb,
    DirEntry, NodeInfo, NOW_MS,
};
use crate::sql::{self, params, Connection, OptionalExtension};
use crate::{CatalogError, Result};

/// Schema version 4 of the shared tables (applied after versions 1–3; idempotent).
pub(super) const SCHEMA_V4: &str = r#"
ALTER TABLE permafrost_cluster.buckets ADD COLUMN IF NOT EXISTS parity TEXT;
CREATE TABLE IF NOT EXISTS permafrost_cluster.fragments (
    bucket TEXT COLLATE "C" NOT NULL,
    key BYTEA NOT NULL,
    role TEXT NOT NULL,
    node_id BIGINT NOT NULL,
    etag TEXT NOT NULL,
    last_modified_ms BIGINT NOT NULL,
    size_bytes BIGINT NOT NULL,
    blake3 TEXT NOT NULL,
    meta TEXT NOT NULL,
    PRIMARY KEY (bucket, key, role)
);
CREATE INDEX IF NOT EXISTS fragments_by_node ON permafrost_cluster.fragments (node_id);
"#;

/// The `objects` holder of an object held as fragments (no node has id 0).
pub const PARITY_HOLDER: i64 = 0;
/// The internal bucket of every node's store that holds the fragments it was given (never in the directory).
pub const FRAGMENTS_BUCKET: &str = "permafrost-fragments";

/// The key of a fragment in [`FRAGMENTS_BUCKET`]: [`fragment_prefix`]`/role`.
pub fn fragment_key(bucket: &str, key: &str, etag: &str, role: &str) -> String {
    format!("{}/{role}", fragment_prefix(bucket, key, etag))
}

/// `bucket/key/etag` (the ETag without quotes): the fragments of one version share it.
pub fn fragment_prefix(bucket: &str, key: &str, etag: &str) -> String {
    format!("{bucket}/{key}/{}", etag.trim_matches('"'))
}

/// One fragment of a parity object to publish: its role (`a`, `b`, `p`), holder and BLAKE3 (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFragment {
    pub role: String,
    pub node_id: i64,
    pub blake3: String,
}

/// One published fragment with its holder as the cluster sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    pub role: String,
    pub node: NodeInfo,
    pub blake3: String,
}

/// An object held as fragments: its directory entry, its metadata (JSON, as written) and its fragments (by role).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParityObject {
    pub entry: DirEntry,
    pub meta: String,
    pub fragments: Vec<Fragment>,
}

impl ClusterDb {
    /// Set (`Some("xor")`) or clear (`None`) a bucket's parity; setting it clears the bucket's own `copies`.
    /// `NoSuchBucket` when the cluster does not know it.
    pub fn set_bucket_parity(&self, bucket: &str, parity: Option<&str>) -> Result<()> {
        self.write(|c| {
            let n = match parity {
                Some(p) => c.execute(
                    "UPDATE permafrost_cluster.buckets SET parity = ?2, copies = NULL WHERE name = ?1",
                    params![bucket, p],
                ),
                None => c.execute(
                    "UPDATE permafrost_cluster.buckets SET parity = NULL WHERE name = ?1",
                    params![bucket],
                ),
            }
            .map_err(sql_err)?;
            if n == 0 {
                return Err(CatalogError::NoSuchBucket(bucket.to_owned()));
            }
            Ok(())
        })
    }

    /// A bucket's parity (`None`: copies, or the bucket is unknown).
    pub fn bucket_parity(&self, bucket: &str) -> Result<Option<String>> {
        self.read(|c| {
            let parity: Option<Option<String>> = c
                .query_row(
                    "SELECT parity FROM permafrost_cluster.buckets WHERE name = ?1",
                    params![bucket],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql_err)?;
            Ok(parity.flatten())
        })
    }

    /// After the three fragments of this version of `entry` are durable on their holders: publish them and the
    /// object (holder [`PARITY_HOLDER`]) and remove `node_id`'s whole-copy row of this version, in one
    /// transaction. Fragments of an older version get tombstones. Returns false (nothing published; the new
    /// fragments get tombstones) when a newer version of the key is in the directory.
    pub fn publish_parity(
        &self,
        node_id: i64,
        entry: &DirEntry,
        meta: &str,
        fragments: &[NewFragment],
    ) -> Result<bool> {
        let lm = entry.last_modified_ms as i64;
        self.write(|c| {
            let key = entry.key.as_bytes();
            if newer_version_listed(c, &entry.bucket, key, lm)? {
                for f in fragments {
                    fragment_tombstone(c, f.node_id, entry, &f.role)?;
                }
                return Ok(false);
            }
            drop_fragments(c, &entry.bucket, &entry.key)?;
            for f in fragments {
                c.execute(
                    "INSERT INTO permafrost_cluster.fragments (bucket, key, role, node_id, etag, last_modified_ms, \
                     size_bytes, blake3, meta) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        entry.bucket,
                        key,
                        f.role,
                        f.node_id,
                        entry.etag,
                        lm,
                        entry.size_bytes,
                        f.blake3,
                        meta
                    ],
                )
                .map_err(sql_err)?;
            }
            publish_in(c, PARITY_HOLDER, entry)?;
            c.execute(
                "DELETE FROM permafrost_cluster.objects WHERE bucket = ?1 AND key = ?2 AND node_id = ?3 \
                 AND last_modified_ms = ?4",
                params![entry.bucket, key, node_id, lm],
            )
            .map_err(sql_err)?;
            // Whole copies of this version on other nodes (an object kept as whole copies after a lost node,
            // `parity_to_copies`, now re-encoded): their rows go and their holders get a tombstone, so they drop
            // their copy on their next heartbeat.
            let mut st = c
                .prepare_cached(
                    "SELECT node_id FROM permafrost_cluster.objects WHERE bucket = ?1 AND key = ?2 \
                     AND etag = ?3 AND last_modified_ms = ?4 AND node_id <> ?5 ORDER BY node_id",
                )
                .map_err(sql_err)?;
            let others: Vec<i64> = st
                .query_map(
                    params![entry.bucket, key, entry.etag, lm, PARITY_HOLDER],
                    |r| r.get(0),
                )
                .map_err(sql_err)?
                .collect::<sql::Result<_>>()
                .map_err(sql_err)?;
            for other in others {
                c.execute(
                    "INSERT INTO permafrost_cluster.tombstones (node_id, bucket, key, etag, last_modified_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (node_id, bucket, key) DO UPDATE SET \
                     etag = excluded.etag, last_modified_ms = GREATEST(permafrost_cluster.tombstones.last_modified_ms, \
                     excluded.last_modified_ms)",
                    params![other, entry.bucket, key, entry.etag, lm],
                )
                .map_err(sql_err)?;
                c.execute(
                    "DELETE FROM permafrost_cluster.objects WHERE bucket = ?1 AND key = ?2 AND node_id = ?3 \
                     AND last_modified_ms = ?4",
                    params![entry.bucket, key, other, lm],
                )
                .map_err(sql_err)?;
            }
            Ok(true)
        })
    }

    /// The current version of `bucket/key` when it is held as fragments (its `objects` row under
    /// [`PARITY_HOLDER`] is the newest), with its fragments by role.
    pub fn parity_object(&self, bucket: &str, key: &str) -> Result<Option<ParityObject>> {
        let timeout = self.timeout_ms;
        self.read(|c| {
            let k = key.as_bytes();
            let row: Option<(i64, i64, String, i64, Option<String>)> = c
                .query_row(
                    "SELECT node_id, size_bytes, etag, last_modified_ms, content_type FROM permafrost_cluster.objects \
                     WHERE bucket = ?1 AND key = ?2 ORDER BY last_modified_ms DESC, node_id LIMIT 1",
                    params![bucket, k],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
                .optional()
                .map_err(sql_err)?;
            let Some((holder, size, etag, lm, content_type)) = row else {
                return Ok(None);
            };
            if holder != PARITY_HOLDER {
                return Ok(None);
            }
            let entry = DirEntry {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                size_bytes: size.max(0) as u64,
                etag,
                last_modified_ms: lm.max(0) as u64,
                content_type,
            };
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT n.node_id, n.name, n.address, n.capacity_bytes, n.used_bytes, n.joined_ms, \
                     n.heartbeat_ms, {NOW_MS} - n.heartbeat_ms, f.role, f.blake3, f.meta \
                     FROM permafrost_cluster.fragments f JOIN permafrost_cluster.nodes n ON n.node_id = f.node_id \
                     WHERE f.bucket = ?1 AND f.key = ?2 AND f.etag = ?3 AND f.last_modified_ms = ?4 ORDER BY f.role"
                ))
                .map_err(sql_err)?;
            let rows: Vec<(NodeInfo, String, String, String)> = st
                .query_map(params![bucket, k, entry.etag, lm], |r| {
                    Ok((node_row(r)?, r.get(8)?, r.get(9)?, r.get(10)?))
                })
                .map_err(sql_err)?
                .collect::<sql::Result<_>>()
                .map_err(sql_err)?;
            let meta = rows.first().map(|r| r.3.clone()).unwrap_or_default();
            let fragments = rows
                .into_iter()
                .map(|(node, role, blake3, _)| Fragment {
                    role,
                    node: with_health(node, timeout),
                    blake3,
                })
                .collect();
            Ok(Some(ParityObject {
                entry,
                meta,
                fragments,
            }))
        })
    }

    /// After a DELETE of `bucket/key` ([`ClusterDb::delete_everywhere`]): its fragments go, each holder gets a
    /// tombstone for its fragment. Returns the holders' names.
    pub fn delete_parity(&self, bucket: &str, key: &str) -> Result<Vec<String>> {
        self.write(|c| {
            c.execute(
                "DELETE FROM permafrost_cluster.tombstones WHERE node_id = ?1 AND bucket = ?2 AND key = ?3",
                params![PARITY_HOLDER, bucket, key.as_bytes()],
            )
            .map_err(sql_err)?;
            drop_fragments(c, bucket, key)
        })
    }

    /// Every current fragment `node_id` holds: (bucket, key, role), by bucket and key.
    pub fn fragments_on(&self, node_id: i64) -> Result<Vec<(String, String, String)>> {
        self.read(|c| {
            let mut st = c
                .prepare_cached(
                    "SELECT bucket, key, role FROM permafrost_cluster.fragments WHERE node_id = ?1 \
                     ORDER BY bucket, key, role",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![node_id], |r| {
                    let key: Vec<u8> = r.get(1)?;
                    Ok((
                        r.get(0)?,
                        String::from_utf8_lossy(&key).into_owned(),
                        r.get(2)?,
                    ))
                })
                .map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)).collect()
        })
    }

    /// A rebuild stored fragment `role` of this version of `entry` on `to`: it becomes the holder, and the old
    /// holder `from` gets a tombstone for its fragment. False (nothing changed) when the fragment is no longer
    /// held by `from` at that version (deleted, replaced, or rebuilt by another node).
    pub fn move_fragment(
        &self,
        entry: &DirEntry,
        role: &str,
        from: i64,
        to: i64,
        blake3: &str,
    ) -> Result<bool> {
        let lm = entry.last_modified_ms as i64;
        self.write(|c| {
            let n = c
                .execute(
                    "UPDATE permafrost_cluster.fragments SET node_id = ?4 WHERE bucket = ?1 AND key = ?2 \
                     AND role = ?3 AND node_id = ?5 AND etag = ?6 AND last_modified_ms = ?7 AND blake3 = ?8",
                    params![
                        entry.bucket,
                        entry.key.as_bytes(),
                        role,
                        to,
                        from,
                        entry.etag,
                        lm,
                        blake3
                    ],
                )
                .map_err(sql_err)?;
            if n == 0 {
                return Ok(false);
            }
            fragment_tombstone(c, from, entry, role)?;
            Ok(true)
        })
    }
}

impl ClusterDb {
    /// A lost holder's fragment of this version of `entry` cannot be rebuilt on a free node (every node that is
    /// up holds one of its fragments): once each of `keepers` (the surviving holders) has published a whole copy
    /// of this version, the object switches to them in one transaction: its row under [`PARITY_HOLDER`] and
    /// every fragment row go (each fragment holder gets a tombstone for its fragment) and the object is recorded
    /// under-replicated (3 wanted, the keepers held), the state of a write that found fewer than three nodes for
    /// its fragments, so the catch-up re-encodes it when three nodes are up. False (nothing changed) when it is
    /// no longer held as fragments at this version or a keeper's whole copy is not published yet.
    pub fn parity_to_copies(&self, entry: &DirEntry, keepers: &[i64]) -> Result<bool> {
        let lm = entry.last_modified_ms as i64;
        self.write(|c| {
            let key = entry.key.as_bytes();
            let count = |node_id: i64| -> Result<i64> {
                c.query_row(
                    "SELECT count(*) FROM permafrost_cluster.objects WHERE bucket = ?1 AND key = ?2 \
                     AND node_id = ?3 AND etag = ?4 AND last_modified_ms = ?5",
                    params![entry.bucket, key, node_id, entry.etag, lm],
                    |r| r.get(0),
                )
                .map_err(sql_err)
            };
            if count(PARITY_HOLDER)? == 0 || newer_version_listed(c, &entry.bucket, key, lm)? {
                return Ok(false);
            }
            for k in keepers {
                if count(*k)? == 0 {
                    return Ok(false);
                }
            }
            c.execute(
                "DELETE FROM permafrost_cluster.objects WHERE bucket = ?1 AND key = ?2 AND node_id = ?3",
                params![entry.bucket, key, PARITY_HOLDER],
            )
            .map_err(sql_err)?;
            drop_fragments(c, &entry.bucket, &entry.key)?;
            record_copies_in(c, entry, 3, keepers.len() as i64)?;
            Ok(true)
        })
    }

    /// An operator asked for the rebuild of node `name` now (`permafrost cluster rebuild`), before it is lost:
    /// the nodes rebuild its fragments on their next catch-up pass. Kept in `meta` as `rebuild:<name>`.
    pub fn request_rebuild(&self, name: &str) -> Result<()> {
        self.write(|c| {
            c.execute(
                &format!(
                    "INSERT INTO permafrost_cluster.meta (key, value) VALUES (?1, CAST({NOW_MS} AS TEXT)) \
                     ON CONFLICT (key) DO NOTHING"
                ),
                params![format!("rebuild:{name}")],
            )
            .map_err(sql_err)?;
            Ok(())
        })
    }

    /// The nodes an operator asked to rebuild, by name.
    pub fn rebuild_requests(&self) -> Result<Vec<String>> {
        self.read(|c| {
            let mut st = c
                .prepare_cached(
                    "SELECT key FROM permafrost_cluster.meta WHERE key LIKE 'rebuild:%' ORDER BY key",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![], |r| r.get::<_, String>(0))
                .map_err(sql_err)?;
            rows.map(|r| {
                r.map(|k| k.trim_start_matches("rebuild:").to_owned())
                    .map_err(sql_err)
            })
            .collect()
        })
    }

    /// The rebuild of node `name` is done (it holds no fragment any more) or moot (it is back).
    pub fn clear_rebuild_request(&self, name: &str) -> Result<()> {
        self.write(|c| {
            c.execute(
                "DELETE FROM permafrost_cluster.meta WHERE key = ?1",
                params![format!("rebuild:{name}")],
            )
            .map_err(sql_err)?;
            Ok(())
        })
    }
}

/// Remove every fragment row of `bucket/key`, leaving each holder a tombstone for its fragment; their holders'
/// names.
fn drop_fragments(c: &Connection, bucket: &str, key: &str) -> Result<Vec<String>> {
    let mut st = c
        .prepare_cached(
            "SELECT f.node_id, f.role, f.etag, f.last_modified_ms, COALESCE(n.name, '') \
             FROM permafrost_cluster.fragments f LEFT JOIN permafrost_cluster.nodes n ON n.node_id = f.node_id \
             WHERE f.bucket = ?1 AND f.key = ?2 ORDER BY f.role",
        )
        .map_err(sql_err)?;
    let old: Vec<(i64, String, String, i64, String)> = st
        .query_map(params![bucket, key.as_bytes()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .map_err(sql_err)?
        .collect::<sql::Result<_>>()
        .map_err(sql_err)?;
    for (node, role, etag, lm, _) in &old {
        let entry = DirEntry {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            size_bytes: 0,
            etag: etag.clone(),
            last_modified_ms: (*lm).max(0) as u64,
            content_type: None,
        };
        fragment_tombstone(c, *node, &entry, role)?;
    }
    c.execute(
        "DELETE FROM permafrost_cluster.fragments WHERE bucket = ?1 AND key = ?2",
        params![bucket, key.as_bytes()],
    )
    .map_err(sql_err)?;
    Ok(old.into_iter().map(|o| o.4).collect())
}

fn fragment_tombstone(c: &Connection, node_id: i64, entry: &DirEntry, role: &str) -> Result<()> {
    c.execute(
        "INSERT INTO permafrost_cluster.tombstones (node_id, bucket, key, etag, last_modified_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (node_id, bucket, key) DO UPDATE SET \
         etag = excluded.etag, last_modified_ms = GREATEST(permafrost_cluster.tombstones.last_modified_ms, \
         excluded.last_modified_ms)",
        params![
            node_id,
            FRAGMENTS_BUCKET,
            fragment_key(&entry.bucket, &entry.key, &entry.etag, role).as_bytes(),
            entry.etag,
            entry.last_modified_ms as i64
        ],
    )
    .map_err(sql_err)?;
    Ok(())
}
