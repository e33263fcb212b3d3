//! The original Python project's save folder, read and written without
//! Python: `weights1.torch` (the policy's `state_dict`), `optimizer1.torch`
//! (RAdam's `state_dict`), `scaler.torch` (`GradScaler`'s) and
//! `accumulated_stats.joblib` (frames played, best times per map).
//!
//! Reading parses PyTorch's zip/pickle files with the `pytorch-reader`
//! crate, which runs nothing from the file; any object other than a tensor
//! built by a call to a global is refused. Every tensor is checked against
//! the network the config describes (rulka uses the original's state-dict
//! names), so a file for another network is refused with the tensor, its
//! shape and the shape the network needs. Writing produces what
//! `torch.save` writes (see [`torch_save`]), which `torch.load` — also with
//! `weights_only=True` — reads back.
//!
//! This crate does not link libtorch.
//!
//! ```
//! use rulka_config::Config;
//! use rulka_network::Architecture;
//! use rulka_checkpoint::Weights;
//!
//! let cfg = Config::from_yaml_str("nn: {no_image: true, float_hidden_dim: 8, dense_hidden_dim: 8}", "c")?;
//! let net = Architecture::from_config(&cfg).net;
//! let dir = tempfile::tempdir()?;
//! let weights = Weights::zeros(&Architecture::from_config(&cfg));
//! let path = dir.path().join(rulka_original::WEIGHTS);
//! std::fs::write(&path, rulka_original::weights_file(&net, &weights)?)?;
//! let back = rulka_original::read_weights(&path, &net)?;
//! assert_eq!(back.weights.tensors, weights.tensors);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pytorch_reader::PickleValue;
use rulka_checkpoint::{Tensor, Weights};
use rulka_network::Net;

mod pickle;
mod read;

pub use pickle::{plain_pickle, torch_save, Py, TensorInPlainPickle};

use read::{number, number_map, TorchFile};

/// The policy's weights in a save folder.
pub const WEIGHTS: &str = "weights1.torch";
/// The optimizer's state in a save folder.
pub const OPTIMIZER: &str = "optimizer1.torch";
/// The gradient scaler's state in a save folder.
pub const SCALER: &str = "scaler.torch";
/// Frames played and race times in a save folder.
pub const STATS: &str = "accumulated_stats.joblib";
/// The run's config in a save folder.
pub const CONFIG: &str = "config_snapshot.yaml";

/// Why a save folder's file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum OriginalError {
    /// The file could not be opened or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a `torch.save` / pickle file, or a damaged one (a cut zip, a
    /// broken pickle).
    #[error("{path}: not a readable PyTorch file: {reason}")]
    NotReadable {
        /// The file.
        path: PathBuf,
        /// What the reader found.
        reason: String,
    },
    /// An object the original never saves (a call to some other global).
    #[error("{path}: {at} is a {type_name} object; the original saves only tensors and plain values there, refusing the file")]
    UnexpectedObject {
        /// The file.
        path: PathBuf,
        /// Dotted path of the object in the file.
        at: String,
        /// Its Python type.
        type_name: String,
    },
    /// Something the network or format needs is not in the file.
    #[error("{path}: missing {what}")]
    Missing {
        /// The file.
        path: PathBuf,
        /// What is missing (with the shape the network needs).
        what: String,
    },
    /// A tensor of the wrong shape.
    #[error("{path}: {tensor} has shape {got:?} but {expected}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its shape.
        got: Vec<usize>,
        /// What the network needs, in words with the shape.
        expected: String,
    },
    /// A tensor that is not float32.
    #[error("{path}: {tensor} is {dtype}; the network's tensors are float32")]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: String,
    },
    /// A value of the wrong kind or an inconsistent state.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl OriginalError {
    /// What kind of failure this is: every problem with a file is the
    /// user's input ([`rulka_error::ErrorKind::BadInput`]); a failed write is
    /// [`rulka_error::ErrorKind::Failed`].
    pub fn kind(&self) -> rulka_error::ErrorKind {
        match self {
            Self::Io { source, .. } if source.kind() != std::io::ErrorKind::NotFound => {
                rulka_error::ErrorKind::Failed
            }
            _ => rulka_error::ErrorKind::BadInput,
        }
    }
}

/// Weights read from `weights1.torch`, with what was adapted on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedWeights {
    /// Every tensor of the network (no rulka metadata).
    pub weights: Weights,
    /// What the reading did besides copying (a prefix stripped, BC heads
    /// averaged, entries the network does not have left out), one line each.
    pub notes: Vec<String>,
}

