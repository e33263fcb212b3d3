//! A TMInterface-protocol server that wraps the built-in simulator on
//! loopback: the test double for the game, behaving as the original's
//! `Python_Link.as` plugin does.
//!
//! - On connect it sends the on-connect sync. It reads the client's commands
//!   **only while it waits for the answer to a sync call**, as the plugin's
//!   `WaitForResponse` (commands sent at other times wait in the socket).
//! - `map <seed>` loads the simulator's track `seed` (of the config's
//!   preset); a race starts with a 100 ms countdown (run steps at −100 and
//!   −50 ms) and is then ticked every `ms_per_tm_engine_step` while the speed
//!   is above 0, a run-step sync whenever the race time is a multiple of the
//!   `set_on_step_period` period. Crossing the finish line sends the
//!   checkpoint-count sync `(1, 1)`; unless the client then prevents the
//!   finish (`prevent_simulation_finish`, or rewinding to the state with its
//!   last `cp_times` entry set to −1), the race is over: no more run steps.
//! - A requested frame is sent (as the plugin's `Render`) whenever one is
//!   pending, paused or not, as W·H·4 BGRA bytes.
//! - `C_GET_SIMULATION_STATE` answers with the game's `SimStateData` layout
//!   ([`super::state`]), the simulator's exact state in its opaque region, so
//!   rewinding to a state it sent is exact.
//! - The plugin's response timeout (`set_timeout`, 2000 ms until set): a
//!   client silent that long inside a sync call is disconnected.
//!
//! Faults can be injected after a number of server→client messages (a
//! stall, a disconnect in the middle of a message, a malformed message), or
//! after a number of run steps, as a game misbehaves: it hangs, exits,
//! closes the socket mid-message, sends a corrupt state, or stops sending
//! steps while still answering (speed 0). `rulka sim serve` takes them as
//! options, so every game fault is tested with real processes.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rulka_config::Config;

use super::msg;
use super::state::GameState;
use crate::sim::{Sim, SimParams, SimState};

/// A fault to inject, counted in server→client messages (sync calls and replies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimServerFault {
    /// Behave.
    None,
    /// Stop answering (hold the connection open, silent) from message `after`.
    Stall {
        /// Messages sent normally first.
        after: usize,
    },
    /// Send half of message `after`, then close the connection.
    DisconnectMidMessage {
        /// Messages sent normally first.
        after: usize,
    },
    /// Send an unknown message tag (999) in place of message `after`.
    Malformed {
        /// Messages sent normally first.
        after: usize,
    },
    /// After `steps` run steps, stop answering (a hung game).
    HangAfterSteps {
        /// Run steps sent normally first.
        steps: usize,
    },
    /// After `steps` run steps, end the whole process with code 3 (a game
    /// that crashes; for `rulka sim serve`, never in a process that hosts
    /// other work).
    ExitAfterSteps {
        /// Run steps sent normally first.
        steps: usize,
    },
    /// After `steps` run steps, send half of the next message and close.
    CloseMidMessageAfterSteps {
        /// Run steps sent normally first.
        steps: usize,
    },
    /// After `steps` run steps, answer every state request with bytes that
    /// are not a `SimStateData`.
    CorruptStateAfterSteps {
        /// Run steps sent normally first.
        steps: usize,
    },
    /// After `steps` run steps, send no more steps while answering commands
    /// (a game left at speed 0).
    StopStepsAfter {
        /// Run steps sent normally first.
        steps: usize,
    },
    /// After `steps` run steps the car jumps 30 m along the road in one
    /// engine step (a respawn or a cut, for `rulka map record`'s refusal;
    /// with [`SimServer::self_driving`]).
    JumpAfterSteps {
        /// Run steps sent normally first.
        steps: usize,
    },
}

