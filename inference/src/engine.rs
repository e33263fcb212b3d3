//! The policy engine: exported actor-critic on ONNX Runtime → sampled actions.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ort::session::{IoBinding, Session};
use ort::value::Tensor;
use rulka_config::{Config, Fallback, InferenceConfig, Provider};
use rulka_network::Architecture;
#[cfg(unix)]
use rulka_shm::BoardReader;
use rulka_shm::{AtomicU64, Ordering};
#[cfg(unix)]
use rulka_transport::ShmWeightSource;
use rulka_transport::WeightSource;

use crate::{InferenceError, ModelSource, Runtime};

/// Most action heads an [`Action`] carries.
pub const MAX_HEADS: usize = 16;

/// One decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Action {
    actions: [u8; MAX_HEADS],
    n_heads: u8,
    /// `log π(a|s)` summed over heads.
    pub log_prob: f32,
    /// `V(s)`.
    pub value: f32,
    /// Version of the policy that produced it (for policy-lag accounting).
    pub policy_version: u64,
}

impl Action {
    /// The action index (0..12) of each head.
    pub fn actions(&self) -> &[u8] {
        &self.actions[..self.n_heads as usize]
    }
}

/// How the engine samples.
#[derive(Debug, Clone, Copy)]
pub struct EngineOptions {
    /// Take the most likely action of each head (evaluation runs).
    pub greedy: bool,
    /// Seed of this engine's RNG (one per collector, for reproducibility).
    pub seed: u64,
}

/// Counters of an engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Calls refused because the model produced NaN/inf.
    pub non_finite: u64,
    /// Snapshots swapped in.
    pub swaps: u64,
    /// Snapshots rejected (the old session kept serving).
    pub rejected: u64,
    /// Why the last snapshot was rejected.
    pub last_rejection: Option<String>,
    /// Microseconds from the follower seeing the last swapped-in snapshot
    /// to the first decision made with it (building its session included).
    pub last_swap_us: Option<u64>,
    /// Microseconds of that swap spent preparing the snapshot (its export,
    /// session build or TensorRT refit, and warm-up): at most `last_swap_us`,
    /// the rest being the wait for the sampling thread's next call.
    pub last_prepare_us: Option<u64>,
    /// The longest such time so far.
    pub max_swap_us: u64,
    /// TensorRT: sessions made by refitting the cached engine.
    pub refits: u64,
    /// TensorRT: engines built (the first of an architecture, or each
    /// snapshot's when refitting is off or failed its check).
    pub engine_builds: u64,
    /// Whether the serving session replays a CUDA graph.
    pub cuda_graph: bool,
}

/// xoshiro256** seeded through SplitMix64: small, fast, reproducible.
#[derive(Debug, Clone)]
struct Rng([u64; 4]);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Self([next(), next(), next(), next()])
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Pinned host buffers bound to a GPU session's inputs and outputs: a
/// decision copies its inputs in and its outputs out once each.
struct GpuBuffers {
    image: Tensor<u8>,
    floats: Tensor<f32>,
    logits: Tensor<f32>,
    value: Tensor<f32>,
    batch: usize,
    /// The batch cannot change: a CUDA graph was captured at it, or
    /// TensorRT's engine was built for it.
    fixed: bool,
}

/// A serving session; on a GPU provider with its pinned buffers. The
/// buffers are declared first so that they drop before the session.
struct Served {
    buffers: Option<GpuBuffers>,
    session: Session,
    graph: bool,
}

struct Prepared {
    served: Served,
    version: u64,
    seen: Instant,
    /// How long preparing it took (part of the swap time from `seen`).
    prepare_us: u64,
}

#[derive(Default)]
struct SwapShared {
    ready: Mutex<Option<Prepared>>,
    swaps: AtomicU64,
    ready_generation: AtomicU64,
    stop: AtomicU64,
    stats: Mutex<EngineStats>,
}

impl SwapShared {
    fn count(&self, f: impl FnOnce(&mut EngineStats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }
}

/// Turns frames + floats into sampled actions with an exported model, and
/// (optionally) follows a weight board, swapping in newer policies between
/// calls without ever waiting for a rebuild.
pub struct PolicyEngine {
    rt: Runtime,
    icfg: InferenceConfig,
    served: Served,
    binding: Option<IoBinding>,
    /// The swap to time at the next decision: (seen, prepare_us).
    swap_pending: Option<(Instant, u64)>,
    label: String,
    version: u64,
    n_heads: usize,
    n_actions: usize,
    height: usize,
    width: usize,
    float_dim: usize,
    batch: usize,
    image: Tensor<u8>,
    floats: Tensor<f32>,
    rng: Rng,
    greedy: bool,
    non_finite: u64,
    shared: Arc<SwapShared>,
    seen_generation: u64,
    follower: Option<JoinHandle<()>>,
    retire: std::sync::mpsc::Sender<Served>,
    graveyard: Vec<Served>,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("model", &self.label)
            .field("version", &self.version)
            .finish()
    }
}

fn session_err(label: &str) -> impl Fn(ort::Error) -> InferenceError + '_ {
    move |e| InferenceError::Session { model: label.to_string(), message: e.to_string() }
}

/// Builds a session for `icfg`'s execution provider. A provider that
/// cannot be used is [`InferenceError::ProviderUnavailable`], naming what
/// is missing and the command that installs it, unless `fallback: cpu`.
/// On TensorRT this is a full engine build, cached nowhere (the engine
/// itself refits weight snapshots instead).
pub fn build_session(
    rt: Runtime,
    icfg: &InferenceConfig,
    source: &ModelSource,
) -> Result<Session, InferenceError> {
    build_session_with(rt, icfg, source, false)
}

