//! Crash-safe shared-memory transport between rulka processes: rollout rings
//! (collectors → learner) and the weight-snapshot board (learner → collectors).
//!
//! Not built yet: this crate reserves the place in the workspace layout.
