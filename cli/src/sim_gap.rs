//! `rulka sim gap`: where on a track a driver loses its time to the
//! simulator's limit. On each track of a limit table (`rulka sim plan`),
//! the planner's best drive (its input script, replayed) and the driver's
//! greedy drive (an exported policy, or the scripted autopilot) are each
//! turned into the race time at which they first reach every metre of the
//! race distance; the time the driver falls behind over each metre is
//! given to the kind of road there:
//!
//! - **the start**: the first [`START_M`] metres (from standstill);
//! - **corners**: where the centreline's radius is under
//!   [`CORNER_RADIUS_M`] (its heading over a [`WINDOW_M`] window);
//! - **straights**: the rest (straights and gentle bends).
//!
//! The parts add up to the whole: over a finished drive, the seconds lost
//! on the three kinds sum to the driver's race time less the limit.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rulka_config::Config;
use rulka_env::{Autopilot, InputScript, Sim, SimEnv, SimParams, POINT_SPACING};
use rulka_inference::Job;
use rulka_report::{Chart, Line, Panel, YRange};

use crate::limits::LimitTable;
use crate::{load_config, BadInput};

/// The start: the first this many metres of the race distance.
pub const START_M: f64 = 50.0;
/// A corner: the centreline's radius under this, m.
pub const CORNER_RADIUS_M: f64 = 50.0;
/// The centreline's heading is compared over this many metres (centred).
pub const WINDOW_M: f64 = 10.0;

/// Options of `rulka sim gap`.
#[derive(clap::Args, Debug)]
pub struct GapArgs {
    /// Exported policy (.onnx) whose greedy drives are compared with the limit.
    #[arg(long, required_unless_present = "autopilot", conflicts_with = "autopilot")]
    pub model: Option<PathBuf>,
    /// Compare the scripted autopilot's drives instead of a policy's.
    #[arg(long)]
    pub autopilot: bool,
    /// Config the model was trained with (tracks, decision period, network).
    #[arg(long, default_value = "configs/sim-hard.yaml")]
    pub config: PathBuf,
    /// The limit table (`rulka sim plan`'s limits.csv; its drives in drives/ beside it).
    #[arg(long)]
    pub limits: PathBuf,
    /// Track seeds, e.g. 1000..1010 (default: every track of the table).
    #[arg(long)]
    pub seeds: Option<String>,
    /// Draw the time behind the limit along the race distance (SVG).
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Also write the report, every track included, as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// What kind of road a metre of the race distance is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stretch {
    /// The first [`START_M`] metres.
    Start,
    /// A radius under [`CORNER_RADIUS_M`].
    Corner,
    /// Everything else.
    Straight,
}

impl Stretch {
    const ALL: [Stretch; 3] = [Stretch::Start, Stretch::Corner, Stretch::Straight];

    fn index(self) -> usize {
        match self {
            Stretch::Start => 0,
            Stretch::Corner => 1,
            Stretch::Straight => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Stretch::Start => "start",
            Stretch::Corner => "corners",
            Stretch::Straight => "straights",
        }
    }
}

/// The kind of road at each whole metre `0..length` of a centreline whose
/// unit tangents are `spacing` metres apart: the start first, then a
/// corner where the heading turns faster than `1 / radius` (radians a
/// metre) across `window` metres centred on it (cut at the ends).
pub fn stretches(
    tangents: &[[f64; 2]],
    spacing: f64,
    length: f64,
    start_m: f64,
    radius: f64,
    window: f64,
) -> Vec<Stretch> {
    // The heading, unwrapped so that a turn past ±π reads as one turn.
    let mut heading = Vec::with_capacity(tangents.len());
    for t in tangents {
        let a = t[1].atan2(t[0]);
        let unwrapped = match heading.last() {
            Some(&prev) => {
                let mut d: f64 = a - prev;
                d -= (d / std::f64::consts::TAU).round() * std::f64::consts::TAU;
                prev + d
            }
            None => a,
        };
        heading.push(unwrapped);
    }
    let last = tangents.len().saturating_sub(1);
    let half = (window / 2.0 / spacing).round() as usize;
    (0..length.floor() as usize)
        .map(|m| {
            if (m as f64) < start_m {
                return Stretch::Start;
            }
            // The middle of metre m.
            let i = (((m as f64) + 0.5) / spacing).round() as usize;
            let (a, b) = (i.saturating_sub(half).min(last), (i + half).min(last));
            let turn = if b > a {
                (heading[b] - heading[a]).abs() / ((b - a) as f64 * spacing)
            } else {
                0.0
            };
            if turn > 1.0 / radius {
                Stretch::Corner
            } else {
                Stretch::Straight
            }
        })
        .collect()
}

