//! Helpers for the NATS transport tests: a local server per test (own port,
//! own store directory), runs, chunks, and the TCP proxy that can cut
//! connections ([`rulka_transport::Proxy`]).
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use rulka_shm::{ChunkHeader, ChunkLayout, Steps, Trajectory};
#[allow(unused_imports)] // not every test binary cuts connections
pub use rulka_transport::Proxy;
use rulka_transport::{LocalNatsServer, NatsServerSpec, NatsUsers, RolloutSource};
use rulka_transport::{NatsLink, NatsOptions, NatsTrainer, RunRecord, StreamLimits};

pub const LAYOUT: ChunkLayout =
    ChunkLayout { frame_len: 16, n_floats: 3, n_heads: 1, n_ingredients: 2, max_steps: 4 };

/// Polls until `n` trajectories arrived (or `limit` passes).
pub fn collect(src: &mut dyn RolloutSource, n: usize, limit: Duration) -> Vec<Trajectory> {
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < n && t0.elapsed() < limit {
        src.poll(&mut got, Duration::from_millis(100)).unwrap();
        src.commit().unwrap();
    }
    got
}

/// A collector outbox big enough for every test's chunks.
pub const OUTBOX: usize = 64 << 20;

pub fn server(dir: &std::path::Path, run: &str) -> LocalNatsServer {
    server_on(dir, run, 0).unwrap()
}

/// A local server for `run` on `port` (0: a free one), as started.
pub fn server_on(
    dir: &std::path::Path,
    run: &str,
    port: u16,
) -> Result<LocalNatsServer, rulka_transport::TransportError> {
    LocalNatsServer::start(NatsServerSpec {
        dir: dir.to_path_buf(),
        host: "127.0.0.1".into(),
        port,
        users: Some(NatsUsers::random()),
        runs: vec![run.into()],
        tls: None,
        extra: String::new(),
        tied_to_parent: false,
    })
}

pub fn record(run: &str) -> RunRecord {
    RunRecord {
        run: run.into(),
        schema_hash: rulka_transport::schema_hash(&LAYOUT),
        network_hash: "net0".into(),
        config_yaml: "training: {}\n".into(),
        rulka_version: "test".into(),
    }
}

pub fn limits(max_bytes: i64) -> StreamLimits {
    StreamLimits { max_bytes, max_per_collector: -1, ack_wait: Duration::from_secs(30) }
}

pub fn connect(o: &NatsOptions) -> NatsLink {
    NatsLink::connect(o).unwrap()
}

/// A trainer (user "t") opening `run` on `srv`, as a first start, streams of 1 GiB.
pub fn open_trainer(srv: &LocalNatsServer, run: &str) -> NatsTrainer {
    NatsTrainer::open(connect(&srv.trainer_options("t")), &record(run), limits(1 << 30), false)
        .unwrap()
}

/// `n` steps whose floats encode (collector, trajectory, step) for checks.
pub fn steps(collector: u32, trajectory: u64, first: u64, n: usize) -> Steps {
    let mut s = Steps::default();
    for k in 0..n as u64 {
        s.frames.extend(std::iter::repeat_n((first + k) as u8, 16));
        s.floats.extend([collector as f32, (trajectory & 0xFFFF) as f32, (first + k) as f32]);
        s.actions.push(((first + k) % 12) as i32);
        s.log_probs.push(-1.0);
        s.values.push(0.5);
        s.ingredients.extend([1.0, 2.0]);
        s.flags.push(0);
    }
    s
}

/// The chunks of one trajectory of `len` steps.
pub fn trajectory(collector: u32, trajectory: u64, len: usize) -> Vec<(ChunkHeader, Steps)> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < len {
        let n = (len - first).min(LAYOUT.max_steps);
        let h = ChunkHeader {
            collector,
            trajectory,
            group: 7,
            policy_version: 1,
            first_step: first as u64,
            is_last: first + n == len,
        };
        out.push((h, steps(collector, trajectory, first as u64, n)));
        first += n;
    }
    out
}
