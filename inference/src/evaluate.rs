//! Judging a policy on the built-in simulator: episodes of an exported model
//! on given tracks, the scripted [`Autopilot`] on the same tracks, and what
//! `rulka eval` and the trainer's held-out evaluation report of them.
//!
//! An episode is a function of `(track seed, episode index)`: the simulator
//! is deterministic, and a sampling policy draws from a generator seeded by
//! the pair ([`episode_seed`]), so two models compared on the same jobs see
//! identical tracks, starts and random streams.
//!
//! ```no_run
//! use rulka_config::Config;
//! use rulka_inference::{EngineOptions, Job, ModelSource, PolicyEngine};
//!
//! let cfg = Config::from_file("configs/sim-medium.yaml")?;
//! let rt = rulka_inference::load_runtime(None)?;
//! let mut engine = PolicyEngine::new(rt, &cfg, ModelSource::File("model.onnx".into()), 0,
//!     EngineOptions { greedy: true, seed: 0 })?;
//! let jobs: Vec<Job> = (1000..1010).map(|seed| Job { seed, episode: 0 }).collect();
//! let policy = rulka_inference::run_policy(&cfg, &mut engine, &jobs, |_| {})?;
//! let pilot: Vec<_> = jobs.iter().map(|j| rulka_inference::run_autopilot(&cfg, j.seed)).collect::<Result<_, _>>()?;
//! let s = rulka_inference::summarize(&policy, &pilot);
//! println!("finished {:.0}%, time ratio {:?}", 100.0 * s.finish_rate, s.time_ratio_median);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use rulka_config::Config;
use rulka_env::{Autopilot, EnvError, Environment, SimEnv, Status};

use crate::{InferenceError, PolicyEngine};

/// One episode to drive: a track and which of its episodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Track seed (of the config's preset).
    pub seed: u64,
    /// Episode index on that track (only changes the sampling stream).
    pub episode: u32,
}

/// What one episode came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Episode {
    /// Track seed.
    pub seed: u64,
    /// Episode index.
    pub episode: u32,
    /// Whether the car crossed the finish line.
    pub finished: bool,
    /// Fraction of the race distance covered, in `[0, 1]`.
    pub progress: f64,
    /// Race time in seconds, when finished.
    pub race_time_s: Option<f64>,
    /// Decisions taken.
    pub steps: u32,
}

/// A driven path: positions (m) and speeds (m/s), one per decision.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Car positions, the start first.
    pub points: Vec<[f64; 2]>,
    /// Speed at each position.
    pub speeds: Vec<f64>,
}

impl Trace {
    /// Adds where the car is in `env`, and its speed.
    fn record(&mut self, env: &SimEnv) {
        self.points.push(env.car().pos);
        self.speeds.push(env.car().speed());
    }
}

/// Errors of an evaluation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The simulator refused a step (a bad action, no track).
    #[error("track {seed}: {source}")]
    Env {
        /// Track seed.
        seed: u64,
        /// What went wrong.
        #[source]
        source: EnvError,
    },
    /// The policy failed (non-finite output, a run error).
    #[error("track {seed}: {source}")]
    Policy {
        /// Track seed.
        seed: u64,
        /// What went wrong.
        #[source]
        source: InferenceError,
    },
}

impl EvalError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        match self {
            Self::Env { source, .. } => source.kind(),
            Self::Policy { source, .. } => source.kind(),
        }
    }
}

/// Checks that an exported model was made for `cfg`'s network: its
/// `rulka.network_hash` metadata must equal the config's (models without the
/// key, exported elsewhere, pass; their shapes are checked by the engine).
pub fn check_network(cfg: &Config, model: &[u8], label: &str) -> Result<(), InferenceError> {
    let meta = rulka_export::metadata(model).map_err(|e| InferenceError::Session {
        model: label.to_string(),
        message: format!("not an ONNX model: {e}"),
    })?;
    let want = cfg.network_hash();
    match meta.iter().find(|(k, _)| k == "rulka.network_hash") {
        Some((_, got)) if *got != want => Err(InferenceError::ModelMismatch {
            model: label.to_string(),
            message: format!(
                "exported for network {got} (rulka.network_hash), but the config describes network {want}: evaluate it with the config it was trained with"
            ),
        }),
        _ => Ok(()),
    }
}

