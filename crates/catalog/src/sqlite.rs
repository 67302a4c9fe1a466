//! The catalog's logic (every `Catalog` method, in the child modules), run through `crate::sql` on either back
//! end: an embedded SQLite database (WAL) in the data directory, or PostgreSQL (`crate::postgres`). Schema:
//! `docs/catalog.md`. Each child module says what it manages and the invariants it keeps:
//!
//! - `backend`: how a call runs its transaction (SQLite's writer, readers and group commit; PostgreSQL's
//!   retries) and opening a catalog; `schema`: the SQLite schema and the migrations of both back ends;
//!   `rows`: column lists and row readers.
//! - `buckets`, `objects`, `contents`, `extents`, `uploads`, `gc` (garbage and the work queue), `archive`
//!   (versions, tags, Object Lock, lifecycle, restores), `completed` (completed uploads), `growing` (growing
//!   objects), `namespace` (the mount's directories), `access` (keys, grants, ACLs, policies), `ops` (history
//!   and webhooks), `health` (ping, stats, check).

mod access;
mod archive;
mod backend;
mod buckets;
mod completed;
mod contents;
mod extents;
mod gc;
mod growing;
mod health;
mod namespace;
mod objects;
mod ops;
mod rows;
mod schema;
mod smart;
mod uploads;

pub(crate) use access::PG_ACCESS_MIGRATION;
pub use backend::SqliteOptions;
pub(crate) use completed::PG_COMPLETED_UPLOADS_MIGRATION;
pub(crate) use schema::{BUCKET_CORS_MIGRATION, RESTORE_TIER_MIGRATION};
pub(crate) use smart::SMART_READINGS_MIGRATION;

use crate::*;
use backend::Backend;

/// The catalog: its logic on one of two back ends, an embedded SQLite database or a PostgreSQL server
/// (`crate::postgres`). The logic (this module and its children) runs SQL through `crate::sql`, once for both.
pub struct SqlCatalog {
    backend: Backend,
    /// What error messages name: the SQLite file, or the PostgreSQL URL without its password.
    name: String,
}

/// `impl Catalog for SqlCatalog` names each trait method once, under the module that implements it: the
/// inherent method of the same name there (a trait's impl is one block, so the modules cannot hold the trait's
/// methods themselves). Each `fn name(&self, args) -> T;` becomes the trait method calling
/// `SqlCatalog::name(self, args)`, which is the inherent method (inherent methods come first in that path).
macro_rules! catalog_methods {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        $(fn $name(&self $(, $arg: $ty)*) -> $ret {
            SqlCatalog::$name(self $(, $arg)*)
        })*
    };
}

