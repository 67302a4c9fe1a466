//! Why the journal is SQLite (WAL, synchronous=FULL) and not a hand-made fsynced append log: per-commit latency
//! of both on the same file system. Run with `--ignored --nocapture` to see the numbers (docs/engine.md).

use std::io::Write;
use std::time::Instant;

const COMMITS: usize = 300;

#[test]
#[ignore = "measurement; prints journal rows/s"]
fn journal_commit_latency_sqlite_vs_append_log() {
    let dir = tempfile::tempdir().unwrap();
    // SQLite: one row insert + one update per commit, like a promise start and finish.
    let conn = rusqlite::Connection::open(dir.path().join("j.sqlite")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch("CREATE TABLE p(txn INTEGER PRIMARY KEY, disk INTEGER, off INTEGER, len INTEGER, mark INTEGER)").unwrap();
    let t = Instant::now();
    for i in 0..COMMITS as i64 {
        conn.execute(
            "INSERT INTO p VALUES (?1, 3, ?2, 1048576, 0)",
            rusqlite::params![i, i * 4096],
        )
        .unwrap();
    }
    let sqlite = t.elapsed();
    // Append log: a 64-byte record written and fdatasync'ed per commit.
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("j.log"))
        .unwrap();
    let t = Instant::now();
    for i in 0..COMMITS as u64 {
        let mut rec = [0u8; 64];
        rec[..8].copy_from_slice(&i.to_le_bytes());
        log.write_all(&rec).unwrap();
        log.sync_data().unwrap();
    }
    let append = t.elapsed();
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / COMMITS as f64;
    println!(
        "sqlite WAL FULL: {:.0} us/commit ({:.0} rows/s); append log + fdatasync: {:.0} us/commit ({:.0} rows/s)",
        per(sqlite),
        COMMITS as f64 / sqlite.as_secs_f64(),
        per(append),
        COMMITS as f64 / append.as_secs_f64()
    );
    assert!(
        per(sqlite) < 100_000.0,
        "a journal commit must stay well under a disk write"
    );
}
