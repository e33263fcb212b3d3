//! The Windows collector, as a Windows user runs it, under Wine on this
//! Linux machine: the package `scripts/package-collector --target windows`
//! makes (`dist/rulka-collector-<version>-windows-x86_64.zip`), unzipped
//! into a folder of its own, run by Debian's `wine64` in a prefix these
//! tests make (`target/windows/wine-prefix`, with the `bcryptprimitives.dll`
//! stand-in Wine 8.0 needs and real Windows 10+ has).
//!
//! - it joins a Linux `rulka train --transport nats` run over loopback and
//!   drives a Linux `rulka sim serve` game: every trajectory arrives once,
//!   the weights it drives with advance, and the run learns to finish;
//! - a game started by hand that fails in any way (exits, hangs, closes its
//!   socket, sends garbage, is frozen or killed) is waited for:
//!   the collector drives on when it is started again, and never exits;
//! - it launches its own games (`environment.tmi.launch`, the Windows build
//!   of the simulator game through a TMLoader-like launcher that exits at
//!   once), kills and relaunches them on hang and on crash, and leaves no
//!   game behind when it is killed (the Job Object);
//! - bad input (no `onnxruntime.dll`, a wrong password, nothing listening)
//!   is one line and a non-zero exit, never a panic;
//! - the unzipped package runs `--help` with nothing in the prefix but the
//!   stand-in.
//!
//! `scripts/test` builds the package and the test game first and sets
//! `RULKA_REQUIRE_WINDOWS=1`: these tests then fail when anything is
//! missing. Without it (a plain `cargo test`), they say what is missing and
//! skip.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use rulka_test_support::{free_port, wait_exit, wait_for, Kill};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Trainer runs and Wine processes use every core: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rulka_bin() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_rulka-collector")).with_file_name("rulka");
    assert!(
        p.exists(),
        "{} not built: cargo build -p rulka -p rulka-torch (scripts/test builds them)",
        p.display()
    );
    p
}

/// What the tests need from the Windows build, found once.
struct Windows {
    wine: PathBuf,
    prefix: PathBuf,
    zip: PathBuf,
    game: PathBuf,
}

fn windows() -> Option<&'static Windows> {
    static W: OnceLock<Option<Windows>> = OnceLock::new();
    W.get_or_init(|| {
        let ws = workspace();
        let zip = std::env::var_os("RULKA_WINDOWS_ZIP").map(PathBuf::from).unwrap_or_else(|| {
            ws.join(format!(
                "dist/rulka-collector-{}-windows-x86_64.zip",
                env!("CARGO_PKG_VERSION")
            ))
        });
        let game = std::env::var_os("RULKA_WINDOWS_SIM_GAME").map(PathBuf::from).unwrap_or_else(
            || ws.join("target/windows/x86_64-pc-windows-gnu/release/examples/sim_game.exe"),
        );
        let standin = ws.join(".wintoolchain/bcryptprimitives.dll");
        let wine = ["/usr/lib/wine/wine64", "/usr/bin/wine64", "/usr/bin/wine"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists());
        let mut missing = Vec::new();
        for (what, p) in [("the package", &zip), ("the test game", &game), ("the stand-in", &standin)]
        {
            if !p.exists() {
                missing.push(format!("{what} ({})", p.display()));
            }
        }
        if wine.is_none() {
            missing.push("wine64 (Debian package wine64)".into());
        }
        if !missing.is_empty() {
            let msg = format!(
                "Windows collector tests: missing {}; `scripts/package-collector --target windows --with-test-game` makes them",
                missing.join(", ")
            );
            assert!(std::env::var("RULKA_REQUIRE_WINDOWS").as_deref() != Ok("1"), "{msg}");
            eprintln!("{msg} — skipped");
            return None;
        }
        let wine = wine.unwrap();
        let prefix = ws.join("target/windows/wine-prefix");
        let made = prefix.join(".rulka-prefix-1");
        // Test processes run side by side (cargo nextest): the one that makes
        // `making` makes the prefix, the others wait for its marker.
        let making = ws.join("target/windows/wine-prefix.making");
        std::fs::create_dir_all(ws.join("target/windows")).unwrap();
        let t0 = Instant::now();
        while !made.exists() {
            let stale = std::fs::metadata(&making)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(600));
            if stale {
                let _ = std::fs::remove_dir(&making);
            }
            if std::fs::create_dir(&making).is_ok() {
                make_prefix(&wine, &prefix, &made);
                std::fs::remove_dir(&making).unwrap();
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(600), "{} held too long", making.display());
            std::thread::sleep(Duration::from_millis(200));
        }
        // Only the stand-in goes into the prefix (real Windows 10+ has the DLL);
        // rewritten only when it differs: another test's Wine may have it mapped.
        let dll = prefix.join("drive_c/windows/system32/bcryptprimitives.dll");
        if std::fs::read(&dll).ok() != std::fs::read(&standin).ok() {
            std::fs::copy(&standin, &dll).unwrap();
        }
        Some(Windows { wine, prefix, zip, game })
    })
    .as_ref()
}

