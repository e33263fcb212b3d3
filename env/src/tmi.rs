//! The TMInterface 2 socket protocol of the original (`tminterface2.py` ↔ the
//! `Python_Link.as` plugin): native-endian (little-endian) int32-tagged
//! messages over TCP. The game sends *sync calls* (`SC_*`: run step, checkpoint
//! count changed, lap count changed, requested frame, on connect) and waits
//! in each until the client echoes its type; **the plugin reads the client's
//! commands (`C_*`) only while it waits in a sync call** — a command sent
//! outside one is not answered until the next call comes.
//!
//! - [`TmiClient`]: the commands and sync-call reading, with socket timeouts: a
//!   stalled peer is a [`EnvError::Timeout`], a peer that closes mid-message or
//!   sends an unknown tag is an [`EnvError::Protocol`] naming what was expected.
//! - [`TmiEnv`]: an [`Environment`] over a [`TmiClient`] that follows the
//!   original's rollout (`game_instance_manager.rollout`): it always returns
//!   to its caller *holding a sync call open* (the game paused inside the
//!   plugin's wait, answering commands at once), decodes the game's state
//!   ([`state::GameState`]) and builds the original's floats from it.
//! - [`state`]: the `SimStateData` layout, decoded and written.
//! - [`server::SimServer`]: a TMInterface-protocol server wrapping the
//!   built-in simulator on loopback, behaving as the plugin does (commands
//!   only inside sync calls, real-layout states), the test double for the game.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use std::collections::HashMap;
use std::sync::Arc;

use rulka_config::{ingredients, Config, MapEntry, ACTION_KEYS};

use crate::floats::{FloatBuilder, ProgressTracker, TrackProgress};
use crate::zones::{ZoneMap, ZoneParams};
use crate::{check_actions, EnvError, Environment, Status};

pub mod server;
pub mod state;

use state::GameState;

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
///
/// Commands are queued and sent together just before the client next waits
/// for the game (or on [`TmiClient::flush`], or when it is dropped): a
/// decision's commands and its sync-call answer leave in one write, in
/// order. Replies are read through a buffer. Both keep the system calls per
/// decision few (each costs more under Wine, where Windows collectors are
/// tested, than on a native kernel).
#[derive(Debug)]
pub struct TmiClient {
    stream: TcpStream,
    addr: String,
    timeout: Duration,
    /// Commands not yet sent.
    out: Vec<u8>,
    /// Bytes received and not yet consumed: `inbuf[in_pos..in_len]`.
    inbuf: Vec<u8>,
    in_pos: usize,
    in_len: usize,
}

/// Bytes read from the socket at once (at most).
const READ_CHUNK: usize = 64 << 10;

impl Drop for TmiClient {
    /// Sends what is still queued (best effort: the game may be gone).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// A sync call from the game.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TmiSync {
    /// A run step at this race time.
    RunStep(i32),
    /// Checkpoint count `(current, target)`.
    CheckpointCount(i32, i32),
    /// Lap count `(current, target)`.
    LapCount(i32, i32),
    /// The requested frame is ready; read it with [`TmiClient::read_frame`].
    RequestedFrame,
    /// The client connected.
    OnConnect,
}

impl TmiSync {
    fn tag(&self) -> i32 {
        match self {
            TmiSync::RunStep(_) => msg::SC_RUN_STEP_SYNC,
            TmiSync::CheckpointCount(..) => msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC,
            TmiSync::LapCount(..) => msg::SC_LAP_COUNT_CHANGED_SYNC,
            TmiSync::RequestedFrame => msg::SC_REQUESTED_FRAME_SYNC,
            TmiSync::OnConnect => msg::SC_ON_CONNECT_SYNC,
        }
    }
}

