//! A run's starts: `RUN_DIR/starts.json` numbers every start of `rulka
//! train` on the run (fresh, resumed, resumed after `rulka import` or
//! `rulka pretrain`) with its time, the learner state it started from and
//! how the start before it ended (its stop reason, or `killed`: no final
//! checkpoint). Every row of the tables carries its start's number.
//!
//! A resume starts from the last saved state, not from where the run was
//! when it died: what happened after that state — the rows written then,
//! and their learning — is not in the state. Those rows are **thrown away**
//! by the resume: a row of start `r` whose frame count is beyond the
//! frames of the state a later start `s` began from ([`thrown_away_by`]).
//! They stay in the tables, marked (`thrown_away_by`), and the readers
//! that draw the run's timeline (its curves, first finish, best time) leave
//! them out. (`run.json` is the live trainer's address and goes with it;
//! the starts outlive every start, so they have their own file.)
//!
//! ```
//! use rulka_run::{thrown_away_by, Start, StateAt};
//! let dir = tempfile::tempdir()?;
//! let first = Start::begin(dir.path(), "fresh", StateAt::default(), 100)?;
//! // Killed at 9 000 frames; its last checkpoint was at 6 000.
//! let second = Start::begin(dir.path(), "resumed", StateAt { frames: 6000, updates: 20, state: None }, 200)?;
//! assert_eq!((first.start, second.start), (1, 2));
//! let starts = Start::read(dir.path())?;
//! assert_eq!(starts[0].ended.as_ref().map(|e| e.reason.as_str()), Some("killed"));
//! assert_eq!(thrown_away_by(&starts, 1, 7000), Some(2)); // after the state start 2 resumed
//! assert_eq!(thrown_away_by(&starts, 1, 5000), None); // in it
//! assert_eq!(thrown_away_by(&starts, 2, 7000), None); // start 2's own
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::run_dir::RunDir;
use crate::BadInput;

/// The learner state a start began from, or one ended at.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateAt {
    /// Environment frames of the learner.
    pub frames: u64,
    /// Learner updates.
    pub updates: u64,
    /// The state's path in the run (`state/state.N…`), when there is one.
    pub state: Option<String>,
}

/// How a start ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// Its stop reason (`time limit reached`, `interrupted (SIGINT)`, …),
    /// or `killed` (no final checkpoint: found so by the next start).
    pub reason: String,
    /// The state of its final checkpoint (absent when killed).
    pub at: Option<StateAt>,
    /// When (UTC, and Unix seconds; absent when killed).
    pub time: Option<String>,
    pub unix_s: Option<u64>,
}

/// One start of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// 1, 2, …: its number, carried by every table row it wrote.
    pub start: u32,
    /// `fresh`, `resumed`, `resumed after rulka import`, `resumed after
    /// rulka pretrain`.
    pub how: String,
    /// When it began (UTC, and Unix seconds).
    pub time: String,
    pub unix_s: u64,
    /// The state it began from (frames 0 when fresh).
    pub from: StateAt,
    /// How it ended; `None` while it runs.
    pub ended: Option<Ended>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StartsFile {
    starts: Vec<Start>,
}

