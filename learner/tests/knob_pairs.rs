//! Knobs that act on the same quantity, both on at once, through the
//! update the trainer calls (the pairs of `rulka_config::knobs`): each
//! against a value by hand or the bit-identity it implies.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_checkpoint::Weights;
use rulka_config::Config;
use rulka_learner::{Learner, TrajBatch};
use tch::{Device, Kind, Tensor};

mod common;
use common::cfg;

/// A deterministic trajectory of `n` steps (index arithmetic, no RNG);
/// its return is `Σ_s ((s + k) % 3) − n + n·k/4` (returns of a group are
/// not symmetric about 0, so a clip of them is not a rescaling). The
/// behaviour log-probabilities lie within ±0.06 of the uniform policy's
/// ln(1/12) (importance ratios on both sides of 1), the collectors'
/// values within ±0.02 of 0 (a fresh value head's).
fn traj(cfg: &Config, n: i64, k: i64) -> TrajBatch {
    let f = cfg.float_input_dim() as i64;
    let steps = Tensor::arange(n, (Kind::Float, Device::Cpu));
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
        old_logp: (&steps * 1.7 + k as f64).sin() * 0.06 - 12f64.ln(),
        old_value: (&steps + k as f64).sin() * 0.02,
        rewards: (0..n).map(|s| ((s + k) % 3) as f32 - 1.0 + k as f32 / 4.0).collect(),
        group: 0,
    }
}

/// `t` with the behaviour log-probabilities the learner's policy gives
/// now, less `shift` (the importance ratio of every step is then `e^shift`).
fn behind(l: &Learner, mut t: TrajBatch, shift: f64) -> TrajBatch {
    let lp =
        tch::no_grad(|| l.network().evaluate_actions(&t.image, &t.floats, &t.actions).log_prob);
    t.old_logp = lp.detach() - shift;
    t
}

fn same(a: &Weights, b: &Weights) -> bool {
    a.tensors.iter().all(|(k, t)| t.data == b.tensors[k].data)
}

/// `grpo.early_stop_imp_ratio` × `grpo.micro_batch_steps`: an epoch whose
/// every micro-batch is dropped takes no optimiser step — not one on zero
/// gradients, which Adam's momentum from the update before would still
/// turn into a move — and ends the update.
#[test]
fn an_epoch_with_every_micro_batch_dropped_moves_nothing() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let c = cfg("grpo: {objective: clipped, update_epochs: 3, micro_batch_steps: 4, early_stop_imp_ratio: 2.0}");
    let mut l = Learner::new(&c, Device::Cpu, 3);
    // A first update, on the policy's own log-probabilities: Adam gets momentum.
    let first: Vec<TrajBatch> = (0..3).map(|k| behind(&l, traj(&c, 4, k), 0.0)).collect();
    let s = l.grpo_update(&first).unwrap();
    assert_eq!((s.steps, s.dropped_micro_batches), (3, 0), "{s:?}");
    // Every step's ratio e^5 ≈ 148 > 2: every micro-batch dropped.
    let late: Vec<TrajBatch> = (0..3).map(|k| behind(&l, traj(&c, 4, k), 5.0)).collect();
    let before = l.network().to_weights();
    let s = l.grpo_update(&late).unwrap();
    assert!(same(&before, &l.network().to_weights()), "weights moved: {s:?}");
    assert_eq!((s.steps, s.epochs), (0, 0), "{s:?}");
    assert_eq!(s.dropped_micro_batches, 3, "one epoch's three micro-batches, then the end: {s:?}");
}