/// The race time (ms) at which a drive first reaches each whole metre
/// `0..=length` of the race distance, from its samples `(race time ms, arc
/// length m)` in time order: linear between the sample before and the one
/// at or past the metre, measured against the farthest the drive had been
/// (a car that rolls back reaches no metre twice). `None` for a metre it
/// never reaches.
pub fn times_at(samples: &[(f64, f64)], length: f64) -> Vec<Option<f64>> {
    let n = length.floor() as usize;
    let mut out = vec![None; n + 1];
    let mut before: Option<(f64, f64)> = None;
    let mut next = 0usize;
    for &(t, s) in samples {
        if let Some((t0, s0)) = before {
            while next <= n && (next as f64) <= s {
                let d = next as f64;
                out[next] = Some(if s > s0 { t0 + (d - s0) / (s - s0) * (t - t0) } else { t });
                next += 1;
            }
            if s > s0 {
                before = Some((t, s));
            } else {
                before = Some((t, s0));
            }
        } else {
            while next <= n && (next as f64) <= s {
                out[next] = Some(t);
                next += 1;
            }
            before = Some((t, s));
        }
    }
    out
}

/// Seconds the driver fell behind the limit on each kind of road, in
/// [`Stretch::ALL`]'s order: over each metre `m` of `kinds`, the growth of
/// the gap `driver[m] - limit[m]` (times in ms) from metre `m` to `m + 1`,
/// given to `kinds[m]`. Over metres both reach they add up to the gap at
/// the last one; `None` when either drive misses a metre.
pub fn losses(
    limit: &[Option<f64>],
    driver: &[Option<f64>],
    kinds: &[Stretch],
) -> Option<[f64; 3]> {
    let mut out = [0.0; 3];
    for (m, k) in kinds.iter().enumerate() {
        let gap =
            |i: usize| -> Option<f64> { Some(driver.get(i).copied()?? - limit.get(i).copied()??) };
        out[k.index()] += (gap(m + 1)? - gap(m)?) / 1000.0;
    }
    Some(out)
}

/// One track's comparison.
#[derive(Debug, Clone)]
struct TrackGap {
    seed: u64,
    limit_s: f64,
    /// The driver's race time, or `None` (it did not finish).
    driver_s: Option<f64>,
    /// How far the driver got (a share of the race distance) and in how
    /// many decisions: `rulka eval`'s progress and steps of the same drive.
    progress: f64,
    steps: u32,
    /// Seconds lost by kind (a finished drive).
    lost: Option<[f64; 3]>,
    /// Metres of each kind.
    metres: [usize; 3],
    /// The gap (s) at each hundredth of the race distance (a finished drive).
    profile: Vec<f64>,
}

/// The planner's drive of `seed` replayed from its input script: samples
/// after every engine step, and its race time (ms), which must be the
/// table's.
fn replay_limit(
    cfg: &Config,
    seed: u64,
    script: &Path,
    limit_ms: u64,
) -> anyhow::Result<Vec<(f64, f64)>> {
    let text = std::fs::read_to_string(script)
        .map_err(|e| BadInput(format!("{}: {e}", script.display())))?;
    let inputs =
        InputScript::parse(&text).map_err(|e| BadInput(format!("{}: {e}", script.display())))?;
    let mut sim = Sim::new(SimParams::from_config(cfg));
    sim.load(seed)?;
    let mut samples = vec![(0.0, sim.progress_m())];
    let give_up = limit_ms + 10_000;
    loop {
        let finished = sim.tick(inputs.keys_at(sim.time_ms()))?;
        samples.push((sim.time_ms() as f64, sim.progress_m()));
        if finished {
            break;
        }
        if sim.time_ms() > give_up {
            anyhow::bail!(BadInput(format!(
                "{}: the drive does not finish track {seed} by {:.2} s (the table's limit is {:.2} s)",
                script.display(),
                give_up as f64 / 1000.0,
                limit_ms as f64 / 1000.0
            )));
        }
    }
    if sim.time_ms() != limit_ms {
        anyhow::bail!(BadInput(format!(
            "{}: the drive finishes track {seed} in {:.2} s, not the table's {:.2} s (a table of another config?)",
            script.display(),
            sim.time_ms() as f64 / 1000.0,
            limit_ms as f64 / 1000.0
        )));
    }
    Ok(samples)
}

