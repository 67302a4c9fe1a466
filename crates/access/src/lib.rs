//! # permafrost-access: who may do what
//!
//! **Job.** Decide, for every request, whether its signer may do it: the root user (the administrator), an
//! access key with per-bucket permissions, or an anonymous request that only a public ACL or bucket policy can
//! let in. Keep the keys and the bucket access rows in the catalog (`permafrost_catalog::AccessCatalog`, so
//! every node of a cluster sharing a catalog knows them) and a copy in memory ([`AccessTable`]), so that a
//! decision costs a few hash lookups and never a database round trip.
//!
//! **The model** (docs/security.md has the whole table):
//! - A key holds permissions per bucket: `read` (get, head, list, tags, restore), `write` (put, copy into,
//!   multipart, tags), `delete` (delete objects and versions) and `owner` (all of them, plus the bucket's
//!   configuration, ACLs, policy, Block Public Access, deleting the bucket and bypassing a GOVERNANCE
//!   retention). Permissions do not imply each other, except `owner`.
//! - The key that creates a bucket owns it. Creating buckets is a right of its own (`create_buckets`).
//! - The root user may do everything, and only the root user may use the admin API and manage keys.
//! - Every operation is classified in [`operations::OPERATIONS`]; an unclassified operation is refused to
//!   everyone but root.
//!
//! **Invariants.**
//! - A request is allowed only by a rule that names it: root, a grant, an ownership, an ACL grant or a policy
//!   `Allow`; an explicit policy `Deny` wins over every allow (except root's).
//! - The in-memory table is replaced whole after every change made through [`Access`] and whenever the
//!   catalog's access version moved ([`Access::refresh`]); a decision sees one consistent table.
//! - Secrets never appear in logs or `Debug` output.
//!
//! **Not here.** Signature checking (s3s does it with the secret [`Access::secret_of`] returns), mapping HTTP
//! requests to operations (the S3 layer), the admin API's own sessions and tokens (`permafrost-admin`).

#![forbid(unsafe_code)]

pub mod acl;
mod keys;
pub mod operations;
pub mod policy;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;
use permafrost_catalog::{AccessCatalog, AccessKeyRecord, BucketAccessRecord, CatalogError};
use serde::Serialize;

pub use acl::{Acl, AclGrant, AclPermission, Grantee};
pub use keys::{check_name, new_access_key, new_secret_key, NAME_BYTES_MAX};
pub use operations::{classify, Need, Operation, OPERATIONS};
pub use policy::{Asker, Effect, Policy};

/// The name the root user goes by in decisions, logs and events.
pub const ROOT_NAME: &str = "root";
/// The name anonymous requests go by.
pub const ANONYMOUS_NAME: &str = "anonymous";

/// A permission a key holds on a bucket.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    Read,
    Write,
    Delete,
    Owner,
}

impl Permission {
    pub const ALL: [Permission; 4] = [
        Permission::Read,
        Permission::Write,
        Permission::Delete,
        Permission::Owner,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Delete => "delete",
            Permission::Owner => "owner",
        }
    }

    pub fn parse(text: &str) -> Result<Permission, AccessError> {
        Permission::ALL
            .into_iter()
            .find(|p| p.as_str() == text)
            .ok_or_else(|| {
                AccessError::Invalid(format!(
                    "permission {text:?}: expected read, write, delete or owner"
                ))
            })
    }
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong managing keys.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("no access key named {0}")]
    NoSuchKey(String),
    #[error("an access key named {0} already exists")]
    Exists(String),
    /// A bad name, permission or document; the message says which.
    #[error("{0}")]
    Invalid(String),
    /// A bucket policy that cannot be used (S3 `MalformedPolicy`); the message names the part.
    #[error("{0}")]
    MalformedPolicy(String),
    /// Block Public Access refuses a public ACL or policy; the message names the setting.
    #[error("{0}")]
    Blocked(String),
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    #[error(transparent)]
    Catalog(CatalogError),
}

impl From<CatalogError> for AccessError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::NoSuchAccessKey(name) => AccessError::NoSuchKey(name),
            CatalogError::AccessKeyExists(name) => AccessError::Exists(name),
            CatalogError::NoSuchBucket(name) => AccessError::NoSuchBucket(name),
            other => AccessError::Catalog(other),
        }
    }
}

/// A refusal: the message names the caller, the operation, the bucket and what was missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denied {
    pub message: String,
}

