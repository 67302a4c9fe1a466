//! Switches that put a known bug into the store, off unless a test turns one on. They exist only so that the
//! seeded simulation (`tests/simulation.rs`) can prove it catches these bugs; nothing else may set them. Each is
//! read at exactly one place, named in its comment.

use std::sync::atomic::AtomicBool;

pub use permafrost_catalog::planted_bugs::{on, LIFECYCLE_IGNORES_LEGAL_HOLD};

/// A persist batch marks its contents `persisted` before their extents are written to the grid
/// (`persist_batch`, persist.rs): a crash or a failed write in between leaves the catalog claiming contents
/// the grid does not hold, and evicting their cache files loses them.
pub static PERSISTED_BEFORE_DURABLE: AtomicBool = AtomicBool::new(false);
