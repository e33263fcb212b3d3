//! The run directory's tables, each written and read here and nowhere
//! else: `trajectories.csv` (one row per received trajectory) and
//! `heldout.csv` (one row per held-out evaluation). Both are appended to by
//! every trainer incarnation of a run; a reader skips a last line cut by a
//! crash mid-write, and finds columns by their header names.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::run_dir::RunDir;
use crate::BadInput;

/// One row of `trajectories.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryRow {
    /// The learner's frame count once the trajectory was counted.
    pub frames: u64,
    /// Minutes since that trainer incarnation started.
    pub minutes: f64,
    /// Learner updates by then.
    pub updates: u64,
    /// Collector id.
    pub collector: u32,
    /// The packed trajectory id ([`rulka_shm::TrajectoryId`]).
    pub trajectory: u64,
    /// The track (prompt) it drove.
    pub seed: u64,
    /// A greedy evaluation run (`kind` `eval`), else exploration (`explo`).
    pub eval: bool,
    /// Environment steps.
    pub steps: usize,
    /// The sum of its rewards as trained on.
    pub ret: f64,
    /// Metres along the track at the end.
    pub progress_m: f64,
    /// Fraction of the track driven (1 when finished).
    pub progress_frac: f64,
    /// It crossed the finish.
    pub finished: bool,
    /// Its race time when finished.
    pub race_time_s: Option<f64>,
}

const TRAJECTORIES_HEADER: &str = "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s";

/// The appending writer of `RUN_DIR/trajectories.csv`.
#[derive(Debug)]
pub struct TrajectoriesCsv(std::fs::File);

impl TrajectoriesCsv {
    /// `RUN_DIR/trajectories.csv`, its header written when it is new.
    pub fn open(run_dir: &Path) -> anyhow::Result<Self> {
        Ok(Self(open_appending(&RunDir::new(run_dir).trajectories_csv(), TRAJECTORIES_HEADER)?))
    }

    /// Appends one row.
    pub fn append(&mut self, r: &TrajectoryRow) -> anyhow::Result<()> {
        // One write per row: a trainer killed mid-row never leaves half
        // of it (write_fmt would issue a write per piece).
        let line = format!(
            "{},{:.3},{},{},{},{},{},{},{:.4},{:.2},{:.4},{},{}\n",
            r.frames,
            r.minutes,
            r.updates,
            r.collector,
            r.trajectory,
            r.seed,
            if r.eval { "eval" } else { "explo" },
            r.steps,
            r.ret,
            r.progress_m,
            r.progress_frac,
            u8::from(r.finished),
            r.race_time_s.map_or(String::new(), |t| format!("{t:.2}"))
        );
        self.0.write_all(line.as_bytes()).context("writing trajectories.csv")
    }
}

/// The rows of `RUN_DIR/trajectories.csv` so far: none while the trainer
/// has not yet created the file (a run being watched as it starts);
/// otherwise as [`read_trajectories`].
pub fn read_trajectories_so_far(run_dir: &Path) -> anyhow::Result<Vec<TrajectoryRow>> {
    if RunDir::new(run_dir).trajectories_csv().exists() {
        read_trajectories(run_dir)
    } else {
        Ok(Vec::new())
    }
}

/// The rows of `RUN_DIR/trajectories.csv`. A missing file or column is
/// [`BadInput`] naming the file; a line cut by a killed trainer (too few
/// fields, or a number that does not parse) is skipped.
pub fn read_trajectories(run_dir: &Path) -> anyhow::Result<Vec<TrajectoryRow>> {
    let t = Table::read(&RunDir::new(run_dir).trajectories_csv(), "not a rulka run directory?")?;
    let c = |name| t.column(name);
    let (cf, cm, cu, cc, ct, cs, ck, cn, cr, cpm, cpf, cfin, crt) = (
        c("frames")?,
        c("minutes")?,
        c("updates")?,
        c("collector")?,
        c("trajectory")?,
        c("seed")?,
        c("kind")?,
        c("steps")?,
        c("return")?,
        c("progress_m")?,
        c("progress_frac")?,
        c("finished")?,
        c("race_time_s")?,
    );
    Ok(t.rows()
        .filter_map(|f| {
            let n = |c: usize| f[c].parse::<f64>().ok();
            Some(TrajectoryRow {
                frames: n(cf)? as u64,
                minutes: n(cm)?,
                updates: n(cu)? as u64,
                collector: n(cc)? as u32,
                trajectory: f[ct].parse().ok()?,
                seed: f[cs].parse().ok()?,
                eval: f[ck] == "eval",
                steps: n(cn)? as usize,
                ret: n(cr)?,
                progress_m: n(cpm)?,
                progress_frac: n(cpf)?,
                finished: n(cfin)? > 0.5,
                race_time_s: f[crt].parse().ok(),
            })
        })
        .collect())
}

