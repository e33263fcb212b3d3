//! Behaviour cloning (`rulka pretrain`, the original's `pretrain_bc.py`):
//! the actor-critic trained on demonstrations — cross-entropy on the
//! demonstrated actions, one head per `pretrain.bc_time_offsets_ms` offset
//! (averaged into the policy head at the end, as the original's loader
//! averages `bc_heads`), optional dropout on the features the heads read,
//! and the value head fitted to the drives' discounted returns under the
//! config's rewards (`ppo.gamma`, returns as PPO's GAE gives them with
//! λ = 1), so reinforcement learning does not start with a random critic.
//! Drives, never single frames, are held out; training stops early when the
//! held-out cross-entropy has not improved for `early_stop_patience`
//! epochs, keeping the best epoch's weights.

use anyhow::{bail, ensure, Context as _};
use rulka_config::Config;
use rulka_demos::Demo;
use tch::{Device, Kind, Tensor};

use crate::losses::gae;
use crate::optim::{OptimConfig, Optimizer};
use crate::rewards::{rollout_rewards, shaping_gamma, EngineeredCoefs, RolloutIngredients};
use crate::ActorCritic;

/// One epoch's figures.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EpochStats {
    /// 1-based epoch.
    pub epoch: u32,
    /// Mean training loss (cross-entropy over the offsets + value term).
    pub train_loss: f64,
    /// Training pairs whose every head's most likely action under the
    /// policy (the averaged head) is the demonstrated one.
    pub train_accuracy: f64,
    /// Held-out loss (NaN without held-out drives).
    pub held_out_loss: f64,
    /// Its cross-entropy part, mean over the offsets (NaN without held-out
    /// drives): what the early stop and the kept epoch are judged on.
    pub held_out_cross_entropy: f64,
    /// Held-out accuracy, as `train_accuracy` (NaN without held-out drives).
    pub held_out_accuracy: f64,
    /// Held-out value loss `0.5·(V − G)²` (NaN without held-out drives).
    pub held_out_value_loss: f64,
}

/// What a pretraining did.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct PretrainReport {
    /// Drives trained on.
    pub train_drives: usize,
    /// Drives held out.
    pub held_out_drives: usize,
    /// State-action pairs trained on.
    pub train_pairs: usize,
    /// State-action pairs held out.
    pub held_out_pairs: usize,
    /// Epochs run.
    pub epochs: u32,
    /// The epoch whose weights were kept.
    pub best_epoch: u32,
    /// Stopped before `pretrain.epochs` (no better held-out cross-entropy).
    pub stopped_early: bool,
    /// The kept epoch's held-out accuracy (NaN without held-out drives).
    pub held_out_accuracy: f64,
    /// The kept epoch's held-out loss.
    pub held_out_loss: f64,
    /// The kept epoch's held-out cross-entropy.
    pub held_out_cross_entropy: f64,
    /// The kept epoch's training accuracy.
    pub train_accuracy: f64,
    /// Sources of the held-out drives.
    pub held_out_sources: Vec<String>,
}

/// The pretrained network and, with several offsets, the heads it averaged
/// (`(weight, bias)` per offset, each shaped as `policy_head`'s).
#[derive(Debug)]
pub struct Pretrained {
    /// The network, its policy head the heads' average.
    pub net: ActorCritic,
    /// The offset heads (`bc_heads.{i}` of the original), in offset order;
    /// empty with one offset (the policy head itself was trained).
    pub heads: Vec<(Tensor, Tensor)>,
    /// What happened.
    pub report: PretrainReport,
}

/// Pairs as tensors: frames `(N,1,H,W)` u8, floats `(N,F)`, targets
/// `(N, K, heads)` i64 (K offsets), value targets `(N,)`.
struct Pairs {
    image: Tensor,
    floats: Tensor,
    targets: Tensor,
    returns: Tensor,
}

impl Pairs {
    fn len(&self) -> i64 {
        self.returns.size()[0]
    }

    fn select(&self, idx: &Tensor) -> Pairs {
        Pairs {
            image: self.image.index_select(0, idx),
            floats: self.floats.index_select(0, idx),
            targets: self.targets.index_select(0, idx),
            returns: self.returns.index_select(0, idx),
        }
    }
}

