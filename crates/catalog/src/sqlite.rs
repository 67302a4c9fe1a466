//! The catalog's logic (every `Catalog` method, here and in the child modules), run through `crate::sql` on
//! either back end, and the embedded back end: one SQLite database (WAL) in the data directory. The PostgreSQL
//! back end is `crate::postgres`. Schema: `docs/catalog.md`.
//!
//! How a call runs its transaction (SQLite's writer, readers and group commit; PostgreSQL's retries): `backend`.

use crate::sql::{self, params, OptionalExtension, Transaction};

mod access;
mod backend;
mod buckets;
pub(crate) use access::PG_ACCESS_MIGRATION;
pub use backend::SqliteOptions;
mod archive;
mod completed;
mod contents;
use crate::*;
pub(crate) use completed::PG_COMPLETED_UPLOADS_MIGRATION;

mod extents;
mod growing;
mod namespace;
mod objects;
mod rows;
mod schema;
mod uploads;
pub(crate) use schema::{BUCKET_CORS_MIGRATION, RESTORE_TIER_MIGRATION};

// MOVED IMPORTS
use backend::Backend;
use contents::add_reference;
use extents::free_range;
use rows::{conversion, corrupt};
// END MOVED IMPORTS

/// The catalog: its logic on one of two back ends, an embedded SQLite database or a PostgreSQL server
/// (`crate::postgres`). The logic (this module and its children) runs SQL through `crate::sql`, once for both.
pub struct SqlCatalog {
    backend: Backend,
    /// What error messages name: the SQLite file, or the PostgreSQL URL without its password.
    name: String,
}

/// Add a pending work item inside `tx`.
fn add_work(tx: &Transaction, kind: WorkKind, now_ms: u64) -> sql::Result<WorkItem> {
    let text = serde_json::to_string(&kind).expect("work items serialize");
    let id = tx
        .prepare_cached("INSERT INTO pending_work (item, created_ms) VALUES (?1, ?2) RETURNING id")?
        .query_row(params![text, now_ms as i64], |r| r.get(0))?;
    Ok(WorkItem { id, kind })
}

impl SqlCatalog {}

/// `impl Catalog for SqlCatalog` names each trait method once, under the module that implements it: the
/// inherent method of the same name there (a trait's impl is one block, so the modules cannot hold the trait's
/// methods themselves). Each `fn name(&self, args) -> T;` becomes the trait method calling
/// `SqlCatalog::name(self, args)`, which is the inherent method (inherent methods come first in that path).
macro_rules! catalog_methods {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        $(fn $name(&self $(, $arg: $ty)*) -> $ret {
            SqlCatalog::$name(self $(, $arg)*)
        })*
    };
}

