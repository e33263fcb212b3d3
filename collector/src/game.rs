//! Games a collector launches, watches and relaunches itself
//! (`environment.tmi.launch`): each collector slot owns one game on its
//! port.
//!
//! On Linux a game is started through a **guard**: a small process of the
//! collector's own binary (`<exe> __game-guard GRACE_MS -- COMMAND…`) that
//! makes itself the reaper of its orphans, starts the command, and lives as
//! long as any process below it does (a launcher that starts the game and
//! exits, Wine's `wineserver`: all of them). The guard is in a process group
//! of its own and receives SIGTERM when the collector dies, even by SIGKILL;
//! on SIGTERM it ends its whole tree — SIGTERM, `kill_grace_s`, SIGKILL. So
//! when a collector ends, however it ends, no game it started is left.
//!
//! On Windows a game is started inside a **Job Object** with
//! kill-on-close (`rulka_shm::job`): it is created suspended, put in the
//! job, then resumed, so that everything it starts (TMLoader's game) is in
//! the job too; the job's handle is the collector's, so when the collector
//! ends — killed included — Windows ends the game's whole tree. A game that
//! hangs is ended by terminating its job (Windows has no SIGTERM for a game:
//! `kill_grace_s` does not apply there).
//!
//! [`GameSlot`] is one slot's supervision: launch, wait for the plugin
//! (retrying the connection up to `startup_timeout_s`), hand a connected
//! [`TmiEnv`] to the collector; when the game hangs (a timeout), crashes (a
//! closed socket, its processes gone), or desyncs (a protocol error), kill
//! its tree and launch it again, with back-off (2 s doubling to
//! `max_backoff_s`) and, after `max_failures` failed launches in a row, a
//! loud report instead of a silent loop. Games are also restarted every
//! `restart_every_h` hours, between runs. Without `launch` (a game started
//! by hand), a slot only connects, naming a game that does not answer
//! (port, for how long) at most every 30 s — at the start, and whenever the
//! game hangs, crashes or breaks the protocol mid-run: the slot says so
//! once, never kills it, and waits for it to answer again (a game that
//! fails again and again before serving a whole run is tried after a pause
//! growing to 30 s).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rulka_config::{Config, LaunchConfig};

use rulka_env::{EnvError, TmiEnv};

/// The first argument that makes a rulka binary run as a game guard.
#[cfg(unix)]
pub const GUARD_ARG: &str = "__game-guard";

/// How often a lasting problem is said again.
const SAY_EVERY: Duration = Duration::from_secs(30);

