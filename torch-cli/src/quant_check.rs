//! How far a weight-quantized export's policy is from the `f32` export of the
//! same checkpoint, measured on what the policy actually sees: observations
//! recorded from simulator rollouts driven by the `f32` model, plus random and
//! extreme inputs.

use anyhow::Context as _;
use rulka_config::Config;
use rulka_env::{Environment, SimEnv};
use rulka_inference::{EngineOptions, PolicyEngine};
use rulka_inference::{Model, ModelSource, Runtime};
use rulka_network::Architecture;

/// Observations a quantized export is checked on, at least.
pub const MIN_OBSERVATIONS: usize = 10_000;
/// Actions per head.
const N_ACTIONS: usize = 12;

/// Observations: `n` frames `[n, 1, H, W]` and float vectors `[n, F]`.
#[derive(Debug, Clone, Default)]
pub struct Observations {
    /// Raw frames, one after another.
    pub frames: Vec<u8>,
    /// Raw floats, one vector after another.
    pub floats: Vec<f32>,
    /// How many.
    pub n: usize,
}

/// One action head's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadStats {
    /// Mean KL(π_fp32 ‖ π_quant) over the observations (nats).
    pub mean_kl: f64,
    /// Largest KL.
    pub max_kl: f64,
    /// Fraction of observations where both pick the same most likely action.
    pub agreement: f64,
}

/// Per head, and the value's largest difference.
#[derive(Debug, Clone, Default)]
pub struct QuantReport {
    /// Observations compared.
    pub observations: usize,
    /// Per action head.
    pub heads: Vec<HeadStats>,
    /// max |V_fp32 − V_quant|.
    pub max_dvalue: f64,
}

impl QuantReport {
    /// The worst head's mean KL.
    pub fn mean_kl(&self) -> f64 {
        self.heads.iter().map(|h| h.mean_kl).fold(0.0, f64::max)
    }

    /// Every head's mean KL within `bound` (and the figures finite).
    pub fn passed(&self, bound: f64) -> bool {
        let kl = self.mean_kl();
        kl.is_finite() && self.max_dvalue.is_finite() && kl <= bound
    }
}

/// Drives the simulator with the `f32` model (sampling, `seed`), cycling
/// through the config's tracks, and records the first `n` observations.
pub fn record_observations(
    cfg: &Config,
    rt: Runtime,
    fp32: &[u8],
    n: usize,
    seed: u64,
) -> anyhow::Result<Observations> {
    let mut engine = PolicyEngine::new(
        rt,
        cfg,
        ModelSource::Bytes(fp32.to_vec()),
        0,
        EngineOptions { greedy: false, seed },
    )
    .context("opening the f32 model")?;
    let mut env = SimEnv::new(cfg);
    let (frame_len, float_len) = env.obs_sizes();
    let tracks = rulka_collector::prompts(cfg);
    let mut obs = Observations {
        frames: Vec::with_capacity(n * frame_len),
        floats: Vec::with_capacity(n * float_len),
        n: 0,
    };
    let (mut frame, mut floats) = (vec![0u8; frame_len], vec![0f32; float_len]);
    let mut episode = 0usize;
    env.reset(tracks[0])?;
    while obs.n < n {
        env.observe(&mut frame, &mut floats)?;
        obs.frames.extend_from_slice(&frame);
        obs.floats.extend_from_slice(&floats);
        obs.n += 1;
        if obs.n % 2_500 == 0 {
            eprintln!("  recorded {} / {n} observations ({} rollouts)", obs.n, episode + 1);
        }
        let action = engine.act(&frame, &floats)?;
        if env.step(action.actions())?.is_done() {
            episode += 1;
            env.reset(tracks[episode % tracks.len()])?;
        }
    }
    Ok(obs)
}

/// What each block of [`synthetic_observations`] holds, in order.
pub const SYNTHETIC_CASES: [&str; 4] =
    ["random frames, random floats", "all-0 frames", "all-255 frames", "floats at mean ± 10 std"];

/// Random frames with floats drawn around the checkpoint's normalisation,
/// all-0 / all-255 frames, and floats ten standard deviations out: `n` of
/// each of the four kinds ([`SYNTHETIC_CASES`]), one block after another
/// (seeded through libtorch's generator). The parity check and the
/// quantized check both run on them.
pub fn synthetic_observations(
    arch: &Architecture,
    mean: &[f32],
    std: &[f32],
    n: usize,
    seed: u64,
) -> anyhow::Result<Observations> {
    use tch::{Device, Kind, Tensor};
    let (h, w) = arch.image.as_ref().map_or((1, 1), |i| (i.height, i.width));
    let f = arch.float_dim;
    tch::manual_seed(seed as i64);
    let random_frames =
        Tensor::randint(256, [n as i64, (h * w) as i64], (Kind::Int64, Device::Cpu));
    let random_frames: Vec<u8> =
        Vec::<i64>::try_from(random_frames.view(-1))?.into_iter().map(|x| x as u8).collect();
    let z: Vec<f32> =
        Vec::try_from(Tensor::randn([(3 * n * f) as i64], (Kind::Float, Device::Cpu)))?;
    let mut obs = Observations::default();
    for kind in 0..4 {
        match kind {
            1 => obs.frames.extend(std::iter::repeat_n(0u8, n * h * w)),
            2 => obs.frames.extend(std::iter::repeat_n(255u8, n * h * w)),
            _ => obs.frames.extend_from_slice(&random_frames),
        }
        for i in 0..n {
            obs.floats.extend((0..f).map(|j| {
                let z = match kind {
                    3 => {
                        if (i + j) % 2 == 0 {
                            10.0
                        } else {
                            -10.0
                        }
                    }
                    k => z[(k * n + i) * f + j],
                };
                mean[j] + std[j] * z
            }));
        }
        obs.n += n;
    }
    Ok(obs)
}

