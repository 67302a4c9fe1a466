//! SQLite side of versions, tags, Object Lock, lifecycle and restores (`crate::archive` holds the rules).
//!
//! Layout: `objects` holds the current version of each key (so every reader of "the object" is unchanged);
//! `object_versions` holds noncurrent versions and delete markers. The versions of a key are ordered by
//! `version_seq` (from the `counters` row `version_seq`); the `objects` row of a key, when there is one, has its
//! highest `version_seq`. A key whose newest version is a delete marker has no `objects` row.

use crate::sql::{self, params, Connection, OptionalExtension, Row, Transaction};

use super::{
    contents::add_reference,
    rows::{
        archive_from_json, attributes_from_json, attributes_json, content_from_row, conversion,
        corrupt, json_pairs, key_string, object_from_row, CONTENT_COLUMNS, OBJECT_COLUMNS,
    },
    SqlCatalog,
};
use crate::list::prefix_successor;
use crate::*;

/// Columns of `object_versions`: the object columns, then `delete_marker`, `noncurrent_since_ms`.
const VERSION_COLUMNS_EXTRA: &str = "delete_marker, noncurrent_since_ms";

/// A version row of either table, with what the listing needs.
struct Row2 {
    record: VersionRecord,
    seq: i64,
    /// `noncurrent_since_ms` (0 for current rows).
    since_ms: u64,
}

/// Read the object columns (first 14) of a row whose `content` may be NULL (a delete marker), plus
/// `delete_marker` at 14 and `noncurrent_since_ms` at 15.
fn version_from_row(row: &Row) -> sql::Result<Row2> {
    let bucket: String = row.get(0)?;
    let key = key_string(row.get(1)?)?;
    let content: Option<Vec<u8>> = row.get(2)?;
    let last_modified_ms = row.get::<_, i64>(5)? as u64;
    let version_id: String = row.get(10)?;
    let seq: i64 = row.get(11)?;
    let marker: bool = row.get::<_, i64>(14)? != 0;
    let object = match (marker, content) {
        (false, Some(content)) => Some(ObjectRecord {
            bucket: bucket.clone(),
            key: key.clone(),
            content: ContentId::from_key(&content).map_err(conversion)?,
            size_bytes: row.get::<_, i64>(3)? as u64,
            etag: row.get(4)?,
            last_modified_ms,
            content_type: row.get(6)?,
            user_metadata: json_pairs(&row.get::<_, String>(7)?)?,
            checksums: json_pairs(&row.get::<_, String>(8)?)?,
            dataset: row.get(9)?,
            version_id: version_id.clone(),
            attributes: attributes_from_json(&row.get::<_, String>(12)?)?,
            expires_ms: row.get::<_, Option<i64>>(13)?.map(|v| v as u64),
        }),
        _ => None,
    };
    Ok(Row2 {
        record: VersionRecord {
            bucket,
            key,
            version_id,
            last_modified_ms,
            is_latest: false,
            object,
        },
        seq,
        since_ms: row.get::<_, i64>(15)? as u64,
    })
}

/// A version id: the write time and the version's sequence number, hex (unique, and ordered like the versions).
fn new_version_id(now_ms: u64, seq: i64) -> String {
    format!("{now_ms:012x}{seq:012x}")
}

fn locked(v: LockViolation, bucket: &str, key: &str, version_id: &str) -> CatalogError {
    CatalogError::Locked(format!("{bucket}/{key} version {version_id}: {v}"))
}

fn restore_from_row(r: &Row) -> sql::Result<RestoreRecord> {
    Ok(RestoreRecord {
        bucket: r.get(0)?,
        key: key_string(r.get(1)?)?,
        version_id: r.get(2)?,
        content: ContentId::from_key(&r.get::<_, Vec<u8>>(3)?).map_err(conversion)?,
        requested_ms: r.get::<_, i64>(4)? as u64,
        duration_ms: r.get::<_, i64>(5)? as u64,
        done_ms: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
        expiry_ms: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
        tier: r
            .get::<_, String>(8)?
            .parse()
            .map_err(|e: String| conversion(corrupt(format!("restores.tier: {e}"))))?,
    })
}

const RESTORE_COLUMNS: &str =
    "bucket, key, version_id, content, requested_ms, duration_ms, done_ms, expiry_ms, tier";

impl SqlCatalog {
    /// The archive configuration of a bucket, `None` if there is no such bucket.
    pub(super) fn bucket_archive_on(
        conn: &Connection,
        bucket: &str,
    ) -> sql::Result<Option<BucketArchive>> {
        let text: Option<String> = conn
            .prepare_cached("SELECT archive FROM buckets WHERE name = ?1")?
            .query_row(params![bucket], |r| r.get(0))
            .optional()?;
        text.map(|t| archive_from_json(&t).map_err(conversion))
            .transpose()
    }

    fn next_seq(tx: &Transaction) -> sql::Result<i64> {
        tx.prepare_cached("UPDATE counters SET value = value + 1 WHERE name = 'version_seq'")?
            .execute(params![])?;
        tx.prepare_cached("SELECT value FROM counters WHERE name = 'version_seq'")?
            .query_row(params![], |r| r.get(0))
    }

