//! The game's simulation state: the bytes TMInterface's `SaveState().ToArray()`
//! produces (`SimStateData`), which the original's `Python_Link.as` plugin
//! sends for `C_GET_SIMULATION_STATE` as an i32 length and the bytes, and
//! accepts back in `C_REWIND_TO_STATE`.
//!
//! Little-endian; a boolean is a 4-byte word, non-zero meaning true. A fixed
//! part of [`GAME_STATE_LEN`] bytes, then the checkpoint data's two variable
//! arrays: `total = 8356 + 4·ns + 8·nt`. Offsets (those of the public
//! `tminterface` 1.0.2 package's `structs.py`):
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0 / 4 / 8 | u32 | version / context_mode / flags (`0x80`: player info present) |
//! | 688 | f32\[3\]\[3\] row-major | `dyna.current_state.rotation` R |
//! | 724 / 736 / 760 | f32\[3\] | position (y up) / linear_speed / angular_speed |
//! | 2388 | i32 | `scene_mobil.gearbox_state` |
//! | 3112 / 3128 | f32 / i32 | `scene_mobil.engine.actual_rpm` / `.gear` |
//! | 3196 | bool32 | `scene_mobil.is_freewheeling` |
//! | 3816 + 764·i, then +180 / +292 / +296 / +300 | f32 / bool32 / i32 / bool32 | wheel i: damper_absorb / has_ground_contact / contact_material_id / is_sliding |
//! | 7892 | i32 | `player_info.race_time` |
//! | 8348 | i32 | ns; `cp_states` bool32\[ns\] from 8352 |
//! | 8352 + 4·ns | i32 | nt; then nt × {i32 time, i32 stunts_score} |
//!
//! [`GameState::decode`] reads exactly these fields and checks the counts
//! and the total length, naming the values; [`GameState::encode`] writes a
//! buffer holding them (every other byte zero, or a caller's private bytes
//! in the opaque `cmd_buffer_core` region, see [`GameState::encode_with_private`]);
//! [`patch_finish`] is the original's finish trick (the last `cp_times`
//! entry's time set to −1, then rewound to).

/// Bytes before the checkpoint arrays (including both counts).
pub const GAME_STATE_LEN: usize = 8356;
/// Most checkpoint states / times accepted (the original's client bound).
pub const MAX_CHECKPOINTS: usize = 2000;
/// `flags` bit: the player-info block (race time) is valid.
pub const SIM_HAS_PLAYER_INFO: u32 = 0x80;
/// All `SIM_HAS_*` bits, as a full save state from the game has them.
pub const SIM_HAS_ALL: u32 = 0xFF;

const ROTATION: usize = 688;
const POSITION: usize = 724;
const LINEAR_SPEED: usize = 736;
const ANGULAR_SPEED: usize = 760;
const GEARBOX_STATE: usize = 2388;
const ACTUAL_RPM: usize = 3112;
const GEAR: usize = 3128;
const IS_FREEWHEELING: usize = 3196;
const WHEELS: usize = 3816;
const WHEEL_STRIDE: usize = 764;
const DAMPER_ABSORB: usize = 180;
const HAS_GROUND_CONTACT: usize = 292;
const CONTACT_MATERIAL_ID: usize = 296;
const IS_SLIDING: usize = 300;
const RACE_TIME: usize = 7892;
const CP_STATES_LENGTH: usize = 8348;
/// The opaque `cmd_buffer_core` region (264 bytes), never decoded.
pub const CMD_BUFFER_CORE: std::ops::Range<usize> = 6940..7204;

/// One wheel's real-time state.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Wheel {
    /// `real_time_state.damper_absorb`.
    pub damper_absorb: f32,
    /// `real_time_state.has_ground_contact`.
    pub has_ground_contact: bool,
    /// `real_time_state.contact_material_id` as stored (the original masks it with `0xFFFF`).
    pub contact_material_id: i32,
    /// `real_time_state.is_sliding`.
    pub is_sliding: bool,
}

impl Wheel {
    /// The material id as the original uses it: `contact_material_id & 0xFFFF`.
    pub fn material(&self) -> u16 {
        (self.contact_material_id & 0xFFFF) as u16
    }
}

/// One entry of `cp_data.cp_times`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpTime {
    /// Race time the checkpoint was passed, ms (−1: not passed).
    pub time: i32,
    /// Stunts score then.
    pub stunts_score: i32,
}

