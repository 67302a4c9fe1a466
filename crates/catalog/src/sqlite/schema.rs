//! The catalog's schema on SQLite ([`SCHEMA`], then [`MIGRATIONS`] in order; every table and column is described in
//! docs/catalog.md) and [`migrate`], which brings a database of either back end to the newest version inside the
//! transaction that opens it (PostgreSQL's schema and migrations are in `crate::postgres`). Invariant: a database's
//! `meta.schema_version` names the last change applied to it, and a version this build does not know is refused.

use crate::sql::{self, params, OptionalExtension, Transaction};
use crate::CatalogError;

/// Schema version of [`SCHEMA`] (the base every database starts from).
pub(super) const SCHEMA_BASE_VERSION: u32 = 2;

/// Schema changes after the base, in order: `(version, SQL)`. A new database gets [`SCHEMA`] and then all of
/// them; an existing one those above its `meta.schema_version`, in the transaction that opens it. Changes are
/// additive (new tables, new nullable columns) in portable SQL. Append new versions at the end (whoever lands
/// second renumbers theirs), and document every table and column in docs/catalog.md.
pub(super) const MIGRATIONS: &[(u32, &str)] = &[
    (
        3,
        // Part-list contents (a completed multipart upload is its list of parts) and parts as contents.
        "CREATE TABLE content_parts (
        content BLOB NOT NULL,
        seq BIGINT NOT NULL,
        part BLOB NOT NULL,
        logical_offset BIGINT NOT NULL,
        logical_bytes BIGINT NOT NULL,
        PRIMARY KEY (content, seq)
    );
    CREATE INDEX content_parts_by_part ON content_parts(part);
    ALTER TABLE multipart_parts ADD COLUMN content BLOB;
    CREATE INDEX multipart_parts_by_content ON multipart_parts(content);",
    ),
    (
        4,
        // The mount's directories that exist on their own, and when a content became persisted.
        "CREATE TABLE fs_directories (
        bucket TEXT NOT NULL,
        path BLOB NOT NULL,
        parent BLOB NOT NULL,
        mode BIGINT NOT NULL,
        uid BIGINT NOT NULL,
        gid BIGINT NOT NULL,
        mtime_ns BIGINT NOT NULL,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (bucket, path)
    );
    CREATE INDEX fs_directories_by_parent ON fs_directories(bucket, parent, path);
    ALTER TABLE contents ADD COLUMN persisted_ms BIGINT;",
    ),
    (5, ARCHIVE_MIGRATION),
    (
        6,
        // The operator's history samples and webhooks (permafrost-admin, docs/admin.md).
        "CREATE TABLE ops_history (
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
        id INTEGER PRIMARY KEY,
        url TEXT NOT NULL,
        bucket TEXT NOT NULL,
        object_key TEXT,
        prefix TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        delivered_ms BIGINT,
        attempts BIGINT NOT NULL,
        last_error TEXT
    );",
    ),
    (
        7,
        // Small contents cached in the catalog (one transaction per small PUT, no cache file).
        "CREATE TABLE cache_inline (
        content BLOB PRIMARY KEY,
        bytes BLOB NOT NULL
    );",
    ),
    (
        8,
        // The checksums a part arrived with (or was computed in, for the upload's announced algorithm), so that
        // completion can give the object its composite or full-object checksum without reading a byte.
        "ALTER TABLE multipart_parts ADD COLUMN checksums TEXT NOT NULL DEFAULT '[]';",
    ),
    // Access keys, their grants, bucket owners, ACLs, policies and Block Public Access (`access`).
    (9, super::access::ACCESS_MIGRATION),
    (10, RESTORE_TIER_MIGRATION),
    (11, BUCKET_CORS_MIGRATION),
    (12, super::completed::COMPLETED_UPLOADS_MIGRATION),
    // SMART readings of the grid's disks (`smart`).
    (13, super::smart::SMART_READINGS_MIGRATION),
];

/// Schema version 10, the same SQL on both back ends: the retrieval tier of each restore (`Expedited`,
/// `Standard`, `Bulk`; docs/archive.md), which decides when the restore thread reads it.
pub(crate) const RESTORE_TIER_MIGRATION: &str =
    "ALTER TABLE restores ADD COLUMN tier TEXT NOT NULL DEFAULT 'Standard';";

/// Schema version 11, the same SQL on both back ends: each bucket's CORS configuration (`bucket_access.cors`,
/// JSON; docs/archive.md), next to its policy.
pub(crate) const BUCKET_CORS_MIGRATION: &str = "ALTER TABLE bucket_access ADD COLUMN cors TEXT;";