/// Where a drive was: `(race time ms, arc length m)`, in time order.
type Samples = Vec<(f64, f64)>;

/// The driver's greedy drive of `seed`: samples after every decision, and
/// the episode as `rulka eval` reports it (race time, progress, steps).
fn drive(
    env: &mut SimEnv,
    driver: &mut Driver,
    seed: u64,
) -> anyhow::Result<(Samples, rulka_inference::Episode)> {
    let mut samples = Vec::new();
    let record = |e: &SimEnv| samples.push((e.time_ms() as f64, e.progress_m()));
    let job = Job { seed, episode: 0 };
    let ep = match driver {
        Driver::Policy(engine) => rulka_inference::run_episode_observed(env, engine, job, record)?,
        Driver::Autopilot(pilot) => {
            rulka_inference::run_autopilot_observed(env, pilot, seed, record)?
        }
    };
    Ok((samples, ep))
}

enum Driver {
    Policy(Box<rulka_inference::PolicyEngine>),
    Autopilot(Autopilot),
}

/// Runs `rulka sim gap`.
pub fn run(a: &GapArgs, ort: Option<&Path>) -> anyhow::Result<()> {
    let cfg = load_config(&a.config)?;
    let table = LimitTable::read(&a.limits)?;
    table
        .planned_on(&cfg)
        .map_err(|e| BadInput(format!("--limits {}: {e}", a.limits.display())))?;
    let seeds: Vec<u64> = match &a.seeds {
        Some(s) => rulka_config::parse_seeds(s).map_err(|e| BadInput(format!("--seeds {e}")))?,
        None => table.rows.keys().copied().collect(),
    };
    table
        .limits_for(&cfg, &seeds)
        .map_err(|e| BadInput(format!("--limits {}: {e}", a.limits.display())))?;
    for (flag, path) in [("--out", &a.out), ("--json", &a.json)] {
        if let Some(p) = path {
            if p.parent().is_some_and(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
                return Err(BadInput(format!(
                    "{flag} {}: its directory does not exist",
                    p.display()
                ))
                .into());
            }
        }
    }
    let drives = a.limits.parent().unwrap_or(Path::new(".")).join("drives");
    let mut driver = match &a.model {
        Some(m) => Driver::Policy(Box::new(crate::watch::open_engine(&cfg, m, true, ort)?)),
        None => Driver::Autopilot(Autopilot::new(&cfg)),
    };
    let who = a.model.as_ref().map_or("the autopilot".to_string(), |m| m.display().to_string());
    eprintln!(
        "[rulka sim gap] {who} against the limit on {} track(s) ({})",
        seeds.len(),
        rulka_config::describe_seeds(&seeds)
    );
    let mut env = SimEnv::new(&cfg);
    let mut tracks = Vec::with_capacity(seeds.len());
    for (k, &seed) in seeds.iter().enumerate() {
        let row = &table.rows[&seed];
        let lim = replay_limit(&cfg, seed, &drives.join(&row.drive), row.limit_ms)?;
        let (mine, ep) = drive(&mut env, &mut driver, seed)?;
        let race_ms = ep.race_time_s.map(|t| t * 1000.0);
        let track = env.track().context("the simulator lost its track")?.clone();
        let length = track.length();
        let kinds =
            stretches(&track.tangents, POINT_SPACING, length, START_M, CORNER_RADIUS_M, WINDOW_M);
        let mut metres = [0usize; 3];
        for k in &kinds {
            metres[k.index()] += 1;
        }
        // A finished drive is at the finish line at its race time.
        let with_finish = |mut s: Vec<(f64, f64)>, t: f64| {
            s.retain(|&(ti, _)| ti < t);
            s.push((t, length));
            s
        };
        let limit_t = times_at(&with_finish(lim, row.limit_ms as f64), length);
        let (lost, profile) = match race_ms {
            Some(t) => {
                let mine_t = times_at(&with_finish(mine, t), length);
                let n = limit_t.len() - 1;
                let profile = (0..=100)
                    .map(|p| {
                        let m = (p * n) / 100;
                        (mine_t[m].unwrap_or(f64::NAN) - limit_t[m].unwrap_or(f64::NAN)) / 1000.0
                    })
                    .collect();
                (losses(&limit_t, &mine_t, &kinds), profile)
            }
            None => (None, Vec::new()),
        };
        let g = TrackGap {
            seed,
            limit_s: row.limit_ms as f64 / 1000.0,
            driver_s: ep.race_time_s,
            progress: ep.progress,
            steps: ep.steps,
            lost,
            metres,
            profile,
        };
        eprintln!(
            "[rulka sim gap] {}/{} track {seed}: {}",
            k + 1,
            seeds.len(),
            match (g.driver_s, g.lost) {
                (Some(t), Some(l)) => format!(
                    "{t:.2} s against {:.2} s: {:+.2} s (start {:+.2}, corners {:+.2}, straights {:+.2})",
                    g.limit_s,
                    t - g.limit_s,
                    l[0],
                    l[1],
                    l[2]
                ),
                _ => "not finished".into(),
            }
        );
        tracks.push(g);
    }
    report(&tracks);
    if let Some(out) = &a.out {
        let svg = figure(&tracks, &who)?;
        rulka_checkpoint::write_atomic(out, svg.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
        println!("wrote {}", out.display());
    }
    if let Some(path) = &a.json {
        rulka_checkpoint::write_atomic(
            path,
            serde_json::to_string_pretty(&json(&tracks, &who))?.as_bytes(),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The totals over the finished tracks: seconds lost by kind, metres of
/// each kind, and the gap in all.
fn totals(tracks: &[TrackGap]) -> ([f64; 3], [usize; 3], f64, usize) {
    let (mut lost, mut metres, mut gap, mut n) = ([0.0; 3], [0usize; 3], 0.0, 0);
    for t in tracks {
        if let (Some(l), Some(d)) = (t.lost, t.driver_s) {
            for k in 0..3 {
                lost[k] += l[k];
                metres[k] += t.metres[k];
            }
            gap += d - t.limit_s;
            n += 1;
        }
    }
    (lost, metres, gap, n)
}

fn report(tracks: &[TrackGap]) {
    let (lost, metres, gap, n) = totals(tracks);
    println!(
        "{n} of {} track(s) finished; behind the limit by {gap:.2} s in all ({:.3} s a track)",
        tracks.len(),
        gap / n.max(1) as f64
    );
    println!(
        "  {:<10} {:>9} {:>8} {:>10} {:>14}",
        "road", "metres", "lost s", "of the gap", "s per 100 m"
    );
    for k in Stretch::ALL {
        let i = k.index();
        println!(
            "  {:<10} {:>9} {:>8.2} {:>9.0} % {:>14.4}",
            k.name(),
            metres[i],
            lost[i],
            if gap.abs() > 1e-12 { 100.0 * lost[i] / gap } else { 0.0 },
            if metres[i] > 0 { 100.0 * lost[i] / metres[i] as f64 } else { 0.0 }
        );
    }
}

fn json(tracks: &[TrackGap], who: &str) -> serde_json::Value {
    let (lost, metres, gap, n) = totals(tracks);
    let by_kind =
        |xs: [f64; 3]| serde_json::json!({"start": xs[0], "corners": xs[1], "straights": xs[2]});
    serde_json::json!({
        "driver": who,
        "start_m": START_M,
        "corner_radius_m": CORNER_RADIUS_M,
        "finished": n,
        "gap_s": gap,
        "lost_s": by_kind(lost),
        "metres": by_kind(metres.map(|m| m as f64)),
        "tracks": tracks.iter().map(|t| serde_json::json!({
            "seed": t.seed,
            "limit_s": t.limit_s,
            "driver_s": t.driver_s,
            "driver_progress": t.progress,
            "driver_steps": t.steps,
            "lost_s": t.lost.map(by_kind),
            "metres": by_kind(t.metres.map(|m| m as f64)),
        })).collect::<Vec<_>>(),
    })
}

/// The gap along the race distance: p10, median and p90 over the finished
/// tracks at each hundredth.
fn figure(tracks: &[TrackGap], who: &str) -> anyhow::Result<String> {
    let done: Vec<&TrackGap> = tracks.iter().filter(|t| !t.profile.is_empty()).collect();
    let q = |p: usize, f: f64| {
        let xs: Vec<f64> = done.iter().map(|t| t.profile[p]).filter(|x| x.is_finite()).collect();
        rulka_inference::quantile(&xs, f)
    };
    let line = |f: f64| -> Vec<(f64, f64)> {
        (0..=100).filter_map(|p| Some((p as f64, q(p, f)?))).collect()
    };
    let panel = Panel::new("seconds behind the limit", YRange::Auto)
        .line(Line::new("median over the tracks", 0, line(0.5)))
        .line(Line::new("p10", 1, line(0.1)).dashed())
        .line(Line::new("p90", 1, line(0.9)).dashed());
    let title = format!("{who} against the planner's drives: {} track(s)", done.len());
    Ok(Chart::new(title, "% of the race distance").panel(panel).svg()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metre_is_reached_when_the_farthest_the_drive_has_been_passes_it() {
        // 0 m at 0 ms, 1 m at 10 ms, 3 m at 20 ms: metre 2 halfway between.
        let t = times_at(&[(0.0, 0.0), (10.0, 1.0), (20.0, 3.0)], 3.0);
        assert_eq!(t, [Some(0.0), Some(10.0), Some(15.0), Some(20.0)]);
        // Rolling back reaches nothing again: from the farthest (2 m at
        // 10 ms, still 2 m at 20 ms) to 4 m at 30 ms, metre 3 at 25 ms.
        let t = times_at(&[(0.0, 0.0), (10.0, 2.0), (20.0, 1.0), (30.0, 4.0)], 4.0);
        assert_eq!(t, [Some(0.0), Some(5.0), Some(10.0), Some(25.0), Some(30.0)]);
        // A metre never reached is none; a drive that stands still too.
        let t = times_at(&[(0.0, 0.0), (10.0, 4.0)], 5.0);
        assert_eq!(t, [Some(0.0), Some(2.5), Some(5.0), Some(7.5), Some(10.0), None]);
        assert_eq!(times_at(&[], 2.0), [None, None, None]);
    }

    #[test]
    fn the_time_lost_on_each_metre_goes_to_its_kind_and_adds_up_to_the_gap() {
        use Stretch::*;
        let limit = [Some(0.0), Some(1000.0), Some(2000.0), Some(3000.0), Some(4000.0)];
        let driver = [Some(0.0), Some(1500.0), Some(2500.0), Some(4000.0), Some(4800.0)];
        let l = losses(&limit, &driver, &[Start, Corner, Straight, Corner]).unwrap();
        // Metre 0: +0.5 s (start); 1: 0 (corner); 2: +0.5 (straight); 3: -0.2 (corner).
        assert_eq!(l, [0.5, -0.2, 0.5]);
        assert!((l.iter().sum::<f64>() - 0.8).abs() < 1e-12, "the gap at the last metre");
        // A metre either drive misses: no figure.
        let short = [Some(0.0), Some(1500.0), None, None, None];
        assert_eq!(losses(&limit, &short, &[Start, Corner, Straight, Corner]), None);
    }

    /// A straight line, then a quarter circle of radius 30 m, then a
    /// circle of radius 80 m: the start first, corners only on the tight
    /// arc (its ends blurred by the window), the wide arc a straight.
    #[test]
    fn a_corner_is_where_the_heading_turns_faster_than_the_radius_allows() {
        let spacing = 0.5;
        let mut tangents = Vec::new();
        let mut push_arc = |metres: f64, radius: f64, heading: &mut f64| {
            for _ in 0..(metres / spacing) as usize {
                tangents.push([heading.cos(), heading.sin()]);
                if radius.is_finite() {
                    *heading += spacing / radius;
                }
            }
        };
        let mut h = 3.0; // past ±π within the tight arc: the unwrap is needed
        push_arc(100.0, f64::INFINITY, &mut h);
        push_arc(30.0 * std::f64::consts::FRAC_PI_2, 30.0, &mut h);
        push_arc(100.0, 80.0, &mut h);
        let length = tangents.len() as f64 * spacing;
        let k = stretches(&tangents, spacing, length, 20.0, 50.0, 10.0);
        assert!(k[..20].iter().all(|&x| x == Stretch::Start));
        assert!(k[20..95].iter().all(|&x| x == Stretch::Straight), "the straight");
        let arc_end = 100 + (30.0 * std::f64::consts::FRAC_PI_2) as usize;
        assert!(k[106..arc_end - 6].iter().all(|&x| x == Stretch::Corner), "the tight arc");
        assert!(k[arc_end + 6..].iter().all(|&x| x == Stretch::Straight), "the wide arc");
    }

    /// `stretches` against a model over generated centrelines: runs of
    /// straights and arcs (radius 6–400 m, turning left or right, from any
    /// heading, so turns cross ±π both ways), sampled as the simulator's
    /// are. Every metre whose whole window lies on one piece is a corner
    /// exactly when that piece is an arc of a radius under the threshold
    /// (radii within 3 % of it are not drawn: the window's chord is
    /// within 0.1 % of the arc, far inside that); the first `start_m`
    /// metres are the start whatever the road.
    #[test]
    fn every_metre_wholly_on_an_arc_tighter_than_the_radius_is_a_corner_either_way_round() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config as Runner, RngSeed, TestRunner};
        let mut runner = TestRunner::new(Runner {
            cases: 400,
            rng_seed: RngSeed::Fixed(76),
            failure_persistence: None,
            ..Runner::default()
        });
        let piece = (
            prop_oneof![
                Just(f64::INFINITY),
                6.0..48.5f64,
                51.5..400.0f64,
                Just(CORNER_RADIUS_M * 0.97),
                Just(CORNER_RADIUS_M * 1.03)
            ],
            any::<bool>(),
            12.0..60.0f64,
        );
        let case = (
            proptest::collection::vec(piece, 1..8),
            -4.0..4.0f64,
            prop_oneof![Just(0.0), Just(1.0), 0.0..80.0f64],
        );
        runner
            .run(&case, |(pieces, h0, start_m)| {
                let spacing = POINT_SPACING;
                let (mut tangents, mut piece_at, mut h) = (Vec::new(), Vec::new(), h0);
                for (i, &(radius, left, metres)) in pieces.iter().enumerate() {
                    for _ in 0..(metres / spacing).round() as usize {
                        tangents.push([h.cos(), h.sin()]);
                        piece_at.push(i);
                        if radius.is_finite() {
                            h += if left { spacing / radius } else { -spacing / radius };
                        }
                    }
                }
                let length = tangents.len() as f64 * spacing;
                let k = stretches(&tangents, spacing, length, start_m, CORNER_RADIUS_M, WINDOW_M);
                prop_assert_eq!(k.len(), length.floor() as usize);
                for (m, &got) in k.iter().enumerate() {
                    let centre = m as f64 + 0.5;
                    let (a, b) = (centre - WINDOW_M / 2.0, centre + WINDOW_M / 2.0);
                    let want = if (m as f64) < start_m {
                        Some(Stretch::Start)
                    } else if a < 0.0 || b > length - spacing {
                        None // the window cut at an end
                    } else {
                        let (pa, pb) =
                            (piece_at[(a / spacing) as usize], piece_at[(b / spacing) as usize]);
                        (pa == pb).then(|| {
                            if pieces[pa].0 < CORNER_RADIUS_M {
                                Stretch::Corner
                            } else {
                                Stretch::Straight
                            }
                        })
                    };
                    if let Some(want) = want {
                        prop_assert_eq!(
                            got,
                            want,
                            "metre {} of {:?} from heading {}",
                            m,
                            pieces,
                            h0
                        );
                    }
                }
                Ok(())
            })
            .unwrap();
    }
}