impl Start {
    /// The run's starts, oldest first (none for a run directory from before
    /// starts were numbered, or one never trained).
    pub fn read(run_dir: &Path) -> anyhow::Result<Vec<Self>> {
        let p = RunDir::new(run_dir).starts_json();
        match std::fs::read(&p) {
            Ok(b) => Ok(serde_json::from_slice::<StartsFile>(&b)
                .map_err(|e| BadInput(format!("{}: {e}", p.display())))?
                .starts),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    }

    /// Numbers a new start of the run, `how` it began from `from`, at
    /// `unix_s`: the start before it, if it never ended, ended `killed`.
    /// Written atomically.
    pub fn begin(run_dir: &Path, how: &str, from: StateAt, unix_s: u64) -> anyhow::Result<Self> {
        let mut starts = Self::read(run_dir)?;
        if let Some(last) = starts.last_mut().filter(|l| l.ended.is_none()) {
            last.ended =
                Some(Ended { reason: "killed".into(), at: None, time: None, unix_s: None });
        }
        let start = Self {
            start: starts.last().map_or(1, |l| l.start + 1),
            how: how.to_string(),
            time: utc(unix_s),
            unix_s,
            from,
            ended: None,
        };
        starts.push(start.clone());
        write(run_dir, starts)?;
        Ok(start)
    }

    /// Records how start `number` ended: `reason`, at the state `at`.
    pub fn end(
        run_dir: &Path,
        number: u32,
        reason: &str,
        at: StateAt,
        unix_s: u64,
    ) -> anyhow::Result<()> {
        let mut starts = Self::read(run_dir)?;
        let Some(s) = starts.iter_mut().find(|s| s.start == number) else {
            anyhow::bail!(
                "{}: no start {number} to end",
                RunDir::new(run_dir).starts_json().display()
            )
        };
        s.ended = Some(Ended {
            reason: reason.to_string(),
            at: Some(at),
            time: Some(utc(unix_s)),
            unix_s: Some(unix_s),
        });
        write(run_dir, starts)
    }
}

fn write(run_dir: &Path, starts: Vec<Start>) -> anyhow::Result<()> {
    let p = RunDir::new(run_dir).starts_json();
    let text = serde_json::to_string_pretty(&StartsFile { starts })?;
    rulka_checkpoint::write_atomic(&p, text.as_bytes())
        .with_context(|| format!("writing {}", p.display()))
}

/// The start that threw away a row that start `row_start` wrote at
/// `frames`: the first later start whose state had fewer frames (it began
/// before the row, on a timeline without it). `None`: the row is on the
/// run's kept timeline. Rows of a run from before starts were numbered
/// are start 0, before every numbered start.
pub fn thrown_away_by(starts: &[Start], row_start: u32, frames: u64) -> Option<u32> {
    starts.iter().find(|s| s.start > row_start && s.from.frames < frames).map(|s| s.start)
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `unix_s` as UTC, `2026-11-28T08:01:02Z`.
pub fn utc(unix_s: u64) -> String {
    let (days, secs) = (unix_s / 86_400, unix_s % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_matches_known_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z"); // a leap day
        assert_eq!(utc(1_795_853_462), "2026-11-28T08:11:02Z");
    }

    /// Three starts: the second resumed from 6 000 frames (the first was
    /// killed at 9 000), the third from 4 000 (a state the second wrote
    /// before it died would be later; an older one, say a copied state, is
    /// earlier): each row is thrown away by the first later start that
    /// began before it, and a start's own rows by no earlier start.
    #[test]
    fn a_row_is_thrown_away_by_the_first_later_start_that_began_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let at = |frames| StateAt { frames, updates: frames / 100, state: None };
        Start::begin(dir.path(), "fresh", at(0), 1).unwrap();
        Start::begin(dir.path(), "resumed", at(6000), 2).unwrap();
        Start::end(dir.path(), 2, "time limit reached", at(8000), 3).unwrap();
        Start::begin(dir.path(), "resumed", at(4000), 4).unwrap();
        let s = Start::read(dir.path()).unwrap();
        assert_eq!(s.iter().map(|s| s.start).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(s[0].ended.as_ref().unwrap().reason, "killed");
        assert_eq!(s[1].ended.as_ref().unwrap().reason, "time limit reached");
        assert!(s[2].ended.is_none(), "running");
        for (row_start, frames, want) in [
            (1, 3000, None),
            (1, 5000, Some(3)), // in start 2's state, not in start 3's
            (1, 7000, Some(2)),
            (2, 7000, Some(3)),
            (2, 4000, None),
            (3, 9000, None),
            // Rows from before the starts were numbered: start 1 began fresh
            // (0 frames) and so threw every one of them away.
            (0, 100, Some(1)),
            (0, 6500, Some(1)),
        ] {
            assert_eq!(
                thrown_away_by(&s, row_start, frames),
                want,
                "start {row_start}, {frames} frames"
            );
        }
        assert!(Start::end(dir.path(), 9, "x", at(0), 5).is_err(), "no start 9");
    }

    /// A run from before starts were numbered (rows of start 0), resumed
    /// from 6 000 frames: its rows up to the state stay, the later ones are
    /// thrown away by start 1.
    #[test]
    fn an_old_runs_rows_are_start_0_and_a_resume_keeps_those_in_its_state() {
        let dir = tempfile::tempdir().unwrap();
        let at = StateAt { frames: 6000, updates: 60, state: Some("state/state.60".into()) };
        let first = Start::begin(dir.path(), "resumed", at, 10).unwrap();
        assert_eq!(first.start, 1);
        let s = Start::read(dir.path()).unwrap();
        assert_eq!(thrown_away_by(&s, 0, 6000), None);
        assert_eq!(thrown_away_by(&s, 0, 6001), Some(1));
    }
}