/// The sampling seed of episode `(seed, episode)`: the same for every model.
pub fn episode_seed(job: Job) -> u64 {
    job.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(job.episode).wrapping_add(1)
}

/// Drives one episode of `job.seed` with `act` choosing each decision's
/// actions from the frame and floats; `observe_frame` false skips rendering
/// (for drivers that read floats only). `on_step` sees the simulator after
/// every decision (and once at the start).
pub fn drive_episode(
    env: &mut SimEnv,
    job: Job,
    observe_frame: bool,
    mut act: impl FnMut(&[u8], &[f32]) -> Result<Vec<u8>, InferenceError>,
    mut on_step: impl FnMut(&SimEnv, &[u8]),
) -> Result<Episode, EvalError> {
    let env_err = |source| EvalError::Env { seed: job.seed, source };
    env.reset(job.seed).map_err(env_err)?;
    let (fl, nf) = env.obs_sizes();
    let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
    let length = env.track().map_or(1.0, |t| t.length().max(1e-9));
    let mut steps = 0u32;
    let status = loop {
        if observe_frame {
            env.observe(&mut frame, &mut floats).map_err(env_err)?;
        } else {
            env.floats(&mut floats).map_err(env_err)?;
        }
        on_step(env, &frame);
        let a =
            act(&frame, &floats).map_err(|source| EvalError::Policy { seed: job.seed, source })?;
        steps += 1;
        let st = env.step(&a).map_err(env_err)?;
        if st.is_done() {
            break st;
        }
    };
    on_step(env, &frame);
    let (finished, race_time_s) = match status {
        Status::Finished { race_time_ms } => (true, Some(race_time_ms / 1000.0)),
        _ => (false, None),
    };
    let progress = if finished { 1.0 } else { (env.progress_m() / length).clamp(0.0, 1.0) };
    Ok(Episode { seed: job.seed, episode: job.episode, finished, progress, race_time_s, steps })
}

/// The exported policy on each job, in order; `progress` is called after
/// each episode. The engine's greedy/sampling mode is the caller's; a
/// sampling engine is re-seeded per job with [`episode_seed`].
pub fn run_policy(
    cfg: &Config,
    engine: &mut PolicyEngine,
    jobs: &[Job],
    mut progress: impl FnMut(&Episode),
) -> Result<Vec<Episode>, EvalError> {
    let mut env = SimEnv::new(cfg);
    let mut out = Vec::with_capacity(jobs.len());
    for &job in jobs {
        let ep = run_episode(&mut env, engine, job, None)?;
        progress(&ep);
        out.push(ep);
    }
    Ok(out)
}

/// One policy episode, recording its path into `trace` when given.
pub fn run_episode(
    env: &mut SimEnv,
    engine: &mut PolicyEngine,
    job: Job,
    mut trace: Option<&mut Trace>,
) -> Result<Episode, EvalError> {
    run_episode_observed(env, engine, job, |e| {
        if let Some(t) = trace.as_deref_mut() {
            t.record(e);
        }
    })
}

/// How a policy drives an episode wherever one is judged (`rulka eval`,
/// the held-out evaluation, `rulka sim gap`): the engine reseeded for the
/// job ([`episode_seed`]), every decision from the rendered frame and the
/// floats. `on_step` sees the simulator after every decision (and once at
/// the start).
pub fn run_episode_observed(
    env: &mut SimEnv,
    engine: &mut PolicyEngine,
    job: Job,
    mut on_step: impl FnMut(&SimEnv),
) -> Result<Episode, EvalError> {
    engine.reseed(episode_seed(job));
    drive_episode(
        env,
        job,
        true,
        |frame, floats| engine.act(frame, floats).map(|a| a.actions().to_vec()),
        |e, _| on_step(e),
    )
}

