//! Prefetch and hot data: make the spin-up a read paid for serve the reads that follow, and keep chosen data in
//! the cache for good (`docs/store.md`, "Prefetch and hot data").
//!
//! - **Prefetch.** A GET whose data disk was off when the read began (it waits one spin-up) queues a prefetch:
//!   the next objects of its dataset in key order (current versions listed after its key, within the dataset's
//!   key prefix), whose contents are on the same grid bucket, persisted and not in the cache — at most
//!   `prefetch_objects_max` objects and `prefetch_bytes_max` stored bytes (0 turns prefetch off). The prefetch
//!   thread holds the disk up (one activity guard), lets the triggering read finish first (it never competes
//!   with the reader it follows; the reader never waits for it), then copies the contents into the cache in
//!   on-disk order, verified, as a restore does ([`crate::archive::copy_reserved`]). Room: it may evict contents
//!   unused since it began (least recently used first, never pinned ones, never what it read itself) and stops
//!   at the first content the cache has no room for, with no error to anyone. GLACIER objects are never
//!   prefetched (a restore reads them). Its spin-ups (should the disk have gone off meanwhile) are attributed
//!   as `prefetch of BUCKET/KEY`, the read that woke the disk.
//! - **Keep hot.** A bucket's `hot_prefixes` (a bucket setting, `BucketSettings::hot_prefixes`) pin the contents
//!   of the current versions under them in the cache: pinned when a prefix is made hot (and read back from the
//!   grid, grouped by disk, in on-disk order, attributed `prefetch of BUCKET/PREFIX (keep hot)`, by
//!   [`Store::keep_hot`]), pinned when persisted afterwards, unpinned when the prefix is made cold. Eviction
//!   skips pinned contents (`Catalog::eviction_candidates`).
//! - **Hit rates.** Every object read (GET, ranged or whole) is counted as served from the cache or from the grid,
//!   and a prefetched content read later as a prefetch hit ([`CacheReads`]).
//!
//! Bounds: the queue holds at most [`QUEUE_MAX`] prefetches (more are dropped and counted), one prefetch lists at
//! most [`LIST_SCAN_MAX`] keys, the prefetched contents remembered for hit counting are at most
//! [`REMEMBERED_MAX`], a bucket has at most [`HOT_PREFIXES_MAX`] hot prefixes.
//!
//! Not here: the dataset's access history as a second guide to what comes next (key order only); noncurrent
//! versions are neither prefetched nor kept hot; a content shared with an object outside the hot prefixes is
//! unpinned when its hot object's prefix is made cold.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use permafrost_catalog::{
    ContentId, ContentPart, ContentRecord, ContentState, ListQuery, ObjectRecord,
};
use permafrost_disk::power::{PowerState, WakeKind, WakeReason};
use serde::{Deserialize, Serialize};

use crate::store::Inner;
use crate::{Result, Store, StoreError};

/// Prefetches waiting at most; more are dropped (counted in [`CacheReads::prefetches_dropped`]).
pub const QUEUE_MAX: usize = 64;
/// Keys one prefetch lists at most while looking for the next objects of its dataset.
pub const LIST_SCAN_MAX: usize = 4096;
/// Prefetched contents remembered for counting prefetch hits (the oldest are forgotten first).
pub const REMEMBERED_MAX: usize = 65_536;
/// Hot prefixes of one bucket at most.
pub const HOT_PREFIXES_MAX: usize = 100;
/// A prefetch waits at most this long for the read it follows to finish before it reads anyway.
const READER_WAIT_MS_MAX: u64 = 60_000;
/// The prefetch thread looks at the store's stop flag this often while idle.
const IDLE_POLL_MS: u64 = 100;
/// Objects per listing page.
const LIST_PAGE: usize = 1000;

