//! `rulka train`: the learner in this process fed through a transport
//! (shared-memory rings, or NATS), weight snapshots published after every
//! update, supervised collector processes, periodic atomic checkpoints and
//! ONNX exports, TensorBoard scalars, and a clean shutdown on Ctrl-C / SIGTERM.

use rulka_shm::chunk::TrajectoryId;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use indicatif::{ProgressBar, ProgressStyle};
use rulka_checkpoint::Meta;
use rulka_collector::{prompt_name, RunLayout};
use rulka_config::{ingredients, step_flags, Algorithm, Config, EnvKind, Schedule, TransportKind};
use rulka_learner::algorithms::{scheduled, Learner, TrajBatch, UpdateStats};
use rulka_learner::offline::SavedTrajectory;
use rulka_learner::rewards::shaping_gamma;
use rulka_learner::rewards::{rollout_rewards, Engineered, Rollout};
use rulka_learner::tensorboard::EventWriter;
use rulka_shm::chunk::Trajectory;
use rulka_shm::lock::ProcessLock;
use rulka_shm::ShmError;
use rulka_transport::WeightSink;
use serde::Serialize;
use tch::Device;

use crate::pending::Pending;
use crate::run_dir::{prepare_run_dir, RunInfo};
use crate::supervisor::Supervisor;
use crate::BadInput;

/// Arguments of `rulka train`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TrainArgs {
    /// Config file (a new run; its `training.run_dir` is the run directory).
    #[arg(long, required_unless_present = "resume")]
    pub config: Option<PathBuf>,
    /// Continue the run in RUN_DIR from its last checkpoint.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "config")]
    pub resume: Option<PathBuf>,
    /// Start over: replace an existing run's state (with --config), or start
    /// fresh when the resumed run has no checkpoint (with --resume).
    #[arg(long)]
    pub fresh: bool,
    /// Run directory (overrides `training.run_dir`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Stop after this many environment frames (total, including resumed ones).
    #[arg(long)]
    pub max_frames: Option<u64>,
    /// Stop after this many minutes of this invocation.
    #[arg(long)]
    pub max_minutes: Option<f64>,
    /// Number of collector processes (overrides `collectors.count`).
    #[arg(long)]
    pub collectors: Option<u32>,
    /// Also save every exploration trajectory to RUN_DIR/trajectories.jsonl
    /// (input for DPO's offline mode).
    #[arg(long)]
    pub save_trajectories: bool,
    /// Transport (overrides `transport.kind`): `shm` or `nats`.
    #[arg(long, value_parser = parse_transport)]
    pub transport: Option<TransportKind>,
    /// NATS server URL (overrides `transport.nats.url`; unset: a local server).
    #[arg(long)]
    pub nats_url: Option<String>,
}

fn parse_transport(s: &str) -> Result<TransportKind, String> {
    match s {
        "shm" => Ok(TransportKind::Shm),
        "nats" => Ok(TransportKind::Nats),
        _ => Err(format!("unknown transport {s:?}; expected shm or nats")),
    }
}

fn engineered(cfg: &Config, frames: u64) -> Engineered {
    let (r, speed) = (&cfg.rewards, cfg.training.global_schedule_speed);
    let at = |s: &Schedule| s.scaled(speed).linear_at(frames as f64);
    Engineered {
        speedslide: at(&r.engineered_speedslide_reward_schedule),
        neoslide: at(&r.engineered_neoslide_reward_schedule),
        kamikaze: at(&r.engineered_kamikaze_reward_schedule),
        close_to_vcp: at(&r.engineered_close_to_vcp_reward_schedule),
    }
}

/// What one received trajectory was.
#[derive(Debug, Clone)]
struct Summary {
    collector: u32,
    trajectory: u64,
    seed: u64,
    eval: bool,
    steps: usize,
    ret: f64,
    progress_m: f64,
    progress_frac: f64,
    finished: bool,
    race_time_s: Option<f64>,
    lag: f64,
}

/// The trajectory's tensors on the learner's device.
pub(crate) fn on_device(t: TrajBatch, device: Device) -> TrajBatch {
    if device == Device::Cpu {
        return t;
    }
    TrajBatch {
        image: t.image.to_device(device),
        floats: t.floats.to_device(device),
        actions: t.actions.to_device(device),
        old_logp: t.old_logp.to_device(device),
        old_value: t.old_value.to_device(device),
        rewards: t.rewards,
        group: t.group,
    }
}

/// The trajectory with its rewards (shaped and folded, as trained on) in the
/// saved-trajectory form, whose `to_batch` gives the learner's tensors and
/// `to_json_line` the `--save-trajectories` line; and what it was. Scheduled
/// reward coefficients and the shaping γ are taken at `schedule_frames`, the
/// anchor of the batch or group the trajectory joins ([`Pending::anchor`]).
fn prepare(
    cfg: &Config,
    t: Trajectory,
    schedule_frames: u64,
    policy_version: u64,
) -> (SavedTrajectory, Summary) {
    let s = &t.steps;
    let n = s.len();
    let f = cfg.float_input_dim();
    let k = ingredients::COUNT;
    let meters: Vec<f32> = (0..n).map(|i| s.ingredients[i * k + ingredients::METERS]).collect();
    let last_flags = s.flags.last().copied().unwrap_or(0);
    let finished = last_flags & step_flags::FINISHED != 0;
    let race_time_ms =
        finished.then(|| f64::from(s.ingredients[(n - 1) * k + ingredients::RACE_TIME_MS]));
    let (rewards, _) = rollout_rewards(
        cfg,
        Rollout { floats: &s.floats, meters: &meters, actions: &s.actions, race_time_ms },
        engineered(cfg, schedule_frames),
        shaping_gamma(cfg, schedule_frames),
    );
    let progress_m = f64::from(meters.last().copied().unwrap_or(0.0));
    // Margin to finish (the float vector's second-to-last slot) at the end.
    let margin = f64::from(s.floats[n * f - 2]);
    let summary = Summary {
        collector: t.collector,
        trajectory: t.trajectory,
        seed: t.group,
        eval: s.flags.first().is_some_and(|x| x & step_flags::GREEDY != 0),
        steps: n,
        ret: rewards.iter().map(|&r| f64::from(r)).sum(),
        progress_m,
        progress_frac: if finished { 1.0 } else { progress_m / (progress_m + margin).max(1e-9) },
        finished,
        race_time_s: race_time_ms.map(|m| m / 1000.0),
        lag: policy_version.saturating_sub(t.policy_versions.0) as f64,
    };
    let steps = t.steps;
    let saved = SavedTrajectory {
        group: t.group,
        // Float-only networks: the chunk's 1-byte placeholder frames are not data.
        frames: if cfg.nn.no_image { Vec::new() } else { steps.frames },
        floats: steps.floats,
        actions: steps.actions,
        rewards,
        log_probs: steps.log_probs,
        values: steps.values,
    };
    (saved, summary)
}

