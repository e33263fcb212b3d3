//! Optimisers against PyTorch's update rules, clipping, and the non-finite guard.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::OptimizerKind;
use rulka_learner::{OptimConfig, Optimizer, StepOutcome};
use tch::{Kind, Tensor};

fn cfg(kind: OptimizerKind) -> OptimConfig {
    OptimConfig {
        kind,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        max_consecutive_skips: 3,
        loss_scaling: false,
    }
}

/// PyTorch's `_single_tensor_radam` / `_single_tensor_adam` for one scalar, in f64.
fn reference(kind: OptimizerKind, grads: &[f64], lr: f64) -> f64 {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
    let (mut p, mut m, mut v) = (1.0f64, 0.0, 0.0);
    for (i, g) in grads.iter().enumerate() {
        let t = (i + 1) as f64;
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        let (bc1, bc2) = (1.0 - b1.powf(t), 1.0 - b2.powf(t));
        p -= match kind {
            OptimizerKind::Radam => {
                let rho_inf = 2.0 / (1.0 - b2) - 1.0;
                let rho_t = rho_inf - 2.0 * t * b2.powf(t) / bc2;
                if rho_t > 5.0 {
                    let rect = ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
                        / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
                        .sqrt();
                    m / bc1 * lr * bc2.sqrt() / (v.sqrt() + eps) * rect
                } else {
                    m / bc1 * lr
                }
            }
            _ => lr * (m / bc1) / ((v / bc2).sqrt() + eps),
        };
    }
    p
}

fn run(kind: OptimizerKind, grads: &[f64], lr: f64) -> f64 {
    let p = Tensor::from_slice(&[1.0f64]).set_requires_grad(true);
    let mut opt = Optimizer::new(vec![p.shallow_clone()], cfg(kind));
    for g in grads {
        opt.zero_grad();
        // d/dp (g·p) = g
        (&p * *g).sum(Kind::Double).backward();
        assert!(matches!(opt.step(0.0, lr, 0.0).unwrap(), StepOutcome::Applied { .. }));
    }
    p.double_value(&[0])
}

#[test]
fn radam_and_adam_follow_pytorch_update_rules() {
    let grads: Vec<f64> = (0..40).map(|i| ((i as f64) * 0.7).sin() * 2.0 + 0.3).collect();
    for kind in [OptimizerKind::Radam, OptimizerKind::Adam] {
        let (got, want) = (run(kind, &grads, 0.01), reference(kind, &grads, 0.01));
        rulka_test_support::margin::close("got vs want", got, want, 1e-12);
    }
    // RAdam's first step is plain momentum SGD with bias correction: p − lr·g.
    rulka_test_support::margin::close(
        "run(OptimizerKind::Radam, &[2.0], 0.1) vs 0.8",
        run(OptimizerKind::Radam, &[2.0], 0.1),
        0.8,
        1e-15,
    );
}

#[test]
fn radam_minimises_a_quadratic() {
    let x = Tensor::from_slice(&[0.0f64]).set_requires_grad(true);
    let mut opt = Optimizer::new(vec![x.shallow_clone()], cfg(OptimizerKind::Radam));
    for _ in 0..600 {
        opt.zero_grad();
        let loss = (&x - 3.0).square().sum(Kind::Double);
        loss.backward();
        opt.step(loss.double_value(&[]), 0.05, 0.0).unwrap();
    }
    rulka_test_support::margin::close("x vs 3.0", x.double_value(&[0]), 3.0, 0.05);
}

#[test]
fn global_norm_clipping_scales_the_update() {
    // g = (3, 4): norm 5, clipped to 1 → the first RAdam step moves by lr·(0.6, 0.8).
    let p = Tensor::from_slice(&[0.0f64, 0.0]).set_requires_grad(true);
    let mut opt = Optimizer::new(vec![p.shallow_clone()], cfg(OptimizerKind::Radam));
    (&p * Tensor::from_slice(&[3.0f64, 4.0])).sum(Kind::Double).backward();
    let out = opt.step(1.0, 0.1, 1.0).unwrap();
    assert_eq!(out, StepOutcome::Applied { grad_norm: 5.0 });
    assert!(
        (p.double_value(&[0]) + 0.06).abs() < 1e-6 && (p.double_value(&[1]) + 0.08).abs() < 1e-6
    );
}

