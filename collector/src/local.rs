//! A collector attached to a run on this machine (Linux): its ring and the
//! weight board in the run's shared memory (`rulka collect`, started by
//! `rulka train` for each local slot).

use std::path::Path;
use std::time::Duration;

use rulka_config::Config;
use rulka_inference::{EngineOptions, ModelSource, PolicyEngine};

use crate::rollout::{sampling_seed, CollectorError, CollectorOptions, RunLayout};

/// Drives collector `opts.id` of the run whose segments `layout` names until
/// `stop` returns true or the trainer is gone: the board's latest snapshot
/// first (waiting up to 30 s for one), newer ones as they are published; the
/// TMInterface port and state dumps as for [`crate::drive::drive`].
pub fn run(
    rt: rulka_inference::Runtime,
    cfg: &Config,
    layout: &RunLayout,
    tmi_port: Option<u16>,
    dump_states: Option<&Path>,
    opts: CollectorOptions,
    stop: impl FnMut() -> bool,
) -> Result<(), CollectorError> {
    let board = rulka_shm::board::open_reader(&layout.board(), Duration::from_secs(10))?;
    let mut bytes = Vec::new();
    let snap = board
        .wait_newer(None, &mut bytes, Duration::from_secs(30))
        .ok_or(CollectorError::NoWeights { waited_s: 30 })?;
    let onnx = rulka_export::export_from_safetensors(cfg, &bytes, "weight board").map_err(|e| {
        rulka_inference::InferenceError::Session {
            model: "weight board".into(),
            message: e.to_string(),
        }
    })?;
    let mut engine = PolicyEngine::new(
        rt,
        cfg,
        ModelSource::Bytes(onnx),
        snap.version,
        EngineOptions { greedy: false, seed: sampling_seed(cfg, opts.id, opts.incarnation) },
    )?;
    let policy = match cfg.collectors.backpressure {
        rulka_config::Backpressure::Block => rulka_shm::ring::Backpressure::Block {
            timeout: Duration::from_millis(u64::from(cfg.collectors.block_timeout_ms)),
        },
        rulka_config::Backpressure::DropOldest => rulka_shm::ring::Backpressure::DropOldest,
    };
    let producer =
        rulka_shm::ring::attach_producer(&layout.ring(opts.id), Duration::from_secs(10), policy)?;
    let reader = rulka_shm::board::open_reader(&layout.board(), Duration::from_secs(10))?;
    engine.follow(reader, cfg);
    let sink = Box::new(rulka_transport::shm::ShmChunkSink::new(producer, layout.chunk));
    crate::drive::drive(cfg, tmi_port, dump_states, engine, sink, layout.chunk, opts, stop)
}
