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
//! - [`train::run`]: the learner in this process fed by a
//!   [`rulka_transport::RolloutSource`], weight snapshots to a
//!   [`rulka_transport::WeightSink`] after every update, periodic atomic
//!   checkpoints and ONNX exports, TensorBoard scalars, a progress line, a
//!   clean stop on Ctrl-C / SIGTERM / a limit, and `summary.json`.
//! - [`transport`]: sets up the run's transport — shared memory (default)
//!   or NATS JetStream (a local `nats-server` when no URL is configured).
//! - [`supervisor`]: starts the local collector processes and restarts
//!   crashed or hung ones (heartbeat files), with back-off.
//! - [`pending`]: trajectories waiting for the next update (PPO batches,
//!   GRPO groups per prompt, DPO pairs), each batch or group with the frame
//!   count its schedules are read at.
//! - [`heldout`]: greedy evaluation on held-out simulator tracks
//!   (`training.eval_tracks`) on a thread, beside the autopilot.
//! - [`run_dir`]: the run directory — config snapshot, `run.json` (where a
//!   live trainer's transport is), learner state, resume / fresh.
//!
//! ```no_run
//! use rulka_trainer::train::{run, TrainArgs};
//!
//! let args = TrainArgs {
//!     config: Some("configs/sim-quick.yaml".into()),
//!     max_minutes: Some(1.0),
//!     ..TrainArgs::default()
//! };
//! // `rulka collect` children come from this program (the `rulka` binary).
//! run(&args, None)?;
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod best_runs;
pub mod heldout;
mod intake;
pub mod pending;
pub mod publisher;
pub mod run_dir;
pub mod supervisor;
pub mod train;
pub mod transport;

use std::path::Path;

use rulka_config::Config;

/// An error caused by the user's input: the CLI prints it as one line and
/// exits with code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Loads a config, turning any problem into [`BadInput`].
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    Config::from_file(path).map_err(|e| BadInput(e.to_string()).into())
}
