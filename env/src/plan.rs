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
    beam_search(sim, seed, settings, None)
}

/// [`plan`] with an elite: `elite`'s state after each of its decisions is
/// put into that layer of the beam (in place of the last state kept when the
/// layer is full), so the drive found is never slower than `elite` when
/// `elite` finishes.
pub fn plan_beside(
    sim: &mut Sim,
    seed: u64,
    settings: &PlanSettings,
    elite: &[u8],
) -> Result<Plan, EnvError> {
    beam_search(sim, seed, settings, Some(elite))
}

fn beam_search(
    sim: &mut Sim,
    seed: u64,
    settings: &PlanSettings,
    elite: Option<&[u8]>,
) -> Result<Plan, EnvError> {
    if settings.beam == 0 {
        return Err(EnvError::State("plan: a beam of 0 states searches nothing".into()));
    }
    sim.load(seed)?;
    let start = sim.state().ok_or_else(|| EnvError::State("plan: no track loaded".into()))?;
    let steps = sim.params().engine_steps;
    // Decisions as a tree: (parent, action) per node; node 0 is the start.
    let mut nodes: Vec<(usize, u8)> = vec![(0, 0)];
    let mut layer: Vec<(SimState, usize)> = vec![(start.clone(), 0)];
    let mut ticks = 0u64;
    // The elite's own state and node, one decision ahead per layer.
    let mut elite_at: Option<(SimState, usize)> = elite.map(|_| (start.clone(), 0));
    let mut depth = 0usize;
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
                let finished = decide(sim, state, *keys, steps, &mut ticks)?;
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
        if let (Some(e), Some((st, node))) = (elite, elite_at.take()) {
            if let Some(&a) = e.get(depth) {
                let keys = *ACTION_KEYS.get(usize::from(a)).ok_or_else(|| {
                    EnvError::State(format!("plan: elite action {a} is not one of the 12"))
                })?;
                let finished = decide(sim, &st, keys, steps, &mut ticks)?;
                // A finishing elite was found by this layer's expansion
                // already (its parent is in the layer); otherwise it joins.
                if !finished {
                    nodes.push((node, a));
                    let next = sim
                        .state()
                        .ok_or_else(|| EnvError::State("plan: lost the track".into()))?;
                    let id = nodes.len() - 1;
                    if layer.len() == settings.beam {
                        layer.pop();
                    }
                    layer.push((next.clone(), id));
                    elite_at = Some((next, id));
                }
            }
        }
        depth += 1;
        let time = layer.first().map_or(u64::MAX, |(st, _)| st.time_ms);
        if layer.is_empty() || time >= settings.max_race_ms {
            let (progress_m, actions) =
                layer.first().map_or((0.0, Vec::new()), |(st, n)| (st.s, path(&nodes, *n)));
            return Ok(Plan { actions, race_time_ms: None, progress_m, engine_steps: ticks });
        }
    }
}

/// How far behind the drive it would replace a trial of [`refine`] may
/// fall, m, before it is given up.
const BEHIND_M: f64 = 5.0;

/// What [`refine`] made of a drive.
#[derive(Debug, Clone, PartialEq)]
pub struct Refined {
    /// The drive, one action index per decision.
    pub actions: Vec<u8>,
    /// Its race time, ms.
    pub race_time_ms: u64,
    /// Single-decision changes kept.
    pub changes: usize,
    /// Passes over the drive (the last one changed nothing, unless the
    /// pass limit ended it).
    pub passes: usize,
    /// Engine steps simulated.
    pub engine_steps: u64,
}

