//! Process exclusivity and liveness through `flock(2)` lock files: the kernel
//! releases a lock when its holder dies (SIGKILL included), so a lock can
//! never outlive its holder and a dead peer is detected at once.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::ShmError;

/// An exclusive `flock` held for as long as this value lives (or the process does).
#[derive(Debug)]
pub struct ProcessLock {
    file: File,
    path: PathBuf,
}

/// What a lock file says about its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Held by a live process (its pid as written in the file, 0 if unknown).
    Alive(u32),
    /// The file exists but nobody holds the lock: its holder died or left.
    Dead,
    /// No lock file: never attached.
    Absent,
}

fn try_flock(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a valid, open file descriptor owned by `file`.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

fn read_pid(file: &mut File) -> u32 {
    let mut s = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.read_to_string(&mut s);
    s.trim().parse().unwrap_or(0)
}

impl ProcessLock {
    /// Takes the lock at `path` (created if needed) without blocking and
    /// writes this process's pid into it; `Err(LockHeld { pid })` if a live
    /// process holds it.
    pub fn acquire(path: &Path) -> Result<Self, ShmError> {
        let io = |source| ShmError::Io { path: path.to_path_buf(), source };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        if !try_flock(&file).map_err(io)? {
            let pid = read_pid(&mut file);
            return Err(ShmError::LockHeld { path: path.to_path_buf(), pid });
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(Self { file, path: path.to_path_buf() })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Releases the lock and removes the file (a clean leave, not a death).
    pub fn release(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

/// Whether the holder of the lock file at `path` is alive. Never blocks and
/// never disturbs a live holder.
pub fn probe_lock(path: &Path) -> Result<Liveness, ShmError> {
    let io = |source| ShmError::Io { path: path.to_path_buf(), source };
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Liveness::Absent),
        Err(e) => return Err(io(e)),
    };
    if try_flock(&file).map_err(io)? {
        // We got it: nobody holds it. Dropping `file` releases our probe lock.
        Ok(Liveness::Dead)
    } else {
        Ok(Liveness::Alive(read_pid(&mut file)))
    }
}

/// One attached (or formerly attached) process, from its lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Segment the lock belongs to (e.g. `rulka-run-ring-3`).
    pub segment: String,
    /// `owner`, `producer`, `consumer` or `writer`.
    pub role: String,
    /// Alive (with pid) or dead.
    pub liveness: Liveness,
}

/// Every process that has attached to a segment in `dir`, with its
/// liveness: the learner's view of who is up (a SIGKILLed collector reads
/// [`Liveness::Dead`] as soon as the kernel has reaped it).
pub fn attached_peers(dir: &Path) -> Result<Vec<Peer>, ShmError> {
    let io = |source| ShmError::Io { path: dir.to_path_buf(), source };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((segment, role)) = name.rsplit_once('.') else { continue };
        if !["owner", "producer", "consumer", "writer"].contains(&role) || segment.starts_with('.')
        {
            continue;
        }
        let liveness = probe_lock(&entry.path())?;
        if liveness != Liveness::Absent {
            out.push(Peer { segment: segment.to_string(), role: role.to_string(), liveness });
        }
    }
    out.sort_by(|a, b| (&a.segment, &a.role).cmp(&(&b.segment, &b.role)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_the_lock_files_of_segments_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = ProcessLock::acquire(&dir.path().join("rulka-x-ring-3.producer")).expect("lock");
        // Not locks: a segment's data, a staging name, a file without a role.
        for name in ["rulka-x-ring-3.data", ".rulka-x-ring-4.owner", "README"] {
            std::fs::write(dir.path().join(name), b"1").expect("write");
        }
        let found = attached_peers(dir.path()).expect("peers");
        let me = std::process::id();
        assert_eq!(
            found,
            vec![Peer {
                segment: "rulka-x-ring-3".into(),
                role: "producer".into(),
                liveness: Liveness::Alive(me)
            }]
        );
        held.release();
    }
}
