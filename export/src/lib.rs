//! ONNX export of the rulka actor-critic, built in memory from a config and
//! a weight file — no libtorch involved, so collectors can rebuild a model
//! from a weight snapshot on their own.
//!
//! The model (IR 8, opset 17) has a dynamic batch dimension and:
//! - inputs `image`: `uint8 [batch, 1, H, W]` raw pixels (normalised inside
//!   the graph as `(x − 128)/128`; declared but unused by float-only networks)
//!   and `floats`: `float32 [batch, F]` raw floats (normalised inside with the
//!   checkpoint's `float_inputs_mean/std`);
//! - outputs `logits`: `float32 [batch, 12·N]` and `value`: `float32 [batch, 1]`.
//!
//! Spectral-normalised convolutions are exported as their effective weights
//! `W / σ` with `σ = uᵀ W v` from the stored power-iteration vectors
//! (PyTorch's `eval()` semantics). The adaptive max-pool is exported exactly,
//! as per-bin `ReduceMax` over the bins PyTorch uses.
//!
//! ```
//! use rulka_checkpoint::Weights;
//! use rulka_config::{arch::Architecture, Config};
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

use onnx::tensor_proto::DataType;
use onnx::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message as _;
use rulka_checkpoint::{CheckpointError, Weights};
use rulka_config::arch::{
    Architecture, ConvSpec, Stem, LEAKY_RELU_SLOPE, PIXEL_OFFSET, PIXEL_SCALE,
};
use rulka_config::Config;

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
    let z = g.float_branch(&arch, weights)?;
    let h = match &arch.image {
        Some(img) => {
            let vis = g.image_branch(img, weights)?;
            g.node("Concat", vec![vis, z], vec![int("axis", 1)])
        }
        None => z,
    };
    let h = g.linear("trunk.0", &h, weights, true)?;
    let h = g.linear("trunk.2", &h, weights, true)?;
    g.linear_named("policy_head", &h, weights, OUTPUT_LOGITS)?;
    g.linear_named("value_head", &h, weights, OUTPUT_VALUE)?;

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
    ];
    if let Some(meta) = &weights.meta {
        props.push(prop("rulka.step", &meta.step.to_string()));
    }
    let model = ModelProto {
        ir_version: Some(IR_VERSION),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(OPSET),
        }],
        producer_name: Some("rulka".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        graph: Some(graph),
        metadata_props: props,
        ..Default::default()
    };
    Ok(model.encode_to_vec())
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
        self.nodes.push(NodeProto {
            input: inputs,
            output: vec![output.to_string()],
            name: Some(format!("{op}_{}", self.nodes.len())),
            op_type: Some(op.into()),
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

    fn float_branch(&mut self, arch: &Architecture, w: &Weights) -> Result<String, ExportError> {
        let mean = self.weight(w, "float_inputs_mean")?;
        let std = self.weight(w, "float_inputs_std")?;
        let centred = self.node("Sub", vec![INPUT_FLOATS.into(), mean], vec![]);
        let z = self.node("Div", vec![centred, std], vec![]);
        debug_assert_eq!(arch.linears()[0].name, "float_feature_extractor.0");
        let z = self.linear("float_feature_extractor.0", &z, w, true)?;
        self.linear("float_feature_extractor.2", &z, w, true)
    }

    fn linear(
        &mut self,
        name: &str,
        x: &str,
        w: &Weights,
        relu: bool,
    ) -> Result<String, ExportError> {
        let out = self.fresh("gemm");
        self.linear_named(name, x, w, &out)?;
        Ok(if relu { self.node("Relu", vec![out], vec![]) } else { out })
    }

    fn linear_named(
        &mut self,
        name: &str,
        x: &str,
        w: &Weights,
        output: &str,
    ) -> Result<(), ExportError> {
        let wt = self.weight(w, &format!("{name}.weight"))?;
        let b = self.weight(w, &format!("{name}.bias"))?;
        self.node_to("Gemm", vec![x.into(), wt, b], vec![int("transB", 1)], output);
        Ok(())
    }

    fn conv(
        &mut self,
        spec: &ConvSpec,
        x: &str,
        w: &Weights,
        spectral: bool,
    ) -> Result<String, ExportError> {
        let weight_name = format!("{}.weight", spec.name);
        let weight = if spectral {
            let eff = spectral_weight(w, &spec.name)?;
            let shape = [spec.c_out, spec.c_in, spec.kernel, spec.kernel];
            self.init_f32(&weight_name, &shape, &eff)
        } else {
            self.weight(w, &weight_name)?
        };
        let bias = self.weight(w, &format!("{}.bias", spec.name))?;
        let (k, s, p) = (spec.kernel as i64, spec.stride as i64, spec.padding as i64);
        Ok(self.node(
            "Conv",
            vec![x.into(), weight, bias],
            vec![
                ints("kernel_shape", &[k, k]),
                ints("strides", &[s, s]),
                ints("pads", &[p, p, p, p]),
            ],
        ))
    }

    fn image_branch(
        &mut self,
        img: &rulka_config::arch::ImageArch,
        w: &Weights,
    ) -> Result<String, ExportError> {
        let offset = self.init_f32("pixel_offset", &[], &[PIXEL_OFFSET as f32]);
        let scale = self.init_f32("pixel_scale", &[], &[PIXEL_SCALE as f32]);
        let x =
            self.node("Cast", vec![INPUT_IMAGE.into()], vec![int("to", DataType::Float as i64)]);
        let x = self.node("Sub", vec![x, offset], vec![]);
        let mut x = self.node("Div", vec![x, scale], vec![]);
        let convs = img.convs();
        match img.stem {
            Stem::Vanilla => {
                for spec in &convs {
                    let y = self.conv(spec, &x, w, img.spectral_norm)?;
                    x = self.node(
                        "LeakyRelu",
                        vec![y],
                        vec![float("alpha", LEAKY_RELU_SLOPE as f32)],
                    );
                }
            }
            Stem::Impala { .. } => {
                for block in convs.chunks(5) {
                    let y = self.conv(&block[0], &x, w, img.spectral_norm)?;
                    x = self.node(
                        "MaxPool",
                        vec![y],
                        vec![
                            ints("kernel_shape", &[3, 3]),
                            ints("strides", &[2, 2]),
                            ints("pads", &[1, 1, 1, 1]),
                        ],
                    );
                    for pair in block[1..].chunks(2) {
                        let r = self.node("Relu", vec![x.clone()], vec![]);
                        let r = self.conv(&pair[0], &r, w, img.spectral_norm)?;
                        let r = self.node("Relu", vec![r], vec![]);
                        let r = self.conv(&pair[1], &r, w, img.spectral_norm)?;
                        x = self.node("Add", vec![x, r], vec![]);
                    }
                }
                x = self.node("Relu", vec![x], vec![]);
            }
        }
        if let Some(s) = img.adaptive_maxpool {
            let before = rulka_config::arch::ImageArch { adaptive_maxpool: None, ..img.clone() }
                .output_shape();
            x = self.adaptive_max_pool_axis(&x, 2, before.1, s);
            x = self.adaptive_max_pool_axis(&x, 3, before.2, s);
        }
        Ok(self.node("Flatten", vec![x], vec![int("axis", 1)]))
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