/// Local refinement of a finishing drive: every decision in turn, every
/// other action in its place with the rest of the drive as it was; a change
/// is kept when the drive then finishes sooner (strictly). Passes over the
/// drive repeat until one changes nothing, at most `max_passes`. An error
/// when `actions` does not finish track `seed`.
pub fn refine(
    sim: &mut Sim,
    seed: u64,
    actions: &[u8],
    max_passes: usize,
) -> Result<Refined, EnvError> {
    let steps = sim.params().engine_steps;
    let keys_of = |a: u8| {
        ACTION_KEYS
            .get(usize::from(a))
            .copied()
            .ok_or_else(|| EnvError::State(format!("refine: action {a} is not one of the 12")))
    };
    let mut ticks = 0u64;
    // Drives `acts` from the sim's current state; the race time of the
    // finish and the decisions it took, or None once the clock reaches
    // `give_up` ms without a finish, or once the car is `BEHIND_M` behind
    // `ahead[j]`, the progress of the drive to beat before its decision j.
    let mut drive =
        |sim: &mut Sim, acts: &[u8], give_up: u64, ahead: &[f64]| -> Result<_, EnvError> {
            for (j, &a) in acts.iter().enumerate() {
                if ahead.get(j).is_some_and(|&s| sim.progress_m() < s - BEHIND_M) {
                    return Ok(None);
                }
                let keys = keys_of(a)?;
                for _ in 0..steps {
                    ticks += 1;
                    if sim.tick(keys)? {
                        return Ok(Some((sim.time_ms(), j + 1)));
                    }
                    if sim.time_ms() >= give_up {
                        return Ok(None);
                    }
                }
            }
            Ok(None)
        };
    sim.load(seed)?;
    let mut acts = actions.to_vec();
    let Some((mut best, n)) = drive(sim, &acts, u64::MAX, &[])? else {
        return Err(EnvError::State(format!(
            "refine: the drive of {} decisions does not finish track {seed}",
            actions.len()
        )));
    };
    acts.truncate(n);
    // The state before each decision of `acts`.
    let states_of = |sim: &mut Sim, acts: &[u8]| -> Result<Vec<SimState>, EnvError> {
        sim.load(seed)?;
        let mut out = Vec::with_capacity(acts.len());
        for &a in acts {
            out.push(sim.state().ok_or_else(|| EnvError::State("refine: no track".into()))?);
            let keys = keys_of(a)?;
            for _ in 0..steps {
                sim.tick(keys)?;
            }
        }
        Ok(out)
    };
    let mut states = states_of(sim, &acts)?;
    let (mut changes, mut passes) = (0, 0);
    while passes < max_passes {
        passes += 1;
        let mut changed = false;
        let mut i = 0;
        while i < acts.len() {
            for a in 0..ACTION_KEYS.len() as u8 {
                if a == acts[i] {
                    continue;
                }
                sim.set_state(&states[i])?;
                let mut trial = acts.clone();
                trial[i] = a;
                let ahead: Vec<f64> = states[i..].iter().map(|st| st.s).collect();
                if let Some((t, n)) =
                    drive(sim, &trial[i..], best, &ahead)?.filter(|&(t, _)| t < best)
                {
                    trial.truncate(i + n);
                    acts = trial;
                    best = t;
                    changes += 1;
                    changed = true;
                    states = states_of(sim, &acts)?;
                }
            }
            i += 1;
        }
        if !changed {
            break;
        }
    }
    Ok(Refined { actions: acts, race_time_ms: best, changes, passes, engine_steps: ticks })
}

/// How [`search`] spends its effort.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchSettings {
    /// The first rung's beam; each rung doubles it.
    pub first_beam: usize,
    /// The last rung's beam at most.
    pub max_beam: usize,
    /// The search ends when a doubling takes less than this share of the
    /// best time off (0.002: 0.2 %; 0 climbs to `max_beam`), or at `max_beam`.
    pub converged: f64,
    /// Refinement passes after each rung ([`refine`]).
    pub refine_passes: usize,
    /// Everything else of the beam ([`PlanSettings`]; its `beam` unused).
    pub plan: PlanSettings,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            first_beam: 256,
            max_beam: 4096,
            converged: 0.002,
            refine_passes: 4,
            plan: PlanSettings::default(),
        }
    }
}

/// One rung of a [`search`]: a beam seeded by the best drive so far, then
/// that beam's drive refined.
#[derive(Debug, Clone, PartialEq)]
pub struct Rung {
    /// States per layer.
    pub beam: usize,
    /// The beam's own best time, ms (never slower than the rung before's).
    pub beam_ms: Option<u64>,
    /// After refinement, ms.
    pub refined_ms: Option<u64>,
    /// Engine steps of the rung (beam and refinement).
    pub engine_steps: u64,
}