/// One access key as decisions see it.
pub struct Key {
    pub name: String,
    pub access_key: String,
    secret_key: String,
    pub created_ms: u64,
    pub enabled: bool,
    pub create_buckets: bool,
    /// Permissions by bucket.
    pub grants: BTreeMap<String, BTreeSet<Permission>>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

impl Key {
    fn from_record(r: AccessKeyRecord) -> Key {
        let mut grants: BTreeMap<String, BTreeSet<Permission>> = BTreeMap::new();
        for (bucket, permission) in r.grants {
            // An unknown word (written by a newer build) grants nothing.
            if let Ok(p) = Permission::parse(&permission) {
                grants.entry(bucket).or_default().insert(p);
            }
        }
        Key {
            name: r.name,
            access_key: r.access_key,
            secret_key: r.secret_key,
            created_ms: r.created_ms,
            enabled: r.enabled,
            create_buckets: r.create_buckets,
            grants,
        }
    }

    /// The permissions granted on `bucket` (ownership not included).
    pub fn granted(&self, bucket: &str) -> impl Iterator<Item = Permission> + '_ {
        self.grants.get(bucket).into_iter().flatten().copied()
    }

    /// What people and scripts see of a key: everything but the secret.
    pub fn info(&self, table: &AccessTable) -> KeyInfo {
        let mut grants: BTreeMap<String, Vec<Permission>> = self
            .grants
            .iter()
            .map(|(b, ps)| (b.clone(), ps.iter().copied().collect()))
            .collect();
        for (bucket, access) in &table.buckets {
            if access.owner.as_deref() == Some(self.name.as_str()) {
                let ps = grants.entry(bucket.clone()).or_default();
                if !ps.contains(&Permission::Owner) {
                    ps.push(Permission::Owner);
                }
            }
        }
        KeyInfo {
            name: self.name.clone(),
            access_key: self.access_key.clone(),
            secret_key: None,
            created_ms: self.created_ms,
            enabled: self.enabled,
            create_buckets: self.create_buckets,
            buckets: grants,
        }
    }
}

/// A key as the admin API and the CLI show it. `secret_key` is set only in the answer that created it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct KeyInfo {
    pub name: String,
    pub access_key: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub secret_key: Option<String>,
    pub created_ms: u64,
    pub enabled: bool,
    pub create_buckets: bool,
    /// Permissions per bucket (buckets it owns say `owner`).
    pub buckets: BTreeMap<String, Vec<Permission>>,
}

/// Who signed a request.
#[derive(Debug, Clone)]
pub enum Principal {
    Root,
    Key(Arc<Key>),
    Anonymous,
}

impl Principal {
    /// The name logs, events and refusals use: `root`, the key's name, or `anonymous`.
    pub fn name(&self) -> &str {
        match self {
            Principal::Root => ROOT_NAME,
            Principal::Key(k) => &k.name,
            Principal::Anonymous => ANONYMOUS_NAME,
        }
    }

    pub fn is_root(&self) -> bool {
        matches!(self, Principal::Root)
    }

    /// How a refusal names the caller.
    fn described(&self) -> String {
        match self {
            Principal::Root => "the root user".into(),
            Principal::Key(k) => format!("access key {} ({})", k.name, k.access_key),
            Principal::Anonymous => "an anonymous request".into(),
        }
    }
}

/// A bucket's Block Public Access configuration (S3's four flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PublicAccessBlock {
    /// Refuse public ACLs (PutBucketAcl, PutObjectAcl, a canned ACL on PUT).
    pub block_public_acls: bool,
    /// Ignore the public grants of ACLs in decisions.
    pub ignore_public_acls: bool,
    /// Refuse public bucket policies.
    pub block_public_policy: bool,
    /// Ignore the public statements of bucket policies in decisions.
    pub restrict_public_buckets: bool,
}

impl PublicAccessBlock {
    const ALL: PublicAccessBlock = PublicAccessBlock {
        block_public_acls: true,
        ignore_public_acls: true,
        block_public_policy: true,
        restrict_public_buckets: true,
    };
}

/// Server-wide settings of access control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessSettings {
    /// Block every public ACL and policy on every bucket, whatever the bucket says (`[server]
    /// block_public_access` in permafrost.toml; on by default: nothing becomes public unless the operator
    /// allows it).
    pub block_public_access: bool,
}

impl Default for AccessSettings {
    fn default() -> Self {
        AccessSettings {
            block_public_access: true,
        }
    }
}

