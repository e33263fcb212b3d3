//! A rulka training run on disk, for every process that reads or writes
//! one — the trainer, its local collectors (`rulka collect`), `rulka plot`,
//! `rulka shm gc` — without libtorch: [`RunDir`] names the directory's
//! files, [`RunInfo`] is the live trainer's `run.json` (where its transport
//! is), the tables ([`read_trajectories`], [`read_heldout`] and their
//! writers) are read and written only here, and [`load_config`] turns a bad
//! config into [`BadInput`] (exit code 2).
//!
//! ```
//! use rulka_run::RunDir;
//!
//! let run = RunDir::new("runs/sim-quick");
//! assert_eq!(run.config_yaml(), std::path::Path::new("runs/sim-quick/config.yaml"));
//! let missing = rulka_run::read_trajectories(run.root()).unwrap_err();
//! assert!(missing.to_string().contains("trajectories.csv"));
//! ```

mod best_run;
mod run_dir;
mod starts;
mod tables;

pub use best_run::{best_run_file, kept_race_time, map_key, parse_best_run_file};
pub use run_dir::{describe_gc, remove_stale_shm, shm_root, Imported, NatsInfo, RunDir, RunInfo};
pub use starts::{thrown_away_by, unix_now, utc, Ended, Start, StateAt};
pub use tables::{
    counted_race_time, kept, mark_thrown_away, read_heldout, read_trajectories,
    read_trajectories_so_far, HeldOutCsv, HeldOutRow, OnTimeline, RunFigures, TrajectoriesCsv,
    TrajectoryRow,
};

use std::path::Path;

use rulka_config::Config;
use rulka_error::ErrorKind;
use rulka_transport::{NatsOptions, TlsOptions};

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

impl BadInput {
    /// Always [`ErrorKind::BadInput`].
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::BadInput
    }
}

/// Loads a config, turning any problem into [`BadInput`].
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let cfg = Config::from_file(path).map_err(|e| BadInput(e.to_string()))?;
    tracing::debug!(
        "{}: {:?}, network {}",
        path.display(),
        cfg.training.algorithm,
        cfg.network_hash()
    );
    Ok(cfg)
}

/// [`load_config`] without the value rules (`Config::validate`): for a
/// caller that applies command-line flags first and validates after.
pub fn load_config_unvalidated(path: &Path) -> anyhow::Result<Config> {
    Ok(Config::from_file_unvalidated(path).map_err(|e| BadInput(e.to_string()))?)
}

/// Connection options from `transport.nats` and the environment
/// (`RULKA_NATS_TOKEN`, `RULKA_NATS_USER`, `RULKA_NATS_PASSWORD`).
pub fn nats_options(cfg: &Config, url: &str, name: &str) -> NatsOptions {
    let n = &cfg.transport.nats;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    NatsOptions {
        url: url.to_string(),
        token: n.token.clone().or_else(|| env("RULKA_NATS_TOKEN")),
        user: n.user.clone().or_else(|| env("RULKA_NATS_USER")),
        password: n.password.clone().or_else(|| env("RULKA_NATS_PASSWORD")),
        tls: n.tls.as_ref().map(|t| TlsOptions {
            ca: t.ca.clone(),
            cert: t.cert.clone(),
            key: t.key.clone(),
        }),
        name: name.to_string(),
    }
}
