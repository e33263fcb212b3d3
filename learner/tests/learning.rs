//! PPO, both GRPO objectives and DPO each learn a contextual bandit with the
//! real network shapes: the rewarded action (0 = forward or 6 = brake) depends
//! on the sign of one float input. A random policy is right 1/12 of the time.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::{Learner, TrajBatch};
use std::sync::{Mutex, MutexGuard};
use tch::{Device, Kind, Tensor};

/// libtorch's random generator is one per process, shared by the test threads:
/// each test holds this lock from its `manual_seed` on, so its draws (contexts,
/// sampled actions, mini-batch order) are its own and the seed reproduces it.
static TORCH_RNG: Mutex<()> = Mutex::new(());

fn seeded(seed: i64) -> MutexGuard<'static, ()> {
    let guard = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(seed);
    guard
}

fn cfg(extra: &str) -> Config {
    cfg_lr(extra, 0.001)
}

fn cfg_lr(extra: &str, lr: f64) -> Config {
    Config::from_yaml_str(
        &format!(
            "training: {{lr_schedule: [[0, {lr}]]}}\nnn: {{image_width: 36, image_height: 36, float_hidden_dim: 32, dense_hidden_dim: 64}}\nenvironment: {{n_zone_centers_in_inputs: 1, n_prev_actions_in_inputs: 0, n_contact_material_physics_behavior_types: 0}}\n{extra}"
        ),
        "t",
    )
    .unwrap()
}

struct Bandit {
    mean: Tensor,
    std: Tensor,
}

impl Bandit {
    fn new(cfg: &Config) -> Self {
        let (m, s) = rulka_config::float_inputs_mean_std(cfg);
        Self { mean: Tensor::from_slice(&m), std: Tensor::from_slice(&s) }
    }
    /// `n` contexts: (frames, raw floats, rewarded action).
    fn contexts(&self, n: i64) -> (Tensor, Tensor, Vec<i64>) {
        let noise = Tensor::randn([n, self.mean.size()[0]], (Kind::Float, Device::Cpu));
        let targets =
            (0..n).map(|i| if noise.double_value(&[i, 0]) > 0.0 { 0 } else { 6 }).collect();
        let image =
            Tensor::randint(256, [n, 1, 36, 36], (Kind::Int64, Device::Cpu)).to_kind(Kind::Uint8);
        (image, &noise * &self.std + &self.mean, targets)
    }
}

/// Samples one action per row: (actions, log-probs, values).
fn act(l: &Learner, image: &Tensor, floats: &Tensor) -> (Tensor, Tensor, Tensor) {
    tch::no_grad(|| {
        let (logits, value) = l.network().forward(image, floats);
        let logp_all = logits.log_softmax(-1, Kind::Float);
        let a = logp_all.exp().multinomial(1, true);
        (a.shallow_clone(), logp_all.gather(1, &a, false).squeeze_dim(1), value.squeeze_dim(1))
    })
}

#[allow(clippy::too_many_arguments)]
fn traj(
    image: &Tensor,
    floats: &Tensor,
    a: &Tensor,
    lp: &Tensor,
    v: &Tensor,
    i: i64,
    reward: f32,
    group: u64,
) -> TrajBatch {
    let r = |t: &Tensor| t.narrow(0, i, 1);
    TrajBatch {
        image: r(image),
        floats: r(floats),
        actions: r(a),
        old_logp: r(lp),
        old_value: r(v),
        rewards: vec![reward],
        group,
    }
}

fn greedy_accuracy(l: &Learner, b: &Bandit) -> f64 {
    let (image, floats, targets) = b.contexts(300);
    let (logits, _) = tch::no_grad(|| l.network().forward(&image, &floats));
    let best = logits.argmax(-1, false);
    (0..300).filter(|&i| best.int64_value(&[i]) == targets[i as usize]).count() as f64 / 300.0
}

fn reward(a: &Tensor, i: i64, target: i64) -> f32 {
    if a.int64_value(&[i, 0]) == target {
        1.0
    } else {
        0.0
    }
}

#[test]
fn ppo_learns_the_bandit() {
    let _rng = seeded(1);
    let cfg = cfg(
        "ppo: {update_epochs: 4, num_minibatches: 4, ent_coef: 0.0, normalize_advantages: true}",
    );
    let (mut l, b) = (Learner::new(&cfg, Device::Cpu, 1), Bandit::new(&cfg));
    let before = greedy_accuracy(&l, &b);
    for _ in 0..60 {
        let (image, floats, targets) = b.contexts(64);
        let (a, lp, v) = act(&l, &image, &floats);
        let rollouts: Vec<TrajBatch> = (0..64)
            .map(|i| traj(&image, &floats, &a, &lp, &v, i, reward(&a, i, targets[i as usize]), 0))
            .collect();
        let s = l.ppo_update(&rollouts).unwrap();
        assert!(s.loss.is_finite() && s.steps > 0);
    }
    let after = greedy_accuracy(&l, &b);
    println!("PPO: greedy accuracy {before:.2} -> {after:.2}");
    rulka_test_support::margin::at_most("PPO: greedy miss rate on the bandit", 1.0 - after, 0.2);
}