    /// A version of a key by id, from either table (`is_latest` set).
    pub(super) fn version_on(
        conn: &Connection,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> sql::Result<Option<VersionRecord>> {
        if let Some(current) = Self::get_object_on(conn, bucket, key)? {
            if current.version_id == version_id {
                return Ok(Some(VersionRecord {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    version_id: current.version_id.clone(),
                    last_modified_ms: current.last_modified_ms,
                    is_latest: true,
                    object: Some(current),
                }));
            }
        }
        let Some(found) = conn
            .prepare_cached(&format!(
                "SELECT {OBJECT_COLUMNS}, {VERSION_COLUMNS_EXTRA} FROM object_versions
                 WHERE bucket = ?1 AND key = ?2 AND version_id = ?3"
            ))?
            .query_row(
                params![bucket, key.as_bytes(), version_id],
                version_from_row,
            )
            .optional()?
        else {
            return Ok(None);
        };
        let mut record = found.record;
        record.is_latest = Self::newest_seq(conn, bucket, key)? == Some(found.seq);
        Ok(Some(record))
    }

    /// The highest `version_seq` of a key over both tables.
    fn newest_seq(conn: &Connection, bucket: &str, key: &str) -> sql::Result<Option<i64>> {
        conn.prepare_cached(
            "SELECT MAX(s) FROM (SELECT version_seq AS s FROM objects WHERE bucket = ?1 AND key = ?2
             UNION ALL SELECT version_seq FROM object_versions WHERE bucket = ?1 AND key = ?2) AS seqs",
        )?
        .query_row(params![bucket, key.as_bytes()], |r| r.get(0))
    }

    /// Move the current version of a key to `object_versions` (noncurrent from `now_ms`).
    fn demote(tx: &Transaction, bucket: &str, key: &str, now_ms: u64) -> sql::Result<()> {
        tx.prepare_cached(&format!(
            "INSERT INTO object_versions ({OBJECT_COLUMNS}, {VERSION_COLUMNS_EXTRA})
             SELECT {OBJECT_COLUMNS}, 0, ?3 FROM objects WHERE bucket = ?1 AND key = ?2"
        ))?
        .execute(params![bucket, key.as_bytes(), now_ms as i64])?;
        tx.prepare_cached("DELETE FROM objects WHERE bucket = ?1 AND key = ?2")?
            .execute(params![bucket, key.as_bytes()])?;
        Ok(())
    }

    fn insert_marker(
        tx: &Transaction,
        bucket: &str,
        key: &str,
        version_id: &str,
        seq: i64,
        now_ms: u64,
    ) -> sql::Result<()> {
        tx.prepare_cached(&format!(
            "INSERT INTO object_versions ({OBJECT_COLUMNS}, {VERSION_COLUMNS_EXTRA})
             VALUES (?1, ?2, NULL, 0, '', ?3, NULL, '[]', '[]', '', ?4, ?5, '{{}}', NULL, 1, ?3)"
        ))?
        .execute(params![
            bucket,
            key.as_bytes(),
            now_ms as i64,
            version_id,
            seq
        ])?;
        Ok(())
    }

    /// Rows of the null version of a key in `object_versions` (object or marker), with their lock.
    fn noncurrent_null(
        tx: &Transaction,
        bucket: &str,
        key: &str,
    ) -> sql::Result<Vec<VersionRecord>> {
        tx.prepare_cached(&format!(
            "SELECT {OBJECT_COLUMNS}, {VERSION_COLUMNS_EXTRA} FROM object_versions
             WHERE bucket = ?1 AND key = ?2 AND version_id = 'null'"
        ))?
        .query_map(params![bucket, key.as_bytes()], |r| {
            version_from_row(r).map(|v| v.record)
        })?
        .collect()
    }

    /// Remove a noncurrent row (object or marker) by version id; an object's content loses a reference.
    fn remove_noncurrent(
        tx: &Transaction,
        version: &VersionRecord,
        now_ms: u64,
    ) -> sql::Result<()> {
        tx.prepare_cached(
            "DELETE FROM object_versions WHERE bucket = ?1 AND key = ?2 AND version_id = ?3",
        )?
        .execute(params![
            version.bucket,
            version.key.as_bytes(),
            version.version_id
        ])?;
        if let Some(o) = &version.object {
            add_reference(tx, &o.content.to_key(), -1, now_ms)?;
        }
        Ok(())
    }

    fn remove_current(tx: &Transaction, current: &ObjectRecord, now_ms: u64) -> sql::Result<()> {
        tx.prepare_cached("DELETE FROM objects WHERE bucket = ?1 AND key = ?2")?
            .execute(params![current.bucket, current.key.as_bytes()])?;
        add_reference(tx, &current.content.to_key(), -1, now_ms)
    }

