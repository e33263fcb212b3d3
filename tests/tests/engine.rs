//! The policy engine on a real ONNX Runtime session: agreement with the
//! learner's log-probs, sampling, guards, and hot-swap from a real weight board.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::time::{Duration, Instant};

use rulka_config::Config;
use rulka_inference::sample_action;
use rulka_inference::{EngineOptions, InferenceError, ModelSource, PolicyEngine};
use rulka_learner::ActorCritic;
use tch::{Device, Tensor};

fn cfg(heads: &str) -> Config {
    Config::from_yaml_str(&format!("nn: {{image_width: 40, image_height: 36, float_hidden_dim: 32, dense_hidden_dim: 48}}\nenvironment: {{rl_action_offsets_ms: {heads}}}"), "t").unwrap()
}

fn engine_for(cfg: &Config, net: &ActorCritic, version: u64, seed: u64) -> PolicyEngine {
    let mut cfg = cfg.clone();
    cfg.inference.intra_op_threads = rulka_test_support::margin::threads() as u32;
    let cfg = &cfg;
    let onnx = rulka_export::export_onnx(cfg, &net.to_weights()).unwrap();
    let rt = rulka_inference::load_runtime(None).unwrap();
    PolicyEngine::new(
        rt,
        cfg,
        ModelSource::Bytes(onnx),
        version,
        EngineOptions { greedy: false, seed },
    )
    .unwrap()
}

fn inputs(cfg: &Config, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as u32
    };
    let frame = (0..36 * 40).map(|_| (next() % 256) as u8).collect();
    let (mean, std) = rulka_config::float_inputs_mean_std(cfg);
    let floats = mean
        .iter()
        .zip(&std)
        .map(|(m, s)| m + s * ((next() % 2000) as f32 / 1000.0 - 1.0))
        .collect();
    (frame, floats)
}

#[test]
fn engine_log_probs_agree_with_the_learner() {
    for heads in ["[0]", "[0, 10, 20]"] {
        let cfg = cfg(heads);
        let mut net = ActorCritic::new(&cfg, Device::Cpu, 3);
        net.set_training(false);
        let mut engine = engine_for(&cfg, &net, 1, 9);
        let n = cfg.n_action_heads();
        let mut worst = 0.0f64;
        for s in 0..50 {
            let (frame, floats) = inputs(&cfg, s);
            let a = engine.act(&frame, &floats).unwrap();
            assert_eq!(a.actions().len(), n);
            let img = Tensor::from_slice(&frame).reshape([1, 1, 36, 40]);
            let fl = Tensor::from_slice(&floats).reshape([1, floats.len() as i64]);
            let acts =
                Tensor::from_slice(&a.actions().iter().map(|&x| i64::from(x)).collect::<Vec<_>>())
                    .reshape([1, n as i64]);
            let ev = tch::no_grad(|| net.evaluate_actions(&img, &fl, &acts));
            worst = worst.max((ev.log_prob.double_value(&[0]) - f64::from(a.log_prob)).abs());
            rulka_test_support::margin::close(
                "ev.value.double_value(&[0]) vs f64::from(a.value)",
                ev.value.double_value(&[0]),
                f64::from(a.value),
                1e-4,
            );
            assert_eq!(a.policy_version, 1);
        }
        rulka_test_support::margin::at_most(
            &format!("heads {heads}: sampler (ONNX Runtime) vs learner (tch) log-probs"),
            worst,
            1e-4,
        );
    }
}

#[test]
fn inverse_cdf_sampling_has_exact_frequencies_and_stable_log_probs() {
    // p = [1/6, 2/6, 3/6]; a uniform grid of u hits each action in proportion.
    let logits = [0.0f32, 2f32.ln(), 3f32.ln()];
    let mut counts = [0usize; 3];
    for i in 0..6000 {
        let (a, lp) = sample_action(&logits, Some((i as f64 + 0.5) / 6000.0));
        counts[a] += 1;
        let p = [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0][a];
        rulka_test_support::margin::close("lp vs f64::ln(p)", lp, f64::ln(p), 1e-6);
    }
    assert_eq!(counts, [1000, 2000, 3000]);
    assert_eq!(sample_action(&logits, None).0, 2, "greedy takes the argmax");
    // Huge logits: no overflow, log-prob of the dominant action ≈ 0.
    let (a, lp) = sample_action(&[1e30, 0.0, -1e30], Some(0.5));
    assert_eq!(a, 0);
    assert!(lp.abs() < 1e-12);
}

