//! The built-in simulator: a car on a generated [`Track`], stepped at the
//! game's 10 ms engine rate, observed as the game is.
//!
//! **Car model** (per engine step, `dt` = `ms_per_tm_engine_step`): throttle
//! accelerates up to [`TOP_SPEED`] with a force falling off with speed;
//! braking decelerates hard (and reverses slowly from rest); coasting rolls
//! out; steering turns the heading at a rate that grows with speed and a lock
//! that shrinks with it. The velocity does not turn with the heading: tyres
//! pull the lateral velocity back by at most [`GRIP`]·dt per step, so a corner
//! taken faster than `√(GRIP·radius)` slides (drifts) outwards — racing lines
//! and braking before sharp corners matter. Walls at the road edges stop the
//! outward velocity, scrub speed, and turn a car nosing into them along them.
//!
//! **The world and its observer.** [`Sim`] is the world (track, car, race
//! clock), what the game is; it describes its car as the game does
//! ([`Sim::game_state`], the `SimStateData` fields rulka reads). [`SimEnv`]
//! observes it exactly as a collector observes the game: an ego-centred
//! top-down frame (car at the bottom third, facing up, [`VIEW_M`] metres
//! across) and the original's float vector built from that game state and the
//! track's zone centres (its 0.5 m centreline as a reference line) by
//! [`crate::floats`] — so the same network inputs, zone tracking, progress and
//! cut-offs as on the game.
//!
//! Everything is deterministic given `(track seed, preset, actions)`.

use std::collections::HashMap;
use std::sync::Arc;

use rulka_config::{ingredients, Config, TrackPreset, ACTION_KEYS};

use crate::floats::{FloatBuilder, ProgressTracker, TrackProgress, ASPHALT};
use crate::tmi::state::{private_region, CpTime, GameState, Wheel, SIM_HAS_ALL};
use crate::track::Track;
use crate::zones::{ZoneMap, ZoneParams};
use crate::{check_actions, EnvError, Environment, Status};

/// Top speed on throttle, m/s.
pub const TOP_SPEED: f64 = 45.0;
/// Engine acceleration from rest, m/s².
const ENGINE_ACCEL: f64 = 9.0;
/// Braking deceleration, m/s².
const BRAKE_DECEL: f64 = 16.0;
/// Throttle and brake together: brake wins, weaker.
const BRAKE_WITH_GAS: f64 = 7.0;
/// Reverse acceleration from rest, m/s² (up to [`REVERSE_MAX`]).
const REVERSE_ACCEL: f64 = 3.0;
const REVERSE_MAX: f64 = 8.0;
/// Rolling resistance while coasting, m/s².
const ROLL_DECEL: f64 = 0.8;
/// Aerodynamic drag coefficient, 1/m.
const DRAG: f64 = 0.0015;
/// Lateral grip: the most lateral velocity the tyres remove per second, m/s².
pub const GRIP: f64 = 12.0;
/// Wheelbase, m.
const WHEELBASE: f64 = 2.6;
/// Steering lock at rest (rad) and the speed at which it halves (m/s).
const MAX_STEER: f64 = 0.5;
const STEER_HALF_SPEED: f64 = 25.0;
/// Lateral speed above which wheels count as sliding, m/s.
const SLIDE_THRESHOLD: f64 = 1.5;
/// Half the car's width, m (walls stop the car's side, not its centre).
const CAR_HALF_WIDTH: f64 = 1.0;
/// Speed kept per engine step in contact with a wall.
const WALL_SCRUB: f64 = 0.985;
/// Rate at which a wall turns a car nosing into it along the wall, rad/s.
const WALL_TURN: f64 = 3.0;
/// Width of the rendered view, metres.
pub const VIEW_M: f64 = 64.0;
/// Gravity, m/s² (slopes of a real map's shape speed the car up or slow it).
const GRAVITY: f64 = 9.81;

/// Grey levels of the rendered frame.
const GREY_OUTSIDE: u8 = 40;
const GREY_ROAD: u8 = 130;
const GREY_EDGE: u8 = 235;
const GREY_LINE_DARK: u8 = 10;
const GREY_LINE_LIGHT: u8 = 255;
const GREY_CAR: u8 = 0;

/// Simulator settings taken from a [`Config`].
#[derive(Debug, Clone)]
pub struct SimParams {
    /// Track preset.
    pub preset: TrackPreset,
    /// Frame width and height in pixels (`(1, 1)` for float-only networks).
    pub width: usize,
    /// Frame height.
    pub height: usize,
    /// Whether the network takes no image (frames are a single 0 byte).
    pub no_image: bool,
    /// Milliseconds per engine step.
    pub engine_ms: u32,
    /// Engine steps per decision.
    pub engine_steps: u32,
    /// Action heads per decision.
    pub n_heads: usize,
    /// Zone centres in the float vector.
    pub n_zones: usize,
    /// Previous actions in the float vector.
    pub n_prev: usize,
    /// Contact-material classes per wheel.
    pub n_materials: usize,
    /// Race time limit.
    pub time_limit_ms: u64,
    /// No-progress limit.
    pub no_progress_ms: u64,
    /// Float vector length.
    pub float_dim: usize,
    /// A reference line whose shape every track takes (`environment.sim.track_from`).
    pub track_from: Option<std::path::PathBuf>,
    /// Road width of a `track_from` track, m.
    pub track_width: f64,
}

