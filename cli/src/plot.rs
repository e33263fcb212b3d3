//! `rulka plot RUN_DIR [RUN_DIR …]`: the learning curve of a run (from its
//! `trajectories.csv`) as an SVG made by rulka itself: progress along the
//! track (exploration and greedy evaluation runs) and return against frames.
//! Several runs are drawn over each other (exploration progress and finish
//! rate of each) to compare them.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::BadInput;

/// One CSV row's plotted fields.
struct Row {
    frames: f64,
    eval: bool,
    ret: f64,
    progress: f64,
    finished: bool,
    race_time_s: Option<f64>,
}

fn read_rows(run: &Path) -> anyhow::Result<Vec<Row>> {
    Ok(rulka_trainer::read_trajectories(run)?
        .into_iter()
        .map(|r| Row {
            frames: r.frames as f64,
            eval: r.eval,
            ret: r.ret,
            progress: r.progress_frac,
            finished: r.finished,
            race_time_s: r.race_time_s,
        })
        .collect())
}

/// Means of `y` over consecutive windows of `w` points: `(x of window end, mean)`.
fn windowed(points: &[(f64, f64)], w: usize) -> Vec<(f64, f64)> {
    points
        .chunks(w.max(1))
        .map(|c| (c[c.len() - 1].0, c.iter().map(|p| p.1).sum::<f64>() / c.len() as f64))
        .collect()
}

/// Writes the SVG of one run, or of several runs over each other, and
/// prints the figures it shows.
pub fn run(runs: &[std::path::PathBuf], output: Option<&Path>) -> anyhow::Result<()> {
    match runs {
        [] => Err(BadInput("plot: name at least one run directory".into()).into()),
        [one] => single(one, output),
        _ => compare(runs, output),
    }
}

fn single(run: &Path, output: Option<&Path>) -> anyhow::Result<()> {
    let rows = read_rows(run)?;
    if rows.is_empty() {
        return Err(BadInput(format!("{}: no trajectories recorded yet", run.display())).into());
    }
    let explo: Vec<&Row> = rows.iter().filter(|r| !r.eval).collect();
    let eval: Vec<&Row> = rows.iter().filter(|r| r.eval).collect();
    let w = (explo.len() / 40).max(1);
    let prog = windowed(&explo.iter().map(|r| (r.frames, r.progress)).collect::<Vec<_>>(), w);
    let fin = windowed(
        &explo.iter().map(|r| (r.frames, f64::from(u8::from(r.finished)))).collect::<Vec<_>>(),
        w,
    );
    let ev = windowed(
        &eval.iter().map(|r| (r.frames, r.progress)).collect::<Vec<_>>(),
        (eval.len() / 20).max(1),
    );
    let ret = windowed(&explo.iter().map(|r| (r.frames, r.ret)).collect::<Vec<_>>(), w);
    let max_x = rows.iter().map(|r| r.frames).fold(1.0, f64::max);
    let (rmin, rmax) =
        ret.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| (a.0.min(p.1), a.1.max(p.1)));
    let (rmin, rmax) = if rmax > rmin { (rmin, rmax) } else { (rmin - 1.0, rmin + 1.0) };
    let (pw, ph, left, top) = (640.0, 300.0, 60.0, 40.0);
    let x = |f: f64| left + pw * f / max_x;
    let y01 = |v: f64| top + ph * (1.0 - v.clamp(0.0, 1.0));
    let yr = |v: f64| top + ph * (1.0 - (v - rmin) / (rmax - rmin));
    let line = |pts: &[(f64, f64)], fy: &dyn Fn(f64) -> f64, color: &str, dash: &str| {
        let d: Vec<String> = pts.iter().map(|p| format!("{:.1},{:.1}", x(p.0), fy(p.1))).collect();
        format!(
            "<polyline fill='none' stroke='{color}' stroke-width='2' {dash} points='{}'/>\n",
            d.join(" ")
        )
    };
    let title = format!("{} — learning curve ({} trajectories)", run.display(), rows.len());
    let mut svg = frame_svg(&title, pw + left + 80.0, ph + top + 76.0, max_x);
    for k in 0..=4 {
        let r = rmin + (rmax - rmin) * f64::from(k) / 4.0;
        let _ =
            writeln!(svg, "<text x='{:.1}' y='{:.1}'>{r:.1}</text>", left + pw + 5.0, yr(r) + 4.0);
    }
    svg += &line(&prog, &y01, "#1f77b4", "");
    svg += &line(&fin, &y01, "#2ca02c", "");
    svg += &line(&ev, &y01, "#9467bd", "stroke-dasharray='5,3'");
    svg += &line(&ret, &yr, "#d62728", "stroke-dasharray='2,2'");
    let legend = [
        ("#1f77b4", "progress along the track (exploration)"),
        ("#2ca02c", "fraction of races finished"),
        ("#9467bd", "progress, greedy evaluation runs"),
        ("#d62728", "return (right axis)"),
    ];
    for (i, (c, t)) in legend.iter().enumerate() {
        // Two rows of two: the labels are longer than a quarter of the width.
        let yy = top + ph + 50.0 + 16.0 * (i / 2) as f64;
        let xx = left + 320.0 * (i % 2) as f64;
        let _ = writeln!(svg, "<rect x='{xx}' y='{}' width='10' height='10' fill='{c}'/><text x='{}' y='{}' font-size='10'>{t}</text>", yy - 9.0, xx + 13.0, yy);
    }
    svg += "</svg>\n";
    let out = output.map_or_else(|| run.join("learning_curve.svg"), Path::to_path_buf);
    std::fs::write(&out, svg).with_context(|| format!("writing {}", out.display()))?;
    let first = |v: &[(f64, f64)]| v.first().map_or(f64::NAN, |p| p.1);
    let last = |v: &[(f64, f64)]| v.last().map_or(f64::NAN, |p| p.1);
    let first_finish = explo.iter().find(|r| r.finished).map(|r| r.frames);
    println!(
        "{}: {} frames; exploration progress {:.0}% → {:.0}%, finish rate {:.0}% → {:.0}%, eval progress → {:.0}%, first finish at {}",
        run.display(),
        max_x,
        100.0 * first(&prog),
        100.0 * last(&prog),
        100.0 * first(&fin),
        100.0 * last(&fin),
        100.0 * last(&ev),
        first_finish.map_or("-".into(), human)
    );
    println!("wrote {}", out.display());
    Ok(())
}

