//! Shutdown signals (SIGINT, SIGTERM) as a counter, for processes that must
//! finish cleanly on the first signal and may exit at once on the second.

use crate::sync::{AtomicU32, Ordering};

static SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic increment: async-signal-safe.
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Installs the counting handler for SIGINT and SIGTERM (idempotent).
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C"` function that only performs an
        // atomic increment (async-signal-safe); the handler address stays valid
        // for the life of the process.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Shutdown signals received so far.
pub fn count() -> u32 {
    SIGNALS.load(Ordering::SeqCst)
}

/// Counts a shutdown request made from inside the process (as if signalled).
pub fn request() {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Asks the kernel to send this process SIGTERM when its parent dies (Linux
/// `PR_SET_PDEATHSIG`), so collectors of a killed trainer stop instead of
/// lingering; returns `false` when the parent is already gone (reparented
/// to `expected_parent` ≠ the current parent).
pub fn exit_with_parent(expected_parent: u32) -> bool {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and has no memory
    // effects; getppid cannot fail.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
        libc::getppid() as u32 == expected_parent
    }
}
