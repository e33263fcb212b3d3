//! Driving an environment with a policy engine until told to stop: the
//! simulator, or the game over TMInterface with its slot's supervision
//! ([`crate::game::GameSlot`]: launch, relaunch on hang, crash or desync).

use std::path::Path;
use std::time::Duration;

use rulka_config::{Config, EnvKind};
use rulka_transport::ChunkSink;

/// How long a stopping collector goes on delivering what its outbox still
/// holds (the server was out of reach), while the server takes it or
/// answers that the run's stream is full (the trainer behind: it takes
/// chunks again after its update) — 10 s without either end it — before it
/// exits and says how much it could not; a second Ctrl-C / SIGTERM ends it
/// as soon as the publish in flight ends (its deadline, 3 s, at most).
pub const OUTBOX_AT_EXIT: Duration = Duration::from_secs(60);

fn drain_outbox<E: rulka_env::Environment>(c: &mut crate::rollout::Collector<E>, id: u32) {
    let mut left = c.sink_stats().queued;
    if left == 0 {
        return;
    }
    tracing::info!(
        "[rulka collect {id}] stopping: delivering the {left} chunks still in the outbox (up to {} s; a second Ctrl-C exits now)",
        OUTBOX_AT_EXIT.as_secs()
    );
    let (t0, mut progress) = (std::time::Instant::now(), std::time::Instant::now());
    while left > 0
        && t0.elapsed() < OUTBOX_AT_EXIT
        && progress.elapsed() < Duration::from_secs(10)
        && rulka_shm::stop_requests() < 2
    {
        let full_before = c.sink_stats().full_waits;
        let now = c.flush(Duration::from_secs(1));
        // A full stream is a server that answers: the trainer will take
        // chunks again, so it is waited for (up to OUTBOX_AT_EXIT).
        if now < left || c.sink_stats().full_waits > full_before {
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
    engine: rulka_inference::PolicyEngine,
    sink: Box<dyn ChunkSink>,
    layout: rulka_shm::ChunkLayout,
    opts: crate::rollout::CollectorOptions,
    stop: impl FnMut() -> bool,
) -> Result<(), crate::rollout::CollectorError> {
    use crate::rollout::{Collector, CollectorError};
    let id = opts.id;
    let report = |s: &crate::rollout::CollectorStats, sent: rulka_transport::SinkStats, v: u64| {
        tracing::info!(
            "[rulka collect {id}] {} rollouts ({} eval, {} finished), {} steps in {} chunks, {} quarantined, {} full waits, {} dropped, {} resends, {} trajectories dropped from a full outbox, {} chunks undelivered at exit, policy v{v}",
            s.rollouts, s.eval_rollouts, s.finished, s.steps, s.chunks, s.quarantined, s.ring_full_waits, sent.dropped, sent.retries, sent.outbox_dropped, sent.queued
        );
    };
    let result = match cfg.environment.kind {
        EnvKind::Sim => {
            let mut c =
                Collector::new(cfg, rulka_env::SimEnv::new(cfg), engine, sink, layout, opts)?;
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
            let mut slot = crate::game::GameSlot::new(cfg, id, port, guard, opts.game_log.clone());
            let mut stop = stop;
            // Connecting can take long (a game starting): the heartbeat goes on.
            let mut heart = crate::rollout::Heartbeat::new(opts.heartbeat.clone());
            let mut sink = sink;
            let first = {
                let mut s = || {
                    heart.beat(0);
                    stop()
                };
                let mut on = |g| crate::rollout::report_game(&mut *sink, &opts, g);
                slot.connect(&mut s, &mut on)?
            };
            let Some(mut env) = first else { return Ok(()) };
            if let Some(dir) = dump_states {
                env.dump_states(dir)?;
            }
            let mut c = Collector::new(cfg, env, engine, sink, layout, opts)?;
            c.report_game(slot.stats());
            let runs = |c: &Collector<_>| c.stats().rollouts + c.stats().quarantined;
            let r = loop {
                let before = runs(&c);
                match c.run_until(&mut stop, || slot.restart_due()) {
                    Ok((_, crate::rollout::Ended::Between)) => slot.scheduled_restart(),
                    Ok((s, _)) => break Ok(s),
                    // The game failed: relaunch it (rulka launched it) or wait for it
                    // to answer again (started by hand), and drive on. The run it cut
                    // short stays an incomplete trajectory: never trained on.
                    Err(CollectorError::Env(e)) if crate::game::GameSlot::is_game_fault(&e) => {
                        slot.failed(&e, runs(&c) > before)
                    }
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
                tracing::info!(
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
