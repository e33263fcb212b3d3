//! `rulka map record`, `check` and `show`: a map's reference line (the
//! original's `.npy`, `N×3`, 0.5 m apart) recorded from a drive in the game,
//! checked — spacing, gaps, jumps,
//! self-crossings, how it passes the map's checkpoints — and drawn: the top
//! view coloured by height, the height profile, the zone centres the network
//! sees, checkpoints, start, finish and every flagged place.

use anyhow::Context as _;
use std::path::{Path, PathBuf};

use rulka_env::{analyze_line, LineReport, LineThresholds};
use rulka_report::{viridis, Item, Line, Note, Panel, TopView, View, YRange};

use crate::{load_config, BadInput};

/// Arguments of `rulka map record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Port of the game's TMInterface plugin.
    #[arg(long)]
    pub port: u16,
    /// Host of the plugin.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The reference line to write (`.npy`, N×3).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Metres between the line's points.
    #[arg(long, default_value_t = 0.5, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
    pub spacing: f64,
    /// Milliseconds between the positions read (the game's engine step is 10).
    #[arg(long, default_value_t = 10)]
    pub step_ms: i32,
    /// Give up when the game sends nothing for this long (menus, a paused game), s.
    #[arg(long, default_value_t = 600)]
    pub idle_timeout_s: u64,
}

/// Runs `rulka map record`: positions every step of one drive from the start
/// to the finish, resampled every `--spacing` metres, written as `.npy`.
pub fn record(a: &RecordArgs) -> anyhow::Result<()> {
    use rulka_env::{
        fmt_race_time, resample, GameState, LineRecorder, Recorded, TmiClient, TmiSync,
    };
    check_spacing(a.spacing)?;
    if a.step_ms < 10 || a.step_ms % 10 != 0 {
        return Err(BadInput(format!(
            "--step-ms {}: a multiple of the game's 10 ms engine step",
            a.step_ms
        ))
        .into());
    }
    let timeout = std::time::Duration::from_secs(a.idle_timeout_s.max(1));
    let mut cl = crate::tmi_cmd::connect_to_game(&a.host, a.port, timeout)?;
    let mut rec = LineRecorder::new();
    let mut said_waiting = false;
    let mut next_report_ms = 10_000;
    let position = |cl: &mut TmiClient| -> anyhow::Result<(i32, [f64; 3])> {
        let st =
            GameState::decode(&cl.get_simulation_state()?).with_context(|| "the game's state")?;
        Ok((st.race_time(), st.position.map(f64::from)))
    };
    loop {
        let call = cl.read_sync()?;
        match call {
            TmiSync::OnConnect => {
                cl.set_on_step_period(a.step_ms)?;
                println!(
                    "connected to {}:{}: drive the map from the start to the finish (or let TMInterface play a replay or an input file); a restart starts the recording again",
                    a.host, a.port
                );
            }
            TmiSync::RunStep(t) => {
                let (_, pos) = position(&mut cl)?;
                match rec.push(t, pos).map_err(|e| BadInput(e.to_string()))? {
                    Recorded::Waiting if t > 0 && !said_waiting => {
                        said_waiting = true;
                        println!(
                            "race under way ({}): waiting for the next start",
                            fmt_race_time(t)
                        );
                    }
                    Recorded::Started => {
                        next_report_ms = 10_000;
                        println!("start: recording");
                    }
                    Recorded::Restarted => {
                        next_report_ms = 10_000;
                        println!("race restarted: recording again from the start");
                    }
                    _ => {}
                }
                if t >= next_report_ms && rec.race_time_ms().is_some() {
                    next_report_ms += 10_000;
                    println!("  {}  {:.0} m", fmt_race_time(t), rec.length_m());
                }
            }
            TmiSync::CheckpointCount(current, target)
                if current == target && target > 0 && rec.race_time_ms().is_some() =>
            {
                let (t, pos) = position(&mut cl)?;
                rec.push(t, pos).map_err(|e| BadInput(e.to_string()))?;
                cl.respond(&call)?;
                println!("finish at {}", fmt_race_time(t));
                break;
            }
            _ => {}
        }
        cl.respond(&call)?;
    }
    let line = resample(rec.path(), a.spacing);
    if line.len() < 2 {
        return Err(BadInput(format!(
            "the drive covered {:.1} m: too short for a line of points {} m apart",
            rec.length_m(),
            a.spacing
        ))
        .into());
    }
    rulka_env::write_points(&a.output, &line).map_err(|e| BadInput(e.to_string()))?;
    let r = analyze_line(&line, None, &LineThresholds::for_spacing(a.spacing));
    println!(
        "wrote {}: {} points {} m apart, {:.0} m, height {:.1}–{:.1} m ({} positions read)",
        a.output.display(),
        line.len(),
        a.spacing,
        r.length_m,
        r.height[0],
        r.height[1],
        rec.path().len()
    );
    for p in r.problems() {
        println!("  note: {p}");
    }
    println!(
        "next: rulka map show {} -o map.svg; train on its shape with environment.sim.track_from",
        a.output.display()
    );
    Ok(())
}

