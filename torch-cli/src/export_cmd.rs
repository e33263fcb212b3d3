//! `rulka init` and `rulka export`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rulka_checkpoint::{write_atomic, Weights};
use rulka_config::{Config, WeightFormat};
use rulka_learner::ActorCritic;
use rulka_torch::{
    check_parity, compare_quantized, record_observations, synthetic_observations, MIN_OBSERVATIONS,
    TOLERANCE,
};
use tch::Device;

use crate::{load_config, BadInput};

/// Refuses an output path whose directory does not exist, before any work.
fn check_output(path: &Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(BadInput(format!(
            "{}: output directory {} does not exist",
            path.display(),
            dir.display()
        ))
        .into());
    }
    if path.is_dir() {
        return Err(BadInput(format!("{}: is a directory", path.display())).into());
    }
    Ok(())
}

/// `rulka init`: a freshly initialised checkpoint (PyTorch-default init,
/// seeded; a Hugging Face backbone from its folder).
pub fn init(config: &Path, seed: u64, output: &Path) -> anyhow::Result<()> {
    let cfg = load_config(config)?;
    check_output(output)?;
    let net = ActorCritic::new_pretrained(&cfg, Device::Cpu, seed)
        .map_err(|e| BadInput(format!("{e:#}")))?;
    net.save(output, &cfg, 0).map_err(|e| BadInput(format!("{e:#}")))?;
    println!("wrote {} ({})", output.display(), net.arch().summary());
    Ok(())
}

/// Options of `rulka export`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Config file that shaped the network.
    #[arg(long, required_unless_present = "torch")]
    pub config: Option<PathBuf>,
    /// Checkpoint (.safetensors) to export.
    #[arg(long, required_unless_present = "torch")]
    pub checkpoint: Option<PathBuf>,
    /// Write the run directory's latest learner state as the original's save
    /// folder (weights1.torch, optimizer1.torch, scaler.torch,
    /// accumulated_stats.joblib) into OUTPUT instead of an ONNX model.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["config", "checkpoint", "check", "allow_partial", "weights"])]
    pub torch: Option<PathBuf>,
    /// Output ONNX file (with --torch: the save folder).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Run tch and ONNX Runtime on the same inputs; fail (exit 1, nothing written) above 1e-4.
    /// With int8/int4 weights: also the quantized policy's KL from the f32 one on
    /// simulator rollouts; fail above inference.quant_max_mean_kl.
    #[arg(long)]
    pub check: bool,
    /// Accept a checkpoint lacking some tensors (filled from a fresh initialisation).
    #[arg(long)]
    pub allow_partial: bool,
    /// Seed for the check's inputs and for partial fills.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Storage of the large matrix weights: fp32, int8 or int4 (default: the config's
    /// inference.weights).
    #[arg(long)]
    pub weights: Option<WeightFormat>,
    /// Observations recorded from simulator rollouts for the quantized check.
    #[arg(long, default_value_t = MIN_OBSERVATIONS)]
    pub observations: usize,
}

/// `rulka export`: checkpoint → ONNX, optionally proven equal to the tch network.
pub fn export(args: &ExportArgs, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    if let Some(run) = &args.torch {
        return crate::original_cmd::export_torch(run, &args.output);
    }
    let (Some(config), Some(checkpoint)) = (&args.config, &args.checkpoint) else {
        return Err(BadInput("pass --config and --checkpoint (or --torch RUN_DIR)".into()).into());
    };
    let mut cfg = load_config(config)?;
    if let Some(w) = args.weights {
        cfg.inference.weights = w;
    }
    check_output(&args.output)?;
    let weights = read_weights(&cfg, checkpoint, args.allow_partial, args.seed)?;
    let started = Instant::now();
    let onnx = rulka_export::export_onnx(&cfg, &weights).map_err(|e| BadInput(e.to_string()))?;
    let export_ms = started.elapsed().as_secs_f64() * 1e3;
    if args.check {
        let rt = rulka_inference::load_runtime(ort_lib)?;
        let quantized = cfg.inference.weights != WeightFormat::Fp32;
        let fp32_export;
        let fp32: &[u8] = if quantized {
            let mut c = cfg.clone();
            c.inference.weights = WeightFormat::Fp32;
            fp32_export =
                rulka_export::export_onnx(&c, &weights).map_err(|e| BadInput(e.to_string()))?;
            &fp32_export
        } else {
            &onnx
        };
        let report = check_parity(&cfg, &weights, fp32, rt, &[1, 17], args.seed)?;
        println!("parity check: tch (libtorch) vs ONNX Runtime {}", rt.library_path().display());
        println!("  {:<32} {:>5} {:>12} {:>12}", "inputs", "batch", "max|Δlogits|", "max|Δvalue|");
        for c in &report.cases {
            println!("  {:<32} {:>5} {:>12.3e} {:>12.3e}", c.case, c.batch, c.logits, c.value);
        }
        println!(
            "  max |Δlogits| = {:.3e}, max |Δvalue| = {:.3e} (tolerance {:.0e})",
            report.max_logits(),
            report.max_value(),
            TOLERANCE
        );
        if !report.passed() {
            anyhow::bail!("parity check failed: the exported model differs from the network by more than {:.0e}; nothing written", TOLERANCE);
        }
        if quantized {
            check_quantized(&cfg, &weights, fp32, &onnx, rt, args)?;
        }
    }
    write_atomic(&args.output, &onnx).map_err(|e| BadInput(e.to_string()))?;
    println!(
        "wrote {} ({:.2} MB, built in {:.1} ms) from {}",
        args.output.display(),
        onnx.len() as f64 / 1e6,
        export_ms,
        checkpoint.display()
    );
    Ok(())
}

