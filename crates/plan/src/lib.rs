//! # permafrost-plan: know before you buy
//!
//! **Job.** Answer an operator's reliability questions before disks are bought:
//! - [`plan_system`]: the MTTDL of a system of identical `n+k` arrays or LoneStar grids sized
//!   for an amount of user data, from the continuous-time Markov model of thesis §4.4.1–4.4.2
//!   (after Hafner and Rao), with the parameters of Table 4.1 by default;
//! - [`explore`]: every valid layout for a disk count with the columns of Table 4.4;
//! - [`cli`]: `permafrost plan mttdl` and `permafrost plan layouts`.
//!
//! **Invariants.**
//! - One syntax for layouts: `n+k` for an array, `XxY:hn+hk` for a grid ([`PlanLayout`]).
//! - A grid's `p_k` come from exact counts of fatal failure sets judged by
//!   `permafrost_grid::Geometry::is_recoverable`, the same decoder the engine's rebuild uses;
//!   the planner has no separate model of the grid ([`fatal`]).
//! - Grids are modelled up to a fixed number of simultaneous failures ([`GridDepth`], 6 by
//!   default); in the deepest state any further failure counts as data loss, so the figure is a
//!   slight underestimate, never an overestimate.
//!
//! **Not here.** Energy and cache simulation (`sim`), charts themselves (`permafrost-plot`).
//!
//! ```
//! use permafrost_plan::{plan_system, GridDepth, ModelParams, PlanLayout, TIB};
//! let plan = plan_system(&"6+2".parse::<PlanLayout>()?, &ModelParams::thesis(false), 10_240 * TIB as u128, GridDepth::default())?;
//! assert_eq!((plan.arrays, plan.disks), (427, 3_416));
//! assert!((plan.mttdl_hours / 4.13e6 - 1.0).abs() < 0.01);
//! # Ok::<(), permafrost_plan::PlanError>(())
//! ```

#![forbid(unsafe_code)]

pub mod cli;
mod explore;
pub mod fatal;
mod layout;
mod model;

pub use explore::{explore, grid_layouts, ExploreOptions, LayoutRow};
pub use layout::PlanLayout;
pub use model::{
    grid_reliability, mttdl_hours, plan_system, unit_reliability, GridDepth, IdrParams,
    ModelParams, SystemPlan, UnitReliability, TIB,
};

/// Why a plan could not be made (bad input; the model itself has no failure modes).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The layout text is malformed or not a valid layout.
    #[error("{0}")]
    Layout(String),
    /// A model or sizing parameter is out of range.
    #[error("{0}")]
    Parameter(String),
}
