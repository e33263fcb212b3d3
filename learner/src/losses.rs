//! The learning maths on plain tensors: GAE, the PPO loss, group-relative
//! advantages, KL estimators, both GRPO objectives with every aggregation,
//! and the DPO losses. Everything here is a pure function, so users can test
//! their own changes against it.
//!
//! Aggregations are expressed as **per-step weights** computed from the full
//! trajectory lengths ([`aggregation_weights`]): the loss of any subset of
//! steps is `Σ weight · per_step_loss`, so gradients accumulated over
//! micro-batches equal the full-batch gradient exactly.

use rulka_config::{DpoLoss, GroupNormalization, KlEstimator, LossAggregation};
use tch::{Kind, Tensor};

/// Generalised advantage estimation, CleanRL convention: `dones[t] = 1` on
/// the last step of each rollout cuts the bootstrap, and the value after the
/// batch is 0. Inputs are `(T,)`; returns `(advantages, returns = A + V)`.
pub fn gae(
    rewards: &[f32],
    values: &[f32],
    dones: &[f32],
    gamma: f64,
    lambda: f64,
) -> (Vec<f32>, Vec<f32>) {
    let n = rewards.len();
    let mut adv = vec![0f32; n];
    let mut next_adv = 0f64;
    let mut next_value = 0f64;
    for t in (0..n).rev() {
        let not_done = 1.0 - f64::from(dones[t]);
        let delta = f64::from(rewards[t]) + gamma * next_value * not_done - f64::from(values[t]);
        next_adv = delta + gamma * lambda * not_done * next_adv;
        adv[t] = next_adv as f32;
        next_value = f64::from(values[t]);
    }
    let returns = adv.iter().zip(values).map(|(a, v)| a + v).collect();
    (adv, returns)
}

/// PPO loss parts and diagnostics.
#[derive(Debug)]
pub struct PpoTerms {
    /// `policy + vf_coef·value − ent_coef·entropy` (scalar, differentiable).
    pub loss: Tensor,
    /// Clipped surrogate, `mean(max(−A·r, −A·clip(r)))`.
    pub policy: Tensor,
    /// `0.5·mean((V−R)²)`, or the clipped form.
    pub value: Tensor,
    /// Mean entropy.
    pub entropy: Tensor,
    /// `mean((r−1) − log r)`.
    pub approx_kl: f64,
    /// Fraction of steps whose ratio left `[1−ε, 1+ε]`.
    pub clipfrac: f64,
    /// Fraction of steps whose value moved more than `ε_vf` (0 without value clipping).
    pub vf_clipfrac: f64,
}

/// Coefficients of [`ppo_loss`].
#[derive(Debug, Clone, Copy)]
pub struct PpoCoefs {
    /// Ratio clip ε.
    pub clip: f64,
    /// Value clip ε (None: plain MSE).
    pub clip_vf: Option<f64>,
    /// Value-loss coefficient.
    pub vf_coef: f64,
    /// Entropy coefficient.
    pub ent_coef: f64,
}

/// The PPO loss (`ppo_loss_components` of the original). All inputs `(B,)`.
#[allow(clippy::too_many_arguments)]
pub fn ppo_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    advantages: &Tensor,
    entropy: &Tensor,
    value: &Tensor,
    old_value: &Tensor,
    returns: &Tensor,
    c: PpoCoefs,
) -> PpoTerms {
    let log_ratio = logp - old_logp;
    let ratio = log_ratio.exp();
    let pg1 = -advantages * &ratio;
    let pg2 = -advantages * ratio.clamp(1.0 - c.clip, 1.0 + c.clip);
    let policy = pg1.maximum(&pg2).mean(Kind::Float);
    let (value_loss, vf_clipfrac) = match c.clip_vf {
        Some(eps) if eps > 0.0 => {
            let unclipped = (value - returns).square();
            let delta = value - old_value;
            let clipped_v = old_value + delta.clamp(-eps, eps);
            let clipped = (&clipped_v - returns).square();
            let frac = delta
                .detach()
                .abs()
                .gt(eps)
                .to_kind(Kind::Float)
                .mean(Kind::Float)
                .double_value(&[]);
            (unclipped.maximum(&clipped).mean(Kind::Float) * 0.5, frac)
        }
        _ => ((value - returns).square().mean(Kind::Float) * 0.5, 0.0),
    };
    let ent = entropy.mean(Kind::Float);
    let loss = &policy + &value_loss * c.vf_coef - &ent * c.ent_coef;
    let (approx_kl, clipfrac) = tch::no_grad(|| {
        let r = ratio.detach();
        let kl = ((&r - 1.0) - log_ratio.detach()).mean(Kind::Float).double_value(&[]);
        let cf =
            (&r - 1.0).abs().gt(c.clip).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]);
        (kl, cf)
    });
    PpoTerms { loss, policy, value: value_loss, entropy: ent, approx_kl, clipfrac, vf_clipfrac }
}

