//! ONNX export of the rulka actor-critic — any of the original's networks
//! (Variant A, B or C, as [`rulka_network`] describes them) — built in
//! memory from a config and a weight file; no libtorch involved, so
//! collectors can rebuild a model from a weight snapshot on their own. Each
//! primitive of the network description becomes a fixed pattern of ONNX
//! operators (GELU as `Erf`, attention as `MatMul`/`Softmax`, LayerNorm as
//! `LayerNormalization`, the Hugging Face pixel resize as `Resize`).
//!
//! The model (IR 8, opset 17) has a dynamic batch dimension and:
//! - inputs `image`: `uint8 [batch, 1, H, W]` raw pixels (normalised inside
//!   the graph as `(x − 128)/128`; declared but unused by float-only networks)
//!   and `floats`: `float32 [batch, F]` raw floats (normalised inside with the
//!   checkpoint's `float_inputs_mean/std`);
//! - outputs `logits`: `float32 [batch, 12·N]` and `value`: `float32 [batch, 1]`.
//!
//! With `inference.weights: int8 | int4` the hidden `Linear`s (at least
//! [`MIN_QUANTIZED_WEIGHTS`] weights; not the output heads) are stored quantized, inputs and
//! outputs unchanged: `int8` as per-output-channel `int8` codes run by
//! `DynamicQuantizeLinear` + `MatMulInteger` (standard operators), `int4` as
//! ONNX Runtime's `com.microsoft.MatMulNBits` with one scale per
//! `inference.quant_block` weights ([`quant`]).
//!
//! Spectral-normalised convolutions are exported as their effective weights
//! `W / σ` with `σ = uᵀ W v` from the stored power-iteration vectors
//! (PyTorch's `eval()` semantics). The adaptive max-pool is exported exactly,
//! as per-bin `ReduceMax` over the bins PyTorch uses.
//!
//! ```
//! use rulka_checkpoint::Weights;
//! use rulka_config::Config;
//! use rulka_network::Architecture;
//!
//! let cfg = Config::from_yaml_str("nn: {float_hidden_dim: 16, dense_hidden_dim: 32}", "c")?;
//! let mut weights = Weights::zeros(&Architecture::from_config(&cfg));
//! for t in weights.tensors.values_mut() { t.data.fill(0.01); }
//! let onnx_bytes = rulka_export::export_onnx(&cfg, &weights)?;
//! assert!(onnx_bytes.len() > 1000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all, missing_debug_implementations)]
pub mod onnx;
pub mod quant;

use onnx::tensor_proto::DataType;
use onnx::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message as _;
use rulka_checkpoint::{CheckpointError, Weights};
use rulka_config::{Config, WeightFormat};
use rulka_network::{Architecture, LEAKY_RELU_SLOPE, PIXEL_OFFSET, PIXEL_SCALE};
use rulka_network::{AttnWeights, Net, Node, Op};

/// Name of the image input.
pub const INPUT_IMAGE: &str = "image";
/// Name of the float input.
pub const INPUT_FLOATS: &str = "floats";
/// Name of the logits output.
pub const OUTPUT_LOGITS: &str = "logits";
/// Name of the value output.
pub const OUTPUT_VALUE: &str = "value";
/// ONNX IR version written.
pub const IR_VERSION: i64 = 8;
/// ONNX opset written.
pub const OPSET: i64 = 17;
/// A `Linear` is stored quantized (with `inference.weights: int8 | int4`)
/// when its weight has at least this many elements and it is not one of the
/// output heads (`policy_head`, `value_head`): the hidden layers, which hold
/// the bytes streamed per decision. The heads stay `f32`: every logit goes
/// through them and they are small.
pub const MIN_QUANTIZED_WEIGHTS: usize = 4_096;
/// Layers never quantized.
pub const UNQUANTIZED_HEADS: [&str; 2] = ["policy_head", "value_head"];
/// `MatMulNBits`' `accuracy_level`: the precision ONNX Runtime may compute
/// in (0 = as the inputs, 4 = int8 activations). Chosen by measurement, see
/// docs/bench/inference.md.
pub const QUANT_ACCURACY_LEVEL: i64 = 4;
/// Domain of ONNX Runtime's contrib operators (`MatMulNBits`).
pub const MS_DOMAIN: &str = "com.microsoft";

