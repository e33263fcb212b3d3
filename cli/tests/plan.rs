//! `rulka sim plan` as a user runs it: the limit table it writes, each best
//! drive played back through `rulka sim serve` (a separate process, over
//! the TMInterface protocol) by `rulka inputs play`, finishing in the time
//! the table gives, to the engine step; a second run into the same folder
//! plans only what is missing; bad options are named.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// A row of limits.csv: (seed, limit_ms, autopilot_ms, rungs, drive,
/// last_doubling_gain).
type Row = (u64, u64, Option<u64>, String, String, Option<f64>);

/// limits.csv read by hand, by row.
fn rows(table: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(table).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "track,decision_ms,seed,limit_ms,autopilot_ms,decisions,engine_steps,cpu_s,converged,last_doubling_gain,rungs,drive"
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!((f[0], f[1]), ("easy", "50"), "{l}");
            (
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4].parse().ok(),
                f[10].to_string(),
                f[11].to_string(),
                f[9].parse().ok(),
            )
        })
        .collect()
}

#[test]
fn planned_drives_play_back_to_their_limit_and_a_second_run_plans_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "environment: {n_zone_centers_in_inputs: 10, sim: {track: easy}}\n")
        .unwrap();
    let out = dir.path().join("limits");
    let plan = |seeds: &str| {
        rulka(&[
            "sim",
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--seeds",
            seeds,
            "--first-beam",
            "4",
            "--max-beam",
            "16",
            "--converged",
            "0",
            "--jobs",
            "2",
            "-o",
            out.to_str().unwrap(),
        ])
    };
    let o = plan("3,5");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2/2 track"), "progress per track: {}", text(&o));
    let got = rows(&out.join("limits.csv"));
    assert_eq!(got.iter().map(|r| r.0).collect::<Vec<_>>(), [3, 5], "one row per seed, by seed");
    let s = common::serve(&cfg, &[]);
    for (seed, limit_ms, autopilot_ms, rungs, drive, gain) in &got {
        // The ladder: beams 4, 8, 16, each never slower than the one before
        // (the best drive so far is held in every later beam).
        let ladder: Vec<(u64, u64)> = rungs
            .split(' ')
            .map(|r| {
                let (b, t) = r.split_once(':').unwrap();
                (b.parse().unwrap(), t.parse().unwrap())
            })
            .collect();
        assert_eq!(ladder.iter().map(|r| r.0).collect::<Vec<_>>(), [4, 8, 16], "{rungs}");
        assert!(ladder.windows(2).all(|w| w[1].1 <= w[0].1), "track {seed}: {rungs}");
        assert_eq!(ladder[2].1, *limit_ms, "the limit is the last rung's time");
        // The last doubling's gain, of the last two rungs (6 decimals written).
        let want = (ladder[1].1 - ladder[2].1) as f64 / ladder[1].1 as f64;
        assert!(
            (gain.unwrap() - want).abs() <= 5e-7,
            "track {seed}: {gain:?}, want {want}: {rungs}"
        );
        assert!(autopilot_ms.is_some(), "the autopilot finishes easy track {seed}");
        // The drive is named as best runs are, by its time to the hundredth.
        assert_eq!(*drive, format!("sim{seed}_{:.2}.inputs", *limit_ms as f64 / 1000.0));
        let file = out.join("drives").join(drive);
        let o = rulka(&[
            "inputs",
            "play",
            file.to_str().unwrap(),
            "--port",
            &s.port.to_string(),
            "--map",
            &seed.to_string(),
        ]);
        assert!(o.status.success(), "track {seed}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("({limit_ms} ms)")),
            "track {seed}: want {limit_ms} ms: {}",
            text(&o)
        );
    }
    // scripts/limits-replay does the same for a whole table, and names a
    // track whose drive does not play back to the table's time.
    let replay = |port: u16| {
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/limits-replay"))
            .args([cfg.to_str().unwrap(), out.to_str().unwrap(), &port.to_string()])
            .env("RULKA", env!("CARGO_BIN_EXE_rulka"))
            .output()
            .unwrap()
    };
    let o = replay(rulka_test_support::free_port());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2 of 2 drives play back to the table's time"), "{}", text(&o));
    let table = std::fs::read_to_string(out.join("limits.csv")).unwrap();
    let (seed, limit) = (got[0].0, got[0].1);
    let wrong =
        table.replacen(&format!(",{seed},{limit},"), &format!(",{seed},{},", limit + 10), 1);
    std::fs::write(out.join("limits.csv"), &wrong).unwrap();
    let o = replay(rulka_test_support::free_port());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("track {seed}: the table says {} ms", limit + 10)),
        "{}",
        text(&o)
    );
    std::fs::write(out.join("limits.csv"), &table).unwrap();
    // Into the same folder: the two planned are kept, only 4 is planned.
    let before = std::fs::read_to_string(out.join("limits.csv")).unwrap();
    let o = plan("3..6");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1 track(s) of easy (2 already in"), "{}", text(&o));
    let after = rows(&out.join("limits.csv"));
    assert_eq!(after.iter().map(|r| r.0).collect::<Vec<_>>(), [3, 4, 5]);
    let kept: Vec<&str> = before.lines().skip(1).collect();
    let now = std::fs::read_to_string(out.join("limits.csv")).unwrap();
    assert!(kept.iter().all(|l| now.lines().any(|m| m == *l)), "rows rewritten:\n{before}\n{now}");
}

