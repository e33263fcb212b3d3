//! `rulka-collector`: one collector on a machine of its own (a game PC),
//! joined to a trainer's run over NATS. It needs ONNX Runtime and nothing
//! else (no libtorch): the run's config, the game's map files and the
//! weights come from the NATS server.
//!
//! ```text
//! rulka-collector --connect nats://TRAINER:4222 --run NAME --id 3 [--env tmi --port 8478]
//! ```
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

#[derive(Parser, Debug)]
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
    let mut joined = rulka_inference::remote::join(
        &opts,
        &a.run,
        a.id,
        &a.maps_dir,
        Duration::from_secs(a.wait_s),
    )
    .map_err(classify)?;
    if let Some(kind) = a.env {
        joined.cfg.environment.kind = kind;
    }
    eprintln!(
        "[rulka-collector {}] joined run {} on {} (incarnation {}, weights v{}, {:?})",
        a.id, a.run, a.connect, joined.incarnation, joined.initial.0, joined.cfg.environment.kind
    );
    let opts = CollectorOptions {
        id: a.id,
        incarnation: joined.incarnation,
        max_rollouts: a.max_rollouts,
        heartbeat: None,
    };
    rulka_inference::remote::run_joined(
        rt,
        joined,
        a.port,
        a.dump_states.as_deref(),
        opts,
        || rulka_shm::signal::count() > 0,
    )?;
    Ok(())
}

fn main() -> ExitCode {
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
