//! The actor-critic on tch: the [`Net`] of [`rulka_network`] (Variant A,
//! B or C of the original) interpreted with libtorch operations.

use std::collections::HashMap;

use anyhow::{bail, Context as _};
use rulka_checkpoint::{Meta, Tensor as WTensor, Weights};
use rulka_config::{float_inputs_mean_std, Config};
use rulka_network::{Architecture, TensorRole, PIXEL_OFFSET, PIXEL_SCALE};
use rulka_network::{AttnWeights, Init, Net, Op};
use tch::nn;
use tch::{Device, Kind, Tensor};

/// Epsilon of PyTorch's `spectral_norm` power iteration.
const SPECTRAL_EPS: f64 = 1e-12;

/// The actor-critic: `(logits, value)` from a frame and the floats.
///
/// Inputs are raw: frames are pixel values `0..=255` (any numeric kind,
/// normalised inside as `(x − 128) / 128`), floats are unnormalised (the
/// network holds `float_inputs_mean/std` buffers). Tensor names are the
/// original's PyTorch state-dict keys.
pub struct ActorCritic {
    arch: Architecture,
    vs: nn::VarStore,
    vars: HashMap<String, Tensor>,
    training: bool,
}

impl std::fmt::Debug for ActorCritic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorCritic")
            .field("arch", &self.arch.summary())
            .field("training", &self.training)
            .finish()
    }
}

/// Output of [`ActorCritic::evaluate_actions`], each of shape `(B,)`.
#[derive(Debug)]
pub struct Evaluation {
    /// `log π(a|s)` summed over action heads.
    pub log_prob: Tensor,
    /// Entropy summed over action heads.
    pub entropy: Tensor,
    /// `V(s)`.
    pub value: Tensor,
}

fn sub<'a>(root: &nn::Path<'a>, dotted: &str) -> nn::Path<'a> {
    dotted.split('.').fold(root.clone(), |p, part| p / part)
}

/// `N(0, σ²)` truncated at ±2σ, drawn by inverting the normal CDF on a
/// uniform sample, as PyTorch's `trunc_normal_`.
fn trunc_normal(shape: &[i64], std: f64, device: Device) -> Tensor {
    // P(|z| < 2) = erf(√2): u ~ U(−erf(√2), erf(√2)), z = √2·erfinv(u).
    const ERF_SQRT2: f64 = 0.954_499_736_103_641_6;
    let u = Tensor::empty(shape, (Kind::Float, device)).uniform_(-ERF_SQRT2, ERF_SQRT2);
    (u.erfinv() * (std * std::f64::consts::SQRT_2)).clamp(-2.0 * std, 2.0 * std)
}

fn normalize(x: &Tensor) -> Tensor {
    let n = x.norm().clamp_min(SPECTRAL_EPS);
    x / n
}

impl ActorCritic {
    /// A freshly initialised network for `cfg` on `device` with PyTorch's
    /// default initialisation of each layer, seeded by `seed`, and the float
    /// normalisation statistics of the config. A Hugging Face backbone is
    /// initialised randomly too; [`ActorCritic::new_pretrained`] loads its folder.
    pub fn new(cfg: &Config, device: Device, seed: u64) -> Self {
        tch::manual_seed(seed as i64);
        Self::new_unseeded(cfg, device)
    }

    /// [`ActorCritic::new`], then the weights of every Hugging Face model the
    /// config names, from its folder's `model.safetensors` — what a fresh run
    /// starts from. A missing folder or tensor is an error naming it.
    pub fn new_pretrained(cfg: &Config, device: Device, seed: u64) -> anyhow::Result<Self> {
        let mut net = Self::new(cfg, device, seed);
        net.load_pretrained()?;
        Ok(net)
    }