/// One row of `heldout.csv`: a held-out evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldOutRow {
    /// When its weights were taken: frames, minutes, updates.
    pub frames: u64,
    pub minutes: f64,
    pub updates: u64,
    /// Episodes driven (one per held-out track).
    pub episodes: usize,
    pub finish_rate: f64,
    pub mean_progress: f64,
    /// Race time percentiles of the finished episodes.
    pub race_time_p10_s: Option<f64>,
    pub race_time_median_s: Option<f64>,
    pub race_time_p90_s: Option<f64>,
    /// Median of race time ÷ the autopilot's on the same track, over the
    /// `ratio_episodes` tracks both finished.
    pub time_ratio_median: Option<f64>,
    pub ratio_episodes: usize,
    pub autopilot_race_time_median_s: Option<f64>,
}

const HELDOUT_HEADER: &str = "frames,minutes,updates,episodes,finish_rate,mean_progress,race_time_p10_s,race_time_median_s,race_time_p90_s,time_ratio_median,ratio_episodes,autopilot_race_time_median_s";

/// The appending writer of `RUN_DIR/heldout.csv`.
#[derive(Debug)]
pub struct HeldOutCsv(std::fs::File);

impl HeldOutCsv {
    /// `RUN_DIR/heldout.csv`, its header written when it is new.
    pub fn open(run_dir: &Path) -> anyhow::Result<Self> {
        Ok(Self(open_appending(&RunDir::new(run_dir).heldout_csv(), HELDOUT_HEADER)?))
    }

    /// Appends one row.
    pub fn append(&mut self, r: &HeldOutRow) -> anyhow::Result<()> {
        let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.4}"));
        // One write per row: a trainer killed mid-row never leaves half
        // of it (write_fmt would issue a write per piece).
        let line = format!(
            "{},{:.3},{},{},{:.4},{:.4},{},{},{},{},{},{}\n",
            r.frames,
            r.minutes,
            r.updates,
            r.episodes,
            r.finish_rate,
            r.mean_progress,
            opt(r.race_time_p10_s),
            opt(r.race_time_median_s),
            opt(r.race_time_p90_s),
            opt(r.time_ratio_median),
            r.ratio_episodes,
            opt(r.autopilot_race_time_median_s),
        );
        self.0.write_all(line.as_bytes()).context("writing heldout.csv")
    }
}

/// The rows of `RUN_DIR/heldout.csv`. A missing file or column is
/// [`BadInput`] naming the file; a cut line is skipped.
pub fn read_heldout(run_dir: &Path) -> anyhow::Result<Vec<HeldOutRow>> {
    let t = Table::read(
        &RunDir::new(run_dir).heldout_csv(),
        "a run with training.eval_tracks writes it",
    )?;
    let c = |name| t.column(name);
    let cols = [
        c("frames")?,
        c("minutes")?,
        c("updates")?,
        c("episodes")?,
        c("finish_rate")?,
        c("mean_progress")?,
        c("race_time_p10_s")?,
        c("race_time_median_s")?,
        c("race_time_p90_s")?,
        c("time_ratio_median")?,
        c("ratio_episodes")?,
        c("autopilot_race_time_median_s")?,
    ];
    Ok(t.rows()
        .filter_map(|f| {
            let n = |i: usize| f[cols[i]].parse::<f64>().ok();
            let opt = |i: usize| f[cols[i]].parse().ok();
            Some(HeldOutRow {
                frames: n(0)? as u64,
                minutes: n(1)?,
                updates: n(2)? as u64,
                episodes: n(3)? as usize,
                finish_rate: n(4)?,
                mean_progress: n(5)?,
                race_time_p10_s: opt(6),
                race_time_median_s: opt(7),
                race_time_p90_s: opt(8),
                time_ratio_median: opt(9),
                ratio_episodes: n(10)? as usize,
                autopilot_race_time_median_s: opt(11),
            })
        })
        .collect())
}

