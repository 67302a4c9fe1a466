//! The file system namespace of the mount on SQLite (the `fs_*` methods of [`Catalog`]).
//!
//! Directories are key prefixes. A directory exists implicitly while a key or a `fs_directories` row lies under
//! its prefix, explicitly while it has a row. Every change is one transaction; renames of whole directories
//! rewrite each key under the prefix (catalog only: no byte moves).

use crate::sql::{self, params, Connection, OptionalExtension, Transaction};

use super::{
    rows::{conversion, corrupt, key_string, object_from_row, pairs_json, OBJECT_COLUMNS},
    SqlCatalog,
};
use crate::list::{list_with, prefix_successor};
use crate::namespace::{parent_of, showable_name};
use crate::{
    CatalogError, ContentState, DirAttrs, DirRecord, FsEntry, FsFile, FsPage, FsRename, ListQuery,
    ObjectRecord, Refusal, Result,
};

/// Longest key, in bytes (S3's limit; the store checks the same).
const KEY_BYTES_MAX: usize = 1024;
/// Most entries one `fs_list` call returns.
const LIST_MAX: usize = 1000;
/// Keys moved per statement batch of a directory rename.
const RENAME_BATCH: usize = 512;

const DIR_COLUMNS: &str = "bucket, path, mode, uid, gid, mtime_ns, created_ms";

fn refused(refusal: Refusal, what: impl Into<String>) -> CatalogError {
    CatalogError::Refused {
        refusal,
        what: what.into(),
    }
}

fn dir_from_row(row: &sql::Row) -> sql::Result<DirRecord> {
    Ok(DirRecord {
        bucket: row.get(0)?,
        path: key_string(row.get(1)?)?,
        attrs: DirAttrs {
            mode: row.get::<_, i64>(2)? as u32,
            uid: row.get::<_, i64>(3)? as u32,
            gid: row.get::<_, i64>(4)? as u32,
            mtime_ns: row.get(5)?,
        },
        created_ms: row.get::<_, i64>(6)? as u64,
    })
}

/// `[prefix, successor)` as SQL bounds; a prefix ending with `/` always has a successor.
fn upper_bound(prefix: &str) -> Vec<u8> {
    prefix_successor(prefix.as_bytes()).unwrap_or_else(|| vec![0xFF; KEY_BYTES_MAX + 1])
}

fn dir_row(c: &Connection, bucket: &str, path: &str) -> sql::Result<Option<DirRecord>> {
    c.prepare_cached(&format!(
        "SELECT {DIR_COLUMNS} FROM fs_directories WHERE bucket = ?1 AND path = ?2"
    ))?
    .query_row(params![bucket, path.as_bytes()], dir_from_row)
    .optional()
}

/// Keys under `prefix` (at most `limit`, in order).
fn keys_under(
    c: &Connection,
    bucket: &str,
    prefix: &str,
    limit: usize,
) -> sql::Result<Vec<String>> {
    c.prepare_cached(
        "SELECT key FROM objects WHERE bucket = ?1 AND key >= ?2 AND key < ?3 ORDER BY key LIMIT ?4",
    )?
    .query_map(
        params![bucket, prefix.as_bytes(), upper_bound(prefix), limit as i64],
        |r| key_string(r.get(0)?),
    )?
    .collect()
}

/// Directory rows under `prefix`, the row of `prefix` itself included (at most `limit`, in order).
fn rows_under(
    c: &Connection,
    bucket: &str,
    prefix: &str,
    limit: usize,
) -> sql::Result<Vec<DirRecord>> {
    c.prepare_cached(&format!(
        "SELECT {DIR_COLUMNS} FROM fs_directories WHERE bucket = ?1 AND path >= ?2 AND path < ?3 ORDER BY path LIMIT ?4"
    ))?
    .query_map(
        params![bucket, prefix.as_bytes(), upper_bound(prefix), limit as i64],
        dir_from_row,
    )?
    .collect()
}

