//! Small chart library for permafrost's `plan`, `sim` and `survey` commands.
//!
//! Four kinds of chart: **line** (several series of `(x, y)` points), **scatter** (points,
//! optionally labelled), grouped **bar** (one value per category and series) and **histogram**
//! (bins given by their edges). Either axis of a line or scatter chart, the value axis of a bar
//! chart and both axes of a histogram can be logarithmic.
//!
//! A chart is rendered to SVG by this crate itself (no templates, no JavaScript); the PNG is the
//! same SVG rasterised with `resvg`, so the two files always show the same picture.
//!
//! ```no_run
//! use permafrost_plot::Chart;
//! let chart = Chart::scatter("MTTDL against efficiency")
//!     .x_label("efficiency (%)")
//!     .y_label("MTTDL (hours)")
//!     .y_log(true)
//!     .series("n+k arrays", [(75.0, 4.13e6), (66.7, 1.91e10)]);
//! chart.write(std::path::Path::new("plots"), "mttdl")?; // plots/mttdl.svg, plots/mttdl.png
//! # Ok::<(), permafrost_plot::PlotError>(())
//! ```
//!
//! Guarantees and limits:
//! - Non-finite data (NaN, ±∞) is refused with [`PlotError::InvalidData`] naming the series.
//! - On a logarithmic axis, points, bars and bins whose value is ≤ 0 have no place and are left
//!   out of the drawing (an empty histogram bin on a log count axis is simply not drawn).
//! - Text needs a font for the PNG: the system's fonts are searched once (DejaVu Sans, installed
//!   by `scripts/setup-deps.sh`, or any sans-serif face). Without any font, [`Chart::to_png`]
//!   fails with [`PlotError::NoFont`] rather than writing a picture without labels.
//! - At most [`SERIES_MAX`] series and [`POINTS_MAX`] points per series, so a chart stays a
//!   picture people can read and a file of bounded size.

#![forbid(unsafe_code)]

mod axis;
mod render;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The most series one chart may hold.
pub const SERIES_MAX: usize = 16;
/// The most points (or bars, or bins) one series may hold.
pub const POINTS_MAX: usize = 100_000;

/// Width and height of the SVG canvas, in CSS pixels.
const WIDTH_PX: f64 = 860.0;
const HEIGHT_PX: f64 = 520.0;
/// The PNG is rendered at this multiple of the SVG size, for legible text.
const PNG_SCALE: f32 = 1.5;

/// Why a chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The chart's data cannot be drawn (wrong kind of series, NaN, mismatched lengths, too many).
    #[error("chart {chart:?}, series {series:?}: {reason}")]
    InvalidData {
        /// The chart's title.
        chart: String,
        /// The offending series' name.
        series: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file name is not a plain name (empty, or contains a path separator).
    #[error(
        "chart file name {0:?} must be a plain name without '/' (it gets .svg and .png appended)"
    )]
    BadName(String),
    /// No font could be found to draw the PNG's text.
    #[error(
        "no usable font found for the PNG text (install fonts-dejavu-core: scripts/setup-deps.sh)"
    )]
    NoFont,
    /// The SVG could not be parsed or rasterised (a bug in this crate).
    #[error("rendering chart {chart:?} to PNG failed: {reason}")]
    Render {
        /// The chart's title.
        chart: String,
        /// The renderer's message.
        reason: String,
    },
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// What kind of chart to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Series of points joined by lines.
    Line,
    /// Series of unjoined points.
    Scatter,
    /// Grouped bars: one bar per series in each category.
    Bar,
    /// Bins between edges, one rectangle per bin.
    Histogram,
}

/// The data of one series; which variant a chart takes follows from its [`Kind`].
#[derive(Clone, Debug)]
enum Data {
    Points {
        xy: Vec<(f64, f64)>,
        labels: Vec<String>,
    },
    Bars(Vec<f64>),
    Bins {
        edges: Vec<f64>,
        counts: Vec<f64>,
    },
}

#[derive(Clone, Debug)]
struct Series {
    name: String,
    data: Data,
}

/// A chart under construction: title, axis labels, log flags and series. Build with the
/// constructors ([`Chart::line`], [`Chart::scatter`], [`Chart::bar`], [`Chart::histogram`]) and
/// the chained setters, then [`Chart::write`] it.
#[derive(Clone, Debug)]
pub struct Chart {
    kind: Kind,
    title: String,
    x_label: String,
    y_label: String,
    x_log: bool,
    y_log: bool,
    categories: Vec<String>,
    series: Vec<Series>,
}

/// The files [`Chart::write`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// `DIR/name.svg`.
    pub svg: PathBuf,
    /// `DIR/name.png`.
    pub png: PathBuf,
}

