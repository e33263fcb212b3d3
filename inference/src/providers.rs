//! Execution providers beyond CPU, each behind a cargo feature. ONNX Runtime
//! loads a provider's library when the session is built; a missing library
//! is an error here (`error_on_failure`), never a silent CPU fallback.
//! Before a GPU provider registers, its CUDA (and TensorRT) libraries are
//! loaded from the folders `scripts/setup.sh --gpu` fills
//! ([`crate::native::preload`]), so no `LD_LIBRARY_PATH` is needed.

use ort::session::builder::SessionBuilder;
use rulka_config::{InferenceConfig, Provider};

/// Registers `icfg.provider` on `builder`; on failure returns the builder
/// back with the reason (what is missing and its fix), so the caller can
/// fall back to CPU if configured to. `graph`: ask for CUDA graphs.
/// TensorRT registered here builds a full engine for every session and
/// caches nothing (see [`crate::tensorrt`] for the weight-stripped engine
/// that is refit per snapshot).
#[allow(clippy::result_large_err)]
pub fn register(
    builder: SessionBuilder,
    icfg: &InferenceConfig,
    graph: bool,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    if icfg.provider == Provider::Cpu {
        return Ok(builder);
    }
    if let Err(m) = crate::native::preload(icfg.provider) {
        return Err((builder, m.to_string()));
    }
    match icfg.provider {
        Provider::Cpu => Ok(builder),
        Provider::Cuda => cuda(builder, icfg, graph),
        Provider::Tensorrt => tensorrt(builder, icfg, graph, None),
    }
}

/// The reason a provider failed, as [`crate::native::diagnose`] reads
/// ONNX Runtime's message.
#[cfg(any(feature = "cuda", feature = "tensorrt"))]
fn diagnosed(provider: Provider, e: &impl std::fmt::Display) -> String {
    crate::native::diagnose(provider, &e.to_string()).to_string()
}

#[cfg(feature = "cuda")]
#[allow(clippy::result_large_err)]
fn cuda(
    builder: SessionBuilder,
    icfg: &InferenceConfig,
    graph: bool,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    use ort::ep::cuda::ConvAlgorithmSearch as S;
    let search = match icfg.cuda_conv_search {
        rulka_config::CudaConvSearch::Heuristic => S::Heuristic,
        rulka_config::CudaConvSearch::Exhaustive => S::Exhaustive,
        rulka_config::CudaConvSearch::Default => S::Default,
    };
    let ep = ort::ep::CUDA::default()
        .with_device_id(icfg.device_id as i32)
        .with_cuda_graph(graph)
        .with_conv_algorithm_search(search)
        // Parity with the learner and the CPU engine: TF32 keeps ~3 digits.
        .with_tf32(false)
        .build()
        .error_on_failure();
    builder.with_execution_providers([ep]).map_err(|e| {
        let msg = diagnosed(Provider::Cuda, &e);
        (e.recover(), msg)
    })
}

#[cfg(not(feature = "cuda"))]
#[allow(clippy::result_large_err)]
fn cuda(
    builder: SessionBuilder,
    _: &InferenceConfig,
    _: bool,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    Err((builder, not_built("cuda")))
}

/// What a TensorRT session is for: a plain build, the build that dumps the
/// weight-stripped engine as an EP-context model, or a refit of one.
#[cfg(feature = "tensorrt")]
#[derive(Debug)]
pub(crate) enum TrtRole<'a> {
    /// Build the weight-stripped engine for `profile` (inputs' min = opt =
    /// max shapes) with the engine and timing caches in `cache`, and write
    /// the EP-context model (engine embedded) to `context_model`.
    Build {
        profile: String,
        engine_dir: &'a std::path::Path,
        timing_dir: Option<&'a std::path::Path>,
        context_model: &'a std::path::Path,
    },
    /// Refit the engine of the EP-context model this session is built from
    /// with the weights of `folder`/policy.onnx.
    Refit { folder: &'a std::path::Path },
}

#[cfg(feature = "tensorrt")]
#[allow(clippy::result_large_err)]
pub(crate) fn tensorrt(
    builder: SessionBuilder,
    icfg: &InferenceConfig,
    graph: bool,
    role: Option<TrtRole<'_>>,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    let path = |p: &std::path::Path| p.display().to_string();
    let mut ep = ort::ep::TensorRT::default()
        .with_device_id(icfg.device_id as i32)
        .with_fp16(icfg.tensorrt_fp16)
        .with_cuda_graph(graph);
    match role {
        None => {}
        Some(TrtRole::Build { profile, engine_dir, timing_dir, context_model }) => {
            ep = ep
                .with_weight_stripped_engine(true)
                .with_engine_cache(true)
                .with_engine_cache_path(path(engine_dir))
                .with_dump_ep_context_model(true)
                .with_ep_context_file_path(path(context_model))
                .with_ep_context_embed_mode(1)
                .with_profile_min_shapes(&profile)
                .with_profile_opt_shapes(&profile)
                .with_profile_max_shapes(&profile);
            if let Some(t) = timing_dir {
                ep = ep.with_timing_cache(true).with_timing_cache_path(path(t));
            }
        }
        Some(TrtRole::Refit { folder }) => {
            ep = ep.with_weight_stripped_engine(true).with_onnx_model_folder_path(path(folder));
        }
    }
    builder.with_execution_providers([ep.build().error_on_failure()]).map_err(|e| {
        let msg = diagnosed(Provider::Tensorrt, &e);
        (e.recover(), msg)
    })
}

#[cfg(not(feature = "tensorrt"))]
#[allow(clippy::result_large_err)]
fn tensorrt(
    builder: SessionBuilder,
    _: &InferenceConfig,
    _: bool,
    _: Option<()>,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    Err((builder, not_built("tensorrt")))
}

#[cfg(not(all(feature = "cuda", feature = "tensorrt")))]
fn not_built(feature: &str) -> String {
    format!(
        "this rulka was built without the `{feature}` cargo feature (fix: scripts/rulka --build={feature})"
    )
}
