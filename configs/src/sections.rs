//! The configuration sections. Every struct rejects unknown keys; every field
//! has a default (the Python original's schema default unless noted).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::validate::Validator;
use crate::Schedule;

/// `training:` — what to train, how long, and the optimiser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainingConfig {
    /// `ppo`, `grpo` or `dpo`.
    pub algorithm: Algorithm,
    /// Seed for network initialisation, the learner's minibatch shuffling and
    /// augmentation, and the collectors' sampling (each collector's stream
    /// from it, its id and its incarnation). Tracks come from their own
    /// seeds (`environment.sim.track_seeds`, `training.eval_tracks`).
    pub seed: u64,
    /// Directory of the run (config snapshot, checkpoints, ONNX, TensorBoard).
    pub run_dir: PathBuf,
    /// libtorch intra-op threads for the learner: `auto` (the default) or a
    /// number ≥ 1. `auto` gives the learner the cores the collectors leave:
    /// see [`LearnerThreads::resolve`].
    pub learner_threads: LearnerThreads,
    /// Where the learner trains: `auto` (CUDA when this rulka was built with
    /// the `cuda` feature and libtorch sees a GPU, else the CPU), `cpu`, or
    /// `cuda` (an error naming what is missing when it cannot be had).
    pub device: LearnerDevice,
    /// Multiplies every schedule's frame counts (`global_schedule_speed`).
    pub global_schedule_speed: f64,
    /// `radam` (the original's), `adam` or `adamw`.
    pub optimizer: OptimizerKind,
    /// Learning rate, geometrically interpolated between knots.
    pub lr_schedule: Schedule,
    /// Adam-family epsilon (the original uses 1e-4).
    pub adam_epsilon: f64,
    /// Adam-family beta1.
    pub adam_beta1: f64,
    /// Adam-family beta2.
    pub adam_beta2: f64,
    /// Decoupled weight decay (AdamW only).
    pub weight_decay: f64,
    /// Discount of the potential-based reward shaping folded into every
    /// trajectory (every algorithm). The first set of
    /// `policy_rollout_gamma_schedule`, `ppo.gamma_schedule`, this, and
    /// `ppo.gamma` is the one used (the original's precedence).
    pub policy_rollout_gamma: Option<f64>,
    /// Schedule for the rollout discount; wins over `policy_rollout_gamma`.
    pub policy_rollout_gamma_schedule: Option<Schedule>,
    /// Seconds between periodic checkpoints.
    pub checkpoint_every_s: u64,
    /// Stop after this many environment frames (None: no bound).
    pub max_frames: Option<u64>,
    /// Stop after this many minutes of wall time (None: no bound).
    pub max_minutes: Option<f64>,
    /// fp16 autocast with dynamic loss scaling for the learner on CUDA (as
    /// the original's `GradScaler`); ignored on CPU.
    pub mixed_precision: bool,
    /// Held-out simulator tracks (seeds of `environment.sim.track`, none of
    /// them a training seed) the trainer drives greedily every
    /// `eval_every_n_updates` updates and once at the end, beside the
    /// autopilot; empty: no held-out evaluation. A list of seeds and
    /// `"a..b"` ranges, or one range.
    #[serde(deserialize_with = "crate::seeds::deserialize")]
    pub eval_tracks: Vec<u64>,
    /// Updates between held-out evaluations (one runs at a time, on a
    /// thread of the trainer, on the weights of the update that started it).
    pub eval_every_n_updates: u64,
    /// Parts of the network held fixed for the first updates of the run
    /// (the original's `pretrain_encoder_freeze` /
    /// `pretrain_actions_head_freeze`, for a run `rulka pretrain` started).
    pub freeze: FreezeConfig,
    /// Image augmentation of the frames the learner trains on (PPO only;
    /// never the collectors' or an export's frames).
    pub augment: AugmentConfig,
}

/// `training.augment:` — random shifts of the frames a PPO update trains
/// on, as RAD and DrQ do (each frame padded by `shift_px` pixels, its edge
/// repeated, and cropped back at a random offset). With `ppo.drac_coef` > 0
/// the objective keeps the frames as seen, and DrAC's regularisers pull
/// the policy and value on shifted frames to those on the frames as seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AugmentConfig {
    /// Pixels of shift each way, at most 8 (0: no augmentation).
    pub shift_px: u32,
}

/// `training.freeze:` — learner updates (counted from the run's first, a
/// pretrained run starting at 0) during which a part of the network gets no
/// optimiser step: its tensors stay bit-identical, then train as the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FreezeConfig {
    /// Updates with the image encoder (`img_head.*`, a Hugging Face
    /// backbone) frozen.
    pub encoder_updates: u64,
    /// Updates with the policy head (`policy_head.*`) frozen.
    pub policy_head_updates: u64,
}

/// `pretrain:` — behaviour cloning with `rulka pretrain` (the original's
/// `config_files/pretrain/bc`): cross-entropy on demonstrated actions, the
/// value head fitted to the drives' discounted returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PretrainConfig {
    /// Passes over the training drives (at most; see `early_stop_patience`).
    pub epochs: u32,
    /// Pairs per optimiser step.
    pub batch_size: usize,
    /// Learning rate (the optimiser is `training.optimizer`).
    pub lr: f64,
    /// One action head per offset, trained on the action that many ms away
    /// (rounded to whole decisions, clamped to the drive), averaged into the
    /// policy head at the end as the original's loader averages `bc_heads`.
    pub bc_time_offsets_ms: Vec<i64>,
    /// Dropout on the features the heads read, while pretraining only.
    pub dropout: f64,
    /// Share of the drives (whole drives, never single frames) held out.
    pub held_out_fraction: f64,
    /// Epochs without a better held-out cross-entropy before stopping (0:
    /// never stop early); the best epoch's weights are kept.
    pub early_stop_patience: u32,
    /// Weight of the value loss (`0.5·(V − G)²`, `G` the discounted return
    /// under the config's rewards and `ppo.gamma`) beside the cross-entropy.
    pub value_coef: f64,
}

impl Default for PretrainConfig {
    fn default() -> Self {
        Self {
            epochs: 30,
            batch_size: 256,
            lr: 1e-3,
            bc_time_offsets_ms: vec![0],
            dropout: 0.0,
            held_out_fraction: 0.2,
            early_stop_patience: 5,
            value_coef: 0.5,
        }
    }
}

impl PretrainConfig {
    /// The `pretrain:` ranges.
    pub(crate) fn validate(&self, v: &mut Validator) {
        v.positive("pretrain.epochs", f64::from(self.epochs));
        v.positive("pretrain.batch_size", self.batch_size as f64);
        v.positive("pretrain.lr", self.lr);
        if self.bc_time_offsets_ms.is_empty() {
            v.push(
                "pretrain.bc_time_offsets_ms",
                "needs at least one offset (0: the action taken)".into(),
            );
        }
        v.range_co("pretrain.dropout", self.dropout, 0.0, 1.0);
        v.range_co("pretrain.held_out_fraction", self.held_out_fraction, 0.0, 1.0);
        v.non_negative("pretrain.value_coef", self.value_coef);
    }
}

impl Default for TrainingConfig {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::Ppo,
            seed: 0,
            run_dir: PathBuf::from("runs/default"),
            learner_threads: LearnerThreads::Auto,
            device: LearnerDevice::Auto,
            global_schedule_speed: 1.0,
            optimizer: OptimizerKind::Radam,
            lr_schedule: Schedule(vec![
                [0.0, 1e-3],
                [3_000_000.0, 5e-5],
                [12_000_000.0, 5e-5],
                [15_000_000.0, 1e-5],
            ]),
            adam_epsilon: 1e-4,
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            weight_decay: 0.0,
            policy_rollout_gamma: None,
            policy_rollout_gamma_schedule: None,
            checkpoint_every_s: 300,
            max_frames: None,
            max_minutes: None,
            mixed_precision: false,
            eval_tracks: Vec::new(),
            eval_every_n_updates: 10,
            freeze: FreezeConfig::default(),
            augment: AugmentConfig::default(),
        }
    }
}

