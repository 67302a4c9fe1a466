//! The persistence manager (thesis §5.3.3–5.3.4): placement of new contents, the watchdog, and writing extents
//! to the grid through write promises.
//!
//! One thread runs [`manager_loop`]: every `watchdog.interval_ms` (or when woken) it places cached contents
//! (strategy per S3 bucket, `permafrost-policy`), asks the watchdog policy which grid buckets to persist, and
//! persists them. A persist step takes the contents placed on one grid bucket (bounded by
//! `persist_batch_bytes_max`), plans extents — large contents get their own (extent 0 opens with the manifest),
//! small ones are packed per dataset — allocates them in one catalog transaction (state `persisting`), writes
//! runs of contiguous extents through one write promise each, records every extent's BLAKE3 and the segments,
//! and marks the contents `persisted` (delayed mode: once the engine's parity deltas are drained). A failure
//! frees the allocation and returns the contents to `placed`.
//!
//! The grid buckets of one horizontal parity group are persisted at the same time, one thread each
//! ([`persist_grid_buckets`]); placement puts datasets that wait together side by side in one group, so their
//! parity deltas merge (delayed mode). Each write promise writes `persist_chunk_bytes` engine chunks, several
//! in flight (`persist_chunks_in_flight`, shared by a group's threads). Between chunks a persist pauses while
//! reads wait for or read its disks, or a request that waited the scheduler's `max_wait_ms` waits for the power
//! budget (`PowerManager::yield_to_reads`: deadline scheduler only, and never more than `persist_yield_max_ms`
//! beyond the time it wrote since, so persistence keeps at least about half of the disks' time).

use permafrost_disk::power::{ReadYield, WakeKind, WakeReason};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use parking_lot::Mutex;
use permafrost_catalog::{
    ContentId, ContentOwner, ContentRecord, ContentState, ExtentKind, ExtentRecord, NewExtent,
    SegmentRecord, StoredForm,
};
use permafrost_disk::power::PowerState;
use permafrost_engine::{Engine, WriteMode, WritePromise};
use permafrost_format::{
    extent_bytes, plan_content_extents, write_extent, ChunkIndex, ExtentHeader, Manifest,
    PackWriter, PartRef, Role, EXTENT_OVERHEAD_BYTES, PACK_HEADER_BYTES,
};
use permafrost_policy::{
    placement_by_name, BucketHealth, BucketView, CacheView, ObjectToPlace, Placement,
    PlacementConfig, TargetView, WatchdogPolicy,
};

use crate::store::Inner;
use crate::{io_error, Result, StoreConfig, StoreError};

/// Contents placed per catalog query.
const PLACE_BATCH: usize = 1000;
/// Contents considered per persist batch (besides `persist_batch_bytes_max`).
const PERSIST_BATCH_CONTENTS: usize = 20_000;
/// The least a content's manifest takes in a pack (its fixed fields; names and lists add to it).
const MANIFEST_BYTES_MIN: u64 = 128;
/// Bytes per piece on the pipe between a pack writer and its extent.
const PIPE_PIECE_BYTES: usize = 256 << 10;

pub(crate) struct Persister {
    placement_config: PlacementConfig,
    /// Strategy instances by name (each keeps its own dataset map).
    placements: Mutex<HashMap<String, Box<dyn Placement>>>,
    /// Replaced at run time by the operator (`Store::set_watchdog`).
    watchdog: parking_lot::RwLock<WatchdogPolicy>,
    /// Serializes persist steps with each other and with the garbage collector.
    pub work_lock: Mutex<()>,
}

impl Persister {
    pub fn new(config: &StoreConfig, _engine: &Engine) -> Result<Persister> {
        let mut placement_config = PlacementConfig::default();
        placement_config.dataset_affinity.prefix_depth = config.dataset_prefix_depth;
        Ok(Persister {
            placement_config,
            placements: Mutex::new(HashMap::new()),
            watchdog: parking_lot::RwLock::new(WatchdogPolicy::new(config.watchdog.clone())),
            work_lock: Mutex::new(()),
        })
    }

    /// The watchdog's thresholds in force.
    pub fn watchdog(&self) -> permafrost_policy::WatchdogConfig {
        self.watchdog.read().config().clone()
    }

    /// Replace the watchdog's thresholds (from the next round on).
    pub fn set_watchdog(&self, config: permafrost_policy::WatchdogConfig) {
        *self.watchdog.write() = WatchdogPolicy::new(config);
    }

    /// Tell the strategies about the datasets placed by earlier runs.
    pub fn remember_datasets(&self, inner: &Inner) -> Result<()> {
        for dataset in inner.catalog.datasets()? {
            if let Some(grid_bucket) = dataset.grid_bucket {
                let name = inner.settings_of(&dataset.bucket).placement;
                let mut placements = self.placements.lock();
                let strategy = self.strategy(&mut placements, &name)?;
                let object = ObjectToPlace {
                    s3_bucket: &dataset.bucket,
                    dataset: Some(&dataset.id),
                    ..Default::default()
                };
                strategy.remember(&object, grid_bucket as usize);
            }
        }
        Ok(())
    }

