//! [`Store`]: opening the data directory, buckets, objects, and the operator's operations.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use permafrost_catalog::{
    BucketRecord, BucketSettings, Catalog, CatalogStats, Compression, ContentId, ContentPart,
    ContentRecord, ContentState, Encoding, ListPage, ListQuery, NewContent, ObjectAttributes,
    ObjectRecord, StoredForm, WorkItem, WorkKind,
};
use permafrost_engine::{Engine, GridStatus, OpenOptions, WriteMode};

use crate::cache::Cache;
use crate::persist::Persister;
use crate::put::{PutHandle, PutOptions, Target};
use crate::read::ObjectReader;
use crate::{io_error, Result, StoreConfig, StoreError};

/// User metadata entry carrying the decoded length of pre-compressed uploads
/// (`x-amz-meta-permafrost-decoded-length`).
pub const DECODED_LENGTH_META: &str = "permafrost-decoded-length";
/// The object tag whose value names the object's dataset (`BUCKET/VALUE`) whatever its key: tags given when an
/// object is written choose its disk affinity (docs/archive.md "Tags").
pub const DATASET_TAG: &str = "permafrost-dataset";

/// Bucket names the store refuses (the service's own path prefix).
const RESERVED_BUCKETS: &[&str] = &["_permafrost"];
/// Longest key S3 accepts, in bytes.
pub(crate) const KEY_BYTES_MAX: usize = 1024;
/// Access times kept in memory before they are written to the catalog.
const ACCESS_BATCH_MAX: usize = 4096;

/// New metadata of a copy: `(user metadata, content type)` (S3 `x-amz-metadata-directive: REPLACE`).
pub type ReplaceMetadata = (Vec<(String, String)>, Option<String>);

/// A byte range of a GET, as S3 clients send it (`Range: bytes=…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `first-last`, both inclusive (`last` beyond the end is clamped).
    FromTo(u64, u64),
    /// `first-`: to the end.
    From(u64),
    /// `-n`: the last `n` bytes.
    Suffix(u64),
}

impl ByteRange {
    /// `(offset, length)` within an object of `size` bytes; `InvalidRange` when it selects nothing.
    pub fn resolve(self, size: u64) -> Result<(u64, u64)> {
        let invalid = || {
            StoreError::InvalidRange(format!(
                "range {self:?} is not satisfiable for an object of {size} bytes"
            ))
        };
        match self {
            ByteRange::FromTo(first, last) if first <= last && first < size => {
                Ok((first, last.min(size - 1) - first + 1))
            }
            ByteRange::From(first) if first < size => Ok((first, size - first)),
            ByteRange::Suffix(n) if n > 0 && size > 0 => {
                let n = n.min(size);
                Ok((size - n, n))
            }
            _ => Err(invalid()),
        }
    }
}

/// What HEAD (and GET) say about an object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ObjectInfo {
    pub bucket: String,
    pub key: String,
    /// Logical (decoded) size.
    pub size_bytes: u64,
    /// Size of the stored form.
    pub stored_bytes: u64,
    pub etag: String,
    pub last_modified_ms: u64,
    pub content_type: Option<String>,
    /// The encoding the object was uploaded with (`Identity` unless pre-compressed).
    pub content_encoding: Encoding,
    pub user_metadata: Vec<(String, String)>,
    /// Verified checksums the client sent (`crc32`, …, base64).
    pub checksums: Vec<(String, String)>,
    /// Persistence state (for the `x-amz-meta-permafrost-state`-style header and `wait_persisted`).
    pub state: ContentState,
    pub dataset: String,
    pub grid_bucket: Option<u32>,
    /// The content id (`hex(blake3):encoding`).
    pub content_id: String,
    /// S3 version id (`null` unless written while versioning was enabled).
    pub version_id: String,
    /// Headers, tags, storage class, Object Lock.
    pub attributes: ObjectAttributes,
    /// When the bucket's lifecycle expires it (`None` = never).
    pub expires_ms: Option<u64>,
    /// Whether the content has a copy in the cache (a read wakes no disk).
    pub in_cache: bool,
}

impl ObjectInfo {
    /// What an object is, from its records; `parts` are the parts of a part-list content (empty otherwise). A
    /// part-list object's state is the least advanced of its list and its parts (fully persisted only when every
    /// part is), its stored bytes are its parts' (their bytes as sent when the upload was pre-compressed).
    pub(crate) fn from_records(
        object: &ObjectRecord,
        content: &ContentRecord,
        parts: &[(ContentPart, ContentRecord)],
    ) -> ObjectInfo {
        let (stored_bytes, state) = if content.stored_form == StoredForm::Parts {
            let stored = if content.id.encoding == Encoding::Identity {
                parts.iter().map(|(_, c)| c.stored_bytes).sum()
            } else {
                parts.iter().map(|(p, _)| p.logical_bytes).sum()
            };
            let state = parts
                .iter()
                .map(|(_, c)| c.state)
                .fold(content.state, std::cmp::min);
            (stored, state)
        } else {
            (content.stored_bytes, content.state)
        };
        ObjectInfo {
            bucket: object.bucket.clone(),
            key: object.key.clone(),
            size_bytes: object.size_bytes,
            stored_bytes,
            etag: object.etag.clone(),
            last_modified_ms: object.last_modified_ms,
            content_type: object.content_type.clone(),
            content_encoding: content.id.encoding,
            user_metadata: object.user_metadata.clone(),
            checksums: object.checksums.clone(),
            state,
            dataset: object.dataset.clone(),
            grid_bucket: content.grid_bucket,
            content_id: content.id.to_string(),
            version_id: object.version_id.clone(),
            attributes: object.attributes.clone(),
            expires_ms: object.expires_ms,
            in_cache: if content.stored_form == StoredForm::Parts {
                parts.iter().all(|(_, c)| c.cache_path.is_some())
            } else {
                content.cache_path.is_some()
            },
        }
    }