/// RAdam's state, per trained parameter ([`Net::trained`]: the network's
/// tensors in registration order — `transformers`' for a Hugging Face
/// model's — buffers and frozen parameters left out).
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizerState {
    /// Steps taken (the same for every parameter).
    pub step: u64,
    /// First moments, row-major, one per trained parameter.
    pub exp_avg: Vec<Vec<f32>>,
    /// Second moments, row-major, one per trained parameter.
    pub exp_avg_sq: Vec<Vec<f32>>,
    /// The learning rate of the last step.
    pub lr: f64,
    /// β1, β2.
    pub betas: (f64, f64),
    /// ε.
    pub eps: f64,
    /// Weight decay.
    pub weight_decay: f64,
}

/// `GradScaler`'s state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalerState {
    /// The loss scale.
    pub scale: f64,
    /// Finite steps since the scale last changed.
    pub growth_tracker: i64,
}

/// What `accumulated_stats.joblib` carries that rulka uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    /// `cumul_number_frames_played`: environment frames (the schedules' position).
    pub frames: Option<u64>,
    /// `cumul_training_hours`.
    pub training_hours: Option<f64>,
    /// `alltime_min_ms`: best race time per map, ms.
    pub best_ms: BTreeMap<String, f64>,
    /// `rolling_mean_ms`: rolling mean race time per map, ms.
    pub rolling_mean_ms: BTreeMap<String, f64>,
}

/// `bc_heads.{i}.weight|bias` → `(i, is_weight)`.
fn bc_head(key: &str) -> Option<(usize, bool)> {
    let rest = key.strip_prefix("bc_heads.")?;
    let (i, kind) = rest.split_once('.')?;
    let i = i.parse().ok()?;
    match kind {
        "weight" => Some((i, true)),
        "bias" => Some((i, false)),
        _ => None,
    }
}

/// Reads `weights1.torch` for `net` as the original's loader
/// (`prepare_ppo_policy_state_dict_for_load`) does: a `_orig_mod.` prefix
/// is stripped, a behaviour-cloning checkpoint's `base.` prefix too and its
/// `bc_heads.{i}` averaged into `policy_head`, entries the network does not
/// have are left out (and noted). A missing tensor, a wrong shape or a
/// dtype other than float32 is refused.
pub fn read_weights(path: &Path, net: &Net) -> Result<ImportedWeights, OriginalError> {
    let f = TorchFile::open(path)?;
    let mut names: Vec<String> = f.tensor_names().cloned().collect();
    names.sort();
    let mut notes = Vec::new();
    let prefixed = names.iter().any(|n| n.starts_with("_orig_mod."));
    if prefixed {
        notes.push("stripped the torch.compile prefix _orig_mod.".to_owned());
    }
    let mut source: BTreeMap<String, String> = BTreeMap::new();
    let mut heads: BTreeMap<usize, [Option<String>; 2]> = BTreeMap::new();
    let mut ignored = Vec::new();
    for n in &names {
        let k = if prefixed {
            match n.strip_prefix("_orig_mod.") {
                Some(k) => k,
                None => {
                    ignored.push(n.clone());
                    continue;
                }
            }
        } else {
            n.as_str()
        };
        if net.tensor(k).is_some() {
            source.insert(k.to_owned(), n.clone());
            continue;
        }
        let stripped = k.strip_prefix("base.").unwrap_or(k);
        if let Some((i, is_weight)) = bc_head(stripped) {
            heads.entry(i).or_default()[usize::from(!is_weight)] = Some(n.clone());
        } else if stripped != k && net.tensor(stripped).is_some() {
            source.entry(stripped.to_owned()).or_insert_with(|| n.clone());
        } else {
            ignored.push(n.clone());
        }
    }
    let complete_heads = !heads.is_empty() && heads.values().all(|h| h.iter().all(Option::is_some));
    if complete_heads {
        notes.push(format!(
            "averaged {} behaviour-cloning heads (bc_heads.*) into policy_head",
            heads.len()
        ));
    }
    if names.iter().any(|n| n.strip_prefix("_orig_mod.").unwrap_or(n).starts_with("base.")) {
        notes.push("read the behaviour-cloning checkpoint's base.* as the policy".to_owned());
    }
    let mut missing = Vec::new();
    let mut weights = Weights::default();
    for spec in &net.tensors {
        let head_slot = match spec.name.as_str() {
            "policy_head.weight" if complete_heads => Some(0),
            "policy_head.bias" if complete_heads => Some(1),
            _ => None,
        };
        let data = if let Some(slot) = head_slot {
            let mut sum = vec![0f64; spec.shape.iter().product()];
            for h in heads.values() {
                let key = h[slot].as_deref().unwrap_or_default();
                check_shape(&f, key, &spec.shape, || network_has(spec))?;
                for (s, x) in sum.iter_mut().zip(f.f32(key)?) {
                    *s += f64::from(x);
                }
            }
            let n = heads.len() as f64;
            sum.into_iter().map(|s| (s / n) as f32).collect()
        } else if let Some(key) = source.get(&spec.name) {
            check_shape(&f, key, &spec.shape, || network_has(spec))?;
            f.f32(key)?
        } else {
            missing.push(format!("{} {:?}", spec.name, spec.shape));
            continue;
        };
        weights.tensors.insert(spec.name.clone(), Tensor { shape: spec.shape.clone(), data });
    }
    if let Some(first) = missing.first() {
        let more = if missing.len() > 1 {
            format!(" and {} more ({})", missing.len() - 1, missing[1..].join(", "))
        } else {
            String::new()
        };
        return Err(OriginalError::Missing {
            path: path.to_owned(),
            what: format!(
                "tensor {first}{more} that the network needs; is it a save of another network?"
            ),
        });
    }
    if !complete_heads {
        // An incomplete set of heads is not averaged (as in the original): left out.
        ignored.extend(heads.values().flatten().flatten().cloned());
    }
    if !ignored.is_empty() {
        notes.push(format!(
            "left out {} entries the network does not have: {}",
            ignored.len(),
            ignored.join(", ")
        ));
    }
    Ok(ImportedWeights { weights, notes })
}