impl Catalog for SqlCatalog {
    catalog_methods! {
        // archive
        fn set_bucket_archive(&self, name: &str, archive: &BucketArchive) -> Result<()>;
        fn get_object_version(&self, bucket: &str, key: &str, version_id: &str) -> Result<Option<(VersionRecord, Option<ContentRecord>)>>;
        fn delete_version(&self, bucket: &str, key: &str, version_id: Option<&str>, bypass_governance: bool, now_ms: u64) -> Result<DeleteOutcome>;
        fn list_object_versions(&self, bucket: &str, query: &VersionQuery) -> Result<VersionPage>;
        fn change_attributes(&self, bucket: &str, key: &str, version_id: Option<&str>, change: &AttributeChange, bypass_governance: bool, now_ms: u64) -> Result<String>;
        fn expire_objects(&self, now_ms: u64, limit: usize) -> Result<u64>;
        fn expire_noncurrent(&self, now_ms: u64, limit: usize) -> Result<u64>;
        fn request_restore(&self, bucket: &str, key: &str, version_id: Option<&str>, terms: &RestoreTerms, now_ms: u64) -> Result<(RestoreOutcome, RestoreRecord)>;
        fn request_restores(&self, bucket: &str, versions: &[(String, String)], terms: &RestoreTerms, now_ms: u64) -> Result<Vec<Option<(RestoreOutcome, RestoreRecord)>>>;
        fn restore_of(&self, bucket: &str, key: &str, version_id: &str) -> Result<Option<RestoreRecord>>;
        fn pending_restores(&self, limit: usize) -> Result<Vec<RestoreRecord>>;
        fn finish_restores(&self, content: &ContentId, now_ms: u64, day_ms: u64) -> Result<()>;
        fn recache_content(&self, content: &ContentId, cache_path: &str, now_ms: u64) -> Result<bool>;
        fn dataset_stats(&self) -> Result<Vec<DatasetStats>>;
        fn expire_restores(&self, now_ms: u64) -> Result<u64>;
        // growing
        fn begin_growing(&self, object: &ObjectRecord, now_ms: u64) -> Result<bool>;
        fn append_growing(&self, append: &GrowingAppend, now_ms: u64) -> Result<Option<ContentPart>>;
        // completed
        fn completed_upload(&self, upload_id: &str) -> Result<Option<CompletedUpload>>;
        fn part_checksums(&self, list: &ContentId) -> Result<Vec<Vec<(String, String)>>>;
        // namespace
        fn fs_lookup(&self, bucket: &str, path: &str) -> Result<Option<FsEntry>>;
        fn fs_list(&self, bucket: &str, dir: &str, after: Option<&str>, limit: usize) -> Result<FsPage>;
        fn fs_mkdir(&self, record: &DirRecord, parent_attrs: &DirAttrs) -> Result<()>;
        fn fs_rmdir(&self, bucket: &str, path: &str, parent_attrs: &DirAttrs, now_ms: u64) -> Result<()>;
        fn fs_unlink(&self, bucket: &str, key: &str, parent_attrs: &DirAttrs, now_ms: u64) -> Result<()>;
        fn fs_rename(&self, rename: &FsRename, now_ms: u64) -> Result<()>;
        fn fs_set_dir(&self, record: &DirRecord) -> Result<()>;
        fn fs_set_metadata(&self, bucket: &str, key: &str, user_metadata: &[(String, String)]) -> Result<()>;
        // buckets
        fn create_bucket(&self, name: &str, settings: &BucketSettings) -> Result<()>;
        fn delete_bucket(&self, name: &str) -> Result<Vec<WorkItem>>;
        fn get_bucket(&self, name: &str) -> Result<Option<BucketRecord>>;
        fn set_bucket_settings(&self, name: &str, settings: &BucketSettings) -> Result<()>;
        fn list_buckets(&self) -> Result<Vec<BucketRecord>>;
        fn datasets(&self) -> Result<Vec<DatasetRecord>>;
        // objects
        fn put_object_if(&self, object: &ObjectRecord, content: &NewContent, now_ms: u64, condition: &WriteCondition) -> Result<PutOutcome>;
        fn get_object(&self, bucket: &str, key: &str) -> Result<Option<(ObjectRecord, ContentRecord)>>;
        fn delete_object(&self, bucket: &str, key: &str, now_ms: u64) -> Result<bool>;
        fn copy_object_if(&self, src_bucket: &str, src_key: &str, src_version: Option<&str>, object: &ObjectRecord, now_ms: u64, condition: &WriteCondition) -> Result<ObjectRecord>;
        fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage>;
        fn objects_after(&self, after: Option<(&str, &str)>, limit: usize) -> Result<Vec<ObjectRecord>>;
        // contents
        fn get_content(&self, id: &ContentId) -> Result<Option<ContentRecord>>;
        fn contents_in_state(&self, state: ContentState, limit: usize) -> Result<Vec<ContentRecord>>;
        fn placed_on(&self, grid_bucket: u32, limit: usize) -> Result<Vec<ContentRecord>>;
        fn any_object_of(&self, id: &ContentId) -> Result<Option<ObjectRecord>>;
        fn owner_of(&self, id: &ContentId) -> Result<Option<ContentOwner>>;
        fn unpersisted_references(&self, limit: usize) -> Result<Vec<UnpersistedReference>>;
        fn content_parts(&self, id: &ContentId) -> Result<Vec<(ContentPart, ContentRecord)>>;
        fn place_content(&self, id: &ContentId, grid_bucket: u32) -> Result<()>;
        fn unplace_contents(&self, grid_bucket: u32) -> Result<u64>;
        fn touch_contents(&self, accesses: &[(ContentId, u64)]) -> Result<()>;
        fn pin_hot(&self, ids: &[ContentId], hot: bool) -> Result<u64>;
        fn eviction_candidates(&self, limit: usize) -> Result<Vec<ContentRecord>>;
        fn evict_contents(&self, ids: &[ContentId]) -> Result<Vec<Evicted>>;
        fn inline_bytes(&self, id: &ContentId) -> Result<Option<Vec<u8>>>;
        fn outstanding(&self) -> Result<Vec<Outstanding>>;
        fn mark_persisted(&self, ids: &[ContentId]) -> Result<()>;
        fn persisted_ms(&self, id: &ContentId) -> Result<Option<u64>>;
        fn cache_files(&self) -> Result<Vec<String>>;
        // extents
        fn begin_extents(&self, grid_bucket: u32, capacity_bytes: u64, extents: &[NewExtent], contents: &[ContentId]) -> Result<Vec<ExtentRecord>>;
        fn finish_extents(&self, written: &[(i64, [u8; 32])], segments: &[SegmentRecord], contents: &[ContentId], parity_pending: bool) -> Result<()>;
        fn abandon_extents(&self, extent_ids: &[i64], contents: &[ContentId]) -> Result<()>;
        fn unwritten_extents(&self) -> Result<Vec<ExtentRecord>>;
        fn segments(&self, id: &ContentId) -> Result<Vec<ContentSegment>>;
        fn extents_of_grid_bucket(&self, grid_bucket: u32) -> Result<Vec<ExtentRecord>>;
        fn grid_usage(&self) -> Result<Vec<GridUsage>>;
        fn free_ranges(&self, grid_bucket: u32) -> Result<Vec<(u64, u64)>>;
        // uploads
        fn create_upload(&self, upload: &UploadRecord) -> Result<()>;
        fn get_upload(&self, upload_id: &str) -> Result<Option<UploadRecord>>;
        fn list_uploads(&self, bucket: &str, prefix: &str, limit: usize) -> Result<Vec<UploadRecord>>;
        fn put_part(&self, part: &PartRecord, content: &NewContent, dataset: &str) -> Result<PutOutcome>;
        fn list_parts(&self, upload_id: &str) -> Result<Vec<PartRecord>>;
        fn remove_upload(&self, upload_id: &str) -> Result<Vec<WorkItem>>;
        fn complete_upload_if(&self, upload_id: &str, object: &ObjectRecord, list: &NewPartList, now_ms: u64, condition: &WriteCondition) -> Result<PutOutcome>;
        fn all_uploads(&self) -> Result<Vec<UploadRecord>>;
        // gc
        fn gc_candidates(&self, older_than_ms: u64, limit: usize) -> Result<Vec<ContentId>>;
        fn gc_content(&self, id: &ContentId) -> Result<GcOutcome>;
        fn pending_work(&self) -> Result<Vec<WorkItem>>;
        fn finish_work(&self, ids: &[i64]) -> Result<()>;
        // ops
        fn history_append(&self, h: &HistorySample, keep: u64) -> Result<()>;
        fn history_since(&self, since_ms: u64, limit: usize) -> Result<Vec<HistorySample>>;
        // smart
        fn smart_append(&self, record: &SmartRecord, keep: u64) -> Result<()>;
        fn smart_latest(&self) -> Result<Vec<SmartRecord>>;
        fn smart_history(&self, disk: u32, limit: usize) -> Result<Vec<SmartRecord>>;
        fn webhook_add(&self, url: &str, bucket: &str, key: Option<&str>, prefix: &str, now_ms: u64) -> Result<WebhookRecord>;
        fn webhooks(&self) -> Result<Vec<WebhookRecord>>;
        fn webhook_remove(&self, id: u64) -> Result<bool>;
        fn webhook_attempt(&self, id: u64, error: Option<&str>, delivered_ms: Option<u64>) -> Result<bool>;
        // health
        fn ping(&self) -> Result<()>;
        fn stats(&self) -> Result<CatalogStats>;
        fn check(&self) -> Result<Vec<String>>;
    }
}
