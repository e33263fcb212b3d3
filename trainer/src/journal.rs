//! The journal stage: everything the trainer records, behind one
//! [`Recorder`] interface — `trajectories.csv`, TensorBoard scalars, best
//! runs as input files, `--save-trajectories` lines, held-out evaluations.
//! A new output is one new recorder in [`Journal::open`].
//!
//! TensorBoard is the journal's scalar log: every recorder may write
//! scalars to it; the [`Journal`] owns it and flushes it.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use rulka_collector::prompt_name;
use rulka_config::{Algorithm, Config, Schedule};
use rulka_learner::{scheduled_coefficient, EventWriter, Learner, SavedTrajectory, UpdateStats};

use crate::best_runs::BestRuns;
use crate::heldout::HeldOut;
use crate::prepare::Summary;
use rulka_run::{TrajectoriesCsv, TrajectoryRow};

/// A trajectory the transport handed over, recorded before any trajectory
/// of its poll is trained on (a trainer killed during an update has
/// recorded all it took).
#[derive(Debug)]
pub(crate) struct Arrived<'a> {
    pub cfg: &'a Config,
    pub summary: &'a Summary,
    /// Its data with the rewards it is trained on.
    pub saved: &'a SavedTrajectory,
    /// The learner's frames once it was counted, and its updates.
    pub frames: u64,
    pub updates: u64,
    /// Minutes since this trainer started.
    pub minutes: f64,
    /// Delivered before: counted, never trained on twice.
    pub duplicate: bool,
    /// It goes to the learner (not a duplicate, not a greedy run).
    pub trained: bool,
    /// The run's start that received it (`starts.json`).
    pub start: u32,
}

/// An update the learner made (after its weights were published).
#[derive(Debug)]
pub(crate) struct Updated<'a> {
    pub cfg: &'a Config,
    pub learner: &'a Learner,
    pub stats: &'a UpdateStats,
    /// Environment steps the update trained on.
    pub steps: usize,
    /// The mean policy lag of the trajectories in the progress window.
    pub policy_lag: f64,
    pub minutes: f64,
}

/// The trainer stopped (the last checkpoint written).
#[derive(Debug)]
pub(crate) struct Stopped<'a> {
    pub learner: &'a Learner,
    pub minutes: f64,
    /// Stopped by a signal: no long work at the stop.
    pub interrupted: bool,
}

/// One output of the trainer. Every method has a default that records
/// nothing, so a recorder implements only what it records.
pub(crate) trait Recorder {
    /// A trajectory arrived.
    fn trajectory(&mut self, _a: &Arrived<'_>, _tb: &mut EventWriter) -> anyhow::Result<()> {
        Ok(())
    }
    /// The learner updated.
    fn update(&mut self, _u: &Updated<'_>, _tb: &mut EventWriter) -> anyhow::Result<()> {
        Ok(())
    }
    /// The trainer stopped.
    fn stop(&mut self, _s: &Stopped<'_>, _tb: &mut EventWriter) -> anyhow::Result<()> {
        Ok(())
    }
    /// Its part of the progress line (` | …`), if any.
    fn line(&self) -> String {
        String::new()
    }
    /// Its key and value in `summary.json`, if any.
    fn summary(&self) -> Option<(&'static str, serde_json::Value)> {
        None
    }
    /// The race figures of the rows it wrote, for the table's writer.
    fn races(&self) -> Option<rulka_run::RunFigures> {
        None
    }
}

/// The trainer's recorders and its TensorBoard log.
pub(crate) struct Journal {
    tb: EventWriter,
    recorders: Vec<Box<dyn Recorder>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("recorders", &self.recorders.len()).finish()
    }
}

impl Journal {
    /// The recorders of a run in `run_dir`: `trajectories.csv`, TensorBoard
    /// scalars, best runs, held-out evaluation (when `training.eval_tracks`
    /// is set; ONNX Runtime from `ort_lib`), `trajectories.jsonl` (when
    /// `save_trajectories`).
    pub fn open(
        cfg: &Config,
        run_dir: &Path,
        save_trajectories: bool,
        ort_lib: Option<&Path>,
        start: u32,
    ) -> anyhow::Result<Self> {
        let mut recorders: Vec<Box<dyn Recorder>> = vec![
            Box::new(TrajectoriesCsv::open(run_dir)?),
            Box::new(Scalars),
            Box::new(BestRuns::open(cfg, run_dir)),
        ];
        if let Some(h) = HeldOut::new(cfg, run_dir, ort_lib, start)? {
            recorders.push(Box::new(h));
        }
        if save_trajectories {
            recorders.push(Box::new(Jsonl::open(run_dir)?));
        }
        Ok(Self { tb: EventWriter::create(&crate::RunDir::new(run_dir).tensorboard())?, recorders })
    }

