//! `rulka collect`: one collector process attached to a running trainer's
//! shared memory (same machine). Started by `rulka train` for each collector
//! slot; can also be started by hand (e.g. to drive the game over TMInterface).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use rulka_config::{Config, EnvKind};
use rulka_env::sim::SimEnv;
use rulka_env::tmi::TmiEnv;
use rulka_env::Environment;
use rulka_inference::collector::{Collector, CollectorError, CollectorOptions};
use rulka_inference::{EngineOptions, ModelSource, PolicyEngine};

use crate::train::RunInfo;
use crate::{load_config, BadInput};

/// Arguments of `rulka collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// Run directory of the trainer.
    #[arg(long)]
    pub run: PathBuf,
    /// Collector index.
    #[arg(long)]
    pub id: u32,
    /// Restart count of this collector slot (set by the trainer; keeps
    /// trajectory ids unique).
    #[arg(long, default_value_t = 0)]
    pub incarnation: u32,
    /// Environment: `sim` (built-in simulator) or `tmi` (the game).
    #[arg(long, value_parser = parse_env_kind)]
    pub env: Option<EnvKind>,
    /// TMInterface port (default: environment.tmi.base_port + id).
    #[arg(long)]
    pub port: Option<u16>,
    /// Stop after this many rollouts.
    #[arg(long)]
    pub max_rollouts: Option<u64>,
}

fn parse_env_kind(s: &str) -> Result<EnvKind, String> {
    match s {
        "sim" => Ok(EnvKind::Sim),
        "tmi" => Ok(EnvKind::Tmi),
        _ => Err(format!("unknown environment {s:?}; expected sim or tmi")),
    }
}

/// Runs one collector until the trainer stops it (SIGTERM/SIGINT), the
/// trainer goes away, or `max_rollouts` is reached.
pub fn run(args: &CollectArgs, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    rulka_shm::signal::install();
    if let Some(pid) = std::env::var("RULKA_TRAINER_PID").ok().and_then(|p| p.parse().ok()) {
        if !rulka_shm::signal::exit_with_parent(pid) {
            return Ok(()); // the trainer that started us is already gone
        }
    }
    let cfg_path = args.run.join("config.yaml");
    if !cfg_path.is_file() {
        return Err(BadInput(format!(
            "{}: not a rulka run directory (no config.yaml); start one with `rulka train`",
            args.run.display()
        ))
        .into());
    }
    let mut cfg = load_config(&cfg_path)?;
    if let Some(kind) = args.env {
        cfg.environment.kind = kind;
    }
    let info = RunInfo::read(&args.run)?;
    if args.id >= cfg.collectors.count {
        return Err(BadInput(format!(
            "--id {}: the run has {} collector slot(s) (0..{})",
            args.id, cfg.collectors.count, cfg.collectors.count
        ))
        .into());
    }
    let layout = info.layout(&cfg);
    let rt = rulka_inference::runtime::load(ort_lib).context("loading ONNX Runtime")?;
    // The initial policy: the board's latest snapshot.
    let board = rulka_shm::board::open_reader(&layout.board(), Duration::from_secs(10))
        .context("opening the run's weight board (is the trainer running?)")?;
    let mut bytes = Vec::new();
    let snap = board
        .wait_newer(None, &mut bytes, Duration::from_secs(30))
        .context("no weight snapshot published within 30 s")?;
    let onnx = rulka_export::export_from_safetensors(&cfg, &bytes, "weight board")?;
    let engine = PolicyEngine::new(
        rt,
        &cfg,
        ModelSource::Bytes(onnx),
        snap.version,
        EngineOptions {
            greedy: false,
            seed: cfg.training.seed ^ (u64::from(args.id) << 32) ^ u64::from(args.incarnation),
        },
    )?;
    let opts = CollectorOptions {
        id: args.id,
        incarnation: args.incarnation,
        max_rollouts: args.max_rollouts,
        heartbeat: Some(RunInfo::heartbeat_path(&args.run, args.id)),
    };
    let outcome = match cfg.environment.kind {
        EnvKind::Sim => drive(&cfg, &layout, SimEnv::new(&cfg), engine, opts),
        EnvKind::Tmi => {
            let port = args.port.unwrap_or(cfg.environment.tmi.base_port + args.id as u16);
            let env = TmiEnv::connect(&cfg, &cfg.environment.tmi.host, port)
                .with_context(|| format!("connecting to TMInterface on port {port}"))?;
            drive(&cfg, &layout, env, engine, opts)
        }
    };
    match outcome {
        Ok(()) | Err(CollectorError::LearnerGone) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn drive<E: Environment>(
    cfg: &Config,
    layout: &rulka_inference::collector::RunLayout,
    env: E,
    engine: PolicyEngine,
    opts: CollectorOptions,
) -> Result<(), CollectorError> {
    let id = opts.id;
    let mut c = Collector::attach(cfg, layout, env, engine, opts)?;
    let result = c.run(|| rulka_shm::signal::count() > 0);
    let s = c.stats();
    eprintln!(
        "[rulka collect {id}] {} rollouts ({} eval, {} finished), {} steps in {} chunks, {} quarantined, {} full-ring waits, policy v{}",
        s.rollouts,
        s.eval_rollouts,
        s.finished,
        s.steps,
        s.chunks,
        s.quarantined,
        s.ring_full_waits,
        c.engine().policy_version()
    );
    result.map(|_| ())
}
