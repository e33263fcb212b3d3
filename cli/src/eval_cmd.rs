//! `rulka eval`: an exported policy on simulator tracks (by default held out
//! from training), in worker processes, judged against the autopilot on the
//! same tracks; `--compare` puts a second model beside it on identical
//! episodes.
//!
//! Workers are this binary run as `rulka eval --worker-jobs …`: each drives
//! its share of the `(track, episode)` jobs and prints one `EP` line per
//! episode on stdout, which the parent gathers.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context as _;
use rulka_config::{Config, TrackPreset};
use rulka_inference::{Episode, EvalSummary, Job};

use crate::{load_config, BadInput};

/// Options of `rulka eval`.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// Exported model (.onnx) to judge.
    #[arg(long)]
    pub model: PathBuf,
    /// Config the model was trained with (network, floats, simulator settings).
    #[arg(long)]
    pub config: PathBuf,
    /// A second model, driven on the same episodes, reported beside the first.
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Track preset: easy, medium or hard (default: the config's).
    #[arg(long, value_parser = crate::parse_preset)]
    pub tracks: Option<TrackPreset>,
    /// Track seeds, e.g. 1000..1100 or 3,7,10..20 (default: the config's
    /// training.eval_tracks, else 1000..1100 less any training seed).
    #[arg(long)]
    pub seeds: Option<String>,
    /// Episodes per track (they differ only when sampling).
    #[arg(long, default_value_t = 1)]
    pub episodes: u32,
    /// Greedy decisions (the default).
    #[arg(long, conflicts_with = "sample")]
    pub greedy: bool,
    /// Sample decisions from the policy instead of taking the likeliest.
    #[arg(long)]
    pub sample: bool,
    /// Worker processes (default: the number of cores).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Also write the report (every episode included) as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// A limit table (`rulka sim plan`'s limits.csv) holding every track
    /// evaluated: each driver's time is also reported ÷ the track's limit.
    #[arg(long)]
    pub limits: Option<PathBuf>,
    /// Internal: run as a worker on these jobs (`seed:episode,…`).
    #[arg(long, hide = true)]
    pub worker_jobs: Option<String>,
}

/// The config an evaluation drives: `cfg` with its preset overridden.
fn eval_config(args: &EvalArgs) -> anyhow::Result<Config> {
    let mut cfg = load_config(&args.config)?;
    if let Some(t) = args.tracks {
        cfg.environment.sim.track = t;
    }
    Ok(cfg)
}

/// The track seeds of an evaluation.
pub fn default_seeds(cfg: &Config, preset_overridden: bool) -> Vec<u64> {
    if !cfg.training.eval_tracks.is_empty() {
        return cfg.training.eval_tracks.clone();
    }
    (1000..1100)
        .filter(|s| preset_overridden || !cfg.environment.sim.track_seeds.contains(s))
        .collect()
}

fn models(args: &EvalArgs) -> Vec<&Path> {
    std::iter::once(args.model.as_path()).chain(args.compare.as_deref()).collect()
}

use crate::watch::open_engine as engine;

fn parse_jobs(spec: &str) -> anyhow::Result<Vec<Job>> {
    spec.split(',')
        .filter(|s| !s.is_empty())
        .map(|j| {
            let (s, e) = j.split_once(':').context("job is seed:episode")?;
            Ok(Job { seed: s.parse()?, episode: e.parse()? })
        })
        .collect()
}

/// The worker side: drives `jobs` with every model, one `EP` line each.
fn worker(args: &EvalArgs, spec: &str, ort: Option<&Path>) -> anyhow::Result<()> {
    let cfg = eval_config(args)?;
    let jobs = parse_jobs(spec)?;
    let greedy = !args.sample;
    for (m, path) in models(args).into_iter().enumerate() {
        let mut eng = engine(&cfg, path, greedy, ort)?;
        rulka_inference::run_policy(&cfg, &mut eng, &jobs, |e| {
            println!(
                "EP {m} {} {} {} {:.6} {} {}",
                e.seed,
                e.episode,
                u8::from(e.finished),
                e.progress,
                e.race_time_s.map_or("-".into(), |t| format!("{t:.3}")),
                e.steps
            );
        })?;
    }
    Ok(())
}