    pub fn trajectory(&mut self, a: &Arrived<'_>) -> anyhow::Result<()> {
        self.recorders.iter_mut().try_for_each(|r| r.trajectory(a, &mut self.tb))
    }

    pub fn update(&mut self, u: &Updated<'_>) -> anyhow::Result<()> {
        self.recorders.iter_mut().try_for_each(|r| r.update(u, &mut self.tb))
    }

    /// Records the stop (the caller flushes once it has written its own
    /// last scalars).
    pub fn stop(&mut self, s: &Stopped<'_>) -> anyhow::Result<()> {
        self.recorders.iter_mut().try_for_each(|r| r.stop(s, &mut self.tb))
    }

    /// The scalar log, for the trainer's own periodic scalars.
    pub fn scalars(&mut self) -> &mut EventWriter {
        &mut self.tb
    }

    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.tb.flush()
    }

    /// The recorders' parts of the progress line.
    pub fn line(&self) -> String {
        self.recorders.iter().map(|r| r.line()).collect()
    }

    /// This start's race figures: those of the rows `trajectories.csv`'s
    /// writer appended.
    pub fn races(&self) -> rulka_run::RunFigures {
        self.recorders.iter().find_map(|r| r.races()).unwrap_or_default()
    }

    /// The recorders' entries of `summary.json`.
    pub fn summaries(&self) -> serde_json::Map<String, serde_json::Value> {
        self.recorders.iter().filter_map(|r| r.summary()).map(|(k, v)| (k.to_string(), v)).collect()
    }
}

impl Arrived<'_> {
    /// Its row of `trajectories.csv`, as written (and as the trainer's own
    /// race figures count it).
    pub fn row(&self) -> TrajectoryRow {
        let (a, s) = (self, self.summary);
        TrajectoryRow {
            frames: a.frames,
            minutes: a.minutes,
            updates: a.updates,
            collector: s.collector,
            trajectory: s.trajectory,
            seed: s.seed,
            eval: s.eval,
            steps: s.steps,
            ret: s.ret,
            progress_m: s.progress_m,
            progress_frac: s.progress_frac,
            finished: s.finished,
            race_time_s: s.race_time_s,
            start: a.start,
            thrown_away_by: None,
        }
    }
}

impl Recorder for TrajectoriesCsv {
    fn trajectory(&mut self, a: &Arrived<'_>, _tb: &mut EventWriter) -> anyhow::Result<()> {
        self.append(&a.row())
    }
    fn races(&self) -> Option<rulka_run::RunFigures> {
        Some(self.figures())
    }
}

/// TensorBoard scalars of races (per trajectory) and of updates, under the
/// original's names.
#[derive(Debug)]
struct Scalars;

impl Recorder for Scalars {
    fn trajectory(&mut self, a: &Arrived<'_>, tb: &mut EventWriter) -> anyhow::Result<()> {
        let s = a.summary;
        let kind = if s.eval { "eval" } else { "explo" };
        let step = a.frames as i64;
        let suffix = if s.eval { "trained_" } else { "" };
        let map = prompt_name(a.cfg, s.seed);
        tb.scalar(
            &format!("{kind}_race_finished_{suffix}{map}"),
            step,
            f64::from(u8::from(s.finished)),
        )?;
        if let Some(rt) = s.race_time_s {
            tb.scalar(&format!("{kind}_race_time_{suffix}{map}"), step, rt)?;
        }
        tb.scalar(&format!("Race/{kind}_progress"), step, s.progress_frac)?;
        tb.scalar(&format!("Race/{kind}_return"), step, s.ret)?;
        Ok(())
    }

    fn update(&mut self, u: &Updated<'_>, tb: &mut EventWriter) -> anyhow::Result<()> {
        update_scalars(tb, u.cfg, u.learner, u.stats, u.steps)?;
        tb.scalar("Training/policy_lag", u.learner.frames as i64, u.policy_lag)?;
        Ok(())
    }
}

