//! The journal: SQLite (WAL) on the data directory's flash.
//!
//! Every state change of a write promise, the written map, defect ranges, scrub progress and failed disks is one
//! durable SQLite transaction. The in-memory copies in the engine are updated only after the transaction
//! committed, so memory never runs ahead of the journal. Schema: see `docs/engine.md` "Journal".
//!
//! ## Group commit
//!
//! SQLite runs with `synchronous=NORMAL`: a commit appends its frames to the `-wal` file without syncing, and
//! this module makes commits durable in groups, outside the connection's mutex (the catalog's scheme,
//! `permafrost-catalog` `sqlite.rs`, which also explains why an fdatasync of the `-wal` file is enough):
//!
//! 1. Under the connection mutex, just before `COMMIT`, a transaction takes the next commit number.
//! 2. After releasing the mutex, [`Journal::sync_through`] with that number returns at once when an earlier sync
//!    already covered it; otherwise it takes the sync mutex, checks again, reads the last commit number under the
//!    connection mutex (no commit is half-written then), fdatasyncs the `-wal` file and publishes that number.
//!    Everyone who queued on the sync mutex meanwhile is covered by that one sync.
//!
//! **Invariant.** [`Journal::batch`] returns only once its transaction is durable, as with `synchronous=FULL`;
//! [`Journal::commit`] returns once it is committed (visible on this connection) and its caller must call
//! [`Journal::sync_through`] before it acts on the change — before any disk is written, anything acknowledged or
//! any lock released that let another thread act on it. The WAL is synced in order, so a sync covers every
//! commit before it: a thread that saw a committed change (in the journal or in the in-memory maps, which follow
//! commits) and then syncs its own later commit has made that change durable too. Several chunks in flight thus
//! share one WAL sync per round instead of paying one each, and no thread waits for another's sync while holding
//! the connection. **A failed sync is final**: after a failed fdatasync the kernel may have dropped the dirty
//! pages, so every later sync fails too until the engine is reopened (SQLite recovers the WAL from the disk).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use permafrost_disk::power::{PowerState, PowerStats};

use crate::ages::RangeAges;
use crate::rangeset::RangeSet;
use crate::WriteMode;

/// Schema version stored in `meta`.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// A data disk added after `grid init` (table `added_disks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AddedDiskRow {
    pub disk: usize,
    pub hpg: usize,
    pub column: usize,
    /// Its `DiskSpec` as JSON.
    pub spec_json: String,
}

/// A parity group added after `grid init` (table `added_groups`): its new parity disk `disk`, the group's hPG, the
/// parity disk's column and the data disks moved into the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AddedGroupRow {
    pub disk: usize,
    pub hpg: usize,
    pub column: usize,
    pub members: Vec<usize>,
    /// The parity disk's `DiskSpec` as JSON.
    pub spec_json: String,
}

/// The four disks of a promise, in the order their marks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Data = 0,
    HParity = 1,
    VParity = 2,
    VhParity = 3,
}

pub(crate) const PARITY_SLOTS: [Slot; 3] = [Slot::HParity, Slot::VParity, Slot::VhParity];

impl Slot {
    fn start_column(self) -> &'static str {
        ["d_start", "hp_start", "vp_start", "vhp_start"][self as usize]
    }
    fn finish_column(self) -> &'static str {
        ["d_finish", "hp_finish", "vp_finish", "vhp_finish"][self as usize]
    }
}

/// A start or finish mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    Start,
    Finish,
}

/// One journaled write promise chunk (one `txn_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PromiseRow {
    pub txn_id: u64,
    pub mode: WriteMode,
    /// Data disk and its parity disks, indexed by [`Slot`].
    pub disks: [usize; 4],
    /// Logical range of the chunk's I/O (stripe aligned) on all four disks.
    pub offset: u64,
    pub length: u64,
    /// Start and finish marks (ms since the epoch, 0 = not set), indexed by [`Slot`].
    pub starts: [u64; 4],
    pub finishes: [u64; 4],
    /// The whole range was unwritten on the data disk before this promise.
    pub data_was_unwritten: bool,
}

