//! The GPU paths' parts that hold on any machine: the TensorRT engine
//! cache (keyed by architecture, shape and precision, never by weights; its
//! snapshot folders, build lock and context model), and a GPU provider this
//! build lacks (a named error with its fix, or the CPU when the config says
//! `fallback: cpu`), on real exports and a real ONNX Runtime.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;

use prost::Message as _;
use rulka_checkpoint::Weights;
use rulka_config::{Config, Fallback, Provider};
use rulka_inference::engine_cache::{
    key_of, structure_of, EngineCache, EngineTarget, SOURCE_MODEL,
};
use rulka_inference::{EngineOptions, InferenceError, ModelSource, PolicyEngine};

/// A small network (`nn` overrides the float MLP's width and the image
/// height) with `extra` sections.
fn cfg_of(float_hidden: u32, height: u32, extra: &str) -> Config {
    Config::from_yaml_str(
        &format!("nn: {{image_width: 40, image_height: {height}, float_hidden_dim: {float_hidden}, dense_hidden_dim: 24}}\n{extra}"),
        "t",
    )
    .unwrap()
}

fn cfg(extra: &str) -> Config {
    cfg_of(16, 36, extra)
}

/// An export of `cfg`'s network with weights drawn from `seed`.
fn export(cfg: &Config, seed: u64) -> Vec<u8> {
    let mut w = Weights::zeros(&rulka_network::Architecture::from_config(cfg));
    w.fill_deterministic(seed);
    rulka_export::export_onnx(cfg, &w).unwrap()
}

fn target(batch: usize, fp16: bool, platform: &str) -> EngineTarget {
    EngineTarget { batch, fp16, platform: platform.into() }
}

#[test]
fn the_engine_key_follows_architecture_shape_and_precision_not_weights() {
    let c = cfg("");
    let (a, b) = (export(&c, 1), export(&c, 2));
    assert_ne!(a, b, "two seeds, two sets of weights");
    let t = target(1, false, "ort=x trt=y gpu=z");
    assert_eq!(structure_of(&a).unwrap(), structure_of(&b).unwrap());
    assert_eq!(key_of(&a, &t).unwrap(), key_of(&b, &t).unwrap());
    let key = key_of(&a, &t).unwrap();
    assert_eq!(key.len(), 16);
    assert!(key.chars().all(|ch| ch.is_ascii_hexdigit()), "{key}");

    // The metadata (it carries the training step) is not the structure.
    let mut m = rulka_export::onnx::ModelProto::decode(&a[..]).unwrap();
    m.metadata_props.push(rulka_export::onnx::StringStringEntryProto {
        key: Some("rulka.step".into()),
        value: Some("123456".into()),
    });
    assert_eq!(key_of(&m.encode_to_vec(), &t).unwrap(), key);

    // Every weight counts as weight, not only the first tensor's: the last
    // initializer changed alone keeps the key.
    let mut m = rulka_export::onnx::ModelProto::decode(&a[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    let last = g.initializer.iter_mut().rev().find(|t| t.raw_data.is_some()).unwrap();
    last.raw_data.as_mut().unwrap()[0] ^= 0xFF;
    assert_eq!(key_of(&m.encode_to_vec(), &t).unwrap(), key);

    // Architecture, input shape, precision, batch and platform each change it.
    let wider = export(&cfg_of(32, 36, ""), 1);
    let taller = export(&cfg_of(16, 44, ""), 1);
    let mut keys = vec![
        key.clone(),
        key_of(&wider, &t).unwrap(),
        key_of(&taller, &t).unwrap(),
        key_of(&a, &target(2, false, "ort=x trt=y gpu=z")).unwrap(),
        key_of(&a, &target(1, true, "ort=x trt=y gpu=z")).unwrap(),
        key_of(&a, &target(1, false, "ort=x trt=y gpu=other")).unwrap(),
    ];
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "every change makes its own key: {keys:?}");
    assert!(key_of(b"not onnx \xff", &t).unwrap_err().contains("not an ONNX model"));
}

#[test]
fn quantized_weights_are_weights_too_for_the_engine_key() {
    // int8 stores int8 codes and f32 scales; int4 stores uint8 packed codes
    // (and f32 scales): two snapshots of one quantized network share a key.
    for format in ["int8", "int4"] {
        // A float MLP of 128 wide: its 128×128 layer is quantized.
        let c = cfg_of(128, 36, &format!("inference: {{weights: {format}}}"));
        let (a, b) = (export(&c, 1), export(&c, 2));
        let quantized = rulka_export::metadata(&a)
            .unwrap()
            .into_iter()
            .find(|(k, _)| k == "rulka.quantized_layers")
            .map(|(_, v)| v)
            .unwrap_or_default();
        assert!(!quantized.is_empty(), "{format}: the test network has a quantized layer");
        let t = target(1, false, "p");
        assert_eq!(key_of(&a, &t).unwrap(), key_of(&b, &t).unwrap(), "{format}");
        // Each integer initializer's bytes changed alone keep the key.
        let m = rulka_export::onnx::ModelProto::decode(&a[..]).unwrap();
        let ints: Vec<usize> = m
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.raw_data.as_ref().is_some_and(|r| !r.is_empty())
                    && matches!(t.data_type, Some(2 | 3)) // UINT8, INT8
            })
            .map(|(i, _)| i)
            .collect();
        assert!(!ints.is_empty(), "{format}: integer codes in the export");
        for i in ints {
            let mut m = m.clone();
            m.graph.as_mut().unwrap().initializer[i].raw_data.as_mut().unwrap()[0] ^= 0x5A;
            assert_eq!(
                key_of(&m.encode_to_vec(), &t).unwrap(),
                key_of(&a, &t).unwrap(),
                "{format}: initializer {i}'s codes"
            );
        }
        // fp32 and the quantized network are different engines.
        assert_ne!(key_of(&a, &t).unwrap(), key_of(&export(&cfg_of(128, 36, ""), 1), &t).unwrap());
    }
}

