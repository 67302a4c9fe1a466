//! Garbage collection of unreferenced contents, and recovery on open.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use permafrost_catalog::{ContentState, WorkKind};

use crate::cache::{CONTENTS_DIR, PARTS_DIR};
use crate::store::Inner;
use crate::Result;

/// Contents examined per catalog query.
const GC_BATCH: usize = 256;

/// What one garbage collection removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GcReport {
    /// Unreferenced contents deleted.
    pub contents_removed: u64,
    /// Their stored bytes (cache files and grid extents given back).
    pub freed_bytes: u64,
}

/// Grace of unreferenced contents when a writer waits for cache room: long enough for a reader that looked an
/// object up to open it (then its hold protects the content), short enough that dead contents never keep the
/// cache full. The full `gc_grace_ms` applies otherwise.
pub(crate) const PRESSURE_GRACE_MS: u64 = 5_000;

/// The collector thread: every `gc_interval_ms`, remove contents unreferenced for longer than `gc_grace_ms`; when
/// a writer waits for cache room (`Inner::gc_for_room`), at once those unreferenced for longer than
/// [`PRESSURE_GRACE_MS`] that no reader holds.
pub(crate) fn gc_loop(inner: &Inner) {
    let mut last = std::time::Instant::now();
    let mut last_for_room = std::time::Instant::now();
    while !inner.stop.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let result = if last.elapsed().as_millis() as u64 >= inner.config.gc_interval_ms {
            last = std::time::Instant::now();
            collect(inner, false)
        } else if last_for_room.elapsed().as_millis() >= 250
            && inner.gc_for_room.swap(false, Ordering::SeqCst)
        {
            last_for_room = std::time::Instant::now();
            collect_for_room(inner)
        } else {
            continue;
        };
        if let Err(e) = result {
            inner.record_error(format!("garbage collector: {e}"));
        }
    }
}

/// Remove unreferenced contents (after the grace period unless `ignore_grace`): their segments, the extents no
/// longer used (ranges back to the free lists) and their cache files.
pub(crate) fn collect(inner: &Inner, ignore_grace: bool) -> Result<GcReport> {
    let cutoff = if ignore_grace {
        u64::MAX
    } else {
        permafrost_catalog::now_ms().saturating_sub(inner.config.gc_grace_ms)
    };
    collect_before(inner, cutoff, false)
}

/// The collection a writer waiting for cache room asks for: contents unreferenced for longer than
/// [`PRESSURE_GRACE_MS`] (or the configured grace, if shorter) that no reader of this process holds.
pub(crate) fn collect_for_room(inner: &Inner) -> Result<GcReport> {
    let grace = inner.config.gc_grace_ms.min(PRESSURE_GRACE_MS);
    collect_before(
        inner,
        permafrost_catalog::now_ms().saturating_sub(grace),
        true,
    )
}

fn collect_before(inner: &Inner, cutoff: u64, skip_held: bool) -> Result<GcReport> {
    let _guard = inner.persister.work_lock.lock();
    let mut report = GcReport::default();
    let mut seen = HashSet::new();
    loop {
        let candidates = inner.catalog.gc_candidates(cutoff, GC_BATCH + seen.len())?;
        let fresh: Vec<_> = candidates
            .into_iter()
            .filter(|id| seen.insert(*id))
            .collect();
        if fresh.is_empty() {
            return Ok(report);
        }
        for id in fresh {
            if skip_held && inner.reading.lock().contains_key(&id) {
                continue;
            }
            let outcome = inner.catalog.gc_content(&id)?;
            report.contents_removed += outcome.contents_removed;
            report.freed_bytes += outcome.stored_bytes_removed;
            inner.cache.release(outcome.inline_bytes_freed);
            inner.run_work(outcome.work);
        }
    }
}

/// Bring the data directory back to a consistent state after a stop or a crash:
/// redo pending work, remove partial uploads and orphan cache files, recount the cache, free extents whose
/// write was interrupted and re-queue their contents. Unpersisted contents are picked up by the persistence
/// manager (they are `cached` or `placed` in the catalog); the engine replayed its journal when it opened.
pub(crate) fn recover(inner: &Inner) -> Result<()> {
    let cache = &inner.cache;
    // 1. Pending work (cache deletions decided before the stop).
    let work = inner.catalog.pending_work()?;
    let mut done = Vec::new();
    for item in work {
        match &item.kind {
            WorkKind::DeleteCacheFile { path } => cache.remove(path)?,
        }
        done.push(item.id);
    }
    inner.catalog.finish_work(&done)?;
    // 2. Partial uploads and files the catalog does not know (renamed but never committed).
    let known: HashSet<String> = inner.catalog.cache_files()?.into_iter().collect();
    let mut used = 0;
    for file in cache.all_files()? {
        let keep = (file.starts_with(CONTENTS_DIR) || file.starts_with(PARTS_DIR))
            && known.contains(&file);
        if keep {
            used += std::fs::metadata(cache.absolute(&file))
                .map(|m| m.len())
                .unwrap_or(0);
        } else {
            cache.remove(&file)?;
        }
    }
    // Small contents cached in the catalog count too.
    cache.set_used(used + inner.catalog.stats()?.inline_bytes);
    // 3. Extents whose write was interrupted: free them; their contents go back to `placed`.
    let unwritten: Vec<i64> = inner
        .catalog
        .unwritten_extents()?
        .into_iter()
        .map(|e| e.extent_id)
        .collect();
    let mut interrupted = Vec::new();
    for c in inner
        .catalog
        .contents_in_state(ContentState::Persisting, usize::MAX >> 1)?
    {
        if inner.catalog.segments(&c.id)?.is_empty() {
            interrupted.push(c.id);
        }
    }
    if !unwritten.is_empty() || !interrupted.is_empty() {
        tracing::info!(
            extents = unwritten.len(),
            contents = interrupted.len(),
            "re-queueing interrupted persists"
        );
        inner.catalog.abandon_extents(&unwritten, &interrupted)?;
    }
    Ok(())
}