/// Reads served from the cache and from the grid, and what prefetch did, since the store opened.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheReads {
    /// Object reads served from the cache.
    pub from_cache: u64,
    /// Object reads that read the grid.
    pub from_grid: u64,
    /// `from_cache / (from_cache + from_grid)` (0 before any read).
    pub hit_ratio: f64,
    /// Reads that found their disk off and queued a prefetch.
    pub prefetches: u64,
    /// Prefetches dropped because the queue was full.
    pub prefetches_dropped: u64,
    /// Contents prefetched into the cache, and their stored bytes.
    pub prefetched_contents: u64,
    pub prefetched_bytes: u64,
    /// Prefetched contents read afterwards from the cache.
    pub prefetch_hits: u64,
    /// Prefetches that stopped early because the cache had no room.
    pub prefetch_no_room: u64,
    /// Contents read back into the cache for hot prefixes, and their stored bytes.
    pub hot_read_contents: u64,
    pub hot_read_bytes: u64,
}

/// The prefetch queue and the hit counters (`Inner::prefetch`).
#[derive(Default)]
pub(crate) struct Prefetcher {
    queue: Mutex<VecDeque<Job>>,
    wake: Condvar,
    /// Contents prefetched and not read since, oldest first, at most [`REMEMBERED_MAX`].
    remembered: Mutex<Remembered>,
    from_cache: AtomicU64,
    from_grid: AtomicU64,
    prefetches: AtomicU64,
    prefetches_dropped: AtomicU64,
    prefetched_contents: AtomicU64,
    prefetched_bytes: AtomicU64,
    prefetch_hits: AtomicU64,
    prefetch_no_room: AtomicU64,
    hot_read_contents: AtomicU64,
    hot_read_bytes: AtomicU64,
}

impl Prefetcher {
    /// Wake the prefetch thread (the store is stopping).
    pub(crate) fn wake(&self) {
        let _queue = self.queue.lock();
        self.wake.notify_all();
    }
}

#[derive(Default)]
struct Remembered {
    order: VecDeque<ContentId>,
    ids: HashSet<ContentId>,
}

impl Remembered {
    fn insert(&mut self, id: ContentId) {
        if self.ids.insert(id) {
            self.order.push_back(id);
        }
        while self.ids.len() > REMEMBERED_MAX {
            match self.order.pop_front() {
                Some(old) => {
                    self.ids.remove(&old);
                }
                None => break,
            }
        }
    }
}

/// One prefetch: the next objects after `key` of `dataset` on `grid_bucket`.
#[derive(Debug, Clone)]
struct Job {
    bucket: String,
    key: String,
    dataset: String,
    grid_bucket: u32,
    /// The contents the triggering read reads: the prefetch lets it finish first.
    trigger: Vec<ContentId>,
}

/// A read about to open (from [`read_begins`]): counted already; [`ReadStart::opened`] queues its prefetch.
#[must_use]
pub(crate) struct ReadStart {
    job: Option<Job>,
}