fn build_session_with(
    rt: Runtime,
    icfg: &InferenceConfig,
    source: &ModelSource,
    graph: bool,
) -> Result<Session, InferenceError> {
    let label = source.label();
    let err = session_err(&label);
    let mut builder = Session::builder(rt.environment())
        .map_err(&err)?
        .with_intra_threads(icfg.intra_op_threads.max(1) as usize)
        .map_err(|e| err(e.into()))?;
    let mut on_gpu = false;
    match icfg.provider {
        Provider::Cpu => {}
        Provider::Cuda | Provider::Tensorrt => {
            match crate::providers::register(builder, icfg, graph) {
                Ok(b) => {
                    builder = b;
                    on_gpu = true;
                }
                Err((b, reason)) => {
                    if icfg.fallback == Fallback::Cpu {
                        tracing::warn!("[rulka inference] {:?} unavailable ({reason}); falling back to CPU as configured", icfg.provider);
                        builder = b;
                    } else {
                        return Err(unavailable(icfg.provider, reason));
                    }
                }
            }
        }
    }
    let committed = match source {
        ModelSource::File(p) => {
            if !p.is_file() {
                return Err(InferenceError::Session {
                    model: label.clone(),
                    message: "no such file".into(),
                });
            }
            builder.commit_from_file(p)
        }
        ModelSource::Bytes(b) => builder.commit_from_memory(b),
    };
    // A GPU provider that registered can still fail when the session
    // starts (no device, a library it opens late): say what is missing.
    committed.map_err(|e| {
        if on_gpu && icfg.fallback != Fallback::Cpu {
            let m = crate::native::diagnose(icfg.provider, &e.to_string());
            if m.fix != "rulka gpu check" {
                return unavailable(icfg.provider, m.to_string());
            }
        }
        err(e)
    })
}

fn unavailable(provider: Provider, reason: String) -> InferenceError {
    InferenceError::ProviderUnavailable {
        provider: crate::native::provider_name(provider).to_string(),
        reason,
    }
}

/// Pinned host buffers for a GPU session at `batch`.
fn gpu_buffers(
    session: &Session,
    icfg: &InferenceConfig,
    batch: usize,
    dims: (usize, usize, usize, usize),
    fixed: bool,
) -> Result<GpuBuffers, ort::Error> {
    use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
    let (h, w, f, n_logits) = dims;
    let pinned = |kind| {
        MemoryInfo::new(
            AllocationDevice::CUDA_PINNED,
            icfg.device_id as i32,
            AllocatorType::Device,
            kind,
        )
        .and_then(|info| Allocator::new(session, info))
    };
    let (input, output) = (pinned(MemoryType::CPUInput)?, pinned(MemoryType::CPUOutput)?);
    let mut image = Tensor::<u8>::new(&input, [batch, 1, h, w])?;
    image.try_extract_tensor_mut::<u8>()?.1.fill(0);
    let mut floats = Tensor::<f32>::new(&input, [batch, f])?;
    floats.try_extract_tensor_mut::<f32>()?.1.fill(0.0);
    Ok(GpuBuffers {
        image,
        floats,
        logits: Tensor::<f32>::new(&output, [batch, n_logits])?,
        value: Tensor::<f32>::new(&output, [batch, 1])?,
        batch,
        fixed,
    })
}

/// Binds `session`'s inputs and outputs to `b` (made on the thread that
/// runs it: a binding cannot move between threads).
fn bind(session: &Session, b: &mut GpuBuffers) -> Result<IoBinding, ort::Error> {
    let mut binding = session.create_binding()?;
    binding.bind_input(rulka_export::INPUT_IMAGE, &b.image)?;
    binding.bind_input(rulka_export::INPUT_FLOATS, &b.floats)?;
    binding.bind_output(rulka_export::OUTPUT_LOGITS, &mut b.logits)?;
    binding.bind_output(rulka_export::OUTPUT_VALUE, &mut b.value)?;
    Ok(binding)
}

/// Runs a fresh session a few times (a CUDA graph is captured on its first
/// runs, cuDNN picks its algorithms) through the binding it will serve with.
fn warm_up(served: &mut Served) -> Result<(), String> {
    match served.buffers.as_mut() {
        None => Ok(()),
        Some(b) => {
            let binding = bind(&served.session, b).map_err(|e| format!("binding: {e}"))?;
            for _ in 0..3 {
                served
                    .session
                    .run_binding(&binding)
                    .map_err(|e| format!("warm-up run failed: {e}"))?;
            }
            Ok(())
        }
    }
}

/// What building a served session did (for the engine's counters).
#[derive(Debug, Clone, Copy, Default)]
struct Built {
    refit: bool,
    engine_build: bool,
    /// TensorRT refitting was tried and failed; the engine was built whole.
    refit_failed: bool,
}

