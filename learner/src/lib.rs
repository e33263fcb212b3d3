//! The rulka learner: the actor-critic network on tch (libtorch).
//!
//! [`ActorCritic`] is whichever network of the Python original the config
//! describes — Variant A (image CNN + float MLP → shared trunk → policy logits
//! and value), B (a Hugging Face ViT's CLS token + float MLP) or C (the
//! multimodal fusion networks) — with the original's PyTorch state-dict
//! names, so a Rulka checkpoint converted to safetensors loads directly. Checkpoints go through [`rulka_checkpoint`] (atomic writes,
//! checksums, per-tensor validation).
//!
//! ```no_run
//! use rulka_config::Config;
//! use rulka_learner::ActorCritic;
//! use tch::{Device, Kind, Tensor};
//!
//! let cfg = Config::from_file("configs/grpo.yaml")?;
//! let net = ActorCritic::new(&cfg, Device::Cpu, 0);
//! let frames = Tensor::zeros([2, 1, 64, 64], (Kind::Uint8, Device::Cpu));
//! let floats = Tensor::zeros([2, cfg.float_input_dim() as i64], (Kind::Float, Device::Cpu));
//! let (logits, value) = net.forward(&frames, &floats);
//! assert_eq!(logits.size(), [2, 12]);
//! assert_eq!(value.size(), [2, 1]);
//! net.save(std::path::Path::new("init.safetensors"), &cfg, 0)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod algorithms;
mod augment;
mod autocast;
mod losses;
mod network;
mod offline;
mod optim;
mod original;
mod pretrain;
mod rewards;
mod state;
mod tensorboard;

pub use algorithms::{
    max_grad_norm_at, running_returns, scheduled_coefficient, Learner, ReturnMoments, TrajBatch,
    UpdateStats, ValueMoments, MIN_DPO_PAIR_STEPS,
};
pub use augment::random_shift;
pub use losses::{
    aggregation_weights, aux_loss, dpo_loss, drac_penalty, gae, group_advantages,
    group_has_zero_std, grpo_clipped_step_loss, kl_estimate, normalize_advantages, ppo_loss,
    sil_loss, ClippedCoefs, PpoCoefs, PpoTerms, SilTerms, SIL_VALUE_COEF,
};
pub use network::{logprob_entropy, ActorCritic, Evaluation};
pub use offline::{offline_pairs, trajectory_batch};
pub use optim::{
    clip_coefficient, OptimConfig, Optimizer, StepOutcome, INITIAL_LOSS_SCALE,
    LOSS_SCALE_GROWTH_INTERVAL,
};
pub use pretrain::{
    demo_returns, demo_targets, offset_step, pretrain, split_drives, EpochStats, PretrainReport,
    Pretrained,
};
pub use rewards::{
    dense_rewards, fold_potential, ms_per_step, rollout_rewards, shaping_gamma, speedslide_quality,
    EngineeredCoefs, RolloutIngredients,
};
pub use rulka_demos::{load_jsonl, SavedId, SavedTrajectory};
pub use tensorboard::{
    crc32c, masked_crc32c, read_events, EventWriter, TbEvent, TbSummary, TbSummaryValue,
};

/// glibc `malloc` settings for the learner process: keep freed blocks below
/// 32 MiB in the heap instead of returning them to the kernel. A training
/// step allocates and frees the same large activation tensors every
/// minibatch; with glibc's defaults each one is a fresh `mmap` whose pages
/// fault in again, which cost the learner ~20% of its time. Returns whether
/// glibc accepted both settings. Call once, early (`rulka train` does).
pub fn tune_allocator() -> bool {
    /// Largest value glibc accepts for `M_MMAP_THRESHOLD` on 64-bit.
    const MMAP_THRESHOLD: libc::c_int = 32 << 20;
    const TRIM_THRESHOLD: libc::c_int = 1 << 30;
    // SAFETY: mallopt only changes allocator parameters; it is called with
    // glibc's documented option constants and in-range values.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    }
}

/// The same settings as environment variables, for a child process (e.g. a
/// Python baseline) that should run with the allocator the learner uses.
pub const TUNED_ALLOCATOR_ENV: [(&str, &str); 2] =
    [("MALLOC_MMAP_THRESHOLD_", "33554432"), ("MALLOC_TRIM_THRESHOLD_", "1073741824")];
