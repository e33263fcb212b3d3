//! `rulka train`: the learner in this process, N collector processes (this
//! binary's `rulka collect`) feeding it over shared-memory rings, weight
//! snapshots published on a board after every update, a supervisor that
//! restarts crashed or hung collectors, periodic atomic checkpoints and ONNX
//! exports, TensorBoard scalars, and a clean shutdown on Ctrl-C / SIGTERM.
//!
//! Run directory layout:
//! `config.yaml` (snapshot), `run.json` (shared-memory location of the live
//! trainer), `state/` (learner state, see `rulka_learner::state`),
//! `weights.safetensors` and `model.onnx` (latest policy), `tensorboard/`,
//! `trajectories.csv` (one row per received trajectory), `summary.json`,
//! `logs/collector<i>.log`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _};
use indicatif::{ProgressBar, ProgressStyle};
use rulka_checkpoint::Meta;
use rulka_config::{
    ingredients, step_flags, Algorithm, Config, DpoDataMode, EnvKind, Grouping, Schedule,
};
use rulka_inference::collector::RunLayout;
use rulka_learner::algorithms::{scheduled, Learner, TrajBatch, UpdateStats};
use rulka_learner::offline::SavedTrajectory;
use rulka_learner::rewards::{rollout_rewards, Engineered, Rollout};
use rulka_learner::tensorboard::EventWriter;
use rulka_shm::chunk::Trajectory;
use rulka_shm::lock::ProcessLock;
use rulka_shm::ShmError;
use serde::{Deserialize, Serialize};
use tch::Device;

use crate::{load_config, BadInput};

/// Where a live trainer's shared memory is (`RUN_DIR/run.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    /// Id of this trainer incarnation's segments.
    pub run_id: u64,
    /// Directory of the segment files.
    pub shm_dir: PathBuf,
    /// The trainer's pid.
    pub trainer_pid: u32,
}

impl RunInfo {
    fn path(run: &Path) -> PathBuf {
        run.join("run.json")
    }

    /// Reads `RUN_DIR/run.json`.
    pub fn read(run: &Path) -> anyhow::Result<Self> {
        let p = Self::path(run);
        let text = std::fs::read_to_string(&p).map_err(|e| {
            BadInput(format!("{}: {e} (is a trainer running on this run directory?)", p.display()))
        })?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }

    fn write(&self, run: &Path) -> anyhow::Result<()> {
        rulka_checkpoint::write_atomic(
            &Self::path(run),
            serde_json::to_string_pretty(self)?.as_bytes(),
        )?;
        Ok(())
    }

    /// The run's shared-memory layout for `cfg`.
    pub fn layout(&self, cfg: &Config) -> RunLayout {
        RunLayout::new(cfg, &self.shm_dir, self.run_id)
    }

    /// Heartbeat file of collector `id`.
    pub fn heartbeat_path(run: &Path, id: u32) -> PathBuf {
        run.join("logs").join(format!("collector{id}.heartbeat"))
    }
}

/// Arguments of `rulka train`.
#[derive(Debug, Clone, clap::Args)]
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
}