/// The discounted returns of `d`'s steps under `cfg`'s rewards (at frame 0
/// of the schedules) with `ppo.gamma`.
pub fn demo_returns(cfg: &Config, d: &Demo) -> Vec<f32> {
    let n = d.len();
    let meters: Vec<f32> = (0..n).map(|i| d.meters(i)).collect();
    let (rewards, dones) = rollout_rewards(
        cfg,
        RolloutIngredients {
            floats: &d.floats,
            meters: &meters,
            actions: &d.actions,
            race_time_ms: d.race_time_ms,
        },
        EngineeredCoefs::at(cfg, 0),
        shaping_gamma(cfg, 0),
    );
    gae(&rewards, &vec![0.0; n], &dones, cfg.ppo.gamma, 1.0).1
}

/// The demonstrated action `offset_ms` away from decision `t` of `d`:
/// rounded to whole decisions of `ms_per_decision`, clamped to the drive's
/// executed decisions (`0..len−1`).
pub fn offset_step(d: &Demo, t: usize, offset_ms: i64, ms_per_decision: f64) -> usize {
    let last = d.len().saturating_sub(2) as i64;
    let k = t as i64 + (offset_ms as f64 / ms_per_decision.max(1.0)).round() as i64;
    k.clamp(0, last.max(0)) as usize
}

/// The targets of `d`'s executed decisions (every state but the terminal
/// one): for each, per offset of `pretrain.bc_time_offsets_ms` (in that
/// order), the demonstrated actions of every head ([`offset_step`] with the
/// config's decision period), flattened `(steps, offsets, heads)`.
pub fn demo_targets(cfg: &Config, d: &Demo) -> Vec<i64> {
    let ms = crate::rewards::ms_per_step(cfg);
    let heads = d.n_heads;
    let mut out = Vec::new();
    for t in 0..d.len().saturating_sub(1) {
        for &o in &cfg.pretrain.bc_time_offsets_ms {
            let k = offset_step(d, t, o, ms);
            out.extend(d.actions[k * heads..(k + 1) * heads].iter().map(|&a| i64::from(a)));
        }
    }
    out
}

fn pairs_of(cfg: &Config, demos: &[&Demo], image: (i64, i64)) -> Pairs {
    let offsets = cfg.pretrain.bc_time_offsets_ms.len() as i64;
    let (mut frames, mut floats, mut targets, mut returns) = (vec![], vec![], vec![], vec![]);
    let (mut n, mut heads, mut nf, mut fl) = (0i64, 1usize, 0usize, 0usize);
    for d in demos {
        let g = demo_returns(cfg, d);
        (heads, nf, fl) = (d.n_heads, d.n_floats, d.frame_len);
        targets.extend(demo_targets(cfg, d));
        // The terminal state's action is never executed: not a demonstration.
        for (t, &ret) in g.iter().enumerate().take(d.len().saturating_sub(1)) {
            frames.extend_from_slice(&d.frames[t * fl..(t + 1) * fl]);
            floats.extend_from_slice(&d.floats[t * nf..(t + 1) * nf]);
            returns.push(ret);
            n += 1;
        }
    }
    let (h, w) = if fl as i64 == image.0 * image.1 { image } else { (1, fl.max(1) as i64) };
    if fl == 0 {
        frames = vec![0; n as usize];
    }
    Pairs {
        image: Tensor::from_slice(&frames).view([n, 1, h, w]),
        floats: Tensor::from_slice(&floats).view([n, nf as i64]),
        targets: Tensor::from_slice(&targets).view([n, offsets, heads as i64]),
        returns: Tensor::from_slice(&returns),
    }
}

/// Splits drive indices `0..n` into (train, held out): `round(n·fraction)`
/// drives held out (at least one when the fraction is positive and there
/// are two drives or more, never all), chosen by a shuffle seeded by `seed`.
pub fn split_drives(n: usize, fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        idx.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let mut held = (n as f64 * fraction).round() as usize;
    if fraction > 0.0 && n >= 2 {
        held = held.max(1);
    }
    held = held.min(n.saturating_sub(1));
    let mut held_out = idx.split_off(n - held);
    idx.sort_unstable();
    held_out.sort_unstable();
    (idx, held_out)
}

