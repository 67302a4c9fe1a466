//! Disk power: the model, the controllers, the budget.
//!
//! - [`PowerModel`] is pure bookkeeping of one disk's power state over a clock
//!   the caller supplies in milliseconds. The server drives it with real time
//!   (through [`PowerManager`]); the trace simulators drive it with simulated
//!   time. It never sleeps and never reads a clock itself.
//! - [`PowerController`] is what physically changes a drive's state:
//!   [`SimulatedPower`] (file-backed disks have no motor: nothing happens, only
//!   the model runs), [`HdparmPower`], [`ScsiStartStopPower`] and [`SesSlotPower`] for real drives,
//!   chosen per disk by the configuration value [`PowerControl`].
//! - [`PowerBudget`] is pure bookkeeping of N disks: their models, the budget
//!   of disks spinning at once, the FIFO of requests waiting for it, and which
//!   Idle disks to turn off to make room. Like the model it never sleeps and
//!   never reads a clock; the server and the energy simulator both run it.
//! - [`PowerManager`] is the server's: a [`PowerBudget`] behind a lock, driven
//!   by a [`Clock`], calling the controllers, sleeping through spin-ups,
//!   spinning disks down after their idle timeout (a background thread), and
//!   handing out [`ActivityGuard`]s that keep a disk on. [`PoweredDisk`] wraps
//!   a [`crate::Disk`] so every I/O holds a guard.
//! - [`WakeReason`] says why work touches disks (a read of object X, persist, scrub, rebuild); the manager
//!   records each spin-up with the reason of the thread that caused it ([`WakeRecord`], per-reason counts,
//!   a duration histogram) for the operator's view. Reasons change one thing: the manager counts reads per
//!   disk, so persistence can yield to them between chunks ([`PowerManager::yield_to_reads`]).
//! - The order in which waiting requests take the budget is `permafrost_policy::Scheduler`'s (`fifo` or
//!   `deadline`), and idle timeouts adapt per disk (`permafrost_policy::IdleTimeouts`): the code the energy
//!   simulator runs, set with [`PowerManager::set_scheduler`] and [`PowerManager::set_idle`].
//!
//! Invariants: per disk, `Σ ms_in_state == now − start` and
//! `joules == Σ ms_in_state[s] · watts[s] / 1000`; a budget never has more
//! than its budget of disks spinning (state other than Off, or still being
//! powered down) — the one exception is a budget lowered at run time, which
//! takes effect as disks turn off. See `docs/power.md`.

mod budget;
mod controller;
mod manager;
mod model;
mod wake;

pub use budget::{Admission, Grant, PowerBudget, PowerError, Ticket};
pub use controller::{
    HdparmPower, PowerControl, PowerController, ScsiStartStopPower, SesSlotPower, SimulatedPower,
};
pub use manager::{
    ActivityGuard, Clock, ManualClock, PowerManager, PoweredDisk, ReadYield, SystemClock,
};
pub use model::{PowerModel, PowerProfile, PowerState, PowerStats};
pub use wake::{
    ReasonGuard, SpinUpHistogram, WakeContext, WakeKind, WakeReason, WakeRecord, WakeWitness,
    SPIN_UP_BUCKETS_S, WAKE_LOG_RECENT_MAX,
};