fn rollout_gamma(cfg: &Config, frames: u64) -> f64 {
    let t = &cfg.training;
    let fixed = t.policy_rollout_gamma.unwrap_or(cfg.ppo.gamma);
    scheduled(fixed, &t.policy_rollout_gamma_schedule, t.global_schedule_speed, frames)
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
fn on_device(t: TrajBatch, device: Device) -> TrajBatch {
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
/// `to_json_line` the `--save-trajectories` line; and what it was.
fn prepare(
    cfg: &Config,
    t: Trajectory,
    frames: u64,
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
        engineered(cfg, frames),
        rollout_gamma(cfg, frames),
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

fn share(t: &TrajBatch) -> TrajBatch {
    TrajBatch {
        image: t.image.shallow_clone(),
        floats: t.floats.shallow_clone(),
        actions: t.actions.shallow_clone(),
        old_logp: t.old_logp.shallow_clone(),
        old_value: t.old_value.shallow_clone(),
        rewards: t.rewards.clone(),
        group: t.group,
    }
}

/// Trajectories waiting for the next update, per algorithm.
enum Pending {
    Ppo {
        trajs: Vec<TrajBatch>,
        steps: usize,
    },
    Grpo {
        groups: BTreeMap<u64, Vec<TrajBatch>>,
    },
    Dpo {
        buffer: VecDeque<(f64, TrajBatch)>,
        fresh: bool,
        online: bool,
        offline: Vec<(TrajBatch, TrajBatch)>,
        cursor: usize,
    },
}

impl Pending {
    fn new(cfg: &Config, device: Device) -> anyhow::Result<Self> {
        Ok(match cfg.training.algorithm {
            Algorithm::Ppo => Pending::Ppo { trajs: Vec::new(), steps: 0 },
            Algorithm::Grpo => Pending::Grpo { groups: BTreeMap::new() },
            Algorithm::Dpo => {
                let offline = match (&cfg.dpo.data_mode, &cfg.dpo.offline_pairs_jsonl) {
                    (DpoDataMode::Online, _) | (_, None) => Vec::new(),
                    (_, Some(path)) => {
                        if !path.is_file() {
                            return Err(BadInput(format!(
                                "dpo.offline_pairs_jsonl: {}: no such file",
                                path.display()
                            ))
                            .into());
                        }
                        let trajs = rulka_learner::offline::load_jsonl(cfg, path)?;
                        let pairs = rulka_learner::offline::offline_pairs(&trajs);
                        if pairs.is_empty() {
                            return Err(BadInput(format!(
                                "{}: {} trajectories give no pairs (a group needs two runs with different returns)",
                                path.display(),
                                trajs.len()
                            ))
                            .into());
                        }
                        eprintln!(
                            "[rulka train] DPO: {} offline pairs from {} trajectories in {}",
                            pairs.len(),
                            trajs.len(),
                            path.display()
                        );
                        pairs
                            .iter()
                            .map(|&(c, r)| {
                                (
                                    on_device(trajs[c].to_batch(cfg), device),
                                    on_device(trajs[r].to_batch(cfg), device),
                                )
                            })
                            .collect()
                    }
                };
                Pending::Dpo {
                    buffer: VecDeque::new(),
                    fresh: false,
                    online: cfg.dpo.data_mode != DpoDataMode::Offline,
                    offline,
                    cursor: 0,
                }
            }
        })
    }

    fn add(&mut self, cfg: &Config, t: TrajBatch, ret: f64) {
        match self {
            Pending::Ppo { trajs, steps } => {
                *steps += t.len();
                trajs.push(t);
            }
            Pending::Grpo { groups } => {
                let key = match cfg.grpo.grouping {
                    Grouping::SameTrack => t.group,
                    Grouping::Any => 0,
                };
                groups.entry(key).or_default().push(t);
            }
            Pending::Dpo { buffer, fresh, .. } => {
                buffer.push_back((ret, t));
                while buffer.len() > cfg.dpo.pair_buffer_max.max(2) as usize {
                    buffer.pop_front();
                }
                *fresh = true;
            }
        }
    }

    /// Runs an update if enough data is pending.
    fn update(
        &mut self,
        cfg: &Config,
        learner: &mut Learner,
    ) -> anyhow::Result<Option<UpdateStats>> {
        match self {
            Pending::Ppo { trajs, steps } => {
                if *steps < cfg.ppo.rollout_steps_per_update as usize {
                    return Ok(None);
                }
                let batch = std::mem::take(trajs);
                *steps = 0;
                learner.ppo_update(&batch).map(Some)
            }
            Pending::Grpo { groups } => {
                let k = cfg.grpo.group_size as usize;
                let Some(key) = groups.iter().find(|(_, v)| v.len() >= k).map(|(k, _)| *k) else {
                    return Ok(None);
                };
                let group = groups.remove(&key).unwrap_or_default();
                learner.grpo_update(&group).map(Some)
            }
            Pending::Dpo { buffer, fresh, online, offline, cursor } => {
                if !*fresh {
                    return Ok(None);
                }
                *fresh = false;
                let mut pairs = Vec::new();
                if *online {
                    if let Some(p) = online_pair(buffer) {
                        pairs.push(p);
                    }
                }
                // Offline mode: one stored pair per received trajectory; `both`: online + offline.
                if !offline.is_empty() {
                    let (c, r) = &offline[*cursor % offline.len()];
                    pairs.push((share(c), share(r)));
                    *cursor += 1;
                }
                if pairs.is_empty() {
                    return Ok(None);
                }
                learner.dpo_update(&pairs).map(Some)
            }
        }
    }
}

/// Best and worst return among the newest trajectory's group, if they differ.
fn online_pair(buffer: &VecDeque<(f64, TrajBatch)>) -> Option<(TrajBatch, TrajBatch)> {
    let (_, newest) = buffer.back()?;
    let g = newest.group;
    let mut same = buffer.iter().filter(|(_, t)| t.group == g);
    let first = same.next()?;
    let (mut best, mut worst) = (first, first);
    for x in same {
        if x.0 > best.0 {
            best = x;
        }
        if x.0 < worst.0 {
            worst = x;
        }
    }
    (best.0 > worst.0).then(|| (share(&best.1), share(&worst.1)))
}

/// One collector slot of the supervisor.
struct Slot {
    child: Option<Child>,
    incarnation: u32,
    started: Instant,
    next_start: Option<Instant>,
    backoff: Duration,
    crashes: u32,
    hung: u32,
}

struct Supervisor {
    run: PathBuf,
    ort_lib: Option<PathBuf>,
    slots: Vec<Slot>,
    heartbeat_timeout: Duration,
}

impl Supervisor {
    fn new(run: &Path, ort_lib: Option<&Path>, n: u32, heartbeat_timeout: Duration) -> Self {
        let slots = (0..n)
            .map(|_| Slot {
                child: None,
                incarnation: 0,
                started: Instant::now(),
                next_start: Some(Instant::now()),
                backoff: Duration::from_secs(1),
                crashes: 0,
                hung: 0,
            })
            .collect();
        Self {
            run: run.to_path_buf(),
            ort_lib: ort_lib.map(Path::to_path_buf),
            slots,
            heartbeat_timeout,
        }
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("locating the rulka binary")?;
        let logs = self.run.join("logs");
        std::fs::create_dir_all(&logs)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("collector{i}.log")))?;
        let slot = &mut self.slots[i];
        let hb = RunInfo::heartbeat_path(&self.run, i as u32);
        let _ = std::fs::write(&hb, "start");
        let mut cmd = Command::new(exe);
        if let Some(l) = &self.ort_lib {
            cmd.arg("--ort-lib").arg(l);
        }
        cmd.arg("collect")
            .arg("--run")
            .arg(&self.run)
            .arg("--id")
            .arg(i.to_string())
            .arg("--incarnation")
            .arg(slot.incarnation.to_string())
            .env("RULKA_TRAINER_PID", std::process::id().to_string())
            .env("OMP_NUM_THREADS", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        slot.child = Some(cmd.spawn().context("starting a collector process")?);
        slot.started = Instant::now();
        slot.next_start = None;
        Ok(())
    }

    /// Reaps exited collectors, kills hung ones, restarts due ones. Returns
    /// the slots whose process ended (their partial trajectories must go).
    fn tick(&mut self, stopping: bool) -> anyhow::Result<Vec<u32>> {
        let mut ended = Vec::new();
        for i in 0..self.slots.len() {
            let hb = RunInfo::heartbeat_path(&self.run, i as u32);
            let timeout = self.heartbeat_timeout;
            let slot = &mut self.slots[i];
            if let Some(child) = slot.child.as_mut() {
                let mut exited = child.try_wait()?.map(|s| s.to_string());
                if exited.is_none() && !stopping {
                    let age = std::fs::metadata(&hb)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok())
                        .unwrap_or_default();
                    if age > timeout && slot.started.elapsed() > timeout {
                        eprintln!(
                            "\n[rulka train] collector {i} silent for {:.0} s: killing it (hung)",
                            age.as_secs_f64()
                        );
                        let _ = child.kill();
                        let status = child.wait()?;
                        slot.hung += 1;
                        exited = Some(format!("killed as hung ({status})"));
                    }
                }
                if let Some(how) = exited {
                    slot.child = None;
                    ended.push(i as u32);
                    if !stopping {
                        slot.crashes += 1;
                        if slot.started.elapsed() > Duration::from_secs(60) {
                            slot.backoff = Duration::from_secs(1);
                        }
                        eprintln!(
                            "\n[rulka train] collector {i} exited ({how}); restarting in {:.0} s (see logs/collector{i}.log)",
                            slot.backoff.as_secs_f64()
                        );
                        slot.next_start = Some(Instant::now() + slot.backoff);
                        slot.backoff = (slot.backoff * 2).min(Duration::from_secs(30));
                        slot.incarnation += 1;
                    }
                }
            }
            if !stopping && self.slots[i].child.is_none() {
                if let Some(t) = self.slots[i].next_start {
                    if Instant::now() >= t {
                        self.spawn(i)?;
                    }
                }
            }
        }
        Ok(ended)
    }

    fn alive(&self) -> usize {
        self.slots.iter().filter(|s| s.child.is_some()).count()
    }

    /// SIGTERM to every collector, up to `grace` for them to exit, then SIGKILL.
    fn shutdown(&mut self, grace: Duration) {
        for s in &mut self.slots {
            if let Some(c) = &s.child {
                // SIGTERM: the collector abandons its rollout and detaches.
                let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
            }
        }
        let deadline = Instant::now() + grace;
        for s in &mut self.slots {
            if let Some(mut c) = s.child.take() {
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) if Instant::now() >= deadline => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break;
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
        }
    }
}

impl Drop for Supervisor {
    /// An error path out of the training loop still stops the collectors.
    fn drop(&mut self) {
        self.shutdown(Duration::from_secs(2));
    }
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
            std::process::exit(130);
        }
        std::thread::sleep(Duration::from_millis(50));
    });
    let (mut cfg, run_dir, resuming) = prepare_run_dir(args)?;
    if let Some(n) = args.collectors {
        cfg.collectors.count = n;
    }
    if cfg.collectors.count == 0 {
        return Err(BadInput("collectors.count is 0: nothing would feed the learner".into()).into());
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
        Learner::new(&cfg, device, cfg.training.seed)
    };

    // Shared memory of this incarnation; a killed predecessor's is removed.
    if let Ok(old) = RunInfo::read(&run_dir) {
        if old.shm_dir.starts_with(shm_root()) && old.shm_dir.exists() {
            let _ = std::fs::remove_dir_all(&old.shm_dir);
            eprintln!(
                "[rulka train] removed stale shared memory of a previous trainer: {}",
                old.shm_dir.display()
            );
        }
    }
    let run_id =
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
    let info = RunInfo {
        run_id,
        shm_dir: shm_root().join(format!("rulka-{run_id:016x}")),
        trainer_pid: std::process::id(),
    };
    std::fs::create_dir_all(&info.shm_dir)
        .with_context(|| format!("creating {}", info.shm_dir.display()))?;
    let layout = info.layout(&cfg);
    let result = (|| {
        let mut rings = (0..cfg.collectors.count)
            .map(|i| rulka_shm::ring::create(&layout.ring(i)))
            .collect::<Result<Vec<_>, _>>()
            .context("creating the collectors' rings")?;
        let mut board = rulka_shm::board::create_writer(&layout.board())
            .context("creating the weight board")?;
        info.write(&run_dir)?;
        publish(&cfg, &learner, &mut board)?;
        let out = train_loop(
            &cfg,
            args,
            &run_dir,
            ort_lib,
            &mut learner,
            layout.chunk,
            &mut rings,
            &mut board,
        );
        for r in rings {
            let _ = r.remove();
        }
        let _ = board.remove();
        out
    })();
    let _ = std::fs::remove_dir_all(&info.shm_dir);
    let _ = std::fs::remove_file(RunInfo::path(&run_dir));
    lock.release();
    result
}

