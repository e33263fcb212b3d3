//! The game guard (`rulka-collector __game-guard GRACE_MS -- COMMAND…`), as
//! its collector's death leaves it: SIGTERMed, it ends the game's tree. A
//! game that ends on SIGTERM goes at once; one that ignores SIGTERM is given
//! its grace (`kill_grace_s`) and then SIGKILLed — never left running. Not
//! signalled, it leaves the game alone, and stays while a game whose
//! launcher exited lives.

#![cfg(unix)]
#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A guard over `sh -c SCRIPT`, the game writing its pid to `pid_file`.
fn guard(grace_ms: u64, script: &str, pid_file: &Path) -> (Reap, u32) {
    let child = Command::new(env!("CARGO_BIN_EXE_rulka-collector"))
        .args(["__game-guard", &grace_ms.to_string(), "--", "sh", "-c", script])
        .env("PID_FILE", pid_file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let guard = Reap(child);
    let t0 = Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(pid_file).ok().and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the game never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    (guard, pid)
}

fn sigterm(pid: u32) {
    rulka_shm::send_signal(pid, rulka_shm::SIGTERM);
}

/// How long after `t0` process `pid` was gone (a zombie counts as gone).
fn gone_after(pid: u32, t0: Instant, limit: Duration) -> Duration {
    while rulka_shm::process_alive(pid) {
        assert!(t0.elapsed() < limit, "pid {pid} still alive after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

/// The guard exits, with success, within 30 s of `t0` (its SIGTERM).
fn assert_guard_exits_cleanly(g: &mut Reap, t0: Instant) {
    let status = loop {
        if let Some(s) = g.0.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the guard outlived its game");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

#[test]
fn a_game_that_ignores_sigterm_gets_its_grace_then_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("game.pid");
    // SIG_IGN survives exec: the sleep is the game, deaf to SIGTERM.
    let (mut g, game) =
        guard(3000, "trap '' TERM; echo $$ > \"$PID_FILE\"; exec sleep 600", &pid_file);
    // Unsignalled, the guard leaves its game alone.
    std::thread::sleep(Duration::from_millis(500));
    assert!(rulka_shm::process_alive(game), "the guard ended its game unasked");
    let t0 = Instant::now();
    sigterm(g.0.id());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(rulka_shm::process_alive(game), "SIGKILLed before its 3 s of grace were up");
    let took = gone_after(game, t0, Duration::from_secs(30));
    assert!(took >= Duration::from_millis(2900), "ended after {took:?}, before its grace");
    // The guard ends with its tree.
    assert_guard_exits_cleanly(&mut g, t0);
}

#[test]
fn a_game_that_ends_on_sigterm_is_not_held_for_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("game.pid");
    let (g, game) = guard(60_000, "echo $$ > \"$PID_FILE\"; exec sleep 600", &pid_file);
    std::thread::sleep(Duration::from_millis(500));
    assert!(rulka_shm::process_alive(game), "the guard ended its game unasked");
    let t0 = Instant::now();
    sigterm(g.0.id());
    // Gone long before the 60 s grace: the SIGTERM came first, and ended it.
    let took = gone_after(game, t0, Duration::from_secs(30));
    assert!(took < Duration::from_secs(30), "{took:?}");
}

/// A launcher that starts the game and exits (TMLoader's way): the guard
/// adopts the game and lives as long as it does, then ends it on SIGTERM.
#[test]
fn a_game_whose_launcher_exits_is_kept_by_the_guard_and_ended_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("game.pid");
    let (mut g, game) = guard(60_000, "sleep 600 & echo $! > \"$PID_FILE\"; exit 0", &pid_file);
    std::thread::sleep(Duration::from_millis(800));
    assert!(rulka_shm::process_alive(game), "the adopted game was ended unasked");
    assert!(g.0.try_wait().unwrap().is_none(), "the guard left with its launcher, not its game");
    let t0 = Instant::now();
    sigterm(g.0.id());
    gone_after(game, t0, Duration::from_secs(30));
    assert_guard_exits_cleanly(&mut g, t0);
}
