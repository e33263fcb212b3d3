//! `rulka bench transport`: the two transports side by side in one run —
//! trajectory chunks (throughput, and one-at-a-time latency p50/p99) and
//! weight snapshots (publish → visible on 1 and 4 collectors), shared memory
//! against NATS JetStream over loopback (a local `nats-server`, file storage).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use rulka_collector::RunLayout;
use rulka_config::Config;
use rulka_shm::{ChunkHeader, ChunkLayout, Steps};
use rulka_transport::{
    ChunkSink, LocalNatsServer, NatsCollector, NatsLink, NatsServerSpec, NatsTrainer, NatsUsers,
    RolloutSource, RunRecord, ShmChunkSink, ShmRollouts, ShmWeightSink, ShmWeightSource,
    StreamLimits, WeightSink, WeightSource,
};

use rulka_trainer::load_config;

/// Arguments of `rulka bench transport`.
#[derive(Debug)]
pub struct TransportArgs {
    /// Config shaping the chunks and the network.
    pub config: std::path::PathBuf,
    /// Chunks sent per throughput measurement.
    pub chunks: usize,
    /// Round trips per latency measurement.
    pub rounds: usize,
    /// Write the figures as JSON.
    pub json: Option<std::path::PathBuf>,
}

fn steps(layout: &ChunkLayout) -> Steps {
    let n = layout.max_steps;
    Steps {
        frames: vec![100; n * layout.frame_len],
        floats: vec![0.5; n * layout.n_floats],
        actions: vec![0; n * layout.n_heads],
        log_probs: vec![-2.0; n],
        values: vec![0.1; n],
        ingredients: vec![1.0; n * layout.n_ingredients],
        flags: vec![0; n],
    }
}

fn header(trajectory: u64) -> ChunkHeader {
    ChunkHeader {
        collector: 0,
        trajectory,
        group: 0,
        policy_version: 0,
        first_step: 0,
        is_last: true,
    }
}

/// `(chunks/s, MB/s)` sending `n` one-chunk trajectories through `sink` to `src`.
fn throughput(
    mut sink: Box<dyn ChunkSink>,
    src: &mut dyn RolloutSource,
    layout: &ChunkLayout,
    n: usize,
) -> anyhow::Result<(f64, f64)> {
    let s = steps(layout);
    let start = Instant::now();
    let producer = std::thread::spawn(move || -> anyhow::Result<()> {
        for t in 0..n as u64 {
            sink.send(&header(t), &s, &mut || true)?;
        }
        Ok(())
    });
    let mut got = Vec::new();
    while got.len() < n {
        src.poll(&mut got, Duration::from_millis(20))?;
        src.commit()?;
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "only {} of {n} chunks arrived",
            got.len()
        );
        got.truncate(got.len().min(n));
    }
    producer.join().map_err(|_| anyhow::anyhow!("producer panicked"))??;
    let secs = start.elapsed().as_secs_f64();
    Ok((n as f64 / secs, n as f64 * layout.max_record() as f64 / secs / 1e6))
}

/// `(p50, p99)` of send → received, one chunk at a time.
fn latency(
    sink: &mut dyn ChunkSink,
    src: &mut dyn RolloutSource,
    layout: &ChunkLayout,
    rounds: usize,
    first: u64,
) -> anyhow::Result<(Duration, Duration)> {
    let s = steps(layout);
    let mut samples = Vec::with_capacity(rounds);
    let mut got = Vec::new();
    for t in 0..rounds as u64 {
        let t0 = Instant::now();
        sink.send(&header(first + t), &s, &mut || true)?;
        got.clear();
        while got.is_empty() {
            src.poll(&mut got, Duration::from_millis(1))?;
            src.commit()?;
            anyhow::ensure!(t0.elapsed() < Duration::from_secs(30), "a chunk did not arrive");
        }
        samples.push(t0.elapsed());
    }
    samples.sort();
    Ok((samples[rounds / 2], samples[(rounds * 99 / 100).min(rounds - 1)]))
}

