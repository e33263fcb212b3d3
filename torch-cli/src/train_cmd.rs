//! `rulka train`: its arguments, and how it starts its collectors
//! (`rulka collect` children of this binary).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use rulka_config::TransportKind;
use rulka_trainer::TrainOptions;

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
    #[arg(long, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
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

/// Runs `rulka train`; its collectors are `rulka collect` processes of the
/// `rulka` binary beside this one (no libtorch in them), given the same
/// `--ort-lib`.
pub fn run(args: &TrainArgs, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    let opts = TrainOptions {
        config: args.config.clone(),
        resume: args.resume.clone(),
        fresh: args.fresh,
        run_dir: args.run_dir.clone(),
        max_frames: args.max_frames,
        max_minutes: args.max_minutes,
        collectors: args.collectors,
        save_trajectories: args.save_trajectories,
        transport: args.transport,
        nats_url: args.nats_url.clone(),
        ort_lib: ort_lib.map(Path::to_path_buf),
    };
    let exe =
        std::env::current_exe().context("locating the rulka-torch binary")?.with_file_name("rulka");
    if !exe.is_file() {
        return Err(BadInput(format!(
            "{} not found: rulka train starts its collectors as `rulka collect` (cargo build -p rulka -p rulka-torch)",
            exe.display()
        ))
        .into());
    }
    let ort = opts.ort_lib.clone();
    let summary = rulka_trainer::run(
        &opts,
        Box::new(move |run_dir, id, incarnation| {
            let mut cmd = Command::new(&exe);
            if let Some(l) = &ort {
                cmd.arg("--ort-lib").arg(l);
            }
            cmd.arg("collect")
                .arg("--run")
                .arg(run_dir)
                .arg("--id")
                .arg(id.to_string())
                .arg("--incarnation")
                .arg(incarnation.to_string());
            Ok(cmd)
        }),
    )?;
    print!("{summary}");
    Ok(())
}