/// Who owns a bucket and how it is shared.
#[derive(Debug, Clone, Default)]
pub struct BucketAccess {
    /// The owning key (`None`: root).
    pub owner: Option<String>,
    pub acl: Acl,
    pub policy: Option<Policy>,
    /// The bucket's own Block Public Access configuration, if one was put.
    pub public_access_block: Option<PublicAccessBlock>,
    record: BucketAccessRecord,
}

impl BucketAccess {
    fn from_record(record: BucketAccessRecord) -> BucketAccess {
        BucketAccess {
            owner: record.owner.clone(),
            acl: Acl::from_json(&record.acl),
            // A stored policy was checked when it was put; one this build cannot read allows nothing.
            policy: record
                .policy
                .as_deref()
                .and_then(|p| Policy::parse(p, &record.bucket).ok()),
            public_access_block: record
                .public_access_block
                .as_deref()
                .and_then(|p| serde_json::from_str(p).ok()),
            record,
        }
    }

    /// The catalog row this came from (for changes: read, modify, write back).
    pub fn record(&self) -> &BucketAccessRecord {
        &self.record
    }
}

/// Everything decisions need, as of one catalog version.
#[derive(Debug, Default)]
pub struct AccessTable {
    pub version: u64,
    settings: AccessSettings,
    by_access_key: HashMap<String, Arc<Key>>,
    by_name: BTreeMap<String, Arc<Key>>,
    buckets: HashMap<String, BucketAccess>,
    /// Buckets where some object has an ACL of its own.
    object_acl_buckets: HashSet<String>,
}

impl AccessTable {
    fn load(
        catalog: &dyn AccessCatalog,
        settings: AccessSettings,
    ) -> Result<AccessTable, AccessError> {
        let version = catalog.access_version()?;
        let mut table = AccessTable {
            version,
            settings,
            ..Default::default()
        };
        for record in catalog.access_keys()? {
            let key = Arc::new(Key::from_record(record));
            table
                .by_access_key
                .insert(key.access_key.clone(), Arc::clone(&key));
            table.by_name.insert(key.name.clone(), key);
        }
        for record in catalog.buckets_access()? {
            table
                .buckets
                .insert(record.bucket.clone(), BucketAccess::from_record(record));
        }
        table.object_acl_buckets = catalog.buckets_with_object_acls()?.into_iter().collect();
        Ok(table)
    }

    /// The key with this key id.
    pub fn by_access_key(&self, access_key: &str) -> Option<&Arc<Key>> {
        self.by_access_key.get(access_key)
    }

    /// The key with this name.
    pub fn by_name(&self, name: &str) -> Option<&Arc<Key>> {
        self.by_name.get(name)
    }

