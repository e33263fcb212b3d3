//! `rulka map check` and `rulka map show` on the two real reference lines
//! recorded in the game (`tests/data/maps/`), and on copies broken the ways
//! lines go wrong (a cut, a respawn, a line that misses its checkpoints).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn maps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/maps")
}

fn rulka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rulka")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn the_real_lines_check_clean_with_their_known_numbers() {
    for (file, km, lo, hi) in [
        ("ESL-Hockolicious_0.5m_cl2.npy", "4.05 km", "9.0", "37.9"),
        ("map5_0.5m_cl.npy", "9.87 km", "9.3", "10.2"),
    ] {
        let p = maps().join(file);
        let o = rulka(&["map", "check", p.to_str().unwrap()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(0), "{t}");
        assert!(t.contains(km) && t.contains(&format!("height        {lo} to {hi} m")), "{t}");
        assert!(t.contains("ok: no problem found"), "{t}");
        let j: serde_json::Value =
            serde_json::from_slice(&rulka(&["map", "check", p.to_str().unwrap(), "--json"]).stdout)
                .unwrap();
        let mean = j["spacing"]["mean"].as_f64().unwrap();
        // The points' own mean 3-D step (0.502 m and 0.506 m): a sum of
        // 8 000–19 500 steps in f64, off by ≤ 1e-12 m.
        let pts = read_npy(&p);
        let want = pts
            .windows(2)
            .map(|w| ((0..3).map(|k| (w[1][k] - w[0][k]).powi(2)).sum::<f64>()).sqrt())
            .sum::<f64>()
            / (pts.len() - 1) as f64;
        rulka_test_support::margin::close("mean spacing, as the points give it", mean, want, 1e-9);
        assert_eq!(j["problems"].as_array().unwrap().len(), 0);
    }
}

