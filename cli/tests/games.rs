//! Games a collector launches, watches and relaunches
//! (`environment.tmi.launch`), as a user runs them (black box, real
//! processes): `rulka sim serve` is the game, misbehaving on purpose through
//! its fault switches. A game SIGKILLed, SIGSTOPped, exiting, hanging,
//! closing its socket mid-message or sending a corrupt state is named, killed
//! and relaunched while training goes on, nothing duplicated or missing; a launch command that
//! fails or never opens its port is named, with back-off; games restart on
//! schedule; no game outlives its collector, however it ends; and
//! `rulka tmi check` passes on a healthy game and names what fails.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use rulka_test_support::{
    children_of, free_port, games_on, parent_of, signal, sim_game, wait_exit, wait_for, Kill,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Trainer runs use every core: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_rulka")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// A fast game-path config: the simulator's tracks 0 and 1 as the maps,
/// collectors on `base_port…`, `launch` (YAML flow mapping) or none.
fn config(dir: &Path, collectors: u32, base_port: u16, launch: Option<&str>) -> PathBuf {
    let maps = rulka_test_support::sim_maps(Path::new(exe()), dir);
    let launch = launch.map_or(String::new(), |l| format!(", launch: {l}"));
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "training: {{algorithm: ppo, run_dir: {run}, optimizer: adam, lr_schedule: [[0, 5.0e-4]], checkpoint_every_s: 5}}\n\
         nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
         ppo: {{rollout_steps_per_update: 256, update_epochs: 2, num_minibatches: 2}}\n\
         environment: {{kind: tmi, n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {{track: easy, track_seeds: [0, 1]}}, \
           tmi: {{base_port: {base_port}, timeout_ms: 3000, timeout_during_run_ms: 3000, maps: [{maps}]{launch}}}}}\n\
         collectors: {{count: {collectors}, chunk_steps: 32, ring_chunks: 16, eval_every_n_rollouts: 4, heartbeat_timeout_ms: 60000}}\n\
         inference: {{intra_op_threads: {threads}}}\n",
        run = dir.join("run").display(),
        maps = maps
    );
    let p = dir.join("c.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

/// `launch:` running `rulka sim serve` as the game, with `faults` (CLI switches).
fn launch_sim(cfg_for_serve: &Path, faults: &[&str], extra: &str) -> String {
    let mut argv = vec![
        exe().to_string(),
        "sim".into(),
        "serve".into(),
        "--config".into(),
        cfg_for_serve.display().to_string(),
        "--port".into(),
        "{port}".into(),
    ];
    argv.extend(faults.iter().map(|s| s.to_string()));
    let list: Vec<String> = argv.iter().map(|a| format!("'{a}'")).collect();
    format!("{{command: [{}], startup_timeout_s: 30, kill_grace_s: 2{extra}}}", list.join(", "))
}

/// The run config of `collectors` slots from `base_port` whose games are
/// `rulka sim serve` with `faults` ([`launch_sim`]).
fn launched_config(
    dir: &Path,
    collectors: u32,
    base_port: u16,
    faults: &[&str],
    extra: &str,
) -> PathBuf {
    let serve = serve_config(dir);
    config(dir, collectors, base_port, Some(&launch_sim(&serve, faults, extra)))
}

/// A plain config `rulka sim serve` can read (frames, floats, tracks).
fn serve_config(dir: &Path) -> PathBuf {
    let p = dir.join("serve.yaml");
    std::fs::write(
        &p,
        "nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
         environment: {n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {track: easy, track_seeds: [0, 1]}}\n",
    )
    .unwrap();
    p
}

/// How many times the collectors' logs say the game on `port` failed.
fn failures_said(dir: &Path, port: u16) -> usize {
    let game = format!("game on port {port}: ");
    logs(dir)
        .lines()
        .filter(|l| {
            l.contains(&game) && (l.contains(": is gone (") || l.contains(": stopped answering ("))
        })
        .count()
}

/// The parent pid of `pid` (from `/proc/PID/stat`).
fn cmdline(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .replace('\0', " ")
}

fn summary(run: &Path) -> serde_json::Value {
    rulka_trainer::RunDir::new(run).summary().unwrap()
}

/// The rows of trajectories.csv so far (none before the file exists).
fn rows(run: &Path) -> Vec<rulka_trainer::TrajectoryRow> {
    rulka_trainer::read_trajectories_so_far(run).unwrap()
}

fn received(run: &Path) -> usize {
    rows(run).len()
}

fn train(cfg: &Path, dir: &Path, args: &[&str]) -> Kill {
    Kill::spawn_logged(
        Command::new(exe()).args(["train", "--config"]).arg(cfg).args(args),
        dir,
        "train",
    )
}

fn logs(dir: &Path) -> String {
    let mut s = read(&dir.join("train.err"));
    for e in std::fs::read_dir(dir.join("run/logs")).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "log") {
            s.push_str(&format!("\n--- {}\n{}", e.path().display(), read(&e.path())));
        }
    }
    s
}