    fn strategy<'a>(
        &self,
        placements: &'a mut HashMap<String, Box<dyn Placement>>,
        name: &str,
    ) -> Result<&'a mut Box<dyn Placement>> {
        if !placements.contains_key(name) {
            let strategy = placement_by_name(name, &self.placement_config)
                .map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
            placements.insert(name.to_string(), strategy);
        }
        Ok(placements.get_mut(name).expect("inserted above"))
    }
}

fn bucket_of_dataset(dataset: &str) -> &str {
    dataset.split('/').next().unwrap_or(dataset)
}

/// Most bytes the grid's sparse disk files can grow by per byte persisted: the data disk, three parity disks
/// (each shared by several data disks) and IDR's check blocks; about 4.3 for one dataset on 8×6:4+1.
const GRID_BYTES_PER_BYTE_MAX: u64 = 5;

/// The thread body.
pub(crate) fn manager_loop(inner: &Inner) {
    while !inner.stop.load(std::sync::atomic::Ordering::SeqCst) {
        let interval_ms = inner.persister.watchdog().interval_ms.max(10);
        inner.sleep(interval_ms);
        if inner.stop.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        match tick(inner) {
            Ok(()) => inner.record_round_ok(),
            Err(e) => inner.record_failure("persistence manager", &e),
        }
    }
}

/// One round: place, mark drained delayed writes persisted, ask the watchdog, persist, trim the cache.
fn tick(inner: &Inner) -> Result<()> {
    place_cached(inner)?;
    mark_drained(inner)?;
    let outstanding = inner.catalog.outstanding()?;
    inner.record_round_ok(); // the catalog database answered
    let power = inner.engine.power();
    let geometry = inner.engine.geometry();
    let targets: Vec<TargetView> = outstanding
        .iter()
        .map(|o| TargetView {
            disk: o.grid_bucket as usize,
            spinning: power.state(geometry.bucket_disk(o.grid_bucket as usize)) != PowerState::Off,
            outstanding_bytes: waiting_bytes(o),
            oldest_outstanding_ms: Some(o.oldest_ms),
            persisting: false,
        })
        .collect();
    // What the cache cannot evict is what waits to be persisted (placed just above, so nearly all of it); the
    // rest (persisted copies, restored copies, uploads still streaming in) counts as evictable. Restored copies
    // and streaming uploads cannot be evicted either: when they leave a writer without room, the writer waits in
    // `reserve_cache`, and that alone puts the cache under pressure.
    let used_bytes = inner.cache.used_bytes();
    let waiting: u64 = outstanding.iter().map(|o| o.stored_bytes).sum();
    let view = CacheView {
        capacity_bytes: inner.cache.capacity_bytes,
        used_bytes,
        evictable_bytes: used_bytes.saturating_sub(waiting),
        writers_waiting: inner
            .writers_waiting
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0,
        targets: &targets,
    };
    let actions = inner
        .persister
        .watchdog
        .read()
        .decide(permafrost_catalog::now_ms(), &view);
    for action in &actions {
        tracing::debug!(grid_bucket = action.disk, reason = ?action.reason, "persisting");
    }
    let buckets: Vec<u32> = actions.iter().map(|a| a.disk as u32).collect();
    persist_grid_buckets(inner, &buckets)?;
    let used = inner.cache.used_bytes();
    if used > inner.cache.capacity_bytes {
        inner.evict_lru(used - inner.cache.capacity_bytes)?;
    }
    inner.flush_access();
    Ok(())
}

/// What a grid bucket's waiting contents will take on the grid at least: their stored bytes and a manifest each
/// (a content without stored bytes — an empty object, a part list — still waits to be persisted).
fn waiting_bytes(o: &permafrost_catalog::Outstanding) -> u64 {
    o.stored_bytes + o.contents * MANIFEST_BYTES_MIN
}

/// What placement sees of every grid bucket.
fn bucket_views(inner: &Inner) -> Result<Vec<BucketView>> {
    let engine = &inner.engine;
    let geometry = engine.geometry();
    let usage: HashMap<u32, u64> = inner
        .catalog
        .grid_usage()?
        .into_iter()
        .map(|u| (u.grid_bucket, u.used_bytes()))
        .collect();
    let waiting: HashMap<u32, u64> = inner
        .catalog
        .outstanding()?
        .into_iter()
        .map(|o| (o.grid_bucket, o.stored_bytes))
        .collect();
    Ok((0..engine.buckets())
        .map(|b| {
            let disk = geometry.bucket_disk(b);
            let health = if engine.is_failed(disk) {
                BucketHealth::Failed
            } else if engine.defect_bytes(disk) > 0 {
                BucketHealth::Rebuilding
            } else {
                BucketHealth::Ok
            };
            BucketView {
                capacity_bytes: engine.bucket_capacity_bytes(),
                used_bytes: usage.get(&(b as u32)).copied().unwrap_or(0),
                waiting_bytes: waiting.get(&(b as u32)).copied().unwrap_or(0),
                spinning: engine.power().state(disk) != PowerState::Off,
                health,
                // Identified by its hP disk: members share hP and vhP, so their parity deltas merge.
                parity_group: Some(geometry.parity_targets(disk).hp),
                // A disk the grid grew by (numbered after the layout's disks).
                added: disk >= geometry.layout().disks(),
            }
        })
        .collect())
}

