//! The update steps of PPO, GRPO (both objectives) and DPO on trajectory
//! tensors, with the optimiser, schedules and non-finite guards.

use anyhow::{bail, ensure};
use rulka_config::{Algorithm, Config, Grouping, GrpoObjective, Schedule};
use tch::{Device, Kind, Tensor};

use crate::losses::{self, ClippedCoefs, PpoCoefs};
use crate::optim::{OptimConfig, Optimizer, StepOutcome};
use crate::{augment, ActorCritic};

/// One trajectory, ready for the learner.
#[derive(Debug)]
pub struct TrajBatch {
    /// `(T,1,H,W)` uint8 frames (`(T,1,1,1)` for float-only networks).
    pub image: Tensor,
    /// `(T,F)` raw floats.
    pub floats: Tensor,
    /// `(T,heads)` int64 actions.
    pub actions: Tensor,
    /// `(T,)` behaviour log-probs recorded by the collector.
    pub old_logp: Tensor,
    /// `(T,)` collector values.
    pub old_value: Tensor,
    /// Per-step rewards (already shaped and folded).
    pub rewards: Vec<f32>,
    /// Group ("prompt") id.
    pub group: u64,
}

impl TrajBatch {
    /// Steps in the trajectory.
    pub fn len(&self) -> usize {
        self.rewards.len()
    }

    /// No steps.
    pub fn is_empty(&self) -> bool {
        self.rewards.is_empty()
    }

    /// The same trajectory sharing this one's tensors (no data copied).
    pub fn shallow_clone(&self) -> Self {
        Self {
            image: self.image.shallow_clone(),
            floats: self.floats.shallow_clone(),
            actions: self.actions.shallow_clone(),
            old_logp: self.old_logp.shallow_clone(),
            old_value: self.old_value.shallow_clone(),
            rewards: self.rewards.clone(),
            group: self.group,
        }
    }
}

/// What one update did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateStats {
    /// Mean loss over optimiser steps.
    pub loss: f64,
    /// Mean approx-KL to the behaviour policy (PPO, clipped GRPO).
    pub approx_kl: f64,
    /// Mean clip fraction (PPO, clipped GRPO).
    pub clipfrac: f64,
    /// Mean value-clip fraction (PPO).
    pub vf_clipfrac: f64,
    /// Mean entropy.
    pub entropy: f64,
    /// Mean KL to the reference policy (k1 on the taken actions).
    pub kl_ref: f64,
    /// Mean global gradient norm before clipping.
    pub grad_norm: f64,
    /// Variance of the advantages.
    pub adv_var: f64,
    /// 1 when the group was filtered for zero return spread (GRPO).
    pub frac_zero_std: f64,
    /// Optimiser steps taken.
    pub steps: u64,
    /// Optimiser steps skipped (non-finite).
    pub skipped: u64,
    /// Micro-batches dropped by `early_stop_imp_ratio`.
    pub dropped_micro_batches: u64,
    /// Learning rate used.
    pub lr: f64,
    /// The DPO β the update's loss used (its schedule's value at the
    /// update's frames); 0 for PPO and GRPO.
    pub beta: f64,
    /// Mean |log π_learner − log π_sampler| of the taken actions on the first
    /// minibatch, before any step (PPO): policy lag plus any ONNX Runtime /
    /// libtorch disagreement, which should be ~1e-6 at zero lag.
    pub sampler_logp_delta: f64,
    /// Epochs run (PPO: fewer than `update_epochs` when `ppo.target_kl`
    /// stopped the update; GRPO and DPO: their optimiser passes).
    pub epochs: u64,
    /// What `ppo.normalize_returns` multiplied the rewards by (1 when off).
    pub reward_scale: f64,
    /// Mean DrAC regulariser (policy KL + value gap across the shift;
    /// 0 without `ppo.drac_coef`).
    pub drac: f64,
    /// Optimiser steps of `ppo.aux_every_updates`' auxiliary phase, when
    /// this update ended with one (0 otherwise).
    pub aux_steps: u64,
    /// The auxiliary phase's mean value loss, `0.5·(V − R)²`.
    pub aux_value_loss: f64,
    /// The auxiliary phase's mean KL from the policy before it.
    pub aux_kl: f64,
    /// The running mean `ppo.popart_beta` standardised this update's value
    /// targets by (0 when off).
    pub popart_mean: f64,
    /// The running standard deviation it divided them by (0 when off).
    pub popart_std: f64,
    /// Optimiser steps of `ppo.sil_coef`'s self-imitation (its minibatches
    /// with no return above the value take none).
    pub sil_steps: u64,
    /// Self-imitation's mean `max(R − V, 0)` over its minibatches' states.
    pub sil_advantage: f64,
    /// The fraction of those states whose return is above the value.
    pub sil_positive: f64,
    /// The best kept rollout's sum of rewards (0 when off).
    pub sil_best_return: f64,
}

/// One PPO update's tensors on the learner's device, as its steps take them.
struct PpoBatch {
    image: Tensor,
    floats: Tensor,
    actions: Tensor,
    old_logp: Tensor,
    /// The collectors' values (in PopArt's standard units when on).
    old_value: Tensor,
    /// The value targets (in PopArt's standard units when on).
    ret: Tensor,
    /// The value targets in real units (what the auxiliary phase keeps).
    real_ret: Tensor,
    adv: Tensor,
    /// Self-imitation's states, when `ppo.sil_coef` is on.
    sil: Option<SilBatch>,
}

/// One of the run's best rollouts, kept for `ppo.sil_coef`'s self-imitation.
#[derive(Debug)]
struct KeptRun {
    /// The rollout as the collectors sent it (its tensors shared, not copied).
    run: TrajBatch,
    /// Its sum of rewards, what ranks it.
    total: f64,
}

/// The kept rollouts' states and returns-to-go, in the update's units.
struct SilBatch {
    image: Tensor,
    floats: Tensor,
    actions: Tensor,
    returns: Tensor,
}

/// One update's states and the value targets it trained towards, kept
/// for `ppo.aux_every_updates`' auxiliary phase.
#[derive(Debug)]
struct AuxBatch {
    image: Tensor,
    floats: Tensor,
    returns: Tensor,
}