impl SimParams {
    /// The simulator settings of `cfg`.
    pub fn from_config(cfg: &Config) -> Self {
        let e = &cfg.environment;
        let n_heads = cfg.n_action_heads();
        let decision_ms = if n_heads > 1 {
            e.ms_per_tm_engine_step * n_heads as u32
        } else {
            cfg.ms_per_action()
        };
        let (width, height) = if cfg.nn.no_image {
            (1, 1)
        } else {
            (cfg.nn.image_width as usize, cfg.nn.image_height as usize)
        };
        Self {
            preset: e.sim.track,
            width,
            height,
            no_image: cfg.nn.no_image,
            engine_ms: e.ms_per_tm_engine_step.max(1),
            engine_steps: (decision_ms / e.ms_per_tm_engine_step.max(1)).max(1),
            n_heads,
            n_zones: e.n_zone_centers_in_inputs as usize,
            n_prev: e.n_prev_actions_in_inputs as usize,
            n_materials: e.n_contact_material_physics_behavior_types as usize,
            time_limit_ms: u64::from(e.cutoff_rollout_if_race_not_finished_within_duration_ms),
            no_progress_ms: u64::from(e.cutoff_rollout_if_no_vcp_passed_within_duration_ms),
            float_dim: cfg.float_input_dim(),
            track_from: e.sim.track_from.clone(),
            track_width: e.sim.track_width_m,
        }
    }
}

/// The car's physical state (world frame: x east, y north, heading
/// counter-clockwise from east).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Car {
    /// Position, m.
    pub pos: [f64; 2],
    /// Heading, rad.
    pub heading: f64,
    /// Velocity, m/s (world frame).
    pub vel: [f64; 2],
    /// Yaw rate, rad/s (positive = turning left).
    pub yaw_rate: f64,
    /// Whether the car touched a wall in the last engine step.
    pub on_wall: bool,
}

impl Car {
    fn forward(&self) -> [f64; 2] {
        [self.heading.cos(), self.heading.sin()]
    }

    fn right(&self) -> [f64; 2] {
        [self.heading.sin(), -self.heading.cos()]
    }

    /// Velocity in the car frame: `(forward, right)`.
    pub fn local_velocity(&self) -> (f64, f64) {
        let (f, r) = (self.forward(), self.right());
        (dot(self.vel, f), dot(self.vel, r))
    }

    /// Speed |v|.
    pub fn speed(&self) -> f64 {
        self.vel[0].hypot(self.vel[1])
    }

    /// Advances one engine step of `dt` seconds with keys
    /// `[accelerate, brake, left, right]`.
    pub fn step(&mut self, keys: [bool; 4], dt: f64) {
        let [gas, brake, left, right] = keys;
        let (mut vf, mut vr) = self.local_velocity();
        // (acceleration, whether it may carry the car through zero speed)
        let (accel, may_reverse) = if brake && vf > 0.1 {
            (-(if gas { BRAKE_WITH_GAS } else { BRAKE_DECEL }), false)
        } else if gas && !brake {
            (
                if vf < 0.0 { BRAKE_DECEL } else { ENGINE_ACCEL * (1.0 - vf / TOP_SPEED).max(0.0) },
                true,
            )
        } else if brake {
            (if !gas && vf > -REVERSE_MAX { -REVERSE_ACCEL } else { 0.0 }, true)
        } else if vf.abs() > 0.05 {
            (-ROLL_DECEL * vf.signum(), false)
        } else {
            (0.0, false)
        };
        let before = vf;
        vf += (accel - DRAG * vf * vf.abs()) * dt;
        if !may_reverse && before * vf < 0.0 {
            vf = 0.0; // braking or rolling stops the car, it does not reverse it
        }
        vr -= vr.signum() * vr.abs().min(GRIP * dt);
        let (f, r) = (self.forward(), self.right());
        self.vel = [vf * f[0] + vr * r[0], vf * f[1] + vr * r[1]];
        let steer = f64::from(left as i32 - right as i32);
        let lock = MAX_STEER / (1.0 + vf.abs() / STEER_HALF_SPEED);
        self.yaw_rate = steer * vf * lock.tan() / WHEELBASE;
        self.heading += self.yaw_rate * dt;
        self.pos = [self.pos[0] + self.vel[0] * dt, self.pos[1] + self.vel[1] * dt];
    }
}

/// The simulated world's complete physical state: what rewinding needs to
/// continue bit for bit. It travels inside the game-layout state bytes'
/// opaque region (see [`Sim::game_state_bytes`]), as the game's own save
/// state carries its internals.
#[derive(Debug, Clone, PartialEq)]
pub struct SimState {
    /// Track seed.
    pub seed: u64,
    /// The car.
    pub car: Car,
    /// Race time, ms.
    pub time_ms: u64,
    /// Nearest centreline point.
    pub nearest: u64,
    /// Arc-length position, m.
    pub s: f64,
    /// Whether the finish line was crossed.
    pub finished: bool,
}