    /// Every key, by name.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<Key>> {
        self.by_name.values()
    }

    /// The access row of a bucket (`None`: root's, unshared).
    pub fn bucket(&self, bucket: &str) -> Option<&BucketAccess> {
        self.buckets.get(bucket)
    }

    /// The Block Public Access in force on `bucket`: everything when the server blocks public access,
    /// else the bucket's own configuration.
    pub fn block(&self, bucket: &str) -> PublicAccessBlock {
        if self.settings.block_public_access {
            return PublicAccessBlock::ALL;
        }
        self.buckets
            .get(bucket)
            .and_then(|b| b.public_access_block)
            .unwrap_or_default()
    }

    /// Why public access on `bucket` is refused (`which`: the flag of the bucket's configuration that
    /// applies), naming the setting.
    pub fn blocked_reason(&self, bucket: &str, which: &str) -> String {
        if self.settings.block_public_access {
            format!(
                "public access is blocked on this server (block_public_access = true in the [server] table of \
                 permafrost.toml): nothing on bucket {bucket} can be made public"
            )
        } else {
            format!(
                "public access is blocked by the Block Public Access configuration of bucket {bucket} \
                 ({which}): DeletePublicAccessBlock or change it first"
            )
        }
    }

    /// Whether `key` owns `bucket`.
    fn owns(&self, key: &Key, bucket: &str) -> bool {
        self.buckets
            .get(bucket)
            .and_then(|b| b.owner.as_deref())
            .is_some_and(|owner| owner == key.name)
    }

    /// Whether `principal` owns `bucket` (root owns the buckets no key owns).
    pub fn owned_by(&self, principal: &Principal, bucket: &str) -> bool {
        let owner = self.buckets.get(bucket).and_then(|b| b.owner.as_deref());
        match principal {
            Principal::Root => owner.is_none(),
            Principal::Key(key) => owner == Some(key.name.as_str()),
            Principal::Anonymous => false,
        }
    }

    /// The permissions `key` has on `bucket`, ownership included.
    pub fn permissions(&self, key: &Key, bucket: &str) -> BTreeSet<Permission> {
        let mut ps: BTreeSet<Permission> = key.granted(bucket).collect();
        if self.owns(key, bucket) {
            ps.insert(Permission::Owner);
        }
        ps
    }

    /// Whether `principal` may see that `bucket` exists (ListBuckets).
    pub fn may_see(&self, principal: &Principal, bucket: &str) -> bool {
        match principal {
            Principal::Root => true,
            Principal::Key(key) => !self.permissions(key, bucket).is_empty(),
            Principal::Anonymous => false,
        }
    }

    /// Whether some object of `bucket` has an ACL of its own.
    pub fn has_object_acls(&self, bucket: &str) -> bool {
        self.object_acl_buckets.contains(bucket)
    }

    /// Whether an object's own ACL could still allow `operation` when the bucket-level decision refused it
    /// (then the caller looks the ACL up and asks [`AccessTable::authorize_with_object_acl`]).
    pub fn object_acl_may_allow(&self, operation: &Operation, bucket: &str) -> bool {
        operation.on_object
            && matches!(
                operation.action,
                "s3:GetObject" | "s3:GetObjectVersion" | "s3:GetObjectAcl" | "s3:PutObjectAcl"
            )
            && self.has_object_acls(bucket)
    }

    /// Decide whether `principal` may run `operation` on `bucket` (and `object`, for object operations).
    ///
    /// The order of AWS's evaluation: the root user may do everything; an explicit `Deny` of the bucket
    /// policy refuses; then a key's grant or ownership, a policy `Allow`, or an ACL grant allows; nothing
    /// else does. Block Public Access makes the public statements and grants count for nothing.
    pub fn authorize(
        &self,
        principal: &Principal,
        operation: &Operation,
        bucket: &str,
        object: Option<&str>,
    ) -> Result<(), Denied> {
        self.decide(principal, operation, bucket, object, None)
    }

    /// [`AccessTable::authorize`] with the ACL of the object the request is about.
    pub fn authorize_with_object_acl(
        &self,
        principal: &Principal,
        operation: &Operation,
        bucket: &str,
        object: Option<&str>,
        object_acl: &Acl,
    ) -> Result<(), Denied> {
        self.decide(principal, operation, bucket, object, Some(object_acl))
    }

    fn decide(
        &self,
        principal: &Principal,
        operation: &Operation,
        bucket: &str,
        object: Option<&str>,
        object_acl: Option<&Acl>,
    ) -> Result<(), Denied> {
        let asker = match principal {
            Principal::Root => return Ok(()),
            Principal::Key(key) => Asker::Key(&key.name),
            Principal::Anonymous => Asker::Anonymous,
        };
        let shared = self.buckets.get(bucket);
        let block = self.block(bucket);
        let target = match (operation.on_object, object) {
            (false, _) => policy::Target::Bucket,
            (true, Some(key)) => policy::Target::Object(key),
            (true, None) => policy::Target::SomeObject,
        };
        let policy = shared.and_then(|b| b.policy.as_ref());
        if let Some(policy) = policy {
            if let Some(statement) = policy
                .matching(Effect::Deny, asker, operation.action, target)
                .next()
            {
                return Err(Denied {
                    message: format!(
                        "{} may not {} in bucket {bucket}: the bucket policy denies it{}",
                        principal.described(),
                        operation.name,
                        statement
                            .sid
                            .as_deref()
                            .map(|sid| format!(" (statement {sid})"))
                            .unwrap_or_default()
                    ),
                });
            }
        }
        let held = match principal {
            Principal::Key(key) => self.permissions(key, bucket),
            _ => BTreeSet::new(),
        };
        let granted = match (operation.need, principal) {
            (_, Principal::Anonymous) => false,
            (Need::SignedIn, _) => true,
            (Need::CreateBuckets, Principal::Key(key)) => key.create_buckets,
            (Need::AnyOnBucket, _) => !held.is_empty(),
            (Need::Bucket(p), _) => held.contains(&p) || held.contains(&Permission::Owner),
            (Need::CreateBuckets, Principal::Root) => true,
        };
        let bucket_scoped = matches!(operation.need, Need::Bucket(_) | Need::AnyOnBucket);
        let by_policy = bucket_scoped
            && policy.is_some_and(|p| {
                p.matching(Effect::Allow, asker, operation.action, target)
                    .any(|s| {
                        !(block.restrict_public_buckets
                            && s.principals == policy::Principals::Everyone)
                    })
            });
        let by_acl = bucket_scoped
            && (shared.is_some_and(|b| {
                b.acl
                    .allows(asker, operation.action, false, block.ignore_public_acls)
            }) || object_acl.is_some_and(|acl| {
                acl.allows(asker, operation.action, true, block.ignore_public_acls)
            }));
        if granted || by_policy || by_acl {
            return Ok(());
        }
        Err(Denied {
            message: self.refusal(principal, operation, bucket, &held),
        })
    }

    /// The message of a refusal: who, what, where, and what was missing.
    fn refusal(
        &self,
        principal: &Principal,
        operation: &Operation,
        bucket: &str,
        held: &BTreeSet<Permission>,
    ) -> String {
        let who = principal.described();
        let op = operation.name;
        match (principal, operation.need) {
            (Principal::Anonymous, Need::SignedIn) => {
                format!("{who} may not {op}: sign the request with an access key")
            }
            (Principal::Anonymous, Need::CreateBuckets) => format!(
                "{who} may not {op} {bucket}: sign the request with an access key that may create buckets"
            ),
            (Principal::Anonymous, _) => format!(
                "{who} may not {op} in bucket {bucket}: sign the request with an access key, or have the \
                 bucket owner share it (ACL or bucket policy)"
            ),
            (Principal::Key(key), Need::CreateBuckets) => format!(
                "{who} may not {op} {bucket}: the key may not create buckets (permafrost key allow {} \
                 --create-buckets)",
                key.name
            ),
            _ => {
                let needed = match operation.need {
                    Need::Bucket(p) => p.as_str(),
                    _ => "any permission",
                };
                let has = if held.is_empty() {
                    "none".to_string()
                } else {
                    held.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
                };
                format!(
                    "{who} may not {op} in bucket {bucket}: that needs the permission {needed} on {bucket}, \
                     and the key has {has} there"
                )
            }
        }
    }
}

