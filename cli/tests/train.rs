//! `rulka train` as a user runs it (black box): a short run ends with a
//! checkpoint, an ONNX model `rulka export --check` reproduces, TensorBoard
//! files Python's reader parses with the original's tags; a SIGKILLed
//! collector is restarted without losing or duplicating trajectories; a
//! SIGKILLed trainer resumes from its checkpoint and cleans its stale shared
//! memory; bad input is one line and exit 2.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rulka_shm::TrajectoryId;
use rulka_test_support::{children_of, signal, sim_game, wait_exit, Kill};

/// Trainer runs use every core: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rulka"))
}

fn rulka(args: &[&str]) -> Output {
    bin().args(args).output().expect("rulka runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A small, fast run: easy tracks, a small network, PPO updates every 256 steps.
fn config(dir: &Path, collectors: u32) -> PathBuf {
    config_nn(dir, collectors, "")
}

/// [`config`] with more `nn` settings (e.g. a Variant B or C network).
fn config_nn(dir: &Path, collectors: u32, nn_extra: &str) -> PathBuf {
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "training: {{algorithm: ppo, run_dir: {run}, optimizer: adam, lr_schedule: [[0, 5.0e-4]], checkpoint_every_s: 1}}\n\
         nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32{nn_extra}}}\n\
         ppo: {{rollout_steps_per_update: 256, update_epochs: 2, num_minibatches: 2}}\n\
         environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
         collectors: {{count: {collectors}, chunk_steps: 32, ring_chunks: 16, eval_every_n_rollouts: 4, heartbeat_timeout_ms: 10000}}\n\
         inference: {{intra_op_threads: {threads}}}\n",
        run = dir.join("run").display()
    );
    let p = dir.join("c.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

fn summary(run: &Path) -> serde_json::Value {
    rulka_trainer::RunDir::new(run).summary().unwrap()
}

#[test]
fn a_short_run_leaves_checkpoint_model_and_tensorboard() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1);
    // Held-out evaluation on 4 tracks every 2 updates (and at the end);
    // returns normalised, PopArt, PPG's auxiliary phase every 2 updates and
    // self-imitation, so that
    // their scalars reach TensorBoard through `rulka train`.
    let yaml = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(
            "checkpoint_every_s: 1}",
            "checkpoint_every_s: 1, eval_tracks: \"100..104\", eval_every_n_updates: 2}",
        )
        .replace(
            "ppo: {rollout_steps_per_update: 256,",
            "ppo: {normalize_returns: true, popart_beta: 0.1, aux_every_updates: 2, aux_epochs: 1, sil_coef: 0.1, rollout_steps_per_update: 256,",
        );
    std::fs::write(&cfg, yaml).unwrap();
    let run = dir.path().join("run");
    let o = rulka(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--max-frames",
        "3000",
        "--save-trajectories",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("max frames reached"), "{out}");
    // `learner_threads: auto` (unset): the cores the one collector leaves, at least 1.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let want = format!(
        "learner on cpu, {} thread(s) ({cores} cores, 1 local collector(s)",
        cores.saturating_sub(1).max(1)
    );
    assert!(text(&o.stderr).contains(&want), "no {want:?} in {}", text(&o.stderr));
    let s = summary(&run);
    assert!(s["frames"].as_u64().unwrap() >= 3000);
    assert!(s["updates"].as_u64().unwrap() >= 5, "{s}");
    let c = &s["counters"];
    assert_eq!(
        (c["duplicate_trajectories"].as_u64(), c["missing_trajectories"].as_u64()),
        (Some(0), Some(0))
    );
    // The run's model.onnx is what `rulka export --check` makes of its checkpoint.
    let x = dir.path().join("x.onnx");
    let o = rulka(&[
        "export",
        "--config",
        run.join("config.yaml").to_str().unwrap(),
        "--checkpoint",
        run.join("weights.safetensors").to_str().unwrap(),
        "-o",
        x.to_str().unwrap(),
        "--check",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (a, b) = (std::fs::read(&x).unwrap(), std::fs::read(run.join("model.onnx")).unwrap());
    assert!(
        a == b,
        "model.onnx ({} bytes) differs from the re-export ({} bytes)",
        b.len(),
        a.len()
    );
    // The training-only levers never reach the exported model: the same
    // checkpoint exported under a config with every one of them on.
    let levers = dir.path().join("levers.yaml");
    let mut on = rulka_config::Config::from_file(run.join("config.yaml")).unwrap();
    on.training.augment.shift_px = 3;
    (on.ppo.target_kl, on.ppo.normalize_returns, on.ppo.drac_coef) = (Some(0.01), true, 0.1);
    on.ppo.aux_every_updates = 4;
    on.ppo.popart_beta = Some(0.1);
    on.ppo.sil_coef = 0.1;
    std::fs::write(&levers, on.to_yaml()).unwrap();
    let y = dir.path().join("y.onnx");
    let o = rulka(&[
        "export",
        "--config",
        levers.to_str().unwrap(),
        "--checkpoint",
        run.join("weights.safetensors").to_str().unwrap(),
        "-o",
        y.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(std::fs::read(&y).unwrap() == b, "the levers changed the exported model");
    // The learner's time: wall seconds in updates, and CPU seconds of the
    // process meanwhile, at most the updates' wall time on every core (plus
    // a 10 ms tick of rounding at each end of each update).
    let (upd, cpu) = (c["learner_update_s"].as_f64().unwrap(), c["learner_cpu_s"].as_f64());
    let updates_now = s["updates"].as_f64().unwrap();
    assert!(upd > 0.0, "{c}");
    let cpu = cpu.expect("/proc says the CPU time on Linux");
    assert!(
        (0.0..=upd * cores as f64 + 0.02 * updates_now).contains(&cpu),
        "learner_cpu_s {cpu} vs {upd} s of updates on {cores} cores"
    );
    assert!(run.join("state/LATEST").is_file());
    // Held-out rows: evaluations every 2 updates plus the final weights',
    // each on the 4 tracks; the last is what `rulka eval` (worker processes)
    // makes of the final model.onnx on the same tracks.
    let rows = rulka_trainer::read_heldout(&run).unwrap();
    let updates = s["updates"].as_u64().unwrap();
    assert!(rows.len() >= 2, "{rows:?}");
    assert!(rows.iter().all(|r| r.episodes == 4), "{rows:?}");
    let last = rows.last().unwrap();
    assert_eq!(last.updates, updates, "the last evaluation is of the final weights: {rows:?}");
    // Each weights evaluated once: the final weights again only when no
    // periodic evaluation had them already.
    assert!(rows.windows(2).all(|w| w[0].updates < w[1].updates), "an evaluation twice: {rows:?}");
    let h = &s["heldout"];
    assert_eq!(h["evaluations"].as_u64(), Some(rows.len() as u64), "{h}");
    // summary.json's figures of the timeline are those of the table read
    // back: the lowest finite ratio, the first evaluation finishing all.
    let best = rows.iter().filter_map(|r| r.time_ratio_median).filter(|r| r.is_finite());
    assert_eq!(h["best_time_ratio_median"].as_f64(), best.min_by(f64::total_cmp), "{h}");
    let all = rows.iter().find(|r| r.finish_rate >= 1.0).map(|r| r.frames);
    assert_eq!(h["first_all_finished_frames"].as_u64(), all, "{h}");
    let ev = dir.path().join("ev.json");
    let o = rulka(&[
        "eval",
        "--model",
        run.join("model.onnx").to_str().unwrap(),
        "--config",
        run.join("config.yaml").to_str().unwrap(),
        "--json",
        ev.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ev: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ev).unwrap()).unwrap();
    assert_eq!(
        ev["seeds"],
        serde_json::json!([100, 101, 102, 103]),
        "eval defaults to the config's eval_tracks"
    );
    let es = &ev["models"][0]["summary"];
    assert_eq!(es["finish_rate"].as_f64(), h["final"]["finish_rate"].as_f64(), "{es} vs {h}");
    // heldout.csv keeps 4 decimals.
    let mean = es["mean_progress"].as_f64().unwrap();
    rulka_test_support::margin::close("mean vs last.mean_progress", mean, last.mean_progress, 5e-5);
    // Shared memory is gone, and so is the live-run marker.
    assert!(!run.join("run.json").exists());
    // `rulka plot` draws the curve.
    let o = rulka(&["plot", run.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(std::fs::read_to_string(run.join("learning_curve.svg")).unwrap().contains("<polyline"));
    let Some(py) = rulka_test_support::venv_python("TensorBoard's reader") else { return };
    let script = "import sys\nfrom tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n\
                  ea = EventAccumulator(sys.argv[1]); ea.Reload()\nprint('\\n'.join(sorted(ea.Tags()['scalars'])))\n";
    let o = Command::new(py)
        .args(["-c", script, run.join("tensorboard").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let tags = text(&o.stdout);
    for t in [
        "Training/ppo_loss",
        "Training/ppo_approx_kl",
        "Training/ppo_clipfrac",
        "Training/ppo_vf_clipfrac",
        "Training/learning_rate",
        "PPO/gamma",
        "PPO/gae_lambda",
        "PPO/ent_coef",
        "PPO/vf_coef",
        "PPO/rollout_size",
        "PPO/reward_scale",
        "PPO/aux_value_loss",
        "PPO/aux_kl",
        "PPO/popart_mean",
        "PPO/popart_std",
        "PPO/sil_steps",
        "PPO/sil_advantage",
        "PPO/sil_positive",
        "PPO/sil_best_return",
        "explo_race_finished_sim0",
        "Race/explo_progress",
        "Eval/heldout_finish_rate",
        "Eval/heldout_progress",
    ] {
        assert!(tags.lines().any(|l| l == t), "missing tag {t} in {tags}");
    }
}

/// Variants B (a ViT folder made by `rulka hf-vit`) and C train through
/// `rulka train`: collectors run the exported models, the run's `model.onnx`
/// is what `rulka export --check` makes of its checkpoint.
#[test]
fn variants_b_and_c_train_and_export() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let vit = dir.path().join("vit");
    let o = rulka(&[
        "hf-vit",
        "--out",
        vit.to_str().unwrap(),
        "--hidden",
        "32",
        "--layers",
        "1",
        "--heads",
        "4",
        "--image",
        "16",
        "--patch",
        "8",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for (label, nn) in [
        ("B", format!(", vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: {}, d_model: 32, n_layers: 0}}}}", vit.display())),
        ("C", ", fusion_mode: post_concat, vis: {transformer: {d_model: 32, n_layers: 1, n_heads: 4, patch_size: 6}}, encoder: {post_concat_layout: token_sequence, transformer: {d_model: 32, n_layers: 1, n_heads: 4}}".to_string()),
    ] {
        let case = dir.path().join(label);
        std::fs::create_dir_all(&case).unwrap();
        let cfg = config_nn(&case, 1, &nn);
        let run = case.join("run");
        let o = rulka(&["train", "--config", cfg.to_str().unwrap(), "--max-frames", "1500"]);
        assert!(o.status.success(), "{label}: {}", text(&o.stderr));
        let s = summary(&run);
        assert!(s["updates"].as_u64().unwrap() >= 3, "{label}: {s}");
        let c = &s["counters"];
        assert_eq!((c["duplicate_trajectories"].as_u64(), c["missing_trajectories"].as_u64()), (Some(0), Some(0)), "{label}");
        let x = case.join("x.onnx");
        let o = rulka(&["export", "--config", run.join("config.yaml").to_str().unwrap(), "--checkpoint", run.join("weights.safetensors").to_str().unwrap(), "-o", x.to_str().unwrap(), "--check"]);
        assert!(o.status.success(), "{label}: {}", text(&o.stderr));
        assert!(std::fs::read(&x).unwrap() == std::fs::read(run.join("model.onnx")).unwrap(), "{label}: model.onnx differs from the re-export");
    }
}

#[test]
fn a_killed_collector_is_restarted_and_nothing_is_lost() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2);
    let run = dir.path().join("run");
    // Both collectors deliver, then one is killed.
    let (s, rows, _, err) = run_with_a_killed_collector(&cfg, &run, "4");
    assert!(err.contains("restarting"), "{err}");
    let c = s["counters"].clone();
    assert!(c["collector_restarts"].as_u64().unwrap() >= 1, "{c}");
    assert_eq!(c["duplicate_trajectories"].as_u64(), Some(0), "{c}");
    assert_eq!(c["missing_trajectories"].as_u64(), Some(0), "{c}");
    assert_eq!(c["orphan_chunks"].as_u64(), Some(0), "a trajectory's head chunk was lost: {c}");
    // The learner kept receiving: no gap of more than 5 s between trajectories
    // after the first one (the other collector kept writing during the restart).
    let minutes: Vec<f64> = rows.iter().map(|r| r.minutes).collect();
    let gap = minutes.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max) * 60.0;
    assert!(gap < 5.0, "learner starved for {gap:.1} s");
    // Trajectories from both incarnations of slot 0 arrived.
    let ids: Vec<TrajectoryId> =
        rows.iter().map(|r| TrajectoryId::unpack(r.collector, r.trajectory)).collect();
    assert!(ids.iter().any(|t| t.collector == 0 && t.incarnation == 0));
    assert!(
        ids.iter().any(|t| t.collector == 0 && t.incarnation >= 1),
        "restarted collector delivered"
    );
}

/// `rulka train` with `config` (at most `minutes`) on 2 collectors, collector
/// 0 SIGKILLed once 20 trajectories are in, Ctrl-C once its restart has
/// delivered: the summary, the rows, the updates the learner had made at the
/// kill, and what the trainer said.
fn run_with_a_killed_collector(
    config: &Path,
    run: &Path,
    minutes: &str,
) -> (serde_json::Value, Vec<rulka_trainer::TrajectoryRow>, u64, String) {
    let mut trainer = Kill::spawn(
        bin()
            .args(["train", "--config", config.to_str().unwrap(), "--max-minutes", minutes])
            .args(["--collectors", "2", "--run-dir", run.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let rows = || rulka_trainer::read_trajectories_so_far(run).unwrap();
    let both = |rows: &[rulka_trainer::TrajectoryRow]| {
        rows.len() >= 20 && [0, 1].iter().all(|&c| rows.iter().any(|r| r.collector == c))
    };
    let t0 = Instant::now();
    while !both(&rows()) || children_of(trainer.id()).len() < 2 {
        assert!(t0.elapsed() < Duration::from_secs(60), "both collectors never delivered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let at_kill = rows().last().map_or(0, |r| r.updates);
    let kids = children_of(trainer.id());
    assert_eq!(kids.len(), 2, "two collector processes: {kids:?}");
    signal(kids[0], "-9");
    // Stopped by Ctrl-C once the restarted collector has delivered twice and
    // the learner has made two updates since the kill, not by a clock: on a
    // loaded 2-core machine a restart can take most of a fixed half-minute.
    // `max_minutes` only caps a run that never gets there.
    let restarted = |rows: &[rulka_trainer::TrajectoryRow]| {
        let again = rows
            .iter()
            .filter(|r| {
                let t = TrajectoryId::unpack(r.collector, r.trajectory);
                t.collector == 0 && t.incarnation >= 1
            })
            .count();
        again >= 2 && rows.last().is_some_and(|r| r.updates >= at_kill + 2)
    };
    let t1 = Instant::now();
    while !restarted(&rows()) && t1.elapsed() < Duration::from_secs(150) {
        if trainer.child().try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    signal(trainer.id(), "-INT");
    let (status, _) = wait_exit(trainer.child(), Duration::from_secs(120));
    let mut err = String::new();
    std::io::Read::read_to_string(trainer.child().stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    (summary(run), rows(), at_kill, err)
}

/// What a run with a killed collector must show whatever the algorithm:
/// the collector restarted and delivered again, nothing lost or twice, and
/// the learner updating after the kill.
fn assert_nothing_lost_and_learning_goes_on(
    s: &serde_json::Value,
    rows: &[rulka_trainer::TrajectoryRow],
    at_kill: u64,
) {
    let c = &s["counters"];
    assert!(c["collector_restarts"].as_u64().unwrap() >= 1, "{c}");
    assert_eq!(
        (
            c["duplicate_trajectories"].as_u64(),
            c["missing_trajectories"].as_u64(),
            c["orphan_chunks"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{c}"
    );
    let ids: Vec<TrajectoryId> =
        rows.iter().map(|r| TrajectoryId::unpack(r.collector, r.trajectory)).collect();
    let unique: std::collections::HashSet<(u32, u64)> =
        rows.iter().map(|r| (r.collector, r.trajectory)).collect();
    assert_eq!(unique.len(), ids.len(), "a trajectory recorded twice");
    assert!(
        ids.iter().any(|t| t.collector == 0 && t.incarnation >= 1),
        "the restarted collector delivered"
    );
    let last = s["updates"].as_u64().unwrap();
    assert!(
        last >= at_kill + 2,
        "updates {at_kill} at the kill, {last} at the end: learning stopped"
    );
}

/// GRPO as `configs/sim-quick-grpo.yaml` ships it, a collector killed mid-run.
#[test]
fn grpo_survives_a_killed_collector_with_nothing_lost() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let preset = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sim-quick-grpo.yaml");
    let run = dir.path().join("run");
    let (s, rows, at_kill, _) = run_with_a_killed_collector(&preset, &run, "4");
    assert_eq!(s["algorithm"], "grpo", "{s}");
    assert_nothing_lost_and_learning_goes_on(&s, &rows, at_kill);
}

/// Online DPO (pairs of one track's best and worst runs), a collector killed
/// mid-run; TensorBoard's `DPO/beta` is the β each update used: the
/// schedule's value at that update's frames (0.5 → 0.1 over 10⁶ frames).
#[test]
fn dpo_survives_a_killed_collector_and_logs_the_beta_it_used() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2);
    let yaml = std::fs::read_to_string(&cfg).unwrap().replace("algorithm: ppo", "algorithm: dpo")
        + "dpo: {pair_buffer_max: 2, update_epochs: 1, beta_schedule: [[0, 0.5], [1000000, 0.1]]}\n";
    std::fs::write(&cfg, yaml).unwrap();
    let run = dir.path().join("run");
    let (s, rows, at_kill, _) = run_with_a_killed_collector(&cfg, &run, "4");
    assert_eq!(s["algorithm"], "dpo", "{s}");
    assert_nothing_lost_and_learning_goes_on(&s, &rows, at_kill);
    let mut betas = Vec::new();
    for f in std::fs::read_dir(run.join("tensorboard")).unwrap().flatten() {
        for e in rulka_learner::read_events(&f.path()).unwrap() {
            for v in e.summary.iter().flat_map(|s| &s.value) {
                if v.tag == "DPO/beta" {
                    betas.push((e.step, v.simple_value.unwrap()));
                }
            }
        }
    }
    assert!(betas.len() >= 2, "{betas:?}");
    for (step, beta) in betas {
        let want = 0.5 + (0.1 - 0.5) * step as f64 / 1e6;
        rulka_test_support::margin::close("f64::from(beta) vs want", f64::from(beta), want, 1e-6);
    }
}

#[test]
fn a_killed_trainer_resumes_from_its_checkpoint() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1);
    let run = dir.path().join("run");
    // A shared-memory root of this test's own: the other tests' trainers,
    // running beside it, remove dead runs' directories from /dev/shm at
    // their start and would take the one planted below from this trainer.
    let root = tempfile::Builder::new().prefix("rulka-test-root-").tempdir_in("/dev/shm").unwrap();
    let mut trainer = bin()
        .args(["train", "--config", cfg.to_str().unwrap()])
        .env("RULKA_SHM_ROOT", root.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let latest = run.join("state/LATEST");
    let t0 = Instant::now();
    // A checkpoint after at least one update (state.N or state.N.K with N ≥ 1),
    // and a summary.json: the first checkpoint moves LATEST before it writes
    // the first summary, so a kill between the two leaves none to read (a
    // clean clone's loaded run killed there once).
    while std::fs::read_to_string(&latest).map_or(true, |s| s.trim().split('.').nth(1) == Some("0"))
        || !run.join("summary.json").is_file()
    {
        assert!(t0.elapsed() < Duration::from_secs(90), "no checkpoint");
        std::thread::sleep(Duration::from_millis(100));
    }
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let shm = PathBuf::from(info["shm_dir"].as_str().unwrap());
    assert!(shm.is_dir());
    signal(trainer.id(), "-9");
    trainer.wait().unwrap();
    assert!(shm.is_dir(), "a SIGKILLed trainer leaves its segments behind");
    let state = std::fs::read_to_string(&latest).unwrap();
    let counters: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(run.join("state").join(state.trim()).join("learner.json"))
            .unwrap(),
    )
    .unwrap();
    let (frames, updates) =
        (counters["frames"].as_u64().unwrap(), counters["updates"].as_u64().unwrap());
    assert!(updates >= 1);
    // summary.json, written with every checkpoint, says the run was running
    // and describes a state that is there: the one LATEST names, or (a kill
    // between moving LATEST and writing the summary) the previous one, kept.
    let s = summary(&run);
    assert_eq!(s["stop_reason"], "running", "{s}");
    let named = run.join(s["checkpoint"].as_str().unwrap());
    let described: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(named.join("learner.json")).unwrap())
            .unwrap();
    assert_eq!((&s["frames"], &s["updates"]), (&described["frames"], &described["updates"]), "{s}");
    // Another run's directory whose trainer died (a real process, SIGKILLed):
    // any trainer's start removes it, naming it.
    let mut dead = Command::new("sleep").arg("60").spawn().unwrap();
    let dead_start = rulka_shm::process_start_time(dead.id()).unwrap();
    let stale = root.path().join(format!("rulka-{:016x}", 0xdead_0000_u64 + u64::from(dead.id())));
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("ring0"), [0u8; 64]).unwrap();
    let rec =
        format!(r#"{{"pid": {}, "start_time": {dead_start}, "run_dir": "elsewhere"}}"#, dead.id());
    std::fs::write(stale.join("owner.json"), rec).unwrap();
    signal(dead.id(), "-9");
    dead.wait().unwrap();
    let o = bin()
        .args(["train", "--resume", run.to_str().unwrap()])
        .args(["--max-frames", &(frames + 1500).to_string()])
        .env("RULKA_SHM_ROOT", root.path())
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!stale.exists(), "a dead run's shared memory is removed at start: {err}");
    assert!(err.contains(&*stale.to_string_lossy()) && err.contains("is gone"), "{err}");
    assert!(
        err.contains(&format!("resumed {}: {frames} frames, {updates} updates", run.display())),
        "{err}"
    );
    // Over shared memory the new trainer numbers its collectors afresh:
    // trajectories whose ids the killed one recorded too are new ones, all
    // recorded and trained on (only NATS delivers a recorded one again).
    let s = summary(&run);
    assert_eq!(s["counters"]["already_recorded"], 0, "{s}");
    assert!(!err.contains("was recorded before this trainer started"), "{err}");
    // The run's own segments are removed and named: by the dead-run sweep
    // when its collectors (which die with the trainer, asynchronously) are
    // already gone, else by the resume itself once they are.
    assert!(err.contains(&*shm.to_string_lossy()), "{err}");
    assert!(!shm.exists(), "stale segments cleaned up");
    let s = summary(&run);
    assert!(s["frames"].as_u64().unwrap() >= frames + 1500);
    assert!(s["updates"].as_u64().unwrap() > updates);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    for args in [
        vec!["train", "--config", "/nonexistent/c.yaml"],
        vec!["train", "--resume", missing.to_str().unwrap()],
        vec!["collect", "--run", missing.to_str().unwrap(), "--id", "0"],
        vec!["plot", missing.to_str().unwrap()],
    ] {
        let o = rulka(&args);
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
        assert!(!e.contains("panicked"));
    }
    // A run directory that already holds a run needs --resume or --fresh.
    let cfg = config(dir.path(), 1);
    std::fs::create_dir_all(dir.path().join("run/state")).unwrap();
    std::fs::write(dir.path().join("run/state/LATEST"), "state.3").unwrap();
    let o = rulka(&["train", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--resume"), "{}", text(&o.stderr));
    // A resumed run whose checkpoint is corrupt fails loudly (exit 1), never starts fresh.
    std::fs::write(dir.path().join("run/config.yaml"), std::fs::read(&cfg).unwrap()).unwrap();
    let o = rulka(&[
        "train",
        "--resume",
        dir.path().join("run").to_str().unwrap(),
        "--max-frames",
        "10",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("state.3"), "{}", text(&o.stderr));
}

#[test]
fn a_hung_collector_is_killed_and_replaced() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2);
    let yaml = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("heartbeat_timeout_ms: 10000", "heartbeat_timeout_ms: 4000");
    std::fs::write(&cfg, yaml).unwrap();
    let run = dir.path().join("run");
    let mut trainer = Kill::spawn(
        bin()
            .args(["train", "--config", cfg.to_str().unwrap(), "--max-minutes", "0.4"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let t0 = Instant::now();
    while rulka_trainer::read_trajectories(&run).map_or(0, |r| r.len()) < 10 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no trajectories");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kids = children_of(trainer.id());
    assert_eq!(kids.len(), 2);
    // SIGSTOP: alive but silent — only the heartbeat can tell.
    assert!(Command::new("kill").args(["-STOP", &kids[1].to_string()]).status().unwrap().success());
    let (status, _) = wait_exit(trainer.child(), Duration::from_secs(120));
    let mut err = String::new();
    std::io::Read::read_to_string(trainer.child().stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(err.contains("collector 1 silent for"), "{err}");
    let c = summary(&run)["counters"].clone();
    assert!(c["hung_collectors_killed"].as_u64().unwrap() >= 1, "{c}");
    assert_eq!(c["duplicate_trajectories"].as_u64(), Some(0), "{c}");
    // The stopped process was killed, not left behind.
    assert!(
        !Path::new(&format!("/proc/{}", kids[1])).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", kids[1]))
                .map_or(true, |s| s.contains(") Z"))
    );
}

#[test]
fn training_drives_the_game_path_over_tminterface() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = config(dir.path(), 1);
    // The simulator's tracks 0 and 1 as the game's maps: their zone-centre files.
    let mut maps = Vec::new();
    for seed in [0, 1] {
        let npy = dir.path().join(format!("track{seed}.npy"));
        let o = rulka(&[
            "sim",
            "export-map",
            "--seed",
            &seed.to_string(),
            "--track",
            "easy",
            "-o",
            npy.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        maps.push(format!(
            "{{name: track{seed}, map_path: '{seed}', zone_centers: {}}}",
            npy.display()
        ));
    }
    let yaml = std::fs::read_to_string(&cfg).unwrap().replace(
        "environment: {",
        &format!(
            "environment: {{kind: tmi, tmi: {{base_port: {port}, timeout_ms: 5000, maps: [{}]}}, ",
            maps.join(", ")
        ),
    );
    std::fs::write(&cfg, yaml).unwrap();
    // The simulator behind the TMInterface protocol stands in for the game.
    let server = sim_game(Path::new(env!("CARGO_BIN_EXE_rulka")), &cfg, port, &[]);
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(20), "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // (That probe connection is served and dropped before the collector's.)
    std::thread::sleep(Duration::from_millis(200));
    let o = rulka(&["train", "--config", cfg.to_str().unwrap(), "--max-frames", "1200"]);
    drop(server);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("game (TMInterface)"), "{err}");
    let s = summary(&dir.path().join("run"));
    assert!(s["frames"].as_u64().unwrap() >= 1200, "{s}");
    assert_eq!(s["counters"]["collector_restarts"].as_u64(), Some(0), "{s}");
    // Both maps were driven (the prompts are the maps), named in the TensorBoard tags' CSV rows.
    let rows = rulka_trainer::read_trajectories(&dir.path().join("run")).unwrap();
    for seed in [0, 1] {
        assert!(rows.iter().any(|r| r.seed == seed), "{rows:?}");
    }
}

/// `learner_threads: auto` follows the machine: a NATS run with no local
/// collectors starts its learner on every core; with every core kept busy
/// by other processes (2 per core, at nice 19: they count as busy, and cost
/// the suite's other tests little) the trainer measures that within its
/// first 10 s window and drops to 1 thread, and says so. A fixed number is
/// never changed.
#[test]
fn auto_learner_threads_drop_to_one_when_other_processes_take_the_cores() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores < 2 {
        eprintln!("one core: auto has nothing to drop from");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    struct Hogs(Vec<Child>);
    impl Drop for Hogs {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let _hogs = Hogs(
        (0..2 * cores)
            .map(|_| {
                Command::new("nice")
                    .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    for (threads, want_change) in [("auto", true), ("2", false)] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), 1); // --collectors 0 below, over NATS
        let yaml = std::fs::read_to_string(&cfg).unwrap().replace(
            "checkpoint_every_s: 1}",
            &format!("checkpoint_every_s: 1, learner_threads: {threads}}}"),
        );
        std::fs::write(&cfg, yaml).unwrap();
        let o = rulka(&[
            "train",
            "--config",
            cfg.to_str().unwrap(),
            "--transport",
            "nats",
            "--collectors",
            "0",
            "--max-minutes",
            "0.3",
        ]);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{err}");
        let start = if threads == "auto" { cores } else { 2 };
        assert!(
            err.contains(&format!("learner on cpu, {start} thread(s) ({cores} cores, 0 local")),
            "learner_threads: {threads}: {err}"
        );
        let change = format!("learner threads {cores} → 1: other processes used ");
        assert_eq!(err.contains(&change), want_change, "learner_threads: {threads}: {err}");
        if !want_change {
            assert!(!err.contains("learner threads 2 →"), "{err}");
        }
    }
}

/// `--transport nats` counts before the config's rules: a config asking
/// for no local collectors (game PCs only) runs with the flag (here a few
/// seconds with no collector at all, and stops at its time limit), and
/// is refused without it, naming the key (exit 2, nothing written).
#[test]
fn a_config_without_local_collectors_runs_with_the_nats_flag() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 0);
    let run = dir.path().join("run");
    let o = bin().args(["train", "--config", cfg.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("collectors.count"), "{}", text(&o.stderr));
    assert!(!run.exists(), "a refused start writes nothing");
    let o = bin()
        .args([
            "train",
            "--config",
            cfg.to_str().unwrap(),
            "--transport",
            "nats",
            "--max-minutes",
            "0.05",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(summary(&run)["stop_reason"], "time limit reached", "{}", text(&o.stderr));
}

/// `scripts/bench-learning`'s arms (docs/learning.md, "Learning per frame"):
/// `baseline` is the original's PPO with every lever off even on a preset
/// that turns one on (`sim-hard.yaml` normalises returns) and at the other
/// simulator presets' network width where the preset is wider
/// (`sim-hard.yaml`'s 256/128 against 128/64), each named lever sits alone
/// on top of it, `preset` and `NAME=YAML` keep the preset's own;
/// every arm gets the seed and run directory of its run, and no wall-clock
/// limit (`sim-hard.yaml`'s 40 minutes would cut a run on a busy machine).
#[test]
fn bench_learning_measures_each_lever_alone_against_the_originals_ppo() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let arms = r#"baseline kl retnorm rad drac rollout4k epochs8 ppg big plr popart sil preset clip={"ppo":{"clip_coef":0.1}}"#;
    let o = Command::new("bash")
        .arg(root.join("scripts/bench-learning"))
        .args(["1000", "0 3"])
        .arg(dir.path())
        .env("CONFIGS_ONLY", "1")
        .env("ARMS", arms)
        .env("CONFIG", root.join("configs/sim-hard.yaml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    // (normalize_returns, target_kl, shift_px, drac_coef, update_epochs, rollout steps, clip_coef,
    // aux_every_updates, dense_hidden_dim, float_hidden_dim, collectors.curriculum.replay,
    // (popart_beta, sil_coef))
    let off = (false, None, 0, 0.0, 4, 2048, 0.2, 0, 128, 64, 0.0, (None, 0.0));
    let want = [
        ("baseline", off),
        ("kl", (false, Some(0.015), 0, 0.0, 10, 2048, 0.2, 0, 128, 64, 0.0, (None, 0.0))),
        ("retnorm", (true, None, 0, 0.0, 4, 2048, 0.2, 0, 128, 64, 0.0, (None, 0.0))),
        ("rad", (false, None, 2, 0.0, 4, 2048, 0.2, 0, 128, 64, 0.0, (None, 0.0))),
        ("drac", (false, None, 2, 0.1, 4, 2048, 0.2, 0, 128, 64, 0.0, (None, 0.0))),
        ("rollout4k", (false, None, 0, 0.0, 4, 4096, 0.2, 0, 128, 64, 0.0, (None, 0.0))),
        ("epochs8", (false, None, 0, 0.0, 8, 2048, 0.2, 0, 128, 64, 0.0, (None, 0.0))),
        ("ppg", (false, None, 0, 0.0, 4, 2048, 0.2, 32, 128, 64, 0.0, (None, 0.0))),
        ("big", (false, None, 0, 0.0, 4, 2048, 0.2, 0, 256, 128, 0.0, (None, 0.0))),
        ("plr", (false, None, 0, 0.0, 4, 2048, 0.2, 0, 128, 64, 0.5, (None, 0.0))),
        ("popart", (false, None, 0, 0.0, 4, 2048, 0.2, 0, 128, 64, 0.0, (Some(0.1), 0.0))),
        ("sil", (false, None, 0, 0.0, 4, 2048, 0.2, 0, 128, 64, 0.0, (None, 0.1))),
        ("preset", (true, None, 0, 0.0, 4, 2048, 0.2, 0, 256, 128, 0.0, (None, 0.0))),
        ("clip", (true, None, 0, 0.0, 4, 2048, 0.1, 0, 256, 128, 0.0, (None, 0.0))),
    ];
    for seed in [0u64, 3] {
        for (arm, w) in want {
            let run = dir.path().join(format!("{arm}-s{seed}"));
            let c = rulka_config::Config::from_file(dir.path().join(format!("{arm}-s{seed}.yaml")))
                .unwrap_or_else(|e| panic!("{arm} seed {seed}: {e}"));
            let p = &c.ppo;
            let got = (
                p.normalize_returns,
                p.target_kl,
                c.training.augment.shift_px,
                p.drac_coef,
                p.update_epochs,
                p.rollout_steps_per_update,
                p.clip_coef,
                p.aux_every_updates,
                c.nn.dense_hidden_dim,
                c.nn.float_hidden_dim,
                c.collectors.curriculum.replay,
                (p.popart_beta, p.sil_coef),
            );
            assert_eq!(got, w, "{arm} seed {seed}");
            assert_eq!((c.training.seed, &c.training.run_dir), (seed, &run), "{arm}");
            assert_eq!(c.training.max_minutes, None, "{arm}: the budget is frames, not minutes");
        }
    }
}

/// The repository's root, and a folder holding `out/` (the bench's), an
/// empty `demos/` and a `limits.csv` (a limit table's header: the bench
/// only checks that it is a file).
fn bench_learning_dirs() -> (PathBuf, tempfile::TempDir, [PathBuf; 3]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let (out, demos, limits) =
        (dir.path().join("out"), dir.path().join("demos"), dir.path().join("limits.csv"));
    std::fs::create_dir_all(&demos).unwrap();
    std::fs::write(&limits, "track,seed,limit_ms\n").unwrap();
    (root, dir, [out, demos, limits])
}

/// `scripts/bench-learning` against a limit table (docs/learning.md,
/// "Learning against the limit"): an arm `NAME:pretrain=DIR` is the preset
/// as it ships (its demonstrations change how it starts, not its knobs);
/// bad `LIMITS`, `SNAPSHOT` and demonstration folders are refused naming
/// the value before anything runs; the report takes each run's own
/// driver's line of `rulka eval --limits --json` (not the autopilot's), at
/// the snapshot and at the end, and each arm's median over its seeds of
/// what is there. Every expected number is worked by hand from the files
/// written here.
#[test]
fn bench_learning_reports_each_runs_time_over_the_limit_at_the_snapshot_and_the_end() {
    let (root, dir, [out, demos, limits]) = bench_learning_dirs();
    let arms = format!("preset planner:pretrain={}", demos.display());
    let bench = |env: &[(&str, String)]| {
        let mut c = Command::new("bash");
        c.arg(root.join("scripts/bench-learning")).args(["2500000", "0 1"]).arg(&out);
        c.env("CONFIG", root.join("configs/sim-hard.yaml")).env("ARMS", &arms);
        c.env_remove("LIMITS").env_remove("SNAPSHOT").env_remove("REPORT_ONLY");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };

    // Refused, naming the bad value, before any config is written.
    let lim = || ("LIMITS", limits.display().to_string());
    let no_demos = dir.path().join("no-such-demos");
    let bad_pretrain = format!("planner:pretrain={}", no_demos.display());
    let mut cases = vec![
        (
            vec![("LIMITS", dir.path().join("nope.csv").display().to_string())],
            "nope.csv".to_string(),
        ),
        // A folder is not a table (limits/sim-hard for its limits.csv).
        (vec![("LIMITS", demos.display().to_string())], format!("'{}'", demos.display())),
        (vec![lim(), ("SNAPSHOT", "1e6".into())], "'1e6'".into()),
        (vec![lim(), ("SNAPSHOT", "2500000".into())], "SNAPSHOT (2500000)".into()),
    ];
    // A bad arm is refused wherever it stands among the arms.
    // A file where the demonstrations folder goes is no folder.
    let file_pretrain = format!("planner:pretrain={}", limits.display());
    for bad in [bad_pretrain.as_str(), file_pretrain.as_str(), "nosuch"] {
        let named = match bad {
            "nosuch" => "'nosuch'".to_string(),
            b if b == file_pretrain => limits.display().to_string(),
            _ => no_demos.display().to_string(),
        };
        for arms in
            [format!("{bad} preset"), format!("preset {bad}"), format!("preset retnorm {bad}")]
        {
            cases.push((vec![("ARMS", arms)], named.clone()));
        }
    }
    for (env, names) in cases {
        let o = bench(&[env.clone(), vec![("CONFIGS_ONLY", "1".into())]].concat());
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{env:?}: {err}");
        assert!(err.contains(&names), "{env:?} names {names}: {err}");
        assert!(!out.join("preset-s0.yaml").exists(), "{env:?}: wrote a config");
    }

    // The pretrained arm's knobs are the preset's (the baseline's would turn return
    // normalisation off and narrow the network).
    let o = bench(&[lim(), ("CONFIGS_ONLY", "1".into())]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for seed in [0u64, 1] {
        let c = |arm: &str| {
            rulka_config::Config::from_file(out.join(format!("{arm}-s{seed}.yaml"))).unwrap()
        };
        let (preset, planner) = (c("preset"), c("planner"));
        assert!(planner.ppo.normalize_returns);
        assert_eq!((planner.nn.dense_hidden_dim, planner.nn.float_hidden_dim), (256, 128));
        assert_eq!(planner.ppo.clip_coef, preset.ppo.clip_coef);
        assert_eq!(
            (planner.training.seed, &planner.training.run_dir),
            (seed, &out.join(format!("planner-s{seed}")))
        );
    }

    // Four finished runs, as `rulka train` and `rulka eval --limits --json` leave them.
    let run = |arm: &str, seed: u32, snap: Option<(f64, f64, f64)>, end: (f64, f64, f64)| {
        let r = out.join(format!("{arm}-s{seed}"));
        std::fs::create_dir_all(&r).unwrap();
        std::fs::write(
            r.join("summary.json"),
            r#"{"frames_this_run": 2500000, "minutes": 17.0, "stop_reason": "max frames",
                "counters": {"best_race_time_s": 39.5, "learner_cpu_s": 250.0}}"#,
        )
        .unwrap();
        std::fs::write(
            r.join("heldout.csv"),
            "frames,finish_rate,time_ratio_median,thrown_away_by\n\
             500000,0.9,0.9,\n1000000,1.0,0.84,\n2500000,1.0,0.81,\n",
        )
        .unwrap();
        let eval = |model: &str, (p10, median, p90): (f64, f64, f64)| {
            let j = serde_json::json!({"limits": [
                {"driver": "autopilot", "episodes": 100, "time_ratio": {"p10": 1.2, "median": 1.3, "p90": 1.4}},
                {"driver": format!("{}/{model}.onnx", r.display()), "episodes": 100,
                 "time_ratio": {"p10": p10, "median": median, "p90": p90}},
            ]});
            std::fs::write(out.join(format!("{arm}-s{seed}.{model}.limits.json")), j.to_string())
                .unwrap();
        };
        if let Some(s) = snap {
            eval("model-1000000", s);
        }
        eval("model", end);
    };
    run("preset", 0, Some((1.010, 1.030, 1.050)), (1.000, 1.010, 1.020));
    run("preset", 1, Some((1.020, 1.050, 1.080)), (1.005, 1.030, 1.060));
    run("planner", 0, Some((1.001, 1.020, 1.040)), (1.002, 1.012, 1.032));
    // No evaluation at the snapshot: a dash, and the arm's median is of the other seed.
    run("planner", 1, None, (1.003, 1.022, 1.042));
    // Models there, none evaluated for one snapshot: a report builds,
    // trains and evaluates nothing (a stand-in rulka logs every call).
    for run in ["preset-s0", "preset-s1", "planner-s0", "planner-s1"] {
        for m in ["model-1000000.onnx", "model.onnx"] {
            std::fs::write(out.join(run).join(m), "a model").unwrap();
        }
    }
    let calls = dir.path().join("calls.log");
    let fake = dir.path().join("rulka");
    std::fs::write(&fake, "#!/usr/bin/env bash\necho \"$*\" >> \"$CALLS\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = bench(&[
        lim(),
        ("REPORT_ONLY", "1".into()),
        ("RULKA_BIN", fake.display().to_string()),
        ("CALLS", calls.display().to_string()),
    ]);
    let said = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(said.lines().all(|l| l.starts_with("plot ")), "REPORT_ONLY ran: {said}");
    let report = text(&o.stdout);
    assert!(o.status.success(), "{}\n{report}", text(&o.stderr));
    let row = |arm: &str, seed: u32| {
        let head = format!("| {arm} | {seed} | ");
        report
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no row {head}: {report}"))
            .to_string()
    };
    for (arm, seed, snap, end) in [
        ("preset", 0, "1.030× (1.010–1.050)", "1.010× (1.000–1.020)"),
        ("preset", 1, "1.050× (1.020–1.080)", "1.030× (1.005–1.060)"),
        ("planner", 0, "1.020× (1.001–1.040)", "1.012× (1.002–1.032)"),
        ("planner", 1, "—", "1.022× (1.003–1.042)"),
    ] {
        let r = row(arm, seed);
        assert!(r.contains(&format!("| {snap} | {end} |")), "{arm} {seed}: {r}");
        // The held-out table's own figures stay beside them: 0.84× at 1 M, 0.81× at the end.
        assert!(
            r.contains("| 0.840×, 100 % (1.00 M) | 0.810×, 100 % (2.50 M) |"),
            "{arm} {seed}: {r}"
        );
    }
    // Each arm's medians over its seeds: preset (1.030, 1.050) and (1.010, 1.030);
    // planner the one snapshot there, 1.020, and (1.012, 1.022).
    let summary = |arm: &str| {
        let head = format!("| {arm} | 2 | ");
        report
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no summary {head}: {report}"))
            .to_string()
    };
    assert!(
        summary("preset").contains("| 0.840× | 0.810× | 1.040× | 1.020× |"),
        "{}",
        summary("preset")
    );
    assert!(
        summary("planner").contains("| 0.840× | 0.810× | 1.020× | 1.017× |"),
        "{}",
        summary("planner")
    );
    assert!(report.contains("time ÷ limit at 1 M"), "{report}");
}

/// `scripts/bench-learning`'s runs against a limit table, driven through a
/// stand-in `rulka` (`RULKA_BIN`) that logs what it is asked and leaves what
/// `rulka train` and `rulka eval --json` leave: a pretrained arm is
/// pretrained once (fresh) and then resumed; every run stops at `SNAPSHOT`
/// frames, its model kept as `model-SNAPSHOT.onnx`, and resumes to the
/// budget; both models are evaluated against the table, and the report
/// reads each evaluation of its own model; a second run of the bench trains
/// and evaluates nothing again.
#[test]
fn bench_learning_stops_each_run_at_the_snapshot_keeps_its_model_and_evaluates_both() {
    let (root, dir, [out, demos, limits]) = bench_learning_dirs();
    let log = dir.path().join("calls.log");
    // The stand-in: `train` writes the model and summary of the frames it
    // stopped at (into --resume DIR, or the config's run_dir), `eval` a
    // time ÷ limit read off the model it was given (1 M frames: 1.04, the
    // budget: 1.01), `plot` nothing.
    let fake = dir.path().join("rulka");
    std::fs::write(
        &fake,
        r#"#!/usr/bin/env bash
echo "$*" >> "$CALLS"
arg() { local k="$1"; shift; while [ $# -gt 0 ]; do [ "$1" = "$k" ] && { echo "$2"; return; }; shift; done; }
case "$1" in
  pretrain) run="$(sed -n 's/^  run_dir: //p' "$(arg --config "$@")")"; mkdir -p "$run"; echo pretrained > "$run/pretrain.json" ;;
  train)
    run="$(arg --resume "$@")"
    [ -n "$run" ] || run="$(sed -n 's/^  run_dir: //p' "$(arg --config "$@")")"
    n="$(arg --max-frames "$@")"; mkdir -p "$run"
    before=0; [ -f "$run/summary.json" ] && before="$(sed -n 's/.*"frames": \([0-9]*\).*/\1/p' "$run/summary.json")"
    echo "frames $n" > "$run/model.onnx"
    printf '{"frames": %s, "frames_this_run": %s, "minutes": 1.0, "stop_reason": "max frames (%s)", "counters": {}}' "$n" "$((n - before))" "$n" > "$run/summary.json"
    printf 'frames,finish_rate,time_ratio_median,thrown_away_by\n%s,1.0,0.81,\n' "$n" > "$run/heldout.csv" ;;
  eval)
    case "$(cat "$(arg --model "$@")")" in "frames 1000000") r=1.04 ;; "frames 2500000") r=1.01 ;; *) r=9 ;; esac
    printf '{"limits": [{"driver": "autopilot", "time_ratio": {"p10": 1.2, "median": 1.3, "p90": 1.4}}, {"driver": "%s", "time_ratio": {"p10": %s, "median": %s, "p90": %s}}]}' \
      "$(arg --model "$@")" "$r" "$r" "$r" > "$(arg --json "$@")"
    # An evaluation that fails after writing (FAIL_ONCE names a marker).
    if [ -f "$FAIL_ONCE" ]; then rm "$FAIL_ONCE"; exit 1; fi ;;
esac
"#,
    )
    .unwrap();
    let bench = || {
        Command::new("bash")
            .arg(root.join("scripts/bench-learning"))
            .args(["2500000", "0"])
            .arg(&out)
            .env("CONFIG", root.join("configs/sim-hard.yaml"))
            .env("ARMS", format!("preset planner:pretrain={}", demos.display()))
            .env("LIMITS", &limits)
            .env("RULKA_BIN", &fake)
            .env("CALLS", &log)
            .env("FAIL_ONCE", dir.path().join("fail-once"))
            .env_remove("SNAPSHOT")
            .env_remove("REPORT_ONLY")
            .env_remove("CONFIGS_ONLY")
            .output()
            .unwrap()
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = bench();
    let report = text(&o.stdout);
    assert!(o.status.success(), "{}\n{report}", text(&o.stderr));
    let calls = std::fs::read_to_string(&log).unwrap();
    let (p, q) = (out.join("preset-s0"), out.join("planner-s0"));
    let (pc, qc) = (out.join("preset-s0.yaml"), out.join("planner-s0.yaml"));
    let want = [
        format!("train --config {} --fresh --max-frames 1000000", pc.display()),
        format!("train --resume {} --max-frames 2500000", p.display()),
        format!("pretrain --config {} --demos {} --fresh", qc.display(), demos.display()),
        format!("train --resume {} --max-frames 1000000", q.display()),
        format!("train --resume {} --max-frames 2500000", q.display()),
    ];
    let trains: Vec<&str> =
        calls.lines().filter(|l| l.starts_with("train") || l.starts_with("pretrain")).collect();
    assert_eq!(trains, want, "{calls}");
    for run in [&p, &q] {
        assert_eq!(
            std::fs::read_to_string(run.join("model-1000000.onnx")).unwrap(),
            "frames 1000000\n"
        );
        assert_eq!(std::fs::read_to_string(run.join("model.onnx")).unwrap(), "frames 2500000\n");
        // Each model is driven with its own run's config (an arm may change the network).
        let own = out.join(format!("{}.yaml", run.file_name().unwrap().to_str().unwrap()));
        for l in calls
            .lines()
            .filter(|l| l.starts_with("eval") && l.contains(&format!("{}/", run.display())))
        {
            assert!(l.contains(&format!("--config {} ", own.display())), "{l}");
        }
        for m in ["model-1000000", "model"] {
            let onnx = run.join(format!("{m}.onnx"));
            assert_eq!(
                calls
                    .lines()
                    .filter(|l| l.starts_with("eval")
                        && l.contains(&format!("--model {} ", onnx.display())))
                    .count(),
                1,
                "{m} of {}: {calls}",
                run.display()
            );
        }
        let arm = run.file_name().unwrap().to_str().unwrap().trim_end_matches("-s0");
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {arm} | 0 | ")))
            .unwrap_or_else(|| panic!("{report}"));
        assert!(row.contains("| 1.040× (1.040–1.040) | 1.010× (1.010–1.010) |"), "{row}");
    }
    // Again: everything is there, so nothing is trained or evaluated.
    let before = calls.lines().filter(|l| !l.starts_with("plot")).count();
    let o = bench();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls.lines().filter(|l| !l.starts_with("plot")).count(), before, "{calls}");
    // A run that stopped at max frames one frame short of the budget (its
    // second leg cut) is not done: it alone is run again, from its start.
    let s = q.join("summary.json");
    let short = std::fs::read_to_string(&s).unwrap().replace("2500000", "2499999");
    std::fs::write(&s, short).unwrap();
    let seen = calls.len();
    let o = bench();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let calls = std::fs::read_to_string(&log).unwrap();
    let new = &calls[seen..];
    let again: Vec<&str> =
        new.lines().filter(|l| l.starts_with("train") || l.starts_with("pretrain")).collect();
    assert_eq!(again, want[2..], "{new}");
    // and its models, new, are evaluated again; the finished run's are not.
    let evals: Vec<&str> = new.lines().filter(|l| l.starts_with("eval")).collect();
    assert_eq!(evals.len(), 2, "{new}");
    assert!(evals.iter().all(|l| l.contains(&format!("--model {}/", q.display()))), "{new}");
    // An evaluation that fails leaves nothing that counts as done (what
    // it wrote stays a .partial): the next bench evaluates it again.
    let done = out.join("preset-s0.model.limits.json");
    std::fs::remove_file(&done).unwrap();
    std::fs::write(dir.path().join("fail-once"), "").unwrap();
    let o = bench();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!done.exists(), "a failed evaluation was kept as done");
    let seen = std::fs::read_to_string(&log).unwrap().len();
    let o = bench();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let calls = std::fs::read_to_string(&log).unwrap();
    let again: Vec<&str> = calls[seen..].lines().filter(|l| l.starts_with("eval")).collect();
    assert_eq!(again.len(), 1, "{again:?}");
    assert!(
        again[0].contains(&format!("--model {}/model.onnx ", p.display())) && done.exists(),
        "{again:?}"
    );
}

/// `scripts/rulka` builds nothing while `scripts/mutants` (`--promises` or
/// cargo-mutants) is mutating the sources in place (its marker names a live process): it
/// exits 2 naming that pid, before the setup or the build. A marker left by
/// a run that died, or one holding 0 (`kill -0 0` would test the process
/// group), stops nothing.
#[test]
fn scripts_rulka_builds_nothing_while_promise_mutants_mutate_the_tree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
    std::fs::create_dir_all(dir.path().join("target/promises")).unwrap();
    std::fs::copy(root.join("scripts/rulka"), dir.path().join("scripts/rulka")).unwrap();
    let mark = dir.path().join("target/promises/MUTATING");
    // The copy has no scripts/setup.sh beside it, so past the guard it fails
    // on that (exit 127), never on a build.
    let run = |pid: u32| {
        std::fs::write(&mark, format!("{pid}\n")).unwrap();
        Command::new("bash")
            .arg(dir.path().join("scripts/rulka"))
            .arg("--version")
            .output()
            .unwrap()
    };
    let mut live = Kill::spawn(Command::new("sleep").arg("60"));
    let o = run(live.0.id());
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("pid {}", live.0.id())) && err.contains("mutating"), "{err}");
    assert!(!err.contains("setup.sh"), "refused before the setup: {err}");
    live.0.kill().unwrap();
    live.0.wait().unwrap();
    for pid in [live.0.id(), 0] {
        let o = run(pid);
        let err = text(&o.stderr);
        assert!(!err.contains("mutating"), "pid {pid}: {err}");
        assert!(err.contains("setup.sh"), "pid {pid}: went on to the setup: {err}");
    }
}

/// A cargo-mutants run of `scripts/mutants` holds `scripts/rulka`'s marker
/// while `cargo mutants` runs (its own pid, live), and removes it after;
/// `--list` mutates nothing and leaves no marker. (A stand-in `cargo` on
/// the PATH records what it saw: no mutant is built.)
#[test]
fn scripts_mutants_marks_the_tree_while_cargo_mutants_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("scripts")).unwrap();
    std::fs::create_dir_all(d.join("bin")).unwrap();
    std::fs::copy(root.join("scripts/mutants"), d.join("scripts/mutants")).unwrap();
    std::fs::write(d.join("scripts/setup.sh"), "exit 0\n").unwrap();
    let exe = |p: &Path| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap()
    };
    exe(&d.join("scripts/setup.sh"));
    std::fs::write(d.join("x.rs"), "fn main() {}\n").unwrap();
    let cargo = d.join("bin/cargo");
    std::fs::write(
        &cargo,
        "#!/usr/bin/env bash\n\
         [ \"$2\" = --version ] && { echo 'cargo-mutants 27.1.0'; exit 0; }\n\
         m=\"$(cat target/promises/MUTATING 2>/dev/null)\"\n\
         live=no; [ -n \"$m\" ] && kill -0 \"$m\" 2>/dev/null && live=yes\n\
         echo \"$* | mark=$m live=$live\" >>saw\n",
    )
    .unwrap();
    exe(&cargo);
    let path = format!("{}:{}", d.join("bin").display(), std::env::var("PATH").unwrap());
    let run = |args: &[&str]| {
        let child = Command::new("bash")
            .arg(d.join("scripts/mutants"))
            .args(args)
            .env("PATH", &path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        pid
    };
    let pid = run(&["x.rs"]);
    let saw = std::fs::read_to_string(d.join("saw")).unwrap();
    assert!(saw.contains(&format!("mark={pid} live=yes")), "pid {pid}: {saw}");
    assert!(!d.join("target/promises/MUTATING").exists(), "the marker is removed after the run");
    std::fs::remove_file(d.join("saw")).unwrap();
    run(&["--list", "x.rs"]);
    let saw = std::fs::read_to_string(d.join("saw")).unwrap();
    assert!(saw.contains("--list") && saw.contains("mark= live=no"), "{saw}");
}