#[test]
fn a_killed_or_frozen_game_is_relaunched_and_training_goes_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = launched_config(dir.path(), 1, port, &[], "");
    let run = dir.path().join("run");
    let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    wait_for("the first game serves runs", Duration::from_secs(90), || received(&run) >= 10);
    // A crash: the game SIGKILLed mid-run.
    let first = games_on(port);
    assert_eq!(first.len(), 1, "one game per slot: {first:?}");
    signal(first[0], "-9");
    wait_for("a new game is launched", Duration::from_secs(60), || {
        games_on(port).iter().any(|p| !first.contains(p))
    });
    let n = received(&run);
    wait_for("runs go on with the new game", Duration::from_secs(60), || received(&run) > n + 10);
    // A hang: the game SIGSTOPped; the collector's timeout (3 s) finds it.
    let second = games_on(port);
    signal(second[0], "-STOP");
    wait_for("the frozen game is replaced", Duration::from_secs(60), || {
        games_on(port).iter().any(|p| !second.contains(p) && !first.contains(p))
    });
    let n = received(&run);
    wait_for("runs go on with the third game", Duration::from_secs(60), || received(&run) > n + 10);
    // SIGTERM (a service manager's stop) ends the run as Ctrl-C does.
    signal(t.0.id(), "-TERM");
    let status = wait_exit(&mut t.0, Duration::from_secs(60)).0;
    let all = logs(dir.path());
    assert!(status.success(), "{all}");
    let s = summary(&run);
    assert_eq!(s["stop_reason"], "interrupted (SIGTERM)", "{s}");
    assert!(
        all.contains("stopping (interrupted (SIGTERM)): collectors finish, final checkpoint"),
        "{all}"
    );
    let c = &s["counters"];
    assert!(c["game_launches"].as_u64().unwrap() >= 3, "{s}");
    assert!(c["game_crashes"].as_u64().unwrap() >= 1, "{s}\n{all}");
    assert!(c["game_hangs"].as_u64().unwrap() >= 1, "{s}\n{all}");
    assert_eq!(
        (c["duplicate_trajectories"].as_u64(), c["missing_trajectories"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    assert_eq!(c["collector_restarts"], 0, "the collector relaunched the game itself: {s}");
    assert!(all.contains("is gone") && all.contains("stopped answering"), "{all}");
    assert!(all.contains(&format!("game on port {port}")), "the game is named: {all}");
    // TensorBoard's last values count what this test saw: 3 games, 1 crash, 1 hang.
    let tb = common::tensorboard_last(&run, "Games/");
    for (tag, at_least) in [("Games/launches", 3.0), ("Games/crashes", 1.0), ("Games/hangs", 1.0)] {
        assert!(tb.get(tag).is_some_and(|&v| v >= at_least), "{tag}: {tb:?}");
    }
    // No game outlives the run (the SIGSTOPped one included).
    wait_for("no game left", Duration::from_secs(15), || games_on(port).is_empty());
}

#[test]
fn games_that_break_the_protocol_are_relaunched_with_nothing_lost() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (fault, counter, said) in [
        ("--close-mid-message-after-steps", "game_crashes", "is gone"),
        ("--corrupt-state-after-steps", "game_desyncs", "broke the protocol"),
        ("--exit-after-steps", "game_crashes", "is gone"),
        ("--hang-after-steps", "game_hangs", "stopped answering"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        // Every game breaks after 600 run steps (a few runs).
        let cfg = launched_config(dir.path(), 1, port, &[fault, "600"], "");
        let run = dir.path().join("run");
        let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
        wait_for(&format!("{fault}: three games served"), Duration::from_secs(120), || {
            read(&run.join("logs/collector0.log")).matches("launched `").count() >= 3
        });
        signal(t.0.id(), "-INT");
        let status = wait_exit(&mut t.0, Duration::from_secs(60)).0;
        let all = logs(dir.path());
        assert!(status.success(), "{all}");
        let s = summary(&run);
        let c = &s["counters"];
        assert!(c[counter].as_u64().unwrap() >= 2, "{fault}: {s}\n{all}");
        assert_eq!(
            (c["duplicate_trajectories"].as_u64(), c["missing_trajectories"].as_u64()),
            (Some(0), Some(0)),
            "{fault}: {s}"
        );
        // Incomplete, not missing: each game that broke cut its run in flight (600
        // steps is mid-run: no run finishes in these few seconds), which had sent
        // chunks; the run in flight at Ctrl-C may be one more.
        let (broke, cut) =
            (c[counter].as_u64().unwrap(), c["incomplete_dropped"].as_u64().unwrap());
        assert!(
            (broke..=broke + 1).contains(&cut),
            "{fault}: {broke} broke, {cut} incomplete: {s}"
        );
        assert!(received(&run) >= 5, "{fault}: runs were trained on");
        assert!(all.contains(said), "{fault}: {all}");
        wait_for("no game left", Duration::from_secs(15), || games_on(port).is_empty());
    }
}

/// Watches `log` until `pattern` has appeared `n` times, noting when (by the
/// wall clock) each appearance was first seen; polls every 50 ms.
fn times_of(log: &Path, pattern: &str, n: usize, limit: Duration) -> Vec<Instant> {
    let mut at = Vec::new();
    wait_for(&format!("{n} × {pattern:?} in {}", log.display()), limit, || {
        let k = read(log).matches(pattern).count();
        while at.len() < k {
            at.push(Instant::now());
        }
        k >= n
    });
    at
}

/// Seconds between consecutive instants.
fn gaps(at: &[Instant]) -> Vec<f64> {
    at.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect()
}

#[test]
fn a_launch_that_fails_or_never_answers_is_named_with_back_off() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (command, said, startup) in [
        ("['sh', '-c', 'exit 3 # {port}']", "its processes ended at start", 0.0),
        ("['sleep', '600', '{port}']", "did not answer within 2 s", 2.0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let launch = format!(
            "{{command: {command}, startup_timeout_s: 2, kill_grace_s: 1, max_failures: 3, max_backoff_s: 4}}"
        );
        let cfg = config(dir.path(), 1, port, Some(&launch));
        let run = dir.path().join("run");
        let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
        let log_path = run.join("logs/collector0.log");
        // When each launch and each failure (said with its wait) appeared.
        let failed_line = |l: &str| {
            l.contains("launching it again in ")
                || l.contains(&format!("game on port {port}: FAILED 3 launches in a row"))
        };
        let (mut launched, mut failed) = (Vec::new(), Vec::new());
        wait_for("5 launches", Duration::from_secs(120), || {
            let log = read(&log_path);
            for (pattern, at) in [(0, &mut launched), (1, &mut failed)] {
                let k = log
                    .lines()
                    .filter(
                        |l| if pattern == 0 { l.contains("launched `") } else { failed_line(l) },
                    )
                    .count();
                while at.len() < k {
                    at.push(Instant::now());
                }
            }
            launched.len() >= 5
        });
        signal(t.0.id(), "-INT");
        let status = wait_exit(&mut t.0, Duration::from_secs(60)).0;
        let all = logs(dir.path());
        assert!(status.success(), "{all}");
        let log = read(&log_path);
        assert!(log.contains(said), "{command}: {log}");
        // Said: 2 s, then 4 s (doubling, capped at max_backoff_s), then the
        // loud report at the third failure in a row, then 4 s again.
        let said_waits: Vec<&str> = log
            .lines()
            .filter_map(|l| {
                if l.contains(&format!("game on port {port}: FAILED 3 launches in a row")) {
                    Some("FAILED")
                } else {
                    l.split("launching it again in ").nth(1)
                }
            })
            .collect();
        assert_eq!(said_waits[..4], ["2 s", "4 s", "FAILED", "4 s"], "{command}: {log}");
        // And done: launches are 2, 4, 4, 4 s apart by the wall clock, plus
        // the start-up wait; never sooner (no busy loop).
        for (g, backoff) in gaps(&launched).into_iter().zip([2.0, 4.0, 4.0, 4.0]) {
            assert!(
                g >= backoff + startup - 0.15,
                "{command}: launches {:?} s apart, want {backoff} s + {startup} s",
                gaps(&launched)
            );
        }
        // The wait itself, from the failure said to the next launch: the
        // back-off said, not the next one (2 s is not 4 s). Seen by polling
        // the log every 100 ms on a loaded machine: up to ~0.3 s late each.
        for (i, backoff) in [2.0, 4.0, 4.0, 4.0].into_iter().enumerate() {
            let wait = (launched[i + 1] - failed[i]).as_secs_f64();
            assert!(
                wait > backoff - 0.25 && wait < backoff + 1.5,
                "{command}: failure {} waited {wait:.2} s for its relaunch, said {backoff} s",
                i + 1
            );
        }
        let s = summary(&run);
        assert!(s["counters"]["game_failed_launches"].as_u64().unwrap() >= 4, "{s}");
        assert_eq!(s["counters"]["collector_restarts"], 0, "{s}");
        wait_for("no stray process", Duration::from_secs(10), || {
            !std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&port.to_string()))
            })
        });
    }
}

