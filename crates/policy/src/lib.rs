//! # permafrost-policy: the decisions the server and the simulators share
//!
//! **Job.** Two kinds of decision that define how much energy the archive burns,
//! written once so that `permafrost serve` and `permafrost sim energy` make them
//! with the *same code*:
//!
//! - [`placement`]: which grid bucket (data disk) a new object goes to
//!   (SPEC idea 7, thesis §5.3.6). Strategies implement [`Placement`]; the
//!   registry [`placement_by_name`] is the one place a strategy is made
//!   selectable, for the server's per-bucket setting and for the simulator's
//!   `--placement`.
//! - [`watchdog`]: when cached data is persisted, and when an off disk is
//!   started for it (SPEC idea 6, thesis §4.4.4 and §5.3.3):
//!   [`WatchdogPolicy::decide`] maps a snapshot of the cache to
//!   [`PersistAction`]s.
//! - [`idle`]: how long a disk stays up with nothing to do: per-disk idle
//!   timeouts adapted to its recent gaps, and a wear budget of spin-ups per
//!   day ([`IdleTimeouts`]).
//! - [`scheduler`]: which waiting request takes the power budget next, and
//!   what a spinning disk serves next (reads before persistence, on-disk
//!   order, a maximum wait): [`Scheduler`], strategies `fifo` and `deadline`.
//!
//! **Invariants.**
//! - Pure decisions: nothing here does I/O, reads a clock or sleeps. Time is a
//!   caller-supplied `now_ms`; disk and cache state come in as views. The same
//!   inputs give the same answer (seeded strategies included), so a simulation
//!   replays exactly.
//! - Placement never returns a bucket that is failed, rebuilding, or lacks
//!   room for the object (`capacity - used - waiting >= size`); when none
//!   qualifies it returns [`PlacementError::NoRoom`], never a guess.
//! - The first placement is final (SPEC idea 7): strategies only decide for new
//!   objects; nothing here moves data.
//!
//! **Not here.** Carrying out the decisions (the store's persistence manager,
//! the engine's write promises, the simulator's event loop).

#![forbid(unsafe_code)]

pub mod idle;
pub mod placement;
pub mod scheduler;
pub mod watchdog;

pub use idle::{DiskCosts, IdleConfig, IdleTimeouts};
pub use placement::{
    placement_by_name, placement_names, BucketHealth, BucketView, DatasetAffinity,
    DatasetAffinityConfig, LeastFull, ObjectToPlace, Placement, PlacementConfig, PlacementError,
    RandomPlacement, RoundRobin, PLACEMENTS,
};
pub use scheduler::{Next, RequestId, Scheduler, SchedulerConfig, SchedulerStrategy};
pub use watchdog::{
    CacheView, PersistAction, PersistReason, TargetView, WatchdogConfig, WatchdogPolicy,
};
