//! Line charts: panels stacked over one x axis.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{draw_err, human, ReportError, PALETTE, PANEL_HEIGHT, TITLE_HEIGHT, WIDTH};

/// How a panel's y axis spans its values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum YRange {
    /// 0 to 1, labelled in percent; values outside are drawn at the edge.
    Fraction,
    /// `lo` to `hi`; values outside are drawn at the edge.
    Fixed {
        /// The bottom of the axis.
        lo: f64,
        /// The top of the axis.
        hi: f64,
    },
    /// From the lowest value to the highest (1 either side of a single value).
    Auto,
    /// Powers of ten around the values (which must be positive), on a
    /// logarithmic axis.
    Log10,
}

/// One line of a panel: points `(x, y)` in data units, in order. Points with
/// a coordinate that is not a finite number are left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Its entry in the panel's legend (none: not listed).
    pub label: Option<String>,
    /// Its colour: an index into [`PALETTE`](crate::PALETTE), modulo its length.
    pub color: usize,
    /// Drawn dashed.
    pub dashed: bool,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

impl Line {
    /// A solid line listed in the legend as `label`.
    pub fn new(label: impl Into<String>, color: usize, points: Vec<(f64, f64)>) -> Self {
        Self { label: Some(label.into()), color, dashed: false, points }
    }

    /// A solid line not listed in the legend.
    pub fn unlabelled(color: usize, points: Vec<(f64, f64)>) -> Self {
        Self { label: None, color, dashed: false, points }
    }

    /// The same line, dashed.
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
}

/// A horizontal reference line across a panel at `y`, labelled.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Where.
    pub y: f64,
    /// Its label, written above it at the left.
    pub label: String,
}

/// One panel: its y axis and its lines.
#[derive(Debug, Clone)]
pub struct Panel {
    y_desc: String,
    range: YRange,
    y_format: Option<fn(f64) -> String>,
    lines: Vec<Line>,
    marks: Vec<Mark>,
    vmarks: Vec<f64>,
}

impl Panel {
    /// An empty panel whose y axis is `y_desc`, spanning `range`.
    pub fn new(y_desc: impl Into<String>, range: YRange) -> Self {
        Self {
            y_desc: y_desc.into(),
            range,
            y_format: None,
            lines: Vec::new(),
            marks: Vec::new(),
            vmarks: Vec::new(),
        }
    }

    /// Adds a red vertical line across the panel at `x` (a place to look at).
    pub fn vmark(mut self, x: f64) -> Self {
        self.vmarks.push(x);
        self
    }

    /// Adds a line.
    pub fn line(mut self, line: Line) -> Self {
        self.lines.push(line);
        self
    }

    /// Adds a horizontal reference line.
    pub fn mark(mut self, y: f64, label: impl Into<String>) -> Self {
        self.marks.push(Mark { y, label: label.into() });
        self
    }

    /// Labels the y ticks with `f` of the value (default: percent for
    /// [`YRange::Fraction`], two significant decimals otherwise).
    pub fn y_format(mut self, f: fn(f64) -> String) -> Self {
        self.y_format = Some(f);
        self
    }

