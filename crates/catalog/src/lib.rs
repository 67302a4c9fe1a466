//! # permafrost-catalog: what the archive holds, on flash
//!
//! **Job.** Keep every piece of metadata of the object store (`docs/store.md` "Data model") so that listing,
//! stat, delete, copy and placement decisions never touch a disk of the grid (SPEC idea 10): S3 buckets and
//! their settings, objects, contents (content-addressed, with reference counts and a reverse index), extents and
//! segments on the grid, datasets, multipart uploads and parts, per-grid-bucket allocation (append pointer and
//! free ranges) and pending work. The schema is documented in `docs/catalog.md`.
//!
//! [`Catalog`] is the trait the store uses; [`SqlCatalog`] implements it on two back ends with one logic
//! (`sql` is the interface it runs SQL through): the embedded SQLite database ([`SqlCatalog::open_with`], alias
//! [`SqliteCatalog`]) and a PostgreSQL server ([`SqlCatalog::open_postgres`]: SERIALIZABLE transactions retried on
//! serialization failures, `postgres` module; `docs/catalog.md` "Back ends"). Every trait method is
//! **one transaction**: where several rows must
//! change together (a put replaces an object and moves a reference, a persist records extents, segments and a
//! state), the method does all of it or nothing.
//!
//! **Durability.** A durable SQLite catalog returns from a method only once its change, and every change the
//! method observed, survives a crash or power loss; concurrent callers share WAL syncs (group commit, see the
//! `sqlite` module). A failed sync is reported as [`CatalogError::Sync`] and the catalog then acknowledges
//! nothing more until it is reopened.
//!
//! **Invariants.**
//! - `contents.refcount` = number of references to the content: `objects` rows naming it, `content_parts` rows
//!   naming it as a part of a part-list content, and `multipart_parts` rows naming it as an uploaded part
//!   (checked by [`Catalog::check`]).
//! - A content with `refcount = 0` carries `unreferenced_since_ms`; only such contents are garbage-collected.
//! - Allocated grid ranges never overlap: every extent range lies below its grid bucket's append pointer and
//!   outside its free ranges; free ranges are disjoint and coalesced.
//! - An extent is freed only when no segment references it.
//!
//! **Not here.** Bytes (the cache files and the grid are the store's), hashing, formats, policies.

#![forbid(unsafe_code)]

mod access;
mod archive;
pub mod cluster;
mod list;
mod namespace;
#[doc(hidden)]
pub mod planted_bugs;
mod postgres;
mod sql;
mod sqlite;

pub use access::{AccessCatalog, AccessKeyRecord, BucketAccessRecord};
pub use archive::{
    iso8601_utc, restore_expiry_ms, AttributeChange, BucketArchive, DefaultRetention,
    DeleteOutcome, Lifecycle, LifecycleFilter, LifecycleRule, LockMode, LockViolation,
    ObjectAttributes, ObjectLock, RestoreOutcome, RestoreRecord, RestoreTerms, RestoreTier,
    Retention, StorageClass, VersionPage, VersionQuery, VersionRecord, Versioning, DAY_MS,
    NULL_VERSION,
};
use serde::{Deserialize, Serialize};

pub use namespace::{
    parent_of, showable_name, DirAttrs, DirRecord, FsEntry, FsFile, FsPage, FsRename, Refusal,
    NAME_BYTES_MAX,
};
pub use postgres::{redact_url, PostgresOptions};
pub use sql::Error as SqlError;
pub use sqlite::{SqlCatalog, SqliteOptions};

/// The catalog on its embedded SQLite back end (the same type as the PostgreSQL one: [`SqlCatalog`]).
pub type SqliteCatalog = SqlCatalog;
/// The catalog on a PostgreSQL server ([`SqlCatalog::open_postgres`]).
pub type PostgresCatalog = SqlCatalog;

/// Errors of the catalog. Messages name the row concerned.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    #[error("bucket {0} already exists")]
    BucketExists(String),
    #[error("bucket {0} is not empty")]
    BucketNotEmpty(String),
    #[error("no such object: {bucket}/{key}")]
    NoSuchKey { bucket: String, key: String },
    #[error("no such version {version_id} of {bucket}/{key}")]
    NoSuchVersion {
        bucket: String,
        key: String,
        version_id: String,
    },
    /// Object Lock forbids the change (S3 `AccessDenied`).
    #[error("{0}")]
    Locked(String),
    /// A conditional write's [`WriteCondition`] does not hold for the key's current version (S3
    /// `PreconditionFailed`); nothing changed.
    #[error("{0}")]
    PreconditionFailed(String),
    /// The bucket's state forbids the configuration change (S3 `InvalidBucketState`).
    #[error("{0}")]
    InvalidBucketState(String),
    /// The request does not fit the bucket or version (S3 `InvalidRequest`): a lock without Object Lock, tags on
    /// a delete marker.
    #[error("{0}")]
    InvalidRequest(String),
    #[error("no such multipart upload: {0}")]
    NoSuchUpload(String),
    #[error("no such access key: {0}")]
    NoSuchAccessKey(String),
    /// The name (or key id) of a new access key is taken by the key named here.
    #[error("an access key named {0} already exists")]
    AccessKeyExists(String),
    #[error("no such content: {0}")]
    NoSuchContent(String),
    #[error("grid bucket {grid_bucket} has no room for {bytes} bytes ({free_bytes} free of {capacity_bytes})")]
    NoRoom {
        grid_bucket: u32,
        bytes: u64,
        free_bytes: u64,
        capacity_bytes: u64,
    },
    /// The database failed a statement (`path`: the SQLite file, or the PostgreSQL URL without its password).
    /// Like [`CatalogError::Unreachable`], the store reports it as `StoreError::Unavailable` (S3 `503
    /// ServiceUnavailable`): a retry may succeed.
    #[error("catalog database {path}: {source}")]
    Database { path: String, source: SqlError },
    #[error("catalog: {0}")]
    Corrupt(String),
    /// The catalog database cannot be reached or used at all (PostgreSQL: no server at the URL, login refused,
    /// not PostgreSQL); the message names the URL without its password.
    #[error("{0}")]
    Unreachable(String),
    /// A change of the file system namespace (the mount) was refused; nothing changed.
    #[error("{what}: {refusal}")]
    Refused { refusal: Refusal, what: String },
    /// Syncing the catalog's files failed: the changes of the call may or may not survive a crash.
    #[error("catalog sync of {path} failed, the change may not be durable: {source}")]
    Sync {
        path: String,
        source: std::io::Error,
    },
}

/// Result of catalog operations.
pub type Result<T, E = CatalogError> = std::result::Result<T, E>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A `Content-Encoding` the archive understands (the encoding the client sent the bytes in).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    #[default]
    Identity,
    Zstd,
    Lz4,
}

