//! rulka's policy engine: ONNX Runtime, loaded at run time, running exported
//! actor-critic models ([`PolicyEngine`]: sampling, guards, weight hot-swap
//! from any [`rulka_transport::WeightSource`]) for collectors (the crate
//! `rulka-collector` drives environments with it).
//!
//! ONNX Runtime is a shared library (`libonnxruntime.so` on Linux,
//! `onnxruntime.dll` on Windows; 1.31) loaded once per process by
//! [`load_runtime`]; `scripts/setup.sh` puts one in `.onnxruntime/` where
//! binaries built in this workspace find it without any setting, and the
//! collector's packages put it next to the binary. [`run_policy`] judges an
//! exported policy on simulator tracks against the scripted autopilot
//! (`rulka eval`, the trainer's held-out evaluation).
//!
//! ```no_run
//! use rulka_inference::{Model, ModelSource};
//!
//! let rt = rulka_inference::load_runtime(None)?; // finds .onnxruntime/ or $ORT_DYLIB_PATH
//! let mut model = Model::open(rt, ModelSource::File("model.onnx".into()), 1)?;
//! println!("inputs: {:?}", model.input_names());
//! let y = model.run_f32(&[("x", &[1, 4], &[1.0, 2.0, 3.0, 4.0])], "y")?;
//! println!("{y:?}");
//! # Ok::<(), rulka_inference::InferenceError>(())
//! ```

mod engine;
#[cfg(unix)]
pub mod engine_cache;
mod evaluate;
pub mod gate;
pub mod native;
mod providers;
mod runtime;
#[cfg(all(unix, feature = "tensorrt"))]
mod tensorrt;

use std::path::PathBuf;

use ort::session::Session;
use ort::value::TensorRef;

pub use engine::{
    build_session, sample_action, Action, EngineOptions, EngineStats, PolicyEngine, MAX_HEADS,
};
pub use evaluate::{
    check_network, drive_episode, episode_seed, quantile, run_autopilot, run_autopilot_observed,
    run_autopilot_traced, run_episode, run_episode_observed, run_policy, spread, summarize,
    Episode, EvalError, EvalSummary, Job, Spread, Trace,
};
pub use runtime::{load_runtime, loaded_path, locate_runtime, Runtime, DYLIB_ENV, LIBRARY_NAME};

/// Errors at the inference boundary. Callers can match on every variant.
#[derive(Debug, thiserror::Error)]
pub enum InferenceError {
    /// No ONNX Runtime library was found in any default location.
    #[error(
        "ONNX Runtime library not found; looked for {}. Put {} there (rulka-collector's package has it beside the binary), run scripts/setup.sh (Linux), or pass --ort-lib PATH / set ORT_DYLIB_PATH",
        searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
        runtime::LIBRARY_NAME
    )]
    RuntimeNotFound {
        /// Every path that was tried.
        searched: Vec<PathBuf>,
    },
    /// The named library could not be loaded (missing, wrong version, not a library).
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    RuntimeLoad {
        /// The library file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A different ONNX Runtime library is already loaded in this process.
    #[error("ONNX Runtime is already loaded from {loaded}; cannot also load {requested}")]
    RuntimeConflict {
        /// The library in use.
        loaded: PathBuf,
        /// The one asked for.
        requested: PathBuf,
    },
    /// A session could not be created from the model.
    #[error("model {model}: {message}")]
    Session {
        /// File path or `<memory>`.
        model: String,
        /// Why.
        message: String,
    },
    /// The model's inputs or outputs are not what the caller expects.
    #[error("model {model}: {message}")]
    ModelMismatch {
        /// File path or `<memory>`.
        model: String,
        /// What differs.
        message: String,
    },
    /// The configured execution provider cannot be used (and `fallback` is not `cpu`).
    #[error("execution provider {provider} is unavailable: {reason}")]
    ProviderUnavailable {
        /// `Cuda` or `Tensorrt`.
        provider: String,
        /// Why.
        reason: String,
    },
    /// The model produced NaN or infinity; nothing was sampled.
    #[error("model {model}: non-finite {output} at index {index}; refusing to sample")]
    NonFinite {
        /// File path or `<memory>`.
        model: String,
        /// `logits` or `value`.
        output: &'static str,
        /// Flat index of the first bad value.
        index: usize,
    },
    /// Running the model failed.
    #[error("model {model}: inference failed: {message}")]
    Run {
        /// File path or `<memory>`.
        model: String,
        /// Why.
        message: String,
    },
}

impl InferenceError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::RuntimeNotFound { .. }
            | Self::RuntimeLoad { .. }
            | Self::ModelMismatch { .. }
            | Self::ProviderUnavailable { .. } => K::BadInput,
            Self::NonFinite { .. } => K::Corrupt,
            Self::RuntimeConflict { .. } | Self::Session { .. } | Self::Run { .. } => K::Failed,
        }
    }
}

/// Where a model comes from.
#[derive(Debug, Clone)]
pub enum ModelSource {
    /// An `.onnx` file.
    File(PathBuf),
    /// ONNX bytes in memory (e.g. built from a weight snapshot).
    Bytes(Vec<u8>),
}

