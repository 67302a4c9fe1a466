//! What archive users expect besides bytes (`docs/archive.md`): versions, Object Lock, tags, lifecycle, storage
//! classes and restores, batch restores scheduled by disk, and dataset queries.
//!
//! - **Object Lock** is decided in one place, `ObjectLock::may_delete` (permafrost-catalog), which every catalog
//!   transaction that removes a version applies; [`Store::may_delete`] asks the same question without deleting
//!   (for the mount and the CLI).
//! - **Lifecycle** is catalog only: each current version carries the expiry its bucket's rules give it; readers
//!   stop seeing it at that instant, and the lifecycle thread turns it into a delete (a delete marker in
//!   versioned buckets) soon after; noncurrent versions, lone delete markers and old multipart uploads go the
//!   same way. No disk is woken: the bytes are reclaimed by garbage collection, which only frees catalog ranges
//!   and cache files. A lifecycle "day" is `StoreConfig::lifecycle_day_ms` (shorter in tests).
//! - **Restores** copy a version's stored bytes from the grid into the cache and pin them there for the
//!   requested days (the expiry rounded up to the next midnight UTC, as S3 does). The pending restores are
//!   rows of the catalog, so the queue survives a restart. The restore thread groups them by grid bucket (one
//!   data disk each) and reads a disk's group when it is due: at once if one of them is Expedited, once the
//!   oldest Standard one waited `[store.restore] standard_window_ms`, at the nightly hour (or after
//!   `bulk_wait_ms_max`) for Bulk, and whenever the disk spins for another reason. It keeps that disk spinning
//!   for the whole group (one spin-up, attributed as "restore of BUCKET/KEY"), reads the contents in on-disk
//!   order (first extent offset), and marks each restore done as soon as its content is in the cache, so a
//!   restart resumes with the rest.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use permafrost_catalog::{
    now_ms, restore_expiry_ms, AttributeChange, BucketArchive, ContentId, ContentPart,
    ContentRecord, DeleteOutcome, ListQuery, ObjectRecord, RestoreOutcome, RestoreRecord,
    RestoreTerms, RestoreTier, StorageClass, VersionPage, VersionQuery,
};
use permafrost_disk::power::{PowerState, WakeKind, WakeReason};
use serde::Serialize;

use crate::cache::{Cache, CONTENTS_DIR};
use crate::read::ObjectReader;
use crate::store::{ByteRange, Inner, ObjectInfo, ReplaceMetadata};
use crate::{Encoding, Result, Store, StoreError};

/// Pending restores taken per pass of the restore thread.
const RESTORE_BATCH_MAX: usize = 100_000;
/// Expirations per catalog transaction of the lifecycle thread.
const EXPIRE_BATCH_MAX: usize = 1000;
/// Buffer of a restore copy.
const RESTORE_BUFFER_BYTES: usize = 1 << 20;
/// Restore events kept for [`Store::restore_events_since`].
pub const RESTORE_EVENTS_MAX: usize = 4096;
/// The restore thread plans new restores (other than Expedited ones, which wake it) at most this often.
const RESTORE_POLL_MS: u64 = 1000;
/// While restores wait, the thread looks this often whether one of their disks spins for another reason.
const SPINNING_POLL_MS: u64 = 50;

/// S3's event name when a restore is accepted.
pub const RESTORE_POST_EVENT: &str = "s3:ObjectRestore:Post";
/// S3's event name when a restored copy is in the cache.
pub const RESTORE_COMPLETED_EVENT: &str = "s3:ObjectRestore:Completed";

/// A restore was accepted (`s3:ObjectRestore:Post`) or its copy is in the cache (`s3:ObjectRestore:Completed`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreEvent {
    /// Numbers the restore events of this server's life, from 1.
    pub seq: u64,
    /// [`RESTORE_POST_EVENT`] or [`RESTORE_COMPLETED_EVENT`].
    pub name: &'static str,
    pub at_ms: u64,
    pub bucket: String,
    pub key: String,
    pub version_id: String,
    pub tier: RestoreTier,
    /// When the restored copy expires (`Completed` only).
    pub expiry_ms: Option<u64>,
}

/// The restore state of a version, for `x-amz-restore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestoreInfo {
    pub ongoing: bool,
    /// When the restored copy may leave the cache (once done).
    pub expiry_ms: Option<u64>,
}

/// Progress of the restores the restore thread works on (and of the last batch).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RestoreBatch {
    /// Restores requested by the last `restore_prefix` (0 for single restores).
    pub requested: u64,
    /// Restores done since the last `restore_prefix`.
    pub done: u64,
    /// Restores still waiting.
    pub pending: u64,
    /// Bytes read from the grid for them.
    pub bytes_read: u64,
    /// Grid buckets (data disks) the current pass reads, in the order it reads them.
    pub grid_buckets: Vec<u32>,
    /// Grid bucket being read now.
    pub reading_grid_bucket: Option<u32>,
    /// The last error, if a restore failed (it stays pending and is retried).
    pub last_error: Option<String>,
    /// Grid buckets whose restores wait for their tier's time (Standard window, Bulk night) or for their disk
    /// to spin for another reason.
    #[serde(default)]
    pub waiting_grid_buckets: Vec<u32>,
    /// When the first of the waiting grid buckets is due (ms since the epoch).
    #[serde(default)]
    pub next_read_ms: Option<u64>,
}