/// `grpo.early_stop_imp_ratio` × `grpo.target_kl`: the KL the stop looks
/// at is the mean over the steps trained on. One trajectory's steps are
/// dropped (ratio e^5), the other's kept at ratio r = e^0.5: the KL per
/// kept step is r − 1 − ln r = e^0.5 − 1.5 = 0.1487; diluted by the
/// dropped steps it would be half that, under the target of 0.1.
#[test]
fn the_kl_a_grpo_stop_reads_is_over_the_steps_it_trained_on() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let c = cfg(
        "grpo: {objective: clipped, update_epochs: 3, micro_batch_steps: 4, early_stop_imp_ratio: 2.0, target_kl: 0.1}",
    );
    let l0 = Learner::new(&c, Device::Cpu, 5);
    let group = vec![behind(&l0, traj(&c, 4, 0), 5.0), behind(&l0, traj(&c, 4, 1), 0.5)];
    let mut l = Learner::new(&c, Device::Cpu, 5);
    let s = l.grpo_update(&group).unwrap();
    let want = 0.5f64.exp() - 1.5;
    // The float32 log-probabilities' difference is 0.5 within a few ulps
    // of their size (|lp| ≈ 2.5: 2.4e-7 each); the KL's slope there is
    // e^0.5 − 1 ≈ 0.65, so it is within 1e-6 of 0.1487 (allowed 1e-5: the
    // diluted value is 0.074 away).
    rulka_test_support::margin::close("approx_kl over the kept steps", s.approx_kl, want, 1e-5);
    assert_eq!(s.epochs, 1, "the stop after the first epoch: {s:?}");
    assert_eq!(s.dropped_micro_batches, 1, "{s:?}");
    // Every statistic of the epoch is over those steps: all four kept are
    // clipped (|e^0.5 − 1| = 0.65 > clip_eps_low 0.2; diluted: 0.5), and the
    // entropy is the kept trajectory's mean (float32 entropies of ≈ 2.48,
    // summed in f64: within 1e-6; diluted: half).
    assert_eq!(s.clipfrac, 1.0, "{s:?}");
    let kept = &group[1];
    let ent = tch::no_grad(|| {
        l0.network().evaluate_actions(&kept.image, &kept.floats, &kept.actions).entropy
    })
    .mean(Kind::Double)
    .double_value(&[]);
    rulka_test_support::margin::close("entropy over the kept steps", s.entropy, ent, 1e-6);
}

/// The same rule for the KL to the reference GRPO reports (`kl_ref`): a
/// second update, after the policy moved from the reference its first
/// update synced, drops one trajectory (ratio e^5) and keeps the other;
/// `kl_ref` is the mean of `log π − log π_ref` over the kept steps.
#[test]
fn the_kl_to_the_reference_grpo_reports_is_over_the_steps_it_trained_on() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let c = cfg(
        "training: {optimizer: adam, lr_schedule: [[0, 1.0e-2]]}\n\
         grpo: {objective: clipped, update_epochs: 1, micro_batch_steps: 4, early_stop_imp_ratio: 2.0, ref_kl_coef: 0.5, ref_sync_every_updates: 100}",
    );
    let mut l = Learner::new(&c, Device::Cpu, 7);
    let first: Vec<TrajBatch> = (0..3).map(|k| behind(&l, traj(&c, 4, k), 0.0)).collect();
    l.grpo_update(&first).unwrap();
    l.grpo_update(&first).unwrap();
    let group = vec![behind(&l, traj(&c, 4, 0), 5.0), behind(&l, traj(&c, 4, 1), 0.0)];
    let kept = &group[1];
    let lp = |n: &rulka_learner::ActorCritic| {
        tch::no_grad(|| n.evaluate_actions(&kept.image, &kept.floats, &kept.actions).log_prob)
    };
    let want = (lp(l.network()) - lp(l.reference().unwrap())).mean(Kind::Double).double_value(&[]);
    assert!(want.abs() > 1e-3, "the policy moved from its reference: {want}");
    let s = l.grpo_update(&group).unwrap();
    assert_eq!(s.dropped_micro_batches, 1, "{s:?}");
    // Float32 log-probabilities of ≈ 2.5 differ by a few ulps (2.4e-7)
    // however they are summed; diluted, the value would be half.
    rulka_test_support::margin::close("kl_ref over the kept steps", s.kl_ref, want, 1e-5);
}

