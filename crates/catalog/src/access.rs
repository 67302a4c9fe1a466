//! Access keys, their grants, and who owns and shares each bucket: the rows as the catalog keeps them. What a
//! grant or a policy means is `permafrost-access`'s; the catalog only stores and returns them, and bumps
//! [`AccessCatalog::access_version`] with every change so that a server (or every node of a cluster) knows when
//! to reload its in-memory table.
//!
//! **Secrets are stored in clear.** AWS Signature V4 is an HMAC keyed by a key derived from the secret, so the
//! server needs the secret itself, not a hash of it (as every S3 server does). Whoever can read the catalog
//! (the data directory, or the PostgreSQL database) learns every secret: `docs/security.md`.

use crate::Result;

/// One access key: a name for people, the key id and secret that clients sign with, and its grants.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessKeyRecord {
    /// Unique, chosen by the operator (`robot-7`, `correlator`); grants and owners name keys by it.
    pub name: String,
    /// The key id clients send (`AKIA…`-like, unique).
    pub access_key: String,
    pub secret_key: String,
    pub created_ms: u64,
    /// A disabled key signs nothing (`InvalidAccessKeyId`); its grants stay.
    pub enabled: bool,
    /// May create buckets (and then owns them).
    pub create_buckets: bool,
    /// `(bucket, permission)` pairs, permission as `permafrost-access` spells it (`read`, `write`, …).
    pub grants: Vec<(String, String)>,
}

impl std::fmt::Debug for AccessKeyRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKeyRecord")
            .field("name", &self.name)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .field("enabled", &self.enabled)
            .field("create_buckets", &self.create_buckets)
            .field("grants", &self.grants)
            .finish()
    }
}

/// Who owns a bucket and how it is shared. A bucket without a row is the root user's and shared with nobody.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BucketAccessRecord {
    pub bucket: String,
    /// The key that created the bucket (`None`: the root user).
    pub owner: Option<String>,
    /// The bucket's ACL grants, JSON (`permafrost-access` reads it); empty = the owner's full control only.
    pub acl: String,
    /// The bucket policy as the client sent it (JSON), if any.
    pub policy: Option<String>,
    /// The bucket's Block Public Access configuration (JSON), if one was put.
    pub public_access_block: Option<String>,
    /// The bucket's CORS configuration (JSON of its rules, `permafrost-s3` reads it), if one was put.
    pub cors: Option<String>,
}

/// The catalog of keys and bucket access. Every method is one transaction; every change bumps the version.
pub trait AccessCatalog: Send + Sync {
    /// A number that changes with every change made through this trait.
    fn access_version(&self) -> Result<u64>;
    /// Every key with its grants, ordered by name.
    fn access_keys(&self) -> Result<Vec<AccessKeyRecord>>;
    /// Every bucket's access row (buckets without one are the root user's, unshared).
    fn buckets_access(&self) -> Result<Vec<BucketAccessRecord>>;
    /// Add a key (its grants too). [`crate::CatalogError::AccessKeyExists`] when the name or key id is taken.
    fn create_access_key(&self, key: &AccessKeyRecord) -> Result<()>;
    /// Enable or disable a key, or change whether it may create buckets (`None`: unchanged).
    fn update_access_key(
        &self,
        name: &str,
        enabled: Option<bool>,
        create_buckets: Option<bool>,
    ) -> Result<()>;
    /// Remove a key and its grants; the buckets it owned become the root user's.
    fn delete_access_key(&self, name: &str) -> Result<()>;
    /// Grant (`granted`) or revoke `permission` on `bucket` to the key `name`. Granting on a bucket that does
    /// not exist yet is allowed (an operator prepares a robot's key before its first run).
    fn set_access_grant(
        &self,
        name: &str,
        bucket: &str,
        permission: &str,
        granted: bool,
    ) -> Result<()>;
    /// Replace a bucket's access row (the caller checked that the bucket exists: in a cluster the access tables
    /// are shared and the buckets are the nodes').
    fn set_bucket_access(&self, record: &BucketAccessRecord) -> Result<()>;
    /// Remove what a deleted bucket leaves: its access row, grants and object ACLs (a bucket of the same name
    /// made later starts unshared). The embedded catalog does it in the transaction that deletes the bucket.
    fn forget_bucket_access(&self, bucket: &str) -> Result<()>;
    /// The ACL of the object at `key` (JSON), if one was put. An object ACL belongs to the key's current
    /// object: the S3 layer removes it when a new object is written there.
    fn object_acl(&self, bucket: &str, key: &str) -> Result<Option<String>>;
    /// Put (`Some`) or remove the ACL of the object at `key`.
    fn set_object_acl(&self, bucket: &str, key: &str, acl: Option<&str>) -> Result<()>;
    /// Every object ACL of `bucket`: `(key, ACL JSON)`.
    fn object_acls(&self, bucket: &str) -> Result<Vec<(String, String)>>;
    /// The buckets where some object has an ACL (decisions look an object's ACL up only there).
    fn buckets_with_object_acls(&self) -> Result<Vec<String>>;
}