/// Names of the two range tables.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RangeTable {
    /// Written map, in stripe units.
    Written,
    /// Defect ranges, in bytes.
    Defects,
}

impl RangeTable {
    fn name(self) -> &'static str {
        match self {
            RangeTable::Written => "written",
            RangeTable::Defects => "defects",
        }
    }
}

/// Scrub progress of one disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ScrubRow {
    pub cursor: u64,
    /// When the last complete pass finished (ms since the epoch, 0 = never).
    pub last_pass_ms: u64,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
        .max(1)
}

/// Milliseconds per state indexed by [`PowerState::index`], from the journal's columns (off, spinning up, idle,
/// active).
fn power_ms_by_index(by_column: [u64; 4]) -> [u64; 4] {
    let mut ms = [0; 4];
    for (state, value) in [
        PowerState::Off,
        PowerState::SpinningUp,
        PowerState::Idle,
        PowerState::Active,
    ]
    .into_iter()
    .zip(by_column)
    {
        ms[state.index()] = value;
    }
    ms
}

/// The journal of one grid.
pub(crate) struct Journal {
    conn: Mutex<Connection>,
    /// The `-wal` file SQLite writes, opened once (SQLite removes it only when its last connection closes, and
    /// `conn` lives as long as the journal). Declared after `conn` so it closes after it.
    wal: std::fs::File,
    wal_path: PathBuf,
    /// Number of the last transaction that started `COMMIT` (taken under the connection mutex).
    commit_seq: AtomicU64,
    /// Every commit numbered up to this one is durable.
    synced_seq: AtomicU64,
    /// Held while syncing the WAL; holds the message of a failed sync (then nothing more is durable).
    sync_failure: Mutex<Option<String>>,
    /// WAL syncs done (each covers every commit before it).
    syncs: AtomicU64,
    /// Tells this journal's commits apart from another's in [`LAST_COMMIT`].
    id: u64,
}

/// Journal ids, for [`LAST_COMMIT`].
static JOURNAL_IDS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// `(journal id, commit number)` of the last transaction this thread committed: the write paths assert that
    /// it is durable before they touch a disk ([`Journal::own_commits_durable`]).
    static LAST_COMMIT: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// One journal transaction in progress.
pub(crate) struct Batch<'a> {
    tx: Transaction<'a>,
}