/// Several runs over each other: each run's exploration progress (solid)
/// and fraction of races finished (dashed) against frames, one colour a run.
fn compare(runs: &[std::path::PathBuf], output: Option<&Path>) -> anyhow::Result<()> {
    const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"];
    let Some(out) = output else {
        return Err(BadInput("plot: several runs need -o OUTPUT.svg".into()).into());
    };
    let mut curves = Vec::new();
    for run in runs {
        let rows = read_rows(run)?;
        let explo: Vec<&Row> = rows.iter().filter(|r| !r.eval).collect();
        if explo.is_empty() {
            return Err(BadInput(format!("{}: no exploration runs recorded", run.display())).into());
        }
        let w = (explo.len() / 40).max(1);
        let prog = windowed(&explo.iter().map(|r| (r.frames, r.progress)).collect::<Vec<_>>(), w);
        let fin = windowed(
            &explo.iter().map(|r| (r.frames, f64::from(u8::from(r.finished)))).collect::<Vec<_>>(),
            w,
        );
        let first_finish = explo.iter().find(|r| r.finished).map(|r| r.frames);
        let max_x = rows.iter().map(|r| r.frames).fold(1.0, f64::max);
        curves.push((run, prog, fin, first_finish, max_x));
    }
    let max_x = curves.iter().map(|c| c.4).fold(1.0, f64::max);
    let (pw, ph, left, top) = (640.0, 300.0, 60.0, 40.0);
    let x = |f: f64| left + pw * f / max_x;
    let y = |v: f64| top + ph * (1.0 - v.clamp(0.0, 1.0));
    let height = ph + top + 50.0 + 16.0 * curves.len() as f64;
    let title =
        format!("{} runs — exploration progress (solid) and races finished (dashed)", curves.len());
    let mut svg = frame_svg(&title, pw + left + 40.0, height, max_x);
    for (i, (run, prog, fin, first_finish, frames)) in curves.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        for (pts, dash) in [(prog, ""), (fin, "stroke-dasharray='5,3'")] {
            let d: Vec<String> =
                pts.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1))).collect();
            let _ = writeln!(
                svg,
                "<polyline fill='none' stroke='{c}' stroke-width='2' {dash} points='{}'/>",
                d.join(" ")
            );
        }
        let ff = first_finish.map_or("none".into(), human);
        let yy = top + ph + 50.0 + 16.0 * i as f64;
        let _ = writeln!(svg, "<rect x='{left}' y='{}' width='10' height='10' fill='{c}'/><text x='{}' y='{yy}'>{}: first finish at frame {ff}, {} frames</text>", yy - 9.0, left + 14.0, run.display(), human(*frames));
        println!(
            "{}: {} frames; first exploration finish at frame {ff}; finish rate at the end {:.0}%",
            run.display(),
            frames,
            100.0 * fin.last().map_or(f64::NAN, |p| p.1)
        );
    }
    svg += "</svg>\n";
    std::fs::write(out, svg).with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