/// Why a model could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The weights are unreadable or do not fit the configured network.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A tensor holds NaN or infinity.
    #[error("tensor {name} holds non-finite values; refusing to export")]
    NonFinite {
        /// Tensor name.
        name: String,
    },
    /// A spectral-norm layer's σ is zero or not finite.
    #[error("spectral norm of {name} is {sigma}; cannot normalise")]
    DegenerateSpectralNorm {
        /// Conv prefix.
        name: String,
        /// The computed σ.
        sigma: f64,
    },
}

impl ExportError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::Checkpoint(e) => e.kind(),
            Self::NonFinite { .. } | Self::DegenerateSpectralNorm { .. } => K::Corrupt,
        }
    }
}

/// Builds the ONNX model bytes for `cfg`'s network with `weights`, after
/// checking every tensor's name and shape (and, for rulka files, the network hash).
pub fn export_onnx(cfg: &Config, weights: &Weights) -> Result<Vec<u8>, ExportError> {
    let arch = Architecture::from_config(cfg);
    weights.check(&arch, &cfg.network_hash(), false)?;
    if let Some((name, _)) =
        weights.tensors.iter().find(|(_, t)| t.data.iter().any(|x| !x.is_finite()))
    {
        return Err(ExportError::NonFinite { name: name.clone() });
    }
    let mut g = Graph::default();
    let inf = &cfg.inference;
    if inf.weights != WeightFormat::Fp32 {
        g.quant = Some((inf.weights, inf.quant_block as usize));
    }
    g.interpret(&arch.net, weights)?;

    let mut image_dims = vec![dyn_dim("batch"), dim(1)];
    match &arch.image {
        Some(img) => image_dims.extend([dim(img.height as i64), dim(img.width as i64)]),
        None => image_dims.extend([dyn_dim("height"), dyn_dim("width")]),
    }
    let graph = GraphProto {
        node: g.nodes,
        name: Some("rulka_actor_critic".into()),
        initializer: g.inits,
        input: vec![
            value_info(INPUT_IMAGE, DataType::Uint8, image_dims),
            value_info(
                INPUT_FLOATS,
                DataType::Float,
                vec![dyn_dim("batch"), dim(arch.float_dim as i64)],
            ),
        ],
        output: vec![
            value_info(
                OUTPUT_LOGITS,
                DataType::Float,
                vec![dyn_dim("batch"), dim(arch.n_logits() as i64)],
            ),
            value_info(OUTPUT_VALUE, DataType::Float, vec![dyn_dim("batch"), dim(1)]),
        ],
        ..Default::default()
    };
    let mut props = vec![
        prop("rulka.network_hash", &cfg.network_hash()),
        prop("rulka.architecture", &arch.summary()),
        prop("rulka.n_actions", &arch.n_actions.to_string()),
        prop("rulka.n_heads", &arch.n_heads.to_string()),
        prop("rulka.exporter_version", env!("CARGO_PKG_VERSION")),
        prop("rulka.weights", cfg.inference.weights.as_str()),
        prop("rulka.quantized_layers", &g.quantized.join(",")),
    ];
    if let Some(meta) = &weights.meta {
        props.push(prop("rulka.step", &meta.step.to_string()));
    }
    let mut opset_import =
        vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(OPSET) }];
    if !g.quantized.is_empty() && cfg.inference.weights == WeightFormat::Int4 {
        opset_import.push(OperatorSetIdProto { domain: Some(MS_DOMAIN.into()), version: Some(1) });
    }
    let model = ModelProto {
        ir_version: Some(IR_VERSION),
        opset_import,
        producer_name: Some("rulka".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        graph: Some(graph),
        metadata_props: props,
        ..Default::default()
    };
    Ok(model.encode_to_vec())
}

/// Bytes of all initializers (weights, scales, constants) of an ONNX model:
/// what one batch-1 run streams from memory at least.
pub fn initializer_bytes(model: &[u8]) -> Result<usize, prost::DecodeError> {
    let m = ModelProto::decode(model)?;
    Ok(m.graph
        .map_or(0, |g| g.initializer.iter().map(|t| t.raw_data.as_ref().map_or(0, Vec::len)).sum()))
}

/// The `key → value` metadata of an ONNX model (rulka's exports carry
/// `rulka.network_hash`, `rulka.weights`, `rulka.step`, ...).
pub fn metadata(model: &[u8]) -> Result<Vec<(String, String)>, prost::DecodeError> {
    let m = ModelProto::decode(model)?;
    Ok(m.metadata_props
        .into_iter()
        .filter_map(|p| Some((p.key?, p.value.unwrap_or_default())))
        .collect())
}

