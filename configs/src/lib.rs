//! Typed, strict configuration for rulka.
//!
//! A config is a YAML file with the sections `training`, `nn`, `ppo`, `grpo`,
//! `dpo`, `rewards`, `environment`, `collectors`, `inference`,
//! `state_normalization` and `transport`. Every key has
//! a default; **unknown keys are errors** (the Python original silently ignored
//! misspelled keys). After parsing, [`Config::validate`] checks ranges and
//! cross-field rules; [`Config::from_file`] does both and reports every problem
//! with the file and the key path.
//!
//! ```
//! use rulka_config::{Config, Algorithm};
//!
//! let cfg = Config::from_yaml_str("training:\n  algorithm: grpo\ngrpo:\n  group_size: 8\n", "inline.yaml")?;
//! assert_eq!(cfg.training.algorithm, Algorithm::Grpo);
//! assert_eq!(cfg.grpo.group_size, 8);
//! assert_eq!(cfg.float_input_dim(), 184); // the original's default float vector
//!
//! let err = Config::from_yaml_str("grpo:\n  group_sise: 8\n", "bad.yaml").unwrap_err();
//! assert!(err.to_string().starts_with("bad.yaml: grpo.group_sise: unknown field"));
//! # Ok::<(), rulka_config::ConfigError>(())
//! ```

pub mod arch;
mod floats;
pub mod net;
mod schedule;
mod sections;
pub mod seeds;
pub mod transformers;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use floats::{
    float_inputs_mean_std, float_layout, ORIGINAL_WAYPOINT_MEAN_40CP, ORIGINAL_WAYPOINT_STD_40CP,
};
pub use schedule::Schedule;
pub use sections::*;

/// Number of discrete actions of the original (forward/brake/left/right combinations).
pub const N_ACTIONS: usize = 12;

/// Key states `[accelerate, brake, left, right]` of each of the 12 actions,
/// in the original's order (`inputs.actions`).
pub const ACTION_KEYS: [[bool; 4]; N_ACTIONS] = [
    [true, false, false, false],  // 0 fwd
    [true, false, true, false],   // 1 fwd+L
    [true, false, false, true],   // 2 fwd+R
    [false, false, false, false], // 3 coast
    [false, false, true, false],  // 4 L
    [false, false, false, true],  // 5 R
    [false, true, false, false],  // 6 brake
    [false, true, true, false],   // 7 brake+L
    [false, true, false, true],   // 8 brake+R
    [true, true, false, false],   // 9 fwd+brake
    [true, true, true, false],    // 10 fwd+brake+L
    [true, true, false, true],    // 11 fwd+brake+R
];

/// Per-step reward ingredients collectors record (the chunk's `ingredients`
/// columns), by index.
pub mod ingredients {
    /// Metres advanced along the centreline since the start (cumulative).
    pub const METERS: usize = 0;
    /// Speed |v| in m/s.
    pub const SPEED: usize = 1;
    /// 1 on the step the race was finished, else 0.
    pub const FINISHED: usize = 2;
    /// Race time in ms at this step.
    pub const RACE_TIME_MS: usize = 3;
    /// Index of the current zone (virtual checkpoint) along the centreline.
    pub const ZONE: usize = 4;
    /// Number of ingredients.
    pub const COUNT: usize = 5;
    /// Names, by index (used in error messages).
    pub const NAMES: [&str; COUNT] = ["meters", "speed", "finished", "race_time_ms", "zone"];
}

/// Per-step flag bits collectors record (the chunk's `step_flags` column).
pub mod step_flags {
    /// The action was taken greedily (evaluation run).
    pub const GREEDY: u8 = 1;
    /// The trajectory's last (terminal) step; its action is not executed.
    pub const TERMINAL: u8 = 2;
    /// The race was finished on this step.
    pub const FINISHED: u8 = 4;
    /// The rollout was cut off (time limit or no progress) on this step.
    pub const CUT_OFF: u8 = 8;
}