const STATE_MAGIC: &[u8; 4] = b"RKS2";
const STATE_LEN: usize = 4 + 8 + 7 * 8 + 2 * 8 + 1;

impl SimState {
    /// Bytes of [`SimState::encode`]'s output.
    pub const ENCODED_LEN: usize = STATE_LEN;

    /// Little-endian encoding, starting with the magic `RKS2`.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = STATE_MAGIC.to_vec();
        b.extend_from_slice(&self.seed.to_le_bytes());
        for x in [
            self.car.pos[0],
            self.car.pos[1],
            self.car.heading,
            self.car.vel[0],
            self.car.vel[1],
            self.car.yaw_rate,
            self.s,
        ] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(&self.time_ms.to_le_bytes());
        b.extend_from_slice(&self.nearest.to_le_bytes());
        b.push(u8::from(self.car.on_wall) | (u8::from(self.finished) << 1));
        b
    }

    /// Decodes [`SimState::encode`]'s bytes (trailing bytes ignored); `None`
    /// when they are not such an encoding.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < STATE_LEN || &b[..4] != STATE_MAGIC {
            return None;
        }
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let f = |i: usize| f64::from_bits(u64_at(12 + 8 * i));
        let flags = b[STATE_LEN - 1];
        Some(Self {
            seed: u64_at(4),
            car: Car {
                pos: [f(0), f(1)],
                heading: f(2),
                vel: [f(3), f(4)],
                yaw_rate: f(5),
                on_wall: flags & 1 != 0,
            },
            s: f(6),
            time_ms: u64_at(68),
            nearest: u64_at(76),
            finished: flags & 2 != 0,
        })
    }
}

fn dot(a: [f64; 2], b: [f64; 2]) -> f64 {
    a[0] * b[0] + a[1] * b[1]
}

/// A `track_from` line as read, and its track.
type LineTrack = (Arc<Vec<[f64; 3]>>, Arc<Track>);

/// The simulated world: a track, the car on it and the race clock — what the
/// game is to a collector. [`SimEnv`] observes it as a collector observes the
/// game; the TMInterface test server ([`SimServer`](crate::SimServer)) serves it.
#[derive(Debug)]
pub struct Sim {
    p: SimParams,
    tracks: HashMap<u64, Arc<Track>>,
    /// The `track_from` line as read and its track (loaded once).
    line: Option<LineTrack>,
    track: Option<Arc<Track>>,
    seed: u64,
    car: Car,
    nearest: usize,
    s: f64,
    time_ms: u64,
    finished: bool,
}

impl Sim {
    /// A world with `p`'s settings (no track yet: [`Sim::load`]).
    pub fn new(p: SimParams) -> Self {
        Self {
            p,
            tracks: HashMap::new(),
            line: None,
            track: None,
            seed: 0,
            car: Car { pos: [0.0; 2], heading: 0.0, vel: [0.0; 2], yaw_rate: 0.0, on_wall: false },
            nearest: 0,
            s: 0.0,
            time_ms: 0,
            finished: false,
        }
    }

    /// The settings.
    pub fn params(&self) -> &SimParams {
        &self.p
    }

    /// Loads track `seed` (generated once, then cached; with `track_from`,
    /// that line's track whatever the seed) and puts the car at rest on the
    /// start line at race time 0. Fails only when the `track_from` file
    /// cannot be a track (named in the error).
    pub fn load(&mut self, seed: u64) -> Result<(), EnvError> {
        let preset = self.p.preset;
        let track = match &self.p.track_from {
            Some(path) => self.line_track(path.clone())?.1,
            None => self
                .tracks
                .entry(seed)
                .or_insert_with(|| Arc::new(Track::generate(seed, preset)))
                .clone(),
        };
        let t = track.tangents[0];
        self.car = Car {
            pos: track.points[0],
            heading: t[1].atan2(t[0]),
            vel: [0.0; 2],
            yaw_rate: 0.0,
            on_wall: false,
        };
        self.track = Some(track);
        self.seed = seed;
        self.nearest = 0;
        self.s = 0.0;
        self.time_ms = 0;
        self.finished = false;
        Ok(())
    }

    fn line_track(&mut self, path: std::path::PathBuf) -> Result<LineTrack, EnvError> {
        if let Some(l) = &self.line {
            return Ok(l.clone());
        }
        let err = |message: String| EnvError::Map { name: path.display().to_string(), message };
        let line = crate::npy::read_points(&path, 2).map_err(|e| err(e.to_string()))?;
        let track = Track::from_line(&line, self.p.track_width, 0, self.p.preset).map_err(err)?;
        let l = (Arc::new(line), Arc::new(track));
        self.line = Some(l.clone());
        Ok(l)
    }

    /// The reference line whose zone centres the float vector shows: the
    /// `track_from` line as read, or the generated track's centreline
    /// ([`reference_line`]). `None` before the first [`Sim::load`].
    pub fn zone_line(&self) -> Option<Vec<[f64; 3]>> {
        match &self.line {
            Some((line, _)) => Some(line.to_vec()),
            None => self.track.as_deref().map(reference_line),
        }
    }

