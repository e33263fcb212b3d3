//! `rulka import` and `rulka export --torch` against the real PyTorch: the
//! original's save folders are written by `torch.save` (weights, a RAdam
//! optimizer after real steps, a GradScaler) and `joblib.dump`
//! (tests/python/original_save.py, whose modules have the original's names
//! and registration order). Imported, the network gives PyTorch's outputs
//! on the same inputs, one more RAdam step in rulka gives PyTorch's next
//! step, `train --resume` trains on, and `export --torch` gives back files
//! `torch.load(weights_only=True)` reads as identical tensors.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rulka_config::{Config, OptimizerKind};
use rulka_learner::{Learner, OptimConfig, Optimizer};
use tch::{Device, Kind, Tensor};

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().expect("rulka runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The test venv's Python, when it has torch and joblib (scripts/setup.sh --python).
fn torch_python() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let ok = p.exists()
        && Command::new(&p)
            .args(["-c", "import torch, joblib"])
            .output()
            .is_ok_and(|o| o.status.success());
    if ok {
        return Some(p);
    }
    assert!(
        std::env::var_os("RULKA_REQUIRE_VENV").is_none(),
        "RULKA_REQUIRE_VENV is set but .venv has no torch and joblib (scripts/setup.sh --python)"
    );
    eprintln!("SKIPPED: no .venv with torch — the original's files cannot be written");
    None
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/original_save.py")
}