/// Parses a safetensors buffer and exports it (see [`export_onnx`]).
pub fn export_from_safetensors(
    cfg: &Config,
    bytes: &[u8],
    origin: &str,
) -> Result<Vec<u8>, ExportError> {
    let weights = Weights::from_safetensors(bytes, origin)?;
    export_onnx(cfg, &weights)
}

#[derive(Default)]
struct Graph {
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    counter: usize,
    /// The format and block size when large `Linear`s are stored quantized.
    quant: Option<(WeightFormat, usize)>,
    /// Prefixes of the `Linear`s stored quantized.
    quantized: Vec<String>,
}

impl Graph {
    fn fresh(&mut self, op: &str) -> String {
        self.counter += 1;
        format!("{}_{}", op.to_lowercase(), self.counter)
    }

    fn node(&mut self, op: &str, inputs: Vec<String>, attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh(op);
        self.node_to(op, inputs, attrs, &out);
        out
    }

    fn node_to(&mut self, op: &str, inputs: Vec<String>, attrs: Vec<AttributeProto>, output: &str) {
        self.push_node(op, None, inputs, vec![output.to_string()], attrs);
    }

    /// A node of `op` (in `domain`; `None`: the default ONNX domain).
    fn push_node(
        &mut self,
        op: &str,
        domain: Option<&str>,
        inputs: Vec<String>,
        outputs: Vec<String>,
        attrs: Vec<AttributeProto>,
    ) {
        self.nodes.push(NodeProto {
            input: inputs,
            output: outputs,
            name: Some(format!("{op}_{}", self.nodes.len())),
            op_type: Some(op.into()),
            domain: domain.map(str::to_string),
            attribute: attrs,
            ..Default::default()
        });
    }

