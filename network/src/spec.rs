//! The pieces a network is described by: the state dict's tensors and the
//! CNN image head.

use rulka_config::Config;

/// The CNN image head of Variant A (and Variant C's `cnn` branch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnnArch {
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
    /// Buffer (normalisation statistics, spectral-norm power-iteration
    /// vectors, state-dict entries the forward pass never reads).
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

impl CnnArch {
    /// The CNN a config describes (`nn.cnn`), for a frame of its size.
    pub fn from_config(cfg: &Config) -> Self {
        let nn = &cfg.nn;
        CnnArch {
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
        }
    }

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
