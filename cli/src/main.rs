//! `rulka` — the command line of the rulka RL system.
//!
//! Exit codes: 0 success; 1 the job ran and failed (e.g. a parity check above
//! tolerance); 2 bad input (config, paths, arguments), nothing written;
//! 3 the subcommand is not implemented yet.

mod bench_inference;
mod bench_shm;
mod demo;
mod export_cmd;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rulka_config::Config;

#[derive(Parser, Debug)]
#[command(
    name = "rulka",
    version,
    about = "Rust RL for TrackMania-style driving agents: PPO, GRPO, DPO"
)]
struct Cli {
    /// ONNX Runtime library to load (default: $ORT_DYLIB_PATH, next to the binary, or the workspace's .onnxruntime/).
    #[arg(long, global = true, value_name = "PATH")]
    ort_lib: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train: learner + collector processes over shared memory (not implemented yet).
    Train {
        /// Config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run one collector attached to a running trainer (not implemented yet).
    Collect {
        /// Run directory of the trainer.
        #[arg(long)]
        run: PathBuf,
        /// Collector index.
        #[arg(long)]
        id: u32,
    },
    /// Export a checkpoint to ONNX (optionally proving parity with the tch network).
    Export {
        /// Config file that shaped the network.
        #[arg(long)]
        config: PathBuf,
        /// Checkpoint (.safetensors) to export.
        #[arg(long)]
        checkpoint: PathBuf,
        /// Output ONNX file.
        #[arg(short, long)]
        output: PathBuf,
        /// Run tch and ONNX Runtime on the same inputs; fail (exit 1, nothing written) above 1e-4.
        #[arg(long)]
        check: bool,
        /// Accept a checkpoint lacking some tensors (filled from a fresh initialisation).
        #[arg(long)]
        allow_partial: bool,
        /// Seed for the check's inputs and for partial fills.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Write a freshly initialised checkpoint (PyTorch-default initialisation, seeded).
    Init {
        /// Config file.
        #[arg(long)]
        config: PathBuf,
        /// Initialisation seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output .safetensors file.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Benchmarks (ratios against baselines measured in the same run).
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Check or print a configuration file.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Show the pipeline working end to end, as far as it exists today.
    Demo {
        /// Config file.
        #[arg(long, default_value = "configs/grpo.yaml")]
        config: PathBuf,
        /// Where the demo writes its checkpoint and model.
        #[arg(long, default_value = "runs/demo")]
        out: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum BenchWhat {
    /// Shared-memory transport: ring throughput and snapshot latency vs memcpy and Python's mp.Queue.
    Shm {
        /// Seconds per measurement.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Also write the figures as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Inference latency and throughput: ONNX Runtime raw, the rulka engine, tch (and GPU backends when built and present).
    Inference {
        /// Config shaping the network.
        #[arg(long, default_value = "configs/grpo.yaml")]
        config: PathBuf,
        /// Checkpoint to benchmark (default: a fresh seeded initialisation).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Batch sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,8,32,256")]
        batch: Vec<usize>,
        /// Seconds of timed iterations per backend and batch size.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Also write the figures as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write an SVG plot of latency against batch size.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Skip the hot-swap latency measurement.
        #[arg(long)]
        no_hot_swap: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigAction {
    /// Parse and validate FILE; exit 0 if valid, 2 with every problem named if not.
    Check {
        /// Config file.
        file: PathBuf,
    },
    /// Print FILE fully resolved (defaults filled in) as YAML.
    Show {
        /// Config file.
        file: PathBuf,
    },
}

/// An error caused by the user's input: printed as one line, exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The subcommand exists in the plan but not yet in this build.
#[derive(Debug)]
struct NotImplemented(&'static str);

impl std::fmt::Display for NotImplemented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`rulka {}` is not implemented yet in this version", self.0)
    }
}

impl std::error::Error for NotImplemented {}

/// Loads a config, turning any problem into [`BadInput`].
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    Config::from_file(path).map_err(|e| BadInput(e.to_string()).into())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Config { action: ConfigAction::Check { file } } => {
            let cfg = load_config(&file)?;
            println!(
                "{}: ok (algorithm {:?}, float_input_dim {}, action heads {}, network {})",
                file.display(),
                cfg.training.algorithm,
                cfg.float_input_dim(),
                cfg.n_action_heads(),
                cfg.network_hash()
            );
            Ok(())
        }
        Command::Config { action: ConfigAction::Show { file } } => {
            let cfg = load_config(&file)?;
            print!("{}", cfg.to_yaml());
            Ok(())
        }
        Command::Demo { config, out } => demo::run(&config, &out, cli.ort_lib.as_deref()),
        Command::Train { .. } => Err(NotImplemented("train").into()),
        Command::Collect { .. } => Err(NotImplemented("collect").into()),
        Command::Export { config, checkpoint, output, check, allow_partial, seed } => {
            export_cmd::export(
                &export_cmd::ExportArgs { config, checkpoint, output, check, allow_partial, seed },
                cli.ort_lib.as_deref(),
            )
        }
        Command::Init { config, seed, output } => export_cmd::init(&config, seed, &output),
        Command::Bench { what: BenchWhat::Shm { seconds, json } } => {
            bench_shm::run(seconds, json.as_ref())
        }
        Command::Bench {
            what:
                BenchWhat::Inference { config, checkpoint, batch, seconds, json, plot, no_hot_swap },
        } => {
            if batch.is_empty() || batch.contains(&0) {
                return Err(BadInput(format!("--batch {batch:?}: batch sizes must be >= 1")).into());
            }
            bench_inference::run(
                &bench_inference::Args {
                    config,
                    checkpoint,
                    batches: batch,
                    seconds,
                    json,
                    plot,
                    no_hot_swap,
                },
                cli.ort_lib.as_deref(),
            )
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(bad) = e.downcast_ref::<BadInput>() {
                eprintln!("error: {bad}");
                ExitCode::from(2)
            } else if let Some(ni) = e.downcast_ref::<NotImplemented>() {
                eprintln!("error: {ni}");
                ExitCode::from(3)
            } else {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}
