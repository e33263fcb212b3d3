//! Held-out evaluation during training: every `training.eval_every_n_updates`
//! updates the learner's weights are exported to ONNX and driven greedily on
//! the `training.eval_tracks` (never trained on) on a thread of the trainer,
//! beside the autopilot's times on the same tracks (computed once). Results
//! go to TensorBoard (`Eval/heldout_*`), `heldout.csv` and `summary.json`.
//! One evaluation runs at a time; one more runs on the final weights.
//!
//! The best evaluated policy so far (most tracks finished, then the lowest
//! median time ratio) is kept as `best.onnx` with `best.json`, across
//! resumes. The held-out tracks chose it, so its figure on them is biased
//! upwards: judge it with `rulka eval --seeds` on other tracks.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use anyhow::Context as _;
use rulka_config::Config;
use rulka_inference::{EngineOptions, ModelSource, PolicyEngine, Runtime};
use rulka_inference::{Episode, EvalSummary, Job};
use rulka_learner::{EventWriter, Learner};

use rulka_run::{HeldOutCsv, HeldOutRow};

/// When an evaluation's weights were taken.
#[derive(Debug, Clone, Copy)]
pub struct At {
    /// Environment frames so far.
    pub frames: u64,
    /// Learner updates so far.
    pub updates: u64,
    /// Minutes since the run (this process) started.
    pub minutes: f64,
}

/// One finished held-out evaluation.
#[derive(Debug, Clone)]
pub struct Row {
    /// When its weights were taken.
    pub at: At,
    /// The policy against the autopilot.
    pub summary: EvalSummary,
}

type Pending = (At, Vec<u8>, JoinHandle<Result<Vec<Episode>, String>>);

/// The best evaluation so far: its finish rate and median time ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Best {
    finish_rate: f64,
    time_ratio: Option<f64>,
}

impl Best {
    fn of(s: &EvalSummary) -> Self {
        Self { finish_rate: s.finish_rate, time_ratio: s.time_ratio_median }
    }

    /// Whether an evaluation could be the best at all: its finish rate is
    /// a number (an evaluation of no episodes is not).
    fn is_candidate(&self) -> bool {
        self.finish_rate.is_finite()
    }

    /// `self` is better than `kept`: more tracks finished (finish rates
    /// within 1e-9 are as many: they are counts over the same tracks), or
    /// as many and a lower median time ratio; a ratio that is not a finite
    /// number counts as none, and none is slower than any. A tie keeps the
    /// older.
    fn beats(&self, kept: &Best) -> bool {
        if !self.is_candidate() {
            return false;
        }
        let ratio = |r: Option<f64>| r.filter(|x| x.is_finite()).unwrap_or(f64::INFINITY);
        self.finish_rate > kept.finish_rate + 1e-9
            || ((self.finish_rate - kept.finish_rate).abs() <= 1e-9
                && ratio(self.time_ratio) < ratio(kept.time_ratio))
    }
}

/// Whether an evaluation is due at `updates` learner updates: `every`
/// updates after the last one started (`None`: none yet, as if one had
/// started at 0), the update that reaches it included; never when that is
/// past the last update count there is.
fn evaluation_due(last_started: Option<u64>, updates: u64, every: u64) -> bool {
    last_started.unwrap_or(0).checked_add(every).is_some_and(|at| updates >= at)
}

/// Whether a due evaluation starts now: one runs at a time, so not while
/// another is in flight (it starts at the first tick after that one is
/// collected).
fn starts_now(due: bool, in_flight: bool) -> bool {
    due && !in_flight
}

/// Whether the final weights (at `updates`) still need an evaluation at
/// the end: not when the last one started was of them already.
fn final_evaluation_needed(last_started: Option<u64>, updates: u64) -> bool {
    last_started != Some(updates)
}

