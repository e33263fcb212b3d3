//! The learning-per-frame levers of PPO (issue 61) reach the update the
//! trainer calls, each checked against an independent reference:
//! `ppo.target_kl` stops an update after the epoch that passed it,
//! `ppo.normalize_returns` scales the rewards by the running standard
//! deviation of the discounted returns computed here by hand (and the
//! statistic survives a resume), `training.augment.shift_px` trains on
//! shifted frames (RAD) or, with `ppo.drac_coef`, keeps the objective on
//! the frames as seen and adds DrAC's regulariser, whose value is checked
//! by hand; `ppo.aux_every_updates` ends every N-th update with PPG's
//! auxiliary phase, which regresses the value on the discounted returns
//! computed here by hand while its KL term holds the policy;
//! `ppo.popart_beta` standardises the value targets by running moments
//! checked by hand, which makes an update the same in any units of the
//! returns.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::{aux_loss, drac_penalty, Learner, TrajBatch};
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

/// `batch` with each reward `r` replaced by `f(r)`.
fn with_rewards(batch: Vec<TrajBatch>, f: impl Fn(f32) -> f32) -> Vec<TrajBatch> {
    batch
        .into_iter()
        .map(|mut t| {
            t.rewards.iter_mut().for_each(|r| *r = f(*r));
            t
        })
        .collect()
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

/// PPG's auxiliary phase: none after update 1 of 2, one after update 2 on
/// both updates' states (3 epochs × 30 states ÷ minibatches of 5 = 18
/// steps), then none, then one again: the kept states are forgotten.
/// Until the phase, the update is the plain one, bit for bit.
#[test]
fn the_aux_phase_ends_every_nth_update_on_the_states_kept_since_the_last() {
    tch::set_num_threads(margin::threads() as i32);
    let c =
        |aux: &str| cfg(&format!("{BASE}}}\nppo: {{update_epochs: 2, num_minibatches: 2{aux}}}"));
    let (plain_c, aux_c) = (c(""), c(", aux_every_updates: 2, aux_epochs: 3"));
    let mut plain = Learner::new(&plain_c, Device::Cpu, 7);
    let mut aux = Learner::new(&aux_c, Device::Cpu, 7);
    let batch = rollouts(&aux_c, None);
    let (p1, a1) = (plain.ppo_update(&batch).unwrap(), aux.ppo_update(&batch).unwrap());
    assert_eq!(a1, p1, "no phase after the first of two updates");
    assert_eq!(max_diff(&plain, &aux), 0.0);
    let a2 = aux.ppo_update(&batch).unwrap();
    let p2 = plain.ppo_update(&batch).unwrap();
    assert_eq!((p2.aux_steps, a2.aux_steps), (0, 15), "3 epochs of 30 states in sevens");
    assert_eq!(a2.steps, p2.steps, "the phase's steps are its own");
    margin::at_least(
        "aux phase vs none: largest parameter difference",
        max_diff(&plain, &aux),
        1e-6,
    );
    assert!(a2.aux_value_loss > 0.0 && a2.aux_kl >= 0.0, "{a2:?}");
    let steps: Vec<u64> = (0..2).map(|_| aux.ppo_update(&batch).unwrap().aux_steps).collect();
    assert_eq!(steps, [0, 15], "updates 3 and 4: the phase's states start afresh after it");
}

/// Each trajectory's discounted rewards-to-go `Σ_k γ^k r_{t+k}`, by hand:
/// the value targets of GAE with λ = 1 whatever the collectors' values.
fn rewards_to_go(batch: &[TrajBatch], gamma: f64) -> Vec<f64> {
    let mut targets = vec![];
    for t in batch {
        let mut to_go = vec![0.0; t.rewards.len()];
        let mut g = 0.0;
        for (i, &r) in t.rewards.iter().enumerate().rev() {
            g = f64::from(r) + gamma * g;
            to_go[i] = g;
        }
        targets.extend(to_go);
    }
    targets
}

/// `0.5·mean((V − R)²)` over the batch, R the discounted returns by hand.
fn value_mse(l: &Learner, batch: &[TrajBatch], targets: &[f64]) -> f64 {
    let image = Tensor::cat(&batch.iter().map(|t| &t.image).collect::<Vec<_>>(), 0);
    let floats = Tensor::cat(&batch.iter().map(|t| &t.floats).collect::<Vec<_>>(), 0);
    let (_, v) = tch::no_grad(|| l.network().forward(&image, &floats));
    let v = Vec::<f32>::try_from(v.view([-1])).unwrap();
    v.iter().zip(targets).map(|(v, r)| 0.5 * (f64::from(*v) - r).powi(2)).sum::<f64>()
        / targets.len() as f64
}

/// Mean over the batch of the exact KL, summed over the heads, from `a`'s
/// policy to `b`'s.
fn policy_kl(a: &Learner, b: &Learner, batch: &[TrajBatch]) -> f64 {
    let image = Tensor::cat(&batch.iter().map(|t| &t.image).collect::<Vec<_>>(), 0);
    let floats = Tensor::cat(&batch.iter().map(|t| &t.floats).collect::<Vec<_>>(), 0);
    let logp = |l: &Learner| {
        let (logits, _) = tch::no_grad(|| l.network().forward(&image, &floats));
        logits.view([logits.size()[0], 1, -1]).log_softmax(-1, Kind::Float)
    };
    let (p, q) = (logp(a), logp(b));
    (p.exp() * (&p - &q))
        .sum_dim_intlist([-1i64, -2].as_slice(), false, Kind::Float)
        .mean(Kind::Float)
        .double_value(&[])
}

/// The phase's targets are the update's value targets: with the collectors'
/// values 0 and λ = 1 those are the discounted rewards-to-go, computed here
/// by hand, and the phase brings the value closer to them than the same
/// update without it. Its KL term holds the policy where the phase found it
/// (the plain twin's): a large weight keeps it closer than none.
#[test]
fn the_aux_phase_regresses_the_value_on_the_returns_and_its_kl_holds_the_policy() {
    tch::set_num_threads(margin::threads() as i32);
    // Adam, a step of 5e-3: each of the phase's steps moves every weight by
    // about the step, so its 40 steps move the value by a large fraction
    // of the targets' spread (RAdam's first steps, un-normalised and on a
    // gradient clipped to 0.5, hardly would).
    let base = BASE.replace("1.0e-3", "5.0e-3").replace("radam", "adam");
    let c = |aux: &str| {
        cfg(&format!(
            "{base}}}\nppo: {{gamma: 0.9, gae_lambda: 1.0, update_epochs: 1, num_minibatches: 1{aux}}}"
        ))
    };
    let batch = rollouts(&c(""), None);
    let targets = rewards_to_go(&batch, 0.9);
    let run = |aux: &str| {
        let mut l = Learner::new(&c(aux), Device::Cpu, 11);
        let s = l.ppo_update(&batch).unwrap();
        (l, s)
    };
    let (plain, _) = run("");
    let (free, s_free) = run(", aux_every_updates: 1, aux_epochs: 40, aux_clone_coef: 0.0");
    let (held, held_stats) = run(", aux_every_updates: 1, aux_epochs: 40, aux_clone_coef: 1000.0");
    assert_eq!(s_free.aux_steps, 40);
    let (mse_plain, mse_free) =
        (value_mse(&plain, &batch, &targets), value_mse(&free, &batch, &targets));
    // 40 Adam steps of 5e-3 on a 15-state regression: the loss falls by a
    // large fraction; a phase on other targets (the collectors' values, all
    // 0, or none at all) leaves it within a few percent.
    margin::at_most("value loss after the phase ÷ without it", mse_free / mse_plain, 0.8);
    let (kl_free, kl_held) = (policy_kl(&plain, &free, &batch), policy_kl(&plain, &held, &batch));
    margin::at_least("KL moved by a phase without the KL term", kl_free, 1e-9);
    margin::at_most("KL with the term ÷ without it", kl_held / kl_free, 0.5);
    // What the phase reports is that KL as its steps saw it: near 0 with a
    // weight of 1000 (a policy-before taken over the wrong axis reads ~30).
    margin::at_most("the phase's mean KL reported, weight 1000", held_stats.aux_kl, kl_free);
    // Without the weight, what it reports is the mean over its 40 steps of
    // what each step saw before it stepped (each minibatch is the whole
    // batch here): the value loss falls from the plain update's to the one
    // after the phase, so the mean lies between the two (measured: 3.7× the
    // loss after, 0.25× the loss before); the KL rises from 0 (the first
    // step's policy is the one the phase found) to near the one after the
    // phase within a few steps (measured: the mean is 0.92× the KL after;
    // the bound of 3× leaves room for that shape to change, while a sum of
    // the 40 steps where the mean should be reads ~37×). A sum never taken
    // reads 0.
    let (value_loss, kl) = (s_free.aux_value_loss, s_free.aux_kl);
    margin::at_least("the phase's mean value loss ÷ the loss after it", value_loss / mse_free, 1.0);
    margin::at_most(
        "the phase's mean value loss ÷ the loss before it",
        value_loss / mse_plain,
        1.0,
    );
    margin::at_least("the phase's mean KL ÷ the KL after it", kl / kl_free, 0.02);
    margin::at_most("the phase's mean KL ÷ the KL after it", kl / kl_free, 3.0);
}

/// A phase whose steps are non-finite (an infinite clone weight: the KL,
/// 0 at the phase's first step, times it is NaN) skips each of them as
/// PPO's own non-finite steps are skipped: counted as skipped, none taken,
/// the network as the plain update left it, and the run goes on (5 skips,
/// under the optimiser's limit of 10 in a row).
#[test]
fn a_phase_of_non_finite_steps_skips_and_counts_them() {
    tch::set_num_threads(margin::threads() as i32);
    let c =
        |aux: &str| cfg(&format!("{BASE}}}\nppo: {{update_epochs: 1, num_minibatches: 1{aux}}}"));
    let plain_c = c("");
    let mut inf_c = c(", aux_every_updates: 1, aux_epochs: 5");
    inf_c.ppo.aux_clone_coef = f64::INFINITY;
    let batch = rollouts(&plain_c, None);
    let mut plain = Learner::new(&plain_c, Device::Cpu, 3);
    let mut inf = Learner::new(&inf_c, Device::Cpu, 3);
    let (p, s) = (plain.ppo_update(&batch).unwrap(), inf.ppo_update(&batch).unwrap());
    assert_eq!((s.steps, s.aux_steps), (p.steps, 0), "{s:?}");
    assert_eq!(s.skipped, p.skipped + 5, "the phase's 5 steps skipped: {s:?}");
    assert_eq!(max_diff(&plain, &inf), 0.0, "a skipped step leaves the network as it was");
    let (p, s) = (plain.ppo_update(&batch).unwrap(), inf.ppo_update(&batch).unwrap());
    assert_eq!((s.skipped, s.aux_steps), (p.skipped + 5, 0), "the next update's phase too");
}

/// One head of two actions: before the phase (1/3, 2/3), now (1/2, 1/2);
/// value 1.5 against a return of 0.5.
#[test]
fn aux_loss_by_hand() {
    let before = Tensor::from_slice(&[(1.0f32 / 3.0).ln(), (2.0f32 / 3.0).ln()]).view([1, 1, 2]);
    let logits = Tensor::from_slice(&[0.0f32, 0.0]).view([1, 2]).set_requires_grad(true);
    let v = Tensor::from_slice(&[1.5f32]).set_requires_grad(true);
    let t = aux_loss(&before, &logits, &v, &Tensor::from_slice(&[0.5f32]), 1, 2.0);
    let kl = (1.0 / 3.0) * (2.0f64 / 3.0).ln() + (2.0 / 3.0) * (4.0f64 / 3.0).ln();
    // f32 log-softmax of values ≤ ln 3: ~1e-7 relative per term.
    margin::close("aux KL", t.kl, kl, 1e-6);
    margin::close("aux value loss", t.value, 0.5, 1e-7);
    margin::close("aux loss", t.loss.double_value(&[]), 0.5 + 2.0 * kl, 1e-6);
    t.loss.backward();
    // d/dV 0.5(V − R)² = V − R = 1; d(2·KL)/dz = 2(softmax(z) − p).
    margin::close("value gradient", v.grad().double_value(&[0]), 1.0, 1e-6);
    let g = Vec::<f32>::try_from(logits.grad().view([-1])).unwrap();
    for (i, (g, w)) in g.iter().zip([2.0 * (0.5 - 1.0 / 3.0), 2.0 * (0.5 - 2.0 / 3.0)]).enumerate()
    {
        margin::close(&format!("logit {i} gradient"), f64::from(*g), w, 1e-6);
    }
}

/// PopArt's moments, by hand: update k moves the running mean and second
/// moment of the value targets toward the batch's by `max(β, 1/k)`, and the
/// update reports the mean and `sqrt(second − mean²)` it standardised by;
/// a resumed learner goes on with the same moments, to the bit.
#[test]
fn popart_steps_its_moments_by_max_beta_one_over_k_and_resumes_them() {
    tch::set_num_threads(margin::threads() as i32);
    let c = |popart: &str| {
        cfg(&format!(
            "{BASE}}}\nppo: {{gamma: 0.9, gae_lambda: 1.0, update_epochs: 1, num_minibatches: 1{popart}}}"
        ))
    };
    let on_c = c(", popart_beta: 0.3");
    let b1 = rollouts(&on_c, None);
    let b2 = vec![traj(&on_c, &[3.0, 0.0, -1.0, 2.0, 2.0], 3, None)];
    let moments = |b: &[TrajBatch]| {
        let t = rewards_to_go(b, 0.9);
        let n = t.len() as f64;
        (t.iter().sum::<f64>() / n, t.iter().map(|x| x * x).sum::<f64>() / n)
    };
    let (m1, m2) = (moments(&b1), moments(&b2));
    // Steps 1, 1/2, 1/3, then β = 0.3 once 1/k is below it.
    let (mut mean, mut second) = (0.0, 0.0);
    let mut want = vec![];
    for (k, (bm, bs)) in [m1, m2, m1, m2].into_iter().enumerate() {
        let w = f64::max(0.3, 1.0 / (k + 1) as f64);
        mean += w * (bm - mean);
        second += w * (bs - second);
        want.push((mean, (second - mean * mean).sqrt(), second));
    }
    assert!((want[3].0 - want[2].0).abs() > 0.05, "the check needs β's step to matter");
    let mut l = Learner::new(&on_c, Device::Cpu, 3);
    let dir = tempfile::tempdir().unwrap();
    let mut resumed = None;
    for (k, b) in [&b1, &b2, &b1, &b2].into_iter().enumerate() {
        let s = l.ppo_update(b).unwrap();
        let (mean, std, second) = want[k];
        // The targets are GAE's f32 sums of ≤ 8 terms of |x| ≤ 5: 1e-6
        // relative each; the std's error is the variance's over 2·std.
        let tol = 1e-5 * second.max(1.0);
        margin::close(&format!("update {}'s mean", k + 1), s.popart_mean, mean, tol);
        margin::close(&format!("update {}'s std", k + 1), s.popart_std, std, tol / std);
        if let Some(r) = resumed.as_mut().map(|r: &mut Learner| r.ppo_update(b).unwrap()) {
            assert_eq!(
                (r.popart_mean.to_bits(), r.popart_std.to_bits()),
                (s.popart_mean.to_bits(), s.popart_std.to_bits()),
                "resumed, update {}",
                k + 1
            );
        }
        if k == 1 {
            l.save_state(dir.path()).unwrap();
            resumed = Some(Learner::resume(&on_c, dir.path(), Device::Cpu).unwrap());
        }
    }
    assert_eq!(max_diff(&l, resumed.as_ref().unwrap()), 0.0, "the resumed run's network");
    let off = Learner::new(&c(""), Device::Cpu, 3).ppo_update(&b1).unwrap();
    assert_eq!((off.popart_mean, off.popart_std), (0.0, 0.0), "off: nothing reported");
    // Targets that do not vary: the std is held at its floor.
    let mut flat = rulka_learner::ValueMoments::default();
    flat.add(&[2.5; 4], 0.3);
    assert_eq!((flat.mean, flat.std()), (2.5, rulka_learner::ValueMoments::MIN_STD));
}

/// Learner `a` trained on `batches` beside learner `b` trained on the same
/// batches with returns in other units, `G' = scale·G + shift`: rewards
/// `scale·r + shift·(1 − γ)` (the last step's `scale·r + shift`), the
/// collectors' values and `b`'s value head mapped the same way. Returns
/// the largest difference of the parameters but the value head's, and of
/// the value head's once mapped back (its weight ÷ scale, its bias minus
/// shift ÷ scale), and each update's reported moments (`a`'s, then `b`'s).
fn in_other_units(
    c: &Config,
    batches: &[Vec<TrajBatch>],
    scale: f64,
    shift: f64,
) -> (f64, f64, Vec<[f64; 4]>) {
    let gamma = c.ppo.gamma;
    let mut a = Learner::new(c, Device::Cpu, 5);
    let mut w = a.network().to_weights();
    for (name, t) in w.tensors.iter_mut() {
        match name.as_str() {
            "value_head.weight" => {
                t.data.iter_mut().for_each(|x| *x = (f64::from(*x) * scale) as f32)
            }
            "value_head.bias" => {
                t.data.iter_mut().for_each(|x| *x = (f64::from(*x) * scale + shift) as f32)
            }
            _ => {}
        }
    }
    let mut net = rulka_learner::ActorCritic::new_unseeded(c, Device::Cpu);
    net.load_weights(&w, c, false).unwrap();
    let mut b = Learner::with_network(c, net);
    let mut reported = vec![];
    for batch in batches {
        let other: Vec<TrajBatch> = batch
            .iter()
            .map(|t| {
                let mut o = t.shallow_clone();
                let last = o.rewards.len() - 1;
                for (i, r) in o.rewards.iter_mut().enumerate() {
                    let tail = if i == last { shift } else { shift * (1.0 - gamma) };
                    *r = (f64::from(*r) * scale + tail) as f32;
                }
                o.old_value = &t.old_value * scale + shift;
                o
            })
            .collect();
        let (sa, sb) = (a.ppo_update(batch).unwrap(), b.ppo_update(&other).unwrap());
        reported.push([sa.popart_mean, sa.popart_std, sb.popart_mean, sb.popart_std]);
    }
    let (wa, wb) = (a.network().to_weights(), b.network().to_weights());
    let (mut body, mut head) = (0f64, 0f64);
    for (name, ta) in &wa.tensors {
        for (x, y) in ta.data.iter().zip(&wb.tensors[name].data) {
            let (x, y) = (f64::from(*x), f64::from(*y));
            match name.as_str() {
                "value_head.weight" => head = head.max((y / scale - x).abs()),
                "value_head.bias" => head = head.max(((y - shift) / scale - x).abs()),
                _ => body = body.max((y - x).abs()),
            }
        }
    }
    (body, head, reported)
}

/// PopArt's promise: the value learns in the targets' standard units, so
/// an update is the same whatever units the returns come in. Two learners,
/// one with returns `G`, the other with `40·G + 150` (its collectors'
/// values and value head in the same units): with PopArt every parameter
/// ends the same, the value head the same once mapped back, and the moments
/// reported map as the returns do; on the plain update, with value clipping
/// (the collectors' values standardised too), with PPG's phase (its
/// kept targets standardised) and with self-imitation (its returns-to-go
/// standardised, so its weights `max(R − V, 0)` are the same). Without PopArt the value's loss is 1 600×
/// larger in the second and the two end far apart.
#[test]
fn popart_makes_an_update_the_same_in_any_units_of_the_returns() {
    tch::set_num_threads(margin::threads() as i32);
    let (scale, shift) = (40.0, 150.0);
    // Adam at 5e-3: every weight moves by about the step each step, so a
    // different loss moves the shared layers visibly.
    let base = BASE.replace("1.0e-3", "5.0e-3").replace("radam", "adam");
    let c = |knobs: &str| {
        cfg(&format!(
            "{base}}}\nppo: {{gamma: 0.9, gae_lambda: 1.0, update_epochs: 2, num_minibatches: 2{knobs}}}"
        ))
    };
    let base = c("");
    let mut b1 = rollouts(&base, None);
    for (k, t) in b1.iter_mut().enumerate() {
        let n = t.len() as i64;
        t.old_value = (Tensor::arange(n, (Kind::Float, Device::Cpu)) * 0.7 + k as f64).sin() * 2.0;
    }
    let batches = vec![b1, vec![traj(&base, &[3.0, 0.0, -1.0, 2.0, 2.0], 3, None)]];
    // Each of Adam's 4 (with the phase 8) steps moves a weight by up to
    // the step, 5e-3; f32 rounding differs between the two learners by
    // ~1e-7 of each gradient, far below Adam's ε wherever a gradient
    // is near 0 (Adam's ε here is 1e-4), so the weights differ by ~1e-6 of a step (measured: at
    // most 2e-6 absolute, the value head 7e-7). A bound of 1e-4 (a fiftieth
    // of one step) leaves room; without PopArt the two end 4e-2 apart.
    let tol = 1e-4;
    for knobs in [
        ", popart_beta: 0.5",
        ", popart_beta: 0.5, clip_coef_vf: 0.2",
        ", popart_beta: 0.5, aux_every_updates: 2, aux_epochs: 2",
        ", popart_beta: 0.5, sil_coef: 1.0, sil_steps: 2",
    ] {
        let (body, head, reported) = in_other_units(&c(knobs), &batches, scale, shift);
        eprintln!("{knobs}: body {body:e}, head {head:e}");
        margin::at_most(&format!("{knobs}: parameters apart"), body, tol);
        margin::at_most(&format!("{knobs}: value head apart"), head, tol);
        for [ma, sa, mb, sb] in reported {
            margin::close(
                "mean in the other units",
                mb,
                scale * ma + shift,
                1e-4 * (scale * ma + shift).abs(),
            );
            margin::close("std in the other units", sb, scale * sa, 1e-4 * scale * sa);
        }
    }
    let (body, head, _) = in_other_units(&c(", clip_coef_vf: 0.2"), &batches, scale, shift);
    eprintln!("off: body {body:e}, head {head:e}");
    margin::at_least("without PopArt: parameters apart", body, 100.0 * tol);
}

/// PopArt's head is in real units after an update whatever its steps did:
/// an update whose auxiliary phase aborts (12 non-finite steps in a row,
/// past the optimiser's 10) fails, and leaves the network where its PPO
/// steps put it, in real units: equal to the same update without the phase.
#[test]
fn popart_leaves_the_value_head_in_real_units_when_an_update_fails() {
    tch::set_num_threads(margin::threads() as i32);
    let c = |aux: &str| {
        cfg(&format!(
            "{BASE}}}\nppo: {{update_epochs: 1, num_minibatches: 1, popart_beta: 0.5{aux}}}"
        ))
    };
    let plain_c = c("");
    let mut inf_c = c(", aux_every_updates: 1, aux_epochs: 12");
    inf_c.ppo.aux_clone_coef = f64::INFINITY;
    // Returns far from 0 and spread: the standard units differ from the real
    // ones by far more than a step.
    let batch: Vec<TrajBatch> = with_rewards(rollouts(&plain_c, None), |r| r * 30.0 + 20.0);
    let mut plain = Learner::new(&plain_c, Device::Cpu, 3);
    let mut inf = Learner::new(&inf_c, Device::Cpu, 3);
    let s = plain.ppo_update(&batch).unwrap();
    assert!(s.popart_std > 10.0 && s.popart_mean.abs() > 10.0, "{s:?}");
    let e = inf.ppo_update(&batch).unwrap_err().to_string();
    assert!(e.contains("consecutive"), "{e}");
    assert_eq!(max_diff(&plain, &inf), 0.0, "the head mapped back after the failed phase");
}

/// `sil_loss` by hand (its returns-to-go, GAE's with λ = 1 against values
/// of 0, are checked by hand in the step test below). The loss on
/// three states, log π = (−1, −2, −0.5), V = (0, 5, 1), R = (2, 3, 1): only the
/// first beats its value, by 2, so the loss is `(1·2)/3 + 0.5·0.01·4/3`, its
/// gradient −2/3 on the first log-probability only, and on the first value
/// `−0.01·2/3` only (the policy term's weight is held fixed).
#[test]
fn sil_loss_by_hand() {
    let log_prob = Tensor::from_slice(&[-1.0f32, -2.0, -0.5]).set_requires_grad(true);
    let value = Tensor::from_slice(&[0.0f32, 5.0, 1.0]).set_requires_grad(true);
    let returns = Tensor::from_slice(&[2.0f32, 3.0, 1.0]);
    let t = rulka_learner::sil_loss(&log_prob, &value, &returns, rulka_learner::SIL_VALUE_COEF);
    // f32 arithmetic on numbers of order 1: a few ulps, 1e-6 leaves room.
    let want = 2.0 / 3.0 + 0.5 * 0.01 * 4.0 / 3.0;
    margin::close("loss", t.loss.double_value(&[]), want, 1e-6);
    margin::close("advantage", t.advantage, 2.0 / 3.0, 1e-6);
    margin::close("positive", t.positive, 1.0 / 3.0, 1e-6);
    t.loss.backward();
    let g = |x: &Tensor| Vec::<f32>::try_from(x.grad()).unwrap();
    let (gl, gv) = (g(&log_prob), g(&value));
    for (got, want) in gl.iter().zip([-2.0 / 3.0, 0.0, 0.0]) {
        margin::close("∂/∂log π", f64::from(*got), want, 1e-6);
    }
    for (got, want) in gv.iter().zip([-0.01 * 2.0 / 3.0, 0.0, 0.0]) {
        margin::close("∂/∂V", f64::from(*got), want, 1e-7);
    }
}

/// Self-imitation keeps the `sil_rollouts` rollouts with the highest sums
/// of rewards seen so far, best first: of sums (2, 5, 3) with room for two,
/// 5 and 3; then 4 displaces 3 and 1 does not enter; a rollout with a
/// non-finite reward never enters. Off, nothing is kept.
#[test]
fn self_imitation_keeps_the_runs_best_rollouts_by_their_sums() {
    tch::set_num_threads(margin::threads() as i32);
    let c = cfg(&format!(
        "{BASE}}}\nppo: {{update_epochs: 1, num_minibatches: 1, sil_coef: 0.1, sil_rollouts: 2}}"
    ));
    let mut l = Learner::new(&c, Device::Cpu, 1);
    let batch = |sums: &[f32]| -> Vec<TrajBatch> {
        sums.iter()
            .enumerate()
            .map(|(k, &s)| traj(&c, &[s - 1.0, 0.5, 0.5], k as i64, None))
            .collect()
    };
    let s = l.ppo_update(&batch(&[2.0, 5.0, 3.0])).unwrap();
    assert_eq!(l.sil_kept_returns(), vec![5.0, 3.0]);
    assert_eq!(s.sil_best_return, 5.0);
    l.ppo_update(&batch(&[1.0, 4.0])).unwrap();
    assert_eq!(l.sil_kept_returns(), vec![5.0, 4.0]);
    let mut bad = batch(&[9.0]);
    bad[0].rewards[1] = f32::NAN;
    bad.extend(batch(&[4.5]));
    l.ppo_update(&bad).unwrap();
    assert_eq!(l.sil_kept_returns(), vec![5.0, 4.5]);
    let off = cfg(&format!("{BASE}}}\nppo: {{update_epochs: 1, num_minibatches: 1}}"));
    let mut l = Learner::new(&off, Device::Cpu, 1);
    let s = l.ppo_update(&batch(&[2.0, 5.0])).unwrap();
    assert!(l.sil_kept_returns().is_empty());
    assert_eq!((s.sil_steps, s.sil_best_return), (0, 0.0));
}

/// The learner `on` after one update with self-imitation, against a step
/// taken here by hand from its twin `off` (the same update without it):
/// RAdam with β1 = 0 in its first steps is plain gradient descent, so `on`
/// must equal `off` moved by `−lr·sil_coef·∇L`, L computed here from the
/// network's logits and value on the kept rollout (the one of the larger
/// sum) with its returns-to-go by hand, times the update's reward scale.
/// Every kept state is in the one minibatch (8 states, the update's 15).
/// Returns the largest difference and the largest move of the value head.
fn sil_step_against_hand(c_on: &Config, c_off: &Config, batch: &[TrajBatch]) -> (f64, f64) {
    let (mut on, mut off) =
        (Learner::new(c_on, Device::Cpu, 4), Learner::new(c_off, Device::Cpu, 4));
    let s = on.ppo_update(batch).unwrap();
    off.ppo_update(batch).unwrap();
    assert_eq!(s.sil_steps, 1, "{s:?}");
    let sum = |t: &TrajBatch| t.rewards.iter().sum::<f32>();
    let kept = batch.iter().max_by(|a, b| sum(a).total_cmp(&sum(b))).unwrap();
    let mut net = rulka_learner::ActorCritic::new_unseeded(c_off, Device::Cpu);
    net.load_weights(&off.network().to_weights(), c_off, false).unwrap();
    net.set_training(true);
    let (logits, v) = net.forward(&kept.image, &kept.floats);
    let logp = logits.log_softmax(-1, Kind::Float).gather(1, &kept.actions, false).view([-1]);
    let r: Vec<f32> = rewards_to_go(std::slice::from_ref(kept), c_on.ppo.gamma)
        .iter()
        .map(|g| (g * s.reward_scale) as f32)
        .collect();
    let gap = (Tensor::from_slice(&r) - v.view([-1])).clamp_min(0.0);
    // The reported means of the one step, by hand: the mean gap over the
    // kept states and the share of them whose return beats the value (f32
    // sums of ~10 numbers of order 1: 1e-5 leaves room).
    let positive = gap.gt(0.0).to_kind(Kind::Double).mean(Kind::Double).double_value(&[]);
    margin::close("sil_advantage", s.sil_advantage, gap.mean(Kind::Double).double_value(&[]), 1e-5);
    margin::close("sil_positive", s.sil_positive, positive, 1e-9);
    let loss = ((-&logp * gap.detach()).mean(Kind::Float) + gap.square().mean(Kind::Float) * 0.005)
        * c_on.ppo.sil_coef;
    loss.backward();
    let want = net.var_store().variables();
    let got = on.network().to_weights();
    let before = off.network().to_weights();
    let (mut diff, mut head_move) = (0f64, 0f64);
    for (name, p) in &want {
        // Parameters the loss does not reach (none in this network) keep no gradient.
        let g = p.grad();
        let step = if g.defined() { p.detach() - g * s.lr } else { p.detach() };
        let step = Vec::<f32>::try_from(step.reshape([-1])).unwrap();
        for ((x, y), b) in step.iter().zip(&got.tensors[name].data).zip(&before.tensors[name].data)
        {
            diff = diff.max(f64::from((x - y).abs()));
            if name.starts_with("value_head") {
                head_move = head_move.max(f64::from((y - b).abs()));
            }
        }
    }
    (diff, head_move)
}

/// Self-imitation's step is `−lr·sil_coef·∇L` on the kept rollout, L its
/// loss computed here by hand: with the returns as they are and with
/// `normalize_returns` (the returns scaled as the update's rewards); the
/// value head moves by the value term alone, far more than the bound.
#[test]
fn self_imitation_steps_on_the_kept_rollouts_loss_by_hand() {
    tch::set_num_threads(margin::threads() as i32);
    let knobs = "update_epochs: 1, num_minibatches: 1, max_grad_norm: 1.0e6, gamma: 0.9, sil_rollouts: 1, sil_steps: 1";
    let c = |extra: &str| {
        cfg(&format!(
            "{}, adam_beta1: 0.0}}\nppo: {{{knobs}{extra}}}",
            BASE.replace("1.0e-3", "1.0e-2")
        ))
    };
    for norm in ["", ", normalize_returns: true"] {
        let (c_on, c_off) = (c(&format!("{norm}, sil_coef: 2.0")), c(norm));
        // The kept rollout (the larger sum) second: its states are not the
        // update's first ones.
        let mut batch = rollouts(&c_on, None);
        batch.reverse();
        let (diff, head_move) = sil_step_against_hand(&c_on, &c_off, &batch);
        eprintln!("{norm}: diff {diff:e}, value head moved {head_move:e}");
        // One step of lr 1e-2 on gradients of order 1: f32 rounding of the
        // two computations' sums differs by ~1e-7 of a weight; 1e-6 leaves room.
        margin::at_most(&format!("{norm}: weights apart from the hand step"), diff, 1e-6);
        margin::at_least(&format!("{norm}: the value term's move"), head_move, 100.0 * 1e-6);
    }
}

/// Self-imitation imitates nothing whose return is not above the value:
/// on rollouts of only negative rewards (returns below a value near 0) it
/// takes no step and the network is its twin's without it, to the bit;
/// where returns beat the value it takes `sil_steps` steps.
#[test]
fn self_imitation_takes_no_step_where_no_return_beats_the_value() {
    tch::set_num_threads(margin::threads() as i32);
    let c =
        |sil: &str| cfg(&format!("{BASE}}}\nppo: {{update_epochs: 1, num_minibatches: 2{sil}}}"));
    let (c_on, c_off) = (c(", sil_coef: 1.0, sil_steps: 3"), c(""));
    let low: Vec<TrajBatch> = with_rewards(rollouts(&c_on, None), |r| -3.0 - r.abs());
    let (mut on, mut off) =
        (Learner::new(&c_on, Device::Cpu, 2), Learner::new(&c_off, Device::Cpu, 2));
    let s = on.ppo_update(&low).unwrap();
    off.ppo_update(&low).unwrap();
    assert_eq!((s.sil_steps, s.sil_positive, s.sil_advantage), (0, 0.0, 0.0), "{s:?}");
    assert_eq!(max_diff(&on, &off), 0.0, "no step where no return beats the value");
    let high = with_rewards(rollouts(&c_on, None), |r| r + 3.0);
    let mut on = Learner::new(&c_on, Device::Cpu, 2);
    let s = on.ppo_update(&high).unwrap();
    assert_eq!(s.sil_steps, 3, "{s:?}");
    assert!(s.sil_positive > 0.9 && s.sil_advantage > 1.0, "{s:?}");
}

/// Self-imitation's reported advantage and share of returns above the value
/// are means over its `sil_steps` steps, not sums: with one minibatch
/// holding every kept state and a weight too small to move the network
/// between steps (1e-9 with Adam's β1 = 0, so no momentum from PPO's step
/// carries over), three steps report what one step does. And its steps whose
/// loss is not finite (an infinite weight) are skipped and counted as PPO's
/// own are: none taken, the network as the plain update left it.
#[test]
fn self_imitation_reports_means_over_its_steps_and_skips_non_finite_ones() {
    tch::set_num_threads(margin::threads() as i32);
    let c = |sil: &str| {
        cfg(&format!(
            "{BASE}, adam_beta1: 0.0}}\nppo: {{update_epochs: 1, num_minibatches: 1{sil}}}"
        ))
    };
    let high: Vec<TrajBatch> = with_rewards(rollouts(&c(""), None), |r| r + 3.0);
    let (c1, c3) = (c(", sil_coef: 1.0e-9, sil_steps: 1"), c(", sil_coef: 1.0e-9, sil_steps: 3"));
    let s1 = Learner::new(&c1, Device::Cpu, 5).ppo_update(&high).unwrap();
    let s3 = Learner::new(&c3, Device::Cpu, 5).ppo_update(&high).unwrap();
    assert_eq!((s1.sil_steps, s3.sil_steps), (1, 3), "{s1:?} {s3:?}");
    assert!(s1.sil_advantage > 1.0 && s1.sil_positive > 0.5, "{s1:?}");
    // The same 15 states in another order each step: f32 sums of 15 numbers
    // of order 10 differ by a few ulps (~1e-6); 1e-5 of the mean leaves room.
    let adv = s1.sil_advantage;
    margin::close("3 steps' mean advantage against 1 step's", s3.sil_advantage, adv, 1e-5 * adv);
    margin::close("3 steps' mean share against 1 step's", s3.sil_positive, s1.sil_positive, 1e-9);

    let plain_c = c("");
    let mut inf_c = c(", sil_coef: 1.0, sil_steps: 3");
    inf_c.ppo.sil_coef = f64::INFINITY;
    let (mut plain, mut inf) =
        (Learner::new(&plain_c, Device::Cpu, 3), Learner::new(&inf_c, Device::Cpu, 3));
    let (p, s) = (plain.ppo_update(&high).unwrap(), inf.ppo_update(&high).unwrap());
    assert_eq!((s.steps, s.sil_steps), (p.steps, 0), "{s:?}");
    assert_eq!(s.skipped, p.skipped + 3, "self-imitation's 3 steps skipped: {s:?}");
    assert_eq!(max_diff(&plain, &inf), 0.0, "a skipped step leaves the network as it was");
}
