//! `rulka bench inference`: inference throughput and latency of every
//! available backend on the same weights, in one run, with each backend's
//! ratio to raw ONNX Runtime at the same batch size.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use ort::value::Tensor as OrtTensor;
use rulka_checkpoint::Weights;
use rulka_config::{float_inputs_mean_std, Config, Provider, WeightFormat};
use rulka_inference::{EngineOptions, ModelSource, PolicyEngine};
use rulka_learner::ActorCritic;
use rulka_report::{Chart, Line, Panel, YRange};
use tch::{Device, Kind, Tensor};

use rulka_trainer::load_config;

/// Options of `rulka bench inference`.
#[derive(Debug)]
pub struct InferenceArgs {
    /// Config shaping the network.
    pub config: PathBuf,
    /// Checkpoint to load (default: a fresh seeded initialisation).
    pub checkpoint: Option<PathBuf>,
    /// Batch sizes.
    pub batches: Vec<usize>,
    /// Seconds of timed iterations per backend and batch size.
    pub seconds: f64,
    /// JSON output.
    pub json: Option<PathBuf>,
    /// SVG plot output.
    pub plot: Option<PathBuf>,
    /// Skip the hot-swap measurement.
    pub no_hot_swap: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    backend: String,
    batch: usize,
    iterations: usize,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    samples_per_s: f64,
    ratio_to_ort_raw: Option<f64>,
    /// Time to stream the model's weights once at the measured
    /// matrix-vector bandwidth (engine rows).
    floor_us: Option<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Warms up, then times `f` for `budget` (at least 30 calls).
fn measure(
    backend: &str,
    batch: usize,
    budget: Duration,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Row> {
    let warm = Instant::now();
    while warm.elapsed() < budget / 5 {
        f()?;
    }
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget || samples.len() < 30 {
        let t = Instant::now();
        f()?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    let p50 = percentile(&samples, 0.5);
    Ok(Row {
        backend: backend.into(),
        batch,
        iterations: samples.len(),
        p50_us: p50,
        p90_us: percentile(&samples, 0.9),
        p99_us: percentile(&samples, 0.99),
        samples_per_s: batch as f64 / (p50 / 1e6),
        ratio_to_ort_raw: None,
        floor_us: None,
    })
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// A backend that was not measured, and why.
#[derive(Debug, Clone, serde::Serialize)]
struct Absent {
    backend: String,
    reason: String,
}

/// The GPU backends `rulka bench inference` knows: name, provider, fp16.
const GPU_ENGINES: [(&str, Provider, bool); 3] = [
    ("rulka-engine-cuda", Provider::Cuda, false),
    ("rulka-engine-tensorrt", Provider::Tensorrt, false),
    ("rulka-engine-tensorrt-fp16", Provider::Tensorrt, true),
];

fn on(cfg: &Config, provider: Provider, fp16: bool) -> Config {
    let mut c = cfg.clone();
    c.inference.provider = provider;
    c.inference.fallback = rulka_config::Fallback::None;
    c.inference.tensorrt_fp16 = fp16;
    c.inference.weights = WeightFormat::Fp32;
    c
}

/// Why `provider` cannot be measured here: the first missing piece
/// ([`rulka_inference::native::missing_for`]), else `err`'s words.
fn absent_reason(provider: Provider, err: &dyn std::fmt::Display) -> String {
    let facts = rulka_inference::native::gpu_facts();
    match rulka_inference::native::missing_for(provider, &facts).first() {
        Some(m) => m.to_string(),
        None => err.to_string(),
    }
}

/// Runs the benchmark.
pub fn run_inference(
    args: &InferenceArgs,
    ort_lib: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let cfg = load_config(&args.config)?;
    let threads = cfg.inference.intra_op_threads as usize;
    tch::set_num_threads(threads as i32);
    let mut net = ActorCritic::new(&cfg, Device::Cpu, cfg.training.seed);
    if let Some(ck) = &args.checkpoint {
        let w = Weights::read(ck).map_err(|e| rulka_trainer::BadInput(e.to_string()))?;
        net.load_weights(&w, &cfg, false).map_err(|e| rulka_trainer::BadInput(format!("{e:#}")))?;
    }
    net.set_training(false);
    let weights = net.to_weights();
    let onnx = rulka_export::export_onnx(&cfg, &weights)?;
    let rt = rulka_inference::load_runtime(ort_lib).context("loading ONNX Runtime")?;
    let arch = net.arch().clone();
    let (h, w) = arch.image.as_ref().map_or((1, 1), |i| (i.height, i.width));
    let f = arch.float_dim;
    writeln!(
        out,
        "rulka bench inference — {} ({} cores); ONNX Runtime {} and libtorch with {threads} intra-op thread(s); rulka {}",
        cpu_model(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        rt.library_path().display(),
        rulka_inference::native::VERSION
    )?;
    writeln!(out, "network: {}", arch.summary())?;
    let budget = Duration::from_secs_f64(args.seconds);
    let mut backends = vec![
        "ort-cpu-raw",
        "rulka-engine-cpu",
        "rulka-engine-cpu-int8",
        "rulka-engine-cpu-int4",
        "tch-cpu",
    ];
    let bandwidth = matvec_bandwidth();
    let mut models = Vec::new();
    for (backend, format) in [
        ("rulka-engine-cpu", WeightFormat::Fp32),
        ("rulka-engine-cpu-int8", WeightFormat::Int8),
        ("rulka-engine-cpu-int4", WeightFormat::Int4),
    ] {
        let model = if format == cfg.inference.weights {
            onnx.clone()
        } else {
            let mut c = cfg.clone();
            c.inference.weights = format;
            rulka_export::export_onnx(&c, &weights)?
        };
        let bytes = rulka_export::initializer_bytes(&model)?;
        writeln!(
        out,
            "{backend}: {:.2} MB of weights, streamed at {:.1} GB/s (measured matrix-vector, one thread): floor {:.0} µs",
            bytes as f64 / 1e6,
            bandwidth / 1e9,
            bytes as f64 / bandwidth * 1e6
        )?;
        models.push((backend, model, bytes as f64 / bandwidth * 1e6));
    }
    // Which GPU backends are here: each is tried once at batch 1; one that
    // cannot be made is listed with the reason instead of measured.
    let mut absent = Vec::new();
    let mut gpu_engines = Vec::new();
    let ort_cuda = match rulka_inference::build_session(
        rt,
        &on(&cfg, Provider::Cuda, false).inference,
        &ModelSource::Bytes(onnx.clone()),
    ) {
        Ok(_) => true,
        Err(e) => {
            absent.push(Absent {
                backend: "ort-cuda-raw".into(),
                reason: absent_reason(Provider::Cuda, &e),
            });
            false
        }
    };
    for (name, provider, fp16) in GPU_ENGINES {
        let c = on(&cfg, provider, fp16);
        match PolicyEngine::new(
            rt,
            &c,
            ModelSource::Bytes(onnx.clone()),
            0,
            EngineOptions { greedy: false, seed: 0 },
        ) {
            Ok(_) => gpu_engines.push((name, c)),
            Err(e) => {
                absent.push(Absent { backend: name.into(), reason: absent_reason(provider, &e) })
            }
        }
    }
    let tch_cuda = tch::Cuda::is_available();
    if !tch_cuda {
        absent.push(Absent {
            backend: "tch-cuda".into(),
            reason: format!(
                "libtorch sees no CUDA device (rulka-torch {}; the learner's GPU build is scripts/rulka --build=cuda, on a machine with an NVIDIA GPU)",
                rulka_inference::native::VERSION
            ),
        });
    }
    if ort_cuda {
        backends.push("ort-cuda-raw");
    }
    backends.extend(gpu_engines.iter().map(|(n, _)| *n));
    let cuda_net = tch_cuda.then(|| -> anyhow::Result<ActorCritic> {
        let mut g = ActorCritic::new(&cfg, Device::Cuda(0), cfg.training.seed);
        g.load_weights(&weights, &cfg, false).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        g.set_training(false);
        Ok(g)
    });
    let cuda_net = cuda_net.transpose()?;
    if cuda_net.is_some() {
        backends.push("tch-cuda");
    }
    let pb = ProgressBar::new((args.batches.len() * backends.len()) as u64);
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mean, std) = float_inputs_mean_std(&cfg);
    let mut rows = Vec::new();
    for &b in &args.batches {
        let frames: Vec<u8> = (0..b * h * w).map(|i| (i * 31 % 251) as u8).collect();
        let floats: Vec<f32> = (0..b * f)
            .map(|i| mean[i % f] + std[i % f] * (((i * 7919) % 200) as f32 / 100.0 - 1.0))
            .collect();

        let raw_providers: &[(&str, Provider)] = if ort_cuda {
            &[("ort-cpu-raw", Provider::Cpu), ("ort-cuda-raw", Provider::Cuda)]
        } else {
            &[("ort-cpu-raw", Provider::Cpu)]
        };
        for &(name, provider) in raw_providers {
            pb.set_message(format!("{name}, batch {b}"));
            let mut session = rulka_inference::build_session(
                rt,
                &on(&cfg, provider, false).inference,
                &ModelSource::Bytes(onnx.clone()),
            )?;
            let image_t = OrtTensor::from_array(([b, 1, h, w], frames.clone()))?;
            let floats_t = OrtTensor::from_array(([b, f], floats.clone()))?;
            rows.push(measure(name, b, budget, || {
                let out = session.run(ort::inputs![rulka_export::INPUT_IMAGE => &image_t, rulka_export::INPUT_FLOATS => &floats_t])?;
                std::hint::black_box(out[rulka_export::OUTPUT_LOGITS].try_extract_tensor::<f32>()?.1[0]);
                Ok(())
            })?);
            pb.inc(1);
        }

        let mut engines: Vec<(&str, Config, Vec<u8>, Option<f64>)> = models
            .iter()
            .map(|(backend, model, floor)| (*backend, cfg.clone(), model.clone(), Some(*floor)))
            .collect();
        engines.extend(gpu_engines.iter().map(|(n, c)| (*n, c.clone(), onnx.clone(), None)));
        for (backend, c, model, floor) in &engines {
            pb.set_message(format!("{backend}, batch {b}"));
            let mut engine = PolicyEngine::with_batch(
                rt,
                c,
                ModelSource::Bytes(model.clone()),
                0,
                EngineOptions { greedy: false, seed: 0 },
                b,
            )?;
            let mut actions = Vec::with_capacity(b);
            let mut row = measure(backend, b, budget, || {
                if b == 1 {
                    std::hint::black_box(engine.act(&frames, &floats)?);
                } else {
                    engine.act_batch(&frames, &floats, b, &mut actions)?;
                }
                Ok(())
            })?;
            row.floor_us = *floor;
            rows.push(row);
            pb.inc(1);
        }

        let mut nets = vec![("tch-cpu", &net, Device::Cpu)];
        if let Some(g) = &cuda_net {
            nets.push(("tch-cuda", g, Device::Cuda(0)));
        }
        for (name, n, device) in nets {
            pb.set_message(format!("{name}, batch {b}"));
            let img = Tensor::from_slice(&frames)
                .reshape([b as i64, 1, h as i64, w as i64])
                .to_device(device);
            let fl = Tensor::from_slice(&floats).reshape([b as i64, f as i64]).to_device(device);
            rows.push(measure(name, b, budget, || {
                let (l, _) = tch::no_grad(|| n.forward(&img, &fl));
                std::hint::black_box(l.to_kind(Kind::Float).double_value(&[0, 0]));
                Ok(())
            })?);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();

    let torch = python_torch_eager(&args.batches, args.seconds, &cfg, &weights)?;
    match &torch {
        Ok(py_rows) => {
            rows.extend(py_rows.iter().cloned());
            backends.push("pytorch-eager-python");
        }
        Err(reason) => {
            absent.push(Absent { backend: "pytorch-eager-python".into(), reason: reason.clone() })
        }
    }
    for i in 0..rows.len() {
        let raw = rows
            .iter()
            .find(|r| r.backend == "ort-cpu-raw" && r.batch == rows[i].batch)
            .map(|r| r.p50_us);
        rows[i].ratio_to_ort_raw = raw.map(|r| rows[i].p50_us / r);
    }
    writeln!(
        out,
        "{:<26} {:>5} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "backend", "batch", "p50 µs", "p90 µs", "p99 µs", "samples/s", "× ort raw", "floor µs"
    )?;
    for r in &rows {
        writeln!(
            out,
            "{:<26} {:>5} {:>10.1} {:>10.1} {:>10.1} {:>12.0} {:>10.2} {:>10}",
            r.backend,
            r.batch,
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.samples_per_s,
            r.ratio_to_ort_raw.unwrap_or(f64::NAN),
            r.floor_us.map_or_else(|| "-".to_string(), |f| format!("{f:.0}"))
        )?;
    }
    for line in summary_lines(&rows, &args.batches) {
        writeln!(out, "{line}")?;
    }
    for line in absent_lines(&absent) {
        writeln!(out, "{line}")?;
    }
    if let Ok(py) = &torch {
        if let (Some(e), Some(p)) = (
            rows.iter().find(|r| r.backend == "rulka-engine-cpu" && r.batch == 1),
            py.iter().find(|r| r.batch == 1),
        ) {
            writeln!(
                out,
                "rulka engine batch 1 is {:.1}x faster than PyTorch eager in Python",
                p.p50_us / e.p50_us
            )?;
        }
    }
    let mut hot = serde_json::Map::new();
    if !args.no_hot_swap {
        hot.insert("cpu".into(), hot_swap(rt, &cfg, &net, &onnx, budget, out)?);
        hot.insert(
            "rulka-engine-cpu".into(),
            swap_times(rt, &cfg, "rulka-engine-cpu", &net, &onnx, out)?,
        );
        for (name, c) in &gpu_engines {
            hot.insert((*name).into(), swap_times(rt, c, name, &net, &onnx, out)?);
        }
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"cpu": cpu_model(), "threads": threads, "network": arch.summary(), "build": rulka_inference::native::VERSION, "rows": rows, "absent": absent, "hot_swap": hot});
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "wrote {}", path.display())?;
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, svg(&rows, &backends)?)
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(())
}

/// The ratios a reader looks for: quantized against fp32 on the CPU, and
/// each GPU engine's throughput against the CPU engine's, per batch size.
fn summary_lines(rows: &[Row], batches: &[usize]) -> Vec<String> {
    let mut lines = Vec::new();
    for b in batches {
        let find = |name: &str| rows.iter().find(|r| r.backend == name && r.batch == *b);
        let p50 = |name: &str| find(name).map(|r| r.p50_us);
        if let (Some(f), Some(i8), Some(i4)) =
            (p50("rulka-engine-cpu"), p50("rulka-engine-cpu-int8"), p50("rulka-engine-cpu-int4"))
        {
            lines.push(format!(
                "batch {b}: int8 weights {:.2}x the fp32 engine's p50, int4 {:.2}x",
                i8 / f,
                i4 / f
            ));
        }
        if let Some(cpu) = find("rulka-engine-cpu") {
            for (name, _, _) in GPU_ENGINES {
                if let Some(g) = find(name) {
                    lines.push(format!(
                        "batch {b}: {name} {:.1}x the CPU engine's samples/s (p50 {:.1} µs, p99 {:.1} µs)",
                        g.samples_per_s / cpu.samples_per_s,
                        g.p50_us,
                        g.p99_us
                    ));
                }
            }
        }
    }
    lines
}

/// Swap time on `cfg`'s provider: for each of 10 snapshots (the same
/// network, new weights each time), the time from its publication on a
/// weight board to the first decision made with it, `act` called in a
/// loop meanwhile.
fn swap_times(
    rt: rulka_inference::Runtime,
    cfg: &Config,
    name: &str,
    net: &ActorCritic,
    onnx: &[u8],
    out: &mut dyn Write,
) -> anyhow::Result<serde_json::Value> {
    let dir = tempfile::Builder::new().prefix("rulka-bench-").tempdir_in("/dev/shm")?;
    let spec =
        rulka_shm::BoardSpec::new(dir.path(), "weights", 1, rulka_shm::Schema::default(), 16 << 20);
    let mut writer = rulka_shm::BoardWriter::create(&spec)?;
    let reader = rulka_shm::BoardReader::open(&spec, Duration::from_secs(1))?;
    let mut engine = PolicyEngine::new(
        rt,
        cfg,
        ModelSource::Bytes(onnx.to_vec()),
        1,
        EngineOptions { greedy: false, seed: 0 },
    )?;
    let (fl, _) = engine.input_sizes();
    let (frame, floats) = (vec![100u8; fl], float_inputs_mean_std(cfg).0);
    engine.follow(reader, cfg);
    let mut weights = net.to_weights();
    let mut times_ms = Vec::new();
    for v in 2..12u64 {
        for t in weights.tensors.values_mut() {
            for x in &mut t.data {
                *x *= 0.999;
            }
        }
        let snapshot = weights.to_safetensors(&rulka_checkpoint::Meta::new(cfg, v))?;
        let t0 = Instant::now();
        writer.publish(v, &snapshot)?;
        loop {
            if engine.act(&frame, &floats)?.policy_version == v {
                break;
            }
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(600),
                "{name}: snapshot v{v} not swapped in within 10 minutes ({:?})",
                engine.stats().last_rejection
            );
        }
        times_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let (line, doc) = swap_report(name, &times_ms, &engine.stats());
    writeln!(out, "{line}")?;
    Ok(doc)
}

/// The printed line and the JSON of one provider's swap times (both from
/// the same p50 and maximum).
fn swap_report(
    name: &str,
    times_ms: &[f64],
    stats: &rulka_inference::EngineStats,
) -> (String, serde_json::Value) {
    let mut sorted = times_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (p50, max) = match sorted.last() {
        Some(&max) => (percentile(&sorted, 0.5), max),
        None => (f64::NAN, f64::NAN),
    };
    let line = format!(
        "swap time {name}: publish → first decision on the new weights p50 {p50:.1} ms, max {max:.1} ms over {} snapshots (refits {}, engine builds {}, CUDA graph {})",
        sorted.len(),
        stats.refits,
        stats.engine_builds,
        stats.cuda_graph
    );
    let doc = serde_json::json!({"swap_ms": times_ms, "swap_p50_ms": p50, "swap_max_ms": max, "refits": stats.refits, "engine_builds": stats.engine_builds, "cuda_graph": stats.cuda_graph});
    (line, doc)
}

/// The report's list of backends not measured, each with its reason
/// (nothing when every backend was measured).
fn absent_lines(absent: &[Absent]) -> Vec<String> {
    if absent.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["not measured here:".to_string()];
    lines.extend(absent.iter().map(|a| format!("  {:<26} {}", a.backend, a.reason)));
    lines
}

/// Bytes per second one thread reads in a matrix-vector product over a
/// 4 MB `f32` matrix (1024 × 1024; the median of repeated products).
fn matvec_bandwidth() -> f64 {
    const N: usize = 1024;
    let m: Vec<f32> = (0..N * N).map(|i| (i % 97) as f32 * 1e-3).collect();
    let x: Vec<f32> = (0..N).map(|i| (i % 13) as f32 * 1e-2).collect();
    let mut y = vec![0f32; N];
    let mut times = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) || times.len() < 20 {
        let t = Instant::now();
        for (row, out) in m.chunks_exact(N).zip(y.iter_mut()) {
            let mut acc = [0f32; 16];
            for (a, b) in row.chunks_exact(16).zip(x.chunks_exact(16)) {
                for i in 0..16 {
                    acc[i] += a[i] * b[i];
                }
            }
            *out = acc.iter().sum();
        }
        std::hint::black_box(&y);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    (N * N * 4) as f64 / times[times.len() / 2]
}

/// Batch-1 `act` latency with no swaps, then while a new snapshot is
/// published every 100 ms; reports both distributions.
fn hot_swap(
    rt: rulka_inference::Runtime,
    cfg: &Config,
    net: &ActorCritic,
    onnx: &[u8],
    budget: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<serde_json::Value> {
    let dir = tempfile::Builder::new().prefix("rulka-bench-").tempdir_in("/dev/shm")?;
    let spec =
        rulka_shm::BoardSpec::new(dir.path(), "weights", 1, rulka_shm::Schema::default(), 16 << 20);
    let mut writer = rulka_shm::BoardWriter::create(&spec)?;
    let reader = rulka_shm::BoardReader::open(&spec, Duration::from_secs(1))?;
    let mut engine = PolicyEngine::new(
        rt,
        cfg,
        ModelSource::Bytes(onnx.to_vec()),
        1,
        EngineOptions { greedy: false, seed: 0 },
    )?;
    let (fl, ff) = engine.input_sizes();
    let (frame, floats) = (vec![100u8; fl], float_inputs_mean_std(cfg).0);
    anyhow::ensure!(floats.len() == ff, "float layout");
    // Returns all latencies (sorted) and those of the first act after each swap.
    let run = |engine: &mut PolicyEngine, d: Duration| -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        let (mut v, mut first) = (Vec::new(), Vec::new());
        let start = Instant::now();
        let mut version = engine.policy_version();
        while start.elapsed() < d {
            let t = Instant::now();
            let a = engine.act(&frame, &floats)?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            v.push(us);
            if a.policy_version != version {
                first.push(us);
                version = a.policy_version;
            }
        }
        v.sort_by(f64::total_cmp);
        Ok((v, first))
    };
    let long = budget.max(Duration::from_secs(2)) * 2;
    let (quiet, _) = run(&mut engine, long)?;
    engine.follow(reader, cfg);
    let snapshot = net.to_weights().to_safetensors(&rulka_checkpoint::Meta::new(cfg, 0))?;
    let stop = std::sync::Arc::new(std::sync::Mutex::new(false));
    let stop2 = stop.clone();
    let publisher = std::thread::spawn(move || -> anyhow::Result<u64> {
        let mut v = 1;
        while !*stop2.lock().map_err(|_| anyhow::anyhow!("poisoned"))? {
            v += 1;
            writer.publish(v, &snapshot)?;
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(v)
    });
    let (busy, mut first) = run(&mut engine, long)?;
    first.sort_by(f64::total_cmp);
    *stop.lock().map_err(|_| anyhow::anyhow!("poisoned"))? = true;
    let published = publisher.join().map_err(|_| anyhow::anyhow!("publisher panicked"))??;
    let swaps = engine.stats().swaps;
    let p99_quiet = percentile(&quiet, 0.99);
    let (max_busy, p99_busy) = (busy[busy.len() - 1], percentile(&busy, 0.99));
    writeln!(
        out,
        "hot-swap: {published} snapshots published every 100 ms, {swaps} swapped in; act batch 1 — without swaps p50 {:.1} µs p99 {p99_quiet:.1} µs max {:.1} µs; with swaps p50 {:.1} µs p99 {p99_busy:.1} µs max {max_busy:.1} µs = {:.2}x the quiet p99",
        percentile(&quiet, 0.5),
        quiet[quiet.len() - 1],
        percentile(&busy, 0.5),
        max_busy / p99_quiet
    )?;
    if !first.is_empty() {
        writeln!(
            out,
            "hot-swap: first act after a swap — p50 {:.1} µs, max {:.1} µs (n = {})",
            percentile(&first, 0.5),
            first[first.len() - 1],
            first.len()
        )?;
    }
    Ok(
        serde_json::json!({"snapshots": published, "swaps": swaps, "quiet_p50_us": percentile(&quiet, 0.5), "quiet_p99_us": p99_quiet, "quiet_max_us": quiet[quiet.len() - 1], "first_after_swap_us": first,
        "swap_p50_us": percentile(&busy, 0.5), "swap_p99_us": p99_busy, "swap_max_us": max_busy, "max_over_quiet_p99": max_busy / p99_quiet}),
    )
}

fn python_torch_eager(
    batches: &[usize],
    seconds: f64,
    cfg: &Config,
    weights: &Weights,
) -> anyhow::Result<Result<Vec<Row>, String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var_os("RULKA_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    let probe = Command::new(&python).args(["-c", "import torch"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("").to_string();
            return Ok(Err(format!(
                "{} cannot import torch ({last}); set RULKA_TORCH_PYTHON to a Python with PyTorch",
                python.display()
            )));
        }
        Err(e) => return Ok(Err(format!("{}: {e}", python.display()))),
    }
    let arch = rulka_network::Architecture::from_config(cfg);
    let vanilla = |c: &rulka_network::CnnArch| {
        c.stem == rulka_network::Stem::Vanilla && !c.spectral_norm && c.adaptive_maxpool.is_none()
    };
    let plain_a = arch.kind == rulka_config::NetworkKind::A
        && arch.variant_a_cnn(cfg).as_ref().is_none_or(vanilla);
    if !plain_a {
        return Ok(Err(
            "the Python baseline script builds Variant A with the vanilla CNN only".into()
        ));
    }
    let dir = tempfile::tempdir()?;
    let wpath = dir.path().join("w.safetensors");
    weights.write(&wpath, &rulka_checkpoint::Meta::new(cfg, 0))?;
    let (h, w) = arch.image.as_ref().map_or((0, 0), |i| (i.height, i.width));
    let out = Command::new(&python)
        .arg(root.join("scripts/bench_torch_eager.py"))
        .arg(&wpath)
        .arg(serde_json::json!({"height": h, "width": w, "float_dim": arch.float_dim, "batches": batches, "seconds": seconds, "threads": cfg.inference.intra_op_threads}).to_string())
        .output()?;
    if !out.status.success() {
        return Ok(Err(format!(
            "bench_torch_eager.py failed: {}",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        )));
    }
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    Ok(Ok(v
        .iter()
        .map(|r| Row {
            backend: "pytorch-eager-python".into(),
            batch: r["batch"].as_u64().unwrap_or(0) as usize,
            iterations: r["iterations"].as_u64().unwrap_or(0) as usize,
            p50_us: r["p50_us"].as_f64().unwrap_or(f64::NAN),
            p90_us: r["p90_us"].as_f64().unwrap_or(f64::NAN),
            p99_us: r["p99_us"].as_f64().unwrap_or(f64::NAN),
            samples_per_s: r["batch"].as_f64().unwrap_or(0.0)
                / (r["p50_us"].as_f64().unwrap_or(f64::NAN) / 1e6),
            ratio_to_ort_raw: None,
            floor_us: None,
        })
        .collect()))
}

/// Latency (p50) against batch size, log-log, one line per backend.
fn svg(rows: &[Row], backends: &[&str]) -> anyhow::Result<String> {
    let mut panel = Panel::new("p50 latency", YRange::Log10).y_format(fmt_us);
    for (i, b) in backends.iter().enumerate() {
        let pts = rows
            .iter()
            .filter(|r| r.backend == *b)
            .map(|r| (r.batch as f64, r.p50_us.max(1e-3)))
            .collect();
        panel = panel.line(Line::new(*b, i, pts));
    }
    Ok(Chart::new("rulka bench inference: p50 latency vs batch size", "batch size")
        .x_log2(|b| format!("{b:.0}"))
        .panel(panel)
        .svg()?)
}

fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.0} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.0} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(backend: &str, batch: usize, p50_us: f64, samples_per_s: f64) -> Row {
        Row {
            backend: backend.into(),
            batch,
            iterations: 100,
            p50_us,
            p90_us: p50_us * 1.1,
            p99_us: p50_us * 1.5,
            samples_per_s,
            ratio_to_ort_raw: None,
            floor_us: None,
        }
    }

    #[test]
    fn each_gpu_engine_is_its_samples_per_s_over_the_cpu_engines_at_its_batch() {
        let rows = vec![
            row("rulka-engine-cpu", 1, 400.0, 2_500.0),
            row("rulka-engine-cuda", 1, 40.0, 25_000.0),
            row("rulka-engine-cpu", 8, 1_600.0, 5_000.0),
            row("rulka-engine-tensorrt", 8, 80.0, 100_000.0),
            row("rulka-engine-cpu-int8", 1, 300.0, 3_333.0),
            row("rulka-engine-cpu-int4", 1, 200.0, 5_000.0),
        ];
        let lines = summary_lines(&rows, &[1, 8]);
        let has = |want: &str| lines.iter().any(|l| l.starts_with(want));
        // 25 000 / 2 500 at batch 1; 100 000 / 5 000 at batch 8.
        assert!(has("batch 1: rulka-engine-cuda 10.0x the CPU engine's samples/s (p50 40.0 µs, p99 60.0 µs)"), "{lines:#?}");
        assert!(
            has("batch 8: rulka-engine-tensorrt 20.0x the CPU engine's samples/s"),
            "{lines:#?}"
        );
        // p50 300 / 400 and 200 / 400.
        assert!(has("batch 1: int8 weights 0.75x the fp32 engine's p50, int4 0.50x"), "{lines:#?}");
        assert_eq!(lines.len(), 3, "nothing for a backend absent at a batch: {lines:#?}");
    }

    #[test]
    fn the_printed_swap_times_and_the_json_agree_on_p50_and_max() {
        let stats =
            rulka_inference::EngineStats { refits: 9, engine_builds: 1, ..Default::default() };
        let (line, doc) =
            swap_report("rulka-engine-tensorrt", &[12.0, 250.0, 30.0, 11.0, 14.0], &stats);
        // Sorted 11, 12, 14, 30, 250: the middle is 14, the slowest 250.
        assert!(
            line.contains("p50 14.0 ms, max 250.0 ms over 5 snapshots (refits 9, engine builds 1"),
            "{line}"
        );
        assert_eq!(
            (doc["swap_p50_ms"].as_f64(), doc["swap_max_ms"].as_f64()),
            (Some(14.0), Some(250.0))
        );
        assert_eq!(doc["swap_ms"][1].as_f64(), Some(250.0), "the times in publication order");
    }

    #[test]
    fn every_absent_backend_is_listed_with_its_reason_even_a_single_one() {
        assert!(absent_lines(&[]).is_empty());
        let one = absent_lines(&[Absent { backend: "tch-cuda".into(), reason: "no GPU".into() }]);
        assert_eq!(one.len(), 2, "{one:?}");
        assert_eq!(one[0], "not measured here:");
        assert!(one[1].contains("tch-cuda") && one[1].ends_with("no GPU"), "{one:?}");
        let two = absent_lines(&[
            Absent { backend: "a".into(), reason: "x".into() },
            Absent { backend: "b".into(), reason: "y".into() },
        ]);
        assert_eq!(two.len(), 3);
    }
}