impl Encoding {
    /// The name used in `Content-Encoding` headers and in the catalog.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Zstd => "zstd",
            Encoding::Lz4 => "lz4",
        }
    }
}

impl std::str::FromStr for Encoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "identity" => Ok(Encoding::Identity),
            "zstd" => Ok(Encoding::Zstd),
            "lz4" => Ok(Encoding::Lz4),
            other => Err(format!(
                "unsupported content encoding {other:?}: expected identity, zstd or lz4"
            )),
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a content's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredForm {
    /// The bytes as received, uncompressed.
    Raw,
    /// Compressed by the server in independent chunks (the chunk index says how).
    Chunked,
    /// Pre-compressed by the client, stored exactly as sent.
    AsSent,
    /// No stored bytes of its own: the concatenation of other contents, its parts (`content_parts`), in order.
    /// A completed multipart upload is one.
    Parts,
}

impl StoredForm {
    fn as_str(self) -> &'static str {
        match self {
            StoredForm::Raw => "raw",
            StoredForm::Chunked => "chunked",
            StoredForm::AsSent => "as_sent",
            StoredForm::Parts => "parts",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        match s {
            "raw" => Ok(StoredForm::Raw),
            "chunked" => Ok(StoredForm::Chunked),
            "as_sent" => Ok(StoredForm::AsSent),
            "parts" => Ok(StoredForm::Parts),
            other => Err(CatalogError::Corrupt(format!(
                "unknown stored form {other:?}"
            ))),
        }
    }
}

/// Life cycle of a content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentState {
    /// Complete and durable in the cache; no grid bucket chosen yet.
    Cached,
    /// A grid bucket is chosen; waiting for the persistence manager.
    Placed,
    /// Extents are allocated and being written, or written with parity still pending (delayed mode).
    Persisting,
    /// Every extent and all parity are durable on the grid.
    Persisted,
}

impl ContentState {
    /// All states, in life-cycle order.
    pub const ALL: [ContentState; 4] = [
        ContentState::Cached,
        ContentState::Placed,
        ContentState::Persisting,
        ContentState::Persisted,
    ];

    /// The name used in the catalog and in HEAD responses.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentState::Cached => "cached",
            ContentState::Placed => "placed",
            ContentState::Persisting => "persisting",
            ContentState::Persisted => "persisted",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        ContentState::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| CatalogError::Corrupt(format!("unknown content state {s:?}")))
    }
}

impl std::fmt::Display for ContentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identity of a content: `BLAKE3(bytes as received) ‖ encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId {
    pub hash: [u8; 32],
    pub encoding: Encoding,
}

impl ContentId {
    /// 128-bit id written into extent headers: the first 16 bytes of `BLAKE3(hash ‖ encoding)`.
    pub fn object_id(&self) -> [u8; 16] {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.hash);
        hasher.update(self.encoding.as_str().as_bytes());
        hasher.finalize().as_bytes()[..16]
            .try_into()
            .expect("16 bytes")
    }

    /// The 33-byte key used in the database: hash, then the encoding code.
    pub fn to_key(&self) -> [u8; 33] {
        let mut key = [0u8; 33];
        key[..32].copy_from_slice(&self.hash);
        key[32] = match self.encoding {
            Encoding::Identity => 0,
            Encoding::Zstd => 1,
            Encoding::Lz4 => 2,
        };
        key
    }

    /// Inverse of [`ContentId::to_key`].
    pub fn from_key(key: &[u8]) -> Result<ContentId> {
        let bad =
            || CatalogError::Corrupt(format!("content key of {} bytes is malformed", key.len()));
        if key.len() != 33 {
            return Err(bad());
        }
        let encoding = match key[32] {
            0 => Encoding::Identity,
            1 => Encoding::Zstd,
            2 => Encoding::Lz4,
            _ => return Err(bad()),
        };
        Ok(ContentId {
            hash: key[..32].try_into().expect("32 bytes"),
            encoding,
        })
    }
}

impl std::fmt::Display for ContentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.hash {
            write!(f, "{b:02x}")?;
        }
        write!(f, ":{}", self.encoding)
    }
}

/// Compression the server applies to data that arrives uncompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    Zstd,
    Lz4,
    None,
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "zstd" => Ok(Compression::Zstd),
            "lz4" => Ok(Compression::Lz4),
            "none" => Ok(Compression::None),
            other => Err(format!(
                "unknown compression {other:?}: expected zstd, lz4 or none"
            )),
        }
    }
}

/// Per-S3-bucket settings. `None` everywhere means "the store's default" (its configuration), so changing a
/// default later changes every bucket that never chose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BucketSettings {
    /// Compression of uploads that arrive uncompressed; `None` = the store's default.
    pub compression: Option<Compression>,
    /// Placement strategy name (`permafrost_policy::placement_names()`); `None` = the store's default.
    pub placement: Option<String>,
    /// Engine write mode name (`direct`, `serialized`, `delayed`); `None` = the store's default.
    pub write_mode: Option<String>,
    /// Key prefixes kept in the cache ("keep hot"; `""` is the whole bucket): the contents of their objects are
    /// pinned there ([`Catalog::pin_hot`]) and never evicted. Empty: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hot_prefixes: Vec<String>,
}

/// One S3 bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketRecord {
    pub name: String,
    pub created_ms: u64,
    pub settings: BucketSettings,
    /// Versioning, Object Lock, lifecycle, tags.
    pub archive: BucketArchive,
}

/// One object: a key of an S3 bucket and the content it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRecord {
    pub bucket: String,
    pub key: String,
    pub content: ContentId,
    /// Logical (decoded) size in bytes.
    pub size_bytes: u64,
    /// The ETag as S3 clients expect it (quoted hex MD5, or `"hex-N"` for multipart).
    pub etag: String,
    pub last_modified_ms: u64,
    pub content_type: Option<String>,
    /// `x-amz-meta-*` pairs (names without the prefix), in the order received.
    pub user_metadata: Vec<(String, String)>,
    /// Checksums the client sent and that were verified (`crc32`, `sha256`, …, base64 values).
    pub checksums: Vec<(String, String)>,
    /// Dataset id (`bucket/prefix…`).
    pub dataset: String,
    /// S3 version id ([`NULL_VERSION`] unless written while versioning was enabled); assigned by the catalog
    /// when the object is stored (what a caller passes is ignored).
    pub version_id: String,
    /// Headers, tags, storage class, Object Lock.
    pub attributes: ObjectAttributes,
    /// When the bucket's lifecycle expires this version (computed by the catalog; `None` = never).
    pub expires_ms: Option<u64>,
}

/// A content: stored bytes shared by every object with the same [`ContentId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentRecord {
    pub id: ContentId,
    /// Decoded size.
    pub logical_bytes: u64,
    /// Size of the stored form (what the cache file and the extents hold).
    pub stored_bytes: u64,
    pub stored_form: StoredForm,
    /// The chunk index of a `Chunked` content (serialized by the format crate), empty otherwise.
    pub chunk_index: Vec<u8>,
    /// MD5 of the bytes as received (for a multipart content: the MD5 of its parts' MD5s, the ETag's digest).
    pub md5: [u8; 16],
    pub state: ContentState,
    pub refcount: u64,
    /// Dataset of the object that first stored it (placement input).
    pub dataset: String,
    /// Chosen grid bucket (from `Placed` on).
    pub grid_bucket: Option<u32>,
    /// Cache file, relative to the cache directory, while the content is cached ([`INLINE_CACHE_PATH`]: the
    /// bytes are in the catalog, [`Catalog::inline_bytes`]).
    pub cache_path: Option<String>,
    /// When the content became complete in the cache (watchdog age).
    pub created_ms: u64,
    /// Last read or write (cache LRU).
    pub last_access_ms: u64,
    /// Set while `refcount = 0`.
    pub unreferenced_since_ms: Option<u64>,
}

