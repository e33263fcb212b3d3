//! rulka's trainer as a library: what `rulka train` runs.
//!
//! ```text
//!  collectors ──chunks──▶ transport ──trajectories──▶ trainer: rewards, pending
//!  (rulka collect,        (shm rings,    (RolloutSource)     batches/groups/pairs,
//!   rulka-collector)       NATS stream)                     learner updates
//!       ▲                                                        │
//!       └──────weights────── transport ◀──snapshots (WeightSink)─┘
//!                       (shm board, NATS object store)
//! ```
//!
//! The trainer is a `Trainer` (trainer/src/trainer.rs) of named stages, each in its own
//! module and testable alone: intake (ids, duplicates, gaps, incompletes),
//! prepare (rewards computed once), pending (batches per algorithm), update,
//! publish (weights and checkpoints), journal (every output behind one
//! recorder interface). Around it: the transport set up from the config
//! (shared memory, or NATS with a local server looked after), the
//! supervisor of the local collector processes, and the run directory
//! with its tables.
//!
//! The public surface: [`run`] with its [`TrainOptions`] and a [`Launcher`]
//! (how a collector process is started: the CLI's runs `rulka collect`);
//! the run directory's files ([`RunInfo`], [`read_trajectories`],
//! [`read_heldout`], [`BestRuns`]); what a collector needs to reach a run
//! over NATS ([`nats_options`], [`NatsInfo`]); shared-memory housekeeping
//! ([`shm_root`], [`describe_gc`]).
//!
//! ```no_run
//! use std::process::Command;
//! use rulka_trainer::{run, TrainOptions};
//!
//! let opts = TrainOptions {
//!     config: Some("configs/sim-quick.yaml".into()),
//!     max_minutes: Some(1.0),
//!     ..TrainOptions::default()
//! };
//! // Each local collector is `rulka collect --run RUN_DIR --id ID --incarnation N`.
//! let summary = run(&opts, Box::new(|run_dir, id, incarnation| {
//!     let mut cmd = Command::new("rulka");
//!     cmd.arg("collect").arg("--run").arg(run_dir);
//!     cmd.args(["--id", &id.to_string(), "--incarnation", &incarnation.to_string()]);
//!     Ok(cmd)
//! }))?;
//! print!("{summary}");
//! # Ok::<(), anyhow::Error>(())
//! ```

mod best_runs;
mod health;
mod heldout;
mod intake;
mod journal;
mod options;
mod pending;
mod prepare;
mod progress;
mod publisher;
mod run_dir;
mod summary;
mod supervisor;
mod threads;
mod train;
mod trainer;
mod transport;
mod update;
mod weights;

pub use best_runs::BestRuns;
pub use options::TrainOptions;
pub use rulka_run::{
    describe_gc, load_config, nats_options, read_heldout, read_trajectories,
    read_trajectories_so_far, shm_root, BadInput, HeldOutRow, Imported, NatsInfo, RunDir, RunInfo,
    TrajectoryRow,
};
pub use supervisor::Launcher;
pub use train::{device_name, learner_device, run};