    /// Like [`ActorCritic::new`] but drawing from libtorch's global RNG as it
    /// is, without reseeding it (for networks whose weights are loaded next,
    /// e.g. a reference copy created mid-training).
    pub fn new_unseeded(cfg: &Config, device: Device) -> Self {
        let arch = Architecture::from_config(cfg);
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let (mean, std) = float_inputs_mean_std(cfg);
        let mut vars: HashMap<String, Tensor> = HashMap::new();
        // A spectral-norm weight_v computed with its weight_u (the next tensor).
        let mut spectral_v: HashMap<String, Tensor> = HashMap::new();
        let net = &arch.net;
        for (spec, init) in net.tensors.iter().zip(&net.inits) {
            let shape: Vec<i64> = spec.shape.iter().map(|&d| d as i64).collect();
            let value = tch::no_grad(|| match *init {
                Init::Uniform(b) => Tensor::empty(&shape, (Kind::Float, device)).uniform_(-b, b),
                Init::TruncNormal(s) => trunc_normal(&shape, s, device),
                Init::Zeros => Tensor::zeros(&shape, (Kind::Float, device)),
                Init::Ones => Tensor::ones(&shape, (Kind::Float, device)),
                Init::FloatMean => Tensor::from_slice(&mean).to_device(device),
                Init::FloatStd => Tensor::from_slice(&std).to_device(device),
                Init::SpectralU => {
                    // PyTorch draws u ~ N(0, I) normalised, then its first training-mode
                    // forward runs one power iteration; doing that iteration here keeps a
                    // fresh checkpoint's σ = uᵀWv meaningful under eval semantics.
                    let p = spec.name.trim_end_matches("_u");
                    let w = &vars[&format!("{p}_orig")];
                    let c_out = w.size()[0];
                    let w_mat = w.detach().reshape([c_out, -1]);
                    let ru = normalize(&Tensor::randn([c_out], (Kind::Float, device)));
                    let nv = normalize(&w_mat.tr().mv(&ru));
                    let nu = normalize(&w_mat.mv(&nv));
                    spectral_v.insert(format!("{p}_v"), nv);
                    nu
                }
                Init::SpectralV => spectral_v
                    .remove(&spec.name)
                    .unwrap_or_else(|| Tensor::zeros(&shape, (Kind::Float, device))),
            });
            let (path, leaf) = match spec.name.rsplit_once('.') {
                Some((path, leaf)) => (sub(&root, path), leaf),
                None => (root.clone(), spec.name.as_str()),
            };
            let var = if net.is_trained(spec) {
                path.var_copy(leaf, &value)
            } else {
                let t = path.zeros_no_train(leaf, &shape);
                tch::no_grad(|| t.shallow_clone().copy_(&value));
                t
            };
            vars.insert(spec.name.clone(), var);
        }
        Self { arch, vs, vars, training: true }
    }

    /// Copies each Hugging Face model's weights from its folder's
    /// `model.safetensors` (F32; keys with or without the `vit.`/`bert.`
    /// prefix a task head adds). Only a pooler may be missing (the original
    /// never uses it). Returns how many tensors were loaded.
    pub fn load_pretrained(&mut self) -> anyhow::Result<usize> {
        let mut loaded = 0;
        for pre in self.arch.net.pretrained.clone() {
            let file = std::path::Path::new(&pre.folder).join("model.safetensors");
            let w = Weights::read(&file).with_context(|| {
                format!("loading the Hugging Face model {} (model_name_or_path)", pre.folder)
            })?;
            let mut missing = Vec::new();
            for spec in self.arch.net.tensors.iter().filter(|t| t.name.starts_with(&pre.prefix)) {
                let key = &spec.name[pre.prefix.len()..];
                let src = ["", "vit.", "bert."].iter().find_map(|p| w.get(&format!("{p}{key}")));
                let Some(src) = src else {
                    if !key.starts_with("pooler.") {
                        missing.push(key.to_string());
                    }
                    continue;
                };
                if src.shape != spec.shape {
                    bail!(
                        "{}: {key} has shape {:?}; the network needs {:?}",
                        file.display(),
                        src.shape,
                        spec.shape
                    );
                }
                let dst = &self.vars[&spec.name];
                tch::no_grad(|| {
                    let v = Tensor::from_slice(&src.data)
                        .reshape(dst.size().as_slice())
                        .to_device(dst.device());
                    dst.shallow_clone().copy_(&v);
                });
                loaded += 1;
            }
            if !missing.is_empty() {
                bail!(
                    "{}: {} tensor(s) the model needs are missing: {}",
                    file.display(),
                    missing.len(),
                    missing.join(", ")
                );
            }
        }
        Ok(loaded)
    }

