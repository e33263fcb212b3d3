//! The actor-critic's architecture as plain data: its inputs and outputs,
//! which of the original's networks it is, and [`Net`] — every tensor's
//! PyTorch state-dict name and shape and the forward pass. The tch learner
//! and the ONNX exporter are both built from this, so they cannot disagree
//! about names, shapes or what is computed.

use rulka_config::{Config, NetworkKind, VisBranch, N_ACTIONS};
use rulka_config::{FusionEncoder, HfModel};

use crate::net::Net;
use crate::spec::{CnnArch, Stem, TensorRole, TensorSpec};

/// Slope of the vanilla stem's LeakyReLU (PyTorch's default).
pub const LEAKY_RELU_SLOPE: f64 = 0.01;

/// Pixel normalisation `(x − PIXEL_OFFSET) / PIXEL_SCALE`.
pub const PIXEL_OFFSET: f64 = 128.0;
/// See [`PIXEL_OFFSET`].
pub const PIXEL_SCALE: f64 = 128.0;

/// The network's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Architecture {
    /// The frame the network reads; `None` for a float-only policy (`nn.no_image`).
    pub image: Option<Frame>,
    /// Float input length F.
    pub float_dim: usize,
    /// Actions per head (12).
    pub n_actions: usize,
    /// Action heads N (multi-offset block length).
    pub n_heads: usize,
    /// Which of the original's networks.
    pub kind: NetworkKind,
    /// Tensors and forward pass.
    pub net: Net,
    summary: String,
}

/// The frame size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Height in pixels.
    pub height: usize,
    /// Width in pixels.
    pub width: usize,
}

impl Architecture {
    /// The architecture a (validated) config describes.
    pub fn from_config(cfg: &Config) -> Self {
        let nn = &cfg.nn;
        let image = (!nn.no_image)
            .then_some(Frame { height: nn.image_height as usize, width: nn.image_width as usize });
        let net = Net::from_config(cfg);
        let mut arch = Self {
            image,
            float_dim: cfg.float_input_dim(),
            n_actions: N_ACTIONS,
            n_heads: cfg.n_action_heads(),
            kind: cfg.network_kind(),
            net,
            summary: String::new(),
        };
        arch.summary = arch.describe(cfg);
        arch
    }

    /// Policy logits per sample: `n_actions · n_heads`.
    pub fn n_logits(&self) -> usize {
        self.n_actions * self.n_heads
    }