    /// The largest finite x of its lines (0 when none).
    pub(crate) fn x_max(&self) -> f64 {
        self.lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max)
    }

    /// The drawn span of y, in axis units (log10 of the values on a log axis).
    fn span(&self) -> (f64, f64) {
        let ys = || {
            self.lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).filter(|y| y.is_finite())
        };
        match self.range {
            YRange::Fraction => (0.0, 1.0),
            YRange::Fixed { lo, hi } => (lo, hi),
            YRange::Auto => {
                let (lo, hi) =
                    ys().fold((f64::INFINITY, f64::NEG_INFINITY), |a, y| (a.0.min(y), a.1.max(y)));
                if !lo.is_finite() {
                    (0.0, 1.0)
                } else if hi > lo {
                    (lo, hi)
                } else {
                    (lo - 1.0, lo + 1.0)
                }
            }
            YRange::Log10 => {
                let logs = ys().filter(|y| *y > 0.0).map(f64::log10);
                let (lo, hi) =
                    logs.fold((f64::INFINITY, f64::NEG_INFINITY), |a, y| (a.0.min(y), a.1.max(y)));
                if !lo.is_finite() {
                    (0.0, 1.0)
                } else {
                    (lo.floor(), hi.ceil().max(lo.floor() + 1.0))
                }
            }
        }
    }

    /// `y` in axis units, kept inside `span` where the range clamps.
    fn to_axis(&self, y: f64, span: (f64, f64)) -> f64 {
        match self.range {
            YRange::Fraction | YRange::Fixed { .. } => y.clamp(span.0, span.1),
            YRange::Auto => y,
            YRange::Log10 => y.log10(),
        }
    }

    fn tick_label(&self, axis: f64) -> String {
        let v = if self.range == YRange::Log10 { 10f64.powf(axis) } else { axis };
        match (self.y_format, self.range) {
            (Some(f), _) => f(v),
            (None, YRange::Fraction) => format!("{:.0}%", 100.0 * v),
            (None, _) => format!("{v:.2}"),
        }
    }
}

/// A figure of panels stacked over one x axis, with a title.
#[derive(Debug, Clone)]
pub struct Chart {
    title: String,
    x_desc: String,
    x_log2: bool,
    x_format: fn(f64) -> String,
    panels: Vec<Panel>,
}

impl Chart {
    /// A chart titled `title` whose x axis is `x_desc`, from 0 to the largest
    /// x of its lines, ticks written by [`human`].
    pub fn new(title: impl Into<String>, x_desc: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            x_desc: x_desc.into(),
            x_log2: false,
            x_format: human,
            panels: Vec::new(),
        }
    }

    /// Adds a panel below the others.
    pub fn panel(mut self, panel: Panel) -> Self {
        self.panels.push(panel);
        self
    }

    /// A base-2 logarithmic x axis from the smallest x to the largest
    /// (which must be positive), ticks written by `f` of the value.
    pub fn x_log2(mut self, f: fn(f64) -> String) -> Self {
        self.x_log2 = true;
        self.x_format = f;
        self
    }

    /// The x axis: its span (in axis units) over every panel's points.
    fn x_axis(&self) -> XAxis<'_> {
        let xs = self
            .panels
            .iter()
            .flat_map(|p| p.lines.iter().flat_map(|l| l.points.iter().map(|q| q.0)))
            .filter(|x| x.is_finite() && (!self.x_log2 || *x > 0.0));
        let span = if self.x_log2 {
            let (lo, hi) = xs
                .map(f64::log2)
                .fold((f64::INFINITY, f64::NEG_INFINITY), |a, x| (a.0.min(x), a.1.max(x)));
            if lo.is_finite() {
                (lo, hi.max(lo + 1.0))
            } else {
                (0.0, 1.0)
            }
        } else {
            (0.0, xs.fold(1.0, f64::max))
        };
        XAxis { desc: &self.x_desc, log2: self.x_log2, format: self.x_format, span }
    }

    /// The figure as an SVG document: [`WIDTH`] wide, [`TITLE_HEIGHT`] +
    /// [`PANEL_HEIGHT`] per panel high.
    pub fn svg(&self) -> Result<String, ReportError> {
        if self.panels.iter().all(|p| p.lines.iter().all(|l| l.points.is_empty())) {
            return Err(ReportError::Empty(format!("{}: no line has a point", self.title)));
        }
        let height = TITLE_HEIGHT + PANEL_HEIGHT * self.panels.len() as u32;
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
            root.fill(&WHITE).map_err(draw_err)?;
            let (top, rest) = root.split_vertically(TITLE_HEIGHT);
            let font = ("sans-serif", 15).into_font();
            top.draw(&Text::new(self.title.clone(), (crate::PLOT_LEFT, 10), font))
                .map_err(draw_err)?;
            let x = self.x_axis();
            for (area, panel) in rest.split_evenly((self.panels.len(), 1)).iter().zip(&self.panels)
            {
                draw_panel(area, panel, &x)?;
            }
            root.present().map_err(draw_err)?;
        }
        Ok(out)
    }
}