/// The root user's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct RootCredentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for RootCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootCredentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .finish()
    }
}

/// Keys and bucket access: the catalog's rows and the table decisions are made from.
pub struct Access {
    catalog: Arc<dyn AccessCatalog>,
    /// `None` when opened only to manage keys (`permafrost key` on a stopped server's data directory).
    root: Option<RootCredentials>,
    settings: AccessSettings,
    table: RwLock<Arc<AccessTable>>,
}

impl Access {
    /// Load the table from `catalog`.
    pub fn open(
        catalog: Arc<dyn AccessCatalog>,
        root: RootCredentials,
        settings: AccessSettings,
    ) -> Result<Access, AccessError> {
        let table = AccessTable::load(catalog.as_ref(), settings)?;
        Ok(Access {
            catalog,
            root: Some(root),
            settings,
            table: RwLock::new(Arc::new(table)),
        })
    }

    /// Open only to manage keys: no root user, so nothing can be signed against it.
    pub fn open_catalog_only(catalog: Arc<dyn AccessCatalog>) -> Result<Access, AccessError> {
        let settings = AccessSettings::default();
        let table = AccessTable::load(catalog.as_ref(), settings)?;
        Ok(Access {
            catalog,
            root: None,
            settings,
            table: RwLock::new(Arc::new(table)),
        })
    }

    /// The root user's credentials (`None` when opened only to manage keys).
    pub fn root(&self) -> Option<&RootCredentials> {
        self.root.as_ref()
    }

    /// The table in force (cheap: one `Arc` clone).
    pub fn table(&self) -> Arc<AccessTable> {
        Arc::clone(&self.table.read())
    }

    /// Read the table again from the catalog.
    pub fn reload(&self) -> Result<(), AccessError> {
        let table = AccessTable::load(self.catalog.as_ref(), self.settings)?;
        *self.table.write() = Arc::new(table);
        Ok(())
    }

    /// Reload when the catalog's access version moved (a change made elsewhere: another node, or the CLI on
    /// the data directory). Returns whether it reloaded.
    pub fn refresh(&self) -> Result<bool, AccessError> {
        let version = self.catalog.access_version()?;
        if version == self.table().version {
            return Ok(false);
        }
        self.reload()?;
        Ok(true)
    }

