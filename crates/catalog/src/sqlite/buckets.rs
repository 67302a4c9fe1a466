//! Buckets and datasets: creating, reading, listing and deleting buckets, their settings, and the datasets objects
//! are grouped in. Invariants: a bucket is deleted only when it holds no object and no version (uploads in
//! progress, the mount's empty directories and its grants go with it); a dataset row exists for every dataset an
//! object or part names (`ensure_dataset`, in the writing transaction), and gets its grid bucket from its first
//! placed content.

use super::{
    rows::{archive_from_json, corrupt},
    SqlCatalog,
};
use crate::sql::{self, params, Connection, OptionalExtension, Transaction};
use crate::*;

impl SqlCatalog {
    pub(super) fn bucket_exists(tx: &Connection, name: &str) -> sql::Result<bool> {
        Ok(tx
            .prepare_cached("SELECT 1 FROM buckets WHERE name = ?1")?
            .query_row(params![name], |_| Ok(()))
            .optional()?
            .is_some())
    }

    pub(super) fn ensure_dataset(
        tx: &Transaction,
        id: &str,
        bucket: &str,
        now_ms: u64,
    ) -> sql::Result<()> {
        tx.prepare_cached("INSERT INTO datasets (id, bucket, created_ms, grid_bucket) VALUES (?1, ?2, ?3, NULL) ON CONFLICT (id) DO NOTHING")?
            .execute(params![id, bucket, now_ms as i64])?;
        Ok(())
    }

    pub(super) fn create_bucket(&self, name: &str, settings: &BucketSettings) -> Result<()> {
        let text = serde_json::to_string(settings).expect("settings serialize");
        self.write_with(|tx| {
            if Self::bucket_exists(tx, name).map_err(|e| self.db_error(e))? {
                return Err(CatalogError::BucketExists(name.to_string()));
            }
            tx.execute(
                "INSERT INTO buckets (name, created_ms, settings) VALUES (?1, ?2, ?3)",
                params![name, now_ms() as i64, text],
            )
            .map_err(|e| self.db_error(e))?;
            Ok(())
        })
    }

    pub(super) fn delete_bucket(&self, name: &str) -> Result<Vec<WorkItem>> {
        self.write_with(|tx| {
            let q = |sql: &str| -> Result<bool> {
                tx.prepare_cached(sql)
                    .and_then(|mut s| s.query_row(params![name], |_| Ok(())).optional())
                    .map(|r| r.is_some())
                    .map_err(|e| self.db_error(e))
            };
            if !q("SELECT 1 FROM buckets WHERE name = ?1")? {
                return Err(CatalogError::NoSuchBucket(name.to_string()));
            }
            if q("SELECT 1 FROM objects WHERE bucket = ?1 LIMIT 1")?
                || q("SELECT 1 FROM object_versions WHERE bucket = ?1 LIMIT 1")?
            {
                return Err(CatalogError::BucketNotEmpty(name.to_string()));
            }
            // Uploads in progress do not keep a bucket (S3 deletes them with it).
            let uploads: Vec<String> = tx
                .prepare_cached("SELECT upload_id FROM multipart_uploads WHERE bucket = ?1")
                .and_then(|mut s| s.query_map(params![name], |r| r.get(0))?.collect())
                .map_err(|e| self.db_error(e))?;
            let mut work = Vec::new();
            for upload_id in uploads {
                work.extend(
                    Self::remove_upload_on(tx, &upload_id)
                        .map_err(|e| self.db_error(e))?
                        .unwrap_or_default(),
                );
            }
            tx.execute("DELETE FROM buckets WHERE name = ?1", params![name])
                .map_err(|e| self.db_error(e))?;
            // Empty directories of the mount are not objects: they go with the bucket.
            tx.execute(
                "DELETE FROM fs_directories WHERE bucket = ?1",
                params![name],
            )
            .map_err(|e| self.db_error(e))?;
            // So are its grants and its owner: a bucket of the same name made later starts unshared.
            super::access::forget_bucket(tx, name).map_err(|e| self.db_error(e))?;
            Ok(work)
        })
    }

    pub(super) fn get_bucket(&self, name: &str) -> Result<Option<BucketRecord>> {
        let row = self.read(|c| {
            c.prepare_cached(
                "SELECT name, created_ms, settings, archive FROM buckets WHERE name = ?1",
            )?
            .query_row(params![name], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .optional()
        })?;
        row.map(|(name, created_ms, settings, archive)| {
            Ok(BucketRecord {
                name,
                created_ms: created_ms as u64,
                settings: serde_json::from_str(&settings)
                    .map_err(|e| corrupt(format!("bucket settings: {e}")))?,
                archive: archive_from_json(&archive)?,
            })
        })
        .transpose()
    }

    pub(super) fn set_bucket_settings(&self, name: &str, settings: &BucketSettings) -> Result<()> {
        let text = serde_json::to_string(settings).expect("settings serialize");
        self.write_with(|tx| {
            let changed = tx
                .execute(
                    "UPDATE buckets SET settings = ?2 WHERE name = ?1",
                    params![name, text],
                )
                .map_err(|e| self.db_error(e))?;
            if changed == 0 {
                return Err(CatalogError::NoSuchBucket(name.to_string()));
            }
            Ok(())
        })
    }

    pub(super) fn list_buckets(&self) -> Result<Vec<BucketRecord>> {
        let rows = self.read(|c| {
            c.prepare_cached(
                "SELECT name, created_ms, settings, archive FROM buckets ORDER BY name",
            )?
            .query_map(params![], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })?
            .collect::<sql::Result<Vec<_>>>()
        })?;
        rows.into_iter()
            .map(|(name, created_ms, settings, archive)| {
                Ok(BucketRecord {
                    name,
                    created_ms: created_ms as u64,
                    settings: serde_json::from_str(&settings)
                        .map_err(|e| corrupt(format!("bucket settings: {e}")))?,
                    archive: archive_from_json(&archive)?,
                })
            })
            .collect()
    }

    pub(super) fn datasets(&self) -> Result<Vec<DatasetRecord>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT id, bucket, created_ms, grid_bucket FROM datasets ORDER BY id",
            )?
            .query_map(params![], |r| {
                Ok(DatasetRecord {
                    id: r.get(0)?,
                    bucket: r.get(1)?,
                    created_ms: r.get::<_, i64>(2)? as u64,
                    grid_bucket: r.get::<_, Option<i64>>(3)?.map(|b| b as u32),
                })
            })?
            .collect()
        })
    }
}
