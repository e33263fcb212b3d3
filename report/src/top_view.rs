//! Top views of the world: tracks, driven lines, map lines, seen from above
//! on one scale, with an optional profile panel below.

use plotters::prelude::*;

use crate::chart::{draw_panel, Panel, XAxis};
use crate::{draw_err, viridis, ReportError, PANEL_HEIGHT, TITLE_HEIGHT, WIDTH};

/// The larger side of one view, in pixels.
pub const VIEW_SIZE: f64 = 560.0;
/// World margin around what a view shows, in metres, unless [`TopView::pad`] says.
const PAD_M: f64 = 6.0;
/// The height of one note strip below the views.
const NOTE_HEIGHT: u32 = 28;

/// How wide a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Width {
    /// In pixels, whatever the scale.
    Px(u32),
    /// In metres of the world (a road's width).
    Metres(f64),
}

/// Something drawn in a view, in world coordinates (x to the right, y up,
/// metres).
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A line through `points`.
    Path {
        /// Its points, in order.
        points: Vec<[f64; 2]>,
        /// Its colour.
        colour: [u8; 3],
        /// Its width.
        width: Width,
    },
    /// A line through `points` whose segment `i` (from point `i` to `i + 1`)
    /// is drawn in `colours[i]` (a speed, a height).
    Coloured {
        /// Its points, in order.
        points: Vec<[f64; 2]>,
        /// One colour a segment.
        colours: Vec<[u8; 3]>,
        /// Its width in pixels.
        width_px: u32,
    },
    /// A filled dot.
    Dot {
        /// Where.
        at: [f64; 2],
        /// Its colour.
        colour: [u8; 3],
        /// Its radius in pixels.
        radius_px: u32,
    },
    /// A ring (9 px) with a bold label beside it: a place to look at.
    Ring {
        /// Where.
        at: [f64; 2],
        /// Its colour and its label's.
        colour: [u8; 3],
        /// What it marks.
        label: String,
    },
    /// A small square with a label (a checkpoint and its number).
    Square {
        /// Where.
        at: [f64; 2],
        /// Its label.
        label: String,
    },
}

impl Item {
    fn points(&self) -> &[[f64; 2]] {
        match self {
            Item::Path { points, .. } | Item::Coloured { points, .. } => points,
            Item::Dot { at, .. } | Item::Ring { at, .. } | Item::Square { at, .. } => {
                std::slice::from_ref(at)
            }
        }
    }
}

/// One view: a label above it, a background, its items (drawn in order).
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    label: String,
    background: [u8; 3],
    items: Vec<Item>,
}

impl View {
    /// An empty view labelled `label` on a white background.
    pub fn new(label: impl Into<String>) -> Self {
        Self { label: label.into(), background: [255, 255, 255], items: Vec::new() }
    }

    /// The same view on `colour`.
    pub fn background(mut self, colour: [u8; 3]) -> Self {
        self.background = colour;
        self
    }

    /// Adds an item on top of the others.
    pub fn item(mut self, item: Item) -> Self {
        self.items.push(item);
        self
    }
}

/// A strip below the views.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// The [`viridis`] colour map from `lo` to `hi`, with a caption.
    Ramp {
        /// What the low end means.
        lo: String,
        /// What the high end means.
        hi: String,
        /// What the colours are.
        caption: String,
    },
    /// A scale bar of a round number of metres.
    ScaleBar,
}

/// Views side by side on one scale (each at most [`VIEW_SIZE`] pixels),
/// a title above, notes below, and optionally a chart panel below them
/// (a height profile along the line).
#[derive(Debug, Clone)]
pub struct TopView {
    title: String,
    views: Vec<View>,
    notes: Vec<Note>,
    profile: Option<(String, Panel)>,
    pad: f64,
}

