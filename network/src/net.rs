//! The actor-critic as data: every tensor of its state dict (the original's
//! PyTorch names, shapes, how a fresh network initialises it) and its forward
//! pass as a list of primitive operations over numbered values. The tch
//! learner and the ONNX exporter each interpret these primitives, so the
//! three networks of the original — Variant A (CNN + float MLP), B (a
//! Hugging Face ViT's CLS token + float MLP) and C (the multimodal fusion
//! networks, `nn.fusion_mode`) — are each defined once, here.
//!
//! Values carry a leading batch dimension that [`Node::dims`] leaves out: a
//! feature vector is `[D]`, a token sequence `[L, D]`, an image `[C, H, W]`.
//!
//! ```
//! use rulka_config::Config;
//! use rulka_network::{Net, Op};
//!
//! let cfg = Config::from_yaml_str("nn: {fusion_mode: unified, vis: {transformer: {patch_size: 16}}}", "c")?;
//! let net = Net::from_config(&cfg);
//! assert!(net.nodes.iter().any(|n| matches!(n.op, Op::Attention { .. })));
//! assert_eq!(net.nodes[net.logits].dims, vec![12]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use rulka_config::{
    BertSpec, FloatTokenInput, FloatTokenLayout, FusionEncoder, FusionTokens, HfModel,
    PostConcatLayout, TransformerConfig, VitSpec,
};
use rulka_config::{Config, FusionMode, NetworkKind, VisBranch, N_ACTIONS};

use crate::spec::{CnnArch, Stem, TensorRole, TensorSpec};

/// Index of a value: the node that computed it.
pub type Val = usize;

/// LayerNorm epsilon of PyTorch's `nn.TransformerEncoderLayer`.
pub const TORCH_LAYER_NORM_EPS: f64 = 1e-5;
/// Standard deviation of Hugging Face's `initializer_range` init.
pub const HF_INIT_STD: f64 = 0.02;

/// How a fresh network initialises a tensor (each layer's PyTorch default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// `U(−b, b)`.
    Uniform(f64),
    /// `N(0, σ²)` truncated at ±2σ (Hugging Face's `trunc_normal_`).
    TruncNormal(f64),
    /// Zeros.
    Zeros,
    /// Ones.
    Ones,
    /// The config's float normalisation means.
    FloatMean,
    /// The config's float normalisation standard deviations.
    FloatStd,
    /// A spectral-norm `weight_u` (one power iteration on the drawn weight).
    SpectralU,
    /// A spectral-norm `weight_v`.
    SpectralV,
}

/// Where an attention layer's projections live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttnWeights {
    /// PyTorch `nn.MultiheadAttention`: `{p}.in_proj_weight` `[3D, D]` and
    /// `{p}.in_proj_bias` (query | key | value rows), `{p}.out_proj`.
    Packed(String),
    /// Hugging Face: separate query, key and value linears (biases when
    /// `qkv_bias`) and an output linear, by prefix.
    Separate {
        /// Query linear.
        q: String,
        /// Key linear.
        k: String,
        /// Value linear.
        v: String,
        /// Output linear.
        out: String,
        /// Whether q, k, v have biases.
        qkv_bias: bool,
    },
}

/// One primitive operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The raw frame `[1, H, W]` as `(x − 128)/128`.
    Image,
    /// The raw floats `[F]` as `(x − float_inputs_mean)/float_inputs_std`.
    Floats,
    /// 2-D convolution, `{p}.weight` (or spectral `{p}.weight_orig/_u/_v`) and `{p}.bias`.
    Conv2d {
        /// Tensor prefix.
        p: String,
        /// Square kernel.
        kernel: usize,
        /// Stride.
        stride: usize,
        /// Zero padding on each side.
        pad: usize,
        /// Spectrally normalised weight.
        spectral: bool,
    },
    /// 1-D convolution over `[C, L]`, `{p}.weight` `[C', C, k]`, `{p}.bias`.
    Conv1d {
        /// Tensor prefix.
        p: String,
        /// Kernel size.
        kernel: usize,
        /// Zero padding on each side.
        pad: usize,
    },
    /// `x·Wᵀ + b` on the last axis: `{p}.weight` `[out, in]`, `{p}.bias` when `bias`.
    Linear {
        /// Tensor prefix.
        p: String,
        /// Has `{p}.bias`.
        bias: bool,
    },
    /// ReLU.
    Relu,
    /// LeakyReLU with [`crate::LEAKY_RELU_SLOPE`].
    LeakyRelu,
    /// Exact GELU, `x·Φ(x)`.
    Gelu,
    /// 2-D max pooling.
    MaxPool2d {
        /// Square window.
        kernel: usize,
        /// Stride.
        stride: usize,
        /// Padding (−∞) on each side.
        pad: usize,
    },
    /// PyTorch's `AdaptiveMaxPool2d((s, s))`.
    AdaptiveMaxPool2d {
        /// Output side s.
        out: usize,
    },
    /// Elementwise sum of the two inputs.
    Add,
    /// Concatenation of the inputs along their first non-batch axis.
    Concat,
    /// LayerNorm over the last axis, `{p}.weight`, `{p}.bias`.
    LayerNorm {
        /// Tensor prefix.
        p: String,
        /// Epsilon.
        eps: f64,
    },
    /// Multi-head scaled dot-product self-attention over `[L, D]`.
    Attention {
        /// Projection tensors.
        w: AttnWeights,
        /// Heads.
        heads: usize,
        /// Dropout on the attention probabilities (training only).
        dropout: f64,
    },
    /// `[C, H, W]` → `[H·W, C]` (PyTorch's `flatten(2).transpose(1, 2)`).
    PatchTokens,
    /// Adds a parameter broadcast over the batch: `name` of shape
    /// `[1, L, D]`, or the first `rows` rows of a `[R, D]` table.
    AddParam {
        /// Tensor name.
        name: String,
        /// Rows of a table to add (`None`: the whole `[1, L, D]` tensor).
        rows: Option<usize>,
    },
    /// Puts the `[1, 1, D]` parameter `name` in front of `[L, D]` tokens.
    PrependParam {
        /// Tensor name.
        name: String,
    },
    /// Mean over a non-batch axis (0: tokens of `[L, D]`; 1: positions of `[C, L]`).
    Mean {
        /// Non-batch axis.
        axis: usize,
    },
    /// One token of `[L, D]`: `[D]`.
    Token {
        /// Token index.
        index: usize,
    },
    /// Reshape to this node's dims (same element count).
    Reshape,
    /// Swaps the two axes of a rank-2 value (`[L, D]` ↔ `[D, L]`).
    Transpose,
    /// The original's Hugging Face pixel preparation of a normalised frame
    /// `[1, H, W]`: 3 channels, bilinear resize (`align_corners=False`),
    /// `clamp(−1, 1)`, `(x + 1)/2`, then `(x − mean)/std` per channel.
    HfPixels {
        /// Resize target height.
        height: usize,
        /// Resize target width.
        width: usize,
        /// Per-channel mean and std (None: no normalisation).
        mean_std: Option<([f64; 3], [f64; 3])>,
    },
    /// Zeros of this node's dims; the input gives the batch size.
    Zeros,
    /// Dropout (training only; identity in evaluation and in the export).
    Dropout {
        /// Drop probability.
        p: f64,
    },
}

/// One operation and what it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// Input values.
    pub inputs: Vec<Val>,
    /// Output shape without the batch dimension.
    pub dims: Vec<usize>,
}

/// A Hugging Face model whose weights a fresh network takes from its folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pretrained {
    /// State-dict prefix of the model's tensors (e.g. `backbone.`).
    pub prefix: String,
    /// The local folder (`model.safetensors` inside).
    pub folder: String,
}

/// The network: tensors and forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Net {
    /// Every tensor of the state dict, in registration order.
    pub tensors: Vec<TensorSpec>,
    /// Their initialisation, index for index.
    pub inits: Vec<Init>,
    /// The forward pass; node i computes value i.
    pub nodes: Vec<Node>,
    /// The policy logits `[12·N]`.
    pub logits: Val,
    /// The value `[1]`.
    pub value: Val,
    /// Hugging Face models to load into a fresh network.
    pub pretrained: Vec<Pretrained>,
    /// Prefixes of the tensors `nn.vis.freeze` / `nn.encoder.freeze` keep fixed.
    pub frozen_prefixes: Vec<String>,
    /// Tensors that are buffers here but parameters in PyTorch, which the
    /// forward pass never reads (a BERT's word embeddings under
    /// `inputs_embeds`, a Hugging Face pooler): they get no gradient there
    /// either, but hold a place in an optimizer's parameter list.
    pub unread_parameters: Vec<String>,
}

