//! Optimisers (RAdam — the original's —, Adam, AdamW) with global
//! gradient-norm clipping and a non-finite guard: a step whose loss or
//! gradients hold NaN/inf is skipped and counted (weights untouched), and too
//! many consecutive skips abort with a clear error.
//!
//! With `loss_scaling` (fp16 autocast on CUDA) the loss is multiplied by a
//! dynamic scale before `backward` ([`Optimizer::backward`]) and gradients are
//! divided by it in [`Optimizer::step`], as PyTorch's `GradScaler`: the scale
//! starts at 2^16, halves on every step with non-finite gradients (skipped, as
//! always) and doubles after 2000 finite steps. Overflow skips only count
//! towards the abort once the scale is down to 1.

use anyhow::bail;
use rulka_config::OptimizerKind;
use tch::{Kind, Tensor};

/// Hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub struct OptimConfig {
    /// Which optimiser.
    pub kind: OptimizerKind,
    /// β1.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay (AdamW only).
    pub weight_decay: f64,
    /// Consecutive skipped steps that abort training.
    pub max_consecutive_skips: u32,
    /// Dynamic loss scaling (for fp16 autocast).
    pub loss_scaling: bool,
}

impl OptimConfig {
    /// The optimiser `training:` asks for (kind, β, ε, weight decay; 10
    /// consecutive skipped steps abort), with or without loss scaling.
    pub fn from_training(t: &rulka_config::TrainingConfig, loss_scaling: bool) -> Self {
        Self {
            kind: t.optimizer,
            beta1: t.adam_beta1,
            beta2: t.adam_beta2,
            eps: t.adam_epsilon,
            weight_decay: t.weight_decay,
            max_consecutive_skips: 10,
            loss_scaling,
        }
    }
}

/// Initial loss scale with `loss_scaling` (`GradScaler`'s).
pub const INITIAL_LOSS_SCALE: f64 = 65536.0;
/// Finite steps after which the loss scale doubles.
pub const LOSS_SCALE_GROWTH_INTERVAL: u32 = 2000;

/// What [`Optimizer::step`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepOutcome {
    /// Weights updated; the global gradient norm before clipping.
    Applied {
        /// L2 norm of all gradients before clipping.
        grad_norm: f64,
    },
    /// Loss or gradients were not finite: nothing changed.
    Skipped,
}

/// Adam-family optimiser over a fixed list of parameters.
#[derive(Debug)]
pub struct Optimizer {
    cfg: OptimConfig,
    params: Vec<Tensor>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    step: i64,
    skipped: u64,
    consecutive_skips: u32,
    scale: f64,
    good_steps: u32,
    frozen: Vec<bool>,
}

impl Optimizer {
    /// An optimiser for `params` (trainable tensors, e.g. `VarStore::trainable_variables`).
    pub fn new(params: Vec<Tensor>, cfg: OptimConfig) -> Self {
        let m = params.iter().map(Tensor::zeros_like).collect();
        let v = params.iter().map(Tensor::zeros_like).collect();
        let scale = if cfg.loss_scaling { INITIAL_LOSS_SCALE } else { 1.0 };
        let frozen = vec![false; params.len()];
        Self {
            cfg,
            params,
            m,
            v,
            step: 0,
            skipped: 0,
            consecutive_skips: 0,
            scale,
            good_steps: 0,
            frozen,
        }
    }

    /// Holds the parameters marked `true` (index for index with the
    /// optimiser's parameters) fixed: [`Optimizer::step`] leaves them and
    /// their moments untouched and leaves their gradients out of the norm,
    /// as if they did not require gradients. A shorter mask leaves the rest
    /// trainable.
    pub fn set_frozen(&mut self, frozen: &[bool]) {
        for (i, f) in self.frozen.iter_mut().enumerate() {
            *f = frozen.get(i).copied().unwrap_or(false);
        }
    }

    /// Back-propagates `loss` (multiplied by the loss scale when scaling).
    pub fn backward(&self, loss: &Tensor) {
        if self.scale == 1.0 {
            loss.backward();
        } else {
            (loss * self.scale).backward();
        }
    }

