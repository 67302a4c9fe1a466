//! The tables of access keys, grants and bucket access (`crate::access`; docs/catalog.md), on either back end.

use super::SqlCatalog;
use crate::access::{AccessCatalog, AccessKeyRecord, BucketAccessRecord};
use crate::sql::{self, params, Connection, OptionalExtension};
use crate::{now_ms, CatalogError, Result};

/// Schema version 9 (SQLite): keys, grants, bucket access, and the counter that changes with them.
pub(super) const ACCESS_MIGRATION: &str = "
CREATE TABLE access_keys (
    name TEXT PRIMARY KEY,
    access_key TEXT NOT NULL UNIQUE,
    secret_key TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    enabled BIGINT NOT NULL,
    create_buckets BIGINT NOT NULL
);
CREATE TABLE access_grants (
    key_name TEXT NOT NULL,
    bucket TEXT NOT NULL,
    permission TEXT NOT NULL,
    PRIMARY KEY (key_name, bucket, permission)
);
CREATE INDEX access_grants_by_bucket ON access_grants(bucket);
CREATE TABLE bucket_access (
    bucket TEXT PRIMARY KEY,
    owner TEXT,
    acl TEXT NOT NULL,
    policy TEXT,
    public_access_block TEXT
);
CREATE TABLE object_acls (
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    acl TEXT NOT NULL,
    PRIMARY KEY (bucket, key)
);
INSERT INTO counters (name, value) VALUES ('access_version', 0);
";

/// Schema version 9 (PostgreSQL): the same tables, names compared in byte order.
pub(crate) const PG_ACCESS_MIGRATION: &str = r#"
CREATE TABLE access_keys (
    name TEXT COLLATE "C" PRIMARY KEY,
    access_key TEXT COLLATE "C" NOT NULL UNIQUE,
    secret_key TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    enabled BIGINT NOT NULL,
    create_buckets BIGINT NOT NULL
);
CREATE TABLE access_grants (
    key_name TEXT COLLATE "C" NOT NULL,
    bucket TEXT COLLATE "C" NOT NULL,
    permission TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (key_name, bucket, permission)
);
CREATE INDEX access_grants_by_bucket ON access_grants(bucket);
CREATE TABLE bucket_access (
    bucket TEXT COLLATE "C" PRIMARY KEY,
    owner TEXT COLLATE "C",
    acl TEXT NOT NULL,
    policy TEXT,
    public_access_block TEXT
);
CREATE TABLE object_acls (
    bucket TEXT COLLATE "C" NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    acl TEXT NOT NULL,
    PRIMARY KEY (bucket, key)
);
INSERT INTO counters (name, value) VALUES ('access_version', 0);
"#;

/// Count a change (in the transaction that makes it).
fn bump(tx: &Connection) -> sql::Result<()> {
    tx.execute(
        "UPDATE counters SET value = value + 1 WHERE name = 'access_version'",
        params![],
    )?;
    Ok(())
}

