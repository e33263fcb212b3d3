//! The policy engine: exported actor-critic on ONNX Runtime → sampled actions.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ort::session::Session;
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

struct Prepared {
    session: Session,
    version: u64,
}

#[derive(Default)]
struct SwapShared {
    ready: Mutex<Option<Prepared>>,
    swaps: AtomicU64,
    ready_generation: AtomicU64,
    stop: AtomicU64,
    stats: Mutex<EngineStats>,
}

/// Turns frames + floats into sampled actions with an exported model, and
/// (optionally) follows a weight board, swapping in newer policies between
/// calls without ever waiting for a rebuild.
pub struct PolicyEngine {
    rt: Runtime,
    icfg: InferenceConfig,
    session: Session,
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
    retire: std::sync::mpsc::Sender<Session>,
    graveyard: Vec<Session>,
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

/// Builds a session for `icfg`'s execution provider. A provider this build
/// lacks is [`InferenceError::ProviderUnavailable`] unless `fallback: cpu`.
pub fn build_session(
    rt: Runtime,
    icfg: &InferenceConfig,
    source: &ModelSource,
) -> Result<Session, InferenceError> {
    let label = source.label();
    let err = session_err(&label);
    let mut builder = Session::builder(rt.environment())
        .map_err(&err)?
        .with_intra_threads(icfg.intra_op_threads.max(1) as usize)
        .map_err(|e| err(e.into()))?;
    match icfg.provider {
        Provider::Cpu => {}
        Provider::Cuda | Provider::Tensorrt => match crate::providers::register(builder, icfg) {
            Ok(b) => builder = b,
            Err((b, reason)) => {
                if icfg.fallback == Fallback::Cpu {
                    tracing::warn!("[rulka inference] {:?} unavailable ({reason}); falling back to CPU as configured", icfg.provider);
                    builder = b;
                } else {
                    return Err(InferenceError::ProviderUnavailable {
                        provider: format!("{:?}", icfg.provider),
                        reason,
                    });
                }
            }
        },
    }
    match source {
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
    }
    .map_err(&err)
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
    /// against the config.
    pub fn new(
        rt: Runtime,
        cfg: &Config,
        source: ModelSource,
        policy_version: u64,
        opts: EngineOptions,
    ) -> Result<Self, InferenceError> {
        let arch = Architecture::from_config(cfg);
        if arch.n_heads > MAX_HEADS {
            return Err(InferenceError::ModelMismatch {
                model: source.label(),
                message: format!("{} action heads; at most {MAX_HEADS}", arch.n_heads),
            });
        }
        let label = source.label();
        let session = build_session(rt, &cfg.inference, &source)?;
        check_model(&session, &arch, &label)?;
        let (height, width) = arch.image.as_ref().map_or((1, 1), |i| (i.height, i.width));
        let (image, floats) = inputs(1, height, width, arch.float_dim, &label)?;
        Ok(Self {
            rt,
            icfg: cfg.inference.clone(),
            session,
            label,
            version: policy_version,
            n_heads: arch.n_heads,
            n_actions: arch.n_actions,
            height,
            width,
            float_dim: arch.float_dim,
            batch: 1,
            image,
            floats,
            rng: Rng::new(opts.seed),
            greedy: opts.greedy,
            non_finite: 0,
            shared: Arc::new(SwapShared::default()),
            seen_generation: 0,
            follower: None,
            retire: std::sync::mpsc::channel().0,
            graveyard: Vec::new(),
        })
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
            (self.image, self.floats) = inputs(batch, self.height, self.width, f, &self.label)?;
            self.batch = batch;
        }
        let run_err = |m: String| InferenceError::Run { model: self.label.clone(), message: m };
        self.image
            .try_extract_tensor_mut::<u8>()
            .map_err(|e| run_err(e.to_string()))?
            .1
            .copy_from_slice(frames);
        self.floats
            .try_extract_tensor_mut::<f32>()
            .map_err(|e| run_err(e.to_string()))?
            .1
            .copy_from_slice(floats);
        let outputs = self
            .session
            .run(ort::inputs![rulka_export::INPUT_IMAGE => &self.image, rulka_export::INPUT_FLOATS => &self.floats])
            .map_err(|e| InferenceError::Run { model: self.label.clone(), message: e.to_string() })?;
        let logits = outputs[rulka_export::OUTPUT_LOGITS]
            .try_extract_tensor::<f32>()
            .map_err(|e| InferenceError::Run { model: self.label.clone(), message: e.to_string() })?
            .1;
        let values = outputs[rulka_export::OUTPUT_VALUE]
            .try_extract_tensor::<f32>()
            .map_err(|e| InferenceError::Run { model: self.label.clone(), message: e.to_string() })?
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
            let old = std::mem::replace(&mut self.session, p.session);
            self.version = p.version;
            // The old session is dropped by the follower, off the hot path (an
            // unbounded channel send never blocks).
            if let Err(std::sync::mpsc::SendError(old)) = self.retire.send(old) {
                // No follower left to drop it: keep it alive until the engine drops.
                self.graveyard.push(old);
            }
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
        let (rt, icfg, cfg) = (self.rt, self.icfg.clone(), cfg.clone());
        let (height, width, f) = (self.height, self.width, self.float_dim);
        let mut current = self.version;
        let (tx, retired) = std::sync::mpsc::channel::<Session>();
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
                match prepare(rt, &icfg, &cfg, &buf, version, (height, width, f)) {
                    Ok(session) => {
                        if let Ok(mut ready) = shared.ready.lock() {
                            *ready = Some(Prepared { session, version });
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

fn prepare(
    rt: Runtime,
    icfg: &InferenceConfig,
    cfg: &Config,
    bytes: &[u8],
    version: u64,
    dims: (usize, usize, usize),
) -> Result<Session, String> {
    let onnx = rulka_export::export_from_safetensors(cfg, bytes, &format!("snapshot v{version}"))
        .map_err(|e| e.to_string())?;
    let source = ModelSource::Bytes(onnx);
    let mut session = build_session(rt, icfg, &source).map_err(|e| e.to_string())?;
    check_model(&session, &Architecture::from_config(cfg), &source.label())
        .map_err(|e| e.to_string())?;
    let (h, w, f) = dims;
    let (image, floats) = inputs(1, h, w, f, "warm-up").map_err(|e| e.to_string())?;
    session
        .run(ort::inputs![rulka_export::INPUT_IMAGE => &image, rulka_export::INPUT_FLOATS => &floats])
        .map_err(|e| format!("warm-up run failed: {e}"))?;
    Ok(session)
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