    pub(crate) fn part(
        bucket: &str,
        key: &str,
        size_bytes: u64,
        etag: String,
        now_ms: u64,
    ) -> ObjectInfo {
        ObjectInfo {
            bucket: bucket.into(),
            key: key.into(),
            size_bytes,
            stored_bytes: size_bytes,
            etag,
            last_modified_ms: now_ms,
            content_type: None,
            content_encoding: Encoding::Identity,
            user_metadata: Vec::new(),
            checksums: Vec::new(),
            state: ContentState::Cached,
            dataset: String::new(),
            grid_bucket: None,
            content_id: String::new(),
            version_id: String::new(),
            attributes: ObjectAttributes::default(),
            expires_ms: None,
            in_cache: true,
        }
    }
}

/// A multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MultipartUpload {
    pub upload_id: String,
    pub bucket: String,
    pub key: String,
    pub created_ms: u64,
}

/// One uploaded part.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartInfo {
    pub part_number: u32,
    pub size_bytes: u64,
    pub etag: String,
    pub last_modified_ms: u64,
    /// The part's checksums `(name, base64)`: those it arrived with and the upload's algorithm.
    pub checksums: Vec<(String, String)>,
}

/// Progress of [`Store::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyProgress {
    pub objects_checked: u64,
    pub objects_total: u64,
    pub bytes_checked: u64,
}

/// What [`Store::verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct VerifyReport {
    pub objects_checked: u64,
    pub bytes_checked: u64,
    /// `bucket/key: error` of every object that did not read back verified.
    pub errors: Vec<String>,
}

/// What a bucket's uploads get: its [`BucketSettings`] with the store's defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EffectiveSettings {
    pub compression: Compression,
    /// Placement strategy name (`permafrost_policy::placement_names()`).
    pub placement: String,
    pub write_mode: WriteMode,
}

/// A bucket's settings as chosen (`None` = the default) and as in effect.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BucketSettingsReport {
    pub bucket: String,
    pub chosen: BucketSettings,
    pub effective: EffectiveSettings,
    /// Storage class of new versions uploaded without one (`STANDARD` or `GLACIER`; docs/archive.md).
    #[serde(default)]
    pub storage_class: permafrost_catalog::StorageClass,
}

/// The store's state for `permafrost status` and the admin API.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatusReport {
    pub cache_used_bytes: u64,
    pub cache_capacity_bytes: u64,
    /// `(grid bucket, stored bytes waiting in the cache)`.
    pub waiting_bytes_per_grid_bucket: Vec<(u32, u64)>,
    /// `(grid bucket, bytes allocated on it)`.
    pub used_bytes_per_grid_bucket: Vec<(u32, u64)>,
    pub catalog: CatalogStats,
    pub engine: GridStatus,
    /// Last error of a background task, if any.
    pub last_background_error: Option<String>,
}

impl StatusReport {
    /// Contents in `state`.
    pub fn contents_in(&self, state: ContentState) -> u64 {
        self.catalog
            .contents_by_state
            .iter()
            .find(|(s, _, _)| *s == state)
            .map_or(0, |(_, n, _)| *n)
    }
}

/// The quoted ETag of an MD5.
pub(crate) fn etag_of(md5: &[u8]) -> String {
    format!("\"{}\"", hex(md5))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// State shared by the store's API and its threads.
/// Counts a writer in [`Inner::writers_waiting`] while it waits for cache room.
struct WaitingWriter<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> WaitingWriter<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> WaitingWriter<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        WaitingWriter(count)
    }
}

