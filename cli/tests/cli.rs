//! The `rulka` binary as a user runs it: exit codes and messages.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().expect("rulka runs")
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &tempfile::TempDir, yaml: &str) -> String {
    let p = dir.path().join("c.yaml");
    std::fs::write(&p, yaml).expect("write temp config");
    p.to_string_lossy().into_owned()
}

#[test]
fn help_lists_the_planned_subcommands() {
    let o = rulka(&["--help"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for sub in ["train", "collect", "export", "bench", "config"] {
        assert!(out.contains(sub), "--help misses {sub}: {out}");
    }
}

#[test]
fn presets_check_ok() {
    for preset in [
        "configs/grpo.yaml",
        "configs/ppo.yaml",
        "configs/dpo.yaml",
        "configs/sim-quick.yaml",
        "configs/sim-quick-grpo.yaml",
    ] {
        let p = repo(preset);
        let o = rulka(&["config", "check", p.to_str().unwrap()]);
        assert!(o.status.success(), "{preset}: {}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains(": ok"));
    }
}

#[test]
fn bad_configs_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, key) in [
        ("grpo:\n  group_sise: 8\n", "grpo.group_sise"),
        ("ppo:\n  clip_coef: wide\n", "ppo.clip_coef"),
        ("ppo:\n  gamma: 1.7\n", "ppo.gamma"),
    ] {
        let f = write(&dir, yaml);
        let o = rulka(&["config", "check", &f]);
        assert_eq!(o.status.code(), Some(2), "{yaml}");
        let e = stderr(&o);
        assert!(e.contains(&format!("{f}: {key}")), "{yaml}: {e}");
        assert_eq!(e.lines().count(), 1, "one clear line: {e}");
    }
    let o = rulka(&["config", "check", "/nonexistent.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent.yaml"));
}

#[test]
fn show_prints_resolved_yaml_that_checks_again() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "grpo:\n  group_size: 16\n");
    let o = rulka(&["config", "show", &f]);
    assert!(o.status.success());
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(shown.contains("group_size: 16"));
    assert!(shown.contains("dense_hidden_dim: 1024"), "defaults are filled in");
    let f2 = write(&dir, &shown);
    assert!(rulka(&["config", "check", &f2]).status.success());
}

#[test]
fn bench_shm_runs_and_reports_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.json");
    let o = rulka(&["bench", "shm", "--seconds", "0.1", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("ring,   5 KB records") && out.contains("publish → visible"), "{out}");
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(3));
}

