//! One contract, every transport: the same tests of [`ChunkSink`],
//! [`RolloutSource`], [`WeightSink`] and [`WeightSource`] run against shared
//! memory (real rings and a real weight board in a temporary directory) and
//! NATS (a real `nats-server`). What the trainer and the collectors rely on,
//! whichever transport carries it: whole trajectories, each once, their
//! steps in order; a restarted collector's unfinished trajectory dropped as
//! incomplete, never delivered; the newest weights only. (Trainer epochs —
//! a resumed trainer's lower versions taken — exist on NATS alone: its own
//! tests, `nats.rs` and `faults.rs`.)

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use rulka_shm::{
    Backpressure, BoardReader, BoardSpec, BoardWriter, RingConsumer, RingProducer, RingSpec,
    TrajectoryId,
};
use rulka_transport::{
    ChunkSink, NatsCollector, NatsTrainer, RolloutSource, Sent, ShmChunkSink, ShmRollouts,
    ShmWeightSink, ShmWeightSource, WeightSink, WeightSource,
};

/// Collector slots every transport is set up for.
const COLLECTORS: u32 = 2;

/// One transport's ends, as the trainer and the collectors get them.
trait Transport {
    fn name(&self) -> &'static str;
    /// The trainer's trajectory source (once per transport).
    fn rollouts(&mut self) -> Box<dyn RolloutSource>;
    /// Collector `collector`'s chunk sink in `incarnation`.
    fn sink(&mut self, collector: u32, incarnation: u32) -> Box<dyn ChunkSink>;
    /// The trainer's weight sink (once per transport).
    fn weight_sink(&mut self) -> Box<dyn WeightSink>;
    /// A collector's weight source.
    fn weight_source(&mut self) -> Box<dyn WeightSource>;
}

struct Shm {
    dir: tempfile::TempDir,
}

impl Shm {
    fn ring(&self, id: u32) -> RingSpec {
        let (schema, record) = (LAYOUT.schema(), LAYOUT.max_record());
        RingSpec::new(self.dir.path(), &format!("ring{id}"), 1, schema, 64, record)
    }

    fn board(&self) -> BoardSpec {
        let schema = rulka_shm::Schema { fields: Vec::new(), params: Vec::new() };
        BoardSpec::new(self.dir.path(), "weights", 1, schema, 1 << 16)
    }
}

impl Transport for Shm {
    fn name(&self) -> &'static str {
        "shared memory"
    }

    fn rollouts(&mut self) -> Box<dyn RolloutSource> {
        let rings = (0..COLLECTORS).map(|i| RingConsumer::create(&self.ring(i)).unwrap()).collect();
        Box::new(ShmRollouts::new(rings, LAYOUT))
    }

    fn sink(&mut self, collector: u32, _incarnation: u32) -> Box<dyn ChunkSink> {
        let block = Backpressure::Block { timeout: Duration::from_secs(5) };
        let p = RingProducer::attach(&self.ring(collector), Duration::from_secs(5), block).unwrap();
        Box::new(ShmChunkSink::new(p, LAYOUT))
    }

    fn weight_sink(&mut self) -> Box<dyn WeightSink> {
        Box::new(ShmWeightSink::new(BoardWriter::create(&self.board()).unwrap()))
    }

    fn weight_source(&mut self) -> Box<dyn WeightSource> {
        let reader = BoardReader::open(&self.board(), Duration::from_secs(5)).unwrap();
        Box::new(ShmWeightSource::new(reader))
    }
}

struct Nats {
    srv: rulka_transport::LocalNatsServer,
    trainer: NatsTrainer,
    collectors: Vec<NatsCollector>,
    _dir: tempfile::TempDir,
}

impl Nats {
    fn join(&mut self) -> &NatsCollector {
        let link = connect(&self.srv.collector_options("c"));
        self.collectors.push(NatsCollector::join(link, "conf", Duration::from_secs(5)).unwrap());
        self.collectors.last().unwrap()
    }
}

impl Transport for Nats {
    fn name(&self) -> &'static str {
        "NATS"
    }

    fn rollouts(&mut self) -> Box<dyn RolloutSource> {
        Box::new(self.trainer.rollouts(LAYOUT, limits(1 << 30)).unwrap())
    }

    fn sink(&mut self, collector: u32, incarnation: u32) -> Box<dyn ChunkSink> {
        let c = self.join();
        Box::new(c.chunk_sink(collector, incarnation, LAYOUT, Some(Duration::from_secs(5)), OUTBOX))
    }

    fn weight_sink(&mut self) -> Box<dyn WeightSink> {
        Box::new(self.trainer.weights("net0"))
    }

    fn weight_source(&mut self) -> Box<dyn WeightSource> {
        Box::new(self.join().weight_source().unwrap())
    }
}