fn parse_ep(line: &str) -> Option<(usize, Episode)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 8 || f[0] != "EP" {
        return None;
    }
    Some((
        f[1].parse().ok()?,
        Episode {
            seed: f[2].parse().ok()?,
            episode: f[3].parse().ok()?,
            finished: f[4] == "1",
            progress: f[5].parse().ok()?,
            race_time_s: if f[6] == "-" { None } else { Some(f[6].parse().ok()?) },
            steps: f[7].parse().ok()?,
        },
    ))
}

/// Everything `rulka eval` measured.
pub struct Report {
    /// Per model (the `--model`, then `--compare`): its episodes in job order and summary.
    pub models: Vec<(PathBuf, Vec<Episode>, EvalSummary)>,
    /// The autopilot, one episode per track.
    pub autopilot: Vec<Episode>,
    /// The autopilot judged as a policy.
    pub autopilot_summary: EvalSummary,
}

/// `rulka eval`.
pub fn run(args: &EvalArgs, ort: Option<&Path>) -> anyhow::Result<()> {
    if let Some(spec) = &args.worker_jobs {
        return worker(args, spec, ort);
    }
    let t0 = Instant::now();
    let cfg = eval_config(args)?;
    let seeds = match &args.seeds {
        Some(s) => rulka_config::parse_seeds(s).map_err(|e| BadInput(format!("--seeds {e}")))?,
        None => default_seeds(&cfg, args.tracks.is_some()),
    };
    if args.episodes == 0 {
        return Err(BadInput("--episodes 0: at least one episode per track".into()).into());
    }
    if args.workers == Some(0) {
        return Err(BadInput("--workers 0: at least one worker".into()).into());
    }
    if let Some(j) = &args.json {
        if j.parent().is_some_and(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
            return Err(
                BadInput(format!("--json {}: its directory does not exist", j.display())).into()
            );
        }
    }
    let limits = match &args.limits {
        Some(path) => Some(
            crate::limits::LimitTable::read(path)?
                .limits_for(&cfg, &seeds)
                .map_err(|e| BadInput(format!("--limits {}: {e}", path.display())))?,
        ),
        None => None,
    };
    // Every model opens here first, so a bad one fails before any worker starts.
    for m in models(args) {
        engine(&cfg, m, true, ort)?;
    }
    let training = cfg.environment.sim.track_seeds.iter().filter(|s| seeds.contains(s)).count();
    let jobs: Vec<Job> = seeds
        .iter()
        .flat_map(|&seed| (0..args.episodes).map(move |episode| Job { seed, episode }))
        .collect();
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .min(jobs.len());
    let mode = if args.sample { "sampled" } else { "greedy" };
    eprintln!(
        "[rulka eval] {} {} track(s) ({}{}), {} episode(s) each, {mode}, {} model(s), {workers} worker(s)",
        seeds.len(),
        track_kind(&cfg),
        rulka_config::describe_seeds(&seeds),
        if training > 0 && args.tracks.is_none() {
            format!("; {training} of them are training seeds")
        } else {
            String::new()
        },
        args.episodes,
        models(args).len(),
    );
    let report = gather(args, &cfg, &jobs, workers, ort)?;
    print_report(&report, &seeds, &cfg, mode, t0.elapsed().as_secs_f64());
    if let Some(l) = &limits {
        print_limits(&report, l);
    }
    if let Some(path) = &args.json {
        let mut json = report_json(&report, &seeds, &cfg, mode, args.episodes);
        if let Some(l) = &limits {
            json["limits"] = limits_json(&report, l);
        }
        rulka_checkpoint::write_atomic(path, serde_json::to_string_pretty(&json)?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs the workers and the autopilot, and summarizes.
fn gather(
    args: &EvalArgs,
    cfg: &Config,
    jobs: &[Job],
    workers: usize,
    ort: Option<&Path>,
) -> anyhow::Result<Report> {
    let exe = std::env::current_exe().context("locating the rulka binary")?;
    let (tx, rx) = std::sync::mpsc::channel::<anyhow::Result<(usize, Episode)>>();
    let mut children = Vec::new();
    for w in 0..workers {
        let share: Vec<String> = jobs
            .iter()
            .skip(w)
            .step_by(workers)
            .map(|j| format!("{}:{}", j.seed, j.episode))
            .collect();
        let mut cmd = Command::new(&exe);
        if let Some(o) = ort {
            cmd.arg("--ort-lib").arg(o);
        }
        cmd.arg("eval").arg("--model").arg(&args.model).arg("--config").arg(&args.config);
        if let Some(c) = &args.compare {
            cmd.arg("--compare").arg(c);
        }
        if let Some(t) = args.tracks {
            cmd.arg("--tracks").arg(format!("{t:?}").to_lowercase());
        }
        if args.sample {
            cmd.arg("--sample");
        }
        cmd.arg("--worker-jobs").arg(share.join(","));
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting eval worker {w}"))?;
        let stdout = child.stdout.take().context("worker stdout")?;
        // Drained on its own thread: a worker blocked on a full stderr pipe
        // would never finish.
        let mut stderr = child.stderr.take().context("worker stderr")?;
        let err_text = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
            s
        });
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(ep) = parse_ep(&line) {
                    if tx.send(Ok(ep)).is_err() {
                        break;
                    }
                }
            }
        });
        children.push((child, err_text));
    }
    drop(tx);
    let autopilot = {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for j in jobs {
            if !seen.contains(&j.seed) {
                seen.push(j.seed);
                out.push(rulka_inference::run_autopilot(cfg, j.seed)?);
            }
        }
        out
    };
    let n_models = 1 + usize::from(args.compare.is_some());
    let total = jobs.len() * n_models;
    let mut got: Vec<Vec<Episode>> = vec![Vec::new(); n_models];
    let mut done = 0;
    let mut last_print = Instant::now();
    for r in rx {
        let (m, ep) = r?;
        got[m].push(ep);
        done += 1;
        if last_print.elapsed().as_secs_f64() >= 2.0 || done == total {
            eprintln!("[rulka eval] {done}/{total} episodes");
            last_print = Instant::now();
        }
    }
    for (w, (mut child, err_text)) in children.into_iter().enumerate() {
        let status = child.wait().with_context(|| format!("waiting for eval worker {w}"))?;
        let err = err_text.join().unwrap_or_default();
        if !status.success() {
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            anyhow::bail!("eval worker {w} failed ({status}): {last}");
        }
    }
    if done != total {
        anyhow::bail!("eval workers reported {done} of {total} episodes");
    }
    let mut models = Vec::new();
    for (m, mut eps) in got.into_iter().enumerate() {
        let order =
            |e: &Episode| jobs.iter().position(|j| j.seed == e.seed && j.episode == e.episode);
        eps.sort_by_key(order);
        let s = rulka_inference::summarize(&eps, &autopilot);
        let path =
            if m == 0 { args.model.clone() } else { args.compare.clone().unwrap_or_default() };
        models.push((path, eps, s));
    }
    let autopilot_summary = rulka_inference::summarize(&autopilot, &autopilot);
    Ok(Report { models, autopilot, autopilot_summary })
}

