//! A map's reference line (`N×3` points, x, y up, z, metres, meant 0.5 m
//! apart) checked for what goes wrong when lines are made: uneven spacing,
//! gaps and jumps (a respawn, a cut replay), a line that crosses itself at
//! the same height, a line that misses the map's checkpoints or stops short
//! of its finish.
//!
//! ```
//! use rulka_env::{analyze_line, LineThresholds};
//! // A straight 10 m line, then a 30 m jump.
//! let mut pts: Vec<[f64; 3]> = (0..=20).map(|i| [0.5 * i as f64, 10.0, 0.0]).collect();
//! pts.push([40.0, 10.0, 0.0]);
//! let r = analyze_line(&pts, None, &LineThresholds::for_spacing(0.5));
//! assert_eq!(r.jumps.len(), 1);
//! assert!(!r.problems().is_empty());
//! ```

/// What counts as a problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineThresholds {
    /// The intended spacing, metres.
    pub spacing: f64,
    /// A step longer than this is a gap (a missing piece of line).
    pub gap_m: f64,
    /// A step longer than this is a jump (a respawn, a teleport).
    pub jump_m: f64,
    /// Two stretches closer than this in height where they cross are a real
    /// crossing (farther apart: a bridge).
    pub crossing_dy_m: f64,
    /// A checkpoint farther than this from the line is missed.
    pub checkpoint_m: f64,
}

impl LineThresholds {
    /// The defaults for lines of `spacing` metres: gaps over 3 spacings,
    /// jumps over 10 m, crossings within 4 m of height, checkpoints within 16 m.
    pub fn for_spacing(spacing: f64) -> Self {
        Self { spacing, gap_m: 3.0 * spacing, jump_m: 10.0, crossing_dy_m: 4.0, checkpoint_m: 16.0 }
    }
}

/// A step of the line longer than it should be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineStep {
    /// Index of the point the step starts at.
    pub index: usize,
    /// Its length, metres.
    pub length: f64,
    /// Distance along the line where it starts, metres.
    pub at_m: f64,
}

/// Two segments of the line that cross at the same height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Crossing {
    /// The earlier segment's first point.
    pub first: usize,
    /// The later segment's first point.
    pub second: usize,
    /// Where (x, z) they cross.
    pub at: [f64; 2],
    /// Height difference there, metres.
    pub dy: f64,
}

/// A checkpoint and the line's nearest point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckpointFit {
    /// The checkpoint.
    pub at: [f64; 3],
    /// The nearest point of the line.
    pub nearest: usize,
    /// How far, metres.
    pub distance: f64,
}

/// Everything [`analyze_line`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct LineReport {
    /// Points.
    pub points: usize,
    /// Length along the line, metres.
    pub length_m: f64,
    /// LineStep lengths: min, mean, max, 99th percentile.
    pub spacing: [f64; 4],
    /// Steps over 1.5 spacings (uneven, not a problem by themselves).
    pub uneven: usize,
    /// Gaps.
    pub gaps: Vec<LineStep>,
    /// Jumps.
    pub jumps: Vec<LineStep>,
    /// Height range, metres.
    pub height: [f64; 2],
    /// First and last point.
    pub start: [f64; 3],
    /// Last point.
    pub finish: [f64; 3],
    /// Straight distance from the last point back to the first.
    pub finish_to_start_m: f64,
    /// Crossings at the same height.
    pub crossings: Vec<Crossing>,
    /// Checkpoints and how well the line passes them (when given).
    pub checkpoints: Vec<CheckpointFit>,
    /// The thresholds used.
    pub thresholds: LineThresholds,
}