/// A chart's x axis: what it is, how its ticks read, its span in axis units.
pub(crate) struct XAxis<'a> {
    pub(crate) desc: &'a str,
    pub(crate) log2: bool,
    pub(crate) format: fn(f64) -> String,
    pub(crate) span: (f64, f64),
}

/// Draws `panel` over `area` ([`WIDTH`] × [`PANEL_HEIGHT`], the plot area
/// at the documented place).
pub(crate) fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
    xa: &XAxis<'_>,
) -> Result<(), ReportError> {
    let x = xa.span;
    let y = panel.span();
    let mut chart = ChartBuilder::on(area)
        .margin_top(crate::PLOT_TOP)
        .margin_left(12)
        .margin_right(WIDTH as i32 - 1 - crate::PLOT_RIGHT)
        .margin_bottom(12)
        .x_label_area_size(PANEL_HEIGHT as i32 - 12 - 1 - crate::PLOT_BOTTOM)
        .y_label_area_size(crate::PLOT_LEFT - 12)
        .build_cartesian_2d(x.0..x.1, y.0..y.1)
        .map_err(draw_err)?;
    let x_label = |v: &f64| (xa.format)(if xa.log2 { v.exp2() } else { *v });
    let y_label = |v: &f64| panel.tick_label(*v);
    let (x_ticks, y_ticks) = (if xa.log2 { (x.1 - x.0) as usize + 1 } else { 6 }, 6);
    chart
        .configure_mesh()
        .x_desc(xa.desc)
        .y_desc(panel.y_desc.as_str())
        .x_labels(x_ticks)
        .y_labels(y_ticks)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;
    let to_x = |v: f64| if xa.log2 { v.log2() } else { v };
    for &at in &panel.vmarks {
        let at = to_x(at);
        let red = RGBColor(0xd6, 0x27, 0x28).stroke_width(1);
        chart.draw_series(LineSeries::new([(at, y.0), (at, y.1)], red)).map_err(draw_err)?;
    }
    for mark in &panel.marks {
        let at = panel.to_axis(mark.y, y);
        let grey = RGBColor(150, 150, 150);
        let style = grey.stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new([(x.0, at), (x.1, at)], 5, 4, style))
            .map_err(draw_err)?;
        let font = ("sans-serif", 11).into_font().color(&grey);
        chart
            .plotting_area()
            .draw(&Text::new(mark.label.clone(), (x.0, at), font))
            .map_err(draw_err)?;
    }
    let mut legend = false;
    for line in &panel.lines {
        let (r, g, b) = PALETTE[line.color % PALETTE.len()];
        let style = RGBColor(r, g, b).stroke_width(2);
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            // Non-finite data is left out before clamping could move it to an edge;
            // the second filter drops what the log axes make of values ≤ 0.
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(px, py)| (to_x(px), panel.to_axis(py, y)))
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        let empty = points.is_empty();
        let drawn = if line.dashed {
            chart.draw_series(DashedLineSeries::new(points, 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(points, style))
        }
        .map_err(draw_err)?;
        // A line without a point is not listed (nothing to look for).
        if let Some(label) = line.label.as_ref().filter(|_| !empty) {
            legend = true;
            drawn
                .label(label.as_str())
                .legend(move |(lx, ly)| PathElement::new(vec![(lx, ly), (lx + 18, ly)], style));
        }
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(190, 190, 190))
            .label_font(("sans-serif", 11))
            .draw()
            .map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT, PLOT_TOP};

    use rulka_test_support::polylines;

    #[test]
    fn a_line_corner_to_corner_lands_on_the_plot_areas_corners() {
        let line = Line::new("diagonal", 0, vec![(0.0, 0.0), (500.0, 0.5), (1000.0, 1.0)]);
        let svg = Chart::new("t", "frames")
            .panel(Panel::new("p", YRange::Fraction).line(line))
            .svg()
            .unwrap();
        let lines = polylines(&svg, "#1F77B4");
        // The legend's sample is a two-point path too; the data line has three.
        let data: Vec<_> = lines.iter().filter(|l| l.len() == 3).collect();
        assert_eq!(data.len(), 1, "{svg}");
        let top = TITLE_HEIGHT as i32;
        let mid = ((PLOT_LEFT + PLOT_RIGHT) / 2, top + (PLOT_TOP + PLOT_BOTTOM) / 2);
        assert_eq!(data[0][0], (PLOT_LEFT, top + PLOT_BOTTOM));
        assert_eq!(data[0][2], (PLOT_RIGHT, top + PLOT_TOP));
        assert!(
            (data[0][1].0 - mid.0).abs() <= 1 && (data[0][1].1 - mid.1).abs() <= 1,
            "{:?}",
            data[0]
        );
        assert!(
            svg.contains("\ndiagonal\n") && svg.contains("\n100%\n") && svg.contains("\n1k\n"),
            "{svg}"
        );
    }

    #[test]
    fn second_panel_sits_below_and_fixed_ranges_clamp() {
        let chart = Chart::new("t", "frames")
            .panel(
                Panel::new("a", YRange::Fraction)
                    .line(Line::unlabelled(1, vec![(0.0, 0.0), (10.0, 1.0)])),
            )
            .panel(
                Panel::new("ratio", YRange::Fixed { lo: 0.5, hi: 1.5 })
                    .mark(1.0, "autopilot")
                    .line(Line::unlabelled(2, vec![(0.0, 3.0), (10.0, 0.0)])),
            );
        let svg = chart.svg().unwrap();
        let top2 = TITLE_HEIGHT as i32 + PANEL_HEIGHT as i32;
        let l = polylines(&svg, "#2CA02C");
        assert_eq!(l, vec![vec![(PLOT_LEFT, top2 + PLOT_TOP), (PLOT_RIGHT, top2 + PLOT_BOTTOM)]]);
        assert!(svg.contains("\nautopilot\n"), "{svg}");
        assert!(svg.contains(&format!("height=\"{}\"", TITLE_HEIGHT + 2 * PANEL_HEIGHT)), "{svg}");
    }

    #[test]
    fn log_axes_put_each_power_at_its_share() {
        // x: batches 1..16 (log2 0..4), y: 1 µs..1000 µs (log10 0..3).
        let pts = vec![(1.0, 1.0), (4.0, 10.0), (16.0, 1000.0)];
        let svg = Chart::new("t", "batch")
            .x_log2(|v| format!("{v:.0}"))
            .panel(Panel::new("µs", YRange::Log10).line(Line::unlabelled(3, pts)))
            .svg()
            .unwrap();
        let l = &polylines(&svg, "#9467BD")[0];
        let top = TITLE_HEIGHT as i32;
        let (w, h) = (PLOT_RIGHT - PLOT_LEFT, PLOT_BOTTOM - PLOT_TOP);
        assert_eq!(l[0], (PLOT_LEFT, top + PLOT_BOTTOM));
        // Batch 4 is halfway along x; 10 µs a third of the way up.
        assert!((l[1].0 - (PLOT_LEFT + w / 2)).abs() <= 1, "{l:?}");
        assert!((l[1].1 - (top + PLOT_BOTTOM - h / 3)).abs() <= 1, "{l:?}");
        assert_eq!(l[2], (PLOT_RIGHT, top + PLOT_TOP));
    }

    #[test]
    fn nothing_to_draw_is_said() {
        let e = Chart::new("empty", "x").panel(Panel::new("y", YRange::Auto)).svg().unwrap_err();
        assert!(e.to_string().contains("empty: no line has a point"), "{e}");
    }

    #[test]
    fn points_that_are_not_numbers_are_left_out() {
        let line = Line::unlabelled(0, vec![(0.0, 0.2), (1.0, f64::NAN), (2.0, 0.4)]);
        let svg =
            Chart::new("t", "x").panel(Panel::new("y", YRange::Auto).line(line)).svg().unwrap();
        assert_eq!(polylines(&svg, "#1F77B4")[0].len(), 2, "{svg}");
    }
}
