//! What each number of the config may be, written by hand from what each
//! key means (its doc comment, the original's schema, what reads it): the
//! independent statement `tests/ranges.rs` holds the validator to at every
//! edge, and the configuration reference prints (`tests/reference.rs`).
//!
//! A range is `[lo, hi]`, `(lo, hi)` or a mix, `inf` for no bound; `int`
//! before it for an integer key (its type's bound written as `u16`, `u32`,
//! `u64`); `pow2` for an integer that must also be a power of two; `finite`
//! for any finite number. Every number is finite: NaN and ±∞ are refused
//! everywhere. `context` is YAML merged over the defaults before the key is
//! set: where a key is read (and so checked) only with another setting on,
//! the row says which, and a key checked in two settings with two ranges
//! has a row for each.

#![allow(dead_code)] // each test binary uses its part

/// `(key, range, context)` for every scalar number of the config.
pub const NUMBERS: &[(&str, &str, &str)] = &[
    ("training.seed", "int [0, u64]", ""),
    ("training.learner_threads", "int [1, i64]", ""),
    ("training.global_schedule_speed", "(0, inf)", ""),
    ("training.adam_epsilon", "(0, inf)", ""),
    ("training.adam_beta1", "[0, 1)", ""),
    ("training.adam_beta2", "[0, 1)", ""),
    ("training.weight_decay", "[0, inf)", ""),
    ("training.policy_rollout_gamma", "(0, 1]", ""),
    ("training.checkpoint_every_s", "int [1, u64]", ""),
    ("training.max_frames", "int [0, u64]", ""),
    ("training.max_minutes", "(0, inf)", ""),
    ("training.eval_every_n_updates", "int [0, u64]", ""),
    // An evaluation every 0 updates is none: refused once there are tracks to evaluate.
    ("training.eval_every_n_updates", "int [1, u64]", "training: {eval_tracks: [1000]}"),
    ("training.freeze.encoder_updates", "int [0, u64]", ""),
    ("training.freeze.policy_head_updates", "int [0, u64]", ""),
    // A quarter of the smallest frame a network takes; PPO only.
    ("training.augment.shift_px", "int [0, 8]", ""),
    ("training.augment.shift_px", "int [0, 0]", "training: {algorithm: grpo}"),
    ("training.augment.shift_px", "int [0, 0]", "training: {algorithm: dpo}"),
    // The vanilla CNN's stem needs 34 px a side; nothing is supported past 1024.
    ("nn.image_width", "int [34, 1024]", ""),
    ("nn.image_height", "int [34, 1024]", ""),
    ("nn.image_width", "int [1, 1024]", "nn: {cnn: {use_impala_cnn: true}}"),
    ("nn.float_hidden_dim", "int [1, u32]", ""),
    ("nn.dense_hidden_dim", "int [1, u32]", ""),
    ("nn.cnn.impala_model_size", "int [1, u32]", ""),
    ("nn.cnn.adaptive_maxpool_size", "int [1, u32]", ""),
    // A native transformer (the fusion trunk of a Variant C network, and the
    // patch encoder): 32 wide at least, every count at least one, dropouts
    // are probabilities. d_model must also divide by n_heads (1 here).
    (
        "nn.encoder.transformer.d_model",
        "int [32, u32]",
        "nn: {fusion_mode: post_concat, encoder: {transformer: {n_heads: 1}}}",
    ),
    ("nn.encoder.transformer.n_layers", "int [0, u32]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.transformer.n_heads", "int [1, u32]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.transformer.ff_mult", "int [1, u32]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.transformer.patch_size", "int [1, u32]", "nn: {fusion_mode: post_concat}"),
    (
        "nn.encoder.transformer.post_concat_seq_len",
        "int [1, u32]",
        "nn: {fusion_mode: post_concat}",
    ),
    (
        "nn.encoder.transformer.unified_float_tokens",
        "int [1, u32]",
        "nn: {fusion_mode: post_concat}",
    ),
    ("nn.encoder.transformer.dropout", "[0, 1]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.transformer.hidden_dropout_prob", "[0, 1]", "nn: {fusion_mode: post_concat}"),
    (
        "nn.vis.transformer.d_model",
        "int [32, u32]",
        "nn: {fusion_mode: vision_transformer, vis: {transformer: {n_heads: 1}}}",
    ),
    (
        "nn.vis.transformer.n_heads",
        "int [1, u32]",
        "nn: {fusion_mode: vision_transformer, vis: {transformer: {}}}",
    ),
    (
        "nn.vis.transformer.ff_mult",
        "int [1, u32]",
        "nn: {fusion_mode: vision_transformer, vis: {transformer: {}}}",
    ),
    (
        "nn.vis.transformer.dropout",
        "[0, 1]",
        "nn: {fusion_mode: vision_transformer, vis: {transformer: {}}}",
    ),
    (
        "nn.vis.transformer.hidden_dropout_prob",
        "[0, 1]",
        "nn: {fusion_mode: vision_transformer, vis: {transformer: {}}}",
    ),
    ("nn.encoder.fusion_mlp.hidden_dim", "int [32, u32]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.fusion_mlp.n_layers", "int [1, u32]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.fusion_mlp.dropout", "[0, 1]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.fusion_cnn.kernel_size", "int [1, u32]", "nn: {fusion_mode: post_concat}"),
    ("nn.encoder.fusion_cnn.dropout", "[0, 1]", "nn: {fusion_mode: post_concat}"),
    // PPO. A discount of 0 learns nothing past the next reward; a ratio clip
    // of 1 lets a probability go to 0.
    ("ppo.gamma", "(0, 1]", ""),
    ("ppo.gae_lambda", "[0, 1]", ""),
    ("ppo.clip_coef", "(0, 1)", ""),
    ("ppo.clip_coef_vf", "[0, inf)", ""),
    ("ppo.ent_coef", "[0, inf)", ""),
    ("ppo.vf_coef", "[0, inf)", ""),
    ("ppo.max_grad_norm", "(0, inf)", ""),
    ("ppo.update_epochs", "int [1, u32]", ""),
    ("ppo.num_minibatches", "int [1, u32]", ""),
    ("ppo.rollout_steps_per_update", "int [2, u32]", ""),
    ("ppo.target_kl", "(0, inf)", ""),
    // DrAC regularises across shifted frames: none without a shift.
    ("ppo.drac_coef", "[0, 0]", ""),
    ("ppo.drac_coef", "[0, inf)", "training: {augment: {shift_px: 2}}"),
    ("ppo.aux_every_updates", "int [0, u32]", ""),
    ("ppo.aux_epochs", "int [0, u32]", ""),
    ("ppo.aux_epochs", "int [1, u32]", "ppo: {aux_every_updates: 2}"),
    ("ppo.aux_clone_coef", "[0, inf)", ""),
    ("ppo.popart_beta", "(0, 1]", ""),
    ("ppo.sil_coef", "[0, inf)", ""),
    ("ppo.sil_rollouts", "int [0, u32]", ""),
    ("ppo.sil_rollouts", "int [1, u32]", "ppo: {sil_coef: 0.5}"),
    ("ppo.sil_steps", "int [0, u32]", ""),
    ("ppo.sil_steps", "int [1, u32]", "ppo: {sil_coef: 0.5}"),
    // GRPO: a group of one has no spread; the importance-ratio stop needs a
    // ratio above 1 to stop at.
    ("grpo.group_size", "int [2, u32]", ""),
    ("grpo.std_eps", "(0, inf)", ""),
    ("grpo.ent_coef", "[0, inf)", ""),
    ("grpo.max_grad_norm", "(0, inf)", ""),
    ("grpo.update_epochs", "int [1, u32]", ""),
    ("grpo.ref_sync_every_updates", "int [1, u32]", ""),
    ("grpo.ref_kl_coef", "[0, inf)", ""),
    ("grpo.clip_eps_low", "(0, 1)", ""),
    ("grpo.clip_eps_high", "(0, inf)", ""),
    ("grpo.dr_grpo_max_len", "int [1, u32]", ""),
    ("grpo.target_kl", "(0, inf)", ""),
    ("grpo.early_stop_imp_ratio", "(1, inf)", ""),
    ("grpo.reward_clip", "(0, inf)", ""),
    ("grpo.micro_batch_steps", "int [1, u32]", ""),
    ("dpo.beta", "(0, inf)", ""),
    ("dpo.ref_sync_every_updates", "int [1, u32]", ""),
    ("dpo.pair_buffer_max", "int [2, u32]", ""),
    ("dpo.vf_coef", "[0, inf)", ""),
    ("dpo.update_epochs", "int [1, u32]", ""),
    ("dpo.max_grad_norm", "(0, inf)", ""),
    // Rewards: any sign. A distance clamp's lower end is at most its upper
    // (25 m by default) and its upper at least its lower (2 m and 5 m).
    ("rewards.constant_reward_per_ms", "finite", ""),
    ("rewards.reward_per_m_advanced_along_centerline", "finite", ""),
    ("rewards.final_speed_reward_as_if_duration_s", "finite", ""),
    ("rewards.shaped_reward_dist_to_cur_vcp", "finite", ""),
    ("rewards.shaped_reward_point_to_vcp_ahead", "finite", ""),
    ("rewards.shaped_reward_min_dist_to_cur_vcp", "(-inf, 25]", ""),
    ("rewards.shaped_reward_max_dist_to_cur_vcp", "[2, inf)", ""),
    ("rewards.engineered_reward_min_dist_to_cur_vcp", "(-inf, 25]", ""),
    ("rewards.engineered_reward_max_dist_to_cur_vcp", "[5, inf)", ""),
    ("environment.tm_engine_step_per_action", "int [1, u32]", ""),
    ("environment.ms_per_tm_engine_step", "int [1, u32]", ""),
    ("environment.n_zone_centers_in_inputs", "int [1, u32]", ""),
    ("environment.one_every_n_zone_centers_in_inputs", "int [1, u32]", ""),
    // The zone centres past the finish reach the last one the float vector
    // shows: 20 × (40 − 1) by default, and 2 at least.
    ("environment.n_zone_centers_extrapolate_after_end_of_map", "int [780, u32]", ""),
    (
        "environment.n_zone_centers_extrapolate_after_end_of_map",
        "int [2, u32]",
        "environment: {n_zone_centers_in_inputs: 1}",
    ),
    ("environment.n_zone_centers_extrapolate_before_start_of_map", "int [1, u32]", ""),
    ("environment.distance_between_checkpoints", "(0, inf)", ""),
    ("environment.road_width", "(0, inf)", ""),
    ("environment.deck_height", "finite", ""),
    ("environment.n_prev_actions_in_inputs", "int [0, u32]", ""),
    ("environment.n_contact_material_physics_behavior_types", "int [0, u32]", ""),
    ("environment.temporal_mini_race_duration_ms", "int [1, u32]", ""),
    ("environment.cutoff_rollout_if_race_not_finished_within_duration_ms", "int [1, u32]", ""),
    ("environment.cutoff_rollout_if_no_vcp_passed_within_duration_ms", "int [1, u32]", ""),
    ("environment.margin_to_announce_finish_meters", "(0, inf)", ""),
    // A real map's line is drawn this wide (only with track_from).
    (
        "environment.sim.track_width_m",
        "[4, 64]",
        "environment: {sim: {track_from: no-such-line.npy}}",
    ),
    ("environment.tmi.base_port", "int [1, u16]", ""),
    // The game's ports: base_port to base_port + collectors.count - 1 (4).
    ("environment.tmi.base_port", "int [1, 65532]", "environment: {kind: tmi}"),
    ("environment.tmi.running_speed", "(0, inf)", ""),
    ("environment.tmi.timeout_ms", "int [1, u32]", ""),
    ("environment.tmi.timeout_during_run_ms", "int [1, u32]", ""),
    ("environment.tmi.timeout_between_runs_ms", "int [1, u32]", ""),
    ("environment.tmi.game_camera_number", "int [0, u32]", ""),
    (
        "environment.tmi.launch.startup_timeout_s",
        "int [1, u32]",
        "environment: {tmi: {launch: {command: [tm, '{port}']}}}",
    ),
    (
        "environment.tmi.launch.restart_every_h",
        "[0, inf)",
        "environment: {tmi: {launch: {command: [tm, '{port}']}}}",
    ),
    (
        "environment.tmi.launch.kill_grace_s",
        "int [0, u32]",
        "environment: {tmi: {launch: {command: [tm, '{port}']}}}",
    ),
    (
        "environment.tmi.launch.max_failures",
        "int [1, u32]",
        "environment: {tmi: {launch: {command: [tm, '{port}']}}}",
    ),
    (
        "environment.tmi.launch.max_backoff_s",
        "int [1, u32]",
        "environment: {tmi: {launch: {command: [tm, '{port}']}}}",
    ),
    // Up to 64 collectors; none on this machine only when they come over NATS.
    ("collectors.count", "int [1, 64]", ""),
    ("collectors.count", "int [0, 64]", "transport: {kind: nats}"),
    ("collectors.chunk_steps", "int [1, u32]", ""),
    ("collectors.ring_chunks", "int [2, u32]", ""),
    ("collectors.block_timeout_ms", "int [1, u32]", ""),
    ("collectors.weight_refresh_every_n_actions", "int [1, u32]", ""),
    ("collectors.heartbeat_timeout_ms", "int [1, u32]", ""),
    ("collectors.eval_every_n_rollouts", "int [0, u32]", ""),
    // A share of the runs replayed (all of them would leave no fresh track).
    ("collectors.curriculum.replay", "[0, 1)", ""),
    ("collectors.curriculum.temperature", "(0, inf)", ""),
    ("collectors.curriculum.staleness", "[0, 1]", ""),
    ("inference.intra_op_threads", "int [1, u32]", ""),
    ("inference.device_id", "int [0, u32]", ""),
    ("inference.quant_block", "pow2 [16, u32]", ""),
    ("inference.quant_max_mean_kl", "(0, inf)", ""),
    // 0: a free port.
    ("transport.nats.port", "int [0, u16]", ""),
    ("transport.nats.stream_max_mib", "int [1, u32]", ""),
    ("transport.nats.ack_wait_s", "int [1, u32]", ""),
    ("transport.nats.outbox_mib", "int [1, u32]", ""),
    ("pretrain.epochs", "int [1, u32]", ""),
    ("pretrain.batch_size", "int [1, u64]", ""),
    ("pretrain.lr", "(0, inf)", ""),
    // A dropout of 1 drops everything; a held-out share of 1 trains on nothing.
    ("pretrain.dropout", "[0, 1)", ""),
    ("pretrain.held_out_fraction", "[0, 1)", ""),
    ("pretrain.early_stop_patience", "int [0, u32]", ""),
    ("pretrain.value_coef", "[0, inf)", ""),
];

