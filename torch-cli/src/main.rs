//! `rulka-torch` — the part of rulka's command line that trains, or holds
//! a network in libtorch: `train`, `pretrain`, `init`, `import`, `export`, `hf-vit`,
//! `bench` and `demo`. Users type `rulka`: it hands these commands over to
//! this binary beside it (`exec`, same arguments, same process id), so that
//! every other command — and every process a run starts but the learner
//! (its collectors, the games' guards) — runs without loading libtorch
//! (docs/architecture.md, "Which processes load libtorch").
//!
//! Exit codes: 0 success; 1 the job ran and failed (e.g. a parity check above
//! tolerance); 2 bad input (config, paths, arguments), nothing written.

mod demo;
mod export_cmd;
mod hf_cmd;
mod original_cmd;
mod pretrain_cmd;
mod train_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rulka_error::ErrorKind;

#[derive(Parser, Debug)]
#[command(
    name = "rulka",
    version = rulka_inference::native::VERSION,
    about = "Rust RL for TrackMania-style driving agents: the commands that use libtorch"
)]
struct Cli {
    /// ONNX Runtime library to load (default: $ORT_DYLIB_PATH, next to the binary, or the workspace's .onnxruntime/).
    #[arg(long, global = true, value_name = "PATH")]
    ort_lib: Option<PathBuf>,
    /// More detail on stderr: -v rulka's debug messages and other crates'
    /// warnings, -vv everything (RUST_LOG, when set, chooses instead).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train: the learner here, collector processes over shared memory, supervised.
    Train(train_cmd::TrainArgs),
    /// Behaviour cloning: train the actor-critic on demonstrations (`rulka
    /// demos record`) into a run directory `train --resume` continues with
    /// reinforcement learning.
    Pretrain(pretrain_cmd::PretrainArgs),
    /// Export a checkpoint to ONNX (optionally proving parity with the tch network),
    /// or with --torch a run to the original's save folder.
    Export(export_cmd::ExportArgs),
    /// Bring a run of the original over: its save folder (weights1.torch,
    /// optimizer1.torch, …) becomes a run directory `train --resume` continues.
    Import(original_cmd::ImportArgs),
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
    /// Write a freshly initialised Hugging Face ViT folder (for Variant B/C
    /// networks trained from scratch; no download).
    HfVit(hf_cmd::HfVitArgs),
    /// Benchmarks (ratios against baselines measured in the same run).
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// What libtorch's CUDA is here, as JSON (`rulka gpu check` asks).
    #[command(hide = true)]
    GpuInfo,
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

fn parse_device(s: &str) -> Result<rulka_config::LearnerDevice, String> {
    match s {
        "auto" => Ok(rulka_config::LearnerDevice::Auto),
        "cpu" => Ok(rulka_config::LearnerDevice::Cpu),
        "cuda" => Ok(rulka_config::LearnerDevice::Cuda),
        _ => Err(format!("unknown device {s:?}; expected cpu, cuda or auto")),
    }
}

#[derive(Subcommand, Debug)]
enum BenchWhat {
    /// Learner update throughput vs PyTorch eager (same run, same device), and GRPO peak memory with/without micro-batching.
    Learner {
        /// Config shaping the network and the PPO update.
        #[arg(long, default_value = "configs/ppo.yaml")]
        config: PathBuf,
        /// Seconds of timed updates per side.
        #[arg(long, default_value_t = 5.0, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
        seconds: f64,
        /// Intra-op threads on both sides.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Trajectories in the GRPO memory measurement (0 skips it).
        #[arg(long, default_value_t = 128)]
        grpo_k: usize,
        /// Steps per trajectory in the GRPO memory measurement.
        #[arg(long, default_value_t = 100)]
        grpo_len: usize,
        /// Where both sides train: cpu, cuda or auto.
        #[arg(long, default_value = "cpu", value_parser = parse_device)]
        device: rulka_config::LearnerDevice,
        /// fp16 autocast with loss scaling on both sides (CUDA only).
        #[arg(long)]
        amp: bool,
    },
    /// One PPO, GRPO and DPO update on CUDA against the same update on the CPU (fp32 and fp16 autocast): parameters compared; exit 1 beyond the bounds.
    CudaParity {
        /// Config shaping the network and the updates.
        #[arg(long, default_value = "configs/ppo.yaml")]
        config: PathBuf,
        /// Intra-op threads of the CPU side.
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// Shared-memory transport: ring throughput and snapshot latency vs memcpy and Python's mp.Queue.
    Shm {
        /// Seconds per measurement.
        #[arg(long, default_value_t = 2.0, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
        seconds: f64,
        /// Also write the figures as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Transports side by side: chunk throughput and latency, weight publish → visible, shared memory vs NATS.
    Transport {
        /// Config shaping the chunks and the network.
        #[arg(long, default_value = "configs/ppo.yaml")]
        config: PathBuf,
        /// Chunks per throughput measurement.
        #[arg(long, default_value_t = 2000)]
        chunks: usize,
        /// One-at-a-time round trips per latency measurement.
        #[arg(long, default_value_t = 300)]
        rounds: usize,
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
        #[arg(long, default_value_t = 1.0, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
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

pub(crate) use rulka_run::{load_config, BadInput};

/// The exit code of an import's errors, beside the lean command line's.
fn original_kind(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    e.downcast_ref::<rulka_original::OriginalError>().map(rulka_original::OriginalError::kind)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { config, out } => demo::run(&config, &out, cli.ort_lib.as_deref()),
        Command::GpuInfo => {
            let available = tch::Cuda::is_available();
            let doc = serde_json::json!({
                "build": rulka_inference::native::BuildFeatures::THIS.label(),
                "libtorch_cuda_linked": cfg!(feature = "cuda"),
                "cuda_available": available,
                "devices": if available { tch::Cuda::device_count() } else { 0 },
            });
            println!("{doc}");
            Ok(())
        }
        Command::Train(args) => train_cmd::run(&args, cli.ort_lib.as_deref()),
        Command::Pretrain(args) => pretrain_cmd::run(&args),
        Command::Export(args) => export_cmd::export(&args, cli.ort_lib.as_deref()),
        Command::Import(args) => original_cmd::import(&args),
        Command::Init { config, seed, output } => export_cmd::init(&config, seed, &output),
        Command::HfVit(args) => hf_cmd::vit(&args),
        Command::Bench {
            what: BenchWhat::Learner { config, seconds, threads, grpo_k, grpo_len, device, amp },
        } => {
            if let Ok(spec) = std::env::var("RULKA_BENCH_GRPO_CHILD") {
                return rulka_bench::learner_grpo_child(&spec, &config, &mut std::io::stdout());
            }
            let args = rulka_bench::LearnerArgs {
                config,
                seconds,
                threads,
                grpo_k,
                grpo_len,
                device,
                amp,
            };
            rulka_bench::run_learner(&args, &mut std::io::stdout())
        }
        Command::Bench { what: BenchWhat::CudaParity { config, threads } } => {
            let args = rulka_bench::ParityArgs { config, threads };
            if rulka_bench::run_parity(&args, &mut std::io::stdout())? {
                Ok(())
            } else {
                anyhow::bail!("the CUDA update differs from the CPU's beyond its bound, or skipped a step (lines above)")
            }
        }
        Command::Bench { what: BenchWhat::Transport { config, chunks, rounds, json } } => {
            let args = rulka_bench::TransportArgs { config, chunks, rounds, json };
            rulka_bench::run_transport(&args, &mut std::io::stdout())
        }
        Command::Bench { what: BenchWhat::Shm { seconds, json } } => {
            rulka_bench::run_shm(seconds, json.as_ref(), &mut std::io::stdout())
        }
        Command::Bench {
            what:
                BenchWhat::Inference { config, checkpoint, batch, seconds, json, plot, no_hot_swap },
        } => {
            if batch.is_empty() || batch.contains(&0) {
                return Err(BadInput(format!("--batch {batch:?}: batch sizes must be >= 1")).into());
            }
            rulka_bench::run_inference(
                &rulka_bench::InferenceArgs {
                    config,
                    checkpoint,
                    batches: batch,
                    seconds,
                    json,
                    plot,
                    no_hot_swap,
                },
                cli.ort_lib.as_deref(),
                &mut std::io::stdout(),
            )
        }
    }
}

fn main() -> ExitCode {
    // `rulka __reference` asks for this binary's part of the CLI reference.
    if std::env::args().nth(1).as_deref() == Some("__reference") {
        use clap::CommandFactory as _;
        print!("{}", rulka_console::reference::markdown(&Cli::command(), "rulka", &[], false));
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    // The guide's tests parse its command lines (`rulka` hands these over).
    if std::env::var_os("RULKA_PARSE_ONLY").is_some() {
        return ExitCode::SUCCESS;
    }
    rulka_console::init(cli.verbose);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => rulka_cli::report_error(&e, &original_kind),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    /// Every float option is parsed by `rulka_cli::numbers`, so none takes
    /// NaN or ±∞ (a range check written with `<` lets NaN through). The audit
    /// walks the whole command tree: a float option added with clap's own
    /// parser fails here.
    /// The float options today: the audit must find each (a walk that
    /// missed a level would pass with nothing to check).
    const KNOWN: [&str; 4] = [
        "train --max-minutes",
        "bench learner --seconds",
        "bench shm --seconds",
        "bench inference --seconds",
    ];

    #[test]
    fn every_float_option_refuses_a_non_finite_value() {
        let cmd = super::Cli::command();
        let floats = rulka_cli::numbers::float_options(&cmd);
        for known in KNOWN {
            assert!(floats.iter().any(|f| f == known), "{known} not found among {floats:?}");
        }
        assert_eq!(rulka_cli::numbers::float_option_faults(&cmd), Vec::<String>::new());
    }

    /// Each float option's range at its edges, parsed as the binary parses
    /// them: a value just inside taken, the edge or the value just past it
    /// refused. Every float option the audit finds has its row.
    #[test]
    fn every_float_option_takes_its_edges_and_refuses_just_past_them() {
        let rows: [(&str, &[&str], &str); 4] = [
            ("train", &["train", "--config", "c.yaml"], "--max-minutes"),
            ("bench learner", &["bench", "learner"], "--seconds"),
            ("bench shm", &["bench", "shm"], "--seconds"),
            (
                "bench inference",
                &["bench", "inference", "--checkpoint", "c.safetensors"],
                "--seconds",
            ),
        ];
        let mut found = rulka_cli::numbers::float_options(&super::Cli::command());
        let mut listed: Vec<String> =
            rows.iter().map(|(sub, _, opt)| format!("{sub} {opt}")).collect();
        found.sort();
        listed.sort();
        assert_eq!(listed, found, "every float option has a row, and only those");
        for (_, pre, opt) in rows {
            for (v, ok) in
                [("1e-9", true), ("2.5", true), ("0", false), ("-0", false), ("-1e-9", false)]
            {
                let args = [&["rulka-torch"], pre, &[opt, v]].concat();
                let got = super::Cli::try_parse_from(&args);
                assert_eq!(got.is_ok(), ok, "{args:?}: {:?}", got.err().map(|e| e.to_string()));
                if let Err(e) = got {
                    assert!(e.to_string().contains(&format!("'{v}' for '{opt}")), "{args:?}: {e}");
                }
            }
        }
    }
}