#[test]
fn games_restart_on_schedule_between_runs() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Every 9 s.
    let cfg = launched_config(dir.path(), 1, port, &[], ", restart_every_h: 0.0025");
    let run = dir.path().join("run");
    let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    let at = times_of(&run.join("logs/collector0.log"), "launched `", 3, Duration::from_secs(120));
    signal(t.0.id(), "-INT");
    let status = wait_exit(&mut t.0, Duration::from_secs(60)).0;
    let all = logs(dir.path());
    assert!(status.success(), "{all}");
    // Games live their 9 s, then at most a run (6 s) more before the restart.
    for g in gaps(&at) {
        assert!((8.9..9.0 + 6.0 + 5.0).contains(&g), "launches {:?} s apart: {all}", gaps(&at));
    }
    let s = summary(&run);
    let c = &s["counters"];
    assert!(c["game_scheduled_restarts"].as_u64().unwrap() >= 2, "{s}\n{all}");
    assert_eq!(
        c["game_launches"].as_u64(),
        Some(c["game_scheduled_restarts"].as_u64().unwrap() + 1),
        "{s}"
    );
    // Between runs: no game failed, no run was cut short (the run in flight
    // when the trainer stops is the only incomplete one), nothing is missing.
    let failed = ["game_hangs", "game_crashes", "game_desyncs"].map(|k| c[k].as_u64());
    assert_eq!(failed, [Some(0); 3], "{s}\n{all}");
    assert!(c["incomplete_dropped"].as_u64().unwrap() <= 1, "{s}");
    assert_eq!(c["missing_trajectories"].as_u64(), Some(0), "{s}");
    let tb = common::tensorboard_last(&run, "Games/");
    assert!(tb.get("Games/scheduled_restarts").is_some_and(|&v| v >= 2.0), "{tb:?}");
    wait_for("no game left", Duration::from_secs(15), || games_on(port).is_empty());
}

