//! The trainer: its stages in order, once per poll of the transport.
//!
//! ```text
//!  supervise ─▶ poll ─▶ intake ─▶ prepare ─▶ journal ─▶ pending ─▶ update ─▶ publish
//!  (collectors,  (Rollout-  (ids, dups,  (rewards   (every      (batches,  (learner)  (weights,
//!   broker)      Source)    gaps)        once)      output)     groups)               checkpoints)
//! ```
//!
//! Every trajectory of a poll passes intake, prepare and the journal before
//! any update runs, so a trainer killed during an update has recorded all
//! it took; updates then run in the order their batches were completed.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rulka_config::{Config, EnvKind, TransportKind};
use rulka_learner::{Learner, UpdateStats};
use rulka_shm::{Trajectory, TrajectoryId};

use crate::health::{collectors_part, health_scalars, Games, RemoteView};
use crate::intake::{Arrival, Intake};
use crate::journal::{Arrived, Journal, Stopped, Updated};
use crate::options::TrainOptions;
use crate::pending::Pending;
use crate::prepare::{is_eval, on_device, prepare};
use crate::progress::{shown, Progress};
use crate::summary::{Counters, Report};
use crate::supervisor::Supervisor;
use crate::threads::Governor;
use crate::transport::Endpoints;
use crate::update::Ready;
use crate::weights::{checkpoint, publish};

/// When the trainer last did each periodic job.
#[derive(Debug)]
struct Clocks {
    started: Instant,
    checkpoint: Instant,
    perf: (Instant, u64),
    supervise: Instant,
}

/// The running trainer: its stages and what they share.
pub(crate) struct Trainer<'a> {
    cfg: &'a Config,
    run_dir: &'a Path,
    learner: &'a mut Learner,
    endpoints: &'a mut Endpoints,
    max_frames: Option<u64>,
    max_minutes: Option<f64>,
    sup: Supervisor,
    intake: Intake,
    pending: Pending,
    journal: Journal,
    progress: Progress,
    counters: Counters,
    games: Games,
    remote: RemoteView,
    clocks: Clocks,
    start_frames: u64,
    last_stats: Option<UpdateStats>,
    /// The state the last checkpoint wrote (`state/state.N…`).
    last_checkpoint: Option<String>,
    /// This start of the run (`starts.json`).
    start: u32,
    /// The run's kept timeline before this start ([`Timeline`]).
    timeline: Timeline,
    kill_point: Option<KillPoint>,
    poll: Duration,
    /// `training.learner_threads: auto` on the CPU: threads from measured load.
    threads: Option<Governor>,
}

/// The trainer's test hook `RULKA_TEST_KILL_AT=received:N` or `recorded:N`:
/// at the N-th poll that brings trajectories it SIGKILLs itself, before
/// recording them (`received`) or once they are recorded and before they
/// are acknowledged (`recorded`) — the two moments a crash must cost no
/// trajectory and repeat none. Unset in any real run.
#[derive(Debug)]
struct KillPoint {
    recorded: bool,
    at: u64,
    polls: u64,
}

impl KillPoint {
    fn from_env() -> anyhow::Result<Option<Self>> {
        let Ok(v) = std::env::var("RULKA_TEST_KILL_AT") else { return Ok(None) };
        let parsed = v.split_once(':').and_then(|(stage, n)| {
            let recorded = match stage {
                "received" => false,
                "recorded" => true,
                _ => return None,
            };
            n.parse::<u64>().ok().filter(|&n| n > 0).map(|at| Self { recorded, at, polls: 0 })
        });
        match parsed {
            Some(k) => Ok(Some(k)),
            None => Err(crate::BadInput(format!(
                "RULKA_TEST_KILL_AT={v}: expected received:N or recorded:N (N ≥ 1)"
            ))
            .into()),
        }
    }