/// The fields of a `SimStateData` that rulka uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GameState {
    /// `version`.
    pub version: u32,
    /// `context_mode`.
    pub context_mode: u32,
    /// `flags` (`SIM_HAS_*` bits).
    pub flags: u32,
    /// `dyna.current_state.rotation`, row-major: column j is the car's local
    /// axis j (x lateral, y up, z forward) in world coordinates.
    pub rotation: [[f32; 3]; 3],
    /// `dyna.current_state.position`, m (y up).
    pub position: [f32; 3],
    /// `dyna.current_state.linear_speed`, m/s (world frame).
    pub linear_speed: [f32; 3],
    /// `dyna.current_state.angular_speed`, rad/s (world frame).
    pub angular_speed: [f32; 3],
    /// `scene_mobil.gearbox_state`.
    pub gearbox_state: i32,
    /// `scene_mobil.engine.actual_rpm`.
    pub actual_rpm: f32,
    /// `scene_mobil.engine.gear`.
    pub gear: i32,
    /// `scene_mobil.is_freewheeling`.
    pub is_freewheeling: bool,
    /// The four wheels.
    pub wheels: [Wheel; 4],
    /// `player_info.race_time` as stored (see [`GameState::race_time`]).
    pub player_race_time: i32,
    /// `cp_data.cp_states`.
    pub cp_states: Vec<bool>,
    /// `cp_data.cp_times`.
    pub cp_times: Vec<CpTime>,
}

/// Why a state's bytes are not a `SimStateData`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GameStateError {
    /// Shorter than the fixed part.
    #[error(
        "simulation state of {len} bytes is shorter than the {min}-byte fixed part of SimStateData"
    )]
    TooShort {
        /// Bytes received.
        len: usize,
        /// The fixed part's size.
        min: usize,
    },
    /// A checkpoint count outside `0..=MAX_CHECKPOINTS`.
    #[error("simulation state: {field} count {count} is outside 0..={max} (likely out of sync)")]
    Count {
        /// `cp_states` or `cp_times`.
        field: &'static str,
        /// The count read.
        count: i64,
        /// The bound.
        max: usize,
    },
    /// The total length disagrees with the counts.
    #[error("simulation state of {len} bytes; with cp_states {ns} and cp_times {nt} it must be {expected} (8356 + 4·ns + 8·nt)")]
    Length {
        /// Bytes received.
        len: usize,
        /// Bytes the counts imply.
        expected: usize,
        /// `cp_states` count.
        ns: usize,
        /// `cp_times` count.
        nt: usize,
    },
}

impl GameStateError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        rulka_error::ErrorKind::Corrupt
    }
}

fn word(b: &[u8], at: usize) -> [u8; 4] {
    [b[at], b[at + 1], b[at + 2], b[at + 3]]
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(word(b, at))
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(word(b, at))
}

fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes(word(b, at))
}

fn vec3_at(b: &[u8], at: usize) -> [f32; 3] {
    [f32_at(b, at), f32_at(b, at + 4), f32_at(b, at + 8)]
}

fn count(b: &[u8], at: usize, field: &'static str) -> Result<usize, GameStateError> {
    let n = i32_at(b, at);
    if n < 0 || n as usize > MAX_CHECKPOINTS {
        return Err(GameStateError::Count { field, count: i64::from(n), max: MAX_CHECKPOINTS });
    }
    Ok(n as usize)
}

/// `(ns, nt)` of a state's bytes, checked as [`GameState::decode`] does.
pub fn checkpoint_counts(b: &[u8]) -> Result<(usize, usize), GameStateError> {
    if b.len() < GAME_STATE_LEN {
        return Err(GameStateError::TooShort { len: b.len(), min: GAME_STATE_LEN });
    }
    let ns = count(b, CP_STATES_LENGTH, "cp_states")?;
    let nt_at = CP_STATES_LENGTH + 4 + 4 * ns;
    if b.len() < nt_at + 4 {
        return Err(GameStateError::Length {
            len: b.len(),
            expected: GAME_STATE_LEN + 4 * ns,
            ns,
            nt: 0,
        });
    }
    let nt = count(b, nt_at, "cp_times")?;
    let expected = GAME_STATE_LEN + 4 * ns + 8 * nt;
    if b.len() != expected {
        return Err(GameStateError::Length { len: b.len(), expected, ns, nt });
    }
    Ok((ns, nt))
}

impl GameState {
    /// Decodes the fields of the table in the module docs.
    pub fn decode(b: &[u8]) -> Result<Self, GameStateError> {
        let (ns, nt) = checkpoint_counts(b)?;
        let mut rotation = [[0f32; 3]; 3];
        for (i, row) in rotation.iter_mut().enumerate() {
            *row = vec3_at(b, ROTATION + 12 * i);
        }
        let mut wheels = [Wheel::default(); 4];
        for (i, w) in wheels.iter_mut().enumerate() {
            let base = WHEELS + WHEEL_STRIDE * i;
            *w = Wheel {
                damper_absorb: f32_at(b, base + DAMPER_ABSORB),
                has_ground_contact: u32_at(b, base + HAS_GROUND_CONTACT) != 0,
                contact_material_id: i32_at(b, base + CONTACT_MATERIAL_ID),
                is_sliding: u32_at(b, base + IS_SLIDING) != 0,
            };
        }
        let states = CP_STATES_LENGTH + 4;
        let times = states + 4 * ns + 4;
        Ok(Self {
            version: u32_at(b, 0),
            context_mode: u32_at(b, 4),
            flags: u32_at(b, 8),
            rotation,
            position: vec3_at(b, POSITION),
            linear_speed: vec3_at(b, LINEAR_SPEED),
            angular_speed: vec3_at(b, ANGULAR_SPEED),
            gearbox_state: i32_at(b, GEARBOX_STATE),
            actual_rpm: f32_at(b, ACTUAL_RPM),
            gear: i32_at(b, GEAR),
            is_freewheeling: u32_at(b, IS_FREEWHEELING) != 0,
            wheels,
            player_race_time: i32_at(b, RACE_TIME),
            cp_states: (0..ns).map(|k| u32_at(b, states + 4 * k) != 0).collect(),
            cp_times: (0..nt)
                .map(|k| CpTime {
                    time: i32_at(b, times + 8 * k),
                    stunts_score: i32_at(b, times + 8 * k + 4),
                })
                .collect(),
        })
    }

