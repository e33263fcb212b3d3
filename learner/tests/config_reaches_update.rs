//! The config's coefficients reach the update the trainer calls (`ppo_update`,
//! `dpo_update`), not only the loss and optimiser functions a test calls
//! with explicit arguments: `ppo.max_grad_norm` clips the step it takes, and
//! `dpo.beta_schedule`'s value at the update's frames is the β its loss
//! uses and the one it reports (TensorBoard's `DPO/beta`).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::{Learner, TrajBatch};
use tch::{Device, Kind, Tensor};

mod common;
use common::cfg;

/// A deterministic trajectory of `n` steps (index arithmetic, no RNG).
fn traj(cfg: &Config, n: i64, k: i64) -> TrajBatch {
    let f = cfg.float_input_dim() as i64;
    TrajBatch {
        image: (Tensor::arange(n * 36 * 36, (Kind::Int64, Device::Cpu)) * (k + 2))
            .remainder(256)
            .to_kind(Kind::Uint8)
            .reshape([n, 1, 36, 36]),
        floats: (Tensor::arange(n * f, (Kind::Float, Device::Cpu)).reshape([n, f]) * 0.03
            + k as f64)
            .sin(),
        actions: (Tensor::arange(n, (Kind::Int64, Device::Cpu)) * (k + 1))
            .remainder(12)
            .reshape([n, 1]),
        old_logp: Tensor::full([n], -2.4, (Kind::Float, Device::Cpu)),
        old_value: Tensor::full([n], 0.5 * k as f64, (Kind::Float, Device::Cpu)),
        rewards: (0..n).map(|s| ((s + k) % 3) as f32 - 1.0).collect(),
        group: 0,
    }
}

/// The largest absolute change of any parameter between two weight sets.
fn max_change(l: &Learner, before: &rulka_checkpoint::Weights) -> f32 {
    let after = l.network().to_weights();
    let mut m = 0f32;
    for (name, t) in &after.tensors {
        for (a, b) in t.data.iter().zip(&before.tensors[name].data) {
            m = m.max((a - b).abs());
        }
    }
    m
}

#[test]
fn ppo_max_grad_norm_from_the_config_clips_the_step_an_update_takes() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let run = |max_grad_norm: f64| {
        let c = cfg(&format!(
            "training: {{algorithm: ppo, optimizer: adam, adam_epsilon: 1.0e-8, lr_schedule: [[0, 1.0e-3]]}}\nppo: {{update_epochs: 1, num_minibatches: 1, max_grad_norm: {max_grad_norm}}}"
        ));
        let mut l = Learner::new(&c, Device::Cpu, 11);
        let before = l.network().to_weights();
        let s = l.ppo_update(&[traj(&c, 6, 1), traj(&c, 5, 2)]).unwrap();
        (max_change(&l, &before), s.grad_norm, s.steps)
    };
    let (free, norm_free, steps) = run(1.0e9);
    let (clipped, norm_clipped, _) = run(1.0e-12);
    assert_eq!(steps, 1);
    // The norm reported is the gradient's before clipping: the same in both.
    assert!(norm_free > 1e-6, "{norm_free}");
    rulka_test_support::margin::close(
        "norm_free vs norm_clipped",
        norm_free,
        norm_clipped,
        1e-9 * norm_free,
    );
    // Unclipped, Adam's first step moves some parameter by about the learning
    // rate (1e-3: lr·g/(|g| + eps) for the largest |g| ≫ eps = 1e-8); a
    // gradient clipped to a norm of 1e-12 moves none by more than
    // lr · 1e-12 / eps = 1e-7. The line between them, 1e-5, is 100× from
    // either: a clip ignored, or applied to the free run, lands 100× past it.
    rulka_test_support::margin::at_least("unclipped step's largest move", free.into(), 1e-5);
    rulka_test_support::margin::at_most("clipped step's largest move", clipped.into(), 1e-5);
}

