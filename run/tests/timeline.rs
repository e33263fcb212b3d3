//! The kept timeline of a run against a model over generated runs: every
//! sequence of starts (each resuming from any earlier frame count, or from
//! one past every row) and rows of any start at any frame count, including
//! rows of start 0 (a table from before starts were numbered), rows at
//! exactly a resume's frame count, and rows of a start the file does not
//! list. The model replays the run: each start cuts the timeline back to
//! the state it resumed from, then adds its own rows.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use rulka_run::{kept, thrown_away_by, RunFigures, Start, StateAt, TrajectoryRow};

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x0072_756c_6b61),
        failure_persistence: None,
        ..Config::default()
    }
}

fn start(n: u32, from: u64) -> Start {
    Start {
        start: n,
        how: if n == 1 { "fresh" } else { "resumed" }.into(),
        time: String::new(),
        unix_s: 0,
        from: StateAt { frames: from, updates: 0, state: None },
        ended: None,
    }
}

/// For each row `(start, frames)`, the start that cut it from the
/// timeline, replaying the run start by start.
fn model(starts: &[Start], rows: &[(u32, u64)]) -> Vec<Option<u32>> {
    let mut by = vec![None; rows.len()];
    let mut timeline: Vec<usize> = Vec::new();
    let last = starts.iter().map(|s| s.start).max().unwrap_or(0);
    // Rows of start 0 and of starts before the first listed come first.
    let first = starts.first().map_or(u32::MAX, |s| s.start);
    timeline.extend((0..rows.len()).filter(|&i| rows[i].0 < first));
    for s in starts {
        timeline.retain(|&i| {
            let cut = rows[i].1 > s.from.frames;
            if cut {
                by[i] = Some(s.start);
            }
            !cut
        });
        timeline.extend((0..rows.len()).filter(|&i| rows[i].0 == s.start));
    }
    // Rows of a start after the last listed: nothing came after them.
    timeline.extend((0..rows.len()).filter(|&i| rows[i].0 > last));
    by
}

/// Starts 1..=n: the first fresh, each later one resuming from one of the
/// generated frame counts (a state it had, or an older or a copied one).
fn starts_of(resumes: &[u64]) -> Vec<Start> {
    std::iter::once(start(1, 0))
        .chain(resumes.iter().enumerate().map(|(k, &f)| start(k as u32 + 2, f)))
        .collect()
}

fn row(start: u32, frames: u64, finished: bool, race_time_s: Option<f64>) -> TrajectoryRow {
    TrajectoryRow {
        frames,
        minutes: 0.0,
        updates: 0,
        collector: 0,
        trajectory: 0,
        seed: 0,
        eval: false,
        steps: 1,
        ret: 0.0,
        progress_m: 0.0,
        progress_frac: 0.0,
        finished,
        race_time_s,
        start,
        thrown_away_by: None,
    }
}

fn heldout_row(start: u32, frames: u64) -> rulka_run::HeldOutRow {
    rulka_run::HeldOutRow {
        frames,
        minutes: 0.0,
        updates: 40 - frames,
        episodes: 10,
        finish_rate: 0.5,
        mean_progress: 0.5,
        race_time_p10_s: None,
        race_time_median_s: None,
        race_time_p90_s: None,
        time_ratio_median: None,
        ratio_episodes: 0,
        autopilot_race_time_median_s: None,
        start,
        thrown_away_by: None,
    }
}

/// Frame counts drawn so that ties with a resume's frame count are common.
fn frames() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..40, Just(0), Just(10), Just(20), Just(u64::MAX)]
}

