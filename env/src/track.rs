//! Seeded procedural point-to-point tracks: a centreline sampled every
//! [`POINT_SPACING`] metres (like the original's 0.5 m reference lines), a
//! constant width, walls at the edges, a start line at the first point and a
//! finish line at [`Track::finish_index`]. Zones (virtual checkpoints) are every
//! [`ZONE_POINTS`]-th point, i.e. 10 m apart, as the original's VCPs.
//!
//! A generated track is a function of `(seed, preset)` only: straights and
//! circular arcs of random length, radius and direction, rejected and redrawn
//! when they would come closer than two track widths to an earlier part of
//! the track. [`Track::from_line`] builds one of a real map's shape instead,
//! from its reference line (heights included).

use rulka_config::TrackPreset;

/// Metres between centreline points.
pub const POINT_SPACING: f64 = 0.5;
/// Centreline points between zone centres (10 m).
pub const ZONE_POINTS: usize = 20;
/// Metres of straight run-off drawn past the finish line.
const RUNOFF_M: f64 = 40.0;
/// Raster cell size in metres.
pub const RASTER_RES: f64 = 0.25;

/// Raster cell classes.
pub mod cell {
    /// Off the track (beyond the walls).
    pub const OUTSIDE: u8 = 0;
    /// Driveable surface.
    pub const ROAD: u8 = 1;
    /// The wall line at the edge.
    pub const EDGE: u8 = 2;
    /// Start or finish line (dark squares of the chequer).
    pub const LINE_DARK: u8 = 3;
    /// Start or finish line (light squares).
    pub const LINE_LIGHT: u8 = 4;
}

/// Shape parameters of a preset.
#[derive(Debug, Clone, Copy)]
struct Shape {
    length_m: f64,
    width_m: f64,
    straight_m: (f64, f64),
    turn_deg: (f64, f64),
    radius_m: (f64, f64),
}

fn shape(preset: TrackPreset) -> Shape {
    match preset {
        TrackPreset::Easy => Shape {
            length_m: 250.0,
            width_m: 16.0,
            straight_m: (20.0, 50.0),
            turn_deg: (20.0, 70.0),
            radius_m: (50.0, 100.0),
        },
        TrackPreset::Medium => Shape {
            length_m: 500.0,
            width_m: 12.0,
            straight_m: (10.0, 40.0),
            turn_deg: (30.0, 110.0),
            radius_m: (22.0, 60.0),
        },
        TrackPreset::Hard => Shape {
            length_m: 900.0,
            width_m: 10.0,
            straight_m: (5.0, 30.0),
            turn_deg: (45.0, 150.0),
            radius_m: (12.0, 35.0),
        },
    }
}

/// SplitMix64: the simulator's only randomness (track generation).
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(pub u64);

impl SplitMix {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub(crate) fn range(&mut self, (lo, hi): (f64, f64)) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A generated track.
#[derive(Debug, Clone)]
pub struct Track {
    /// The seed it was generated from.
    pub seed: u64,
    /// Its preset.
    pub preset: TrackPreset,
    /// Road width in metres (wall to wall).
    pub width: f64,
    /// Centreline points, [`POINT_SPACING`] apart; the start line is point 0.
    pub points: Vec<[f64; 2]>,
    /// Unit tangent at each point.
    pub tangents: Vec<[f64; 2]>,
    /// Height (the game's y) at each point: 0 on generated tracks.
    pub heights: Vec<f64>,
    /// Index of the finish line (points after it are run-off).
    pub finish_index: usize,
    raster: Raster,
}

/// Class map of the track at [`RASTER_RES`] metres per cell.
#[derive(Debug, Clone)]
pub(crate) struct Raster {
    pub(crate) origin: [f64; 2],
    pub(crate) cols: usize,
    pub(crate) rows: usize,
    pub(crate) cells: Vec<u8>,
}

impl Raster {
    /// The class at a world position (outside the raster: [`cell::OUTSIDE`]).
    #[inline]
    pub(crate) fn at(&self, x: f64, y: f64) -> u8 {
        let c = ((x - self.origin[0]) * (1.0 / RASTER_RES)).floor();
        let r = ((y - self.origin[1]) * (1.0 / RASTER_RES)).floor();
        if c < 0.0 || r < 0.0 || c >= self.cols as f64 || r >= self.rows as f64 {
            return cell::OUTSIDE;
        }
        self.cells[r as usize * self.cols + c as usize]
    }
}

/// Where a position lies relative to the centreline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Projection {
    /// Nearest centreline point.
    pub index: usize,
    /// Arc length of the projection (metres from the start line).
    pub s: f64,
    /// Signed distance from the centreline, positive to the left.
    pub lateral: f64,
}

