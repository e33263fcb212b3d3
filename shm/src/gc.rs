//! Stale shared memory of dead runs: found by owner liveness and removed.
//!
//! A trainer keeps its segments in a directory `rulka-<16 hex digits>` under
//! the shared-memory root (`/dev/shm`) and writes [`OWNER_FILE`] there: its
//! pid and that process's start time (`/proc/<pid>/stat`, field 22), so a
//! recycled pid is never mistaken for the owner. A trainer that is SIGKILLed
//! cannot remove its directory; [`collect_stale`] finds such directories and
//! removes them.
//!
//! A directory is **live** — never touched — when its owner process (same pid,
//! same start time) exists, or when any process still holds one of its lock
//! files (a collector attached to it). One without an owner record (a
//! trainer killed while creating it, or an older rulka) is live while it is
//! younger than [`UNOWNED_GRACE`]; after that, with no lock held, it is stale.
//!
//! ```
//! use rulka_shm::{collect_stale, write_owner, OWNER_FILE};
//!
//! let root = tempfile::tempdir()?;
//! let live = root.path().join("rulka-00000000000000aa");
//! std::fs::create_dir(&live)?;
//! write_owner(&live, "runs/a".as_ref())?; // this process: alive
//! let dead = root.path().join("rulka-00000000000000bb");
//! std::fs::create_dir(&dead)?;
//! std::fs::write(dead.join(OWNER_FILE), r#"{"pid": 4194304, "start_time": 1, "run_dir": "runs/b"}"#)?;
//! std::fs::write(dead.join("ring0"), vec![0u8; 4096])?;
//!
//! let report = collect_stale(root.path(), false)?;
//! assert_eq!(report.len(), 2);
//! assert!(live.exists() && !dead.exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lock::{probe_lock, Liveness};
use crate::ShmError;

/// The owner record in a run's shared-memory directory.
pub const OWNER_FILE: &str = "owner.json";

/// How long a directory without an owner record is left alone (its creator
/// may be about to write one).
pub const UNOWNED_GRACE: Duration = Duration::from_secs(60);

/// Who made a run's shared-memory directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunShmOwner {
    /// The trainer's pid.
    pub pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22, clock ticks since boot).
    pub start_time: u64,
    /// The run directory it trains in.
    pub run_dir: PathBuf,
}

/// Whether a directory is in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunShmVerdict {
    /// In use: `why` says by whom.
    Live {
        /// E.g. "owner pid 123 is running".
        why: String,
    },
    /// Nobody uses it: `why` says how that was decided.
    Stale {
        /// E.g. "owner pid 123 is gone".
        why: String,
    },
}

/// One run directory found under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunShmDir {
    /// The directory.
    pub path: PathBuf,
    /// Bytes of its files.
    pub bytes: u64,
    /// Its owner record, when it has a readable one.
    pub owner: Option<RunShmOwner>,
    /// In use or not.
    pub verdict: RunShmVerdict,
    /// Whether [`collect_stale`] removed it (false on a dry run, or a live one).
    pub removed: bool,
}

/// The start time of process `pid` (clock ticks since boot), `None` when
/// there is no such process.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count from the last ')'.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    // Fields after the name start at field 3 (state); start time is field 22.
    after.split(' ').nth(22 - 3)?.parse().ok()
}