    /// The architecture.
    pub fn arch(&self) -> &Architecture {
        &self.arch
    }

    /// The variable store (for optimisers).
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// Mutable variable store.
    pub fn var_store_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    /// Training mode runs one spectral-norm power iteration per forward (as
    /// PyTorch's `spectral_norm` in `train()`) and applies dropout;
    /// evaluation mode uses the stored `weight_u`/`weight_v` as they are and
    /// no dropout (as `eval()`, and as the ONNX export).
    pub fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    /// Whether in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }

    fn var(&self, name: &str) -> &Tensor {
        // Every name an op refers to was created from the same Net.
        &self.vars[name]
    }

    fn conv_weight(&self, p: &str, spectral: bool) -> Tensor {
        if !spectral {
            return self.var(&format!("{p}.weight")).shallow_clone();
        }
        let weight = self.var(&format!("{p}.weight_orig"));
        let (u, v) = (self.var(&format!("{p}.weight_u")), self.var(&format!("{p}.weight_v")));
        let w_mat = weight.reshape([weight.size()[0], -1]);
        if self.training {
            tch::no_grad(|| {
                let w = w_mat.detach();
                let nv = normalize(&w.tr().mv(u));
                v.shallow_clone().copy_(&nv);
                let nu = normalize(&w.mv(v));
                u.shallow_clone().copy_(&nu);
            });
        }
        let sigma = u.dot(&w_mat.mv(v));
        weight / sigma
    }

    fn linear(&self, p: &str, bias: bool, x: &Tensor) -> Tensor {
        let b = bias.then(|| self.var(&format!("{p}.bias")));
        x.linear(self.var(&format!("{p}.weight")), b)
    }

    fn attention(&self, w: &AttnWeights, heads: usize, dropout: f64, x: &Tensor) -> Tensor {
        let size = x.size();
        let (l, d) = (size[1], size[2]);
        let (q, k, v, out) = match w {
            AttnWeights::Packed(p) => {
                let (wi, bi) = (
                    self.var(&format!("{p}.in_proj_weight")),
                    self.var(&format!("{p}.in_proj_bias")),
                );
                let part =
                    |i: i64| x.linear(&wi.narrow(0, i * d, d), Some(&bi.narrow(0, i * d, d)));
                (part(0), part(1), part(2), format!("{p}.out_proj"))
            }
            AttnWeights::Separate { q, k, v, out, qkv_bias } => (
                self.linear(q, *qkv_bias, x),
                self.linear(k, *qkv_bias, x),
                self.linear(v, *qkv_bias, x),
                out.clone(),
            ),
        };
        let h = heads as i64;
        let dh = d / h;
        let split = |t: &Tensor| t.reshape([-1, l, h, dh]).transpose(1, 2);
        let scores = split(&q).matmul(&split(&k).transpose(-2, -1)) / (dh as f64).sqrt();
        let mut probs = scores.softmax(-1, Kind::Float);
        if self.training && dropout > 0.0 {
            probs = probs.dropout(dropout, true);
        }
        let o = probs.matmul(&split(&v)).transpose(1, 2).reshape([-1, l, d]);
        self.linear(&out, true, &o)
    }

