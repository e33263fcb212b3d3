//! The TMInterface 2 socket protocol of the original (`tminterface2.py` ↔ the
//! `Python_Link.as` plugin): native-endian (little-endian) int32-tagged
//! messages over TCP. The game sends *sync calls* (`SC_*`: run step, checkpoint
//! count changed, lap count changed, requested frame, on connect), each of
//! which the client answers by echoing its type once it has sent whatever
//! commands (`C_*`) it wants executed in that call.
//!
//! - [`Client`]: the commands and sync-call reading, with socket timeouts: a
//!   stalled peer is a [`EnvError::Timeout`], a peer that closes mid-message or
//!   sends an unknown tag is an [`EnvError::Protocol`] naming what was expected.
//! - [`TmiEnv`]: an [`Environment`] over a [`Client`]: decisions every
//!   `on_step_period` ms (the run-step sync), `set_speed(0)` while the policy
//!   thinks, frames requested as BGRA and converted to grayscale with OpenCV's
//!   `BGRA2GRAY` weights, the finish detected from the checkpoint-count sync.
//! - [`server::SimServer`]: a TMInterface-protocol server wrapping the built-in
//!   simulator on loopback, the test double for the game (with fault injection).
//!
//! **Simulation state.** `C_GET_SIMULATION_STATE` returns the game's opaque
//! `SimStateData` bytes. This build decodes the built-in simulator's state
//! ([`crate::sim::SimState`], magic `RKS1`) that [`server::SimServer`] sends;
//! decoding the real game's `SimStateData` (position, velocity, wheels at
//! TMInterface's offsets) is not implemented — against the game, [`TmiEnv`]
//! reports a protocol error naming the unrecognised state instead of guessing.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use rulka_config::{ingredients, Config, ACTION_KEYS};

use crate::sim::{SimEnv, SimParams, SimState};
use crate::{check_actions, EnvError, Environment, Status};

pub mod server;

/// Message tags (`MessageType`, an `IntEnum` numbered from 1 in the original).
pub mod msg {
    /// Sync: a run step happened (payload: race time ms, i32).
    pub const SC_RUN_STEP_SYNC: i32 = 1;
    /// Sync: checkpoint count changed (payload: current, target, i32 each).
    pub const SC_CHECKPOINT_COUNT_CHANGED_SYNC: i32 = 2;
    /// Sync: lap count changed (payload: current, target).
    pub const SC_LAP_COUNT_CHANGED_SYNC: i32 = 3;
    /// Sync: the requested frame is ready (payload: W·H·4 BGRA bytes).
    pub const SC_REQUESTED_FRAME_SYNC: i32 = 4;
    /// Sync: the client connected.
    pub const SC_ON_CONNECT_SYNC: i32 = 5;
    /// Set the game speed (payload: f32).
    pub const C_SET_SPEED: i32 = 6;
    /// Rewind to a state (payload: i32 length + state bytes).
    pub const C_REWIND_TO_STATE: i32 = 7;
    /// Rewind to the current state.
    pub const C_REWIND_TO_CURRENT_STATE: i32 = 8;
    /// Get the simulation state (reply: i32 length + bytes).
    pub const C_GET_SIMULATION_STATE: i32 = 9;
    /// Set the input state (payload: left, right, accelerate, brake as u8).
    pub const C_SET_INPUT_STATE: i32 = 10;
    /// Give up (restart the race).
    pub const C_GIVE_UP: i32 = 11;
    /// Keep the race running past the finish line.
    pub const C_PREVENT_SIMULATION_FINISH: i32 = 12;
    /// Close the connection.
    pub const C_SHUTDOWN: i32 = 13;
    /// Run a console command (payload: i32 length + UTF-8).
    pub const C_EXECUTE_COMMAND: i32 = 14;
    /// Set the plugin's timeout (payload: u32 ms).
    pub const C_SET_TIMEOUT: i32 = 15;
    /// Whether the race is finished (reply: i32 0/1).
    pub const C_RACE_FINISHED: i32 = 16;
    /// Request a frame of W×H (payload: i32 W, i32 H).
    pub const C_REQUEST_FRAME: i32 = 17;
    /// Reset the camera.
    pub const C_RESET_CAMERA: i32 = 18;
    /// Run-step sync period in ms (payload: i32).
    pub const C_SET_ON_STEP_PERIOD: i32 = 19;
    /// Stop frame requests.
    pub const C_UNREQUEST_FRAME: i32 = 20;
    /// Toggle the TMInterface overlay.
    pub const C_TOGGLE_INTERFACE: i32 = 21;
    /// Whether the game is in menus (reply: i32 0/1).
    pub const C_IS_IN_MENUS: i32 = 22;
    /// The current inputs (reply: i32 length + UTF-8).
    pub const C_GET_INPUTS: i32 = 23;
}