impl TrainingConfig {
    /// The `training:` ranges.
    pub(crate) fn validate(&self, v: &mut Validator) {
        let t = self;
        if let LearnerThreads::Count(n) = t.learner_threads {
            v.positive("training.learner_threads", n as f64);
        }
        v.positive("training.global_schedule_speed", t.global_schedule_speed);
        v.schedule("training.lr_schedule", &t.lr_schedule);
        if t.lr_schedule.values().any(|x| x <= 0.0) {
            v.push("training.lr_schedule", "learning rates must be > 0".into());
        }
        v.positive("training.adam_epsilon", t.adam_epsilon);
        v.range_co("training.adam_beta1", t.adam_beta1, 0.0, 1.0);
        v.range_co("training.adam_beta2", t.adam_beta2, 0.0, 1.0);
        v.non_negative("training.weight_decay", t.weight_decay);
        if let Some(g) = t.policy_rollout_gamma {
            v.range_oc("training.policy_rollout_gamma", g, 0.0, 1.0);
        }
        v.opt_schedule_in_oc(
            "training.policy_rollout_gamma_schedule",
            &t.policy_rollout_gamma_schedule,
            0.0,
            1.0,
        );
        if let Some(m) = t.max_minutes {
            v.positive("training.max_minutes", m);
        }
        if t.checkpoint_every_s == 0 {
            v.push("training.checkpoint_every_s", "must be >= 1".into());
        }
    }
}

/// The learning algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Proximal policy optimisation with GAE.
    Ppo,
    /// Group-relative policy optimisation.
    Grpo,
    /// Direct preference optimisation on trajectory pairs.
    Dpo,
}

/// The optimiser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Rectified Adam (the Python original's optimiser).
    Radam,
    /// Adam.
    Adam,
    /// Adam with decoupled weight decay.
    Adamw,
}

/// `nn:` — the actor-critic: Variant A (CNN + float MLP) by default,
/// Variant B with a Hugging Face ViT (`vis.transformer.use_hf_backbone`),
/// Variant C with `fusion_mode` other than `none` (see `rulka-network`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NnConfig {
    /// Frame width in pixels.
    pub image_width: u32,
    /// Frame height in pixels.
    pub image_height: u32,
    /// Float-only policy: no image head at all.
    pub no_image: bool,
    /// Image-head options.
    pub cnn: CnnConfig,
    /// Width of the two-layer float MLP.
    pub float_hidden_dim: u32,
    /// Width of the two-layer trunk.
    pub dense_hidden_dim: u32,
    /// Image/float fusion: `none` (Variants A and B) or one of Variant C's modes.
    pub fusion_mode: FusionMode,
    /// The image branch of Variants B and C (a transformer instead of `cnn`), freezing.
    pub vis: crate::transformers::VisConfig,
    /// Variant C's fusion stack.
    pub encoder: crate::transformers::EncoderConfig,
}

impl Default for NnConfig {
    fn default() -> Self {
        Self {
            image_width: 64,
            image_height: 64,
            no_image: false,
            cnn: CnnConfig::default(),
            float_hidden_dim: 256,
            dense_hidden_dim: 1024,
            fusion_mode: FusionMode::None,
            vis: crate::transformers::VisConfig::default(),
            encoder: crate::transformers::EncoderConfig::default(),
        }
    }
}

/// `nn.cnn:` — image-head options of the original's `_build_img_head`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CnnConfig {
    /// IMPALA residual stem instead of the vanilla 4-conv stem.
    pub use_impala_cnn: bool,
    /// IMPALA channel multiplier `s` (channels 16s, 32s, 32s).
    pub impala_model_size: u32,
    /// Spectral normalisation on every conv.
    pub use_spectral_norm: bool,
    /// Append `AdaptiveMaxPool2d((s, s))` before flattening.
    pub use_adaptive_maxpool: bool,
    /// Output size `s` of the adaptive max-pool.
    pub adaptive_maxpool_size: u32,
}

impl Default for CnnConfig {
    fn default() -> Self {
        Self {
            use_impala_cnn: false,
            impala_model_size: 2,
            use_spectral_norm: false,
            use_adaptive_maxpool: false,
            adaptive_maxpool_size: 6,
        }
    }
}

/// Image/float fusion mode of the original (`nn.fusion_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FusionMode {
    /// No fusion network: Variant A (CNN + float MLP), or Variant B with a
    /// Hugging Face ViT.
    None,
    /// Image vector ‖ float MLP → bridge (or tokens → fusion trunk → bridge).
    VisionTransformer,
    /// The fused vector cut into tokens, or `[vision | float]` tokens, →
    /// fusion trunk → bridge.
    PostConcat,
    /// `[image tokens | float tokens]` from the raw floats (no float MLP) →
    /// fusion trunk → bridge.
    Unified,
}

/// `ppo:` — PPO learner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    /// Discount.
    pub gamma: f64,
    /// GAE lambda.
    pub gae_lambda: f64,
    /// Policy-ratio clip.
    pub clip_coef: f64,
    /// Value clip (None: plain MSE value loss).
    pub clip_coef_vf: Option<f64>,
    /// Entropy bonus coefficient.
    pub ent_coef: f64,
    /// Value-loss coefficient.
    pub vf_coef: f64,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    /// Epochs over each batch.
    pub update_epochs: u32,
    /// Minibatches per epoch.
    pub num_minibatches: u32,
    /// Normalise advantages over the whole batch.
    pub normalize_advantages: bool,
    /// Collect at least this many steps before an update.
    pub rollout_steps_per_update: u32,
    /// Optional schedule for `gamma`.
    pub gamma_schedule: Option<Schedule>,
    /// Optional schedule for `gae_lambda`.
    pub gae_lambda_schedule: Option<Schedule>,
    /// Optional schedule for `ent_coef`.
    pub ent_coef_schedule: Option<Schedule>,
    /// Optional schedule for `vf_coef`.
    pub vf_coef_schedule: Option<Schedule>,
    /// KL-adaptive epochs: an update stops before its next epoch once an
    /// epoch's mean approximate KL to the collectors' policy is over this
    /// (None: every `update_epochs` epoch runs).
    pub target_kl: Option<f64>,
    /// Rewards divided by a running standard deviation of their discounted
    /// returns before the advantages and value targets (as SB3's and
    /// CleanRL's reward normalisation), the statistic kept with the
    /// learner state.
    pub normalize_returns: bool,
    /// DrAC's coefficient: with `training.augment.shift_px` > 0, the loss
    /// adds `drac_coef · (KL(π(·|s) ‖ π(·|shifted s)) + (V(shifted s) − V(s))²)`
    /// (the frames as seen held fixed) and the PPO objective stays on the
    /// frames as seen; 0: the objective trains on shifted frames (RAD).
    pub drac_coef: f64,
    /// PPG's auxiliary phase (phasic policy gradient, in its one-network
    /// form): after every this many updates, `aux_epochs` epochs over those
    /// updates' states regress the value on the value targets they were
    /// trained towards, while `aux_clone_coef · KL(π_before ‖ π)` holds the
    /// policy where the phase found it (0: no phase, as the original).
    pub aux_every_updates: u32,
    /// Epochs of the auxiliary phase over its states (PPG's `E_aux`).
    pub aux_epochs: u32,
    /// Weight of the auxiliary phase's policy-cloning KL (PPG's `β_clone`).
    pub aux_clone_coef: f64,
    /// PopArt (value normalisation): each update first moves running
    /// moments of the value targets toward the batch's by this step (the
    /// first updates by `max(step, 1/updates)`, a plain average), then
    /// trains the value head on targets standardised by them, with the head
    /// rescaled so that its real-unit outputs are preserved; between updates
    /// the head is in real units again (None: values regressed as they are,
    /// as the original).
    pub popart_beta: Option<f64>,
    /// Self-imitation learning (SIL): the weight of a loss that, after each
    /// update's epochs, takes `sil_steps` minibatch steps on the states of
    /// the `sil_rollouts` rollouts of the run with the highest sums of
    /// rewards, kept by the learner: `−log π(a|s)·max(R − V(s), 0) +
    /// 0.5·0.01·max(R − V(s), 0)²`, R the discounted return-to-go of the
    /// kept rollout from s (in the update's units), so the policy imitates
    /// the kept actions only where they did better than the value expects
    /// (0: no such steps, as the original).
    pub sil_coef: f64,
    /// How many of the run's best rollouts the self-imitation keeps.
    pub sil_rollouts: u32,
    /// Self-imitation's minibatch steps after each update's epochs.
    pub sil_steps: u32,
}

impl Default for PpoConfig {
    fn default() -> Self {
        Self {
            gamma: 0.99,
            gae_lambda: 0.95,
            clip_coef: 0.2,
            clip_coef_vf: None,
            ent_coef: 0.01,
            vf_coef: 0.5,
            max_grad_norm: 0.5,
            update_epochs: 4,
            num_minibatches: 4,
            normalize_advantages: true,
            rollout_steps_per_update: 2048,
            gamma_schedule: None,
            gae_lambda_schedule: None,
            ent_coef_schedule: None,
            vf_coef_schedule: None,
            target_kl: None,
            normalize_returns: false,
            drac_coef: 0.0,
            aux_every_updates: 0,
            aux_epochs: 6,
            aux_clone_coef: 1.0,
            popart_beta: None,
            sil_coef: 0.0,
            sil_rollouts: 16,
            sil_steps: 4,
        }
    }
}