/// Bytes a content will take on the grid at most (its stored bytes, a manifest and the extent framing).
fn footprint_bytes(content: &ContentRecord) -> u64 {
    content.stored_bytes + content.chunk_index.len() as u64 + 2 * 4096
}

/// Return to the cache's placement the contents placed on a grid bucket whose data disk has failed and not
/// yet written there: a failed disk is never written until it is replaced and rebuilt, so they are placed again
/// on a healthy bucket. Returns how many.
///
/// Such a content has no extent on the failed bucket: a content leaves `Placed` (`begin_extents`, state
/// `persisting`) together with every extent it needs, and a batch that fails to write any of them gives them
/// all up (`abandon_extents`) and returns to `Placed`. Contents already `persisting` or `persisted` there stay:
/// their bytes are rebuilt with the disk.
fn unplace_from_failed(inner: &Inner) -> Result<u64> {
    let geometry = inner.engine.geometry();
    let mut moved = 0;
    for o in inner.catalog.outstanding()? {
        if inner
            .engine
            .is_failed(geometry.bucket_disk(o.grid_bucket as usize))
        {
            moved += unplace_bucket(inner, o.grid_bucket)?;
        }
    }
    Ok(moved)
}

/// Return the contents placed on `grid_bucket` (whose data disk failed) to placement.
fn unplace_bucket(inner: &Inner, grid_bucket: u32) -> Result<u64> {
    let moved = inner.catalog.unplace_contents(grid_bucket)?;
    if moved > 0 {
        let disk = inner.engine.geometry().bucket_disk(grid_bucket as usize);
        tracing::warn!(
            "disk {disk} has failed: {moved} contents placed on grid bucket {grid_bucket} and not yet written \
             there are placed again on healthy buckets"
        );
    }
    Ok(moved)
}

/// Choose a grid bucket for every cached content (and first, again for the contents waiting for a grid bucket
/// whose data disk has failed).
pub(crate) fn place_cached(inner: &Inner) -> Result<usize> {
    unplace_from_failed(inner)?;
    let mut placed = 0;
    loop {
        let contents = inner
            .catalog
            .contents_in_state(ContentState::Cached, PLACE_BATCH)?;
        if contents.is_empty() {
            return Ok(placed);
        }
        let mut views = bucket_views(inner)?;
        let mut progress = false;
        for content in contents {
            if content.refcount == 0 {
                continue; // deleted before placement: the collector takes it
            }
            if crate::growing::is_growing(inner, &content)? {
                continue; // its list is not final yet: placed when the growing object is finished
            }
            let bucket = bucket_of_dataset(&content.dataset);
            let name = inner.settings_of(bucket).placement;
            let size_bytes = footprint_bytes(&content);
            let object = ObjectToPlace {
                s3_bucket: bucket,
                dataset: Some(&content.dataset),
                size_bytes,
                ..Default::default()
            };
            let chosen = {
                let mut placements = inner.persister.placements.lock();
                let strategy = inner.persister.strategy(&mut placements, &name)?;
                strategy.place(&object, &views)
            };
            match chosen {
                Ok(grid_bucket) => {
                    inner
                        .catalog
                        .place_content(&content.id, grid_bucket as u32)?;
                    views[grid_bucket].waiting_bytes += size_bytes;
                    placed += 1;
                    progress = true;
                }
                Err(e) => inner.record_error(format!(
                    "cannot place content {} of dataset {}: {e}",
                    content.id, content.dataset
                )),
            }
        }
        if !progress {
            return Ok(placed);
        }
    }
}

/// Place and persist everything waiting, then drain parity so that all of it is fully persisted.
/// A disk failing during the run returns what waits for it to placement: the run places and persists again
/// (at most once per grid bucket, each time with fewer healthy ones).
pub(crate) fn persist_all(inner: &Inner) -> Result<()> {
    for _ in 0..=inner.engine.buckets() {
        place_cached(inner)?;
        let buckets: Vec<u32> = inner
            .catalog
            .outstanding()?
            .iter()
            .map(|o| o.grid_bucket)
            .collect();
        if persist_grid_buckets(inner, &buckets)? == 0 {
            break;
        }
    }
    complete_parity(inner)
}

/// Delayed mode: drain every parity delta now and mark the contents written so far persisted.
pub(crate) fn complete_parity(inner: &Inner) -> Result<()> {
    let _wake = WakeReason::about(WakeKind::Persist, "parity of delayed writes").enter();
    let waiting = written_but_persisting(inner)?;
    inner.engine.flush()?;
    inner.catalog.mark_persisted(&waiting)?;
    Ok(())
}