/// Which datasets [`Store::datasets`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatasetFilter {
    /// Only datasets whose objects (or bucket) carry this tag.
    pub tag: Option<(String, String)>,
    /// Only datasets written to at or after this time…
    pub written_after_ms: Option<u64>,
    /// … and at or before this time.
    pub written_before_ms: Option<u64>,
    /// Only datasets of this bucket.
    pub bucket: Option<String>,
}

/// One dataset (an S3 bucket and key prefix) as `permafrost datasets` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DatasetSummary {
    pub dataset: String,
    pub bucket: String,
    pub prefix: String,
    pub objects: u64,
    pub size_bytes: u64,
    pub stored_bytes: u64,
    pub first_write_ms: u64,
    pub last_write_ms: u64,
    /// Tags of its objects and of its bucket.
    pub tags: Vec<(String, String)>,
    /// The earliest lifecycle expiry of its objects.
    pub expires_ms: Option<u64>,
    /// `persisted` when every object is, else `N of M persisted`.
    pub persistence: String,
    /// The grid bucket (data disk) its data goes to.
    pub grid_bucket: Option<u32>,
}

/// State of the restore thread, shared with the API.
#[derive(Default)]
pub(crate) struct Restores {
    /// Held while a batch is being requested and while a pass runs, so a pass never sees half a batch.
    pub lock: Mutex<()>,
    pub progress: Mutex<RestoreBatch>,
    pub wake: Mutex<bool>,
    pub wake_cv: parking_lot::Condvar,
    /// Raised by every accepted request: the thread plans anew when it moved.
    pub requests: AtomicU64,
    /// Recent restore events, oldest first, at most [`RESTORE_EVENTS_MAX`].
    events: Mutex<VecDeque<RestoreEvent>>,
    event_seq: AtomicU64,
}

impl Restores {
    pub(crate) fn wake(&self) {
        *self.wake.lock() = true;
        self.wake_cv.notify_all();
    }

    /// A restore was accepted: an Expedited one is planned at once, others at the thread's next look.
    fn requested(&self, tier: RestoreTier) {
        self.requests.fetch_add(1, Ordering::SeqCst);
        if tier == RestoreTier::Expedited {
            self.wake();
        }
    }

    fn event(&self, name: &'static str, record: &RestoreRecord, expiry_ms: Option<u64>) {
        let mut events = self.events.lock();
        if events.len() == RESTORE_EVENTS_MAX {
            events.pop_front();
        }
        events.push_back(RestoreEvent {
            seq: self.event_seq.fetch_add(1, Ordering::SeqCst) + 1,
            name,
            at_ms: now_ms(),
            bucket: record.bucket.clone(),
            key: record.key.clone(),
            version_id: record.version_id.clone(),
            tier: record.tier,
            expiry_ms,
        });
    }
}

impl Inner {
    /// The terms of a restore of `days` lifecycle days at `tier`.
    fn restore_terms(&self, days: u32, tier: RestoreTier) -> RestoreTerms {
        RestoreTerms {
            duration_ms: u64::from(days.max(1)) * self.config.lifecycle_day_ms,
            tier,
            day_ms: self.config.lifecycle_day_ms,
        }
    }
}

fn version_text(version_id: Option<&str>) -> String {
    version_id.map_or_else(String::new, |v| format!(" version {v}"))
}

impl Store {
    // ---------------------------------------------------------------- bucket configuration

    /// A bucket's versioning, Object Lock, lifecycle and tags.
    pub fn bucket_archive(&self, bucket: &str) -> Result<BucketArchive> {
        Ok(self.head_bucket(bucket)?.archive)
    }

    /// Replace a bucket's versioning, Object Lock, lifecycle and tags (`InvalidBucketState` when S3's rules
    /// forbid the change). A lifecycle's day length is the store's `lifecycle_day_ms`.
    pub fn set_bucket_archive(&self, bucket: &str, mut archive: BucketArchive) -> Result<()> {
        if let Some(lifecycle) = archive.lifecycle.as_mut() {
            lifecycle.day_ms = self.inner().config.lifecycle_day_ms;
        }
        Ok(self.inner().catalog.set_bucket_archive(bucket, &archive)?)
    }

    // ---------------------------------------------------------------- versions

