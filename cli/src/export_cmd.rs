//! `rulka init` and `rulka export`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rulka_checkpoint::{write_atomic, Weights};
use rulka_cli::parity;
use rulka_config::Config;
use rulka_learner::ActorCritic;
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
#[derive(Debug)]
pub struct ExportArgs {
    /// Config file.
    pub config: PathBuf,
    /// Checkpoint to export.
    pub checkpoint: PathBuf,
    /// ONNX output.
    pub output: PathBuf,
    /// Run the parity check before writing.
    pub check: bool,
    /// Fill tensors the checkpoint lacks from a fresh (seeded) initialisation.
    pub allow_partial: bool,
    /// Seed for the parity inputs and partial fills.
    pub seed: u64,
}

/// `rulka export`: checkpoint → ONNX, optionally proven equal to the tch network.
pub fn export(args: &ExportArgs, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    let cfg = load_config(&args.config)?;
    check_output(&args.output)?;
    let weights = read_weights(&cfg, &args.checkpoint, args.allow_partial, args.seed)?;
    let started = Instant::now();
    let onnx = rulka_export::export_onnx(&cfg, &weights).map_err(|e| BadInput(e.to_string()))?;
    let export_ms = started.elapsed().as_secs_f64() * 1e3;
    if args.check {
        let rt = rulka_inference::runtime::load(ort_lib)?;
        let report = parity::check(&cfg, &weights, &onnx, rt, &[1, 17], args.seed)?;
        println!("parity check: tch (libtorch) vs ONNX Runtime {}", rt.library_path().display());
        println!("  {:<32} {:>5} {:>12} {:>12}", "inputs", "batch", "max|Δlogits|", "max|Δvalue|");
        for c in &report.cases {
            println!("  {:<32} {:>5} {:>12.3e} {:>12.3e}", c.case, c.batch, c.logits, c.value);
        }
        println!(
            "  max |Δlogits| = {:.3e}, max |Δvalue| = {:.3e} (tolerance {:.0e})",
            report.max_logits(),
            report.max_value(),
            parity::TOLERANCE
        );
        if !report.passed() {
            anyhow::bail!("parity check failed: the exported model differs from the network by more than {:.0e}; nothing written", parity::TOLERANCE);
        }
    }
    write_atomic(&args.output, &onnx).map_err(|e| BadInput(e.to_string()))?;
    println!(
        "wrote {} ({:.2} MB, built in {:.1} ms) from {}",
        args.output.display(),
        onnx.len() as f64 / 1e6,
        export_ms,
        args.checkpoint.display()
    );
    Ok(())
}

fn read_weights(
    cfg: &Config,
    path: &Path,
    allow_partial: bool,
    seed: u64,
) -> anyhow::Result<Weights> {
    let weights = Weights::read(path).map_err(|e| BadInput(e.to_string()))?;
    let arch = rulka_config::arch::Architecture::from_config(cfg);
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
