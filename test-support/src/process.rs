//! Processes a test starts, waits for and finds again.

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// A child process killed (SIGKILL) and reaped when the guard drops, so a
/// failing test leaves nothing running. Making one also makes this test
/// process the reaper of its orphaned descendants ([`descendants`]).
#[derive(Debug)]
pub struct Kill(pub Child);

impl Kill {
    /// Guards a child already started.
    pub fn new(child: Child) -> Self {
        adopt_orphans();
        Self(child)
    }

    /// Starts `cmd` and guards it.
    pub fn spawn(cmd: &mut Command) -> Self {
        adopt_orphans();
        Self(cmd.spawn().unwrap_or_else(|e| panic!("starting {cmd:?}: {e}")))
    }

    /// Starts `cmd` with its output in `dir/<name>.out` and
    /// `dir/<name>.err`, and guards it.
    pub fn spawn_logged(cmd: &mut Command, dir: &Path, name: &str) -> Self {
        let file = |ext: &str| {
            let path = dir.join(format!("{name}.{ext}"));
            std::fs::File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        Self::spawn(cmd.stdout(file("out")).stderr(file("err")))
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// The child, to wait for or read from.
    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Makes this process the subreaper of its descendants (once): a process
/// whose parent dies (a game whose guard was killed) is re-parented here,
/// not to init, so [`descendants`] still finds it.
fn adopt_orphans() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        assert!(rulka_shm::become_subreaper(), "PR_SET_CHILD_SUBREAPER refused");
    });
}

/// Every live process this test started, directly or not (orphans
/// included once this process is their subreaper: [`Kill`] and
/// [`games_on`] make it one).
pub fn descendants() -> Vec<u32> {
    adopt_orphans();
    rulka_shm::descendants(std::process::id())
}

/// The live processes whose parent is `pid` (read from `/proc/*/stat`: by
/// pid and parent, never by command line).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

/// The parent of live (not zombie) process `pid`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command (which may hold spaces): state, ppid, …
    let mut after = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let state = after.next()?;
    (state != "Z").then_some(())?;
    after.next()?.parse().ok()
}

