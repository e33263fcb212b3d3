//! rulka's environments behind one trait, [`Environment`]: the built-in
//! TrackMania-like simulator ([`SimEnv`]) and the real game over the
//! TMInterface socket protocol ([`TmiEnv`]).
//!
//! Both produce what the actor-critic consumes — an ego-centred grayscale
//! frame (`H·W` bytes) and the float vector in the layout of
//! [`rulka_config::float_layout`] — and the per-step reward ingredients of
//! [`rulka_config::ingredients`] the learner turns into rewards. Decisions
//! are the original's 12 discrete actions, one per action head.
//!
//! The float vector comes from one place for both: the game's state
//! ([`GameState`], decoded from TMInterface's `SimStateData` bytes, or
//! described by the simulator) through [`FloatBuilder`] with the map's zone
//! centres ([`ZoneMap`], loaded from the original's `.npy` reference lines
//! by [`read_points`]).
//!
//! ```
//! use rulka_config::Config;
//! use rulka_env::{Environment, SimEnv, Status};
//!
//! let cfg = Config::default();
//! let mut env = SimEnv::new(&cfg);
//! let (frame_len, n_floats) = env.obs_sizes();
//! let (mut frame, mut floats) = (vec![0u8; frame_len], vec![0f32; n_floats]);
//! env.reset(7)?;
//! let mut status = Status::Running;
//! while status == Status::Running {
//!     env.observe(&mut frame, &mut floats)?;
//!     status = env.step(&[0])?; // full throttle, straight on
//! }
//! println!("{status:?} after {:.1} m", env.ingredients()[rulka_config::ingredients::METERS]);
//! # Ok::<(), rulka_env::EnvError>(())
//! ```

mod floats;
mod inputs;
mod line;
mod npy;
mod plan;
mod png;
mod sim;
mod tmi;
mod track;
mod zones;

pub use floats::{
    physics_group, FloatBuilder, ProgressTracker, TrackProgress, ASPHALT, PHYSICS_GROUPS,
};
pub use inputs::{input_script, InputScript, InputScriptError, InputTiming};
pub use line::{
    analyze_line, fmt_race_time, resample, resample_by, CheckpointFit, Crossing, LineRecordError,
    LineRecorder, LineReport, LineStep, LineThresholds, Recorded, MAX_CAR_SPEED,
};
pub use npy::{encode_points, parse_points, read_points, write_points, NpyError};
pub use plan::{
    plan, plan_beside, refine, replay, search, Plan, PlanSettings, Refined, Rung, Search,
    SearchSettings,
};
pub use png::encode_png;
pub use sim::{
    head_engine_steps, overview_png, reference_line, Autopilot, Car, Sim, SimEnv, SimParams,
    SimState, GRIP, TOP_SPEED, VIEW_M,
};
pub use tmi::server::{SimServer, SimServerFault, SimServerReceived};
pub use tmi::state::{
    checkpoint_counts, patch_finish, private_region, CpTime, GameState, GameStateError, Wheel,
    CMD_BUFFER_CORE, GAME_STATE_LEN, MAX_CHECKPOINTS, SIM_HAS_ALL, SIM_HAS_PLAYER_INFO,
};
pub use tmi::{bgra_to_gray, load_zone_map, TmiClient, TmiEnv, TmiSync};
pub use track::{cell, Projection, Track, POINT_SPACING, RASTER_RES, ZONE_POINTS};
pub use zones::{ZoneError, ZoneMap, ZoneParams};

use rulka_config::ingredients;

/// How a rollout stands after a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// Still racing.
    Running,
    /// Crossed the finish line at this race time.
    Finished {
        /// Race time in milliseconds.
        race_time_ms: f64,
    },
    /// Cut off.
    CutOff(CutOff),
}

impl Status {
    /// The rollout ended (finished or cut off).
    pub fn is_done(&self) -> bool {
        !matches!(self, Status::Running)
    }
}

