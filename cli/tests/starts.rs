//! A run killed again and again follows the state it resumed: `rulka
//! train`, SIGKILLs of its whole process group at random moments, `rulka
//! train --resume` after each, a last Ctrl-C — over shared memory and over
//! NATS. Afterwards every trajectory id of the run is unique, every start is
//! numbered in `starts.json` with the state it began from and how the one
//! before ended, rows written after the state a resume began from are kept
//! and marked (`thrown_away_by`), the kept timeline's frames never go back,
//! and `summary.json` and `rulka plot` give the kept timeline's figures.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::collections::HashSet;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rulka_test_support::{wait_exit, wait_for, Kill};
use rulka_trainer::TrajectoryRow;

fn config(dir: &Path) -> PathBuf {
    let threads = rulka_test_support::margin::threads();
    let yaml = format!(
        "training: {{algorithm: ppo, run_dir: {run}, optimizer: adam, lr_schedule: [[0, 5.0e-4]], checkpoint_every_s: 1, \
           eval_tracks: [100, 101], eval_every_n_updates: 3}}\n\
         nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
         ppo: {{rollout_steps_per_update: 256, update_epochs: 1, num_minibatches: 2}}\n\
         environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
         collectors: {{count: 1, chunk_steps: 32, ring_chunks: 16, eval_every_n_rollouts: 4, heartbeat_timeout_ms: 10000}}\n\
         inference: {{intra_op_threads: {threads}}}\n",
        run = dir.join("run").display()
    );
    let p = dir.join("c.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

/// A small xorshift, seeded from the clock (printed, to replay a failure).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn rows(run: &Path) -> Vec<TrajectoryRow> {
    rulka_trainer::read_trajectories_so_far(run).unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Starts `rulka train` (the first time from `cfg`, then `--resume`) in a
/// process group of its own, with `args`.
fn train(
    cfg: &Path,
    run: &Path,
    first: bool,
    args: &[&str],
    env: &[(&str, &str)],
    log: (&Path, &str),
) -> Kill {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rulka"));
    if first {
        c.args(["train", "--config", cfg.to_str().unwrap()]);
    } else {
        c.args(["train", "--resume", run.to_str().unwrap()]);
    }
    c.args(args).envs(env.iter().copied());
    Kill::spawn_logged(c.process_group(0), log.0, log.1)
}

/// The run through `kills` SIGKILLs of the whole process group (one
/// planted at a recorded-but-unacknowledged moment over NATS, `kill_at`),
/// then a start stopped by Ctrl-C; the assertions of the module docs.
fn killed_and_resumed(transport: &[&str], kill_at: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let run = dir.path().join("run");
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64
            | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let kills = 5;
    for k in 0..=kills {
        let before = rows(&run).len();
        let env: Vec<(&str, &str)> = match (k, kill_at) {
            (2, Some(at)) => vec![("RULKA_TEST_KILL_AT", at)],
            _ => vec![],
        };
        let name = format!("start{}", k + 1);
        let mut t = train(&cfg, &run, k == 0, transport, &env, (dir.path(), &name));
        // This start's rows (and, for the first, a saved state: `--resume`
        // of a run with none is refused, as it should be), then a random
        // moment of its life.
        let latest = run.join("state").join("LATEST");
        wait_for(&format!("start {} delivers", k + 1), Duration::from_secs(120), || {
            (rows(&run).len() >= before + 12 && latest.exists())
                || t.child().try_wait().unwrap().is_some()
        });
        if !env.is_empty() {
            // It kills itself after recording a poll and before acknowledging it.
            let (st, _) = wait_exit(t.child(), Duration::from_secs(120));
            assert!(!st.success(), "the kill hook never fired");
            continue;
        }
        std::thread::sleep(Duration::from_millis(rng.below(2500)));
        if let Some(st) = t.child().try_wait().unwrap() {
            let err = std::fs::read_to_string(dir.path().join(format!("{name}.err")));
            panic!("start {} ended by itself ({st}) before its kill:\n{}", k + 1, err.unwrap());
        }
        let pgid = t.id();
        if k < kills {
            // The whole process group: the trainer, its collectors, its server.
            let ok = Command::new("kill").args(["-9", "--", &format!("-{pgid}")]).status().unwrap();
            assert!(ok.success(), "kill -9 -{pgid}");
            wait_exit(t.child(), Duration::from_secs(30));
        } else {
            let t0 = Instant::now();
            rulka_test_support::signal(pgid, "-INT");
            let (st, _) = wait_exit(t.child(), Duration::from_secs(90));
            assert!(st.success(), "the last start's Ctrl-C ({:?})", t0.elapsed());
        }
        drop(t);
    }
    let rows = rows(&run);
    let starts = rulka_run::Start::read(&run).unwrap();

    // Every start numbered, each the state it began from, how the one before ended.
    assert_eq!(
        starts.iter().map(|s| s.start).collect::<Vec<_>>(),
        (1..=kills as u32 + 1).collect::<Vec<_>>()
    );
    assert_eq!(starts[0].how, "fresh");
    assert!(starts[1..].iter().all(|s| s.how == "resumed"), "{starts:?}");
    for s in &starts[..kills] {
        assert_eq!(s.ended.as_ref().map(|e| e.reason.as_str()), Some("killed"), "{s:?}");
    }
    let last = starts[kills].ended.as_ref().expect("the Ctrl-C'd start ended");
    assert!(last.reason.starts_with("interrupted"), "{last:?}");
    for w in starts.windows(2) {
        // A resume begins from a state its predecessor saved (or an older one).
        let of_previous: Vec<u64> =
            rows.iter().filter(|r| r.start == w[0].start).map(|r| r.frames).collect();
        assert!(w[1].from.frames >= w[0].from.frames, "{w:?}");
        assert!(
            of_previous.iter().all(|&f| f > w[0].from.frames),
            "start {}'s rows follow its state",
            w[0].start
        );
        assert!(w[1].from.state.as_deref().is_some_and(|s| s.starts_with("state/state.")), "{w:?}");
    }

    // Ids unique within the run: collector, incarnation, number.
    let ids: HashSet<(u32, u64)> = rows.iter().map(|r| (r.collector, r.trajectory)).collect();
    assert_eq!(ids.len(), rows.len(), "a (collector, trajectory) pair appears twice");

    // Thrown away: by the first later start whose state came before the row.
    let mut thrown = 0;
    for r in &rows {
        let want =
            starts.iter().find(|s| s.start > r.start && s.from.frames < r.frames).map(|s| s.start);
        assert_eq!(r.thrown_away_by, want, "{r:?}");
        thrown += usize::from(want.is_some());
    }
    assert!(thrown > 0, "no kill came after a checkpoint: the test saw nothing thrown away");
    let text = std::fs::read_to_string(run.join("trajectories.csv")).unwrap();
    assert!(text.lines().next().unwrap().ends_with(",start,thrown_away_by"));
    let marked = text.lines().skip(1).filter(|l| !l.ends_with(',')).count();
    assert_eq!(marked, thrown, "the mark is in the file");

    // The kept timeline, in file order, never goes back.
    let kept: Vec<&TrajectoryRow> = rows.iter().filter(|r| r.thrown_away_by.is_none()).collect();
    assert!(
        kept.windows(2).all(|w| w[1].frames >= w[0].frames),
        "frames go back on the kept timeline"
    );
    let frames_all: Vec<u64> = rows.iter().map(|r| r.frames).collect();
    assert!(
        frames_all.windows(2).any(|w| w[1] < w[0]),
        "the table itself doubles back (rows kept)"
    );

    // summary.json: this start, and the kept timeline's figures.
    let s = json(&run.join("summary.json"));
    assert_eq!(s["start"], kills + 1, "{s}");
    let tl = &s["timeline"];
    assert_eq!(tl["starts"], kills + 1, "{tl}");
    let finished: Vec<&&TrajectoryRow> = kept.iter().filter(|r| r.finished).collect();
    assert_eq!(tl["finishes"], finished.len(), "{tl}");
    assert_eq!(tl["first_finish_frame"].as_u64(), finished.first().map(|r| r.frames), "{tl}");
    let best = finished.iter().filter_map(|r| r.race_time_s).fold(f64::INFINITY, f64::min);
    if best.is_finite() {
        assert!((tl["best_race_time_s"].as_f64().unwrap() - best).abs() < 0.006, "{tl}");
    }
    // This start's own counters are its rows of the table, counted alike.
    let mine: Vec<&TrajectoryRow> =
        rows.iter().filter(|r| r.start == kills as u32 + 1 && r.finished).collect();
    let c = &s["counters"];
    assert_eq!(c["finishes"], mine.len(), "{c}");
    assert_eq!(c["first_finish_frame"].as_u64(), mine.iter().map(|r| r.frames).min(), "{c}");
    let before_last =
        rows.iter().filter(|r| r.start <= kills as u32 && r.thrown_away_by.is_some()).count();
    assert_eq!(tl["thrown_away_trajectories"], before_last, "{tl}");

    // Held-out evaluations follow the same rule.
    if run.join("heldout.csv").exists() {
        for h in rulka_run::read_heldout(&run).unwrap() {
            let want = starts
                .iter()
                .find(|s| s.start > h.start && s.from.frames < h.frames)
                .map(|s| s.start);
            assert_eq!(h.thrown_away_by, want, "{h:?}");
        }
    }

    // rulka plot: the kept timeline, and what it left out said.
    let svg = dir.path().join("curve.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_rulka"))
        .args(["plot", run.to_str().unwrap(), "-o", svg.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains(&format!(
            "{thrown} of {} trajectories were recorded after the state a resume started from",
            rows.len()
        )),
        "{out}"
    );
    let kept_max = kept.iter().map(|r| r.frames).max().unwrap();
    assert!(
        out.contains(&format!(": {kept_max} frames;")),
        "drawn to the kept timeline's end: {out}"
    );
}

#[test]
fn a_run_killed_and_resumed_over_shared_memory_follows_the_state_it_resumed() {
    killed_and_resumed(&[], None);
}

#[test]
fn a_run_killed_and_resumed_over_nats_follows_the_state_it_resumed() {
    killed_and_resumed(&["--transport", "nats"], Some("recorded:3"));
}

/// `rulka plot` on rows written by hand: the two a resume threw away (one
/// at frame 300, past the kept timeline's end at 150) are left out, said,
/// and not drawn.
#[test]
fn rulka_plot_leaves_out_the_rows_a_resume_threw_away() {
    let dir = tempfile::tempdir().unwrap();
    let rows = "frames,minutes,updates,collector,trajectory,seed,kind,steps,return,progress_m,progress_frac,finished,race_time_s,start,thrown_away_by\n\
100,0.1,1,0,1,0,explore,50,1.0,250,1.0,1,12.0,1,\n\
200,0.2,2,0,2,0,explore,50,1.0,250,1.0,1,9.0,1,2\n\
300,0.3,3,0,3,0,explore,50,0.5,100,0.4,0,,1,2\n\
150,0.4,2,0,4,0,explore,50,1.0,250,1.0,1,11.0,2,\n\
";
    std::fs::write(dir.path().join("trajectories.csv"), rows).unwrap();
    let svg = dir.path().join("c.svg");
    let o = Command::new(env!("CARGO_BIN_EXE_rulka"))
        .args(["plot", dir.path().to_str().unwrap(), "-o", svg.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("2 of 4 trajectories were recorded after the state a resume started from"),
        "{out}"
    );
    assert!(
        out.contains(": 150 frames;"),
        "drawn to the kept timeline's end (150, not 300): {out}"
    );
    assert!(out.contains("first finish at 100"), "{out}");
}
