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
//! let rt = rulka_inference::runtime::load(None)?;
//! let report = rulka_torch::parity::check(&cfg, &weights, &onnx, rt, &[1, 17], 0)?;
//! assert!(report.passed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod parity;
pub mod quant_check;