/// Running means for the progress line and the final summary.
#[derive(Debug, Default, Clone)]
struct Window {
    n: usize,
    ret: f64,
    progress: f64,
    finished: usize,
    lag: f64,
}

impl Window {
    fn add(&mut self, s: &Summary) {
        self.n += 1;
        self.ret += s.ret;
        self.progress += s.progress_frac;
        self.finished += usize::from(s.finished);
        self.lag += s.lag;
    }

    fn mean(&self, x: f64) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            x / self.n as f64
        }
    }
}

#[derive(Debug, Default, Serialize)]
struct Counters {
    broker_restarts: u64,
    broker_connection_drops: u64,
    weights_published: u64,
    weight_publish_failures: u64,
    remote_rejoins: u64,
    game_launches: Option<u64>,
    game_hangs: Option<u64>,
    game_crashes: Option<u64>,
    game_desyncs: Option<u64>,
    game_scheduled_restarts: Option<u64>,
    game_failed_launches: Option<u64>,
    trajectories_received: u64,
    trajectories_trained: u64,
    eval_trajectories: u64,
    duplicate_trajectories: u64,
    missing_trajectories: u64,
    incomplete_dropped: u64,
    orphan_chunks: u64,
    unused_at_shutdown: u64,
    collector_restarts: u64,
    hung_collectors_killed: u64,
    ring_drops: u64,
    repeats_ignored: u64,
    rejected_chunks: u64,
    updates: u64,
    skipped_optimizer_steps: u64,
    finishes: u64,
    first_finish_frame: Option<u64>,
    best_race_time_s: Option<f64>,
}

/// Runs `rulka train`.
pub fn run(args: &TrainArgs, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    rulka_shm::signal::install();
    // A second Ctrl-C exits at once: every file the trainer writes is atomic.
    std::thread::spawn(|| loop {
        if rulka_shm::signal::count() >= 2 {
            eprintln!(
                "\n[rulka train] second interrupt: exiting now (last checkpoint stays valid)"
            );
            rulka_shm::signal::exit_now(130);
        }
        std::thread::sleep(Duration::from_millis(50));
    });
    let (mut cfg, run_dir, resuming) = prepare_run_dir(args)?;
    if let Some(n) = args.collectors {
        cfg.collectors.count = n;
    }
    if let Some(kind) = args.transport {
        cfg.transport.kind = kind;
    }
    if let Some(url) = &args.nats_url {
        cfg.transport.nats.url = Some(url.clone());
    }
    if cfg.collectors.count == 0 && cfg.transport.kind == TransportKind::Shm {
        return Err(BadInput(
            "collectors.count is 0: nothing would feed the learner (0 local collectors needs transport.kind nats)".into(),
        )
        .into());
    }
    let problems = cfg.validate();
    if let Some(p) = problems.first() {
        return Err(BadInput(format!("{p}")).into());
    }
    if cfg.environment.kind == EnvKind::Sim && cfg.environment.sim.track_from.is_some() {
        // The map's track is built here once, not in every collector: a line
        // that cannot be a track is bad input, said once (collectors would
        // fail at start and be restarted forever).
        let mut sim = rulka_env::sim::SimEnv::new(&cfg);
        rulka_env::Environment::reset(&mut sim, 0)
            .map_err(|e| BadInput(format!("environment.sim.track_from: {e}")))?;
    }
    if cfg.environment.kind == EnvKind::Tmi {
        eprintln!(
            "[rulka train] environment.kind tmi: collectors connect to TMInterface on ports {}..",
            cfg.environment.tmi.base_port
        );
    }
    let lock = ProcessLock::acquire(&run_dir.join("trainer.lock")).map_err(|e| match e {
        ShmError::LockHeld { pid, .. } => anyhow::Error::from(BadInput(format!(
            "{}: another trainer (pid {pid}) is running on this run directory",
            run_dir.display()
        ))),
        e => anyhow::Error::from(e).context("locking the run directory"),
    })?;
    tch::set_num_threads(cfg.training.learner_threads.max(1) as i32);
    rulka_learner::tune_allocator();
    // CUDA when this binary links libtorch's CUDA part (feature `cuda`) and a
    // GPU is present; the CPU otherwise.
    let device = Device::cuda_if_available();
    if device != Device::Cpu {
        eprintln!("[rulka train] learner on {device:?}");
    }
    let state_dir = run_dir.join("state");
    let mut learner = if resuming && state_dir.join("LATEST").exists() {
        let l = Learner::resume(&cfg, &state_dir, device)
            .with_context(|| format!("resuming from {}", state_dir.display()))?;
        eprintln!(
            "[rulka train] resumed {}: {} frames, {} updates",
            run_dir.display(),
            l.frames,
            l.updates
        );
        l
    } else {
        Learner::new_pretrained(&cfg, device, cfg.training.seed)
            .map_err(|e| crate::BadInput(format!("{e:#}")))?
    };
    let frozen = learner.network().frozen_parameter_names();
    if !frozen.is_empty() {
        eprintln!(
            "[rulka train] {} parameter tensors frozen (nn.vis.freeze / nn.encoder.freeze), e.g. {}",
            frozen.len(),
            frozen[0]
        );
    }

    let chunk = RunLayout::chunk_layout(&cfg);
    let mut endpoints = crate::transport::open(&cfg, &run_dir, chunk, !resuming)?;
    let result = (|| {
        endpoints.info.write(&run_dir)?;
        publish(&cfg, &learner, &mut *endpoints.weights, true)?;
        let exe = std::env::current_exe().context("locating the rulka binary")?;
        let (run2, ort2) = (run_dir.clone(), ort_lib.map(Path::to_path_buf));
        let launcher: crate::supervisor::Launcher = Box::new(move |id, incarnation| {
            let mut cmd = Command::new(&exe);
            if let Some(l) = &ort2 {
                cmd.arg("--ort-lib").arg(l);
            }
            cmd.arg("collect")
                .arg("--run")
                .arg(&run2)
                .arg("--id")
                .arg(id.to_string())
                .arg("--incarnation")
                .arg(incarnation.to_string());
            Ok(cmd)
        });
        train_loop(&cfg, args, &run_dir, launcher, &mut learner, &mut endpoints, ort_lib)
    })();
    endpoints.close();
    RunInfo::remove(&run_dir);
    lock.release();
    result
}

