//! One syntax for every redundancy layout: `n+k` for an array, `XxY:hn+hk` for a grid.

use std::fmt;
use std::str::FromStr;

use permafrost_grid::{Geometry, Layout};
use serde::{Serialize, Serializer};

use crate::PlanError;

/// The largest `n + k` array the planner accepts.
pub const ARRAY_DISKS_MAX: usize = 1024;

/// A redundancy layout: an `n+k` array (MDS erasure code: any `k` failures are tolerated) or a
/// LoneStar grid `XxY:hn+hk` (its geometry and recoverability come from `permafrost-grid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanLayout {
    /// `n` data disks and `k` parity disks.
    Array {
        /// Data disks.
        n: usize,
        /// Parity disks (failures tolerated).
        k: usize,
    },
    /// A two-dimensional parity grid.
    Grid(Layout),
}

impl PlanLayout {
    /// Disks of one array or grid.
    pub fn disks(&self) -> usize {
        match self {
            PlanLayout::Array { n, k } => n + k,
            PlanLayout::Grid(layout) => layout.disks(),
        }
    }

    /// Data disks of one array or grid (the grid's buckets).
    pub fn data_disks(&self) -> usize {
        match self {
            PlanLayout::Array { n, .. } => *n,
            PlanLayout::Grid(layout) => {
                let hpgs = layout.x * (layout.y - 1) / layout.hpg_size();
                hpgs * layout.hn
            }
        }
    }

    /// The grid's geometry (`None` for an array).
    pub fn geometry(&self) -> Option<Geometry> {
        match self {
            PlanLayout::Array { .. } => None,
            PlanLayout::Grid(layout) => {
                Some(Geometry::new(*layout).expect("a PlanLayout grid is validated when built"))
            }
        }
    }

    /// Is this a grid?
    pub fn is_grid(&self) -> bool {
        matches!(self, PlanLayout::Grid(_))
    }
}

impl fmt::Display for PlanLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanLayout::Array { n, k } => write!(f, "{n}+{k}"),
            PlanLayout::Grid(layout) => write!(f, "{layout}"),
        }
    }
}

impl FromStr for PlanLayout {
    type Err = PlanError;

    /// `n+k` (e.g. `6+2`) or `XxY:hn+hk` (e.g. `12x6:9+1`).
    fn from_str(text: &str) -> Result<PlanLayout, PlanError> {
        let text = text.trim();
        if text.contains(':') || text.contains('x') {
            let layout: Layout = text
                .parse()
                .map_err(|e| PlanError::Layout(format!("{e}")))?;
            Geometry::new(layout).map_err(|e| PlanError::Layout(format!("{e}")))?;
            return Ok(PlanLayout::Grid(layout));
        }
        let bad = |reason: &str| {
            PlanError::Layout(format!("layout {text:?}: {reason} (expected n+k such as 6+2, or XxY:hn+hk such as 12x6:9+1)"))
        };
        let (n, k) = text.split_once('+').ok_or_else(|| bad("missing '+'"))?;
        let number = |name: &str, digits: &str| -> Result<usize, PlanError> {
            digits
                .trim()
                .parse::<usize>()
                .map_err(|_| bad(&format!("{name} = {digits:?} is not a number")))
        };
        let (n, k) = (number("n", n)?, number("k", k)?);
        if n == 0 || k == 0 {
            return Err(bad("n and k must both be at least 1"));
        }
        if n + k > ARRAY_DISKS_MAX {
            return Err(bad(&format!(
                "n + k = {} is more than {ARRAY_DISKS_MAX} disks",
                n + k
            )));
        }
        Ok(PlanLayout::Array { n, k })
    }
}

impl Serialize for PlanLayout {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_syntaxes_parse_and_print_back() {
        for text in ["6+2", "13+4", "12x6:9+1", "24x8:6+1"] {
            assert_eq!(text.parse::<PlanLayout>().unwrap().to_string(), text);
        }
        assert_eq!(
            "6+2".parse::<PlanLayout>().unwrap(),
            PlanLayout::Array { n: 6, k: 2 }
        );
        let grid: PlanLayout = "16x6:9+1".parse().unwrap();
        assert_eq!((grid.disks(), grid.data_disks()), (96, 72));
    }

    #[test]
    fn bad_layouts_are_errors_naming_the_problem() {
        for (text, needle) in [
            ("6-2", "missing '+'"),
            ("a+2", "n = \"a\""),
            ("0+2", "at least 1"),
            ("8x6:5+1", "hn + hk"),
        ] {
            let error = text.parse::<PlanLayout>().unwrap_err().to_string();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
