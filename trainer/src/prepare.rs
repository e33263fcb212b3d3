//! The prepare stage: a received trajectory becomes what the learner trains
//! on — its rewards shaped and folded once, at the schedule clock of the
//! batch or group it joins — and a [`Summary`] of what it was, for the
//! journal and the progress line.

use rulka_config::{ingredients, step_flags, Config};
use rulka_learner::{
    rollout_rewards, shaping_gamma, EngineeredCoefs, RolloutIngredients, SavedTrajectory, TrajBatch,
};
use rulka_shm::Trajectory;
use tch::Device;

/// What one received trajectory was.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub collector: u32,
    pub trajectory: u64,
    /// The track (prompt) it drove.
    pub seed: u64,
    /// A greedy (evaluation) run: logged, never trained on.
    pub eval: bool,
    pub steps: usize,
    /// The sum of its rewards as trained on.
    pub ret: f64,
    pub progress_m: f64,
    pub progress_frac: f64,
    pub finished: bool,
    pub race_time_s: Option<f64>,
    /// Learner updates between the weights it was driven with and now.
    pub lag: f64,
}

/// A trajectory ready for the learner: its data with the rewards trained on
/// (`rulka_learner::trajectory_batch` gives the learner's tensors, `to_json_line` the
/// `--save-trajectories` line) and what it was.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub saved: SavedTrajectory,
    pub summary: Summary,
}

/// Whether `t` is a greedy (evaluation) run.
pub(crate) fn is_eval(t: &Trajectory) -> bool {
    t.steps.flags.first().is_some_and(|x| x & step_flags::GREEDY != 0)
}

/// Prepares `t`: scheduled reward coefficients and the shaping γ are taken
/// at `schedule_frames` (the anchor of the batch or group it joins,
/// [`crate::pending::Pending::anchor`]); `policy_version` is the learner's
/// update count now (for the policy lag).
pub(crate) fn prepare(
    cfg: &Config,
    t: Trajectory,
    schedule_frames: u64,
    policy_version: u64,
    start: u32,
) -> Prepared {
    let s = &t.steps;
    let n = s.len();
    let f = cfg.float_input_dim();
    let k = ingredients::COUNT;
    let meters: Vec<f32> = (0..n).map(|i| s.ingredients[i * k + ingredients::METERS]).collect();
    let last_flags = s.flags.last().copied().unwrap_or(0);
    let finished = last_flags & step_flags::FINISHED != 0;
    let race_time_ms =
        finished.then(|| f64::from(s.ingredients[(n - 1) * k + ingredients::RACE_TIME_MS]));
    let (rewards, _) = rollout_rewards(
        cfg,
        RolloutIngredients {
            floats: &s.floats,
            meters: &meters,
            actions: &s.actions,
            race_time_ms,
        },
        EngineeredCoefs::at(cfg, schedule_frames),
        shaping_gamma(cfg, schedule_frames),
    );
    let progress_m = f64::from(meters.last().copied().unwrap_or(0.0));
    // Margin to finish (the float vector's second-to-last slot) at the end.
    let margin = f64::from(s.floats[n * f - 2]);
    let summary = Summary {
        collector: t.collector,
        trajectory: t.trajectory,
        seed: t.group,
        eval: is_eval(&t),
        steps: n,
        ret: rewards.iter().map(|&r| f64::from(r)).sum(),
        progress_m,
        progress_frac: if finished { 1.0 } else { progress_m / (progress_m + margin).max(1e-9) },
        finished,
        race_time_s: race_time_ms.map(|m| m / 1000.0),
        lag: policy_version.saturating_sub(t.policy_versions.0) as f64,
    };
    let steps = t.steps;
    let id = rulka_shm::TrajectoryId::unpack(t.collector, t.trajectory);
    let saved = SavedTrajectory {
        id: Some(rulka_learner::SavedId {
            start,
            collector: id.collector,
            incarnation: id.incarnation,
            sequence: id.sequence,
        }),
        group: t.group,
        // Float-only networks: the chunk's 1-byte placeholder frames are not data.
        frames: if cfg.nn.no_image { Vec::new() } else { steps.frames },
        floats: steps.floats,
        actions: steps.actions,
        rewards,
        log_probs: steps.log_probs,
        values: steps.values,
    };
    Prepared { saved, summary }
}

/// The trajectory's tensors on the learner's device.
pub(crate) fn on_device(t: TrajBatch, device: Device) -> TrajBatch {
    if device == Device::Cpu {
        return t;
    }
    TrajBatch {
        image: t.image.to_device(device),
        floats: t.floats.to_device(device),
        actions: t.actions.to_device(device),
        old_logp: t.old_logp.to_device(device),
        old_value: t.old_value.to_device(device),
        rewards: t.rewards,
        group: t.group,
    }
}