fn key_exists(tx: &Connection, name: &str) -> sql::Result<bool> {
    Ok(tx
        .query_row(
            "SELECT 1 FROM access_keys WHERE name = ?1",
            params![name],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// Rows of a deleted bucket: its grants and its access row (a bucket made again later starts unshared).
pub(super) fn forget_bucket(tx: &Connection, bucket: &str) -> sql::Result<()> {
    tx.execute(
        "DELETE FROM access_grants WHERE bucket = ?1",
        params![bucket],
    )?;
    tx.execute(
        "DELETE FROM bucket_access WHERE bucket = ?1",
        params![bucket],
    )?;
    bump(tx)
}

impl AccessCatalog for SqlCatalog {
    fn access_version(&self) -> Result<u64> {
        self.read(|c| {
            c.query_row(
                "SELECT value FROM counters WHERE name = 'access_version'",
                params![],
                |r| r.get::<_, i64>(0),
            )
            .map(|v| v as u64)
        })
    }

    fn access_keys(&self) -> Result<Vec<AccessKeyRecord>> {
        self.read(|c| {
            let mut keys: Vec<AccessKeyRecord> = c
                .prepare_cached(
                    "SELECT name, access_key, secret_key, created_ms, enabled, create_buckets
                     FROM access_keys ORDER BY name",
                )?
                .query_map(params![], |r| {
                    Ok(AccessKeyRecord {
                        name: r.get(0)?,
                        access_key: r.get(1)?,
                        secret_key: r.get(2)?,
                        created_ms: r.get::<_, i64>(3)? as u64,
                        enabled: r.get::<_, i64>(4)? != 0,
                        create_buckets: r.get::<_, i64>(5)? != 0,
                        grants: Vec::new(),
                    })
                })?
                .collect::<sql::Result<_>>()?;
            let grants: Vec<(String, String, String)> = c
                .prepare_cached(
                    "SELECT key_name, bucket, permission FROM access_grants
                     ORDER BY key_name, bucket, permission",
                )?
                .query_map(params![], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<sql::Result<_>>()?;
            for (name, bucket, permission) in grants {
                if let Ok(i) = keys.binary_search_by(|k| k.name.as_str().cmp(&name)) {
                    keys[i].grants.push((bucket, permission));
                }
            }
            Ok(keys)
        })
    }

    fn buckets_access(&self) -> Result<Vec<BucketAccessRecord>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT bucket, owner, acl, policy, public_access_block, cors FROM bucket_access ORDER BY bucket",
            )?
            .query_map(params![], |r| {
                Ok(BucketAccessRecord {
                    bucket: r.get(0)?,
                    owner: r.get(1)?,
                    acl: r.get(2)?,
                    policy: r.get(3)?,
                    public_access_block: r.get(4)?,
                    cors: r.get(5)?,
                })
            })?
            .collect()
        })
    }

    fn create_access_key(&self, key: &AccessKeyRecord) -> Result<()> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            let taken = tx
                .query_row(
                    "SELECT name FROM access_keys WHERE name = ?1 OR access_key = ?2",
                    params![key.name, key.access_key],
                    |r| r.get::<_, String>(0),
                )
                .optional()
                .map_err(e)?;
            if let Some(name) = taken {
                return Err(CatalogError::AccessKeyExists(name));
            }
            tx.execute(
                "INSERT INTO access_keys (name, access_key, secret_key, created_ms, enabled, create_buckets)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    key.name,
                    key.access_key,
                    key.secret_key,
                    if key.created_ms == 0 { now_ms() } else { key.created_ms },
                    key.enabled,
                    key.create_buckets
                ],
            )
            .map_err(e)?;
            for (bucket, permission) in &key.grants {
                tx.execute(
                    "INSERT INTO access_grants (key_name, bucket, permission) VALUES (?1, ?2, ?3)
                     ON CONFLICT DO NOTHING",
                    params![key.name, bucket, permission],
                )
                .map_err(e)?;
            }
            bump(tx).map_err(e)
        })
    }

    fn update_access_key(
        &self,
        name: &str,
        enabled: Option<bool>,
        create_buckets: Option<bool>,
    ) -> Result<()> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            if !key_exists(tx, name).map_err(e)? {
                return Err(CatalogError::NoSuchAccessKey(name.to_string()));
            }
            if let Some(enabled) = enabled {
                tx.execute(
                    "UPDATE access_keys SET enabled = ?2 WHERE name = ?1",
                    params![name, enabled],
                )
                .map_err(e)?;
            }
            if let Some(create) = create_buckets {
                tx.execute(
                    "UPDATE access_keys SET create_buckets = ?2 WHERE name = ?1",
                    params![name, create],
                )
                .map_err(e)?;
            }
            bump(tx).map_err(e)
        })
    }

    fn delete_access_key(&self, name: &str) -> Result<()> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            if !key_exists(tx, name).map_err(e)? {
                return Err(CatalogError::NoSuchAccessKey(name.to_string()));
            }
            tx.execute("DELETE FROM access_keys WHERE name = ?1", params![name])
                .map_err(e)?;
            tx.execute(
                "DELETE FROM access_grants WHERE key_name = ?1",
                params![name],
            )
            .map_err(e)?;
            tx.execute(
                "UPDATE bucket_access SET owner = NULL WHERE owner = ?1",
                params![name],
            )
            .map_err(e)?;
            bump(tx).map_err(e)
        })
    }

    fn set_access_grant(
        &self,
        name: &str,
        bucket: &str,
        permission: &str,
        granted: bool,
    ) -> Result<()> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            if !key_exists(tx, name).map_err(e)? {
                return Err(CatalogError::NoSuchAccessKey(name.to_string()));
            }
            if granted {
                tx.execute(
                    "INSERT INTO access_grants (key_name, bucket, permission) VALUES (?1, ?2, ?3)
                     ON CONFLICT DO NOTHING",
                    params![name, bucket, permission],
                )
                .map_err(e)?;
            } else {
                tx.execute(
                    "DELETE FROM access_grants WHERE key_name = ?1 AND bucket = ?2 AND permission = ?3",
                    params![name, bucket, permission],
                )
                .map_err(e)?;
            }
            bump(tx).map_err(e)
        })
    }

    fn set_bucket_access(&self, record: &BucketAccessRecord) -> Result<()> {
        self.write_with(|tx| {
            let e = |e| self.db_error(e);
            tx.execute(
                "INSERT INTO bucket_access (bucket, owner, acl, policy, public_access_block, cors)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (bucket) DO UPDATE SET owner = excluded.owner, acl = excluded.acl,
                     policy = excluded.policy, public_access_block = excluded.public_access_block,
                     cors = excluded.cors",
                params![
                    record.bucket,
                    record.owner,
                    record.acl,
                    record.policy,
                    record.public_access_block,
                    record.cors
                ],
            )
            .map_err(e)?;
            bump(tx).map_err(e)
        })
    }

    fn forget_bucket_access(&self, bucket: &str) -> Result<()> {
        self.write(|tx| forget_bucket(tx, bucket))
    }

    fn object_acl(&self, bucket: &str, key: &str) -> Result<Option<String>> {
        self.read(|c| {
            c.query_row(
                "SELECT acl FROM object_acls WHERE bucket = ?1 AND key = ?2",
                params![bucket, key],
                |r| r.get(0),
            )
            .optional()
        })
    }

    fn set_object_acl(&self, bucket: &str, key: &str, acl: Option<&str>) -> Result<()> {
        self.write(|tx| {
            match acl {
                Some(acl) => tx.execute(
                    "INSERT INTO object_acls (bucket, key, acl) VALUES (?1, ?2, ?3)
                     ON CONFLICT (bucket, key) DO UPDATE SET acl = excluded.acl",
                    params![bucket, key, acl],
                )?,
                None => tx.execute(
                    "DELETE FROM object_acls WHERE bucket = ?1 AND key = ?2",
                    params![bucket, key],
                )?,
            };
            bump(tx)
        })
    }

    fn object_acls(&self, bucket: &str) -> Result<Vec<(String, String)>> {
        self.read(|c| {
            c.prepare_cached("SELECT key, acl FROM object_acls WHERE bucket = ?1 ORDER BY key")?
                .query_map(params![bucket], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
    }

    fn buckets_with_object_acls(&self) -> Result<Vec<String>> {
        self.read(|c| {
            c.prepare_cached("SELECT DISTINCT bucket FROM object_acls ORDER BY bucket")?
                .query_map(params![], |r| r.get(0))?
                .collect()
        })
    }
}