/// Contents whose extents are written and whose parity may still be pending.
fn written_but_persisting(inner: &Inner) -> Result<Vec<ContentId>> {
    let mut out = Vec::new();
    for c in inner
        .catalog
        .contents_in_state(ContentState::Persisting, usize::MAX >> 1)?
    {
        let segments = inner.catalog.segments(&c.id)?;
        if !segments.is_empty() && segments.iter().all(|s| s.extent.written) {
            out.push(c.id);
        }
    }
    Ok(out)
}

/// Mark delayed-mode contents persisted once the engine has no parity delta pending.
fn mark_drained(inner: &Inner) -> Result<()> {
    let waiting = written_but_persisting(inner)?;
    if waiting.is_empty() {
        return Ok(());
    }
    if inner.engine.status()?.pending_delta_bytes == 0 {
        inner.catalog.mark_persisted(&waiting)?;
    }
    Ok(())
}

/// The manifest of a content, naming its owner (an object, or the upload or object it is a part of); `parts`
/// are the parts of a part-list content.
fn manifest_of(
    content: &ContentRecord,
    owner: &ContentOwner,
    parts: &[(permafrost_catalog::ContentPart, ContentRecord)],
) -> Result<Manifest> {
    let index = || -> Result<Option<ChunkIndex>> {
        if content.chunk_index.is_empty() {
            Ok(None)
        } else {
            Ok(Some(ChunkIndex::decode(&content.chunk_index)?.0))
        }
    };
    let stored_form = match content.stored_form {
        StoredForm::Raw => permafrost_format::StoredForm::Raw,
        StoredForm::Chunked => {
            permafrost_format::StoredForm::Chunked(index()?.ok_or_else(|| {
                StoreError::Internal(format!("content {} has no chunk index", content.id))
            })?)
        }
        StoredForm::AsSent => permafrost_format::StoredForm::AsSent { frames: index()? },
        StoredForm::Parts => permafrost_format::StoredForm::Parts(
            parts
                .iter()
                .map(|(p, _)| PartRef {
                    blake3: p.part.hash,
                    encoding: crate::multipart::algorithm_of(p.part.encoding),
                    logical_len: p.logical_bytes,
                })
                .collect(),
        ),
    };
    let (bucket, key, user_metadata, content_type, created_ms, role) = match owner {
        ContentOwner::Object(o) => (
            &o.bucket,
            &o.key,
            o.user_metadata.iter().cloned().collect::<BTreeMap<_, _>>(),
            o.content_type.clone(),
            o.last_modified_ms,
            Role::Object,
        ),
        ContentOwner::Part {
            bucket,
            key,
            created_ms,
        } => (bucket, key, BTreeMap::new(), None, *created_ms, Role::Part),
    };
    // A part list is named on the grid by the hash of its parts: its content id for a completed upload, and the
    // name a frozen growing list (a noncurrent version left by finishing in a versioned bucket) would have had,
    // whose own id derives from its upload id.
    let blake3 = match &stored_form {
        permafrost_format::StoredForm::Parts(refs) => permafrost_format::part_list_hash(refs),
        _ => content.id.hash,
    };
    Ok(Manifest {
        bucket: bucket.clone(),
        key: key.clone(),
        user_metadata,
        content_type,
        content_encoding: crate::multipart::algorithm_of(content.id.encoding),
        stored_form,
        logical_len: content.logical_bytes,
        stored_len: content.stored_bytes,
        blake3,
        created_unix_ms: created_ms,
        dataset: content.dataset.clone(),
        role,
    })
}

/// A content ready to be written: its manifest record and cache file.
struct Ready {
    content: ContentRecord,
    manifest: Manifest,
    record_len: usize,
    mode: WriteMode,
}

/// One extent to write.
enum Unit {
    /// Extent `plan.extent_id` of a large content.
    Content {
        ready: usize,
        plan: permafrost_format::ContentExtent,
        record: Option<Vec<u8>>,
    },
    /// A pack of small contents.
    Pack {
        pack_id: u128,
        members: Vec<usize>,
        payload_len: u32,
    },
}