/// Median publish → visible (bytes in hand) over `rounds`, on `readers` readers.
fn publish_to_visible(
    sink: &mut dyn WeightSink,
    mut sources: Vec<Box<dyn WeightSource>>,
    bytes: usize,
    rounds: usize,
    first: u64,
) -> anyhow::Result<Duration> {
    let snapshot = vec![7u8; bytes];
    let mut medians = Vec::new();
    let mut current = vec![None; sources.len()];
    for v in first..first + rounds as u64 {
        let start = Instant::now();
        let worst = std::thread::scope(|s| -> anyhow::Result<Duration> {
            let handles: Vec<_> = sources
                .iter_mut()
                .zip(current.iter_mut())
                .map(|(src, cur)| {
                    s.spawn(move || -> anyhow::Result<Duration> {
                        let mut buf = Vec::new();
                        loop {
                            if let Some(got) =
                                src.wait_newer(*cur, &mut buf, Duration::from_millis(50))?
                            {
                                *cur = Some(got);
                                if got >= v {
                                    anyhow::ensure!(
                                        buf.len() == bytes,
                                        "snapshot of {} bytes",
                                        buf.len()
                                    );
                                    return Ok(start.elapsed());
                                }
                            }
                            anyhow::ensure!(
                                start.elapsed() < Duration::from_secs(60),
                                "v{v} never visible"
                            );
                        }
                    })
                })
                .collect();
            sink.publish(v, &snapshot)?;
            let mut worst = Duration::ZERO;
            for h in handles {
                worst = worst.max(h.join().map_err(|_| anyhow::anyhow!("reader panicked"))??);
            }
            Ok(worst)
        })?;
        medians.push(worst);
    }
    medians.sort();
    Ok(medians[rounds / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `rulka bench transport`.
pub fn run_transport(a: &TransportArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let cfg: Config = load_config(&a.config)?;
    let dir = tempfile::tempdir()?;
    let shm_dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")?
    } else {
        tempfile::tempdir()?
    };
    let layout = RunLayout::new(&cfg, shm_dir.path(), 1);
    let chunk = layout.chunk;
    let weights_len = layout.board_capacity - (256 << 10);
    writeln!(
        out,
        "rulka bench transport — {} (chunks of {} steps = {:.0} KB; weights {:.1} MB); same run, loopback",
        a.config.display(),
        chunk.max_steps,
        chunk.max_record() as f64 / 1024.0,
        weights_len as f64 / 1e6
    )?;
    // --- shared memory ---
    let ring = rulka_shm::RingConsumer::create(&layout.ring(0))?;
    let mut shm_src = ShmRollouts::new(vec![ring], chunk);
    let producer = || -> anyhow::Result<Box<dyn ChunkSink>> {
        let p = rulka_shm::RingProducer::attach(
            &layout.ring(0),
            Duration::from_secs(1),
            rulka_shm::Backpressure::Block { timeout: Duration::from_secs(30) },
        )?;
        Ok(Box::new(ShmChunkSink::new(p, chunk)))
    };
    let shm_tp = throughput(producer()?, &mut shm_src, &chunk, a.chunks)?;
    let mut sink = producer()?;
    let shm_lat = latency(&mut *sink, &mut shm_src, &chunk, a.rounds, 1 << 30)?;
    drop(sink);
    let board = rulka_shm::BoardWriter::create(&layout.board())?;
    let mut shm_weights = ShmWeightSink::new(board);
    let readers = |k: usize| -> anyhow::Result<Vec<Box<dyn WeightSource>>> {
        (0..k)
            .map(|_| {
                let r = rulka_shm::BoardReader::open(&layout.board(), Duration::from_secs(1))?;
                Ok(Box::new(ShmWeightSource::new(r)) as Box<dyn WeightSource>)
            })
            .collect()
    };
    let shm_w1 = publish_to_visible(&mut shm_weights, readers(1)?, weights_len, 20, 1)?;
    let shm_w4 = publish_to_visible(&mut shm_weights, readers(4)?, weights_len, 20, 21)?;
    // --- NATS ---
    let server = LocalNatsServer::start(NatsServerSpec {
        dir: dir.path().join("nats"),
        host: "127.0.0.1".into(),
        port: 0,
        users: Some(NatsUsers::random()),
        runs: vec!["bench".into()],
        tls: None,
        extra: String::new(),
        tied_to_parent: false,
    })?;
    let record = RunRecord {
        run: "bench".into(),
        schema_hash: rulka_transport::schema_hash(&chunk),
        network_hash: cfg.network_hash(),
        config_yaml: cfg.to_yaml(),
        rulka_version: env!("CARGO_PKG_VERSION").into(),
    };
    let limits = StreamLimits {
        max_bytes: 4 << 30,
        max_per_collector: 64,
        ack_wait: Duration::from_secs(60),
    };
    let trainer = NatsTrainer::open(
        NatsLink::connect(&server.trainer_options("bench-trainer"))?,
        &record,
        limits,
        true,
    )?;
    let mut nats_src = trainer.rollouts(chunk, limits)?;
    let join = || -> anyhow::Result<NatsCollector> {
        Ok(NatsCollector::join(
            NatsLink::connect(&server.collector_options("bench"))?,
            "bench",
            Duration::from_secs(5),
        )?)
    };
    let col = join()?;
    let nats_tp = throughput(
        Box::new(col.chunk_sink(0, 0, chunk, Some(Duration::from_secs(30)), 256 << 20)),
        &mut nats_src,
        &chunk,
        a.chunks,
    )?;
    let mut sink = col.chunk_sink(0, 1, chunk, Some(Duration::from_secs(30)), 256 << 20);
    // Numbered as a second incarnation: apart from the throughput run's.
    let first = rulka_shm::TrajectoryId { collector: 0, incarnation: 1, sequence: 0 };
    let nats_lat = latency(&mut sink, &mut nats_src, &chunk, a.rounds, first.packed())?;
    let mut nats_weights = trainer.weights(&cfg.network_hash());
    let sources = |k: usize| -> anyhow::Result<Vec<Box<dyn WeightSource>>> {
        (0..k).map(|_| Ok(Box::new(join()?.weight_source()?) as Box<dyn WeightSource>)).collect()
    };
    let nats_w1 = publish_to_visible(&mut nats_weights, sources(1)?, weights_len, 10, 1)?;
    let nats_w4 = publish_to_visible(&mut nats_weights, sources(4)?, weights_len, 10, 11)?;

    writeln!(
        out,
        "                       {:>16} {:>16} {:>10}",
        "shared memory", "NATS loopback", "NATS/shm"
    )?;
    writeln!(
        out,
        "chunks/s               {:>16.0} {:>16.0} {:>9.2}x",
        shm_tp.0,
        nats_tp.0,
        nats_tp.0 / shm_tp.0
    )?;
    writeln!(out, "MB/s                   {:>16.0} {:>16.0}", shm_tp.1, nats_tp.1)?;
    writeln!(
        out,
        "chunk latency p50      {:>13.3} ms {:>13.3} ms {:>9.1}x",
        ms(shm_lat.0),
        ms(nats_lat.0),
        ms(nats_lat.0) / ms(shm_lat.0)
    )?;
    writeln!(
        out,
        "chunk latency p99      {:>13.3} ms {:>13.3} ms {:>9.1}x",
        ms(shm_lat.1),
        ms(nats_lat.1),
        ms(nats_lat.1) / ms(shm_lat.1)
    )?;
    writeln!(
        out,
        "weights → 1 collector  {:>13.2} ms {:>13.2} ms {:>9.1}x",
        ms(shm_w1),
        ms(nats_w1),
        ms(nats_w1) / ms(shm_w1)
    )?;
    writeln!(
        out,
        "weights → 4 collectors {:>13.2} ms {:>13.2} ms {:>9.1}x",
        ms(shm_w4),
        ms(nats_w4),
        ms(nats_w4) / ms(shm_w4)
    )?;
    writeln!(
        out,
        "({} chunks for throughput, {} one-at-a-time round trips, weights: median of the slowest reader over 20 / 10 publishes)",
        a.chunks, a.rounds
    )?;
    if let Some(path) = &a.json {
        let v = serde_json::json!({
            "config": a.config, "chunk_bytes": chunk.max_record(), "weights_bytes": weights_len,
            "shm": {"chunks_per_s": shm_tp.0, "mb_per_s": shm_tp.1, "latency_p50_ms": ms(shm_lat.0), "latency_p99_ms": ms(shm_lat.1), "weights_1_ms": ms(shm_w1), "weights_4_ms": ms(shm_w4)},
            "nats": {"chunks_per_s": nats_tp.0, "mb_per_s": nats_tp.1, "latency_p50_ms": ms(nats_lat.0), "latency_p99_ms": ms(nats_lat.1), "weights_1_ms": ms(nats_w1), "weights_4_ms": ms(nats_w4)},
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}