impl Catalog for SqlCatalog {
    catalog_methods! {
        // archive
        fn set_bucket_archive(&self, name: &str, archive: &BucketArchive) -> Result<()>;
        fn get_object_version(&self, bucket: &str, key: &str, version_id: &str) -> Result<Option<(VersionRecord, Option<ContentRecord>)>>;
        fn delete_version(&self, bucket: &str, key: &str, version_id: Option<&str>, bypass_governance: bool, now_ms: u64) -> Result<DeleteOutcome>;
        fn list_object_versions(&self, bucket: &str, query: &VersionQuery) -> Result<VersionPage>;
        fn change_attributes(&self, bucket: &str, key: &str, version_id: Option<&str>, change: &AttributeChange, bypass_governance: bool, now_ms: u64) -> Result<String>;
        fn expire_objects(&self, now_ms: u64, limit: usize) -> Result<u64>;
        fn expire_noncurrent(&self, now_ms: u64, limit: usize) -> Result<u64>;
        fn request_restore(&self, bucket: &str, key: &str, version_id: Option<&str>, terms: &RestoreTerms, now_ms: u64) -> Result<(RestoreOutcome, RestoreRecord)>;
        fn request_restores(&self, bucket: &str, versions: &[(String, String)], terms: &RestoreTerms, now_ms: u64) -> Result<Vec<Option<(RestoreOutcome, RestoreRecord)>>>;
        fn restore_of(&self, bucket: &str, key: &str, version_id: &str) -> Result<Option<RestoreRecord>>;
        fn pending_restores(&self, limit: usize) -> Result<Vec<RestoreRecord>>;
        fn finish_restores(&self, content: &ContentId, now_ms: u64, day_ms: u64) -> Result<()>;
        fn recache_content(&self, content: &ContentId, cache_path: &str, now_ms: u64) -> Result<bool>;
        fn dataset_stats(&self) -> Result<Vec<DatasetStats>>;
        fn expire_restores(&self, now_ms: u64) -> Result<u64>;
        // growing
        fn begin_growing(&self, object: &ObjectRecord, now_ms: u64) -> Result<bool>;
        fn append_growing(&self, append: &GrowingAppend, now_ms: u64) -> Result<Option<ContentPart>>;
        // completed
        fn completed_upload(&self, upload_id: &str) -> Result<Option<CompletedUpload>>;
        fn part_checksums(&self, list: &ContentId) -> Result<Vec<Vec<(String, String)>>>;
        // namespace
        fn fs_lookup(&self, bucket: &str, path: &str) -> Result<Option<FsEntry>>;
        fn fs_list(&self, bucket: &str, dir: &str, after: Option<&str>, limit: usize) -> Result<FsPage>;
        fn fs_mkdir(&self, record: &DirRecord, parent_attrs: &DirAttrs) -> Result<()>;
        fn fs_rmdir(&self, bucket: &str, path: &str, parent_attrs: &DirAttrs, now_ms: u64) -> Result<()>;
        fn fs_unlink(&self, bucket: &str, key: &str, parent_attrs: &DirAttrs, now_ms: u64) -> Result<()>;
        fn fs_rename(&self, rename: &FsRename, now_ms: u64) -> Result<()>;
        fn fs_set_dir(&self, record: &DirRecord) -> Result<()>;
        fn fs_set_metadata(&self, bucket: &str, key: &str, user_metadata: &[(String, String)]) -> Result<()>;
        // buckets
        fn create_bucket(&self, name: &str, settings: &BucketSettings) -> Result<()>;
        fn delete_bucket(&self, name: &str) -> Result<Vec<WorkItem>>;
        fn get_bucket(&self, name: &str) -> Result<Option<BucketRecord>>;
        fn set_bucket_settings(&self, name: &str, settings: &BucketSettings) -> Result<()>;
        fn list_buckets(&self) -> Result<Vec<BucketRecord>>;
        fn datasets(&self) -> Result<Vec<DatasetRecord>>;
        // objects
        fn put_object_if(&self, object: &ObjectRecord, content: &NewContent, now_ms: u64, condition: &WriteCondition) -> Result<PutOutcome>;
        fn get_object(&self, bucket: &str, key: &str) -> Result<Option<(ObjectRecord, ContentRecord)>>;
        fn delete_object(&self, bucket: &str, key: &str, now_ms: u64) -> Result<bool>;
        fn copy_object_if(&self, src_bucket: &str, src_key: &str, src_version: Option<&str>, object: &ObjectRecord, now_ms: u64, condition: &WriteCondition) -> Result<ObjectRecord>;
        fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage>;
        fn objects_after(&self, after: Option<(&str, &str)>, limit: usize) -> Result<Vec<ObjectRecord>>;
        // contents
        fn get_content(&self, id: &ContentId) -> Result<Option<ContentRecord>>;
        fn contents_in_state(&self, state: ContentState, limit: usize) -> Result<Vec<ContentRecord>>;
        fn placed_on(&self, grid_bucket: u32, limit: usize) -> Result<Vec<ContentRecord>>;
        fn any_object_of(&self, id: &ContentId) -> Result<Option<ObjectRecord>>;
        fn owner_of(&self, id: &ContentId) -> Result<Option<ContentOwner>>;
        fn unpersisted_references(&self, limit: usize) -> Result<Vec<UnpersistedReference>>;
        fn content_parts(&self, id: &ContentId) -> Result<Vec<(ContentPart, ContentRecord)>>;
        fn place_content(&self, id: &ContentId, grid_bucket: u32) -> Result<()>;
        fn touch_contents(&self, accesses: &[(ContentId, u64)]) -> Result<()>;
        fn pin_hot(&self, ids: &[ContentId], hot: bool) -> Result<u64>;
        fn eviction_candidates(&self, limit: usize) -> Result<Vec<ContentRecord>>;
        fn evict_contents(&self, ids: &[ContentId]) -> Result<Vec<Evicted>>;
        fn inline_bytes(&self, id: &ContentId) -> Result<Option<Vec<u8>>>;
        fn outstanding(&self) -> Result<Vec<Outstanding>>;
        fn mark_persisted(&self, ids: &[ContentId]) -> Result<()>;
        fn persisted_ms(&self, id: &ContentId) -> Result<Option<u64>>;
        fn cache_files(&self) -> Result<Vec<String>>;
        // extents
        fn begin_extents(&self, grid_bucket: u32, capacity_bytes: u64, extents: &[NewExtent], contents: &[ContentId]) -> Result<Vec<ExtentRecord>>;
        fn finish_extents(&self, written: &[(i64, [u8; 32])], segments: &[SegmentRecord], contents: &[ContentId], parity_pending: bool) -> Result<()>;
        fn abandon_extents(&self, extent_ids: &[i64], contents: &[ContentId]) -> Result<()>;
        fn unwritten_extents(&self) -> Result<Vec<ExtentRecord>>;
        fn segments(&self, id: &ContentId) -> Result<Vec<ContentSegment>>;
        fn extents_of_grid_bucket(&self, grid_bucket: u32) -> Result<Vec<ExtentRecord>>;
        fn grid_usage(&self) -> Result<Vec<GridUsage>>;
        fn free_ranges(&self, grid_bucket: u32) -> Result<Vec<(u64, u64)>>;
        // uploads
        fn create_upload(&self, upload: &UploadRecord) -> Result<()>;
        fn get_upload(&self, upload_id: &str) -> Result<Option<UploadRecord>>;
        fn list_uploads(&self, bucket: &str, prefix: &str, limit: usize) -> Result<Vec<UploadRecord>>;
        fn put_part(&self, part: &PartRecord, content: &NewContent, dataset: &str) -> Result<PutOutcome>;
        fn list_parts(&self, upload_id: &str) -> Result<Vec<PartRecord>>;
        fn remove_upload(&self, upload_id: &str) -> Result<Vec<WorkItem>>;
        fn complete_upload_if(&self, upload_id: &str, object: &ObjectRecord, list: &NewPartList, now_ms: u64, condition: &WriteCondition) -> Result<PutOutcome>;
        fn all_uploads(&self) -> Result<Vec<UploadRecord>>;
        // END OF TABLE
    }

