//! `permafrost key …`: access keys with per-bucket permissions (docs/security.md).
//!
//! Like `status`, a command goes to a running server's admin API (`--endpoint URL`, or the server that runs on
//! the data directory), signed as the root user; with no server running it opens the data directory's catalog
//! directly. A key's secret is printed once, by `create`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use permafrost_access::{Access, KeyInfo, Permission};

use crate::object::remote::Remote;
use crate::object::Target;

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Make a key (its secret is printed once: keep it now).
    Create(CreateArgs),
    /// Every key: name, key id, state, permissions per bucket.
    List(TargetArgs),
    /// One key.
    Info(NameArgs),
    /// Grant permissions on a bucket (read, write, delete, owner), or with --create-buckets the right to make
    /// buckets.
    Allow(GrantArgs),
    /// Take back permissions on a bucket, or with --create-buckets the right to make buckets.
    Deny(GrantArgs),
    /// A disabled key signs nothing; its permissions stay.
    Disable(NameArgs),
    Enable(NameArgs),
    /// Remove a key; the buckets it owned become the root user's.
    Delete(NameArgs),
}

#[derive(Args)]
pub struct TargetArgs {
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct NameArgs {
    /// The key's name.
    name: String,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct CreateArgs {
    /// A name for people and grants: letters, digits, '.', '_', '-'.
    name: String,
    /// The key may create buckets (and owns those it creates).
    #[arg(long)]
    create_buckets: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct GrantArgs {
    /// The key's name.
    name: String,
    /// The bucket (not with --create-buckets alone).
    bucket: Option<String>,
    /// read, write, delete or owner (one or more).
    permissions: Vec<String>,
    /// The right to create buckets.
    #[arg(long)]
    create_buckets: bool,
    #[command(flatten)]
    target: Target,
}

/// Where keys are managed: a running server, or the catalog of a stopped one.
enum Keys {
    Server(Remote),
    Catalog {
        access: Access,
        _lock: std::fs::File,
    },
}

impl Keys {
    fn open(target: &Target) -> Result<Keys> {
        if let Some(endpoint) = crate::object::server_endpoint(target) {
            return Ok(Keys::Server(Remote::connect(&endpoint, target)?));
        }
        let lock = crate::data_dir::lock(&target.data_dir)?;
        let access = open_catalog(&target.data_dir)?;
        Ok(Keys::Catalog {
            access,
            _lock: lock,
        })
    }

    fn create(&self, name: &str, create_buckets: bool) -> Result<KeyInfo> {
        match self {
            Keys::Server(s) => parse(s.admin(
                "POST",
                "/_permafrost/api/v1/keys",
                Some(&serde_json::json!({ "name": name, "create_buckets": create_buckets })),
            )?),
            Keys::Catalog { access, .. } => Ok(access.create_key(name, create_buckets)?),
        }
    }

    fn list(&self) -> Result<Vec<KeyInfo>> {
        match self {
            Keys::Server(s) => parse(s.admin("GET", "/_permafrost/api/v1/keys", None)?),
            Keys::Catalog { access, .. } => Ok(access.keys()),
        }
    }

    fn info(&self, name: &str) -> Result<KeyInfo> {
        match self {
            Keys::Server(s) => {
                parse(s.admin("GET", &format!("/_permafrost/api/v1/keys/{name}"), None)?)
            }
            Keys::Catalog { access, .. } => Ok(access.key_info(name)?),
        }
    }

    fn set(
        &self,
        name: &str,
        bucket: &str,
        permission: Permission,
        allowed: bool,
    ) -> Result<KeyInfo> {
        match self {
            Keys::Server(s) => parse(s.admin(
                "POST",
                &format!(
                    "/_permafrost/api/v1/keys/{name}/{}",
                    if allowed { "allow" } else { "deny" }
                ),
                Some(&serde_json::json!({ "bucket": bucket, "permission": permission })),
            )?),
            Keys::Catalog { access, .. } => {
                Ok(access.set_permission(name, bucket, permission, allowed)?)
            }
        }
    }

    fn update(
        &self,
        name: &str,
        enabled: Option<bool>,
        create_buckets: Option<bool>,
    ) -> Result<KeyInfo> {
        match self {
            Keys::Server(s) => parse(s.admin(
                "PUT",
                &format!("/_permafrost/api/v1/keys/{name}"),
                Some(&serde_json::json!({ "enabled": enabled, "create_buckets": create_buckets })),
            )?),
            Keys::Catalog { access, .. } => Ok(access.update_key(name, enabled, create_buckets)?),
        }
    }

    fn delete(&self, name: &str) -> Result<()> {
        match self {
            Keys::Server(s) => {
                s.admin("DELETE", &format!("/_permafrost/api/v1/keys/{name}"), None)?;
                Ok(())
            }
            Keys::Catalog { access, .. } => Ok(access.delete_key(name)?),
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T> {
    serde_json::from_value(value).context("the server's answer about keys has an unknown shape")
}

/// The access tables of a stopped server's catalog (SQLite in the data directory, or its PostgreSQL URL).
fn open_catalog(data_dir: &Path) -> Result<Access> {
    let config = crate::config::Config::load(data_dir)?;
    if config.cluster.is_some() {
        // A node of a cluster: the keys are the cluster's, in the shared access tables.
        let url = config.cluster_database_url()?;
        let catalog = permafrost_catalog::SqlCatalog::open_postgres(
            &permafrost_catalog::cluster::access_url(&url),
            permafrost_catalog::PostgresOptions::default(),
        )
        .context(
            "cannot open the cluster's shared access tables (start a node once to make them)",
        )?;
        return Ok(Access::open_catalog_only(Arc::new(catalog))?);
    }
    let catalog = config
        .store
        .catalog
        .open(data_dir, true)
        .with_context(|| format!("cannot open the catalog of {}", data_dir.display()))?;
    Ok(Access::open_catalog_only(Arc::new(catalog))?)
}

pub fn run(command: KeyCommand) -> Result<()> {
    match command {
        KeyCommand::Create(a) => {
            let key = Keys::open(&a.target)?.create(&a.name, a.create_buckets)?;
            if a.target.json {
                return print_json(&key);
            }
            println!("access key {} created", key.name);
            println!("  access key id  {}", key.access_key);
            println!(
                "  secret key     {}",
                key.secret_key.as_deref().unwrap_or("(not returned)")
            );
            println!("The secret is shown only now: keep it (a lost secret means a new key).");
            if !key.create_buckets {
                println!(
                    "It may do nothing yet: permafrost key allow {} BUCKET read|write|delete|owner",
                    key.name
                );
            }
            Ok(())
        }
        KeyCommand::List(a) => {
            let keys = Keys::open(&a.target)?.list()?;
            if a.target.json {
                return print_json(&keys);
            }
            if keys.is_empty() {
                println!("no access keys (only the root user): permafrost key create NAME");
                return Ok(());
            }
            println!(
                "{:<24} {:<22} {:<9} {:<15} permissions",
                "name", "access key id", "state", "create buckets"
            );
            for k in &keys {
                println!(
                    "{:<24} {:<22} {:<9} {:<15} {}",
                    k.name,
                    k.access_key,
                    if k.enabled { "enabled" } else { "disabled" },
                    if k.create_buckets { "yes" } else { "no" },
                    permissions_text(k)
                );
            }
            Ok(())
        }
        KeyCommand::Info(a) => show(&Keys::open(&a.target)?.info(&a.name)?, a.target.json),
        KeyCommand::Allow(a) => grant(a, true),
        KeyCommand::Deny(a) => grant(a, false),
        KeyCommand::Disable(a) => show(
            &Keys::open(&a.target)?.update(&a.name, Some(false), None)?,
            a.target.json,
        ),
        KeyCommand::Enable(a) => show(
            &Keys::open(&a.target)?.update(&a.name, Some(true), None)?,
            a.target.json,
        ),
        KeyCommand::Delete(a) => {
            Keys::open(&a.target)?.delete(&a.name)?;
            if a.target.json {
                return print_json(&serde_json::json!({ "deleted": a.name }));
            }
            println!("access key {} deleted", a.name);
            Ok(())
        }
    }
}

fn grant(a: GrantArgs, allowed: bool) -> Result<()> {
    let permissions: Vec<Permission> = a
        .permissions
        .iter()
        .map(|p| Permission::parse(p))
        .collect::<Result<_, _>>()?;
    if a.bucket.is_none() && !a.create_buckets {
        bail!(
            "name a bucket and permissions (read, write, delete, owner), or give --create-buckets"
        );
    }
    if a.bucket.is_some() && permissions.is_empty() {
        bail!("name the permissions on the bucket: read, write, delete or owner");
    }
    let keys = Keys::open(&a.target)?;
    let mut key = None;
    if a.create_buckets {
        key = Some(keys.update(&a.name, None, Some(allowed))?);
    }
    if let Some(bucket) = &a.bucket {
        for p in permissions {
            key = Some(keys.set(&a.name, bucket, p, allowed)?);
        }
    }
    show(&key.expect("one change was made"), a.target.json)
}

fn permissions_text(k: &KeyInfo) -> String {
    if k.buckets.is_empty() {
        return "none".into();
    }
    k.buckets
        .iter()
        .map(|(b, ps)| {
            let ps: Vec<&str> = ps.iter().map(|p| p.as_str()).collect();
            format!("{b}: {}", ps.join("+"))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn show(k: &KeyInfo, json: bool) -> Result<()> {
    if json {
        return print_json(k);
    }
    println!("name            {}", k.name);
    println!("access key id   {}", k.access_key);
    println!(
        "state           {}",
        if k.enabled { "enabled" } else { "disabled" }
    );
    println!(
        "create buckets  {}",
        if k.create_buckets { "yes" } else { "no" }
    );
    println!("permissions     {}", permissions_text(k));
    Ok(())
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
