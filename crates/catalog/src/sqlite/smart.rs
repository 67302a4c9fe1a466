//! SMART readings of the grid's disks (`permafrost-admin` keeps them, docs/smart.md): one row per reading, the
//! reading itself as JSON. Invariant: at most the newest `keep` readings of each disk are kept (`smart_append`
//! prunes in its transaction).

use super::SqlCatalog;
use crate::sql::{self, params};
use crate::*;

/// Schema version 13, the same SQL on both back ends: SMART readings.
pub(crate) const SMART_READINGS_MIGRATION: &str = "CREATE TABLE smart_readings (
    disk BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    reading TEXT NOT NULL,
    PRIMARY KEY (disk, at_ms)
);";

fn record(r: &sql::Row<'_>) -> sql::Result<SmartRecord> {
    Ok(SmartRecord {
        disk: r.get::<_, i64>(0)? as u32,
        at_ms: r.get::<_, i64>(1)? as u64,
        reading: r.get(2)?,
    })
}

impl SqlCatalog {
    pub(super) fn smart_append(&self, s: &SmartRecord, keep: u64) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO smart_readings (disk, at_ms, reading) VALUES (?1, ?2, ?3)
                 ON CONFLICT (disk, at_ms) DO UPDATE SET reading = excluded.reading",
                params![i64::from(s.disk), s.at_ms as i64, s.reading.as_str()],
            )?;
            tx.execute(
                "DELETE FROM smart_readings WHERE disk = ?1 AND at_ms < (SELECT at_ms FROM smart_readings
                     WHERE disk = ?1 ORDER BY at_ms DESC LIMIT 1 OFFSET ?2)",
                params![
                    i64::from(s.disk),
                    keep.saturating_sub(1).min(i64::MAX as u64) as i64
                ],
            )?;
            Ok(())
        })
    }

    pub(super) fn smart_latest(&self) -> Result<Vec<SmartRecord>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT s.disk, s.at_ms, s.reading FROM smart_readings s
                 WHERE s.at_ms = (SELECT MAX(t.at_ms) FROM smart_readings t WHERE t.disk = s.disk)
                 ORDER BY s.disk",
            )?
            .query_map(params![], record)?
            .collect::<sql::Result<Vec<_>>>()
        })
    }

    pub(super) fn smart_history(&self, disk: u32, limit: usize) -> Result<Vec<SmartRecord>> {
        let mut rows = self.read(|c| {
            c.prepare_cached(
                "SELECT disk, at_ms, reading FROM smart_readings WHERE disk = ?1
                 ORDER BY at_ms DESC LIMIT ?2",
            )?
            .query_map(
                params![i64::from(disk), limit.min(i64::MAX as usize) as i64],
                record,
            )?
            .collect::<sql::Result<Vec<_>>>()
        })?;
        rows.reverse();
        Ok(rows)
    }
}