/// Whether anything but `prefix`'s own row and folder marker lies under the directory `prefix`.
fn has_children(c: &Connection, bucket: &str, prefix: &str) -> sql::Result<bool> {
    Ok(keys_under(c, bucket, prefix, 2)?
        .iter()
        .any(|k| k != prefix)
        || rows_under(c, bucket, prefix, 2)?
            .iter()
            .any(|r| r.path != prefix))
}

/// Whether the directory `prefix` exists (a row, or anything under it).
fn dir_exists(c: &Connection, bucket: &str, prefix: &str) -> sql::Result<bool> {
    Ok(!rows_under(c, bucket, prefix, 1)?.is_empty()
        || !keys_under(c, bucket, prefix, 1)?.is_empty())
}

fn file_of(c: &Connection, object: ObjectRecord) -> sql::Result<FsFile> {
    let key = object.content.to_key();
    let (mut stored_bytes, state, form) = c
        .prepare_cached("SELECT stored_bytes, state, stored_form FROM contents WHERE content = ?1")?
        .query_row(params![&key[..]], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
    if form == "parts" {
        // A part list stores nothing itself: its parts hold the bytes.
        stored_bytes = c
            .prepare_cached(
                "SELECT COALESCE(SUM(c.stored_bytes), 0) FROM content_parts p
                 JOIN contents c ON c.content = p.part WHERE p.content = ?1",
            )?
            .query_row(params![&key[..]], |r| r.get::<_, i64>(0))? as u64;
    }
    let state = ContentState::ALL
        .into_iter()
        .find(|s| s.as_str() == state)
        .ok_or_else(|| conversion(corrupt(format!("unknown content state {state:?}"))))?;
    Ok(FsFile {
        object,
        stored_bytes,
        state,
    })
}

fn lookup_on(c: &Connection, bucket: &str, path: &str) -> sql::Result<Option<FsEntry>> {
    let prefix = format!("{path}/");
    if let Some(record) = dir_row(c, bucket, &prefix)? {
        return Ok(Some(FsEntry::Dir {
            path: prefix,
            record: Some(record),
        }));
    }
    if dir_exists(c, bucket, &prefix)? {
        return Ok(Some(FsEntry::Dir {
            path: prefix,
            record: None,
        }));
    }
    match SqlCatalog::get_object_on(c, bucket, path)? {
        Some(object) => Ok(Some(FsEntry::File(file_of(c, object)?))),
        None => Ok(None),
    }
}

fn insert_dir(tx: &Transaction, record: &DirRecord) -> sql::Result<()> {
    tx.prepare_cached(
        "INSERT INTO fs_directories (bucket, path, parent, mode, uid, gid, mtime_ns, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (bucket, path) DO NOTHING",
    )?
    .execute(params![
        record.bucket,
        record.path.as_bytes(),
        parent_of(&record.path).as_bytes(),
        record.attrs.mode as i64,
        record.attrs.uid as i64,
        record.attrs.gid as i64,
        record.attrs.mtime_ns,
        record.created_ms as i64,
    ])?;
    Ok(())
}

/// An entry of the directory `prefix` was added or removed: give it a row if it has none, so it stays when its
/// last entry leaves, and set its modification time (`attrs.mtime_ns`, POSIX). The top of a bucket (`""`)
/// has no row.
fn touch_dir(
    tx: &Transaction,
    bucket: &str,
    prefix: &str,
    attrs: &DirAttrs,
    now_ms: u64,
) -> sql::Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT INTO fs_directories (bucket, path, parent, mode, uid, gid, mtime_ns, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (bucket, path) DO UPDATE SET mtime_ns = excluded.mtime_ns",
    )?
    .execute(params![
        bucket,
        prefix.as_bytes(),
        parent_of(prefix).as_bytes(),
        attrs.mode as i64,
        attrs.uid as i64,
        attrs.gid as i64,
        attrs.mtime_ns,
        now_ms as i64,
    ])?;
    Ok(())
}