    /// At the point `recorded` says, once the poll count is reached.
    fn at(&mut self, recorded: bool) {
        if !recorded {
            self.polls += 1;
        }
        if recorded == self.recorded && self.polls >= self.at {
            tracing::info!("[rulka train] RULKA_TEST_KILL_AT: SIGKILL now");
            rulka_shm::send_signal(std::process::id(), rulka_shm::SIGKILL);
        }
    }
}

impl std::fmt::Debug for Trainer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer").field("run_dir", &self.run_dir).finish_non_exhaustive()
    }
}

impl<'a> Trainer<'a> {
    /// A trainer of `learner` on `endpoints`, its collectors started by `sup`.
    pub fn new(
        cfg: &'a Config,
        opts: &TrainOptions,
        run_dir: &'a Path,
        sup: Supervisor,
        learner: &'a mut Learner,
        endpoints: &'a mut Endpoints,
        start: u32,
    ) -> anyhow::Result<Self> {
        let journal =
            Journal::open(cfg, run_dir, opts.save_trajectories, opts.ort_lib.as_deref(), start)?;
        let timeline = Timeline::before(run_dir, start)?;
        // Over NATS, what earlier trainers of the run recorded may be
        // delivered again (recorded, not yet acknowledged at their end): not
        // recorded twice. Collector incarnations come from the server there,
        // so ids are unique across trainers; over shared memory each trainer
        // numbers its collectors' incarnations afresh and nothing is
        // delivered again, so earlier rows say nothing about new arrivals.
        let mut intake = Intake::default();
        if cfg.transport.kind == TransportKind::Nats {
            intake.recorded_before(
                crate::read_trajectories_so_far(run_dir)?
                    .iter()
                    .map(|r| TrajectoryId::unpack(r.collector, r.trajectory)),
            );
        }
        let pending = Pending::new(cfg, learner.network().var_store().device())?;
        let progress = Progress::new();
        let games = Games::new(run_dir, cfg);
        let threads = (cfg.training.learner_threads == rulka_config::LearnerThreads::Auto
            && !learner.network().var_store().device().is_cuda())
        .then(|| {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            Governor::new(cores, tch::get_num_threads().max(1) as usize)
        });
        let now = Instant::now();
        let t = Self {
            cfg,
            run_dir,
            max_frames: opts.max_frames.or(cfg.training.max_frames),
            max_minutes: opts.max_minutes.or(cfg.training.max_minutes),
            sup,
            intake,
            pending,
            journal,
            progress,
            counters: Counters { learner_cpu_s: Some(0.0), ..Counters::default() },
            games,
            remote: RemoteView::new(cfg.collectors.count),
            clocks: Clocks {
                started: now,
                checkpoint: now,
                perf: (now, learner.frames),
                supervise: now - Duration::from_secs(1),
            },
            start_frames: learner.frames,
            last_stats: None,
            last_checkpoint: None,
            start,
            timeline,
            kill_point: KillPoint::from_env()?,
            poll: Duration::from_millis(if cfg.transport.kind == TransportKind::Nats {
                20
            } else {
                2
            }),
            threads,
            learner,
            endpoints,
        };
        if let Some(b) = t.endpoints.broker.as_ref() {
            b.set_reporter(t.progress.sayer());
        }
        t.banner();
        Ok(t)
    }

    fn banner(&self) {
        let (cfg, sim) = (self.cfg, &self.cfg.environment.sim);
        let env = match cfg.environment.kind {
            EnvKind::Sim => match &sim.track_from {
                Some(p) => format!(
                    "simulator (the shape of {}, {} m wide)",
                    p.display(),
                    sim.track_width_m
                ),
                None => format!(
                    "simulator ({:?} tracks {})",
                    sim.track,
                    rulka_config::describe_seeds(&sim.track_seeds)
                ),
            },
            EnvKind::Tmi => "game (TMInterface)".to_string(),
        };
        tracing::info!(
            "[rulka train] {} on the {env} with {} local collector(s) over {}; run directory {}",
            format!("{:?}", cfg.training.algorithm).to_uppercase(),
            cfg.collectors.count,
            self.endpoints.description,
            self.run_dir.display()
        );
        tracing::info!(
            "[rulka train] checkpoints every {} s (training.checkpoint_every_s) and at the end: a crash costs the learning since the last one; {}",
            cfg.training.checkpoint_every_s.max(1),
            if self.endpoints.broker.is_some() {
                "trajectories not yet taken wait on the NATS server for --resume"
            } else {
                "the collectors stop with the trainer"
            }
        );
    }

