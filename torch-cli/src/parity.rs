//! Parity between the tch network and its ONNX export on ONNX Runtime.

use anyhow::Context as _;
use rulka_checkpoint::Weights;
use rulka_config::Config;
use rulka_inference::{Model, ModelSource, Runtime};
use rulka_learner::ActorCritic;
use tch::{Device, Tensor};

/// Largest allowed absolute difference between the two runtimes' outputs.
pub const TOLERANCE: f32 = 1e-4;

/// One input case and the largest differences seen on it.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// What the inputs were.
    pub case: String,
    /// Batch size.
    pub batch: usize,
    /// max |logits_tch − logits_onnx|.
    pub logits: f32,
    /// max |value_tch − value_onnx|.
    pub value: f32,
}

/// Every case, and the overall maxima.
#[derive(Debug, Clone)]
pub struct ParityReport {
    /// Per case.
    pub cases: Vec<CaseResult>,
}

impl ParityReport {
    /// Largest logits difference over all cases.
    pub fn max_logits(&self) -> f32 {
        self.cases.iter().map(|c| c.logits).fold(0.0, f32::max)
    }
    /// Largest value difference over all cases.
    pub fn max_value(&self) -> f32 {
        self.cases.iter().map(|c| c.value).fold(0.0, f32::max)
    }
    /// Both maxima within [`TOLERANCE`] (and finite).
    pub fn passed(&self) -> bool {
        let (l, v) = (self.max_logits(), self.max_value());
        l.is_finite() && v.is_finite() && l <= TOLERANCE && v <= TOLERANCE
    }
}

/// Runs the tch network (evaluation mode, `weights` loaded) and the ONNX
/// model on the same inputs — seeded random frames and floats, all-0 and
/// all-255 frames, and floats ten standard deviations from their mean — for
/// each batch size, and reports the largest absolute differences. The ONNX
/// model runs with the config's `inference.intra_op_threads`, as collectors
/// run it.
pub fn check_parity(
    cfg: &Config,
    weights: &Weights,
    onnx: &[u8],
    rt: Runtime,
    batches: &[usize],
    seed: u64,
) -> anyhow::Result<ParityReport> {
    let mut net = ActorCritic::new(cfg, Device::Cpu, seed);
    net.load_weights(weights, cfg, false)?;
    net.set_training(false);
    let mut model =
        Model::open(rt, ModelSource::Bytes(onnx.to_vec()), cfg.inference.intra_op_threads as usize)
            .context("opening the exported model")?;
    let arch = net.arch().clone();
    let (h, w) = arch.image.as_ref().map_or((1, 1), |i| (i.height, i.width));
    let f = arch.float_dim;
    let (mean, std) =
        (&weights.tensors["float_inputs_mean"].data, &weights.tensors["float_inputs_std"].data);
    let mut cases = Vec::new();
    for &b in batches {
        let inputs = crate::quant_check::synthetic_observations(&arch, mean, std, b, seed)?;
        for (k, case) in crate::quant_check::SYNTHETIC_CASES.iter().enumerate() {
            let img_u8 = &inputs.frames[k * b * h * w..(k + 1) * b * h * w];
            let floats_v = &inputs.floats[k * b * f..(k + 1) * b * f];
            let img = Tensor::from_slice(img_u8).reshape([b as i64, 1, h as i64, w as i64]);
            let floats = Tensor::from_slice(floats_v).reshape([b as i64, f as i64]);
            let (tl, tv) = tch::no_grad(|| net.forward(&img, &floats));
            let tl: Vec<f32> = Vec::<f32>::try_from(tl.contiguous().view(-1))?;
            let tv: Vec<f32> = Vec::<f32>::try_from(tv.contiguous().view(-1))?;
            let (ol, ov) = model.run_actor_critic([b, 1, h, w], img_u8, [b, f], floats_v)?;
            cases.push(CaseResult {
                case: case.to_string(),
                batch: b,
                logits: max_abs_diff(&tl, &ol),
                value: max_abs_diff(&tv, &ov),
            });
        }
    }
    Ok(ParityReport { cases })
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| if x.is_finite() && y.is_finite() { (x - y).abs() } else { f32::INFINITY })
        .fold(0.0, f32::max)
}