    /// The principal of a key id and the secret its signatures are checked with; `Err` says why there is none
    /// (unknown or disabled).
    pub fn secret_of(&self, access_key: &str) -> Result<(Principal, String), String> {
        if let Some(root) = self.root.as_ref().filter(|r| r.access_key == access_key) {
            return Ok((Principal::Root, root.secret_key.clone()));
        }
        match self.table().by_access_key(access_key) {
            Some(key) if key.enabled => {
                Ok((Principal::Key(Arc::clone(key)), key.secret_key.clone()))
            }
            Some(key) => Err(format!(
                "access key {access_key} ({}) is disabled",
                key.name
            )),
            None => Err(format!("access key {access_key} does not exist")),
        }
    }

    /// The principal of a key id whose signature was checked (`Anonymous` for `None`).
    pub fn principal(&self, access_key: Option<&str>) -> Principal {
        match access_key {
            None => Principal::Anonymous,
            Some(id) => self
                .secret_of(id)
                .map(|(p, _)| p)
                .unwrap_or(Principal::Anonymous),
        }
    }

    /// The name a request's signer goes by in the audit trail: `root`, a key's name (a disabled one too),
    /// `anonymous`, or `unknown key ID`.
    pub fn signer_name(&self, access_key: Option<&str>) -> String {
        let Some(id) = access_key else {
            return ANONYMOUS_NAME.to_string();
        };
        if self.root.as_ref().is_some_and(|r| r.access_key == id) {
            return ROOT_NAME.to_string();
        }
        match self.table().by_access_key(id) {
            Some(key) => key.name.clone(),
            None => format!("unknown key {id}"),
        }
    }

    /// Decide with the table in force.
    pub fn authorize(
        &self,
        principal: &Principal,
        operation: &Operation,
        bucket: &str,
        object: Option<&str>,
    ) -> Result<(), Denied> {
        self.table().authorize(principal, operation, bucket, object)
    }

    /// Make a key; the answer carries its secret (shown once: it is never shown again).
    pub fn create_key(&self, name: &str, create_buckets: bool) -> Result<KeyInfo, AccessError> {
        check_name(name).map_err(AccessError::Invalid)?;
        if name == ROOT_NAME || name == ANONYMOUS_NAME {
            return Err(AccessError::Invalid(format!(
                "key name {name:?} is reserved"
            )));
        }
        let record = AccessKeyRecord {
            name: name.to_string(),
            access_key: new_access_key(),
            secret_key: new_secret_key(),
            created_ms: permafrost_catalog::now_ms(),
            enabled: true,
            create_buckets,
            grants: Vec::new(),
        };
        self.catalog.create_access_key(&record)?;
        self.reload()?;
        let mut info = self.key_info(name)?;
        info.secret_key = Some(record.secret_key);
        Ok(info)
    }

    /// A key without its secret.
    pub fn key_info(&self, name: &str) -> Result<KeyInfo, AccessError> {
        let table = self.table();
        let key = table
            .by_name(name)
            .ok_or_else(|| AccessError::NoSuchKey(name.to_string()))?;
        Ok(key.info(&table))
    }

    /// Every key without its secret, by name.
    pub fn keys(&self) -> Vec<KeyInfo> {
        let table = self.table();
        table.keys().map(|k| k.info(&table)).collect()
    }

    /// Grant (`allowed`) or take back a permission on a bucket.
    pub fn set_permission(
        &self,
        name: &str,
        bucket: &str,
        permission: Permission,
        allowed: bool,
    ) -> Result<KeyInfo, AccessError> {
        if bucket.is_empty() || bucket.contains('/') {
            return Err(AccessError::Invalid(format!(
                "bucket name {bucket:?}: name one bucket"
            )));
        }
        self.catalog
            .set_access_grant(name, bucket, permission.as_str(), allowed)?;
        // Taking `owner` back from the key that created the bucket hands the bucket to the root user.
        let table = self.table();
        let created = table
            .bucket(bucket)
            .is_some_and(|b| b.owner.as_deref() == Some(name));
        if !allowed && permission == Permission::Owner && created {
            let mut record = self.bucket_record(bucket);
            record.owner = None;
            self.catalog.set_bucket_access(&record)?;
        }
        self.reload()?;
        self.key_info(name)
    }

    /// Enable or disable a key, or change its right to create buckets.
    pub fn update_key(
        &self,
        name: &str,
        enabled: Option<bool>,
        create_buckets: Option<bool>,
    ) -> Result<KeyInfo, AccessError> {
        self.catalog
            .update_access_key(name, enabled, create_buckets)?;
        self.reload()?;
        self.key_info(name)
    }

