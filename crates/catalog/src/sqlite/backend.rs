//! How the catalog runs its transactions: on the embedded back end, one SQLite database (WAL) in the data
//! directory, with group commit; on PostgreSQL through `crate::postgres` (`PgBackend::run`). Every catalog method
//! goes through [`SqlCatalog::write`], [`SqlCatalog::write_with`], [`SqlCatalog::write_unsynced`],
//! [`SqlCatalog::read`] or [`SqlCatalog::read_with`]; nothing else opens a transaction.
//!
//! One writer connection behind a mutex (SQLite allows one writer at a time anyway) and a bounded pool of reader
//! connections. Statements are prepared once per connection (`prepare_cached`).
//!
//! ## Group commit
//!
//! A durable catalog runs SQLite with `synchronous=NORMAL`: a commit appends its frames to the `-wal` file
//! without syncing, and this module makes commits durable in groups, outside the writer mutex:
//!
//! 1. Under the writer mutex, just before `COMMIT`, a write takes the next commit number (`commit_seq`).
//! 2. After releasing the writer mutex it calls [`SqlCatalog::sync_through`] with its number. That returns at
//!    once when `synced_seq` already covers it; otherwise it takes the sync mutex, checks again, reads
//!    `commit_seq` under the writer mutex (so no commit is half-written: every number up to it has finished
//!    writing its frames), fdatasyncs the `-wal` file, and publishes that number as `synced_seq`. Everyone who
//!    queued on the sync mutex meanwhile is covered by that one sync.
//!
//! Why an fdatasync of the `-wal` file is enough (checked against SQLite 3.46 `wal.c`/`pager.c`, the bundled
//! version): with `synchronous=NORMAL` SQLite still syncs for checkpoints (`CKPT_SYNC_FLAGS`): a checkpoint
//! syncs the WAL before copying frames into the database file, and syncs the database file before recording
//! that every frame was copied (`nBackfill = mxFrame`). Only then may a later writer restart the WAL and
//! overwrite frames from the start (`walRestartLog` requires `nBackfill == mxFrame`), and it syncs the new WAL
//! header first (`syncHeader`, which also fsyncs the directory of a newly created `-wal`). So a committed frame
//! is either still in the `-wal` file at its place, where our fdatasync covers it together with every frame
//! before it, or already in a synced database file. A later transaction never rewrites a committed frame in
//! place (only its own uncommitted ones). SQLite deletes the WAL only when its last connection closes, after a
//! synced checkpoint; the writer connection lives as long as the catalog, so the catalog opens the `-wal`
//! file once (by the name SQLite reports, symbolic links resolved) and syncs that descriptor.
//!
//! **Reads wait too.** A committed but not yet synced change is already visible to readers. So that no call
//! returns anything a crash could take back (as with `synchronous=FULL`, where a commit became visible only
//! once durable), every call, read or write, ends with `sync_through(commit_seq)`: it costs nothing when no
//! commit is pending, and at most a group sync under write load. The one exception is `touch_contents`
//! (`last_access_ms`, an LRU hint): its commit takes no sequence number, so readers never wait for its sync (a
//! GET would otherwise wait for the sync of the reads recorded before it); a crash may take it back.
//!
//! **A failed sync is final.** After a failed fdatasync the kernel may have dropped the dirty pages, so a
//! later successful sync proves nothing: the catalog then answers every call that depends on an unsynced
//! commit with [`CatalogError::Sync`] until it is reopened (SQLite recovers the WAL from what is on disk).
//!
//! `SqliteOptions { durable: false }` keeps `synchronous=OFF` and never syncs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rusqlite::OpenFlags;

use super::{
    schema::{migrate, MIGRATIONS, SCHEMA, SCHEMA_BASE_VERSION},
    SqlCatalog,
};
use crate::sql::{self, Connection, Transaction};
use crate::{CatalogError, Result};

/// Reader connections kept open at most.
pub(super) const READERS_MAX: usize = 8;

