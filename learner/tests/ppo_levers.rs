//! The learning-per-frame levers of PPO (issue 61) reach the update the
//! trainer calls, each checked against an independent reference:
//! `ppo.target_kl` stops an update after the epoch that passed it,
//! `ppo.normalize_returns` scales the rewards by the running standard
//! deviation of the discounted returns computed here by hand (and the
//! statistic survives a resume), `training.augment.shift_px` trains on
//! shifted frames (RAD) or, with `ppo.drac_coef`, keeps the objective on
//! the frames as seen and adds DrAC's regulariser, whose value is checked
//! by hand.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::{drac_penalty, Learner, TrajBatch};
use rulka_test_support::margin;
use tch::{Device, Kind, Tensor};

fn cfg(extra: &str) -> Config {
    Config::from_yaml_str(
        &format!(
            "nn: {{image_width: 36, image_height: 36, float_hidden_dim: 8, dense_hidden_dim: 16}}\n\
             environment: {{n_zone_centers_in_inputs: 1, n_prev_actions_in_inputs: 0, n_contact_material_physics_behavior_types: 0}}\n\
             {extra}"
        ),
        "t",
    )
    .unwrap()
}

/// A deterministic trajectory with the given rewards (index arithmetic, no
/// RNG); frames of `constant` when given, else a pattern that a shift moves.
fn traj(cfg: &Config, rewards: &[f32], k: i64, constant: Option<u8>) -> TrajBatch {
    let n = rewards.len() as i64;
    let f = cfg.float_input_dim() as i64;
    let image = match constant {
        Some(c) => Tensor::full([n, 1, 36, 36], i64::from(c), (Kind::Uint8, Device::Cpu)),
        None => (Tensor::arange(n * 36 * 36, (Kind::Int64, Device::Cpu)) * (k + 2))
            .remainder(251)
            .to_kind(Kind::Uint8)
            .reshape([n, 1, 36, 36]),
    };
    TrajBatch {
        image,
        floats: (Tensor::arange(n * f, (Kind::Float, Device::Cpu)).reshape([n, f]) * 0.03
            + k as f64)
            .sin(),
        actions: (Tensor::arange(n, (Kind::Int64, Device::Cpu)) * (k + 1))
            .remainder(12)
            .reshape([n, 1]),
        old_logp: Tensor::full([n], -2.4, (Kind::Float, Device::Cpu)),
        old_value: Tensor::zeros([n], (Kind::Float, Device::Cpu)),
        rewards: rewards.to_vec(),
        group: 0,
    }
}

fn rollouts(c: &Config, constant: Option<u8>) -> Vec<TrajBatch> {
    vec![
        traj(c, &[1.0, -1.0, 2.0, 0.5, 0.0, -0.5, 1.5, 1.0], 1, constant),
        traj(c, &[0.5, 0.5, -2.0, 1.0, 0.25, 0.0, 2.0], 2, constant),
    ]
}

/// The largest absolute difference between two networks' parameters.
fn max_diff(a: &Learner, b: &Learner) -> f64 {
    let (a, b) = (a.network().to_weights(), b.network().to_weights());
    let mut m = 0f64;
    for (name, t) in &a.tensors {
        for (x, y) in t.data.iter().zip(&b.tensors[name].data) {
            m = m.max(f64::from((x - y).abs()));
        }
    }
    m
}

const BASE: &str = "training: {algorithm: ppo, optimizer: radam, lr_schedule: [[0, 1.0e-3]]";

#[test]
fn target_kl_stops_an_update_after_the_epoch_that_passed_it() {
    tch::set_num_threads(margin::threads() as i32);
    let run = |target: &str| {
        let c = cfg(&format!("{BASE}}}\nppo: {{update_epochs: 6, num_minibatches: 3{target}}}"));
        let mut l = Learner::new(&c, Device::Cpu, 3);
        l.ppo_update(&rollouts(&c, None)).unwrap()
    };
    let all = run("");
    assert_eq!((all.epochs, all.steps), (6, 18), "no target: every epoch");
    // The collectors' log-probs (−2.4) are not the network's (≈ −ln 12 =
    // −2.48): the first epoch's mean approximate KL is above 1e-12 …
    assert!(all.approx_kl > 1e-6, "{}", all.approx_kl);
    let stopped = run(", target_kl: 1.0e-12");
    assert_eq!(
        (stopped.epochs, stopped.steps),
        (1, 3),
        "stops after the first epoch, not before it"
    );
    // … and far below 1e9: a target that is never reached changes nothing.
    let never = run(", target_kl: 1.0e9");
    assert_eq!(never, all);
}