impl Track {
    /// Generates the track of `(seed, preset)`.
    pub fn generate(seed: u64, preset: TrackPreset) -> Self {
        let sh = shape(preset);
        let mut rng = SplitMix(seed ^ 0x5EED_7AC4);
        let race_points = (sh.length_m / POINT_SPACING).round() as usize;
        let min_sep = 2.0 * sh.width_m;
        let skip = (3.0 * sh.width_m / POINT_SPACING) as usize;
        'attempt: for _ in 0..64 {
            let mut pts: Vec<[f64; 2]> = vec![[0.0, 0.0]];
            let mut heading = 0.0f64;
            let mut straight = true;
            while pts.len() <= race_points {
                let mut placed = false;
                for _ in 0..24 {
                    let seg = if straight {
                        let len = rng.range(sh.straight_m);
                        segment(pts[pts.len() - 1], heading, len, 0.0)
                    } else {
                        let turn = rng.range(sh.turn_deg).to_radians();
                        let radius = rng.range(sh.radius_m);
                        let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
                        segment(pts[pts.len() - 1], heading, turn * radius, sign / radius)
                    };
                    if clear_of(&pts, &seg.0, min_sep, skip) {
                        pts.extend_from_slice(&seg.0);
                        heading = seg.1;
                        placed = true;
                        break;
                    }
                }
                if !placed {
                    continue 'attempt;
                }
                straight = !straight;
            }
            pts.truncate(race_points + 1);
            let finish_index = race_points;
            let end = pts[finish_index];
            let dir = [end[0] - pts[finish_index - 1][0], end[1] - pts[finish_index - 1][1]];
            let h = dir[1].atan2(dir[0]);
            let runoff = segment(end, h, RUNOFF_M, 0.0).0;
            if !clear_of(&pts, &runoff, min_sep, skip) {
                continue 'attempt;
            }
            pts.extend_from_slice(&runoff);
            let heights = vec![0.0; pts.len()];
            return Self::from_points(seed, preset, sh.width_m, pts, heights, finish_index);
        }
        // 64 rejected layouts in a row does not happen for the presets'
        // parameters; a straight track keeps the function total.
        let pts = segment([0.0, 0.0], 0.0, sh.length_m + RUNOFF_M, 0.0).0;
        let mut all = vec![[0.0, 0.0]];
        all.extend(pts);
        let heights = vec![0.0; all.len()];
        Self::from_points(seed, preset, sh.width_m, all, heights, race_points)
    }

    /// A track of a reference line's shape (`N×3` points, the game's axes: x,
    /// y up, z; the original's `maps/*.npy`), `width` metres wall to wall:
    /// the line resampled every [`POINT_SPACING`] metres of horizontal
    /// distance (heights interpolated), the start line at its first point, the
    /// finish line at its last, a straight run-off after it. The simulator's
    /// plane `(x, y)` is the game's `(x, z)`. Where the line passes over
    /// itself (a bridge) the two roads simply overlap in the picture; the
    /// walls are those of the road the car is on. `seed` and `preset` are
    /// only labels here.
    pub fn from_line(
        line: &[[f64; 3]],
        width: f64,
        seed: u64,
        preset: TrackPreset,
    ) -> Result<Self, String> {
        if !(width.is_finite() && width > 2.0 * 1.5) {
            return Err(format!("a track width of {width} m leaves no room for a car"));
        }
        if let Some((i, p)) =
            line.iter().enumerate().find(|(_, p)| !p.iter().all(|v| v.is_finite()))
        {
            return Err(format!("point {i} is not finite: {p:?}"));
        }
        if line.is_empty() {
            return Err("the reference line has no points".into());
        }
        let even = crate::line::resample_by(line, POINT_SPACING, |d| d[0].hypot(d[2]));
        let mut pts: Vec<[f64; 2]> = even.iter().map(|p| [p[0], p[2]]).collect();
        let mut heights: Vec<f64> = even.iter().map(|p| p[1]).collect();
        let finish_index = pts.len() - 1;
        if finish_index < 2 * ZONE_POINTS {
            return Err(format!(
                "the reference line is {:.1} m long; a track needs at least {} m",
                finish_index as f64 * POINT_SPACING,
                2.0 * ZONE_POINTS as f64 * POINT_SPACING
            ));
        }
        let (a, b) = (pts[finish_index - 1], pts[finish_index]);
        let h = (b[1] - a[1]).atan2(b[0] - a[0]);
        let runoff = segment(b, h, RUNOFF_M, 0.0).0;
        heights.extend(std::iter::repeat_n(heights[finish_index], runoff.len()));
        pts.extend(runoff);
        Ok(Self::from_points(seed, preset, width, pts, heights, finish_index))
    }

    fn from_points(
        seed: u64,
        preset: TrackPreset,
        width: f64,
        points: Vec<[f64; 2]>,
        heights: Vec<f64>,
        finish_index: usize,
    ) -> Self {
        let n = points.len();
        let tangents = (0..n)
            .map(|i| {
                let (a, b) = (points[i.saturating_sub(1)], points[(i + 1).min(n - 1)]);
                let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
                let l = dx.hypot(dy).max(1e-12);
                [dx / l, dy / l]
            })
            .collect::<Vec<_>>();
        let raster = rasterise(&points, &tangents, width, finish_index);
        Self { seed, preset, width, points, tangents, heights, finish_index, raster }
    }

    /// The road's height at arc length `s` near point `i` (a projection's
    /// `s` and `index`), interpolated between points.
    pub fn height_at(&self, i: usize, s: f64) -> f64 {
        let along = s - i as f64 * POINT_SPACING;
        let j =
            if along >= 0.0 { (i + 1).min(self.heights.len() - 1) } else { i.saturating_sub(1) };
        self.heights[i] + (self.heights[j] - self.heights[i]) * along.abs() / POINT_SPACING
    }

    /// The road's gradient (height gained per horizontal metre, forwards) at
    /// point `i`, over ±5 m: real lines' heights are rounded to 0.1 m.
    pub fn gradient(&self, i: usize) -> f64 {
        const HALF: usize = 10;
        let last = self.heights.len() - 1;
        let (a, b) = (i.saturating_sub(HALF).min(last), (i + HALF).min(last));
        if a == b {
            return 0.0;
        }
        (self.heights[b] - self.heights[a]) / ((b - a) as f64 * POINT_SPACING)
    }

    /// Race distance, start line to finish line, in metres.
    pub fn length(&self) -> f64 {
        self.finish_index as f64 * POINT_SPACING
    }

    /// Number of zones up to and including the finish.
    pub fn n_zones(&self) -> usize {
        self.finish_index / ZONE_POINTS + 1
    }

    /// Centre of zone `i` (the finish line's point for `i` past the end,
    /// extrapolated straight along the run-off).
    pub fn zone_center(&self, i: usize) -> [f64; 2] {
        let idx = i * ZONE_POINTS;
        if idx < self.points.len() {
            return self.points[idx];
        }
        let last = self.points.len() - 1;
        let t = self.tangents[last];
        let extra = (idx - last) as f64 * POINT_SPACING;
        [self.points[last][0] + t[0] * extra, self.points[last][1] + t[1] * extra]
    }

    /// Projects a position onto the centreline, searching from `hint` (the
    /// previous nearest point) by hill-climbing; valid while the position
    /// moves less than a track width between calls.
    pub fn project(&self, p: [f64; 2], hint: usize) -> Projection {
        let d2 = |i: usize| {
            let q = self.points[i];
            (p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)
        };
        let mut i = hint.min(self.points.len() - 1);
        let mut best = d2(i);
        loop {
            if i + 1 < self.points.len() && d2(i + 1) < best {
                i += 1;
                best = d2(i);
            } else if i > 0 && d2(i - 1) < best {
                i -= 1;
                best = d2(i);
            } else {
                break;
            }
        }
        self.projection_at(p, i)
    }

    /// Projects by scanning every point (slow; for tests and first placement).
    pub fn project_exhaustive(&self, p: [f64; 2]) -> Projection {
        let mut best = (f64::INFINITY, 0);
        for (i, q) in self.points.iter().enumerate() {
            let d = (p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2);
            if d < best.0 {
                best = (d, i);
            }
        }
        self.projection_at(p, best.1)
    }

    fn projection_at(&self, p: [f64; 2], i: usize) -> Projection {
        let (q, t) = (self.points[i], self.tangents[i]);
        let (dx, dy) = (p[0] - q[0], p[1] - q[1]);
        let along = (dx * t[0] + dy * t[1]).clamp(-POINT_SPACING / 2.0, POINT_SPACING / 2.0);
        Projection { index: i, s: i as f64 * POINT_SPACING + along, lateral: t[0] * dy - t[1] * dx }
    }

    /// The raster class at a world position.
    pub fn cell_at(&self, x: f64, y: f64) -> u8 {
        self.raster.at(x, y)
    }

    pub(crate) fn raster(&self) -> &Raster {
        &self.raster
    }

    /// World bounding box of the rasterised track: `(min, max)`.
    pub fn bounds(&self) -> ([f64; 2], [f64; 2]) {
        let r = &self.raster;
        (
            r.origin,
            [r.origin[0] + r.cols as f64 * RASTER_RES, r.origin[1] + r.rows as f64 * RASTER_RES],
        )
    }
}

