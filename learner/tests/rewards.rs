//! Rewards against hand-computed values and the identities they must keep.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::*;

/// F = 27 + 3·2 + 0 + 0 + 1 = 34: velocity at 20..23, zone centres at 26..32, wheels' ground contact 5..9.
fn cfg(final_speed_s: f64) -> Config {
    Config::from_yaml_str(
        &format!("environment: {{n_zone_centers_in_inputs: 2, n_prev_actions_in_inputs: 0, n_contact_material_physics_behavior_types: 0}}\nrewards: {{reward_per_m_advanced_along_centerline: 0.1, final_speed_reward_as_if_duration_s: {final_speed_s}}}"),
        "t",
    )
    .unwrap()
}

fn state(wp0_dist: f32, vel: [f32; 3], wheels: [f32; 4]) -> Vec<f32> {
    let mut s = vec![0f32; 34];
    s[5..9].copy_from_slice(&wheels);
    s[20..23].copy_from_slice(&vel);
    s[26..29].copy_from_slice(&[0.0, 0.0, wp0_dist]);
    s[29..32].copy_from_slice(&[0.0, 0.0, wp0_dist + 10.0]);
    s
}

#[test]
fn three_frame_rollout_by_hand() {
    let c = cfg(0.0);
    assert_eq!(c.float_input_dim(), 34);
    let floats: Vec<f32> =
        [10.0, 3.0, 30.0].iter().flat_map(|&d| state(d, [0.0; 3], [1.0; 4])).collect();
    let r = RolloutIngredients {
        floats: &floats,
        meters: &[0.0, 5.0, 12.0],
        actions: &[0, 0, 0],
        race_time_ms: None,
    };
    let (into, phi, dense) = dense_rewards(&c, r, EngineeredCoefs::default());
    // c·50 ms = −0.06 on the middle slot and (cut off) the last; 0.1 per metre.
    let want_into = [0.0, -0.06 + 0.5, -0.06 + 0.7];
    let want_phi = [-1.0, -0.3, -2.5]; // −0.1 · clamp(d, 2, 25)
    let want_dense = [0.44, 0.7, -0.06]; // meter/constant moved one decision earlier
    for i in 0..3 {
        rulka_test_support::margin::close("into[i] vs want_into[i]", into[i], want_into[i], 1e-9);
        rulka_test_support::margin::close("phi[i] vs want_phi[i]", phi[i], want_phi[i], 1e-6);
        rulka_test_support::margin::close(
            "dense[i] vs want_dense[i]",
            dense[i],
            want_dense[i],
            1e-9,
        );
    }
    // r'0 = 0.44 + 0.9·(−0.3) + 1.0; r'1 = 0.7 + 0.9·(−2.5) + 0.3; r'2 = −0.06 + 2.5
    let (rew, dones) = rollout_rewards(&c, r, EngineeredCoefs::default(), 0.9);
    for (x, y) in rew.iter().zip([1.17, -1.25, 2.44]) {
        rulka_test_support::margin::close("*x vs y", f64::from(*x), y, 1e-5);
    }
    assert_eq!(dones, [0.0, 0.0, 1.0]);
}

#[test]
fn a_finished_race_pays_its_exact_time_on_the_last_step() {
    let c = cfg(0.0);
    let floats: Vec<f32> = (0..3).flat_map(|_| state(10.0, [0.0; 3], [1.0; 4])).collect();
    let r = RolloutIngredients {
        floats: &floats,
        meters: &[0.0, 0.0, 0.0],
        actions: &[0; 3],
        race_time_ms: Some(120.0),
    };
    let (into, _, dense) = dense_rewards(&c, r, EngineeredCoefs::default());
    // −0.0012 · (120 − 1·50) = −0.084 on the last slot; it stays on the last decision.
    assert!(
        (into[2] + 0.084).abs() < 1e-9 && (dense[2] + 0.084).abs() < 1e-9,
        "{into:?} {dense:?}"
    );
}

#[test]
fn an_unfinished_run_can_be_made_to_pay_until_the_cutoff() {
    let yaml = |pay: bool| {
        format!(
            "environment: {{n_zone_centers_in_inputs: 2, n_prev_actions_in_inputs: 0, \
             n_contact_material_physics_behavior_types: 0, \
             cutoff_rollout_if_race_not_finished_within_duration_ms: 1000}}\n\
             rewards: {{constant_reward_per_ms: -0.001, unfinished_runs_pay_until_cutoff: {pay}}}"
        )
    };
    let (off, on) = (
        Config::from_yaml_str(&yaml(false), "t").unwrap(),
        Config::from_yaml_str(&yaml(true), "t").unwrap(),
    );
    let last = |c: &Config, n: usize, race: Option<f64>| {
        let floats: Vec<f32> = (0..n).flat_map(|_| state(10.0, [0.0; 3], [1.0; 4])).collect();
        let meters = vec![0f32; n];
        let actions = vec![0; n];
        let r = RolloutIngredients {
            floats: &floats,
            meters: &meters,
            actions: &actions,
            race_time_ms: race,
        };
        let (into, _, _) = dense_rewards(c, r, EngineeredCoefs::default());
        (into[n - 1], into.iter().sum::<f64>())
    };
    // Cut off after 4 decisions (200 ms): the original charges 4 · 50 ms = −0.2 in all
    // (50 ms on the last step); with the option the run pays for 1000 ms, −1.0, its
    // last step −0.001 · (1000 − 3 · 50) = −0.85.
    let (l, total) = last(&off, 5, None);
    assert!((l + 0.05).abs() < 1e-9 && (total + 0.2).abs() < 1e-9, "{l} {total}");
    let (l, total) = last(&on, 5, None);
    assert!((l + 0.85).abs() < 1e-9 && (total + 1.0).abs() < 1e-9, "{l} {total}");
    // A run that reached the cut-off pays one step on its last, as without the option.
    let (l, _) = last(&on, 30, None);
    assert!((l + 0.05).abs() < 1e-9, "{l}");
    // A finished race pays its race time either way.
    let (_, total) = last(&on, 5, Some(180.0));
    assert!((total + 0.18).abs() < 1e-9, "{total}");
}