impl Chart {
    fn new(kind: Kind, title: &str) -> Chart {
        Chart {
            kind,
            title: title.to_string(),
            x_label: String::new(),
            y_label: String::new(),
            x_log: false,
            y_log: false,
            categories: Vec::new(),
            series: Vec::new(),
        }
    }

    /// A line chart; add series with [`Chart::series`].
    pub fn line(title: &str) -> Chart {
        Chart::new(Kind::Line, title)
    }

    /// A scatter chart; add series with [`Chart::series`] or [`Chart::labeled_series`].
    pub fn scatter(title: &str) -> Chart {
        Chart::new(Kind::Scatter, title)
    }

    /// A grouped bar chart over `categories`; add one series per group member with
    /// [`Chart::bars`] (one value per category).
    pub fn bar<S: Into<String>>(title: &str, categories: impl IntoIterator<Item = S>) -> Chart {
        let mut chart = Chart::new(Kind::Bar, title);
        chart.categories = categories.into_iter().map(Into::into).collect();
        chart
    }

    /// A histogram; add series with [`Chart::bins`] (several series are drawn translucent).
    pub fn histogram(title: &str) -> Chart {
        Chart::new(Kind::Histogram, title)
    }

    /// The chart's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Label of the horizontal axis (include the unit, e.g. `"capacity (GiB)"`).
    pub fn x_label(mut self, label: &str) -> Chart {
        self.x_label = label.to_string();
        self
    }

    /// Label of the vertical axis.
    pub fn y_label(mut self, label: &str) -> Chart {
        self.y_label = label.to_string();
        self
    }

    /// Logarithmic horizontal axis (ignored by bar charts, whose x axis is categories).
    pub fn x_log(mut self, log: bool) -> Chart {
        self.x_log = log;
        self
    }

    /// Logarithmic vertical axis.
    pub fn y_log(mut self, log: bool) -> Chart {
        self.y_log = log;
        self
    }

    /// Add a series of `(x, y)` points (line and scatter charts).
    pub fn series(mut self, name: &str, points: impl IntoIterator<Item = (f64, f64)>) -> Chart {
        let xy = points.into_iter().collect();
        self.series.push(Series {
            name: name.to_string(),
            data: Data::Points {
                xy,
                labels: Vec::new(),
            },
        });
        self
    }

    /// Add a series of points, each with a short text drawn next to it (e.g. a layout name).
    pub fn labeled_series<S: Into<String>>(
        mut self,
        name: &str,
        points: impl IntoIterator<Item = (f64, f64, S)>,
    ) -> Chart {
        let (mut xy, mut labels) = (Vec::new(), Vec::new());
        for (x, y, label) in points {
            xy.push((x, y));
            labels.push(label.into());
        }
        self.series.push(Series {
            name: name.to_string(),
            data: Data::Points { xy, labels },
        });
        self
    }

    /// Add a bar series: one value per category (bar charts).
    pub fn bars(mut self, name: &str, values: impl IntoIterator<Item = f64>) -> Chart {
        self.series.push(Series {
            name: name.to_string(),
            data: Data::Bars(values.into_iter().collect()),
        });
        self
    }

    /// Add a histogram series: bin `i` spans `edges[i]..edges[i+1]` and holds `counts[i]`, so
    /// `edges` has one more element than `counts` and must increase strictly.
    pub fn bins(
        mut self,
        name: &str,
        edges: impl IntoIterator<Item = f64>,
        counts: impl IntoIterator<Item = f64>,
    ) -> Chart {
        let data = Data::Bins {
            edges: edges.into_iter().collect(),
            counts: counts.into_iter().collect(),
        };
        self.series.push(Series {
            name: name.to_string(),
            data,
        });
        self
    }

    /// The chart as a standalone SVG document.
    pub fn to_svg(&self) -> Result<String, PlotError> {
        self.validate()?;
        Ok(render::svg(self, WIDTH_PX, HEIGHT_PX))
    }

    /// The chart as a PNG image (the SVG rasterised at 1.5×).
    pub fn to_png(&self) -> Result<Vec<u8>, PlotError> {
        let svg = self.to_svg()?;
        rasterise(&svg).map_err(|reason| match reason {
            RasterError::NoFont => PlotError::NoFont,
            RasterError::Other(reason) => PlotError::Render {
                chart: self.title.clone(),
                reason,
            },
        })
    }

    /// Write `dir/name.svg` and `dir/name.png`, creating `dir` if needed.
    pub fn write(&self, dir: &Path, name: &str) -> Result<Written, PlotError> {
        if name.is_empty()
            || name.contains('/')
            || name.contains('\\')
            || name == "."
            || name == ".."
        {
            return Err(PlotError::BadName(name.to_string()));
        }
        let svg = self.to_svg()?;
        let png = self.to_png()?;
        std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let written = Written {
            svg: dir.join(format!("{name}.svg")),
            png: dir.join(format!("{name}.png")),
        };
        std::fs::write(&written.svg, svg).map_err(|source| PlotError::Io {
            path: written.svg.clone(),
            source,
        })?;
        std::fs::write(&written.png, png).map_err(|source| PlotError::Io {
            path: written.png.clone(),
            source,
        })?;
        Ok(written)
    }

