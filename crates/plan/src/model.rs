//! The continuous-time Markov model of thesis §4.4.1 (after Hafner and Rao) and the sizing of a
//! system for a given amount of user data (§4.4.2).

use serde::Serialize;

use crate::fatal::{self, FatalCounts};
use crate::layout::PlanLayout;
use crate::PlanError;

/// One tebibyte in bytes.
pub const TIB: u64 = 1 << 40;

/// Model parameters (thesis Table 4.1), with units in the names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelParams {
    /// λ, the drive failure rate (1 / MTTF), per hour. Thesis: 1/500,000.
    pub failure_rate_per_hour: f64,
    /// μ, the drive rebuild rate (1 / MTTR), per hour. Thesis: 1/12.
    pub rebuild_rate_per_hour: f64,
    /// C, the raw drive capacity in bytes. Thesis: "4 TB"; its tables follow from 4 TiB.
    pub disk_capacity_bytes: u64,
    /// HER without intra-disk redundancy, errors per byte read. Thesis: 8·10⁻¹⁵.
    pub hard_error_rate_per_byte: f64,
    /// Intra-disk redundancy (16+1 SPC in the thesis), or none.
    pub idr: Option<IdrParams>,
}

/// Intra-disk redundancy: its capacity overhead and its effect on the hard error rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IdrParams {
    /// Data blocks per IDR group (16).
    pub data_blocks: u32,
    /// Check blocks per IDR group (1).
    pub check_blocks: u32,
    /// HER(IDR) / HER (thesis: 0.1, "a rather conservative estimate").
    pub her_factor: f64,
}

impl Default for IdrParams {
    fn default() -> IdrParams {
        IdrParams {
            data_blocks: 16,
            check_blocks: 1,
            her_factor: 0.1,
        }
    }
}

impl ModelParams {
    /// Table 4.1, with or without the 16+1 IDR code.
    pub fn thesis(idr: bool) -> ModelParams {
        ModelParams {
            failure_rate_per_hour: 1.0 / 500_000.0,
            rebuild_rate_per_hour: 1.0 / 12.0,
            disk_capacity_bytes: 4 * TIB,
            hard_error_rate_per_byte: 8e-15,
            idr: idr.then(IdrParams::default),
        }
    }

    /// `h = C · HER` (with IDR: `C · HER · her_factor`): the probability of a hard error when a
    /// rebuild reads one whole drive.
    pub fn hard_error_per_drive_read(&self) -> f64 {
        let her =
            self.hard_error_rate_per_byte * self.idr.as_ref().map_or(1.0, |idr| idr.her_factor);
        self.disk_capacity_bytes as f64 * her
    }

    /// Fraction of a drive's bytes left for the RAID after IDR.
    pub fn idr_fraction(&self) -> f64 {
        self.idr.as_ref().map_or(1.0, |idr| {
            idr.data_blocks as f64 / (idr.data_blocks + idr.check_blocks) as f64
        })
    }

    fn validate(&self) -> Result<(), PlanError> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(PlanError::Parameter(format!(
                    "{name} must be a positive number, not {v}"
                )))
            }
        };
        positive("failure rate λ", self.failure_rate_per_hour)?;
        positive("rebuild rate μ", self.rebuild_rate_per_hour)?;
        positive("disk capacity", self.disk_capacity_bytes as f64)?;
        if !(self.hard_error_rate_per_byte.is_finite() && self.hard_error_rate_per_byte >= 0.0) {
            return Err(PlanError::Parameter(format!(
                "HER must be ≥ 0, not {}",
                self.hard_error_rate_per_byte
            )));
        }
        if let Some(idr) = &self.idr {
            if idr.data_blocks == 0 || !(idr.her_factor.is_finite() && idr.her_factor >= 0.0) {
                return Err(PlanError::Parameter(format!("bad IDR parameters {idr:?}")));
            }
        }
        Ok(())
    }
}