/// Publishes the learner's weights (version = updates). A failure is an
/// error when `fatal` (shared memory), else a warning: the next update
/// publishes again.
fn publish(
    cfg: &Config,
    learner: &Learner,
    weights: &mut dyn WeightSink,
    fatal: bool,
) -> anyhow::Result<bool> {
    let w = learner.network().to_weights();
    if !w.all_finite() {
        eprintln!("\n[rulka train] weights are not finite: not published");
        return Ok(false);
    }
    let bytes = w.to_safetensors(&Meta::new(cfg, learner.frames))?;
    match weights.publish(learner.updates, &bytes) {
        Ok(()) => Ok(true),
        Err(e) if !fatal => {
            eprintln!(
                "\n[rulka train] publishing weights v{}: {e}; the next update tries again",
                learner.updates
            );
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

fn checkpoint(cfg: &Config, run_dir: &Path, learner: &Learner) -> anyhow::Result<()> {
    let w = learner.network().to_weights();
    if !w.all_finite() {
        bail!("weights are not finite; refusing to checkpoint them");
    }
    learner.save_state(&run_dir.join("state"))?;
    // One serialisation for both files: the model is exported from exactly
    // the bytes of weights.safetensors, so it carries their step.
    let bytes = w.to_safetensors(&Meta::new(cfg, learner.frames))?;
    rulka_checkpoint::write_atomic(&run_dir.join("weights.safetensors"), &bytes)?;
    let onnx = rulka_export::export_from_safetensors(cfg, &bytes, "weights.safetensors")?;
    rulka_checkpoint::write_atomic(&run_dir.join("model.onnx"), &onnx)?;
    Ok(())
}

fn log_update(
    tb: &mut EventWriter,
    cfg: &Config,
    learner: &Learner,
    s: &UpdateStats,
    rollout_steps: usize,
) -> anyhow::Result<()> {
    let step = learner.frames as i64;
    let (speed, frames) = (cfg.training.global_schedule_speed, learner.frames);
    let at = |fixed: f64, s: &Option<Schedule>| scheduled(fixed, s, speed, frames);
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
        }
        Algorithm::Grpo => {
            let g = &cfg.grpo;
            tb.scalar("Training/grpo_loss", step, s.loss)?;
            tb.scalar("GRPO/ent_coef", step, at(g.ent_coef, &g.ent_coef_schedule))?;
            tb.scalar("GRPO/max_grad_norm", step, at(g.max_grad_norm, &g.max_grad_norm_schedule))?;
            tb.scalar("GRPO/ref_kl_coef", step, at(g.ref_kl_coef, &g.ref_kl_coef_schedule))?;
            tb.scalar("GRPO/group_size", step, f64::from(g.group_size))?;
            tb.scalar("Training/grpo_approx_kl", step, s.approx_kl)?;
            tb.scalar("Training/grpo_clipfrac", step, s.clipfrac)?;
            tb.scalar("Training/frac_zero_std", step, s.frac_zero_std)?;
        }
        Algorithm::Dpo => {
            let d = &cfg.dpo;
            tb.scalar("Training/dpo_loss", step, s.loss)?;
            tb.scalar("DPO/beta", step, at(d.beta, &d.beta_schedule))?;
            tb.scalar("DPO/vf_coef", step, at(d.vf_coef, &d.vf_coef_schedule))?;
            tb.scalar("DPO/max_grad_norm", step, at(d.max_grad_norm, &d.max_grad_norm_schedule))?;
        }
    }
    tb.scalar("Training/entropy", step, s.entropy)?;
    tb.scalar("Training/grad_norm", step, s.grad_norm)?;
    tb.scalar("Training/kl_ref", step, s.kl_ref)?;
    tb.scalar("Training/adv_var", step, s.adv_var)?;
    tb.scalar("Training/skipped_steps", step, s.skipped as f64)?;
    Ok(())
}

fn train_loop(
    cfg: &Config,
    args: &TrainArgs,
    run_dir: &Path,
    launcher: crate::supervisor::Launcher,
    learner: &mut Learner,
    endpoints: &mut crate::transport::Endpoints,
    ort_lib: Option<&Path>,
) -> anyhow::Result<()> {
    let crate::transport::Endpoints {
        rollouts,
        weights,
        broker,
        publish_errors_fatal: publish_fatal,
        description: transport,
        ..
    } = endpoints;
    let (rollouts, weights, publish_fatal) = (&mut **rollouts, &mut **weights, *publish_fatal);
    let mut tb = EventWriter::create(&run_dir.join("tensorboard"))?;
    let mut heldout = crate::heldout::HeldOut::new(cfg, run_dir, ort_lib)?;
    let mut csv = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join("trajectories.csv"))
        .context("opening trajectories.csv")?;
    if csv.metadata()?.len() == 0 {
        writeln!(csv, "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s")?;
    }
    let mut best_runs = crate::best_runs::BestRuns::open(cfg, run_dir);
    let hb_timeout = Duration::from_millis(u64::from(cfg.collectors.heartbeat_timeout_ms));
    let mut sup = Supervisor::new(run_dir, launcher, cfg.collectors.count, hb_timeout);
    let started = Instant::now();
    let start_frames = learner.frames;
    let max_frames = args.max_frames.or(cfg.training.max_frames);
    let max_minutes = args.max_minutes.or(cfg.training.max_minutes);
    let mut pending = Pending::new(cfg, learner.network().var_store().device())?;
    let mut counters = Counters::default();
    let mut intake = crate::intake::Intake::default();
    let mut window = Window::default();
    let mut window_eval = Window::default();
    let mut all = Window::default();
    let mut last_eval = Window::default();
    let mut last_ckpt = Instant::now();
    let mut last_perf = (Instant::now(), learner.frames);
    let mut last_supervise = Instant::now() - Duration::from_secs(1);
    let mut last_print = Instant::now();
    let mut last_stats: Option<UpdateStats> = None;
    let mut pending_steps = 0usize;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let bar = if tty {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        ProgressBar::hidden()
    };
    eprintln!(
        "[rulka train] {} on the {} with {} local collector(s) over {transport}; run directory {}",
        format!("{:?}", cfg.training.algorithm).to_uppercase(),
        match cfg.environment.kind {
            EnvKind::Sim => match &cfg.environment.sim.track_from {
                Some(p) => format!(
                    "simulator (the shape of {}, {} m wide)",
                    p.display(),
                    cfg.environment.sim.track_width_m
                ),
                None => format!(
                    "simulator ({:?} tracks {})",
                    cfg.environment.sim.track,
                    rulka_config::seeds::describe(&cfg.environment.sim.track_seeds)
                ),
            },
            EnvKind::Tmi => "game (TMInterface)".to_string(),
        },
        cfg.collectors.count,
        run_dir.display()
    );
    let mut jsonl = if args.save_trajectories {
        Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(run_dir.join("trajectories.jsonl"))
                .context("opening trajectories.jsonl")?,
        )
    } else {
        None
    };
    let poll_ms = if cfg.transport.kind == TransportKind::Nats { 20 } else { 2 };
    let say = sayer(&bar, tty);
    if let Some(b) = broker.as_ref() {
        let say = say.clone();
        b.set_reporter(move |m| say(m));
    }
    eprintln!(
        "[rulka train] checkpoints every {} s (training.checkpoint_every_s) and at the end: a crash costs the learning since the last one; {}",
        cfg.training.checkpoint_every_s.max(1),
        if broker.is_some() {
            "trajectories not yet taken wait on the NATS server for --resume"
        } else {
            "the collectors stop with the trainer"
        }
    );
    let mut remote = RemoteView { local: cfg.collectors.count, ..RemoteView::default() };
    let mut games = Games::default();
    // Game reports of an earlier trainer's collectors are not this run's.
    for id in 0..cfg.collectors.count {
        let _ = std::fs::remove_file(
            crate::run_dir::RunInfo::heartbeat_path(run_dir, id).with_extension("game.json"),
        );
    }
    let stop_reason: String;
    loop {
        if rulka_shm::signal::count() > 0 {
            stop_reason = match rulka_shm::signal::last_name() {
                Some(sig) => format!("interrupted ({sig})"),
                None => "interrupted".into(),
            };
            break;
        }
        if max_frames.is_some_and(|m| learner.frames >= m) {
            stop_reason = "max frames reached".into();
            break;
        }
        if max_minutes.is_some_and(|m| started.elapsed().as_secs_f64() >= m * 60.0) {
            stop_reason = "time limit reached".into();
            break;
        }
        if last_supervise.elapsed() >= Duration::from_millis(200) {
            // A dead collector's partial trajectory is not dropped here: its
            // ring may still hold committed chunks of trajectories it
            // completed. The reassembler discards the partial when the
            // restarted collector's first chunk (a new trajectory id) arrives.
            sup.tick(false)?;
            if let Some(b) = broker.as_mut() {
                for m in b.tick() {
                    say(&m);
                }
            }
            last_supervise = Instant::now();
        }
        let mut arrived = Vec::new();
        rollouts
            .poll(&mut arrived, Duration::from_millis(poll_ms))
            .context("receiving trajectories")?;
        // Pass 1: every trajectory the transport handed over is on record
        // (trajectories.csv, TensorBoard, counters) before any of them is
        // trained on, so a trainer killed during an update has logged all
        // it took. Pass 2 trains on them, each at its own frame count.
        let mut to_train = Vec::new();
        intake.abandoned(rollouts.take_abandoned());
        for t in arrived {
            let id = TrajectoryId::unpack(t.collector, t.trajectory);
            let duplicate = intake.arrive(id) == crate::intake::Arrival::Duplicate;
            remote.delivered(t.collector, id.incarnation);
            counters.trajectories_received += 1;
            let frames_before = learner.frames;
            learner.frames += t.steps.len() as u64;
            let is_eval = t.steps.flags.first().is_some_and(|x| x & step_flags::GREEDY != 0);
            let trains = !duplicate && !is_eval;
            let at = if is_eval {
                frames_before
            } else {
                pending.peek_anchor(cfg, t.group, frames_before)
            };
            let kept = trains.then(|| (t.clone(), frames_before, learner.frames));
            let (saved, s) = prepare(cfg, t, at, learner.updates);
            let minutes = started.elapsed().as_secs_f64() / 60.0;
            writeln!(
                csv,
                "{},{:.3},{},{},{},{},{},{},{:.4},{:.2},{:.4},{},{}",
                learner.frames,
                minutes,
                learner.updates,
                s.collector,
                s.trajectory,
                s.seed,
                if s.eval { "eval" } else { "explo" },
                s.steps,
                s.ret,
                s.progress_m,
                s.progress_frac,
                u8::from(s.finished),
                s.race_time_s.map_or(String::new(), |t| format!("{t:.2}"))
            )?;
            let kind = if s.eval { "eval" } else { "explo" };
            let step = learner.frames as i64;
            let suffix = if s.eval { "trained_" } else { "" };
            tb.scalar(
                &format!("{kind}_race_finished_{suffix}{}", prompt_name(cfg, s.seed)),
                step,
                f64::from(u8::from(s.finished)),
            )?;
            if let Some(rt) = s.race_time_s {
                tb.scalar(
                    &format!("{kind}_race_time_{suffix}{}", prompt_name(cfg, s.seed)),
                    step,
                    rt,
                )?;
                counters.best_race_time_s =
                    Some(counters.best_race_time_s.map_or(rt, |b: f64| b.min(rt)));
                if !duplicate {
                    let what = format!(
                        "{} run, frame {}",
                        if s.eval { "greedy" } else { "exploration" },
                        learner.frames
                    );
                    best_runs.offer(&prompt_name(cfg, s.seed), rt, &saved.actions, &what)?;
                }
            }
            tb.scalar(&format!("Race/{kind}_progress"), step, s.progress_frac)?;
            tb.scalar(&format!("Race/{kind}_return"), step, s.ret)?;
            if s.finished {
                counters.finishes += 1;
                counters.first_finish_frame.get_or_insert(learner.frames);
            }
            if duplicate {
                // Counted, never trained on twice.
            } else if s.eval {
                counters.eval_trajectories += 1;
                window_eval.add(&s);
            } else {
                counters.trajectories_trained += 1;
                window.add(&s);
                all.add(&s);
            }
            to_train.extend(kept);
        }
        counters.duplicate_trajectories = intake.duplicates();
        counters.missing_trajectories = intake.missing();
        let frames_now = learner.frames;
        for (t, frames_before, frames_after) in to_train {
            learner.frames = frames_after;
            let at = pending.anchor(cfg, t.group, frames_before);
            let (saved, s) = prepare(cfg, t, at, learner.updates);
            pending_steps += s.steps;
            if let Some(f) = jsonl.as_mut() {
                writeln!(f, "{}", saved.to_json_line())?;
            }
            let batch = on_device(saved.to_batch(cfg), learner.network().var_store().device());
            pending.add(cfg, batch, s.ret);
            // Update as soon as enough data is pending, so each update
            // sees the configured amount (not whatever queued meanwhile).
            if let Some(st) = pending.update(cfg, learner)? {
                counters.updates += 1;
                counters.skipped_optimizer_steps += st.skipped;
                log_update(&mut tb, cfg, learner, &st, pending_steps)?;
                tb.scalar("Training/policy_lag", learner.frames as i64, window.mean(window.lag))?;
                pending_steps = 0;
                publish(cfg, learner, weights, publish_fatal)?;
                last_stats = Some(st);
                if let Some(h) = heldout.as_mut() {
                    let at = crate::heldout::At {
                        frames: learner.frames,
                        updates: learner.updates,
                        minutes: started.elapsed().as_secs_f64() / 60.0,
                    };
                    h.tick(learner, at, &mut tb)?;
                }
            }
        }
        learner.frames = frames_now;
        if last_ckpt.elapsed() >= Duration::from_secs(cfg.training.checkpoint_every_s.max(1)) {
            checkpoint(cfg, run_dir, learner)?;
            tb.flush()?;
            last_ckpt = Instant::now();
        }
        if last_perf.0.elapsed() >= Duration::from_secs(30) {
            let fps = (learner.frames - last_perf.1) as f64 / last_perf.0.elapsed().as_secs_f64();
            tb.scalar("Performance/env_frames_per_second", learner.frames as i64, fps)?;
            tb.scalar(
                "cumul_training_hours",
                learner.frames as i64,
                started.elapsed().as_secs_f64() / 3600.0,
            )?;
            games.refresh(run_dir, cfg, broker.as_ref());
            health_scalars(
                &mut tb,
                learner.frames as i64,
                cfg,
                &games,
                broker.as_ref(),
                &mut remote,
            )?;
            last_perf = (Instant::now(), learner.frames);
        }
        if last_print.elapsed() >= Duration::from_millis(if tty { 250 } else { 15_000 }) {
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            if window_eval.n > 0 {
                last_eval = window_eval.clone();
            }
            let msg = format!(
                "frames {} ({:.0}/s) | updates {} | return {} | progress {}% | finished {}/{} | eval progress {}%{} | lag {} | loss {} | {}",
                learner.frames,
                (learner.frames - start_frames) as f64 / secs,
                learner.updates,
                shown(window.mean(window.ret), 2),
                shown(100.0 * window.mean(window.progress), 0),
                window.finished,
                window.n,
                shown(100.0 * last_eval.mean(last_eval.progress), 0),
                heldout.as_ref().map_or(String::new(), crate::heldout::HeldOut::line),
                shown(window.mean(window.lag), 1),
                shown(last_stats.as_ref().map_or(f64::NAN, |s| s.loss), 3),
                collectors_part(&sup, cfg, broker.as_ref(), &mut remote),
            );
            games.refresh(run_dir, cfg, broker.as_ref());
            let msg = msg + &games.line();
            if tty {
                bar.set_message(msg);
            } else {
                eprintln!("[rulka train {:>6.1} min] {msg}", secs / 60.0);
            }
            if window.n >= 20 || !tty {
                window = Window::default();
                window_eval = Window::default();
            }
            last_print = Instant::now();
        }
    }
    bar.finish_and_clear();
    eprintln!("[rulka train] stopping ({stop_reason}): collectors finish, final checkpoint");
    let stopping = Instant::now();
    sup.shutdown(Duration::from_secs(4));
    // Shared memory: trajectories the collectors completed before stopping are
    // still counted (received, not trained on): nothing committed goes
    // unaccounted. NATS: they stay on the server, untaken, for --resume.
    let mut left = Vec::new();
    if broker.is_none() {
        while stopping.elapsed() < Duration::from_secs(6) {
            let before = left.len();
            rollouts
                .poll(&mut left, Duration::from_millis(poll_ms))
                .context("draining trajectories")?;
            if left.len() == before {
                break;
            }
        }
    }
    counters.trajectories_received += left.len() as u64;
    counters.unused_at_shutdown += left.len() as u64;
    for t in &left {
        intake.arrive(TrajectoryId::unpack(t.collector, t.trajectory));
    }
    rollouts.finish();
    intake.abandoned(rollouts.take_abandoned());
    counters.duplicate_trajectories = intake.duplicates();
    counters.missing_trajectories = intake.missing();
    let rs = rollouts.stats();
    counters.incomplete_dropped = rs.incomplete_dropped;
    counters.orphan_chunks = rs.orphan_chunks;
    counters.ring_drops = rs.dropped;
    counters.repeats_ignored = rs.repeats_ignored;
    counters.rejected_chunks = rs.rejected;
    counters.collector_restarts = sup.restarts();
    counters.hung_collectors_killed = sup.hung();
    checkpoint(cfg, run_dir, learner)?;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let interrupted = stop_reason.starts_with("interrupted");
    if let Some(h) = heldout.as_mut() {
        if interrupted {
            eprintln!("[rulka train] interrupted: the final held-out evaluation is skipped");
        } else {
            let at =
                crate::heldout::At { frames: learner.frames, updates: learner.updates, minutes };
            h.finish(learner, at, &mut tb)?;
        }
    }
    let broker_note = broker.as_ref().map(|b| {
        let st = b.status();
        counters.broker_restarts = b.restarts();
        counters.broker_connection_drops = st.drops;
        let p = b.publisher_stats();
        counters.weights_published = p.published;
        counters.weight_publish_failures = p.failures;
        if st.connected {
            String::new()
        } else {
            format!(
                "; the NATS server {} was unreachable for the last {:.0} s (trajectories on it wait for --resume)",
                b.url,
                st.for_time.as_secs_f64()
            )
        }
    });
    let broker_note = broker_note.unwrap_or_default();
    counters.remote_rejoins = remote.rejoins();
    games.refresh(run_dir, cfg, broker.as_ref());
    health_scalars(&mut tb, learner.frames as i64, cfg, &games, broker.as_ref(), &mut remote)?;
    let (_, n_games, g) = games.totals();
    if n_games > 0 {
        counters.game_launches = Some(g.launches);
        counters.game_hangs = Some(g.hangs);
        counters.game_crashes = Some(g.crashes);
        counters.game_desyncs = Some(g.desyncs);
        counters.game_scheduled_restarts = Some(g.scheduled_restarts);
        counters.game_failed_launches = Some(g.failed_launches);
    }
    counters.collector_restarts += remote.rejoins();
    tb.flush()?;
    let fps = (learner.frames - start_frames) as f64 / (minutes * 60.0).max(1e-9);
    let summary = serde_json::json!({
        "stop_reason": stop_reason,
        "algorithm": format!("{:?}", cfg.training.algorithm).to_lowercase(),
        "frames": learner.frames,
        "frames_this_run": learner.frames - start_frames,
        "minutes": minutes,
        "frames_per_second": fps,
        "updates": learner.updates,
        "mean_progress_all": all.mean(all.progress),
        "last_eval_progress": last_eval.mean(last_eval.progress),
        "heldout": heldout.as_ref().map(crate::heldout::HeldOut::summary_json),
        "counters": counters,
        "broker": broker.as_ref().map(|b| serde_json::json!({
            "url": b.url,
            "trainer_epoch": b.epoch,
            "connected_at_stop": b.status().connected,
            "restarts": b.restarts(),
            "connection_drops": b.status().drops,
        })),
        "collectors": remote.summary(cfg, broker.as_ref()),
    });
    rulka_checkpoint::write_atomic(
        &run_dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    println!("rulka train — {stop_reason} after {minutes:.1} min");
    println!(
        "  frames        {} ({fps:.0}/s this run), updates {}",
        learner.frames, learner.updates
    );
    println!(
        "  trajectories  {} received: {} trained, {} eval, {} after the last update; duplicates {}, missing {}; incomplete at collector exits {}",
        counters.trajectories_received,
        counters.trajectories_trained,
        counters.eval_trajectories,
        counters.unused_at_shutdown,
        counters.duplicate_trajectories,
        counters.missing_trajectories,
        counters.incomplete_dropped
    );
    println!(
        "  races         {} finished (first at frame {}), best {}",
        counters.finishes,
        counters.first_finish_frame.map_or("-".into(), |f| f.to_string()),
        counters.best_race_time_s.map_or("-".into(), |t| format!("{t:.2} s"))
    );
    if let Some(h) = heldout.as_ref().map(crate::heldout::HeldOut::summary_json) {
        let f = &h["final"];
        println!(
            "  held-out      {} evaluation(s) on {} tracks {}; the last: finished {:.1}%, median race time {} s, {}× the autopilot's",
            h["evaluations"],
            h["tracks"].as_str().unwrap_or(""),
            h["seeds"].as_str().unwrap_or(""),
            100.0 * f["finish_rate"].as_f64().unwrap_or(f64::NAN),
            f["race_time_median_s"].as_f64().map_or("-".into(), |t| format!("{t:.2}")),
            f["time_ratio_median"].as_f64().map_or("-".into(), |t| format!("{t:.3}")),
        );
        let b = &h["best"];
        if b.is_object() {
            println!(
                "  best          {}/best.onnx from {:.1} min: finished {:.1}%, {}× the autopilot's on these tracks (they chose it: judge it on others with `rulka eval --seeds`)",
                run_dir.display(),
                b["minutes"].as_f64().unwrap_or(f64::NAN),
                100.0 * b["finish_rate"].as_f64().unwrap_or(f64::NAN),
                b["time_ratio_median"].as_f64().map_or("-".into(), |t| format!("{t:.3}")),
            );
        }
    }
    println!(
        "  collectors    {} restarts ({} hung, {} remote rejoins)",
        counters.collector_restarts, counters.hung_collectors_killed, counters.remote_rejoins
    );
    if n_games > 0 {
        println!(
            "  games         {n_games}: {} launches, {} hung, {} crashed, {} desynced, {} failed to start, {} scheduled restarts",
            g.launches, g.hangs, g.crashes, g.desyncs, g.failed_launches, g.scheduled_restarts
        );
    }
    if let Some(b) = broker.as_ref() {
        println!(
            "  broker        {} (trainer epoch {}): {} restarts, {} connection drops, {} weight snapshots published ({} failed attempts)",
            b.url,
            b.epoch,
            counters.broker_restarts,
            counters.broker_connection_drops,
            counters.weights_published,
            counters.weight_publish_failures
        );
    }
    println!("  wrote         {}/model.onnx, weights.safetensors, state/, tensorboard/, trajectories.csv, summary.json", run_dir.display());
    println!("  stopped       {stop_reason}{broker_note}");
    Ok(())
}