fn open_appending(path: &Path, header: &str) -> anyhow::Result<std::fs::File> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    if !path.exists() {
        // A new table appears with its header whole (written beside it and
        // renamed into place): a reader polling a starting run never sees
        // an empty file or half a header.
        rulka_checkpoint::write_atomic(path, format!("{header}\n").as_bytes())
            .with_context(|| format!("creating {}", path.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    if f.metadata()?.len() == 0 {
        writeln!(f, "{header}")?;
        return Ok(f);
    }
    // Reads follow the seek; writes still go to the end (append mode).
    let mut last = [0u8; 1];
    f.seek(SeekFrom::End(-1))?;
    f.read_exact(&mut last)?;
    if last[0] != b'\n' {
        // A trainer killed mid-row left a cut line: it stays a short line of
        // its own (readers skip it), never glued to the next row.
        writeln!(f)?;
    }
    Ok(f)
}

/// A CSV file read whole: its header and its complete lines.
struct Table {
    path: PathBuf,
    header: Vec<String>,
    lines: Vec<String>,
}

impl Table {
    fn read(path: &Path, hint: &str) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput(format!("{}: {e} ({hint})", path.display())))?;
        let mut lines = text.lines();
        let header = lines.next().unwrap_or("").split(',').map(str::to_string).collect();
        Ok(Self { path: path.to_path_buf(), header, lines: lines.map(str::to_string).collect() })
    }

    fn column(&self, name: &str) -> anyhow::Result<usize> {
        self.header.iter().position(|h| h == name).ok_or_else(|| {
            BadInput(format!("{}: no column {name:?} in the header", self.path.display())).into()
        })
    }

    /// The fields of every line with all the header's fields (a line cut by
    /// a crash mid-write has fewer and is skipped; so is one whose numbers
    /// do not parse, by the readers).
    fn rows(&self) -> impl Iterator<Item = Vec<&str>> {
        self.lines
            .iter()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f.len() == self.header.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows written by hand (as a reader in another language would see the
    /// file) are read back field by field; a cut last line is skipped.
    #[test]
    fn trajectories_csv_reads_back_what_it_wrote() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut w = TrajectoriesCsv::open(dir.path()).expect("open");
        let row = TrajectoryRow {
            frames: 1200,
            minutes: 0.5,
            updates: 3,
            collector: 1,
            trajectory: (1 << 40) | 7,
            seed: 42,
            eval: true,
            steps: 60,
            ret: -1.25,
            progress_m: 12.5,
            progress_frac: 0.25,
            finished: true,
            race_time_s: Some(10.41),
        };
        w.append(&row).expect("append");
        w.append(&TrajectoryRow { eval: false, finished: false, race_time_s: None, ..row.clone() })
            .expect("append");
        drop(w);
        let text = std::fs::read_to_string(dir.path().join("trajectories.csv")).expect("read");
        assert_eq!(
            text.lines().nth(1),
            Some("1200,0.500,3,1,1099511627783,42,eval,60,-1.2500,12.50,0.2500,1,10.41")
        );
        std::fs::write(dir.path().join("trajectories.csv"), text + "1300,0.6,3,1,9,42,ex")
            .expect("cut line");
        let rows = read_trajectories(dir.path()).expect("read back");
        assert_eq!(rows.len(), 2, "the cut line is skipped");
        assert_eq!(rows[0], row);
        assert_eq!((rows[1].eval, rows[1].finished, rows[1].race_time_s), (false, false, None));
    }

    /// A trainer killed mid-row, then resumed: its next rows start on a line
    /// of their own, and the cut row (wherever it is) is skipped.
    #[test]
    fn a_row_cut_by_a_killed_trainer_is_not_glued_to_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("trajectories.csv");
        let full = "100,0.1,1,0,5,0,explo,100,1.0,25.0,0.25,0,";
        std::fs::write(&path, format!("{TRAJECTORIES_HEADER}\n{full}\n200,0.2,1,0,6,0,ex"))
            .expect("write");
        let row = TrajectoryRow {
            frames: 300,
            minutes: 0.3,
            updates: 2,
            collector: 1,
            trajectory: 8,
            seed: 0,
            eval: false,
            steps: 100,
            ret: 2.0,
            progress_m: 100.0,
            progress_frac: 1.0,
            finished: true,
            race_time_s: Some(9.5),
        };
        TrajectoriesCsv::open(dir.path()).expect("open").append(&row).expect("append");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().nth(2), Some("200,0.2,1,0,6,0,ex"), "{text}");
        let rows = read_trajectories(dir.path()).expect("read back");
        assert_eq!(rows.iter().map(|r| r.frames).collect::<Vec<_>>(), [100, 300]);
        assert_eq!(rows[1], row);
        // A line with the header's number of fields and a number that does
        // not parse (garbled) is skipped too.
        let garbled = "2-0,0.2,1,0,6,0,explo,100,1.0,25.0,0.25,0,";
        std::fs::write(&path, format!("{TRAJECTORIES_HEADER}\n{full}\n{garbled}\n"))
            .expect("write");
        assert_eq!(read_trajectories(dir.path()).expect("read").len(), 1);
    }

    #[test]
    fn a_missing_column_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("heldout.csv"), "frames,minutes\n1,2\n").expect("write");
        let e = read_heldout(dir.path()).expect_err("no finish_rate column");
        assert!(e.to_string().contains("no column \"updates\""), "{e}");
        let e = read_trajectories(dir.path()).expect_err("no file");
        assert!(e.to_string().contains("trajectories.csv"), "{e}");
    }
}