/// A fresh Wine prefix at `prefix`, `made` written when it is complete.
fn make_prefix(wine: &Path, prefix: &Path, made: &Path) {
    let _ = std::fs::remove_dir_all(prefix);
    std::fs::create_dir_all(prefix).unwrap();
    let o = Command::new(wine)
        .arg("wineboot")
        .arg("-i")
        .env("WINEPREFIX", prefix)
        .env("WINEDEBUG", "-all")
        .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
        .output()
        .unwrap();
    assert!(o.status.success(), "wineboot: {}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(made, "").unwrap();
}

/// The package unzipped into `dir`; returns the folder holding the .exe.
fn unzip(w: &Windows, dir: &Path) -> PathBuf {
    let o = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&w.zip)
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "unzip: {}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("rulka-collector.exe").exists())
        .expect("rulka-collector.exe in the zip's folder")
}

/// A folder with the package unzipped and the test game beside the .exe:
/// `(the folder's parent, the folder, the game)`.
fn with_game(w: &Windows) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let folder = unzip(w, dir.path());
    let game = folder.join("sim_game.exe");
    std::fs::copy(&w.game, &game).unwrap();
    (dir, folder, game)
}

/// A Windows path for a Linux one (Wine's `Z:` drive is `/`).
fn win_path(p: &Path) -> String {
    format!("Z:{}", p.display().to_string().replace('/', "\\"))
}

