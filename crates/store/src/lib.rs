//! # permafrost-store: the object store
//!
//! **Job.** Turn the archive engine (`permafrost-engine`) into an object store with S3 semantics
//! (`docs/store.md`): S3 buckets and keys, a write-back cache on flash that takes uploads at the cache device's
//! speed, content addressing (identical bytes stored once), compression (server-side chunks, or client
//! pre-compressed data stored as sent), packing of small objects, placement of datasets on one grid bucket,
//! persistence to the grid in the self-describing extent format, LRU eviction, garbage collection, verify and
//! salvage. The S3 front end and the CLI sit on [`Store`]; its API is blocking.
//!
//! Data directory:
//! ```text
//! DATA/catalog.sqlite     the catalog (permafrost-catalog, docs/catalog.md)
//! DATA/cache/contents/    one file per cached content (its stored bytes), multipart parts included (a part is a
//!                         content; a completed upload is the list of its parts, with no file of its own)
//! DATA/cache/parts/       parts uploaded under catalog schema 2 only (they cannot be completed)
//! DATA/cache/tmp/         uploads in progress (removed on restart)
//! DATA/cache/staging/     files being written through the mount (crates/fuse; emptied when the mount starts)
//! DATA/grid/              the engine's directory (grid.toml, journal, disks)
//! ```
//!
//! **Invariants.**
//! - An acknowledged put (`PutHandle::finish` returned) is durable: its cache file is fsynced and renamed, and
//!   the catalog row committed, before `finish` returns. Restart re-queues every content not yet persisted.
//! - An object is visible only when complete; a crash mid-upload leaves only a temporary file, removed on restart.
//! - LIST, HEAD, DELETE and COPY touch only the catalog: they never wake a disk.
//! - Reads return verified bytes or an error: extents are checked against their crc32c and the catalog's BLAKE3
//!   when read whole, a whole-object read against the content's BLAKE3; IDR and the grid are beneath.
//! - A content is evicted from the cache only once persisted (all parity durable); it is deleted only after it
//!   has been unreferenced for `gc_grace_ms`.
//! - Memory is bounded: bodies stream through buffers of at most a few chunks.
//!
//! **Not here.** HTTP and S3 wire formats (crates/s3), formats (permafrost-format), decisions (permafrost-policy).

mod archive;
mod cache;
mod checksum;
mod claims;
mod config;
mod free_space;
mod gc;
mod growing;
mod mount;
mod multipart;
mod multipart_checksum;
mod operator;
mod persist;
mod pipeline;
#[doc(hidden)]
pub mod planted_bugs;
mod prefetch;
mod put;
mod read;
mod read_ahead;
mod salvage;
mod store;
mod summary;

pub use archive::{
    validate_tags, DatasetFilter, DatasetSummary, RestoreBatch, RestoreEvent, RestoreInfo,
    RESTORE_COMPLETED_EVENT, RESTORE_EVENTS_MAX, RESTORE_POST_EVENT,
};
pub use checksum::{ChecksumAlgorithm, Hasher};
pub use claims::{PersistedFinding, PersistedProgress, PersistedReport, LISTED_MAX};
pub use config::{CatalogConfig, GridSetup, RestoreConfig, StoreConfig};
pub use gc::GcReport;
pub use growing::{growing_list_id, GrowingObject, GrowingOptions, Piece, SealedPiece};
pub use mount::{CacheReservation, FsError, Residence, Usage};
pub use multipart::{CompletedPart, CompletionChecksums, PartOfVersion, PART_NUMBER_MAX};
pub use multipart_checksum::{ChecksumType, UploadChecksum};
pub use permafrost_catalog::now_ms;
pub use permafrost_catalog::WriteCondition;
pub use permafrost_catalog::{
    AttributeChange, BucketArchive, BucketRecord, BucketSettings, Compression, ContentId,
    ContentRecord, ContentState, DefaultRetention, DeleteOutcome, DirAttrs, DirRecord, Encoding,
    FsEntry, FsFile, FsPage, FsRename, Lifecycle, LifecycleFilter, LifecycleRule, ListPage,
    ListQuery, LockMode, ObjectAttributes, ObjectLock, ObjectRecord, Refusal, RestoreOutcome,
    RestoreTier, Retention, StorageClass, StoredForm, VersionPage, VersionQuery, VersionRecord,
    Versioning, NULL_VERSION,
};
pub use permafrost_engine::WriteMode;
pub use prefetch::{
    CacheReads, HotChange, KeepHotReport, HOT_PREFIXES_MAX, LIST_SCAN_MAX, QUEUE_MAX,
    REMEMBERED_MAX,
};
pub use put::{Checksums, PutHandle, PutOptions, ReplicaOf};
pub use read::ObjectReader;
pub use salvage::{salvage_disk_image, salvage_through_engine, SalvageProgress, SalvageReport};
pub use store::{
    BucketSettingsReport, ByteRange, EffectiveSettings, MultipartUpload, ObjectInfo, PartInfo,
    ReplaceMetadata, StatusReport, Store, VerifyProgress, VerifyReport, DATASET_TAG,
    DECODED_LENGTH_META,
};
pub use summary::{DiskCounts, GridBytes, StateCount, StatusSummary, ENERGY_SCOPE};