impl Net {
    /// The network `cfg` describes (a validated config).
    pub fn from_config(cfg: &Config) -> Self {
        let mut b = Builder::default();
        let (logits, value) = match cfg.network_kind() {
            NetworkKind::A => variant_a(&mut b, cfg),
            NetworkKind::B => variant_b(&mut b, cfg),
            NetworkKind::C => variant_c(&mut b, cfg),
        };
        let frozen_prefixes = frozen_prefixes(cfg);
        let (tensors, inits) = torch_layers_in_registration_order(b.tensors, b.inits);
        let (mut tensors, mut inits) = hf_layers_in_registration_order(tensors, inits);
        if cfg.network_kind() == NetworkKind::C {
            (tensors, inits) = in_variant_c_registration_order(tensors, inits);
        }
        Net {
            tensors,
            inits,
            nodes: b.nodes,
            logits,
            value,
            pretrained: b.pretrained,
            frozen_prefixes,
            unread_parameters: b.unread_parameters,
        }
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorSpec> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The tensors training updates, in registration order: PyTorch's
    /// `parameters()` order without the frozen ones, which is how an
    /// optimizer's state is indexed.
    pub fn trained(&self) -> impl Iterator<Item = &TensorSpec> {
        self.tensors.iter().filter(|t| self.is_trained(t))
    }

    /// Whether training keeps `name` fixed (a buffer, or frozen by `nn.*.freeze`).
    pub fn is_trained(&self, t: &TensorSpec) -> bool {
        t.role == TensorRole::Parameter && !self.is_frozen(t)
    }

    fn is_frozen(&self, t: &TensorSpec) -> bool {
        self.frozen_prefixes.iter().any(|p| prefix_matches(&t.name, p))
    }

    /// The parameters a PyTorch optimizer over the original's trainable
    /// parameters lists, in its order (`parameters()` without the frozen
    /// ones): [`Net::trained`] and, in their places, the
    /// [`Net::unread_parameters`] (which never get a gradient, so never an
    /// optimizer state). Each with whether rulka trains it.
    pub fn torch_optimizer_parameters(&self) -> impl Iterator<Item = (&TensorSpec, bool)> {
        self.tensors.iter().filter_map(|t| {
            if self.is_trained(t) {
                Some((t, true))
            } else if !self.is_frozen(t) && self.unread_parameters.contains(&t.name) {
                Some((t, false))
            } else {
                None
            }
        })
    }
}

/// A Hugging Face encoder layer's submodules in `transformers`'
/// registration order (`ViTLayer`: the attention, intermediate and output
/// blocks before `layernorm_before` and `layernorm_after`, which the
/// builder adds in forward order; `BertLayer`'s forward order is already
/// its registration order).
const HF_LAYER_PARTS: [&str; 5] =
    ["attention.", "intermediate.", "output.", "layernorm_before.", "layernorm_after."];

/// Each Hugging Face encoder layer's tensors (`….encoder.layer.{i}.…`) in
/// `state_dict()` order; everything else stays where it is.
fn hf_layers_in_registration_order(
    tensors: Vec<TensorSpec>,
    inits: Vec<Init>,
) -> (Vec<TensorSpec>, Vec<Init>) {
    in_layer_part_order(tensors, inits, ".encoder.layer.", &HF_LAYER_PARTS)
}

/// `nn.TransformerEncoderLayer`'s submodules in registration order (the
/// builder adds them in forward order: `norm1` before the feed-forward).
const TORCH_LAYER_PARTS: [&str; 5] = ["self_attn.", "linear1.", "linear2.", "norm1.", "norm2."];

/// Each PyTorch encoder layer's tensors (`….layers.{i}.self_attn…`) in
/// `state_dict()` order; everything else stays where it is.
fn torch_layers_in_registration_order(
    tensors: Vec<TensorSpec>,
    inits: Vec<Init>,
) -> (Vec<TensorSpec>, Vec<Init>) {
    in_layer_part_order(tensors, inits, ".layers.", &TORCH_LAYER_PARTS)
}

/// Sorts the tensors of each layer (`…{marker}{i}.…`, a run of adjacent
/// tensors) by the rank of their part in `parts`, stably; tensors of no
/// such layer stay where they are.
fn in_layer_part_order(
    tensors: Vec<TensorSpec>,
    inits: Vec<Init>,
    marker: &str,
    parts: &[&str],
) -> (Vec<TensorSpec>, Vec<Init>) {
    // (the layer's prefix, the part's rank) for a tensor of such a layer.
    let part = |name: &str| -> Option<(String, usize)> {
        let at = name.find(marker)? + marker.len();
        let rest = &name[at..];
        let dot = rest.find('.')?;
        let (prefix, tail) = (&name[..at + dot + 1], &rest[dot + 1..]);
        let rank = parts.iter().position(|p| tail.starts_with(p))?;
        Some((prefix.to_string(), rank))
    };
    let mut both: Vec<(TensorSpec, Init)> = tensors.into_iter().zip(inits).collect();
    let mut start = 0;
    while start < both.len() {
        let Some((prefix, _)) = part(&both[start].0.name) else {
            start += 1;
            continue;
        };
        let mut end = start;
        while end < both.len() && part(&both[end].0.name).is_some_and(|(p, _)| p == prefix) {
            end += 1;
        }
        both[start..end].sort_by_key(|(t, _)| part(&t.name).map_or(0, |(_, r)| r));
        start = end;
    }
    both.into_iter().unzip()
}

/// `TorchMultimodalActorCritic`'s own parameters, in the order its
/// `__init__` assigns them (whichever a mode has).
const VARIANT_C_OWN_PARAMETERS: [&str; 5] =
    ["pos_vis", "float_per_feat_slot_emb", "pos_pc", "pos_vf", "pos_uni"];

/// Its submodules, in the order `__init__` first assigns a module to them
/// (in every mode, those a mode has come in this order).
const VARIANT_C_SUBMODULES: [&str; 25] = [
    "_hf_vis_backbone",
    "_hf_fusion_bb",
    "float_feature_extractor",
    "img_head",
    "cnn_to_vis",
    "cnn_to_fuse",
    "postconcat_cnn_to_fuse",
    "patch_embed",
    "enc_vis",
    "hf_vis_proj",
    "vis_refine",
    "vis_to_fuse",
    "float_scalar_to_tok",
    "float_to_tokens",
    "fused_to_seq",
    "visfloat_to_seq",
    "bridge",
    "enc_fusion_native",
    "fusion_mlp_mod",
    "fusion_cnn_mod",
    "hf_fusion_proj_in",
    "hf_fusion_proj_out",
    "trunk",
    "policy_head",
    "value_head",
];

/// Variant C's tensors as `state_dict()` lists them: the module's own
/// parameters, its buffers, then each submodule's tensors in registration
/// order (the builder adds them in forward order). `parameters()` is this
/// order without the buffers, and a RAdam state dict is indexed by it.
fn in_variant_c_registration_order(
    tensors: Vec<TensorSpec>,
    inits: Vec<Init>,
) -> (Vec<TensorSpec>, Vec<Init>) {
    let rank = |name: &str| {
        let top = name.split('.').next().unwrap_or(name);
        if let Some(i) = VARIANT_C_OWN_PARAMETERS.iter().position(|p| *p == name) {
            i
        } else if name == "float_inputs_mean" {
            100
        } else if name == "float_inputs_std" {
            101
        } else {
            200 + VARIANT_C_SUBMODULES.iter().position(|m| *m == top).unwrap_or(100)
        }
    };
    let mut both: Vec<(TensorSpec, Init)> = tensors.into_iter().zip(inits).collect();
    // Stable: a submodule's tensors keep the builder's order among themselves.
    both.sort_by_key(|(t, _)| rank(&t.name));
    both.into_iter().unzip()
}

/// The original's prefix rule: `foo.` matches inside `foo`; `foo` matches
/// `foo` itself and `foo.*`.
fn prefix_matches(name: &str, prefix: &str) -> bool {
    if prefix.ends_with('.') {
        name.starts_with(prefix)
    } else {
        name == prefix || name.strip_prefix(prefix).is_some_and(|r| r.starts_with('.'))
    }
}

const VISION_STEM_PREFIXES: [&str; 12] = [
    "img_head.",
    "backbone.",
    "_hf_vis_backbone.",
    "patch_embed.",
    "enc_vis.",
    "vis_refine.",
    "hf_vis_proj.",
    "cnn_to_vis.",
    "cnn_to_fuse.",
    "postconcat_cnn_to_fuse.",
    "pos_vis",
    "vis_proj.",
];

const FUSION_ENCODER_PREFIXES: [&str; 16] = [
    "bridge.",
    "visfloat_to_seq.",
    "pos_vf",
    "vis_to_fuse.",
    "fused_to_seq.",
    "pos_pc",
    "pos_uni",
    "float_to_tokens.",
    "float_scalar_to_tok.",
    "float_per_feat_slot_emb",
    "enc_fusion_native.",
    "fusion_mlp_mod.",
    "fusion_cnn_mod.",
    "hf_fusion_proj_in.",
    "hf_fusion_proj_out.",
    "_hf_fusion_bb.",
];

/// The original's `collect_frozen_prefixes` for PPO-family learners.
fn frozen_prefixes(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if cfg.nn.vis.freeze && !cfg.nn.no_image {
        out.extend(VISION_STEM_PREFIXES.iter().map(|s| s.to_string()));
    }
    if cfg.nn.encoder.freeze {
        out.extend(FUSION_ENCODER_PREFIXES.iter().map(|s| s.to_string()));
    }
    out
}

#[derive(Default)]
struct Builder {
    tensors: Vec<TensorSpec>,
    inits: Vec<Init>,
    nodes: Vec<Node>,
    pretrained: Vec<Pretrained>,
    unread_parameters: Vec<String>,
}

fn uniform_fan_in(fan_in: usize) -> Init {
    Init::Uniform(1.0 / (fan_in.max(1) as f64).sqrt())
}

impl Builder {
    fn push(&mut self, op: Op, inputs: Vec<Val>, dims: Vec<usize>) -> Val {
        self.nodes.push(Node { op, inputs, dims });
        self.nodes.len() - 1
    }

