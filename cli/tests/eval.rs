//! `rulka eval`, `rulka sim render --model` and `rulka sim replay` as a user
//! runs them (black box), on models exported from seeded initialisations.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().expect("rulka runs")
}

fn ok(args: &[&str]) -> String {
    let o = rulka(args);
    assert!(o.status.success(), "rulka {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn config(dir: &Path, name: &str, float_hidden: u32) -> PathBuf {
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "nn: {{image_width: 36, image_height: 36, float_hidden_dim: {float_hidden}, dense_hidden_dim: 32}}\n\
         environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 30000, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
         inference: {{intra_op_threads: {threads}}}\n"
    );
    let p = dir.join(name);
    std::fs::write(&p, yaml).unwrap();
    p
}

/// A model exported from a fresh network of `cfg` initialised with `seed`.
fn model(dir: &Path, cfg: &Path, seed: u64) -> PathBuf {
    let ck = dir.join(format!("init{seed}.safetensors"));
    let m = dir.join(format!("m{seed}.onnx"));
    ok(&[
        "init",
        "--config",
        cfg.to_str().unwrap(),
        "--seed",
        &seed.to_string(),
        "-o",
        ck.to_str().unwrap(),
    ]);
    ok(&[
        "export",
        "--config",
        cfg.to_str().unwrap(),
        "--checkpoint",
        ck.to_str().unwrap(),
        "-o",
        m.to_str().unwrap(),
    ]);
    m
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn eval_json(dir: &Path, name: &str, args: &[&str]) -> serde_json::Value {
    let out = dir.join(name);
    let mut a = vec!["eval"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--json", out.to_str().unwrap()]);
    ok(&a);
    json(&out)
}

#[test]
fn eval_is_the_same_whatever_the_workers_and_compares_on_identical_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, "c.yaml", 16);
    let (m0, m1) = (model(d, &cfg, 0), model(d, &cfg, 1));
    let (c, a0, a1) = (cfg.to_str().unwrap(), m0.to_str().unwrap(), m1.to_str().unwrap());
    let base = ["--config", c, "--seeds", "100..106"];
    let one = eval_json(d, "one.json", &[&["--model", a0, "--workers", "1"][..], &base].concat());
    let three =
        eval_json(d, "three.json", &[&["--model", a0, "--workers", "3"][..], &base].concat());
    let eps = &one["models"][0]["episodes"];
    assert_eq!(eps.as_array().unwrap().len(), 6);
    // Split over 3 processes: every episode once, in job order, identical.
    assert_eq!(eps, &three["models"][0]["episodes"]);
    let seeds: Vec<u64> =
        eps.as_array().unwrap().iter().map(|e| e["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds, (100..106).collect::<Vec<_>>());
    // The autopilot finishes every easy track; its ratio to itself is 1.
    let pilot = &one["autopilot"]["summary"];
    assert_eq!(pilot["finish_rate"].as_f64(), Some(1.0), "{pilot}");
    assert_eq!(pilot["time_ratio_median"].as_f64(), Some(1.0));
    assert_eq!(one["autopilot"]["episodes"].as_array().unwrap().len(), 6);
    // --compare: the second model's episodes are those it drives alone.
    let alone = eval_json(d, "alone.json", &[&["--model", a1][..], &base].concat());
    let both = eval_json(d, "both.json", &[&["--model", a0, "--compare", a1][..], &base].concat());
    assert_eq!(both["models"][0]["episodes"], *eps);
    assert_eq!(both["models"][1]["episodes"], alone["models"][0]["episodes"]);
    assert_ne!(
        both["models"][0]["episodes"], both["models"][1]["episodes"],
        "two initialisations drove alike"
    );
    // The summary agrees with the episodes it summarizes.
    let s = &one["models"][0]["summary"];
    let finished = eps.as_array().unwrap().iter().filter(|e| e["finished"] == true).count();
    rulka_test_support::margin::close(
        "s['finish_rate'].as_f64().unwrap() vs finished as f64 / 6.0",
        s["finish_rate"].as_f64().unwrap(),
        finished as f64 / 6.0,
        1e-12,
    );
}

#[test]
fn sampled_episodes_differ_and_repeat_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, "c.yaml", 16);
    let m = model(d, &cfg, 0);
    let args = [
        "--model",
        m.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--seeds",
        "100,101",
        "--episodes",
        "2",
        "--sample",
    ];
    let a = eval_json(d, "a.json", &args);
    let b = eval_json(d, "b.json", &args);
    let eps = a["models"][0]["episodes"].as_array().unwrap().clone();
    assert_eq!(eps.len(), 4);
    assert_eq!(
        a["models"][0]["episodes"], b["models"][0]["episodes"],
        "a sampled evaluation did not repeat"
    );
    // Episodes 0 and 1 of a track draw different streams: a random policy's
    // paths part (steps or progress differ).
    let differ = |i: usize| {
        eps[i]["steps"] != eps[i + 1]["steps"] || eps[i]["progress"] != eps[i + 1]["progress"]
    };
    assert!(differ(0) || differ(2), "{eps:?}");
}

