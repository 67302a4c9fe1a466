//! The rules of the directory's transactions that are decided in Rust (the rest is the SQL around them), as
//! pure functions: the transactions call them with what they read, and the cluster's seeded simulation
//! (`crates/cluster/tests/simulation.rs`) calls the same functions in its model of the directory.

/// Whether a copy that just arrived on a node is published ([`super::ClusterDb::publish_copy`]): not when that
/// node has a tombstone of this version or a newer one (`tombstoned`), not when no other node lists the version
/// any more (`origin_listed` false: only a DELETE removes every row of it, the sender published it before
/// sending), not when a newer version is listed (`newer_listed`). A refused copy is deleted by its node.
pub fn copy_admitted(tombstoned: bool, origin_listed: bool, newer_listed: bool) -> bool {
    !tombstoned && origin_listed && !newer_listed
}

/// Whether an object with `held` of `wanted` copies is recorded as under-replicated.
pub fn short_of_copies(wanted: i64, held: i64) -> bool {
    held < wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_admitted_only_while_its_version_is_current_and_not_deleted_for_its_node() {
        assert!(copy_admitted(false, true, false));
        assert!(!copy_admitted(true, true, false));
        assert!(!copy_admitted(false, false, false));
        assert!(!copy_admitted(false, true, true));
        assert!(short_of_copies(2, 1));
        assert!(!short_of_copies(2, 2));
    }
}