/// Largest length field accepted from a peer (a state or a string).
const MAX_PAYLOAD: usize = 64 << 20;

/// A TMInterface protocol client.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    addr: String,
    timeout: Duration,
}

/// A sync call from the game.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sync {
    /// A run step at this race time.
    RunStep(i32),
    /// Checkpoint count `(current, target)`.
    CheckpointCount(i32, i32),
    /// Lap count `(current, target)`.
    LapCount(i32, i32),
    /// The requested frame is ready; read it with [`Client::read_frame`].
    RequestedFrame,
    /// The client connected.
    OnConnect,
}

impl Sync {
    fn tag(&self) -> i32 {
        match self {
            Sync::RunStep(_) => msg::SC_RUN_STEP_SYNC,
            Sync::CheckpointCount(..) => msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC,
            Sync::LapCount(..) => msg::SC_LAP_COUNT_CHANGED_SYNC,
            Sync::RequestedFrame => msg::SC_REQUESTED_FRAME_SYNC,
            Sync::OnConnect => msg::SC_ON_CONNECT_SYNC,
        }
    }
}

impl Client {
    /// Connects to `host:port`; every later read or write fails after `timeout`.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self, EnvError> {
        let addr = format!("{host}:{port}");
        let io = |op: &str, source| EnvError::Io { addr: addr.clone(), op: op.into(), source };
        let sock =
            (host, port).to_socket_addrs().map_err(|e| io("resolving", e))?.next().ok_or_else(
                || EnvError::Protocol { addr: addr.clone(), message: "no address".into() },
            )?;
        let stream = TcpStream::connect_timeout(&sock, timeout).map_err(|e| io("connecting", e))?;
        stream.set_read_timeout(Some(timeout)).map_err(|e| io("setting the read timeout", e))?;
        stream.set_write_timeout(Some(timeout)).map_err(|e| io("setting the write timeout", e))?;
        stream.set_nodelay(true).map_err(|e| io("setting TCP_NODELAY", e))?;
        Ok(Self { stream, addr, timeout })
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn send(&mut self, bytes: &[u8], op: &str) -> Result<(), EnvError> {
        self.stream.write_all(bytes).map_err(|e| self.io_error(e, op))
    }

