//! `rulka-collector`: one collector on a machine of its own (a game PC),
//! joined to a trainer's run over NATS. It needs ONNX Runtime and nothing
//! else (no libtorch): the run's config, the game's map files and the
//! weights come from the NATS server.
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
//! never reuses trajectory ids. Exit codes: 0 stopped (Ctrl-C, SIGTERM, or
//! `--max-rollouts`), 1 failed, 2 bad input (credentials, TLS, a run that
//! does not exist, a run made by another rulka build).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use rulka_config::EnvKind;
use rulka_inference::collector::CollectorOptions;
use rulka_transport::nats::{NatsOptions, TlsOptions};
use rulka_transport::TransportError;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "rulka-collector",
    version,
    about = "A rulka collector for a trainer's run over NATS (no libtorch)"
)]
struct Args {
    /// The NATS server: nats://HOST:PORT (or tls://HOST:PORT).
    #[arg(long)]
    connect: String,
    /// The run's name on the server (`rulka train` prints it).
    #[arg(long)]
    run: String,
    /// This collector's slot; each machine's collectors need their own ids.
    #[arg(long)]
    id: u32,
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

fn parse_env(s: &str) -> Result<EnvKind, String> {
    match s {
        "sim" => Ok(EnvKind::Sim),
        "tmi" => Ok(EnvKind::Tmi),
        _ => Err(format!("unknown environment {s:?}; expected sim or tmi")),
    }
}

/// Bad input: one line, exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

fn classify(e: TransportError) -> anyhow::Error {
    if e.is_bad_input() {
        BadInput(e.to_string()).into()
    } else {
        e.into()
    }
}

fn run(a: &Args) -> anyhow::Result<()> {
    rulka_shm::signal::install();
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let tls = (a.tls_ca.is_some() || a.tls_cert.is_some() || a.connect.starts_with("tls://")).then(
        || TlsOptions { ca: a.tls_ca.clone(), cert: a.tls_cert.clone(), key: a.tls_key.clone() },
    );
    let opts = NatsOptions {
        url: a.connect.clone(),
        token: a.token.clone().or_else(|| env("RULKA_NATS_TOKEN")),
        user: a.user.clone().or_else(|| env("RULKA_NATS_USER")),
        password: a.password.clone().or_else(|| env("RULKA_NATS_PASSWORD")),
        tls,
        name: format!("rulka-collector-{}", a.id),
    };
    let rt =
        rulka_inference::runtime::load(a.ort_lib.as_deref()).context("loading ONNX Runtime")?;
    if a.slots == 1 {
        return slot(a, &opts, rt, a.id, a.port);
    }
    // One thread per slot, each a whole collector with its own game and connection.
    let handles: Vec<_> = (0..a.slots)
        .map(|i| {
            let (a, mut o) = (a.clone(), opts.clone());
            let id = a.id + i;
            o.name = format!("rulka-collector-{id}");
            let port = a.port.map(|p| p.saturating_add(i as u16));
            std::thread::Builder::new()
                .name(format!("slot-{id}"))
                .spawn(move || (id, slot(&a, &o, rt, id, port)))
        })
        .collect::<Result<_, _>>()
        .context("starting the slots' threads")?;
    let mut first_error = None;
    for h in handles {
        match h.join() {
            Ok((_, Ok(()))) => {}
            Ok((id, Err(e))) => {
                eprintln!("[rulka-collector {id}] ended: {e:#}");
                // One slot's failure stops the others (the process's exit code says it).
                rulka_shm::signal::request();
                first_error.get_or_insert(e);
            }
            Err(_) => {
                rulka_shm::signal::request();
                first_error.get_or_insert(anyhow::anyhow!("a slot's thread panicked"));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One collector slot: joins the run as `id` and drives until stopped.
fn slot(
    a: &Args,
    opts: &NatsOptions,
    rt: rulka_inference::Runtime,
    id: u32,
    port: Option<u16>,
) -> anyhow::Result<()> {
    let mut joined =
        rulka_inference::remote::join(opts, &a.run, id, &a.maps_dir, Duration::from_secs(a.wait_s))
            .map_err(classify)?;
    if let Some(kind) = a.env {
        joined.cfg.environment.kind = kind;
    }
    eprintln!(
        "[rulka-collector {id}] joined run {} on {} (incarnation {}, weights v{}, {:?})",
        a.run, a.connect, joined.incarnation, joined.initial.0, joined.cfg.environment.kind
    );
    let game_log =
        joined.cfg.environment.tmi.launch.as_ref().map(|_| a.logs.join(format!("game-{id}.log")));
    if game_log.is_some() {
        std::fs::create_dir_all(&a.logs)
            .with_context(|| format!("creating {}", a.logs.display()))?;
    }
    let copts = CollectorOptions {
        id,
        incarnation: joined.incarnation,
        max_rollouts: a.max_rollouts,
        heartbeat: None,
        game_log,
    };
    rulka_inference::remote::run_joined(rt, joined, port, a.dump_states.as_deref(), copts, || {
        rulka_shm::signal::count() > 0
    })?;
    Ok(())
}

fn main() -> ExitCode {
    // A game's guard (environment.tmi.launch) is this binary run again.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(rulka_env::game::GUARD_ARG) {
        return ExitCode::from(rulka_env::game::guard_main(&argv[2..]).clamp(0, 255) as u8);
    }
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(bad) = e.downcast_ref::<BadInput>() {
                eprintln!("error: {bad}");
                ExitCode::from(2)
            } else {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}