fn delete_dir_row(tx: &Transaction, bucket: &str, path: &str) -> sql::Result<()> {
    tx.prepare_cached("DELETE FROM fs_directories WHERE bucket = ?1 AND path = ?2")?
        .execute(params![bucket, path.as_bytes()])?;
    Ok(())
}

/// A path argument: not empty, no trailing `/`, every component showable.
fn check_path(path: &str) -> Result<()> {
    if path.len() > KEY_BYTES_MAX {
        return Err(refused(
            Refusal::NameTooLong,
            format!("{path:?} has {} bytes", path.len()),
        ));
    }
    if !path.split('/').all(showable_name) {
        return Err(refused(
            Refusal::Invalid,
            format!("{path:?} is not a path of the namespace"),
        ));
    }
    Ok(())
}

/// A directory prefix argument: a path followed by `/`.
fn check_prefix(prefix: &str) -> Result<()> {
    match prefix.strip_suffix('/') {
        Some(path) => check_path(path),
        None => Err(refused(
            Refusal::Invalid,
            format!("{prefix:?} is not a directory prefix"),
        )),
    }
}

impl SqlCatalog {
    fn require_bucket(&self, c: &Connection, bucket: &str) -> Result<()> {
        if Self::bucket_exists(c, bucket).map_err(|e| self.db_error(e))? {
            Ok(())
        } else {
            Err(CatalogError::NoSuchBucket(bucket.to_string()))
        }
    }

    pub(super) fn fs_lookup(&self, bucket: &str, path: &str) -> Result<Option<FsEntry>> {
        check_path(path)?;
        self.read_with(|c| {
            self.require_bucket(c, bucket)?;
            lookup_on(c, bucket, path).map_err(|e| self.db_error(e))
        })
    }

