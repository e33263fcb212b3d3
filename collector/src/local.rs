//! A collector attached to a run on this machine (Linux): its ring and the
//! weight board in the run's shared memory (`rulka collect`, started by
//! `rulka train` for each local slot).

use std::path::Path;
use std::time::Duration;

use rulka_config::Config;

use crate::rollout::{
    ring_backpressure, snapshot_engine, CollectorError, CollectorOptions, RunLayout,
};

/// Drives collector `opts.id` of the run whose segments `layout` names until
/// `stop` returns true or the trainer is gone: the board's latest snapshot
/// first (waiting up to 30 s for one), newer ones as they are published; the
/// TMInterface port and state dumps as for the game drive loop (`collector/src/drive.rs`).
pub fn run_local(
    rt: rulka_inference::Runtime,
    cfg: &Config,
    layout: &RunLayout,
    tmi_port: Option<u16>,
    dump_states: Option<&Path>,
    opts: CollectorOptions,
    stop: impl FnMut() -> bool,
) -> Result<(), CollectorError> {
    let board = rulka_shm::BoardReader::open(&layout.board(), Duration::from_secs(10))?;
    let mut bytes = Vec::new();
    let snap = board
        .wait_newer(None, &mut bytes, Duration::from_secs(30))
        .ok_or(CollectorError::NoWeights { waited_s: 30 })?;
    let mut engine = snapshot_engine(rt, cfg, &bytes, snap.version, "weight board", &opts)?;
    let producer = rulka_shm::RingProducer::attach(
        &layout.ring(opts.id),
        Duration::from_secs(10),
        ring_backpressure(cfg),
    )?;
    engine.follow(board, cfg);
    let sink = Box::new(rulka_transport::ShmChunkSink::new(producer, layout.chunk));
    crate::drive::drive(cfg, tmi_port, dump_states, engine, sink, layout.chunk, opts, stop)
}