proptest! {
    #![proptest_config(config(4000))]

    #[test]
    fn a_row_is_thrown_away_by_the_first_later_start_that_cut_the_timeline_before_it(
        resumes in prop::collection::vec(frames(), 0..5),
        rows in prop::collection::vec((0u32..8, frames()), 0..30),
    ) {
        let starts = starts_of(&resumes);
        let want = model(&starts, &rows);
        for (i, &(s, f)) in rows.iter().enumerate() {
            prop_assert_eq!(thrown_away_by(&starts, s, f), want[i], "row {} = {:?}", i, (s, f));
        }
    }

    #[test]
    fn the_kept_rows_and_their_figures_are_the_models(
        resumes in prop::collection::vec(frames(), 0..5),
        rows in prop::collection::vec(
            (0u32..7, frames(), any::<bool>(), prop_oneof![
                Just(None), Just(Some(f64::NAN)), Just(Some(f64::INFINITY)), Just(Some(0.0)),
                Just(Some(-1.0)), (1u32..50).prop_map(|t| Some(f64::from(t) / 4.0)),
            ], (any::<bool>(), 0u32..3, 0u64..4, 1usize..400, -2.0f64..2.0)),
            0..30,
        ),
    ) {
        let starts = starts_of(&resumes);
        // Every other field of a row generated too (greedy and exploration
        // runs, collectors, tracks, lengths, progress): a figure may depend
        // on none of them.
        let table: Vec<TrajectoryRow> = rows
            .iter()
            .enumerate()
            .map(|(i, &(s, f, fin, t, (eval, collector, seed, steps, x)))| {
                let mut r = row(s, f, fin, t);
                (r.eval, r.collector, r.seed, r.steps) = (eval, collector, seed, steps);
                (r.ret, r.progress_m, r.progress_frac, r.minutes) = (x, 100.0 * x, x / 2.0, x.abs());
                r.trajectory = i as u64;
                r.thrown_away_by = thrown_away_by(&starts, s, f);
                r
            })
            .collect();
        let by = model(&starts, &rows.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>());
        let (kept_rows, thrown) = kept(table.clone());
        let want: Vec<&TrajectoryRow> =
            table.iter().zip(&by).filter(|(_, b)| b.is_none()).map(|(r, _)| r).collect();
        // Rows told apart by their index (a NaN race time is not equal to itself).
        prop_assert_eq!(
            kept_rows.iter().map(|r| r.trajectory).collect::<Vec<_>>(),
            want.iter().map(|r| r.trajectory).collect::<Vec<_>>(),
            "in file order"
        );
        prop_assert_eq!(thrown, table.len() - want.len());
        // The figures: finished rows counted, the smallest frame count, the
        // smallest race time that is a time (finite, above zero).
        let finished: Vec<&&TrajectoryRow> = want.iter().filter(|r| r.finished).collect();
        let f = RunFigures::of(&kept_rows);
        prop_assert_eq!(f.finishes, finished.len() as u64);
        prop_assert_eq!(f.first_finish_frame, finished.iter().map(|r| r.frames).min());
        let mut times: Vec<f64> = finished
            .iter()
            .filter_map(|r| r.race_time_s)
            .filter(|t| t.is_finite() && *t > 0.0)
            .collect();
        times.sort_by(f64::total_cmp);
        prop_assert_eq!(f.best_race_time_s, times.first().copied());
        // Split anywhere, the two halves' figures merge to the whole's.
        let half = kept_rows.len() / 2;
        let merged = RunFigures::of(&kept_rows[..half]).merged(RunFigures::of(&kept_rows[half..]));
        prop_assert_eq!(merged, f);
    }
}

/// Both tables (trajectories and held-out evaluations) as written and
/// marked on disk read back with the marks the starts give, whatever the
/// order of the rows in the file.
#[test]
fn marking_a_table_and_reading_it_agree_with_the_starts() {
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::new(config(60));
    let strategy =
        (prop::collection::vec(0u64..40, 1..4), prop::collection::vec((1u32..5, 0u64..40), 1..20));
    runner
        .run(&strategy, |(resumes, rows)| {
            let dir = tempfile::tempdir().unwrap();
            // Both tables, their update counts unlike their frame counts
            // (a reader must judge a row by its frames).
            let mut csv = rulka_run::TrajectoriesCsv::open(dir.path()).unwrap();
            let mut heldout = rulka_run::HeldOutCsv::open(dir.path()).unwrap();
            for &(s, f) in &rows {
                let mut r = row(s, f, false, None);
                r.updates = 40 - f;
                csv.append(&r).unwrap();
                heldout.append(&heldout_row(s, f)).unwrap();
            }
            drop((csv, heldout));
            let mut t = 1_700_000_000;
            Start::begin(dir.path(), "fresh", StateAt::default(), t).unwrap();
            for &f in &resumes {
                t += 60;
                Start::begin(
                    dir.path(),
                    "resumed",
                    StateAt { frames: f, updates: 0, state: None },
                    t,
                )
                .unwrap();
            }
            let starts = Start::read(dir.path()).unwrap();
            rulka_run::mark_thrown_away(dir.path(), &starts).unwrap();
            let read = rulka_run::read_trajectories(dir.path()).unwrap();
            prop_assert_eq!(read.len(), rows.len());
            let want = model(&starts, &rows);
            for (i, r) in read.iter().enumerate() {
                prop_assert_eq!((r.start, r.frames), rows[i]);
                prop_assert_eq!(r.thrown_away_by, want[i], "row {}", i);
            }
            let read = rulka_run::read_heldout(dir.path()).unwrap();
            prop_assert_eq!(read.len(), rows.len());
            for (i, r) in read.iter().enumerate() {
                prop_assert_eq!((r.start, r.frames), rows[i]);
                prop_assert_eq!(r.thrown_away_by, want[i], "held-out row {}", i);
            }
            Ok(())
        })
        .unwrap();
}

