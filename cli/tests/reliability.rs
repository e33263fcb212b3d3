//! `rulka train --transport nats` when the broker fails, as a user runs it
//! (black box, real processes, a real `nats-server`): its own server
//! SIGKILLed mid-run is restarted and training ends at its time limit with
//! nothing lost or duplicated; an external server that dies for good does
//! not hold the trainer past its limit; SIGINT while the broker is down
//! stops it within 10 s, and a second SIGINT at once with a valid
//! checkpoint; Ctrl-C to the whole process group (a terminal's) stops it
//! cleanly, its server last.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rulka_test_support::{signal, wait_exit, Kill};
use rulka_transport::{LocalNatsServer, NatsServerSpec};

/// Trainer runs use every core: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A small, fast NATS run: easy tracks, a small network, 2 local collectors,
/// a checkpoint every 2 s.
fn config(dir: &Path, transport: &str) -> PathBuf {
    config_every(dir, transport, 2)
}

/// [`config`] with a checkpoint every `checkpoint_every_s`.
fn config_every(dir: &Path, transport: &str, checkpoint_every_s: u64) -> PathBuf {
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "training: {{algorithm: ppo, run_dir: {run}, optimizer: adam, lr_schedule: [[0, 5.0e-4]], checkpoint_every_s: {checkpoint_every_s}}}\n\
         nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
         ppo: {{rollout_steps_per_update: 256, update_epochs: 2, num_minibatches: 2}}\n\
         environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
         collectors: {{count: 2, chunk_steps: 32, ring_chunks: 16, eval_every_n_rollouts: 4, heartbeat_timeout_ms: 20000}}\n\
         inference: {{intra_op_threads: {threads}}}\n\
         transport: {transport}\n",
        run = dir.join("run").display()
    );
    let p = dir.join("c.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

fn trainer(args: &[&str], log: &Path, own_group: bool) -> Kill {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rulka"));
    cmd.arg("train")
        .args(args)
        .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
        .stderr(std::fs::File::create(log).unwrap());
    if own_group {
        cmd.process_group(0);
    }
    Kill::new(cmd.spawn().unwrap())
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() >= limit {
            // The logs of the run under test say why.
            for l in what.split(": ").skip(1) {
                eprintln!("--- {l}:\n{}", read(Path::new(l)));
            }
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn summary(run: &Path) -> serde_json::Value {
    rulka_trainer::RunDir::new(run).summary().unwrap()
}

fn run_json(run: &Path) -> serde_json::Value {
    let mut v = serde_json::Value::Null;
    wait_for("run.json with a NATS server", Duration::from_secs(90), || {
        v = serde_json::from_str(&read(&run.join("run.json"))).unwrap_or_default();
        !v["nats"].is_null()
    });
    v
}

/// Trajectories in trajectories.csv.
fn received(run: &Path) -> usize {
    rulka_trainer::read_trajectories_so_far(run).unwrap().len()
}

fn alive(pid: u32) -> bool {
    rulka_shm::process_alive(pid)
}

/// The checkpoint LATEST names, and that it resumes (the proof it is valid).
fn assert_checkpoint_resumes(run: &Path) {
    let stopped = summary(run);
    let latest = read(&run.join("state/LATEST"));
    assert!(run.join("state").join(latest.trim()).is_dir(), "LATEST names {latest:?}");
    let o = Command::new(env!("CARGO_BIN_EXE_rulka"))
        .args(["train", "--resume", run.to_str().unwrap(), "--max-frames", "1"])
        .args(["--transport", "shm"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "resuming the last checkpoint: {err}");
    // The checkpoint is the stopped run's last state: the frames and updates
    // its summary.json reports (read before the resume rewrites it).
    let (frames, updates) = (stopped["frames"].as_u64(), stopped["updates"].as_u64());
    let line = format!(": {} frames, {} updates", frames.unwrap_or(0), updates.unwrap_or(0));
    assert!(
        err.lines().any(|l| l.starts_with("[rulka train] resumed ") && l.ends_with(&line)),
        "the resumed state is not the stopped run's last ({line}): {err}"
    );
}

fn external_server(dir: &Path) -> LocalNatsServer {
    LocalNatsServer::start(NatsServerSpec {
        dir: dir.join("ext-nats"),
        host: "127.0.0.1".into(),
        port: 0,
        users: None,
        runs: vec![],
        tls: None,
        extra: String::new(),
        tied_to_parent: false,
    })
    .unwrap()
}

#[test]
fn a_sigkilled_local_broker_is_restarted_and_the_run_ends_at_its_time_limit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "{kind: nats}");
    let run = dir.path().join("run");
    let log = dir.path().join("train.log");
    // Its events are over by about 10 s on an idle machine (the restart
    // waits out its back-off); the limit leaves them 3.5× that.
    let mut t = trainer(&["--config", cfg.to_str().unwrap(), "--max-minutes", "0.6"], &log, false);
    let info = run_json(&run);
    let server = info["nats"]["server_pid"].as_u64().unwrap() as u32;
    wait_for("trajectories arrive", Duration::from_secs(90), || received(&run) >= 20);
    signal(server, "-9");
    let before = received(&run);
    wait_for("the trainer restarts its server", Duration::from_secs(60), || {
        read(&log).contains("nats-server restarted")
    });
    // Reaped by the running trainer: not even a zombie is left (after the
    // trainer's exit, init would reap it whatever the trainer did).
    wait_for("the killed server is reaped (no zombie)", Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{server}")).exists()
    });
    wait_for("trajectories arrive after the restart", Duration::from_secs(60), || {
        received(&run) > before + 20
    });
    let (status, _) = wait_exit(&mut t.0, Duration::from_secs(180));
    let err = read(&log);
    assert!(status.success(), "{err}");
    assert!(err.contains(&format!("nats-server (pid {server}) died")), "{err}");
    let s = summary(&run);
    assert_eq!(s["stop_reason"], "time limit reached", "{s}");
    let c = &s["counters"];
    assert_eq!(
        (c["duplicate_trajectories"].as_u64(), c["missing_trajectories"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    assert_eq!(c["broker_restarts"], 1, "{s}");
    assert_eq!(s["broker"]["restarts"], 1, "{s}");
    // TensorBoard's last values: one restart, connected at the stop.
    let tb = common::tensorboard_last(&run, "Transport/");
    assert_eq!(
        (tb.get("Transport/broker_restarts"), tb.get("Transport/broker_connected")),
        (Some(&1.0), Some(&1.0)),
        "{tb:?}"
    );
    // The restarted server is stopped with the trainer.
    let out = read(&log.with_extension("out"));
    assert!(out.lines().last().unwrap_or("").contains("stopped       time limit reached"), "{out}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_external_broker_gone_for_good_does_not_hold_the_trainer_past_its_limit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut srv = external_server(dir.path());
    let cfg = config(dir.path(), "{kind: nats}");
    let run = dir.path().join("run");
    let log = dir.path().join("train.log");
    let url = srv.url();
    let mut t = trainer(
        &["--config", cfg.to_str().unwrap(), "--max-minutes", "0.6", "--nats-url", &url],
        &log,
        false,
    );
    // The trainer's clock starts no later than its first "checkpoints every" line.
    wait_for("the trainer starts", Duration::from_secs(60), || {
        read(&log).contains("checkpoints every")
    });
    let started = Instant::now();
    wait_for("trajectories arrive", Duration::from_secs(90), || received(&run) >= 20);
    srv.kill();
    let (status, _) = wait_exit(&mut t.0, Duration::from_secs(120));
    // Stopped at the limit (36 s), within 10 s of it by the wall clock, however
    // long the broker was gone.
    let took = started.elapsed();
    let err = read(&log);
    assert!(status.success(), "{err}");
    assert!(took < Duration::from_secs(36 + 10), "exited {took:?} after its start: {err}");
    let s = summary(&run);
    assert_eq!(s["stop_reason"], "time limit reached");
    assert_eq!(s["broker"]["connected_at_stop"], false, "{s}");
    let out = read(&log.with_extension("out"));
    let last = out.lines().last().unwrap_or("");
    assert!(last.contains("time limit reached") && last.contains(&url), "names the broker: {out}");
    assert!(err.contains(&format!("NATS connection to {url} lost")), "{err}");
    assert_checkpoint_resumes(&run);
}

#[test]
fn sigint_while_the_broker_is_down_stops_within_10_s_and_a_second_exits_at_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut srv = external_server(dir.path());
    let url = srv.url();
    let cfg = config(dir.path(), "{kind: nats}");
    let run = dir.path().join("run");
    let log = dir.path().join("train.log");
    let mut t = trainer(
        &["--config", cfg.to_str().unwrap(), "--max-minutes", "10", "--nats-url", &url],
        &log,
        false,
    );
    wait_for("trajectories arrive", Duration::from_secs(90), || received(&run) >= 20);
    srv.kill();
    wait_for(&format!("the trainer notices: {}", log.display()), Duration::from_secs(30), || {
        read(&log).contains("lost")
    });
    signal(t.0.id(), "-INT");
    let (status, took) = wait_exit(&mut t.0, Duration::from_secs(60));
    let err = read(&log);
    assert!(status.success(), "{err}");
    // The bound: a stopping collector gives up on a silent server after 10 s
    // of its drain (docs/reliability.md), then the trainer writes its final
    // checkpoint and summary (well under a second here; 5 s allowed for a
    // loaded machine). What it must catch is a stop that waits on the
    // broker: the 60 s an answering server gets, or publishes retried until
    // it comes back. A bound of 10 s flat had no room for the checkpoint
    // (10.1 s and 11.1 s seen under load).
    assert!(took < Duration::from_secs(15), "SIGINT took {took:?} with the broker down: {err}");
    let s = summary(&run);
    assert_eq!(s["stop_reason"], "interrupted (SIGINT)", "{s}");
    // The final checkpoint holds the run's last state (summary.json's frames and updates).
    assert_checkpoint_resumes(&run);

    // Again, with a second SIGINT right behind the first: out at once, code 130.
    srv.restart().unwrap();
    let log2 = dir.path().join("train2.log");
    let mut t = trainer(
        &["--resume", run.to_str().unwrap(), "--max-minutes", "10", "--nats-url", &url],
        &log2,
        false,
    );
    let before = received(&run);
    wait_for("the resumed run trains", Duration::from_secs(90), || {
        read(&log2).contains("checkpoints every") && received(&run) > before + 10
    });
    srv.kill();
    wait_for(
        &format!("the resumed trainer notices: {}", log2.display()),
        Duration::from_secs(30),
        || read(&log2).contains("lost"),
    );
    signal(t.0.id(), "-INT");
    std::thread::sleep(Duration::from_millis(50));
    signal(t.0.id(), "-INT");
    let (status, took) = wait_exit(&mut t.0, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{}", read(&log2));
    assert!(took < Duration::from_secs(5), "the second SIGINT took {took:?}");
    assert!(read(&log2).contains("second interrupt"), "{}", read(&log2));
    assert_checkpoint_resumes(&run);
}

#[test]
fn ctrl_c_to_the_process_group_stops_cleanly_and_the_server_last() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // No periodic checkpoint before the stop: the state a resume starts from
    // is the final checkpoint's.
    let cfg = config_every(dir.path(), "{kind: nats}", 3600);
    let run = dir.path().join("run");
    let log = dir.path().join("train.log");
    // Its own group, as a terminal's foreground job: the group's id is its pid.
    let mut t = trainer(&["--config", cfg.to_str().unwrap(), "--max-minutes", "10"], &log, true);
    let info = run_json(&run);
    let server = info["nats"]["server_pid"].as_u64().unwrap() as u32;
    wait_for("some updates", Duration::from_secs(90), || {
        rulka_trainer::read_trajectories_so_far(&run)
            .unwrap()
            .last()
            .is_some_and(|r| r.updates >= 2)
    });
    assert!(!run.join("state/LATEST").exists(), "a periodic checkpoint came before the stop");
    // Ctrl-C: SIGINT to every process of the foreground group.
    assert!(Command::new("kill")
        .args(["-INT", "--", &format!("-{}", t.0.id())])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success());
    // The server was not in the group: it served the trainer's shutdown, then
    // the trainer stopped and reaped it — before its own exit (seen while the
    // trainer is an unreaped zombie: a server ended only by the parent-death
    // signal would still be there then).
    let t0 = Instant::now();
    let zombie = || read(Path::new(&format!("/proc/{}/stat", t.0.id()))).contains(") Z");
    wait_for("the trainer exits", Duration::from_secs(60), zombie);
    assert!(
        !Path::new(&format!("/proc/{server}")).exists(),
        "the trainer left its server to others"
    );
    let (status, _) = wait_exit(&mut t.0, Duration::from_secs(60));
    let took = t0.elapsed();
    let err = read(&log);
    assert!(status.success(), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}: {err}");
    let s = summary(&run);
    assert_eq!(s["stop_reason"], "interrupted (SIGINT)", "{s}");
    assert_eq!(s["counters"]["duplicate_trajectories"], 0, "{s}");
    assert!(!alive(server), "the trainer stops its server");
    assert!(!err.contains("lost; reconnecting"), "the server went before the trainer: {err}");
    assert!(!err.contains("second interrupt"), "{err}");
    // The final checkpoint: the last update's state, which summary.json names.
    assert!(s["updates"].as_u64().unwrap() >= 2, "{s}");
    assert_eq!(s["checkpoint"], format!("state/{}", read(&run.join("state/LATEST")).trim()), "{s}");
    assert_checkpoint_resumes(&run);
}

/// A directory under `root` as a trainer leaves it: segments and an owner record.
fn shm_run_dir(root: &Path, id: u64, owner: Option<(u32, u64)>) -> PathBuf {
    let d = root.join(format!("rulka-{id:016x}"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("ring0"), vec![0u8; 1 << 20]).unwrap();
    if let Some((pid, start)) = owner {
        let rec = format!(r#"{{"pid": {pid}, "start_time": {start}, "run_dir": "runs/r{id}"}}"#);
        std::fs::write(d.join("owner.json"), rec).unwrap();
    }
    d
}

#[test]
fn shm_gc_removes_dead_runs_only_and_names_them() {
    let root = tempfile::Builder::new().prefix("rulka-gc-test-").tempdir_in("/dev/shm").unwrap();
    // A live owner (a real process), a dead one (a real process, SIGKILLed), a
    // recycled pid (this one's, with another start time), one being created.
    let mut live = Kill::new(Command::new("sleep").arg("60").spawn().unwrap());
    let mut dead = Command::new("sleep").arg("60").spawn().unwrap();
    let start = |pid: u32| rulka_shm::process_start_time(pid).unwrap();
    let (live_pid, dead_pid) = (live.0.id(), dead.id());
    let (live_start, dead_start) = (start(live_pid), start(dead_pid));
    signal(dead_pid, "-9");
    dead.wait().unwrap();
    let me = std::process::id();
    let a = shm_run_dir(root.path(), 0xa, Some((live_pid, live_start)));
    let b = shm_run_dir(root.path(), 0xb, Some((dead_pid, dead_start)));
    let c = shm_run_dir(root.path(), 0xc, Some((me, start(me) + 7)));
    let d = shm_run_dir(root.path(), 0xd, None);
    let other = root.path().join("rulka-test-not-a-run");
    std::fs::create_dir(&other).unwrap();
    let gc = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_rulka"))
            .args(["shm", "gc", "--root", root.path().to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = gc(&["--dry-run"]);
    assert!(a.exists() && b.exists() && c.exists() && d.exists(), "a dry run removes nothing");
    assert!(out.contains("would remove") && out.contains("4 run directories, 2 stale"), "{out}");
    let out = gc(&[]);
    assert!(a.exists() && !b.exists() && !c.exists() && d.exists() && other.exists(), "{out}");
    let line = |out: &str, dir: &Path| {
        out.lines().find(|l| l.contains(&*dir.to_string_lossy())).unwrap_or("").to_string()
    };
    let (la, lb, lc, ld) = (line(&out, &a), line(&out, &b), line(&out, &c), line(&out, &d));
    assert!(
        la.contains("live") && la.contains(&format!("owner pid {live_pid} is running")),
        "{out}"
    );
    assert!(
        lb.contains("removed") && lb.contains(&format!("owner pid {dead_pid} is gone")),
        "{out}"
    );
    assert!(lb.contains("runs/r11") && lb.contains("1.0 MB"), "{out}");
    assert!(lc.contains("removed") && lc.contains("another process"), "{out}");
    assert!(ld.contains("live") && ld.contains("being created"), "{out}");
    // A directory whose owner died but whose ring a live process still holds stays.
    let e = shm_run_dir(root.path(), 0xe, Some((dead_pid, dead_start)));
    let lock = rulka_shm::ProcessLock::acquire(&e.join("ring0.producer")).unwrap();
    let out = gc(&[]);
    assert!(e.exists(), "{out}");
    assert!(line(&out, &e).contains(&format!("pid {me} holds ring0.producer")), "{out}");
    drop(lock);
    let _ = live.0.kill();
}