    /// Remove a key; the buckets it owned become root's. ACL grants and policy statements that named it now
    /// name `deleted:KEY-ID` (as AWS shows a deleted user's id), so a new key of the same name inherits none
    /// of its sharing.
    pub fn delete_key(&self, name: &str) -> Result<(), AccessError> {
        let table = self.table();
        let key = table
            .by_name(name)
            .ok_or_else(|| AccessError::NoSuchKey(name.to_string()))?;
        let gone = format!("deleted:{}", key.access_key);
        let rename = |acl: &Acl| -> Option<Acl> {
            let mut acl = acl.clone();
            let mut changed = false;
            for grant in &mut acl.grants {
                if grant.grantee == Grantee::Key(name.to_string()) {
                    grant.grantee = Grantee::Key(gone.clone());
                    changed = true;
                }
            }
            changed.then_some(acl)
        };
        for shared in table.buckets.values() {
            let mut record = shared.record().clone();
            let mut changed = false;
            if let Some(acl) = rename(&shared.acl) {
                record.acl = acl.to_json();
                changed = true;
            }
            if let Some(text) = record
                .policy
                .as_deref()
                .and_then(|t| policy::rename_principal(t, name, &gone))
            {
                record.policy = Some(text);
                changed = true;
            }
            if changed {
                self.catalog.set_bucket_access(&record)?;
            }
        }
        for bucket in &table.object_acl_buckets {
            for (key, text) in self.catalog.object_acls(bucket)? {
                if let Some(acl) = rename(&Acl::from_json(&text)) {
                    self.catalog
                        .set_object_acl(bucket, &key, Some(&acl.to_json()))?;
                }
            }
        }
        self.catalog.delete_access_key(name)?;
        self.reload()
    }

    /// The access row of `bucket` to change (a fresh one when it has none).
    fn bucket_record(&self, bucket: &str) -> BucketAccessRecord {
        self.table()
            .bucket(bucket)
            .map(|b| b.record().clone())
            .unwrap_or_else(|| BucketAccessRecord {
                bucket: bucket.to_string(),
                ..Default::default()
            })
    }

