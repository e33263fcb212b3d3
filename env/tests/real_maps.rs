#![allow(clippy::unwrap_used)]
//! The simulator on the shape of the two real reference lines recorded in the
//! game (`tests/data/maps/`, `environment.sim.track_from`): the track follows
//! the line (checked against the file's own points), the autopilot finishes, zone tracking walks the line one zone
//! at a time, and the car rides the line's heights.

use std::path::{Path, PathBuf};

use rulka_config::{Config, TrackPreset};
use rulka_env::{Autopilot, Environment, SimEnv, Status, Track};

fn map(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/maps").join(name)
}

const MAPS: [&str; 2] = ["ESL-Hockolicious_0.5m_cl2.npy", "map5_0.5m_cl.npy"];

fn read_npy(p: &Path) -> Vec<[f64; 3]> {
    rulka_env::read_points(p, 2).unwrap()
}

fn cfg(name: &str) -> Config {
    let mut c = Config::default();
    c.environment.sim.track_from = Some(map(name));
    c.environment.cutoff_rollout_if_race_not_finished_within_duration_ms = 900_000;
    c
}

#[test]
fn the_track_follows_the_line_and_its_heights() {
    for name in MAPS {
        let line = read_npy(&map(name));
        let track = Track::from_line(&line, 16.0, 0, TrackPreset::Medium).unwrap();
        let horizontal: f64 =
            line.windows(2).map(|w| (w[1][0] - w[0][0]).hypot(w[1][2] - w[0][2])).sum();
        // The resampling keeps every whole 0.5 m of horizontal arc length and
        // drops the remainder (line::resample_by): the length is that exactly,
        // but for the f64 sums of a few thousand steps (≤ 1e-9 m).
        rulka_test_support::margin::close(
            "track length: the line's whole 0.5 m",
            track.length(),
            (horizontal / 0.5).floor() * 0.5,
            1e-9,
        );
        assert_eq!(track.points[0], [line[0][0], line[0][2]], "{name}: start");
        let end = line[line.len() - 1];
        let finish = track.points[track.finish_index];
        assert!((finish[0] - end[0]).hypot(finish[1] - end[2]) <= 0.5, "{name}: finish");
        // Every line point lies on the centreline (within the 0.1 m rounding
        // of its coordinates), and the heights match there.
        let mut along = 0.0;
        for (i, p) in line.iter().enumerate() {
            if i > 0 {
                along += (p[0] - line[i - 1][0]).hypot(p[2] - line[i - 1][2]);
            }
            if i % 7 != 0 {
                continue;
            }
            // Searched from the point at that arc length: at a bridge the
            // nearest point in plan is the other road.
            let pr = track.project([p[0], p[2]], (along / 0.5) as usize);
            assert!(pr.lateral.abs() < 0.1, "{name}: point {i} {:.3} m off", pr.lateral);
            rulka_test_support::margin::close(
                "track.height_at(pr.index, pr.s) vs p[1]",
                track.height_at(pr.index, pr.s),
                p[1],
                0.15,
            );
        }
        for w in track.points[..=track.finish_index].windows(2) {
            let d = (w[1][0] - w[0][0]).hypot(w[1][1] - w[0][1]);
            assert!(d <= 0.5 + 1e-9 && d > 0.3, "spacing {d}");
        }
    }
}