/// Count a read of `object` (its `content`, or the `parts` of a part list) as served from the cache or the grid,
/// count prefetch hits, and decide whether it is to be followed by a prefetch: its data disk is off now, before
/// the read begins.
pub(crate) fn read_begins(
    inner: &Inner,
    object: &ObjectRecord,
    content: &ContentRecord,
    parts: &[(ContentPart, ContentRecord)],
) -> ReadStart {
    let p = &inner.prefetch;
    let needed: Vec<&ContentRecord> = if parts.is_empty() {
        vec![content]
    } else {
        parts.iter().map(|(_, c)| c).collect()
    };
    let uncached: Vec<&ContentRecord> = needed
        .iter()
        .copied()
        .filter(|c| c.cache_path.is_none() && c.stored_bytes > 0)
        .collect();
    {
        let mut remembered = p.remembered.lock();
        let hits = needed
            .iter()
            .filter(|c| c.cache_path.is_some() && remembered.ids.remove(&c.id))
            .count() as u64;
        if hits > 0 {
            let Remembered { order, ids } = &mut *remembered;
            order.retain(|id| ids.contains(id));
            p.prefetch_hits.fetch_add(hits, Ordering::Relaxed);
        }
    }
    let Some(grid_bucket) = uncached.first().and_then(|c| c.grid_bucket) else {
        p.from_cache.fetch_add(1, Ordering::Relaxed);
        return ReadStart { job: None };
    };
    p.from_grid.fetch_add(1, Ordering::Relaxed);
    let config = &inner.config;
    if config.prefetch_bytes_max == 0 || config.prefetch_objects_max == 0 {
        return ReadStart { job: None };
    }
    let disk = inner.engine.geometry().bucket_disk(grid_bucket as usize);
    if inner.engine.power().state(disk) != PowerState::Off {
        return ReadStart { job: None };
    }
    ReadStart {
        job: Some(Job {
            bucket: object.bucket.clone(),
            key: object.key.clone(),
            dataset: object.dataset.clone(),
            grid_bucket,
            trigger: needed.iter().map(|c| c.id).collect(),
        }),
    }
}

impl ReadStart {
    /// The read is open (its disk is spinning up for it): queue its prefetch, never waiting for it.
    pub(crate) fn opened(self, inner: &Inner) {
        let Some(job) = self.job else { return };
        let p = &inner.prefetch;
        let mut queue = p.queue.lock();
        let same = |j: &Job| {
            j.bucket == job.bucket && j.dataset == job.dataset && j.grid_bucket == job.grid_bucket
        };
        if queue.iter().any(same) {
            return;
        }
        if queue.len() >= QUEUE_MAX {
            p.prefetches_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        p.prefetches.fetch_add(1, Ordering::Relaxed);
        queue.push_back(job);
        p.wake.notify_one();
    }
}

/// The prefetch thread: runs queued prefetches one at a time until the store stops.
pub(crate) fn prefetch_loop(inner: &Arc<Inner>) {
    while !inner.stop.load(Ordering::SeqCst) {
        let job = {
            let mut queue = inner.prefetch.queue.lock();
            if queue.is_empty() {
                inner
                    .prefetch
                    .wake
                    .wait_for(&mut queue, Duration::from_millis(IDLE_POLL_MS));
            }
            queue.pop_front()
        };
        let Some(job) = job else { continue };
        if let Err(e) = prefetch(inner, &job) {
            inner.record_error(format!(
                "prefetch after the read of {}/{}: {e}",
                job.bucket, job.key
            ));
        }
    }
}

/// The key prefix of `key`'s dataset: its first `dataset_prefix_depth` directory components, or `""` when the
/// object's dataset is not named by its key (a dataset tag): then the whole bucket is listed and filtered.
fn dataset_prefix(inner: &Inner, bucket: &str, key: &str, dataset: &str) -> String {
    if inner.dataset_of(bucket, key) != dataset {
        return String::new();
    }
    match dataset.strip_prefix(bucket) {
        Some(rest) if !rest.is_empty() => format!("{}/", rest.trim_start_matches('/')),
        _ => String::new(),
    }
}

/// The contents an object reads: its content, or the parts of a part list.
fn needed_contents(inner: &Inner, content: ContentRecord) -> Result<Vec<ContentRecord>> {
    let parts = inner.parts_of(&content)?;
    Ok(if parts.is_empty() {
        vec![content]
    } else {
        parts.into_iter().map(|(_, c)| c).collect()
    })
}

/// Where a content's stored bytes begin on its grid bucket (its first segment), for on-disk order.
fn disk_offset(inner: &Inner, content: &ContentRecord) -> Result<Option<u64>> {
    Ok(inner
        .catalog
        .segments(&content.id)?
        .first()
        .map(|s| s.extent.offset + s.segment.offset_in_payload))
}

/// What a prefetch reads: the contents of the next objects of the job's dataset on its grid bucket, within the
/// bounds, in on-disk order.
fn plan(inner: &Inner, job: &Job) -> Result<Vec<(u64, ContentRecord)>> {
    let config = &inner.config;
    let mut query = ListQuery {
        prefix: dataset_prefix(inner, &job.bucket, &job.key, &job.dataset),
        delimiter: None,
        start_after: Some(job.key.clone()),
        max_keys: LIST_PAGE,
    };
    let mut chosen: Vec<(u64, ContentRecord)> = Vec::new();
    let mut seen: HashSet<ContentId> = job.trigger.iter().copied().collect();
    let (mut objects, mut bytes, mut scanned) = (0usize, 0u64, 0usize);
    'pages: loop {
        let page = inner.catalog.list_objects(&job.bucket, &query)?;
        for object in &page.objects {
            scanned += 1;
            // GLACIER objects are read by a restore, never by a guess.
            if object.dataset != job.dataset
                || object.attributes.storage_class == permafrost_catalog::StorageClass::Glacier
            {
                continue;
            }
            let Some(content) = inner.catalog.get_content(&object.content)? else {
                continue;
            };
            let wanted: Vec<ContentRecord> = needed_contents(inner, content)?
                .into_iter()
                .filter(|c| {
                    c.state == ContentState::Persisted
                        && c.cache_path.is_none()
                        && c.grid_bucket == Some(job.grid_bucket)
                        && c.stored_bytes > 0
                        && !seen.contains(&c.id)
                })
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let size: u64 = wanted.iter().map(|c| c.stored_bytes).sum();
            if objects >= config.prefetch_objects_max
                || bytes.saturating_add(size) > config.prefetch_bytes_max
            {
                break 'pages;
            }
            objects += 1;
            bytes += size;
            for c in wanted {
                seen.insert(c.id);
                if let Some(offset) = disk_offset(inner, &c)? {
                    chosen.push((offset, c));
                }
            }
        }
        match page.next_start_after {
            Some(next) if page.is_truncated && scanned < LIST_SCAN_MAX => {
                query.start_after = Some(next)
            }
            _ => break,
        }
    }
    chosen.sort_by_key(|(offset, _)| *offset);
    Ok(chosen)
}