/// Errors of the store. Each variant says what happened; `crates/s3` maps each to one S3 error code (its name, see
/// [`StoreError::s3_code`]) and `crates/admin` to one HTTP status. A message is for people: code decides by the
/// variant, never by the text.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    #[error("no such key: {bucket}/{key}")]
    NoSuchKey { bucket: String, key: String },
    #[error("bucket {0} is not empty")]
    BucketNotEmpty(String),
    #[error("bucket {0} already exists (and is yours)")]
    BucketAlreadyOwnedByYou(String),
    #[error("bad digest: {0}")]
    BadDigest(String),
    #[error("invalid digest: {0}")]
    InvalidDigest(String),
    #[error("slow down: {0}")]
    SlowDown(String),
    #[error("invalid range: {0}")]
    InvalidRange(String),
    #[error("invalid part: {0}")]
    InvalidPart(String),
    #[error("invalid part order: {0}")]
    InvalidPartOrder(String),
    #[error("no such upload: {0}")]
    NoSuchUpload(String),
    #[error("entity too small: {0}")]
    EntityTooSmall(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("no such version: {0}")]
    NoSuchVersion(String),
    /// Object Lock (or another rule) forbids it.
    #[error("access denied: {0}")]
    AccessDenied(String),
    #[error("invalid bucket state: {0}")]
    InvalidBucketState(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A GLACIER object not restored.
    #[error("invalid object state: {0}")]
    InvalidObjectState(String),
    #[error("restore already in progress: {0}")]
    RestoreAlreadyInProgress(String),
    #[error("invalid storage class: {0}")]
    InvalidStorageClass(String),
    #[error("method not allowed: {0}")]
    MethodNotAllowed(String),
    /// A tag set that breaks S3's rules: too many tags, an empty or too long key, a too long value, a key twice
    /// (S3 `InvalidTag`).
    #[error("invalid tag: {0}")]
    InvalidTag(String),
    /// A `partNumber` beyond the object's last part (S3 `InvalidPartNumber`, 416).
    #[error("invalid part number: {0}")]
    InvalidPartNumber(String),
    /// A conditional write's condition (`If-None-Match: *`, `If-Match`) does not hold; nothing changed.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A persist run ended with referenced contents still not on the grid (named in the message).
    #[error("not persisted: {0}")]
    NotPersisted(String),
    /// The catalog database cannot be used now (PostgreSQL stopped or unreachable, a statement failed): the
    /// request may be retried (S3 `ServiceUnavailable`, 503). A commit whose answer was lost may have taken place.
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl StoreError {
    /// The S3 error code this error maps to.
    pub fn s3_code(&self) -> &'static str {
        match self {
            StoreError::NoSuchBucket(_) => "NoSuchBucket",
            StoreError::NoSuchKey { .. } => "NoSuchKey",
            StoreError::BucketNotEmpty(_) => "BucketNotEmpty",
            StoreError::BucketAlreadyOwnedByYou(_) => "BucketAlreadyOwnedByYou",
            StoreError::BadDigest(_) => "BadDigest",
            StoreError::InvalidDigest(_) => "InvalidDigest",
            StoreError::SlowDown(_) => "SlowDown",
            StoreError::InvalidRange(_) => "InvalidRange",
            StoreError::InvalidPart(_) => "InvalidPart",
            StoreError::InvalidPartOrder(_) => "InvalidPartOrder",
            StoreError::NoSuchUpload(_) => "NoSuchUpload",
            StoreError::EntityTooSmall(_) => "EntityTooSmall",
            StoreError::InvalidArgument(_) => "InvalidArgument",
            StoreError::NoSuchVersion(_) => "NoSuchVersion",
            StoreError::AccessDenied(_) => "AccessDenied",
            StoreError::InvalidBucketState(_) => "InvalidBucketState",
            StoreError::InvalidRequest(_) => "InvalidRequest",
            StoreError::InvalidObjectState(_) => "InvalidObjectState",
            StoreError::RestoreAlreadyInProgress(_) => "RestoreAlreadyInProgress",
            StoreError::InvalidStorageClass(_) => "InvalidStorageClass",
            StoreError::MethodNotAllowed(_) => "MethodNotAllowed",
            StoreError::InvalidTag(_) => "InvalidTag",
            StoreError::InvalidPartNumber(_) => "InvalidPartNumber",
            StoreError::PreconditionFailed(_) => "PreconditionFailed",
            StoreError::NotPersisted(_) => "InternalError",
            StoreError::Unavailable(_) => "ServiceUnavailable",
            StoreError::Internal(_) => "InternalError",
        }
    }
}

