//! Library side of `rulka-torch` (the commands `rulka` hands over because
//! they use libtorch): pieces built from both the learner (tch) and
//! inference (ONNX Runtime), exposed so integration tests can use them.
//!
//! ```no_run
//! use rulka_checkpoint::Weights;
//! use rulka_config::Config;
//!
//! let cfg = Config::from_file("configs/grpo.yaml")?;
//! let weights = Weights::read("init.safetensors".as_ref())?;
//! let onnx = rulka_export::export_onnx(&cfg, &weights)?;
//! let rt = rulka_inference::load_runtime(None)?;
//! let report = rulka_torch::check_parity(&cfg, &weights, &onnx, rt, &[1, 17], 0)?;
//! assert!(report.passed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod parity;
mod quant_check;

pub use parity::{check_parity, CaseResult, ParityReport, TOLERANCE};
pub use quant_check::{
    compare_quantized, kl_divergence, record_observations, synthetic_observations, HeadStats,
    Observations, QuantReport, MIN_OBSERVATIONS, SYNTHETIC_CASES,
};