    fn minutes(&self) -> f64 {
        self.clocks.started.elapsed().as_secs_f64() / 60.0
    }

    /// Trains until a signal or a limit, then stops cleanly; returns the
    /// summary to show the user.
    pub fn run(mut self) -> anyhow::Result<String> {
        let reason = loop {
            if let Some(reason) = self.stop_reason() {
                break reason;
            }
            self.supervise()?;
            let mut arrived = Vec::new();
            self.endpoints
                .rollouts
                .poll(&mut arrived, self.poll)
                .context("receiving trajectories")?;
            self.intake.abandoned(self.endpoints.rollouts.take_abandoned());
            if !arrived.is_empty() {
                if let Some(k) = self.kill_point.as_mut() {
                    k.at(false);
                }
            }
            for t in arrived {
                self.arrive(t)?;
            }
            if let Some(k) = self.kill_point.as_mut() {
                k.at(true);
            }
            // Recorded (trajectories.csv): now the transport may forget them.
            self.endpoints.rollouts.commit().context("acknowledging trajectories")?;
            self.counters.intake(&self.intake);
            self.train_ready()?;
            self.periodic()?;
        };
        self.stop(&reason)
    }

    fn stop_reason(&self) -> Option<String> {
        if rulka_shm::stop_requests() > 0 {
            return Some(match rulka_shm::last_stop_signal() {
                Some(sig) => format!("interrupted ({sig})"),
                None => "interrupted".into(),
            });
        }
        if self.max_frames.is_some_and(|m| self.learner.frames >= m) {
            return Some("max frames reached".into());
        }
        if self.max_minutes.is_some_and(|m| self.minutes() >= m) {
            return Some("time limit reached".into());
        }
        None
    }

    /// Restarts dead or hung collectors and a dead local NATS server, at
    /// most 5 times a second. A dead collector's partial trajectory is not
    /// dropped here: its ring may still hold committed chunks of
    /// trajectories it completed; the reassembler discards the partial when
    /// the restarted collector's first chunk (a new trajectory id) arrives.
    fn supervise(&mut self) -> anyhow::Result<()> {
        if self.clocks.supervise.elapsed() < Duration::from_millis(200) {
            return Ok(());
        }
        self.sup.tick(false)?;
        if let Some(b) = self.endpoints.broker.as_mut() {
            let say = self.progress.sayer();
            for m in b.tick() {
                say(&m);
            }
        }
        self.clocks.supervise = Instant::now();
        Ok(())
    }