    fn init_f32(&mut self, name: &str, dims: &[usize], data: &[f32]) -> String {
        self.inits.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(DataType::Float as i32),
            name: Some(name.into()),
            raw_data: Some(data.iter().flat_map(|x| x.to_le_bytes()).collect()),
            ..Default::default()
        });
        name.to_string()
    }

    fn init_raw(&mut self, name: &str, dims: &[usize], ty: DataType, data: Vec<u8>) -> String {
        self.inits.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(ty as i32),
            name: Some(name.into()),
            raw_data: Some(data),
            ..Default::default()
        });
        name.to_string()
    }

    fn init_i64(&mut self, name: &str, data: &[i64]) -> String {
        self.inits.push(TensorProto {
            dims: vec![data.len() as i64],
            data_type: Some(DataType::Int64 as i32),
            name: Some(name.into()),
            raw_data: Some(data.iter().flat_map(|x| x.to_le_bytes()).collect()),
            ..Default::default()
        });
        name.to_string()
    }

    fn weight(&mut self, weights: &Weights, name: &str) -> Result<String, ExportError> {
        let t = tensor(weights, name)?;
        Ok(self.init_f32(name, &t.shape, &t.data))
    }

    /// A float constant (scalar or tensor) as an initializer with a fresh name.
    fn constant(&mut self, dims: &[usize], data: &[f32]) -> String {
        let name = self.fresh("const");
        self.init_f32(&name, dims, data)
    }

    fn constant_i64(&mut self, data: &[i64]) -> String {
        let name = self.fresh("const_i64");
        self.init_i64(&name, data)
    }

    /// `{p}.weight` transposed to `[in, out]` for `MatMul`.
    fn weight_t(&mut self, w: &Weights, name: &str) -> Result<String, ExportError> {
        let t = tensor(w, name)?;
        let (rows, cols) = (t.shape[0], t.shape[1]);
        Ok(self.init_f32(&format!("{name}.T"), &[cols, rows], &transpose(&t.data, rows, cols)))
    }

    /// `x·Wᵀ + b` for `[B, D]` (one `Gemm`) or `[B, L, D]` (`MatMul` + `Add`).
    fn linear(
        &mut self,
        p: &str,
        bias: bool,
        x: &str,
        rank: usize,
        w: &Weights,
        out: &str,
    ) -> Result<(), ExportError> {
        let t = tensor(w, &format!("{p}.weight"))?;
        if let Some((format, block)) = self.quant {
            if t.data.len() >= MIN_QUANTIZED_WEIGHTS && !UNQUANTIZED_HEADS.contains(&p) {
                let (n, k) = (t.shape[0], t.shape[1]);
                let b = if bias { Some(self.weight(w, &format!("{p}.bias"))?) } else { None };
                match format {
                    WeightFormat::Int4 => self.matmul_nbits(p, x, &t.data, n, k, 4, block, b, out),
                    _ => self.matmul_int8(p, x, &t.data, n, k, b, out),
                }
                self.quantized.push(p.to_string());
                return Ok(());
            }
        }
        if rank == 1 {
            let mut inputs = vec![x.to_string(), self.weight(w, &format!("{p}.weight"))?];
            if bias {
                inputs.push(self.weight(w, &format!("{p}.bias"))?);
            }
            self.node_to("Gemm", inputs, vec![int("transB", 1)], out);
            return Ok(());
        }
        let wt = self.weight_t(w, &format!("{p}.weight"))?;
        if bias {
            let y = self.node("MatMul", vec![x.into(), wt], vec![]);
            let b = self.weight(w, &format!("{p}.bias"))?;
            self.node_to("Add", vec![y, b], vec![], out);
        } else {
            self.node_to("MatMul", vec![x.into(), wt], vec![], out);
        }
        Ok(())
    }

    /// `x·Wᵀ (+ b)` with `W` as `int8` codes and one scale per output
    /// (`quant::quantize_rows_i8`), `x` quantized to `uint8` per call
    /// (`DynamicQuantizeLinear`): standard ONNX operators, which ONNX Runtime's
    /// CPU provider fuses into one integer matrix multiplication.
    #[allow(clippy::too_many_arguments)]
    fn matmul_int8(
        &mut self,
        p: &str,
        x: &str,
        wdata: &[f32],
        n: usize,
        k: usize,
        bias: Option<String>,
        out: &str,
    ) {
        let (codes, scales) = quant::quantize_rows_i8(wdata, n, k);
        let wq = self.init_raw(
            &format!("{p}.weight.T.i8"),
            &[k, n],
            DataType::Int8,
            codes.iter().map(|&c| c as u8).collect(),
        );
        let wzp =
            self.init_raw(&format!("{p}.weight.zero_point"), &[n], DataType::Int8, vec![0; n]);
        let ws = self.init_f32(&format!("{p}.weight.scales"), &[n], &scales);
        let (xq, xs, xzp) = (self.fresh("xq"), self.fresh("xscale"), self.fresh("xzp"));
        let outputs = vec![xq.clone(), xs.clone(), xzp.clone()];
        self.push_node("DynamicQuantizeLinear", None, vec![x.to_string()], outputs, vec![]);
        let acc = self.node("MatMulInteger", vec![xq, wq, xzp, wzp], vec![]);
        let accf = self.node("Cast", vec![acc], vec![int("to", DataType::Float as i64)]);
        let scale = self.node("Mul", vec![xs, ws], vec![]);
        match bias {
            Some(b) => {
                let y = self.node("Mul", vec![accf, scale], vec![]);
                self.node_to("Add", vec![y, b], vec![], out);
            }
            None => self.node_to("Mul", vec![accf, scale], vec![], out),
        }
    }

    /// `x·Wᵀ (+ b)` with `W` block-quantized for ONNX Runtime's
    /// `com.microsoft.MatMulNBits` (see [`quant`]).
    #[allow(clippy::too_many_arguments)]
    fn matmul_nbits(
        &mut self,
        p: &str,
        x: &str,
        wdata: &[f32],
        n: usize,
        k: usize,
        bits: u32,
        block: usize,
        bias: Option<String>,
        out: &str,
    ) {
        let q = quant::quantize(wdata, n, k, bits, block);
        let dims = [n, q.k_blocks(), q.blob_size()];
        let scales = self.init_f32(&format!("{p}.weight.scales"), &[n * q.k_blocks()], &q.scales);
        let codes = self.init_raw(&format!("{p}.weight.q{bits}"), &dims, DataType::Uint8, q.codes);
        let mut inputs = vec![x.to_string(), codes, scales];
        if let Some(b) = bias {
            inputs.extend([String::new(), String::new(), b]);
        }
        let attrs = vec![
            int("K", k as i64),
            int("N", n as i64),
            int("bits", i64::from(bits)),
            int("block_size", block as i64),
            int("accuracy_level", QUANT_ACCURACY_LEVEL),
        ];
        self.push_node("MatMulNBits", Some(MS_DOMAIN), inputs, vec![out.to_string()], attrs);
    }

    /// `x·Wᵀ + b` for `[B, L, D]` from raw row-major `[out, in]` data.
    fn linear_data(
        &mut self,
        name: &str,
        x: &str,
        wdata: &[f32],
        bdata: Option<&[f32]>,
        d_out: usize,
    ) -> String {
        let d_in = wdata.len() / d_out;
        let wt = self.init_f32(
            &format!("{name}.weight.T"),
            &[d_in, d_out],
            &transpose(wdata, d_out, d_in),
        );
        let y = self.node("MatMul", vec![x.into(), wt], vec![]);
        match bdata {
            Some(b) => {
                let b = self.init_f32(&format!("{name}.bias"), &[d_out], b);
                self.node("Add", vec![y, b], vec![])
            }
            None => y,
        }
    }

    /// `[B]` as a 1-element int64 tensor, for shapes built at run time.
    fn batch_dim(&mut self, x: &str) -> String {
        let shape = self.node("Shape", vec![x.into()], vec![]);
        let (s, e) = (self.constant_i64(&[0]), self.constant_i64(&[1]));
        self.node("Slice", vec![shape, s, e], vec![])
    }

    /// Multi-head self-attention over `[B, L, D]`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &mut self,
        aw: &AttnWeights,
        heads: usize,
        x: &str,
        l: usize,
        d: usize,
        w: &Weights,
        out: &str,
    ) -> Result<(), ExportError> {
        let (q, k, v, out_p) = match aw {
            AttnWeights::Packed(p) => {
                let wi = tensor(w, &format!("{p}.in_proj_weight"))?.data.clone();
                let bi = tensor(w, &format!("{p}.in_proj_bias"))?.data.clone();
                let part = |g: &mut Self, i: usize, n: &str| {
                    g.linear_data(
                        &format!("{p}.in_proj.{n}"),
                        x,
                        &wi[i * d * d..(i + 1) * d * d],
                        Some(&bi[i * d..(i + 1) * d]),
                        d,
                    )
                };
                (
                    part(self, 0, "q"),
                    part(self, 1, "k"),
                    part(self, 2, "v"),
                    format!("{p}.out_proj"),
                )
            }
            AttnWeights::Separate { q, k, v, out, qkv_bias } => {
                let proj = |g: &mut Self, p: &str| -> Result<String, ExportError> {
                    let o = g.fresh("proj");
                    g.linear(p, *qkv_bias, x, 2, w, &o)?;
                    Ok(o)
                };
                (proj(self, q)?, proj(self, k)?, proj(self, v)?, out.clone())
            }
        };
        let dh = d / heads;
        let heads_shape = self.constant_i64(&[0, l as i64, heads as i64, dh as i64]);
        let split = |g: &mut Self, t: String, perm: &[i64]| {
            let r = g.node("Reshape", vec![t, heads_shape.clone()], vec![]);
            g.node("Transpose", vec![r], vec![ints("perm", perm)])
        };
        let q = split(self, q, &[0, 2, 1, 3]);
        let k = split(self, k, &[0, 2, 3, 1]);
        let v = split(self, v, &[0, 2, 1, 3]);
        let scores = self.node("MatMul", vec![q, k], vec![]);
        let scale = self.constant(&[], &[(1.0 / (dh as f64).sqrt()) as f32]);
        let scores = self.node("Mul", vec![scores, scale], vec![]);
        let probs = self.node("Softmax", vec![scores], vec![int("axis", -1)]);
        let o = self.node("MatMul", vec![probs, v], vec![]);
        let o = self.node("Transpose", vec![o], vec![ints("perm", &[0, 2, 1, 3])]);
        let seq_shape = self.constant_i64(&[0, l as i64, d as i64]);
        let o = self.node("Reshape", vec![o, seq_shape], vec![]);
        self.linear(&out_p, true, &o, 2, w, out)
    }

    /// Emits every node of `net`; values are named `v{i}`, except the
    /// logits and value outputs.
    fn interpret(&mut self, net: &Net, w: &Weights) -> Result<(), ExportError> {
        let name = |i: usize| -> String {
            if i == net.logits {
                OUTPUT_LOGITS.to_string()
            } else if i == net.value {
                OUTPUT_VALUE.to_string()
            } else {
                format!("v{i}")
            }
        };
        for (i, node) in net.nodes.iter().enumerate() {
            let inputs: Vec<(String, &[usize])> =
                node.inputs.iter().map(|&j| (name(j), net.nodes[j].dims.as_slice())).collect();
            self.emit(node, &name(i), &inputs, w)?;
        }
        Ok(())
    }

    /// Emits one node reading `inputs` (name and dims of each) into `out`.
    fn emit(
        &mut self,
        node: &Node,
        out: &str,
        inputs: &[(String, &[usize])],
        w: &Weights,
    ) -> Result<(), ExportError> {
        let x = |k: usize| inputs[k].0.clone();
        let in_dims = |k: usize| inputs[k].1;
        match &node.op {
            Op::Image => {
                let offset = self.constant(&[], &[PIXEL_OFFSET as f32]);
                let scale = self.constant(&[], &[PIXEL_SCALE as f32]);
                let f = self.node(
                    "Cast",
                    vec![INPUT_IMAGE.into()],
                    vec![int("to", DataType::Float as i64)],
                );
                let c = self.node("Sub", vec![f, offset], vec![]);
                self.node_to("Div", vec![c, scale], vec![], out);
            }
            Op::Floats => {
                let mean = self.weight(w, "float_inputs_mean")?;
                let std = self.weight(w, "float_inputs_std")?;
                let c = self.node("Sub", vec![INPUT_FLOATS.into(), mean], vec![]);
                self.node_to("Div", vec![c, std], vec![], out);
            }
            Op::Conv2d { p, kernel, stride, pad, spectral } => {
                let weight_name = format!("{p}.weight");
                let weight = if *spectral {
                    let eff = spectral_weight(w, p)?;
                    let shape = tensor(w, &format!("{p}.weight_orig"))?.shape.clone();
                    self.init_f32(&weight_name, &shape, &eff)
                } else {
                    self.weight(w, &weight_name)?
                };
                let bias = self.weight(w, &format!("{p}.bias"))?;
                let (k, s, q) = (*kernel as i64, *stride as i64, *pad as i64);
                self.node_to(
                    "Conv",
                    vec![x(0), weight, bias],
                    vec![
                        ints("kernel_shape", &[k, k]),
                        ints("strides", &[s, s]),
                        ints("pads", &[q, q, q, q]),
                    ],
                    out,
                );
            }
            Op::Conv1d { p, kernel, pad } => {
                let weight = self.weight(w, &format!("{p}.weight"))?;
                let bias = self.weight(w, &format!("{p}.bias"))?;
                let (k, q) = (*kernel as i64, *pad as i64);
                self.node_to(
                    "Conv",
                    vec![x(0), weight, bias],
                    vec![ints("kernel_shape", &[k]), ints("strides", &[1]), ints("pads", &[q, q])],
                    out,
                );
            }
            Op::Linear { p, bias } => self.linear(p, *bias, &x(0), in_dims(0).len(), w, out)?,
            Op::Relu => self.node_to("Relu", vec![x(0)], vec![], out),
            Op::LeakyRelu => self.node_to(
                "LeakyRelu",
                vec![x(0)],
                vec![float("alpha", LEAKY_RELU_SLOPE as f32)],
                out,
            ),
            Op::Gelu => {
                // Opset 17 has no Gelu: 0.5·x·(1 + erf(x/√2)), as PyTorch's exact GELU.
                let sqrt2 = self.constant(&[], &[std::f32::consts::SQRT_2]);
                let (one, half) = (self.constant(&[], &[1.0]), self.constant(&[], &[0.5]));
                let s = self.node("Div", vec![x(0), sqrt2], vec![]);
                let e = self.node("Erf", vec![s], vec![]);
                let e = self.node("Add", vec![e, one], vec![]);
                let m = self.node("Mul", vec![x(0), e], vec![]);
                self.node_to("Mul", vec![m, half], vec![], out);
            }
            Op::MaxPool2d { kernel, stride, pad } => {
                let (k, s, q) = (*kernel as i64, *stride as i64, *pad as i64);
                self.node_to(
                    "MaxPool",
                    vec![x(0)],
                    vec![
                        ints("kernel_shape", &[k, k]),
                        ints("strides", &[s, s]),
                        ints("pads", &[q, q, q, q]),
                    ],
                    out,
                );
            }
            Op::AdaptiveMaxPool2d { out: s } => {
                let (h, wd) = (in_dims(0)[1], in_dims(0)[2]);
                let y = self.adaptive_max_pool_axis(&x(0), 2, h, *s);
                let y = self.adaptive_max_pool_axis(&y, 3, wd, *s);
                self.node_to("Identity", vec![y], vec![], out);
            }
            Op::Add => self.node_to("Add", vec![x(0), x(1)], vec![], out),
            Op::Concat => {
                let parts = (0..node.inputs.len()).map(x).collect();
                self.node_to("Concat", parts, vec![int("axis", 1)], out);
            }
            Op::LayerNorm { p, eps } => {
                let scale = self.weight(w, &format!("{p}.weight"))?;
                let bias = self.weight(w, &format!("{p}.bias"))?;
                self.node_to(
                    "LayerNormalization",
                    vec![x(0), scale, bias],
                    vec![int("axis", -1), float("epsilon", *eps as f32)],
                    out,
                );
            }
            Op::Attention { w: aw, heads, .. } => {
                let (l, d) = (in_dims(0)[0], in_dims(0)[1]);
                self.attention(aw, *heads, &x(0), l, d, w, out)?;
            }
            Op::PatchTokens => {
                let (c, h, wd) = (in_dims(0)[0], in_dims(0)[1], in_dims(0)[2]);
                let shape = self.constant_i64(&[0, c as i64, (h * wd) as i64]);
                let r = self.node("Reshape", vec![x(0), shape], vec![]);
                self.node_to("Transpose", vec![r], vec![ints("perm", &[0, 2, 1])], out);
            }
            Op::AddParam { name, rows } => {
                let t = tensor(w, name)?;
                let p = match rows {
                    None => self.weight(w, name)?,
                    Some(r) => {
                        let cols = t.shape[1];
                        let rows_data = t.data[..r * cols].to_vec();
                        self.init_f32(&format!("{name}[:{r}]"), &[*r, cols], &rows_data)
                    }
                };
                self.node_to("Add", vec![x(0), p], vec![], out);
            }
            Op::PrependParam { name } => {
                let p = self.weight(w, name)?;
                let d = tensor(w, name)?.shape[2];
                let b = self.batch_dim(&x(0));
                let rest = self.constant_i64(&[1, d as i64]);
                let target = self.node("Concat", vec![b, rest], vec![int("axis", 0)]);
                let cls = self.node("Expand", vec![p, target], vec![]);
                self.node_to("Concat", vec![cls, x(0)], vec![int("axis", 1)], out);
            }
            Op::Mean { axis } => self.node_to(
                "ReduceMean",
                vec![x(0)],
                vec![ints("axes", &[*axis as i64 + 1]), int("keepdims", 0)],
                out,
            ),
            Op::Token { index } => {
                let idx = self.fresh("token_index");
                self.inits.push(TensorProto {
                    dims: vec![],
                    data_type: Some(DataType::Int64 as i32),
                    name: Some(idx.clone()),
                    raw_data: Some((*index as i64).to_le_bytes().to_vec()),
                    ..Default::default()
                });
                self.node_to("Gather", vec![x(0), idx], vec![int("axis", 1)], out);
            }
            Op::Reshape => {
                let mut shape = vec![0i64];
                shape.extend(node.dims.iter().map(|&d| d as i64));
                let shape = self.constant_i64(&shape);
                self.node_to("Reshape", vec![x(0), shape], vec![], out);
            }
            Op::Transpose => {
                self.node_to("Transpose", vec![x(0)], vec![ints("perm", &[0, 2, 1])], out)
            }
            Op::HfPixels { height, width, mean_std } => {
                let rgb = self.node("Concat", vec![x(0), x(0), x(0)], vec![int("axis", 1)]);
                let b = self.batch_dim(&x(0));
                let rest = self.constant_i64(&[3, *height as i64, *width as i64]);
                let sizes = self.node("Concat", vec![b, rest], vec![int("axis", 0)]);
                // PyTorch's bilinear interpolate with align_corners=False.
                let resized = self.node(
                    "Resize",
                    vec![rgb, String::new(), String::new(), sizes],
                    vec![
                        string("mode", "linear"),
                        string("coordinate_transformation_mode", "half_pixel"),
                    ],
                );
                let (lo, hi) = (self.constant(&[], &[-1.0]), self.constant(&[], &[1.0]));
                let c = self.node("Clip", vec![resized, lo, hi], vec![]);
                let (one, half) = (self.constant(&[], &[1.0]), self.constant(&[], &[0.5]));
                let c = self.node("Add", vec![c, one], vec![]);
                match mean_std {
                    Some((m, s)) => {
                        let c = self.node("Mul", vec![c, half], vec![]);
                        let mean = self.constant(&[1, 3, 1, 1], &m.map(|v| v as f32));
                        let std = self.constant(&[1, 3, 1, 1], &s.map(|v| v as f32));
                        let c = self.node("Sub", vec![c, mean], vec![]);
                        self.node_to("Div", vec![c, std], vec![], out);
                    }
                    None => self.node_to("Mul", vec![c, half], vec![], out),
                }
            }
            Op::Zeros => {
                let b = self.batch_dim(&x(0));
                let dims: Vec<i64> = node.dims.iter().map(|&d| d as i64).collect();
                let rest = self.constant_i64(&dims);
                let shape = self.node("Concat", vec![b, rest], vec![int("axis", 0)]);
                // ConstantOfShape without `value`: float32 zeros.
                self.node_to("ConstantOfShape", vec![shape], vec![], out);
            }
            Op::Dropout { .. } => self.node_to("Identity", vec![x(0)], vec![], out),
        }
        Ok(())
    }

    /// PyTorch's adaptive max-pool along one axis: output bin i covers
    /// `[floor(i·n/s), ceil((i+1)·n/s))`.
    fn adaptive_max_pool_axis(&mut self, x: &str, axis: i64, n: usize, s: usize) -> String {
        let axes = self.init_i64(&format!("adaptive_axes_{axis}"), &[axis]);
        let mut bins = Vec::with_capacity(s);
        for i in 0..s {
            let start = (i * n) / s;
            let end = ((i + 1) * n).div_ceil(s);
            let starts = self.init_i64(&format!("adaptive_{axis}_{i}_start"), &[start as i64]);
            let ends = self.init_i64(&format!("adaptive_{axis}_{i}_end"), &[end as i64]);
            let slice = self.node("Slice", vec![x.into(), starts, ends, axes.clone()], vec![]);
            bins.push(self.node(
                "ReduceMax",
                vec![slice],
                vec![ints("axes", &[axis]), int("keepdims", 1)],
            ));
        }
        self.node("Concat", bins, vec![int("axis", axis)])
    }
}