    fn dims(&self, v: Val) -> &[usize] {
        &self.nodes[v].dims
    }

    fn last(&self, v: Val) -> usize {
        self.dims(v).last().copied().unwrap_or(0)
    }

    fn tensor(&mut self, name: String, shape: Vec<usize>, role: TensorRole, init: Init) {
        self.tensors.push(TensorSpec { name, shape, role });
        self.inits.push(init);
    }

    fn param(&mut self, name: String, shape: Vec<usize>, init: Init) {
        self.tensor(name, shape, TensorRole::Parameter, init);
    }

    fn op(&mut self, op: Op, x: Val) -> Val {
        let dims = self.dims(x).to_vec();
        self.push(op, vec![x], dims)
    }

    fn relu(&mut self, x: Val) -> Val {
        self.op(Op::Relu, x)
    }

    fn gelu(&mut self, x: Val) -> Val {
        self.op(Op::Gelu, x)
    }

    fn dropout(&mut self, x: Val, p: f64) -> Val {
        if p > 0.0 {
            self.op(Op::Dropout { p }, x)
        } else {
            x
        }
    }

    fn add(&mut self, a: Val, b: Val) -> Val {
        let dims = self.dims(a).to_vec();
        self.push(Op::Add, vec![a, b], dims)
    }

    fn concat(&mut self, parts: Vec<Val>) -> Val {
        let mut dims = self.dims(parts[0]).to_vec();
        dims[0] = parts.iter().map(|&p| self.dims(p)[0]).sum();
        self.push(Op::Concat, parts, dims)
    }

    fn reshape(&mut self, x: Val, dims: Vec<usize>) -> Val {
        debug_assert_eq!(self.dims(x).iter().product::<usize>(), dims.iter().product::<usize>());
        self.push(Op::Reshape, vec![x], dims)
    }

    fn mean(&mut self, x: Val, axis: usize) -> Val {
        let mut dims = self.dims(x).to_vec();
        dims.remove(axis);
        self.push(Op::Mean { axis }, vec![x], dims)
    }

    /// A PyTorch `nn.Linear` (default init `U(±1/√in)`).
    fn linear(&mut self, p: &str, x: Val, d_out: usize) -> Val {
        let d_in = self.last(x);
        self.linear_init(p, x, d_out, true, uniform_fan_in(d_in), uniform_fan_in(d_in))
    }

    fn linear_init(
        &mut self,
        p: &str,
        x: Val,
        d_out: usize,
        bias: bool,
        w_init: Init,
        b_init: Init,
    ) -> Val {
        let d_in = self.last(x);
        self.param(format!("{p}.weight"), vec![d_out, d_in], w_init);
        if bias {
            self.param(format!("{p}.bias"), vec![d_out], b_init);
        }
        let mut dims = self.dims(x).to_vec();
        if let Some(l) = dims.last_mut() {
            *l = d_out;
        }
        self.push(Op::Linear { p: p.to_string(), bias }, vec![x], dims)
    }

    /// A Hugging Face linear (`N(0, 0.02²)` truncated, zero bias).
    fn hf_linear(&mut self, p: &str, x: Val, d_out: usize, bias: bool) -> Val {
        self.linear_init(p, x, d_out, bias, Init::TruncNormal(HF_INIT_STD), Init::Zeros)
    }

    /// `nn.Linear(d_in, d_out)` when the widths differ, else `nn.Identity`.
    fn project(&mut self, p: &str, x: Val, d_out: usize) -> Val {
        if self.last(x) == d_out {
            x
        } else {
            self.linear(p, x, d_out)
        }
    }

    fn layer_norm(&mut self, p: &str, x: Val, eps: f64) -> Val {
        let d = self.last(x);
        self.param(format!("{p}.weight"), vec![d], Init::Ones);
        self.param(format!("{p}.bias"), vec![d], Init::Zeros);
        self.op(Op::LayerNorm { p: p.to_string(), eps }, x)
    }

    /// A `Conv2d` with `(kernel, stride, pad)`.
    fn conv2d(
        &mut self,
        p: &str,
        x: Val,
        c_out: usize,
        (k, stride, pad): (usize, usize, usize),
        spectral: bool,
    ) -> Val {
        let (c_in, h, w) = (self.dims(x)[0], self.dims(x)[1], self.dims(x)[2]);
        let fan_in = c_in * k * k;
        let init = uniform_fan_in(fan_in);
        if spectral {
            self.param(format!("{p}.weight_orig"), vec![c_out, c_in, k, k], init);
            self.param(format!("{p}.bias"), vec![c_out], init);
            self.tensor(format!("{p}.weight_u"), vec![c_out], TensorRole::Buffer, Init::SpectralU);
            self.tensor(format!("{p}.weight_v"), vec![fan_in], TensorRole::Buffer, Init::SpectralV);
        } else {
            self.param(format!("{p}.weight"), vec![c_out, c_in, k, k], init);
            self.param(format!("{p}.bias"), vec![c_out], init);
        }
        let side = |n: usize| (n + 2 * pad).saturating_sub(k) / stride + 1;
        self.push(
            Op::Conv2d { p: p.to_string(), kernel: k, stride, pad, spectral },
            vec![x],
            vec![c_out, side(h), side(w)],
        )
    }

    /// Variant A's image head (`_build_img_head`) on the normalised frame,
    /// flattened: the vanilla 4-conv stem or IMPALA blocks, optional
    /// spectral norm and adaptive max-pool.
    fn cnn(&mut self, cnn: &CnnArch, img: Val) -> Val {
        let sn = cnn.spectral_norm;
        let mut x = img;
        match cnn.stem {
            Stem::Vanilla => {
                for spec in cnn.convs() {
                    let geometry = (spec.kernel, spec.stride, spec.padding);
                    x = self.conv2d(&spec.name, x, spec.c_out, geometry, sn);
                    x = self.op(Op::LeakyRelu, x);
                }
            }
            Stem::Impala { .. } => {
                for block in cnn.convs().chunks(5) {
                    let c = &block[0];
                    x = self.conv2d(&c.name, x, c.c_out, (c.kernel, c.stride, c.padding), sn);
                    let (ch, h, w) = (self.dims(x)[0], self.dims(x)[1], self.dims(x)[2]);
                    let pool = |n: usize| (n + 2 - 3) / 2 + 1;
                    x = self.push(
                        Op::MaxPool2d { kernel: 3, stride: 2, pad: 1 },
                        vec![x],
                        vec![ch, pool(h), pool(w)],
                    );
                    for pair in block[1..].chunks(2) {
                        let r = self.relu(x);
                        let r = self.conv2d(&pair[0].name, r, ch, (3, 1, 1), sn);
                        let r = self.relu(r);
                        let r = self.conv2d(&pair[1].name, r, ch, (3, 1, 1), sn);
                        x = self.add(x, r);
                    }
                }
                x = self.relu(x);
            }
        }
        if let Some(s) = cnn.adaptive_maxpool {
            let ch = self.dims(x)[0];
            x = self.push(Op::AdaptiveMaxPool2d { out: s }, vec![x], vec![ch, s, s]);
        }
        let n = self.dims(x).iter().product();
        self.reshape(x, vec![n])
    }

