//! Per-step rewards from a rollout's ingredients, as the Python original
//! (`reward_vectorized.py`, `rollout_rewards.py`): constant per ms, metres
//! advanced, final-speed term, engineered terms, per-decision credit shift
//! (mass-preserving), and potential folding `r'_t = r_t + γΦ(s_{t+1}) − Φ(s_t)`
//! with `Φ` of the terminal successor taken as 0.
//!
//! Frames are indexed like the original's buffer: slot `k` holds the outcome
//! of entering state `k` (from action `a_{k−1}`). Floats are the raw
//! (unnormalised) input vectors in the layout of [`rulka_config::float_layout`].

use rulka_config::Config;

/// The discount the potential-based shaping is folded with at `frames`, with
/// the original's precedence (`policy_rollout_batch.scheduled_rollout_shaping_gamma`):
/// `training.policy_rollout_gamma_schedule`, then `ppo.gamma_schedule`, then
/// `training.policy_rollout_gamma`, then `ppo.gamma`. A config that schedules
/// only PPO's γ (as `configs/ppo.yaml`, like the original's preset) therefore
/// folds with the same γ its GAE uses at that frame, so the potential terms
/// telescope.
pub fn shaping_gamma(cfg: &Config, frames: u64) -> f64 {
    let (t, p) = (&cfg.training, &cfg.ppo);
    let speed = t.global_schedule_speed;
    match (&t.policy_rollout_gamma_schedule, &p.gamma_schedule) {
        (Some(s), _) | (None, Some(s)) => s.scaled(speed).linear_at(frames as f64),
        (None, None) => t.policy_rollout_gamma.unwrap_or(p.gamma),
    }
}

/// Scheduled coefficients of the engineered terms at the current frame count.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineeredCoefs {
    /// Speedslide coefficient.
    pub speedslide: f64,
    /// Neoslide coefficient.
    pub neoslide: f64,
    /// Kamikaze coefficient.
    pub kamikaze: f64,
    /// Close-to-checkpoint coefficient.
    pub close_to_vcp: f64,
}

impl EngineeredCoefs {
    /// The coefficients `cfg`'s schedules give at `frames` (scaled by
    /// `training.global_schedule_speed`).
    pub fn at(cfg: &Config, frames: u64) -> Self {
        let (r, speed) = (&cfg.rewards, cfg.training.global_schedule_speed);
        let at = |s: &rulka_config::Schedule| s.scaled(speed).linear_at(frames as f64);
        Self {
            speedslide: at(&r.engineered_speedslide_reward_schedule),
            neoslide: at(&r.engineered_neoslide_reward_schedule),
            kamikaze: at(&r.engineered_kamikaze_reward_schedule),
            close_to_vcp: at(&r.engineered_close_to_vcp_reward_schedule),
        }
    }
}

/// One rollout's ingredients.
#[derive(Debug, Clone, Copy)]
pub struct RolloutIngredients<'a> {
    /// `n × F` raw float vectors, row-major.
    pub floats: &'a [f32],
    /// Cumulative metres advanced along the centreline, `n`.
    pub meters: &'a [f32],
    /// `n × heads` actions.
    pub actions: &'a [i32],
    /// Race time in ms when the race was finished, `None` when cut off.
    pub race_time_ms: Option<f64>,
}

struct Layout {
    f: usize,
    wheels: (usize, usize),
    vel: usize,
    wp0: usize,
    wp1_end: usize,
}

fn layout(cfg: &Config) -> Layout {
    let e = &cfg.environment;
    let gear_start = 1 + 4 * e.n_prev_actions_in_inputs as usize;
    let gear_len = 16 + 4 * e.n_contact_material_physics_behavior_types as usize;
    let vel = gear_start + gear_len + 3;
    let wp0 = vel + 3 + 3;
    Layout {
        f: cfg.float_input_dim(),
        wheels: (gear_start + 4, gear_start + 8),
        vel,
        wp0,
        wp1_end: wp0 + 6,
    }
}

/// Milliseconds per decision: `10·N` for an N-offset block, else `ms_per_action`.
pub fn ms_per_step(cfg: &Config) -> f64 {
    let n = cfg.n_action_heads();
    if n > 1 {
        (cfg.environment.ms_per_tm_engine_step as usize * n) as f64
    } else {
        f64::from(cfg.ms_per_action())
    }
}

/// The original's speedslide quality on tarmac from lateral and forward speed (m/s).
pub fn speedslide_quality(speed_x: f64, speed_z: f64) -> f64 {
    const XP: [f64; 6] = [0.0, 100.0, 200.0, 300.0, 400.0, 500.0];
    const FP: [f64; 6] = [80.0, 80.0, 75.0, 67.0, 60.0, 55.0];
    let kmh = speed_z * 3.6;
    let max_side = if kmh <= XP[0] {
        FP[0]
    } else if kmh >= XP[5] {
        FP[5]
    } else {
        let i = XP.iter().position(|&x| x > kmh).unwrap_or(5) - 1;
        FP[i] + (FP[i + 1] - FP[i]) * (kmh - XP[i]) / (XP[i + 1] - XP[i])
    };
    let side = 20.0 * speed_x.abs();
    if side > max_side {
        (side - max_side) / max_side
    } else {
        0.0
    }
}

fn norm3(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt()
}

