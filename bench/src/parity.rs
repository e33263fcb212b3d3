//! `rulka bench cuda-parity`: one PPO, one GRPO and one DPO update of the
//! same network, on the same batch, from the same weights and seed, on the
//! CPU and on CUDA; the parameters after the update compared tensor by
//! tensor. In fp32 (with `NVIDIA_TF32_OVERRIDE=0` in the environment, so
//! cuDNN's convolutions are not TF32) the largest relative difference
//! `‖p_cuda − p_cpu‖ / ‖p_cpu‖` must stay under [`FP32_BOUND`]; under fp16
//! autocast with loss scaling (`training.mixed_precision`) under
//! [`AMP_BOUND`], with no step skipped for overflow. Without a GPU the CPU is
//! compared with itself (a check of the comparison: every difference must be
//! exactly 0).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use rulka_checkpoint::Weights;
use rulka_config::LearnerDevice;
use rulka_learner::{ActorCritic, Learner, TrajBatch, UpdateStats};
use tch::Device;

use crate::learner::random_rollouts;

/// Largest relative parameter difference allowed after an fp32 update.
pub const FP32_BOUND: f64 = 1e-4;
/// Largest relative parameter difference allowed after an fp16-autocast
/// update (fp16 keeps 11 significant bits: ~5e-4 per operation).
pub const AMP_BOUND: f64 = 1e-2;

/// Arguments of `rulka bench cuda-parity`.
#[derive(Debug)]
pub struct ParityArgs {
    /// Config shaping the network and the updates.
    pub config: PathBuf,
    /// Intra-op threads of the CPU side.
    pub threads: usize,
}

/// One update kind.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Ppo,
    Grpo,
    Dpo,
}

fn update(learner: &mut Learner, kind: Kind, data: &[TrajBatch]) -> anyhow::Result<UpdateStats> {
    match kind {
        Kind::Ppo => learner.ppo_update(data),
        Kind::Grpo => learner.grpo_update(data),
        Kind::Dpo => {
            let pairs: Vec<(TrajBatch, TrajBatch)> = data
                .chunks_exact(2)
                .map(|p| (p[0].shallow_clone(), p[1].shallow_clone()))
                .collect();
            learner.dpo_update(&pairs)?.context("no DPO pair was long enough")
        }
    }
}

/// The largest `‖b − a‖ / ‖a‖` over the tensors both hold, and its name.
pub fn max_relative_difference(a: &Weights, b: &Weights) -> (f64, String) {
    let mut worst = (0.0f64, String::new());
    for (name, ta) in &a.tensors {
        let Some(tb) = b.tensors.get(name) else { continue };
        let (mut diff, mut norm) = (0.0f64, 0.0f64);
        for (&x, &y) in ta.data.iter().zip(&tb.data) {
            diff += (f64::from(y) - f64::from(x)).powi(2);
            norm += f64::from(x).powi(2);
        }
        let rel = if norm > 0.0 { (diff / norm).sqrt() } else { diff.sqrt() };
        if rel > worst.0 || worst.1.is_empty() {
            worst = (rel, name.clone());
        }
    }
    worst
}

