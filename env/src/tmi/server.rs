//! A TMInterface-protocol server that wraps the built-in simulator on
//! loopback: the test double for the game. It answers every command the
//! [`super::Client`] sends, runs the simulator for one run-step period per
//! `set_speed(>0)`, sends the checkpoint-count sync on the finish line, and
//! serves requested frames as BGRA. Faults can be injected after a number of
//! server→client messages: a stall, a disconnect in the middle of a message,
//! or a malformed message.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rulka_config::Config;

use super::msg;
use crate::sim::{SimEnv, SimParams, SimState};
use crate::Status;

/// A fault to inject, counted in server→client messages (sync calls and replies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
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
}

/// A command the server received, for tests to check.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
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
    log: Arc<Mutex<Vec<Received>>>,
    stop: Arc<Mutex<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl SimServer {
    /// Binds `127.0.0.1:port` (0: any free port) and serves `cfg`'s simulator.
    pub fn start(cfg: &Config, port: u16, fault: Fault) -> std::io::Result<Self> {
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
                        let mut conn = Conn::new(
                            stream,
                            SimEnv::with_params(params.clone()),
                            fault,
                            log2.clone(),
                            stop2.clone(),
                        );
                        if let Err(e) = conn.serve() {
                            eprintln!("[tmi server] connection ended: {e}");
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
    pub fn received(&self) -> Vec<Received> {
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

enum Deferred {
    Run,
    Frame(i32, i32),
}

struct Conn {
    stream: TcpStream,
    env: SimEnv,
    fault: Fault,
    sent: usize,
    log: Arc<Mutex<Vec<Received>>>,
    stop: Arc<Mutex<bool>>,
    keys: [bool; 4],
    period_ms: u32,
    loaded: bool,
    deferred: VecDeque<Deferred>,
}

type R<T> = Result<T, String>;

impl Conn {
    fn new(
        stream: TcpStream,
        env: SimEnv,
        fault: Fault,
        log: Arc<Mutex<Vec<Received>>>,
        stop: Arc<Mutex<bool>>,
    ) -> Self {
        let period_ms = env.params().engine_ms * env.params().engine_steps;
        Self {
            stream,
            env,
            fault,
            sent: 0,
            log,
            stop,
            keys: [false; 4],
            period_ms,
            loaded: false,
            deferred: VecDeque::new(),
        }
    }

    fn record(&self, r: Received) {
        if let Ok(mut l) = self.log.lock() {
            l.push(r);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.lock().map(|s| *s).unwrap_or(true)
    }

    /// Sends one protocol message, applying the fault when its turn comes.
    fn send(&mut self, bytes: &[u8]) -> R<()> {
        let n = self.sent;
        self.sent += 1;
        match self.fault {
            Fault::Stall { after } if n >= after => {
                while !self.stopped() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err("stalled (fault injection)".into())
            }
            Fault::DisconnectMidMessage { after } if n == after => {
                let _ = self.stream.write_all(&bytes[..bytes.len() / 2]);
                let _ = self.stream.shutdown(Shutdown::Both);
                Err("disconnected mid-message (fault injection)".into())
            }
            Fault::Malformed { after } if n == after => {
                self.stream.write_all(&999i32.to_le_bytes()).map_err(|e| e.to_string())?;
                Err("sent a malformed message (fault injection)".into())
            }
            _ => self.stream.write_all(bytes).map_err(|e| e.to_string()),
        }
    }

    fn read_exact(&mut self, n: usize) -> R<Vec<u8>> {
        let mut b = vec![0u8; n];
        self.stream.read_exact(&mut b).map_err(|e| format!("reading: {e}"))?;
        Ok(b)
    }

    fn read_i32(&mut self) -> R<i32> {
        let b = self.read_exact(4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn serve(&mut self) -> R<()> {
        self.sync_call(&msg::SC_ON_CONNECT_SYNC.to_le_bytes(), msg::SC_ON_CONNECT_SYNC)?;
        loop {
            let tag = match self.read_i32() {
                Ok(t) => t,
                Err(_) => return Ok(()), // client closed
            };
            if !self.command(tag)? {
                return Ok(());
            }
            while let Some(d) = self.deferred.pop_front() {
                match d {
                    Deferred::Run => self.run_period()?,
                    Deferred::Frame(w, h) => self.send_frame(w, h)?,
                }
            }
        }
    }

    /// Sends a sync call and handles commands until its response.
    fn sync_call(&mut self, bytes: &[u8], tag: i32) -> R<()> {
        self.send(bytes)?;
        loop {
            let t = self.read_i32()?;
            if t == tag {
                self.record(Received::Response(t));
                return Ok(());
            }
            if !self.command(t)? {
                return Err("client shut down inside a sync call".into());
            }
        }
    }

    fn run_period(&mut self) -> R<()> {
        if !self.loaded {
            return Err("set_speed before any map was loaded".into());
        }
        let steps = (self.period_ms / self.env.params().engine_ms).max(1) as usize;
        let status = self.env.drive(self.keys, steps).map_err(|e| e.to_string())?;
        if let Status::Finished { .. } = status {
            let n = self.env.track().map_or(1, |t| t.n_zones() as i32);
            let mut b = msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC.to_le_bytes().to_vec();
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(&n.to_le_bytes());
            self.sync_call(&b, msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC)
        } else {
            let mut b = msg::SC_RUN_STEP_SYNC.to_le_bytes().to_vec();
            b.extend_from_slice(&(self.env.time_ms() as i32).to_le_bytes());
            self.sync_call(&b, msg::SC_RUN_STEP_SYNC)
        }
    }

    fn send_frame(&mut self, w: i32, h: i32) -> R<()> {
        let p = self.env.params();
        if (w as usize, h as usize) != (p.width, p.height) {
            return Err(format!(
                "frame {w}x{h} requested; this server renders {}x{}",
                p.width, p.height
            ));
        }
        let mut gray = vec![0u8; p.width * p.height];
        self.env.render(&mut gray).map_err(|e| e.to_string())?;
        let mut b = msg::SC_REQUESTED_FRAME_SYNC.to_le_bytes().to_vec();
        for g in gray {
            b.extend_from_slice(&[g, g, g, 255]);
        }
        self.sync_call(&b, msg::SC_REQUESTED_FRAME_SYNC)
    }

    /// Handles one command; `false` on shutdown.
    fn command(&mut self, tag: i32) -> R<bool> {
        match tag {
            msg::C_SET_SPEED => {
                let b = self.read_exact(4)?;
                let speed = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                self.record(Received::SetSpeed(speed));
                if speed > 0.0 {
                    self.deferred.push_back(Deferred::Run);
                }
            }
            msg::C_REWIND_TO_STATE => {
                let n = self.read_i32()?;
                let b = self.read_exact(n.max(0) as usize)?;
                self.record(Received::RewindToState(b.len()));
                let st = SimState::decode(&b)?;
                self.env.set_state(&st).map_err(|e| e.to_string())?;
            }
            msg::C_REWIND_TO_CURRENT_STATE => self.record(Received::RewindToCurrentState),
            msg::C_GET_SIMULATION_STATE => {
                self.record(Received::GetSimulationState);
                let st = self.env.state().map(|s| s.encode()).unwrap_or_default();
                let mut b = (st.len() as i32).to_le_bytes().to_vec();
                b.extend_from_slice(&st);
                self.send(&b)?;
            }
            msg::C_SET_INPUT_STATE => {
                let b = self.read_exact(4)?;
                self.record(Received::SetInputState([b[0], b[1], b[2], b[3]]));
                // Wire order left, right, accelerate, brake → keys [accel, brake, left, right].
                self.keys = [b[2] != 0, b[3] != 0, b[0] != 0, b[1] != 0];
            }
            msg::C_GIVE_UP => {
                self.record(Received::GiveUp);
                if let Some(seed) = self.env.track().map(|t| t.seed) {
                    crate::Environment::reset(&mut self.env, seed).map_err(|e| e.to_string())?;
                }
            }
            msg::C_PREVENT_SIMULATION_FINISH => self.record(Received::PreventSimulationFinish),
            msg::C_SHUTDOWN => {
                self.record(Received::Shutdown);
                return Ok(false);
            }
            msg::C_EXECUTE_COMMAND => {
                let n = self.read_i32()?;
                let b = self.read_exact(n.max(0) as usize)?;
                let cmd = String::from_utf8_lossy(&b).into_owned();
                if let Some(seed) =
                    cmd.strip_prefix("map ").and_then(|s| s.trim().parse::<u64>().ok())
                {
                    crate::Environment::reset(&mut self.env, seed).map_err(|e| e.to_string())?;
                    self.loaded = true;
                }
                self.record(Received::ExecuteCommand(cmd));
            }
            msg::C_SET_TIMEOUT => {
                let b = self.read_exact(4)?;
                self.record(Received::SetTimeout(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            }
            msg::C_RACE_FINISHED => {
                self.record(Received::RaceFinished);
                let done = matches!(self.env.state(), Some(s) if s.finished);
                self.send(&i32::from(done).to_le_bytes())?;
            }
            msg::C_REQUEST_FRAME => {
                let (w, h) = (self.read_i32()?, self.read_i32()?);
                self.record(Received::RequestFrame(w, h));
                self.deferred.push_back(Deferred::Frame(w, h));
            }
            msg::C_RESET_CAMERA => self.record(Received::ResetCamera),
            msg::C_SET_ON_STEP_PERIOD => {
                let p = self.read_i32()?;
                self.record(Received::SetOnStepPeriod(p));
                self.period_ms = p.max(1) as u32;
            }
            msg::C_UNREQUEST_FRAME => self.record(Received::UnrequestFrame),
            msg::C_TOGGLE_INTERFACE => {
                let v = self.read_i32()?;
                self.record(Received::ToggleInterface(v));
            }
            msg::C_IS_IN_MENUS => {
                self.record(Received::IsInMenus);
                self.send(&0i32.to_le_bytes())?;
            }
            msg::C_GET_INPUTS => {
                self.record(Received::GetInputs);
                let text = format!("{:?}", self.keys);
                let mut b = (text.len() as i32).to_le_bytes().to_vec();
                b.extend_from_slice(text.as_bytes());
                self.send(&b)?;
            }
            other => return Err(format!("unknown command {other}")),
        }
        Ok(true)
    }
}
