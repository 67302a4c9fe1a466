//! The PostgreSQL back end of [`crate::SqlCatalog`]: sessions to one server, each catalog call one short
//! transaction at SERIALIZABLE, run again on a serialization failure or a deadlock. Schema: `docs/catalog.md`
//! ("Back ends").
//!
//! **Why the sync `postgres` crate.** The [`crate::Catalog`] trait is synchronous and its callers (the store's
//! threads, the S3 handlers through `spawn_blocking`) expect blocking calls; `postgres` is rust-postgres'
//! blocking client (it drives `tokio-postgres` on a private runtime), so no async runtime leaks into the catalog
//! and the catalog logic (`crate::sql`) stays one synchronous code path for SQLite and PostgreSQL.
//!
//! **Retries.** A transaction that fails with SQLSTATE 40001 (serialization failure) or 40P01 (deadlock) —
//! during a statement or at `COMMIT` — is rolled back and the whole body runs again on a fresh transaction,
//! after a jittered exponential backoff (1 ms doubling up to 250 ms, each wait uniformly drawn from its upper
//! half), at most [`PostgresOptions::max_attempts`] times; then the call fails with an error saying so. Bodies
//! are pure functions of the database state (no side effects outside the transaction), so running one again is
//! safe.
//!
//! **Failover.** The URL may name several servers (`postgresql://u:p@h1:5432,h2:5432/db`, or libpq's
//! `host=h1,h2 port=5432,5432 …`): every new session tries them in order and keeps the first that accepts
//! writes (`target_session_attrs=read-write`, which the catalog always asks for: a URL asking for anything else
//! is refused), so a read-only standby is never written to and, once an operator promotes it, the next session
//! lands on it. A session whose server is gone, going or read-only (the connection broke, SQLSTATE class 08 or
//! 57, or 25006) is dropped: an idle one whose `BEGIN` fails so is replaced at once (nothing ran on it, the
//! call does not fail for it), one that fails later fails its call, and the next call connects afresh to
//! whichever server is writable then; no restart is needed. Connecting is bounded: `connect_timeout` per address
//! ([`PostgresOptions::connect_timeout`] unless the URL sets one) and the whole attempt, handshake included,
//! at most `connect_timeout × (servers + 1)`; TCP keepalives (15 s idle, 5 s apart, 3 probes) and a 30 s TCP
//! user timeout, unless the URL sets them, drop a session whose server vanished without a word. The runbook is
//! `docs/cluster.md` ("The catalog database: a primary and a synchronous standby").
//!
//! **Portability.** The schema and statements stay within what CockroachDB and YugabyteDB accept: `BIGINT`
//! keys and counters, `BYTEA`, `TEXT COLLATE "C"` for names compared or ordered (byte order, as S3 lists),
//! identity columns for generated ids, `INSERT … ON CONFLICT`, `RETURNING`, partial indexes; no advisory locks,
//! no `SELECT … FOR UPDATE`, no stored procedures (the one `DO` block raises the injected failure of
//! [`crate::SqlCatalog::inject_serialization_failures`], a test hook).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;

use crate::sql::{self, Connection, PgSession};
use crate::{CatalogError, Result};

/// Options of [`crate::SqlCatalog::open_postgres`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostgresOptions {
    /// Attempts of one transaction (the first included) before a call fails on serialization failures.
    pub max_attempts: u32,
    /// Sessions kept open between calls.
    pub idle_sessions: usize,
    /// How long connecting may take before it fails.
    pub connect_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            max_attempts: 40,
            idle_sessions: 8,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Schema version of [`PG_SCHEMA`]: the PostgreSQL schema starts at the SQLite schema's version 8, whole.
pub(crate) const PG_SCHEMA_BASE_VERSION: u32 = 8;

