//! `nn.vis`, `nn.encoder` and the transformer blocks of the original's
//! multimodal networks (Variant B `HfActorCritic`, Variant C
//! `TorchMultimodalActorCritic`), with the original's keys and defaults
//! (`config_files/nn_schema.py`), and the Hugging Face model folders they name.
//!
//! A Hugging Face backbone is a local folder (`model_name_or_path`: there is
//! no hub access at run time) in the `transformers` format: `config.json`,
//! `model.safetensors` and, for a vision model, `preprocessor_config.json`.
//! Loading a config reads the folder's `config.json` once and records the
//! model's shape under `backbone:` (what `rulka config show` prints), so a
//! collector that gets the run's config from the trainer builds the same
//! network without the folder. The weights are read from the folder only
//! when a fresh network is made.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// `nn.vis:` — the image branch of Variants B and C.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VisConfig {
    /// Freeze the vision stem in training (the original's `nn.vis.freeze`:
    /// `img_head`, `backbone`, `patch_embed`, `enc_vis`, `pos_vis`, `vis_proj`,
    /// `vis_refine`, `cnn_to_vis`, `cnn_to_fuse`, … are not optimised).
    pub freeze: bool,
    /// A transformer image encoder instead of the CNN (`nn.cnn`): a native
    /// patch encoder (`use_hf_backbone: false`, Variant C) or a Hugging Face
    /// ViT (`use_hf_backbone: true`: Variant B, or Variant C's `hf_transformer`).
    pub transformer: Option<TransformerConfig>,
}

/// A transformer slot (`nn.vis.transformer`, `nn.encoder.transformer`), the
/// original's `TransformersConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformerConfig {
    /// Use the Hugging Face model in `model_name_or_path`.
    pub use_hf_backbone: bool,
    /// The Hugging Face model's local folder.
    pub model_name_or_path: String,
    /// Accepted for the original's configs; rulka never runs model code
    /// from a folder, so it has no effect.
    pub trust_remote_code: bool,
    /// Dropout on the Hugging Face backbone's output tokens.
    pub hidden_dropout_prob: f64,
    /// Token width of the native encoder (and the projection of a backbone's tokens).
    pub d_model: u32,
    /// Native encoder layers (0: none).
    pub n_layers: u32,
    /// Attention heads.
    pub n_heads: u32,
    /// Feed-forward width `max(64, d_model · ff_mult)`.
    pub ff_mult: u32,
    /// Dropout inside the native encoder layers.
    pub dropout: f64,
    /// Patch side of the native patch embedding.
    pub patch_size: u32,
    /// `post_concat` (`fused_vector`) and `vision_transformer` with a
    /// non-linear fusion encoder: tokens made from the fused vector.
    pub post_concat_seq_len: u32,
    /// `unified` and `post_concat` + `token_sequence` (`dense`): float tokens.
    pub unified_float_tokens: u32,
    /// Vision tokens handed to the fusion: one `summary` or all `patch_tokens`.
    pub fusion_tokens: FusionTokens,
    /// The Hugging Face model's shape, read from `model_name_or_path` when
    /// the config is loaded (leave it out; a config carrying it needs no folder).
    pub backbone: Option<HfModel>,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        Self {
            use_hf_backbone: false,
            model_name_or_path: String::new(),
            trust_remote_code: false,
            hidden_dropout_prob: 0.0,
            d_model: 256,
            n_layers: 2,
            n_heads: 4,
            ff_mult: 4,
            dropout: 0.0,
            patch_size: 8,
            post_concat_seq_len: 4,
            unified_float_tokens: 1,
            fusion_tokens: FusionTokens::Summary,
            backbone: None,
        }
    }
}

impl TransformerConfig {
    /// Feed-forward width of a native encoder layer: `max(64, d_model · ff_mult)`.
    pub fn dim_ff(&self) -> usize {
        64.max(self.d_model as usize * self.ff_mult as usize)
    }
}

/// Vision tokens handed to the fusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FusionTokens {
    /// One token: CLS, the patch mean or the CNN features.
    Summary,
    /// Every patch token.
    PatchTokens,
}

