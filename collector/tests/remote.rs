//! `rulka-collector` processes feeding `rulka train --transport nats` as a
//! user runs them (black box, one machine, loopback): three collectors,
//! every trajectory exactly once; a SIGKILLed trainer (its server goes with
//! it) resumed with nothing taken twice, while a running collector takes
//! the resumed trainer's weights though their version is lower; bad
//! credentials, unknown runs and another build's run are refused with exit
//! 2 and a named reason. The binaries are the workspace's
//! (`cargo build` builds `rulka` and `rulka-collector`; `scripts/test` does).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use rulka_test_support::{games_on, wait_exit, Kill};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Trainer runs use every core: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn collector_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rulka-collector"))
}

fn rulka_bin() -> PathBuf {
    let p = collector_bin().with_file_name("rulka");
    assert!(
        p.exists(),
        "{} not built: cargo build -p rulka -p rulka-torch (scripts/test builds them)",
        p.display()
    );
    p
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn config(dir: &Path, local: u32, frames_note: &str) -> PathBuf {
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "# {frames_note}\ntraining: {{algorithm: ppo, run_dir: {run}, optimizer: adam, lr_schedule: [[0, 5.0e-4]], checkpoint_every_s: 1}}\n\
         nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
         ppo: {{rollout_steps_per_update: 256, update_epochs: 2, num_minibatches: 2}}\n\
         environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
         collectors: {{count: {local}, chunk_steps: 32, ring_chunks: 16, eval_every_n_rollouts: 4, heartbeat_timeout_ms: 10000}}\n\
         inference: {{intra_op_threads: {threads}}}\n\
         transport: {{kind: nats, nats: {{run: testrun}}}}\n",
        run = dir.join("run").display()
    );
    let p = dir.join("c.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

fn run_json(run: &Path, limit: Duration) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(run.join("run.json")) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&t) {
                if !v["nats"].is_null() {
                    return v;
                }
            }
        }
        assert!(t0.elapsed() < limit, "no run.json with a NATS server");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `(collector, trajectory)` of every received trajectory in trajectories.csv
/// (none before the trainer has created the file).
fn received(run: &Path) -> Vec<(u32, u64)> {
    let rows = rulka_trainer::read_trajectories_so_far(run).unwrap();
    rows.iter().map(|r| (r.collector, r.trajectory)).collect()
}