    /// The current loss scale (1 without loss scaling).
    pub fn loss_scale(&self) -> f64 {
        self.scale
    }

    /// Restores a saved loss scale.
    pub fn set_loss_scale(&mut self, scale: f64) {
        if self.cfg.loss_scaling && scale.is_finite() && scale >= 1.0 {
            self.scale = scale;
        }
    }

    /// Clears every gradient.
    pub fn zero_grad(&mut self) {
        for p in &self.params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// Steps taken (skipped ones excluded).
    pub fn steps(&self) -> i64 {
        self.step
    }

    /// Steps skipped for non-finite loss or gradients.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The moment estimates `(m, v)` per parameter, as `f32` data, plus the
    /// step and skip counters: everything needed to resume exactly.
    pub fn state(&self) -> (Vec<Vec<f32>>, Vec<Vec<f32>>, i64, u64) {
        let data = |ts: &[Tensor]| -> Vec<Vec<f32>> {
            ts.iter()
                .map(|t| {
                    Vec::<f32>::try_from(
                        &t.to_device(tch::Device::Cpu).to_kind(Kind::Float).reshape([-1]),
                    )
                    .unwrap_or_default()
                })
                .collect()
        };
        (data(&self.m), data(&self.v), self.step, self.skipped)
    }

    /// Restores [`Optimizer::state`]; the lengths must match the parameters.
    pub fn set_state(
        &mut self,
        m: &[Vec<f32>],
        v: &[Vec<f32>],
        step: i64,
        skipped: u64,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(
            m.len() == self.params.len() && v.len() == self.params.len(),
            "optimiser state has {} tensors, the network {}",
            m.len(),
            self.params.len()
        );
        tch::no_grad(|| -> anyhow::Result<()> {
            for (i, p) in self.params.iter().enumerate() {
                let n = p.numel();
                anyhow::ensure!(
                    m[i].len() == n && v[i].len() == n,
                    "optimiser state tensor {i} has the wrong size"
                );
                let shape = p.size();
                self.m[i].copy_(
                    &Tensor::from_slice(&m[i]).reshape(shape.as_slice()).to_device(p.device()),
                );
                self.v[i].copy_(
                    &Tensor::from_slice(&v[i]).reshape(shape.as_slice()).to_device(p.device()),
                );
            }
            Ok(())
        })?;
        self.step = step;
        self.skipped = skipped;
        self.consecutive_skips = 0;
        Ok(())
    }

    /// Clips the global gradient norm to `max_grad_norm` (see
    /// [`clip_coefficient`]) and applies one
    /// update at learning rate `lr` — unless `loss` or any gradient is not
    /// finite, in which case nothing changes and the skip is counted. Errors
    /// after `max_consecutive_skips` skips in a row.
    pub fn step(&mut self, loss: f64, lr: f64, max_grad_norm: f64) -> anyhow::Result<StepOutcome> {
        let grads: Vec<Option<Tensor>> = self
            .params
            .iter()
            .zip(&self.frozen)
            .map(|(p, &frozen)| Some(p.grad()).filter(|g| !frozen && g.defined()))
            .collect();
        // One host read for the global norm, not one per parameter.
        // Per-tensor L2 norms (one pass each; libtorch accumulates them in f64
        // on CPU), combined in f64: squaring large, e.g. loss-scaled, f32
        // gradients element-wise would overflow into false skips.
        let norms: Vec<Tensor> = grads.iter().flatten().map(Tensor::norm).collect();
        let grad_norm = if norms.is_empty() {
            0.0
        } else {
            let n = Tensor::stack(&norms, 0).to_kind(Kind::Double);
            n.square().sum(Kind::Double).double_value(&[]).sqrt() / self.scale
        };
        if !loss.is_finite() || !grad_norm.is_finite() {
            self.skipped += 1;
            self.good_steps = 0;
            if self.scale > 1.0 && loss.is_finite() {
                // fp16 overflow: a smaller scale next time, not a sign of divergence.
                self.scale = (self.scale / 2.0).max(1.0);
                return Ok(StepOutcome::Skipped);
            }
            self.consecutive_skips += 1;
            if self.consecutive_skips >= self.cfg.max_consecutive_skips.max(1) {
                bail!(
                    "{} consecutive optimiser steps had a non-finite loss or gradient (last loss {loss}, gradient norm {grad_norm}); stopping instead of training on garbage",
                    self.consecutive_skips
                );
            }
            return Ok(StepOutcome::Skipped);
        }
        self.consecutive_skips = 0;
        let clip = clip_coefficient(grad_norm, max_grad_norm);
        let scale = clip / self.scale;
        if self.cfg.loss_scaling {
            self.good_steps += 1;
            if self.good_steps >= LOSS_SCALE_GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good_steps = 0;
            }
        }
        self.step += 1;
        let t = self.step as f64;
        let (b1, b2, eps) = (self.cfg.beta1, self.cfg.beta2, self.cfg.eps);
        let bc1 = 1.0 - b1.powf(t);
        let bc2 = 1.0 - b2.powf(t);
        // In-place updates (one or two temporaries per tensor): the optimiser
        // is a large share of a small network's step.
        tch::no_grad(|| {
            for (i, g) in grads.iter().enumerate() {
                let Some(g) = g else { continue };
                let mut g = g.shallow_clone();
                if scale != 1.0 {
                    let _ = g.g_mul_scalar_(scale);
                }
                let mut p = self.params[i].shallow_clone();
                let m = &mut self.m[i];
                let v = &mut self.v[i];
                // m ← β1·m + (1−β1)·g ; v ← β2·v + (1−β2)·g²
                let _ = m.lerp_(&g, 1.0 - b1);
                let _ = v.lerp_(&g.square(), 1.0 - b2);
                // p ← p − step·m / (√v + ε·√bc2) with step = lr·√bc2 / bc1 (Adam), or
                // lr·rect·√bc2 / bc1 (RAdam, rectified), written as p += m / denom.
                let adam_like = |p: &mut Tensor, step: f64, eps_scaled: f64| {
                    let mut denom = v.sqrt();
                    let _ = denom.g_add_scalar_(eps_scaled);
                    let _ = denom.g_mul_scalar_(-1.0 / step);
                    let _ = p.addcdiv_(m, &denom);
                };
                match self.cfg.kind {
                    OptimizerKind::Adam | OptimizerKind::Adamw => {
                        if self.cfg.kind == OptimizerKind::Adamw && self.cfg.weight_decay > 0.0 {
                            let _ = p.g_mul_scalar_(1.0 - lr * self.cfg.weight_decay);
                        }
                        adam_like(&mut p, lr * bc2.sqrt() / bc1, eps * bc2.sqrt());
                    }
                    OptimizerKind::Radam => {
                        let rho_inf = 2.0 / (1.0 - b2) - 1.0;
                        let rho_t = rho_inf - 2.0 * t * b2.powf(t) / bc2;
                        if rho_t > 5.0 {
                            let rect = ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
                                / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
                                .sqrt();
                            adam_like(&mut p, lr * rect * bc2.sqrt() / bc1, eps);
                        } else {
                            let _ = p.g_add_(&(&*m * (-lr / bc1)));
                        }
                    }
                }
            }
        });
        Ok(StepOutcome::Applied { grad_norm })
    }
}

/// The factor the gradients are scaled by for a global norm of
/// `grad_norm` under the clip `max_grad_norm` (PyTorch's
/// `clip_grad_norm_`): `max / (norm + 1e-6)` when the clip is on (above 0)
/// and the norm is above it, else 1. The clipped norm is then at most the
/// clip, and short of it by at most a relative 1e-6 / norm.
pub fn clip_coefficient(grad_norm: f64, max_grad_norm: f64) -> f64 {
    if max_grad_norm > 0.0 && grad_norm > max_grad_norm {
        max_grad_norm / (grad_norm + 1e-6)
    } else {
        1.0
    }
}