    pub(crate) fn version_records(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<(ObjectRecord, ContentRecord)> {
        let inner = self.inner();
        let Some(version_id) = version_id else {
            return match inner.catalog.get_object(bucket, key)? {
                Some(found) => Ok(found),
                None => {
                    self.head_bucket(bucket)?;
                    Err(StoreError::NoSuchKey {
                        bucket: bucket.to_string(),
                        key: key.to_string(),
                    })
                }
            };
        };
        match inner.catalog.get_object_version(bucket, key, version_id)? {
            Some((record, Some(content))) if record.object.is_some() => {
                Ok((record.object.expect("checked"), content))
            }
            Some(_) => Err(StoreError::MethodNotAllowed(format!(
                "{bucket}/{key} version {version_id} is a delete marker"
            ))),
            None => {
                self.head_bucket(bucket)?;
                Err(StoreError::NoSuchVersion(format!(
                    "{bucket}/{key} has no version {version_id}"
                )))
            }
        }
    }

    /// What the catalog knows of a version (the current one without `version_id`); never touches a disk.
    pub fn head_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<ObjectInfo> {
        let (object, content) = self.version_records(bucket, key, version_id)?;
        self.inner().object_info(&object, &content)
    }

    /// Open a version for reading (see [`Store::open_object`]). A GLACIER version whose content is not in the
    /// cache and that is not restored is `InvalidObjectState`: reading it would wake a disk.
    pub fn open_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        range: Option<ByteRange>,
        accept_encoding: Option<Encoding>,
    ) -> Result<(ObjectInfo, ObjectReader)> {
        let (object, content) = self.version_records(bucket, key, version_id)?;
        let parts = self.inner().parts_of(&content)?;
        self.open_records(
            (bucket, key, version_id),
            &object,
            &content,
            parts,
            range,
            accept_encoding,
        )
    }

    /// [`Store::open_version`] of a version whose records are read already (`parts`: its content's parts).
    pub(crate) fn open_records(
        &self,
        (bucket, key, version_id): (&str, &str, Option<&str>),
        object: &ObjectRecord,
        content: &ContentRecord,
        parts: Vec<(ContentPart, ContentRecord)>,
        range: Option<ByteRange>,
        accept_encoding: Option<Encoding>,
    ) -> Result<(ObjectInfo, ObjectReader)> {
        let inner = self.inner();
        let info = ObjectInfo::from_records(object, content, &parts);
        if object.attributes.storage_class == StorageClass::Glacier && !info.in_cache {
            let restored = self.restore_info(&info)?.is_some_and(|r| !r.ongoing);
            if !restored {
                return Err(StoreError::InvalidObjectState(format!(
                    "{bucket}/{key}{} is in the GLACIER storage class and not restored: restore it first \
                     (RestoreObject, or `permafrost restore {bucket}/{key}`)",
                    version_text(version_id)
                )));
            }
        }
        let read = crate::prefetch::read_begins(inner, object, content, &parts);
        let reader = ObjectReader::open(
            inner,
            content,
            parts,
            range,
            accept_encoding,
            false,
            &object.checksums,
        )?;
        read.opened(inner);
        inner.touch(content.id);
        Ok((info, reader))
    }

    /// The delete marker a read of `bucket/key` ran into, if it did: its newest version (without `version_id`)
    /// or version `version_id` is one. `(version id, last modified)`, for the `x-amz-delete-marker` answers of
    /// S3 (catalog only).
    pub fn delete_marker(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<Option<(String, u64)>> {
        let catalog = &self.inner().catalog;
        let version = match version_id {
            Some(v) => catalog.get_object_version(bucket, key, v)?.map(|(r, _)| r),
            None => {
                let query = VersionQuery {
                    prefix: key.to_string(),
                    max_keys: 1,
                    ..Default::default()
                };
                // A key's versions come first under its own prefix, newest first.
                catalog
                    .list_object_versions(bucket, &query)?
                    .versions
                    .into_iter()
                    .next()
                    .filter(|v| v.key == key && v.is_latest)
            }
        };
        Ok(version
            .filter(|v| v.object.is_none())
            .map(|v| (v.version_id, v.last_modified_ms)))
    }

    /// S3 DeleteObject: without `version_id` the current version goes (a delete marker in versioned buckets);
    /// with it, that version, if Object Lock allows (`AccessDenied` otherwise).
    pub fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
    ) -> Result<DeleteOutcome> {
        Ok(self.inner().catalog.delete_version(
            bucket,
            key,
            version_id,
            bypass_governance,
            now_ms(),
        )?)
    }