impl From<permafrost_catalog::CatalogError> for StoreError {
    fn from(e: permafrost_catalog::CatalogError) -> Self {
        use permafrost_catalog::CatalogError as C;
        match e {
            C::NoSuchBucket(b) => StoreError::NoSuchBucket(b),
            C::BucketExists(b) => StoreError::BucketAlreadyOwnedByYou(b),
            C::BucketNotEmpty(b) => StoreError::BucketNotEmpty(b),
            C::NoSuchKey { bucket, key } => StoreError::NoSuchKey { bucket, key },
            C::NoSuchUpload(u) => StoreError::NoSuchUpload(u),
            C::NoSuchVersion {
                bucket,
                key,
                version_id,
            } => StoreError::NoSuchVersion(format!("{bucket}/{key} has no version {version_id}")),
            C::Locked(m) => StoreError::AccessDenied(m),
            C::InvalidBucketState(m) => StoreError::InvalidBucketState(m),
            C::InvalidRequest(m) => StoreError::InvalidRequest(m),
            C::PreconditionFailed(m) => StoreError::PreconditionFailed(m),
            e @ (C::Database { .. } | C::Unreachable(_)) => StoreError::Unavailable(e.to_string()),
            e @ (C::NoSuchAccessKey(_)
            | C::AccessKeyExists(_)
            | C::NoSuchContent(_)
            | C::NoRoom { .. }
            | C::Corrupt(_)
            | C::Refused { .. }
            | C::Sync { .. }) => StoreError::Internal(e.to_string()),
        }
    }
}

impl From<permafrost_engine::Error> for StoreError {
    fn from(e: permafrost_engine::Error) -> Self {
        StoreError::Internal(format!("engine: {e}"))
    }
}

impl From<permafrost_format::FormatError> for StoreError {
    fn from(e: permafrost_format::FormatError) -> Self {
        match e {
            permafrost_format::FormatError::InvalidRange { .. } => {
                StoreError::InvalidRange(e.to_string())
            }
            other => StoreError::Internal(format!("format: {other}")),
        }
    }
}

/// Result of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// An I/O error with what was being done. A full file system (the cache's, or the disks' files beside it) is
/// `SlowDown`, as a full cache is: nothing was accepted, and a retry succeeds once persistence and eviction have
/// made room or the operator has.
pub(crate) fn io_error(what: impl std::fmt::Display, e: std::io::Error) -> StoreError {
    use std::io::ErrorKind::{QuotaExceeded, StorageFull};
    match e.kind() {
        StorageFull | QuotaExceeded => {
            StoreError::SlowDown(format!("{what}: the file system is full ({e})"))
        }
        _ => StoreError::Internal(format!("{what}: {e}")),
    }
}

#[cfg(test)]
mod io_error_tests {
    use super::*;

    #[test]
    fn a_full_file_system_is_slow_down_and_other_io_errors_are_internal() {
        let full = io_error(
            "cannot write to the cache",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert!(
            matches!(&full, StoreError::SlowDown(m) if m.contains("cannot write to the cache: the file system is full")),
            "{full}"
        );
        let other = io_error("cannot read", std::io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(other, StoreError::Internal(_)), "{other}");
    }
}

#[cfg(test)]
mod catalog_error_tests {
    use super::*;
    use permafrost_catalog::CatalogError as C;

    #[test]
    fn a_catalog_database_out_of_reach_is_unavailable_not_internal() {
        let unreachable = StoreError::from(C::Unreachable(
            "catalog database postgresql://db/pf: cannot connect".into(),
        ));
        assert!(matches!(&unreachable, StoreError::Unavailable(m) if m.contains("cannot connect")));
        let failed = StoreError::from(C::Database {
            path: "postgresql://db/pf".into(),
            source: permafrost_catalog::SqlError::NoRows,
        });
        assert!(matches!(failed, StoreError::Unavailable(_)), "{failed}");
        assert_eq!(failed.s3_code(), "ServiceUnavailable");
    }

    #[test]
    fn catalog_refusals_keep_their_kind() {
        let locked = StoreError::from(C::Locked("retention until 2030".into()));
        assert!(matches!(locked, StoreError::AccessDenied(_)));
        let version = StoreError::from(C::NoSuchVersion {
            bucket: "b".into(),
            key: "k".into(),
            version_id: "v1".into(),
        });
        assert!(matches!(&version, StoreError::NoSuchVersion(m) if m.contains("v1")));
        let corrupt = StoreError::from(C::Corrupt("a row".into()));
        assert!(matches!(corrupt, StoreError::Internal(_)));
    }
}