fn shm_root() -> PathBuf {
    let dev = PathBuf::from("/dev/shm");
    if dev.is_dir() {
        dev
    } else {
        std::env::temp_dir()
    }
}

fn prepare_run_dir(args: &TrainArgs) -> anyhow::Result<(Config, PathBuf, bool)> {
    match (&args.config, &args.resume) {
        (Some(_), Some(_)) => Err(BadInput(
            "--config and --resume: a resumed run uses its own config snapshot; pass one of them"
                .into(),
        )
        .into()),
        (None, None) => {
            Err(BadInput("pass --config FILE (a new run) or --resume RUN_DIR".into()).into())
        }
        (None, Some(dir)) => {
            let snap = dir.join("config.yaml");
            if !dir.is_dir() {
                return Err(
                    BadInput(format!("--resume {}: no such run directory", dir.display())).into()
                );
            }
            if !snap.is_file() {
                return Err(BadInput(format!(
                    "--resume {}: not a rulka run (no config.yaml)",
                    dir.display()
                ))
                .into());
            }
            let cfg = load_config(&snap)?;
            let latest = dir.join("state").join("LATEST");
            if !latest.is_file() && !args.fresh {
                return Err(BadInput(format!(
                    "--resume {}: no checkpoint ({} is missing); pass --fresh to start this run over",
                    dir.display(),
                    latest.display()
                ))
                .into());
            }
            Ok((cfg, dir.clone(), true))
        }
        (Some(path), None) => {
            let cfg = load_config(path)?;
            let dir = args.run_dir.clone().unwrap_or_else(|| cfg.training.run_dir.clone());
            if dir.join("state").join("LATEST").exists() {
                if !args.fresh {
                    return Err(BadInput(format!(
                        "{} already holds a run; continue it with `--resume {}` or start over with --fresh",
                        dir.display(),
                        dir.display()
                    ))
                    .into());
                }
                for sub in ["state", "tensorboard"] {
                    let _ = std::fs::remove_dir_all(dir.join(sub));
                }
                for f in ["trajectories.csv", "summary.json", "model.onnx", "weights.safetensors"] {
                    let _ = std::fs::remove_file(dir.join(f));
                }
            }
            std::fs::create_dir_all(&dir)
                .map_err(|e| BadInput(format!("creating {}: {e}", dir.display())))?;
            let mut snap_cfg = cfg.clone();
            snap_cfg.training.run_dir = dir.clone();
            rulka_checkpoint::write_atomic(
                &dir.join("config.yaml"),
                snap_cfg.to_yaml().as_bytes(),
            )?;
            Ok((snap_cfg, dir, false))
        }
    }
}

