//! `rulka` — the command line of the rulka RL system.
//!
//! Exit codes: 0 success; 1 the job ran and failed (e.g. a parity check above
//! tolerance); 2 bad input (config, paths, arguments), nothing written.

mod collect;
mod demo;
mod eval_cmd;
mod exit;
mod export_cmd;
mod hf_cmd;
mod inputs_cmd;
mod map_cmd;
mod original_cmd;
mod plot;
mod sim_cmd;
mod tmi_cmd;
mod train_cmd;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Run one collector attached to a running trainer (same machine).
    Collect(collect::CollectArgs),
    /// Plot a run's learning curve (progress and return vs frames) as SVG;
    /// several runs: drawn over each other to compare them.
    Plot {
        /// Run directory (or several).
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        /// Output SVG (default, one run: RUN_DIR/learning_curve.svg; several runs need it).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Draw the held-out evaluations (heldout.csv: finish rate and race
        /// time ÷ the autopilot's) instead (default output: RUN_DIR/heldout.svg).
        #[arg(long, conflicts_with = "race_time")]
        heldout: bool,
        /// Draw finished races and race time ÷ the autopilot's on the run's
        /// first track (one map: e.g. a `track_from` run) instead (default
        /// output: RUN_DIR/race_time.svg).
        #[arg(long)]
        race_time: bool,
    },
    /// The built-in simulator: look at tracks, measure its speed.
    Sim {
        #[command(subcommand)]
        what: SimWhat,
    },
    /// The game over TMInterface: inspect a saved state as a collector sees it.
    Tmi {
        #[command(subcommand)]
        what: TmiWhat,
    },
    /// Judge an exported policy on simulator tracks (held out from training by
    /// default) against the scripted autopilot; --compare a second model.
    Eval(eval_cmd::EvalArgs),
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
    /// Check or print a configuration file.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// TMInterface input scripts (the trainer's best runs): play one.
    Inputs {
        #[command(subcommand)]
        what: InputsWhat,
    },
    /// A map's reference line: record it, check it, draw it.
    Map {
        #[command(subcommand)]
        what: MapWhat,
    },
    /// Shared memory of runs: find and remove what dead trainers left behind.
    Shm {
        #[command(subcommand)]
        what: ShmWhat,
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
enum SimWhat {
    /// Draw a track (PNG) with the scripted autopilot's line, plus ego frames;
    /// with --model: the policy's line beside the autopilot's (SVG, coloured by speed).
    Render {
        /// Track seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Track preset: easy, medium or hard (default: the config's, else medium).
        #[arg(long, value_parser = parse_preset)]
        track: Option<rulka_config::TrackPreset>,
        /// Exported policy (.onnx) to draw beside the autopilot (needs --config).
        #[arg(long, requires = "config")]
        model: Option<PathBuf>,
        /// Config the model was trained with.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Output file (default track.png; with --model track.svg).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Animate one greedy run of a policy as a GIF: the track from above with
    /// the car and its trail, and the network's ego view.
    Replay {
        /// Exported policy (.onnx).
        #[arg(long)]
        model: PathBuf,
        /// Config the model was trained with.
        #[arg(long)]
        config: PathBuf,
        /// Track seed.
        #[arg(long, default_value_t = 1000)]
        seed: u64,
        /// Track preset: easy, medium or hard (default: the config's).
        #[arg(long, value_parser = parse_preset)]
        track: Option<rulka_config::TrackPreset>,
        /// Decisions per animation frame.
        #[arg(long, default_value_t = 2)]
        every: u32,
        /// Pixels of the top-down view's longer side.
        #[arg(long, default_value_t = 360)]
        size: u32,
        /// Output GIF.
        #[arg(long, default_value = "run.gif")]
        out: PathBuf,
    },
    /// Serve the simulator over the TMInterface protocol (a stand-in for the
    /// game); the fault options make it misbehave as a game does.
    Serve {
        /// Config shaping frames, floats and tracks.
        #[arg(long, default_value = "configs/sim-quick.yaml")]
        config: PathBuf,
        /// Port (the collector i of a run connects to environment.tmi.base_port + i).
        #[arg(long, default_value_t = 8478)]
        port: u16,
        #[command(flatten)]
        faults: sim_cmd::ServeFaults,
    },
    /// Write a track's reference line as a map's zone-centre file (.npy, N×3, 0.5 m apart).
    ExportMap {
        /// Track seed (`rulka sim serve` loads it for `map <seed>`).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Track preset: easy, medium or hard.
        #[arg(long, default_value = "medium", value_parser = parse_preset)]
        track: rulka_config::TrackPreset,
        /// Output .npy file.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Simulator steps per second with and without rendering (one core).
    Bench {
        /// Config shaping frames and floats.
        #[arg(long, default_value = "configs/ppo.yaml")]
        config: PathBuf,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
    },
}

#[derive(Subcommand, Debug)]
enum MapWhat {
    /// Record a map's reference line from a drive in the game: a person
    /// driving or TMInterface playing a replay or inputs, start to finish
    /// (rulka sets no inputs); refuses a respawn or a jump.
    Record(map_cmd::RecordArgs),
    /// Spacing, gaps, jumps, self-crossings, start and finish, how the line
    /// passes the map's checkpoints: numbers, and exit 1 on any problem.
    Check(map_cmd::CheckArgs),
    /// Draw the line (SVG): top view coloured by height, the height profile,
    /// zone centres (--config), checkpoints, start, finish, flagged places.
    Show(map_cmd::ShowArgs),
}

#[derive(Subcommand, Debug)]
enum InputsWhat {
    /// Play an input script (runs/NAME/best_runs/*.inputs) into the game or
    /// `rulka sim serve` from the start of a race and report the race time.
    Play(inputs_cmd::PlayArgs),
}

#[derive(Subcommand, Debug)]
enum ShmWhat {
    /// Remove the shared-memory directories (`rulka-<id>`) of dead runs: those
    /// whose owner process (pid and start time) is gone and whose locks no
    /// process holds. A live run's directory is never touched.
    Gc {
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Directory to scan (default: /dev/shm, else the temp directory).
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum TmiWhat {
    /// Decode a saved state (SaveState().ToArray() bytes) and show the float vector a collector builds from it.
    Inspect(tmi_cmd::InspectArgs),
    /// Preflight a game: the plugin answers and speaks the protocol, the map
    /// loads, steps arrive, frames and states are right, race time advances.
    /// Exit 0 when all pass, 1 otherwise (each failure with its fix).
    Check(tmi_cmd::CheckArgs),
}

fn parse_preset(s: &str) -> Result<rulka_config::TrackPreset, String> {
    match s {
        "easy" => Ok(rulka_config::TrackPreset::Easy),
        "medium" => Ok(rulka_config::TrackPreset::Medium),
        "hard" => Ok(rulka_config::TrackPreset::Hard),
        _ => Err(format!("unknown track preset {s:?}; expected easy, medium or hard")),
    }
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
        #[arg(long, default_value_t = 5.0)]
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
        #[arg(long, default_value_t = 2.0)]
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

pub(crate) use rulka_trainer::{load_config, BadInput};

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
        Command::Train(args) => train_cmd::run(&args, cli.ort_lib.as_deref()),
        Command::Collect(args) => collect::run(&args, cli.ort_lib.as_deref()),
        Command::Plot { runs, output, heldout, race_time } if heldout || race_time => {
            let (flag, default) = if heldout {
                ("--heldout", "heldout.svg")
            } else {
                ("--race-time", "race_time.svg")
            };
            let out = match (&output, &runs[..]) {
                (Some(o), _) => o.clone(),
                (None, [one]) => one.join(default),
                _ => {
                    return Err(
                        BadInput(format!("plot {flag}: several runs need -o OUTPUT.svg")).into()
                    )
                }
            };
            if heldout {
                plot::heldout(&runs, &out)
            } else {
                plot::race_time(&runs, &out)
            }
        }
        Command::Plot { runs, output, .. } => plot::run(&runs, output.as_deref()),
        Command::Sim { what: SimWhat::Render { seed, track, model, config, out } } => {
            sim_cmd::render_cmd(
                seed,
                track,
                model.as_deref(),
                config.as_deref(),
                out,
                cli.ort_lib.as_deref(),
            )
        }
        Command::Sim { what: SimWhat::Replay { model, config, seed, track, every, size, out } } => {
            let mut cfg = load_config(&config)?;
            if let Some(t) = track {
                cfg.environment.sim.track = t;
            }
            watch::replay(&cfg, &model, seed, &out, every, size, cli.ort_lib.as_deref())
        }
        Command::Sim { what: SimWhat::Bench { config, seconds } } => {
            sim_cmd::bench(&config, seconds)
        }
        Command::Sim { what: SimWhat::Serve { config, port, faults } } => {
            sim_cmd::serve(&config, port, &faults)
        }
        Command::Sim { what: SimWhat::ExportMap { seed, track, output } } => {
            sim_cmd::export_map(seed, track, &output)
        }
        Command::Inputs { what: InputsWhat::Play(args) } => inputs_cmd::play(&args),
        Command::Map { what: MapWhat::Record(args) } => map_cmd::record(&args),
        Command::Map { what: MapWhat::Check(args) } => map_cmd::check(&args),
        Command::Map { what: MapWhat::Show(args) } => map_cmd::show(&args),
        Command::Tmi { what: TmiWhat::Inspect(args) } => tmi_cmd::inspect(&args),
        Command::Tmi { what: TmiWhat::Check(args) } => {
            rulka_shm::signal::install();
            tmi_cmd::check(&args)
        }
        Command::Shm { what: ShmWhat::Gc { dry_run, root } } => {
            let root = root.unwrap_or_else(rulka_trainer::shm_root);
            let found = rulka_shm::gc::collect(&root, dry_run)
                .map_err(|e| anyhow::anyhow!("scanning {}: {e}", root.display()))?;
            for line in rulka_trainer::describe_gc(&found, dry_run) {
                println!("{line}");
            }
            let stale =
                found.iter().filter(|f| !matches!(f.verdict, rulka_shm::gc::Verdict::Live { .. }));
            let (n, bytes) = stale.fold((0, 0), |(n, b), f| (n + 1, b + f.bytes));
            println!(
                "rulka shm gc — {}: {} run director{}, {n} stale ({:.1} MB){}",
                root.display(),
                found.len(),
                if found.len() == 1 { "y" } else { "ies" },
                bytes as f64 / 1e6,
                if dry_run {
                    ", nothing removed (--dry-run)"
                } else if n > 0 {
                    ", removed"
                } else {
                    ""
                }
            );
            Ok(())
        }
        Command::Export(args) => export_cmd::export(&args, cli.ort_lib.as_deref()),
        Command::Import(args) => original_cmd::import(&args),
        Command::Eval(args) => eval_cmd::run(&args, cli.ort_lib.as_deref()),
        Command::Init { config, seed, output } => export_cmd::init(&config, seed, &output),
        Command::HfVit(args) => hf_cmd::vit(&args),
        Command::Bench {
            what: BenchWhat::Learner { config, seconds, threads, grpo_k, grpo_len, device, amp },
        } => {
            if let Ok(spec) = std::env::var("RULKA_BENCH_GRPO_CHILD") {
                return rulka_bench::learner::grpo_child(&spec, &config, &mut std::io::stdout());
            }
            let args = rulka_bench::learner::Args {
                config,
                seconds,
                threads,
                grpo_k,
                grpo_len,
                device,
                amp,
            };
            rulka_bench::learner::run(&args, &mut std::io::stdout())
        }
        Command::Bench { what: BenchWhat::CudaParity { config, threads } } => {
            let args = rulka_bench::parity::Args { config, threads };
            if rulka_bench::parity::run(&args, &mut std::io::stdout())? {
                Ok(())
            } else {
                anyhow::bail!("the CUDA update differs from the CPU's beyond its bound, or skipped a step (lines above)")
            }
        }
        Command::Bench { what: BenchWhat::Transport { config, chunks, rounds, json } } => {
            let args = rulka_bench::transport::Args { config, chunks, rounds, json };
            rulka_bench::transport::run(&args, &mut std::io::stdout())
        }
        Command::Bench { what: BenchWhat::Shm { seconds, json } } => {
            rulka_bench::shm::run(seconds, json.as_ref(), &mut std::io::stdout())
        }
        Command::Bench {
            what:
                BenchWhat::Inference { config, checkpoint, batch, seconds, json, plot, no_hot_swap },
        } => {
            if batch.is_empty() || batch.contains(&0) {
                return Err(BadInput(format!("--batch {batch:?}: batch sizes must be >= 1")).into());
            }
            rulka_bench::inference::run(
                &rulka_bench::inference::Args {
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
    // A game's guard (environment.tmi.launch) is this binary run again.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(rulka_collector::game::GUARD_ARG) {
        rulka_console::init(0);
        return ExitCode::from(rulka_collector::game::guard_main(&argv[2..]).clamp(0, 255) as u8);
    }
    let cli = Cli::parse();
    rulka_console::init(cli.verbose);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A `BadInput` is its own message; any other error shows its chain.
            match e.downcast_ref::<BadInput>() {
                Some(bad) => eprintln!("error: {bad}"),
                None => eprintln!("error: {e:#}"),
            }
            ExitCode::from(exit::error_kind(&e).exit_code())
        }
    }
}
