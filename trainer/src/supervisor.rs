//! The collector processes of `rulka train`: started, reaped, restarted with
//! back-off (1 s doubling to 30 s, reset after a minute of good health), and
//! killed and restarted when their heartbeat file goes stale (hung).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;

use rulka_run::RunInfo;

/// Builds the command that starts collector `id` in `incarnation` of the
/// run in the given run directory (stdout, stderr and the heartbeat are set
/// up by the supervisor). The CLI's starts `rulka collect`.
pub type Launcher = Box<dyn Fn(&Path, u32, u32) -> anyhow::Result<Command>>;

/// One collector slot of the supervisor.
#[derive(Debug)]
struct Slot {
    child: Option<Child>,
    incarnation: u32,
    started: Instant,
    next_start: Option<Instant>,
    backoff: Duration,
    crashes: u32,
    hung: u32,
}

/// Starts, watches and restarts the local collector processes.
pub struct Supervisor {
    run: PathBuf,
    launcher: Launcher,
    slots: Vec<Slot>,
    heartbeat_timeout: Duration,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("run", &self.run)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// `n` collector slots of the run in `run`, started by `launcher`; a
    /// collector whose heartbeat file is older than `heartbeat_timeout` is hung.
    pub fn new(run: &Path, launcher: Launcher, n: u32, heartbeat_timeout: Duration) -> Self {
        let slots = (0..n)
            .map(|_| Slot {
                child: None,
                incarnation: 0,
                started: Instant::now(),
                next_start: Some(Instant::now()),
                backoff: Duration::from_secs(1),
                crashes: 0,
                hung: 0,
            })
            .collect();
        Self { run: run.to_path_buf(), launcher, slots, heartbeat_timeout }
    }