    /// The original's float MLP: `Linear → ReLU → Linear → ReLU`.
    fn float_mlp(&mut self, z: Val, hidden: usize) -> Val {
        let h = self.linear("float_feature_extractor.0", z, hidden);
        let h = self.relu(h);
        let h = self.linear("float_feature_extractor.2", h, hidden);
        self.relu(h)
    }

    /// `trunk` (2 × Linear + ReLU), `policy_head`, `value_head`.
    fn trunk_and_heads(&mut self, h: Val, dense: usize, n_logits: usize) -> (Val, Val) {
        let h = self.linear("trunk.0", h, dense);
        let h = self.relu(h);
        let h = self.linear("trunk.2", h, dense);
        let h = self.relu(h);
        let logits = self.linear("policy_head", h, n_logits);
        let value = self.linear("value_head", h, 1);
        (logits, value)
    }

    fn floats(&mut self, f: usize) -> Val {
        self.tensor("float_inputs_mean".into(), vec![f], TensorRole::Buffer, Init::FloatMean);
        self.tensor("float_inputs_std".into(), vec![f], TensorRole::Buffer, Init::FloatStd);
        self.push(Op::Floats, vec![], vec![f])
    }

    fn image(&mut self, h: usize, w: usize) -> Val {
        self.push(Op::Image, vec![], vec![1, h, w])
    }

    /// Self-attention with PyTorch's `nn.MultiheadAttention` tensors.
    fn torch_attention(&mut self, p: &str, x: Val, heads: usize, dropout: f64) -> Val {
        let d = self.last(x);
        let xavier = Init::Uniform((6.0 / (d + 3 * d) as f64).sqrt());
        self.param(format!("{p}.in_proj_weight"), vec![3 * d, d], xavier);
        self.param(format!("{p}.in_proj_bias"), vec![3 * d], Init::Zeros);
        self.param(format!("{p}.out_proj.weight"), vec![d, d], uniform_fan_in(d));
        self.param(format!("{p}.out_proj.bias"), vec![d], Init::Zeros);
        self.op(Op::Attention { w: AttnWeights::Packed(p.to_string()), heads, dropout }, x)
    }

    /// `nn.TransformerEncoder` of `layers` post-norm GELU layers
    /// (`batch_first`, `norm_first=False`), prefix `{p}.layers.{i}`.
    fn torch_encoder(&mut self, p: &str, mut x: Val, t: &TransformerConfig) -> Val {
        let (heads, dff, drop) = (t.n_heads as usize, t.dim_ff(), t.dropout);
        let d = self.last(x);
        for i in 0..t.n_layers {
            let l = format!("{p}.layers.{i}");
            let a = self.torch_attention(&format!("{l}.self_attn"), x, heads, drop);
            let a = self.dropout(a, drop);
            let s = self.add(x, a);
            x = self.layer_norm(&format!("{l}.norm1"), s, TORCH_LAYER_NORM_EPS);
            let f = self.linear(&format!("{l}.linear1"), x, dff);
            let f = self.gelu(f);
            let f = self.dropout(f, drop);
            let f = self.linear(&format!("{l}.linear2"), f, d);
            let f = self.dropout(f, drop);
            let s = self.add(x, f);
            x = self.layer_norm(&format!("{l}.norm2"), s, TORCH_LAYER_NORM_EPS);
        }
        x
    }

    /// Hugging Face self-attention (`query`/`key`/`value` + output `dense`).
    fn hf_attention(
        &mut self,
        qkv: &str,
        out: &str,
        x: Val,
        heads: usize,
        qkv_bias: bool,
        dropout: f64,
    ) -> Val {
        let d = self.last(x);
        for n in ["query", "key", "value"] {
            self.param(format!("{qkv}.{n}.weight"), vec![d, d], Init::TruncNormal(HF_INIT_STD));
            if qkv_bias {
                self.param(format!("{qkv}.{n}.bias"), vec![d], Init::Zeros);
            }
        }
        self.param(format!("{out}.weight"), vec![d, d], Init::TruncNormal(HF_INIT_STD));
        self.param(format!("{out}.bias"), vec![d], Init::Zeros);
        let w = AttnWeights::Separate {
            q: format!("{qkv}.query"),
            k: format!("{qkv}.key"),
            v: format!("{qkv}.value"),
            out: out.to_string(),
            qkv_bias,
        };
        self.op(Op::Attention { w, heads, dropout }, x)
    }

    /// A pooler the state dict carries but the original never uses (a
    /// buffer here: it gets no gradient there either).
    fn hf_pooler(&mut self, p: &str, d: usize) {
        self.unread_parameters.push(format!("{p}pooler.dense.weight"));
        self.unread_parameters.push(format!("{p}pooler.dense.bias"));
        self.tensor(
            format!("{p}pooler.dense.weight"),
            vec![d, d],
            TensorRole::Buffer,
            Init::TruncNormal(HF_INIT_STD),
        );
        self.tensor(format!("{p}pooler.dense.bias"), vec![d], TensorRole::Buffer, Init::Zeros);
    }

    /// `ViTModel(pixel_values).last_hidden_state`: `[1 + patches, hidden]`,
    /// tensors under `p` (e.g. `backbone.`).
    fn vit(&mut self, p: &str, pixels: Val, s: &VitSpec, folder: &str) -> Val {
        let (d, ps) = (s.hidden_size as usize, s.patch_size as usize);
        let n = s.n_patches();
        self.pretrained.push(Pretrained { prefix: p.to_string(), folder: folder.to_string() });
        self.param(
            format!("{p}embeddings.cls_token"),
            vec![1, 1, d],
            Init::TruncNormal(HF_INIT_STD),
        );
        self.param(
            format!("{p}embeddings.position_embeddings"),
            vec![1, n + 1, d],
            Init::TruncNormal(HF_INIT_STD),
        );
        let proj = format!("{p}embeddings.patch_embeddings.projection");
        let x = self.conv2d(&proj, pixels, d, (ps, ps, 0), false);
        let x = self.push(Op::PatchTokens, vec![x], vec![n, d]);
        let x = self.push(
            Op::PrependParam { name: format!("{p}embeddings.cls_token") },
            vec![x],
            vec![n + 1, d],
        );
        let x = self.push(
            Op::AddParam { name: format!("{p}embeddings.position_embeddings"), rows: None },
            vec![x],
            vec![n + 1, d],
        );
        let mut x = self.dropout(x, s.hidden_dropout_prob);
        let eps = s.layer_norm_eps;
        for i in 0..s.num_hidden_layers {
            let l = format!("{p}encoder.layer.{i}");
            let h = self.layer_norm(&format!("{l}.layernorm_before"), x, eps);
            let a = self.hf_attention(
                &format!("{l}.attention.attention"),
                &format!("{l}.attention.output.dense"),
                h,
                s.num_attention_heads as usize,
                s.qkv_bias,
                s.attention_probs_dropout_prob,
            );
            let a = self.dropout(a, s.hidden_dropout_prob);
            x = self.add(a, x);
            let h = self.layer_norm(&format!("{l}.layernorm_after"), x, eps);
            let h = self.hf_linear(
                &format!("{l}.intermediate.dense"),
                h,
                s.intermediate_size as usize,
                true,
            );
            let h = self.gelu(h);
            let h = self.hf_linear(&format!("{l}.output.dense"), h, d, true);
            let h = self.dropout(h, s.hidden_dropout_prob);
            x = self.add(h, x);
        }
        let x = self.layer_norm(&format!("{p}layernorm"), x, eps);
        self.hf_pooler(p, d);
        x
    }

