//! The actor-critic's architecture (Variant A of the original) as plain data:
//! layer shapes and the PyTorch state-dict names of every tensor. The tch
//! learner and the ONNX exporter are both built from this, so they cannot
//! disagree about names or shapes.

use crate::{Config, N_ACTIONS};

/// Slope of the vanilla stem's LeakyReLU (PyTorch's default).
pub const LEAKY_RELU_SLOPE: f64 = 0.01;

/// Pixel normalisation `(x − PIXEL_OFFSET) / PIXEL_SCALE`.
pub const PIXEL_OFFSET: f64 = 128.0;
/// See [`PIXEL_OFFSET`].
pub const PIXEL_SCALE: f64 = 128.0;

/// The network's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Architecture {
    /// Image head; `None` for a float-only policy (`nn.no_image`).
    pub image: Option<ImageArch>,
    /// Float input length F.
    pub float_dim: usize,
    /// Width of the float MLP.
    pub float_hidden: usize,
    /// Width of the trunk.
    pub dense_hidden: usize,
    /// Actions per head (12).
    pub n_actions: usize,
    /// Action heads N (multi-offset block length).
    pub n_heads: usize,
}

/// The image head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageArch {
    /// Frame height.
    pub height: usize,
    /// Frame width.
    pub width: usize,
    /// Convolutional stem.
    pub stem: Stem,
    /// Every conv is spectrally normalised (`weight_orig`, `weight_u`, `weight_v`).
    pub spectral_norm: bool,
    /// `AdaptiveMaxPool2d((s, s))` before flattening.
    pub adaptive_maxpool: Option<usize>,
}

/// Convolutional stem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stem {
    /// Conv(1→16,k4,s2), Conv(16→32,k4,s2), Conv(32→64,k3,s2), Conv(64→32,k3,s1), each + LeakyReLU.
    Vanilla,
    /// Three IMPALA blocks (16s, 32s, 32s channels) then ReLU.
    Impala {
        /// Channel multiplier s.
        size: usize,
    },
}

/// One convolution, in forward order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvSpec {
    /// State-dict prefix, e.g. `img_head.0` or `img_head.1.residual_0.conv_1`.
    pub name: String,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Square kernel size.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
    /// Zero padding on each side.
    pub padding: usize,
}

/// Whether a tensor is trained or a fixed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    /// Trainable parameter.
    Parameter,
    /// Buffer (normalisation statistics, spectral-norm power-iteration vectors).
    Buffer,
}

/// One tensor of the state dict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// PyTorch state-dict key.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Parameter or buffer.
    pub role: TensorRole,
}

/// Names of the four linear layers that follow the image head, with `(in, out)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearSpec {
    /// State-dict prefix, e.g. `trunk.0`.
    pub name: &'static str,
    /// Input features.
    pub d_in: usize,
    /// Output features.
    pub d_out: usize,
}

impl Architecture {
    /// The architecture a config describes.
    pub fn from_config(cfg: &Config) -> Self {
        let nn = &cfg.nn;
        let image = (!nn.no_image).then(|| ImageArch {
            height: nn.image_height as usize,
            width: nn.image_width as usize,
            stem: if nn.cnn.use_impala_cnn {
                Stem::Impala { size: nn.cnn.impala_model_size as usize }
            } else {
                Stem::Vanilla
            },
            spectral_norm: nn.cnn.use_spectral_norm,
            adaptive_maxpool: nn
                .cnn
                .use_adaptive_maxpool
                .then_some(nn.cnn.adaptive_maxpool_size as usize),
        });
        Self {
            image,
            float_dim: cfg.float_input_dim(),
            float_hidden: nn.float_hidden_dim as usize,
            dense_hidden: nn.dense_hidden_dim as usize,
            n_actions: N_ACTIONS,
            n_heads: cfg.n_action_heads(),
        }
    }

    /// Input width of the trunk: image features (if any) + float MLP width.
    pub fn trunk_in(&self) -> usize {
        self.image.as_ref().map_or(0, ImageArch::output_dim) + self.float_hidden
    }

    /// Policy logits per sample: `n_actions · n_heads`.
    pub fn n_logits(&self) -> usize {
        self.n_actions * self.n_heads
    }

    /// The linear layers after the image head, in forward order.
    pub fn linears(&self) -> [LinearSpec; 6] {
        [
            LinearSpec {
                name: "float_feature_extractor.0",
                d_in: self.float_dim,
                d_out: self.float_hidden,
            },
            LinearSpec {
                name: "float_feature_extractor.2",
                d_in: self.float_hidden,
                d_out: self.float_hidden,
            },
            LinearSpec { name: "trunk.0", d_in: self.trunk_in(), d_out: self.dense_hidden },
            LinearSpec { name: "trunk.2", d_in: self.dense_hidden, d_out: self.dense_hidden },
            LinearSpec { name: "policy_head", d_in: self.dense_hidden, d_out: self.n_logits() },
            LinearSpec { name: "value_head", d_in: self.dense_hidden, d_out: 1 },
        ]
    }