impl TopView {
    /// A figure titled `title` (empty: none).
    pub fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            views: Vec::new(),
            notes: Vec::new(),
            profile: None,
            pad: PAD_M,
        }
    }

    /// Shows `metres` of world around the items (default 6 m; a road's
    /// half width more where a centre line stands for a road).
    pub fn pad(mut self, metres: f64) -> Self {
        self.pad = metres;
        self
    }

    /// Adds a view to the right of the others.
    pub fn view(mut self, view: View) -> Self {
        self.views.push(view);
        self
    }

    /// Adds a note strip below the views.
    pub fn note(mut self, note: Note) -> Self {
        self.notes.push(note);
        self
    }

    /// Adds a chart panel below everything, its x axis `x_desc` from 0 to
    /// the largest x of its lines.
    pub fn profile(mut self, x_desc: impl Into<String>, panel: Panel) -> Self {
        self.profile = Some((x_desc.into(), panel));
        self
    }

    /// World bounds of every view's items, padded: `(lo, hi)`.
    fn bounds(&self) -> Option<([f64; 2], [f64; 2])> {
        let pts = self.views.iter().flat_map(|v| v.items.iter().flat_map(Item::points));
        let (lo, hi) = pts
            .filter(|p| p[0].is_finite() && p[1].is_finite())
            .fold(([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]), |(lo, hi), p| {
                ([lo[0].min(p[0]), lo[1].min(p[1])], [hi[0].max(p[0]), hi[1].max(p[1])])
            });
        let pad = self.pad;
        lo[0].is_finite().then_some(([lo[0] - pad, lo[1] - pad], [hi[0] + pad, hi[1] + pad]))
    }

    /// The figure as an SVG document.
    pub fn svg(&self) -> Result<String, ReportError> {
        let Some((lo, hi)) = self.bounds() else {
            return Err(ReportError::Empty(format!("{}: no view has a point", self.title)));
        };
        let (tw, th) = (hi[0] - lo[0], hi[1] - lo[1]);
        let scale = VIEW_SIZE / tw.max(th);
        let (pw, ph) = ((tw * scale).round() as u32, (th * scale).round() as u32);
        let n = self.views.len() as u32;
        let width = (n * (pw + 10) + 10).max(if self.profile.is_some() { WIDTH } else { 600 });
        let notes_h = NOTE_HEIGHT * self.notes.len() as u32;
        let profile_h = if self.profile.is_some() { PANEL_HEIGHT } else { 0 };
        let height = TITLE_HEIGHT + 24 + ph + 8 + notes_h + profile_h;
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
            root.fill(&WHITE).map_err(draw_err)?;
            let font = ("sans-serif", 15).into_font();
            root.draw(&Text::new(self.title.clone(), (10, 10), font)).map_err(draw_err)?;
            for (k, view) in self.views.iter().enumerate() {
                let x0 = 10 + k as i32 * (pw as i32 + 10);
                let y0 = (TITLE_HEIGHT + 24) as i32;
                let label = ("sans-serif", 13).into_font().style(FontStyle::Bold);
                root.draw(&Text::new(view.label.clone(), (x0 + 2, y0 - 18), label))
                    .map_err(draw_err)?;
                let area = root.clone().shrink((x0, y0), (pw, ph));
                draw_view(&area, view, (lo, hi), scale)?;
            }
            let mut y = (TITLE_HEIGHT + 24 + ph + 8) as i32;
            for note in &self.notes {
                draw_note(&root, note, y, scale)?;
                y += NOTE_HEIGHT as i32;
            }
            if let Some((x_desc, panel)) = &self.profile {
                let area = root.clone().shrink((0, y), (WIDTH, PANEL_HEIGHT));
                let span = (0.0, panel.x_max().max(1e-9));
                let axis = XAxis { desc: x_desc, log2: false, format: |v| format!("{v:.0}"), span };
                draw_panel(&area, panel, &axis)?;
            }
            root.present().map_err(draw_err)?;
        }
        Ok(out)
    }
}

fn rgb(c: [u8; 3]) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

fn draw_view(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    view: &View,
    (lo, hi): ([f64; 2], [f64; 2]),
    scale: f64,
) -> Result<(), ReportError> {
    area.fill(&rgb(view.background)).map_err(draw_err)?;
    let chart =
        ChartBuilder::on(area).build_cartesian_2d(lo[0]..hi[0], lo[1]..hi[1]).map_err(draw_err)?;
    let plot = chart.plotting_area();
    let xy = |p: &[f64; 2]| (p[0], p[1]);
    for item in &view.items {
        match item {
            Item::Path { points, colour, width } => {
                let px = match *width {
                    Width::Px(p) => p,
                    Width::Metres(m) => (m * scale).round().max(1.0) as u32,
                };
                let style = rgb(*colour).stroke_width(px);
                plot.draw(&PathElement::new(points.iter().map(xy).collect::<Vec<_>>(), style))
                    .map_err(draw_err)?;
            }
            Item::Coloured { points, colours, width_px } => {
                // Runs of one colour drawn as one line.
                let mut start = 0;
                while start + 1 < points.len() {
                    let c = colours.get(start).copied().unwrap_or([0, 0, 0]);
                    let mut end = start + 1;
                    while end + 1 < points.len() && colours.get(end) == Some(&c) {
                        end += 1;
                    }
                    let run: Vec<_> = points[start..=end].iter().map(xy).collect();
                    plot.draw(&PathElement::new(run, rgb(c).stroke_width(*width_px)))
                        .map_err(draw_err)?;
                    start = end;
                }
            }
            Item::Dot { at, colour, radius_px } => {
                plot.draw(&Circle::new(xy(at), *radius_px, rgb(*colour).filled()))
                    .map_err(draw_err)?;
            }
            Item::Ring { at, colour, label } => {
                let c = rgb(*colour);
                let font = ("sans-serif", 13).into_font().style(FontStyle::Bold).color(&c);
                let ring = EmptyElement::at(xy(at))
                    + Circle::new((0, 0), 9, c.stroke_width(2))
                    + Text::new(label.clone(), (11, -7), font);
                plot.draw(&ring).map_err(draw_err)?;
            }
            Item::Square { at, label } => {
                let font = ("sans-serif", 11).into_font();
                let square = EmptyElement::at(xy(at))
                    + Rectangle::new([(-4, -4), (5, 5)], BLACK.stroke_width(1))
                    + Text::new(label.clone(), (7, -14), font);
                plot.draw(&square).map_err(draw_err)?;
            }
        }
    }
    Ok(())
}

