//! A planner for the simulator's limit: a beam search over the policy's
//! own decisions (the 12 actions, each held for `engine_steps` engine
//! steps) from a track's start state, exact because the simulator is
//! deterministic and its state is saved and restored whole
//! ([`Sim::state`], [`Sim::set_state`]).
//!
//! Every state of a layer is at the same race time (one decision per
//! layer), so ranking a layer by progress along the centreline (plus
//! `speed_weight_s` seconds of its speed) ranks by how far a drive got in
//! the same time and how fast it goes on; the first layer in which a state
//! crosses the finish holds the fastest finish the beam found. States
//! closer than a grid cell in position, speed and heading are merged (the
//! farthest kept), so the beam holds distinct drives rather than copies.
//!
//! ```
//! use rulka_env::{plan, replay, PlanSettings, Sim, SimParams};
//! let cfg = rulka_config::Config::from_yaml_str("environment: {sim: {track: easy}}", "doc").unwrap();
//! let mut sim = Sim::new(SimParams::from_config(&cfg));
//! let p = plan(&mut sim, 3, &PlanSettings { beam: 16, ..PlanSettings::default() }).unwrap();
//! let t = p.race_time_ms.expect("a beam of 16 finishes an easy track");
//! // The drive replays to the same time.
//! assert_eq!(replay(&mut sim, 3, &p.actions).unwrap(), Some(t));
//! ```

use std::collections::HashSet;

use rulka_config::ACTION_KEYS;

use crate::{EnvError, Sim, SimState};

/// How hard the planner searches.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSettings {
    /// States kept per decision.
    pub beam: usize,
    /// Race time after which a track counts as not finished, ms.
    pub max_race_ms: u64,
    /// Merge grid: position (m), speed (m/s), heading (rad).
    pub cell: (f64, f64, f64),
    /// Seconds of the car's speed added to its progress when a layer is
    /// ranked (0: progress alone; 0.6 by default, the best of 0.1–2 on six
    /// hard tracks: docs/learning.md).
    pub speed_weight_s: f64,
}

impl Default for PlanSettings {
    fn default() -> Self {
        Self { beam: 256, max_race_ms: 120_000, cell: (0.25, 0.25, 0.02), speed_weight_s: 0.6 }
    }
}

/// What the planner found.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// One action index per decision, from the start.
    pub actions: Vec<u8>,
    /// The race time of the drive, ms; `None` when no state of the beam
    /// finished within `max_race_ms` (`actions` is then the farthest drive).
    pub race_time_ms: Option<u64>,
    /// How far the drive got, m.
    pub progress_m: f64,
    /// Engine steps simulated (the search's effort).
    pub engine_steps: u64,
}

/// The fastest drive of track `seed` that a beam of `settings.beam`
/// states finds (see the module docs).
pub fn plan(sim: &mut Sim, seed: u64, settings: &PlanSettings) -> Result<Plan, EnvError> {
    if settings.beam == 0 {
        return Err(EnvError::State("plan: a beam of 0 states searches nothing".into()));
    }
    sim.load(seed)?;
    let start = sim.state().ok_or_else(|| EnvError::State("plan: no track loaded".into()))?;
    let steps = sim.params().engine_steps;
    // Decisions as a tree: (parent, action) per node; node 0 is the start.
    let mut nodes: Vec<(usize, u8)> = vec![(0, 0)];
    let mut layer: Vec<(SimState, usize)> = vec![(start, 0)];
    let mut ticks = 0u64;
    let path = |nodes: &[(usize, u8)], mut n: usize| {
        let mut a = Vec::new();
        while n != 0 {
            a.push(nodes[n].1);
            n = nodes[n].0;
        }
        a.reverse();
        a
    };
    loop {
        let mut children: Vec<(SimState, usize)> =
            Vec::with_capacity(layer.len() * ACTION_KEYS.len());
        let mut best_finish: Option<(u64, usize)> = None;
        for (state, node) in &layer {
            for (a, keys) in ACTION_KEYS.iter().enumerate() {
                sim.set_state(state)?;
                let mut finished = false;
                for _ in 0..steps {
                    ticks += 1;
                    if sim.tick(*keys)? {
                        finished = true;
                        break;
                    }
                }
                nodes.push((*node, a as u8));
                let id = nodes.len() - 1;
                if finished {
                    let t = sim.time_ms();
                    if best_finish.is_none_or(|(b, _)| t < b) {
                        best_finish = Some((t, id));
                    }
                    continue;
                }
                let next =
                    sim.state().ok_or_else(|| EnvError::State("plan: lost the track".into()))?;
                children.push((next, id));
            }
        }
        if let Some((t, id)) = best_finish {
            let actions = path(&nodes, id);
            let progress_m = sim.track().map_or(f64::NAN, |t| t.length());
            return Ok(Plan { actions, race_time_ms: Some(t), progress_m, engine_steps: ticks });
        }
        let rank = |st: &SimState| st.s + settings.speed_weight_s * speed(st);
        children.sort_by(|a, b| {
            rank(&b.0).total_cmp(&rank(&a.0)).then_with(|| speed(&b.0).total_cmp(&speed(&a.0)))
        });
        let mut seen = HashSet::new();
        layer = children
            .into_iter()
            .filter(|(st, _)| seen.insert(cell_of(st, settings.cell)))
            .take(settings.beam)
            .collect();
        let time = layer.first().map_or(u64::MAX, |(st, _)| st.time_ms);
        if layer.is_empty() || time >= settings.max_race_ms {
            let (progress_m, actions) =
                layer.first().map_or((0.0, Vec::new()), |(st, n)| (st.s, path(&nodes, *n)));
            return Ok(Plan { actions, race_time_ms: None, progress_m, engine_steps: ticks });
        }
    }
}

/// Drives `actions` from track `seed`'s start, each for the decision's
/// engine steps: the race time when the drive crosses the finish, else
/// `None`. Independent of the search: how a plan is checked.
pub fn replay(sim: &mut Sim, seed: u64, actions: &[u8]) -> Result<Option<u64>, EnvError> {
    sim.load(seed)?;
    let steps = sim.params().engine_steps;
    for &a in actions {
        let keys = *ACTION_KEYS
            .get(usize::from(a))
            .ok_or_else(|| EnvError::State(format!("replay: action {a} is not one of the 12")))?;
        for _ in 0..steps {
            if sim.tick(keys)? {
                return Ok(Some(sim.time_ms()));
            }
        }
    }
    Ok(None)
}

fn speed(st: &SimState) -> f64 {
    st.car.vel[0].hypot(st.car.vel[1])
}

fn cell_of(st: &SimState, (dx, dv, dh): (f64, f64, f64)) -> (i64, i64, i64, i64) {
    let q = |x: f64, d: f64| (x / d).round() as i64;
    (
        q(st.car.pos[0], dx),
        q(st.car.pos[1], dx),
        q(speed(st), dv),
        q(st.car.heading.rem_euclid(std::f64::consts::TAU), dh),
    )
}