    fn history_append(&self, h: &HistorySample, keep: u64) -> Result<()> {
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

    fn history_since(&self, since_ms: u64, limit: usize) -> Result<Vec<HistorySample>> {
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

    fn webhook_add(
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

    fn webhooks(&self) -> Result<Vec<WebhookRecord>> {
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

    fn webhook_remove(&self, id: u64) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.execute("DELETE FROM webhooks WHERE id = ?1", params![id as i64])? > 0)
        })
    }

    fn webhook_attempt(
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

    fn gc_candidates(&self, older_than_ms: u64, limit: usize) -> Result<Vec<ContentId>> {
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

    fn gc_content(&self, id: &ContentId) -> Result<GcOutcome> {
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

    fn pending_work(&self) -> Result<Vec<WorkItem>> {
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

    fn finish_work(&self, ids: &[i64]) -> Result<()> {
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

    fn ping(&self) -> Result<()> {
        self.read(|c| {
            c.query_row("SELECT 1", params![], |r| r.get::<_, i64>(0))
                .map(|_| ())
        })
    }

    fn stats(&self) -> Result<CatalogStats> {
        self.read(|c| {
            let count = |sql: &str| -> sql::Result<u64> { c.query_row(sql, params![], |r| r.get::<_, i64>(0)).map(|v| v as u64) };
            let mut by_state = Vec::new();
            for state in ContentState::ALL {
                let (n, bytes): (i64, i64) = c
                    .prepare_cached("SELECT COUNT(*), COALESCE(SUM(stored_bytes), 0) FROM contents WHERE state = ?1")?
                    .query_row(params![state.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?;
                by_state.push((state, n as u64, bytes as u64));
            }
            Ok(CatalogStats {
                buckets: count("SELECT COUNT(*) FROM buckets")?,
                objects: count("SELECT COUNT(*) FROM objects")?,
                contents_by_state: by_state,
                cached_bytes: count("SELECT COALESCE(SUM(stored_bytes), 0) FROM contents WHERE cache_path IS NOT NULL")?,
                inline_bytes: count("SELECT COALESCE(SUM(LENGTH(bytes)), 0) FROM cache_inline")?,
                extents: count("SELECT COUNT(*) FROM extents")?,
                pack_extents: count("SELECT COUNT(*) FROM extents WHERE kind = 'pack'")?,
                uploads: count("SELECT COUNT(*) FROM multipart_uploads")?,
                parts_bytes: count("SELECT COALESCE(SUM(size_bytes), 0) FROM multipart_parts")?,
            })
        })
    }

    fn check(&self) -> Result<Vec<String>> {
        self.read(|c| {
            let mut problems = Vec::new();
            let mut stmt = c.prepare(
                "SELECT c.content, c.refcount, (SELECT COUNT(*) FROM objects o WHERE o.content = c.content)
                     + (SELECT COUNT(*) FROM content_parts p WHERE p.part = c.content)
                     + (SELECT COUNT(*) FROM multipart_parts m WHERE m.content = c.content)
                     + (SELECT COUNT(*) FROM object_versions v WHERE v.content = c.content) FROM contents c",
            )?;
            let rows = stmt.query_map(params![], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))?;
            for row in rows {
                let (key, refcount, actual) = row?;
                if refcount != actual {
                    let id = ContentId::from_key(&key).map(|id| id.to_string()).unwrap_or_default();
                    problems.push(format!("content {id}: refcount {refcount} but {actual} references (objects, part lists, uploaded parts)"));
                }
            }
            let orphans: i64 = c.query_row(
                "SELECT COUNT(*) FROM objects o WHERE NOT EXISTS (SELECT 1 FROM contents c WHERE c.content = o.content)",
                params![],
                |r| r.get(0),
            )?;
            if orphans > 0 {
                problems.push(format!("{orphans} objects name a missing content"));
            }
            let missing_parts: i64 = c.query_row(
                "SELECT COUNT(*) FROM content_parts p WHERE NOT EXISTS (SELECT 1 FROM contents c WHERE c.content = p.part)
                 OR NOT EXISTS (SELECT 1 FROM contents c WHERE c.content = p.content AND c.stored_form = 'parts')",
                params![],
                |r| r.get(0),
            )?;
            if missing_parts > 0 {
                problems.push(format!("{missing_parts} part-list rows name a missing part or list content"));
            }
            // A part list starts at 0 and its parts follow each other without gaps, adding up to the whole.
            let gaps: i64 = c.query_row(
                "SELECT COUNT(*) FROM content_parts a WHERE
                     (a.seq = 0 AND a.logical_offset <> 0)
                  OR (a.seq > 0 AND NOT EXISTS (SELECT 1 FROM content_parts b WHERE b.content = a.content
                         AND b.seq = a.seq - 1 AND b.logical_offset + b.logical_bytes = a.logical_offset))",
                params![],
                |r| r.get(0),
            )?;
            if gaps > 0 {
                problems.push(format!("{gaps} parts do not follow the part before them"));
            }
            let inline_mismatch: i64 = c.query_row(
                "SELECT (SELECT COUNT(*) FROM cache_inline i WHERE NOT EXISTS (SELECT 1 FROM contents c
                     WHERE c.content = i.content AND c.cache_path = '@inline' AND c.stored_bytes = LENGTH(i.bytes)))
                  + (SELECT COUNT(*) FROM contents c WHERE c.cache_path = '@inline'
                     AND NOT EXISTS (SELECT 1 FROM cache_inline i WHERE i.content = c.content))",
                params![],
                |r| r.get(0),
            )?;
            if inline_mismatch > 0 {
                problems.push(format!("{inline_mismatch} inline cached contents lack their bytes or their row"));
            }
            // Allocation: extents and free ranges of a bucket must not overlap and stay below the append pointer.
            let mut stmt = c.prepare(
                "SELECT grid_bucket, offset, length_bytes FROM extents
                 UNION ALL SELECT grid_bucket, offset, length FROM grid_free_ranges ORDER BY 1, 2",
            )?;
            let ranges: Vec<(i64, i64, i64)> =
                stmt.query_map(params![], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<sql::Result<_>>()?;
            let mut appends = std::collections::HashMap::new();
            for row in c.prepare("SELECT grid_bucket, append_offset FROM grid_allocations")?.query_map(params![], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })? {
                let (b, a) = row?;
                appends.insert(b, a);
            }
            let mut previous: Option<(i64, i64)> = None;
            for (b, o, l) in ranges {
                if let Some((pb, pend)) = previous {
                    if pb == b && o < pend {
                        problems.push(format!("grid bucket {b}: range at {o} overlaps the range ending at {pend}"));
                    }
                }
                if o + l > appends.get(&b).copied().unwrap_or(0) {
                    problems.push(format!("grid bucket {b}: range {o}+{l} lies beyond the append pointer"));
                }
                previous = Some((b, o + l));
            }
            Ok(problems)
        })
    }
}
