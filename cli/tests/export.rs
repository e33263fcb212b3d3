//! `rulka init` / `rulka export` as a user runs them, including bad input.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().expect("rulka runs")
}

fn preset(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn small_config(dir: &Path, dense: u32) -> PathBuf {
    let p = dir.join(format!("small{dense}.yaml"));
    let yaml = format!("nn:\n  float_hidden_dim: 16\n  dense_hidden_dim: {dense}\n  cnn: {{use_spectral_norm: true}}\nenvironment:\n  rl_action_offsets_ms: [0, 10]\n");
    std::fs::write(&p, yaml).expect("write config");
    p
}

fn init(cfg: &Path, seed: u64, out: &Path) {
    let o = rulka(&["init", "--config", s(cfg), "--seed", &seed.to_string(), "-o", s(out)]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn init_then_export_with_check_writes_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(dir.path(), 32);
    let w = dir.path().join("w.safetensors");
    init(&cfg, 5, &w);
    let m = dir.path().join("m.onnx");
    let o = rulka(&["export", "--config", s(&cfg), "--checkpoint", s(&w), "-o", s(&m), "--check"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("max |Δlogits|") && out.contains("wrote"), "{out}");
    assert!(std::fs::metadata(&m).unwrap().len() > 1000);
}

/// A model that fails parity (its weights scaled until both runtimes'
/// outputs overflow: no finite difference can be claimed) makes
/// `export --check` exit 1, say so, and write nothing.
#[test]
fn export_check_fails_with_exit_1_and_writes_nothing_when_parity_fails() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(dir.path(), 32);
    let w = dir.path().join("w.safetensors");
    init(&cfg, 5, &w);
    let mut weights = rulka_checkpoint::Weights::read(&w).unwrap();
    for (name, t) in weights.tensors.iter_mut() {
        if name.ends_with("weight") {
            t.data.iter_mut().for_each(|x| *x *= 1e30);
        }
    }
    let meta = weights.meta.clone().unwrap();
    let big = dir.path().join("big.safetensors");
    weights.write(&big, &meta).unwrap();
    let m = dir.path().join("m.onnx");
    let o =
        rulka(&["export", "--config", s(&cfg), "--checkpoint", s(&big), "-o", s(&m), "--check"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("parity check failed"), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("max |Δlogits|"));
    assert!(!m.exists(), "--check wrote a model that failed it");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("m.onnx"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn init_is_seeded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(dir.path(), 32);
    let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
    init(&cfg, 1, &a);
    init(&cfg, 1, &b);
    init(&cfg, 2, &c);
    let (a, b, c) =
        (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), std::fs::read(&c).unwrap());
    assert!(a == b, "same seed gave different files");
    assert!(a != c, "different seeds gave the same file");
}

fn assert_bad_input(o: &Output, needle: &str, out: &Path) {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    let e = stderr(o);
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(e.contains(needle), "expected {needle:?} in {e}");
    assert!(!out.exists(), "partial output left at {}", out.display());
    let parent = out.parent().unwrap();
    if parent.is_dir() {
        let stray = std::fs::read_dir(parent)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".tmp."));
        assert_eq!(stray.count(), 0);
    }
}

#[test]
fn export_bad_inputs_exit_2_with_one_line_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(dir.path(), 32);
    let other = small_config(dir.path(), 48);
    let w = dir.path().join("w.safetensors");
    init(&cfg, 0, &w);
    let m = dir.path().join("m.onnx");

    let missing = dir.path().join("nope.safetensors");
    let o = rulka(&["export", "--config", s(&cfg), "--checkpoint", s(&missing), "-o", s(&m)]);
    assert_bad_input(&o, "nope.safetensors", &m);

    // checkpoint from another architecture
    let o = rulka(&["export", "--config", s(&other), "--checkpoint", s(&w), "-o", s(&m)]);
    assert_bad_input(&o, "another architecture", &m);

    // truncated checkpoint
    let bytes = std::fs::read(&w).unwrap();
    let cut = dir.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = rulka(&["export", "--config", s(&cfg), "--checkpoint", s(&cut), "-o", s(&m)]);
    assert_bad_input(&o, "not a valid safetensors file", &m);

    // unwritable output: the directory does not exist
    let nowhere = dir.path().join("no/such/dir/m.onnx");
    let o = rulka(&["export", "--config", s(&cfg), "--checkpoint", s(&w), "-o", s(&nowhere)]);
    assert_bad_input(&o, "does not exist", &nowhere);

    // bad config
    let o = rulka(&["export", "--config", s(&missing), "--checkpoint", s(&w), "-o", s(&m)]);
    assert_bad_input(&o, "cannot read", &m);
}

