//! Switches that put a known bug into the catalog, off unless a test turns one on. They exist only so that the
//! store's seeded simulation (`crates/store/tests/simulation.rs`) can prove it catches the bug; nothing else may
//! set them. Each is read at exactly one place, named in its comment.

use std::sync::atomic::{AtomicBool, Ordering};

/// The lifecycle's expiry of noncurrent versions (`expire_noncurrent`, `sqlite/archive.rs`) ignores a legal
/// hold: a version held only by its legal hold is removed, and the garbage collector then frees its bytes.
pub static LIFECYCLE_IGNORES_LEGAL_HOLD: AtomicBool = AtomicBool::new(false);

/// Whether `switch` is on.
pub fn on(switch: &AtomicBool) -> bool {
    switch.load(Ordering::Relaxed)
}