/// `(key, range of every value, context)` for every `*_schedule`: a schedule
/// replaces its value, so it takes what its value takes, at every knot.
pub const SCHEDULES: &[(&str, &str, &str)] = &[
    ("training.lr_schedule", "(0, inf)", ""),
    ("training.policy_rollout_gamma_schedule", "(0, 1]", ""),
    ("ppo.gamma_schedule", "(0, 1]", ""),
    ("ppo.gae_lambda_schedule", "[0, 1]", ""),
    ("ppo.ent_coef_schedule", "[0, inf)", ""),
    ("ppo.vf_coef_schedule", "[0, inf)", ""),
    ("grpo.ent_coef_schedule", "[0, inf)", ""),
    ("grpo.max_grad_norm_schedule", "(0, inf)", ""),
    ("grpo.ref_kl_coef_schedule", "[0, inf)", ""),
    ("dpo.beta_schedule", "(0, inf)", ""),
    ("dpo.vf_coef_schedule", "[0, inf)", ""),
    ("dpo.max_grad_norm_schedule", "(0, inf)", ""),
    ("rewards.engineered_speedslide_reward_schedule", "finite", ""),
    ("rewards.engineered_neoslide_reward_schedule", "finite", ""),
    ("rewards.engineered_kamikaze_reward_schedule", "finite", ""),
    ("rewards.engineered_close_to_vcp_reward_schedule", "finite", ""),
];