/// Runs `test` against each transport, fresh.
fn every_transport(test: impl Fn(&mut dyn Transport)) {
    test(&mut Shm { dir: tempfile::tempdir().unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), "conf");
    let trainer = open_trainer(&srv, "conf");
    test(&mut Nats { srv, trainer, collectors: Vec::new(), _dir: dir });
}

fn send_all(sink: &mut dyn ChunkSink, chunks: &[(rulka_shm::ChunkHeader, rulka_shm::Steps)]) {
    for (h, s) in chunks {
        assert_eq!(sink.send(h, s, &mut || true).unwrap(), Sent::Stored);
    }
}

#[test]
fn whole_trajectories_arrive_once_with_their_steps_in_order() {
    every_transport(|t| {
        let mut src = t.rollouts();
        let mut sinks: Vec<_> = (0..COLLECTORS).map(|c| t.sink(c, 0)).collect();
        // Two collectors, four trajectories of 9 steps (3 chunks) each, their
        // chunks interleaved.
        let trajs: Vec<Vec<_>> = (0..COLLECTORS)
            .map(|c| (0..4u64).flat_map(|n| trajectory(c, n, 9)).collect())
            .collect();
        for k in 0..trajs[0].len() {
            for (sink, chunks) in sinks.iter_mut().zip(&trajs) {
                send_all(sink.as_mut(), &chunks[k..=k]);
            }
        }
        let got = collect(src.as_mut(), 8, Duration::from_secs(20));
        let name = t.name();
        assert_eq!(got.len(), 8, "{name}");
        let ids: HashSet<(u32, u64)> = got.iter().map(|g| (g.collector, g.trajectory)).collect();
        let want: HashSet<(u32, u64)> =
            (0..COLLECTORS).flat_map(|c| (0..4).map(move |n| (c, n))).collect();
        assert_eq!(ids, want, "{name}: each trajectory once");
        for g in &got {
            assert_eq!(g.steps.len(), 9, "{name}");
            let order: Vec<f32> = g.steps.floats.chunks(3).map(|f| f[2]).collect();
            assert_eq!(
                order,
                (0..9).map(|k| k as f32).collect::<Vec<_>>(),
                "{name}: steps in order"
            );
            assert!(g.steps.floats.chunks(3).all(|f| f[0] == g.collector as f32), "{name}");
            assert_eq!((g.group, g.policy_versions), (7, (1, 1)), "{name}");
        }
        assert!(
            collect(src.as_mut(), 1, Duration::from_millis(500)).is_empty(),
            "{name}: nothing twice"
        );
        assert_eq!(src.stats().incomplete_dropped, 0, "{name}");
    });
}

#[test]
fn a_restarted_collectors_unfinished_trajectory_is_dropped_never_delivered() {
    every_transport(|t| {
        let mut src = t.rollouts();
        let first = TrajectoryId { collector: 1, incarnation: 0, sequence: 0 };
        let mut sink = t.sink(1, 0);
        // One chunk of three, then the collector dies.
        send_all(sink.as_mut(), &trajectory(1, first.packed(), 9)[..1]);
        drop(sink);
        let again = TrajectoryId { collector: 1, incarnation: 1, sequence: 0 };
        let mut sink = t.sink(1, 1);
        send_all(sink.as_mut(), &trajectory(1, again.packed(), 5));
        let got = collect(src.as_mut(), 1, Duration::from_secs(20));
        let name = t.name();
        assert_eq!(got.len(), 1, "{name}");
        assert_eq!(TrajectoryId::unpack(got[0].collector, got[0].trajectory), again, "{name}");
        assert!(collect(src.as_mut(), 1, Duration::from_millis(500)).is_empty(), "{name}");
        assert_eq!(src.stats().incomplete_dropped, 1, "{name}");
    });
}

#[test]
fn a_collector_takes_the_newest_weights_only() {
    every_transport(|t| {
        let mut sink = t.weight_sink();
        for v in 1..=3u64 {
            sink.publish(v, &vec![v as u8; 1000]).unwrap();
        }
        // A collector that starts now gets v3 at once, not v1 first.
        let mut source = t.weight_source();
        let name = t.name();
        let mut out = Vec::new();
        assert_eq!(
            source.wait_newer(None, &mut out, Duration::from_secs(10)).unwrap(),
            Some(3),
            "{name}"
        );
        assert_eq!(out, vec![3u8; 1000], "{name}: v3's bytes");
        assert_eq!(
            source.wait_newer(Some(3), &mut out, Duration::from_millis(300)).unwrap(),
            None,
            "{name}"
        );
        sink.publish(4, &[4u8; 10]).unwrap();
        assert_eq!(
            source.wait_newer(Some(3), &mut out, Duration::from_secs(10)).unwrap(),
            Some(4),
            "{name}"
        );
        assert_eq!(out, vec![4u8; 10], "{name}");
    });
}