fn update_scalars(
    tb: &mut EventWriter,
    cfg: &Config,
    learner: &Learner,
    s: &UpdateStats,
    rollout_steps: usize,
) -> anyhow::Result<()> {
    let step = learner.frames as i64;
    let (speed, frames) = (cfg.training.global_schedule_speed, learner.frames);
    let at = |fixed: f64, s: &Option<Schedule>| scheduled_coefficient(fixed, s, speed, frames);
    tb.scalar("Training/learning_rate", step, s.lr)?;
    match cfg.training.algorithm {
        Algorithm::Ppo => {
            let p = &cfg.ppo;
            tb.scalar("Training/ppo_loss", step, s.loss)?;
            tb.scalar("Training/ppo_approx_kl", step, s.approx_kl)?;
            tb.scalar("Training/ppo_clipfrac", step, s.clipfrac)?;
            tb.scalar("Training/ppo_vf_clipfrac", step, s.vf_clipfrac)?;
            tb.scalar("PPO/gamma", step, at(p.gamma, &p.gamma_schedule))?;
            tb.scalar("PPO/gae_lambda", step, at(p.gae_lambda, &p.gae_lambda_schedule))?;
            tb.scalar("PPO/ent_coef", step, at(p.ent_coef, &p.ent_coef_schedule))?;
            tb.scalar("PPO/vf_coef", step, at(p.vf_coef, &p.vf_coef_schedule))?;
            tb.scalar("PPO/rollout_size", step, rollout_steps as f64)?;
            tb.scalar("Training/sampler_logp_delta", step, s.sampler_logp_delta)?;
            tb.scalar("PPO/epochs", step, s.epochs as f64)?;
            if p.normalize_returns {
                tb.scalar("PPO/reward_scale", step, s.reward_scale)?;
            }
            if p.popart_beta.is_some() {
                tb.scalar("PPO/popart_mean", step, s.popart_mean)?;
                tb.scalar("PPO/popart_std", step, s.popart_std)?;
            }
            if p.drac_coef > 0.0 {
                tb.scalar("PPO/drac", step, s.drac)?;
            }
            if p.sil_coef > 0.0 {
                tb.scalar("PPO/sil_steps", step, s.sil_steps as f64)?;
                tb.scalar("PPO/sil_advantage", step, s.sil_advantage)?;
                tb.scalar("PPO/sil_positive", step, s.sil_positive)?;
                tb.scalar("PPO/sil_best_return", step, s.sil_best_return)?;
            }
            if s.aux_steps > 0 {
                tb.scalar("PPO/aux_value_loss", step, s.aux_value_loss)?;
                tb.scalar("PPO/aux_kl", step, s.aux_kl)?;
                tb.scalar("PPO/aux_steps", step, s.aux_steps as f64)?;
            }
        }
        Algorithm::Grpo => {
            let g = &cfg.grpo;
            tb.scalar("Training/grpo_loss", step, s.loss)?;
            tb.scalar("GRPO/ent_coef", step, at(g.ent_coef, &g.ent_coef_schedule))?;
            tb.scalar("GRPO/max_grad_norm", step, rulka_learner::max_grad_norm_at(cfg, frames))?;
            tb.scalar("GRPO/ref_kl_coef", step, at(g.ref_kl_coef, &g.ref_kl_coef_schedule))?;
            tb.scalar("GRPO/group_size", step, f64::from(g.group_size))?;
            tb.scalar("Training/grpo_approx_kl", step, s.approx_kl)?;
            tb.scalar("Training/grpo_clipfrac", step, s.clipfrac)?;
            tb.scalar("Training/frac_zero_std", step, s.frac_zero_std)?;
        }
        Algorithm::Dpo => {
            let d = &cfg.dpo;
            tb.scalar("Training/dpo_loss", step, s.loss)?;
            tb.scalar("DPO/beta", step, s.beta)?;
            tb.scalar("DPO/vf_coef", step, at(d.vf_coef, &d.vf_coef_schedule))?;
            tb.scalar("DPO/max_grad_norm", step, rulka_learner::max_grad_norm_at(cfg, frames))?;
        }
    }
    tb.scalar("Training/entropy", step, s.entropy)?;
    tb.scalar("Training/grad_norm", step, s.grad_norm)?;
    tb.scalar("Training/kl_ref", step, s.kl_ref)?;
    tb.scalar("Training/adv_var", step, s.adv_var)?;
    tb.scalar("Training/skipped_steps", step, s.skipped as f64)?;
    Ok(())
}