/// Persist the contents placed on `grid_buckets`. The buckets of one horizontal parity group are persisted at
/// the same time, one thread each: their extents go to about the same offsets at about the same time (placement
/// puts datasets persisted together side by side in one group), so in delayed mode the drain merges their parity
/// deltas for the shared `hP` and `vhP` whatever the delta cache's size (thesis §4.3.5: "sequential delayed
/// writes to all disks of a horizontal parity group"), and the group's data disks are written in parallel.
/// Groups follow one another; the chunks in flight (`persist_chunks_in_flight`) are shared by a group's threads.
/// Returns how many contents went back to placement because the data disk of their grid bucket has failed.
pub(crate) fn persist_grid_buckets(inner: &Inner, grid_buckets: &[u32]) -> Result<u64> {
    let geometry = inner.engine.geometry();
    let mut groups: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for &b in grid_buckets {
        let hp = geometry.parity_targets(geometry.bucket_disk(b as usize)).hp;
        let members = groups.entry(hp).or_default();
        if !members.contains(&b) {
            members.push(b);
        }
    }
    let _guard = inner.persister.work_lock.lock();
    let mut unplaced = 0;
    for members in groups.into_values() {
        let in_flight = (inner.config.persist_chunks_in_flight / members.len()).max(1);
        if let [only] = members[..] {
            unplaced += persist_grid_bucket(inner, only, in_flight)?;
            continue;
        }
        let results: Vec<Result<u64>> = std::thread::scope(|scope| {
            let threads: Vec<_> = members
                .iter()
                .map(|&b| {
                    std::thread::Builder::new()
                        .name(format!("permafrost-persist-{b}"))
                        .spawn_scoped(scope, move || persist_grid_bucket(inner, b, in_flight))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| match t {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Err(StoreError::Internal("a persist thread panicked".into()))
                    }),
                    Err(e) => Err(io_error("cannot start a persist thread", e)),
                })
                .collect()
        });
        for result in results {
            unplaced += result?;
        }
    }
    Ok(unplaced)
}

/// Persist the contents placed on `grid_bucket`, one bounded batch after another, with up to `in_flight` engine
/// chunks at a time. The caller holds the work lock. When the bucket's data disk has failed (before or during a
/// batch), its contents waiting go back to placement instead: returns how many.
fn persist_grid_bucket(inner: &Inner, grid_bucket: u32, in_flight: usize) -> Result<u64> {
    let _wake = WakeReason::about(WakeKind::Persist, format!("grid bucket {grid_bucket}")).enter();
    let data_disk = inner.engine.geometry().bucket_disk(grid_bucket as usize);
    let mut skipped: HashSet<ContentId> = HashSet::new();
    loop {
        if inner.engine.is_failed(data_disk) {
            return unplace_bucket(inner, grid_bucket);
        }
        let limit = PERSIST_BATCH_CONTENTS + skipped.len();
        let candidates = inner.catalog.placed_on(grid_bucket, limit)?;
        let mut more_follow = candidates.len() == limit;
        let mut batch = Vec::new();
        let mut batch_bytes = 0u64;
        for content in candidates.into_iter().filter(|c| !skipped.contains(&c.id)) {
            if batch_bytes > 0
                && batch_bytes + content.stored_bytes > inner.config.persist_batch_bytes_max
            {
                more_follow = true;
                break;
            }
            batch_bytes += content.stored_bytes;
            batch.push(content);
        }
        if batch.is_empty() {
            return Ok(0);
        }
        let mut ready = Vec::with_capacity(batch.len());
        for content in batch {
            let owner = inner.catalog.owner_of(&content.id)?;
            let has_bytes =
                content.cache_path.is_some() || content.stored_form == StoredForm::Parts;
            match (owner, has_bytes) {
                (Some(owner), true) => {
                    let parts = inner.parts_of(&content)?;
                    let manifest = manifest_of(&content, &owner, &parts)?;
                    let record_len = manifest.encode()?.len();
                    let (bucket, key) = match &owner {
                        ContentOwner::Object(o) => (&o.bucket, &o.key),
                        ContentOwner::Part { bucket, key, .. } => (bucket, key),
                    };
                    crate::prefetch::pin_if_hot(inner, bucket, key, &content.id)?;
                    let mode = inner.settings_of(bucket).write_mode;
                    ready.push(Ready {
                        content,
                        manifest,
                        record_len,
                        mode,
                    });
                }
                (None, _) => {
                    skipped.insert(content.id); // deleted meanwhile
                }
                (Some(_), false) => {
                    inner.record_error(format!(
                        "content {} is placed but has no cache file",
                        content.id
                    ));
                    skipped.insert(content.id);
                }
            }
        }
        if !ready.is_empty() {
            if let Err(e) = persist_batch(inner, grid_bucket, &ready, more_follow, in_flight) {
                // The batch gave its extents up; its contents wait on the bucket again.
                if inner.engine.is_failed(data_disk) {
                    return unplace_bucket(inner, grid_bucket);
                }
                return Err(e);
            }
        }
    }
}

fn payload_bytes_max(inner: &Inner) -> u32 {
    (inner.config.extent_bytes_max - EXTENT_OVERHEAD_BYTES as u64) as u32
}