/// `(key, range of every element, context)` for every list of numbers whose
/// elements have a range of their own.
pub const LISTS: &[(&str, &str, &str)] =
    &[("nn.encoder.fusion_cnn.hidden_channels", "int [1, u32]", "nn: {fusion_mode: post_concat}")];

/// A range parsed: `int`/`pow2` keys take integers only.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// The lower bound (`-inf` for none) and whether it is left out.
    pub lo: f64,
    pub lo_open: bool,
    /// The upper bound (`inf` for none) and whether it is left out.
    pub hi: f64,
    pub hi_open: bool,
    /// An integer key: its bounds exactly (a type's bound is its maximum).
    pub int: Option<(i128, i128)>,
    pub pow2: bool,
}

impl Range {
    pub fn parse(s: &str) -> Range {
        let (int, pow2, rest) = if let Some(r) = s.strip_prefix("int ") {
            (true, false, r)
        } else if let Some(r) = s.strip_prefix("pow2 ") {
            (true, true, r)
        } else {
            (false, false, s)
        };
        let inf = f64::INFINITY;
        if rest == "finite" {
            assert!(!int, "{s:?}: an integer's range has bounds");
            return Range { lo: -inf, lo_open: true, hi: inf, hi_open: true, int: None, pow2 };
        }
        let lo_open = rest.starts_with('(');
        let hi_open = rest.ends_with(')');
        assert!(
            (lo_open || rest.starts_with('[')) && (hi_open || rest.ends_with(']')),
            "bad range {s:?}"
        );
        let inner = &rest[1..rest.len() - 1];
        let (a, b) = inner.split_once(", ").unwrap_or_else(|| panic!("bad range {s:?}"));
        let exact = |t: &str| -> Option<i128> {
            match t {
                "u16" => Some(i128::from(u16::MAX)),
                "u32" => Some(i128::from(u32::MAX)),
                "u64" => Some(i128::from(u64::MAX)),
                "i64" => Some(i128::from(i64::MAX)),
                "inf" | "-inf" => None,
                x => x.parse().ok(),
            }
        };
        let bound = |t: &str| match t {
            "inf" => inf,
            "-inf" => -inf,
            "u16" => f64::from(u16::MAX),
            "u32" => f64::from(u32::MAX),
            "u64" => u64::MAX as f64,
            "i64" => i64::MAX as f64,
            x => x.parse().unwrap_or_else(|_| panic!("bad bound {t:?} in {s:?}")),
        };
        let int = int.then(|| {
            assert!(!lo_open && !hi_open, "{s:?}: write an integer range closed");
            (
                exact(a).unwrap_or_else(|| panic!("{s:?}: an integer's bound")),
                exact(b).unwrap_or_else(|| panic!("{s:?}: an integer's bound")),
            )
        });
        Range { lo: bound(a), lo_open, hi: bound(b), hi_open, int, pow2 }
    }

