//! Contents (the bytes objects and parts name, by digest) through their life: added cached, placed on a grid
//! bucket, persisted, evicted from the cache, and who owns them. Invariants: `refcount` counts the objects,
//! versions, part lists and uploaded parts that name a content (`add_reference` keeps `unreferenced_since_ms` with
//! it); a content moves cached -> placed -> persisting -> persisted as its bytes reach the grid (back to
//! placed when its extents are abandoned); only a persisted, unpinned content loses its cache copy.

use super::{
    gc::add_work,
    rows::{
        content_from_row, conversion, key_string, object_from_row, CONTENT_COLUMNS, OBJECT_COLUMNS,
    },
    SqlCatalog,
};
use crate::sql::{self, params, OptionalExtension, Transaction};
use crate::*;

/// Insert `content` (state `cached`, refcount 0, `dataset`) unless a content with its id exists; returns whether
/// it existed (then its cache file is to be deleted: the work item is added to `work`, and its access time
/// refreshed).
pub(super) fn insert_content(
    tx: &Transaction,
    content: &NewContent,
    dataset: &str,
    now_ms: u64,
    work: &mut Vec<WorkItem>,
) -> sql::Result<bool> {
    let key = content.id.to_key();
    let exists = tx
        .prepare_cached("SELECT 1 FROM contents WHERE content = ?1")?
        .query_row(params![&key[..]], |_| Ok(()))
        .optional()?
        .is_some();
    if exists {
        if content.inline.is_none() {
            work.push(add_work(
                tx,
                WorkKind::DeleteCacheFile {
                    path: content.cache_path.clone(),
                },
                now_ms,
            )?);
        }
        tx.prepare_cached("UPDATE contents SET last_access_ms = ?2 WHERE content = ?1")?
            .execute(params![&key[..], now_ms as i64])?;
    } else {
        let cache_path = match &content.inline {
            Some(bytes) => {
                tx.prepare_cached("INSERT INTO cache_inline (content, bytes) VALUES (?1, ?2)")?
                    .execute(params![&key[..], bytes])?;
                INLINE_CACHE_PATH
            }
            None => content.cache_path.as_str(),
        };
        tx.prepare_cached(&format!(
            "INSERT INTO contents ({CONTENT_COLUMNS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, 'cached', 0, ?7, NULL, ?8, ?9, ?9, ?9)"
        ))?
        .execute(params![
            &key[..],
            content.logical_bytes as i64,
            content.stored_bytes as i64,
            content.stored_form.as_str(),
            content.chunk_index,
            &content.md5[..],
            dataset,
            cache_path,
            now_ms as i64,
        ])?;
    }
    Ok(exists)
}

/// Change a content's reference count by `delta` inside `tx`, maintaining `unreferenced_since_ms`.
pub(super) fn add_reference(
    tx: &Transaction,
    content: &[u8],
    delta: i64,
    now_ms: u64,
) -> sql::Result<()> {
    tx.prepare_cached(
        "UPDATE contents SET refcount = refcount + ?2,
             unreferenced_since_ms = CASE WHEN refcount + ?2 = 0 THEN CAST(?3 AS BIGINT) ELSE NULL END
         WHERE content = ?1",
    )?
    .execute(params![content, delta, now_ms as i64])?;
    Ok(())
}