impl Recorder for BestRuns {
    fn trajectory(&mut self, a: &Arrived<'_>, _tb: &mut EventWriter) -> anyhow::Result<()> {
        let s = a.summary;
        let (Some(rt), false) = (s.race_time_s, a.duplicate) else { return Ok(()) };
        let what = format!(
            "{} run, frame {}, start {} of the run",
            if s.eval { "greedy" } else { "exploration" },
            a.frames,
            a.start
        );
        self.offer(&prompt_name(a.cfg, s.seed), rt, &a.saved.actions, &what)?;
        Ok(())
    }
}

impl Recorder for HeldOut {
    fn update(&mut self, u: &Updated<'_>, tb: &mut EventWriter) -> anyhow::Result<()> {
        let at = crate::heldout::At {
            frames: u.learner.frames,
            updates: u.learner.updates,
            minutes: u.minutes,
        };
        self.tick(u.learner, at, tb)
    }

    fn stop(&mut self, s: &Stopped<'_>, tb: &mut EventWriter) -> anyhow::Result<()> {
        if s.interrupted {
            tracing::info!("[rulka train] interrupted: the final held-out evaluation is skipped");
            return Ok(());
        }
        let at = crate::heldout::At {
            frames: s.learner.frames,
            updates: s.learner.updates,
            minutes: s.minutes,
        };
        self.finish(s.learner, at, tb)
    }

    fn line(&self) -> String {
        HeldOut::line(self)
    }

    fn summary(&self) -> Option<(&'static str, serde_json::Value)> {
        Some(("heldout", self.summary_json()))
    }
}

/// `--save-trajectories`: every trained trajectory as a line of
/// `trajectories.jsonl` (input for DPO's offline mode).
#[derive(Debug)]
struct Jsonl(std::fs::File);

impl Jsonl {
    fn open(run_dir: &Path) -> anyhow::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(run_dir.join("trajectories.jsonl"))
            .context("opening trajectories.jsonl")?;
        Ok(Self(f))
    }
}