/// What a new content looks like when a put commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewContent {
    pub id: ContentId,
    pub logical_bytes: u64,
    pub stored_bytes: u64,
    pub stored_form: StoredForm,
    pub chunk_index: Vec<u8>,
    pub md5: [u8; 16],
    /// The cache file (relative to the cache directory); ignored when `inline` holds the stored bytes.
    pub cache_path: String,
    /// A small content's stored bytes, kept in the catalog (table `cache_inline`) instead of a cache file: one
    /// transaction makes them durable with the object. Its `cache_path` is then [`INLINE_CACHE_PATH`].
    pub inline: Option<Vec<u8>>,
}

/// The `cache_path` of a content whose cached bytes are in the catalog (`cache_inline`), not in a file.
pub const INLINE_CACHE_PATH: &str = "@inline";

/// `pinned_until_ms` of a content kept hot ([`Catalog::pin_hot`]): pinned until made cold, whatever restores say.
pub const HOT_PINNED_UNTIL_MS: u64 = i64::MAX as u64;

/// Result of [`Catalog::put_object`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutcome {
    /// The content existed already: the new cache file was not adopted and must be deleted by the caller
    /// (work item `delete_file_work`, see [`Catalog::finish_work`]).
    pub deduplicated: bool,
    /// Work items (cache files to delete) the caller performs and then finishes.
    pub work: Vec<WorkItem>,
}

/// What the current version of a key must be for a write to it to take place (S3 conditional writes:
/// `If-None-Match: *` and `If-Match` on PutObject and CompleteMultipartUpload). Checked in the write's own
/// transaction, so of two racing writes under [`WriteCondition::Absent`] exactly one succeeds. A key has no
/// current version when it was never written, was deleted, its newest version is a delete marker, or its
/// lifecycle expiry passed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WriteCondition {
    /// No condition.
    #[default]
    Always,
    /// `If-None-Match: *`: the key has no current version; else `PreconditionFailed`.
    Absent,
    /// `If-Match`: the key's current version has one of these ETags (quoted or not; `*` matches any current
    /// version); `PreconditionFailed` when it has another, `NoSuchKey` when there is none (as S3 answers).
    EtagMatches(Vec<String>),
}

impl WriteCondition {
    /// Whether the condition holds for `bucket/key` whose current version has the ETag `current` (`None`: no
    /// current version): `Ok(())`, or the error the write fails with.
    pub fn check(&self, bucket: &str, key: &str, current: Option<&str>) -> Result<()> {
        match (self, current) {
            (WriteCondition::Always, _) | (WriteCondition::Absent, None) => Ok(()),
            (WriteCondition::Absent, Some(_)) => Err(CatalogError::PreconditionFailed(format!(
                "{bucket}/{key} exists (If-None-Match: *)"
            ))),
            (WriteCondition::EtagMatches(_), None) => Err(CatalogError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            }),
            (WriteCondition::EtagMatches(wanted), Some(etag)) => {
                let bare = |e: &str| {
                    e.trim()
                        .trim_start_matches("W/")
                        .trim_matches('"')
                        .to_string()
                };
                if wanted
                    .iter()
                    .any(|w| w.trim() == "*" || bare(w) == bare(etag))
                {
                    Ok(())
                } else {
                    Err(CatalogError::PreconditionFailed(format!(
                        "{bucket}/{key} has the ETag {etag}, not {} (If-Match)",
                        wanted.join(", ")
                    )))
                }
            }
        }
    }
}

/// Kind of an extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtentKind {
    /// Holds (part of) one content; the first extent's payload starts with the manifest.
    Content,
    /// Holds pack entries (`manifest | stored bytes`) of several small contents.
    Pack,
}

/// An extent to allocate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewExtent {
    /// Bytes on the grid bucket (header, payload, checksum, padding; a multiple of 4096).
    pub length_bytes: u64,
    pub payload_bytes: u64,
    /// Object id in the extent header (the content's, or the pack's).
    pub object_id: [u8; 16],
    /// Extent number within the object.
    pub extent_no: u16,
    /// Which copy of the object this extent belongs to (0: the only one on a single server).
    pub replica_id: u8,
    pub kind: ExtentKind,
}

/// An extent on the grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtentRecord {
    pub extent_id: i64,
    pub grid_bucket: u32,
    pub offset: u64,
    pub length_bytes: u64,
    pub payload_bytes: u64,
    pub object_id: [u8; 16],
    pub extent_no: u16,
    /// Which copy of the object (as in the extent header).
    pub replica_id: u8,
    pub kind: ExtentKind,
    /// False while the extent is being written (abandoned on restart).
    pub written: bool,
    /// BLAKE3 of the payload, once written.
    pub blake3: Option<[u8; 32]>,
}

/// Where a run of a content's stored bytes lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRecord {
    pub content: ContentId,
    /// Order within the content, from 0.
    pub seq: u32,
    pub extent_id: i64,
    /// Offset of the run inside the extent's payload.
    pub offset_in_payload: u64,
    pub length_bytes: u64,
}

/// A segment joined with its extent (what a reader needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentSegment {
    pub segment: SegmentRecord,
    pub extent: ExtentRecord,
}

/// Allocation state of one grid bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GridUsage {
    pub grid_bucket: u32,
    /// Everything below is allocated or free-listed.
    pub append_offset: u64,
    /// Sum of the free ranges below the append pointer.
    pub free_bytes: u64,
}