    /// The race time in ms as TMInterface reports it: `player_info.race_time`
    /// when `flags` has [`SIM_HAS_PLAYER_INFO`], else 0.
    pub fn race_time(&self) -> i32 {
        if self.flags & SIM_HAS_PLAYER_INFO != 0 {
            self.player_race_time
        } else {
            0
        }
    }

    /// The bytes of this state: the decoded fields at their offsets, every
    /// other byte zero.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with_private(&[])
    }

    /// [`GameState::encode`] with `private` (at most 264 bytes; longer is
    /// cut) in the opaque `cmd_buffer_core` region — where a stand-in for the
    /// game keeps whatever else its save state needs to rewind exactly, as
    /// the game's own save state does in the fields rulka never reads.
    pub fn encode_with_private(&self, private: &[u8]) -> Vec<u8> {
        let (ns, nt) = (self.cp_states.len(), self.cp_times.len());
        let mut b = vec![0u8; GAME_STATE_LEN + 4 * ns + 8 * nt];
        let mut put = |at: usize, w: [u8; 4]| b[at..at + 4].copy_from_slice(&w);
        put(0, self.version.to_le_bytes());
        put(4, self.context_mode.to_le_bytes());
        put(8, self.flags.to_le_bytes());
        for (at, v) in [
            (ROTATION, self.rotation[0]),
            (ROTATION + 12, self.rotation[1]),
            (ROTATION + 24, self.rotation[2]),
            (POSITION, self.position),
            (LINEAR_SPEED, self.linear_speed),
            (ANGULAR_SPEED, self.angular_speed),
        ] {
            for (k, x) in v.iter().enumerate() {
                put(at + 4 * k, x.to_le_bytes());
            }
        }
        let flag = |x: bool| u32::from(x).to_le_bytes();
        put(GEARBOX_STATE, self.gearbox_state.to_le_bytes());
        put(ACTUAL_RPM, self.actual_rpm.to_le_bytes());
        put(GEAR, self.gear.to_le_bytes());
        put(IS_FREEWHEELING, flag(self.is_freewheeling));
        for (i, w) in self.wheels.iter().enumerate() {
            let base = WHEELS + WHEEL_STRIDE * i;
            put(base + DAMPER_ABSORB, w.damper_absorb.to_le_bytes());
            put(base + HAS_GROUND_CONTACT, flag(w.has_ground_contact));
            put(base + CONTACT_MATERIAL_ID, w.contact_material_id.to_le_bytes());
            put(base + IS_SLIDING, flag(w.is_sliding));
        }
        put(RACE_TIME, self.player_race_time.to_le_bytes());
        put(CP_STATES_LENGTH, (ns as i32).to_le_bytes());
        let states = CP_STATES_LENGTH + 4;
        for (k, &s) in self.cp_states.iter().enumerate() {
            put(states + 4 * k, flag(s));
        }
        put(states + 4 * ns, (nt as i32).to_le_bytes());
        let times = states + 4 * ns + 4;
        for (k, t) in self.cp_times.iter().enumerate() {
            put(times + 8 * k, t.time.to_le_bytes());
            put(times + 8 * k + 4, t.stunts_score.to_le_bytes());
        }
        let n = private.len().min(CMD_BUFFER_CORE.len());
        b[CMD_BUFFER_CORE.start..CMD_BUFFER_CORE.start + n].copy_from_slice(&private[..n]);
        b
    }
}

/// The original's finish handling on a state's bytes: the last `cp_times`
/// entry's time becomes −1 ("equivalent to prevent_simulation_finish()"), so
/// that rewinding to the patched state keeps the race running past the line.
/// Returns `Ok(false)` (bytes unchanged) when `cp_times` is empty — the
/// caller then sends `prevent_simulation_finish`, as the original.
pub fn patch_finish(b: &mut [u8]) -> Result<bool, GameStateError> {
    let (ns, nt) = checkpoint_counts(b)?;
    if nt == 0 {
        return Ok(false);
    }
    let at = CP_STATES_LENGTH + 4 + 4 * ns + 4 + 8 * (nt - 1);
    b[at..at + 4].copy_from_slice(&(-1i32).to_le_bytes());
    Ok(true)
}

/// The private bytes [`GameState::encode_with_private`] stored (the whole
/// 264-byte region; the caller knows its own format).
pub fn private_region(b: &[u8]) -> Option<&[u8]> {
    b.get(CMD_BUFFER_CORE)
}