/// Options of [`SqlCatalog::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Every call returns only once each commit it made or saw is durable (as acknowledgements require):
    /// `synchronous=NORMAL` plus group commit (see the module doc). `false` gives `synchronous=OFF` and no
    /// syncing: only for tests and benchmarks, a crash may lose recent commits.
    pub durable: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions { durable: true }
    }
}

pub(super) enum Backend {
    Sqlite(SqliteBackend),
    Postgres(crate::postgres::PgBackend),
}

/// The SQLite back end: a writer connection, readers, and group commit of the WAL.
pub(super) struct SqliteBackend {
    path: PathBuf,
    /// The `-wal` file SQLite writes (next to the database file, symbolic links resolved).
    wal_path: PathBuf,
    options: SqliteOptions,
    writer: Mutex<rusqlite::Connection>,
    readers: Mutex<Vec<rusqlite::Connection>>,
    /// The `-wal` file, opened once: SQLite removes it only when its last connection closes, and the writer
    /// connection lives as long as the catalog. Declared after the connections so it closes after them.
    wal: std::fs::File,
    /// Number of the last write transaction that started `COMMIT` (taken under the writer mutex).
    commit_seq: AtomicU64,
    /// Every commit numbered up to this one is durable.
    synced_seq: AtomicU64,
    /// Held while syncing the WAL; holds the message of a failed sync (then nothing more is acknowledged).
    sync_failure: Mutex<Option<String>>,
    /// Tests: make the next WAL sync fail.
    #[cfg(test)]
    fail_next_sync: std::sync::atomic::AtomicBool,
}

impl SqlCatalog {
    /// Open (or create) the SQLite catalog at `path`, durable.
    pub fn open(path: &Path) -> Result<SqlCatalog> {
        SqlCatalog::open_with(path, SqliteOptions::default())
    }

    /// Open (or create) the SQLite catalog at `path` with options.
    pub fn open_with(path: &Path, options: SqliteOptions) -> Result<SqlCatalog> {
        let writer = SqliteBackend::connect(path, options, true)?;
        let (wal_path, wal) = SqliteBackend::open_wal(path, &writer)?;
        let catalog = SqlCatalog {
            backend: Backend::Sqlite(SqliteBackend {
                path: path.to_path_buf(),
                wal_path,
                options,
                writer: Mutex::new(writer),
                readers: Mutex::new(Vec::new()),
                wal,
                commit_seq: AtomicU64::new(0),
                synced_seq: AtomicU64::new(0),
                sync_failure: Mutex::new(None),
                #[cfg(test)]
                fail_next_sync: std::sync::atomic::AtomicBool::new(false),
            }),
            name: path.display().to_string(),
        };
        // A schema-2 database has no `meta` version row but has its tables: SCHEMA only creates what is missing.
        catalog.write(|tx| {
            tx.execute_batch(SCHEMA)?;
            migrate(tx, "", SCHEMA_BASE_VERSION, MIGRATIONS)
        })?;
        if options.durable {
            // SQLite syncs the directory for a new `-wal` but never for a new database file. Both live in the
            // directory of SQLite's full (resolved) path.
            let wal_path = &catalog.sqlite().wal_path;
            let directory = wal_path.parent().unwrap_or(Path::new("/"));
            std::fs::File::open(directory)
                .and_then(|d| d.sync_all())
                .map_err(|source| CatalogError::Sync {
                    path: directory.display().to_string(),
                    source,
                })?;
        }
        Ok(catalog)
    }

    /// Open the PostgreSQL catalog at `url` (`postgresql://user:password@host:port/database`), creating or
    /// migrating its schema. Fails with an error naming the URL (without its password) when the server cannot be
    /// reached, refuses the login, or is not PostgreSQL.
    pub fn open_postgres(url: &str, options: crate::PostgresOptions) -> Result<SqlCatalog> {
        let backend = crate::postgres::PgBackend::connect(url, options)?;
        let catalog = SqlCatalog {
            name: backend.shown_url().to_string(),
            backend: Backend::Postgres(backend),
        };
        catalog.write(|tx| {
            migrate(
                tx,
                crate::postgres::PG_SCHEMA,
                crate::postgres::PG_SCHEMA_BASE_VERSION,
                crate::postgres::PG_MIGRATIONS,
            )
        })?;
        Ok(catalog)
    }