    /// Every tensor of the state dict, with the original's names.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let p = |name: String, shape: Vec<usize>| TensorSpec {
            name,
            shape,
            role: TensorRole::Parameter,
        };
        let b =
            |name: String, shape: Vec<usize>| TensorSpec { name, shape, role: TensorRole::Buffer };
        let mut out = vec![
            b("float_inputs_mean".into(), vec![self.float_dim]),
            b("float_inputs_std".into(), vec![self.float_dim]),
        ];
        if let Some(img) = &self.image {
            for c in img.convs() {
                let w = vec![c.c_out, c.c_in, c.kernel, c.kernel];
                if img.spectral_norm {
                    out.push(p(format!("{}.weight_orig", c.name), w));
                    out.push(p(format!("{}.bias", c.name), vec![c.c_out]));
                    out.push(b(format!("{}.weight_u", c.name), vec![c.c_out]));
                    out.push(b(format!("{}.weight_v", c.name), vec![c.c_in * c.kernel * c.kernel]));
                } else {
                    out.push(p(format!("{}.weight", c.name), w));
                    out.push(p(format!("{}.bias", c.name), vec![c.c_out]));
                }
            }
        }
        for l in self.linears() {
            out.push(p(format!("{}.weight", l.name), vec![l.d_out, l.d_in]));
            out.push(p(format!("{}.bias", l.name), vec![l.d_out]));
        }
        out
    }

    /// Total number of trainable scalars.
    pub fn n_parameters(&self) -> usize {
        self.tensors()
            .iter()
            .filter(|t| t.role == TensorRole::Parameter)
            .map(|t| t.shape.iter().product::<usize>())
            .sum()
    }

    /// One line describing the network, e.g. for checkpoint metadata.
    pub fn summary(&self) -> String {
        let img = match &self.image {
            None => "no image".to_string(),
            Some(i) => {
                let stem = match i.stem {
                    Stem::Vanilla => "vanilla-cnn".to_string(),
                    Stem::Impala { size } => format!("impala-cnn(s={size})"),
                };
                let sn = if i.spectral_norm { "+spectral-norm" } else { "" };
                let pool = i
                    .adaptive_maxpool
                    .map(|s| format!("+adaptive-maxpool({s})"))
                    .unwrap_or_default();
                format!("image {}x{} {stem}{sn}{pool} -> {}", i.height, i.width, i.output_dim())
            }
        };
        format!(
            "PpoActorCritic(variant A): {img}; floats {} -> mlp {}; trunk {} -> {}; policy {}x{}; value 1; {} parameters",
            self.float_dim,
            self.float_hidden,
            self.trunk_in(),
            self.dense_hidden,
            self.n_heads,
            self.n_actions,
            self.n_parameters()
        )
    }
}

impl ImageArch {
    /// Every convolution in forward order.
    pub fn convs(&self) -> Vec<ConvSpec> {
        let conv = |name: String, c_in, c_out, kernel, stride, padding| ConvSpec {
            name,
            c_in,
            c_out,
            kernel,
            stride,
            padding,
        };
        match self.stem {
            Stem::Vanilla => vec![
                conv("img_head.0".into(), 1, 16, 4, 2, 0),
                conv("img_head.2".into(), 16, 32, 4, 2, 0),
                conv("img_head.4".into(), 32, 64, 3, 2, 0),
                conv("img_head.6".into(), 64, 32, 3, 1, 0),
            ],
            Stem::Impala { size } => {
                let chans = [(1, 16 * size), (16 * size, 32 * size), (32 * size, 32 * size)];
                let mut out = Vec::new();
                for (i, (c_in, c_out)) in chans.into_iter().enumerate() {
                    out.push(conv(format!("img_head.{i}.conv"), c_in, c_out, 3, 1, 1));
                    for r in 0..2 {
                        for k in 0..2 {
                            out.push(conv(
                                format!("img_head.{i}.residual_{r}.conv_{k}"),
                                c_out,
                                c_out,
                                3,
                                1,
                                1,
                            ));
                        }
                    }
                }
                out
            }
        }
    }

    /// `(channels, height, width)` after the stem (and adaptive pool, if any).
    pub fn output_shape(&self) -> (usize, usize, usize) {
        let (c, h, w) = match self.stem {
            Stem::Vanilla => {
                let side = |n: usize| {
                    let a = (n.saturating_sub(4)) / 2 + 1;
                    let b = (a.saturating_sub(4)) / 2 + 1;
                    let c = (b.saturating_sub(3)) / 2 + 1;
                    c.saturating_sub(2)
                };
                (32, side(self.height), side(self.width))
            }
            Stem::Impala { size } => {
                let pool = |n: usize| n.div_ceil(2);
                let side = |n: usize| pool(pool(pool(n)));
                (32 * size, side(self.height), side(self.width))
            }
        };
        match self.adaptive_maxpool {
            Some(s) => (c, s, s),
            None => (c, h, w),
        }
    }

    /// Flattened feature length after the image head.
    pub fn output_dim(&self) -> usize {
        let (c, h, w) = self.output_shape();
        c * h * w
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
        let a = Architecture::from_config(&cfg("environment: {n_prev_actions_in_inputs: 25}"));
        assert_eq!(a.image.as_ref().map(ImageArch::output_shape), Some((32, 4, 4)));
        assert_eq!(a.trunk_in(), 512 + 256);
        assert_eq!(a.float_dim, 264);
    }

    #[test]
    fn impala_halves_three_times_with_ceil() {
        let a = Architecture::from_config(&cfg(
            "nn: {cnn: {use_impala_cnn: true, impala_model_size: 2}}",
        ));
        // 64 → 32 → 16 → 8, channels 32·2
        assert_eq!(a.image.as_ref().map(ImageArch::output_shape), Some((64, 8, 8)));
        let odd = Architecture::from_config(&cfg(
            "nn: {image_width: 37, image_height: 37, cnn: {use_impala_cnn: true}}",
        ));
        // 37 → 19 → 10 → 5
        assert_eq!(odd.image.as_ref().map(ImageArch::output_shape), Some((64, 5, 5)));
        let convs = a.image.as_ref().map(ImageArch::convs).unwrap_or_default();
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