/// One run's `heldout.csv`: `(frames, finish rate, time ratio)` per evaluation.
fn read_heldout(run: &Path) -> anyhow::Result<Vec<(f64, f64, Option<f64>)>> {
    let rows = rulka_trainer::read_heldout(run)?;
    if rows.is_empty() {
        let p = run.join("heldout.csv");
        return Err(BadInput(format!("{}: no evaluations recorded yet", p.display())).into());
    }
    Ok(rows.iter().map(|r| (r.frames as f64, r.finish_rate, r.time_ratio_median)).collect())
}

/// `rulka plot --heldout RUN…`: held-out finish rate (top) and race time ÷
/// the autopilot's (bottom, 1 = as fast as the autopilot) against frames,
/// one colour a run.
pub fn heldout(runs: &[std::path::PathBuf], output: &Path) -> anyhow::Result<()> {
    if runs.is_empty() {
        return Err(BadInput("plot: name at least one run directory".into()).into());
    }
    let curves = runs.iter().map(|r| read_heldout(r)).collect::<anyhow::Result<Vec<_>>>()?;
    let labels: Vec<String> = runs.iter().map(|r| r.display().to_string()).collect();
    draw_ratios(
        "held-out tracks: finished (greedy, top), race time ÷ the autopilot's (bottom)",
        &labels,
        &curves,
        output,
    )
}

/// `rulka plot --race-time RUN…`: for runs on one map (their first track
/// seed), the fraction of exploration races finished (top) and their mean
/// race time ÷ the autopilot's on that track (bottom), over windows of
/// consecutive runs, against frames, one colour a run.
pub fn race_time(runs: &[std::path::PathBuf], output: &Path) -> anyhow::Result<()> {
    if runs.is_empty() {
        return Err(BadInput("plot: name at least one run directory".into()).into());
    }
    let (mut curves, mut labels) = (Vec::new(), Vec::new());
    for run in runs {
        let cfg = crate::load_config(&run.join("config.yaml"))?;
        let seed = cfg.environment.sim.track_seeds.first().copied().unwrap_or(0);
        let pilot = rulka_inference::evaluate::run_autopilot(&cfg, seed)
            .with_context(|| format!("{}: the autopilot on track {seed}", run.display()))?;
        let Some(auto) = pilot.race_time_s else {
            return Err(BadInput(format!(
                "{}: the autopilot does not finish track {seed}: no time to compare with",
                run.display()
            ))
            .into());
        };
        let explo: Vec<Row> = read_rows(run)?.into_iter().filter(|r| !r.eval).collect();
        if explo.is_empty() {
            return Err(BadInput(format!("{}: no exploration runs recorded", run.display())).into());
        }
        let w = (explo.len() / 40).max(5);
        let curve: Vec<(f64, f64, Option<f64>)> = explo
            .chunks(w)
            .map(|c| {
                let times: Vec<f64> = c.iter().filter_map(|r| r.race_time_s).collect();
                let rate = c.iter().filter(|r| r.finished).count() as f64 / c.len() as f64;
                let ratio = (!times.is_empty())
                    .then(|| times.iter().sum::<f64>() / times.len() as f64 / auto);
                (c[c.len() - 1].frames, rate, ratio)
            })
            .collect();
        let best = explo.iter().filter_map(|r| r.race_time_s).fold(f64::INFINITY, f64::min);
        labels.push(format!("{} (autopilot {auto:.2} s, best {best:.2} s)", run.display()));
        curves.push(curve);
    }
    draw_ratios(
        "one map: races finished (exploration, top), mean race time ÷ the autopilot's (bottom)",
        &labels,
        &curves,
        output,
    )
}

