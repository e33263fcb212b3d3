//! Best runs as TMInterface input scripts: a run the simulator's autopilot
//! drives, kept by the trainer's writer (`best_runs/<map>_<time>.inputs`),
//! played back with `rulka inputs play` through `rulka sim serve` (a separate
//! process, over the TMInterface protocol) finishes in the same race time,
//! to the engine step.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::process::{Command, Output};

use rulka_config::Config;
use rulka_env::{Autopilot, Environment, SimEnv, Status};
use rulka_trainer::BestRuns;

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().unwrap()
}

/// `rulka inputs play FILE --port PORT` with `extra` arguments.
fn play(file: &std::path::Path, port: u16, extra: &[&str]) -> Output {
    let port = port.to_string();
    rulka(&[&["inputs", "play", file.to_str().unwrap(), "--port", port.as_str()], extra].concat())
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn a_kept_best_run_plays_back_to_the_same_race_time() {
    let dir = tempfile::tempdir().unwrap();
    let yaml =
        "environment: {n_zone_centers_in_inputs: 10, sim: {track: easy, track_seeds: [3]}}\n";
    let cfg_path = dir.path().join("c.yaml");
    std::fs::write(&cfg_path, yaml).unwrap();
    let cfg = Config::from_yaml_str(yaml, "c.yaml").unwrap();
    // A run: the autopilot on track 3, its actions as a collector records them.
    let pilot = Autopilot::new(&cfg);
    let mut env = SimEnv::new(&cfg);
    env.reset(3).unwrap();
    let (fl, nf) = env.obs_sizes();
    let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
    let mut actions = Vec::new();
    let race_ms = loop {
        env.observe(&mut frame, &mut floats).unwrap();
        let a = pilot.act(&floats);
        actions.push(i32::from(a));
        match env.step(&[a]).unwrap() {
            Status::Finished { race_time_ms } => break race_time_ms as i64,
            Status::Running => {}
            other => panic!("{other:?}"),
        }
    };
    let run = dir.path().join("run");
    let mut best = BestRuns::open(&cfg, &run);
    let rt = race_ms as f64 / 1000.0;
    let file = best.offer("sim3", rt, &actions, "test").unwrap().unwrap();
    assert_eq!(file, run.join("best_runs").join(format!("sim3_{rt:.2}.inputs")));
    let script = std::fs::read_to_string(&file).unwrap();
    assert!(
        script.starts_with("# rulka: best run on sim3") && script.contains("0.00 press up"),
        "{script}"
    );

    let s = common::serve(&cfg_path, &[]);
    let o = play(&file, s.port, &["--map", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("({race_ms} ms)")), "want {race_ms} ms: {}", text(&o));

    // Only a better time replaces the best; a resumed run knows the bests on disk.
    assert!(best.offer("sim3", rt + 0.5, &actions, "test").unwrap().is_none());
    assert!(best.offer("sim3", rt - 0.5, &actions, "test").unwrap().is_some());
    let mut again = BestRuns::open(&cfg, &run);
    assert!(again.offer("sim3", rt - 0.2, &actions, "test").unwrap().is_none());
    assert!(again.offer("sim4", rt, &actions, "test").unwrap().is_some(), "another map");

    // Holding nothing, the car never finishes: named, not waited on forever.
    let idle = dir.path().join("idle.inputs");
    std::fs::write(&idle, "0.00 press down\n0.50 rel down\n").unwrap();
    let o = play(&idle, s.port, &["--map", "3", "--grace-s", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no finish by 0:02.5"), "{}", text(&o));
    // A script with analog input names its line.
    std::fs::write(&idle, "0 press up\n1.00 steer 300\n").unwrap();
    let o = play(&idle, s.port, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("line 2: analog"), "{}", text(&o));
}

/// The trainer's own writer, fed by a real `rulka train` run: on a 21 m
/// straight (a `track_from` line) exploration runs start finishing after
/// about 80 000 frames, steering and braking at random (no greedy runs:
/// those hold one key); each
/// kept `best_runs/*.inputs` file, played back through `rulka sim serve`,
/// finishes in the race time its name and `trajectories.csv` give.
#[test]
fn best_runs_kept_by_rulka_train_play_back_to_their_race_time() {
    let dir = tempfile::tempdir().unwrap();
    let npy = common::straight_line(dir.path(), "straight.npy", 43);
    let run = dir.path().join("run");
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "training: {{algorithm: ppo, run_dir: {run}, optimizer: adam, lr_schedule: [[0, 5.0e-4]], checkpoint_every_s: 2}}\n\
         nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
         ppo: {{rollout_steps_per_update: 256, update_epochs: 1, num_minibatches: 2}}\n\
         environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 8000, \
           cutoff_rollout_if_no_vcp_passed_within_duration_ms: 8000, sim: {{track_from: {npy}}}}}\n\
         collectors: {{count: 1, chunk_steps: 32, ring_chunks: 16, eval_every_n_rollouts: 0}}\n\
         inference: {{intra_op_threads: {threads}}}\n",
        run = run.display(),
        npy = npy.display()
    );
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    // Stopped once a race has finished (the first comes after 80 000–90 000
    // frames, about 240 updates, however fast the machine is), with a cap
    // of 400 000 frames for a run that never learns: a fixed budget of
    // 150 000 had been 1.7× the frames it needed.
    const CAP: u64 = 400_000;
    let mut t = rulka_test_support::Kill::spawn_logged(
        Command::new(env!("CARGO_BIN_EXE_rulka")).args([
            "train",
            "--config",
            cfg.to_str().unwrap(),
            "--max-frames",
            &CAP.to_string(),
        ]),
        dir.path(),
        "train",
    );
    let finished = || {
        rulka_trainer::read_trajectories_so_far(&run).unwrap().iter().any(|r| r.finished && !r.eval)
    };
    rulka_test_support::wait_for("a race finished", std::time::Duration::from_secs(1200), || {
        finished() || t.child().try_wait().unwrap().is_some()
    });
    // A checkpoint (every 2 s) has counted a finish before the stop counts
    // them again: a count added to at each refresh would show twice.
    let counted = || {
        std::fs::read_to_string(run.join("summary.json")).ok().and_then(|t| {
            serde_json::from_str::<serde_json::Value>(&t).ok()?["counters"]["finishes"].as_u64()
        })
    };
    rulka_test_support::wait_for(
        "a checkpoint counted a finish",
        std::time::Duration::from_secs(120),
        || counted().is_some_and(|n| n > 0) || t.child().try_wait().unwrap().is_some(),
    );
    rulka_test_support::signal(t.id(), "-INT");
    let (status, _) = rulka_test_support::wait_exit(t.child(), std::time::Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.path().join("train.err")).unwrap_or_default();
    assert!(status.success(), "{log}");
    let rows = rulka_trainer::read_trajectories(&run).unwrap();
    let times: Vec<f64> = rows.iter().filter_map(|r| r.race_time_s).collect();
    assert!(!times.is_empty(), "no race finished in {CAP} frames: {log}");
    // summary.json's race counters are this start's rows of the table,
    // counted once however often they were refreshed (at the stop's
    // checkpoint and at the stop itself).
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let c = &summary["counters"];
    let done: Vec<&rulka_run::TrajectoryRow> = rows.iter().filter(|r| r.finished).collect();
    assert_eq!(c["finishes"].as_u64(), Some(done.len() as u64), "{c}");
    assert_eq!(c["first_finish_frame"].as_u64(), done.iter().map(|r| r.frames).min(), "{c}");
    let first = rows.iter().find(|r| r.finished && !r.eval).map_or(u64::MAX, |r| r.frames);
    rulka_test_support::margin::at_most("frames to the first finish", first as f64, CAP as f64);
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let kept: Vec<_> = std::fs::read_dir(run.join("best_runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "inputs"))
        .collect();
    assert!(!kept.is_empty(), "nothing kept");
    let s = common::serve(&cfg, &[]);
    let mut best_seen = f64::INFINITY;
    for file in &kept {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let secs: f64 = name.rsplit('_').next().unwrap().parse().unwrap();
        assert!(times.iter().any(|t| (t - secs).abs() < 0.005), "{name} not in the CSV: {times:?}");
        best_seen = best_seen.min(secs);
        let o = play(file, s.port, &["--map", "straight"]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        if let Some(events) = tminterface_reads(file) {
            // TMInterface's own parser holds the keys rulka's player holds, at every step.
            let script =
                rulka_env::InputScript::parse(&std::fs::read_to_string(file).unwrap()).unwrap();
            let mut held = [false; 4];
            let mut next = events.iter().peekable();
            for t in (0..=script.end_ms() + 20).step_by(10) {
                while let Some(&&(_, k, on)) = next.peek().filter(|e| e.0 <= t) {
                    held[k] = on;
                    next.next();
                }
                assert_eq!(held, script.keys_at(t), "{name} at {t} ms: {events:?}");
            }
        }
        let ms = (secs * 1000.0).round() as i64;
        assert!(text(&o).contains(&format!("({ms} ms)")), "{name}: want {ms} ms: {}", text(&o));
    }
    rulka_test_support::margin::close("best_seen vs best", best_seen, best, 0.005);
}

/// The key events of an input script as TMInterface's own Python package
/// (`tminterface.commandlist.CommandList`) parses it: `(ms, key, pressed)`
/// with keys `[up, down, left, right]`, in time order; `None` without the
/// test venv. Every line must be a timed `press`/`rel` of one of the four keys.
fn tminterface_reads(file: &std::path::Path) -> Option<Vec<(u64, usize, bool)>> {
    let py = rulka_test_support::venv_python("TMInterface's reader")?;
    let code = r#"import sys
from tminterface.commandlist import CommandList, InputCommand, InputType
cl = CommandList(open(sys.argv[1]).read())
assert not cl.commands, cl.commands
for i in cl.sorted_timed_commands():
    assert isinstance(i, InputCommand), i.args
    assert i.input_type in (InputType.UP, InputType.DOWN, InputType.LEFT, InputType.RIGHT), i
    print(i.timestamp, int(i.input_type), i.state)
"#;
    let o = Command::new(py).arg("-c").arg(code).arg(file).output().unwrap();
    assert!(o.status.success(), "tminterface cannot read {}: {}", file.display(), text(&o));
    Some(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| {
                let v: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
                (v[0], v[1] as usize, v[2] == 1)
            })
            .collect(),
    )
}
