//! `rulka sim plan`: the simulator's limit on each track, by the planner
//! (`rulka_env::search`: a ladder of beams over the policy's own decisions,
//! each seeded by the best drive so far, each drive refined decision by
//! decision), beside the autopilot's time. Writes the limit table
//! (`limits.csv`, [`crate::limits`]) and each best drive as an input
//! script (`drives/<map>_<time>.inputs`, the best runs' naming), which
//! `rulka inputs play` replays into `rulka sim serve`. The table is
//! rewritten after every track, so a stopped run keeps what it finished,
//! and a run into the same folder plans only the tracks it lacks.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Context as _;
use rulka_env::{input_script, search, InputTiming, PlanSettings, SearchSettings, Sim, SimParams};

use crate::limits::{Limit, LimitTable};
use crate::{load_config, BadInput};

/// Options of `rulka sim plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Config shaping the simulator (tracks, decision period).
    #[arg(long, default_value = "configs/sim-hard.yaml")]
    pub config: PathBuf,
    /// Track seeds, e.g. 1000..1100 (default: the held-out tracks `rulka
    /// eval` drives; one track when the config's track is a map's line).
    #[arg(long)]
    pub seeds: Option<String>,
    /// Track preset: easy, medium or hard (default: the config's).
    #[arg(long, value_parser = crate::parse_preset)]
    pub track: Option<rulka_config::TrackPreset>,
    /// A map's reference line (.npy) to plan instead of generated tracks.
    #[arg(long)]
    pub track_from: Option<PathBuf>,
    /// The ladder's first beam (states per decision).
    #[arg(long, default_value_t = 256)]
    pub first_beam: usize,
    /// The ladder's last beam at most (each rung doubles the beam).
    #[arg(long, default_value_t = 4096)]
    pub max_beam: usize,
    /// Stop a track's ladder when a doubling takes off less than this
    /// share of its time (0 climbs to --max-beam).
    #[arg(long, default_value_t = 0.002, value_parser = rulka_cli::numbers::share, allow_hyphen_values = true)]
    pub converged: f64,
    /// Refinement passes over each rung's drive.
    #[arg(long, default_value_t = 4)]
    pub refine_passes: usize,
    /// Tracks planned at once (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Output folder: limits.csv and drives/.
    #[arg(long, short, default_value = "limits")]
    pub out: PathBuf,
}

