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
    /// The start of the run that wrote it (`starts.json`; 0 in a table
    /// from before starts were numbered).
    pub start: u32,
    /// The start that threw it away (it came after the state that start
    /// resumed from: [`crate::thrown_away_by`]); `None` on the kept timeline.
    pub thrown_away_by: Option<u32>,
}

const TRAJECTORIES_HEADER: &str = "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s,start,thrown_away_by";

/// The appending writer of `RUN_DIR/trajectories.csv`, and the figures of
/// the rows it wrote: a trainer's own race counters are what its table
/// holds, counted by the writer of the table.
#[derive(Debug)]
pub struct TrajectoriesCsv {
    file: std::fs::File,
    figures: RunFigures,
}

impl TrajectoriesCsv {
    /// `RUN_DIR/trajectories.csv`, its header written when it is new.
    pub fn open(run_dir: &Path) -> anyhow::Result<Self> {
        let file = open_appending(&RunDir::new(run_dir).trajectories_csv(), TRAJECTORIES_HEADER)?;
        Ok(Self { file, figures: RunFigures::default() })
    }

    /// The figures of the rows this writer appended ([`RunFigures::add_row`]
    /// of each; times as given, before the table's rounding to the
    /// hundredth).
    pub fn figures(&self) -> RunFigures {
        self.figures
    }

    /// Appends one row (counted in [`Self::figures`] once written).
    pub fn append(&mut self, r: &TrajectoryRow) -> anyhow::Result<()> {
        // One write per row: a trainer killed mid-row never leaves half
        // of it (write_fmt would issue a write per piece).
        let line = format!(
            "{},{:.3},{},{},{},{},{},{},{:.4},{:.2},{:.4},{},{},{},{}\n",
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
            r.race_time_s.map_or(String::new(), |t| format!("{t:.2}")),
            r.start,
            r.thrown_away_by.map_or(String::new(), |s| s.to_string()),
        );
        self.file.write_all(line.as_bytes()).context("writing trajectories.csv")?;
        self.figures.add_row(r);
        Ok(())
    }
}

/// A row of a run's tables that a resume may have thrown away.
pub trait OnTimeline {
    /// The start that threw it away; `None` on the kept timeline.
    fn thrown_away_by(&self) -> Option<u32>;
}

impl OnTimeline for TrajectoryRow {
    fn thrown_away_by(&self) -> Option<u32> {
        self.thrown_away_by
    }
}

impl OnTimeline for HeldOutRow {
    fn thrown_away_by(&self) -> Option<u32> {
        self.thrown_away_by
    }
}

/// The rows of a table on the run's kept timeline, in their order, and how
/// many a resume threw away (left out): what every reader that draws or
/// sums up a run's timeline takes (`rulka plot`, `summary.json`, the
/// held-out evaluator's record of earlier starts).
pub fn kept<R: OnTimeline>(rows: Vec<R>) -> (Vec<R>, usize) {
    let all = rows.len();
    let kept: Vec<R> = rows.into_iter().filter(|r| r.thrown_away_by().is_none()).collect();
    let thrown = all - kept.len();
    (kept, thrown)
}

/// What a run's trajectories say of its races: how many finished, the
/// frame count of the first that did, and the best race time among them.
/// Taken over the rows given (callers pass the kept timeline, and choose
/// the kinds: every run, or exploration only); a race time that is not a
/// finite positive number counts as no time.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct RunFigures {
    /// Finished runs.
    pub finishes: u64,
    /// The smallest frame count of a finished run.
    pub first_finish_frame: Option<u64>,
    /// The smallest race time of a finished run.
    pub best_race_time_s: Option<f64>,
}

/// The race time a row counts for (in [`RunFigures`] and every mean of
/// race times): a finished run's time when it is a finite number above 0.
pub fn counted_race_time(r: &TrajectoryRow) -> Option<f64> {
    r.race_time_s.filter(|t| r.finished && t.is_finite() && *t > 0.0)
}

impl RunFigures {
    /// The figures of `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a TrajectoryRow>) -> Self {
        let mut f = Self::default();
        for r in rows {
            f.add_row(r);
        }
        f
    }

    /// One more row of `trajectories.csv`, counted as the table counts it:
    /// a finished run at the row's frames (the trainer counts the row it
    /// writes, so its figures are the table's).
    pub fn add_row(&mut self, r: &TrajectoryRow) {
        if r.finished {
            self.add(r.frames, counted_race_time(r));
        }
    }

    /// One more finished run, counted at `frames`.
    pub fn add(&mut self, frames: u64, race_time_s: Option<f64>) {
        self.finishes += 1;
        self.first_finish_frame = Some(self.first_finish_frame.map_or(frames, |f| f.min(frames)));
        if let Some(t) = race_time_s.filter(|t| t.is_finite() && *t > 0.0) {
            self.best_race_time_s = Some(self.best_race_time_s.map_or(t, |b| b.min(t)));
        }
    }

    /// Both sets of runs together.
    pub fn merged(self, other: Self) -> Self {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let best = match (self.best_race_time_s, other.best_race_time_s) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self {
            finishes: self.finishes + other.finishes,
            first_finish_frame: min(self.first_finish_frame, other.first_finish_frame),
            best_race_time_s: best,
        }
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
    let starts = starts_of(run_dir)?;
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
    let (cst, cth) = (t.column_opt("start"), t.column_opt("thrown_away_by"));
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
                start: cst.map_or(Some(0), |c| start_field(f[c]))?,
                thrown_away_by: cth.and_then(|c| f[c].parse().ok()),
            })
        })
        .map(|mut r| {
            // The starts decide (the column is their mark, written at each start).
            if let Some(s) = &starts {
                r.thrown_away_by = crate::thrown_away_by(s, r.start, r.frames);
            }
            r
        })
        .collect())
}

