//! # permafrost-grid: geometry of the two-dimensional parity grid
//!
//! **Job.** Say which disk of a LoneStar grid (thesis §4.3.2, Fig. 4.2) plays
//! which role, which disks form each parity group, which parity disks a write
//! to a data disk must update, and whether (and in which order) a set of failed
//! disks can be rebuilt. Pure computation: no I/O, no clocks, no threads except
//! in the exhaustive counter for the reliability planner.
//!
//! **The rule.** A [`Layout`] `XxY:hn+hk` has `d = x·y` disks numbered row-major
//! (disk = row·x + column). Every column is a vertical parity group (vPG) whose
//! parity disk `vP` sits in the last row. The `x·(y−1)` upper disks, in disk
//! order, are cut into consecutive horizontal parity groups (hPGs) of `hn + 1`
//! disks, wrapping from one row into the next; the last disk of each hPG is its
//! parity `hP`. All other disks are data disks, exported as buckets 0, 1, … in
//! disk order. Because `hn + 1 < x`, the groups shift from row to row and no
//! hPG has two disks in one column.
//!
//! ```
//! use permafrost_grid::{Geometry, Layout, ParityTargets, Role};
//! let grid = Geometry::new("8x6:4+1".parse::<Layout>()?)?;
//! assert_eq!(grid.buckets(), 32);
//! assert_eq!(grid.role(9), Role::HParity { hpg: 1 });
//! assert_eq!(grid.parity_targets(8), ParityTargets { hp: 9, vp: 40, vhp: 41 });
//! assert!(grid.is_recoverable(&[0, 1, 8]));
//! let plan = grid.recovery_plan(&[0, 8])?;
//! assert_eq!(plan.steps.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Growth.** [`Geometry::grown`] adds data disks after the fact (a *ragged* grid): each added disk, numbered
//! from `x·y` on, joins one hPG and one column that holds no other member of that hPG, before their parity disks.
//! A disk never written reads as zeros, so its groups' parity stays valid without recomputation (the engine's
//! written map, docs/grid.md "Growing a grid"). [`Geometry::with_added_group`] adds a horizontal parity group: added
//! data disks leave their (widened) hPGs for a new hPG whose parity is a new disk, in a column none of them uses
//! (docs/grid.md "Adding a parity group"); [`Geometry::grown_by`] replays both kinds of step in disk order.
//!
//! **Invariants.**
//! - Every data disk and every `hP` belongs to exactly one hPG and one column;
//!   every `vP` to its column only. No two members of an hPG share a column
//!   (checked when a [`Geometry`] is built).
//! - For a data disk, [`ParityTargets`] are its `hP`, its column's `vP`, and the
//!   `vP` of `hP`'s column (`vhP`); the three are distinct.
//! - Every set of at most 3 failed disks is recoverable (tested exhaustively for
//!   the reference layouts and grown grids); the fatal 4-sets are exactly the thesis's patterns
//!   EP1 and EP2 ([`Geometry::fatal_pattern_count`]).
//! - [`Geometry::is_recoverable`] and [`Geometry::recovery_plan`] agree: peel
//!   decoding leaves the same residue whatever order it rebuilds in.
//!
//! **Not here.** Moving bytes (the engine executes [`RecoveryPlan`]s), MTTDL
//! (the planner builds on [`Geometry::count_unrecoverable`]).

#![forbid(unsafe_code)]

mod geometry;
mod layout;
mod recovery;

pub use geometry::{AddedDisk, AddedGroup, Geometry, GroupId, Growth, ParityTargets, Role};
pub use layout::{Layout, LayoutError};
pub use recovery::{PartialRecovery, RecoveryPlan, RecoveryStep, Unrecoverable};
