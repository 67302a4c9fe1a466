//! Extents on the grid and the space they take: allocation from each grid bucket's free list or append pointer,
//! the write of extents and their segments, and freeing. Invariants: on a grid bucket, extents and free ranges never
//! overlap and lie below the append pointer; free ranges are coalesced with their neighbours, and a range that ends
//! at the append pointer lowers it instead.

use super::{
    rows::{conversion, extent_from_row, kind_str, EXTENT_COLUMNS},
    SqlCatalog,
};
use crate::sql::{self, params, OptionalExtension, Transaction};
use crate::*;

/// Insert `(offset, length)` into the free list of `grid_bucket`, coalescing with its neighbours and
/// lowering the append pointer when the range ends there.
pub(super) fn free_range(
    tx: &Transaction,
    grid_bucket: u32,
    offset: u64,
    length: u64,
) -> sql::Result<()> {
    let (mut start, mut end) = (offset, offset + length);
    let before: Option<(i64, i64)> = tx
        .prepare_cached(
            "SELECT offset, length FROM grid_free_ranges WHERE grid_bucket = ?1 AND offset < ?2
             ORDER BY offset DESC LIMIT 1",
        )?
        .query_row(params![grid_bucket, start as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    if let Some((o, l)) = before {
        assert!(
            (o + l) as u64 <= start,
            "free range {o}+{l} overlaps freed {start}..{end} on grid bucket {grid_bucket}"
        );
        if (o + l) as u64 == start {
            start = o as u64;
            tx.prepare_cached(
                "DELETE FROM grid_free_ranges WHERE grid_bucket = ?1 AND offset = ?2",
            )?
            .execute(params![grid_bucket, o])?;
        }
    }
    let after: Option<(i64, i64)> = tx
        .prepare_cached("SELECT offset, length FROM grid_free_ranges WHERE grid_bucket = ?1 AND offset >= ?2 ORDER BY offset LIMIT 1")?
        .query_row(params![grid_bucket, offset as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((o, l)) = after {
        assert!(
            o as u64 >= end,
            "free range {o}+{l} overlaps freed {start}..{end} on grid bucket {grid_bucket}"
        );
        if o as u64 == end {
            end = (o + l) as u64;
            tx.prepare_cached(
                "DELETE FROM grid_free_ranges WHERE grid_bucket = ?1 AND offset = ?2",
            )?
            .execute(params![grid_bucket, o])?;
        }
    }
    let append: i64 = tx
        .prepare_cached("SELECT append_offset FROM grid_allocations WHERE grid_bucket = ?1")?
        .query_row(params![grid_bucket], |r| r.get(0))?;
    if end as i64 == append {
        tx.prepare_cached("UPDATE grid_allocations SET append_offset = ?2 WHERE grid_bucket = ?1")?
            .execute(params![grid_bucket, start as i64])?;
    } else {
        tx.prepare_cached(
            "INSERT INTO grid_free_ranges (grid_bucket, offset, length) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![grid_bucket, start as i64, (end - start) as i64])?;
    }
    Ok(())
}

/// Allocate `length` bytes on `grid_bucket`: the smallest free range that fits, else at the append pointer.
pub(super) fn allocate(
    tx: &Transaction,
    grid_bucket: u32,
    length: u64,
    capacity_bytes: u64,
) -> Result<u64> {
    let db = |e| CatalogError::Database {
        path: String::from("(allocation)"),
        source: e,
    };
    tx.prepare_cached(
        "INSERT INTO grid_allocations (grid_bucket, append_offset) VALUES (?1, 0) ON CONFLICT (grid_bucket) DO NOTHING",
    )
    .and_then(|mut s| s.execute(params![grid_bucket]))
    .map_err(db)?;
    let fit: Option<(i64, i64)> = tx
        .prepare_cached(
            "SELECT offset, length FROM grid_free_ranges WHERE grid_bucket = ?1 AND length >= ?2
             ORDER BY length, offset LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![grid_bucket, length as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .map_err(db)?;
    if let Some((offset, free)) = fit {
        let run = || -> sql::Result<()> {
            tx.prepare_cached(
                "DELETE FROM grid_free_ranges WHERE grid_bucket = ?1 AND offset = ?2",
            )?
            .execute(params![grid_bucket, offset])?;
            if free as u64 > length {
                tx.prepare_cached("INSERT INTO grid_free_ranges (grid_bucket, offset, length) VALUES (?1, ?2, ?3)")?
                    .execute(params![grid_bucket, offset + length as i64, free - length as i64])?;
            }
            Ok(())
        };
        run().map_err(db)?;
        return Ok(offset as u64);
    }
    let append: i64 = tx
        .prepare_cached("SELECT append_offset FROM grid_allocations WHERE grid_bucket = ?1")
        .and_then(|mut s| s.query_row(params![grid_bucket], |r| r.get(0)))
        .map_err(db)?;
    let append = append as u64;
    if append + length > capacity_bytes {
        let free: i64 = tx
            .prepare_cached(
                "SELECT COALESCE(SUM(length), 0) FROM grid_free_ranges WHERE grid_bucket = ?1",
            )
            .and_then(|mut s| s.query_row(params![grid_bucket], |r| r.get(0)))
            .map_err(db)?;
        return Err(CatalogError::NoRoom {
            grid_bucket,
            bytes: length,
            free_bytes: capacity_bytes.saturating_sub(append) + free as u64,
            capacity_bytes,
        });
    }
    tx.prepare_cached("UPDATE grid_allocations SET append_offset = ?2 WHERE grid_bucket = ?1")
        .and_then(|mut s| s.execute(params![grid_bucket, (append + length) as i64]))
        .map_err(db)?;
    Ok(append)
}

impl SqlCatalog {
    pub(super) fn begin_extents(
        &self,
        grid_bucket: u32,
        capacity_bytes: u64,
        extents: &[NewExtent],
        contents: &[ContentId],
    ) -> Result<Vec<ExtentRecord>> {
        self.write_with(|tx| {
            let mut out = Vec::with_capacity(extents.len());
            for e in extents {
                assert!(e.length_bytes > 0 && e.length_bytes % 4096 == 0, "extent length {} must be a multiple of 4096", e.length_bytes);
                let offset = allocate(tx, grid_bucket, e.length_bytes, capacity_bytes)?;
                let extent_id = tx.prepare_cached(
                    "INSERT INTO extents (grid_bucket, offset, length_bytes, payload_bytes, object_id, extent_no, kind, written, blake3, replica_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, NULL, ?8) RETURNING extent_id",
                )
                .and_then(|mut s| {
                    s.query_row(params![
                        grid_bucket,
                        offset as i64,
                        e.length_bytes as i64,
                        e.payload_bytes as i64,
                        &e.object_id[..],
                        e.extent_no,
                        kind_str(e.kind),
                        e.replica_id
                    ], |r| r.get::<_, i64>(0))
                })
                .map_err(|err| self.db_error(err))?;
                out.push(ExtentRecord {
                    extent_id,
                    grid_bucket,
                    offset,
                    length_bytes: e.length_bytes,
                    payload_bytes: e.payload_bytes,
                    object_id: e.object_id,
                    extent_no: e.extent_no,
                    replica_id: e.replica_id,
                    kind: e.kind,
                    written: false,
                    blake3: None,
                });
            }
            let mut stmt = tx
                .prepare_cached("UPDATE contents SET state = 'persisting' WHERE content = ?1 AND state = 'placed'")
                .map_err(|e| self.db_error(e))?;
            for id in contents {
                stmt.execute(params![&id.to_key()[..]]).map_err(|e| self.db_error(e))?;
            }
            Ok(out)
        })
    }

    pub(super) fn finish_extents(
        &self,
        written: &[(i64, [u8; 32])],
        segments: &[SegmentRecord],
        contents: &[ContentId],
        parity_pending: bool,
    ) -> Result<()> {
        self.write(|tx| {
            let mut stmt = tx.prepare_cached("UPDATE extents SET written = 1, blake3 = ?2 WHERE extent_id = ?1")?;
            for (id, hash) in written {
                stmt.execute(params![id, &hash[..]])?;
            }
            let mut stmt = tx.prepare_cached(
                "INSERT INTO segments (content, seq, extent_id, offset_in_payload, length_bytes) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (content, seq) DO UPDATE SET extent_id = excluded.extent_id,
                     offset_in_payload = excluded.offset_in_payload, length_bytes = excluded.length_bytes",
            )?;
            for s in segments {
                stmt.execute(params![&s.content.to_key()[..], s.seq, s.extent_id, s.offset_in_payload as i64, s.length_bytes as i64])?;
            }
            let state = if parity_pending { "persisting" } else { "persisted" };
            let persisted_ms = (!parity_pending).then(|| now_ms() as i64);
            let mut stmt = tx.prepare_cached("UPDATE contents SET state = ?2, persisted_ms = ?3 WHERE content = ?1")?;
            for id in contents {
                stmt.execute(params![&id.to_key()[..], state, persisted_ms])?;
            }
            Ok(())
        })
    }

    pub(super) fn abandon_extents(&self, extent_ids: &[i64], contents: &[ContentId]) -> Result<()> {
        self.write(|tx| {
            for id in extent_ids {
                let row: Option<(i64, i64, i64)> = tx
                    .prepare_cached("SELECT grid_bucket, offset, length_bytes FROM extents WHERE extent_id = ?1")?
                    .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                if let Some((b, o, l)) = row {
                    tx.prepare_cached("DELETE FROM segments WHERE extent_id = ?1")?.execute(params![id])?;
                    tx.prepare_cached("DELETE FROM extents WHERE extent_id = ?1")?.execute(params![id])?;
                    free_range(tx, b as u32, o as u64, l as u64)?;
                }
            }
            let mut stmt = tx.prepare_cached("UPDATE contents SET state = 'placed' WHERE content = ?1 AND state = 'persisting'")?;
            for c in contents {
                stmt.execute(params![&c.to_key()[..]])?;
            }
            Ok(())
        })
    }

    pub(super) fn unwritten_extents(&self) -> Result<Vec<ExtentRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {EXTENT_COLUMNS} FROM extents WHERE written = 0"
            ))?
            .query_map(params![], |r| extent_from_row(r, 0))?
            .collect()
        })
    }

    pub(super) fn segments(&self, id: &ContentId) -> Result<Vec<ContentSegment>> {
        self.read(|c| {
            let ext = EXTENT_COLUMNS.split(", ").map(|col| format!("e.{col}")).collect::<Vec<_>>().join(", ");
            c.prepare_cached(&format!(
                "SELECT s.content, s.seq, s.extent_id, s.offset_in_payload, s.length_bytes, {ext}
                 FROM segments s JOIN extents e ON e.extent_id = s.extent_id WHERE s.content = ?1 ORDER BY s.seq"
            ))?
            .query_map(params![&id.to_key()[..]], |r| {
                Ok(ContentSegment {
                    segment: SegmentRecord {
                        content: ContentId::from_key(&r.get::<_, Vec<u8>>(0)?).map_err(conversion)?,
                        seq: r.get::<_, i64>(1)? as u32,
                        extent_id: r.get(2)?,
                        offset_in_payload: r.get::<_, i64>(3)? as u64,
                        length_bytes: r.get::<_, i64>(4)? as u64,
                    },
                    extent: extent_from_row(r, 5)?,
                })
            })?
            .collect()
        })
    }

    pub(super) fn extents_of_grid_bucket(&self, grid_bucket: u32) -> Result<Vec<ExtentRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {EXTENT_COLUMNS} FROM extents WHERE grid_bucket = ?1 ORDER BY offset"
            ))?
            .query_map(params![grid_bucket], |r| extent_from_row(r, 0))?
            .collect()
        })
    }

    pub(super) fn grid_usage(&self) -> Result<Vec<GridUsage>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT a.grid_bucket, a.append_offset,
                        (SELECT COALESCE(SUM(length), 0) FROM grid_free_ranges f WHERE f.grid_bucket = a.grid_bucket)
                 FROM grid_allocations a ORDER BY a.grid_bucket",
            )?
            .query_map(params![], |r| {
                Ok(GridUsage {
                    grid_bucket: r.get::<_, i64>(0)? as u32,
                    append_offset: r.get::<_, i64>(1)? as u64,
                    free_bytes: r.get::<_, i64>(2)? as u64,
                })
            })?
            .collect()
        })
    }

    pub(super) fn free_ranges(&self, grid_bucket: u32) -> Result<Vec<(u64, u64)>> {
        self.read(|c| {
            c.prepare_cached("SELECT offset, length FROM grid_free_ranges WHERE grid_bucket = ?1 ORDER BY offset")?
                .query_map(params![grid_bucket], |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)))?
                .collect()
        })
    }
}