/// Plan the extents of a batch. With `more_follow`, a dataset's last pack is left out when it is not full (its
/// contents wait for the next batch), so batching does not leave a trail of half-empty packs.
fn plan_units(inner: &Inner, ready: &[Ready], more_follow: bool) -> Result<Vec<Unit>> {
    let payload_max = payload_bytes_max(inner);
    let mut units = Vec::new();
    // Small contents, grouped by dataset (and mode), in packs.
    let mut groups: BTreeMap<(String, u8), Vec<usize>> = BTreeMap::new();
    for (i, r) in ready.iter().enumerate() {
        if r.content.stored_bytes < inner.config.pack_threshold_bytes {
            groups
                .entry((r.content.dataset.clone(), r.mode as u8))
                .or_default()
                .push(i);
        } else {
            let record = r.manifest.encode()?;
            for plan in plan_content_extents(record.len(), r.content.stored_bytes, payload_max)? {
                let record = (plan.extent_id == 0).then(|| record.clone());
                units.push(Unit::Content {
                    ready: i,
                    plan,
                    record,
                });
            }
        }
    }
    for (_, members) in groups {
        let mut current: Vec<usize> = Vec::new();
        let mut payload = PACK_HEADER_BYTES as u64;
        for i in members {
            let entry = PackWriter::<io::Sink>::entry_bytes(
                ready[i].record_len,
                ready[i].content.stored_bytes,
            );
            if !current.is_empty() && payload + entry > payload_max as u64 {
                units.push(Unit::Pack {
                    pack_id: new_pack_id(),
                    members: std::mem::take(&mut current),
                    payload_len: payload as u32,
                });
                payload = PACK_HEADER_BYTES as u64;
            }
            current.push(i);
            payload += entry;
        }
        if !current.is_empty() && !more_follow {
            units.push(Unit::Pack {
                pack_id: new_pack_id(),
                members: current,
                payload_len: payload as u32,
            });
        }
    }
    Ok(units)
}

fn new_pack_id() -> u128 {
    uuid::Uuid::new_v4().as_u128()
}

fn unit_mode(ready: &[Ready], unit: &Unit) -> WriteMode {
    match unit {
        Unit::Content { ready: i, .. } => ready[*i].mode,
        Unit::Pack { members, .. } => ready[members[0]].mode,
    }
}

fn new_extent(ready: &[Ready], unit: &Unit) -> NewExtent {
    match unit {
        Unit::Content { ready: i, plan, .. } => NewExtent {
            length_bytes: extent_bytes(plan.payload_len),
            payload_bytes: plan.payload_len as u64,
            object_id: ready[*i].content.id.object_id(),
            extent_no: plan.extent_id,
            replica_id: 0,
            kind: ExtentKind::Content,
        },
        Unit::Pack {
            pack_id,
            payload_len,
            ..
        } => NewExtent {
            length_bytes: extent_bytes(*payload_len),
            payload_bytes: *payload_len as u64,
            object_id: pack_id.to_le_bytes(),
            extent_no: 0,
            replica_id: 0,
            kind: ExtentKind::Pack,
        },
    }
}

fn persist_batch(
    inner: &Inner,
    grid_bucket: u32,
    ready: &[Ready],
    more_follow: bool,
    in_flight: usize,
) -> Result<()> {
    let mut units = plan_units(inner, ready, more_follow)?;
    if units.is_empty() {
        units = plan_units(inner, ready, false)?; // nothing full: write what there is rather than wait forever
    }
    let new_extents: Vec<NewExtent> = units.iter().map(|u| new_extent(ready, u)).collect();
    // The grid's disk files grow as they are written: the batch waits (its contents stay cached) rather than
    // take the catalog's and the journal's last bytes.
    let batch_bytes: u64 = new_extents.iter().map(|e| e.length_bytes).sum();
    crate::free_space::check_room(
        &inner.grid_dir,
        batch_bytes.saturating_mul(GRID_BYTES_PER_BYTE_MAX),
        inner.config.free_bytes_min,
        "persisting",
    )
    .map_err(|short| StoreError::SlowDown(format!("persistence waits: {short}")))?;
    let mut included: Vec<usize> = units
        .iter()
        .flat_map(|u| match u {
            Unit::Content { ready, .. } => vec![*ready],
            Unit::Pack { members, .. } => members.clone(),
        })
        .collect();
    included.sort_unstable();
    included.dedup();
    let ids: Vec<ContentId> = included.iter().map(|&i| ready[i].content.id).collect();
    let records = inner.catalog.begin_extents(
        grid_bucket,
        inner.engine.bucket_capacity_bytes(),
        &new_extents,
        &ids,
    )?;
    if crate::planted_bugs::on(&crate::planted_bugs::PERSISTED_BEFORE_DURABLE) {
        inner.catalog.mark_persisted(&ids)?; // the planted bug: persisted before the extents are written
    }
    let started = std::time::Instant::now();
    match write_units(inner, grid_bucket, ready, &units, &records, in_flight) {
        Ok((written, segments, delayed)) => {
            inner
                .catalog
                .finish_extents(&written, &segments, &ids, delayed)?;
            // One line per batch for operators (target `permafrost_store::persist`, on by default).
            let logical_bytes: u64 = included
                .iter()
                .map(|&i| ready[i].content.logical_bytes)
                .sum();
            tracing::info!(
                target: "permafrost_store::persist",
                "persisted a batch to grid bucket {grid_bucket}: {} contents, {logical_bytes} bytes in {} extents \
                 of {batch_bytes} bytes, {} ms{}",
                ids.len(),
                written.len(),
                started.elapsed().as_millis(),
                if delayed { ", parity delayed" } else { "" }
            );
            Ok(())
        }
        Err(e) => {
            let extent_ids: Vec<i64> = records.iter().map(|r| r.extent_id).collect();
            inner.catalog.abandon_extents(&extent_ids, &ids)?;
            Err(e)
        }
    }
}

