//! Which network a config selects: the decisions the original makes from the
//! config alone (`ppo_wiring.make_network`, `infer_vis_branch`,
//! `infer_fusion_encoder`). Validation checks against them here; the network
//! itself (tensors, forward pass) is built from them in `rulka-network`.

use crate::transformers::{
    FloatTokenLayout, FusionEncoder, FusionTokens, HfModel, PostConcatLayout,
};
use crate::{Config, FusionMode};

/// Which of the original's three networks a config builds
/// (`ppo_wiring.make_network`: first match wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkKind {
    /// `PpoActorCritic`: CNN + float MLP.
    A,
    /// `HfActorCritic`: Hugging Face ViT CLS token + float MLP.
    B,
    /// `TorchMultimodalActorCritic` (`nn.fusion_mode`).
    C,
}

/// Vision branch of Variant C (`infer_vis_branch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisBranch {
    /// No image.
    None,
    /// `nn.cnn`.
    Cnn,
    /// Patch embedding + native encoder.
    NativeTransformer,
    /// A Hugging Face ViT.
    HfTransformer,
}

impl Config {
    /// The network a config builds.
    pub fn network_kind(&self) -> NetworkKind {
        if self.nn.fusion_mode != FusionMode::None {
            NetworkKind::C
        } else if self.nn.vis.transformer.as_ref().is_some_and(|t| t.use_hf_backbone) {
            NetworkKind::B
        } else {
            NetworkKind::A
        }
    }

    /// The vision branch a config's Variant C uses.
    pub fn vis_branch(&self) -> VisBranch {
        match (&self.nn.vis.transformer, self.nn.no_image) {
            (_, true) => VisBranch::None,
            (None, false) => VisBranch::Cnn,
            (Some(t), false) if t.use_hf_backbone => VisBranch::HfTransformer,
            (Some(_), false) => VisBranch::NativeTransformer,
        }
    }

    /// The fusion trunk a config's Variant C uses (`infer_fusion_encoder`).
    pub fn fusion_encoder(&self) -> FusionEncoder {
        let e = &self.nn.encoder;
        match e.fusion_encoder {
            Some(f) => f,
            None if e.transformer.use_hf_backbone => FusionEncoder::HfEmbedding,
            None if self.nn.fusion_mode == FusionMode::VisionTransformer => FusionEncoder::Linear,
            None => FusionEncoder::NativeTransformer,
        }
    }

    /// Tokens the fusion trunk of a Variant C config sees (the encoder's sequence length).
    pub fn fusion_sequence_len(&self) -> usize {
        let nn = &self.nn;
        let e = &nn.encoder;
        let vt = nn.vis.transformer.clone().unwrap_or_default();
        let patches = || {
            let ps = vt.patch_size.max(1) as usize;
            (nn.image_height as usize / ps) * (nn.image_width as usize / ps)
        };
        let hf_tokens = || match &vt.backbone {
            Some(HfModel::Vit(s)) => s.n_patches() + 1,
            _ => 1,
        };
        let all_tokens = || match self.vis_branch() {
            VisBranch::None => 0,
            VisBranch::Cnn => 1,
            VisBranch::NativeTransformer => patches(),
            VisBranch::HfTransformer => hf_tokens(),
        };
        let k = e.transformer.unified_float_tokens as usize;
        match nn.fusion_mode {
            FusionMode::None => 0,
            FusionMode::VisionTransformer => e.transformer.post_concat_seq_len as usize,
            FusionMode::PostConcat if e.post_concat_layout == PostConcatLayout::FusedVector => {
                e.transformer.post_concat_seq_len as usize
            }
            FusionMode::PostConcat => {
                let n_vis = match (self.vis_branch(), vt.fusion_tokens) {
                    (VisBranch::None, _) => 0,
                    (_, FusionTokens::Summary) | (VisBranch::Cnn, _) => 1,
                    (_, FusionTokens::PatchTokens) => all_tokens(),
                };
                let n_float = match e.float_token_layout {
                    FloatTokenLayout::PerFeature => self.float_input_dim(),
                    FloatTokenLayout::Dense => k,
                };
                n_vis + n_float
            }
            FusionMode::Unified => all_tokens() + k,
        }
    }
}