/// The best drive of a [`search`] and how it got there.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// The fastest drive found.
    pub actions: Vec<u8>,
    /// Its race time, ms; `None` when no rung finished.
    pub race_time_ms: Option<u64>,
    /// The rungs, in order.
    pub rungs: Vec<Rung>,
    /// Whether the last doubling gained less than `converged`.
    pub converged: bool,
}

impl Search {
    /// Engine steps of every rung.
    pub fn engine_steps(&self) -> u64 {
        self.rungs.iter().map(|r| r.engine_steps).sum()
    }
}

/// The fastest drive of track `seed` by a ladder of beams: each rung
/// doubles the beam and holds the best drive so far as its elite
/// ([`plan_beside`]), then [`refine`]s what it found; the ladder stops
/// when a doubling gains less than `converged` of the time, or after the
/// rung of `max_beam`.
pub fn search(sim: &mut Sim, seed: u64, settings: &SearchSettings) -> Result<Search, EnvError> {
    if settings.first_beam == 0 || settings.max_beam < settings.first_beam {
        return Err(EnvError::State(format!(
            "search: beams from {} to {} hold no rung",
            settings.first_beam, settings.max_beam
        )));
    }
    let mut best: Option<(u64, Vec<u8>)> = None;
    let mut rungs = Vec::new();
    let mut beam = settings.first_beam;
    let mut converged = false;
    loop {
        let ps = PlanSettings { beam, ..settings.plan.clone() };
        let p = match &best {
            Some((_, elite)) => plan_beside(sim, seed, &ps, elite)?,
            None => plan(sim, seed, &ps)?,
        };
        let mut rung =
            Rung { beam, beam_ms: p.race_time_ms, refined_ms: None, engine_steps: p.engine_steps };
        let before = best.as_ref().map(|b| b.0);
        if let Some(t) = p.race_time_ms {
            let r = refine(sim, seed, &p.actions, settings.refine_passes)?;
            rung.engine_steps += r.engine_steps;
            rung.refined_ms = Some(r.race_time_ms);
            if best.as_ref().is_none_or(|b| r.race_time_ms.min(t) < b.0) {
                best = Some((r.race_time_ms, r.actions));
            }
        }
        rungs.push(rung);
        if let (Some(b), Some((now, _))) = (before, &best) {
            if gained_less(b, *now, settings.converged) {
                converged = true;
                break;
            }
        }
        if beam >= settings.max_beam {
            break;
        }
        beam = (beam * 2).min(settings.max_beam);
    }
    Ok(match best {
        Some((t, actions)) => Search { actions, race_time_ms: Some(t), rungs, converged },
        None => Search { actions: Vec::new(), race_time_ms: None, rungs, converged },
    })
}

/// One decision of the beam: `keys` held for `steps` engine steps from
/// `state` (counted in `ticks`); whether the car crossed the finish.
fn decide(
    sim: &mut Sim,
    state: &SimState,
    keys: [bool; 4],
    steps: u32,
    ticks: &mut u64,
) -> Result<bool, EnvError> {
    sim.set_state(state)?;
    for _ in 0..steps {
        *ticks += 1;
        if sim.tick(keys)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether a doubling that took the best time from `before` to `now` ms
/// gained less than `share` of it (strictly: a gain of exactly the share,
/// or of nothing when the share is 0, is not less).
fn gained_less(before: u64, now: u64, share: f64) -> bool {
    (before.saturating_sub(now) as f64) < share * before as f64
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

#[cfg(test)]
mod tests {
    /// The ladder's stop rule at its edges: a gain of nothing never stops
    /// a share of 0; a gain of exactly the share does not stop it; a gain
    /// one millisecond under it does; more than the share does not.
    #[test]
    fn a_doubling_stops_the_ladder_only_below_its_share() {
        use super::gained_less;
        // Shares a binary fraction holds exactly: a quarter of 40 s is 10 s.
        assert!(!gained_less(40_000, 40_000, 0.0));
        assert!(gained_less(40_000, 40_000, 0.25));
        assert!(!gained_less(40_000, 30_000, 0.25), "exactly the share");
        assert!(gained_less(40_000, 30_001, 0.25));
        assert!(!gained_less(40_000, 29_000, 0.25));
    }
}