    /// The seed loaded last.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The current track.
    pub fn track(&self) -> Option<&Arc<Track>> {
        self.track.as_ref()
    }

    /// The car.
    pub fn car(&self) -> &Car {
        &self.car
    }

    /// Race time, ms.
    pub fn time_ms(&self) -> u64 {
        self.time_ms
    }

    /// Whether the car crossed the finish line.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The car's arc-length position along the centreline, m.
    pub fn progress_m(&self) -> f64 {
        self.s
    }

    fn track_ref(&self) -> Result<&Track, EnvError> {
        self.track.as_deref().ok_or_else(|| EnvError::State("no track: call reset first".into()))
    }

    /// One engine step (`ms_per_tm_engine_step`) with keys
    /// `[accelerate, brake, left, right]`. Returns true on the step that
    /// crosses the finish line; after it the car stays where it is while the
    /// clock runs on.
    pub fn tick(&mut self, keys: [bool; 4]) -> Result<bool, EnvError> {
        if self.finished {
            self.time_ms += u64::from(self.p.engine_ms);
            return Ok(false);
        }
        let length = self.track_ref()?.length();
        self.engine_step(keys)?;
        if self.s >= length {
            self.finished = true;
        }
        Ok(self.finished)
    }

    /// One engine step of the car gliding along the centreline itself, as a
    /// replay of a clean drive plays (`rulka sim serve --autopilot`):
    /// accelerating from rest at the engine's rate up to `top_speed` m/s,
    /// heading along the road, `extra_m` metres further than the speed takes
    /// it (0; a jump for tests of `rulka map record`). Returns true on the step
    /// that crosses the finish line, as [`Sim::tick`].
    pub fn glide(&mut self, top_speed: f64, extra_m: f64) -> Result<bool, EnvError> {
        if self.finished {
            self.time_ms += u64::from(self.p.engine_ms);
            return Ok(false);
        }
        let track = self.track.clone().ok_or_else(|| EnvError::State("no track".into()))?;
        let dt = f64::from(self.p.engine_ms) / 1000.0;
        let v = (self.car.speed() + ENGINE_ACCEL * dt).min(top_speed);
        let s = (self.s + v * dt + extra_m).max(0.0);
        let last = track.points.len() - 2;
        let i = ((s / crate::track::POINT_SPACING).floor() as usize).min(last);
        let f = s / crate::track::POINT_SPACING - i as f64;
        let (a, b) = (track.points[i], track.points[i + 1]);
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        let l = dx.hypot(dy).max(1e-12);
        self.car = Car {
            pos: [a[0] + f * dx, a[1] + f * dy],
            heading: dy.atan2(dx),
            vel: [v * dx / l, v * dy / l],
            yaw_rate: 0.0,
            on_wall: false,
        };
        self.nearest = if f < 0.5 { i } else { i + 1 };
        self.s = s;
        self.time_ms += u64::from(self.p.engine_ms);
        if self.s >= track.length() {
            self.finished = true;
        }
        Ok(self.finished)
    }

    /// The exact physical state.
    pub fn state(&self) -> Option<SimState> {
        self.track.as_ref()?;
        Some(SimState {
            seed: self.seed,
            car: self.car,
            time_ms: self.time_ms,
            nearest: self.nearest as u64,
            s: self.s,
            finished: self.finished,
        })
    }

    /// Rewinds to `st` exactly (loading its track if needed).
    pub fn set_state(&mut self, st: &SimState) -> Result<(), EnvError> {
        if self.track.is_none() || self.seed != st.seed {
            self.load(st.seed)?;
        }
        self.car = st.car;
        self.time_ms = st.time_ms;
        self.nearest = (st.nearest as usize).min(self.track_ref()?.points.len() - 1);
        self.s = st.s;
        self.finished = st.finished;
        Ok(())
    }