impl PpoConfig {
    /// The `ppo:` ranges.
    pub(crate) fn validate(&self, v: &mut Validator) {
        let p = self;
        v.range_oc("ppo.gamma", p.gamma, 0.0, 1.0);
        v.range_cc("ppo.gae_lambda", p.gae_lambda, 0.0, 1.0);
        v.range_oo("ppo.clip_coef", p.clip_coef, 0.0, 1.0);
        if let Some(c) = p.clip_coef_vf {
            v.non_negative("ppo.clip_coef_vf", c);
        }
        v.non_negative("ppo.ent_coef", p.ent_coef);
        v.non_negative("ppo.vf_coef", p.vf_coef);
        v.positive("ppo.max_grad_norm", p.max_grad_norm);
        v.positive("ppo.update_epochs", p.update_epochs as f64);
        v.positive("ppo.num_minibatches", p.num_minibatches as f64);
        if p.rollout_steps_per_update < 2 {
            v.push("ppo.rollout_steps_per_update", "must be >= 2".into());
        }
        if let Some(k) = p.target_kl {
            v.positive("ppo.target_kl", k);
        }
        v.non_negative("ppo.drac_coef", p.drac_coef);
        if p.aux_every_updates > 0 {
            v.positive("ppo.aux_epochs", p.aux_epochs as f64);
        }
        v.non_negative("ppo.aux_clone_coef", p.aux_clone_coef);
        if let Some(b) = p.popart_beta {
            v.range_oc("ppo.popart_beta", b, 0.0, 1.0);
        }
        v.non_negative("ppo.sil_coef", p.sil_coef);
        if p.sil_coef > 0.0 {
            v.positive("ppo.sil_rollouts", p.sil_rollouts as f64);
            v.positive("ppo.sil_steps", p.sil_steps as f64);
        }
        v.opt_schedule_in_oc("ppo.gamma_schedule", &p.gamma_schedule, 0.0, 1.0);
        v.opt_schedule_in("ppo.gae_lambda_schedule", &p.gae_lambda_schedule, 0.0, 1.0);
        v.opt_schedule_in("ppo.ent_coef_schedule", &p.ent_coef_schedule, 0.0, f64::INFINITY);
        v.opt_schedule_in("ppo.vf_coef_schedule", &p.vf_coef_schedule, 0.0, f64::INFINITY);
    }
}

/// `grpo:` — GRPO learner (both objectives).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpoConfig {
    /// `reinforce` (the original's learner) or `clipped` (seeds 001/003/004).
    pub objective: GrpoObjective,
    /// K trajectories per group.
    pub group_size: u32,
    /// `same_track` (a group shares a track seed — the "prompt") or `any`.
    pub grouping: Grouping,
    /// `mean` or `mean_std` (population std).
    pub normalize_group: GroupNormalization,
    /// Floor of the group's standard deviation: returns are divided by
    /// `max(std, std_eps)`.
    pub std_eps: f64,
    /// Skip the update of a group whose returns all equal (logged as
    /// `frac_zero_std`). Off by default, as the original, which still takes
    /// the entropy / reference-KL step on such a group.
    pub filter_zero_std: bool,
    /// Entropy bonus coefficient.
    pub ent_coef: f64,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    /// Optimiser steps per group.
    pub update_epochs: u32,
    /// Reference policy refreshed every this many group updates.
    pub ref_sync_every_updates: u32,
    /// KL-to-reference coefficient (0 disables the reference forward).
    pub ref_kl_coef: f64,
    /// KL estimator for the clipped objective.
    pub kl_estimator: KlEstimator,
    /// Lower ratio clip ε (clipped objective).
    pub clip_eps_low: f64,
    /// Upper ratio clip ε (clipped objective; DAPO uses 0.28).
    pub clip_eps_high: f64,
    /// Loss aggregation for the clipped objective.
    pub loss_aggregation: LossAggregation,
    /// Fixed length constant of `dr_grpo` aggregation (steps).
    pub dr_grpo_max_len: u32,
    /// Stop the epochs of a group early once approx-KL exceeds this.
    pub target_kl: Option<f64>,
    /// Skip a micro-batch whose mean importance ratio exceeds this.
    pub early_stop_imp_ratio: Option<f64>,
    /// Clip trajectory returns to `[-reward_clip, reward_clip]`.
    pub reward_clip: Option<f64>,
    /// Steps per micro-batch for gradient accumulation (bounds peak memory).
    pub micro_batch_steps: u32,
    /// Optional schedule for `ent_coef`.
    pub ent_coef_schedule: Option<Schedule>,
    /// Optional schedule for `max_grad_norm`.
    pub max_grad_norm_schedule: Option<Schedule>,
    /// Optional schedule for `ref_kl_coef`.
    pub ref_kl_coef_schedule: Option<Schedule>,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        Self {
            objective: GrpoObjective::Reinforce,
            group_size: 4,
            grouping: Grouping::SameTrack,
            normalize_group: GroupNormalization::Mean,
            std_eps: 1e-8,
            filter_zero_std: false,
            ent_coef: 0.01,
            max_grad_norm: 0.5,
            update_epochs: 4,
            ref_sync_every_updates: 50,
            ref_kl_coef: 0.0,
            kl_estimator: KlEstimator::K3,
            clip_eps_low: 0.2,
            clip_eps_high: 0.2,
            loss_aggregation: LossAggregation::SeqMeanTokenMean,
            dr_grpo_max_len: 6000,
            target_kl: None,
            early_stop_imp_ratio: None,
            reward_clip: None,
            micro_batch_steps: 2048,
            ent_coef_schedule: None,
            max_grad_norm_schedule: None,
            ref_kl_coef_schedule: None,
        }
    }
}

impl GrpoConfig {
    /// The `grpo:` ranges.
    pub(crate) fn validate(&self, v: &mut Validator) {
        let g = self;
        if g.group_size < 2 {
            v.push(
                "grpo.group_size",
                format!("{} is too small: a group needs >= 2 trajectories", g.group_size),
            );
        }
        v.positive("grpo.std_eps", g.std_eps);
        v.non_negative("grpo.ent_coef", g.ent_coef);
        v.positive("grpo.max_grad_norm", g.max_grad_norm);
        v.positive("grpo.update_epochs", g.update_epochs as f64);
        v.positive("grpo.ref_sync_every_updates", g.ref_sync_every_updates as f64);
        v.non_negative("grpo.ref_kl_coef", g.ref_kl_coef);
        v.range_oo("grpo.clip_eps_low", g.clip_eps_low, 0.0, 1.0);
        v.positive("grpo.clip_eps_high", g.clip_eps_high);
        v.positive("grpo.dr_grpo_max_len", g.dr_grpo_max_len as f64);
        v.positive("grpo.micro_batch_steps", g.micro_batch_steps as f64);
        if let Some(k) = g.target_kl {
            v.positive("grpo.target_kl", k);
        }
        if let Some(r) = g.early_stop_imp_ratio {
            if !r.is_finite() || r <= 1.0 {
                v.push("grpo.early_stop_imp_ratio", format!("{r} must be a finite number > 1"));
            }
        }
        if let Some(c) = g.reward_clip {
            v.positive("grpo.reward_clip", c);
        }
        v.opt_schedule_in("grpo.ent_coef_schedule", &g.ent_coef_schedule, 0.0, f64::INFINITY);
        v.opt_schedule_in_oc(
            "grpo.max_grad_norm_schedule",
            &g.max_grad_norm_schedule,
            0.0,
            f64::INFINITY,
        );
        v.opt_schedule_in("grpo.ref_kl_coef_schedule", &g.ref_kl_coef_schedule, 0.0, f64::INFINITY);
    }
}

/// GRPO objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrpoObjective {
    /// `−mean_i A_i · Σ_t log π` (the Python original).
    Reinforce,
    /// Clipped importance ratio against the behaviour log-probs.
    Clipped,
}

/// How trajectories are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grouping {
    /// A group's trajectories share one track seed and start state.
    SameTrack,
    /// Any K valid trajectories, as the original.
    Any,
}

/// Group advantage normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupNormalization {
    /// `A = R − mean(R)`.
    Mean,
    /// `A = (R − mean(R)) / max(std(R), eps)` with the population std.
    MeanStd,
}