#[test]
fn wrong_shapes_are_listed_by_name() {
    // A plain safetensors file (no rulka metadata) whose trunk is the wrong width:
    // the architecture hash cannot catch it, the per-tensor check must.
    let dir = tempfile::tempdir().unwrap();
    let cfg48 = small_config(dir.path(), 48);
    let cfg32 = small_config(dir.path(), 32);
    let w = dir.path().join("w.safetensors");
    init(&cfg48, 0, &w);
    let mut weights = rulka_checkpoint::Weights::read(&w).unwrap();
    weights.meta = None;
    let plain = dir.path().join("plain.safetensors");
    let bytes = weights
        .to_safetensors(&rulka_checkpoint::Meta::new(&rulka_config::Config::default(), 0))
        .unwrap();
    // strip metadata by round-tripping through the raw format without it
    let reparsed = rulka_checkpoint::Weights::from_safetensors(&bytes, "x").unwrap();
    let raw: Vec<(String, Vec<u8>, Vec<usize>)> = reparsed
        .tensors
        .iter()
        .map(|(n, t)| {
            (n.clone(), t.data.iter().flat_map(|x| x.to_le_bytes()).collect(), t.shape.clone())
        })
        .collect();
    let views: Vec<(&str, safetensors::tensor::TensorView)> = raw
        .iter()
        .map(|(n, d, sh)| {
            (
                n.as_str(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, sh.clone(), d)
                    .unwrap(),
            )
        })
        .collect();
    std::fs::write(
        &plain,
        safetensors::serialize(views, None::<std::collections::HashMap<String, String>>).unwrap(),
    )
    .unwrap();
    let m = dir.path().join("m.onnx");
    let o = rulka(&["export", "--config", s(&cfg32), "--checkpoint", s(&plain), "-o", s(&m)]);
    assert_bad_input(&o, "trunk.0.weight has shape [48, 528] but the network needs [32, 528]", &m);
}

#[test]
fn partial_checkpoints_need_allow_partial() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(dir.path(), 32);
    let w = dir.path().join("w.safetensors");
    init(&cfg, 0, &w);
    let mut weights = rulka_checkpoint::Weights::read(&w).unwrap();
    weights.tensors.remove("value_head.bias");
    let meta = weights.meta.clone().unwrap();
    let part = dir.path().join("part.safetensors");
    weights.write(&part, &meta).unwrap();
    let m = dir.path().join("m.onnx");
    let o = rulka(&["export", "--config", s(&cfg), "--checkpoint", s(&part), "-o", s(&m)]);
    assert_bad_input(&o, "missing value_head.bias", &m);
    let o = rulka(&[
        "export",
        "--config",
        s(&cfg),
        "--checkpoint",
        s(&part),
        "-o",
        s(&m),
        "--allow-partial",
        "--check",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("filled from a fresh initialisation: value_head.bias"));
    assert!(m.exists());
}

#[test]
fn default_preset_exports() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w.safetensors");
    let cfg = PathBuf::from(preset("grpo.yaml"));
    init(&cfg, 0, &w);
    let m = dir.path().join("m.onnx");
    let o = rulka(&["export", "--config", s(&cfg), "--checkpoint", s(&w), "-o", s(&m), "--check"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `--weights int8|int4 --check`: the f32 parity check, then the quantized
/// policy against the f32 one on 10 000 observations from simulator rollouts;
/// a bound nothing meets fails naming the key, and nothing is written.
#[test]
fn quantized_export_is_checked_on_rollouts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = preset("sim-quick.yaml");
    let w = dir.path().join("w.safetensors");
    init(Path::new(&cfg), 2, &w);
    let f32_model = dir.path().join("f32.onnx");
    let o = rulka(&["export", "--config", &cfg, "--checkpoint", s(&w), "-o", s(&f32_model)]);
    assert!(o.status.success(), "{}", stderr(&o));
    for fmt in ["int8", "int4"] {
        let m = dir.path().join(format!("{fmt}.onnx"));
        let o = rulka(&[
            "export",
            "--config",
            &cfg,
            "--checkpoint",
            s(&w),
            "-o",
            s(&m),
            "--check",
            "--weights",
            fmt,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("quantized check: {fmt} vs f32"))
                && out.contains("10000 from rollouts")
                && out.contains("1024 random/extreme")
                && out.contains("mean KL"),
            "{out}"
        );
        let len = |p: &Path| std::fs::metadata(p).unwrap().len() as f64;
        // sim-quick's hidden Linears hold 45 % of its weights: stored in a quarter
        // (int8) or an eighth (int4), the file shrinks to about 0.66x / 0.61x.
        assert!(len(&m) < 0.75 * len(&f32_model), "{fmt}: {} vs {}", len(&m), len(&f32_model));
    }
    let strict = dir.path().join("strict.yaml");
    let yaml = std::fs::read_to_string(&cfg).unwrap();
    assert!(yaml.contains("\ninference:\n"), "the preset has an inference section");
    let yaml = yaml.replacen("\ninference:\n", "\ninference:\n  quant_max_mean_kl: 1.0e-30\n", 1);
    std::fs::write(&strict, yaml).unwrap();
    let m = dir.path().join("strict.onnx");
    let o = rulka(&[
        "export",
        "--config",
        s(&strict),
        "--checkpoint",
        s(&w),
        "-o",
        s(&m),
        "--check",
        "--weights",
        "int4",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("inference.quant_max_mean_kl"), "{}", stderr(&o));
    assert!(!m.exists(), "a failed check writes nothing");
    let o = rulka(&[
        "export",
        "--config",
        &cfg,
        "--checkpoint",
        s(&w),
        "-o",
        s(&m),
        "--weights",
        "int3",
    ]);
    assert!(!o.status.success() && stderr(&o).contains("int3"), "{}", stderr(&o));
}