fn py(python: &Path, args: &[&str]) {
    let o = Command::new(python).arg(script()).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "original_save.py {args:?}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

const LR: f64 = 3.0e-4;
const EPS: f64 = 1.0e-4;
const FRAMES: u64 = 123_456;
const SCALE: f64 = 1024.0;

/// A small PPO run with RAdam (the original's optimizer) and `nn_extra`.
fn config(dir: &Path, nn_extra: &str) -> PathBuf {
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "training: {{algorithm: ppo, run_dir: {run}, optimizer: radam, lr_schedule: [[0, {LR:e}]], \
           adam_epsilon: {EPS:e}, adam_beta1: 0.9, adam_beta2: 0.999, checkpoint_every_s: 1}}\n\
         nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32{nn_extra}}}\n\
         ppo: {{rollout_steps_per_update: 256, update_epochs: 2, num_minibatches: 2}}\n\
         environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
         collectors: {{count: 1, chunk_steps: 32, ring_chunks: 16, eval_every_n_rollouts: 4, heartbeat_timeout_ms: 10000}}\n\
         inference: {{intra_op_threads: {threads}}}\n",
        run = dir.join("unused-run").display()
    );
    let p = dir.join("c.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

const VARIANT_C: &str =
    ", fusion_mode: vision_transformer, encoder: {fusion_encoder: native_transformer, \
    transformer: {d_model: 32, n_layers: 2, n_heads: 4, ff_mult: 2, post_concat_seq_len: 3}}";

/// The spec original_save.py builds the network and its save folder from;
/// the sizes are the config's, written out here (the 36×36 frame, 6 zone
/// centres and 2 previous actions give 27 + 18 + 8 + 16 + 1 = 70 floats).
fn spec(dir: &Path, variant: &str, extra: serde_json::Value) -> PathBuf {
    let mut dims = serde_json::json!({"float_dim": 70, "height": 36, "width": 36,
        "float_hidden": 16, "dense_hidden": 32, "n_logits": 12});
    if variant == "B" {
        dims["vis_d"] = 32.into();
        dims["vit_pixels"] = 32.into();
    }
    if variant == "C" {
        for (k, v) in [
            ("vis_d", 256),
            ("fuse_d", 32),
            ("seq_len", 3),
            ("fuse_layers", 2),
            ("fuse_heads", 4),
            ("fuse_ff_mult", 2),
        ] {
            dims[k] = v.into();
        }
    }
    let mut s = serde_json::json!({"variant": variant, "dims": dims, "out": dir.join("py"),
        "prefix": false, "bc_heads": 0, "steps": 6, "lr": LR, "betas": [0.9, 0.999], "eps": EPS,
        "seed": 1, "frames": FRAMES, "scale": SCALE});
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    let p = dir.join(format!("spec-{variant}.json"));
    std::fs::write(&p, s.to_string()).unwrap();
    p
}

fn f32s(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn values(t: &Tensor) -> Vec<f32> {
    Vec::try_from(t.detach().contiguous().view(-1)).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The imported run's network on PyTorch's inputs gives PyTorch's outputs
/// (when `outputs`), and its optimizer's next step on PyTorch's gradients
/// PyTorch's next step.
fn assert_equal_to_pytorch(run: &Path, py_out: &Path, step: i64, outputs: bool) {
    let cfg = Config::from_file(run.join("config.yaml")).unwrap();
    let learner = Learner::resume(&cfg, &run.join("state"), Device::Cpu).unwrap();
    assert_eq!(learner.frames, FRAMES, "the frame count places the schedules");
    if outputs {
        assert_outputs_equal(&learner, py_out);
    }
    assert_next_step_equal(&learner, &cfg, py_out, step);
}

fn assert_outputs_equal(learner: &Learner, py_out: &Path) {
    let img = Tensor::from_slice(&std::fs::read(py_out.join("image.u8")).unwrap())
        .reshape([3, 1, 36, 36]);
    let floats = Tensor::from_slice(&f32s(&py_out.join("floats.f32"))).reshape([3, -1]);
    let (logits, value) = tch::no_grad(|| learner.network().forward(&img, &floats));
    let dl = max_diff(&values(&logits), &f32s(&py_out.join("logits.f32")));
    let dv = max_diff(&values(&value), &f32s(&py_out.join("value.f32")));
    rulka_test_support::margin::at_most("logits vs PyTorch's", dl.into(), 1e-5);
    rulka_test_support::margin::at_most("value vs PyTorch's", dv.into(), 1e-5);
}

fn assert_next_step_equal(learner: &Learner, cfg: &Config, py_out: &Path, step: i64) {
    let (m, v, got_step, _) = learner.optimizer().state();
    assert_eq!(got_step, step, "RAdam's step count");
    let params = learner.network().var_store().trainable_variables();
    let t = &cfg.training;
    let mut opt = Optimizer::new(
        params.iter().map(Tensor::shallow_clone).collect(),
        OptimConfig {
            kind: OptimizerKind::Radam,
            beta1: t.adam_beta1,
            beta2: t.adam_beta2,
            eps: t.adam_epsilon,
            weight_decay: 0.0,
            max_consecutive_skips: 10,
            loss_scaling: false,
        },
    );
    opt.set_state(&m, &v, got_step, 0).unwrap();
    // Σ p·g has gradient g: PyTorch's gradients, parameter for parameter in
    // rulka's order (a different order misplaces them).
    let grads = f32s(&py_out.join("grads.f32"));
    let mut offset = 0;
    let mut loss = Tensor::zeros([], (Kind::Float, Device::Cpu));
    for p in &params {
        let n = p.numel();
        let g = Tensor::from_slice(&grads[offset..offset + n]).reshape(p.size());
        loss += (p * g).sum(Kind::Float);
        offset += n;
    }
    assert_eq!(offset, grads.len(), "as many gradient values as parameters");
    loss.backward();
    opt.step(0.0, learner.lr(), 0.0).unwrap();
    let after: Vec<f32> = params.iter().flat_map(values).collect();
    let d = max_diff(&after, &f32s(&py_out.join("after.f32")));
    rulka_test_support::margin::at_most("one more RAdam step vs PyTorch's", d.into(), 1e-5);
}

fn import(save: &Path, config: Option<&Path>, run: &Path) -> Output {
    let mut args = vec!["import", save.to_str().unwrap(), "--run-dir", run.to_str().unwrap()];
    if let Some(c) = config {
        args.extend(["--config", c.to_str().unwrap()]);
    }
    rulka(&args)
}

#[test]
fn variant_a_imports_as_pytorch_computes_trains_on_and_goes_back() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    // The run's own best runs beat one imported best and add a map.
    let best_back = serde_json::json!({"map5": 40000.0, "sim0": 12500.0});
    let spec = spec(dir.path(), "A", serde_json::json!({"best_back": best_back}));
    py(&python, &["make", spec.to_str().unwrap()]);
    let save = dir.path().join("py/save");
    let run = dir.path().join("runs/a");
    // What an import killed midway leaves (a pid above Linux's largest).
    let stale = dir.path().join("runs/.a.importing-4194305");
    std::fs::create_dir_all(stale.join("state")).unwrap();

    let o = import(&save, Some(&cfg), &run);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(!stale.exists(), "a dead import's staging folder is removed");
    assert_eq!(std::fs::read_dir(dir.path().join("runs")).unwrap().count(), 1, "only the run");
    let out = text(&o.stdout);
    assert!(out.contains("RAdam at step 6") && out.contains("123456 frames"), "{out}");
    assert!(out.contains("rulka train --resume"), "{out}");
    // Six steps: RAdam's rectified branch (ρ_t > 5 from step 6) on the next one.
    assert_equal_to_pytorch(&run, &dir.path().join("py"), 6, true);

    std::fs::create_dir_all(run.join("best_runs")).unwrap();
    for f in ["map5_40.00.inputs", "map5_47.10.inputs", "sim0_12.50.inputs"] {
        std::fs::write(run.join("best_runs").join(f), "# a kept best run\n").unwrap();
    }
    let back = dir.path().join("back");
    // An export killed after two of its four files leaves no save folder
    // (the original's loader would take half a one); the next export
    // writes it whole and clears the killed one's staging folder.
    let o = Command::new(env!("CARGO_BIN_EXE_rulka"))
        .args(["export", "--torch", run.to_str().unwrap(), "-o", back.to_str().unwrap()])
        .env("RULKA_TEST_KILL_AT", "exported:2")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(o.status.signal(), Some(9), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(!back.exists(), "an interrupted export left {}", back.display());
    let o = rulka(&["export", "--torch", run.to_str().unwrap(), "-o", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut files: Vec<String> = std::fs::read_dir(&back)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["accumulated_stats.joblib", "optimizer1.torch", "scaler.torch", "weights1.torch"]
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".back."))
        .collect();
    assert!(left.is_empty(), "staging folders left: {left:?}");
    py(&python, &["check", spec.to_str().unwrap(), back.to_str().unwrap()]);

    // The collectors' model from the imported run.
    let onnx = dir.path().join("m.onnx");
    let o = rulka(&[
        "export",
        "--config",
        run.join("config.yaml").to_str().unwrap(),
        "--checkpoint",
        run.join("weights.safetensors").to_str().unwrap(),
        "-o",
        onnx.to_str().unwrap(),
    ]);
    assert!(o.status.success() && onnx.is_file(), "{}", text(&o.stderr));

    // `train --resume` continues from the imported frame count and step.
    let o = rulka(&[
        "train",
        "--resume",
        run.to_str().unwrap(),
        "--max-frames",
        &(FRAMES + 700).to_string(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let cfg = Config::from_file(run.join("config.yaml")).unwrap();
    let l = Learner::resume(&cfg, &run.join("state"), Device::Cpu).unwrap();
    assert!(l.frames >= FRAMES + 700, "trained on from {FRAMES}: {} frames", l.frames);
    assert!(
        l.updates >= 1 && l.optimizer().steps() > 6,
        "updates {}, steps {}",
        l.updates,
        l.optimizer().steps()
    );
}

/// Variant B around a real `transformers` ViTModel, whose tensors rulka
/// orders as transformers registers them: imported, RAdam's next step on
/// PyTorch's gradients is PyTorch's (a misplaced moment among the ViT's
/// same-shaped query, key and value, or its layer norms and biases, would
/// differ); exported back, the optimizer lists the ViT's pooler (never
/// stepped, so without state) in its place, every state is identical and
/// PyTorch takes the same next step.
#[test]
fn variant_b_with_a_transformers_vit_carries_its_radam_state_both_ways() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), "B", serde_json::json!({}));
    py(&python, &["make", spec.to_str().unwrap()]);
    let vit = dir.path().join("py/vit");
    let cfg = config(
        dir.path(),
        &format!(
            ", vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32, n_layers: 0, n_heads: 2}}}}",
            vit.display()
        ),
    );
    let run = dir.path().join("runs/b");
    let o = import(&dir.path().join("py/save"), Some(&cfg), &run);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("RAdam at step 6"), "{out}");
    assert_equal_to_pytorch(&run, &dir.path().join("py"), 6, false);
    let back = dir.path().join("back");
    let o = rulka(&["export", "--torch", run.to_str().unwrap(), "-o", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stdout);
    assert!(said.contains("RAdam at step 6"), "{said}");
    // A RAdam run's moments are RAdam's: no note says otherwise.
    assert!(!said.contains("written as RAdam's"), "{said}");
    py(&python, &["check", spec.to_str().unwrap(), back.to_str().unwrap()]);
}

#[test]
fn variant_c_under_the_compile_prefix_imports_from_its_snapshot_and_goes_back() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), VARIANT_C);
    // Two steps: the unrectified branch (ρ_t ≤ 5) on the next one.
    let spec =
        spec(dir.path(), "C", serde_json::json!({"prefix": true, "steps": 2, "snapshot": cfg}));
    py(&python, &["make", spec.to_str().unwrap()]);
    let run = dir.path().join("runs/c");
    let o = import(&dir.path().join("py/save"), None, &run);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("_orig_mod."), "{}", text(&o.stdout));
    assert_equal_to_pytorch(&run, &dir.path().join("py"), 2, true);
    let back = dir.path().join("back");
    let o = rulka(&["export", "--torch", run.to_str().unwrap(), "-o", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    py(&python, &["check", spec.to_str().unwrap(), back.to_str().unwrap()]);
}

#[test]
fn a_behaviour_cloning_checkpoints_heads_are_averaged_into_the_policy_head() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let spec = spec(dir.path(), "A", serde_json::json!({"bc_heads": 3, "steps": 1}));
    py(&python, &["make", spec.to_str().unwrap()]);
    let run = dir.path().join("runs/bc");
    let o = import(&dir.path().join("py/save"), Some(&cfg), &run);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("averaged 3 behaviour-cloning heads"), "{out}");
    assert_equal_to_pytorch(&run, &dir.path().join("py"), 1, true);
}