/// KL estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KlEstimator {
    /// `log π − log π_ref`.
    K1,
    /// Schulman's low-variance k3: `exp(log π_ref − log π) − (log π_ref − log π) − 1`.
    K3,
    /// `|log π − log π_ref|`.
    Abs,
    /// `½ (log π − log π_ref)²` (k2).
    Mse,
    /// The form written in seed 004, `exp(log π − log π_ref) − (log π − log π_ref) − 1`:
    /// k3 with the ratio inverted; biased for KL(π‖π_ref) under samples from π.
    K3Inverted,
}

/// Loss aggregation over (trajectory, step) of the clipped objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossAggregation {
    /// Mean over steps of each trajectory, then over trajectories (vanilla).
    SeqMeanTokenMean,
    /// Mean over all steps of the group.
    TokenMean,
    /// Sum over steps of each trajectory, then mean over trajectories.
    SeqMeanTokenSum,
    /// Sum over all steps divided by `K · dr_grpo_max_len` (Dr. GRPO).
    DrGrpo,
}

/// `dpo:` — DPO learner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpoConfig {
    /// Preference temperature β.
    pub beta: f64,
    /// `sigmoid` (DPO), `ipo` or `hinge`.
    pub loss: DpoLoss,
    /// Reference refreshed every this many updates.
    pub ref_sync_every_updates: u32,
    /// Bounded buffer of online trajectories.
    pub pair_buffer_max: u32,
    /// `online`, `offline` or `both`.
    pub data_mode: DpoDataMode,
    /// Saved trajectories (the JSON Lines `rulka train --save-trajectories`
    /// writes) for the `offline` and `both` modes: within each group (a
    /// track), the best return is paired with the worst, the second with the
    /// second worst, and so on; these pairs train on the file's own rewards.
    pub offline_pairs_jsonl: Option<PathBuf>,
    /// Value auxiliary-loss coefficient.
    pub vf_coef: f64,
    /// Optimiser steps per update (an update holds one pair, or with
    /// `data_mode: both` an online and an offline pair, averaged in each step).
    pub update_epochs: u32,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    /// Optional schedule for `beta`.
    pub beta_schedule: Option<Schedule>,
    /// Optional schedule for `vf_coef`.
    pub vf_coef_schedule: Option<Schedule>,
    /// Optional schedule for `max_grad_norm`.
    pub max_grad_norm_schedule: Option<Schedule>,
}

impl Default for DpoConfig {
    fn default() -> Self {
        Self {
            beta: 0.1,
            loss: DpoLoss::Sigmoid,
            ref_sync_every_updates: 1,
            pair_buffer_max: 64,
            data_mode: DpoDataMode::Online,
            offline_pairs_jsonl: None,
            vf_coef: 0.1,
            update_epochs: 4,
            max_grad_norm: 0.5,
            beta_schedule: None,
            vf_coef_schedule: None,
            max_grad_norm_schedule: None,
        }
    }
}

impl DpoConfig {
    /// The `dpo:` ranges and the offline file it needs.
    pub(crate) fn validate(&self, v: &mut Validator) {
        let d = self;
        v.positive("dpo.beta", d.beta);
        v.positive("dpo.ref_sync_every_updates", d.ref_sync_every_updates as f64);
        if d.pair_buffer_max < 2 {
            v.push("dpo.pair_buffer_max", format!("{} must be >= 2", d.pair_buffer_max));
        }
        if d.data_mode != DpoDataMode::Online && d.offline_pairs_jsonl.is_none() {
            v.push(
                "dpo.offline_pairs_jsonl",
                format!("required when dpo.data_mode is {:?}", d.data_mode).to_lowercase(),
            );
        }
        v.non_negative("dpo.vf_coef", d.vf_coef);
        v.positive("dpo.update_epochs", d.update_epochs as f64);
        v.positive("dpo.max_grad_norm", d.max_grad_norm);
        v.opt_schedule_in_oc("dpo.beta_schedule", &d.beta_schedule, 0.0, f64::INFINITY);
        v.opt_schedule_in("dpo.vf_coef_schedule", &d.vf_coef_schedule, 0.0, f64::INFINITY);
        v.opt_schedule_in_oc(
            "dpo.max_grad_norm_schedule",
            &d.max_grad_norm_schedule,
            0.0,
            f64::INFINITY,
        );
    }
}

/// DPO loss variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DpoLoss {
    /// `−log σ(z)`.
    Sigmoid,
    /// `(z/β − 1/(2β))²`.
    Ipo,
    /// `max(0, 1 − z)`.
    Hinge,
}

/// Where DPO pairs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DpoDataMode {
    /// Best/worst of the online buffer.
    Online,
    /// Pairs from `offline_pairs_jsonl`.
    Offline,
    /// Alternate offline and online.
    Both,
}

/// `rewards:` — per-step reward ingredients to reward, as the original.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardsConfig {
    /// Reward per millisecond of race time (negative: time costs).
    pub constant_reward_per_ms: f64,
    /// Reward per metre advanced along the centreline.
    pub reward_per_m_advanced_along_centerline: f64,
    /// Final-speed term: `reward_per_m · this` per m/s gained.
    pub final_speed_reward_as_if_duration_s: f64,
    /// Not the original's: a run cut off before the finish pays
    /// `constant_reward_per_ms` for the whole
    /// `environment.cutoff_rollout_if_race_not_finished_within_duration_ms`
    /// (the remainder on its last step), as the original's race statistics
    /// count an unfinished race at the cut-off time. Ending early (the
    /// no-progress cut-off) then saves nothing; off by default.
    pub unfinished_runs_pay_until_cutoff: bool,
    /// Speedslide coefficient schedule.
    pub engineered_speedslide_reward_schedule: Schedule,
    /// Neoslide coefficient schedule.
    pub engineered_neoslide_reward_schedule: Schedule,
    /// Kamikaze coefficient schedule.
    pub engineered_kamikaze_reward_schedule: Schedule,
    /// Close-to-checkpoint coefficient schedule.
    pub engineered_close_to_vcp_reward_schedule: Schedule,
    /// Potential: coefficient on distance to the current zone centre.
    pub shaped_reward_dist_to_cur_vcp: f64,
    /// Potential: coefficient on heading to the next zone centre.
    pub shaped_reward_point_to_vcp_ahead: f64,
    /// Potential: distance to the current zone centre is clamped below at this (m).
    pub shaped_reward_min_dist_to_cur_vcp: f64,
    /// Potential: … and above at this (m).
    pub shaped_reward_max_dist_to_cur_vcp: f64,
    /// Close-to-checkpoint term: distance clamped below at this (m).
    pub engineered_reward_min_dist_to_cur_vcp: f64,
    /// Close-to-checkpoint term: … and above at this (m).
    pub engineered_reward_max_dist_to_cur_vcp: f64,
}

impl Default for RewardsConfig {
    fn default() -> Self {
        Self {
            constant_reward_per_ms: -0.0012,
            reward_per_m_advanced_along_centerline: 0.01,
            final_speed_reward_as_if_duration_s: 0.0,
            unfinished_runs_pay_until_cutoff: false,
            engineered_speedslide_reward_schedule: Schedule::constant(0.0),
            engineered_neoslide_reward_schedule: Schedule::constant(0.0),
            engineered_kamikaze_reward_schedule: Schedule::constant(0.0),
            engineered_close_to_vcp_reward_schedule: Schedule::constant(0.0),
            shaped_reward_dist_to_cur_vcp: -0.1,
            shaped_reward_point_to_vcp_ahead: 0.0,
            shaped_reward_min_dist_to_cur_vcp: 2.0,
            shaped_reward_max_dist_to_cur_vcp: 25.0,
            engineered_reward_min_dist_to_cur_vcp: 5.0,
            engineered_reward_max_dist_to_cur_vcp: 25.0,
        }
    }
}

