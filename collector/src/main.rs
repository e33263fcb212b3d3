//! `rulka-collector`: one collector on a machine of its own (a game PC,
//! Linux or Windows), joined to a trainer's run over NATS. It needs ONNX
//! Runtime and nothing else (no libtorch): the run's config, the game's map
//! files and the weights come from the NATS server.
//!
//! ```text
//! rulka-collector --connect nats://TRAINER:4222 --run NAME --id 3 [--env tmi --port 8478]
//! ```
//!
//! `--slots N` runs N collectors in one process (ids `--id`…, TMInterface
//! ports `--port`…, one game each); with `environment.tmi.launch` in the
//! run's config each slot launches, watches and relaunches its own game
//! (output in `--logs DIR/game-<id>.log`), and no game outlives the process.
//!
//! Credentials: `--user`/`--password` or `--token` (or `RULKA_NATS_USER`,
//! `RULKA_NATS_PASSWORD`, `RULKA_NATS_TOKEN`); TLS with `--tls-ca` (and
//! `--tls-cert`/`--tls-key` for client certificates). Each start takes the
//! next incarnation of slot `--id` on the server, so restarting a collector
//! never reuses trajectory ids. Exit codes: 0 stopped (Ctrl-C, SIGTERM,
//! closing the console on Windows, or `--max-rollouts`), 1 failed, 2 bad
//! input (credentials, TLS, a run that does not exist, a run made by another
//! rulka build, no ONNX Runtime library).
//!
//! `rulka-collector tmi check --port P --config C [--launch]` is the game
//! setup's preflight (as `rulka tmi check`), for the game PC itself.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rulka_collector::CollectorError;
use rulka_collector::Slots;
use rulka_config::EnvKind;
use rulka_error::ErrorKind;
use rulka_transport::{NatsOptions, TlsOptions};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "rulka-collector",
    version = rulka_inference::native::VERSION,
    about = "A rulka collector for a trainer's run over NATS (no libtorch)",
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    tool: Option<Tool>,
    /// More detail on stderr: -v rulka's debug messages and other crates'
    /// warnings, -vv everything (RUST_LOG, when set, chooses instead).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// The NATS server: nats://HOST:PORT (or tls://HOST:PORT).
    #[arg(long, required = true)]
    connect: Option<String>,
    /// The run's name on the server (`rulka train` prints it).
    #[arg(long, required = true)]
    run: Option<String>,
    /// This collector's slot; each machine's collectors need their own ids.
    #[arg(long, required = true)]
    id: Option<u32>,
    /// Environment: `tmi` (the game) or `sim` (the built-in simulator); default: the run's.
    #[arg(long, value_parser = parse_env)]
    env: Option<EnvKind>,
    /// TMInterface port (default: environment.tmi.base_port + id).
    #[arg(long)]
    port: Option<u16>,
    /// User name (or $RULKA_NATS_USER).
    #[arg(long)]
    user: Option<String>,
    /// Password (or $RULKA_NATS_PASSWORD).
    #[arg(long)]
    password: Option<String>,
    /// Token (or $RULKA_NATS_TOKEN).
    #[arg(long)]
    token: Option<String>,
    /// CA certificate (PEM) of the server's TLS certificate.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers that verify clients.
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// ONNX Runtime library (default: $ORT_DYLIB_PATH, next to this binary, …).
    #[arg(long)]
    ort_lib: Option<PathBuf>,
    /// Where the run's map files are stored.
    #[arg(long, default_value = "rulka-maps")]
    maps_dir: PathBuf,
    /// Save every game state received into DIR (for `rulka tmi inspect`).
    #[arg(long)]
    dump_states: Option<PathBuf>,
    /// Stop after this many rollouts.
    #[arg(long)]
    max_rollouts: Option<u64>,
    /// Seconds to wait for the run and its first weights.
    #[arg(long, default_value_t = 60)]
    wait_s: u64,
    /// Collectors in this process, one game each: ids ID..ID+N, TMInterface
    /// ports PORT..PORT+N (PORT: --port, else environment.tmi.base_port + ID).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    slots: u32,
    /// Where launched games write their output (`game-<id>.log`).
    #[arg(long, default_value = "rulka-logs")]
    logs: PathBuf,
}

