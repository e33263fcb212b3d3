//! Variants B and C (the original's transformer networks) against two
//! references: the ONNX export on ONNX Runtime (parity ≤ 1e-4 at batch 1 and
//! 17 on random, all-0, all-255 and ±10σ inputs) and an independent NumPy
//! port of the original's forward passes (`tests/python/reference_nets.py`:
//! Hugging Face ViT/BERT semantics, PyTorch's `TransformerEncoderLayer`).
//!
//! The Hugging Face folders are written here, tensor by tensor, from the
//! ViT and BERT checkpoint formats (random weights; no download), so a
//! network that expects other names or shapes fails to load them.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rulka_checkpoint::Meta;
use rulka_config::Config;
use rulka_learner::ActorCritic;
use rulka_test_support::venv_python;
use tch::{Device, Kind, Tensor};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn fill(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

/// A plain safetensors file (no metadata), as `save_pretrained` writes.
fn write_safetensors(path: &Path, tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, (shape, values)) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|x| x.to_le_bytes()));
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::write(path, out).unwrap();
}

/// A ViT folder: hidden 32, 2 layers, 4 heads, 32×32 pixels in 8×8 patches.
/// `prefix` "vit." mimics a checkpoint saved from an image-classification model.
fn vit_folder(dir: &Path, prefix: &str, pooler: bool, seed: u64) -> PathBuf {
    let (h, layers, inter, p, n) = (32usize, 2, 64, 8, 16);
    let folder = dir.join(format!("vit{seed}"));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("config.json"),
        serde_json::json!({
            "model_type": "vit", "hidden_size": h, "num_hidden_layers": layers,
            "num_attention_heads": 4, "intermediate_size": inter, "hidden_act": "gelu",
            "layer_norm_eps": 1e-12, "image_size": 32, "patch_size": p, "num_channels": 3,
            "qkv_bias": true, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        folder.join("preprocessor_config.json"),
        serde_json::json!({"size": {"height": 32, "width": 32}, "image_mean": [0.48, 0.46, 0.41], "image_std": [0.27, 0.26, 0.28]}).to_string(),
    )
    .unwrap();
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut t = BTreeMap::new();
    let mut put = |name: &str, shape: Vec<usize>, scale: f32, offset: f32, r: &mut Rng| {
        let n = shape.iter().product();
        t.insert(format!("{prefix}{name}"), (shape, r.fill(n, scale, offset)));
    };
    put("embeddings.cls_token", vec![1, 1, h], 0.5, 0.0, &mut r);
    put("embeddings.position_embeddings", vec![1, n + 1, h], 0.5, 0.0, &mut r);
    put("embeddings.patch_embeddings.projection.weight", vec![h, 3, p, p], 0.1, 0.0, &mut r);
    put("embeddings.patch_embeddings.projection.bias", vec![h], 0.1, 0.0, &mut r);
    for i in 0..layers {
        let l = format!("encoder.layer.{i}");
        for m in ["query", "key", "value"] {
            put(&format!("{l}.attention.attention.{m}.weight"), vec![h, h], 0.3, 0.0, &mut r);
            put(&format!("{l}.attention.attention.{m}.bias"), vec![h], 0.1, 0.0, &mut r);
        }
        put(&format!("{l}.attention.output.dense.weight"), vec![h, h], 0.3, 0.0, &mut r);
        put(&format!("{l}.attention.output.dense.bias"), vec![h], 0.1, 0.0, &mut r);
        put(&format!("{l}.intermediate.dense.weight"), vec![inter, h], 0.3, 0.0, &mut r);
        put(&format!("{l}.intermediate.dense.bias"), vec![inter], 0.1, 0.0, &mut r);
        put(&format!("{l}.output.dense.weight"), vec![h, inter], 0.2, 0.0, &mut r);
        put(&format!("{l}.output.dense.bias"), vec![h], 0.1, 0.0, &mut r);
        for ln in ["layernorm_before", "layernorm_after"] {
            put(&format!("{l}.{ln}.weight"), vec![h], 0.2, 1.0, &mut r);
            put(&format!("{l}.{ln}.bias"), vec![h], 0.1, 0.0, &mut r);
        }
    }
    put("layernorm.weight", vec![h], 0.2, 1.0, &mut r);
    put("layernorm.bias", vec![h], 0.1, 0.0, &mut r);
    if pooler {
        put("pooler.dense.weight", vec![h, h], 0.3, 0.0, &mut r);
        put("pooler.dense.bias", vec![h], 0.1, 0.0, &mut r);
    }
    write_safetensors(&folder.join("model.safetensors"), &t);
    folder
}

/// A BERT folder: hidden 32, 2 layers, 2 heads, 300 positions.
fn bert_folder(dir: &Path, seed: u64) -> PathBuf {
    let (h, layers, inter) = (32usize, 2, 48);
    let folder = dir.join(format!("bert{seed}"));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("config.json"),
        serde_json::json!({
            "model_type": "bert", "hidden_size": h, "num_hidden_layers": layers,
            "num_attention_heads": 2, "intermediate_size": inter, "hidden_act": "gelu",
            "layer_norm_eps": 1e-12, "max_position_embeddings": 300, "vocab_size": 50,
            "type_vocab_size": 2, "position_embedding_type": "absolute",
        })
        .to_string(),
    )
    .unwrap();
    let mut r = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let mut t = BTreeMap::new();
    let mut put = |name: &str, shape: Vec<usize>, scale: f32, offset: f32, r: &mut Rng| {
        let n = shape.iter().product();
        t.insert(name.to_string(), (shape, r.fill(n, scale, offset)));
    };
    put("embeddings.word_embeddings.weight", vec![50, h], 0.5, 0.0, &mut r);
    put("embeddings.position_embeddings.weight", vec![300, h], 0.5, 0.0, &mut r);
    put("embeddings.token_type_embeddings.weight", vec![2, h], 0.5, 0.0, &mut r);
    put("embeddings.LayerNorm.weight", vec![h], 0.2, 1.0, &mut r);
    put("embeddings.LayerNorm.bias", vec![h], 0.1, 0.0, &mut r);
    for i in 0..layers {
        let l = format!("encoder.layer.{i}");
        for m in ["query", "key", "value"] {
            put(&format!("{l}.attention.self.{m}.weight"), vec![h, h], 0.3, 0.0, &mut r);
            put(&format!("{l}.attention.self.{m}.bias"), vec![h], 0.1, 0.0, &mut r);
        }
        put(&format!("{l}.attention.output.dense.weight"), vec![h, h], 0.3, 0.0, &mut r);
        put(&format!("{l}.attention.output.dense.bias"), vec![h], 0.1, 0.0, &mut r);
        put(&format!("{l}.attention.output.LayerNorm.weight"), vec![h], 0.2, 1.0, &mut r);
        put(&format!("{l}.attention.output.LayerNorm.bias"), vec![h], 0.1, 0.0, &mut r);
        put(&format!("{l}.intermediate.dense.weight"), vec![inter, h], 0.3, 0.0, &mut r);
        put(&format!("{l}.intermediate.dense.bias"), vec![inter], 0.1, 0.0, &mut r);
        put(&format!("{l}.output.dense.weight"), vec![h, inter], 0.2, 0.0, &mut r);
        put(&format!("{l}.output.dense.bias"), vec![h], 0.1, 0.0, &mut r);
        put(&format!("{l}.output.LayerNorm.weight"), vec![h], 0.2, 1.0, &mut r);
        put(&format!("{l}.output.LayerNorm.bias"), vec![h], 0.1, 0.0, &mut r);
    }
    put("pooler.dense.weight", vec![h, h], 0.3, 0.0, &mut r);
    put("pooler.dense.bias", vec![h], 0.1, 0.0, &mut r);
    write_safetensors(&folder.join("model.safetensors"), &t);
    folder
}