/// The trainer's held-out evaluator.
#[derive(Debug)]
pub struct HeldOut {
    cfg: Config,
    rt: Runtime,
    jobs: Vec<Job>,
    autopilot: Vec<Episode>,
    autopilot_summary: EvalSummary,
    last_started: Option<u64>,
    in_flight: Option<Pending>,
    csv: HeldOutCsv,
    rows: Vec<Row>,
    run_dir: PathBuf,
    best: BestKept,
    /// The run's start evaluating (`starts.json`).
    start: u32,
}

/// `best.onnx` and `best.json`: the best evaluation so far, across resumes
/// (read back from `best.json`).
#[derive(Debug)]
struct BestKept {
    dir: PathBuf,
    best: Option<Best>,
}

impl BestKept {
    /// The kept best of the run in `dir`. A `best.json` that does not read
    /// (cut, edited, not a best) is moved aside with its `best.onnx`, as
    /// `*.damaged`, and said: the next evaluation is kept without either
    /// being lost.
    fn open(dir: &Path) -> Self {
        let json = dir.join("best.json");
        let best = read_best(&json);
        if best.is_none() && json.exists() {
            for name in ["best.json", "best.onnx"] {
                let (from, to) = (dir.join(name), dir.join(format!("{name}.damaged")));
                if from.exists() {
                    if let Err(e) = std::fs::rename(&from, &to) {
                        tracing::warn!("[rulka train] moving {} aside: {e}", from.display());
                    }
                }
            }
            tracing::warn!(
                "[rulka train] {} does not read as a best evaluation: moved aside with best.onnx (as *.damaged); the next held-out evaluation is kept as the best",
                json.display()
            );
        }
        Self { dir: dir.to_path_buf(), best }
    }

    /// Keeps `model` (writes `best.onnx`, then `best.json`, each atomically)
    /// when `s` beats the best so far or there is none; true when it did.
    fn offer(
        &mut self,
        cfg: &Config,
        at: At,
        s: &EvalSummary,
        model: &[u8],
    ) -> anyhow::Result<bool> {
        let candidate = Best::of(s);
        let better = match &self.best {
            Some(b) => candidate.beats(b),
            None => candidate.is_candidate(),
        };
        if !better {
            return Ok(false);
        }
        rulka_checkpoint::write_atomic(&self.dir.join("best.onnx"), model)?;
        let json = serde_json::json!({
            "frames": at.frames,
            "updates": at.updates,
            "minutes": at.minutes,
            "finish_rate": s.finish_rate,
            "time_ratio_median": s.time_ratio_median,
            "race_time_median_s": s.race_time_s.map(|t| t.median),
            "tracks": format!("{:?}", cfg.environment.sim.track).to_lowercase(),
            "seeds": rulka_config::describe_seeds(&cfg.training.eval_tracks),
        });
        rulka_checkpoint::write_atomic(
            &self.dir.join("best.json"),
            serde_json::to_string_pretty(&json)?.as_bytes(),
        )?;
        self.best = Some(candidate);
        Ok(true)
    }
}

impl HeldOut {
    /// The evaluator of `cfg` (None when `training.eval_tracks` is empty);
    /// drives the autopilot on the tracks once.
    pub fn new(
        cfg: &Config,
        run_dir: &Path,
        ort: Option<&Path>,
        start: u32,
    ) -> anyhow::Result<Option<Self>> {
        if cfg.training.eval_tracks.is_empty() {
            return Ok(None);
        }
        let rt = rulka_inference::load_runtime(ort)
            .context("loading ONNX Runtime for held-out evaluation")?;
        let jobs: Vec<Job> =
            cfg.training.eval_tracks.iter().map(|&seed| Job { seed, episode: 0 }).collect();
        let autopilot = jobs
            .iter()
            .map(|j| rulka_inference::run_autopilot(cfg, j.seed))
            .collect::<Result<Vec<_>, _>>()
            .context("driving the autopilot on the held-out tracks")?;
        let autopilot_summary = rulka_inference::summarize(&autopilot, &autopilot);
        let csv = HeldOutCsv::open(run_dir)?;
        tracing::info!(
            "[rulka train] held-out evaluation every {} updates on {} {:?} tracks ({}); the autopilot finishes {:.0}% of them, median {}",
            cfg.training.eval_every_n_updates,
            jobs.len(),
            cfg.environment.sim.track,
            rulka_config::describe_seeds(&cfg.training.eval_tracks),
            100.0 * autopilot_summary.finish_rate,
            autopilot_summary.race_time_s.map_or("-".into(), |s| format!("{:.2} s", s.median)),
        );
        let best = BestKept::open(run_dir);
        Ok(Some(Self {
            start,
            run_dir: run_dir.to_path_buf(),
            best,
            cfg: cfg.clone(),
            rt,
            jobs,
            autopilot,
            autopilot_summary,
            last_started: None,
            in_flight: None,
            csv,
            rows: Vec::new(),
        }))
    }