/// Refuses tensor `key` unless its shape is `want`; `expected` says in
/// words what it should be (with `want`).
fn check_shape(
    f: &TorchFile,
    key: &str,
    want: &[usize],
    expected: impl FnOnce() -> String,
) -> Result<(), OriginalError> {
    let got = f.shape(key).unwrap_or_default();
    if got != want {
        return Err(OriginalError::Shape {
            path: f.path.clone(),
            tensor: key.to_owned(),
            got: got.to_vec(),
            expected: expected(),
        });
    }
    Ok(())
}

fn network_has(spec: &rulka_network::TensorSpec) -> String {
    format!("the network's {} is {:?}", spec.name, spec.shape)
}

fn invalid(f: &TorchFile, reason: String) -> OriginalError {
    OriginalError::Invalid { path: f.path.clone(), reason }
}

/// Reads `optimizer1.torch` (a `torch.optim.RAdam` state dict) for `net`:
/// parameter `i` of the param groups is the `i`-th of
/// [`Net::torch_optimizer_parameters`] (PyTorch's `parameters()` order,
/// frozen ones left out). A parameter without state (never stepped) gets
/// zero moments; the parameters the forward pass never reads (a Hugging
/// Face pooler, a BERT's word embeddings) never have one, and any state
/// they hold is left behind; different step counts across parameters are
/// refused (rulka keeps one).
pub fn read_optimizer(path: &Path, net: &Net) -> Result<OptimizerState, OriginalError> {
    let f = TorchFile::open(path)?;
    let Some(PickleValue::List(groups)) = f.value("param_groups") else {
        return Err(OriginalError::Missing {
            path: path.to_owned(),
            what: "param_groups (is it an optimizer's state_dict?)".to_owned(),
        });
    };
    let mut indices = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let Some(PickleValue::Dict(d)) = Some(group) else {
            return Err(invalid(&f, format!("param_groups.{g} is not a dict")));
        };
        let Some(PickleValue::List(params)) = d.get("params") else {
            return Err(invalid(&f, format!("param_groups.{g} has no params list")));
        };
        for p in params {
            match p {
                PickleValue::Int(i) if *i >= 0 => indices.push(*i as usize),
                other => {
                    return Err(invalid(&f, format!("param_groups.{g}.params holds {other:?}")))
                }
            }
        }
    }
    let listed: Vec<_> = net.torch_optimizer_parameters().collect();
    let trained = listed.iter().filter(|(_, trained)| *trained).count();
    if indices.len() != listed.len() {
        return Err(invalid(
            &f,
            format!(
                "the optimizer holds {} parameters, the network's optimizer lists {} (is it a save of another network, or were parameters frozen differently?)",
                indices.len(),
                listed.len()
            ),
        ));
    }
    let group = |key: &str| f.value(&format!("param_groups.0.{key}")).and_then(number);
    let betas = match f.value("param_groups.0.betas") {
        Some(PickleValue::List(b)) if b.len() == 2 => {
            (number(&b[0]).unwrap_or(0.9), number(&b[1]).unwrap_or(0.999))
        }
        _ => return Err(invalid(&f, "param_groups.0.betas is not a pair".to_owned())),
    };
    let mut state = OptimizerState {
        step: 0,
        exp_avg: Vec::with_capacity(trained),
        exp_avg_sq: Vec::with_capacity(trained),
        lr: group("lr").ok_or_else(|| invalid(&f, "param_groups.0.lr is missing".to_owned()))?,
        betas,
        eps: group("eps").ok_or_else(|| invalid(&f, "param_groups.0.eps is missing".to_owned()))?,
        weight_decay: group("weight_decay").unwrap_or(0.0),
    };
    let mut steps: Vec<(f64, String)> = Vec::new();
    for (pos, &idx) in indices.iter().enumerate() {
        let (spec, trained) = listed[pos];
        if !trained {
            continue;
        }
        let n: usize = spec.shape.iter().product();
        let avg = format!("state.{idx}.exp_avg");
        let sq = format!("state.{idx}.exp_avg_sq");
        if !f.has_tensor(&avg) {
            state.exp_avg.push(vec![0.0; n]);
            state.exp_avg_sq.push(vec![0.0; n]);
            continue;
        }
        for key in [&avg, &sq] {
            check_shape(&f, key, &spec.shape, || {
                format!("optimizer parameter {idx} is the network's {} {:?}", spec.name, spec.shape)
            })?;
        }
        state.exp_avg.push(f.f32(&avg)?);
        state.exp_avg_sq.push(f.f32(&sq)?);
        let key = format!("state.{idx}.step");
        let step = f
            .scalar(&key)
            .ok_or_else(|| OriginalError::Missing { path: path.to_owned(), what: key.clone() })?;
        steps.push((step, spec.name.clone()));
    }
    if let Some((first, name)) = steps.first() {
        if let Some((other, other_name)) = steps.iter().find(|(s, _)| s != first) {
            return Err(invalid(
                &f,
                format!(
                    "parameters were stepped different numbers of times ({first} for {name}, {other} for {other_name}); rulka keeps one step count for all"
                ),
            ));
        }
        if !(first.is_finite() && *first >= 0.0 && first.fract() == 0.0) {
            return Err(invalid(&f, format!("step {first} is not a whole number of steps")));
        }
        state.step = *first as u64;
    }
    Ok(state)
}