impl LineReport {
    /// The problems, one line each (empty: the line is usable).
    pub fn problems(&self) -> Vec<String> {
        let t = &self.thresholds;
        let mut p = Vec::new();
        if self.points < 2 {
            p.push(format!("{} point(s): a line needs at least 2", self.points));
        }
        for j in &self.jumps {
            p.push(format!(
                "jump of {:.1} m after point {} ({:.0} m along): a respawn or a cut?",
                j.length, j.index, j.at_m
            ));
        }
        for g in &self.gaps {
            p.push(format!(
                "gap of {:.1} m after point {} ({:.0} m along; over {:.1} m)",
                g.length, g.index, g.at_m, t.gap_m
            ));
        }
        for c in &self.crossings {
            p.push(format!(
                "crosses itself at x {:.1}, z {:.1} (points {} and {}, {:.1} m apart in height)",
                c.at[0], c.at[1], c.first, c.second, c.dy
            ));
        }
        for (i, c) in self.checkpoints.iter().enumerate() {
            if c.distance > t.checkpoint_m {
                p.push(format!(
                    "checkpoint {i} at ({:.1}, {:.1}, {:.1}) is {:.1} m from the line (over {:.0} m)",
                    c.at[0], c.at[1], c.at[2], c.distance, t.checkpoint_m
                ));
            }
        }
        if self.checkpoints.len() >= 2 {
            // Checkpoints are passed in order, and the last (the finish) near the line's end.
            if self.checkpoints.windows(2).any(|w| w[1].nearest < w[0].nearest) {
                p.push("the line passes the checkpoints out of order".into());
            }
            if let Some(last) = self.checkpoints.last() {
                let left = self.points.saturating_sub(1 + last.nearest) as f64 * t.spacing;
                if left > 2.0 * t.checkpoint_m {
                    p.push(format!(
                        "the line goes on {left:.0} m past the last checkpoint (the finish?)"
                    ));
                }
            }
        }
        p
    }
}