#[test]
fn the_dpo_beta_schedules_value_at_the_updates_frames_is_the_beta_its_loss_uses() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let pairs = |c: &Config| vec![(traj(c, 5, 1), traj(c, 4, 3)), (traj(c, 3, 2), traj(c, 6, 5))];
    let run = |dpo: &str| {
        let c = cfg(&format!("training: {{algorithm: dpo}}\ndpo: {{update_epochs: 3, {dpo}}}"));
        let mut l = Learner::new(&c, Device::Cpu, 5);
        l.frames = 500;
        let s = l.dpo_update(&pairs(&c)).unwrap().unwrap();
        (l.network().to_weights(), s)
    };
    // 0.25 at frame 0, 0.75 at frame 1000: 0.5 at frame 500 (exactly).
    let (scheduled, s) = run("beta: 0.1, beta_schedule: [[0, 0.25], [1000, 0.75]]");
    let (fixed_half, s_half) = run("beta: 0.5");
    let (fixed_start, _) = run("beta: 0.25");
    assert_eq!(s.beta, 0.5, "the β the update reports");
    assert_eq!(s_half.beta, 0.5);
    assert_eq!(s.loss.to_bits(), s_half.loss.to_bits(), "{} vs {}", s.loss, s_half.loss);
    assert!(scheduled == fixed_half, "the scheduled β (0.5) trained differently from β = 0.5");
    assert!(scheduled != fixed_start, "β = 0.25 trains as 0.5 does: β never reached the loss");
}

/// GRPO's statistics by hand and by an independent evaluation: returns
/// −1, 0, 1, −1 (rewards `(s + k) % 3 − 1` over 4 steps) give advantages
/// −0.75, 0.25, 1.25, −0.75 (`normalize_group: mean`) of variance 0.6875;
/// the reference KL (`ref_kl_coef`) is 0 and adds nothing to the loss on the
/// first epoch (the reference was just synced from the policy), and over two
/// epochs it is the mean per-step `log π − log π_ref` of the second epoch's
/// policy, halved — measured here on a learner that stopped after one epoch.
#[test]
fn grpo_reports_its_advantage_variance_and_reference_kl_by_hand() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let yaml = |kl: f64, epochs: u32| {
        format!("grpo: {{objective: reinforce, ref_kl_coef: {kl}, update_epochs: {epochs}}}")
    };
    let run = |kl: f64, epochs: u32| {
        let c = cfg(&yaml(kl, epochs));
        let group: Vec<TrajBatch> = (0..4).map(|k| traj(&c, 4, k)).collect();
        let mut l = Learner::new(&c, Device::Cpu, 7);
        let stats = l.grpo_update(&group).unwrap();
        (l, stats, group)
    };
    let (_, plain, _) = run(0.0, 1);
    rulka_test_support::margin::close("plain.adv_var vs 0.6875", plain.adv_var, 0.6875, 1e-12);
    let (one, with_kl, group) = run(0.3, 1);
    assert_eq!(with_kl.kl_ref, 0.0);
    rulka_test_support::margin::close("with_kl.loss vs plain.loss", with_kl.loss, plain.loss, 1e-9);
    // The second epoch's policy is the one-epoch learner's network.
    let reference = one.reference().expect("a reference with ref_kl_coef > 0");
    let (mut sum, mut magnitude, mut n) = (0.0, 0.0, 0);
    for t in &group {
        let lp = one.network().evaluate_actions(&t.image, &t.floats, &t.actions).log_prob;
        let lr = reference.evaluate_actions(&t.image, &t.floats, &t.actions).log_prob;
        sum += (&lp - &lr).sum(Kind::Double).double_value(&[]);
        magnitude += (lp.abs() + lr.abs()).sum(Kind::Double).double_value(&[]);
        n += t.len();
    }
    let expected = sum / n as f64 / 2.0;
    let (_, two, _) = run(0.3, 2);
    assert!(expected.abs() > 1e-6, "the first step moved the policy: {expected}");
    // The error of float32 log-probabilities, not of the KL: kl_ref is
    // ½·mean_t(log π_t − log π_ref,t) over n = 16 steps, each log-probability
    // a float32 log-softmax output of size |lp| ≈ 2.5 (12 near-uniform
    // actions). This test evaluates them per trajectory, the learner on the
    // group concatenated: other batch shapes, other reduction orders in the
    // convolutions and matrix products, so each log-probability may come
    // out a few roundings of its own size apart (measured: at most 1 ulp on
    // every CPU path and thread count of scripts/sweep; allowed: 4 ulps
    // ≤ 4ε|lp|, ε = 2⁻²³). Per step that is 4ε(|lp| + |lr|); halved and
    // averaged, 2ε·mean_t(|lp| + |lr|) ≈ 1.2e-6, 3.6 % of the KL. The
    // learner's float32 sums of 16 differences of size 1e-4 add ~1e-12; its
    // first epoch's term is exactly 0 (one micro-batch, the reference just
    // synced: asserted above). A KL not halved, of another sign, or a mean
    // over n + 1 steps is off by 6 % or more.
    let bound = 2.0 * f64::from(f32::EPSILON) * magnitude / n as f64;
    rulka_test_support::margin::close("GRPO kl_ref by hand", two.kl_ref, expected, bound);
}