/// Points of a straight (`curvature == 0`) or arc after `start` (exclusive),
/// and the heading at its end. Positive curvature turns left.
fn segment(start: [f64; 2], heading: f64, length: f64, curvature: f64) -> (Vec<[f64; 2]>, f64) {
    let n = (length / POINT_SPACING).round().max(1.0) as usize;
    let mut out = Vec::with_capacity(n);
    let (mut p, mut h) = (start, heading);
    for _ in 0..n {
        // Exact arc step: chord of length ≈ spacing at the mid heading.
        let dh = curvature * POINT_SPACING;
        let mid = h + dh / 2.0;
        p = [p[0] + POINT_SPACING * mid.cos(), p[1] + POINT_SPACING * mid.sin()];
        h += dh;
        out.push(p);
    }
    (out, h)
}

/// Whether every point of `new` is at least `min_sep` from every point of
/// `old` except its last `skip` (the part the new segment joins).
fn clear_of(old: &[[f64; 2]], new: &[[f64; 2]], min_sep: f64, skip: usize) -> bool {
    let limit = old.len().saturating_sub(skip);
    let sep2 = min_sep * min_sep;
    new.iter().enumerate().all(|(j, p)| {
        // Points of the new segment itself far enough back count as "old" too.
        let own_limit = j.saturating_sub(skip);
        old[..limit].iter().chain(&new[..own_limit]).all(|q| {
            let d = (p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2);
            d >= sep2
        })
    })
}