/// Changes after [`PG_SCHEMA_BASE_VERSION`], in order, as for SQLite (`sqlite/schema.rs` `MIGRATIONS`): a change of
/// the catalog's schema adds a version to both lists.
pub(crate) const PG_MIGRATIONS: &[(u32, &str)] = &[
    (9, crate::sqlite::PG_ACCESS_MIGRATION),
    (10, crate::sqlite::RESTORE_TIER_MIGRATION),
    (11, crate::sqlite::BUCKET_CORS_MIGRATION),
    (12, crate::sqlite::PG_COMPLETED_UPLOADS_MIGRATION),
    (13, crate::sqlite::SMART_READINGS_MIGRATION),
];

/// The whole schema of version 8 on PostgreSQL (the tables of `docs/catalog.md`; `meta` is made by the
/// migration code). `offset` is quoted by `crate::sql::pg_sql`.
pub(crate) const PG_SCHEMA: &str = r#"
CREATE TABLE buckets (
    name TEXT COLLATE "C" PRIMARY KEY,
    created_ms BIGINT NOT NULL,
    settings TEXT NOT NULL,
    archive TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE contents (
    content BYTEA PRIMARY KEY,
    logical_bytes BIGINT NOT NULL,
    stored_bytes BIGINT NOT NULL,
    stored_form TEXT NOT NULL,
    chunk_index BYTEA NOT NULL,
    md5 BYTEA NOT NULL,
    state TEXT NOT NULL,
    refcount BIGINT NOT NULL,
    dataset TEXT COLLATE "C" NOT NULL,
    grid_bucket BIGINT,
    cache_path TEXT,
    created_ms BIGINT NOT NULL,
    last_access_ms BIGINT NOT NULL,
    unreferenced_since_ms BIGINT,
    persisted_ms BIGINT,
    pinned_until_ms BIGINT
);
CREATE INDEX contents_by_state ON contents(state, created_ms);
CREATE INDEX contents_lru ON contents(last_access_ms) WHERE state = 'persisted' AND cache_path IS NOT NULL;
CREATE INDEX contents_unreferenced ON contents(unreferenced_since_ms) WHERE refcount = 0;
CREATE TABLE objects (
    bucket TEXT COLLATE "C" NOT NULL,
    key BYTEA NOT NULL,
    content BYTEA NOT NULL,
    size_bytes BIGINT NOT NULL,
    etag TEXT NOT NULL,
    last_modified_ms BIGINT NOT NULL,
    content_type TEXT,
    user_metadata TEXT NOT NULL,
    checksums TEXT NOT NULL,
    dataset TEXT COLLATE "C" NOT NULL,
    version_id TEXT COLLATE "C" NOT NULL DEFAULT 'null',
    version_seq BIGINT NOT NULL DEFAULT 0,
    attributes TEXT NOT NULL DEFAULT '{}',
    expires_ms BIGINT,
    PRIMARY KEY (bucket, key)
);
CREATE INDEX objects_by_content ON objects(content);
CREATE INDEX objects_expiring ON objects(expires_ms) WHERE expires_ms IS NOT NULL;
CREATE TABLE extents (
    extent_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    grid_bucket BIGINT NOT NULL,
    offset BIGINT NOT NULL,
    length_bytes BIGINT NOT NULL,
    payload_bytes BIGINT NOT NULL,
    object_id BYTEA NOT NULL,
    extent_no BIGINT NOT NULL,
    kind TEXT NOT NULL,
    written BIGINT NOT NULL,
    blake3 BYTEA,
    replica_id BIGINT NOT NULL
);
CREATE INDEX extents_by_place ON extents(grid_bucket, offset);
CREATE INDEX extents_unwritten ON extents(extent_id) WHERE written = 0;
CREATE TABLE segments (
    content BYTEA NOT NULL,
    seq BIGINT NOT NULL,
    extent_id BIGINT NOT NULL,
    offset_in_payload BIGINT NOT NULL,
    length_bytes BIGINT NOT NULL,
    PRIMARY KEY (content, seq)
);
CREATE INDEX segments_by_extent ON segments(extent_id);
CREATE TABLE datasets (
    id TEXT COLLATE "C" PRIMARY KEY,
    bucket TEXT COLLATE "C" NOT NULL,
    created_ms BIGINT NOT NULL,
    grid_bucket BIGINT
);
CREATE TABLE multipart_uploads (
    upload_id TEXT COLLATE "C" PRIMARY KEY,
    bucket TEXT COLLATE "C" NOT NULL,
    key BYTEA NOT NULL,
    created_ms BIGINT NOT NULL,
    options TEXT NOT NULL
);
CREATE INDEX uploads_by_key ON multipart_uploads(bucket, key, created_ms);
CREATE TABLE multipart_parts (
    upload_id TEXT COLLATE "C" NOT NULL,
    part_number BIGINT NOT NULL,
    size_bytes BIGINT NOT NULL,
    md5 BYTEA NOT NULL,
    cache_path TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    content BYTEA,
    checksums TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (upload_id, part_number)
);
CREATE INDEX multipart_parts_by_content ON multipart_parts(content);
CREATE TABLE grid_allocations (
    grid_bucket BIGINT PRIMARY KEY,
    append_offset BIGINT NOT NULL
);
CREATE TABLE grid_free_ranges (
    grid_bucket BIGINT NOT NULL,
    offset BIGINT NOT NULL,
    length BIGINT NOT NULL,
    PRIMARY KEY (grid_bucket, offset)
);
CREATE INDEX free_ranges_by_length ON grid_free_ranges(grid_bucket, length);
CREATE TABLE pending_work (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    item TEXT NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE TABLE content_parts (
    content BYTEA NOT NULL,
    seq BIGINT NOT NULL,
    part BYTEA NOT NULL,
    logical_offset BIGINT NOT NULL,
    logical_bytes BIGINT NOT NULL,
    PRIMARY KEY (content, seq)
);
CREATE INDEX content_parts_by_part ON content_parts(part);
CREATE TABLE fs_directories (
    bucket TEXT COLLATE "C" NOT NULL,
    path BYTEA NOT NULL,
    parent BYTEA NOT NULL,
    mode BIGINT NOT NULL,
    uid BIGINT NOT NULL,
    gid BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (bucket, path)
);
CREATE INDEX fs_directories_by_parent ON fs_directories(bucket, parent, path);
CREATE TABLE object_versions (
    bucket TEXT COLLATE "C" NOT NULL,
    key BYTEA NOT NULL,
    content BYTEA,
    size_bytes BIGINT NOT NULL,
    etag TEXT NOT NULL,
    last_modified_ms BIGINT NOT NULL,
    content_type TEXT,
    user_metadata TEXT NOT NULL,
    checksums TEXT NOT NULL,
    dataset TEXT COLLATE "C" NOT NULL,
    version_id TEXT COLLATE "C" NOT NULL,
    version_seq BIGINT NOT NULL,
    attributes TEXT NOT NULL,
    expires_ms BIGINT,
    delete_marker BIGINT NOT NULL,
    noncurrent_since_ms BIGINT NOT NULL,
    PRIMARY KEY (bucket, key, version_seq)
);
CREATE INDEX versions_by_content ON object_versions(content);
CREATE TABLE counters (name TEXT COLLATE "C" PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO counters (name, value) VALUES ('version_seq', 0);
CREATE TABLE restores (
    bucket TEXT COLLATE "C" NOT NULL,
    key BYTEA NOT NULL,
    version_id TEXT COLLATE "C" NOT NULL,
    content BYTEA NOT NULL,
    requested_ms BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    done_ms BIGINT,
    expiry_ms BIGINT,
    PRIMARY KEY (bucket, key, version_id)
);
CREATE INDEX restores_pending ON restores(requested_ms) WHERE done_ms IS NULL;
CREATE TABLE ops_history (
    at_ms BIGINT PRIMARY KEY,
    read_bytes BIGINT NOT NULL,
    written_bytes BIGINT NOT NULL,
    requests BIGINT NOT NULL,
    spin_ups BIGINT NOT NULL,
    watts DOUBLE PRECISION NOT NULL,
    joules DOUBLE PRECISION NOT NULL,
    disks_spinning BIGINT NOT NULL,
    cache_used_bytes BIGINT NOT NULL,
    cache_dirty_bytes BIGINT NOT NULL
);
CREATE TABLE webhooks (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    url TEXT NOT NULL,
    bucket TEXT COLLATE "C" NOT NULL,
    object_key TEXT,
    prefix TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    delivered_ms BIGINT,
    attempts BIGINT NOT NULL,
    last_error TEXT
);
CREATE TABLE cache_inline (
    content BYTEA PRIMARY KEY,
    bytes BYTEA NOT NULL
);
"#;

/// The back end: how to connect, idle sessions, counters.
pub(crate) struct PgBackend {
    config: postgres::Config,
    shown_url: String,
    options: PostgresOptions,
    idle: Mutex<Vec<PgSession>>,
    retries: AtomicU64,
    inject: AtomicU32,
    /// Connection attempts under way (each on a thread of its own, so that a server that accepts the
    /// connection and then never answers cannot hold a caller past the bound).
    connecting: Arc<AtomicUsize>,
    /// Several servers in the URL: the one the last new session reached (`host:port`), logged when it changes.
    writable_at: Option<Mutex<String>>,
}

/// Connection attempts that may be under way at once; more fail at once (the earlier ones hang on a server
/// that accepted them and does not answer).
const CONNECTING_MAX: usize = 64;

/// Whether `e` says the session's server is gone, going or read-only (no SQLSTATE: the connection broke;
/// class 08 connection exception, 57 operator intervention such as a shutdown, 25006 read-only transaction):
/// such a session is not used again.
fn gone(e: &sql::Error) -> bool {
    match e {
        sql::Error::Postgres(_) => match e.sqlstate() {
            None => true,
            Some(code) => code.starts_with("08") || code.starts_with("57") || code == "25006",
        },
        _ => false,
    }
}

/// Whether the connection string sets `key` (as a URL query parameter or a key/value pair).
fn sets(url: &str, key: &str) -> bool {
    url.match_indices(&format!("{key}="))
        .any(|(p, _)| p == 0 || matches!(url.as_bytes()[p - 1], b'?' | b'&' | b' ' | b'\t'))
}

/// The connection settings of `url` with what the catalog asks of every session: a server that accepts
/// writes, a bounded connect, keepalives (see the module's **Failover**).
fn session_config(
    url: &str,
    shown_url: &str,
    options: &PostgresOptions,
) -> Result<postgres::Config> {
    use postgres::config::TargetSessionAttrs;
    let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| {
        CatalogError::Unreachable(format!(
            "catalog database URL {shown_url} is not a PostgreSQL connection URL \
             (postgresql://user:password@host:port/database, or host1:port1,host2:port2 for a primary \
             and its standby): {e}"
        ))
    })?;
    if sets(url, "target_session_attrs")
        && config.get_target_session_attrs() != TargetSessionAttrs::ReadWrite
    {
        return Err(CatalogError::Unreachable(format!(
            "catalog database URL {shown_url}: target_session_attrs must be read-write (or left out: the \
             catalog writes, so it only ever uses a server that accepts writes, never a standby)"
        )));
    }
    config.target_session_attrs(TargetSessionAttrs::ReadWrite);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(options.connect_timeout);
    }
    if !sets(url, "tcp_user_timeout") {
        config.tcp_user_timeout(Duration::from_secs(30));
    }
    if !sets(url, "keepalives_idle") {
        config.keepalives_idle(Duration::from_secs(15));
    }
    if !sets(url, "keepalives_interval") {
        config.keepalives_interval(Duration::from_secs(5));
    }
    if !sets(url, "keepalives_retries") {
        config.keepalives_retries(3);
    }
    if config.get_application_name().is_none() {
        config.application_name("permafrost");
    }
    Ok(config)
}

/// `url` without its password (URL user info, a `password=` parameter or key/value pair).
pub fn redact_url(url: &str) -> String {
    let mut shown = url.to_string();
    if let Some(scheme_end) = shown.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = shown[rest_start..]
            .find(['/', '?'])
            .map_or(shown.len(), |p| rest_start + p);
        if let Some(at) = shown[rest_start..authority_end].rfind('@') {
            let userinfo = &shown[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                shown.replace_range(rest_start + colon..rest_start + at, "");
            }
        }
    }
    // `password=...` as a query parameter or a key/value pair.
    let mut out = String::with_capacity(shown.len());
    let mut rest = shown.as_str();
    while let Some(p) = rest.find("password=") {
        let boundary = p == 0 || matches!(rest.as_bytes()[p - 1], b'?' | b'&' | b' ');
        out.push_str(&rest[..p + "password=".len()]);
        rest = &rest[p + "password=".len()..];
        if boundary {
            let end = rest.find(['&', ' ']).unwrap_or(rest.len());
            out.push_str("***");
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

impl PgBackend {
    /// Parse `url` and open a first session, checking that the server is PostgreSQL.
    pub(crate) fn connect(url: &str, options: PostgresOptions) -> Result<PgBackend> {
        let shown_url = redact_url(url);
        let config = session_config(url, &shown_url, &options)?;
        let writable_at = (config.get_hosts().len() > 1).then(|| Mutex::new(String::new()));
        let backend = PgBackend {
            config,
            shown_url,
            options,
            idle: Mutex::new(Vec::new()),
            retries: AtomicU64::new(0),
            inject: AtomicU32::new(0),
            connecting: Arc::new(AtomicUsize::new(0)),
            writable_at,
        };
        let mut session = backend.session()?;
        let version = session
            .client
            .query_one("SELECT version()", &[])
            .and_then(|r| r.try_get::<_, String>(0))
            .map_err(|e| {
                CatalogError::Unreachable(format!(
                    "catalog database {}: connected, but the server does not answer as PostgreSQL: {}",
                    backend.shown_url,
                    sql::Error::from(e)
                ))
            })?;
        tracing::info!(url = %backend.shown_url, %version, "catalog on PostgreSQL");
        backend.idle.lock().push(session);
        Ok(backend)
    }

    pub(crate) fn shown_url(&self) -> &str {
        &self.shown_url
    }

    pub(crate) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    pub(crate) fn inject_serialization_failures(&self, n: u32) {
        self.inject.store(n, Ordering::SeqCst);
    }

    /// An idle session (closed ones are dropped), or a new one.
    fn session(&self) -> Result<PgSession> {
        match self.pooled() {
            Some(s) => Ok(s),
            None => self.new_session(),
        }
    }

    /// An idle session not known to be closed (closed ones are dropped).
    fn pooled(&self) -> Option<PgSession> {
        let mut idle = self.idle.lock();
        while let Some(s) = idle.pop() {
            if !s.client.is_closed() {
                return Some(s);
            }
        }
        None
    }

    /// A session with a transaction begun. An idle session whose server went away meanwhile (its BEGIN fails
    /// so: after a failover, every idle session) is dropped and the next one tried, then a new one: nothing
    /// ran on it, so the caller sees no error for it.
    fn begun(
        &self,
        read_only: bool,
        db_error: &impl Fn(sql::Error) -> CatalogError,
    ) -> Result<PgSession> {
        let begin = if read_only {
            "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY"
        } else {
            "BEGIN ISOLATION LEVEL SERIALIZABLE"
        };
        while let Some(mut s) = self.pooled() {
            match s.client.batch_execute(begin) {
                Ok(()) => return Ok(s),
                Err(e) => {
                    let e = sql::Error::from(e);
                    if !gone(&e) {
                        return Err(db_error(e));
                    }
                    tracing::debug!(url = %self.shown_url, error = %e, "idle catalog session dropped");
                }
            }
        }
        let mut s = self.new_session()?;
        s.client
            .batch_execute(begin)
            .map_err(|e| db_error(e.into()))?;
        Ok(s)
    }

    /// A new session (see **Failover**).
    fn new_session(&self) -> Result<PgSession> {
        let client = self.open().map_err(|(sqlstate, e)| {
            let several = self.config.get_hosts().len() > 1;
            let hint = match sqlstate.as_deref() {
                Some("28P01") | Some("28000") => "the server refused the login (user or password)",
                Some("3D000") => "the database does not exist",
                _ if several => {
                    "no server of the URL accepts writes now: is the primary down and no standby promoted yet?"
                }
                Some(_) => "the server refused the connection",
                None => "is a PostgreSQL server listening at that host and port?",
            };
            CatalogError::Unreachable(format!(
                "catalog database {}: cannot connect: {e} ({hint})",
                self.shown_url
            ))
        })?;
        let mut session = PgSession::new(client);
        if let Some(writable_at) = &self.writable_at {
            self.note_server(&mut session, writable_at);
        }
        Ok(session)
    }

    /// A new connection, on a thread of its own so that the whole attempt is bounded (see **Failover**).
    /// Failures come with their SQLSTATE, if the server sent one.
    fn open(&self) -> std::result::Result<postgres::Client, (Option<String>, String)> {
        let failed = |e: postgres::Error| {
            let e = sql::Error::from(e);
            (e.sqlstate().map(str::to_owned), e.to_string())
        };
        let per_address = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(self.options.connect_timeout);
        let bound = per_address * (self.config.get_hosts().len() as u32 + 1);
        if self.connecting.fetch_add(1, Ordering::SeqCst) >= CONNECTING_MAX {
            self.connecting.fetch_sub(1, Ordering::SeqCst);
            return Err((
                None,
                format!(
                    "{CONNECTING_MAX} earlier connection attempts are still waiting for an answer"
                ),
            ));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let config = self.config.clone();
        let connecting = Arc::clone(&self.connecting);
        let spawned = std::thread::Builder::new()
            .name("catalog-connect".into())
            .spawn(move || {
                let result = config.connect(postgres::NoTls);
                connecting.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send(result);
            });
        if spawned.is_err() {
            self.connecting.fetch_sub(1, Ordering::SeqCst);
            return self.config.connect(postgres::NoTls).map_err(failed);
        }
        match rx.recv_timeout(bound) {
            Ok(result) => result.map_err(failed),
            Err(_) => Err((None, format!("no answer within {} ms", bound.as_millis()))),
        }
    }

    /// With several servers in the URL: which one this new session reached, logged when it is not the one
    /// before (a promoted standby).
    fn note_server(&self, session: &mut PgSession, writable_at: &Mutex<String>) {
        let here = session
            .client
            .query_one(
                "SELECT coalesce(host(inet_server_addr()), 'local') || ':' || current_setting('port')",
                &[],
            )
            .and_then(|r| r.try_get::<_, String>(0));
        let Ok(here) = here else { return };
        let mut last = writable_at.lock();
        if *last != here {
            if last.is_empty() {
                tracing::info!(url = %self.shown_url, server = %here, "catalog database: writing to {here}");
            } else {
                tracing::warn!(url = %self.shown_url, server = %here, was = %*last,
                    "catalog database: the writable server is now {here} (was {last})");
            }
            *last = here;
        }
    }

    fn give_back(&self, session: PgSession) {
        let mut idle = self.idle.lock();
        if idle.len() < self.options.idle_sessions {
            idle.push(session);
        }
    }

    /// Run `f` in one SERIALIZABLE transaction (READ ONLY when `read_only`), again on serialization failures
    /// and deadlocks, with jittered exponential backoff, at most `max_attempts` times.
    pub(crate) fn run<T>(
        &self,
        read_only: bool,
        name: &str,
        db_error: impl Fn(sql::Error) -> CatalogError,
        mut f: impl FnMut(&Connection) -> Result<T>,
    ) -> Result<T> {
        let mut attempt = 1u32;
        loop {
            let cell = RefCell::new(self.begun(read_only, &db_error)?);
            let inject = self
                .inject
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            let result = Self::attempt(&cell, inject, &db_error, &mut f);
            let mut session = cell.into_inner();
            let error = match result {
                Ok(value) => {
                    self.give_back(session);
                    return Ok(value);
                }
                Err(e) => e,
            };
            let retryable =
                matches!(&error, CatalogError::Database { source, .. } if source.is_retryable());
            // An error of a server going away, gone or read-only: the session is dropped and the next call connects afresh (see **Failover**). Otherwise
            // rolled back (a no-op with a warning when the server already ended the transaction) and kept.
            let broken = matches!(&error, CatalogError::Database { source, .. } if gone(source));
            if !broken
                && !session.client.is_closed()
                && session.client.batch_execute("ROLLBACK").is_ok()
            {
                self.give_back(session);
            }
            if !retryable {
                return Err(error);
            }
            if attempt >= self.options.max_attempts {
                tracing::warn!(catalog = name, attempts = attempt, %error, "catalog transaction gave up");
                return Err(match error {
                    CatalogError::Database { path, source } => CatalogError::Database {
                        path: format!(
                            "{path} (gave up after {attempt} attempts, each a serialization failure or deadlock)"
                        ),
                        source,
                    },
                    other => other,
                });
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            let ceiling_us = (1000u64 << attempt.min(8)).min(250_000);
            let wait = rand::thread_rng().gen_range(ceiling_us / 2..=ceiling_us);
            tracing::debug!(catalog = name, attempt, wait_us = wait, %error, "catalog transaction retried");
            std::thread::sleep(Duration::from_micros(wait));
            attempt += 1;
        }
    }

    fn attempt<T>(
        cell: &RefCell<PgSession>,
        inject: bool,
        db_error: &impl Fn(sql::Error) -> CatalogError,
        f: &mut impl FnMut(&Connection) -> Result<T>,
    ) -> Result<T> {
        let batch = |sql: &str| {
            cell.borrow_mut()
                .client
                .batch_execute(sql)
                .map_err(|e| db_error(e.into()))
        };
        let value = f(&Connection::postgres(cell))?;
        if inject {
            batch(
                "DO $$ BEGIN RAISE EXCEPTION 'permafrost test: injected serialization failure' \
                 USING ERRCODE = '40001'; END $$",
            )?;
        }
        batch("COMMIT")?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::{redact_url, session_config, sets, PostgresOptions};
    use postgres::config::TargetSessionAttrs;

    #[test]
    fn every_session_asks_for_a_writable_server() {
        let opts = PostgresOptions::default();
        for url in [
            "postgresql://u@a:1,b:2/db",
            "postgresql://u@a:1,b:2/db?target_session_attrs=read-write",
            "host=a,b port=1,2 user=u dbname=db",
            "host=a port=1 dbname=db",
        ] {
            let c = session_config(url, url, &opts).unwrap();
            assert_eq!(
                c.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite,
                "{url}"
            );
            assert_eq!(
                c.get_connect_timeout(),
                Some(&opts.connect_timeout),
                "{url}"
            );
        }
        let c = session_config("host=a,b port=1,2 connect_timeout=3", "", &opts).unwrap();
        assert_eq!(c.get_hosts().len(), 2);
        assert_eq!(c.get_ports(), [1, 2]);
        assert_eq!(
            c.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(3))
        );
        for url in [
            "postgresql://u@a:1,b:2/db?target_session_attrs=any",
            "host=a,b target_session_attrs=read-only",
        ] {
            let e = session_config(url, "shown", &opts).unwrap_err().to_string();
            assert!(
                e.contains("shown: target_session_attrs must be read-write"),
                "{e}"
            );
        }
        assert!(sets(
            "postgresql://h/db?a=1&keepalives_idle=3",
            "keepalives_idle"
        ));
        assert!(sets("keepalives_idle=3 host=h", "keepalives_idle"));
        assert!(!sets("host=h xkeepalives_idle=3", "keepalives_idle"));
    }

    #[test]
    fn urls_are_shown_without_their_password() {
        assert_eq!(
            redact_url("postgresql://me:s3cret@db.example:5432/perma"),
            "postgresql://me@db.example:5432/perma"
        );
        assert_eq!(
            redact_url("postgres://me@host/db?password=s3cret&sslmode=disable"),
            "postgres://me@host/db?password=***&sslmode=disable"
        );
        assert_eq!(
            redact_url("host=/tmp user=me password=s3cret dbname=x"),
            "host=/tmp user=me password=*** dbname=x"
        );
        assert_eq!(redact_url("postgresql://h/db"), "postgresql://h/db");
    }
}
