//! Where rulka differed from the original's learning code (found by running
//! the original beside it), each pinned to the original's behaviour: the
//! shaping γ's precedence, the float normalisation of a fresh network for the
//! game, GRPO's step on a zero-spread group in the original's preset, and DPO
//! skipping pairs shorter than 2 steps.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;

use rulka_config::{Config, ORIGINAL_WAYPOINT_MEAN_40CP, ORIGINAL_WAYPOINT_STD_40CP};
use rulka_learner::{
    dense_rewards, rollout_rewards, scheduled_coefficient, shaping_gamma, ActorCritic,
    EngineeredCoefs, Learner, RolloutIngredients, TrajBatch,
};
use tch::{Device, Kind, Tensor};

fn preset(name: &str) -> Config {
    Config::from_file(Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs").join(name)).unwrap()
}

fn yaml(text: &str) -> Config {
    Config::from_yaml_str(text, "t").unwrap()
}

#[test]
fn shaping_gamma_has_the_originals_precedence() {
    // policy_rollout_gamma_schedule > ppo.gamma_schedule > policy_rollout_gamma > ppo.gamma
    let all = "training: {policy_rollout_gamma: 0.97, policy_rollout_gamma_schedule: [[0, 0.5], [100, 0.7]]}\nppo: {gamma: 0.9, gamma_schedule: [[0, 0.8], [100, 0.6]]}";
    rulka_test_support::margin::close(
        "shaping_gamma(&yaml(all), 50) vs 0.6",
        shaping_gamma(&yaml(all), 50),
        0.6,
        1e-12,
    );
    let no_rollout_schedule =
        "training: {policy_rollout_gamma: 0.97}\nppo: {gamma: 0.9, gamma_schedule: [[0, 0.8], [100, 0.6]]}";
    rulka_test_support::margin::close(
        "shaping_gamma(&yaml(no_rollout_schedule), 50) vs 0.7",
        shaping_gamma(&yaml(no_rollout_schedule), 50),
        0.7,
        1e-12,
    );
    assert_eq!(
        shaping_gamma(&yaml("training: {policy_rollout_gamma: 0.97}\nppo: {gamma: 0.9}"), 50),
        0.97
    );
    assert_eq!(shaping_gamma(&yaml("ppo: {gamma: 0.9}"), 50), 0.9);
    // global_schedule_speed stretches the schedule's frame counts.
    let slow =
        "training: {global_schedule_speed: 2}\nppo: {gamma_schedule: [[0, 0.8], [100, 0.6]]}";
    rulka_test_support::margin::close(
        "shaping_gamma(&yaml(slow), 100) vs 0.7",
        shaping_gamma(&yaml(slow), 100),
        0.7,
        1e-12,
    );
}

/// `configs/ppo.yaml` schedules only PPO's γ (as the original's preset): the
/// shaping must fold with the γ GAE uses at that frame — 0.9925 at 6 M, 0.995
/// at 12 M — so that `Σ γ^t r'_t = Σ γ^t r_t − Φ(s_0)` (the potential terms
/// telescope). Folding with the fixed 0.99 breaks the identity.
#[test]
fn ppo_preset_rewards_telescope_with_the_gae_gamma() {
    let cfg = preset("ppo.yaml");
    let p = &cfg.ppo;
    for (frames, want) in [(6_000_000u64, 0.9925), (12_000_000, 0.995)] {
        let gae_gamma = scheduled_coefficient(p.gamma, &p.gamma_schedule, 1.0, frames);
        rulka_test_support::margin::close("gae_gamma vs want", gae_gamma, want, 1e-12);
        let gamma = shaping_gamma(&cfg, frames);
        assert_eq!(gamma, gae_gamma, "shaping γ at frame {frames}");

        // A 40-step rollout with zone centres 3..30 m away (Φ varies every step).
        let n = 40;
        let f = cfg.float_input_dim();
        let wp0 = rulka_config::float_layout(&cfg)
            .iter()
            .take_while(|(name, _)| *name != "zone_centers")
            .map(|(_, len)| len)
            .sum::<usize>();
        let mut floats = vec![0f32; n * f];
        for k in 0..n {
            let d = 3.0 + (k * 7 % 27) as f32;
            floats[k * f + wp0 + 2] = d;
            floats[k * f + wp0 + 5] = d + 10.0;
        }
        let meters: Vec<f32> = (0..n).map(|k| 1.5 * k as f32).collect();
        let actions = vec![0i32; n];
        let r = RolloutIngredients {
            floats: &floats,
            meters: &meters,
            actions: &actions,
            race_time_ms: None,
        };
        let (_, phi, dense) = dense_rewards(&cfg, r, EngineeredCoefs::default());
        let (folded, _) = rollout_rewards(&cfg, r, EngineeredCoefs::default(), gamma);
        let disc = |xs: &mut dyn Iterator<Item = f64>| {
            xs.enumerate().map(|(t, x)| gae_gamma.powi(t as i32) * x).sum::<f64>()
        };
        let lhs = disc(&mut folded.iter().map(|&x| f64::from(x)));
        let rhs = disc(&mut dense.iter().copied()) - phi[0];
        rulka_test_support::margin::close("lhs vs rhs", lhs, rhs, 1e-4);
        // The γ the old code folded with does not telescope at GAE's γ.
        let (old, _) = rollout_rewards(&cfg, r, EngineeredCoefs::default(), 0.99);
        let old_lhs = disc(&mut old.iter().map(|&x| f64::from(x)));
        assert!((old_lhs - rhs).abs() > 1e-2, "0.99 would telescope too: {old_lhs} vs {rhs}");
    }
}

fn zone_block(cfg: &Config) -> std::ops::Range<usize> {
    let mut at = 0;
    for (name, len) in rulka_config::float_layout(cfg) {
        if name == "zone_centers" {
            return at..at + len;
        }
        at += len;
    }
    unreachable!()
}

/// A fresh network for the game starts with the original's
/// `waypoint_mean_40cp` / `waypoint_std_40cp` (config_default.yaml); the
/// simulator keeps statistics fitted to its tracks.
#[test]
fn a_fresh_network_for_the_game_normalises_zones_as_the_original() {
    let mut cfg = preset("ppo.yaml");
    cfg.environment.kind = rulka_config::EnvKind::Tmi;
    let net = ActorCritic::new(&cfg, Device::Cpu, 0);
    let w = net.to_weights();
    let get = |name: &str| -> Vec<f32> { w.tensors[name].data.clone() };
    let (mean, std) = (get("float_inputs_mean"), get("float_inputs_std"));
    let z = zone_block(&cfg);
    assert_eq!(z, 142..262, "264 floats with 25 previous actions");
    // Hand-copied from the original's table: zone 0 and zone 39.
    assert_eq!(&mean[z.start..z.start + 3], &[0.0, -2.1, -0.2]);
    assert_eq!(&std[z.start..z.start + 3], &[7.7, 7.7, 2.9]);
    assert_eq!(&mean[z.end - 3..z.end], &[0.0, 11.5, 197.0]);
    assert_eq!(&std[z.end - 3..z.end], &[198.0, 198.0, 151.0]);
    assert_eq!(&mean[z.clone()], &ORIGINAL_WAYPOINT_MEAN_40CP[..]);
    assert_eq!(&std[z.clone()], &ORIGINAL_WAYPOINT_STD_40CP[..]);
    // The simulator's statistics differ in the zone block only.
    cfg.environment.kind = rulka_config::EnvKind::Sim;
    let (sim_mean, sim_std) = rulka_config::float_inputs_mean_std(&cfg);
    let differ = (0..mean.len())
        .filter(|&i| mean[i] != sim_mean[i] || std[i] != sim_std[i])
        .collect::<Vec<_>>();
    assert!(differ.iter().all(|i| z.contains(i)), "{differ:?}");
    assert!(differ.len() > 100, "{}", differ.len());
    // Fewer zones take the first ones; more tile the 40-zone block (the original's rule).
    cfg.environment.kind = rulka_config::EnvKind::Tmi;
    cfg.environment.n_zone_centers_in_inputs = 45;
    let (m45, _) = rulka_config::float_inputs_mean_std(&cfg);
    let z45 = zone_block(&cfg);
    assert_eq!(&m45[z45.start + 120..z45.start + 123], &[0.0, -2.1, -0.2], "zone 40 = zone 0");
    // A config can override them with the original's keys.
    let mut over = vec![1.0f64; 120];
    over[2] = 42.0;
    cfg.environment.n_zone_centers_in_inputs = 2;
    cfg.state_normalization.waypoint_mean_40cp = Some(over);
    let (m2, _) = rulka_config::float_inputs_mean_std(&cfg);
    let z2 = zone_block(&cfg);
    assert_eq!(&m2[z2], &[1.0, 1.0, 42.0, 1.0, 1.0, 1.0]);
}

fn tiny() -> &'static str {
    "nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\nenvironment: {n_zone_centers_in_inputs: 1, n_prev_actions_in_inputs: 0, n_contact_material_physics_behavior_types: 0}"
}