    fn io_error(&self, e: std::io::Error, op: &str) -> EnvError {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => EnvError::Timeout {
                addr: self.addr.clone(),
                op: op.into(),
                timeout_ms: self.timeout.as_millis() as u64,
            },
            _ => EnvError::Io { addr: self.addr.clone(), op: op.into(), source: e },
        }
    }

    fn read_exact(&mut self, n: usize, op: &str) -> Result<Vec<u8>, EnvError> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(EnvError::Protocol {
                        addr: self.addr.clone(),
                        message: format!("connection closed during {op} (got {got} of {n} bytes)"),
                    })
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e, op)),
            }
        }
        Ok(buf)
    }

    fn read_i32(&mut self, op: &str) -> Result<i32, EnvError> {
        let b = self.read_exact(4, op)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn read_len(&mut self, op: &str) -> Result<usize, EnvError> {
        let n = self.read_i32(op)?;
        if n < 0 || n as usize > MAX_PAYLOAD {
            return Err(EnvError::Protocol {
                addr: self.addr.clone(),
                message: format!("{op}: length {n} out of range (0..={MAX_PAYLOAD})"),
            });
        }
        Ok(n as usize)
    }

    /// Reads the next sync call (blocking up to the timeout).
    pub fn read_sync(&mut self) -> Result<Sync, EnvError> {
        let tag = self.read_i32("waiting for a sync call")?;
        Ok(match tag {
            msg::SC_RUN_STEP_SYNC => Sync::RunStep(self.read_i32("run step time")?),
            msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC => Sync::CheckpointCount(
                self.read_i32("checkpoint count")?,
                self.read_i32("checkpoint target")?,
            ),
            msg::SC_LAP_COUNT_CHANGED_SYNC => {
                Sync::LapCount(self.read_i32("lap count")?, self.read_i32("lap target")?)
            }
            msg::SC_REQUESTED_FRAME_SYNC => Sync::RequestedFrame,
            msg::SC_ON_CONNECT_SYNC => Sync::OnConnect,
            other => {
                return Err(EnvError::Protocol {
                    addr: self.addr.clone(),
                    message: format!(
                        "unknown message type {other} where a sync call (1..=5) was expected"
                    ),
                })
            }
        })
    }

    /// Answers a sync call (the game resumes).
    pub fn respond(&mut self, call: &Sync) -> Result<(), EnvError> {
        self.send(&call.tag().to_le_bytes(), "responding to a sync call")
    }

    /// Reads the `W·H·4` BGRA bytes following [`Sync::RequestedFrame`].
    pub fn read_frame(&mut self, width: usize, height: usize) -> Result<Vec<u8>, EnvError> {
        self.read_exact(width * height * 4, "reading a frame")
    }

    fn command(&mut self, tag: i32, payload: &[u8], op: &str) -> Result<(), EnvError> {
        let mut b = tag.to_le_bytes().to_vec();
        b.extend_from_slice(payload);
        self.send(&b, op)
    }

    /// `C_SET_SPEED`.
    pub fn set_speed(&mut self, speed: f32) -> Result<(), EnvError> {
        self.command(msg::C_SET_SPEED, &speed.to_le_bytes(), "set_speed")
    }

    /// `C_REWIND_TO_STATE`.
    pub fn rewind_to_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        let mut p = (state.len() as i32).to_le_bytes().to_vec();
        p.extend_from_slice(state);
        self.command(msg::C_REWIND_TO_STATE, &p, "rewind_to_state")
    }

    /// `C_REWIND_TO_CURRENT_STATE`.
    pub fn rewind_to_current_state(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_REWIND_TO_CURRENT_STATE, &[], "rewind_to_current_state")
    }

    /// `C_GET_SIMULATION_STATE`: the state's bytes.
    pub fn get_simulation_state(&mut self) -> Result<Vec<u8>, EnvError> {
        self.command(msg::C_GET_SIMULATION_STATE, &[], "get_simulation_state")?;
        let n = self.read_len("simulation state length")?;
        self.read_exact(n, "simulation state")
    }

    /// `C_SET_INPUT_STATE` with the original's byte order: left, right, accelerate, brake.
    pub fn set_input_state(
        &mut self,
        left: bool,
        right: bool,
        accelerate: bool,
        brake: bool,
    ) -> Result<(), EnvError> {
        let p = [u8::from(left), u8::from(right), u8::from(accelerate), u8::from(brake)];
        self.command(msg::C_SET_INPUT_STATE, &p, "set_input_state")
    }

    /// `C_GIVE_UP`.
    pub fn give_up(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_GIVE_UP, &[], "give_up")
    }

    /// `C_PREVENT_SIMULATION_FINISH`.
    pub fn prevent_simulation_finish(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_PREVENT_SIMULATION_FINISH, &[], "prevent_simulation_finish")
    }

    /// `C_SHUTDOWN`.
    pub fn shutdown(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_SHUTDOWN, &[], "shutdown")
    }

    /// `C_EXECUTE_COMMAND`.
    pub fn execute_command(&mut self, cmd: &str) -> Result<(), EnvError> {
        let mut p = (cmd.len() as i32).to_le_bytes().to_vec();
        p.extend_from_slice(cmd.as_bytes());
        self.command(msg::C_EXECUTE_COMMAND, &p, "execute_command")
    }

    /// `C_SET_TIMEOUT`.
    pub fn set_timeout(&mut self, ms: u32) -> Result<(), EnvError> {
        self.command(msg::C_SET_TIMEOUT, &ms.to_le_bytes(), "set_timeout")
    }

    /// `C_RACE_FINISHED`.
    pub fn race_finished(&mut self) -> Result<bool, EnvError> {
        self.command(msg::C_RACE_FINISHED, &[], "race_finished")?;
        Ok(self.read_i32("race_finished reply")? != 0)
    }

    /// `C_REQUEST_FRAME`.
    pub fn request_frame(&mut self, width: i32, height: i32) -> Result<(), EnvError> {
        let mut p = width.to_le_bytes().to_vec();
        p.extend_from_slice(&height.to_le_bytes());
        self.command(msg::C_REQUEST_FRAME, &p, "request_frame")
    }

    /// `C_RESET_CAMERA`.
    pub fn reset_camera(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_RESET_CAMERA, &[], "reset_camera")
    }

    /// `C_SET_ON_STEP_PERIOD`.
    pub fn set_on_step_period(&mut self, ms: i32) -> Result<(), EnvError> {
        self.command(msg::C_SET_ON_STEP_PERIOD, &ms.to_le_bytes(), "set_on_step_period")
    }

    /// `C_UNREQUEST_FRAME`.
    pub fn unrequest_frame(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_UNREQUEST_FRAME, &[], "unrequest_frame")
    }

    /// `C_TOGGLE_INTERFACE`.
    pub fn toggle_interface(&mut self, visible: bool) -> Result<(), EnvError> {
        self.command(msg::C_TOGGLE_INTERFACE, &i32::from(visible).to_le_bytes(), "toggle_interface")
    }

    /// `C_IS_IN_MENUS`.
    pub fn is_in_menus(&mut self) -> Result<bool, EnvError> {
        self.command(msg::C_IS_IN_MENUS, &[], "is_in_menus")?;
        Ok(self.read_i32("is_in_menus reply")? != 0)
    }

    /// `C_GET_INPUTS`: the inputs as the game's text.
    pub fn get_inputs(&mut self) -> Result<String, EnvError> {
        self.command(msg::C_GET_INPUTS, &[], "get_inputs")?;
        let n = self.read_len("get_inputs length")?;
        let b = self.read_exact(n, "get_inputs text")?;
        String::from_utf8(b).map_err(|e| EnvError::Protocol {
            addr: self.addr.clone(),
            message: format!("get_inputs: not UTF-8: {e}"),
        })
    }
}

