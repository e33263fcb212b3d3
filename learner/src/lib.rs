//! The rulka learner: the actor-critic network on tch (libtorch).
//!
//! Not built yet beyond the libtorch link check in `tests/libtorch_smoke.rs`.