/// TMLoader's way (docs/windows-gpu-pc.md and docs/game-linux.md): the launch command
/// starts the game and exits at once. The guard adopts the game (it is the
/// game's parent from then on, not init), waits out a game that refuses
/// connections for its first 3 s, sends `post_launch` to its console, runs
/// `stop_command` whenever it ends one; and when the trainer is SIGKILLed,
/// its collector and the game end with it.
#[test]
fn a_game_whose_launcher_exits_first_is_adopted_and_ends_with_a_killed_trainer() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let serve = serve_config(dir.path());
    let stops = dir.path().join("stops");
    let launch = format!(
        "{{command: ['sh', '-c', \"'{exe}' sim serve --config '{serve}' --port {{port}} --refuse-for-s 3 & exit 0\"], \
          startup_timeout_s: 30, kill_grace_s: 2, post_launch: ['set rulka_test_marker 1'], \
          stop_command: ['sh', '-c', 'echo {{id}} {{port}} >> {stops}']}}",
        exe = exe(),
        serve = serve.display(),
        stops = stops.display()
    );
    let cfg = config(dir.path(), 1, port, Some(&launch));
    let run = dir.path().join("run");
    let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    wait_for("the game serves runs", Duration::from_secs(90), || received(&run) >= 5);
    let adopted = |what: &str| {
        let games = games_on(port);
        assert_eq!(games.len(), 1, "{what}: {games:?}");
        let parent = parent_of(games[0]).unwrap();
        let guard = cmdline(parent);
        assert!(
            guard.contains(rulka_collector::GUARD_ARG),
            "{what}: game {}'s parent {parent} is `{guard}`, not the guard",
            games[0]
        );
        games[0]
    };
    let first = adopted("first game");
    let game_log = run.join("logs/collector0.game.log");
    let log = read(&game_log);
    assert!(log.contains("refusing connections for 3 s"), "{log}");
    assert!(log.contains("[tmi server] console: set rulka_test_marker 1"), "{log}");
    // Ended by the collector (it crashed): stop_command runs once, with its slot.
    signal(first, "-9");
    wait_for("stop_command ran", Duration::from_secs(30), || read(&stops) == format!("0 {port}\n"));
    wait_for("a new game serves", Duration::from_secs(60), || {
        games_on(port).iter().any(|&p| p != first)
    });
    let second = adopted("relaunched game");
    let n = received(&run);
    wait_for("runs go on", Duration::from_secs(60), || received(&run) > n + 2);
    assert_eq!(read(&game_log).matches("console: set rulka_test_marker 1").count(), 2);
    // SIGKILL of the trainer: its collector goes (parent-death signal), and
    // with it the game (the guard ends its tree).
    let trainer = t.0.id();
    let collectors = rulka_shm::processes_matching(|a| a.iter().any(|x| x == "collect"));
    let collector: Vec<u32> =
        collectors.into_iter().filter(|&p| parent_of(p) == Some(trainer)).collect();
    assert_eq!(collector.len(), 1, "one collector of this trainer");
    signal(trainer, "-9");
    let _ = t.0.wait();
    wait_for("the collector ends", Duration::from_secs(15), || {
        !rulka_shm::processes_matching(|_| true).contains(&collector[0])
    });
    wait_for("the game ends", Duration::from_secs(15), || !games_on(port).contains(&second));
    assert!(games_on(port).is_empty());
}

