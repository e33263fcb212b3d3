//! The original's float vector built from a game state, exactly as its
//! `game_instance_manager.rollout` / `float_inputs.state_dict_from_sim_state`
//! compute it. The game over TMInterface and the built-in simulator (which
//! describes its car as a [`GameState`]) both go through [`FloatBuilder`], so
//! the network sees the same inputs from either.
//!
//! With `O = Rᵀ` (R the state's rotation; its columns are the car's axes)
//! and `p` the car's position:
//!
//! | slice | value |
//! |---|---|
//! | temporal | 0 (the RL rollout's value) |
//! | previous actions | `[accel, brake, left, right]` of the last `n_prev` actions, oldest first; before the first action, the forward action |
//! | gear and wheels | is_sliding ×4, has_ground_contact ×4, damper_absorb ×4, gearbox_state, gear, actual_rpm, counter_gearbox_state (1 + its previous value while gearbox_state ≠ 0, else 0), one-hot of each wheel's contact material's physics group ([`physics_group`]) |
//! | angular velocity, velocity | `O·ω`, `O·v` |
//! | y_map | `O·[0, 1, 0]` |
//! | zone centres | `O·(c − p)` for every `one_every_n`-th centre from the current zone |
//! | margin | [`ZoneMap::margin`] of the distance along the track |
//! | is_freewheeling | 0/1 |
//!
//! [`ProgressTracker`] is the per-rollout history the original keeps beside it: the
//! zone index (moved only above the deck height), the furthest zone and when
//! it was reached (the no-progress cut-off), the previous actions, the last
//! gearbox counter.

use std::collections::VecDeque;

use rulka_config::{Config, ACTION_KEYS};

use crate::tmi::state::GameState;
use crate::zones::ZoneMap;
use crate::{CutOff, EnvError};

/// The original's contact-material physics groups (`contact_materials.py`:
/// 0 asphalt-like, 1 grass, 2 dirt, 3 turbo, 4 anything else), by material
/// id (`ContactMaterial`: Concrete = 0 … TurboRoulette = 30).
pub const PHYSICS_GROUPS: [u8; 31] =
    [0, 0, 1, 4, 4, 2, 2, 3, 2, 4, 4, 4, 4, 4, 4, 4, 0, 2, 0, 0, 1, 4, 4, 4, 4, 4, 3, 4, 4, 4, 4];

/// Material id of asphalt (group 0), what the simulator's road is.
pub const ASPHALT: i32 = 16;

/// The physics group of a (masked) material id; `None` for an id the table
/// does not know (the original fails on it too).
pub fn physics_group(material: u16) -> Option<u8> {
    PHYSICS_GROUPS.get(usize::from(material)).copied()
}

/// What one observation told about progress.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackProgress {
    /// Zone index after the update.
    pub zone: usize,
    /// Metres along the track since the start line.
    pub meters: f64,
    /// The state's race time, ms.
    pub race_time_ms: i32,
    /// |linear speed|, m/s.
    pub speed: f64,
}

impl TrackProgress {
    /// The reward ingredients ([`rulka_config::ingredients`]) of the last
    /// observation's progress (all zero before the first) and whether the
    /// race was finished by the last step.
    pub fn ingredients(
        last: Option<&TrackProgress>,
        finished: bool,
    ) -> [f32; rulka_config::ingredients::COUNT] {
        use rulka_config::ingredients::{FINISHED, METERS, RACE_TIME_MS, SPEED, ZONE};
        let mut x = [0.0f32; rulka_config::ingredients::COUNT];
        if let Some(p) = last {
            x[METERS] = p.meters as f32;
            x[SPEED] = p.speed as f32;
            x[RACE_TIME_MS] = p.race_time_ms as f32;
            x[ZONE] = p.zone as f32;
        }
        x[FINISHED] = f32::from(u8::from(finished));
        x
    }
}

/// The per-rollout history the float vector and the cut-off need.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressTracker {
    /// Current zone index.
    pub zone: usize,
    /// Furthest zone reached (0 before the first observation, as the original).
    pub furthest: usize,
    /// Race time when the furthest zone was reached, ms.
    pub last_improvement_ms: i64,
    prev_actions: VecDeque<[bool; 4]>,
    n_prev: usize,
    counter_gearbox: Option<f32>,
}

impl ProgressTracker {
    /// The history at the start of a rollout on `map`.
    pub fn new(map: &ZoneMap, n_prev: usize) -> Self {
        Self {
            zone: map.start_index(),
            furthest: 0,
            last_improvement_ms: 0,
            prev_actions: VecDeque::with_capacity(n_prev + 1),
            n_prev,
            counter_gearbox: None,
        }
    }

    /// Records the keys `[accelerate, brake, left, right]` of an action taken.
    pub fn record_keys(&mut self, keys: [bool; 4]) {
        self.prev_actions.push_back(keys);
        while self.prev_actions.len() > self.n_prev {
            self.prev_actions.pop_front();
        }
    }