/// `grpo.filter_zero_std` × `grpo.ref_sync_every_updates`: the reference
/// follows the update count, filtered groups' updates included. With a
/// sync every 2 updates: update 0 syncs, 1 does not, 2 (filtered: every
/// return the same) syncs to the policy after update 1, 3 does not.
#[test]
fn a_filtered_groups_update_still_syncs_the_reference_when_it_is_due() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let c = cfg(
        "grpo: {objective: reinforce, ref_kl_coef: 0.1, ref_sync_every_updates: 2, filter_zero_std: true, update_epochs: 1}",
    );
    let normal = |c: &Config| vec![traj(c, 4, 0), traj(c, 4, 1), traj(c, 4, 2)];
    let flat = |c: &Config| vec![traj(c, 4, 1), traj(c, 4, 1), traj(c, 4, 1)];
    let mut l = Learner::new(&c, Device::Cpu, 9);
    let initial = l.network().to_weights();
    l.grpo_update(&normal(&c)).unwrap();
    assert!(same(&l.reference().unwrap().to_weights(), &initial), "update 0 synced first");
    l.grpo_update(&normal(&c)).unwrap();
    let after_1 = l.network().to_weights();
    assert!(!same(&after_1, &initial), "the updates moved the policy");
    let s = l.grpo_update(&flat(&c)).unwrap();
    assert_eq!(s.frac_zero_std, 1.0, "the flat group was filtered: {s:?}");
    assert!(same(&l.reference().unwrap().to_weights(), &after_1), "update 2 is due to sync");
    l.grpo_update(&normal(&c)).unwrap();
    assert!(same(&l.reference().unwrap().to_weights(), &after_1), "update 3 is not");
}

/// Two values of a knob that each change an update by themselves: the
/// first is the one a pair turns on; `with` is what the knob needs to act
/// at all (merged in first).
struct Probe {
    key: &'static str,
    on: &'static str,
    other: &'static str,
    with: &'static [(&'static str, &'static str)],
}

const fn probe(key: &'static str, on: &'static str, other: &'static str) -> Probe {
    Probe { key, on, other, with: &[] }
}

