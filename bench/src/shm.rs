//! `rulka bench shm`: transport throughput and latency, as ratios against
//! baselines measured in the same run (single-core memcpy; the Python
//! original's multiprocessing.Queue when a Python with numpy is available).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rulka_shm::{
    Backpressure, BoardReader, BoardSpec, BoardWriter, RingConsumer, RingProducer, RingSpec, Schema,
};

fn memcpy_bytes_per_s(len: usize, budget: Duration) -> f64 {
    let src = vec![7u8; len];
    let mut dst = vec![0u8; len];
    let (mut n, start) = (0u64, Instant::now());
    while start.elapsed() < budget {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        n += 1;
    }
    n as f64 * len as f64 / start.elapsed().as_secs_f64()
}

fn ring_bytes_per_s(dir: &Path, record: usize, budget: Duration) -> anyhow::Result<f64> {
    let name = format!("bench-ring-{record}");
    let spec = RingSpec::new(dir, &name, 1, Schema::default(), 16, record);
    let mut consumer = RingConsumer::create(&spec)?;
    let mut producer = RingProducer::attach(
        &spec,
        Duration::from_secs(1),
        Backpressure::Block { timeout: Duration::from_secs(10) },
    )?;
    let payload = vec![3u8; record];
    let stop = Instant::now() + budget;
    let t = std::thread::spawn(move || -> anyhow::Result<u64> {
        let mut n = 0u64;
        while Instant::now() < stop {
            producer.push(&[&payload])?;
            n += 1;
        }
        Ok(n)
    });
    let (mut buf, mut got, start) = (Vec::with_capacity(record), 0u64, Instant::now());
    loop {
        if consumer.pop(&mut buf) {
            got += 1;
        } else if t.is_finished() && consumer.stats().committed == consumer.stats().consumed {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let sent = t.join().map_err(|_| anyhow::anyhow!("producer thread panicked"))??;
    anyhow::ensure!(sent == got, "ring lost records: sent {sent}, received {got}");
    consumer.remove()?;
    Ok(got as f64 * record as f64 / elapsed)
}

fn publish_to_visible(dir: &Path, len: usize, rounds: usize) -> anyhow::Result<Duration> {
    let spec = BoardSpec::new(dir, "bench-board", 1, Schema::default(), len);
    let mut writer = BoardWriter::create(&spec)?;
    let reader = BoardReader::open(&spec, Duration::from_secs(1))?;
    let snapshot = vec![5u8; len];
    let mut samples = Vec::with_capacity(rounds);
    for v in 1..=rounds as u64 {
        let (tx, rx) = std::sync::mpsc::channel::<Instant>();
        let reader = &reader;
        let r = std::thread::scope(|s| {
            let watcher = s.spawn(move || {
                let start: Instant = rx.recv().map_err(|_| anyhow::anyhow!("no start"))?;
                while reader.latest().is_none_or(|i| i.version < v) {
                    std::hint::spin_loop();
                }
                anyhow::Ok(start.elapsed())
            });
            let _ = tx.send(Instant::now());
            writer.publish(v, &snapshot)?;
            watcher.join().map_err(|_| anyhow::anyhow!("watcher panicked"))?
        })?;
        samples.push(r);
    }
    writer.remove()?;
    samples.sort();
    Ok(samples[samples.len() / 2])
}

fn python_queue(record: usize, seconds: f64) -> Option<f64> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv/bin/python");
    let out = Command::new(&python)
        .arg(root.join("scripts/bench_mp_queue.py"))
        .arg(record.to_string())
        .arg(seconds.to_string())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["bytes_per_s"].as_f64()
}

/// Runs the benchmark; prints a table and optionally writes JSON.
pub fn run_shm(seconds: f64, json: Option<&PathBuf>, out: &mut dyn Write) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("rulka-bench-").tempdir_in("/dev/shm")?;
    let budget = Duration::from_secs_f64(seconds);
    writeln!(
        out,
        "rulka bench shm — {} cores; each figure is a ratio to a baseline measured in this run",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    )?;
    let streaming = memcpy_bytes_per_s(64 << 20, budget);
    writeln!(
        out,
        "baseline: single-core memcpy of 64 MB buffers (streaming, beyond the caches): {:.2} GB/s",
        streaming / 1e9
    )?;
    let mut rows = Vec::new();
    for record in [5 * 1024, 256 * 1024] {
        let hot = memcpy_bytes_per_s(record, budget);
        let ring = ring_bytes_per_s(dir.path(), record, budget)?;
        let py = python_queue(record, seconds);
        writeln!(
        out,
            "ring, {:>3} KB records: {:>6.2} GB/s = {:>5.1}% of streaming memcpy, {:>5.1}% of cache-hot memcpy of one record ({:.1} GB/s){}",
            record / 1024,
            ring / 1e9,
            100.0 * ring / streaming,
            100.0 * ring / hot,
            hot / 1e9,
            py.map_or(" — Python baseline unavailable (no .venv)".to_string(), |p| format!("; {:.1}x Python mp.Queue ({:.3} GB/s)", ring / p, p / 1e9))
        )?;
        rows.push(serde_json::json!({"record_bytes": record, "ring_bytes_per_s": ring, "memcpy_streaming_bytes_per_s": streaming, "memcpy_hot_bytes_per_s": hot, "ratio_to_streaming_memcpy": ring / streaming, "ratio_to_hot_memcpy": ring / hot, "python_queue_bytes_per_s": py, "ratio_to_python": py.map(|p| ring / p)}));
    }
    let len = 8 << 20;
    let memcpy8 = Duration::from_secs_f64(len as f64 / memcpy_bytes_per_s(len, budget));
    let latency = publish_to_visible(dir.path(), len, 50)?;
    writeln!(
        out,
        "board, 8 MB snapshot: publish → visible {:.2} ms (median of 50) = {:.2}x its memcpy time ({:.2} ms)",
        latency.as_secs_f64() * 1e3,
        latency.as_secs_f64() / memcpy8.as_secs_f64(),
        memcpy8.as_secs_f64() * 1e3
    )?;
    rows.push(serde_json::json!({"snapshot_bytes": len, "publish_to_visible_s": latency.as_secs_f64(), "memcpy_s": memcpy8.as_secs_f64(), "ratio_to_memcpy": latency.as_secs_f64() / memcpy8.as_secs_f64()}));
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)?;
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(())
}
