//! Execution providers beyond CPU, each behind a cargo feature. ONNX Runtime
//! loads a provider's library when the session is built; a missing library
//! is an error here (`error_on_failure`), never a silent CPU fallback.

use ort::session::builder::SessionBuilder;
use rulka_config::{InferenceConfig, Provider};

/// Registers `icfg.provider` on `builder`; on failure returns the builder
/// back with the reason, so the caller can fall back to CPU if configured to.
#[allow(clippy::result_large_err)]
pub fn register(
    builder: SessionBuilder,
    icfg: &InferenceConfig,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    match icfg.provider {
        Provider::Cpu => Ok(builder),
        Provider::Cuda => cuda(builder, icfg),
        Provider::Tensorrt => tensorrt(builder, icfg),
    }
}

#[cfg(feature = "cuda")]
#[allow(clippy::result_large_err)]
fn cuda(
    builder: SessionBuilder,
    icfg: &InferenceConfig,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    let ep =
        ort::ep::CUDA::default().with_device_id(icfg.device_id as i32).build().error_on_failure();
    builder.with_execution_providers([ep]).map_err(|e| {
        let msg = format!("CUDA execution provider: {e} (needs the onnxruntime-gpu provider library with CUDA 13 and cuDNN 9)");
        (e.recover(), msg)
    })
}

#[cfg(not(feature = "cuda"))]
#[allow(clippy::result_large_err)]
fn cuda(
    builder: SessionBuilder,
    _: &InferenceConfig,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    Err((builder, "this rulka was built without the `cuda` cargo feature".into()))
}

#[cfg(feature = "tensorrt")]
#[allow(clippy::result_large_err)]
fn tensorrt(
    builder: SessionBuilder,
    icfg: &InferenceConfig,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    let mut ep = ort::ep::TensorRT::default()
        .with_device_id(icfg.device_id as i32)
        .with_fp16(icfg.tensorrt_fp16)
        .with_timing_cache(icfg.tensorrt_timing_cache);
    if let Some(dir) = &icfg.tensorrt_engine_cache_dir {
        ep = ep.with_engine_cache(true).with_engine_cache_path(dir.display());
    }
    builder.with_execution_providers([ep.build().error_on_failure()]).map_err(|e| {
        let msg = format!("TensorRT execution provider: {e} (needs the onnxruntime-gpu provider library and TensorRT 10)");
        (e.recover(), msg)
    })
}

#[cfg(not(feature = "tensorrt"))]
#[allow(clippy::result_large_err)]
fn tensorrt(
    builder: SessionBuilder,
    _: &InferenceConfig,
) -> Result<SessionBuilder, (SessionBuilder, String)> {
    Err((builder, "this rulka was built without the `tensorrt` cargo feature".into()))
}
