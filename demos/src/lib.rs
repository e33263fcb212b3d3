//! Demonstrations for behaviour cloning (`rulka demos record`, `rulka
//! pretrain`): drives — TMInterface input files (`.inputs`, as
//! `best_runs/` keeps them), trajectories a run saved
//! (`--save-trajectories`) or the scripted autopilot — driven through an [`Environment`] with rulka's
//! own observation code, and stored one safetensors shard per drive
//! ([`Demo`], [`write_demos`], [`read_demos`]) with the map, the config's
//! network hash and the source file, so a dataset made for another network
//! or map is refused by name. Also the saved-trajectory JSON Lines format
//! ([`SavedTrajectory`]).
//!
//! ```
//! use rulka_config::Config;
//! use rulka_demos::{drive_script, read_demos, write_demos};
//! use rulka_env::SimEnv;
//!
//! let mut cfg = Config::default();
//! cfg.environment.sim.track_seeds = vec![3];
//! let mut env = SimEnv::new(&cfg);
//! // Full throttle from the start, straight on.
//! let demo = drive_script(&cfg, &mut env, 3, "flat-out.inputs", "0.00 press up\n")?;
//! assert!(demo.actions.iter().all(|&a| a == 0));
//! let dir = tempfile::tempdir()?;
//! write_demos(dir.path(), &[demo.clone()])?;
//! assert_eq!(read_demos(dir.path(), &cfg)?, vec![demo]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod record;
mod saved;
mod shard;

use std::path::PathBuf;

pub use record::{
    action_of_keys, decision_time_ms, drive, drive_autopilot, drive_script, replay_saved,
};
pub use saved::{load_jsonl, SavedId, SavedTrajectory};
pub use shard::{
    config_maps, environment_label, read_demos, write_demos, Demo, DEMO_FORMAT, DEMO_FORMAT_VERSION,
};

#[cfg(doc)]
use rulka_env::Environment;

/// Why a drive could not become a demonstration, or a shard be used.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// An input script the parser rejects.
    #[error("{file}: {error}")]
    Script {
        /// The file.
        file: String,
        /// What the parser said (with the line).
        #[source]
        error: rulka_env::InputScriptError,
    },
    /// Keys held together that are none of the 12 actions.
    #[error("{file}: at {:.2} s the keys held ({}) are not one of the 12 actions", *at_ms as f64 / 1000.0, keys_text(keys))]
    Keys {
        /// The file.
        file: String,
        /// Race time, ms.
        at_ms: u64,
        /// `[accelerate, brake, left, right]`.
        keys: [bool; 4],
    },
    /// A drive that never left the start.
    #[error("{drive}: {message}")]
    NeverStarted {
        /// The drive's source.
        drive: String,
        /// What happened.
        message: String,
    },
    /// A shard or a drive that does not belong to this config (another
    /// network, another map) or is not a shard at all.
    #[error("{}: {message}", path.display())]
    Mismatch {
        /// The file (or `FILE:LINE`).
        path: PathBuf,
        /// What differs.
        message: String,
    },
    /// A damaged shard.
    #[error("{}: damaged demonstration shard: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The environment failed while driving.
    #[error("{drive}: {error}")]
    Env {
        /// The drive's source.
        drive: String,
        /// The environment's error.
        error: rulka_env::EnvError,
    },
    /// Reading or writing a file failed (a path that does not exist is bad
    /// input; any other failure is not). The OS error is in the message,
    /// not a source: printed with its chain, it would say it twice.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
}

impl DemoError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::Script { .. } | Self::Keys { .. } | Self::NeverStarted { .. } => K::BadInput,
            Self::Mismatch { .. } => K::BadInput,
            Self::Corrupt { .. } => K::Corrupt,
            Self::Env { error, .. } => error.kind(),
            Self::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound => K::BadInput,
            Self::Io { .. } => K::Failed,
        }
    }
}

fn keys_text(keys: &[bool; 4]) -> String {
    let names = ["up", "down", "left", "right"];
    let held: Vec<&str> = (0..4).filter(|&i| keys[i]).map(|i| names[i]).collect();
    if held.is_empty() {
        "none".into()
    } else {
        held.join("+")
    }
}
