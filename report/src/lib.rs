//! The figures rulka draws, as SVG, through [`plotters`]: line charts of one
//! or more panels over a shared x axis ([`Chart`]: `rulka plot`'s learning
//! curves and held-out ratios, `rulka bench inference`'s latencies), top
//! views of the world on one scale ([`TopView`]: `rulka map show`'s map
//! line and height profile, `rulka sim render`'s driven lines), and the
//! colour map of speeds and heights ([`viridis`]). Callers hand over plain
//! numbers; the layout, axes, ticks and legends are this crate's.
//!
//! ```
//! use rulka_report::{Chart, Line, Panel, YRange};
//!
//! let progress = Line::new("progress", 0, vec![(0.0, 0.1), (5000.0, 0.6), (10_000.0, 0.9)]);
//! let chart = Chart::new("a run", "frames").panel(Panel::new("progress", YRange::Fraction).line(progress));
//! let svg = chart.svg()?;
//! assert!(svg.starts_with("<svg") && svg.contains("<polyline"));
//! # Ok::<(), rulka_report::ReportError>(())
//! ```
//!
//! Layout (pixels), so that a test can say where a point must land: the
//! figure is [`WIDTH`] wide; below a [`TITLE_HEIGHT`] title, each panel is
//! [`PANEL_HEIGHT`] high, and its plot area spans x from [`PLOT_LEFT`] to
//! [`PLOT_RIGHT`] and y from the panel's top + [`PLOT_TOP`] to its top +
//! [`PLOT_BOTTOM`]; a value maps linearly onto that span (the first pixel
//! to the low end of the range, the last to the high end), rounded down.

mod chart;
mod top_view;

pub use chart::{Chart, Line, Mark, Panel, YRange};
pub use top_view::{Item, Note, TopView, View, Width, VIEW_SIZE};

/// A figure's width.
pub const WIDTH: u32 = 800;
/// The height of the title strip above the panels.
pub const TITLE_HEIGHT: u32 = 34;
/// The height of one panel of a [`Chart`].
pub const PANEL_HEIGHT: u32 = 320;
/// A panel's plot area, left edge (after the y labels).
pub const PLOT_LEFT: i32 = 84;
/// A panel's plot area, right edge (its last pixel).
pub const PLOT_RIGHT: i32 = 787;
/// A panel's plot area, top edge, from the panel's top.
pub const PLOT_TOP: i32 = 12;
/// A panel's plot area, bottom edge (its last pixel), from the panel's top.
pub const PLOT_BOTTOM: i32 = 263;

/// The colours of successive lines (runs, backends): index modulo its length.
pub const PALETTE: [(u8, u8, u8); 7] = [
    (0x1f, 0x77, 0xb4),
    (0xd6, 0x27, 0x28),
    (0x2c, 0xa0, 0x2c),
    (0x94, 0x67, 0xbd),
    (0xff, 0x7f, 0x0e),
    (0x8c, 0x56, 0x4b),
    (0x17, 0xbe, 0xcf),
];

/// Why a figure could not be drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Nothing to draw: a chart without a line with a point, a top view
    /// without a point.
    #[error("nothing to draw: {0}")]
    Empty(String),
    /// The plotting library's own failure.
    #[error("drawing the figure: {0}")]
    Draw(String),
}

impl ReportError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        match self {
            Self::Empty(_) => rulka_error::ErrorKind::BadInput,
            Self::Draw(_) => rulka_error::ErrorKind::Failed,
        }
    }
}

fn draw_err(e: impl std::fmt::Display) -> ReportError {
    ReportError::Draw(e.to_string())
}

/// `1234567` → `1.23M`, `45600` → `46k`, `12` → `12`: frame counts on axes
/// and in legends.
pub fn human(f: f64) -> String {
    if f.abs() >= 1e6 {
        format!("{:.2}M", f / 1e6)
    } else if f.abs() >= 1e3 {
        format!("{:.0}k", f / 1e3)
    } else {
        format!("{f:.0}")
    }
}

/// Viridis-like colour map stops (low: dark purple → high: yellow).
const VIRIDIS: [[f64; 3]; 5] = [
    [68.0, 1.0, 84.0],
    [59.0, 82.0, 139.0],
    [33.0, 145.0, 140.0],
    [94.0, 201.0, 98.0],
    [253.0, 231.0, 37.0],
];

/// The colour of `x` in `[0, 1]` (clamped; not a number counts as 0) on the
/// viridis-like map of speeds and heights.
pub fn viridis(x: f64) -> [u8; 3] {
    let x = if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) } * (VIRIDIS.len() - 1) as f64;
    let i = (x.floor() as usize).min(VIRIDIS.len() - 2);
    let f = x - i as f64;
    let c = |k: usize| (VIRIDIS[i][k] + (VIRIDIS[i + 1][k] - VIRIDIS[i][k]) * f).round() as u8;
    [c(0), c(1), c(2)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_counts() {
        assert_eq!(human(12.0), "12");
        assert_eq!(human(45_600.0), "46k");
        assert_eq!(human(1_234_567.0), "1.23M");
    }

    #[test]
    fn viridis_runs_from_the_first_stop_to_the_last() {
        assert_eq!(viridis(0.0), [68, 1, 84]);
        assert_eq!(viridis(1.0), [253, 231, 37]);
        assert_eq!(viridis(0.125), [64, 42, 112]); // halfway between stops 0 and 1
        assert_eq!(viridis(-1.0), viridis(0.0));
        assert_eq!(viridis(f64::NAN), viridis(0.0));
    }
}