    /// Intake, prepare and journal of one trajectory; a trained one joins
    /// the pending batch or group (which may seal an update).
    fn arrive(&mut self, t: Trajectory) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let id = TrajectoryId::unpack(t.collector, t.trajectory);
        let arrival = self.intake.arrive(id);
        self.remote.delivered(t.collector, id.incarnation);
        if arrival == Arrival::Recorded {
            if self.counters.already_recorded == 0 {
                tracing::info!(
                    "\n[rulka train] trajectory {} of collector {} was recorded before this trainer started and came again (not acknowledged when the last trainer stopped): recorded once; summary.json counts such (already_recorded)",
                    id.sequence, t.collector
                );
            }
            self.counters.already_recorded += 1;
            return Ok(());
        }
        let duplicate = arrival == Arrival::Duplicate;
        self.counters.trajectories_received += 1;
        let frames_before = self.learner.frames;
        self.learner.frames += t.steps.len() as u64;
        let eval = is_eval(&t);
        let trained = !duplicate && !eval;
        let (group, frames) = (t.group, self.learner.frames);
        let at = if eval {
            frames_before
        } else if duplicate {
            self.pending.peek_anchor(cfg, group, frames_before)
        } else {
            self.pending.anchor(cfg, group, frames_before)
        };
        let p = prepare(cfg, t, at, self.learner.updates, self.start);
        let s = &p.summary;
        let arrived = Arrived {
            cfg,
            summary: s,
            saved: &p.saved,
            frames,
            updates: self.learner.updates,
            minutes: self.minutes(),
            duplicate,
            trained,
            start: self.start,
        };
        self.journal.trajectory(&arrived)?;
        if duplicate {
            return Ok(()); // counted, never trained on twice
        }
        self.progress.add(s);
        if eval {
            self.counters.eval_trajectories += 1;
            return Ok(());
        }
        self.counters.trajectories_trained += 1;
        let ret = s.ret;
        let batch = on_device(
            rulka_learner::trajectory_batch(&p.saved, cfg),
            self.learner.network().var_store().device(),
        );
        self.pending.add(cfg, batch, ret, frames);
        Ok(())
    }

    /// Runs the sealed updates, each at the frame count of the trajectory
    /// that completed it.
    fn train_ready(&mut self) -> anyhow::Result<()> {
        let frames_now = self.learner.frames;
        while let Some(ready) = self.pending.take_ready() {
            self.update(ready)?;
        }
        self.learner.frames = frames_now;
        Ok(())
    }

    fn update(&mut self, ready: Ready) -> anyhow::Result<()> {
        let steps = ready.steps;
        let (t0, cpu0) = (Instant::now(), crate::threads::own_cpu_s());
        let trained = ready.train(self.learner)?;
        self.counters.learner_update_s += t0.elapsed().as_secs_f64();
        self.counters.learner_cpu_s = crate::threads::add_interval(
            self.counters.learner_cpu_s,
            cpu0,
            crate::threads::own_cpu_s(),
        );
        let Some(st) = trained else { return Ok(()) };
        self.counters.updates += 1;
        self.counters.skipped_optimizer_steps += st.skipped;
        let fatal = self.endpoints.publish_errors_fatal;
        publish(self.cfg, self.learner, &mut *self.endpoints.weights, fatal)?;
        let w = &self.progress.window;
        self.journal.update(&Updated {
            cfg: self.cfg,
            learner: self.learner,
            stats: &st,
            steps,
            policy_lag: w.mean(w.lag),
            minutes: self.minutes(),
        })?;
        self.last_stats = Some(st);
        Ok(())
    }

    /// Checkpoints, performance and health scalars, the progress line —
    /// each when due.
    fn periodic(&mut self) -> anyhow::Result<()> {
        let every = Duration::from_secs(self.cfg.training.checkpoint_every_s.max(1));
        if self.clocks.checkpoint.elapsed() >= every {
            self.checkpoint("running")?;
            self.journal.flush()?;
            self.clocks.checkpoint = Instant::now();
        }
        if self.clocks.perf.0.elapsed() >= Duration::from_secs(30) {
            self.perf_scalars()?;
        }
        if let Some(c) = self.threads.as_mut().and_then(Governor::tick) {
            tch::set_num_threads(c.to as i32);
            // What libtorch now uses, read back: the line says what took effect.
            self.progress.sayer()(&format!(
                "learner threads {} → {}: other processes used {:.1} of {} cores (learner_threads: auto)",
                c.from,
                tch::get_num_threads(),
                c.others,
                c.cores
            ));
        }
        if self.progress.due() {
            self.show_progress();
        }
        Ok(())
    }

    fn perf_scalars(&mut self) -> anyhow::Result<()> {
        let (since, frames_then) = self.clocks.perf;
        let frames = self.learner.frames;
        let fps = (frames - frames_then) as f64 / since.elapsed().as_secs_f64();
        let hours = self.clocks.started.elapsed().as_secs_f64() / 3600.0;
        let tb = self.journal.scalars();
        tb.scalar("Performance/env_frames_per_second", frames as i64, fps)?;
        tb.scalar("cumul_training_hours", frames as i64, hours)?;
        self.health_scalars()?;
        self.clocks.perf = (Instant::now(), frames);
        Ok(())
    }

    fn health_scalars(&mut self) -> anyhow::Result<()> {
        let broker = self.endpoints.broker.as_ref();
        self.games.refresh(self.run_dir, self.cfg, broker);
        let step = self.learner.frames as i64;
        health_scalars(
            self.journal.scalars(),
            step,
            self.cfg,
            &self.games,
            broker,
            &mut self.remote,
        )
    }

    fn show_progress(&mut self) {
        let secs = self.clocks.started.elapsed().as_secs_f64().max(1e-9);
        let (ret, progress, eval_progress) = self.progress.means();
        let w = &self.progress.window;
        let broker = self.endpoints.broker.as_ref();
        let msg = format!(
            "frames {} ({:.0}/s) | updates {} | return {ret} | progress {progress}% | finished {}/{} | eval progress {eval_progress}%{} | lag {} | loss {} | {}",
            self.learner.frames,
            (self.learner.frames - self.start_frames) as f64 / secs,
            self.learner.updates,
            w.finished,
            w.n,
            self.journal.line(),
            shown(w.mean(w.lag), 1),
            shown(self.last_stats.as_ref().map_or(f64::NAN, |s| s.loss), 3),
            collectors_part(&self.sup, self.cfg, broker, &mut self.remote),
        );
        self.games.refresh(self.run_dir, self.cfg, broker);
        self.progress.show(msg + &self.games.line(), self.clocks.started);
    }

    /// A checkpoint with `summary.json` describing it (`stop_reason` as
    /// given: `running` until the stop), the counters refreshed first.
    fn checkpoint(&mut self, stop_reason: &str) -> anyhow::Result<()> {
        self.refresh_counters();
        let minutes = self.minutes();
        let mut summary = self.report(stop_reason, minutes).to_json();
        self.last_checkpoint =
            Some(checkpoint(self.cfg, self.run_dir, self.learner, &mut summary)?);
        Ok(())
    }

    /// The run so far, for `summary.json` and the summary shown at the stop.
    fn report<'s>(&'s mut self, stop_reason: &'s str, minutes: f64) -> Report<'s> {
        let collectors = self.remote.summary(self.cfg, self.endpoints.broker.as_ref());
        let (_, n_games, g) = self.games.totals();
        self.counters.games(n_games, &g);
        let this: &'s Self = self;
        Report {
            cfg: this.cfg,
            run_dir: this.run_dir,
            stop_reason,
            checkpoint: this.last_checkpoint.as_deref(),
            minutes,
            start_frames: this.start_frames,
            start: this.start,
            timeline: this.timeline.with(&this.counters),
            learner: this.learner,
            counters: &this.counters,
            progress: &this.progress,
            recorded: this.journal.summaries(),
            broker: this.endpoints.broker.as_ref(),
            collectors,
            games: (n_games, g),
        }
    }

    /// Stops: the collectors first, then what they completed is counted
    /// (shared memory), the final checkpoint (with a summary of it), the
    /// journal's stop (the final held-out evaluation), the summary again
    /// with what that added.
    fn stop(mut self, reason: &str) -> anyhow::Result<String> {
        self.progress.finish();
        tracing::info!("[rulka train] stopping ({reason}): collectors finish, final checkpoint");
        self.sup.shutdown(Duration::from_secs(4));
        self.drain()?;
        self.checkpoint(reason)?;
        let at = rulka_run::StateAt {
            frames: self.learner.frames,
            updates: self.learner.updates,
            state: self.last_checkpoint.clone(),
        };
        rulka_run::Start::end(self.run_dir, self.start, reason, at, rulka_run::unix_now())?;
        let minutes = self.minutes();
        self.journal.stop(&Stopped {
            learner: self.learner,
            minutes,
            interrupted: reason.starts_with("interrupted"),
        })?;
        self.health_scalars()?;
        self.journal.flush()?;
        self.refresh_counters();
        let report = self.report(reason, minutes);
        report.write_json()?;
        Ok(report.to_string())
    }

    /// Shared memory: trajectories the collectors completed before stopping
    /// are still counted (received, not trained on): nothing committed goes
    /// unaccounted. NATS: they stay on the server, untaken, for --resume.
    fn drain(&mut self) -> anyhow::Result<()> {
        let stopping = Instant::now();
        let rollouts = &mut self.endpoints.rollouts;
        let mut left = Vec::new();
        if self.endpoints.broker.is_none() {
            while stopping.elapsed() < Duration::from_secs(6) {
                let before = left.len();
                rollouts.poll(&mut left, self.poll).context("draining trajectories")?;
                if left.len() == before {
                    break;
                }
            }
        }
        self.counters.trajectories_received += left.len() as u64;
        self.counters.unused_at_shutdown += left.len() as u64;
        for t in &left {
            self.intake.arrive(TrajectoryId::unpack(t.collector, t.trajectory));
        }
        rollouts.finish();
        self.intake.abandoned(rollouts.take_abandoned());
        Ok(())
    }

    /// The counters read at each checkpoint and at the stop: the intake's,
    /// the transport's, the supervisor's and the broker's.
    fn refresh_counters(&mut self) {
        let c = &mut self.counters;
        c.intake(&self.intake);
        c.races = self.journal.races();
        let rs = self.endpoints.rollouts.stats();
        c.incomplete_dropped = rs.incomplete_dropped;
        c.orphan_chunks = rs.orphan_chunks;
        c.ring_drops = rs.dropped;
        c.repeats_ignored = rs.repeats_ignored;
        c.rejected_chunks = rs.rejected;
        c.collector_restarts = self.sup.restarts();
        c.hung_collectors_killed = self.sup.hung();
        if let Some(b) = self.endpoints.broker.as_ref() {
            let st = b.status();
            c.broker_restarts = b.restarts();
            c.broker_connection_drops = st.drops;
            let p = b.publisher_stats();
            c.weights_published = p.published;
            c.weight_publish_failures = p.failures;
        }
        c.remote_rejoins = self.remote.rejoins();
        c.collector_restarts += self.remote.rejoins();
    }
}