impl Drop for WaitingWriter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) struct Inner {
    pub config: StoreConfig,
    pub catalog: Arc<dyn Catalog>,
    /// The same catalog's access tables (keys, bucket access): `permafrost-access` decides from them.
    pub access_catalog: Arc<dyn permafrost_catalog::AccessCatalog>,
    pub cache: Cache,
    pub engine: Engine,
    /// The grid's directory (its file-backed disks grow there): persistence keeps `free_bytes_min` free on it.
    pub grid_dir: PathBuf,
    pub persister: Persister,
    /// Recent reads: content → time, written to the catalog in batches (LRU without a commit per GET).
    access: Mutex<HashMap<ContentId, u64>>,
    /// Contents open for reading in this process (count per content, see `read::ReadHold`): the collector skips
    /// them when it runs early for room.
    pub reading: Mutex<HashMap<ContentId, u32>>,
    /// Set by a writer that found the cache full: the collector runs at once with the short grace
    /// (`gc::PRESSURE_GRACE_MS`), so unreferenced contents never hold the cache full for the whole grace period.
    pub gc_for_room: AtomicBool,
    /// Writers waiting in [`Inner::reserve_cache`] for room that evicting did not free: the watchdog's cache
    /// is under pressure whatever its fill.
    pub writers_waiting: std::sync::atomic::AtomicUsize,
    pub stop: AtomicBool,
    wake_lock: Mutex<bool>,
    wake: Condvar,
    pub last_error: Mutex<Option<String>>,
    /// A background loop found the catalog database unreachable and no round has used it since.
    pub catalog_unreachable: AtomicBool,
    /// The restore thread's state (`archive`).
    pub restores: crate::archive::Restores,
    /// The prefetch queue and the cache's hit counters (`prefetch`).
    pub(crate) prefetch: crate::prefetch::Prefetcher,
}

impl Inner {
    /// Reserve cache space for a writer: room in the cache's budget and, on the cache's file system, room above
    /// the reserve (`free_bytes_min`). While either is short it evicts persisted contents, wakes the persistence
    /// manager and the collector (unreferenced contents go after the short grace), and waits up to
    /// `cache_wait_ms_max` in all; then `SlowDown` saying what is short.
    pub fn reserve_cache(&self, bytes: u64) -> Result<()> {
        let file_system_room = || {
            crate::free_space::check_room(
                &self.cache.dir,
                bytes,
                self.config.free_bytes_min,
                "an upload",
            )
        };
        if file_system_room().is_ok() && self.cache.try_reserve(bytes) {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_millis(self.config.cache_wait_ms_max);
        let mut waiting = None;
        loop {
            self.evict_lru(bytes)?;
            let room = file_system_room();
            if room.is_ok() && self.cache.try_reserve(bytes) {
                return Ok(());
            }
            waiting.get_or_insert_with(|| WaitingWriter::new(&self.writers_waiting));
            self.wake_persister();
            self.gc_for_room.store(true, Ordering::SeqCst);
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::SlowDown(match room {
                    Err(short) => short,
                    Ok(()) => format!(
                        "the cache is full ({} of {} bytes used) and persistence has not freed {bytes} bytes within {} ms",
                        self.cache.used_bytes(),
                        self.cache.capacity_bytes,
                        self.config.cache_wait_ms_max
                    ),
                }));
            }
            let wait_ms = ((deadline - now).as_millis().min(100) as u64).max(1);
            match room {
                // Woken as soon as cache space is released.
                Ok(()) => {
                    if self.cache.wait_reserve(bytes, wait_ms) {
                        return Ok(());
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(wait_ms)),
            }
        }
    }

    /// Perform work items (cache file deletions), releasing their space, then remove them from the catalog.
    pub fn run_work(&self, items: Vec<WorkItem>) {
        let mut done = Vec::with_capacity(items.len());
        for item in items {
            match &item.kind {
                WorkKind::DeleteCacheFile { path } => {
                    let len = std::fs::metadata(self.cache.absolute(path))
                        .map(|m| m.len())
                        .ok();
                    match self.cache.remove(path) {
                        Ok(()) => {
                            if let Some(len) = len {
                                self.cache.release(len);
                            }
                            done.push(item.id);
                        }
                        Err(e) => self.record_error(format!("pending work {}: {e}", item.id)),
                    }
                }
            }
        }
        if let Err(e) = self.catalog.finish_work(&done) {
            self.record_error(format!("cannot finish pending work: {e}"));
        }
    }