fn dist(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

/// Where segments `p0p1` and `q0q1` cross in the x–z plane: `(t, u)` along each.
fn cross_xz(p0: &[f64; 3], p1: &[f64; 3], q0: &[f64; 3], q1: &[f64; 3]) -> Option<(f64, f64)> {
    let (rx, rz) = (p1[0] - p0[0], p1[2] - p0[2]);
    let (sx, sz) = (q1[0] - q0[0], q1[2] - q0[2]);
    let den = rx * sz - rz * sx;
    if den.abs() < 1e-12 {
        return None;
    }
    let (qpx, qpz) = (q0[0] - p0[0], q0[2] - p0[2]);
    let t = (qpx * sz - qpz * sx) / den;
    let u = (qpx * rz - qpz * rx) / den;
    ((0.0..=1.0).contains(&t) && (0.0..=1.0).contains(&u)).then_some((t, u))
}

/// Checks `points` (and, when given, how they pass `checkpoints`).
pub fn analyze_line(
    points: &[[f64; 3]],
    checkpoints: Option<&[[f64; 3]]>,
    thresholds: &LineThresholds,
) -> LineReport {
    let t = *thresholds;
    let steps: Vec<f64> = points.windows(2).map(|w| dist(&w[0], &w[1])).collect();
    let mut along = Vec::with_capacity(points.len());
    let mut acc = 0.0;
    along.push(0.0);
    for s in &steps {
        acc += s;
        along.push(acc);
    }
    let mut sorted = steps.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        if sorted.is_empty() {
            0.0
        } else {
            sorted[((sorted.len() - 1) as f64 * q).round() as usize]
        }
    };
    let mean = if steps.is_empty() { 0.0 } else { acc / steps.len() as f64 };
    let (mut gaps, mut jumps) = (Vec::new(), Vec::new());
    for (i, &s) in steps.iter().enumerate() {
        let step = LineStep { index: i, length: s, at_m: along[i] };
        if s > t.jump_m {
            jumps.push(step);
        } else if s > t.gap_m {
            gaps.push(step);
        }
    }
    let height = points
        .iter()
        .fold([f64::INFINITY, f64::NEG_INFINITY], |h, p| [h[0].min(p[1]), h[1].max(p[1])]);
    let crossings = self_crossings(points, &t);
    let checkpoints = checkpoints
        .unwrap_or(&[])
        .iter()
        .map(|c| {
            let (nearest, distance) = points
                .iter()
                .enumerate()
                .map(|(i, p)| (i, dist(p, c)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((0, f64::INFINITY));
            CheckpointFit { at: *c, nearest, distance }
        })
        .collect();
    let first = points.first().copied().unwrap_or([0.0; 3]);
    let last = points.last().copied().unwrap_or([0.0; 3]);
    LineReport {
        points: points.len(),
        length_m: acc,
        spacing: [pct(0.0), mean, pct(1.0), pct(0.99)],
        uneven: steps.iter().filter(|&&s| s > 1.5 * t.spacing).count(),
        gaps,
        jumps,
        height,
        start: first,
        finish: last,
        finish_to_start_m: dist(&first, &last),
        crossings,
        checkpoints,
        thresholds: t,
    }
}

/// Segments that cross in the x–z plane at the same height (within
/// `crossing_dy_m`), at least 20 segments apart along the line (neighbours
/// touch by construction); found through a 4 m grid.
fn self_crossings(points: &[[f64; 3]], t: &LineThresholds) -> Vec<Crossing> {
    use std::collections::HashMap;
    const CELL: f64 = 4.0;
    let cell = |x: f64| (x / CELL).floor() as i64;
    let mut grid: HashMap<(i64, i64), Vec<usize>> = HashMap::new();
    for i in 0..points.len().saturating_sub(1) {
        let (a, b) = (&points[i], &points[i + 1]);
        for cx in cell(a[0].min(b[0]))..=cell(a[0].max(b[0])) {
            for cz in cell(a[2].min(b[2]))..=cell(a[2].max(b[2])) {
                grid.entry((cx, cz)).or_default().push(i);
            }
        }
    }
    let mut found: Vec<Crossing> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for segs in grid.values() {
        for (k, &i) in segs.iter().enumerate() {
            for &j in &segs[k + 1..] {
                let (i, j) = (i.min(j), i.max(j));
                if j - i < 20 || !seen.insert((i, j)) {
                    continue;
                }
                let (p0, p1, q0, q1) = (&points[i], &points[i + 1], &points[j], &points[j + 1]);
                if let Some((a, b)) = cross_xz(p0, p1, q0, q1) {
                    let y1 = p0[1] + a * (p1[1] - p0[1]);
                    let y2 = q0[1] + b * (q1[1] - q0[1]);
                    if (y1 - y2).abs() < t.crossing_dy_m {
                        let at = [p0[0] + a * (p1[0] - p0[0]), p0[2] + a * (p1[2] - p0[2])];
                        found.push(Crossing { first: i, second: j, at, dy: (y1 - y2).abs() });
                    }
                }
            }
        }
    }
    found.sort_by_key(|c| (c.first, c.second));
    // One report per place (a crossing spans a few segment pairs).
    found.dedup_by(|b, a| b.first.abs_diff(a.first) < 20 && b.second.abs_diff(a.second) < 20);
    found
}

/// The fastest a car goes in the game (1000 km/h), m/s: a step longer than
/// this speed allows is a respawn or a cut, not driving.
pub const MAX_CAR_SPEED: f64 = 1000.0 / 3.6;

/// Why a drive cannot become a reference line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LineRecordError {
    /// The car moved farther in one step than it can travel.
    #[error("the car moved {metres:.1} m in {step_ms} ms at race time {} (a respawn or a cut): drive it again without one", fmt_race_time(*race_time_ms))]
    Jump {
        /// Race time of the step that ended the jump, ms.
        race_time_ms: i32,
        /// Distance covered, m.
        metres: f64,
        /// Race time the step took, ms.
        step_ms: i32,
    },
}

impl LineRecordError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        rulka_error::ErrorKind::BadInput
    }
}

/// `m:ss.cc` as the game shows race times.
pub fn fmt_race_time(ms: i32) -> String {
    let cs = ms.max(0) / 10;
    format!("{}:{:02}.{:02}", cs / 6000, cs / 100 % 60, cs % 100)
}

/// What a sample did to the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Before the start (countdown) or mid-race when recording began: waiting
    /// for a race to start.
    Waiting,
    /// The first point of a race.
    Started,
    /// The race started again (race time went back): what was recorded is dropped.
    Restarted,
    /// One more point.
    Added,
}

/// Collects the car's positions of one drive, step by step, from the start
/// (race time at most [`LineRecorder::START_SLACK_MS`]) on.
#[derive(Debug, Clone, Default)]
pub struct LineRecorder {
    path: Vec<[f64; 3]>,
    last_time: Option<i32>,
}

