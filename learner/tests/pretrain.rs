//! Behaviour cloning against hand-computed values — the split by drive,
//! the offset targets, the value targets (discounted returns under the
//! config's rewards) — and `pretrain` itself on drives of the simulator:
//! what it learns, the averaged offset heads, the early stop.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::{ingredients, Config};
use rulka_demos::Demo;
use rulka_learner::{
    demo_returns, demo_targets, offset_step, pretrain, rollout_rewards, shaping_gamma,
    split_drives, EngineeredCoefs, RolloutIngredients,
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
            rulka_test_support::margin::close("*a vs b", f64::from(*a), b, 1e-5);
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

/// Drives of the easy tracks `seeds`: full throttle, a tap of left or right
/// every second (so the actions 100 ms ahead differ from those taken).
fn weaving(cfg: &Config, seeds: &[u64]) -> Vec<Demo> {
    let weave: String = (0..30)
        .map(|i| {
            let key = if i % 2 == 0 { "left" } else { "right" };
            format!("{i}.50 press {key}\n{i}.70 rel {key}\n")
        })
        .collect();
    drives(cfg, seeds, &format!("0.00 press up\n{weave}"))
}

fn bc_config(pretrain: &str) -> Config {
    Config::from_yaml_str(
        &format!(
            "training: {{optimizer: adam}}\n\
             nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
             environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, sim: {{track: easy, track_seeds: [0, 1, 2, 3]}}}}\n\
             pretrain: {pretrain}\n"
        ),
        "t.yaml",
    )
    .unwrap()
}

/// Drives of the easy tracks `seeds` in phases of a second: full throttle,
/// throttle + left, full throttle, throttle + right, … — the action the
/// last decisions took (in the floats) predicts the next but at the 1 in 20
/// decisions where a phase changes.
fn phases(cfg: &Config, seeds: &[u64]) -> Vec<Demo> {
    let turns: String = (0..30)
        .filter(|i| i % 2 == 1)
        .map(|i| {
            let key = if i % 4 == 1 { "left" } else { "right" };
            format!("{i}.00 press {key}\n{}.00 rel {key}\n", i + 1)
        })
        .collect();
    drives(cfg, seeds, &format!("0.00 press up\n{turns}"))
}

/// The input script `text` driven on each of the easy tracks `seeds`.
fn drives(cfg: &Config, seeds: &[u64], text: &str) -> Vec<Demo> {
    let mut env = rulka_env::SimEnv::new(cfg);
    seeds
        .iter()
        .map(|&s| {
            rulka_demos::drive_script(cfg, &mut env, s, &format!("sim{s}.inputs"), text).unwrap()
        })
        .collect()
}

#[test]
fn pretraining_learns_the_demonstrated_actions_and_the_returns() {
    let cfg =
        bc_config("{epochs: 12, batch_size: 64, held_out_fraction: 0.25, early_stop_patience: 0}");
    let demos = phases(&cfg, &[0, 1, 2, 3]);
    let actions: Vec<i32> = demos.iter().flat_map(|d| d.actions[..d.len() - 1].to_vec()).collect();
    let majority = (0..12).map(|a| actions.iter().filter(|&&x| x == a).count()).max().unwrap()
        as f64
        / actions.len() as f64;
    assert!(majority < 0.7, "the drives mix their actions: {majority}");
    let mut seen = Vec::new();
    let p = pretrain(&cfg, &demos, tch::Device::Cpu, |s| {
        seen.push(*s);
        Ok(())
    })
    .unwrap();
    let r = &p.report;
    assert_eq!((r.train_drives, r.held_out_drives), (3, 1));
    let pairs: usize = demos.iter().map(|d| d.len() - 1).sum();
    assert_eq!(r.train_pairs + r.held_out_pairs, pairs, "the terminal states are no pairs");
    assert_eq!(seen.len(), 12);
    assert_eq!((r.epochs, r.stopped_early), (12, false));
    // Well past always answering the most frequent action.
    println!("{r:?} (majority {majority})\n{seen:?}");
    rulka_test_support::margin::at_most(
        "held-out miss rate (allowed: the majority answer's, less 0.2)",
        1.0 - r.held_out_accuracy,
        0.8 - majority,
    );
    let ratio = |f: fn(&rulka_learner::EpochStats) -> f64| f(&seen[11]) / f(&seen[0]);
    rulka_test_support::margin::at_most(
        "training loss, last ÷ first",
        ratio(|s| s.train_loss),
        0.5,
    );
    rulka_test_support::margin::at_most(
        "held-out value loss, last ÷ first",
        ratio(|s| s.held_out_value_loss),
        0.7,
    );
    let best = seen.iter().map(|s| s.held_out_cross_entropy).fold(f64::INFINITY, f64::min);
    assert_eq!(r.held_out_cross_entropy, best, "the best epoch's weights are the ones kept");
    assert!(p.heads.is_empty(), "one offset: the policy head itself was trained");
}