/// `G_t = r_t + γ·G_{t−1}` per rollout, by hand.
fn returns_by_hand(rollouts: &[&[f32]], gamma: f64) -> Vec<f64> {
    let mut out = vec![];
    for r in rollouts {
        let mut g = 0.0;
        for &x in *r {
            g = f64::from(x) + gamma * g;
            out.push(g);
        }
    }
    out
}

fn population_var(xs: &[f64]) -> f64 {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64
}

#[test]
fn normalize_returns_scales_rewards_by_the_running_std_of_the_returns_and_resumes_it() {
    tch::set_num_threads(margin::threads() as i32);
    // Values 0, λ = 1, no advantage normalisation: each advantage is the
    // discounted reward-to-go, linear in the rewards, so the advantages'
    // variance scales by the square of what the rewards were multiplied by.
    let knobs = |on: bool| {
        cfg(&format!(
            "{BASE}}}\nppo: {{gamma: 0.9, gae_lambda: 1.0, normalize_advantages: false, update_epochs: 1, num_minibatches: 1, normalize_returns: {on}}}"
        ))
    };
    let (off_c, on_c) = (knobs(false), knobs(true));
    let first = rollouts(&on_c, None);
    let second = vec![traj(&on_c, &[3.0, 0.0, -1.0, 2.0, 2.0], 3, None)];
    let mut off = Learner::new(&off_c, Device::Cpu, 3);
    let mut on = Learner::new(&on_c, Device::Cpu, 3);
    let s_off = off.ppo_update(&first).unwrap();
    let s_on = on.ppo_update(&first).unwrap();
    let r: Vec<&[f32]> = first.iter().map(|t| t.rewards.as_slice()).collect();
    let var1 = population_var(&returns_by_hand(&r, 0.9));
    let scale1 = 1.0 / (var1 + 1e-8).sqrt();
    assert_eq!(s_off.reward_scale, 1.0);
    // The scale is f64 arithmetic on 15 returns: 1e-12 relative.
    margin::close("first update's reward scale", s_on.reward_scale, scale1, 1e-12 * scale1);
    // GAE in f32 over ≤ 8 steps: relative error ~1e-6 on each advantage,
    // 1e-5 on their variance's ratio.
    margin::close(
        "advantage variance ratio, on ÷ off",
        s_on.adv_var / s_off.adv_var,
        scale1 * scale1,
        1e-5 * scale1 * scale1,
    );
    // The statistic is a running one over both batches (not the last
    // batch's), and it is saved with the learner.
    let dir = tempfile::tempdir().unwrap();
    on.save_state(dir.path()).unwrap();
    let mut resumed = Learner::resume(&on_c, dir.path(), Device::Cpu).unwrap();
    let s2 = on.ppo_update(&second).unwrap();
    let s2_resumed = resumed.ppo_update(&second).unwrap();
    let mut all = r.clone();
    all.push(&second[0].rewards);
    let scale2 = 1.0 / (population_var(&returns_by_hand(&all, 0.9)) + 1e-8).sqrt();
    let last_only = 1.0 / (population_var(&returns_by_hand(&all[2..], 0.9)) + 1e-8).sqrt();
    assert!((scale2 - last_only).abs() > 0.05 * scale2, "the check needs the two to differ");
    margin::close("second update's reward scale", s2.reward_scale, scale2, 1e-12 * scale2);
    assert_eq!(s2_resumed.reward_scale.to_bits(), s2.reward_scale.to_bits(), "resumed");
}