    /// If a key has no current row and its newest version is an object, make that the current row.
    fn promote_newest(tx: &Transaction, bucket: &str, key: &str) -> sql::Result<()> {
        if Self::get_object_on(tx, bucket, key)?.is_some() {
            return Ok(());
        }
        let newest = tx
            .prepare_cached(
                "SELECT version_seq, delete_marker FROM object_versions WHERE bucket = ?1 AND key = ?2
                 ORDER BY version_seq DESC LIMIT 1",
            )?
            .query_row(params![bucket, key.as_bytes()], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .optional()?;
        let Some((seq, 0)) = newest else {
            return Ok(());
        };
        tx.prepare_cached(&format!(
            "INSERT INTO objects ({OBJECT_COLUMNS}) SELECT {OBJECT_COLUMNS} FROM object_versions
             WHERE bucket = ?1 AND key = ?2 AND version_seq = ?3"
        ))?
        .execute(params![bucket, key.as_bytes(), seq])?;
        tx.prepare_cached(
            "DELETE FROM object_versions WHERE bucket = ?1 AND key = ?2 AND version_seq = ?3",
        )?
        .execute(params![bucket, key.as_bytes(), seq])?;
        // Its expiry under the bucket's lifecycle as it is now.
        let archive = Self::bucket_archive_on(tx, bucket)?.unwrap_or_default();
        if let Some(o) = Self::get_object_on(tx, bucket, key)? {
            let expires = expiry_of(&archive, &o);
            tx.prepare_cached("UPDATE objects SET expires_ms = ?3 WHERE bucket = ?1 AND key = ?2")?
                .execute(params![bucket, key.as_bytes(), expires.map(|v| v as i64)])?;
        }
        Ok(())
    }

    /// Store `object` (whose content reference the caller added) as the new current version of its key under
    /// the bucket's versioning; returns it as stored (version id, retention, expiry set).
    pub(super) fn store_version(
        tx: &Transaction,
        archive: &BucketArchive,
        object: &ObjectRecord,
        now_ms: u64,
    ) -> sql::Result<Result<ObjectRecord>> {
        let (bucket, key) = (object.bucket.as_str(), object.key.as_str());
        let lock = object.attributes.lock;
        if !archive.object_lock && (lock.retention.is_some() || lock.legal_hold) {
            return Ok(Err(CatalogError::InvalidRequest(format!(
                "bucket {bucket} has no Object Lock configuration: a retention or legal hold cannot be set \
                 (create the bucket with Object Lock enabled)"
            ))));
        }
        let seq = Self::next_seq(tx)?;
        let mut stored = object.clone();
        stored.version_id = match archive.versioning {
            Versioning::Enabled => new_version_id(now_ms, seq),
            _ => NULL_VERSION.to_string(),
        };
        if archive.object_lock && stored.attributes.lock.retention.is_none() {
            stored.attributes.lock.retention =
                archive.default_retention.map(|d| d.retention_from(now_ms));
        }
        stored.expires_ms = expiry_of(archive, &stored);
        if let Err(e) = Self::retire_current(tx, archive.versioning, bucket, key, false, now_ms)? {
            return Ok(Err(e));
        }
        Self::insert_object(tx, &stored, seq)?;
        Ok(Ok(stored))
    }

    /// Make room for a new latest version of a key: the current version becomes noncurrent (versioning
    /// enabled, or a non-null version under suspended versioning) or is removed (a null version), and under
    /// suspended versioning a noncurrent null version is removed too. Removals obey Object Lock: nothing is
    /// written when one is refused.
    fn retire_current(
        tx: &Transaction,
        versioning: Versioning,
        bucket: &str,
        key: &str,
        bypass_governance: bool,
        now_ms: u64,
    ) -> sql::Result<Result<()>> {
        let current = Self::get_object_on(tx, bucket, key)?;
        let replaces_null = versioning != Versioning::Enabled;
        let mut removals: Vec<VersionRecord> = Vec::new();
        if versioning == Versioning::Suspended {
            removals = Self::noncurrent_null(tx, bucket, key)?;
        }
        let remove_current = current
            .as_ref()
            .filter(|c| replaces_null && c.version_id == NULL_VERSION);
        // Check every removal before writing anything.
        for o in remove_current
            .into_iter()
            .chain(removals.iter().filter_map(|v| v.object.as_ref()))
        {
            if let Err(v) = o.attributes.lock.may_delete(now_ms, bypass_governance) {
                return Ok(Err(locked(v, bucket, key, &o.version_id)));
            }
        }
        match (&current, remove_current) {
            (_, Some(c)) => Self::remove_current(tx, c, now_ms)?,
            (Some(_), None) => Self::demote(tx, bucket, key, now_ms)?,
            (None, None) => {}
        }
        for v in &removals {
            Self::remove_noncurrent(tx, v, now_ms)?;
        }
        Ok(Ok(()))
    }

    /// Remove the current version of a key inside `tx` as S3 DeleteObject without a version id does (a delete
    /// marker in versioned buckets; the null version itself otherwise). `Ok(false)` when the key had no current
    /// version. A removal Object Lock forbids fails, naming why (for the mount's unlink, rmdir and replacing
    /// rename).
    pub(super) fn remove_object(
        tx: &Transaction,
        bucket: &str,
        key: &str,
        now_ms: u64,
    ) -> sql::Result<bool> {
        if Self::get_object_on(tx, bucket, key)?.is_none() {
            return Ok(false);
        }
        let archive = Self::bucket_archive_on(tx, bucket)?.unwrap_or_default();
        if let Err(refused) =
            Self::retire_current(tx, archive.versioning, bucket, key, false, now_ms)?
        {
            return Err(conversion(refused));
        }
        if archive.versioning != Versioning::Unversioned {
            let seq = Self::next_seq(tx)?;
            let marker_id = match archive.versioning {
                Versioning::Enabled => new_version_id(now_ms, seq),
                _ => NULL_VERSION.to_string(),
            };
            Self::insert_marker(tx, bucket, key, &marker_id, seq, now_ms)?;
        }
        Ok(true)
    }

    /// Refuse to move (rename) a version Object Lock protects: its key would change under the lock.
    pub(super) fn refuse_locked_move(
        tx: &Transaction,
        bucket: &str,
        key: &str,
        now_ms: u64,
    ) -> Result<()> {
        let current = Self::get_object_on(tx, bucket, key)
            .map_err(|e| CatalogError::Corrupt(e.to_string()))?;
        match current {
            Some(o) if o.attributes.lock.is_locked(now_ms) => Err(CatalogError::Locked(format!(
                "{bucket}/{key} version {}: Object Lock protects it; it cannot be renamed",
                o.version_id
            ))),
            _ => Ok(()),
        }
    }

    /// S3 DeleteObject inside `tx` (see `Catalog::delete_version`).
    pub(super) fn delete_version_on(
        &self,
        tx: &Transaction,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<DeleteOutcome> {
        let e = |e| self.db_error(e);
        let Some(archive) = Self::bucket_archive_on(tx, bucket).map_err(e)? else {
            return Err(CatalogError::NoSuchBucket(bucket.to_string()));
        };
        let Some(version_id) = version_id else {
            Self::retire_current(
                tx,
                archive.versioning,
                bucket,
                key,
                bypass_governance,
                now_ms,
            )
            .map_err(e)??;
            if archive.versioning == Versioning::Unversioned {
                return Ok(DeleteOutcome::default());
            }
            let seq = Self::next_seq(tx).map_err(e)?;
            let marker_id = match archive.versioning {
                Versioning::Enabled => new_version_id(now_ms, seq),
                _ => NULL_VERSION.to_string(),
            };
            Self::insert_marker(tx, bucket, key, &marker_id, seq, now_ms).map_err(e)?;
            return Ok(DeleteOutcome {
                version_id: Some(marker_id),
                delete_marker: true,
            });
        };
        let Some(version) = Self::version_on(tx, bucket, key, version_id).map_err(e)? else {
            return Ok(DeleteOutcome::default());
        };
        if let Some(o) = &version.object {
            o.attributes
                .lock
                .may_delete(now_ms, bypass_governance)
                .map_err(|v| locked(v, bucket, key, version_id))?;
        }
        let current = Self::get_object_on(tx, bucket, key)
            .map_err(e)?
            .filter(|c| c.version_id == version_id);
        match current {
            Some(c) => Self::remove_current(tx, &c, now_ms).map_err(e)?,
            None => Self::remove_noncurrent(tx, &version, now_ms).map_err(e)?,
        }
        Self::promote_newest(tx, bucket, key).map_err(e)?;
        Ok(DeleteOutcome {
            version_id: Some(version_id.to_string()),
            delete_marker: version.object.is_none(),
        })
    }

    pub(super) fn set_bucket_archive(&self, name: &str, next: &BucketArchive) -> Result<()> {
        let text = serde_json::to_string(next).expect("bucket archive serializes");
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let Some(previous) = Self::bucket_archive_on(tx, name).map_err(e)? else {
                return Err(CatalogError::NoSuchBucket(name.to_string()));
            };
            previous
                .may_become(next)
                .map_err(|m| CatalogError::InvalidBucketState(format!("bucket {name}: {m}")))?;
            tx.execute(
                "UPDATE buckets SET archive = ?2 WHERE name = ?1",
                params![name, text],
            )
            .map_err(e)?;
            if previous.lifecycle != next.lifecycle {
                let objects: Vec<ObjectRecord> = tx
                    .prepare_cached(&format!(
                        "SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ?1"
                    ))
                    .and_then(|mut s| s.query_map(params![name], object_from_row)?.collect())
                    .map_err(e)?;
                let mut update = tx
                    .prepare_cached(
                        "UPDATE objects SET expires_ms = ?3 WHERE bucket = ?1 AND key = ?2",
                    )
                    .map_err(e)?;
                for o in objects {
                    let expires = expiry_of(next, &o);
                    if expires != o.expires_ms {
                        update
                            .execute(params![name, o.key.as_bytes(), expires.map(|v| v as i64)])
                            .map_err(e)?;
                    }
                }
            }
            Ok(())
        })
    }