    /// `(logits (B, n_heads·12), value (B, 1))` for raw frames `(B,1,H,W)`
    /// and raw floats `(B,F)`. For a float-only network `image` is ignored.
    pub fn forward(&self, image: &Tensor, floats: &Tensor) -> (Tensor, Tensor) {
        let net: &Net = &self.arch.net;
        let vals = self.node_values(image, floats);
        (vals[net.logits].shallow_clone(), vals[net.value].shallow_clone())
    }

    /// [`ActorCritic::forward`] plus the features the policy head reads
    /// (its input, `(B, D)`), when the policy head is one linear layer
    /// (`policy_head`) — what behaviour cloning's extra heads read.
    pub fn forward_features(
        &self,
        image: &Tensor,
        floats: &Tensor,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        let net: &Net = &self.arch.net;
        let vals = self.node_values(image, floats);
        let features = match &net.nodes[net.logits].op {
            Op::Linear { p, .. } if p == "policy_head" => {
                Some(vals[net.nodes[net.logits].inputs[0]].shallow_clone())
            }
            _ => None,
        };
        (vals[net.logits].shallow_clone(), vals[net.value].shallow_clone(), features)
    }

    /// The tensor `name` of the state dict (a parameter or a buffer).
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.vars.get(name)
    }

    /// Maps the value head's output `v` to `scale·v + shift` in place, by
    /// its weight and bias (PopArt's change of units; no gradient recorded).
    pub(crate) fn rescale_value_head(&self, scale: f64, shift: f64) -> anyhow::Result<()> {
        let (w, b) = match (self.vars.get("value_head.weight"), self.vars.get("value_head.bias")) {
            (Some(w), Some(b)) => (w, b),
            _ => anyhow::bail!("the network has no value_head.weight and value_head.bias"),
        };
        // Shallow clones share the parameters' storage: the in-place ops
        // below change the parameters themselves.
        let (mut w, mut b) = (w.shallow_clone(), b.shallow_clone());
        tch::no_grad(|| -> anyhow::Result<()> {
            let _ = w.f_mul_scalar_(scale)?;
            let _ = b.f_mul_scalar_(scale)?;
            let _ = b.f_add_scalar_(shift)?;
            Ok(())
        })
    }

    /// Every node's value for one forward pass.
    fn node_values(&self, image: &Tensor, floats: &Tensor) -> Vec<Tensor> {
        let net: &Net = &self.arch.net;
        let mut vals: Vec<Tensor> = Vec::with_capacity(net.nodes.len());
        for node in &net.nodes {
            let x = |i: usize| &vals[node.inputs[i]];
            let out = match &node.op {
                Op::Image => (image.to_kind(Kind::Float) - PIXEL_OFFSET) / PIXEL_SCALE,
                Op::Floats => {
                    (floats.to_kind(Kind::Float) - self.var("float_inputs_mean"))
                        / self.var("float_inputs_std")
                }
                Op::Conv2d { p, stride, pad, spectral, .. } => {
                    let (s, q) = (*stride as i64, *pad as i64);
                    let w = self.conv_weight(p, *spectral);
                    x(0).conv2d(&w, Some(self.var(&format!("{p}.bias"))), [s, s], [q, q], [1, 1], 1)
                }
                Op::Conv1d { p, pad, .. } => x(0).conv1d(
                    self.var(&format!("{p}.weight")),
                    Some(self.var(&format!("{p}.bias"))),
                    [1],
                    [*pad as i64],
                    [1],
                    1,
                ),
                Op::Linear { p, bias } => self.linear(p, *bias, x(0)),
                Op::Relu => x(0).relu(),
                // libtorch's fused leaky_relu (slope 0.01 = LEAKY_RELU_SLOPE).
                Op::LeakyRelu => x(0).leaky_relu(),
                Op::Gelu => x(0).gelu("none"),
                Op::MaxPool2d { kernel, stride, pad } => {
                    let (k, s, p) = (*kernel as i64, *stride as i64, *pad as i64);
                    x(0).max_pool2d([k, k], [s, s], [p, p], [1, 1], false)
                }
                Op::AdaptiveMaxPool2d { out } => {
                    x(0).adaptive_max_pool2d([*out as i64, *out as i64]).0
                }
                Op::Add => x(0) + x(1),
                Op::Concat => {
                    let parts: Vec<&Tensor> = node.inputs.iter().map(|&i| &vals[i]).collect();
                    Tensor::cat(&parts, 1)
                }
                Op::LayerNorm { p, eps } => x(0).layer_norm(
                    [node.dims[node.dims.len() - 1] as i64],
                    Some(self.var(&format!("{p}.weight"))),
                    Some(self.var(&format!("{p}.bias"))),
                    *eps,
                    false,
                ),
                Op::Attention { w, heads, dropout } => self.attention(w, *heads, *dropout, x(0)),
                Op::PatchTokens => x(0).flatten(2, -1).transpose(1, 2),
                Op::AddParam { name, rows } => {
                    let p = self.var(name);
                    match rows {
                        Some(r) => x(0) + p.narrow(0, 0, *r as i64),
                        None => x(0) + p,
                    }
                }
                Op::PrependParam { name } => {
                    let t = x(0);
                    let p = self.var(name);
                    let cls = p.expand([t.size()[0], 1, p.size()[2]], false);
                    Tensor::cat(&[&cls, t], 1)
                }
                Op::Mean { axis } => {
                    x(0).mean_dim([*axis as i64 + 1].as_slice(), false, Kind::Float)
                }
                Op::Token { index } => x(0).select(1, *index as i64),
                Op::Reshape => {
                    let mut shape = vec![-1i64];
                    shape.extend(node.dims.iter().map(|&d| d as i64));
                    x(0).reshape(shape)
                }
                Op::Transpose => x(0).transpose(1, 2),
                Op::HfPixels { height, width, mean_std } => {
                    let t = x(0).repeat([1, 3, 1, 1]).upsample_bilinear2d(
                        [*height as i64, *width as i64],
                        false,
                        None,
                        None,
                    );
                    let t = (t.clamp(-1.0, 1.0) + 1.0) * 0.5;
                    match mean_std {
                        Some((m, s)) => {
                            let dev = t.device();
                            let col = |v: &[f64; 3]| {
                                Tensor::from_slice(&v.map(|x| x as f32))
                                    .to_device(dev)
                                    .view([1, 3, 1, 1])
                            };
                            (t - col(m)) / col(s)
                        }
                        None => t,
                    }
                }
                Op::Zeros => {
                    let mut shape = vec![x(0).size()[0]];
                    shape.extend(node.dims.iter().map(|&d| d as i64));
                    Tensor::zeros(shape, (Kind::Float, x(0).device()))
                }
                Op::Dropout { p } => {
                    if self.training {
                        x(0).dropout(*p, true)
                    } else {
                        x(0).shallow_clone()
                    }
                }
            };
            vals.push(out);
        }
        vals
    }

    /// Log-probability and entropy of `actions` `(B, n_heads)` (int64), each
    /// summed over heads, and the value; all `(B,)`.
    pub fn evaluate_actions(
        &self,
        image: &Tensor,
        floats: &Tensor,
        actions: &Tensor,
    ) -> Evaluation {
        let (logits, value) = self.forward(image, floats);
        let (log_prob, entropy) =
            logprob_entropy(&logits, actions, self.arch.n_heads, self.arch.n_actions);
        Evaluation { log_prob, entropy, value: value.squeeze_dim(-1) }
    }

    /// Every tensor as plain `f32` data, with the original's names.
    pub fn to_weights(&self) -> Weights {
        let mut w = Weights::default();
        for spec in &self.arch.net.tensors {
            let t = self.var(&spec.name);
            let flat = t.detach().to_device(Device::Cpu).to_kind(Kind::Float).contiguous().view(-1);
            let data: Vec<f32> = Vec::<f32>::try_from(&flat).unwrap_or_default();
            w.tensors.insert(spec.name.clone(), WTensor { shape: spec.shape.clone(), data });
        }
        w
    }

    /// Copies `weights` into the network after [`Weights::check`] (names,
    /// shapes and, for rulka files, the network hash of `cfg`). With
    /// `allow_partial`, tensors the file lacks keep their current values.
    /// Nothing is changed when the check fails.
    pub fn load_weights(
        &mut self,
        weights: &Weights,
        cfg: &Config,
        allow_partial: bool,
    ) -> anyhow::Result<()> {
        weights.check(&self.arch, &cfg.network_hash(), allow_partial)?;
        if weights.tensors.values().any(|t| t.data.iter().any(|x| !x.is_finite())) {
            bail!("weights contain non-finite values; refusing to load them");
        }
        tch::no_grad(|| -> anyhow::Result<()> {
            for spec in &self.arch.net.tensors {
                let Some(src) = weights.get(&spec.name) else { continue };
                let dst = self
                    .vars
                    .get(&spec.name)
                    .with_context(|| format!("network has no variable {}", spec.name))?;
                let shape: Vec<i64> = spec.shape.iter().map(|&d| d as i64).collect();
                let value =
                    Tensor::from_slice(&src.data).reshape(shape.as_slice()).to_device(dst.device());
                dst.shallow_clone().copy_(&value);
            }
            Ok(())
        })
    }

    /// Writes an atomic checkpoint of the network at training step `step`.
    pub fn save(&self, path: &std::path::Path, cfg: &Config, step: u64) -> anyhow::Result<()> {
        let w = self.to_weights();
        if !w.all_finite() {
            bail!("network weights are not finite; refusing to write {}", path.display());
        }
        w.write(path, &Meta::new(cfg, step))
            .with_context(|| format!("writing checkpoint {}", path.display()))
    }

    /// Names of the trained parameters (the optimiser's, in its order):
    /// parameters not frozen by `nn.vis.freeze` / `nn.encoder.freeze`.
    pub fn parameter_names(&self) -> Vec<String> {
        let net = &self.arch.net;
        net.trained().map(|t| t.name.clone()).collect()
    }

    /// Whether tensor `name` belongs to the image encoder: Variant A/C's CNN
    /// (`img_head.*`) or a Hugging Face backbone (what `training.freeze`'s
    /// `encoder_updates` holds, as the original's `pretrain_encoder_freeze`).
    pub fn is_encoder_tensor(&self, name: &str) -> bool {
        name.starts_with("img_head.")
            || self.arch.net.pretrained.iter().any(|p| name.starts_with(&p.prefix))
    }

    /// Names of the parameters training keeps fixed (frozen), for logs.
    pub fn frozen_parameter_names(&self) -> Vec<String> {
        let net = &self.arch.net;
        net.tensors
            .iter()
            .filter(|t| t.role == TensorRole::Parameter && !net.is_trained(t))
            .map(|t| t.name.clone())
            .collect()
    }
}

/// Log-probability of `actions` `(B, n_heads)` under `logits` `(B, n_heads·n_actions)`
/// and the entropy, both summed over the independent heads; `(B,)` each.
pub fn logprob_entropy(
    logits: &Tensor,
    actions: &Tensor,
    n_heads: usize,
    n_actions: usize,
) -> (Tensor, Tensor) {
    let logits = logits.reshape([-1, n_heads as i64, n_actions as i64]);
    let logp_all = logits.log_softmax(-1, Kind::Float);
    let actions = actions.reshape([-1, n_heads as i64, 1]).to_kind(Kind::Int64);
    let logp = logp_all.gather(-1, &actions, false).squeeze_dim(-1).sum_dim_intlist(
        -1,
        false,
        Kind::Float,
    );
    let ent =
        -(logp_all.exp() * &logp_all).sum_dim_intlist([-1i64, -2].as_slice(), false, Kind::Float);
    (logp, ent)
}