    /// The car described as the game describes its car ([`GameState`]): the
    /// world's `(x, y)` plane is the game's horizontal `(x, z)`, y up; the
    /// rotation's columns are the car's right, up and forward axes (so that
    /// `Rᵀ·v` is `[right, up, forward]`); the yaw rate is a rotation about
    /// the up axis (positive turning right); all four wheels touch asphalt
    /// and slide when the lateral speed exceeds 1.5 m/s; one checkpoint (the
    /// finish), its time −1 until crossed. `last_keys` gives is_freewheeling.
    pub fn game_state(&self, last_keys: [bool; 4]) -> GameState {
        let (sh, ch) = self.car.heading.sin_cos();
        let (_, vr) = self.car.local_velocity();
        let speed = self.car.speed();
        let sliding = vr.abs() > SLIDE_THRESHOLD;
        let wheel = Wheel {
            damper_absorb: 0.0,
            has_ground_contact: true,
            contact_material_id: ASPHALT,
            is_sliding: sliding,
        };
        // On a real map's shape the car rides the road's height where it
        // last projected and climbs with it (the body itself stays level).
        let (height, climb) = match self.track.as_deref() {
            Some(t) if self.nearest < t.points.len() => {
                let i = self.nearest;
                (t.height_at(i, self.s), dot(self.car.vel, t.tangents[i]) * t.gradient(i))
            }
            _ => (0.0, 0.0),
        };
        GameState {
            version: 1,
            context_mode: 1,
            flags: SIM_HAS_ALL,
            rotation: [[sh as f32, 0.0, ch as f32], [0.0, 1.0, 0.0], [-ch as f32, 0.0, sh as f32]],
            position: [self.car.pos[0] as f32, height as f32, self.car.pos[1] as f32],
            linear_speed: [self.car.vel[0] as f32, climb as f32, self.car.vel[1] as f32],
            angular_speed: [0.0, -self.car.yaw_rate as f32, 0.0],
            gearbox_state: 0,
            actual_rpm: (2000.0 + 8000.0 * (speed / 10.0).fract()) as f32,
            gear: (1.0 + speed / 10.0).floor().min(5.0) as i32,
            is_freewheeling: !last_keys[0] && !last_keys[1],
            wheels: [wheel; 4],
            player_race_time: self.time_ms as i32,
            cp_states: vec![self.finished],
            cp_times: vec![CpTime {
                time: if self.finished { self.time_ms as i32 } else { -1 },
                stunts_score: 0,
            }],
        }
    }

    /// [`Sim::game_state`] in the game's byte layout, with the exact state
    /// in the opaque region so that [`Sim::rewind_bytes`] restores it.
    pub fn game_state_bytes(&self, last_keys: [bool; 4]) -> Vec<u8> {
        let private = self.state().map(|s| s.encode()).unwrap_or_default();
        self.game_state(last_keys).encode_with_private(&private)
    }

    /// Rewinds to state bytes: exactly, when they carry a [`SimState`] in the
    /// opaque region; otherwise from the documented fields (position,
    /// heading, velocity, yaw rate, race time) on the current track. The
    /// finish counts as crossed (a foreign state) when its last checkpoint
    /// time is not −1.
    pub fn rewind_bytes(&mut self, bytes: &[u8]) -> Result<(), EnvError> {
        let gs = GameState::decode(bytes).map_err(EnvError::BadState)?;
        match private_region(bytes).and_then(SimState::decode) {
            Some(st) => self.set_state(&st)?,
            None => {
                let track = self.track.clone().ok_or_else(|| {
                    EnvError::State("rewind to a foreign state before any map was loaded".into())
                })?;
                let f = |x: f32| f64::from(x);
                self.car = Car {
                    pos: [f(gs.position[0]), f(gs.position[2])],
                    heading: f(gs.rotation[2][2]).atan2(f(gs.rotation[0][2])),
                    vel: [f(gs.linear_speed[0]), f(gs.linear_speed[2])],
                    yaw_rate: -f(gs.angular_speed[1]),
                    on_wall: false,
                };
                let pr = track.project_exhaustive(self.car.pos);
                self.nearest = pr.index;
                self.s = pr.s;
                self.time_ms = u64::try_from(gs.race_time()).unwrap_or(0);
                self.finished = gs.cp_times.last().is_some_and(|t| t.time >= 0);
            }
        }
        Ok(())
    }

    fn engine_step(&mut self, keys: [bool; 4]) -> Result<(), EnvError> {
        let dt = f64::from(self.p.engine_ms) / 1000.0;
        self.car.step(keys, dt);
        let track = self.track.clone().ok_or_else(|| EnvError::State("no track".into()))?;
        let grade = track.gradient(self.nearest);
        if grade != 0.0 {
            // Gravity along the road: g·sin θ, θ the slope under the car's heading.
            let f = self.car.forward();
            let along = grade * dot(f, track.tangents[self.nearest]);
            let a = -GRAVITY * along / (1.0 + along * along).sqrt() * dt;
            self.car.vel = [self.car.vel[0] + a * f[0], self.car.vel[1] + a * f[1]];
        }
        let mut pr = track.project(self.car.pos, self.nearest);
        let limit = track.width / 2.0 - CAR_HALF_WIDTH;
        self.car.on_wall = false;
        if pr.lateral.abs() > limit {
            // Wall: back onto the edge, outward velocity removed, speed scrubbed.
            let t = track.tangents[pr.index];
            let left = [-t[1], t[0]];
            let push = (pr.lateral.abs() - limit) * pr.lateral.signum();
            self.car.pos = [self.car.pos[0] - push * left[0], self.car.pos[1] - push * left[1]];
            let vn = dot(self.car.vel, left);
            if vn * pr.lateral > 0.0 {
                self.car.vel = [self.car.vel[0] - vn * left[0], self.car.vel[1] - vn * left[1]];
            }
            self.car.vel = [self.car.vel[0] * WALL_SCRUB, self.car.vel[1] * WALL_SCRUB];
            // A car nosing into the wall is turned along it (bumper deflection).
            let f = self.car.forward();
            if dot(f, left) * pr.lateral > 0.0 {
                let along = if dot(f, t) >= 0.0 { t } else { [-t[0], -t[1]] };
                let mut diff = along[1].atan2(along[0]) - self.car.heading;
                diff = (diff + std::f64::consts::PI).rem_euclid(2.0 * std::f64::consts::PI)
                    - std::f64::consts::PI;
                self.car.heading += diff.clamp(-WALL_TURN * dt, WALL_TURN * dt);
            }
            self.car.on_wall = true;
            pr = track.project(self.car.pos, pr.index);
        }
        // Behind the start line is a wall too.
        if pr.s < 0.0 {
            let t = track.tangents[0];
            let back = pr.s;
            self.car.pos = [self.car.pos[0] - back * t[0], self.car.pos[1] - back * t[1]];
            let vt = dot(self.car.vel, t);
            if vt < 0.0 {
                self.car.vel = [self.car.vel[0] - vt * t[0], self.car.vel[1] - vt * t[1]];
            }
            pr = track.project(self.car.pos, pr.index);
        }
        self.nearest = pr.index;
        self.s = pr.s;
        self.time_ms += u64::from(self.p.engine_ms);
        Ok(())
    }

