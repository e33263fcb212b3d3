//! The networks the shipped presets describe, built from the presets
//! themselves (`configs/*.yaml`).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;

use rulka_config::{Config, NetworkKind};
use rulka_network::Architecture;

fn preset_text(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs").join(name))
        .unwrap()
}

/// `configs/ppo-transformer.yaml` with folders holding the shapes of a
/// ViT-Ti/16 and of google/bert_uncased_L-2_H-128_A-2: Variant C,
/// post-concat, the ViT frozen (`nn.vis.freeze`), the BERT trained.
#[test]
fn the_hugging_face_preset_builds_variant_c_with_the_vit_frozen() {
    let dir = tempfile::tempdir().unwrap();
    let text = rulka_test_support::transformer_preset(dir.path());
    let hf = Config::from_yaml_str(&text, "ppo-transformer.yaml").unwrap();
    let arch = rulka_network::Architecture::from_config(&hf);
    assert!(
        arch.summary().starts_with("TorchMultimodalActorCritic(variant C, post_concat)"),
        "{}",
        arch.summary()
    );
    // The ViT is frozen (nn.vis.freeze), the BERT is not.
    let trained = |name: &str| arch.net.tensor(name).map(|t| arch.net.is_trained(t));
    assert_eq!(
        trained("_hf_vis_backbone.encoder.layer.0.attention.attention.query.weight"),
        Some(false)
    );
    assert_eq!(trained("_hf_fusion_bb.encoder.layer.0.attention.self.query.weight"), Some(true));
    // ViT-Ti/16's hidden width, by hand: 192; BERT's: 128.
    let hidden = |name: &str| arch.net.tensor(name).map(|t| t.shape.clone());
    assert_eq!(
        hidden("_hf_vis_backbone.encoder.layer.0.attention.attention.query.weight"),
        Some(vec![192, 192])
    );
    assert_eq!(
        hidden("_hf_fusion_bb.encoder.layer.0.attention.self.query.weight"),
        Some(vec![128, 128])
    );
}

/// The default RL preset is Variant A: the original's 64×64 vanilla CNN
/// (32×4×4 = 512 features) beside the 264 floats.
#[test]
fn the_ppo_preset_is_variant_a_with_the_originals_shapes() {
    let cfg = Config::from_yaml_str(&preset_text("ppo.yaml"), "ppo.yaml").unwrap();
    let arch = Architecture::from_config(&cfg);
    assert_eq!(arch.kind, NetworkKind::A);
    assert_eq!(arch.float_dim, 264);
    assert_eq!(arch.variant_a_cnn(&cfg).map(|c| c.output_dim()), Some(512));
    assert_eq!(arch.net.tensor("trunk.0.weight").map(|t| t.shape.clone()), Some(vec![1024, 768]));
}