#[test]
fn seeded_engines_repeat_and_greedy_is_deterministic() {
    let cfg = cfg("[0, 10]");
    let net = ActorCritic::new(&cfg, Device::Cpu, 5);
    let (mut a, mut b, mut c) =
        (engine_for(&cfg, &net, 0, 1), engine_for(&cfg, &net, 0, 1), engine_for(&cfg, &net, 0, 2));
    let (frame, floats) = inputs(&cfg, 0);
    let run = |e: &mut PolicyEngine| {
        (0..200).map(|_| e.act(&frame, &floats).unwrap().actions().to_vec()).collect::<Vec<_>>()
    };
    let (ra, rb, rc) = (run(&mut a), run(&mut b), run(&mut c));
    assert_eq!(ra, rb, "same seed, same inputs: same actions");
    assert_ne!(ra, rc, "different seeds gave identical 200-step sequences");
    a.set_greedy(true);
    let g = run(&mut a);
    assert!(g.windows(2).all(|w| w[0] == w[1]), "greedy varied on identical inputs");
}

#[test]
fn batched_decisions_match_single_ones_in_greedy_mode() {
    let cfg = cfg("[0]");
    let net = ActorCritic::new(&cfg, Device::Cpu, 2);
    let mut e = engine_for(&cfg, &net, 0, 0);
    e.set_greedy(true);
    let (mut frames, mut floats) = (Vec::new(), Vec::new());
    let mut singles = Vec::new();
    for s in 0..7 {
        let (f, x) = inputs(&cfg, s);
        singles.push(e.act(&f, &x).unwrap());
        frames.extend(f);
        floats.extend(x);
    }
    let mut out = Vec::new();
    e.act_batch(&frames, &floats, 7, &mut out).unwrap();
    for (a, b) in singles.iter().zip(&out) {
        assert_eq!(a.actions(), b.actions());
        let m = rulka_test_support::margin::close;
        m("log-prob, one vs a batch of 7", a.log_prob.into(), b.log_prob.into(), 1e-5);
        m("value, one vs a batch of 7", a.value.into(), b.value.into(), 1e-5);
    }
}

#[test]
fn non_finite_outputs_are_refused_and_counted() {
    let cfg = cfg("[0]");
    let net = ActorCritic::new(&cfg, Device::Cpu, 2);
    let mut e = engine_for(&cfg, &net, 0, 0);
    let (frame, mut floats) = inputs(&cfg, 1);
    floats[3] = f32::NAN;
    let err = e.act(&frame, &floats).unwrap_err();
    assert!(matches!(err, InferenceError::NonFinite { .. }), "{err}");
    assert_eq!(e.stats().non_finite, 1);
    floats[3] = 0.0;
    assert!(e.act(&frame, &floats).is_ok(), "the engine keeps serving after a refused call");
}

