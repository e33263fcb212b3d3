//! ONNX export of the rulka actor-critic.
//!
//! Not built yet: this crate reserves the place in the workspace layout.