    /// The back end's name: `sqlite` or `postgresql`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgresql",
        }
    }

    /// Transactions run again after a serialization failure or a deadlock since the catalog was opened
    /// (PostgreSQL; always 0 on SQLite, whose one writer never conflicts).
    pub fn retries(&self) -> u64 {
        match &self.backend {
            Backend::Sqlite(_) => 0,
            Backend::Postgres(pg) => pg.retries(),
        }
    }

    /// Tests of the retry path: the next `n` transactions fail just before `COMMIT` with a serialization
    /// failure raised by the server (SQLSTATE 40001). No effect on SQLite.
    #[doc(hidden)]
    pub fn inject_serialization_failures(&self, n: u32) {
        if let Backend::Postgres(pg) = &self.backend {
            pg.inject_serialization_failures(n);
        }
    }

    #[cfg(test)]
    pub(super) fn sqlite(&self) -> &SqliteBackend {
        match &self.backend {
            Backend::Sqlite(s) => s,
            Backend::Postgres(_) => panic!("not a SQLite catalog"),
        }
    }

    #[cfg(not(test))]
    pub(super) fn sqlite(&self) -> &SqliteBackend {
        match &self.backend {
            Backend::Sqlite(s) => s,
            Backend::Postgres(_) => unreachable!("only called on SQLite"),
        }
    }

    pub(super) fn db_error(&self, source: sql::Error) -> CatalogError {
        // Conversion failures carry our own error.
        if let sql::Error::Conversion(inner) = &source {
            if let Some(e) = inner.downcast_ref::<CatalogError>() {
                return CatalogError::Corrupt(e.to_string());
            }
        }
        CatalogError::Database {
            path: self.name.clone(),
            source,
        }
    }

    /// Run `f` in one write transaction (SQLite: IMMEDIATE, the write lock is taken at the start; PostgreSQL:
    /// SERIALIZABLE, run again on a serialization failure).
    pub(super) fn write<T>(&self, mut f: impl FnMut(&Transaction) -> sql::Result<T>) -> Result<T> {
        self.write_with(|tx| f(tx).map_err(|e| self.db_error(e)))
    }

    /// Like [`Self::write`] for bodies that return catalog errors (rolled back on error). Returns once the
    /// commit, and every commit the body saw, is durable.
    pub(super) fn write_with<T>(&self, mut f: impl FnMut(&Transaction) -> Result<T>) -> Result<T> {
        let sqlite = match &self.backend {
            Backend::Sqlite(s) => s,
            Backend::Postgres(pg) => return pg.run(false, &self.name, |e| self.db_error(e), f),
        };
        let (result, seen_seq) = {
            let mut conn = sqlite.writer.lock();
            let raw = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| self.db_error(e.into()))?;
            match f(&Connection::sqlite(&raw)) {
                Ok(value) => {
                    let seq = sqlite.commit_seq.fetch_add(1, Ordering::SeqCst) + 1;
                    raw.commit().map_err(|e| self.db_error(e.into()))?;
                    (Ok(value), seq)
                }
                // Rolled back; the error may still rest on commits that are not durable yet.
                Err(e) => (Err(e), sqlite.commit_seq.load(Ordering::SeqCst)),
            }
        };
        sqlite.sync_through(seen_seq)?;
        result
    }

    /// Like [`Self::write`] for changes a crash may take back (LRU hints): the commit takes no sequence number,
    /// so no call waits for its sync; the next durable commit's sync covers it (the WAL is synced in order).
    pub(super) fn write_unsynced(
        &self,
        mut f: impl FnMut(&Transaction) -> sql::Result<()>,
    ) -> Result<()> {
        let sqlite = match &self.backend {
            Backend::Sqlite(s) => s,
            Backend::Postgres(pg) => {
                return pg.run(
                    false,
                    &self.name,
                    |e| self.db_error(e),
                    |tx| f(tx).map_err(|e| self.db_error(e)),
                )
            }
        };
        let mut conn = sqlite.writer.lock();
        let raw = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.db_error(e.into()))?;
        f(&Connection::sqlite(&raw)).map_err(|e| self.db_error(e))?;
        raw.commit().map_err(|e| self.db_error(e.into()))
    }

    /// Run `f` on a reader connection (a snapshot of the last commit; PostgreSQL: a SERIALIZABLE READ ONLY
    /// transaction). Returns once every commit the snapshot may include is durable.
    pub(super) fn read<T>(&self, mut f: impl FnMut(&Connection) -> sql::Result<T>) -> Result<T> {
        self.read_with(|c| f(c).map_err(|e| self.db_error(e)))
    }

    /// Like [`Self::read`] for bodies that return catalog errors.
    pub(super) fn read_with<T>(&self, mut f: impl FnMut(&Connection) -> Result<T>) -> Result<T> {
        let sqlite = match &self.backend {
            Backend::Sqlite(s) => s,
            Backend::Postgres(pg) => return pg.run(true, &self.name, |e| self.db_error(e), f),
        };
        let mut conn = match sqlite.readers.lock().pop() {
            Some(c) => c,
            None => SqliteBackend::connect(&sqlite.path, sqlite.options, false)?,
        };
        // One read transaction, so that every statement of `f` sees the same commit (outside a transaction
        // each statement would take its own snapshot, and a count per state could see a content twice).
        let result = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred) {
            Ok(tx) => {
                let result = f(&Connection::sqlite(&tx));
                // Ending a read transaction cannot lose anything; a failure here surfaces on the next use.
                let _ = tx.finish();
                result
            }
            Err(e) => Err(self.db_error(e.into())),
        };
        // A commit visible to `f` took its number before it became visible, hence before this load.
        let seen_seq = sqlite.commit_seq.load(Ordering::SeqCst);
        {
            let mut readers = sqlite.readers.lock();
            if readers.len() < READERS_MAX {
                readers.push(conn);
            }
        }
        let value = result?;
        sqlite.sync_through(seen_seq)?;
        Ok(value)
    }
}