/// "Medium", or the map whose shape every seed takes (`track_from`).
fn track_kind(cfg: &Config) -> String {
    match &cfg.environment.sim.track_from {
        Some(p) => format!("{}-shaped", p.file_name().unwrap_or_default().to_string_lossy()),
        None => format!("{:?}", cfg.environment.sim.track),
    }
}

fn fmt_spread(s: &Option<rulka_inference::Spread>) -> String {
    s.map_or("-".into(), |s| format!("{:.2} / {:.2} / {:.2} s", s.p10, s.median, s.p90))
}

fn print_report(r: &Report, seeds: &[u64], cfg: &Config, mode: &str, secs: f64) {
    println!(
        "rulka eval — {} {} track(s) ({}), {mode}, {:.1} s",
        seeds.len(),
        track_kind(cfg),
        rulka_config::describe_seeds(seeds),
        secs
    );
    println!(
        "  {:<28} {:>9} {:>9}  {:<28} time ÷ autopilot (median)",
        "driver", "finished", "progress", "race time p10 / median / p90"
    );
    let row = |name: &str, s: &EvalSummary| {
        println!(
            "  {:<28} {:>8.1}% {:>8.1}%  {:<28} {}",
            name,
            100.0 * s.finish_rate,
            100.0 * s.mean_progress,
            fmt_spread(&s.race_time_s),
            s.time_ratio_median
                .map_or("-".into(), |x| format!("{x:.3}× ({} episodes)", s.ratio_episodes)),
        );
    };
    for (path, _, s) in &r.models {
        let name = path.display().to_string();
        let short = if name.len() > 28 { format!("…{}", &name[name.len() - 27..]) } else { name };
        row(&short, s);
    }
    row("autopilot", &r.autopilot_summary);
    if let [(_, a, _), (_, b, _)] = &r.models[..] {
        let (mut a_faster, mut b_faster, mut both) = (0, 0, 0);
        for (x, y) in a.iter().zip(b) {
            if let (Some(tx), Some(ty)) = (x.race_time_s, y.race_time_s) {
                both += 1;
                if tx < ty {
                    a_faster += 1;
                } else if ty < tx {
                    b_faster += 1;
                }
            }
        }
        println!(
            "  head to head on {both} episodes both finished: --model faster on {a_faster}, --compare faster on {b_faster}"
        );
    }
}

