//! The layout parameters `x`, `y`, `hn`, `hk` and their text form `XxY:hn+hk`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The four parameters that fully describe a grid (thesis §4.3.2): `x` columns,
/// `y` rows (the last row holds the vertical parity disks), and horizontal parity
/// groups of `hn` data disks plus `hk` parity disks.
///
/// Text form (used by `FromStr`, `Display` and serde): `XxY:hn+hk`, e.g. `8x6:4+1`.
///
/// The fields are public for convenience; a `Layout` is only checked when it is
/// parsed or passed to [`crate::Geometry::new`] (see [`Layout::validate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Columns: disks per row, and the number of vertical parity groups.
    pub x: usize,
    /// Rows, including the last row of vertical parity disks.
    pub y: usize,
    /// Data disks per horizontal parity group.
    pub hn: usize,
    /// Parity disks per horizontal parity group (only 1 is supported).
    pub hk: usize,
}

/// Why a layout is not a valid grid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The text is not of the form `XxY:hn+hk`.
    #[error("layout {input:?} is not of the form XxY:hn+hk (e.g. 8x6:4+1): {reason}")]
    Syntax {
        /// The text that was parsed.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// One of the parameters is zero.
    #[error("layout {layout}: {parameter} must be at least 1")]
    Zero {
        /// The layout as given.
        layout: String,
        /// Which parameter is zero (`x`, `y`, `hn` or `hk`).
        parameter: &'static str,
    },
    /// Fewer than two rows: there would be no vertical parity row above data.
    #[error(
        "layout {layout}: y = {y} rows, need at least 2 (data rows plus the vertical parity row)"
    )]
    TooFewRows {
        /// The layout as given.
        layout: String,
        /// The number of rows requested.
        y: usize,
    },
    /// `hk` other than 1.
    #[error(
        "layout {layout}: hk = {hk} is not supported; horizontal parity groups have exactly one \
         XOR parity disk (hk = 1), as in the LoneStar thesis"
    )]
    UnsupportedHk {
        /// The layout as given.
        layout: String,
        /// The requested number of horizontal parity disks per group.
        hk: usize,
    },
    /// The horizontal group is not narrower than a row (thesis: `hn + hk < x`).
    #[error(
        "layout {layout}: hn + hk = {group} must be less than x = {x}, so that no two disks of a \
         horizontal parity group share a column"
    )]
    GroupTooWide {
        /// The layout as given.
        layout: String,
        /// `hn + hk`.
        group: usize,
        /// Columns.
        x: usize,
    },
    /// The `x·(y−1)` upper positions cannot be cut into whole groups.
    #[error(
        "layout {layout}: the x·(y−1) = {positions} disks above the parity row are not divisible \
         into horizontal parity groups of hn + hk = {group}"
    )]
    NotDivisible {
        /// The layout as given.
        layout: String,
        /// `x·(y−1)`.
        positions: usize,
        /// `hn + hk`.
        group: usize,
    },
    /// More disks than this crate supports.
    #[error("layout {layout}: {disks} disks, at most {max} are supported")]
    TooLarge {
        /// The layout as given.
        layout: String,
        /// `x·y` (saturating).
        disks: usize,
        /// [`Layout::MAX_DISKS`].
        max: usize,
    },
    /// An added disk names a horizontal parity group or column the grid does not have.
    #[error(
        "layout {layout}: there is no horizontal parity group {hpg} or no column {column} (the grid has {hpgs} \
         horizontal parity groups and {columns} columns)"
    )]
    NoSuchGroup {
        /// The layout as given.
        layout: String,
        /// The horizontal parity group asked for.
        hpg: usize,
        /// The column asked for.
        column: usize,
        /// Horizontal parity groups of the grid.
        hpgs: usize,
        /// Columns of the grid.
        columns: usize,
    },
    /// An added disk's column already holds a member of its horizontal parity group.
    #[error(
        "layout {layout}: column {column} already holds disk {disk} of horizontal parity group {hpg}; a disk \
         added there could not be rebuilt from its column"
    )]
    ColumnTaken {
        /// The layout as given.
        layout: String,
        /// The horizontal parity group.
        hpg: usize,
        /// The column asked for.
        column: usize,
        /// The member of the group already in that column.
        disk: usize,
    },
    /// A new horizontal parity group ([`crate::Geometry::with_added_group`]) that the rules refuse.
    #[error("layout {layout}: cannot add the parity group: {reason}")]
    GroupRefused {
        /// The layout as given.
        layout: String,
        /// Which rule the group breaks, in words.
        reason: String,
    },
    /// Two members of one horizontal parity group would share a column.
    #[error(
        "layout {layout}: horizontal parity group {hpg} has two disks in column {column}; \
         it could not be rebuilt from its columns"
    )]
    SharedColumn {
        /// The layout as given.
        layout: String,
        /// The offending horizontal parity group.
        hpg: usize,
        /// The column used twice.
        column: usize,
    },
}