/// `nn.encoder:` — the fusion stack of Variant C.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EncoderConfig {
    /// Freeze the fusion stack (`bridge`, `fused_to_seq`, `pos_*`,
    /// `float_to_tokens`, `enc_fusion_native`, …) in training.
    pub freeze: bool,
    /// The fusion trunk; unset: `linear` for `vision_transformer`, else
    /// `native_transformer` (`hf_embedding` when `transformer.use_hf_backbone`).
    pub fusion_encoder: Option<FusionEncoder>,
    /// `post_concat`: one fused vector cut into tokens, or an explicit
    /// `[vision tokens | float tokens]` sequence.
    pub post_concat_layout: PostConcatLayout,
    /// `token_sequence`: float tokens from the normalised floats (`raw`) or
    /// from the float MLP's output (`mlp_hidden`).
    pub float_token_input: FloatTokenInput,
    /// `token_sequence`: `dense` (`Linear(F → K·d)`) or `per_feature` (one
    /// token per float: `Linear(1, d)` + a learned slot embedding).
    pub float_token_layout: FloatTokenLayout,
    /// The fusion transformer (width, depth, heads, sequence lengths).
    pub transformer: TransformerConfig,
    /// `fusion_encoder: mlp` settings.
    pub fusion_mlp: FusionMlpConfig,
    /// `fusion_encoder: cnn` settings.
    pub fusion_cnn: FusionCnnConfig,
    /// `fusion_encoder: hf_embedding`: a Hugging Face encoder fed token
    /// embeddings (alternative to `transformer.use_hf_backbone`).
    pub hf_embedding: Option<HfEmbeddingConfig>,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        Self {
            freeze: false,
            fusion_encoder: None,
            post_concat_layout: PostConcatLayout::FusedVector,
            float_token_input: FloatTokenInput::Raw,
            float_token_layout: FloatTokenLayout::Dense,
            transformer: TransformerConfig::default(),
            fusion_mlp: FusionMlpConfig::default(),
            fusion_cnn: FusionCnnConfig::default(),
            hf_embedding: None,
        }
    }
}

/// The fusion trunk after the fusion tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FusionEncoder {
    /// Mean of the tokens (`vision_transformer`: one `Linear` bridge).
    Linear,
    /// `nn.TransformerEncoder` (post-norm, GELU), then the token mean.
    NativeTransformer,
    /// An MLP on the flattened tokens.
    Mlp,
    /// A 1-D CNN over the tokens, then the mean over positions.
    Cnn,
    /// A Hugging Face encoder fed token embeddings, then the token mean.
    HfEmbedding,
}

/// `post_concat` layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PostConcatLayout {
    /// `concat(image vector, float MLP) → Linear → post_concat_seq_len tokens`.
    FusedVector,
    /// `[vision tokens | float tokens]`.
    TokenSequence,
}

/// Float-token input of `token_sequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloatTokenInput {
    /// The normalised floats.
    Raw,
    /// The float MLP's output.
    MlpHidden,
}

/// Float-token layout of `token_sequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloatTokenLayout {
    /// `Linear(F → K·d)`, K = `unified_float_tokens`.
    Dense,
    /// One token per float.
    PerFeature,
}

/// `nn.encoder.fusion_mlp:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FusionMlpConfig {
    /// Hidden width (≥ 32).
    pub hidden_dim: u32,
    /// Linear layers (≥ 1; the last maps to `d_model`).
    pub n_layers: u32,
    /// Dropout after each hidden layer.
    pub dropout: f64,
}

impl Default for FusionMlpConfig {
    fn default() -> Self {
        Self { hidden_dim: 512, n_layers: 2, dropout: 0.0 }
    }
}

/// `nn.encoder.fusion_cnn:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FusionCnnConfig {
    /// Channels of each `Conv1d` (+ReLU) layer.
    pub hidden_channels: Vec<u32>,
    /// Kernel size (padding `k / 2`).
    pub kernel_size: u32,
    /// Dropout after each layer.
    pub dropout: f64,
}

impl Default for FusionCnnConfig {
    fn default() -> Self {
        Self { hidden_channels: vec![256, 256], kernel_size: 3, dropout: 0.0 }
    }
}

/// `nn.encoder.hf_embedding:`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HfEmbeddingConfig {
    /// The encoder's local folder.
    pub model_name_or_path: String,
    /// Accepted for the original's configs; no effect.
    pub trust_remote_code: bool,
    /// Dropout on the embeddings fed to the encoder.
    pub hidden_dropout_prob: f64,
    /// The encoder's shape, read from the folder when the config is loaded.
    pub backbone: Option<HfModel>,
}

/// The shape of a Hugging Face model folder, from its `config.json` (and,
/// for a vision model, `preprocessor_config.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model_type", rename_all = "snake_case", deny_unknown_fields)]
pub enum HfModel {
    /// A ViT (`ViTModel`): patch embedding + CLS + learned positions,
    /// pre-norm encoder layers, final LayerNorm.
    Vit(VitSpec),
    /// A BERT (`BertModel`) fed `inputs_embeds`: learned positions and
    /// token type 0, LayerNorm, post-norm encoder layers.
    Bert(BertSpec),
}