    pub(super) fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<(VersionRecord, Option<ContentRecord>)>> {
        self.read(|c| {
            let Some(version) = Self::version_on(c, bucket, key, version_id)? else {
                return Ok(None);
            };
            let content = match &version.object {
                Some(o) => c
                    .prepare_cached(&format!(
                        "SELECT {} FROM contents WHERE content = ?1",
                        CONTENT_COLUMNS
                    ))?
                    .query_row(params![&o.content.to_key()[..]], |r| content_from_row(r, 0))
                    .optional()?,
                None => None,
            };
            Ok(Some((version, content)))
        })
    }

    pub(super) fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<DeleteOutcome> {
        self.write_with(|tx| {
            self.delete_version_on(tx, bucket, key, version_id, bypass_governance, now_ms)
        })
    }

    pub(super) fn list_object_versions(
        &self,
        bucket: &str,
        query: &VersionQuery,
    ) -> Result<VersionPage> {
        let page = self.read(|c| {
            if !Self::bucket_exists(c, bucket)? {
                return Ok(None);
            }
            list_versions(c, bucket, query).map(Some)
        })?;
        page.ok_or_else(|| CatalogError::NoSuchBucket(bucket.to_string()))
    }

    pub(super) fn change_attributes(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        change: &AttributeChange,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<String> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let Some(archive) = Self::bucket_archive_on(tx, bucket).map_err(e)? else {
                return Err(CatalogError::NoSuchBucket(bucket.to_string()));
            };
            let (mut object, current) = match version_id {
                None => match Self::get_object_on(tx, bucket, key).map_err(e)? {
                    Some(o) => (o, true),
                    None => {
                        return Err(CatalogError::NoSuchKey {
                            bucket: bucket.to_string(),
                            key: key.to_string(),
                        })
                    }
                },
                Some(v) => match Self::version_on(tx, bucket, key, v).map_err(e)? {
                    None => {
                        return Err(CatalogError::NoSuchVersion {
                            bucket: bucket.to_string(),
                            key: key.to_string(),
                            version_id: v.to_string(),
                        })
                    }
                    Some(VersionRecord { object: None, .. }) => {
                        return Err(CatalogError::InvalidRequest(format!(
                            "{bucket}/{key} version {v} is a delete marker: it has no tags or lock"
                        )))
                    }
                    Some(VersionRecord {
                        object: Some(o),
                        is_latest,
                        ..
                    }) => {
                        let current = is_latest
                            && Self::get_object_on(tx, bucket, key)
                                .map_err(e)?
                                .is_some_and(|c| c.version_id == o.version_id);
                        (o, current)
                    }
                },
            };
            let no_lock = || {
                CatalogError::InvalidRequest(format!(
                    "bucket {bucket} has no Object Lock configuration (create it with Object Lock enabled)"
                ))
            };
            match change {
                AttributeChange::Tags(tags) => object.attributes.tags = tags.clone(),
                AttributeChange::Retention(retention) => {
                    if !archive.object_lock {
                        return Err(no_lock());
                    }
                    object
                        .attributes
                        .lock
                        .may_set_retention(*retention, now_ms, bypass_governance)
                        .map_err(|v| locked(v, bucket, key, &object.version_id))?;
                    object.attributes.lock.retention = *retention;
                }
                AttributeChange::LegalHold(on) => {
                    if !archive.object_lock {
                        return Err(no_lock());
                    }
                    object.attributes.lock.legal_hold = *on;
                }
            }
            let text = attributes_json(&object.attributes);
            if current {
                let expires = expiry_of(&archive, &object);
                tx.prepare_cached(
                    "UPDATE objects SET attributes = ?3, expires_ms = ?4 WHERE bucket = ?1 AND key = ?2",
                )
                .and_then(|mut s| {
                    s.execute(params![bucket, key.as_bytes(), text, expires.map(|v| v as i64)])
                })
                .map_err(e)?;
            } else {
                tx.prepare_cached(
                    "UPDATE object_versions SET attributes = ?4 WHERE bucket = ?1 AND key = ?2 AND version_id = ?3",
                )
                .and_then(|mut s| s.execute(params![bucket, key.as_bytes(), object.version_id, text]))
                .map_err(e)?;
            }
            Ok(object.version_id)
        })
    }

    pub(super) fn expire_objects(&self, now_ms: u64, limit: usize) -> Result<u64> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let due: Vec<(String, String)> = tx
                .prepare_cached(
                    "SELECT bucket, key FROM objects WHERE expires_ms IS NOT NULL AND expires_ms <= ?1 LIMIT ?2",
                )
                .and_then(|mut s| {
                    s.query_map(params![now_ms as i64, limit as i64], |r| {
                        Ok((r.get(0)?, key_string(r.get(1)?)?))
                    })?
                    .collect()
                })
                .map_err(e)?;
            let mut expired = 0;
            for (bucket, key) in due {
                match self.delete_version_on(tx, &bucket, &key, None, false, now_ms) {
                    Ok(_) => expired += 1,
                    // Object Lock keeps it (checked before anything was written): only its expiry is cleared.
                    Err(CatalogError::Locked(_)) => {
                        tx.execute(
                            "UPDATE objects SET expires_ms = NULL WHERE bucket = ?1 AND key = ?2",
                            params![bucket, key.as_bytes()],
                        )
                        .map_err(e)?;
                    }
                    Err(other) => return Err(other),
                }
            }
            Ok(expired)
        })
    }

    pub(super) fn expire_noncurrent(&self, now_ms: u64, limit: usize) -> Result<u64> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let buckets: Vec<(String, String)> = tx
                .prepare_cached("SELECT name, archive FROM buckets")
                .and_then(|mut s| {
                    s.query_map(params![], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect()
                })
                .map_err(e)?;
            let mut removed = 0u64;
            for (bucket, text) in buckets {
                let Some(lifecycle) = archive_from_json(&text)?.lifecycle else {
                    continue;
                };
                let rows: Vec<Row2> = tx
                    .prepare_cached(&format!(
                        "SELECT {OBJECT_COLUMNS}, {VERSION_COLUMNS_EXTRA} FROM object_versions
                         WHERE bucket = ?1 ORDER BY key, version_seq DESC"
                    ))
                    .and_then(|mut s| s.query_map(params![bucket], version_from_row)?.collect())
                    .map_err(e)?;
                let mut newer = 0u32;
                let mut previous_key: Option<String> = None;
                for row in &rows {
                    if (removed as usize) >= limit {
                        return Ok(removed);
                    }
                    let v = &row.record;
                    if previous_key.as_deref() != Some(v.key.as_str()) {
                        newer = 0;
                        previous_key = Some(v.key.clone());
                    }
                    let due = match &v.object {
                        Some(o) => {
                            let mut lock = o.attributes.lock;
                            // Off unless the store's simulation proves it catches this bug (planted_bugs.rs).
                            lock.legal_hold &=
                                !planted_bugs::on(&planted_bugs::LIFECYCLE_IGNORES_LEGAL_HOLD);
                            let due = lifecycle.noncurrent_expired(
                                &v.key,
                                &o.attributes.tags,
                                o.size_bytes,
                                row.since_ms,
                                newer,
                                now_ms,
                            ) && !lock.is_locked(now_ms);
                            newer += 1;
                            due
                        }
                        None => {
                            // A delete marker that is the only version left of its key.
                            let alone = rows.iter().filter(|r| r.record.key == v.key).count() == 1
                                && Self::get_object_on(tx, &bucket, &v.key)
                                    .map_err(e)?
                                    .is_none();
                            alone && lifecycle.removes_lone_markers(&v.key)
                        }
                    };
                    if due {
                        Self::remove_noncurrent(tx, v, now_ms).map_err(e)?;
                        removed += 1;
                    }
                }
            }
            Ok(removed)
        })
    }

    pub(super) fn request_restore(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        terms: &RestoreTerms,
        now_ms: u64,
    ) -> Result<(RestoreOutcome, RestoreRecord)> {
        self.write_with(|tx| self.request_restore_on(tx, bucket, key, version_id, terms, now_ms))
    }

    pub(super) fn request_restores(
        &self,
        bucket: &str,
        versions: &[(String, String)],
        terms: &RestoreTerms,
        now_ms: u64,
    ) -> Result<Vec<Option<(RestoreOutcome, RestoreRecord)>>> {
        self.write_with(|tx| {
            versions
                .iter()
                .map(|(key, version_id)| {
                    match self.request_restore_on(tx, bucket, key, Some(version_id), terms, now_ms)
                    {
                        Ok(r) => Ok(Some(r)),
                        // Deleted since it was listed: nothing to restore.
                        Err(
                            CatalogError::NoSuchKey { .. } | CatalogError::NoSuchVersion { .. },
                        ) => Ok(None),
                        Err(e) => Err(e),
                    }
                })
                .collect()
        })
    }

    /// A restore request in the transaction `tx` (see `Catalog::request_restore`).
    fn request_restore_on(
        &self,
        tx: &Transaction,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        terms: &RestoreTerms,
        now_ms: u64,
    ) -> Result<(RestoreOutcome, RestoreRecord)> {
        let duration_ms = terms.duration_ms;
        let e = |e| self.db_error(e);
        if !Self::bucket_exists(tx, bucket).map_err(e)? {
            return Err(CatalogError::NoSuchBucket(bucket.to_string()));
        }
        let object = match version_id {
            None => Self::get_object_on(tx, bucket, key)
                .map_err(e)?
                .filter(|o| o.expires_ms.is_none_or(|at| at > now_ms)),
            Some(v) => Self::version_on(tx, bucket, key, v)
                .map_err(e)?
                .and_then(|r| r.object),
        };
        let Some(object) = object else {
            return Err(match version_id {
                None => CatalogError::NoSuchKey {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                },
                Some(v) => CatalogError::NoSuchVersion {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    version_id: v.to_string(),
                },
            });
        };
        let existing = Self::restore_on(tx, bucket, key, &object.version_id).map_err(e)?;
        let (outcome, record) = match existing {
            Some(r) if r.done_ms.is_none() && terms.tier < r.tier => {
                let record = RestoreRecord {
                    tier: terms.tier,
                    ..r
                };
                tx.execute(
                    "UPDATE restores SET tier = ?4 WHERE bucket = ?1 AND key = ?2 AND version_id = ?3",
                    params![bucket, key.as_bytes(), record.version_id, terms.tier.as_str()],
                )
                .map_err(e)?;
                (RestoreOutcome::Upgraded, record)
            }
            Some(r) if r.done_ms.is_none() => (RestoreOutcome::InProgress, r),
            Some(r) if r.expiry_ms.is_some_and(|x| x > now_ms) => {
                let expiry_ms = restore_expiry_ms(now_ms, duration_ms, terms.day_ms);
                let record = RestoreRecord {
                    duration_ms,
                    expiry_ms: Some(expiry_ms),
                    ..r
                };
                tx.execute(
                    "UPDATE restores SET duration_ms = ?4, expiry_ms = ?5 WHERE bucket = ?1 AND key = ?2 AND version_id = ?3",
                    params![bucket, key.as_bytes(), record.version_id, duration_ms as i64, expiry_ms as i64],
                )
                .map_err(e)?;
                Self::pin(tx, &record.content).map_err(e)?;
                (RestoreOutcome::Extended, record)
            }
            _ => {
                let record = RestoreRecord {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    version_id: object.version_id.clone(),
                    content: object.content,
                    requested_ms: now_ms,
                    duration_ms,
                    done_ms: None,
                    expiry_ms: None,
                    tier: terms.tier,
                };
                tx.execute(
                    &format!(
                        "INSERT INTO restores ({RESTORE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, NULL, ?7)
                         ON CONFLICT (bucket, key, version_id) DO UPDATE SET content = ?4, requested_ms = ?5,
                         duration_ms = ?6, done_ms = NULL, expiry_ms = NULL, tier = ?7"
                    ),
                    params![
                        bucket,
                        key.as_bytes(),
                        record.version_id,
                        &record.content.to_key()[..],
                        now_ms as i64,
                        duration_ms as i64,
                        terms.tier.as_str()
                    ],
                )
                .map_err(e)?;
                (RestoreOutcome::Started, record)
            }
        };
        Ok((outcome, record))
    }

    fn restore_on(
        conn: &Connection,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> sql::Result<Option<RestoreRecord>> {
        conn.prepare_cached(&format!(
            "SELECT {RESTORE_COLUMNS} FROM restores WHERE bucket = ?1 AND key = ?2 AND version_id = ?3"
        ))?
        .query_row(params![bucket, key.as_bytes(), version_id], restore_from_row)
        .optional()
    }

    /// Pin a content (and each part of a part list) in the cache until the latest expiry of its done restores.
    fn pin(tx: &Transaction, content: &ContentId) -> sql::Result<()> {
        let key = content.to_key();
        let until: Option<i64> = tx
            .prepare_cached("SELECT MAX(expiry_ms) FROM restores WHERE content = ?1")?
            .query_row(params![&key[..]], |r| r.get(0))?;
        // A content kept hot stays pinned until it is made cold (`Catalog::pin_hot`).
        tx.prepare_cached(
            "UPDATE contents SET pinned_until_ms = ?2
             WHERE (content = ?1 OR content IN (SELECT part FROM content_parts WHERE content = ?1))
             AND (pinned_until_ms IS NULL OR pinned_until_ms <> ?3)",
        )?
        .execute(params![&key[..], until, crate::HOT_PINNED_UNTIL_MS as i64])?;
        Ok(())
    }

    pub(super) fn restore_of(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<RestoreRecord>> {
        let now = now_ms();
        let found = self.read(|c| Self::restore_on(c, bucket, key, version_id))?;
        Ok(found.filter(|r| r.done_ms.is_none() || r.expiry_ms.is_some_and(|x| x > now)))
    }

    pub(super) fn pending_restores(&self, limit: usize) -> Result<Vec<RestoreRecord>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {RESTORE_COLUMNS} FROM restores WHERE done_ms IS NULL ORDER BY requested_ms LIMIT ?1"
            ))?
            .query_map(params![limit as i64], restore_from_row)?
            .collect()
        })
    }

    pub(super) fn finish_restores(
        &self,
        content: &ContentId,
        now_ms: u64,
        day_ms: u64,
    ) -> Result<()> {
        self.write(|tx| {
            // `restore_expiry_ms`: done + duration, rounded up to the start of the next day.
            tx.prepare_cached(
                "UPDATE restores SET done_ms = ?2, expiry_ms = ((?2 + duration_ms) / ?3 + 1) * ?3
                 WHERE content = ?1 AND done_ms IS NULL",
            )?
            .execute(params![
                &content.to_key()[..],
                now_ms as i64,
                day_ms.max(1) as i64
            ])?;
            Self::pin(tx, content)
        })
    }

    pub(super) fn recache_content(
        &self,
        content: &ContentId,
        cache_path: &str,
        now_ms: u64,
    ) -> Result<bool> {
        self.write(|tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE contents SET cache_path = ?2, last_access_ms = ?3 WHERE content = ?1 AND cache_path IS NULL",
                )?
                .execute(params![&content.to_key()[..], cache_path, now_ms as i64])?;
            Ok(changed == 1)
        })
    }

    pub(super) fn dataset_stats(&self) -> Result<Vec<DatasetStats>> {
        let rows = self.read(|c| {
            let mut stats: Vec<DatasetStats> = c
                .prepare_cached(
                    "SELECT o.dataset, COUNT(*), SUM(o.size_bytes), SUM(c.stored_bytes), MIN(o.last_modified_ms),
                        MAX(o.last_modified_ms), MIN(o.expires_ms),
                        SUM(CASE WHEN c.state = 'persisted' THEN 1 ELSE 0 END)
                     FROM objects o JOIN contents c ON c.content = o.content GROUP BY o.dataset ORDER BY o.dataset",
                )?
                .query_map(params![], |r| {
                    Ok(DatasetStats {
                        dataset: r.get(0)?,
                        objects: r.get::<_, i64>(1)? as u64,
                        size_bytes: r.get::<_, i64>(2)? as u64,
                        stored_bytes: r.get::<_, i64>(3)? as u64,
                        first_write_ms: r.get::<_, i64>(4)? as u64,
                        last_write_ms: r.get::<_, i64>(5)? as u64,
                        expires_ms: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                        persisted_objects: r.get::<_, i64>(7)? as u64,
                        tags: Vec::new(),
                    })
                })?
                .collect::<sql::Result<_>>()?;
            let mut tags: std::collections::BTreeMap<String, std::collections::BTreeSet<(String, String)>> =
                Default::default();
            let mut stmt = c.prepare_cached("SELECT dataset, attributes FROM objects WHERE attributes <> '{}'")?;
            for row in stmt.query_map(params![], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
                let (dataset, text) = row?;
                let attributes = attributes_from_json(&text)?;
                tags.entry(dataset).or_default().extend(attributes.tags);
            }
            for s in &mut stats {
                if let Some(t) = tags.remove(&s.dataset) {
                    s.tags = t.into_iter().collect();
                }
            }
            Ok(stats)
        })?;
        Ok(rows)
    }

    pub(super) fn expire_restores(&self, now_ms: u64) -> Result<u64> {
        self.write(|tx| {
            let removed = tx
                .prepare_cached(
                    "DELETE FROM restores WHERE expiry_ms IS NOT NULL AND expiry_ms <= ?1",
                )?
                .execute(params![now_ms as i64])?;
            tx.prepare_cached(
                "UPDATE contents SET pinned_until_ms =
                     (SELECT MAX(expiry_ms) FROM restores WHERE restores.content = contents.content)
                 WHERE pinned_until_ms IS NOT NULL AND pinned_until_ms <= ?1",
            )?
            .execute(params![now_ms as i64])?;
            Ok(removed as u64)
        })
    }
}