    /// Slot `i`'s first incarnation is `first[i]` (a run's later start
    /// goes on from its earlier starts' numbers).
    pub fn with_first_incarnations(mut self, first: &[u32]) -> Self {
        for (slot, &n) in self.slots.iter_mut().zip(first) {
            slot.incarnation = n;
        }
        self
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let logs = crate::RunDir::new(&self.run).logs();
        std::fs::create_dir_all(&logs)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("collector{i}.log")))?;
        let hb = RunInfo::heartbeat_path(&self.run, i as u32);
        let _ = std::fs::write(&hb, "start");
        let mut cmd = (self.launcher)(&self.run, i as u32, self.slots[i].incarnation)?;
        cmd.env("RULKA_TRAINER_PID", std::process::id().to_string())
            .env("OMP_NUM_THREADS", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let slot = &mut self.slots[i];
        slot.child = Some(cmd.spawn().context("starting a collector process")?);
        slot.started = Instant::now();
        slot.next_start = None;
        Ok(())
    }

    /// Reaps exited collectors, kills hung ones, restarts due ones. Returns
    /// the slots whose process ended (their partial trajectories must go).
    pub fn tick(&mut self, stopping: bool) -> anyhow::Result<Vec<u32>> {
        let mut ended = Vec::new();
        for i in 0..self.slots.len() {
            let hb = RunInfo::heartbeat_path(&self.run, i as u32);
            let timeout = self.heartbeat_timeout;
            let slot = &mut self.slots[i];
            if let Some(child) = slot.child.as_mut() {
                let mut exited = child.try_wait()?.map(|s| s.to_string());
                if exited.is_none() && !stopping {
                    let age = std::fs::metadata(&hb)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok())
                        .unwrap_or_default();
                    if age > timeout && slot.started.elapsed() > timeout {
                        tracing::warn!(
                            "\n[rulka train] collector {i} silent for {:.0} s: killing it (hung)",
                            age.as_secs_f64()
                        );
                        let _ = child.kill();
                        let status = child.wait()?;
                        slot.hung += 1;
                        exited = Some(format!("killed as hung ({status})"));
                    }
                }
                if let Some(how) = exited {
                    slot.child = None;
                    ended.push(i as u32);
                    if !stopping {
                        slot.crashes += 1;
                        if slot.started.elapsed() > Duration::from_secs(60) {
                            slot.backoff = Duration::from_secs(1);
                        }
                        tracing::warn!(
                            "\n[rulka train] collector {i} exited ({how}); restarting in {:.0} s (see logs/collector{i}.log)",
                            slot.backoff.as_secs_f64()
                        );
                        slot.next_start = Some(Instant::now() + slot.backoff);
                        slot.backoff = (slot.backoff * 2).min(Duration::from_secs(30));
                        slot.incarnation += 1;
                    }
                }
            }
            if !stopping && self.slots[i].child.is_none() {
                if let Some(t) = self.slots[i].next_start {
                    if Instant::now() >= t {
                        self.spawn(i)?;
                    }
                }
            }
        }
        Ok(ended)
    }

    /// Collector processes running now.
    pub fn alive(&self) -> usize {
        self.slots.iter().filter(|s| s.child.is_some()).count()
    }

    /// SIGTERM to every collector, up to `grace` for them to exit, then SIGKILL.
    pub fn shutdown(&mut self, grace: Duration) {
        for s in &mut self.slots {
            if let Some(c) = &s.child {
                // SIGTERM: the collector abandons its rollout and detaches.
                rulka_shm::send_signal(c.id(), rulka_shm::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        for s in &mut self.slots {
            if let Some(mut c) = s.child.take() {
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) if Instant::now() >= deadline => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break;
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
        }
    }
}

impl Drop for Supervisor {
    /// An error path out of the training loop still stops the collectors.
    fn drop(&mut self) {
        self.shutdown(Duration::from_secs(2));
    }
}

impl Supervisor {
    /// Restarts so far (crashed, killed, or hung).
    pub fn restarts(&self) -> u64 {
        self.slots.iter().map(|s| u64::from(s.crashes)).sum()
    }

    /// Collectors killed for a stale heartbeat.
    pub fn hung(&self) -> u64 {
        self.slots.iter().map(|s| u64::from(s.hung)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot whose collector exits at once (`sh -c 'exit 1'`), or sleeps.
    fn supervisor(dir: &Path, script: &'static str, timeout: Duration) -> Supervisor {
        let launcher: Launcher = Box::new(move |_, _, _| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            Ok(c)
        });
        Supervisor::new(dir, launcher, 1, timeout)
    }

    /// Ticks until the slot's collector has ended, then returns the wait
    /// the supervisor set before its restart.
    fn next_crash(s: &mut Supervisor) -> Duration {
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < Duration::from_secs(20), "the collector never ended");
            if !s.tick(false).unwrap().is_empty() {
                let at = s.slots[0].next_start.expect("a restart is due");
                return at.saturating_duration_since(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// 1 s, doubling to 30 s, back to 1 s after a minute of good health;
    /// each restart a new incarnation. (The waits are skipped: the test
    /// reads what was set, within the 100 ms a loaded machine may take.)
    #[test]
    fn a_crashing_collector_is_restarted_after_1_s_doubling_to_30_s() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = supervisor(dir.path(), "exit 1", Duration::from_secs(600));
        let mut waits = Vec::new();
        for _ in 0..7 {
            waits.push(next_crash(&mut s).as_secs_f64().round());
            s.slots[0].next_start = Some(Instant::now());
        }
        assert_eq!(waits, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]);
        assert_eq!((s.restarts(), s.slots[0].incarnation), (7, 7));
        // A collector that ran for over a minute before it crashed starts the
        // back-off over.
        s.tick(false).unwrap(); // started again
        s.slots[0].started = Instant::now() - Duration::from_secs(61);
        assert_eq!(next_crash(&mut s).as_secs_f64().round(), 1.0);
    }

    /// A collector whose heartbeat file is older than the timeout is killed
    /// as hung and restarted; one whose heartbeat is fresh is left alone.
    #[test]
    fn a_collector_with_a_stale_heartbeat_is_killed_as_hung() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = supervisor(dir.path(), "exec sleep 60", Duration::from_millis(300));
        s.tick(false).unwrap();
        let hb = RunInfo::heartbeat_path(dir.path(), 0);
        let fresh = Instant::now() + Duration::from_millis(800);
        while Instant::now() < fresh {
            std::fs::write(&hb, "beat").unwrap();
            assert!(s.tick(false).unwrap().is_empty(), "killed with a fresh heartbeat");
            std::thread::sleep(Duration::from_millis(20));
        }
        let wait = next_crash(&mut s);
        assert_eq!((s.hung(), s.restarts()), (1, 1));
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
    }
}