    /// A background loop's round (`what`: "persistence manager", "restore") failed. An unreachable catalog
    /// database is logged once per outage, by whichever loop meets it first, as `catalog database unreachable:
    /// …`; any other error as [`Inner::record_error`].
    pub fn record_failure(&self, what: &str, e: &StoreError) {
        match e {
            StoreError::Unavailable(m) => {
                if !self.catalog_unreachable.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        "catalog database unreachable: {m}; the {what} retries until it answers"
                    );
                }
                *self.last_error.lock() = Some(format!("catalog database unreachable: {m}"));
            }
            e => self.record_error(format!("{what}: {e}")),
        }
    }

    /// A background loop's round used the catalog database: after an outage, one line saying so.
    pub fn record_round_ok(&self) {
        if self.catalog_unreachable.swap(false, Ordering::SeqCst) {
            // At warn, as the outage's line: the service's log filter shows this module's warnings only.
            tracing::warn!("catalog database answers again");
        }
    }

    /// Log a background error once (the same message again, as a waiting persistence manager repeats it every
    /// round, is not logged again) and keep it for the status page.
    pub fn record_error(&self, message: String) {
        let mut last = self.last_error.lock();
        if last.as_deref() != Some(message.as_str()) {
            tracing::warn!("{message}");
        }
        *last = Some(message);
    }

    /// Make a put visible if `condition` holds (checked in the commit's transaction); on any error the new cache
    /// file is removed and its cache space released.
    pub fn commit_put(
        &self,
        object: &ObjectRecord,
        content: &NewContent,
        condition: &permafrost_catalog::WriteCondition,
    ) -> Result<ObjectInfo> {
        let outcome = match self.catalog.put_object_if(
            object,
            content,
            permafrost_catalog::now_ms(),
            condition,
        ) {
            Ok(o) => o,
            Err(e) => {
                let _ = self.cache.remove(&content.cache_path);
                self.cache.release(content.stored_bytes);
                return Err(e.into());
            }
        };
        self.run_work(outcome.work);
        self.wake_persister();
        let (object, content) = self
            .catalog
            .get_object(&object.bucket, &object.key)?
            .ok_or_else(|| {
                StoreError::Internal(format!(
                    "object {}/{} vanished after its commit",
                    object.bucket, object.key
                ))
            })?;
        self.object_info(&object, &content)
    }

    /// The parts of a part-list content, each with its record (empty for other contents).
    pub fn parts_of(&self, content: &ContentRecord) -> Result<Vec<(ContentPart, ContentRecord)>> {
        if content.stored_form != StoredForm::Parts {
            return Ok(Vec::new());
        }
        let parts = self.catalog.content_parts(&content.id)?;
        // An empty list is an empty object (a growing object before its first piece, an empty recording).
        if parts.is_empty() && content.logical_bytes > 0 {
            return Err(StoreError::Internal(format!(
                "part-list content {} has no parts",
                content.id
            )));
        }
        Ok(parts)
    }

    /// [`ObjectInfo::from_records`], reading the parts of a part-list content.
    pub fn object_info(
        &self,
        object: &ObjectRecord,
        content: &ContentRecord,
    ) -> Result<ObjectInfo> {
        Ok(ObjectInfo::from_records(
            object,
            content,
            &self.parts_of(content)?,
        ))
    }

    /// Remember a read of `id`: kept in memory and written to the catalog by the persistence manager's next round
    /// (one transaction for all), never on the reader's thread unless [`ACCESS_BATCH_MAX`] reads pile up.
    pub fn touch(&self, id: ContentId) {
        let mut access = self.access.lock();
        access.insert(id, permafrost_catalog::now_ms());
        if access.len() >= ACCESS_BATCH_MAX {
            let batch = std::mem::take(&mut *access);
            drop(access);
            self.write_access(batch);
        }
    }

    pub fn flush_access(&self) {
        let batch = std::mem::take(&mut *self.access.lock());
        self.write_access(batch);
    }

    fn write_access(&self, batch: HashMap<ContentId, u64>) {
        let batch: Vec<(ContentId, u64)> = batch.into_iter().collect();
        if let Err(e) = self.catalog.touch_contents(&batch) {
            self.record_error(format!("cannot record {} reads: {e}", batch.len()));
        }
    }

    /// Evict persisted contents, least recently used first, until `bytes` are freed (or none is left).
    /// Returns the bytes freed.
    pub fn evict_lru(&self, bytes: u64) -> Result<u64> {
        self.flush_access();
        let mut freed = 0;
        while freed < bytes {
            let candidates = self.catalog.eviction_candidates(64)?;
            if candidates.is_empty() {
                break;
            }
            // Least recently used first, just enough of them (one transaction and one batch of deletions).
            let mut wanted = 0;
            let batch: Vec<ContentId> = candidates
                .iter()
                .take_while(|c| {
                    let take = freed + wanted < bytes;
                    wanted += c.stored_bytes;
                    take
                })
                .map(|c| c.id)
                .collect();
            let evicted = self.catalog.evict_contents(&batch)?;
            if evicted.is_empty() {
                break;
            }
            let mut work = Vec::with_capacity(evicted.len());
            for e in evicted {
                freed += e.stored_bytes;
                match e.work {
                    Some(w) => work.push(w),
                    None => self.cache.release(e.stored_bytes), // inline bytes: gone already
                }
            }
            self.run_work(work);
        }
        Ok(freed)
    }

    pub fn wake_persister(&self) {
        *self.wake_lock.lock() = true;
        self.wake.notify_all();
    }

    /// Sleep up to `ms` or until woken; returns early when stopping.
    pub fn sleep(&self, ms: u64) {
        let mut woken = self.wake_lock.lock();
        if !*woken && !self.stop.load(Ordering::SeqCst) {
            self.wake.wait_for(&mut woken, Duration::from_millis(ms));
        }
        *woken = false;
    }

    /// A bucket's settings with the store's defaults filled in. A bucket that is gone (deleted while its data
    /// waits) gets the defaults.
    pub fn settings_of(&self, bucket: &str) -> EffectiveSettings {
        let explicit = self
            .catalog
            .get_bucket(bucket)
            .ok()
            .flatten()
            .map(|b| b.settings)
            .unwrap_or_default();
        self.resolve_settings(&explicit)
    }

    /// `settings` with the store's defaults filled in.
    pub fn resolve_settings(&self, settings: &BucketSettings) -> EffectiveSettings {
        EffectiveSettings {
            compression: settings
                .compression
                .unwrap_or(self.config.default_compression),
            placement: settings
                .placement
                .clone()
                .unwrap_or_else(|| self.config.default_placement.clone()),
            write_mode: settings
                .write_mode
                .as_deref()
                .and_then(|m| m.parse().ok())
                .unwrap_or(self.config.write_mode),
        }
    }

    /// The dataset id of a key: the bucket plus the first `dataset_prefix_depth` components of the key's
    /// directory part (the same rule as `permafrost_policy::DatasetAffinity::dataset_key`).
    /// The dataset of an object written with `tags`: `BUCKET/NAME` for a [`DATASET_TAG`]`=NAME` tag (the data
    /// owner's grouping, which the dataset-affinity placement keeps on one grid bucket), else by its key.
    pub fn dataset_for(&self, bucket: &str, key: &str, tags: &[(String, String)]) -> String {
        match tags.iter().find(|(k, _)| k == DATASET_TAG) {
            Some((_, name)) => format!("{bucket}/{}", name.trim_matches('/')),
            None => self.dataset_of(bucket, key),
        }
    }

    pub fn dataset_of(&self, bucket: &str, key: &str) -> String {
        let mut id = bucket.to_string();
        let mut parts: Vec<&str> = key.split('/').collect();
        parts.pop();
        for part in parts
            .into_iter()
            .filter(|p| !p.is_empty())
            .take(self.config.dataset_prefix_depth)
        {
            id.push('/');
            id.push_str(part);
        }
        id
    }
}