    pub(super) fn fs_list(
        &self,
        bucket: &str,
        dir: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<FsPage> {
        if !dir.is_empty() {
            check_prefix(dir)?;
        }
        let limit = limit.clamp(1, LIST_MAX);
        self.read_with(|c| {
            self.require_bucket(c, bucket)?;
            let e = |e| self.db_error(e);
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ?1 AND key >= ?2 ORDER BY key LIMIT ?3"
                ))
                .map_err(e)?;
            let query = ListQuery {
                prefix: dir.to_string(),
                delimiter: Some("/".into()),
                start_after: after.map(str::to_string),
                max_keys: limit,
            };
            let objects = list_with(&query, |from: &[u8], n: usize| {
                stmt.query_map(params![bucket, from, n as i64], object_from_row)?
                    .collect::<sql::Result<Vec<_>>>()
            })
            .map_err(e)?;
            let rows: Vec<DirRecord> = c
                .prepare_cached(&format!(
                    "SELECT {DIR_COLUMNS} FROM fs_directories
                     WHERE bucket = ?1 AND parent = ?2 AND path > ?3 ORDER BY path LIMIT ?4"
                ))
                .and_then(|mut s| {
                    s.query_map(
                        params![
                            bucket,
                            dir.as_bytes(),
                            after.unwrap_or("").as_bytes(),
                            limit as i64
                        ],
                        dir_from_row,
                    )?
                    .collect()
                })
                .map_err(e)?;
            let full = objects.is_truncated || rows.len() == limit;

            // Merge the two ordered streams by key; a row and a common prefix of the same key are one directory.
            // Files are most items: boxing the large variant would cost an allocation for each of them.
            #[allow(clippy::large_enum_variant)]
            enum Item {
                File(ObjectRecord),
                Dir(String, Option<DirRecord>),
            }
            let mut items: Vec<(String, Item)> = objects
                .objects
                .into_iter()
                .map(|o| (o.key.clone(), Item::File(o)))
                .chain(
                    objects
                        .common_prefixes
                        .into_iter()
                        .map(|p| (p.clone(), Item::Dir(p, None))),
                )
                .collect();
            for row in rows {
                match items.iter_mut().find(|(k, _)| *k == row.path) {
                    Some((_, item)) => *item = Item::Dir(row.path.clone(), Some(row)),
                    None => items.push((row.path.clone(), Item::Dir(row.path.clone(), Some(row)))),
                }
            }
            items.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            items.truncate(limit);
            let last = items.last().map(|(k, _)| k.clone());
            let dirs: std::collections::HashSet<String> = items
                .iter()
                .filter(|(_, i)| matches!(i, Item::Dir(..)))
                .map(|(k, _)| k.clone())
                .collect();
            let mut page = FsPage {
                entries: Vec::with_capacity(items.len()),
                next_after: if full { last.clone() } else { None },
            };
            for (key, item) in items {
                let name = key[dir.len()..].trim_end_matches('/');
                if !showable_name(name) {
                    continue;
                }
                match item {
                    Item::Dir(path, record) => page.entries.push(FsEntry::Dir { path, record }),
                    Item::File(object) => {
                        // A directory of the same name shadows the file: it sorts after the file's key, in this
                        // page or (past its last key) beyond it.
                        let as_dir = format!("{key}/");
                        let shadowed = dirs.contains(&as_dir)
                            || (last.as_deref().is_some_and(|l| as_dir.as_str() > l)
                                && dir_exists(c, bucket, &as_dir).map_err(e)?);
                        if !shadowed {
                            page.entries.push(FsEntry::File(file_of(c, object).map_err(e)?));
                        }
                    }
                }
            }
            Ok(page)
        })
    }

    pub(super) fn fs_mkdir(&self, record: &DirRecord, parent_attrs: &DirAttrs) -> Result<()> {
        check_prefix(&record.path)?;
        self.write_with(|tx| {
            self.require_bucket(tx, &record.bucket)?;
            let e = |e| self.db_error(e);
            let name = record.path.trim_end_matches('/');
            if lookup_on(tx, &record.bucket, name).map_err(e)?.is_some() {
                return Err(refused(
                    Refusal::Exists,
                    format!("{}/{name}", record.bucket),
                ));
            }
            insert_dir(tx, record).map_err(e)?;
            touch_dir(
                tx,
                &record.bucket,
                parent_of(&record.path),
                parent_attrs,
                record.created_ms,
            )
            .map_err(e)
        })
    }

    pub(super) fn fs_rmdir(
        &self,
        bucket: &str,
        path: &str,
        parent_attrs: &DirAttrs,
        now_ms: u64,
    ) -> Result<()> {
        check_prefix(path)?;
        self.write_with(|tx| {
            self.require_bucket(tx, bucket)?;
            let e = |e| self.db_error(e);
            let what = || format!("{bucket}/{}", path.trim_end_matches('/'));
            if has_children(tx, bucket, path).map_err(e)? {
                return Err(refused(Refusal::NotEmpty, what()));
            }
            let row = dir_row(tx, bucket, path).map_err(e)?;
            let marker = SqlCatalog::get_object_on(tx, bucket, path)
                .map_err(e)?
                .is_some();
            if row.is_none() && !marker {
                return Err(refused(Refusal::NotFound, what()));
            }
            delete_dir_row(tx, bucket, path).map_err(e)?;
            if marker {
                Self::remove_object(tx, bucket, path, now_ms).map_err(e)?;
            }
            touch_dir(tx, bucket, parent_of(path), parent_attrs, now_ms).map_err(e)
        })
    }

    pub(super) fn fs_unlink(
        &self,
        bucket: &str,
        key: &str,
        parent_attrs: &DirAttrs,
        now_ms: u64,
    ) -> Result<()> {
        check_path(key)?;
        self.write_with(|tx| {
            self.require_bucket(tx, bucket)?;
            let e = |e| self.db_error(e);
            if !Self::remove_object(tx, bucket, key, now_ms).map_err(e)? {
                return Err(refused(Refusal::NotFound, format!("{bucket}/{key}")));
            }
            touch_dir(tx, bucket, parent_of(key), parent_attrs, now_ms).map_err(e)
        })
    }

    pub(super) fn fs_rename(&self, r: &FsRename, now_ms: u64) -> Result<()> {
        check_path(&r.from)?;
        check_path(&r.to)?;
        self.write_with(|tx| {
            self.require_bucket(tx, &r.from_bucket)?;
            self.require_bucket(tx, &r.to_bucket)?;
            let e = |e| self.db_error(e);
            let source = || format!("{}/{}", r.from_bucket, r.from);
            let target = || format!("{}/{}", r.to_bucket, r.to);
            let Some(from) = lookup_on(tx, &r.from_bucket, &r.from).map_err(e)? else {
                return Err(refused(Refusal::NotFound, source()));
            };
            if r.from_bucket == r.to_bucket && r.from == r.to {
                return Ok(());
            }
            let to = lookup_on(tx, &r.to_bucket, &r.to).map_err(e)?;
            match from {
                FsEntry::File(_) => {
                    match to {
                        Some(FsEntry::Dir { .. }) => {
                            return Err(refused(Refusal::IsADirectory, target()))
                        }
                        Some(FsEntry::File(_)) if r.no_replace => {
                            return Err(refused(Refusal::Exists, target()))
                        }
                        Some(FsEntry::File(_)) => {
                            Self::remove_object(tx, &r.to_bucket, &r.to, now_ms).map_err(e)?;
                        }
                        None => {}
                    }
                    SqlCatalog::refuse_locked_move(tx, &r.from_bucket, &r.from, now_ms)?;
                    move_key(tx, &r.from_bucket, &r.from, &r.to_bucket, &r.to).map_err(e)?;
                }
                FsEntry::Dir { path, record } => {
                    let target_prefix = format!("{}/", r.to);
                    if r.from_bucket == r.to_bucket && target_prefix.starts_with(&path) {
                        return Err(refused(
                            Refusal::Invalid,
                            format!("{} into itself ({})", source(), target()),
                        ));
                    }
                    match to {
                        Some(FsEntry::File(_)) => {
                            return Err(refused(Refusal::NotADirectory, target()))
                        }
                        Some(FsEntry::Dir { .. }) if r.no_replace => {
                            return Err(refused(Refusal::Exists, target()))
                        }
                        Some(FsEntry::Dir { .. }) => {
                            if has_children(tx, &r.to_bucket, &target_prefix).map_err(e)? {
                                return Err(refused(Refusal::NotEmpty, target()));
                            }
                            delete_dir_row(tx, &r.to_bucket, &target_prefix).map_err(e)?;
                            Self::remove_object(tx, &r.to_bucket, &target_prefix, now_ms)
                                .map_err(e)?;
                        }
                        None => {}
                    }
                    move_tree(self, tx, r, &path, &target_prefix)?;
                    if record.is_none() {
                        touch_dir(tx, &r.to_bucket, &target_prefix, &r.dir_attrs, now_ms)
                            .map_err(e)?;
                    }
                }
            }
            touch_dir(tx, &r.from_bucket, parent_of(&r.from), &r.dir_attrs, now_ms).map_err(e)?;
            touch_dir(tx, &r.to_bucket, parent_of(&r.to), &r.dir_attrs, now_ms).map_err(e)
        })
    }

    pub(super) fn fs_set_dir(&self, record: &DirRecord) -> Result<()> {
        check_prefix(&record.path)?;
        self.write_with(|tx| {
            self.require_bucket(tx, &record.bucket)?;
            let e = |e| self.db_error(e);
            let name = record.path.trim_end_matches('/');
            match lookup_on(tx, &record.bucket, name).map_err(e)? {
                Some(FsEntry::Dir { .. }) => {}
                Some(FsEntry::File(_)) => {
                    return Err(refused(
                        Refusal::NotADirectory,
                        format!("{}/{name}", record.bucket),
                    ))
                }
                None => {
                    return Err(refused(
                        Refusal::NotFound,
                        format!("{}/{name}", record.bucket),
                    ))
                }
            }
            tx.prepare_cached(
                "INSERT INTO fs_directories (bucket, path, parent, mode, uid, gid, mtime_ns, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (bucket, path) DO UPDATE SET
                     mode = excluded.mode, uid = excluded.uid, gid = excluded.gid, mtime_ns = excluded.mtime_ns",
            )
            .and_then(|mut s| {
                s.execute(params![
                    record.bucket,
                    record.path.as_bytes(),
                    parent_of(&record.path).as_bytes(),
                    record.attrs.mode as i64,
                    record.attrs.uid as i64,
                    record.attrs.gid as i64,
                    record.attrs.mtime_ns,
                    record.created_ms as i64,
                ])
            })
            .map_err(e)?;
            Ok(())
        })
    }

    pub(super) fn fs_set_metadata(
        &self,
        bucket: &str,
        key: &str,
        user_metadata: &[(String, String)],
    ) -> Result<()> {
        self.write_with(|tx| {
            self.require_bucket(tx, bucket)?;
            let changed = tx
                .prepare_cached(
                    "UPDATE objects SET user_metadata = ?3 WHERE bucket = ?1 AND key = ?2",
                )
                .and_then(|mut s| {
                    s.execute(params![bucket, key.as_bytes(), pairs_json(user_metadata)])
                })
                .map_err(|e| self.db_error(e))?;
            if changed == 0 {
                return Err(refused(Refusal::NotFound, format!("{bucket}/{key}")));
            }
            Ok(())
        })
    }
}