    /// Whether a delete would be allowed now, by the rule every delete obeys (`ObjectLock::may_delete`):
    /// `Ok(())`, or `AccessDenied` saying why. Deleting the current version of a versioned bucket only adds a
    /// delete marker, which is always allowed; for unversioned buckets the current version itself is checked.
    pub fn may_delete(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
    ) -> Result<()> {
        let archive = self.bucket_archive(bucket)?;
        let target = match (version_id, archive.versioning) {
            (Some(v), _) => Some(v.to_string()),
            (None, permafrost_catalog::Versioning::Enabled) => None,
            (None, _) => self
                .inner()
                .catalog
                .get_object(bucket, key)?
                .map(|(o, _)| o.version_id)
                .filter(|v| v == permafrost_catalog::NULL_VERSION),
        };
        let Some(v) = target else { return Ok(()) };
        match self.inner().catalog.get_object_version(bucket, key, &v)? {
            Some((record, _)) => match record.object {
                Some(o) => o
                    .attributes
                    .lock
                    .may_delete(now_ms(), bypass_governance)
                    .map_err(|e| {
                        StoreError::AccessDenied(format!("{bucket}/{key} version {v}: {e}"))
                    }),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// S3 ListObjectVersions (catalog only).
    pub fn list_object_versions(&self, bucket: &str, query: &VersionQuery) -> Result<VersionPage> {
        Ok(self.inner().catalog.list_object_versions(bucket, query)?)
    }

    /// Change tags, retention or legal hold of a version; returns its version id.
    pub fn change_attributes(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        change: &AttributeChange,
        bypass_governance: bool,
    ) -> Result<String> {
        if let AttributeChange::Tags(tags) = change {
            validate_tags(tags)?;
        }
        Ok(self.inner().catalog.change_attributes(
            bucket,
            key,
            version_id,
            change,
            bypass_governance,
            now_ms(),
        )?)
    }

    /// Copy a version (the current one without `src_version`) to `dst_bucket/dst_key` as a new version there
    /// (catalog only: a new reference to the same content). `metadata = None` copies user metadata and content
    /// type; `attributes = None` copies headers, tags and storage class (never the source's lock: the
    /// destination bucket's default retention applies).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_version(
        &self,
        src_bucket: &str,
        src_key: &str,
        src_version: Option<&str>,
        dst_bucket: &str,
        dst_key: &str,
        metadata: Option<ReplaceMetadata>,
        attributes: Option<permafrost_catalog::ObjectAttributes>,
    ) -> Result<ObjectInfo> {
        let always = &permafrost_catalog::WriteCondition::Always;
        self.copy_version_if(
            (src_bucket, src_key, src_version),
            (dst_bucket, dst_key),
            metadata,
            attributes,
            always,
        )
    }

    /// [`Store::copy_version`] as a conditional write (CopyObject with `If-None-Match: *` or `If-Match`): the
    /// copy is made only if `condition` holds for the target key's current version, checked in the copy's
    /// transaction; otherwise `PreconditionFailed` (or `NoSuchKey`) and nothing changes.
    pub fn copy_version_if(
        &self,
        (src_bucket, src_key, src_version): (&str, &str, Option<&str>),
        (dst_bucket, dst_key): (&str, &str),
        metadata: Option<ReplaceMetadata>,
        attributes: Option<permafrost_catalog::ObjectAttributes>,
        condition: &permafrost_catalog::WriteCondition,
    ) -> Result<ObjectInfo> {
        crate::store::validate_key(dst_key)?;
        let (source, _) = self.version_records(src_bucket, src_key, src_version)?;
        let inner = self.inner();
        let (user_metadata, content_type) =
            metadata.unwrap_or((source.user_metadata.clone(), source.content_type.clone()));
        let mut attributes = attributes.unwrap_or_else(|| source.attributes.clone());
        if attributes.lock == source.attributes.lock {
            attributes.lock = Default::default();
        }
        let object = ObjectRecord {
            bucket: dst_bucket.to_string(),
            key: dst_key.to_string(),
            last_modified_ms: now_ms(),
            user_metadata,
            content_type,
            dataset: inner.dataset_for(dst_bucket, dst_key, &attributes.tags),
            attributes,
            ..source
        };
        let copy = inner.catalog.copy_object_if(
            src_bucket,
            src_key,
            src_version,
            &object,
            now_ms(),
            condition,
        )?;
        let content = inner.catalog.get_content(&copy.content)?.ok_or_else(|| {
            StoreError::Internal(format!("content of {dst_bucket}/{dst_key} vanished"))
        })?;
        inner.object_info(&copy, &content)
    }

    // ---------------------------------------------------------------- restores

    /// S3 RestoreObject: a copy of the version in the cache, pinned for `days` lifecycle days once done, read
    /// when its `tier` says (see the module doc). A pending restore asked for at a faster tier takes it
    /// (`Upgraded`).
    pub fn restore_object(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        days: u32,
        tier: RestoreTier,
    ) -> Result<RestoreOutcome> {
        let inner = self.inner();
        let terms = inner.restore_terms(days, tier);
        let (outcome, record) =
            inner
                .catalog
                .request_restore(bucket, key, version_id, &terms, now_ms())?;
        match outcome {
            RestoreOutcome::Started => {
                inner.restores.event(RESTORE_POST_EVENT, &record, None);
                inner.restores.requested(record.tier);
            }
            RestoreOutcome::Upgraded => inner.restores.requested(record.tier),
            RestoreOutcome::Extended | RestoreOutcome::InProgress => {}
        }
        Ok(outcome)
    }

    /// Restore events after `seq` (`s3:ObjectRestore:Post` when a restore is accepted, `…:Completed` when its
    /// copy is in the cache), oldest first; the last [`RESTORE_EVENTS_MAX`] are kept.
    pub fn restore_events_since(&self, seq: u64) -> Vec<RestoreEvent> {
        let events = self.inner().restores.events.lock();
        events.iter().filter(|e| e.seq > seq).cloned().collect()
    }

    /// The restore state of a version (`None`: never restored, or its copy expired).
    pub fn restore_info(&self, info: &ObjectInfo) -> Result<Option<RestoreInfo>> {
        Ok(self
            .inner()
            .catalog
            .restore_of(&info.bucket, &info.key, &info.version_id)?
            .map(|r| RestoreInfo {
                ongoing: r.done_ms.is_none(),
                expiry_ms: r.expiry_ms,
            }))
    }

    /// The restore state of a version known by its version id, from the catalog alone (listings).
    pub fn restore_state(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<Option<RestoreInfo>> {
        Ok(self
            .inner()
            .catalog
            .restore_of(bucket, key, version_id)?
            .map(|r| RestoreInfo {
                ongoing: r.done_ms.is_none(),
                expiry_ms: r.expiry_ms,
            }))
    }

    /// Restore every current object under `bucket/prefix` for `days` lifecycle days at `tier`: all requests
    /// first, then the restore thread reads them grouped by disk, each disk once, in on-disk order, when the
    /// tier says (an Expedited batch at once). Returns at once; [`Store::restore_progress`] tells how far it got.
    pub fn restore_prefix(
        &self,
        bucket: &str,
        prefix: &str,
        days: u32,
        tier: RestoreTier,
    ) -> Result<RestoreBatch> {
        let inner = self.inner();
        let terms = inner.restore_terms(days, tier);
        let _batch = inner.restores.lock.lock();
        let mut requested = 0u64;
        let mut start_after: Option<String> = None;
        loop {
            let page = inner.catalog.list_objects(
                bucket,
                &ListQuery {
                    prefix: prefix.to_string(),
                    delimiter: None,
                    start_after: start_after.clone(),
                    max_keys: 1000,
                },
            )?;
            // One catalog transaction per page.
            let versions: Vec<(String, String)> = page
                .objects
                .iter()
                .map(|o| (o.key.clone(), o.version_id.clone()))
                .collect();
            let answers = inner
                .catalog
                .request_restores(bucket, &versions, &terms, now_ms())?;
            for (outcome, record) in answers.into_iter().flatten() {
                if outcome == RestoreOutcome::Started {
                    inner.restores.event(RESTORE_POST_EVENT, &record, None);
                }
                if outcome != RestoreOutcome::InProgress {
                    requested += 1;
                }
            }
            if !page.is_truncated {
                break;
            }
            start_after = page.next_start_after;
        }
        {
            let mut progress = inner.restores.progress.lock();
            *progress = RestoreBatch {
                requested,
                pending: inner.catalog.pending_restores(RESTORE_BATCH_MAX)?.len() as u64,
                ..Default::default()
            };
        }
        inner.restores.requested(tier);
        Ok(inner.restores.progress.lock().clone())
    }

    /// Progress of the restores (see [`RestoreBatch`]).
    pub fn restore_progress(&self) -> Result<RestoreBatch> {
        let inner = self.inner();
        let mut progress = inner.restores.progress.lock();
        progress.pending = inner.catalog.pending_restores(RESTORE_BATCH_MAX)?.len() as u64;
        Ok(progress.clone())
    }

    /// Run every pending restore now, whatever its tier (an operator's command), and return when they are done.
    pub fn run_restores(&self) -> Result<RestoreBatch> {
        restore_pass(self.inner(), true)?;
        self.restore_progress()
    }

    // ---------------------------------------------------------------- datasets

    /// Datasets (bucket + prefix) with their size, object count, write times, tags, expiry, persistence and
    /// disk, answered from the catalog alone.
    pub fn datasets(&self, filter: &DatasetFilter) -> Result<Vec<DatasetSummary>> {
        let inner = self.inner();
        let records: BTreeMap<String, permafrost_catalog::DatasetRecord> = inner
            .catalog
            .datasets()?
            .into_iter()
            .map(|d| (d.id.clone(), d))
            .collect();
        let buckets: BTreeMap<String, BucketArchive> = inner
            .catalog
            .list_buckets()?
            .into_iter()
            .map(|b| (b.name, b.archive))
            .collect();
        let mut out = Vec::new();
        for s in inner.catalog.dataset_stats()? {
            let record = records.get(&s.dataset);
            let bucket = record
                .map(|r| r.bucket.clone())
                .unwrap_or_else(|| s.dataset.split('/').next().unwrap_or("").to_string());
            let prefix = s
                .dataset
                .strip_prefix(&bucket)
                .unwrap_or("")
                .trim_start_matches('/')
                .to_string();
            let mut tags = s.tags.clone();
            if let Some(archive) = buckets.get(&bucket) {
                tags.extend(archive.tags.iter().cloned());
            }
            tags.sort();
            tags.dedup();
            let keep = filter.bucket.as_ref().is_none_or(|b| *b == bucket)
                && filter.tag.as_ref().is_none_or(|t| tags.contains(t))
                && filter.written_after_ms.is_none_or(|t| s.last_write_ms >= t)
                && filter
                    .written_before_ms
                    .is_none_or(|t| s.first_write_ms <= t);
            if !keep {
                continue;
            }
            out.push(DatasetSummary {
                persistence: if s.persisted_objects == s.objects {
                    "persisted".into()
                } else {
                    format!("{} of {} persisted", s.persisted_objects, s.objects)
                },
                grid_bucket: record.and_then(|r| r.grid_bucket),
                dataset: s.dataset,
                bucket,
                prefix,
                objects: s.objects,
                size_bytes: s.size_bytes,
                stored_bytes: s.stored_bytes,
                first_write_ms: s.first_write_ms,
                last_write_ms: s.last_write_ms,
                tags,
                expires_ms: s.expires_ms,
            });
        }
        Ok(out)
    }
}

/// S3's tag limits: at most 10 per object, keys up to 128 and values up to 256 characters, keys unique
/// (`InvalidTag` otherwise).
pub fn validate_tags(tags: &[(String, String)]) -> Result<()> {
    if tags.len() > 10 {
        return Err(StoreError::InvalidTag(format!(
            "{} tags: an object can have at most 10",
            tags.len()
        )));
    }
    for (i, (k, v)) in tags.iter().enumerate() {
        if k.is_empty() || k.chars().count() > 128 || v.chars().count() > 256 {
            return Err(StoreError::InvalidTag(format!(
                "tag {k:?}={v:?}: keys have 1 to 128 characters, values at most 256"
            )));
        }
        if k == crate::store::DATASET_TAG && v.trim_matches('/').is_empty() {
            return Err(StoreError::InvalidTag(format!(
                "tag {k:?} names the object's dataset and cannot be empty"
            )));
        }
        if tags[..i].iter().any(|(other, _)| other == k) {
            return Err(StoreError::InvalidTag(format!(
                "tag key {k:?} appears twice"
            )));
        }
    }
    Ok(())
}

/// The lifecycle thread: expire what the rules say, release restored copies whose days are over, abort old
/// uploads. Catalog only.
pub(crate) fn lifecycle_loop(inner: &Arc<Inner>) {
    let interval_ms = (inner.config.lifecycle_day_ms / 8).clamp(100, 60_000);
    let mut last = std::time::Instant::now();
    while !inner.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        if (last.elapsed().as_millis() as u64) < interval_ms {
            continue;
        }
        last = std::time::Instant::now();
        if let Err(e) = lifecycle_pass(inner) {
            inner.record_error(format!("lifecycle: {e}"));
        }
    }
}

/// One lifecycle pass (see [`lifecycle_loop`]).
pub(crate) fn lifecycle_pass(inner: &Inner) -> Result<u64> {
    let now = now_ms();
    let mut total = 0;
    loop {
        let n = inner.catalog.expire_objects(now, EXPIRE_BATCH_MAX)?;
        total += n;
        if n < EXPIRE_BATCH_MAX as u64 {
            break;
        }
    }
    total += inner.catalog.expire_noncurrent(now, usize::MAX)?;
    inner.catalog.expire_restores(now)?;
    // Multipart uploads a rule says to abort.
    let mut lifecycles: BTreeMap<String, Option<permafrost_catalog::Lifecycle>> = BTreeMap::new();
    for upload in inner.catalog.all_uploads()? {
        let lifecycle = match lifecycles.get(&upload.bucket) {
            Some(l) => l.clone(),
            None => {
                let l = inner
                    .catalog
                    .get_bucket(&upload.bucket)?
                    .and_then(|b| b.archive.lifecycle);
                lifecycles.insert(upload.bucket.clone(), l.clone());
                l
            }
        };
        let Some(lifecycle) = lifecycle else { continue };
        if let Some(days) = lifecycle.abort_upload_days(&upload.key) {
            if lifecycle.days_after(upload.created_ms, days) <= now {
                match inner.catalog.remove_upload(&upload.upload_id) {
                    Ok(work) => {
                        inner.run_work(work);
                        total += 1;
                    }
                    Err(permafrost_catalog::CatalogError::NoSuchUpload(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(total)
}

/// What a pass of the restore thread left waiting.
#[derive(Debug, Default)]
struct Waiting {
    /// When the first waiting disk is due.
    next_due_ms: Option<u64>,
    /// Data disks with restores waiting: read early when one of them spins for another reason.
    disks: Vec<usize>,
    /// How long planning took (reading not included).
    plan_took: Duration,
}

fn spinning(state: PowerState) -> bool {
    state != PowerState::Off
}

/// The restore thread: a pass when an Expedited restore arrives, when new restores arrived (at most every
/// [`RESTORE_POLL_MS`]), when a waiting disk is due or starts spinning for another reason (looked at every
/// [`SPINNING_POLL_MS`]); the first pass resumes what the catalog holds from before a restart.
pub(crate) fn restore_loop(inner: &Arc<Inner>) {
    let mut seen_requests: Option<u64> = None;
    let mut waiting = Waiting::default();
    let mut last_pass = std::time::Instant::now();
    // How long the last pass's planning took: passes for new requests come at most every four times that (at
    // most a fifth of the thread's time goes to planning a long queue again and again while requests arrive).
    let mut last_plan_took = Duration::ZERO;
    while !inner.stop.load(Ordering::SeqCst) {
        let woken = {
            let mut woken = inner.restores.wake.lock();
            if !*woken {
                let poll_ms = if waiting.disks.is_empty() {
                    RESTORE_POLL_MS
                } else {
                    SPINNING_POLL_MS
                };
                let until_due = waiting
                    .next_due_ms
                    .map_or(poll_ms, |t| t.saturating_sub(now_ms()));
                inner.restores.wake_cv.wait_for(
                    &mut woken,
                    Duration::from_millis(until_due.clamp(10, poll_ms)),
                );
            }
            std::mem::take(&mut *woken)
        };
        if inner.stop.load(Ordering::SeqCst) {
            return;
        }
        let requests = inner.restores.requests.load(Ordering::SeqCst);
        let power = inner.engine.power();
        let plan = woken
            || (seen_requests != Some(requests)
                && last_pass.elapsed()
                    >= Duration::from_millis(RESTORE_POLL_MS).max(last_plan_took * 4))
            || waiting.next_due_ms.is_some_and(|t| t <= now_ms())
            || waiting.disks.iter().any(|&d| spinning(power.state(d)));
        if !plan {
            continue;
        }
        seen_requests = Some(requests);
        last_pass = std::time::Instant::now();
        match restore_pass(inner, false) {
            Ok(w) => {
                inner.record_round_ok();
                last_plan_took = w.plan_took;
                waiting = w;
            }
            Err(e) => {
                inner.restores.progress.lock().last_error = Some(e.to_string());
                inner.record_failure("restore", &e);
                // Retried at the next look.
                waiting = Waiting {
                    next_due_ms: Some(now_ms() + RESTORE_POLL_MS),
                    ..Waiting::default()
                };
            }
        }
    }
}

/// The restores of one grid bucket (one data disk) in a pass.
struct DiskGroup {
    /// (first extent offset, restored content, content to read: itself or one of its parts)
    contents: Vec<(u64, ContentId, ContentRecord)>,
    /// When the group is due: the earliest due time of its restores.
    due_ms: u64,
    /// The restore the spin-up is attributed to (the one due first) and how many restores the group serves.
    first: (String, String),
    restores: usize,
    /// Whether one of its restores is Expedited: such groups are read before the others.
    expedited: bool,
}

/// Finish the restores of a content whose bytes are in the cache now: done in the catalog, one
/// `s3:ObjectRestore:Completed` event each.
fn finish(inner: &Inner, id: &ContentId, records: &[RestoreRecord]) -> Result<()> {
    let now = now_ms();
    let day_ms = inner.config.lifecycle_day_ms;
    // Under the progress lock, so that `pending` and `done` are read consistently.
    let mut progress = inner.restores.progress.lock();
    inner.catalog.finish_restores(id, now, day_ms)?;
    progress.done += records.len() as u64;
    for r in records {
        let expiry = restore_expiry_ms(now, r.duration_ms, day_ms);
        inner
            .restores
            .event(RESTORE_COMPLETED_EVENT, r, Some(expiry));
        // One line per completed restore for operators (target `permafrost_store::restore`, on by default).
        tracing::info!(
            target: "permafrost_store::restore",
            "restore of {}/{} (version {}, {}) completed after {} ms; the copy stays until {}",
            r.bucket,
            r.key,
            r.version_id,
            r.tier,
            now.saturating_sub(r.requested_ms),
            permafrost_catalog::iso8601_utc(expiry, false)
        );
    }
    Ok(())
}

/// Plan the pending restores and do those that are due (all of them with `force`): contents already in the
/// cache at once; the others grouped by grid bucket, and each due group with one disk spun up and held up for
/// it, contents read in on-disk order. Returns what is left waiting.
fn restore_pass(inner: &Arc<Inner>, force: bool) -> Result<Waiting> {
    let _pass = inner.restores.lock.lock();
    let planning = std::time::Instant::now();
    let pending = inner.catalog.pending_restores(RESTORE_BATCH_MAX)?;
    if pending.is_empty() {
        let mut progress = inner.restores.progress.lock();
        progress.waiting_grid_buckets.clear();
        progress.next_read_ms = None;
        return Ok(Waiting::default());
    }
    let mut by_content: BTreeMap<ContentId, Vec<RestoreRecord>> = BTreeMap::new();
    for r in pending {
        by_content.entry(r.content).or_default().push(r);
    }
    let mut by_disk: BTreeMap<u32, DiskGroup> = BTreeMap::new();
    // restored content -> contents still to read for it
    let mut waiting: BTreeMap<ContentId, usize> = BTreeMap::new();
    let restore_config = &inner.config.restore;
    for (id, records) in &by_content {
        let Some(content) = inner.catalog.get_content(id)? else {
            // Collected meanwhile (its versions were deleted): nothing to restore.
            inner
                .catalog
                .finish_restores(id, now_ms(), inner.config.lifecycle_day_ms)?;
            continue;
        };
        // What has to be in the cache: the content, or each part of a part list.
        let needed: Vec<ContentRecord> = match inner.parts_of(&content)? {
            parts if parts.is_empty() => vec![content],
            parts => parts.into_iter().map(|(_, c)| c).collect(),
        };
        let missing: Vec<ContentRecord> = needed
            .into_iter()
            .filter(|c| c.cache_path.is_none())
            .collect();
        if missing.is_empty() {
            finish(inner, id, records)?;
            continue;
        }
        let (due_ms, first) = records
            .iter()
            .map(|r| (restore_config.due_ms(r.tier, r.requested_ms), r))
            .min_by_key(|(due, _)| *due)
            .expect("a content has at least one pending restore");
        waiting.insert(*id, missing.len());
        for c in missing {
            let segments = inner.catalog.segments(&c.id)?;
            let (Some(first_segment), Some(grid_bucket)) = (segments.first(), c.grid_bucket) else {
                return Err(StoreError::Internal(format!(
                    "content {} is neither in the cache nor on the grid",
                    c.id
                )));
            };
            let offset = first_segment.extent.offset + first_segment.segment.offset_in_payload;
            let group = by_disk.entry(grid_bucket).or_insert_with(|| DiskGroup {
                contents: Vec::new(),
                due_ms,
                first: (first.bucket.clone(), first.key.clone()),
                restores: 0,
                expedited: false,
            });
            group.expedited |= records.iter().any(|r| r.tier == RestoreTier::Expedited);
            if due_ms < group.due_ms {
                group.due_ms = due_ms;
                group.first = (first.bucket.clone(), first.key.clone());
            }
            group.restores += records.len();
            group.contents.push((offset, *id, c));
        }
    }
    // Due groups, those with an Expedited restore first, then the earliest due; the others wait unless their disk
    // spins anyway.
    let now = now_ms();
    let power = inner.engine.power();
    let geometry = inner.engine.geometry();
    let mut due: Vec<(u64, u32, DiskGroup)> = Vec::new();
    let mut left = Waiting::default();
    let mut waiting_grid_buckets = Vec::new();
    for (grid_bucket, group) in by_disk {
        let disk = geometry.bucket_disk(grid_bucket as usize);
        if force || group.due_ms <= now || spinning(power.state(disk)) {
            due.push((group.due_ms, grid_bucket, group));
        } else {
            left.next_due_ms = Some(
                left.next_due_ms
                    .map_or(group.due_ms, |t| t.min(group.due_ms)),
            );
            left.disks.push(disk);
            waiting_grid_buckets.push(grid_bucket);
        }
    }
    left.plan_took = planning.elapsed();
    due.sort_by_key(|(due_ms, grid_bucket, group)| (!group.expedited, *due_ms, *grid_bucket));
    {
        let mut progress = inner.restores.progress.lock();
        if !due.is_empty() {
            progress.grid_buckets = due.iter().map(|(_, g, _)| *g).collect();
        }
        progress.waiting_grid_buckets = waiting_grid_buckets;
        progress.next_read_ms = left.next_due_ms;
    }
    for (_, grid_bucket, mut group) in due {
        if !force && !group.expedited && *inner.restores.wake.lock() {
            // An Expedited restore arrived: plan again now rather than make it wait behind these groups (they
            // stay pending and are due in the next pass).
            left.next_due_ms = Some(now_ms());
            break;
        }
        group.contents.sort_by_key(|(offset, _, _)| *offset);
        inner.restores.progress.lock().reading_grid_bucket = Some(grid_bucket);
        // Hold the disk up for the whole group: one spin-up, however many contents, attributed to the restore
        // due first.
        let (bucket, key) = &group.first;
        let reason = match group.restores {
            0 | 1 => WakeReason::restore(bucket, key),
            n => WakeReason::about(
                WakeKind::Restore,
                format!("{bucket}/{key} and {} more", n - 1),
            ),
        };
        let _reason = reason.enter();
        let disk = geometry.bucket_disk(grid_bucket as usize);
        let _spinning = power.acquire(disk);
        for (_, restored, content) in group.contents {
            let bytes = copy_into_cache(inner, &content)?;
            let left = waiting.get_mut(&restored).expect("counted above");
            *left -= 1;
            inner.restores.progress.lock().bytes_read += bytes;
            if *left == 0 {
                finish(inner, &restored, &by_content[&restored])?;
            }
        }
    }
    inner.restores.progress.lock().reading_grid_bucket = None;
    Ok(left)
}

/// Read a content's stored bytes from the grid (verified) into a new cache file and give it to the content.
pub(crate) fn copy_into_cache(inner: &Arc<Inner>, content: &ContentRecord) -> Result<u64> {
    inner.reserve_cache(content.stored_bytes)?;
    copy_reserved(inner, content)
}

/// [`copy_into_cache`] into cache room the caller reserved (`stored_bytes` of it; released again when the
/// copy fails or the content has a cache file already). Returns the bytes copied (0: it had one).
pub(crate) fn copy_reserved(inner: &Arc<Inner>, content: &ContentRecord) -> Result<u64> {
    let relative = Cache::new_path(CONTENTS_DIR);
    let path = inner.cache.absolute(&relative);
    let result = (|| -> Result<()> {
        let mut source =
            crate::read::open_source(inner, content, true, crate::read::ExtentChecks::Full)?;
        let mut file = std::fs::File::create(&path)
            .map_err(|e| crate::io_error(format!("cannot create {}", path.display()), e))?;
        let mut buffer = vec![0u8; RESTORE_BUFFER_BYTES];
        let mut copied = 0u64;
        loop {
            let n = match source.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(StoreError::Internal(format!(
                        "restoring content {}: {e}",
                        content.id
                    )))
                }
            };
            file.write_all(&buffer[..n])
                .map_err(|e| crate::io_error(format!("cannot write {}", path.display()), e))?;
            copied += n as u64;
        }
        if copied != content.stored_bytes {
            return Err(StoreError::Internal(format!(
                "restoring content {}: read {copied} of {} stored bytes",
                content.id, content.stored_bytes
            )));
        }
        inner.cache.sync_file(&file, &path)
    })();
    let adopted = result.and_then(|()| {
        Ok(inner
            .catalog
            .recache_content(&content.id, &relative, now_ms())?)
    });
    if let Ok(true) = adopted {
        return Ok(content.stored_bytes);
    }
    let _ = inner.cache.remove(&relative);
    inner.cache.release(content.stored_bytes);
    adopted.map(|_| 0)
}
