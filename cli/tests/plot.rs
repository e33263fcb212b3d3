//! `rulka plot` on hand-written `trajectories.csv` files whose answers are
//! known: one run draws its learning curve, several runs are drawn over each
//! other with each run's first exploration finish (an evaluation finish does
//! not count).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;
use std::process::Command;

const HEADER: &str = "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s";

/// A run directory whose `trajectories.csv` has one row per `(frames, kind, finished)`.
fn run_dir(root: &Path, name: &str, rows: &[(u64, &str, bool)]) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut csv = format!("{HEADER}\n");
    for (k, (frames, kind, finished)) in rows.iter().enumerate() {
        let (progress, time) = if *finished { (1.0, "10.5") } else { (0.25, "") };
        csv += &format!(
            "{frames},0.1,1,0,{k},0,{kind},100,1.0,{},{progress},{},{time}\n",
            progress * 250.0,
            u8::from(*finished)
        );
    }
    std::fs::write(dir.join("trajectories.csv"), csv).unwrap();
    dir
}

/// The data lines of colour `colour` (`#RRGGBB`, upper case as plotters
/// writes it) in `svg`, in pixels; the legend's 18-pixel samples are left out.
fn lines(svg: &str, colour: &str) -> Vec<Vec<(i32, i32)>> {
    rulka_test_support::polylines(svg, colour)
        .into_iter()
        .filter(|l| !(l.len() == 2 && l[0].1 == l[1].1 && l[1].0 - l[0].0 == 18))
        .collect()
}

/// Where a point lands in a chart's panel `panel` (0: top): `fx` of the way
/// along x, `fy` of the way up (rulka_report's documented layout).
fn at(panel: i32, fx: f64, fy: f64) -> (f64, f64) {
    use rulka_report::{PANEL_HEIGHT, PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, TITLE_HEIGHT};
    let top = f64::from(TITLE_HEIGHT) + f64::from(panel) * f64::from(PANEL_HEIGHT);
    (
        f64::from(PLOT_LEFT) + fx * f64::from(PLOT_RIGHT - PLOT_LEFT),
        top + f64::from(PLOT_BOTTOM) - fy * f64::from(PLOT_BOTTOM - PLOT_TOP),
    )
}

/// `got` is `want` to the pixel (plotters rounds to whole pixels).
fn near(got: &[(i32, i32)], want: &[(f64, f64)]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| {
            (f64::from(g.0) - w.0).abs() <= 1.0 && (f64::from(g.1) - w.1).abs() <= 1.0
        })
}

fn rulka(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).arg("plot").args(args).output().unwrap()
}