/// The two-panel figure of [`heldout`] and [`race_time`]: per run, points
/// `(frames, finish rate, time ratio)`.
fn draw_ratios(
    title: &str,
    labels: &[String],
    curves: &[Vec<(f64, f64, Option<f64>)>],
    output: &Path,
) -> anyhow::Result<()> {
    const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"];
    let max_x = curves.iter().flatten().map(|c| c.0).fold(1.0, f64::max);
    // The top panel is frame_svg's (640×300 at 60,40); the ratio panel sits below.
    let (pw, ph, left, top) = (640.0, 300.0, 60.0, 40.0);
    let (ph2, top2) = (240.0, top + ph + 60.0);
    // Ratios shown between 0.7× and 1.5× (slower runs drawn at the edge).
    let (rlo, rhi) = (0.7, 1.5);
    let x = |f: f64| left + pw * f / max_x;
    let y1 = |v: f64| top + ph * (1.0 - v.clamp(0.0, 1.0));
    let y2 = |r: f64| top2 + ph2 * (rhi - r.clamp(rlo, rhi)) / (rhi - rlo);
    let height = top2 + ph2 + 50.0 + 16.0 * curves.len() as f64;
    let mut svg = frame_svg(title, pw + left + 90.0, height, max_x);
    let _ = writeln!(
        svg,
        "<rect x='{left}' y='{top2}' width='{pw}' height='{ph2}' fill='none' stroke='#888'/>"
    );
    for k in 0..=8 {
        let r = rlo + 0.1 * f64::from(k);
        let _ = writeln!(
            svg,
            "<text x='{}' y='{:.1}' text-anchor='end'>{r:.1}×</text>",
            left - 5.0,
            y2(r) + 4.0
        );
    }
    for k in 0..=4 {
        let v = f64::from(k) / 4.0;
        let _ = writeln!(
            svg,
            "<text x='{:.1}' y='{}' text-anchor='middle'>{}</text>",
            left + pw * v,
            top2 + ph2 + 16.0,
            human(max_x * v)
        );
    }
    for (r, label) in [(1.0, "autopilot"), (0.9, "0.9×")] {
        let _ = writeln!(svg, "<line x1='{left}' x2='{}' y1='{:.1}' y2='{:.1}' stroke='#999' stroke-dasharray='4,3'/><text x='{}' y='{:.1}' fill='#666'>{label}</text>", left + pw, y2(r), y2(r), left + pw + 3.0, y2(r) + 4.0);
    }
    let _ = writeln!(
        svg,
        "<text x='{:.1}' y='{:.1}' text-anchor='middle'>frames</text>",
        left + pw / 2.0,
        top2 + ph2 + 34.0
    );
    for (i, (run, c)) in labels.iter().zip(curves).enumerate() {
        let col = COLORS[i % COLORS.len()];
        let fin: Vec<String> = c.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y1(p.1))).collect();
        let rat: Vec<String> =
            c.iter().filter_map(|p| Some(format!("{:.1},{:.1}", x(p.0), y2(p.2?)))).collect();
        for pts in [fin, rat] {
            let _ = writeln!(
                svg,
                "<polyline fill='none' stroke='{col}' stroke-width='2' points='{}'/>",
                pts.join(" ")
            );
        }
        let last = c[c.len() - 1];
        let yy = top2 + ph2 + 50.0 + 16.0 * i as f64;
        let desc = format!(
            "{run}: last at {} frames: {:.0}% finished, {}",
            human(last.0),
            100.0 * last.1,
            last.2.map_or("no time ratio".into(), |r| format!("{r:.3}× the autopilot's time"))
        );
        let _ = writeln!(svg, "<rect x='{left}' y='{}' width='10' height='10' fill='{col}'/><text x='{}' y='{yy}'>{desc}</text>", yy - 9.0, left + 14.0);
        println!("{desc}");
    }
    svg += "</svg>\n";
    std::fs::write(output, svg).with_context(|| format!("writing {}", output.display()))?;
    println!("wrote {}", output.display());
    Ok(())
}

/// The plot area of both figures: the SVG header, a white page, the title,
/// the frame, 0–100 % ticks on the left, frame ticks below and the axis label.
/// Returns the SVG so far (without the closing tag).
fn frame_svg(title: &str, width: f64, height: f64, max_x: f64) -> String {
    let (pw, ph, left, top) = (640.0, 300.0, 60.0, 40.0);
    let mut svg = String::new();
    let _ = writeln!(svg, "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' font-size='12'>");
    let _ = writeln!(svg, "<rect width='100%' height='100%' fill='white'/>");
    let _ = writeln!(svg, "<text x='{left}' y='20' font-size='14'>{title}</text>");
    let _ = writeln!(
        svg,
        "<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#888'/>"
    );
    for k in 0..=4 {
        let v = f64::from(k) / 4.0;
        let _ = writeln!(
            svg,
            "<text x='{}' y='{:.1}' text-anchor='end'>{:.0}%</text>",
            left - 5.0,
            top + ph * (1.0 - v) + 4.0,
            v * 100.0
        );
        let _ = writeln!(
            svg,
            "<text x='{:.1}' y='{}' text-anchor='middle'>{}</text>",
            left + pw * v,
            top + ph + 16.0,
            human(max_x * v)
        );
    }
    let _ = writeln!(
        svg,
        "<text x='{:.1}' y='{}' text-anchor='middle'>frames</text>",
        left + pw / 2.0,
        top + ph + 34.0
    );
    svg
}

fn human(f: f64) -> String {
    if f >= 1e6 {
        format!("{:.2}M", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.0}k", f / 1e3)
    } else {
        format!("{f:.0}")
    }
}
