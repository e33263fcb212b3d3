//! What the config tests share.

pub mod ranges;
