//! `rulka plot RUN_DIR [RUN_DIR …]`: the learning curve of a run (from its
//! `trajectories.csv`) as SVG (drawn by `rulka_report`): progress along the
//! track (exploration and greedy evaluation runs) and return against frames.
//! Several runs are drawn over each other (exploration progress and finish
//! rate of each) to compare them.

use std::path::Path;

use anyhow::Context as _;
use rulka_report::{human, Chart, Line, Panel, YRange};

use crate::BadInput;

/// The run's rows on its kept timeline: rows a resume threw away (written
/// after the state it resumed from, `thrown_away_by`) are left out, and
/// said so.
fn read_rows(run: &Path) -> anyhow::Result<Vec<Row>> {
    let (rows, thrown) = rulka_run::kept(rulka_run::read_trajectories(run)?);
    if thrown > 0 {
        println!(
            "{}: {thrown} of {} trajectories were recorded after the state a resume started from: left out (marked thrown_away_by in trajectories.csv)",
            run.display(),
            rows.len() + thrown
        );
    }
    Ok(rows)
}

type Row = rulka_run::TrajectoryRow;

/// The frame count of the first finished run among `rows` (as
/// [`rulka_run::RunFigures`] counts it).
fn first_finish(rows: &[&Row]) -> Option<f64> {
    rulka_run::RunFigures::of(rows.iter().copied()).first_finish_frame.map(|f| f as f64)
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
    let prog =
        windowed(&explo.iter().map(|r| (r.frames as f64, r.progress_frac)).collect::<Vec<_>>(), w);
    let fin = windowed(
        &explo
            .iter()
            .map(|r| (r.frames as f64, f64::from(u8::from(r.finished))))
            .collect::<Vec<_>>(),
        w,
    );
    let ev = windowed(
        &eval.iter().map(|r| (r.frames as f64, r.progress_frac)).collect::<Vec<_>>(),
        (eval.len() / 20).max(1),
    );
    let ret = windowed(&explo.iter().map(|r| (r.frames as f64, r.ret)).collect::<Vec<_>>(), w);
    let max_x = rows.iter().map(|r| r.frames as f64).fold(1.0, f64::max);
    let first = |v: &[(f64, f64)]| v.first().map_or(f64::NAN, |p| p.1);
    let last = |v: &[(f64, f64)]| v.last().map_or(f64::NAN, |p| p.1);
    let first_finish = first_finish(&explo);
    let said = format!(
        "{}: {} frames; exploration progress {:.0}% → {:.0}%, finish rate {:.0}% → {:.0}%, eval progress → {}, first finish at {}",
        run.display(),
        max_x,
        100.0 * first(&prog),
        100.0 * last(&prog),
        100.0 * first(&fin),
        100.0 * last(&fin),
        ev.last().map_or("-".into(), |p| format!("{:.0}%", 100.0 * p.1)),
        first_finish.map_or("-".into(), human)
    );
    let title = format!("{} — learning curve ({} trajectories)", run.display(), rows.len());
    let svg = Chart::new(title, "frames")
        .panel(
            Panel::new("progress, finished", YRange::Fraction)
                .line(Line::new("progress along the track (exploration)", 0, prog))
                .line(Line::new("fraction of races finished", 2, fin))
                .line(Line::new("progress, greedy evaluation runs", 3, ev).dashed()),
        )
        .panel(Panel::new("return", YRange::Auto).line(Line::new("return (exploration)", 1, ret)))
        .svg()?;
    let out = output.map_or_else(|| run.join("learning_curve.svg"), Path::to_path_buf);
    std::fs::write(&out, svg).with_context(|| format!("writing {}", out.display()))?;
    println!("{said}");
    println!("wrote {}", out.display());
    Ok(())
}

/// Several runs over each other: each run's exploration progress (solid)
/// and fraction of races finished (dashed) against frames, one colour a run.
fn compare(runs: &[std::path::PathBuf], output: Option<&Path>) -> anyhow::Result<()> {
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
        let prog = windowed(
            &explo.iter().map(|r| (r.frames as f64, r.progress_frac)).collect::<Vec<_>>(),
            w,
        );
        let fin = windowed(
            &explo
                .iter()
                .map(|r| (r.frames as f64, f64::from(u8::from(r.finished))))
                .collect::<Vec<_>>(),
            w,
        );
        let first_finish = first_finish(&explo);
        let max_x = rows.iter().map(|r| r.frames as f64).fold(1.0, f64::max);
        curves.push((run, prog, fin, first_finish, max_x));
    }
    let title =
        format!("{} runs — exploration progress (solid) and races finished (dashed)", curves.len());
    let mut panel = Panel::new("progress, finished", YRange::Fraction);
    for (i, (run, prog, fin, first_finish, frames)) in curves.into_iter().enumerate() {
        let ff = first_finish.map_or("none".into(), human);
        let label =
            format!("{}: first finish at frame {ff}, {} frames", run.display(), human(frames));
        println!(
            "{}: {} frames; first exploration finish at frame {ff}; finish rate at the end {:.0}%",
            run.display(),
            frames,
            100.0 * fin.last().map_or(f64::NAN, |p| p.1)
        );
        panel = panel.line(Line::new(label, i, prog)).line(Line::unlabelled(i, fin).dashed());
    }
    let svg = Chart::new(title, "frames").panel(panel).svg()?;
    std::fs::write(out, svg).with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