/// The argument list of process `pid` (empty when it is gone).
fn argv(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The simulator games (`rulka sim serve --port PORT`, not their guards)
/// on `port` among this test's descendants ([`descendants`]).
pub fn games_on(port: u16) -> Vec<u32> {
    let port = port.to_string();
    descendants()
        .into_iter()
        .filter(|&pid| {
            let a = argv(pid);
            a.windows(2).any(|w| w[0] == "sim" && w[1] == "serve")
                && a.windows(2).any(|w| w[0] == "--port" && w[1] == port)
                && !a.iter().any(|x| x == "__game-guard")
        })
        .collect()
}

/// Starts the simulator behind the TMInterface protocol as a stand-in game
/// (`rulka sim serve --config CFG --port PORT ARGS…`, the `rulka` binary at
/// `rulka`, output discarded), guarded.
pub fn sim_game(rulka: &Path, cfg: &Path, port: u16, args: &[&str]) -> Kill {
    Kill::spawn(
        Command::new(rulka)
            .args(["sim", "serve", "--config"])
            .arg(cfg)
            .args(["--port", &port.to_string()])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
}

/// Waits for `child` to exit, at most `limit` (then the test fails):
/// its status and how long it took.
pub fn wait_exit(child: &mut Child, limit: Duration) -> (ExitStatus, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return (s, t0.elapsed());
        }
        assert!(t0.elapsed() < limit, "pid {} did not exit within {limit:?}", child.id());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` every 100 ms until it holds; fails the test, naming `what`,
/// when it does not within `limit`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A loopback port free now that no earlier call in this process gave (a
/// game of an earlier test may still be shutting down on its port, and a
/// collector must never drive another test's game); below 65000, so that
/// ports counted up from it stay valid.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let p = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&p) && p < 65000 {
            given.push(p);
            return p;
        }
    }
}

/// Sends signal `sig` (`kill`'s spelling: `-TERM`, `-9`, `-STOP`) to
/// `pid`; the test fails if `kill` does (a guarded child not yet reaped can
/// always be signalled).
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, "--", &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid} failed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_orphaned_grandchild_is_still_a_descendant() {
        // sh starts a sleeper in the background and exits: the sleeper is
        // orphaned, and comes here, not to init.
        let _ = descendants();
        let out =
            Command::new("sh").args(["-c", "sleep 30 >/dev/null 2>&1 & echo $!"]).output().unwrap();
        let orphan: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(descendants().contains(&orphan), "{orphan} not in {:?}", descendants());
        signal(orphan, "-9");
        wait_for("the adopted sleeper gone", Duration::from_secs(10), || {
            !descendants().contains(&orphan)
        });
    }

    /// A stand-in whose argument list reads like a game's (`… sim serve
    /// --port P`, the guard's with its marker): one Python process, its
    /// arguments after the script, asleep until its guard kills it. Started
    /// as the interpreter itself, never through `python3` on the PATH:
    /// where that is a version manager's shell script (pyenv's shim), the
    /// script's subshells are forks with the stand-in's very arguments, and
    /// `games_on` rightly saw two games (3 runs in 20 of the sweep).
    fn fake(args: &[&str]) -> Kill {
        static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let python = PYTHON.get_or_init(|| {
            let o = Command::new("python3")
                .args(["-c", "import sys; print(sys.executable)"])
                .output()
                .unwrap();
            String::from_utf8(o.stdout).unwrap().trim().to_string()
        });
        Kill::spawn(Command::new(python).args(["-c", "import time; time.sleep(30)"]).args(args))
    }

    #[test]
    fn games_on_finds_this_tests_games_on_that_port_and_not_their_guards() {
        let port = free_port();
        let other = free_port();
        let game =
            fake(&["rulka", "sim", "serve", "--config", "c.yaml", "--port", &port.to_string()]);
        let _guard = fake(&["rulka", "__game-guard", "sim", "serve", "--port", &port.to_string()]);
        let _elsewhere = fake(&["rulka", "sim", "serve", "--port", &other.to_string()]);
        let _not_a_game = fake(&["rulka", "sim", "export-map", "--port", &port.to_string()]);
        let _no_port = fake(&["rulka", "sim", "serve", &port.to_string()]);
        // Started means exec'd: a child between fork and exec, or in exec,
        // reads as another argv (or none), and was once taken for a game
        // that was missing (a clean clone's run on a busy machine).
        wait_for("the stand-ins started", Duration::from_secs(10), || {
            descendants().into_iter().filter(|&p| argv(p).iter().any(|a| a == "rulka")).count() >= 5
        });
        // What each stand-in was when it was not found (once, in a clean
        // clone's run, the game was missing: alive or not, its argv?).
        let seen = || {
            descendants()
                .into_iter()
                .map(|p| format!("{p} ppid {:?} {:?}", parent_of(p), argv(p)))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            games_on(port),
            [game.id()],
            "game {} alive {}; this test {}; descendants {:?}",
            game.id(),
            rulka_shm::process_alive(game.id()),
            std::process::id(),
            seen()
        );
        assert!(games_on(free_port()).is_empty());
    }

    #[test]
    fn children_of_lists_direct_children_only() {
        // sh (a child of this test) starts two sleepers and waits: they are
        // its children, not this test's; this test's child is sh.
        // A child is listed from its fork on, but is `sleep` only once it
        // has exec'd (until then its argument list is sh's): wait for both
        // execs, never read the argument list before they are certain.
        let sh = Kill::spawn(Command::new("sh").args(["-c", "sleep 30 & sleep 30 & wait"]));
        let is_sleep = |k: &u32| argv(*k).first().is_some_and(|a| a.ends_with("sleep"));
        // The sleepers are killed however the test ends (they are sh's
        // children: sh's guard does not reach them).
        struct Sleepers(u32);
        impl Drop for Sleepers {
            fn drop(&mut self) {
                for k in children_of(self.0) {
                    let _ = Command::new("kill").args(["-9", "--", &k.to_string()]).status();
                }
            }
        }
        let _sleepers = Sleepers(sh.id());
        wait_for("two sleepers under sh, both exec'd", Duration::from_secs(10), || {
            let kids = children_of(sh.id());
            kids.len() == 2 && kids.iter().all(is_sleep)
        });
        let kids = children_of(sh.id());
        assert_eq!(kids.len(), 2, "{kids:?}");
        assert!(children_of(std::process::id()).contains(&sh.id()));
        assert!(kids.iter().all(|k| !children_of(std::process::id()).contains(k)));
        assert!(children_of(kids[0]).is_empty());
    }

    #[test]
    fn a_logged_child_writes_its_output_into_the_named_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut k = Kill::spawn_logged(
            Command::new("sh").args(["-c", "echo to-out; echo to-err >&2"]),
            dir.path(),
            "job",
        );
        assert!(wait_exit(k.child(), Duration::from_secs(20)).0.success());
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!((read("job.out"), read("job.err")), ("to-out\n".into(), "to-err\n".into()));
    }

    #[test]
    fn a_dropped_guard_kills_its_child() {
        let k = Kill::spawn(Command::new("sleep").arg("30"));
        let pid = k.id();
        assert!(rulka_shm::process_alive(pid));
        assert!(descendants().contains(&pid));
        drop(k);
        assert!(!rulka_shm::process_alive(pid), "{pid} outlived its guard");
    }

    #[test]
    fn wait_exit_returns_the_status_and_fails_a_child_that_outlives_its_limit() {
        let mut k = Kill::spawn(Command::new("sh").args(["-c", "sleep 0.3; exit 3"]));
        let (status, took) = wait_exit(k.child(), Duration::from_secs(20));
        assert_eq!(status.code(), Some(3));
        assert!(took >= Duration::from_millis(250), "{took:?}");
        let mut slow = Kill::spawn(Command::new("sleep").arg("30"));
        let late = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_exit(slow.child(), Duration::from_millis(200))
        }));
        assert!(late.is_err(), "a child alive past the limit must fail the test");
    }

    #[test]
    fn wait_for_returns_once_true_and_fails_past_its_limit() {
        let t0 = Instant::now();
        wait_for("300 ms", Duration::from_secs(5), || t0.elapsed() > Duration::from_millis(300));
        assert!(t0.elapsed() > Duration::from_millis(300));
        let never =
            std::panic::catch_unwind(|| wait_for("never", Duration::from_millis(200), || false));
        assert!(never.is_err());
    }

    #[test]
    fn free_ports_are_never_given_twice() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
        assert!(ports.iter().all(|&p| p > 0 && p < 65000));
    }
}
