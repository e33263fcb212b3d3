//! The collector loop: environment ↔ [`PolicyEngine`] ↔ a chunk sink (the
//! run's shared-memory ring, or NATS).
//!
//! A collector drives rollouts one after another: it cycles the configured
//! track seeds, or the game's maps ([`prompts`]; each a GRPO "prompt": all
//! runs of a prompt share the track and the start state, and its id travels
//! with every chunk as the group id),
//! samples actions on ONNX Runtime, and writes each trajectory to its ring as
//! chunks of `collectors.chunk_steps` steps, each labelled with the policy
//! version that produced it. Every `collectors.eval_every_n_rollouts`-th
//! rollout is greedy (flagged, for evaluation).
//!
//! A trajectory's last step is its terminal state (flag
//! [`step_flags::TERMINAL`]); its action is recorded but not executed, as in
//! the original's buffers. An observation or reward ingredient that is not
//! finite quarantines the trajectory: it is abandoned (never completed on the
//! ring, so the learner drops it), counted, and the field named.
//!
//! ```no_run
//! use rulka_config::Config;
//! use rulka_env::SimEnv;
//! use rulka_collector::{Collector, CollectorOptions, RunLayout};
//! use rulka_inference::{EngineOptions, ModelSource, PolicyEngine};
//!
//! let cfg = Config::default();
//! let layout = RunLayout::new(&cfg, "/dev/shm/rulka-run".as_ref(), 42);
//! let rt = rulka_inference::load_runtime(None)?;
//! let engine = PolicyEngine::new(rt, &cfg, ModelSource::File("model.onnx".into()), 0,
//!     EngineOptions { greedy: false, seed: 1 })?;
//! let opts = CollectorOptions { id: 0, incarnation: 0, max_rollouts: Some(3), heartbeat: None, game_log: None };
//! let mut c = Collector::attach(&cfg, &layout, SimEnv::new(&cfg), engine, opts)?;
//! let stats = c.run(|| false)?;
//! println!("{stats:?}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[cfg(unix)]
use rulka_config::Backpressure as BpConfig;
use rulka_config::{float_layout, ingredients, step_flags, Config, EnvKind};
use rulka_env::{EnvError, Environment, Status};
use rulka_network::Architecture;
#[cfg(unix)]
use rulka_shm::{Backpressure, BoardSpec, RingSpec, Schema};
use rulka_shm::{ChunkHeader, ChunkLayout, ShmError, Steps};
#[cfg(unix)]
use rulka_transport::ShmChunkSink;
use rulka_transport::{ChunkSink, Sent, TransportError};

use rulka_inference::{InferenceError, PolicyEngine};

use crate::curriculum::TrackChooser;

/// Shared-memory names and geometry of one training run: what `rulka train`
/// creates and `rulka collect` attaches to.
#[derive(Debug, Clone)]
pub struct RunLayout {
    /// Directory of the segment files (tmpfs).
    pub shm_dir: PathBuf,
    /// The run's id (segments of another run are never attached).
    pub run_id: u64,
    /// Chunk geometry.
    pub chunk: ChunkLayout,
    /// Chunks per ring.
    pub ring_chunks: usize,
    /// Largest weight snapshot.
    pub board_capacity: usize,
}

impl RunLayout {
    /// The chunk geometry of a run of `cfg` (what every transport carries).
    pub fn chunk_layout(cfg: &Config) -> ChunkLayout {
        let arch = Architecture::from_config(cfg);
        ChunkLayout {
            frame_len: arch.image.as_ref().map_or(1, |i| i.height * i.width),
            n_floats: arch.float_dim,
            n_heads: arch.n_heads,
            n_ingredients: ingredients::COUNT,
            max_steps: cfg.collectors.chunk_steps.max(1) as usize,
        }
    }

    /// The layout of a run of `cfg` with segments in `shm_dir`.
    pub fn new(cfg: &Config, shm_dir: &Path, run_id: u64) -> Self {
        let arch = Architecture::from_config(cfg);
        let weights: usize =
            arch.tensors().iter().map(|t| 4 * t.shape.iter().product::<usize>()).sum();
        Self {
            shm_dir: shm_dir.to_path_buf(),
            run_id,
            chunk: Self::chunk_layout(cfg),
            ring_chunks: cfg.collectors.ring_chunks.max(2) as usize,
            board_capacity: weights + (256 << 10),
        }
    }