/// Hashes what goes through it (the first `hash_bytes` bytes: header, payload, crc) into the promise, and
/// pauses between chunks while reads want the bucket's disks (issue 30, "reads before persistence").
struct Tee<'a> {
    promise: &'a mut WritePromise,
    hasher: blake3::Hasher,
    hash_bytes: u64,
    seen_bytes: u64,
    reads: &'a mut Yield,
}

/// A persist's pauses for reads: between two chunks of `chunk_bytes`, it waits while reads wait for or read its
/// disks (bounded by the scheduler's `persist_yield_max_ms`, so it is never starved; `fifo`: never).
struct Yield {
    reads: ReadYield,
    chunk_bytes: u64,
    /// Bytes appended since the last pause point.
    since_bytes: u64,
}

impl Yield {
    fn new(inner: &Inner, grid_bucket: u32) -> Yield {
        let geometry = inner.engine.geometry();
        let data = geometry.bucket_disk(grid_bucket as usize);
        let parity = geometry.parity_targets(data);
        Yield {
            reads: inner
                .engine
                .power()
                .yield_to_reads(&[data, parity.hp, parity.vp, parity.vhp]),
            chunk_bytes: inner.config.persist_chunk_bytes.max(1),
            since_bytes: 0,
        }
    }

    fn appended(&mut self, bytes: u64) {
        self.since_bytes += bytes;
        if self.since_bytes >= self.chunk_bytes {
            self.since_bytes = 0;
            self.reads.between_chunks();
        }
    }
}

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let hash = (self.hash_bytes.saturating_sub(self.seen_bytes)).min(buf.len() as u64) as usize;
        self.hasher.update(&buf[..hash]);
        self.seen_bytes += buf.len() as u64;
        self.promise.append(buf).map_err(io::Error::other)?;
        self.reads.appended(buf.len() as u64);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

type Written = (Vec<(i64, [u8; 32])>, Vec<SegmentRecord>, bool);

fn write_units(
    inner: &Inner,
    grid_bucket: u32,
    ready: &[Ready],
    units: &[Unit],
    records: &[ExtentRecord],
    in_flight: usize,
) -> Result<Written> {
    let mut written = Vec::with_capacity(units.len());
    let mut segments = Vec::new();
    let mut delayed = false;
    let mut reads = Yield::new(inner, grid_bucket);
    let mut i = 0;
    while i < units.len() {
        // A run of contiguous extents with the same mode goes through one promise.
        let mode = unit_mode(ready, &units[i]);
        let mut j = i + 1;
        while j < units.len()
            && unit_mode(ready, &units[j]) == mode
            && records[j].offset == records[j - 1].offset + records[j - 1].length_bytes
        {
            j += 1;
        }
        let run_start = records[i].offset;
        let run_len = records[j - 1].offset + records[j - 1].length_bytes - run_start;
        let mut promise = inner
            .engine
            .write(grid_bucket as usize, run_start, run_len, mode)?
            .with_chunks_in_flight(in_flight)
            .with_chunk_bytes(inner.config.persist_chunk_bytes);
        for k in i..j {
            let hash = write_unit(
                inner,
                ready,
                &units[k],
                &records[k],
                &mut promise,
                &mut segments,
                &mut reads,
            )?;
            written.push((records[k].extent_id, hash));
        }
        promise.commit()?;
        delayed |= mode == WriteMode::Delayed;
        i = j;
    }
    Ok((written, segments, delayed))
}

/// The stored bytes of a content from `stored_offset` on: its cache file (a part list has none).
fn open_stored(
    inner: &Inner,
    content: &ContentRecord,
    stored_offset: u64,
) -> Result<Box<dyn Read + Send>> {
    if content.stored_form == StoredForm::Parts {
        return Ok(Box::new(io::empty()));
    }
    let path = content
        .cache_path
        .as_deref()
        .ok_or_else(|| StoreError::Internal(format!("content {} has no cache file", content.id)))?;
    if path == permafrost_catalog::INLINE_CACHE_PATH {
        let bytes = inner.catalog.inline_bytes(&content.id)?.ok_or_else(|| {
            StoreError::Internal(format!("content {} lost its inline bytes", content.id))
        })?;
        let rest = bytes
            .get(stored_offset as usize..)
            .unwrap_or_default()
            .to_vec();
        return Ok(Box::new(io::Cursor::new(rest)));
    }
    let absolute = inner.cache.absolute(path);
    let mut file = File::open(&absolute)
        .map_err(|e| io_error(format!("cannot open {}", absolute.display()), e))?;
    if stored_offset > 0 {
        use std::io::Seek;
        file.seek(io::SeekFrom::Start(stored_offset))
            .map_err(|e| io_error("cannot seek a cache file", e))?;
    }
    Ok(Box::new(BufReader::new(file)))
}