/// Reads `scaler.torch`; `None` for the empty state of a disabled scaler
/// (training on the CPU).
pub fn read_scaler(path: &Path) -> Result<Option<ScalerState>, OriginalError> {
    let f = TorchFile::open(path)?;
    if matches!(&f.tree, PickleValue::Dict(d) if d.is_empty()) {
        return Ok(None);
    }
    let scale = f
        .scalar("scale")
        .ok_or_else(|| OriginalError::Missing { path: path.to_owned(), what: "scale".into() })?;
    let growth_tracker = f.value("_growth_tracker").and_then(number).map_or(0, |x| x as i64);
    Ok(Some(ScalerState { scale, growth_tracker }))
}

/// Reads `accumulated_stats.joblib` (an uncompressed joblib dump of a dict).
pub fn read_stats(path: &Path) -> Result<Stats, OriginalError> {
    let f = TorchFile::open(path)?;
    let frames = f.value("cumul_number_frames_played").and_then(number);
    if let Some(x) = frames {
        if !(x.is_finite() && x >= 0.0) {
            return Err(invalid(&f, format!("cumul_number_frames_played is {x}")));
        }
    }
    Ok(Stats {
        frames: frames.map(|x| x as u64),
        training_hours: f.value("cumul_training_hours").and_then(number),
        best_ms: number_map(f.value("alltime_min_ms")),
        rolling_mean_ms: number_map(f.value("rolling_mean_ms")),
    })
}

fn tensor(t: &Tensor) -> Py {
    Py::Tensor(t.shape.clone(), t.data.clone())
}