/// Tools beside collecting.
#[derive(clap::Subcommand, Debug, Clone)]
enum Tool {
    /// TMInterface tools.
    Tmi {
        #[command(subcommand)]
        what: TmiTool,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
enum TmiTool {
    /// Preflight of a game: the plugin answers and speaks the protocol, the
    /// first map loads, steps, frames and states arrive, race time advances.
    Check {
        /// The game's TMInterface port.
        #[arg(long)]
        port: u16,
        /// The run's config (its maps, frame size; `rulka train` writes it
        /// as RUN_DIR/config.yaml).
        #[arg(long)]
        config: PathBuf,
        /// Launch the game first with the config's environment.tmi.launch
        /// (and end it afterwards).
        #[arg(long)]
        launch: bool,
    },
}

/// `tmi check`: exit 0 when every check passed, 1 when one failed, 2 bad input.
fn tmi_check(port: u16, config: &std::path::Path, launch: bool) -> Result<(), (u8, String)> {
    rulka_shm::install_stop_handler();
    let cfg = rulka_config::Config::from_file(config)
        .map_err(|e| (e.kind().exit_code(), e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| (1, format!("locating this binary: {e}")))?;
    let checks = rulka_collector::preflight(&cfg, port, launch, exe, &mut std::io::stdout())
        .map_err(|e| (e.kind().exit_code(), e.to_string()))?;
    let line = rulka_collector::preflight_verdict(&checks).map_err(|l| (1, l))?;
    println!("{line}");
    Ok(())
}

fn parse_env(s: &str) -> Result<EnvKind, String> {
    match s {
        "sim" => Ok(EnvKind::Sim),
        "tmi" => Ok(EnvKind::Tmi),
        _ => Err(format!("unknown environment {s:?}; expected sim or tmi")),
    }
}

/// How the process ends: 0, 1 (failed) or 2 (bad input), with one line.
fn run(a: &Args) -> Result<(), (u8, String)> {
    if let Some(Tool::Tmi { what: TmiTool::Check { port, config, launch } }) = &a.tool {
        return tmi_check(*port, config, *launch);
    }
    // clap requires these when no tool is named.
    let (Some(connect), Some(run), Some(id)) = (&a.connect, &a.run, a.id) else {
        return Err((2, "--connect, --run and --id are required".into()));
    };
    rulka_shm::install_stop_handler();
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let tls =
        (a.tls_ca.is_some() || a.tls_cert.is_some() || connect.starts_with("tls://")).then(|| {
            TlsOptions { ca: a.tls_ca.clone(), cert: a.tls_cert.clone(), key: a.tls_key.clone() }
        });
    let nats = NatsOptions {
        url: connect.clone(),
        token: a.token.clone().or_else(|| env("RULKA_NATS_TOKEN")),
        user: a.user.clone().or_else(|| env("RULKA_NATS_USER")),
        password: a.password.clone().or_else(|| env("RULKA_NATS_PASSWORD")),
        tls,
        name: "rulka-collector".into(),
    };
    let rt = rulka_inference::load_runtime(a.ort_lib.as_deref())
        .map_err(|e| (e.kind().exit_code(), format!("loading ONNX Runtime: {e}")))?;
    let slots = Slots {
        nats,
        run: run.clone(),
        first_id: id,
        count: a.slots,
        env: a.env,
        port: a.port,
        maps_dir: a.maps_dir.clone(),
        dump_states: a.dump_states.clone(),
        max_rollouts: a.max_rollouts,
        wait: Duration::from_secs(a.wait_s),
        logs: a.logs.clone(),
    };
    rulka_collector::run_slots(rt, &slots).map_err(|(id, e)| match e {
        // The user's input (credentials, TLS, an unknown run, another
        // version's run) is named as the transport says it.
        CollectorError::Transport(t) if t.kind() == ErrorKind::BadInput => {
            (t.kind().exit_code(), t.to_string())
        }
        e => (e.kind().exit_code(), format!("collector {id}: {e}")),
    })
}

fn main() -> ExitCode {
    // A game's guard (environment.tmi.launch) is this binary run again (Linux).
    #[cfg(unix)]
    {
        let argv: Vec<String> = std::env::args().collect();
        if argv.get(1).map(String::as_str) == Some(rulka_collector::GUARD_ARG) {
            rulka_console::init(0);
            let code = rulka_collector::guard_main(&argv[2..]);
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
    }
    // `rulka __reference` asks for this binary's part of the CLI reference.
    if std::env::args().nth(1).as_deref() == Some("__reference") {
        use clap::CommandFactory as _;
        print!(
            "{}",
            rulka_console::reference::markdown(&Args::command(), "rulka-collector", &[], true)
        );
        return ExitCode::SUCCESS;
    }
    let args = Args::parse();
    // The guide's tests parse its command lines.
    if std::env::var_os("RULKA_PARSE_ONLY").is_some() {
        return ExitCode::SUCCESS;
    }
    rulka_console::init(args.verbose);
    let code = match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, line)) => {
            eprintln!("error: {line}");
            ExitCode::from(code)
        }
    };
    rulka_shm::stop_cleanup_done();
    code
}