/// A row's `start`: empty is 0 (a row from before starts were numbered,
/// as [`mark_thrown_away`] writes it).
fn start_field(f: &str) -> Option<u32> {
    if f.is_empty() {
        Some(0)
    } else {
        f.parse().ok()
    }
}

/// The run's starts, when `starts.json` says them.
fn starts_of(run_dir: &Path) -> anyhow::Result<Option<Vec<crate::Start>>> {
    let s = crate::Start::read(run_dir)?;
    Ok((!s.is_empty()).then_some(s))
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
    /// The start that evaluated (0 from before starts were numbered).
    pub start: u32,
    /// The start that threw it away, as [`TrajectoryRow::thrown_away_by`].
    pub thrown_away_by: Option<u32>,
}

const HELDOUT_HEADER: &str = "frames,minutes,updates,episodes,finish_rate,mean_progress,race_time_p10_s,race_time_median_s,race_time_p90_s,time_ratio_median,ratio_episodes,autopilot_race_time_median_s,start,thrown_away_by";

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
            "{},{:.3},{},{},{:.4},{:.4},{},{},{},{},{},{},{},{}\n",
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
            r.start,
            r.thrown_away_by.map_or(String::new(), |s| s.to_string()),
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
    let starts = starts_of(run_dir)?;
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
    let (cst, cth) = (t.column_opt("start"), t.column_opt("thrown_away_by"));
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
                start: cst.map_or(Some(0), |c| start_field(f[c]))?,
                thrown_away_by: cth.and_then(|c| f[c].parse().ok()),
            })
        })
        .map(|mut r| {
            // The starts decide (the column is their mark, written at each start).
            if let Some(s) = &starts {
                r.thrown_away_by = crate::thrown_away_by(s, r.start, r.frames);
            }
            r
        })
        .collect())
}

/// Marks the rows of `trajectories.csv` and `heldout.csv` that a start
/// threw away ([`crate::thrown_away_by`] over `starts`), and brings a table
/// from before starts were numbered to today's columns (its rows start 0).
/// Each table is rewritten atomically, its other fields as they were; a
/// line a killed trainer cut is dropped. Returns the rows marked in each.
pub fn mark_thrown_away(run_dir: &Path, starts: &[crate::Start]) -> anyhow::Result<(usize, usize)> {
    let run = RunDir::new(run_dir);
    Ok((
        mark_table(&run.trajectories_csv(), TRAJECTORIES_HEADER, starts)?,
        mark_table(&run.heldout_csv(), HELDOUT_HEADER, starts)?,
    ))
}

