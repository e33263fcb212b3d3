//! What `rulka train` is asked to do (the CLI's arguments, without clap).

use std::path::PathBuf;

use rulka_config::TransportKind;

/// What `rulka train` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Config file of a new run (its `training.run_dir` is the run directory).
    pub config: Option<PathBuf>,
    /// Continue the run in this directory from its last checkpoint.
    pub resume: Option<PathBuf>,
    /// Start over: replace an existing run's state (with `config`), or start
    /// fresh when the resumed run has no checkpoint (with `resume`).
    pub fresh: bool,
    /// Run directory (overrides `training.run_dir`).
    pub run_dir: Option<PathBuf>,
    /// Stop after this many environment frames (total, including resumed ones).
    pub max_frames: Option<u64>,
    /// Stop after this many minutes of this invocation.
    pub max_minutes: Option<f64>,
    /// Number of collector processes (overrides `collectors.count`).
    pub collectors: Option<u32>,
    /// Also save every exploration trajectory to `RUN_DIR/trajectories.jsonl`.
    pub save_trajectories: bool,
    /// Transport (overrides `transport.kind`).
    pub transport: Option<TransportKind>,
    /// NATS server URL (overrides `transport.nats.url`).
    pub nats_url: Option<String>,
    /// ONNX Runtime library for held-out evaluation (default: found as
    /// [`rulka_inference::load_runtime`] finds it).
    pub ort_lib: Option<PathBuf>,
}