    /// Renders the ego-centred frame into `out` (`width·height` bytes).
    pub fn render(&self, out: &mut [u8]) -> Result<(), EnvError> {
        let track = self.track_ref()?;
        let (w, h) = (self.p.width, self.p.height);
        if self.p.no_image {
            out.iter_mut().for_each(|b| *b = 0);
            return Ok(());
        }
        let mpp = VIEW_M / w as f64;
        let (f, r) = (self.car.forward(), self.car.right());
        let (cx, cy) = (w as f64 / 2.0, h as f64 * 0.7);
        let raster = track.raster();
        let lut = [GREY_OUTSIDE, GREY_ROAD, GREY_EDGE, GREY_LINE_DARK, GREY_LINE_LIGHT];
        for row in 0..h {
            // Pixel centre (col + 0.5, row + 0.5): right = (col+0.5-cx)·mpp, fwd = (cy-row-0.5)·mpp.
            let fwd = (cy - row as f64 - 0.5) * mpp;
            let mut x = self.car.pos[0] + fwd * f[0] + (0.5 - cx) * mpp * r[0];
            let mut y = self.car.pos[1] + fwd * f[1] + (0.5 - cx) * mpp * r[1];
            let (dx, dy) = (mpp * r[0], mpp * r[1]);
            let line = &mut out[row * w..(row + 1) * w];
            for px in line.iter_mut() {
                *px = lut[raster.at(x, y) as usize];
                x += dx;
                y += dy;
            }
        }
        // The car: 2 m × 4 m, centred on (cx, cy).
        let (half_w, half_l) = (1.0 / mpp, 2.0 / mpp);
        let (c0, c1) =
            ((cx - half_w).floor().max(0.0) as usize, ((cx + half_w).ceil() as usize).min(w));
        let (r0, r1) =
            ((cy - half_l).floor().max(0.0) as usize, ((cy + half_l).ceil() as usize).min(h));
        for row in r0..r1 {
            for col in c0..c1 {
                out[row * w + col] = GREY_CAR;
            }
        }
        Ok(())
    }
}

/// The reference line of `track` as a map's zone-centre file holds it: the
/// centreline from the start line to the finish line, 0.5 m apart, in the
/// game's axes (`(x, 0, y)`, y up). `rulka sim export-map` writes it as `.npy`.
pub fn reference_line(track: &Track) -> Vec<[f64; 3]> {
    track.points[..=track.finish_index].iter().map(|p| [p[0], 0.0, p[1]]).collect()
}

/// Engine steps the `h`-th of `heads` actions of one decision of `steps`
/// engine steps holds its keys: an equal share, the last head taking the rest.
pub fn head_engine_steps(steps: usize, heads: usize, h: usize) -> usize {
    let per_head = (steps / heads.max(1)).max(1);
    if h + 1 == heads {
        steps.saturating_sub(per_head * h)
    } else {
        per_head
    }
}

/// The simulator as an [`Environment`]: the [`Sim`] world observed through the
/// same float builder and zone tracking as the game ([`FloatBuilder`]).
#[derive(Debug)]
pub struct SimEnv {
    sim: Sim,
    builder: FloatBuilder,
    zones: ZoneParams,
    maps: HashMap<u64, Arc<ZoneMap>>,
    map: Option<Arc<ZoneMap>>,
    tracker: Option<ProgressTracker>,
    floats: Vec<f32>,
    progress: Option<TrackProgress>,
    last_keys: [bool; 4],
    status: Status,
    finished_now: bool,
}

impl SimEnv {
    /// A simulator for `cfg` (no track yet: call [`Environment::reset`]).
    pub fn new(cfg: &Config) -> Self {
        Self {
            sim: Sim::new(SimParams::from_config(cfg)),
            builder: FloatBuilder::new(cfg),
            zones: ZoneParams::from_config(cfg),
            maps: HashMap::new(),
            map: None,
            tracker: None,
            floats: vec![0.0; cfg.float_input_dim()],
            progress: None,
            last_keys: [false; 4],
            status: Status::Running,
            finished_now: false,
        }
    }

    /// The settings.
    pub fn params(&self) -> &SimParams {
        &self.sim.p
    }