impl GridUsage {
    /// Bytes held by extents.
    pub fn used_bytes(&self) -> u64 {
        self.append_offset - self.free_bytes
    }
}

/// Bytes waiting in the cache for one grid bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outstanding {
    pub grid_bucket: u32,
    pub stored_bytes: u64,
    pub contents: u64,
    /// `created_ms` of the oldest waiting content.
    pub oldest_ms: u64,
}

/// Delivered webhooks kept (the oldest are removed when new ones are added).
pub const WEBHOOKS_DELIVERED_KEPT: u64 = 1000;

/// One SMART reading of a grid disk (`permafrost-admin`, docs/smart.md).
#[derive(Debug, Clone, PartialEq)]
pub struct SmartRecord {
    /// The disk's index in the grid.
    pub disk: u32,
    /// When it was read (ms since the Unix epoch); one reading per disk per millisecond at most.
    pub at_ms: u64,
    /// The reading as JSON (`permafrost_disk::smart::SmartReading`).
    pub reading: String,
}

/// One sample of the operator's history (`permafrost-admin`): counters are cumulative, so rates are differences
/// between samples.
#[derive(Debug, Clone, PartialEq)]
pub struct HistorySample {
    /// When it was taken (ms since the Unix epoch); one sample per millisecond at most.
    pub at_ms: u64,
    /// Physical bytes read from and written to the grid's disks since the server started.
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// S3 requests answered since the server started.
    pub requests: u64,
    /// Spin-ups of all disks since the grid was made.
    pub spin_ups: u64,
    /// Power all disks drew at that moment, and their energy since the grid was made.
    pub watts: f64,
    pub joules: f64,
    pub disks_spinning: u32,
    pub cache_used_bytes: u64,
    pub cache_dirty_bytes: u64,
}

/// A webhook: POSTed once when its object (or every object under its prefix, or in its bucket) is persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRecord {
    pub id: u64,
    pub url: String,
    pub bucket: String,
    /// The object it waits for, or `None` for a prefix (`prefix`, `""` = the whole bucket).
    pub key: Option<String>,
    pub prefix: String,
    pub created_ms: u64,
    /// When it was delivered (`None`: still pending).
    pub delivered_ms: Option<u64>,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// A dataset (S3 bucket + key prefix) and its placement affinity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetRecord {
    pub id: String,
    pub bucket: String,
    pub created_ms: u64,
    /// The grid bucket its data goes to (set at its first placement).
    pub grid_bucket: Option<u32>,
}

/// What the current objects of one dataset add up to (see [`Catalog::dataset_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DatasetStats {
    pub dataset: String,
    pub objects: u64,
    /// Logical bytes.
    pub size_bytes: u64,
    /// Stored bytes (after compression; shared contents counted once per object).
    pub stored_bytes: u64,
    pub first_write_ms: u64,
    pub last_write_ms: u64,
    /// The earliest lifecycle expiry of its objects.
    pub expires_ms: Option<u64>,
    /// Objects whose content is fully persisted.
    pub persisted_objects: u64,
    /// Distinct `(key, value)` tags of its objects, sorted.
    pub tags: Vec<(String, String)>,
}

/// A multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadRecord {
    pub upload_id: String,
    pub bucket: String,
    pub key: String,
    pub created_ms: u64,
    /// The store's put options, serialized (content type, metadata, encoding).
    pub options: String,
}

/// One uploaded part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRecord {
    pub upload_id: String,
    pub part_number: u32,
    /// Logical bytes of the part.
    pub size_bytes: u64,
    /// MD5 of the part (16 bytes).
    pub md5: [u8; 16],
    /// The part's content (a reference, counted in its refcount). `None` only for a part uploaded by a build of
    /// catalog schema 2, kept as the file `cache_path`; such a part cannot be completed (upload it again).
    pub content: Option<ContentId>,
    /// Schema-2 parts only: their cache file, relative to the cache directory; empty otherwise.
    pub cache_path: String,
    pub created_ms: u64,
    /// Verified checksums of the part's bytes, `(algorithm name, base64)` as for objects (schema 8).
    pub checksums: Vec<(String, String)>,
}

/// One part of a part-list content ([`StoredForm::Parts`]): the part's content and where its logical bytes sit
/// in the whole. Parts are numbered from 0 by `seq` and follow each other without gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentPart {
    pub seq: u32,
    pub part: ContentId,
    pub logical_offset: u64,
    pub logical_bytes: u64,
}

/// A part-list content to create: see [`Catalog::complete_upload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPartList {
    pub id: ContentId,
    /// Logical (decoded) bytes of the whole.
    pub logical_bytes: u64,
    /// MD5 of the parts' MD5s (the multipart ETag's digest).
    pub md5: [u8; 16],
    /// `(part number of the upload, part)` in order.
    pub parts: Vec<(u32, ContentPart)>,
}

/// How long a completed multipart upload is remembered ([`Catalog::completed_upload`]): a week, far longer
/// than any client retries a completion that timed out.
pub const COMPLETED_UPLOADS_KEPT_MS: u64 = 7 * DAY_MS;

/// A completed multipart upload as [`Catalog::complete_upload`] remembered it, so that a retried completion
/// can be answered with the same result while the version it created exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedUpload {
    pub upload_id: String,
    pub bucket: String,
    pub key: String,
    /// The version the completion created (`null` in an unversioned bucket).
    pub version_id: String,
    /// Its part-list content.
    pub content: ContentId,
    /// The part numbers the completion listed, in order.
    pub part_numbers: Vec<u32>,
    pub completed_ms: u64,
}

/// One durable step of a growing object: see [`Catalog::append_growing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrowingAppend {
    pub bucket: String,
    pub key: String,
    /// The growing object's part-list content (what [`Catalog::begin_growing`] created).
    pub list: ContentId,
    /// The upload whose part `part_number` becomes the list's next part.
    pub upload_id: String,
    pub part_number: u32,
    /// The object's new ETag and the list's new MD5 (of its parts' MD5s, as a multipart ETag's digest).
    pub etag: String,
    pub md5: [u8; 16],
    /// The object's user metadata from now on (replaces the previous pairs).
    pub user_metadata: Vec<(String, String)>,
}

/// Who a content belongs to, for its manifest: [`Catalog::owner_of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentOwner {
    /// A version names it (current or noncurrent).
    Object(Box<ObjectRecord>),
    /// It is only a part: of a part-list content whose version (current or noncurrent) is this one, or of the
    /// multipart upload of `bucket/key` (not completed yet).
    Part {
        bucket: String,
        key: String,
        created_ms: u64,
    },
}