/// Reserve cache room for a prefetched content: what is free, else what evicting contents unused since the
/// prefetch began (`before_ms`; least recently used first, never pinned ones) frees, so a prefetch never pushes out
/// what it read itself. `false`: no room (the prefetch stops).
fn reserve_room(inner: &Inner, bytes: u64, before_ms: u64) -> Result<bool> {
    if crate::free_space::check_room(
        &inner.cache.dir,
        bytes,
        inner.config.free_bytes_min,
        "a prefetch",
    )
    .is_err()
    {
        return Ok(false);
    }
    if inner.cache.try_reserve(bytes) {
        return Ok(true);
    }
    inner.flush_access();
    let candidates = inner.catalog.eviction_candidates(64)?;
    let mut wanted = 0u64;
    let batch: Vec<ContentId> = candidates
        .iter()
        .filter(|c| c.last_access_ms < before_ms)
        .take_while(|c| {
            let take = wanted < bytes;
            wanted += c.stored_bytes;
            take
        })
        .map(|c| c.id)
        .collect();
    if batch.is_empty() {
        return Ok(false);
    }
    let mut work = Vec::with_capacity(batch.len());
    for e in inner.catalog.evict_contents(&batch)? {
        match e.work {
            Some(w) => work.push(w),
            None => inner.cache.release(e.stored_bytes), // inline bytes: gone already
        }
    }
    inner.run_work(work);
    Ok(inner.cache.try_reserve(bytes))
}