impl SqliteBackend {
    pub(super) fn connect(
        path: &Path,
        options: SqliteOptions,
        writer: bool,
    ) -> Result<rusqlite::Connection> {
        let db = |source: rusqlite::Error| CatalogError::Database {
            path: path.display().to_string(),
            source: source.into(),
        };
        let flags = if writer {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = rusqlite::Connection::open_with_flags(path, flags).map_err(db)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(db)?;
        if writer {
            conn.pragma_update(None, "journal_mode", "WAL")
                .map_err(db)?;
        }
        conn.pragma_update(
            None,
            "synchronous",
            if options.durable { "NORMAL" } else { "OFF" },
        )
        .map_err(db)?;
        conn.pragma_update(None, "foreign_keys", "OFF")
            .map_err(db)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(conn)
    }

    /// Open the `-wal` file of the writer connection `conn` (which is in WAL mode) for syncing.
    pub(super) fn open_wal(
        path: &Path,
        conn: &rusqlite::Connection,
    ) -> Result<(PathBuf, std::fs::File)> {
        let db = |source: rusqlite::Error| CatalogError::Database {
            path: path.display().to_string(),
            source: source.into(),
        };
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(db)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(CatalogError::Corrupt(format!(
                "catalog {}: SQLite runs it in journal mode {mode:?}, not WAL (does the file system support \
                 shared memory?)",
                path.display()
            )));
        }
        // A read transaction opens (creates) the WAL file.
        conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(db)?;
        // The name SQLite uses: its full path of the database file, plus "-wal".
        let Some(db_file) = conn.path().filter(|p| !p.is_empty()) else {
            return Err(CatalogError::Corrupt(format!(
                "catalog {}: SQLite reports no file name for the database",
                path.display()
            )));
        };
        let wal_path = PathBuf::from(format!("{db_file}-wal"));
        let wal = std::fs::File::open(&wal_path).map_err(|source| CatalogError::Sync {
            path: wal_path.display().to_string(),
            source,
        })?;
        Ok((wal_path, wal))
    }

