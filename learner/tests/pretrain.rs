//! Behaviour cloning's pieces against hand-computed values: the split by
//! drive, the offset targets, the value targets (discounted returns under
//! the config's rewards).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::{ingredients, Config};
use rulka_demos::Demo;
use rulka_learner::{
    demo_returns, offset_step, rollout_rewards, shaping_gamma, split_drives, EngineeredCoefs,
    RolloutIngredients,
};

fn demo(cfg: &Config, n: usize, finished: Option<f64>) -> Demo {
    let nf = cfg.float_input_dim();
    let mut ing = vec![0f32; n * ingredients::COUNT];
    for i in 0..n {
        ing[i * ingredients::COUNT + ingredients::METERS] = 10.0 * i as f32;
        ing[i * ingredients::COUNT + ingredients::RACE_TIME_MS] = 50.0 * i as f32;
    }
    Demo {
        n_floats: nf,
        n_heads: 1,
        frame_len: 1,
        frames: vec![0; n],
        floats: vec![0.0; n * nf],
        actions: vec![0; n],
        ingredients: ing,
        race_time_ms: finished,
        ..Demo::default()
    }
}

#[test]
fn returns_are_the_discounted_sums_of_the_rewards_rulka_trains_on() {
    // The rewards are those a trajectory of these steps trains on
    // (`rollout_rewards`, checked against the original elsewhere); the
    // value targets are their sums discounted by `ppo.gamma`, the last step
    // bootstrapped with nothing: G_t = r_t + γ·G_{t+1}.
    let cfg = Config::from_yaml_str("ppo: {gamma: 0.5}\n", "t.yaml").unwrap();
    for finished in [None, Some(150.0)] {
        let d = demo(&cfg, 4, finished);
        let meters: Vec<f32> = (0..4).map(|i| d.meters(i)).collect();
        let (r, _) = rollout_rewards(
            &cfg,
            RolloutIngredients {
                floats: &d.floats,
                meters: &meters,
                actions: &d.actions,
                race_time_ms: finished,
            },
            EngineeredCoefs::at(&cfg, 0),
            shaping_gamma(&cfg, 0),
        );
        let r: Vec<f64> = r.iter().map(|&x| f64::from(x)).collect();
        assert!(r.iter().any(|&x| x != 0.0), "{r:?}");
        let want = [
            r[0] + 0.5 * r[1] + 0.25 * r[2] + 0.125 * r[3],
            r[1] + 0.5 * r[2] + 0.25 * r[3],
            r[2] + 0.5 * r[3],
            r[3],
        ];
        let g = demo_returns(&cfg, &d);
        for (a, b) in g.iter().zip(want) {
            assert!((f64::from(*a) - b).abs() < 1e-5, "{g:?} vs {want:?}");
        }
    }
}

#[test]
fn offset_targets_round_to_decisions_and_stay_in_the_drive() {
    let cfg = Config::default();
    let d = demo(&cfg, 6, None); // 5 executed decisions: 0..=4
    assert_eq!(offset_step(&d, 2, 0, 50.0), 2);
    assert_eq!(offset_step(&d, 2, 100, 50.0), 4);
    assert_eq!(offset_step(&d, 2, 10, 50.0), 2, "10 ms rounds to the same decision");
    assert_eq!(offset_step(&d, 2, -10, 50.0), 2);
    assert_eq!(offset_step(&d, 2, 30, 50.0), 3, "30 ms rounds to the next");
    assert_eq!(offset_step(&d, 4, 100, 50.0), 4, "clamped to the last executed decision");
    assert_eq!(offset_step(&d, 0, -100, 50.0), 0, "clamped to the first");
}

#[test]
fn drives_are_held_out_whole_and_never_all() {
    let (train, held) = split_drives(10, 0.2, 7);
    assert_eq!((train.len(), held.len()), (8, 2));
    let mut all: Vec<usize> = train.iter().chain(&held).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..10).collect::<Vec<_>>());
    assert_eq!(split_drives(10, 0.2, 7), (train, held.clone()), "seeded");
    assert_ne!(split_drives(10, 0.2, 8).1, held, "another seed, another split");
    assert_eq!(split_drives(3, 0.1, 0).1.len(), 1, "at least one held out");
    assert_eq!(split_drives(1, 0.5, 0).1.len(), 0, "never every drive");
    assert_eq!(split_drives(4, 0.0, 0).1.len(), 0, "none asked");
    assert_eq!(split_drives(4, 0.99, 0).1.len(), 3);
}