fn rasterise(points: &[[f64; 2]], tangents: &[[f64; 2]], width: f64, finish: usize) -> Raster {
    let margin = width + 48.0;
    let (mut lo, mut hi) = ([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]);
    for p in points {
        for k in 0..2 {
            lo[k] = lo[k].min(p[k]);
            hi[k] = hi[k].max(p[k]);
        }
    }
    let origin = [lo[0] - margin, lo[1] - margin];
    let cols = ((hi[0] - lo[0] + 2.0 * margin) / RASTER_RES).ceil() as usize;
    let rows = ((hi[1] - lo[1] + 2.0 * margin) / RASTER_RES).ceil() as usize;
    let mut cells = vec![cell::OUTSIDE; cols * rows];
    let half = width / 2.0;
    let reach = (half / RASTER_RES).ceil() as i64 + 1;
    let center = |p: [f64; 2]| {
        (
            ((p[0] - origin[0]) / RASTER_RES).floor() as i64,
            ((p[1] - origin[1]) / RASTER_RES).floor() as i64,
        )
    };
    let world = |c: i64, r: i64| {
        [origin[0] + (c as f64 + 0.5) * RASTER_RES, origin[1] + (r as f64 + 0.5) * RASTER_RES]
    };
    for (i, p) in points.iter().enumerate() {
        let (pc, pr) = center(*p);
        for r in (pr - reach).max(0)..(pr + reach + 1).min(rows as i64) {
            for c in (pc - reach).max(0)..(pc + reach + 1).min(cols as i64) {
                let w = world(c, r);
                let (dx, dy) = (w[0] - p[0], w[1] - p[1]);
                if dx * dx + dy * dy > half * half {
                    continue;
                }
                let idx = r as usize * cols + c as usize;
                let along = dx * tangents[i][0] + dy * tangents[i][1];
                let on_line = (i == 0 || i == finish) && along.abs() < 0.75;
                if on_line {
                    let lat = tangents[i][0] * dy - tangents[i][1] * dx;
                    let square = ((lat + half) / 1.5).floor() as i64 + (along > 0.0) as i64;
                    cells[idx] = if square % 2 == 0 { cell::LINE_DARK } else { cell::LINE_LIGHT };
                } else if cells[idx] == cell::OUTSIDE {
                    cells[idx] = cell::ROAD;
                }
            }
        }
    }
    // Edges: road cells next to the outside.
    let mut edges = Vec::new();
    for r in 1..rows.saturating_sub(1) {
        for c in 1..cols.saturating_sub(1) {
            let i = r * cols + c;
            if cells[i] == cell::ROAD
                && [i - 1, i + 1, i - cols, i + cols].iter().any(|&j| cells[j] == cell::OUTSIDE)
            {
                edges.push(i);
            }
        }
    }
    for i in edges {
        cells[i] = cell::EDGE;
    }
    Raster { origin, cols, rows, cells }
}