    fn validate(&self) -> Result<(), PlotError> {
        let invalid = |series: &str, reason: String| PlotError::InvalidData {
            chart: self.title.clone(),
            series: series.to_string(),
            reason,
        };
        if self.series.len() > SERIES_MAX {
            return Err(invalid(
                "",
                format!(
                    "{} series, at most {SERIES_MAX} are drawn",
                    self.series.len()
                ),
            ));
        }
        for series in &self.series {
            let name = series.name.as_str();
            let values: Vec<f64> = match (&series.data, self.kind) {
                (Data::Points { xy, .. }, Kind::Line | Kind::Scatter) => {
                    xy.iter().flat_map(|&(x, y)| [x, y]).collect()
                }
                (Data::Bars(values), Kind::Bar) => {
                    if values.len() != self.categories.len() {
                        let reason = format!(
                            "{} values for {} categories",
                            values.len(),
                            self.categories.len()
                        );
                        return Err(invalid(name, reason));
                    }
                    values.clone()
                }
                (Data::Bins { edges, counts }, Kind::Histogram) => {
                    if edges.len() != counts.len() + 1 {
                        let reason = format!(
                            "{} edges for {} bins (need bins + 1)",
                            edges.len(),
                            counts.len()
                        );
                        return Err(invalid(name, reason));
                    }
                    if edges.windows(2).any(|w| w[0] >= w[1]) {
                        return Err(invalid(
                            name,
                            "bin edges must increase strictly".to_string(),
                        ));
                    }
                    edges.iter().chain(counts).copied().collect()
                }
                (_, kind) => {
                    return Err(invalid(
                        name,
                        format!("this kind of series does not fit a {kind:?} chart"),
                    ))
                }
            };
            if values.len() > 2 * POINTS_MAX + 1 {
                return Err(invalid(name, format!("more than {POINTS_MAX} points")));
            }
            if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
                return Err(invalid(name, format!("value {bad} is not a finite number")));
            }
        }
        Ok(())
    }
}

enum RasterError {
    NoFont,
    Other(String),
}

/// The system's fonts, loaded once per process (scanning the font directories takes a while).
fn fonts() -> Option<Arc<resvg::usvg::fontdb::Database>> {
    static FONTS: OnceLock<Option<Arc<resvg::usvg::fontdb::Database>>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = resvg::usvg::fontdb::Database::new();
            db.load_system_fonts();
            if db.is_empty() {
                return None;
            }
            let family = db
                .faces()
                .flat_map(|face| face.families.iter().map(|(name, _)| name.clone()))
                .find(|name| name == render::FONT_FAMILY)
                .or_else(|| {
                    db.faces()
                        .find_map(|face| face.families.first().map(|(name, _)| name.clone()))
                })?;
            db.set_sans_serif_family(family);
            Some(Arc::new(db))
        })
        .clone()
}

fn rasterise(svg: &str) -> Result<Vec<u8>, RasterError> {
    let fontdb = fonts().ok_or(RasterError::NoFont)?;
    let options = resvg::usvg::Options {
        fontdb,
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &options)
        .map_err(|e| RasterError::Other(e.to_string()))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(PNG_SCALE)
        .ok_or_else(|| RasterError::Other("bad size".into()))?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| RasterError::Other("cannot allocate the image".into()))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(PNG_SCALE, PNG_SCALE),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| RasterError::Other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_with_bad_data_are_refused_with_the_series_named() {
        let nan = Chart::line("t")
            .series("broken", [(1.0, f64::NAN)])
            .to_svg()
            .unwrap_err();
        assert!(nan.to_string().contains("\"broken\""), "{nan}");
        let bars = Chart::bar("t", ["a", "b"])
            .bars("short", [1.0])
            .to_svg()
            .unwrap_err();
        assert!(
            bars.to_string().contains("1 values for 2 categories"),
            "{bars}"
        );
        let bins = Chart::histogram("t")
            .bins("h", [1.0, 1.0], [3.0])
            .to_svg()
            .unwrap_err();
        assert!(bins.to_string().contains("increase strictly"), "{bins}");
        let kind = Chart::line("t").bars("b", [1.0]).to_svg().unwrap_err();
        assert!(kind.to_string().contains("does not fit"), "{kind}");
        let name = Chart::line("t")
            .write(Path::new("/tmp"), "a/b")
            .unwrap_err();
        assert!(matches!(name, PlotError::BadName(_)));
    }
}