/// Normalises each row of advantages over a batch: `(A − mean)/(std + 1e-8)`.
pub fn normalize_advantages(advantages: &Tensor) -> Tensor {
    let mean = advantages.mean(Kind::Float);
    let std = advantages.std(true);
    (advantages - mean) / (std + 1e-8)
}

/// Group-relative advantages of returns `R` (one per trajectory):
/// `mean`: `R − mean(R)`; `mean_std`: `(R − mean(R)) / max(std(R), eps)` with
/// the population std (as the original's `clamp_min(std(unbiased=False), eps)`).
pub fn group_advantages(returns: &[f64], mode: GroupNormalization, eps: f64) -> Vec<f64> {
    let n = returns.len().max(1) as f64;
    let mean = returns.iter().sum::<f64>() / n;
    let centred = returns.iter().map(|r| r - mean);
    match mode {
        GroupNormalization::Mean => centred.collect(),
        GroupNormalization::MeanStd => {
            let std = (returns.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
            let d = std.max(eps);
            centred.map(|c| c / d).collect()
        }
    }
}

/// Whether a group has no return spread (all equal): it teaches nothing and
/// is filtered when `grpo.filter_zero_std` (counted as `frac_zero_std`).
pub fn group_has_zero_std(returns: &[f64]) -> bool {
    returns.windows(2).all(|w| w[0] == w[1])
}

/// Per-step KL estimate between the policy and the reference, from the
/// log-probs of the taken actions (see [`KlEstimator`]).
pub fn kl_estimate(logp: &Tensor, ref_logp: &Tensor, estimator: KlEstimator) -> Tensor {
    let d = logp - ref_logp;
    match estimator {
        KlEstimator::K1 => d,
        KlEstimator::K3 => {
            let r = -d;
            r.exp() - &r - 1.0
        }
        KlEstimator::Abs => d.abs(),
        KlEstimator::Mse => d.square() * 0.5,
        KlEstimator::K3Inverted => d.exp() - &d - 1.0,
    }
}

/// Per-step weights that implement a loss aggregation for trajectories of
/// the given full `lengths` (one weight per trajectory, applied to each of
/// its steps): the aggregated loss is `Σ_i Σ_t w_i · ℓ_it`.
pub fn aggregation_weights(
    lengths: &[usize],
    agg: LossAggregation,
    dr_grpo_max_len: usize,
) -> Vec<f64> {
    let g = lengths.len().max(1) as f64;
    let total: usize = lengths.iter().sum();
    lengths
        .iter()
        .map(|&len| match agg {
            LossAggregation::SeqMeanTokenMean => 1.0 / (g * len.max(1) as f64),
            LossAggregation::TokenMean => 1.0 / total.max(1) as f64,
            LossAggregation::SeqMeanTokenSum => 1.0 / g,
            LossAggregation::DrGrpo => 1.0 / (g * dr_grpo_max_len.max(1) as f64),
        })
        .collect()
}

/// Options of the clipped GRPO objective.
#[derive(Debug, Clone, Copy)]
pub struct ClippedCoefs {
    /// Lower clip ε.
    pub eps_low: f64,
    /// Upper clip ε.
    pub eps_high: f64,
    /// KL-to-reference coefficient β.
    pub beta: f64,
    /// KL estimator.
    pub estimator: KlEstimator,
}

/// Per-step loss of the clipped GRPO objective (seeds 001/003/004):
/// `−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) + β·KL(π‖π_ref)`. Inputs are
/// per-step `(N,)`; `advantages` is each step's trajectory advantage.
pub fn grpo_clipped_step_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    ref_logp: Option<&Tensor>,
    advantages: &Tensor,
    c: ClippedCoefs,
) -> Tensor {
    let ratio = (logp - old_logp).exp();
    let surr1 = &ratio * advantages;
    let surr2 = ratio.clamp(1.0 - c.eps_low, 1.0 + c.eps_high) * advantages;
    let clipped = -surr1.minimum(&surr2);
    match ref_logp {
        Some(r) if c.beta != 0.0 => clipped + kl_estimate(logp, r, c.estimator) * c.beta,
        _ => clipped,
    }
}

/// DPO-family loss of one preference pair, from summed log-probs of the
/// chosen (w) and rejected (l) trajectories under the policy and the
/// reference. `h = (π_w − ref_w) − (π_l − ref_l)`, `z = β·h`:
/// sigmoid `−log σ(z)`, IPO `(h − 1/(2β))²`, hinge `max(0, 1 − z)`.
pub fn dpo_loss(
    pi_w: &Tensor,
    ref_w: &Tensor,
    pi_l: &Tensor,
    ref_l: &Tensor,
    beta: f64,
    kind: DpoLoss,
) -> Tensor {
    let h = (pi_w - ref_w) - (pi_l - ref_l);
    match kind {
        DpoLoss::Sigmoid => (-(&h * beta)).softplus(),
        DpoLoss::Ipo => (h - 1.0 / (2.0 * beta)).square(),
        DpoLoss::Hinge => (-(h * beta) + 1.0).relu(),
    }
}

