//! Who reads each configuration key: the algorithms whose runs use it,
//! the environments, and which part of rulka reads it for what. The
//! configuration reference (docs/reference/config.md) is made from this
//! table, the schema's doc comments and the defaults; its test fails when
//! a key of the schema has no entry here (so a new key must say who reads
//! it) or an entry names no key.
//!
//! An entry covers a key or a section (its prefix); the longest matching
//! prefix decides. A key read only under some algorithms or environments
//! is ignored by the others unless `Config::validate` refuses it there.
//!
//! ```
//! use rulka_config::readers::reader_of;
//! use rulka_config::Algorithm;
//!
//! let sil = reader_of("ppo.sil_coef").unwrap();
//! assert_eq!(sil.algorithms, &[Algorithm::Ppo]);
//! assert!(reader_of("ppo.gamma").unwrap().algorithms.len() == 3); // the shaping discount of every algorithm
//! ```

use crate::{Algorithm, EnvKind};

/// One entry of [`READERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reader {
    /// A key or a section, dotted (`ppo`, `ppo.gamma`, `environment.tmi.maps[]`).
    pub prefix: &'static str,
    /// The algorithms whose runs read it.
    pub algorithms: &'static [Algorithm],
    /// The environments it applies to.
    pub environments: &'static [EnvKind],
    /// Which part of rulka reads it, and for what.
    pub by: &'static str,
}

const ALL: &[Algorithm] = &[Algorithm::Ppo, Algorithm::Grpo, Algorithm::Dpo];
const BOTH: &[EnvKind] = &[EnvKind::Sim, EnvKind::Tmi];

impl Reader {
    /// "`by` (PPO only; the simulator only)", as the reference says it.
    pub fn describe(&self) -> String {
        let mut scope = Vec::new();
        if self.algorithms.len() < ALL.len() {
            let names: Vec<&str> = self
                .algorithms
                .iter()
                .map(|a| match a {
                    Algorithm::Ppo => "PPO",
                    Algorithm::Grpo => "GRPO",
                    Algorithm::Dpo => "DPO",
                })
                .collect();
            scope.push(format!("{} only", names.join(" and ")));
        }
        if self.environments.len() < BOTH.len() {
            scope.push(match self.environments {
                [EnvKind::Sim] => "the simulator only".to_string(),
                _ => "the game (TMInterface) only".to_string(),
            });
        }
        if scope.is_empty() {
            self.by.to_string()
        } else {
            format!("{} ({})", self.by, scope.join("; "))
        }
    }
}

/// The entry covering `key` (dotted; a list's items may be written
/// `maps[]`): the longest prefix of [`READERS`] that is `key` or a section
/// above it.
pub fn reader_of(key: &str) -> Option<&'static Reader> {
    let key = key.replace("[]", "");
    READERS
        .iter()
        .filter(|r| key == r.prefix || key.starts_with(&format!("{}.", r.prefix)))
        .max_by_key(|r| r.prefix.len())
}