impl LineRecorder {
    /// A recording starts at a race time at most this (the first step or two).
    pub const START_SLACK_MS: i32 = 100;

    /// An empty recording.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the car's position at `race_time_ms`.
    pub fn push(&mut self, race_time_ms: i32, pos: [f64; 3]) -> Result<Recorded, LineRecordError> {
        let restart = self.last_time.is_some_and(|t| race_time_ms <= t);
        if restart || race_time_ms < 0 {
            let had = !self.path.is_empty();
            self.path.clear();
            self.last_time = None;
            if !(0..=Self::START_SLACK_MS).contains(&race_time_ms) {
                return Ok(if had { Recorded::Restarted } else { Recorded::Waiting });
            }
        }
        let Some(t0) = self.last_time else {
            if race_time_ms > Self::START_SLACK_MS {
                return Ok(Recorded::Waiting);
            }
            let again = restart;
            self.path.push(pos);
            self.last_time = Some(race_time_ms);
            return Ok(if again { Recorded::Restarted } else { Recorded::Started });
        };
        let prev = self.path[self.path.len() - 1];
        let metres = dist(&prev, &pos);
        let step_ms = race_time_ms - t0;
        if metres > MAX_CAR_SPEED * f64::from(step_ms) / 1000.0 + 0.5 {
            return Err(LineRecordError::Jump { race_time_ms, metres, step_ms });
        }
        self.path.push(pos);
        self.last_time = Some(race_time_ms);
        Ok(Recorded::Added)
    }

    /// The positions so far.
    pub fn path(&self) -> &[[f64; 3]] {
        &self.path
    }

    /// Metres driven so far (along the positions).
    pub fn length_m(&self) -> f64 {
        self.path.windows(2).map(|w| dist(&w[0], &w[1])).sum()
    }

    /// Race time of the last position, ms.
    pub fn race_time_ms(&self) -> Option<i32> {
        self.last_time
    }
}