#[test]
fn no_game_outlives_its_collector_killed_or_stopped() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = launched_config(dir.path(), 2, port, &[], "");
    let run = dir.path().join("run");
    let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    wait_for("both games serve runs", Duration::from_secs(120), || {
        games_on(port).len() == 1 && games_on(port + 1).len() == 1 && received(&run) >= 10
    });
    // SIGKILL of collector 1: its game goes with it, and the restarted collector launches another.
    let game1 = games_on(port + 1)[0];
    // This trainer's collector 1 (a child of it: other runs may have their own).
    let trainer = t.0.id();
    let collector1 = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .find(|pid| {
            let stat = read(Path::new(&format!("/proc/{pid}/stat")));
            let ppid = stat.rsplit(") ").next().and_then(|a| a.split(' ').nth(1));
            ppid == Some(trainer.to_string().as_str())
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c).replace('\0', " ");
                    c.contains(" collect ") && c.contains("--id 1 ")
                })
        })
        .expect("collector 1");
    signal(collector1, "-9");
    wait_for("collector 1's game ends with it", Duration::from_secs(15), || {
        !games_on(port + 1).contains(&game1)
    });
    wait_for("the restarted collector launches a game", Duration::from_secs(60), || {
        games_on(port + 1).len() == 1
    });
    // Ctrl-C of the trainer: every game ends.
    signal(t.0.id(), "-INT");
    let status = wait_exit(&mut t.0, Duration::from_secs(60)).0;
    assert!(status.success(), "{}", logs(dir.path()));
    wait_for("no game left", Duration::from_secs(15), || {
        games_on(port).is_empty() && games_on(port + 1).is_empty()
    });
    let s = summary(&run);
    assert_eq!(s["counters"]["duplicate_trajectories"], 0, "{s}");
}