    /// Records a finished evaluation, and starts one when due and none runs.
    pub fn tick(&mut self, learner: &Learner, at: At, tb: &mut EventWriter) -> anyhow::Result<()> {
        if self.in_flight.as_ref().is_some_and(|(_, _, h)| h.is_finished()) {
            self.collect(tb)?;
        }
        let due = evaluation_due(
            self.last_started,
            learner.updates,
            self.cfg.training.eval_every_n_updates,
        );
        if starts_now(due, self.in_flight.is_some()) {
            self.start(learner, at)?;
        }
        Ok(())
    }

    /// Waits for a running evaluation, then evaluates the final weights
    /// (unless the last evaluation already had them).
    pub fn finish(
        &mut self,
        learner: &Learner,
        at: At,
        tb: &mut EventWriter,
    ) -> anyhow::Result<()> {
        if self.in_flight.is_some() {
            self.collect(tb)?;
        }
        if final_evaluation_needed(self.last_started, learner.updates) {
            tracing::info!("[rulka train] held-out evaluation of the final weights");
            self.start(learner, at)?;
            self.collect(tb)?;
        }
        Ok(())
    }

    fn start(&mut self, learner: &Learner, at: At) -> anyhow::Result<()> {
        let w = learner.network().to_weights();
        if !w.all_finite() {
            return Ok(());
        }
        let onnx = rulka_export::export_onnx(&self.cfg, &w)
            .context("exporting for held-out evaluation")?;
        let (cfg, rt, jobs, model) = (self.cfg.clone(), self.rt, self.jobs.clone(), onnx.clone());
        let handle = std::thread::Builder::new()
            .name("heldout-eval".into())
            .spawn(move || {
                let mut engine = PolicyEngine::new(
                    rt,
                    &cfg,
                    ModelSource::Bytes(onnx),
                    at.updates,
                    EngineOptions { greedy: true, seed: 0 },
                )
                .map_err(|e| e.to_string())?;
                rulka_inference::run_policy(&cfg, &mut engine, &jobs, |_| {})
                    .map_err(|e| e.to_string())
            })
            .context("starting the held-out evaluation thread")?;
        self.last_started = Some(at.updates);
        self.in_flight = Some((at, model, handle));
        Ok(())
    }