impl RewardsConfig {
    /// The `rewards:` values and schedules.
    pub(crate) fn validate(&self, v: &mut Validator) {
        let r = self;
        for (key, x) in [
            ("rewards.constant_reward_per_ms", r.constant_reward_per_ms),
            (
                "rewards.reward_per_m_advanced_along_centerline",
                r.reward_per_m_advanced_along_centerline,
            ),
            ("rewards.final_speed_reward_as_if_duration_s", r.final_speed_reward_as_if_duration_s),
            ("rewards.shaped_reward_dist_to_cur_vcp", r.shaped_reward_dist_to_cur_vcp),
            ("rewards.shaped_reward_point_to_vcp_ahead", r.shaped_reward_point_to_vcp_ahead),
        ] {
            v.finite(key, x);
        }
        // The learner clamps each distance between its two ends (`f64::clamp`,
        // which takes no NaN and no lower end above the upper).
        for (which, lo, hi) in [
            ("shaped", r.shaped_reward_min_dist_to_cur_vcp, r.shaped_reward_max_dist_to_cur_vcp),
            (
                "engineered",
                r.engineered_reward_min_dist_to_cur_vcp,
                r.engineered_reward_max_dist_to_cur_vcp,
            ),
        ] {
            let (lo_key, hi_key) = (
                format!("rewards.{which}_reward_min_dist_to_cur_vcp"),
                format!("rewards.{which}_reward_max_dist_to_cur_vcp"),
            );
            if v.finite(&lo_key, lo) & v.finite(&hi_key, hi) && lo > hi {
                v.push(&lo_key, format!("{lo} is above {hi_key} ({hi})"));
                v.push(&hi_key, format!("{hi} is below {lo_key} ({lo})"));
            }
        }
        v.schedule(
            "rewards.engineered_speedslide_reward_schedule",
            &r.engineered_speedslide_reward_schedule,
        );
        v.schedule(
            "rewards.engineered_neoslide_reward_schedule",
            &r.engineered_neoslide_reward_schedule,
        );
        v.schedule(
            "rewards.engineered_kamikaze_reward_schedule",
            &r.engineered_kamikaze_reward_schedule,
        );
        v.schedule(
            "rewards.engineered_close_to_vcp_reward_schedule",
            &r.engineered_close_to_vcp_reward_schedule,
        );
    }
}

/// `environment:` — what the collectors drive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvironmentConfig {
    /// `sim` (built-in simulator) or `tmi` (the game over TMInterface).
    pub kind: EnvKind,
    /// Engine steps per decision.
    pub tm_engine_step_per_action: u32,
    /// Milliseconds per engine step.
    pub ms_per_tm_engine_step: u32,
    /// Multi-offset action block; must be `[0, 10, 20, …]`.
    pub rl_action_offsets_ms: Vec<u32>,
    /// Upcoming zone centres in the float vector.
    pub n_zone_centers_in_inputs: u32,
    /// The float vector shows every this-many-th zone centre (reference lines
    /// are sampled every 0.5 m: 20 gives 10 m spacing).
    pub one_every_n_zone_centers_in_inputs: u32,
    /// Zone centres extrapolated past the finish (the zone centres ahead of a
    /// car near the finish come from them).
    pub n_zone_centers_extrapolate_after_end_of_map: u32,
    /// Zone centres extrapolated before the start line (the start zone's index).
    pub n_zone_centers_extrapolate_before_start_of_map: u32,
    /// Spacing of the reference-line points, m (enters the zone reach).
    pub distance_between_checkpoints: f64,
    /// Road width, m: a zone is entered only within
    /// `√((distance_between_checkpoints/2)² + (road_width/2)²)` of its centre.
    pub road_width: f64,
    /// Zone tracking only while the car is above this height (None: −∞, always).
    pub deck_height: Option<f64>,
    /// Previous actions in the float vector.
    pub n_prev_actions_in_inputs: u32,
    /// Contact-material classes one-hot encoded per wheel.
    pub n_contact_material_physics_behavior_types: u32,
    /// The original's span of its temporal input: sets only that input's
    /// normalisation in a fresh network (both environments write 0 into it).
    pub temporal_mini_race_duration_ms: u32,
    /// Cut a rollout that has not finished within this time.
    pub cutoff_rollout_if_race_not_finished_within_duration_ms: u32,
    /// Cut a rollout that has not passed a zone centre within this time.
    pub cutoff_rollout_if_no_vcp_passed_within_duration_ms: u32,
    /// The margin-to-finish input is capped at this many metres (its
    /// normalisation mean; std half of it).
    pub margin_to_announce_finish_meters: f64,
    /// Built-in simulator options.
    pub sim: SimConfig,
    /// TMInterface options.
    pub tmi: TmiConfig,
}

impl Default for EnvironmentConfig {
    fn default() -> Self {
        Self {
            kind: EnvKind::Sim,
            tm_engine_step_per_action: 5,
            ms_per_tm_engine_step: 10,
            rl_action_offsets_ms: vec![0],
            n_zone_centers_in_inputs: 40,
            one_every_n_zone_centers_in_inputs: 20,
            n_zone_centers_extrapolate_after_end_of_map: 1000,
            n_zone_centers_extrapolate_before_start_of_map: 20,
            distance_between_checkpoints: 0.5,
            road_width: 90.0,
            deck_height: None,
            n_prev_actions_in_inputs: 5,
            n_contact_material_physics_behavior_types: 4,
            temporal_mini_race_duration_ms: 7000,
            cutoff_rollout_if_race_not_finished_within_duration_ms: 300_000,
            cutoff_rollout_if_no_vcp_passed_within_duration_ms: 2000,
            margin_to_announce_finish_meters: 700.0,
            sim: SimConfig::default(),
            tmi: TmiConfig::default(),
        }
    }
}

impl EnvironmentConfig {
    /// The `environment:` rules (its `sim:` and `tmi:` parts included).
    pub(crate) fn validate(&self, v: &mut Validator) {
        let e = self;
        v.positive("environment.tm_engine_step_per_action", e.tm_engine_step_per_action as f64);
        v.positive("environment.ms_per_tm_engine_step", e.ms_per_tm_engine_step as f64);
        let offsets = &e.rl_action_offsets_ms;
        let consecutive = offsets.iter().enumerate().all(|(i, &o)| o as usize == 10 * i);
        if offsets.is_empty() || !consecutive {
            v.push(
                "environment.rl_action_offsets_ms",
                format!(
                    "{offsets:?} must be consecutive 10 ms steps from 0, e.g. [0] or [0, 10, 20]"
                ),
            );
        }
        if offsets.len() > 16 {
            v.push(
                "environment.rl_action_offsets_ms",
                format!("{} offsets; at most 16", offsets.len()),
            );
        }
        v.positive("environment.n_zone_centers_in_inputs", e.n_zone_centers_in_inputs as f64);
        v.positive(
            "environment.one_every_n_zone_centers_in_inputs",
            e.one_every_n_zone_centers_in_inputs as f64,
        );
        if e.n_zone_centers_extrapolate_before_start_of_map < 1 {
            v.push(
                "environment.n_zone_centers_extrapolate_before_start_of_map",
                "must be >= 1 (the start zone needs a previous one)".into(),
            );
        }
        let needed = u64::from(e.one_every_n_zone_centers_in_inputs)
            * u64::from(e.n_zone_centers_in_inputs.saturating_sub(1));
        let after = u64::from(e.n_zone_centers_extrapolate_after_end_of_map);
        if after < needed.max(2) {
            v.push(
                "environment.n_zone_centers_extrapolate_after_end_of_map",
                format!(
                    "{after} is too few: {} zone centres every {} points reach {} points past the finish (need >= {})",
                    e.n_zone_centers_in_inputs,
                    e.one_every_n_zone_centers_in_inputs,
                    needed,
                    needed.max(2)
                ),
            );
        }
        v.positive("environment.distance_between_checkpoints", e.distance_between_checkpoints);
        v.positive("environment.road_width", e.road_width);
        if let Some(d) = e.deck_height {
            if !d.is_finite() {
                v.push(
                    "environment.deck_height",
                    format!("{d} is not a finite height (leave it unset for none)"),
                );
            }
        }
        v.positive(
            "environment.cutoff_rollout_if_race_not_finished_within_duration_ms",
            e.cutoff_rollout_if_race_not_finished_within_duration_ms as f64,
        );
        v.positive(
            "environment.cutoff_rollout_if_no_vcp_passed_within_duration_ms",
            e.cutoff_rollout_if_no_vcp_passed_within_duration_ms as f64,
        );
        v.positive(
            "environment.temporal_mini_race_duration_ms",
            e.temporal_mini_race_duration_ms as f64,
        );
        if e.sim.track_seeds.is_empty() {
            v.push("environment.sim.track_seeds", "needs at least one seed".into());
        }
        if let Some(path) = &e.sim.track_from {
            if e.kind == EnvKind::Sim && !path.is_file() {
                v.push(
                    "environment.sim.track_from",
                    format!("{}: no such file (a reference line .npy, N×3)", path.display()),
                );
            }
            if !(e.sim.track_width_m >= 4.0 && e.sim.track_width_m <= 64.0) {
                v.push(
                    "environment.sim.track_width_m",
                    format!("{} is not between 4 and 64 m", e.sim.track_width_m),
                );
            }
        }
        v.positive("environment.tmi.running_speed", e.tmi.running_speed);
        v.positive("environment.tmi.timeout_ms", e.tmi.timeout_ms as f64);
        v.positive("environment.tmi.timeout_during_run_ms", e.tmi.timeout_during_run_ms as f64);
        v.positive("environment.tmi.timeout_between_runs_ms", e.tmi.timeout_between_runs_ms as f64);
        if e.kind == EnvKind::Tmi {
            if e.tmi.maps.is_empty() {
                v.push(
                    "environment.tmi.maps",
                    "environment.kind is tmi but no maps are listed (each: name, map_path, zone_centers)"
                        .into(),
                );
            }
            if e.rl_action_offsets_ms.len() > 1 {
                v.push(
                    "environment.rl_action_offsets_ms",
                    "the game is driven with one action per decision; multi-offset blocks need environment.kind: sim".into(),
                );
            }
        }
        for (i, m) in e.tmi.maps.iter().enumerate() {
            if m.map_path.trim().is_empty() {
                v.push(&format!("environment.tmi.maps[{i}].map_path"), "is empty".into());
            }
            if m.name.trim().is_empty() {
                v.push(&format!("environment.tmi.maps[{i}].name"), "is empty".into());
            }
            // The real-game presets are templates: `<...>` marks what to fill in.
            let zone_centers = m.zone_centers.to_string_lossy();
            for (field, value, what) in [
                ("name", m.name.as_str(), "a short name for the map (TensorBoard tags, logs)"),
                ("map_path", m.map_path.as_str(), "the map's file name, relative to TrackMania's Tracks/Challenges (e.g. A01-Race.Challenge.Gbx)"),
                ("zone_centers", zone_centers.as_ref(), "the path of the map's reference line, an N×3 .npy (rulka map record makes one; docs/your-own-map.md)"),
            ] {
                if is_placeholder(value) {
                    v.push(
                        &format!("environment.tmi.maps[{i}].{field}"),
                        format!("`{value}` is a placeholder of the template: put {what}"),
                    );
                }
            }
        }
        if e.tmi.base_port == 0 {
            v.push("environment.tmi.base_port", "must be 1..=65535".into());
        }
        if let Some(l) = &e.tmi.launch {
            if l.command.is_empty() || l.command[0].trim().is_empty() {
                v.push(
                    "environment.tmi.launch.command",
                    "is empty: the argv that starts one game, e.g. [\"/home/me/tm.sh\", \"{port}\"]"
                        .into(),
                );
            } else if !l.command.iter().any(|a| a.contains("{port}")) {
                v.push(
                    "environment.tmi.launch.command",
                    format!(
                        "{:?} never names {{port}}: each game must listen on its slot's port",
                        l.command
                    ),
                );
            }
            v.positive("environment.tmi.launch.startup_timeout_s", f64::from(l.startup_timeout_s));
            if !l.restart_every_h.is_finite() || l.restart_every_h < 0.0 {
                v.push(
                    "environment.tmi.launch.restart_every_h",
                    format!("{} must be >= 0 (0: never)", l.restart_every_h),
                );
            }
            v.positive("environment.tmi.launch.max_failures", f64::from(l.max_failures));
            v.positive("environment.tmi.launch.max_backoff_s", f64::from(l.max_backoff_s));
        }

        v.positive(
            "environment.margin_to_announce_finish_meters",
            e.margin_to_announce_finish_meters,
        );
    }
}