#[test]
fn tmi_check_passes_on_a_healthy_game_and_names_what_fails() {
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_config(dir.path());
    let check = |port: u16, cfg: &Path, extra: &[&str]| {
        let o = Command::new(exe())
            .args(["tmi", "check", "--port", &port.to_string(), "--config", cfg.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let game = |port: u16, faults: &[&str]| {
        let out = dir.path().join(format!("game{port}.out"));
        let k = Kill::new(
            Command::new(exe())
                .args([
                    "sim",
                    "serve",
                    "--config",
                    serve.to_str().unwrap(),
                    "--port",
                    &port.to_string(),
                ])
                .args(faults)
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // It says so once it listens (no probe connection to get over).
        wait_for("the game listens", Duration::from_secs(30), || {
            read(&out).contains("TMInterface-protocol simulator on")
        });
        k
    };
    let port = free_port();
    let cfg = config(dir.path(), 1, port, None);
    let g = game(port, &[]);
    let (code, out) = check(port, &cfg, &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("all 7 checks passed"), "{out}");
    drop(g);
    // Nothing listens.
    let (code, out) = check(port, &cfg, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAIL the plugin answers") && out.contains("fix:"), "{out}");
    // A game left at speed 0: no step comes.
    let port = free_port();
    let cfg = config(dir.path(), 1, port, None);
    let g = game(port, &["--stop-steps-after", "0"]);
    let (code, out) = check(port, &cfg, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAIL steps arrive") && out.contains("set speed 1"), "{out}");
    drop(g);
    // A state that is not one.
    let port = free_port();
    let cfg = config(dir.path(), 1, port, None);
    let g = game(port, &["--corrupt-state-after-steps", "0"]);
    let (code, out) = check(port, &cfg, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAIL the state decodes"), "{out}");
    drop(g);
    // --launch: the config's launch starts the game, and ends it afterwards.
    let port = free_port();
    let cfg = config(dir.path(), 1, port, Some(&launch_sim(&serve, &[], "")));
    let (code, out) = check(port, &cfg, &["--launch"]);
    assert_eq!(code, Some(0), "{out}");
    wait_for("the launched game ends", Duration::from_secs(15), || games_on(port).is_empty());
}

/// Two local collectors launching their games, one game killed (SIGKILL) or
/// frozen (SIGSTOP), alternating, 6 times (`RULKA_GAMES_SOAK_FAULTS` for
/// more): each fault is injected once the previous one was seen (its
/// collector said so) and the learner updated twice after it; nothing is
/// duplicated or missing, every fault is counted, no game is left.
/// `RULKA_GAMES_SOAK_KEEP=DIR` keeps the run for `rulka plot`.
#[test]
fn learning_goes_on_through_every_game_fault() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n_faults: usize =
        std::env::var("RULKA_GAMES_SOAK_FAULTS").ok().and_then(|m| m.parse().ok()).unwrap_or(6);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = launched_config(dir.path(), 2, port, &[], "");
    let run = dir.path().join("run");
    let mut t = train(&cfg, dir.path(), &["--max-minutes", "60"]);
    wait_for("both games serve runs", Duration::from_secs(120), || received(&run) >= 10);
    let started = Instant::now();
    let updates = |run: &Path| -> u64 { rows(run).last().map_or(0, |r| r.updates) };
    let mut faults = Vec::new();
    for k in 0..n_faults {
        let p = port + (k % 2) as u16;
        wait_for(&format!("a game on port {p}"), Duration::from_secs(60), || {
            games_on(p).len() == 1
        });
        let game = games_on(p)[0];
        // Serving (not starting up): a run of this collector arrives after it is there.
        let id = k % 2;
        let runs = |run: &Path| rows(run).iter().filter(|r| r.collector == id as u32).count();
        let before = runs(&run);
        wait_for(&format!("game {game} serves"), Duration::from_secs(60), || runs(&run) > before);
        assert_eq!(games_on(p), [game]);
        let (seen, at) = (failures_said(dir.path(), p), updates(&run));
        let sig = if k % 4 < 2 { "-9" } else { "-STOP" };
        signal(game, sig);
        wait_for(&format!("fault {k} ({sig} on {p}) is seen"), Duration::from_secs(60), || {
            failures_said(dir.path(), p) > seen
        });
        wait_for(&format!("two updates after fault {k}"), Duration::from_secs(120), || {
            updates(&run) >= at + 2
        });
        faults.push((started.elapsed().as_secs(), p, sig, at));
    }
    wait_for("both games relaunched", Duration::from_secs(60), || {
        games_on(port).len() == 1 && games_on(port + 1).len() == 1
    });
    signal(t.0.id(), "-INT");
    let status = wait_exit(&mut t.0, Duration::from_secs(120)).0;
    let all = logs(dir.path());
    assert!(status.success(), "{all}");
    if let Ok(keep) = std::env::var("RULKA_GAMES_SOAK_KEEP") {
        let _ = std::fs::remove_dir_all(&keep);
        let _ = Command::new("cp").arg("-r").arg(dir.path()).arg(&keep).status();
    }
    let s = summary(&run);
    let c = &s["counters"];
    println!("faults (s, port, signal, updates then): {faults:?}\n{s}");
    assert_eq!(
        (c["duplicate_trajectories"].as_u64(), c["missing_trajectories"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let (crashes, hangs) = (c["game_crashes"].as_u64().unwrap(), c["game_hangs"].as_u64().unwrap());
    let kills = faults.iter().filter(|f| f.2 == "-9").count() as u64;
    assert!(
        crashes >= kills && hangs >= n_faults as u64 - kills,
        "every fault counted: {s}\n{all}"
    );
    assert!(c["game_launches"].as_u64().unwrap() >= 2 + n_faults as u64, "{s}");
    assert_eq!(c["collector_restarts"], 0, "{s}");
    wait_for("no game left", Duration::from_secs(15), || {
        games_on(port).is_empty() && games_on(port + 1).is_empty()
    });
}

#[test]
fn a_game_started_by_hand_that_does_not_answer_is_named() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), 1, port, None);
    let run = dir.path().join("run");
    let o = Command::new(exe())
        .args(["train", "--config", cfg.to_str().unwrap(), "--max-minutes", "0.15"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", logs(dir.path()));
    let log = read(&run.join("logs/collector0.log"));
    // Said once (at most every 30 s), naming the port, how long, and the remedy.
    assert_eq!(log.matches("not answering for").count(), 1, "{log}");
    assert!(log.contains(&format!("game on port {port}: not answering for 0 s")), "{log}");
    assert!(log.contains("environment.tmi.launch"), "{log}");
    assert_eq!(
        summary(&run)["counters"]["collector_restarts"],
        0,
        "the collector waits, it does not crash"
    );
}

/// `rulka collect` under the trainer, its game started by hand (no
/// `launch`): the game killed, then one that sends a corrupt state, each
/// started again by hand after a pause — the collector says each failure
/// with the port, waits and drives on; it never exits, so the trainer
/// never restarts it (no back-off for a game's fault), and nothing is lost.
#[test]
fn a_game_started_by_hand_that_fails_keeps_its_local_collector_driving() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), 1, port, None);
    let serve = serve_config(dir.path());
    let run = dir.path().join("run");
    let game = |faults: &[&str]| sim_game(Path::new(exe()), &serve, port, faults);
    let log = run.join("logs/collector0.log");
    let said = |what: &str| read(&log).matches(&format!("game on port {port}: {what} (")).count();
    let mut g = game(&[]);
    let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    wait_for("runs on the first game", Duration::from_secs(120), || received(&run) >= 3);
    signal(g.0.id(), "-KILL");
    let _ = g.0.wait();
    wait_for("the killed game said", Duration::from_secs(30), || said("is gone") >= 1);
    std::thread::sleep(Duration::from_secs(2));
    let n = received(&run);
    let mut g = game(&["--corrupt-state-after-steps", "400"]);
    wait_for("runs on the second game", Duration::from_secs(60), || received(&run) > n);
    wait_for("the corrupt state said", Duration::from_secs(60), || said("broke the protocol") >= 1);
    signal(g.0.id(), "-KILL");
    let _ = g.0.wait();
    std::thread::sleep(Duration::from_secs(2));
    let n = received(&run);
    let _g3 = game(&[]);
    wait_for("runs on the third game", Duration::from_secs(60), || received(&run) > n);
    signal(t.0.id(), "-INT");
    let status = wait_exit(&mut t.0, Duration::from_secs(60)).0;
    let all = logs(dir.path());
    assert!(status.success(), "{all}");
    let s = summary(&run);
    let c = &s["counters"];
    assert_eq!(c["collector_restarts"], 0, "the collector waited for its game: {s}\n{all}");
    assert!(c["game_crashes"].as_u64() >= Some(1) && c["game_desyncs"].as_u64() >= Some(1), "{s}");
    assert_eq!(c["game_launches"], 0, "a game started by hand is never launched: {s}");
    assert_eq!(
        (c["duplicate_trajectories"].as_u64(), c["missing_trajectories"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    assert!(read(&log).matches("answers again; driving on").count() >= 2, "{all}");
}

/// Whether process `pid` has libtorch mapped (`/proc/PID/maps`).
fn maps_libtorch(pid: u32) -> bool {
    read(Path::new(&format!("/proc/{pid}/maps"))).contains("libtorch")
}

/// The children of `pid` (every process whose parent it is).
/// Only the learner's process loads libtorch: `rulka train` (handed over to
/// `rulka-torch`, same pid) has it mapped; its local collector (`rulka
/// collect`), the game's guard and the game (`rulka sim serve`) do not —
/// found by pid and parent, each checked in `/proc/PID/maps`.
#[test]
fn only_the_learners_process_maps_libtorch() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = launched_config(dir.path(), 1, port, &[], "");
    let mut t = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    let trainer = t.0.id();
    let run = dir.path().join("run");
    wait_for("a trajectory from the launched game", Duration::from_secs(120), || {
        received(&run) > 0
    });
    let collector = children_of(trainer)
        .into_iter()
        .find(|&p| cmdline(p).contains(" collect "))
        .unwrap_or_else(|| panic!("no collector under the trainer {trainer}"));
    let game = games_on(port);
    assert_eq!(game.len(), 1, "{game:?}");
    let guard = parent_of(game[0]).unwrap();
    assert_eq!(parent_of(guard), Some(collector), "the game's guard is the collector's child");
    assert!(cmdline(guard).contains(rulka_collector::GUARD_ARG), "{}", cmdline(guard));
    assert!(maps_libtorch(trainer), "the learner's process maps libtorch: {}", cmdline(trainer));
    for (what, pid) in [("collector", collector), ("guard", guard), ("game", game[0])] {
        assert!(!maps_libtorch(pid), "the {what} ({}) maps libtorch", cmdline(pid));
    }
    signal(trainer, "-INT");
    let status = wait_exit(&mut t.0, Duration::from_secs(60)).0;
    assert!(status.success(), "{}", logs(dir.path()));
}