#[test]
fn several_runs_are_drawn_over_each_other() {
    let root = tempfile::tempdir().unwrap();
    // Run a: an evaluation finish at 2 000 frames, the first exploration finish at 4 000.
    let a = run_dir(
        root.path(),
        "a",
        &[
            (1000, "explo", false),
            (2000, "eval", true),
            (3000, "explo", false),
            (4000, "explo", true),
        ],
    );
    // Run b: never finishes.
    let b = run_dir(root.path(), "b", &[(1500, "explo", false), (9000, "explo", false)]);
    let out = root.path().join("both.svg");
    let o = rulka(&[a.as_os_str(), b.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("a: 4000 frames; first exploration finish at frame 4k"), "{stdout}");
    assert!(stdout.contains("b: 9000 frames; first exploration finish at frame none"), "{stdout}");
    let svg = std::fs::read_to_string(&out).unwrap();
    // Run a (blue): progress 25 %, 25 %, 100 % at 1k, 3k, 4k of 9k frames;
    // run b (red): 25 % at 1.5k and 9k; each run's finish rate dashed beside it.
    let (q, full) = (0.25, 1.0);
    let a_prog = [at(0, 1.0 / 9.0, q), at(0, 3.0 / 9.0, q), at(0, 4.0 / 9.0, full)];
    assert!(lines(&svg, "#1F77B4").iter().any(|l| near(l, &a_prog)), "{svg}");
    assert!(lines(&svg, "#D62728").iter().any(|l| near(l, &[at(0, 1.5 / 9.0, q), at(0, 1.0, q)])));
    assert!(lines(&svg, "#1F77B4").len() > 2, "run a's finish rate, dashed: {svg}");
    assert!(svg.contains("first finish at frame 4k") && svg.contains("2 runs"), "{svg}");

    // One run without greedy evaluation runs says so ("-"), not NaN.
    let o = rulka(&[b.as_os_str()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && stdout.contains("eval progress → -,"), "{stdout}");

    // Several runs need an output path; a directory without trajectories is named.
    let o = rulka(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("several runs need -o"));
    let empty = root.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = rulka(&[a.as_os_str(), empty.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("trajectories.csv"));
}

/// `--heldout`: each run's held-out finish rate and time ratio, placed on
/// the figure's scales (finish rate 0–100 % up the top panel, ratio
/// 0.7–1.5× up the bottom one, frames 0…max along both).
#[test]
fn heldout_curves_are_drawn_on_their_scales() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("h");
    std::fs::create_dir_all(&dir).unwrap();
    let header = "frames,minutes,updates,episodes,finish_rate,mean_progress,race_time_p10_s,race_time_median_s,race_time_p90_s,time_ratio_median,ratio_episodes,autopilot_race_time_median_s";
    let rows = [
        "1000,1,20,100,0.5000,0.8,,30,,,0,24",
        "2000,2,40,100,1.0000,1.0,20,22,23,0.9000,100,24",
        "2500,2.5,50,100,1.0", // cut by a crash mid-write: skipped
    ];
    std::fs::write(dir.join("heldout.csv"), format!("{header}\n{}\n", rows.join("\n"))).unwrap();
    let o = rulka(&["--heldout".as_ref(), dir.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("last at 2k frames: 100% finished, 0.900×"), "{out}");
    let svg = std::fs::read_to_string(dir.join("heldout.svg")).unwrap();
    // Finish rate: (1000, 50 %) halfway along and up, (2000, 100 %) at the top right.
    let blue = lines(&svg, "#1F77B4");
    assert!(blue.iter().any(|l| near(l, &[at(0, 0.5, 0.5), at(0, 1.0, 1.0)])), "{svg}");
    // Ratio: only the second evaluation has one: 0.9× is (0.9 - 0.7) / 0.8 up.
    assert!(blue.iter().any(|l| near(l, &[at(1, 1.0, 0.25)])), "{svg}");
    // A run without heldout.csv is named.
    let none = root.path().join("none");
    std::fs::create_dir_all(&none).unwrap();
    let o = rulka(&["--heldout".as_ref(), none.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("heldout.csv"));
}

/// `--race-time`: finished races and mean race time ÷ the autopilot's time
/// on the run's first track (as `rulka sim render` reports it), over windows
/// of 5 runs.
#[test]
fn race_time_is_drawn_against_the_autopilots() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("r");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        "environment: {sim: {track: easy, track_seeds: [0]}}\n",
    )
    .unwrap();
    // Window 1: 2 of 5 finished (20 s, 22 s); window 2: 4 of 5 finished, in
    // 10.5 s but for one whose time of 0 is no time, and the unfinished one
    // carries a time (3 s) that is not a race's: the mean counts what
    // `RunFigures` counts (10.5 s). An evaluation run in between is not
    // exploration and does not count.
    let mut csv = format!("{HEADER}\n");
    let rows: [(u64, &str, u8, &str); 11] = [
        (100, "explo", 0, ""),
        (200, "explo", 1, "20.00"),
        (300, "explo", 0, ""),
        (350, "eval", 1, "5.00"),
        (400, "explo", 1, "22.00"),
        (500, "explo", 0, ""),
        (600, "explo", 1, "10.50"),
        (700, "explo", 0, "3.00"),
        (800, "explo", 1, "0.00"),
        (900, "explo", 1, "10.50"),
        (1000, "explo", 1, "10.50"),
    ];
    for (k, (frames, kind, fin, time)) in rows.iter().enumerate() {
        csv += &format!("{frames},0.1,1,0,{k},0,{kind},100,1.0,250,1.0,{fin},{time}\n");
    }
    std::fs::write(dir.join("trajectories.csv"), csv).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rulka"))
        .args(["sim", "render", "--seed", "0", "--track", "easy", "--out"])
        .arg(root.path().join("t.png"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    let auto: f64 =
        said.split("finished in ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let o = rulka(&["--race-time".as_ref(), dir.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("(autopilot {auto:.2} s, best 10.50 s)")), "{out}");
    assert!(
        out.contains(&format!("last at 1k frames: 80% finished, {:.3}×", 10.5 / auto)),
        "{out}"
    );
    let svg = std::fs::read_to_string(dir.join("race_time.svg")).unwrap();
    // Finished: (500, 40 %) halfway along; (1000, 80 %) at the right.
    let blue = lines(&svg, "#1F77B4");
    assert!(blue.iter().any(|l| near(l, &[at(0, 0.5, 0.4), at(0, 1.0, 0.8)])), "{svg}");
    // Ratio of window 1: 21/auto (≈ 1.9, drawn at the 1.5× edge: the top);
    // window 2: 10.5/auto.
    let r2 = ((10.5 / auto).clamp(0.7, 1.5) - 0.7) / 0.8;
    assert!(blue.iter().any(|l| near(l, &[at(1, 0.5, 1.0), at(1, 1.0, r2)])), "{svg}");
}

/// Every reader `rulka plot` has — one run, several runs, `--heldout`,
/// `--race-time` — draws a resumed run exactly as it draws the same run
/// with its thrown-away rows deleted from the tables (the reference: a
/// run that never wrote them), figure and printed lines alike (but the
/// line saying how many were left out). The thrown-away rows differ from
/// the kept ones in every figure (later frames, other rates and times),
/// so a reader that keeps any of them draws another figure.
#[test]
fn every_plot_draws_a_run_as_if_its_thrown_away_rows_were_never_written() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("config.yaml"),
        "environment: {sim: {track: easy, track_seeds: [0]}}\n",
    )
    .unwrap();
    let header = "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s,start,thrown_away_by";
    // Start 1 to frame 600; start 2 resumed from the state at 300, so its
    // rows after 300 (thrown away by 2) are fast finishes drawn nowhere.
    let mut traj = Vec::new();
    for (k, f) in (100..=600).step_by(100).enumerate() {
        let thrown = f > 300;
        let (fin, t) = if thrown {
            (1, "9.00")
        } else if k % 2 == 0 {
            (1, "14.00")
        } else {
            (0, "")
        };
        let by = if thrown { "2" } else { "" };
        traj.push(format!(
            "{f},0.1,1,0,{k},0,explo,50,1.0,{},{},{fin},{t},1,{by}",
            100 + 50 * fin,
            0.4 + 0.6 * f64::from(fin)
        ));
    }
    for (k, f) in (350..=950).step_by(100).enumerate() {
        let (fin, t) = if k % 3 == 0 { (1, "13.50") } else { (0, "") };
        traj.push(format!(
            "{f},0.2,2,0,{},0,explo,50,1.0,{},{},{fin},{t},2,",
            10 + k,
            100 + 50 * fin,
            0.4 + 0.6 * f64::from(fin)
        ));
    }
    // Kept rows with what is not a race time: a finish of 0 s and an
    // unfinished run carrying a time (the best stays 13.50 s: RunFigures'
    // rule, a finished run's time above 0).
    traj.push("990,0.3,3,0,30,0,explo,50,1.0,150,1.0,1,0.00,2,".to_string());
    traj.push("995,0.3,3,0,31,0,explo,50,1.0,100,0.4,0,5.00,2,".to_string());
    let held_header = "frames,minutes,updates,episodes,finish_rate,mean_progress,race_time_p10_s,race_time_median_s,race_time_p90_s,time_ratio_median,ratio_episodes,autopilot_race_time_median_s,start,thrown_away_by";
    let held = [
        "200,0.1,2,10,0.5000,0.7000,,,,1.2000,5,10.0000,1,",
        "400,0.1,4,10,1.0000,1.0000,,,,0.7500,10,10.0000,1,2",
        "500,0.1,5,10,0.9000,0.9500,,,,0.8000,9,10.0000,1,2",
        "450,0.2,4,10,0.6000,0.8000,,,,1.1000,6,10.0000,2,",
        "850,0.2,8,10,0.7000,0.8500,,,,1.0500,7,10.0000,2,",
    ];
    let write = |keep_thrown: bool| {
        let kept = |rows: &[String]| -> String {
            rows.iter()
                .filter(|r| keep_thrown || r.ends_with(','))
                .map(|r| format!("{r}\n"))
                .collect()
        };
        std::fs::write(run.join("trajectories.csv"), format!("{header}\n{}", kept(&traj))).unwrap();
        let held: Vec<String> = held.iter().map(|s| s.to_string()).collect();
        std::fs::write(run.join("heldout.csv"), format!("{held_header}\n{}", kept(&held))).unwrap();
    };
    let draw = |args: &[&str]| -> (String, String) {
        let svg = root.path().join("out.svg");
        let mut a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_ref()).collect();
        a.extend([run.as_os_str(), "-o".as_ref(), svg.as_os_str()]);
        let o = rulka(&a);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{args:?}: {out}{}", String::from_utf8_lossy(&o.stderr));
        let printed = out
            .lines()
            .filter(|l| !l.contains("were recorded after the state"))
            .collect::<Vec<_>>()
            .join("\n");
        (printed, std::fs::read_to_string(&svg).unwrap())
    };
    let run_s = run.to_str().unwrap();
    for mode in [&[][..], &[run_s][..], &["--heldout"][..], &["--race-time"][..]] {
        write(true);
        let resumed = draw(mode);
        write(false);
        let never = draw(mode);
        assert!(resumed.1.contains("<polyline"), "{mode:?}: nothing drawn");
        assert_eq!(resumed.0, never.0, "{mode:?}: the printed figures differ");
        assert!(
            resumed.1 == never.1,
            "{mode:?}: the figure differs from the run without its thrown-away rows"
        );
        if mode == ["--race-time"] {
            assert!(resumed.1.contains("best 13.50 s"), "the best race time: {}", resumed.1);
        }
    }
}
