//! What each configuration key acts on: one row per key or section
//! ([`TOUCHES`], matched by the longest prefix, as [`crate::readers`]),
//! kept beside the schema so that a new key must say what it touches (a
//! test fails on a key with no row). From it come the **knob pairs**: two
//! keys that act on the same quantity in the same algorithm's learner
//! update ([`update_pairs`]); each pair is run with both knobs on by the
//! learner's `knob_pairs` test.
//!
//! ```
//! use rulka_config::knobs::{touches_of, update_pairs, Quantity};
//! use rulka_config::Algorithm;
//! let t = touches_of("ppo.max_grad_norm").unwrap();
//! assert!(t.touches.contains(&Quantity::Gradient) && t.update.contains(&Algorithm::Ppo));
//! let pairs = update_pairs(Algorithm::Grpo);
//! assert!(pairs.iter().any(|(a, b, q)| (*a, *b, *q) == ("grpo.ent_coef", "grpo.ref_kl_coef", Quantity::Loss)));
//! ```

use crate::Algorithm;

/// A quantity keys act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Quantity {
    /// The training loss: a term, or its weight.
    Loss,
    /// The optimiser's steps: clipping, epochs, the optimiser and its
    /// settings, frozen parameters, micro-batching.
    Gradient,
    /// The returns and advantages an update trains toward.
    Returns,
    /// Which rows, samples or trajectories are kept or fed.
    Rows,
    /// A value that changes with the frame count.
    Schedule,
    /// The weights a collector serves (format, provider, swap).
    WeightsServed,
    /// The actions a collector takes (repeat, heads, greedy runs).
    Actions,
    /// What the network sees.
    Observations,
    /// The network's architecture.
    Network,
    /// None of these: paths, ports, threads, timeouts, the rewards
    /// (folded by the trainer before the update: the reward tests' part).
    Housekeeping,
}

use Quantity::*;

/// A key (or every key under a prefix): what it acts on, and the
/// algorithms whose learner update reads it.
#[derive(Debug, Clone, Copy)]
pub struct Touch {
    /// The key, or a section: the longest matching prefix applies.
    pub prefix: &'static str,
    /// What it acts on.
    pub touches: &'static [Quantity],
    /// The algorithms whose `Learner` update reads it (empty: another
    /// process or stage reads it: the trainer, a collector, pretraining).
    pub update: &'static [Algorithm],
}

const ALL3: &[Algorithm] = &[Algorithm::Ppo, Algorithm::Grpo, Algorithm::Dpo];
const PPO: &[Algorithm] = &[Algorithm::Ppo];
const GRPO: &[Algorithm] = &[Algorithm::Grpo];
const DPO: &[Algorithm] = &[Algorithm::Dpo];
const NONE: &[Algorithm] = &[];

const fn t(
    prefix: &'static str,
    touches: &'static [Quantity],
    update: &'static [Algorithm],
) -> Touch {
    Touch { prefix, touches, update }
}