impl Recorder for Jsonl {
    fn trajectory(&mut self, a: &Arrived<'_>, _tb: &mut EventWriter) -> anyhow::Result<()> {
        if a.trained {
            writeln!(self.0, "{}", a.saved.to_json_line())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finished run is offered as a best run — exploration and greedy
    /// alike (the original keeps its evaluation runs' bests too) — and a
    /// duplicate is not: three arrivals on one map, each faster than the one
    /// before (a greedy run, an exploration run, then a redelivered copy);
    /// each best is a file of its own (the folder keeps every improvement).
    #[test]
    fn greedy_and_exploration_finishes_are_kept_as_best_runs_and_duplicates_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let mut best = BestRuns::open(&cfg, dir.path());
        let mut tb = EventWriter::create(&dir.path().join("tb")).unwrap();
        let saved = SavedTrajectory { actions: vec![0, 1, 0], ..SavedTrajectory::default() };
        let arrive =
            |best: &mut BestRuns, tb: &mut EventWriter, eval: bool, t: f64, duplicate: bool| {
                let summary = Summary {
                    collector: 0,
                    trajectory: 1,
                    seed: 3,
                    eval,
                    steps: 3,
                    ret: 0.0,
                    progress_m: 1.0,
                    progress_frac: 1.0,
                    finished: true,
                    race_time_s: Some(t),
                    lag: 0.0,
                };
                let a = Arrived {
                    cfg: &cfg,
                    summary: &summary,
                    saved: &saved,
                    frames: 10,
                    updates: 0,
                    minutes: 0.0,
                    duplicate,
                    trained: !duplicate && !eval,
                    start: 1,
                };
                best.trajectory(&a, tb).unwrap();
            };
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(dir.path().join("best_runs"))
                .map(|d| {
                    d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        };
        arrive(&mut best, &mut tb, true, 12.0, false);
        assert_eq!(names(), ["sim3_12.00.inputs"], "a greedy finish is kept");
        arrive(&mut best, &mut tb, false, 11.0, false);
        assert_eq!(
            names(),
            ["sim3_11.00.inputs", "sim3_12.00.inputs"],
            "an exploration finish beats it"
        );
        arrive(&mut best, &mut tb, false, 10.0, true);
        assert_eq!(
            names(),
            ["sim3_11.00.inputs", "sim3_12.00.inputs"],
            "a duplicate is not offered"
        );
    }

    /// The scalars one update of `algo` writes under the config `yaml` with
    /// the learner at `frames`, by tag (a tag not written panics, named).
    fn logged(yaml: &str, algo: &str, frames: u64) -> impl Fn(&str) -> f64 {
        let mut cfg = Config::from_yaml_str(yaml, "t").unwrap();
        cfg.training.algorithm = match algo {
            "ppo" => Algorithm::Ppo,
            "grpo" => Algorithm::Grpo,
            _ => Algorithm::Dpo,
        };
        let dir = tempfile::tempdir().unwrap();
        let mut tb = EventWriter::create(dir.path()).unwrap();
        let mut learner = Learner::new(&cfg, tch::Device::Cpu, 1);
        learner.frames = frames;
        update_scalars(&mut tb, &cfg, &learner, &UpdateStats::default(), 256).unwrap();
        tb.flush().unwrap();
        let values: Vec<(String, f32)> = rulka_learner::read_events(tb.path())
            .unwrap()
            .iter()
            .flat_map(|e| e.summary.iter().flat_map(|s| &s.value))
            .filter_map(|v| Some((v.tag.clone(), v.simple_value?)))
            .collect();
        let algo = algo.to_string();
        move |tag| {
            let v =
                values.iter().find(|(t, _)| t == tag).unwrap_or_else(|| panic!("{algo}: no {tag}"));
            f64::from(v.1)
        }
    }

    /// The scheduled coefficients an update logs, against a model, for
    /// every algorithm: each schedule of two knots (its knots' frames times
    /// global_schedule_speed 2, linear between), read at the learner's
    /// frames (1500: the schedule's 750); the values in the event file are
    /// float32 (within 1e-6 of values under 1). Every section's schedules
    /// differ from every other's, so a coefficient read from another
    /// algorithm's section shows.
    #[test]
    fn the_scheduled_coefficients_logged_are_the_schedules_at_the_speed() {
        let knots = |a: f64, b: f64| format!("[[0, {a}], [1000, {b}]]");
        let yaml = format!(
            "training: {{global_schedule_speed: 2.0}}\n\
             ppo: {{gamma_schedule: {}, gae_lambda_schedule: {}, ent_coef_schedule: {}, vf_coef_schedule: {}}}\n\
             grpo: {{ent_coef_schedule: {}, max_grad_norm_schedule: {}, ref_kl_coef_schedule: {}}}\n\
             dpo: {{vf_coef_schedule: {}, max_grad_norm_schedule: {}}}\n",
            knots(0.9, 0.5),
            knots(0.8, 0.4),
            knots(0.05, 0.01),
            knots(0.9, 0.1),
            knots(0.07, 0.03),
            knots(0.5, 0.1),
            knots(0.3, 0.1),
            knots(0.7, 0.3),
            knots(0.6, 0.2)
        );
        // At frame 1500 with speed 2: the schedule's 750, 3/4 of the way.
        let at = |a: f64, b: f64| a + 0.75 * (b - a);
        let want: [(&str, &[(&str, f64)]); 3] = [
            (
                "ppo",
                &[
                    ("PPO/gamma", at(0.9, 0.5)),
                    ("PPO/gae_lambda", at(0.8, 0.4)),
                    ("PPO/ent_coef", at(0.05, 0.01)),
                    ("PPO/vf_coef", at(0.9, 0.1)),
                ],
            ),
            (
                "grpo",
                &[
                    ("GRPO/ent_coef", at(0.07, 0.03)),
                    ("GRPO/max_grad_norm", at(0.5, 0.1)),
                    ("GRPO/ref_kl_coef", at(0.3, 0.1)),
                ],
            ),
            ("dpo", &[("DPO/vf_coef", at(0.7, 0.3)), ("DPO/max_grad_norm", at(0.6, 0.2))]),
        ];
        for (algo, tags) in want {
            let got = logged(&yaml, algo, 1500);
            for (tag, v) in tags {
                let g = got(tag);
                assert!((g - v).abs() <= 1e-6, "{algo}: {tag} {g}, the schedule's {v}");
            }
        }
    }

    /// Without schedules, each coefficient logged is its own section's fixed
    /// value (every section's values distinct, so one read from another
    /// section shows).
    #[test]
    fn the_fixed_coefficients_logged_are_each_sections_own() {
        let yaml = "ppo: {gamma: 0.97, gae_lambda: 0.93, ent_coef: 0.011, vf_coef: 0.31}\n\
                    grpo: {ent_coef: 0.023, max_grad_norm: 0.47, ref_kl_coef: 0.19}\n\
                    dpo: {vf_coef: 0.62, max_grad_norm: 0.83}\n";
        let want: [(&str, &[(&str, f64)]); 3] = [
            (
                "ppo",
                &[
                    ("PPO/gamma", 0.97),
                    ("PPO/gae_lambda", 0.93),
                    ("PPO/ent_coef", 0.011),
                    ("PPO/vf_coef", 0.31),
                ],
            ),
            (
                "grpo",
                &[
                    ("GRPO/ent_coef", 0.023),
                    ("GRPO/max_grad_norm", 0.47),
                    ("GRPO/ref_kl_coef", 0.19),
                ],
            ),
            ("dpo", &[("DPO/vf_coef", 0.62), ("DPO/max_grad_norm", 0.83)]),
        ];
        for (algo, tags) in want {
            let got = logged(yaml, algo, 0);
            for (tag, v) in tags {
                // float32 of values under 1: within 1e-7.
                let g = got(tag);
                assert!((g - v).abs() <= 1e-7, "{algo}: {tag} {g}, its section's {v}");
            }
        }
    }

    /// A lever's key, how it is turned on, and its own scalars.
    type Lever = (&'static str, fn(&mut Config), &'static [&'static str]);

    /// The tags one PPO update whose PPG phase took `aux_steps` steps
    /// writes under `cfg`.
    fn tags_of_update(cfg: &Config, aux_steps: u64) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let mut tb = EventWriter::create(dir.path()).unwrap();
        let learner = Learner::new(cfg, tch::Device::Cpu, 1);
        let stats = UpdateStats { aux_steps, ..UpdateStats::default() };
        update_scalars(&mut tb, cfg, &learner, &stats, 256).unwrap();
        tb.flush().unwrap();
        let events = rulka_learner::read_events(tb.path()).unwrap();
        events
            .iter()
            .flat_map(|e| e.summary.iter().flat_map(|s| &s.value))
            .map(|v| v.tag.clone())
            .collect()
    }

    /// A PPO lever's scalars are written when it is on and only then: with
    /// the original's settings (every lever off) none of them, each lever
    /// turned on alone adds its own and no other's; PPG's are written for an
    /// update whose phase ran, and only for it.
    #[test]
    fn a_levers_scalars_are_written_when_it_is_on_and_only_then() {
        let levers: [Lever; 4] = [
            ("normalize_returns", |c| c.ppo.normalize_returns = true, &["PPO/reward_scale"]),
            (
                "popart_beta",
                |c| c.ppo.popart_beta = Some(0.1),
                &["PPO/popart_mean", "PPO/popart_std"],
            ),
            ("drac_coef", |c| c.ppo.drac_coef = 0.1, &["PPO/drac"]),
            (
                "sil_coef",
                |c| c.ppo.sil_coef = 0.1,
                &["PPO/sil_steps", "PPO/sil_advantage", "PPO/sil_positive", "PPO/sil_best_return"],
            ),
        ];
        let mut off = Config::default();
        off.training.algorithm = Algorithm::Ppo;
        let tags = |c: &Config| tags_of_update(c, 0);
        let plain = tags(&off);
        assert!(plain.iter().any(|t| t == "PPO/gamma"), "{plain:?}");
        for (name, turn_on, own) in levers {
            let mut on = off.clone();
            turn_on(&mut on);
            let with = tags(&on);
            for (_, _, tags_of) in levers {
                for t in tags_of {
                    let want = tags_of == own;
                    assert!(!plain.iter().any(|p| p == t), "{t} written with every lever off");
                    assert_eq!(with.iter().any(|w| w == t), want, "{name} on: {t} in {with:?}");
                }
            }
        }
        let phase = tags_of_update(&off, 3);
        for t in ["PPO/aux_value_loss", "PPO/aux_kl", "PPO/aux_steps"] {
            assert!(!plain.iter().any(|p| p == t), "{t} written for an update without the phase");
            assert!(phase.iter().any(|p| p == t), "{t} not written for one with it: {phase:?}");
        }
    }
}
