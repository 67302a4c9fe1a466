//! The cluster's decisions as pure functions over plain data: who makes the missing copies of an object, to
//! which nodes and how many, whether a tombstone deletes a node's copy, whether XOR fragments can be placed, and
//! how a lost node's fragment is made again. The node's code (`node`, `parity`) calls them with what it read from
//! the directory, and the seeded simulation of the directory (`tests/simulation.rs`) calls the same functions
//! through its random schedules, so what the simulation checks is the code that runs.
//!
//! The directory's own transactions (publish, delete everywhere, retiring lost nodes' copies) are SQL in
//! `permafrost_catalog::cluster`; their rules that are decided in Rust live in
//! `permafrost_catalog::cluster::rules`.

/// Whether a catch-up pass of node `me` acts on an object recorded as under-replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUpAction {
    /// No node holds the recorded version any more (deleted or replaced): the record goes.
    Forget,
    /// Another node makes the copies (the first holder that is up), or none of the holders is up.
    Skip,
    /// This node makes the missing copies.
    Copy,
}

/// The node that makes the missing copies of a version: the first of its holders (in the directory's order,
/// by node name) that is up. `holders` are (node id, up).
pub fn copier(holders: &[(i64, bool)]) -> Option<i64> {
    holders.iter().find(|(_, up)| *up).map(|(id, _)| *id)
}

/// What node `me` does with an under-replicated record whose version `holders` (node id, up) hold.
pub fn catch_up_action(me: i64, holders: &[(i64, bool)]) -> CatchUpAction {
    if holders.is_empty() {
        CatchUpAction::Forget
    } else if copier(holders) == Some(me) {
        CatchUpAction::Copy
    } else {
        CatchUpAction::Skip
    }
}

/// The nodes that may take a new copy from `me`: usable (up, with a relay), not `me`, holding none of the
/// version (`holders`). `nodes` are (node, usable) in the directory's order.
pub fn copy_candidates<T: PartialEq + Clone>(me: &T, nodes: &[(T, bool)], holders: &[T]) -> Vec<T> {
    nodes
        .iter()
        .filter(|(n, usable)| *usable && n != me && !holders.contains(n))
        .map(|(n, _)| n.clone())
        .collect()
}

/// How many copies to make: the ones missing of `wanted` when `have` exist (at least 1: the sender's),
/// at most one per candidate.
pub fn copies_to_make(wanted: u32, have: usize, candidates: usize) -> usize {
    (wanted as usize)
        .saturating_sub(have.max(1))
        .min(candidates)
}

/// Whether a tombstone of the version last modified at `tombstone_ms` deletes a node's copy last modified at
/// `local_ms`: that version or an older one goes, a newer local version stays.
pub fn tombstone_deletes(local_ms: u64, tombstone_ms: u64) -> bool {
    local_ms <= tombstone_ms
}

/// Whether a copy of the version last modified at `copy_ms` may replace what the receiving node holds
/// (`local_ms`: its version's time, `None`: nothing): never a newer version.
pub fn copy_replaces(local_ms: Option<u64>, copy_ms: u64) -> bool {
    local_ms.is_none_or(|l| l <= copy_ms)
}

/// Nodes XOR parity needs up to place an object's three fragments on three different nodes.
pub const XOR_NODES: usize = 3;

/// Whether the three fragments of an object can be placed with `up` usable nodes; else it is kept as whole
/// copies and recorded as under-replicated until they can.
pub fn xor_placeable(up: usize) -> bool {
    up >= XOR_NODES
}

/// How a fragment of an XOR object held by a lost node is made again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Way {
    /// Rebuilt on this node (the first in the directory's order that is usable and holds no fragment of the
    /// object).
    Free(i64),
    /// No such node: the object is kept as whole copies on these surviving holders.
    Keep(Vec<i64>),
    /// Not both other holders are usable: nothing can be done until one is back.
    Wait,
}

/// The way for a fragment lost with node `lost`: `holding` are the fragments' holders (the lost one among
/// them), `nodes` every node (id, usable) in the directory's order.
pub fn parity_way(holding: &[i64], lost: i64, nodes: &[(i64, bool)]) -> Way {
    let usable = |id: i64| nodes.iter().any(|&(n, u)| n == id && u);
    let others: Vec<i64> = holding.iter().copied().filter(|&h| h != lost).collect();
    if others.len() != 2 || !others.iter().all(|&n| usable(n)) {
        return Way::Wait;
    }
    match nodes.iter().find(|&&(n, u)| u && !holding.contains(&n)) {
        Some(&(n, _)) => Way::Free(n),
        None => Way::Keep(others),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_holder_that_is_up_copies_and_a_version_no_one_holds_is_forgotten() {
        let holders = [(3, false), (5, true), (7, true)];
        assert_eq!(catch_up_action(5, &holders), CatchUpAction::Copy);
        assert_eq!(catch_up_action(7, &holders), CatchUpAction::Skip);
        assert_eq!(catch_up_action(3, &holders), CatchUpAction::Skip);
        assert_eq!(catch_up_action(3, &[]), CatchUpAction::Forget);
        assert_eq!(copier(&[(1, false)]), None);
    }

    #[test]
    fn copies_go_to_usable_nodes_without_one_and_only_the_missing_ones() {
        let nodes = [("a", true), ("b", true), ("c", false), ("d", true)];
        assert_eq!(copy_candidates(&"a", &nodes, &["a", "d"]), vec!["b"]);
        assert_eq!(copies_to_make(3, 1, 1), 1);
        assert_eq!(copies_to_make(3, 1, 5), 2);
        assert_eq!(copies_to_make(2, 0, 5), 1);
        assert_eq!(copies_to_make(2, 2, 5), 0);
    }

    #[test]
    fn a_tombstone_deletes_its_version_and_older_ones_only() {
        assert!(tombstone_deletes(10, 10));
        assert!(tombstone_deletes(9, 10));
        assert!(!tombstone_deletes(11, 10));
        assert!(copy_replaces(None, 10));
        assert!(copy_replaces(Some(10), 10));
        assert!(!copy_replaces(Some(11), 10));
    }

    #[test]
    fn a_lost_fragment_is_rebuilt_on_a_free_node_else_kept_whole_else_waits() {
        let nodes = [(1, true), (2, true), (3, false), (4, true)];
        assert_eq!(parity_way(&[1, 2, 3], 3, &nodes), Way::Free(4));
        let three = [(1, true), (2, true), (3, false)];
        assert_eq!(parity_way(&[1, 2, 3], 3, &three), Way::Keep(vec![1, 2]));
        let one_down = [(1, true), (2, false), (3, false), (4, true)];
        assert_eq!(parity_way(&[1, 2, 3], 3, &one_down), Way::Wait);
        assert!(!xor_placeable(2));
        assert!(xor_placeable(3));
    }
}
