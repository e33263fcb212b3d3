//! `rulka demo`: the pipeline end to end, as far as it exists today —
//! config → fresh network (tch) → checkpoint → ONNX export → parity check →
//! one policy decision on ONNX Runtime.

use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use rulka_checkpoint::Weights;
use rulka_config::{float_inputs_mean_std, ACTION_KEYS};
use rulka_learner::ActorCritic;
use rulka_torch::check_parity;
use tch::Device;

use crate::load_config;

/// Runs the demo, writing its files under `out_dir`.
pub fn run(config: &Path, out_dir: &Path, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    let cfg = load_config(config)?;
    println!(
        "[1/5] config {}: algorithm {:?}, network {}",
        config.display(),
        cfg.training.algorithm,
        cfg.network_hash()
    );
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    let net = ActorCritic::new_pretrained(&cfg, Device::Cpu, cfg.training.seed)?;
    let ckpt = out_dir.join("init.safetensors");
    net.save(&ckpt, &cfg, 0)?;
    println!("[2/5] initialised {}\n      wrote {}", net.arch().summary(), ckpt.display());

    let weights = Weights::read(&ckpt)?;
    let started = Instant::now();
    let onnx = rulka_export::export_onnx(&cfg, &weights)?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let model_path = out_dir.join("model.onnx");
    rulka_checkpoint::write_atomic(&model_path, &onnx)?;
    println!(
        "[3/5] exported {} ({:.2} MB) in {ms:.0} ms",
        model_path.display(),
        onnx.len() as f64 / 1e6
    );

    let rt = rulka_inference::load_runtime(ort_lib).context("loading ONNX Runtime")?;
    let report = check_parity(&cfg, &weights, &onnx, rt, &[1, 17], 0)?;
    println!(
        "[4/5] parity tch vs ONNX Runtime ({} input cases): max |Δlogits| {:.1e}, max |Δvalue| {:.1e} — {}",
        report.cases.len(),
        report.max_logits(),
        report.max_value(),
        if report.passed() { "ok" } else { "FAILED" }
    );
    anyhow::ensure!(report.passed(), "parity check failed");

    let mut model = rulka_inference::Model::open(rt, rulka_inference::ModelSource::Bytes(onnx), 1)?;
    let (h, w) = net.arch().image.as_ref().map_or((1, 1), |i| (i.height, i.width));
    let frame: Vec<u8> =
        (0..h * w).map(|i| if (i % w) * 3 > w && (i % w) * 3 < 2 * w { 90 } else { 200 }).collect();
    let (floats, _) = float_inputs_mean_std(&cfg);
    let started = Instant::now();
    let (logits, value) =
        model.run_actor_critic([1, 1, h, w], &frame, [1, floats.len()], &floats)?;
    let us = started.elapsed().as_secs_f64() * 1e6;
    let (best, log_p) = rulka_inference::sample_action(&logits[..12], None);
    let keys = ACTION_KEYS[best];
    let names: Vec<&str> = ["accelerate", "brake", "left", "right"]
        .iter()
        .zip(keys)
        .filter(|(_, k)| *k)
        .map(|(n, _)| *n)
        .collect();
    println!(
        "[5/5] ONNX Runtime decision on a synthetic road frame ({us:.0} µs, first call): most likely action {best} [{}] p={:.3}, V={:.3}",
        if names.is_empty() { "coast".to_string() } else { names.join("+") },
        log_p.exp(),
        value[0]
    );
    println!(
        "training (`rulka train`) is not built yet; this is the pipeline as far as it exists."
    );
    Ok(())
}