#[test]
fn the_autopilot_finishes_and_zones_advance_one_by_one() {
    for name in MAPS {
        let c = cfg(name);
        let line = read_npy(&map(name));
        let pilot = Autopilot::new(&c);
        let mut env = SimEnv::new(&c);
        env.reset(0).unwrap();
        let (fl, nf) = env.obs_sizes();
        let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
        let mut zone = env.tracker().unwrap().zone;
        let first = zone;
        let (mut worst_height, mut climbed) = (0.0f64, 0.0f64);
        let mut last_y = None;
        let (mut compared, mut steps) = (0usize, 0usize);
        let mut prev = env.sim().game_state([false; 4]).position.map(f64::from);
        let status = loop {
            env.observe(&mut frame, &mut floats).unwrap();
            let st = env.step(&[pilot.act(&floats)]).unwrap();
            let now = env.tracker().unwrap().zone;
            let gs = env.sim().game_state([false; 4]);
            let p3 = gs.position.map(f64::from);
            // Zone centres are 0.5 m apart: never back, never further than
            // the car went, and the current one is where the car is.
            let moved = (p3[0] - prev[0]).hypot(p3[2] - prev[2]);
            assert!(now >= zone, "{name}: zone {zone} → {now}");
            assert!(
                (now - zone) as f64 <= moved / 0.5 + 3.0,
                "{name}: zone {zone} → {now} for {moved:.2} m"
            );
            // The current zone's centre is as near the car as the nearest
            // centre of this stretch of road (±20 m: not a bridge's other
            // road), within one zone's spacing (measured: ≤ 0.26 m).
            let centers = env.zone_map().unwrap().centers();
            let plan = |c: &[f64; 3]| (c[0] - p3[0]).hypot(c[2] - p3[2]);
            let off = plan(&centers[now]);
            let stretch = &centers[now.saturating_sub(40)..=(now + 40).min(centers.len() - 1)];
            let nearest = stretch.iter().map(plan).fold(f64::INFINITY, f64::min);
            assert!(
                off <= nearest + 0.5,
                "{name}: zone {now}'s centre is {off:.2} m from the car, the nearest {nearest:.2} m"
            );
            prev = p3;
            zone = now;
            let pos = [f64::from(gs.position[0]), f64::from(gs.position[2])];
            let near = line
                .iter()
                .min_by(|a, b| {
                    let d = |p: &[f64; 3]| (p[0] - pos[0]).hypot(p[2] - pos[1]);
                    d(a).total_cmp(&d(b))
                })
                .unwrap();
            // Bridges: the nearest point in plan may be the other road; only
            // compare where it is this road (within a few metres of height).
            let dy = (f64::from(gs.position[1]) - near[1]).abs();
            if dy < 5.0 {
                worst_height = worst_height.max(dy);
                compared += 1;
            }
            steps += 1;
            if let Some(y) = last_y {
                climbed += (f64::from(gs.position[1]) - f64::from(y)).max(0.0);
            }
            last_y = Some(gs.position[1]);
            if st.is_done() {
                break st;
            }
        };
        let Status::Finished { race_time_ms } = status else { panic!("{name}: {status:?}") };
        let zones = env.zone_map().unwrap().last_index();
        assert!(
            zone + 25 >= zones && zone > first + 5000,
            "{name}: ended in zone {zone} of {zones}"
        );
        // The car's height is the road's (the ±0.1 m rounding, a car off the
        // centreline on a banked or sloped part).
        assert!(worst_height < 1.0, "{name}: {worst_height} m off the road's height");
        assert!(
            compared * 10 >= steps * 9,
            "{name}: heights compared at {compared} of {steps} steps"
        );
        let rise: f64 = line.windows(2).map(|w| (w[1][1] - w[0][1]).max(0.0)).sum();
        rulka_test_support::margin::close("climbed vs rise", climbed, rise, 0.2 * rise + 1.0);
        eprintln!("{name}: autopilot {:.2} s, {zone} zones", race_time_ms / 1000.0);
    }
}

#[test]
fn a_line_that_cannot_be_a_track_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::default();
    c.environment.sim.track_from = Some(dir.path().join("missing.npy"));
    let mut env = SimEnv::new(&c);
    let e = env.reset(0).unwrap_err().to_string();
    assert!(e.contains("missing.npy"), "{e}");
    let short: Vec<[f64; 3]> = (0..20).map(|i| [f64::from(i) * 0.5, 0.0, 0.0]).collect();
    let e = Track::from_line(&short, 16.0, 0, TrackPreset::Medium).unwrap_err();
    assert!(e.contains("9.5 m long"), "{e}");
    let e = Track::from_line(&[[0.0, f64::NAN, 0.0]], 16.0, 0, TrackPreset::Medium).unwrap_err();
    assert!(e.contains("point 0"), "{e}");
}
