//! `rulka pretrain`: behaviour cloning of demonstration shards (`rulka
//! demos record`) into a new run directory that `rulka train --resume`
//! continues with the config's reinforcement-learning algorithm. The run is
//! built in a staging folder beside it and moved in place at the end, so an
//! interrupted pretraining leaves no half-written run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use rulka_checkpoint::{write_atomic, Meta, Tensor as WTensor, Weights};
use rulka_demos::read_demos;
use rulka_learner::{pretrain, EventWriter, Learner};
use rulka_trainer::{load_config, BadInput, RunDir};
use tch::{Device, Kind};

/// Arguments of `rulka pretrain`.
#[derive(Debug, clap::Args)]
pub struct PretrainArgs {
    /// Config: the network, the `pretrain:` settings, and the RL run that follows.
    #[arg(long)]
    pub config: PathBuf,
    /// Folder of demonstration shards (`rulka demos record -o DIR`).
    #[arg(long)]
    pub demos: PathBuf,
    /// Run directory to create (default: the config's `training.run_dir`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Replace a run already in the run directory.
    #[arg(long)]
    pub fresh: bool,
}

fn tensor_of(t: &tch::Tensor) -> anyhow::Result<WTensor> {
    let shape = t.size().iter().map(|&d| d as usize).collect();
    let flat = t.detach().to_device(Device::Cpu).to_kind(Kind::Float).contiguous().view(-1);
    Ok(WTensor { shape, data: Vec::<f32>::try_from(&flat)? })
}

/// Runs `rulka pretrain`.
pub fn run(a: &PretrainArgs) -> anyhow::Result<()> {
    let mut cfg = load_config(&a.config)?;
    if let Some(r) = &a.run_dir {
        cfg.training.run_dir = r.clone();
    }
    let run_dir = cfg.training.run_dir.clone();
    let occupied = std::fs::read_dir(&run_dir).is_ok_and(|mut d| d.next().is_some());
    if occupied && !a.fresh {
        return Err(BadInput(format!(
            "{} already holds a run; pass --fresh to replace it, or --run-dir DIR",
            run_dir.display()
        ))
        .into());
    }
    let demos = read_demos(&a.demos, &cfg)?;
    let pairs: usize = demos.iter().map(|d| d.len().saturating_sub(1)).sum();
    let p = &cfg.pretrain;
    println!(
        "[rulka pretrain] {} drive(s), {pairs} state-action pairs from {}; offsets {:?} ms, dropout {}, {:.0} % of the drives held out",
        demos.len(),
        a.demos.display(),
        p.bc_time_offsets_ms,
        p.dropout,
        p.held_out_fraction * 100.0
    );
    let staging = RunDir::new(&run_dir).staging("pretraining")?;
    let result = build(&cfg, &demos, &staging, &run_dir, a);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

fn build(
    cfg: &rulka_config::Config,
    demos: &[rulka_demos::Demo],
    staging: &Path,
    run_dir: &Path,
    a: &PretrainArgs,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(staging).with_context(|| format!("creating {}", staging.display()))?;
    let run = RunDir::new(staging);
    let mut tb = EventWriter::create(&run.tensorboard())?;
    let epochs = cfg.pretrain.epochs;
    let device = rulka_trainer::learner_device(cfg.training.device).map_err(BadInput)?;
    println!("[rulka pretrain] on {}", rulka_trainer::device_name(device));
    let t0 = Instant::now();
    let pre = pretrain(cfg, demos, device, |s| {
        for (tag, v) in [
            ("Pretrain/train_loss", s.train_loss),
            ("Pretrain/train_accuracy", s.train_accuracy),
            ("Pretrain/held_out_loss", s.held_out_loss),
            ("Pretrain/held_out_cross_entropy", s.held_out_cross_entropy),
            ("Pretrain/held_out_accuracy", s.held_out_accuracy),
            ("Pretrain/held_out_value_loss", s.held_out_value_loss),
        ] {
            tb.scalar(tag, i64::from(s.epoch), v)?;
        }
        println!(
            "[rulka pretrain] epoch {}/{epochs}: train loss {:.4}, accuracy {:.1} %; held-out loss {:.4} (cross-entropy {:.4}), accuracy {:.1} %, value loss {:.4}; {:.0} s",
            s.epoch,
            s.train_loss,
            100.0 * s.train_accuracy,
            s.held_out_loss,
            s.held_out_cross_entropy,
            100.0 * s.held_out_accuracy,
            s.held_out_value_loss,
            t0.elapsed().as_secs_f64()
        );
        Ok(())
    })?;
    drop(tb);
    let r = &pre.report;
    let mut snapshot = cfg.clone();
    snapshot.training.run_dir = run_dir.to_path_buf();
    write_atomic(&run.config_yaml(), snapshot.to_yaml().as_bytes())?;
    pre.net.save(&run.weights(), &snapshot, 0)?;
    if !pre.heads.is_empty() {
        let mut heads = Weights::default();
        for (i, (w, b)) in pre.heads.iter().enumerate() {
            heads.tensors.insert(format!("bc_heads.{i}.weight"), tensor_of(w)?);
            heads.tensors.insert(format!("bc_heads.{i}.bias"), tensor_of(b)?);
        }
        heads.write(&run.bc_heads(), &Meta::new(&snapshot, 0))?;
    }
    let learner = Learner::with_network(&snapshot, pre.net);
    learner.save_state(&run.state())?;
    let report = serde_json::json!({
        "demos": std::fs::canonicalize(&a.demos).unwrap_or_else(|_| a.demos.clone()),
        "drives": demos.iter().map(|d| &d.source).collect::<Vec<_>>(),
        "bc_time_offsets_ms": cfg.pretrain.bc_time_offsets_ms,
        "report": r,
    });
    write_atomic(&run.pretrain_json(), serde_json::to_string_pretty(&report)?.as_bytes())?;
    if run_dir.exists() {
        std::fs::remove_dir_all(run_dir)
            .with_context(|| format!("replacing {}", run_dir.display()))?;
    }
    std::fs::rename(staging, run_dir)
        .with_context(|| format!("moving {} to {}", staging.display(), run_dir.display()))?;
    println!(
        "[rulka pretrain] kept epoch {} of {}{}: held-out accuracy {:.1} % ({} drives, {} pairs), training accuracy {:.1} %",
        r.best_epoch,
        r.epochs,
        if r.stopped_early { " (stopped early)" } else { "" },
        100.0 * r.held_out_accuracy,
        r.held_out_drives,
        r.held_out_pairs,
        100.0 * r.train_accuracy
    );
    println!(
        "wrote {}: config.yaml, state/, weights.safetensors, pretrain.json, tensorboard/",
        run_dir.display()
    );
    println!("continue with reinforcement learning:  rulka train --resume {}", run_dir.display());
    Ok(())
}