/// Runs the comparison and prints one line per update; `Ok(false)` when a
/// bound is broken or a step was skipped.
pub fn run_parity(args: &ParityArgs, out: &mut dyn Write) -> anyhow::Result<bool> {
    let cfg = rulka_trainer::load_config(&args.config)?;
    tch::set_num_threads(args.threads.max(1) as i32);
    let device = rulka_trainer::learner_device(LearnerDevice::Auto).map_err(anyhow::Error::msg)?;
    let tf32 = std::env::var("NVIDIA_TF32_OVERRIDE").map_or("default".into(), |v| v);
    writeln!(
        out,
        "CPU vs {} after one update from the same weights, batch and seed ({}; NVIDIA_TF32_OVERRIDE={tf32}); bounds: fp32 {FP32_BOUND:e}, fp16 autocast {AMP_BOUND:e}",
        rulka_trainer::device_name(device),
        args.config.display()
    )?;
    if device == Device::Cpu {
        writeln!(
            out,
            "  no CUDA device: the CPU is compared with itself (every difference must be 0)"
        )?;
    }
    let mut ok = true;
    for kind in [Kind::Ppo, Kind::Grpo, Kind::Dpo] {
        let data = match kind {
            Kind::Ppo => {
                let steps = cfg.ppo.rollout_steps_per_update.max(1) as usize;
                random_rollouts(&cfg, steps.div_ceil(256), 256.min(steps), 1)
            }
            Kind::Grpo => random_rollouts(&cfg, 8, 64, 2),
            Kind::Dpo => random_rollouts(&cfg, 4, 64, 3),
        };
        let mut reference = Learner::new(&cfg, Device::Cpu, 0);
        let start = reference.network().to_weights();
        update(&mut reference, kind, &data)?;
        let expected = reference.network().to_weights();
        for amp in [false, true] {
            let mut c = cfg.clone();
            c.training.mixed_precision = amp;
            let mut net = ActorCritic::new_unseeded(&c, device);
            net.load_weights(&start, &c, false)?;
            let mut learner = Learner::with_network(&c, net);
            let stats = update(&mut learner, kind, &data)
                .with_context(|| format!("{kind:?} update on {device:?}"))?;
            let (rel, name) = max_relative_difference(&expected, &learner.network().to_weights());
            let (bound, label) =
                if amp { (AMP_BOUND, "fp16 autocast") } else { (FP32_BOUND, "fp32") };
            let amp_on = amp && device.is_cuda();
            let good = rel <= bound
                && stats.skipped == 0
                && (device.is_cuda() || rel == 0.0)
                && (!amp_on || learner.optimizer().loss_scale() > 1.0);
            ok &= good;
            writeln!(
                out,
                "  {:<4} {label:<13} max ‖Δp‖/‖p‖ {rel:.2e} ({name}), steps {} applied, {} skipped, loss scale {}  {}",
                format!("{kind:?}").to_lowercase(),
                stats.steps,
                stats.skipped,
                learner.optimizer().loss_scale(),
                if good { "ok" } else { "FAILED" }
            )?;
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rulka_checkpoint::Tensor;

    fn weights(tensors: &[(&str, &[f32])]) -> Weights {
        let mut w = Weights::default();
        for (name, data) in tensors {
            w.tensors
                .insert((*name).into(), Tensor { shape: vec![data.len()], data: data.to_vec() });
        }
        w
    }

    /// ‖(3, 4.5) − (3, 4)‖ / ‖(3, 4)‖ = 0.5 / 5 = 0.1; the equal tensor and
    /// the one only `b` holds do not count.
    #[test]
    fn the_worst_tensor_is_named_with_its_relative_difference() {
        let a = weights(&[("x", &[3.0, 4.0]), ("y", &[1.0, 0.0]), ("z", &[0.0, 2.0])]);
        let b =
            weights(&[("x", &[3.0, 4.5]), ("y", &[1.0, 0.0]), ("z", &[0.0, 2.1]), ("w", &[9.0])]);
        let (rel, name) = max_relative_difference(&a, &b);
        assert_eq!(name, "x");
        assert!((rel - 0.1).abs() < 1e-9, "{rel}");
        let (rel, _) = max_relative_difference(&a, &a);
        assert_eq!(rel, 0.0);
        // A zero tensor's difference is absolute: ‖(0, 0.3)‖ = 0.3.
        let (rel, name) = max_relative_difference(
            &weights(&[("o", &[0.0, 0.0])]),
            &weights(&[("o", &[0.0, 0.3])]),
        );
        assert_eq!(name, "o");
        assert!((rel - 0.3).abs() < 1e-6, "{rel}");
    }
}