/// Every key's row (sections first, then the keys that differ).
pub const TOUCHES: &[Touch] = &[
    // Sections whose keys act on none of the update's quantities.
    t("transport", &[Housekeeping], NONE),
    t("nn", &[Network], NONE),
    t("environment", &[Observations], NONE),
    t("state_normalization", &[Observations], NONE),
    t("rewards", &[Housekeeping], NONE),
    t("collectors", &[Rows], NONE),
    t("inference", &[WeightsServed], NONE),
    t("pretrain", &[Housekeeping], NONE),
    // `training`, `ppo`, `grpo` and `dpo` have no section row: each key
    // says what it touches.
    t("training.run_dir", &[Housekeeping], NONE),
    t("training.learner_threads", &[Housekeeping], NONE),
    t("training.device", &[Housekeeping], NONE),
    t("training.max_frames", &[Housekeeping], NONE),
    t("training.max_minutes", &[Housekeeping], NONE),
    // The rewards, the environment's timing and the collectors' choices
    // reach the update as its trajectories: not knobs of the update.
    t("environment.rl_action_offsets_ms", &[Actions], NONE),
    t("environment.tm_engine_step_per_action", &[Actions], NONE),
    t("environment.ms_per_tm_engine_step", &[Actions], NONE),
    t("collectors.eval_every_n_rollouts", &[Actions, Rows], NONE),
    t("collectors.weight_refresh_every_n_actions", &[WeightsServed], NONE),
    t("nn.vis.freeze", &[Gradient], NONE),
    t("nn.encoder.freeze", &[Gradient], NONE),
    t("training.algorithm", &[Rows], NONE),
    t("training.seed", &[Rows, Actions], NONE),
    t("training.policy_rollout_gamma", &[Housekeeping], NONE),
    t("training.policy_rollout_gamma_schedule", &[Schedule], NONE),
    t("training.eval_tracks", &[Rows], NONE),
    t("training.eval_every_n_updates", &[Rows], NONE),
    t("training.checkpoint_every_s", &[WeightsServed], NONE),
    // Read by every update.
    t("training.global_schedule_speed", &[Schedule], ALL3),
    t("training.optimizer", &[Gradient], ALL3),
    t("training.lr_schedule", &[Gradient, Schedule], ALL3),
    t("training.adam_epsilon", &[Gradient], ALL3),
    t("training.adam_beta1", &[Gradient], ALL3),
    t("training.adam_beta2", &[Gradient], ALL3),
    t("training.weight_decay", &[Gradient], ALL3),
    t("training.freeze.encoder_updates", &[Gradient], ALL3),
    t("training.freeze.policy_head_updates", &[Gradient], ALL3),
    // CUDA only: the GPU check's (no CPU update reads it).
    t("training.mixed_precision", &[Gradient, Loss], NONE),
    t("training.augment.shift_px", &[Observations, Loss], PPO),
    // PPO's update.
    t("ppo.gamma", &[Returns], PPO),
    t("ppo.gae_lambda", &[Returns], PPO),
    t("ppo.clip_coef", &[Loss], PPO),
    t("ppo.clip_coef_vf", &[Loss], PPO),
    t("ppo.ent_coef", &[Loss], PPO),
    t("ppo.vf_coef", &[Loss], PPO),
    t("ppo.max_grad_norm", &[Gradient], PPO),
    t("ppo.update_epochs", &[Gradient], PPO),
    t("ppo.num_minibatches", &[Gradient], PPO),
    t("ppo.normalize_advantages", &[Returns], PPO),
    t("ppo.rollout_steps_per_update", &[Rows], NONE),
    t("ppo.gamma_schedule", &[Returns, Schedule], PPO),
    t("ppo.gae_lambda_schedule", &[Returns, Schedule], PPO),
    t("ppo.ent_coef_schedule", &[Loss, Schedule], PPO),
    t("ppo.vf_coef_schedule", &[Loss, Schedule], PPO),
    t("ppo.target_kl", &[Gradient], PPO),
    t("ppo.normalize_returns", &[Returns], PPO),
    t("ppo.drac_coef", &[Loss], PPO),
    t("ppo.aux_every_updates", &[Gradient], PPO),
    t("ppo.aux_epochs", &[Gradient], PPO),
    t("ppo.aux_clone_coef", &[Loss], PPO),
    t("ppo.popart_beta", &[Returns], PPO),
    t("ppo.sil_coef", &[Loss, Gradient], PPO),
    t("ppo.sil_rollouts", &[Rows], PPO),
    t("ppo.sil_steps", &[Gradient], PPO),
    // GRPO's update.
    t("grpo.objective", &[Loss], GRPO),
    t("grpo.group_size", &[Rows], NONE),
    t("grpo.grouping", &[Rows], NONE),
    t("grpo.normalize_group", &[Returns], GRPO),
    t("grpo.std_eps", &[Returns], GRPO),
    t("grpo.filter_zero_std", &[Rows], GRPO),
    t("grpo.ent_coef", &[Loss], GRPO),
    t("grpo.max_grad_norm", &[Gradient], GRPO),
    t("grpo.update_epochs", &[Gradient], GRPO),
    t("grpo.ref_sync_every_updates", &[Loss], GRPO),
    t("grpo.ref_kl_coef", &[Loss], GRPO),
    t("grpo.kl_estimator", &[Loss], GRPO),
    t("grpo.clip_eps_low", &[Loss], GRPO),
    t("grpo.clip_eps_high", &[Loss], GRPO),
    t("grpo.loss_aggregation", &[Loss], GRPO),
    t("grpo.dr_grpo_max_len", &[Loss], GRPO),
    t("grpo.target_kl", &[Gradient], GRPO),
    t("grpo.early_stop_imp_ratio", &[Rows, Gradient], GRPO),
    t("grpo.reward_clip", &[Returns], GRPO),
    t("grpo.micro_batch_steps", &[Gradient], GRPO),
    t("grpo.ent_coef_schedule", &[Loss, Schedule], GRPO),
    t("grpo.max_grad_norm_schedule", &[Gradient, Schedule], GRPO),
    t("grpo.ref_kl_coef_schedule", &[Loss, Schedule], GRPO),
    // DPO's update.
    t("dpo.beta", &[Loss], DPO),
    t("dpo.loss", &[Loss], DPO),
    t("dpo.ref_sync_every_updates", &[Loss], DPO),
    t("dpo.pair_buffer_max", &[Rows], NONE),
    t("dpo.data_mode", &[Rows], NONE),
    t("dpo.offline_pairs_jsonl", &[Rows], NONE),
    t("dpo.vf_coef", &[Loss], DPO),
    t("dpo.update_epochs", &[Gradient], DPO),
    t("dpo.max_grad_norm", &[Gradient], DPO),
    t("dpo.beta_schedule", &[Loss, Schedule], DPO),
    t("dpo.vf_coef_schedule", &[Loss, Schedule], DPO),
    t("dpo.max_grad_norm_schedule", &[Gradient, Schedule], DPO),
];

/// The row of `key` (`maps[]`-style list markers ignored): the longest
/// matching prefix.
pub fn touches_of(key: &str) -> Option<&'static Touch> {
    let key = key.replace("[]", "");
    TOUCHES
        .iter()
        .filter(|r| key == r.prefix || key.starts_with(&format!("{}.", r.prefix)))
        .max_by_key(|r| r.prefix.len())
}

/// Every pair of keys `(a, b, quantity)` (`a` before `b` in [`TOUCHES`])
/// that `algorithm`'s learner update reads and that act on one quantity
/// of the loss, the gradient, the returns or a schedule: the pairs a test
/// runs with both on.
pub fn update_pairs(algorithm: Algorithm) -> Vec<(&'static str, &'static str, Quantity)> {
    let read: Vec<&Touch> = TOUCHES.iter().filter(|t| t.update.contains(&algorithm)).collect();
    let mut out = Vec::new();
    for (i, a) in read.iter().enumerate() {
        for b in &read[i + 1..] {
            if let Some(q) = [Loss, Gradient, Returns, Schedule]
                .into_iter()
                .find(|q| a.touches.contains(q) && b.touches.contains(q))
            {
                out.push((a.prefix, b.prefix, q));
            }
        }
    }
    out
}