fn write_unit(
    inner: &Inner,
    ready: &[Ready],
    unit: &Unit,
    record: &ExtentRecord,
    promise: &mut WritePromise,
    segments: &mut Vec<SegmentRecord>,
    reads: &mut Yield,
) -> Result<[u8; 32]> {
    let mut tee = Tee {
        promise,
        hasher: blake3::Hasher::new(),
        hash_bytes: record.payload_bytes + EXTENT_OVERHEAD_BYTES as u64,
        seen_bytes: 0,
        reads,
    };
    match unit {
        Unit::Content {
            ready: r,
            plan,
            record: manifest_record,
        } => {
            let content = &ready[*r].content;
            let stored = open_stored(inner, content, plan.stored_offset)?;
            let head: &[u8] = manifest_record.as_deref().unwrap_or(&[]);
            let payload = head.chain(stored.take(plan.stored_len));
            let header = ExtentHeader {
                object_id: u128::from_le_bytes(record.object_id),
                replica_id: record.replica_id,
                extent_id: plan.extent_id,
                payload_len: plan.payload_len,
            };
            write_extent(&header, payload, &mut tee)?;
            segments.push(SegmentRecord {
                content: content.id,
                seq: plan.extent_id as u32,
                extent_id: record.extent_id,
                offset_in_payload: head.len() as u64,
                length_bytes: plan.stored_len,
            });
        }
        Unit::Pack {
            pack_id,
            members,
            payload_len,
        } => {
            let (tx, rx) = sync_channel::<Vec<u8>>(4);
            let jobs: Vec<(Manifest, ContentRecord)> = members
                .iter()
                .map(|&m| (ready[m].manifest.clone(), ready[m].content.clone()))
                .collect();
            let files: Vec<Box<dyn Read + Send>> = jobs
                .iter()
                .map(|(_, c)| open_stored(inner, c, 0))
                .collect::<Result<_>>()?;
            let limit = *payload_len;
            let writer = std::thread::Builder::new()
                .name("permafrost-pack".into())
                .spawn(
                    move || -> Result<Vec<permafrost_format::PackEntryPlacement>> {
                        let pipe = PipeWriter {
                            tx,
                            piece: Vec::with_capacity(PIPE_PIECE_BYTES),
                        };
                        let mut pack = PackWriter::new(pipe, limit)?;
                        let mut placements = Vec::with_capacity(jobs.len());
                        for ((manifest, _), file) in jobs.iter().zip(files) {
                            placements.push(pack.append(manifest, file)?);
                        }
                        let (len, mut pipe) = pack.finish()?;
                        assert_eq!(len, limit, "pack payload length differs from its plan");
                        pipe.flush().map_err(|e| io_error("pack pipe", e))?;
                        Ok(placements)
                    },
                )
                .expect("spawn a pack writer");
            let header = ExtentHeader {
                object_id: *pack_id,
                replica_id: record.replica_id,
                extent_id: 0,
                payload_len: *payload_len,
            };
            let written = write_extent(
                &header,
                PipeReader {
                    rx,
                    piece: Vec::new(),
                    pos: 0,
                },
                &mut tee,
            );
            let placements = writer
                .join()
                .map_err(|_| StoreError::Internal("the pack writer panicked".into()))??;
            written?;
            for (&m, placement) in members.iter().zip(placements) {
                segments.push(SegmentRecord {
                    content: ready[m].content.id,
                    seq: 0,
                    extent_id: record.extent_id,
                    offset_in_payload: placement.stored_offset,
                    length_bytes: placement.stored_len,
                });
            }
        }
    }
    assert_eq!(
        tee.seen_bytes, record.length_bytes,
        "extent {} wrote a different length than allocated",
        record.extent_id
    );
    Ok(*tee.hasher.finalize().as_bytes())
}

/// The writing end of a bounded pipe (pieces of `PIPE_PIECE_BYTES`).
struct PipeWriter {
    tx: SyncSender<Vec<u8>>,
    piece: Vec<u8>,
}

impl Write for PipeWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(PIPE_PIECE_BYTES - self.piece.len());
        self.piece.extend_from_slice(&buf[..n]);
        if self.piece.len() == PIPE_PIECE_BYTES {
            self.flush()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        if !self.piece.is_empty() {
            let piece = std::mem::replace(&mut self.piece, Vec::with_capacity(PIPE_PIECE_BYTES));
            self.tx.send(piece).map_err(|_| {
                io::Error::new(io::ErrorKind::BrokenPipe, "the extent writer stopped")
            })?;
        }
        Ok(())
    }
}

/// The reading end of the pipe.
struct PipeReader {
    rx: Receiver<Vec<u8>>,
    piece: Vec<u8>,
    pos: usize,
}

impl Read for PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.piece.len() {
            match self.rx.recv() {
                Ok(piece) => {
                    self.piece = piece;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.piece.len() - self.pos);
        buf[..n].copy_from_slice(&self.piece[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