impl Layout {
    /// The largest supported grid, in disks (`x·y`). The thesis's largest
    /// configurations have 192 disks; recoverability checks keep failed sets in
    /// fixed-size stack buffers of this size.
    pub const MAX_DISKS: usize = 256;

    /// A layout from its four parameters, validated.
    pub fn new(x: usize, y: usize, hn: usize, hk: usize) -> Result<Layout, LayoutError> {
        let layout = Layout { x, y, hn, hk };
        layout.validate()?;
        Ok(layout)
    }

    /// Total number of disks, `x·y`.
    pub fn disks(&self) -> usize {
        self.x.saturating_mul(self.y)
    }

    /// Disks per horizontal parity group, `hn + hk`.
    pub fn hpg_size(&self) -> usize {
        self.hn.saturating_add(self.hk)
    }

    /// Check the rules of thesis §4.3.2: all sizes ≥ 1, `y ≥ 2`, `hk = 1`,
    /// `hn + hk < x`, `x·(y−1)` divisible by `hn + hk`, at most
    /// [`Layout::MAX_DISKS`] disks.
    pub fn validate(&self) -> Result<(), LayoutError> {
        let layout = self.to_string();
        for (parameter, value) in [
            ("x", self.x),
            ("y", self.y),
            ("hn", self.hn),
            ("hk", self.hk),
        ] {
            if value == 0 {
                return Err(LayoutError::Zero { layout, parameter });
            }
        }
        if self.y < 2 {
            return Err(LayoutError::TooFewRows { layout, y: self.y });
        }
        if self.disks() > Self::MAX_DISKS {
            return Err(LayoutError::TooLarge {
                layout,
                disks: self.disks(),
                max: Self::MAX_DISKS,
            });
        }
        if self.hk != 1 {
            return Err(LayoutError::UnsupportedHk {
                layout,
                hk: self.hk,
            });
        }
        let group = self.hpg_size();
        if group >= self.x {
            return Err(LayoutError::GroupTooWide {
                layout,
                group,
                x: self.x,
            });
        }
        let positions = self.x * (self.y - 1);
        if !positions.is_multiple_of(group) {
            return Err(LayoutError::NotDivisible {
                layout,
                positions,
                group,
            });
        }
        Ok(())
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}:{}+{}", self.x, self.y, self.hn, self.hk)
    }
}

impl FromStr for Layout {
    type Err = LayoutError;

    /// Parse `XxY:hn+hk` (surrounding whitespace allowed) and validate it.
    fn from_str(input: &str) -> Result<Layout, LayoutError> {
        let syntax = |reason: &str| LayoutError::Syntax {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let text = input.trim();
        let (size, group) = text
            .split_once(':')
            .ok_or_else(|| syntax("missing ':' between XxY and hn+hk"))?;
        let (x, y) = size
            .split_once('x')
            .ok_or_else(|| syntax("missing 'x' between the columns X and rows Y"))?;
        let (hn, hk) = group
            .split_once('+')
            .ok_or_else(|| syntax("missing '+' between hn and hk"))?;
        let number = |name: &str, digits: &str| -> Result<usize, LayoutError> {
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax(&format!(
                    "{name} = {digits:?} is not a decimal number"
                )));
            }
            digits
                .parse()
                .map_err(|_| syntax(&format!("{name} = {digits} is too large")))
        };
        let layout = Layout {
            x: number("X", x)?,
            y: number("Y", y)?,
            hn: number("hn", hn)?,
            hk: number("hk", hk)?,
        };
        layout.validate()?;
        Ok(layout)
    }
}

