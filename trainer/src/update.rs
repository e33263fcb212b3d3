//! The update stage: a batch, group or set of pairs that is ready
//! ([`crate::pending::Pending::take_ready`]) trained on by the learner.

use rulka_learner::{Learner, TrajBatch, UpdateStats};

/// What one update trains on.
#[derive(Debug)]
pub(crate) enum Work {
    /// A PPO batch of whole rollouts and its schedule anchor.
    Ppo(Vec<TrajBatch>, u64),
    /// A GRPO group of runs of one prompt and its schedule anchor.
    Grpo(Vec<TrajBatch>, u64),
    /// DPO (chosen, rejected) pairs.
    Dpo(Vec<(TrajBatch, TrajBatch)>),
}

/// One update's data, sealed when the trajectory that completed it arrived.
#[derive(Debug)]
pub(crate) struct Ready {
    pub work: Work,
    /// The learner's frame count once that trajectory was counted: the
    /// update's TensorBoard step and its weights' frame count.
    pub frames: u64,
    /// Environment steps in it (PPO's rollout size).
    pub steps: usize,
}

impl Ready {
    /// Trains the learner on it, at its frame count. `None`: the learner
    /// had nothing to do (e.g. DPO pairs of equal returns).
    pub fn train(self, learner: &mut Learner) -> anyhow::Result<Option<UpdateStats>> {
        learner.frames = self.frames;
        match self.work {
            Work::Ppo(batch, at) => learner.ppo_update_at(&batch, at).map(Some),
            Work::Grpo(group, at) => learner.grpo_update_at(&group, at).map(Some),
            Work::Dpo(pairs) => learner.dpo_update(&pairs),
        }
    }
}
