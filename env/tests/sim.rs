#![allow(clippy::unwrap_used)]
//! The simulator against hand-computed facts: determinism, metre accounting
//! (checked with an exhaustive projection), cut-off times, physics, floats.

use rulka_config::{ingredients, Config, TrackPreset};
use rulka_env::{Autopilot, CutOff, EnvError, Environment, SimEnv, Status, Track};

fn cfg(preset: TrackPreset) -> Config {
    let mut c = Config::default();
    c.environment.sim.track = preset;
    c
}

struct Obs {
    frame: Vec<u8>,
    floats: Vec<f32>,
}

fn obs(env: &mut SimEnv) -> Obs {
    let (fl, nf) = env.obs_sizes();
    let mut o = Obs { frame: vec![0; fl], floats: vec![0.0; nf] };
    env.observe(&mut o.frame, &mut o.floats).unwrap();
    o
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn same_seed_and_actions_give_identical_rollouts() {
    let c = cfg(TrackPreset::Medium);
    let run = |seed: u64| {
        let mut env = SimEnv::new(&c);
        env.reset(seed).unwrap();
        let mut rng = 99u64;
        let mut trace = Vec::new();
        loop {
            let o = obs(&mut env);
            trace.push((
                o.frame,
                o.floats.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                env.ingredients().map(f32::to_bits),
            ));
            let a = if xorshift(&mut rng) % 3 == 0 { (xorshift(&mut rng) % 12) as u8 } else { 0 };
            if env.step(&[a]).unwrap().is_done() {
                break;
            }
        }
        trace
    };
    let (a, b) = (run(5), run(5));
    assert!(a.len() > 10);
    assert_eq!(a, b);
    assert_ne!(run(5)[3..], run(6)[3..], "another seed is another track");
}

#[test]
fn tracks_are_a_function_of_seed_and_preset() {
    let a = Track::generate(11, TrackPreset::Hard);
    let b = Track::generate(11, TrackPreset::Hard);
    assert_eq!(a.points, b.points);
    rulka_test_support::margin::close("a.length() vs 900.0", a.length(), 900.0, 1e-9);
    assert_ne!(Track::generate(12, TrackPreset::Hard).points, a.points);
    // Consecutive centreline points are 0.5 m apart (arc chords: ≤ 0.5).
    for w in a.points.windows(2) {
        let d = (w[1][0] - w[0][0]).hypot(w[1][1] - w[0][1]);
        rulka_test_support::margin::close("d vs 0.5", d, 0.5, 1e-3);
    }
}

/// Metres come from the original's zone tracking over the track's reference
/// line (smoothed, measured between zone transitions): they follow the arc
/// length of the car's projection on the centreline (found by brute force)
/// within the smoothing's corner cutting, and add up to the race distance.
#[test]
fn metres_advanced_follow_the_distance_along_the_centreline() {
    for preset in [TrackPreset::Easy, TrackPreset::Medium] {
        let c = cfg(preset);
        let pilot = Autopilot::new(&c);
        let mut env = SimEnv::new(&c);
        env.reset(3).unwrap();
        let track = env.track().unwrap().clone();
        let mut meters = vec![env.ingredients()[ingredients::METERS]];
        assert_eq!(meters[0], 0.0, "0 m at the start line");
        let mut worst = 0.0f64;
        let status = loop {
            let o = obs(&mut env);
            let st = env.step(&[pilot.act(&o.floats)]).unwrap();
            let m = env.ingredients()[ingredients::METERS];
            let exhaustive = track.project_exhaustive(env.car().pos);
            worst = worst.max((f64::from(m) - exhaustive.s).abs());
            meters.push(m);
            if st.is_done() {
                break st;
            }
        };
        // Smoothing over ±2.5 m cuts corners of radius ≥ 22 m by centimetres
        // per corner; zone transitions are 0.5 m apart (measured: ≤ 0.07 m on
        // easy, ≤ 0.74 m on medium).
        assert!(worst < 1.5, "{preset:?}: metres off by {worst}");
        let Status::Finished { race_time_ms } = status else { panic!("{preset:?}: {status:?}") };
        let advanced: f64 = meters.windows(2).map(|w| f64::from(w[1] - w[0])).sum();
        // The sum telescopes to the metres of the finishing step: the car's
        // arc length there — past the line by at most one decision's travel
        // (its speed × 50 ms) — give or take the tracking error bounded
        // above (1.5 m).
        let travel = env.car().speed() * 0.05;
        rulka_test_support::margin::close(
            "metres advanced vs the track's length",
            advanced,
            track.length(),
            1.5 + travel,
        );
        let ing = env.ingredients();
        assert_eq!(ing[ingredients::FINISHED], 1.0);
        assert_eq!(f64::from(ing[ingredients::RACE_TIME_MS]), race_time_ms);
        assert_eq!(race_time_ms % 10.0, 0.0, "race time has the 10 ms engine resolution");
        // Past the finish line the frame is blank, as the original's NaN frame.
        let o = obs(&mut env);
        assert!(o.frame.iter().all(|&b| b == 0));
        assert!(env.step(&[0]).is_err(), "stepping after the end is an error");
    }
}

#[test]
fn standing_still_is_cut_off_after_the_no_progress_limit() {
    let c = cfg(TrackPreset::Easy);
    let mut env = SimEnv::new(&c);
    env.reset(0).unwrap();
    // Coast (action 3) from rest: never reaches zone 1 (10 m).
    let mut steps = 0;
    let st = loop {
        steps += 1;
        let st = env.step(&[3]).unwrap();
        if st.is_done() {
            break st;
        }
    };
    assert_eq!(st, Status::CutOff(CutOff::NoProgress));
    // The original cuts off once the race time is *above* the last new zone's
    // time (0 ms, the start) + 2000 ms: at the 50 ms decision after 2000 ms.
    assert_eq!(steps, 41);
    assert_eq!(env.time_ms(), 2050);
}

#[test]
fn the_race_is_cut_off_at_the_time_limit() {
    let mut c = cfg(TrackPreset::Hard);
    c.environment.cutoff_rollout_if_race_not_finished_within_duration_ms = 1500;
    let mut env = SimEnv::new(&c);
    env.reset(0).unwrap();
    let mut steps = 0;
    let st = loop {
        steps += 1;
        let st = env.step(&[0]).unwrap();
        if st.is_done() {
            break st;
        }
    };
    // Above 1500 ms: the decision at 1550 ms.
    assert_eq!((st, steps), (Status::CutOff(CutOff::TimeLimit), 31));
}

#[test]
fn throttle_from_rest_follows_the_documented_model() {
    // First straight of every preset is ≥ 5 m; 4 decisions of throttle stay on it.
    let c = cfg(TrackPreset::Easy);
    let mut env = SimEnv::new(&c);
    env.reset(1).unwrap();
    let (mut v, mut x) = (0.0f64, 0.0f64);
    for _ in 0..4 {
        env.step(&[0]).unwrap();
        for _ in 0..5 {
            // v' = v + (9·(1 − v/45) − 0.0015·v²)·dt; x' = x + v'·dt
            v += (9.0 * (1.0 - v / 45.0) - 0.0015 * v * v) * 0.01;
            x += v * 0.01;
        }
    }
    let o = obs(&mut env);
    let vel = velocity_index(&c);
    rulka_test_support::margin::close(
        "f64::from(o.floats[vel + 2]) vs v",
        f64::from(o.floats[vel + 2]),
        v,
        1e-5,
    );
    assert!(o.floats[vel].abs() < 1e-6, "no lateral velocity on a straight");
    rulka_test_support::margin::close(
        "f64::from(env.ingredients()[ingredients::METERS]) vs x",
        f64::from(env.ingredients()[ingredients::METERS]),
        x,
        1e-4,
    );
    // Previous actions, oldest first: [accel, brake, left, right] = [1,0,0,0]
    // (5 slots, 4 actions taken: the first slot is the original's padding, forward too).
    assert_eq!(&o.floats[1..21], &[1.0, 0.0, 0.0, 0.0].repeat(5)[..]);
    env.step(&[7]).unwrap(); // brake + left
    let o = obs(&mut env);
    assert_eq!(&o.floats[17..21], &[0.0, 1.0, 1.0, 0.0], "the newest action is last");
}

fn velocity_index(c: &Config) -> usize {
    let mut at = 0;
    for (name, len) in rulka_config::float_layout(c) {
        if name == "velocity" {
            return at;
        }
        at += len;
    }
    unreachable!()
}

#[test]
fn start_observation_has_the_documented_layout() {
    let c = cfg(TrackPreset::Easy);
    let mut env = SimEnv::new(&c);
    env.reset(4).unwrap();
    let o = obs(&mut env);
    assert_eq!(o.floats.len(), c.float_input_dim());
    let zones = velocity_index(&c) + 6;
    // The original's zone 0 is the start line's own centre (the car is on it);
    // zone 1 is 10 m straight ahead on the first straight.
    assert!(
        o.floats[zones..zones + 3].iter().all(|x| x.abs() < 1e-4),
        "{:?}",
        &o.floats[zones..zones + 3]
    );
    assert!(o.floats[zones + 3].abs() < 1e-4 && (o.floats[zones + 5] - 10.0).abs() < 1e-4);
    // y_map: the world's up axis in the car frame of a level car.
    assert_eq!(&o.floats[zones - 3..zones], &[0.0, 1.0, 0.0]);
    // Margin to finish: the original's formula measures to the transition half
    // a point past the finish, from the start zone's transition: 250 m + 0.75 m
    // on a straight; the smoothing shortens the curves of this track a little.
    let margin = o.floats[c.float_input_dim() - 2];
    rulka_test_support::margin::close("margin vs 250.75", f64::from(margin), 250.75, 0.5);
    // Frame: the car (black) at its fixed place, road around it, outside far to the side.
    let (w, h) = (64usize, 64usize);
    assert_eq!(o.frame[(h * 7 / 10) * w + w / 2], 0);
    assert_eq!(o.frame[(h * 7 / 10 - 4) * w + w / 2 + 4], 130, "road ahead-right of the car");
    assert_eq!(o.frame[(h * 7 / 10) * w], 40, "grass 32 m to the left of a 16 m road");
}

#[test]
fn invalid_actions_are_named() {
    let c = cfg(TrackPreset::Easy);
    let mut env = SimEnv::new(&c);
    assert!(matches!(env.step(&[0]), Err(EnvError::State(_))), "step before reset");
    env.reset(0).unwrap();
    let e = env.step(&[12]).unwrap_err();
    assert!(e.to_string().contains("action 12"), "{e}");
    let e = env.step(&[0, 1]).unwrap_err();
    assert!(e.to_string().contains("expected 1 action head"), "{e}");
}

#[test]
fn multi_offset_heads_split_the_decision() {
    let mut c = cfg(TrackPreset::Easy);
    c.environment.rl_action_offsets_ms = vec![0, 10, 20];
    let mut env = SimEnv::new(&c);
    env.reset(0).unwrap();
    env.step(&[0, 0, 3]).unwrap();
    // 30 ms per decision: two 10 ms throttle steps then one coasting step.
    assert_eq!(env.time_ms(), 30);
    let mut v = 0.0f64;
    for _ in 0..2 {
        v += (9.0 * (1.0 - v / 45.0) - 0.0015 * v * v) * 0.01;
    }
    v += (-0.8 - 0.0015 * v * v) * 0.01;
    rulka_test_support::margin::close(
        "f64::from(env.ingredients()[ingredients::SPEED]) vs v",
        f64::from(env.ingredients()[ingredients::SPEED]),
        v,
        1e-6,
    );
}

#[test]
fn a_scripted_driver_finishes_every_preset() {
    for preset in [TrackPreset::Easy, TrackPreset::Medium, TrackPreset::Hard] {
        let c = cfg(preset);
        let pilot = Autopilot::new(&c);
        let mut env = SimEnv::new(&c);
        for seed in 0..3 {
            env.reset(seed).unwrap();
            let st = loop {
                let o = obs(&mut env);
                let st = env.step(&[pilot.act(&o.floats)]).unwrap();
                if st.is_done() {
                    break st;
                }
            };
            assert!(matches!(st, Status::Finished { .. }), "{preset:?} seed {seed}: {st:?}");
        }
    }
}
