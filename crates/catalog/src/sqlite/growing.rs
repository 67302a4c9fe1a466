//! Growing objects (the recorder's scans): a part-list content that gains one sealed part per transaction while
//! its object stays visible, sized to the parts committed so far (docs/store.md "Growing objects").

use crate::sql::{self, params, OptionalExtension};

use super::{
    contents::add_reference,
    rows::{pairs_json, CONTENT_COLUMNS},
    SqlCatalog,
};
use crate::{CatalogError, ContentPart, GrowingAppend, ObjectRecord, Result};

/// MD5 of no bytes: the digest of a list of no parts.
const MD5_OF_NOTHING: [u8; 16] = [
    0xd4, 0x1d, 0x8c, 0xd9, 0x8f, 0x00, 0xb2, 0x04, 0xe9, 0x80, 0x09, 0x98, 0xec, 0xf8, 0x42, 0x7e,
];

impl SqlCatalog {
    pub(super) fn begin_growing(&self, object: &ObjectRecord, now_ms: u64) -> Result<bool> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            if !Self::bucket_exists(tx, &object.bucket).map_err(e)? {
                return Err(CatalogError::NoSuchBucket(object.bucket.clone()));
            }
            let run = || -> sql::Result<Result<bool>> {
                if Self::get_object_on(tx, &object.bucket, &object.key)?.is_some() {
                    return Ok(Ok(false));
                }
                let key = object.content.to_key();
                let taken = tx
                    .prepare_cached("SELECT 1 FROM contents WHERE content = ?1")?
                    .query_row(params![&key[..]], |_| Ok(()))
                    .optional()?
                    .is_some();
                if taken {
                    return Ok(Ok(false));
                }
                tx.prepare_cached(&format!(
                    "INSERT INTO contents ({CONTENT_COLUMNS}) VALUES
                     (?1, 0, 0, 'parts', ?5, ?2, 'cached', 0, ?3, NULL, NULL, ?4, ?4, ?4)"
                ))?
                .execute(params![
                    &key[..],
                    &MD5_OF_NOTHING[..],
                    object.dataset,
                    now_ms as i64,
                    Vec::<u8>::new()
                ])?;
                add_reference(tx, &key, 1, now_ms)?;
                let empty = ObjectRecord {
                    size_bytes: 0,
                    ..object.clone()
                };
                // Under the bucket's versioning and lifecycle rules like any new object (a scan's expiry).
                let archive = Self::bucket_archive_on(tx, &object.bucket)?.unwrap_or_default();
                if let Err(refused) = Self::store_version(tx, &archive, &empty, now_ms)? {
                    return Ok(Err(refused));
                }
                Self::ensure_dataset(tx, &object.dataset, &object.bucket, now_ms)?;
                Ok(Ok(true))
            };
            run().map_err(e)?
        })
    }

    pub(super) fn append_growing(
        &self,
        append: &GrowingAppend,
        now_ms: u64,
    ) -> Result<Option<ContentPart>> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let object = Self::get_object_on(tx, &append.bucket, &append.key).map_err(e)?;
            if object.is_none_or(|o| o.content != append.list) {
                return Ok(None);
            }
            let part: Option<(Option<Vec<u8>>, i64)> = tx
                .prepare_cached(
                    "SELECT content, size_bytes FROM multipart_parts WHERE upload_id = ?1 AND part_number = ?2",
                )
                .and_then(|mut s| {
                    s.query_row(params![append.upload_id, append.part_number], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()
                })
                .map_err(e)?;
            let Some((content, size)) = part else {
                return Err(CatalogError::NoSuchUpload(format!(
                    "{} (part {})",
                    append.upload_id, append.part_number
                )));
            };
            let content = content.ok_or_else(|| {
                CatalogError::Corrupt(format!(
                    "upload {} part {} has no content",
                    append.upload_id, append.part_number
                ))
            })?;
            let part_id = crate::ContentId::from_key(&content)?;
            let list = append.list.to_key();
            let run = || -> sql::Result<ContentPart> {
                let (count, end): (i64, i64) = tx
                    .prepare_cached(
                        "SELECT COUNT(*), COALESCE(SUM(logical_bytes), 0) FROM content_parts WHERE content = ?1",
                    )?
                    .query_row(params![&list[..]], |r| Ok((r.get(0)?, r.get(1)?)))?;
                let part = ContentPart {
                    seq: count as u32,
                    part: part_id,
                    logical_offset: end as u64,
                    logical_bytes: size as u64,
                };
                tx.prepare_cached(
                    "INSERT INTO content_parts (content, seq, part, logical_offset, logical_bytes)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![&list[..], count, &content[..], end, size])?;
                add_reference(tx, &content, 1, now_ms)?;
                let new_end = end + size;
                tx.prepare_cached(
                    "UPDATE contents SET logical_bytes = ?2, md5 = ?3 WHERE content = ?1",
                )?
                .execute(params![&list[..], new_end, &append.md5[..]])?;
                tx.prepare_cached(
                    "UPDATE objects SET size_bytes = ?3, etag = ?4, user_metadata = ?5, last_modified_ms = ?6
                     WHERE bucket = ?1 AND key = ?2",
                )?
                .execute(params![
                    append.bucket,
                    append.key.as_bytes(),
                    new_end,
                    append.etag,
                    pairs_json(&append.user_metadata),
                    now_ms as i64
                ])?;
                Ok(part)
            };
            run().map(Some).map_err(e)
        })
    }
}