#[test]
fn bad_files_are_refused_with_the_file_and_tensor_and_nothing_is_written() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let spec = spec(dir.path(), "A", serde_json::json!({}));
    let runs = dir.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let cases: [(&str, &[&str]); 8] = [
        ("global", &["trunk.0.weight", "posix.system"]),
        (
            "optimizer",
            &["optimizer1.torch", "state.12.exp_avg", "[40, 48]", "trunk.0.weight [32, 48]"],
        ),
        ("shape", &["trunk.0.weight", "[32, 51]", "[32, 48]"]),
        ("transposed", &["trunk.0.weight", "[48, 32]", "[32, 48]"]),
        ("dtype", &["value_head.weight", "F64", "float32"]),
        ("missing", &["value_head.bias", "[1]"]),
        ("step", &["optimizer1.torch", "step 2.5 is not a whole number"]),
        ("truncated", &["weights1.torch", "not a readable PyTorch file"]),
    ];
    // Every bad folder written by one Python process.
    let mut made = vec!["bad".to_string(), spec.to_str().unwrap().to_string()];
    for (kind, _) in cases {
        let save = dir.path().join(format!("save-{kind}"));
        std::fs::create_dir_all(&save).unwrap();
        made.push(if kind == "truncated" { "missing" } else { kind }.to_string());
        made.push(save.join("weights1.torch").to_str().unwrap().to_string());
    }
    py(&python, &made.iter().map(String::as_str).collect::<Vec<_>>());
    for (kind, words) in cases {
        let save = dir.path().join(format!("save-{kind}"));
        let w = save.join("weights1.torch");
        if kind == "truncated" {
            let bytes = std::fs::read(&w).unwrap();
            std::fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
        }
        let run = runs.join(kind);
        let o = import(&save, Some(&cfg), &run);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{kind}: {err}");
        let file = if ["optimizer", "step"].contains(&kind) {
            "optimizer1.torch"
        } else {
            "weights1.torch"
        };
        assert!(err.contains(file), "{kind}: {err}");
        for word in words {
            assert!(err.contains(word), "{kind}: {word:?} not in {err}");
        }
        assert_eq!(err.trim().lines().count(), 1, "{kind}: one line: {err}");
        if kind == "missing" {
            // One tensor missing is named alone, with no "and 0 more".
            assert!(!err.contains("more"), "{kind}: {err}");
        }
        assert!(!run.exists(), "{kind}: {} written", run.display());
    }
    // Nothing half-written beside the runs, and the pickle's call never ran.
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 0);
    assert!(
        !dir.path().join("save-global/weights1.torch.pwned").exists(),
        "the file's global was called"
    );
}