    /// The original's cut-off rule at a decision at `race_time_ms`, with the
    /// progress known from the previous observations: the race time limit
    /// passed, or no new zone for longer than the no-progress limit (both
    /// strict, as the original's `_time > …`).
    pub fn cut_off(&self, race_time_ms: i64, limit_ms: u64, no_progress_ms: u64) -> Option<CutOff> {
        if race_time_ms > limit_ms as i64 {
            Some(CutOff::TimeLimit)
        } else if race_time_ms > self.last_improvement_ms + no_progress_ms as i64 {
            Some(CutOff::NoProgress)
        } else {
            None
        }
    }
}

/// Builds the float vector of `cfg`'s layout.
#[derive(Debug, Clone)]
pub struct FloatBuilder {
    n_prev: usize,
    n_materials: usize,
    float_dim: usize,
}

fn mat_vec(o: &[[f64; 3]; 3], v: [f64; 3]) -> [f64; 3] {
    [
        o[0][0] * v[0] + o[0][1] * v[1] + o[0][2] * v[2],
        o[1][0] * v[0] + o[1][1] * v[1] + o[1][2] * v[2],
        o[2][0] * v[0] + o[2][1] * v[1] + o[2][2] * v[2],
    ]
}

fn f64x3(v: [f32; 3]) -> [f64; 3] {
    [f64::from(v[0]), f64::from(v[1]), f64::from(v[2])]
}

impl FloatBuilder {
    /// A builder for `cfg`'s float layout.
    pub fn new(cfg: &Config) -> Self {
        let e = &cfg.environment;
        Self {
            n_prev: e.n_prev_actions_in_inputs as usize,
            n_materials: e.n_contact_material_physics_behavior_types as usize,
            float_dim: cfg.float_input_dim(),
        }
    }

    /// Length of the float vector.
    pub fn float_dim(&self) -> usize {
        self.float_dim
    }

    /// Previous actions the vector holds.
    pub fn n_prev(&self) -> usize {
        self.n_prev
    }

    /// Writes the float vector of `st` into `out`, updating `tr` as one
    /// observation of the original does (zone index, furthest zone,
    /// gearbox counter). An unknown contact material is an error naming
    /// the wheel and the id.
    pub fn build(
        &self,
        st: &GameState,
        map: &ZoneMap,
        tr: &mut ProgressTracker,
        out: &mut [f32],
    ) -> Result<TrackProgress, EnvError> {
        if out.len() != self.float_dim {
            return Err(EnvError::State(format!(
                "float buffer has {} slots; the config's float vector has {}",
                out.len(),
                self.float_dim
            )));
        }
        let mut groups = [0u8; 4];
        for (i, w) in st.wheels.iter().enumerate() {
            groups[i] = physics_group(w.material()).ok_or_else(|| {
                EnvError::Game(format!(
                    "wheel {i}: contact material id {} (raw {}) is not one of the game's 31 materials (0..=30)",
                    w.material(),
                    w.contact_material_id
                ))
            })?;
        }
        let counter =
            if st.gearbox_state != 0 { tr.counter_gearbox.map_or(0.0, |c| 1.0 + c) } else { 0.0 };
        tr.counter_gearbox = Some(counter);
        let pos = f64x3(st.position);
        let race_time = st.race_time();
        tr.zone = map.update(tr.zone, pos);
        if tr.zone > tr.furthest {
            tr.furthest = tr.zone;
            tr.last_improvement_ms = i64::from(race_time);
        }
        let meters = map.distance(tr.zone, pos);
        // O = Rᵀ: row i of O is column i of R.
        let r = st.rotation;
        let o: [[f64; 3]; 3] = std::array::from_fn(|i| std::array::from_fn(|j| f64::from(r[j][i])));

        let mut v: Vec<f32> = Vec::with_capacity(self.float_dim);
        v.push(0.0);
        let forward = ACTION_KEYS[0];
        for k in 0..self.n_prev {
            let missing = self.n_prev - tr.prev_actions.len();
            let keys = if k < missing { forward } else { tr.prev_actions[k - missing] };
            v.extend(keys.iter().map(|&x| f32::from(u8::from(x))));
        }
        let b = |x: bool| f32::from(u8::from(x));
        v.extend(st.wheels.iter().map(|w| b(w.is_sliding)));
        v.extend(st.wheels.iter().map(|w| b(w.has_ground_contact)));
        v.extend(st.wheels.iter().map(|w| w.damper_absorb));
        v.extend([st.gearbox_state as f32, st.gear as f32, st.actual_rpm, counter]);
        for g in groups {
            v.extend((0..self.n_materials).map(|m| b(m == usize::from(g))));
        }
        let car = |x: [f64; 3]| mat_vec(&o, x).map(|c| c as f32);
        v.extend(car(f64x3(st.angular_speed)));
        v.extend(car(f64x3(st.linear_speed)));
        v.extend(car([0.0, 1.0, 0.0]));
        for c in map.ahead(tr.zone) {
            v.extend(car([c[0] - pos[0], c[1] - pos[1], c[2] - pos[2]]));
        }
        v.push(map.margin(meters) as f32);
        v.push(b(st.is_freewheeling));
        debug_assert_eq!(v.len(), self.float_dim);
        out.copy_from_slice(&v);
        let s = f64x3(st.linear_speed);
        Ok(TrackProgress {
            zone: tr.zone,
            meters: meters - map.start_distance(),
            race_time_ms: race_time,
            speed: (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt(),
        })
    }
}