/// BGRA → grayscale with OpenCV's `COLOR_BGRA2GRAY` weights
/// (0.299 R + 0.587 G + 0.114 B, rounded).
pub fn bgra_to_gray(bgra: &[u8], out: &mut [u8]) {
    for (px, o) in bgra.chunks_exact(4).zip(out.iter_mut()) {
        let (b, g, r) = (u32::from(px[0]), u32::from(px[1]), u32::from(px[2]));
        // Fixed-point as OpenCV: (R·4899 + G·9617 + B·1868 + 2^13) >> 14.
        *o = ((r * 4899 + g * 9617 + b * 1868 + (1 << 13)) >> 14) as u8;
    }
}

/// The game (or the protocol server) as an [`Environment`].
#[derive(Debug)]
pub struct TmiEnv {
    client: Client,
    /// Mirror of the decoded state: computes floats and ingredients.
    mirror: SimEnv,
    params: SimParams,
    running_speed: f32,
    start_states: std::collections::HashMap<u64, Vec<u8>>,
    loaded: Option<u64>,
    status: Status,
    frame_bgra: Vec<u8>,
}

impl TmiEnv {
    /// Connects to TMInterface at `host:port` and performs the original's
    /// on-connect setup (run-step period = one decision).
    pub fn connect(cfg: &Config, host: &str, port: u16) -> Result<Self, EnvError> {
        let params = SimParams::from_config(cfg);
        if params.n_heads != 1 {
            return Err(EnvError::State(format!(
                "TMInterface drives one action per decision; environment.rl_action_offsets_ms has {} heads",
                params.n_heads
            )));
        }
        let timeout = Duration::from_millis(u64::from(cfg.environment.tmi.timeout_ms.max(1)));
        let mut client = Client::connect(host, port, timeout)?;
        let first = client.read_sync()?;
        if first != Sync::OnConnect {
            return Err(EnvError::Protocol {
                addr: client.addr().into(),
                message: format!("expected the on-connect sync first, got {first:?}"),
            });
        }
        let period = (params.engine_ms * params.engine_steps) as i32;
        client.set_on_step_period(period)?;
        client.execute_command("set countdown_speed 100")?;
        client.execute_command("set skip_map_load_screens true")?;
        client.respond(&first)?;
        Ok(Self {
            client,
            mirror: SimEnv::with_params(params.clone()),
            params,
            running_speed: cfg.environment.tmi.running_speed as f32,
            start_states: std::collections::HashMap::new(),
            loaded: None,
            status: Status::Running,
            frame_bgra: Vec::new(),
        })
    }