/// Mean time (hours) from state 0 to data loss of the chain of Fig. 4.7.
///
/// State `k` = `k` failed disks being rebuilt, `k = 0..=t` with `t = tolerances.len()`;
/// `tolerances[k]` is `p_k` and `p_t = 0` (any failure in state `t` is fatal). From state `k`:
/// - to `k+1` at `σ_k = (d−k)λ p_k (1 − q_k)`,
/// - to data loss at `δ_k = (d−k)λ ((1 − p_k) + p_k q_k)`,
/// - back to `k−1` at `μ` (sequential rebuild, `μ_t = μ`),
///
/// with `q_k = (1 − p_{k+1})(d − (k+1)) h`, the chance that the rebuild after the next failure
/// meets a hard error while the grid is critical. Hafner and Rao's linear `q_k` can exceed 1 for
/// wide grids with large `h`; it is capped at 1 (a probability).
pub fn mttdl_hours(
    disks: usize,
    tolerances: &[f64],
    h: f64,
    failure_rate: f64,
    rebuild_rate: f64,
) -> f64 {
    let states = tolerances.len() + 1;
    let p = |k: usize| tolerances.get(k).copied().unwrap_or(0.0);
    // Q_T · T = −1 over the transient states (tridiagonal; dense elimination is plenty).
    let mut q = vec![vec![0.0; states + 1]; states];
    for k in 0..states {
        let remaining = disks.saturating_sub(k) as f64;
        let hard = ((1.0 - p(k + 1)) * disks.saturating_sub(k + 1) as f64 * h).clamp(0.0, 1.0);
        let to_next = remaining * failure_rate * p(k) * (1.0 - hard);
        let to_loss = remaining * failure_rate * ((1.0 - p(k)) + p(k) * hard);
        let mut out = to_next + to_loss;
        if k + 1 < states {
            q[k][k + 1] = to_next;
        }
        if k > 0 {
            q[k][k - 1] = rebuild_rate;
            out += rebuild_rate;
        }
        q[k][k] = -out;
        q[k][states] = -1.0;
    }
    solve(q)[0]
}

/// Gaussian elimination with partial pivoting on an augmented `n × (n+1)` matrix.
fn solve(mut a: Vec<Vec<f64>>) -> Vec<f64> {
    let n = a.len();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .expect("non-empty");
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (row, values) in a.iter_mut().enumerate() {
            if row != col && values[col] != 0.0 {
                let factor = values[col] / pivot_row[col];
                for (value, pivot_value) in values[col..].iter_mut().zip(&pivot_row[col..]) {
                    *value -= factor * pivot_value;
                }
            }
        }
    }
    (0..n).map(|i| a[i][n] / a[i][i]).collect()
}

/// How far the chain of a grid goes: fatal sets are counted exactly up to this many failures
/// and state `max_failures` is critical (its next failure counts as data loss), a conservative
/// cut. At six the MTTDL of the thesis's grids has converged (deeper changes the fourth digit);
/// five is within 1 % and much faster, so the layout explorer uses it (see docs/plan.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GridDepth(pub usize);

impl Default for GridDepth {
    fn default() -> GridDepth {
        GridDepth(6)
    }
}

/// The MTTDL of one array or grid.
#[derive(Clone, Debug, Serialize)]
pub struct UnitReliability {
    /// Disks of the array or grid (`d`).
    pub disks: usize,
    /// `p_k` for `k = 0..t` (`p_t = 0`).
    pub tolerances: Vec<f64>,
    /// For grids: the fatal-set counts the tolerances come from.
    pub fatal_counts: Option<FatalCounts>,
    /// MTTDL of one array or grid, hours.
    pub mttdl_hours: f64,
}

/// MTTDL of one array or grid of `layout`.
pub fn unit_reliability(
    layout: &PlanLayout,
    params: &ModelParams,
    depth: GridDepth,
) -> Result<UnitReliability, PlanError> {
    params.validate()?;
    let (tolerances, fatal_counts) = match layout {
        PlanLayout::Array { k, .. } => (vec![1.0; *k], None),
        PlanLayout::Grid(grid) => {
            if depth.0 < 1 || depth.0 > fatal::FAILURES_MAX {
                return Err(PlanError::Parameter(format!(
                    "failure depth must be 1..={}, not {}",
                    fatal::FAILURES_MAX,
                    depth.0
                )));
            }
            let counts = fatal::cached(*grid, depth.0);
            (counts.tolerances(), Some(counts))
        }
    };
    let disks = layout.disks();
    reliability(disks, tolerances, fatal_counts, params)
}

/// MTTDL of one grid of any geometry, a grown (ragged) one included (`Geometry::grown`, after `grid add-disk`):
/// the fatal-set counts come from the geometry itself, not from a layout.
pub fn grid_reliability(
    geometry: &permafrost_grid::Geometry,
    params: &ModelParams,
    depth: GridDepth,
) -> Result<UnitReliability, PlanError> {
    params.validate()?;
    if depth.0 < 1 || depth.0 > fatal::FAILURES_MAX {
        return Err(PlanError::Parameter(format!(
            "failure depth must be 1..={}, not {}",
            fatal::FAILURES_MAX,
            depth.0
        )));
    }
    let counts = fatal::count(geometry, depth.0);
    reliability(geometry.disks(), counts.tolerances(), Some(counts), params)
}

