//! The exported ONNX model computes the same function as the tch network,
//! on ONNX Runtime, for every CNN option × single/multi-offset heads ×
//! with/without image, at batch 1 and 17.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::ActorCritic;
use tch::Device;

fn config(cnn: &str, heads: &str, no_image: bool) -> Config {
    let yaml = format!(
        "nn:\n  image_width: 40\n  image_height: 36\n  no_image: {no_image}\n  float_hidden_dim: 32\n  dense_hidden_dim: 48\n  cnn: {cnn}\nenvironment:\n  n_zone_centers_in_inputs: 4\n  n_prev_actions_in_inputs: 3\n  rl_action_offsets_ms: {heads}\n"
    );
    Config::from_yaml_str(&yaml, "parity.yaml").unwrap()
}

fn parity(cfg: &Config, seed: u64) -> rulka_torch::ParityReport {
    let mut cfg = cfg.clone();
    cfg.inference.intra_op_threads = rulka_test_support::margin::threads() as u32;
    let cfg = &cfg;
    let mut net = ActorCritic::new(cfg, Device::Cpu, seed);
    // A few training-mode forwards move the spectral-norm vectors away from
    // their initial values, as in a real checkpoint.
    net.set_training(true);
    let (h, w) = net.arch().image.as_ref().map_or((1, 1), |i| (i.height as i64, i.width as i64));
    let img = tch::Tensor::zeros([2, 1, h, w], (tch::Kind::Uint8, Device::Cpu));
    let fl = tch::Tensor::zeros([2, cfg.float_input_dim() as i64], (tch::Kind::Float, Device::Cpu));
    for _ in 0..3 {
        let _ = tch::no_grad(|| net.forward(&img, &fl));
    }
    let weights = net.to_weights();
    let onnx = rulka_export::export_onnx(cfg, &weights).unwrap();
    let rt = rulka_inference::load_runtime(None).unwrap();
    // A different seed for the checking network: its weights must come from loading.
    let r = rulka_torch::check_parity(cfg, &weights, &onnx, rt, &[1, 17], seed + 1000).unwrap();
    record(&r);
    r
}

/// The parity's largest differences as margins against `rulka export
/// --check`'s tolerance (the assertions stay `passed()`'s).
fn record(r: &rulka_torch::ParityReport) {
    if r.passed() {
        let tol = f64::from(rulka_torch::TOLERANCE);
        rulka_test_support::margin::at_most("ONNX vs tch logits", r.max_logits().into(), tol);
        rulka_test_support::margin::at_most("ONNX vs tch value", r.max_value().into(), tol);
    }
}

#[test]
fn every_cnn_option_matches_within_1e4() {
    let cnns = [
        "{}",
        "{use_spectral_norm: true}",
        "{use_adaptive_maxpool: true, adaptive_maxpool_size: 3}",
        "{use_adaptive_maxpool: true, adaptive_maxpool_size: 6, use_spectral_norm: true}",
        "{use_impala_cnn: true, impala_model_size: 1}",
        "{use_impala_cnn: true, impala_model_size: 1, use_spectral_norm: true}",
        "{use_impala_cnn: true, impala_model_size: 1, use_adaptive_maxpool: true, adaptive_maxpool_size: 3}",
        "{use_impala_cnn: true, impala_model_size: 1, use_adaptive_maxpool: true, adaptive_maxpool_size: 4, use_spectral_norm: true}",
    ];
    let mut failures = Vec::new();
    for (i, cnn) in cnns.iter().enumerate() {
        for heads in ["[0]", "[0, 10, 20]"] {
            let r = parity(&config(cnn, heads, false), i as u64);
            assert_eq!(r.cases.len(), 8);
            println!(
                "cnn {cnn} heads {heads}: logits {:.2e} value {:.2e}",
                r.max_logits(),
                r.max_value()
            );
            if !r.passed() {
                failures.push(format!("{cnn} {heads}: {:?}", r.cases));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn float_only_policy_matches() {
    for heads in ["[0]", "[0, 10]"] {
        let r = parity(&config("{}", heads, true), 7);
        assert!(r.passed(), "{:?}", r.cases);
    }
}

#[test]
fn default_network_matches() {
    let cfg =
        Config::from_file(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/grpo.yaml")).unwrap();
    let r = parity(&cfg, 3);
    println!("default: logits {:.2e} value {:.2e}", r.max_logits(), r.max_value());
    assert!(r.passed(), "{:?}", r.cases);
}

#[test]
fn a_broken_export_is_caught_by_the_check() {
    // The check must be able to fail: perturb one weight after export.
    let cfg = config("{}", "[0]", false);
    let net = ActorCritic::new(&cfg, Device::Cpu, 1);
    let weights = net.to_weights();
    let mut skewed = weights.clone();
    skewed.tensors.get_mut("policy_head.bias").unwrap().data[5] += 1e-3;
    let onnx = rulka_export::export_onnx(&cfg, &skewed).unwrap();
    let rt = rulka_inference::load_runtime(None).unwrap();
    let r = rulka_torch::check_parity(&cfg, &weights, &onnx, rt, &[1], 1).unwrap();
    assert!(!r.passed(), "a perturbed model passed parity: {:?}", r.cases);
}

/// Every node of an export carries a name of its own (ONNX Runtime's and
/// Netron's messages name the node: `Conv_3`, not an empty string).
#[test]
fn every_exported_node_has_a_unique_name() {
    use prost::Message as _;
    let cfg = config("{}", "[0]", false);
    let weights = ActorCritic::new(&cfg, Device::Cpu, 1).to_weights();
    let onnx = rulka_export::export_onnx(&cfg, &weights).unwrap();
    let model = rulka_export::onnx::ModelProto::decode(onnx.as_slice()).unwrap();
    let nodes = model.graph.unwrap().node;
    assert!(nodes.len() > 10, "{} nodes", nodes.len());
    let mut names = std::collections::BTreeSet::new();
    for n in &nodes {
        let name = n.name.clone().unwrap_or_default();
        assert!(!name.is_empty(), "a nameless {:?} node", n.op_type);
        assert!(names.insert(name.clone()), "{name} twice");
    }
}
