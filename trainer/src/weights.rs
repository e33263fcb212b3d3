//! The publish stage: the learner's weights to the collectors after every
//! update (a [`WeightSink`]), and to disk in periodic atomic checkpoints
//! (learner state, `weights.safetensors`, `model.onnx`).

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use anyhow::bail;
use rulka_checkpoint::Meta;
use rulka_config::Config;
use rulka_learner::Learner;
use rulka_transport::WeightSink;

/// Publishes the learner's weights (version = updates). A failure is an
/// error when `fatal` (shared memory), else a warning: the next update
/// publishes again. Weights that are not finite are never published.
pub(crate) fn publish(
    cfg: &Config,
    learner: &Learner,
    weights: &mut dyn WeightSink,
    fatal: bool,
) -> anyhow::Result<bool> {
    let w = learner.network().to_weights();
    if !w.all_finite() {
        tracing::warn!("\n[rulka train] weights are not finite: not published");
        return Ok(false);
    }
    let bytes = w.to_safetensors(&Meta::new(cfg, learner.frames))?;
    match weights.publish(learner.updates, &bytes) {
        Ok(()) => Ok(true),
        Err(e) if !fatal => {
            tracing::warn!(
                "\n[rulka train] publishing weights v{}: {e}; the next update tries again",
                learner.updates
            );
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Held while a checkpoint writes the learner state and `summary.json`. The
/// exit at a second interrupt (`train::run`) takes it and never gives it
/// back, so the summary a run leaves always describes the state `LATEST`
/// names, and no checkpoint starts after.
pub(crate) static CHECKPOINTING: Mutex<()> = Mutex::new(());

/// Writes a checkpoint: the learner's state, then `summary` as
/// `summary.json` with `checkpoint` set to the state's path in the run
/// (`state/state.N…`; together, under [`CHECKPOINTING`]), then
/// `weights.safetensors` and the `model.onnx` exported from exactly those
/// bytes (so it carries their frame count), each atomically. Returns the
/// state's path in the run.
pub(crate) fn checkpoint(
    cfg: &Config,
    run_dir: &Path,
    learner: &Learner,
    summary: &mut serde_json::Value,
) -> anyhow::Result<String> {
    let w = learner.network().to_weights();
    if !w.all_finite() {
        bail!("weights are not finite; refusing to checkpoint them");
    }
    let run = crate::RunDir::new(run_dir);
    let name = {
        let _held = CHECKPOINTING.lock().unwrap_or_else(PoisonError::into_inner);
        let sdir = learner.save_state(&run.state())?;
        let name = format!("state/{}", sdir.file_name().unwrap_or_default().to_string_lossy());
        summary["checkpoint"] = serde_json::Value::String(name.clone());
        rulka_checkpoint::write_atomic(
            &run.summary_json(),
            serde_json::to_string_pretty(summary)?.as_bytes(),
        )?;
        name
    };
    let bytes = w.to_safetensors(&Meta::new(cfg, learner.frames))?;
    rulka_checkpoint::write_atomic(&run.weights(), &bytes)?;
    let onnx = rulka_export::export_from_safetensors(cfg, &bytes, "weights.safetensors")?;
    rulka_checkpoint::write_atomic(&run.model_onnx(), &onnx)?;
    Ok(name)
}