    /// Whether the range holds the number `x` (a finite number only).
    pub fn holds(&self, x: f64) -> bool {
        if let Some((lo, hi)) = self.int {
            return x.fract() == 0.0 && x.abs() < 1e38 && self.holds_int(x as i128, lo, hi);
        }
        x.is_finite()
            && (if self.lo_open { x > self.lo } else { x >= self.lo })
            && (if self.hi_open { x < self.hi } else { x <= self.hi })
    }

    /// Whether an integer key takes `i`.
    pub fn holds_integer(&self, i: i128) -> bool {
        match self.int {
            Some((lo, hi)) => self.holds_int(i, lo, hi),
            None => self.holds(i as f64),
        }
    }

    fn holds_int(&self, i: i128, lo: i128, hi: i128) -> bool {
        i >= lo && i <= hi && (!self.pow2 || (i > 0 && (i as u128).is_power_of_two()))
    }

    /// The range in words, as the configuration reference prints it (a
    /// type's own bound left out: the type says it).
    pub fn words(&self) -> String {
        if let Some((lo, hi)) = self.int {
            let type_max = [u16::MAX.into(), u32::MAX.into(), u64::MAX.into(), i64::MAX.into()];
            let span = if lo == hi {
                format!("only {lo}")
            } else if type_max.contains(&hi) {
                format!("≥ {lo}")
            } else {
                format!("{lo} to {hi}")
            };
            return if self.pow2 { format!("a power of two, {span}") } else { span };
        }
        let lower = self.lo.is_finite().then(|| {
            if self.lo_open {
                format!("> {}", self.lo)
            } else {
                format!("≥ {}", self.lo)
            }
        });
        let upper = self.hi.is_finite().then(|| {
            if self.hi_open {
                format!("< {}", self.hi)
            } else {
                format!("≤ {}", self.hi)
            }
        });
        match (lower, upper) {
            (Some(_), Some(_)) if self.lo == self.hi => format!("only {}", self.lo),
            (Some(l), Some(u)) => format!("{l} and {u}"),
            (Some(l), None) => format!("{l}, finite"),
            (None, Some(u)) => format!("{u}, finite"),
            (None, None) => "any finite number".to_string(),
        }
    }
}