/// `x` with `decimals`, or `-` when there is nothing to show (no
/// trajectory in the window: NaN).
fn shown(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

/// The games' and the NATS link's health as TensorBoard scalars (`Games/*`
/// when collectors launch games, `Transport/*` over NATS): every 30 s and
/// once more at the stop, so the last values are the run's totals.
fn health_scalars(
    tb: &mut EventWriter,
    step: i64,
    cfg: &Config,
    games: &Games,
    broker: Option<&crate::transport::Broker>,
    remote: &mut RemoteView,
) -> anyhow::Result<()> {
    let (up, n_games, g) = games.totals();
    if n_games > 0 {
        tb.scalar("Games/up", step, up as f64)?;
        tb.scalar("Games/launches", step, g.launches as f64)?;
        tb.scalar("Games/hangs", step, g.hangs as f64)?;
        tb.scalar("Games/crashes", step, g.crashes as f64)?;
        tb.scalar("Games/desyncs", step, g.desyncs as f64)?;
        tb.scalar("Games/scheduled_restarts", step, g.scheduled_restarts as f64)?;
    }
    if let Some(b) = broker {
        remote.hear(cfg, Some(b));
        let connected = b.collectors().iter().filter(|(_, age)| *age < CONNECTED_WITHIN).count();
        tb.scalar("Transport/broker_restarts", step, b.restarts() as f64)?;
        tb.scalar("Transport/broker_connected", step, f64::from(u8::from(b.status().connected)))?;
        tb.scalar("Transport/broker_connection_drops", step, b.status().drops as f64)?;
        tb.scalar("Transport/collectors_connected", step, connected as f64)?;
        tb.scalar("Transport/remote_rejoins", step, remote.rejoins() as f64)?;
    }
    Ok(())
}

/// The collectors' games (`environment.tmi.launch`), as they report them:
/// the trainer's own collectors in `logs/collector<id>.game.json`, the
/// others in their `alive.<id>` records. Counts add up over incarnations.
#[derive(Debug, Default)]
struct Games {
    per: std::collections::BTreeMap<(u32, u32), rulka_config::GameCounters>,
}

impl Games {
    fn refresh(&mut self, run_dir: &Path, cfg: &Config, broker: Option<&crate::transport::Broker>) {
        for id in 0..cfg.collectors.count {
            let p =
                crate::run_dir::RunInfo::heartbeat_path(run_dir, id).with_extension("game.json");
            if let Some(g) = std::fs::read_to_string(p)
                .ok()
                .and_then(|t| serde_json::from_str::<rulka_config::GameCounters>(&t).ok())
            {
                self.per.insert((id, g.incarnation), g);
            }
        }
        for (a, _) in broker.map(crate::transport::Broker::collectors).unwrap_or_default() {
            if let Some(g) = a.game {
                self.per.insert((a.id, a.incarnation), g);
            }
        }
    }

    /// Sums over every collector incarnation; `up` is a count of collectors.
    fn totals(&self) -> (u64, u64, rulka_config::GameCounters) {
        let mut t = rulka_config::GameCounters::default();
        let mut latest: std::collections::BTreeMap<u32, bool> = std::collections::BTreeMap::new();
        for (&(id, _), g) in &self.per {
            t.launches += g.launches;
            t.hangs += g.hangs;
            t.crashes += g.crashes;
            t.desyncs += g.desyncs;
            t.scheduled_restarts += g.scheduled_restarts;
            t.failed_launches += g.failed_launches;
            latest.insert(id, g.up);
        }
        let up = latest.values().filter(|&&u| u).count() as u64;
        (up, latest.len() as u64, t)
    }

    /// ` | games U/N` once a collector reports a game.
    fn line(&self) -> String {
        let (up, n, t) = self.totals();
        if n == 0 {
            return String::new();
        }
        let mut s = format!(" | games {up}/{n}");
        let trouble = t.hangs + t.crashes + t.desyncs + t.failed_launches;
        if trouble > 0 || t.scheduled_restarts > 0 {
            s.push_str(&format!(
                " ({} launches: {} hung, {} crashed, {} desynced, {} failed to start, {} scheduled)",
                t.launches, t.hangs, t.crashes, t.desyncs, t.failed_launches, t.scheduled_restarts
            ));
        }
        s
    }
}

/// Prints a trainer message without tearing the progress bar.
fn sayer(bar: &ProgressBar, tty: bool) -> impl Fn(&str) + Clone + Send + 'static {
    let bar = bar.clone();
    move |m: &str| {
        if tty {
            bar.suspend(|| eprintln!("[rulka train] {m}"));
        } else {
            eprintln!("[rulka train] {m}");
        }
    }
}