/// What an update reports is what it used: the learning rate of the
/// schedule at its frames (PPO, GRPO, DPO), and for PPO the variance of its
/// GAE advantages before normalisation, computed here by hand (γ = 0.9,
/// λ = 0.8, each rollout ending in a terminal step).
#[test]
fn updates_report_the_learning_rate_and_advantage_variance_they_used() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let c = cfg(
        "training: {lr_schedule: [[0, 2.0e-4]]}\nppo: {gamma: 0.9, gae_lambda: 0.8, update_epochs: 1, num_minibatches: 1}\ngrpo: {update_epochs: 1}\ndpo: {update_epochs: 1}",
    );
    let rollouts = [traj(&c, 6, 1), traj(&c, 5, 2)];
    let mut adv = Vec::new();
    for r in &rollouts {
        let v = 0.5 * if r.len() == 6 { 1.0 } else { 2.0 };
        let mut a = vec![0.0f64; r.len()];
        let mut next = 0.0;
        for t in (0..r.len()).rev() {
            let next_v = if t + 1 < r.len() { v } else { 0.0 };
            let delta = f64::from(r.rewards[t]) + 0.9 * next_v - v;
            next = delta + 0.9 * 0.8 * if t + 1 < r.len() { next } else { 0.0 };
            a[t] = next;
        }
        adv.extend(a);
    }
    let mean = adv.iter().sum::<f64>() / adv.len() as f64;
    let var = adv.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / adv.len() as f64;
    let mut l = Learner::new(&c, Device::Cpu, 3);
    let s = l.ppo_update(&rollouts).unwrap();
    rulka_test_support::margin::close("s.adv_var vs var", s.adv_var, var, 1e-5 * var.max(1e-3));
    rulka_test_support::margin::close("s.lr vs 2.0e-4", s.lr, 2.0e-4, 1e-12);
    let g = l.grpo_update(&[traj(&c, 4, 0), traj(&c, 4, 1), traj(&c, 4, 2)]).unwrap();
    rulka_test_support::margin::close("g.lr vs 2.0e-4", g.lr, 2.0e-4, 1e-12);
    let d = l.dpo_update(&[(traj(&c, 4, 0), traj(&c, 4, 1))]).unwrap().unwrap();
    rulka_test_support::margin::close("d.lr vs 2.0e-4", d.lr, 2.0e-4, 1e-12);
}

/// DPO's loss on its first epoch, by hand: the reference was just synced
/// from the policy, so the preference term is −log σ(0) = ln 2; the value
/// head's auxiliary term is `vf_coef · (mean (v_w − v̂_w)² + mean (v_l − v̂_l)²)`
/// with the values the network gives before its step and the collectors'
/// values `v̂` (0.5 and 1.0 here), over the pair's common 4 steps.
#[test]
fn the_dpo_loss_is_the_preference_term_plus_the_value_heads_by_hand() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let c = cfg("dpo: {update_epochs: 1, vf_coef: 0.7, loss: sigmoid}");
    let (w, l) = (traj(&c, 4, 1), traj(&c, 6, 2));
    let mut learner = Learner::new(&c, Device::Cpu, 5);
    let value_term = |t: &TrajBatch, target: f64| {
        let cut = |x: &Tensor| x.narrow(0, 0, 4);
        let v = learner
            .network()
            .evaluate_actions(&cut(&t.image), &cut(&t.floats), &cut(&t.actions))
            .value;
        Vec::<f32>::try_from(&v)
            .unwrap()
            .iter()
            .map(|&x| (f64::from(x) - target).powi(2))
            .sum::<f64>()
            / 4.0
    };
    let expected = std::f64::consts::LN_2 + 0.7 * (value_term(&w, 0.5) + value_term(&l, 1.0));
    let s = learner.dpo_update(&[(w, l)]).unwrap().unwrap();
    assert_eq!(s.steps, 1);
    rulka_test_support::margin::close("s.loss vs expected", s.loss, expected, 1e-5);
}

