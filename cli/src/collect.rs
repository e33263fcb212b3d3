//! `rulka collect`: one collector process attached to a running trainer
//! (same machine): through its shared memory, or — when the run's transport
//! is NATS — through the NATS server, as a remote `rulka-collector` would.
//! Started by `rulka train` for each local collector slot; can also be
//! started by hand (e.g. to drive the game over TMInterface).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use rulka_collector::CollectorOptions;
use rulka_config::EnvKind;
use rulka_run::RunInfo;

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
    /// With the game: save every observed state (`SaveState().ToArray()`
    /// bytes) into DIR, named `<map>-<rollout>-<step>.bin`, for `rulka tmi inspect`.
    #[arg(long, value_name = "DIR")]
    pub dump_states: Option<PathBuf>,
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
    rulka_shm::install_stop_handler();
    if let Some(pid) = std::env::var("RULKA_TRAINER_PID").ok().and_then(|p| p.parse().ok()) {
        if !rulka_shm::exit_with_parent(pid) {
            return Ok(()); // the trainer that started us is already gone
        }
    }
    let cfg_path = rulka_run::RunDir::new(&args.run).config_yaml();
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
    // `rulka train --collectors N` runs N slots whatever the snapshot says.
    if let Some(n) = info.collectors {
        cfg.collectors.count = n;
    }
    let rt = rulka_inference::load_runtime(ort_lib).context("loading ONNX Runtime")?;
    let opts = |incarnation: u32| CollectorOptions {
        id: args.id,
        incarnation,
        max_rollouts: args.max_rollouts,
        heartbeat: Some(RunInfo::heartbeat_path(&args.run, args.id)),
        game_log: Some(RunInfo::heartbeat_path(&args.run, args.id).with_extension("game.log")),
    };
    let stop = || rulka_shm::stop_requests() > 0;
    if let Some(n) = &info.nats {
        // The run's transport is NATS: join it as a remote collector would.
        let mut o = rulka_run::nats_options(&cfg, &n.url, &format!("rulka-collect-{}", args.id));
        if n.user.is_some() {
            o.user = n.user.clone();
            o.password = n.password.clone();
            o.token = None;
        }
        let mut joined = rulka_collector::join_run(
            &o,
            &n.run,
            args.id,
            &rulka_run::RunDir::new(&args.run).maps_cache(),
            Duration::from_secs(60),
        )?;
        if let Some(kind) = args.env {
            joined.cfg.environment.kind = kind;
        }
        rulka_collector::run_joined(
            rt,
            joined,
            args.port,
            args.dump_states.as_deref(),
            opts(0),
            stop,
        )?;
        return Ok(());
    }
    if args.id >= cfg.collectors.count {
        return Err(BadInput(format!(
            "--id {}: the run has {} collector slot(s) (0..{})",
            args.id, cfg.collectors.count, cfg.collectors.count
        ))
        .into());
    }
    let layout = info.layout(&cfg);
    rulka_collector::run_local(
        rt,
        &cfg,
        &layout,
        args.port,
        args.dump_states.as_deref(),
        opts(args.incarnation),
        stop,
    )?;
    Ok(())
}