/// A collector slot's game counters (`environment.tmi.launch`): kept by the
/// slot, reported through the transport, summed by the trainer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GameCounters {
    /// The collector's incarnation (the counts of earlier ones are theirs).
    pub incarnation: u32,
    /// A game answers now.
    pub up: bool,
    /// Games started (first launches, relaunches, scheduled restarts).
    pub launches: u64,
    /// Games killed for not answering in time (a hang).
    pub hangs: u64,
    /// Games gone: their processes ended, or the socket closed.
    pub crashes: u64,
    /// Games killed for a protocol desync (a malformed or unexpected message, a corrupt state).
    pub desyncs: u64,
    /// Games restarted on schedule (`restart_every_h`).
    pub scheduled_restarts: u64,
    /// Launches that never answered within `startup_timeout_s` (or failed to start).
    pub failed_launches: u64,
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// What to train, for how long, with which optimiser.
    pub training: TrainingConfig,
    /// The actor-critic network.
    pub nn: NnConfig,
    /// PPO learner.
    pub ppo: PpoConfig,
    /// GRPO learner.
    pub grpo: GrpoConfig,
    /// DPO learner.
    pub dpo: DpoConfig,
    /// Reward shaping.
    pub rewards: RewardsConfig,
    /// The environment collectors drive.
    pub environment: EnvironmentConfig,
    /// Collector processes and transport.
    pub collectors: CollectorsConfig,
    /// Collectors' inference engine.
    pub inference: InferenceConfig,
    /// Float-input normalisation overrides.
    pub state_normalization: StateNormalizationConfig,
    /// How trajectories and weights travel.
    pub transport: TransportConfig,
}

/// One validation problem: the dotted key path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `grpo.group_size`.
    pub key: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// YAML syntax error, unknown key or wrong type.
    #[error("{path}: {key}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Dotted key path (`.` for the document root).
        key: String,
        /// The parser's message (with line and column where known).
        message: String,
    },
    /// Values out of range or inconsistent with each other.
    #[error("{path}: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join(format!("\n{}: ", path.display()).as_str()))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found (at least one).
        problems: Vec<Problem>,
    },
}

