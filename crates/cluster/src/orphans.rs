//! Orphan fragments collected after a grace period (issue 31, `docs/cluster.md` "Orphan fragments").
//!
//! A parity placement stores its three fragments on their holders first and publishes them in the directory
//! after (`crate::parity`); a placement that fails between the two (a holder or the database gone) leaves
//! fragments in the holders' [`FRAGMENTS_BUCKET`] that no directory row names. On each catch-up pass a node
//! lists its fragments bucket, compares it with the directory's fragment rows for this node
//! ([`ClusterDb::fragments_on`]) and deletes a fragment only when it has been seen unlisted, pass after pass,
//! for at least the grace period (`[cluster] orphan_grace_ms`), and the directory still does not list it when
//! asked again just before the delete ([`ClusterDb::parity_object`]).
//!
//! **Why first-seen, not the object's time.** A fragment is stored with its object's `last_modified_ms` (a
//! replica keeps its version's time), so a fragment placed now for an object written a week ago looks a week
//! old; the grace runs from the first pass that saw it unlisted, kept in memory (a restart starts it again:
//! later, never earlier).
//!
//! **Whole copies** are not collected here: the directory is made equal to what the store holds
//! (`crate::runtime::reconcile` publishes a copy no row names unless its node has a tombstone for it, and leaves
//! a tombstone for a copy older than the version listed), a copy received from another node is covered by its
//! mark (a tombstone) until its publish, and a newer version's publish or a DELETE leaves every other holder a
//! tombstone, so a whole copy is deleted by its node's next tombstone pass instead of staying unlisted (not
//! counted in the orphan metrics).
//!
//! Collected objects and bytes are counted for the metrics ([`collected`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use permafrost_catalog::cluster::{ClusterDb, FRAGMENTS_BUCKET};
use permafrost_store::{ListQuery, Store};

use crate::ClusterError;

/// Default `[cluster] orphan_grace_ms`: 6 hours.
pub const ORPHAN_GRACE_DEFAULT_MS: u64 = 6 * 3600 * 1000;