/// When the bucket's lifecycle expires `object` as a current version.
fn expiry_of(archive: &BucketArchive, object: &ObjectRecord) -> Option<u64> {
    archive.lifecycle.as_ref().and_then(|l| {
        l.expiry(
            &object.key,
            &object.attributes.tags,
            object.size_bytes,
            object.last_modified_ms,
        )
        .map(|(at, _)| at)
    })
}

/// ListObjectVersions over both tables: key order, newest first within a key.
fn list_versions(c: &Connection, bucket: &str, query: &VersionQuery) -> sql::Result<VersionPage> {
    let max_keys = match query.max_keys {
        0 => crate::list::MAX_KEYS_DEFAULT,
        n => n.min(crate::list::MAX_KEYS_DEFAULT),
    };
    let prefix = query.prefix.as_bytes();
    let upper = prefix_successor(prefix);
    let delimiter = query
        .delimiter
        .as_deref()
        .filter(|d| !d.is_empty())
        .map(str::as_bytes);
    // Position: rows with key > from_key, or key = from_key and seq < from_seq.
    let mut from_key: Vec<u8> = prefix.to_vec();
    let mut from_seq: i64 = i64::MAX;
    let mut previous_key: Option<Vec<u8>> = None;
    if let Some(marker) = query.key_marker.as_deref().filter(|m| !m.is_empty()) {
        let marker_seq = match query.version_id_marker.as_deref().filter(|v| !v.is_empty()) {
            Some(v) => c
                .prepare_cached(
                    "SELECT version_seq FROM objects WHERE bucket = ?1 AND key = ?2 AND version_id = ?3
                     UNION ALL SELECT version_seq FROM object_versions WHERE bucket = ?1 AND key = ?2 AND version_id = ?3",
                )?
                .query_row(params![bucket, marker.as_bytes(), v], |r| r.get::<_, i64>(0))
                .optional()?,
            None => None,
        };
        let marker_bytes = marker.as_bytes().to_vec();
        // Where the marker says to resume: within its key after that version, after all its versions, or after
        // its whole common prefix when it is one.
        let (key, seq, mid_key) = match marker_seq {
            Some(seq) => (Some(marker_bytes.clone()), seq, true),
            None => match (delimiter, marker.as_bytes().strip_prefix(prefix)) {
                (Some(d), Some(rest)) if rest.ends_with(d) => {
                    (prefix_successor(marker.as_bytes()), i64::MAX, false)
                }
                _ => (Some(marker_bytes.clone()), i64::MIN, false),
            },
        };
        let Some(key) = key else {
            return Ok(VersionPage::default());
        };
        if key > from_key || (key == from_key && seq < from_seq) {
            from_key = key;
            from_seq = seq;
            if mid_key {
                previous_key = Some(marker_bytes);
            }
        }
    }
    let mut stmt = c.prepare_cached(&format!(
        "SELECT * FROM (
             SELECT {OBJECT_COLUMNS}, 0 AS delete_marker, 0 AS since FROM objects WHERE bucket = ?1
             UNION ALL
             SELECT {OBJECT_COLUMNS}, delete_marker, noncurrent_since_ms FROM object_versions WHERE bucket = ?1
         ) AS versions WHERE key > ?2 OR (key = ?2 AND version_seq < ?3) ORDER BY key, version_seq DESC LIMIT ?4"
    ))?;
    let mut page = VersionPage::default();
    let mut entries = 0usize;
    let batch = max_keys + 1;
    'walk: loop {
        if upper.as_deref().is_some_and(|u| from_key.as_slice() >= u) {
            break;
        }
        let rows: Vec<Row2> = stmt
            .query_map(
                params![bucket, from_key, from_seq, batch as i64],
                version_from_row,
            )?
            .collect::<sql::Result<_>>()?;
        let exhausted = rows.len() < batch;
        let mut jumped = false;
        for row in rows {
            let key = row.record.key.as_bytes().to_vec();
            if !key.starts_with(prefix) {
                break 'walk;
            }
            if entries == max_keys {
                page.is_truncated = true;
                break 'walk;
            }
            let rolled = delimiter.and_then(|d| {
                crate::list::find(&key[prefix.len()..], d).map(|at| prefix.len() + at + d.len())
            });
            entries += 1;
            if let Some(end) = rolled {
                let common = String::from_utf8_lossy(&key[..end]).into_owned();
                page.next_key_marker = Some(common.clone());
                page.next_version_id_marker = None;
                page.common_prefixes.push(common);
                match prefix_successor(&key[..end]) {
                    Some(s) => {
                        from_key = s;
                        from_seq = i64::MAX;
                    }
                    None => break 'walk,
                }
                previous_key = None;
                jumped = true;
                break;
            }
            let mut record = row.record;
            record.is_latest = previous_key.as_deref() != Some(&key[..]);
            previous_key = Some(key.clone());
            page.next_key_marker = Some(record.key.clone());
            page.next_version_id_marker = Some(record.version_id.clone());
            from_key = key;
            from_seq = row.seq;
            page.versions.push(record);
        }
        if !jumped && exhausted {
            break;
        }
    }
    if !page.is_truncated {
        page.next_key_marker = None;
        page.next_version_id_marker = None;
    }
    Ok(page)
}