/// Why a rollout was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutOff {
    /// `cutoff_rollout_if_race_not_finished_within_duration_ms` elapsed.
    TimeLimit,
    /// No new zone reached within `cutoff_rollout_if_no_vcp_passed_within_duration_ms`.
    NoProgress,
}

/// Errors at the environment boundary.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// A call that needs a running rollout came before `reset` or after the end.
    #[error("environment: {0}")]
    State(String),
    /// An action index outside 0..12, or the wrong number of heads.
    #[error("invalid action {actions:?}: {reason}")]
    BadAction {
        /// The actions given.
        actions: Vec<u8>,
        /// Why they are invalid.
        reason: String,
    },
    /// A socket operation failed (connect, read, write).
    #[error("TMInterface at {addr}: {op}: {source}")]
    Io {
        /// Peer address.
        addr: String,
        /// What was being done.
        op: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The peer did not answer within the timeout.
    #[error("TMInterface at {addr}: no reply to {op} within {timeout_ms} ms")]
    Timeout {
        /// Peer address.
        addr: String,
        /// What was awaited.
        op: String,
        /// The timeout.
        timeout_ms: u64,
    },
    /// The game's state cannot become the network's inputs (an unknown
    /// contact material, a map that cannot be a zone map…).
    #[error("game state: {0}")]
    Game(String),
    /// The bytes of a simulation state are not a `SimStateData`.
    #[error("TMInterface sent {0}")]
    BadState(#[from] tmi::state::GameStateError),
    /// A map's files could not be loaded.
    #[error("map {name}: {message}")]
    Map {
        /// The map's name in the config.
        name: String,
        /// What is wrong (naming the file).
        message: String,
    },
    /// The peer sent something the protocol does not allow.
    #[error("TMInterface at {addr}: protocol error: {message}")]
    Protocol {
        /// Peer address.
        addr: String,
        /// What was wrong.
        message: String,
    },
}

impl EnvError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::Map { .. } => K::BadInput,
            Self::Io { .. } | Self::Timeout { .. } => K::Unavailable,
            Self::BadState(_) | Self::Protocol { .. } => K::Corrupt,
            Self::State(_) | Self::BadAction { .. } | Self::Game(_) => K::Failed,
        }
    }
}

/// An environment a collector drives: reset to a track ("prompt"), observe,
/// step with one action per head, read the reward ingredients.
pub trait Environment {
    /// Bytes per frame (`H·W`; 1 for float-only networks) and floats per step.
    fn obs_sizes(&self) -> (usize, usize);

    /// Starts a rollout on the track named by `track_seed` (the simulator's
    /// seed; for the game, the index into the map cycle), at its start state.
    fn reset(&mut self, track_seed: u64) -> Result<(), EnvError>;

    /// The current observation: `frame` is `H·W` grayscale bytes, `floats`
    /// the raw (unnormalised) float vector.
    fn observe(&mut self, frame: &mut [u8], floats: &mut [f32]) -> Result<(), EnvError>;

    /// Applies one decision (one action index 0..12 per head) for one
    /// decision period and reports how the rollout stands.
    fn step(&mut self, actions: &[u8]) -> Result<Status, EnvError>;

    /// The reward ingredients of the current state, indexed by
    /// [`rulka_config::ingredients`].
    fn ingredients(&self) -> [f32; ingredients::COUNT];
}

/// Checks a decision: `n_heads` actions, each below 12.
pub(crate) fn check_actions(actions: &[u8], n_heads: usize) -> Result<(), EnvError> {
    if actions.len() != n_heads {
        return Err(EnvError::BadAction {
            actions: actions.to_vec(),
            reason: format!("expected {n_heads} action head(s), got {}", actions.len()),
        });
    }
    if let Some(a) = actions.iter().find(|&&a| a as usize >= rulka_config::N_ACTIONS) {
        return Err(EnvError::BadAction {
            actions: actions.to_vec(),
            reason: format!("action {a} is not in 0..{}", rulka_config::N_ACTIONS),
        });
    }
    Ok(())
}
