//! The tch actor-critic against hand-computed and independently computed values.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::{logprob_entropy, ActorCritic};
use tch::{Device, Kind, Tensor};

fn small_cfg(extra: &str) -> Config {
    Config::from_yaml_str(
        &format!("nn: {{image_width: 36, image_height: 36, float_hidden_dim: 8, dense_hidden_dim: 16{extra}}}\nenvironment: {{n_zone_centers_in_inputs: 1, n_prev_actions_in_inputs: 0, n_contact_material_physics_behavior_types: 0}}"),
        "t",
    )
    .unwrap()
}

#[test]
fn logprob_and_entropy_by_hand() {
    // One head over 3 actions with probabilities 1/6, 2/6, 3/6.
    let logits = Tensor::from_slice(&[0.0f32, 2f32.ln(), 3f32.ln()]).reshape([1, 3]);
    let (lp, ent) = logprob_entropy(&logits, &Tensor::from_slice(&[2i64]), 1, 3);
    rulka_test_support::margin::close(
        "lp vs 0.5f64.ln()",
        lp.double_value(&[0]),
        0.5f64.ln(),
        1e-6,
    );
    let h: f64 = [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0].iter().map(|p: &f64| -p * p.ln()).sum();
    rulka_test_support::margin::close("ent vs h", ent.double_value(&[0]), h, 1e-6);
    // Two heads: log-probs and entropies add. Head 2 is uniform over 3.
    let logits = Tensor::from_slice(&[0.0f32, 2f32.ln(), 3f32.ln(), 1.0, 1.0, 1.0]).reshape([1, 6]);
    let (lp, ent) = logprob_entropy(&logits, &Tensor::from_slice(&[0i64, 1]).reshape([1, 2]), 2, 3);
    rulka_test_support::margin::close(
        "lp vs ((1.0f64 / 6.0).ln() + (1.0f64 / 3.0).ln())",
        lp.double_value(&[0]),
        (1.0f64 / 6.0).ln() + (1.0f64 / 3.0).ln(),
        1e-6,
    );
    rulka_test_support::margin::close(
        "ent vs (h + 3f64.ln())",
        ent.double_value(&[0]),
        h + 3f64.ln(),
        1e-6,
    );
}

/// Float-only forward computed independently in f64 from the exported weights.
fn reference_float_only(net: &ActorCritic, floats: &[f32]) -> (Vec<f64>, f64) {
    let w = net.to_weights();
    let t = |n: &str| &w.tensors[n];
    let lin = |name: &str, x: &[f64], relu: bool| -> Vec<f64> {
        let (wt, b) = (t(&format!("{name}.weight")), t(&format!("{name}.bias")));
        let (out, inp) = (wt.shape[0], wt.shape[1]);
        (0..out)
            .map(|o| {
                let y = f64::from(b.data[o])
                    + (0..inp).map(|i| f64::from(wt.data[o * inp + i]) * x[i]).sum::<f64>();
                if relu {
                    y.max(0.0)
                } else {
                    y
                }
            })
            .collect()
    };
    let (m, s) = (t("float_inputs_mean"), t("float_inputs_std"));
    let z: Vec<f64> = floats
        .iter()
        .enumerate()
        .map(|(i, &x)| (f64::from(x) - f64::from(m.data[i])) / f64::from(s.data[i]))
        .collect();
    let z = lin("float_feature_extractor.2", &lin("float_feature_extractor.0", &z, true), true);
    let h = lin("trunk.2", &lin("trunk.0", &z, true), true);
    (lin("policy_head", &h, false), lin("value_head", &h, false)[0])
}

#[test]
fn float_only_forward_matches_an_independent_f64_reference() {
    let cfg = small_cfg(", no_image: true");
    let net = ActorCritic::new(&cfg, Device::Cpu, 3);
    let f = cfg.float_input_dim();
    let floats: Vec<f32> = (0..f).map(|i| (i as f32 * 0.37).sin() * 50.0).collect();
    let (logits, value) = net.forward(
        &Tensor::zeros([1, 1, 1, 1], (Kind::Uint8, Device::Cpu)),
        &Tensor::from_slice(&floats).reshape([1, f as i64]),
    );
    let (rl, rv) = reference_float_only(&net, &floats);
    assert_eq!(logits.size(), [1, 12]);
    for (i, r) in rl.iter().enumerate() {
        rulka_test_support::margin::close(
            "logits vs r",
            logits.double_value(&[0, i as i64]),
            *r,
            1e-5,
        );
    }
    rulka_test_support::margin::close("value vs rv", value.double_value(&[0, 0]), rv, 1e-5);
}