/// The run's figures along its kept timeline (`summary.json`'s
/// `timeline`): its rows of earlier starts that no start threw away, then
/// this start's races. (The `counters` are this start's own.)
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Timeline {
    /// Starts of the run so far, this one included.
    pub starts: u32,
    /// Races finished (exploration and greedy) on the kept timeline, the
    /// frame count of the first and the best race time among them.
    #[serde(flatten)]
    pub races: rulka_run::RunFigures,
    /// Rows of `trajectories.csv` a resume threw away (kept, marked).
    pub thrown_away_trajectories: u64,
}

impl Timeline {
    /// The kept timeline of `run_dir` before start `start`.
    fn before(run_dir: &Path, start: u32) -> anyhow::Result<Self> {
        let earlier: Vec<_> = crate::read_trajectories_so_far(run_dir)?
            .into_iter()
            .filter(|r| r.start < start)
            .collect();
        let (kept, thrown) = rulka_run::kept(earlier);
        Ok(Self {
            starts: start,
            races: rulka_run::RunFigures::of(&kept),
            thrown_away_trajectories: thrown as u64,
        })
    }

    /// With this start's races (`c`) added.
    fn with(&self, c: &Counters) -> Self {
        Self { races: self.races.merged(c.races), ..*self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four rows by hand: start 1 finished at frame 100 (12 s, kept) and at
    /// 200 (9 s) and drove on at 300, both thrown away by start 2, which
    /// resumed from a state before them and finished at 150 (11 s).
    const ROWS: &str = "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s,start,thrown_away_by\n\
100,0.1,1,0,1,0,explore,50,1.0,250,1.0,1,12.0,1,\n\
200,0.2,2,0,2,0,explore,50,1.0,250,1.0,1,9.0,1,2\n\
300,0.3,3,0,3,0,explore,50,0.5,100,0.4,0,,1,2\n\
150,0.4,2,0,4,0,explore,50,1.0,250,1.0,1,11.0,2,\n\
";

    /// `summary.json`'s timeline after a resume, against a model over
    /// generated runs: start 1's rows (some thrown away by start 2), then
    /// start 2's own races; the timeline's figures are those of every kept
    /// row of both starts together (finishes summed, the first finish and
    /// best time over both), whichever start has none.
    #[test]
    fn the_timeline_is_the_earlier_kept_rows_and_this_starts_races_together() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config as Runner, RngSeed, TestRunner};
        let race = || (any::<bool>(), 1u64..1000, prop::option::of(1u32..5000));
        let runs = (
            prop::collection::vec((race(), any::<bool>()), 0..8),
            prop::collection::vec(race(), 0..8),
        );
        let mut runner = TestRunner::new(Runner {
            cases: 300,
            rng_seed: RngSeed::Fixed(0x7469_6d65),
            failure_persistence: None,
            ..Runner::default()
        });
        runner
            .run(&runs, |(earlier, mine)| {
                let dir = tempfile::tempdir().unwrap();
                let mut csv = ROWS.lines().next().unwrap().to_string() + "\n";
                for (k, ((fin, frames, t), thrown)) in earlier.iter().enumerate() {
                    let t = if *fin {
                        t.map_or(String::new(), |c| format!("{:.2}", f64::from(c) / 100.0))
                    } else {
                        String::new()
                    };
                    let by = if *thrown { "2" } else { "" };
                    csv += &format!(
                        "{frames},0.1,1,0,{k},0,explo,50,1.0,250,1.0,{},{t},1,{by}\n",
                        u8::from(*fin)
                    );
                }
                std::fs::write(dir.path().join("trajectories.csv"), csv).unwrap();
                let mut counters = Counters::default();
                for (fin, frames, t) in &mine {
                    if *fin {
                        counters.races.add(*frames + 1000, t.map(|c| f64::from(c) / 100.0));
                    }
                }
                let got = Timeline::before(dir.path(), 2).unwrap().with(&counters).races;
                // The model: every finished kept row of start 1 and every race of start 2.
                let kept: Vec<(u64, Option<f64>)> = earlier
                    .iter()
                    .filter(|((fin, _, _), thrown)| *fin && !*thrown)
                    .map(|((_, f, t), _)| (*f, t.map(|c| f64::from(c) / 100.0)))
                    .chain(
                        mine.iter()
                            .filter(|r| r.0)
                            .map(|(_, f, t)| (*f + 1000, t.map(|c| f64::from(c) / 100.0))),
                    )
                    .collect();
                prop_assert_eq!(got.finishes, kept.len() as u64);
                prop_assert_eq!(got.first_finish_frame, kept.iter().map(|r| r.0).min());
                prop_assert_eq!(
                    got.best_race_time_s,
                    kept.iter().filter_map(|r| r.1).min_by(f64::total_cmp)
                );
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn the_kept_timeline_leaves_out_what_a_resume_threw_away() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trajectories.csv"), ROWS).unwrap();
        let t = Timeline::before(dir.path(), 3).unwrap();
        assert_eq!(t.starts, 3);
        assert_eq!(t.thrown_away_trajectories, 2);
        assert_eq!((t.races.finishes, t.races.first_finish_frame), (2, Some(100)));
        assert_eq!(t.races.best_race_time_s, Some(11.0), "the 9 s race was thrown away");
        // Before start 2: start 1's rows only (the marks are still counted).
        let t1 = Timeline::before(dir.path(), 2).unwrap();
        assert_eq!(
            (t1.races.finishes, t1.races.best_race_time_s, t1.thrown_away_trajectories),
            (1, Some(12.0), 2)
        );
    }
}