/// Running count, mean and sum of squared deviations of the discounted
/// returns `G_t = r_t + γ·G_{t−1}` (each rollout from 0 at its first step),
/// merged batch by batch (Chan et al.'s parallel update):
/// `ppo.normalize_returns` divides the rewards by their standard deviation.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReturnMoments {
    /// Returns seen.
    pub count: f64,
    /// Their mean.
    pub mean: f64,
    /// Their sum of squared deviations from the mean.
    pub m2: f64,
}

impl ReturnMoments {
    /// Merges `xs` in.
    pub fn add(&mut self, xs: &[f64]) {
        if xs.is_empty() {
            return;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let m2: f64 = xs.iter().map(|x| (x - mean).powi(2)).sum();
        let total = self.count + n;
        let delta = mean - self.mean;
        self.m2 += m2 + delta * delta * self.count * n / total;
        self.mean += delta * n / total;
        self.count = total;
    }

    /// The population variance (0 before two returns).
    pub fn var(&self) -> f64 {
        if self.count < 2.0 {
            0.0
        } else {
            self.m2 / self.count
        }
    }

    /// `1 / sqrt(var + 1e-8)`; 1 while the variance is 0 (fewer than two
    /// returns, or all equal), where a scale would be unbounded.
    pub fn reward_scale(&self) -> f64 {
        let var = self.var();
        if var > 0.0 {
            1.0 / (var + 1e-8).sqrt()
        } else {
            1.0
        }
    }
}

/// PopArt's running moments of the value targets (`ppo.popart_beta` = β).
/// Update k moves each toward the batch's by `w = max(β, 1/k)`: the first
/// update takes the batch's moments, the next ones average the batches'
/// while `1/k > β`, then an exponential moving average of step β.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ValueMoments {
    /// Updates merged.
    pub updates: u64,
    /// Running mean of the targets.
    pub mean: f64,
    /// Running mean of their squares.
    pub second: f64,
}

impl ValueMoments {
    /// The smallest standard deviation [`Self::std`] gives: targets that
    /// hardly vary would otherwise blow the standardised head up.
    pub const MIN_STD: f64 = 1e-4;
    /// The largest.
    pub const MAX_STD: f64 = 1e6;

    /// Merges one update's targets with step `beta` (see the type).
    pub fn add(&mut self, targets: &[f64], beta: f64) {
        if targets.is_empty() {
            return;
        }
        let n = targets.len() as f64;
        let mean = targets.iter().sum::<f64>() / n;
        let second = targets.iter().map(|x| x * x).sum::<f64>() / n;
        self.updates += 1;
        let w = beta.max(1.0 / self.updates as f64);
        self.mean += w * (mean - self.mean);
        self.second += w * (second - self.second);
    }

    /// `sqrt(second − mean²)` within [`Self::MIN_STD`], [`Self::MAX_STD`].
    pub fn std(&self) -> f64 {
        (self.second - self.mean * self.mean).max(0.0).sqrt().clamp(Self::MIN_STD, Self::MAX_STD)
    }
}

/// The discounted returns `G_t = r_t + γ·G_{t−1}` of each rollout, from 0
/// at its first step (the statistic [`ReturnMoments`] keeps).
pub fn running_returns(rollouts: &[Vec<f32>], gamma: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(rollouts.iter().map(Vec::len).sum());
    for r in rollouts {
        let mut g = 0.0;
        for &x in r {
            g = f64::from(x) + gamma * g;
            out.push(g);
        }
    }
    out
}

/// The learner: network, optional reference copy, optimiser, counters.
#[derive(Debug)]
pub struct Learner {
    cfg: Config,
    net: ActorCritic,
    reference: Option<ActorCritic>,
    opt: Optimizer,
    /// Environment frames seen (the schedule clock).
    pub frames: u64,
    /// Updates done.
    pub updates: u64,
    /// State of the minibatch-shuffling RNG (saved with the learner, so a
    /// resumed run shuffles exactly as the original would have).
    rng: u64,
    /// `ppo.normalize_returns`' statistic (saved with the learner).
    returns: ReturnMoments,
    /// `ppo.popart_beta`'s moments (saved with the learner).
    values: ValueMoments,
    /// The updates since the last auxiliary phase (not saved: a resumed
    /// run counts them afresh).
    aux: Vec<AuxBatch>,
    /// `ppo.sil_coef`'s kept rollouts, best first (not saved: a resumed run
    /// keeps them afresh).
    sil: Vec<KeptRun>,
}