/// The object store. Cheap to share: methods take `&self` and are safe to call from many threads.
pub struct Store {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    data_dir: PathBuf,
}

/// Placement and write mode names must be known (compression is parsed already).
fn validate_settings(settings: &BucketSettings) -> Result<()> {
    if let Some(p) = &settings.placement {
        permafrost_policy::placement_by_name(p, &Default::default())
            .map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
    }
    if let Some(m) = &settings.write_mode {
        m.parse::<WriteMode>()
            .map_err(StoreError::InvalidArgument)?;
    }
    Ok(())
}

fn validate_bucket_name(name: &str) -> Result<()> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let ends_ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !(3..=63).contains(&name.len())
        || !ok_chars
        || !ends_ok
        || name.contains("..")
        || RESERVED_BUCKETS.contains(&name)
    {
        return Err(StoreError::InvalidArgument(format!(
            "invalid bucket name {name:?}: 3–63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit"
        )));
    }
    Ok(())
}

pub(crate) fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(StoreError::InvalidArgument(format!(
            "key of {} bytes: must be 1 to {KEY_BYTES_MAX} bytes",
            key.len()
        )));
    }
    Ok(())
}

impl Store {
    /// Open the data directory `data_dir` (created if needed, with the grid of `config.grid` when new): the
    /// catalog, the cache and the engine; then recover (pending work, interrupted persists, partial uploads) and
    /// start the persistence manager and the garbage collector.
    pub fn open(data_dir: &Path, config: StoreConfig) -> Result<Store> {
        config.validate()?;
        std::fs::create_dir_all(data_dir)
            .map_err(|e| io_error(format!("cannot create {}", data_dir.display()), e))?;
        let catalog = Arc::new(config.catalog.open(data_dir, config.fsync)?);
        let cache = Cache::open(
            &data_dir.join(&config.cache_dir),
            config.cache_bytes_max,
            config.fsync,
        )?;
        let grid_dir = data_dir.join("grid");
        let engine = if grid_dir.join(permafrost_engine::CONFIG_FILE).exists() {
            Engine::open_with(
                &grid_dir,
                OpenOptions {
                    power_profile: config.power_profile.clone(),
                    ..Default::default()
                },
            )?
        } else {
            let mut grid = config.grid.grid_config()?;
            grid.write_mode_default = config.write_mode;
            if let Some(p) = &config.power_profile {
                grid.power = p.clone();
            }
            Engine::create(&grid_dir, grid)?
        };
        let persister = Persister::new(&config, &engine)?;
        let inner = Arc::new(Inner {
            config,
            access_catalog: catalog.clone(),
            catalog,
            cache,
            engine,
            grid_dir,
            persister,
            access: Mutex::new(HashMap::new()),
            reading: Mutex::new(HashMap::new()),
            gc_for_room: AtomicBool::new(false),
            writers_waiting: std::sync::atomic::AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            wake_lock: Mutex::new(false),
            wake: Condvar::new(),
            last_error: Mutex::new(None),
            catalog_unreachable: AtomicBool::new(false),
            restores: Default::default(),
            prefetch: Default::default(),
        });
        crate::gc::recover(&inner)?;
        inner.persister.remember_datasets(&inner)?;
        let store = Store {
            inner,
            threads: Mutex::new(Vec::new()),
            data_dir: data_dir.to_path_buf(),
        };
        store.start_threads();
        Ok(store)
    }

