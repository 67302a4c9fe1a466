//! The layout explorer: every valid grid (and, for comparison, every `n+k` array) for a disk
//! count, with the columns of thesis Table 4.4.

use permafrost_grid::{Geometry, Layout};
use serde::Serialize;

use crate::layout::PlanLayout;
use crate::model::{unit_reliability, GridDepth, ModelParams};
use crate::PlanError;

/// Widest `n+k` array the explorer lists.
pub const ARRAY_WIDTH_MAX: usize = 32;
/// Most parity disks of the `n+k` arrays the explorer lists.
pub const ARRAY_PARITY_MAX: usize = 4;

/// What to explore.
#[derive(Clone, Debug)]
pub struct ExploreOptions {
    /// The disk count `N`.
    pub disks: usize,
    /// `false`: layouts that use exactly `N` disks as `N / d` identical grids or arrays.
    /// `true`: every layout of at most `N` disks, as many copies as fit.
    pub up_to: bool,
    /// Also list `n+k` arrays.
    pub arrays: bool,
    /// Model parameters (IDR on or off).
    pub params: ModelParams,
    /// Failure depth of the grid model.
    pub depth: GridDepth,
}

/// One row of the explorer's table.
#[derive(Clone, Debug, Serialize)]
pub struct LayoutRow {
    /// The layout of each unit.
    pub layout: PlanLayout,
    /// Identical units (grids or arrays) in the system.
    pub copies: usize,
    /// Disks in use: `copies · disks per unit`.
    pub disks: usize,
    /// Storage efficiency in percent (with IDR if the parameters have it).
    pub efficiency_percent: f64,
    /// MTTDL of the system of `copies` units, hours.
    pub mttdl_hours: f64,
    /// Horizontal parity groups per grid (an array counts as one).
    pub hpgs: usize,
    /// Non-overlapping direct writes per unit: `min(⌊x/(1+hk)⌋, #HPGs)` for a grid, 1 for an array.
    pub parallel_writes: usize,
    /// Disks of a horizontal parity group (`hn + hk`; an array: `n + k`).
    pub hpg_size: usize,
    /// Disks of a vertical parity group (`y`; none for an array).
    pub vpg_size: Option<usize>,
}

/// Every valid grid layout with `d` disks, or with at most `d` when `up_to`.
pub fn grid_layouts(disks: usize, up_to: bool) -> Vec<Layout> {
    let mut layouts = Vec::new();
    for x in 3..=disks.min(Layout::MAX_DISKS) {
        for y in 2..=disks / x {
            let d = x * y;
            if d > Layout::MAX_DISKS || (!up_to && !disks.is_multiple_of(d)) {
                continue;
            }
            for hn in 1..x.saturating_sub(1) {
                if let Ok(layout) = Layout::new(x, y, hn, 1) {
                    if Geometry::new(layout).is_ok() {
                        layouts.push(layout);
                    }
                }
            }
        }
    }
    layouts
}

/// The explorer's rows, unsorted.
pub fn explore(options: &ExploreOptions) -> Result<Vec<LayoutRow>, PlanError> {
    if options.disks == 0 {
        return Err(PlanError::Parameter(
            "the disk count must be at least 1".into(),
        ));
    }
    let mut units: Vec<PlanLayout> = grid_layouts(options.disks, options.up_to)
        .into_iter()
        .map(PlanLayout::Grid)
        .collect();
    if options.arrays {
        for width in 2..=options.disks.min(ARRAY_WIDTH_MAX) {
            if !options.up_to && !options.disks.is_multiple_of(width) {
                continue;
            }
            for k in 1..=ARRAY_PARITY_MAX.min(width - 1) {
                units.push(PlanLayout::Array { n: width - k, k });
            }
        }
    }
    let mut rows = Vec::with_capacity(units.len());
    for layout in units {
        let unit = unit_reliability(&layout, &options.params, options.depth)?;
        let copies = options.disks / layout.disks();
        let efficiency_percent = 100.0 * options.params.idr_fraction() * layout.data_disks() as f64
            / layout.disks() as f64;
        let (hpgs, parallel_writes, hpg_size, vpg_size) = match layout {
            PlanLayout::Array { n, k } => (1, 1, n + k, None),
            PlanLayout::Grid(grid) => {
                let hpgs = grid.x * (grid.y - 1) / grid.hpg_size();
                (
                    hpgs,
                    (grid.x / (1 + grid.hk)).min(hpgs),
                    grid.hpg_size(),
                    Some(grid.y),
                )
            }
        };
        rows.push(LayoutRow {
            layout,
            copies,
            disks: copies * layout.disks(),
            efficiency_percent,
            mttdl_hours: unit.mttdl_hours / copies as f64,
            hpgs,
            parallel_writes,
            hpg_size,
            vpg_size,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_for_192_disks_include_the_thesis_table_4_4() {
        let layouts: Vec<String> = grid_layouts(192, false)
            .iter()
            .map(|l| l.to_string())
            .collect();
        for expected in [
            "8x4:5+1",
            "8x8:6+1",
            "16x6:9+1",
            "12x8:6+1",
            "24x8:13+1",
            "24x8:6+1",
        ] {
            assert!(
                layouts.contains(&expected.to_string()),
                "{expected} missing"
            );
        }
        // 13x7, 36x5, 21x9 and 38x5 need 182, 180, 189 and 190 disks: only "up to 192".
        assert!(!layouts.contains(&"21x9:7+1".to_string()));
        let up_to: Vec<String> = grid_layouts(192, true)
            .iter()
            .map(|l| l.to_string())
            .collect();
        for expected in ["13x7:5+1", "36x5:15+1", "21x9:7+1", "38x5:7+1"] {
            assert!(up_to.contains(&expected.to_string()), "{expected} missing");
        }
    }
}