/// A ViT folder's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitSpec {
    /// Token width.
    pub hidden_size: u32,
    /// Encoder layers.
    pub num_hidden_layers: u32,
    /// Attention heads.
    pub num_attention_heads: u32,
    /// Feed-forward width.
    pub intermediate_size: u32,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Dropout on embeddings and sublayer outputs.
    pub hidden_dropout_prob: f64,
    /// Dropout on attention probabilities.
    pub attention_probs_dropout_prob: f64,
    /// Input side the positions are made for.
    pub image_size: u32,
    /// Patch side.
    pub patch_size: u32,
    /// Input channels.
    pub num_channels: u32,
    /// Biases on query, key and value.
    pub qkv_bias: bool,
    /// The processor's resize target `[height, width]`.
    pub pixel_size: [u32; 2],
    /// The processor's per-channel mean (None: no normalisation).
    pub pixel_mean: Option<[f64; 3]>,
    /// The processor's per-channel std.
    pub pixel_std: Option<[f64; 3]>,
}

impl VitSpec {
    /// Patch tokens (without CLS) for the processor's image size.
    pub fn n_patches(&self) -> usize {
        let p = self.patch_size as usize;
        (self.pixel_size[0] as usize / p) * (self.pixel_size[1] as usize / p)
    }
}

/// A BERT folder's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BertSpec {
    /// Token width.
    pub hidden_size: u32,
    /// Encoder layers.
    pub num_hidden_layers: u32,
    /// Attention heads.
    pub num_attention_heads: u32,
    /// Feed-forward width.
    pub intermediate_size: u32,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Dropout on embeddings and sublayer outputs.
    pub hidden_dropout_prob: f64,
    /// Dropout on attention probabilities.
    pub attention_probs_dropout_prob: f64,
    /// Rows of the position-embedding table (the longest token sequence).
    pub max_position_embeddings: u32,
    /// Rows of the word-embedding table (kept in the state dict; unused).
    pub vocab_size: u32,
    /// Rows of the token-type table (row 0 is added).
    pub type_vocab_size: u32,
}

/// Reads a Hugging Face folder's shape: `config.json` (a `vit` or `bert`
/// model with GELU activations) and, for a ViT, `preprocessor_config.json`
/// (size, image_mean, image_std; the ViT processor's defaults when absent).
/// Errors name the file and the problem.
pub fn read_hf_model(folder: &Path) -> Result<HfModel, String> {
    if !folder.is_dir() {
        return Err(format!(
            "{}: no such folder (a local Hugging Face model folder with config.json and model.safetensors is needed; rulka does not download models)",
            folder.display()
        ));
    }
    let cfg_path = folder.join("config.json");
    let text = std::fs::read_to_string(&cfg_path)
        .map_err(|e| format!("{}: cannot read: {e}", cfg_path.display()))?;
    let c: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not JSON: {e}", cfg_path.display()))?;
    let at = |k: &str| format!("{}: {k}", cfg_path.display());
    let uint = |k: &str, default: Option<u64>| -> Result<u32, String> {
        match c.get(k) {
            Some(v) => v
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| format!("{} is {v}, not a whole number", at(k))),
            None => default.map(|d| d as u32).ok_or_else(|| format!("{} is missing", at(k))),
        }
    };
    let float = |k: &str, default: f64| -> Result<f64, String> {
        match c.get(k) {
            Some(v) => v.as_f64().ok_or_else(|| format!("{} is {v}, not a number", at(k))),
            None => Ok(default),
        }
    };
    let act = c.get("hidden_act").and_then(|v| v.as_str()).unwrap_or("gelu");
    if act != "gelu" {
        return Err(format!(
            "{} is {act:?}; rulka builds the exact (erf) GELU only",
            at("hidden_act")
        ));
    }
    let model_type = c.get("model_type").and_then(|v| v.as_str()).unwrap_or("");
    match model_type {
        "vit" => {
            let image_size = uint("image_size", Some(224))?;
            let (pixel_size, pixel_mean, pixel_std) = read_vit_processor(folder, image_size)?;
            let spec = VitSpec {
                hidden_size: uint("hidden_size", Some(768))?,
                num_hidden_layers: uint("num_hidden_layers", Some(12))?,
                num_attention_heads: uint("num_attention_heads", Some(12))?,
                intermediate_size: uint("intermediate_size", Some(3072))?,
                layer_norm_eps: float("layer_norm_eps", 1e-12)?,
                hidden_dropout_prob: float("hidden_dropout_prob", 0.0)?,
                attention_probs_dropout_prob: float("attention_probs_dropout_prob", 0.0)?,
                image_size,
                patch_size: uint("patch_size", Some(16))?,
                num_channels: uint("num_channels", Some(3))?,
                qkv_bias: c.get("qkv_bias").and_then(|v| v.as_bool()).unwrap_or(true),
                pixel_size,
                pixel_mean,
                pixel_std,
            };
            if spec.num_channels != 3 {
                return Err(format!(
                    "{} is {}; the original feeds 3-channel pixels",
                    at("num_channels"),
                    spec.num_channels
                ));
            }
            if spec.pixel_size != [spec.image_size, spec.image_size] {
                return Err(format!(
                    "{}: the processor resizes to {}x{} but the model's positions are for {}x{} (image_size)",
                    folder.display(),
                    spec.pixel_size[0],
                    spec.pixel_size[1],
                    spec.image_size,
                    spec.image_size
                ));
            }
            if spec.patch_size == 0 || spec.image_size % spec.patch_size != 0 {
                return Err(format!(
                    "{}: patch_size {} does not divide image_size {}",
                    cfg_path.display(),
                    spec.patch_size,
                    spec.image_size
                ));
            }
            check_heads(&cfg_path, spec.hidden_size, spec.num_attention_heads)?;
            Ok(HfModel::Vit(spec))
        }
        "bert" => {
            let pos = c.get("position_embedding_type").and_then(|v| v.as_str());
            if pos.is_some_and(|p| p != "absolute") {
                return Err(format!(
                    "{} is {pos:?}; rulka builds absolute positions only",
                    at("position_embedding_type")
                ));
            }
            let spec = BertSpec {
                hidden_size: uint("hidden_size", Some(768))?,
                num_hidden_layers: uint("num_hidden_layers", Some(12))?,
                num_attention_heads: uint("num_attention_heads", Some(12))?,
                intermediate_size: uint("intermediate_size", Some(3072))?,
                layer_norm_eps: float("layer_norm_eps", 1e-12)?,
                hidden_dropout_prob: float("hidden_dropout_prob", 0.1)?,
                attention_probs_dropout_prob: float("attention_probs_dropout_prob", 0.1)?,
                max_position_embeddings: uint("max_position_embeddings", Some(512))?,
                vocab_size: uint("vocab_size", Some(30522))?,
                type_vocab_size: uint("type_vocab_size", Some(2))?,
            };
            check_heads(&cfg_path, spec.hidden_size, spec.num_attention_heads)?;
            Ok(HfModel::Bert(spec))
        }
        other => Err(format!(
            "{} is {other:?}; rulka reads ViT-format (\"vit\") vision models and BERT-format (\"bert\") encoders",
            at("model_type")
        )),
    }
}