#[test]
fn a_model_of_another_network_or_bad_seeds_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, "c.yaml", 16);
    let other = config(d, "other.yaml", 8);
    let m = model(d, &cfg, 0);
    let o = rulka(&[
        "eval",
        "--model",
        m.to_str().unwrap(),
        "--config",
        other.to_str().unwrap(),
        "--seeds",
        "100..102",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rulka.network_hash") && err.contains(m.to_str().unwrap()), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for (flag, value, named) in [
        ("--seeds", "7..7", "7..7"),
        ("--seeds", "x", "\"x\""),
        ("--episodes", "0", "--episodes 0"),
    ] {
        let o = rulka(&[
            "eval",
            "--model",
            m.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            flag,
            value,
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(named),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn render_draws_both_lines_and_replay_writes_a_gif_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, "c.yaml", 16);
    let m = model(d, &cfg, 0);
    let (c, ms) = (cfg.to_str().unwrap(), m.to_str().unwrap());
    let svg = d.join("line.svg");
    let out = ok(&[
        "sim",
        "render",
        "--model",
        ms,
        "--config",
        c,
        "--seed",
        "3",
        "--out",
        svg.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("m0.onnx: ") && text.contains("autopilot: "), "{out}");
    // Speed-coloured segments for both drivers.
    assert!(text.matches("<polyline").count() > 50, "{out}");
    let o = rulka(&[
        "sim",
        "render",
        "--model",
        ms,
        "--config",
        c,
        "--out",
        d.join("x.png").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));

    let gif_path = d.join("run.gif");
    let out = ok(&[
        "sim",
        "replay",
        "--model",
        ms,
        "--config",
        c,
        "--seed",
        "3",
        "--every",
        "3",
        "--out",
        gif_path.to_str().unwrap(),
    ]);
    // "... in N decisions; wrote ... (F frames, W×H, ...)"
    let steps: usize =
        out.split(" in ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let mut opts = gif::DecodeOptions::new();
    opts.set_color_output(gif::ColorOutput::Indexed);
    let mut dec = opts.read_info(std::fs::File::open(&gif_path).unwrap()).unwrap();
    let (w, h) = (dec.width(), dec.height());
    let mut frames = Vec::new();
    while let Some(f) = dec.read_next_frame().unwrap() {
        frames.push((f.left, f.top, f.width, f.height));
    }
    // Observations: the start and one after each decision (steps + 1);
    // a frame every 3rd, plus the last.
    let n_obs = steps + 1;
    let expected = n_obs.div_ceil(3) + usize::from((n_obs - 1) % 3 != 0);
    assert_eq!(frames.len(), expected, "{out}");
    assert_eq!(frames[0], (0, 0, w, h), "the first frame is whole");
    assert!(frames.iter().all(|&(l, t, fw, fh)| l + fw <= w && t + fh <= h));
}

/// `--limits`: each driver's times over the tracks' limits, from a table
/// written here by hand; a table without a track evaluated, or of other
/// tracks, is named.
#[test]
fn a_limit_table_reports_each_drivers_time_over_its_tracks_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, "c.yaml", 16);
    let m = model(d, &cfg, 0);
    let header = "track,decision_ms,seed,limit_ms,autopilot_ms,decisions,engine_steps,cpu_s,converged,last_doubling_gain,rungs,drive";
    let table = |name: &str, rows: &[(&str, u64, u64)]| {
        let p = d.join(name);
        let mut text = format!("{header}\n");
        for (track, seed, ms) in rows {
            text.push_str(&format!(
                "{track},50,{seed},{ms},,1,1,0.1,true,,4:{ms},sim{seed}.inputs\n"
            ));
        }
        std::fs::write(&p, text).unwrap();
        p
    };
    let limits = table("l.csv", &[("easy", 7, 20_000), ("easy", 8, 25_000), ("easy", 9, 1)]);
    let (a_m, a_c, a_l) = (m.to_str().unwrap(), cfg.to_str().unwrap(), limits.to_str().unwrap());
    let j = eval_json(
        d,
        "e.json",
        &["--model", a_m, "--config", a_c, "--seeds", "7,8", "--limits", a_l],
    );
    let pilot = j["autopilot"]["episodes"].as_array().unwrap();
    let limit_of = |seed: u64| if seed == 7 { 20_000.0 } else { 25_000.0 };
    let mut ratios: Vec<f64> = pilot
        .iter()
        .filter_map(|e| Some(e["race_time_s"].as_f64()? * 1000.0 / limit_of(e["seed"].as_u64()?)))
        .collect();
    assert_eq!(ratios.len(), 2, "the autopilot finishes easy tracks 7 and 8: {pilot:?}");
    ratios.sort_by(f64::total_cmp);
    let row = j["limits"].as_array().unwrap().iter().find(|r| r["driver"] == "autopilot").unwrap();
    assert_eq!(row["episodes"], 2);
    // Two ratios: the median is their mean, p10 and p90 a tenth of the way in
    // from each end (NumPy's linear interpolation); a few roundings of f64.
    let r = &row["time_ratio"];
    let close = |what: &str, got: &serde_json::Value, want: f64| {
        rulka_test_support::margin::close(what, got.as_f64().unwrap(), want, 1e-12)
    };
    close("median", &r["median"], (ratios[0] + ratios[1]) / 2.0);
    close("p10", &r["p10"], ratios[0] + 0.1 * (ratios[1] - ratios[0]));
    close("p90", &r["p90"], ratios[0] + 0.9 * (ratios[1] - ratios[0]));
    // The model's row is there too, over the episodes it finished (a fresh
    // network finishes few or none of them: not every episode driven).
    let mine = j["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["driver"] == m.display().to_string())
        .unwrap();
    let finished = j["models"][0]["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["finished"] == true)
        .count();
    assert_eq!(mine["episodes"], finished, "{mine}");
    assert!(finished < 2, "the test needs an episode the model does not finish");

    for (name, rows, want) in [
        ("missing.csv", vec![("easy", 7, 20_000)], "no limit for track 8"),
        (
            "hard.csv",
            vec![("hard", 7, 20_000), ("hard", 8, 20_000)],
            "planned on hard at 50 ms a decision, not the config's easy",
        ),
    ] {
        let p = table(name, &rows);
        let o = rulka(&[
            "eval",
            "--model",
            a_m,
            "--config",
            a_c,
            "--seeds",
            "7,8",
            "--limits",
            p.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(want),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// A policy is judged on what it sees: an ONNX model built here whose
/// greedy action is "forward" (0) on a black frame and "forward + right"
/// (2) on any other (its logits are the frame's mean brightness times
/// 10 on action 2, plus 0.5 on action 0), driven by `rulka eval` (and so
/// by every reader of `rulka_inference::run_episode_observed`: the
/// held-out evaluation, `rulka sim gap`), drives exactly as "forward +
/// right" held all race long, driven here with no policy at all. A policy
/// given blank frames would drive "forward" instead.
#[test]
fn a_policy_is_driven_on_the_frames_it_sees() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "c.yaml", 16);
    let model = dir.path().join("frame.onnx");
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let script = r#"
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T
w = np.zeros((1, 12), np.float32); w[0, 2] = 10.0
b = np.zeros((12,), np.float32); b[0] = 0.5
g = h.make_graph(
    [h.make_node("Cast", ["image"], ["f"], to=T.FLOAT),
     h.make_node("ReduceMean", ["f"], ["m"], axes=[1, 2, 3], keepdims=0),
     h.make_node("Unsqueeze", ["m", "one"], ["m1"]),
     h.make_node("MatMul", ["m1", "w"], ["mw"]),
     h.make_node("Add", ["mw", "b"], ["logits"]),
     h.make_node("ReduceSum", ["floats", "one"], ["s"], keepdims=1),
     h.make_node("Mul", ["s", "zero"], ["value"])],
    "frame_only",
    [h.make_tensor_value_info("image", T.UINT8, ["batch", 1, int(sys.argv[2]), int(sys.argv[3])]),
     h.make_tensor_value_info("floats", T.FLOAT, ["batch", int(sys.argv[4])])],
    [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 12]),
     h.make_tensor_value_info("value", T.FLOAT, ["batch", 1])],
    [h.make_tensor("w", T.FLOAT, [1, 12], w.flatten()), h.make_tensor("b", T.FLOAT, [12], b),
     h.make_tensor("one", T.INT64, [1], [1]), h.make_tensor("zero", T.FLOAT, [], [0.0])])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
"#;
    let c = rulka_config::Config::from_file(&cfg).unwrap();
    let (_, n_floats) = rulka_env::Environment::obs_sizes(&rulka_env::SimEnv::new(&c));
    let dims = [c.nn.image_height, c.nn.image_width, n_floats as u32].map(|d| d.to_string());
    let o = Command::new(&py)
        .args(["-c", script, model.to_str().unwrap(), &dims[0], &dims[1], &dims[2]])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json = dir.path().join("e.json");
    ok(&[
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--seeds",
        "7",
        "--json",
        json.to_str().unwrap(),
    ]);
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let got = &e["models"][0]["episodes"][0];
    let held = |action: u8| {
        let mut env = rulka_env::SimEnv::new(&c);
        let job = rulka_inference::Job { seed: 7, episode: 0 };
        rulka_inference::drive_episode(&mut env, job, false, |_, _| Ok(vec![action]), |_, _| {})
            .unwrap()
    };
    let (right, forward) = (held(2), held(0));
    assert_ne!(
        (right.steps, right.progress),
        (forward.steps, forward.progress),
        "the test needs two drives"
    );
    assert_eq!(got["steps"], right.steps, "{got} against forward + right held: {right:?}");
    // rulka eval writes progress to 6 decimals.
    assert!(
        (got["progress"].as_f64().unwrap() - right.progress).abs() <= 5e-7,
        "{got} against {right:?}"
    );
}