fn draw_note(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    note: &Note,
    y: i32,
    scale: f64,
) -> Result<(), ReportError> {
    let font = ("sans-serif", 12).into_font();
    match note {
        Note::Ramp { lo, hi, caption } => {
            let (x0, w) = (10, 240);
            for i in 0..48 {
                let c = viridis(f64::from(i) / 47.0);
                let (a, b) = (x0 + w * i / 48, x0 + w * (i + 1) / 48 + 1);
                root.draw(&Rectangle::new([(a, y), (b, y + 10)], rgb(c).filled()))
                    .map_err(draw_err)?;
            }
            let text = format!("{lo} … {hi}: {caption}");
            root.draw(&Text::new(text, (x0 + w + 8, y), font)).map_err(draw_err)?;
        }
        Note::ScaleBar => {
            let metres = [5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
                .into_iter()
                .find(|&m| m * scale > 60.0)
                .unwrap_or(1000.0);
            let px = (metres * scale).round() as i32;
            let style = BLACK.stroke_width(2);
            root.draw(&PathElement::new(vec![(10, y + 5), (10 + px, y + 5)], style))
                .map_err(draw_err)?;
            root.draw(&Text::new(format!("{metres} m"), (16 + px, y), font)).map_err(draw_err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(e: &str, k: &str) -> f64 {
        e.split(&format!(" {k}=\"")).nth(1).unwrap().split('"').next().unwrap().parse().unwrap()
    }

    #[test]
    fn a_square_world_fills_the_view_and_dots_land_by_scale() {
        // A 100 m square (padded to 112 m): the view is VIEW_SIZE square.
        let dots = [[0.0, 0.0], [100.0, 100.0], [50.0, 25.0]];
        let mut view = View::new("v");
        for at in dots {
            view = view.item(Item::Dot { at, colour: [0, 0, 0], radius_px: 2 });
        }
        let svg = TopView::new("t").view(view).note(Note::ScaleBar).svg().unwrap();
        let circles: Vec<(f64, f64)> =
            svg.split("<circle").skip(1).map(|e| (attr(e, "cx"), attr(e, "cy"))).collect();
        let s = VIEW_SIZE / 112.0;
        let (x0, y0) = (10.0, f64::from(TITLE_HEIGHT + 24));
        for (got, p) in circles.iter().zip(dots) {
            let want = (x0 + (p[0] + 6.0) * s, y0 + (106.0 - p[1]) * s);
            assert!(
                (got.0 - want.0).abs() <= 1.5 && (got.1 - want.1).abs() <= 1.5,
                "{got:?} vs {want:?}"
            );
        }
        // 20 m is the first round length over 60 px at 5 px/m.
        assert!(svg.contains("\n20 m\n"), "{svg}");
    }

    #[test]
    fn coloured_lines_are_drawn_in_runs_of_one_colour() {
        let points: Vec<[f64; 2]> = (0..6).map(|i| [f64::from(i) * 10.0, 0.0]).collect();
        let (a, b) = ([10, 20, 30], [200, 100, 0]);
        let item = Item::Coloured { points, colours: vec![a, a, a, b, b], width_px: 2 };
        let svg = TopView::new("t").view(View::new("v").item(item)).svg().unwrap();
        assert_eq!(svg.matches("stroke=\"#0A141E\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("stroke=\"#C86400\"").count(), 1, "{svg}");
    }

    #[test]
    fn an_empty_figure_is_said() {
        let e = TopView::new("nothing").view(View::new("v")).svg().unwrap_err();
        assert!(e.to_string().contains("nothing: no view has a point"), "{e}");
    }
}