    /// Return once every commit numbered up to `seq` is durable, syncing the WAL for everyone waiting if
    /// needed (group commit, see the module doc).
    pub(super) fn sync_through(&self, seq: u64) -> Result<()> {
        if !self.options.durable || self.synced_seq.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let mut failure = self.sync_failure.lock();
        if self.synced_seq.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        if let Some(message) = failure.as_ref() {
            return Err(CatalogError::Sync {
                path: self.wal_path.display().to_string(),
                source: std::io::Error::other(format!(
                    "an earlier sync failed ({message}); reopen the catalog"
                )),
            });
        }
        // No commit is in progress while we hold the writer mutex: every number up to `target` has written
        // all of its frames.
        let target = {
            let _writer = self.writer.lock();
            self.commit_seq.load(Ordering::SeqCst)
        };
        assert!(
            target >= seq,
            "commit {seq} waits for durability but only {target} commits started"
        );
        match self.sync_wal() {
            Ok(()) => {
                self.synced_seq.store(target, Ordering::Release);
                Ok(())
            }
            Err(source) => {
                *failure = Some(source.to_string());
                Err(CatalogError::Sync {
                    path: self.wal_path.display().to_string(),
                    source,
                })
            }
        }
    }

    /// fdatasync the `-wal` file.
    pub(super) fn sync_wal(&self) -> std::io::Result<()> {
        #[cfg(test)]
        if self.fail_next_sync.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::other("injected sync failure"));
        }
        self.wal.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::params;
    use crate::sqlite::schema::SCHEMA_VERSION;
    use crate::*;

    pub(super) fn put(c: &SqlCatalog, key: &str, n: u8) -> Result<PutOutcome> {
        let id = ContentId {
            hash: [n; 32],
            encoding: Encoding::Identity,
        };
        let object = ObjectRecord {
            bucket: "b".into(),
            key: key.into(),
            content: id,
            size_bytes: 1,
            etag: "\"e\"".into(),
            last_modified_ms: 1,
            content_type: None,
            user_metadata: vec![],
            checksums: vec![],
            dataset: "b/".into(),
            version_id: String::new(),
            attributes: Default::default(),
            expires_ms: None,
        };
        let content = NewContent {
            id,
            logical_bytes: 1,
            stored_bytes: 1,
            stored_form: StoredForm::Raw,
            chunk_index: vec![],
            md5: [n; 16],
            cache_path: format!("{key}.{n}"),
            inline: None,
        };
        c.put_object(&object, &content, 1)
    }

    #[test]
    pub(super) fn a_version_3_catalog_gets_the_mount_tables_keeping_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        {
            let c = SqlCatalog::open(&path).unwrap();
            c.create_bucket("b", &BucketSettings::default()).unwrap();
            put(&c, "k", 1).unwrap();
            // Back to what version 3 had.
            c.write(|tx| {
                tx.execute_batch(
                    "ALTER TABLE contents DROP COLUMN persisted_ms; DROP TABLE fs_directories;
                     DROP INDEX objects_expiring;
                     ALTER TABLE objects DROP COLUMN version_id; ALTER TABLE objects DROP COLUMN version_seq;
                     ALTER TABLE objects DROP COLUMN attributes; ALTER TABLE objects DROP COLUMN expires_ms;
                     ALTER TABLE buckets DROP COLUMN archive; ALTER TABLE contents DROP COLUMN pinned_until_ms;
                     DROP TABLE object_versions; DROP TABLE counters; DROP TABLE restores;
                     DROP TABLE ops_history; DROP TABLE webhooks;
                     DROP TABLE cache_inline; DROP TABLE access_keys; DROP TABLE access_grants;
                     DROP TABLE bucket_access; DROP TABLE object_acls; ALTER TABLE multipart_parts DROP COLUMN checksums;
                     DROP TABLE completed_uploads; ALTER TABLE content_parts DROP COLUMN checksums;
                     DROP TABLE smart_readings;
                     UPDATE meta SET value = '3' WHERE key = 'schema_version';",
                )
            })
            .unwrap();
        }
        let c = SqlCatalog::open(&path).unwrap();
        let version: String = c
            .read(|c| {
                c.query_row(
                    "SELECT value FROM meta WHERE key = 'schema_version'",
                    params![],
                    |r| r.get(0),
                )
            })
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION.to_string());
        assert!(c.get_object("b", "k").unwrap().is_some());
        let id = ContentId {
            hash: [1; 32],
            encoding: Encoding::Identity,
        };
        assert_eq!(c.persisted_ms(&id).unwrap(), None);
        assert_eq!(c.fs_lookup("b", "none").unwrap(), None);
        // A version this build does not know is refused.
        c.write(|tx| {
            tx.execute(
                "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
                params![],
            )
        })
        .unwrap();
        drop(c);
        assert!(SqlCatalog::open(&path).is_err());
    }

    #[test]
    pub(super) fn every_durable_call_returns_with_its_commit_synced() {
        let dir = tempfile::tempdir().unwrap();
        let c = SqlCatalog::open(&dir.path().join("c.sqlite")).unwrap();
        c.create_bucket("b", &BucketSettings::default()).unwrap();
        for n in 0..5 {
            put(&c, &format!("k{n}"), n).unwrap();
            let committed = c.sqlite().commit_seq.load(Ordering::SeqCst);
            assert!(committed > 0);
            assert_eq!(c.sqlite().synced_seq.load(Ordering::SeqCst), committed);
        }
    }

    #[test]
    pub(super) fn the_wal_synced_is_the_one_sqlite_writes_even_through_a_symbolic_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        let real = dir.path().join("real").join("c.sqlite");
        SqlCatalog::open(&real).unwrap();
        let link = dir.path().join("link.sqlite");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let c = SqlCatalog::open(&link).unwrap();
        let expected = std::fs::canonicalize(dir.path().join("real"))
            .unwrap()
            .join("c.sqlite-wal");
        assert_eq!(c.sqlite().wal_path, expected);
        c.create_bucket("b", &BucketSettings::default()).unwrap();
        assert!(std::fs::metadata(&expected).unwrap().len() > 0);
        assert!(!dir.path().join("link.sqlite-wal").exists());
    }

    #[test]
    pub(super) fn a_non_durable_catalog_never_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let c = SqlCatalog::open_with(
            &dir.path().join("c.sqlite"),
            SqliteOptions { durable: false },
        )
        .unwrap();
        c.create_bucket("b", &BucketSettings::default()).unwrap();
        put(&c, "k", 1).unwrap();
        assert!(c.sqlite().commit_seq.load(Ordering::SeqCst) >= 2);
        assert_eq!(c.sqlite().synced_seq.load(Ordering::SeqCst), 0);
    }

    #[test]
    pub(super) fn a_failed_wal_sync_acknowledges_nothing_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        let c = SqlCatalog::open(&path).unwrap();
        c.create_bucket("b", &BucketSettings::default()).unwrap();
        put(&c, "before", 1).unwrap();
        c.sqlite().fail_next_sync.store(true, Ordering::SeqCst);
        assert!(matches!(put(&c, "k", 2), Err(CatalogError::Sync { .. })));
        // The row is committed and visible, but not known durable: reads refuse it rather than return it.
        assert!(matches!(
            c.get_object("b", "k"),
            Err(CatalogError::Sync { .. })
        ));
        // A later sync succeeding would prove nothing (the kernel may have dropped the pages).
        assert!(matches!(put(&c, "k2", 3), Err(CatalogError::Sync { .. })));
        drop(c);
        let c = SqlCatalog::open(&path).unwrap();
        assert!(c.get_object("b", "before").unwrap().is_some());
        put(&c, "after", 4).unwrap();
        assert!(c.check().unwrap().is_empty());
    }
}