#[test]
fn bad_options_and_a_table_of_other_tracks_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "environment: {sim: {track: easy}}\n").unwrap();
    let out = dir.path().join("l");
    let run = |extra: &[&str]| {
        let base = ["sim", "plan", "--config", cfg.to_str().unwrap(), "-o", out.to_str().unwrap()];
        rulka(&[&base[..], extra].concat())
    };
    for (extra, want) in [
        (&["--converged", "1.5"][..], "'1.5' for '--converged"),
        (&["--converged", "NaN"][..], "'NaN' for '--converged"),
        (&["--first-beam", "0"][..], "--first-beam 0"),
        (&["--first-beam", "64", "--max-beam", "32"][..], "--max-beam 32"),
        (&["--jobs", "0"][..], "--jobs 0"),
        (&["--seeds", "3..x"][..], "--seeds"),
        (&["--track-from", "/nonexistent.npy"][..], "--track-from /nonexistent.npy"),
    ] {
        let o = run(extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
        assert!(text(&o).contains(want), "{extra:?}: want `{want}`: {}", text(&o));
    }
    // A folder planned at another decision period is not mixed into.
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("limits.csv"),
        "track,decision_ms,seed,limit_ms,autopilot_ms,decisions,engine_steps,cpu_s,converged,last_doubling_gain,rungs,drive\n\
         easy,40,3,20000,,400,1,0.1,true,,4:20000,sim3_20.00.inputs\n",
    )
    .unwrap();
    let o = run(&["--seeds", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("planned on easy at 40 ms a decision, not the config's easy at 50 ms"),
        "{}",
        text(&o)
    );
}

/// What `rulka sim plan` writes it writes whole: the table, rewritten after
/// every track, and each drive go through `rulka_checkpoint::write_atomic`
/// (a temporary file renamed into place), so a kill mid-write leaves the
/// table as it was; a plain write would leave it cut, and the next run into
/// the folder would refuse it. (The source is read: a kill test would
/// have to land inside a write of a few kilobytes.)
#[test]
fn what_rulka_sim_plan_writes_it_writes_whole() {
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sim_plan.rs"))
            .unwrap();
    for plain in ["fs::write(", "File::create(", "OpenOptions", ".write_all("] {
        assert!(!src.contains(plain), "src/sim_plan.rs writes with {plain}");
    }
    assert_eq!(src.matches("write_atomic(").count(), 2, "the table and each drive");
}