/// What the trainer knows of each collector from what it delivers: its
/// incarnations (a new one is a restart, or a remote collector rejoining)
/// and when its last trajectory came.
#[derive(Debug, Default)]
struct RemoteView {
    seen: std::collections::BTreeMap<u32, Delivered>,
    /// Ids below this are the trainer's own (local) collectors.
    local: u32,
}

#[derive(Debug)]
struct Delivered {
    incarnation: u32,
    rejoins: u64,
    trajectories: u64,
    last: Instant,
}

/// A collector delivering within this long counts as delivering.
const DELIVERING_WITHIN: Duration = Duration::from_secs(30);
/// A collector heard from (`alive.<id>`) within this long counts as connected.
const CONNECTED_WITHIN: Duration = Duration::from_secs(15);

impl RemoteView {
    fn delivered(&mut self, id: u32, incarnation: u32) {
        self.note(id, incarnation, true);
    }

    fn note(&mut self, id: u32, incarnation: u32, trajectory: bool) {
        let d = self.seen.entry(id).or_insert(Delivered {
            incarnation,
            rejoins: 0,
            trajectories: 0,
            last: Instant::now() - DELIVERING_WITHIN * 2,
        });
        if incarnation > d.incarnation {
            d.incarnation = incarnation;
            d.rejoins += 1;
        }
        if trajectory {
            d.trajectories += 1;
            d.last = Instant::now();
        }
    }