impl ModelSource {
    /// File path or `<memory>`, for messages.
    pub fn label(&self) -> String {
        match self {
            ModelSource::File(p) => p.display().to_string(),
            ModelSource::Bytes(_) => "<memory>".to_string(),
        }
    }
}

/// An ONNX model loaded in an ONNX Runtime CPU session.
#[derive(Debug)]
pub struct Model {
    session: Session,
    label: String,
}

impl Model {
    /// Creates a CPU session with `intra_op_threads` threads (≥ 1).
    pub fn open(
        rt: Runtime,
        source: ModelSource,
        intra_op_threads: usize,
    ) -> Result<Self, InferenceError> {
        let label = source.label();
        let icfg = rulka_config::InferenceConfig {
            intra_op_threads: intra_op_threads.max(1) as u32,
            ..Default::default()
        };
        let session = engine::build_session(rt, &icfg, &source)?;
        Ok(Self { session, label })
    }

    /// The model's input names, in graph order.
    pub fn input_names(&self) -> Vec<String> {
        self.session.inputs().iter().map(|o| o.name().to_string()).collect()
    }

    /// The model's output names, in graph order.
    pub fn output_names(&self) -> Vec<String> {
        self.session.outputs().iter().map(|o| o.name().to_string()).collect()
    }

    /// Where the model came from (file path or `<memory>`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The underlying ONNX Runtime session (for callers that bind their own tensors).
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Runs an exported actor-critic (see `rulka_export`): `image` is
    /// `[batch, 1, H, W]` raw pixels (a float-only model accepts any H, W,
    /// e.g. `[batch, 1, 1, 1]`), `floats` is `[batch, F]`. Returns
    /// `(logits, value)` flattened (`[batch, 12·N]` and `[batch, 1]`).
    pub fn run_actor_critic(
        &mut self,
        image_shape: [usize; 4],
        image: &[u8],
        float_shape: [usize; 2],
        floats: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>), InferenceError> {
        let label = self.label.clone();
        let run_err = |message: String| InferenceError::Run { model: label.clone(), message };
        if image_shape.iter().product::<usize>() != image.len() {
            return Err(run_err(format!(
                "image: shape {image_shape:?} needs {} bytes, got {}",
                image_shape.iter().product::<usize>(),
                image.len()
            )));
        }
        if float_shape.iter().product::<usize>() != floats.len() {
            return Err(run_err(format!(
                "floats: shape {float_shape:?} needs {} values, got {}",
                float_shape.iter().product::<usize>(),
                floats.len()
            )));
        }
        let image_t = TensorRef::from_array_view((image_shape.to_vec(), image))
            .map_err(|e| run_err(format!("image: {e}")))?;
        let floats_t = TensorRef::from_array_view((float_shape.to_vec(), floats))
            .map_err(|e| run_err(format!("floats: {e}")))?;
        let outputs = self
            .session
            .run(ort::inputs![rulka_export::INPUT_IMAGE => image_t, rulka_export::INPUT_FLOATS => floats_t])
            .map_err(|e| run_err(e.to_string()))?;
        let take = |name: &str| -> Result<Vec<f32>, InferenceError> {
            let v = outputs
                .get(name)
                .ok_or_else(|| run_err(format!("the model has no output named {name}")))?;
            let (_, data) = v
                .try_extract_tensor::<f32>()
                .map_err(|e| run_err(format!("output {name}: {e}")))?;
            Ok(data.to_vec())
        };
        let logits = take(rulka_export::OUTPUT_LOGITS)?;
        let value = take(rulka_export::OUTPUT_VALUE)?;
        Ok((logits, value))
    }

    /// Runs the model on `f32` inputs `(name, shape, data)` and returns the
    /// named `f32` output, flattened, with its shape.
    pub fn run_f32(
        &mut self,
        inputs: &[(&str, &[usize], &[f32])],
        output: &str,
    ) -> Result<(Vec<usize>, Vec<f32>), InferenceError> {
        let label = self.label.clone();
        let run_err = |message: String| InferenceError::Run { model: label.clone(), message };
        let mut values = Vec::with_capacity(inputs.len());
        for (name, shape, data) in inputs {
            let expected: usize = shape.iter().product();
            if expected != data.len() {
                return Err(run_err(format!(
                    "input {name}: shape {shape:?} needs {expected} values, got {}",
                    data.len()
                )));
            }
            let tensor = TensorRef::from_array_view((shape.to_vec(), *data))
                .map_err(|e| run_err(format!("input {name}: {e}")))?;
            values.push((name.to_string(), tensor));
        }
        let outputs = self.session.run(values).map_err(|e| run_err(e.to_string()))?;
        let value = outputs
            .get(output)
            .ok_or_else(|| run_err(format!("the model has no output named {output}")))?;
        let (shape, data) = value
            .try_extract_tensor::<f32>()
            .map_err(|e| run_err(format!("output {output}: {e}")))?;
        let shape = shape.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect();
        Ok((shape, data.to_vec()))
    }
}