fn grpo_run(objective: &str) -> (f64, f64) {
    let _rng = seeded(2);
    // The original's grouping (any K trajectories; here K = 16 distinct contexts) and
    // its early exploration: config_grpo.yaml starts ent_coef at 0.5. With 0.01 the
    // policy collapses to one action within ~50 updates and REINFORCE stalls.
    //
    // Equal-return groups are skipped (`filter_zero_std`, rulka's option; the
    // original, and rulka's default, takes an entropy-only step on them): over
    // 8 seeds REINFORCE without the filter stalled once at 0.48 (one rewarded
    // action for every context), with it every seed reached >= 0.92; the
    // clipped objective reached >= 0.92 either way.
    let cfg = cfg_lr(&format!("grpo: {{objective: {objective}, grouping: any, group_size: 16, update_epochs: 3, ent_coef: 0.1, normalize_group: mean_std, micro_batch_steps: 5, filter_zero_std: true}}"), 0.001);
    let (mut l, b) = (Learner::new(&cfg, Device::Cpu, 2), Bandit::new(&cfg));
    let before = greedy_accuracy(&l, &b);
    for step in 0..450u64 {
        let (image, floats, targets) = b.contexts(16);
        let (a, lp, v) = act(&l, &image, &floats);
        let group: Vec<TrajBatch> = (0..16)
            .map(|i| {
                traj(&image, &floats, &a, &lp, &v, i, reward(&a, i, targets[i as usize]), step)
            })
            .collect();
        let s = l.grpo_update(&group).unwrap();
        assert!(s.loss.is_finite());
    }
    (before, greedy_accuracy(&l, &b))
}

#[test]
fn grpo_reinforce_learns_the_bandit() {
    let (before, after) = grpo_run("reinforce");
    println!("GRPO reinforce: greedy accuracy {before:.2} -> {after:.2}");
    rulka_test_support::margin::at_most(
        "GRPO reinforce: greedy miss rate on the bandit",
        1.0 - after,
        0.2,
    );
}

#[test]
fn grpo_clipped_learns_the_bandit() {
    let (before, after) = grpo_run("clipped");
    println!("GRPO clipped: greedy accuracy {before:.2} -> {after:.2}");
    rulka_test_support::margin::at_most(
        "GRPO clipped: greedy miss rate on the bandit",
        1.0 - after,
        0.2,
    );
}

#[test]
fn dpo_learns_the_bandit() {
    let _rng = seeded(3);
    // A reference that stays put (synced every 1000 updates): with the original's
    // `ref_sync_every_updates: 1` and one epoch the reference always equals the
    // policy, the loss sits at ln 2 and the logits are pushed apart without bound.
    let cfg = cfg_lr(
        "dpo: {beta: 0.5, update_epochs: 3, vf_coef: 0.1, ref_sync_every_updates: 1000}",
        0.003,
    );
    let (mut l, b) = (Learner::new(&cfg, Device::Cpu, 3), Bandit::new(&cfg));
    let before = greedy_accuracy(&l, &b);
    for _ in 0..300 {
        // One preference pair per pair of contexts (c, c + 8), from explored
        // actions (DPO is off-policy, and a policy that has become deterministic
        // would only produce ties): the rewarded actions are chosen; rejected are
        // the other context's answers for even c (the contrast that matters),
        // any wrong actions for odd c. One kind per pair: a pair's margin sums
        // its steps, and mixing kinds within a pair let a context-blind policy
        // satisfy it (over 8 seeds, 5 ended below 0.8, 3 of them near 0.5;
        // with one kind per pair those 3 reach 0.89-0.91). 2-step trajectories: the original
        // skips pairs shorter than 2 steps.
        let (image, floats, targets) = b.contexts(16);
        let (_, lp, v) = act(&l, &image, &floats);
        let mut pairs = Vec::new();
        for c in 0..8i64 {
            let steps = [c, c + 8];
            let good: Vec<i64> = steps.iter().map(|&s| targets[s as usize]).collect();
            let swapped: Vec<i64> = good.iter().map(|t| 6 - t).collect();
            let any_wrong: Vec<i64> = good
                .iter()
                .map(|t| {
                    (t + 1 + Tensor::randint(11, [1], (Kind::Int64, Device::Cpu)).int64_value(&[0]))
                        % 12
                })
                .collect();
            let idx = Tensor::from_slice(&steps);
            let r = |x: &Tensor| x.index_select(0, &idx);
            let mk = |a: &[i64], rew: f32| TrajBatch {
                image: r(&image),
                floats: r(&floats),
                actions: Tensor::from_slice(a).reshape([2, 1]),
                old_logp: r(&lp),
                old_value: r(&v),
                rewards: vec![rew; 2],
                group: c as u64,
            };
            let bad = if c % 2 == 0 { &swapped } else { &any_wrong };
            for (k, (&t, &w)) in good.iter().zip(bad).enumerate() {
                let target = targets[steps[k] as usize];
                let r = |a: i64| reward(&Tensor::from_slice(&[a]).reshape([1, 1]), 0, target);
                assert_eq!((r(t), r(w)), (1.0, 0.0));
            }
            pairs.push((mk(&good, 1.0), mk(bad, 0.0)));
        }
        let s = l.dpo_update(&pairs).unwrap().expect("2-step pairs are trained on");
        assert!(s.loss.is_finite());
    }
    let after = greedy_accuracy(&l, &b);
    println!("DPO: greedy accuracy {before:.2} -> {after:.2}");
    // DPO plateaus here at 0.89–0.96 (300 updates or 500 alike, on every CPU
    // path of scripts/sweep); the failure this test was made for is a
    // context-blind policy near 0.5. A miss rate of at most 0.35 sits 3.2×
    // above the plateau's worst (0.11) and 1.4× under the context-blind 0.5.
    rulka_test_support::margin::at_most("DPO: greedy miss rate on the bandit", 1.0 - after, 0.35);
}