fn check_heads(path: &Path, hidden: u32, heads: u32) -> Result<(), String> {
    if heads == 0 || hidden % heads != 0 {
        return Err(format!(
            "{}: hidden_size {hidden} is not divisible by num_attention_heads {heads}",
            path.display()
        ));
    }
    Ok(())
}

type Processor = ([u32; 2], Option<[f64; 3]>, Option<[f64; 3]>);

/// `preprocessor_config.json`: resize target, mean and std; without the
/// file, the ViT processor's defaults (the model's image size, mean and std 0.5).
fn read_vit_processor(folder: &Path, image_size: u32) -> Result<Processor, String> {
    let path = folder.join("preprocessor_config.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(([image_size, image_size], Some([0.5; 3]), Some([0.5; 3])));
    };
    let p: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let size = match p.get("size") {
        Some(serde_json::Value::Object(m)) => match (m.get("height"), m.get("width")) {
            (Some(h), Some(w)) => [h.as_u64().unwrap_or(0) as u32, w.as_u64().unwrap_or(0) as u32],
            _ => [224, 224], // the original falls back to 224×224
        },
        Some(serde_json::Value::Array(a)) if a.len() == 2 => {
            [a[0].as_u64().unwrap_or(0) as u32, a[1].as_u64().unwrap_or(0) as u32]
        }
        Some(v) if v.is_u64() => [v.as_u64().unwrap_or(0) as u32; 2],
        _ => [224, 224],
    };
    if size[0] == 0 || size[1] == 0 {
        return Err(format!("{}: size {:?} is not an image size", path.display(), p.get("size")));
    }
    let triple = |k: &str| -> Result<Option<[f64; 3]>, String> {
        match p.get(k) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::Array(a)) if a.len() == 3 => {
                let mut out = [0.0; 3];
                for (o, v) in out.iter_mut().zip(a) {
                    *o = v.as_f64().ok_or_else(|| format!("{}: {k} holds {v}", path.display()))?;
                }
                Ok(Some(out))
            }
            Some(v) => Err(format!("{}: {k} is {v}; expected 3 numbers", path.display())),
        }
    };
    let (mean, std) = (triple("image_mean")?, triple("image_std")?);
    if mean.is_some() != std.is_some() {
        return Err(format!("{}: image_mean and image_std go together", path.display()));
    }
    if std.is_some_and(|s| s.iter().any(|&x| x <= 0.0 || !x.is_finite())) {
        return Err(format!("{}: image_std must be positive", path.display()));
    }
    Ok((size, mean, std))
}