/// Arguments of `rulka map check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The reference line (`.npy`, N×3).
    pub map: PathBuf,
    /// The map's checkpoints (`.npy`, K×3, in race order, the finish last).
    #[arg(long)]
    pub checkpoints: Option<PathBuf>,
    /// The intended spacing, metres.
    #[arg(long, default_value_t = 0.5, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
    pub spacing: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `rulka map show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The reference line (`.npy`, N×3).
    pub map: PathBuf,
    /// The map's checkpoints (`.npy`, K×3).
    #[arg(long)]
    pub checkpoints: Option<PathBuf>,
    /// A config: draws the zone centres its float vector shows.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The intended spacing, metres.
    #[arg(long, default_value_t = 0.5, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
    pub spacing: f64,
    /// Output SVG.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// A line, its checkpoints (when given) and what [`rulka_env::analyze_line`] found.
type Loaded = (Vec<[f64; 3]>, Option<Vec<[f64; 3]>>, LineReport);

/// `--spacing` must be a positive, finite number of metres.
fn check_spacing(spacing: f64) -> Result<(), BadInput> {
    if spacing > 0.0 && spacing.is_finite() {
        Ok(())
    } else {
        Err(BadInput(format!("--spacing {spacing}: must be a positive number of metres")))
    }
}

fn load(map: &Path, checkpoints: Option<&Path>, spacing: f64) -> anyhow::Result<Loaded> {
    check_spacing(spacing)?;
    let pts = rulka_env::read_points(map, 2).map_err(|e| BadInput(e.to_string()))?;
    let cps = match checkpoints {
        Some(p) => Some(rulka_env::read_points(p, 1).map_err(|e| BadInput(e.to_string()))?),
        None => None,
    };
    let report = analyze_line(&pts, cps.as_deref(), &LineThresholds::for_spacing(spacing));
    Ok((pts, cps, report))
}

/// Runs `rulka map check`: the numbers, the problems; exit 1 when there are any.
pub fn check(a: &CheckArgs) -> anyhow::Result<()> {
    let (_, _, r) = load(&a.map, a.checkpoints.as_deref(), a.spacing)?;
    let problems = r.problems();
    if a.json {
        let v = serde_json::json!({
            "map": a.map,
            "points": r.points,
            "length_m": r.length_m,
            "spacing": {"min": r.spacing[0], "mean": r.spacing[1], "max": r.spacing[2], "p99": r.spacing[3], "uneven_steps": r.uneven},
            "height_m": r.height,
            "start": r.start,
            "finish": r.finish,
            "finish_to_start_m": r.finish_to_start_m,
            "gaps": r.gaps.iter().map(|g| serde_json::json!({"after_point": g.index, "length_m": g.length, "at_m": g.at_m})).collect::<Vec<_>>(),
            "jumps": r.jumps.iter().map(|g| serde_json::json!({"after_point": g.index, "length_m": g.length, "at_m": g.at_m})).collect::<Vec<_>>(),
            "crossings": r.crossings.iter().map(|c| serde_json::json!({"points": [c.first, c.second], "x": c.at[0], "z": c.at[1], "dy_m": c.dy})).collect::<Vec<_>>(),
            "checkpoints": r.checkpoints.iter().map(|c| serde_json::json!({"at": c.at, "nearest_point": c.nearest, "distance_m": c.distance})).collect::<Vec<_>>(),
            "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("rulka map check — {}", a.map.display());
        println!(
            "  points        {} over {:.1} m ({:.2} km)",
            r.points,
            r.length_m,
            r.length_m / 1000.0
        );
        println!(
            "  spacing       min {:.2} / mean {:.3} / p99 {:.2} / max {:.2} m ({} steps over {:.2} m)",
            r.spacing[0], r.spacing[1], r.spacing[3], r.spacing[2], r.uneven, 1.5 * a.spacing
        );
        println!(
            "  height        {:.1} to {:.1} m ({:.1} m of change)",
            r.height[0],
            r.height[1],
            r.height[1] - r.height[0]
        );
        println!("  start         ({:.1}, {:.1}, {:.1})", r.start[0], r.start[1], r.start[2]);
        println!(
            "  finish        ({:.1}, {:.1}, {:.1}), {:.1} m from the start",
            r.finish[0], r.finish[1], r.finish[2], r.finish_to_start_m
        );
        println!(
            "  gaps, jumps   {} gap(s) over {:.1} m, {} jump(s) over {:.0} m",
            r.gaps.len(),
            r.thresholds.gap_m,
            r.jumps.len(),
            r.thresholds.jump_m
        );
        println!(
            "  crossings     {} at the same height (within {:.0} m)",
            r.crossings.len(),
            r.thresholds.crossing_dy_m
        );
        if !r.checkpoints.is_empty() {
            let worst = r.checkpoints.iter().map(|c| c.distance).fold(0.0, f64::max);
            println!(
                "  checkpoints   {}, the farthest {:.1} m from the line",
                r.checkpoints.len(),
                worst
            );
        }
        if problems.is_empty() {
            println!("  ok: no problem found");
        } else {
            for p in &problems {
                println!("  PROBLEM       {p}");
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}: {} problem(s)", a.map.display(), problems.len())
    }
}

/// Runs `rulka map show`: the picture as SVG.
pub fn show(a: &ShowArgs) -> anyhow::Result<()> {
    let (pts, cps, r) = load(&a.map, a.checkpoints.as_deref(), a.spacing)?;
    let zones = match &a.config {
        Some(c) => {
            let cfg = load_config(c)?;
            let p = rulka_env::ZoneParams::from_config(&cfg);
            let zm = rulka_env::ZoneMap::new(&pts, p)
                .map_err(|e| BadInput(format!("{}: {e}", a.map.display())))?;
            // The centres along the line (not those extrapolated past its ends).
            let along =
                &zm.centers()[zm.start_index()..=zm.last_index().min(zm.centers().len() - 1)];
            Some(along.iter().step_by(p.every.max(1)).copied().collect::<Vec<_>>())
        }
        None => None,
    };
    let svg = draw(&a.map, &pts, cps.as_deref(), zones.as_deref(), &r)?;
    std::fs::write(&a.output, svg).map_err(|e| BadInput(format!("{}: {e}", a.output.display())))?;
    let problems = r.problems();
    println!(
        "wrote {}: {} points, {:.2} km, height {:.1}–{:.1} m, {} problem(s) marked",
        a.output.display(),
        r.points,
        r.length_m / 1000.0,
        r.height[0],
        r.height[1],
        problems.len()
    );
    Ok(())
}

/// The top view (x to the right, z up) coloured by height, with zone
/// centres, checkpoints and every flagged place marked; the height profile
/// along the line below it.
fn draw(
    map: &Path,
    pts: &[[f64; 3]],
    cps: Option<&[[f64; 3]]>,
    zones: Option<&[[f64; 3]]>,
    r: &LineReport,
) -> anyhow::Result<String> {
    let (y0, y1) = (r.height[0], r.height[1].max(r.height[0] + 1e-6));
    let hf = |y: f64| (y - y0) / (y1 - y0);
    let xz = |p: &[f64; 3]| [p[0], p[2]];
    let name = map
        .file_name()
        .map_or_else(|| map.display().to_string(), |n| n.to_string_lossy().into_owned());
    let title = format!(
        "{name} — {:.2} km, {} points, height {:.1}–{:.1} m (colour), {} problem(s)",
        r.length_m / 1000.0,
        r.points,
        r.height[0],
        r.height[1],
        r.problems().len()
    );
    // At most about 4000 points drawn; each segment coloured by the height at its start.
    let step = (pts.len() / 4000).max(1);
    let mut drawn: Vec<&[f64; 3]> = pts.iter().step_by(step).collect();
    if let Some(last) = pts.last().filter(|_| (pts.len() - 1) % step != 0) {
        drawn.push(last);
    }
    let colours = drawn.iter().map(|p| viridis(hf(p[1]))).collect();
    let mut view = View::new("").item(Item::Coloured {
        points: drawn.iter().map(|p| xz(p)).collect(),
        colours,
        width_px: 2,
    });
    for c in zones.unwrap_or(&[]) {
        view = view.item(Item::Dot { at: xz(c), colour: [0x44, 0x44, 0x44], radius_px: 1 });
    }
    for (k, c) in cps.unwrap_or(&[]).iter().enumerate() {
        view = view.item(Item::Square { at: xz(c), label: k.to_string() });
    }
    let ring = |at: [f64; 2], colour: [u8; 3], label: String| Item::Ring { at, colour, label };
    for g in r.gaps.iter().chain(&r.jumps) {
        let label = format!("{:.1} m gap", g.length);
        view = view.item(ring(xz(&pts[g.index]), [0xd6, 0x27, 0x28], label));
    }
    for c in &r.crossings {
        view = view.item(ring(c.at, [0xff, 0x7f, 0x0e], "crossing".into()));
    }
    view = view.item(ring(xz(&r.start), [0x2c, 0xa0, 0x2c], "start".into())).item(ring(
        xz(&r.finish),
        [0x11, 0x11, 0x11],
        "finish".into(),
    ));
    // Height profile: distance along the line → height.
    let mut profile = Vec::with_capacity(pts.len() / step + 1);
    let mut along = 0.0;
    for (k, p) in pts.iter().enumerate() {
        if k > 0 {
            let q = pts[k - 1];
            along += ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt();
        }
        if k % step == 0 || k + 1 == pts.len() {
            profile.push((along, p[1]));
        }
    }
    let metres: fn(f64) -> String =
        if y1 - y0 < 10.0 { |y| format!("{y:.1}") } else { |y| format!("{y:.0}") };
    let mut panel = Panel::new("height (m)", YRange::Fixed { lo: y0, hi: y1 })
        .y_format(metres)
        .line(Line::unlabelled(0, profile));
    for g in r.gaps.iter().chain(&r.jumps) {
        panel = panel.vmark(g.at_m);
    }
    let ramp =
        Note::Ramp { lo: format!("{y0:.0} m"), hi: format!("{y1:.0} m"), caption: "height".into() };
    let along_desc = format!("metres along the line ({:.2} km)", r.length_m / 1000.0);
    Ok(TopView::new(title)
        .view(view)
        .note(Note::ScaleBar)
        .note(ramp)
        .profile(along_desc, panel)
        .svg()?)
}
