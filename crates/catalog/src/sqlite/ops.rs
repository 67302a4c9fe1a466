//! The operator's records (permafrost-admin, docs/admin.md): history samples and webhooks. Invariants: history
//! keeps the newest `keep` samples; delivered webhooks are pruned to the newest `WEBHOOKS_DELIVERED_KEPT`, and a
//! delivered one is never attempted again.

use super::SqlCatalog;
use crate::sql::{self, params};
use crate::*;

impl SqlCatalog {
    pub(super) fn history_append(&self, h: &HistorySample, keep: u64) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO ops_history (at_ms, read_bytes, written_bytes, requests, spin_ups, watts, joules,
                     disks_spinning, cache_used_bytes, cache_dirty_bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (at_ms) DO UPDATE SET read_bytes = excluded.read_bytes,
                     written_bytes = excluded.written_bytes, requests = excluded.requests,
                     spin_ups = excluded.spin_ups, watts = excluded.watts, joules = excluded.joules,
                     disks_spinning = excluded.disks_spinning, cache_used_bytes = excluded.cache_used_bytes,
                     cache_dirty_bytes = excluded.cache_dirty_bytes",
                params![
                    h.at_ms as i64,
                    h.read_bytes as i64,
                    h.written_bytes as i64,
                    h.requests as i64,
                    h.spin_ups as i64,
                    h.watts,
                    h.joules,
                    i64::from(h.disks_spinning),
                    h.cache_used_bytes as i64,
                    h.cache_dirty_bytes as i64
                ],
            )?;
            tx.execute(
                "DELETE FROM ops_history WHERE at_ms < (SELECT at_ms FROM ops_history ORDER BY at_ms DESC
                     LIMIT 1 OFFSET ?1)",
                params![keep.saturating_sub(1).min(i64::MAX as u64) as i64],
            )?;
            Ok(())
        })
    }

    pub(super) fn history_since(&self, since_ms: u64, limit: usize) -> Result<Vec<HistorySample>> {
        let mut rows = self.read(|c| {
            c.prepare_cached(
                "SELECT at_ms, read_bytes, written_bytes, requests, spin_ups, watts, joules, disks_spinning,
                     cache_used_bytes, cache_dirty_bytes
                 FROM ops_history WHERE at_ms >= ?1 ORDER BY at_ms DESC LIMIT ?2",
            )?
            .query_map(params![since_ms as i64, limit as i64], |r| {
                Ok(HistorySample {
                    at_ms: r.get::<_, i64>(0)? as u64,
                    read_bytes: r.get::<_, i64>(1)? as u64,
                    written_bytes: r.get::<_, i64>(2)? as u64,
                    requests: r.get::<_, i64>(3)? as u64,
                    spin_ups: r.get::<_, i64>(4)? as u64,
                    watts: r.get(5)?,
                    joules: r.get(6)?,
                    disks_spinning: r.get::<_, i64>(7)? as u32,
                    cache_used_bytes: r.get::<_, i64>(8)? as u64,
                    cache_dirty_bytes: r.get::<_, i64>(9)? as u64,
                })
            })?
            .collect::<sql::Result<Vec<_>>>()
        })?;
        rows.reverse();
        Ok(rows)
    }

    pub(super) fn webhook_add(
        &self,
        url: &str,
        bucket: &str,
        key: Option<&str>,
        prefix: &str,
        now_ms: u64,
    ) -> Result<WebhookRecord> {
        let id = self.write(|tx| {
            let id: i64 = tx.query_row(
                "INSERT INTO webhooks (url, bucket, object_key, prefix, created_ms, attempts)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0) RETURNING id",
                params![url, bucket, key, prefix, now_ms as i64],
                |r| r.get(0),
            )?;
            tx.execute(
                "DELETE FROM webhooks WHERE delivered_ms IS NOT NULL AND id < (SELECT id FROM webhooks
                     WHERE delivered_ms IS NOT NULL ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                params![WEBHOOKS_DELIVERED_KEPT as i64 - 1],
            )?;
            Ok(id)
        })?;
        Ok(WebhookRecord {
            id: id as u64,
            url: url.to_string(),
            bucket: bucket.to_string(),
            key: key.map(str::to_string),
            prefix: prefix.to_string(),
            created_ms: now_ms,
            delivered_ms: None,
            attempts: 0,
            last_error: None,
        })
    }

    pub(super) fn webhooks(&self) -> Result<Vec<WebhookRecord>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT id, url, bucket, object_key, prefix, created_ms, delivered_ms, attempts, last_error
                 FROM webhooks ORDER BY id",
            )?
            .query_map(params![], |r| {
                Ok(WebhookRecord {
                    id: r.get::<_, i64>(0)? as u64,
                    url: r.get(1)?,
                    bucket: r.get(2)?,
                    key: r.get(3)?,
                    prefix: r.get(4)?,
                    created_ms: r.get::<_, i64>(5)? as u64,
                    delivered_ms: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                    attempts: r.get::<_, i64>(7)? as u32,
                    last_error: r.get(8)?,
                })
            })?
            .collect()
        })
    }

    pub(super) fn webhook_remove(&self, id: u64) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.execute("DELETE FROM webhooks WHERE id = ?1", params![id as i64])? > 0)
        })
    }

    pub(super) fn webhook_attempt(
        &self,
        id: u64,
        error: Option<&str>,
        delivered_ms: Option<u64>,
    ) -> Result<bool> {
        self.write(|tx| {
            let changed = tx.execute(
                "UPDATE webhooks SET attempts = attempts + 1, last_error = ?2,
                     delivered_ms = COALESCE(delivered_ms, ?3)
                 WHERE id = ?1 AND delivered_ms IS NULL",
                params![id as i64, error, delivered_ms.map(|v| v as i64)],
            )?;
            Ok(changed > 0)
        })
    }
}
