//! Helpers shared by rulka's cross-crate integration tests (see `tests/*.rs`).