/// The scripted autopilot on track `seed` (the baseline of every report).
pub fn run_autopilot(cfg: &Config, seed: u64) -> Result<Episode, EvalError> {
    run_autopilot_traced(cfg, seed, None)
}

/// [`run_autopilot`], recording its path into `trace` when given.
pub fn run_autopilot_traced(
    cfg: &Config,
    seed: u64,
    mut trace: Option<&mut Trace>,
) -> Result<Episode, EvalError> {
    let pilot = Autopilot::new(cfg);
    let mut env = SimEnv::new(cfg);
    run_autopilot_observed(&mut env, &pilot, seed, |e| {
        if let Some(t) = trace.as_deref_mut() {
            t.record(e);
        }
    })
}

/// How the autopilot drives track `seed` wherever it is the baseline (it
/// reads the floats only); `on_step` as in [`run_episode_observed`].
pub fn run_autopilot_observed(
    env: &mut SimEnv,
    pilot: &Autopilot,
    seed: u64,
    mut on_step: impl FnMut(&SimEnv),
) -> Result<Episode, EvalError> {
    drive_episode(
        env,
        Job { seed, episode: 0 },
        false,
        |_, floats| Ok(vec![pilot.act(floats)]),
        |e, _| on_step(e),
    )
}

/// p10, median and p90 of a sample (linear interpolation between order
/// statistics, as NumPy's default `percentile`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// 10th percentile.
    pub p10: f64,
    /// Median.
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
}

/// The `q`-quantile (`0..=1`) of `xs` by linear interpolation; None when empty.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// The p10, median and p90 of `xs` ([`quantile`]); None when empty.
pub fn spread(xs: &[f64]) -> Option<Spread> {
    Some(Spread { p10: quantile(xs, 0.1)?, median: quantile(xs, 0.5)?, p90: quantile(xs, 0.9)? })
}

/// A policy's episodes judged against the autopilot on the same tracks.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSummary {
    /// Episodes driven.
    pub episodes: usize,
    /// Fraction that finished.
    pub finish_rate: f64,
    /// Mean fraction of the race distance covered.
    pub mean_progress: f64,
    /// Race times of the finished episodes, s.
    pub race_time_s: Option<Spread>,
    /// Fraction of the episodes' tracks the autopilot finishes.
    pub autopilot_finish_rate: f64,
    /// The autopilot's race times on the tracks of the episodes, s.
    pub autopilot_race_time_s: Option<Spread>,
    /// Per episode where both finished: policy time ÷ autopilot time on
    /// that track. Below 1: faster than the autopilot.
    pub time_ratio: Option<Spread>,
    /// Median of [`Self::time_ratio`] (None when no episode qualifies).
    pub time_ratio_median: Option<f64>,
    /// Episodes counted in the time ratio.
    pub ratio_episodes: usize,
}

