//! The actor-critic (Variant A of the original) on tch.

use anyhow::{bail, Context as _};
use rulka_checkpoint::{Meta, Tensor as WTensor, Weights};
use rulka_config::arch::{Architecture, ConvSpec, Stem, TensorRole, PIXEL_OFFSET, PIXEL_SCALE};
use rulka_config::{float_inputs_mean_std, Config};
use tch::nn::{self, Init};
use tch::{Device, Kind, Tensor};

/// Epsilon of PyTorch's `spectral_norm` power iteration.
const SPECTRAL_EPS: f64 = 1e-12;

struct Conv {
    spec: ConvSpec,
    /// `weight`, or `weight_orig` under spectral norm.
    weight: Tensor,
    bias: Tensor,
    /// `(weight_u, weight_v)` under spectral norm.
    uv: Option<(Tensor, Tensor)>,
}

struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, Some(&self.bias))
    }
}

/// The actor-critic: image head (optional) + float MLP → trunk → policy logits and value.
///
/// Inputs are raw: frames are pixel values `0..=255` (any numeric kind,
/// normalised inside as `(x − 128) / 128`), floats are unnormalised (the
/// network holds `float_inputs_mean/std` buffers). Parameter names are the
/// original's PyTorch state-dict keys.
pub struct ActorCritic {
    arch: Architecture,
    vs: nn::VarStore,
    convs: Vec<Conv>,
    linears: Vec<Linear>,
    float_mean: Tensor,
    float_std: Tensor,
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

impl ActorCritic {
    /// A freshly initialised network for `cfg` on `device`, with PyTorch's
    /// default initialisation (`U(±1/√fan_in)` for weights and biases),
    /// seeded by `seed`, and the float normalisation statistics of the config.
    pub fn new(cfg: &Config, device: Device, seed: u64) -> Self {
        tch::manual_seed(seed as i64);
        Self::new_unseeded(cfg, device)
    }