/// Runs `rulka sim plan`.
pub fn run(a: &PlanArgs) -> anyhow::Result<()> {
    let mut cfg = load_config(&a.config)?;
    if let Some(t) = a.track {
        cfg.environment.sim.track = t;
    }
    if let Some(p) = &a.track_from {
        if !p.is_file() {
            return Err(BadInput(format!("--track-from {}: no such file", p.display())).into());
        }
        cfg.environment.sim.track_from = Some(p.clone());
    }
    if a.first_beam == 0 || a.max_beam < a.first_beam {
        return Err(BadInput(format!(
            "--first-beam {} --max-beam {}: the first beam must be at least 1 and at most the last",
            a.first_beam, a.max_beam
        ))
        .into());
    }
    if a.jobs == Some(0) {
        return Err(BadInput("--jobs 0: at least one track at a time".into()).into());
    }
    let seeds = match (&a.seeds, &cfg.environment.sim.track_from) {
        (Some(s), _) => {
            rulka_config::parse_seeds(s).map_err(|e| BadInput(format!("--seeds {e}")))?
        }
        (None, Some(_)) => vec![0],
        (None, None) => crate::eval_cmd::default_seeds(&cfg, a.track.is_some()),
    };
    let table_path = a.out.join("limits.csv");
    let drives = a.out.join("drives");
    std::fs::create_dir_all(&drives).with_context(|| format!("creating {}", drives.display()))?;
    let mut table = LimitTable::for_config(&cfg);
    if table_path.exists() {
        let old = LimitTable::read(&table_path)?;
        old.planned_on(&cfg)
            .map_err(|e| BadInput(format!("{}: {e}: use another --out", table_path.display())))?;
        table = old;
    }
    let todo: Vec<u64> = seeds.iter().copied().filter(|s| !table.rows.contains_key(s)).collect();
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, todo.len().max(1));
    eprintln!(
        "[rulka sim plan] {} track(s) of {} ({} already in {}), {} ms a decision, beams {}..{}, {jobs} at a time",
        todo.len(),
        table.track,
        seeds.len() - todo.len(),
        table_path.display(),
        table.decision_ms,
        a.first_beam,
        a.max_beam
    );
    let settings = SearchSettings {
        first_beam: a.first_beam,
        max_beam: a.max_beam,
        converged: a.converged,
        refine_passes: a.refine_passes,
        plan: PlanSettings::default(),
    };
    let t0 = Instant::now();
    // The table, the tracks done, the next track to hand out.
    let shared = Mutex::new((table, 0usize, 0usize));
    let timing = InputTiming::from_config(&cfg);
    let result: anyhow::Result<()> = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                sc.spawn(|| -> anyhow::Result<()> {
                    let mut sim = Sim::new(SimParams::from_config(&cfg));
                    loop {
                        let i = {
                            let mut g = shared.lock().map_err(|_| anyhow::anyhow!("a planner thread failed"))?;
                            g.2 += 1;
                            g.2 - 1
                        };
                        let Some(&seed) = todo.get(i) else { return Ok(()) };
                        let row = plan_track(&cfg, &mut sim, seed, &settings, &timing, &drives)?;
                        let mut g = shared.lock().map_err(|_| anyhow::anyhow!("a planner thread failed"))?;
                        g.1 += 1;
                        // Written before it is reported: a track said to be
                        // done is in the table, whenever the run is killed.
                        let (limit_ms, autopilot_ms, converged, engine_steps, cpu_s, gain) = (
                            row.limit_ms,
                            row.autopilot_ms,
                            row.converged,
                            row.engine_steps,
                            row.cpu_s,
                            row.last_doubling_gain,
                        );
                        g.0.rows.insert(seed, row);
                        rulka_checkpoint::write_atomic(&table_path, g.0.to_csv().as_bytes())
                            .with_context(|| format!("writing {}", table_path.display()))?;
                        eprintln!(
                            "[rulka sim plan] {}/{} track {seed}: {} ({}{}), {} M engine steps, {:.1} s{}",
                            g.1,
                            todo.len(),
                            rulka_env::fmt_race_time(limit_ms as i32),
                            autopilot_ms.map_or_else(
                                || "the autopilot does not finish".to_string(),
                                |p| format!("{:.3}× the autopilot", limit_ms as f64 / p as f64)
                            ),
                            if converged { ", converged" } else { "" },
                            engine_steps / 1_000_000,
                            cpu_s,
                            gain.map_or_else(String::new, |x| format!(", last doubling −{:.2}%", 100.0 * x)),
                        );
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| anyhow::anyhow!("a planner thread panicked"))??;
        }
        Ok(())
    });
    result?;
    let (table, _, _) =
        shared.into_inner().map_err(|_| anyhow::anyhow!("a planner thread failed"))?;
    let ratios: Vec<f64> = seeds
        .iter()
        .filter_map(|s| table.rows.get(s))
        .filter_map(|r| Some(r.limit_ms as f64 / r.autopilot_ms? as f64))
        .collect();
    let q = |p| rulka_inference::quantile(&ratios, p).map_or("-".into(), |x| format!("{x:.3}"));
    println!(
        "planned {} track(s) in {:.0} s: the limit ÷ the autopilot p10 / median / p90 {} / {} / {} over {} track(s); {} converged; wrote {}",
        todo.len(),
        t0.elapsed().as_secs_f64(),
        q(0.1),
        q(0.5),
        q(0.9),
        ratios.len(),
        seeds.iter().filter(|s| table.rows.get(s).is_some_and(|r| r.converged)).count(),
        table_path.display()
    );
    Ok(())
}