#[test]
fn the_platform_names_the_gpu_of_the_device_id() {
    let gpus = vec![
        "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-aaaa)".to_string(),
        "GPU 1: NVIDIA H200 (UUID: GPU-bbbb)".to_string(),
    ];
    let p0 =
        EngineTarget::platform_of("libonnxruntime.so.1.31.1", "libnvinfer.so.10.9.0", &gpus, 0);
    let p1 =
        EngineTarget::platform_of("libonnxruntime.so.1.31.1", "libnvinfer.so.10.9.0", &gpus, 1);
    assert!(p0.contains("RTX 4090") && !p0.contains("H200"), "{p0}");
    assert!(p1.contains("H200") && !p1.contains("RTX 4090"), "{p1}");
    assert!(p1.contains("libonnxruntime.so.1.31.1") && p1.contains("libnvinfer.so.10.9.0"), "{p1}");
    // A device nvidia-smi does not list is still its own platform.
    let p2 = EngineTarget::platform_of("o", "t", &gpus, 2);
    assert!(p2.ends_with("gpu=GPU 2"), "{p2}");
    assert_eq!(EngineTarget::platform_of("o", "t", &[], 0), "ort=o trt=t gpu=GPU 0");
    // Another TensorRT or ONNX Runtime is another platform.
    let other =
        EngineTarget::platform_of("libonnxruntime.so.1.31.1", "libnvinfer.so.10.13.0", &gpus, 1);
    assert_ne!(other, p1);
}

#[test]
fn snapshots_are_staged_under_the_key_and_removed_after_use_or_their_process() {
    let root = tempfile::tempdir().unwrap();
    let c = cfg("");
    let model = export(&c, 3);
    let t = target(1, true, "p");
    let key = key_of(&model, &t).unwrap();
    // What a killed collector left behind: a dead pid's folder and a live one's.
    let dead = root.path().join(&key).join("snapshots/999999999-4");
    let live = root.path().join(&key).join(format!("snapshots/{}-5", std::process::id()));
    for d in [&dead, &live] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join(SOURCE_MODEL), b"x").unwrap();
    }
    let cache = EngineCache::open(root.path(), &model, &t).unwrap();
    assert_eq!(cache.key(), key);
    assert_eq!(cache.dir(), root.path().join(&key));
    assert!(!dead.exists(), "a dead process's snapshot goes");
    assert!(live.exists(), "a live process's stays");
    let about: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cache.dir().join("key.json")).unwrap()).unwrap();
    assert_eq!((about["batch"].as_u64(), about["fp16"].as_bool()), (Some(1), Some(true)));
    assert_eq!(about["platform"], "p");

    let staged = cache.stage(&model, 7).unwrap();
    assert_eq!(staged.dir(), cache.dir().join(format!("snapshots/{}-7", std::process::id())));
    assert_eq!(std::fs::read(staged.dir().join(SOURCE_MODEL)).unwrap(), model);
    let dir = staged.dir().to_path_buf();
    drop(staged);
    assert!(!dir.exists(), "a used snapshot is removed");
    assert!(
        cache.timing_dir().starts_with(root.path()) && !cache.timing_dir().starts_with(cache.dir())
    );
}

