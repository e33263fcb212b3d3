//! The actor-critic as data, built from a validated [`rulka_config::Config`]:
//! [`Architecture`] (inputs, outputs, which of the original's networks) and
//! its [`Net`] — every tensor of the state dict under the original's PyTorch
//! name and shape, how a fresh network initialises it, and the forward pass
//! as primitive operations ([`Op`]). The tch learner (`rulka-learner`) and
//! the ONNX exporter (`rulka-export`) each interpret the same `Net`, so they
//! cannot disagree about names, shapes or what is computed.
//!
//! Which network a config selects ([`rulka_config::NetworkKind`], the vision
//! branch, the fusion trunk) is the config's own decision
//! (`Config::network_kind` and friends); this crate builds it.
//!
//! ```
//! use rulka_config::{Config, NetworkKind};
//! use rulka_network::{Architecture, TensorRole};
//!
//! let cfg = Config::from_yaml_str("environment: {n_prev_actions_in_inputs: 25}", "a.yaml")?;
//! let arch = Architecture::from_config(&cfg);
//! assert_eq!(arch.kind, NetworkKind::A);
//! assert_eq!(arch.n_logits(), 12);
//! // The original's state-dict names: the policy head reads the 1024-wide trunk.
//! let head = arch.net.tensor("policy_head.weight").map(|t| (t.shape.clone(), t.role));
//! assert_eq!(head, Some((vec![12, 1024], TensorRole::Parameter)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod arch;
mod net;
mod spec;

pub use arch::{Architecture, Frame, LEAKY_RELU_SLOPE, PIXEL_OFFSET, PIXEL_SCALE};
pub use net::{
    AttnWeights, Init, Net, Node, Op, Pretrained, Val, HF_INIT_STD, TORCH_LAYER_NORM_EPS,
};
pub use spec::{CnnArch, ConvSpec, Stem, TensorRole, TensorSpec};
