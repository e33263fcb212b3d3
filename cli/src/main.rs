//! `rulka` — the command line of the rulka RL system.
//!
//! This binary does not load libtorch: the commands that train or hold a
//! network in libtorch (`train`, `init`, `import`, `export`, `hf-vit`,
//! `bench`, `demo`) are handed over to `rulka-torch` beside it (`exec`:
//! same arguments, same process id); every other command, and the
//! processes a run starts besides its learner (`rulka collect`, the games'
//! guards), run here.
//!
//! Exit codes: 0 success; 1 the job ran and failed (e.g. a parity check above
//! tolerance); 2 bad input (config, paths, arguments), nothing written.

mod collect;
mod demos_cmd;
mod eval_cmd;
mod gpu_cmd;
mod handover;
mod inputs_cmd;
mod limits;
mod map_cmd;
mod plot;
mod sim_cmd;
mod sim_gap;
mod sim_plan;
mod tmi_cmd;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "rulka",
    version = rulka_inference::native::VERSION,
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
    #[command(disable_help_flag = true)]
    Train(handover::Torch),
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
    #[command(disable_help_flag = true)]
    Export(handover::Torch),
    /// Bring a run of the original over: its save folder (weights1.torch,
    /// optimizer1.torch, …) becomes a run directory `train --resume` continues.
    #[command(disable_help_flag = true)]
    Import(handover::Torch),
    /// Write a freshly initialised checkpoint (PyTorch-default initialisation, seeded).
    #[command(disable_help_flag = true)]
    Init(handover::Torch),
    /// Write a freshly initialised Hugging Face ViT folder (for Variant B/C
    /// networks trained from scratch; no download).
    #[command(disable_help_flag = true)]
    HfVit(handover::Torch),
    /// Benchmarks (ratios against baselines measured in the same run).
    #[command(disable_help_flag = true)]
    Bench(handover::Torch),
    /// Check or print a configuration file.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Demonstrations for behaviour cloning: record drives (input files,
    /// saved trajectories) as shards `rulka pretrain` trains on.
    Demos {
        #[command(subcommand)]
        what: DemosWhat,
    },
    /// Behaviour cloning: train the actor-critic on demonstrations into a
    /// run directory `train --resume` continues with reinforcement learning.
    #[command(disable_help_flag = true)]
    Pretrain(handover::Torch),
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
    /// The GPU paths: what the CUDA and TensorRT providers and the GPU
    /// learner need, what is here, what is missing and the command that
    /// installs it.
    Gpu {
        #[command(subcommand)]
        what: GpuWhat,
    },
    /// Shared memory of runs: find and remove what dead trainers left behind.
    Shm {
        #[command(subcommand)]
        what: ShmWhat,
    },
    /// Show the pipeline working end to end, as far as it exists today.
    #[command(disable_help_flag = true)]
    Demo(handover::Torch),
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
    /// The simulator's limit: the planner's fastest drive of each track
    /// (a ladder of beam searches over the policy's decisions), against the
    /// autopilot; writes limits.csv (`rulka eval --limits`) and each drive
    /// as an input script (`rulka inputs play`).
    Plan(sim_plan::PlanArgs),
    /// Where a driver loses its time to the simulator's limit: on each
    /// track of a limit table, the time a policy's (or the autopilot's)
    /// greedy drive falls behind the planner's drive at the start, in
    /// corners and on straights; a figure of the gap along the race.
    Gap(sim_gap::GapArgs),
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
        #[arg(long, default_value_t = 2.0, value_parser = rulka_cli::numbers::positive, allow_hyphen_values = true)]
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
enum DemosWhat {
    /// Drive input files (`.inputs`) or saved trajectories through the
    /// simulator or the game and store what the network sees and what was
    /// done, one shard per drive.
    Record(demos_cmd::RecordArgs),
}

#[derive(Subcommand, Debug)]
enum InputsWhat {
    /// Play an input script (runs/NAME/best_runs/*.inputs) into the game or
    /// `rulka sim serve` from the start of a race and report the race time.
    Play(inputs_cmd::PlayArgs),
}