#[test]
fn mismatched_models_and_unavailable_providers_are_typed_errors() {
    let rt = rulka_inference::load_runtime(None).unwrap();
    let a = cfg("[0]");
    let net = ActorCritic::new(&a, Device::Cpu, 0);
    let onnx = rulka_export::export_onnx(&a, &net.to_weights()).unwrap();
    let b = cfg("[0, 10]");
    let e = PolicyEngine::new(
        rt,
        &b,
        ModelSource::Bytes(onnx.clone()),
        0,
        EngineOptions { greedy: false, seed: 0 },
    )
    .unwrap_err();
    assert!(
        matches!(e, InferenceError::ModelMismatch { .. }) && e.to_string().contains("logits"),
        "{e}"
    );
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny_gemm.onnx");
    let e = PolicyEngine::new(
        rt,
        &a,
        ModelSource::File(fixture),
        0,
        EngineOptions { greedy: false, seed: 0 },
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a rulka export"), "{e}");
    let mut gpu = a.clone();
    gpu.inference.provider = rulka_config::Provider::Cuda;
    let e = PolicyEngine::new(
        rt,
        &gpu,
        ModelSource::Bytes(onnx.clone()),
        0,
        EngineOptions { greedy: false, seed: 0 },
    )
    .unwrap_err();
    assert!(matches!(e, InferenceError::ProviderUnavailable { .. }), "{e}");
    gpu.inference.fallback = rulka_config::Fallback::Cpu;
    // This test crate is built without the `cuda` feature: the fallback must engage.
    assert!(
        PolicyEngine::new(
            rt,
            &gpu,
            ModelSource::Bytes(onnx),
            0,
            EngineOptions { greedy: false, seed: 0 }
        )
        .is_ok(),
        "fallback: cpu must work"
    );
}

#[test]
fn hot_swap_follows_the_board_and_rejects_bad_snapshots() {
    let cfg = cfg("[0]");
    let dir = tempfile::Builder::new().prefix("rulka-engine-").tempdir_in("/dev/shm").unwrap();
    let spec = rulka_shm::BoardSpec::new(dir.path(), "w", 1, rulka_shm::Schema::default(), 1 << 20);
    let mut writer = rulka_shm::BoardWriter::create(&spec).unwrap();
    let reader = rulka_shm::BoardReader::open(&spec, Duration::from_secs(1)).unwrap();
    let mut v1 = ActorCritic::new(&cfg, Device::Cpu, 1);
    v1.set_training(false);
    let mut engine = engine_for(&cfg, &v1, 1, 0);
    engine.set_greedy(true);
    engine.follow(reader, &cfg);
    let mut v2 = ActorCritic::new(&cfg, Device::Cpu, 2);
    v2.set_training(false);
    let meta = rulka_checkpoint::Meta::new(&cfg, 100);
    writer.publish(2, &v2.to_weights().to_safetensors(&meta).unwrap()).unwrap();
    let (frame, floats) = inputs(&cfg, 3);
    let start = Instant::now();
    let mut a = engine.act(&frame, &floats).unwrap();
    while a.policy_version != 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "the engine never swapped in v2");
        std::thread::sleep(Duration::from_millis(2));
        a = engine.act(&frame, &floats).unwrap();
    }
    // The value now comes from v2's weights.
    let img = Tensor::from_slice(&frame).reshape([1, 1, 36, 40]);
    let fl = Tensor::from_slice(&floats).reshape([1, floats.len() as i64]);
    let (_, v) = tch::no_grad(|| v2.forward(&img, &fl));
    rulka_test_support::margin::close(
        "v.double_value(&[0, 0]) vs f64::from(a.value)",
        v.double_value(&[0, 0]),
        f64::from(a.value),
        1e-4,
    );
    // A corrupt snapshot (another architecture) is rejected; v2 keeps serving.
    let other = Config::from_yaml_str(
        "nn: {image_width: 40, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 48}",
        "o",
    )
    .unwrap();
    let bad = ActorCritic::new(&other, Device::Cpu, 3)
        .to_weights()
        .to_safetensors(&rulka_checkpoint::Meta::new(&other, 0))
        .unwrap();
    writer.publish(3, &bad).unwrap();
    let start = Instant::now();
    while engine.stats().rejected == 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "the bad snapshot was never examined");
        std::thread::sleep(Duration::from_millis(2));
    }
    let a = engine.act(&frame, &floats).unwrap();
    assert_eq!(a.policy_version, 2);
    let s = engine.stats();
    assert_eq!((s.swaps, s.rejected), (1, 1));
    assert!(s.last_rejection.unwrap().contains("another architecture"));
}

