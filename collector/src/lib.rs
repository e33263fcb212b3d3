//! rulka's collector: drives the game (over TMInterface) or the built-in
//! simulator with the trainer's current policy on ONNX Runtime, and sends
//! trajectories to the trainer — through the run's shared memory on the
//! trainer's machine (Linux), or over NATS JetStream from anywhere (game
//! PCs, Linux or Windows). No libtorch.
//!
//! - [`rollout`]: the collector loop ([`Collector`]): rollouts, chunks,
//!   greedy evaluation runs, quarantine of non-finite values;
//! - [`remote`]: joining a run over NATS ([`remote::join`],
//!   [`remote::run_joined`]);
//! - [`local`] (Linux): attaching to a run on this machine's shared memory;
//! - [`drive`]: driving an environment until told to stop, delivering what
//!   is still queued at the end;
//! - [`game`]: games a collector launches, watches and relaunches
//!   (`environment.tmi.launch`; a guard process on Linux, a Job Object on
//!   Windows);
//! - [`preflight`]: checks of a game setup (`tmi check`);
//! - [`slots`]: several collectors in one process, one game each
//!   (`rulka-collector --slots N`).
//!
//! The `rulka-collector` binary is this library behind a command line;
//! `rulka collect` (the trainer's machine) calls it too.
//!
//! ```no_run
//! use std::time::Duration;
//! use rulka_collector::{remote, CollectorOptions};
//! use rulka_transport::nats::NatsOptions;
//!
//! let opts = NatsOptions { url: "nats://127.0.0.1:4222".into(), ..NatsOptions::default() };
//! let joined = remote::join(&opts, "my-run", 0, "rulka-maps".as_ref(), Duration::from_secs(60))?;
//! let rt = rulka_inference::runtime::load(None)?;
//! let copts = CollectorOptions { id: 0, incarnation: 0, max_rollouts: Some(10), heartbeat: None, game_log: None };
//! remote::run_joined(rt, joined, None, None, copts, || false)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod drive;
pub mod game;
#[cfg(unix)]
pub mod local;
pub mod preflight;
pub mod remote;
pub mod rollout;
pub mod slots;

pub use rollout::{
    prompt_name, prompts, sampling_seed, Collector, CollectorError, CollectorOptions,
    CollectorStats, RunLayout,
};