    /// Like [`ActorCritic::new`] but drawing from libtorch's global RNG as it
    /// is, without reseeding it (for networks whose weights are loaded next,
    /// e.g. a reference copy created mid-training).
    pub fn new_unseeded(cfg: &Config, device: Device) -> Self {
        let arch = Architecture::from_config(cfg);
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mut convs = Vec::new();
        if let Some(img) = &arch.image {
            for spec in img.convs() {
                let p = sub(&root, &spec.name);
                let fan_in = (spec.c_in * spec.kernel * spec.kernel) as f64;
                let bound = 1.0 / fan_in.sqrt();
                let init = Init::Uniform { lo: -bound, up: bound };
                let k = spec.kernel as i64;
                let wshape = [spec.c_out as i64, spec.c_in as i64, k, k];
                let (weight, uv) = if img.spectral_norm {
                    let w = p.var("weight_orig", &wshape, init);
                    let u = p.zeros_no_train("weight_u", &[spec.c_out as i64]);
                    let v = p.zeros_no_train("weight_v", &[fan_in as i64]);
                    // PyTorch draws u, v ~ N(0, I) normalised, then its first training-mode
                    // forward runs one power iteration; doing that iteration here keeps a
                    // fresh checkpoint's σ = uᵀWv meaningful under eval semantics.
                    tch::no_grad(|| {
                        let ru =
                            normalize(&Tensor::randn([spec.c_out as i64], (Kind::Float, device)));
                        let w_mat = w.detach().reshape([spec.c_out as i64, -1]);
                        let nv = normalize(&w_mat.tr().mv(&ru));
                        let nu = normalize(&w_mat.mv(&nv));
                        u.shallow_clone().copy_(&nu);
                        v.shallow_clone().copy_(&nv);
                    });
                    (w, Some((u, v)))
                } else {
                    (p.var("weight", &wshape, init), None)
                };
                let bias = p.var("bias", &[spec.c_out as i64], init);
                convs.push(Conv { spec, weight, bias, uv });
            }
        }
        let linears = arch
            .linears()
            .iter()
            .map(|l| {
                let p = sub(&root, l.name);
                let bound = 1.0 / (l.d_in as f64).sqrt();
                let init = Init::Uniform { lo: -bound, up: bound };
                Linear {
                    weight: p.var("weight", &[l.d_out as i64, l.d_in as i64], init),
                    bias: p.var("bias", &[l.d_out as i64], init),
                }
            })
            .collect();
        let (mean, std) = float_inputs_mean_std(cfg);
        let float_mean = root.zeros_no_train("float_inputs_mean", &[arch.float_dim as i64]);
        let float_std = root.ones_no_train("float_inputs_std", &[arch.float_dim as i64]);
        tch::no_grad(|| {
            float_mean.shallow_clone().copy_(&Tensor::from_slice(&mean).to_device(device));
            float_std.shallow_clone().copy_(&Tensor::from_slice(&std).to_device(device));
        });
        Self { arch, vs, convs, linears, float_mean, float_std, training: true }
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
    /// PyTorch's `spectral_norm` in `train()`); evaluation mode uses the
    /// stored `weight_u`/`weight_v` as they are (as `eval()`, and as the ONNX export).
    pub fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    /// Whether in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }

    fn conv_weight(&self, conv: &Conv) -> Tensor {
        let Some((u, v)) = &conv.uv else { return conv.weight.shallow_clone() };
        let w_mat = conv.weight.reshape([conv.spec.c_out as i64, -1]);
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
        &conv.weight / sigma
    }

    fn conv(&self, i: usize, x: &Tensor) -> Tensor {
        let c = &self.convs[i];
        let w = self.conv_weight(c);
        let (s, p) = (c.spec.stride as i64, c.spec.padding as i64);
        x.conv2d(&w, Some(&c.bias), [s, s], [p, p], [1, 1], 1)
    }

    fn image_features(&self, image: &Tensor) -> Option<Tensor> {
        let img = self.arch.image.as_ref()?;
        let mut x = (image.to_kind(Kind::Float) - PIXEL_OFFSET) / PIXEL_SCALE;
        match img.stem {
            Stem::Vanilla => {
                for i in 0..4 {
                    // libtorch's fused leaky_relu (slope 0.01 = LEAKY_RELU_SLOPE).
                    x = self.conv(i, &x).leaky_relu();
                }
            }
            Stem::Impala { .. } => {
                for block in 0..3 {
                    let base = block * 5;
                    x = self.conv(base, &x).max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
                    for r in 0..2 {
                        let c0 = base + 1 + 2 * r;
                        let h = self.conv(c0 + 1, &self.conv(c0, &x.relu()).relu());
                        // Out of place: tch's `+=` is an in-place add on an autograd-tracked tensor.
                        #[allow(clippy::assign_op_pattern)]
                        {
                            x = x + h;
                        }
                    }
                }
                x = x.relu();
            }
        }
        if let Some(s) = img.adaptive_maxpool {
            x = x.adaptive_max_pool2d([s as i64, s as i64]).0;
        }
        Some(x.flatten(1, -1))
    }

    /// `(logits (B, n_heads·12), value (B, 1))` for raw frames `(B,1,H,W)`
    /// and raw floats `(B,F)`. For a float-only network `image` is ignored.
    pub fn forward(&self, image: &Tensor, floats: &Tensor) -> (Tensor, Tensor) {
        let l = &self.linears;
        let z = (floats.to_kind(Kind::Float) - &self.float_mean) / &self.float_std;
        let z = l[1].forward(&l[0].forward(&z).relu()).relu();
        let h = match self.image_features(image) {
            Some(vis) => Tensor::cat(&[vis, z], 1),
            None => z,
        };
        let h = l[3].forward(&l[2].forward(&h).relu()).relu();
        (l[4].forward(&h), l[5].forward(&h))
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
        let vars = self.vs.variables();
        let mut w = Weights::default();
        for spec in self.arch.tensors() {
            if let Some(t) = vars.get(&spec.name) {
                let flat =
                    t.detach().to_device(Device::Cpu).to_kind(Kind::Float).contiguous().view(-1);
                let data: Vec<f32> = Vec::<f32>::try_from(&flat).unwrap_or_default();
                w.tensors.insert(spec.name, WTensor { shape: spec.shape, data });
            }
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
        let vars = self.vs.variables();
        tch::no_grad(|| -> anyhow::Result<()> {
            for spec in self.arch.tensors() {
                let Some(src) = weights.get(&spec.name) else { continue };
                let dst = vars
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

    /// Names of the trainable parameters, in architecture order.
    pub fn parameter_names(&self) -> Vec<String> {
        self.arch
            .tensors()
            .into_iter()
            .filter(|t| t.role == TensorRole::Parameter)
            .map(|t| t.name)
            .collect()
    }
}

fn normalize(x: &Tensor) -> Tensor {
    let n = x.norm().clamp_min(SPECTRAL_EPS);
    x / n
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
