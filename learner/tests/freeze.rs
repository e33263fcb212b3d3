//! `training.freeze`: the image encoder and the policy head held
//! bit-identical for their first N updates (as the original's
//! `pretrain_encoder_freeze` / `pretrain_actions_head_freeze`), then
//! trained; the rest of the network trains from the first update.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::{Learner, TrajBatch};
use tch::{Device, Kind, Tensor};

fn traj(cfg: &Config, n: i64, k: i64) -> TrajBatch {
    let f = cfg.float_input_dim() as i64;
    TrajBatch {
        image: (Tensor::arange(n * 36 * 36, (Kind::Int64, Device::Cpu)) * (k + 3))
            .remainder(256)
            .to_kind(Kind::Uint8)
            .reshape([n, 1, 36, 36]),
        floats: (Tensor::arange(n * f, (Kind::Float, Device::Cpu)).reshape([n, f]) * 0.01
            + k as f64)
            .sin(),
        actions: (Tensor::arange(n, (Kind::Int64, Device::Cpu)).reshape([n, 1]) + k).remainder(12),
        old_logp: Tensor::full([n], -2.4, (Kind::Float, Device::Cpu)),
        old_value: Tensor::zeros([n], (Kind::Float, Device::Cpu)),
        rewards: (0..n).map(|s| ((s + k) % 3) as f32 * 0.5 - 0.5).collect(),
        group: 0,
    }
}

/// `(img_head, policy_head, trunk)` weights as plain data.
fn parts(l: &Learner) -> [Vec<f32>; 3] {
    let w = l.network().to_weights();
    let get = |n: &str| w.get(n).unwrap().data.clone();
    [get("img_head.0.weight"), get("policy_head.weight"), get("trunk.0.weight")]
}

/// One update of `algorithm` on data seeded by `k`: a PPO batch, a GRPO
/// group of three runs of one track, a DPO pair.
fn update(l: &mut Learner, cfg: &Config, algorithm: &str, k: i64) {
    match algorithm {
        "ppo" => {
            l.ppo_update(&[traj(cfg, 64, k)]).unwrap();
        }
        "grpo" => {
            l.grpo_update(&[traj(cfg, 24, k), traj(cfg, 20, k + 1), traj(cfg, 22, k + 2)]).unwrap();
        }
        _ => {
            l.dpo_update(&[(traj(cfg, 24, k), traj(cfg, 24, k + 1))]).unwrap().unwrap();
        }
    }
}

/// The freeze holds on every algorithm's update: PPO, GRPO and DPO each
/// call it (a GRPO or DPO update that skipped it would train the frozen
/// parts from the first update).
#[test]
fn frozen_parts_stay_bit_identical_for_their_updates_then_train() {
    for algorithm in ["ppo", "grpo", "dpo"] {
        let cfg = Config::from_yaml_str(
            &format!(
                "training: {{algorithm: {algorithm}, optimizer: adam, freeze: {{encoder_updates: 2, policy_head_updates: 1}}}}\n\
                 nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
                 ppo: {{update_epochs: 2, num_minibatches: 2}}\n\
                 grpo: {{update_epochs: 2}}\n\
                 dpo: {{update_epochs: 2}}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let mut l = Learner::new(&cfg, Device::Cpu, 0);
        let [enc0, head0, trunk0] = parts(&l);
        update(&mut l, &cfg, algorithm, 0);
        let [enc1, head1, trunk1] = parts(&l);
        assert_eq!(enc1, enc0, "{algorithm}: encoder frozen in update 1");
        assert_eq!(head1, head0, "{algorithm}: policy head frozen in update 1");
        assert_ne!(trunk1, trunk0, "{algorithm}: the trunk trains from the first update");
        update(&mut l, &cfg, algorithm, 1);
        let [enc2, head2, _] = parts(&l);
        assert_eq!(enc2, enc0, "{algorithm}: encoder frozen in update 2");
        assert_ne!(head2, head1, "{algorithm}: policy head trains from update 2");
        update(&mut l, &cfg, algorithm, 2);
        let [enc3, _, _] = parts(&l);
        assert_ne!(enc3, enc0, "{algorithm}: encoder trains from update 3");

        // Without `freeze` the same first update moves the encoder and the head.
        let plain = Config {
            training: rulka_config::TrainingConfig {
                freeze: Default::default(),
                ..cfg.training.clone()
            },
            ..cfg.clone()
        };
        let mut p = Learner::new(&plain, Device::Cpu, 0);
        update(&mut p, &plain, algorithm, 0);
        let [e, h, _] = parts(&p);
        assert_ne!(e, enc0, "{algorithm}");
        assert_ne!(h, head0, "{algorithm}");
    }
}

#[test]
fn a_frozen_parameter_is_left_out_of_the_gradient_norm() {
    // The same first PPO update with and without the encoder frozen: the
    // global gradient norm the update reports (the one clipping uses) must
    // leave the frozen encoder's gradients out.
    let yaml = |freeze: u64| {
        format!(
            "training: {{optimizer: adam, freeze: {{encoder_updates: {freeze}}}}}\n\
             nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
             ppo: {{update_epochs: 1, num_minibatches: 1, max_grad_norm: 1.0e-6}}\n"
        )
    };
    let mut norms = Vec::new();
    for freeze in [0, 1] {
        let cfg = Config::from_yaml_str(&yaml(freeze), "t.yaml").unwrap();
        let mut l = Learner::new(&cfg, Device::Cpu, 0);
        let s = l.ppo_update(&[traj(&cfg, 64, 0)]).unwrap();
        norms.push(s.grad_norm);
    }
    assert!(norms[1] < norms[0], "frozen encoder's gradients left out of the norm: {norms:?}");
}