/// One track: the search, the autopilot, the drive's script written.
fn plan_track(
    cfg: &rulka_config::Config,
    sim: &mut Sim,
    seed: u64,
    settings: &SearchSettings,
    timing: &InputTiming,
    drives: &Path,
) -> anyhow::Result<Limit> {
    let pilot = rulka_inference::run_autopilot(cfg, seed)
        .with_context(|| format!("the autopilot on track {seed}"))?;
    let autopilot_ms = pilot.race_time_s.map(race_ms);
    sim.load(seed)?;
    let length_m = sim.track().map_or(0.0, |t| t.length());
    let settings = &SearchSettings {
        plan: PlanSettings {
            max_race_ms: race_limit_ms(autopilot_ms, length_m, settings.plan.max_race_ms),
            ..settings.plan.clone()
        },
        ..settings.clone()
    };
    let t = Instant::now();
    let s = search(sim, seed, settings).with_context(|| format!("planning track {seed}"))?;
    let cpu_s = t.elapsed().as_secs_f64();
    let limit_ms = s.race_time_ms.ok_or_else(|| {
        anyhow::anyhow!(
            "track {seed}: no drive of the planner finishes within {} s (beams {}..{})",
            settings.plan.max_race_ms / 1000,
            settings.first_beam,
            settings.max_beam
        )
    })?;
    let map = rulka_config::prompt_name(cfg, seed);
    let name = rulka_run::best_run_file(&map, limit_ms as f64 / 1000.0);
    let actions: Vec<i32> = s.actions.iter().map(|&a| i32::from(a)).collect();
    let comment = format!(
        "# rulka sim plan: track {seed}, {} ms, beams {}..{}",
        limit_ms, settings.first_beam, settings.max_beam
    );
    let script = input_script(&actions, timing, &[&comment]);
    let path = drives.join(&name);
    rulka_checkpoint::write_atomic(&path, script.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    let times: Vec<u64> = s.rungs.iter().filter_map(|r| r.refined_ms).collect();
    let last_doubling_gain = last_doubling_gain(&times);
    Ok(Limit {
        seed,
        limit_ms,
        autopilot_ms,
        decisions: s.actions.len(),
        engine_steps: s.engine_steps(),
        cpu_s,
        converged: s.converged,
        last_doubling_gain,
        rungs: s
            .rungs
            .iter()
            .map(|r| {
                format!("{}:{}", r.beam, r.refined_ms.map_or_else(|| "-".into(), |t| t.to_string()))
            })
            .collect::<Vec<_>>()
            .join(" "),
        drive: name,
    })
}

/// The race time after which a drive counts as unfinished, ms: three times
/// the autopilot's, or the track at 5 m/s when the autopilot does not
/// finish; never under `at_least` (a real map's line of several km takes
/// minutes).
fn race_limit_ms(autopilot_ms: Option<u64>, length_m: f64, at_least: u64) -> u64 {
    let by_track = (length_m / 5.0 * 1000.0) as u64;
    autopilot_ms.map_or(by_track, |a| a.saturating_mul(3)).max(at_least)
}

/// The share of its time the ladder's last doubling took off: of the last
/// two rungs' times (ms, in order), the drop over the earlier one; `None`
/// with fewer than two.
fn last_doubling_gain(times: &[u64]) -> Option<f64> {
    match times {
        [.., a, b] => Some(a.saturating_sub(*b) as f64 / *a as f64),
        _ => None,
    }
}

/// A race time in seconds (whole engine steps of milliseconds, as the
/// simulator reports them) as the whole milliseconds it was: rounded, since
/// `ms / 1000 * 1000` is not always `ms` again in floating point.
fn race_ms(race_time_s: f64) -> u64 {
    (race_time_s * 1000.0).round() as u64
}

#[cfg(test)]
mod tests {
    /// Every race time to ten minutes comes back to its milliseconds (a
    /// truncation loses one on many of them: 0.291 s is 290.99… ms).
    #[test]
    fn a_race_time_is_the_whole_milliseconds_it_was() {
        for ms in 0..600_000u64 {
            assert_eq!(super::race_ms(ms as f64 / 1000.0), ms);
        }
    }

    /// By hand: 40 000 → 30 000 ms is a quarter off (of the earlier time,
    /// not a third of the later); only the last two rungs count; one rung
    /// or none has no doubling.
    #[test]
    fn the_last_doubling_gain_is_the_last_two_rungs_drop_over_the_earlier() {
        use super::last_doubling_gain as g;
        assert_eq!(g(&[40_000, 30_000]), Some(0.25));
        assert_eq!(g(&[50_000, 40_000, 30_000]), Some(0.25));
        assert_eq!(g(&[40_000, 40_000]), Some(0.0));
        assert_eq!(g(&[40_000]), None);
        assert_eq!(g(&[]), None);
    }

    /// The cap: three autopilot times, else the track at 5 m/s; never under
    /// the floor.
    #[test]
    fn the_race_time_cap_follows_the_autopilot_or_the_track() {
        use super::race_limit_ms as cap;
        assert_eq!(cap(Some(160_000), 4050.0, 120_000), 480_000);
        assert_eq!(cap(Some(30_000), 900.0, 120_000), 120_000);
        assert_eq!(cap(None, 9870.0, 120_000), 1_974_000);
        assert_eq!(cap(None, 100.0, 120_000), 120_000);
    }
}