    /// New incarnations of collectors the trainer does not start itself
    /// (ids from `collectors.count` on: remote collectors).
    fn rejoins(&self) -> u64 {
        self.remote_ids().map(|(_, d)| d.rejoins).sum()
    }

    fn remote_ids(&self) -> impl Iterator<Item = (&u32, &Delivered)> {
        self.seen.iter().filter(|(&id, _)| id >= self.local)
    }

    /// Takes in what the collectors say of themselves.
    fn hear(&mut self, cfg: &Config, broker: Option<&crate::transport::Broker>) {
        self.local = cfg.collectors.count;
        for (a, age) in broker.map(crate::transport::Broker::collectors).unwrap_or_default() {
            if age < CONNECTED_WITHIN {
                self.note(a.id, a.incarnation, false);
            }
        }
    }

    /// Per collector, for summary.json.
    fn summary(
        &mut self,
        cfg: &Config,
        broker: Option<&crate::transport::Broker>,
    ) -> Vec<serde_json::Value> {
        self.hear(cfg, broker);
        let heard: HashMap<u32, (rulka_transport::nats::Alive, Duration)> = broker
            .map(crate::transport::Broker::collectors)
            .unwrap_or_default()
            .into_iter()
            .map(|(a, age)| (a.id, (a, age)))
            .collect();
        let mut ids: Vec<u32> = self.seen.keys().chain(heard.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|id| {
                let d = self.seen.get(&id);
                let h = heard.get(&id);
                serde_json::json!({
                    "id": id,
                    "local": id < cfg.collectors.count,
                    "host": h.map(|(a, _)| a.host.clone()),
                    "incarnation": d.map(|d| d.incarnation).or(h.map(|(a, _)| a.incarnation)),
                    "rejoins": d.map_or(0, |d| d.rejoins),
                    "trajectories": d.map_or(0, |d| d.trajectories),
                    "last_trajectory_s_ago": d.filter(|d| d.trajectories > 0).map(|d| d.last.elapsed().as_secs_f64()),
                    "last_heard_s_ago": h.map(|(_, age)| age.as_secs_f64()),
                    "connected": h.is_some_and(|(_, age)| *age < CONNECTED_WITHIN),
                    "outbox_chunks": h.map(|(a, _)| a.queued),
                    "outbox_dropped_trajectories": h.map(|(a, _)| a.outbox_dropped),
                    "weights": h.and_then(|(a, _)| a.weights),
                })
            })
            .collect()
    }
}