static COLLECTED_OBJECTS: AtomicU64 = AtomicU64::new(0);
static COLLECTED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Orphans this process collected since it started: (objects, bytes).
pub fn collected() -> (u64, u64) {
    (
        COLLECTED_OBJECTS.load(Ordering::Relaxed),
        COLLECTED_BYTES.load(Ordering::Relaxed),
    )
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OrphanPass {
    /// Fragments deleted: unlisted for at least the grace period.
    pub collected: u64,
    pub collected_bytes: u64,
    /// Fragments unlisted but seen for less than the grace period (kept for now).
    pub waiting: u64,
}

/// The collector of one node: remembers since when each unlisted fragment has been seen.
#[derive(Debug)]
pub struct OrphanCollector {
    grace: Duration,
    first_seen: HashMap<String, Instant>,
    /// The last pass failed: its line was logged, the next ones are not until a pass works again.
    failing: bool,
}

/// (bucket, key, etag, role) of a fragment's key `bucket/key/etag/role` (the key may hold `/`; the bucket,
/// ETag and role never do). `None`: not a fragment key, never touched.
fn parse(fkey: &str) -> Option<(&str, &str, &str, &str)> {
    let (bucket, rest) = fkey.split_once('/')?;
    let (rest, role) = rest.rsplit_once('/')?;
    let (key, etag) = rest.rsplit_once('/')?;
    (!bucket.is_empty() && !role.is_empty() && !etag.is_empty())
        .then_some((bucket, key, etag, role))
}

impl OrphanCollector {
    pub fn new(grace_ms: u64) -> OrphanCollector {
        OrphanCollector {
            grace: Duration::from_millis(grace_ms),
            first_seen: HashMap::new(),
            failing: false,
        }
    }

    /// One pass over this node's fragments bucket (see the module's doc). Errors: the directory or the store
    /// failed; nothing was deleted after the failure.
    pub fn pass(
        &mut self,
        store: &Store,
        db: &ClusterDb,
        node_id: i64,
    ) -> Result<OrphanPass, ClusterError> {
        let mut out = OrphanPass::default();
        let has_bucket = store
            .list_buckets()
            .map_err(|e| ClusterError::Store(format!("listing this node's buckets: {e}")))?
            .iter()
            .any(|b| b.name == FRAGMENTS_BUCKET);
        if !has_bucket {
            self.first_seen.clear();
            return Ok(out);
        }
        let listed: HashSet<(String, String, String)> =
            db.fragments_on(node_id)?.into_iter().collect();
        let now = Instant::now();
        let mut unlisted = Vec::new();
        let mut start_after = None;
        loop {
            let page = store
                .list_objects(
                    FRAGMENTS_BUCKET,
                    &ListQuery {
                        prefix: String::new(),
                        delimiter: None,
                        start_after: start_after.clone(),
                        max_keys: 1000,
                    },
                )
                .map_err(|e| ClusterError::Store(format!("listing {FRAGMENTS_BUCKET}: {e}")))?;
            for o in page.objects {
                let Some((b, k, _, r)) = parse(&o.key) else {
                    continue;
                };
                if !listed.contains(&(b.to_owned(), k.to_owned(), r.to_owned())) {
                    unlisted.push((o.key, o.size_bytes));
                }
            }
            if !page.is_truncated {
                break;
            }
            start_after = page.next_start_after;
        }
        // Forget what is listed now or gone; start the grace of what is newly unlisted.
        let now_unlisted: HashSet<&str> = unlisted.iter().map(|(k, _)| k.as_str()).collect();
        self.first_seen
            .retain(|k, _| now_unlisted.contains(k.as_str()));
        for (fkey, size) in &unlisted {
            let since = *self.first_seen.entry(fkey.clone()).or_insert(now);
            if now.duration_since(since) < self.grace {
                out.waiting += 1;
                continue;
            }
            // Asked again just before the delete: a placement may have published it since the listing.
            let Some((b, k, etag, r)) = parse(fkey) else {
                continue;
            };
            let published = db.parity_object(b, k)?.is_some_and(|p| {
                p.entry.etag.trim_matches('"') == etag
                    && p.fragments
                        .iter()
                        .any(|f| f.role == r && f.node.id == node_id)
            });
            if published {
                self.first_seen.remove(fkey);
                continue;
            }
            store.delete_object(FRAGMENTS_BUCKET, fkey).map_err(|e| {
                ClusterError::Store(format!("deleting orphan fragment {fkey}: {e}"))
            })?;
            self.first_seen.remove(fkey);
            out.collected += 1;
            out.collected_bytes += size;
        }
        COLLECTED_OBJECTS.fetch_add(out.collected, Ordering::Relaxed);
        COLLECTED_BYTES.fetch_add(out.collected_bytes, Ordering::Relaxed);
        Ok(out)
    }

    /// [`OrphanCollector::pass`] from the heartbeat: one line when something was collected, when passes start
    /// failing and when they work again.
    pub fn pass_logged(&mut self, store: &Store, db: &ClusterDb, node_id: i64) {
        let pass = self.pass(store, db, node_id);
        if pass.is_ok() && std::mem::take(&mut self.failing) {
            tracing::info!("cluster: collecting orphan fragments works again");
        }
        match pass {
            Ok(p) if p.collected > 0 => tracing::info!(
                "cluster: collected {} orphan fragment(s), {} bytes, unlisted in the directory for over {} s ({} more waiting out the grace period)",
                p.collected,
                p.collected_bytes,
                self.grace.as_secs(),
                p.waiting
            ),
            Ok(_) => {}
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!(
                    "cluster: collecting orphan fragments failed (retried every catch-up pass): {e}"
                );
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_fragment_key_is_parsed_with_slashes_in_the_object_key() {
        assert_eq!(
            parse("bkt/a/b/c/0123abcd/p"),
            Some(("bkt", "a/b/c", "0123abcd", "p"))
        );
        assert_eq!(parse("bkt/k/e-2/a"), Some(("bkt", "k", "e-2", "a")));
        assert_eq!(parse("bkt/k"), None);
        assert_eq!(parse("no-slash"), None);
    }
}