#[derive(Subcommand, Debug)]
enum GpuWhat {
    /// What is present and missing (each with the command that installs
    /// it), then a decision of the network on each provider asked for,
    /// compared with the CPU's. Exit 0 when every provider asked for works,
    /// 1 otherwise.
    Check(gpu_cmd::CheckArgs),
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

pub(crate) use rulka_run::{load_config, BadInput};

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
        Command::Train(_)
        | Command::Export(_)
        | Command::Import(_)
        | Command::Init(_)
        | Command::HfVit(_)
        | Command::Bench(_)
        | Command::Pretrain(_)
        | Command::Demo(_) => Err(handover::to_torch()),
        Command::Demos { what: DemosWhat::Record(args) } => demos_cmd::record(&args),
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
        Command::Sim { what: SimWhat::Plan(args) } => sim_plan::run(&args),
        Command::Sim { what: SimWhat::Gap(args) } => sim_gap::run(&args, cli.ort_lib.as_deref()),
        Command::Sim { what: SimWhat::ExportMap { seed, track, output } } => {
            sim_cmd::export_map(seed, track, &output)
        }
        Command::Inputs { what: InputsWhat::Play(args) } => inputs_cmd::play(&args),
        Command::Map { what: MapWhat::Record(args) } => map_cmd::record(&args),
        Command::Map { what: MapWhat::Check(args) } => map_cmd::check(&args),
        Command::Map { what: MapWhat::Show(args) } => map_cmd::show(&args),
        Command::Tmi { what: TmiWhat::Inspect(args) } => tmi_cmd::inspect(&args),
        Command::Tmi { what: TmiWhat::Check(args) } => {
            rulka_shm::install_stop_handler();
            tmi_cmd::check(&args)
        }
        Command::Shm { what: ShmWhat::Gc { dry_run, root } } => {
            let root = root.unwrap_or_else(rulka_run::shm_root);
            let found = rulka_shm::collect_stale(&root, dry_run)
                .map_err(|e| anyhow::anyhow!("scanning {}: {e}", root.display()))?;
            for line in rulka_run::describe_gc(&found, dry_run) {
                println!("{line}");
            }
            let stale = found
                .iter()
                .filter(|f| !matches!(f.verdict, rulka_shm::RunShmVerdict::Live { .. }));
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
        Command::Eval(args) => eval_cmd::run(&args, cli.ort_lib.as_deref()),
        Command::Gpu { what: GpuWhat::Check(args) } => {
            gpu_cmd::check(&args, cli.ort_lib.as_deref())
        }
    }
}

/// Hidden first argument: print the command-line reference
/// (docs/reference/cli.md) of `rulka`, `rulka-torch` and `rulka-collector`.
const REFERENCE_ARG: &str = "__reference";
/// Set: parse the arguments, then exit 0 without running anything (the
/// guide's tests check its command lines with it; 2 on a parse error).
const PARSE_ONLY_ENV: &str = "RULKA_PARSE_ONLY";

