//! Objects (the current version of each key): conditional PUT and copy, GET, DELETE and listings. The version
//! rules (what a write replaces, markers, Object Lock) are `archive`'s; this module adds the new content and its
//! reference in the same transaction. Invariants: a version whose lifecycle expiry has passed is gone for readers
//! at once; a conditional write checks its condition in the transaction that writes.

use super::{
    contents::{add_reference, insert_content},
    rows::{
        attributes_json, content_from_row, object_from_row, pairs_json, CONTENT_COLUMNS,
        OBJECT_COLUMNS,
    },
    SqlCatalog,
};
use crate::list::list_with;
use crate::sql::{self, params, Connection, OptionalExtension, Transaction};
use crate::*;

impl SqlCatalog {
    pub(super) fn get_object_on(
        conn: &Connection,
        bucket: &str,
        key: &str,
    ) -> sql::Result<Option<ObjectRecord>> {
        conn.prepare_cached(&format!(
            "SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ?1 AND key = ?2"
        ))?
        .query_row(params![bucket, key.as_bytes()], object_from_row)
        .optional()
    }

    /// Whether a conditional write's `condition` holds for the current version of `object`'s key inside `tx`
    /// (an expired version is none). The check and the write share the transaction: SQLite has one writer,
    /// PostgreSQL's SERIALIZABLE isolation fails and retries the later of two transactions that both read the
    /// key's absence and both write it.
    pub(super) fn check_condition(
        tx: &Transaction,
        object: &ObjectRecord,
        condition: &WriteCondition,
        now_ms: u64,
    ) -> sql::Result<Result<()>> {
        if *condition == WriteCondition::Always {
            return Ok(Ok(()));
        }
        let current = Self::get_object_on(tx, &object.bucket, &object.key)?
            .filter(|o| o.expires_ms.is_none_or(|at| at > now_ms));
        Ok(condition.check(
            &object.bucket,
            &object.key,
            current.as_ref().map(|o| o.etag.as_str()),
        ))
    }

    /// Insert `o` as the current version of its key, with version order `seq`.
    pub(super) fn insert_object(tx: &Transaction, o: &ObjectRecord, seq: i64) -> sql::Result<()> {
        tx.prepare_cached(&format!(
            "INSERT INTO objects ({OBJECT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
        ))?
        .execute(params![
            o.bucket,
            o.key.as_bytes(),
            &o.content.to_key()[..],
            o.size_bytes as i64,
            o.etag,
            o.last_modified_ms as i64,
            o.content_type,
            pairs_json(&o.user_metadata),
            pairs_json(&o.checksums),
            o.dataset,
            o.version_id,
            seq,
            attributes_json(&o.attributes),
            o.expires_ms.map(|v| v as i64),
        ])?;
        Ok(())
    }

    pub(super) fn put_object_if(
        &self,
        object: &ObjectRecord,
        content: &NewContent,
        now_ms: u64,
        condition: &WriteCondition,
    ) -> Result<PutOutcome> {
        assert_eq!(
            object.content, content.id,
            "put_object: the object must name the new content"
        );
        self.write_with(|tx| {
            let run = || -> sql::Result<Result<PutOutcome>> {
                let Some(archive) = Self::bucket_archive_on(tx, &object.bucket)? else {
                    return Ok(Err(CatalogError::NoSuchBucket(object.bucket.clone())));
                };
                if let Err(e) = Self::check_condition(tx, object, condition, now_ms)? {
                    return Ok(Err(e));
                }
                let key = content.id.to_key();
                let mut work = Vec::new();
                let exists = insert_content(tx, content, &object.dataset, now_ms, &mut work)?;
                add_reference(tx, &key, 1, now_ms)?;
                if let Err(e) = Self::store_version(tx, &archive, object, now_ms)? {
                    return Ok(Err(e));
                }
                Self::ensure_dataset(tx, &object.dataset, &object.bucket, now_ms)?;
                Ok(Ok(PutOutcome {
                    deduplicated: exists,
                    work,
                }))
            };
            run().map_err(|e| self.db_error(e))?
        })
    }