/// Each head's log-probabilities: `(B, n_heads·n_actions)` logits as
/// `(B, n_heads, n_actions)`, log-softmax over each head's actions.
pub fn head_log_probs(logits: &Tensor, n_heads: usize) -> Tensor {
    logits.reshape([logits.size()[0], n_heads as i64, -1]).log_softmax(-1, Kind::Float)
}

/// DrAC's regulariser, averaged over the batch: the KL divergence from the
/// policy on the frames as seen to the policy on the shifted frames (the
/// exact categorical KL summed over the `n_heads` heads, where DrAC's
/// reference implementation estimates it from one sampled action) plus
/// the squared value gap `(V(shifted) − V(seen))²`. The terms of the frames
/// as seen are held fixed (no gradient through them), as in DrAC.
pub fn drac_penalty(
    logits: &Tensor,
    value: &Tensor,
    shifted_logits: &Tensor,
    shifted_value: &Tensor,
    n_heads: usize,
) -> Tensor {
    let (lp, lq) =
        (head_log_probs(&logits.detach(), n_heads), head_log_probs(shifted_logits, n_heads));
    let kl = (lp.exp() * (&lp - &lq)).sum_dim_intlist([-1i64, -2].as_slice(), false, Kind::Float);
    let gap = (shifted_value.to_kind(Kind::Float) - value.detach().to_kind(Kind::Float)).square();
    (kl + gap).mean(Kind::Float)
}

/// The parts of [`aux_loss`].
#[derive(Debug)]
pub struct AuxTerms {
    /// `value + clone_coef · kl` (scalar, differentiable).
    pub loss: Tensor,
    /// `0.5·mean((V − R)²)`.
    pub value: f64,
    /// `mean(KL(π_before ‖ π))`.
    pub kl: f64,
}

/// PPG's auxiliary-phase loss on a minibatch: the value regressed on its
/// targets, `0.5·mean((V − R)²)`, plus `clone_coef` times the exact
/// categorical KL from the policy before the phase to the current one,
/// summed over the `n_heads` heads and averaged over the batch.
/// `before_logp` is `(B, n_heads, n_actions)` log-probabilities (fixed);
/// `logits` `(B, n_heads·n_actions)`; `value` and `returns` `(B,)`.
pub fn aux_loss(
    before_logp: &Tensor,
    logits: &Tensor,
    value: &Tensor,
    returns: &Tensor,
    n_heads: usize,
    clone_coef: f64,
) -> AuxTerms {
    let now = head_log_probs(logits, n_heads);
    let before = before_logp.detach().to_kind(Kind::Float);
    let kl = (before.exp() * (&before - &now))
        .sum_dim_intlist([-1i64, -2].as_slice(), false, Kind::Float)
        .mean(Kind::Float);
    let value =
        (value.to_kind(Kind::Float) - returns.to_kind(Kind::Float)).square().mean(Kind::Float)
            * 0.5;
    AuxTerms {
        value: value.double_value(&[]),
        kl: kl.double_value(&[]),
        loss: &value + &kl * clone_coef,
    }
}

/// The weight of self-imitation's value term (SIL's `β`, the paper's 0.01).
pub const SIL_VALUE_COEF: f64 = 0.01;

/// The parts of [`sil_loss`].
#[derive(Debug)]
pub struct SilTerms {
    /// `mean(−log π(a|s)·A⁺) + 0.5·value_coef·mean(A⁺²)`, `A⁺ = max(R − V, 0)`
    /// held fixed in the first term (scalar, differentiable).
    pub loss: Tensor,
    /// `mean(A⁺)`.
    pub advantage: f64,
    /// The fraction of the states with `R > V`.
    pub positive: f64,
}

/// Self-imitation's loss on a minibatch of kept states (Oh et al., 2018):
/// the taken actions' log-probabilities `log_prob` `(B,)` pushed up in
/// proportion to how much their returns `returns` `(B,)` beat the value
/// `value` `(B,)`, and the value pulled up to the returns where it is
/// below them; states whose return is at most the value contribute nothing.
pub fn sil_loss(log_prob: &Tensor, value: &Tensor, returns: &Tensor, value_coef: f64) -> SilTerms {
    let gap = (returns.to_kind(Kind::Float) - value.to_kind(Kind::Float)).clamp_min(0.0);
    let weight = gap.detach();
    let policy = (-log_prob.to_kind(Kind::Float) * &weight).mean(Kind::Float);
    let value_term = gap.square().mean(Kind::Float) * (0.5 * value_coef);
    SilTerms {
        advantage: weight.mean(Kind::Float).double_value(&[]),
        positive: weight.gt(0.0).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]),
        loss: policy + value_term,
    }
}
