//! A learner continuing a run of the original Python project, and a
//! learner's state as the original saves it (see `rulka_original`): the
//! same weights, RAdam's moments and step count (its rectification depends
//! on the step), the loss scale and the frame count that places the
//! schedules.

use anyhow::Context as _;
use rulka_checkpoint::Weights;
use rulka_config::Config;
use rulka_original::{OptimizerState, ScalerState};
use tch::Device;

use crate::algorithms::Learner;
use crate::ActorCritic;

impl Learner {
    /// A learner holding the original's `weights` (all of the network's
    /// tensors), optimizer state (moments and step; `None`: a fresh
    /// optimizer), loss scale and `frames` played.
    pub fn from_original(
        cfg: &Config,
        weights: &Weights,
        optimizer: Option<&OptimizerState>,
        scaler: Option<ScalerState>,
        frames: u64,
        device: Device,
    ) -> anyhow::Result<Self> {
        let mut net = ActorCritic::new_unseeded(cfg, device);
        net.load_weights(weights, cfg, false).context("loading the original's weights")?;
        let mut learner = Learner::with_network(cfg, net);
        if let Some(o) = optimizer {
            let step = i64::try_from(o.step).context("optimizer step count")?;
            learner
                .optimizer_mut()
                .set_state(&o.exp_avg, &o.exp_avg_sq, step, 0)
                .context("restoring the original's optimizer state")?;
        }
        if let Some(s) = scaler {
            learner.optimizer_mut().set_loss_scale(s.scale);
        }
        learner.frames = frames;
        Ok(learner)
    }

    /// The learner's weights, optimizer state (at the current learning
    /// rate, with the config's β and ε) and gradient scaler as the original
    /// saves them; no scaler state when this learner does not scale its
    /// loss (on the CPU, or without `mixed_precision`).
    pub fn to_original(&self) -> (Weights, OptimizerState, Option<ScalerState>) {
        let (m, v, step, _) = self.optimizer().state();
        let t = &self.config().training;
        let optimizer = OptimizerState {
            step: step.max(0) as u64,
            exp_avg: m,
            exp_avg_sq: v,
            lr: self.lr(),
            betas: (t.adam_beta1, t.adam_beta2),
            eps: t.adam_epsilon,
            weight_decay: 0.0,
        };
        let scale = self.optimizer().loss_scale();
        let scaler = (scale != 1.0).then_some(ScalerState { scale, growth_tracker: 0 });
        (self.network().to_weights(), optimizer, scaler)
    }
}