/// Environment kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    /// The built-in simulator.
    Sim,
    /// The real game over the TMInterface socket protocol.
    Tmi,
}

/// `environment.sim:` — built-in simulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Track seeds cycled by collectors (each is a GRPO "prompt"): a list of
    /// seeds and `"a..b"` ranges (`b` excluded), or one range.
    #[serde(deserialize_with = "crate::seeds::deserialize")]
    pub track_seeds: Vec<u64>,
    /// Track difficulty preset.
    pub track: TrackPreset,
    /// A real map's reference line (`.npy`, `N×3` points 0.5 m apart, the
    /// original's `maps/*.npy`; `rulka map record` makes one): the simulator
    /// drives that shape instead of generated tracks. Every seed is then this
    /// track; the float vector's zone centres are this line's, as on the game.
    pub track_from: Option<PathBuf>,
    /// Road width of a `track_from` track, wall to wall, m.
    pub track_width_m: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            track_seeds: vec![0],
            track: TrackPreset::Medium,
            track_from: None,
            track_width_m: 16.0,
        }
    }
}

/// Simulator track difficulty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrackPreset {
    /// Short, gentle curves.
    Easy,
    /// Mixed curves.
    Medium,
    /// Long, sharp curves.
    Hard,
}

/// `environment.tmi:` — the game over TMInterface.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TmiConfig {
    /// Host of the TMInterface plugin socket.
    pub host: String,
    /// Port of collector 0; collector i uses `base_port + i`.
    pub base_port: u16,
    /// Game speed multiplier while the policy is not thinking.
    pub running_speed: f64,
    /// The client's socket timeout: how long it waits for the game.
    pub timeout_ms: u32,
    /// The plugin's response timeout during a run (`set_timeout`).
    pub timeout_during_run_ms: u32,
    /// The plugin's response timeout between runs.
    pub timeout_between_runs_ms: u32,
    /// Camera set at the start of the first run (`cam N`).
    pub game_camera_number: u32,
    /// The maps collectors cycle (each a GRPO "prompt"; a group = one map).
    pub maps: Vec<MapEntry>,
    /// How collectors start the game themselves (unset: each game is started
    /// by hand, and a game that does not answer is named every 30 s).
    pub launch: Option<LaunchConfig>,
}

/// `environment.tmi.launch:` — each collector slot launches, watches and
/// relaunches its own game.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LaunchConfig {
    /// The command that starts one game with TMInterface listening on a
    /// port, as an argv list; `{port}` and `{id}` are replaced by the slot's
    /// port and collector id. E.g. a Wine script `["/home/me/tm.sh", "{port}"]`,
    /// TMLoader on Windows `["TMLoader.exe", "run", "TmForever", "default",
    /// "/configstring=set custom_port {port}"]`.
    pub command: Vec<String>,
    /// How long a launched game has to answer on its port.
    pub startup_timeout_s: u32,
    /// Each game is restarted (between runs) after this many hours; 0: never.
    /// Games slow down over a long session.
    pub restart_every_h: f64,
    /// Between SIGTERM to a game's process tree and SIGKILL.
    pub kill_grace_s: u32,
    /// TMInterface console commands sent once the game answers.
    pub post_launch: Vec<String>,
    /// A command run after a game's processes are ended, for games rulka
    /// cannot see as processes (Windows games started from WSL2), as an argv
    /// list with `{port}` and `{id}`; e.g. `["taskkill.exe", "/F", "/FI",
    /// "WINDOWTITLE eq TrackMania*{port}*"]`.
    pub stop_command: Option<Vec<String>>,
    /// Consecutive failed launches after which a slot is reported failed
    /// (it keeps trying, every `max_backoff_s`).
    pub max_failures: u32,
    /// Longest wait between relaunches (the back-off doubles from 2 s).
    pub max_backoff_s: u32,
}

impl Default for LaunchConfig {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            startup_timeout_s: 120,
            restart_every_h: 12.0,
            kill_grace_s: 5,
            post_launch: vec![
                "set unfocused_fps_limit false".into(),
                "set skip_map_load_screens true".into(),
                "set autorewind false".into(),
            ],
            stop_command: None,
            max_failures: 5,
            max_backoff_s: 300,
        }
    }
}

impl Default for TmiConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_string(),
            base_port: 8478,
            running_speed: 512.0,
            timeout_ms: 12_100,
            timeout_during_run_ms: 10_100,
            timeout_between_runs_ms: 600_000_000,
            game_camera_number: 2,
            maps: Vec::new(),
            launch: None,
        }
    }
}

/// One map of `environment.tmi.maps` (the original's `map_cycle` entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapEntry {
    /// Short name (TensorBoard tags, logs).
    pub name: String,
    /// The path the game loads (`map <path>`, relative to TrackMania's
    /// `Tracks/Challenges`), e.g. `A01-Race.Challenge.Gbx`.
    pub map_path: String,
    /// The map's reference line: an `.npy` of `N×3` points 0.5 m apart
    /// (the original's `maps/*.npy`).
    pub zone_centers: PathBuf,
    /// The map's real checkpoints (`.npy`, `K×3`), when you have them: zone
    /// advances are gated by them as the original's
    /// `sync_virtual_and_real_checkpoints`.
    #[serde(default)]
    pub checkpoints: Option<PathBuf>,
}