/// Schema version this build reads and writes (`meta.schema_version`).
#[cfg(test)]
pub(super) const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS buckets (
    name TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    settings TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS contents (
    content BLOB PRIMARY KEY,
    logical_bytes INTEGER NOT NULL,
    stored_bytes INTEGER NOT NULL,
    stored_form TEXT NOT NULL,
    chunk_index BLOB NOT NULL,
    md5 BLOB NOT NULL,
    state TEXT NOT NULL,
    refcount INTEGER NOT NULL,
    dataset TEXT NOT NULL,
    grid_bucket INTEGER,
    cache_path TEXT,
    created_ms INTEGER NOT NULL,
    last_access_ms INTEGER NOT NULL,
    unreferenced_since_ms INTEGER
);
CREATE INDEX IF NOT EXISTS contents_by_state ON contents(state, created_ms);
CREATE INDEX IF NOT EXISTS contents_lru ON contents(last_access_ms)
    WHERE state = 'persisted' AND cache_path IS NOT NULL;
CREATE INDEX IF NOT EXISTS contents_unreferenced ON contents(unreferenced_since_ms) WHERE refcount = 0;
CREATE TABLE IF NOT EXISTS objects (
    bucket TEXT NOT NULL,
    key BLOB NOT NULL,
    content BLOB NOT NULL,
    size_bytes INTEGER NOT NULL,
    etag TEXT NOT NULL,
    last_modified_ms INTEGER NOT NULL,
    content_type TEXT,
    user_metadata TEXT NOT NULL,
    checksums TEXT NOT NULL,
    dataset TEXT NOT NULL,
    PRIMARY KEY (bucket, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_by_content ON objects(content);
CREATE TABLE IF NOT EXISTS extents (
    extent_id INTEGER PRIMARY KEY,
    grid_bucket INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    length_bytes INTEGER NOT NULL,
    payload_bytes INTEGER NOT NULL,
    object_id BLOB NOT NULL,
    extent_no INTEGER NOT NULL,
    kind TEXT NOT NULL,
    written INTEGER NOT NULL,
    blake3 BLOB,
    replica_id INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS extents_by_place ON extents(grid_bucket, offset);
CREATE INDEX IF NOT EXISTS extents_unwritten ON extents(extent_id) WHERE written = 0;
CREATE TABLE IF NOT EXISTS segments (
    content BLOB NOT NULL,
    seq INTEGER NOT NULL,
    extent_id INTEGER NOT NULL,
    offset_in_payload INTEGER NOT NULL,
    length_bytes INTEGER NOT NULL,
    PRIMARY KEY (content, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS segments_by_extent ON segments(extent_id);
CREATE TABLE IF NOT EXISTS datasets (
    id TEXT PRIMARY KEY,
    bucket TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    grid_bucket INTEGER
);
CREATE TABLE IF NOT EXISTS multipart_uploads (
    upload_id TEXT PRIMARY KEY,
    bucket TEXT NOT NULL,
    key BLOB NOT NULL,
    created_ms INTEGER NOT NULL,
    options TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS uploads_by_key ON multipart_uploads(bucket, key, created_ms);
CREATE TABLE IF NOT EXISTS multipart_parts (
    upload_id TEXT NOT NULL,
    part_number INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    md5 BLOB NOT NULL,
    cache_path TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (upload_id, part_number)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS grid_allocations (
    grid_bucket INTEGER PRIMARY KEY,
    append_offset INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS grid_free_ranges (
    grid_bucket INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    PRIMARY KEY (grid_bucket, offset)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS free_ranges_by_length ON grid_free_ranges(grid_bucket, length);
CREATE TABLE IF NOT EXISTS pending_work (
    id INTEGER PRIMARY KEY,
    item TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
";

/// Schema version 5: versions, tags, Object Lock, lifecycle, restores (docs/archive.md).
pub(super) const ARCHIVE_MIGRATION: &str = "
ALTER TABLE buckets ADD COLUMN archive TEXT NOT NULL DEFAULT '{}';
ALTER TABLE objects ADD COLUMN version_id TEXT NOT NULL DEFAULT 'null';
ALTER TABLE objects ADD COLUMN version_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE objects ADD COLUMN attributes TEXT NOT NULL DEFAULT '{}';
ALTER TABLE objects ADD COLUMN expires_ms INTEGER;
CREATE INDEX objects_expiring ON objects(expires_ms) WHERE expires_ms IS NOT NULL;
ALTER TABLE contents ADD COLUMN pinned_until_ms INTEGER;
CREATE TABLE object_versions (
    bucket TEXT NOT NULL,
    key BLOB NOT NULL,
    content BLOB,
    size_bytes INTEGER NOT NULL,
    etag TEXT NOT NULL,
    last_modified_ms INTEGER NOT NULL,
    content_type TEXT,
    user_metadata TEXT NOT NULL,
    checksums TEXT NOT NULL,
    dataset TEXT NOT NULL,
    version_id TEXT NOT NULL,
    version_seq INTEGER NOT NULL,
    attributes TEXT NOT NULL,
    expires_ms INTEGER,
    delete_marker INTEGER NOT NULL,
    noncurrent_since_ms INTEGER NOT NULL,
    PRIMARY KEY (bucket, key, version_seq)
);
CREATE INDEX versions_by_content ON object_versions(content);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO counters (name, value) VALUES ('version_seq', 0);
CREATE TABLE restores (
    bucket TEXT NOT NULL,
    key BLOB NOT NULL,
    version_id TEXT NOT NULL,
    content BLOB NOT NULL,
    requested_ms INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    done_ms INTEGER,
    expiry_ms INTEGER,
    PRIMARY KEY (bucket, key, version_id)
);
CREATE INDEX restores_pending ON restores(requested_ms) WHERE done_ms IS NULL;
";

/// Apply the schema: `base` (creates what is missing) when the database has no version, then every migration
/// above the version it has, and record the newest. Refuses a version it does not know.
pub(super) fn migrate(
    tx: &Transaction,
    base: &str,
    base_version: u32,
    migrations: &[(u32, &str)],
) -> sql::Result<()> {
    let newest = migrations.last().map_or(base_version, |m| m.0);
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    )?;
    let version: Option<String> = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            params![],
            |r| r.get(0),
        )
        .optional()?;
    let from = match version {
        None => {
            tx.execute_batch(base)?;
            base_version
        }
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (base_version..=newest).contains(&n) => n,
            _ => {
                return Err(sql::Error::conversion(CatalogError::Corrupt(format!(
                    "catalog schema version {v} is not supported (this build reads {base_version} to {newest})"
                ))))
            }
        },
    };
    for (_, sql) in migrations.iter().filter(|(v, _)| *v > from) {
        tx.execute_batch(sql)?;
    }
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![newest.to_string()],
    )?;
    Ok(())
}