#[test]
fn the_context_model_is_installed_whole_and_an_unusable_one_is_discarded() {
    let root = tempfile::tempdir().unwrap();
    let model = export(&cfg(""), 3);
    let cache = EngineCache::open(root.path(), &model, &target(1, false, "p")).unwrap();
    assert_eq!(cache.context_model(), None);
    let built = root.path().join("built.onnx");
    std::fs::write(&built, b"ctx-v1").unwrap();
    cache.install_context_model(&built).unwrap();
    assert_eq!(cache.context_model().as_deref(), Some(&b"ctx-v1"[..]));
    // A process that opened v1 (another collector loading the engine
    // without the lock) goes on reading all of v1: v2 is a new file renamed
    // over the name, never v1's bytes overwritten in place.
    let mut reader = std::fs::File::open(cache.dir().join("ctx.onnx")).unwrap();
    std::fs::write(&built, b"ctx-v2, longer").unwrap();
    cache.install_context_model(&built).unwrap();
    assert_eq!(cache.context_model().as_deref(), Some(&b"ctx-v2, longer"[..]));
    let mut old = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut old).unwrap();
    assert_eq!(old, b"ctx-v1", "the open v1 was overwritten in place");
    let leftovers: Vec<_> = std::fs::read_dir(cache.dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A file cut to nothing counts as none.
    std::fs::write(cache.dir().join("ctx.onnx"), b"").unwrap();
    assert_eq!(cache.context_model(), None);
    std::fs::write(cache.dir().join("ctx.onnx"), b"x").unwrap();
    cache.discard_context_model();
    assert_eq!(cache.context_model(), None);
    assert!(cache
        .install_context_model(Path::new("/nonexistent/ctx.onnx"))
        .unwrap_err()
        .contains("/nonexistent/ctx.onnx"));
}

#[test]
fn one_process_builds_while_the_others_wait_for_the_lock() {
    let root = tempfile::tempdir().unwrap();
    let model = export(&cfg(""), 3);
    let cache = EngineCache::open(root.path(), &model, &target(1, false, "p")).unwrap();
    let first = cache.lock().unwrap();
    let released = std::sync::Arc::new(rulka_shm::AtomicU64::new(0));
    let (c2, r2) = (cache.clone(), released.clone());
    let waiter = std::thread::spawn(move || {
        let _second = c2.lock().unwrap();
        r2.load(rulka_shm::Ordering::SeqCst) == 1
    });
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert!(!waiter.is_finished(), "the second builder waits");
    released.store(1, rulka_shm::Ordering::SeqCst);
    drop(first);
    assert!(waiter.join().unwrap(), "the lock came only after the first let go");
}

fn engine(c: &Config, seed: u64) -> Result<PolicyEngine, InferenceError> {
    let rt = rulka_inference::load_runtime(None).unwrap();
    PolicyEngine::new(
        rt,
        c,
        ModelSource::Bytes(export(c, seed)),
        0,
        EngineOptions { greedy: false, seed: 5 },
    )
}

#[test]
fn a_gpu_provider_this_build_lacks_is_a_named_error_or_the_cpu_when_configured() {
    if cfg!(any(feature = "cuda", feature = "tensorrt")) {
        return; // rulka gpu check's tests cover the GPU build's errors
    }
    for (provider, feature) in [("cuda", "cuda"), ("tensorrt", "tensorrt")] {
        let c = cfg(&format!("inference: {{provider: {provider}}}"));
        let e = engine(&c, 1).unwrap_err();
        assert_eq!(e.kind(), rulka_error::ErrorKind::BadInput, "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("without the `{feature}` cargo feature"))
                && text.contains(&format!("scripts/rulka --build={feature}")),
            "{text}"
        );
        // fallback: cpu runs the same policy as the CPU provider: the same
        // actions, log-probs and values for the same seed.
        let mut fb = cfg(&format!("inference: {{provider: {provider}, fallback: cpu}}"));
        assert_eq!(fb.inference.fallback, Fallback::Cpu);
        let mut on_cpu = fb.clone();
        on_cpu.inference.provider = Provider::Cpu;
        fb.inference.intra_op_threads = 1;
        let (mut a, mut b) = (engine(&fb, 1).unwrap(), engine(&on_cpu, 1).unwrap());
        let (pixels, f) = a.input_sizes();
        for i in 0..20u8 {
            let frame = vec![i.wrapping_mul(37); pixels];
            let floats = rulka_config::float_inputs_mean_std(&fb).0;
            assert_eq!(floats.len(), f);
            assert_eq!(a.act(&frame, &floats).unwrap(), b.act(&frame, &floats).unwrap());
        }
        assert!(!a.stats().cuda_graph);
    }
}
