//! TensorRT without an engine build per weight snapshot: one
//! weight-stripped engine per architecture, input shape and precision
//! ([`crate::engine_cache`]), built once by whichever process needs it
//! first and refit with each snapshot's weights when its session is made.
//!
//! ONNX Runtime's TensorRT provider builds weight-stripped engines with
//! TensorRT's `REFIT_IDENTICAL` flag, under which TensorRT does not promise
//! correct results for weights other than the build's. So a refit session
//! serves only after [`crate::gate`] has compared its outputs with the CPU
//! provider's on the same snapshot; one that fails is rejected (the serving
//! engine stays) and the engine falls back to a full build per snapshot.

use std::path::{Path, PathBuf};

use ort::session::Session;
use rulka_config::InferenceConfig;

use crate::engine_cache::{EngineCache, EngineTarget, SOURCE_MODEL};
use crate::providers::TrtRole;
use crate::{InferenceError, Runtime};

/// Where a session came from, for the engine's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A weight-stripped engine this process built (and cached).
    Built,
    /// A cached engine refit with the snapshot's weights.
    Refit,
}

/// The platform part of the cache key: the ONNX Runtime and TensorRT
/// libraries in use (resolved names carry their versions) and the GPU.
pub(crate) fn platform(icfg: &InferenceConfig) -> String {
    let resolved = |p: Option<PathBuf>| {
        p.and_then(|p| p.canonicalize().ok())
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "?".into())
    };
    let ort = resolved(crate::runtime::loaded_path().map(Path::to_path_buf));
    let trt = resolved(crate::native::find_in(&crate::native::library_dirs(), "libnvinfer.so.10"));
    EngineTarget::platform_of(&ort, &trt, &crate::native::gpu_facts().gpus, icfg.device_id)
}

/// A TensorRT session for `model` (the exported ONNX bytes) at `batch`:
/// a refit of the cached engine, or the engine's first build.
#[allow(clippy::too_many_arguments)]
pub(crate) fn session(
    rt: Runtime,
    icfg: &InferenceConfig,
    model: &[u8],
    version: u64,
    batch: usize,
    dims: (usize, usize, usize),
    graph: bool,
) -> Result<(Session, Origin), InferenceError> {
    let label = format!("snapshot v{version} (TensorRT)");
    let fail = |message: String| InferenceError::Session { model: label.clone(), message };
    let root =
        icfg.tensorrt_engine_cache_dir.clone().unwrap_or_else(crate::engine_cache::default_root);
    let target = EngineTarget { batch, fp16: icfg.tensorrt_fp16, platform: platform(icfg) };
    let cache = EngineCache::open(&root, model, &target).map_err(&fail)?;
    let staged = cache.stage(model, version).map_err(&fail)?;
    let unusable = |e: Failure| match e {
        Failure::Unavailable(reason) => {
            InferenceError::ProviderUnavailable { provider: "TensorRT".into(), reason }
        }
        Failure::Other(m) => fail(m),
    };
    if let Some(ctx) = cache.context_model() {
        match refit(rt, icfg, &ctx, staged.dir(), graph) {
            Ok(s) => return Ok((s, Origin::Refit)),
            Err(e @ Failure::Unavailable(_)) => return Err(unusable(e)),
            Err(Failure::Other(e)) => tracing::warn!(
                "[rulka inference] the cached TensorRT engine {} does not load ({e}); building it again",
                cache.dir().display()
            ),
        }
    }
    let _lock = cache.lock().map_err(&fail)?;
    // Another process may have built it while this one waited.
    if let Some(ctx) = cache.context_model() {
        if let Ok(s) = refit(rt, icfg, &ctx, staged.dir(), graph) {
            return Ok((s, Origin::Refit));
        }
        cache.discard_context_model();
    }
    let session = build(rt, icfg, &cache, staged.dir(), batch, dims, graph).map_err(unusable)?;
    Ok((session, Origin::Built))
}

/// Why a TensorRT session could not be made: the provider cannot be used
/// at all (a library, the driver), or this session failed.
#[derive(Debug)]
enum Failure {
    Unavailable(String),
    Other(String),
}