/// Waits (up to 120 s) until `run` has recorded `rows` trajectories and
/// written a checkpoint.
fn wait_for_rows_and_a_checkpoint(run: &Path, rows: usize) {
    let t0 = Instant::now();
    while received(run).len() < rows || !run.join("state/LATEST").exists() {
        assert!(t0.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn spawn_collector(info: &serde_json::Value, id: u32, log: &Path) -> Kill {
    spawn_collector_with(info, id, log, &[])
}

/// [`spawn_collector`] with more arguments (`--env tmi --port P`).
fn spawn_collector_with(info: &serde_json::Value, id: u32, log: &Path, more: &[&str]) -> Kill {
    let n = &info["nats"];
    let f = std::fs::File::create(log).unwrap();
    Kill::new(
        Command::new(collector_bin())
            .args(["--connect", n["url"].as_str().unwrap(), "--run", n["run"].as_str().unwrap()])
            .args(["--id", &id.to_string(), "--user", "collector"])
            .args(["--password", n["password"].as_str().unwrap(), "--wait-s", "30"])
            .arg("--maps-dir")
            .arg(log.with_extension("maps"))
            .args(more)
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .unwrap(),
    )
}

/// `rulka train --config CFG ARGS…`, its stderr into `DIR/train.err`.
fn train(cfg: &Path, dir: &Path, args: &[&str]) -> Kill {
    Kill::new(
        Command::new(rulka_bin())
            .args(["train", "--config", cfg.to_str().unwrap()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("train.err")).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Adds an `environment.tmi` section to the run config `cfg` (which drives
/// the simulator): track seed 0 as its map, a hang found in 3 s (a game
/// that accepts a connection has 10 s to say hello), so that a
/// collector started with `--env tmi --port P` drives a `rulka sim serve`
/// game instead. Returns a config for that game (`rulka sim serve --config`).
fn with_a_game_map(dir: &Path, cfg: &Path) -> PathBuf {
    let npy = dir.join("track0.npy");
    let o = Command::new(rulka_bin())
        .args(["sim", "export-map", "--seed", "0", "--track", "easy", "-o"])
        .arg(&npy)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let yaml = std::fs::read_to_string(cfg).unwrap().replace(
        "environment: {",
        &format!(
            "environment: {{tmi: {{timeout_ms: 10000, timeout_during_run_ms: 3000, timeout_between_runs_ms: 3000, \
               maps: [{{name: t0, map_path: '0', zone_centers: {}}}]}}, ",
            npy.display()
        ),
    );
    std::fs::write(cfg, yaml).unwrap();
    let serve = dir.join("serve.yaml");
    std::fs::write(
        &serve,
        "nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
         environment: {n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {track: easy, track_seeds: [0]}}\n",
    )
    .unwrap();
    serve
}

#[test]
fn three_collector_processes_deliver_every_trajectory_exactly_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 0, "remote collectors only");
    let mut trainer = Kill::new(
        Command::new(rulka_bin())
            .args(["train", "--config", cfg.to_str().unwrap(), "--max-frames", "5000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let run = dir.path().join("run");
    let info = run_json(&run, Duration::from_secs(60));
    let collectors: Vec<Kill> =
        (0..3).map(|i| spawn_collector(&info, i, &dir.path().join(format!("c{i}.log")))).collect();
    let status = wait_exit(&mut trainer.0, Duration::from_secs(180)).0;
    let mut err = String::new();
    if let Some(mut e) = trainer.0.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).unwrap();
    }
    assert!(status.success(), "{err}");
    drop(collectors);
    let s: serde_json::Value = rulka_trainer::RunDir::new(&run).summary().unwrap();
    assert_eq!(s["counters"]["duplicate_trajectories"], 0, "{s}");
    assert_eq!(s["counters"]["missing_trajectories"], 0, "{s}");
    assert!(s["frames"].as_u64().unwrap() >= 5000, "{s}");
    let got = received(&run);
    let unique: HashSet<_> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "every trajectory exactly once");
    let from: HashSet<u32> = got.iter().map(|t| t.0).collect();
    assert_eq!(from, HashSet::from([0, 1, 2]), "all three collectors delivered: {err}");
    for i in 0..3 {
        let log = std::fs::read_to_string(dir.path().join(format!("c{i}.log"))).unwrap();
        assert!(log.contains("joined run testrun"), "{log}");
    }
}

#[test]
fn a_sigkilled_trainer_resumes_with_nothing_taken_twice() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1, "one local collector");
    let run = dir.path().join("run");
    let mut trainer = Kill::new(
        Command::new(rulka_bin())
            .args(["train", "--config", cfg.to_str().unwrap(), "--max-frames", "10000000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let info = run_json(&run, Duration::from_secs(60));
    // A remote collector too: it must survive the trainer's death and reconnect.
    let remote = spawn_collector(&info, 5, &dir.path().join("remote.log"));
    wait_for_rows_and_a_checkpoint(&run, 20);
    assert!(Command::new("kill")
        .args(["-9", &trainer.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    let _ = trainer.0.wait();
    let before = received(&run).len();
    // The trainer's server does not outlive it (the remote collector holds its
    // chunks meanwhile).
    let server = info["nats"]["server_pid"].as_u64().unwrap();
    let t0 = Instant::now();
    while std::fs::read_to_string(format!("/proc/{server}/stat")).is_ok_and(|s| !s.contains(") Z"))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "nats-server {server} outlived its trainer"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let o = Command::new(rulka_bin())
        .args(["train", "--resume", run.to_str().unwrap(), "--max-minutes", "0.4"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("trainer epoch 1"), "{err}");
    let resumed_at: u64 = err
        .split("resumed ")
        .nth(1)
        .and_then(|l| l.split(" frames, ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("no resume line: {err}"));
    drop(remote);
    // The running collector took the resumed trainer's weights although their
    // version was lower than the crashed trainer's last (its log says so).
    let log = std::fs::read_to_string(dir.path().join("remote.log")).unwrap();
    let taken: u64 = log
        .split("weights v")
        .find_map(|l| l.split_once(" of trainer epoch 1").and_then(|(v, _)| v.parse().ok()))
        .unwrap_or_else(|| panic!("the collector never took epoch 1 weights: {log}"));
    assert!(taken >= resumed_at, "took v{taken}, the resumed trainer started at v{resumed_at}");
    let s: serde_json::Value = rulka_trainer::RunDir::new(&run).summary().unwrap();
    let c5 = s["collectors"].as_array().unwrap().iter().find(|c| c["id"] == 5).cloned();
    assert_eq!(c5.as_ref().map(|c| c["weights"][0].clone()), Some(1.into()), "{s}");
    let got = received(&run);
    assert!(
        got.len() > before + 5,
        "the resumed run received more ({before} → {}): {err}",
        got.len()
    );
    let unique: HashSet<_> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "a trajectory taken twice");
    assert!(got.iter().any(|t| t.0 == 5), "the remote collector delivered");
    assert_eq!(s["counters"]["duplicate_trajectories"], 0, "{s}");
}

/// The trainer SIGKILLed at the two moments a crash could lose or repeat a
/// trajectory — right after a poll brought trajectories, before recording
/// them, and right after recording them, before acknowledging them — six
/// times, alternating, each at a random poll, resumed each time; a remote
/// collector drives throughout. Every trajectory it sent is in
/// `trajectories.csv` exactly once, with no gap in its numbers, and a
/// trainer after a kill past the recording says it met trajectories
/// recorded before it started. (The `rulka` binary must be built:
/// `cargo build -p rulka -p rulka-torch`; scripts/test builds them.)
#[test]
fn a_trainer_killed_between_receiving_recording_and_acknowledging_records_everything_once() {
    use std::os::unix::process::ExitStatusExt as _;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 0, "one remote collector");
    // The server on a port of its own, as game PCs are told it: every
    // resumed trainer's server listens there again.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let yaml = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        yaml.replace("{run: testrun}", &format!("{{run: testrun, port: {port}}}")),
    )
    .unwrap();
    let run = dir.path().join("run");
    // A first trainer, stopped cleanly once it has a checkpoint to resume.
    let mut first = Kill::new(
        Command::new(rulka_bin())
            .args(["train", "--config", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("train-first.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let info = run_json(&run, Duration::from_secs(60));
    let remote = spawn_collector(&info, 3, &dir.path().join("remote.log"));
    wait_for_rows_and_a_checkpoint(&run, 5);
    assert!(Command::new("kill")
        .args(["-INT", &first.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(wait_exit(&mut first.0, Duration::from_secs(60)).0.success());
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let mut redelivered_after = Vec::new();
    for kill in 0..6 {
        let stage = if kill % 2 == 0 { "received" } else { "recorded" };
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let at = 1 + rng % 4;
        let log = dir.path().join(format!("train{kill}.log"));
        let mut t = Kill::new(
            Command::new(rulka_bin())
                .args(["train", "--resume", run.to_str().unwrap()])
                .env("RULKA_TEST_KILL_AT", format!("{stage}:{at}"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = t.0.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > Duration::from_secs(180) {
                let remote_log = std::fs::read_to_string(dir.path().join("remote.log"));
                panic!(
                    "kill {kill} ({stage}:{at}): the trainer ran 180 s\n{}\n--- remote:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default(),
                    remote_log.unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(status.signal(), Some(9), "kill {kill} ({stage}:{at}): {status}\n{text}");
        assert!(text.contains("RULKA_TEST_KILL_AT: SIGKILL now"), "{text}");
        if kill > 0 && text.contains("was recorded before this trainer started") {
            redelivered_after.push(kill - 1);
        }
    }
    let log = dir.path().join("train-last.log");
    let o = Command::new(rulka_bin())
        .args(["train", "--resume", run.to_str().unwrap(), "--max-minutes", "0.3"])
        .stderr(std::fs::File::create(&log).unwrap())
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(o.status.success(), "{text}");
    if text.contains("was recorded before this trainer started") {
        redelivered_after.push(5);
    }
    drop(remote);
    let got = received(&run);
    let unique: HashSet<_> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "a trajectory recorded twice");
    let mut seq: Vec<u64> = got
        .iter()
        .map(|&(c, t)| {
            assert_eq!(c, 3, "only the remote collector drives");
            rulka_shm::TrajectoryId::unpack(c, t).sequence
        })
        .collect();
    seq.sort_unstable();
    assert!(seq.len() > 20, "{} trajectories", seq.len());
    let gaps: Vec<u64> =
        (0..=seq[seq.len() - 1]).filter(|s| seq.binary_search(s).is_err()).collect();
    assert!(gaps.is_empty(), "trajectories lost to the kills: {gaps:?}");
    // Kills after recording left recorded, unacknowledged trajectories that
    // came again to a later trainer (the next one, unless that one was
    // killed at its first poll, before recording anything).
    assert!(
        redelivered_after.first().is_some_and(|&k| k >= 1),
        "no trainer met trajectories recorded before it (after kills {redelivered_after:?})"
    );
}

#[test]
fn bad_credentials_unknown_runs_and_other_builds_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let srv = rulka_transport::LocalNatsServer::start(rulka_transport::NatsServerSpec {
        dir: dir.path().join("srv"),
        host: "127.0.0.1".into(),
        port: 0,
        users: Some(rulka_transport::NatsUsers::random()),
        runs: vec!["other".into()],
        tls: None,
        extra: String::new(),
        tied_to_parent: false,
    })
    .unwrap();
    let collector = |extra: &[&str]| {
        Command::new(collector_bin())
            .args(["--connect", &srv.url(), "--id", "0", "--wait-s", "1"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = collector(&["--run", "other", "--user", "collector", "--password", "wrong"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("authorization"), "{}", text(&o.stderr));
    let pw = srv.collector_options("x").password.unwrap();
    let o = collector(&["--run", "nosuchrun", "--user", "collector", "--password", &pw]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("run nosuchrun not found"), "{}", text(&o.stderr));
    // A run made by a build whose chunks differ.
    let cfg = rulka_config::Config::default();
    let record = rulka_transport::RunRecord {
        run: "other".into(),
        schema_hash: "0000000000000000".into(),
        network_hash: cfg.network_hash(),
        config_yaml: cfg.to_yaml(),
        rulka_version: "0.0.0".into(),
    };
    let limits = rulka_transport::StreamLimits {
        max_bytes: 1 << 20,
        max_per_collector: -1,
        ack_wait: Duration::from_secs(30),
    };
    let link = rulka_transport::NatsLink::connect(&srv.trainer_options("t")).unwrap();
    let _t = rulka_transport::NatsTrainer::open(link, &record, limits, true).unwrap();
    let o = collector(&["--run", "other", "--user", "collector", "--password", &pw]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(e.contains("schema mismatch with run other") && e.contains("0000000000000000"), "{e}");
}

/// A game PC needs no libtorch: the binary does not link it.
#[test]
fn the_collector_binary_does_not_link_libtorch() {
    let o = Command::new("ldd").arg(collector_bin()).output().unwrap();
    let libs = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!libs.to_lowercase().contains("torch"), "{libs}");
    assert!(!libs.contains("libc10"), "{libs}");
}

#[test]
fn slots_drive_one_launched_game_each_and_leave_none() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let base = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let npy = dir.path().join("track0.npy");
    let o = Command::new(rulka_bin())
        .args(["sim", "export-map", "--seed", "0", "--track", "easy", "-o"])
        .arg(&npy)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let serve = dir.path().join("serve.yaml");
    std::fs::write(
        &serve,
        "nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
         environment: {n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {track: easy, track_seeds: [0]}}\n",
    )
    .unwrap();
    let cfg = config(dir.path(), 0, "two slots, games launched").to_str().unwrap().to_string();
    let yaml = std::fs::read_to_string(&cfg).unwrap().replace(
        "environment: {",
        &format!(
            "environment: {{kind: tmi, tmi: {{base_port: {base}, timeout_ms: 3000, \
               maps: [{{name: t0, map_path: '0', zone_centers: {}}}], \
               launch: {{command: ['{}', sim, serve, --config, '{}', --port, '{{port}}'], startup_timeout_s: 30, kill_grace_s: 2}}}}, ",
            npy.display(),
            rulka_bin().display(),
            serve.display()
        ),
    );
    std::fs::write(&cfg, yaml).unwrap();
    let run = dir.path().join("run");
    let mut trainer = Kill::new(
        Command::new(rulka_bin())
            .args(["train", "--config", &cfg, "--max-minutes", "10"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let info = run_json(&run, Duration::from_secs(60));
    let n = &info["nats"];
    let log = dir.path().join("slots.log");
    let mut collector = Kill::new(
        Command::new(collector_bin())
            .args(["--connect", n["url"].as_str().unwrap(), "--run", n["run"].as_str().unwrap()])
            .args(["--id", "4", "--slots", "2", "--user", "collector"])
            .args(["--password", n["password"].as_str().unwrap(), "--wait-s", "30"])
            .arg("--maps-dir")
            .arg(dir.path().join("maps"))
            .arg("--logs")
            .arg(dir.path().join("logs"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    // Ids 4 and 5 each drive their own game, on base_port + 4 and + 5.
    let t0 = Instant::now();
    loop {
        let from: HashSet<u32> = received(&run).iter().map(|t| t.0).collect();
        if from.contains(&4) && from.contains(&5) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!((games_on(base + 4).len(), games_on(base + 5).len()), (1, 1));
    assert!(
        dir.path().join("logs/game-4.log").exists() && dir.path().join("logs/game-5.log").exists()
    );
    // Ctrl-C: both slots stop, and both games with them.
    assert!(Command::new("kill")
        .args(["-INT", &collector.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = wait_exit(&mut collector.0, Duration::from_secs(60)).0;
    let l = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{l}");
    let t0 = Instant::now();
    while !(games_on(base + 4).is_empty() && games_on(base + 5).is_empty()) {
        assert!(t0.elapsed() < Duration::from_secs(15), "games left after the collector: {l}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        l.contains("[rulka-collector 4] joined") && l.contains("[rulka-collector 5] joined"),
        "{l}"
    );
    let _ = Command::new("kill").args(["-INT", &trainer.0.id().to_string()]).status();
    let _ = wait_exit(&mut trainer.0, Duration::from_secs(60)).0;
}

/// The number before `after` in the last line of `log` that has it
/// (`… 7 chunks undelivered at exit …`).
fn number_before(log: &str, after: &str) -> Option<u64> {
    let l = log.lines().rev().find(|l| l.contains(after))?;
    l.split(after).next()?.split(' ').rev().find(|w| !w.is_empty())?.parse().ok()
}

/// A collector stopped (Ctrl-C) while the server hangs says how many chunks
/// its outbox still holds and goes on delivering them: once the server
/// answers again they all arrive (0 undelivered at exit, the trainer has its
/// trajectories); a second Ctrl-C ends it at once, saying how many it could
/// not deliver. Delivering is checked on both paths: a collector driving a
/// game over TMInterface (`rulka sim serve`, started by hand as on a game PC)
/// and one driving the simulator.
#[test]
fn a_stopping_collector_delivers_its_outbox_or_exits_at_a_second_ctrl_c() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 0, "remote collectors only");
    // A chunk the server hands to a pull that timed out (the server hung)
    // comes again after the ack wait: 10 s here (60 s by default).
    let yaml = std::fs::read_to_string(&cfg).unwrap();
    let yaml = yaml.replace("{run: testrun}", "{run: testrun, ack_wait_s: 10}");
    std::fs::write(&cfg, yaml).unwrap();
    let serve = with_a_game_map(dir.path(), &cfg);
    let run = dir.path().join("run");
    let mut trainer = train(&cfg, dir.path(), &["--max-frames", "100000000"]);
    let info = run_json(&run, Duration::from_secs(60));
    let server = info["nats"]["server_pid"].as_u64().unwrap().to_string();
    let wait_log = |log: &Path, what: &str, limit: Duration| {
        let t0 = Instant::now();
        while !std::fs::read_to_string(log).unwrap_or_default().contains(what) {
            assert!(t0.elapsed() < limit, "{what:?} not in {}", log.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    for (id, on_a_game, second_ctrl_c) in [(5u32, true, false), (6, false, false), (7, false, true)]
    {
        let log = dir.path().join(format!("c{id}.log"));
        // The game a user started on the game PC: it outlives the collector.
        let mut game = None;
        let mut c = if on_a_game {
            let port = rulka_test_support::free_port();
            game = Some(rulka_test_support::sim_game(&rulka_bin(), &serve, port, &[]));
            spawn_collector_with(&info, id, &log, &["--env", "tmi", "--port", &port.to_string()])
        } else {
            spawn_collector(&info, id, &log)
        };
        let t0 = Instant::now();
        while !received(&run).iter().any(|t| t.0 == id) {
            assert!(t0.elapsed() < Duration::from_secs(90), "collector {id} never delivered");
            std::thread::sleep(Duration::from_millis(100));
        }
        signal("-STOP", &server);
        // The first chunk waits its 3 s deadline, those behind it queue at once.
        std::thread::sleep(Duration::from_secs(6));
        signal("-INT", &c.0.id().to_string());
        wait_log(&log, "still in the outbox", Duration::from_secs(30));
        let text = std::fs::read_to_string(&log).unwrap();
        let held = text
            .split("stopping: delivering the ")
            .nth(1)
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap();
        assert!(held > 0, "{text}");
        if second_ctrl_c {
            let t0 = Instant::now();
            signal("-INT", &c.0.id().to_string());
            let status = wait_exit(&mut c.0, Duration::from_secs(10)).0;
            // At once, but a publish in flight has its deadline (CHUNK_DEADLINE, 3 s).
            let took = t0.elapsed();
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(took < Duration::from_secs(5), "{took:?} after the second Ctrl-C: {text}");
            assert!(status.success(), "{text}");
            let left = number_before(&text, " chunks undelivered at exit").unwrap();
            assert!(left > 0 && left <= held, "held {held}, left {left}: {text}");
            signal("-CONT", &server);
        } else {
            // Still delivering (not exited) while the server hangs.
            std::thread::sleep(Duration::from_secs(2));
            assert!(c.0.try_wait().unwrap().is_none(), "exited while its outbox was held");
            signal("-CONT", &server);
            let status = wait_exit(&mut c.0, Duration::from_secs(60)).0;
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(status.success(), "{text}");
            assert_eq!(number_before(&text, " chunks undelivered at exit"), Some(0), "{text}");
            // What it delivered at the stop reaches the trainer: its trajectories
            // are numbered 0..n without a gap, and as many as it counted written.
            let rollouts = number_before(&text, " rollouts (").unwrap();
            let t0 = Instant::now();
            let mine = || {
                let mut ids: Vec<u64> =
                    received(&run).into_iter().filter(|t| t.0 == id).map(|t| t.1).collect();
                ids.sort_unstable();
                ids
            };
            while (mine().len() as u64) < rollouts {
                if t0.elapsed() > Duration::from_secs(45) {
                    // Lost: the trainer's counters say where.
                    signal("-INT", &trainer.0.id().to_string());
                    wait_exit(&mut trainer.0, Duration::from_secs(60));
                    let summary = std::fs::read_to_string(run.join("summary.json")).unwrap();
                    panic!("{} of {rollouts}: {:?}\n{text}\n{summary}", mine().len(), mine());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let got = mine();
            assert_eq!(got, (0..rollouts).collect::<Vec<_>>(), "{text}");
            if let Some(g) = game.as_mut() {
                assert!(
                    g.0.try_wait().unwrap().is_none(),
                    "the user's game ended with the collector"
                );
            }
        }
    }
    signal("-INT", &trainer.0.id().to_string());
    assert!(wait_exit(&mut trainer.0, Duration::from_secs(60)).0.success());
}

/// Sends `sig` (`-STOP`, `-INT`…) to process `pid`.
fn signal(sig: &str, pid: &str) {
    assert!(Command::new("kill").args([sig, pid]).status().unwrap().success());
}

/// A trainer of remote collectors only, and collector `id` (logging to
/// `cID.log`) once it has delivered a trajectory: `(trainer, run.json,
/// collector, its log)`.
fn a_collector_delivering(dir: &Path, id: u32) -> (Kill, serde_json::Value, Kill, PathBuf) {
    let cfg = config(dir, 0, "remote collectors only");
    let run = dir.join("run");
    let trainer = train(&cfg, dir, &["--max-frames", "100000000"]);
    let info = run_json(&run, Duration::from_secs(60));
    let log = dir.join(format!("c{id}.log"));
    let c = spawn_collector(&info, id, &log);
    let t0 = Instant::now();
    while !received(&run).iter().any(|t| t.0 == id) {
        assert!(t0.elapsed() < Duration::from_secs(90), "collector {id} never delivered");
        std::thread::sleep(Duration::from_millis(100));
    }
    (trainer, info, c, log)
}

/// A collector stopped while the run's stream is full — the trainer takes
/// nothing (frozen here, as in a long update on a loaded machine) — keeps
/// delivering its outbox past the 10 s a silent server gets: the server
/// answers ("full"), so it waits for the trainer, and once the trainer
/// takes chunks again every one arrives (0 undelivered at exit).
#[test]
fn a_stopping_collector_waits_for_a_trainer_behind_a_full_stream() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (mut trainer, info, mut c, log) = a_collector_delivering(dir.path(), 8);
    let (server, tpid) =
        (info["nats"]["server_pid"].as_u64().unwrap().to_string(), trainer.0.id().to_string());
    // The trainer takes nothing: the stream fills (its per-collector cap).
    signal("-STOP", &tpid);
    std::thread::sleep(Duration::from_secs(4));
    // A backlog in the outbox: the server hangs for a while, chunks queue.
    signal("-STOP", &server);
    std::thread::sleep(Duration::from_secs(6));
    signal("-INT", &c.0.id().to_string());
    signal("-CONT", &server);
    // Longer than a silent server is given: the collector must still be there.
    std::thread::sleep(Duration::from_secs(15));
    let text = std::fs::read_to_string(&log).unwrap();
    let still = c.0.try_wait().unwrap().is_none();
    signal("-CONT", &tpid);
    assert!(still, "gave up on a server that answered 'full':\n{text}");
    assert!(text.contains("still in the outbox"), "{text}");
    let status = wait_exit(&mut c.0, Duration::from_secs(60)).0;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{text}");
    assert_eq!(number_before(&text, " chunks undelivered at exit"), Some(0), "{text}");
    signal("-INT", &tpid);
    assert!(wait_exit(&mut trainer.0, Duration::from_secs(60)).0.success());
}

/// A collector stopped while the server hangs for good gives up after 10 s
/// without a chunk delivered (not the whole 60 s it gives a server that
/// answers), saying how many chunks it could not deliver.
#[test]
fn a_stopping_collector_gives_up_on_a_silent_server_after_10_s() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (mut trainer, info, mut c, log) = a_collector_delivering(dir.path(), 9);
    let server = info["nats"]["server_pid"].as_u64().unwrap().to_string();
    signal("-STOP", &server);
    std::thread::sleep(Duration::from_secs(6));
    let stopped = Instant::now();
    signal("-INT", &c.0.id().to_string());
    let status = wait_exit(&mut c.0, Duration::from_secs(70)).0;
    let took = stopped.elapsed();
    signal("-CONT", &server);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{text}");
    assert!(text.contains("still in the outbox"), "{text}");
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(40),
        "exited {took:?} after the Ctrl-C (10 s of silence end the delivery): {text}"
    );
    assert!(number_before(&text, " chunks undelivered at exit").is_some_and(|n| n > 0), "{text}");
    signal("-INT", &trainer.0.id().to_string());
    assert!(wait_exit(&mut trainer.0, Duration::from_secs(60)).0.success());
}

/// A game started by hand on the game PC (`--env tmi --port P`, no
/// `launch`) that exits, hangs, closes its socket mid-message, sends a
/// corrupt state, is frozen and is killed — started again by hand after a
/// pause each time — leaves its collector driving: it says each failure
/// once with the port, waits, drives on within seconds of the game's
/// return, and never exits; every trajectory arrives once, none missing,
/// the runs cut short counted incomplete, the failures counted by kind.
#[test]
fn a_hand_started_game_failing_in_every_way_leaves_its_collector_driving() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 0, "a remote collector, its game started by hand");
    let serve = with_a_game_map(dir.path(), &cfg);
    let run = dir.path().join("run");
    let mut trainer = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    let info = run_json(&run, Duration::from_secs(60));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = dir.path().join("c2.log");
    let mut c =
        spawn_collector_with(&info, 2, &log, &["--env", "tmi", "--port", &port.to_string()]);
    let (game, drove_after) = common::games_fail_in_turn(
        &rulka_bin(),
        &serve,
        port,
        &run,
        2,
        &mut c.0,
        &log,
        &common::EVERY_FAILURE,
        400, // run steps: runs last at most 120 (6 s) here
        Duration::from_secs(60),
    );
    // Within seconds of each game's start (a rollout is at most 6 s of race time).
    assert!(drove_after.iter().all(|&s| s < 20.0), "{drove_after:?}");
    // Frozen once more: the collector waits on a game that accepts connections
    // and says nothing for 10 s; Ctrl-C ends that wait at once.
    let hangs = |l: &str| l.matches(&format!("game on port {port}: stopped answering (")).count();
    let before = hangs(&std::fs::read_to_string(&log).unwrap());
    assert!(Command::new("kill")
        .args(["-STOP", &game.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    while hangs(&std::fs::read_to_string(&log).unwrap()) == before {
        assert!(t0.elapsed() < Duration::from_secs(30), "the last freeze was never said");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    assert!(Command::new("kill").args(["-INT", &c.0.id().to_string()]).status().unwrap().success());
    let status = wait_exit(&mut c.0, Duration::from_secs(60)).0;
    let took = t0.elapsed();
    let l = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{l}");
    assert!(
        took < Duration::from_secs(4),
        "Ctrl-C while waiting for a frozen game took {took:?}: {l}"
    );
    assert!(!l.contains("panicked"), "{l}");
    assert!(l.matches("answers again; driving on").count() >= 6, "{l}");
    // Every game served runs before it failed: no failing streak, no pause.
    assert!(!l.contains("times in a row"), "{l}");
    let rollouts = number_before(&l, " rollouts (").unwrap();
    // The trainer reads the collectors' records every 3 s (ALIVE_EVERY) and
    // writes summary.json with every checkpoint (each second here): the last
    // hang reaches it within seconds.
    let t0 = Instant::now();
    let hangs_in_summary = || {
        let t = std::fs::read_to_string(run.join("summary.json")).unwrap_or_default();
        let s = serde_json::from_str::<serde_json::Value>(&t).unwrap_or_default();
        s["counters"]["game_hangs"].as_u64().unwrap_or(0)
    };
    while hangs_in_summary() < 3 {
        assert!(t0.elapsed() < Duration::from_secs(15), "the hangs never reached summary.json");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(Command::new("kill")
        .args(["-INT", &trainer.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(wait_exit(&mut trainer.0, Duration::from_secs(60)).0.success());
    let s: serde_json::Value = rulka_trainer::RunDir::new(&run).summary().unwrap();
    let n = &s["counters"];
    assert_eq!(
        (n["duplicate_trajectories"].as_u64(), n["missing_trajectories"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    // Each failure cut a run short: incomplete when it had sent a chunk (32
    // steps), never missing.
    let cut = n["incomplete_dropped"].as_u64().unwrap();
    assert!((1..=7).contains(&cut), "{cut} incomplete: {s}");
    let kinds = (n["game_hangs"].as_u64(), n["game_crashes"].as_u64(), n["game_desyncs"].as_u64());
    assert!(
        matches!(kinds, (Some(h), Some(c), Some(d)) if h >= 3 && c >= 3 && d >= 1),
        "3 hangs, 3 crashes, 1 desync at least: {kinds:?} {s}\n{l}"
    );
    let mut ids = common::recorded_from(&run, 2);
    ids.sort_unstable();
    let n_ids = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n_ids, "a trajectory recorded twice");
    assert!(ids.len() as u64 >= rollouts, "{} recorded, {rollouts} written: {l}", ids.len());
}

/// A game started by hand that fails before it serves a whole run, again
/// and again (a state that is never a state): the collector says each
/// failure, with the streak and the pause before the next try, which grows
/// 2, 4, 8 s; it never exits and never loops tightly.
#[test]
fn a_hand_started_game_failing_at_once_is_retried_after_a_growing_pause() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 0, "a remote collector, its game broken");
    let serve = with_a_game_map(dir.path(), &cfg);
    let run = dir.path().join("run");
    let _trainer = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    let info = run_json(&run, Duration::from_secs(60));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _game = rulka_test_support::sim_game(
        &rulka_bin(),
        &serve,
        port,
        &["--corrupt-state-after-steps", "0"],
    );
    let log = dir.path().join("c4.log");
    let mut c =
        spawn_collector_with(&info, 4, &log, &["--env", "tmi", "--port", &port.to_string()]);
    let mut at = Vec::new();
    let t0 = Instant::now();
    for n in 1..=3u32 {
        let text =
            format!("failed before a whole run {n} times in a row: next try in {} s", 1u64 << n);
        while !std::fs::read_to_string(&log).unwrap().contains(&text) {
            assert!(
                c.0.try_wait().unwrap().is_none(),
                "exited: {}",
                std::fs::read_to_string(&log).unwrap()
            );
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{text:?} never said: {}",
                std::fs::read_to_string(&log).unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        at.push(Instant::now());
    }
    // The pauses: 2 s after the first failure, 4 s after the second.
    let gaps: Vec<f64> = at.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
    assert!(gaps[0] >= 1.8 && gaps[1] >= 3.8, "{gaps:?}");
    let l = std::fs::read_to_string(&log).unwrap();
    assert_eq!(l.matches(&format!("game on port {port}: broke the protocol (")).count(), 3, "{l}");
    assert!(Command::new("kill").args(["-INT", &c.0.id().to_string()]).status().unwrap().success());
    assert!(wait_exit(&mut c.0, Duration::from_secs(30)).0.success());
}
