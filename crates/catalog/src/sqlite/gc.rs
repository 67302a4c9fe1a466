//! Garbage collection and the work queue: contents no one references any more are removed after their grace time
//! (their extents' space freed, their cache files queued for deletion), and `pending_work` holds the file deletions
//! that must happen after a commit. Invariants: a content is removed only with refcount 0, not while it is being
//! written to the grid, and never while a version still names it; a work item is added in the transaction that
//! makes its file unneeded and removed only once done.

use super::{
    contents::add_reference,
    extents::free_range,
    rows::{conversion, corrupt},
    SqlCatalog,
};
use crate::sql::{self, params, OptionalExtension, Transaction};
use crate::*;

/// Add a pending work item inside `tx`.
pub(super) fn add_work(tx: &Transaction, kind: WorkKind, now_ms: u64) -> sql::Result<WorkItem> {
    let text = serde_json::to_string(&kind).expect("work items serialize");
    let id = tx
        .prepare_cached("INSERT INTO pending_work (item, created_ms) VALUES (?1, ?2) RETURNING id")?
        .query_row(params![text, now_ms as i64], |r| r.get(0))?;
    Ok(WorkItem { id, kind })
}

impl SqlCatalog {
    pub(super) fn gc_candidates(&self, older_than_ms: u64, limit: usize) -> Result<Vec<ContentId>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT content FROM contents WHERE refcount = 0 AND unreferenced_since_ms <= ?1
                 ORDER BY unreferenced_since_ms LIMIT ?2",
            )?
            .query_map(
                params![older_than_ms.min(i64::MAX as u64) as i64, limit as i64],
                |r| ContentId::from_key(&r.get::<_, Vec<u8>>(0)?).map_err(conversion),
            )?
            .collect()
        })
    }

    pub(super) fn gc_content(&self, id: &ContentId) -> Result<GcOutcome> {
        self.write(|tx| {
            let key = id.to_key();
            let row: Option<(i64, Option<String>, i64, String)> = tx
                .prepare_cached("SELECT refcount, cache_path, stored_bytes, state FROM contents WHERE content = ?1")?
                .query_row(params![&key[..]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()?;
            let mut outcome = GcOutcome::default();
            let Some((refcount, cache_path, stored_bytes, state)) = row else { return Ok(outcome) };
            // A content being written to the grid is left to finish first.
            if refcount != 0 || state == "persisting" {
                return Ok(outcome);
            }
            // Never drop bytes a version still names (a locked one above all), whatever the count says.
            let named = tx
                .prepare_cached(
                    "SELECT 1 FROM objects WHERE content = ?1
                     UNION ALL SELECT 1 FROM object_versions WHERE content = ?1 LIMIT 1",
                )?
                .query_row(params![&key[..]], |_| Ok(()))
                .optional()?
                .is_some();
            if named {
                tracing::error!("garbage collection: content {id} has refcount 0 but a version names it; kept");
                return Ok(outcome);
            }
            let extent_ids: Vec<i64> = tx
                .prepare_cached("SELECT DISTINCT extent_id FROM segments WHERE content = ?1")?
                .query_map(params![&key[..]], |r| r.get(0))?
                .collect::<sql::Result<_>>()?;
            tx.prepare_cached("DELETE FROM segments WHERE content = ?1")?.execute(params![&key[..]])?;
            for extent_id in extent_ids {
                let still_used = tx
                    .prepare_cached("SELECT 1 FROM segments WHERE extent_id = ?1 LIMIT 1")?
                    .query_row(params![extent_id], |_| Ok(()))
                    .optional()?
                    .is_some();
                if still_used {
                    continue;
                }
                let (b, o, l): (i64, i64, i64) = tx
                    .prepare_cached("SELECT grid_bucket, offset, length_bytes FROM extents WHERE extent_id = ?1")?
                    .query_row(params![extent_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                tx.prepare_cached("DELETE FROM extents WHERE extent_id = ?1")?.execute(params![extent_id])?;
                free_range(tx, b as u32, o as u64, l as u64)?;
                outcome.ranges_freed.push((b as u32, o as u64, l as u64));
            }
            tx.prepare_cached("DELETE FROM contents WHERE content = ?1")?.execute(params![&key[..]])?;
            // A part-list content gives up its parts' references (each then waits out its own grace).
            let parts: Vec<Vec<u8>> = tx
                .prepare_cached("SELECT part FROM content_parts WHERE content = ?1")?
                .query_map(params![&key[..]], |r| r.get(0))?
                .collect::<sql::Result<_>>()?;
            tx.prepare_cached("DELETE FROM content_parts WHERE content = ?1")?.execute(params![&key[..]])?;
            for part in parts {
                add_reference(tx, &part, -1, now_ms())?;
            }
            match cache_path {
                Some(path) if path == INLINE_CACHE_PATH => {
                    tx.prepare_cached("DELETE FROM cache_inline WHERE content = ?1")?.execute(params![&key[..]])?;
                    outcome.inline_bytes_freed = stored_bytes as u64;
                }
                Some(path) => outcome.work.push(add_work(tx, WorkKind::DeleteCacheFile { path }, now_ms())?),
                None => {}
            }
            outcome.contents_removed = 1;
            outcome.stored_bytes_removed = stored_bytes as u64;
            Ok(outcome)
        })
    }

    pub(super) fn pending_work(&self) -> Result<Vec<WorkItem>> {
        let rows = self.read(|c| {
            c.prepare_cached("SELECT id, item FROM pending_work ORDER BY id")?
                .query_map(params![], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })?
                .collect::<sql::Result<Vec<_>>>()
        })?;
        rows.into_iter()
            .map(|(id, text)| {
                Ok(WorkItem {
                    id,
                    kind: serde_json::from_str(&text)
                        .map_err(|e| corrupt(format!("pending work {id}: {e}")))?,
                })
            })
            .collect()
    }

    pub(super) fn finish_work(&self, ids: &[i64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            let mut stmt = tx.prepare_cached("DELETE FROM pending_work WHERE id = ?1")?;
            for id in ids {
                stmt.execute(params![id])?;
            }
            Ok(())
        })
    }
}