/// Every knob an update reads (rulka_config::knobs), but the ones below.
const PROBES: &[Probe] = &[
    probe("training.global_schedule_speed", "3.0", "1.0"),
    Probe {
        key: "training.optimizer",
        on: "adamw",
        other: "adam",
        with: &[("training.weight_decay", "0.1")],
    },
    probe("training.lr_schedule", "[[0, 2.0e-3], [1000, 1.0e-3]]", "[[0, 5.0e-4]]"),
    // Under Adam: the default, RAdam, takes its first steps (while its
    // ρ_t ≤ 5, about five) as momentum SGD, without ε or β2.
    Probe {
        key: "training.adam_epsilon",
        on: "1.0e-3",
        other: "1.0e-8",
        with: &[("training.optimizer", "adam")],
    },
    Probe {
        key: "training.adam_beta1",
        on: "0.5",
        other: "0.9",
        with: &[("training.optimizer", "adam")],
    },
    Probe {
        key: "training.adam_beta2",
        on: "0.9",
        other: "0.999",
        with: &[("training.optimizer", "adam")],
    },
    Probe {
        key: "training.weight_decay",
        on: "0.1",
        other: "0.0",
        with: &[("training.optimizer", "adamw")],
    },
    probe("training.freeze.encoder_updates", "5", "0"),
    probe("training.freeze.policy_head_updates", "5", "0"),
    probe("training.augment.shift_px", "2", "4"),
    probe("ppo.gamma", "0.9", "0.5"),
    probe("ppo.gae_lambda", "0.8", "0.5"),
    probe("ppo.clip_coef", "0.02", "0.3"),
    probe("ppo.clip_coef_vf", "0.05", "10.0"),
    probe("ppo.ent_coef", "0.05", "0.0"),
    probe("ppo.vf_coef", "0.9", "0.3"),
    probe("ppo.max_grad_norm", "0.01", "10.0"),
    probe("ppo.update_epochs", "3", "2"),
    probe("ppo.num_minibatches", "2", "1"),
    probe("ppo.normalize_advantages", "false", "true"),
    probe("ppo.gamma_schedule", "[[0, 0.9], [1000, 0.5]]", "[[0, 0.6]]"),
    probe("ppo.gae_lambda_schedule", "[[0, 0.8], [1000, 0.4]]", "[[0, 0.5]]"),
    probe("ppo.ent_coef_schedule", "[[0, 0.05], [1000, 0.01]]", "[[0, 0.0]]"),
    probe("ppo.vf_coef_schedule", "[[0, 0.9], [1000, 0.1]]", "[[0, 0.3]]"),
    probe("ppo.target_kl", "1.0e-12", "1.0e9"),
    probe("ppo.normalize_returns", "true", "false"),
    Probe {
        key: "ppo.drac_coef",
        on: "0.5",
        other: "0.1",
        with: &[("training.augment.shift_px", "2")],
    },
    probe("ppo.aux_every_updates", "1", "0"),
    Probe { key: "ppo.aux_epochs", on: "2", other: "1", with: &[("ppo.aux_every_updates", "1")] },
    Probe {
        key: "ppo.aux_clone_coef",
        on: "2.0",
        other: "0.5",
        with: &[("ppo.aux_every_updates", "1")],
    },
    probe("ppo.popart_beta", "0.1", "null"),
    probe("ppo.sil_coef", "0.5", "0.0"),
    Probe { key: "ppo.sil_steps", on: "3", other: "1", with: &[("ppo.sil_coef", "0.5")] },
    probe("grpo.objective", "clipped", "reinforce"),
    probe("grpo.normalize_group", "mean_std", "mean"),
    Probe {
        key: "grpo.std_eps",
        on: "2.0",
        other: "1.0e-8",
        with: &[("grpo.normalize_group", "mean_std")],
    },
    probe("grpo.ent_coef", "0.05", "0.0"),
    probe("grpo.max_grad_norm", "0.01", "10.0"),
    probe("grpo.update_epochs", "3", "2"),
    probe("grpo.ref_sync_every_updates", "1", "10"),
    probe("grpo.ref_kl_coef", "0.3", "0.05"),
    Probe {
        key: "grpo.kl_estimator",
        on: "k3",
        other: "k1",
        with: &[("grpo.objective", "clipped"), ("grpo.ref_kl_coef", "0.3")],
    },
    Probe {
        key: "grpo.clip_eps_low",
        on: "0.02",
        other: "0.3",
        with: &[("grpo.objective", "clipped")],
    },
    Probe {
        key: "grpo.clip_eps_high",
        on: "0.02",
        other: "0.3",
        with: &[("grpo.objective", "clipped")],
    },
    Probe {
        key: "grpo.loss_aggregation",
        on: "token_mean",
        other: "seq_mean_token_sum",
        with: &[("grpo.objective", "clipped")],
    },
    Probe {
        key: "grpo.dr_grpo_max_len",
        on: "40",
        other: "100",
        with: &[("grpo.objective", "clipped"), ("grpo.loss_aggregation", "dr_grpo")],
    },
    probe("grpo.target_kl", "1.0e-12", "1.0e9"),
    probe("grpo.early_stop_imp_ratio", "1.0", "null"),
    probe("grpo.reward_clip", "0.5", "null"),
    probe("grpo.ent_coef_schedule", "[[0, 0.05], [1000, 0.01]]", "[[0, 0.0]]"),
    probe("grpo.max_grad_norm_schedule", "[[0, 0.01], [1000, 0.02]]", "[[0, 10.0]]"),
    Probe {
        key: "grpo.ref_kl_coef_schedule",
        on: "[[0, 0.3], [1000, 0.1]]",
        other: "[[0, 0.05]]",
        with: &[("grpo.ref_kl_coef", "0.3")],
    },
    probe("dpo.beta", "0.5", "0.1"),
    probe("dpo.loss", "ipo", "sigmoid"),
    probe("dpo.ref_sync_every_updates", "1", "10"),
    probe("dpo.vf_coef", "0.9", "0.1"),
    probe("dpo.update_epochs", "3", "2"),
    probe("dpo.max_grad_norm", "0.01", "10.0"),
    probe("dpo.beta_schedule", "[[0, 0.5], [1000, 0.2]]", "[[0, 0.1]]"),
    probe("dpo.vf_coef_schedule", "[[0, 0.9], [1000, 0.1]]", "[[0, 0.1]]"),
    probe("dpo.max_grad_norm_schedule", "[[0, 0.01], [1000, 0.02]]", "[[0, 10.0]]"),
];