impl Journal {
    /// Open or create the journal at `path`.
    pub(crate) fn open(path: &Path) -> crate::Result<Journal> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(crate::Error::Io(format!(
                "journal {}: SQLite runs it in journal mode {mode:?}, not WAL (does the file system support \
                 shared memory?)",
                path.display()
            )));
        }
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS promises(
                txn_id INTEGER PRIMARY KEY, mode INTEGER NOT NULL,
                disk INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
                hp INTEGER NOT NULL, vp INTEGER NOT NULL, vhp INTEGER NOT NULL,
                d_start INTEGER NOT NULL DEFAULT 0, d_finish INTEGER NOT NULL DEFAULT 0,
                hp_start INTEGER NOT NULL DEFAULT 0, hp_finish INTEGER NOT NULL DEFAULT 0,
                vp_start INTEGER NOT NULL DEFAULT 0, vp_finish INTEGER NOT NULL DEFAULT 0,
                vhp_start INTEGER NOT NULL DEFAULT 0, vhp_finish INTEGER NOT NULL DEFAULT 0,
                data_was_unwritten INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS defects(disk INTEGER NOT NULL, start INTEGER NOT NULL, end INTEGER NOT NULL,
                PRIMARY KEY(disk, start));
             CREATE TABLE IF NOT EXISTS written(disk INTEGER NOT NULL, start INTEGER NOT NULL, end INTEGER NOT NULL,
                PRIMARY KEY(disk, start));
             CREATE TABLE IF NOT EXISTS scrub(disk INTEGER PRIMARY KEY, cursor INTEGER NOT NULL,
                last_pass_ms INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS failed(disk INTEGER PRIMARY KEY, since_ms INTEGER NOT NULL,
                reason TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS scrub_ages(disk INTEGER NOT NULL, start INTEGER NOT NULL,
                end INTEGER NOT NULL, verified_ms INTEGER NOT NULL, PRIMARY KEY(disk, start));
             CREATE TABLE IF NOT EXISTS power(disk INTEGER PRIMARY KEY, spin_ups INTEGER NOT NULL,
                ms_off INTEGER NOT NULL, ms_spinning_up INTEGER NOT NULL, ms_idle INTEGER NOT NULL,
                ms_active INTEGER NOT NULL, joules REAL NOT NULL);
             CREATE TABLE IF NOT EXISTS added_disks(disk INTEGER PRIMARY KEY, hpg INTEGER NOT NULL,
                col INTEGER NOT NULL, spec TEXT NOT NULL, added_ms INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS added_groups(disk INTEGER PRIMARY KEY, hpg INTEGER NOT NULL,
                col INTEGER NOT NULL, members TEXT NOT NULL, spec TEXT NOT NULL, added_ms INTEGER NOT NULL);",
        )?;
        let version: Option<String> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        if version.is_none() {
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?1)",
                params![SCHEMA_VERSION.to_string()],
            )?;
        }
        // The name SQLite uses: its full path of the database file, plus "-wal" (the statements above opened it).
        let db_file = conn
            .path()
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                crate::Error::Io(format!(
                    "journal {}: SQLite reports no file name",
                    path.display()
                ))
            })?;
        let wal_path = PathBuf::from(format!("{db_file}-wal"));
        let wal = std::fs::File::open(&wal_path).map_err(|e| {
            crate::Error::Io(format!("journal: cannot open {}: {e}", wal_path.display()))
        })?;
        let journal = Journal {
            conn: Mutex::new(conn),
            wal,
            wal_path,
            commit_seq: AtomicU64::new(0),
            synced_seq: AtomicU64::new(0),
            sync_failure: Mutex::new(None),
            syncs: AtomicU64::new(0),
            id: JOURNAL_IDS.fetch_add(1, Ordering::Relaxed),
        };
        // What the statements above committed, and the directory entries of a new database and WAL.
        journal.sync_wal()?;
        let directory = journal.wal_path.parent().unwrap_or(Path::new("/"));
        std::fs::File::open(directory)
            .and_then(|d| d.sync_all())
            .map_err(|e| {
                crate::Error::Io(format!(
                    "journal: cannot sync directory {}: {e}",
                    directory.display()
                ))
            })?;
        Ok(journal)
    }

    /// Run `f` in one transaction and return once it is durable.
    pub(crate) fn batch<R>(
        &self,
        f: impl FnOnce(&Batch) -> rusqlite::Result<R>,
    ) -> crate::Result<R> {
        let (result, seq) = self.commit(f)?;
        self.sync_through(seq)?;
        Ok(result)
    }

    /// Run `f` in one transaction and commit it without waiting for durability; returns its commit number, which
    /// the caller passes to [`Journal::sync_through`] before acting on the change (module doc). An error rolls
    /// the transaction back.
    pub(crate) fn commit<R>(
        &self,
        f: impl FnOnce(&Batch) -> rusqlite::Result<R>,
    ) -> crate::Result<(R, u64)> {
        let mut conn = self.conn.lock();
        let tx = conn.transaction()?;
        let batch = Batch { tx };
        let result = f(&batch)?;
        let seq = self.commit_seq.fetch_add(1, Ordering::SeqCst) + 1;
        batch.tx.commit()?;
        LAST_COMMIT.with(|c| c.set((self.id, seq)));
        Ok((result, seq))
    }

    /// Is every transaction this thread committed durable? The write paths assert it before they write a disk:
    /// a step acted on before its sync would be caught by every write test (module doc, invariant).
    pub(crate) fn own_commits_durable(&self) -> bool {
        let (id, seq) = LAST_COMMIT.with(|c| c.get());
        id != self.id || self.synced_seq.load(Ordering::Acquire) >= seq
    }

    /// WAL syncs so far (each covering every commit before it).
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Return once every commit numbered up to `seq` is durable, syncing the WAL for everyone waiting if needed.
    pub(crate) fn sync_through(&self, seq: u64) -> crate::Result<()> {
        if self.synced_seq.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let mut failure = self.sync_failure.lock();
        if self.synced_seq.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        if let Some(message) = failure.as_ref() {
            return Err(crate::Error::Io(format!(
                "journal {}: an earlier sync failed ({message}); reopen the engine",
                self.wal_path.display()
            )));
        }
        // No commit is in progress while we hold the connection: every number up to `target` has written all of
        // its frames.
        let target = {
            let _conn = self.conn.lock();
            self.commit_seq.load(Ordering::SeqCst)
        };
        match self.sync_wal() {
            Ok(()) => {
                self.synced_seq.store(target, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                *failure = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// fdatasync the `-wal` file.
    fn sync_wal(&self) -> crate::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.wal.sync_data().map_err(|e| {
            crate::Error::Io(format!(
                "journal: cannot sync {}: {e}",
                self.wal_path.display()
            ))
        })
    }

    pub(crate) fn schema_version(&self) -> rusqlite::Result<u32> {
        let conn = self.conn.lock();
        let v: String = conn.query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )?;
        Ok(v.parse().unwrap_or(0))
    }

    /// The next unused txn id.
    pub(crate) fn next_txn(&self) -> rusqlite::Result<u64> {
        let conn = self.conn.lock();
        let stored: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'next_txn'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let stored = stored.and_then(|s| s.parse::<u64>().ok()).unwrap_or(1);
        let max_row: i64 =
            conn.query_row("SELECT COALESCE(MAX(txn_id), 0) FROM promises", [], |r| {
                r.get(0)
            })?;
        Ok(stored.max(max_row as u64 + 1))
    }

    pub(crate) fn promises(&self) -> rusqlite::Result<Vec<PromiseRow>> {
        let conn = self.conn.lock();
        let mut stmt = conn.prepare(
            "SELECT txn_id, mode, disk, hp, vp, vhp, offset, length,
                    d_start, hp_start, vp_start, vhp_start, d_finish, hp_finish, vp_finish, vhp_finish,
                    data_was_unwritten FROM promises ORDER BY txn_id",
        )?;
        let rows = stmt.query_map([], |r| {
            let g = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)? as u64) };
            Ok(PromiseRow {
                txn_id: g(0)?,
                mode: WriteMode::from_code(g(1)? as u8).unwrap_or(WriteMode::Direct),
                disks: [
                    g(2)? as usize,
                    g(3)? as usize,
                    g(4)? as usize,
                    g(5)? as usize,
                ],
                offset: g(6)?,
                length: g(7)?,
                starts: [g(8)?, g(9)?, g(10)?, g(11)?],
                finishes: [g(12)?, g(13)?, g(14)?, g(15)?],
                data_was_unwritten: g(16)? != 0,
            })
        })?;
        rows.collect()
    }

    pub(crate) fn promise_count(&self) -> rusqlite::Result<u64> {
        let conn = self.conn.lock();
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM promises", [], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// Total rows of all tables (for status).
    pub(crate) fn row_count(&self) -> rusqlite::Result<u64> {
        let conn = self.conn.lock();
        let mut total = 0i64;
        for table in [
            "promises",
            "defects",
            "written",
            "scrub",
            "failed",
            "scrub_ages",
            "power",
        ] {
            let n: i64 =
                conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?;
            total += n;
        }
        Ok(total as u64)
    }

    /// All ranges of a range table, by disk.
    pub(crate) fn ranges(
        &self,
        table: RangeTable,
        disk_count: usize,
    ) -> rusqlite::Result<Vec<RangeSet>> {
        let conn = self.conn.lock();
        let mut sets = vec![RangeSet::new(); disk_count];
        let mut stmt = conn.prepare(&format!("SELECT disk, start, end FROM {}", table.name()))?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (disk, start, end) = row?;
            if let Some(set) = sets.get_mut(disk as usize) {
                set.insert(start as u64, end as u64);
            }
        }
        Ok(sets)
    }

    pub(crate) fn scrub_rows(&self, disk_count: usize) -> rusqlite::Result<Vec<ScrubRow>> {
        let conn = self.conn.lock();
        let mut rows = vec![ScrubRow::default(); disk_count];
        let mut stmt = conn.prepare("SELECT disk, cursor, last_pass_ms FROM scrub")?;
        let it = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in it {
            let (disk, cursor, last) = row?;
            if let Some(slot) = rows.get_mut(disk as usize) {
                *slot = ScrubRow {
                    cursor: cursor as u64,
                    last_pass_ms: last as u64,
                };
            }
        }
        Ok(rows)
    }

    /// When each range of each disk was last known good.
    pub(crate) fn ages(&self, disk_count: usize) -> rusqlite::Result<Vec<RangeAges>> {
        let conn = self.conn.lock();
        let mut ages = vec![RangeAges::new(); disk_count];
        let mut stmt = conn.prepare("SELECT disk, start, end, verified_ms FROM scrub_ages")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (disk, start, end, ms) = row?;
            if let Some(ages) = ages.get_mut(disk as usize) {
                ages.load(start as u64, end as u64, ms as u64);
            }
        }
        Ok(ages)
    }

    /// Power counters of each disk accumulated by the processes that had the grid open before this one.
    pub(crate) fn power(&self, disk_count: usize) -> rusqlite::Result<Vec<PowerStats>> {
        let conn = self.conn.lock();
        let mut stats = vec![PowerStats::default(); disk_count];
        let mut stmt = conn.prepare(
            "SELECT disk, spin_ups, ms_off, ms_spinning_up, ms_idle, ms_active, joules FROM power",
        )?;
        let rows = stmt.query_map([], |r| {
            let disk = r.get::<_, i64>(0)? as usize;
            let g = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)? as u64) };
            Ok((
                disk,
                PowerStats {
                    spin_ups: g(1)?,
                    ms_in_state: power_ms_by_index([g(2)?, g(3)?, g(4)?, g(5)?]),
                    joules: r.get(6)?,
                },
            ))
        })?;
        for row in rows {
            let (disk, row) = row?;
            if let Some(slot) = stats.get_mut(disk) {
                *slot = row;
            }
        }
        Ok(stats)
    }

    /// The data disks added to the grid after `grid init` (`Geometry::grown`), in disk order, with the JSON of
    /// their `DiskSpec` as it was when added. Their count is the geometry's version.
    pub(crate) fn added_disks(&self) -> rusqlite::Result<Vec<AddedDiskRow>> {
        let conn = self.conn.lock();
        let mut stmt =
            conn.prepare("SELECT disk, hpg, col, spec FROM added_disks ORDER BY disk")?;
        let rows = stmt.query_map([], |r| {
            Ok(AddedDiskRow {
                disk: r.get::<_, i64>(0)? as usize,
                hpg: r.get::<_, i64>(1)? as usize,
                column: r.get::<_, i64>(2)? as usize,
                spec_json: r.get(3)?,
            })
        })?;
        rows.collect()
    }

    /// The parity groups added after `grid init` (`Geometry::with_added_group`), in disk order of their parity
    /// disks.
    pub(crate) fn added_groups(&self) -> rusqlite::Result<Vec<AddedGroupRow>> {
        let conn = self.conn.lock();
        let mut stmt =
            conn.prepare("SELECT disk, hpg, col, members, spec FROM added_groups ORDER BY disk")?;
        let rows = stmt.query_map([], |r| {
            let members: String = r.get(3)?;
            Ok(AddedGroupRow {
                disk: r.get::<_, i64>(0)? as usize,
                hpg: r.get::<_, i64>(1)? as usize,
                column: r.get::<_, i64>(2)? as usize,
                members: members
                    .split(',')
                    .filter_map(|m| m.trim().parse().ok())
                    .collect(),
                spec_json: r.get(4)?,
            })
        })?;
        rows.collect()
    }

    pub(crate) fn failed_disks(&self) -> rusqlite::Result<Vec<(usize, String)>> {
        let conn = self.conn.lock();
        let mut stmt = conn.prepare("SELECT disk, reason FROM failed ORDER BY disk")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, i64>(0)? as usize, r.get::<_, String>(1)?))
        })?;
        rows.collect()
    }
}