    /// The ring of collector `id`.
    #[cfg(unix)]
    pub fn ring(&self, id: u32) -> RingSpec {
        RingSpec::new(
            &self.shm_dir,
            &format!("ring{id}"),
            self.run_id,
            self.chunk.schema(),
            self.ring_chunks,
            self.chunk.max_record(),
        )
    }

    /// The weight board (safetensors snapshots, version = learner updates).
    #[cfg(unix)]
    pub fn board(&self) -> BoardSpec {
        let schema = Schema { fields: Vec::new(), params: vec![("weights.safetensors".into(), 1)] };
        BoardSpec::new(&self.shm_dir, "weights", self.run_id, schema, self.board_capacity)
    }
}

/// Errors of the collector loop.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// The environment failed (game disconnected, protocol error…).
    #[error("environment: {0}")]
    Env(EnvError),
    /// The policy engine failed.
    #[error("policy: {0}")]
    Inference(InferenceError),
    /// Shared memory failed (segment missing, schema drift…).
    #[error("shared memory: {0}")]
    Shm(ShmError),
    /// The transport failed (NATS connection, authorization…).
    #[error("transport: {0}")]
    Transport(TransportError),
    /// The learner holding the ring's consumer end is gone.
    #[error("the learner (ring consumer) is gone; stopping")]
    LearnerGone,
    /// `tmi check`: the config lists no maps.
    #[error("the config lists no maps (environment.tmi.maps): pass --config with the run's maps")]
    NoMaps,
    /// `tmi check --launch` without a launch command in the config.
    #[error("--launch: the config has no environment.tmi.launch (the command that starts a game)")]
    NoLaunchCommand,
    /// The trainer published no weight snapshot in time.
    #[error("no weight snapshot published within {waited_s} s (is the trainer running?)")]
    NoWeights {
        /// How long it waited.
        waited_s: u64,
    },
}

impl CollectorError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::Env(e) => e.kind(),
            Self::Inference(e) => e.kind(),
            Self::Shm(e) => e.kind(),
            Self::Transport(e) => e.kind(),
            Self::NoMaps | Self::NoLaunchCommand => K::BadInput,
            Self::LearnerGone | Self::NoWeights { .. } => K::Unavailable,
        }
    }
}

// The wrapped error is in the message, not a `source()` as well: a caller
// printing the chain (`{:#}`) would say it twice.
impl From<EnvError> for CollectorError {
    fn from(e: EnvError) -> Self {
        Self::Env(e)
    }
}

impl From<InferenceError> for CollectorError {
    fn from(e: InferenceError) -> Self {
        Self::Inference(e)
    }
}

impl From<ShmError> for CollectorError {
    fn from(e: ShmError) -> Self {
        Self::Shm(e)
    }
}

/// The ring back-pressure `collectors.backpressure` asks for.
#[cfg(unix)]
pub fn ring_backpressure(cfg: &Config) -> Backpressure {
    match cfg.collectors.backpressure {
        BpConfig::Block => Backpressure::Block {
            timeout: Duration::from_millis(u64::from(cfg.collectors.block_timeout_ms)),
        },
        BpConfig::DropOldest => Backpressure::DropOldest,
    }
}

/// The sampling engine of collector `opts.id` in `opts.incarnation`
/// (seeded by [`sampling_seed`]) on a weight snapshot: `bytes`
/// (safetensors) of `version`, named `label` in errors.
pub fn snapshot_engine(
    rt: rulka_inference::Runtime,
    cfg: &Config,
    bytes: &[u8],
    version: u64,
    label: &str,
    opts: &CollectorOptions,
) -> Result<PolicyEngine, CollectorError> {
    let onnx = rulka_export::export_from_safetensors(cfg, bytes, label).map_err(|e| {
        InferenceError::Session { model: label.to_string(), message: e.to_string() }
    })?;
    Ok(PolicyEngine::new(
        rt,
        cfg,
        rulka_inference::ModelSource::Bytes(onnx),
        version,
        rulka_inference::EngineOptions {
            greedy: false,
            seed: sampling_seed(cfg, opts.id, opts.incarnation),
        },
    )?)
}

