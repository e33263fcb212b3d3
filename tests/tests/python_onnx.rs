//! Exported models pass `onnx.checker` (full check, strict shape inference)
//! and give the tch network's outputs in Python `onnxruntime`.
//! Needs the test venv that `scripts/test` creates (`scripts/setup.sh --python`).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;
use std::process::Command;

use rulka_config::Config;
use rulka_learner::ActorCritic;
use rulka_test_support::venv_python;
use tch::{Device, Kind, Tensor};

fn write_f32(path: &Path, t: &Tensor) {
    let v: Vec<f32> = Vec::try_from(t.contiguous().view(-1)).unwrap();
    std::fs::write(path, v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

fn cross_check(cfg: &Config, batch: i64) {
    let Some(python) = venv_python("the Python cross-check") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut net = ActorCritic::new(cfg, Device::Cpu, 4);
    // Eval semantics, as exported: no spectral-norm power iteration in forward.
    net.set_training(false);
    let onnx = rulka_export::export_onnx(cfg, &net.to_weights()).unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, onnx).unwrap();
    let (h, w) = net.arch().image.as_ref().map_or((1, 1), |i| (i.height as i64, i.width as i64));
    let f = cfg.float_input_dim() as i64;
    let img =
        Tensor::randint(256, [batch, 1, h, w], (Kind::Int64, Device::Cpu)).to_kind(Kind::Uint8);
    let floats = Tensor::randn([batch, f], (Kind::Float, Device::Cpu)) * 3.0;
    let (logits, value) = tch::no_grad(|| net.forward(&img, &floats));
    let bytes: Vec<u8> = Vec::try_from(img.contiguous().view(-1)).unwrap();
    std::fs::write(dir.path().join("image"), bytes).unwrap();
    write_f32(&dir.path().join("floats"), &floats);
    write_f32(&dir.path().join("logits"), &logits);
    write_f32(&dir.path().join("value"), &value);
    let d = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let case = serde_json::json!({
        "batch": batch, "image_shape": [batch, 1, h, w], "floats_shape": [batch, f],
        "image": d("image"), "floats": d("floats"), "logits": d("logits"), "value": d("value"),
    });
    std::fs::write(dir.path().join("case.json"), case.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/check_onnx.py");
    let out = Command::new(python)
        .arg(script)
        .arg(&model)
        .arg(dir.path().join("case.json"))
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "python cross-check failed:\n{text}");
    assert!(text.contains("onnx.checker ok"), "{text}");
    // The script's own limit, 1e-4, as margins.
    for what in ["max|dlogits|", "max|dvalue|"] {
        let d: f64 = text
            .split(what)
            .nth(1)
            .and_then(|t| t.split_whitespace().next()?.parse().ok())
            .unwrap();
        rulka_test_support::margin::at_most(&format!("python onnxruntime vs tch {what}"), d, 1e-4);
    }
}

#[test]
fn default_network_passes_checker_and_python_onnxruntime() {
    let cfg =
        Config::from_file(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/grpo.yaml")).unwrap();
    cross_check(&cfg, 5);
}

#[test]
fn impala_spectral_adaptive_multihead_passes_checker() {
    let cfg = Config::from_yaml_str(
        "nn: {image_width: 40, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32, cnn: {use_impala_cnn: true, impala_model_size: 1, use_spectral_norm: true, use_adaptive_maxpool: true, adaptive_maxpool_size: 3}}\nenvironment: {rl_action_offsets_ms: [0, 10, 20]}",
        "t",
    )
    .unwrap();
    cross_check(&cfg, 3);
}

#[test]
fn float_only_network_passes_checker() {
    let cfg = Config::from_yaml_str(
        "nn: {no_image: true, float_hidden_dim: 16, dense_hidden_dim: 32}",
        "t",
    )
    .unwrap();
    cross_check(&cfg, 2);
}

/// Variants B and C: every operator pattern of the transformer networks
/// (LayerNormalization, Erf-GELU, attention, Resize, Expand, Gather,
/// ConstantOfShape, Conv1d) passes the full checker and strict shape inference.
#[test]
fn transformer_networks_pass_checker() {
    let dir = tempfile::tempdir().unwrap();
    let (vit, bert) = rulka_test_support::hf_model_folders(
        dir.path(),
        r#"{"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 48, "image_size": 32, "patch_size": 8}"#,
        r#"{"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 48, "max_position_embeddings": 64, "vocab_size": 20, "type_vocab_size": 2}"#,
    );
    let base = "image_width: 40, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32";
    for nn in [
        format!("{{{base}, vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 48, n_layers: 1, n_heads: 2}}}}}}", vit.display()),
        format!("{{{base}, fusion_mode: post_concat, vis: {{transformer: {{d_model: 32, n_layers: 1, patch_size: 4, fusion_tokens: patch_tokens}}}}, encoder: {{post_concat_layout: token_sequence, fusion_encoder: cnn, fusion_cnn: {{hidden_channels: [8]}}, transformer: {{d_model: 32}}}}}}"),
        format!("{{{base}, fusion_mode: unified, vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32}}}}, encoder: {{fusion_encoder: hf_embedding, hf_embedding: {{model_name_or_path: {}}}, transformer: {{d_model: 32}}}}}}", vit.display(), bert.display()),
        format!("{{{base}, no_image: true, fusion_mode: vision_transformer, encoder: {{fusion_encoder: mlp, transformer: {{d_model: 32}}}}}}"),
    ] {
        let cfg = Config::from_yaml_str(&format!("nn: {nn}\nenvironment: {{n_zone_centers_in_inputs: 4, n_prev_actions_in_inputs: 3}}"), "t").unwrap();
        cross_check(&cfg, 3);
    }
}

/// int8 and int4 exports of the default network: codes and scales as an
/// independent NumPy re-quantization gives them, and Python onnxruntime reads
/// them in the layout written (see tests/python/check_quantized.py).
#[test]
fn quantized_exports_match_numpy_requantization() {
    let Some(python) = venv_python("the Python cross-check") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::from_yaml_str("{}", "default").unwrap();
    let mut net = ActorCritic::new(&cfg, Device::Cpu, 6);
    net.set_training(false);
    let w = net.to_weights();
    let fp32 = dir.path().join("fp32.onnx");
    std::fs::write(&fp32, rulka_export::export_onnx(&cfg, &w).unwrap()).unwrap();
    for (fmt, format) in
        [("int8", rulka_config::WeightFormat::Int8), ("int4", rulka_config::WeightFormat::Int4)]
    {
        cfg.inference.weights = format;
        let q = dir.path().join(format!("{fmt}.onnx"));
        std::fs::write(&q, rulka_export::export_onnx(&cfg, &w).unwrap()).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/check_quantized.py");
        let out = Command::new(&python)
            .arg(script)
            .arg(&fp32)
            .arg(&q)
            .arg(fmt)
            .arg("32")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("{text}");
        assert!(out.status.success(), "{fmt}: python cross-check failed:\n{text}");
        assert!(
            text.contains("trunk.2: codes and scales") && text.contains("quantized layout ok"),
            "{text}"
        );
    }
}