/// A served session for `source` on `icfg`'s provider, warmed up: on the
/// CPU the session alone; on a GPU with pinned buffers at `batch` and a
/// CUDA graph when asked for and possible (else without, logged); on
/// TensorRT with refitting, a refit of the cached engine that passed the
/// parity gate.
fn serve(
    rt: Runtime,
    icfg: &InferenceConfig,
    cfg: &Config,
    source: &ModelSource,
    version: u64,
    batch: usize,
) -> Result<(Served, Built), InferenceError> {
    let arch = Architecture::from_config(cfg);
    let (h, w) = arch.image.as_ref().map_or((1, 1), |i| (i.height, i.width));
    let dims = (h, w, arch.float_dim, arch.n_logits());
    let label = source.label();
    let gpu = icfg.provider != Provider::Cpu;
    if !gpu {
        let session = build_session(rt, icfg, source)?;
        return Ok((Served { buffers: None, session, graph: false }, Built::default()));
    }
    #[cfg(all(unix, feature = "tensorrt"))]
    let refit_failed = if icfg.provider == Provider::Tensorrt && icfg.tensorrt_refit {
        match serve_refit(rt, icfg, cfg, source, version, batch, dims) {
            Ok(done) => return Ok(done),
            Err(InferenceError::ProviderUnavailable { reason, .. })
                if icfg.fallback == Fallback::Cpu =>
            {
                tracing::warn!("[rulka inference] Tensorrt unavailable ({reason}); falling back to CPU as configured");
                let cpu = InferenceConfig { provider: Provider::Cpu, ..icfg.clone() };
                let session = build_session(rt, &cpu, source)?;
                return Ok((Served { buffers: None, session, graph: false }, Built::default()));
            }
            Err(e @ InferenceError::ProviderUnavailable { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!("[rulka inference] TensorRT refit of v{version}: {e}; building a whole engine for it instead");
                true
            }
        }
    } else {
        false
    };
    #[cfg(not(all(unix, feature = "tensorrt")))]
    let refit_failed = {
        let _ = (version, cfg);
        false
    };
    let mut graph = icfg.cuda_graph;
    loop {
        let attempt = (|| -> Result<Served, InferenceError> {
            let session = build_session_with(rt, icfg, source, graph)?;
            if icfg.fallback == Fallback::Cpu && !session_on_gpu(&session, icfg.device_id) {
                return Ok(Served { buffers: None, session, graph: false });
            }
            let fixed = fixed_batch(icfg.provider, graph);
            let buffers = gpu_buffers(&session, icfg, batch, dims, fixed).map_err(|e| {
                InferenceError::Session {
                    model: label.clone(),
                    message: format!("pinned buffers: {e}"),
                }
            })?;
            let mut served = Served { buffers: Some(buffers), session, graph };
            warm_up(&mut served)
                .map_err(|message| InferenceError::Session { model: label.clone(), message })?;
            Ok(served)
        })();
        match attempt {
            Ok(served) => {
                let built = Built {
                    refit: false,
                    engine_build: icfg.provider == Provider::Tensorrt,
                    refit_failed,
                };
                return Ok((served, built));
            }
            Err(e) if graph && !matches!(e, InferenceError::ProviderUnavailable { .. }) => {
                tracing::warn!("[rulka inference] {label}: a CUDA graph could not be captured ({e}); serving without one");
                graph = false;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Counts what preparing snapshot `version` built, and switches TensorRT
/// refitting off for the snapshots after one whose refit failed (each is
/// built whole from then on, rather than refit, fail the check and be
/// built whole anyway).
fn record_built(icfg: &mut InferenceConfig, built: Built, version: u64, s: &mut EngineStats) {
    s.refits += u64::from(built.refit);
    s.engine_builds += u64::from(built.engine_build);
    if built.refit_failed && icfg.tensorrt_refit {
        tracing::warn!("[rulka inference] TensorRT refitting failed for v{version} (it was built whole instead); every later snapshot is built whole too");
        icfg.tensorrt_refit = false;
    }
}

/// Whether a GPU session takes only the batch size it was made for: a
/// CUDA graph replays the shapes it captured, and TensorRT's engine is
/// built for one optimisation profile. A plain CUDA session takes any (its
/// pinned buffers are made again).
fn fixed_batch(provider: Provider, graph: bool) -> bool {
    graph || provider == Provider::Tensorrt
}

/// Whether a session built with `fallback: cpu` got its GPU provider.
fn session_on_gpu(session: &Session, device_id: u32) -> bool {
    use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
    MemoryInfo::new(
        AllocationDevice::CUDA_PINNED,
        device_id as i32,
        AllocatorType::Device,
        MemoryType::CPUInput,
    )
    .and_then(|info| Allocator::new(session, info))
    .is_ok()
}

#[cfg(all(unix, feature = "tensorrt"))]
fn serve_refit(
    rt: Runtime,
    icfg: &InferenceConfig,
    cfg: &Config,
    source: &ModelSource,
    version: u64,
    batch: usize,
    dims: (usize, usize, usize, usize),
) -> Result<(Served, Built), InferenceError> {
    let label = source.label();
    let fail = |message: String| InferenceError::Session { model: label.clone(), message };
    let bytes = match source {
        ModelSource::Bytes(b) => b.clone(),
        ModelSource::File(p) => std::fs::read(p).map_err(|e| fail(format!("reading it: {e}")))?,
    };
    crate::native::preload(Provider::Tensorrt)
        .map_err(|m| unavailable(Provider::Tensorrt, m.to_string()))?;
    // Whether the provider registers at all, before the engine cache is
    // touched (a machine without TensorRT gets no cache folder).
    let probe = Session::builder(rt.environment()).map_err(session_err(&label))?;
    if let Err((_, reason)) = crate::providers::tensorrt(probe, icfg, false, None) {
        return Err(unavailable(Provider::Tensorrt, reason));
    }
    let (h, w, f, _) = dims;
    let mut graph = icfg.cuda_graph;
    let (session, origin) = loop {
        match crate::tensorrt::session(rt, icfg, &bytes, version, batch, (h, w, f), graph) {
            Ok(done) => break done,
            Err(e) if graph && !matches!(e, InferenceError::ProviderUnavailable { .. }) => {
                tracing::warn!(
                    "[rulka inference] TensorRT with a CUDA graph: {e}; trying without one"
                );
                graph = false;
            }
            Err(e) => return Err(e),
        }
    };
    let buffers = gpu_buffers(&session, icfg, batch, dims, fixed_batch(icfg.provider, graph))
        .map_err(|e| fail(format!("pinned buffers: {e}")))?;
    let mut served = Served { buffers: Some(buffers), session, graph };
    warm_up(&mut served).map_err(&fail)?;
    let gap = gate_refit(rt, icfg, cfg, &bytes, &mut served)
        .map_err(|e| fail(format!("parity check after the refit: {e}")))?;
    tracing::debug!(
        "[rulka inference] {label}: TensorRT within {gap:.2e} of the CPU on the probes"
    );
    let refit = origin == crate::tensorrt::Origin::Refit;
    Ok((served, Built { refit, engine_build: !refit, refit_failed: false }))
}

/// Runs the probes through `served` and through the CPU provider on the
/// same model, and checks them against [`crate::gate::bound`].
#[cfg(all(unix, feature = "tensorrt"))]
fn gate_refit(
    rt: Runtime,
    icfg: &InferenceConfig,
    cfg: &Config,
    model: &[u8],
    served: &mut Served,
) -> Result<f32, String> {
    let cpu_cfg = InferenceConfig { provider: Provider::Cpu, ..icfg.clone() };
    let mut reference = crate::Model {
        session: build_session(rt, &cpu_cfg, &ModelSource::Bytes(model.to_vec()))
            .map_err(|e| e.to_string())?,
        label: "CPU reference".into(),
    };
    let Some(b) = served.buffers.as_mut() else { return Err("no GPU buffers".into()) };
    let (mean, std) = rulka_config::float_inputs_mean_std(cfg);
    let f = mean.len();
    let pixels = b.image.shape().iter().skip(1).product::<i64>() as usize;
    let (frames, floats) = crate::gate::probes(4 * b.batch, pixels, &mean, &std);
    let mut worst = 0.0f32;
    for probe in 0..4 {
        let rows = b.batch;
        let fr = &frames[probe * rows * pixels..(probe + 1) * rows * pixels];
        let fl = &floats[probe * rows * f..(probe + 1) * rows * f];
        b.image.try_extract_tensor_mut::<u8>().map_err(|e| e.to_string())?.1.copy_from_slice(fr);
        b.floats.try_extract_tensor_mut::<f32>().map_err(|e| e.to_string())?.1.copy_from_slice(fl);
        let binding = bind(&served.session, b).map_err(|e| e.to_string())?;
        let outputs = served.session.run_binding(&binding).map_err(|e| e.to_string())?;
        let take = |name: &str| -> Result<Vec<f32>, String> {
            Ok(outputs[name].try_extract_tensor::<f32>().map_err(|e| e.to_string())?.1.to_vec())
        };
        let candidate = (take(rulka_export::OUTPUT_LOGITS)?, take(rulka_export::OUTPUT_VALUE)?);
        drop(outputs);
        let cpu = reference
            .run_actor_critic([rows, 1, pixels_dims(b).0, pixels_dims(b).1], fr, [rows, f], fl)
            .map_err(|e| e.to_string())?;
        worst = worst.max(crate::gate::check(
            &candidate,
            &cpu,
            crate::gate::bound(icfg.tensorrt_fp16),
        )?);
    }
    Ok(worst)
}

#[cfg(all(unix, feature = "tensorrt"))]
fn pixels_dims(b: &GpuBuffers) -> (usize, usize) {
    let s = b.image.shape();
    (s[2] as usize, s[3] as usize)
}

fn check_model(session: &Session, arch: &Architecture, label: &str) -> Result<(), InferenceError> {
    let mismatch =
        |message: String| InferenceError::ModelMismatch { model: label.to_string(), message };
    let inputs: Vec<&str> = session.inputs().iter().map(|o| o.name()).collect();
    let outputs: Vec<&str> = session.outputs().iter().map(|o| o.name()).collect();
    let (ii, fi, lo, vo) = (
        rulka_export::INPUT_IMAGE,
        rulka_export::INPUT_FLOATS,
        rulka_export::OUTPUT_LOGITS,
        rulka_export::OUTPUT_VALUE,
    );
    if inputs != [ii, fi] {
        return Err(mismatch(format!(
            "inputs are {inputs:?}, expected [{ii:?}, {fi:?}] (not a rulka export?)"
        )));
    }
    if outputs != [lo, vo] {
        return Err(mismatch(format!("outputs are {outputs:?}, expected [{lo:?}, {vo:?}]")));
    }
    let dims = |i: usize| -> Vec<i64> {
        session.inputs()[i].dtype().tensor_shape().map(|s| s.to_vec()).unwrap_or_default()
    };
    let want_f = arch.float_dim as i64;
    if dims(1).last().copied() != Some(want_f) {
        return Err(mismatch(format!(
            "floats input is {:?}, the config needs {want_f} floats",
            dims(1)
        )));
    }
    if let Some(img) = &arch.image {
        let d = dims(0);
        if d.len() != 4 || d[2] != img.height as i64 || d[3] != img.width as i64 {
            return Err(mismatch(format!(
                "image input is {d:?}, the config needs [batch, 1, {}, {}]",
                img.height, img.width
            )));
        }
    }
    let lshape: Vec<i64> =
        session.outputs()[0].dtype().tensor_shape().map(|s| s.to_vec()).unwrap_or_default();
    if lshape.last().copied() != Some(arch.n_logits() as i64) {
        return Err(mismatch(format!(
            "logits output is {lshape:?}, the config needs {} logits",
            arch.n_logits()
        )));
    }
    Ok(())
}

impl PolicyEngine {
    /// An engine for `cfg`'s network on the model from `source`, which
    /// `policy_version` labels. The model's inputs and outputs are checked
    /// against the config. On a GPU provider the engine is made for batch
    /// 1 (a collector's decisions); see [`PolicyEngine::with_batch`].
    pub fn new(
        rt: Runtime,
        cfg: &Config,
        source: ModelSource,
        policy_version: u64,
        opts: EngineOptions,
    ) -> Result<Self, InferenceError> {
        Self::with_batch(rt, cfg, source, policy_version, opts, 1)
    }

    /// [`PolicyEngine::new`] for calls of `batch` rows: a GPU session's
    /// pinned buffers, CUDA graph and TensorRT engine are made for it (a
    /// CUDA graph or a TensorRT engine then takes no other batch size; the
    /// CPU takes any).
    pub fn with_batch(
        rt: Runtime,
        cfg: &Config,
        source: ModelSource,
        policy_version: u64,
        opts: EngineOptions,
        batch: usize,
    ) -> Result<Self, InferenceError> {
        let arch = Architecture::from_config(cfg);
        let label = source.label();
        if arch.n_heads > MAX_HEADS {
            return Err(InferenceError::ModelMismatch {
                model: label,
                message: format!("{} action heads; at most {MAX_HEADS}", arch.n_heads),
            });
        }
        let batch = batch.max(1);
        let (served, built) = serve(rt, &cfg.inference, cfg, &source, policy_version, batch)?;
        check_model(&served.session, &arch, &label)?;
        let (height, width) = arch.image.as_ref().map_or((1, 1), |i| (i.height, i.width));
        let (image, floats) = inputs(batch, height, width, arch.float_dim, &label)?;
        let shared = Arc::new(SwapShared::default());
        shared.count(|s| {
            s.refits += u64::from(built.refit);
            s.engine_builds += u64::from(built.engine_build);
        });
        let mut engine = Self {
            rt,
            icfg: cfg.inference.clone(),
            served,
            binding: None,
            swap_pending: None,
            label,
            version: policy_version,
            n_heads: arch.n_heads,
            n_actions: arch.n_actions,
            height,
            width,
            float_dim: arch.float_dim,
            batch,
            image,
            floats,
            rng: Rng::new(opts.seed),
            greedy: opts.greedy,
            non_finite: 0,
            shared,
            seen_generation: 0,
            follower: None,
            retire: std::sync::mpsc::channel().0,
            graveyard: Vec::new(),
        };
        engine.rebind()?;
        Ok(engine)
    }

    /// Binds the serving session's buffers (GPU providers).
    fn rebind(&mut self) -> Result<(), InferenceError> {
        self.binding = match self.served.buffers.as_mut() {
            None => None,
            Some(b) => Some(bind(&self.served.session, b).map_err(|e| InferenceError::Run {
                model: self.label.clone(),
                message: format!("binding the pinned buffers: {e}"),
            })?),
        };
        Ok(())
    }

    /// The policy version currently serving.
    pub fn policy_version(&self) -> u64 {
        self.version
    }

    /// Restarts the sampling generator from `seed` (evaluations re-seed per
    /// episode so that two models draw the same random stream).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }

    /// Switches greedy (evaluation) sampling on or off.
    pub fn set_greedy(&mut self, greedy: bool) {
        self.greedy = greedy;
    }

    /// Bytes per frame and floats per step this engine expects.
    pub fn input_sizes(&self) -> (usize, usize) {
        (self.height * self.width, self.float_dim)
    }

    /// Counters (non-finite outputs, swaps, rejections).
    pub fn stats(&self) -> EngineStats {
        let mut s = self.shared.stats.lock().map(|s| s.clone()).unwrap_or_default();
        s.swaps = self.shared.swaps.load(Ordering::Relaxed);
        s.non_finite = self.non_finite;
        s.cuda_graph = self.served.graph;
        s
    }

    /// One decision for one frame (`H·W` raw pixels) and one float vector.
    pub fn act(&mut self, frame: &[u8], floats: &[f32]) -> Result<Action, InferenceError> {
        let mut out = [Action {
            actions: [0; MAX_HEADS],
            n_heads: 0,
            log_prob: 0.0,
            value: 0.0,
            policy_version: 0,
        }];
        self.act_into(frame, floats, 1, &mut out)?;
        Ok(out[0])
    }

    /// Decisions for a batch: `frames` is `batch·H·W` bytes, `floats`
    /// `batch·F`; `out` receives `batch` actions.
    pub fn act_batch(
        &mut self,
        frames: &[u8],
        floats: &[f32],
        batch: usize,
        out: &mut Vec<Action>,
    ) -> Result<(), InferenceError> {
        out.resize(
            batch,
            Action {
                actions: [0; MAX_HEADS],
                n_heads: 0,
                log_prob: 0.0,
                value: 0.0,
                policy_version: 0,
            },
        );
        self.act_into(frames, floats, batch, out)
    }

    fn act_into(
        &mut self,
        frames: &[u8],
        floats: &[f32],
        batch: usize,
        out: &mut [Action],
    ) -> Result<(), InferenceError> {
        self.maybe_swap();
        let (frame_len, f) = (self.height * self.width, self.float_dim);
        if frames.len() != batch * frame_len || floats.len() != batch * f {
            return Err(InferenceError::Run {
                model: self.label.clone(),
                message: format!(
                    "batch {batch} needs {} frame bytes and {} floats, got {} and {}",
                    batch * frame_len,
                    batch * f,
                    frames.len(),
                    floats.len()
                ),
            });
        }
        if batch != self.batch {
            self.resize(batch)?;
        }
        let outputs = forward(
            &mut self.served,
            self.binding.as_ref(),
            (&mut self.image, &mut self.floats),
            (frames, floats),
            &self.label,
        )?;
        let run_err = |m: String| InferenceError::Run { model: self.label.clone(), message: m };
        let logits = outputs[rulka_export::OUTPUT_LOGITS]
            .try_extract_tensor::<f32>()
            .map_err(|e| run_err(e.to_string()))?
            .1;
        let values = outputs[rulka_export::OUTPUT_VALUE]
            .try_extract_tensor::<f32>()
            .map_err(|e| run_err(e.to_string()))?
            .1;
        let (h, a) = (self.n_heads, self.n_actions);
        if let Some(i) = logits.iter().position(|x| !x.is_finite()) {
            self.non_finite += 1;
            return Err(InferenceError::NonFinite {
                model: self.label.clone(),
                output: "logits",
                index: i,
            });
        }
        if let Some(i) = values.iter().position(|x| !x.is_finite()) {
            self.non_finite += 1;
            return Err(InferenceError::NonFinite {
                model: self.label.clone(),
                output: "value",
                index: i,
            });
        }
        for (b, slot) in out.iter_mut().enumerate() {
            let mut log_prob = 0.0f64;
            for head in 0..h {
                let row = &logits[(b * h + head) * a..(b * h + head + 1) * a];
                let (choice, lp) =
                    sample_action(row, if self.greedy { None } else { Some(self.rng.uniform()) });
                slot.actions[head] = choice as u8;
                log_prob += lp;
            }
            slot.n_heads = h as u8;
            slot.log_prob = log_prob as f32;
            slot.value = values[b];
            slot.policy_version = self.version;
        }
        drop(outputs);
        self.swap_served();
        Ok(())
    }

    /// The first decision of a swapped-in policy was made: its swap time
    /// (the follower seeing the snapshot → now) goes into the counters.
    fn swap_served(&mut self) {
        if let Some((seen, prepare_us)) = self.swap_pending.take() {
            let us = seen.elapsed().as_micros() as u64;
            self.shared.count(|s| {
                s.last_swap_us = Some(us);
                s.last_prepare_us = Some(prepare_us);
                s.max_swap_us = s.max_swap_us.max(us);
            });
        }
    }

    /// The serving model's raw outputs for one frame and float vector:
    /// `(logits, value)`, nothing sampled, no guard (`rulka gpu check`
    /// compares providers with it).
    pub fn outputs(
        &mut self,
        frame: &[u8],
        floats: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>), InferenceError> {
        self.maybe_swap();
        let (frame_len, f) = (self.height * self.width, self.float_dim);
        if frame.len() != frame_len || floats.len() != f {
            return Err(InferenceError::Run {
                model: self.label.clone(),
                message: format!(
                    "one decision needs {frame_len} frame bytes and {f} floats, got {} and {}",
                    frame.len(),
                    floats.len()
                ),
            });
        }
        if self.batch != 1 {
            self.resize(1)?;
        }
        let outputs = forward(
            &mut self.served,
            self.binding.as_ref(),
            (&mut self.image, &mut self.floats),
            (frame, floats),
            &self.label,
        )?;
        let take = |name: &str| -> Result<Vec<f32>, InferenceError> {
            Ok(outputs[name]
                .try_extract_tensor::<f32>()
                .map_err(|e| InferenceError::Run {
                    model: self.label.clone(),
                    message: e.to_string(),
                })?
                .1
                .to_vec())
        };
        let out = (take(rulka_export::OUTPUT_LOGITS)?, take(rulka_export::OUTPUT_VALUE)?);
        drop(outputs);
        self.swap_served();
        Ok(out)
    }

    /// Makes the inputs (and a GPU session's pinned buffers) `batch` rows.
    fn resize(&mut self, batch: usize) -> Result<(), InferenceError> {
        let f = self.float_dim;
        if let Some(b) = &self.served.buffers {
            if b.fixed {
                return Err(InferenceError::Run {
                    model: self.label.clone(),
                    message: format!(
                        "this engine's GPU session is made for batch {} ({}); batch {batch} needs an engine made for it (PolicyEngine::with_batch){}",
                        b.batch,
                        if self.served.graph { "a CUDA graph replays it" } else { "TensorRT's engine is built for it" },
                        if self.served.graph { " or inference.cuda_graph: false" } else { "" }
                    ),
                });
            }
            let arch_dims = (self.height, self.width, f, self.n_heads * self.n_actions);
            self.binding = None;
            let buffers = gpu_buffers(&self.served.session, &self.icfg, batch, arch_dims, false)
                .map_err(|e| InferenceError::Run {
                    model: self.label.clone(),
                    message: format!("pinned buffers: {e}"),
                })?;
            self.served.buffers = Some(buffers);
            self.rebind()?;
        }
        (self.image, self.floats) = inputs(batch, self.height, self.width, f, &self.label)?;
        self.batch = batch;
        Ok(())
    }

    fn maybe_swap(&mut self) {
        // SYNC POINT: Acquire pairs with the follower's Release after it fills `ready`.
        let generation = self.shared.ready_generation.load(Ordering::Acquire);
        if generation == self.seen_generation {
            return;
        }
        // Never block the hot path: if the follower holds the slot, swap next call.
        let Ok(mut ready) = self.shared.ready.try_lock() else { return };
        self.seen_generation = generation;
        if let Some(p) = ready.take() {
            drop(ready);
            self.binding = None;
            let old = std::mem::replace(&mut self.served, p.served);
            self.version = p.version;
            // The old session is dropped by the follower, off the hot path (an
            // unbounded channel send never blocks).
            if let Err(std::sync::mpsc::SendError(old)) = self.retire.send(old) {
                // No follower left to drop it: keep it alive until the engine drops.
                self.graveyard.push(old);
            }
            if let Err(e) = self.rebind() {
                tracing::warn!("[rulka inference] {e}");
            }
            if let Some(b) = &self.served.buffers {
                self.batch = b.batch;
            }
            self.swap_pending = Some((p.seen, p.prepare_us));
            self.shared.swaps.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Follows a weight board (shared memory); see [`PolicyEngine::follow_source`].
    #[cfg(unix)]
    pub fn follow(&mut self, board: BoardReader, cfg: &Config) {
        self.follow_source(Box::new(ShmWeightSource::new(board)), cfg);
    }

    /// Follows a weight source (the board, or NATS): a background thread
    /// waits for snapshots newer than the serving version, validates each
    /// (checksum, architecture, finite values), exports it to ONNX, builds
    /// and warms up a session, and hands it over; the next `act` swaps it in.
    /// A snapshot that fails — or a source error — is logged and counted, and
    /// the old session keeps serving.
    pub fn follow_source(&mut self, mut source: Box<dyn WeightSource>, cfg: &Config) {
        let shared = self.shared.clone();
        let (rt, mut icfg, cfg) = (self.rt, self.icfg.clone(), cfg.clone());
        let (height, width, f, batch) = (self.height, self.width, self.float_dim, self.batch);
        let mut current = self.version;
        let (tx, retired) = std::sync::mpsc::channel::<Served>();
        self.retire = tx;
        self.follower = Some(std::thread::spawn(move || {
            lower_this_threads_priority();
            let mut buf = Vec::new();
            while shared.stop.load(Ordering::Relaxed) == 0 {
                while let Ok(old) = retired.try_recv() {
                    drop(old);
                }
                let version = match source.wait_newer(
                    Some(current),
                    &mut buf,
                    Duration::from_millis(50),
                ) {
                    Ok(Some(v)) => v,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!("[rulka inference] weight source: {e}; the current policy keeps serving");
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                };
                current = version;
                let seen = Instant::now();
                match prepare(rt, &icfg, &cfg, &buf, version, (height, width, f, batch)) {
                    Ok((served, built)) => {
                        let prepare_us = seen.elapsed().as_micros() as u64;
                        shared.count(|s| record_built(&mut icfg, built, version, s));
                        if let Ok(mut ready) = shared.ready.lock() {
                            *ready = Some(Prepared { served, version, seen, prepare_us });
                        }
                        shared.ready_generation.fetch_add(1, Ordering::Release);
                    }
                    Err(reason) => {
                        tracing::warn!("[rulka inference] rejected weight snapshot v{version}: {reason}; the previous policy keeps serving");
                        if let Ok(mut s) = shared.stats.lock() {
                            s.rejected += 1;
                            s.last_rejection = Some(reason);
                        }
                    }
                }
            }
        }));
    }
}

/// How long dropping an engine waits for its weight follower to see the
/// stop. A follower inside a fetch from an unreachable server, or building a
/// session, is left to end on its own: a stopping collector must not wait
/// for a transfer's deadline.
const FOLLOWER_JOIN: Duration = Duration::from_millis(250);

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        self.shared.stop.store(1, Ordering::Relaxed);
        if let Some(t) = self.follower.take() {
            let t0 = std::time::Instant::now();
            while !t.is_finished() && t0.elapsed() < FOLLOWER_JOIN {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::debug!(
                    "[rulka inference] the weight follower is busy; not waiting for it"
                );
            }
        }
    }
}

/// Copies one call's inputs in and runs the serving session: through its
/// binding into the pinned buffers on a GPU, else from `cpu`'s tensors.
fn forward<'s>(
    served: &'s mut Served,
    binding: Option<&'s IoBinding>,
    cpu: (&'s mut Tensor<u8>, &'s mut Tensor<f32>),
    (frames, floats): (&[u8], &[f32]),
    label: &str,
) -> Result<ort::session::SessionOutputs<'s>, InferenceError> {
    let run_err = |m: String| InferenceError::Run { model: label.to_string(), message: m };
    let gpu = served.buffers.is_some() && binding.is_some();
    let (image, floats_t) = match (served.buffers.as_mut(), binding) {
        (Some(b), Some(_)) => (&mut b.image, &mut b.floats),
        _ => cpu,
    };
    image
        .try_extract_tensor_mut::<u8>()
        .map_err(|e| run_err(e.to_string()))?
        .1
        .copy_from_slice(frames);
    floats_t
        .try_extract_tensor_mut::<f32>()
        .map_err(|e| run_err(e.to_string()))?
        .1
        .copy_from_slice(floats);
    match binding {
        Some(binding) if gpu => served.session.run_binding(binding),
        _ => served.session.run(
            ort::inputs![rulka_export::INPUT_IMAGE => &*image, rulka_export::INPUT_FLOATS => &*floats_t],
        ),
    }
    .map_err(|e| run_err(e.to_string()))
}

fn prepare(
    rt: Runtime,
    icfg: &InferenceConfig,
    cfg: &Config,
    bytes: &[u8],
    version: u64,
    dims: (usize, usize, usize, usize),
) -> Result<(Served, Built), String> {
    let onnx = rulka_export::export_from_safetensors(cfg, bytes, &format!("snapshot v{version}"))
        .map_err(|e| e.to_string())?;
    let source = ModelSource::Bytes(onnx);
    let (h, w, f, batch) = dims;
    let (mut served, built) =
        serve(rt, icfg, cfg, &source, version, batch).map_err(|e| e.to_string())?;
    check_model(&served.session, &Architecture::from_config(cfg), &source.label())
        .map_err(|e| e.to_string())?;
    if served.buffers.is_none() {
        let (image, floats) = inputs(batch, h, w, f, "warm-up").map_err(|e| e.to_string())?;
        served
            .session
            .run(ort::inputs![rulka_export::INPUT_IMAGE => &image, rulka_export::INPUT_FLOATS => &floats])
            .map_err(|e| format!("warm-up run failed: {e}"))?;
    }
    Ok((served, built))
}

fn inputs(
    batch: usize,
    h: usize,
    w: usize,
    f: usize,
    label: &str,
) -> Result<(Tensor<u8>, Tensor<f32>), InferenceError> {
    let err =
        |e: ort::Error| InferenceError::Run { model: label.to_string(), message: e.to_string() };
    let image = Tensor::from_array(([batch, 1, h, w], vec![0u8; batch * h * w])).map_err(err)?;
    let floats = Tensor::from_array(([batch, f], vec![0f32; batch * f])).map_err(err)?;
    Ok((image, floats))
}

/// Samples one head: with `u` ∈ [0,1) by inverse CDF of the softmax, or the
/// argmax when `u` is `None`. Returns the action and its log-probability,
/// computed stably as `logit − max − ln Σ exp(logit − max)`.
pub fn sample_action(logits: &[f32], u: Option<f64>) -> (usize, f64) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let mut sum = 0.0f64;
    for &l in logits {
        sum += (l as f64 - max).exp();
    }
    let log_z = max + sum.ln();
    let choice = match u {
        None => logits
            .iter()
            .enumerate()
            .fold(0, |best, (i, &l)| if l > logits[best] { i } else { best }),
        Some(u) => {
            let target = u * sum;
            let mut acc = 0.0;
            let mut pick = logits.len() - 1;
            for (i, &l) in logits.iter().enumerate() {
                acc += (l as f64 - max).exp();
                if acc > target {
                    pick = i;
                    break;
                }
            }
            pick
        }
    };
    (choice, logits[choice] as f64 - log_z)
}

/// Rebuilding a session is CPU-heavy; at the lowest scheduling priority it
/// cannot preempt the sampling thread on a small machine (best effort).
fn lower_this_threads_priority() {
    if let Err(e) = rulka_shm::lower_this_threads_priority() {
        tracing::warn!(
            "[rulka inference] could not lower the weight-follower thread's priority: {e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_or_tensorrt_fixes_the_batch_and_only_they_do() {
        for (provider, graph, fixed) in [
            (Provider::Cuda, false, false),
            (Provider::Cuda, true, true),
            (Provider::Tensorrt, false, true),
            (Provider::Tensorrt, true, true),
        ] {
            assert_eq!(fixed_batch(provider, graph), fixed, "{provider:?}, graph {graph}");
        }
    }

    #[test]
    fn a_failed_refit_turns_refitting_off_for_later_snapshots_and_counts_each_build() {
        let on = || InferenceConfig { tensorrt_refit: true, ..InferenceConfig::default() };
        let mut s = EngineStats::default();
        // The first snapshot builds the engine; the next refit it.
        let mut icfg = on();
        record_built(
            &mut icfg,
            Built { refit: false, engine_build: true, refit_failed: false },
            1,
            &mut s,
        );
        record_built(
            &mut icfg,
            Built { refit: true, engine_build: false, refit_failed: false },
            2,
            &mut s,
        );
        assert!(icfg.tensorrt_refit, "a refit that worked leaves refitting on");
        assert_eq!((s.refits, s.engine_builds), (1, 1));
        // A refit that failed its check was built whole: refitting goes off.
        record_built(
            &mut icfg,
            Built { refit: false, engine_build: true, refit_failed: true },
            3,
            &mut s,
        );
        assert!(!icfg.tensorrt_refit, "after a failed refit, later snapshots are built whole");
        assert_eq!((s.refits, s.engine_builds), (1, 2));
        // Off stays off; a config that never refits is left as it is.
        record_built(
            &mut icfg,
            Built { refit: false, engine_build: true, refit_failed: false },
            4,
            &mut s,
        );
        assert!(!icfg.tensorrt_refit);
        let mut off = InferenceConfig { tensorrt_refit: false, ..InferenceConfig::default() };
        record_built(&mut off, Built::default(), 1, &mut s);
        assert!(!off.tensorrt_refit);
        assert_eq!((s.refits, s.engine_builds), (1, 3));
    }
}