    /// `BertModel(inputs_embeds).last_hidden_state` for `[L, hidden]` embeddings.
    fn bert(&mut self, p: &str, embeds: Val, s: &BertSpec, folder: &str) -> Val {
        let d = s.hidden_size as usize;
        let len = self.dims(embeds)[0];
        self.pretrained.push(Pretrained { prefix: p.to_string(), folder: folder.to_string() });
        let e = format!("{p}embeddings");
        // Word embeddings are in the state dict but `inputs_embeds` replaces them.
        self.unread_parameters.push(format!("{e}.word_embeddings.weight"));
        self.tensor(
            format!("{e}.word_embeddings.weight"),
            vec![s.vocab_size as usize, d],
            TensorRole::Buffer,
            Init::TruncNormal(HF_INIT_STD),
        );
        self.param(
            format!("{e}.position_embeddings.weight"),
            vec![s.max_position_embeddings as usize, d],
            Init::TruncNormal(HF_INIT_STD),
        );
        self.param(
            format!("{e}.token_type_embeddings.weight"),
            vec![s.type_vocab_size as usize, d],
            Init::TruncNormal(HF_INIT_STD),
        );
        let x = self.push(
            Op::AddParam { name: format!("{e}.token_type_embeddings.weight"), rows: Some(1) },
            vec![embeds],
            vec![len, d],
        );
        let x = self.push(
            Op::AddParam { name: format!("{e}.position_embeddings.weight"), rows: Some(len) },
            vec![x],
            vec![len, d],
        );
        let eps = s.layer_norm_eps;
        let x = self.layer_norm(&format!("{e}.LayerNorm"), x, eps);
        let mut x = self.dropout(x, s.hidden_dropout_prob);
        for i in 0..s.num_hidden_layers {
            let l = format!("{p}encoder.layer.{i}");
            let a = self.hf_attention(
                &format!("{l}.attention.self"),
                &format!("{l}.attention.output.dense"),
                x,
                s.num_attention_heads as usize,
                true,
                s.attention_probs_dropout_prob,
            );
            let a = self.dropout(a, s.hidden_dropout_prob);
            let a = self.add(a, x);
            x = self.layer_norm(&format!("{l}.attention.output.LayerNorm"), a, eps);
            let h = self.hf_linear(
                &format!("{l}.intermediate.dense"),
                x,
                s.intermediate_size as usize,
                true,
            );
            let h = self.gelu(h);
            let h = self.hf_linear(&format!("{l}.output.dense"), h, d, true);
            let h = self.dropout(h, s.hidden_dropout_prob);
            let h = self.add(h, x);
            x = self.layer_norm(&format!("{l}.output.LayerNorm"), h, eps);
        }
        self.hf_pooler(p, d);
        x
    }