/// The sampling seed of collector `id` in its `incarnation`: distinct for
/// every slot and restart of a run, reproducible from the run's seed.
pub fn sampling_seed(cfg: &Config, id: u32, incarnation: u32) -> u64 {
    cfg.training.seed ^ (u64::from(id) << 32) ^ u64::from(incarnation)
}

/// Identity and limits of one collector.
#[derive(Debug, Clone)]
pub struct CollectorOptions {
    /// Collector index (its ring).
    pub id: u32,
    /// How many times this collector slot was (re)started; keeps trajectory
    /// ids unique across restarts.
    pub incarnation: u32,
    /// Stop after this many rollouts (`None`: until told to stop).
    pub max_rollouts: Option<u64>,
    /// File whose modification time is refreshed (at most every 500 ms) while
    /// the loop makes progress; the supervisor reads it to detect a hang.
    pub heartbeat: Option<PathBuf>,
    /// Where a game this collector launches writes its output
    /// (`environment.tmi.launch`; `None`: the collector's own).
    pub game_log: Option<PathBuf>,
}

/// Counters of a collector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectorStats {
    /// Rollouts driven to their end and written.
    pub rollouts: u64,
    /// Of which evaluation (greedy) rollouts.
    pub eval_rollouts: u64,
    /// Of which finished the race.
    pub finished: u64,
    /// Steps written.
    pub steps: u64,
    /// Chunks written.
    pub chunks: u64,
    /// Trajectories abandoned for non-finite observations or ingredients.
    pub quarantined: u64,
    /// What the last quarantine was about (`field` and step).
    pub last_quarantine: Option<String>,
    /// Times a full transport held the collector's chunks back: mid-run
    /// (its chunks then wait in the collector while the run goes on), or at
    /// a run's end (the collector waits for room).
    pub ring_full_waits: u64,
    /// Exploration rollouts that replayed a track the curriculum chose
    /// (`collectors.curriculum`), not the cycle's next (under GRPO grouped
    /// by track: the groups, counted at their first run).
    pub replays: u64,
    /// Rollouts abandoned because of a stop request: mid-drive, or with a
    /// chunk (its last one too) that a full transport still held back.
    pub abandoned: u64,
}

/// Refreshes a file's modification time (at most every 500 ms) while the
/// collector makes progress; the supervisor reads it to detect a hang.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    path: Option<PathBuf>,
    last: Instant,
}

impl Heartbeat {
    pub(crate) fn new(path: Option<PathBuf>) -> Self {
        Self { path, last: Instant::now() - Duration::from_secs(1) }
    }

    pub(crate) fn beat(&mut self, steps: u64) {
        if self.last.elapsed() < Duration::from_millis(500) {
            return;
        }
        self.last = Instant::now();
        if let Some(p) = &self.path {
            // Rewriting the file updates its mtime; a failure only delays detection.
            let _ = std::fs::write(p, steps.to_string());
        }
    }
}

/// One collector: an environment, a policy engine and where its chunks go.
pub struct Collector<E: Environment> {
    cfg: Config,
    env: E,
    engine: PolicyEngine,
    sink: Box<dyn ChunkSink>,
    layout: ChunkLayout,
    opts: CollectorOptions,
    stats: CollectorStats,
    float_names: Vec<(&'static str, usize)>,
    heart: Heartbeat,
    last_status: Instant,
    next_rollout: u64,
    explo_rollouts: u64,
    tracks: TrackChooser,
    /// Chunks of the rollout in flight that a full transport could not
    /// take yet, oldest first: they wait here while the run goes on.
    held: VecDeque<(ChunkHeader, Steps)>,
}

/// Why [`Collector::run_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `stop()` said stop.
    Stopped,
    /// `max_rollouts` were driven.
    Limit,
    /// `between()` said so, between two rollouts.
    Between,
}

