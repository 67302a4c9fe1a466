//! Whole-catalog views: `ping`, the counts `stats` reports, and `check`, which verifies the invariants the other
//! modules keep (reference counts, part lists, inline contents, grid allocation) and lists every violation.

use super::SqlCatalog;
use crate::sql::{self, params};
use crate::*;

impl SqlCatalog {
    pub(super) fn ping(&self) -> Result<()> {
        self.read(|c| {
            c.query_row("SELECT 1", params![], |r| r.get::<_, i64>(0))
                .map(|_| ())
        })
    }

    pub(super) fn stats(&self) -> Result<CatalogStats> {
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

    pub(super) fn check(&self) -> Result<Vec<String>> {
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