/// Knobs an update reads that the generated pairs do not vary, and why.
const NOT_PROBED: &[(&str, &str)] = &[(
    "grpo.micro_batch_steps",
    "changes no result by design (the gradient is accumulated: grpo_update_is_the_same_with_and_without_micro_batching); with early_stop_imp_ratio it sets what is dropped: an_epoch_with_every_micro_batch_dropped_moves_nothing, the_kl_a_grpo_stop_reads_is_over_the_steps_it_trained_on",
)];

/// A config of `algorithm` with `settings` (dotted keys) as YAML.
fn config_of(algorithm: &str, settings: &[(&str, &str)]) -> Result<Config, String> {
    use std::collections::BTreeMap;
    #[derive(Default)]
    struct Node(BTreeMap<String, Node>, Option<String>);
    fn put(n: &mut Node, path: &[&str], v: &str) {
        match path {
            [] => n.1 = Some(v.to_string()),
            [head, rest @ ..] => put(n.0.entry((*head).to_string()).or_default(), rest, v),
        }
    }
    fn yaml(n: &Node) -> String {
        match &n.1 {
            Some(v) => v.clone(),
            None => format!(
                "{{{}}}",
                n.0.iter().map(|(k, c)| format!("{k}: {}", yaml(c))).collect::<Vec<_>>().join(", ")
            ),
        }
    }
    let mut root = Node::default();
    let base = [
        ("training.algorithm", algorithm),
        ("training.lr_schedule", "[[0, 2.0e-3]]"),
        ("ppo.update_epochs", "3"),
        ("ppo.num_minibatches", "2"),
        ("grpo.update_epochs", "3"),
        ("grpo.objective", "clipped"),
        ("grpo.ref_kl_coef", "0.1"),
        ("dpo.update_epochs", "3"),
    ];
    for (k, v) in base.iter().chain(settings) {
        put(&mut root, &k.split('.').collect::<Vec<_>>(), v);
    }
    let body: Vec<String> = root.0.iter().map(|(k, c)| format!("{k}: {}", yaml(c))).collect();
    Config::from_yaml_str(&format!("{}{}\n", common::SMALL_NET, body.join("\n")), "pair")
        .map_err(|e| e.to_string())
}

/// The weights after `updates` updates of `c`'s algorithm at frame 500 on
/// fixed data.
fn updated(c: &Config, updates: usize) -> Weights {
    let mut l = Learner::new(c, Device::Cpu, 21);
    l.frames = 500;
    for _ in 0..updates {
        match c.training.algorithm {
            rulka_config::Algorithm::Ppo => {
                l.ppo_update(&[traj(c, 6, 1), traj(c, 5, 2)]).unwrap();
            }
            rulka_config::Algorithm::Grpo => {
                l.grpo_update(&[traj(c, 4, 0), traj(c, 5, 1), traj(c, 6, 2)]).unwrap();
            }
            rulka_config::Algorithm::Dpo => {
                l.dpo_update(&[(traj(c, 4, 1), traj(c, 5, 2)), (traj(c, 6, 0), traj(c, 4, 3))])
                    .unwrap()
                    .unwrap();
            }
        }
    }
    l.network().to_weights()
}