#[test]
fn evaluate_actions_agrees_with_forward() {
    let cfg = Config::from_yaml_str("nn: {image_width: 36, image_height: 36, float_hidden_dim: 8, dense_hidden_dim: 16}\nenvironment: {rl_action_offsets_ms: [0, 10]}", "t").unwrap();
    let net = ActorCritic::new(&cfg, Device::Cpu, 1);
    let img = Tensor::randint(256, [4, 1, 36, 36], (Kind::Int64, Device::Cpu)).to_kind(Kind::Uint8);
    let fl = Tensor::randn([4, cfg.float_input_dim() as i64], (Kind::Float, Device::Cpu));
    let actions = Tensor::from_slice(&[0i64, 11, 3, 4, 5, 5, 9, 2]).reshape([4, 2]);
    let ev = net.evaluate_actions(&img, &fl, &actions);
    let (logits, value) = net.forward(&img, &fl);
    let lp = logits.reshape([4, 2, 12]).log_softmax(-1, Kind::Float);
    for b in 0..4i64 {
        let a0 = actions.int64_value(&[b, 0]);
        let a1 = actions.int64_value(&[b, 1]);
        let expect = lp.double_value(&[b, 0, a0]) + lp.double_value(&[b, 1, a1]);
        rulka_test_support::margin::close(
            "ev.log_prob vs expect",
            ev.log_prob.double_value(&[b]),
            expect,
            1e-6,
        );
        rulka_test_support::margin::close(
            "ev.value vs value",
            ev.value.double_value(&[b]),
            value.double_value(&[b, 0]),
            1e-7,
        );
    }
    assert_eq!(ev.entropy.size(), [4]);
}

#[test]
fn spectral_norm_power_iteration_matches_hand_computation() {
    let cfg = small_cfg(", cnn: {use_spectral_norm: true}");
    let mut net = ActorCritic::new(&cfg, Device::Cpu, 0);
    let before = net.to_weights();
    net.set_training(true);
    let img = Tensor::zeros([1, 1, 36, 36], (Kind::Uint8, Device::Cpu));
    let fl = Tensor::zeros([1, cfg.float_input_dim() as i64], (Kind::Float, Device::Cpu));
    let _ = tch::no_grad(|| net.forward(&img, &fl));
    let after = net.to_weights();
    // v' = normalize(Wᵀ u), u' = normalize(W v') for img_head.2 (32 × 256), in f64.
    let w = &before.tensors["img_head.2.weight_orig"];
    let (rows, cols) = (32usize, 16 * 4 * 4);
    let u: Vec<f64> =
        before.tensors["img_head.2.weight_u"].data.iter().map(|&x| f64::from(x)).collect();
    let at = |r: usize, c: usize| f64::from(w.data[r * cols + c]);
    let norm = |x: Vec<f64>| {
        let n = x.iter().map(|a| a * a).sum::<f64>().sqrt();
        x.into_iter().map(|a| a / n).collect::<Vec<f64>>()
    };
    let v2 = norm((0..cols).map(|c| (0..rows).map(|r| at(r, c) * u[r]).sum()).collect());
    let u2 = norm((0..rows).map(|r| (0..cols).map(|c| at(r, c) * v2[c]).sum()).collect());
    let got_v = &after.tensors["img_head.2.weight_v"].data;
    let got_u = &after.tensors["img_head.2.weight_u"].data;
    for c in 0..cols {
        rulka_test_support::margin::close("got_v[c] vs v2[c]", f64::from(got_v[c]), v2[c], 1e-5);
    }
    for r in 0..rows {
        rulka_test_support::margin::close("got_u[r] vs u2[r]", f64::from(got_u[r]), u2[r], 1e-5);
    }
    // In eval mode the vectors do not move.
    net.set_training(false);
    let _ = tch::no_grad(|| net.forward(&img, &fl));
    assert_eq!(
        net.to_weights().tensors["img_head.2.weight_u"],
        after.tensors["img_head.2.weight_u"]
    );
}

#[test]
fn checkpoint_round_trip_through_a_file_is_exact() {
    let cfg = small_cfg(", cnn: {use_impala_cnn: true, impala_model_size: 1}");
    let a = ActorCritic::new(&cfg, Device::Cpu, 11);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.safetensors");
    a.save(&path, &cfg, 77).unwrap();
    let mut b = ActorCritic::new(&cfg, Device::Cpu, 12);
    assert_ne!(a.to_weights().tensors, b.to_weights().tensors);
    let loaded = rulka_checkpoint::Weights::read(&path).unwrap();
    assert_eq!(loaded.meta.as_ref().map(|m| m.step), Some(77));
    b.load_weights(&loaded, &cfg, false).unwrap();
    let (wa, wb) = (a.to_weights(), b.to_weights());
    for (name, t) in &wa.tensors {
        let same =
            t.data.iter().zip(&wb.tensors[name].data).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{name} differs after the round trip");
    }
}

#[test]
fn non_finite_weights_are_never_loaded_or_saved() {
    let cfg = small_cfg(", no_image: true");
    let mut net = ActorCritic::new(&cfg, Device::Cpu, 0);
    let mut w = net.to_weights();
    w.tensors.get_mut("trunk.0.bias").unwrap().data[0] = f32::NAN;
    let before = net.to_weights();
    assert!(net.load_weights(&w, &cfg, false).is_err());
    assert_eq!(net.to_weights(), before, "a refused load changed the network");
}