    /// The world.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The current track (after `reset`).
    pub fn track(&self) -> Option<&Arc<Track>> {
        self.sim.track()
    }

    /// The zone map of the current track.
    pub fn zone_map(&self) -> Option<&Arc<ZoneMap>> {
        self.map.as_ref()
    }

    /// The car.
    pub fn car(&self) -> &Car {
        self.sim.car()
    }

    /// Race time so far, ms.
    pub fn time_ms(&self) -> u64 {
        self.sim.time_ms()
    }

    /// The car's arc-length position along the centreline, m.
    pub fn progress_m(&self) -> f64 {
        self.sim.progress_m()
    }

    /// The zone tracker of the current rollout.
    pub fn tracker(&self) -> Option<&ProgressTracker> {
        self.tracker.as_ref()
    }

    /// The current state in the game's byte layout (what `rulka sim serve`
    /// sends for `C_GET_SIMULATION_STATE`).
    pub fn game_state_bytes(&self) -> Vec<u8> {
        self.sim.game_state_bytes(self.last_keys)
    }

    /// Renders the ego-centred frame into `out` (`width·height` bytes).
    pub fn render(&self, out: &mut [u8]) -> Result<(), EnvError> {
        self.sim.render(out)
    }

    /// The current float vector (computed once per decision).
    pub fn floats(&self, out: &mut [f32]) -> Result<(), EnvError> {
        if out.len() != self.floats.len() {
            return Err(EnvError::State(format!(
                "float buffer has {} slots; the config's float vector has {}",
                out.len(),
                self.floats.len()
            )));
        }
        if self.tracker.is_none() {
            return Err(EnvError::State("no track: call reset first".into()));
        }
        out.copy_from_slice(&self.floats);
        Ok(())
    }

    /// Observes the world once (zone tracking, floats), as one decision of
    /// the original does.
    fn refresh(&mut self) -> Result<(), EnvError> {
        let (Some(map), Some(tracker)) = (self.map.as_ref(), self.tracker.as_mut()) else {
            return Err(EnvError::State("no track: call reset first".into()));
        };
        let gs = self.sim.game_state(self.last_keys);
        self.progress = Some(self.builder.build(&gs, map, tracker, &mut self.floats)?);
        Ok(())
    }
}

impl Environment for SimEnv {
    fn obs_sizes(&self) -> (usize, usize) {
        let p = &self.sim.p;
        (p.width * p.height, p.float_dim)
    }

    fn reset(&mut self, track_seed: u64) -> Result<(), EnvError> {
        self.sim.load(track_seed)?;
        // With track_from every seed is the same map: one zone map.
        let key = if self.sim.p.track_from.is_some() { 0 } else { track_seed };
        let map = match self.maps.get(&key) {
            Some(m) => m.clone(),
            None => {
                let line = self.sim.zone_line().unwrap_or_default();
                let m = Arc::new(
                    ZoneMap::new(&line, self.zones)
                        .map_err(|e| EnvError::Game(format!("track {track_seed}: {e}")))?,
                );
                self.maps.insert(key, m.clone());
                m
            }
        };
        self.tracker = Some(ProgressTracker::new(&map, self.builder.n_prev()));
        self.map = Some(map);
        self.last_keys = [false; 4];
        self.status = Status::Running;
        self.finished_now = false;
        self.refresh()
    }

    fn observe(&mut self, frame: &mut [u8], floats: &mut [f32]) -> Result<(), EnvError> {
        let (fl, _) = self.obs_sizes();
        if frame.len() != fl {
            return Err(EnvError::State(format!(
                "frame buffer has {} bytes; expected {fl}",
                frame.len()
            )));
        }
        if matches!(self.status, Status::Finished { .. }) {
            // Past the finish line the original records no frame (NaN, zeros for the learner).
            frame.iter_mut().for_each(|b| *b = 0);
        } else {
            self.sim.render(frame)?;
        }
        self.floats(floats)
    }

    fn step(&mut self, actions: &[u8]) -> Result<Status, EnvError> {
        check_actions(actions, self.sim.p.n_heads)?;
        if self.tracker.is_none() {
            return Err(EnvError::State("no track: call reset first".into()));
        }
        if self.status.is_done() {
            return Err(EnvError::State(format!(
                "rollout already ended ({:?}); call reset",
                self.status
            )));
        }
        self.finished_now = false;
        let steps = self.sim.p.engine_steps as usize;
        'heads: for (h, &a) in actions.iter().enumerate() {
            let n = head_engine_steps(steps, actions.len(), h);
            let keys = ACTION_KEYS[a as usize];
            self.last_keys = keys;
            if let Some(t) = self.tracker.as_mut() {
                t.record_keys(keys);
            }
            for _ in 0..n {
                if self.sim.tick(keys)? {
                    self.finished_now = true;
                    self.status = Status::Finished { race_time_ms: self.sim.time_ms() as f64 };
                    break 'heads;
                }
            }
        }
        if !self.status.is_done() {
            let p = &self.sim.p;
            let cut = self.tracker.as_ref().and_then(|t| {
                t.cut_off(self.sim.time_ms() as i64, p.time_limit_ms, p.no_progress_ms)
            });
            if let Some(c) = cut {
                self.status = Status::CutOff(c);
            }
        }
        self.refresh()?;
        Ok(self.status)
    }

    fn ingredients(&self) -> [f32; ingredients::COUNT] {
        TrackProgress::ingredients(self.progress.as_ref(), self.finished_now)
    }
}