    fn collect(&mut self, tb: &mut EventWriter) -> anyhow::Result<()> {
        let Some((at, model, handle)) = self.in_flight.take() else { return Ok(()) };
        let episodes = match handle.join() {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => {
                tracing::warn!(
                    "\n[rulka train] held-out evaluation at update {} failed: {e}",
                    at.updates
                );
                return Ok(());
            }
            Err(_) => anyhow::bail!("the held-out evaluation thread panicked"),
        };
        let s = rulka_inference::summarize(&episodes, &self.autopilot);
        let step = at.frames as i64;
        tb.scalar("Eval/heldout_finish_rate", step, s.finish_rate)?;
        tb.scalar("Eval/heldout_progress", step, s.mean_progress)?;
        if let Some(t) = s.race_time_s {
            tb.scalar("Eval/heldout_race_time_median_s", step, t.median)?;
        }
        if let Some(r) = s.time_ratio_median {
            tb.scalar("Eval/heldout_time_ratio_median", step, r)?;
        }
        if let Some(t) = self.autopilot_summary.race_time_s {
            tb.scalar("Eval/heldout_autopilot_race_time_median_s", step, t.median)?;
        }
        self.csv.append(&HeldOutRow {
            frames: at.frames,
            minutes: at.minutes,
            updates: at.updates,
            episodes: s.episodes,
            finish_rate: s.finish_rate,
            mean_progress: s.mean_progress,
            race_time_p10_s: s.race_time_s.map(|t| t.p10),
            race_time_median_s: s.race_time_s.map(|t| t.median),
            race_time_p90_s: s.race_time_s.map(|t| t.p90),
            time_ratio_median: s.time_ratio_median,
            ratio_episodes: s.ratio_episodes,
            autopilot_race_time_median_s: self.autopilot_summary.race_time_s.map(|t| t.median),
            start: self.start,
            thrown_away_by: None,
        })?;
        self.best.offer(&self.cfg, at, &s, &model)?;
        self.rows.push(Row { at, summary: s });
        Ok(())
    }

    /// The newest result, for the progress line.
    pub fn line(&self) -> String {
        self.rows.last().map_or(String::new(), |r| {
            format!(
                " | held-out finished {:.0}% time ×{}",
                100.0 * r.summary.finish_rate,
                r.summary.time_ratio_median.map_or("-".into(), |x| format!("{x:.2}"))
            )
        })
    }

    /// What `summary.json` records: the tracks, the final evaluation, the
    /// best time ratio and the first frame count at which every held-out
    /// track was finished.
    pub fn summary_json(&self) -> serde_json::Value {
        let (best_time_ratio_median, first_all_finished_frames) = timeline_figures(&self.run_dir);
        let row = |r: &Row| {
            serde_json::json!({
                "frames": r.at.frames,
                "updates": r.at.updates,
                "minutes": r.at.minutes,
                "finish_rate": r.summary.finish_rate,
                "mean_progress": r.summary.mean_progress,
                "race_time_median_s": r.summary.race_time_s.map(|t| t.median),
                "time_ratio_median": r.summary.time_ratio_median,
            })
        };
        serde_json::json!({
            "tracks": format!("{:?}", self.cfg.environment.sim.track).to_lowercase(),
            "seeds": rulka_config::describe_seeds(&self.cfg.training.eval_tracks),
            "autopilot_race_time_median_s": self.autopilot_summary.race_time_s.map(|t| t.median),
            "autopilot_finish_rate": self.autopilot_summary.finish_rate,
            "evaluations": self.rows.len(),
            "final": self.rows.last().map(row),
            // Over the run's kept timeline: earlier starts' evaluations, then this start's.
            "best_time_ratio_median": best_time_ratio_median,
            "best": read_best_json(&self.run_dir.join("best.json")),
            "first_all_finished_frames": first_all_finished_frames,
        })
    }
}

/// `summary.json`'s figures of the run's kept held-out timeline — the
/// lowest median time ratio, the frame count of the first evaluation that
/// finished every track — over `heldout.csv` read back (the table `rulka
/// plot --heldout` draws: earlier starts' kept rows, then this start's as
/// they were appended); none when it cannot be read (said).
fn timeline_figures(run_dir: &Path) -> (Option<f64>, Option<u64>) {
    let timeline = match rulka_run::read_heldout(run_dir) {
        Ok(rows) => kept_evaluations(rows),
        Err(e) => {
            tracing::warn!("[rulka train] reading the held-out table back: {e:#}");
            Vec::new()
        }
    };
    (best_time_ratio(timeline.iter().copied()), first_all_finished(timeline.iter().copied()))
}

/// An evaluation on the timeline: `(frames, finish rate, median time ratio)`.
type Evaluation = (u64, f64, Option<f64>);

/// The evaluations of a `heldout.csv` on the kept timeline, in order.
fn kept_evaluations(rows: Vec<rulka_run::HeldOutRow>) -> Vec<Evaluation> {
    rulka_run::kept(rows).0.iter().map(|r| (r.frames, r.finish_rate, r.time_ratio_median)).collect()
}