fn wine(w: &Windows, exe: &Path) -> Command {
    let mut c = Command::new(&w.wine);
    c.arg(exe).env("WINEPREFIX", &w.prefix).env("WINEDEBUG", "-all").stdin(Stdio::null());
    c
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The simulator's tracks 0 and 1 as the game's maps (zone centres exported
/// by `rulka sim export-map`), in YAML flow form.
fn maps(dir: &Path) -> String {
    rulka_test_support::sim_maps(&rulka_bin(), dir)
}

/// configs/sim-quick.yaml on the game path: environment.kind tmi on
/// `base_port`, no local collectors, the NATS transport, `tmi_extra`
/// (YAML lines under `tmi:`, indented 4) added.
fn quick_config(dir: &Path, base_port: u16, tmi_extra: &str) -> PathBuf {
    let text = read(&workspace().join("configs/sim-quick.yaml"));
    let run = dir.join("run");
    let mut text = text
        .replace("run_dir: runs/sim-quick", &format!("run_dir: {}", run.display()))
        .replace("  kind: sim", "  kind: tmi")
        .replace("  count: 1", "  count: 0")
        .replace("max_minutes: 5", "max_minutes: 10");
    let tmi = format!(
        "  tmi:\n    base_port: {base_port}\n    timeout_ms: 5000\n    timeout_during_run_ms: 5000\n    maps: [{}]\n{tmi_extra}  sim:\n",
        maps(dir)
    );
    text = text.replacen("  sim:\n", &tmi, 1);
    text.push_str("\ntransport: {kind: nats, nats: {run: winrun}}\n");
    let p = dir.join("run.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

fn run_json(run: &Path) -> (String, String) {
    let mut out = None;
    let t0 = Instant::now();
    while out.is_none() {
        let err = read(&run.with_file_name("train.err"));
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no run.json with a NATS server within 90 s: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
        let v: Option<serde_json::Value> = serde_json::from_str(&read(&run.join("run.json"))).ok();
        out = v.filter(|v| !v["nats"].is_null()).map(|v| {
            (
                v["nats"]["url"].as_str().unwrap().to_string(),
                v["nats"]["password"].as_str().unwrap().to_string(),
            )
        });
    }
    out.unwrap()
}

fn train(cfg: &Path, dir: &Path, args: &[&str]) -> Kill {
    Kill::spawn_logged(
        Command::new(rulka_bin()).args(["train", "--config"]).arg(cfg).args(args),
        dir,
        "train",
    )
}

/// `rulka-collector.exe` of `folder` joined to the run as `id`, stderr into `log`.
fn collector(
    w: &Windows,
    folder: &Path,
    url: &str,
    pass: &str,
    id: u32,
    extra: &[&str],
    log: &Path,
) -> Kill {
    Kill::new(
        wine(w, &folder.join("rulka-collector.exe"))
            .args(["--connect", url, "--run", "winrun", "--id", &id.to_string()])
            .args(["--user", "collector", "--password", pass, "--wait-s", "60"])
            .arg("--maps-dir")
            .arg(win_path(&folder.join("maps")))
            .arg("--logs")
            .arg(win_path(&folder.join("logs")))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// `(collector, trajectory, kind, progress_frac, finished)` of every row of trajectories.csv.
fn trajectories(run: &Path) -> Vec<(u32, u64, String, f64, bool)> {
    let rows = rulka_trainer::read_trajectories_so_far(run).unwrap();
    rows.iter()
        .map(|r| {
            let kind = if r.eval { "eval" } else { "explo" };
            (r.collector, r.trajectory, kind.to_string(), r.progress_frac, r.finished)
        })
        .collect()
}

/// Linux pids of Windows processes running `exe_name` with `port` among their arguments.
fn wine_processes(exe_name: &str, port: u16) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        // Wine shows a Windows process's command line as one string or as words.
        let args: Vec<String> = String::from_utf8_lossy(&cmd)
            .split(|c: char| c == '\0' || c.is_whitespace())
            .map(str::to_string)
            .collect();
        let zombie = read(Path::new(&format!("/proc/{pid}/stat"))).contains(") Z");
        if !zombie
            && args.iter().any(|a| a.to_ascii_lowercase().contains(exe_name))
            && args.iter().any(|a| a == &port.to_string())
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn the_windows_collector_feeds_a_linux_run_over_nats_and_the_run_learns_to_finish() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = windows() else { return };
    let dir = tempfile::tempdir().unwrap();
    let folder = unzip(w, dir.path());
    let port = free_port();
    let cfg = quick_config(dir.path(), port, "");
    let _game = rulka_test_support::sim_game(&rulka_bin(), &cfg, port, &[]);
    let run = dir.path().join("run");
    // The run ends once its table shows what the test asserts below (with a
    // margin of two finishes for the rows still arriving while it stops)
    // after 8 updates, or at 120 000 frames. A fixed budget was a bet on where learning
    // stands: `sim-quick` makes 19 of 20 runs finish from 39 k to 51 k
    // frames (docs/learning.md), a clean clone saw 6 of 36 of the last quarter finish
    // at 45 000, and another a run finishing 8 of 23 at 29 k that had
    // fallen back to 2 of 57 by 60 000.
    let mut trainer = train(&cfg, dir.path(), &["--max-frames", "120000"]);
    let (url, pass) = run_json(&run);
    let log = dir.path().join("collector.log");
    let mut col = collector(w, &folder, &url, &pass, 3, &["--port", &port.to_string()], &log);
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = trainer.0.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "the run did not end in 10 minutes");
        let rows = trajectories(&run);
        let explo: Vec<_> = rows.iter().filter(|r| r.2 == "explo").collect();
        // And not before 8 updates: the weights the collector drives with
        // are asserted below to have moved on to v5 or later.
        let updates =
            rulka_trainer::read_trajectories_so_far(&run).unwrap().last().map_or(0, |r| r.updates);
        if updates >= 8 && learned(&explo, 2) {
            // Stopped when learned: the margin is the time limit over the time it took.
            rulka_test_support::margin::at_most(
                "seconds to learn",
                t0.elapsed().as_secs_f64(),
                600.0,
            );
            let _ = Command::new("kill").args(["-INT", &trainer.id().to_string()]).status();
            break wait_exit(&mut trainer.0, Duration::from_secs(120)).0;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    let err = read(&dir.path().join("train.err"));
    assert!(status.success(), "{err}\n--- collector\n{}", read(&log));
    // Ctrl-C (Wine turns SIGINT into the console's CTRL_C_EVENT): a clean stop.
    let _ = Command::new("kill").args(["-INT", &col.0.id().to_string()]).status();
    let st = wait_exit(&mut col.0, Duration::from_secs(90)).0;
    let clog = read(&log);
    assert!(st.success(), "the collector's exit after Ctrl-C: {st}\n{clog}");
    assert!(clog.contains("joined run winrun"), "{clog}");
    assert!(!clog.contains("panicked"), "{clog}");

    let s: serde_json::Value = rulka_trainer::RunDir::new(&run).summary().unwrap();
    assert_eq!(s["counters"]["duplicate_trajectories"], 0, "{s}");
    assert_eq!(s["counters"]["missing_trajectories"], 0, "{s}");
    let rows = trajectories(&run);
    let ids: HashSet<(u32, u64)> = rows.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(ids.len(), rows.len(), "every trajectory exactly once");
    assert!(rows.iter().all(|r| r.0 == 3), "all from the Windows collector");
    // Trajectory ids are consecutive from 0: none lost on the way.
    let mut seqs: Vec<u64> = rows.iter().map(|r| r.1).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "no gap in the trajectory ids: {}\n{err}\n--- collector\n{clog}",
        s["counters"]
    );
    // Weights hot-swapped: the collector drove with versions the learner published later.
    let c = s["collectors"].as_array().unwrap().iter().find(|c| c["id"] == 3).unwrap().clone();
    let version = c["weights"][1].as_u64().unwrap();
    assert!(version >= 5, "the Windows collector's weights stayed at v{version}: {c}");
    // It learned: exploration runs finish at the end, and get further than at the start.
    let explo: Vec<_> = rows.iter().filter(|r| r.2 == "explo").collect();
    let q = explo.len() / 4;
    assert!(q >= 5, "{} exploration runs", explo.len());
    let (first, last, finished_last) = quarters(&explo);
    println!(
        "{} trajectories; exploration progress {first:.2} → {last:.2}; {finished_last}/{q} of the last quarter finished; weights v{version}",
        rows.len()
    );
    assert!(
        last > first + 0.2 && finished_last >= q / 4,
        "did not learn: {first:.2} → {last:.2}, {finished_last}/{q} finished\n{err}"
    );
}

type Row = (u32, u64, String, f64, bool);

/// The mean progress of the first and the last quarter of exploration
/// runs, and how many of the last quarter finished.
fn quarters(explo: &[&Row]) -> (f64, f64, usize) {
    let q = explo.len() / 4;
    let mean = |r: &[&Row]| r.iter().map(|r| r.3).sum::<f64>() / r.len() as f64;
    let finished_last = explo[explo.len() - q..].iter().filter(|r| r.4).count();
    (mean(&explo[..q]), mean(&explo[explo.len() - q..]), finished_last)
}

/// The learning test's assertion on the exploration runs so far, with
/// `margin` more finishes than it asks.
fn learned(explo: &[&Row], margin: usize) -> bool {
    let q = explo.len() / 4;
    if q < 5 {
        return false;
    }
    let (first, last, finished_last) = quarters(explo);
    last > first + 0.2 && finished_last >= q / 4 + margin
}

/// The Windows collector launches its games (a TMLoader-like launcher that
/// starts the game and exits), and kills and relaunches them when they hang
/// (slot 0) or crash (slot 1); killed itself, it leaves no game behind.
#[test]
fn the_windows_collector_launches_kills_and_relaunches_its_games_and_leaves_none() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = windows() else { return };
    let (dir, folder, game) = with_game(w);
    let port = free_port();
    let serve = dir.path().join("serve.yaml");
    // Slot i's game reads its arguments from game-<i>.args: 0 hangs, 1 crashes.
    let launch = format!(
        "    launch: {{command: ['{}', '{}', '{{port}}', '@{}'], startup_timeout_s: 60, kill_grace_s: 1, max_backoff_s: 4}}\n",
        win_path(&game),
        win_path(&serve),
        win_path(&dir.path().join("game-{id}.args"))
    );
    let cfg = quick_config(dir.path(), port, &launch);
    std::fs::copy(&cfg, &serve).unwrap();
    for (id, fault) in [(0, "--hang-after-steps"), (1, "--exit-after-steps")] {
        let args = [fault, "150", "--launcher"];
        std::fs::write(dir.path().join(format!("game-{id}.args")), args.join("\n")).unwrap();
    }
    let run = dir.path().join("run");
    let mut trainer = train(&cfg, dir.path(), &["--max-minutes", "6"]);
    let (url, pass) = run_json(&run);
    let log = dir.path().join("collector.log");
    let mut col = collector(w, &folder, &url, &pass, 0, &["--slots", "2"], &log);
    let game_log = |id: u32| read(&folder.join(format!("logs/game-{id}.log")));
    let summary =
        || -> serde_json::Value { rulka_trainer::RunDir::new(&run).summary().unwrap_or_default() };
    // The trainer's progress line counts the remote slots' games:
    // "(N launches: H hung, C crashed, …)".
    let games = || -> (u64, u64, u64) {
        let err = read(&dir.path().join("train.err"));
        let Some(last) = err.lines().rev().find(|l| l.contains(" launches: ")) else {
            return (0, 0, 0);
        };
        let num = |before: &str| -> u64 {
            last.split(before)
                .next()
                .and_then(|h| h.rsplit([' ', '(']).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        (num(" launches:"), num(" hung,"), num(" crashed,"))
    };
    let t0 = Instant::now();
    loop {
        let (launches, hung, crashed) = games();
        if hung >= 1 && crashed >= 1 && launches >= 4 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "no hang and crash, each relaunched, within 240 s: {:?}\n--- collector\n{}\n--- game 0\n{}\n--- game 1\n{}\n--- trainer\n{}",
            games(),
            read(&log),
            game_log(0),
            game_log(1),
            read(&dir.path().join("train.err"))
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The launcher exited at once; the game it started is the job's.
    assert!(game_log(0).contains("launcher: started the game"), "{}", game_log(0));
    let received = trajectories(&run).len();
    assert!(received >= 2, "runs were driven between the faults: {received}");
    // SIGKILL of the collector (no clean-up of its own), while a game runs
    // (between a fault and its relaunch none may): the Job Objects end every game.
    let games = || {
        [wine_processes("sim_game.exe", port), wine_processes("sim_game.exe", port + 1)].concat()
    };
    wait_for("a game runs", Duration::from_secs(60), || !games().is_empty());
    col.0.kill().unwrap();
    let _ = col.0.wait();
    wait_for("no game left after the collector was killed", Duration::from_secs(20), || {
        wine_processes("sim_game.exe", port).is_empty()
            && wine_processes("sim_game.exe", port + 1).is_empty()
    });
    let _ = Command::new("kill").args(["-INT", &trainer.0.id().to_string()]).status();
    let st = wait_exit(&mut trainer.0, Duration::from_secs(120)).0;
    let s = summary();
    assert!(st.success(), "{}", read(&dir.path().join("train.err")));
    let c = &s["counters"];
    assert!(c["game_hangs"].as_u64() >= Some(1) && c["game_crashes"].as_u64() >= Some(1), "{s}");
    assert_eq!(s["counters"]["duplicate_trajectories"], 0, "{s}");
    assert_eq!(s["counters"]["missing_trajectories"], 0, "{s}");
}

/// Bad input on the Windows binary: one line naming it, a non-zero exit, no panic.
#[test]
fn the_windows_collector_names_bad_input_in_one_line() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = windows() else { return };
    let dir = tempfile::tempdir().unwrap();
    let folder = unzip(w, dir.path());
    let check = |exe: &Path, args: &[&str], code: i32, says: &str| {
        let o = wine(w, exe).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(lines.len(), 1, "{args:?}: one error line: {err}");
        assert!(lines[0].contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    // --help and --version from the unzipped folder.
    let o = wine(w, &folder.join("rulka-collector.exe")).arg("--help").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--connect") && help.contains("--slots"), "{help}");
    let o = wine(w, &folder.join("rulka-collector.exe")).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        // The Windows package is the CPU build, as this test's own.
        format!("rulka-collector {}", rulka_inference::native::VERSION)
    );
    // No onnxruntime.dll beside the exe.
    let bare = dir.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::copy(folder.join("rulka-collector.exe"), bare.join("rulka-collector.exe")).unwrap();
    check(
        &bare.join("rulka-collector.exe"),
        &["--connect", "nats://127.0.0.1:4222", "--run", "x", "--id", "0"],
        2,
        "onnxruntime.dll",
    );
    // Nothing listens on the port.
    let closed = free_port().to_string();
    check(
        &folder.join("rulka-collector.exe"),
        &[
            "--connect",
            &format!("nats://127.0.0.1:{closed}"),
            "--run",
            "x",
            "--id",
            "0",
            "--wait-s",
            "2",
        ],
        1,
        &closed,
    );
    // A wrong password against a real nats-server.
    let nats = workspace().join(".nats/nats-server");
    assert!(nats.exists(), "{} (scripts/setup.sh fetches it)", nats.display());
    let port = free_port();
    let _server = Kill::new(
        Command::new(&nats)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "--user",
                "collector",
                "--pass",
                "right",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("nats-server listens", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    check(
        &folder.join("rulka-collector.exe"),
        &[
            "--connect",
            &format!("nats://127.0.0.1:{port}"),
            "--run",
            "x",
            "--id",
            "0",
            "--user",
            "collector",
            "--password",
            "wrong",
        ],
        2,
        "authorization",
    );
}

/// `rulka-collector.exe tmi check`: the preflight passes on a game it
/// launches (the Windows simulator game, through the launcher), names the
/// failure when nothing listens, and leaves no game behind.
#[test]
fn the_windows_preflight_passes_on_a_launched_game_and_names_a_missing_one() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = windows() else { return };
    let (dir, folder, game) = with_game(w);
    let port = free_port();
    let serve = dir.path().join("serve.yaml");
    let launch = format!(
        "    launch: {{command: ['{}', '{}', '{{port}}', --launcher], startup_timeout_s: 60}}\n",
        win_path(&game),
        win_path(&serve)
    );
    let cfg = quick_config(dir.path(), port, &launch);
    // The .exe reads the config itself: its paths as Windows sees them.
    let text = read(&cfg).replace(&dir.path().display().to_string(), &win_path(dir.path()));
    std::fs::write(&serve, &text).unwrap();
    let exe = folder.join("rulka-collector.exe");
    let o = wine(w, &exe)
        .args([
            "tmi",
            "check",
            "--port",
            &port.to_string(),
            "--config",
            &win_path(&serve),
            "--launch",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("all 7 checks passed"), "{out}");
    assert!(out.contains("ok   race time advances under inputs"), "{out}");
    wait_for("the launched game ended with the check", Duration::from_secs(15), || {
        wine_processes("sim_game.exe", port).is_empty()
    });
    let closed = free_port();
    let o = wine(w, &exe)
        .args(["tmi", "check", "--port", &closed.to_string(), "--config", &win_path(&serve)])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("FAIL the plugin answers: nothing listens on 127.0.0.1:{closed}")),
        "{out}"
    );
    assert!(out.contains("fix: start TrackMania with TMInterface"), "{out}");
}

/// A game started by hand on the game PC (a Linux `rulka sim serve` here,
/// no `launch`) that exits, hangs, closes its socket mid-message, sends a
/// corrupt state, is frozen and is killed — started again by hand after a
/// pause each time — leaves the Windows collector driving:
/// it says each failure with the port, waits, drives on when the game is
/// back, and never exits; nothing is duplicated or missing.
#[test]
fn the_windows_collector_waits_for_a_hand_started_game_through_every_failure() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = windows() else { return };
    let dir = tempfile::tempdir().unwrap();
    let folder = unzip(w, dir.path());
    let port = free_port();
    let cfg = quick_config(dir.path(), port, "");
    let run = dir.path().join("run");
    let mut trainer = train(&cfg, dir.path(), &["--max-minutes", "10"]);
    let (url, pass) = run_json(&run);
    let log = dir.path().join("collector.log");
    let mut col = collector(w, &folder, &url, &pass, 3, &["--port", &port.to_string()], &log);
    let (_game, drove_after) = common::games_fail_in_turn(
        &rulka_bin(),
        &cfg,
        port,
        &run,
        3,
        &mut col.0,
        &log,
        &common::EVERY_FAILURE,
        1500, // run steps: runs last at most 600 (30 s) in sim-quick
        Duration::from_secs(120),
    );
    println!("the Windows collector drove each game {drove_after:?} s after its start");
    let _ = Command::new("kill").args(["-INT", &col.0.id().to_string()]).status();
    let st = wait_exit(&mut col.0, Duration::from_secs(90)).0;
    let clog = read(&log);
    assert!(st.success(), "the collector's exit after Ctrl-C: {st}\n{clog}");
    assert!(!clog.contains("panicked"), "{clog}");
    assert!(clog.matches("answers again; driving on").count() >= 6, "{clog}");
    let _ = Command::new("kill").args(["-INT", &trainer.0.id().to_string()]).status();
    let status = wait_exit(&mut trainer.0, Duration::from_secs(90)).0;
    assert!(status.success(), "{}", read(&dir.path().join("train.err")));
    let s: serde_json::Value = rulka_trainer::RunDir::new(&run).summary().unwrap();
    let c = &s["counters"];
    assert_eq!(c["duplicate_trajectories"], 0, "{s}");
    assert_eq!(c["missing_trajectories"], 0, "{s}");
    // The runs the faults cut short (after a chunk of 64 steps) are counted
    // incomplete: four faults at 1 500 steps, mid-run.
    assert!(c["incomplete_dropped"].as_u64() >= Some(1), "{s}");
    let mut ids = common::recorded_from(&run, 3);
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "a trajectory recorded twice");
}