/// A track `rulka sim plan` reports done is in the table at that moment, so
/// a run killed after it keeps it (the table is rewritten after every
/// track, before the line that says so); and a ladder of one rung
/// (`--first-beam` equal to `--max-beam`) is a valid ladder: each row has
/// that one rung, and its time is the limit.
#[test]
fn a_killed_plan_keeps_every_track_it_reported_and_one_rung_is_a_ladder() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "environment: {sim: {track: easy}}\n").unwrap();
    let out = dir.path().join("l");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rulka"))
        .args(["sim", "plan", "--config", cfg.to_str().unwrap(), "--seeds", "0..8", "--jobs", "1"])
        .args([
            "--first-beam",
            "8",
            "--max-beam",
            "8",
            "--refine-passes",
            "1",
            "-o",
            out.to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    while said.len() < 2 {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(rest) = line.strip_prefix("[rulka sim plan] ") {
            if let Some((_, after)) = rest.split_once("/8 track ") {
                said.push(after.split(':').next().unwrap().parse::<u64>().unwrap());
            }
        }
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(said, [0, 1], "two tracks reported before the kill ({status})");
    let got = rows(&out.join("limits.csv"));
    let seeds: Vec<u64> = got.iter().map(|r| r.0).collect();
    assert!(seeds.len() < 8, "killed after 2 of 8, yet all planned: {seeds:?}");
    assert!(said.iter().all(|s| seeds.contains(s)), "reported {said:?}, the table holds {seeds:?}");
    for (seed, limit_ms, _, rungs, _, gain) in &got {
        assert_eq!(*rungs, format!("8:{limit_ms}"), "track {seed}");
        assert_eq!(*gain, None, "track {seed}: one rung has no doubling");
    }
}

/// `rulka sim gap` on the committed limit table of the hard tracks: the
/// autopilot's loss on each track, split by kind of road, adds up to its
/// time less the limit as the table gives them (read by hand), every metre
/// of the 900 m race distance is of one kind, and it loses time both in
/// corners and on straights. A drive that does not replay to its table's
/// time, a track the table lacks and a table of other tracks are refused
/// naming them (exit 2).
#[test]
fn the_gap_to_the_limit_splits_into_its_kinds_of_road_and_adds_up() {
    let gap = |config: &str, limits: &str, rest: &[&str]| {
        let head = ["sim", "gap", "--autopilot", "--config", config, "--limits", limits];
        rulka(&[&head[..], rest].concat())
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let table = root.join("limits/sim-hard/limits.csv");
    let config = root.join("configs/sim-hard.yaml");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("gap.json");
    let svg = dir.path().join("gap.svg");
    let (t, c, j, s) = (
        table.to_str().unwrap(),
        config.to_str().unwrap(),
        json.to_str().unwrap(),
        svg.to_str().unwrap(),
    );
    // Either output into a folder that is not there: refused before any
    // track is driven, naming the flag and the path.
    let nowhere = dir.path().join("no-such-dir");
    for flag in ["--json", "-o"] {
        let p = nowhere.join("x");
        let o = gap(c, t, &["--seeds", "1000", flag, p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", text(&o));
        assert!(
            text(&o).contains("no-such-dir") && !text(&o).contains("1/1 track"),
            "{flag}: {}",
            text(&o)
        );
    }
    // Without --config, the hard preset's (the docs' default) from the repository's root.
    let o = Command::new(env!("CARGO_BIN_EXE_rulka"))
        .args(["sim", "gap", "--autopilot", "--limits", t, "--seeds", "1000"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "the default config: {}", text(&o));
    let o = gap(c, t, &["--seeds", "1000..1004", "--json", j, "-o", s]);
    assert!(o.status.success(), "{}", text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let by_seed: std::collections::BTreeMap<u64, (u64, u64)> = std::fs::read_to_string(&table)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[2].parse().unwrap(), (f[3].parse().unwrap(), f[4].parse().unwrap()))
        })
        .collect();
    let tracks = report["tracks"].as_array().unwrap();
    assert_eq!(tracks.len(), 4);
    let kinds = ["start", "corners", "straights"];
    for tr in tracks {
        let (limit_ms, autopilot_ms) = by_seed[&tr["seed"].as_u64().unwrap()];
        let lost: Vec<f64> = kinds.iter().map(|k| tr["lost_s"][k].as_f64().unwrap()).collect();
        let metres: f64 = kinds.iter().map(|k| tr["metres"][k].as_f64().unwrap()).sum();
        // The parts add up to the whole: a telescoping sum of differences
        // of times in ms, ~900 terms, each exact to ~1e-11 ms.
        let whole = (autopilot_ms as f64 - limit_ms as f64) / 1000.0;
        assert!((lost.iter().sum::<f64>() - whole).abs() < 1e-6, "{tr}: {lost:?} against {whole}");
        assert_eq!(metres, 900.0, "{tr}");
        // The limit reported is the table's, in seconds (exact to 1e-9 s).
        assert!((tr["limit_s"].as_f64().unwrap() - limit_ms as f64 / 1000.0).abs() < 1e-9, "{tr}");
        assert!(
            lost[1] > 0.5 && lost[2] > 0.5,
            "the autopilot loses in corners and on straights: {tr}"
        );
    }
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // The totals are the tracks' sums, kind by kind, and the gap is the
    // race times' difference (sums of 4 terms: within 1e-9 s).
    for k in kinds {
        let sum: f64 = tracks.iter().map(|tr| tr["lost_s"][k].as_f64().unwrap()).sum();
        assert!((report["lost_s"][k].as_f64().unwrap() - sum).abs() < 1e-9, "{k}: {report}");
        let m: f64 = tracks.iter().map(|tr| tr["metres"][k].as_f64().unwrap()).sum();
        assert_eq!(report["metres"][k].as_f64().unwrap(), m, "{k}");
    }
    let gap_s: f64 = tracks
        .iter()
        .map(|tr| tr["driver_s"].as_f64().unwrap() - tr["limit_s"].as_f64().unwrap())
        .sum();
    assert!((report["gap_s"].as_f64().unwrap() - gap_s).abs() < 1e-9, "{report}");
    assert_eq!(report["finished"], 4);
    // Each track's corner metres against a model of the rule written here,
    // from the centreline's points (not the tangents the command reads):
    // the chord heading turns by more than 1/50 rad a metre across the
    // 10 m centred on the metre. Where the model's rate is within 3 % of
    // the threshold, or its window runs off the points, chords and tangents
    // may fall either side: those metres bound the count from above.
    for tr in tracks {
        let seed = tr["seed"].as_u64().unwrap();
        let track = rulka_env::Track::generate(seed, rulka_config::TrackPreset::Hard);
        let p = &track.points;
        let chord = |i: usize| (p[i + 1][1] - p[i][1]).atan2(p[i + 1][0] - p[i][0]);
        let (mut sure, mut unsure) = (0usize, 0usize);
        for m in 50..track.length().floor() as usize {
            let i = 2 * m + 1; // metre m's middle, points 0.5 m apart
            if i < 10 || i + 10 >= p.len() {
                unsure += 1;
                continue;
            }
            let mut turn = chord(i + 9) - chord(i - 10);
            turn -= (turn / std::f64::consts::TAU).round() * std::f64::consts::TAU;
            let rate = turn.abs() / 9.5; // the chords' middles are 9.5 m apart
            if (rate * 50.0 - 1.0).abs() < 0.03 {
                unsure += 1;
            } else if rate > 1.0 / 50.0 {
                sure += 1;
            }
        }
        let corners = tr["metres"]["corners"].as_f64().unwrap() as usize;
        assert!(
            (sure..=sure + unsure).contains(&corners),
            "track {seed}: {corners} m of corners, the model {sure} + up to {unsure}: {tr}"
        );
        assert_eq!(tr["metres"]["start"], 50.0, "{tr}");
    }

    // A drive edited to press one key less does not replay to its time.
    let limits = dir.path().join("limits");
    std::fs::create_dir_all(limits.join("drives")).unwrap();
    std::fs::copy(&table, limits.join("limits.csv")).unwrap();
    let drive = std::fs::read_dir(root.join("limits/sim-hard/drives"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("sim1000_"))
        .unwrap();
    let edited: String = std::fs::read_to_string(&drive)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("press up"))
        .map(|l| format!("{l}\n"))
        .collect();
    let name = drive.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::write(limits.join("drives").join(&name), edited).unwrap();
    let copied = limits.join("limits.csv");
    let o = gap(c, copied.to_str().unwrap(), &["--seeds", "1000"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(&name) && text(&o).contains("1000"), "{}", text(&o));

    // The drive as it is, but a table 10 ms away from its time either way:
    // refused, naming the drive and its time.
    std::fs::copy(&drive, limits.join("drives").join(&name)).unwrap();
    let real = std::fs::read_to_string(&table).unwrap();
    let line = real.lines().find(|l| l.split(',').nth(2) == Some("1000")).unwrap();
    let ms: u64 = line.split(',').nth(3).unwrap().parse().unwrap();
    for off in [ms - 10, ms + 10] {
        let mut f: Vec<String> = line.split(',').map(String::from).collect();
        f[3] = off.to_string();
        std::fs::write(&copied, real.replace(line, &f.join(","))).unwrap();
        let o = gap(c, copied.to_str().unwrap(), &["--seeds", "1000"]);
        assert_eq!(o.status.code(), Some(2), "table {off} ms: {}", text(&o));
        let said = text(&o);
        assert!(
            said.contains(&name) && said.contains(&format!("{:.2} s", ms as f64 / 1000.0)),
            "{said}"
        );
    }

    // A track the table lacks; a table of the hard tracks for an easy config.
    for seeds in ["7", "1000,7", "7,1000", "1000,1001,7"] {
        let o = gap(c, t, &["--seeds", seeds]);
        assert_eq!(o.status.code(), Some(2), "--seeds {seeds}: {}", text(&o));
        assert!(text(&o).contains("no limit for track 7"), "--seeds {seeds}: {}", text(&o));
    }
    let easy = dir.path().join("easy.yaml");
    std::fs::write(&easy, "environment: {sim: {track: easy}}\n").unwrap();
    let o = gap(easy.to_str().unwrap(), t, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--limits") && text(&o).contains("planned on hard"), "{}", text(&o));
}

/// `rulka sim gap --model`: the driver's drive on each track is the greedy
/// one `rulka eval` drives (the same steps, to the same progress), for a
/// policy as for the autopilot; `--model` and `--autopilot` together are
/// refused (exit 2). Drives cut off before the finish give no time lost.
#[test]
fn the_gap_of_a_policy_is_the_greedy_drive_rulka_eval_drives() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let table = root.join("limits/sim-hard/limits.csv");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        "nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
         environment: {n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
           cutoff_rollout_if_race_not_finished_within_duration_ms: 6000, sim: {track: hard, track_seeds: [0, 1]}}\n\
         inference: {intra_op_threads: 1}\n",
    )
    .unwrap();
    let (ck, m) = (dir.path().join("init.safetensors"), dir.path().join("m.onnx"));
    let (c, t, ckp, mp) =
        (cfg.to_str().unwrap(), table.to_str().unwrap(), ck.to_str().unwrap(), m.to_str().unwrap());
    for args in [
        &["init", "--config", c, "--seed", "3", "-o", ckp][..],
        &["export", "--config", c, "--checkpoint", ckp, "-o", mp],
    ] {
        let o = rulka(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = rulka(&[
        "sim",
        "gap",
        "--model",
        mp,
        "--autopilot",
        "--config",
        c,
        "--limits",
        t,
        "--seeds",
        "1000",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // The ONNX Runtime named by --ort-lib is the one loaded (none there: refused, named).
    let nowhere = dir.path().join("no-such-libonnxruntime.so");
    let o = rulka(&[
        "sim",
        "gap",
        "--ort-lib",
        nowhere.to_str().unwrap(),
        "--model",
        mp,
        "--config",
        c,
        "--limits",
        t,
        "--seeds",
        "1000",
    ]);
    assert!(!o.status.success() && text(&o).contains("no-such-libonnxruntime.so"), "{}", text(&o));
    let json = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let e = dir.path().join("eval.json");
    let o = rulka(&[
        "eval",
        "--model",
        mp,
        "--config",
        c,
        "--seeds",
        "1000,1001",
        "--json",
        e.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let eval = json(&e);
    for (driver, eps) in [
        (&["--model", mp][..], &eval["models"][0]["episodes"]),
        (&["--autopilot"][..], &eval["autopilot"]["episodes"]),
    ] {
        let g = dir.path().join("gap.json");
        let head = [
            "sim",
            "gap",
            "--config",
            c,
            "--limits",
            t,
            "--seeds",
            "1000,1001",
            "--json",
            g.to_str().unwrap(),
        ];
        let o = rulka(&[&head[..], driver].concat());
        assert!(o.status.success(), "{driver:?}: {}", text(&o));
        let gap = json(&g);
        for tr in gap["tracks"].as_array().unwrap() {
            let ep = eps.as_array().unwrap().iter().find(|e| e["seed"] == tr["seed"]).unwrap();
            // rulka eval writes progress to 6 decimals and race times to the
            // engine's millisecond: the same drive is within half of either.
            let near = |a: &serde_json::Value, b: &serde_json::Value, half: f64| match (
                a.as_f64(),
                b.as_f64(),
            ) {
                (Some(x), Some(y)) => (x - y).abs() <= half,
                _ => a.is_null() && b.is_null(),
            };
            assert_eq!(
                tr["driver_steps"], ep["steps"],
                "{driver:?}: {tr} against rulka eval's {ep}"
            );
            assert!(
                near(&tr["driver_progress"], &ep["progress"], 5e-7),
                "{driver:?}: {tr} against {ep}"
            );
            assert!(
                near(&tr["driver_s"], &ep["race_time_s"], 5e-4),
                "{driver:?}: {tr} against {ep}"
            );
        }
        // The config cuts every drive at 6 s: nothing finishes, no time lost is given.
        assert_eq!(gap["finished"], 0, "{gap}");
        assert!(gap["tracks"].as_array().unwrap().iter().all(|tr| tr["lost_s"].is_null()), "{gap}");
    }
}