#[test]
fn non_finite_gradients_skip_the_step_and_repeated_ones_abort() {
    let p = Tensor::from_slice(&[1.0f64]).set_requires_grad(true);
    let mut opt = Optimizer::new(vec![p.shallow_clone()], cfg(OptimizerKind::Adam));
    let nan_step = |opt: &mut Optimizer| {
        opt.zero_grad();
        (&p * f64::NAN).sum(Kind::Double).backward();
        opt.step(f64::NAN, 0.1, 1.0)
    };
    assert_eq!(nan_step(&mut opt).unwrap(), StepOutcome::Skipped);
    assert_eq!(p.double_value(&[0]), 1.0, "a skipped step changed the weights");
    assert_eq!((opt.skipped(), opt.steps()), (1, 0));
    // A good step in between resets the consecutive count.
    opt.zero_grad();
    (&p * 1.0).sum(Kind::Double).backward();
    assert!(matches!(opt.step(1.0, 0.1, 1.0).unwrap(), StepOutcome::Applied { .. }));
    assert_eq!(nan_step(&mut opt).unwrap(), StepOutcome::Skipped);
    assert_eq!(nan_step(&mut opt).unwrap(), StepOutcome::Skipped);
    let e = nan_step(&mut opt).unwrap_err();
    assert!(e.to_string().contains("3 consecutive optimiser steps"), "{e}");

    // A finite loss with a NaN gradient (a NaN born in the backward pass)
    // is no loss-scale overflow without loss scaling: it is skipped and
    // counts toward the abort the same.
    let p = Tensor::from_slice(&[1.0f64]).set_requires_grad(true);
    let mut opt = Optimizer::new(vec![p.shallow_clone()], cfg(OptimizerKind::Adam));
    let nan_grad = |opt: &mut Optimizer| {
        opt.zero_grad();
        (&p * f64::NAN).sum(Kind::Double).backward();
        opt.step(1.0, 0.1, 1.0)
    };
    assert_eq!(nan_grad(&mut opt).unwrap(), StepOutcome::Skipped);
    assert_eq!(nan_grad(&mut opt).unwrap(), StepOutcome::Skipped);
    assert_eq!(p.double_value(&[0]), 1.0, "a skipped step changed the weights");
    let e = nan_grad(&mut opt).unwrap_err();
    assert!(e.to_string().contains("3 consecutive optimiser steps"), "{e}");
}

#[test]
fn loss_scaling_gives_the_same_steps_and_backs_off_on_overflow() {
    // Power-of-two scaling and unscaling is exact: the same trajectory of weights.
    let grads: Vec<f64> = (0..30).map(|i| ((i as f64) * 0.37).cos() + 0.1).collect();
    let train = |scaling: bool| {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let mut opt = Optimizer::new(
            vec![p.shallow_clone()],
            OptimConfig { loss_scaling: scaling, ..cfg(OptimizerKind::Radam) },
        );
        for g in &grads {
            opt.zero_grad();
            let loss = (&p * Tensor::from_slice(&[*g as f32, 0.5])).sum(Kind::Float);
            opt.backward(&loss);
            opt.step(loss.double_value(&[]), 0.01, 1.0).unwrap();
        }
        (Vec::<f32>::try_from(&p.detach()).unwrap(), opt.loss_scale())
    };
    let ((plain, s1), (scaled, s2)) = (train(false), train(true));
    assert_eq!(plain, scaled);
    assert_eq!((s1, s2), (1.0, 65536.0));
    // An overflowing gradient: skipped, weights unchanged, scale halved, no abort
    // (3 consecutive would abort without scaling).
    let p = Tensor::from_slice(&[1.0f32]).set_requires_grad(true);
    let mut opt = Optimizer::new(
        vec![p.shallow_clone()],
        OptimConfig { loss_scaling: true, ..cfg(OptimizerKind::Adam) },
    );
    for k in 1..=5 {
        opt.zero_grad();
        let loss = (&p * 1e35f64).sum(Kind::Float); // × 65536 overflows f32
        opt.backward(&loss);
        assert_eq!(opt.step(1e35, 0.1, 0.0).unwrap(), StepOutcome::Skipped);
        assert_eq!(opt.loss_scale(), 65536.0 / f64::from(1u32 << k));
    }
    assert_eq!(p.double_value(&[0]), 1.0);
    // A large loss that fits at the reduced scale (2048) goes through, unscaled
    // correctly: Adam's first step moves by lr whatever the gradient's size.
    opt.zero_grad();
    opt.backward(&(&p * 1e15f64).sum(Kind::Float));
    assert!(
        matches!(opt.step(1e15, 0.1, 0.0).unwrap(), StepOutcome::Applied { grad_norm } if (grad_norm / 1e15 - 1.0).abs() < 1e-6)
    );
    rulka_test_support::margin::close("p vs 0.9", p.double_value(&[0]), 0.9, 1e-6);
}