/// `(rewards_into, potentials, dense_per_decision)`, each of length `n`:
/// the original's buffer-indexed rewards, `Φ(s_k)`, and the per-decision
/// rearrangement (meter, speed and middle-constant terms moved from slot `k`
/// to decision `k−1`; engineered terms stay) whose sum equals `Σ rewards_into`.
pub fn dense_rewards(
    cfg: &Config,
    r: RolloutIngredients<'_>,
    eng: EngineeredCoefs,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let l = layout(cfg);
    let n = r.meters.len();
    let heads = r.actions.len() / n.max(1);
    let rw = &cfg.rewards;
    let ms = ms_per_step(cfg);
    let row = |k: usize| &r.floats[k * l.f..(k + 1) * l.f];
    let c = rw.constant_reward_per_ms;
    let per_m = rw.reward_per_m_advanced_along_centerline;
    let final_speed = per_m * rw.final_speed_reward_as_if_duration_s;
    let (mut meter, mut speed, mut mid, mut last, mut eng_t) =
        (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for (k, m) in meter.iter_mut().enumerate().skip(1) {
        *m = f64::from(r.meters[k] - r.meters[k - 1]) * per_m;
    }
    if n >= 3 {
        for m in mid.iter_mut().take(n - 1).skip(1) {
            *m = c * ms;
        }
    }
    if n >= 1 {
        last[n - 1] = match r.race_time_ms {
            Some(t) => c * (t - (n as f64 - 2.0) * ms),
            None if rw.unfinished_runs_pay_until_cutoff => {
                let cutoff = f64::from(
                    cfg.environment.cutoff_rollout_if_race_not_finished_within_duration_ms,
                );
                c * (cutoff - (n as f64 - 2.0) * ms).max(ms)
            }
            None => c * ms,
        };
    }
    for k in 1..n.saturating_sub(1) {
        let (cur, prev) = (row(k), row(k - 1));
        let v = &cur[l.vel..l.vel + 3];
        if final_speed != 0.0 && v[2] > 0.0 {
            speed[k] = (norm3(v) - norm3(&prev[l.vel..l.vel + 3])) * final_speed;
        }
        let wheels = &cur[l.wheels.0..l.wheels.1];
        let mut e = 0.0;
        if eng.speedslide != 0.0 && wheels.iter().all(|&w| w > 0.0) {
            let q = speedslide_quality(f64::from(v[0]), f64::from(v[2]));
            e += eng.speedslide * (1.0 - (q - 1.0).abs()).max(0.0);
        }
        if eng.neoslide != 0.0 && v[0].abs() >= 2.0 {
            e += eng.neoslide;
        }
        if eng.kamikaze != 0.0 {
            let gas_only = r.actions[k * heads..(k + 1) * heads].iter().all(|&a| a <= 2);
            let airborne = wheels.iter().filter(|&&w| w > 0.0).count() <= 1;
            if gas_only || airborne {
                e += eng.kamikaze;
            }
        }
        if eng.close_to_vcp != 0.0 {
            let d = norm3(&cur[l.wp0..l.wp0 + 3]).clamp(
                rw.engineered_reward_min_dist_to_cur_vcp,
                rw.engineered_reward_max_dist_to_cur_vcp,
            );
            e += eng.close_to_vcp * d;
        }
        eng_t[k] = e;
    }
    let potentials: Vec<f64> = (0..n)
        .map(|k| {
            let s = row(k);
            let (w0, w1) = (&s[l.wp0..l.wp0 + 3], &s[l.wp0 + 3..l.wp1_end]);
            let d: Vec<f64> = (0..3).map(|i| f64::from(w1[i]) - f64::from(w0[i])).collect();
            let dn = (d.iter().map(|x| x * x).sum::<f64>()).sqrt() + 1e-8;
            let dist = norm3(w0)
                .clamp(rw.shaped_reward_min_dist_to_cur_vcp, rw.shaped_reward_max_dist_to_cur_vcp);
            rw.shaped_reward_dist_to_cur_vcp * dist
                + rw.shaped_reward_point_to_vcp_ahead * (d[2] / dn - 1.0)
        })
        .collect();
    let into: Vec<f64> =
        (0..n).map(|k| meter[k] + speed[k] + mid[k] + last[k] + eng_t[k]).collect();
    let mut dense = vec![0.0; n];
    for k in 0..n.saturating_sub(1) {
        dense[k] = meter[k + 1] + speed[k + 1] + mid[k + 1] + eng_t[k];
    }
    if n >= 1 {
        dense[n - 1] = into[n - 1] - meter[n - 1] - speed[n - 1];
    }
    (into, potentials, dense)
}

/// Folds the potential into per-decision rewards: `r'_t = r_t + γΦ_{t+1} − Φ_t`,
/// and `r'_{T−1} = r_{T−1} − Φ_{T−1}` (terminal successor).
pub fn fold_potential(dense: &[f64], potentials: &[f64], gamma: f64) -> Vec<f64> {
    let n = dense.len();
    (0..n)
        .map(|t| dense[t] - potentials[t] + if t + 1 < n { gamma * potentials[t + 1] } else { 0.0 })
        .collect()
}

/// Per-decision rewards and dones of one rollout (`dones = [0, …, 0, 1]`):
/// what PPO's GAE and GRPO's returns consume. Rollouts shorter than 2 steps
/// give zeros, as the original.
pub fn rollout_rewards(
    cfg: &Config,
    r: RolloutIngredients<'_>,
    eng: EngineeredCoefs,
    gamma: f64,
) -> (Vec<f32>, Vec<f32>) {
    let n = r.meters.len();
    if n < 2 {
        return (vec![0.0; n], vec![0.0; n]);
    }
    let (_, potentials, dense) = dense_rewards(cfg, r, eng);
    let rewards =
        fold_potential(&dense, &potentials, gamma).into_iter().map(|x| x as f32).collect();
    let mut dones = vec![0.0; n];
    dones[n - 1] = 1.0;
    (rewards, dones)
}