/// A file that could not be built (`file`: its name in the save folder).
fn write_error(file: &str, e: impl std::fmt::Display) -> OriginalError {
    OriginalError::Io { path: PathBuf::from(file), source: std::io::Error::other(e.to_string()) }
}

/// `weights1.torch` for `weights` (every tensor of `net`, in the network's
/// registration order, as `state_dict()` orders them).
pub fn weights_file(net: &Net, weights: &Weights) -> Result<Vec<u8>, OriginalError> {
    let mut items = Vec::with_capacity(net.tensors.len());
    for spec in &net.tensors {
        let t = weights.tensors.get(&spec.name).ok_or_else(|| OriginalError::Missing {
            path: PathBuf::from(WEIGHTS),
            what: format!("tensor {} {:?}", spec.name, spec.shape),
        })?;
        items.push((spec.name.clone(), tensor(t)));
    }
    pickle::torch_save(&Py::OrderedDict(items)).map_err(|e| write_error(WEIGHTS, e))
}

/// `optimizer1.torch`: a `torch.optim.RAdam` state dict over `net`'s
/// [`Net::torch_optimizer_parameters`] (one param group; state for the
/// trained ones, none for those the forward pass never reads).
pub fn optimizer_file(net: &Net, state: &OptimizerState) -> Result<Vec<u8>, OriginalError> {
    let listed: Vec<_> = net.torch_optimizer_parameters().collect();
    // The trained parameters, each with its place in the optimizer's list.
    let trained: Vec<(usize, &rulka_network::TensorSpec)> = listed
        .iter()
        .enumerate()
        .filter(|(_, (_, trained))| *trained)
        .map(|(at, (spec, _))| (at, *spec))
        .collect();
    if state.exp_avg.len() != trained.len() || state.exp_avg_sq.len() != trained.len() {
        return Err(write_error(
            OPTIMIZER,
            format!(
                "optimizer state for {} parameters, the network trains {}",
                state.exp_avg.len(),
                trained.len()
            ),
        ));
    }
    let mut per_param = Vec::with_capacity(trained.len());
    for (i, (at, spec)) in trained.iter().enumerate() {
        per_param.push((
            Py::Int(*at as i64),
            Py::Dict(vec![
                (Py::str("step"), Py::Tensor(vec![], vec![state.step as f32])),
                (Py::str("exp_avg"), Py::Tensor(spec.shape.clone(), state.exp_avg[i].clone())),
                (
                    Py::str("exp_avg_sq"),
                    Py::Tensor(spec.shape.clone(), state.exp_avg_sq[i].clone()),
                ),
            ]),
        ));
    }
    let group = Py::Dict(vec![
        (Py::str("lr"), Py::Float(state.lr)),
        (Py::str("betas"), Py::Tuple(vec![Py::Float(state.betas.0), Py::Float(state.betas.1)])),
        (Py::str("eps"), Py::Float(state.eps)),
        (Py::str("weight_decay"), Py::Float(state.weight_decay)),
        (Py::str("foreach"), Py::None),
        (Py::str("maximize"), Py::Bool(false)),
        (Py::str("capturable"), Py::Bool(false)),
        (Py::str("differentiable"), Py::Bool(false)),
        (Py::str("decoupled_weight_decay"), Py::Bool(false)),
        (Py::str("params"), Py::List((0..listed.len() as i64).map(Py::Int).collect())),
    ]);
    let dict = Py::Dict(vec![
        (Py::str("state"), Py::Dict(per_param)),
        (Py::str("param_groups"), Py::List(vec![group])),
    ]);
    pickle::torch_save(&dict).map_err(|e| write_error(OPTIMIZER, e))
}

/// `scaler.torch`: `GradScaler.state_dict()` with PyTorch's default growth
/// and backoff factors and interval.
pub fn scaler_file(state: &ScalerState) -> Result<Vec<u8>, OriginalError> {
    pickle::torch_save(&Py::Dict(vec![
        (Py::str("scale"), Py::Float(state.scale)),
        (Py::str("growth_factor"), Py::Float(2.0)),
        (Py::str("backoff_factor"), Py::Float(0.5)),
        (Py::str("growth_interval"), Py::Int(2000)),
        (Py::str("_growth_tracker"), Py::Int(state.growth_tracker)),
    ]))
    .map_err(|e| write_error(SCALER, e))
}