fn reliability(
    disks: usize,
    tolerances: Vec<f64>,
    fatal_counts: Option<FatalCounts>,
    params: &ModelParams,
) -> Result<UnitReliability, PlanError> {
    let mttdl_hours = mttdl_hours(
        disks,
        &tolerances,
        params.hard_error_per_drive_read(),
        params.failure_rate_per_hour,
        params.rebuild_rate_per_hour,
    );
    Ok(UnitReliability {
        disks,
        tolerances,
        fatal_counts,
        mttdl_hours,
    })
}

/// A system of identical independent arrays or grids holding a given amount of user data.
#[derive(Clone, Debug, Serialize)]
pub struct SystemPlan {
    /// The layout of each array or grid.
    pub layout: PlanLayout,
    /// Whether the disks carry the IDR code.
    pub idr: bool,
    /// User data to store, bytes.
    pub user_data_bytes: u128,
    /// Raw capacity per disk, bytes.
    pub disk_capacity_bytes: u64,
    /// Data disks needed: `ceil(user data / usable bytes per disk)`.
    pub data_disks_needed: u64,
    /// Independent arrays (or grids): `ceil(data disks / data disks per array)`.
    pub arrays: u64,
    /// Disks in total: `arrays · disks per array`.
    pub disks: u64,
    /// Storage efficiency: user-visible share of the raw capacity, in percent.
    pub efficiency_percent: f64,
    /// `h = C · HER` used.
    pub hard_error_per_drive_read: f64,
    /// MTTDL of one array or grid, hours.
    pub mttdl_array_hours: f64,
    /// MTTDL of the whole system, `MTTDL_array / arrays` (Hafner and Rao: independent arrays).
    pub mttdl_hours: f64,
    /// Details of the single-array model.
    pub array: UnitReliability,
}

/// Size a system for `user_data_bytes` and compute its MTTDL (thesis §4.4.2).
pub fn plan_system(
    layout: &PlanLayout,
    params: &ModelParams,
    user_data_bytes: u128,
    depth: GridDepth,
) -> Result<SystemPlan, PlanError> {
    params.validate()?;
    if user_data_bytes == 0 {
        return Err(PlanError::Parameter(
            "user data capacity must be more than 0 bytes".into(),
        ));
    }
    let (idr_data, idr_total) = params.idr.as_ref().map_or((1, 1), |idr| {
        (
            idr.data_blocks as u128,
            (idr.data_blocks + idr.check_blocks) as u128,
        )
    });
    // ceil(user / (C · in/(in+ik))) in integers, so 10,240 TiB on 4 TiB disks is exactly 2,720.
    let per_disk = params.disk_capacity_bytes as u128 * idr_data;
    let data_disks_needed = (user_data_bytes * idr_total).div_ceil(per_disk);
    let arrays = data_disks_needed.div_ceil(layout.data_disks() as u128);
    let disks = arrays * layout.disks() as u128;
    let too_big =
        || PlanError::Parameter(format!("a system of {disks} disks is too large to model"));
    let (data_disks_needed, arrays, disks) = (
        u64::try_from(data_disks_needed).map_err(|_| too_big())?,
        u64::try_from(arrays).map_err(|_| too_big())?,
        u64::try_from(disks).map_err(|_| too_big())?,
    );
    let array = unit_reliability(layout, params, depth)?;
    let efficiency_percent =
        100.0 * params.idr_fraction() * layout.data_disks() as f64 / layout.disks() as f64;
    Ok(SystemPlan {
        layout: *layout,
        idr: params.idr.is_some(),
        user_data_bytes,
        disk_capacity_bytes: params.disk_capacity_bytes,
        data_disks_needed,
        arrays,
        disks,
        efficiency_percent,
        hard_error_per_drive_read: params.hard_error_per_drive_read(),
        mttdl_array_hours: array.mttdl_hours,
        mttdl_hours: array.mttdl_hours / arrays as f64,
        array,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_disk_lives_one_mttf() {
        // No redundancy: the first failure is data loss.
        let mttdl = mttdl_hours(1, &[], 0.0, 1.0 / 500_000.0, 1.0 / 12.0);
        assert!((mttdl - 500_000.0).abs() < 1e-6);
    }

    #[test]
    fn mirrored_pair_matches_the_closed_form() {
        // 1+1 without hard errors: MTTDL = (3λ + μ) / (2λ²).
        let (l, m) = (1e-3, 0.1);
        let expected = (3.0 * l + m) / (2.0 * l * l);
        let mttdl = mttdl_hours(2, &[1.0], 0.0, l, m);
        assert!(
            (mttdl / expected - 1.0).abs() < 1e-12,
            "{mttdl} vs {expected}"
        );
    }
}