/// xorshift64* step.
fn next_u64(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// SplitMix64's output for `x`: a well-mixed seed from a counter.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniformly random permutation of `0..n` (Fisher–Yates).
fn permutation(state: &mut u64, n: usize) -> Vec<i64> {
    let mut p: Vec<i64> = (0..n as i64).collect();
    for i in (1..n).rev() {
        let j = (next_u64(state) % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    p
}

/// A coefficient at `frames`: its piecewise-linear schedule (frame counts
/// scaled by `global_schedule_speed` = `speed`) when there is one, else `fixed`.
pub fn scheduled_coefficient(
    fixed: f64,
    schedule: &Option<Schedule>,
    speed: f64,
    frames: u64,
) -> f64 {
    schedule.as_ref().map_or(fixed, |s| s.scaled(speed).linear_at(frames as f64))
}

/// The gradient-norm clip of `cfg`'s algorithm at `frames`: `ppo.max_grad_norm`
/// under PPO (it has no schedule), `grpo.`/`dpo.max_grad_norm` or its
/// schedule under GRPO and DPO. Every optimiser step of an algorithm's
/// updates, and pretraining (at frame 0), clips with it.
pub fn max_grad_norm_at(cfg: &Config, frames: u64) -> f64 {
    let speed = cfg.training.global_schedule_speed;
    match cfg.training.algorithm {
        Algorithm::Ppo => cfg.ppo.max_grad_norm,
        Algorithm::Grpo => scheduled_coefficient(
            cfg.grpo.max_grad_norm,
            &cfg.grpo.max_grad_norm_schedule,
            speed,
            frames,
        ),
        Algorithm::Dpo => scheduled_coefficient(
            cfg.dpo.max_grad_norm,
            &cfg.dpo.max_grad_norm_schedule,
            speed,
            frames,
        ),
    }
}

/// The runs' rewards times `scale`, one run after another, and their
/// `dones` (1 on each run's last step), as [`losses::gae`] takes them.
fn rewards_and_dones<'a>(
    runs: impl Iterator<Item = &'a TrajBatch>,
    scale: f64,
) -> (Vec<f32>, Vec<f32>) {
    let (mut rewards, mut dones) = (Vec::new(), Vec::new());
    for r in runs {
        rewards.extend(r.rewards.iter().map(|&x| (f64::from(x) * scale) as f32));
        dones.extend(std::iter::repeat_n(0.0f32, r.len().saturating_sub(1)));
        dones.push(1.0);
    }
    (rewards, dones)
}

/// The trajectories' tensors joined along time and moved to the learner's
/// `device` once per update (a no-op copy on the CPU): frames travel as
/// `uint8`, a quarter of their `f32` size.
fn cat(ts: Vec<&Tensor>, device: Device) -> Tensor {
    Tensor::cat(&ts, 0).to_device(device)
}

impl Learner {
    /// A learner with a fresh network (seeded) on `device`.
    pub fn new(cfg: &Config, device: Device, seed: u64) -> Self {
        let net = ActorCritic::new(cfg, device, seed);
        Self::with_network(cfg, net)
    }

    /// A learner for a fresh run: [`ActorCritic::new_pretrained`] (the
    /// config's Hugging Face models loaded from their folders).
    pub fn new_pretrained(cfg: &Config, device: Device, seed: u64) -> anyhow::Result<Self> {
        Ok(Self::with_network(cfg, ActorCritic::new_pretrained(cfg, device, seed)?))
    }

    /// A learner around an existing network (its frozen parameters are not
    /// given to the optimiser).
    pub fn with_network(cfg: &Config, net: ActorCritic) -> Self {
        let t = &cfg.training;
        let scaling = t.mixed_precision && net.var_store().device().is_cuda();
        let opt = Optimizer::new(
            net.var_store().trainable_variables(),
            OptimConfig::from_training(t, scaling),
        );
        let rng = cfg.training.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Self {
            cfg: cfg.clone(),
            net,
            reference: None,
            opt,
            frames: 0,
            updates: 0,
            rng,
            returns: ReturnMoments::default(),
            values: ValueMoments::default(),
            aux: Vec::new(),
            sil: Vec::new(),
        }
    }

    /// Freezes the parts `training.freeze` holds for this update (the
    /// run's updates so far below its count), unfreezes the rest.
    fn apply_freeze(&mut self) {
        let f = self.cfg.training.freeze;
        let (encoder, head) =
            (self.updates < f.encoder_updates, self.updates < f.policy_head_updates);
        let mask: Vec<bool> = self
            .net
            .parameter_names()
            .iter()
            .map(|n| {
                (encoder && self.net.is_encoder_tensor(n))
                    || (head && n.starts_with("policy_head."))
            })
            .collect();
        self.opt.set_frozen(&mask);
    }

    /// The network being trained.
    pub fn network(&self) -> &ActorCritic {
        &self.net
    }

    /// The config the learner runs with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The reference policy, once created.
    pub fn reference(&self) -> Option<&ActorCritic> {
        self.reference.as_ref()
    }

    pub(crate) fn set_reference(&mut self, r: ActorCritic) {
        self.reference = Some(r);
    }

    /// The optimiser.
    pub fn optimizer(&self) -> &Optimizer {
        &self.opt
    }

    pub(crate) fn optimizer_mut(&mut self) -> &mut Optimizer {
        &mut self.opt
    }

    pub(crate) fn rng_state(&self) -> u64 {
        self.rng
    }

    pub(crate) fn set_rng_state(&mut self, s: u64) {
        self.rng = s;
    }

    /// `ppo.normalize_returns`' running statistic of the returns.
    pub fn return_moments(&self) -> ReturnMoments {
        self.returns
    }

    pub(crate) fn set_return_moments(&mut self, m: ReturnMoments) {
        self.returns = m;
    }

    /// `ppo.popart_beta`'s running moments of the value targets.
    pub fn value_moments(&self) -> ValueMoments {
        self.values
    }

    pub(crate) fn set_value_moments(&mut self, m: ValueMoments) {
        self.values = m;
    }

    /// The sums of rewards of the rollouts `ppo.sil_coef`'s self-imitation
    /// keeps, best first.
    pub fn sil_kept_returns(&self) -> Vec<f64> {
        self.sil.iter().map(|k| k.total).collect()
    }

    /// Keeps the `ppo.sil_rollouts` rollouts of the run with the highest
    /// sums of rewards, `rollouts` among them: a later rollout replaces a
    /// kept one only with a higher sum, and one whose sum is not finite is
    /// never kept.
    fn keep_best(&mut self, rollouts: &[TrajBatch]) {
        for r in rollouts {
            let total: f64 = r.rewards.iter().map(|&x| f64::from(x)).sum();
            if r.is_empty() || !total.is_finite() {
                continue;
            }
            self.sil.push(KeptRun { run: r.shallow_clone(), total });
        }
        // A stable sort: among equal sums the one kept first stays ahead.
        self.sil.sort_by(|a, b| b.total.total_cmp(&a.total));
        self.sil.truncate(self.cfg.ppo.sil_rollouts as usize);
    }

    /// Current learning rate (exponential schedule on the frame clock).
    pub fn lr(&self) -> f64 {
        self.cfg
            .training
            .lr_schedule
            .scaled(self.cfg.training.global_schedule_speed)
            .exponential_at(self.frames as f64)
    }

    /// The trained network's evaluation, under fp16 autocast when
    /// `training.mixed_precision` is on and the network is on CUDA.
    fn evaluate(
        &self,
        image: &Tensor,
        floats: &Tensor,
        actions: &Tensor,
    ) -> crate::network::Evaluation {
        let amp = self.cfg.training.mixed_precision && self.net.var_store().device().is_cuda();
        if amp {
            crate::autocast::cuda(|| self.net.evaluate_actions(image, floats, actions))
        } else {
            self.net.evaluate_actions(image, floats, actions)
        }
    }

    /// The trained network's logits and value (`(B,)`), under the same
    /// autocast as [`Self::evaluate`].
    fn forward(&self, image: &Tensor, floats: &Tensor) -> (Tensor, Tensor) {
        let amp = self.cfg.training.mixed_precision && self.net.var_store().device().is_cuda();
        let (logits, value) = if amp {
            crate::autocast::cuda(|| self.net.forward(image, floats))
        } else {
            self.net.forward(image, floats)
        };
        (logits, value.squeeze_dim(-1))
    }

    fn speed(&self) -> f64 {
        self.cfg.training.global_schedule_speed
    }

    fn sync_reference(&mut self) -> anyhow::Result<()> {
        let w = self.net.to_weights();
        let device = self.net.var_store().device();
        let r = self.reference.get_or_insert_with(|| ActorCritic::new_unseeded(&self.cfg, device));
        r.load_weights(&w, &self.cfg, false)?;
        r.set_training(false);
        Ok(())
    }

    /// One PPO update over whole rollouts: GAE (done on each rollout's last
    /// step), batch advantage normalisation, `update_epochs` × shuffled minibatches.
    /// The scheduled coefficients are taken at the current frame count; see
    /// [`Learner::ppo_update_at`].
    pub fn ppo_update(&mut self, rollouts: &[TrajBatch]) -> anyhow::Result<UpdateStats> {
        self.ppo_update_at(rollouts, self.frames)
    }

    /// [`Learner::ppo_update`] with γ, λ, the entropy and the value
    /// coefficients scheduled at `schedule_frames`: the original's batch anchor
    /// (frames before the batch's first rollout), the same clock the rollouts'
    /// rewards were folded at ([`crate::rewards::shaping_gamma`]). The learning
    /// rate follows the current frame count.
    pub fn ppo_update_at(
        &mut self,
        rollouts: &[TrajBatch],
        schedule_frames: u64,
    ) -> anyhow::Result<UpdateStats> {
        ensure!(!rollouts.is_empty(), "PPO update with no rollouts");
        self.apply_freeze();
        let p = self.cfg.ppo.clone();
        let (speed, frames) = (self.speed(), schedule_frames);
        let gamma = scheduled_coefficient(p.gamma, &p.gamma_schedule, speed, frames);
        let lambda = scheduled_coefficient(p.gae_lambda, &p.gae_lambda_schedule, speed, frames);
        let coefs = PpoCoefs {
            clip: p.clip_coef,
            clip_vf: p.clip_coef_vf,
            vf_coef: scheduled_coefficient(p.vf_coef, &p.vf_coef_schedule, speed, frames),
            ent_coef: scheduled_coefficient(p.ent_coef, &p.ent_coef_schedule, speed, frames),
        };
        let mut reward_scale = 1.0;
        if p.normalize_returns {
            let rs: Vec<Vec<f32>> = rollouts.iter().map(|r| r.rewards.clone()).collect();
            self.returns.add(&running_returns(&rs, gamma));
            reward_scale = self.returns.reward_scale();
        }
        let (rewards, dones) = rewards_and_dones(rollouts.iter(), reward_scale);
        let mut values = Vec::new();
        for r in rollouts {
            values.extend(Vec::<f32>::try_from(
                &r.old_value.to_device(Device::Cpu).to_kind(Kind::Float),
            )?);
        }
        let (adv, ret) = losses::gae(&rewards, &values, &dones, gamma, lambda);
        let device = self.net.var_store().device();
        let mut adv = Tensor::from_slice(&adv).to_device(device);
        let adv_var = adv.var(false).double_value(&[]);
        if p.normalize_advantages {
            adv = losses::normalize_advantages(&adv);
        }
        // PopArt: the moments move first, then the update's value targets,
        // the collectors' values and the head are in their standard units.
        let popart = p.popart_beta.map(|beta| {
            self.values.add(&ret.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(), beta);
            (self.values.mean, self.values.std())
        });
        let standard = |t: Tensor| match popart {
            Some((mean, std)) => (t - mean) / std,
            None => t,
        };
        let real_ret = Tensor::from_slice(&ret).to_device(device);
        let ret = standard(real_ret.shallow_clone());
        let image = cat(rollouts.iter().map(|r| &r.image).collect(), device);
        let floats = cat(rollouts.iter().map(|r| &r.floats).collect(), device);
        let actions = cat(rollouts.iter().map(|r| &r.actions).collect(), device);
        let old_logp = cat(rollouts.iter().map(|r| &r.old_logp).collect(), device);
        let old_value = standard(cat(rollouts.iter().map(|r| &r.old_value).collect(), device));
        let lr = self.lr();
        let sil = (p.sil_coef > 0.0).then(|| {
            self.keep_best(rollouts);
            // Returns-to-go, as `demo_returns`: GAE with λ = 1 against values of 0.
            let (rewards, dones) = rewards_and_dones(self.sil.iter().map(|k| &k.run), reward_scale);
            let (_, returns) = losses::gae(&rewards, &vec![0.0; rewards.len()], &dones, gamma, 1.0);
            SilBatch {
                image: cat(self.sil.iter().map(|k| &k.run.image).collect(), device),
                floats: cat(self.sil.iter().map(|k| &k.run.floats).collect(), device),
                actions: cat(self.sil.iter().map(|k| &k.run.actions).collect(), device),
                returns: standard(Tensor::from_slice(&returns).to_device(device)),
            }
        });
        let (popart_mean, popart_std) = popart.unwrap_or((0.0, 0.0));
        let mut stats = UpdateStats {
            adv_var,
            lr,
            reward_scale,
            popart_mean,
            popart_std,
            sil_best_return: self.sil.first().map_or(0.0, |k| k.total),
            ..Default::default()
        };
        if let Some((mean, std)) = popart {
            self.net.rescale_value_head(1.0 / std, -mean / std)?;
        }
        // Whatever the steps do, the head is back in real units after them.
        let outcome = self.ppo_steps(
            &mut stats,
            PpoBatch { image, floats, actions, old_logp, old_value, ret, real_ret, adv, sil },
            coefs,
            popart,
        );
        if let Some((mean, std)) = popart {
            self.net.rescale_value_head(std, mean)?;
        }
        outcome?;
        Ok(stats)
    }

    /// The epochs of minibatch steps of a PPO update at the learning rate
    /// `stats.lr`, then the auxiliary phase when one is due (the value head
    /// in PopArt's standard units when `popart` holds its moments).
    fn ppo_steps(
        &mut self,
        stats: &mut UpdateStats,
        batch: PpoBatch,
        coefs: PpoCoefs,
        popart: Option<(f64, f64)>,
    ) -> anyhow::Result<()> {
        let p = self.cfg.ppo.clone();
        let PpoBatch { image, floats, actions, old_logp, old_value, ret, real_ret, adv, sil } =
            batch;
        let n = ret.size()[0];
        let mb = (n / i64::from(p.num_minibatches)).max(1);
        let lr = stats.lr;
        let device = self.net.var_store().device();
        let shift = i64::from(self.cfg.training.augment.shift_px);
        // The shifts' own stream, a function of the seed and the update: the
        // shuffling stream stays as it is without augmentation, and a
        // resumed run draws the shifts it would have drawn.
        let mut shifts = splitmix64(self.cfg.training.seed ^ splitmix64(self.updates)) | 1;
        self.net.set_training(true);
        for _ in 0..p.update_epochs {
            let perm =
                Tensor::from_slice(&permutation(&mut self.rng, n as usize)).to_device(device);
            let (mut epoch_kl, mut minibatches) = (0.0, 0.0);
            let mut start = 0;
            while start < n {
                let idx = perm.narrow(0, start, mb.min(n - start));
                let (mb_image, mb_floats, mb_actions) = (
                    image.index_select(0, &idx),
                    floats.index_select(0, &idx),
                    actions.index_select(0, &idx),
                );
                let mb_old_logp = old_logp.index_select(0, &idx);
                let first = stats.steps + stats.skipped == 0;
                let shifted = (shift > 0)
                    .then(|| augment::random_shift(&mb_image, shift, || next_u64(&mut shifts)));
                let (ev, drac) = match &shifted {
                    // RAD: the objective on the shifted frames.
                    Some(aug) if p.drac_coef == 0.0 => {
                        (self.evaluate(aug, &mb_floats, &mb_actions), None)
                    }
                    // DrAC: the objective on the frames as seen, the
                    // regulariser across the shift.
                    Some(aug) => {
                        let (logits, value) = self.forward(&mb_image, &mb_floats);
                        let (aug_logits, aug_value) = self.forward(aug, &mb_floats);
                        let arch = self.net.arch();
                        let (log_prob, entropy) = crate::logprob_entropy(
                            &logits,
                            &mb_actions,
                            arch.n_heads,
                            arch.n_actions,
                        );
                        let reg = losses::drac_penalty(
                            &logits,
                            &value,
                            &aug_logits,
                            &aug_value,
                            arch.n_heads,
                        );
                        (crate::Evaluation { log_prob, entropy, value }, Some(reg))
                    }
                    None => (self.evaluate(&mb_image, &mb_floats, &mb_actions), None),
                };
                if first {
                    // On the frames as seen: RAD's evaluation is of shifted ones.
                    let log_prob = match (&shifted, &drac) {
                        (Some(_), None) => tch::no_grad(|| {
                            self.evaluate(&mb_image, &mb_floats, &mb_actions).log_prob
                        }),
                        _ => ev.log_prob.detach(),
                    };
                    stats.sampler_logp_delta =
                        (log_prob - &mb_old_logp).abs().mean(Kind::Float).double_value(&[]);
                }
                let t = losses::ppo_loss(
                    &ev.log_prob,
                    &mb_old_logp,
                    &adv.index_select(0, &idx),
                    &ev.entropy,
                    &ev.value,
                    &old_value.index_select(0, &idx),
                    &ret.index_select(0, &idx),
                    coefs,
                );
                let loss = match &drac {
                    Some(reg) => {
                        stats.drac += reg.double_value(&[]);
                        &t.loss + reg * p.drac_coef
                    }
                    None => t.loss.shallow_clone(),
                };
                self.opt.zero_grad();
                self.opt.backward(&loss);
                let loss = loss.double_value(&[]);
                let outcome = self.clipped_step(loss, lr, self.frames)?;
                Self::record(stats, outcome, loss);
                stats.approx_kl += t.approx_kl;
                epoch_kl += t.approx_kl;
                minibatches += 1.0;
                stats.clipfrac += t.clipfrac;
                stats.vf_clipfrac += t.vf_clipfrac;
                stats.entropy += t.entropy.double_value(&[]);
                start += mb;
            }
            stats.epochs += 1;
            // KL-adaptive epochs: no further epoch once this one moved the
            // policy past the target.
            if p.target_kl.is_some_and(|target| epoch_kl / minibatches > target) {
                break;
            }
        }
        stats.drac /= (stats.steps + stats.skipped).max(1) as f64;
        self.finish(stats);
        if let Some(sil) = sil {
            self.self_imitation(stats, lr, mb, sil)?;
        }
        if p.aux_every_updates > 0 {
            self.aux.push(AuxBatch { image, floats, returns: real_ret });
            if self.aux.len() >= p.aux_every_updates as usize {
                self.aux_phase(stats, lr, mb, popart)?;
            }
        }
        Ok(())
    }

    /// `ppo.sil_coef`'s self-imitation: `ppo.sil_steps` minibatches of `mb`
    /// distinct kept states (fewer when fewer are kept), drawn from the
    /// learner's shuffling stream (saved with it, as the phase's), on the
    /// frames as seen (no shift); each is a step on `sil_coef ·`
    /// [`losses::sil_loss`] where one of its states has a return above the
    /// value; a minibatch with none takes no step (Adam's momentum would
    /// move the network on a zero gradient).
    fn self_imitation(
        &mut self,
        stats: &mut UpdateStats,
        lr: f64,
        mb: i64,
        batch: SilBatch,
    ) -> anyhow::Result<()> {
        let (p, device) = (self.cfg.ppo.clone(), self.net.var_store().device());
        let n = batch.returns.size()[0];
        let k = mb.min(n);
        for _ in 0..p.sil_steps {
            let perm = permutation(&mut self.rng, n as usize);
            let idx = Tensor::from_slice(&perm[..k as usize]).to_device(device);
            let ev = self.evaluate(
                &batch.image.index_select(0, &idx),
                &batch.floats.index_select(0, &idx),
                &batch.actions.index_select(0, &idx),
            );
            let t = losses::sil_loss(
                &ev.log_prob,
                &ev.value,
                &batch.returns.index_select(0, &idx),
                losses::SIL_VALUE_COEF,
            );
            stats.sil_advantage += t.advantage;
            stats.sil_positive += t.positive;
            if t.positive == 0.0 {
                continue;
            }
            let loss = t.loss * p.sil_coef;
            self.opt.zero_grad();
            self.opt.backward(&loss);
            match self.clipped_step(loss.double_value(&[]), lr, self.frames)? {
                StepOutcome::Applied { .. } => stats.sil_steps += 1,
                StepOutcome::Skipped => stats.skipped += 1,
            }
        }
        stats.sil_advantage /= f64::from(p.sil_steps.max(1));
        stats.sil_positive /= f64::from(p.sil_steps.max(1));
        Ok(())
    }

    /// PPG's auxiliary phase (`ppo.aux_every_updates`) over the kept
    /// updates' states, which it then forgets: `ppo.aux_epochs` shuffled
    /// epochs of minibatches of `mb` states, each step on
    /// [`losses::aux_loss`] against the policy as the phase found it.
    fn aux_phase(
        &mut self,
        stats: &mut UpdateStats,
        lr: f64,
        mb: i64,
        popart: Option<(f64, f64)>,
    ) -> anyhow::Result<()> {
        let kept = std::mem::take(&mut self.aux);
        let image = Tensor::cat(&kept.iter().map(|k| &k.image).collect::<Vec<_>>(), 0);
        let floats = Tensor::cat(&kept.iter().map(|k| &k.floats).collect::<Vec<_>>(), 0);
        let returns = Tensor::cat(&kept.iter().map(|k| &k.returns).collect::<Vec<_>>(), 0);
        // Kept in real units: the head is in this update's standard ones.
        let returns = match popart {
            Some((mean, std)) => (returns - mean) / std,
            None => returns,
        };
        let n = returns.size()[0];
        let n_heads = self.net.arch().n_heads;
        let before = tch::no_grad(|| {
            let mut parts = Vec::new();
            let mut start = 0;
            while start < n {
                let k = mb.min(n - start);
                let (logits, _) =
                    self.forward(&image.narrow(0, start, k), &floats.narrow(0, start, k));
                parts.push(losses::head_log_probs(&logits, n_heads));
                start += k;
            }
            Tensor::cat(&parts, 0)
        });
        let (p, device) = (self.cfg.ppo.clone(), self.net.var_store().device());
        let mut taken = 0u64;
        for _ in 0..p.aux_epochs {
            let perm =
                Tensor::from_slice(&permutation(&mut self.rng, n as usize)).to_device(device);
            let mut start = 0;
            while start < n {
                let idx = perm.narrow(0, start, mb.min(n - start));
                let (logits, value) =
                    self.forward(&image.index_select(0, &idx), &floats.index_select(0, &idx));
                let t = losses::aux_loss(
                    &before.index_select(0, &idx),
                    &logits,
                    &value,
                    &returns.index_select(0, &idx),
                    n_heads,
                    p.aux_clone_coef,
                );
                self.opt.zero_grad();
                self.opt.backward(&t.loss);
                match self.clipped_step(t.loss.double_value(&[]), lr, self.frames)? {
                    StepOutcome::Applied { .. } => stats.aux_steps += 1,
                    StepOutcome::Skipped => stats.skipped += 1,
                }
                stats.aux_value_loss += t.value;
                stats.aux_kl += t.kl;
                taken += 1;
                start += mb;
            }
        }
        stats.aux_value_loss /= taken.max(1) as f64;
        stats.aux_kl /= taken.max(1) as f64;
        Ok(())
    }

    fn record(stats: &mut UpdateStats, outcome: StepOutcome, loss: f64) {
        match outcome {
            StepOutcome::Applied { grad_norm } => {
                stats.steps += 1;
                stats.grad_norm += grad_norm;
                stats.loss += loss;
            }
            StepOutcome::Skipped => stats.skipped += 1,
        }
    }

    /// One optimiser step of any phase of any algorithm (the main epochs,
    /// SIL, PPG's aux phase, GRPO's and DPO's epochs), clipped by the clip
    /// in force at `frames` ([`max_grad_norm_at`]): the one place the
    /// learner steps, so no phase can clip by another value or not at all.
    fn clipped_step(&mut self, loss: f64, lr: f64, frames: u64) -> anyhow::Result<StepOutcome> {
        let clip = max_grad_norm_at(&self.cfg, frames);
        self.opt.step(loss, lr, clip)
    }

    fn finish(&mut self, stats: &mut UpdateStats) {
        let k = (stats.steps + stats.skipped).max(1) as f64;
        stats.approx_kl /= k;
        stats.clipfrac /= k;
        stats.vf_clipfrac /= k;
        stats.entropy /= k;
        stats.kl_ref /= k;
        stats.grad_norm /= stats.steps.max(1) as f64;
        stats.loss /= stats.steps.max(1) as f64;
        self.updates += 1;
    }

    /// One GRPO update on a group of K trajectories (`grpo.objective`):
    /// group-relative advantages of `R_i = Σ_t r_t`, then `update_epochs`
    /// optimiser steps, each accumulating gradients over micro-batches of at
    /// most `grpo.micro_batch_steps` steps (the gradient equals the full-batch one).
    /// Scheduled coefficients at the current frame count; see [`Learner::grpo_update_at`].
    pub fn grpo_update(&mut self, group: &[TrajBatch]) -> anyhow::Result<UpdateStats> {
        self.grpo_update_at(group, self.frames)
    }

    /// [`Learner::grpo_update`] with the entropy, reference-KL and gradient-clip
    /// coefficients scheduled at `schedule_frames` (the group's anchor: frames
    /// before its first trajectory arrived, as the original's `sched_step_anchor`).
    pub fn grpo_update_at(
        &mut self,
        group: &[TrajBatch],
        schedule_frames: u64,
    ) -> anyhow::Result<UpdateStats> {
        let g = self.cfg.grpo.clone();
        self.apply_freeze();
        ensure!(
            group.len() >= 2,
            "a GRPO group needs at least 2 trajectories, got {}",
            group.len()
        );
        if let Some(t) = group.iter().find(|t| t.is_empty()) {
            bail!("empty trajectory in group {}", t.group);
        }
        if g.grouping == Grouping::SameTrack && group.iter().any(|t| t.group != group[0].group) {
            let ids: Vec<u64> = group.iter().map(|t| t.group).collect();
            bail!(
                "GRPO group mixes prompt ids {ids:?}: its baseline would compare different tracks"
            );
        }
        let (speed, frames) = (self.speed(), schedule_frames);
        let ent_coef = scheduled_coefficient(g.ent_coef, &g.ent_coef_schedule, speed, frames);
        let kl_coef = scheduled_coefficient(g.ref_kl_coef, &g.ref_kl_coef_schedule, speed, frames);
        let mut returns: Vec<f64> =
            group.iter().map(|t| t.rewards.iter().map(|&r| f64::from(r)).sum()).collect();
        if let Some(c) = g.reward_clip {
            returns.iter_mut().for_each(|r| *r = r.clamp(-c, c));
        }
        let lr = self.lr();
        let mut stats = UpdateStats { lr, ..Default::default() };
        // The reference follows the update count, a filtered group's update
        // included: synced every `ref_sync_every_updates` updates.
        let need_ref = kl_coef > 0.0;
        if need_ref
            && (self.reference.is_none() || self.updates % u64::from(g.ref_sync_every_updates) == 0)
        {
            self.sync_reference()?;
        }
        if g.filter_zero_std && losses::group_has_zero_std(&returns) {
            stats.frac_zero_std = 1.0;
            self.updates += 1;
            return Ok(stats);
        }
        let adv = losses::group_advantages(&returns, g.normalize_group, g.std_eps);
        let mean = adv.iter().sum::<f64>() / adv.len() as f64;
        stats.adv_var = adv.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / adv.len() as f64;
        let lengths: Vec<usize> = group.iter().map(TrajBatch::len).collect();
        let k = group.len() as f64;
        // Per-step weights of each term (see `losses::aggregation_weights`).
        let (w_pi, w_mean): (Vec<f64>, Vec<f64>) = match g.objective {
            GrpoObjective::Reinforce => (
                adv.iter().map(|a| -a / k).collect(),
                lengths.iter().map(|&l| 1.0 / (k * l as f64)).collect(),
            ),
            GrpoObjective::Clipped => {
                let w = losses::aggregation_weights(
                    &lengths,
                    g.loss_aggregation,
                    g.dr_grpo_max_len as usize,
                );
                (w.clone(), w)
            }
        };
        let device = self.net.var_store().device();
        let per_step = |v: &[f64]| -> Tensor {
            let flat: Vec<f32> = lengths
                .iter()
                .zip(v)
                .flat_map(|(&l, &x)| std::iter::repeat_n(x as f32, l))
                .collect();
            Tensor::from_slice(&flat).to_device(device)
        };
        let (w_pi, w_mean, adv_t) = (per_step(&w_pi), per_step(&w_mean), per_step(&adv));
        let image = cat(group.iter().map(|t| &t.image).collect(), device);
        let floats = cat(group.iter().map(|t| &t.floats).collect(), device);
        let actions = cat(group.iter().map(|t| &t.actions).collect(), device);
        let old_logp = cat(group.iter().map(|t| &t.old_logp).collect(), device);
        let n = old_logp.size()[0];
        let ref_logp = match (&self.reference, need_ref) {
            (Some(r), true) => {
                Some(tch::no_grad(|| r.evaluate_actions(&image, &floats, &actions).log_prob))
            }
            _ => None,
        };
        let mb = i64::from(g.micro_batch_steps).max(1);
        self.net.set_training(true);
        for _ in 0..g.update_epochs {
            self.opt.zero_grad();
            let (mut total, mut kl_sum, mut ratio_sum, mut clip_sum, mut ent_sum) =
                (0.0, 0.0, 0.0, 0.0, 0.0);
            let (mut start, mut kept) = (0, 0i64);
            while start < n {
                let len = mb.min(n - start);
                let r = |t: &Tensor| t.narrow(0, start, len);
                let ev = self.evaluate(&r(&image), &r(&floats), &r(&actions));
                let log_ratio = (&ev.log_prob - r(&old_logp)).detach();
                let ratio = log_ratio.exp();
                if let Some(limit) = g.early_stop_imp_ratio {
                    if ratio.mean(Kind::Float).double_value(&[]) > limit {
                        stats.dropped_micro_batches += 1;
                        start += len;
                        continue;
                    }
                }
                kept += len;
                let pi_term = match g.objective {
                    GrpoObjective::Reinforce => &ev.log_prob * r(&w_pi),
                    GrpoObjective::Clipped => {
                        let c = ClippedCoefs {
                            eps_low: g.clip_eps_low,
                            eps_high: g.clip_eps_high,
                            beta: kl_coef,
                            estimator: g.kl_estimator,
                        };
                        let rl = ref_logp.as_ref().map(r);
                        losses::grpo_clipped_step_loss(
                            &ev.log_prob,
                            &r(&old_logp),
                            rl.as_ref(),
                            &r(&adv_t),
                            c,
                        ) * r(&w_pi)
                    }
                };
                let entropy_term = (&ev.entropy * r(&w_mean)).sum(Kind::Float) * ent_coef;
                // The reinforce objective's reference KL is the original's k1 mean per trajectory;
                // the clipped objective carries its KL inside the per-step loss.
                let kl_term = match (&ref_logp, g.objective) {
                    (Some(rl), GrpoObjective::Reinforce) => {
                        ((&ev.log_prob - r(rl)) * r(&w_mean)).sum(Kind::Float) * kl_coef
                    }
                    _ => Tensor::zeros([], (Kind::Float, device)),
                };
                let loss = pi_term.sum(Kind::Float) - entropy_term + kl_term;
                if let Some(rl) = &ref_logp {
                    kl_sum += (&ev.log_prob - r(rl)).detach().sum(Kind::Float).double_value(&[]);
                }
                self.opt.backward(&loss);
                total += loss.double_value(&[]);
                ratio_sum += ((&ratio - 1.0) - &log_ratio).sum(Kind::Float).double_value(&[]);
                clip_sum += (&ratio - 1.0)
                    .abs()
                    .gt(g.clip_eps_low)
                    .to_kind(Kind::Float)
                    .sum(Kind::Float)
                    .double_value(&[]);
                ent_sum += ev.entropy.detach().sum(Kind::Float).double_value(&[]);
                start += len;
            }
            if kept == 0 {
                // Every micro-batch dropped: no step (a step on zero
                // gradients would still move the weights by Adam's
                // momentum). The policy did not move, so every later epoch
                // would drop them too: the update ends.
                break;
            }
            let outcome = self.clipped_step(total, lr, frames)?;
            Self::record(&mut stats, outcome, total);
            stats.epochs += 1;
            // Means over the steps the epoch trained on, not the dropped.
            let kept = kept as f64;
            let approx_kl = ratio_sum / kept;
            stats.approx_kl += approx_kl;
            stats.clipfrac += clip_sum / kept;
            stats.entropy += ent_sum / kept;
            stats.kl_ref += kl_sum / kept;
            if g.target_kl.is_some_and(|t| approx_kl > t) {
                break;
            }
        }
        self.finish(&mut stats);
        Ok(stats)
    }

    /// One DPO update on preference pairs `(chosen, rejected)` (the original
    /// uses one pair per update; several are averaged). Each pair is truncated
    /// to its common length as the original; a pair with fewer than 2 common
    /// steps is skipped, as the original skips it, and `Ok(None)` means no pair
    /// was left (no optimiser step, the update counter unchanged). The value
    /// head gets the auxiliary loss toward the collectors' values.
    pub fn dpo_update(
        &mut self,
        pairs: &[(TrajBatch, TrajBatch)],
    ) -> anyhow::Result<Option<UpdateStats>> {
        ensure!(!pairs.is_empty(), "DPO update with no pairs");
        let pairs: Vec<&(TrajBatch, TrajBatch)> =
            pairs.iter().filter(|(w, l)| w.len().min(l.len()) >= MIN_DPO_PAIR_STEPS).collect();
        if pairs.is_empty() {
            return Ok(None);
        }
        let d = self.cfg.dpo.clone();
        self.apply_freeze();
        let (speed, frames) = (self.speed(), self.frames);
        let beta = scheduled_coefficient(d.beta, &d.beta_schedule, speed, frames);
        let vf_coef = scheduled_coefficient(d.vf_coef, &d.vf_coef_schedule, speed, frames);
        if self.reference.is_none() || self.updates % u64::from(d.ref_sync_every_updates) == 0 {
            self.sync_reference()?;
        }
        let reference =
            self.reference.as_ref().ok_or_else(|| anyhow::anyhow!("no reference policy"))?;
        // Each pair cut to its common length and moved to the device once.
        let device = self.net.var_store().device();
        let on_device = |t: &TrajBatch, len: i64| -> [Tensor; 4] {
            [&t.image, &t.floats, &t.actions, &t.old_value]
                .map(|x| x.narrow(0, 0, len).to_device(device))
        };
        let cut: Vec<([Tensor; 4], [Tensor; 4])> = pairs
            .iter()
            .map(|(w, l)| {
                let len = w.len().min(l.len()) as i64;
                (on_device(w, len), on_device(l, len))
            })
            .collect();
        let refs: Vec<(Tensor, Tensor)> = cut
            .iter()
            .map(|(w, l)| {
                let sum = |[image, floats, actions, _]: &[Tensor; 4]| {
                    tch::no_grad(|| {
                        reference.evaluate_actions(image, floats, actions).log_prob.sum(Kind::Float)
                    })
                };
                (sum(w), sum(l))
            })
            .collect();
        let lr = self.lr();
        let mut stats = UpdateStats { lr, beta, ..Default::default() };
        self.net.set_training(true);
        let n = pairs.len() as f64;
        for _ in 0..d.update_epochs {
            self.opt.zero_grad();
            let mut total = 0.0;
            for ((w, l), (ref_w, ref_l)) in cut.iter().zip(&refs) {
                let ew = self.evaluate(&w[0], &w[1], &w[2]);
                let el = self.evaluate(&l[0], &l[1], &l[2]);
                let pref = losses::dpo_loss(
                    &ew.log_prob.sum(Kind::Float),
                    ref_w,
                    &el.log_prob.sum(Kind::Float),
                    ref_l,
                    beta,
                    d.loss,
                );
                let vf = (&ew.value - &w[3]).square().mean(Kind::Float)
                    + (&el.value - &l[3]).square().mean(Kind::Float);
                let loss = (pref + vf * vf_coef) / n;
                self.opt.backward(&loss);
                total += loss.double_value(&[]);
                stats.entropy += (ew.entropy.mean(Kind::Float).double_value(&[])
                    + el.entropy.mean(Kind::Float).double_value(&[]))
                    / (2.0 * n);
            }
            let outcome = self.clipped_step(total, lr, frames)?;
            Self::record(&mut stats, outcome, total);
            stats.epochs += 1;
        }
        self.finish(&mut stats);
        Ok(Some(stats))
    }
}

/// The shortest common length of a DPO pair the original trains on
/// (`learner_dpo.py` skips the update below it).
pub const MIN_DPO_PAIR_STEPS: usize = 2;
