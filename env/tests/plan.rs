//! The planner (`rulka_env::plan`): its drives replay to the time it
//! reports, through an independent re-simulation from the start; no drive
//! beats the car's top speed over the track's length; a wider beam on a
//! hard track is at least as fast here (measured: see docs/learning.md).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_env::{plan, replay, search, PlanSettings, SearchSettings, Sim, SimParams, TOP_SPEED};

fn sim(track: &str) -> Sim {
    let cfg =
        Config::from_yaml_str(&format!("environment: {{sim: {{track: {track}}}}}"), "t").unwrap();
    Sim::new(SimParams::from_config(&cfg))
}

/// A ladder of beams 4, 8, … up to `max_beam`, climbed to its end (no
/// stop by convergence), one refinement pass a rung: small enough for a
/// test, and every rung's gain visible.
fn ladder(max_beam: usize) -> SearchSettings {
    SearchSettings {
        first_beam: 4,
        max_beam,
        converged: 0.0,
        refine_passes: 1,
        ..SearchSettings::default()
    }
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

/// `plan_beside` holds its elite in every layer: a beam of one state,
/// which alone drives slower than a beam of 32, finds a drive at least as
/// fast as the 32-beam's drive it is given (and replaying to its time).
#[test]
fn a_beam_beside_an_elite_is_never_slower_than_the_elite() {
    use rulka_env::plan_beside;
    let mut s = sim("hard");
    let wide = plan(&mut s, 1000, &PlanSettings { beam: 32, ..PlanSettings::default() }).unwrap();
    let elite = wide.race_time_ms.unwrap();
    let narrow = PlanSettings { beam: 1, ..PlanSettings::default() };
    let alone = plan(&mut s, 1000, &narrow).unwrap();
    assert!(
        alone.race_time_ms.is_none_or(|t| t > elite),
        "the test needs a slower beam: {alone:?}"
    );
    let beside = plan_beside(&mut s, 1000, &narrow, &wide.actions).unwrap();
    let t = beside.race_time_ms.unwrap();
    assert!(t <= elite, "{t} ms beside an elite of {elite} ms");
    assert_eq!(replay(&mut s, 1000, &beside.actions).unwrap(), Some(t));
}

/// The elite takes the last place of a full layer: beside an elite that
/// never leads (it brakes on the start line), a beam of B searches as the
/// beam of B − 1 alone, decision for decision (the elite's children rank
/// below every moving state, so the layer is the B − 1 best and the elite).
#[test]
fn an_elite_that_never_leads_takes_the_last_place_of_the_layer() {
    use rulka_env::plan_beside;
    assert_eq!(rulka_config::ACTION_KEYS[6], [false, true, false, false]);
    let mut s = sim("easy");
    let still = vec![6u8; 3000];
    for beam in [2usize, 3, 8] {
        let alone =
            plan(&mut s, 7, &PlanSettings { beam: beam - 1, ..PlanSettings::default() }).unwrap();
        let beside =
            plan_beside(&mut s, 7, &PlanSettings { beam, ..PlanSettings::default() }, &still)
                .unwrap();
        assert!(alone.race_time_ms.is_some(), "beam {}: {alone:?}", beam - 1);
        assert_eq!(
            (beside.race_time_ms, &beside.actions),
            (alone.race_time_ms, &alone.actions),
            "beam {beam} beside a standing elite against {} alone",
            beam - 1
        );
    }
}

/// `refine` mends a blunder: a planned drive with one decision of its
/// middle made a full brake (still finishing, later) comes back faster than
/// the blunder, replaying to the time it reports; a drive that does not
/// finish is refused, named.
#[test]
fn refinement_mends_a_blunder_and_replays_to_its_time() {
    use rulka_env::refine;
    let mut s = sim("easy");
    let p = plan(&mut s, 7, &PlanSettings { beam: 16, ..PlanSettings::default() }).unwrap();
    let mut blunder = p.actions.clone();
    let mid = blunder.len() / 2;
    // Action 6 holds the brake alone (rulka_config::ACTION_KEYS).
    assert_eq!(rulka_config::ACTION_KEYS[6], [false, true, false, false]);
    blunder[mid] = 6;
    blunder.extend(std::iter::repeat_n(0, 40));
    let slow = replay(&mut s, 7, &blunder).unwrap().unwrap();
    assert!(slow > p.race_time_ms.unwrap(), "the brake costs time");
    let r = refine(&mut s, 7, &blunder, 3).unwrap();
    assert!(r.race_time_ms < slow, "{} ms, the blunder {slow} ms", r.race_time_ms);
    assert!(r.changes >= 1 && r.passes >= 1 && r.engine_steps > 0, "{r:?}");
    assert_eq!(replay(&mut s, 7, &r.actions).unwrap(), Some(r.race_time_ms));
    // The drive ends at its finish: one decision fewer does not finish.
    assert_eq!(replay(&mut s, 7, &r.actions[..r.actions.len() - 1]).unwrap(), None);
    // Only a change that finishes sooner is kept: refined again, the drive
    // is left as it is (a change that only ties is no change).
    let again = refine(&mut s, 7, &r.actions, 3).unwrap();
    assert_eq!(
        (again.changes, &again.actions, again.race_time_ms),
        (0, &r.actions, r.race_time_ms)
    );
    let e = refine(&mut s, 7, &p.actions[..10], 1).unwrap_err();
    assert!(e.to_string().contains("of 10 decisions does not finish"), "{e}");
}

/// `search`: the ladder doubles the beam from the first to the last, each
/// rung never slower than the one before, its best the last rung's;
/// `converged` stops the ladder at the first doubling gaining less than
/// asked (a share of 1: any doubling) and 0 climbs to the end; a ladder of
/// no rung is refused, named.
#[test]
fn the_ladder_doubles_the_beam_and_never_slows() {
    let mut s = sim("hard");
    let settings = ladder(16);
    let full = search(&mut s, 1001, &settings).unwrap();
    assert_eq!(full.rungs.iter().map(|r| r.beam).collect::<Vec<_>>(), [4, 8, 16]);
    let times: Vec<u64> = full.rungs.iter().map(|r| r.refined_ms.unwrap()).collect();
    assert!(times.windows(2).all(|w| w[1] <= w[0]), "{times:?}");
    for r in &full.rungs {
        assert!(r.refined_ms <= r.beam_ms, "refinement never slows a rung: {r:?}");
    }
    assert_eq!(full.race_time_ms, times.last().copied());
    assert!(!full.converged);
    assert_eq!(replay(&mut s, 1001, &full.actions).unwrap(), full.race_time_ms);
    assert_eq!(full.engine_steps(), full.rungs.iter().map(|r| r.engine_steps).sum::<u64>());
    let stop =
        search(&mut s, 1001, &SearchSettings { converged: 1.0, ..settings.clone() }).unwrap();
    assert_eq!(stop.rungs.len(), 2, "a share of 1: the first doubling stops it");
    assert!(stop.converged);
    assert_eq!(stop.rungs[..], full.rungs[..2], "the same rungs as far as they go");
    let e = search(&mut s, 1001, &SearchSettings { first_beam: 8, max_beam: 4, ..settings })
        .unwrap_err();
    assert!(e.to_string().contains("beams from 8 to 4"), "{e}");
}

/// The plan's finish is the first its last layer found: from the state
/// before the plan's last decision, no other of the 12 actions finishes
/// sooner (each replayed from the start, independently of the search).
#[test]
fn no_other_last_decision_finishes_sooner() {
    for (track, seed) in [("easy", 0), ("easy", 3), ("easy", 7), ("hard", 1000)] {
        let mut s = sim(track);
        let p = plan(&mut s, seed, &PlanSettings { beam: 24, ..PlanSettings::default() }).unwrap();
        let t = p.race_time_ms.unwrap();
        let head = &p.actions[..p.actions.len() - 1];
        let mut finishes = 0;
        for a in 0..12u8 {
            let drive: Vec<u8> = head.iter().copied().chain([a]).collect();
            if let Some(u) = replay(&mut s, seed, &drive).unwrap() {
                finishes += 1;
                assert!(
                    u >= t,
                    "{track} {seed}: action {a} last finishes at {u} ms, the plan at {t}"
                );
            }
        }
        assert!(finishes >= 1, "{track} {seed}: the plan's own last action finishes");
    }
}

/// A last beam that is not a doubling of the first is still the last rung:
/// beams 4, 8, then 12 (not stopping at 8, not going on to 16).
#[test]
fn the_ladder_ends_at_its_last_beam_whatever_it_is() {
    let mut s = sim("easy");
    let settings = ladder(12);
    let r = search(&mut s, 3, &settings).unwrap();
    assert_eq!(r.rungs.iter().map(|r| r.beam).collect::<Vec<_>>(), [4, 8, 12]);
}

/// The ladder's stop rule against a model: a doubling's gain is the best
/// drive so far before the rung against the best after it (refined, the
/// ladder's elite), and the ladder stops at the first rung whose gain is
/// less than `converged` of the time before. Thresholds sit just below
/// and just above each gain the full ladder shows, so each rung's gain
/// decides one stop.
#[test]
fn the_ladder_stops_where_the_best_so_far_gained_less_than_asked() {
    let mut stops_seen = 0;
    for (track, seed) in [("hard", 1001), ("easy", 3)] {
        let mut s = sim(track);
        let settings = ladder(16);
        let full = search(&mut s, seed, &settings).unwrap();
        // The model: the best so far after each rung, and each doubling's gain.
        let mut best: Vec<u64> = Vec::new();
        for r in &full.rungs {
            let t = r.refined_ms.or(r.beam_ms).unwrap();
            best.push(best.last().map_or(t, |&b| b.min(t)));
        }
        let gain = |i: usize| (best[i - 1] - best[i]) as f64 / best[i - 1] as f64;
        let model_stop = |c: f64| (1..best.len()).find(|&i| gain(i) < c);
        for i in 1..best.len() {
            for c in [gain(i) * (1.0 - 1e-6), gain(i) * (1.0 + 1e-6) + 1e-9] {
                let got =
                    search(&mut s, seed, &SearchSettings { converged: c, ..settings.clone() })
                        .unwrap();
                let want = model_stop(c);
                assert_eq!(
                    (got.rungs.len(), got.converged),
                    (want.map_or(best.len(), |i| i + 1), want.is_some()),
                    "{track} {seed}, converged {c}: best so far {best:?}, rungs {:?}",
                    got.rungs
                );
                assert_eq!(got.race_time_ms, Some(best[got.rungs.len() - 1]), "{track} {seed}");
                stops_seen += usize::from(want.is_some());
            }
        }
    }
    assert!(stops_seen >= 2, "the thresholds stopped the ladder only {stops_seen} times");
}