/// `collectors:` — collector processes and their shared-memory rings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollectorsConfig {
    /// Number of collector processes.
    pub count: u32,
    /// Steps per trajectory chunk written to a ring.
    pub chunk_steps: u32,
    /// Chunks a ring holds.
    pub ring_chunks: u32,
    /// What a collector does when its ring is full.
    pub backpressure: Backpressure,
    /// Blocking timeout for `block` back-pressure.
    pub block_timeout_ms: u32,
    /// The original's key, accepted and read nowhere: rulka's collectors take
    /// each new weight snapshot as soon as it is published (a background
    /// thread builds its session; the next decision uses it).
    pub weight_refresh_every_n_actions: u32,
    /// A collector silent for this long is considered hung and restarted.
    pub heartbeat_timeout_ms: u32,
    /// Every this many rollouts a collector drives greedily (an evaluation
    /// run, logged as `eval_*`, not trained on); 0 = never.
    pub eval_every_n_rollouts: u32,
    /// Which training tracks the exploration runs drive: the cycle, or a
    /// prioritised replay of the tracks the policy is least sure on.
    pub curriculum: CurriculumConfig,
}

/// `collectors.curriculum:` — prioritised level replay (PLR) over the
/// training tracks (`environment.sim.track_seeds`, or the game's
/// `environment.tmi.maps`), kept by each collector. An exploration run
/// replays a driven track with probability `replay`, otherwise it drives
/// the cycle's next track. A track's score is its last exploration run's
/// mean surprise, `-log π(a|s)` of the actions taken (an estimate of the
/// policy's entropy along the run). Replayed tracks are drawn with
/// probability `(1 - staleness) · P_rank + staleness · P_stale`:
/// `P_rank ∝ (1/rank)^(1/temperature)` (rank 1: the highest score) and
/// `P_stale ∝` the exploration runs since the track was last driven.
/// Greedy (evaluation) runs keep the cycle and score nothing. The scores
/// live in the collector: a restarted collector starts over.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CurriculumConfig {
    /// Probability an exploration run replays a scored track, in [0, 1)
    /// (0: off, the plain cycle).
    pub replay: f64,
    /// Rank temperature (> 0): lower concentrates replays on the top scores.
    pub temperature: f64,
    /// Weight of staleness in the replay distribution, in [0, 1].
    pub staleness: f64,
}

impl Default for CurriculumConfig {
    fn default() -> Self {
        Self { replay: 0.0, temperature: 1.0, staleness: 0.3 }
    }
}

impl Default for CollectorsConfig {
    fn default() -> Self {
        Self {
            count: 4,
            chunk_steps: 64,
            ring_chunks: 32,
            backpressure: Backpressure::Block,
            block_timeout_ms: 5000,
            weight_refresh_every_n_actions: 8,
            heartbeat_timeout_ms: 30_000,
            eval_every_n_rollouts: 10,
            curriculum: CurriculumConfig::default(),
        }
    }
}

impl CollectorsConfig {
    /// The `collectors:` ranges (its count against the transport is the config's rule).
    pub(crate) fn validate(&self, v: &mut Validator) {
        let c = self;
        v.positive("collectors.chunk_steps", c.chunk_steps as f64);
        if c.ring_chunks < 2 {
            v.push("collectors.ring_chunks", format!("{} must be >= 2", c.ring_chunks));
        }
        v.positive("collectors.block_timeout_ms", c.block_timeout_ms as f64);
        v.positive(
            "collectors.weight_refresh_every_n_actions",
            c.weight_refresh_every_n_actions as f64,
        );
        v.positive("collectors.heartbeat_timeout_ms", c.heartbeat_timeout_ms as f64);
        let k = &c.curriculum;
        v.range_co("collectors.curriculum.replay", k.replay, 0.0, 1.0);
        v.positive("collectors.curriculum.temperature", k.temperature);
        v.range_cc("collectors.curriculum.staleness", k.staleness, 0.0, 1.0);
    }
}

/// Ring back-pressure policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backpressure {
    /// Block with a timeout (time spent waiting is counted).
    Block,
    /// Drop the oldest, counted: on shared memory the oldest chunk is
    /// overwritten (the trajectory it belonged to is then dropped whole by
    /// the trainer, never spliced); over NATS the outbox drops its oldest
    /// whole trajectories.
    DropOldest,
}

/// `inference:` — the policy engine on ONNX Runtime: the collectors', and
/// that of every other process that runs the exported policy (the
/// trainer's held-out evaluation, `rulka eval`, `sim render --model`,
/// `sim replay`, `rulka gpu check`); `weights` and `quant_block` shape every
/// export (the trainer's `model.onnx`, each snapshot's, `rulka export`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceConfig {
    /// `cpu`, `cuda` or `tensorrt`.
    pub provider: Provider,
    /// What to do when the provider cannot be used: `none` (error) or `cpu`.
    pub fallback: Fallback,
    /// ONNX Runtime intra-op threads.
    pub intra_op_threads: u32,
    /// GPU ordinal for CUDA/TensorRT.
    pub device_id: u32,
    /// TensorRT FP16 kernels.
    pub tensorrt_fp16: bool,
    /// Root of the TensorRT engine cache: one folder per network
    /// architecture, input shape and precision, shared by runs and
    /// collectors (default `$XDG_CACHE_HOME/rulka/tensorrt`, else
    /// `~/.cache/rulka/tensorrt`). Read with `provider: tensorrt` and
    /// `tensorrt_refit: true` only.
    pub tensorrt_engine_cache_dir: Option<PathBuf>,
    /// TensorRT's timing cache (kept in the engine cache's root), which
    /// shortens later engine builds on the same GPU; used where the engine
    /// cache is (`tensorrt_refit: true`).
    pub tensorrt_timing_cache: bool,
    /// `provider: tensorrt`: build one weight-stripped engine per
    /// architecture and input shape and refit it with each weight snapshot
    /// (checked against the CPU before it serves) instead of building a new
    /// engine for every snapshot (seconds to minutes each). `false`: a full
    /// build per snapshot, with no engine cache (a cache keyed by the model
    /// would serve the old weights).
    pub tensorrt_refit: bool,
    /// GPU providers: replay the decision as a CUDA graph (captured when a
    /// session warms up; the batch size is then fixed to the first call's).
    /// A session that cannot be captured runs without (logged). Ignored by
    /// the CPU provider.
    pub cuda_graph: bool,
    /// `provider: cuda`: how cuDNN picks convolution algorithms when a
    /// session is built: `heuristic` (fast to build, the default: every
    /// weight snapshot builds one), `exhaustive` (times every algorithm:
    /// seconds per build) or `default`.
    pub cuda_conv_search: CudaConvSearch,
    /// How exported models store the weights of the large matrix
    /// multiplications (`fp32`, `int8`, `int4`; see `rulka export --weights`).
    /// Inputs and outputs are the same in every format.
    pub weights: WeightFormat,
    /// Weights per quantization block (one scale each) for `int4`, a power of
    /// two ≥ 16; `int8` has one scale per output row and no blocks.
    pub quant_block: u32,
    /// `rulka export --check` of an `int8`/`int4` model fails when the mean
    /// KL(π_fp32 ‖ π_quant) over its observations exceeds this.
    pub quant_max_mean_kl: f64,
}

impl Default for InferenceConfig {
    fn default() -> Self {
        Self {
            provider: Provider::Cpu,
            fallback: Fallback::None,
            intra_op_threads: 1,
            device_id: 0,
            tensorrt_fp16: false,
            tensorrt_engine_cache_dir: None,
            tensorrt_timing_cache: true,
            tensorrt_refit: true,
            cuda_graph: true,
            cuda_conv_search: CudaConvSearch::Heuristic,
            weights: WeightFormat::Fp32,
            quant_block: 32,
            quant_max_mean_kl: 1e-3,
        }
    }
}

impl InferenceConfig {
    /// The `inference:` ranges and the weight format a provider takes.
    pub(crate) fn validate(&self, v: &mut Validator) {
        v.positive("inference.intra_op_threads", self.intra_op_threads as f64);
        let qb = self.quant_block;
        if qb < 16 || !qb.is_power_of_two() {
            v.push("inference.quant_block", format!("{qb} must be a power of two >= 16"));
        }
        v.positive("inference.quant_max_mean_kl", self.quant_max_mean_kl);
        if self.weights != WeightFormat::Fp32 && self.provider != Provider::Cpu {
            v.push(
                "inference.weights",
                format!(
                    "{} weights are for CPU collectors (inference.provider is {:?}); use fp32",
                    self.weights.as_str(),
                    self.provider
                ),
            );
        }
    }
}