impl Config {
    /// Reads, parses and validates a YAML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        Self::from_yaml_str(&text, path)
    }

    /// Parses and validates YAML text; `origin` names it in errors.
    pub fn from_yaml_str(text: &str, origin: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = origin.as_ref().to_path_buf();
        // An empty document means "all defaults".
        let mut cfg: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            let de = serde_yaml_ng::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let mut key = e.path().to_string();
                let mut message = e.inner().to_string();
                // The YAML library prefixes its own copy of the path; keep one.
                if let Some((pre, rest)) = message.split_once(": ") {
                    if key == pre || key.starts_with(&format!("{pre}.")) {
                        message = rest.to_string();
                    }
                }
                // An unknown field may be reported at its parent's path; name the field itself.
                if let Some(field) = unknown_field_name(&message) {
                    if key == "." {
                        key = field;
                    } else if key.rsplit('.').next() != Some(field.as_str()) {
                        key = format!("{key}.{field}");
                    }
                }
                ConfigError::Parse { path: path.clone(), key, message }
            })?
        };
        let mut problems = cfg.resolve_hf_models();
        if problems.is_empty() {
            problems = cfg.validate();
        }
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError::Invalid { path, problems })
        }
    }

    /// The fully resolved configuration (defaults filled in) as YAML.
    pub fn to_yaml(&self) -> String {
        // Serialising plain data structs to YAML cannot fail.
        serde_yaml_ng::to_string(self).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
    }

    /// Length of the float input vector, as the original's `config_loader`:
    /// `27 + 3·n_zone_centers + 4·n_prev_actions + 4·n_contact_materials + 1`.
    pub fn float_input_dim(&self) -> usize {
        let e = &self.environment;
        27 + 3 * e.n_zone_centers_in_inputs as usize
            + 4 * e.n_prev_actions_in_inputs as usize
            + 4 * e.n_contact_material_physics_behavior_types as usize
            + 1
    }

    /// Number of action heads N (the multi-offset block length).
    pub fn n_action_heads(&self) -> usize {
        self.environment.rl_action_offsets_ms.len().max(1)
    }

    /// Milliseconds per decision (`tm_engine_step_per_action · ms_per_tm_engine_step`).
    pub fn ms_per_action(&self) -> u32 {
        self.environment.tm_engine_step_per_action * self.environment.ms_per_tm_engine_step
    }

    /// Hex SHA-256 (first 16 hex digits) of everything that shapes the network:
    /// the `nn` section, the float input dim, the action count and heads.
    /// Checkpoints record it so a checkpoint from another architecture is refused.
    ///
    /// Training-only settings (`freeze`, `trust_remote_code`) and a Hugging
    /// Face model's folder path (its shape is in `backbone`) are left out,
    /// and so are `nn.vis` / `nn.encoder` while they hold their defaults, so
    /// Variant A configs hash as they did before those sections existed.
    pub fn network_hash(&self) -> String {
        let mut nn = self.nn.clone();
        nn.vis.freeze = false;
        nn.encoder.freeze = false;
        let strip = |t: &mut transformers::TransformerConfig| {
            t.model_name_or_path.clear();
            t.trust_remote_code = false;
        };
        if let Some(t) = nn.vis.transformer.as_mut() {
            strip(t);
        }
        strip(&mut nn.encoder.transformer);
        if let Some(h) = nn.encoder.hf_embedding.as_mut() {
            h.model_name_or_path.clear();
            h.trust_remote_code = false;
        }
        let mut nn_json = serde_json::to_value(&nn).unwrap_or_default();
        if let Some(map) = nn_json.as_object_mut() {
            if nn.vis == transformers::VisConfig::default() {
                map.remove("vis");
            }
            if nn.encoder == transformers::EncoderConfig::default() {
                map.remove("encoder");
            }
        }
        let shape = serde_json::json!({
            "nn": nn_json,
            "float_input_dim": self.float_input_dim(),
            "n_actions": N_ACTIONS,
            "n_action_heads": self.n_action_heads(),
        });
        let digest = Sha256::digest(shape.to_string().as_bytes());
        hex::encode(&digest[..8])
    }

    /// Every range and cross-field problem (empty when the config is valid).
    pub fn validate(&self) -> Vec<Problem> {
        let mut v = Validator::default();
        let t = &self.training;
        v.positive("training.learner_threads", t.learner_threads as f64);
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
        v.opt_schedule_in(
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

        let nn = &self.nn;
        self.validate_nn(&mut v);
        if !nn.no_image {
            for (key, size) in
                [("nn.image_width", nn.image_width), ("nn.image_height", nn.image_height)]
            {
                let min = if nn.cnn.use_impala_cnn { 1 } else { MIN_VANILLA_IMAGE_SIDE };
                let uses_cnn = match net::network_kind(self) {
                    net::NetworkKind::A => true,
                    net::NetworkKind::B => false,
                    net::NetworkKind::C => net::vis_branch(self) == net::VisBranch::Cnn,
                };
                if uses_cnn && size < min {
                    v.push(
                        key,
                        format!(
                            "{size} px is too small for the {} stem; need >= {min}",
                            if nn.cnn.use_impala_cnn { "IMPALA" } else { "vanilla 4-conv" }
                        ),
                    );
                }
                if size > 1024 {
                    v.push(key, format!("{size} px is larger than the supported 1024"));
                }
            }
        }

        let p = &self.ppo;
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
        v.opt_schedule_in("ppo.gamma_schedule", &p.gamma_schedule, 0.0, 1.0);
        v.opt_schedule_in("ppo.gae_lambda_schedule", &p.gae_lambda_schedule, 0.0, 1.0);
        v.opt_schedule_in("ppo.ent_coef_schedule", &p.ent_coef_schedule, 0.0, f64::INFINITY);
        v.opt_schedule_in("ppo.vf_coef_schedule", &p.vf_coef_schedule, 0.0, f64::INFINITY);

        let g = &self.grpo;
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
            if r.is_nan() || r <= 1.0 {
                v.push("grpo.early_stop_imp_ratio", format!("{r} must be > 1"));
            }
        }
        if let Some(c) = g.reward_clip {
            v.positive("grpo.reward_clip", c);
        }
        v.opt_schedule_in("grpo.ent_coef_schedule", &g.ent_coef_schedule, 0.0, f64::INFINITY);
        v.opt_schedule_in(
            "grpo.max_grad_norm_schedule",
            &g.max_grad_norm_schedule,
            f64::MIN_POSITIVE,
            f64::INFINITY,
        );
        v.opt_schedule_in("grpo.ref_kl_coef_schedule", &g.ref_kl_coef_schedule, 0.0, f64::INFINITY);

        let d = &self.dpo;
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
        v.opt_schedule_in("dpo.beta_schedule", &d.beta_schedule, f64::MIN_POSITIVE, f64::INFINITY);
        v.opt_schedule_in("dpo.vf_coef_schedule", &d.vf_coef_schedule, 0.0, f64::INFINITY);
        v.opt_schedule_in(
            "dpo.max_grad_norm_schedule",
            &d.max_grad_norm_schedule,
            f64::MIN_POSITIVE,
            f64::INFINITY,
        );

        let r = &self.rewards;
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

        let e = &self.environment;
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
            if d.is_nan() {
                v.push("environment.deck_height", "NaN; leave it unset for -inf".into());
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
        let t = &self.training;
        if !t.eval_tracks.is_empty() && e.sim.track_from.is_some() {
            v.push(
                "training.eval_tracks",
                "held-out tracks are generated ones; with environment.sim.track_from every seed is that map: leave eval_tracks empty".into(),
            );
        }
        if !t.eval_tracks.is_empty() {
            if e.kind != EnvKind::Sim {
                v.push(
                    "training.eval_tracks",
                    "held-out evaluation drives the simulator; environment.kind is tmi".into(),
                );
            }
            if let Some(s) = t.eval_tracks.iter().find(|s| e.sim.track_seeds.contains(s)) {
                v.push(
                    "training.eval_tracks",
                    format!("seed {s} is also a training seed (environment.sim.track_seeds): held-out tracks must not be trained on"),
                );
            }
            if t.eval_every_n_updates == 0 {
                v.push(
                    "training.eval_every_n_updates",
                    "must be at least 1 when training.eval_tracks is set".into(),
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
            if self.n_action_heads() != 1 {
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
            if l.restart_every_h.is_nan() || l.restart_every_h < 0.0 {
                v.push(
                    "environment.tmi.launch.restart_every_h",
                    format!("{} must be >= 0 (0: never)", l.restart_every_h),
                );
            }
            v.positive("environment.tmi.launch.max_failures", f64::from(l.max_failures));
            v.positive("environment.tmi.launch.max_backoff_s", f64::from(l.max_backoff_s));
        }

        let c = &self.collectors;
        let remote_ok = self.transport.kind == TransportKind::Nats && c.count == 0;
        if (c.count == 0 && !remote_ok) || c.count > 64 {
            v.push(
                "collectors.count",
                format!(
                    "{} must be in 1..=64 (0 only with transport.kind nats: remote collectors)",
                    c.count
                ),
            );
        }
        if e.kind == EnvKind::Tmi
            && u32::from(e.tmi.base_port).saturating_add(c.count.saturating_sub(1)) > 65535
        {
            v.push(
                "environment.tmi.base_port",
                "base_port + collectors.count - 1 exceeds 65535".into(),
            );
        }
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

        v.positive("inference.intra_op_threads", self.inference.intra_op_threads as f64);
        let qb = self.inference.quant_block;
        if qb < 16 || !qb.is_power_of_two() {
            v.push("inference.quant_block", format!("{qb} must be a power of two >= 16"));
        }
        v.positive("inference.quant_max_mean_kl", self.inference.quant_max_mean_kl);
        if self.inference.weights != WeightFormat::Fp32 && self.inference.provider != Provider::Cpu
        {
            v.push(
                "inference.weights",
                format!(
                    "{} weights are for CPU collectors (inference.provider is {:?}); use fp32",
                    self.inference.weights.as_str(),
                    self.inference.provider
                ),
            );
        }
        v.positive(
            "environment.margin_to_announce_finish_meters",
            e.margin_to_announce_finish_meters,
        );

        let n = &self.transport.nats;
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

        let sn = &self.state_normalization;
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
        v.0
    }
}

impl Config {
    /// Reads the Hugging Face folders the config names (`model_name_or_path`
    /// with `use_hf_backbone`, `nn.encoder.hf_embedding`) into their
    /// `backbone:` entries, unless a `backbone:` is already there.
    fn resolve_hf_models(&mut self) -> Vec<Problem> {
        use transformers::{read_hf_model, HfModel};
        let mut problems = Vec::new();
        let mut resolve = |key: &str, path: &str, slot: &mut Option<HfModel>| {
            if slot.is_some() {
                return;
            }
            if path.trim().is_empty() {
                problems.push(Problem {
                    key: key.into(),
                    message: "is empty; a Hugging Face backbone needs its local folder".into(),
                });
                return;
            }
            match read_hf_model(Path::new(path)) {
                Ok(m) => *slot = Some(m),
                Err(message) => problems.push(Problem { key: key.into(), message }),
            }
        };
        if let Some(t) = self.nn.vis.transformer.as_mut().filter(|t| t.use_hf_backbone) {
            resolve(
                "nn.vis.transformer.model_name_or_path",
                &t.model_name_or_path.clone(),
                &mut t.backbone,
            );
        }
        let e = &mut self.nn.encoder;
        if e.transformer.use_hf_backbone {
            let path = e.transformer.model_name_or_path.clone();
            resolve(
                "nn.encoder.transformer.model_name_or_path",
                &path,
                &mut e.transformer.backbone,
            );
        }
        if let Some(h) = e.hf_embedding.as_mut() {
            if !h.model_name_or_path.trim().is_empty() {
                let path = h.model_name_or_path.clone();
                resolve("nn.encoder.hf_embedding.model_name_or_path", &path, &mut h.backbone);
            }
        }
        problems
    }

    /// The `nn` rules of the original's schema and network constructors.
    fn validate_nn(&self, v: &mut Validator) {
        use net::{NetworkKind, VisBranch};
        use transformers::{
            FloatTokenInput, FloatTokenLayout, FusionEncoder, HfModel, PostConcatLayout,
            TransformerConfig,
        };
        let nn = &self.nn;
        v.positive("nn.float_hidden_dim", nn.float_hidden_dim as f64);
        v.positive("nn.dense_hidden_dim", nn.dense_hidden_dim as f64);
        v.positive("nn.cnn.impala_model_size", nn.cnn.impala_model_size as f64);
        v.positive("nn.cnn.adaptive_maxpool_size", nn.cnn.adaptive_maxpool_size as f64);
        let block = |v: &mut Validator, key: &str, t: &TransformerConfig| {
            if t.d_model < 32 {
                v.push(&format!("{key}.d_model"), format!("{} must be >= 32", t.d_model));
            }
            for (k, x) in [
                ("n_heads", t.n_heads),
                ("ff_mult", t.ff_mult),
                ("patch_size", t.patch_size),
                ("post_concat_seq_len", t.post_concat_seq_len),
                ("unified_float_tokens", t.unified_float_tokens),
            ] {
                if x == 0 {
                    v.push(&format!("{key}.{k}"), "must be >= 1".into());
                }
            }
            v.range_cc(&format!("{key}.dropout"), t.dropout, 0.0, 1.0);
            v.range_cc(&format!("{key}.hidden_dropout_prob"), t.hidden_dropout_prob, 0.0, 1.0);
            if t.n_layers > 0 && t.n_heads > 0 && t.d_model % t.n_heads != 0 {
                v.push(
                    &format!("{key}.d_model"),
                    format!("{} must be divisible by n_heads ({})", t.d_model, t.n_heads),
                );
            }
        };
        let kind = net::network_kind(self);
        let vis_t = nn.vis.transformer.as_ref();
        if let Some(t) = vis_t {
            block(v, "nn.vis.transformer", t);
            if nn.cnn != CnnConfig::default() {
                v.push(
                    "nn.vis.transformer",
                    "and nn.cnn are both set: the image encoder is one or the other".into(),
                );
            }
            if nn.no_image {
                v.push("nn.vis.transformer", "is set but nn.no_image is true".into());
            }
            if t.use_hf_backbone && !matches!(t.backbone, None | Some(HfModel::Vit(_))) {
                v.push(
                    "nn.vis.transformer.model_name_or_path",
                    "is not a ViT-format vision model (config.json model_type \"vit\")".into(),
                );
            }
            if kind == NetworkKind::A {
                v.push(
                    "nn.vis.transformer",
                    "a native patch encoder needs nn.fusion_mode vision_transformer, post_concat or unified (with none, the original would silently build the CNN instead)".into(),
                );
            }
        }
        if kind != NetworkKind::C {
            return;
        }
        let e = &nn.encoder;
        block(v, "nn.encoder.transformer", &e.transformer);
        let m = &e.fusion_mlp;
        if m.hidden_dim < 32 {
            v.push("nn.encoder.fusion_mlp.hidden_dim", format!("{} must be >= 32", m.hidden_dim));
        }
        if m.n_layers == 0 {
            v.push("nn.encoder.fusion_mlp.n_layers", "must be >= 1".into());
        }
        v.range_cc("nn.encoder.fusion_mlp.dropout", m.dropout, 0.0, 1.0);
        let c = &e.fusion_cnn;
        if c.kernel_size == 0 {
            v.push("nn.encoder.fusion_cnn.kernel_size", "must be >= 1".into());
        }
        if c.hidden_channels.contains(&0) {
            v.push("nn.encoder.fusion_cnn.hidden_channels", "channels must be >= 1".into());
        }
        v.range_cc("nn.encoder.fusion_cnn.dropout", c.dropout, 0.0, 1.0);
        let vb = net::vis_branch(self);
        if vb == VisBranch::NativeTransformer {
            if let Some(t) = vis_t {
                let ps = t.patch_size.max(1);
                for (key, side) in
                    [("nn.image_height", nn.image_height), ("nn.image_width", nn.image_width)]
                {
                    if side % ps != 0 {
                        v.push(
                            "nn.vis.transformer.patch_size",
                            format!("{ps} does not divide {key} ({side})"),
                        );
                    }
                }
                if nn.fusion_mode == FusionMode::Unified && t.d_model != e.transformer.d_model {
                    v.push(
                        "nn.vis.transformer.d_model",
                        format!(
                            "{} must equal nn.encoder.transformer.d_model ({}) for unified + a native patch encoder",
                            t.d_model, e.transformer.d_model
                        ),
                    );
                }
            }
        }
        if e.float_token_layout == FloatTokenLayout::PerFeature {
            if e.post_concat_layout != PostConcatLayout::TokenSequence
                || nn.fusion_mode != FusionMode::PostConcat
            {
                v.push(
                    "nn.encoder.float_token_layout",
                    "per_feature needs nn.fusion_mode post_concat and nn.encoder.post_concat_layout token_sequence".into(),
                );
            }
            if e.float_token_input != FloatTokenInput::Raw {
                v.push(
                    "nn.encoder.float_token_layout",
                    "per_feature needs nn.encoder.float_token_input raw".into(),
                );
            }
        }
        let fe = net::fusion_encoder(self);
        if e.transformer.use_hf_backbone
            && e.fusion_encoder == Some(FusionEncoder::NativeTransformer)
        {
            v.push(
                "nn.encoder.fusion_encoder",
                "native_transformer conflicts with nn.encoder.transformer.use_hf_backbone".into(),
            );
        }
        if fe == FusionEncoder::HfEmbedding {
            let via_transformer = e.transformer.use_hf_backbone;
            let model = if via_transformer {
                e.transformer.backbone.as_ref()
            } else {
                e.hf_embedding.as_ref().and_then(|h| h.backbone.as_ref())
            };
            match model {
                Some(HfModel::Bert(b)) => {
                    let len = net::fusion_sequence_len(self);
                    if len > b.max_position_embeddings as usize {
                        v.push(
                            "nn.encoder.fusion_encoder",
                            format!(
                                "the fusion sequence has {len} tokens; the BERT encoder's positions stop at {}",
                                b.max_position_embeddings
                            ),
                        );
                    }
                }
                Some(HfModel::Vit(_)) => v.push(
                    if via_transformer {
                        "nn.encoder.transformer.model_name_or_path"
                    } else {
                        "nn.encoder.hf_embedding.model_name_or_path"
                    },
                    "is a vision model; the hf_embedding encoder needs a BERT-format encoder (model_type \"bert\")".into(),
                ),
                None => v.push(
                    "nn.encoder.fusion_encoder",
                    "hf_embedding needs nn.encoder.hf_embedding.model_name_or_path or nn.encoder.transformer.use_hf_backbone with model_name_or_path".into(),
                ),
            }
            if let Some(h) = &e.hf_embedding {
                v.range_cc(
                    "nn.encoder.hf_embedding.hidden_dropout_prob",
                    h.hidden_dropout_prob,
                    0.0,
                    1.0,
                );
            }
        }
    }
}

/// The vanilla stem (k4s2, k4s2, k3s2, k3s1) needs at least 34 px per side
/// to leave one output pixel.
pub const MIN_VANILLA_IMAGE_SIDE: u32 = 34;

fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

#[derive(Default)]
struct Validator(Vec<Problem>);

impl Validator {
    fn push(&mut self, key: &str, message: String) {
        self.0.push(Problem { key: key.to_string(), message });
    }
    fn finite(&mut self, key: &str, x: f64) -> bool {
        if x.is_finite() {
            true
        } else {
            self.push(key, format!("{x} is not a finite number"));
            false
        }
    }
    fn positive(&mut self, key: &str, x: f64) {
        if self.finite(key, x) && x <= 0.0 {
            self.push(key, format!("{x} must be > 0"));
        }
    }
    fn non_negative(&mut self, key: &str, x: f64) {
        if self.finite(key, x) && x < 0.0 {
            self.push(key, format!("{x} must be >= 0"));
        }
    }
    fn range_oc(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x > lo && x <= hi) {
            self.push(key, format!("{x} is out of range; expected {lo} < value <= {hi}"));
        }
    }
    fn range_co(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x >= lo && x < hi) {
            self.push(key, format!("{x} is out of range; expected {lo} <= value < {hi}"));
        }
    }
    fn range_cc(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x >= lo && x <= hi) {
            self.push(key, format!("{x} is out of range; expected {lo} <= value <= {hi}"));
        }
    }
    fn range_oo(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x > lo && x < hi) {
            self.push(key, format!("{x} is out of range; expected {lo} < value < {hi}"));
        }
    }
    fn schedule(&mut self, key: &str, s: &Schedule) {
        for m in s.problems() {
            self.push(key, m);
        }
    }
    fn opt_schedule_in(&mut self, key: &str, s: &Option<Schedule>, lo: f64, hi: f64) {
        let Some(s) = s else { return };
        let before = self.0.len();
        self.schedule(key, s);
        if self.0.len() == before {
            for x in s.values() {
                if !(x >= lo && x <= hi) {
                    self.push(key, format!("value {x} is out of range [{lo}, {hi}]"));
                }
            }
        }
    }
}