    /// Every tensor of the state dict, with the original's names.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        self.net.tensors.clone()
    }

    /// Total number of trainable scalars.
    pub fn n_parameters(&self) -> usize {
        self.net
            .tensors
            .iter()
            .filter(|t| t.role == TensorRole::Parameter)
            .map(|t| t.shape.iter().product::<usize>())
            .sum()
    }

    /// The CNN of a Variant A network with an image (the only network the
    /// Python learner baseline replicates).
    pub fn variant_a_cnn(&self, cfg: &Config) -> Option<CnnArch> {
        (self.kind == NetworkKind::A && self.image.is_some()).then(|| CnnArch::from_config(cfg))
    }

    /// One line describing the network, e.g. for checkpoint metadata.
    pub fn summary(&self) -> String {
        self.summary.clone()
    }

    fn describe(&self, cfg: &Config) -> String {
        let nn = &cfg.nn;
        let cnn = |c: &CnnArch| {
            let stem = match c.stem {
                Stem::Vanilla => "vanilla-cnn".to_string(),
                Stem::Impala { size } => format!("impala-cnn(s={size})"),
            };
            let sn = if c.spectral_norm { "+spectral-norm" } else { "" };
            let pool =
                c.adaptive_maxpool.map(|s| format!("+adaptive-maxpool({s})")).unwrap_or_default();
            format!("{stem}{sn}{pool}")
        };
        let heads = format!(
            "policy {}x{}; value 1; {} parameters",
            self.n_heads,
            self.n_actions,
            self.n_parameters()
        );
        match self.kind {
            NetworkKind::A => {
                let img = match &self.image {
                    None => "no image".to_string(),
                    Some(f) => {
                        let c = CnnArch::from_config(cfg);
                        format!("image {}x{} {} -> {}", f.height, f.width, cnn(&c), c.output_dim())
                    }
                };
                let trunk_in = self.image.map_or(0, |_| CnnArch::from_config(cfg).output_dim())
                    + nn.float_hidden_dim as usize;
                format!(
                    "PpoActorCritic(variant A): {img}; floats {} -> mlp {}; trunk {} -> {}; {heads}",
                    self.float_dim, nn.float_hidden_dim, trunk_in, nn.dense_hidden_dim
                )
            }
            NetworkKind::B => {
                let t = nn.vis.transformer.clone().unwrap_or_default();
                let vit = match &t.backbone {
                    Some(HfModel::Vit(v)) => format!(
                        "ViT {}x{}/{} d{} x{} h{}",
                        v.pixel_size[0],
                        v.pixel_size[1],
                        v.patch_size,
                        v.hidden_size,
                        v.num_hidden_layers,
                        v.num_attention_heads
                    ),
                    _ => "ViT".to_string(),
                };
                format!(
                    "HfActorCritic(variant B): image {}x{} -> {vit} CLS -> {}{}; floats {} -> mlp {} -> {}; trunk {} -> {}; {heads}",
                    nn.image_height, nn.image_width, t.d_model,
                    if t.n_layers > 0 { format!(" + refine x{}", t.n_layers) } else { String::new() },
                    self.float_dim, nn.float_hidden_dim, t.d_model, 2 * t.d_model, nn.dense_hidden_dim
                )
            }
            NetworkKind::C => {
                let vis = match cfg.vis_branch() {
                    VisBranch::None => "no image".to_string(),
                    VisBranch::Cnn => format!("cnn {}", cnn(&CnnArch::from_config(cfg))),
                    VisBranch::NativeTransformer => {
                        let t = nn.vis.transformer.clone().unwrap_or_default();
                        format!(
                            "patches {} d{} x{} h{}",
                            t.patch_size, t.d_model, t.n_layers, t.n_heads
                        )
                    }
                    VisBranch::HfTransformer => "hf-vit".to_string(),
                };
                let e = &nn.encoder.transformer;
                let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
                let fe = cfg.fusion_encoder();
                let fusion = match fe {
                    FusionEncoder::Linear => "linear".to_string(),
                    FusionEncoder::NativeTransformer => {
                        format!("transformer d{} x{} h{}", e.d_model, e.n_layers, e.n_heads)
                    }
                    FusionEncoder::HfEmbedding => format!("hf-bert -> d{}", e.d_model),
                    FusionEncoder::Mlp | FusionEncoder::Cnn => {
                        format!("{} d{}", name(serde_json::json!(fe)), e.d_model)
                    }
                };
                format!(
                    "TorchMultimodalActorCritic(variant C, {}): image {}x{} {vis}; floats {}; fusion {fusion}; trunk {}; {heads}",
                    name(serde_json::json!(nn.fusion_mode)),
                    nn.image_height,
                    nn.image_width,
                    self.float_dim,
                    nn.dense_hidden_dim
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(yaml: &str) -> Config {
        Config::from_yaml_str(yaml, "t").expect("valid")
    }

    #[test]
    fn vanilla_64_gives_the_originals_512_features() {
        // rulka-python.md §4: a 64×64 input gives 32×4×4 = 512.
        let c = cfg("environment: {n_prev_actions_in_inputs: 25}");
        let a = Architecture::from_config(&c);
        assert_eq!(a.variant_a_cnn(&c).map(|i| i.output_shape()), Some((32, 4, 4)));
        assert_eq!(
            a.net.tensor("trunk.0.weight").map(|t| t.shape.clone()),
            Some(vec![1024, 512 + 256])
        );
        assert_eq!(a.float_dim, 264);
    }

    #[test]
    fn impala_halves_three_times_with_ceil() {
        let c = cfg("nn: {cnn: {use_impala_cnn: true, impala_model_size: 2}}");
        let a = Architecture::from_config(&c).variant_a_cnn(&c);
        // 64 → 32 → 16 → 8, channels 32·2
        assert_eq!(a.as_ref().map(CnnArch::output_shape), Some((64, 8, 8)));
        let o = cfg("nn: {image_width: 37, image_height: 37, cnn: {use_impala_cnn: true}}");
        let odd = Architecture::from_config(&o).variant_a_cnn(&o);
        // 37 → 19 → 10 → 5
        assert_eq!(odd.as_ref().map(CnnArch::output_shape), Some((64, 5, 5)));
        // The forward pass's CNN output agrees with the closed form.
        let net = Net::from_config(&o);
        assert_eq!(net.tensor("trunk.0.weight").map(|t| t.shape[1]), Some(64 * 25 + 256));
        let convs = a.as_ref().map(CnnArch::convs).unwrap_or_default();
        assert_eq!(convs.len(), 15);
        assert_eq!(convs[1].name, "img_head.0.residual_0.conv_0");
    }

    #[test]
    fn state_dict_names_match_the_original() {
        let a = Architecture::from_config(&cfg("nn: {cnn: {use_spectral_norm: true}}"));
        let names: Vec<String> = a.tensors().into_iter().map(|t| t.name).collect();
        for key in [
            "float_inputs_mean",
            "img_head.0.weight_orig",
            "img_head.6.weight_v",
            "float_feature_extractor.0.weight",
            "trunk.2.bias",
            "policy_head.weight",
            "value_head.bias",
        ] {
            assert!(names.iter().any(|n| n == key), "missing {key} in {names:?}");
        }
    }

    #[test]
    fn parameter_count_of_the_default_network_by_hand() {
        let a = Architecture::from_config(&cfg("environment: {n_prev_actions_in_inputs: 25}"));
        let convs = (16 * 16 + 16) + (32 * 16 * 16 + 32) + (64 * 32 * 9 + 64) + (32 * 64 * 9 + 32);
        let float = (264 * 256 + 256) + (256 * 256 + 256);
        let trunk = (768 * 1024 + 1024) + (1024 * 1024 + 1024);
        let heads = (1024 * 12 + 12) + (1024 + 1);
        assert_eq!(a.n_parameters(), convs + float + trunk + heads);
    }
}
