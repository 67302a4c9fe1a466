//! Multipart uploads: creating and listing them, their parts, aborting and completing. A part is a content with a
//! reference from its `multipart_parts` row; completion turns the listed parts into one part-list content (its
//! `content_parts` rows take a reference on each part) and the upload's rows go. Invariants: a part's content is
//! referenced before the part it replaces drops its reference (the same bytes again never reach zero); completion
//! checks that each listed part is still the content the client named.

use super::{
    contents::{add_reference, insert_content},
    gc::add_work,
    rows::{pairs_json, part_from_row, upload_from_row, CONTENT_COLUMNS, PART_COLUMNS},
    SqlCatalog,
};
use crate::list::prefix_successor;
use crate::sql::{self, params, OptionalExtension, Transaction};
use crate::*;

/// Remove the parts of upload `upload_id` (all, or only `part_number`): their contents lose a reference;
/// schema-2 parts' files become work items.
pub(super) fn remove_parts(
    tx: &Transaction,
    upload_id: &str,
    part_number: Option<u32>,
    now_ms: u64,
) -> sql::Result<Vec<WorkItem>> {
    let parts: Vec<PartRecord> = tx
        .prepare_cached(&format!(
            "SELECT {PART_COLUMNS} FROM multipart_parts
             WHERE upload_id = ?1 AND (CAST(?2 AS BIGINT) IS NULL OR part_number = ?2)"
        ))?
        .query_map(params![upload_id, part_number], part_from_row)?
        .collect::<sql::Result<_>>()?;
    tx.prepare_cached(
        "DELETE FROM multipart_parts WHERE upload_id = ?1 AND (CAST(?2 AS BIGINT) IS NULL OR part_number = ?2)",
    )?
    .execute(params![upload_id, part_number])?;
    let mut work = Vec::new();
    for part in parts {
        match part.content {
            Some(id) => add_reference(tx, &id.to_key(), -1, now_ms)?,
            None => work.push(add_work(
                tx,
                WorkKind::DeleteCacheFile {
                    path: part.cache_path,
                },
                now_ms,
            )?),
        }
    }
    Ok(work)
}

impl SqlCatalog {
    /// Remove an upload and its parts inside `tx`; work items delete the part files. `None` if no such upload.
    pub(super) fn remove_upload_on(
        tx: &Transaction,
        upload_id: &str,
    ) -> sql::Result<Option<Vec<WorkItem>>> {
        let removed = tx.execute(
            "DELETE FROM multipart_uploads WHERE upload_id = ?1",
            params![upload_id],
        )?;
        if removed == 0 {
            return Ok(None);
        }
        remove_parts(tx, upload_id, None, now_ms()).map(Some)
    }

    pub(super) fn create_upload(&self, upload: &UploadRecord) -> Result<()> {
        self.write_with(|tx| {
            if !Self::bucket_exists(tx, &upload.bucket).map_err(|e| self.db_error(e))? {
                return Err(CatalogError::NoSuchBucket(upload.bucket.clone()));
            }
            tx.execute(
                "INSERT INTO multipart_uploads (upload_id, bucket, key, created_ms, options) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![upload.upload_id, upload.bucket, upload.key.as_bytes(), upload.created_ms as i64, upload.options],
            )
            .map_err(|e| self.db_error(e))?;
            Ok(())
        })
    }

    pub(super) fn get_upload(&self, upload_id: &str) -> Result<Option<UploadRecord>> {
        self.read(|c| {
            c.prepare_cached("SELECT upload_id, bucket, key, created_ms, options FROM multipart_uploads WHERE upload_id = ?1")?
                .query_row(params![upload_id], upload_from_row)
                .optional()
        })
    }

    pub(super) fn list_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<UploadRecord>> {
        let upper = prefix_successor(prefix.as_bytes());
        self.read(|c| {
            c.prepare_cached(
                "SELECT upload_id, bucket, key, created_ms, options FROM multipart_uploads
                 WHERE bucket = ?1 AND key >= ?2 AND (key < ?3 OR ?3 IS NULL) ORDER BY key, created_ms LIMIT ?4",
            )?
            .query_map(params![bucket, prefix.as_bytes(), upper, limit as i64], upload_from_row)?
            .collect()
        })
    }

