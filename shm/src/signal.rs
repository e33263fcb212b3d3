//! Shutdown signals (SIGINT, SIGTERM) as a counter, for processes that must
//! finish cleanly on the first signal and may exit at once on the second.

use crate::sync::{AtomicU32, Ordering};

static SIGNALS: AtomicU32 = AtomicU32::new(0);
static LAST: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic stores: async-signal-safe.
    LAST.store(sig as u32, Ordering::SeqCst);
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

/// The name of the last shutdown signal received (`SIGINT`, `SIGTERM`), or
/// `None` when none came (or the request came from inside: [`request`]).
pub fn last_name() -> Option<&'static str> {
    match LAST.load(Ordering::SeqCst) as libc::c_int {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => None,
    }
}

/// Ends the process at once with `code`: no destructors, no `atexit`
/// handlers (other threads may be running native code — libtorch, ONNX
/// Runtime — whose static destructors must not run under them). For a
/// second Ctrl-C: callers write every file atomically, so nothing is torn.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer, never returns and cannot fail; it skips
    // user-space clean-up by design.
    unsafe { libc::_exit(code) }
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

/// Sets up `cmd` so that the process it starts is in a process group of its
/// own (a terminal's Ctrl-C, sent to the foreground group, does not reach
/// it: its parent decides when it stops) and receives `SIGTERM` when the
/// thread that spawns it exits (Linux `PR_SET_PDEATHSIG`) — so it never
/// outlives a SIGKILLed parent. Spawn from a thread that lives as long as
/// the child should (the main thread).
pub fn tie_to_this_thread(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let parent = std::process::id();
    cmd.process_group(0);
    // SAFETY: the closure runs in the child between fork and exec, and only
    // calls prctl and getppid, which are async-signal-safe, and allocates
    // nothing (the error is built from a raw OS error number).
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
            // The parent died before the prctl took effect: do not start at all.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}
