//! Collectors joined to a run over NATS, one or several in one process
//! (`rulka-collector --slots N`): slot `i` is collector `first_id + i` with
//! its own connection, its own game (TMInterface port `port + i`) and, with
//! `environment.tmi.launch`, its own launched game (output in
//! `logs/game-<id>.log`). One slot's failure stops the others.

use std::path::PathBuf;
use std::time::Duration;

use rulka_config::EnvKind;
use rulka_transport::NatsOptions;

use crate::rollout::{CollectorError, CollectorOptions};

/// What every slot of a process shares.
#[derive(Debug, Clone)]
pub struct Slots {
    /// The server and credentials (`name` gets `-<id>` per slot).
    pub nats: NatsOptions,
    /// The run's name on the server.
    pub run: String,
    /// The first slot's collector id.
    pub first_id: u32,
    /// How many slots (≥ 1).
    pub count: u32,
    /// The environment, when not the run's.
    pub env: Option<EnvKind>,
    /// The first slot's TMInterface port (default: the run's
    /// `environment.tmi.base_port + id`).
    pub port: Option<u16>,
    /// Where the run's map files are stored.
    pub maps_dir: PathBuf,
    /// Save every game state received here (for `rulka tmi inspect`).
    pub dump_states: Option<PathBuf>,
    /// Stop each slot after this many rollouts.
    pub max_rollouts: Option<u64>,
    /// How long to wait for the run and its first weights.
    pub wait: Duration,
    /// Where launched games write their output.
    pub logs: PathBuf,
}

/// Runs every slot until a shutdown signal ([`rulka_shm::stop_requests`]), the
/// trainer going away, or `max_rollouts`; a slot's error stops the others
/// and is returned (the first one, with its collector id).
pub fn run_slots(rt: rulka_inference::Runtime, s: &Slots) -> Result<(), (u32, CollectorError)> {
    if s.count <= 1 {
        return slot(rt, s, s.first_id, s.port).map_err(|e| (s.first_id, e));
    }
    let mut handles = Vec::new();
    for i in 0..s.count {
        let s2 = s.clone();
        let id = s.first_id + i;
        let port = s.port.map(|p| p.saturating_add(i as u16));
        let h = std::thread::Builder::new()
            .name(format!("slot-{id}"))
            .spawn(move || (id, slot(rt, &s2, id, port)))
            .map_err(|e| {
                rulka_shm::request_stop();
                (
                    id,
                    CollectorError::Env(rulka_env::EnvError::State(format!(
                        "starting slot {id}'s thread: {e}"
                    ))),
                )
            });
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in handles {
                    let _ = h.join();
                }
                return Err(e);
            }
        }
    }
    let mut first_error = None;
    for h in handles {
        match h.join() {
            Ok((_, Ok(()))) => {}
            Ok((id, Err(e))) => {
                tracing::warn!("[rulka-collector {id}] ended: {e}");
                // One slot's failure stops the others (the process's exit code says it).
                rulka_shm::request_stop();
                first_error.get_or_insert((id, e));
            }
            Err(_) => {
                rulka_shm::request_stop();
                first_error.get_or_insert((
                    s.first_id,
                    CollectorError::Env(rulka_env::EnvError::State(
                        "a slot's thread panicked".into(),
                    )),
                ));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One collector slot: joins the run as `id` and drives until stopped.
fn slot(
    rt: rulka_inference::Runtime,
    s: &Slots,
    id: u32,
    port: Option<u16>,
) -> Result<(), CollectorError> {
    let mut nats = s.nats.clone();
    nats.name = format!("{}-{id}", s.nats.name);
    let mut joined = crate::remote::join_run(&nats, &s.run, id, &s.maps_dir, s.wait)
        .map_err(CollectorError::Transport)?;
    if let Some(kind) = s.env {
        joined.cfg.environment.kind = kind;
    }
    tracing::info!(
        "[rulka-collector {id}] joined run {} on {} (incarnation {}, weights v{}, {:?})",
        s.run,
        nats.url,
        joined.incarnation,
        joined.initial.0,
        joined.cfg.environment.kind
    );
    let game_log =
        joined.cfg.environment.tmi.launch.as_ref().map(|_| s.logs.join(format!("game-{id}.log")));
    if game_log.is_some() {
        std::fs::create_dir_all(&s.logs).map_err(|e| {
            CollectorError::Env(rulka_env::EnvError::State(format!(
                "creating {}: {e}",
                s.logs.display()
            )))
        })?;
    }
    let copts = CollectorOptions {
        id,
        incarnation: joined.incarnation,
        max_rollouts: s.max_rollouts,
        heartbeat: None,
        game_log,
    };
    crate::remote::run_joined(rt, joined, port, s.dump_states.as_deref(), copts, || {
        rulka_shm::stop_requests() > 0
    })
}