/// Runs both models on `obs` (batches of 256) and compares them head by head.
pub fn compare_quantized(
    rt: Runtime,
    arch: &Architecture,
    fp32: &[u8],
    quant: &[u8],
    obs: &Observations,
) -> anyhow::Result<QuantReport> {
    let mut a = Model::open(rt, ModelSource::Bytes(fp32.to_vec()), 1).context("opening f32")?;
    let mut b = Model::open(rt, ModelSource::Bytes(quant.to_vec()), 1).context("opening quant")?;
    let (h, w) = arch.image.as_ref().map_or((1, 1), |i| (i.height, i.width));
    let (f, heads) = (arch.float_dim, arch.n_heads);
    let mut sums = vec![HeadStats::default(); heads];
    let mut max_dvalue = 0f64;
    let mut start = 0;
    while start < obs.n {
        let bsz = 256.min(obs.n - start);
        let img = &obs.frames[start * h * w..(start + bsz) * h * w];
        let fl = &obs.floats[start * f..(start + bsz) * f];
        let (la, va) = a.run_actor_critic([bsz, 1, h, w], img, [bsz, f], fl)?;
        let (lb, vb) = b.run_actor_critic([bsz, 1, h, w], img, [bsz, f], fl)?;
        for (x, y) in va.iter().zip(&vb) {
            max_dvalue = max_dvalue.max(f64::from((x - y).abs()));
        }
        for row in 0..bsz {
            for (head, s) in sums.iter_mut().enumerate() {
                let at = (row * heads + head) * N_ACTIONS;
                let (p, q) = (&la[at..at + N_ACTIONS], &lb[at..at + N_ACTIONS]);
                let kl = kl_divergence(p, q);
                s.mean_kl += kl;
                s.max_kl = s.max_kl.max(kl);
                s.agreement += f64::from(u8::from(argmax(p) == argmax(q)));
            }
        }
        start += bsz;
    }
    for s in &mut sums {
        s.mean_kl /= obs.n as f64;
        s.agreement /= obs.n as f64;
    }
    Ok(QuantReport { observations: obs.n, heads: sums, max_dvalue })
}

/// KL(softmax(p) ‖ softmax(q)) in nats, computed in `f64`; infinite when
/// either side is not finite.
pub fn kl_divergence(p: &[f32], q: &[f32]) -> f64 {
    let log_softmax = |x: &[f32]| -> Vec<f64> {
        let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let z = x.iter().map(|&v| (f64::from(v) - m).exp()).sum::<f64>().ln();
        x.iter().map(|&v| f64::from(v) - m - z).collect()
    };
    if p.iter().chain(q).any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let (lp, lq) = (log_softmax(p), log_softmax(q));
    lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum::<f64>().max(0.0)
}

fn argmax(x: &[f32]) -> usize {
    x.iter().enumerate().fold(0, |best, (i, &v)| if v > x[best] { i } else { best })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_by_hand() {
        // p = softmax(ln 0.5, ln 0.5) = (1/2, 1/2); q = (1/4, 3/4):
        // KL = ½ ln 2 + ½ ln(2/3) = ½ ln(4/3).
        let p = [0.5f32.ln(), 0.5f32.ln()];
        let q = [0.25f32.ln(), 0.75f32.ln()];
        rulka_test_support::margin::close(
            "kl_divergence(&p, &q) vs 0.5 * (4.0f64 / 3.0).ln()",
            kl_divergence(&p, &q),
            0.5 * (4.0f64 / 3.0).ln(),
            1e-7,
        );
        // Shifting logits changes nothing; identical distributions give 0.
        let q2 = [0.25f32.ln() + 3.0, 0.75f32.ln() + 3.0];
        rulka_test_support::margin::close(
            "kl_divergence(&p, &q2) vs 0.5 * (4.0f64 / 3.0).ln()",
            kl_divergence(&p, &q2),
            0.5 * (4.0f64 / 3.0).ln(),
            1e-6,
        );
        assert_eq!(kl_divergence(&p, &p), 0.0);
        assert!(kl_divergence(&p, &[f32::NAN, 0.0]).is_infinite());
    }

    #[test]
    fn argmax_takes_the_first_of_ties() {
        assert_eq!(argmax(&[0.0, 2.0, 2.0, 1.0]), 1);
    }
}