fn tensor<'a>(w: &'a Weights, name: &str) -> Result<&'a rulka_checkpoint::Tensor, ExportError> {
    // `check` ran first, so every architecture tensor is present.
    w.get(name).ok_or_else(|| {
        ExportError::Checkpoint(CheckpointError::Tensors {
            origin: "weights".into(),
            mismatch: rulka_checkpoint::Mismatch {
                missing: vec![name.into()],
                ..Default::default()
            },
        })
    })
}

/// `W / σ` with `σ = uᵀ (W_mat v)`, accumulated in f64.
fn spectral_weight(w: &Weights, prefix: &str) -> Result<Vec<f32>, ExportError> {
    let orig = tensor(w, &format!("{prefix}.weight_orig"))?;
    let u = tensor(w, &format!("{prefix}.weight_u"))?;
    let v = tensor(w, &format!("{prefix}.weight_v"))?;
    let cols = v.data.len();
    let sigma: f64 = u
        .data
        .iter()
        .enumerate()
        .map(|(r, &ur)| {
            let row = &orig.data[r * cols..(r + 1) * cols];
            f64::from(ur)
                * row.iter().zip(&v.data).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>()
        })
        .sum();
    if !sigma.is_finite() || sigma == 0.0 {
        return Err(ExportError::DegenerateSpectralNorm { name: prefix.into(), sigma });
    }
    Ok(orig.data.iter().map(|&x| (f64::from(x) / sigma) as f32).collect())
}

/// Row-major `[rows, cols]` → `[cols, rows]`.
fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(onnx::attribute_proto::AttributeType::String as i32),
        ..Default::default()
    }
}

fn int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(i),
        r#type: Some(onnx::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    }
}

fn float(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(f),
        r#type: Some(onnx::attribute_proto::AttributeType::Float as i32),
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(onnx::attribute_proto::AttributeType::Ints as i32),
        ..Default::default()
    }
}

fn dim(n: i64) -> onnx::tensor_shape_proto::Dimension {
    onnx::tensor_shape_proto::Dimension {
        value: Some(onnx::tensor_shape_proto::dimension::Value::DimValue(n)),
        ..Default::default()
    }
}

fn dyn_dim(name: &str) -> onnx::tensor_shape_proto::Dimension {
    onnx::tensor_shape_proto::Dimension {
        value: Some(onnx::tensor_shape_proto::dimension::Value::DimParam(name.into())),
        ..Default::default()
    }
}

fn value_info(
    name: &str,
    elem: DataType,
    dims: Vec<onnx::tensor_shape_proto::Dimension>,
) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim: dims }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn prop(key: &str, value: &str) -> StringStringEntryProto {
    StringStringEntryProto { key: Some(key.into()), value: Some(value.into()) }
}
