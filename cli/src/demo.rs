//! `rulka demo`: the pipeline end to end, as far as it exists.

use std::path::Path;

use anyhow::Context as _;

use crate::load_config;

/// Loads and validates the config, loads ONNX Runtime, and reports both.
pub fn run(config: &Path, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    let cfg = load_config(config)?;
    println!(
        "[1/2] config {}: algorithm {:?}, image {}x{}, float_input_dim {}, network {}",
        config.display(),
        cfg.training.algorithm,
        cfg.nn.image_width,
        cfg.nn.image_height,
        cfg.float_input_dim(),
        cfg.network_hash()
    );
    let rt = rulka_inference::runtime::load(ort_lib).context("loading ONNX Runtime")?;
    println!("[2/2] ONNX Runtime loaded from {}", rt.library_path().display());
    Ok(())
}