/// The progress line's collectors part: local processes alive; with NATS,
/// the other collectors too (connected, delivering, rejoined), and the
/// server's state when it is not plain.
fn collectors_part(
    sup: &Supervisor,
    cfg: &Config,
    broker: Option<&crate::transport::Broker>,
    remote: &mut RemoteView,
) -> String {
    let local = format!("collectors {}/{}", sup.alive(), cfg.collectors.count);
    let Some(b) = broker else { return local };
    remote.hear(cfg, Some(b));
    let heard = b.collectors();
    let remote_ids: Vec<u32> = remote.remote_ids().map(|(&id, _)| id).collect();
    let mut out = local;
    if !remote_ids.is_empty() {
        let connected = heard
            .iter()
            .filter(|(a, age)| a.id >= cfg.collectors.count && *age < CONNECTED_WITHIN)
            .count();
        let delivering =
            remote.remote_ids().filter(|(_, d)| d.last.elapsed() < DELIVERING_WITHIN).count();
        out.push_str(&format!(
            " + remote {connected}/{} connected, {delivering} delivering",
            remote_ids.len()
        ));
        if remote.rejoins() > 0 {
            out.push_str(&format!(", {} rejoined", remote.rejoins()));
        }
    }
    let st = b.status();
    if !st.connected {
        out.push_str(&format!(" | broker unreachable {:.0} s", st.for_time.as_secs_f64()));
    }
    if b.restarts() > 0 {
        out.push_str(&format!(" | broker restarts {}", b.restarts()));
    }
    out
}
