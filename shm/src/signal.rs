//! Shutdown signals (SIGINT, SIGTERM; on Windows the console's Ctrl-C,
//! Ctrl-Break and close events) as a counter, for processes that must finish
//! cleanly on the first signal and may exit at once on the second.

use crate::sync::{AtomicU32, Ordering};

static SIGNALS: AtomicU32 = AtomicU32::new(0);
static LAST: AtomicU32 = AtomicU32::new(0);

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic stores: async-signal-safe.
    LAST.store(sig as u32, Ordering::SeqCst);
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Installs the counting handler for SIGINT and SIGTERM (idempotent).
#[cfg(unix)]
pub fn install_stop_handler() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C"` function that only performs an
        // atomic increment (async-signal-safe); the handler address stays valid
        // for the life of the process.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Set when the process is about to exit, so that a console-close handler
/// stops holding the process open.
#[cfg(windows)]
static FINISHED: AtomicU32 = AtomicU32::new(0);

/// Windows's console control events (Ctrl-C, Ctrl-Break, the console window
/// closed, log-off, shut-down), counted like signals. For the last three
/// Windows ends the process as soon as the handler returns (and at most ~5 s
/// after the event): the handler holds it open until [`finished`] is called
/// or 4.5 s have passed, so that a stopping collector can deliver what it
/// holds.
#[cfg(windows)]
unsafe extern "system" fn on_console_event(kind: u32) -> windows_sys::core::BOOL {
    use windows_sys::Win32::System::Console::{
        CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT,
    };
    LAST.store(kind + 1, Ordering::SeqCst);
    SIGNALS.fetch_add(1, Ordering::SeqCst);
    if matches!(kind, CTRL_CLOSE_EVENT | CTRL_LOGOFF_EVENT | CTRL_SHUTDOWN_EVENT) {
        let t0 = std::time::Instant::now();
        while FINISHED.load(Ordering::SeqCst) == 0
            && t0.elapsed() < std::time::Duration::from_millis(4500)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    1 // handled: no default handler (which would end the process at once)
}

/// Installs the counting handler for Windows's console control events
/// (Ctrl-C, Ctrl-Break, closing the console, log-off, shut-down; idempotent).
#[cfg(windows)]
pub fn install_stop_handler() {
    static INSTALLED: AtomicU32 = AtomicU32::new(0);
    if INSTALLED.swap(1, Ordering::SeqCst) == 1 {
        return;
    }
    // SAFETY: registers a handler function that lives for the whole process
    // and only touches atomics (and sleeps); no pointers are passed.
    unsafe {
        windows_sys::Win32::System::Console::SetConsoleCtrlHandler(Some(on_console_event), 1);
    }
}

/// Tells a console-close handler (Windows) that the process has finished its
/// clean-up and may be ended; a no-op elsewhere.
pub fn stop_cleanup_done() {
    #[cfg(windows)]
    FINISHED.store(1, Ordering::SeqCst);
}

/// Shutdown signals received so far.
pub fn stop_requests() -> u32 {
    SIGNALS.load(Ordering::SeqCst)
}

/// The name of the last shutdown signal received (`SIGINT`, `SIGTERM`; on
/// Windows `Ctrl-C`, `Ctrl-Break`, `console closed`, `log-off`,
/// `shut-down`), or `None` when none came (or the request came from inside:
/// [`request_stop`]).
pub fn last_stop_signal() -> Option<&'static str> {
    let last = LAST.load(Ordering::SeqCst);
    #[cfg(unix)]
    return match last as libc::c_int {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => None,
    };
    #[cfg(windows)]
    return match last {
        1 => Some("Ctrl-C"),
        2 => Some("Ctrl-Break"),
        3 => Some("console closed"),
        6 => Some("log-off"),
        7 => Some("shut-down"),
        _ => None,
    };
}

/// Ends the process at once with `code`: no destructors, no `atexit`
/// handlers (other threads may be running native code — libtorch, ONNX
/// Runtime — whose static destructors must not run under them). For a
/// second Ctrl-C: callers write every file atomically, so nothing is torn.
pub fn exit_now(code: i32) -> ! {
    #[cfg(unix)]
    // SAFETY: _exit takes an integer, never returns and cannot fail; it skips
    // user-space clean-up by design.
    unsafe {
        libc::_exit(code)
    }
    #[cfg(windows)]
    // SAFETY: TerminateProcess on the current process's pseudo-handle ends the
    // process without DLL detach notifications; it does not return on success.
    unsafe {
        use windows_sys::Win32::System::Threading::{GetCurrentProcess, TerminateProcess};
        TerminateProcess(GetCurrentProcess(), code as u32);
        std::process::abort()
    }
}

/// Counts a shutdown request made from inside the process (as if signalled).
pub fn request_stop() {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Asks the kernel to send this process SIGTERM when its parent dies (Linux
/// `PR_SET_PDEATHSIG`), so collectors of a killed trainer stop instead of
/// lingering; returns `false` when the parent is already gone (reparented
/// to `expected_parent` ≠ the current parent).
#[cfg(unix)]
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
#[cfg(unix)]
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

/// Lowers the calling thread's scheduling priority as far as it goes (nice
/// 19; Windows `THREAD_PRIORITY_LOWEST`), for CPU-heavy background work that
/// must not preempt a latency-critical thread. Best effort: the OS error
/// when it could not.
pub fn lower_this_threads_priority() -> std::io::Result<()> {
    #[cfg(unix)]
    // SAFETY: FFI calls without pointers; gettid names the calling thread and
    // setpriority changes only that thread's nice value.
    let ok =
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) == 0 };
    #[cfg(windows)]
    // SAFETY: GetCurrentThread returns a pseudo-handle of the calling thread;
    // SetThreadPriority changes only that thread's priority.
    let ok = unsafe {
        use windows_sys::Win32::System::Threading::{
            GetCurrentThread, SetThreadPriority, THREAD_PRIORITY_LOWEST,
        };
        SetThreadPriority(GetCurrentThread(), THREAD_PRIORITY_LOWEST) != 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
