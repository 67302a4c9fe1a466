//! Completed multipart uploads, remembered so that a retried CompleteMultipartUpload gets the first answer
//! again (S3 answers a repeated completion `200` with the same result), and the checksums each part of a
//! completed upload arrived with (GetObjectAttributes lists them per part).
//!
//! `completed_uploads` has one row per completion: the upload id, the version it created (bucket, key, version
//! id, part-list content) and the part numbers the client listed. Rows are kept
//! [`COMPLETED_UPLOADS_KEPT_MS`] and pruned by later completions (at most [`PRUNE_ROWS_MAX`] per completion, so
//! a completion's cost stays bounded); a row whose version is gone (deleted, replaced, expired) answers nothing
//! (the reader checks the version). `content_parts.checksums` holds each part's checksums (JSON pairs, `NULL` for
//! part lists made before schema version 12 and for growing objects' pieces).

use crate::sql::{self, params, OptionalExtension, Transaction};

use super::{
    rows::{conversion, json_pairs, key_string},
    SqlCatalog,
};
use crate::*;

/// Rows of completions older than [`COMPLETED_UPLOADS_KEPT_MS`] one completion removes at most.
const PRUNE_ROWS_MAX: i64 = 64;

/// Schema version 12 (SQLite): completed uploads, and the checksums of each part of a part list.
pub(crate) const COMPLETED_UPLOADS_MIGRATION: &str = "CREATE TABLE completed_uploads (
        upload_id TEXT PRIMARY KEY,
        bucket TEXT NOT NULL,
        key BLOB NOT NULL,
        version_id TEXT NOT NULL,
        content BLOB NOT NULL,
        part_numbers TEXT NOT NULL,
        completed_ms BIGINT NOT NULL
    );
    CREATE INDEX completed_uploads_by_time ON completed_uploads(completed_ms);
    ALTER TABLE content_parts ADD COLUMN checksums TEXT;";

/// Schema version 12 on PostgreSQL: as [`COMPLETED_UPLOADS_MIGRATION`].
pub(crate) const PG_COMPLETED_UPLOADS_MIGRATION: &str = r#"CREATE TABLE completed_uploads (
        upload_id TEXT COLLATE "C" PRIMARY KEY,
        bucket TEXT COLLATE "C" NOT NULL,
        key BYTEA NOT NULL,
        version_id TEXT COLLATE "C" NOT NULL,
        content BYTEA NOT NULL,
        part_numbers TEXT NOT NULL,
        completed_ms BIGINT NOT NULL
    );
    CREATE INDEX completed_uploads_by_time ON completed_uploads(completed_ms);
    ALTER TABLE content_parts ADD COLUMN checksums TEXT;"#;

impl SqlCatalog {
    /// Inside the completing transaction, before the upload's parts are removed: give the part list's
    /// `content_parts` rows the checksums their parts arrived with (rows that have them keep them: a list made
    /// again by another upload is the same bytes).
    pub(super) fn keep_part_checksums(
        tx: &Transaction,
        upload_id: &str,
        list: &NewPartList,
    ) -> sql::Result<()> {
        let key = list.id.to_key();
        for (number, part) in &list.parts {
            let checksums: Option<String> = tx
                .prepare_cached(
                    "SELECT checksums FROM multipart_parts WHERE upload_id = ?1 AND part_number = ?2",
                )?
                .query_row(params![upload_id, number], |r| r.get(0))
                .optional()?;
            let Some(checksums) = checksums.filter(|c| c != "[]") else {
                continue;
            };
            tx.prepare_cached(
                "UPDATE content_parts SET checksums = ?3 WHERE content = ?1 AND seq = ?2 AND checksums IS NULL",
            )?
            .execute(params![&key[..], part.seq, checksums])?;
        }
        Ok(())
    }

    /// Inside the completing transaction, once the version is stored: remember the completion (and prune
    /// completions older than [`COMPLETED_UPLOADS_KEPT_MS`], a bounded number at a time).
    pub(super) fn remember_completion(
        tx: &Transaction,
        upload_id: &str,
        stored: &ObjectRecord,
        list: &NewPartList,
        now_ms: u64,
    ) -> sql::Result<()> {
        let numbers: Vec<u32> = list.parts.iter().map(|(n, _)| *n).collect();
        let numbers = serde_json::to_string(&numbers).expect("numbers serialize");
        let cutoff = now_ms.saturating_sub(COMPLETED_UPLOADS_KEPT_MS) as i64;
        tx.prepare_cached(
            "DELETE FROM completed_uploads WHERE upload_id IN
             (SELECT upload_id FROM completed_uploads WHERE completed_ms < ?1 ORDER BY completed_ms LIMIT ?2)",
        )?
        .execute(params![cutoff, PRUNE_ROWS_MAX])?;
        tx.prepare_cached(
            "INSERT INTO completed_uploads (upload_id, bucket, key, version_id, content, part_numbers, completed_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            upload_id,
            stored.bucket,
            stored.key.as_bytes(),
            stored.version_id,
            &list.id.to_key()[..],
            numbers,
            now_ms as i64,
        ])?;
        Ok(())
    }

    pub(super) fn completed_upload(&self, upload_id: &str) -> Result<Option<CompletedUpload>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT upload_id, bucket, key, version_id, content, part_numbers, completed_ms
                 FROM completed_uploads WHERE upload_id = ?1",
            )?
            .query_row(params![upload_id], |r| {
                let numbers: String = r.get(5)?;
                Ok(CompletedUpload {
                    upload_id: r.get(0)?,
                    bucket: r.get(1)?,
                    key: key_string(r.get(2)?)?,
                    version_id: r.get(3)?,
                    content: ContentId::from_key(&r.get::<_, Vec<u8>>(4)?).map_err(conversion)?,
                    part_numbers: serde_json::from_str(&numbers).map_err(|e| {
                        conversion(CatalogError::Corrupt(format!(
                            "completed upload {upload_id}: part numbers {numbers:?}: {e}"
                        )))
                    })?,
                    completed_ms: r.get::<_, i64>(6)? as u64,
                })
            })
            .optional()
        })
    }

    pub(super) fn part_checksums(&self, list: &ContentId) -> Result<Vec<Vec<(String, String)>>> {
        self.read(|c| {
            c.prepare_cached("SELECT checksums FROM content_parts WHERE content = ?1 ORDER BY seq")?
                .query_map(params![&list.to_key()[..]], |r| {
                    match r.get::<_, Option<String>>(0)? {
                        Some(text) => json_pairs(&text),
                        None => Ok(Vec::new()),
                    }
                })?
                .collect()
        })
    }
}