fn trajectory(cfg: &Config, steps: i64, reward: f32, group: u64, seed: i64) -> TrajBatch {
    tch::manual_seed(seed);
    let f = cfg.float_input_dim() as i64;
    TrajBatch {
        image: Tensor::randint(256, [steps, 1, 36, 36], (Kind::Int64, Device::Cpu))
            .to_kind(Kind::Uint8),
        floats: Tensor::randn([steps, f], (Kind::Float, Device::Cpu)),
        actions: Tensor::randint(12, [steps, 1], (Kind::Int64, Device::Cpu)),
        old_logp: Tensor::full([steps], -(12f64.ln()), (Kind::Float, Device::Cpu)),
        old_value: Tensor::zeros([steps], (Kind::Float, Device::Cpu)),
        rewards: vec![reward; steps as usize],
        group,
    }
}

/// The original takes the entropy (and reference-KL) step on a group whose
/// returns are all equal; `configs/grpo.yaml`, its preset, must too.
#[test]
fn grpo_preset_steps_on_a_zero_spread_group() {
    let mut cfg = preset("grpo.yaml");
    assert!(!cfg.grpo.filter_zero_std);
    let small = Config::from_yaml_str(tiny(), "t").unwrap();
    cfg.nn = small.nn;
    cfg.environment = small.environment;
    let mut l = Learner::new(&cfg, Device::Cpu, 1);
    let group = vec![trajectory(&cfg, 3, 0.5, 9, 1), trajectory(&cfg, 4, 0.375, 9, 2)];
    assert_eq!(group[0].rewards.iter().sum::<f32>(), group[1].rewards.iter().sum::<f32>());
    let before = l.network().to_weights();
    let s = l.grpo_update(&group).unwrap();
    assert_eq!(s.frac_zero_std, 0.0);
    assert_eq!(s.steps, u64::from(cfg.grpo.update_epochs), "one step per epoch");
    assert_ne!(l.network().to_weights(), before, "the entropy term moved the weights");
    // The filter stays available.
    cfg.grpo.filter_zero_std = true;
    let mut f = Learner::new(&cfg, Device::Cpu, 1);
    let s = f.grpo_update(&group).unwrap();
    assert_eq!((s.frac_zero_std, s.steps), (1.0, 0));
}