/// A content that must reach the grid and has not: see [`Catalog::unpersisted_references`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpersistedReference {
    pub content: ContentRecord,
    pub bucket: String,
    pub key: String,
    /// The version naming it, or naming the part list it is a part of; `None` for a part of an upload.
    pub version_id: Option<String>,
    /// The upload it is a part of (not completed yet).
    pub upload_id: Option<String>,
}

/// A durable to-do item, recorded in the same transaction as the change that makes it necessary, done by the
/// caller after the commit, then removed with [`Catalog::finish_work`]. Items left after a crash are redone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    pub id: i64,
    pub kind: WorkKind,
}

/// What a [`WorkItem`] asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum WorkKind {
    /// Delete this cache file (relative to the cache directory).
    DeleteCacheFile { path: String },
}

/// A query of [`Catalog::list_objects`] (S3 ListObjects semantics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub prefix: String,
    /// Roll keys that contain the delimiter after the prefix into common prefixes.
    pub delimiter: Option<String>,
    /// Return only entries after this key (or after every key under this common prefix).
    pub start_after: Option<String>,
    /// At most this many entries (objects + common prefixes); 0 is treated as 1000.
    pub max_keys: usize,
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<ObjectRecord>,
    pub common_prefixes: Vec<String>,
    /// More entries follow; resume with `start_after = next_start_after`.
    pub is_truncated: bool,
    pub next_start_after: Option<String>,
}

/// One content whose cached bytes [`Catalog::evict_contents`] dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    pub id: ContentId,
    pub stored_bytes: u64,
    /// The cache file to delete; `None` for inline bytes (already gone).
    pub work: Option<WorkItem>,
}

/// What a GC step removed: the caller deletes these cache files (via the work items) and the ranges are free.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcOutcome {
    pub contents_removed: u64,
    pub stored_bytes_removed: u64,
    /// `(grid_bucket, offset, length)` returned to the free lists.
    pub ranges_freed: Vec<(u32, u64, u64)>,
    pub work: Vec<WorkItem>,
    /// Cached bytes removed from the catalog (inline contents), which no work item frees.
    pub inline_bytes_freed: u64,
}

/// Counts for `status()`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CatalogStats {
    pub buckets: u64,
    pub objects: u64,
    /// `(state, contents, stored bytes)`.
    pub contents_by_state: Vec<(ContentState, u64, u64)>,
    /// Stored bytes of contents that have a cache file or inline cached bytes.
    pub cached_bytes: u64,
    /// Stored bytes of contents cached inline in the catalog (part of `cached_bytes`).
    pub inline_bytes: u64,
    pub extents: u64,
    pub pack_extents: u64,
    pub uploads: u64,
    pub parts_bytes: u64,
}

/// The catalog. Every method is one atomic transaction.
pub trait Catalog: Send + Sync {
    // ---- buckets
    fn create_bucket(&self, name: &str, settings: &BucketSettings) -> Result<()>;
    /// Deletes a bucket without versions (current or noncurrent, delete markers included) and with it its
    /// multipart uploads in progress (as S3 does); work items delete their part files.
    fn delete_bucket(&self, name: &str) -> Result<Vec<WorkItem>>;
    fn get_bucket(&self, name: &str) -> Result<Option<BucketRecord>>;
    /// Replace a bucket's settings (they apply to uploads from now on).
    fn set_bucket_settings(&self, name: &str, settings: &BucketSettings) -> Result<()>;
    fn list_buckets(&self) -> Result<Vec<BucketRecord>>;