    /// The original's `prepare_hf_pixels` then the ViT: `[1 + patches, hidden]`.
    fn hf_vision_tokens(&mut self, p: &str, img: Val, t: &TransformerConfig) -> Val {
        let Some(HfModel::Vit(s)) = &t.backbone else {
            unreachable!("a validated config resolved nn.vis.transformer.backbone to a ViT")
        };
        let mean_std = s.pixel_mean.zip(s.pixel_std);
        let (h, w) = (s.pixel_size[0] as usize, s.pixel_size[1] as usize);
        let pix =
            self.push(Op::HfPixels { height: h, width: w, mean_std }, vec![img], vec![3, h, w]);
        self.vit(p, pix, s, &t.model_name_or_path)
    }
}

/// Variant A (`PpoActorCritic`).
fn variant_a(b: &mut Builder, cfg: &Config) -> (Val, Val) {
    let nn = &cfg.nn;
    let z = b.floats(cfg.float_input_dim());
    let vis = (!nn.no_image).then(|| {
        let img = b.image(nn.image_height as usize, nn.image_width as usize);
        b.cnn(&CnnArch::from_config(cfg), img)
    });
    let z = b.float_mlp(z, nn.float_hidden_dim as usize);
    let h = match vis {
        Some(v) => b.concat(vec![v, z]),
        None => z,
    };
    b.trunk_and_heads(h, nn.dense_hidden_dim as usize, N_ACTIONS * cfg.n_action_heads())
}

/// Variant B (`HfActorCritic`).
fn variant_b(b: &mut Builder, cfg: &Config) -> (Val, Val) {
    let nn = &cfg.nn;
    let Some(t) = &nn.vis.transformer else { unreachable!("Variant B has nn.vis.transformer") };
    let vd = t.d_model as usize;
    let z = b.floats(cfg.float_input_dim());
    let img = b.image(nn.image_height as usize, nn.image_width as usize);
    let toks = b.hf_vision_tokens("backbone.", img, t);
    let z = b.float_mlp(z, nn.float_hidden_dim as usize);
    let z = b.linear("float_to_hidden", z, vd);
    let cls = b.push(Op::Token { index: 0 }, vec![toks], vec![b.last(toks)]);
    let cls = b.dropout(cls, t.hidden_dropout_prob);
    let cls = b.project("vis_proj", cls, vd);
    let cls = refine_one(b, "vis_refine", cls, t);
    let h = b.concat(vec![cls, z]);
    b.trunk_and_heads(h, nn.dense_hidden_dim as usize, N_ACTIONS * cfg.n_action_heads())
}

/// `vis_refine` on one vector: the encoder over a 1-token sequence.
fn refine_one(b: &mut Builder, p: &str, x: Val, t: &TransformerConfig) -> Val {
    if t.n_layers == 0 {
        return x;
    }
    let d = b.last(x);
    let seq = b.reshape(x, vec![1, d]);
    let seq = b.torch_encoder(p, seq, t);
    b.reshape(seq, vec![d])
}

/// `_embed_hf_sequence`: ViT tokens, dropout, `hf_vis_proj` to `d_out`.
fn embed_hf_sequence(b: &mut Builder, img: Val, t: &TransformerConfig, d_out: usize) -> Val {
    let toks = b.hf_vision_tokens("_hf_vis_backbone.", img, t);
    let toks = b.dropout(toks, t.hidden_dropout_prob);
    b.project("hf_vis_proj", toks, d_out)
}

/// Patch embedding (+ learned positions and the native encoder unless `bare`).
fn native_patches(b: &mut Builder, img: Val, t: &TransformerConfig, bare: bool) -> Val {
    let (ps, vd) = (t.patch_size as usize, t.d_model as usize);
    let x = b.conv2d("patch_embed.proj", img, vd, (ps, ps, 0), false);
    let n = b.dims(x)[1] * b.dims(x)[2];
    let x = b.push(Op::PatchTokens, vec![x], vec![n, vd]);
    if bare {
        return x;
    }
    b.param("pos_vis".into(), vec![1, n, vd], Init::Zeros);
    let x = b.push(Op::AddParam { name: "pos_vis".into(), rows: None }, vec![x], vec![n, vd]);
    if t.n_layers > 0 {
        b.torch_encoder("enc_vis", x, t)
    } else {
        x
    }
}

/// One vector of width `vis.d_model` from a transformer vision branch, as
/// `vision_transformer` and `post_concat` (`fused_vector`) take it: the mean
/// of the encoded patch tokens, or the ViT's CLS token (projected, refined).
fn vision_summary(b: &mut Builder, vb: VisBranch, img: Val, vt: &TransformerConfig) -> Option<Val> {
    let vd = vt.d_model as usize;
    match vb {
        VisBranch::NativeTransformer => {
            let x = native_patches(b, img, vt, false);
            Some(b.mean(x, 0))
        }
        VisBranch::HfTransformer => {
            let toks = embed_hf_sequence(b, img, vt, vd);
            let cls = b.push(Op::Token { index: 0 }, vec![toks], vec![vd]);
            Some(refine_one(b, "vis_refine", cls, vt))
        }
        VisBranch::Cnn | VisBranch::None => None,
    }
}

/// Variant C (`TorchMultimodalActorCritic`).
fn variant_c(b: &mut Builder, cfg: &Config) -> (Val, Val) {
    let nn = &cfg.nn;
    let e = &nn.encoder;
    let vt = nn.vis.transformer.clone().unwrap_or_default();
    let ft = &e.transformer;
    let (fh, dense) = (nn.float_hidden_dim as usize, nn.dense_hidden_dim as usize);
    let (vd, fd) = (vt.d_model as usize, ft.d_model as usize);
    let vb = cfg.vis_branch();
    let fe = cfg.fusion_encoder();
    let mode = nn.fusion_mode;
    let token_sequence =
        mode == FusionMode::PostConcat && e.post_concat_layout == PostConcatLayout::TokenSequence;
    let z = b.floats(cfg.float_input_dim());
    let img =
        (vb != VisBranch::None).then(|| b.image(nn.image_height as usize, nn.image_width as usize));
    let has_float_mlp = !(mode == FusionMode::Unified
        || token_sequence && e.float_token_input == FloatTokenInput::Raw);
    let cnn = |b: &mut Builder, img: Val| b.cnn(&CnnArch::from_config(cfg), img);

    let bridge_in = match mode {
        FusionMode::VisionTransformer => {
            let vis = match (vb, img) {
                (VisBranch::Cnn, Some(img)) => {
                    let x = cnn(b, img);
                    Some(b.project("cnn_to_vis", x, vd))
                }
                (_, Some(img)) => vision_summary(b, vb, img, &vt),
                _ => None,
            };
            let float_h = b.float_mlp(z, fh);
            let vis = vis.unwrap_or_else(|| b.push(Op::Zeros, vec![float_h], vec![vd]));
            let cat = b.concat(vec![vis, float_h]);
            if fe == FusionEncoder::Linear {
                cat
            } else {
                let sl = ft.post_concat_seq_len as usize;
                let t = b.linear("visfloat_to_seq", cat, sl * fd);
                let t = b.reshape(t, vec![sl, fd]);
                b.param("pos_vf".into(), vec![1, sl, fd], Init::Zeros);
                let t = b.push(
                    Op::AddParam { name: "pos_vf".into(), rows: None },
                    vec![t],
                    vec![sl, fd],
                );
                fusion_trunk(b, cfg, fe, t)
            }
        }
        FusionMode::PostConcat if token_sequence => {
            let vis = match (vb, img) {
                (VisBranch::Cnn, Some(img)) => {
                    let x = cnn(b, img);
                    let x = b.project("postconcat_cnn_to_fuse", x, fd);
                    Some(b.reshape(x, vec![1, fd]))
                }
                (VisBranch::NativeTransformer, Some(img)) => {
                    let toks = native_patches(b, img, &vt, false);
                    let toks = match vt.fusion_tokens {
                        FusionTokens::PatchTokens => toks,
                        FusionTokens::Summary => {
                            let m = b.mean(toks, 0);
                            b.reshape(m, vec![1, vd])
                        }
                    };
                    Some(b.project("vis_to_fuse", toks, fd))
                }
                (VisBranch::HfTransformer, Some(img)) => {
                    let toks = embed_hf_sequence(b, img, &vt, vd);
                    let toks = match vt.fusion_tokens {
                        FusionTokens::PatchTokens => {
                            if vt.n_layers > 0 {
                                b.torch_encoder("vis_refine", toks, &vt)
                            } else {
                                toks
                            }
                        }
                        FusionTokens::Summary => {
                            let cls = b.push(Op::Token { index: 0 }, vec![toks], vec![vd]);
                            let cls = b.reshape(cls, vec![1, vd]);
                            if vt.n_layers > 0 {
                                b.torch_encoder("vis_refine", cls, &vt)
                            } else {
                                cls
                            }
                        }
                    };
                    Some(b.project("vis_to_fuse", toks, fd))
                }
                _ => None,
            };
            let fh_in = if has_float_mlp { b.float_mlp(z, fh) } else { z };
            let ftoks = match e.float_token_layout {
                FloatTokenLayout::PerFeature => {
                    let f = b.dims(fh_in)[0];
                    let s = b.reshape(fh_in, vec![f, 1]);
                    let t = b.linear("float_scalar_to_tok", s, fd);
                    b.param("float_per_feat_slot_emb".into(), vec![1, f, fd], Init::Zeros);
                    b.push(
                        Op::AddParam { name: "float_per_feat_slot_emb".into(), rows: None },
                        vec![t],
                        vec![f, fd],
                    )
                }
                FloatTokenLayout::Dense => {
                    let k = ft.unified_float_tokens as usize;
                    let t = b.linear("float_to_tokens", fh_in, k * fd);
                    b.reshape(t, vec![k, fd])
                }
            };
            let seq = match vis {
                Some(v) => b.concat(vec![v, ftoks]),
                None => ftoks,
            };
            let l = b.dims(seq)[0];
            b.param("pos_pc".into(), vec![1, l, fd], Init::Zeros);
            let seq =
                b.push(Op::AddParam { name: "pos_pc".into(), rows: None }, vec![seq], vec![l, fd]);
            fusion_trunk(b, cfg, fe, seq)
        }
        FusionMode::PostConcat => {
            let iv = match (vb, img) {
                (VisBranch::Cnn, Some(img)) => Some(cnn(b, img)),
                (_, Some(img)) => vision_summary(b, vb, img, &vt),
                _ => None,
            };
            let float_h = b.float_mlp(z, fh);
            let fused = match iv {
                Some(v) => b.concat(vec![v, float_h]),
                None => float_h,
            };
            let sl = ft.post_concat_seq_len as usize;
            let t = b.linear("fused_to_seq", fused, sl * fd);
            let t = b.reshape(t, vec![sl, fd]);
            b.param("pos_pc".into(), vec![1, sl, fd], Init::Zeros);
            let t =
                b.push(Op::AddParam { name: "pos_pc".into(), rows: None }, vec![t], vec![sl, fd]);
            fusion_trunk(b, cfg, fe, t)
        }
        FusionMode::Unified | FusionMode::None => {
            let img_toks = match (vb, img) {
                (VisBranch::Cnn, Some(img)) => {
                    let x = cnn(b, img);
                    let x = b.project("cnn_to_fuse", x, fd);
                    Some(b.reshape(x, vec![1, fd]))
                }
                (VisBranch::NativeTransformer, Some(img)) => {
                    Some(native_patches(b, img, &vt, true))
                }
                (VisBranch::HfTransformer, Some(img)) => Some(embed_hf_sequence(b, img, &vt, fd)),
                _ => None,
            };
            let k = ft.unified_float_tokens as usize;
            let uf = b.linear("float_to_tokens", z, k * fd);
            let uf = b.reshape(uf, vec![k, fd]);
            let seq = match img_toks {
                Some(v) => b.concat(vec![v, uf]),
                None => uf,
            };
            let l = b.dims(seq)[0];
            b.param("pos_uni".into(), vec![1, l, fd], Init::Zeros);
            let seq =
                b.push(Op::AddParam { name: "pos_uni".into(), rows: None }, vec![seq], vec![l, fd]);
            fusion_trunk(b, cfg, fe, seq)
        }
    };
    let h = b.linear("bridge", bridge_in, dense);
    b.trunk_and_heads(h, dense, N_ACTIONS * cfg.n_action_heads())
}

/// `_pool_fusion_tokens`: the fusion trunk over `[L, d]` tokens → `[d]`
/// (for `vision_transformer` + `linear` the caller skips it).
fn fusion_trunk(b: &mut Builder, cfg: &Config, fe: FusionEncoder, toks: Val) -> Val {
    let e = &cfg.nn.encoder;
    let (l, fd) = (b.dims(toks)[0], b.dims(toks)[1]);
    match fe {
        FusionEncoder::Linear => b.mean(toks, 0),
        FusionEncoder::NativeTransformer => {
            let x = if e.transformer.n_layers > 0 {
                b.torch_encoder("enc_fusion_native", toks, &e.transformer)
            } else {
                toks
            };
            b.mean(x, 0)
        }
        FusionEncoder::Mlp => {
            let m = &e.fusion_mlp;
            let mut x = b.reshape(toks, vec![l * fd]);
            let mut idx = 0;
            for _ in 0..m.n_layers.saturating_sub(1) {
                x = b.linear(&format!("fusion_mlp_mod.{idx}"), x, m.hidden_dim as usize);
                x = b.relu(x);
                idx += 2;
                if m.dropout > 0.0 {
                    x = b.dropout(x, m.dropout);
                    idx += 1;
                }
            }
            b.linear(&format!("fusion_mlp_mod.{idx}"), x, fd)
        }
        FusionEncoder::Cnn => {
            let c = &e.fusion_cnn;
            let k = c.kernel_size as usize;
            let pad = k / 2;
            let mut x = b.push(Op::Transpose, vec![toks], vec![fd, l]);
            let mut idx = 0;
            for &h in &c.hidden_channels {
                let (c_in, len) = (b.dims(x)[0], b.dims(x)[1]);
                let p = format!("fusion_cnn_mod.0.{idx}");
                b.param(format!("{p}.weight"), vec![h as usize, c_in, k], uniform_fan_in(c_in * k));
                b.param(format!("{p}.bias"), vec![h as usize], uniform_fan_in(c_in * k));
                x = b.push(
                    Op::Conv1d { p, kernel: k, pad },
                    vec![x],
                    vec![h as usize, len + 2 * pad + 1 - k],
                );
                x = b.relu(x);
                idx += 2;
                if c.dropout > 0.0 {
                    x = b.dropout(x, c.dropout);
                    idx += 1;
                }
            }
            let x = b.mean(x, 1);
            b.project("fusion_cnn_mod.1.2", x, fd)
        }
        FusionEncoder::HfEmbedding => {
            let (spec, folder, drop) = hf_fusion_model(cfg);
            let hh = spec.hidden_size as usize;
            let emb = b.linear("hf_fusion_proj_in", toks, hh);
            let emb = b.dropout(emb, drop);
            let x = b.bert("_hf_fusion_bb.", emb, &spec, &folder);
            let x = b.mean(x, 0);
            b.project("hf_fusion_proj_out", x, fd)
        }
    }
}

/// The BERT encoder of `fusion_encoder: hf_embedding`, its folder and the
/// embedding dropout: `encoder.transformer` when it names a backbone, else
/// `encoder.hf_embedding` (the original's precedence).
fn hf_fusion_model(cfg: &Config) -> (BertSpec, String, f64) {
    let e = &cfg.nn.encoder;
    let t = &e.transformer;
    let (model, folder, drop) = if t.use_hf_backbone && !t.model_name_or_path.trim().is_empty() {
        (t.backbone.as_ref(), t.model_name_or_path.clone(), t.hidden_dropout_prob)
    } else {
        let h = e.hf_embedding.as_ref();
        (
            h.and_then(|h| h.backbone.as_ref()),
            h.map(|h| h.model_name_or_path.clone()).unwrap_or_default(),
            h.map_or(0.0, |h| h.hidden_dropout_prob),
        )
    };
    match model {
        Some(HfModel::Bert(s)) => (s.clone(), folder, drop),
        _ => unreachable!("a validated config resolved the hf_embedding encoder to a BERT"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(yaml: &str) -> Net {
        Net::from_config(&Config::from_yaml_str(yaml, "t").expect("valid"))
    }

    fn names(n: &Net) -> Vec<&str> {
        n.tensors.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn variant_a_has_the_originals_names_in_registration_order() {
        let n = net("nn: {float_hidden_dim: 8, dense_hidden_dim: 16}");
        assert_eq!(
            names(&n),
            [
                "float_inputs_mean",
                "float_inputs_std",
                "img_head.0.weight",
                "img_head.0.bias",
                "img_head.2.weight",
                "img_head.2.bias",
                "img_head.4.weight",
                "img_head.4.bias",
                "img_head.6.weight",
                "img_head.6.bias",
                "float_feature_extractor.0.weight",
                "float_feature_extractor.0.bias",
                "float_feature_extractor.2.weight",
                "float_feature_extractor.2.bias",
                "trunk.0.weight",
                "trunk.0.bias",
                "trunk.2.weight",
                "trunk.2.bias",
                "policy_head.weight",
                "policy_head.bias",
                "value_head.weight",
                "value_head.bias",
            ]
        );
        // 64×64 → 512 CNN features + 8 float features into the trunk.
        assert_eq!(n.tensor("trunk.0.weight").map(|t| t.shape.clone()), Some(vec![16, 520]));
    }

    /// The original's preset (post_concat token sequence, CNN vision token,
    /// per-feature floats, native fusion trunk): the module's own parameters,
    /// its buffers, then the submodules as `__init__` assigns them.
    #[test]
    fn variant_c_lists_tensors_in_the_originals_registration_order() {
        let n = net("nn: {fusion_mode: post_concat, encoder: {post_concat_layout: token_sequence, float_token_layout: per_feature, transformer: {d_model: 32, n_layers: 1, n_heads: 4}}}");
        let mut tops: Vec<&str> = Vec::new();
        for name in names(&n) {
            let top = if name.starts_with("float_inputs") {
                name
            } else {
                name.split('.').next().unwrap_or(name)
            };
            if tops.last() != Some(&top) {
                tops.push(top);
            }
        }
        assert_eq!(
            tops,
            [
                "float_per_feat_slot_emb",
                "pos_pc",
                "float_inputs_mean",
                "float_inputs_std",
                "img_head",
                "postconcat_cnn_to_fuse",
                "float_scalar_to_tok",
                "bridge",
                "enc_fusion_native",
                "trunk",
                "policy_head",
                "value_head",
            ]
        );
        let layer: Vec<&str> = names(&n)
            .into_iter()
            .filter_map(|t| t.strip_prefix("enc_fusion_native.layers.0."))
            .collect();
        // nn.TransformerEncoderLayer's registration order.
        assert_eq!(
            layer,
            [
                "self_attn.in_proj_weight",
                "self_attn.in_proj_bias",
                "self_attn.out_proj.weight",
                "self_attn.out_proj.bias",
                "linear1.weight",
                "linear1.bias",
                "linear2.weight",
                "linear2.bias",
                "norm1.weight",
                "norm1.bias",
                "norm2.weight",
                "norm2.bias",
            ]
        );
    }

    #[test]
    fn native_encoder_layers_have_pytorchs_names_and_widths() {
        // post_concat, CNN vision token, per-feature floats, 2-layer native fusion (the original's preset).
        let n = net("nn: {fusion_mode: post_concat, encoder: {post_concat_layout: token_sequence, float_token_layout: per_feature, transformer: {d_model: 32, n_layers: 2, n_heads: 4, ff_mult: 4}}}");
        let shape = |k: &str| n.tensor(k).map(|t| t.shape.clone());
        assert_eq!(
            shape("enc_fusion_native.layers.1.self_attn.in_proj_weight"),
            Some(vec![96, 32])
        );
        assert_eq!(shape("enc_fusion_native.layers.0.linear1.weight"), Some(vec![128, 32]));
        assert_eq!(shape("enc_fusion_native.layers.0.norm2.bias"), Some(vec![32]));
        assert_eq!(shape("postconcat_cnn_to_fuse.weight"), Some(vec![32, 512]));
        // 1 vision token + 184 float tokens.
        assert_eq!(shape("pos_pc"), Some(vec![1, 185, 32]));
        assert_eq!(shape("float_scalar_to_tok.weight"), Some(vec![32, 1]));
        assert!(n.tensor("float_feature_extractor.0.weight").is_none(), "raw floats: no float MLP");
        // dim_ff = max(64, d·ff_mult): 16·2 = 32 → 64.
        let small = net("nn: {fusion_mode: unified, encoder: {transformer: {d_model: 32, n_layers: 1, n_heads: 2, ff_mult: 1}}}");
        assert_eq!(
            small.tensor("enc_fusion_native.layers.0.linear1.weight").map(|t| t.shape.clone()),
            Some(vec![64, 32])
        );
    }

    #[test]
    fn unified_native_patches_skip_positions_and_the_vision_encoder() {
        let n = net("nn: {fusion_mode: unified, vis: {transformer: {d_model: 32, patch_size: 16}}, encoder: {transformer: {d_model: 32}}}");
        assert!(
            n.tensor("pos_vis").is_none() && n.tensor("enc_vis.layers.0.norm1.weight").is_none()
        );
        // (64/16)² = 16 patches + 1 float token.
        assert_eq!(n.tensor("pos_uni").map(|t| t.shape.clone()), Some(vec![1, 17, 32]));
        assert_eq!(
            n.tensor("patch_embed.proj.weight").map(|t| t.shape.clone()),
            Some(vec![32, 1, 16, 16])
        );
    }

    #[test]
    fn fusion_mlp_and_cnn_index_like_pytorch_sequentials() {
        let m = net("nn: {fusion_mode: post_concat, encoder: {fusion_encoder: mlp, fusion_mlp: {hidden_dim: 64, n_layers: 3, dropout: 0.1}, transformer: {d_model: 32}}}");
        // [Linear, ReLU, Dropout] × 2, then Linear: 0, 3, 6.
        for k in ["fusion_mlp_mod.0.weight", "fusion_mlp_mod.3.weight", "fusion_mlp_mod.6.weight"] {
            assert!(m.tensor(k).is_some(), "{k} in {:?}", names(&m));
        }
        assert_eq!(
            m.tensor("fusion_mlp_mod.0.weight").map(|t| t.shape.clone()),
            Some(vec![64, 4 * 32])
        );
        let c = net("nn: {fusion_mode: post_concat, encoder: {fusion_encoder: cnn, fusion_cnn: {hidden_channels: [16, 24]}, transformer: {d_model: 32}}}");
        assert_eq!(
            c.tensor("fusion_cnn_mod.0.0.weight").map(|t| t.shape.clone()),
            Some(vec![16, 32, 3])
        );
        assert_eq!(
            c.tensor("fusion_cnn_mod.0.2.weight").map(|t| t.shape.clone()),
            Some(vec![24, 16, 3])
        );
        assert_eq!(
            c.tensor("fusion_cnn_mod.1.2.weight").map(|t| t.shape.clone()),
            Some(vec![32, 24])
        );
    }

    #[test]
    fn freezing_follows_the_originals_prefixes() {
        let n = net("nn: {fusion_mode: vision_transformer, vis: {freeze: true, transformer: {d_model: 32, n_layers: 1, patch_size: 16}}}");
        let trained = |k: &str| n.tensor(k).map(|t| n.is_trained(t));
        assert_eq!(trained("patch_embed.proj.weight"), Some(false));
        assert_eq!(trained("pos_vis"), Some(false));
        assert_eq!(trained("enc_vis.layers.0.linear1.weight"), Some(false));
        assert_eq!(trained("bridge.weight"), Some(true));
        assert_eq!(trained("float_feature_extractor.0.weight"), Some(true));
        assert_eq!(trained("float_inputs_mean"), Some(false), "a buffer");
        assert!(prefix_matches("pos_vis", "pos_vis") && !prefix_matches("pos_vis2", "pos_vis"));
    }

    /// A folder holding only a Hugging Face `config.json`.
    fn hf_folder(dir: &std::path::Path, name: &str, config: &str) -> String {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("config.json"), config).expect("config.json");
        folder.display().to_string()
    }

    /// One ViT layer's tensors as transformers 4.57's `ViTModel` lists them
    /// (`named_parameters()`, printed from the real package), which is not
    /// the forward order the builder adds them in.
    const VIT_LAYER_0: [&str; 16] = [
        "encoder.layer.0.attention.attention.query.weight",
        "encoder.layer.0.attention.attention.query.bias",
        "encoder.layer.0.attention.attention.key.weight",
        "encoder.layer.0.attention.attention.key.bias",
        "encoder.layer.0.attention.attention.value.weight",
        "encoder.layer.0.attention.attention.value.bias",
        "encoder.layer.0.attention.output.dense.weight",
        "encoder.layer.0.attention.output.dense.bias",
        "encoder.layer.0.intermediate.dense.weight",
        "encoder.layer.0.intermediate.dense.bias",
        "encoder.layer.0.output.dense.weight",
        "encoder.layer.0.output.dense.bias",
        "encoder.layer.0.layernorm_before.weight",
        "encoder.layer.0.layernorm_before.bias",
        "encoder.layer.0.layernorm_after.weight",
        "encoder.layer.0.layernorm_after.bias",
    ];

    #[test]
    fn a_vits_tensors_stand_in_transformers_order_and_its_pooler_in_the_optimizers_list() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vit = hf_folder(
            dir.path(),
            "vit",
            r#"{"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48, "image_size": 32, "patch_size": 8}"#,
        );
        let yaml = |freeze: bool| {
            format!("nn: {{vis: {{freeze: {freeze}, transformer: {{use_hf_backbone: true, model_name_or_path: {vit}, d_model: 32, n_layers: 0}}}}}}")
        };
        let n = net(&yaml(false));
        let under: Vec<&str> =
            names(&n).into_iter().filter_map(|t| t.strip_prefix("backbone.")).collect();
        let mut expect = vec![
            "embeddings.cls_token",
            "embeddings.position_embeddings",
            "embeddings.patch_embeddings.projection.weight",
            "embeddings.patch_embeddings.projection.bias",
        ];
        expect.extend(VIT_LAYER_0);
        let layer_1: Vec<String> = VIT_LAYER_0.iter().map(|t| t.replace(".0.", ".1.")).collect();
        expect.extend(layer_1.iter().map(String::as_str));
        expect.extend([
            "layernorm.weight",
            "layernorm.bias",
            "pooler.dense.weight",
            "pooler.dense.bias",
        ]);
        assert_eq!(under, expect);
        // The optimizer lists every tensor above; the pooler without training it.
        let listed: Vec<(&str, bool)> = n
            .torch_optimizer_parameters()
            .filter_map(|(t, trained)| Some((t.name.strip_prefix("backbone.")?, trained)))
            .collect();
        let want: Vec<(&str, bool)> =
            expect.iter().map(|&t| (t, !t.starts_with("pooler."))).collect();
        assert_eq!(listed, want);
        // Around it: the buffers are not listed, the float MLP is, trained.
        assert!(n.torch_optimizer_parameters().all(|(t, _)| !t.name.starts_with("float_inputs_")));
        assert!(n
            .torch_optimizer_parameters()
            .any(|(t, trained)| t.name == "float_feature_extractor.0.weight" && trained));
        assert_eq!(
            n.torch_optimizer_parameters().filter(|(_, trained)| *trained).count(),
            n.trained().count()
        );
        // Frozen (`nn.vis.freeze`), the ViT is in no optimizer: its pooler neither.
        let frozen = net(&yaml(true));
        assert!(frozen.torch_optimizer_parameters().all(|(t, _)| !t.name.starts_with("backbone.")));
        assert!(frozen.torch_optimizer_parameters().any(|(t, _)| t.name == "trunk.0.weight"));
    }

    #[test]
    fn a_berts_word_embeddings_and_pooler_are_listed_untrained_in_transformers_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bert = hf_folder(
            dir.path(),
            "bert",
            r#"{"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 48, "max_position_embeddings": 300, "vocab_size": 20, "type_vocab_size": 2}"#,
        );
        let n = net(&format!("nn: {{fusion_mode: post_concat, encoder: {{post_concat_layout: token_sequence, float_token_layout: per_feature, transformer: {{use_hf_backbone: true, model_name_or_path: {bert}, d_model: 32, n_layers: 0}}}}}}"));
        // transformers 4.57's BertModel.named_parameters(), printed from the real package.
        let expect = [
            "embeddings.word_embeddings.weight",
            "embeddings.position_embeddings.weight",
            "embeddings.token_type_embeddings.weight",
            "embeddings.LayerNorm.weight",
            "embeddings.LayerNorm.bias",
            "encoder.layer.0.attention.self.query.weight",
            "encoder.layer.0.attention.self.query.bias",
            "encoder.layer.0.attention.self.key.weight",
            "encoder.layer.0.attention.self.key.bias",
            "encoder.layer.0.attention.self.value.weight",
            "encoder.layer.0.attention.self.value.bias",
            "encoder.layer.0.attention.output.dense.weight",
            "encoder.layer.0.attention.output.dense.bias",
            "encoder.layer.0.attention.output.LayerNorm.weight",
            "encoder.layer.0.attention.output.LayerNorm.bias",
            "encoder.layer.0.intermediate.dense.weight",
            "encoder.layer.0.intermediate.dense.bias",
            "encoder.layer.0.output.dense.weight",
            "encoder.layer.0.output.dense.bias",
            "encoder.layer.0.output.LayerNorm.weight",
            "encoder.layer.0.output.LayerNorm.bias",
            "pooler.dense.weight",
            "pooler.dense.bias",
        ];
        let listed: Vec<(&str, bool)> = n
            .torch_optimizer_parameters()
            .filter_map(|(t, trained)| Some((t.name.strip_prefix("_hf_fusion_bb.")?, trained)))
            .collect();
        let unread = |t: &str| t.starts_with("pooler.") || t.contains("word_embeddings");
        let want: Vec<(&str, bool)> = expect.iter().map(|&t| (t, !unread(t))).collect();
        assert_eq!(listed, want);
    }
}