/// Knobs whose effect shows only from an update's second one on (the
/// reference syncs, the aux phase, Adam's moments — its first step is
/// `lr·g/(|g|+ε)` whatever β1 and β2, and with a tiny target_kl an update
/// is one step): their pairs take two updates, the rest one.
const SECOND_UPDATE: &[&str] = &[
    "grpo.ref_sync_every_updates",
    "dpo.ref_sync_every_updates",
    "ppo.aux_every_updates",
    "ppo.aux_epochs",
    "ppo.aux_clone_coef",
    "training.adam_beta1",
    "training.adam_beta2",
    "training.adam_epsilon",
];

/// Pairs in which one knob is idle by design while the other is on, and
/// why: the test holds them idle (a change of the design shows here), on
/// top of the rule that a `*_schedule` wins over its fixed value.
const IDLE_BESIDE: &[(&str, &str, &str)] = &[
    (
        "ppo.update_epochs",
        "ppo.target_kl",
        "a target_kl of 1e-12 ends the update after its first epoch",
    ),
    (
        "grpo.update_epochs",
        "grpo.target_kl",
        "a target_kl of 1e-12 ends the update after its first epoch",
    ),
];

/// Every pair of knobs on one quantity of an update
/// (`rulka_config::knobs::update_pairs`), both on: each still acts — the
/// update with one of them changed differs from the update with both at
/// their probe values — or the config is refused naming one of them, or
/// the knob is idle by a rule of the design (a `*_schedule` wins over its
/// fixed value; `IDLE_BESIDE`), which is then held. A knob ignored when
/// another is on (a schedule ignored beside its fixed value, a clip
/// skipped in a second phase, an estimator that never reaches the loss)
/// makes its pair fail. Where one knob needs the other at a value to act
/// at all (`Probe::with`), that value is the other's "on".
#[test]
fn every_pair_of_knobs_on_one_quantity_acts_with_both_on() {
    tch::set_num_threads(1);
    use rulka_config::knobs::update_pairs;
    use rulka_config::Algorithm;
    let probe_of = |k: &str| PROBES.iter().find(|p| p.key == k);
    // Every knob of a pair is probed or said why not.
    for algorithm in [Algorithm::Ppo, Algorithm::Grpo, Algorithm::Dpo] {
        for (a, b, _) in update_pairs(algorithm) {
            for k in [a, b] {
                assert!(
                    probe_of(k).is_some() || NOT_PROBED.iter().any(|(n, _)| *n == k),
                    "{k}: a knob of an update's pairs; give it a probe"
                );
            }
        }
    }
    let idle_by_design = |idle: &str, beside: &str| {
        beside.strip_suffix("_schedule") == Some(idle)
            || IDLE_BESIDE.iter().any(|(i, b, _)| *i == idle && *b == beside)
    };
    let (mut checked, mut held_idle, mut refused, mut failures) = (0, 0, 0, Vec::new());
    let mut memo = std::collections::HashMap::new();
    let mut hits = 0;
    for algorithm in [Algorithm::Ppo, Algorithm::Grpo, Algorithm::Dpo] {
        let name = format!("{algorithm:?}").to_lowercase();
        for (a, b, q) in update_pairs(algorithm) {
            let (Some(pa), Some(pb)) = (probe_of(a), probe_of(b)) else { continue };
            // (on, other) of a knob, its "on" the value the other needs it at.
            let values =
                |p: &Probe, needs: &Probe| match needs.with.iter().find(|(k, _)| *k == p.key) {
                    Some(&(_, v)) if v != p.on => (v, p.on),
                    Some(&(_, v)) => (v, p.other),
                    None => (p.on, p.other),
                };
            let ((a_on, a_other), (b_on, b_other)) = (values(pa, pb), values(pb, pa));
            let settings = |va: &'static str, vb: &'static str| {
                let mut s: Vec<(&str, &str)> = pa
                    .with
                    .iter()
                    .chain(pb.with)
                    .filter(|(k, _)| *k != a && *k != b)
                    .copied()
                    .collect();
                s.push((a, va));
                s.push((b, vb));
                s
            };
            let updates = if [a, b].iter().any(|k| SECOND_UPDATE.contains(k)) { 2 } else { 1 };
            // One update per distinct config: pairs share their settings (a
            // knob's "both on" recurs across its pairs), and the update is a
            // function of the config and the fixed data alone.
            let mut run = |va, vb| {
                let c = config_of(&name, &settings(va, vb))?;
                let key = (format!("{c:?}"), updates);
                if let Some(w) = memo.get(&key) {
                    hits += 1;
                    return Ok(std::rc::Rc::clone(w));
                }
                let w = std::rc::Rc::new(updated(&c, updates));
                memo.insert(key, std::rc::Rc::clone(&w));
                Ok::<_, String>(w)
            };
            let named = |e: &String| e.contains(a) || e.contains(b);
            let both = match run(a_on, b_on) {
                Ok(w) => w,
                Err(e) if named(&e) => {
                    refused += 1;
                    continue;
                }
                Err(e) => panic!("{name}: {a} × {b}: refused for another reason: {e}"),
            };
            for (changed, beside, other) in [(a, b, run(a_other, b_on)), (b, a, run(a_on, b_other))]
            {
                match other {
                    Ok(w) => match (same(&w, &both), idle_by_design(changed, beside)) {
                        (false, false) => checked += 1,
                        (true, true) => held_idle += 1,
                        (true, false) => failures.push(format!(
                            "{name}: {changed} has no effect with both {a} and {b} on ({q:?})"
                        )),
                        (false, true) => failures.push(format!(
                            "{name}: {changed} acts beside {beside}, which should leave it idle"
                        )),
                    },
                    Err(e) if named(&e) => refused += 1,
                    Err(e) => panic!("{name}: {a} × {b}: refused for another reason: {e}"),
                }
            }
        }
    }
    println!(
        "{checked} effects checked, {held_idle} held idle by design, {refused} refusals naming the pair; {} updates run, {hits} configs met again",
        memo.len()
    );
    assert!(checked > 780, "only {checked} effects checked (806 when written)");
    assert!(held_idle >= 12, "only {held_idle} design rules held");
    assert!(
        failures.is_empty(),
        "{} knob(s) idle beside another:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The rule that a `*_schedule` wins over its fixed value, at the value's
/// edge: for every scheduled knob an update reads, the update with its
/// schedule on is the same whether the fixed value is 0 (a coefficient
/// that turns its term off) or its probe's value — or 0 is refused, named.
/// A decision taken on the fixed value (a term built only when the value
/// is above 0) makes the schedule idle at a fixed value of 0.
#[test]
fn a_schedule_wins_over_its_value_even_at_zero() {
    tch::set_num_threads(1);
    let (mut checked, mut refused) = (0, 0);
    for p in PROBES.iter().filter(|p| p.key.ends_with("_schedule")) {
        let value = p.key.strip_suffix("_schedule").unwrap();
        let Some(pv) = PROBES.iter().find(|q| q.key == value) else { continue };
        let algorithm = value.split('.').next().unwrap();
        let mut with: Vec<(&str, &str)> =
            p.with.iter().filter(|(k, _)| *k != value).copied().collect();
        with.push((p.key, p.on));
        let at = |v: &'static str| {
            let mut s = with.clone();
            s.push((value, v));
            config_of(algorithm, &s).map(|c| updated(&c, 1))
        };
        match (at("0.0"), at(pv.on)) {
            (Ok(zero), Ok(on)) => {
                assert!(same(&zero, &on), "{algorithm}: {} is idle beside {value}: 0", p.key);
                checked += 1;
            }
            (Err(e), _) if e.contains(value) => refused += 1,
            (a, b) => {
                panic!("{algorithm}: {} with {value} 0: {:?} / {:?}", p.key, a.err(), b.err())
            }
        }
    }
    println!(
        "{checked} schedules checked beside a value of 0, {refused} refusals naming the value"
    );
    assert!(checked >= 5, "only {checked} schedules checked");
}
