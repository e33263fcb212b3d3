//! The planner (`rulka_env::plan`): its drives replay to the time it
//! reports, through an independent re-simulation from the start; no drive
//! beats the car's top speed over the track's length; a wider beam on a
//! hard track is at least as fast here (measured: see docs/learning.md).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_env::{plan, replay, PlanSettings, Sim, SimParams, TOP_SPEED};

fn sim(track: &str) -> Sim {
    let cfg =
        Config::from_yaml_str(&format!("environment: {{sim: {{track: {track}}}}}"), "t").unwrap();
    Sim::new(SimParams::from_config(&cfg))
}

#[test]
fn a_plan_replays_to_its_time_and_no_faster_than_the_top_speed_allows() {
    for (track, seed) in [("easy", 0), ("easy", 7), ("hard", 1000)] {
        let mut s = sim(track);
        let p = plan(&mut s, seed, &PlanSettings { beam: 24, ..PlanSettings::default() }).unwrap();
        let t = p.race_time_ms.unwrap_or_else(|| panic!("{track} {seed}: not finished: {p:?}"));
        assert_eq!(replay(&mut s, seed, &p.actions).unwrap(), Some(t), "{track} {seed}");
        // One decision fewer does not finish: the time is the drive's own.
        assert_eq!(replay(&mut s, seed, &p.actions[..p.actions.len() - 1]).unwrap(), None);
        s.load(seed).unwrap();
        let length = s.track().unwrap().length();
        let bound_ms = length / TOP_SPEED * 1000.0;
        assert!(t as f64 >= bound_ms, "{track} {seed}: {t} ms under {bound_ms:.0} ms at top speed");
        assert!(p.engine_steps > 0);
    }
}

#[test]
fn bad_settings_and_actions_are_named() {
    let mut s = sim("easy");
    let e = plan(&mut s, 0, &PlanSettings { beam: 0, ..PlanSettings::default() }).unwrap_err();
    assert!(e.to_string().contains("beam of 0"), "{e}");
    let e = replay(&mut s, 0, &[0, 12]).unwrap_err();
    assert!(e.to_string().contains("action 12"), "{e}");
}