/// Summarizes `policy` episodes against `autopilot` episodes (one per track
/// seed; tracks missing from it count as not finished by the autopilot).
pub fn summarize(policy: &[Episode], autopilot: &[Episode]) -> EvalSummary {
    let n = policy.len();
    let pilot_of = |seed: u64| autopilot.iter().find(|a| a.seed == seed);
    let times: Vec<f64> = policy.iter().filter_map(|e| e.race_time_s).collect();
    let pilot_times: Vec<f64> =
        policy.iter().filter_map(|e| pilot_of(e.seed).and_then(|a| a.race_time_s)).collect();
    let ratios: Vec<f64> = policy
        .iter()
        .filter_map(|e| Some(e.race_time_s? / pilot_of(e.seed)?.race_time_s?))
        .collect();
    let frac = |k: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
    EvalSummary {
        episodes: n,
        finish_rate: frac(policy.iter().filter(|e| e.finished).count()),
        mean_progress: if n == 0 {
            0.0
        } else {
            policy.iter().map(|e| e.progress).sum::<f64>() / n as f64
        },
        race_time_s: spread(&times),
        autopilot_finish_rate: frac(
            policy.iter().filter(|e| pilot_of(e.seed).is_some_and(|a| a.finished)).count(),
        ),
        autopilot_race_time_s: spread(&pilot_times),
        time_ratio: spread(&ratios),
        time_ratio_median: quantile(&ratios, 0.5),
        ratio_episodes: ratios.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(seed: u64, t: Option<f64>, progress: f64) -> Episode {
        Episode { seed, episode: 0, finished: t.is_some(), progress, race_time_s: t, steps: 1 }
    }

    #[test]
    fn quantiles_interpolate_as_numpy() {
        // numpy.percentile([3, 1, 4, 1, 5], [10, 50, 90]) = [1.0, 3.0, 4.6]
        let xs = [3.0, 1.0, 4.0, 1.0, 5.0];
        rulka_test_support::margin::close(
            "quantile(&xs, 0.1).unwrap() vs 1.0",
            quantile(&xs, 0.1).unwrap(),
            1.0,
            1e-12,
        );
        rulka_test_support::margin::close(
            "quantile(&xs, 0.5).unwrap() vs 3.0",
            quantile(&xs, 0.5).unwrap(),
            3.0,
            1e-12,
        );
        rulka_test_support::margin::close(
            "quantile(&xs, 0.9).unwrap() vs 4.6",
            quantile(&xs, 0.9).unwrap(),
            4.6,
            1e-12,
        );
        // numpy.percentile([10, 20], 50) = 15
        rulka_test_support::margin::close(
            "quantile(&[20.0, 10.0], 0.5).unwrap() vs 15.0",
            quantile(&[20.0, 10.0], 0.5).unwrap(),
            15.0,
            1e-12,
        );
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn ratio_counts_only_tracks_both_finished() {
        let policy = [
            ep(1, Some(18.0), 1.0),
            ep(2, None, 0.5),
            ep(3, Some(30.0), 1.0),
            ep(4, Some(10.0), 1.0),
        ];
        // Track 3: the autopilot did not finish; track 4: not in its list.
        let pilot = [ep(1, Some(20.0), 1.0), ep(2, Some(25.0), 1.0), ep(3, None, 0.9)];
        let s = summarize(&policy, &pilot);
        assert_eq!(s.episodes, 4);
        rulka_test_support::margin::close("s.finish_rate vs 0.75", s.finish_rate, 0.75, 1e-12);
        rulka_test_support::margin::close(
            "s.mean_progress vs 0.875",
            s.mean_progress,
            0.875,
            1e-12,
        );
        assert_eq!(s.ratio_episodes, 1);
        rulka_test_support::margin::close(
            "s.time_ratio_median.unwrap() vs 0.9",
            s.time_ratio_median.unwrap(),
            0.9,
            1e-12,
        );
        rulka_test_support::margin::close(
            "s.autopilot_finish_rate vs 0.5",
            s.autopilot_finish_rate,
            0.5,
            1e-12,
        );
        // Finished policy times 18, 30, 10: median 18.
        rulka_test_support::margin::close(
            "s.race_time_s.unwrap().median vs 18.0",
            s.race_time_s.unwrap().median,
            18.0,
            1e-12,
        );
    }

    #[test]
    fn episode_seeds_differ_by_track_and_episode() {
        let a = episode_seed(Job { seed: 1, episode: 0 });
        assert_ne!(a, episode_seed(Job { seed: 1, episode: 1 }));
        assert_ne!(a, episode_seed(Job { seed: 2, episode: 0 }));
        assert_eq!(a, episode_seed(Job { seed: 1, episode: 0 }));
    }
}