/// Points every `spacing` metres of arc length along `path` (straight between
/// its points), from its first point; the remainder past the last whole
/// spacing is dropped. Repeated points (a car at rest) add nothing.
pub fn resample(path: &[[f64; 3]], spacing: f64) -> Vec<[f64; 3]> {
    resample_by(path, spacing, |d| (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt())
}

/// [`resample`] with arc length measured by `length` of each step's
/// difference vector (e.g. the horizontal distance, ignoring y); every
/// coordinate is interpolated along the step.
pub fn resample_by(
    path: &[[f64; 3]],
    spacing: f64,
    length: impl Fn([f64; 3]) -> f64,
) -> Vec<[f64; 3]> {
    let Some(first) = path.first() else {
        return Vec::new();
    };
    let mut out = vec![*first];
    // Distance along the current step at which the next point falls.
    let mut next = spacing;
    for w in path.windows(2) {
        let (a, b) = (w[0], w[1]);
        let d = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
        let seg = length(d);
        while next <= seg {
            let f = next / seg;
            out.push([a[0] + f * d[0], a[1] + f * d[1], a[2] + f * d[2]]);
            next += spacing;
        }
        next -= seg;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn distances_are_in_three_dimensions_and_crossings_in_the_ground_plane() {
        // 3-4-5 with the height in it.
        rulka_test_support::margin::close(
            "super::dist(&[1.0, 5.0, 2.0], &[1.0, 2.0, 6.0]) vs 5.0",
            super::dist(&[1.0, 5.0, 2.0], &[1.0, 2.0, 6.0]),
            5.0,
            1e-12,
        );
        // (1, 1)→(3, 3) and (0, 3.5)→(4, 0.5) in x–z cross halfway along each, at (2, 2).
        let (t, u) =
            super::cross_xz(&[1.0, 9.0, 1.0], &[3.0, 9.0, 3.0], &[0.0, 0.0, 3.5], &[4.0, 0.0, 0.5])
                .expect("they cross");
        assert!((t - 0.5).abs() < 1e-12 && (u - 0.5).abs() < 1e-12, "{t} {u}");
        // Parallel: no crossing.
        assert!(super::cross_xz(&[0.0; 3], &[1.0, 0.0, 1.0], &[0.0, 0.0, 1.0], &[1.0, 0.0, 2.0])
            .is_none());
        // (0, 1)→(2, 3) and (0, 3)→(4, 3): u = 1/2 along the second, t = 1 on the first.
        let (t, u) =
            super::cross_xz(&[0.0, 0.0, 1.0], &[2.0, 0.0, 3.0], &[0.0, 0.0, 3.0], &[4.0, 0.0, 3.0])
                .expect("they meet");
        assert!((t - 1.0).abs() < 1e-12 && (u - 0.5).abs() < 1e-12, "{t} {u}");
    }

    use super::*;

    fn circle(n: usize, r: f64, y: f64) -> Vec<[f64; 3]> {
        (0..n)
            .map(|i| {
                let a = std::f64::consts::TAU * i as f64 / n as f64;
                [r * a.cos(), y, r * a.sin()]
            })
            .collect()
    }

    #[test]
    fn a_figure_eight_crosses_itself_but_a_bridge_does_not() {
        // North along x = 0, round by (-20, 20), then east along z = 0.25: the
        // last stretch crosses the first at (0, 0.25), at the same height.
        let seg = |a: [f64; 2], b: [f64; 2]| -> Vec<[f64; 3]> {
            let n = (((b[0] - a[0]).powi(2) + (b[1] - a[1]).powi(2)).sqrt() / 0.5).round() as usize;
            (0..n)
                .map(|i| {
                    let f = i as f64 / n as f64;
                    [a[0] + f * (b[0] - a[0]), 5.0, a[1] + f * (b[1] - a[1])]
                })
                .collect()
        };
        let mut eight = seg([0.0, -20.0], [0.0, 20.0]);
        eight.extend(seg([0.0, 20.0], [-20.0, 20.0]));
        eight.extend(seg([-20.0, 20.0], [-20.0, 0.25]));
        eight.extend(seg([-20.0, 0.25], [20.0, 0.25]));
        let r = analyze_line(&eight, None, &LineThresholds::for_spacing(0.5));
        assert_eq!(r.crossings.len(), 1, "{:?}", r.crossings);
        let c = r.crossings[0];
        assert!(c.at[0].abs() < 1e-6 && (c.at[1] - 0.25).abs() < 1e-6 && c.dy < 1e-9, "{c:?}");
        assert_eq!(c.first, 40, "the first stretch's segment from z = 0 to 0.5");
        // Straight across a circle, 10 m above it: a bridge, no crossing.
        let mut bridge = circle(252, 20.0, 0.0);
        bridge.extend((0..100).map(|i| [-25.0 + 0.5 * i as f64, 10.0, 0.0]));
        let r = analyze_line(&bridge, None, &LineThresholds::for_spacing(0.5));
        assert!(r.crossings.is_empty(), "{:?}", r.crossings);
    }

    #[test]
    fn gaps_jumps_and_checkpoints_are_named() {
        let mut pts: Vec<[f64; 3]> = (0..200).map(|i| [0.5 * i as f64, 0.0, 0.0]).collect();
        pts.truncate(100); // 0 .. 49.5 m
        pts.push([52.0, 0.0, 0.0]); // a 2.5 m gap
        pts.extend((0..40).map(|i| [52.5 + 0.5 * i as f64, 0.0, 0.0]));
        let th = LineThresholds::for_spacing(0.5);
        let cps = [[10.0, 0.0, 1.0], [60.0, 0.0, 2.0], [300.0, 0.0, 0.0]];
        let r = analyze_line(&pts, Some(&cps), &th);
        assert_eq!(r.gaps.len(), 1);
        assert_eq!((r.gaps[0].index, (r.gaps[0].length * 10.0).round()), (99, 25.0));
        assert!(r.jumps.is_empty());
        rulka_test_support::margin::close("r.length_m vs 72.0", r.length_m, 72.0, 1e-9); // 49.5 + 2.5 + 0.5 + 19.5
        let p = r.problems();
        assert!(p.iter().any(|l| l.starts_with("gap of 2.5 m after point 99")), "{p:?}");
        assert!(
            p.iter().any(|l| l.starts_with("checkpoint 2 ") && l.contains("from the line")),
            "{p:?}"
        );
        assert_eq!(r.checkpoints[0].nearest, 20);
        rulka_test_support::margin::close(
            "r.checkpoints[1].distance vs 2.0",
            r.checkpoints[1].distance,
            2.0,
            1e-9,
        );
    }

    /// Two checkpoints (a start and a finish: the fewest a map has) are
    /// checked for their order and for the line going on past the last, as
    /// three are.
    #[test]
    fn two_checkpoints_are_checked_for_order_and_the_finish() {
        let th = LineThresholds::for_spacing(0.5);
        let line: Vec<[f64; 3]> = (0..200).map(|i| [0.5 * i as f64, 0.0, 0.0]).collect();
        let problems = |cps: &[[f64; 3]]| analyze_line(&line, Some(cps), &th).problems();
        assert!(
            problems(&[[5.0, 0.0, 0.0], [99.5, 0.0, 0.0]]).is_empty(),
            "in order, the last at the end"
        );
        let p = problems(&[[99.5, 0.0, 0.0], [5.0, 0.0, 0.0]]);
        assert!(p.iter().any(|l| l.contains("out of order")), "{p:?}");
        let p = problems(&[[5.0, 0.0, 0.0], [40.0, 0.0, 0.0]]);
        assert!(p.iter().any(|l| l.contains("goes on 60 m past the last checkpoint")), "{p:?}");
    }

    #[test]
    fn resampling_puts_points_every_spacing_along_the_path() {
        use super::resample;
        // An L: 1.2 m east, then 1.0 m north, with a repeated point (at rest).
        let path = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.2, 0.0, 0.0], [1.2, 0.0, 1.0]];
        let got = resample(&path, 0.5);
        let want =
            [[0.0, 0.0, 0.0], [0.5, 0.0, 0.0], [1.0, 0.0, 0.0], [1.2, 0.0, 0.3], [1.2, 0.0, 0.8]];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(g.iter().zip(w).all(|(a, b)| (a - b).abs() < 1e-12), "{got:?}");
        }
        // Height counts: a 3-4-5 slope of 5 m gives 11 points.
        assert_eq!(resample(&[[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], 0.5).len(), 11);
    }

    #[test]
    fn a_recording_starts_at_the_start_and_refuses_jumps() {
        use super::{LineRecordError, LineRecorder, Recorded};
        let mut r = LineRecorder::new();
        assert_eq!(r.push(-50, [0.0; 3]), Ok(Recorded::Waiting));
        assert_eq!(r.push(0, [0.0; 3]), Ok(Recorded::Started));
        assert_eq!(r.push(10, [0.3, 0.0, 0.0]), Ok(Recorded::Added));
        // 2.0 m in 10 ms is 720 km/h: driving.
        assert_eq!(r.push(20, [2.3, 0.0, 0.0]), Ok(Recorded::Added));
        // A restart: race time back to the countdown, then 0 again.
        assert_eq!(r.push(-100, [0.0; 3]), Ok(Recorded::Restarted));
        assert!(r.path().is_empty());
        assert_eq!(r.push(0, [0.0; 3]), Ok(Recorded::Started));
        assert_eq!(r.push(10, [0.1, 0.0, 0.0]), Ok(Recorded::Added));
        // 30 m in 10 ms: a respawn; named with its race time.
        let e = r.push(20, [30.1, 0.0, 0.0]).unwrap_err();
        assert!(matches!(e, LineRecordError::Jump { race_time_ms: 20, step_ms: 10, .. }), "{e:?}");
        assert_eq!(e.to_string(), "the car moved 30.0 m in 10 ms at race time 0:00.02 (a respawn or a cut): drive it again without one");
        // Connected mid-race: wait for the next start.
        let mut r = LineRecorder::new();
        assert_eq!(r.push(5000, [0.0; 3]), Ok(Recorded::Waiting));
        assert_eq!(super::fmt_race_time(83_456), "1:23.45");
    }
}