/// Runs the guard (see the module docs): `args` are `GRACE_MS -- COMMAND…`.
/// Returns the process's exit code.
#[cfg(unix)]
pub fn guard_main(args: &[String]) -> i32 {
    let (Some(grace), Some(sep)) = (args.first(), args.get(1)) else {
        tracing::error!("{GUARD_ARG}: usage: {GUARD_ARG} GRACE_MS -- COMMAND [ARGS…]");
        return 2;
    };
    let (Ok(grace_ms), "--", Some(program)) = (grace.parse::<u64>(), sep.as_str(), args.get(2))
    else {
        tracing::error!("{GUARD_ARG}: usage: {GUARD_ARG} GRACE_MS -- COMMAND [ARGS…]");
        return 2;
    };
    rulka_shm::become_subreaper();
    rulka_shm::install_stop_handler();
    let me = std::process::id();
    let mut child = match Command::new(program).args(&args[3..]).stdin(Stdio::null()).spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{GUARD_ARG}: starting {program}: {e}");
            return 127;
        }
    };
    let mut code = None;
    loop {
        if code.is_none() {
            if let Ok(Some(s)) = child.try_wait() {
                code = Some(s.code().unwrap_or(1));
            }
        }
        // Adopted orphans that exited (we are their reaper now).
        rulka_shm::reap_exited_children();
        if rulka_shm::stop_requests() > 0 {
            end_tree(me, Duration::from_millis(grace_ms));
            return 0;
        }
        if code.is_some() && rulka_shm::descendants(me).is_empty() {
            return code.unwrap_or(0);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGTERM to every process below `root`, up to `grace` for them to end,
/// then SIGKILL to what is left; reaps what it can.
#[cfg(unix)]
fn end_tree(root: u32, grace: Duration) {
    for p in rulka_shm::descendants(root) {
        rulka_shm::send_signal(p, rulka_shm::SIGTERM);
    }
    let t0 = Instant::now();
    while t0.elapsed() < grace && !rulka_shm::descendants(root).is_empty() {
        rulka_shm::reap_exited_children();
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in rulka_shm::descendants(root) {
        rulka_shm::send_signal(p, rulka_shm::SIGKILL);
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) && !rulka_shm::descendants(root).is_empty() {
        rulka_shm::reap_exited_children();
        std::thread::sleep(Duration::from_millis(20));
    }
    rulka_shm::reap_exited_children();
}

/// `template` with `{port}` and `{id}` replaced.
pub fn expand(template: &[String], port: u16, id: u32) -> Vec<String> {
    template
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()).replace("{id}", &id.to_string()))
        .collect()
}

/// Sends `cmd`'s stdout and stderr to the end of `log` (when given).
fn log_into(cmd: &mut Command, log: Option<&std::path::Path>) -> std::io::Result<()> {
    if let Some(l) = log {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(l)?;
        let f2 = f.try_clone()?;
        cmd.stdout(f).stderr(f2);
    }
    Ok(())
}

/// One running game: its guard process (and, below it, the game's tree).
#[cfg(unix)]
#[derive(Debug)]
pub struct Game {
    guard: Child,
    started: Instant,
}

#[cfg(unix)]
impl Game {
    /// Starts `argv` through a guard of `guard_exe` (see the module docs),
    /// its output appended to `log`.
    pub fn spawn(
        guard_exe: &std::path::Path,
        argv: &[String],
        grace: Duration,
        log: Option<&std::path::Path>,
    ) -> Result<Self, EnvError> {
        let io = |op: &str, source| EnvError::Io { addr: argv.join(" "), op: op.into(), source };
        let mut cmd = Command::new(guard_exe);
        cmd.arg(GUARD_ARG).arg(grace.as_millis().to_string()).arg("--").args(argv);
        cmd.stdin(Stdio::null());
        log_into(&mut cmd, log).map_err(|e| io("opening the game's log", e))?;
        rulka_shm::tie_to_this_thread(&mut cmd);
        let guard = cmd.spawn().map_err(|e| io("starting the game", e))?;
        Ok(Self { guard, started: Instant::now() })
    }

    /// The guard's pid.
    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// How long ago it was started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// `Some(how)` once the game's whole tree has ended.
    pub fn ended(&mut self) -> Option<String> {
        match self.guard.try_wait() {
            Ok(Some(s)) => Some(s.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// Ends the game's whole tree: SIGTERM to the guard (which gives its
    /// processes `grace`, then SIGKILLs them), then SIGKILL to the guard and
    /// to whatever is left below it.
    pub fn stop(&mut self, grace: Duration) {
        let pid = self.guard.id();
        let below = rulka_shm::descendants(pid);
        rulka_shm::send_signal(pid, rulka_shm::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < grace + Duration::from_secs(3) {
            if !matches!(self.guard.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.guard.kill();
        let _ = self.guard.wait();
        for p in below.into_iter().chain(rulka_shm::descendants(pid)) {
            rulka_shm::send_signal(p, rulka_shm::SIGKILL);
        }
    }
}

#[cfg(unix)]
impl Drop for Game {
    fn drop(&mut self) {
        if matches!(self.guard.try_wait(), Ok(None)) {
            self.stop(Duration::from_secs(1));
        }
    }
}

/// One running game: its job (and in it, the game's whole tree).
#[cfg(windows)]
#[derive(Debug)]
pub struct Game {
    job: rulka_shm::Job,
    child: Child,
    started: Instant,
}

#[cfg(windows)]
impl Game {
    /// Starts `argv` inside a kill-on-close job of its own (see the module
    /// docs), its output appended to `log`. `_guard_exe` and `_grace` are
    /// Linux's (the guard, SIGTERM's grace): a job needs neither.
    pub fn spawn(
        _guard_exe: &std::path::Path,
        argv: &[String],
        _grace: Duration,
        log: Option<&std::path::Path>,
    ) -> Result<Self, EnvError> {
        let io = |op: &str, source| EnvError::Io { addr: argv.join(" "), op: op.into(), source };
        let Some(program) = argv.first() else {
            return Err(EnvError::State("environment.tmi.launch.command is empty".into()));
        };
        let mut cmd = Command::new(program);
        cmd.args(&argv[1..]).stdin(Stdio::null());
        log_into(&mut cmd, log).map_err(|e| io("opening the game's log", e))?;
        let job = rulka_shm::Job::new().map_err(|e| io("creating the game's job object", e))?;
        let child = job.spawn(&mut cmd).map_err(|e| io("starting the game", e))?;
        Ok(Self { job, child, started: Instant::now() })
    }

    /// The pid of the process started (a launcher may have exited since).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How long ago it was started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// `Some(how)` once the game's whole tree has ended (the process started
    /// and everything it started: a launcher may exit first).
    pub fn ended(&mut self) -> Option<String> {
        let first = match self.child.try_wait() {
            Ok(Some(s)) => s.to_string(),
            Ok(None) => return None,
            Err(e) => return Some(e.to_string()),
        };
        match self.job.active_processes() {
            Ok(0) => Some(first),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// Ends the game's whole tree at once (the job terminated).
    pub fn stop(&mut self, _grace: Duration) {
        let _ = self.job.terminate();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3)
            && self.job.active_processes().is_ok_and(|n| n > 0)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(windows)]
impl Drop for Game {
    fn drop(&mut self) {
        if self.job.active_processes().is_ok_and(|n| n > 0) {
            self.stop(Duration::ZERO);
        }
    }
}

/// Counters of a slot's game.
pub type GameStats = rulka_config::GameCounters;

/// How a game failed, from the error its collector met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It stopped answering (a timeout).
    Hang,
    /// It is gone (socket closed or reset, processes ended).
    Crash,
    /// It said something the protocol does not allow (or a corrupt state).
    Desync,
}

impl Failure {
    /// Classifies an environment error.
    pub fn of(e: &EnvError) -> Self {
        match e {
            EnvError::Timeout { .. } => Failure::Hang,
            EnvError::Io { source, .. } if source.kind() == std::io::ErrorKind::TimedOut => {
                Failure::Hang
            }
            EnvError::Io { source, .. } if source.kind() == std::io::ErrorKind::WouldBlock => {
                Failure::Hang
            }
            EnvError::Io { .. } => Failure::Crash,
            _ => Failure::Desync,
        }
    }
}

/// One collector slot's game (see the module docs).
#[derive(Debug)]
pub struct GameSlot {
    cfg: Config,
    launch: Option<LaunchConfig>,
    id: u32,
    port: u16,
    guard_exe: PathBuf,
    log: Option<PathBuf>,
    game: Option<Game>,
    stats: GameStats,
    backoff: Duration,
    failures_in_a_row: u32,
    next_try: Instant,
    reported_streak: bool,
    last_said: Option<Instant>,
    waiting_since: Option<Instant>,
    quick_failures: u32,
    failed_since_connecting: bool,
}

impl GameSlot {
    /// The slot of collector `id`, whose game listens on `port`; games are
    /// started through guards of `guard_exe` (the collector's own binary),
    /// their output appended to `log`.
    pub fn new(cfg: &Config, id: u32, port: u16, guard_exe: PathBuf, log: Option<PathBuf>) -> Self {
        Self {
            cfg: cfg.clone(),
            launch: cfg.environment.tmi.launch.clone(),
            id,
            port,
            guard_exe,
            log,
            game: None,
            stats: GameStats::default(),
            backoff: Duration::from_secs(2),
            failures_in_a_row: 0,
            next_try: Instant::now(),
            reported_streak: false,
            last_said: None,
            waiting_since: None,
            quick_failures: 0,
            failed_since_connecting: false,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> GameStats {
        self.stats
    }

    /// Whether rulka launches this slot's game.
    pub fn launches(&self) -> bool {
        self.launch.is_some()
    }

    fn say(&mut self, msg: &str, rate_limited: bool) {
        if rate_limited && self.last_said.is_some_and(|t| t.elapsed() < SAY_EVERY) {
            return;
        }
        self.last_said = Some(Instant::now());
        tracing::info!("[rulka collect {}] game on port {}: {msg}", self.id, self.port);
    }

    fn kill(&mut self) {
        if let Some(mut g) = self.game.take() {
            let grace =
                Duration::from_secs(u64::from(self.launch.as_ref().map_or(5, |l| l.kill_grace_s)));
            g.stop(grace);
        }
        if let Some(l) = &self.launch {
            if let Some(stop) = l.stop_command.as_ref().filter(|c| !c.is_empty()) {
                let argv = expand(stop, self.port, self.id);
                let _ = Command::new(&argv[0])
                    .args(&argv[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        self.stats.up = false;
    }

    /// A launch (or connection) that failed: back-off, and a loud report
    /// once it has failed `max_failures` times in a row.
    fn launch_failed(&mut self, why: &str) {
        self.kill();
        self.stats.failed_launches += 1;
        self.failures_in_a_row += 1;
        let (max_failures, max_backoff) =
            self.launch.as_ref().map_or((5, Duration::from_secs(300)), |l| {
                (l.max_failures, Duration::from_secs(u64::from(l.max_backoff_s)))
            });
        self.next_try = Instant::now() + self.backoff;
        let retry = self.backoff;
        self.backoff = (self.backoff * 2).min(max_backoff);
        if self.failures_in_a_row >= max_failures && !self.reported_streak {
            self.reported_streak = true;
            self.say(
                &format!(
                    "FAILED {} launches in a row (last: {why}); check environment.tmi.launch.command; retrying every {} s at most",
                    self.failures_in_a_row,
                    max_backoff.as_secs()
                ),
                false,
            );
        } else {
            self.say(&format!("{why}; launching it again in {:.0} s", retry.as_secs_f64()), false);
        }
    }

    /// Whether `e`, met while driving, is the game's fault (it hung, crashed,
    /// closed its socket, sent garbage or a state that cannot be an
    /// observation) — the slot goes on with [`GameSlot::failed`] — rather
    /// than the collector's (a call out of order, a bad action: a bug, which
    /// ends the collector).
    pub fn is_game_fault(e: &EnvError) -> bool {
        !matches!(e, EnvError::State(_) | EnvError::BadAction { .. })
    }

    /// A game that served runs failed (`e`, met by the collector; the run in
    /// flight stays incomplete). A game rulka launched: its tree is killed
    /// and the next [`GameSlot::connect`] launches it again. A game started
    /// by hand is never killed: the slot says so once, with its port, and
    /// the next [`GameSlot::connect`] waits for it to answer again (saying
    /// so every 30 s); one that failed before it served a whole run
    /// (`served_a_run` false), again and again, is tried after a pause
    /// growing to 30 s. A game whose processes are gone crashed, whatever
    /// the error said.
    pub fn failed(&mut self, e: &EnvError, served_a_run: bool) {
        let gone = self.game.as_mut().is_some_and(|g| {
            // The guard ends shortly after the game's last process.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(300) {
                if g.ended().is_some() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        });
        let kind = if gone { Failure::Crash } else { Failure::of(e) };
        match kind {
            Failure::Hang => self.stats.hangs += 1,
            Failure::Crash => self.stats.crashes += 1,
            Failure::Desync => self.stats.desyncs += 1,
        }
        let ran = self.game.as_ref().map_or(Duration::ZERO, Game::age);
        let what = match kind {
            Failure::Hang => "stopped answering",
            Failure::Crash => "is gone",
            Failure::Desync => "broke the protocol",
        };
        if self.launch.is_none() {
            // Never killed. A game that fails before it served a run, again and
            // again, is tried after a growing pause (1 s doubling to 30 s), so
            // that a lasting fault is one line every 30 s, not a loop.
            self.quick_failures = if served_a_run { 0 } else { self.quick_failures + 1 };
            let pause = Duration::from_secs(1 << self.quick_failures.min(5)).min(SAY_EVERY);
            let streak = if self.quick_failures > 0 {
                format!(
                    " (it failed before a whole run {} times in a row: next try in {} s)",
                    self.quick_failures,
                    pause.as_secs()
                )
            } else {
                String::new()
            };
            self.say(
                &format!(
                    "{what} ({e}); the run in flight is dropped (incomplete, never trained on); waiting for the game to answer again{streak}"
                ),
                false,
            );
            self.stats.up = false;
            self.failed_since_connecting = true;
            self.waiting_since = Some(Instant::now());
            self.next_try = Instant::now() + pause;
            return;
        }
        // A game that ran a while is a fresh start, not a failing streak.
        if ran > Duration::from_secs(60) {
            self.backoff = Duration::from_secs(2);
            self.failures_in_a_row = 0;
            self.reported_streak = false;
        }
        self.say(&format!("{what} ({e}); killing its processes"), false);
        self.kill();
        self.next_try = Instant::now() + self.backoff;
    }

    /// Whether the game is due for its scheduled restart (check between runs).
    pub fn restart_due(&self) -> bool {
        let Some(l) = &self.launch else { return false };
        l.restart_every_h > 0.0
            && self
                .game
                .as_ref()
                .is_some_and(|g| g.age().as_secs_f64() >= l.restart_every_h * 3600.0)
    }

    /// Restarts the game on schedule: its tree is killed; the next
    /// [`GameSlot::connect`] launches it again at once.
    pub fn scheduled_restart(&mut self) {
        self.stats.scheduled_restarts += 1;
        self.say("scheduled restart (environment.tmi.launch.restart_every_h)", false);
        self.kill();
        self.next_try = Instant::now();
    }

    /// A connected game, launched (again) first when rulka launches games;
    /// waits — calling `stop` between tries — until one answers. `Ok(None)`:
    /// `stop` said stop.
    /// `on_change` hears the counters whenever they change (a launch, a
    /// failure), for the trainer.
    pub fn connect(
        &mut self,
        stop: &mut dyn FnMut() -> bool,
        on_change: &mut dyn FnMut(GameStats),
    ) -> Result<Option<TmiEnv>, EnvError> {
        let before = self.stats;
        let r = self.connect_inner(stop, on_change);
        if self.stats != before {
            on_change(self.stats);
        }
        r
    }

    fn connect_inner(
        &mut self,
        stop: &mut dyn FnMut() -> bool,
        on_change: &mut dyn FnMut(GameStats),
    ) -> Result<Option<TmiEnv>, EnvError> {
        let host = self.cfg.environment.tmi.host.clone();
        loop {
            if stop() {
                return Ok(None);
            }
            let Some(l) = self.launch.clone() else {
                // Not ours to launch: retry the connection, naming a silent game.
                let since = *self.waiting_since.get_or_insert_with(Instant::now);
                if Instant::now() < self.next_try {
                    sleep_checking(Duration::from_millis(100), stop);
                    continue;
                }
                match TmiEnv::connect_or_stop(&self.cfg, &host, self.port, stop) {
                    Ok(None) => return Ok(None),
                    Ok(Some(env)) => {
                        self.waiting_since = None;
                        if std::mem::take(&mut self.failed_since_connecting) {
                            self.say("answers again; driving on", false);
                        }
                        self.stats.up = true;
                        return Ok(Some(env));
                    }
                    Err(e @ (EnvError::Map { .. } | EnvError::State(_))) => return Err(e),
                    Err(e) => {
                        let msg = format!(
                            "not answering for {:.0} s ({e}); start the game, or let rulka launch it (environment.tmi.launch)",
                            since.elapsed().as_secs_f64()
                        );
                        self.say(&msg, true);
                        sleep_checking(Duration::from_secs(1), stop);
                        continue;
                    }
                }
            };
            if self.game.as_mut().is_some_and(|g| g.ended().is_some()) {
                self.game = None;
            }
            if self.game.is_none() {
                if Instant::now() < self.next_try {
                    sleep_checking(Duration::from_millis(100), stop);
                    continue;
                }
                let argv = expand(&l.command, self.port, self.id);
                match Game::spawn(
                    &self.guard_exe,
                    &argv,
                    Duration::from_secs(u64::from(l.kill_grace_s)),
                    self.log.as_deref(),
                ) {
                    Ok(g) => {
                        self.stats.launches += 1;
                        on_change(self.stats);
                        self.say(
                            &format!("launched `{}` (guard pid {})", argv.join(" "), g.pid()),
                            false,
                        );
                        self.game = Some(g);
                    }
                    Err(e) => {
                        self.launch_failed(&e.to_string());
                        on_change(self.stats);
                        continue;
                    }
                }
            }
            // Wait for the plugin: retry connecting until the start-up timeout.
            let timeout = Duration::from_secs(u64::from(l.startup_timeout_s));
            let t0 = Instant::now();
            let mut last_err = String::from("no answer");
            let env = loop {
                if stop() {
                    return Ok(None);
                }
                if let Some(how) = self.game.as_mut().and_then(Game::ended) {
                    last_err = format!("its processes ended at start ({how})");
                    break None;
                }
                if t0.elapsed() >= timeout {
                    last_err = format!(
                        "did not answer within {} s (environment.tmi.launch.startup_timeout_s): {last_err}",
                        timeout.as_secs()
                    );
                    break None;
                }
                match TmiEnv::connect_or_stop(&self.cfg, &host, self.port, stop) {
                    Ok(None) => return Ok(None),
                    Ok(Some(env)) => break Some(env),
                    Err(e @ (EnvError::Map { .. } | EnvError::State(_))) => return Err(e),
                    Err(e) => {
                        last_err = e.to_string();
                        sleep_checking(Duration::from_millis(500), stop);
                    }
                }
            };
            let Some(mut env) = env else {
                self.launch_failed(&last_err);
                on_change(self.stats);
                continue;
            };
            if let Some(e) = l.post_launch.iter().find_map(|c| {
                env.execute_command(c).err().map(|e| format!("post-launch command {c:?}: {e}"))
            }) {
                self.launch_failed(&e);
                on_change(self.stats);
                continue;
            }
            if self.failures_in_a_row > 0 && self.reported_streak {
                self.say("answers again", false);
            }
            self.failures_in_a_row = 0;
            self.reported_streak = false;
            self.stats.up = true;
            return Ok(Some(env));
        }
    }

    /// Ends the slot's game (if rulka launched it).
    pub fn shutdown(&mut self) {
        self.kill();
    }
}

impl Drop for GameSlot {
    fn drop(&mut self) {
        self.kill();
    }
}

fn sleep_checking(d: Duration, stop: &mut dyn FnMut() -> bool) {
    let t0 = Instant::now();
    while t0.elapsed() < d && !stop() {
        std::thread::sleep(Duration::from_millis(50).min(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_games_faults_are_the_games_and_a_call_out_of_order_is_rulkas() {
        let io = |kind| EnvError::Io {
            addr: "a".into(),
            op: "o".into(),
            source: std::io::Error::new(kind, "x"),
        };
        for e in [
            EnvError::Timeout { addr: "a".into(), op: "o".into(), timeout_ms: 1 },
            io(std::io::ErrorKind::UnexpectedEof),
            EnvError::Protocol { addr: "a".into(), message: "m".into() },
            EnvError::Game("unknown material".into()),
        ] {
            assert!(GameSlot::is_game_fault(&e), "{e}");
        }
        for e in [
            EnvError::State("call reset first".into()),
            EnvError::BadAction { actions: vec![99], reason: "r".into() },
        ] {
            assert!(!GameSlot::is_game_fault(&e), "{e}");
        }
    }
}