/// Writes [`OWNER_FILE`] into `dir` for this process, training in `run_dir`.
pub fn write_owner(dir: &Path, run_dir: &Path) -> Result<(), ShmError> {
    let pid = std::process::id();
    let owner = RunShmOwner {
        pid,
        start_time: process_start_time(pid).unwrap_or(0),
        run_dir: run_dir.to_path_buf(),
    };
    let path = dir.join(OWNER_FILE);
    let text = serde_json::to_string(&owner).map_err(|e| ShmError::Io {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    std::fs::write(&path, text).map_err(|source| ShmError::Io { path, source })
}

/// Whether `name` is a run directory's name: `rulka-` and 16 hex digits.
pub fn is_run_dir_name(name: &str) -> bool {
    name.strip_prefix("rulka-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn judge(dir: &Path, owner: Option<&RunShmOwner>) -> Result<RunShmVerdict, ShmError> {
    let io = |source| ShmError::Io { path: dir.to_path_buf(), source };
    // Any process holding a lock file uses the directory, whatever the owner record says.
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_lock = name
            .rsplit_once('.')
            .is_some_and(|(_, r)| ["owner", "producer", "consumer", "writer"].contains(&r));
        if is_lock {
            if let Liveness::Alive(pid) = probe_lock(&entry.path())? {
                return Ok(RunShmVerdict::Live { why: format!("pid {pid} holds {name}") });
            }
        }
    }
    Ok(match owner {
        Some(o) => match process_start_time(o.pid) {
            Some(t) if t == o.start_time => {
                RunShmVerdict::Live { why: format!("owner pid {} is running", o.pid) }
            }
            Some(_) => RunShmVerdict::Stale {
                why: format!(
                    "owner pid {} is gone (the pid now belongs to another process)",
                    o.pid
                ),
            },
            None => RunShmVerdict::Stale { why: format!("owner pid {} is gone", o.pid) },
        },
        None => {
            let age = std::fs::metadata(dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .unwrap_or_default();
            if age < UNOWNED_GRACE {
                RunShmVerdict::Live {
                    why: format!("no owner record, {} s old (being created?)", age.as_secs()),
                }
            } else {
                RunShmVerdict::Stale { why: "no owner record and no live lock holder".into() }
            }
        }
    })
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| it.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// Every run directory under `root` with its verdict; stale ones are
/// removed unless `dry_run`. Directories are listed by name.
pub fn collect_stale(root: &Path, dry_run: bool) -> Result<Vec<RunShmDir>, ShmError> {
    let io = |source| ShmError::Io { path: root.to_path_buf(), source };
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_run_dir_name(&name) || !entry.path().is_dir() {
            continue;
        }
        let path = entry.path();
        let owner = std::fs::read_to_string(path.join(OWNER_FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<RunShmOwner>(&t).ok());
        let verdict = match judge(&path, owner.as_ref()) {
            Ok(v) => v,
            // Removed meanwhile by its owner or another collector.
            Err(ShmError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                continue
            }
            Err(e) => return Err(e),
        };
        let bytes = dir_bytes(&path);
        let removed = matches!(verdict, RunShmVerdict::Stale { .. })
            && !dry_run
            && match std::fs::remove_dir_all(&path) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                Err(source) => return Err(ShmError::Io { path, source }),
            };
        out.push(RunShmDir { path, bytes, owner, verdict, removed });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_this_process_is_stable_and_a_missing_pid_has_none() {
        let me = std::process::id();
        let t = process_start_time(me).expect("this process has a start time");
        assert_eq!(process_start_time(me), Some(t));
        // Above the kernel's pid_max ceiling (2^22): never a process.
        assert_eq!(process_start_time(4_194_305), None);
    }

    #[test]
    fn run_dir_names_are_exactly_rulka_and_16_hex_digits() {
        assert!(is_run_dir_name("rulka-0123456789abcdef"));
        assert!(!is_run_dir_name("rulka-test-abc"));
        assert!(!is_run_dir_name("rulka-0123456789abcde"));
        assert!(!is_run_dir_name("rulka-0123456789abcdeg"));
        assert!(!is_run_dir_name("other-0123456789abcdef"));
    }

    #[test]
    fn a_young_directory_without_an_owner_is_being_created_an_old_one_is_stale() {
        let root = tempfile::tempdir().expect("tempdir");
        let d = root.path().join("rulka-00000000000000dd");
        std::fs::create_dir(&d).expect("mkdir");
        let found = collect_stale(root.path(), false).expect("scan");
        assert!(
            matches!(&found[0].verdict, RunShmVerdict::Live { why } if why.contains("being created")),
            "{:?}",
            found[0].verdict
        );
        assert!(d.exists(), "a directory being created is never removed");
        let old = std::time::SystemTime::now() - UNOWNED_GRACE - Duration::from_secs(5);
        std::fs::File::open(&d).and_then(|f| f.set_modified(old)).expect("age it");
        let found = collect_stale(root.path(), false).expect("scan");
        assert!(matches!(&found[0].verdict, RunShmVerdict::Stale { .. }), "{:?}", found[0].verdict);
        assert!(found[0].removed && !d.exists());
    }

    #[test]
    fn a_directory_whose_owner_runs_is_live() {
        let root = tempfile::tempdir().expect("tempdir");
        let d = root.path().join("rulka-00000000000000ee");
        std::fs::create_dir(&d).expect("mkdir");
        let me = std::process::id();
        let t = process_start_time(me).expect("start time");
        let rec = format!(r#"{{"pid": {me}, "start_time": {t}, "run_dir": "r"}}"#);
        std::fs::write(d.join(OWNER_FILE), rec).expect("write");
        let found = collect_stale(root.path(), false).expect("scan");
        assert!(
            matches!(&found[0].verdict, RunShmVerdict::Live { why } if why.contains("is running")),
            "{:?}",
            found[0].verdict
        );
        assert!(!found[0].removed && d.exists());
    }

    #[test]
    fn only_run_directories_are_judged_and_removed() {
        let root = tempfile::tempdir().expect("tempdir");
        let old = std::time::SystemTime::now() - UNOWNED_GRACE - Duration::from_secs(5);
        // Not rulka's: another program's directory, and a file with a run's name.
        let other = root.path().join("another-programs-dir");
        std::fs::create_dir(&other).expect("mkdir");
        std::fs::File::open(&other).and_then(|f| f.set_modified(old)).expect("age it");
        let file = root.path().join("rulka-00000000000000ff");
        std::fs::write(&file, b"x").expect("write");
        let found = collect_stale(root.path(), false).expect("scan");
        assert!(found.is_empty(), "{found:?}");
        assert!(other.exists() && file.exists());
    }

    #[test]
    fn a_root_that_is_not_a_directory_is_an_error() {
        let f = tempfile::NamedTempFile::new().expect("file");
        assert!(matches!(collect_stale(f.path(), false), Err(ShmError::Io { .. })));
    }

    #[test]
    fn a_root_that_does_not_exist_holds_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        let found = collect_stale(&root.path().join("never-made"), false).expect("no error");
        assert!(found.is_empty());
    }

    #[test]
    fn a_recycled_pid_is_not_the_owner() {
        let root = tempfile::tempdir().expect("tempdir");
        let d = root.path().join("rulka-00000000000000cc");
        std::fs::create_dir(&d).expect("mkdir");
        let me = std::process::id();
        let t = process_start_time(me).expect("start time");
        // This pid, but a start time it never had: its owner died and the pid was reused.
        let rec = format!(r#"{{"pid": {me}, "start_time": {}, "run_dir": "r"}}"#, t + 1);
        std::fs::write(d.join(OWNER_FILE), rec).expect("write");
        let found = collect_stale(root.path(), true).expect("scan");
        assert_eq!(found.len(), 1);
        assert!(
            matches!(&found[0].verdict, RunShmVerdict::Stale { why } if why.contains("another process")),
            "{:?}",
            found[0].verdict
        );
        assert!(d.exists(), "a dry run removes nothing");
    }
}