/// A scripted driver: steers at the zone centre ~20 m ahead and brakes when
/// the road ahead bends faster than the grip allows. A baseline (what a
/// simple controller achieves on a track) and a test driver.
#[derive(Debug, Clone, Copy)]
pub struct Autopilot {
    /// Index in the float vector of the car-frame velocity block.
    vel: usize,
    /// Index of the first zone centre.
    zones: usize,
    n_zones: usize,
}

impl Autopilot {
    /// An autopilot reading floats laid out for `cfg`.
    pub fn new(cfg: &Config) -> Self {
        let mut at = 0;
        let (mut vel, mut zones) = (0, 0);
        for (name, len) in rulka_config::float_layout(cfg) {
            match name {
                "velocity" => vel = at,
                "zone_centers" => zones = at,
                _ => {}
            }
            at += len;
        }
        Self { vel, zones, n_zones: cfg.environment.n_zone_centers_in_inputs as usize }
    }

    /// The action (0..12) for a float vector.
    pub fn act(&self, floats: &[f32]) -> u8 {
        let vf = f64::from(floats[self.vel + 2]);
        let zone = |i: usize| {
            let i = i.min(self.n_zones.saturating_sub(1));
            (f64::from(floats[self.zones + 3 * i]), f64::from(floats[self.zones + 3 * i + 2]))
        };
        // Aim point: between the zone centres 10 and 20 m ahead.
        let ((r1, f1), (r2, f2)) = (zone(1), zone(2));
        let (ar, af) = (0.5 * (r1 + r2), 0.5 * (f1 + f2));
        let bearing = ar.atan2(af.max(0.1)); // positive = to the right
                                             // Sharpest bend in the next few zones: heading change per metre.
        let mut curvature: f64 = 0.0;
        for i in 0..4.min(self.n_zones.saturating_sub(2)) {
            let (r0, f0) = zone(i);
            let (r1, f1) = zone(i + 1);
            let (r2, f2) = zone(i + 2);
            let h1 = (r1 - r0).atan2(f1 - f0);
            let h2 = (r2 - r1).atan2(f2 - f1);
            let mut dh = (h2 - h1).abs();
            if dh > std::f64::consts::PI {
                dh = 2.0 * std::f64::consts::PI - dh;
            }
            curvature = curvature.max(dh / 10.0);
        }
        let safe = (GRIP * 0.9 / curvature.max(1e-3)).sqrt().min(TOP_SPEED);
        let (gas, brake) = if vf > safe + 2.0 { (false, true) } else { (vf < safe, false) };
        let (left, right) = if bearing > 0.04 {
            (false, true)
        } else if bearing < -0.04 {
            (true, false)
        } else {
            (false, false)
        };
        let keys = [gas, brake, left, right];
        ACTION_KEYS.iter().position(|k| *k == keys).unwrap_or(0) as u8
    }
}

/// A top-down picture of a whole track (RGB PNG, the longer side `size`
/// pixels) with a driven path drawn over it in red (start of the path dark,
/// end bright).
pub fn overview_png(track: &Track, path: &[[f64; 2]], size: u32) -> Vec<u8> {
    let (lo, hi) = track.bounds();
    let span = (hi[0] - lo[0]).max(hi[1] - lo[1]);
    let mpp = span / f64::from(size.max(16));
    let w = ((hi[0] - lo[0]) / mpp).ceil() as usize;
    let h = ((hi[1] - lo[1]) / mpp).ceil() as usize;
    let mut rgb = vec![0u8; w * h * 3];
    let lut = [GREY_OUTSIDE, GREY_ROAD, GREY_EDGE, GREY_LINE_DARK, GREY_LINE_LIGHT];
    for row in 0..h {
        let y = hi[1] - (row as f64 + 0.5) * mpp; // north up
        for col in 0..w {
            let x = lo[0] + (col as f64 + 0.5) * mpp;
            let g = lut[track.cell_at(x, y) as usize];
            let i = 3 * (row * w + col);
            rgb[i..i + 3].copy_from_slice(&[g / 2, g, g / 2]);
        }
    }
    let n = path.len().max(1);
    for (k, p) in path.iter().enumerate() {
        let col = ((p[0] - lo[0]) / mpp) as isize;
        let row = ((hi[1] - p[1]) / mpp) as isize;
        let shade = (120 + 135 * k / n) as u8;
        for (dc, dr) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let (c, r) = (col + dc, row + dr);
            if c >= 0 && r >= 0 && (c as usize) < w && (r as usize) < h {
                let i = 3 * (r as usize * w + c as usize);
                rgb[i..i + 3].copy_from_slice(&[shade, 20, 20]);
            }
        }
    }
    crate::png::encode_png(w as u32, h as u32, 3, &rgb)
}