#[test]
fn speedslide_quality_by_hand() {
    // side friction 20·|vx|; max side friction from km/h: 80 up to 100 km/h, 77.5 at 150 km/h.
    rulka_test_support::margin::close(
        "speedslide_quality(5.0, 0.0) vs 0.25",
        speedslide_quality(5.0, 0.0),
        0.25,
        1e-12,
    );
    rulka_test_support::margin::close(
        "speedslide_quality(5.0, 150.0 / 3.6) vs (100.0 - 77.5) / 77.5",
        speedslide_quality(5.0, 150.0 / 3.6),
        (100.0 - 77.5) / 77.5,
        1e-9,
    );
    assert_eq!(speedslide_quality(1.0, 30.0), 0.0);
}

#[test]
fn credit_shift_preserves_mass_with_every_term_on() {
    let c = cfg(20.0);
    let n = 40;
    let mut x = 12345u64;
    let mut rnd = || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((x >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    };
    let floats: Vec<f32> = (0..n)
        .flat_map(|_| {
            state(
                20.0 * rnd().abs() + 1.0,
                [4.0 * rnd(), 0.5 * rnd(), 30.0 + 10.0 * rnd()],
                [rnd().max(0.0), 1.0, 1.0, rnd().max(0.0)],
            )
        })
        .collect();
    let meters: Vec<f32> = (0..n).map(|k| k as f32 * 1.7 + rnd()).collect();
    let actions: Vec<i32> = (0..n).map(|k| k % 12).collect();
    let eng =
        EngineeredCoefs { speedslide: 0.3, neoslide: 0.2, kamikaze: -0.1, close_to_vcp: 0.01 };
    for finished in [None, Some(2150.0)] {
        let r = RolloutIngredients {
            floats: &floats,
            meters: &meters,
            actions: &actions,
            race_time_ms: finished,
        };
        let (into, phi, dense) = dense_rewards(&c, r, eng);
        let (a, b): (f64, f64) = (into.iter().sum(), dense.iter().sum());
        rulka_test_support::margin::close("a vs b", a, b, 1e-9);
        assert!(
            into.iter().zip(&dense).any(|(x, y)| (x - y).abs() > 1e-6),
            "the shift moved nothing"
        );
        // Potential shaping telescopes: Σ γ^t r'_t = Σ γ^t r_t − Φ(s_0).
        let gamma = 0.97;
        let folded = fold_potential(&dense, &phi, gamma);
        let disc =
            |v: &[f64]| v.iter().enumerate().map(|(t, r)| gamma.powi(t as i32) * r).sum::<f64>();
        rulka_test_support::margin::close(
            "disc(&folded) vs (disc(&dense) - phi[0])",
            disc(&folded),
            disc(&dense) - phi[0],
            1e-9,
        );
    }
}

/// The final-speed term pays the change of speed (|v| in m/s) times
/// `reward_per_m · final_speed_reward_as_if_duration_s` = 0.1 · 20 = 2 while
/// the car moves forward, and the kamikaze term charges a gas-only action
/// (0, 1, 2) or a car with at most one wheel down: speeds 10 → 13 → 12 → 5
/// pay 6, −2 and −14; actions 1 (gas only), 5 with one wheel down, 7 with
/// four pay −0.1, −0.1 and 0; every middle slot pays 50 ms · −0.0012.
#[test]
fn the_speed_and_kamikaze_terms_by_hand() {
    let c = cfg(20.0);
    let floats: Vec<f32> = [
        ([0.0, 0.0, 10.0], [1.0; 4]),
        ([0.0, 0.0, 13.0], [1.0; 4]),
        ([0.0, 0.0, 12.0], [1.0, 0.0, 0.0, 0.0]),
        ([3.0, 0.0, 4.0], [1.0; 4]),
        ([0.0, 0.0, 4.0], [1.0; 4]),
    ]
    .iter()
    .flat_map(|&(v, w)| state(10.0, v, w))
    .collect();
    let r = RolloutIngredients {
        floats: &floats,
        meters: &[0.0; 5],
        actions: &[0, 1, 5, 7, 0],
        race_time_ms: None,
    };
    let eng = EngineeredCoefs { kamikaze: -0.1, ..EngineeredCoefs::default() };
    let (into, _, _) = dense_rewards(&c, r, eng);
    let want = [0.0, 6.0 - 0.06 - 0.1, -2.0 - 0.06 - 0.1, -14.0 - 0.06, -0.06];
    for (k, (got, want)) in into.iter().zip(want).enumerate() {
        rulka_test_support::margin::close(&format!("kamikaze slot {k}"), *got, want, 1e-9);
    }
}