    pub(super) fn put_part(
        &self,
        part: &PartRecord,
        content: &NewContent,
        dataset: &str,
    ) -> Result<PutOutcome> {
        assert_eq!(
            part.content,
            Some(content.id),
            "put_part: the part must name the new content"
        );
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let upload: Option<String> = tx
                .prepare_cached("SELECT bucket FROM multipart_uploads WHERE upload_id = ?1")
                .and_then(|mut s| s.query_row(params![part.upload_id], |r| r.get(0)).optional())
                .map_err(e)?;
            let Some(bucket) = upload else {
                return Err(CatalogError::NoSuchUpload(part.upload_id.clone()));
            };
            let run = || -> sql::Result<PutOutcome> {
                let now = part.created_ms;
                let mut work = Vec::new();
                let exists = insert_content(tx, content, dataset, now, &mut work)?;
                // Reference first: a part uploaded again with the same bytes must not drop its content to zero.
                add_reference(tx, &content.id.to_key(), 1, now)?;
                work.extend(remove_parts(tx, &part.upload_id, Some(part.part_number), now)?);
                tx.prepare_cached(&format!(
                    "INSERT INTO multipart_parts ({PART_COLUMNS}) VALUES (?1, ?2, ?3, ?4, '', ?5, ?6, ?7)"
                ))?
                .execute(params![
                    part.upload_id,
                    part.part_number,
                    part.size_bytes as i64,
                    &part.md5[..],
                    part.created_ms as i64,
                    &content.id.to_key()[..],
                    pairs_json(&part.checksums),
                ])?;
                Self::ensure_dataset(tx, dataset, &bucket, now)?;
                Ok(PutOutcome {
                    deduplicated: exists,
                    work,
                })
            };
            run().map_err(e)
        })
    }

    pub(super) fn list_parts(&self, upload_id: &str) -> Result<Vec<PartRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {PART_COLUMNS} FROM multipart_parts WHERE upload_id = ?1 ORDER BY part_number"
            ))?
            .query_map(params![upload_id], part_from_row)?
            .collect()
        })
    }

    pub(super) fn remove_upload(&self, upload_id: &str) -> Result<Vec<WorkItem>> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let removed = tx
                .execute(
                    "DELETE FROM multipart_uploads WHERE upload_id = ?1",
                    params![upload_id],
                )
                .map_err(e)?;
            if removed == 0 {
                return Err(CatalogError::NoSuchUpload(upload_id.to_string()));
            }
            remove_parts(tx, upload_id, None, now_ms()).map_err(e)
        })
    }

    pub(super) fn complete_upload_if(
        &self,
        upload_id: &str,
        object: &ObjectRecord,
        list: &NewPartList,
        now_ms: u64,
        condition: &WriteCondition,
    ) -> Result<PutOutcome> {
        assert_eq!(
            object.content, list.id,
            "complete_upload: the object must name the part list"
        );
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let exists = tx
                .prepare_cached("SELECT 1 FROM multipart_uploads WHERE upload_id = ?1")
                .and_then(|mut s| s.query_row(params![upload_id], |_| Ok(())).optional())
                .map_err(e)?
                .is_some();
            if !exists {
                return Err(CatalogError::NoSuchUpload(upload_id.to_string()));
            }
            if !Self::bucket_exists(tx, &object.bucket).map_err(e)? {
                return Err(CatalogError::NoSuchBucket(object.bucket.clone()));
            }
            Self::check_condition(tx, object, condition, now_ms).map_err(e)??;
            for (number, part) in &list.parts {
                let named: Option<Option<Vec<u8>>> = tx
                    .prepare_cached(
                        "SELECT content FROM multipart_parts WHERE upload_id = ?1 AND part_number = ?2",
                    )
                    .and_then(|mut s| s.query_row(params![upload_id, number], |r| r.get(0)).optional())
                    .map_err(e)?;
                if named.flatten().as_deref() != Some(&part.part.to_key()[..]) {
                    return Err(CatalogError::Corrupt(format!(
                        "upload {upload_id}: part {number} is not the content {} any more",
                        part.part
                    )));
                }
            }
            let Some(archive) = Self::bucket_archive_on(tx, &object.bucket).map_err(e)? else {
                return Err(CatalogError::NoSuchBucket(object.bucket.clone()));
            };
            let run = || -> sql::Result<Result<PutOutcome>> {
                let key = list.id.to_key();
                let exists = tx
                    .prepare_cached("SELECT 1 FROM contents WHERE content = ?1")?
                    .query_row(params![&key[..]], |_| Ok(()))
                    .optional()?
                    .is_some();
                if !exists {
                    tx.prepare_cached(&format!(
                        "INSERT INTO contents ({CONTENT_COLUMNS}) VALUES
                         (?1, ?2, 0, 'parts', ?6, ?3, 'cached', 0, ?4, NULL, NULL, ?5, ?5, ?5)"
                    ))?
                    .execute(params![
                        &key[..],
                        list.logical_bytes as i64,
                        &list.md5[..],
                        object.dataset,
                        now_ms as i64,
                        Vec::<u8>::new(),
                    ])?;
                    let mut insert = tx.prepare_cached(
                        "INSERT INTO content_parts (content, seq, part, logical_offset, logical_bytes)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )?;
                    for (_, part) in &list.parts {
                        insert.execute(params![
                            &key[..],
                            part.seq,
                            &part.part.to_key()[..],
                            part.logical_offset as i64,
                            part.logical_bytes as i64,
                        ])?;
                        add_reference(tx, &part.part.to_key(), 1, now_ms)?;
                    }
                }
                add_reference(tx, &key, 1, now_ms)?;
                Self::keep_part_checksums(tx, upload_id, list)?;
                let mut work = remove_parts(tx, upload_id, None, now_ms)?;
                tx.prepare_cached("DELETE FROM multipart_uploads WHERE upload_id = ?1")?
                    .execute(params![upload_id])?;
                // The version it replaces loses its reference after the new one is taken (same list again).
                let stored = match Self::store_version(tx, &archive, object, now_ms)? {
                    Ok(stored) => stored,
                    Err(refused) => return Ok(Err(refused)),
                };
                Self::remember_completion(tx, upload_id, &stored, list, now_ms)?;
                Self::ensure_dataset(tx, &object.dataset, &object.bucket, now_ms)?;
                work.shrink_to_fit();
                Ok(Ok(PutOutcome {
                    deduplicated: exists,
                    work,
                }))
            };
            run().map_err(e)?
        })
    }

    pub(super) fn all_uploads(&self) -> Result<Vec<UploadRecord>> {
        self.read(|c| {
            c.prepare_cached("SELECT upload_id, bucket, key, created_ms, options FROM multipart_uploads ORDER BY created_ms")?
                .query_map(params![], upload_from_row)?
                .collect()
        })
    }
}
