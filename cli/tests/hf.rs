//! The Variant B path as a user runs it: `rulka hf-vit` writes a ViT folder
//! (`transformers` format), `rulka init` starts a network from it, and
//! `rulka export --check` proves the ONNX model equal to it; bad input is one
//! line and exit 2.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::process::{Command, Output};

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_fresh_vit_folder_initialises_and_exports_a_variant_b_network() {
    let dir = tempfile::tempdir().unwrap();
    let vit = dir.path().join("vit");
    let v = vit.to_str().unwrap();
    let o = rulka(&[
        "hf-vit", "--out", v, "--hidden", "32", "--layers", "1", "--heads", "4", "--image", "32",
        "--patch", "8",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(vit.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        (cfg["model_type"].as_str(), cfg["hidden_size"].as_u64(), cfg["patch_size"].as_u64()),
        (Some("vit"), Some(32), Some(8))
    );
    // The weights file is what `save_pretrained` writes: metadata format "pt", ViT key names.
    let bytes = std::fs::read(vit.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert_eq!(header["__metadata__"]["format"], "pt");
    assert_eq!(header["embeddings.position_embeddings"]["shape"], serde_json::json!([1, 17, 32]));
    assert!(header["encoder.layer.0.attention.attention.query.weight"].is_object());

    let config = dir.path().join("b.yaml");
    std::fs::write(&config, format!("nn: {{image_width: 40, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32, vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {v}, d_model: 32, n_layers: 1, n_heads: 2}}}}}}\n")).unwrap();
    let c = config.to_str().unwrap();
    let w = dir.path().join("w.safetensors");
    let o = rulka(&["init", "--config", c, "-o", w.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("HfActorCritic(variant B)"), "{}", text(&o));
    // The network starts from the folder's weights.
    let net = rulka_checkpoint::Weights::read(&w).unwrap();
    let folder = rulka_checkpoint::Weights::read(&vit.join("model.safetensors")).unwrap();
    assert_eq!(
        net.get("backbone.encoder.layer.0.output.dense.weight"),
        folder.get("encoder.layer.0.output.dense.weight")
    );
    let m = dir.path().join("m.onnx");
    let o = rulka(&[
        "export",
        "--config",
        c,
        "--checkpoint",
        w.to_str().unwrap(),
        "-o",
        m.to_str().unwrap(),
        "--check",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("max |Δlogits|") && m.exists(), "{}", text(&o));

    // Bad input: named, exit 2, nothing written.
    for (args, expect) in [
        (vec!["hf-vit", "--out", v], "exists and is not an empty folder"),
        (
            vec![
                "hf-vit",
                "--out",
                dir.path().join("x").to_str().unwrap(),
                "--hidden",
                "30",
                "--heads",
                "4",
            ],
            "--hidden 30 is not divisible by --heads 4",
        ),
        (
            vec![
                "hf-vit",
                "--out",
                dir.path().join("y").to_str().unwrap(),
                "--image",
                "30",
                "--patch",
                "8",
            ],
            "--patch 8 does not divide --image 30",
        ),
    ] {
        let o = rulka(&args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(expect), "{}", text(&o));
    }
    assert!(!dir.path().join("x").exists() && !dir.path().join("y").exists());
    // A config naming a folder that is not there: exit 2, the key and the path named.
    std::fs::write(
        &config,
        "nn: {vis: {transformer: {use_hf_backbone: true, model_name_or_path: /no/vit}}}\n",
    )
    .unwrap();
    let o =
        rulka(&["init", "--config", c, "-o", dir.path().join("z.safetensors").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("nn.vis.transformer.model_name_or_path: /no/vit: no such folder"),
        "{}",
        text(&o)
    );
}