/// Behaviour cloning of `demos` into a fresh network for `cfg` on `device`
/// (seeded by `training.seed`); `on_epoch` sees each epoch's figures.
pub fn pretrain(
    cfg: &Config,
    demos: &[Demo],
    device: Device,
    mut on_epoch: impl FnMut(&EpochStats) -> anyhow::Result<()>,
) -> anyhow::Result<Pretrained> {
    let p = cfg.pretrain.clone();
    ensure!(!demos.is_empty(), "no demonstrations");
    let mut net = ActorCritic::new_pretrained(cfg, device, cfg.training.seed)?;
    let arch = net.arch().clone();
    let image = arch.image.as_ref().map_or((1, 1), |i| (i.height as i64, i.width as i64));
    let (train_ix, held_ix) = split_drives(demos.len(), p.held_out_fraction, cfg.training.seed);
    let train_d: Vec<&Demo> = train_ix.iter().map(|&i| &demos[i]).collect();
    let held_d: Vec<&Demo> = held_ix.iter().map(|&i| &demos[i]).collect();
    let train = pairs_of(cfg, &train_d, image);
    let held = (!held_d.is_empty()).then(|| pairs_of(cfg, &held_d, image));
    ensure!(train.len() > 0, "the training drives hold no state-action pairs");
    let (n_heads, n_actions) = (arch.n_heads as i64, arch.n_actions as i64);
    let k = p.bc_time_offsets_ms.len();
    let (pw, pb) = match (net.tensor("policy_head.weight"), net.tensor("policy_head.bias")) {
        (Some(w), Some(b)) => (w.shallow_clone(), b.shallow_clone()),
        _ => bail!("this network has no policy_head to clone actions into"),
    };
    // With one offset the policy head itself is trained; with several, one
    // head per offset starting from it.
    let heads: Vec<(Tensor, Tensor)> = if k == 1 {
        vec![(pw.shallow_clone(), pb.shallow_clone())]
    } else {
        (0..k)
            .map(|_| {
                (
                    pw.detach().copy().set_requires_grad(true),
                    pb.detach().copy().set_requires_grad(true),
                )
            })
            .collect()
    };
    let mut params = net.var_store().trainable_variables();
    if k > 1 {
        params.extend(heads.iter().flat_map(|(w, b)| [w.shallow_clone(), b.shallow_clone()]));
    }
    let mut opt = Optimizer::new(params, OptimConfig::from_training(&cfg.training, false));
    // Logits of every offset head `(K, B, heads·12)` and the value `(B,)`.
    let run = |net: &ActorCritic,
               b: &Pairs,
               train: bool|
     -> anyhow::Result<(Vec<Tensor>, Tensor)> {
        let (logits, value, features) =
            net.forward_features(&b.image.to_device(device), &b.floats.to_device(device));
        let value = value.squeeze_dim(-1);
        if k == 1 && p.dropout == 0.0 {
            return Ok((vec![logits], value));
        }
        let f = features.context(
            "pretrain.bc_time_offsets_ms with several offsets, or pretrain.dropout, needs a network whose policy head is one linear layer",
        )?;
        let f = if train && p.dropout > 0.0 { f.dropout(p.dropout, true) } else { f };
        Ok((heads.iter().map(|(w, b)| f.linear(w, Some(b))).collect(), value))
    };
    // Mean over offsets of the summed-over-heads cross-entropy, plus the value term.
    let losses = |logits: &[Tensor], value: &Tensor, b: &Pairs| -> (Tensor, Tensor) {
        let targets = b.targets.to_device(device);
        let mut ce = Tensor::zeros([], (Kind::Float, device));
        for (i, l) in logits.iter().enumerate() {
            let l = l.view([-1, n_heads, n_actions]).log_softmax(-1, Kind::Float);
            let tgt = targets.select(1, i as i64).unsqueeze(-1);
            ce -= l.gather(-1, &tgt, false).sum(Kind::Float) / b.len() as f64;
        }
        let ce = ce / logits.len() as f64;
        let v = (value - b.returns.to_device(device)).square().mean(Kind::Float) * 0.5;
        (ce, v)
    };
    // Accuracy of the policy (the heads' average) on the offset-0 action.
    let zero = p.bc_time_offsets_ms.iter().position(|&o| o == 0).unwrap_or(0) as i64;
    let accuracy = |logits: &[Tensor], b: &Pairs| -> f64 {
        let mean = Tensor::stack(logits, 0).mean_dim(0, false, Kind::Float);
        let pred = mean.view([-1, n_heads, n_actions]).argmax(-1, false);
        let tgt = b.targets.to_device(device).select(1, zero);
        pred.eq_tensor(&tgt)
            .all_dim(-1, false)
            .to_kind(Kind::Float)
            .mean(Kind::Float)
            .double_value(&[])
    };
    let evaluate = |net: &mut ActorCritic, b: &Pairs| -> anyhow::Result<(f64, f64, f64, f64)> {
        net.set_training(false);
        let (mut loss, mut celoss, mut vloss, mut acc) = (0.0, 0.0, 0.0, 0.0);
        let n = b.len();
        let bs = p.batch_size as i64;
        tch::no_grad(|| -> anyhow::Result<()> {
            for s in (0..n).step_by(bs as usize) {
                let idx = Tensor::arange_start(s, (s + bs).min(n), (Kind::Int64, Device::Cpu));
                let mb = b.select(&idx);
                let w = mb.len() as f64 / n as f64;
                let (logits, value) = run(net, &mb, false)?;
                let (ce, v) = losses(&logits, &value, &mb);
                let v = v.double_value(&[]);
                let ce = ce.double_value(&[]);
                loss += w * (ce + p.value_coef * v);
                celoss += w * ce;
                vloss += w * v;
                acc += w * accuracy(&logits, &mb);
            }
            Ok(())
        })?;
        net.set_training(true);
        Ok((loss, celoss, vloss, acc))
    };
    let mut report = PretrainReport {
        train_drives: train_d.len(),
        held_out_drives: held_d.len(),
        train_pairs: train.len() as usize,
        held_out_pairs: held.as_ref().map_or(0, |h| h.len() as usize),
        held_out_sources: held_d.iter().map(|d| d.source.clone()).collect(),
        held_out_loss: f64::NAN,
        held_out_cross_entropy: f64::NAN,
        held_out_accuracy: f64::NAN,
        ..PretrainReport::default()
    };
    let snapshot = |net: &ActorCritic| -> (rulka_checkpoint::Weights, Vec<(Tensor, Tensor)>) {
        (
            net.to_weights(),
            heads.iter().map(|(w, b)| (w.detach().copy(), b.detach().copy())).collect(),
        )
    };
    let mut best = (f64::INFINITY, snapshot(&net));
    let mut since_best = 0u32;
    tch::manual_seed(cfg.training.seed as i64);
    for epoch in 1..=p.epochs {
        net.set_training(true);
        let n = train.len();
        let perm = Tensor::randperm(n, (Kind::Int64, Device::Cpu));
        let bs = p.batch_size as i64;
        let (mut train_loss, mut seen) = (0.0, 0i64);
        for s in (0..n).step_by(bs as usize) {
            let mb = train.select(&perm.narrow(0, s, (s + bs).min(n) - s));
            let (logits, value) = run(&net, &mb, true)?;
            let (ce, v) = losses(&logits, &value, &mb);
            let loss = ce + v * p.value_coef;
            let lv = loss.double_value(&[]);
            opt.zero_grad();
            opt.backward(&loss);
            opt.step(lv, p.lr, crate::algorithms::max_grad_norm_at(cfg, 0))?;
            train_loss += lv * mb.len() as f64;
            seen += mb.len();
        }
        let (_, train_ce, _, train_acc) = evaluate(&mut net, &train)?;
        let (hl, hce, hv, ha) = match &held {
            Some(h) => evaluate(&mut net, h)?,
            None => (f64::NAN, f64::NAN, f64::NAN, f64::NAN),
        };
        let stats = EpochStats {
            epoch,
            train_loss: train_loss / seen.max(1) as f64,
            train_accuracy: train_acc,
            held_out_loss: hl,
            held_out_cross_entropy: hce,
            held_out_accuracy: ha,
            held_out_value_loss: hv,
        };
        on_epoch(&stats)?;
        report.epochs = epoch;
        // The policy decides, not the value head (returns of other tracks
        // are hard to predict, and their loss swings); without held-out
        // drives, the training drives' cross-entropy.
        let judged = if held.is_some() { hce } else { train_ce };
        if judged < best.0 {
            best = (judged, snapshot(&net));
            report.best_epoch = epoch;
            report.held_out_loss = hl;
            report.held_out_cross_entropy = hce;
            report.held_out_accuracy = ha;
            report.train_accuracy = train_acc;
            since_best = 0;
        } else {
            since_best += 1;
            if p.early_stop_patience > 0 && since_best >= p.early_stop_patience {
                report.stopped_early = epoch < p.epochs;
                break;
            }
        }
    }
    let (weights, best_heads) = best.1;
    net.load_weights(&weights, cfg, false).context("restoring the best epoch's weights")?;
    if k > 1 {
        tch::no_grad(|| {
            let w = Tensor::stack(
                &best_heads.iter().map(|h| h.0.shallow_clone()).collect::<Vec<_>>(),
                0,
            )
            .mean_dim(0, false, Kind::Float);
            let b = Tensor::stack(
                &best_heads.iter().map(|h| h.1.shallow_clone()).collect::<Vec<_>>(),
                0,
            )
            .mean_dim(0, false, Kind::Float);
            pw.shallow_clone().copy_(&w);
            pb.shallow_clone().copy_(&b);
        });
    }
    Ok(Pretrained { net, heads: if k > 1 { best_heads } else { Vec::new() }, report })
}