fn publish(
    cfg: &Config,
    learner: &Learner,
    board: &mut rulka_shm::board::Writer,
) -> anyhow::Result<bool> {
    let w = learner.network().to_weights();
    if !w.all_finite() {
        eprintln!("\n[rulka train] weights are not finite: not published");
        return Ok(false);
    }
    let bytes = w.to_safetensors(&Meta::new(cfg, learner.frames))?;
    board.publish(learner.updates, &bytes)?;
    Ok(true)
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

#[allow(clippy::too_many_arguments)]
fn train_loop(
    cfg: &Config,
    args: &TrainArgs,
    run_dir: &Path,
    ort_lib: Option<&Path>,
    learner: &mut Learner,
    chunk: rulka_shm::chunk::ChunkLayout,
    rings: &mut [rulka_shm::ring::Consumer],
    board: &mut rulka_shm::board::Writer,
) -> anyhow::Result<()> {
    let mut re = rulka_shm::chunk::Reassembler::new(chunk);
    let mut tb = EventWriter::create(&run_dir.join("tensorboard"))?;
    let mut csv = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join("trajectories.csv"))
        .context("opening trajectories.csv")?;
    if csv.metadata()?.len() == 0 {
        writeln!(csv, "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s")?;
    }
    let hb_timeout = Duration::from_millis(u64::from(cfg.collectors.heartbeat_timeout_ms));
    let mut sup = Supervisor::new(run_dir, ort_lib, cfg.collectors.count, hb_timeout);
    let started = Instant::now();
    let start_frames = learner.frames;
    let max_frames = args.max_frames.or(cfg.training.max_frames);
    let max_minutes = args.max_minutes.or(cfg.training.max_minutes);
    let mut pending = Pending::new(cfg, learner.network().var_store().device())?;
    let mut counters = Counters::default();
    let mut last_ids: HashMap<(u32, u64), u64> = HashMap::new();
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
        "[rulka train] {} on the {} with {} collector(s); run directory {}",
        format!("{:?}", cfg.training.algorithm).to_uppercase(),
        match cfg.environment.kind {
            EnvKind::Sim => format!(
                "simulator ({:?} tracks {:?})",
                cfg.environment.sim.track, cfg.environment.sim.track_seeds
            ),
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
    let mut buf = Vec::new();
    let stop_reason;
    loop {
        if rulka_shm::signal::count() > 0 {
            stop_reason = "interrupted";
            break;
        }
        if max_frames.is_some_and(|m| learner.frames >= m) {
            stop_reason = "max frames reached";
            break;
        }
        if max_minutes.is_some_and(|m| started.elapsed().as_secs_f64() >= m * 60.0) {
            stop_reason = "time limit reached";
            break;
        }
        if last_supervise.elapsed() >= Duration::from_millis(200) {
            // A dead collector's partial trajectory is not dropped here: its
            // ring may still hold committed chunks of trajectories it
            // completed. The reassembler discards the partial when the
            // restarted collector's first chunk (a new trajectory id) arrives.
            sup.tick(false)?;
            last_supervise = Instant::now();
        }
        let mut got = 0;
        for ring in rings.iter_mut() {
            for _ in 0..64 {
                if !ring.pop(&mut buf) {
                    break;
                }
                got += 1;
                let Some(t) = re.push(&buf).context("decoding a chunk")? else { continue };
                let key = (t.collector, t.trajectory >> 40);
                let seq = t.trajectory & ((1 << 40) - 1);
                match last_ids.get(&key) {
                    Some(&prev) if seq <= prev => counters.duplicate_trajectories += 1,
                    Some(&prev) => counters.missing_trajectories += seq - prev - 1,
                    None => {}
                }
                last_ids.insert(key, seq.max(last_ids.get(&key).copied().unwrap_or(0)));
                counters.trajectories_received += 1;
                learner.frames += t.steps.len() as u64;
                let (saved, s) = prepare(cfg, t, learner.frames, learner.updates);
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
                    &format!("{kind}_race_finished_{suffix}sim{}", s.seed),
                    step,
                    f64::from(u8::from(s.finished)),
                )?;
                if let Some(rt) = s.race_time_s {
                    tb.scalar(&format!("{kind}_race_time_{suffix}sim{}", s.seed), step, rt)?;
                    counters.best_race_time_s =
                        Some(counters.best_race_time_s.map_or(rt, |b: f64| b.min(rt)));
                }
                tb.scalar(&format!("Race/{kind}_progress"), step, s.progress_frac)?;
                tb.scalar(&format!("Race/{kind}_return"), step, s.ret)?;
                if s.finished {
                    counters.finishes += 1;
                    counters.first_finish_frame.get_or_insert(learner.frames);
                }
                if s.eval {
                    counters.eval_trajectories += 1;
                    window_eval.add(&s);
                } else {
                    counters.trajectories_trained += 1;
                    window.add(&s);
                    all.add(&s);
                    pending_steps += s.steps;
                    if let Some(f) = jsonl.as_mut() {
                        writeln!(f, "{}", saved.to_json_line())?;
                    }
                    let batch =
                        on_device(saved.to_batch(cfg), learner.network().var_store().device());
                    pending.add(cfg, batch, s.ret);
                    // Update as soon as enough data is pending, so each update
                    // sees the configured amount (not whatever queued meanwhile).
                    if let Some(st) = pending.update(cfg, learner)? {
                        counters.updates += 1;
                        counters.skipped_optimizer_steps += st.skipped;
                        log_update(&mut tb, cfg, learner, &st, pending_steps)?;
                        tb.scalar(
                            "Training/policy_lag",
                            learner.frames as i64,
                            window.mean(window.lag),
                        )?;
                        pending_steps = 0;
                        publish(cfg, learner, board)?;
                        last_stats = Some(st);
                    }
                }
            }
        }
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
            last_perf = (Instant::now(), learner.frames);
        }
        if last_print.elapsed() >= Duration::from_millis(if tty { 250 } else { 15_000 }) {
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            if window_eval.n > 0 {
                last_eval = window_eval.clone();
            }
            let msg = format!(
                "frames {} ({:.0}/s) | updates {} | return {:.2} | progress {:.0}% | finished {}/{} | eval progress {:.0}% | lag {:.1} | loss {:.3} | collectors {}/{}",
                learner.frames,
                (learner.frames - start_frames) as f64 / secs,
                learner.updates,
                window.mean(window.ret),
                100.0 * window.mean(window.progress),
                window.finished,
                window.n,
                100.0 * last_eval.mean(last_eval.progress),
                window.mean(window.lag),
                last_stats.as_ref().map_or(f64::NAN, |s| s.loss),
                sup.alive(),
                cfg.collectors.count,
            );
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
        if got == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    bar.finish_and_clear();
    eprintln!("[rulka train] stopping ({stop_reason}): collectors finish, final checkpoint");
    sup.shutdown(Duration::from_secs(5));
    // Trajectories the collectors completed before stopping are still counted
    // (received, not trained on): nothing committed goes unaccounted.
    for (i, ring) in rings.iter_mut().enumerate() {
        while ring.pop(&mut buf) {
            if re.push(&buf).context("decoding a chunk")?.is_some() {
                counters.trajectories_received += 1;
                counters.unused_at_shutdown += 1;
            }
        }
        counters.ring_drops += ring.stats().dropped;
        re.drop_collector(i as u32);
    }
    let rs = re.stats();
    counters.incomplete_dropped = rs.dropped_incomplete;
    counters.orphan_chunks = rs.orphan_chunks;
    counters.collector_restarts = sup.slots.iter().map(|s| u64::from(s.crashes)).sum();
    counters.hung_collectors_killed = sup.slots.iter().map(|s| u64::from(s.hung)).sum();
    checkpoint(cfg, run_dir, learner)?;
    tb.flush()?;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
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
        "counters": counters,
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
    println!(
        "  collectors    {} restarts ({} hung)",
        counters.collector_restarts, counters.hung_collectors_killed
    );
    println!("  wrote         {}/model.onnx, weights.safetensors, state/, tensorboard/, trajectories.csv, summary.json", run_dir.display());
    Ok(())
}
