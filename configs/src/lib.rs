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

mod floats;
pub mod knobs;
mod network_choice;
pub mod readers;
mod schedule;
mod sections;
mod seeds;
mod transformers;
mod validate;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use floats::{
    float_inputs_mean_std, float_layout, ORIGINAL_WAYPOINT_MEAN_40CP, ORIGINAL_WAYPOINT_STD_40CP,
};
pub use network_choice::{NetworkKind, VisBranch};
pub use schedule::Schedule;
pub use sections::*;
pub use seeds::{describe_seeds, parse_seeds};
pub use transformers::{
    read_hf_model, BertSpec, EncoderConfig, FloatTokenInput, FloatTokenLayout, FusionCnnConfig,
    FusionEncoder, FusionMlpConfig, FusionTokens, HfEmbeddingConfig, HfModel, PostConcatLayout,
    TransformerConfig, VisConfig, VitSpec,
};
use validate::Validator;

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
    /// Behaviour cloning (`rulka pretrain`).
    pub pretrain: PretrainConfig,
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

impl ConfigError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        use rulka_error::ErrorKind as K;
        match self {
            Self::Io { .. } | Self::Parse { .. } | Self::Invalid { .. } => K::BadInput,
        }
    }
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
        let cfg = Self::parse_yaml(text, &path)?;
        let problems = cfg.validate();
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError::Invalid { path, problems })
        }
    }

    /// Parses a file (as [`Config::from_file`]) without the value rules of
    /// [`Config::validate`]: for a caller that changes the config (command
    /// line flags) before it validates it. Keys and types are checked.
    pub fn from_file_unvalidated(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        Self::parse_yaml(&text, path)
    }

    fn parse_yaml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let path = path.to_path_buf();
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
        let problems = cfg.resolve_hf_models();
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
        self.training.validate(&mut v);
        self.validate_nn(&mut v);
        self.validate_image_size(&mut v);
        self.ppo.validate(&mut v);
        self.grpo.validate(&mut v);
        self.dpo.validate(&mut v);
        self.rewards.validate(&mut v);
        self.environment.validate(&mut v);
        self.pretrain.validate(&mut v);
        let e = &self.environment;
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
        let shift = self.training.augment.shift_px;
        if shift > 0 {
            if self.training.algorithm != Algorithm::Ppo {
                v.push(
                    "training.augment.shift_px",
                    format!("{shift}: augmentation is for PPO only (GRPO's and DPO's ratios to their reference need the frames as seen)"),
                );
            }
            if self.nn.no_image {
                v.push(
                    "training.augment.shift_px",
                    format!("{shift}: nn.no_image has no frames to shift"),
                );
            }
            if shift > 8 {
                v.push(
                    "training.augment.shift_px",
                    format!("{shift} must be at most 8 (a quarter of the smallest frame a network takes)"),
                );
            }
        }
        if self.training.algorithm != Algorithm::Ppo {
            let algo = format!("{:?}", self.training.algorithm).to_lowercase();
            let p = &self.ppo;
            if let Some(k) = p.target_kl {
                let grpo = if algo == "grpo" { " (GRPO's own is grpo.target_kl)" } else { "" };
                v.push(
                    "ppo.target_kl",
                    format!(
                        "{k}: PPO's KL-adaptive epochs, but training.algorithm is {algo}{grpo}"
                    ),
                );
            }
            if p.normalize_returns {
                v.push("ppo.normalize_returns", format!("true: PPO's return normalisation, but training.algorithm is {algo} (it trains on no discounted returns)"));
            }
            if p.drac_coef > 0.0 {
                v.push(
                    "ppo.drac_coef",
                    format!(
                        "{}: PPO's DrAC regulariser, but training.algorithm is {algo}",
                        p.drac_coef
                    ),
                );
            }
            if p.aux_every_updates > 0 {
                v.push(
                    "ppo.aux_every_updates",
                    format!(
                        "{}: PPG's auxiliary value phase, but training.algorithm is {algo} (the phase follows PPO's updates and their value targets)",
                        p.aux_every_updates
                    ),
                );
            }
            if let Some(b) = p.popart_beta {
                v.push(
                    "ppo.popart_beta",
                    format!(
                        "{b}: PopArt's normalisation of PPO's value targets, but training.algorithm is {algo} (it trains the value on no discounted returns)"
                    ),
                );
            }
            if p.sil_coef > 0.0 {
                v.push(
                    "ppo.sil_coef",
                    format!(
                        "{}: PPO's self-imitation of the run's best rollouts, but training.algorithm is {algo} (its weights are returns above PPO's value)",
                        p.sil_coef
                    ),
                );
            }
        }
        let replay = self.collectors.curriculum.replay;
        if replay > 0.0
            && self.training.algorithm == Algorithm::Dpo
            && self.dpo.data_mode == DpoDataMode::Offline
        {
            v.push(
                "collectors.curriculum.replay",
                format!("{replay}: a curriculum over the collectors' tracks, but dpo.data_mode is offline (DPO trains on the pairs file, not on the collectors' runs)"),
            );
        }
        if self.ppo.drac_coef > 0.0 && shift == 0 {
            v.push(
                "ppo.drac_coef",
                format!("{} needs training.augment.shift_px > 0 (DrAC regularises across augmented frames)", self.ppo.drac_coef),
            );
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
        self.collectors.validate(&mut v);
        self.inference.validate(&mut v);
        self.transport.nats.validate(&mut v);
        self.state_normalization.validate(&mut v);
        v.into_problems()
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
        let kind = self.network_kind();
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
        let vb = self.vis_branch();
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
        let fe = self.fusion_encoder();
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
                    let len = self.fusion_sequence_len();
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

    /// The frame is large enough for the CNN stem that reads it, and not
    /// beyond 1024 px.
    fn validate_image_size(&self, v: &mut Validator) {
        let nn = &self.nn;
        if !nn.no_image {
            for (key, size) in
                [("nn.image_width", nn.image_width), ("nn.image_height", nn.image_height)]
            {
                let min = if nn.cnn.use_impala_cnn { 1 } else { MIN_VANILLA_IMAGE_SIDE };
                let uses_cnn = match self.network_kind() {
                    NetworkKind::A => true,
                    NetworkKind::B => false,
                    NetworkKind::C => self.vis_branch() == VisBranch::Cnn,
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
    }
}

/// The vanilla stem (k4s2, k4s2, k3s2, k3s1) needs at least 34 px per side
/// to leave one output pixel.
pub const MIN_VANILLA_IMAGE_SIDE: u32 = 34;

fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// A prompt's name in logs and TensorBoard tags: `sim<seed>`, or the map's name.
pub fn prompt_name(cfg: &Config, prompt: u64) -> String {
    match cfg.environment.kind {
        // A real map's shape: its file's name (every seed is that map).
        EnvKind::Sim => match &cfg.environment.sim.track_from {
            Some(p) => p
                .file_stem()
                .map_or_else(|| format!("sim{prompt}"), |s| s.to_string_lossy().into_owned()),
            None => format!("sim{prompt}"),
        },
        EnvKind::Tmi => cfg
            .environment
            .tmi
            .maps
            .get(prompt as usize)
            .map_or_else(|| format!("map{prompt}"), |m| m.name.clone()),
    }
}
