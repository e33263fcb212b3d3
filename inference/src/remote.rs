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
use rulka_transport::nats::{schema_hash, Link, NatsCollector, NatsOptions};
use rulka_transport::{ChunkSink, TransportError, WeightSource};

use crate::collector::RunLayout;

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
pub fn join(
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
        match Link::connect(opts) {
            Ok(l) => break l,
            Err(e) if !e.is_bad_input() && t0.elapsed() < wait => {
                if !said {
                    eprintln!("[rulka collect {id}] {e}; retrying for up to {} s", wait.as_secs());
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
    let layout = RunLayout::new(&cfg, Path::new(""), 0).chunk;
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

/// Runs a collector on a run it [`join`]ed until `stop` returns true or the
/// trainer is gone: a policy engine on the run's first snapshot (sampling
/// seeded by [`crate::collector::sampling_seed`]), following the run's newer
/// snapshots, driving as [`drive`] does. `opts.incarnation` is taken from
/// `joined`.
pub fn run_joined(
    rt: crate::Runtime,
    joined: Joined,
    tmi_port: Option<u16>,
    dump_states: Option<&Path>,
    mut opts: crate::collector::CollectorOptions,
    stop: impl FnMut() -> bool,
) -> Result<(), crate::collector::CollectorError> {
    let Joined { cfg, incarnation, sink, weights, initial: (version, bytes) } = joined;
    opts.incarnation = incarnation;
    let label = format!("run snapshot v{version}");
    let onnx = rulka_export::export_from_safetensors(&cfg, &bytes, &label).map_err(|e| {
        crate::InferenceError::Session { model: label.clone(), message: e.to_string() }
    })?;
    let mut engine = crate::PolicyEngine::new(
        rt,
        &cfg,
        crate::ModelSource::Bytes(onnx),
        version,
        crate::EngineOptions {
            greedy: false,
            seed: crate::collector::sampling_seed(&cfg, opts.id, incarnation),
        },
    )?;
    engine.follow_source(weights, &cfg);
    let layout = RunLayout::new(&cfg, Path::new(""), 0).chunk;
    drive(&cfg, tmi_port, dump_states, engine, sink, layout, opts, stop)
}

/// How long a stopping collector goes on delivering what its outbox still
/// holds (the server was out of reach), while the server takes it (10 s
/// without progress end it), before it exits and says how much it could
/// not; a second Ctrl-C / SIGTERM ends it at once.
pub const OUTBOX_AT_EXIT: Duration = Duration::from_secs(60);

fn drain_outbox<E: rulka_env::Environment>(c: &mut crate::collector::Collector<E>, id: u32) {
    let mut left = c.sink_stats().queued;
    if left == 0 {
        return;
    }
    eprintln!(
        "[rulka collect {id}] stopping: delivering the {left} chunks still in the outbox (up to {} s; a second Ctrl-C exits now)",
        OUTBOX_AT_EXIT.as_secs()
    );
    let (t0, mut progress) = (std::time::Instant::now(), std::time::Instant::now());
    while left > 0
        && t0.elapsed() < OUTBOX_AT_EXIT
        && progress.elapsed() < Duration::from_secs(10)
        && rulka_shm::signal::count() < 2
    {
        let now = c.flush(Duration::from_secs(1));
        if now < left {
            progress = std::time::Instant::now();
        }
        left = now;
    }
}

/// Drives the environment `cfg` names — the simulator, or the game over
/// TMInterface on `tmi_port` (default `environment.tmi.base_port + id`,
/// saving its states into `dump_states` when given) — with `engine`, sending
/// chunks of `layout` to `sink`, until `stop` returns true or the trainer is
/// gone. At the end, delivers what the sink still holds (see
/// [`OUTBOX_AT_EXIT`]), and prints the collector's counters.
#[allow(clippy::too_many_arguments)]
pub fn drive(
    cfg: &Config,
    tmi_port: Option<u16>,
    dump_states: Option<&Path>,
    engine: crate::PolicyEngine,
    sink: Box<dyn ChunkSink>,
    layout: rulka_shm::chunk::ChunkLayout,
    opts: crate::collector::CollectorOptions,
    stop: impl FnMut() -> bool,
) -> Result<(), crate::collector::CollectorError> {
    use crate::collector::{Collector, CollectorError};
    let id = opts.id;
    let report = |s: &crate::collector::CollectorStats,
                  sent: rulka_transport::SinkStats,
                  v: u64| {
        eprintln!(
            "[rulka collect {id}] {} rollouts ({} eval, {} finished), {} steps in {} chunks, {} quarantined, {} full waits, {} dropped, {} resends, {} trajectories dropped from a full outbox, {} chunks undelivered at exit, policy v{v}",
            s.rollouts, s.eval_rollouts, s.finished, s.steps, s.chunks, s.quarantined, s.ring_full_waits, sent.dropped, sent.retries, sent.outbox_dropped, sent.queued
        );
    };
    let result = match cfg.environment.kind {
        EnvKind::Sim => {
            let mut c =
                Collector::new(cfg, rulka_env::sim::SimEnv::new(cfg), engine, sink, layout, opts)?;
            let r = c.run(stop);
            drain_outbox(&mut c, id);
            report(c.stats(), c.sink_stats(), c.engine().policy_version());
            r
        }
        EnvKind::Tmi => {
            let t = &cfg.environment.tmi;
            let port = tmi_port.unwrap_or(t.base_port.saturating_add(id as u16));
            let guard = std::env::current_exe().map_err(|e| {
                CollectorError::Env(rulka_env::EnvError::State(format!(
                    "locating this binary (it starts the games' guards): {e}"
                )))
            })?;
            let mut slot =
                rulka_env::game::GameSlot::new(cfg, id, port, guard, opts.game_log.clone());
            let mut stop = stop;
            // Connecting can take long (a game starting): the heartbeat goes on.
            let mut heart = crate::collector::Heartbeat::new(opts.heartbeat.clone());
            let mut sink = sink;
            let first = {
                let mut s = || {
                    heart.beat(0);
                    stop()
                };
                let mut on = |g| crate::collector::report_game(&mut *sink, &opts, g);
                slot.connect(&mut s, &mut on)?
            };
            let Some(mut env) = first else { return Ok(()) };
            if let Some(dir) = dump_states {
                env.dump_states(dir)?;
            }
            let mut c = Collector::new(cfg, env, engine, sink, layout, opts)?;
            c.report_game(slot.stats());
            let r = loop {
                match c.run_until(&mut stop, || slot.restart_due()) {
                    Ok((_, crate::collector::Ended::Between)) => slot.scheduled_restart(),
                    Ok((s, _)) => break Ok(s),
                    // A game rulka launched failed: relaunch it, drive on. (The run
                    // it cut short stays an incomplete trajectory: never trained on.)
                    Err(CollectorError::Env(e)) if slot.launches() => slot.failed(&e),
                    Err(e) => break Err(e),
                }
                c.report_game(slot.stats());
                let next = {
                    let mut s = || {
                        heart.beat(0);
                        stop()
                    };
                    let mut on = |g| c.report_game(g);
                    slot.connect(&mut s, &mut on)
                };
                match next {
                    Ok(Some(mut env)) => {
                        if let Some(dir) = dump_states {
                            env.dump_states(dir)?;
                        }
                        c.replace_env(env)?;
                        c.report_game(slot.stats());
                    }
                    Ok(None) => break Ok(c.stats().clone()),
                    Err(e) => break Err(e.into()),
                }
            };
            slot.shutdown();
            c.report_game(slot.stats());
            drain_outbox(&mut c, id);
            report(c.stats(), c.sink_stats(), c.engine().policy_version());
            let g = slot.stats();
            if slot.launches() {
                eprintln!(
                    "[rulka collect {id}] game on port {port}: {} launches, {} hangs, {} crashes, {} desyncs, {} scheduled restarts, {} failed launches",
                    g.launches, g.hangs, g.crashes, g.desyncs, g.scheduled_restarts, g.failed_launches
                );
            }
            r
        }
    };
    match result {
        Ok(_) | Err(CollectorError::LearnerGone) => Ok(()),
        Err(e) => Err(e),
    }
}