/// Move one object to a new bucket and key (every column stays).
fn move_key(
    tx: &Transaction,
    from_bucket: &str,
    from: &str,
    to_bucket: &str,
    to: &str,
) -> sql::Result<()> {
    tx.prepare_cached("UPDATE objects SET bucket = ?3, key = ?4 WHERE bucket = ?1 AND key = ?2")?
        .execute(params![
            from_bucket,
            from.as_bytes(),
            to_bucket,
            to.as_bytes()
        ])?;
    Ok(())
}

/// Move every key and directory row under `from_prefix` to `to_prefix` (the target range is empty).
fn move_tree(
    catalog: &SqlCatalog,
    tx: &Transaction,
    r: &FsRename,
    from_prefix: &str,
    to_prefix: &str,
) -> Result<()> {
    let e = |e| catalog.db_error(e);
    let renamed = |key: &str| -> Result<String> {
        let new = format!("{to_prefix}{}", &key[from_prefix.len()..]);
        if new.len() > KEY_BYTES_MAX {
            return Err(refused(
                Refusal::NameTooLong,
                format!(
                    "{}/{new} would be longer than {KEY_BYTES_MAX} bytes",
                    r.to_bucket
                ),
            ));
        }
        Ok(new)
    };
    loop {
        // Moved keys leave the source range (the target lies outside it), so each batch starts at its start.
        let keys = keys_under(tx, &r.from_bucket, from_prefix, RENAME_BATCH).map_err(e)?;
        if keys.is_empty() {
            break;
        }
        for key in keys {
            let new = renamed(&key)?;
            move_key(tx, &r.from_bucket, &key, &r.to_bucket, &new).map_err(e)?;
        }
    }
    loop {
        let rows = rows_under(tx, &r.from_bucket, from_prefix, RENAME_BATCH).map_err(e)?;
        if rows.is_empty() {
            break;
        }
        for row in rows {
            delete_dir_row(tx, &r.from_bucket, &row.path).map_err(e)?;
            let moved = DirRecord {
                bucket: r.to_bucket.clone(),
                path: renamed(&row.path)?,
                ..row
            };
            insert_dir(tx, &moved).map_err(e)?;
        }
    }
    Ok(())
}