#[test]
fn cut_and_respawned_lines_and_missed_checkpoints_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let line = rulka_env::read_points(&maps().join("ESL-Hockolicious_0.5m_cl2.npy"), 2).unwrap();
    // A cut: 12 points (5.9 m) missing after point 3000. A respawn: the car
    // back 80 points (39 m) at point 6000, driving that stretch again.
    let mut broken: Vec<[f64; 3]> = line[..=3000].to_vec();
    broken.extend_from_slice(&line[3012..6000]);
    broken.extend_from_slice(&line[5920..]);
    let b = dir.path().join("broken.npy");
    rulka_env::write_points(&b, &broken).unwrap();
    let o = rulka(&["map", "check", b.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("gap of 5.9 m after point 3000"), "{t}");
    assert!(t.contains("jump of") && t.contains("a respawn or a cut?"), "{t}");
    // Checkpoints: two on the line, one 200 m above it; and the line's last
    // 530 m after what is given as the finish.
    let cps = [line[1000], line[5000], [line[7000][0], line[7000][1] + 200.0, line[7000][2]]];
    let c = dir.path().join("cps.npy");
    rulka_env::write_points(&c, &cps).unwrap();
    let good = maps().join("ESL-Hockolicious_0.5m_cl2.npy");
    let o = rulka(&["map", "check", good.to_str().unwrap(), "--checkpoints", c.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("checkpoint 2 at") && t.contains("m from the line (over 16 m)"), "{t}");
    assert!(t.contains("past the last checkpoint"), "{t}");
    // The picture marks the gap and the jump, start and finish.
    let svg = dir.path().join("broken.svg");
    let o = rulka(&["map", "show", b.to_str().unwrap(), "-o", svg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(
        s.starts_with("<svg")
            && s.contains("5.9 m gap")
            && s.contains("\nstart\n")
            && s.contains("\nfinish\n"),
        "{}",
        &s[..300]
    );
    // Bad input: exit 2, one line.
    let o = rulka(&["map", "check", dir.path().join("nope.npy").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim().lines().count(), 1);
}

/// Checkpoints given in another order than the line passes them are named;
/// the same checkpoints in the line's order, the last at its end, are fine.
#[test]
fn checkpoints_out_of_order_are_named_and_in_order_pass() {
    let dir = tempfile::tempdir().unwrap();
    let good = maps().join("ESL-Hockolicious_0.5m_cl2.npy");
    let line = rulka_env::read_points(&good, 2).unwrap();
    let end = line.len() - 1;
    let check = |cps: &[[f64; 3]]| {
        let c = dir.path().join("cps.npy");
        rulka_env::write_points(&c, cps).unwrap();
        rulka(&["map", "check", good.to_str().unwrap(), "--checkpoints", c.to_str().unwrap()])
    };
    let o = check(&[line[5000], line[1000], line[end]]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("the line passes the checkpoints out of order"), "{t}");
    let o = check(&[line[1000], line[5000], line[end]]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(!t.contains("out of order") && t.contains("ok: no problem found"), "{t}");
}

#[test]
fn show_draws_the_real_line_with_the_zone_centres_of_a_config() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("hock.svg");
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/ppo.yaml");
    let p = maps().join("ESL-Hockolicious_0.5m_cl2.npy");
    let o = rulka(&[
        "map",
        "show",
        p.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = std::fs::read_to_string(&svg).unwrap();
    // Every zone centre drawn (a grey dot) lies inside the picture (none of
    // the extrapolated ones).
    let num = |e: &str, k: &str| -> f64 {
        e.split(&format!(" {k}=\"")).nth(1).unwrap().split('"').next().unwrap().parse().unwrap()
    };
    let root = s.split("<svg").nth(1).unwrap().split('>').next().unwrap();
    let (w, h) = (num(root, "width"), num(root, "height"));
    let dots: Vec<(f64, f64)> = s
        .split("<circle")
        .skip(1)
        .filter(|e| e.contains("fill=\"#444444\""))
        .map(|e| (num(e, "cx"), num(e, "cy")))
        .collect();
    assert!(dots.len() > 50, "{}", dots.len());
    assert!(
        dots.iter().all(|&(x, y)| (0.0..=w).contains(&x) && (0.0..=h).contains(&y)),
        "{dots:?}"
    );
    assert!(s.contains("4.05 km, 8062 points, height 9.0–37.9 m"), "{}", &s[..400]);
}

fn serve(dir: &Path, yaml: &str, extra: &[&str]) -> common::Serve {
    let cfg = dir.join("serve.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let mut args = vec!["--autopilot", "45"];
    args.extend_from_slice(extra);
    common::serve(&cfg, &args)
}

/// Float64 `N×3` `.npy` read by hand (header dict, then little-endian f64s).
fn read_npy(p: &Path) -> Vec<[f64; 3]> {
    let b = std::fs::read(p).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + hlen..]
        .chunks_exact(24)
        .map(|c| {
            let f = |k: usize| f64::from_le_bytes(c[8 * k..8 * k + 8].try_into().unwrap());
            [f(0), f(1), f(2)]
        })
        .collect()
}

/// Distance from `p` to the polyline `line`.
fn to_line(p: [f64; 3], line: &[[f64; 3]]) -> f64 {
    line.windows(2)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            let d = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
            let dd = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            let t = if dd > 0.0 {
                (((p[0] - a[0]) * d[0] + (p[1] - a[1]) * d[1] + (p[2] - a[2]) * d[2]) / dd)
                    .clamp(0.0, 1.0)
            } else {
                0.0
            };
            let q = [a[0] + t * d[0], a[1] + t * d[1], a[2] + t * d[2]];
            ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn record_writes_the_line_the_car_drove() {
    let dir = tempfile::tempdir().unwrap();
    // A simulator track: the recording is the line `rulka sim export-map` writes.
    let reference = dir.path().join("track0.npy");
    let o = rulka(&[
        "sim",
        "export-map",
        "--seed",
        "0",
        "--track",
        "easy",
        "-o",
        reference.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = serve(dir.path(), "environment: {sim: {track: easy}}\n", &[]);
    let out = dir.path().join("rec.npy");
    let o = rulka(&["map", "record", "--port", &s.port.to_string(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("start: recording") && text(&o).contains("finish at 0:"),
        "{}",
        text(&o)
    );
    let (want, got) = (read_npy(&reference), read_npy(&out));
    assert_eq!(got.len(), want.len());
    let worst = got.iter().map(|&p| to_line(p, &want)).fold(0.0, f64::max);
    rulka_test_support::margin::at_most("m from the track's line", worst, 0.01);
    drop(s);

    // The Hockolicious shape, heights included: within 0.05 m of the line
    // recorded in the game.
    let real = maps().join("ESL-Hockolicious_0.5m_cl2.npy").canonicalize().unwrap();
    let s = serve(
        dir.path(),
        &format!("environment: {{sim: {{track_from: {}}}}}\n", real.display()),
        &[],
    );
    let o = rulka(&["map", "record", "--port", &s.port.to_string(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let (want, got) = (read_npy(&real), read_npy(&out));
    let worst = got.iter().map(|&p| to_line(p, &want)).fold(0.0, f64::max);
    // The recording resamples the car's path every 0.5 m, and the car glides
    // along the simulator's track, the line resampled every 0.5 m: each
    // level puts its points on chords of at most 0.5 m, and a point of a
    // chord of length L whose ends lie on two segments meeting at a turn θ
    // is at most (L/2)·sin(θ/2) from them (the symmetric chord's midpoint;
    // checked numerically over every chord position). Two levels at the
    // line's sharpest turn (33.7°, a kink of the line as recorded in the
    // game): 0.145 m. Measured: 0.046 m, the same to the bit on every CPU
    // path (the simulator's f64 arithmetic; docs/your-own-map.md).
    let sharpest = want
        .windows(3)
        .map(|w| {
            let d = |a: [f64; 3], b: [f64; 3]| [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
            let (u, v) = (d(w[0], w[1]), d(w[1], w[2]));
            let n = |x: [f64; 3]| (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
            let c = (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) / (n(u) * n(v));
            (c.clamp(-1.0, 1.0).acos() / 2.0).sin()
        })
        .fold(0.0, f64::max);
    rulka_test_support::margin::at_most("m from the real line", worst, 2.0 * 0.25 * sharpest);
    let len = |l: &[[f64; 3]]| l.len() as f64 * 0.5;
    assert!(
        (len(&got) - 4033.0).abs() < 20.0 && got.len() > want.len() - 20,
        "{} points",
        got.len()
    );
    let o = rulka(&["map", "check", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn record_refuses_a_jump_and_names_its_race_time() {
    let dir = tempfile::tempdir().unwrap();
    let s =
        serve(dir.path(), "environment: {sim: {track: easy}}\n", &["--jump-after-steps", "160"]);
    let out = dir.path().join("rec.npy");
    let o = rulka(&["map", "record", "--port", &s.port.to_string(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Run steps every 10 ms from −90 ms: the 160th is at 1.50 s, the car
    // jumps in the engine step after it, seen at 1.51 s.
    assert!(
        text(&o).contains("m in 10 ms at race time 0:01.51 (a respawn or a cut)"),
        "{}",
        text(&o)
    );
    assert!(!out.exists(), "nothing written");
    let o = rulka(&["map", "record", "--port", "1", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("rulka tmi check --port 1"), "{}", text(&o));
}