fn reference() -> ExitCode {
    use clap::CommandFactory as _;
    let mut out = String::from(
        "# Command-line reference\n\n\
         <!-- Made by `rulka __reference` from the binaries' argument parsers: do not edit; \
         RULKA_BLESS=1 cargo test -p rulka --test docs rewrites it. -->\n\n\
         `rulka` runs every command; those that use libtorch (`train`, `pretrain`, `init`, `import`, \
         `export`, `hf-vit`, `bench`, `demo`) it hands over to `rulka-torch` beside it, so their options are \
         `rulka-torch`'s. `rulka-collector` is the collector for game PCs (Windows and Linux), without libtorch. \
         Exit codes: 0 success; 1 the job ran and failed; 2 bad input (config, paths, arguments), nothing written. \
         A number option refuses NaN and ±∞, and a value outside its range is refused naming the option and the value.\n\n",
    );
    out.push_str(&rulka_console::reference::markdown(
        &Cli::command(),
        "rulka",
        &handover::TORCH_COMMANDS,
        true,
    ));
    let exe = std::env::current_exe().unwrap_or_default();
    for bin in ["rulka-torch", "rulka-collector"] {
        let path = exe.with_file_name(bin);
        match std::process::Command::new(&path).arg(REFERENCE_ARG).output() {
            Ok(o) if o.status.success() => out.push_str(&String::from_utf8_lossy(&o.stdout)),
            Ok(o) => {
                eprintln!(
                    "{} {REFERENCE_ARG}: {}",
                    path.display(),
                    String::from_utf8_lossy(&o.stderr)
                );
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{}: {e} (build it beside rulka)", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{out}");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    // A game's guard (environment.tmi.launch) is this binary run again.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(rulka_collector::GUARD_ARG) {
        rulka_console::init(0);
        return ExitCode::from(rulka_collector::guard_main(&argv[2..]).clamp(0, 255) as u8);
    }
    if argv.get(1).map(String::as_str) == Some(REFERENCE_ARG) {
        return reference();
    }
    if handover::torch_command(&argv) {
        // Only returns when `rulka-torch` could not be started.
        return rulka_cli::report_error(&handover::to_torch(), &|_| None);
    }
    let cli = Cli::parse();
    if std::env::var_os(PARSE_ONLY_ENV).is_some() {
        return ExitCode::SUCCESS;
    }
    rulka_console::init(cli.verbose);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => rulka_cli::report_error(&e, &|_| None),
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
    const KNOWN: [&str; 8] = [
        "sim serve --refuse-for-s",
        "sim serve --autopilot",
        "sim plan --converged",
        "sim bench --seconds",
        "inputs play --grace-s",
        "map record --spacing",
        "map check --spacing",
        "map show --spacing",
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
    /// them: the edge itself (and a value just inside) taken, the value just
    /// past it refused. Every float option the audit finds has its row, so
    /// a new one states its range here.
    #[test]
    fn every_float_option_takes_its_edges_and_refuses_just_past_them() {
        let serve: &[&str] = &["sim", "serve", "--config", "c.yaml"];
        let plan: &[&str] = &["sim", "plan", "--config", "c.yaml", "-o", "o"];
        let bench: &[&str] = &["sim", "bench"];
        let play: &[&str] = &["inputs", "play", "x.inputs", "--port", "9"];
        let record: &[&str] = &["map", "record", "--port", "9", "-o", "o.npy"];
        let check: &[&str] = &["map", "check", "m.npy"];
        let show: &[&str] = &["map", "show", "m.npy", "-o", "o.svg"];
        /// The values taken, then the values refused.
        type Range<'a> = (&'a [&'a str], &'a [&'a str]);
        let positive: Range = (&["1e-9", "4"], &["0", "-0", "-1e-9"]);
        let non_negative: Range = (&["0", "-0", "7"], &["-1e-9"]);
        let rows: [(&[&str], &str, Range); 8] = [
            (serve, "--autopilot", (&["1e-9", "50"], &["0", "50.000001", "-5"])),
            (serve, "--refuse-for-s", non_negative),
            (plan, "--converged", (&["0", "0.999999"], &["1", "-1e-9"])),
            (bench, "--seconds", positive),
            (play, "--grace-s", non_negative),
            (record, "--spacing", positive),
            (check, "--spacing", positive),
            (show, "--spacing", positive),
        ];
        let named: Vec<String> =
            rows.iter().map(|(pre, opt, _)| format!("{} {} {opt}", pre[0], pre[1])).collect();
        let mut found = rulka_cli::numbers::float_options(&super::Cli::command());
        let mut listed = named.clone();
        found.sort();
        listed.sort();
        assert_eq!(listed, found, "every float option has a row, and only those");
        for (pre, opt, (take, refuse)) in rows {
            for (values, ok) in [(take, true), (refuse, false)] {
                for v in values {
                    let args = [&["rulka"], pre, &[opt, v]].concat();
                    let got = super::Cli::try_parse_from(&args);
                    assert_eq!(got.is_ok(), ok, "{args:?}: {:?}", got.err().map(|e| e.to_string()));
                    if let Err(e) = got {
                        let e = e.to_string();
                        assert!(e.contains(&format!("'{v}' for '{opt}")), "{args:?}: {e}");
                    }
                }
            }
        }
    }
}