/// AdamW decays the weight before the Adam step (PyTorch's `_single_tensor_adamw`:
/// `p ← p·(1 − lr·wd)`, then the Adam update): one step from p = 1 with g = 0.5,
/// lr = 0.1, wd = 0.1 gives 1·0.99 − 0.1·(0.05/0.1)/(√(0.00025/0.001) + 1e-8)
/// = 0.99 − 0.1 = 0.89 (the first Adam step is lr·sign(g)); plain Adam gives 0.9.
#[test]
fn adamw_decays_the_weight_before_its_step() {
    for (kind, wd, expected) in [
        (OptimizerKind::Adamw, 0.1, 0.89),
        (OptimizerKind::Adam, 0.1, 0.9),
        (OptimizerKind::Adamw, 0.0, 0.9),
    ] {
        let p = Tensor::from_slice(&[1.0f64]).set_requires_grad(true);
        let mut opt =
            Optimizer::new(vec![p.shallow_clone()], OptimConfig { weight_decay: wd, ..cfg(kind) });
        opt.zero_grad();
        (&p * 0.5).sum(Kind::Double).backward();
        assert!(matches!(opt.step(0.0, 0.1, 0.0).unwrap(), StepOutcome::Applied { .. }));
        let got = p.double_value(&[0]);
        rulka_test_support::margin::close("got vs expected", got, expected, 1e-7);
    }
}

/// The clip coefficient against its definition over generated norms and
/// clips: off (0, negative), exactly at the norm, just past it, far past,
/// tiny and huge: 1 unless the clip is on and the norm above it; then the
/// clipped norm is at most the clip and short of it by at most 1e-6.
#[test]
fn the_clip_coefficient_is_one_unless_the_norm_passes_an_active_clip() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed, TestRunner};
    let value = prop_oneof![
        Just(0.0),
        Just(-1.0),
        Just(1e-12),
        Just(0.5),
        Just(1.0),
        Just(1e9),
        (1u32..1000).prop_map(|k| f64::from(k) / 100.0),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 5000,
        rng_seed: RngSeed::Fixed(0x636c_6970),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(value.clone(), value, any::<bool>()), |(norm, max, nudge)| {
            // Also the norm just past the clip.
            let norm = if nudge && max > 0.0 { max * (1.0 + 1e-12) } else { norm.abs() };
            let c = rulka_learner::clip_coefficient(norm, max);
            if max > 0.0 && norm > max {
                prop_assert!(c < 1.0 && c > 0.0, "{norm} {max}: {c}");
                prop_assert!(norm * c <= max, "{norm} {max}: clipped to {}", norm * c);
                prop_assert!(
                    max - norm * c <= 1e-6 * c + 1e-15 * max,
                    "{norm} {max}: {}",
                    norm * c
                );
            } else {
                prop_assert_eq!(c, 1.0, "{} {}", norm, max);
            }
            Ok(())
        })
        .unwrap();
}

/// Each algorithm's clip at a frame count, by hand: PPO's fixed value (it
/// has no schedule), GRPO's schedule over its fixed value, DPO's fixed
/// value without one, the knots' frames multiplied by global_schedule_speed.
#[test]
fn the_clip_in_force_is_the_configured_algorithms() {
    let at = |yaml: &str, frames: u64| {
        let c = rulka_config::Config::from_yaml_str(yaml, "t").unwrap();
        rulka_learner::max_grad_norm_at(&c, frames)
    };
    let both = "ppo: {max_grad_norm: 0.3}\ngrpo: {max_grad_norm: 0.7, max_grad_norm_schedule: [[0, 1.0], [1000, 2.0]]}\ndpo: {max_grad_norm: 0.9}\n";
    assert_eq!(at(&format!("training: {{algorithm: ppo}}\n{both}"), 500), 0.3);
    assert_eq!(at(&format!("training: {{algorithm: grpo}}\n{both}"), 500), 1.5);
    assert_eq!(at(&format!("training: {{algorithm: dpo}}\n{both}"), 500), 0.9);
    // Speed 2 multiplies the knots' frames: frame 1000 is the schedule's 500.
    assert_eq!(
        at(&format!("training: {{algorithm: grpo, global_schedule_speed: 2.0}}\n{both}"), 1000),
        1.5
    );
}

