//! The rules of the directory's transactions that are decided in Rust (the rest is the SQL around them), as
//! pure functions: the transactions call them with what they read, and the cluster's seeded simulation
//! (`crates/cluster/tests/simulation.rs`) calls the same functions in its model of the directory.
//!
//! **A received copy is covered by a tombstone until it is published.** A node that receives a copy from
//! another node leaves itself a tombstone of the copy's version (its *mark*, [`super::ClusterDb::mark_copy`])
//! before the copy commits in its store, and only the transaction that publishes the copy removes the mark
//! ([`super::ClusterDb::publish_copy`]). So every copy a node's store holds is either listed as that node's or
//! covered by one of its tombstones; tombstones are applied before a reconcile, and a reconcile never publishes
//! a version its node has a tombstone for ([`reconcile_publishes`]). A copy committed but never published (a
//! crash or the database gone between the two) is therefore deleted by its node instead of published later:
//! it is not the node's to publish, its sender counted it as failed and the directory records the version as
//! short of copies, so the catch-up makes a new copy. Without the mark such a copy, landing after its key's
//! DELETE was acknowledged and the node's tombstone cleared, came back with the node's next reconcile (found by
//! the cluster simulation).

/// Whether a copy that just arrived on a node is published ([`super::ClusterDb::publish_copy`]): only while
/// the node's mark for it is still there (`marked`: its tombstone of the key is exactly this version; a node
/// that applied it meanwhile deleted the copy, and a DELETE or a newer version's tombstone replaced it), not
/// when no other node lists the version any more (`origin_listed` false: only a DELETE removes every row of
/// it, the sender published it before sending), not when a newer version is listed (`newer_listed`). A
/// refused copy is deleted by its node.
pub fn copy_admitted(marked: bool, origin_listed: bool, newer_listed: bool) -> bool {
    marked && origin_listed && !newer_listed
}

/// Whether a node's mark for a copy last modified at `copy_ms` replaces its tombstone of the key (last
/// modified at `tombstone_ms`, `None`: none): only an older one. A tombstone of the same or a newer version
/// stays: it deletes the copy too, and the copy, not marked, is refused.
pub fn mark_replaces(tombstone_ms: Option<u64>, copy_ms: u64) -> bool {
    tombstone_ms.is_none_or(|t| t < copy_ms)
}

/// Whether a reconcile publishes a version last modified at `held_ms` that its node's store holds and the
/// directory does not list for it: not when the node has a tombstone of that version or a newer one
/// (`tombstone_ms`), which deletes the copy (a received copy never published, or a delete not applied yet).
pub fn reconcile_publishes(tombstone_ms: Option<u64>, held_ms: u64) -> bool {
    tombstone_ms.is_none_or(|t| t < held_ms)
}

/// Whether an object with `held` of `wanted` copies is recorded as under-replicated.
pub fn short_of_copies(wanted: i64, held: i64) -> bool {
    held < wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_admitted_only_while_marked_current_and_not_deleted() {
        assert!(copy_admitted(true, true, false));
        assert!(
            !copy_admitted(false, true, false),
            "the mark was applied: the copy is gone"
        );
        assert!(!copy_admitted(true, false, false), "deleted on its way");
        assert!(!copy_admitted(true, true, true), "replaced on its way");
        assert!(short_of_copies(2, 1));
        assert!(!short_of_copies(2, 2));
    }

    #[test]
    fn a_mark_replaces_only_an_older_tombstone() {
        assert!(mark_replaces(None, 10));
        assert!(mark_replaces(Some(9), 10));
        assert!(!mark_replaces(Some(10), 10));
        assert!(!mark_replaces(Some(11), 10));
    }

    #[test]
    fn a_reconcile_never_publishes_a_copy_its_node_has_a_tombstone_for() {
        assert!(reconcile_publishes(None, 10));
        assert!(
            reconcile_publishes(Some(9), 10),
            "an older version's delete"
        );
        assert!(
            !reconcile_publishes(Some(10), 10),
            "its mark, or its delete"
        );
        assert!(!reconcile_publishes(Some(11), 10));
    }

    /// The gap these rules close, step by step: a copy lands after its key's DELETE was acknowledged and the
    /// node's tombstone cleared; it is marked, committed, and the node crashes before its publish.
    #[test]
    fn a_copy_committed_after_its_delete_and_never_published_is_not_published_by_a_reconcile() {
        let copy = 100;
        let mut tombstone = None; // the DELETE's tombstone was applied and cleared
        if mark_replaces(tombstone, copy) {
            tombstone = Some(copy);
        }
        // The node restarts: its reconcile does not publish the copy, its tombstone pass deletes it.
        assert!(!reconcile_publishes(tombstone, copy));
        // Had it not crashed, the publish finds no origin row (the DELETE removed them): refused too.
        assert!(!copy_admitted(tombstone == Some(copy), false, false));
    }
}