    fn start_threads(&self) {
        let mut threads = self.threads.lock();
        let inner = Arc::clone(&self.inner);
        threads.push(
            std::thread::Builder::new()
                .name("permafrost-persist".into())
                .spawn(move || crate::persist::manager_loop(&inner))
                .expect("spawn the persistence manager"),
        );
        let inner = Arc::clone(&self.inner);
        threads.push(
            std::thread::Builder::new()
                .name("permafrost-gc".into())
                .spawn(move || crate::gc::gc_loop(&inner))
                .expect("spawn the garbage collector"),
        );
        let inner = Arc::clone(&self.inner);
        threads.push(
            std::thread::Builder::new()
                .name("permafrost-lifecycle".into())
                .spawn(move || crate::archive::lifecycle_loop(&inner))
                .expect("spawn the lifecycle thread"),
        );
        let inner = Arc::clone(&self.inner);
        threads.push(
            std::thread::Builder::new()
                .name("permafrost-restore".into())
                .spawn(move || crate::archive::restore_loop(&inner))
                .expect("spawn the restore thread"),
        );
        let inner = Arc::clone(&self.inner);
        threads.push(
            std::thread::Builder::new()
                .name("permafrost-prefetch".into())
                .spawn(move || crate::prefetch::prefetch_loop(&inner))
                .expect("spawn the prefetch thread"),
        );
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The configuration in effect.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Bytes available and the size of the file system holding the grid's disk files (statvfs); `None` when it
    /// cannot be read. The grid's files are sparse: their apparent sizes say nothing about the room left.
    pub fn grid_file_system(&self) -> Option<(u64, u64)> {
        crate::free_space::free_and_total(&self.inner.grid_dir)
    }

    /// The engine beneath (power states and counters, failing disks in tests, rebuild).
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    // ---------------------------------------------------------------- buckets

    /// Create an S3 bucket (`BucketSettings::default()`: the store's defaults). Unknown placement or write mode
    /// names are `InvalidArgument`.
    pub fn create_bucket(&self, name: &str, settings: BucketSettings) -> Result<()> {
        validate_bucket_name(name)?;
        validate_settings(&settings)?;
        Ok(self.inner.catalog.create_bucket(name, &settings)?)
    }

    /// A bucket's settings, chosen and in effect.
    pub fn bucket_settings(&self, name: &str) -> Result<BucketSettingsReport> {
        let record = self.head_bucket(name)?;
        Ok(BucketSettingsReport {
            bucket: record.name,
            effective: self.inner.resolve_settings(&record.settings),
            chosen: record.settings,
            storage_class: record.archive.storage_class,
        })
    }

    /// Replace a bucket's settings; they apply to uploads from now on (stored data stays as it is: the first
    /// placement is final, and each content records its own encoding). The hot prefixes stay as they are:
    /// [`Store::set_hot_prefixes`] changes them (and pins or unpins what they name).
    pub fn set_bucket_settings(
        &self,
        name: &str,
        settings: BucketSettings,
    ) -> Result<BucketSettingsReport> {
        validate_settings(&settings)?;
        let mut settings = settings;
        settings.hot_prefixes = self.head_bucket(name)?.settings.hot_prefixes;
        self.inner.catalog.set_bucket_settings(name, &settings)?;
        self.bucket_settings(name)
    }

    /// Delete an empty S3 bucket.
    pub fn delete_bucket(&self, name: &str) -> Result<()> {
        let work = self.inner.catalog.delete_bucket(name)?;
        self.inner.run_work(work);
        Ok(())
    }

    /// The bucket's record, `NoSuchBucket` if it does not exist.
    pub fn head_bucket(&self, name: &str) -> Result<BucketRecord> {
        self.inner
            .catalog
            .get_bucket(name)?
            .ok_or_else(|| StoreError::NoSuchBucket(name.to_string()))
    }

    pub fn list_buckets(&self) -> Result<Vec<BucketRecord>> {
        Ok(self.inner.catalog.list_buckets()?)
    }

    // ---------------------------------------------------------------- objects

    /// Start an upload of `bucket/key`.
    pub fn begin_put(&self, bucket: &str, key: &str, options: PutOptions) -> Result<PutHandle> {
        validate_key(key)?;
        let record = self.head_bucket(bucket)?;
        let target = Target::Object {
            bucket: bucket.to_string(),
            key: key.to_string(),
            dataset: self
                .inner
                .dataset_for(bucket, key, &options.attributes.tags),
            compression: self.inner.resolve_settings(&record.settings).compression,
        };
        PutHandle::begin(
            Arc::clone(&self.inner),
            target,
            options,
            self.inner.config.chunk_bytes,
        )
    }

    /// Upload a whole body held in memory (convenience over [`Store::begin_put`]).
    pub fn put_object(
        &self,
        bucket: &str,
        key: &str,
        options: PutOptions,
        body: &[u8],
    ) -> Result<ObjectInfo> {
        let mut handle = self.begin_put(bucket, key, options)?;
        for piece in body.chunks(1 << 20) {
            handle.write(piece)?;
        }
        handle.finish()
    }

    /// Open an object for reading: the whole object or `range` of it. With `accept_encoding` equal to the
    /// encoding a pre-compressed object was uploaded with, the stored bytes are returned as they are (and the
    /// range applies to them); otherwise decoded bytes. From the cache when present, else from the grid.
    pub fn open_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
        accept_encoding: Option<Encoding>,
    ) -> Result<(ObjectInfo, ObjectReader)> {
        let (object, content) = self.lookup(bucket, key)?;
        let parts = self.inner.parts_of(&content)?;
        let info = ObjectInfo::from_records(&object, &content, &parts);
        let read = crate::prefetch::read_begins(&self.inner, &object, &content, &parts);
        let reader = ObjectReader::open(
            &self.inner,
            &content,
            parts,
            range,
            accept_encoding,
            false,
            &object.checksums,
        )?;
        read.opened(&self.inner);
        self.inner.touch(content.id);
        Ok((info, reader))
    }