/// A command the server received, for tests to check.
#[derive(Debug, Clone, PartialEq)]
pub enum SimServerReceived {
    /// `C_SET_SPEED`.
    SetSpeed(f32),
    /// `C_REWIND_TO_STATE` with a state of this many bytes.
    RewindToState(usize),
    /// `C_REWIND_TO_CURRENT_STATE`.
    RewindToCurrentState,
    /// `C_GET_SIMULATION_STATE`.
    GetSimulationState,
    /// `C_SET_INPUT_STATE` bytes (left, right, accelerate, brake).
    SetInputState([u8; 4]),
    /// `C_GIVE_UP`.
    GiveUp,
    /// `C_PREVENT_SIMULATION_FINISH`.
    PreventSimulationFinish,
    /// `C_SHUTDOWN`.
    Shutdown,
    /// `C_EXECUTE_COMMAND`.
    ExecuteCommand(String),
    /// `C_SET_TIMEOUT`.
    SetTimeout(u32),
    /// `C_RACE_FINISHED`.
    RaceFinished,
    /// `C_REQUEST_FRAME`.
    RequestFrame(i32, i32),
    /// `C_RESET_CAMERA`.
    ResetCamera,
    /// `C_SET_ON_STEP_PERIOD`.
    SetOnStepPeriod(i32),
    /// `C_UNREQUEST_FRAME`.
    UnrequestFrame,
    /// `C_TOGGLE_INTERFACE`.
    ToggleInterface(i32),
    /// `C_IS_IN_MENUS`.
    IsInMenus,
    /// `C_GET_INPUTS`.
    GetInputs,
    /// A response to a sync call of this tag.
    Response(i32),
}