/// Run one prefetch (see the module documentation).
fn prefetch(inner: &Arc<Inner>, job: &Job) -> Result<()> {
    let power = inner.engine.power();
    let disk = inner
        .engine
        .geometry()
        .bucket_disk(job.grid_bucket as usize);
    let reading = |inner: &Inner| {
        let reading = inner.reading.lock();
        job.trigger.iter().any(|id| reading.contains_key(id))
    };
    // The read that queued it spins the disk up (its read-ahead may not have asked yet, or waits for the power
    // budget): wait for that while the read lasts. A disk that is off with the read over is not worth a spin-up
    // of the prefetch's own.
    let deadline = Instant::now() + Duration::from_millis(READER_WAIT_MS_MAX);
    while power.state(disk) == PowerState::Off {
        if !reading(inner) || Instant::now() >= deadline || inner.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let planned = plan(inner, job)?;
    if planned.is_empty() {
        return Ok(());
    }
    let _reason =
        WakeReason::about(WakeKind::Prefetch, format!("{}/{}", job.bucket, job.key)).enter();
    let _up = power.acquire(disk);
    // Let the read it follows finish first: the disk serves one reader at a time, the reader first.
    while reading(inner) && Instant::now() < deadline && !inner.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let started_ms = permafrost_catalog::now_ms();
    let p = &inner.prefetch;
    for (_, planned) in planned {
        if inner.stop.load(Ordering::SeqCst) {
            break;
        }
        // As the catalog has it now: read into the cache meanwhile, or collected.
        let Some(content) = inner.catalog.get_content(&planned.id)? else {
            continue;
        };
        if content.cache_path.is_some() || content.state != ContentState::Persisted {
            continue;
        }
        if !reserve_room(inner, content.stored_bytes, started_ms)? {
            p.prefetch_no_room.fetch_add(1, Ordering::Relaxed);
            break;
        }
        let copied = crate::archive::copy_reserved(inner, &content)?;
        if copied > 0 {
            p.prefetched_contents.fetch_add(1, Ordering::Relaxed);
            p.prefetched_bytes.fetch_add(copied, Ordering::Relaxed);
            p.remembered.lock().insert(content.id);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- keep hot

/// What [`Store::set_hot_prefixes`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotChange {
    pub bucket: String,
    /// The bucket's hot prefixes now.
    pub prefixes: Vec<String>,
    /// Contents pinned in the cache, and unpinned.
    pub pinned: u64,
    pub unpinned: u64,
    /// Contents under the hot prefixes not in the cache: [`Store::keep_hot`] reads them back.
    pub to_read_contents: u64,
    pub to_read_bytes: u64,
}

/// What [`Store::keep_hot`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepHotReport {
    pub bucket: String,
    pub prefixes: Vec<String>,
    /// Contents read back into the cache, and their stored bytes.
    pub read_contents: u64,
    pub read_bytes: u64,
    /// Grid buckets (data disks) read, in the order they were read.
    pub grid_buckets: Vec<u32>,
}

/// Whether `key` is under one of `prefixes`.
fn is_hot(prefixes: &[String], key: &str) -> bool {
    prefixes.iter().any(|p| key.starts_with(p.as_str()))
}

/// Every content the current versions under `prefix` read (each part of a part list, and the list itself), with
/// the key naming it.
fn contents_under(
    inner: &Inner,
    bucket: &str,
    prefix: &str,
    f: &mut dyn FnMut(&str, Vec<ContentRecord>) -> Result<()>,
) -> Result<()> {
    let mut query = ListQuery {
        prefix: prefix.to_string(),
        delimiter: None,
        start_after: None,
        max_keys: LIST_PAGE,
    };
    loop {
        let page = inner.catalog.list_objects(bucket, &query)?;
        for object in &page.objects {
            let Some(content) = inner.catalog.get_content(&object.content)? else {
                continue;
            };
            let mut all = vec![content.clone()];
            for (_, part) in inner.parts_of(&content)? {
                all.push(part);
            }
            f(&object.key, all)?;
        }
        match page.next_start_after {
            Some(next) if page.is_truncated => query.start_after = Some(next),
            _ => return Ok(()),
        }
    }
}

/// Pin the contents of `key` when a bucket with `hot_prefixes` keeps it hot (persistence calls it for every
/// content it persists: `owner` is the object or upload naming it).
pub(crate) fn pin_if_hot(inner: &Inner, bucket: &str, key: &str, id: &ContentId) -> Result<()> {
    let Some(record) = inner.catalog.get_bucket(bucket)? else {
        return Ok(());
    };
    if is_hot(&record.settings.hot_prefixes, key) {
        inner.catalog.pin_hot(&[*id], true)?;
    }
    Ok(())
}

impl Store {
    /// A bucket's hot prefixes (see [`Store::set_hot_prefixes`]).
    pub fn hot_prefixes(&self, bucket: &str) -> Result<Vec<String>> {
        Ok(self.head_bucket(bucket)?.settings.hot_prefixes)
    }

    /// Keep the objects under `prefixes` of `bucket` in the cache (`""`: the whole bucket; an empty list: none):
    /// stored with the bucket's settings; the contents under prefixes made hot are pinned (those not in the cache
    /// are pinned for when they come back: [`Store::keep_hot`] reads them), those under prefixes made cold and
    /// under no remaining one are unpinned. Catalog only: touches no disk.
    pub fn set_hot_prefixes(&self, bucket: &str, prefixes: Vec<String>) -> Result<HotChange> {
        let mut prefixes = prefixes;
        prefixes.sort();
        prefixes.dedup();
        if prefixes.len() > HOT_PREFIXES_MAX {
            return Err(StoreError::InvalidArgument(format!(
                "{} hot prefixes: a bucket has at most {HOT_PREFIXES_MAX}",
                prefixes.len()
            )));
        }
        if let Some(long) = prefixes
            .iter()
            .find(|p| p.len() > crate::store::KEY_BYTES_MAX)
        {
            return Err(StoreError::InvalidArgument(format!(
                "hot prefix of {} bytes: at most {}",
                long.len(),
                crate::store::KEY_BYTES_MAX
            )));
        }
        let inner = self.inner();
        let record = self.head_bucket(bucket)?;
        let before = record.settings.hot_prefixes.clone();
        let mut settings = record.settings;
        settings.hot_prefixes = prefixes.clone();
        inner.catalog.set_bucket_settings(bucket, &settings)?;
        let mut change = HotChange {
            bucket: bucket.to_string(),
            prefixes: prefixes.clone(),
            ..Default::default()
        };
        // Made cold: unpin what no remaining prefix keeps.
        for gone in before.iter().filter(|p| !prefixes.contains(p)) {
            contents_under(inner, bucket, gone, &mut |key, contents| {
                if !is_hot(&prefixes, key) {
                    let ids: Vec<ContentId> = contents.iter().map(|c| c.id).collect();
                    change.unpinned += inner.catalog.pin_hot(&ids, false)?;
                }
                Ok(())
            })?;
        }
        // Made hot (all of them again: cheap, and it repairs pins lost to a shared content).
        for prefix in &prefixes {
            contents_under(inner, bucket, prefix, &mut |_, contents| {
                let ids: Vec<ContentId> = contents.iter().map(|c| c.id).collect();
                change.pinned += inner.catalog.pin_hot(&ids, true)?;
                for c in contents.iter().filter(|c| to_read_back(c)) {
                    change.to_read_contents += 1;
                    change.to_read_bytes += c.stored_bytes;
                }
                Ok(())
            })?;
        }
        Ok(change)
    }

    /// Read back into the cache every content under `bucket`'s hot prefixes that is not there (pinned, so it
    /// stays): grouped by grid bucket, each data disk held up for its group and read in on-disk order, the spin-up
    /// attributed `prefetch of BUCKET/PREFIX (keep hot)`. `progress(done_bytes, total_bytes)`. Fails when the
    /// cache has no room left (`SlowDown`, as an upload would), keeping what it read.
    pub fn keep_hot(
        &self,
        bucket: &str,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<KeepHotReport> {
        let inner = self.inner();
        let prefixes = self.hot_prefixes(bucket)?;
        let mut report = KeepHotReport {
            bucket: bucket.to_string(),
            prefixes: prefixes.clone(),
            ..Default::default()
        };
        // grid bucket -> (first prefix naming it, contents with their disk offsets)
        let mut groups: std::collections::BTreeMap<u32, (String, Vec<(u64, ContentRecord)>)> =
            Default::default();
        let mut seen: HashSet<ContentId> = HashSet::new();
        let mut total = 0u64;
        for prefix in &prefixes {
            contents_under(inner, bucket, prefix, &mut |_, contents| {
                for c in contents {
                    if !to_read_back(&c) || !seen.insert(c.id) {
                        continue;
                    }
                    let (Some(grid_bucket), Some(offset)) =
                        (c.grid_bucket, disk_offset(inner, &c)?)
                    else {
                        continue;
                    };
                    total += c.stored_bytes;
                    groups
                        .entry(grid_bucket)
                        .or_insert_with(|| (prefix.clone(), Vec::new()))
                        .1
                        .push((offset, c));
                }
                Ok(())
            })?;
        }
        progress(0, total);
        let power = inner.engine.power();
        let geometry = inner.engine.geometry();
        let mut done = 0u64;
        for (grid_bucket, (prefix, mut contents)) in groups {
            contents.sort_by_key(|(offset, _)| *offset);
            report.grid_buckets.push(grid_bucket);
            let _reason =
                WakeReason::about(WakeKind::Prefetch, format!("{bucket}/{prefix} (keep hot)"))
                    .enter();
            let _up = power.acquire(geometry.bucket_disk(grid_bucket as usize));
            for (_, planned) in contents {
                let Some(content) = inner.catalog.get_content(&planned.id)? else {
                    continue;
                };
                if to_read_back(&content) {
                    inner.catalog.pin_hot(&[content.id], true)?;
                    let copied = crate::archive::copy_into_cache(inner, &content)?;
                    if copied > 0 {
                        report.read_contents += 1;
                        report.read_bytes += copied;
                        let p = &inner.prefetch;
                        p.hot_read_contents.fetch_add(1, Ordering::Relaxed);
                        p.hot_read_bytes.fetch_add(copied, Ordering::Relaxed);
                    }
                }
                done += planned.stored_bytes;
                progress(done, total);
            }
        }
        Ok(report)
    }

    /// Reads served from the cache and the grid, and what prefetch and keep-hot did, since the store opened.
    pub fn cache_reads(&self) -> CacheReads {
        let p = &self.inner().prefetch;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (from_cache, from_grid) = (load(&p.from_cache), load(&p.from_grid));
        CacheReads {
            from_cache,
            from_grid,
            hit_ratio: if from_cache + from_grid == 0 {
                0.0
            } else {
                from_cache as f64 / (from_cache + from_grid) as f64
            },
            prefetches: load(&p.prefetches),
            prefetches_dropped: load(&p.prefetches_dropped),
            prefetched_contents: load(&p.prefetched_contents),
            prefetched_bytes: load(&p.prefetched_bytes),
            prefetch_hits: load(&p.prefetch_hits),
            prefetch_no_room: load(&p.prefetch_no_room),
            hot_read_contents: load(&p.hot_read_contents),
            hot_read_bytes: load(&p.hot_read_bytes),
        }
    }
}

/// Persisted, with bytes, and not in the cache: what keep-hot reads back.
fn to_read_back(c: &ContentRecord) -> bool {
    c.state == ContentState::Persisted
        && c.cache_path.is_none()
        && c.stored_bytes > 0
        && c.stored_form != permafrost_catalog::StoredForm::Parts
}