    fn lookup(&self, bucket: &str, key: &str) -> Result<(ObjectRecord, ContentRecord)> {
        match self.inner.catalog.get_object(bucket, key)? {
            Some(found) => Ok(found),
            None => {
                self.head_bucket(bucket)?;
                Err(StoreError::NoSuchKey {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                })
            }
        }
    }

    /// What the catalog knows of an object (never touches a disk).
    pub fn head_object(&self, bucket: &str, key: &str) -> Result<ObjectInfo> {
        let (object, content) = self.lookup(bucket, key)?;
        self.inner.object_info(&object, &content)
    }

    /// Delete an object (catalog only; its content is collected after the grace period when unreferenced).
    /// Deleting a missing key succeeds, as in S3; a missing bucket is `NoSuchBucket`.
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.inner
            .catalog
            .delete_object(bucket, key, permafrost_catalog::now_ms())?;
        Ok(())
    }

    /// Copy an object (catalog only: a new reference to the same content). `metadata = None` copies the source's
    /// user metadata and content type; `Some((user_metadata, content_type))` replaces them.
    pub fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        metadata: Option<ReplaceMetadata>,
    ) -> Result<ObjectInfo> {
        self.copy_version(
            src_bucket, src_key, None, dst_bucket, dst_key, metadata, None,
        )
    }

    /// List objects (S3 ListObjects semantics; catalog only).
    pub fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage> {
        Ok(self.inner.catalog.list_objects(bucket, query)?)
    }

    // ---------------------------------------------------------------- operations

    /// Place and persist everything waiting in the cache now, and wait until it is fully persisted (parity
    /// included, in delayed mode too): every version of every object (current, noncurrent, under a delete
    /// marker), every part list and its parts, every part of an upload in progress; a growing object's pieces
    /// (its list once it is finished). `NotPersisted`, naming them, when contents referenced before the run
    /// began are still not persisted after it (they could not be placed or written: the message says why when
    /// the run recorded an error).
    pub fn persist_now(&self) -> Result<()> {
        let began_ms = permafrost_catalog::now_ms();
        let run = crate::persist::persist_all(&self.inner);
        if let Err(e) = &run {
            self.inner.record_error(format!("persist run: {e}"));
        }
        run?;
        let left = crate::claims::unpersisted_after_run(&self.inner, began_ms);
        if let Err(e) = &left {
            tracing::warn!("{e}");
        }
        left
    }

    /// Wait until the object (its current version) is fully persisted or `timeout` passes (then `Ok(false)`).
    pub fn wait_persisted(&self, bucket: &str, key: &str, timeout: Duration) -> Result<bool> {
        self.wait_version_persisted(bucket, key, None, timeout)
    }

    /// Wait until one version (the current one without `version_id`) is fully persisted — its content and, for
    /// a part list, every part — or `timeout` passes (then `Ok(false)`).
    pub fn wait_version_persisted(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        timeout: Duration,
    ) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let info = self.head_version(bucket, key, version_id)?;
            match info.state {
                ContentState::Persisted => return Ok(true),
                ContentState::Persisting => {
                    // Delayed mode: drain the parity deltas now.
                    crate::persist::complete_parity(&self.inner)?;
                }
                _ => self.inner.wake_persister(),
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until every version under `prefix` — or, with `key`, every version of that key — is fully
    /// persisted: current and noncurrent versions alike (delete markers hold no bytes), in versioned and
    /// unversioned buckets. Returns the versions looked at and whether all of them were persisted before
    /// `timeout` passed (it stops at the first that was not). A `key` without any version is `NoSuchKey`.
    pub fn wait_versions_persisted(
        &self,
        bucket: &str,
        prefix: &str,
        key: Option<&str>,
        timeout: Duration,
    ) -> Result<(u64, bool)> {
        let deadline = Instant::now() + timeout;
        self.head_bucket(bucket)?;
        let mut query = permafrost_catalog::VersionQuery {
            prefix: key.unwrap_or(prefix).to_string(),
            ..Default::default()
        };
        let mut versions = 0u64;
        loop {
            let page = self.list_object_versions(bucket, &query)?;
            for version in &page.versions {
                if version.object.is_none() || key.is_some_and(|k| k != version.key) {
                    continue;
                }
                versions += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                match self.wait_version_persisted(
                    bucket,
                    &version.key,
                    Some(&version.version_id),
                    left,
                ) {
                    Ok(true) => {}
                    Ok(false) => return Ok((versions, false)),
                    // Removed meanwhile: nothing left to persist.
                    Err(StoreError::NoSuchVersion(_) | StoreError::NoSuchKey { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            match (page.is_truncated, page.next_key_marker) {
                (true, Some(next)) if key.is_none_or(|k| next.as_str() <= k) => {
                    query.key_marker = Some(next);
                    query.version_id_marker = page.next_version_id_marker;
                }
                _ => break,
            }
        }
        if let (Some(key), 0) = (key, versions) {
            return Err(StoreError::NoSuchKey {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        Ok((versions, true))
    }

    /// Evict every persisted content from the cache; returns the bytes freed.
    pub fn evict_cache(&self) -> Result<u64> {
        self.inner.evict_lru(u64::MAX)
    }

    /// Run the garbage collector now (`ignore_grace`: collect unreferenced contents regardless of their age).
    /// Returns the number of contents removed.
    pub fn gc_now(&self, ignore_grace: bool) -> Result<u64> {
        Ok(self.collect_garbage(ignore_grace)?.contents_removed)
    }

    /// [`Store::gc_now`], reporting the stored bytes freed too.
    pub fn collect_garbage(&self, ignore_grace: bool) -> Result<crate::GcReport> {
        crate::gc::collect(&self.inner, ignore_grace)
    }

    /// Re-read every object and check it against its hashes: persisted contents from the grid (extent crc and
    /// BLAKE3, content BLAKE3), cached ones from the cache (content BLAKE3).
    pub fn verify(&self, progress: &mut dyn FnMut(&VerifyProgress)) -> Result<VerifyReport> {
        let total = self.inner.catalog.stats()?.objects;
        let mut report = VerifyReport::default();
        let mut state = VerifyProgress {
            objects_total: total,
            ..Default::default()
        };
        let mut after: Option<(String, String)> = None;
        loop {
            let batch = self
                .inner
                .catalog
                .objects_after(after.as_ref().map(|(b, k)| (b.as_str(), k.as_str())), 256)?;
            let Some(last) = batch.last() else { break };
            after = Some((last.bucket.clone(), last.key.clone()));
            for object in batch {
                let result = (|| -> Result<u64> {
                    let content = self
                        .inner
                        .catalog
                        .get_content(&object.content)?
                        .ok_or_else(|| StoreError::Internal("content row missing".into()))?;
                    // Persisted contents (each part of a part list on its own) are read from the grid.
                    let parts = self.inner.parts_of(&content)?;
                    let mut reader =
                        ObjectReader::open(&self.inner, &content, parts, None, None, true, &[])?;
                    std::io::copy(&mut reader, &mut std::io::sink())
                        .map_err(|e| StoreError::Internal(e.to_string()))
                })();
                match result {
                    Ok(n) => {
                        report.bytes_checked += n;
                        state.bytes_checked += n;
                    }
                    Err(e) => report
                        .errors
                        .push(format!("{}/{}: {e}", object.bucket, object.key)),
                }
                report.objects_checked += 1;
                state.objects_checked += 1;
                progress(&state);
            }
        }
        Ok(report)
    }

    /// The store's state.
    pub fn status(&self) -> Result<StatusReport> {
        let catalog = self.inner.catalog.stats()?;
        let waiting = self
            .inner
            .catalog
            .outstanding()?
            .into_iter()
            .map(|o| (o.grid_bucket, o.stored_bytes))
            .collect();
        let used = self
            .inner
            .catalog
            .grid_usage()?
            .into_iter()
            .map(|u| (u.grid_bucket, u.used_bytes()))
            .collect();
        Ok(StatusReport {
            cache_used_bytes: self.inner.cache.used_bytes(),
            cache_capacity_bytes: self.inner.cache.capacity_bytes,
            waiting_bytes_per_grid_bucket: waiting,
            used_bytes_per_grid_bucket: used,
            catalog,
            engine: self.inner.engine.status()?,
            last_background_error: self.inner.last_error.lock().clone(),
        })
    }

    /// Rebuild objects from grid bucket `grid_bucket` without the catalog (reading through the engine), writing
    /// them under `out_dir` (see `permafrost_format::salvage_objects`).
    pub fn salvage_grid_bucket(
        &self,
        grid_bucket: usize,
        out_dir: &Path,
        progress: &mut dyn FnMut(&crate::SalvageProgress),
    ) -> Result<crate::SalvageReport> {
        crate::salvage::salvage_through_engine(&self.inner.engine, grid_bucket, out_dir, progress)
    }

    /// Stop the background threads and close the catalog and the engine. Unpersisted contents stay in the cache
    /// and are re-queued on the next open.
    pub fn close(self) -> Result<()> {
        self.stop_threads();
        self.inner.flush_access();
        Ok(())
    }

    fn stop_threads(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake_persister();
        self.inner.restores.wake(); // else the restore thread sleeps out its poll (a second) before it stops
        self.inner.prefetch.wake();
        for t in std::mem::take(&mut *self.threads.lock()) {
            let _ = t.join();
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop_threads();
    }
}