const ENV: &str = "environment: {n_zone_centers_in_inputs: 4, n_prev_actions_in_inputs: 3}";

fn config(nn: &str) -> Config {
    Config::from_yaml_str(&format!("nn: {nn}\n{ENV}\n"), "t.yaml").unwrap()
}

/// The network with its random parts made non-trivial (zero-initialised
/// positions and slot embeddings would hide ordering mistakes).
fn network(cfg: &Config, seed: u64) -> ActorCritic {
    let mut net = ActorCritic::new_pretrained(cfg, Device::Cpu, seed).unwrap();
    let mut w = net.to_weights();
    let mut r = Rng(seed + 11);
    for (name, t) in w.tensors.iter_mut() {
        if ["pos_", "float_per_feat_slot_emb"].iter().any(|p| name.starts_with(p)) {
            for x in t.data.iter_mut() {
                *x = 0.5 * r.next();
            }
        }
    }
    net.load_weights(&w, cfg, false).unwrap();
    net.set_training(false);
    net
}

fn f32s(t: &Tensor) -> Vec<f32> {
    Vec::try_from(t.contiguous().view(-1)).unwrap()
}

/// The NumPy reference's outputs vs the tch network's, on random inputs.
fn against_numpy(cfg: &Config, net: &ActorCritic, spec: serde_json::Value) -> f32 {
    let Some(python) = venv_python("the NumPy reference") else { return 0.0 };
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    net.to_weights().write(&dir.path().join("w.safetensors"), &Meta::new(cfg, 0)).unwrap();
    let (h, w) = net.arch().image.map_or((1, 1), |i| (i.height as i64, i.width as i64));
    let (b, f) = (3i64, cfg.float_input_dim() as i64);
    tch::manual_seed(5);
    let img = Tensor::randint(256, [b, 1, h, w], (Kind::Int64, Device::Cpu)).to_kind(Kind::Uint8);
    let floats = Tensor::randn([b, f], (Kind::Float, Device::Cpu)) * 2.0;
    let (logits, value) = tch::no_grad(|| net.forward(&img, &floats));
    let bytes: Vec<u8> = Vec::try_from(img.contiguous().view(-1)).unwrap();
    std::fs::write(d("image"), bytes).unwrap();
    let fb: Vec<u8> = f32s(&floats).iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(d("floats"), fb).unwrap();
    let mut case = spec;
    let extra = serde_json::json!({
        "weights": d("w.safetensors"), "image": d("image"), "floats": d("floats"),
        "image_shape": [b, 1, h, w], "floats_shape": [b, f],
        "out_logits": d("logits"), "out_value": d("value"),
    });
    for (k, v) in extra.as_object().unwrap() {
        case[k] = v.clone();
    }
    std::fs::write(d("case.json"), case.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/reference_nets.py");
    let out = Command::new(python).arg(script).arg(d("case.json")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |n: &str| -> Vec<f32> {
        std::fs::read(d(n))
            .unwrap()
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let (rl, rv) = (read("logits"), read("value"));
    let (tl, tv) = (f32s(&logits), f32s(&value));
    assert_eq!((rl.len(), rv.len()), (tl.len(), tv.len()));
    rl.iter().zip(&tl).chain(rv.iter().zip(&tv)).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

/// Parity (ONNX Runtime) and the NumPy reference for one config.
fn check(label: &str, cfg: &Config, spec: serde_json::Value, seed: u64) {
    let mut cfg = cfg.clone();
    cfg.inference.intra_op_threads = rulka_test_support::margin::threads() as u32;
    let cfg = &cfg;
    let net = network(cfg, seed);
    let weights = net.to_weights();
    let onnx = rulka_export::export_onnx(cfg, &weights).unwrap();
    let rt = rulka_inference::load_runtime(None).unwrap();
    let r = rulka_torch::check_parity(cfg, &weights, &onnx, rt, &[1, 17], seed + 100).unwrap();
    let numpy = against_numpy(cfg, &net, spec);
    println!(
        "{label}: {} — ONNX logits {:.1e} value {:.1e}; NumPy {numpy:.1e}",
        net.arch().summary(),
        r.max_logits(),
        r.max_value()
    );
    assert!(r.passed(), "{label}: parity {:?}", r.cases);
    let tol = f64::from(rulka_torch::TOLERANCE);
    rulka_test_support::margin::at_most(
        &format!("{label}: ONNX vs tch logits"),
        r.max_logits().into(),
        tol,
    );
    rulka_test_support::margin::at_most(
        &format!("{label}: ONNX vs tch value"),
        r.max_value().into(),
        tol,
    );
    rulka_test_support::margin::at_most(
        &format!("{label}: tch vs the NumPy reference"),
        f64::from(numpy),
        1e-4,
    );
}

fn vit_spec() -> serde_json::Value {
    serde_json::json!({
        "patch_size": 8, "num_hidden_layers": 2, "num_attention_heads": 4,
        "layer_norm_eps": 1e-12, "qkv_bias": true, "pixel_size": [32, 32],
        "pixel_mean": [0.48, 0.46, 0.41], "pixel_std": [0.27, 0.26, 0.28],
    })
}

#[test]
fn variant_b_matches_onnx_and_the_numpy_reference() {
    let dir = tempfile::tempdir().unwrap();
    let vit = vit_folder(dir.path(), "", true, 1);
    for (vis_d, layers) in [(40, 1), (32, 0)] {
        let cfg = config(&format!(
            "{{image_width: 40, image_height: 36, float_hidden_dim: 32, dense_hidden_dim: 48, vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: {vis_d}, n_layers: {layers}, n_heads: 2}}}}}}",
            vit.display()
        ));
        let spec = serde_json::json!({"variant": "B", "vit": vit_spec(), "vis_layers": layers, "vis_heads": 2});
        check(&format!("B d{vis_d} refine{layers}"), &cfg, spec, 3);
    }
}

#[test]
fn variant_c_every_mode_matches_onnx_and_the_numpy_reference() {
    let dir = tempfile::tempdir().unwrap();
    let vit = vit_folder(dir.path(), "", false, 2);
    let bert = bert_folder(dir.path(), 3);
    let base = "image_width: 40, image_height: 36, float_hidden_dim: 32, dense_hidden_dim: 48";
    let native = "transformer: {d_model: 32, n_layers: 1, n_heads: 4, patch_size: 4}";
    let hf = format!("transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 40, n_layers: 1, n_heads: 2}}", vit.display());
    let fuse = |fe: &str, extra: &str| {
        format!("encoder: {{{fe} {extra} transformer: {{d_model: 32, n_layers: 2, n_heads: 4, ff_mult: 2, post_concat_seq_len: 3, unified_float_tokens: 2}}}}")
    };
    // (label, nn yaml, reference settings)
    let cases: Vec<(&str, String, serde_json::Value)> = vec![
        ("vision_transformer cnn linear", format!("{{{base}, fusion_mode: vision_transformer, {}}}", fuse("", "")),
            serde_json::json!({"fusion_mode": "vision_transformer", "vis_branch": "cnn", "fusion_encoder": "linear"})),
        ("vision_transformer native native", format!("{{{base}, fusion_mode: vision_transformer, vis: {{{native}}}, {}}}", fuse("fusion_encoder: native_transformer,", "")),
            serde_json::json!({"fusion_mode": "vision_transformer", "vis_branch": "native_transformer", "fusion_encoder": "native_transformer", "seq_len": 3})),
        ("vision_transformer hf mlp", format!("{{{base}, fusion_mode: vision_transformer, vis: {{{hf}}}, {}}}", fuse("fusion_encoder: mlp,", "fusion_mlp: {hidden_dim: 40, n_layers: 2},")),
            serde_json::json!({"fusion_mode": "vision_transformer", "vis_branch": "hf_transformer", "fusion_encoder": "mlp", "seq_len": 3})),
        ("vision_transformer no-image linear", format!("{{{base}, no_image: true, fusion_mode: vision_transformer, {}}}", fuse("", "")),
            serde_json::json!({"fusion_mode": "vision_transformer", "vis_branch": "none", "fusion_encoder": "linear", "vis_d": 256})),
        ("post_concat fused_vector cnn native", format!("{{{base}, fusion_mode: post_concat, {}}}", fuse("", "")),
            serde_json::json!({"fusion_mode": "post_concat", "layout": "fused_vector", "vis_branch": "cnn", "fusion_encoder": "native_transformer", "seq_len": 3})),
        ("post_concat fused_vector native cnn-trunk", format!("{{{base}, fusion_mode: post_concat, vis: {{{native}}}, {}}}", fuse("fusion_encoder: cnn,", "fusion_cnn: {hidden_channels: [16, 24], kernel_size: 3},")),
            serde_json::json!({"fusion_mode": "post_concat", "layout": "fused_vector", "vis_branch": "native_transformer", "fusion_encoder": "cnn", "seq_len": 3})),
        ("post_concat tokens cnn per_feature native (the original's preset)", format!("{{{base}, fusion_mode: post_concat, {}}}", fuse("post_concat_layout: token_sequence, float_token_layout: per_feature,", "")),
            serde_json::json!({"fusion_mode": "post_concat", "layout": "token_sequence", "float_token_input": "raw", "float_token_layout": "per_feature", "vis_branch": "cnn", "fusion_encoder": "native_transformer"})),
        ("post_concat tokens native patch_tokens dense linear", format!("{{{base}, fusion_mode: post_concat, vis: {{transformer: {{d_model: 32, n_layers: 1, n_heads: 4, patch_size: 4, fusion_tokens: patch_tokens}}}}, {}}}", fuse("post_concat_layout: token_sequence, fusion_encoder: linear,", "")),
            serde_json::json!({"fusion_mode": "post_concat", "layout": "token_sequence", "float_token_input": "raw", "float_token_layout": "dense", "vis_branch": "native_transformer", "fusion_tokens": "patch_tokens", "fusion_encoder": "linear"})),
        ("post_concat tokens hf patch_tokens mlp_hidden native", format!("{{{base}, fusion_mode: post_concat, vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 40, n_layers: 1, n_heads: 2, fusion_tokens: patch_tokens}}}}, {}}}", vit.display(), fuse("post_concat_layout: token_sequence, float_token_input: mlp_hidden,", "")),
            serde_json::json!({"fusion_mode": "post_concat", "layout": "token_sequence", "float_token_input": "mlp_hidden", "float_token_layout": "dense", "vis_branch": "hf_transformer", "fusion_tokens": "patch_tokens", "fusion_encoder": "native_transformer"})),
        ("post_concat tokens cnn per_feature bert (hf_embedding)", format!("{{{base}, fusion_mode: post_concat, encoder: {{post_concat_layout: token_sequence, float_token_layout: per_feature, transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32, n_layers: 0}}}}}}", bert.display()),
            serde_json::json!({"fusion_mode": "post_concat", "layout": "token_sequence", "float_token_input": "raw", "float_token_layout": "per_feature", "vis_branch": "cnn", "fusion_encoder": "hf_embedding"})),
        ("unified native native", format!("{{{base}, fusion_mode: unified, vis: {{{native}}}, {}}}", fuse("", "")),
            serde_json::json!({"fusion_mode": "unified", "vis_branch": "native_transformer", "fusion_encoder": "native_transformer"})),
        ("unified cnn mlp", format!("{{{base}, fusion_mode: unified, {}}}", fuse("fusion_encoder: mlp,", "fusion_mlp: {hidden_dim: 40, n_layers: 3, dropout: 0.1},")),
            serde_json::json!({"fusion_mode": "unified", "vis_branch": "cnn", "fusion_encoder": "mlp"})),
        ("unified hf native", format!("{{{base}, fusion_mode: unified, vis: {{{hf}}}, {}}}", fuse("", "")),
            serde_json::json!({"fusion_mode": "unified", "vis_branch": "hf_transformer", "fusion_encoder": "native_transformer"})),
    ];
    for (i, (label, nn, mut spec)) in cases.into_iter().enumerate() {
        let cfg = config(&nn);
        spec["variant"] = "C".into();
        spec["vit"] = vit_spec();
        spec["bert"] = serde_json::json!({"num_hidden_layers": 2, "num_attention_heads": 2, "layer_norm_eps": 1e-12});
        spec["fuse_d"] = 32.into();
        spec["fuse_layers"] = 2.into();
        spec["fuse_heads"] = 4.into();
        spec["vis_layers"] = 1.into();
        spec["vis_heads"] = if label.contains("hf") { 2 } else { 4 }.into();
        spec["patch_size"] = 4.into();
        check(label, &cfg, spec, 10 + i as u64);
    }
}

#[test]
fn hugging_face_folders_load_as_transformers_would_or_are_named() {
    let dir = tempfile::tempdir().unwrap();
    // Saved from an image-classification model: keys under `vit.`; no pooler.
    let vit = vit_folder(dir.path(), "vit.", false, 4);
    let yaml = |path: &Path| {
        format!("{{vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32, n_layers: 0}}}}}}", path.display())
    };
    let cfg = config(&yaml(&vit));
    let net = ActorCritic::new_pretrained(&cfg, Device::Cpu, 0).unwrap();
    let w = net.to_weights();
    let file = rulka_checkpoint::Weights::read(&vit.join("model.safetensors")).unwrap();
    assert_eq!(
        w.get("backbone.encoder.layer.1.intermediate.dense.weight").unwrap().data,
        file.get("vit.encoder.layer.1.intermediate.dense.weight").unwrap().data,
        "the pretrained weights are in the network"
    );
    assert!(
        w.get("backbone.pooler.dense.weight").is_some(),
        "a missing pooler is initialised, as transformers does"
    );
    // The config records the folder's shape, so collectors need no folder.
    assert!(cfg.to_yaml().contains("model_type: vit"), "{}", cfg.to_yaml());
    let again =
        Config::from_yaml_str(&cfg.to_yaml().replace(&vit.display().to_string(), "/gone"), "r")
            .unwrap();
    assert_eq!(
        again.network_hash(),
        cfg.network_hash(),
        "the folder path is not part of the network"
    );

    // A tensor missing from the file is named.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["config.json", "preprocessor_config.json"] {
        std::fs::copy(vit.join(f), broken.join(f)).unwrap();
    }
    let mut t = BTreeMap::new();
    for (name, v) in &file.tensors {
        if !name.ends_with("layernorm.bias") {
            t.insert(name.clone(), (v.shape.clone(), v.data.clone()));
        }
    }
    write_safetensors(&broken.join("model.safetensors"), &t);
    let e = ActorCritic::new_pretrained(&config(&yaml(&broken)), Device::Cpu, 0).unwrap_err();
    assert!(format!("{e:#}").contains("missing: layernorm.bias"), "{e:#}");

    // No folder, a non-ViT model, a processor that disagrees: named config errors.
    let e = Config::from_yaml_str(&format!("nn: {}\n", yaml(Path::new("/no/such/vit"))), "c.yaml")
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("nn.vis.transformer.model_name_or_path: /no/such/vit: no such folder"),
        "{e}"
    );
    let bert = bert_folder(dir.path(), 5);
    let e = Config::from_yaml_str(&format!("nn: {}\n", yaml(&bert)), "c.yaml").unwrap_err();
    assert!(e.to_string().contains("is not a ViT-format vision model"), "{e}");
    std::fs::write(
        vit.join("preprocessor_config.json"),
        r#"{"size": {"height": 48, "width": 48}}"#,
    )
    .unwrap();
    let e = Config::from_yaml_str(&format!("nn: {}\n", yaml(&vit)), "c.yaml").unwrap_err();
    assert!(
        e.to_string().contains("resizes to 48x48 but the model's positions are for 32x32"),
        "{e}"
    );
}

/// What the real `transformers` (in the test venv) registers for the model
/// in `folder`: its `state_dict()` keys and its `named_parameters()` names.
fn transformers_order(folder: &Path) -> Option<(Vec<String>, Vec<String>)> {
    let python = venv_python("the transformers order check")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/hf_order.py");
    let out = Command::new(python).arg(script).arg(folder).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names = |k: &str| -> Vec<String> {
        v[k].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()).collect()
    };
    Some((names("state_dict"), names("parameters")))
}

/// A Hugging Face block's tensors stand in rulka's network in the order
/// `transformers` registers them (a ViT's layer norms after its attention
/// and MLP, not before as the forward pass reads them), and the parameters
/// a PyTorch optimizer lists for it — the pooler and a BERT's word
/// embeddings too, which no forward pass reads — in `named_parameters()`
/// order: an optimizer's state is indexed by that order, and a ViT's query,
/// key and value (or its two layer norms and the biases) have one shape.
#[test]
fn hugging_face_blocks_are_ordered_as_transformers_registers_them() {
    let dir = tempfile::tempdir().unwrap();
    let vit = vit_folder(dir.path(), "", true, 1);
    let bert = bert_folder(dir.path(), 3);
    let base = "image_width: 40, image_height: 36, float_hidden_dim: 32, dense_hidden_dim: 48";
    let cases = [
        (
            &vit,
            "backbone.",
            format!("{{{base}, vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32, n_layers: 0, n_heads: 2}}}}}}", vit.display()),
        ),
        (
            &bert,
            "_hf_fusion_bb.",
            format!("{{{base}, fusion_mode: post_concat, encoder: {{post_concat_layout: token_sequence, float_token_layout: per_feature, transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32, n_layers: 0}}}}}}", bert.display()),
        ),
    ];
    for (folder, prefix, nn) in cases {
        let Some((state_dict, parameters)) = transformers_order(folder) else { return };
        let net = rulka_network::Architecture::from_config(&config(&nn)).net;
        let under = |names: Vec<&str>| -> Vec<String> {
            names.into_iter().filter_map(|n| n.strip_prefix(prefix)).map(str::to_owned).collect()
        };
        let tensors = under(net.tensors.iter().map(|t| t.name.as_str()).collect());
        assert_eq!(tensors, state_dict, "{prefix}: the state dict's order");
        let listed =
            under(net.torch_optimizer_parameters().map(|(t, _)| t.name.as_str()).collect());
        assert_eq!(listed, parameters, "{prefix}: the optimizer's parameter order");
        let unread: Vec<&str> = net
            .torch_optimizer_parameters()
            .filter(|(t, trained)| !trained && t.name.starts_with(prefix))
            .map(|(t, _)| t.name.strip_prefix(prefix).unwrap())
            .collect();
        let expect: &[&str] = if prefix == "backbone." {
            &["pooler.dense.weight", "pooler.dense.bias"]
        } else {
            &["embeddings.word_embeddings.weight", "pooler.dense.weight", "pooler.dense.bias"]
        };
        assert_eq!(unread, expect, "{prefix}: listed but never read, so never stepped");
    }
}
