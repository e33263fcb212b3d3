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
use rulka_config::{float_inputs_mean_std, Config, WeightFormat};
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
        "rulka bench inference — {} ({} cores); ONNX Runtime {} and libtorch with {threads} intra-op thread(s)",
        cpu_model(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        rt.library_path().display()
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
    let gpu_note = gpu_backends();
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

        pb.set_message(format!("ort-cpu-raw, batch {b}"));
        let mut session =
            rulka_inference::build_session(rt, &cfg.inference, &ModelSource::Bytes(onnx.clone()))?;
        let image_t = OrtTensor::from_array(([b, 1, h, w], frames.clone()))?;
        let floats_t = OrtTensor::from_array(([b, f], floats.clone()))?;
        rows.push(measure("ort-cpu-raw", b, budget, || {
            let out = session.run(ort::inputs![rulka_export::INPUT_IMAGE => &image_t, rulka_export::INPUT_FLOATS => &floats_t])?;
            std::hint::black_box(out[rulka_export::OUTPUT_LOGITS].try_extract_tensor::<f32>()?.1[0]);
            Ok(())
        })?);
        pb.inc(1);

        for (backend, model, floor) in &models {
            pb.set_message(format!("{backend}, batch {b}"));
            let mut engine = PolicyEngine::new(
                rt,
                &cfg,
                ModelSource::Bytes(model.clone()),
                0,
                EngineOptions { greedy: false, seed: 0 },
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
            row.floor_us = Some(*floor);
            rows.push(row);
            pb.inc(1);
        }

        pb.set_message(format!("tch-cpu, batch {b}"));
        let img = Tensor::from_slice(&frames).reshape([b as i64, 1, h as i64, w as i64]);
        let fl = Tensor::from_slice(&floats).reshape([b as i64, f as i64]);
        rows.push(measure("tch-cpu", b, budget, || {
            let (l, _) = tch::no_grad(|| net.forward(&img, &fl));
            std::hint::black_box(l.to_kind(Kind::Float).double_value(&[0, 0]));
            Ok(())
        })?);
        pb.inc(1);
    }
    pb.finish_and_clear();

    let torch = python_torch_eager(&args.batches, args.seconds, &cfg, &weights)?;
    match &torch {
        Ok(py_rows) => {
            rows.extend(py_rows.iter().cloned());
            backends.push("pytorch-eager-python");
        }
        Err(reason) => writeln!(out, "baseline pytorch-eager-python: not run — {reason}")?,
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
        "{:<22} {:>5} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "backend", "batch", "p50 µs", "p90 µs", "p99 µs", "samples/s", "× ort raw", "floor µs"
    )?;
    for r in &rows {
        writeln!(
            out,
            "{:<22} {:>5} {:>10.1} {:>10.1} {:>10.1} {:>12.0} {:>10.2} {:>10}",
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
    for b in &args.batches {
        let p50 =
            |name: &str| rows.iter().find(|r| r.backend == name && r.batch == *b).map(|r| r.p50_us);
        if let (Some(f), Some(i8), Some(i4)) =
            (p50("rulka-engine-cpu"), p50("rulka-engine-cpu-int8"), p50("rulka-engine-cpu-int4"))
        {
            writeln!(
                out,
                "batch {b}: int8 weights {:.2}x the fp32 engine's p50, int4 {:.2}x",
                i8 / f,
                i4 / f
            )?;
        }
    }
    writeln!(out, "GPU backends (tch-cuda, ort-cuda, ort-tensorrt): {gpu_note}")?;
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
    let hot =
        if args.no_hot_swap { None } else { Some(hot_swap(rt, &cfg, &net, &onnx, budget, out)?) };
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"cpu": cpu_model(), "threads": threads, "network": arch.summary(), "rows": rows, "hot_swap": hot, "gpu": gpu_note});
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

fn gpu_backends() -> String {
    let mut notes = Vec::new();
    if !tch::Cuda::is_available() {
        notes.push("tch-cuda: no CUDA device visible to libtorch (build with --features cuda and run on a GPU machine)");
    }
    notes.push("ort-cuda/ort-tensorrt: need the onnxruntime-gpu provider libraries and a build with --features cuda/tensorrt; not measured");
    notes.join("; ")
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