impl TmiClient {
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
        Ok(Self {
            stream,
            addr,
            timeout,
            out: Vec::with_capacity(256),
            inbuf: vec![0; READ_CHUNK],
            in_pos: 0,
            in_len: 0,
        })
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends every queued command now.
    pub fn flush(&mut self) -> Result<(), EnvError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.out);
        self.out.clear();
        r.map_err(|e| self.io_error(e, "sending commands"))
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
        self.flush()?;
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            if self.in_pos == self.in_len {
                // Large payloads (frames, states) go straight into `buf`.
                let direct = n - got >= READ_CHUNK;
                let r = if direct {
                    self.stream.read(&mut buf[got..])
                } else {
                    self.stream.read(&mut self.inbuf)
                };
                match r {
                    Ok(0) => {
                        // The peer is gone (a game that crashed or closed the socket).
                        return Err(EnvError::Io {
                            addr: self.addr.clone(),
                            op: op.into(),
                            source: std::io::Error::new(
                                ErrorKind::UnexpectedEof,
                                format!("connection closed during {op} (got {got} of {n} bytes)"),
                            ),
                        });
                    }
                    Ok(k) if direct => got += k,
                    Ok(k) => (self.in_pos, self.in_len) = (0, k),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.io_error(e, op)),
                }
                continue;
            }
            let k = (self.in_len - self.in_pos).min(n - got);
            buf[got..got + k].copy_from_slice(&self.inbuf[self.in_pos..self.in_pos + k]);
            self.in_pos += k;
            got += k;
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

    /// Waits up to the timeout for the game to send something, asking
    /// `stop` every 100 ms: `Ok(false)` when `stop` said stop first, `Ok(true)`
    /// when bytes (or the end of the stream, for the next read to report)
    /// are there. A game that hangs cannot hold a stopping caller for the
    /// whole timeout.
    pub fn wait_readable(&mut self, stop: &mut dyn FnMut() -> bool) -> Result<bool, EnvError> {
        if self.in_pos < self.in_len {
            return Ok(true);
        }
        let slice = Duration::from_millis(100).min(self.timeout);
        self.stream
            .set_read_timeout(Some(slice))
            .map_err(|e| self.io_error(e, "setting the read timeout"))?;
        let t0 = std::time::Instant::now();
        let mut byte = [0u8; 1];
        let r = loop {
            match self.stream.peek(&mut byte) {
                Ok(_) => break Ok(true),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if stop() {
                        break Ok(false);
                    }
                    if t0.elapsed() >= self.timeout {
                        break Err(self.io_error(e, "waiting for the game's first message"));
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break Err(self.io_error(e, "waiting for the game's first message")),
            }
        };
        self.stream
            .set_read_timeout(Some(self.timeout))
            .map_err(|e| self.io_error(e, "setting the read timeout"))?;
        r
    }

    /// Reads the next sync call (blocking up to the timeout).
    pub fn read_sync(&mut self) -> Result<TmiSync, EnvError> {
        let tag = self.read_i32("waiting for a sync call")?;
        Ok(match tag {
            msg::SC_RUN_STEP_SYNC => TmiSync::RunStep(self.read_i32("run step time")?),
            msg::SC_CHECKPOINT_COUNT_CHANGED_SYNC => TmiSync::CheckpointCount(
                self.read_i32("checkpoint count")?,
                self.read_i32("checkpoint target")?,
            ),
            msg::SC_LAP_COUNT_CHANGED_SYNC => {
                TmiSync::LapCount(self.read_i32("lap count")?, self.read_i32("lap target")?)
            }
            msg::SC_REQUESTED_FRAME_SYNC => TmiSync::RequestedFrame,
            msg::SC_ON_CONNECT_SYNC => TmiSync::OnConnect,
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
    pub fn respond(&mut self, call: &TmiSync) -> Result<(), EnvError> {
        self.out.extend_from_slice(&call.tag().to_le_bytes());
        Ok(())
    }

    /// Reads the `W·H·4` BGRA bytes following [`TmiSync::RequestedFrame`].
    pub fn read_frame(&mut self, width: usize, height: usize) -> Result<Vec<u8>, EnvError> {
        self.read_exact(width * height * 4, "reading a frame")
    }

    /// Queues a command (sent before the next read, see the type's docs).
    fn command(&mut self, tag: i32, payload: &[u8], _op: &str) -> Result<(), EnvError> {
        self.out.extend_from_slice(&tag.to_le_bytes());
        self.out.extend_from_slice(payload);
        Ok(())
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
        self.request_simulation_state()?;
        self.read_simulation_state()
    }

    /// Queues `C_GET_SIMULATION_STATE`; [`TmiClient::read_simulation_state`]
    /// reads the answer. Commands queued in between leave in the same write:
    /// the game handles a sync call's messages in order, so it answers the
    /// state first (as it was before those commands).
    pub fn request_simulation_state(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_GET_SIMULATION_STATE, &[], "get_simulation_state")
    }

    /// The state's bytes, answering [`TmiClient::request_simulation_state`].
    pub fn read_simulation_state(&mut self) -> Result<Vec<u8>, EnvError> {
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

    /// `C_SHUTDOWN`, sent at once with what is queued (no reply follows).
    pub fn shutdown(&mut self) -> Result<(), EnvError> {
        self.command(msg::C_SHUTDOWN, &[], "shutdown")?;
        self.flush()
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

/// Loads a map's zone centres (and optional real checkpoints) as the
/// original does for its `map_cycle` entries.
pub fn load_zone_map(m: &MapEntry, params: ZoneParams) -> Result<ZoneMap, EnvError> {
    let err = |message: String| EnvError::Map { name: m.name.clone(), message };
    let line = crate::npy::read_points(&m.zone_centers, 2).map_err(|e| err(e.to_string()))?;
    let map = ZoneMap::new(&line, params)
        .map_err(|e| err(format!("{}: {e}", m.zone_centers.display())))?;
    Ok(match &m.checkpoints {
        Some(path) => {
            let cps = crate::npy::read_points(path, 1).map_err(|e| err(e.to_string()))?;
            map.with_checkpoints(&cps)
        }
        None => map,
    })
}

/// The game as an [`Environment`], driven as the original drives it.
///
/// **Sync calls.** Between calls from the collector, the env holds one sync
/// call of the game open (it has not answered it yet), so the game is paused
/// inside the plugin's wait loop and every command is answered at once — the
/// plugin reads commands nowhere else. After [`Environment::reset`] and
/// [`Environment::step`] that is a run-step sync at a decision time (or, at
/// the finish, the checkpoint sync); [`Environment::observe`] fetches the
/// state inside it, pauses the game (`set_speed(0)`), requests the frame,
/// answers, and then holds the requested-frame sync, inside which `step`
/// sends the inputs and the running speed.
///
/// **Rollouts.** `reset(i)` loads map `i mod len(environment.tmi.maps)` if it
/// is not loaded (`map <path>`), and starts the run as the original: the
/// first time at race time 0 after the countdown (saving that state as the
/// map's start state), later by rewinding to the saved start state. Floats
/// come from the decoded state ([`state::GameState`]) through the original's
/// zone tracking and float vector ([`FloatBuilder`]). Cut-offs are the
/// original's (race time above the limit, or above the last new zone + the
/// no-progress limit). At the finish, the last `cp_times` entry is set to −1
/// and the game rewound to that state (or `prevent_simulation_finish` when
/// the list is empty), so the race never ends on the game side. Past the
/// finish the terminal observation has a blank frame, as the original's.
#[derive(Debug)]
pub struct TmiEnv {
    client: TmiClient,
    maps: Vec<(MapEntry, Arc<ZoneMap>)>,
    builder: FloatBuilder,
    decision_ms: i32,
    running_speed: f32,
    width: usize,
    height: usize,
    no_image: bool,
    time_limit_ms: u64,
    no_progress_ms: u64,
    timeout_during_run: u32,
    timeout_between_runs: u32,
    camera: u32,
    camera_set: bool,
    held: Option<TmiSync>,
    loaded: Option<usize>,
    start_states: HashMap<usize, Vec<u8>>,
    current: Option<usize>,
    tracker: Option<ProgressTracker>,
    progress: Option<TrackProgress>,
    status: Status,
    finished_now: bool,
    frame_bgra: Vec<u8>,
    dump: Option<(std::path::PathBuf, u64, u64)>,
}

impl TmiEnv {
    /// Connects to TMInterface at `host:port`, loads every map's zone
    /// centres (a missing or malformed file is an error naming it), and does
    /// the original's on-connect setup inside the on-connect sync, which it
    /// keeps open for [`Environment::reset`].
    pub fn connect(cfg: &Config, host: &str, port: u16) -> Result<Self, EnvError> {
        Self::connect_or_stop(cfg, host, port, &mut || false)?.ok_or_else(|| {
            EnvError::State("connecting: stopped, though nothing could stop it".into())
        })
    }

    /// As [`TmiEnv::connect`], asking `stop` every 100 ms while it waits
    /// for the game's first message (a hung game answers nothing until the
    /// timeout): `Ok(None)` when `stop` said stop.
    pub fn connect_or_stop(
        cfg: &Config,
        host: &str,
        port: u16,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Self>, EnvError> {
        if cfg.n_action_heads() != 1 {
            return Err(EnvError::State(format!(
                "TMInterface drives one action per decision; environment.rl_action_offsets_ms has {} heads",
                cfg.n_action_heads()
            )));
        }
        let t = &cfg.environment.tmi;
        if t.maps.is_empty() {
            return Err(EnvError::State(
                "environment.tmi.maps is empty: list the maps to drive (name, map_path, zone_centers)"
                    .into(),
            ));
        }
        let params = ZoneParams::from_config(cfg);
        let maps = t
            .maps
            .iter()
            .map(|m| Ok((m.clone(), Arc::new(load_zone_map(m, params)?))))
            .collect::<Result<Vec<_>, EnvError>>()?;
        let timeout = Duration::from_millis(u64::from(t.timeout_ms.max(1)));
        let mut client = TmiClient::connect(host, port, timeout)?;
        if !client.wait_readable(stop)? {
            return Ok(None);
        }
        let first = client.read_sync()?;
        if first != TmiSync::OnConnect {
            return Err(EnvError::Protocol {
                addr: client.addr().into(),
                message: format!("expected the on-connect sync first, got {first:?}"),
            });
        }
        let decision_ms = cfg.ms_per_action() as i32;
        client.set_speed(1.0)?;
        client.set_on_step_period(decision_ms)?;
        client.execute_command(&format!("set countdown_speed {}", t.running_speed))?;
        for c in [
            "set unfocused_fps_limit false",
            "set skip_map_load_screens true",
            "set disable_forced_camera true",
            "set autorewind false",
            "set auto_reload_plugins false",
        ] {
            client.execute_command(c)?;
        }
        let (no_image, width, height) = if cfg.nn.no_image {
            (true, 1, 1)
        } else {
            (false, cfg.nn.image_width as usize, cfg.nn.image_height as usize)
        };
        let e = &cfg.environment;
        Ok(Some(Self {
            client,
            maps,
            builder: FloatBuilder::new(cfg),
            decision_ms,
            running_speed: t.running_speed as f32,
            width,
            height,
            no_image,
            time_limit_ms: u64::from(e.cutoff_rollout_if_race_not_finished_within_duration_ms),
            no_progress_ms: u64::from(e.cutoff_rollout_if_no_vcp_passed_within_duration_ms),
            timeout_during_run: t.timeout_during_run_ms,
            timeout_between_runs: t.timeout_between_runs_ms,
            camera: t.game_camera_number,
            camera_set: false,
            held: Some(first),
            loaded: None,
            start_states: HashMap::new(),
            current: None,
            tracker: None,
            progress: None,
            status: Status::Running,
            finished_now: false,
            frame_bgra: Vec::new(),
            dump: None,
        }))
    }

    /// Sends a TMInterface console command (e.g. `set autorewind false`).
    pub fn execute_command(&mut self, cmd: &str) -> Result<(), EnvError> {
        self.client.execute_command(cmd)
    }

    /// Saves every observed state's bytes as `DIR/<map>-<rollout>-<step>.bin`
    /// (for `rulka tmi inspect`).
    pub fn dump_states(&mut self, dir: &std::path::Path) -> Result<(), EnvError> {
        std::fs::create_dir_all(dir).map_err(|source| EnvError::Io {
            addr: dir.display().to_string(),
            op: "creating the state dump directory".into(),
            source,
        })?;
        self.dump = Some((dir.to_path_buf(), 0, 0));
        Ok(())
    }

    fn protocol(&self, message: String) -> EnvError {
        EnvError::Protocol { addr: self.client.addr().into(), message }
    }

    fn respond_held(&mut self) -> Result<(), EnvError> {
        match self.held.take() {
            Some(call) => self.client.respond(&call),
            None => Ok(()),
        }
    }

    /// The next sync call; a requested frame's bytes are read with it.
    fn read_call(&mut self) -> Result<TmiSync, EnvError> {
        let call = self.client.read_sync()?;
        if call == TmiSync::RequestedFrame {
            self.frame_bgra = self.client.read_frame(self.width, self.height)?;
        }
        Ok(call)
    }

    /// Answers calls until a run step whose race time satisfies `want`, and
    /// holds that one.
    fn hold_run_step(&mut self, want: impl Fn(i32) -> bool) -> Result<i32, EnvError> {
        loop {
            match self.read_call()? {
                TmiSync::RunStep(t) if want(t) => {
                    self.held = Some(TmiSync::RunStep(t));
                    return Ok(t);
                }
                TmiSync::OnConnect => return Err(self.protocol(
                    "the game sent on-connect again (restarted?) while a run was being prepared"
                        .into(),
                )),
                other => self.client.respond(&other)?,
            }
        }
    }

    /// The map index of the current rollout.
    pub fn current_map(&self) -> Option<&MapEntry> {
        self.current.map(|i| &self.maps[i].0)
    }

    /// The zone map of map `i`.
    pub fn zone_map(&self, i: usize) -> Option<&Arc<ZoneMap>> {
        self.maps.get(i).map(|m| &m.1)
    }

    /// The tracker of the current rollout.
    pub fn tracker(&self) -> Option<&ProgressTracker> {
        self.tracker.as_ref()
    }

    fn state(&mut self) -> Result<(Vec<u8>, GameState), EnvError> {
        let bytes = self.client.get_simulation_state()?;
        let st = GameState::decode(&bytes)?;
        Ok((bytes, st))
    }

    /// The game's current state, decoded, and its size in bytes (a preflight
    /// check: `rulka tmi check`).
    pub fn probe_state(&mut self) -> Result<(usize, GameState), EnvError> {
        let (bytes, st) = self.state()?;
        Ok((bytes.len(), st))
    }
}

impl Drop for TmiEnv {
    /// Releases the game: `C_SHUTDOWN` ends the plugin's wait and its connection.
    fn drop(&mut self) {
        let _ = self.client.shutdown();
    }
}

impl Environment for TmiEnv {
    fn obs_sizes(&self) -> (usize, usize) {
        (self.width * self.height, self.builder.float_dim())
    }

    fn reset(&mut self, track_seed: u64) -> Result<(), EnvError> {
        let idx = (track_seed % self.maps.len() as u64) as usize;
        if self.held.is_none() {
            return Err(self.protocol(
                "no sync call is held (an earlier error left the connection out of step); reconnect"
                    .into(),
            ));
        }
        self.client.set_timeout(self.timeout_during_run)?;
        if self.loaded != Some(idx) {
            let path = self.maps[idx].0.map_path.trim_matches(|c| c == '\'' || c == '"');
            let cmd =
                if path.contains(' ') { format!("map \"{path}\"") } else { format!("map {path}") };
            self.client.execute_command(&cmd)?;
            self.loaded = Some(idx);
            self.start_states.remove(&idx);
            self.client.set_speed(self.running_speed)?;
            self.respond_held()?;
            // The race starts after the countdown: its time-0 state is the map's start state.
            self.hold_run_step(|t| t == 0)?;
            let (bytes, _) = self.state()?;
            self.start_states.insert(idx, bytes);
        } else {
            if !matches!(self.held, Some(TmiSync::RunStep(_))) {
                self.client.set_speed(self.running_speed)?;
                self.respond_held()?;
                self.hold_run_step(|_| true)?;
            }
            match self.start_states.get(&idx) {
                Some(start) => {
                    let start = start.clone();
                    self.client.rewind_to_state(&start)?;
                }
                None => {
                    self.client.give_up()?;
                    self.client.set_speed(self.running_speed)?;
                    self.respond_held()?;
                    self.hold_run_step(|t| t == 0)?;
                    let (bytes, _) = self.state()?;
                    self.start_states.insert(idx, bytes);
                }
            }
        }
        if !self.camera_set {
            self.client.execute_command(&format!("cam {}", self.camera))?;
            self.client.toggle_interface(false)?;
            self.camera_set = true;
        }
        self.tracker = Some(ProgressTracker::new(&self.maps[idx].1, self.builder.n_prev()));
        if let Some((_, rollout, step)) = &mut self.dump {
            *rollout += u64::from(self.current.is_some());
            *step = 0;
        }
        self.current = Some(idx);
        self.status = Status::Running;
        self.finished_now = false;
        self.progress = None;
        Ok(())
    }

    fn observe(&mut self, frame: &mut [u8], floats: &mut [f32]) -> Result<(), EnvError> {
        let idx = self.current.ok_or_else(|| EnvError::State("call reset first".into()))?;
        if frame.len() != self.width * self.height {
            return Err(EnvError::State(format!(
                "frame buffer has {} bytes; expected {}",
                frame.len(),
                self.width * self.height
            )));
        }
        // One write per decision for the state and the frame: the state's
        // request, then (at a decision) the frame's request and the answer to
        // the run step; the game answers in that order (the state as it was,
        // then the frame's sync call). Under Wine every socket call costs a
        // round trip to the wine server.
        let decision = match (&self.held, self.status) {
            (Some(TmiSync::CheckpointCount(..)), Status::Finished { .. }) => false,
            (Some(TmiSync::RunStep(_)), _) => true,
            (held, status) => {
                return Err(self.protocol(format!(
                    "observe needs a held run-step (or finish) sync; holding {held:?} with the rollout {status:?}"
                )))
            }
        };
        self.client.request_simulation_state()?;
        if decision {
            self.client.rewind_to_current_state()?;
            self.client.set_speed(0.0)?;
            if !self.no_image {
                self.client.request_frame(self.width as i32, self.height as i32)?;
                self.respond_held()?;
            }
        }
        let bytes = self.client.read_simulation_state()?;
        let st = GameState::decode(&bytes)?;
        if let Some((dir, rollout, step)) = &mut self.dump {
            let name = format!("{}-{rollout:04}-{step:05}.bin", self.maps[idx].0.name);
            *step += 1;
            std::fs::write(dir.join(&name), &bytes).map_err(|source| EnvError::Io {
                addr: dir.display().to_string(),
                op: format!("writing {name}"),
                source,
            })?;
        }
        if !decision || self.no_image {
            // Past the finish line the original records no frame (NaN, zeros for the learner).
            frame.iter_mut().for_each(|b| *b = 0);
        } else {
            loop {
                match self.read_call()? {
                    TmiSync::RequestedFrame => break,
                    TmiSync::OnConnect => {
                        return Err(self.protocol(
                            "the game sent on-connect again (restarted?) while a frame was awaited"
                                .into(),
                        ))
                    }
                    other => self.client.respond(&other)?,
                }
            }
            self.held = Some(TmiSync::RequestedFrame);
            bgra_to_gray(&self.frame_bgra, frame);
        }
        let map = self.maps[idx].1.clone();
        let tracker =
            self.tracker.as_mut().ok_or_else(|| EnvError::State("call reset first".into()))?;
        self.progress = Some(self.builder.build(&st, &map, tracker, floats)?);
        Ok(())
    }

    fn step(&mut self, actions: &[u8]) -> Result<Status, EnvError> {
        check_actions(actions, 1)?;
        if self.current.is_none() {
            return Err(EnvError::State("call reset first".into()));
        }
        if self.status.is_done() {
            return Err(EnvError::State("rollout already ended; call reset".into()));
        }
        let expected = if self.no_image { "run-step" } else { "requested-frame" };
        match (&self.held, self.no_image) {
            (Some(TmiSync::RequestedFrame), false) | (Some(TmiSync::RunStep(_)), true) => {}
            (held, _) => {
                return Err(self.protocol(format!(
                    "step needs the {expected} sync of its observation held; holding {held:?} (call observe first)"
                )))
            }
        }
        let keys = ACTION_KEYS[actions[0] as usize];
        if let Some(t) = self.tracker.as_mut() {
            t.record_keys(keys);
        }
        let [gas, brake, left, right] = keys;
        self.finished_now = false;
        self.client.set_input_state(left, right, gas, brake)?;
        self.client.set_speed(self.running_speed)?;
        self.respond_held()?;
        loop {
            match self.read_call()? {
                TmiSync::RunStep(t) if t >= 0 && t % self.decision_ms == 0 => {
                    self.held = Some(TmiSync::RunStep(t));
                    let cut = self.tracker.as_ref().and_then(|tr| {
                        tr.cut_off(i64::from(t), self.time_limit_ms, self.no_progress_ms)
                    });
                    self.status = cut.map_or(Status::Running, Status::CutOff);
                    if cut.is_some() {
                        self.client.set_timeout(self.timeout_between_runs)?;
                    }
                    return Ok(self.status);
                }
                TmiSync::CheckpointCount(cur, target) if cur == target => {
                    let (mut bytes, st) = self.state()?;
                    if state::patch_finish(&mut bytes)? {
                        self.client.rewind_to_state(&bytes)?;
                    } else {
                        self.client.prevent_simulation_finish()?;
                    }
                    self.client.set_timeout(self.timeout_between_runs)?;
                    self.held = Some(TmiSync::CheckpointCount(cur, target));
                    self.finished_now = true;
                    self.status = Status::Finished { race_time_ms: f64::from(st.race_time()) };
                    return Ok(self.status);
                }
                TmiSync::OnConnect => {
                    return Err(self.protocol(
                        "the game sent on-connect again (restarted?) in the middle of a run".into(),
                    ))
                }
                other => self.client.respond(&other)?,
            }
        }
    }

    fn ingredients(&self) -> [f32; ingredients::COUNT] {
        TrackProgress::ingredients(self.progress.as_ref(), self.finished_now)
    }
}