/// How often a collector prints its status line.
const STATUS_EVERY: Duration = Duration::from_secs(30);

impl<E: Environment + std::fmt::Debug> std::fmt::Debug for Collector<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("env", &self.env)
            .field("opts", &self.opts)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<E: Environment> Collector<E> {
    /// Attaches to the run's ring for `opts.id` and the weight board in
    /// shared memory (the engine follows new snapshots from then on).
    #[cfg(unix)]
    pub fn attach(
        cfg: &Config,
        run: &RunLayout,
        env: E,
        mut engine: PolicyEngine,
        opts: CollectorOptions,
    ) -> Result<Self, CollectorError> {
        let init = Duration::from_secs(10);
        let producer =
            rulka_shm::RingProducer::attach(&run.ring(opts.id), init, ring_backpressure(cfg))?;
        let board = rulka_shm::BoardReader::open(&run.board(), init)?;
        engine.follow(board, cfg);
        Self::new(
            cfg,
            env,
            engine,
            Box::new(ShmChunkSink::new(producer, run.chunk)),
            run.chunk,
            opts,
        )
    }

    /// A collector writing chunks of `layout` to `sink` (the engine follows
    /// its weights however the caller arranged it).
    pub fn new(
        cfg: &Config,
        env: E,
        engine: PolicyEngine,
        sink: Box<dyn ChunkSink>,
        layout: ChunkLayout,
        opts: CollectorOptions,
    ) -> Result<Self, CollectorError> {
        let (frame_len, n_floats) = env.obs_sizes();
        if (frame_len, n_floats) != (layout.frame_len, layout.n_floats) {
            return Err(CollectorError::Env(EnvError::State(format!(
                "environment observes {frame_len}-byte frames and {n_floats} floats; the run's network takes {} and {}",
                layout.frame_len, layout.n_floats
            ))));
        }
        let heart = Heartbeat::new(opts.heartbeat.clone());
        let tracks = TrackChooser::new(
            cfg,
            prompts(cfg).len(),
            opts.id,
            sampling_seed(cfg, opts.id, opts.incarnation),
        );
        Ok(Self {
            cfg: cfg.clone(),
            env,
            engine,
            sink,
            layout,
            opts,
            stats: CollectorStats::default(),
            float_names: float_layout(cfg),
            heart,
            held: VecDeque::new(),
            last_status: Instant::now(),
            next_rollout: 0,
            explo_rollouts: 0,
            tracks,
        })
    }

    /// The transport's counters.
    pub fn sink_stats(&self) -> rulka_transport::SinkStats {
        self.sink.stats()
    }

    /// Tries for up to `limit` to deliver what the sink still holds (a NATS
    /// outbox while the server was out of reach); returns the chunks still
    /// undelivered.
    pub fn flush(&mut self, limit: Duration) -> u64 {
        self.sink.flush(limit)
    }

    /// The environment.
    pub fn env(&self) -> &E {
        &self.env
    }

    /// Counters so far.
    pub fn stats(&self) -> &CollectorStats {
        &self.stats
    }

    /// The policy engine (for its counters).
    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    /// Runs rollouts until `stop()` returns true (checked every step; the
    /// current rollout is abandoned), `max_rollouts` is reached, or an error.
    pub fn run(&mut self, stop: impl FnMut() -> bool) -> Result<CollectorStats, CollectorError> {
        self.run_until(stop, || false).map(|(s, _)| s)
    }

    /// As [`Collector::run`], and also ends — between two rollouts — when
    /// `between()` returns true (a game's scheduled restart). Rollout
    /// numbering goes on across calls and environments
    /// ([`Collector::replace_env`]); a rollout an error cut short keeps its
    /// number if it sent chunks (they stay an incomplete trajectory, never
    /// trained on, which the trainer counts incomplete, not missing).
    pub fn run_until(
        &mut self,
        mut stop: impl FnMut() -> bool,
        mut between: impl FnMut() -> bool,
    ) -> Result<(CollectorStats, Ended), CollectorError> {
        let seeds = prompts(&self.cfg);
        let eval_every = u64::from(self.cfg.collectors.eval_every_n_rollouts);
        loop {
            if self.opts.max_rollouts.is_some_and(|m| self.next_rollout >= m) {
                return Ok((self.stats.clone(), Ended::Limit));
            }
            if between() {
                return Ok((self.stats.clone(), Ended::Between));
            }
            let (rollout, explo) = (self.next_rollout, self.explo_rollouts);
            let greedy = eval_every > 0 && (rollout + 1) % eval_every == 0;
            let (index, replay) = self.tracks.choose(rollout, explo, greedy);
            let seed = seeds[index];
            let trajectory = rulka_shm::TrajectoryId {
                collector: self.opts.id,
                incarnation: self.opts.incarnation,
                sequence: rollout,
            }
            .packed();
            self.next_rollout += 1;
            self.explo_rollouts += u64::from(!greedy);
            let chunks_before = self.stats.chunks;
            let outcome = match self.rollout(seed, trajectory, greedy, &mut stop) {
                Ok(o) => o,
                Err(e) => {
                    // Cut short (a game failed): a rollout that sent nothing gives its
                    // number back; one that sent chunks keeps it, so its chunks stay an
                    // incomplete trajectory that nothing later is spliced onto.
                    if self.stats.chunks == chunks_before {
                        self.next_rollout -= 1;
                        self.explo_rollouts -= u64::from(!greedy);
                    }
                    return Err(e);
                }
            };
            match outcome {
                Outcome::Written { finished, surprise } => {
                    if !greedy {
                        self.tracks.record(index, surprise);
                        self.stats.replays += u64::from(replay);
                    }
                    self.stats.rollouts += 1;
                    self.stats.eval_rollouts += u64::from(greedy);
                    self.stats.finished += u64::from(finished);
                }
                Outcome::Quarantined => self.stats.quarantined += 1,
                Outcome::Stopped => {
                    self.stats.abandoned += 1;
                    return Ok((self.stats.clone(), Ended::Stopped));
                }
            }
            if self.last_status.elapsed() >= STATUS_EVERY {
                self.last_status = Instant::now();
                let sent = self.sink.stats();
                let curriculum = self.tracks.progress().map_or(String::new(), |(s, n)| {
                    format!(
                        "; curriculum: {s} of {n} tracks scored, {} replays",
                        self.stats.replays
                    )
                });
                tracing::info!(
                    "[rulka collect {}] {} rollouts, {} chunks delivered, {} waiting in the outbox ({} trajectories dropped from it), policy v{}{curriculum}",
                    self.opts.id,
                    self.stats.rollouts,
                    sent.chunks,
                    sent.queued,
                    sent.outbox_dropped,
                    self.engine.policy_version()
                );
            }
        }
    }

    /// Passes the game's counters on: to the transport (NATS: the
    /// collector's `alive.<id>` record) and, for the trainer's own
    /// collectors, next to the heartbeat file (`collector<id>.game.json`).
    pub fn report_game(&mut self, game: rulka_config::GameCounters) {
        report_game(&mut *self.sink, &self.opts, game);
    }

    /// Puts `env` in place of the current environment (a relaunched game)
    /// and returns the old one; refused if it observes other sizes.
    pub fn replace_env(&mut self, env: E) -> Result<E, CollectorError> {
        if env.obs_sizes() != self.env.obs_sizes() {
            return Err(CollectorError::Env(EnvError::State(format!(
                "the new environment observes {:?}, the collector {:?}",
                env.obs_sizes(),
                self.env.obs_sizes()
            ))));
        }
        Ok(std::mem::replace(&mut self.env, env))
    }

    /// The environment, to change it (e.g. to dump its states).
    pub fn env_mut(&mut self) -> &mut E {
        &mut self.env
    }

    fn non_finite_float(&self, floats: &[f32]) -> Option<String> {
        let i = floats.iter().position(|x| !x.is_finite())?;
        let mut at = 0;
        for (name, len) in &self.float_names {
            if i < at + len {
                return Some(format!("floats.{name}[{}] = {}", i - at, floats[i]));
            }
            at += len;
        }
        Some(format!("floats[{i}] = {}", floats[i]))
    }

    fn rollout(
        &mut self,
        seed: u64,
        trajectory: u64,
        greedy: bool,
        stop: &mut impl FnMut() -> bool,
    ) -> Result<Outcome, CollectorError> {
        // Chunks an earlier rollout left held belong to a trajectory that
        // never ended: never sent.
        self.held.clear();
        self.env.reset(seed)?;
        self.engine.set_greedy(greedy);
        let (fl, nf) = (self.layout.frame_len, self.layout.n_floats);
        let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
        let mut chunk = Steps::default();
        let mut chunk_version = None;
        let mut first_step = 0u64;
        let mut step = 0u64;
        let mut status = Status::Running;
        let mut surprise = 0.0f64;
        loop {
            if stop() {
                return Ok(Outcome::Stopped);
            }
            self.heart.beat(self.stats.steps);
            self.env.observe(&mut frame, &mut floats)?;
            let ing = self.env.ingredients();
            let bad = self.non_finite_float(&floats).or_else(|| {
                ing.iter()
                    .position(|x| !x.is_finite())
                    .map(|i| format!("ingredients.{} = {}", ingredients::NAMES[i], ing[i]))
            });
            if let Some(what) = bad {
                let msg =
                    format!("{what} at step {step} of trajectory {trajectory} (track {seed})");
                tracing::warn!("[rulka collect {}] quarantined: {msg}", self.opts.id);
                self.stats.last_quarantine = Some(msg);
                return Ok(Outcome::Quarantined);
            }
            let action = self.engine.act(&frame, &floats)?;
            let terminal = status.is_done();
            let mut flags = if greedy { step_flags::GREEDY } else { 0 };
            if terminal {
                flags |= step_flags::TERMINAL;
                flags |= match status {
                    Status::Finished { .. } => step_flags::FINISHED,
                    _ => step_flags::CUT_OFF,
                };
            }
            chunk.frames.extend_from_slice(&frame);
            chunk.floats.extend_from_slice(&floats);
            chunk.actions.extend(action.actions().iter().map(|&a| i32::from(a)));
            chunk.log_probs.push(action.log_prob);
            surprise -= f64::from(action.log_prob);
            chunk.values.push(action.value);
            chunk.ingredients.extend_from_slice(&ing);
            chunk.flags.push(flags);
            let version = *chunk_version.get_or_insert(action.policy_version);
            step += 1;
            if terminal || chunk.len() >= self.layout.max_steps {
                let header = ChunkHeader {
                    collector: self.opts.id,
                    trajectory,
                    group: seed,
                    policy_version: version,
                    first_step,
                    is_last: terminal,
                };
                // Mid-run a full transport never holds the run up: a game
                // waits for its client only `timeout_during_run_ms` inside a
                // sync call, then disconnects it and the run is lost. The
                // chunk waits here, and the collector waits at the run's end,
                // when the game is between runs.
                let chunk_sent = if terminal {
                    self.push_held(stop)? && self.push(&header, &chunk, stop)?
                } else {
                    self.push_or_hold(header, std::mem::take(&mut chunk))?;
                    true
                };
                if !chunk_sent {
                    // Stopped while the transport was full: this chunk was not
                    // sent, so the trajectory stays incomplete, never written
                    // (its last chunk included: no rollout counted).
                    return Ok(Outcome::Stopped);
                }
                first_step = step;
                chunk = Steps::default();
                chunk_version = None;
            }
            if terminal {
                return Ok(Outcome::Written {
                    finished: matches!(status, Status::Finished { .. }),
                    surprise: surprise / step as f64,
                });
            }
            status = self.env.step(action.actions())?;
        }
    }

    /// Sends the chunks held so far, oldest first, then `steps` — each as
    /// far as the transport takes it now, without waiting; what it cannot
    /// take is held (after the others) for the next try.
    fn push_or_hold(&mut self, header: ChunkHeader, steps: Steps) -> Result<(), CollectorError> {
        while let Some((h, s)) = self.held.pop_front() {
            if !self.try_push(&h, &s)? {
                self.held.push_front((h, s));
                self.held.push_back((header, steps));
                return Ok(());
            }
        }
        if !self.try_push(&header, &steps)? {
            // The transport is full: one wait begins (counted once, however
            // many chunks it holds back).
            self.stats.ring_full_waits += 1;
            self.held.push_back((header, steps));
        }
        Ok(())
    }

    /// Sends every held chunk, waiting for room as [`Self::push`] does;
    /// false when a stop request abandoned one (they all stay unsent).
    fn push_held(&mut self, stop: &mut impl FnMut() -> bool) -> Result<bool, CollectorError> {
        while let Some((h, s)) = self.held.pop_front() {
            if !self.push(&h, &s, stop)? {
                self.held.clear();
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sends one chunk if the transport takes it now; false when it is full.
    fn try_push(&mut self, header: &ChunkHeader, steps: &Steps) -> Result<bool, CollectorError> {
        let (heart, n) = (&mut self.heart, self.stats.steps);
        let sent = self
            .sink
            .send(header, steps, &mut || {
                heart.beat(n);
                false
            })
            .map_err(|e| match e {
                TransportError::PeerGone => CollectorError::LearnerGone,
                e => CollectorError::Transport(e),
            })?;
        match sent {
            Sent::Stored | Sent::Dropped | Sent::Queued => {
                self.stats.chunks += 1;
                self.stats.steps += steps.len() as u64;
                Ok(true)
            }
            Sent::Abandoned => Ok(false),
        }
    }

    /// Sends one chunk; false when a stop request abandoned it (the
    /// transport was full and `stop()` said stop while it waited).
    fn push(
        &mut self,
        header: &ChunkHeader,
        steps: &Steps,
        stop: &mut impl FnMut() -> bool,
    ) -> Result<bool, CollectorError> {
        let (heart, n) = (&mut self.heart, self.stats.steps);
        let before = self.sink.stats().full_waits;
        let sent = self
            .sink
            .send(header, steps, &mut || {
                heart.beat(n);
                !stop()
            })
            .map_err(|e| match e {
                TransportError::PeerGone => CollectorError::LearnerGone,
                e => CollectorError::Transport(e),
            })?;
        self.stats.ring_full_waits += self.sink.stats().full_waits - before;
        match sent {
            Sent::Stored | Sent::Dropped | Sent::Queued => {
                self.stats.chunks += 1;
                self.stats.steps += steps.len() as u64;
                Ok(true)
            }
            // The trajectory stays incomplete; the learner drops it.
            Sent::Abandoned => Ok(false),
        }
    }
}

/// Passes a collector's game counters on (see [`Collector::report_game`]),
/// before its collector exists too (a game that never starts).
pub(crate) fn report_game(
    sink: &mut dyn ChunkSink,
    opts: &CollectorOptions,
    mut game: rulka_config::GameCounters,
) {
    game.incarnation = opts.incarnation;
    sink.report_game(game);
    if let Some(hb) = &opts.heartbeat {
        if let Ok(text) = serde_json::to_string(&game) {
            let (path, tmp) = (hb.with_extension("game.json"), hb.with_extension("game.json.tmp"));
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(tmp, path);
            }
        }
    }
}

/// The "prompts" a collector cycles (each a GRPO group; the id travels
/// with every chunk): the simulator's `track_seeds`, or for the game the
/// indices of `environment.tmi.maps`.
pub fn prompts(cfg: &Config) -> Vec<u64> {
    let e = &cfg.environment;
    let p: Vec<u64> = match e.kind {
        EnvKind::Sim => e.sim.track_seeds.clone(),
        EnvKind::Tmi => (0..e.tmi.maps.len() as u64).collect(),
    };
    if p.is_empty() {
        vec![0]
    } else {
        p
    }
}

enum Outcome {
    /// `surprise`: the mean `-log π(a|s)` of the actions taken.
    Written {
        finished: bool,
        surprise: f64,
    },
    Quarantined,
    Stopped,
}