#[test]
fn swaps_keep_the_batch_and_time_each_first_decision_once() {
    // Every batch size an engine is used at, before and after swaps: a swap
    // changes the weights, never the shape of the calls the engine takes.
    let cfg = cfg("[0]");
    let dir = tempfile::Builder::new().prefix("rulka-engine-").tempdir_in("/dev/shm").unwrap();
    let spec = rulka_shm::BoardSpec::new(dir.path(), "w", 1, rulka_shm::Schema::default(), 1 << 20);
    let mut writer = rulka_shm::BoardWriter::create(&spec).unwrap();
    let reader = rulka_shm::BoardReader::open(&spec, Duration::from_secs(1)).unwrap();
    let v1 = ActorCritic::new(&cfg, Device::Cpu, 1);
    let mut engine = engine_for(&cfg, &v1, 1, 0);
    engine.follow(reader, &cfg);
    let (frame, floats) = inputs(&cfg, 3);
    let batch_of = |b: usize| (frame.repeat(b), floats.repeat(b));
    let mut out = Vec::new();
    let mut lasts = Vec::new();
    // (version, the batch of the calls before its snapshot, after it): the
    // call that swaps a snapshot in takes another batch than the last one
    // made on the old weights.
    for (version, before, after) in [(2u64, 8usize, 1usize), (3, 1, 3), (4, 3, 8), (5, 8, 8)] {
        let (frames, fl) = batch_of(before);
        engine.act_batch(&frames, &fl, before, &mut out).unwrap();
        let net = ActorCritic::new(&cfg, Device::Cpu, version);
        let meta = rulka_checkpoint::Meta::new(&cfg, version);
        writer.publish(version, &net.to_weights().to_safetensors(&meta).unwrap()).unwrap();
        // The new weights are ready before the next call (it swaps them in).
        // The first swap waits a second, so it is the longest (the others
        // come within a fraction of one): the largest time must stay its.
        std::thread::sleep(Duration::from_millis(if version == 2 { 1000 } else { 300 }));
        let (frames, fl) = batch_of(after);
        let batch = after;
        let start = Instant::now();
        loop {
            engine.act_batch(&frames, &fl, batch, &mut out).unwrap();
            assert_eq!(out.len(), batch);
            if out.iter().all(|a| a.policy_version == version) {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "v{version} never swapped in");
            std::thread::sleep(Duration::from_millis(2));
        }
        let s = engine.stats();
        let last = s.last_swap_us.expect("a swap's first decision is timed");
        let prepare = s.last_prepare_us.expect("and its preparation");
        assert!(prepare > 0 && last >= prepare, "v{version}: {s:?}");
        // Timed once: more decisions on the same weights leave it as it is.
        for _ in 0..3 {
            engine.act_batch(&frames, &fl, batch, &mut out).unwrap();
            engine.act(&frame, &floats).unwrap();
        }
        assert_eq!(engine.stats().last_swap_us, Some(last), "v{version}: retimed without a swap");
        lasts.push(last);
        assert_eq!(
            engine.stats().max_swap_us,
            *lasts.iter().max().unwrap(),
            "v{version}: {lasts:?}"
        );
    }
    // The follower sees a snapshot within its 50 ms poll of its publication
    // (later on a loaded machine): the first swap's time holds most of the
    // second the test waited. The later ones take a session build (tens of
    // milliseconds here), so the running maximum above was checked against
    // times below an earlier one, not only rising ones.
    assert!(lasts[0] >= 100_000, "{lasts:?}");
    assert_eq!(engine.stats().swaps, 4);

    // A snapshot whose first decision goes through outputs() (rulka gpu
    // check's path), called in a loop from its publication: it is timed by
    // that call, and the time holds its preparation (export, session build,
    // warm-up), which here is most of it: the loop takes each ready
    // session at once.
    let before = engine.stats();
    let net = ActorCritic::new(&cfg, Device::Cpu, 6);
    let meta = rulka_checkpoint::Meta::new(&cfg, 6);
    writer.publish(6, &net.to_weights().to_safetensors(&meta).unwrap()).unwrap();
    let start = Instant::now();
    while engine.policy_version() != 6 {
        engine.outputs(&frame, &floats).unwrap();
        assert!(start.elapsed() < Duration::from_secs(30), "v6 never swapped in");
    }
    let s = engine.stats();
    assert_eq!(s.swaps, 5);
    let (swap, prepare) = (s.last_swap_us.unwrap(), s.last_prepare_us.unwrap());
    assert_ne!(Some(swap), before.last_swap_us, "outputs() took v6 in without timing it");
    assert_ne!(Some(prepare), before.last_prepare_us);
    assert!(prepare > 0 && swap >= prepare, "the swap time holds the preparation: {s:?}");
    engine.act(&frame, &floats).unwrap();
    assert_eq!(engine.stats().last_swap_us, Some(swap), "retimed by the act() after it");
}