/// Every algorithm's gradient clip reaches its optimiser step, and a
/// schedule wins over the fixed value (GRPO and DPO): a clip of 1e-12
/// moves no parameter by more than lr · 1e-12 / eps = 1e-7 on Adam's first
/// step, a free one some by about lr = 1e-3 (the line, 1e-5, 100× from
/// either, as in the PPO test above).
#[test]
fn grpo_and_dpo_clip_with_their_own_max_grad_norm_and_its_schedule_wins() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let run = |algo: &str, clip: &str| {
        let c = cfg(&format!(
            "training: {{algorithm: {algo}, optimizer: adam, adam_epsilon: 1.0e-8, lr_schedule: [[0, 1.0e-3]]}}\n\
             ppo: {{max_grad_norm: 1.0e9}}\n{algo}: {{update_epochs: 1, {clip}}}"
        ));
        let mut l = Learner::new(&c, Device::Cpu, 11);
        l.frames = 500;
        let before = l.network().to_weights();
        match algo {
            "grpo" => {
                let s = l.grpo_update(&[traj(&c, 4, 0), traj(&c, 4, 1), traj(&c, 4, 2)]).unwrap();
                assert!(s.steps >= 1, "{algo}: {s:?}");
            }
            _ => {
                l.dpo_update(&[(traj(&c, 4, 0), traj(&c, 4, 1))]).unwrap().unwrap();
            }
        }
        f64::from(max_change(&l, &before))
    };
    for algo in ["grpo", "dpo"] {
        let m = rulka_test_support::margin::at_least;
        let n = rulka_test_support::margin::at_most;
        m(&format!("{algo}: free"), run(algo, "max_grad_norm: 1.0e9"), 1e-5);
        n(&format!("{algo}: clipped"), run(algo, "max_grad_norm: 1.0e-12"), 1e-5);
        // The schedule's value at the update's frames (500), not the fixed one.
        n(
            &format!("{algo}: a clipping schedule over a free value"),
            run(
                algo,
                "max_grad_norm: 1.0e9, max_grad_norm_schedule: [[0, 1.0e-12], [1000, 1.0e-12]]",
            ),
            1e-5,
        );
        m(
            &format!("{algo}: a free schedule over a clipping value"),
            run(
                algo,
                "max_grad_norm: 1.0e-12, max_grad_norm_schedule: [[0, 1.0e9], [1000, 1.0e9]]",
            ),
            1e-5,
        );
    }
    // GRPO schedules its clip at the group's anchor (the frames before its
    // first trajectory), as its other coefficients: clipping up to frame
    // 1000, free from 2000; the learner at 5000, the group anchored at 500.
    let c = cfg("training: {algorithm: grpo, optimizer: adam, adam_epsilon: 1.0e-8, lr_schedule: [[0, 1.0e-3]]}\n\
         grpo: {update_epochs: 1, max_grad_norm: 1.0e9, max_grad_norm_schedule: [[0, 1.0e-12], [1000, 1.0e-12], [2000, 1.0e9]]}");
    let mut l = Learner::new(&c, Device::Cpu, 11);
    l.frames = 5000;
    let before = l.network().to_weights();
    l.grpo_update_at(&[traj(&c, 4, 0), traj(&c, 4, 1), traj(&c, 4, 2)], 500).unwrap();
    rulka_test_support::margin::at_most(
        "grpo: the clip at the group's anchor, not at the learner's frames",
        f64::from(max_change(&l, &before)),
        1e-5,
    );
}