impl SqlCatalog {
    pub(super) fn get_content(&self, id: &ContentId) -> Result<Option<ContentRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {CONTENT_COLUMNS} FROM contents WHERE content = ?1"
            ))?
            .query_row(params![&id.to_key()[..]], |r| content_from_row(r, 0))
            .optional()
        })
    }

    pub(super) fn contents_in_state(
        &self,
        state: ContentState,
        limit: usize,
    ) -> Result<Vec<ContentRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {CONTENT_COLUMNS} FROM contents WHERE state = ?1 ORDER BY created_ms LIMIT ?2"
            ))?
            .query_map(params![state.as_str(), limit as i64], |r| content_from_row(r, 0))?
            .collect()
        })
    }

    pub(super) fn placed_on(&self, grid_bucket: u32, limit: usize) -> Result<Vec<ContentRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {CONTENT_COLUMNS} FROM contents WHERE state = 'placed' AND grid_bucket = ?1 AND refcount > 0
                 ORDER BY dataset, created_ms LIMIT ?2"
            ))?
            .query_map(params![grid_bucket, limit as i64], |r| content_from_row(r, 0))?
            .collect()
        })
    }

    pub(super) fn any_object_of(&self, id: &ContentId) -> Result<Option<ObjectRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {OBJECT_COLUMNS} FROM objects WHERE content = ?1 LIMIT 1"
            ))?
            .query_row(params![&id.to_key()[..]], object_from_row)
            .optional()
        })
    }

    pub(super) fn owner_of(&self, id: &ContentId) -> Result<Option<ContentOwner>> {
        self.read(|c| {
            let key = &id.to_key()[..];
            if let Some(object) = c
                .prepare_cached(&format!(
                    "SELECT {OBJECT_COLUMNS} FROM objects WHERE content = ?1 LIMIT 1"
                ))?
                .query_row(params![key], object_from_row)
                .optional()?
            {
                return Ok(Some(ContentOwner::Object(Box::new(object))));
            }
            // A noncurrent version (superseded, or hidden under a delete marker) is an owner as much as the
            // current one: its bytes must reach the grid too. The newest such version names it.
            if let Some(object) = c
                .prepare_cached(&format!(
                    "SELECT {OBJECT_COLUMNS} FROM object_versions WHERE content = ?1 AND delete_marker = 0
                     ORDER BY version_seq DESC LIMIT 1"
                ))?
                .query_row(params![key], object_from_row)
                .optional()?
            {
                return Ok(Some(ContentOwner::Object(Box::new(object))));
            }
            // A part of a part list, current version first, then noncurrent ones.
            for list_owner in [
                "SELECT o.bucket, o.key, o.last_modified_ms FROM content_parts p
                 JOIN objects o ON o.content = p.content WHERE p.part = ?1 LIMIT 1",
                "SELECT v.bucket, v.key, v.last_modified_ms FROM content_parts p
                 JOIN object_versions v ON v.content = p.content WHERE p.part = ?1 AND v.delete_marker = 0
                 ORDER BY v.version_seq DESC LIMIT 1",
            ] {
                let of_list = c
                    .prepare_cached(list_owner)?
                    .query_row(params![key], |r| {
                        Ok(ContentOwner::Part {
                            bucket: r.get(0)?,
                            key: key_string(r.get(1)?)?,
                            created_ms: r.get::<_, i64>(2)? as u64,
                        })
                    })
                    .optional()?;
                if of_list.is_some() {
                    return Ok(of_list);
                }
            }
            c.prepare_cached(
                "SELECT u.bucket, u.key, p.created_ms FROM multipart_parts p
                 JOIN multipart_uploads u ON u.upload_id = p.upload_id WHERE p.content = ?1 LIMIT 1",
            )?
            .query_row(params![key], |r| {
                Ok(ContentOwner::Part {
                    bucket: r.get(0)?,
                    key: key_string(r.get(1)?)?,
                    created_ms: r.get::<_, i64>(2)? as u64,
                })
            })
            .optional()
        })
    }

    pub(super) fn unpersisted_references(&self, limit: usize) -> Result<Vec<UnpersistedReference>> {
        let c_columns = CONTENT_COLUMNS
            .split(", ")
            .map(|c| format!("c.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        // Each branch starts from the contents not persisted (`contents_by_state`), so the query costs what is
        // waiting, not the size of the archive.
        let waiting = "c.state IN ('cached', 'placed', 'persisting')";
        let sql = format!(
            "SELECT {c_columns}, o.bucket, o.key, o.version_id, CAST(NULL AS TEXT) FROM contents c
                 JOIN objects o ON o.content = c.content WHERE {waiting}
             UNION ALL SELECT {c_columns}, v.bucket, v.key, v.version_id, CAST(NULL AS TEXT) FROM contents c
                 JOIN object_versions v ON v.content = c.content WHERE {waiting} AND v.delete_marker = 0
             UNION ALL SELECT {c_columns}, o.bucket, o.key, o.version_id, CAST(NULL AS TEXT) FROM contents c
                 JOIN content_parts p ON p.part = c.content JOIN objects o ON o.content = p.content WHERE {waiting}
             UNION ALL SELECT {c_columns}, v.bucket, v.key, v.version_id, CAST(NULL AS TEXT) FROM contents c
                 JOIN content_parts p ON p.part = c.content JOIN object_versions v ON v.content = p.content
                 WHERE {waiting} AND v.delete_marker = 0
             UNION ALL SELECT {c_columns}, u.bucket, u.key, CAST(NULL AS TEXT), u.upload_id FROM contents c
                 JOIN multipart_parts m ON m.content = c.content JOIN multipart_uploads u ON u.upload_id = m.upload_id
                 WHERE {waiting}
             LIMIT ?1"
        );
        self.read(|c| {
            c.prepare_cached(&sql)?
                .query_map(params![limit.min(i64::MAX as usize) as i64], |r| {
                    Ok(UnpersistedReference {
                        content: content_from_row(r, 0)?,
                        bucket: r.get(14)?,
                        key: key_string(r.get(15)?)?,
                        version_id: r.get(16)?,
                        upload_id: r.get(17)?,
                    })
                })?
                .collect()
        })
    }

    pub(super) fn content_parts(
        &self,
        id: &ContentId,
    ) -> Result<Vec<(ContentPart, ContentRecord)>> {
        let columns = CONTENT_COLUMNS
            .split(", ")
            .map(|c| format!("c.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT p.seq, p.part, p.logical_offset, p.logical_bytes, {columns} FROM content_parts p
                 JOIN contents c ON c.content = p.part WHERE p.content = ?1 ORDER BY p.seq"
            ))?
            .query_map(params![&id.to_key()[..]], |r| {
                Ok((
                    ContentPart {
                        seq: r.get::<_, i64>(0)? as u32,
                        part: ContentId::from_key(&r.get::<_, Vec<u8>>(1)?).map_err(conversion)?,
                        logical_offset: r.get::<_, i64>(2)? as u64,
                        logical_bytes: r.get::<_, i64>(3)? as u64,
                    },
                    content_from_row(r, 4)?,
                ))
            })?
            .collect()
        })
    }

    pub(super) fn place_content(&self, id: &ContentId, grid_bucket: u32) -> Result<()> {
        self.write(|tx| {
            let key = id.to_key();
            tx.prepare_cached("UPDATE contents SET state = 'placed', grid_bucket = ?2 WHERE content = ?1 AND state = 'cached'")?
                .execute(params![&key[..], grid_bucket])?;
            tx.prepare_cached(
                "UPDATE datasets SET grid_bucket = ?2
                 WHERE grid_bucket IS NULL AND id = (SELECT dataset FROM contents WHERE content = ?1)",
            )?
            .execute(params![&key[..], grid_bucket])?;
            Ok(())
        })
    }

    pub(super) fn unplace_contents(&self, grid_bucket: u32) -> Result<u64> {
        self.write(|tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE contents SET state = 'cached', grid_bucket = NULL WHERE state = 'placed' AND grid_bucket = ?1",
                )?
                .execute(params![grid_bucket])?;
            Ok(changed as u64)
        })
    }

    pub(super) fn touch_contents(&self, accesses: &[(ContentId, u64)]) -> Result<()> {
        if accesses.is_empty() {
            return Ok(());
        }
        self.write_unsynced(|tx| {
            let mut stmt =
                tx.prepare_cached("UPDATE contents SET last_access_ms = ?2 WHERE content = ?1")?;
            for (id, ms) in accesses {
                stmt.execute(params![&id.to_key()[..], *ms as i64])?;
            }
            Ok(())
        })
    }

    pub(super) fn pin_hot(&self, ids: &[ContentId], hot: bool) -> Result<u64> {
        let hot_ms = crate::HOT_PINNED_UNTIL_MS as i64;
        self.write(|tx| {
            let mut changed = 0;
            for id in ids {
                let key = id.to_key();
                changed += if hot {
                    tx.prepare_cached(
                        "UPDATE contents SET pinned_until_ms = ?2 WHERE content = ?1
                         AND (pinned_until_ms IS NULL OR pinned_until_ms <> ?2)",
                    )?
                    .execute(params![&key[..], hot_ms])?
                } else {
                    tx.prepare_cached(
                        "UPDATE contents SET pinned_until_ms = (SELECT MAX(expiry_ms) FROM restores
                             WHERE content = ?1 OR content IN (SELECT content FROM content_parts WHERE part = ?1))
                         WHERE content = ?1 AND pinned_until_ms = ?2",
                    )?
                    .execute(params![&key[..], hot_ms])?
                };
            }
            Ok(changed as u64)
        })
    }

    pub(super) fn eviction_candidates(&self, limit: usize) -> Result<Vec<ContentRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {CONTENT_COLUMNS} FROM contents WHERE state = 'persisted' AND cache_path IS NOT NULL
                 AND pinned_until_ms IS NULL ORDER BY last_access_ms LIMIT ?1"
            ))?
            .query_map(params![limit as i64], |r| content_from_row(r, 0))?
            .collect()
        })
    }

    pub(super) fn evict_contents(&self, ids: &[ContentId]) -> Result<Vec<Evicted>> {
        self.write(|tx| {
            let now = now_ms();
            let mut evicted = Vec::with_capacity(ids.len());
            for id in ids {
                let key = id.to_key();
                let row: Option<(Option<String>, i64)> = tx
                    .prepare_cached(
                        "SELECT cache_path, stored_bytes FROM contents WHERE content = ?1 AND state = 'persisted'
                         AND pinned_until_ms IS NULL",
                    )?
                    .query_row(params![&key[..]], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                let Some((Some(path), stored_bytes)) = row else { continue };
                tx.prepare_cached("UPDATE contents SET cache_path = NULL WHERE content = ?1")?
                    .execute(params![&key[..]])?;
                let work = if path == INLINE_CACHE_PATH {
                    tx.prepare_cached("DELETE FROM cache_inline WHERE content = ?1")?
                        .execute(params![&key[..]])?;
                    None
                } else {
                    Some(add_work(tx, WorkKind::DeleteCacheFile { path }, now)?)
                };
                evicted.push(Evicted {
                    id: *id,
                    stored_bytes: stored_bytes as u64,
                    work,
                });
            }
            Ok(evicted)
        })
    }

    pub(super) fn inline_bytes(&self, id: &ContentId) -> Result<Option<Vec<u8>>> {
        self.read(|c| {
            c.prepare_cached("SELECT bytes FROM cache_inline WHERE content = ?1")?
                .query_row(params![&id.to_key()[..]], |r| r.get(0))
                .optional()
        })
    }

    pub(super) fn outstanding(&self) -> Result<Vec<Outstanding>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT grid_bucket, SUM(stored_bytes), COUNT(*), MIN(created_ms) FROM contents
                 WHERE state = 'placed' AND refcount > 0 GROUP BY grid_bucket ORDER BY grid_bucket",
            )?
            .query_map(params![], |r| {
                Ok(Outstanding {
                    grid_bucket: r.get::<_, i64>(0)? as u32,
                    stored_bytes: r.get::<_, i64>(1)? as u64,
                    contents: r.get::<_, i64>(2)? as u64,
                    oldest_ms: r.get::<_, i64>(3)? as u64,
                })
            })?
            .collect()
        })
    }

    pub(super) fn mark_persisted(&self, ids: &[ContentId]) -> Result<()> {
        self.write(|tx| {
            let mut stmt = tx.prepare_cached("UPDATE contents SET state = 'persisted', persisted_ms = ?2 WHERE content = ?1 AND state = 'persisting'")?;
            for id in ids {
                stmt.execute(params![&id.to_key()[..], now_ms() as i64])?;
            }
            Ok(())
        })
    }

    pub(super) fn persisted_ms(&self, id: &ContentId) -> Result<Option<u64>> {
        self.read(|c| {
            c.prepare_cached("SELECT persisted_ms FROM contents WHERE content = ?1")?
                .query_row(params![&id.to_key()[..]], |r| r.get::<_, Option<i64>>(0))
                .optional()
                .map(|v| v.flatten().map(|ms| ms as u64))
        })
    }

    pub(super) fn cache_files(&self) -> Result<Vec<String>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT cache_path FROM contents WHERE cache_path IS NOT NULL AND cache_path <> '@inline'
                 UNION ALL SELECT cache_path FROM multipart_parts WHERE content IS NULL",
            )?
            .query_map(params![], |r| r.get(0))?
            .collect()
        })
    }
}
