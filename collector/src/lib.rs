//! rulka's collector: drives the game (over TMInterface) or the built-in
//! simulator with the trainer's current policy on ONNX Runtime, and sends
//! trajectories to the trainer — through the run's shared memory on the
//! trainer's machine (Linux), or over NATS JetStream from anywhere (game
//! PCs, Linux or Windows). No libtorch.
//!
//! - the collector loop ([`Collector`]): rollouts, chunks, greedy
//!   evaluation runs, quarantine of non-finite values;
//! - joining a run over NATS ([`join_run`], [`run_joined`]);
//! - attaching to a run on this machine's shared memory ([`run_local`],
//!   Linux);
//! - driving an environment until told to stop, delivering what is still
//!   queued at the end (within [`OUTBOX_AT_EXIT`]);
//! - games a collector launches, watches and relaunches
//!   (`environment.tmi.launch`; a guard process on Linux, [`guard_main`], a
//!   Job Object on Windows);
//! - checks of a game setup ([`preflight`], `tmi check`);
//! - several collectors in one process, one game each ([`run_slots`],
//!   `rulka-collector --slots N`).
//!
//! The `rulka-collector` binary is this library behind a command line;
//! `rulka collect` (the trainer's machine) calls it too.
//!
//! ```no_run
//! use std::time::Duration;
//! use rulka_collector::{join_run, run_joined, CollectorOptions};
//! use rulka_transport::NatsOptions;
//!
//! let opts = NatsOptions { url: "nats://127.0.0.1:4222".into(), ..NatsOptions::default() };
//! let joined = join_run(&opts, "my-run", 0, "rulka-maps".as_ref(), Duration::from_secs(60))?;
//! let rt = rulka_inference::load_runtime(None)?;
//! let copts = CollectorOptions { id: 0, incarnation: 0, max_rollouts: Some(10), heartbeat: None, game_log: None };
//! run_joined(rt, joined, None, None, copts, || false)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod curriculum;
mod drive;
mod game;
#[cfg(unix)]
mod local;
mod preflight;
mod remote;
mod rollout;
mod slots;

pub use drive::OUTBOX_AT_EXIT;
#[cfg(unix)]
pub use game::{guard_main, GUARD_ARG};
#[cfg(unix)]
pub use local::run_local;
pub use preflight::{preflight, preflight_verdict, PreflightCheck};
pub use remote::{join_run, run_joined, Joined};
pub use slots::{run_slots, Slots};

pub use rollout::{
    prompts, sampling_seed, Collector, CollectorError, CollectorOptions, CollectorStats, RunLayout,
};
pub use rulka_config::prompt_name;