#[test]
fn bench_inference_reports_every_backend_with_ratios_json_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let (json, svg) = (dir.path().join("b.json"), dir.path().join("b.svg"));
    let cfg = repo("configs/grpo.yaml");
    let o = rulka(&[
        "bench",
        "inference",
        "--config",
        cfg.to_str().unwrap(),
        "--batch",
        "1,3",
        "--seconds",
        "0.05",
        "--no-hot-swap",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    for backend in [
        "ort-cpu-raw",
        "rulka-engine-cpu",
        "rulka-engine-cpu-int8",
        "rulka-engine-cpu-int4",
        "tch-cpu",
    ] {
        for batch in [1, 3] {
            let r = rows
                .iter()
                .find(|r| r["backend"] == backend && r["batch"] == batch)
                .unwrap_or_else(|| panic!("no {backend} {batch}"));
            assert!(
                r["p50_us"].as_f64().unwrap() > 0.0 && r["ratio_to_ort_raw"].as_f64().is_some()
            );
        }
    }
    let raw = rows.iter().find(|r| r["backend"] == "ort-cpu-raw").unwrap();
    assert_eq!(raw["ratio_to_ort_raw"].as_f64(), Some(1.0));
    // This build has no GPU backend: each is listed as not measured, with
    // the reason and the command that fixes it, and none has a row.
    let absent = doc["absent"].as_array().unwrap();
    let reason = |b: &str| {
        absent.iter().find(|a| a["backend"] == b).map(|a| a["reason"].as_str().unwrap().to_string())
    };
    for (backend, why) in [
        ("ort-cuda-raw", "without the `cuda` cargo feature"),
        ("rulka-engine-cuda", "without the `cuda` cargo feature"),
        ("rulka-engine-tensorrt", "without the `tensorrt` cargo feature"),
        ("rulka-engine-tensorrt-fp16", "without the `tensorrt` cargo feature"),
        ("tch-cuda", "libtorch sees no CUDA device"),
    ] {
        let r = reason(backend)
            .unwrap_or_else(|| panic!("{backend} is neither measured nor listed: {absent:?}"));
        assert!(r.contains(why) && r.contains("scripts/rulka --build="), "{backend}: {r}");
        assert!(!rows.iter().any(|row| row["backend"] == backend), "{backend} has a row");
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("not measured here:")
            && out.contains("rulka-engine-tensorrt-fp16 this rulka was built without"),
        "{out}"
    );
    // A config that would let a GPU engine fall back to the CPU measures no
    // GPU row all the same (the CPU measured under a GPU backend's name).
    let fb = dir.path().join("fb.yaml");
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str("\ninference:\n  fallback: cpu\n");
    std::fs::write(&fb, yaml).unwrap();
    let json2 = dir.path().join("fb.json");
    let o = rulka(&[
        "bench",
        "inference",
        "--config",
        fb.to_str().unwrap(),
        "--batch",
        "1",
        "--seconds",
        "0.02",
        "--no-hot-swap",
        "--json",
        json2.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc2: serde_json::Value = serde_json::from_slice(&std::fs::read(&json2).unwrap()).unwrap();
    for backend in
        ["ort-cuda-raw", "rulka-engine-cuda", "rulka-engine-tensorrt", "rulka-engine-tensorrt-fp16"]
    {
        let rows2 = doc2["rows"].as_array().unwrap();
        assert!(
            !rows2.iter().any(|r| r["backend"] == backend),
            "{backend} measured under fallback: cpu"
        );
        let absent2 = doc2["absent"].as_array().unwrap();
        assert!(absent2.iter().any(|a| a["backend"] == backend), "{backend} not listed as absent");
    }
    // The weight-streaming floor shrinks with the bytes per weight.
    let floor =
        |b: &str| rows.iter().find(|r| r["backend"] == b).unwrap()["floor_us"].as_f64().unwrap();
    let (f32_floor, i8_floor, i4_floor) =
        (floor("rulka-engine-cpu"), floor("rulka-engine-cpu-int8"), floor("rulka-engine-cpu-int4"));
    assert!(i4_floor < i8_floor && i8_floor < 0.5 * f32_floor, "{f32_floor} {i8_floor} {i4_floor}");
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.matches("<polyline").count() >= 3);
    let o = rulka(&["bench", "inference", "--batch", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_map_too_short_for_a_track_is_refused_once_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let npy = common::straight_line(dir.path(), "short.npy", 29);
    let cfg = write(
        &dir,
        &format!(
            "training: {{run_dir: {}}}\nenvironment: {{sim: {{track_from: {}}}}}\n",
            dir.path().join("run").display(),
            npy.display()
        ),
    );
    let t0 = std::time::Instant::now();
    let o = rulka(&["train", "--config", &cfg, "--max-minutes", "1"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(30), "{err}");
    let said = "the reference line is 14.0 m long; a track needs at least 20 m";
    assert_eq!(err.matches(said).count(), 1, "said once: {err}");
    assert_eq!(err.matches(&*npy.display().to_string()).count(), 1, "the file named once: {err}");
    assert!(!err.contains("restarting"), "no collector started: {err}");
}

/// Libraries log through `tracing`: by default only rulka's own lines, bare
/// (what users always saw); `-v` adds rulka's debug lines with their level
/// and target; `RUST_LOG`, when set, chooses instead of `-v`.
#[test]
fn logs_are_quiet_by_default_and_v_or_rust_log_say_more() {
    let cfg = repo("configs/ppo.yaml");
    let check = |args: &[&str], rust_log: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rulka"));
        c.args(args).args(["config", "check"]).arg(&cfg).env_remove("RUST_LOG");
        if let Some(l) = rust_log {
            c.env("RUST_LOG", l);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let debug_line = "DEBUG rulka_run: ";
    assert_eq!(check(&[], None), "", "nothing but the result on stdout by default");
    let v = check(&["-v"], None);
    assert!(v.contains(debug_line) && v.contains("ppo.yaml: Ppo, network "), "{v}");
    let env = check(&[], Some("rulka_run=debug"));
    assert!(env.contains(debug_line), "{env}");
    assert_eq!(check(&["-v"], Some("rulka_run=warn")), "", "RUST_LOG chooses over -v");
    let bad = check(&[], Some("rulka_run=loud"));
    assert!(bad.contains("RUST_LOG ignored"), "{bad}");
}

/// Without a GPU, `rulka bench cuda-parity` compares the CPU with itself:
/// six lines (PPO, GRPO, DPO × fp32, fp16 autocast), every difference exactly
/// 0, every step applied, each line `ok`. A device this build cannot give is
/// refused naming what is missing (exit 1), an unknown one naming it (exit 2).
#[test]
fn cuda_parity_without_a_gpu_compares_the_cpu_with_itself_and_bad_devices_are_named() {
    let cfg = repo("configs/sim-quick.yaml");
    let o = rulka(&["bench", "cuda-parity", "--config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("the CPU is compared with itself"), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("max ‖Δp‖/‖p‖")).collect();
    assert_eq!(lines.len(), 6, "{out}");
    for (line, (kind, steps)) in lines.iter().zip([
        ("ppo  fp32", 16),
        ("ppo  fp16 autocast", 16),
        ("grpo fp32", 4),
        ("grpo fp16 autocast", 4),
        ("dpo  fp32", 4),
        ("dpo  fp16 autocast", 4),
    ]) {
        assert!(line.trim_start().starts_with(kind), "{line}");
        assert!(line.contains(" 0.00e0 ("), "not exactly equal: {line}");
        assert!(line.contains(&format!("steps {steps} applied, 0 skipped")), "{line}");
        assert!(line.trim_end().ends_with(" ok"), "{line}");
    }
    // `cpu` (the default) and `auto` (no GPU here) train on the CPU.
    for device in ["cpu", "auto"] {
        let o = rulka(&[
            "bench",
            "learner",
            "--config",
            cfg.to_str().unwrap(),
            "--device",
            device,
            "--seconds",
            "0.1",
            "--grpo-k",
            "0",
        ]);
        assert!(o.status.success(), "{device}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("thread(s), on cpu") && out.contains("samples/s"), "{device}: {out}");
    }
    let o = rulka(&["bench", "learner", "--device", "gpu"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("\"gpu\"") && stderr(&o).contains("cpu, cuda or auto"),
        "{}",
        stderr(&o)
    );
    let o = rulka(&[
        "bench",
        "learner",
        "--config",
        cfg.to_str().unwrap(),
        "--device",
        "cuda",
        "--grpo-k",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("without the `cuda` feature"), "{}", stderr(&o));
}

/// Each float option's range, refused just past its edge with the option and
/// the value named (exit 2): an option given the wrong one of
/// `rulka_cli::numbers`' parsers (0 taken as a speed or a spacing, a
/// negative grace) or a range check that lost its bound fails here. Which
/// values are finite is the unit tests' (`every_float_option_refuses_a_non_finite_value`).
#[test]
fn each_float_option_refuses_the_value_just_past_its_range_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(&dir, "environment: {sim: {track: easy}}\n");
    let line = repo("tests/data/maps/map5_0.5m_cl.npy");
    let line = line.to_str().unwrap();
    let out = dir.path().join("o");
    let out = out.to_str().unwrap();
    let serve = ["sim", "serve", "--config", &cfg, "--port", "9"];
    let cases: [(Vec<&str>, &str); 9] = [
        ([&serve[..], &["--autopilot", "0"]].concat(), "'0' for '--autopilot"),
        (
            [&serve[..], &["--autopilot", "50.5"]].concat(),
            "'50.5' for '--autopilot <SPEED>': 50.5 m/s: a speed above 0 and at most 50",
        ),
        ([&serve[..], &["--refuse-for-s", "-0.5"]].concat(), "'-0.5' for '--refuse-for-s"),
        (
            vec!["sim", "plan", "--config", &cfg, "-o", out, "--converged", "1"],
            "'1' for '--converged",
        ),
        (vec!["sim", "bench", "--config", &cfg, "--seconds", "0"], "'0' for '--seconds"),
        (
            vec!["inputs", "play", "x.inputs", "--port", "9", "--grace-s", "-1"],
            "'-1' for '--grace-s",
        ),
        (vec!["map", "check", line, "--spacing", "0"], "'0' for '--spacing"),
        (vec!["map", "show", line, "-o", out, "--spacing", "-0.5"], "'-0.5' for '--spacing"),
        (vec!["map", "record", "--port", "9", "-o", out, "--spacing", "0"], "'0' for '--spacing"),
    ];
    for (args, want) in cases {
        // Ended after 30 s: a value taken by mistake starts the job (a
        // server that listens until killed), and the test fails naming it.
        let mut k = rulka_test_support::Kill::new(
            Command::new(env!("CARGO_BIN_EXE_rulka"))
                .args(&args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let (status, _) =
            rulka_test_support::wait_exit(k.child(), std::time::Duration::from_secs(30));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut k.child().stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want `{want}`: {err}");
    }
}