impl Serialize for Layout {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Layout {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Layout, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_layouts_round_trip_through_text() {
        for text in ["8x6:4+1", "12x6:9+1", "24x8:6+1", "8x8:6+1", "10x5:7+1"] {
            let layout: Layout = text.parse().unwrap();
            assert_eq!(layout.to_string(), text);
        }
        assert_eq!(
            " 8x6:4+1\n".parse::<Layout>().unwrap(),
            Layout {
                x: 8,
                y: 6,
                hn: 4,
                hk: 1
            }
        );
    }

    #[test]
    fn layout_serializes_as_its_text_form() {
        let layout: Layout = "12x6:9+1".parse().unwrap();
        let json = serde_json::to_string(&layout).unwrap();
        assert_eq!(json, "\"12x6:9+1\"");
        assert_eq!(serde_json::from_str::<Layout>(&json).unwrap(), layout);
        let bad = serde_json::from_str::<Layout>("\"8x6:5+1\"")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("hn + hk = 6"), "{bad}");
    }

    fn parse_err(text: &str) -> LayoutError {
        text.parse::<Layout>().unwrap_err()
    }

    #[test]
    fn malformed_text_is_a_syntax_error_naming_the_problem() {
        for (text, needle) in [
            ("8x6", "missing ':'"),
            ("86:4+1", "missing 'x'"),
            ("8x6:41", "missing '+'"),
            ("8x6:4+", "hk = \"\""),
            ("-8x6:4+1", "X = \"-8\""),
            ("8x6:4+1x", "hk = \"1x\""),
            ("99999999999999999999999x6:4+1", "too large"),
        ] {
            let error = parse_err(text);
            assert!(
                matches!(error, LayoutError::Syntax { .. }),
                "{text}: {error:?}"
            );
            assert!(error.to_string().contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn invalid_parameters_give_the_matching_error() {
        assert!(matches!(
            parse_err("0x6:4+1"),
            LayoutError::Zero { parameter: "x", .. }
        ));
        assert!(matches!(
            parse_err("8x6:0+1"),
            LayoutError::Zero {
                parameter: "hn",
                ..
            }
        ));
        assert!(matches!(
            parse_err("8x6:4+0"),
            LayoutError::Zero {
                parameter: "hk",
                ..
            }
        ));
        assert!(matches!(
            parse_err("8x1:4+1"),
            LayoutError::TooFewRows { y: 1, .. }
        ));
        assert!(matches!(
            parse_err("8x6:3+2"),
            LayoutError::UnsupportedHk { hk: 2, .. }
        ));
        assert!(matches!(
            parse_err("8x6:7+1"),
            LayoutError::GroupTooWide { group: 8, x: 8, .. }
        ));
        assert!(matches!(
            parse_err("8x6:9+1"),
            LayoutError::GroupTooWide {
                group: 10,
                x: 8,
                ..
            }
        ));
        assert!(matches!(
            parse_err("8x6:5+1"),
            LayoutError::NotDivisible {
                positions: 40,
                group: 6,
                ..
            }
        ));
        assert!(matches!(
            parse_err("32x9:6+1"),
            LayoutError::TooLarge { disks: 288, .. }
        ));
        assert!(parse_err("8x6:3+2").to_string().contains("hk = 1"));
    }

    #[test]
    fn layout_new_validates() {
        assert_eq!(Layout::new(12, 6, 9, 1).unwrap().to_string(), "12x6:9+1");
        assert!(Layout::new(12, 6, 10, 1).is_err());
    }
}