/// Each driver's finished episodes ÷ their tracks' limits: p10, median, p90.
fn limit_spreads(
    r: &Report,
    limits: &std::collections::BTreeMap<u64, u64>,
) -> Vec<(String, Option<rulka_inference::Spread>, usize)> {
    let one = |name: String, eps: &[Episode]| {
        let x = crate::limits::limit_ratios(eps, limits);
        (name, rulka_inference::spread(&x), x.len())
    };
    r.models
        .iter()
        .map(|(p, eps, _)| one(p.display().to_string(), eps))
        .chain(std::iter::once(one("autopilot".into(), &r.autopilot)))
        .collect()
}

fn print_limits(r: &Report, limits: &std::collections::BTreeMap<u64, u64>) {
    println!("  time ÷ the limit (rulka sim plan's best drive; 1 is the planner's time)");
    for (name, s, n) in limit_spreads(r, limits) {
        let short = if name.len() > 28 { format!("…{}", &name[name.len() - 27..]) } else { name };
        println!(
            "  {:<28} {}",
            short,
            s.map_or("-".into(), |s| format!(
                "p10 / median / p90 {:.3} / {:.3} / {:.3}× ({n} episodes)",
                s.p10, s.median, s.p90
            ))
        );
    }
}

fn limits_json(r: &Report, limits: &std::collections::BTreeMap<u64, u64>) -> serde_json::Value {
    limit_spreads(r, limits)
        .into_iter()
        .map(|(name, s, n)| {
            serde_json::json!({"driver": name, "episodes": n,
                "time_ratio": s.map(|s| serde_json::json!({"p10": s.p10, "median": s.median, "p90": s.p90}))})
        })
        .collect()
}

fn summary_json(s: &EvalSummary) -> serde_json::Value {
    let spread = |x: &Option<rulka_inference::Spread>| {
        x.map(|s| serde_json::json!({"p10": s.p10, "median": s.median, "p90": s.p90}))
    };
    serde_json::json!({
        "episodes": s.episodes,
        "finish_rate": s.finish_rate,
        "mean_progress": s.mean_progress,
        "race_time_s": spread(&s.race_time_s),
        "autopilot_finish_rate": s.autopilot_finish_rate,
        "autopilot_race_time_s": spread(&s.autopilot_race_time_s),
        "time_ratio": spread(&s.time_ratio),
        "time_ratio_median": s.time_ratio_median,
        "ratio_episodes": s.ratio_episodes,
    })
}

fn episodes_json(eps: &[Episode]) -> serde_json::Value {
    eps.iter()
        .map(|e| {
            serde_json::json!({"seed": e.seed, "episode": e.episode, "finished": e.finished,
                "progress": e.progress, "race_time_s": e.race_time_s, "steps": e.steps})
        })
        .collect()
}

fn report_json(
    r: &Report,
    seeds: &[u64],
    cfg: &Config,
    mode: &str,
    episodes: u32,
) -> serde_json::Value {
    serde_json::json!({
        "tracks": format!("{:?}", cfg.environment.sim.track).to_lowercase(),
        "seeds": seeds,
        "episodes_per_track": episodes,
        "mode": mode,
        "models": r.models.iter().map(|(p, eps, s)| serde_json::json!({
            "model": p.display().to_string(),
            "summary": summary_json(s),
            "episodes": episodes_json(eps),
        })).collect::<Vec<_>>(),
        "autopilot": {"summary": summary_json(&r.autopilot_summary), "episodes": episodes_json(&r.autopilot)},
    })
}