    pub(super) fn get_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectRecord, ContentRecord)>> {
        let now = now_ms();
        self.read(|c| {
            let Some(object) = Self::get_object_on(c, bucket, key)? else {
                return Ok(None);
            };
            if object.expires_ms.is_some_and(|at| at <= now) {
                return Ok(None);
            }
            let content = c
                .prepare_cached(&format!(
                    "SELECT {CONTENT_COLUMNS} FROM contents WHERE content = ?1"
                ))?
                .query_row(params![&object.content.to_key()[..]], |r| {
                    content_from_row(r, 0)
                })?;
            Ok(Some((object, content)))
        })
    }

    pub(super) fn delete_object(&self, bucket: &str, key: &str, now_ms: u64) -> Result<bool> {
        self.write_with(|tx| {
            let had = Self::get_object_on(tx, bucket, key)
                .map_err(|e| self.db_error(e))?
                .is_some();
            self.delete_version_on(tx, bucket, key, None, false, now_ms)?;
            Ok(had)
        })
    }

    pub(super) fn copy_object_if(
        &self,
        src_bucket: &str,
        src_key: &str,
        src_version: Option<&str>,
        object: &ObjectRecord,
        now_ms: u64,
        condition: &WriteCondition,
    ) -> Result<ObjectRecord> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            if !Self::bucket_exists(tx, src_bucket).map_err(e)? {
                return Err(CatalogError::NoSuchBucket(src_bucket.to_string()));
            }
            let Some(archive) = Self::bucket_archive_on(tx, &object.bucket).map_err(e)? else {
                return Err(CatalogError::NoSuchBucket(object.bucket.clone()));
            };
            let source = match src_version {
                None => Self::get_object_on(tx, src_bucket, src_key)
                    .map_err(e)?
                    .filter(|o| o.expires_ms.is_none_or(|at| at > now_ms)),
                Some(v) => match Self::version_on(tx, src_bucket, src_key, v).map_err(e)? {
                    Some(found) => found.object,
                    None => {
                        return Err(CatalogError::NoSuchVersion {
                            bucket: src_bucket.to_string(),
                            key: src_key.to_string(),
                            version_id: v.to_string(),
                        })
                    }
                },
            };
            let Some(source) = source else {
                return Err(CatalogError::NoSuchKey {
                    bucket: src_bucket.to_string(),
                    key: src_key.to_string(),
                });
            };
            Self::check_condition(tx, object, condition, now_ms).map_err(e)??;
            let mut copy = ObjectRecord {
                content: source.content,
                size_bytes: source.size_bytes,
                etag: source.etag.clone(),
                ..object.clone()
            };
            // Reference first: copying onto itself must not drop the content to zero on the way.
            add_reference(tx, &copy.content.to_key(), 1, now_ms).map_err(e)?;
            copy = Self::store_version(tx, &archive, &copy, now_ms).map_err(e)??;
            Self::ensure_dataset(tx, &copy.dataset, &copy.bucket, now_ms).map_err(e)?;
            Ok(copy)
        })
    }

    pub(super) fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage> {
        let page = self.read(|c| {
            if !Self::bucket_exists(c, bucket)? {
                return Ok(None);
            }
            // Versions whose lifecycle expiry passed are gone for readers at once (the lifecycle thread removes
            // them soon after).
            let now = now_ms() as i64;
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ?1 AND key >= ?2
                 AND (expires_ms IS NULL OR expires_ms > ?4) ORDER BY key LIMIT ?3"
            ))?;
            let page = list_with(query, |from: &[u8], limit: usize| {
                stmt.query_map(params![bucket, from, limit as i64, now], object_from_row)?
                    .collect::<sql::Result<Vec<_>>>()
            })?;
            Ok(Some(page))
        })?;
        page.ok_or_else(|| CatalogError::NoSuchBucket(bucket.to_string()))
    }

    pub(super) fn objects_after(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>> {
        let (bucket, key) = after.unwrap_or(("", ""));
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {OBJECT_COLUMNS} FROM objects WHERE (bucket, key) > (?1, ?2) ORDER BY bucket, key LIMIT ?3"
            ))?
            .query_map(params![bucket, key.as_bytes(), limit as i64], object_from_row)?
            .collect()
        })
    }
}