    fn check_acl(&self, bucket: &str, acl: &Acl) -> Result<(), AccessError> {
        let table = self.table();
        if acl.is_public() && table.block(bucket).block_public_acls {
            return Err(AccessError::Blocked(
                table.blocked_reason(bucket, "BlockPublicAcls"),
            ));
        }
        for grant in &acl.grants {
            if let Grantee::Key(name) = &grant.grantee {
                if table.by_name(name).is_none() && name != ROOT_NAME {
                    return Err(AccessError::Invalid(format!(
                        "the ACL grants {} to {name}, and no access key has that name",
                        grant.permission.as_str()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Replace a bucket's ACL (Block Public Access may refuse a public one).
    pub fn set_bucket_acl(&self, bucket: &str, acl: &Acl) -> Result<(), AccessError> {
        self.check_acl(bucket, acl)?;
        let mut record = self.bucket_record(bucket);
        record.acl = acl.to_json();
        self.catalog.set_bucket_access(&record)?;
        self.reload()
    }

    /// The ACL of the object at `key` (no grants when it has none).
    pub fn object_acl(&self, bucket: &str, key: &str) -> Result<Acl, AccessError> {
        Ok(self
            .catalog
            .object_acl(bucket, key)?
            .map(|text| Acl::from_json(&text))
            .unwrap_or_default())
    }

    /// Replace the ACL of the object at `key` (an ACL without grants removes it).
    pub fn set_object_acl(&self, bucket: &str, key: &str, acl: &Acl) -> Result<(), AccessError> {
        self.check_acl(bucket, acl)?;
        let text = (!acl.grants.is_empty()).then(|| acl.to_json());
        self.catalog.set_object_acl(bucket, key, text.as_deref())?;
        self.reload()
    }

    /// A new object was written at `key`: an ACL of the object it replaced does not carry over.
    pub fn object_written(&self, bucket: &str, key: &str) -> Result<(), AccessError> {
        if !self.table().has_object_acls(bucket) {
            return Ok(()); // no object of the bucket has an ACL: nothing to look up
        }
        if self.catalog.object_acl(bucket, key)?.is_some() {
            self.catalog.set_object_acl(bucket, key, None)?;
            self.reload()?;
        }
        Ok(())
    }

    /// Put a bucket policy: parsed (every part must be supported), its principals must be keys of this server,
    /// and Block Public Access may refuse a public one.
    pub fn set_bucket_policy(&self, bucket: &str, text: &str) -> Result<(), AccessError> {
        let policy = Policy::parse(text, bucket).map_err(AccessError::MalformedPolicy)?;
        let table = self.table();
        for statement in &policy.statements {
            if let policy::Principals::Keys(names) = &statement.principals {
                if let Some(unknown) = names.iter().find(|n| table.by_name(n).is_none()) {
                    return Err(AccessError::MalformedPolicy(format!(
                        "Invalid principal in policy: no access key is named {unknown}"
                    )));
                }
            }
        }
        if policy.is_public() && table.block(bucket).block_public_policy {
            return Err(AccessError::Blocked(
                table.blocked_reason(bucket, "BlockPublicPolicy"),
            ));
        }
        let mut record = self.bucket_record(bucket);
        record.policy = Some(text.to_string());
        self.catalog.set_bucket_access(&record)?;
        self.reload()
    }

    /// The policy of a bucket as it was put, if any.
    pub fn bucket_policy(&self, bucket: &str) -> Option<String> {
        self.table()
            .bucket(bucket)
            .and_then(|b| b.record().policy.clone())
    }

    /// Remove a bucket's policy.
    pub fn delete_bucket_policy(&self, bucket: &str) -> Result<(), AccessError> {
        let mut record = self.bucket_record(bucket);
        record.policy = None;
        self.catalog.set_bucket_access(&record)?;
        self.reload()
    }

    /// Put (`Some`) or delete (`None`) a bucket's CORS configuration: its rules as JSON, which the S3 layer
    /// checked and reads (`permafrost-s3`'s `cors`); access control does not interpret it.
    pub fn set_bucket_cors(&self, bucket: &str, cors: Option<&str>) -> Result<(), AccessError> {
        let mut record = self.bucket_record(bucket);
        record.cors = cors.map(str::to_string);
        self.catalog.set_bucket_access(&record)?;
        self.reload()
    }

    /// The CORS configuration of a bucket as [`Access::set_bucket_cors`] stored it, if any (from the table in
    /// force: no catalog read).
    pub fn bucket_cors(&self, bucket: &str) -> Option<String> {
        self.table()
            .bucket(bucket)
            .and_then(|b| b.record().cors.clone())
    }

    /// Put (`Some`) or delete a bucket's Block Public Access configuration.
    pub fn set_public_access_block(
        &self,
        bucket: &str,
        block: Option<PublicAccessBlock>,
    ) -> Result<(), AccessError> {
        let mut record = self.bucket_record(bucket);
        record.public_access_block =
            block.map(|b| serde_json::to_string(&b).expect("the configuration serializes"));
        self.catalog.set_bucket_access(&record)?;
        self.reload()
    }

    /// Whether the server blocks public access on every bucket.
    pub fn blocks_public_access(&self) -> bool {
        self.settings.block_public_access
    }

    /// A bucket was deleted: its owner, ACLs, policy and grants go with it.
    pub fn forget_bucket(&self, bucket: &str) -> Result<(), AccessError> {
        self.catalog.forget_bucket_access(bucket)?;
        self.reload()
    }

    /// Reload the table every `interval` while the access lives, when the catalog's version moved (changes made
    /// on other nodes of a cluster, or by `permafrost key` on the data directory). A failing check is logged
    /// once until one succeeds again.
    pub fn spawn_refresher(self: &Arc<Self>, interval: std::time::Duration) {
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("permafrost-access".into())
            .spawn(move || {
                let mut failing = false;
                loop {
                    std::thread::sleep(interval);
                    let Some(access) = weak.upgrade() else { return };
                    match access.refresh() {
                        Ok(_) => failing = false,
                        Err(e) if !failing => {
                            failing = true;
                            tracing::warn!(
                                "access keys: cannot check the catalog for changes: {e}"
                            );
                        }
                        Err(_) => {}
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("access keys: cannot start the refresher (changes made elsewhere need a restart): {e}");
        }
    }

    /// Record who created a bucket (root's buckets need no row).
    pub fn set_owner(&self, bucket: &str, principal: &Principal) -> Result<(), AccessError> {
        let Principal::Key(key) = principal else {
            return Ok(());
        };
        let mut record = self.bucket_record(bucket);
        record.owner = Some(key.name.clone());
        self.catalog.set_bucket_access(&record)?;
        self.reload()
    }
}