fn mark_table(path: &Path, header: &str, starts: &[crate::Start]) -> anyhow::Result<usize> {
    if !path.exists() {
        return Ok(0);
    }
    let t = Table::read(path, "a rulka run's table")?;
    let want: Vec<&str> = header.split(',').collect();
    // Today's columns are the old ones plus any of `start`, `thrown_away_by`
    // it lacks, at the end.
    let mut columns = t.header.clone();
    for c in ["start", "thrown_away_by"] {
        if !columns.iter().any(|h| h == c) {
            columns.push(c.to_string());
        }
    }
    anyhow::ensure!(
        want.iter().all(|w| columns.iter().any(|c| c == w)),
        "{}: columns {:?}, not the table's {want:?}",
        path.display(),
        t.header
    );
    let (cf, cst, cth) = (t.column("frames")?, columns.len() - 2, columns.len() - 1);
    let (cst, cth) =
        (t.column_opt("start").unwrap_or(cst), t.column_opt("thrown_away_by").unwrap_or(cth));
    let mut out = columns.join(",") + "\n";
    let mut marked = 0;
    for f in t.rows() {
        let mut f: Vec<String> = f.iter().map(|x| x.to_string()).collect();
        f.resize(columns.len(), String::new());
        if f[cst].is_empty() {
            f[cst] = "0".into();
        }
        let (Ok(start), Ok(frames)) = (f[cst].parse::<u32>(), f[cf].parse::<f64>()) else {
            continue;
        };
        let by = crate::thrown_away_by(starts, start, frames as u64);
        marked += usize::from(by.is_some());
        f[cth] = by.map_or(String::new(), |s| s.to_string());
        out += &(f.join(",") + "\n");
    }
    rulka_checkpoint::write_atomic(path, out.as_bytes())
        .with_context(|| format!("rewriting {}", path.display()))?;
    Ok(marked)
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

    fn column_opt(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
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
            start: 2,
            thrown_away_by: None,
        };
        w.append(&row).expect("append");
        w.append(&TrajectoryRow { eval: false, finished: false, race_time_s: None, ..row.clone() })
            .expect("append");
        drop(w);
        let text = std::fs::read_to_string(dir.path().join("trajectories.csv")).expect("read");
        assert_eq!(
            text.lines().nth(1),
            Some("1200,0.500,3,1,1099511627783,42,eval,60,-1.2500,12.50,0.2500,1,10.41,2,")
        );
        std::fs::write(dir.path().join("trajectories.csv"), text + "1300,0.6,3,1,9,42,ex")
            .expect("cut line");
        let rows = read_trajectories(dir.path()).expect("read back");
        assert_eq!(rows.len(), 2, "the cut line is skipped");
        assert_eq!(rows[0], row);
        assert_eq!((rows[1].eval, rows[1].finished, rows[1].race_time_s), (false, false, None));
    }

    /// A table from before starts were numbered (the old header, a line a
    /// killed trainer cut), resumed from a state at 6 000 frames: the
    /// table gets today's columns, its rows start 0, the one after the
    /// state is marked thrown away by start 1 (the others left as they
    /// were, field for field), the cut line goes, and the new start's rows
    /// append after it.
    #[test]
    fn an_old_table_is_brought_to_todays_columns_and_its_thrown_away_rows_marked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("trajectories.csv");
        let old_header = "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s";
        let rows = [
            "100,0.1,1,0,0,3,explo,100,1.0000,25.00,0.2500,0,",
            "5000,0.9,9,0,1,3,explo,90,2.5000,250.00,1.0000,1,10.50",
            "7000,1.2,12,0,2,3,explo,80,2.7500,250.00,1.0000,1,9.80",
        ];
        std::fs::write(&path, format!("{old_header}\n{}\n7100,1.3,12,0,3,3,ex", rows.join("\n")))
            .expect("write");
        let at = crate::StateAt { frames: 6000, updates: 10, state: None };
        let starts = vec![crate::Start::begin(dir.path(), "resumed", at, 1).expect("begin")];
        assert_eq!(mark_thrown_away(dir.path(), &starts).expect("marked"), (1, 0));
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], TRAJECTORIES_HEADER);
        assert_eq!(
            lines[1..],
            [format!("{},0,", rows[0]), format!("{},0,", rows[1]), format!("{},0,1", rows[2])]
        );
        let row = TrajectoryRow {
            frames: 6080,
            minutes: 0.1,
            updates: 10,
            collector: 0,
            trajectory: 1 << 40,
            seed: 3,
            eval: false,
            steps: 80,
            ret: 1.0,
            progress_m: 250.0,
            progress_frac: 1.0,
            finished: true,
            race_time_s: Some(9.9),
            start: 1,
            thrown_away_by: None,
        };
        TrajectoriesCsv::open(dir.path()).expect("open").append(&row).expect("append");
        let back = read_trajectories(dir.path()).expect("read back");
        let seen: Vec<(u64, u32, Option<u32>)> =
            back.iter().map(|r| (r.frames, r.start, r.thrown_away_by)).collect();
        assert_eq!(seen, [(100, 0, None), (5000, 0, None), (7000, 0, Some(1)), (6080, 1, None)]);
        // Marking again changes nothing.
        assert_eq!(mark_thrown_away(dir.path(), &starts).expect("marked"), (1, 0));
        assert_eq!(read_trajectories(dir.path()).expect("read"), back);
    }

    /// A trainer killed mid-row, then resumed: its next rows start on a line
    /// of their own, and the cut row (wherever it is) is skipped.
    #[test]
    fn a_row_cut_by_a_killed_trainer_is_not_glued_to_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("trajectories.csv");
        let full = "100,0.1,1,0,5,0,explo,100,1.0,25.0,0.25,0,,1,";
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
            start: 1,
            thrown_away_by: None,
        };
        TrajectoriesCsv::open(dir.path()).expect("open").append(&row).expect("append");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().nth(2), Some("200,0.2,1,0,6,0,ex"), "{text}");
        let rows = read_trajectories(dir.path()).expect("read back");
        assert_eq!(rows.iter().map(|r| r.frames).collect::<Vec<_>>(), [100, 300]);
        assert_eq!(rows[1], row);
        // A line with the header's number of fields and a number that does
        // not parse (garbled) is skipped too.
        let garbled = "2-0,0.2,1,0,6,0,explo,100,1.0,25.0,0.25,0,,1,";
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
