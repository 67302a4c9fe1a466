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
//! - [`PowerManager`] runs one model per disk against a [`Clock`], enforces the
//!   budget of disks spinning at once (queueing spin-ups FIFO), spins disks down
//!   after their idle timeout, and hands out [`ActivityGuard`]s that keep a disk
//!   on. [`PoweredDisk`] wraps a [`crate::Disk`] so every I/O holds a guard.
//!
//! Invariants: per disk, `Σ ms_in_state == now − start` and
//! `joules == Σ ms_in_state[s] · watts[s] / 1000`; a manager never has more
//! than its budget of disks spinning (state other than Off, or still being
//! powered down) — the one exception is a budget lowered at run time, which
//! takes effect as disks turn off. See `docs/power.md`.

mod controller;
mod manager;
mod model;

pub use controller::{
    HdparmPower, PowerControl, PowerController, ScsiStartStopPower, SesSlotPower, SimulatedPower,
};
pub use manager::{
    ActivityGuard, Clock, ManualClock, PowerError, PowerManager, PoweredDisk, SystemClock,
};
pub use model::{PowerModel, PowerProfile, PowerState, PowerStats};