/// One run's `heldout.csv`: `(frames, finish rate, time ratio)` per evaluation.
fn read_heldout(run: &Path) -> anyhow::Result<Vec<(f64, f64, Option<f64>)>> {
    let (rows, thrown) = rulka_run::kept(rulka_run::read_heldout(run)?);
    if rows.is_empty() {
        let p = rulka_run::RunDir::new(run).heldout_csv();
        let why = if thrown > 0 {
            format!("its {thrown} evaluation(s) were all thrown away by a resume")
        } else {
            "no evaluations recorded yet".to_string()
        };
        return Err(BadInput(format!("{}: {why}", p.display())).into());
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
        let cfg = crate::load_config(&rulka_run::RunDir::new(run).config_yaml())?;
        let seed = cfg.environment.sim.track_seeds.first().copied().unwrap_or(0);
        let pilot = rulka_inference::run_autopilot(&cfg, seed)
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
                let times: Vec<f64> = c.iter().filter_map(rulka_run::counted_race_time).collect();
                let rate = c.iter().filter(|r| r.finished).count() as f64 / c.len() as f64;
                let ratio = (!times.is_empty())
                    .then(|| times.iter().sum::<f64>() / times.len() as f64 / auto);
                (c[c.len() - 1].frames as f64, rate, ratio)
            })
            .collect();
        let best = rulka_run::RunFigures::of(&explo)
            .best_race_time_s
            .map_or("none".into(), |b| format!("{b:.2} s"));
        labels.push(format!("{} (autopilot {auto:.2} s, best {best})", run.display()));
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
    let mut finished = Panel::new("finished", YRange::Fraction);
    // Ratios shown between 0.7× and 1.5× (slower runs drawn at the edge).
    let mut ratios = Panel::new("race time ÷ the autopilot's", YRange::Fixed { lo: 0.7, hi: 1.5 })
        .y_format(|r| format!("{r:.1}×"))
        .mark(1.0, "autopilot")
        .mark(0.9, "0.9×");
    for (i, (run, c)) in labels.iter().zip(curves).enumerate() {
        let Some(&last) = c.last() else { continue };
        let desc = format!(
            "{run}: last at {} frames: {:.0}% finished, {}",
            human(last.0),
            100.0 * last.1,
            last.2.map_or("no time ratio".into(), |r| format!("{r:.3}× the autopilot's time"))
        );
        println!("{desc}");
        finished = finished.line(Line::new(desc, i, c.iter().map(|p| (p.0, p.1)).collect()));
        let rat = c.iter().filter_map(|p| Some((p.0, p.2?))).collect();
        ratios = ratios.line(Line::unlabelled(i, rat));
    }
    let svg = Chart::new(title, "frames").panel(finished).panel(ratios).svg()?;
    std::fs::write(output, svg).with_context(|| format!("writing {}", output.display()))?;
    println!("wrote {}", output.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `rulka plot --heldout` draws the kept timeline: of three
    /// evaluations written by hand, the one a resume threw away (frame 200,
    /// `thrown_away_by` 2) is not among the points, the others are, in order.
    #[test]
    fn the_heldout_figure_leaves_out_the_evaluations_a_resume_threw_away() {
        let dir = tempfile::tempdir().unwrap();
        let csv = "frames,minutes,updates,episodes,finish_rate,mean_progress,race_time_p10_s,race_time_median_s,race_time_p90_s,time_ratio_median,ratio_episodes,autopilot_race_time_median_s,start,thrown_away_by\n\
100,0.1,1,10,0.5,0.7,,,,1.2,5,10.0,1,\n\
200,0.2,2,10,0.9,0.9,,,,0.9,9,10.0,1,2\n\
150,0.3,2,10,0.6,0.8,,,,1.1,6,10.0,2,\n";
        std::fs::write(dir.path().join("heldout.csv"), csv).unwrap();
        let points = super::read_heldout(dir.path()).unwrap();
        assert_eq!(points, vec![(100.0, 0.5, Some(1.2)), (150.0, 0.6, Some(1.1))]);
        // A table whose every evaluation was thrown away draws nothing: named.
        let all_thrown: String = csv
            .lines()
            .take(1)
            .chain(csv.lines().skip(2).take(1))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(dir.path().join("heldout.csv"), all_thrown).unwrap();
        let e = super::read_heldout(dir.path()).unwrap_err().to_string();
        assert!(e.contains("its 1 evaluation(s) were all thrown away by a resume"), "{e}");
    }
}
