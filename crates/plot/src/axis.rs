//! Axis scales: the data range, its mapping to pixels, and the tick marks with their labels.

/// One axis: a data interval `[lo, hi]` (both > 0 when logarithmic) mapped onto a pixel interval.
#[derive(Clone, Debug)]
pub(crate) struct Scale {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    pub px_lo: f64,
    pub px_hi: f64,
}

/// The most ticks a linear axis aims for, and the most decade labels a log axis prints.
const TICKS_TARGET: f64 = 6.0;
const LOG_LABELS_MAX: usize = 10;

impl Scale {
    /// A scale covering `values` (already filtered to those placeable on the axis), widened to
    /// round tick values. `include_zero` keeps 0 on a linear axis (bars grow from it).
    pub fn covering(values: &[f64], log: bool, include_zero: bool) -> Scale {
        let mut lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let mut hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() || !hi.is_finite() {
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            let mut lo_exp = lo.log10().floor();
            let mut hi_exp = hi.log10().ceil();
            if hi_exp <= lo_exp {
                hi_exp = lo_exp + 1.0;
            }
            if hi_exp - lo_exp > 300.0 {
                lo_exp = hi_exp - 300.0;
            }
            return Scale {
                lo: 10f64.powf(lo_exp),
                hi: 10f64.powf(hi_exp),
                log,
                px_lo: 0.0,
                px_hi: 1.0,
            };
        }
        if include_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            lo -= pad;
            hi += pad;
            if include_zero && lo < 0.0 && values.iter().all(|v| *v >= 0.0) {
                lo = 0.0;
            }
        }
        let step = nice_step((hi - lo) / TICKS_TARGET);
        Scale {
            lo: (lo / step).floor() * step,
            hi: (hi / step).ceil() * step,
            log,
            px_lo: 0.0,
            px_hi: 1.0,
        }
    }

    /// The same scale drawn onto pixels `px_lo` (at `lo`) to `px_hi` (at `hi`).
    pub fn onto(mut self, px_lo: f64, px_hi: f64) -> Scale {
        self.px_lo = px_lo;
        self.px_hi = px_hi;
        self
    }

    /// Can `v` be drawn on this axis (a log axis has no place for values ≤ 0)?
    pub fn accepts(&self, v: f64) -> bool {
        v.is_finite() && (!self.log || v > 0.0)
    }

    /// Pixel position of the data value `v`; values outside the range are clamped to a little
    /// beyond the edge so they stay inside the SVG.
    pub fn px(&self, v: f64) -> f64 {
        let fraction = if self.log {
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        let fraction = if fraction.is_finite() {
            fraction.clamp(-0.05, 1.05)
        } else {
            0.0
        };
        self.px_lo + fraction * (self.px_hi - self.px_lo)
    }

    /// Tick values with their labels.
    pub fn ticks(&self) -> Vec<(f64, String)> {
        if self.log {
            let lo_exp = self.lo.log10().round() as i32;
            let hi_exp = self.hi.log10().round() as i32;
            let decades = (hi_exp - lo_exp).max(1) as usize;
            let stride = decades.div_ceil(LOG_LABELS_MAX).max(1);
            (lo_exp..=hi_exp)
                .filter(|e| ((e - lo_exp) as usize).is_multiple_of(stride))
                .map(|e| (10f64.powi(e), power_of_ten_label(e)))
                .collect()
        } else {
            let step = nice_step((self.hi - self.lo) / TICKS_TARGET);
            let count = ((self.hi - self.lo) / step).round() as i64;
            let big = self.lo.abs().max(self.hi.abs()) >= 1e6;
            let decimals = (-step.log10().floor()).max(0.0) as usize;
            (0..=count)
                .map(|i| {
                    let v = self.lo + i as f64 * step;
                    let v = if v.abs() < step * 1e-9 { 0.0 } else { v };
                    let label = if big {
                        scientific_label(v)
                    } else {
                        format!("{v:.decimals$}")
                    };
                    (v, label)
                })
                .collect()
        }
    }
}

/// A step of 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let mantissa = raw / magnitude;
    let nice = if mantissa <= 1.0 {
        1.0
    } else if mantissa <= 2.0 {
        2.0
    } else if mantissa <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn superscript(exponent: i32) -> String {
    exponent
        .to_string()
        .chars()
        .map(|c| match c {
            '-' => '⁻',
            '0' => '⁰',
            '1' => '¹',
            '2' => '²',
            '3' => '³',
            '4' => '⁴',
            '5' => '⁵',
            '6' => '⁶',
            '7' => '⁷',
            '8' => '⁸',
            _ => '⁹',
        })
        .collect()
}

/// `10ⁿ`, or the plain number for small exponents (`0.01`, `1`, `1000`).
fn power_of_ten_label(exponent: i32) -> String {
    match exponent {
        -2..=-1 => format!("{:.*}", (-exponent) as usize, 10f64.powi(exponent)),
        0..=3 => format!("{}", 10u64.pow(exponent as u32)),
        _ => format!("10{}", superscript(exponent)),
    }
}

/// `2.5·10⁶` style label for large linear values.
fn scientific_label(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    let exponent = v.abs().log10().floor() as i32;
    let mantissa = v / 10f64.powi(exponent);
    let mantissa = format!("{mantissa:.2}");
    let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
    format!("{mantissa}·10{}", superscript(exponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_scale_widens_to_round_ticks_that_cover_the_data() {
        let scale = Scale::covering(&[0.3, 9.7], false, false);
        assert_eq!((scale.lo, scale.hi), (0.0, 10.0));
        let ticks: Vec<String> = scale.ticks().into_iter().map(|(_, l)| l).collect();
        assert_eq!(ticks, ["0", "2", "4", "6", "8", "10"]);
    }

    #[test]
    fn log_scale_spans_whole_decades_and_labels_powers_of_ten() {
        let scale = Scale::covering(&[3.0e6, 2.0e11], true, false);
        assert_eq!(scale.lo, 1e6);
        assert_eq!(scale.hi, 1e12);
        let labels: Vec<String> = scale.ticks().into_iter().map(|(_, l)| l).collect();
        assert_eq!(labels.first().unwrap(), "10⁶");
        assert_eq!(labels.last().unwrap(), "10¹²");
        let scale = scale.onto(100.0, 0.0);
        assert!((scale.px(1e9) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn degenerate_ranges_still_give_a_usable_axis() {
        let flat = Scale::covering(&[5.0, 5.0], false, false);
        assert!(flat.lo < 5.0 && flat.hi > 5.0);
        let empty = Scale::covering(&[], true, false);
        assert_eq!((empty.lo, empty.hi), (1.0, 10.0));
        assert_eq!(scientific_label(2.5e7), "2.5·10⁷");
    }
}