/// The lowest median time ratio of `timeline` that is a number.
fn best_time_ratio(timeline: impl Iterator<Item = Evaluation>) -> Option<f64> {
    timeline.filter_map(|e| e.2).filter(|r| r.is_finite()).min_by(f64::total_cmp)
}

/// The frame count of the first evaluation of `timeline` that finished
/// every track.
fn first_all_finished(mut timeline: impl Iterator<Item = Evaluation>) -> Option<u64> {
    timeline.find(|e| e.1 >= 1.0).map(|e| e.0)
}

fn read_best_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The best evaluation a resumed run already kept (None when there is none
/// or `best.json` is unreadable: the next evaluation then replaces it).
fn read_best(path: &Path) -> Option<Best> {
    let v = read_best_json(path)?;
    let b = Best {
        finish_rate: v["finish_rate"].as_f64()?,
        time_ratio: v["time_ratio_median"].as_f64(),
    };
    b.is_candidate().then_some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures `summary.json` gives of a resumed run's held-out
    /// timeline, against a model over generated tables: the kept rows only
    /// (any start's `thrown_away_by` mark, in any position), the lowest
    /// finite ratio, the first evaluation that finished everything (rates
    /// of 1 drawn often, and ones just under).
    #[test]
    fn the_timelines_figures_are_the_kept_evaluations_best_ratio_and_first_full_finish() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config as Runner, RngSeed, TestRunner};
        let rate = prop_oneof![Just(1.0), Just(0.99), Just(0.5), Just(0.0), Just(f64::NAN)];
        let ratio = prop_oneof![
            Just(None),
            Just(Some(f64::NAN)),
            Just(Some(f64::INFINITY)),
            (1u32..40).prop_map(|r| Some(f64::from(r) / 20.0)),
        ];
        let thrown = prop_oneof![Just(None), (2u32..4).prop_map(Some)];
        let rows = prop::collection::vec((0u64..50, rate, ratio, thrown), 0..12);
        let mut runner = TestRunner::new(Runner {
            cases: 2000,
            rng_seed: RngSeed::Fixed(0x7469_6d65),
            failure_persistence: None,
            ..Runner::default()
        });
        runner
            .run(&rows, |rows| {
                let table: Vec<rulka_run::HeldOutRow> = rows
                    .iter()
                    .map(|&(frames, finish_rate, time_ratio_median, thrown_away_by)| {
                        rulka_run::HeldOutRow {
                            frames,
                            minutes: 0.0,
                            updates: 99 - frames,
                            episodes: 10,
                            finish_rate,
                            mean_progress: 0.0,
                            race_time_p10_s: None,
                            race_time_median_s: None,
                            race_time_p90_s: None,
                            time_ratio_median,
                            ratio_episodes: 0,
                            autopilot_race_time_median_s: None,
                            start: 1,
                            thrown_away_by,
                        }
                    })
                    .collect();
                let kept: Vec<_> = rows.iter().filter(|r| r.3.is_none()).collect();
                let earlier = kept_evaluations(table);
                prop_assert_eq!(earlier.len(), kept.len());
                for (e, k) in earlier.iter().zip(&kept) {
                    prop_assert_eq!(e.0, k.0);
                }
                let mut best: Option<f64> = None;
                for k in &kept {
                    if let Some(r) = k.2.filter(|r| r.is_finite()) {
                        best = Some(best.map_or(r, |b| b.min(r)));
                    }
                }
                prop_assert_eq!(best_time_ratio(earlier.iter().copied()), best);
                let first = kept.iter().find(|k| k.1 == 1.0).map(|k| k.0);
                prop_assert_eq!(first_all_finished(earlier.iter().copied()), first);
                Ok(())
            })
            .unwrap();
    }

    fn summary(finish_rate: f64, ratio: Option<f64>) -> EvalSummary {
        EvalSummary {
            episodes: 100,
            finish_rate,
            mean_progress: 1.0,
            race_time_s: None,
            autopilot_finish_rate: 1.0,
            autopilot_race_time_s: None,
            time_ratio: None,
            time_ratio_median: ratio,
            ratio_episodes: 100,
        }
    }

    #[test]
    fn best_is_most_finished_then_fastest() {
        let b = Best { finish_rate: 0.97, time_ratio: Some(0.90) };
        let beats = |f: f64, r: Option<f64>| Best::of(&summary(f, r)).beats(&b);
        assert!(beats(0.98, Some(1.6)), "more tracks finished wins");
        assert!(!beats(0.96, Some(0.5)), "fewer finished loses");
        assert!(beats(0.97, Some(0.89)));
        assert!(!beats(0.97, Some(0.90)), "a tie keeps the older one");
        assert!(!beats(0.97, None));
        let none = Best { finish_rate: 0.0, time_ratio: None };
        assert!(Best::of(&summary(0.0, Some(3.0))).beats(&none));
    }

    /// The cadence against a model, over generated cadences and update
    /// counts with the edges drawn often (the update that reaches the
    /// cadence, one before, none started yet, an update count at the end of
    /// the type): due once `every` updates have passed since the last start;
    /// and one evaluation at a time.
    #[test]
    fn an_evaluation_is_due_every_n_updates_after_the_last_one_started_and_runs_alone() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config as Runner, RngSeed, TestRunner};
        let mut runner = TestRunner::new(Runner {
            cases: 5000,
            rng_seed: RngSeed::Fixed(0x6475_6521),
            failure_persistence: None,
            ..Runner::default()
        });
        let case = (
            prop_oneof![Just(None), (0u64..50).prop_map(Some), Just(Some(u64::MAX - 3))],
            0u64..8,
            prop_oneof![-2i64..=2, Just(40)],
        );
        runner
            .run(&case, |(last, every, off)| {
                // Updates around the moment the cadence is reached.
                let reach = i128::from(last.unwrap_or(0)) + i128::from(every);
                let Ok(updates) = u64::try_from(reach + i128::from(off)) else { return Ok(()) };
                let want = i128::from(updates) >= reach;
                prop_assert_eq!(
                    evaluation_due(last, updates, every),
                    want,
                    "{:?}",
                    (last, updates, every)
                );
                Ok(())
            })
            .unwrap();
        // The final weights are evaluated once: again only when the last
        // evaluation was of earlier weights, or there was none.
        for (last, updates, again) in [
            (Some(6), 6, false),
            (Some(6), 7, true),
            (Some(0), 0, false),
            (None, 0, true),
            (None, 5, true),
        ] {
            assert_eq!(
                final_evaluation_needed(last, updates),
                again,
                "last {last:?}, at {updates}"
            );
        }
        for (due, busy, start) in
            [(true, false, true), (true, true, false), (false, false, false), (false, true, false)]
        {
            assert_eq!(starts_now(due, busy), start, "due {due}, one in flight {busy}");
        }
    }

    /// The kept best over generated sequences of evaluations, resumed at
    /// random points, against a model: among the evaluations whose finish
    /// rate is a number, the first of those that finished the most tracks
    /// and, among them, had the lowest ratio that is a number (none last).
    #[test]
    fn the_kept_best_is_the_first_of_the_most_finished_then_fastest() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config as Runner, RngSeed, TestRunner};
        let rate = prop_oneof![(0u32..=4).prop_map(|k| f64::from(k) / 4.0), Just(f64::NAN)];
        // Every value that is not a number of seconds' ratio: NaN, both
        // infinities; and the finite edges 0 and ties (quarters).
        let ratio = prop_oneof![
            Just(None),
            Just(Some(f64::NAN)),
            Just(Some(f64::INFINITY)),
            Just(Some(f64::NEG_INFINITY)),
            Just(Some(0.0)),
            (1u32..6).prop_map(|k| Some(f64::from(k) / 4.0)),
        ];
        let evals = prop::collection::vec((rate, ratio, any::<bool>()), 1..12);
        let mut runner = TestRunner::new(Runner {
            cases: 400,
            rng_seed: RngSeed::Fixed(0x6865_6c64),
            failure_persistence: None,
            ..Runner::default()
        });
        runner
            .run(&evals, |evals| {
                let dir = tempfile::tempdir().unwrap();
                let cfg = Config::default();
                let mut k = BestKept::open(dir.path());
                for (i, &(f, r, resume)) in evals.iter().enumerate() {
                    if resume {
                        k = BestKept::open(dir.path());
                    }
                    let at = At { frames: i as u64, updates: i as u64, minutes: 0.0 };
                    k.offer(&cfg, at, &summary(f, r), format!("{i}").as_bytes()).unwrap();
                }
                // The model.
                let time = |r: Option<f64>| r.filter(|x| x.is_finite());
                let mut want: Option<usize> = None;
                for (i, &(f, r, _)) in evals.iter().enumerate() {
                    if f.is_nan() {
                        continue;
                    }
                    let better = match want {
                        None => true,
                        Some(w) => {
                            let (wf, wr) = (evals[w].0, time(evals[w].1));
                            f > wf
                                || (f == wf
                                    && time(r).is_some()
                                    && wr.is_none_or(|x| time(r) < Some(x)))
                        }
                    };
                    if better {
                        want = Some(i);
                    }
                }
                let got = std::fs::read(dir.path().join("best.onnx")).ok();
                prop_assert_eq!(got, want.map(|w| format!("{w}").into_bytes()), "{:?}", evals);
                Ok(())
            })
            .unwrap();
    }

    /// The figures of a resumed run's table by hand: start 1 finished every
    /// track at frame 100 (ratio 0.9) and reached 0.5 at 200, thrown away by
    /// start 2, which evaluated 0.8 at 150: the best is 0.8 (not the thrown
    /// 0.5, not this start's alone), the first full finish start 1's.
    #[test]
    fn the_timelines_figures_are_the_tables_kept_rows_of_every_start() {
        let dir = tempfile::tempdir().unwrap();
        let csv = "frames,minutes,updates,episodes,finish_rate,mean_progress,race_time_p10_s,race_time_median_s,race_time_p90_s,time_ratio_median,ratio_episodes,autopilot_race_time_median_s,start,thrown_away_by\n\
100,0.1,1,10,1.0000,1.0000,,,,0.9000,10,10.0000,1,\n\
200,0.2,2,10,1.0000,1.0000,,,,0.5000,10,10.0000,1,2\n\
150,0.3,2,10,0.5000,0.8000,,,,0.8000,5,10.0000,2,\n";
        std::fs::write(dir.path().join("heldout.csv"), csv).unwrap();
        assert_eq!(timeline_figures(dir.path()), (Some(0.8), Some(100)));
    }

    #[test]
    fn an_unreadable_best_is_moved_aside_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("best.json"), b"{\"finish_rate\": 0.9, \"time_r").unwrap();
        std::fs::write(dir.path().join("best.onnx"), b"the old best").unwrap();
        let mut k = BestKept::open(dir.path());
        let at = At { frames: 1, updates: 1, minutes: 0.0 };
        assert!(k.offer(&Config::default(), at, &summary(0.1, None), b"new").unwrap());
        assert_eq!(std::fs::read(dir.path().join("best.onnx.damaged")).unwrap(), b"the old best");
        assert!(dir.path().join("best.json.damaged").is_file());
        assert_eq!(std::fs::read(dir.path().join("best.onnx")).unwrap(), b"new");
    }

    /// What `best.onnx` and `best.json` hold through a run's evaluations
    /// and a resume: the first; a better one; never a worse one (fewer
    /// finished, or as many and slower, or a tie); across a resume the kept
    /// one still decides. A rule that kept every evaluation, or the
    /// fastest whatever it finished, holds another model at the end.
    #[test]
    fn best_onnx_holds_the_best_evaluation_across_a_run_and_its_resume() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let at = |updates: u64| At { frames: updates * 1000, updates, minutes: 0.0 };
        let kept = |d: &Path| -> (Vec<u8>, u64) {
            let j = read_best_json(&d.join("best.json")).unwrap();
            (std::fs::read(d.join("best.onnx")).unwrap(), j["updates"].as_u64().unwrap())
        };
        let mut k = BestKept::open(dir.path());
        // (updates, finished, ratio, kept?)
        for (u, f, r, want) in [
            (20, 0.50, Some(1.30), true),   // the first evaluation
            (40, 0.90, Some(1.10), true),   // more finished
            (60, 1.00, Some(2.00), true),   // more finished, slower: still better
            (80, 0.95, Some(0.80), false),  // faster, fewer finished
            (100, 1.00, Some(2.00), false), // a tie keeps the older one
            (120, 1.00, Some(1.50), true),  // as many, faster
        ] {
            let model = format!("model of update {u}").into_bytes();
            assert_eq!(k.offer(&cfg, at(u), &summary(f, r), &model).unwrap(), want, "update {u}");
        }
        assert_eq!(kept(dir.path()), (b"model of update 120".to_vec(), 120));
        // Resumed: the kept evaluation is read back and still decides.
        let mut k = BestKept::open(dir.path());
        assert!(!k.offer(&cfg, at(140), &summary(1.0, Some(1.6)), b"slower").unwrap());
        assert_eq!(kept(dir.path()), (b"model of update 120".to_vec(), 120));
        assert!(k.offer(&cfg, at(160), &summary(1.0, Some(1.4)), b"faster").unwrap());
        assert_eq!(kept(dir.path()), (b"faster".to_vec(), 160));
    }

    /// The stop, with real evaluations on their thread: an evaluation
    /// still running when the run stops is waited for and recorded, then
    /// the final weights are evaluated, unless the running one was of them
    /// (then it is their row, once). `finish` is called right after the
    /// evaluation starts, long before its thread (an ONNX Runtime session,
    /// then two tracks driven to their cut-off) can be done.
    #[test]
    fn an_evaluation_running_at_the_stop_is_recorded_and_the_final_weights_once() {
        let cfg = Config::from_yaml_str(
            "nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
             environment: {cutoff_rollout_if_race_not_finished_within_duration_ms: 20000, \
               sim: {track: easy, track_seeds: [0, 1]}}\n\
             training: {eval_tracks: [5, 6], eval_every_n_updates: 3}\n",
            "t",
        )
        .unwrap();
        let at = |updates: u64| At { frames: updates * 100, updates, minutes: 0.0 };
        // (the updates at the stop, the rows heldout.csv must hold)
        for (stop, want) in [(7u64, vec![3u64, 7]), (3, vec![3])] {
            let dir = tempfile::tempdir().unwrap();
            let mut tb = EventWriter::create(&dir.path().join("tb")).unwrap();
            let mut h = HeldOut::new(&cfg, dir.path(), None, 0).unwrap().unwrap();
            let mut learner = Learner::new(&cfg, tch::Device::Cpu, 1);
            learner.updates = 2;
            h.tick(&learner, at(2), &mut tb).unwrap();
            assert!(h.in_flight.is_none(), "not due before 3 updates");
            learner.updates = 3;
            h.tick(&learner, at(3), &mut tb).unwrap();
            assert!(h.in_flight.is_some(), "due at 3");
            learner.updates = stop;
            h.finish(&learner, at(stop), &mut tb).unwrap();
            assert!(h.in_flight.is_none(), "stop {stop}: nothing left running");
            let rows: Vec<u64> =
                rulka_run::read_heldout(dir.path()).unwrap().iter().map(|r| r.updates).collect();
            assert_eq!(rows, want, "stop at {stop} updates");
            // summary.json's `final` is the last evaluation: the final weights'.
            let s = h.summary_json();
            assert_eq!(
                (&s["final"]["updates"], &s["evaluations"]),
                (&serde_json::json!(stop), &serde_json::json!(want.len()))
            );
        }
    }
}
