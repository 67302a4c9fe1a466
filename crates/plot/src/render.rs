//! Drawing a [`Chart`] as SVG text.

use std::fmt::Write;

use crate::axis::Scale;
use crate::{Chart, Data, Kind};

/// The font named in the SVG; the PNG renderer falls back to any sans-serif face.
pub(crate) const FONT_FAMILY: &str = "DejaVu Sans";

/// Colours of successive series (colour-blind safe "Okabe–Ito" palette, then repeats).
const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// Bars and bins less tall than this (they print as height 0.0) are left out of the SVG.
const ZERO_HEIGHT_PX: f64 = 0.05;

/// Approximate width of one character of 12 px text, to size the legend and margins.
const CHAR_PX: f64 = 7.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// The whole SVG document.
pub(crate) fn svg(chart: &Chart, width: f64, height: f64) -> String {
    let named = chart.series.iter().filter(|s| !s.name.is_empty()).count();
    let legend_px = if named > 0 {
        let longest = chart
            .series
            .iter()
            .map(|s| s.name.chars().count())
            .max()
            .unwrap_or(0);
        (longest as f64 * CHAR_PX + 40.0).min(width * 0.3)
    } else {
        0.0
    };
    let longest_category = chart
        .categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let left = 84.0;
    let right = width - 20.0 - legend_px;
    let top = 48.0;
    let slot_px = (right - left) / chart.categories.len().max(1) as f64;
    let rotate_categories =
        chart.kind == Kind::Bar && longest_category as f64 * CHAR_PX > slot_px * 0.95;
    let bottom = height
        - if rotate_categories {
            60.0 + (longest_category as f64 * CHAR_PX * 0.6).min(120.0)
        } else {
            58.0
        };

    let (x_scale, y_scale) = scales(chart);
    let x_scale = x_scale.map(|s| s.onto(left, right));
    let y_scale = y_scale.onto(bottom, top);

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="{FONT_FAMILY}, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="28" font-size="17" font-weight="bold" text-anchor="middle">{}</text>"#,
        (left + right) / 2.0,
        escape(&chart.title)
    );

    // Grid lines and tick labels.
    for (v, label) in y_scale.ticks() {
        let y = y_scale.px(v);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#e3e3e3"/>"##
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + 4.0,
            escape(&label)
        );
    }
    match &x_scale {
        Some(x_scale) => {
            for (v, label) in x_scale.ticks() {
                let x = x_scale.px(v);
                let _ = writeln!(
                    out,
                    r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#e3e3e3"/>"##
                );
                let _ = writeln!(
                    out,
                    r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                    bottom + 18.0,
                    escape(&label)
                );
            }
        }
        None => {
            for (i, category) in chart.categories.iter().enumerate() {
                let x = left + (i as f64 + 0.5) * slot_px;
                if rotate_categories {
                    let y = bottom + 14.0;
                    let _ = writeln!(
                        out,
                        r#"<text x="{x:.1}" y="{y}" text-anchor="end" transform="rotate(-35 {x:.1} {y})">{}</text>"#,
                        escape(category)
                    );
                } else {
                    let _ = writeln!(
                        out,
                        r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                        bottom + 18.0,
                        escape(category)
                    );
                }
            }
        }
    }

    // Data.
    let n_series = chart.series.len().max(1);
    for (index, series) in chart.series.iter().enumerate() {
        let fill = colour(index);
        match (&series.data, &x_scale) {
            (Data::Points { xy, labels }, Some(x_scale)) => {
                let placed: Vec<(f64, f64, Option<&String>)> = xy
                    .iter()
                    .zip(labels.iter().map(Some).chain(std::iter::repeat(None)))
                    .filter(|((x, y), _)| x_scale.accepts(*x) && y_scale.accepts(*y))
                    .map(|((x, y), label)| (x_scale.px(*x), y_scale.px(*y), label))
                    .collect();
                if chart.kind == Kind::Line && placed.len() > 1 {
                    let points: Vec<String> = placed
                        .iter()
                        .map(|(x, y, _)| format!("{x:.1},{y:.1}"))
                        .collect();
                    let _ = writeln!(
                        out,
                        r#"<polyline points="{}" fill="none" stroke="{fill}" stroke-width="2"/>"#,
                        points.join(" ")
                    );
                }
                let radius = if chart.kind == Kind::Line { 2.5 } else { 4.5 };
                for (x, y, label) in &placed {
                    let _ = writeln!(
                        out,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="{radius}" fill="{fill}" fill-opacity="0.85"/>"#
                    );
                    if let Some(label) = label {
                        let _ = writeln!(
                            out,
                            r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#333">{}</text>"##,
                            x + 6.0,
                            y - 5.0,
                            escape(label)
                        );
                    }
                }
            }
            (Data::Bars(values), None) => {
                let group_px = slot_px * 0.8;
                let bar_px = group_px / n_series as f64;
                let base = if y_scale.log { bottom } else { y_scale.px(0.0) };
                for (i, v) in values.iter().enumerate() {
                    if !y_scale.accepts(*v) {
                        continue;
                    }
                    let x = left + i as f64 * slot_px + slot_px * 0.1 + index as f64 * bar_px;
                    let y = y_scale.px(*v);
                    // A bar of (rounded) zero height draws nothing, and SVG renderers warn about it.
                    if (y - base).abs() < ZERO_HEIGHT_PX {
                        continue;
                    }
                    let _ = writeln!(
                        out,
                        r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}"/>"#,
                        y.min(base),
                        (bar_px - 1.0).max(1.0),
                        (y - base).abs()
                    );
                }
            }
            (Data::Bins { edges, counts }, Some(x_scale)) => {
                let opacity = if n_series > 1 { 0.55 } else { 0.9 };
                let base = if y_scale.log { bottom } else { y_scale.px(0.0) };
                for (i, count) in counts.iter().enumerate() {
                    let (lo, hi) = (edges[i], edges[i + 1]);
                    if !(x_scale.accepts(lo) && x_scale.accepts(hi) && y_scale.accepts(*count)) {
                        continue;
                    }
                    let (x0, x1, y) = (x_scale.px(lo), x_scale.px(hi), y_scale.px(*count));
                    if (y - base).abs() < ZERO_HEIGHT_PX {
                        continue;
                    }
                    let _ = writeln!(
                        out,
                        r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}" fill-opacity="{opacity}" stroke="white" stroke-width="0.5"/>"#,
                        y.min(base),
                        (x1 - x0).max(0.5),
                        (y - base).abs()
                    );
                }
            }
            _ => {} // validate() refuses mismatched series before rendering
        }
    }

    // Axes and their labels.
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        right - left,
        bottom - top
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
        (left + right) / 2.0,
        height - 14.0,
        escape(&chart.x_label)
    );
    let y_mid = (top + bottom) / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="20" y="{y_mid}" font-size="13" text-anchor="middle" transform="rotate(-90 20 {y_mid})">{}</text>"#,
        escape(&chart.y_label)
    );

    // Legend, right of the plot.
    if legend_px > 0.0 {
        let mut y = top + 10.0;
        for (index, series) in chart
            .series
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.name.is_empty())
        {
            let x = right + 14.0;
            let _ = writeln!(
                out,
                r#"<rect x="{x}" y="{}" width="14" height="10" fill="{}"/>"#,
                y - 9.0,
                colour(index)
            );
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{y}">{}</text>"#,
                x + 20.0,
                escape(&series.name)
            );
            y += 18.0;
        }
    }
    out.push_str("</svg>\n");
    out
}

/// The horizontal scale (none for bar charts: categories) and the vertical scale.
fn scales(chart: &Chart) -> (Option<Scale>, Scale) {
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    let keep = |log: bool, v: f64| v.is_finite() && (!log || v > 0.0);
    for series in &chart.series {
        match &series.data {
            Data::Points { xy, .. } => {
                for &(x, y) in xy {
                    if keep(chart.x_log, x) && keep(chart.y_log, y) {
                        xs.push(x);
                        ys.push(y);
                    }
                }
            }
            Data::Bars(values) => {
                ys.extend(values.iter().copied().filter(|v| keep(chart.y_log, *v)))
            }
            Data::Bins { edges, counts } => {
                xs.extend(edges.iter().copied().filter(|v| keep(chart.x_log, *v)));
                ys.extend(counts.iter().copied().filter(|v| keep(chart.y_log, *v)));
            }
        }
    }
    let bars_from_zero = matches!(chart.kind, Kind::Bar | Kind::Histogram);
    let y = Scale::covering(&ys, chart.y_log, bars_from_zero);
    let x = (chart.kind != Kind::Bar).then(|| Scale::covering(&xs, chart.x_log, false));
    (x, y)
}
