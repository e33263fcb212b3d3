//! Process-tree helpers (Linux FFI glue) for processes rulka starts and must
//! be able to stop entirely: games that spawn helpers of their own (Wine's
//! `wineserver`, a launcher that starts the game and exits).
//!
//! - [`become_subreaper`]: orphaned descendants are re-parented to this
//!   process (not to init), so [`descendants`] still finds them;
//! - [`descendants`]: every live process below a pid, by walking
//!   `/proc/*/stat` parent links;
//! - [`send_signal`]: sends a signal to one process;
//! - [`reap_exited_children`]: collects exited children (a subreaper must, or its
//!   adopted orphans stay zombies);
//! - [`processes_matching`]: the live processes whose arguments say what they are.
//!
//! ```
//! let mut child = std::process::Command::new("sleep").arg("30").spawn()?;
//! let me = std::process::id();
//! assert!(rulka_shm::descendants(me).contains(&child.id()));
//! rulka_shm::send_signal(child.id(), rulka_shm::SIGKILL);
//! child.wait()?;
//! assert!(!rulka_shm::descendants(me).contains(&child.id()));
//! # Ok::<(), std::io::Error>(())
//! ```

/// `SIGTERM`: asks a process to end.
pub const SIGTERM: i32 = libc::SIGTERM;
/// `SIGKILL`: ends a process.
pub const SIGKILL: i32 = libc::SIGKILL;

/// Makes this process the reaper of its orphaned descendants
/// (`PR_SET_CHILD_SUBREAPER`); false if the kernel refused.
pub fn become_subreaper() -> bool {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes integers only and has no
    // memory effects.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) == 0 }
}

/// Sends `sig` to process `pid`; false if it does not exist (or may not be signalled).
pub fn send_signal(pid: u32, sig: i32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill(2) takes a pid and a signal number and has no memory
    // effects; pid is positive, so it never targets a process group.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}

/// Reaps every exited child without waiting: `(pid, raw wait status)` each.
pub fn reap_exited_children() -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes the status into a valid, owned c_int; WNOHANG
        // never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return out;
        }
        out.push((pid as u32, status));
    }
}

/// `(pid, parent pid, state)` of every process, from `/proc`.
fn table() -> Vec<(u32, u32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_string_lossy().parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The name is in parentheses and may hold spaces: fields follow the last ')'.
            let after = stat.get(stat.rfind(')')? + 2..)?;
            let mut f = after.split(' ');
            let state = f.next()?.chars().next()?;
            let ppid: u32 = f.next()?.parse().ok()?;
            Some((pid, ppid, state))
        })
        .collect()
}

/// Every live (not zombie) process below `root`, nearest first.
pub fn descendants(root: u32) -> Vec<u32> {
    let t = table();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid, state) in &t {
            if ppid == p && pid != root && !out.contains(&pid) {
                if state != 'Z' && state != 'X' {
                    out.push(pid);
                }
                frontier.push(pid);
            }
        }
    }
    out
}

/// Live (not zombie) processes whose argument list satisfies `pred`.
pub fn processes_matching(pred: impl Fn(&[String]) -> bool) -> Vec<u32> {
    table()
        .into_iter()
        .filter(|&(_, _, state)| state != 'Z' && state != 'X')
        .filter_map(|(pid, _, _)| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv: Vec<String> = raw
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            pred(&argv).then_some(pid)
        })
        .collect()
}

/// Whether process `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.get(s.rfind(')')? + 2..).and_then(|a| a.chars().next()))
        .is_some_and(|c| c != 'Z' && c != 'X')
}