/// The quantized model against the `f32` export: observations from
/// simulator rollouts of the checkpoint plus random and extreme inputs.
fn check_quantized(
    cfg: &Config,
    weights: &Weights,
    fp32: &[u8],
    quant: &[u8],
    rt: rulka_inference::Runtime,
    args: &ExportArgs,
) -> anyhow::Result<()> {
    let fmt = cfg.inference.weights.as_str();
    let arch = rulka_network::Architecture::from_config(cfg);
    if args.observations < MIN_OBSERVATIONS {
        return Err(BadInput(format!(
            "--observations {}: the quantized check needs at least {}",
            args.observations, MIN_OBSERVATIONS
        ))
        .into());
    }
    eprintln!(
        "recording {} observations from simulator rollouts of the f32 model",
        args.observations
    );
    let recorded = record_observations(cfg, rt, fp32, args.observations, args.seed)?;
    let (mean, std) =
        (&weights.tensors["float_inputs_mean"].data, &weights.tensors["float_inputs_std"].data);
    let synthetic = synthetic_observations(&arch, mean, std, 256, args.seed)?;
    let on_rollouts = compare_quantized(rt, &arch, fp32, quant, &recorded)?;
    let off_rollouts = compare_quantized(rt, &arch, fp32, quant, &synthetic)?;
    let bound = cfg.inference.quant_max_mean_kl;
    println!("quantized check: {fmt} vs f32");
    println!(
        "  {:<22} {:>5} {:>11} {:>11} {:>10} {:>11}",
        "observations", "head", "mean KL", "max KL", "agreement", "max|ΔV|"
    );
    for (label, r) in [
        (format!("{} from rollouts", on_rollouts.observations), &on_rollouts),
        (format!("{} random/extreme", off_rollouts.observations), &off_rollouts),
    ] {
        for (i, h) in r.heads.iter().enumerate() {
            println!(
                "  {label:<22} {i:>5} {:>11.3e} {:>11.3e} {:>10.4} {:>11.3e}",
                h.mean_kl, h.max_kl, h.agreement, r.max_dvalue
            );
        }
    }
    println!("  bound (on the rollouts): mean KL <= {bound:.0e} (inference.quant_max_mean_kl)");
    if !on_rollouts.passed(bound) {
        anyhow::bail!(
            "quantized check failed: mean KL {:.3e} on rollouts > inference.quant_max_mean_kl {bound:.0e}; nothing written",
            on_rollouts.mean_kl()
        );
    }
    Ok(())
}

fn read_weights(
    cfg: &Config,
    path: &Path,
    allow_partial: bool,
    seed: u64,
) -> anyhow::Result<Weights> {
    let weights = Weights::read(path).map_err(|e| BadInput(e.to_string()))?;
    let arch = rulka_network::Architecture::from_config(cfg);
    let origin = path.display().to_string();
    weights
        .check_named(&arch, &cfg.network_hash(), allow_partial, &origin)
        .map_err(|e| BadInput(e.to_string()))?;
    if !allow_partial {
        return Ok(weights);
    }
    let mut net = ActorCritic::new(cfg, Device::Cpu, seed);
    net.load_weights(&weights, cfg, true).map_err(|e| BadInput(format!("{origin}: {e:#}")))?;
    let missing = weights.mismatch(&arch).missing;
    if !missing.is_empty() {
        eprintln!(
            "warning: {origin}: {} tensors missing, filled from a fresh initialisation: {}",
            missing.len(),
            missing.join(", ")
        );
    }
    Ok(net.to_weights())
}
