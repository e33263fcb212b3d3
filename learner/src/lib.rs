//! The rulka learner: the actor-critic network on tch (libtorch).
//!
//! [`ActorCritic`] is Variant A of the Python original (image CNN + float MLP →
//! shared trunk → policy logits and value), with the original's PyTorch
//! state-dict names, so a Rulka checkpoint converted to safetensors loads
//! directly. Checkpoints go through [`rulka_checkpoint`] (atomic writes,
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

pub mod algorithms;
pub mod losses;
pub mod network;
pub mod offline;
pub mod optim;
pub mod rewards;
pub mod state;
pub mod tensorboard;

pub use network::{logprob_entropy, ActorCritic, Evaluation};