#[test]
fn a_shift_trains_on_shifted_frames_and_drac_keeps_the_objective_on_the_frames_as_seen() {
    tch::set_num_threads(margin::threads() as i32);
    let run = |augment: &str, ppo: &str, constant: Option<u8>| {
        let c = cfg(&format!(
            "{BASE}, augment: {{shift_px: {augment}}}}}\nppo: {{update_epochs: 2, num_minibatches: 2{ppo}}}"
        ));
        let mut l = Learner::new(&c, Device::Cpu, 5);
        let s = l.ppo_update(&rollouts(&c, constant)).unwrap();
        (l, s)
    };
    // Frames of one value: a shift that repeats the edge changes nothing,
    // and drawing the shifts leaves the second epoch's shuffle as it was.
    let (plain, _) = run("0", "", Some(90));
    let (rad, _) = run("4", "", Some(90));
    assert_eq!(max_diff(&plain, &rad), 0.0, "a shift of uniform frames changed the update");
    // Frames with a pattern: RAD's update differs from the plain one.
    let (plain, s_plain) = run("0", "", None);
    let (rad, s_rad) = run("4", "", None);
    // RAdam's first steps are lr·m̂ (no adaptive denominator): four steps
    // of 1e-3 with gradients that differ in their inputs move some
    // parameter by well over 1e-6.
    margin::at_least("RAD vs plain: largest parameter difference", max_diff(&plain, &rad), 1e-6);
    // The sampler delta is measured on the frames as seen, shift or not.
    margin::close(
        "sampler delta, RAD vs plain",
        s_rad.sampler_logp_delta,
        s_plain.sampler_logp_delta,
        1e-6,
    );
    // DrAC with a negligible coefficient is the plain update (its
    // objective is on the frames as seen) up to the regulariser's share:
    // 4 steps · lr 1e-3 · 1e-9 · |∇| plus a float rounding of the weights
    // (|w| < 1: 1.2e-7), well under 1e-6.
    let (drac_tiny, s_tiny) = run("4", ", drac_coef: 1.0e-9", None);
    margin::at_most("DrAC(1e-9) vs plain", max_diff(&plain, &drac_tiny), 1e-6);
    let (drac, s_drac) = run("4", ", drac_coef: 1.0e4", None);
    // A coefficient of 1e4 makes the regulariser (≈1e-6 on an untrained
    // network, whose output hardly depends on the pixels) move the weights.
    margin::at_least("DrAC(1e4) vs DrAC(1e-9)", max_diff(&drac, &drac_tiny), 1e-6);
    assert_eq!(s_plain.drac, 0.0);
    assert!(s_tiny.drac > 0.0 && s_drac.drac > 0.0, "{} {}", s_tiny.drac, s_drac.drac);
    // One step from the same weights on the same shifts: the losses differ
    // by the coefficients' difference times the regulariser reported.
    let one = |coef: f64| {
        let c = cfg(&format!(
            "{BASE}, augment: {{shift_px: 4}}}}\nppo: {{update_epochs: 1, num_minibatches: 1, drac_coef: {coef}}}"
        ));
        Learner::new(&c, Device::Cpu, 5).ppo_update(&rollouts(&c, None)).unwrap()
    };
    let (big, tiny) = (one(1.0e4), one(1.0e-9));
    assert_eq!(big.drac.to_bits(), tiny.drac.to_bits(), "same weights, same shifts");
    // f32 losses of ~1.2 (ulp 1.2e-7) and a regulariser term of ~1e-2.
    margin::close(
        "loss(DrAC 1e4) − loss(DrAC 1e-9)",
        big.loss - tiny.loss,
        (1.0e4 - 1.0e-9) * big.drac,
        1e-6,
    );
}

/// Two heads of two actions: policy on the frames as seen (1/3, 2/3) and
/// (1/2, 1/2), on the shifted ones (1/2, 1/2) and (3/4, 1/4); values 0.5
/// and 1.5.
#[test]
fn drac_penalty_by_hand() {
    let seen =
        Tensor::from_slice(&[0.0f32, 2f32.ln(), 0.0, 0.0]).view([1, 4]).set_requires_grad(true);
    let shifted =
        Tensor::from_slice(&[0.0f32, 0.0, 3f32.ln(), 0.0]).view([1, 4]).set_requires_grad(true);
    let (v, v_shifted) = (
        Tensor::from_slice(&[0.5f32]).set_requires_grad(true),
        Tensor::from_slice(&[1.5f32]).set_requires_grad(true),
    );
    let p = drac_penalty(&seen, &v, &shifted, &v_shifted, 2);
    let kl1 = (1.0 / 3.0) * (2.0f64 / 3.0).ln() + (2.0 / 3.0) * (4.0f64 / 3.0).ln();
    let kl2 = 0.5 * (2.0f64 / 3.0).ln() + 0.5 * 2.0f64.ln();
    let want = kl1 + kl2 + 1.0;
    // f32 log-softmax of values ≤ ln 3: ~1e-7 relative per term.
    margin::close("drac_penalty", p.double_value(&[]), want, 1e-6);
    p.backward();
    // The frames as seen are the fixed target: no gradient reaches them.
    assert!(!seen.grad().defined() || seen.grad().abs().sum(Kind::Float).double_value(&[]) == 0.0);
    assert!(!v.grad().defined() || v.grad().abs().sum(Kind::Float).double_value(&[]) == 0.0);
    // d/dV_shifted (V_s − V)² = 2 · 1.
    margin::close("value gap gradient", v_shifted.grad().double_value(&[0]), 2.0, 1e-6);
    // d KL(p‖softmax(z))/dz = softmax(z) − p, per head.
    let g = Vec::<f32>::try_from(shifted.grad().view([-1])).unwrap();
    let want_g = [0.5 - 1.0 / 3.0, 0.5 - 2.0 / 3.0, 0.75 - 0.5, 0.25 - 0.5];
    for (i, (g, w)) in g.iter().zip(want_g).enumerate() {
        margin::close(&format!("shifted logit {i} gradient"), f64::from(*g), w, 1e-6);
    }
}