/// Every section and the exceptions within it.
pub const READERS: &[Reader] = &[
    Reader {
        prefix: "training",
        algorithms: ALL,
        environments: BOTH,
        by: "rulka train: the trainer process and its learner (every algorithm); see the exceptions below for what else reads a key",
    },
    Reader {
        prefix: "training.algorithm",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer (which pending batches/groups/pairs and which update run, TensorBoard tags); collectors (GRPO with grpo.grouping same_track drives grpo.group_size runs per track); config validation (the algorithm-specific refusals)",
    },
    Reader {
        prefix: "training.seed",
        algorithms: ALL,
        environments: BOTH,
        by: "learner (fresh network init, minibatch-shuffle RNG, PPO augmentation shift stream); collectors (per-slot sampling seed and curriculum draws: seed ^ id ^ incarnation); rulka pretrain (init, held-out split, shuffles); rulka demo (rulka init takes --seed instead). Not used for track generation (tracks come from environment.sim.track_seeds)",
    },
    Reader {
        prefix: "training.run_dir",
        algorithms: ALL,
        environments: BOTH,
        by: "rulka train with --config (the run directory unless --run-dir; ignored by --resume, whose directory is given); rulka pretrain (unless --run-dir); rulka import",
    },
    Reader {
        prefix: "training.learner_threads",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer only: libtorch intra-op threads at start (auto: cores minus collectors.count x inference.intra_op_threads) and, auto on the CPU, the 10 s governor; not rulka pretrain",
    },
    Reader {
        prefix: "training.device",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer (learner device) and rulka pretrain",
    },
    Reader {
        prefix: "training.global_schedule_speed",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer/learner: scales the frame axis of every schedule (lr, ppo/grpo/dpo *_schedule, rewards engineered schedules, rollout gamma schedule) and the logged scheduled values; rulka pretrain reads schedules at frame 0 only",
    },
    Reader {
        prefix: "training.optimizer",
        algorithms: ALL,
        environments: BOTH,
        by: "learner optimiser (every algorithm) and rulka pretrain's optimiser; rulka import / export --torch print a note when it is not radam",
    },
    Reader {
        prefix: "training.adam_epsilon",
        algorithms: ALL,
        environments: BOTH,
        by: "learner optimiser (every algorithm), rulka pretrain; rulka import compares it with the original's optimizer file",
    },
    Reader {
        prefix: "training.adam_beta1",
        algorithms: ALL,
        environments: BOTH,
        by: "learner optimiser (every algorithm), rulka pretrain; rulka import compares it",
    },
    Reader {
        prefix: "training.adam_beta2",
        algorithms: ALL,
        environments: BOTH,
        by: "learner optimiser (every algorithm), rulka pretrain; rulka import compares it",
    },
    Reader {
        prefix: "training.weight_decay",
        algorithms: ALL,
        environments: BOTH,
        by: "learner optimiser and rulka pretrain, applied only with optimizer adamw (silently no effect with radam/adam; not refused)",
    },
    Reader {
        prefix: "training.lr_schedule",
        algorithms: ALL,
        environments: BOTH,
        by: "learner learning rate of every algorithm (geometric interpolation, frame clock); not rulka pretrain (it uses pretrain.lr)",
    },
    Reader {
        prefix: "training.policy_rollout_gamma",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer prepare stage: the potential-shaping discount folded into every trajectory's rewards (all algorithms), only when neither training.policy_rollout_gamma_schedule nor ppo.gamma_schedule is set; rulka pretrain value targets (frame 0)",
    },
    Reader {
        prefix: "training.policy_rollout_gamma_schedule",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer prepare stage: shaping discount of every trajectory (all algorithms), first in precedence; rulka pretrain at frame 0",
    },
    Reader {
        prefix: "training.checkpoint_every_s",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer: periodic checkpoint interval",
    },
    Reader {
        prefix: "training.max_frames",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer stop condition (rulka train --max-frames wins)",
    },
    Reader {
        prefix: "training.max_minutes",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer stop condition (rulka train --max-minutes wins)",
    },
    Reader {
        prefix: "training.mixed_precision",
        algorithms: ALL,
        environments: BOTH,
        by: "learner on CUDA only (fp16 autocast of the trained network's forward + dynamic loss scaling), every algorithm; ignored on CPU; not rulka pretrain",
    },
    Reader {
        prefix: "training.eval_tracks",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "trainer's held-out evaluation thread (exports ONNX, drives the simulator greedily with a PolicyEngine, beside the autopilot); rulka eval default seeds. Refused with environment.kind tmi, with environment.sim.track_from, or overlapping environment.sim.track_seeds",
    },
    Reader {
        prefix: "training.eval_every_n_updates",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "trainer's held-out evaluation thread (only with training.eval_tracks; must be >= 1 then)",
    },
    Reader {
        prefix: "training.freeze",
        algorithms: ALL,
        environments: BOTH,
        by: "learner: optimiser mask for the first N updates of PPO, GRPO and DPO updates alike (counted in learner updates, kept across resumes); not rulka pretrain",
    },
    Reader {
        prefix: "training.augment",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO update only (random shifts of minibatch frames; DrAC with ppo.drac_coef). Refused (shift_px > 0) under GRPO and DPO, with nn.no_image, and above 8",
    },
    Reader {
        prefix: "nn",
        algorithms: ALL,
        environments: BOTH,
        by: "network shape (rulka-network Architecture, and network_hash): trainer/learner, collectors (chunk layout, each weight snapshot exported to ONNX, engine shapes), rulka export, rulka eval and sim tools (network-hash check, engine), rulka pretrain, init, import; a checkpoint or NATS run of another shape is refused",
    },
    Reader {
        prefix: "nn.image_width",
        algorithms: ALL,
        environments: BOTH,
        by: "network input and the environments' frame size (simulator render and game frame capture), simulator tools; CNN-size validation",
    },
    Reader {
        prefix: "nn.image_height",
        algorithms: ALL,
        environments: BOTH,
        by: "network input and the environments' frame size (simulator render and game frame capture), simulator tools; CNN-size validation",
    },
    Reader {
        prefix: "nn.no_image",
        algorithms: ALL,
        environments: BOTH,
        by: "network (no image branch); environments send 1x1 placeholder frames; trainer does not save frames; nn.vis.freeze, training.augment and nn.vis.transformer become moot (the last two refused)",
    },
    Reader {
        prefix: "nn.cnn",
        algorithms: ALL,
        environments: BOTH,
        by: "network CNN image head: Variant A with an image, and Variant C when the vision branch is the CNN (no nn.vis.transformer); ignored with nn.no_image or Variant B; non-default values refused together with nn.vis.transformer",
    },
    Reader {
        prefix: "nn.float_hidden_dim",
        algorithms: ALL,
        environments: BOTH,
        by: "network float MLP of Variants A, B and C; not built (so ignored) for fusion_mode unified, nor for post_concat + token_sequence with float_token_input raw",
    },
    Reader {
        prefix: "nn.dense_hidden_dim",
        algorithms: ALL,
        environments: BOTH,
        by: "network trunk (all variants; Variant C's bridge)",
    },
    Reader {
        prefix: "nn.fusion_mode",
        algorithms: ALL,
        environments: BOTH,
        by: "network variant choice (anything but none: Variant C) and its token layout",
    },
    Reader {
        prefix: "nn.vis",
        algorithms: ALL,
        environments: BOTH,
        by: "network image branch of Variants B and C",
    },
    Reader {
        prefix: "nn.vis.freeze",
        algorithms: ALL,
        environments: BOTH,
        by: "learner only: frozen tensors are left out of the optimiser (every algorithm and rulka pretrain); ignored with nn.no_image; not part of network_hash",
    },
    Reader {
        prefix: "nn.vis.transformer",
        algorithms: ALL,
        environments: BOTH,
        by: "network: Variant B (use_hf_backbone: a HF ViT) or Variant C's native patch encoder / HF ViT; config loading reads model_name_or_path's config.json into backbone (any process, unless backbone is already there); fresh networks load the folder's weights. Refused with fusion_mode none unless use_hf_backbone, with nn.no_image, or with non-default nn.cnn",
    },
    Reader {
        prefix: "nn.vis.transformer.fusion_tokens",
        algorithms: ALL,
        environments: BOTH,
        by: "network: Variant C fusion_mode post_concat with post_concat_layout token_sequence only (summary vs patch tokens); ignored otherwise",
    },
    Reader {
        prefix: "nn.vis.transformer.post_concat_seq_len",
        algorithms: ALL,
        environments: BOTH,
        by: "read nowhere (only nn.encoder.transformer.post_concat_seq_len shapes the network); validated >= 1",
    },
    Reader {
        prefix: "nn.vis.transformer.unified_float_tokens",
        algorithms: ALL,
        environments: BOTH,
        by: "read nowhere (only nn.encoder.transformer.unified_float_tokens shapes the network); validated >= 1",
    },
    Reader {
        prefix: "nn.vis.transformer.trust_remote_code",
        algorithms: ALL,
        environments: BOTH,
        by: "read nowhere (accepted for the original's configs; stripped from network_hash)",
    },
    Reader {
        prefix: "nn.encoder",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C only (nn.fusion_mode not none): the fusion stack; ignored (and not validated) for Variants A and B",
    },
    Reader {
        prefix: "nn.encoder.freeze",
        algorithms: ALL,
        environments: BOTH,
        by: "learner only: fusion-stack tensors left out of the optimiser (every algorithm and rulka pretrain); not part of network_hash",
    },
    Reader {
        prefix: "nn.encoder.fusion_encoder",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C fusion trunk choice (unset: linear for vision_transformer, hf_embedding with transformer.use_hf_backbone, else native_transformer)",
    },
    Reader {
        prefix: "nn.encoder.post_concat_layout",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C with fusion_mode post_concat only",
    },
    Reader {
        prefix: "nn.encoder.float_token_input",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C with post_concat + token_sequence only (raw or the float MLP's output); silently ignored otherwise",
    },
    Reader {
        prefix: "nn.encoder.float_token_layout",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C with post_concat + token_sequence only; per_feature refused otherwise",
    },
    Reader {
        prefix: "nn.encoder.transformer",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C: d_model (fusion token width), post_concat_seq_len, unified_float_tokens; n_layers/n_heads/ff_mult/dropout only for the native_transformer fusion trunk",
    },
    Reader {
        prefix: "nn.encoder.transformer.use_hf_backbone",
        algorithms: ALL,
        environments: BOTH,
        by: "config loading (reads model_name_or_path into backbone) and network: the hf_embedding fusion encoder takes its BERT from here; conflicts with fusion_encoder native_transformer",
    },
    Reader {
        prefix: "nn.encoder.transformer.model_name_or_path",
        algorithms: ALL,
        environments: BOTH,
        by: "config loading (config.json) and fresh-network weight loading of the hf_embedding BERT, with use_hf_backbone; stripped from network_hash",
    },
    Reader {
        prefix: "nn.encoder.transformer.hidden_dropout_prob",
        algorithms: ALL,
        environments: BOTH,
        by: "network: dropout on the hf_embedding BERT input embeddings, only with use_hf_backbone and a model_name_or_path",
    },
    Reader {
        prefix: "nn.encoder.transformer.backbone",
        algorithms: ALL,
        environments: BOTH,
        by: "network: the BERT shape of the hf_embedding encoder (filled from the folder at load)",
    },
    Reader {
        prefix: "nn.encoder.transformer.patch_size",
        algorithms: ALL,
        environments: BOTH,
        by: "read nowhere (patch embedding takes nn.vis.transformer.patch_size); validated >= 1 for Variant C",
    },
    Reader {
        prefix: "nn.encoder.transformer.fusion_tokens",
        algorithms: ALL,
        environments: BOTH,
        by: "read nowhere (the network reads nn.vis.transformer.fusion_tokens)",
    },
    Reader {
        prefix: "nn.encoder.transformer.trust_remote_code",
        algorithms: ALL,
        environments: BOTH,
        by: "read nowhere (accepted for the original's configs; stripped from network_hash)",
    },
    Reader {
        prefix: "nn.encoder.fusion_mlp",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C with fusion_encoder mlp only (validated whenever Variant C)",
    },
    Reader {
        prefix: "nn.encoder.fusion_cnn",
        algorithms: ALL,
        environments: BOTH,
        by: "network Variant C with fusion_encoder cnn only (validated whenever Variant C)",
    },
    Reader {
        prefix: "nn.encoder.hf_embedding",
        algorithms: ALL,
        environments: BOTH,
        by: "config loading (reads the folder's config.json) and network: the hf_embedding fusion encoder's BERT when nn.encoder.transformer names no backbone; trust_remote_code read nowhere",
    },
    Reader {
        prefix: "ppo",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO update (trainer process) and PPO/* TensorBoard scalars; silently ignored under GRPO and DPO except the levers validation refuses there (rows below)",
    },
    Reader {
        prefix: "ppo.gamma",
        algorithms: ALL,
        environments: BOTH,
        by: "PPO: GAE discount (with no ppo.gamma_schedule). All algorithms: the reward-shaping discount the trainer folds into every trajectory when training.policy_rollout_gamma(_schedule) and ppo.gamma_schedule are unset (GRPO returns and DPO pair ranking depend on it). rulka pretrain (any algorithm): discount of its value targets",
    },
    Reader {
        prefix: "ppo.gamma_schedule",
        algorithms: ALL,
        environments: BOTH,
        by: "PPO: GAE discount. All algorithms: reward-shaping discount (wins over training.policy_rollout_gamma, loses to training.policy_rollout_gamma_schedule); rulka pretrain at frame 0 for the shaping fold only",
    },
    Reader {
        prefix: "ppo.max_grad_norm",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO epochs, SIL and PPG aux steps; rulka pretrain's gradient clip under PPO (under GRPO and DPO pretrain clips with theirs, at frame 0)",
    },
    Reader {
        prefix: "ppo.rollout_steps_per_update",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "trainer pending stage (PPO batch size in steps), not the learner",
    },
    Reader {
        prefix: "ppo.target_kl",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO epochs (KL-adaptive stop); refused under GRPO and DPO",
    },
    Reader {
        prefix: "ppo.normalize_returns",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO update (reward scale, kept in learner state); TensorBoard PPO/reward_scale; refused under GRPO and DPO",
    },
    Reader {
        prefix: "ppo.drac_coef",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO minibatches (DrAC), only with training.augment.shift_px > 0 (refused without it); refused under GRPO and DPO",
    },
    Reader {
        prefix: "ppo.aux_every_updates",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPG auxiliary phase; refused (> 0) under GRPO and DPO",
    },
    Reader {
        prefix: "ppo.aux_epochs",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPG auxiliary phase, only with ppo.aux_every_updates > 0 (silently ignored otherwise)",
    },
    Reader {
        prefix: "ppo.aux_clone_coef",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPG auxiliary phase, only with ppo.aux_every_updates > 0",
    },
    Reader {
        prefix: "ppo.popart_beta",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO update (PopArt moments, kept in learner state); refused under GRPO and DPO",
    },
    Reader {
        prefix: "ppo.sil_coef",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner PPO self-imitation; refused (> 0) under GRPO and DPO",
    },
    Reader {
        prefix: "ppo.sil_rollouts",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner self-imitation, only with ppo.sil_coef > 0",
    },
    Reader {
        prefix: "ppo.sil_steps",
        algorithms: &[Algorithm::Ppo],
        environments: BOTH,
        by: "learner self-imitation, only with ppo.sil_coef > 0",
    },
    Reader {
        prefix: "grpo",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner GRPO update (trainer process) and GRPO/* TensorBoard scalars; ranges validated under every algorithm but read only under GRPO",
    },
    Reader {
        prefix: "grpo.max_grad_norm",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner GRPO update's gradient clip (its schedule wins), and rulka pretrain's under GRPO (at frame 0)",
    },
    Reader {
        prefix: "grpo.group_size",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "trainer pending stage (a group is sealed at group_size runs); collectors (with grouping same_track: group_size consecutive exploration runs drive one track, and the curriculum chooses per group); TensorBoard. Validated >= 2 under every algorithm",
    },
    Reader {
        prefix: "grpo.grouping",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "trainer pending stage (group key), learner (refuses a mixed group with same_track), collectors (same_track grouping of the cycle)",
    },
    Reader {
        prefix: "grpo.std_eps",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner, only with normalize_group mean_std",
    },
    Reader {
        prefix: "grpo.ref_sync_every_updates",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner, only when the (scheduled) ref_kl_coef is > 0",
    },
    Reader {
        prefix: "grpo.kl_estimator",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner, clipped objective with ref_kl_coef > 0 only (reinforce uses k1)",
    },
    Reader {
        prefix: "grpo.clip_eps_low",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner clipped objective; under reinforce only the logged clip fraction",
    },
    Reader {
        prefix: "grpo.clip_eps_high",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner, clipped objective only",
    },
    Reader {
        prefix: "grpo.loss_aggregation",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner, clipped objective only (reinforce has its own weights)",
    },
    Reader {
        prefix: "grpo.dr_grpo_max_len",
        algorithms: &[Algorithm::Grpo],
        environments: BOTH,
        by: "learner, clipped objective with loss_aggregation dr_grpo only",
    },
    Reader {
        prefix: "dpo",
        algorithms: &[Algorithm::Dpo],
        environments: BOTH,
        by: "learner DPO update (trainer process) and DPO/* TensorBoard scalars; ranges validated under every algorithm",
    },
    Reader {
        prefix: "dpo.max_grad_norm",
        algorithms: &[Algorithm::Dpo],
        environments: BOTH,
        by: "learner DPO update's gradient clip (its schedule wins), and rulka pretrain's under DPO (at frame 0)",
    },
    Reader {
        prefix: "dpo.pair_buffer_max",
        algorithms: &[Algorithm::Dpo],
        environments: BOTH,
        by: "trainer pending stage: online trajectory buffer (data_mode online/both; the buffer is kept but unused for pairs in offline)",
    },
    Reader {
        prefix: "dpo.data_mode",
        algorithms: &[Algorithm::Dpo],
        environments: BOTH,
        by: "trainer pending stage (online pairs, offline pairs, both); validation: offline refuses collectors.curriculum.replay > 0 and any non-online mode needs offline_pairs_jsonl (checked under every algorithm)",
    },
    Reader {
        prefix: "dpo.offline_pairs_jsonl",
        algorithms: &[Algorithm::Dpo],
        environments: BOTH,
        by: "trainer at start (data_mode offline/both): loads a --save-trajectories JSONL and pairs best/worst per group with the file's own rewards; ignored with online. Required by validation for non-online data_mode under every algorithm",
    },
    Reader {
        prefix: "rewards",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer prepare stage: shapes every received trajectory's rewards from its ingredients at the batch/group anchor (PPO GAE, GRPO returns, DPO online best/worst ranking, reported returns); rulka pretrain value targets (frame 0). Not read by collectors. DPO offline pairs train on the JSONL's stored rewards",
    },
    Reader {
        prefix: "environment",
        algorithms: ALL,
        environments: BOTH,
        by: "the environments collectors drive (built-in simulator, the game over TMInterface), their progress tracking and float vector; the trainer's held-out simulator and rulka eval / sim / map / tmi / demos tools",
    },
    Reader {
        prefix: "environment.kind",
        algorithms: ALL,
        environments: BOTH,
        by: "collectors choose the environment (rulka collect / rulka-collector --env overrides it); trainer (banner, track_from check, NATS map upload); fresh-network normalisation defaults; validation of env-specific rules",
    },
    Reader {
        prefix: "environment.tm_engine_step_per_action",
        algorithms: ALL,
        environments: BOTH,
        by: "decision period ms_per_action: simulator (single-head only), the game (set_on_step_period), rewards' ms per step (single-head), temporal normalisation, NATS per-collector stream cap; with a multi-offset block the simulator and rewards use ms_per_tm_engine_step x heads instead",
    },
    Reader {
        prefix: "environment.ms_per_tm_engine_step",
        algorithms: ALL,
        environments: BOTH,
        by: "simulator physics tick and decision period; the game only through ms_per_action; rewards' ms per step",
    },
    Reader {
        prefix: "environment.rl_action_offsets_ms",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "number of action heads: network shape (hash), simulator executes the block, rewards, pretrain targets; refused with environment.kind tmi when it has more than one entry (the game client also refuses it)",
    },
    Reader {
        prefix: "environment.n_zone_centers_in_inputs",
        algorithms: ALL,
        environments: BOTH,
        by: "float vector layout (network input dim and hash), zone centres shown by both environments, rewards layout, fresh-network normalisation",
    },
    Reader {
        prefix: "environment.n_prev_actions_in_inputs",
        algorithms: ALL,
        environments: BOTH,
        by: "float vector layout (network input dim and hash), both environments' float builder, rewards layout, normalisation",
    },
    Reader {
        prefix: "environment.n_contact_material_physics_behavior_types",
        algorithms: ALL,
        environments: BOTH,
        by: "float vector layout (network input dim and hash), both environments' float builder, rewards layout, normalisation",
    },
    Reader {
        prefix: "environment.temporal_mini_race_duration_ms",
        algorithms: ALL,
        environments: BOTH,
        by: "only the mean/std of the temporal input in a fresh network's normalisation buffers (the environments always write 0 there)",
    },
    Reader {
        prefix: "environment.margin_to_announce_finish_meters",
        algorithms: ALL,
        environments: BOTH,
        by: "both environments' margin-to-finish input cap (zone map), and its normalisation in a fresh network",
    },
    Reader {
        prefix: "environment.cutoff_rollout_if_race_not_finished_within_duration_ms",
        algorithms: ALL,
        environments: BOTH,
        by: "both environments' time limit; rewards (rewards.unfinished_runs_pay_until_cutoff); trainer NATS per-collector stream cap; sim tools",
    },
    Reader {
        prefix: "environment.cutoff_rollout_if_no_vcp_passed_within_duration_ms",
        algorithms: ALL,
        environments: BOTH,
        by: "both environments' no-progress cut-off",
    },
    Reader {
        prefix: "environment.sim",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "the built-in simulator: collectors with kind sim, the trainer's held-out evaluation, rulka eval, rulka sim tools, demos record, export --check rollouts; ignored by game collectors",
    },
    Reader {
        prefix: "environment.sim.track_seeds",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "collectors' prompt cycle (GRPO group ids), trainer banner, rulka eval (excluded from default seeds), demos, plot; ignored with kind tmi (prompts are map indices) except validation (non-empty; disjoint from training.eval_tracks)",
    },
    Reader {
        prefix: "environment.sim.track",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "generated-track preset of the simulator (collectors, held-out eval, rulka eval, sim tools); only a label with track_from",
    },
    Reader {
        prefix: "environment.sim.track_from",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "simulator drives this reference line for every seed (collectors, held-out eval, eval); trainer builds it once at start to refuse a bad line; file existence checked only with kind sim; refuses training.eval_tracks",
    },
    Reader {
        prefix: "environment.sim.track_width_m",
        algorithms: ALL,
        environments: &[EnvKind::Sim],
        by: "simulator road width, only with track_from (range validated whenever track_from is set)",
    },
    Reader {
        prefix: "environment.tmi",
        algorithms: ALL,
        environments: &[EnvKind::Tmi],
        by: "game collectors (TmiEnv over TMInterface); rulka tmi check / rulka-collector tmi check; ignored by the simulator (but its ranges and launch/maps entries are validated under sim too)",
    },
    Reader {
        prefix: "environment.tmi.host",
        algorithms: ALL,
        environments: &[EnvKind::Tmi],
        by: "game collectors' connection and preflight (remote collectors take it from the trainer's config)",
    },
    Reader {
        prefix: "environment.tmi.base_port",
        algorithms: ALL,
        environments: &[EnvKind::Tmi],
        by: "game collectors: port base_port + id unless --port; validated with collectors.count (kind tmi)",
    },
    Reader {
        prefix: "environment.tmi.maps",
        algorithms: ALL,
        environments: &[EnvKind::Tmi],
        by: "game collectors (zone maps, checkpoints, map command; prompts = map indices); trainer (NATS upload of zone-centre files; prompt names in logs and TensorBoard); refused empty with kind tmi (entries' name/map_path validated under sim too)",
    },
    Reader {
        prefix: "environment.tmi.launch",
        algorithms: ALL,
        environments: &[EnvKind::Tmi],
        by: "game collectors' GameSlot (launch, watch, relaunch, scheduled restart, kill); rulka tmi check --launch; trainer shows the games' counters",
    },
    Reader {
        prefix: "environment.tmi.timeout_ms",
        algorithms: ALL,
        environments: &[EnvKind::Tmi],
        by: "game client socket timeout and preflight",
    },
    Reader {
        prefix: "collectors",
        algorithms: ALL,
        environments: BOTH,
        by: "collector processes (rulka collect children of rulka train; rulka-collector over NATS, which takes the trainer's config, not a local one)",
    },
    Reader {
        prefix: "collectors.count",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer: local collector slots it starts and supervises, shm rings, health, learner_threads auto; rulka collect refuses --id >= count; validation (1..=64, 0 only with transport nats, tmi port range)",
    },
    Reader {
        prefix: "collectors.chunk_steps",
        algorithms: ALL,
        environments: BOTH,
        by: "collectors and trainer: chunk layout (both transports); trainer refuses chunks over the NATS max_payload",
    },
    Reader {
        prefix: "collectors.ring_chunks",
        algorithms: ALL,
        environments: BOTH,
        by: "shm: ring capacity (trainer creates, collectors attach); NATS: trainer's per-collector stream cap",
    },
    Reader {
        prefix: "collectors.backpressure",
        algorithms: ALL,
        environments: BOTH,
        by: "collectors: shm ring full policy, NATS full stream/outbox policy",
    },
    Reader {
        prefix: "collectors.block_timeout_ms",
        algorithms: ALL,
        environments: BOTH,
        by: "collectors, with backpressure block (shm ring and NATS)",
    },
    Reader {
        prefix: "collectors.weight_refresh_every_n_actions",
        algorithms: ALL,
        environments: BOTH,
        by: "read nowhere: validated > 0 only; collectors swap in each new snapshot at the next action once a background thread has built it",
    },
    Reader {
        prefix: "collectors.heartbeat_timeout_ms",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer's supervisor of its local collectors (hung: killed and restarted); not remote collectors",
    },
    Reader {
        prefix: "collectors.eval_every_n_rollouts",
        algorithms: ALL,
        environments: BOTH,
        by: "collectors flag every n-th rollout greedy; the trainer logs but never trains on them",
    },
    Reader {
        prefix: "collectors.curriculum",
        algorithms: ALL,
        environments: BOTH,
        by: "collectors' track chooser (PLR over track_seeds or maps; per GRPO group with same_track); temperature/staleness only with replay > 0; replay > 0 refused under DPO with data_mode offline",
    },
    Reader {
        prefix: "inference",
        algorithms: ALL,
        environments: BOTH,
        by: "ONNX Runtime session of every PolicyEngine: collectors (local; remote ones use the trainer's config), the trainer's held-out evaluation thread, rulka eval, sim render --model / replay, rulka gpu check, bench",
    },
    Reader {
        prefix: "inference.intra_op_threads",
        algorithms: ALL,
        environments: BOTH,
        by: "every ONNX Runtime session; also the trainer's learner_threads auto (collectors.count x this)",
    },
    Reader {
        prefix: "inference.fallback",
        algorithms: ALL,
        environments: BOTH,
        by: "GPU providers only (cpu fallback when unavailable); no effect with provider cpu",
    },
    Reader {
        prefix: "inference.device_id",
        algorithms: ALL,
        environments: BOTH,
        by: "GPU providers only",
    },
    Reader {
        prefix: "inference.tensorrt_fp16",
        algorithms: ALL,
        environments: BOTH,
        by: "provider tensorrt only (kernels, refit check bound, engine cache key)",
    },
    Reader {
        prefix: "inference.tensorrt_engine_cache_dir",
        algorithms: ALL,
        environments: BOTH,
        by: "provider tensorrt with tensorrt_refit true only",
    },
    Reader {
        prefix: "inference.tensorrt_timing_cache",
        algorithms: ALL,
        environments: BOTH,
        by: "provider tensorrt with tensorrt_refit true only (the engine-build role)",
    },
    Reader {
        prefix: "inference.tensorrt_refit",
        algorithms: ALL,
        environments: BOTH,
        by: "provider tensorrt only (turned off for the engine's life after a failed refit)",
    },
    Reader {
        prefix: "inference.cuda_graph",
        algorithms: ALL,
        environments: BOTH,
        by: "GPU providers (cuda, tensorrt) only",
    },
    Reader {
        prefix: "inference.cuda_conv_search",
        algorithms: ALL,
        environments: BOTH,
        by: "provider cuda only",
    },
    Reader {
        prefix: "inference.weights",
        algorithms: ALL,
        environments: BOTH,
        by: "the ONNX exporter wherever it runs: rulka export (--weights overrides), the trainer's checkpoint model.onnx, collectors' per-snapshot export, held-out evaluation; refused unless provider cpu",
    },
    Reader {
        prefix: "inference.quant_block",
        algorithms: ALL,
        environments: BOTH,
        by: "the ONNX exporter, with weights int8/int4 only",
    },
    Reader {
        prefix: "inference.quant_max_mean_kl",
        algorithms: ALL,
        environments: BOTH,
        by: "rulka export --check of an int8/int4 model only",
    },
    Reader {
        prefix: "state_normalization",
        algorithms: ALL,
        environments: BOTH,
        by: "zone-centre normalisation buffers of a fresh network (rulka train new run, rulka pretrain, rulka init); TensorRT refit probes and rulka gpu check; ignored once a checkpoint is loaded (resume, export, collectors use the buffers); unset defaults differ for sim and tmi",
    },
    Reader {
        prefix: "transport",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer: how trajectories and weights travel (rulka train)",
    },
    Reader {
        prefix: "transport.kind",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer (shm rings and board, or NATS); validation (collectors.count 0 only with nats); local rulka collect follows the trainer's run.json, not this key",
    },
    Reader {
        prefix: "transport.nats",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer with transport.kind nats; ignored with shm",
    },
    Reader {
        prefix: "transport.nats.url",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer (external server; unset: it starts a local nats-server); rulka train --nats-url overrides",
    },
    Reader {
        prefix: "transport.nats.run",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer (the run's name on the server; default: run directory name)",
    },
    Reader {
        prefix: "transport.nats.token",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer with url set (external server); local rulka collect (dropped when run.json names a user); remote rulka-collector ignores it (flags or RULKA_NATS_TOKEN)",
    },
    Reader {
        prefix: "transport.nats.user",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer with url set; local rulka collect (replaced by run.json's user when there is one); ignored by remote rulka-collector and with a local server",
    },
    Reader {
        prefix: "transport.nats.password",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer with url set; local rulka collect (replaced by run.json's); ignored by remote rulka-collector and with a local server",
    },
    Reader {
        prefix: "transport.nats.tls",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer with url set; local rulka collect (copied from the config); remote rulka-collector ignores it (--tls-* flags); the trainer's local server is started without TLS",
    },
    Reader {
        prefix: "transport.nats.listen",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer's local nats-server only (url unset)",
    },
    Reader {
        prefix: "transport.nats.port",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer's local nats-server only (url unset; 0: a free port, or after a killed trainer its server's port again when free)",
    },
    Reader {
        prefix: "transport.nats.stream_max_mib",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer: the run's stream limits on the server",
    },
    Reader {
        prefix: "transport.nats.ack_wait_s",
        algorithms: ALL,
        environments: BOTH,
        by: "trainer: the run's stream consumer ack wait",
    },
    Reader {
        prefix: "transport.nats.outbox_mib",
        algorithms: ALL,
        environments: BOTH,
        by: "collectors over NATS (value from the run's published config)",
    },
    Reader {
        prefix: "pretrain",
        algorithms: ALL,
        environments: BOTH,
        by: "rulka pretrain only (behaviour cloning into a run directory; read whatever training.algorithm is); not rulka train",
    },
];
