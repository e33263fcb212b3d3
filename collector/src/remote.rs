//! A collector joining a run over NATS (from a game PC, or `rulka collect`
//! on the trainer's machine when the run's transport is NATS).
//!
//! [`join`] connects, reads the run's record (its config), checks that this
//! build makes the same chunks and network (a mismatch is a named error),
//! takes the next incarnation of the collector slot, downloads the game's
//! map files the trainer stored, and waits for the first weight snapshot.

use std::path::Path;
use std::time::Duration;

use rulka_config::{Config, EnvKind};
use rulka_transport::{
    schema_hash, ChunkSink, NatsCollector, NatsLink, NatsOptions, TransportError, WeightSource,
};

use crate::rollout::{CollectorError, CollectorOptions, RunLayout};

/// What a collector needs from a run it joined.
pub struct Joined {
    /// The run's config (maps pointing at the downloaded files).
    pub cfg: Config,
    /// This start's incarnation of the collector slot.
    pub incarnation: u32,
    /// Where its chunks go.
    pub sink: Box<dyn ChunkSink>,
    /// Where newer weights come from.
    pub weights: Box<dyn WeightSource>,
    /// The first snapshot: `(version, safetensors bytes)`.
    pub initial: (u64, Vec<u8>),
}

impl std::fmt::Debug for Joined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joined")
            .field("incarnation", &self.incarnation)
            .field("initial_version", &self.initial.0)
            .finish_non_exhaustive()
    }
}

/// Joins `run` as collector `id` (see the module docs). `maps_dir` receives
/// the game's map files; `wait` bounds the wait for the run to exist and for
/// its first weights.
pub fn join_run(
    opts: &NatsOptions,
    run: &str,
    id: u32,
    maps_dir: &Path,
    wait: Duration,
) -> Result<Joined, TransportError> {
    // The server may not be up yet (a trainer starting, or restarting its
    // server): retry until `wait` has passed; bad credentials or TLS fail at once.
    let t0 = std::time::Instant::now();
    let mut said = false;
    let link = loop {
        match NatsLink::connect(opts) {
            Ok(l) => break l,
            Err(e) if !e.is_bad_input() && t0.elapsed() < wait => {
                if !said {
                    tracing::warn!(
                        "[rulka collect {id}] {e}; retrying for up to {} s",
                        wait.as_secs()
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    };
    let col = NatsCollector::join(link, run, wait.saturating_sub(t0.elapsed()))?;
    let mut cfg = Config::from_yaml_str(&col.record().config_yaml, format!("run {run}'s config"))
        .map_err(|e| {
        TransportError::Invalid(format!("run {run}: its config does not load here: {e}"))
    })?;
    let layout = RunLayout::chunk_layout(&cfg);
    col.check(&schema_hash(&layout), &cfg.network_hash())?;
    if cfg.environment.kind == EnvKind::Tmi {
        std::fs::create_dir_all(maps_dir)
            .map_err(|e| TransportError::Invalid(format!("{}: {e}", maps_dir.display())))?;
        for m in &mut cfg.environment.tmi.maps {
            let path = maps_dir.join(format!("{}.npy", m.name));
            let bytes = col.get_object(&format!("map-{}.npy", m.name))?;
            std::fs::write(&path, bytes)
                .map_err(|e| TransportError::Invalid(format!("{}: {e}", path.display())))?;
            m.zone_centers = path;
            if m.checkpoints.is_some() {
                let path = maps_dir.join(format!("{}-checkpoints.npy", m.name));
                let bytes = col.get_object(&format!("map-{}-checkpoints.npy", m.name))?;
                std::fs::write(&path, bytes)
                    .map_err(|e| TransportError::Invalid(format!("{}: {e}", path.display())))?;
                m.checkpoints = Some(path);
            }
        }
    }
    let incarnation = col.next_incarnation(id)?;
    let block = match cfg.collectors.backpressure {
        rulka_config::Backpressure::Block => {
            Some(Duration::from_millis(u64::from(cfg.collectors.block_timeout_ms)))
        }
        rulka_config::Backpressure::DropOldest => None,
    };
    let outbox = (cfg.transport.nats.outbox_mib as usize) << 20;
    let sink = col.chunk_sink(id, incarnation, layout, block, outbox);
    let mut weights = col.weight_source()?;
    let mut bytes = Vec::new();
    let version =
        weights.wait_newer(None, &mut bytes, wait)?.ok_or_else(|| TransportError::NoRun {
            run: run.to_string(),
            url: opts.url.clone(),
            message: format!("no weight snapshot within {} s", wait.as_secs()),
        })?;
    Ok(Joined {
        cfg,
        incarnation,
        sink: Box::new(sink),
        weights: Box::new(weights),
        initial: (version, bytes),
    })
}

/// Runs a collector on a run it [`join_run`]ed until `stop` returns true or the
/// trainer is gone: a policy engine on the run's first snapshot (sampling
/// seeded by [`crate::rollout::sampling_seed`]), following the run's newer
/// snapshots, driving as the game drive loop (`collector/src/drive.rs`) does. `opts.incarnation` is taken from
/// `joined`.
pub fn run_joined(
    rt: rulka_inference::Runtime,
    joined: Joined,
    tmi_port: Option<u16>,
    dump_states: Option<&Path>,
    mut opts: CollectorOptions,
    stop: impl FnMut() -> bool,
) -> Result<(), CollectorError> {
    let Joined { cfg, incarnation, sink, weights, initial: (version, bytes) } = joined;
    opts.incarnation = incarnation;
    let label = format!("run snapshot v{version}");
    let mut engine = crate::rollout::snapshot_engine(rt, &cfg, &bytes, version, &label, &opts)?;
    engine.follow_source(weights, &cfg);
    let layout = RunLayout::chunk_layout(&cfg);
    crate::drive::drive(&cfg, tmi_port, dump_states, engine, sink, layout, opts, stop)
}