/// The clip in force against a model over generated configs: each
/// algorithm (every one, not the first), its fixed value, a schedule of
/// one to three knots or none, on the configured algorithm's section or on
/// another's, global_schedule_speed from 0.5 to 4, frames before, at,
/// between and past the knots. The model: PPO's value; GRPO's or DPO's
/// own schedule when it has one — linear between its knots, their frames
/// times the speed, held before the first and after the last — else its
/// value. Knots are whole and values quarters, so the interpolation is
/// exact to a few ulps (1e-12 of values under 10).
#[test]
fn the_clip_in_force_is_the_models_for_every_algorithm_schedule_and_speed() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as Runner, RngSeed, TestRunner};
    let knots =
        prop::collection::btree_map(0u64..3000, (1u32..40).prop_map(|q| f64::from(q) / 4.0), 1..4);
    let schedule = prop_oneof![Just(None), knots.prop_map(Some)];
    let algorithm = prop::sample::select(vec!["ppo", "grpo", "dpo"]);
    let value = || (1u32..40).prop_map(|q| f64::from(q) / 4.0);
    let speed = prop::sample::select(vec![0.5, 1.0, 2.0, 3.0, 4.0]);
    let cases =
        (algorithm, value(), value(), value(), schedule.clone(), schedule, speed, 0u64..15_000);
    let mut runner = TestRunner::new(Runner {
        cases: 3000,
        rng_seed: RngSeed::Fixed(0x636c_6970),
        failure_persistence: None,
        ..Runner::default()
    });
    runner
        .run(&cases, |(algo, ppo, grpo, dpo, gs, ds, speed, frames)| {
            let yaml_of = |k: &Option<std::collections::BTreeMap<u64, f64>>| {
                k.as_ref().map_or(String::new(), |k| {
                    let pts: Vec<String> = k.iter().map(|(f, v)| format!("[{f}, {v}]")).collect();
                    format!(", max_grad_norm_schedule: [{}]", pts.join(", "))
                })
            };
            let yaml = format!(
                "training: {{algorithm: {algo}, global_schedule_speed: {speed}}}\n\
                 ppo: {{max_grad_norm: {ppo}}}\n\
                 grpo: {{max_grad_norm: {grpo}{}}}\n\
                 dpo: {{max_grad_norm: {dpo}{}}}\n",
                yaml_of(&gs),
                yaml_of(&ds)
            );
            let c = rulka_config::Config::from_yaml_str(&yaml, "t").unwrap();
            let got = rulka_learner::max_grad_norm_at(&c, frames);
            // The model.
            let interp = |k: &std::collections::BTreeMap<u64, f64>| {
                let pts: Vec<(f64, f64)> = k.iter().map(|(&f, &v)| (f as f64 * speed, v)).collect();
                let x = frames as f64;
                if x <= pts[0].0 {
                    return pts[0].1;
                }
                for w in pts.windows(2) {
                    if x <= w[1].0 {
                        return w[0].1 + (w[1].1 - w[0].1) * (x - w[0].0) / (w[1].0 - w[0].0);
                    }
                }
                pts[pts.len() - 1].1
            };
            let want = match algo {
                "ppo" => ppo,
                "grpo" => gs.as_ref().map_or(grpo, interp),
                _ => ds.as_ref().map_or(dpo, interp),
            };
            prop_assert!(
                (got - want).abs() <= 1e-12,
                "{} at {}: {} vs the model's {}",
                yaml,
                frames,
                got,
                want
            );
            Ok(())
        })
        .unwrap();
}

/// Every optimiser step the learner takes — PPO's epochs, SIL, PPG's aux
/// phase, GRPO's and DPO's epochs — goes through `Learner::clipped_step`,
/// the one caller of `Optimizer::step`, which clips by
/// `max_grad_norm_at` (tested above); pretraining, with its own
/// optimiser, clips by the same owner. A phase stepping by itself would
/// choose its own clip (or none): this is the test that it cannot.
#[test]
fn every_step_of_the_learner_goes_through_the_clip_in_force() {
    let src = |f: &str| {
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f)).unwrap()
    };
    let algorithms = src("src/algorithms.rs");
    assert_eq!(algorithms.matches("opt.step(").count(), 1, "one call of Optimizer::step");
    let owner = algorithms.find("fn clipped_step(").expect("the owner");
    let call = algorithms.find("opt.step(").unwrap();
    assert!(call > owner && call - owner < 400, "Optimizer::step is called by clipped_step");
    for phase in ["ppo_steps", "self_imitation", "aux_phase", "grpo_update_at", "dpo_update"] {
        let start = algorithms.find(&format!("fn {phase}(")).unwrap_or_else(|| panic!("{phase}"));
        let body = &algorithms[start..];
        let end =
            body[1..].find("\n    pub fn ").into_iter().chain(body[1..].find("\n    fn ")).min();
        let body = &body[..end.map_or(body.len(), |e| e + 1)];
        assert!(body.contains("self.clipped_step("), "{phase} steps through clipped_step");
    }
    let pretrain = src("src/pretrain.rs");
    let steps: Vec<&str> = pretrain.lines().filter(|l| l.contains(".step(")).collect();
    assert!(!steps.is_empty(), "pretraining steps");
    for l in steps {
        assert!(l.contains("max_grad_norm_at(cfg,"), "pretraining clips by the owner: {l}");
    }
}