impl Batch<'_> {
    pub(crate) fn insert_promise(&self, row: &PromiseRow) -> rusqlite::Result<()> {
        self.tx.execute(
            "INSERT INTO promises(txn_id, mode, disk, hp, vp, vhp, offset, length,
                d_start, hp_start, vp_start, vhp_start, d_finish, hp_finish, vp_finish, vhp_finish, data_was_unwritten)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            params![
                row.txn_id as i64,
                row.mode.code() as i64,
                row.disks[0] as i64,
                row.disks[1] as i64,
                row.disks[2] as i64,
                row.disks[3] as i64,
                row.offset as i64,
                row.length as i64,
                row.starts[0] as i64,
                row.starts[1] as i64,
                row.starts[2] as i64,
                row.starts[3] as i64,
                row.finishes[0] as i64,
                row.finishes[1] as i64,
                row.finishes[2] as i64,
                row.finishes[3] as i64,
                row.data_was_unwritten as i64,
            ],
        )?;
        self.tx.execute(
            "INSERT INTO meta(key, value) VALUES ('next_txn', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![(row.txn_id + 1).to_string()],
        )?;
        Ok(())
    }

    pub(crate) fn set_mark(&self, txn_id: u64, slot: Slot, mark: Mark) -> rusqlite::Result<()> {
        let column = match mark {
            Mark::Start => slot.start_column(),
            Mark::Finish => slot.finish_column(),
        };
        self.tx.execute(
            &format!("UPDATE promises SET {column} = ?1 WHERE txn_id = ?2"),
            params![now_ms() as i64, txn_id as i64],
        )?;
        Ok(())
    }

    pub(crate) fn delete_promise(&self, txn_id: u64) -> rusqlite::Result<()> {
        self.tx.execute(
            "DELETE FROM promises WHERE txn_id = ?1",
            params![txn_id as i64],
        )?;
        Ok(())
    }

    /// Make the stored rows of `disk` in `table` equal to `set` inside `[lo, hi)` (the caller has already applied
    /// its change to `set`, the in-memory copy; only ranges touching `[lo, hi)` changed).
    pub(crate) fn sync_ranges(
        &self,
        table: RangeTable,
        disk: usize,
        set: &RangeSet,
        lo: u64,
        hi: u64,
    ) -> rusqlite::Result<()> {
        let name = table.name();
        // Stored rows touching the window (overlapping or adjacent) are replaced wholesale.
        let mut window_lo = lo;
        let mut window_hi = hi;
        {
            let mut stmt = self.tx.prepare(&format!(
                "SELECT start, end FROM {name} WHERE disk = ?1 AND start <= ?3 AND end >= ?2"
            ))?;
            let rows = stmt.query_map(params![disk as i64, lo as i64, hi as i64], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?;
            for row in rows {
                let (s, e) = row?;
                window_lo = window_lo.min(s as u64);
                window_hi = window_hi.max(e as u64);
            }
        }
        // The change was inside [lo, hi), so every new range touching it is a union of [lo, hi) parts and the
        // old rows selected above: it lies inside the window.
        self.tx.execute(
            &format!("DELETE FROM {name} WHERE disk = ?1 AND start <= ?3 AND end >= ?2"),
            params![disk as i64, window_lo as i64, window_hi as i64],
        )?;
        for (s, e) in set.overlapping(window_lo, window_hi) {
            self.tx.execute(
                &format!("INSERT INTO {name}(disk, start, end) VALUES (?1, ?2, ?3)"),
                params![disk as i64, s as i64, e as i64],
            )?;
        }
        Ok(())
    }

    /// Replace all rows of `disk` in `table` by `set`.
    pub(crate) fn replace_all_ranges(
        &self,
        table: RangeTable,
        disk: usize,
        set: &RangeSet,
    ) -> rusqlite::Result<()> {
        let name = table.name();
        self.tx.execute(
            &format!("DELETE FROM {name} WHERE disk = ?1"),
            params![disk as i64],
        )?;
        for (s, e) in set.iter() {
            self.tx.execute(
                &format!("INSERT INTO {name}(disk, start, end) VALUES (?1, ?2, ?3)"),
                params![disk as i64, s as i64, e as i64],
            )?;
        }
        Ok(())
    }

    pub(crate) fn set_scrub(&self, disk: usize, row: ScrubRow) -> rusqlite::Result<()> {
        self.tx.execute(
            "INSERT INTO scrub(disk, cursor, last_pass_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT(disk) DO UPDATE SET cursor = excluded.cursor, last_pass_ms = excluded.last_pass_ms",
            params![disk as i64, row.cursor as i64, row.last_pass_ms as i64],
        )?;
        Ok(())
    }

    /// Make the stored runs of `disk` starting in `[lo, hi)` equal to `runs` (those of the in-memory copy after a
    /// [`RangeAges::record`] that returned the span `[lo, hi)`).
    pub(crate) fn sync_ages(
        &self,
        disk: usize,
        runs: &[(u64, u64, u64)],
        lo: u64,
        hi: u64,
    ) -> rusqlite::Result<()> {
        self.tx.execute(
            "DELETE FROM scrub_ages WHERE disk = ?1 AND start >= ?2 AND start < ?3",
            params![disk as i64, lo as i64, hi as i64],
        )?;
        for &(s, e, ms) in runs {
            self.tx.execute(
                "INSERT INTO scrub_ages(disk, start, end, verified_ms) VALUES (?1, ?2, ?3, ?4)",
                params![disk as i64, s as i64, e as i64, ms as i64],
            )?;
        }
        Ok(())
    }

    pub(crate) fn clear_ages(&self, disk: usize) -> rusqlite::Result<()> {
        self.tx.execute(
            "DELETE FROM scrub_ages WHERE disk = ?1",
            params![disk as i64],
        )?;
        Ok(())
    }

    pub(crate) fn set_power(&self, disk: usize, stats: &PowerStats) -> rusqlite::Result<()> {
        let ms = |state: PowerState| stats.ms_in_state[state.index()] as i64;
        self.tx.execute(
            "INSERT INTO power(disk, spin_ups, ms_off, ms_spinning_up, ms_idle, ms_active, joules)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(disk) DO UPDATE SET spin_ups = excluded.spin_ups, ms_off = excluded.ms_off,
                ms_spinning_up = excluded.ms_spinning_up, ms_idle = excluded.ms_idle,
                ms_active = excluded.ms_active, joules = excluded.joules",
            params![
                disk as i64,
                stats.spin_ups as i64,
                ms(PowerState::Off),
                ms(PowerState::SpinningUp),
                ms(PowerState::Idle),
                ms(PowerState::Active),
                stats.joules
            ],
        )?;
        Ok(())
    }

    pub(crate) fn set_failed(&self, disk: usize, reason: &str) -> rusqlite::Result<()> {
        self.tx.execute(
            "INSERT INTO failed(disk, since_ms, reason) VALUES (?1, ?2, ?3) ON CONFLICT(disk) DO NOTHING",
            params![disk as i64, now_ms() as i64, reason],
        )?;
        Ok(())
    }

    /// Record an added data disk: the commit point of growing the grid (the geometry's version bumps).
    pub(crate) fn add_disk(&self, row: &AddedDiskRow) -> rusqlite::Result<()> {
        self.tx.execute(
            "INSERT INTO added_disks(disk, hpg, col, spec, added_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                row.disk as i64,
                row.hpg as i64,
                row.column as i64,
                row.spec_json,
                now_ms() as i64
            ],
        )?;
        Ok(())
    }

    /// Record an added parity group: with the defects it causes, the commit point of adding it.
    pub(crate) fn add_group(&self, row: &AddedGroupRow) -> rusqlite::Result<()> {
        let members: Vec<String> = row.members.iter().map(usize::to_string).collect();
        self.tx.execute(
            "INSERT INTO added_groups(disk, hpg, col, members, spec, added_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                row.disk as i64,
                row.hpg as i64,
                row.column as i64,
                members.join(","),
                row.spec_json,
                now_ms() as i64
            ],
        )?;
        Ok(())
    }

    pub(crate) fn clear_failed(&self, disk: usize) -> rusqlite::Result<()> {
        self.tx
            .execute("DELETE FROM failed WHERE disk = ?1", params![disk as i64])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(txn_id: u64) -> PromiseRow {
        PromiseRow {
            txn_id,
            mode: WriteMode::Serialized,
            disks: [0, 4, 40, 44],
            offset: 1 << 20,
            length: 1 << 20,
            starts: [1, 0, 0, 0],
            finishes: [0; 4],
            data_was_unwritten: true,
        }
    }

    #[test]
    fn promise_rows_and_marks_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sqlite");
        {
            let journal = Journal::open(&path).unwrap();
            journal.batch(|b| b.insert_promise(&row(7))).unwrap();
            journal.batch(|b| b.insert_promise(&row(8))).unwrap();
            journal
                .batch(|b| {
                    b.set_mark(7, Slot::Data, Mark::Finish)?;
                    b.set_mark(7, Slot::HParity, Mark::Start)
                })
                .unwrap();
            journal.batch(|b| b.delete_promise(8)).unwrap();
        }
        let journal = Journal::open(&path).unwrap();
        let rows = journal.promises().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].txn_id, 7);
        assert!(rows[0].finishes[0] > 0 && rows[0].starts[1] > 0 && rows[0].finishes[1] == 0);
        assert_eq!(journal.next_txn().unwrap(), 9, "txn ids are never reused");
        assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn concurrent_batches_return_durable_and_share_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        let before = journal.syncs();
        let threads = 8u64;
        let per_thread = 50u64;
        std::thread::scope(|scope| {
            for t in 0..threads {
                let journal = &journal;
                scope.spawn(move || {
                    for i in 0..per_thread {
                        journal
                            .batch(|b| b.insert_promise(&row(1 + t * per_thread + i)))
                            .unwrap();
                        assert!(
                            journal.own_commits_durable(),
                            "batch returned before its commit was durable"
                        );
                    }
                });
            }
        });
        let commits = threads * per_thread;
        let syncs = journal.syncs() - before;
        assert!(syncs <= commits, "{syncs} syncs for {commits} commits");
        // A commit alone is not durable until synced through.
        let ((), seq) = journal.commit(|b| b.insert_promise(&row(10_000))).unwrap();
        assert!(!journal.own_commits_durable());
        journal.sync_through(seq).unwrap();
        assert!(journal.own_commits_durable());
        drop(journal);
        let journal = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        assert_eq!(journal.promise_count().unwrap(), commits + 1);
    }

    #[test]
    fn range_rows_follow_the_in_memory_set() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        let mut set = RangeSet::new();
        let apply = |set: &mut RangeSet, insert: bool, s: u64, e: u64| {
            if insert {
                set.insert(s, e)
            } else {
                set.remove(s, e)
            }
            journal
                .batch(|b| b.sync_ranges(RangeTable::Defects, 3, set, s, e))
                .unwrap();
            assert_eq!(&journal.ranges(RangeTable::Defects, 4).unwrap()[3], set);
        };
        apply(&mut set, true, 10, 20);
        apply(&mut set, true, 30, 40);
        apply(&mut set, true, 20, 30);
        apply(&mut set, false, 15, 35);
        apply(&mut set, true, 0, 5);
        apply(&mut set, false, 0, 100);
        assert!(set.is_empty());
    }
}