/// Storage of the exported model's large matrix-multiplication weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WeightFormat {
    /// 32-bit floats, as trained.
    #[default]
    Fp32,
    /// 8-bit codes, one `f32` scale per output row.
    Int8,
    /// 4-bit codes, one `f32` scale per block of `quant_block` weights.
    Int4,
}

impl WeightFormat {
    /// Bits per stored weight (32 for `fp32`).
    pub fn bits(self) -> u32 {
        match self {
            WeightFormat::Fp32 => 32,
            WeightFormat::Int8 => 8,
            WeightFormat::Int4 => 4,
        }
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WeightFormat::Fp32 => "fp32",
            WeightFormat::Int8 => "int8",
            WeightFormat::Int4 => "int4",
        }
    }
}

impl std::str::FromStr for WeightFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fp32" => Ok(WeightFormat::Fp32),
            "int8" => Ok(WeightFormat::Int8),
            "int4" => Ok(WeightFormat::Int4),
            other => Err(format!("weight format {other:?} is not fp32, int8 or int4")),
        }
    }
}

/// `training.device`: where the learner's network and its batches live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LearnerDevice {
    /// CUDA when available, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// The first CUDA GPU (cargo feature `cuda`).
    Cuda,
}

/// `training.learner_threads`: `auto` or a number of libtorch intra-op
/// threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LearnerThreads {
    /// The cores the collectors leave ([`LearnerThreads::resolve`]) at
    /// the start; a learner on the CPU then follows the cores the rest of
    /// the machine leaves it, measured every 10 s by the trainer.
    Auto,
    /// This many threads.
    Count(usize),
}

impl LearnerThreads {
    /// The learner's intra-op threads on a machine of `cores` cores, where
    /// `collector_threads` threads belong to local collectors: a number is
    /// itself; `auto` is the cores left (at least 1). A learner on a GPU
    /// needs few CPU threads, so `auto` gives it at most 2 there
    /// (`on_gpu`).
    pub fn resolve(self, cores: usize, collector_threads: usize, on_gpu: bool) -> usize {
        match self {
            Self::Count(n) => n.max(1),
            Self::Auto if on_gpu => cores.saturating_sub(collector_threads).clamp(1, 2),
            Self::Auto => cores.saturating_sub(collector_threads).max(1),
        }
    }
}

impl Serialize for LearnerThreads {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Count(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for LearnerThreads {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Count(i64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Count(n) => Ok(Self::Count(usize::try_from(n).unwrap_or(0))),
            Raw::Text(t) if t == "auto" => Ok(Self::Auto),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "learner_threads: expected `auto` or a number of threads, got `{t}`"
            ))),
        }
    }
}

/// ONNX Runtime execution provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// CPU.
    Cpu,
    /// CUDA (cargo feature `cuda`).
    Cuda,
    /// TensorRT (cargo feature `tensorrt`).
    Tensorrt,
}

/// How cuDNN picks convolution algorithms (`inference.cuda_conv_search`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CudaConvSearch {
    /// cuDNN's heuristics: no timing runs.
    Heuristic,
    /// Time every algorithm once per session.
    Exhaustive,
    /// cuDNN's default algorithm.
    Default,
}

/// Fallback when the configured provider is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Fail with an error naming the missing provider.
    None,
    /// Use the CPU provider instead (logged).
    Cpu,
}

/// `state_normalization:` — overrides of the zone-centre normalisation of a
/// fresh network (the original's keys). Unset: the game's statistics for
/// `environment.kind: tmi`, the simulator's for `sim` (see
/// [`crate::float_inputs_mean_std`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateNormalizationConfig {
    /// 120 numbers: 40 zone centres × (lateral, vertical, forward) means, m.
    pub waypoint_mean_40cp: Option<Vec<f64>>,
    /// 120 numbers: the matching standard deviations (> 0).
    pub waypoint_std_40cp: Option<Vec<f64>>,
}

impl StateNormalizationConfig {
    /// Both overrides hold 120 finite numbers, the deviations > 0.
    pub(crate) fn validate(&self, v: &mut Validator) {
        let sn = self;
        for (key, values, std) in [
            ("state_normalization.waypoint_mean_40cp", &sn.waypoint_mean_40cp, false),
            ("state_normalization.waypoint_std_40cp", &sn.waypoint_std_40cp, true),
        ] {
            let Some(values) = values else { continue };
            if values.len() != 120 {
                v.push(
                    key,
                    format!("{} numbers; expected 120 (40 zone centres × 3)", values.len()),
                );
            }
            if let Some((i, x)) =
                values.iter().enumerate().find(|(_, x)| !x.is_finite() || (std && **x <= 0.0))
            {
                v.push(
                    key,
                    format!(
                        "entry {i} is {x}; {}",
                        if std {
                            "standard deviations must be finite and > 0"
                        } else {
                            "must be finite"
                        }
                    ),
                );
            }
        }
    }
}

/// `transport:` — how trajectories and weights travel between collectors and
/// the trainer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    /// `shm` (shared memory, one machine) or `nats` (NATS JetStream, collectors anywhere).
    pub kind: TransportKind,
    /// NATS settings.
    pub nats: NatsConfig,
}

/// Transport kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// Shared memory (`/dev/shm`): collectors on the trainer's machine.
    #[default]
    Shm,
    /// NATS JetStream: collectors on any machine that reaches the server.
    Nats,
}

/// `transport.nats:` — the NATS server and the run on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// Server URL (`nats://host:4222`, `tls://…`). Unset: `rulka train`
    /// starts a local `nats-server` (see `listen`, `port`).
    pub url: Option<String>,
    /// The run's name on the server (`[A-Za-z0-9_-]`); unset: the run
    /// directory's name.
    pub run: Option<String>,
    /// Token authentication (or `$RULKA_NATS_TOKEN`).
    pub token: Option<String>,
    /// User authentication: name (or `$RULKA_NATS_USER`).
    pub user: Option<String>,
    /// User authentication: password (or `$RULKA_NATS_PASSWORD`).
    pub password: Option<String>,
    /// TLS: CA certificate, client certificate and key (PEM files).
    pub tls: Option<NatsTlsConfig>,
    /// The local server's listen address (`0.0.0.0` to let game PCs connect).
    pub listen: String,
    /// The local server's port (0: a free one).
    pub port: u16,
    /// Size cap of the run's trajectory stream, MiB (full: collectors wait or drop).
    pub stream_max_mib: u32,
    /// Seconds the server waits for the trainer's ack before redelivering a chunk.
    pub ack_wait_s: u32,
    /// A collector whose server is out of reach keeps driving and holds its
    /// finished chunks in an outbox of up to this many MiB, delivered in order
    /// when the server is back. A full outbox makes the collector wait
    /// (`collectors.backpressure: block`), or drops its oldest whole
    /// trajectories, counted (`drop_oldest`).
    pub outbox_mib: u32,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            url: None,
            run: None,
            token: None,
            user: None,
            password: None,
            tls: None,
            listen: "127.0.0.1".to_string(),
            port: 0,
            stream_max_mib: 1024,
            ack_wait_s: 60,
            outbox_mib: 64,
        }
    }
}

impl NatsConfig {
    /// The `transport.nats:` names, URL and sizes.
    pub(crate) fn validate(&self, v: &mut Validator) {
        let n = self;
        if let Some(r) = &n.run {
            if r.is_empty()
                || r.len() > 64
                || !r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                v.push("transport.nats.run", format!("{r:?}: use 1 to 64 of A-Z a-z 0-9 - _"));
            }
        }
        if let Some(u) = &n.url {
            if !(u.starts_with("nats://") || u.starts_with("tls://")) {
                v.push("transport.nats.url", format!("{u:?} must start with nats:// or tls://"));
            }
        }
        v.positive("transport.nats.stream_max_mib", f64::from(n.stream_max_mib));
        v.positive("transport.nats.ack_wait_s", f64::from(n.ack_wait_s));
        v.positive("transport.nats.outbox_mib", f64::from(n.outbox_mib));
        if n.user.is_some() != n.password.is_some() {
            v.push("transport.nats.password", "user and password go together".into());
        }
    }
}

/// `transport.nats.tls:` — PEM files.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsTlsConfig {
    /// CA certificate that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// Client certificate (servers that verify clients).
    pub cert: Option<PathBuf>,
    /// The client certificate's key.
    pub key: Option<PathBuf>,
}

/// A template's `<...>` placeholder, left in a value to be filled in.
fn is_placeholder(value: &str) -> bool {
    value.find('<').is_some_and(|a| value[a..].contains('>'))
}