/// A running server (one client at a time; stops when dropped).
#[derive(Debug)]
pub struct SimServer {
    port: u16,
    log: Arc<Mutex<Vec<SimServerReceived>>>,
    stop: Arc<Mutex<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl SimServer {
    /// Binds `127.0.0.1:port` (0: any free port) and serves `cfg`'s simulator.
    pub fn start(cfg: &Config, port: u16, fault: SimServerFault) -> std::io::Result<Self> {
        Self::start_with(cfg, port, fault, None)
    }

    /// As [`SimServer::start`], but the server drives itself: on connect it
    /// loads track 0 (any `map` command loads that one) and the car glides
    /// along the centreline up to `speed` m/s ([`Sim::glide`]), whatever
    /// inputs the client sets — as the game plays a replay or a person drives.
    pub fn self_driving(
        cfg: &Config,
        port: u16,
        fault: SimServerFault,
        speed: f64,
    ) -> std::io::Result<Self> {
        Self::start_with(cfg, port, fault, Some(speed))
    }

    fn start_with(
        cfg: &Config,
        port: u16,
        fault: SimServerFault,
        autopilot: Option<f64>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(Mutex::new(false));
        let params = SimParams::from_config(cfg);
        let (log2, stop2) = (log.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let stopped = || stop2.lock().map(|s| *s).unwrap_or(true);
            while !stopped() {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let _ = stream.set_nodelay(true);
                        let mut conn = Conn::new(
                            stream,
                            Sim::new(params.clone()),
                            fault,
                            log2.clone(),
                            stop2.clone(),
                        );
                        conn.autopilot = autopilot;
                        match conn.serve() {
                            Ok(()) | Err(End::Closed) => {}
                            Err(End::Error(e)) => {
                                tracing::warn!("[tmi server] connection ended: {e}")
                            }
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Self { port, log, stop, thread: Some(thread) })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Commands received so far, in order.
    pub fn received(&self) -> Vec<SimServerReceived> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Blocks until the server stops (it never does on its own: for `rulka sim serve`).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Ok(mut s) = self.stop.lock() {
            *s = true;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why serving a connection ended.
enum End {
    /// The client shut down or closed the socket.
    Closed,
    /// Anything else (logged).
    Error(String),
}

type R<T> = Result<T, End>;

/// The countdown before race time 0, ms.
const COUNTDOWN_MS: i64 = 100;

struct Conn {
    stream: TcpStream,
    sim: Sim,
    fault: SimServerFault,
    sent: usize,
    steps: usize,
    log: Arc<Mutex<Vec<SimServerReceived>>>,
    stop: Arc<Mutex<bool>>,
    keys: [bool; 4],
    period_ms: i64,
    speed: f32,
    response_timeout: Duration,
    frame_request: Option<(i32, i32)>,
    loaded: bool,
    /// Race time while negative (the countdown), `None` once the race runs.
    countdown: Option<i64>,
    finish_prevented: bool,
    race_over: bool,
    /// No more steps (fault injection: a game left at speed 0).
    frozen: bool,
    /// The server drives itself at up to this speed (m/s).
    autopilot: Option<f64>,
    /// Console commands said once on stderr, as the game's console shows them.
    said: std::collections::HashSet<String>,
}

impl Conn {
    fn new(
        stream: TcpStream,
        sim: Sim,
        fault: SimServerFault,
        log: Arc<Mutex<Vec<SimServerReceived>>>,
        stop: Arc<Mutex<bool>>,
    ) -> Self {
        let period_ms = i64::from(sim.params().engine_ms * sim.params().engine_steps);
        Self {
            stream,
            sim,
            fault,
            sent: 0,
            steps: 0,
            log,
            stop,
            keys: [false; 4],
            period_ms,
            speed: 1.0,
            response_timeout: Duration::from_millis(2000),
            frame_request: None,
            loaded: false,
            countdown: None,
            finish_prevented: false,
            race_over: false,
            frozen: false,
            said: std::collections::HashSet::new(),
            autopilot: None,
        }
    }

    fn record(&self, r: SimServerReceived) {
        if let Ok(mut l) = self.log.lock() {
            l.push(r);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.lock().map(|s| *s).unwrap_or(true)
    }

    fn race_time(&self) -> i64 {
        self.countdown.unwrap_or(self.sim.time_ms() as i64)
    }

    /// Sends one protocol message, applying the fault when its turn comes.
    fn send(&mut self, bytes: &[u8]) -> R<()> {
        let n = self.sent;
        self.sent += 1;
        let io = |e: std::io::Error| End::Error(format!("writing: {e}"));
        match self.fault {
            SimServerFault::Stall { after } if n >= after => {
                while !self.stopped() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(End::Error("stalled (fault injection)".into()))
            }
            SimServerFault::DisconnectMidMessage { after } if n == after => {
                let _ = self.stream.write_all(&bytes[..bytes.len() / 2]);
                let _ = self.stream.shutdown(Shutdown::Both);
                Err(End::Error("disconnected mid-message (fault injection)".into()))
            }
            SimServerFault::Malformed { after } if n == after => {
                self.stream.write_all(&999i32.to_le_bytes()).map_err(io)?;
                Err(End::Error("sent a malformed message (fault injection)".into()))
            }
            _ => self.stream.write_all(bytes).map_err(io),
        }
    }

    /// Reads `n` bytes of a command the client is sending (it is mid-message:
    /// a short wait at most).
    fn read_exact(&mut self, n: usize) -> R<Vec<u8>> {
        let mut b = vec![0u8; n];
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(5)));
        self.stream
            .read_exact(&mut b)
            .map_err(|e| End::Error(format!("reading a command: {e}")))?;
        Ok(b)
    }

    fn read_i32(&mut self) -> R<i32> {
        let b = self.read_exact(4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next message tag inside a sync call, as the plugin waits for it:
    /// `None` when the client stayed silent past the response timeout (the
    /// plugin then drops the connection).
    fn read_tag(&mut self) -> R<Option<i32>> {
        let deadline = Instant::now() + self.response_timeout;
        let mut b = [0u8; 4];
        let mut got = 0;
        loop {
            if self.stopped() {
                return Err(End::Closed);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() && got == 0 {
                return Ok(None);
            }
            let slice = left.min(Duration::from_millis(50)).max(Duration::from_millis(1));
            let _ = self.stream.set_read_timeout(Some(slice));
            match self.stream.read(&mut b[got..]) {
                Ok(0) => return Err(End::Closed),
                Ok(k) => {
                    got += k;
                    if got == 4 {
                        return Ok(Some(i32::from_le_bytes(b)));
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(End::Closed),
            }
        }
    }

    /// Sends a sync call and handles commands until its response.
    fn sync_call(&mut self, bytes: &[u8], tag: i32) -> R<()> {
        self.send(bytes)?;
        loop {
            let Some(t) = self.read_tag()? else {
                return Err(End::Error(format!(
                    "client did not answer sync call {tag} within {} ms (plugin timeout): disconnected",
                    self.response_timeout.as_millis()
                )));
            };
            if t == tag {
                self.record(SimServerReceived::Response(t));
                return Ok(());
            }
            self.command(t)?;
        }
    }

    /// Whether the client closed the socket (checked while idle, without
    /// consuming what it may have queued).
    fn client_gone(&mut self) -> bool {
        let _ = self.stream.set_read_timeout(Some(Duration::from_millis(1)));
        let mut b = [0u8; 1];
        match self.stream.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }

    fn serve(&mut self) -> R<()> {
        self.sync_call(&msg::SC_ON_CONNECT_SYNC.to_le_bytes(), msg::SC_ON_CONNECT_SYNC)?;
        if self.autopilot.is_some() && !self.loaded {
            self.start_race(0)?;
        }
        let mut idle_checks = 0u32;
        loop {
            if self.stopped() {
                return Ok(());
            }
            if let Some((w, h)) = self.frame_request.take() {
                self.send_frame(w, h)?;
                continue;
            }
            if self.loaded && self.speed > 0.0 && !self.race_over && !self.frozen {
                self.tick()?;
                continue;
            }
            // Paused (or in menus): the plugin reads nothing outside sync calls.
            idle_checks += 1;
            if idle_checks % 20 == 0 && self.client_gone() {
                return Err(End::Closed);
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// One engine step of the race, then the sync calls it causes.
    fn tick(&mut self) -> R<()> {
        let step = i64::from(self.sim.params().engine_ms);
        let mut crossed = false;
        match self.countdown {
            Some(t) if t + step < 0 => self.countdown = Some(t + step),
            Some(_) => self.countdown = None,
            None => {
                crossed = match self.autopilot {
                    Some(speed) => {
                        let jump = match self.fault {
                            SimServerFault::JumpAfterSteps { steps } if self.steps == steps => 30.0,
                            _ => 0.0,
                        };
                        self.sim.glide(speed, jump)
                    }
                    None => self.sim.tick(self.keys),
                }
                .map_err(|e| End::Error(e.to_string()))?;
            }
        }
        if crossed {
            let mut b = msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC.to_le_bytes().to_vec();
            b.extend_from_slice(&1i32.to_le_bytes());
            b.extend_from_slice(&1i32.to_le_bytes());
            self.finish_prevented = false;
            self.sync_call(&b, msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC)?;
            // Unless the client kept the race running (or started another), it is over.
            if self.sim.finished() && self.countdown.is_none() && !self.finish_prevented {
                self.race_over = true;
                return Ok(());
            }
        }
        let t = self.race_time();
        if t.rem_euclid(self.period_ms) == 0 {
            let mut b = msg::SC_RUN_STEP_SYNC.to_le_bytes().to_vec();
            b.extend_from_slice(&(t as i32).to_le_bytes());
            match self.fault {
                SimServerFault::HangAfterSteps { steps } if self.steps >= steps => {
                    while !self.stopped() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    return Err(End::Error("hung (fault injection)".into()));
                }
                SimServerFault::ExitAfterSteps { steps } if self.steps >= steps => {
                    tracing::info!(
                        "[tmi server] exiting after {steps} run steps (fault injection)"
                    );
                    std::process::exit(3);
                }
                SimServerFault::CloseMidMessageAfterSteps { steps } if self.steps >= steps => {
                    let _ = self.stream.write_all(&b[..b.len() / 2]);
                    let _ = self.stream.shutdown(Shutdown::Both);
                    return Err(End::Error("closed mid-message (fault injection)".into()));
                }
                SimServerFault::StopStepsAfter { steps } if self.steps >= steps => {
                    // No more steps, as a game at speed 0 (it still accepts commands
                    // in later sync calls: there are none).
                    self.frozen = true;
                    return Ok(());
                }
                _ => {}
            }
            self.steps += 1;
            self.sync_call(&b, msg::SC_RUN_STEP_SYNC)?;
        }
        Ok(())
    }

    fn send_frame(&mut self, w: i32, h: i32) -> R<()> {
        let p = self.sim.params();
        if (w as usize, h as usize) != (p.width, p.height) {
            return Err(End::Error(format!(
                "frame {w}x{h} requested; this server renders {}x{}",
                p.width, p.height
            )));
        }
        let mut gray = vec![0u8; p.width * p.height];
        if self.loaded {
            self.sim.render(&mut gray).map_err(|e| End::Error(e.to_string()))?;
        }
        let mut b = msg::SC_REQUESTED_FRAME_SYNC.to_le_bytes().to_vec();
        for g in gray {
            b.extend_from_slice(&[g, g, g, 255]);
        }
        self.sync_call(&b, msg::SC_REQUESTED_FRAME_SYNC)
    }

    /// Loads the track and starts its countdown with no key held.
    fn start_race(&mut self, seed: u64) -> R<()> {
        self.sim.load(seed).map_err(|e| End::Error(e.to_string()))?;
        self.keys = [false; 4];
        self.loaded = true;
        self.countdown = Some(-COUNTDOWN_MS);
        self.race_over = false;
        self.finish_prevented = false;
        Ok(())
    }

    /// The state as the game sends it; the opaque region holds the exact
    /// simulator state and the input keys (the game's save state holds its
    /// input state too).
    fn state_bytes(&self) -> Vec<u8> {
        let mut gs = self.sim.game_state(self.keys);
        gs.player_race_time = self.race_time() as i32;
        let mut private = self.sim.state().map(|s| s.encode()).unwrap_or_default();
        private.push(self.keys.iter().enumerate().fold(0u8, |a, (i, &k)| a | (u8::from(k) << i)));
        gs.encode_with_private(&private)
    }

    /// Handles one command inside a sync call.
    fn command(&mut self, tag: i32) -> R<()> {
        match tag {
            msg::C_SET_SPEED => {
                let b = self.read_exact(4)?;
                let speed = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                self.record(SimServerReceived::SetSpeed(speed));
                self.speed = speed;
            }
            msg::C_REWIND_TO_STATE => {
                let n = self.read_i32()?;
                let b = self.read_exact(n.max(0) as usize)?;
                self.record(SimServerReceived::RewindToState(b.len()));
                if self.loaded {
                    let gs = GameState::decode(&b)
                        .map_err(|e| End::Error(format!("rewind_to_state: {e}")))?;
                    self.sim.rewind_bytes(&b).map_err(|e| End::Error(e.to_string()))?;
                    let private = super::state::private_region(&b).unwrap_or_default();
                    if SimState::decode(private).is_some() {
                        let k = private[SimState::ENCODED_LEN];
                        self.keys = std::array::from_fn(|i| k & (1 << i) != 0);
                    }
                    self.countdown = (gs.race_time() < 0).then_some(i64::from(gs.race_time()));
                    let unfinished = gs.cp_times.last().is_some_and(|t| t.time == -1);
                    if self.sim.finished() && unfinished {
                        self.finish_prevented = true;
                    }
                    self.race_over = self.sim.finished() && !self.finish_prevented;
                }
            }
            msg::C_REWIND_TO_CURRENT_STATE => self.record(SimServerReceived::RewindToCurrentState),
            msg::C_GET_SIMULATION_STATE => {
                self.record(SimServerReceived::GetSimulationState);
                let mut st = if self.loaded { self.state_bytes() } else { Vec::new() };
                if matches!(self.fault, SimServerFault::CorruptStateAfterSteps { steps } if self.steps >= steps)
                {
                    // Not a SimStateData: a version and sizes that say nothing sane.
                    st = vec![0xAB; st.len().max(64)];
                }
                let mut b = (st.len() as i32).to_le_bytes().to_vec();
                b.extend_from_slice(&st);
                self.send(&b)?;
            }
            msg::C_SET_INPUT_STATE => {
                let b = self.read_exact(4)?;
                self.record(SimServerReceived::SetInputState([b[0], b[1], b[2], b[3]]));
                // Wire order left, right, accelerate, brake → keys [accel, brake, left, right].
                self.keys = [b[2] != 0, b[3] != 0, b[0] != 0, b[1] != 0];
            }
            msg::C_GIVE_UP => {
                self.record(SimServerReceived::GiveUp);
                if self.sim.track().is_some() {
                    self.start_race(self.sim.seed())?;
                }
            }
            msg::C_PREVENT_SIMULATION_FINISH => {
                self.record(SimServerReceived::PreventSimulationFinish);
                self.finish_prevented = true;
            }
            msg::C_SHUTDOWN => {
                self.record(SimServerReceived::Shutdown);
                return Err(End::Closed);
            }
            msg::C_EXECUTE_COMMAND => {
                let n = self.read_i32()?;
                let b = self.read_exact(n.max(0) as usize)?;
                let cmd = String::from_utf8_lossy(&b).into_owned();
                if let Some(name) = cmd.strip_prefix("map ") {
                    // With track_from any map name is that map (seed 0).
                    let seed = name.trim().trim_matches('"').parse::<u64>().ok();
                    let any_name =
                        self.sim.params().track_from.is_some() || self.autopilot.is_some();
                    match (seed, any_name) {
                        (Some(seed), _) => self.start_race(seed)?,
                        (None, true) => self.start_race(0)?,
                        (None, false) => {}
                    }
                }
                if !self.said.contains(&cmd) {
                    tracing::info!("[tmi server] console: {cmd}");
                    self.said.insert(cmd.clone());
                }
                self.record(SimServerReceived::ExecuteCommand(cmd));
            }
            msg::C_SET_TIMEOUT => {
                let b = self.read_exact(4)?;
                let ms = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                self.record(SimServerReceived::SetTimeout(ms));
                self.response_timeout = Duration::from_millis(u64::from(ms));
            }
            msg::C_RACE_FINISHED => {
                self.record(SimServerReceived::RaceFinished);
                self.send(&i32::from(self.race_over).to_le_bytes())?;
            }
            msg::C_REQUEST_FRAME => {
                let (w, h) = (self.read_i32()?, self.read_i32()?);
                self.record(SimServerReceived::RequestFrame(w, h));
                self.frame_request = Some((w, h));
            }
            msg::C_RESET_CAMERA => self.record(SimServerReceived::ResetCamera),
            msg::C_SET_ON_STEP_PERIOD => {
                let p = self.read_i32()?;
                self.record(SimServerReceived::SetOnStepPeriod(p));
                self.period_ms = i64::from(p.max(1));
            }
            msg::C_UNREQUEST_FRAME => {
                self.record(SimServerReceived::UnrequestFrame);
                self.frame_request = None;
            }
            msg::C_TOGGLE_INTERFACE => {
                let v = self.read_i32()?;
                self.record(SimServerReceived::ToggleInterface(v));
            }
            msg::C_IS_IN_MENUS => {
                self.record(SimServerReceived::IsInMenus);
                self.send(&i32::from(!self.loaded).to_le_bytes())?;
            }
            msg::C_GET_INPUTS => {
                self.record(SimServerReceived::GetInputs);
                let text = format!("{:?}", self.keys);
                let mut b = (text.len() as i32).to_le_bytes().to_vec();
                b.extend_from_slice(text.as_bytes());
                self.send(&b)?;
            }
            // TmiSync tags other than the awaited one: the plugin takes them as no-ops.
            msg::SC_RUN_STEP_SYNC..=msg::SC_ON_CONNECT_SYNC => {}
            // The plugin logs an unknown message and goes on.
            other => tracing::warn!("[tmi server] got unknown message {other}"),
        }
        Ok(())
    }
}