/// The original skips a DPO pair whose common length is below 2 steps.
#[test]
fn dpo_skips_pairs_shorter_than_two_steps() {
    let cfg =
        Config::from_yaml_str(&format!("{}\ntraining: {{algorithm: dpo}}", tiny()), "t").unwrap();
    let mut l = Learner::new(&cfg, Device::Cpu, 3);
    let before = l.network().to_weights();
    let short = (trajectory(&cfg, 1, 1.0, 0, 1), trajectory(&cfg, 5, 0.0, 0, 2));
    assert!(l.dpo_update(&[short]).unwrap().is_none());
    assert_eq!(l.updates, 0, "no update counted");
    assert_eq!(l.network().to_weights(), before, "no step taken");
    let pair = (trajectory(&cfg, 2, 1.0, 0, 3), trajectory(&cfg, 5, 0.0, 0, 4));
    let short = (trajectory(&cfg, 1, 1.0, 0, 1), trajectory(&cfg, 5, 0.0, 0, 2));
    let s = l.dpo_update(&[pair, short]).unwrap().expect("the 2-step pair is trained on");
    assert_eq!(s.steps, u64::from(cfg.dpo.update_epochs));
    assert_eq!(l.updates, 1);
    assert_ne!(l.network().to_weights(), before);
}

/// `training.global_schedule_speed` stretches every schedule's frame
/// counts, not the shaping γ's only: the learning rate's (exponential) and
/// the four engineered reward coefficients' (linear), each read at frame 100
/// of knots at 0 and 100 — at speed 2 halfway, at speed 1 at the end.
#[test]
fn global_schedule_speed_stretches_the_learning_rate_and_every_engineered_coefficient() {
    let schedules = "rewards: {engineered_speedslide_reward_schedule: [[0, 0], [100, 1]], \
        engineered_neoslide_reward_schedule: [[0, 0], [100, 2]], \
        engineered_kamikaze_reward_schedule: [[0, 0], [100, -4]], \
        engineered_close_to_vcp_reward_schedule: [[0, 0], [100, 8]]}\n";
    for (speed, f) in [(2.0, 0.5), (1.0, 1.0)] {
        let c = yaml(&format!(
            "training: {{global_schedule_speed: {speed}, lr_schedule: [[0, 1.0e-3], [100, 1.0e-5]]}}\n{schedules}"
        ));
        let e = EngineeredCoefs::at(&c, 100);
        for (name, got, end) in [
            ("speedslide", e.speedslide, 1.0),
            ("neoslide", e.neoslide, 2.0),
            ("kamikaze", e.kamikaze, -4.0),
            ("close_to_vcp", e.close_to_vcp, 8.0),
        ] {
            // Linear interpolation in f64 of values of size ≤ 8: a few ulps.
            rulka_test_support::margin::close(
                &format!("{name} at frame 100, speed {speed}"),
                got,
                end * f,
                1e-12,
            );
        }
        let mut l = Learner::new(&c, Device::Cpu, 0);
        l.frames = 100;
        // 1e-3 · (1e-5 / 1e-3)^f: 1e-4 halfway, 1e-5 at the end (f64 exp/ln: ulps).
        rulka_test_support::margin::close(
            &format!("learning rate at frame 100, speed {speed}"),
            l.lr(),
            1.0e-3 * 0.01f64.powf(f),
            1e-15,
        );
    }
}