#[test]
fn a_group_mixing_prompts_is_an_error() {
    let _rng = seeded(4);
    let c = cfg("grpo: {group_size: 2, filter_zero_std: true}");
    let (mut l, b) = (Learner::new(&c, Device::Cpu, 4), Bandit::new(&c));
    let (image, floats, _) = b.contexts(2);
    let (a, lp, v) = act(&l, &image, &floats);
    let group = vec![
        traj(&image, &floats, &a, &lp, &v, 0, 1.0, 7),
        traj(&image, &floats, &a, &lp, &v, 1, 0.0, 8),
    ];
    let e = l.grpo_update(&group).unwrap_err();
    assert!(e.to_string().contains("mixes prompt ids [7, 8]"), "{e}");
    // Grouped as the original groups (`any`), the same runs are one group.
    let any = cfg("grpo: {group_size: 2, grouping: any}");
    let s = Learner::new(&any, Device::Cpu, 4).grpo_update(&group).unwrap();
    assert!(s.steps > 0 && s.loss.is_finite(), "{s:?}");
    // With `filter_zero_std`, a zero-spread group is filtered, not trained on.
    let flat = vec![
        traj(&image, &floats, &a, &lp, &v, 0, 1.0, 7),
        traj(&image, &floats, &a, &lp, &v, 1, 1.0, 7),
    ];
    let before = l.network().to_weights();
    let s = l.grpo_update(&flat).unwrap();
    assert_eq!((s.frac_zero_std, s.steps), (1.0, 0));
    assert_eq!(l.network().to_weights(), before);
}

/// One GRPO update with micro-batches of 2 steps vs one batch of everything:
/// identical starting weights and data must give (numerically) identical weights.
#[test]
fn grpo_update_is_the_same_with_and_without_micro_batching() {
    let _rng = seeded(5);
    for objective in ["reinforce", "clipped"] {
        let cfg = |micro: u32| {
            cfg(&format!("grpo: {{objective: {objective}, grouping: any, group_size: 4, update_epochs: 1, ent_coef: 0.05, ref_kl_coef: 0.1, micro_batch_steps: {micro}}}"))
        };
        let (cfg_full, cfg_micro) = (cfg(1000), cfg(2));
        let mut full = Learner::new(&cfg_full, Device::Cpu, 9);
        let mut net = rulka_learner::ActorCritic::new_unseeded(&cfg_micro, Device::Cpu);
        net.load_weights(&full.network().to_weights(), &cfg_micro, false).unwrap();
        let mut micro = Learner::with_network(&cfg_micro, net);
        // Trajectories of 3, 1, 4 and 2 steps, generated once.
        let b = Bandit::new(&cfg_full);
        let data: Vec<_> = [3i64, 1, 4, 2]
            .iter()
            .map(|&len| {
                let (image, floats, _) = b.contexts(len);
                let (a, lp, v) = act(&full, &image, &floats);
                (image, floats, a, lp, v, len)
            })
            .collect();
        let group = || -> Vec<TrajBatch> {
            data.iter()
                .enumerate()
                .map(|(k, (image, floats, a, lp, v, len))| TrajBatch {
                    image: image.copy(),
                    floats: floats.copy(),
                    actions: a.copy(),
                    old_logp: lp.copy(),
                    old_value: v.copy(),
                    rewards: vec![k as f32; *len as usize],
                    group: 0,
                })
                .collect()
        };
        assert_eq!(full.grpo_update(&group()).unwrap().steps, 1);
        assert_eq!(micro.grpo_update(&group()).unwrap().steps, 1);
        let (wf, wm) = (full.network().to_weights(), micro.network().to_weights());
        let (mut num, mut den) = (0f64, 0f64);
        for (name, t) in &wf.tensors {
            for (x, y) in t.data.iter().zip(&wm.tensors[name].data) {
                num += f64::from(x - y).powi(2);
                den += f64::from(*x).powi(2);
            }
        }
        let rel = (num / den).sqrt();
        rulka_test_support::margin::at_most(
            &format!("{objective}: relative weight difference, micro-batched"),
            rel,
            1e-6,
        );
        assert!(
            wf != Learner::new(&cfg_full, Device::Cpu, 9).network().to_weights(),
            "the update changed nothing"
        );
    }
}