/// `accumulated_stats.joblib`: a pickle of the dict (what `joblib.load` reads).
pub fn stats_file(stats: &Stats) -> Vec<u8> {
    let map = |m: &BTreeMap<String, f64>| {
        Py::Dict(m.iter().map(|(k, v)| (Py::Str(k.clone()), Py::Float(*v))).collect())
    };
    let dict = Py::Dict(vec![
        (Py::str("cumul_number_frames_played"), Py::Int(stats.frames.unwrap_or(0) as i64)),
        (Py::str("cumul_training_hours"), Py::Float(stats.training_hours.unwrap_or(0.0))),
        (Py::str("alltime_min_ms"), map(&stats.best_ms)),
        (Py::str("rolling_mean_ms"), map(&stats.rolling_mean_ms)),
    ]);
    // A dict of plain values holds no tensor.
    pickle::plain_pickle(&dict).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Variant B network around a 1-layer ViT (only its `config.json`).
    fn vit_net(dir: &Path) -> Net {
        let vit = dir.join("vit");
        std::fs::create_dir_all(&vit).expect("folder");
        std::fs::write(vit.join("config.json"), r#"{"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 24, "image_size": 16, "patch_size": 8}"#).expect("config.json");
        let yaml = format!(
            "nn: {{image_width: 36, image_height: 36, float_hidden_dim: 8, dense_hidden_dim: 16, vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32, n_layers: 0}}}}}}",
            vit.display()
        );
        let cfg = rulka_config::Config::from_yaml_str(&yaml, "c.yaml").expect("valid");
        rulka_network::Architecture::from_config(&cfg).net
    }

    /// Moments that tell the parameters apart: parameter `i`'s are all `i`
    /// (and `-i` for the second moments).
    fn numbered(net: &Net) -> OptimizerState {
        let trained: Vec<_> = net.trained().collect();
        let fill = |sign: f32| -> Vec<Vec<f32>> {
            trained
                .iter()
                .enumerate()
                .map(|(i, t)| vec![sign * i as f32; t.shape.iter().product()])
                .collect()
        };
        OptimizerState {
            step: 7,
            exp_avg: fill(1.0),
            exp_avg_sq: fill(-1.0),
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-4,
            weight_decay: 0.0,
        }
    }

    #[test]
    fn a_vits_pooler_holds_its_place_in_the_optimizer_file_without_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let net = vit_net(dir.path());
        let state = numbered(&net);
        let path = dir.path().join(OPTIMIZER);
        std::fs::write(&path, optimizer_file(&net, &state).expect("written")).expect("write");
        let f = TorchFile::open(&path).expect("readable");
        let Some(PickleValue::List(params)) = f.value("param_groups.0.params") else {
            panic!("no param list")
        };
        let listed: Vec<(&str, bool)> = net
            .torch_optimizer_parameters()
            .map(|(t, trained)| (t.name.as_str(), trained))
            .collect();
        assert_eq!(params.len(), listed.len(), "every listed parameter, the pooler too");
        let mut trained_index = 0;
        for (at, (name, trained)) in listed.iter().enumerate() {
            let key = format!("state.{at}.exp_avg");
            if name.starts_with("backbone.pooler.") {
                assert!(!trained && !f.has_tensor(&key), "{name} at {at}: no state");
                continue;
            }
            assert!(*trained, "{name}");
            let m = f.f32(&key).expect("a trained parameter's moments");
            assert!(m.iter().all(|&x| x == trained_index as f32), "{name} at {at}: {m:?}");
            trained_index += 1;
        }
        assert_eq!(trained_index, state.exp_avg.len());
        // Read back: the same moments, parameter for parameter.
        let back = read_optimizer(&path, &net).expect("read");
        assert_eq!(
            (back.step, &back.exp_avg, &back.exp_avg_sq),
            (7, &state.exp_avg, &state.exp_avg_sq)
        );
    }

    #[test]
    fn an_optimizer_listing_another_count_of_parameters_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let net = vit_net(dir.path());
        let path = dir.path().join(OPTIMIZER);
        std::fs::write(&path, optimizer_file(&net, &numbered(&net)).expect("written"))
            .expect("write");
        // The same file read for a network without the ViT's pooler.
        let mut other = net.clone();
        other.unread_parameters.clear();
        let e = read_optimizer(&path, &other).expect_err("another count");
        assert!(e.to_string().contains("the optimizer holds"), "{e}");
    }
}