proptest! {
    #![proptest_config(config(300))]

    /// The table's writer counts what it wrote: over generated rows
    /// (finished or not, times of every kind: none, 0, negative, NaN, ±∞,
    /// ordinary), `TrajectoriesCsv::figures` is the model's — finishes
    /// counted, the smallest frame count of a finish, the smallest time
    /// that is a finite number above 0 — and the table read back gives the
    /// same finishes and first finish (its times rounded to the hundredth:
    /// the best within 0.005 s).
    #[test]
    fn the_tables_writer_counts_the_rows_it_wrote(
        rows in prop::collection::vec(
            (
                any::<bool>(),
                0u64..5000,
                prop_oneof![
                    Just(None),
                    Just(Some(0.0)),
                    Just(Some(-2.0)),
                    Just(Some(f64::NAN)),
                    Just(Some(f64::INFINITY)),
                    Just(Some(f64::NEG_INFINITY)),
                    (100u32..6000).prop_map(|c| Some(f64::from(c) / 100.0 + 0.004)),
                ],
            ),
            0..30,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut w = rulka_run::TrajectoriesCsv::open(dir.path()).unwrap();
        for &(finished, frames, t) in &rows {
            w.append(&row(1, frames, finished, t)).unwrap();
        }
        let f = w.figures();
        let fin: Vec<&(bool, u64, Option<f64>)> = rows.iter().filter(|r| r.0).collect();
        prop_assert_eq!(f.finishes, fin.len() as u64);
        prop_assert_eq!(f.first_finish_frame, fin.iter().map(|r| r.1).min());
        let best = fin
            .iter()
            .filter_map(|r| r.2)
            .filter(|t| t.is_finite() && *t > 0.0)
            .min_by(f64::total_cmp);
        prop_assert_eq!(f.best_race_time_s, best);
        drop(w);
        let back = rulka_run::read_trajectories(dir.path()).unwrap();
        let g = RunFigures::of(&back);
        prop_assert_eq!((g.finishes, g.first_finish_frame), (f.finishes, f.first_finish_frame));
        match (g.best_race_time_s, f.best_race_time_s) {
            (Some(a), Some(b)) => prop_assert!((a - b).abs() <= 0.005 + 1e-9, "{} vs {}", a, b),
            (a, b) => prop_assert_eq!(a.is_some(), b.is_some()),
        }
    }
}

/// The race time a row counts for, against its rule over every kind of
/// row: a finished run's time when it is a finite number above 0 (0, -0,
/// negatives, NaN, ±∞ and the smallest positive number included), none for
/// a run that did not finish, whatever time it carries.
#[test]
fn a_row_counts_a_finished_runs_finite_time_above_zero() {
    let times = [
        None,
        Some(0.0),
        Some(-0.0),
        Some(-1.5),
        Some(f64::NAN),
        Some(f64::INFINITY),
        Some(f64::NEG_INFINITY),
        Some(f64::MIN_POSITIVE),
        Some(0.004),
        Some(41.25),
    ];
    for finished in [false, true] {
        for t in times {
            let r = row(1, 100, finished, t);
            let want = match t {
                Some(x) if finished && x.is_finite() && x > 0.0 => Some(x),
                _ => None,
            };
            assert_eq!(rulka_run::counted_race_time(&r), want, "finished {finished}, time {t:?}");
        }
    }
}

/// Both tables' readers judge a row by `starts.json` when it lists the
/// starts, whatever the `thrown_away_by` column says (a trainer killed
/// between writing a start and marking the tables leaves the column
/// stale), and by the column when there is no `starts.json`; and
/// [`kept`] leaves out the rows so marked, of either table. Every row of
/// both files carries a mark that disagrees with the starts' verdict.
#[test]
fn the_starts_decide_a_rows_mark_over_a_stale_column_and_the_column_without_them() {
    let mut runner = proptest::test_runner::TestRunner::new(config(40));
    let strategy =
        (prop::collection::vec(0u64..40, 1..4), prop::collection::vec((1u32..5, 0u64..40), 1..20));
    runner
        .run(&strategy, |(resumes, rows)| {
            let dir = tempfile::tempdir().unwrap();
            let starts = starts_of(&resumes);
            let want = model(&starts, &rows);
            // The column's mark: the opposite of the starts' verdict.
            let stale = |i: usize| if want[i].is_some() { None } else { Some(99) };
            let mut csv = rulka_run::TrajectoriesCsv::open(dir.path()).unwrap();
            let mut heldout = rulka_run::HeldOutCsv::open(dir.path()).unwrap();
            for (i, &(s, f)) in rows.iter().enumerate() {
                let mut r = row(s, f, true, Some(30.0));
                r.thrown_away_by = stale(i);
                csv.append(&r).unwrap();
                let mut h = heldout_row(s, f);
                h.thrown_away_by = stale(i);
                heldout.append(&h).unwrap();
            }
            drop((csv, heldout));
            // Without starts.json: the column, as written.
            let t = rulka_run::read_trajectories(dir.path()).unwrap();
            let h = rulka_run::read_heldout(dir.path()).unwrap();
            for i in 0..rows.len() {
                prop_assert_eq!(
                    t[i].thrown_away_by,
                    stale(i),
                    "trajectory row {} without starts",
                    i
                );
                prop_assert_eq!(h[i].thrown_away_by, stale(i), "held-out row {} without starts", i);
            }
            let column_kept = (0..rows.len()).filter(|&i| stale(i).is_none()).count();
            prop_assert_eq!(kept(t).0.len(), column_kept);
            prop_assert_eq!(kept(h).0.len(), column_kept);
            // With starts.json: the starts, not the column.
            let mut at = 1_700_000_000;
            Start::begin(dir.path(), "fresh", StateAt::default(), at).unwrap();
            for &f in &resumes {
                at += 60;
                let from = StateAt { frames: f, updates: 0, state: None };
                Start::begin(dir.path(), "resumed", from, at).unwrap();
            }
            let t = rulka_run::read_trajectories(dir.path()).unwrap();
            let h = rulka_run::read_heldout(dir.path()).unwrap();
            for i in 0..rows.len() {
                prop_assert_eq!(t[i].thrown_away_by, want[i], "trajectory row {} with starts", i);
                prop_assert_eq!(h[i].thrown_away_by, want[i], "held-out row {} with starts", i);
            }
            let starts_kept = want.iter().filter(|w| w.is_none()).count();
            let (kt, nt) = kept(t);
            let (kh, nh) = kept(h);
            prop_assert_eq!((kt.len(), nt), (starts_kept, rows.len() - starts_kept));
            prop_assert_eq!((kh.len(), nh), (starts_kept, rows.len() - starts_kept));
            Ok(())
        })
        .unwrap();
}

/// A run being watched as it starts has no `trajectories.csv` yet: no rows;
/// once the file is there, its rows.
#[test]
fn the_rows_so_far_are_none_before_the_table_and_its_rows_after() {
    let dir = tempfile::tempdir().unwrap();
    assert!(rulka_run::read_trajectories_so_far(dir.path()).unwrap().is_empty());
    let mut csv = rulka_run::TrajectoriesCsv::open(dir.path()).unwrap();
    for f in [10, 20, 30] {
        csv.append(&row(1, f, f == 20, Some(12.5))).unwrap();
    }
    drop(csv);
    let rows = rulka_run::read_trajectories_so_far(dir.path()).unwrap();
    assert_eq!(
        rows.iter().map(|r| (r.frames, r.finished)).collect::<Vec<_>>(),
        [(10, false), (20, true), (30, false)]
    );
}

proptest! {
    #![proptest_config(config(2000))]

    /// `RunFigures::add`, the owner every counter goes through (the
    /// trainer's as well as the table's), against a model: each finish
    /// counted, the smallest frame count, the smallest time that is a
    /// finite number above 0 (none, 0, -0, negatives, NaN, ±∞ are no time).
    #[test]
    fn figures_added_one_by_one_are_the_models(
        runs in prop::collection::vec((frames(), prop_oneof![
            Just(None), Just(Some(0.0)), Just(Some(-0.0)), Just(Some(-2.5)), Just(Some(f64::NAN)),
            Just(Some(f64::INFINITY)), Just(Some(f64::NEG_INFINITY)), Just(Some(f64::MIN_POSITIVE)),
            (1u32..200).prop_map(|t| Some(f64::from(t) / 8.0)),
        ]), 0..25),
    ) {
        let mut f = RunFigures::default();
        for &(frames, t) in &runs {
            f.add(frames, t);
        }
        prop_assert_eq!(f.finishes, runs.len() as u64);
        prop_assert_eq!(f.first_finish_frame, runs.iter().map(|r| r.0).min());
        let mut times: Vec<f64> =
            runs.iter().filter_map(|r| r.1).filter(|t| t.is_finite() && *t > 0.0).collect();
        times.sort_by(f64::total_cmp);
        prop_assert_eq!(f.best_race_time_s, times.first().copied());
    }
}

/// `heldout.csv` reads back as written, every field from its own column:
/// 300 generated tables of one to five rows, each field drawn on its own
/// (on the grid the writer prints: minutes to 1/1000, the rest to 1/10000;
/// the optional ones present or not), so two columns read from each
/// other's places differ, through the one writer and the one reader every
/// other reader goes through.
#[test]
fn a_heldout_row_reads_back_field_for_field() {
    let mut runner = proptest::test_runner::TestRunner::new(Config {
        cases: 300,
        rng_seed: RngSeed::Fixed(75),
        failure_persistence: None,
        ..Config::default()
    });
    let opt = || proptest::option::of(0u32..2_000_000);
    let row = (
        (0u64..1 << 40, 0u32..10_000_000, 0u64..1 << 30, 0usize..5000, 0u32..10_001, 0u32..10_001),
        (opt(), opt(), opt(), opt(), 0usize..5000, opt()),
        (0u32..1000, proptest::option::of(1u32..1000)),
    );
    runner
        .run(&proptest::collection::vec(row, 1..6), |rows| {
            let dir = tempfile::tempdir().unwrap();
            let x = |k: u32| Some(f64::from(k) / 10_000.0);
            let want: Vec<rulka_run::HeldOutRow> = rows
                .iter()
                .map(
                    |&(
                        (frames, min, updates, episodes, fr, mp),
                        (p10, med, p90, ratio, re, ap),
                        (start, th),
                    )| {
                        rulka_run::HeldOutRow {
                            frames,
                            minutes: f64::from(min) / 1000.0,
                            updates,
                            episodes,
                            finish_rate: f64::from(fr) / 10_000.0,
                            mean_progress: f64::from(mp) / 10_000.0,
                            race_time_p10_s: p10.and_then(x),
                            race_time_median_s: med.and_then(x),
                            race_time_p90_s: p90.and_then(x),
                            time_ratio_median: ratio.and_then(x),
                            ratio_episodes: re,
                            autopilot_race_time_median_s: ap.and_then(x),
                            start,
                            thrown_away_by: th,
                        }
                    },
                )
                .collect();
            let mut csv = rulka_run::HeldOutCsv::open(dir.path()).unwrap();
            for r in &want {
                csv.append(r).unwrap();
            }
            drop(csv);
            let got = rulka_run::read_heldout(dir.path()).unwrap();
            prop_assert_eq!(got, want);
            Ok(())
        })
        .unwrap();
}