    // ---- objects (the current version of each key; docs/archive.md for versions)
    /// Make `object` the current version of its key, with a new version id when the bucket's versioning is
    /// enabled, else [`NULL_VERSION`]. The version it replaces becomes noncurrent (versioning enabled) or is
    /// removed (a null version; refused with `Locked` if Object Lock protects it), its content losing a
    /// reference. The bucket's default retention applies when `object` has none; `expires_ms` is computed from
    /// its lifecycle. When `content.id` exists, the object references it and `content.cache_path` is scheduled
    /// for deletion; otherwise the content is inserted in state `Cached`. The dataset row is created if missing.
    fn put_object(
        &self,
        object: &ObjectRecord,
        content: &NewContent,
        now_ms: u64,
    ) -> Result<PutOutcome> {
        self.put_object_if(object, content, now_ms, &WriteCondition::Always)
    }
    /// [`Catalog::put_object`] if `condition` holds for the key's current version, checked in the same
    /// transaction (`PreconditionFailed` or `NoSuchKey` and no change otherwise).
    fn put_object_if(
        &self,
        object: &ObjectRecord,
        content: &NewContent,
        now_ms: u64,
        condition: &WriteCondition,
    ) -> Result<PutOutcome>;
    /// The current version of a key, unless it is a delete marker or its lifecycle expiry passed.
    fn get_object(&self, bucket: &str, key: &str) -> Result<Option<(ObjectRecord, ContentRecord)>>;
    /// Delete the current version as S3 DeleteObject without a version id does (see
    /// [`Catalog::delete_version`]). `Ok(false)` if the key had no current version.
    fn delete_object(&self, bucket: &str, key: &str, now_ms: u64) -> Result<bool>;
    /// A new current version referencing the same content as the source (its current version, or
    /// `src_version`), as [`Catalog::put_object`] stores versions (catalog only). `object.content`, size, ETag
    /// and checksums are taken from the source.
    fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        src_version: Option<&str>,
        object: &ObjectRecord,
        now_ms: u64,
    ) -> Result<ObjectRecord> {
        self.copy_object_if(
            src_bucket,
            src_key,
            src_version,
            object,
            now_ms,
            &WriteCondition::Always,
        )
    }
    /// [`Catalog::copy_object`] if `condition` holds for the current version of the target key, checked in the
    /// same transaction (`PreconditionFailed` or `NoSuchKey` and no change otherwise).
    fn copy_object_if(
        &self,
        src_bucket: &str,
        src_key: &str,
        src_version: Option<&str>,
        object: &ObjectRecord,
        now_ms: u64,
        condition: &WriteCondition,
    ) -> Result<ObjectRecord>;
    fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage>;
    /// Every object in key order after `start_after` (for verify), at most `limit`.
    fn objects_after(&self, after: Option<(&str, &str)>, limit: usize)
        -> Result<Vec<ObjectRecord>>;

    // ---- versions, tags, Object Lock (docs/archive.md). Every removal of a version checks
    //      `ObjectLock::may_delete` in the same transaction.
    /// Replace a bucket's archive configuration (checked with `BucketArchive::may_become`: `InvalidBucketState`
    /// when refused). When the lifecycle changes, every current object's `expires_ms` is recomputed.
    fn set_bucket_archive(&self, name: &str, archive: &BucketArchive) -> Result<()>;
    /// One version of a key (`version_id` [`NULL_VERSION`] for the null version), delete markers included,
    /// with its content (none for a marker). Expired versions are still returned.
    fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<(VersionRecord, Option<ContentRecord>)>>;
    /// S3 DeleteObject: without `version_id`, remove the current version (unversioned bucket) or add a delete
    /// marker (versioned, suspended); with it, remove that version if Object Lock allows (`Locked`), promoting
    /// the next newest version. A missing version is not an error (`version_id: None` in the outcome).
    fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<DeleteOutcome>;
    /// Versions of a bucket: key order, newest first within a key; delete markers included.
    fn list_object_versions(&self, bucket: &str, query: &VersionQuery) -> Result<VersionPage>;
    /// Change tags, retention or legal hold of a version (the current one when `version_id` is `None`), under
    /// the retention rule `ObjectLock::may_set_retention`. Returns the version id changed.
    fn change_attributes(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        change: &AttributeChange,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<String>;

    // ---- lifecycle (catalog only: no disk is read)
    /// Expire up to `limit` current versions whose `expires_ms` passed, as DeleteObject without a version id
    /// would (a delete marker in versioned buckets). Returns how many.
    fn expire_objects(&self, now_ms: u64, limit: usize) -> Result<u64>;
    /// Delete up to `limit` noncurrent versions and lone delete markers the lifecycle rules of their bucket
    /// expire at `now_ms`, skipping versions Object Lock protects. Returns how many.
    fn expire_noncurrent(&self, now_ms: u64, limit: usize) -> Result<u64>;

    // ---- restores
    /// Ask for a restore of a version (current when `version_id` is `None`) kept for `terms.duration_ms` once
    /// done. A pending restore asked for again at a faster tier takes that tier (`Upgraded`); a restored one
    /// gets a new expiry (`Extended`, rounded like [`restore_expiry_ms`]).
    fn request_restore(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        terms: &RestoreTerms,
        now_ms: u64,
    ) -> Result<(RestoreOutcome, RestoreRecord)>;
    /// [`Catalog::request_restore`] for each `(key, version_id)` of `bucket`, in one transaction; `None` for a
    /// version that no longer exists.
    fn request_restores(
        &self,
        bucket: &str,
        versions: &[(String, String)],
        terms: &RestoreTerms,
        now_ms: u64,
    ) -> Result<Vec<Option<(RestoreOutcome, RestoreRecord)>>>;
    /// The restore of a version, if one was asked for and has not expired.
    fn restore_of(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<RestoreRecord>>;
    /// Restores not done yet, oldest first, at most `limit`.
    fn pending_restores(&self, limit: usize) -> Result<Vec<RestoreRecord>>;
    /// The content is in the cache: every pending restore of it is done, expiring at
    /// [`restore_expiry_ms`]`(now_ms, duration, day_ms)`, and it is pinned there (never evicted) until the latest
    /// of their expiries.
    fn finish_restores(&self, content: &ContentId, now_ms: u64, day_ms: u64) -> Result<()>;
    /// Give a content evicted from the cache its cache file back (a restore read it from the grid).
    /// `false` when it has one already (the caller deletes its file).
    fn recache_content(&self, content: &ContentId, cache_path: &str, now_ms: u64) -> Result<bool>;
    /// Forget restores whose expiry passed and unpin their contents. Returns how many.
    fn expire_restores(&self, now_ms: u64) -> Result<u64>;

    // ---- contents
    fn get_content(&self, id: &ContentId) -> Result<Option<ContentRecord>>;
    /// Contents in `state`, oldest first, at most `limit`.
    fn contents_in_state(&self, state: ContentState, limit: usize) -> Result<Vec<ContentRecord>>;
    /// Referenced contents placed on `grid_bucket` and waiting to be persisted, by dataset then age, at most
    /// `limit`.
    fn placed_on(&self, grid_bucket: u32, limit: usize) -> Result<Vec<ContentRecord>>;
    /// An object referencing the content (for its manifest), if any.
    fn any_object_of(&self, id: &ContentId) -> Result<Option<ObjectRecord>>;
    /// Who `id` belongs to: a version naming it (the current one, else the newest noncurrent one; delete
    /// markers name nothing), else the version of a part-list content or the upload naming it as a part; `None`
    /// when nothing references it. Every content with an owner is to be persisted.
    fn owner_of(&self, id: &ContentId) -> Result<Option<ContentOwner>>;
    /// Contents not persisted (cached, placed or persisting) that something which must reach the grid names: a
    /// version (current or noncurrent, delete markers name nothing), a part list such a version names (its
    /// parts), an upload in progress (its parts); one row per naming, at most `limit`. Found from the naming
    /// tables, independently of [`Catalog::owner_of`], so that a persist run can be checked.
    fn unpersisted_references(&self, limit: usize) -> Result<Vec<UnpersistedReference>>;
    /// The parts of a part-list content in order, each with its content record (empty for other contents).
    fn content_parts(&self, id: &ContentId) -> Result<Vec<(ContentPart, ContentRecord)>>;
    /// `Cached` → `Placed` on `grid_bucket`; records the dataset's grid bucket if it had none.
    fn place_content(&self, id: &ContentId, grid_bucket: u32) -> Result<()>;
    /// `Placed` → `Cached` for every content placed on `grid_bucket` and not yet being written there (its grid
    /// bucket forgotten), so that placement chooses again; contents `Persisting` or `Persisted` stay. Returns
    /// how many. For a grid bucket whose data disk failed: what waits for it must go elsewhere.
    fn unplace_contents(&self, grid_bucket: u32) -> Result<u64>;
    /// Record reads: set each content's `last_access_ms` (LRU), all in one transaction. Not durable on its own
    /// (a crash may forget the latest reads; the next durable commit makes it durable), so no call ever waits
    /// for its sync.
    fn touch_contents(&self, accesses: &[(ContentId, u64)]) -> Result<()>;
    /// Keep these contents in the cache (`hot`: pinned until [`HOT_PINNED_UNTIL_MS`], so never evicted) or stop
    /// keeping them (`!hot`: a hot pin falls back to the latest expiry of the content's restores, or of the
    /// restores of a part list it is a part of, else none). Contents need not be cached (a pin holds once they
    /// are). Returns how many changed.
    fn pin_hot(&self, ids: &[ContentId], hot: bool) -> Result<u64>;
    /// Persisted contents with a cache file, least recently used first, at most `limit`.
    fn eviction_candidates(&self, limit: usize) -> Result<Vec<ContentRecord>>;
    /// Drop the cached bytes of these persisted contents in one transaction, for each content that is persisted
    /// and cached (others are skipped): a work item deleting its cache file, or (`None`) its inline bytes removed
    /// at once; with the content and its stored bytes.
    fn evict_contents(&self, ids: &[ContentId]) -> Result<Vec<Evicted>>;
    /// The stored bytes of a content cached inline ([`INLINE_CACHE_PATH`]), if it is.
    fn inline_bytes(&self, id: &ContentId) -> Result<Option<Vec<u8>>>;
    /// Bytes waiting (state `Placed`) per grid bucket.
    fn outstanding(&self) -> Result<Vec<Outstanding>>;
    /// `Persisting` → `Persisted` for these contents.
    fn mark_persisted(&self, ids: &[ContentId]) -> Result<()>;

    // ---- extents
    /// Allocate `extents` on `grid_bucket` (best-fit free range, else the append pointer; `NoRoom` beyond
    /// `capacity_bytes`), record them as being written and move `contents` to `Persisting`.
    fn begin_extents(
        &self,
        grid_bucket: u32,
        capacity_bytes: u64,
        extents: &[NewExtent],
        contents: &[ContentId],
    ) -> Result<Vec<ExtentRecord>>;
    /// The extents are written: record their hashes and the segments; `contents` go to `Persisted` (or stay
    /// `Persisting` when `parity_pending`).
    fn finish_extents(
        &self,
        written: &[(i64, [u8; 32])],
        segments: &[SegmentRecord],
        contents: &[ContentId],
        parity_pending: bool,
    ) -> Result<()>;
    /// Free extents whose write failed or was interrupted; `contents` go back to `Placed`.
    fn abandon_extents(&self, extent_ids: &[i64], contents: &[ContentId]) -> Result<()>;
    /// Extents still marked as being written (after a crash).
    fn unwritten_extents(&self) -> Result<Vec<ExtentRecord>>;
    /// The segments of a content with their extents, in order.
    fn segments(&self, id: &ContentId) -> Result<Vec<ContentSegment>>;
    fn extents_of_grid_bucket(&self, grid_bucket: u32) -> Result<Vec<ExtentRecord>>;
    fn grid_usage(&self) -> Result<Vec<GridUsage>>;
    /// Free ranges of a grid bucket, in offset order.
    fn free_ranges(&self, grid_bucket: u32) -> Result<Vec<(u64, u64)>>;

    // ---- datasets
    fn datasets(&self) -> Result<Vec<DatasetRecord>>;
    /// Per dataset with at least one current object: counts, sizes, write times, expiry, persistence and the
    /// tags its objects carry (catalog only).
    fn dataset_stats(&self) -> Result<Vec<DatasetStats>>;

    // ---- multipart
    fn create_upload(&self, upload: &UploadRecord) -> Result<()>;
    fn get_upload(&self, upload_id: &str) -> Result<Option<UploadRecord>>;
    /// Uploads of a bucket (key order, then creation), optionally under a prefix.
    fn list_uploads(&self, bucket: &str, prefix: &str, limit: usize) -> Result<Vec<UploadRecord>>;
    /// Record a part, replacing an earlier part with the same number (whose file gets a work item).
    /// Record an uploaded part and its content (inserted, or referenced once more when it exists: then the new
    /// cache file is to be deleted, as in [`Catalog::put_object`]); a part uploaded again under the same number
    /// replaces the earlier one, whose content loses the reference. `dataset` is the upload's dataset.
    fn put_part(
        &self,
        part: &PartRecord,
        content: &NewContent,
        dataset: &str,
    ) -> Result<PutOutcome>;
    fn list_parts(&self, upload_id: &str) -> Result<Vec<PartRecord>>;
    /// Remove the upload and its parts; work items delete the part files.
    fn remove_upload(&self, upload_id: &str) -> Result<Vec<WorkItem>>;
    /// Complete an upload in one transaction: insert the part-list content `list` (or reference the existing one
    /// with the same id), whose parts take over the references of the upload's chosen parts, remove the upload
    /// and all its parts (unchosen ones lose their reference), and put `object` (naming `list.id`), replacing
    /// any object at its key. Fails with `NoSuchUpload`, `NoSuchBucket`, or `Corrupt` when a chosen part number
    /// no longer names the content given (replaced meanwhile). No byte is copied. The completion is remembered
    /// ([`Catalog::completed_upload`]) and the parts' checksums kept with the list ([`Catalog::part_checksums`]).
    fn complete_upload(
        &self,
        upload_id: &str,
        object: &ObjectRecord,
        list: &NewPartList,
        now_ms: u64,
    ) -> Result<PutOutcome> {
        self.complete_upload_if(upload_id, object, list, now_ms, &WriteCondition::Always)
    }
    /// [`Catalog::complete_upload`] if `condition` holds for the key's current version, checked in the same
    /// transaction (`PreconditionFailed` or `NoSuchKey`, and the upload left as it was, otherwise).
    fn complete_upload_if(
        &self,
        upload_id: &str,
        object: &ObjectRecord,
        list: &NewPartList,
        now_ms: u64,
        condition: &WriteCondition,
    ) -> Result<PutOutcome>;
    /// The completion of `upload_id` ([`Catalog::complete_upload`] remembers each for
    /// [`COMPLETED_UPLOADS_KEPT_MS`]), if remembered; the version it names may be gone since.
    fn completed_upload(&self, upload_id: &str) -> Result<Option<CompletedUpload>>;
    /// The checksums each part of the part-list content `list` arrived with, in part order (`(name, base64)`;
    /// empty for a part without, for lists completed before schema version 12 and for growing objects).
    fn part_checksums(&self, list: &ContentId) -> Result<Vec<Vec<(String, String)>>>;
    /// Every upload (restart: parts whose files are gone).
    fn all_uploads(&self) -> Result<Vec<UploadRecord>>;

    // ---- growing objects (the recorder: docs/store.md "Growing objects")
    /// Start a growing object: insert the part-list content `object.content` with no parts (logical size 0,
    /// state `Cached`) and make `object` (size 0) visible naming it. `Ok(false)` and no change when an object
    /// already exists at its key or the content id is taken; `NoSuchBucket` when the bucket is missing.
    fn begin_growing(&self, object: &ObjectRecord, now_ms: u64) -> Result<bool>;
    /// Append part `part_number` of upload `upload_id` to the growing object `(bucket, key)` in one transaction:
    /// a `content_parts` row at `seq` = its number of parts and `logical_offset` = its end (one more reference
    /// of the part), the list's and the object's logical size raised by the part's size, the list's MD5 and the
    /// object's ETag, user metadata and last-modified time set. Returns the new part, or `Ok(None)` and no
    /// change when the object is gone or names another content (deleted or replaced while growing).
    /// `NoSuchUpload` when the upload or the part is missing.
    fn append_growing(&self, append: &GrowingAppend, now_ms: u64) -> Result<Option<ContentPart>>;

    // ---- garbage collection
    /// Contents unreferenced since at least `older_than_ms`, at most `limit`.
    fn gc_candidates(&self, older_than_ms: u64, limit: usize) -> Result<Vec<ContentId>>;
    /// Remove a content that is still unreferenced: its segments, extents no segment references any more
    /// (their ranges are freed), its row; its cache file gets a work item. No-op if it gained a reference.
    fn gc_content(&self, id: &ContentId) -> Result<GcOutcome>;

    // ---- pending work
    fn pending_work(&self) -> Result<Vec<WorkItem>>;
    fn finish_work(&self, ids: &[i64]) -> Result<()>;

    // ---- file system namespace (the mount, docs/mount.md)
    // Top-level directories are S3 buckets; a key's `/`-separated components are directories. A directory
    // exists *implicitly* while a key or a directory row lies under its prefix, *explicitly* while it has a row
    // in `fs_directories` (made by mkdir, or kept so that a directory emptied through the mount stays). A
    // directory shadows an object of the same name. Paths are keys: `a/b` names a file or directory, a
    // directory's own key is its prefix `a/b/`.
    /// What `path` (no trailing `/`, not empty) names in `bucket`: a directory, else the file at that key, else
    /// `None`. `NoSuchBucket` when the bucket is missing.
    fn fs_lookup(&self, bucket: &str, path: &str) -> Result<Option<FsEntry>>;
    /// The entries directly under directory `dir` (`""` for the top of the bucket, else a prefix ending with
    /// `/`), in key order (a directory's key is its prefix), strictly after the key `after`, at most `limit`
    /// (≤ 1000). Shadowed files and names a file system cannot show (empty, `.`, `..`, over 255 bytes) are left
    /// out.
    fn fs_list(&self, bucket: &str, dir: &str, after: Option<&str>, limit: usize)
        -> Result<FsPage>;
    /// Create the directory `record.path`; `Exists` when a directory or file of that name exists. The parent
    /// is kept as a directory row (`parent_attrs` if it had none) and its modification time set to
    /// `parent_attrs.mtime_ns` (as every `fs_*` change below does to the parents it changes).
    fn fs_mkdir(&self, record: &DirRecord, parent_attrs: &DirAttrs) -> Result<()>;
    /// Remove the empty directory `path` (ending with `/`): its row and an S3 folder marker object (key =
    /// `path`) if any. `NotEmpty`, `NotFound`. The parent is kept as a directory row (`parent_attrs`).
    fn fs_rmdir(
        &self,
        bucket: &str,
        path: &str,
        parent_attrs: &DirAttrs,
        now_ms: u64,
    ) -> Result<()>;
    /// Remove the file at `key` (its content loses a reference); `NotFound`. The parent directory is kept
    /// as a row (`parent_attrs`) so that it does not vanish with its last file.
    fn fs_unlink(
        &self,
        bucket: &str,
        key: &str,
        parent_attrs: &DirAttrs,
        now_ms: u64,
    ) -> Result<()>;
    /// Rename a file or a whole directory (every key and directory row under it), across buckets too, in
    /// one transaction. POSIX rules: a file may replace a file, a directory an empty directory (unless
    /// `no_replace`); `IsADirectory`, `NotADirectory`, `NotEmpty`, `Exists`, `Invalid` (into itself, or a key
    /// over 1024 bytes), `NotFound`.
    fn fs_rename(&self, rename: &FsRename, now_ms: u64) -> Result<()>;
    /// Set an existing directory's attributes (an implicit directory gets a row). `NotFound`.
    fn fs_set_dir(&self, record: &DirRecord) -> Result<()>;
    /// Replace an object's user metadata (the mount keeps `mode`, `uid`, `gid`, `mtime` there). `NotFound`.
    fn fs_set_metadata(
        &self,
        bucket: &str,
        key: &str,
        user_metadata: &[(String, String)],
    ) -> Result<()>;
    /// When the content became fully persisted (`None` while it is not, or for contents persisted before
    /// schema version 3).
    fn persisted_ms(&self, id: &ContentId) -> Result<Option<u64>>;
    // ---- operator view: history and webhooks (`permafrost-admin`)
    /// Add a history sample (replacing one of the same `at_ms`) and keep only the newest `keep` samples.
    fn history_append(&self, sample: &HistorySample, keep: u64) -> Result<()>;
    /// Samples with `at_ms >= since_ms`, oldest first, at most the newest `limit` of them.
    fn history_since(&self, since_ms: u64, limit: usize) -> Result<Vec<HistorySample>>;
    // ---- SMART readings of the grid's disks (`permafrost-admin`, docs/smart.md)
    /// Add a reading (replacing one of the same disk and `at_ms`) and keep only the newest `keep` of its disk.
    fn smart_append(&self, record: &SmartRecord, keep: u64) -> Result<()>;
    /// The newest reading of each disk that has one, by disk.
    fn smart_latest(&self) -> Result<Vec<SmartRecord>>;
    /// Readings of `disk`, oldest first, at most the newest `limit` of them.
    fn smart_history(&self, disk: u32, limit: usize) -> Result<Vec<SmartRecord>>;
    /// Register a webhook (pending); keeps at most the newest `WEBHOOKS_DELIVERED_KEPT` delivered ones.
    fn webhook_add(
        &self,
        url: &str,
        bucket: &str,
        key: Option<&str>,
        prefix: &str,
        now_ms: u64,
    ) -> Result<WebhookRecord>;
    /// Every webhook kept, by id.
    fn webhooks(&self) -> Result<Vec<WebhookRecord>>;
    /// Remove a webhook; whether it existed.
    fn webhook_remove(&self, id: u64) -> Result<bool>;
    /// Count a delivery attempt of webhook `id`: failed with `error`, or delivered at `delivered_ms`. Returns
    /// whether the webhook was pending before (a delivered one is never marked again: exactly once).
    fn webhook_attempt(
        &self,
        id: u64,
        error: Option<&str>,
        delivered_ms: Option<u64>,
    ) -> Result<bool>;

    // ---- whole catalog
    /// One trivial query: `Ok` while the database answers (the readiness probe, `/_permafrost/ready`).
    fn ping(&self) -> Result<()>;
    fn stats(&self) -> Result<CatalogStats>;
    /// Every cache file the catalog references (contents and parts), for the restart sweep.
    fn cache_files(&self) -> Result<Vec<String>>;
    /// Check the invariants (refcounts, allocation overlaps); returns a description of each violation.
    fn check(&self) -> Result<Vec<String>>;
}