    fn refresh_state(&mut self) -> Result<(), EnvError> {
        let bytes = self.client.get_simulation_state()?;
        let st = SimState::decode(&bytes).map_err(|m| EnvError::Protocol {
            addr: self.client.addr().into(),
            message: format!(
                "simulation state: {m} (the real game's SimStateData is not decoded by this build)"
            ),
        })?;
        self.mirror.set_state(&st)
    }
}

impl Environment for TmiEnv {
    fn obs_sizes(&self) -> (usize, usize) {
        (self.params.width * self.params.height, self.params.float_dim)
    }

    fn reset(&mut self, track_seed: u64) -> Result<(), EnvError> {
        self.client.set_speed(0.0)?;
        if self.loaded != Some(track_seed) {
            self.client.execute_command(&format!("map {track_seed}"))?;
            self.loaded = Some(track_seed);
        }
        match self.start_states.get(&track_seed) {
            Some(s) => {
                let s = s.clone();
                self.client.rewind_to_state(&s)?;
            }
            None => {
                let s = self.client.get_simulation_state()?;
                self.start_states.insert(track_seed, s);
            }
        }
        self.refresh_state()?;
        self.status = Status::Running;
        Ok(())
    }

    fn observe(&mut self, frame: &mut [u8], floats: &mut [f32]) -> Result<(), EnvError> {
        if self.params.no_image {
            frame.iter_mut().for_each(|b| *b = 0);
        } else {
            let (w, h) = (self.params.width, self.params.height);
            self.client.request_frame(w as i32, h as i32)?;
            let call = self.client.read_sync()?;
            if call != Sync::RequestedFrame {
                return Err(EnvError::Protocol {
                    addr: self.client.addr().into(),
                    message: format!("expected the requested frame, got {call:?}"),
                });
            }
            self.frame_bgra = self.client.read_frame(w, h)?;
            self.client.respond(&call)?;
            bgra_to_gray(&self.frame_bgra, frame);
        }
        self.mirror.floats(floats)
    }

    fn step(&mut self, actions: &[u8]) -> Result<Status, EnvError> {
        check_actions(actions, 1)?;
        if self.status.is_done() {
            return Err(EnvError::State("rollout already ended; call reset".into()));
        }
        let [gas, brake, left, right] = ACTION_KEYS[actions[0] as usize];
        self.client.set_input_state(left, right, gas, brake)?;
        self.client.set_speed(self.running_speed)?;
        let mut finished = false;
        loop {
            let call = self.client.read_sync()?;
            match call {
                Sync::RunStep(_) => {
                    self.client.set_speed(0.0)?;
                    self.client.respond(&call)?;
                    break;
                }
                Sync::CheckpointCount(cur, target) => {
                    if cur == target {
                        finished = true;
                        self.client.prevent_simulation_finish()?;
                        self.client.set_speed(0.0)?;
                        self.client.respond(&call)?;
                        break;
                    }
                    self.client.respond(&call)?;
                }
                other => {
                    return Err(EnvError::Protocol {
                        addr: self.client.addr().into(),
                        message: format!("unexpected {other:?} while the race runs"),
                    })
                }
            }
        }
        self.refresh_state()?;
        let time = self.mirror.time_ms();
        self.status = if finished {
            Status::Finished { race_time_ms: time as f64 }
        } else {
            self.mirror.cut_off().map_or(Status::Running, Status::CutOff)
        };
        Ok(self.status)
    }

    fn ingredients(&self) -> [f32; ingredients::COUNT] {
        let mut x = self.mirror.ingredients();
        x[ingredients::FINISHED] =
            f32::from(u8::from(matches!(self.status, Status::Finished { .. })));
        x
    }
}
