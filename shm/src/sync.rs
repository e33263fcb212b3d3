//! The one place atomics come from (`clippy.toml` forbids the std types
//! elsewhere), so the ring and board protocols can be model-checked by
//! swapping these aliases (e.g. for loom's) without touching their code.

#![allow(clippy::disallowed_types)]

/// Atomic 64-bit word.
pub type AtomicU64 = std::sync::atomic::AtomicU64;
/// Atomic 32-bit word.
pub type AtomicU32 = std::sync::atomic::AtomicU32;
/// Memory ordering.
pub type Ordering = std::sync::atomic::Ordering;

/// A memory fence.
#[inline]
pub fn fence(order: Ordering) {
    std::sync::atomic::fence(order);
}