#[test]
fn offset_heads_train_apart_and_average_into_the_policy_head() {
    let cfg =
        bc_config("{epochs: 3, batch_size: 64, bc_time_offsets_ms: [0, 100, -100], dropout: 0.3}");
    let demos = weaving(&cfg, &[0, 1, 2]);
    let p = pretrain(&cfg, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    assert_eq!(p.heads.len(), 3);
    let data = |t: &tch::Tensor| Vec::<f32>::try_from(t.flatten(0, -1)).unwrap();
    let (w, b): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
        p.heads.iter().map(|(w, b)| (data(w), data(b))).unzip();
    assert_ne!(w[0], w[1], "trained on other targets");
    let net = p.net.to_weights();
    for (name, heads) in [("policy_head.weight", &w), ("policy_head.bias", &b)] {
        let got = &net.get(name).unwrap().data;
        for (j, g) in got.iter().enumerate() {
            let mean = heads.iter().map(|h| f64::from(h[j])).sum::<f64>() / 3.0;
            rulka_test_support::margin::close("*g vs mean", f64::from(*g), mean, 1e-6);
        }
    }
}

/// The kept epoch is judged on the held-out cross-entropy, never the value
/// loss: flat-out drives on six tracks (four trained on) make the value head
/// memorise its tracks, so its held-out loss swings from epoch to epoch
/// (docs/testing.md, issue 58), and `value_coef: 20` makes the total loss
/// follow the swing. On each of three training seeds (other splits and
/// initialisations) the kept epoch is the one with the lowest held-out
/// cross-entropy — its figures are the report's — and on at least one of
/// them the epoch with the lowest total loss is another (measured: seeds 0
/// and 2 on every CPU path and thread count of scripts/sweep, one to twelve
/// epochs apart; seed 1 on one of the six).
#[test]
fn the_kept_epoch_is_the_best_held_out_cross_entropy_not_the_best_total_loss() {
    let mut told_apart = 0;
    for seed in 0..3 {
        let mut cfg = bc_config(
            "{epochs: 20, batch_size: 64, held_out_fraction: 0.34, early_stop_patience: 0, value_coef: 20}",
        );
        cfg.training.seed = seed;
        cfg.environment.sim.track_seeds = (0..6).collect();
        let demos = drives(&cfg, &[0, 1, 2, 3, 4, 5], "0.00 press up\n");
        let mut seen = Vec::new();
        let p = pretrain(&cfg, &demos, tch::Device::Cpu, |s| {
            seen.push(*s);
            Ok(())
        })
        .unwrap();
        let argmin = |f: fn(&rulka_learner::EpochStats) -> f64| {
            seen.iter().min_by(|a, b| f(a).total_cmp(&f(b))).unwrap().epoch
        };
        let by_ce = argmin(|s| s.held_out_cross_entropy);
        let by_total = argmin(|s| s.held_out_loss);
        println!("seed {seed}: lowest cross-entropy at epoch {by_ce}, lowest total at {by_total}");
        told_apart += usize::from(by_ce != by_total);
        let r = &p.report;
        assert_eq!(r.best_epoch, by_ce, "seed {seed}: {r:?}");
        let kept = &seen[by_ce as usize - 1];
        assert_eq!(
            (r.held_out_cross_entropy, r.held_out_loss),
            (kept.held_out_cross_entropy, kept.held_out_loss),
            "seed {seed}"
        );
    }
    assert!(told_apart > 0, "no seed tells the two rules apart: the test would hold either");
}

#[test]
fn training_stops_when_the_held_out_loss_stops_improving() {
    let mut cfg =
        bc_config("{epochs: 8, batch_size: 64, held_out_fraction: 0.34, early_stop_patience: 2}");
    // A step too small to move any weight: the held-out loss never improves.
    cfg.pretrain.lr = 1e-30;
    let demos = weaving(&cfg, &[0, 1, 2]);
    let p = pretrain(&cfg, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    let r = &p.report;
    assert_eq!((r.best_epoch, r.epochs, r.stopped_early), (1, 3, true), "{r:?}");
    // Patience 0: every epoch runs.
    cfg.pretrain.early_stop_patience = 0;
    let p = pretrain(&cfg, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    assert_eq!((p.report.epochs, p.report.stopped_early), (8, false), "{:?}", p.report);
}

/// The stop at its edge, against a model: with a held-out loss that never
/// improves after epoch 1, patience `q` ends the run after epoch `1 + q`
/// when there is one, and it "stopped early" only if epochs were left —
/// patience running out on the last epoch is a run that ran them all.
#[test]
fn patience_running_out_on_the_last_epoch_is_not_an_early_stop() {
    let mut cfg =
        bc_config("{epochs: 3, batch_size: 64, held_out_fraction: 0.34, early_stop_patience: 2}");
    cfg.pretrain.lr = 1e-30;
    let demos = weaving(&cfg, &[0, 1, 2]);
    for (epochs, patience) in [(3, 2), (4, 2), (2, 2), (1, 1), (2, 1), (3, 1)] {
        cfg.pretrain.epochs = epochs;
        cfg.pretrain.early_stop_patience = patience;
        let r = pretrain(&cfg, &demos, tch::Device::Cpu, |_| Ok(())).unwrap().report;
        let ran = epochs.min(1 + patience);
        assert_eq!(
            (r.best_epoch, r.epochs, r.stopped_early),
            (1, ran, ran < epochs),
            "epochs {epochs}, patience {patience}: {r:?}"
        );
    }
}

#[test]
fn targets_are_the_actions_each_offset_away() {
    let mut cfg = Config::default();
    cfg.pretrain.bc_time_offsets_ms = vec![0, 100, -100];
    let mut d = demo(&cfg, 6, None);
    d.actions = vec![0, 1, 2, 3, 4, 5];
    // 50 ms decisions: ±100 ms is ±2 decisions, clamped to the executed 0..=4.
    assert_eq!(
        demo_targets(&cfg, &d),
        [[0, 2, 0], [1, 3, 0], [2, 4, 0], [3, 4, 1], [4, 4, 2]].concat()
    );
    // Two heads of 10 ms each: a decision is 20 ms; +20 ms is the next one.
    let mut two =
        Config::from_yaml_str("environment: {rl_action_offsets_ms: [0, 10]}\n", "t").unwrap();
    two.pretrain.bc_time_offsets_ms = vec![0, 20];
    let mut d = demo(&two, 4, None);
    d.n_heads = 2;
    d.actions = vec![0, 1, 2, 3, 4, 5, 6, 7];
    assert_eq!(demo_targets(&two, &d), [0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5]);
}

#[test]
fn dropout_changes_what_is_learned() {
    let base = "{epochs: 2, batch_size: 64, bc_time_offsets_ms: [0, 100], held_out_fraction: 0.0";
    let plain = bc_config(&format!("{base}, dropout: 0.0}}"));
    let dropped = bc_config(&format!("{base}, dropout: 0.5}}"));
    let demos = weaving(&plain, &[0, 1]);
    let a = pretrain(&plain, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    let b = pretrain(&dropped, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    let w = |p: &rulka_learner::Pretrained| {
        p.net.to_weights().get("trunk.0.weight").unwrap().data.clone()
    };
    assert_ne!(w(&a), w(&b));
}

#[test]
fn the_reported_losses_and_accuracy_are_what_the_network_gives() {
    // One epoch, one minibatch of every training pair: the epoch's training
    // loss is the freshly initialised network's; the held-out figures are
    // the trained network's on the held-out drive. Both recomputed here
    // from the network's outputs.
    let cfg =
        bc_config("{epochs: 1, batch_size: 100000, held_out_fraction: 0.34, value_coef: 0.7}");
    let demos = phases(&cfg, &[0, 1, 2]);
    let fresh =
        rulka_learner::ActorCritic::new_pretrained(&cfg, tch::Device::Cpu, cfg.training.seed)
            .unwrap();
    let mut seen = Vec::new();
    let p = pretrain(&cfg, &demos, tch::Device::Cpu, |s| {
        seen.push(*s);
        Ok(())
    })
    .unwrap();
    let held: Vec<&Demo> =
        demos.iter().filter(|d| p.report.held_out_sources.contains(&d.source)).collect();
    let train: Vec<&Demo> =
        demos.iter().filter(|d| !p.report.held_out_sources.contains(&d.source)).collect();
    assert_eq!((held.len(), train.len()), (1, 2));
    // (loss, value loss, accuracy) of `net` on `ds`, by hand.
    let figures = |net: &rulka_learner::ActorCritic, ds: &[&Demo]| -> (f64, f64, f64) {
        let (mut ce, mut v, mut hits, mut n) = (0.0, 0.0, 0.0, 0.0);
        for d in ds {
            let m = d.len() - 1;
            let image =
                tch::Tensor::from_slice(&d.frames[..m * d.frame_len]).view([m as i64, 1, 36, 36]);
            let floats = tch::Tensor::from_slice(&d.floats[..m * d.n_floats])
                .view([m as i64, d.n_floats as i64]);
            let (logits, value) = tch::no_grad(|| net.forward(&image, &floats));
            let logp =
                Vec::<f32>::try_from(logits.log_softmax(-1, tch::Kind::Float).flatten(0, -1))
                    .unwrap();
            let value = Vec::<f32>::try_from(value.flatten(0, -1)).unwrap();
            let g = demo_returns(&cfg, d);
            for t in 0..m {
                let row = &logp[t * 12..(t + 1) * 12];
                let a = d.actions[t] as usize;
                ce -= f64::from(row[a]);
                v += 0.5 * (f64::from(value[t]) - f64::from(g[t])).powi(2);
                let best = (0..12).max_by(|&i, &j| row[i].total_cmp(&row[j])).unwrap();
                hits += f64::from(u8::from(best == a));
                n += 1.0;
            }
        }
        ((ce + 0.7 * v) / n, v / n, hits / n)
    };
    let (loss0, _, _) = figures(&fresh, &train);
    rulka_test_support::margin::close(
        "seen[0].train_loss vs loss0",
        seen[0].train_loss,
        loss0,
        1e-4 * loss0.abs(),
    );
    let (hl, hv, ha) = figures(&p.net, &held);
    let s = seen[0];
    rulka_test_support::margin::close(
        "s.held_out_loss vs hl",
        s.held_out_loss,
        hl,
        1e-4 * hl.abs(),
    );
    rulka_test_support::margin::close(
        "s.held_out_value_loss vs hv",
        s.held_out_value_loss,
        hv,
        1e-4 * hv.abs(),
    );
    rulka_test_support::margin::close("s.held_out_accuracy vs ha", s.held_out_accuracy, ha, 1e-6);
    assert_eq!(p.report.held_out_loss, s.held_out_loss);
}

#[test]
fn two_heads_offset_heads_and_dropout_report_what_the_network_gives() {
    // Two action heads, two offset heads (100 ms ahead first, then the
    // action taken), dropout while training: the held-out figures are the
    // trained network's without dropout — each offset head's cross-entropy
    // summed over the action heads, averaged over the offsets, and the
    // accuracy of the averaged policy head on the action taken — recomputed
    // here from the network's features and the heads.
    let mut cfg = Config::from_yaml_str(
        "training: {optimizer: adam}\n\
         nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
         environment: {rl_action_offsets_ms: [0, 10], n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, sim: {track: easy, track_seeds: [0, 1, 2]}}\n\
         pretrain: {epochs: 1, batch_size: 64, held_out_fraction: 0.34, bc_time_offsets_ms: [100, 0], dropout: 0.5, value_coef: 0.3}\n",
        "t.yaml",
    )
    .unwrap();
    let demos = phases(&cfg, &[0, 1, 2]);
    assert_eq!(demos[0].n_heads, 2);
    let mut seen = Vec::new();
    let p = pretrain(&cfg, &demos, tch::Device::Cpu, |s| {
        seen.push(*s);
        Ok(())
    })
    .unwrap();
    let held: Vec<&Demo> =
        demos.iter().filter(|d| p.report.held_out_sources.contains(&d.source)).collect();
    assert_eq!(held.len(), 1);
    let d = held[0];
    let m = d.len() - 1;
    let image = tch::Tensor::from_slice(&d.frames[..m * d.frame_len]).view([m as i64, 1, 36, 36]);
    let floats =
        tch::Tensor::from_slice(&d.floats[..m * d.n_floats]).view([m as i64, d.n_floats as i64]);
    let (logits, value, features) = tch::no_grad(|| p.net.forward_features(&image, &floats));
    let features = features.unwrap();
    let targets = demo_targets(&cfg, d); // (steps, offsets, heads)
    let g = demo_returns(&cfg, d);
    let (mut ce, mut hits) = (0.0, 0.0);
    for (o, (w, b)) in p.heads.iter().enumerate() {
        let l = tch::no_grad(|| {
            features.linear(w, Some(b)).view([-1, 12]).log_softmax(-1, tch::Kind::Float)
        });
        let l = Vec::<f32>::try_from(l.flatten(0, -1)).unwrap();
        for t in 0..m {
            for h in 0..2 {
                let a = targets[(t * 2 + o) * 2 + h] as usize;
                ce -= f64::from(l[(t * 2 + h) * 12 + a]);
            }
        }
    }
    let ce = ce / 2.0 / m as f64;
    let pol = Vec::<f32>::try_from(logits.flatten(0, -1)).unwrap();
    for t in 0..m {
        let both = (0..2).all(|h| {
            let row = &pol[(t * 2 + h) * 12..(t * 2 + h + 1) * 12];
            let best = (0..12).max_by(|&i, &j| row[i].total_cmp(&row[j])).unwrap();
            best as i64 == targets[(t * 2 + 1) * 2 + h]
        });
        hits += f64::from(u8::from(both));
    }
    let value = Vec::<f32>::try_from(value.flatten(0, -1)).unwrap();
    let v = (0..m).map(|t| 0.5 * (f64::from(value[t]) - f64::from(g[t])).powi(2)).sum::<f64>()
        / m as f64;
    let s = seen[0];
    rulka_test_support::margin::close(
        "s.held_out_value_loss vs v",
        s.held_out_value_loss,
        v,
        1e-4 * v,
    );
    rulka_test_support::margin::close(
        "s.held_out_cross_entropy vs ce",
        s.held_out_cross_entropy,
        ce,
        1e-4 * ce,
    );
    let want = ce + 0.3 * v;
    rulka_test_support::margin::close(
        "s.held_out_loss vs want",
        s.held_out_loss,
        want,
        1e-4 * want,
    );
    let acc = hits / m as f64;
    rulka_test_support::margin::close("s.held_out_accuracy vs acc", s.held_out_accuracy, acc, 1e-6);
    cfg.pretrain.dropout = 0.0;
    let plain = pretrain(&cfg, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    let w = |p: &rulka_learner::Pretrained| {
        p.net.to_weights().get("trunk.0.weight").unwrap().data.clone()
    };
    assert_ne!(w(&p), w(&plain), "dropout changed the training");
}

#[test]
fn dropout_with_one_offset_trains_through_it() {
    let plain = bc_config("{epochs: 1, batch_size: 64, held_out_fraction: 0.0, dropout: 0.0}");
    let dropped = bc_config("{epochs: 1, batch_size: 64, held_out_fraction: 0.0, dropout: 0.5}");
    let demos = weaving(&plain, &[0, 1]);
    let a = pretrain(&plain, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    let b = pretrain(&dropped, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    let w = |p: &rulka_learner::Pretrained| {
        p.net.to_weights().get("trunk.0.weight").unwrap().data.clone()
    };
    assert_ne!(w(&a), w(&b));
}

/// The largest change of any weight that pretraining on the phase drives
/// of easy tracks 0 and 1 makes under `cfg`.
fn largest_move(cfg: &Config) -> f64 {
    let demos = phases(cfg, &[0, 1]);
    let before =
        rulka_learner::ActorCritic::new_pretrained(cfg, tch::Device::Cpu, cfg.training.seed)
            .unwrap()
            .to_weights();
    let p = pretrain(cfg, &demos, tch::Device::Cpu, |_| Ok(())).unwrap();
    let after = p.net.to_weights();
    let mut m = 0f32;
    for (name, t) in &after.tensors {
        for (a, b) in t.data.iter().zip(&before.tensors[name].data) {
            m = m.max((a - b).abs());
        }
    }
    f64::from(m)
}

/// Pretraining clips its gradient with the configured algorithm's clip
/// (GRPO's here), not PPO's: one step of Adam (one batch of every pair),
/// clipped to a norm of 1e-12, moves no weight by more than lr · 1e-12 /
/// eps = 1e-7; free, some by about lr = 1e-3 (the line 1e-5 is 100× from
/// either: the other algorithm's clip taken lands past it).
#[test]
fn pretraining_clips_with_the_configured_algorithms_max_grad_norm() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let run = |ppo: f64, grpo: f64| {
        let cfg = Config::from_yaml_str(
            &format!(
                "training: {{algorithm: grpo, optimizer: adam, adam_epsilon: 1.0e-8}}\n\
                 nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
                 environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
                 ppo: {{max_grad_norm: {ppo}}}\ngrpo: {{max_grad_norm: {grpo}}}\n\
                 pretrain: {{epochs: 1, batch_size: 100000, lr: 1.0e-3, held_out_fraction: 0.5, early_stop_patience: 0}}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        largest_move(&cfg)
    };
    rulka_test_support::margin::at_most(
        "GRPO's clip of 1e-12 (PPO's free)",
        run(1.0e9, 1.0e-12),
        1e-5,
    );
    rulka_test_support::margin::at_least(
        "GRPO's free clip (PPO's 1e-12)",
        run(1.0e-12, 1.0e9),
        1e-5,
    );
}

/// Pretraining happens before the first frame: every one of its steps
/// clips at the schedule's value at frame 0, however many samples it has
/// seen. A GRPO and a DPO schedule of 1e-12 at frame 0 and free from frame
/// 1 on, over batches of 32: every step clipped (Adam moves no weight by
/// more than lr · 1e-12 / eps = 1e-7 a step; one drive of at most 600
/// decisions trained on, at most 19 steps: under 1.9e-6, the line 1e-5);
/// a clip read at the samples seen frees every step after the first
/// (weights then move by about lr = 1e-3).
#[test]
fn every_pretraining_step_clips_at_the_schedules_frame_0_value() {
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    for algo in ["grpo", "dpo"] {
        let cfg = Config::from_yaml_str(
            &format!(
                "training: {{algorithm: {algo}, optimizer: adam, adam_epsilon: 1.0e-8}}\n\
                 nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
                 environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, sim: {{track: easy, track_seeds: [0, 1]}}}}\n\
                 {algo}: {{max_grad_norm: 1.0e9, max_grad_norm_schedule: [[0, 1.0e-12], [1, 1.0e9]]}}\n\
                 pretrain: {{epochs: 1, batch_size: 32, lr: 1.0e-3, held_out_fraction: 0.5, early_stop_patience: 0}}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let m = largest_move(&cfg);
        rulka_test_support::margin::at_most(
            &format!("{algo}: a clip of 1e-12 at frame 0 on every step"),
            m,
            1e-5,
        );
    }
}

/// `split_drives` against a model over every small case: n from 0 to 12
/// drives, fractions 0, just above 0, a fifth, a half, just under 1 and 1,
/// seeds 0–4: round(n·fraction) held out, at least one when the fraction
/// is above 0 and there are two drives or more (two included), never all;
/// the two parts partition 0..n, each sorted.
#[test]
fn split_drives_holds_out_the_models_count_at_every_edge() {
    for n in 0..=12usize {
        for fraction in [0.0, 1e-9, 0.2, 0.5, 0.999, 1.0] {
            for seed in 0..5 {
                let (train, held) = rulka_learner::split_drives(n, fraction, seed);
                let mut want = (n as f64 * fraction).round() as usize;
                if fraction > 0.0 && n >= 2 && want == 0 {
                    want = 1;
                }
                if n > 0 && want >= n {
                    want = n - 1;
                }
                let case =
                    format!("{n} drives, fraction {fraction}, seed {seed}: {train:?} / {held:?}");
                assert_eq!(held.len(), want, "{case}");
                let mut all: Vec<usize> = train.iter().chain(&held).copied().collect();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "{case}");
                assert!(
                    train.windows(2).all(|w| w[0] < w[1]) && held.windows(2).all(|w| w[0] < w[1]),
                    "{case}"
                );
            }
        }
    }
}