fn refit(
    rt: Runtime,
    icfg: &InferenceConfig,
    context_model: &[u8],
    snapshot: &Path,
    graph: bool,
) -> Result<Session, Failure> {
    let builder = base_builder(rt, icfg).map_err(Failure::Other)?;
    let mut builder =
        crate::providers::tensorrt(builder, icfg, graph, Some(TrtRole::Refit { folder: snapshot }))
            .map_err(|(_, m)| Failure::Unavailable(m))?;
    // From memory: ONNX Runtime then takes the refit folder as given (an
    // absolute path; for a model read from a file it insists on one
    // relative to the working directory), and the engine is embedded.
    builder.commit_from_memory(context_model).map_err(|e| Failure::Other(format!("refit: {e}")))
}

#[allow(clippy::too_many_arguments)]
fn build(
    rt: Runtime,
    icfg: &InferenceConfig,
    cache: &EngineCache,
    snapshot: &Path,
    batch: usize,
    dims: (usize, usize, usize),
    graph: bool,
) -> Result<Session, Failure> {
    let (h, w, f) = dims;
    let profile = format!(
        "{}:{batch}x1x{h}x{w},{}:{batch}x{f}",
        rulka_export::INPUT_IMAGE,
        rulka_export::INPUT_FLOATS
    );
    let work = cache.dir().join(format!("build-{}", std::process::id()));
    std::fs::create_dir_all(&work)
        .map_err(|e| Failure::Other(format!("creating {}: {e}", work.display())))?;
    let context_model = work.join(crate::engine_cache::CONTEXT_MODEL);
    let timing = icfg.tensorrt_timing_cache.then(|| cache.timing_dir());
    if let Some(t) = &timing {
        std::fs::create_dir_all(t)
            .map_err(|e| Failure::Other(format!("creating {}: {e}", t.display())))?;
    }
    let strays_before = refitted_engines_in_cwd();
    let t0 = std::time::Instant::now();
    let result = (|| {
        let builder = base_builder(rt, icfg).map_err(Failure::Other)?;
        let mut builder = crate::providers::tensorrt(
            builder,
            icfg,
            graph,
            Some(TrtRole::Build {
                profile,
                engine_dir: &work,
                timing_dir: timing.as_deref(),
                context_model: &context_model,
            }),
        )
        .map_err(|(_, m)| Failure::Unavailable(m))?;
        let session = builder
            .commit_from_file(snapshot.join(SOURCE_MODEL))
            .map_err(|e| Failure::Other(format!("building the engine: {e}")))?;
        cache.install_context_model(&context_model).map_err(Failure::Other)?;
        Ok(session)
    })();
    // ONNX Runtime also writes the refitted (full-weight) engine beside the
    // working directory; it is never read back (refits start from the
    // embedded stripped engine), so it goes.
    for stray in refitted_engines_in_cwd().difference(&strays_before) {
        let _ = std::fs::remove_file(stray);
    }
    let _ = std::fs::remove_dir_all(&work);
    if result.is_ok() {
        tracing::info!(
            "[rulka inference] built the TensorRT engine {} in {:.1} s (cached for every later snapshot, run and collector)",
            cache.dir().display(),
            t0.elapsed().as_secs_f64()
        );
    }
    result
}

fn refitted_engines_in_cwd() -> std::collections::BTreeSet<PathBuf> {
    let Ok(entries) = std::fs::read_dir(".") else { return Default::default() };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            n.starts_with("TensorrtExecutionProvider_")
                && n.ends_with(".engine")
                && !n.ends_with(".stripped.engine")
        })
        .collect()
}

fn base_builder(
    rt: Runtime,
    icfg: &InferenceConfig,
) -> Result<ort::session::builder::SessionBuilder, String> {
    Session::builder(rt.environment())
        .and_then(|b| {
            b.with_intra_threads(icfg.intra_op_threads.max(1) as usize).map_err(Into::into)
        })
        .map_err(|e| e.to_string())
}
